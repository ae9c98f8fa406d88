"""Parallel ingest into a sharded collection (annodb.shards): every core busy.

    summary = ingest("web.shards", ["corpus.jsonl"], shards=4)   # created if missing

Three kinds of process, all plain `python -c` children joined by pipes (as database.py's
reading process; not multiprocessing: spawn re-runs an unguarded caller script, fork copies
an open LMDB environment):

- **Readers** (one per core): an uncompressed line-based input (JSONL, MS MARCO, TSV without
  a header) is cut into chunks of `batch_bytes` x the shard count at line starts (so each
  shard commits about `batch_bytes` at a time, as one database does), and reader r reads,
  parses, prepares and tokenizes chunks r, r + R, r + 2R, ...; each chunk's documents are
  split by shard (their docnos' route) and encoded, ready to write. Any other input (gzip,
  JSON, CSV, TREC, text files, or a file smaller than two chunks) has one reader.
- **The router** (this process) takes the chunks in input order and gives each its global
  addresses: chunk k's base is the collection's counter after chunk k - 1 (reserved from it,
  so a writer beside the ingest never takes the same), its documents one after another as
  one database would place them. It reports malformed records with their file:line, and
  hands each shard's part to that shard's writer. It does no parsing: only pipes.
- **Writers** (one per shard) add their parts at those addresses, each part one
  transaction, with one database's rules (idempotent by docno, duplicates reported, a document
  the database refuses reported and the rest of its batch written).

So an interrupted ingest leaves whole batches in every shard, and a rerun completes it:
documents present are skipped (their addresses, reserved again, stay unused: gaps).
"""

from __future__ import annotations

import io
import os
import pickle
import queue
import subprocess
import sys
import threading
import time

import numpy as np

from .. import children, records
from ..children import Child   # (for ingest's list, whose name hides the module)
from ..errors import AnnodbError, IngestError
from ..shards import collection as _shards
from ..shards.routing import route, shard_name
from . import database as _ingest, formats, inputs, process, stages
from .formats import Problem

QUEUED = 2          # chunks waiting in the router per reader and per writer


def _child(main: str) -> children.Child:
    return children.start(f"from annodb.ingest.sharded import {main}; {main}()",
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)


# ---------------------------------------------------------------- readers


def _chunk_bytes(path: str, k: int, size: int) -> tuple[bytes, int]:
    """The lines starting in bytes [k * size, (k + 1) * size) of the file, and where they
    end."""
    with open(path, "rb") as f:
        if k:
            f.seek(k * size - 1)
            f.readline()               # the line that starts before the chunk is k - 1's
        start = f.tell()
        end = (k + 1) * size
        if start >= end:
            return b"", start
        data = f.read(end - start)
        if data and not data.endswith(b"\n"):
            data += f.readline()       # the last line starting inside the chunk
        return data, start + len(data)


def _split(chunk, n_shards: int) -> tuple:
    """A made chunk as the router needs it: problems (relative lines), each document's
    span and shard, and each shard's part pickled for its writer (lines, batch)."""
    problems = [item for item in chunk.items if isinstance(item, Problem)]
    made = chunk.batch
    if made is None:
        return problems, np.zeros(0, np.int64), np.zeros(0, np.int64), [None] * n_shards
    lines = np.fromiter((item[0] for item in chunk.items
                         if not isinstance(item, Problem)), dtype=np.int64)
    home = np.fromiter((route(d, n_shards) for d in made.docnos), dtype=np.int64,
                       count=len(made))
    parts: list[bytes | None] = []
    for s in range(n_shards):
        idx = np.flatnonzero(home == s)
        if not len(idx):
            parts.append(None)
            continue
        part = made if len(idx) == len(made) else made.subset(idx)
        part = stages.encode(stages.Chunk([], part, 0)).batch
        parts.append(pickle.dumps((lines[idx], part), protocol=pickle.HIGHEST_PROTOCOL))
    return problems, made.spans(), home, parts


