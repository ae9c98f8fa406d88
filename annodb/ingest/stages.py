"""The stages of an ingest that need no database, one function each, shared by the
one-database path (database.py) and the sharded one (sharded.py):

    read       a source's records (formats.READERS) and problems, cut into batches
    prepare    each record prepared (batch.prepare_item: docno, fields, values, metadata);
               one that cannot be is a problem against its line
    make       the batch's documents tokenized and laid out (batch.make): a Chunk
    encode     their stored form made (batch.with_raws), ready for a writer
    (commit    each batch one write transaction: database.Run.write)

`chunks` runs read, prepare and make in this process; for a big input the one-database
path runs them in a second process (both cores busy), and a sharded ingest in a process
per core, chunk by chunk ahead of the writers. `packed` and `unpacked` are a Chunk as it
crosses the pipe between them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import itertools
import threading
import zlib
from typing import Generator, Iterator, NamedTuple, cast

import numpy as np

from .. import batch, tokenizer
from ..errors import IngestError
from . import flat, formats
from .formats import Problem
from .inputs import Source


class Chunk(NamedTuple):
    """One batch of a file as the reading side hands it to the writing side: the problems
    and documents in file order, the documents prepared and tokenized, and how many bytes
    of the file were consumed after it."""

    items: list                  # Problem, and (line, docno) of each document (a plain
    #                              tuple: a named one pickles several times slower)
    batch: batch.Batch | None    # the documents, in order (None when there is none)
    tell: int
    lines: np.ndarray | None = None   # each document's line when there is no Problem


def chunks(source: Source, id_field, text_fields, batch_bytes: int,
           batch_size: int | None, stop: threading.Event | None = None,
           sparse: tuple = ()) -> Generator[Chunk, None, None]:
    """The file's batches, made ready to add (`sparse`: the sparse fields)."""
    for pending, tell in read(source, id_field, text_fields, batch_bytes, batch_size, stop):
        assert isinstance(pending, list)   # (no fast_sparse: no flat.Scanned)
        yield make(*prepare(pending, stop, sparse), tell, sparse)


def read(source: Source, id_field, text_fields, batch_bytes: int,
         batch_size: int | None, stop: threading.Event | None = None,
         fast_sparse: tuple | None = None) -> Iterator[tuple[list | flat.Scanned, int]]:
    """The file's batches as read: (Doc and Problem items, bytes consumed after them).
    KeyboardInterrupt between two records once `stop` is set (see process.ctrl_c_noted).
    With `fast_sparse` (the sparse fields) given, a batch of flat JSONL records may come
    as a flat.Scanned instead of its items (see flat.py; made by `made`)."""
    if fast_sparse is not None and flat.usable(source, text_fields, fast_sparse):
        try:
            file = open(source.path, "rb")  # noqa: SIM115 - closed below
        except OSError as err:
            raise IngestError(f"{source.path}: cannot read: {err.strerror or err}") from None
        with file:
            yield from flat.read(file, source, id_field, batch_bytes, batch_size, stop)
        return
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
                pending.append(Problem(0, f"cannot read further: {err}"))
                break
            if item is None:
                break
            pending.append(item)
            if type(item) is tuple:  # a Doc (else a Problem)
                docs += 1
                size += item[5]
                if stop is not None and not docs & 63 and stop.is_set():
                    raise KeyboardInterrupt
                if size >= batch_bytes or (batch_size and docs >= batch_size):
                    yield pending, tell()
                    pending, docs, size = [], 0, 0
        yield pending, tell()


def prepare(pending: list, stop: threading.Event | None = None, sparse: tuple = ()
            ) -> tuple[list, list]:
    """(items, prepared): the Problems and (line, docno) of the documents, in order, and
    the documents prepared (batch.prepare_item); one that cannot be is a problem.
    KeyboardInterrupt between two documents once `stop` is set (see process.ctrl_c_noted)."""
    items, prepared = [], []
    prepare_item = batch.prepare_item
    for item in pending:
        if type(item) is not tuple:  # a Problem
            items.append(item)
            continue
        if stop is not None and not len(items) & 63 and stop.is_set():
            raise KeyboardInterrupt
        line, docno, content, id_field, text_fields, _ = item
        try:
            p = prepare_item(content, docno, id_field, text_fields, sparse)
        except Exception as err:  # noqa: BLE001 - reported against its line, not raised
            items.append(Problem(line, f"not stored: {err}"))
            continue
        items.append((line, docno))
        prepared.append(p)
    return items, prepared


