"""Documents: the stored form of a document (Document, its msgpack with relative
addresses), the zstd groups consecutive documents are stored in (sub-database docs, see
layout.py), and Txn's part that reads and writes docs, docnos and the erased ranges.
"""

from __future__ import annotations

import bisect
import os
import threading
import zlib
from typing import Any, ClassVar

import msgspec
import numpy as np
import zstandard

from .environment import _pool
from .features import Features
from .layout import (GROUP_DOCS, PAGE_HEADER, TAG_DOC, TAG_GROUP, TAG_REL_DOC, TAG_REL_GROUP,
                     TAG_ZDOC, BadValue, _append_all, _keys8, _utf8_all, from_u64, u64, utf8)

COMPRESS_OVER = 1024  # a document alone this long (msgpack bytes) is compressed (a group of one)
# Consecutive documents are compressed together in groups, with zstd (level 1). Measured
# on 300k short passages (666 bytes of msgpack each on average): zlib-6 on 2 KB groups
# gave 0.37 of the raw size at 53 MB/s, inflating a group in 11 us; zstd-3 gives 0.38 at
# 190 MB/s and 5.7 us, and on 4 KB groups 0.33 in 8 us. Compression is most of what
# storing documents costs an ingest, and inflating a group most of reading one document.
# Groups of a fixed raw size left leaf pages ~70% full (two 1.4 KB values to a page).
# Sized by their compressed value instead: just under half a page (two to a leaf page),
# the scale corpus's docs took 253 MB; nearly one overflow page each (~11 KB of raw text,
# which compresses better), 211 MB, for ~25 us instead of ~15 to read one document. Long
# documents' overflow pages taking the next documents made the docs sub-database 0.56 of
# its format-1 size instead of 0.70 (2 KB zlib groups). Level 1 instead of 3: on a 32 MB
# batch of scale passages 321 MB/s instead of 257, 1% more groups (0.346 of the raw size
# instead of 0.341).
ZSTD_LEVEL = 1
GROUP_SLACK = 32  # a group aims at this many bytes under one overflow page
GROUP_AIM = 1.06  # and at this much more raw text than the last group's ratio says fits
REGROUP_LONG = 64 << 10  # a long document alone, up to this long, is regrouped (put_docs)
GROUP_CACHE = 8  # decoded groups a transaction keeps (the top hits often share groups)


class DocField(msgspec.Struct, array_like=True):
    name: str          # short name ("title"); "" for the text of a plain document
    path: str          # full path (":title:", ":authors:[0]:"); "" for plain text
    char_start: int    # the field's text is Document.text[char_start:char_end]
    char_end: int
    start: int         # address of its first token; start > end when it has no token
    end: int


class Document(msgspec.Struct, array_like=True, omit_defaults=True):
    """A stored document: its docno, address range [start, end], text and fields. (Stored as
    a msgpack array: add fields only at the end, with defaults.)"""

    docno: str
    start: int
    end: int
    text: str
    fields: list[DocField]
    meta: dict = {}
    tokens: int = 0
    container: str = ":"   # the feature over its range: ":" for the collection's documents

    def display_text(self, fields=()) -> str:
        """The text of the named fields (short names, `title:` or full paths; every field
        of that name, in order), joined by " ... "; the whole text when none of them has
        any. Newlines become spaces. What the server and the Vole show of a document."""
        parts = []
        for name in fields:
            for f in self.fields:
                if name in (f.name, f.path, f.name + ":"):
                    text = self.text[f.char_start:f.char_end]
                    if text.strip():
                        parts.append(text)
        text = " ... ".join(parts) if parts else self.text
        return text.replace("\r", " ").replace("\n", " ")

    def field_text(self, name: str) -> str | None:
        """The text of the first field called `name` (short name or full path), or None."""
        for f in self.fields:
            if name in (f.name, f.path, f.name + ":"):
                return self.text[f.char_start:f.char_end]
        return None


_doc_encoder = msgspec.msgpack.Encoder()
_doc_decoder = msgspec.msgpack.Decoder(Document)
_docs_decoder = msgspec.msgpack.Decoder(list[Document])
_raws_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])