def _reader_main() -> None:
    """A reader: its job from stdin; ("part", k, last, lines, problems, spans, shards,
    parts) messages to stdout, then ("end",), or ("error", message)."""
    process.set_malloc(process.INGEST_MALLOC)
    import gc
    gc.disable()
    out = sys.stdout.buffer
    try:
        source, id_field, text_fields, sparse, batch_bytes, batch_size, n_shards, chunks, \
            size = pickle.load(sys.stdin.buffer)

        def send(k, last, lines, pending, tell):
            chunk = stages.make(*stages.prepare(pending, sparse=sparse), tell, sparse)
            pickle.dump(("part", k, last, lines) + _split(chunk, n_shards), out,
                        protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()

        if chunks is None:  # the whole file, in batches (the last one says so)
            held = None
            for batch in stages.read(source, id_field, text_fields, batch_bytes,
                                     batch_size):
                if held is not None:
                    send(0, False, 0, *held)
                held = batch
            assert held is not None   # (stages.read yields at least once)
            send(0, True, 0, *held)
        for k in chunks or ():
            data, tell = _chunk_bytes(source.path, k, size)
            lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
            items = formats.READERS[source.format](io.BytesIO(data), source, id_field,
                                                   text_fields)
            pending, docs = [], 0
            for item in items:
                pending.append(item)
                if type(item) is tuple:  # a Doc (else a Problem)
                    docs += 1
                    if batch_size and docs >= batch_size:
                        send(k, False, 0, pending, tell)
                        pending, docs = [], 0
            send(k, True, lines, pending, tell)
        message: tuple[str, ...] = ("end",)
    except BrokenPipeError:
        return
    except BaseException as err:  # noqa: BLE001 - handed to the router, which raises it
        message = ("error", str(err) if isinstance(err, AnnodbError) else
                   f"reading failed: {type(err).__name__}: {err}")
    try:
        pickle.dump(message, out)
        out.flush()
    except BrokenPipeError:
        pass


# ---------------------------------------------------------------- writers


class _Placed:
    """A shard database whose write transactions place each document at the start the
    router gave it (Database.write's `allocate`), for the commit stage (database.Run). When
    another writer committed to the shard after the router handed out those addresses
    (past them), the batch takes new ones from the collection's counter: after that
    writer's documents, as one database would have committed them."""

    def __init__(self, collection, i: int):
        self.collection = collection
        self.db = collection.shards[i]
        self.path = self.db.path
        self.starts: dict[str, list[int]] = {}
        self.moved = 0

    def write(self, timeout=None):
        return self.db.write(timeout, allocate=self._allocate)

    def release_mapped_pages(self) -> None:
        self.db.release_mapped_pages()

    def _allocate(self, b, at_least: int) -> np.ndarray:
        out, last = [], at_least - 1
        for docno in b.docnos:
            found = [s for s in self.starts.get(docno, ()) if s > last]
            if not found:
                self.moved += len(b)
                return self.collection.allocate(b, at_least)
            last = found[0]
            out.append(last)
        return np.array(out, dtype=np.int64)


def _writer_main() -> None:
    """A shard's writer: its options, then ("part", path, line offset, starts, part) messages
    on stdin, each written as one transaction; ("end",) -> ("done", summary) on stdout, or
    ("error", message) at the first failure."""
    import gc
    gc.disable()
    out = sys.stdout.buffer
    inp = sys.stdin.buffer
    try:
        path, i, options = pickle.load(inp)
        with _shards.open(path, timeout=options["timeout"] or 30.0) as collection, \
                process.keep_freed_memory():
            placed = _Placed(collection, i)
            run = _ingest.Run(placed, progress=None, on_problem=None, total_bytes=0,
                              batch_size=None, batch_bytes=0, **options)
            while True:
                message = pickle.load(inp)
                if message[0] == "end":
                    break
                _, source, offset, starts, blob = message  # (source: an inputs.Source)
                lines, made = pickle.loads(blob)
                placed.starts = {}
                for docno, start in zip(made.docnos, starts.tolist()):
                    placed.starts.setdefault(docno, []).append(start)
                docs = list(zip((lines + offset).tolist(), made.docnos))
                run.write(docs, made, source)
            if placed.moved:
                run.warn(f"{placed.moved} documents were placed after documents another "
                         f"writer committed to {shard_name(i)} during the ingest")
        reply: tuple[str, _ingest.Summary | str] = ("done", run.summary)
    except BaseException as err:  # noqa: BLE001 - handed to the router, which raises it
        reply = ("error", str(err) if isinstance(err, AnnodbError) else
                 f"writing failed: {type(err).__name__}: {err}")
    try:
        pickle.dump(reply, out)
        out.flush()
    except BrokenPipeError:
        pass


# ---------------------------------------------------------------- the router


class _Pipe(threading.Thread):
    """Moves messages between the router and one child: a reader's out of its stdout into
    `inbox`, or a writer's from `outbox` into its stdin (then its reply)."""

    def __init__(self, child: children.Child, first, reading: bool):
        super().__init__(daemon=True)
        self.child, self.first, self.reading = child, first, reading
        self.box: queue.Queue = queue.Queue(QUEUED)
        self.reply = None
        self.failed: str | None = None
        self.start()

    def run(self) -> None:
        stdin, stdout = self.child.stdin, self.child.stdout
        assert stdin is not None and stdout is not None   # (_child opens both pipes)
        try:
            with stdin:
                pickle.dump(self.first, stdin)
                if not self.reading:
                    while True:
                        message = self.box.get()
                        pickle.dump(message, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                        if message[0] == "end":
                            break
            if self.reading:
                while True:
                    message = pickle.load(stdout)
                    self.box.put(message)
                    if message[0] in ("end", "error"):
                        return
            self.reply = pickle.load(stdout)
        except (EOFError, BrokenPipeError, OSError, pickle.UnpicklingError):
            self.failed = f"exit code {self.child.wait()}{children.said(self.child)}"
            if self.reading:
                self.box.put(("error", f"a reading process ended unexpectedly "
                                       f"({self.failed})"))

    def put(self, message) -> None:
        """Hand a message to a writer (raising when the writer is gone)."""
        while True:
            if self.failed is not None or not self.is_alive():
                raise IngestError(self.why())
            try:
                self.box.put(message, timeout=0.5)
                return
            except queue.Full:
                continue

    def why(self) -> str:
        if self.reply is not None and self.reply[0] == "error":
            return self.reply[1]
        return f"a shard's writing process ended unexpectedly ({self.failed or 'no reply'})"


def _plan(source, batch_bytes: int, readers: int) -> list:
    """Each reader's chunks, or [None] for one reader of the whole file."""
    line_based = source.format in ("jsonl", "msmarco") or (source.format == "tsv" and
                                                           not source.header)
    line_based = line_based and not source.gzip
    if not line_based or readers < 2 or source.size < 2 * batch_bytes:
        return [None]
    n = -(-source.size // batch_bytes)
    return [list(range(r, n, readers)) for r in range(min(readers, n))]


def ingest(db, paths, *, shards: int | None = None, format: str | None = None,
           id_field: str | None = None, text_fields: list[str] | None = None,
           batch_size: int | None = None, batch_bytes: int = _ingest.DEFAULT_BATCH_BYTES,
           replace: bool = False, strict: bool = False, progress=None, on_problem=None,
           timeout: float | None = None, readers: int | None = None,
           parallel: bool | None = None, sparse_fields=()) -> _ingest.Summary:
    """ingest.ingest for a sharded collection (`db` open, or a path: created with `shards`
    shards when missing), read and written in parallel processes (see the module
    docstring). `readers`: reading processes per input (default: one per core)."""
    started = time.perf_counter()
    text_fields = list(text_fields) if text_fields else None
    sparse = tuple(records.check_sparse_field(f) for f in sparse_fields)
    own = isinstance(db, (str, os.PathLike))
    sources = inputs.grouped(inputs.check_inputs(paths, format, id_field, text_fields,
                                                 os.fspath(db) if own else db.path))
    if own:
        db = _shards.open(db, shards=shards)
    elif shards is not None and shards != len(db.shards):
        raise IngestError(f"{db.path}: the collection has {len(db.shards)} shards, not "
                          f"{shards}")
    readers = max(1, readers or os.cpu_count() or 1)
    summary = _ingest.Summary()
    writers: list[_Pipe] = []
    children: list[Child] = []
    before = db.stats()   # (a Ctrl-C's summary: what the writers committed)
    done_bytes = 0
    try:
        options = dict(replace=replace, strict=strict, timeout=timeout)
        for i in range(len(db.shards)):
            child = _child("_writer_main")
            children.append(child)
            writers.append(_Pipe(child, (db.path, i, options), reading=False))
        total = sum(s.size for s in sources)
        chunk_bytes = batch_bytes * len(db.shards)  # (so each shard commits batch_bytes)
        routed = 0
        for source in sources:
            plan = _plan(source, chunk_bytes, readers)
            pipes = []
            for chunks in plan:
                child = _child("_reader_main")
                children.append(child)
                pipes.append(_Pipe(child, (source, id_field, text_fields, sparse,
                                           chunk_bytes, batch_size, len(db.shards), chunks,
                                           chunk_bytes), reading=True))
            lines_before, k, found = 0, 0, 0
            while True:
                pipe = pipes[k % len(pipes)]
                message = pipe.box.get()
                if message[0] == "error":
                    raise IngestError(f"{source.path}: {message[1]}")
                if message[0] == "end":
                    break
                _, chunk, last, lines, problems, spans, home, parts = message
                found += len(problems) + len(spans)   # (records: the module)
                for problem in problems:
                    text = f"{inputs.where(source, problem.line + lines_before)}: " \
                           f"{problem.message}"
                    if strict:
                        raise IngestError(f"{text} (stopped by strict; the batches before "
                                          "it were handed to the shards' writers)")
                    summary.error_count += 1
                    summary.skipped += 1
                    if len(summary.errors) < _ingest.MAX_MESSAGES:
                        summary.errors.append(text)
                    if on_problem is not None:
                        on_problem(text)
                if len(spans):
                    base = db.reserve(int(spans.sum()))
                    starts = base + np.cumsum(spans) - spans
                    for s, part in enumerate(parts):
                        if part is not None:
                            writers[s].put(("part", source, lines_before,
                                            starts[home == s], part))
                    routed += len(spans)
                if last:
                    lines_before += lines
                    k += 1
                    if progress is not None and plan[0] is not None:
                        progress(routed, done_bytes + min(k * chunk_bytes, source.size),
                                 total)
            done_bytes += source.size
            summary.files += len(source.files) or 1
            summary.notes.extend(source.notes[:_ingest.MAX_MESSAGES - len(summary.notes)])
            if not found and len(summary.notes) < _ingest.MAX_MESSAGES:
                summary.notes.append(_ingest.empty(source))
            if progress is not None:
                progress(routed, done_bytes, total)
            for pipe in pipes:
                pipe.join()
        for w in writers:
            w.put(("end",))
        for w in writers:
            w.join()
            if w.reply is None or w.reply[0] != "done":
                raise IngestError(w.why())
            got = w.reply[1]
            for name in ("added", "replaced", "skipped", "present", "duplicates", "tokens",
                         "batches", "error_count"):
                setattr(summary, name, getattr(summary, name) + getattr(got, name))
            summary.errors.extend(got.errors[:_ingest.MAX_MESSAGES - len(summary.errors)])
            summary.warnings.extend(
                got.warnings[:_ingest.MAX_MESSAGES - len(summary.warnings)])
        summary.bytes = done_bytes
        return summary
    except KeyboardInterrupt as stop:
        # the writers' committed batches stay (a killed writer's open transaction is
        # aborted): what they added is counted in the collection once they have ended
        _end(children)
        after = db.stats()
        summary.added = max(0, after.documents - before.documents)
        summary.tokens = max(0, after.tokens - before.tokens)
        summary.stopped_in = source.path
        summary.bytes = done_bytes
        summary.seconds = time.perf_counter() - started
        raise _ingest.Interrupted(summary) from stop
    finally:
        summary.seconds = time.perf_counter() - started
        _end(children)    # (all have ended unless this failed: then end them)
        if own:
            db.close()


def _end(children: list[Child]) -> None:
    """Each child killed if it still runs, reaped, and its pipes closed."""
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        assert child.stdout is not None   # (_child opens it)
        for f in (child.stdout, child.errors):
            try:
                f.close()
            except OSError:
                pass
