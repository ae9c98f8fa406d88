"""The public API: open a database, then read snapshots and write transactions.

    db = annodb.open("memory.db")
    with db.write() as w:                      # commits on a clean exit, aborts on an exception
        added = w.add("The goth rock scene...", docno="n1")
        w.annotate("judgment:t1", added.start, added.end, 3)
    with db.read() as r:                       # one snapshot for the whole block
        for hit in r.search('(^ goth rock)', k=10):
            print(hit.docno, hit.score, hit.snippet)

Writes are buffered inside the transaction and written to LMDB at commit (or when the
buffer grows large), so nothing is visible to anyone else before commit and an abort or a
crash leaves the last committed state. Reads inside a write see the transaction's own work.

Processes: any number may open one database. After fork() (os.fork, multiprocessing's
default 'fork' method on Linux) a Database opened before it reopens itself in the child on
its first use there (LMDB forbids using the parent's environment), and annodb.open() in the
child opens afresh; a snapshot or write transaction begun before the fork belongs to the
parent and raises StorageError in the child. A child forked while a transaction of the
database was open (in any thread) cannot open that database at all (closing the inherited
copy would end the parent's transaction): it gets a StorageError saying so; fork outside
transactions, or use the 'spawn' or 'forkserver' start method.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading

from . import list_cache, purge, storage
from .errors import StorageError
from .intervals import Intervals
from .list_cache import ListCache
from .paths import DEFAULT_PATH, default_path, is_collection
from .transaction import DOCUMENT, Added, Snapshot, Stats, Writer

__all__ = ["open", "Database", "Snapshot", "Writer", "Intervals", "Added", "Stats",
           "DEFAULT_PATH", "DOCUMENT"]


def open(path: str | os.PathLike | None = None, *, readonly: bool = False,
         create: bool = True, timeout: float = 30.0,
         cache_bytes: int | None = None, fold_diacritics: bool | None = None) -> "Database":
    """Open the one database at `path` (default: $ANNODB_DB or ./annodb.db): see
    collection.open (annodb.open), which opens a sharded collection too."""
    path = default_path(path)
    if is_collection(path):
        raise StorageError(f"{os.fspath(path)}: a sharded collection, not one database "
                           "(annodb.open opens either)")
    db = Database(os.fspath(path), readonly=readonly, create=create, timeout=timeout,
                  cache_bytes=cache_bytes)
    if fold_diacritics is not None:
        try:
            db._record_folding(bool(fold_diacritics))
        except BaseException:
            db.close()
            raise
    return db


class Database:
    def __init__(self, path: str, *, readonly: bool = False, create: bool = True,
                 timeout: float = 30.0, cache_bytes: int | None = None):
        self.path = path
        self.readonly = readonly
        self.timeout = timeout
        if cache_bytes is not None and cache_bytes < 0:
            raise StorageError(f"cache_bytes must be >= 0, not {cache_bytes}")
        self._cache_bytes = cache_bytes
        self._attach(storage.open_environment(path, readonly=readonly, create=create,
                                              timeout=timeout))
        self._closed = False

    def _attach(self, env: storage.Environment) -> None:
        self._env = env
        if env.lists is None:
            cache = self._cache_bytes
            env.lists = ListCache(list_cache.CACHE_BYTES if cache is None else cache)
        elif self._cache_bytes is not None:
            assert isinstance(env.lists, ListCache)   # (storage, below lists, holds an object)
            env.lists.max_bytes = int(self._cache_bytes)
        self._lists = env.lists  # decoded lists shared by snapshots of one commit

    def _environment(self) -> storage.Environment:
        """The environment, opened afresh in a forked child: LMDB forbids using the
        parent's (see storage.environment._after_fork)."""
        self._check_open()
        if self._env.pid != os.getpid():
            self._attach(storage.open_environment(self._env.path, readonly=self.readonly,
                                                  create=False, timeout=self.timeout))
        return self._env

    def read(self) -> "Snapshot":
        """A read snapshot: a context manager that sees one committed state for its life."""
        env = self._environment()
        return Snapshot(self, storage.Txn(env, write=False), self._lists)

    def write(self, timeout: float | None = None, *, allocate=None) -> "Writer":
        """A write transaction: a context manager that commits on a clean exit and aborts on
        an exception. Waits up to `timeout` seconds for another writer, then raises
        WriterBusyError. `allocate(batch, next free address)` -> the starts of a batch's
        documents, when they go elsewhere than right after the content (a sharded
        collection's shard: the collection's global addresses; see Writer.add_batch)."""
        env = self._environment()
        if self.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        load_write_kernels()  # before the lock: no other writer waits while numba loads
        lock = storage.WriterLock(env, self.timeout if timeout is None else timeout)
        lock.acquire()
        try:
            return Writer(self, storage.Txn(env, write=True), lock, allocate)
        except BaseException:
            lock.release()
            raise

    def _record_folding(self, fold: bool) -> None:
        with self.read() as r:
            if r.fold_diacritics == fold:
                return
            empty = r.address_space() == 0 and r.document_count() == 0
        if not empty or self.readonly:
            have = "folds" if not fold else "does not fold"
            raise StorageError(
                f"{self.path}: this database {have} diacritics (set when it was created) "
                f"and holds content; ingest into a new database "
                f"{'with' if fold else 'without'} --fold-diacritics to change it")
        with self.write() as w:
            w.set_folding(fold)

    def compact(self, dest: str | os.PathLike) -> None:
        """Write a compacted copy of the database to the new directory `dest`: the pages
        freed by earlier transactions are left out (an ingest in many batches leaves a
        sixth of its file free). Nothing of erased content is kept: not its postings, nor
        the name of a word or label only it used (purge.compact)."""
        purge.compact(self._environment(), os.fspath(dest), self.timeout)

    def stats(self) -> Stats:
        with self.read() as r:
            return r.stats()

    def release_mapped_pages(self) -> bool:
        """Let go of the database file's pages this process has touched through the map
        (they stay in the page cache): a long ingest calls this after each commit so its
        resident memory does not grow with the database (storage.release_mapped_pages)."""
        return storage.release_mapped_pages(self._environment())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            storage.close_environment(self._env)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path}: database is closed")

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"annodb.Database({self.path!r})"