class _Head(msgspec.Struct, array_like=True):
    """The first fields of a stored Document (decoding skips the rest)."""

    docno: str
    start: int
    end: int


_heads_decoder = msgspec.msgpack.Decoder(list[_Head])
_starts_encoder = msgspec.msgpack.Encoder()
_starts_decoder = msgspec.msgpack.Decoder(list[int])
_rel_group_decoder = msgspec.msgpack.Decoder(tuple[msgspec.Raw, msgspec.Raw])
_head_decoder = msgspec.msgpack.Decoder(_Head)


def _array_header(n: int) -> bytes:
    """The msgpack header of an n-element array: followed by n encoded items it is the
    msgpack of the list, byte for byte what encoding the list would give."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")



_zstd = threading.local()  # zstandard's (de)compressors are one per thread


def _compressor():
    c = getattr(_zstd, "c", None)
    if c is None:
        c = _zstd.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _decompressor():
    d = getattr(_zstd, "d", None)
    if d is None:
        d = _zstd.d = zstandard.ZstdDecompressor()
    return d


def _fresh_zstd() -> None:
    """In a forked child: zstd contexts of its own."""
    global _zstd
    _zstd = threading.local()


os.register_at_fork(after_in_child=_fresh_zstd)


def _unzip_group(buf) -> bytes:
    """The msgpack of a tag-2 value."""
    try:
        return _decompressor().decompress(memoryview(buf)[1:])
    except zstandard.ZstdError as err:
        raise BadValue(f"a document group does not decompress: {err}") from None


def _group(raws, rel) -> bytes:
    """The tag-3 value of consecutive documents given as their relative msgpack (see
    relative_raw), starting at `rel` (ascending) past the value's key."""
    return b"\x03" + _compressor().compress(
        b"\x92" + _starts_encoder.encode(rel) + _array_header(len(raws)) + b"".join(raws))


def _single(raw) -> bytes:
    """The value of one document from its relative msgpack: tag 4, or when long a group of
    one (compressed)."""
    if len(raw) < COMPRESS_OVER:
        return b"\x04" + raw
    return _group((raw,), [0])


def _legacy_group(raws) -> bytes:
    """A tag-2 value (absolute addresses): how a format-2 group is rewritten after a
    deletion (format 3 writes no new ones)."""
    return b"\x02" + _compressor().compress(_array_header(len(raws)) + b"".join(raws))


def _shift(doc: Document, by: int) -> Document:
    """The document with `by` added to every address (in place)."""
    if by:
        doc.start += by
        doc.end += by
        for f in doc.fields:
            f.start += by
            f.end += by
    return doc


def relative_raw(doc: Document) -> bytes:
    """The msgpack of the document with its addresses less its start (its start 0): what
    tags 3 and 4 hold. Leaves `doc` as it is."""
    s = doc.start
    fields = doc.fields if s == 0 else [
        DocField(f.name, f.path, f.char_start, f.char_end, f.start - s, f.end - s)
        for f in doc.fields]
    row = (doc.docno, 0, doc.end - s, doc.text, fields, doc.meta, doc.tokens)
    # the container only when it is not ":", as batch.make writes documents (msgspec
    # writes every field of an array-like struct, defaults too)
    return _doc_encoder.encode(row if doc.container == ":" else row + (doc.container,))


def encode_relative(doc) -> bytes:
    """The msgpack of a document whose addresses are relative already (a Document, or the
    tuple of its fields, see batch.make)."""
    return _doc_encoder.encode(doc)


def split_raws(array: bytes) -> list:
    """The msgpack of each document of an encoded list of them (encode_relative of the
    list), without decoding them."""
    return _raws_decoder.decode(array)


def encode_doc(doc: Document) -> bytes:
    """The value of one document alone (tag 4, or a group of one), keyed by its start."""
    return _single(relative_raw(doc))


