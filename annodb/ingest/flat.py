"""The fast way a big JSONL file is read: batches of flat records (an id field and text
fields, all strings: `{"docid": "d1", "source": "web", "text": "..."}`) read by one kernel
pass over the file's bytes (kernels.scan_flat) and made into a batch from its arrays
(batch.make_scanned), without a Python object per record or field.

Anything the kernel cannot prove it reads exactly as the ordinary path does (numbers,
nested values, null, a BOM, a blank line, broken JSON or UTF-8, an escaped or lone
surrogate, a key with escapes or beyond ASCII, a key twice, a docno that is not a
string of 1 to MAX_DOCNO_BYTES bytes without escapes, an MS MARCO record (`segment`)) is
read the ordinary way (formats.jsonl_items, records.prepare, batch.make) together with
the rest of its batch: a batch is wholly one or the other, and its records, problems,
line numbers, size and where it ends are the same either way, so the database written
is the same byte for byte.

Used for plain (not gzipped) JSONL files without --text-field or sparse fields, read
in ingest's second process (database._reader_main).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import numpy as np

from .. import kernels
from ..records import ID_FIELDS
from .formats import MAX_DOCNO_BYTES, Problem, jsonl_items
from .inputs import Source

READ_BYTES = 16 << 20   # the file is read this much at a time
SLACK = 4 << 20         # the kernel is given a batch's bytes and this much (more if need be)


class Scanned(NamedTuple):
    """A batch read by the kernel: its records' first line number and the scan."""

    line: int
    scan: dict


def usable(source: Source, text_fields, sparse) -> bool:
    """Whether `source` may be read this way."""
    return (source.format == "jsonl" and not source.gzip and not source.files
            and not text_fields and not sparse)


class _Lines:
    """A file's bytes from a position on, read ahead in blocks."""

    def __init__(self, reader):
        self.reader = reader
        self.buf = b""
        self.base = 0         # the file offset of buf[0]
        self.pos = 0          # the next line's start in buf
        self.line = 1         # its line number
        self.eof = False
        self.error: OSError | None = None

    def fill(self, ahead: int) -> None:
        """Read on until `ahead` bytes lie after pos (or the file ends)."""
        while not self.eof and len(self.buf) - self.pos < ahead:
            try:
                data = self.reader.read(max(READ_BYTES, ahead - (len(self.buf) - self.pos)))
            except OSError as err:   # the file broke off: its whole lines before are read
                self.error, self.eof = err, True
                self.buf = self.buf[:max(self.pos, self.buf.rfind(b"\n", self.pos) + 1)]
                return
            if not data:
                self.eof = True
                return
            self.buf = self.buf[self.pos:] + data
            self.base += self.pos
            self.pos = 0

    def tell(self) -> int:
        return self.base + self.pos

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, line) from pos on, each consumed as it is given."""
        while True:
            end = self.buf.find(b"\n", self.pos) + 1
            while not end and not self.eof:
                self.fill(len(self.buf) - self.pos + READ_BYTES)
                end = self.buf.find(b"\n", self.pos) + 1
            if not end:
                end = len(self.buf)
                if end == self.pos:
                    return
            line = self.buf[self.pos:end]
            self.pos, self.line = end, self.line + 1
            yield self.line - 1, line


def read(reader, source: Source, id_field, batch_bytes: int, batch_size: int | None,
         stop=None) -> Iterator[tuple[list | Scanned, int]]:
    """What stages.read yields for the file open as `reader`, batch for batch: a Scanned
    for a batch the kernel read, else the batch's Docs and Problems; the last batch is
    the rest (empty when the one before ended the file)."""
    ids = [id_field.encode("utf-8")] if id_field else [k.encode() for k in ID_FIELDS]
    forbid = [b"segment"]   # (with docid: an MS MARCO record, read with its own fields)
    data = _Lines(reader)
    limit = max(int(batch_bytes), 1)
    while True:
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt
        window = limit + SLACK   # (the kernel's arrays are sized by the bytes it is given)
        while True:
            data.fill(window)
            end = min(len(data.buf), data.pos + window)
            scan = kernels.scan_flat(np.frombuffer(data.buf, np.uint8), data.pos, end,
                                     data.eof and end == len(data.buf), ids, forbid, limit,
                                     batch_size or 0, MAX_DOCNO_BYTES)
            if scan["why"] != kernels.MORE:
                break
            window *= 2
        why = scan["why"]
        if why == kernels.OTHER or (why == kernels.END and data.error is not None):
            pending, cut = _ordinary(data, source, id_field, limit, batch_size)
            if cut:
                yield pending, data.tell()
                continue
            if data.error is not None:   # (as stages.read: the rest, then the break)
                pending.append(Problem(0, f"cannot read further: {data.error}"))
            yield pending, data.tell()
            return
        n = scan["docs"]
        if not n:   # (END: the file ended with the batch before)
            yield [], data.tell()
            return
        batch = Scanned(data.line, scan)
        data.pos = scan["next"]
        data.line += n
        yield batch, data.tell()
        if why == kernels.END:
            return


def _ordinary(data: _Lines, source, id_field, limit: int, batch_size) -> tuple[list, bool]:
    """One batch read the ordinary way from data.pos, cut as stages.read cuts it, and
    whether it was cut (else the file ended)."""
    pending: list = []
    docs, size = 0, 0
    for item in jsonl_items(data.lines(), source, id_field, None):
        pending.append(item)
        if type(item) is tuple:  # a Doc (else a Problem)
            docs += 1
            size += item[5]
            if size >= limit or (batch_size and docs >= batch_size):
                return pending, True
    return pending, False


def lines_of(scanned: Scanned) -> np.ndarray:
    """The line number of each record of a Scanned batch (one line each)."""
    return scanned.line + np.arange(scanned.scan["docs"], dtype=np.int64)

