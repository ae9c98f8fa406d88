"""Storage: the on-disk layout of an annodb database, on LMDB. The only module importing lmdb.

A database is one LMDB environment (a directory holding data.mdb and lock.mdb) and files
writer.lock and turnstile.lock that writers take (with a timeout, fairly) before LMDB's
own writer mutex, so a second writer waits for a bounded time and then gets a clear error
instead of hanging.

Format version 5 (older databases are read as they are: everything format n stores,
format n + 1 reads the same way; the first write to one records format 5). Every change to
what is stored takes a new number (CHANGELOG.md lists them): a database is refused, with
one line naming both numbers, by an annodb of an older format, at open and at the start
of every transaction (another process may have upgraded it since). Format 5 stores what
format 4 came to store by its last change: format 4 grew without a new number (the
counts value from 17 to 33 bytes, the tails and changes sub-databases, documents'
containers), and an annodb of early format 4 misread such a database. Format 5 reads
every variant of format 4 as it is (the counts value of 17 bytes without df and bound,
no tails, no containers).

Addresses are exact integers in [0, MAX_ADDRESS), MAX_ADDRESS = 2**53: every address is
then exactly a float64 too, which a link needs (its target address is stored as an
annotation's value, and values are float64), and int64 arithmetic on addresses (q + 1, the
sentinels int64 min/max) never overflows. 2**53 is 9 * 10**15 addresses, 900,000 times the
10**10 tokens of the largest collection annodb is sized for. A write that would use an
address outside the range (an annotation, an erased range, a document past it) is refused
with an AnnodbError and nothing of that call is written; `annodb check` reports a stored
interval or next_address outside it.

Sub-databases and their keys (integers are unsigned 64-bit big-endian, so LMDB's byte order
is numeric order):

    meta      utf-8 name -> msgpack value. "format": 4; "tokenizer": tokenizer.VERSION;
              "next_address": first unused address; "documents", "tokens": live counts
              of the collection's documents (container `:`); (format 4) "agent_documents",
              "agent_tokens": those of the documents kept apart from the collection (see
              Document.container; absent: 0); "next_feature": next feature id to hand
              out; (format 4) "erased_version": the id of the last write transaction that
              changed the erased ranges; "fields": {short field name ("title:"): [live
              documents having the field, tokens in those fields]}, kept by the writer like
              df (BM25F's averages); "sparse_fields": the record fields ingested as sparse
              vectors (their terms are the features `field:term`, see records.py).
    features  feature name (utf-8; a name over 480 bytes: its first 400 bytes, a NUL and the
              hex SHA-256 of the whole name) -> feature id (u64)
    names     feature id (u64) -> feature name (utf-8)
    blocks    feature id (u64) + first start in the block (u64) -> one block of that
              feature's annotation list (see below). A feature's blocks are consecutive keys
              and together hold its whole list, sorted by start with no interval nested in
              another (a GC-list: starts and ends both strictly increase).
    docs      address (u64) -> one or more consecutive documents, as a tag byte then:
                0  msgpack Document (docno, address range, text, fields, metadata,
                   tokens, and (format 4) container: the feature over its whole range,
                   `:` for the collection's documents, else e.g. `note:` for an agent's
                   notes, which stay out of the collection's searches and counts)
                1  the same, zlib-compressed (format 1 wrote 0 or 1, one per document,
                   keyed by the document's start)
                2  (format 2) a group: zstd of the msgpack array of consecutive Documents,
                   starts ascending, keyed by an address <= its first start (the first
                   start when written; deleting a document rewrites the group without it
                   under the same key, and deletes the key when it empties)
                3  (format 3) a group whose addresses are relative: zstd of the msgpack
                   array [starts, doc, doc, ...], starts (ascending) each document's start
                   less the key, and each document's addresses (its range, its fields')
                   less its own start
                4  (format 3) one document, its addresses less the key (its start): msgpack
              A tag 0/1/4 value's key is its document's start. Entries never interleave:
              every document of an entry ends before the next entry's key, so the
              document holding an address is in the last entry keyed at or before it.
              Relative addresses make a value independent of where its documents land,
              so an ingest compresses documents in its reading process, before the
              writer has placed them. Format 3 writes tags 3 and 4 only: consecutive
              documents in groups (at most GROUP_DOCS) whose value nearly fills one LMDB
              overflow page (a value over half a leaf page gets pages of its own, never
              split or shared); small entries written after a small last entry are
              regrouped with it; a document alone is tag 4, or a group of one when 1 KB
              or more. A document longer than a page is a group taking the documents
              after it while it still fits its overflow pages.
    docnos    docno (utf-8) -> first address (u64)
    erased    first address (u64) -> last address (u64): erased ranges, disjoint and merged.
              Annotations lying inside an erased range are invisible to every read.
    tails     (format 4) feature id (u64) -> the open end of a token list: a block, in the
              layout below, holding the list's last postings, all after those of its
              blocks in `blocks` (a list is its blocks, then its tail if it has one).
              A tail holds at most TAIL_BYTES (512) bytes; token postings are appended to
              it, and when it would grow past that, it and the new postings refill the
              list's last block in `blocks` and go on in full blocks, the rest being the
              new tail. Tails are about ten to a leaf page, so a batch that adds a few
              postings to each of tens of thousands of words rewrites a few thousand
              pages, where appending to each list's last block in `blocks` rewrote about
              three pages a word (their keys are far apart) and an ingest's memory and
              free pages grew with the database. Other lists (annotations) have no tail;
              a write that rewrites the end of a token list moves its tail into `blocks`
              first.
    changes   feature id (u64) -> the last CHANGES_KEPT changes of a list holding
              CHANGES_OVER (65,536) intervals or more: u64 pairs, the first (base, 0), then
              (version, low) for each change in order: the id of the write transaction,
              and the lowest start of an interval it added, removed or changed in the
              list (every interval starting below low is as it was at the version
              before, base for the first; MAX_ADDRESS when it changed none: a delete
              changes only a word's df). A reader holding the whole list as of a version
              in the record decodes only what starts at or past the lowest low since then
              (lists.py). Written at each commit that changes the list's version (counts);
              a record whose last version is not the list's version (an older annodb wrote
              since) is not used, and the next commit starts it again.
    counts    feature id (u64) -> how many intervals its list holds (u64), erased ones
              included: lets a query plan (decode a common word's list, or only the blocks
              it needs) without reading the list. Format 4 follows it with the list's
              version (u64): the id of the last write transaction that changed the list,
              so what a reader decoded of it stays valid across commits that did not
              touch it; and a flags byte: bit 0 set when two of its intervals may
              overlap (else no interval of it overlaps another, as documents and fields
              do not), bit 1 set when that is not known (the list was written by format
              3, whose values are the 8 bytes of the count alone). Then (33-byte values)
              the statistics ranking needs without reading the list: df (u64), the live
              documents holding one of its postings written as text (a word's document
              frequency; 0 for other features), kept by the writer as it adds and deletes
              documents; and high (f64 big-endian), at least 0 and at least every value
              ever written to the list (an upper bound of its values). Flags bit 2 set:
              df and high are not known (the list was written before they were kept:
              a 17-byte or 8-byte value; or annotate() put intervals into a word's list).
              Readers take 8-, 17- and 33-byte values.

A block (at most BLOCK_SIZE intervals) is a 16-byte header then up to three arrays:

    header    u8 flags, u8 start width, u8 length width, u8 unused (0), u32 n, i64 first
              start, little-endian (as every number of a block)
    values    n float64               absent when flag ZERO (all values are 0)
    deltas    n-1 unsigned ints of the start width: start[i+1] - start[i]
    lengths   n unsigned ints of the length width: end[i] - start[i]; absent when flag POINTS
              (every interval is a point; the length width byte is then 1)

The flags are FLAG_POINTS = 1 and FLAG_ZERO = 2. A width byte is either a byte width, 1,
2, 4 or 8: each number is a little-endian unsigned int of that many bytes (the smallest
that holds the array's largest number); or, from format 2 on, 128 + b with 1 <= b <= 56:
the array is bit-packed, b bits a number (b the bits of its largest number, at least 1).
Number i is then bits i*b .. i*b+b-1 of the array read as one little-endian integer (bit k
is bit k%8 of byte k//8); the array takes ceil(n*b/8) bytes, the last byte's spare bits 0.
A writer packs an array when that saves at least a quarter of its bytes (so a common
word's one-byte gaps stay whole bytes, which decode fastest; an empty array, a block of
one interval's deltas, is packed: 128 + 1); an append in place keeps the block's widths
while the new numbers fit them, so a block appended to may be packed where a block written
whole would not be, or the other way round. Format 1 has only byte widths, so format 2
reads it as it is. (tests/naive.py reads and writes blocks from this description alone.)

A block's encoded size is at most block_limits(psize)[0] bytes (psize - 16: one LMDB
overflow page) unless it holds a single interval. Reads decode a block with numba kernels
(kernels/codec.py); appends touch only the last block of a feature; an insert rewrites the
blocks around the interval it lands in.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import functools
import hashlib
import inspect
import os
import shutil
import struct
import sys
import threading
import time
import weakref
import zlib
from dataclasses import dataclass, field

import lmdb
import lmdb.verify
import msgspec
import numpy as np
import zstandard

from . import kernels, tokenizer
from .errors import (AnnodbError, BadBlock, DamagedError, FormatVersionError, StorageError,
                     WriterBusyError)

FORMAT_VERSION = 5
READS_FORMATS = (1, 2, 3, 4, 5)  # each a subset of the next; a write upgrades the meta to 5
# A full block fills one LMDB overflow page exactly: LMDB stores a value over ~2014 bytes
# (4096-byte pages) on overflow pages of its own, psize - 16 bytes each, which are never
# split; the leaf then holds a small stub. (Blocks of at most ~2000 bytes kept inline in
# leaves were as compact only until batches inserted new blocks mid-tree: split leaves
# stayed half full.) The budget follows the environment's page size (block_limits);
# BLOCK_BYTES and BLOCK_SIZE are the limits for 4096-byte pages. A block of 1-bit numbers
# could hold ~32,000 intervals: BLOCK_SIZE caps that, so a partial read stays cheap.
PAGE_HEADER = 16  # LMDB's page header: an overflow page holds psize - PAGE_HEADER bytes
BLOCK_SIZE = 8192
BLOCK_BYTES = 4096 - PAGE_HEADER


def block_limits(psize: int) -> tuple[int, int]:
    """(bytes, intervals): the most a block may hold in an environment of page size psize."""
    return psize - PAGE_HEADER, 2 * psize


# A token list's tail (see `tails`) holds at most this many bytes: tails are then about ten
# to a leaf page, and a batch that adds a few postings to each of ~60,000 words rewrites a
# few thousand pages, not a page or three a word.
TAIL_BYTES = 512
# A flush that appends to this many token lists (an ingest's) lets go of the pages of the
# map it read (release_mapped_pages) after each RELEASE_EVERY lists it reads or writes:
# each read of a page maps its neighbours too (the kernel's fault-around, 16 pages), so
# without this a flush mapped 100-300 MB of the file at 1x and ~800 MB at 4x that it never
# needed again (reading the last blocks of 2,200 spilling lists alone mapped ~150 KB each:
# 330 MB); a release costs ~20 us.
RELEASE_OVER = 1024
RELEASE_EVERY = 512

# Lists of annotations other than token postings (the document list `:`, fields, values,
# labels) are cut into blocks of at most this many intervals: a query probes them far more
# than it reads them whole (which documents hold a rare word's matches?), and probing
# decodes whole blocks. Blocks of 128 documents of `:` made finding the documents of a
# query's matches 10x cheaper than one overflow page (~1,700) each, for 0.3 bytes of
# LMDB overhead a document.
ANNOTATION_BLOCK = 128
MAX_ADDRESS = 1 << 53  # addresses are in [0, MAX_ADDRESS): exact as float64 (see the header)
MAP_SIZE = 1 << 40  # 1 TiB of address space: sparse on disk, so the map never fills in use
MAX_READERS = 1024
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
GROUP_DOCS = 256
GROUP_SLACK = 32  # a group aims at this many bytes under one overflow page
GROUP_AIM = 1.06  # and at this much more raw text than the last group's ratio says fits
REGROUP_LONG = 64 << 10  # a long document alone, up to this long, is regrouped (put_docs)
GROUP_CACHE = 8  # decoded groups a transaction keeps (the top hits often share groups)
TAG_DOC, TAG_ZDOC, TAG_GROUP, TAG_REL_GROUP, TAG_REL_DOC = 0, 1, 2, 3, 4

FLAG_POINTS = 1
FLAG_ZERO = 2
_HEADER = struct.Struct("<BBBxIq")
_U64 = struct.Struct(">Q")
_KEY = struct.Struct(">QQ")
_COUNT = struct.Struct(">QQB")  # a counts value: intervals, version, flags
_STATS = struct.Struct(">QQBQd")  # ... and df, high (the value written now)
OVERLAPPING, UNKNOWN, NO_STATS = 1, 2, 4  # its flags
_ZEROS = np.zeros(4096, dtype=np.float64)  # (add_points allocates for more)

_SUBDBS = ("meta", "features", "names", "blocks", "docs", "docnos", "erased", "counts",
           "tails", "changes")
_OPTIONAL = ("tails", "changes")  # sub-databases an older file lacks (opened read-only: None)
CHANGES_OVER = 1 << 16  # a list this long keeps a record of its last changes (see changes)
CHANGES_KEPT = 8        # ... of this many


MAX_KEY = 480  # LMDB's keys are at most 511 bytes


def check_address(q: int, what: str) -> None:
    """AnnodbError unless `q` (the last address a write uses) is below MAX_ADDRESS."""
    if q >= MAX_ADDRESS:
        raise AnnodbError(f"{what} would use address {q:,}, past the last address annodb "
                          f"stores ({MAX_ADDRESS - 1:,} = 2**53 - 1): refused, nothing of "
                          "this call was written")


def utf8(text: str, what: str) -> bytes:
    """UTF-8 of a name or docno; a clear error for a string Python could hold but no
    UTF-8 can (a lone surrogate, as invalid UTF-8 arguments decode to)."""
    try:
        return text.encode()
    except UnicodeEncodeError as err:
        raise AnnodbError(f"{what} {text!r} is not valid Unicode (a lone surrogate at "
                          f"offset {err.start})") from None


def _utf8_all(texts: list[str], what: str) -> list[bytes]:
    """utf8 of each (the error names the first that fails)."""
    try:
        return [t.encode() for t in texts]
    except UnicodeEncodeError:
        return [utf8(t, what) for t in texts]


def name_key(name: str) -> bytes:
    """The features key of a name: its UTF-8, or for a name too long for an LMDB key, a
    prefix, a NUL and its SHA-256 (the full name stays in `names`)."""
    raw = utf8(name, "feature name")
    if len(raw) <= MAX_KEY:
        return raw
    return raw[:400] + b"\x00" + hashlib.sha256(raw).hexdigest().encode()


def _first_item(item):
    return item[0]


def _keys8(fids: np.ndarray) -> list[bytes]:
    """The u64 keys of feature ids, in one pass (struct.pack per id cost ~0.4 us each;
    a flush keys tens of thousands of lists)."""
    raw = np.asarray(fids, dtype=">u8").tobytes()
    return [raw[i:i + 8] for i in range(0, len(raw), 8)]


def _keys16(fids: np.ndarray, firsts: np.ndarray) -> list[bytes]:
    """The blocks keys (feature id, first start) of many blocks."""
    both = np.empty((len(fids), 2), dtype=">u8")
    both[:, 0] = fids
    both[:, 1] = firsts
    raw = both.tobytes()
    return [raw[i:i + 16] for i in range(0, len(raw), 16)]


def _found_values(fids: np.ndarray, found: list) -> tuple[bytes, np.ndarray]:
    """getmulti's (key, value) pairs for the u64 keys of `fids` (ascending), laid end to end:
    (buffer, offsets), the value of fids[g] being buffer[offsets[g]:offsets[g+1]] (empty
    where none was found)."""
    offsets = np.zeros(len(fids) + 1, dtype=np.int64)
    if not found:
        return b"", offsets
    keys, values = zip(*found)
    at = np.searchsorted(fids, np.frombuffer(b"".join(keys), dtype=">u8").astype(np.int64))
    lengths = np.zeros(len(fids), dtype=np.int64)
    lengths[at] = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    np.cumsum(lengths, out=offsets[1:])
    return b"".join(values), offsets


def _header_numbers(buf, offsets: np.ndarray, at: int, width: int) -> np.ndarray:
    """The little-endian number of `width` bytes at byte `at` of each block's header
    (blocks buf[offsets[i]:...]): 4, 4 the count, 8, 8 the first start."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    where = (np.asarray(offsets, dtype=np.int64) + at)[:, None] + np.arange(width)
    return raw[where].copy().view(f"<u{width}").reshape(-1).astype(np.int64)


