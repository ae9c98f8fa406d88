"""One database's ingest (the package's __init__.py, which picks this or sharded.py, says
what an ingest guarantees): each batch of documents is one write transaction; an input of
PARALLEL_OVER bytes or more is read, parsed and tokenized in a second process (a plain
`python -c` child joined by a pipe) while this one writes."""

from __future__ import annotations

import bisect
import contextlib
import errno
import gc
import gzip
import itertools
import os
import pickle
import resource
import signal
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, NamedTuple

import msgspec
import numpy as np

from .. import batch, children, database, records, storage, transaction
from ..errors import AnnodbError, IngestError, WriterBusyError
from . import formats, inputs
from .formats import Problem as _Problem
from .inputs import Source, check_inputs, where

DEFAULT_BATCH_BYTES = 8 << 20   # a batch ends after this much input (and at batch_size docs)
MAX_MESSAGES = 1000              # problems kept in the summary (all are counted)
PARALLEL_OVER = 64 << 20          # inputs this big are read and tokenized in a second process

Progress = Callable[[int, int, int], None]   # (documents done, bytes read, bytes in all)


class Summary(msgspec.Struct):
    """What an ingest did. `skipped` counts the records not stored: `error_count` problems
    (malformed records and parts of files that could not be read) and the repeated docnos
    skipped (`duplicates`, unless replace). `present` counts those whose docno was in the
    database already (left as they were: a rerun resumes). `errors`, `warnings` and `notes`
    (how inputs were read) keep the first MAX_MESSAGES messages. `tokens` counts the
    addresses the new documents took (an empty document takes one)."""

    files: int = 0
    added: int = 0
    skipped: int = 0          # not stored: problems, and duplicates unless replace
    present: int = 0          # docno already in the database (left as it was)
    replaced: int = 0
    duplicates: int = 0       # docno repeated inside this input (skipped unless replace)
    error_count: int = 0
    errors: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    tokens: int = 0
    bytes: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def documents(self) -> int:
        """Documents written (added or replaced)."""
        return self.added + self.replaced

    def line(self) -> str:
        """A one-line human summary, starting `added N, skipped M`."""
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        files = "file" if self.files == 1 else "files"
        text = f"added {self.added:,}, skipped {self.skipped:,}"
        if self.skipped:
            repeated = self.skipped - self.error_count
            parts = [f"{n:,} {what}" for n, what in (
                (self.error_count, "malformed or unreadable"), (repeated, "repeated docnos"))
                if n]
            text += f" ({', '.join(parts)})"
        text += (f", already present {self.present:,}, replaced {self.replaced:,}; "
                 f"{self.files:,} {files}, {self.tokens:,} tokens in {self.seconds:.1f} s "
                 f"({rate:,.0f} tokens/s)")
        return text


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped an ingest: `summary` is what was committed before it (whole batches;
    the one in progress was thrown away). Running the same ingest again resumes it."""

    def __init__(self, summary: Summary):
        super().__init__("ingest interrupted")
        self.summary = summary


class _Chunk(NamedTuple):
    """One batch of a file as the reading side hands it to the writing side: the problems
    and documents in file order, the documents prepared and tokenized, and how many bytes
    of the file were consumed after it."""

    items: list                  # _Problem, and (line, docno) of each document (a plain
    #                              tuple: a named one pickles several times slower)
    batch: batch.Batch | None    # the documents, in order (None when there is none)
    tell: int


class _Rejected(Exception):
    """add() refused one document of a batch (the batch is redone without it)."""

    def __init__(self, index: int, err: Exception):
        super().__init__(str(err))
        self.index = index
        self.err = err


# ---------------------------------------------------------------- the reading side
# Reading, parsing, preparing and tokenizing need no database: for a big input they run in
# a second process (both cores busy), chunk by chunk ahead of the writer.


def _chunks(source: Source, id_field, text_fields, batch_bytes: int,
            batch_size: int | None, stop: threading.Event | None = None,
            sparse: tuple = ()) -> Iterator[_Chunk]:
    """The file's batches, made ready to add (`sparse`: the sparse fields)."""
    for pending, tell in _read_chunks(source, id_field, text_fields, batch_bytes, batch_size,
                                      stop):
        yield _made(*_prepared(pending, stop, sparse), tell, sparse)


