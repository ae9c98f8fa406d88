"""A sharded collection: one collection over many annodb databases
(ARCHITECTURE.md "Shards").

    db = annodb.open("web.shards", shards=4)        # created with 4 shards if missing
    with db.write() as w:                           # one shard per transaction
        w.add("Goth rock grew out of post-punk.", docno="n1")
    with db.read() as r:                            # one snapshot over every shard
        r.search("(^ goth rock)", k=10)

Layout: a directory holding `manifest.json` (the format, the shard count, how documents
are routed, the tokenizer, options such as fold_diacritics, the collection's id),
`shard-000` ... (ordinary annodb databases), `addresses` (the collection's next free
address: the counter of addresses handed out) and the lock files `addresses.lock` and
`writer.lock`.

**A collection knows its shards.** Each shard records (its meta key "collection") the
collection's id, its index and the shard count; every open checks each shard folder
against the manifest, and refuses, naming the folder, what was expected and what was
found, a shard that is missing (an unmounted disk, a partial copy), records another place
(folders swapped, the manifest's count edited, a shard of another collection) or none (made
anew by an older annodb). Shards are made only when the collection is (`create_collection`: a marker
`creating.json` first, then the shards, then the manifest, so an interrupted making is
completed by the same command run again); an open never makes one. A collection made before
shards recorded this is checked by its folders and the routing of each shard's first
documents, and adopted (its identity recorded) at its first read-write open.

**Address space.** Each shard maps storage.MAP_SIZE (1 TiB) of address space, less where
it is short (down to MIN_SHARD_MAP here), and a process that opens a collection maps every
shard: `max_shards()` is how many this process can map, and a collection of more is
refused when it would be made, before anything is written.

**Global addresses.** Every document gets the address it would have in one database
holding the same documents in the same order: a shard's documents sit at their global
addresses, with gaps where the other shards' documents are. So addresses are unique over
the collection, a ranking's ties (by address) fall exactly as in one database, raw query
results merge by address, and `text(p, q)` / `document_at(a)` find their shard by address.
New documents take their addresses from the counter under `addresses.lock`, so two writers
(or an ingest beside a writer) never hand out the same ones. The counter is never behind
the shards: every open that may write raises it to the highest address a shard holds. A
counter that is not a number up to 2**53 is damaged: an open that may write refuses it
(saying how to repair it: delete the file with no writer running, and the next read-write
open sets it from the shards), and `check` reports it.

**Routing.** A document lives in shard `route(docno, N)`: the first 8 bytes of the SHA-1 of
its docno (UTF-8), big-endian, modulo N. A note (Writer.note) and every annotation, erase
and delete go where their document is, so each document and everything about it lives in
one shard. A document kept apart whose docno was not chosen for it (a note) lives with its
target, so lookups by docno try the routed shard first, then the others.

**Transactions.** A read is one snapshot of every shard, taken together (each shard's is
ACID; a write committed to one shard while the snapshots were being taken may or may not
be in it). A write transaction writes one shard and is ACID exactly as one database's; one
that would write a second shard is refused (AnnodbError naming both) before anything of it
is written. Sharded write transactions take turns (`writer.lock`, like one database's
writer lock). `annodb ingest` writes every shard in parallel, committing per shard and
batch; a rerun completes an interrupted one (idempotent by docno).

**Exactness.** A ranked query counts covers inside one container, all of which lie in one
shard: per-shard rankings merged by (score descending, address) are exactly one database's
(tested against it). Scores weighing words by collection statistics (BM25, BM25F, sparse
vectors, SSR's free-text tiers) take the shards' summed (statistics.combine), computed
once per query by the sharded snapshot and given to each shard's ranking; a fused
ranking fuses the merged SSR and BM25 rankings. What differs from one database holding the
same documents: an interval spanning documents of two shards is never formed, so `count`
and `query` can differ for queries whose intervals cross documents (`"darkness gen"`
across two verses), and so can a ranking whose containment operand crosses documents
(`(<< A B)` or `(!< A B)` with a B interval spanning two documents); `(# n)` windows run
over each shard's address space.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import re
import resource
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import batch, database, storage, tokenizer
from ..errors import StorageError, WriterBusyError
from ..paths import CREATING, MANIFEST, is_collection
from ..transaction import NOTES, Stats
from . import worker as shard_worker
from .routing import IDENTITY, Homes, identity, identity_problem, shard_index, shard_name
from .routing import route as route_of
from .transactions import ShardedSnapshot, ShardedWriter, load_merge_kernels

FORMAT = "annodb-shards"
VERSION = 1
ROUTING = "sha1-64-mod"   # int.from_bytes(sha1(docno utf-8)[:8], "big") % shards
MAX_SHARDS = 1024
MIN_SHARD_MAP = 1 << 30   # the least map a shard is counted as mappable with (max_shards)
COUNTER = "addresses"
ROUTED = 16       # documents per shard whose routing an unrecorded collection's open checks
HOMES = 200_000   # ranked containers whose shard is remembered (document_at)
FAN_OUTS = ("sequential", "threads", "processes")


def read_manifest(path: str) -> dict:
    where = os.path.join(path, MANIFEST)
    if not os.path.exists(where) and os.path.exists(os.path.join(path, CREATING)):
        raise StorageError(f"{path}: this collection's making was interrupted (no "
                           "manifest yet); run the command that made it again to complete "
                           "it (e.g. the same `annodb ingest --shards N` or `annodb split`)")
    manifest = _read_json(where, "the collection's manifest")
    if manifest.get("format") != FORMAT:
        raise StorageError(f"{where}: not an annodb sharded collection's manifest")
    if manifest.get("version") != VERSION:
        raise StorageError(f"{where}: collection format version {manifest.get('version')!r}; "
                           f"this annodb reads version {VERSION} (upgrade annodb)")
    n = manifest.get("shards")
    if not isinstance(n, int) or not 1 <= n <= MAX_SHARDS:
        raise StorageError(f"{where}: bad shard count {n!r}")
    if manifest.get("routing") != ROUTING:
        raise StorageError(f"{where}: unknown routing {manifest.get('routing')!r} "
                           f"(this annodb routes by {ROUTING})")
    if manifest.get("tokenizer") != tokenizer.NAME:
        raise StorageError(f"{where}: made with tokenizer {manifest.get('tokenizer')!r}; this "
                           f"annodb tokenizes as {tokenizer.NAME!r}")
    if "id" in manifest and not (isinstance(manifest["id"], str) and manifest["id"]):
        raise StorageError(f"{where}: bad collection id {manifest['id']!r}")
    return manifest


def write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with builtins.open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class ShardError(StorageError):
    """A collection whose shard folders do not match its manifest: `problems` lists each
    (the message is the first)."""

    def __init__(self, path: str, problems: list[str]):
        others = len(problems) - 1
        more = f" (and {others} more problem{'s' if others > 1 else ''})" if others else ""
        super().__init__(f"{problems[0]}{more}; {path}: the collection is refused: restore "
                         "its shard folders as they were (annodb never makes a shard anew "
                         "once the collection exists)")
        self.problems = problems


def _gib(n: int) -> str:
    return f"{n / (1 << 40):,.0f} TiB" if n >= 1 << 40 else f"{n / (1 << 30):,.1f} GiB"


def address_space() -> tuple[int, str]:
    """The bytes of address space this process may map in all, and what sets that: the
    machine's user address space (the top of the stack's mapping rounded up to a power of
    two: 128 TiB on x86-64) or, when lower, the address-space limit (ulimit -v)."""
    space, what = 1 << 47, "the machine's user address space"
    try:
        with builtins.open("/proc/self/maps") as f:
            for line in f:
                if line.rstrip().endswith("[stack]"):
                    end = int(line.split("-", 1)[1].split()[0], 16)
                    space = 1 << (end - 1).bit_length()
                    break
    except (OSError, ValueError):
        pass
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY and soft < space:
        space, what = soft, f"the address-space limit, ulimit -v {soft // 1024}"
    return space, what


def _mapped_now() -> int:
    """The address space this process maps now (VmSize)."""
    try:
        with builtins.open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def max_shards() -> tuple[int, str]:
    """How many shards this process can map, and why no more: each maps storage.MAP_SIZE
    or, as the space runs short, the largest power of two left (as storage does), counted
    down to MIN_SHARD_MAP; a sixteenth of the space (at least 1 GiB) is left for everything
    else the process maps."""
    space, what = address_space()
    used = _mapped_now()
    free = space - used - max(1 << 30, space // 16)
    n, size = 0, storage.MAP_SIZE
    while n < MAX_SHARDS:
        while size > free and size > MIN_SHARD_MAP:
            size //= 2
        if size > free:
            break
        free -= size
        n += 1
    why = (f"each shard maps {_gib(storage.MAP_SIZE)} of address space (down to "
           f"{_gib(MIN_SHARD_MAP)} where it runs short) in every process that opens the "
           f"collection, and this one may map {_gib(space)} ({what}), {_gib(used)} of it "
           f"in use")
    return n, why


def check_shard_count(shards) -> None:
    """StorageError unless `shards` is a count a collection can be made with here (1 to
    MAX_SHARDS, and no more than this process can map: max_shards)."""
    if not isinstance(shards, int) or isinstance(shards, bool) or \
            not 1 <= shards <= MAX_SHARDS:
        raise StorageError(f"the shard count must be 1 to {MAX_SHARDS}, not {shards!r}")
    most, why = max_shards()
    if shards > most:
        raise StorageError(f"{shards} shards are more than one process can open: {why}; "
                           f"at most {most} shards here")


_LEFT_BY_CREATE = re.compile(r"addresses\.lock|creating\.json\.\d+\.tmp")


def check_new_directory(path: str, allowed=_LEFT_BY_CREATE) -> None:
    """StorageError unless `path` is missing or an empty directory (but for names
    `allowed` matches: what an interrupted create leaves before its marker)."""
    if os.path.exists(path) and (not os.path.isdir(path) or any(
            not allowed.fullmatch(name) for name in os.listdir(path))):
        raise StorageError(f"{path}: exists and is not an empty directory; a sharded "
                           "collection is made in a new one (`annodb split` turns a "
                           "database into shards)")


def new_manifest(shards: int, fold_diacritics: bool) -> dict:
    return {"format": FORMAT, "version": VERSION, "shards": shards, "routing": ROUTING,
            "tokenizer": tokenizer.NAME, "fold_diacritics": bool(fold_diacritics),
            "id": uuid.uuid4().hex}


def _json(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2).encode() + b"\n"


def create_collection(path: str, shards: int, fold_diacritics: bool, *, new: bool = True,
           timeout: float = 30.0) -> dict:
    """Make a new collection of `shards` shards at `path` (missing or an empty directory;
    new=False: it may hold files already, a split's marker), or complete one whose making
    was interrupted (its marker CREATING there: the same count and options asked for).
    The marker (the manifest to be) is written first, then each shard with its identity,
    then the manifest, and the marker removed: a collection is whole or not yet one. Two
    processes making the same collection take turns (`addresses.lock`). Returns the
    manifest."""
    path = os.fspath(path)
    check_shard_count(shards)
    marker = os.path.join(path, CREATING)
    if new and not os.path.exists(marker):
        check_new_directory(path)
    try:
        os.makedirs(path, exist_ok=True)
        with _FileLock(os.path.join(path, COUNTER + ".lock"), timeout,
                       "the collection being made"):
            if os.path.isfile(os.path.join(path, MANIFEST)):
                return read_manifest(path)   # (made meanwhile, by another process)
            if os.path.exists(marker):
                manifest = _read_json(marker, "the marker of a collection being made")
                if manifest.get("shards") != shards or \
                        manifest.get("fold_diacritics") != bool(fold_diacritics):
                    raise StorageError(
                        f"{path}: a collection of {manifest.get('shards')} shards "
                        f"({'' if manifest.get('fold_diacritics') else 'not '}folding "
                        "diacritics) was being made here; run that again to complete it, "
                        "or make this one in a new directory")
            else:
                if new:
                    check_new_directory(path)
                manifest = new_manifest(shards, fold_diacritics)
                write_atomic(marker, _json(manifest))
            for i in range(shards):
                _create_shard(path, i, manifest, timeout)
            write_atomic(os.path.join(path, MANIFEST), _json(manifest))
            os.unlink(marker)
    except OSError as err:
        raise StorageError(f"{path}: cannot create the collection: "
                           f"{err.strerror or err}") from None
    return manifest


def _create_shard(path: str, i: int, manifest: dict, timeout: float) -> None:
    """Shard i of a collection being made, with its identity (and folding), or check the
    one an interrupted making left."""
    where = os.path.join(path, shard_name(i))
    want = identity(manifest["id"], i, manifest["shards"])
    with database.Database(where, timeout=timeout) as db:
        with db.read() as r:
            found = r._txn.meta(IDENTITY)
            empty = r.address_space() == 0 and r.document_count() == 0
        if found == want:
            return
        if found is not None or not empty:
            raise StorageError(identity_problem(where, found, want) or
                               f"{where}: holds content already")
        with db.write() as w:
            w._txn.set_meta(IDENTITY, want)
            if manifest.get("fold_diacritics"):
                w.set_folding(True)


def folder_problems(path: str, n: int) -> list[str]:
    """The shard folders of the collection at `path` against its count `n`: each of
    shard-000 ... missing (no folder, or one holding no database) and each past the count."""
    problems = []
    here = [os.path.exists(os.path.join(path, shard_name(i), "data.mdb")) for i in range(n)]
    for i in range(n):
        where = os.path.join(path, shard_name(i))
        if not here[i]:
            what = "missing" if not os.path.isdir(where) else "holds no database"
            count = ", or the manifest's shard count changed" if not any(here[i:]) else ""
            problems.append(f"{where}: {what} (expected shard {i} of {n}: an unmounted "
                            f"disk, a partial copy{count}?)")
    try:
        names = sorted(os.listdir(path))
    except OSError as err:
        return problems + [f"{path}: cannot list the collection: {err.strerror}"]
    for name in names:
        k = shard_index(name)
        if k is not None and k >= n:
            problems.append(f"{os.path.join(path, name)}: a shard folder past the "
                            f"manifest's {n} shards (was its shard count changed?)")
    return problems


def _read_json(where: str, what: str) -> dict:
    try:
        with builtins.open(where, "rb") as f:
            found = json.loads(f.read())
    except (OSError, ValueError) as err:
        raise StorageError(f"{where}: cannot read {what}: {err}") from None
    if not isinstance(found, dict):
        raise StorageError(f"{where}: cannot read {what}: not a JSON object")
    return found


def open(path, *, shards: int | None = None, readonly: bool = False, create: bool = True,
         timeout: float = 30.0, cache_bytes: int | None = None,
         fold_diacritics: bool | None = None,
         fan_out: str = "sequential", spin: float | None = None) -> "ShardedDatabase":
    """Open the sharded collection at `path`; with `shards`, create it (N shards) when
    missing. annodb.open(path) calls this for a directory holding a manifest. `fan_out`
    and `spin`: how a query's per-shard work runs (ShardedDatabase)."""
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, MANIFEST)):
        if shards is None or readonly or not create:
            if is_collection(path):
                read_manifest(path)   # (raises: a collection whose making was interrupted)
            raise StorageError(f"{path}: no sharded collection here" + (
                "" if shards is None else " (create one with `annodb ingest --shards N`)"))
        create_collection(path, shards, bool(fold_diacritics), timeout=timeout)
    manifest = read_manifest(path)
    if shards is not None and shards != manifest["shards"]:
        raise StorageError(f"{path}: the collection has {manifest['shards']} shards, not "
                           f"{shards} (`annodb split` makes a collection of another count)")
    fold = manifest.get("fold_diacritics", False)
    if fold_diacritics is not None and bool(fold_diacritics) != fold:
        have = "folds" if fold else "does not fold"
        raise StorageError(f"{path}: this collection {have} diacritics (set when it was "
                           "created); make a new one to change it")
    return ShardedDatabase(path, manifest, readonly=readonly, timeout=timeout,
                           cache_bytes=cache_bytes, fan_out=fan_out, spin=spin)