def _leaf_max(psize: int) -> int:
    """The longest docs value LMDB keeps in a leaf page of `psize` bytes (an 8-byte key);
    a longer one gets overflow pages of its own (LMDB's me_nodemax, less the node header
    and key)."""
    return (((psize - 16) // 2) & -2) - 2 - 16


def _encode_run(raws: list, starts: list, lo: int, hi: int, psize: int
                ) -> list[tuple[int, bytes, int]]:
    """(start, value, count) of the entries documents lo..hi-1 (given as their relative
    msgpack and their starts, in any frame) are stored in, keyed by their first starts:
    groups of at most GROUP_DOCS documents whose compressed value comes close to filling
    one LMDB overflow page (values that large get pages of their own, never split or
    shared); or one document alone (tag 4, or a group of one). A group is compressed once,
    as a stream cut where the page is full (see _streamed_group); when the ratio it starts
    from is too hopeful, again from the ratio it met. A document too long for one page gets
    overflow pages of its own: it takes the documents after it while it still fits those
    pages (at most GROUP_DOCS)."""
    out = []
    room = psize - PAGE_HEADER          # one overflow page
    target = room - GROUP_SLACK
    ratio = 0.4  # compressed / raw bytes of the last group
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    cum = [0, *np.cumsum(lens).tolist()]
    longs = (np.flatnonzero(lens[lo:hi] > room - 16) + lo).tolist() + [hi]
    i = lo
    while i < hi:
        if len(raws[i]) + 16 > room:  # long: its own overflow pages, filled (below)
            value, j = _alone_or_filled(raws, starts, i, hi, psize)
            out.append((starts[i], value, j - i))
            i = j
            continue
        found, j = _streamed_group(raws, starts, i, hi, room, target, ratio, cum, longs)
        if found is None:  # its first block alone overfilled the page: j is what it met
            found, j = _streamed_group(raws, starts, i, hi, room, target, j, cum, longs)
        if found is None:
            found, j = _fitted_group(raws, starts, i, hi, room, target, ratio)
        if j - i > 1:
            ratio = len(found) / (cum[j] - cum[i])
        out.append((starts[i], found, j - i))
        i = j
    return out


STREAM_FIRST = 0.9  # a streamed group's first block: this much of the raw text the last
#                     group's ratio says fills a page
STREAM_MARGIN = 40  # each later block aims this many bytes under the page's room by the
STREAM_SHARE = 0.4  # ratio met so far, or this share of the room left when more,
STREAM_NEXT = 0.2   # and is tried while that leaves room for this much of the next document
STARTS_BYTES = 3  # msgpack bytes of a start within a group (the exact header is checked)
_BLOCK_FLUSH = zstandard.COMPRESSOBJ_FLUSH_BLOCK
_MAGIC = b"\x28\xb5\x2f\xfd"


def _int_size(n: int) -> int:
    """The bytes of a non-negative int in msgpack."""
    return 1 if n < 128 else 2 if n < 256 else 3 if n < 65536 else 5 if n < 1 << 32 else 9


def _frame_head(n: int) -> bytes:
    """The header of a zstd frame of n bytes of content, one segment (its window is its
    content), no checksum or dictionary: what zstd writes for a frame of known size."""
    if n < 256:
        return _MAGIC + bytes((0x20, n))
    if n < 65536 + 256:
        return _MAGIC + b"\x60" + (n - 256).to_bytes(2, "little")
    return _MAGIC + b"\xa0" + n.to_bytes(4, "little")


def _frame_head_size(buf: bytes) -> int | None:
    """The length of the zstd frame header `buf` begins with; None when it names a
    dictionary or a checksum (not spliced)."""
    fhd = buf[4]
    if fhd & 0x07:
        return None
    single = fhd >> 5 & 1
    return 5 + (1 - single) + (single, 2, 4, 8)[fhd >> 6]


def _last_block(body: bytes | bytearray, at: int) -> int:
    """The offset of the last block header in `body`, zstd blocks from offset `at`."""
    last = at
    while at < len(body):
        head = int.from_bytes(body[at:at + 3], "little")
        last = at
        at += 3 + (1 if (head >> 1) & 3 == 1 else head >> 3)  # (an RLE block: one byte)
    if at != len(body):
        raise BadValue("a zstd block runs past its stream")
    return last


def _streamed_group(raws: list, starts: list, i: int, hi: int, room: int, target: int,
                    ratio: float, cum: list, longs: list) -> tuple[bytes | None, Any]:
    """(value, end) of the tag-3 group raws[i:end] that fills one overflow page (room
    bytes) as nearly as documents allow, compressed once: the documents go through one
    zstd stream, a block flushed after the first ones (how many, `ratio` estimates) and
    after each later run of them (how many, the ratio met so far estimates), and the group
    ends at the last flush that still fits the page. Its value is a zstd frame of the same
    content as _group's, the header (the starts and the count, known only at the cut) in
    a raw block before the stream's blocks: any zstd decoder reads it, and its blocks are
    those the stream made, as zstd matches and repeats only backwards within a frame.
    `cum`: the raw bytes before each document of the run; `longs`: the run's documents too
    long for one page, ascending. (None, the ratio met) when the first block alone does not
    fit."""
    first, base = starts[i], cum[i]
    limit = min(hi, i + GROUP_DOCS, longs[bisect.bisect_right(longs, i)])
    cap = cum[limit] - base    # raw bytes fed at most: zstd sizes its tables by them

    def cut(more: float) -> int:   # the end of as many documents as fit `more` raw bytes
        return min(max(bisect.bisect_right(cum, base + more, i, limit + 1) - 1, j + 1), limit)

    def total(k: int) -> int:   # the value's bytes with the documents i..k-1
        n = k - i
        head = 1 + 2 * (1 if n < 16 else 3) + STARTS_BYTES * n
        content = head + cum[k] - base
        return 1 + (6 if content < 256 else 7 if content < 65792 else 9) + 3 + head + blen

    j, blen = i, 0
    k = cut(target / ratio * STREAM_FIRST)
    stream = _compressor().compressobj(size=cap)
    chunk = stream.compress(b"".join(raws[i:k])) + stream.flush(_BLOCK_FLUSH)
    skip = _frame_head_size(chunk)
    if skip is None:
        return None, ratio
    parts, blen, last = [chunk[skip:]], len(chunk) - skip, 0
    j = k
    if total(j) > room:
        return None, total(j) / (cum[j] - base)
    while j < limit:
        per = blen / (cum[j] - base)   # compressed bytes a raw byte, so far
        left = target - total(j)
        more = (left - max(STREAM_MARGIN, left * STREAM_SHARE)) / per
        if more < len(raws[j]) * STREAM_NEXT:   # the next one is not likely to fit
            break
        k = cut(cum[j] - base + more)
        chunk = stream.compress(b"".join(raws[j:k])) + stream.flush(_BLOCK_FLUSH)
        blen += len(chunk)
        if total(k) > room:
            blen -= len(chunk)
            break
        parts.append(chunk)
        last = blen - len(chunk)
        j = k
    if j - i == 1:
        return _single(raws[i]), j
    body = bytearray().join(parts)
    at = _last_block(body, last)
    body[at] |= 1   # the frame's last block
    head = b"\x92" + _starts_encoder.encode([x - first for x in starts[i:j]]) + \
        _array_header(j - i)
    return b"".join((b"\x03", _frame_head(len(head) + cum[j] - base),
                     (len(head) << 3).to_bytes(3, "little"), head, body)), j


def _fitted_group(raws: list, starts: list, i: int, hi: int, room: int, target: int,
                  ratio: float) -> tuple[bytes, int]:
    """(value, end) of a group raws[i:end] compressed whole, as much raw text as `ratio`
    says fits a little more than one overflow page, then documents given back in
    proportion until it fits (each try compressed again)."""
    budget = target / ratio * GROUP_AIM
    j, size = i + 1, len(raws[i])
    while j < hi and j - i < GROUP_DOCS and size + len(raws[j]) <= budget and \
            len(raws[j]) + 16 <= room:
        size += len(raws[j])
        j += 1

    def group(i, j):
        if j - i == 1:
            return _single(raws[i])
        first = starts[i]
        return _group(raws[i:j], [x - first for x in starts[i:j]])

    value = group(i, j)
    while len(value) > room and j - i > 1:  # too hopeful: give back in proportion
        keep = size * target / len(value)
        while j - i > 1 and size > keep:
            j -= 1
            size -= len(raws[j])
        value = group(i, j)
    return value, j


def _alone_or_filled(raws: list, starts: list, i: int, hi: int, psize: int
                     ) -> tuple[bytes, int]:
    """(value, end): the long document raws[i] alone (a group of one) or, when that needs
    overflow pages, the group raws[i:end] that also takes the documents after it while it
    fits those pages: as many as its compression ratio says would fit, fewer if they do
    not."""
    alone = _group(raws[i:i + 1], [0])
    if len(alone) <= _leaf_max(psize) or i + 1 == hi:
        return alone, i + 1
    cap = -(-(len(alone) + 16) // psize) * psize - 16  # the pages' room (16: a header)
    ratio = len(alone) / max(len(raws[i]), 1)
    k, size = i + 1, float(len(alone) + 2)
    while k < hi and k - i < GROUP_DOCS and size + ratio * len(raws[k]) <= cap:
        size += ratio * len(raws[k])
        k += 1
    while k > i + 1:
        group = _group(raws[i:k], [x - starts[i] for x in starts[i:k]])
        if len(group) <= cap:
            return group, k
        k = i + 1 + (k - i - 1) * 3 // 4  # (the estimate was too hopeful)
    return alone, i + 1


def encode_docs(raws: list, starts: list, psize: int, threads: int = 2
                ) -> list[tuple[int, bytes, int]]:
    """(start, value, count) of the docs entries that hold these consecutive documents
    (their relative msgpack, see relative_raw, and their starts, ascending, in any frame:
    a value does not depend on where its documents are). Many documents are compressed on
    two threads (zstd releases the GIL) unless `threads` is 1."""
    if len(raws) >= 64 and threads > 1:
        half = len(raws) // 2
        other = _pool().submit(_encode_run, raws, starts, half, len(raws), psize)
        return _encode_run(raws, starts, 0, half, psize) + other.result()
    return _encode_run(raws, starts, 0, len(raws), psize)



def _rel_parts(buf):
    """(starts relative to the key, the documents' msgpack array) of a tag-3 value."""
    starts, docs = _rel_group_decoder.decode(_unzip_group(buf))
    return _starts_decoder.decode(starts), docs


def decode_docs(buf, key: int) -> list[Document]:
    """The documents of the docs value `buf` of any tag, keyed by `key`, in address
    order."""
    if not len(buf):
        raise BadValue("an empty docs value")
    kind = buf[0]
    if kind == TAG_REL_GROUP:
        rel, docs = _rel_parts(buf)
        found = _docs_decoder.decode(docs)
        if len(rel) != len(found):
            raise BadValue(f"a document group lists {len(rel)} starts for "
                           f"{len(found)} documents")
        return [_shift(d, key + r) for d, r in zip(found, rel)]
    if kind == TAG_REL_DOC:
        return [_shift(_doc_decoder.decode(memoryview(buf)[1:]), key)]
    if kind == TAG_GROUP:
        return _docs_decoder.decode(_unzip_group(buf))
    if kind == TAG_DOC:
        return [_doc_decoder.decode(memoryview(buf)[1:])]
    if kind == TAG_ZDOC:
        return [_doc_decoder.decode(zlib.decompress(memoryview(buf)[1:]))]
    raise BadValue(f"unknown docs value tag {kind}")


class _Entry:
    """One docs value, decoded for lookups: its documents' starts and ends, and their
    msgpack, each decoded to a fresh Document when asked for (so callers never share one).
    `relative`: the msgpack holds addresses less each document's start (tags 3, 4)."""

    __slots__ = ("starts", "ends", "raws", "docnos", "relative")
    starts: list[int]
    ends: list[int]
    raws: list  # msgspec.Raw or bytes
    docnos: list[str]
    relative: bool
    EMPTY: ClassVar[_Entry]

    def __init__(self, buf, key: int):
        if not len(buf):
            raise BadValue("an empty docs value")
        kind = buf[0]
        self.relative = kind in (TAG_REL_GROUP, TAG_REL_DOC)
        if kind == TAG_REL_GROUP:
            rel, docs = _rel_parts(buf)
            heads = _heads_decoder.decode(docs)
            self.raws = _raws_decoder.decode(docs)
            if len(rel) != len(heads):
                raise BadValue(f"a document group lists {len(rel)} starts for "
                               f"{len(heads)} documents")
            self.starts = [key + r + h.start for r, h in zip(rel, heads)]
            self.ends = [key + r + h.end for r, h in zip(rel, heads)]
        else:
            if kind == TAG_GROUP:
                raw = _unzip_group(buf)
                heads = _heads_decoder.decode(raw)
                self.raws = _raws_decoder.decode(raw)
            elif kind in (TAG_DOC, TAG_REL_DOC):
                raw = bytes(memoryview(buf)[1:])  # (a read transaction's buffer dies with it)
                heads = [_head_decoder.decode(raw)]
                self.raws = [raw]
            elif kind == TAG_ZDOC:
                raw = zlib.decompress(memoryview(buf)[1:])
                heads = [_head_decoder.decode(raw)]
                self.raws = [raw]
            else:
                raise BadValue(f"unknown docs value tag {kind}")
            by = key if kind == TAG_REL_DOC else 0
            self.starts = [by + h.start for h in heads]
            self.ends = [by + h.end for h in heads]
        self.docnos = [h.docno for h in heads]

    def doc(self, i: int) -> Document:
        doc = _doc_decoder.decode(self.raws[i])
        return _shift(doc, self.starts[i] - doc.start) if self.relative else doc

    def copy(self) -> "_Entry":
        other = _Entry.__new__(_Entry)
        other.starts, other.ends = list(self.starts), list(self.ends)
        other.raws, other.docnos = list(self.raws), list(self.docnos)
        other.relative = self.relative
        return other

    def value(self, key: int) -> bytes:
        """The value that stores these documents under `key` (after deletions)."""
        if not self.relative:
            return _legacy_group(self.raws)
        if len(self.raws) == 1 and self.starts[0] == key:
            return _single(self.raws[0])
        return _group(self.raws, [s - key for s in self.starts])

    def find(self, address: int) -> int:
        """The index of the document holding `address`, or -1."""
        i = bisect.bisect_right(self.starts, address) - 1
        return i if i >= 0 and self.ends[i] >= address else -1


_Entry.EMPTY = _Entry.__new__(_Entry)  # no documents (an entry that does not decode)
_Entry.EMPTY.starts, _Entry.EMPTY.ends, _Entry.EMPTY.raws, _Entry.EMPTY.docnos = [], [], [], []
_Entry.EMPTY.relative = False


class Documents(Features):
    """Txn's documents: the docs entries (decoded ones cached, GROUP_CACHE of them), docnos
    and the erased ranges."""

    _entries: dict[bytes, _Entry]  # decoded docs entries (see _entry)
    _pending: tuple[bytes, _Entry] | None  # a group delete_doc has not rewritten yet
    _present: tuple[list, dict] | None  # docnos_present's last question and answer

    def _entry(self, key, value) -> _Entry:
        """The decoded docs entry under `key` (cached: a write to docs clears the cache)."""
        key = bytes(key)
        entries: dict[Any, _Entry] = self._entries
        found = entries.get(key)
        if found is None:
            found = _Entry(value, from_u64(key))
            if len(entries) >= GROUP_CACHE:
                entries.pop(next(iter(entries), None), None)
            entries[key] = found
        return found

    def _entry_at(self, cur, address: int) -> tuple[Any, Any]:
        """Put `cur` on the last docs entry keyed at or before `address`; (key, entry), or
        (None, None) when there is none."""
        found = cur.set_range(u64(address + 1))
        found = cur.prev() if found else cur.last()
        if not found:
            return None, None
        key = cur.key()
        return bytes(key), self._entry(key, cur.value())

    def page_size(self) -> int:
        """LMDB's page size in this environment."""
        return self.txn.stat(self.dbs["docs"])["psize"]

    def put_docs(self, runs: list[list[tuple[int, bytes, int]]]) -> None:
        """Store new docs entries: runs of (start, value, documents) as encode_docs makes
        them, in order, each past every stored document. LMDB appends them, filling pages
        instead of splitting them. The entries at the ends of runs are regrouped with their
        neighbours when they may grow (the middle ones are full already): small ones
        (under 3/4 of an overflow page: a few documents added at a time) and a long
        document alone (its overflow pages may take the next ones; up to REGROUP_LONG
        bytes), as is a small last stored entry of format 3. So documents added one by one
        still end up in full groups."""
        runs = [run for run in runs if run]
        if not runs:
            return
        self._flush_deletions()
        self._entries.clear()
        db = self.dbs["docs"]
        psize = self.page_size()
        small = (psize - PAGE_HEADER) * 3 // 4
        out = []
        raws: list[bytes] = []  # the documents of the entries to regroup
        starts: list[int] = []

        def regroup():
            if raws:
                out.extend(encode_docs(raws, starts, psize))
                raws.clear()
                starts.clear()

        def may_grow(value, count):
            return len(value) < small or (count == 1 and len(value) <= REGROUP_LONG)

        with self.txn.cursor(db=db) as cur:
            start, value, _ = runs[0][0]
            if len(value) < small and cur.last() and len(cur.value()) < small:
                try:
                    last = _Entry(cur.value(), from_u64(cur.key()))
                except Exception:  # damaged (check reports it): leave it as it is
                    last = _Entry.EMPTY
                if last.relative and len(last.raws) < GROUP_DOCS and last.starts and \
                        last.ends[-1] < start:
                    cur.delete()  # refilled: its documents are written again below
                    raws.extend(bytes(r) for r in last.raws)
                    starts.extend(last.starts)
            for r, run in enumerate(runs):
                for k, (start, value, count) in enumerate(run):
                    edge = (k == 0 and (raws or r > 0)) or \
                        (k == len(run) - 1 and r + 1 < len(runs))
                    if edge and may_grow(value, count):
                        entry = _Entry(value, start)
                        raws.extend(bytes(x) for x in entry.raws)
                        starts.extend(entry.starts)
                    else:
                        regroup()
                        out.append((start, value, count))
            regroup()
            _append_all(cur, [(u64(start), value) for start, value, _ in out])

    def put_docnos(self, items: list[tuple[str, int]]) -> None:
        """Map docnos to document starts (items sorted by docno). Those past every stored
        docno are appended, which fills pages (an insert splits a full page in half)."""
        self._present = None
        docnos, starts = zip(*items) if items else ((), ())
        pairs = list(zip(_utf8_all(list(docnos), "docno"),
                         _keys8(np.fromiter(starts, dtype=np.int64, count=len(starts)))))
        with self.txn.cursor(db=self.dbs["docnos"]) as cur:
            last = bytes(cur.key()) if cur.last() else None
            cut = 0 if last is None else bisect.bisect_right(pairs, (last, b"\xff" * 9))
            if cut:
                cur.putmulti(pairs[:cut])
            if cut < len(pairs):
                _append_all(cur, pairs[cut:])

    def delete_doc(self, doc: Document) -> None:
        """Delete a stored document: its group is rewritten without it under the same key
        (deleted when it empties). The rewrite waits until a deletion from another group,
        a docs read or write, or the commit, so deleting a run of documents (an erase)
        rewrites each group once."""
        pending = self._pending
        if pending is not None:
            i = pending[1].find(doc.start)
            if i < 0 or pending[1].starts[i] != doc.start:
                self._flush_deletions()
                pending = None
        if pending is None:
            with self.txn.cursor(db=self.dbs["docs"]) as cur:
                key, entry = self._entry_at(cur, doc.start)
            i = -1 if entry is None else entry.find(doc.start)
            if i >= 0 and entry.starts[i] == doc.start:
                pending = self._pending = (key, entry.copy())
                self._entries.pop(key, None)
        if pending is not None:
            entry = pending[1]
            for part in (entry.starts, entry.ends, entry.raws, entry.docnos):
                del part[i]
        self._present = None
        self.txn.delete(doc.docno.encode(), db=self.dbs["docnos"])

    def _flush_deletions(self) -> None:
        """Write the group delete_doc left pending."""
        if self._pending is not None:
            key, entry = self._pending
            self._pending = None
            if entry.raws:  # (only a group holds more than one)
                self.txn.put(key, entry.value(from_u64(key)), db=self.dbs["docs"])
            else:
                self.txn.delete(key, db=self.dbs["docs"])

    def docnos_present(self, docnos: list[str]) -> dict[str, int]:
        """The docnos among these that are stored, with their documents' starts (one
        C-level getmulti, not a get each)."""
        memo = self._present
        if memo is not None and memo[0] == docnos:   # (asked again, none written since:
            return dict(memo[1])                      # an ingest's check, then add_batch's)
        with self.txn.cursor(db=self.dbs["docnos"]) as cur:
            found = cur.getmulti(_utf8_all(docnos, "docno"))
        out = {bytes(k).decode(): from_u64(v) for k, v in found}
        self._present = (list(docnos), dict(out))
        return out

    def doc_start(self, docno: str) -> int | None:
        raw = self.txn.get(utf8(docno, "docno"), db=self.dbs["docnos"])
        return None if raw is None else from_u64(raw)

    def doc_at_start(self, start: int) -> Document | None:
        self._flush_deletions()
        with self.txn.cursor(db=self.dbs["docs"]) as cur:
            _, entry = self._entry_at(cur, start)
        if entry is None:
            return None
        i = entry.find(start)
        return entry.doc(i) if i >= 0 and entry.starts[i] == start else None

    def doc_containing(self, address: int) -> Document | None:
        """The document whose address range holds `address`."""
        self._flush_deletions()
        with self.txn.cursor(db=self.dbs["docs"]) as cur:
            _, entry = self._entry_at(cur, address)
        if entry is None:
            return None
        i = entry.find(address)
        return entry.doc(i) if i >= 0 else None

    def doc_entries(self, addresses) -> list[tuple[int | None, "_Entry | None"]]:
        """For each address, the decoded docs entry that would hold its document (the last
        keyed at or before it, see docs) and its key: (None, None) when there is none."""
        self._flush_deletions()
        out: list[tuple[int | None, _Entry | None]] = []
        with self.txn.cursor(db=self.dbs["docs"]) as cur:
            for a in addresses:
                key, entry = self._entry_at(cur, int(a))
                out.append((None, None) if key is None else (from_u64(key), entry))
        return out

    def docs_overlapping(self, p: int, q: int):
        """Documents whose range overlaps [p, q], in address order."""
        self._flush_deletions()
        with self.txn.cursor(db=self.dbs["docs"]) as cur:
            found = cur.set_range(u64(p + 1))
            found = cur.prev() if found else cur.last()
            if not found:
                found = cur.first()
            while found:
                entry = self._entry(cur.key(), cur.value())
                for i in range(bisect.bisect_left(entry.ends, p), len(entry.starts)):
                    if entry.starts[i] > q:
                        return
                    yield entry.doc(i)
                found = cur.next()

    def docs(self):
        """Every document, in address order."""
        self._flush_deletions()
        with self.txn.cursor(db=self.dbs["docs"]) as cur:
            for key, value in cur:
                yield from decode_docs(value, from_u64(key))

    def docnos(self):
        with self.txn.cursor(db=self.dbs["docnos"]) as cur:
            for key, value in cur:
                yield bytes(key).decode(), from_u64(value)

    def doc_count(self) -> int:
        """How many documents are stored (committed; meta's count: docs entries may hold
        several)."""
        return self.meta("documents", 0)

    def docs_entries(self):
        """(key, raw value) of every docs entry, in key order (for check)."""
        self._flush_deletions()
        with self.txn.cursor(db=self.dbs["docs"]) as cur:
            for k, v in cur:
                yield k, v

    # erased ranges
    def erased(self) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = [], []
        with self.txn.cursor(db=self.dbs["erased"]) as cur:
            for k, v in cur:
                starts.append(from_u64(k))
                ends.append(from_u64(v))
        return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)

    def has_erased(self) -> bool:
        return self.txn.stat(self.dbs["erased"])["entries"] > 0

    def set_erased(self, starts, ends) -> None:
        self.set_meta("erased_version", self.id)
        db = self.dbs["erased"]
        self.txn.drop(db, delete=False)
        for p, q in zip(starts, ends):
            self.txn.put(u64(int(p)), u64(int(q)), db=db)
