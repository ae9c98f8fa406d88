"""The on-disk format of an annodb database: what each sub-database holds, its keys and
values, the block layout and the format version; and the constants and the packing of keys
and values (u64 keys, feature-name keys, counts values, the meta's msgpack) that the other
storage modules share. (The lmdb environment that holds them: environment.py.)

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

import hashlib
import struct

import msgspec
import numpy as np

from .. import kernels
from ..errors import AnnodbError, FormatVersionError, StorageError

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

# Lists of annotations other than token postings (the document list `:`, fields, values,
# labels) are cut into blocks of at most this many intervals: a query probes them far more
# than it reads them whole (which documents hold a rare word's matches?), and probing
# decodes whole blocks. Blocks of 128 documents of `:` made finding the documents of a
# query's matches 10x cheaper than one overflow page (~1,700) each, for 0.3 bytes of
# LMDB overhead a document.
ANNOTATION_BLOCK = 128
MAX_ADDRESS = 1 << 53  # addresses are in [0, MAX_ADDRESS): exact as float64 (see the header)
GROUP_DOCS = 256  # documents a docs group holds at most
TAG_DOC, TAG_ZDOC, TAG_GROUP, TAG_REL_GROUP, TAG_REL_DOC = 0, 1, 2, 3, 4

FLAG_POINTS = 1
FLAG_ZERO = 2
_HEADER = struct.Struct("<BBBxIq")
_U64 = struct.Struct(">Q")
_KEY = struct.Struct(">QQ")
_COUNT = struct.Struct(">QQB")  # a counts value: intervals, version, flags
_STATS = struct.Struct(">QQBQd")  # ... and df, high (the value written now)
OVERLAPPING, UNKNOWN, NO_STATS = 1, 2, 4  # its flags

CHANGES_OVER = 1 << 16  # a list this long keeps a record of its last changes (see changes)
CHANGES_KEPT = 8        # ... of this many
MAX_KEY = 480  # LMDB's keys are at most 511 bytes


class BadValue(StorageError):
    """A stored value that does not decode (a damaged database)."""


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
        return list(map(str.encode, texts))
    except UnicodeEncodeError:
        return [utf8(t, what) for t in texts]


def name_key(name: str) -> bytes:
    """The features key of a name: its UTF-8, or for a name too long for an LMDB key, a
    prefix, a NUL and its SHA-256 (the full name stays in `names`)."""
    return name_keys([name])[0]


def name_keys(names: list[str]) -> list[bytes]:
    """name_key of each name (in one pass: a call or two per name cost ~1 us each, and a
    batch interns tens of thousands of new words)."""
    return _keys_of_names(_utf8_all(names, "feature name"))


def _keys_of_names(raws: list[bytes]) -> list[bytes]:
    """name_keys of names given as their UTF-8."""
    if max(map(len, raws), default=0) <= MAX_KEY:
        return raws
    return [raw if len(raw) <= MAX_KEY else
            raw[:400] + b"\x00" + hashlib.sha256(raw).hexdigest().encode() for raw in raws]


def _first_item(item):
    return item[0]


def _keys8(fids: np.ndarray) -> list[bytes]:
    """The u64 keys of feature ids (or any integers, e.g. addresses), in one pass
    (struct.pack per id cost ~0.4 us each, slicing one buffer ~80 ns; a flush keys tens
    of thousands of lists). Numpy's void items become bytes whole (its "S" strings would
    drop trailing NULs)."""
    return np.asarray(fids, dtype=">u8").view("V8").tolist()


def _keys16(fids: np.ndarray, firsts: np.ndarray) -> list[bytes]:
    """The blocks keys (feature id, first start) of many blocks."""
    both = np.empty((len(fids), 2), dtype=">u8")
    both[:, 0] = fids
    both[:, 1] = firsts
    return both.view("V16").reshape(-1).tolist()


def _found_values(fids: np.ndarray, found: list) -> tuple[bytes, np.ndarray]:
    """getmulti's (key, value) pairs for the u64 keys of `fids` (ascending), laid end to end:
    (buffer, offsets), the value of fids[g] being buffer[offsets[g]:offsets[g+1]] (empty
    where none was found)."""
    offsets = np.zeros(len(fids) + 1, dtype=np.int64)
    if not found:
        return b"", offsets
    keys, values = zip(*found)
    lengths = np.zeros(len(fids), dtype=np.int64)
    found_lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    if len(found) == len(fids):   # (every one: getmulti keeps the keys' order)
        lengths[:] = found_lengths
    else:
        at = np.searchsorted(fids, np.frombuffer(b"".join(keys), dtype=">u8").astype(np.int64))
        lengths[at] = found_lengths
    np.cumsum(lengths, out=offsets[1:])
    return b"".join(values), offsets


def _header_numbers(buf, offsets: np.ndarray, at: int, width: int) -> np.ndarray:
    """The little-endian number of `width` bytes at byte `at` of each block's header
    (blocks buf[offsets[i]:...]): 4, 4 the count, 8, 8 the first start."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    where = (np.asarray(offsets, dtype=np.int64) + at)[:, None] + np.arange(width)
    return raw[where].copy().view(f"<u{width}").reshape(-1).astype(np.int64)


# Ids at most this many times as many as the largest of them are summed by counting over
# every id up to it (np.bincount: a commit's df changes, ~400k of ~415k words at 1x, in
# ~2 ms, where a stable sort took ~25); sparser ones are sorted (see kernels.COMPACT_BELOW).
DENSE_BELOW = 8


def _dense(fids: np.ndarray) -> int:
    """The largest id + 1 when the ids (int64) are dense enough to count over (see
    DENSE_BELOW), else 0."""
    if not len(fids) or int(fids.min()) < 0:
        return 0
    top = int(fids.max()) + 1
    return top if top <= DENSE_BELOW * len(fids) else 0


def _distinct(fids: np.ndarray) -> np.ndarray:
    """The distinct ids ascending (np.unique)."""
    top = _dense(fids)
    if not top:
        return np.unique(fids)
    seen = np.zeros(top, dtype=bool)
    seen[fids] = True
    return np.flatnonzero(seen)


def _reduced(fids: np.ndarray, values: np.ndarray, ufunc) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct fids ascending, ufunc.reduce of the values of each)."""
    if not len(fids):
        return fids, values
    top = _dense(fids) if ufunc is np.add and values.dtype == np.int64 else 0
    if top and int(np.abs(values).max()) * len(values) < 1 << 53:
        # summed as float64 by bincount: exact, every partial sum being below 2**53
        ids = _distinct(fids)
        sums = np.bincount(fids, weights=values, minlength=top)[ids]
        return ids, sums.astype(np.int64)
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


_meta_encoder = msgspec.msgpack.Encoder()   # meta values
_meta_decoder = msgspec.msgpack.Decoder()


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


def _append_all(cur, items: list) -> None:
    """Append items (sorted keys, all past the sub-database's last) so LMDB fills pages.
    LMDB's append mode silently skips a key that is not past the last one: that would
    lose data, so it is a StorageError (the transaction is then thrown away whole)."""
    consumed, added = cur.putmulti(items, append=True)
    if added != len(items):
        raise StorageError(f"internal error: {len(items) - added} of {len(items)} keys to "
                           "append were not past the last one; nothing was written")