def _read_chunks(source: Source, id_field, text_fields, batch_bytes: int,
                 batch_size: int | None, stop: threading.Event | None = None
                 ) -> Iterator[tuple[list, int]]:
    """The file's batches as read: (Doc and _Problem items, bytes consumed after them).
    KeyboardInterrupt between two records once `stop` is set (see _ctrl_c_noted)."""
    with contextlib.ExitStack() as stack:
        if source.format == "text":   # one file or a group: TextFiles opens each
            files = formats.TextFiles(source)
            items, tell = iter(files), files.tell
        else:
            try:
                reader, raw = formats.open_binary(source.path, source.gzip)
            except OSError as err:
                raise IngestError(f"{source.path}: cannot read: {err.strerror or err}"
                                  ) from None
            stack.enter_context(raw)
            stack.enter_context(reader)
            items = formats.READERS[source.format](reader, source, id_field, text_fields)
            tell = raw.tell
        pending: list = []
        docs, size = 0, 0
        while True:
            try:
                item = next(items, None)
            except (gzip.BadGzipFile, zlib.error, EOFError, OSError) as err:
                # the file itself broke off (a truncated download): keep what came before
                pending.append(_Problem(0, f"cannot read further: {err}"))
                break
            if item is None:
                break
            pending.append(item)
            if type(item) is tuple:  # a Doc (else a _Problem)
                docs += 1
                size += item[5]
                if stop is not None and not docs & 63 and stop.is_set():
                    raise KeyboardInterrupt
                if size >= batch_bytes or (batch_size and docs >= batch_size):
                    yield pending, tell()
                    pending, docs, size = [], 0, 0
        yield pending, tell()


def _prepared(pending: list, stop: threading.Event | None = None, sparse: tuple = ()
              ) -> tuple[list, list]:
    """(items, prepared): the _Problems and (line, docno) of the documents, in order, and
    the documents prepared (batch.prepare_item); one that cannot be is a problem.
    KeyboardInterrupt between two documents once `stop` is set (see _ctrl_c_noted)."""
    items, prepared = [], []
    prepare = batch.prepare_item
    for item in pending:
        if type(item) is not tuple:  # a _Problem
            items.append(item)
            continue
        if stop is not None and not len(items) & 63 and stop.is_set():
            raise KeyboardInterrupt
        line, docno, content, id_field, text_fields, _ = item
        try:
            p = prepare(content, docno, id_field, text_fields, sparse)
        except Exception as err:  # noqa: BLE001 - reported against its line, not raised
            items.append(_Problem(line, f"not stored: {err}"))
            continue
        items.append((line, docno))
        prepared.append(p)
    return items, prepared


def _made(items: list, prepared: list, tell: int, sparse: tuple = ()) -> _Chunk:
    """The chunk of these prepared documents, tokenized (see _prepared)."""
    if not prepared:
        return _Chunk(items, None, tell)
    try:
        made = batch.make(prepared, sparse=sparse)
    except UnicodeError:
        bad = set(batch.bad_documents(prepared))
        message = "not stored: document text is not valid Unicode (a lone surrogate)"
        k, kept_items, kept = 0, [], []
        for item in items:
            if not isinstance(item, _Problem):
                if k in bad:
                    item = _Problem(item[0], message)
                else:
                    kept.append(prepared[k])
                k += 1
            kept_items.append(item)
        items, prepared = kept_items, kept
        made = batch.make(prepared, sparse=sparse) if prepared else None
    return _Chunk(items, made, tell)


def _encoded(chunk: _Chunk) -> _Chunk:
    """The chunk with its documents encoded for the writer (see batch.with_raws)."""
    if chunk.batch is None or any(d is None for d in chunk.batch.docnos):
        return chunk
    try:
        return chunk._replace(batch=batch.with_raws(chunk.batch))
    except UnicodeError:  # the writer finds which document (see _Run._culprit)
        return chunk


def _packed(chunk: _Chunk) -> tuple:
    """The chunk as it crosses the pipe: its documents' lines as an array (their docnos
    are the batch's), its problems with their places: not a tuple per document, which
    took the reading process (the busier one) ~2 s to pickle on the scale corpus."""
    problems = [(i, item) for i, item in enumerate(chunk.items) if isinstance(item, _Problem)]
    lines = np.fromiter((item[0] for item in chunk.items if not isinstance(item, _Problem)),
                        dtype=np.int64)
    return problems, lines, chunk.batch, chunk.tell


