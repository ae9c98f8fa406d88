"""Ingest: read documents from files and add them to a database in batched commits.

    summary = ingest("bible.db", ["docs.jsonl.gz"])

Formats, chosen by the file name (`.gz` is read transparently) or by `format=`:

    jsonl    `.jsonl`, `.json`, `.ndjson`: one JSON object per line. The docno is the id field
             (chosen, or the first of docid, docno, id, _id); the text is the chosen text
             fields in order, or every string but the id (see records.py). A record with
             `docid` and `segment` is an MS MARCO V2.1 segment unless text fields are chosen.
    msmarco  MS MARCO V2.1 segmented JSONL: docno `docid`, text fields title, headings,
             segment (in that order, each annotated `title:` and so on); url and the other
             scalars stay with the document, start_char and end_char also as values.
    tsv      `.tsv`: `docno<TAB>text` per line (the text may hold further tabs).
    trec     `.trec`, `.sgml`, or any file whose first non-blank line starts with `<DOC>`:
             `<DOC><DOCNO>x</DOCNO> ... </DOC>`; the text is everything inside DOC but the
             DOCNO element, tags removed, entities decoded, blank lines dropped.
    text     any other file: the whole file is one document, its docno the file name
             without its extension(s) (`notes/a.txt` and `a.txt.gz` -> `a`).

Every batch is one write transaction, so an interrupted ingest leaves whole batches and
never a half-written document. Ingest is idempotent by docno: a document whose docno is
already in the database is skipped, so re-running an ingest changes nothing and resumes an
interrupted one; `replace=True` replaces such documents instead. Inside one input a
repeated docno keeps its first occurrence (later ones are reported and skipped), unless
`replace=True`, where the later one replaces it.

A malformed record (bad JSON, not an object, no id, invalid UTF-8, a TSV line without a
tab, a DOC without DOCNO, a record the database refuses) is reported as "file:line: message"
and skipped; with `strict=True` the first one raises IngestError and its batch is not
written. Inputs that cannot be read at all (missing, a directory, unreadable, not gzip) raise
IngestError before anything is written.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import gzip
import html
import io
import itertools
import os
import pickle
import re
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import msgspec
import numpy as np

from . import batch, database, records, storage, transaction
from .errors import AnnodbError, IngestError, WriterBusyError

FORMATS = ("jsonl", "msmarco", "tsv", "trec", "text")
DEFAULT_BATCH_BYTES = 32 << 20  # a batch ends after this much input (and at batch_size docs)
MAX_DOCNO_BYTES = 511            # LMDB's largest key
MAX_MESSAGES = 1000              # problems kept in the summary (all are counted)
MSMARCO_TEXT_FIELDS = ("title", "headings", "segment")

_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".tsv": "tsv",
               ".trec": "trec", ".sgml": "trec"}
PARALLEL_OVER = 64 << 20          # inputs this big are read and tokenized in a second process
_PEEK_BYTES = 1 << 16

Progress = Callable[[int, int, int], None]   # (documents done, bytes read, bytes in all)


class Summary(msgspec.Struct):
    """What an ingest did. `errors` and `warnings` keep the first MAX_MESSAGES messages;
    `error_count` counts them all. `tokens` counts the addresses the new documents took (an
    empty document takes one)."""

    files: int = 0
    added: int = 0
    skipped: int = 0          # docno already in the database
    replaced: int = 0
    duplicates: int = 0       # docno repeated inside this input (skipped unless replace)
    error_count: int = 0
    errors: list[str] = []
    warnings: list[str] = []
    tokens: int = 0
    bytes: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def documents(self) -> int:
        """Documents written (added or replaced)."""
        return self.added + self.replaced

    def line(self) -> str:
        """A one-line human summary."""
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        files = "file" if self.files == 1 else "files"
        text = (f"{self.added} added, {self.replaced} replaced, {self.skipped} skipped, "
                f"{self.duplicates} duplicates, {self.error_count} errors from {self.files} "
                f"{files}; {self.tokens} tokens in {self.seconds:.1f} s "
                f"({rate:,.0f} tokens/s)")
        return text


@dataclass(frozen=True)
class Source:
    """One checked input file."""

    path: str
    format: str
    gzip: bool
    size: int


def _Doc(line: int, docno: str, content, id_field: str | None,
         text_fields: list[str] | None, nbytes: int) -> tuple:
    """A document as a reader yields it: a plain tuple of these (content a str or a dict
    record), not a NamedTuple, whose construction cost more than decoding the record."""
    return line, docno, content, id_field, text_fields, nbytes


class _Problem(NamedTuple):
    line: int
    message: str


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


# ---------------------------------------------------------------- checking the inputs


def _strip_gz(name: str) -> tuple[str, bool]:
    if name.lower().endswith(".gz"):
        return name[:-3], True
    return name, False


def _open_binary(path: str, gz: bool) -> tuple[io.BufferedIOBase, io.BufferedIOBase]:
    """(reader, raw file): the raw file's position tells how many bytes were consumed."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    if not gz:
        return raw, raw
    return gzip.GzipFile(fileobj=raw, mode="rb"), raw