def _reduced(fids: np.ndarray, values: np.ndarray, ufunc) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct fids ascending, ufunc.reduce of the values of each)."""
    if not len(fids):
        return fids, values
    order = np.argsort(fids, kind="stable")
    f = fids[order]
    cuts = np.flatnonzero(np.r_[True, f[1:] != f[:-1]])
    return f[cuts], ufunc.reduceat(values[order], cuts)


# a counts value (_STATS) as a numpy record, to read and write many at once
_STATS_DTYPE = np.dtype([("count", ">u8"), ("version", ">u8"), ("flags", "u1"),
                         ("df", ">u8"), ("high", ">f8")])


def _count_value(raw) -> tuple[int, int | None, int, int | None, float | None]:
    """(count, version, flags, df, high) of a counts value; df and high are None when not
    known (flag NO_STATS, or a value written before they were kept; format 3's 8 bytes
    hold the count alone)."""
    n = len(raw)
    if n == _STATS.size:
        count, version, flags, df, high = _STATS.unpack(bytes(raw))
        if flags & NO_STATS:
            return count, version, flags, None, None
        return count, version, flags, df, high
    if n == _COUNT.size:
        count, version, flags = _COUNT.unpack(bytes(raw))
        return count, version, flags | NO_STATS, None, None
    return from_u64(raw), None, UNKNOWN | NO_STATS, None, None


def _changes_value(raw) -> list[tuple[int, int]]:
    raw = bytes(raw)
    return [_KEY.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % 16, 16)]


_ZERO = np.zeros(1)
_ZERO.flags.writeable = False


def zero_values(n: int) -> np.ndarray:
    """n values of 0.0 held in no memory: a read-only view of one zero with stride 0 (what
    np.broadcast_to makes, at a sixth of its cost; a list of a few postings is made many
    times a query)."""
    return np.ndarray((n,), np.float64, _ZERO, 0, (0,))


def u64(n: int) -> bytes:
    return _U64.pack(n)


def from_u64(b) -> int:
    return _U64.unpack(bytes(b))[0]


def encode_block(starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> bytes:
    return kernels.encode_block(starts, ends, values)


def decode_block(buf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return kernels.decode_block(buf)


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
_meta_encoder = msgspec.msgpack.Encoder()
_meta_decoder = msgspec.msgpack.Decoder()


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


class BadValue(StorageError):
    """A stored value that does not decode (a damaged database)."""


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
                ) -> list[tuple[int, bytes]]:
    """(start, value, count) of the entries documents lo..hi-1 (given as their relative
    msgpack and their starts, in any frame) are stored in, keyed by their first starts:
    groups of at most GROUP_DOCS documents whose compressed value comes close to filling
    one LMDB overflow page (values that large get pages of their own, never split or
    shared); or one document alone (tag 4, or a group of one). How much raw text makes
    that much is estimated from the last group's ratio, aiming a little high; a group that
    comes out too long gives back documents in proportion. A document too long for one
    page gets overflow pages of its own: it takes the documents after it while it still
    fits those pages (at most GROUP_DOCS)."""
    out = []
    room = psize - PAGE_HEADER          # one overflow page
    target = room - GROUP_SLACK
    ratio = 0.4  # compressed / raw bytes of the last group

    def group(i, j):
        if j - i == 1:
            return _single(raws[i])
        first = starts[i]
        return _group(raws[i:j], [x - first for x in starts[i:j]])

    i = lo
    while i < hi:
        if len(raws[i]) + 16 > room:  # long: its own overflow pages, filled (below)
            value, j = _alone_or_filled(raws, starts, i, hi, psize)
            out.append((starts[i], value, j - i))
            i = j
            continue
        budget = target / ratio * GROUP_AIM
        j, size = i + 1, len(raws[i])
        while j < hi and j - i < GROUP_DOCS and size + len(raws[j]) <= budget and \
                len(raws[j]) + 16 <= room:
            size += len(raws[j])
            j += 1
        value = group(i, j)
        while len(value) > room and j - i > 1:  # too hopeful: give back in proportion
            keep = size * target / len(value)
            while j - i > 1 and size > keep:
                j -= 1
                size -= len(raws[j])
            value = group(i, j)
        if j - i > 1:
            ratio = len(value) / size
        out.append((starts[i], value, j - i))
        i = j
    return out


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


def encode_docs_later(raws: list, starts: list, base: int, psize: int):
    """encode_docs on a second thread, the starts moved by `base`: a Future of the
    entries."""
    def run():
        return [(base + start, value, n)
                for start, value, n in encode_docs(raws, starts, psize, threads=1)]
    return _pool().submit(run)


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
    lists: object = None  # transaction.ListCache, shared by this process's snapshots
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


def _after_fork() -> None:
    """In a forked child: LMDB forbids using an environment across fork(), and py-lmdb
    refuses a second open of one in a process. So the child's copies are dropped: each
    environment that had no transaction open at the fork is closed in the child (which
    touches nothing the parent uses: the parent's reader slots are the parent's) and is
    opened afresh on the child's first use; one with a transaction open (in some thread)
    cannot be closed without releasing the parent's reader slot, so the child keeps it
    untouched and refuses to open that database. The compression pool (its thread did not
    survive the fork), the zstd contexts and the locks other threads may have held are
    made anew, and the writer flocks inherited are closed (they stay the parent's)."""
    global _executor, _zstd, _open_envs_lock
    _executor = None
    _zstd = threading.local()
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


def _flock_wait(fd: int, timeout: float, path: str, asked: float | None = None) -> None:
    """Take the exclusive writer flock on `fd`, waiting at most `timeout` seconds (of the
    `asked` timeout, which the error names)."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise WriterBusyError(
                    f"{path}: another process has been writing for longer than the "
                    f"timeout ({seconds(timeout if asked is None else asked)}); retry when it "
                    "finishes, or raise the timeout") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


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


# Damage. LMDB keeps no checksums and trusts its file: a truncated file is a SIGBUS when a
# page past its end is read, a damaged tree page can make LMDB abort (an assertion) or
# read out of bounds. So before LMDB touches an existing file, its two meta pages are
# checked (magic, version, page size, the committed one's txnid parity and roots) and its
# length against the last page the committed meta uses; a database file of at most
# VERIFY_AT_OPEN bytes is then verified page by page (lmdb.verify: every reachable page,
# key order, counters, the free list; pure Python, it cannot crash), a larger one only by
# `annodb check`. What LMDB or annodb then meets while reading (an LMDB corruption error,
# a value that does not decode, a block whose header does not match it) is a StorageError
# saying the database is damaged; a write transaction that meets it writes nothing.
VERIFY_AT_OPEN = 8 << 20  # ~0.1 s of lmdb.verify (about 90 MB/s)
_P_META = 0x08
_P_INVALID = (1 << 64) - 1
_META = struct.Struct("<IIQQ48s48sQQ")  # magic, version, address, mapsize, free, main, last, txn
_ENGINES = {16: 1, 24: 3}  # page-header size -> LMDB data version (0.9: 1, 1.0: 3)


def damaged(path: str, what: str) -> DamagedError:
    return DamagedError(f"{path}: the database is damaged: {what}; run `annodb check --db "
                        f"{path}` for the details, and restore it from a copy")


def file_problems(real: str) -> tuple[list[str], bool]:
    """(problems, truncated) of data.mdb found without LMDB, from its meta pages and its
    length: the committed meta's last page must lie in the file (else a full page-by-page
    verification decides: LMDB may leave free pages at the end unwritten)."""
    data = os.path.join(real, "data.mdb")
    try:
        with open(data, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(65536 * 2)
    except OSError as err:
        return [f"data.mdb cannot be read: {err.strerror}"], False
    if size < 2 * 512:
        return [f"data.mdb is {size:,} bytes, shorter than two LMDB meta pages "
                "(truncated)"], True
    hdr = next((h for h in _ENGINES if head[h:h + 4] == b"\xde\xc0\xef\xbe"), None)
    if hdr is None:
        return ["meta page 0 is not an LMDB meta page (no magic number)"], False
    metas = []
    for i in (0, 1):
        psize = metas[0][1] if metas else 0
        at = i * psize
        if at + hdr + _META.size > len(head):
            return [f"meta page 1 lies past the end of the file ({size:,} bytes)"], True
        magic, version, _, _, free, main, last, txnid = _META.unpack_from(head, at + hdr)
        flags = int.from_bytes(head[at + hdr - 6:at + hdr - 4], "little")
        if magic != 0xBEEFC0DE or not flags & _P_META:
            return [f"meta page {i} is not an LMDB meta page"], False
        if version != _ENGINES[hdr]:
            return [f"meta page {i} has LMDB data version {version}, not {_ENGINES[hdr]}"], False
        psize = int.from_bytes(free[:4], "little")
        if i == 0 and (psize < 512 or psize > 65536 or psize & (psize - 1)):
            return [f"meta page 0 gives the page size {psize}"], False
        roots = [int.from_bytes(d[40:48], "little") for d in (free, main)]
        metas.append((txnid, psize, last, roots))
    if metas[1][1] != metas[0][1]:
        return [f"the meta pages disagree on the page size ({metas[0][1]}, {metas[1][1]})"], False
    problems = [f"meta page {i} has txnid {m[0]}, of the wrong parity"
                for i, m in enumerate(metas) if m[0] and m[0] % 2 != i]
    txnid, psize, last, roots = max(metas)
    if any(r != _P_INVALID and not 2 <= r <= last for r in roots):
        problems.append(f"the committed meta page's roots {roots} are not pages 2..{last}")
    if problems:
        return problems, False
    if size < (last + 1) * psize:
        found = _verify(real)
        if found:
            return [f"data.mdb is {size:,} bytes, but the committed state uses pages up to "
                    f"byte {(last + 1) * psize:,} (truncated)"] + found[:5], True
    return [], False


def _verify(real: str) -> list[str]:
    """lmdb.verify's findings for data.mdb (every reachable page checked; no LMDB)."""
    try:
        return lmdb.verify.verify(real, subdir=True)
    except lmdb.verify.VerifyError as err:
        return [str(err)]
    except OSError as err:
        return [f"data.mdb cannot be read: {err.strerror}"]