def _unpacked(packed: tuple) -> _Chunk:
    problems, lines, made, tell = packed
    docs = zip(lines.tolist(), made.docnos) if made is not None else iter(())
    items: list = []
    for i, problem in problems:  # each back where it was
        items.extend(itertools.islice(docs, i - len(items)))
        items.append(problem)
    items.extend(docs)
    return _Chunk(items, made, tell)


def _reader_main() -> None:
    """The second process (`python -c` of this, see _chunks_from_process): read the
    arguments from stdin, write ("chunk", _Chunk) pickles to stdout, then ("end", None), or
    ("error", message) if reading fails. The pipe's buffer keeps it about one chunk ahead."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the writer's to handle
    gc.disable()  # see _no_cyclic_gc
    _set_malloc(_INGEST_MALLOC)  # see _keep_freed_memory (for the life of this process)
    out = sys.stdout.buffer
    source = None
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="annodb-make")
    failed = threading.Event()  # a chunk could not be made or sent: send none after it
    in_flight: list = []

    def make_and_send(items: list, prepared: list, tell: int, sparse: tuple) -> None:
        if failed.is_set():
            return
        try:
            chunk = _encoded(_made(items, prepared, tell, sparse))
            pickle.dump(("chunk", _packed(chunk)), out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except BaseException:
            failed.set()
            raise

    try:
        source, id_field, text_fields, batch_bytes, batch_size, sparse = \
            pickle.load(sys.stdin.buffer)
        # this thread reads, parses and prepares; a second one tokenizes (the kernel
        # releases the GIL), encodes and sends, in order, at most a chunk behind
        for pending, tell in _read_chunks(source, id_field, text_fields, batch_bytes,
                                          batch_size):
            in_flight.append(worker.submit(make_and_send, *_prepared(pending, sparse=sparse),
                                           tell, sparse))
            if len(in_flight) > 1:
                in_flight.pop(0).result()
        while in_flight:
            in_flight.pop(0).result()
        message = ("end", None)
    except BrokenPipeError:  # the writer stopped reading (it failed or was interrupted)
        return
    except BaseException as err:  # noqa: BLE001 - handed to the parent, which raises it
        message = ("error", str(err) if isinstance(err, AnnodbError) else
                   f"{getattr(source, 'path', 'input')}: reading failed: "
                   f"{type(err).__name__}: {err}")
    for done in in_flight:  # the chunks before the error go first (none after a failed one)
        try:
            done.result()
        except BaseException:  # noqa: BLE001 - the first failure is the one reported
            pass
    try:
        pickle.dump(message, out)
        out.flush()
    except BrokenPipeError:
        pass


def _chunks_from_process(source: Source, id_field, text_fields, batch_bytes,
                         batch_size, sparse: tuple = ()) -> Iterator[_Chunk]:
    """_chunks, made in a second Python process. A plain child process, not
    multiprocessing: that would re-run the caller's main script, and fork would copy this
    process's open LMDB environment."""
    child = children.start("from annodb.ingest.database import _reader_main; _reader_main()",
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        while True:
            try:
                if not child.stdin.closed:
                    with child.stdin:
                        pickle.dump((source, id_field, text_fields, batch_bytes, batch_size,
                                     sparse), child.stdin)
                kind, value = pickle.load(child.stdout)
            except (EOFError, BrokenPipeError, pickle.UnpicklingError):
                code = child.wait()
                raise IngestError(f"{source.path}: the reading process ended unexpectedly "
                                  f"(exit code {code}){children.said(child)}") from None
            if kind == "end":
                return
            if kind == "error":
                raise IngestError(value)
            yield _unpacked(value)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()
        child.errors.close()


# ---------------------------------------------------------------- the driver


class _Run:
    def __init__(self, db, *, replace, strict, timeout, batch_size, batch_bytes, progress,
                 on_problem, total_bytes, parallel=None, stop=None):
        self.db = db
        self.stop = stop            # set by Ctrl-C: stop before the next batch
        self.parallel = parallel
        self.replace = replace
        self.strict = strict
        self.timeout = timeout
        self.batch_size = max(1, int(batch_size)) if batch_size else None
        self.batch_bytes = batch_bytes
        self.progress = progress
        self.on_problem = on_problem
        self.total_bytes = total_bytes
        self.summary = Summary()
        self.bytes_before = 0       # bytes of the files already read
        # the address range of each batch this run committed: a document whose start lies
        # in one was written by this run (a repeat in the input), else it was there before
        # (or another process added it): memory by batches, not by documents
        self.firsts: list[int] = []
        self.lasts: list[int] = []

    # problems
    def problem(self, source: Source, line: int, message: str, pending: int = 0) -> None:
        text = f"{where(source, line)}: {message}"
        if self.strict:
            s = self.summary
            raise IngestError(
                f"{text} (stopped by strict; {s.added + s.replaced} documents of earlier "
                f"batches were committed, the {pending} of the current batch were not)")
        s = self.summary
        s.error_count += 1
        s.skipped += 1
        if len(s.errors) < MAX_MESSAGES:
            s.errors.append(text)
        if self.on_problem is not None:
            self.on_problem(text)

    def warn(self, text: str) -> None:
        if len(self.summary.warnings) < MAX_MESSAGES:
            self.summary.warnings.append(text)

    def report(self, done: int, read: int) -> None:
        if self.progress is not None:
            self.progress(done, self.bytes_before + read, self.total_bytes)

    def done(self) -> int:
        s = self.summary
        return s.added + s.replaced + s.present + s.duplicates

    # one file
    def file(self, source: Source, id_field, text_fields, sparse: tuple = ()) -> None:
        args = (source, id_field, text_fields, self.batch_bytes, self.batch_size, sparse)
        parallel = self.parallel
        if parallel is None:
            parallel = source.size >= PARALLEL_OVER
        notes = self.summary.notes
        notes.extend(source.notes[:MAX_MESSAGES - len(notes)])
        chunks = _chunks_from_process(*args) if parallel else \
            _chunks(*args[:5], stop=self.stop, sparse=sparse)
        with contextlib.closing(chunks):
            for chunk in chunks:
                if self.stop is not None and self.stop.is_set():
                    raise KeyboardInterrupt
                docs = []
                for item in chunk.items:
                    if isinstance(item, _Problem):
                        self.problem(source, item.line, item.message, len(docs))
                    else:
                        docs.append(item)
                if docs:
                    self.write(docs, chunk.batch, source)
                self.report(self.done(), chunk.tell)
        self.bytes_before += source.size
        self.summary.files += len(source.files) or 1
        self.report(self.done(), 0)

    # one batch = one transaction
    def write(self, docs: list[tuple[int, str]], made: batch.Batch, source: Source) -> None:
        """Write a chunk's documents ((line, docno) each, their batch `made`)."""
        while docs:
            try:
                counts, warnings = self._write_once(docs, made, source)
            except _Rejected as rejected:
                bad = docs[rejected.index]
                message = f"not stored: {rejected.err}"
                self.problem(source, bad[0], message, len(docs))
                keep = [k for k in range(len(docs)) if k != rejected.index]
                docs = [docs[k] for k in keep]
                made = made.subset(keep)
                continue
            except WriterBusyError:
                raise
            except AnnodbError as err:   # the commit itself failed: nothing of it was written
                s = self.summary
                first, last = where(source, docs[0][0]), where(source, docs[-1][0])
                span = f"{first}-{last.rpartition(':')[2]}" if not source.files else (
                    f"{first} to {last}")
                raise IngestError(
                    f"{span}: the batch of {len(docs)} documents could not be committed: "
                    f"{_commit_failure(self.db, err)} ({s.added + s.replaced} documents of "
                    "earlier batches stay committed)") from err
            s = self.summary
            for name, n in counts.items():
                setattr(s, name, getattr(s, name) + n)
            s.batches += 1
            for text in warnings:
                self.warn(text)
            storage.release_mapped_pages(self.db._env)  # (resident memory stays flat)
            return

    @staticmethod
    def _culprit(made: batch.Batch, todo: list[int]) -> int:
        """The index (in the chunk) of the first document of todo the database refuses (the
        text was tokenized already: its docno, or a name or metadata that cannot be
        encoded, is left to refuse)."""
        for k in todo:
            try:
                if made.docnos[k] is not None:
                    transaction.check_docno(made.docnos[k])
                if made.documents is not None:
                    storage.encode_relative(made.documents[k])
            except Exception:  # noqa: BLE001 - any refusal names the culprit
                return k
        return todo[0]

    def _ours(self, start: int) -> bool:
        """Whether the document starting at `start` was written by this run."""
        i = bisect.bisect_right(self.firsts, start) - 1
        return i >= 0 and start <= self.lasts[i]

    def _write_once(self, docs: list[tuple[int, str]], made: batch.Batch, source: Source):
        counts = dict(added=0, replaced=0, skipped=0, present=0, duplicates=0, tokens=0)
        warnings = []
        replace = self.replace
        added = []
        with self.db.write(self.timeout) as w:
            present = w.present([d for _, d in docs])  # before any add: no flush
            in_batch = set()
            todo = []
            for index, (line, docno) in enumerate(docs):
                repeated = docno in in_batch or (docno in present and
                                                 self._ours(present[docno]))
                if repeated:
                    counts["duplicates"] += 1
                    verb = "replaces the earlier one" if replace else "skipped (the first is kept)"
                    warnings.append(f"{where(source, line)}: duplicate docno {docno!r} {verb}")
                    if not replace:
                        counts["skipped"] += 1
                        continue
                elif docno in present:
                    if not replace:
                        counts["present"] += 1
                        continue
                    counts["replaced"] += 1
                else:
                    counts["added"] += 1
                todo.append(index)
                in_batch.add(docno)
            if todo:
                try:
                    added = w.add_batch(made if len(todo) == len(docs) else made.subset(todo),
                                        replace=replace)
                except Exception as err:  # the transaction is thrown away, redone without it
                    raise _Rejected(self._culprit(made, todo), err) from err
                counts["tokens"] += sum(a.end - a.start + 1 for a in added)
        if added:  # (committed: one batch's addresses are consecutive)
            self.firsts.append(added[0].start)
            self.lasts.append(added[-1].end)
        return counts, warnings


def _commit_failure(db, err: AnnodbError) -> str:
    """What a failed commit means: a write past the file size limit (ulimit -f: with
    SIGXFSZ ignored, LMDB gets EFBIG, or reports a write the limit cut short as an I/O
    error) says so; anything else as it is."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return str(err)
    cause = err.__cause__
    try:
        largest = max(os.path.getsize(os.path.join(db.path, n)) for n in os.listdir(db.path))
    except (OSError, ValueError):
        largest = 0
    if getattr(cause, "errno", None) == errno.EFBIG or "File too large" in str(err) or (
            "Input/output error" in str(err) and largest >= soft - (16 << 20)):
        return (f"file too large (the file size limit, ulimit -f, is {soft:,} bytes, and "
                f"the database's file is {largest:,}): raise the limit, e.g. ulimit -f "
                "unlimited, and run the same ingest again to resume")
    return str(err)


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt options
_GLIBC_DEFAULTS = {_M_TRIM_THRESHOLD: 128 << 10, _M_TOP_PAD: 128 << 10,
                   _M_MMAP_THRESHOLD: 128 << 10}
_INGEST_MALLOC = {_M_TRIM_THRESHOLD: (1 << 31) - 1, _M_TOP_PAD: 32 << 20,
                  _M_MMAP_THRESHOLD: 32 << 20}  # (C ints: ctypes wraps a larger one silently)


def _libc():
    """glibc's handle, or None elsewhere (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):
        return None


def _set_malloc(options: dict) -> bool:
    libc = _libc()
    if libc is None:
        return False
    return all(libc.mallopt(k, v) == 1 for k, v in options.items())


@contextlib.contextmanager
def _keep_freed_memory():
    """glibc's malloc told to keep freed memory for reuse for the duration: arrays up to 32
    MB from the heap instead of fresh mmaps, and no trimming. Every flush allocates and
    frees hundreds of MB of arrays; by default each big one is a fresh mapping whose pages
    the kernel faults in and zeroes, and frees unmap them again. On the scale corpus this
    took the writer's system time from 7.2 to 3.7 s (wall 36.9 -> 31.5 s). Afterwards the
    defaults are back and the heap is trimmed, so the memory returns to the system."""
    tuned = _set_malloc(_INGEST_MALLOC)
    try:
        yield
    finally:
        if tuned:
            _set_malloc(_GLIBC_DEFAULTS)
            _libc().malloc_trim(0)


@contextlib.contextmanager
def _ctrl_c_noted():
    """Ctrl-C (SIGINT) noted for the duration, not raised wherever it lands: raised inside a
    numba kernel or a commit, KeyboardInterrupt came out as another error (a SystemError, a
    "commit failed"). The ingest stops between two records or batches instead (the Event
    yielded is set); a second Ctrl-C raises at once. Only where Python's default handler is
    in place (the main thread, no handler of the caller's own); else yields None."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield None
        return
    stop = threading.Event()

    def noted(signum, frame):
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, noted)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def _no_cyclic_gc():
    """Python's cyclic garbage collector off for the duration: an ingest allocates millions
    of small containers (records, fields, documents) and makes no reference cycles, and the
    collections those allocations trigger cost more than the work (unpickling a batch's
    documents took 8x longer with it on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def ingest(db, paths, *, format: str | None = None, id_field: str | None = None,
           text_fields: list[str] | None = None, batch_size: int | None = None,
           batch_bytes: int = DEFAULT_BATCH_BYTES, replace: bool = False,
           strict: bool = False, progress: Progress | None = None,
           on_problem: Callable[[str], None] | None = None,
           timeout: float | None = None, parallel: bool | None = None,
           sparse_fields=()) -> Summary:
    """Ingest the files `paths` into `db` (an open Database, or a path: then the inputs are
    checked before the database is opened or created). Returns a Summary.

    Each batch is one transaction: it ends after `batch_bytes` of input (32 MiB: about five
    million tokens) or, when given, `batch_size` documents. Fewer, larger commits leave a
    smaller file (every commit rewrites the last block of each feature it touches, and
    LMDB keeps the replaced pages as free space: on the 62M-token scale corpus, in format 2,
    793 MB with 16 MiB batches, 767 MB with 64 MiB) but hold more memory (peak RSS 1.8 and
    2.7 GB), and were not faster (39.5 and 38.0 s against 37.1 with 32 MiB);
    smaller ones lose less work to a crash.

    A file of PARALLEL_OVER bytes or more is read, parsed and tokenized in a second process
    while this one writes (`parallel` True or False forces the choice).

    `sparse_fields`: record fields holding sparse vectors ({term: weight}, see records.py).

    progress(documents done, bytes read, bytes in all) is called as the ingest goes;
    on_problem("file:line: message") for each malformed record (also listed in the summary).
    Raises IngestError for unreadable inputs and options naming fields the records lack
    (before writing anything) and, with strict, at the first malformed record (earlier
    batches stay committed); Interrupted (a KeyboardInterrupt) on Ctrl-C.
    """
    started = time.perf_counter()
    text_fields = list(text_fields) if text_fields else None
    sparse = tuple(records.check_sparse_field(f) for f in sparse_fields)
    own = not isinstance(db, database.Database)
    sources = inputs.grouped(check_inputs(paths, format, id_field, text_fields,
                                           os.fspath(db) if own else db.path))
    if own:
        db = database.open(db)
    try:
        with _ctrl_c_noted() as stop, _no_cyclic_gc(), _keep_freed_memory():
            run = _Run(db, replace=replace, strict=strict, timeout=timeout,
                       batch_size=batch_size, batch_bytes=batch_bytes, progress=progress,
                       on_problem=on_problem, total_bytes=sum(s.size for s in sources),
                       parallel=parallel, stop=stop)
            try:
                for source in sources:
                    run.file(source, id_field, text_fields, sparse)
            except BaseException as err:  # (after Ctrl-C, whatever a second one broke)
                if isinstance(err, KeyboardInterrupt) or (stop is not None and stop.is_set()):
                    raise Interrupted(run.summary) from err
                raise
            finally:
                run.summary.seconds = time.perf_counter() - started
                run.summary.bytes = run.bytes_before
        return run.summary
    finally:
        if own:
            db.close()