class _FileLock:
    """An exclusive flock on a file, waiting up to `timeout` seconds."""

    def __init__(self, path: str, timeout: float, what: str):
        self.path, self.timeout, self.what = path, timeout, what
        self.fd: int | None = None

    def acquire(self) -> "_FileLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(self.timeout, 0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise WriterBusyError(
                        f"{self.path}: {self.what} held by another writer for "
                        f"{self.timeout:g}s; try again when it has committed") from None
                time.sleep(0.005)

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)  # (closing drops the flock)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class ShardedDatabase:
    """A sharded collection, open: the same API as annodb.Database (read, write, stats,
    close), each call over every shard.

    `fan_out` says how a query's per-shard work runs (benchmarks/RESULTS.md, "Shards",
    measures each): "sequential", one shard after another in this process (the default);
    "threads", on a thread per shard (only the kernels release the GIL: the evaluator's
    Python work per shard holds it, and the threads wait for each other); "processes",
    the first shard in this process and each other one in a worker process of its own
    (annodb.shards.worker, started at open, ended at close): the workers are asked at once,
    the first shard is ranked meanwhile, then their answers are merged (a query's budget
    of postings then counts per shard, as on Ray; its time limit is the same clock's).
    A worker found ended (killed, crashed) or cut off (a request interrupted by Ctrl-C) is
    replaced by a new one at the next read(): a worker only reads, so the new one serves
    its shard as the old did; the snapshots that used the old one raise ShardLostError.
    Until the new one is ready (its start takes a moment), reads rank its shard in this
    process instead, so no read waits for it; one that cannot start (its shard cannot be
    opened) leaves its shard to this process.
    The workers and this process poll `spin` seconds for a message before they sleep
    (shard_worker; 0 never polls, and a worker then burns no CPU between requests). None:
    shard_worker.SPIN when the collection's processes, one per shard, fit the machine's
    cores, else 0 (a server of several processes each opening the collection says 0 when
    theirs do not).
    Writes always run in this process."""

    def __init__(self, path: str, manifest: dict, *, readonly: bool = False,
                 timeout: float = 30.0, cache_bytes: int | None = None,
                 fan_out: str = "sequential", spin: float | None = None):
        if fan_out not in FAN_OUTS:
            raise StorageError(f"fan_out must be one of {', '.join(FAN_OUTS)}, not "
                               f"{fan_out!r}")
        if spin is None:
            spin = shard_worker.spin_for(manifest["shards"])
        if not isinstance(spin, (int, float)) or isinstance(spin, bool) or \
                not 0 <= spin <= 1:
            raise StorageError(f"spin must be 0 to 1 seconds, not {spin!r}")
        self.fan_out = fan_out
        self.threads = fan_out == "threads"
        self.workers: list = []     # per shard, its worker's Connection (None: in process)
        self.path = path
        self.manifest = manifest
        self.readonly = readonly
        self.timeout = timeout
        self.fold_diacritics = bool(manifest.get("fold_diacritics", False))
        n = manifest["shards"]
        per_shard = None if cache_bytes is None else int(cache_bytes) // n
        self.shards: list[database.Database] = []
        self.homes = Homes(HOMES)       # the shards of recently ranked containers
        self.restarts = 0               # workers replaced (see _live_workers)
        self._starting: dict = {}       # shard -> its new worker, not ready yet
        self._restarting = threading.Lock()
        self._worker_options = (per_shard, spin)
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        try:
            problems = folder_problems(path, n)
            if problems:
                raise ShardError(path, problems)
            for i in range(n):
                self.shards.append(self._open_shard(i, per_shard))
            self._check_identities()
            for db in self.shards:
                if self.fold_diacritics and not readonly:
                    db._record_folding(True)
            if not readonly:
                self.reserve(0)  # the counter is never behind the shards
            if fan_out == "processes":
                self.workers = [None] + [self._start_worker(i) for i in range(1, n)]
                for w in self.workers[1:]:
                    w.wait_ready()
        except BaseException:
            self.close()
            raise

    def _open_shard(self, i: int, cache_bytes: int | None) -> database.Database:
        try:
            return database.Database(os.path.join(self.path, shard_name(i)),
                                     readonly=self.readonly, create=False,
                                     timeout=self.timeout, cache_bytes=cache_bytes)
        except StorageError as err:
            if "cannot map the database" not in str(err):   # (storage.environment._open_lmdb's)
                raise
            raise StorageError(
                f"{self.path}: cannot map {shard_name(i)} (shard {i + 1} of "
                f"{self.manifest['shards']}): this process's address space ran out after "
                f"{i} shards: {max_shards()[1]}; open the collection where more is "
                "available, or split its database into fewer shards") from None

    def _check_identities(self) -> None:
        """Refuse shards that do not record the places the manifest gives them (see the
        module docstring); a collection that records none yet (made by an older annodb)
        has each shard's first documents' routing checked instead, and is adopted (each
        shard's identity recorded, then the manifest's id) at a read-write open."""
        n = len(self.shards)
        found = []
        for db in self.shards:
            with db.read() as r:
                found.append(r._txn.meta(IDENTITY))
        cid = self.manifest.get("id")
        if cid is None:   # (an older annodb's collection, or one being adopted)
            ids = {f.get("id") for f in found if isinstance(f, dict)}
            cid = ids.pop() if len(ids) == 1 else None
            problems = [] if len(ids) < 2 else [
                f"{self.path}: its shards record {len(ids) + 1} collections"]
            problems += [p for i, f in enumerate(found) if f is not None
                         for p in [identity_problem(self.shards[i].path, f,
                                                    identity(cid, i, n))] if p]
            problems += self._routing_problems()
            if problems:
                raise ShardError(self.path, problems)
            if not self.readonly:
                self._adopt(cid or uuid.uuid4().hex, found)
            return
        problems = [p for i, f in enumerate(found)
                    for p in [identity_problem(self.shards[i].path, f,
                                               identity(cid, i, n))] if p]
        if problems:
            raise ShardError(self.path, problems)

    def _routing_problems(self) -> list[str]:
        """Each shard whose first ROUTED documents (of the collection, not notes, which
        live with their targets) do not all route to it."""
        n, problems = len(self.shards), []
        for i, db in enumerate(self.shards):
            with db.read() as r:
                seen = 0
                docs = r.documents()
                for k, doc in enumerate(docs):
                    if k >= 64 * ROUTED:   # (notes all along: enough read)
                        break
                    if doc.container == NOTES:
                        continue
                    home = route_of(doc.docno, n)
                    if home != i:
                        problems.append(
                            f"{db.path}: holds {doc.docno!r}, which routes to "
                            f"{shard_name(home)} of {n} (shard folders renamed or swapped, "
                            "or the manifest's shard count changed?)")
                        break
                    seen += 1
                    if seen >= ROUTED:
                        break
                docs.close()        # (its cursor, before the snapshot ends)
        return problems

    def _adopt(self, cid: str, found: list) -> None:
        """Record the identity of each shard of a collection made before shards recorded
        it, then the id in the manifest (under the writer lock: one process adopts)."""
        with _FileLock(os.path.join(self.path, "writer.lock"), self.timeout,
                       "the collection's writer lock"):
            manifest = read_manifest(self.path)
            if manifest.get("id") is not None:     # (adopted meanwhile)
                self.manifest = manifest
                return self._check_identities()
            n = len(self.shards)
            for i, db in enumerate(self.shards):
                if found[i] is None:
                    with db.write() as w:
                        w._txn.set_meta(IDENTITY, identity(cid, i, n))
            manifest["id"] = cid
            write_atomic(os.path.join(self.path, MANIFEST), _json(manifest))
            self.manifest = manifest

    def _start_worker(self, i: int, warm_first: bool = False) -> "shard_worker.Connection":
        per_shard, spin = self._worker_options
        return shard_worker.start(os.path.join(self.path, shard_name(i)), per_shard,
                                  f"{self.path}/{shard_name(i)}", spin, warm_first)

    def _live_workers(self) -> list:
        """The workers for a read. One that ended or was cut off is replaced: a new one is
        started, and its shard ranked in this process (None) until it is ready, its
        kernels loaded."""
        workers = list(self.workers)   # (another thread's read may replace one meanwhile)
        if not self._starting and all(w is None or w.alive() for w in workers):
            return workers
        with self._restarting:
            self._check_open()
            for i, w in enumerate(self.workers):
                if w is not None and not w.alive():
                    w.close(wait=0)      # (one cut off may still be ranking: not waited for)
                    self.workers[i] = None
                    self._starting[i] = self._start_worker(i, warm_first=True)
                    self.restarts += 1
            for i, new in list(self._starting.items()):
                if not new.started():
                    continue
                del self._starting[i]
                try:
                    new.wait_ready()     # (at once: it said so, or ended)
                except Exception:  # noqa: BLE001 - any failure: its shard stays here
                    new.close()
                    continue
                self.workers[i] = new
                self.shards[i]._lists.clear()  # (what was decoded here meanwhile)
            return list(self.workers)

    def wait_for_workers(self, timeout: float = 60.0) -> None:
        """Return once every worker being started is ready or has failed to start (tests,
        benchmarks: the next read then uses them)."""
        deadline = time.monotonic() + timeout
        while self._starting and time.monotonic() < deadline:
            self._live_workers()
            time.sleep(0.01)

    # ------------------------------------------------------------------ the API

    def read(self) -> "ShardedSnapshot":
        """One snapshot over every shard (see the module docstring)."""
        self._check_open()
        parts = []
        try:
            if self.workers:   # (a worker's snapshot is asked for, not waited for)
                for db, w in zip(self.shards, self._live_workers()):
                    parts.append(db.read() if w is None else
                                 shard_worker.RemotePart(w, w.open_snapshot()))
            else:
                for db in self.shards:
                    parts.append(db.read())
        except BaseException:
            for part in parts:
                part.close()
            raise
        return ShardedSnapshot(self, parts)

    def write(self, timeout: float | None = None) -> "ShardedWriter":
        """A write transaction of one shard (the first one it writes; see the module
        docstring): commits on a clean exit, aborts on an exception."""
        self._check_open()
        if self.readonly:
            raise StorageError(f"{self.path}: opened read-only")
        wait = self.timeout if timeout is None else timeout
        database.load_write_kernels()  # before the lock, as Database.write (numba loads)
        load_merge_kernels()
        lock = _FileLock(os.path.join(self.path, "writer.lock"), wait,
                         "the collection's writer lock").acquire()
        try:
            parts = [db.read() for db in self.shards]
        except BaseException:
            lock.release()
            raise
        return ShardedWriter(self, parts, lock, wait)

    def stats(self) -> Stats:
        with self.read() as r:
            return r.stats()

    def compact(self, dest) -> None:
        """A compacted copy of every shard, and the manifest, in the new directory
        `dest` (see Database.compact)."""
        self._check_open()
        dest = os.fspath(dest)
        check_new_directory(dest)
        try:
            os.makedirs(dest, exist_ok=True)
            for i, db in enumerate(self.shards):   # (the shards' identities copied whole)
                db.compact(os.path.join(dest, shard_name(i)))
            write_atomic(os.path.join(dest, COUNTER), str(self._counter()).encode())
            write_atomic(os.path.join(dest, MANIFEST), _json(self.manifest))  # (last)
        except OSError as err:
            raise StorageError(f"{dest}: cannot write the copy: {err.strerror or err}"
                               ) from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            with self._restarting:
                for w in self.workers + list(self._starting.values()):
                    if w is not None:
                        w.close()
                self._starting.clear()
            for db in self.shards:
                db.close()

    def __enter__(self) -> "ShardedDatabase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"annodb.ShardedDatabase({self.path!r}, shards={len(self.shards)})"

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path}: collection is closed")

    # ------------------------------------------------------------------ addresses

    def _counter(self) -> int:
        """The address counter: 0 when there is none yet (a read-write open sets it from
        the shards); StorageError when it is damaged (not a number up to 2**53)."""
        where = os.path.join(self.path, COUNTER)
        try:
            with builtins.open(where, "rb") as f:
                raw = f.read(64)
        except FileNotFoundError:
            return 0
        except OSError as err:
            raise StorageError(f"{where}: cannot read the collection's address counter: "
                               f"{err.strerror}") from None
        text = raw.strip()
        if not text:
            return 0
        if re.fullmatch(rb"[0-9]{1,16}", text) and int(text) <= storage.MAX_ADDRESS:
            return int(text)
        shown = text[:24].decode("ascii", "replace") + ("..." if len(text) > 24 else "")
        raise StorageError(
            f"{where}: the collection's address counter is damaged (it holds {shown!r}, "
            f"not an address up to 2**53 = {storage.MAX_ADDRESS:,}); to repair it, with no "
            "ingest or writer running, delete that file: the next read-write open sets it "
            "again from the shards")

    def reserve(self, n: int, at_least: int = 0) -> int:
        """Hand out `n` consecutive addresses: the first of them (at least `at_least`,
        past every address a shard holds and every one handed out before)."""
        with _FileLock(os.path.join(self.path, COUNTER + ".lock"), self.timeout,
                       "the collection's address counter"):
            base = max(self._counter(), int(at_least))
            for db in self.shards:
                with db.read() as r:
                    base = max(base, r.address_space())
            if base + int(n) > storage.MAX_ADDRESS:
                raise StorageError(
                    f"{self.path}: the collection's addresses are used up: {int(n):,} more "
                    f"from {base:,} pass 2**53 = {storage.MAX_ADDRESS:,}; nothing was "
                    "written")
            write_atomic(os.path.join(self.path, COUNTER), str(base + int(n)).encode())
        return base

    def allocate(self, b: batch.Batch, at_least: int) -> np.ndarray:
        """Global starts for a batch's documents, one after another (the `allocate` its
        shards' write transactions are given: Database.write)."""
        spans = b.spans()
        base = self.reserve(int(spans.sum()), at_least)
        return base + np.cumsum(spans) - spans

    # ------------------------------------------------------------------ fan-out

    def ask(self, parts: list, method: str, args: tuple, kwargs: dict) -> list:
        """part.method(*args, **kwargs) for each part, in order: the remote parts (worker
        processes, Ray actors: a part with `send`) asked first, all at once; the parts in
        this process computed while they work (see each); then the remote answers. An
        error is raised once every answer is in: the first part's that failed."""
        remote = [getattr(p, "send", None) is not None for p in parts]
        if not any(remote):
            return self.each(lambda p: getattr(p, method)(*args, **kwargs), parts)
        tickets = [p.send(method, args, kwargs) if r else None for p, r in zip(parts, remote)]
        out: list = [None] * len(parts)
        failed: list = []
        try:
            here = [i for i, r in enumerate(remote) if not r]
            for i, got in zip(here, self.each(lambda p: getattr(p, method)(*args, **kwargs),
                                              [parts[i] for i in here])):
                out[i] = got
        except BaseException as err:  # noqa: BLE001 - raised below, after the answers
            failed.append((min(here), err))
        for i, t in enumerate(tickets):
            if t is not None:
                try:
                    out[i] = parts[i].receive(t, method)
                except BaseException as err:  # noqa: BLE001 - raised below
                    failed.append((i, err))
        if failed:
            raise min(failed, key=lambda f: f[0])[1]
        return out

    def each(self, fn, items) -> list:
        """fn(item) for each item (one per shard), on threads if `threads` (the kernels
        release the GIL; benchmarks/RESULTS.md, "Shards", measures it)."""
        items = list(items)
        if len(items) < 2 or not self.threads:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(self.shards),
                                            thread_name_prefix="annodb-shard")
        return list(self._pool.map(fn, items))
