"""Numba kernels for the storage blocks: encode and decode one block of an annotation list.

The block layout is documented in storage/layout.py (which owns the on-disk format);
these functions only move bytes. Encoding a small block costs ~2 us and decoding a full
one ~3 us, against ~13 us and ~8 us for the same with numpy calls, which matters when an
ingest batch writes tens of thousands of short lists.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import BadBlock  # noqa: F401 (raised here, re-exported by kernels)
from .algebra import _floats, _pair

_HEADER_SIZE = 16
_FLAG_POINTS = 1
_FLAG_ZERO = 2
# a width byte PACKED | b: the numbers are bit-packed, b bits each (format 2; b <= 56)
PACKED = 128
MAX_PACKED_BITS = 56


@njit(cache=True, nogil=True)
def _width_of(x):
    if x < 256:
        return 1
    if x < 65536:
        return 2
    if x < 4294967296:
        return 4
    return 8


@njit(cache=True, nogil=True)
def _bits_of(x):
    """Bits of the non-negative x (at least 1): a binary search, not a loop per bit (block
    cutting asks at every interval)."""
    b = 1
    if x >= 4294967296:
        x >>= 32
        b += 32
    if x >= 65536:
        x >>= 16
        b += 16
    if x >= 256:
        x >>= 8
        b += 8
    if x >= 16:
        x >>= 4
        b += 4
    if x >= 4:
        x >>= 2
        b += 2
    if x >= 2:
        b += 1
    return b


@njit(cache=True, nogil=True)
def _packs(bits, width, count):
    """Whether a stream of `count` numbers of at most `bits` bits (`width` bytes) is
    bit-packed: when that saves at least a quarter of the bytes (packed numbers decode ~2x
    slower than whole bytes: not worth it for less)."""
    return bits <= MAX_PACKED_BITS and ((bits * count + 7) >> 3) * 4 <= width * count * 3


@njit(cache=True, nogil=True)
def _sized(bits, width, count):
    """Bytes of a stream of `count` numbers of at most `bits` bits (`width` bytes): the
    size _stream_width's code gives it, without the code (block cutting asks at every
    interval, with bits and width kept from the last time the largest number grew)."""
    packed = (bits * count + 7) >> 3
    if bits <= MAX_PACKED_BITS and packed * 4 <= width * count * 3:
        return packed
    return width * count


@njit(cache=True, nogil=True)
def _stream_width(largest, count):
    """The width byte of a stream of `count` numbers whose largest is `largest`: its byte
    width (1, 2, 4, 8), or PACKED | bits when bit-packing saves at least a quarter of the
    bytes (see _packs)."""
    width = _width_of(largest)
    bits = _bits_of(largest)
    if _packs(bits, width, count):
        return PACKED | bits
    return width


@njit(cache=True, nogil=True)
def _stream_bytes(code, count):
    """Bytes of a stream of `count` numbers of width byte `code`."""
    if code & PACKED:
        return ((code & 127) * count + 7) >> 3
    return code * count


@njit(cache=True, nogil=True)
def _put_uint(out, pos, x, width):
    for b in range(width):
        out[pos + b] = (x >> (8 * b)) & 255


@njit(cache=True, nogil=True)
def _get_uint(buf, pos, width):
    x = 0
    for b in range(width):
        x |= np.int64(buf[pos + b]) << (8 * b)
    return x


@njit(cache=True, nogil=True)
def _load_word(buf, pos, end):
    """The little-endian 64-bit word at buf[pos:pos+8], bytes at or past `end` read as 0."""
    if pos + 8 <= end:
        # unsigned indices (no wraparound test): LLVM makes one load of the eight
        u = np.uint64(pos)
        return np.uint64(buf[u]) | (np.uint64(buf[u + np.uint64(1)]) << np.uint64(8)) | \
            (np.uint64(buf[u + np.uint64(2)]) << np.uint64(16)) | \
            (np.uint64(buf[u + np.uint64(3)]) << np.uint64(24)) | \
            (np.uint64(buf[u + np.uint64(4)]) << np.uint64(32)) | \
            (np.uint64(buf[u + np.uint64(5)]) << np.uint64(40)) | \
            (np.uint64(buf[u + np.uint64(6)]) << np.uint64(48)) | \
            (np.uint64(buf[u + np.uint64(7)]) << np.uint64(56))
    x = np.uint64(0)
    for b in range(end - pos):
        x |= np.uint64(buf[pos + b]) << np.uint64(8 * b)
    return x


@njit(cache=True, nogil=True)
def _store_word(out, pos, x):
    """Write the 64-bit x little-endian at out[pos:pos+8]."""
    u = np.uint64(pos)  # unsigned indices (no wraparound test): LLVM makes one store
    for b in range(8):
        out[u + np.uint64(b)] = np.uint8((x >> np.uint64(8 * b)) & np.uint64(255))


@njit(cache=True, nogil=True)
def _block_shape(s, e, v, lo, hi):
    """(size, flags, start width, length width) of the block of intervals lo..hi-1."""
    n = hi - lo
    zero = True
    points = True
    max_delta = 0
    max_len = 0
    for i in range(lo, hi):
        if v[i] != 0.0:
            zero = False
        d = e[i] - s[i]
        if d != 0:
            points = False
            if d > max_len:
                max_len = d
        if i > lo:
            g = s[i] - s[i - 1]
            if g > max_delta:
                max_delta = g
    return _shape(max_delta, max_len, n, zero, points)


@njit(cache=True, nogil=True)
def _shape(max_delta, max_len, n, zero, points):
    """(size, flags, start width, length width) of a block of n intervals with these
    maxima (largest gap between starts, largest length) and kinds."""
    sw = _stream_width(max_delta, n - 1)
    lw = 1 if points else _stream_width(max_len, n)
    size = _HEADER_SIZE + (0 if zero else 8 * n) + _stream_bytes(sw, n - 1)
    if not points:
        size += _stream_bytes(lw, n)
    flags = (_FLAG_POINTS if points else 0) | (_FLAG_ZERO if zero else 0)
    return size, flags, sw, lw


@njit(cache=True, nogil=True)
def _put_number(out, pos, i, y, width):
    """Write number i (y >= 0) of a stream at out[pos:] of `width` bytes or PACKED | bits
    (a packed stream's bytes must be zeroed first)."""
    if width & PACKED:
        bits = width & 127
        bit = i * bits
        at = pos + (bit >> 3)
        sh = bit & 7
        out[at] |= (y & (255 >> sh)) << sh
        y >>= 8 - sh
        k = 8 - sh
        while k < bits:
            at += 1
            out[at] = y & 255
            y >>= 8
            k += 8
    else:
        at = pos + i * width
        for b in range(width):
            out[at + b] = (y >> (8 * b)) & 255


@njit(cache=True, nogil=True)
def _put_stream(out, pos, s, e, lo, count, width, lengths):
    """Write `count` numbers at out[pos:] of `width` bytes or PACKED | bits: the gaps
    s[lo+i+1] - s[lo+i] or, with `lengths`, e[lo+i] - s[lo+i]. Returns the position after
    them. Packed numbers go through a 64-bit buffer written out a word at a time (each byte
    written once: no zeroing first)."""
    if width & PACKED:
        bits = width & 127
        acc = np.uint64(0)  # the pending bits: `have` of them (< 64)
        have = 0
        for i in range(count):
            if lengths:
                x = np.uint64(e[lo + i] - s[lo + i])
            else:
                x = np.uint64(s[lo + i + 1] - s[lo + i])
            acc |= x << np.uint64(have)
            have += bits
            if have >= 64:
                _store_word(out, pos, acc)
                pos += 8
                have -= 64
                acc = x >> np.uint64(bits - have)  # the bits of x not in that word
        for b in range((have + 7) >> 3):
            out[pos] = np.uint8((acc >> np.uint64(8 * b)) & np.uint64(255))
            pos += 1
        return pos
    for i in range(count):
        if lengths:
            x = e[lo + i] - s[lo + i]
        else:
            x = s[lo + i + 1] - s[lo + i]
        if width == 1:
            out[pos] = x & 255
        elif width == 2:
            for b in range(2):
                out[pos + b] = (x >> (8 * b)) & 255
        elif width == 4:
            for b in range(4):
                out[pos + b] = (x >> (8 * b)) & 255
        else:
            for b in range(8):
                out[pos + b] = (x >> (8 * b)) & 255
        pos += width
    return pos


@njit(cache=True, nogil=True)
def _encode_into(out, pos, s, e, v, lo, hi, flags, sw, lw):
    """Write the block of intervals lo..hi-1 (shaped by _block_shape) at out[pos:]; returns
    the position after it. No temporary arrays: ingest encodes ~100k small blocks a flush."""
    n = hi - lo
    out[pos] = flags
    out[pos + 1] = sw
    out[pos + 2] = lw
    out[pos + 3] = 0
    _put_uint(out, pos + 4, n, 4)
    _put_uint(out, pos + 8, s[lo], 8)
    pos += _HEADER_SIZE
    if not (flags & _FLAG_ZERO):
        out[pos:pos + 8 * n] = v[lo:hi].copy().view(np.uint8)
        pos += 8 * n
    if n > 1:
        pos = _put_stream(out, pos, s, e, lo, n - 1, sw, False)
    if not (flags & _FLAG_POINTS):
        pos = _put_stream(out, pos, s, e, lo, n, lw, True)
    return pos


@njit(cache=True, nogil=True)
def _encode_block(s, e, v, lo, hi):
    size, flags, sw, lw = _block_shape(s, e, v, lo, hi)
    out = np.empty(size, np.uint8)
    _encode_into(out, 0, s, e, v, lo, hi, flags, sw, lw)
    return out


@njit(cache=True, nogil=True)
def _prefix_sum(s, deltas):
    for i in range(1, len(s)):
        s[i] = s[i - 1] + np.int64(deltas[i - 1])


@njit(cache=True, nogil=True)
def _add_lengths(e, s, lengths):
    for i in range(len(s)):
        e[i] = s[i] + np.int64(lengths[i])


@njit(cache=True, nogil=True)
def _unpack(s, e, buf, pos, width, count, lengths):
    """Decode `count` numbers at buf[pos:] of `width` bytes (or PACKED | bits): the deltas
    of s (s[0] given) or, with `lengths`, e = s + the numbers. Returns the position after
    them."""
    if width & PACKED:
        bits = width & 127
        size = (bits * count + 7) >> 3
        # aligned little-endian 64-bit words (one spare), read in order through a bit
        # buffer: number i is bits i*bits.. of them
        words = np.zeros((size >> 3) + 2, np.uint64)
        words.view(np.uint8)[:size] = buf[pos:pos + size]
        mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
        ubits = np.uint64(bits)
        acc = np.uint64(0)
        have = 0
        w = 0
        at = s[0]
        for i in range(count):
            if have >= bits:
                x = np.int64(acc & mask)
                acc >>= ubits
                have -= bits
            else:
                nxt = words[w]
                w += 1
                x = np.int64((acc | (nxt << np.uint64(have))) & mask)
                used = bits - have
                acc = nxt >> np.uint64(used)
                have = 64 - used
            if lengths:
                e[i] = s[i] + x
            else:
                at += x
                s[i + 1] = at
        return pos + size
    if count <= 32:  # a short stream: read in place (the copy below costs more)
        for i in range(count):
            x = _get_uint(buf, pos + i * width, width)
            if lengths:
                e[i] = s[i] + x
            else:
                s[i + 1] = s[i] + x
        return pos + width * count
    # the widths' views: a copy makes the slice aligned for the view
    raw = buf[pos:pos + width * count].copy()
    if width == 1:
        d1 = raw
        if lengths:
            _add_lengths(e, s, d1)
        else:
            _prefix_sum(s, d1)
    elif width == 2:
        d2 = raw.view(np.uint16)
        if lengths:
            _add_lengths(e, s, d2)
        else:
            _prefix_sum(s, d2)
    elif width == 4:
        d4 = raw.view(np.uint32)
        if lengths:
            _add_lengths(e, s, d4)
        else:
            _prefix_sum(s, d4)
    else:
        d8 = raw.view(np.uint64)
        if lengths:
            _add_lengths(e, s, d8)
        else:
            _prefix_sum(s, d8)
    return pos + width * count


@njit(cache=True, nogil=True)
def _decode_into(buf, s, e, v, with_e, with_v):
    """Decode the block buf into s, e, v (arrays of its length; e only when with_e, v only
    when with_v)."""
    flags = buf[0]
    sw = np.int64(buf[1])
    lw = np.int64(buf[2])
    n = len(s)
    pos = _HEADER_SIZE
    if not (flags & _FLAG_ZERO):
        if with_v:
            v[:] = buf[pos:pos + 8 * n].copy().view(np.float64)
        pos += 8 * n
    elif with_v:
        v[:] = 0.0
    s[0] = _get_uint(buf, 8, 8)
    if n > 1:
        pos = _unpack(s, s, buf, pos, sw, n - 1, False)
    if with_e:
        if flags & _FLAG_POINTS:
            e[:] = s
        else:
            _unpack(s, e, buf, pos, lw, n, True)


@njit(cache=True, nogil=True)
def _decode_block(buf):
    n = _get_uint(buf, 4, 4)
    s = np.empty(n, np.int64)
    v = np.empty(n, np.float64)
    if buf[0] & _FLAG_POINTS:
        _decode_into(buf, s, s, v, False, True)
        return s, s.copy(), v
    e = np.empty(n, np.int64)
    _decode_into(buf, s, e, v, True, True)
    return s, e, v



@njit(cache=True, nogil=True)
def _first_bad_block(buf, offsets, empty_ok):
    """The index of the first block of buf (block i = buf[offsets[i]:offsets[i+1]]) whose
    length is not what its header says (widths known, 1 or more intervals), or -1. Empty
    blocks are allowed when empty_ok. Decoding trusts these headers, so a damaged one must
    be refused before (it would read past the block)."""
    for b in range(len(offsets) - 1):
        pos, end = offsets[b], offsets[b + 1]
        size = end - pos
        if size == 0 and empty_ok:
            continue
        if pos < 0 or end > len(buf) or size < _HEADER_SIZE:
            return b
        flags, sw, lw = np.int64(buf[pos]), np.int64(buf[pos + 1]), np.int64(buf[pos + 2])
        n = _get_uint(buf, pos + 4, 4)
        if n < 1 or (flags | _FLAG_POINTS | _FLAG_ZERO) != (_FLAG_POINTS | _FLAG_ZERO):
            return b
        for w in (sw, lw):
            if not (w == 1 or w == 2 or w == 4 or w == 8 or
                    (w & PACKED and 1 <= (w & 127) <= MAX_PACKED_BITS)):
                return b
        want = _HEADER_SIZE + _stream_bytes(sw, n - 1)
        if not flags & _FLAG_ZERO:
            want += 8 * n
        if not flags & _FLAG_POINTS:
            want += _stream_bytes(lw, n)
        if want != size:
            return b
    return -1


def _check_blocks(buf, offsets, empty_ok=False) -> None:
    bad = _first_bad_block(buf, offsets, empty_ok)
    if bad >= 0:
        raise BadBlock(f"stored block {bad} of {len(offsets) - 1} is damaged (its header "
                       "does not match its length)")


def block_bytes(header: bytes) -> int | None:
    """The size a block's 16-byte header says it has, or None for unknown widths."""
    flags, sw, lw, n = header[0], header[1], header[2], int.from_bytes(header[4:8], "little")
    for w in (sw, lw):
        if not (w in (1, 2, 4, 8) or (w & PACKED and 1 <= w & 127 <= MAX_PACKED_BITS)):
            return None
    size = _HEADER_SIZE + int(_stream_bytes(sw, n - 1)) if n >= 1 else _HEADER_SIZE
    if not flags & _FLAG_ZERO:
        size += 8 * n
    if not flags & _FLAG_POINTS:
        size += int(_stream_bytes(lw, n))
    return size


def encode_block(starts, ends, values) -> bytes:
    """One storage block (layout in storage/layout.py) from a GC-list of 1..BLOCK_SIZE intervals."""
    s, e = _pair(starts, ends, "block")
    v = _floats(values, "values")
    if len(s) == 0 or len(v) != len(s):
        raise ValueError("a block holds at least one interval and one value per interval")
    return _encode_block(s, e, v, 0, len(s)).tobytes()


def decode_block(buf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GC-list stored in one block (BadBlock if its header does not match it)."""
    b = np.frombuffer(buf, dtype=np.uint8)
    _check_blocks(b, np.array([0, len(b)], dtype=np.int64))
    return _decode_block(b)


def encode_point_groups(addresses, bounds, budget: int, max_count: int):
    """Encode many new token lists at once: group g is addresses[bounds[g]:bounds[g+1]]
    (sorted, distinct), cut into blocks as block_bounds cuts them. Returns (buf, offsets,
    group, first): block i is buf[offsets[i]:offsets[i+1]], of group group[i], starting
    at first[i]. (append_point_groups with no last blocks.)"""
    b = np.ascontiguousarray(bounds, dtype=np.int64)
    if len(b) < 1 or b[0] != 0 or (np.diff(b) <= 0).any():
        raise ValueError("bounds must rise strictly from 0 to len(addresses)")
    buf, offsets, group, first, _ = append_point_groups(
        b"", np.zeros(len(b), np.int64), addresses, b, budget, max_count)
    return buf, offsets, group, first


@njit(cache=True, nogil=True)
def _cut(s, e, v, lo, hi, budget, max_count):
    """The block that starts at lo: as many intervals as fit in `budget` encoded bytes (at
    least one), at most max_count. Returns (end (exclusive), size, flags, start width,
    length width): what _block_shape says of lo..end-1. The size it tests is exactly what
    _encode_into writes (the same widths from the same maxima); each stream's bits and
    byte width are recomputed only when its largest number grows."""
    zero = v[lo] == 0.0
    points = e[lo] == s[lo]
    max_delta = 0
    dbits = 1
    dwidth = 1
    max_len = e[lo] - s[lo]
    lbits = _bits_of(max_len)
    lwidth = _width_of(max_len)
    i = lo + 1
    while i < hi and i - lo < max_count:
        g = s[i] - s[i - 1]
        d = e[i] - s[i]
        ndbits, ndwidth, nlbits, nlwidth = dbits, dwidth, lbits, lwidth
        if g > max_delta:
            ndbits = _bits_of(g)
            ndwidth = _width_of(g)
        if d > max_len:
            nlbits = _bits_of(d)
            nlwidth = _width_of(d)
        nzero = zero and v[i] == 0.0
        npoints = points and d == 0
        count = i - lo + 1
        size = _HEADER_SIZE + _sized(ndbits, ndwidth, count - 1)
        if not nzero:
            size += 8 * count
        if not npoints:
            size += _sized(nlbits, nlwidth, count)
        if size > budget:
            break
        if g > max_delta:
            max_delta = g
        if d > max_len:
            max_len = d
        dbits, dwidth, lbits, lwidth = ndbits, ndwidth, nlbits, nlwidth
        zero, points = nzero, npoints
        i += 1
    size, flags, sw, lw = _shape(max_delta, max_len, i - lo, zero, points)
    return i, size, flags, sw, lw


@njit(cache=True, nogil=True)
def _fitting(bits, width, room):
    """A count c such that every stream of 0..c numbers of at most `bits` bits (`width`
    bytes) takes at most `room` bytes (see _sized): whole bytes take at most as many as
    packed bits would, and past 6 numbers packing is always chosen when bits < 6 * width
    (4 * ceil(bits*c/8) <= 4 * (bits*c + 7)/8 <= 3*width*c once c * (6*width - bits) >= 7)."""
    c = room // width
    if c >= 6 and bits < 6 * width and bits <= MAX_PACKED_BITS:
        c = max(c, 8 * room // bits)
    return c


@njit(cache=True, nogil=True)
def _cut_points(s, lo, hi, budget, max_count):
    """_cut for points of value 0 (token postings; e and v are not read): (end, size, start
    width). While the largest gap holds and the count is below what surely fits
    (_fitting), a step is one comparison; past that, each step tests the size."""
    max_delta = 0
    bits = 1
    width = 1
    room = budget - _HEADER_SIZE
    safe = _fitting(bits, width, room)  # gaps that surely fit at this width
    limit = hi if max_count >= hi - lo else lo + max_count
    i = lo + 1
    while i < limit:
        stop = min(limit, lo + safe + 1)
        while i < stop and s[i] - s[i - 1] <= max_delta:
            i += 1
        if i == limit:
            break
        g = s[i] - s[i - 1]
        if g > max_delta:
            nbits = _bits_of(g)
            nwidth = _width_of(g)
            if _sized(nbits, nwidth, i - lo) > room:
                break
            max_delta, bits, width = g, nbits, nwidth
            safe = _fitting(bits, width, room)
        elif _sized(bits, width, i - lo) > room:
            break
        i += 1
    sw = _stream_width(max_delta, i - lo - 1)
    return i, _HEADER_SIZE + _stream_bytes(sw, i - lo - 1), sw


@njit(cache=True, nogil=True)
def _block_end(s, e, v, lo, hi, budget, max_count):
    """The end (exclusive) of the block that starts at lo (see _cut)."""
    return _cut(s, e, v, lo, hi, budget, max_count)[0]


@njit(cache=True, nogil=True)
def _block_bounds(s, e, v, budget, max_count):
    n = len(s)
    cuts = np.empty(n + 1, np.int64)
    m = 0
    lo = 0
    cuts[0] = 0
    while lo < n:
        lo = _block_end(s, e, v, lo, n, budget, max_count)
        m += 1
        cuts[m] = lo
    return cuts[:m + 1].copy()


@njit(cache=True, nogil=True)
def _encode_blocks(s, e, v, budget, max_count):
    cuts = _block_bounds(s, e, v, budget, max_count)
    m = len(cuts) - 1
    shapes = np.empty((m, 3), np.int64)
    offsets = np.empty(m + 1, np.int64)
    total = 0
    for b in range(m):
        size, flags, sw, lw = _block_shape(s, e, v, cuts[b], cuts[b + 1])
        shapes[b, 0] = flags
        shapes[b, 1] = sw
        shapes[b, 2] = lw
        offsets[b] = total
        total += size
    offsets[m] = total
    out = np.empty(total, np.uint8)
    for b in range(m):
        _encode_into(out, offsets[b], s, e, v, cuts[b], cuts[b + 1], shapes[b, 0],
                     shapes[b, 1], shapes[b, 2])
    return out, offsets, cuts


def encode_blocks(starts, ends, values, budget: int, max_count: int):
    """A GC-list cut into blocks as block_bounds cuts it and encoded, in one call: (buf,
    offsets, cuts), block i = buf[offsets[i]:offsets[i+1]] holding intervals
    cuts[i]..cuts[i+1]-1, byte for byte encode_block of them (a writer's annotation lists:
    ~65k blocks of 128 documents at 1x, ~4 us of Python each one by one)."""
    s, e = _pair(starts, ends, "list")
    v = _floats(values, "values")
    if len(v) != len(s):
        raise ValueError("one value per interval")
    return _encode_blocks(s, e, v, int(budget), int(max_count))


def block_bounds(starts, ends, values, budget: int, max_count: int) -> np.ndarray:
    """Where to cut a GC-list into blocks that each encode to at most `budget` bytes (a
    single interval always makes a block): indices 0 = c0 < c1 < ... < ck = len."""
    s, e = _pair(starts, ends, "list")
    v = _floats(values, "values")
    if len(v) != len(s):
        raise ValueError("one value per interval")
    return _block_bounds(s, e, v, int(budget), int(max_count))


@njit(cache=True, nogil=True)
def _decode_blocks(buf, offsets):
    total = 0
    points = True
    zero = True
    for b in range(len(offsets) - 1):
        pos = offsets[b]
        total += _get_uint(buf, pos + 4, 4)
        flags = buf[pos]
        points = points and (flags & _FLAG_POINTS) != 0
        zero = zero and (flags & _FLAG_ZERO) != 0
    s = np.empty(total, np.int64)
    e = s if points else np.empty(total, np.int64)
    v = np.zeros(0 if zero else total, np.float64)
    at = 0
    for b in range(len(offsets) - 1):
        block = buf[offsets[b]:offsets[b + 1]]
        n = _get_uint(block, 4, 4)
        _decode_into(block, s[at:at + n], e[at:at + n], v[at:at + n] if not zero else v,
                     not points, not zero)
        at += n
    return s, e, v, points, zero


def decode_blocks(buf, offsets):
    """A whole list from its blocks laid end to end in `buf` (block i is
    buf[offsets[i]:offsets[i+1]]). Returns (starts, ends, values, points, zero): when every
    interval is a point, ends is starts (the same array); when every value is 0, values is
    empty (the caller supplies zeros)."""
    b = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    o = np.ascontiguousarray(offsets, dtype=np.int64)
    _check_blocks(b, o)
    return _decode_blocks(b, o)


@njit(cache=True, nogil=True)
def _get_number(buf, pos, i, width):
    """Number i of a stream at buf[pos:] of `width` bytes or PACKED | bits."""
    if width & PACKED:
        bits = width & 127
        bit = i * bits
        at = pos + (bit >> 3)
        sh = bit & 7
        x = np.int64(buf[at]) >> sh
        k = 8 - sh
        while k < bits:
            at += 1
            x |= np.int64(buf[at]) << k
            k += 8
        return x & ((np.int64(1) << bits) - 1)
    return _get_uint(buf, pos + i * width, width)


@njit(cache=True, nogil=True)
def _stream_sum(buf, pos, width, count):
    """The sum of the `count` numbers at buf[pos:] of `width` bytes or PACKED | bits (a
    block's last start from its gaps: ~1 ns a number, where _get_number each is ~7)."""
    if width & PACKED:
        # number i is bits i*bits.. : 8 bytes loaded at its first byte hold it (bits <= 56)
        bits = width & 127
        end = pos + ((bits * count + 7) >> 3)
        mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
        total = np.uint64(0)
        bit = 0
        for _ in range(count):
            word = _load_word(buf, pos + (bit >> 3), end)
            total += (word >> np.uint64(bit & 7)) & mask
            bit += bits
        return np.int64(total)
    total = 0
    if width == 1:
        for i in range(count):
            total += np.int64(buf[pos + i])
    elif width == 2:
        for i in range(count):
            total += np.int64(buf[pos + 2 * i]) | (np.int64(buf[pos + 2 * i + 1]) << 8)
    elif width == 4:
        for i in range(count):
            at = pos + 4 * i
            total += np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8) | \
                (np.int64(buf[at + 2]) << 16) | (np.int64(buf[at + 3]) << 24)
    else:
        for i in range(count):
            total += _get_uint(buf, pos + i * width, width)
    return total


@njit(cache=True, nogil=True)
def _block_last(block):
    """(start, end) of the last interval of the block `block`, without decoding it."""
    m = _get_uint(block, 4, 4)
    flags = block[0]
    sw = np.int64(block[1])
    pos = _HEADER_SIZE + (0 if flags & _FLAG_ZERO else 8 * m)
    last = _get_uint(block, 8, 8) + _stream_sum(block, pos, sw, m - 1)
    if flags & _FLAG_POINTS:
        return last, last
    pos += _stream_bytes(sw, m - 1)
    return last, last + _get_number(block, pos, m - 1, np.int64(block[2]))


@njit(cache=True, nogil=True)
def _appendable(block, addrs, lo, hi, budget, max_count):
    """(size, last): the size of the token block `block` (points, zero values, at least
    two) with the points addrs[lo:hi] appended as they are (its numbers' width kept, its
    bytes untouched), and its last point. The size is -2 when the first point is not after
    the block's last (not an append), else -1 when the append cannot be (a gap too wide for
    the width, over the budget or the count). The cheap tests come first: with -1, `last`
    may be -1 (not computed) and the block may also be no append."""
    m = _get_uint(block, 4, 4)
    code = np.int64(block[1])
    count = m + hi - lo
    if count > max_count:
        return -1, -1
    size = _HEADER_SIZE + _stream_bytes(code, count - 1)
    if size > budget:
        return -1, -1
    limit = (np.int64(1) << (code & 127)) if code & PACKED else \
        (np.int64(1) << (8 * code) if code < 8 else np.int64(9223372036854775807))
    for j in range(lo + 1, hi):
        if addrs[j] - addrs[j - 1] >= limit:
            return -1, -1
    last = _get_uint(block, 8, 8) + _stream_sum(block, _HEADER_SIZE, code, m - 1)
    if addrs[lo] <= last:
        return -2, last
    if addrs[lo] - last >= limit:
        return -1, last
    return size, last


@njit(cache=True, nogil=True)
def _append_into(out, pos, block, last, addrs, lo, hi):
    """Write `block` (whose last point is `last`) with the points addrs[lo:hi] appended
    (as _appendable sized it)."""
    old = len(block)
    m = _get_uint(block, 4, 4)
    code = np.int64(block[1])
    count = m + hi - lo
    out[pos:pos + old] = block
    end = pos + _HEADER_SIZE + _stream_bytes(code, count - 1)
    out[pos + old:end] = 0
    _put_uint(out, pos + 4, count, 4)
    prev = last
    for j in range(lo, hi):
        _put_number(out, pos + _HEADER_SIZE, m - 1 + j - lo, addrs[j] - prev, code)
        prev = addrs[j]


@njit(cache=True, nogil=True)
def _grown(buf, pos, size):
    """buf, or a copy twice as large when `size` more bytes at pos do not fit."""
    if pos + size <= len(buf):
        return buf
    out = np.empty(max(2 * len(buf), pos + size), np.uint8)
    out[:pos] = buf[:pos]
    return out


@njit(cache=True, nogil=True)
def _grown_rows(rows, n):
    """rows, or a copy with twice the rows when row n is past its end."""
    if n < len(rows):
        return rows
    out = np.empty((2 * len(rows), rows.shape[1]), rows.dtype)
    out[:n] = rows[:n]
    return out


@njit(cache=True, nogil=True)
def _append_point_groups(last_buf, last_offsets, addrs, bounds, budget, max_count, single):
    """See append_point_groups. One pass over the groups, each written to the output as it
    is cut. A token list's last block that takes the new points as it is (same number
    width, within budget and count) is appended to in place: copied with the new gaps
    after its own, never decoded and re-encoded (an ingest flush would otherwise re-encode
    the growing last block of every common word, every flush). Otherwise the group's list
    (the last block's intervals when refilled, then the new points) is gathered in scratch
    arrays of the largest group's length, not of all groups' (their pages cost more than
    the cutting), and cut and encoded from there; lists of points of value 0 (token
    postings: the usual case) from their starts alone. With `single`, a group whose list
    would take more than one block is left out (no block, ok True): it is neither
    gathered nor cut past its first block (a flush's tails: such a list spills, and
    the caller writes it with its last block instead)."""
    n_groups = len(bounds) - 1
    ok = np.ones(n_groups, np.bool_)
    # the most points one block can hold (a delta takes at least a bit)
    one_block = min(max_count, (budget - _HEADER_SIZE) * 8 + 1)
    # the largest list to cut, an estimate of the bytes (grown when short)
    most = 0
    estimate = 64
    all_pz = True
    for g in range(n_groups):
        k = bounds[g + 1] - bounds[g]
        if single and k > one_block:
            continue
        estimate += 8 * k + 32
        lo, hi = last_offsets[g], last_offsets[g + 1]
        if hi > lo:
            m = _get_uint(last_buf, lo + 4, 4)
            if m < max_count and hi - lo < budget:
                k += m
                estimate += hi - lo
                if last_buf[lo] != (_FLAG_POINTS | _FLAG_ZERO):
                    all_pz = False
        most = max(most, k)
    s = np.empty(most, np.int64)
    e = s if all_pz else np.empty(most, np.int64)
    v = np.zeros(0 if all_pz else most, np.float64)
    buf = np.empty(estimate, np.uint8)
    blocks = np.empty((n_groups + 16, 3), np.int64)  # offset, group, first (grown)
    nb = 0
    pos = 0
    for g in range(n_groups):
        a, b = bounds[g], bounds[g + 1]
        if single and b - a > one_block:
            continue
        lo, hi = last_offsets[g], last_offsets[g + 1]
        k = 0  # the last block's intervals refilled
        pz = True
        if hi > lo:
            block = last_buf[lo:hi]
            m = _get_uint(block, 4, 4)
            if m < max_count and hi - lo < budget:  # room: appended to or refilled
                points_zero = block[0] == (_FLAG_POINTS | _FLAG_ZERO)
                if points_zero and m > 1:
                    size, last = _appendable(block, addrs, a, b, budget, max_count)
                    if size == -2:
                        ok[g] = False  # not an append: the caller merges this one
                        continue
                    if size >= 0:
                        buf = _grown(buf, pos, size)
                        _append_into(buf, pos, block, last, addrs, a, b)
                        blocks = _grown_rows(blocks, nb)
                        blocks[nb, 0] = pos
                        blocks[nb, 1] = g
                        blocks[nb, 2] = _get_uint(block, 8, 8)
                        nb += 1
                        pos += size
                        continue
                if points_zero:
                    _decode_into(block, s[:m], s[:m], v, False, False)
                    last_s = last_e = s[m - 1]
                else:
                    pz = False
                    _decode_into(block, s[:m], e[:m], v[:m], True, True)
                    last_s, last_e = s[m - 1], e[m - 1]
                k = m
            else:
                last_s, last_e = _block_last(block)
            if not (last_s < addrs[a] and last_e < addrs[a]):
                ok[g] = False  # not an append: the caller merges this one
                continue
        n = k + b - a
        s[k:n] = addrs[a:b]
        if not pz:
            e[k:n] = addrs[a:b]
            v[k:n] = 0.0
        if single and (_cut_points(s, 0, n, budget, max_count)[0] if pz else
                       _cut(s, e, v, 0, n, budget, max_count)[0]) < n:
            continue
        lo = 0
        while lo < n:
            if pz:
                hi, size, sw = _cut_points(s, lo, n, budget, max_count)
                flags, lw = _FLAG_POINTS | _FLAG_ZERO, 1
            else:
                hi, size, flags, sw, lw = _cut(s, e, v, lo, n, budget, max_count)
            buf = _grown(buf, pos, size)
            _encode_into(buf, pos, s, e, v, lo, hi, flags, sw, lw)
            blocks = _grown_rows(blocks, nb)
            blocks[nb, 0] = pos
            blocks[nb, 1] = g
            blocks[nb, 2] = s[lo]
            nb += 1
            pos += size
            lo = hi
    offsets = np.empty(nb + 1, np.int64)
    offsets[:nb] = blocks[:nb, 0]
    offsets[nb] = pos
    return buf[:pos], offsets, blocks[:nb, 1].copy(), blocks[:nb, 2].copy(), ok


def append_point_groups(last_blocks, last_offsets, addresses, bounds, budget: int,
                        max_count: int, single: bool = False):
    """Append token postings to many existing lists at once. Group g's new points are
    addresses[bounds[g]:bounds[g+1]]; its list's last block is
    last_blocks[last_offsets[g]:last_offsets[g+1]] (empty: none). A last block with room is
    refilled (re-encoded with the new points after its own); the rest go to new blocks cut
    as block_bounds cuts them. Returns (buf, offsets, group, first, ok): the blocks to put
    (block i = buf[offsets[i]:offsets[i+1]] of group group[i], keyed by its first start
    first[i] -- a refilled block keeps its key), and ok[g] False where the new points do
    not come after the list's last interval (the caller merges those; no block of theirs
    is in the output). With `single`, the groups whose list would take more than one
    block are left out too, with ok True (not encoded: a flush's tails that spill)."""
    lb = np.frombuffer(last_blocks, dtype=np.uint8) if not isinstance(last_blocks, np.ndarray) \
        else last_blocks
    lo = np.ascontiguousarray(last_offsets, dtype=np.int64)
    a = np.ascontiguousarray(addresses, dtype=np.int64)
    b = np.ascontiguousarray(bounds, dtype=np.int64)
    if len(lo) != len(b):
        raise ValueError("one last block (possibly empty) per group")
    _check_blocks(lb, lo, empty_ok=True)
    return _append_point_groups(lb, lo, a, b, int(budget), int(max_count), bool(single))


# A counting sort over n_ids costs O(n_ids) however few the ids: a commit of one note
# (tens of tokens) went over the whole vocabulary (412,909 features at 4x the scale
# corpus: 3 ms of a 5 ms commit; a web collection's vocabulary is far larger). With fewer
# than n_ids / COMPACT_BELOW ids the wrappers count over the ids' ranks among themselves
# instead (np.unique: O(n log n)), the same result.
COMPACT_BELOW = 8


@njit(cache=True, nogil=True)
def _group_order(ids, n_ids):
    counts = np.zeros(n_ids + 1, np.int64)
    for i in ids:
        counts[i + 1] += 1
    for k in range(n_ids):
        counts[k + 1] += counts[k]
    order = np.empty(len(ids), np.int64)
    for j in range(len(ids)):
        k = ids[j]
        order[counts[k]] = j
        counts[k] += 1
    return order


def group_order(ids, n_ids: int) -> np.ndarray:
    """The stable order that sorts `ids` (integers in 0..n_ids-1): a counting sort, O(n +
    n_ids), where argsort would be O(n log n) on a flush's millions of token ids."""
    a = np.ascontiguousarray(ids, dtype=np.int64)
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= n_ids):
        raise ValueError("ids must lie in 0..n_ids-1")
    if len(a) * COMPACT_BELOW < n_ids:  # few ids of many: count over their ranks
        ranks = np.unique(a, return_inverse=True)[1].reshape(-1)
        return _group_order(ranks.astype(np.int64), int(ranks.max(initial=-1)) + 1)
    return _group_order(a, int(n_ids))


@njit(cache=True, nogil=True)
def _group_postings(ids, run_starts, run_counts, n_ids):
    """See group_postings: count per id, then scatter each token's address (its run's
    start + its place in the run) to its id's next slot."""
    n = len(ids)
    counts = np.zeros(n_ids, np.int64)
    for j in range(n):
        counts[np.uint64(ids[j])] += 1
    n_fids = 0
    for k in range(n_ids):
        if counts[k]:
            n_fids += 1
    fids = np.empty(n_fids, np.int64)
    bounds = np.empty(n_fids + 1, np.int64)
    f = 0
    at = 0
    for k in range(n_ids):  # counts[k] becomes where id k's next address goes
        c = counts[k]
        if c:
            fids[f] = k
            bounds[f] = at
            f += 1
            counts[k] = at
            at += c
    bounds[n_fids] = n
    addrs = np.empty(n, np.int64)
    j = 0
    for r in range(len(run_starts)):
        a = run_starts[r]
        for t in range(run_counts[r]):
            k = np.uint64(ids[j])  # unsigned indices: no wraparound tests (~15% faster)
            at = counts[k]
            addrs[np.uint64(at)] = a + t
            counts[k] = at + 1
            j += 1
    return fids, bounds, addrs


def group_postings(ids, run_starts, run_counts, n_ids: int):
    """Group a flush's token postings by feature. Token j has feature id ids[j] (in
    0..n_ids-1); the tokens' addresses are runs: run r is run_counts[r] consecutive
    addresses from run_starts[r], the runs in the order of the tokens. Returns (fids,
    bounds, addrs): the distinct ids ascending, and feature fids[g]'s addresses are
    addrs[bounds[g]:bounds[g+1]], in token order. One counting sort that computes each
    token's address from its run and puts it in place: no address array, no sort order, no
    gathers (the numpy version, with repeat, a sort order and two random gathers, took
    ~0.13 s for the ~4M tokens of a flush; this ~0.03 s)."""
    a = np.ascontiguousarray(ids, dtype=np.int64)
    rs = np.ascontiguousarray(run_starts, dtype=np.int64)
    rc = np.ascontiguousarray(run_counts, dtype=np.int64)
    n_ids = int(n_ids)
    if a.ndim != 1 or rs.ndim != 1 or rc.ndim != 1 or len(rs) != len(rc):
        raise ValueError("ids, run_starts and run_counts must be 1-d, one count per run")
    if (len(rc) and int(rc.min()) < 0) or int(rc.sum()) != len(a):
        raise ValueError("run_counts must be non-negative and sum to len(ids)")
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= n_ids):
        raise ValueError("ids must lie in 0..n_ids-1")
    if len(a) * COMPACT_BELOW < n_ids:  # few ids of many: count over their ranks
        distinct, ranks = np.unique(a, return_inverse=True)
        fids, bounds, addrs = _group_postings(ranks.reshape(-1).astype(np.int64), rs, rc,
                                              len(distinct))
        return distinct[fids], bounds, addrs
    return _group_postings(a, rs, rc, max(n_ids, 0))