def _verified_pinned(env, real: str) -> list[str]:
    """_verify while a read transaction pins the pages of the committed state (so a writer
    committing meanwhile reuses none of them); findings are confirmed by a second pass, so a
    meta page caught mid-write is not taken for damage."""
    for attempt in (0, 1):
        txn = env.begin()
        try:
            found = _verify(real)
        finally:
            txn.abort()
        if not found:
            return []
    return found


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
        if exists:
            problems, truncated = file_problems(real)
            if problems:
                if truncated:
                    raise DamagedError(f"{path}: the database file is truncated: "
                                       f"{problems[0].removesuffix(' (truncated)')}; restore "
                                       "it from a copy")
                raise damaged(path, problems[0])
        try:
            if not readonly:
                os.makedirs(real, exist_ok=True)
                _reserve_lock_file(real, path)
            env = _open_lmdb(real, readonly, lock=not unlocked)
        except lmdb.Error as err:
            raise StorageError(f"{path}: cannot open database: {err}") from None
        except OSError as err:
            raise StorageError(f"{path}: cannot open database: {err.strerror}") from None
        guard = None
        try:
            guard = _shared_flock(real, timeout) if unlocked else None
            if exists and os.path.getsize(os.path.join(real, "data.mdb")) <= VERIFY_AT_OPEN:
                found = _verify(real) if unlocked else _verified_pinned(env, real)
                if found:
                    raise damaged(path, found[0] + (f" (and {len(found) - 1} more problems)"
                                                    if len(found) > 1 else ""))
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


