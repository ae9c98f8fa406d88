"""The environment: one database's LMDB environment opened (once per process and path) and
closed, its lock files, what a fork does to it, the thread that compresses documents, the
map's size and the pages of it a process has touched, and copies of it.

A database is one LMDB environment (a directory holding data.mdb and lock.mdb) and files
writer.lock and turnstile.lock that writers take (with a timeout, fairly) before LMDB's
own writer mutex, so a second writer waits for a bounded time and then gets a clear error
instead of hanging, and create.lock, which the process making the database holds until
it is made (LMDB's meta pages and annodb's meta written), so that another process opening
it meanwhile waits instead of finding data.mdb empty. What is stored in it: layout.py.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import struct
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, cast

import lmdb
import msgspec

from .. import tokenizer
from ..errors import FormatVersionError, StorageError, WriterBusyError
from ..paths import database_of_file
from .layout import (BLOCK_BYTES, BLOCK_SIZE, FORMAT_VERSION, _meta_decoder, _meta_encoder,
                     block_limits, check_format)
from .verify import (_verified_pinned, _verify, check_file_at_open, check_pages_at_open,
                     file_problems)

MAP_SIZE = 1 << 40  # 1 TiB of address space: sparse on disk, so the map never fills in use
MAX_READERS = 1024
_SUBDBS = ("meta", "features", "names", "blocks", "docs", "docnos", "erased", "counts",
           "tails", "changes")
_OPTIONAL = ("tails", "changes")  # sub-databases an older file lacks (opened read-only: None)


@dataclass
class Environment:
    """One open LMDB environment and its named sub-databases (one per process and path).
    `pid`: the process that opened it, the only one that may use it (see _after_fork)."""

    path: str
    env: lmdb.Environment
    dbs: dict
    readonly: bool
    lock_path: str
    thread_lock: threading.Lock
    users: int = 0
    vocab: dict = field(default_factory=dict)  # feature name -> id, for this process's
    #   writers (ids never change once committed; a writer that aborts removes the names it
    #   added; a name missing is looked up by the writer: transaction.Writer._ids)
    vocab_through: int = 1  # vocab holds every feature below this id (a writer here
    #   committed them all; next_feature still this: no other process interned one since)
    lists: object = None  # list_cache.ListCache, shared by this process's snapshots
    block_bytes: int = BLOCK_BYTES  # block_limits of the page size
    block_count: int = BLOCK_SIZE
    guard: float | None = None  # read without lock.mdb: the timeout of its shared flock
    pid: int = field(default_factory=os.getpid)
    txns: weakref.WeakSet = field(default_factory=weakref.WeakSet)  # open Txns
    writer_thread: int | None = None  # the thread holding thread_lock (see WriterLock)
    damage: str | None = None  # what a transaction found damaged: no write begins after it
    mapped: list = field(default_factory=list)  # the map's ranges (release_mapped_pages)


_open_envs: dict[str, Environment] = {}
_open_envs_lock = threading.Lock()
_lock_fds: set[int] = set()  # flock descriptors this process holds (writer.lock, turnstile)
_forked_busy: dict[str, int] = {}  # path -> pid of the parent whose copy the child keeps


_executor = None


def _pool():
    global _executor
    if _executor is None:
        from concurrent.futures import ThreadPoolExecutor
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="annodb-compress")
    return _executor


def stop_threads() -> None:
    """End the compressing thread of many documents (a later write starts it again): a
    process about to fork children ends its own threads first."""
    global _executor
    if _executor is not None:
        _executor.shutdown(wait=True)
        _executor = None


def _forget_pool() -> None:
    """In a forked child: the parent's compressing thread is not there; start afresh."""
    global _executor
    _executor = None


os.register_at_fork(after_in_child=_forget_pool)


def _after_fork() -> None:
    """In a forked child: LMDB forbids using an environment across fork(), and py-lmdb
    refuses a second open of one in a process. So the child's copies are dropped: each
    environment that had no transaction open at the fork is closed in the child (which
    touches nothing the parent uses: the parent's reader slots are the parent's) and is
    opened afresh on the child's first use; one with a transaction open (in some thread)
    cannot be closed without releasing the parent's reader slot, so the child keeps it
    untouched and refuses to open that database. The compression pool (its thread did not
    survive the fork) and the locks other threads may have held are made anew (and the
    zstd contexts, by documents.py), and the writer flocks inherited are closed (they stay
    the parent's)."""
    global _executor, _open_envs_lock
    _executor = None
    _open_envs_lock = threading.Lock()
    for fd in _lock_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    _lock_fds.clear()
    for real, e in _open_envs.items():
        if len(e.txns):
            _forked_busy[real] = e.pid
        else:
            try:
                e.env.close()
            except lmdb.Error:
                _forked_busy[real] = e.pid
    _open_envs.clear()