def _first_line(head: bytes) -> bytes:
    for line in head.splitlines():
        if line.strip():
            return line.strip().lstrip(b"\xef\xbb\xbf")
    return b""


def check_inputs(paths, format: str | None = None) -> list[Source]:
    """Check that every input can be read and decide its format; IngestError otherwise.
    Nothing is written: call this before opening the database."""
    if format is not None and format not in FORMATS:
        raise IngestError(f"unknown format {format!r}: choose one of {', '.join(FORMATS)}")
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise IngestError("no input files given")
    sources = []
    for path in paths:
        if not os.path.exists(path):
            raise IngestError(f"{path}: no such file")
        if os.path.isdir(path):
            raise IngestError(f"{path}: is a directory; give the files in it (e.g. {path}/*)")
        name, gz = _strip_gz(os.path.basename(path))
        try:
            reader, raw = _open_binary(path, gz)
            with raw, reader:
                head = reader.read(_PEEK_BYTES)
        except PermissionError:
            raise IngestError(f"{path}: permission denied") from None
        except (gzip.BadGzipFile, zlib.error, EOFError) as err:
            raise IngestError(f"{path}: not a readable gzip file ({err})") from None
        except OSError as err:
            raise IngestError(f"{path}: cannot read: {err.strerror or err}") from None
        fmt = format
        if fmt is None:
            fmt = _EXTENSIONS.get(os.path.splitext(name)[1].lower())
        if fmt is None:
            fmt = "trec" if _first_line(head).startswith(b"<DOC>") else "text"
        sources.append(Source(path, fmt, gz, os.path.getsize(path)))
    return sources


# ---------------------------------------------------------------- format readers
# Each reader yields _Doc or _Problem; `tell()` of the raw file gives the bytes consumed.


def _check_docno(docno: str) -> str | None:
    if not docno:
        return "empty docno"
    if len(docno) <= 100 and docno.isascii():  # (most: no encoding needed to know)
        return None
    try:
        size = len(docno.encode("utf-8"))
    except UnicodeEncodeError:
        return "docno is not valid Unicode (a lone surrogate)"
    if size > MAX_DOCNO_BYTES:
        return f"docno longer than {MAX_DOCNO_BYTES} bytes"
    return None


def _read_jsonl(reader, source: Source, id_field, text_fields) -> Iterator:
    decode = msgspec.json.Decoder().decode
    msmarco = source.format == "msmarco"
    resolve = records._docno
    for lineno, line in enumerate(reader, 1):
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if not line.strip():
            continue
        try:
            record = decode(line)
        except msgspec.DecodeError as err:
            yield _Problem(lineno, f"invalid JSON: {err}")
            continue
        except RecursionError:
            yield _Problem(lineno, "invalid JSON: nested too deeply")
            continue
        if not isinstance(record, dict):
            yield _Problem(lineno, f"not a JSON object but {_json_kind(record)}")
            continue
        fields, key = text_fields, id_field
        if text_fields is None and (msmarco or ("segment" in record and "docid" in record)):
            fields = list(MSMARCO_TEXT_FIELDS)
            key = id_field or "docid"
        try:
            key, docno = resolve(record, key)
        except IngestError as err:
            yield _Problem(lineno, str(err))
            continue
        bad = _check_docno(docno)
        if bad:
            yield _Problem(lineno, bad)
            continue
        yield lineno, docno, record, key, fields, len(line)  # a _Doc