def make(items: list, prepared: list, tell: int, sparse: tuple = ()) -> Chunk:
    """The chunk of these prepared documents, tokenized (see prepare)."""
    if not prepared:
        return Chunk(items, None, tell)
    made: batch.Batch | None
    try:
        made = batch.make(prepared, sparse=sparse)
    except UnicodeError:
        bad = set(batch.bad_documents(prepared))
        message = "not stored: document text is not valid Unicode (a lone surrogate)"
        k, kept_items, kept = 0, [], []
        for item in items:
            if not isinstance(item, Problem):
                if k in bad:
                    item = Problem(item[0], message)
                else:
                    kept.append(prepared[k])
                k += 1
            kept_items.append(item)
        items, prepared = kept_items, kept
        made = batch.make(prepared, sparse=sparse) if prepared else None
    return Chunk(items, made, tell)


def made(scanned: flat.Scanned, tell: int, numbers: tokenizer.WordNumbers | None = None,
         items: bool = True) -> Chunk:
    """The chunk of a batch of flat records read by the kernel (see flat.py): what make
    and encode give for the same records read the ordinary way (and its words numbered
    in `numbers`, when given: batch.make_scanned). Without `items`, its items are left
    empty (a chunk only `packed` for the pipe, which sends its lines instead)."""
    b = batch.make_scanned(scanned.scan, numbers)
    lines = flat.lines_of(scanned)
    return Chunk(list(zip(lines.tolist(), b.docnos)) if items else [], b, tell, lines)


def encode(chunk: Chunk) -> Chunk:
    """The chunk with its documents encoded for the writer (see batch.with_raws)."""
    if chunk.batch is None or any(d is None for d in chunk.batch.docnos):
        return chunk
    try:
        return chunk._replace(batch=batch.with_raws(chunk.batch))
    except UnicodeError:  # the writer finds which document (see database.Run._culprit)
        return chunk


def packed(chunk: Chunk) -> tuple:
    """The chunk as it crosses the pipe: its documents' lines as an array (their docnos
    are the batch's), its problems with their places: not a tuple per document, which
    took the reading process (the busier one) ~2 s to pickle on the scale corpus; the
    batch's docnos as one string, joined by newlines, when none holds one (a list of
    ~27k strings took ~3 ms a batch to pickle, the string ~0.3 ms to join)."""
    made = chunk.batch
    if made is not None:
        try:
            joined = "\n".join(made.docnos)
        except TypeError:   # (a docno still to be made: None)
            joined = None
        if joined is not None and joined.count("\n") == len(made.docnos) - 1:
            # (a string on the pipe only: unpacked splits it back into the list)
            made = dataclasses.replace(made, docnos=cast(list, joined))
    if chunk.lines is not None:
        return [], chunk.lines, made, chunk.tell
    problems = [(i, item) for i, item in enumerate(chunk.items) if isinstance(item, Problem)]
    lines = np.fromiter((item[0] for item in chunk.items if not isinstance(item, Problem)),
                        dtype=np.int64)
    return problems, lines, made, chunk.tell


def unpacked(data: tuple) -> Chunk:
    """The Chunk that `packed` made this of."""
    problems, lines, made, tell = data
    if made is not None and isinstance(made.docnos, str):
        made = dataclasses.replace(made, docnos=made.docnos.split("\n"))
    docs = zip(lines.tolist(), made.docnos) if made is not None else iter(())
    items: list = []
    for i, problem in problems:  # each back where it was
        items.extend(itertools.islice(docs, i - len(items)))
        items.append(problem)
    items.extend(docs)
    return Chunk(items, made, tell, None if problems else lines)
