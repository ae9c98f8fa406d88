"""One database's ingest (the package's __init__.py, which picks this or sharded.py, says
what an ingest guarantees): each batch of documents is one write transaction; an input of
PARALLEL_OVER bytes or more is read, parsed and tokenized in a second process (a plain
`python -c` child joined by a pipe) while this one writes."""

from __future__ import annotations

import bisect
import contextlib
import errno
import gc
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generator

import msgspec

from .. import batch, children, database, kernels, records, storage, tokenizer, transaction
from ..errors import AnnodbError, IngestError, WriterBusyError
from . import flat, inputs, process, stages
from .formats import Problem
from .inputs import Source, check_inputs, where

DEFAULT_BATCH_BYTES = 8 << 20   # a batch ends after this much input (and at batch_size docs)
COMMIT_BATCHES = 4                # without batch_size: batches a commit holds (32 MiB of input)
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
    compiling: float = 0.0   # of the seconds, compiling kernels (a first run's, once)
    stopped_in: str = ""     # the input being read when the ingest stopped (Ctrl-C, strict,
                             # a failure): not one of `files`, the inputs read to their end

    @property
    def documents(self) -> int:
        """Documents written (added or replaced)."""
        return self.added + self.replaced

    def line(self) -> str:
        """A one-line human summary, starting `added N, skipped M`."""
        working = self.seconds - self.compiling
        rate = self.tokens / working if working > 0 else 0.0
        files = "file" if self.files == 1 else "files"
        text = f"added {self.added:,}, skipped {self.skipped:,}"
        if self.skipped:
            repeated = self.skipped - self.error_count
            parts = [f"{n:,} {what}" for n, what in (
                (self.error_count, "malformed or unreadable"),
                (repeated, "repeated docno" + "s" * (repeated != 1))) if n]
            text += f" ({', '.join(parts)})"
        text += (f", already present {self.present:,}, replaced {self.replaced:,}; "
                 f"{self.files:,} {files}"
                 + (f" read whole, stopped in {self.stopped_in}" if self.stopped_in else "")
                 + f", {self.tokens:,} token{'s' * (self.tokens != 1)} in {self.seconds:.1f} s "
                 + (f"({self.compiling:.1f} s of it compiling the kernels, once: they are "
                    f"cached now; {rate:,.0f} tokens/s in the rest)" if self.compiling >= 0.5
                    else f"({rate:,.0f} tokens/s)"))
        return text


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped an ingest: `summary` is what was committed before it (whole batches:
    those added when it came were committed first, the one in progress was thrown away).
    Running the same ingest again resumes it."""

    def __init__(self, summary: Summary):
        super().__init__("ingest interrupted")
        self.summary = summary


class _Open:
    """A write transaction holding batches not yet committed (Run.commit_batches): what each
    will add to the Summary once it is, and the batches themselves, redone one
    transaction each if anything goes wrong before then."""

    def __init__(self, writer, marks: int):
        self.writer = writer
        self.batches: list[tuple[list, batch.Batch, Source]] = []
        self.counts: dict[str, int] = {}
        self.warnings: list[str] = []
        self.marks = marks   # Run.firsts' length before its batches


class _Rejected(Exception):
    """add() refused one document of a batch (the batch is redone without it)."""

    def __init__(self, index: int, err: Exception):
        super().__init__(str(err))
        self.index = index
        self.err = err


def _reader_main() -> None:
    """The second process (`python -c` of this, see _chunks_from_process): read the
    arguments from stdin, then _read_and_send them to stdout."""
    _read_and_send(None, sys.stdout.buffer)


def _read_and_send(args: tuple | None, out) -> None:
    """A reading process's work: write ("chunk", stages.packed(chunk)) pickles of the
    batches of `args` (_chunks_from_process's; None: pickled on stdin) to `out`, then
    ("end", None), or ("error", message) if reading fails. The pipe's buffer keeps it
    about one chunk ahead. Its batches' words are numbered across them (Batch.words)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the writer's to handle
    gc.disable()  # see process.no_cyclic_gc
    process.set_malloc(process.INGEST_MALLOC)  # see keep_freed_memory (for this process's life)
    process.set_hugepages(False)
    source = None
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="annodb-make")
    failed = threading.Event()  # a chunk could not be made or sent: send none after it
    in_flight: list = []
    numbers = tokenizer.WordNumbers()   # the words of its batches, numbered across them

    def make_and_send(items, prepared: list, tell: int, sparse: tuple) -> None:
        if failed.is_set():
            return
        try:
            chunk = stages.made(items, tell, numbers, items=False) \
                if isinstance(items, flat.Scanned) else \
                stages.encode(stages.make(items, prepared, tell, sparse))
            pickle.dump(("chunk", stages.packed(chunk)), out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except BaseException:
            failed.set()
            raise

    try:
        source, id_field, text_fields, batch_bytes, batch_size, sparse = \
            pickle.load(sys.stdin.buffer) if args is None else args
        # this thread reads, parses and prepares (flat records: reads them by a kernel,
        # see flat.py); a second one tokenizes (the kernel releases the GIL), encodes and
        # sends, in order, at most a chunk behind
        for pending, tell in stages.read(source, id_field, text_fields, batch_bytes,
                                         batch_size, fast_sparse=sparse):
            items: list | flat.Scanned = pending   # (a Scanned: read by the kernel)
            prepared: list = []
            if not isinstance(pending, flat.Scanned):
                items, prepared = stages.prepare(pending, sparse=sparse)
            in_flight.append(worker.submit(make_and_send, items, prepared, tell, sparse))
            if len(in_flight) > 1:
                in_flight.pop(0).result()
        while in_flight:
            in_flight.pop(0).result()
        message: tuple[str, str | None] = ("end", None)
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


class _Forked:
    """A reading process forked from this one (see _forked_reader): what
    _chunks_from_process uses of a subprocess.Popen (its arguments need no stdin)."""

    stdin = None

    def __init__(self, pid: int, stdout, errors) -> None:
        self.pid = pid
        self.stdout = stdout
        self.errors = errors            # its stderr, for children.said
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except InterruptedError:   # (retried by Python; kept for clarity)
                continue
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _forked_reader(args: tuple) -> _Forked | None:
    """The reading process of `args` (_chunks_from_process's) forked from this one, or
    None where fork is not safe (no os.fork, or threads running here: a fork copies a
    lock another thread holds, held for ever). Only before the database is opened: the
    child holds no LMDB environment and no transaction. It inherits this process's
    imports and numba's loaded machinery, which a fresh `python -c` redoes: ~0.6 s of
    CPU a reading process at start (the interpreter, annodb's imports, numba's and
    LLVM's start), so numba is made to load its first kernel here first (the writer
    loads it anyway). The child ends by os._exit: no atexit, no flush of this process's
    buffers, no finalizers of what it inherited."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return None
    import numpy as np
    tokenizer.numbered_utf8_tokens(np.frombuffer(b"a", np.uint8), tokenizer.WordNumbers())
    errors = tempfile.TemporaryFile()
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):   # (nothing of this process's written twice)
        with contextlib.suppress(Exception):
            stream.flush()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(r)
        os.close(w)
        errors.close()
        raise
    if pid == 0:   # the child
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # (as _read_and_send: before
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)   # a Ctrl-C gets in)
            os.close(r)
            os.dup2(errors.fileno(), 2)
            with os.fdopen(w, "wb") as out:
                _read_and_send(args, out)
            code = 0
        except BaseException:   # noqa: BLE001 - said on its stderr, as a `python -c` would
            with contextlib.suppress(BaseException):
                traceback.print_exc()
                sys.stderr.flush()
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    os.close(w)
    return _Forked(pid, os.fdopen(r, "rb"), errors)


PIPE_BYTES = 1 << 20   # the pipe from the reading process, where Linux allows it


def _widen(pipe) -> None:
    """The pipe's buffer made PIPE_BYTES (Linux; else left as it is): a batch is ~20 MB
    and a 64 KiB pipe wakes the writer and the reading process in turn for each 64 KiB."""
    try:
        import fcntl
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


def _chunks_from_process(source: Source, id_field, text_fields, batch_bytes,
                         batch_size, sparse: tuple = (), forked: _Forked | None = None
                         ) -> Generator[stages.Chunk, None, None]:
    """stages.chunks, made in a second Python process: `forked` (_forked_reader, started
    with these arguments before the database was opened), else a plain child process.
    Not multiprocessing: that would re-run the caller's main script; and not a fork once
    the database is open, which would copy this process's open LMDB environment (and
    its threads' locks)."""
    word_ids = batch.FeatureIds()   # of the words the child numbers (Batch.words)
    child: _Forked | children.Child = forked if forked is not None else children.start(
        "from annodb.ingest.database import _reader_main; _reader_main()",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stdin, stdout = child.stdin, child.stdout
    assert stdout is not None   # (opened as a pipe above, as stdin unless forked)
    _widen(stdout)
    try:
        while True:
            try:
                if stdin is not None and not stdin.closed:
                    with stdin:
                        pickle.dump((source, id_field, text_fields, batch_bytes, batch_size,
                                     sparse), stdin)
                kind, value = pickle.load(stdout)
            except (EOFError, BrokenPipeError, pickle.UnpicklingError):
                code = child.wait()
                raise IngestError(f"{source.path}: the reading process ended unexpectedly "
                                  f"(exit code {code}){children.said(child)}") from None
            if kind == "end":
                return
            if kind == "error":
                raise IngestError(value)
            chunk = stages.unpacked(value)
            if chunk.batch is not None and chunk.batch.words is not None:
                chunk = chunk._replace(batch=word_ids.learn(chunk.batch))
            yield chunk
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        stdout.close()
        child.errors.close()


# ---------------------------------------------------------------- the commit stage


class Run:
    """An ingest's writing side: each batch (a Chunk's documents) committed as one write
    transaction, or a file's batches commit_batches to a transaction (`write`: idempotent
    by docno, repeats reported, a document the database refuses reported and the rest of
    its batch written), its problems reported, its Summary kept. `file` drives one input
    through it. `db`: a Database, or what a sharded ingest's writer gives for its shard
    (write(timeout), release_mapped_pages(), path)."""

    def __init__(self, db, *, replace, strict, timeout, batch_size, batch_bytes, progress,
                 on_problem, total_bytes, parallel=None, stop=None, commit_batches=1,
                 forked=None) -> None:
        self.db = db
        # the reading process of the first file, forked before the database was opened
        # (see _forked_reader), and the arguments it was started with
        self.forked: tuple[tuple, _Forked] | None = forked
        # a file's batches committed together, commit_batches a transaction (1: each its
        # own); the transaction still open, if any
        self.commit_batches = max(1, int(commit_batches))
        self._open: _Open | None = None
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
            self.commit_open()   # (the batches before this one's)
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

    def note(self, text: str) -> None:
        if len(self.summary.notes) < MAX_MESSAGES:
            self.summary.notes.append(text)

    def warn(self, text: str) -> None:
        if len(self.summary.warnings) < MAX_MESSAGES:
            self.summary.warnings.append(text)

    def report(self, done: int, read: int) -> None:
        if self.progress is not None:
            self.progress(done, self.bytes_before + read, self.total_bytes)

    def done(self) -> int:
        s = self.summary
        pending = self._open.counts if self._open is not None else {}
        return sum(getattr(s, name) + pending.get(name, 0)
                   for name in ("added", "replaced", "present", "duplicates"))

    # one file
    def file(self, source: Source, id_field, text_fields, sparse: tuple = ()) -> None:
        args = (source, id_field, text_fields, self.batch_bytes, self.batch_size, sparse)
        parallel = _parallel(self.parallel, source)
        notes = self.summary.notes
        notes.extend(source.notes[:MAX_MESSAGES - len(notes)])
        forked = None
        if self.forked is not None and self.forked[0] == args:
            forked = self.forked[1]
            self.forked = None
        chunks = _chunks_from_process(*args, forked=forked) if parallel else \
            stages.chunks(*args[:5], stop=self.stop, sparse=sparse)
        found = 0   # (records: the module)
        try:
            with contextlib.closing(chunks):
                for chunk in chunks:
                    if self.stop is not None and self.stop.is_set():
                        raise KeyboardInterrupt
                    found += len(chunk.items)
                    docs: list[tuple[int, str]] = []
                    if chunk.lines is not None and len(chunk.lines) == len(chunk.items):
                        docs = chunk.items   # (no Problem among them: no loop a document)
                    else:
                        for item in chunk.items:
                            if isinstance(item, Problem):
                                self.problem(source, item.line, item.message, len(docs))
                            else:
                                docs.append(item)
                    if docs:
                        assert chunk.batch is not None   # (a chunk's documents are its batch's)
                        self.write(docs, chunk.batch, source, together=True)
                    if self._open is not None and \
                            len(self._open.batches) >= self.commit_batches:
                        self.commit_open()
                    self.report(self.done(), chunk.tell)
            self.commit_open()
        except BaseException:
            # stopped between two batches (Ctrl-C, strict, the input failed): those added
            # are committed, as each would have been alone (a failed commit aborted the
            # transaction and left none open)
            self.summary.stopped_in = source.path
            self.commit_open()
            raise
        self.bytes_before += source.size
        self.summary.files += len(source.files) or 1
        if not found:
            self.note(empty(source))
        self.report(self.done(), 0)

    # one batch = one transaction, or several batches one (commit_batches)
    def write(self, docs: list[tuple[int, str]], made: batch.Batch, source: Source,
              together: bool = False) -> None:
        """Write a chunk's documents ((line, docno) each, their batch `made`): committed
        now, or with `together` (and commit_batches), added to the open transaction, which
        commit_open commits."""
        if not together or self.commit_batches == 1:
            return self._write_alone(docs, made, source)
        if self._open is None:
            self._open = _Open(self.db.write(self.timeout), len(self.firsts))
        opened = self._open
        try:
            counts, warnings, took = self._write_once(docs, made, source, opened.writer)
            self._took(took)
        except BaseException as err:
            batches = self._drop_open() + [(docs, made, source)]
            if not isinstance(err, Exception):   # (a second Ctrl-C)
                raise
            self._redo(batches)   # one transaction each: a refused document reported
            return                # and the rest written, or the batch's failure raised
        opened.batches.append((docs, made, source))
        for name, n in counts.items():
            opened.counts[name] = opened.counts.get(name, 0) + n
        opened.warnings += warnings

    def commit_open(self) -> None:
        """Commit the open transaction's batches, if any (should the commit fail, each is
        redone as a transaction of its own)."""
        opened = self._open
        if opened is None:
            return
        self._open = None
        try:
            opened.writer.commit()
        except BaseException as err:   # (the commit aborted the transaction)
            del self.firsts[opened.marks:], self.lasts[opened.marks:]
            if not isinstance(err, Exception):
                raise
            self._redo(opened.batches)
            return
        self._committed(opened.counts, opened.warnings, len(opened.batches))

    def _drop_open(self) -> list:
        """Abort the open transaction; its batches."""
        opened = self._open
        if opened is None:
            return []
        self._open = None
        del self.firsts[opened.marks:], self.lasts[opened.marks:]
        opened.writer.abort()
        return opened.batches

    def _redo(self, batches: list) -> None:
        for docs, made, source in batches:
            self._write_alone(docs, made, source)

    def _committed(self, counts: dict, warnings: list[str], batches: int) -> None:
        s = self.summary
        for name, n in counts.items():
            setattr(s, name, getattr(s, name) + n)
        s.batches += batches
        for text in warnings:
            self.warn(text)
        self.db.release_mapped_pages()  # (resident memory stays flat)

    def _write_alone(self, docs: list[tuple[int, str]], made: batch.Batch,
                     source: Source) -> None:
        """Write a chunk's documents as one transaction."""
        while docs:
            try:
                with self.db.write(self.timeout) as w:
                    counts, warnings, took = self._write_once(docs, made, source, w)
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
            self._took(took)
            self._committed(counts, warnings, 1)
            return

    def _took(self, took: tuple[int, int] | None) -> None:
        """Note the address range a batch took (see _ours)."""
        if took is not None:
            self.firsts.append(took[0])
            self.lasts.append(took[1])

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

    def _write_once(self, docs: list[tuple[int, str]], made: batch.Batch, source: Source,
                    w) -> tuple[dict, list, tuple[int, int] | None]:
        """Add a chunk's documents through the write transaction `w`: (what it adds to the
        Summary, its warnings, the address range it took, or None)."""
        counts = dict(added=0, replaced=0, skipped=0, present=0, duplicates=0, tokens=0)
        warnings = []
        replace = self.replace
        added = []
        docnos = made.docnos   # (docs' docnos, in order: docs are made's documents)
        present = w.present(docnos)  # before any add: no flush
        in_batch = set()
        todo = []
        if not present and len(set(docnos)) == len(docnos):   # (the common case:
            todo, docs = list(range(len(docs))), []           # all new, no repeats)
            counts["added"] = len(todo)
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
            part = made if len(todo) == len(docnos) else made.subset(todo)
            try:
                added = w.add_batch(part, replace=replace)
            except Exception as err:  # the transaction is thrown away, redone without it
                raise _Rejected(self._culprit(made, todo), err) from err
            counts["tokens"] += int(part.spans().sum())   # (each added document's)
        # (one batch's addresses are consecutive)
        return counts, warnings, (added[0].start, added[-1].end) if added else None


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


def ingest(db, paths, *, format: str | None = None, id_field: str | None = None,
           text_fields: list[str] | None = None, batch_size: int | None = None,
           batch_bytes: int = DEFAULT_BATCH_BYTES, replace: bool = False,
           strict: bool = False, progress: Progress | None = None,
           on_problem: Callable[[str], None] | None = None,
           timeout: float | None = None, parallel: bool | None = None,
           sparse_fields=(), commit_batches: int | None = None) -> Summary:
    """Ingest the files `paths` into `db` (an open Database, or a path: then the inputs are
    checked before the database is opened or created). Returns a Summary.

    The input is read and tokenized in batches: each ends after `batch_bytes` of input
    (DEFAULT_BATCH_BYTES, 8 MiB: about a million tokens) or, when given, `batch_size`
    documents; the reading process holds two batches (32 MiB ones took ~1 GB there), hence
    8 MiB. With batch_size, each batch is one transaction. Without it, a file's batches are
    committed together, `commit_batches` a transaction (COMMIT_BATCHES: four, 32 MiB of
    input; 1: a transaction each): every commit reads and rewrites the tail and the
    counts of each list its batches touched, and LMDB writes every page they dirtied, so
    four batches in one commit take a quarter less of the writer's CPU than four commits
    (benchmarks/RESULTS.md, "Ingest CPU beside SQLite FTS5, 1x: fourth round"). The batches
    are kept until their commit: should it fail, or a batch be refused, each is redone as a
    transaction of its own, as if commit_batches were 1. An ingest stopped between batches
    (Ctrl-C, strict, an input that breaks off) commits the batches it has added first.
    Larger commits also leave a larger file (LMDB cannot reuse the pages a transaction
    frees before it commits) and lose more work to a crash.

    A file of PARALLEL_OVER bytes or more is read, parsed and tokenized in a second process
    while this one writes (`parallel` True or False forces the choice).

    `sparse_fields`: record fields holding sparse vectors ({term: weight}, see records.py).

    progress(documents done, bytes read, bytes in all) is called as the ingest goes;
    on_problem("file:line: message") for each malformed record (also listed in the summary).
    Raises IngestError for unreadable inputs and options naming fields the records lack
    (before writing anything) and, with strict, at the first malformed record (earlier
    batches stay committed); Interrupted (a KeyboardInterrupt) on Ctrl-C.
    """
    started, compiled = time.perf_counter(), kernels.compile_seconds()
    text_fields = list(text_fields) if text_fields else None
    sparse = tuple(records.check_sparse_field(f) for f in sparse_fields)
    own = not isinstance(db, database.Database)
    sources = inputs.grouped(check_inputs(paths, format, id_field, text_fields,
                                           os.fspath(db) if own else db.path))
    forked = None
    try:
        if own:
            # the first file's reading process, if it gets one, forked before the database
            # is opened (see _forked_reader); a later file's is a `python -c` child
            if sources and _parallel(parallel, sources[0]):
                args = (sources[0], id_field, text_fields, batch_bytes, batch_size, sparse)
                child = _forked_reader(args)
                forked = None if child is None else (args, child)
            db = database.open(db)
    except BaseException:
        if forked is not None:
            _end(forked[1])
        raise
    try:
        with process.ctrl_c_noted() as stop, process.no_cyclic_gc(), \
                process.keep_freed_memory():
            if commit_batches is None:
                commit_batches = 1 if batch_size else COMMIT_BATCHES
            run = Run(db, replace=replace, strict=strict, timeout=timeout,
                       batch_size=batch_size, batch_bytes=batch_bytes, progress=progress,
                       on_problem=on_problem, total_bytes=sum(s.size for s in sources),
                       parallel=parallel, stop=stop, commit_batches=commit_batches,
                       forked=forked)
            try:
                for source in sources:
                    run.file(source, id_field, text_fields, sparse)
            except BaseException as err:  # (after Ctrl-C, whatever a second one broke)
                if isinstance(err, KeyboardInterrupt) or (stop is not None and stop.is_set()):
                    raise Interrupted(run.summary) from err
                raise
            finally:
                run.summary.seconds = time.perf_counter() - started
                run.summary.compiling = kernels.compile_seconds() - compiled
                run.summary.bytes = run.bytes_before
        return run.summary
    finally:
        if forked is not None:
            _end(forked[1])   # (unused if the ingest failed first; else ended already)
        if own:
            db.close()


def empty(source: Source) -> str:
    """The note for an input that held no record (an empty export is said, not passed
    over as if it had been read)."""
    return f"{source.path}: no records in it"


def _parallel(parallel: bool | None, source: Source) -> bool:
    """Whether `source` is read in a second process (`parallel`: ingest's option)."""
    return source.size >= PARALLEL_OVER if parallel is None else parallel


def _end(child: _Forked) -> None:
    """The reading process killed if it still runs, and reaped."""
    child.kill()
    child.wait()
    child.stdout.close()
    child.errors.close()