def _json_kind(value) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def _decode_line(line: bytes) -> tuple[str | None, str | None]:
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return None, f"invalid UTF-8 at byte {err.start} of the line"


def _read_tsv(reader, source: Source, id_field, text_fields) -> Iterator:
    for lineno, raw in enumerate(reader, 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        line, bad = _decode_line(raw)
        if bad:
            yield _Problem(lineno, bad)
            continue
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        docno, tab, text = line.partition("\t")
        if not tab:
            yield _Problem(lineno, "no tab: expected docno<TAB>text")
            continue
        docno = docno.strip()
        bad = _check_docno(docno)
        if bad:
            yield _Problem(lineno, bad)
            continue
        yield _Doc(lineno, docno, text, None, None, len(raw))


def _read_text(reader, source: Source, id_field, text_fields) -> Iterator:
    data = reader.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        yield _Problem(line, f"invalid UTF-8 at byte {err.start}")
        return
    name, _ = _strip_gz(os.path.basename(source.path))
    docno = name.split(".", 1)[0] if not name.startswith(".") else name
    bad = _check_docno(docno)
    if bad:
        yield _Problem(1, bad)
        return
    yield _Doc(1, docno, text, None, None, len(data))


_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S)
_TAG = re.compile(r"<[^<>]*>")


def _trec_doc(body: str, line: int, nbytes: int):
    m = _DOCNO.search(body)
    if m is None:
        return _Problem(line, "<DOC> without <DOCNO>")
    docno = m.group(1)
    bad = _check_docno(docno)
    if bad:
        return _Problem(line, bad)
    text = html.unescape(_TAG.sub("\n", body[:m.start()] + body[m.end():]))
    text = "\n".join(s for s in (part.strip() for part in text.splitlines()) if s)
    return _Doc(line, docno, text, None, None, nbytes)