def check_format(path, version) -> None:
    """FormatVersionError unless this annodb reads databases of format `version`: one
    line, naming both formats when the database's is newer."""
    if version in READS_FORMATS and type(version) is int:
        return
    if type(version) is int and version > FORMAT_VERSION:
        raise FormatVersionError(f"{path}: written by annodb format {version}; this is "
                                 f"format {FORMAT_VERSION}: upgrade annodb")
    raise FormatVersionError(
        f"{path}: database format {version!r} is not one annodb has written (this annodb "
        f"reads formats {READS_FORMATS[0]} to {FORMAT_VERSION}): the database is damaged or "
        "not annodb's")


class WriterLock:
    """Exclusive writer lock: a thread lock (this process) plus flock (other processes)."""

    def __init__(self, env: Environment, timeout: float):
        self.env = env
        self.timeout = timeout
        self.fd = None

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
    return _shared_flock(env.path, env.guard)


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


def _append_all(cur, items: list) -> None:
    """Append items (sorted keys, all past the sub-database's last) so LMDB fills pages.
    LMDB's append mode silently skips a key that is not past the last one: that would
    lose data, so it is a StorageError (the transaction is then thrown away whole)."""
    consumed, added = cur.putmulti(items, append=True)
    if added != len(items):
        raise StorageError(f"internal error: {len(items) - added} of {len(items)} keys to "
                           "append were not past the last one; nothing was written")