# ------------------------------------------------------------------ the first write

_rehearsal = threading.RLock()
_rehearsed = False   # (a forked child inherits the parent's loaded kernels, and this)
_rehearsing = False

# The query of ranking.load_kernels: every GCL operator, so a writer's own reads load nothing
_EVERY_OPERATOR = '(+ (^ "a b" c) (... d e) (<< f (# 3)) (>> : g) (!< h :) (!> : i))'


_REHEARSAL = "annodb-rehearsal-"   # its scratch directories: this, the process id, "-", ...


def _sweep_rehearsals() -> None:
    """Remove the scratch directories of rehearsals whose process is gone (killed in one:
    a SIGKILL leaves its directory behind)."""
    try:
        names = os.listdir(tempfile.gettempdir())
    except OSError:
        return
    for name in names:
        if not name.startswith(_REHEARSAL):
            continue
        pid = name[len(_REHEARSAL):].partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue   # alive (or another user's: not ours to remove)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)


def load_write_kernels() -> None:
    """Load, once in this process, every kernel a write transaction can run, before a write
    takes the writer lock (Database.write calls this). numba loads a kernel from its cache
    (or compiles it) on first use: inside the lock, a new process's first write held every
    other writer off for 2-6 s. The kernels are loaded by rehearsing: a write transaction of
    each kind (documents, records with fields and a sparse vector, annotations, notes,
    reads and searches of every ranking, erases, deletes, appends to existing lists) on a
    scratch database in a temporary directory, thrown away after; so whatever signatures
    the real code uses are the ones loaded (its directory is named by the process id, and a
    directory left by a process killed meanwhile is removed by the next rehearsal). Best
    effort: if no scratch database can be made
    (no temporary directory), the write goes on and loads its kernels as it runs."""
    global _rehearsed, _rehearsing
    if _rehearsed:
        return
    with _rehearsal:
        if _rehearsed or _rehearsing:   # (the rehearsal's own writes come back here)
            return
        _rehearsing = True
        try:
            _rehearse()
        except Exception:  # noqa: BLE001 - best effort: the write then loads as it runs
            pass
        finally:
            _rehearsing = False
            _rehearsed = True


def _rehearse() -> None:
    _sweep_rehearsals()
    scratch = tempfile.mkdtemp(prefix=f"{_REHEARSAL}{os.getpid()}-")
    try:
        with Database(os.path.join(scratch, "db")) as db:
            for first in (True, False):   # the second appends to lists the first made
                with db.write() as w:
                    a = w.add("a b c rehearsal of every kernel " * 3, docno="a" if first
                              else "a2")
                    w.add_many([({"docid": f"r{i}{first}", "title": "d e", "text":
                                  "f g h i " * (200 if i == 2 else 2), "n": i,
                                  "v": {"g": 1.5}}, None) for i in range(3)],
                               sparse_fields=["v"])
                    w.annotate("label:x", a.start, a.end, 2.0)
                    w.note(a.docno, "a note about it", note_docno=f"note:{a.docno}")
                    w.intervals("label:x")
                    w.find(a.docno)
                    w.count(_EVERY_OPERATOR, lenient=True)
                    for rank in ("ssr", "bm25", "fused", "bm25+rm3"):
                        w.search(_EVERY_OPERATOR, k=2, lenient=True, rank=rank)
                        w.search_text("c f g", k=2, rank=rank)
                    w.search_text({"g": 1.0}, k=2, rank="sparse")
                    w.search("c", k=2, container="note:")
                    w.erase(a.start + 1, a.start + 1)
                    w.text(a.start, a.end)
                    if not first:
                        w.delete("a")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