def _read_trec(reader, source: Source, id_field, text_fields) -> Iterator:
    inside, start_line, parts, nbytes, broken = False, 0, [], 0, None
    lineno = 0
    for lineno, raw in enumerate(reader, 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        line, bad = _decode_line(raw)
        if bad:
            if inside:
                broken = broken or _Problem(lineno, bad)
                nbytes += len(raw)
            else:
                yield _Problem(lineno, bad)
            continue
        pos = 0
        while True:
            if not inside:
                i = line.find("<DOC>", pos)
                if i < 0:
                    if line[pos:].strip():
                        yield _Problem(lineno, "text outside <DOC> ... </DOC>")
                    break
                if line[pos:i].strip():
                    yield _Problem(lineno, "text outside <DOC> ... </DOC>")
                inside, start_line, parts, nbytes, broken = True, lineno, [], 0, None
                pos = i + 5
            else:
                j = line.find("</DOC>", pos)
                k = line.find("<DOC>", pos)
                if 0 <= k and (j < 0 or k < j):
                    yield _Problem(start_line, "<DOC> not closed before the next <DOC>")
                    inside = False
                    pos = k
                    continue
                if j < 0:
                    parts.append(line[pos:])
                    break
                parts.append(line[pos:j])
                inside = False
                pos = j + 6
                yield broken or _trec_doc("".join(parts), start_line, nbytes + len(raw))
        if inside:
            nbytes += len(raw)
    if inside:
        yield _Problem(start_line, "<DOC> not closed at the end of the file")


_READERS = {"jsonl": _read_jsonl, "msmarco": _read_jsonl, "tsv": _read_tsv,
            "text": _read_text, "trec": _read_trec}


# ---------------------------------------------------------------- the reading side
# Reading, parsing, preparing and tokenizing need no database: for a big input they run in
# a second process (both cores busy), chunk by chunk ahead of the writer.


def _chunks(source: Source, id_field, text_fields, batch_bytes: int,
            batch_size: int | None) -> Iterator[_Chunk]:
    """The file's batches, made ready to add."""
    for pending, tell in _read_chunks(source, id_field, text_fields, batch_bytes, batch_size):
        yield _ready(pending, tell)


def _read_chunks(source: Source, id_field, text_fields, batch_bytes: int,
                 batch_size: int | None) -> Iterator[tuple[list, int]]:
    """The file's batches as read: (_Doc and _Problem items, bytes consumed after them)."""
    try:
        reader, raw = _open_binary(source.path, source.gzip)
    except OSError as err:
        raise IngestError(f"{source.path}: cannot read: {err.strerror or err}") from None
    pending: list = []
    docs, size = 0, 0
    items = _READERS[source.format](reader, source, id_field, text_fields)
    with raw, reader:
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
            if type(item) is tuple:  # a _Doc (else a _Problem)
                docs += 1
                size += item[5]
                if size >= batch_bytes or (batch_size and docs >= batch_size):
                    yield pending, raw.tell()
                    pending, docs, size = [], 0, 0
        yield pending, raw.tell()


def _ready(pending: list, tell: int) -> _Chunk:
    """Prepare and tokenize the documents among `pending` (_Doc and _Problem items); a
    document that cannot be stored becomes a problem."""
    return _made(*_prepared(pending), tell)


def _prepared(pending: list) -> tuple[list, list]:
    """(items, prepared): the _Problems and (line, docno) of the documents, in order, and
    the documents prepared (batch.prepare_item); one that cannot be is a problem."""
    items, prepared = [], []
    prepare = batch.prepare_item
    for item in pending:
        if type(item) is not tuple:  # a _Problem
            items.append(item)
            continue
        line, docno, content, id_field, text_fields, _ = item
        try:
            p = prepare(content, docno, id_field, text_fields)
        except Exception as err:  # noqa: BLE001 - reported against its line, not raised
            items.append(_Problem(line, f"not stored: {err}"))
            continue
        items.append((line, docno))
        prepared.append(p)
    return items, prepared


def _made(items: list, prepared: list, tell: int) -> _Chunk:
    """The chunk of these prepared documents, tokenized (see _prepared)."""
    if not prepared:
        return _Chunk(items, None, tell)
    try:
        made = batch.make(prepared)
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
        made = batch.make(prepared) if prepared else None
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
    gc.disable()  # see _no_cyclic_gc
    _set_malloc(_INGEST_MALLOC)  # see _keep_freed_memory (for the life of this process)
    out = sys.stdout.buffer
    source = None
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="annodb-make")
    failed = threading.Event()  # a chunk could not be made or sent: send none after it
    in_flight: list = []

    def make_and_send(items: list, prepared: list, tell: int) -> None:
        if failed.is_set():
            return
        try:
            chunk = _encoded(_made(items, prepared, tell))
            pickle.dump(("chunk", _packed(chunk)), out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except BaseException:
            failed.set()
            raise

    try:
        source, id_field, text_fields, batch_bytes, batch_size = pickle.load(sys.stdin.buffer)
        # this thread reads, parses and prepares; a second one tokenizes (the kernel
        # releases the GIL), encodes and sends, in order, at most a chunk behind
        for pending, tell in _read_chunks(source, id_field, text_fields, batch_bytes,
                                          batch_size):
            in_flight.append(worker.submit(make_and_send, *_prepared(pending), tell))
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
                         batch_size) -> Iterator[_Chunk]:
    """_chunks, made in a second Python process. A plain child process, not
    multiprocessing: that would re-run the caller's main script, and fork would copy this
    process's open LMDB environment."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this annodb's
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p))
    errors = tempfile.TemporaryFile()  # the child's stderr, for the message if it dies
    child = subprocess.Popen(
        [sys.executable, "-c", "from annodb.ingest import _reader_main; _reader_main()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env)
    try:
        while True:
            try:
                if not child.stdin.closed:
                    with child.stdin:
                        pickle.dump((source, id_field, text_fields, batch_bytes, batch_size),
                                    child.stdin)
                kind, value = pickle.load(child.stdout)
            except (EOFError, BrokenPipeError, pickle.UnpicklingError):
                code = child.wait()
                errors.seek(0)
                said = errors.read().decode("utf-8", "replace").strip().splitlines()
                raise IngestError(f"{source.path}: the reading process ended unexpectedly "
                                  f"(exit code {code})" + (f": {said[-1]}" if said else "")
                                  ) from None
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
        errors.close()


# ---------------------------------------------------------------- the driver


class _Run:
    def __init__(self, db, *, replace, strict, timeout, batch_size, batch_bytes, progress,
                 on_problem, total_bytes, parallel=None):
        self.db = db
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
    def problem(self, path: str, line: int, message: str, pending: int = 0) -> None:
        where = f"{path}:{line}" if line else path
        text = f"{where}: {message}"
        if self.strict:
            s = self.summary
            raise IngestError(
                f"{text} (stopped by strict; {s.added + s.replaced} documents of earlier "
                f"batches were committed, the {pending} of the current batch were not)")
        s = self.summary
        s.error_count += 1
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
        return s.added + s.replaced + s.skipped + s.duplicates

    # one file
    def file(self, source: Source, id_field, text_fields) -> None:
        args = (source, id_field, text_fields, self.batch_bytes, self.batch_size)
        parallel = self.parallel
        if parallel is None:
            parallel = source.size >= PARALLEL_OVER
        chunks = _chunks_from_process(*args) if parallel else _chunks(*args)
        with contextlib.closing(chunks):
            for chunk in chunks:
                docs = []
                for item in chunk.items:
                    if isinstance(item, _Problem):
                        self.problem(source.path, item.line, item.message, len(docs))
                    else:
                        docs.append(item)
                if docs:
                    self.write(docs, chunk.batch, source.path)
                self.report(self.done(), chunk.tell)
        self.bytes_before += source.size
        self.report(self.done(), 0)

    # one batch = one transaction
    def write(self, docs: list[tuple[int, str]], made: batch.Batch, path: str) -> None:
        """Write a chunk's documents ((line, docno) each, their batch `made`)."""
        while docs:
            try:
                counts, warnings = self._write_once(docs, made, path)
            except _Rejected as rejected:
                bad = docs[rejected.index]
                message = f"not stored: {rejected.err}"
                self.problem(path, bad[0], message, len(docs))
                keep = [k for k in range(len(docs)) if k != rejected.index]
                docs = [docs[k] for k in keep]
                made = made.subset(keep)
                continue
            except WriterBusyError:
                raise
            except AnnodbError as err:   # the commit itself failed: nothing of it was written
                s = self.summary
                raise IngestError(
                    f"{path}:{docs[0][0]}-{docs[-1][0]}: the batch of {len(docs)} "
                    f"documents could not be committed: {err} ({s.added + s.replaced} "
                    "documents of earlier batches stay committed)") from err
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

    def _write_once(self, docs: list[tuple[int, str]], made: batch.Batch, path: str):
        counts = dict(added=0, replaced=0, skipped=0, duplicates=0, tokens=0)
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
                    warnings.append(f"{path}:{line}: duplicate docno {docno!r} {verb}")
                    if not replace:
                        continue
                elif docno in present:
                    if not replace:
                        counts["skipped"] += 1
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
           timeout: float | None = None, parallel: bool | None = None) -> Summary:
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

    progress(documents done, bytes read, bytes in all) is called as the ingest goes;
    on_problem("file:line: message") for each malformed record (also listed in the summary).
    Raises IngestError for unreadable inputs (before writing anything) and, with strict,
    at the first malformed record (earlier batches stay committed).
    """
    if hasattr(db, "shards") or (isinstance(db, (str, os.PathLike)) and
                                 os.path.isfile(os.path.join(db, "manifest.json"))):
        from . import sharded_ingest  # a sharded collection: read and written in parallel
        return sharded_ingest.ingest(
            db, paths, format=format, id_field=id_field, text_fields=text_fields,
            batch_size=batch_size, batch_bytes=batch_bytes, replace=replace, strict=strict,
            progress=progress, on_problem=on_problem, timeout=timeout)
    started = time.perf_counter()
    sources = check_inputs(paths, format)
    text_fields = list(text_fields) if text_fields else None
    own = not isinstance(db, database.Database)
    if own:
        db = database.open(db)
    try:
        run = _Run(db, replace=replace, strict=strict, timeout=timeout, batch_size=batch_size,
                   batch_bytes=batch_bytes, progress=progress, on_problem=on_problem,
                   total_bytes=sum(s.size for s in sources), parallel=parallel)
        with _no_cyclic_gc(), _keep_freed_memory():
            try:
                for source in sources:
                    run.file(source, id_field, text_fields)
                    run.summary.files += 1
            finally:
                run.summary.seconds = time.perf_counter() - started
                run.summary.bytes = run.bytes_before
        return run.summary
    finally:
        if own:
            db.close()