class Txn:
    """Typed access to one LMDB transaction (read or write)."""

    def __init__(self, env: Environment, write: bool):
        self.env = env
        self.write = write
        self.dbs = env.dbs
        self.pid = env.pid
        if write and env.damage:
            raise DamagedError(f"{env.damage}; nothing is written into a damaged database")
        if self.pid != os.getpid():
            raise StorageError(f"{env.path}: opened in process {env.pid}, before a fork; "
                               "open the database again in this process")
        self._guard = None if env.guard is None else _share_writer_lock(env)
        try:
            self.txn = env.env.begin(write=write, buffers=not write)
        except BaseException:
            self._unguard()
            raise
        env.txns.add(self)
        self.id = self.txn.id()  # the committed state a read sees
        self._append_cursor = None
        # list length changes of this transaction, and the lowest start it changed in a
        # list: by one list (the dicts) and by many at once (arrays (fids, values): an
        # ingest's flush touches tens of thousands of lists), summed or least at commit
        self._counts: dict[int, int] = {}
        self._count_parts: list = []
        self._lows: dict[int, int] = {}
        self._low_parts: list = []
        self._overlaps: set[int] = set()   # lists it may have given overlapping intervals
        self._df_parts: list = []          # (fids, deltas) arrays: df changes (see df_changes)
        self._df: dict[int, int] | None = {}  # ... summed (None: not yet)
        self._df_reduced = True             # whether _df_parts is one part, summed
        self._highs: dict[int, float] = {}  # the greatest value it wrote to a list, if > 0
        self._no_stats: set[int] = set()    # lists whose df is no longer known
        self.block_bytes, self.block_count = env.block_bytes, env.block_count
        self._entries: dict[bytes, _Entry] = {}  # decoded docs entries (see _entry)
        self._pending = None  # (key, entry): a group delete_doc has not rewritten yet

    def commit(self) -> None:
        self._flush_deletions()
        self._close_cursors()
        fids, delta = self._combined(self._counts, self._count_parts, np.add)
        df_fids, df_delta = self._df_arrays()
        if len(fids) or len(df_fids) or self._highs or self._no_stats:
            self._write_counts(fids, delta, df_fids, df_delta)
        self.txn.commit()
        self.env.txns.discard(self)
        self._unguard()

    @staticmethod
    def _combined(one: dict, parts: list, ufunc) -> tuple[np.ndarray, np.ndarray]:
        """A pending change by list, given one list at a time (`one`) and many at once
        (`parts`): (the lists' ids ascending, their changes combined by ufunc)."""
        fids = [np.fromiter(one.keys(), dtype=np.int64, count=len(one))]
        values = [np.fromiter(one.values(), dtype=np.int64, count=len(one))]
        fids += [f for f, _ in parts]
        values += [v for _, v in parts]
        return _reduced(np.concatenate(fids), np.concatenate(values), ufunc)

    def _write_counts(self, count_fids, count_delta, df_fids, df_delta) -> None:
        """Write the counts values of every list this transaction changed: its length,
        version (this transaction), flags, df and high (see `counts`), all at once, and
        append to the records of the long lists' changes."""
        highs, no_stats = self._highs, self._no_stats
        high_fids = np.fromiter(highs.keys(), dtype=np.int64, count=len(highs))
        no_stat_fids = np.fromiter(no_stats, dtype=np.int64, count=len(no_stats))
        fids = np.unique(np.concatenate((count_fids, df_fids, high_fids, no_stat_fids)))
        n = len(fids)
        keys = _keys8(fids)
        with self.txn.cursor(db=self.dbs["counts"]) as cur:
            found = cur.getmulti(keys)
            # the stored values (a new list: 0 intervals, statistics known)
            count = np.zeros(n, dtype=np.int64)
            version = np.full(n, -1, dtype=np.int64)   # (-1: not known)
            flags = np.zeros(n, dtype=np.int64)
            df = np.zeros(n, dtype=np.int64)
            high = np.zeros(n, dtype=np.float64)
            known = np.ones(n, dtype=bool)
            stored = np.zeros(n, dtype=bool)
            if found:
                raws = [v for _, v in found]
                at = np.searchsorted(fids, np.frombuffer(b"".join(k for k, _ in found),
                                                         dtype=">u8").astype(np.int64))
                stored[at] = True
                full = np.fromiter(map(len, raws), dtype=np.int64,
                                   count=len(raws)) == _STATS.size
                whole = full.all()
                rec = np.frombuffer(b"".join(raws if whole else
                                             [r for r, f in zip(raws, full) if f]),
                                    dtype=_STATS_DTYPE)
                p = at if whole else at[full]
                count[p] = rec["count"]
                version[p] = rec["version"]
                flags[p] = rec["flags"]
                unknown = (rec["flags"] & NO_STATS) != 0
                df[p] = np.where(unknown, 0, rec["df"])
                high[p] = np.where(unknown, 0.0, rec["high"])
                known[p] = ~unknown
                for i in ([] if whole else np.flatnonzero(~full).tolist()):  # (older ones)
                    c, v, f, d, h = _count_value(raws[i])
                    g = at[i]
                    count[g], version[g], flags[g] = c, -1 if v is None else v, f
                    known[g] = d is not None
                    df[g], high[g] = (d, h) if d is not None else (0, 0.0)
            delta = np.zeros(n, dtype=np.int64)
            delta[np.searchsorted(fids, count_fids)] = count_delta
            df[np.searchsorted(fids, df_fids)] += df_delta
            if highs:
                at = np.searchsorted(fids, high_fids)
                high[at] = np.maximum(high[at], np.fromiter(highs.values(), dtype=np.float64,
                                                            count=len(highs)))
            if self._overlaps:
                flags[np.isin(fids, np.fromiter(self._overlaps, dtype=np.int64))] |= OVERLAPPING
            lost = ~known | (df < 0) | np.isin(fids, no_stat_fids)   # (not known)
            flags[lost] |= NO_STATS
            df[lost] = 0
            high[lost] = 0.0
            after = count + delta
            if len(after) and after.min() < 0:
                raise StorageError("internal error: a list's count would be negative; "
                                   "nothing of this transaction was written")
            out = np.empty(n, dtype=_STATS_DTYPE)
            out["count"] = after
            out["version"] = self.id
            out["flags"] = flags
            out["df"] = df
            out["high"] = high
            raw = out.tobytes()
            size = _STATS.size
            cur.putmulti(list(zip(keys, [raw[i:i + size] for i in range(0, len(raw), size)])))
        long = np.flatnonzero(stored & (version >= 0) & (after >= CHANGES_OVER))
        if len(long):
            self._record_changes(fids[long], [keys[i] for i in long.tolist()],
                                 version[long], count_fids, self.id)
        self._counts.clear()
        self._count_parts.clear()
        self._overlaps.clear()
        self._df_parts.clear()
        self._df = {}
        self._highs.clear()
        self._no_stats.clear()
        self._lows.clear()
        self._low_parts.clear()

    def _record_changes(self, fids: np.ndarray, keys: list[bytes], versions: np.ndarray,
                        count_fids: np.ndarray, version: int) -> None:
        """Append this commit's change of each long list (fids, their stored versions
        before it) to its record (see `changes`): the lowest start it changed;
        MAX_ADDRESS (none) where it wrote no interval (only the list's df or high changed:
        a delete), 0 (all of it) where a write was not noted."""
        db = self.dbs["changes"]
        if db is None:
            return
        low_fids, lows = self._combined(self._lows, self._low_parts, np.minimum)
        at = np.minimum(np.searchsorted(low_fids, fids), max(len(low_fids) - 1, 0))
        noted = low_fids[at] == fids if len(low_fids) else np.zeros(len(fids), dtype=bool)
        counted = np.isin(fids, count_fids)
        low = np.where(noted, lows[at] if len(lows) else 0,
                       np.where(counted, 0, MAX_ADDRESS))
        with self.txn.cursor(db=db) as cur:
            records = {bytes(k): v for k, v in cur.getmulti(keys)}
            items = []
            for k, before, lowest in zip(keys, versions.tolist(), low.tolist()):
                pairs = _changes_value(records.get(k, b""))
                if not pairs or pairs[-1][0] != before:  # none, or not the list's
                    pairs = [(before, 0)]
                pairs.append((version, lowest))
                if len(pairs) > CHANGES_KEPT + 1:
                    pairs = [(pairs[-CHANGES_KEPT - 1][0], 0)] + pairs[-CHANGES_KEPT:]
                items.append((k, b"".join(_KEY.pack(*p) for p in pairs)))
            cur.putmulti(items)

    def list_changes(self, fid: int) -> list[tuple[int, int]]:
        """The record of a long list's last changes (see `changes`): [(base, 0), (version,
        low), ...], oldest first; [] when none is kept."""
        db = self.dbs["changes"]
        return [] if db is None else _changes_value(self.txn.get(u64(fid), db=db) or b"")

    def _changed(self, fid: int, low: int) -> None:
        """Note that this transaction changed list fid from start `low` on."""
        self._lows[fid] = min(self._lows.get(fid, low), low)

    def abort(self) -> None:
        """End the transaction (in a forked child, one inherited is left as it is: it is
        the parent's)."""
        if self.pid != os.getpid():
            return
        self.env.txns.discard(self)
        self._close_cursors()
        try:
            self.txn.abort()
        finally:
            self._unguard()

    def _unguard(self) -> None:
        if self._guard is not None:
            _close_lock_file(self._guard)  # (releases the shared flock)
            self._guard = None

    def _close_cursors(self) -> None:
        if self._append_cursor is not None:
            self._append_cursor.close()
            self._append_cursor = None

    # meta
    def meta(self, key: str, default=None):
        raw = self.txn.get(key.encode(), db=self.dbs["meta"])
        return default if raw is None else _meta_decoder.decode(raw)

    def set_meta(self, key: str, value) -> None:
        self.txn.put(key.encode(), _meta_encoder.encode(value), db=self.dbs["meta"])

    # features
    def feature_id(self, name: str) -> int | None:
        raw = self.txn.get(name_key(name), db=self.dbs["features"])
        return None if raw is None else from_u64(raw)

    def feature_ids(self, names: list[str]) -> list[int | None]:
        """feature_id of each name, in one C-level getmulti."""
        keys = [name_key(name) for name in names]
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            found = {bytes(k): from_u64(v) for k, v in cur.getmulti(keys)}
        return [found.get(k) for k in keys]

    def add_features(self, items: list[tuple[str, int]]) -> None:
        """Intern new features: (name, id) pairs with ids above every stored one."""
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            cur.putmulti(sorted((name_key(name), u64(fid)) for name, fid in items))
        with self.txn.cursor(db=self.dbs["names"]) as cur:
            _append_all(cur, sorted((u64(fid), name.encode()) for name, fid in items))

    def feature_name(self, fid: int) -> str | None:
        raw = self.txn.get(u64(fid), db=self.dbs["names"])
        return None if raw is None else bytes(raw).decode()

    def features(self):
        """(name, id) of every feature, in name order."""
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            for k, v in cur:
                yield bytes(k).decode(), from_u64(v)

    def features_with_prefix(self, prefix: str, limit: int):
        """Up to `limit` feature names starting with `prefix`, in name order."""
        raw = utf8(prefix, "feature prefix")
        out = []
        with self.txn.cursor(db=self.dbs["features"]) as cur:
            if not cur.set_range(raw):
                return out
            for key in cur.iternext(values=False):
                key = bytes(key)
                if not key.startswith(raw) or len(out) >= limit:
                    break
                if b"\x00" not in key:  # a long name's key is not the name
                    out.append(key.decode())
        return out

    def lists_without_stats(self) -> list[int]:
        """The ids of the lists whose statistics are not known (see counts): a word's list
        that intervals were annotated into (forget_stats), or one written before
        statistics were kept."""
        out = []
        flags = 16                   # (the flags byte: after count and version, u64 each)
        with self.txn.cursor(db=self.dbs["counts"]) as cur:
            for k, v in cur:
                if len(v) != _STATS.size or v[flags] & NO_STATS:
                    out.append(from_u64(k))
        return out

    def feature_count(self) -> int:
        return self.txn.stat(self.dbs["features"])["entries"]

    # annotation lists
    def read_list(self, fid: int, low: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole annotation list of a feature (empty arrays when it has none), or its
        intervals starting at or after `low`. For a list of points (token postings) ends
        is starts, the same array; when every value is 0, values is a read-only broadcast
        zero (no memory)."""
        prefix = u64(fid)
        bufs = []
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            at = cur.set_range(prefix)
            if low is not None and low > 0:  # from the block holding low
                at = cur.set_range(_KEY.pack(fid, low + 1))
                if (cur.prev() if at else cur.last()) and bytes(cur.key()[:8]) == prefix:
                    at = True
                else:
                    at = cur.set_range(prefix)
            if at:
                for key, value in cur:
                    if key[:8] != prefix:
                        break
                    bufs.append(value)
        tail = self.tail(fid)
        if tail is not None:
            bufs.append(tail)
        if not bufs:
            return (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
        offsets = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in bufs], out=offsets[1:])
        s, e, v, _, zero = kernels.decode_blocks(b"".join(bufs), offsets)
        if low is not None and len(s) and s[0] < low:
            cut = int(np.searchsorted(s, low, side="left"))
            s, e, v = s[cut:], (s[cut:] if e is s else e[cut:]), v[cut:]
        if zero:
            v = zero_values(len(s))
        return s, e, v

    def tail(self, fid: int):
        """The feature's tail block (see `tails`), or None."""
        db = self.dbs["tails"]
        return None if db is None else self.txn.get(u64(fid), db=db)

    def block_firsts(self, fid: int, start: int = 0) -> np.ndarray:
        """The first start of each of the feature's blocks, its tail last, ascending: the
        list's directory (block i holds the intervals starting in [firsts[i],
        firsts[i + 1])); from the block keyed `start` on when given. Reads keys only, and
        the tail's header."""
        prefix = u64(fid)
        keys = []
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            if cur.set_range(_KEY.pack(fid, max(start, 0))):
                for key in cur.iternext(values=False):
                    if key[:8] != prefix:
                        break
                    keys.append(key)
        firsts = np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 2)[:, 1] \
            .astype(np.int64) if keys else np.empty(0, dtype=np.int64)
        tail = self.tail(fid)
        if tail is not None:
            firsts = np.append(firsts, _HEADER.unpack_from(tail, 0)[4])
        return firsts

    def read_blocks(self, fid: int, firsts: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The intervals of the feature's blocks that start at `firsts` (ascending, each a
        block's first start, see block_firsts), decoded as one list in one kernel call."""
        if not len(firsts):
            return (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
        pack = _KEY.pack
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            found = cur.getmulti([pack(fid, f) for f in firsts.tolist()])
        bufs = [v for _, v in found]
        if len(found) == len(firsts) - 1:  # the last one asked for is the tail
            tail = self.tail(fid)
            if tail is not None and _HEADER.unpack_from(tail, 0)[4] == int(firsts[-1]):
                bufs.append(tail)
        if len(bufs) != len(firsts):
            raise BadValue(f"feature {fid}: {len(firsts) - len(bufs)} of its blocks "
                           "are missing (run `annodb check`)")
        offsets = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in bufs], out=offsets[1:])
        s, e, v, _, zero = kernels.decode_blocks(b"".join(bufs), offsets)
        if zero:
            v = zero_values(len(s))
        return s, e, v

    def list_count(self, fid: int) -> int:
        """How many intervals the feature's list holds (committed, erased ones included)."""
        return self.list_state(fid)[0]

    def list_state(self, fid: int) -> tuple[int, int | None, int, int | None, float | None]:
        """(how many intervals the list holds, its version: the id of the write transaction
        that last changed it, None when not known; its flags, OVERLAPPING | UNKNOWN |
        NO_STATS; its df and high, None when not known). Committed state; a write
        transaction's own df and high changes are added (see df_changes)."""
        raw = self.txn.get(u64(fid), db=self.dbs["counts"])
        state = (0, None, 0, 0, 0.0) if raw is None else _count_value(raw)
        if self.write and fid in self._no_stats:
            return state[:3] + (None, None)
        if self.write and state[3] is not None:
            df = self.df_changes().get(fid, 0)
            high = self._highs.get(fid, 0.0)
            if df or high > state[4]:
                state = state[:3] + (state[3] + df, max(state[4], high))
        return state

    def add_doc_frequencies(self, fids: np.ndarray, deltas: np.ndarray) -> None:
        """Change the df of lists fids[i] by deltas[i] (at commit)."""
        if len(fids):
            self._df_parts.append((np.asarray(fids, np.int64), np.asarray(deltas, np.int64)))
            self._df = None
            self._df_reduced = False

    def forget_stats(self, fid: int) -> None:
        """Mark list fid's df as not known (at commit): intervals not written as text
        went into a word's list."""
        self._no_stats.add(fid)

    def df_changes(self) -> dict[int, int]:
        """This transaction's df changes so far, by feature id (nonzero ones)."""
        if self._df is None:
            ids, sums = self._df_arrays()
            self._df = dict(zip(ids.tolist(), sums.tolist()))
        return self._df

    def _df_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """df_changes as arrays: (the feature ids ascending, their nonzero df changes)."""
        if not self._df_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if not self._df_reduced:
            self._df_reduced = True
            ids, sums = _reduced(np.concatenate([f for f, _ in self._df_parts]),
                                 np.concatenate([d for _, d in self._df_parts]), np.add)
            keep = sums != 0
            self._df_parts = [(ids[keep], sums[keep])]
        return self._df_parts[0]

    def _note_high(self, fid: int, v: np.ndarray) -> None:
        """Keep the greatest value written to list fid (when it is above 0)."""
        if len(v) and v.strides != (0,):
            high = float(v.max())
            if high > self._highs.get(fid, 0.0):
                self._highs[fid] = high

    def _mark_overlaps(self, fid: int, s: np.ndarray, e: np.ndarray, before: int = -1) -> None:
        """Note that list `fid` may now hold overlapping intervals, if the sorted (s, e)
        written to it overlap each other or the interval ending at `before` just before."""
        if len(s) and (before >= s[0] or (len(s) > 1 and bool((s[1:] <= e[:-1]).any()))):
            self._overlaps.add(fid)

    def _count(self, fid: int, delta: int) -> None:
        self._counts[fid] = self._counts.get(fid, 0) + delta

    def _count_many(self, fids: np.ndarray, deltas: np.ndarray) -> None:
        """_count for many lists at once (arrays)."""
        if len(fids):
            self._count_parts.append((np.asarray(fids, np.int64), np.asarray(deltas, np.int64)))

    def _changed_many(self, fids: np.ndarray, lows: np.ndarray) -> None:
        """_changed for many lists at once (arrays)."""
        if len(fids):
            self._low_parts.append((np.asarray(fids, np.int64), np.asarray(lows, np.int64)))

    def _settle(self) -> None:
        """Fold the changes noted for many lists at once into the by-list dicts (before
        one list's are taken away)."""
        for one, parts, ufunc in ((self._counts, self._count_parts, np.add),
                                  (self._lows, self._low_parts, np.minimum)):
            if parts:
                fids, values = self._combined(one, parts, ufunc)
                one.clear()
                one.update(zip(fids.tolist(), values.tolist()))
                parts.clear()

    def merge_into_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                        count: int | None = None) -> None:
        """Merge the GC-list (s, e, v) into feature `fid`'s list. New intervals win exact
        duplicates; where two would nest, the inner one stays (normalize's rule). The
        rewritten blocks hold at most `count` intervals (default: the environment's
        limit)."""
        if len(s) == 0:
            return
        self._seal_tail(fid)
        blocks = self.dbs["blocks"]
        txn = self.txn
        lo, hi = int(s[0]), int(e[-1])
        prefix = u64(fid)
        # The existing intervals that can interact with the new ones have end >= lo and
        # start <= hi: a contiguous run. Find its blocks: back from the block holding lo
        # while the previous block ends at or after lo, then forward while blocks start <= hi.
        keys, parts = [], []
        with txn.cursor(db=blocks) as cur:
            found = cur.set_range(_KEY.pack(fid, lo + 1))
            found = cur.prev() if found else cur.last()
            if found and bytes(cur.key()[:8]) == prefix:
                # walk back
                while True:
                    ks, ke, kv = decode_block(cur.value())
                    keys.insert(0, bytes(cur.key()))
                    parts.insert(0, (ks, ke, kv))
                    if ke[0] < lo or not cur.prev() or bytes(cur.key()[:8]) != prefix:
                        break
                cur.set_key(keys[-1])
            else:
                found = cur.set_range(prefix)
                if found and bytes(cur.key()[:8]) != prefix:
                    found = False
                if found:
                    ks, ke, kv = decode_block(cur.value())
                    if ks[0] <= hi:
                        keys.append(bytes(cur.key()))
                        parts.append((ks, ke, kv))
                if keys:
                    cur.set_key(keys[-1])
            if keys:
                while cur.next() and bytes(cur.key()[:8]) == prefix:
                    if from_u64(cur.key()[8:]) > hi:
                        break
                    keys.append(bytes(cur.key()))
                    parts.append(decode_block(cur.value()))
        self._changed(fid, min(lo, int(parts[0][0][0])) if parts else lo)
        if parts:
            self._count(fid, -sum(len(p[0]) for p in parts))
            old_s = np.concatenate([p[0] for p in parts])
            old_e = np.concatenate([p[1] for p in parts])
            old_v = np.concatenate([p[2] for p in parts])
            if old_s[-1] < s[0] and old_e[-1] < e[0]:
                ms, me, mv = (np.concatenate((old_s, s)), np.concatenate((old_e, e)),
                              np.concatenate((old_v, v)))
            else:
                ms, me, mv = kernels.normalize(np.concatenate((old_s, s)),
                                               np.concatenate((old_e, e)),
                                               np.concatenate((old_v, v)))
            for key in keys:
                txn.delete(key, db=blocks)
            if ms[0] < old_s[0]:  # a new first interval: it may overlap the list before
                self._overlaps.add(fid)
        else:
            ms, me, mv = s, e, v
            self._overlaps.add(fid)  # (not checked against the intervals around)
        self._mark_overlaps(fid, ms, me)
        self._count(fid, len(ms))
        self._put_list(fid, ms, me, mv, count)

    def add_to_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                    count: int | None = None) -> None:
        """Add a GC-list to a feature's list: appended when it comes after, else merged
        (new blocks of at most `count` intervals)."""
        if not self.append_to_list(fid, s, e, v, count):
            self.merge_into_list(fid, s, e, v, count)

    def add_point_groups(self, fids, addresses: np.ndarray, bounds: np.ndarray,
                         after: int) -> None:
        """Add token postings to many existing lists, each after all it holds: fids[g]
        (ascending) gets the sorted points addresses[bounds[g]:bounds[g+1]], all at or
        past `after`, past which no stored interval of theirs ends (a writer's new text).

        A list's new points join its tail while that stays within TAIL_BYTES (one
        getmulti and one kernel call for all the lists: tails are many to a page, so this
        rewrites few pages however many lists a batch adds to). A tail that would grow
        past that spills: with the new points it refills the list's last block in
        `blocks` and goes on in full blocks, and what is left over is the new tail (or,
        when too long for one, the list's new last block). The work per list is done on
        arrays, not in Python per list (a flush touches tens of thousands)."""
        fids = np.asarray(fids, dtype=np.int64)
        if not len(fids):
            return
        if len(fids) > 1 and not (fids[1:] > fids[:-1]).all():
            raise StorageError("internal error: add_point_groups takes feature ids "
                               "ascending; nothing of this transaction was written")
        bounds = np.asarray(bounds, dtype=np.int64)
        sizes = np.diff(bounds)
        some = sizes > 0
        self._changed_many(fids[some], addresses[bounds[:-1][some]])
        tails_db = self.dbs["tails"]
        keys = _keys8(fids)
        many = len(fids) >= RELEASE_OVER
        found: list = []
        with self.txn.cursor(db=tails_db) as cur:
            for piece in self._pieces(keys, many):
                found += cur.getmulti(piece)
        old, old_offsets = _found_values(fids, found)
        buf, offs, group, first, ok = kernels.append_point_groups(
            old, old_offsets, addresses, bounds, TAIL_BYTES, self.block_count)
        n = len(fids)
        made = np.bincount(group, minlength=n)       # blocks made for each list
        at = np.searchsorted(group, np.arange(n))    # its first (the kernel's order)
        has_tail = old_offsets[1:] > old_offsets[:-1]
        tail_first = np.zeros(n, dtype=np.int64)
        if has_tail.any():
            tail_first[has_tail] = _header_numbers(old, old_offsets[:-1][has_tail], 8, 8)
        kept = ok & (made == 1)  # still a tail: one block, at the tail's key (or a new one)
        kept[kept] &= ~has_tail[kept] | (first[at[kept]] == tail_first[kept])
        mv = memoryview(buf)
        chosen = np.flatnonzero(kept)
        tails = [(keys[g], mv[a:b]) for g, a, b in zip(
            chosen.tolist(), offs[at[chosen]].tolist(), offs[at[chosen] + 1].tolist())]
        spill = np.flatnonzero(~kept)
        blocks, dropped = [], []
        if len(spill):
            old_mv = memoryview(old)
            olds = [old_mv[a:b] for a, b in zip(old_offsets[spill].tolist(),
                                                old_offsets[spill + 1].tolist())]
            blocks, spilled_tails, dropped = self._spill(
                fids[spill], olds, addresses, bounds[spill], bounds[spill + 1], many)
            tails += spilled_tails
            tails.sort(key=_first_item)
        if blocks:
            with self.txn.cursor(db=self.dbs["blocks"]) as cur:
                for piece in self._pieces(blocks, many):
                    cur.putmulti(piece)
        with self.txn.cursor(db=tails_db) as cur:
            for piece in self._pieces(tails, many):
                cur.putmulti(piece)
            for k in dropped:
                if cur.set_key(k):
                    cur.delete()
        if many:
            release_mapped_pages(self.env)
        self._count_many(fids, sizes)

    def _pieces(self, items: list, many: bool):
        """items in pieces of RELEASE_EVERY when many (an ingest's flush), letting go of
        the map's pages after each (see RELEASE_OVER); else whole."""
        if not many:
            yield items
            return
        for i in range(0, len(items), RELEASE_EVERY):
            yield items[i:i + RELEASE_EVERY]
            release_mapped_pages(self.env)

    def _spill(self, fids: np.ndarray, old_tails: list, addresses: np.ndarray,
               los: np.ndarray, his: np.ndarray, many: bool = False):
        """The blocks, tails and dropped tail keys for lists whose tail spills (see
        add_point_groups): list fids[g]'s tail old_tails[g] (empty: none) and new points
        addresses[los[g]:his[g]]: its last block in `blocks` refilled with its tail's
        points and the new ones, then full blocks, the rest its new tail."""
        fid_list = fids.tolist()
        lasts = []
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            for piece in self._pieces(fid_list, many):
                for fid in piece:
                    found = cur.set_range(_KEY.pack(fid + 1, 0))
                    found = cur.prev() if found else cur.last()
                    value = b""
                    if found and from_u64(cur.key()[:8]) == fid:
                        value = cur.value()
                    lasts.append(value)
        n = len(fid_list)
        # each list's points: its tail's (decoded in one call), then its new ones
        tail_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, old_tails), dtype=np.int64, count=n),
                  out=tail_offsets[1:])
        joined_tails = b"".join(old_tails)
        has = tail_offsets[1:] > tail_offsets[:-1]
        in_tail = np.zeros(n, dtype=np.int64)
        tail_points = np.zeros(0, dtype=np.int64)
        if has.any():
            in_tail[has] = _header_numbers(joined_tails, tail_offsets[:-1][has], 4, 4)
            tail_points = kernels.decode_blocks(joined_tails, tail_offsets[np.r_[has, True]]
                                                if not has.all() else tail_offsets)[0]
        new = his - los
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(in_tail + new, out=bounds[1:])
        points = np.empty(int(bounds[-1]), dtype=np.int64)
        # the tails' points go first in each list, the new ones after them
        group_of_tail = np.repeat(np.arange(n), in_tail)
        tail_rank = np.arange(len(tail_points)) - np.repeat(np.cumsum(in_tail) - in_tail,
                                                             in_tail)
        points[bounds[group_of_tail] + tail_rank] = tail_points
        group_of_new = np.repeat(np.arange(n), new)
        new_rank = np.arange(int(new.sum())) - np.repeat(np.cumsum(new) - new, new)
        points[bounds[group_of_new] + in_tail[group_of_new] + new_rank] = \
            addresses[los[group_of_new] + new_rank]
        last_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, lasts), dtype=np.int64, count=n), out=last_offsets[1:])
        buf, offs, group, first, ok = kernels.append_point_groups(
            b"".join(lasts), last_offsets, points, bounds, self.block_bytes, self.block_count)
        if not ok.all():
            raise StorageError("internal error: new postings do not come after a list's "
                               "end; nothing of this transaction was written")
        sizes = np.diff(offs)
        last_of_list = np.r_[group[1:] != group[:-1], True] if len(group) else group
        is_tail = last_of_list & (sizes <= TAIL_BYTES)
        keys = _keys16(fids[group], first)
        mv = memoryview(buf)
        blocks, tails = [], []
        for i, (a, b, tail) in enumerate(zip(offs[:-1].tolist(), offs[1:].tolist(),
                                             is_tail.tolist())):
            if tail:
                tails.append((keys[i][:8], mv[a:b]))
            else:
                blocks.append((keys[i], mv[a:b]))
        # a list whose tail is now a block (or whose new end is too long for a tail)
        ends_as_tail = np.zeros(n, dtype=bool)
        ends_as_tail[group[is_tail]] = True
        dropped = [u64(fid) for fid in fids[has & ~ends_as_tail].tolist()]
        return blocks, tails, dropped

    def _seal_tail(self, fid: int) -> None:
        """Move the feature's tail, if any, into `blocks` (before a write that rewrites the
        end of the list)."""
        db = self.dbs["tails"]
        if db is None:
            return
        key = u64(fid)
        tail = self.txn.get(key, db=db)
        if tail is not None:
            self.txn.put(_KEY.pack(fid, _HEADER.unpack_from(tail, 0)[4]), tail,
                         db=self.dbs["blocks"])
            self.txn.delete(key, db=db)

    def add_points(self, fid: int, addresses: np.ndarray) -> None:
        """Add token postings (points, value 0) to a feature's list."""
        v = _ZEROS[:len(addresses)] if len(addresses) <= len(_ZEROS) else \
            np.zeros(len(addresses), dtype=np.float64)
        self.add_to_list(fid, addresses, addresses, v)

    def append_to_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                       count: int | None = None) -> bool:
        """Append a GC-list that lies wholly after the feature's list. Touches only the last
        block. Returns False (and writes nothing) when the new intervals do not come after."""
        self._seal_tail(fid)
        blocks = self.dbs["blocks"]
        prefix = u64(fid)
        low = int(s[0])
        if self._append_cursor is None:
            self._append_cursor = self.txn.cursor(db=blocks)
        cur = self._append_cursor
        found = cur.set_range(_KEY.pack(fid + 1, 0))
        found = cur.prev() if found else cur.last()
        if found and bytes(cur.key()[:8]) == prefix:
            buf = cur.value()
            n = _HEADER.unpack_from(buf, 0)[3]
            ls, le, lv = decode_block(buf)
            if not (ls[-1] < s[0] and le[-1] < e[0]):
                return False
            self._mark_overlaps(fid, s, e, int(le[-1]))
            self._changed(fid, low)
            if n < self._limit(count) and len(buf) < self.block_bytes:
                # refill the last block (and go on in new blocks past it)
                cur.delete()
                self._count(fid, -len(ls))
                s, e, v = (np.concatenate((ls, s)), np.concatenate((le, e)),
                           np.concatenate((lv, v)))
        else:
            self._mark_overlaps(fid, s, e)
            self._changed(fid, 0)
        self._count(fid, len(s))
        self._put_list(fid, s, e, v, count)
        return True

    def _limit(self, count: int | None) -> int:
        """Intervals a new block may hold: `count`, within the environment's limit."""
        return self.block_count if count is None else min(count, self.block_count)

    def _put_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                  count: int | None = None) -> None:
        """Write a GC-list as new blocks (cut so each fits self.block_bytes, and holds at
        most `count` intervals, default self.block_count)."""
        self._note_high(fid, v)
        cuts = kernels.block_bounds(s, e, v, self.block_bytes, self._limit(count)).tolist()
        blocks = self.dbs["blocks"]
        put = self.txn.put
        for i, j in zip(cuts[:-1], cuts[1:]):
            put(_KEY.pack(fid, int(s[i])), encode_block(s[i:j], e[i:j], v[i:j]), db=blocks)

    def encode_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                    count: int | None = None):
        """A GC-list as blocks (of at most `count` intervals, default self.block_count), in
        put_blocks' form (fids, firsts, buf, offsets)."""
        self._mark_overlaps(fid, s, e)
        self._note_high(fid, v)
        cuts = kernels.block_bounds(s, e, v, self.block_bytes, self._limit(count)).tolist()
        parts = [encode_block(s[i:j], e[i:j], v[i:j]) for i, j in zip(cuts[:-1], cuts[1:])]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in parts])
        return (np.full(len(parts), fid, dtype=np.int64), s[cuts[:-1]],
                np.frombuffer(b"".join(parts), dtype=np.uint8), offsets)

    def encode_point_groups(self, addresses: np.ndarray, bounds: np.ndarray):
        """New features' token lists as blocks (kernels.encode_point_groups at this
        environment's block limits): (buf, offsets, group, first)."""
        return kernels.encode_point_groups(addresses, bounds, self.block_bytes,
                                           self.block_count)

    def put_blocks(self, fids, firsts, bufs, offsets, tails=()) -> None:
        """Store the blocks of new features, whose ids are above every stored block's. Block
        i of part k is bufs[k][offsets[k][i]:offsets[k][i+1]]; fids and firsts run over all
        blocks. They are written in key order, so LMDB appends them, filling pages instead
        of splitting them. The last block of each feature in `tails` (token lists) is its
        tail (see `tails`)."""
        fids = np.asarray(fids, dtype=np.int64)
        firsts = np.asarray(firsts, dtype=np.int64)
        values, counts, lengths = [], [], []
        for buf, offs in zip(bufs, offsets):
            offs = np.asarray(offs, dtype=np.int64)
            mv = memoryview(buf)
            values.extend(mv[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist()))
            counts.append(_header_numbers(buf, offs[:-1], 4, 4))
            lengths.append(np.diff(offs))
        counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        self._count_many(fids, counts)
        self._changed_many(fids, np.zeros(len(fids), dtype=np.int64))
        order = np.lexsort((firsts, fids))
        f = fids[order]
        keys = _keys16(f, firsts[order])
        last = np.r_[f[1:] != f[:-1], True] if len(f) else np.zeros(0, dtype=bool)
        tail_fids = np.fromiter(tails, dtype=np.int64, count=len(tails))
        is_tail = last & (lengths[order] <= TAIL_BYTES) & np.isin(f, tail_fids)
        items, tail_items = [], []
        for key, i, tail in zip(keys, order.tolist(), is_tail.tolist()):
            if tail:
                tail_items.append((key[:8], values[i]))   # its last block, when short
            else:
                items.append((key, values[i]))
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            _append_all(cur, items)
        if tail_items:
            with self.txn.cursor(db=self.dbs["tails"]) as cur:
                _append_all(cur, tail_items)

    # documents
    def _entry(self, key, value) -> _Entry:
        """The decoded docs entry under `key` (cached: a write to docs clears the cache)."""
        key = bytes(key)
        entries = self._entries
        found = entries.get(key)
        if found is None:
            found = _Entry(value, from_u64(key))
            if len(entries) >= GROUP_CACHE:
                entries.pop(next(iter(entries), None), None)
            entries[key] = found
        return found

    def _entry_at(self, cur, address: int):
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
        raws, starts = [], []  # the documents of the entries to regroup

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
        pairs = list(zip(_utf8_all([d for d, _ in items], "docno"),
                         map(_U64.pack, [s for _, s in items])))
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
        with self.txn.cursor(db=self.dbs["docnos"]) as cur:
            found = cur.getmulti(_utf8_all(docnos, "docno"))
        return {bytes(k).decode(): from_u64(v) for k, v in found}

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
        out = []
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

    def replace_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray) -> None:
        """Replace feature fid's whole list by (s, e, v), a GC-list holding some of its
        intervals (so its flags and statistics still hold), in new blocks; when that is
        empty, remove the feature: its name (features, names), blocks, tail, counts and
        changes. For purge.py, on a copy no other process has open (the feature's id may
        be cached by a process that has the database open)."""
        prefix = u64(fid)
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            if cur.set_range(prefix):
                while bytes(cur.key()[:8]) == prefix and cur.delete():
                    pass
        for name in ("tails", "changes"):
            if self.dbs[name] is not None:
                self.txn.delete(prefix, db=self.dbs[name])
        if len(s):
            self._count(fid, len(s) - self.list_count(fid))
            self._changed(fid, 0)
            self._put_list(fid, s, e, v)
            return
        name = self.feature_name(fid)
        if name is not None:
            self.txn.delete(name_key(name), db=self.dbs["features"])
        self.txn.delete(prefix, db=self.dbs["names"])
        self.txn.delete(prefix, db=self.dbs["counts"])
        self._settle()
        for pending in (self._counts, self._highs, self._lows):
            pending.pop(fid, None)
        self._overlaps.discard(fid)
        self._no_stats.discard(fid)

    def all_blocks(self):
        """(feature id, first start, raw block) of every block, each list's tail after its
        blocks, in feature order (for check)."""
        tails = []
        if self.dbs["tails"] is not None:
            with self.txn.cursor(db=self.dbs["tails"]) as cur:
                tails = [(from_u64(k), bytes(v)) for k, v in cur]
        t = 0
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            for k, v in cur:
                fid, start = _KEY.unpack(bytes(k))
                while t < len(tails) and tails[t][0] < fid:
                    yield tails[t][0], _HEADER.unpack_from(tails[t][1], 0)[4], tails[t][1]
                    t += 1
                yield fid, start, v
        for tfid, value in tails[t:]:
            yield tfid, _HEADER.unpack_from(value, 0)[4], value


# What reading a damaged database raises: LMDB's corruption errors (and the error state
# they leave the transaction in), values that do not decode, blocks whose header does not
# match them.
_DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadTxnError, lmdb.InvalidError,
           lmdb.PanicError, lmdb.BadValsizeError, msgspec.DecodeError, struct.error,
           zlib.error, zstandard.ZstdError, UnicodeDecodeError, BadBlock, BadValue)


def _damage_is_an_error(method):
    """The Txn method, with damage met while it reads turned into DamagedError (and the
    environment marked, so no write transaction begins in it afterwards)."""
    def seen(txn, err):
        message = damaged(txn.env.path, f"{type(err).__name__}: {err}")
        txn.env.damage = str(message).split("; run `annodb check")[0]  # (without the advice)
        return message

    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                yield from method(self, *args, **kwargs)
            except _DAMAGE as err:
                raise seen(self, err) from None
    else:
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except _DAMAGE as err:
                raise seen(self, err) from None
    return wrapper


for _name, _method in list(vars(Txn).items()):
    if inspect.isfunction(_method) and _name not in ("__init__", "commit", "abort"):
        setattr(Txn, _name, _damage_is_an_error(_method))


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
_madvise = None


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