os.register_at_fork(after_in_child=_after_fork)


def _open_lock_file(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    _lock_fds.add(fd)
    return fd


def _close_lock_file(fd: int) -> None:
    _lock_fds.discard(fd)
    os.close(fd)


def seconds(t: float) -> str:
    """A duration for a message: "5s", "0.25s", "30s" (never "4.99999s")."""
    return (f"{t:.2f}".rstrip("0").rstrip(".") or "0") + "s"


def _flock_wait(fd: int, timeout: float, path: str, asked: float | None = None,
                shared: bool = False, doing: str = "writing") -> None:
    """Take the exclusive (or shared) flock on `fd`, waiting at most `timeout` seconds (of
    the `asked` timeout, which the error names, with what the holder is `doing`)."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise WriterBusyError(
                    f"{path}: another process has been {doing} for longer than the "
                    f"timeout ({seconds(timeout if asked is None else asked)}); retry when it "
                    "finishes, or raise the timeout") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


CREATE_LOCK = "create.lock"


def _making(real: str, path: str, timeout: float, exists: bool) -> int | None:
    """create.lock, held (its descriptor; close it to release): exclusively by a process
    about to make the database (`exists` False), shared by one opening it (waiting, at most
    `timeout` seconds, for the one making it to finish). None for a database made before
    create.lock (or a reader that may not create it): no one is making it now."""
    name = os.path.join(real, CREATE_LOCK)
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644) if not exists else \
            os.open(name, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as err:
        if exists:
            return None   # (unreadable: a reader of another user's database goes on)
        raise StorageError(f"{path}: cannot open database: {err.strerror}") from None
    _lock_fds.add(fd)
    try:
        _flock_wait(fd, timeout, path, shared=exists, doing="making the database")
    except BaseException:
        _close_lock_file(fd)
        raise
    return fd


def _take_writer_lock(real: str, timeout: float, path: str, asked: float | None = None
                      ) -> int:
    """The exclusive writer flock on writer.lock (its descriptor; close it to release),
    waiting at most `timeout` seconds. Fair: a waiter first holds turnstile.lock while it
    waits, so a process that just released the writer lock cannot take it straight back
    (busy writers committing batch after batch starved the others)."""
    deadline = time.monotonic() + timeout
    turn = _open_lock_file(os.path.join(real, "turnstile.lock"))
    try:
        asked = timeout if asked is None else asked
        _flock_wait(turn, timeout, path, asked)
        fd = _open_lock_file(os.path.join(real, "writer.lock"))
        try:
            _flock_wait(fd, max(deadline - time.monotonic(), 0.0), path, asked)
        except BaseException:
            _close_lock_file(fd)
            raise
        return fd
    finally:
        _close_lock_file(turn)  # closing the descriptor releases the turnstile


def _close_making(fd: int | None) -> None:
    """Release create.lock (see _making); None."""
    if fd is not None:
        _close_lock_file(fd)


LOCK_FILE_BYTES = 128 << 10  # lock.mdb with MAX_READERS reader slots fits in this


def _reserve_lock_file(real: str, path: str) -> None:
    """Give lock.mdb its disk blocks before LMDB maps it: LMDB creates it sparse and writes
    it through a shared mapping, where running out of disk is a SIGBUS that kills the
    process instead of an error."""
    lock = os.path.join(real, "lock.mdb")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, LOCK_FILE_BYTES)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise StorageError(f"{path}: no space left on the device") from None
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # no fallocate here: go on
            raise
    finally:
        os.close(fd)


def _open_lmdb(real: str, readonly: bool, lock: bool = True):
    """lmdb.open with the map at MAP_SIZE, or, where the address space is limited (ulimit
    -v), the largest power of two that maps and still holds the file twice over."""
    size = MAP_SIZE
    data = os.path.join(real, "data.mdb")
    floor = max(64 << 20, 2 * (os.path.getsize(data) if os.path.exists(data) else 0))
    while True:
        try:
            return lmdb.open(real, map_size=size, max_dbs=len(_SUBDBS) + 2,
                             max_readers=MAX_READERS, readonly=readonly, subdir=True,
                             readahead=False, create=not readonly, lock=lock)
        except lmdb.MemoryError:
            if size // 2 < floor:
                raise StorageError(
                    f"{real}: cannot map the database: the address space is limited "
                    "(ulimit -v); raise the limit") from None
            size //= 2


def page_problems(path: str) -> list[str]:
    """What is wrong with the LMDB file of the database at `path`, found without letting
    LMDB read it: its meta pages and length, then every page (lmdb.verify), while a read
    transaction pins the committed state's pages (a writer may go on meanwhile)."""
    real = os.path.realpath(path)
    problems, _ = file_problems(real)
    if problems:
        return problems
    found = _open_envs.get(real)
    if found is not None and found.pid == os.getpid() and found.guard is None:
        return _verified_pinned(found.env, real)
    if found is not None or not os.access(os.path.join(real, "lock.mdb"), os.W_OK):
        fd = _shared_flock(real, 30.0)  # (no reader slot to pin with: hold writers off)
        try:
            return _verify(real)
        finally:
            if fd is not None:
                _close_lock_file(fd)
    try:
        env = _open_lmdb(real, True)
    except lmdb.Error as err:
        return [f"LMDB cannot open the file: {err}"]
    try:
        return _verified_pinned(env, real)
    finally:
        env.close()


def open_environment(path: str, *, readonly: bool = False, create: bool = True,
                     timeout: float = 30.0) -> Environment:
    """Open (or share, within this process) the environment at `path`. A writable open
    needs a moment of LMDB's writer slot (to open the sub-databases): it waits for another
    writer at most `timeout` seconds."""
    real = os.path.realpath(path)
    if real in _forked_busy:
        raise StorageError(
            f"{path}: this process is a fork of process {_forked_busy[real]}, which had a "
            "transaction of this database open when it forked; a forked child cannot open "
            "the database (LMDB forbids using the parent's copy, and closing it would end the "
            "parent's transaction). Fork when no transaction is open, or start the child "
            "with multiprocessing's 'spawn' or 'forkserver' method")
    with _open_envs_lock:
        found = _open_envs.get(real)
        if found is not None and (found.readonly and not readonly):
            raise StorageError(f"{path}: already open read-only in this process")
        if found is not None:
            found.users += 1
            return found
        exists = os.path.exists(os.path.join(real, "data.mdb"))
        folder = database_of_file(path)
        if folder is not None:
            raise StorageError(f"{path}: a file of the database {folder}: give the folder")
        if not exists and (readonly or not create):
            raise StorageError(f"{path}: no annodb database here (create one with `annodb ingest`)")
        if os.path.exists(real) and not os.path.isdir(real):
            raise StorageError(f"{path}: not a database directory")
        # A reader that may not write lock.mdb (another user's database, a read-only
        # directory) cannot take a slot in LMDB's reader table: it reads without it
        # (MDB_NOLOCK), and instead each of its snapshots holds a shared flock on
        # writer.lock, which every writer holds exclusively, so no write runs meanwhile.
        lock_mdb = os.path.join(real, "lock.mdb")
        unlocked = readonly and not os.access(lock_mdb if os.path.exists(lock_mdb) else real,
                                              os.W_OK)
        making = None
        try:
            if not exists:
                os.makedirs(real, exist_ok=True)
            # (held until the database is made: another process opening it meanwhile
            # waits, where it found data.mdb empty, "truncated")
            making = _making(real, path, timeout, exists)
            if not exists and os.path.exists(os.path.join(real, "data.mdb")):
                _close_making(making)     # made meanwhile by another process: open it
                making = _making(real, path, timeout, True)   # as it is
                exists = True
            if exists:
                check_file_at_open(path, real)
            if not readonly:
                _reserve_lock_file(real, path)
            env = _open_lmdb(real, readonly, lock=not unlocked)
        except lmdb.Error as err:
            _close_making(making)
            raise StorageError(f"{path}: cannot open database: {err}") from None
        except OSError as err:
            _close_making(making)
            raise StorageError(f"{path}: cannot open database: {err.strerror}") from None
        except BaseException:
            _close_making(making)
            raise
        guard = None
        try:
            guard = _shared_flock(real, timeout) if unlocked else None
            if exists:
                check_pages_at_open(path, real, env, unlocked)
            if readonly:
                dbs = {}
                for name in _SUBDBS:
                    try:
                        dbs[name] = env.open_db(name.encode(), create=False)
                    except lmdb.NotFoundError:
                        if name not in _OPTIONAL:
                            raise
                        dbs[name] = None
            else:
                fd = _take_writer_lock(real, timeout, path)
                try:
                    with env.begin(write=True) as txn:
                        dbs = {name: env.open_db(name.encode(), txn=txn) for name in _SUBDBS}
                        _init_meta(txn, dbs["meta"])
                finally:
                    _close_lock_file(fd)  # closing the descriptor releases the flock
            with env.begin() as txn:
                _check_meta(path, txn, dbs["meta"])
        except (lmdb.Error, msgspec.DecodeError, struct.error) as err:
            env.close()
            raise StorageError(f"{path}: not an annodb database or damaged: {err}") from None
        except (StorageError, OSError):
            env.close()
            raise
        finally:
            if guard is not None:
                _close_lock_file(guard)
            _close_making(making)
        try:
            env.reader_check()  # slots left by killed readers would pin old pages forever
        except lmdb.Error:
            pass
        found = Environment(real, env, dbs, readonly, os.path.join(real, "writer.lock"),
                            threading.Lock(), 1, guard=timeout if unlocked else None)
        found.block_bytes, found.block_count = block_limits(env.stat()["psize"])
        _open_envs[real] = found
        return found


def close_environment(e: Environment) -> None:
    if e.pid != os.getpid():
        return  # a copy from before a fork: _after_fork dealt with it
    with _open_envs_lock:
        e.users -= 1
        if e.users <= 0:
            _open_envs.pop(e.path, None)
            e.env.close()


def _init_meta(txn, meta_db) -> None:
    if txn.get(b"format", db=meta_db) is None:
        for key, value in (("format", FORMAT_VERSION), ("tokenizer", tokenizer.VERSION),
                           ("next_address", 0), ("documents", 0), ("tokens", 0),
                           ("next_feature", 1)):
            txn.put(key.encode(), _meta_encoder.encode(value), db=meta_db)


def _check_meta(path, txn, meta_db) -> None:
    raw = txn.get(b"format", db=meta_db)
    if raw is None:
        raise StorageError(f"{path}: not an annodb database (no format version)")
    check_format(path, _meta_decoder.decode(raw))
    tok = _meta_decoder.decode(txn.get(b"tokenizer", db=meta_db))
    if tok != tokenizer.VERSION:
        raise FormatVersionError(
            f"{path}: database uses tokenizer {tok}, this annodb has tokenizer "
            f"{tokenizer.VERSION}; re-ingest with a matching version")


class WriterLock:
    """Exclusive writer lock: a thread lock (this process) plus flock (other processes)."""

    def __init__(self, env: Environment, timeout: float):
        self.env = env
        self.timeout = timeout
        self.fd: int | None = None

    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        me = threading.get_ident()
        if self.env.writer_thread == me:
            raise StorageError(
                f"{self.env.path}: a write transaction is already open in this thread, and "
                "a second one would wait for it forever; use the open one, or commit it "
                "before db.write()")
        if not self.env.thread_lock.acquire(timeout=max(self.timeout, 0)):
            raise WriterBusyError(
                f"{self.env.path}: another writer in this process held the database for "
                f"{seconds(self.timeout)}; retry, or raise the timeout")
        self.env.writer_thread = me
        try:
            self.fd = _take_writer_lock(self.env.path, max(deadline - time.monotonic(), 0.0),
                                        self.env.path, self.timeout)
            self.env.env.reader_check()  # a dead reader's snapshot must not pin pages
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self.env.pid != os.getpid():  # inherited across fork: the parent's, not ours
            self.fd = None
            return
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                _close_lock_file(self.fd)
                self.fd = None
        if self.env.thread_lock.locked():
            self.env.writer_thread = None
            self.env.thread_lock.release()


def _share_writer_lock(env: Environment) -> int | None:
    """_shared_flock for a snapshot of an environment read without lock.mdb."""
    return _shared_flock(env.path, cast(float, env.guard))


def _shared_flock(real: str, timeout: float) -> int | None:
    """A shared flock on writer.lock (its descriptor; close it to release), for reading
    without LMDB's reader table: it waits for a writer to finish (at most `timeout` seconds)
    and holds writers off until it is released. None when there is no writer.lock: no annodb
    writer has opened the database since it was made (a writable open creates it)."""
    try:
        fd = os.open(os.path.join(real, "writer.lock"), os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StorageError(f"{real}: cannot read writer.lock ({err.strerror}), which a "
                           "reader without write access to lock.mdb needs") from None
    _lock_fds.add(fd)
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                _close_lock_file(fd)
                raise WriterBusyError(
                    f"{real}: a writer has held the database for longer than the timeout "
                    f"({seconds(timeout)}); this process may not write lock.mdb, so it "
                    "reads only while no one writes. Retry when the writer finishes, or "
                    "raise the timeout") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def copy_compacted(e: Environment, dest: str) -> None:
    """Write a compacted copy of the environment to the new directory `dest`: only pages in
    use, renumbered (LMDB's MDB_CP_COMPACT); a consistent snapshot even while others write."""
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise StorageError(f"{dest}: exists and is not an empty directory")
    os.makedirs(dest, exist_ok=True)
    try:
        e.env.copy(dest, compact=True)
    except lmdb.Error as err:
        raise StorageError(f"{dest}: compacting failed: {err}") from None


def copy_rebuilt(e: Environment, dest: str, chunk: int = 20_000) -> None:
    """Write a copy of the environment to the new directory `dest` by putting every key
    and value of every sub-database, in key order, into a new environment: its B-trees
    are built afresh, so no byte of a deleted key or value survives. (LMDB's compacting
    copy keeps the pages in use as they are, and a branch page keeps, as a separator, the
    key of an entry deleted since.) Slower than copy_compacted; purge.py uses it."""
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise StorageError(f"{dest}: exists and is not an empty directory")
    os.makedirs(dest, exist_ok=True)
    out = _open_lmdb(dest, readonly=False)
    try:
        with e.env.begin(buffers=True) as src:
            for name in _SUBDBS:
                if e.dbs.get(name) is None:
                    continue
                with out.begin(write=True) as txn:
                    db = out.open_db(name.encode(), txn=txn)
                with src.cursor(db=e.dbs[name]) as cur:
                    items = []
                    for k, v in cur:
                        items.append((bytes(k), bytes(v)))
                        if len(items) == chunk:
                            _put_in_order(out, db, items)
                            items = []
                    _put_in_order(out, db, items)
        out.sync(True)
    except lmdb.Error as err:
        raise StorageError(f"{dest}: copying failed: {err}") from None
    finally:
        out.close()


def _put_in_order(env, db, items: list) -> None:
    if items:
        with env.begin(write=True) as txn, txn.cursor(db=db) as cur:
            cur.putmulti(items, append=True)


def explain_write_error(path: str, err: BaseException) -> str:
    """What a failed write means for the user: LMDB reports a full disk as an I/O error."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return "the disk is full"
    if isinstance(err, (lmdb.Error, OSError)):
        try:
            free = shutil.disk_usage(path).free
        except OSError:
            free = None
        if free is not None and free < 4 << 20:
            return f"the disk is full ({free:,} bytes free)"
    return str(err)


def disk_size(path: str) -> int:
    """Bytes the database occupies on disk (allocated blocks, not the sparse map size)."""
    total = 0
    for name in os.listdir(path):
        st = os.stat(os.path.join(path, name))
        total += st.st_blocks * 512
    return total


_MADV_DONTNEED = 4
_madvise: Any = None  # libc's madvise; False where there is none


def release_mapped_pages(e: Environment) -> bool:
    """Let go of the pages of the database file this process has touched through LMDB's
    memory map (Linux): they stay in the page cache, and come back at their next read
    (a minor fault), but stop counting in this process's resident memory. A long ingest
    reads its way through most of the file (every list it appends to), so without this
    its resident memory grows with the database. The map is read-only (no writemap), so
    nothing is lost. Returns whether it was done."""
    global _madvise
    if not sys.platform.startswith("linux"):
        return False
    if _madvise is None:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _madvise = libc.madvise
        except (OSError, AttributeError):
            _madvise = False
    if not _madvise:
        return False
    data = os.path.join(e.path, "data.mdb")
    ranges = [r for r in e.mapped if _still_mapped(r, data)] if e.mapped else []
    if not ranges:  # (found once: the map stays where LMDB put it while it is open)
        try:
            with open("/proc/self/maps") as f:
                ranges = [tuple(int(x, 16) for x in line.split()[0].split("-"))
                          for line in f if line.rstrip().endswith(data)]
        except OSError:
            return False
        e.mapped = ranges
    done = False
    for lo, hi in ranges:
        done = _madvise(lo, hi - lo, _MADV_DONTNEED) == 0 or done
    return done


def _still_mapped(r: tuple[int, int], data: str) -> bool:
    """Whether lo-hi is still a mapping of the file data (a readlink: the range is
    checked before madvise, which would zero anything else mapped there)."""
    try:
        return os.readlink(f"/proc/self/map_files/{r[0]:x}-{r[1]:x}") == data
    except OSError:
        return False
