"""The block layout documented in storage/layout.py, read and written independently.

tests/naive.py decodes and encodes blocks from that text alone (never from
kernels/codec.py). Here the codec's blocks must be exactly the documented bytes, the codec
must read every block the layout allows (any width that holds the numbers, as format 1
wrote them), every block of real databases (the golden ones of formats 1-3 and a fresh
one grown by appends) must decode by the documentation to what the engine reads, and small
hand-computed blocks pin the bytes of each width and flag.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import annodb
from annodb import kernels as K
from annodb import storage

import naive

SPAN = 1 << 59   # addresses stay far below 2**63 (the int64 contract)
GOLDEN = Path(__file__).parent / "data"


def test_the_flags_are_the_documented_ones():
    assert (storage.FLAG_POINTS, storage.FLAG_ZERO) == (naive.POINTS, naive.ZERO)


def _numbers(draw, bits, count, least):
    """`count` numbers >= least whose largest is exactly `bits` bits long (so the array's
    width is the one `bits` asks for), most often at an edge: 256, 511, 65535, ..."""
    if bits == 0 or count == 0:
        return [0] * count
    lo, hi = 1 << (bits - 1), (1 << bits) - 1
    largest = draw(st.sampled_from([lo, hi]) | st.integers(lo, hi))
    out = draw(st.lists(st.integers(least, largest), min_size=count, max_size=count))
    out[draw(st.integers(0, count - 1))] = largest
    return out


@st.composite
def blocks(draw):
    """(starts, ends, values) of one block: start deltas and lengths of every bit length
    1..58 (so every byte width and every packed width a writer picks), points or not,
    values or all zero, 1 to 300 intervals."""
    gap_bits = draw(st.integers(1, 58))
    len_bits = draw(st.sampled_from([0, 0]) | st.integers(1, 58))
    n = draw(st.integers(1, min(300, SPAN >> gap_bits)))
    s = np.cumsum([draw(st.integers(0, 1000))] + _numbers(draw, gap_bits, n - 1, 1))
    e = s + np.array(_numbers(draw, len_bits, n, 0))
    e = np.maximum.accumulate(e)            # a GC-list: ends rise too
    e[1:] = np.maximum(e[1:], e[:-1] + 1)
    v = np.zeros(n) if draw(st.booleans()) else np.array(draw(st.lists(
        st.floats(allow_nan=False), min_size=n, max_size=n)))
    return s.astype(np.int64), e.astype(np.int64), v.astype(np.float64)


def lists(s, e, v):
    return s.tolist(), e.tolist(), v.tolist()


@settings(max_examples=400)
@given(blocks())
def test_the_codec_writes_exactly_the_documented_bytes(block):
    buf = K.encode_block(*block)
    assert buf == naive.encode_block(*block)
    assert naive.decode_block(buf) == lists(*block)
    assert K.block_bytes(buf[:16]) == len(buf)


@pytest.mark.parametrize("count", [1, 2, 5, 40])
def test_every_bit_length_at_both_edges(count):
    """The largest of `count` deltas, or of `count` lengths, at each edge of each bit
    length 1..58 (1, 2, 3, 4, 7, ..., 255, 256, ..., 2**58 - 1): the codec's bytes are the
    documented ones (random draws seldom land on an edge)."""
    for bits in range(1, 59):
        for largest in sorted({1 << (bits - 1), (1 << bits) - 1}):
            deltas = [1] * (count - 1) + [largest]
            s = np.cumsum([3] + deltas)
            cases = [(s, s), (np.arange(count) + 3, np.arange(count) + 3 + largest)]
            for s, e in cases:
                v = np.zeros(len(s))
                block = s.astype(np.int64), e.astype(np.int64), v
                assert K.encode_block(*block) == naive.encode_block(*block), (bits, largest)
                assert lists(*K.decode_block(naive.encode_block(*block))) == lists(*block)


def _valid_widths(largest, count):
    """Every width byte that holds `count` numbers whose largest is `largest`."""
    bits = max(1, int(largest).bit_length())
    return [w for w in (1, 2, 4, 8) if largest < 256 ** w] + \
        [128 + b for b in range(bits, 57)]


@settings(max_examples=200)
@given(blocks(), st.data())
def test_the_codec_reads_every_width_the_layout_allows(block, data):
    """Not only its own choices: format 1 wrote byte widths only, and a block appended to
    in place keeps its widths."""
    s, e, v = block
    sw = data.draw(st.sampled_from(_valid_widths(max(np.diff(s), default=0), len(s) - 1)))
    points = (s == e).all()
    lw = 1 if points else data.draw(st.sampled_from(_valid_widths(max(e - s), len(s))))
    buf = naive.encode_block(s, e, v, widths=(sw, lw))
    assert (buf[1], buf[2]) == (sw, lw)
    assert lists(*K.decode_block(buf)) == lists(*block)
    assert K.block_bytes(buf[:16]) == len(buf)
    gs, ge, gv, got_points, zero = K.decode_blocks(buf, [0, len(buf)])
    assert (gs.tolist(), ge.tolist()) == (s.tolist(), e.tolist())
    assert got_points == points and zero == (not v.any())


# ---------------------------------------------------------------- golden bytes, by hand

# (starts, ends, values, the block's bytes): header | values | deltas | lengths
HEADER = "{flags:02x} {sw:02x} {lw:02x} 00  {n:02x} 00 00 00  "
GOLDEN_BLOCKS = {
    # one point, value 0: an empty delta array is packed (0 bytes of 1 bit saves a quarter)
    "one point": ([42], [42], [0.0],
                  "03 81 01 00  01 00 00 00  2a 00 00 00 00 00 00 00"),
    # flag POINTS alone: the values are there, the lengths are not
    "a point with a value": ([42], [42], [3.0],
                             "01 81 01 00  01 00 00 00  2a 00 00 00 00 00 00 00"
                             "  00 00 00 00 00 00 08 40"),
    # start widths 1, 2, 4, 8 bytes: gaps of 200, 60000, 4e9 (3 gaps each: packing 8, 16 and
    # 32 bits saves nothing) and 2**57 (58 bits: over 56, never packed)
    "deltas of 1 byte": ([7, 207, 208, 408], [7, 207, 208, 408], [0.0] * 4,
                         "03 01 01 00  04 00 00 00  07 00 00 00 00 00 00 00  c8 01 c8"),
    "deltas of 2 bytes": ([7, 60007, 60008, 120008], [7, 60007, 60008, 120008], [0.0] * 4,
                          "03 02 01 00  04 00 00 00  07 00 00 00 00 00 00 00"
                          "  60 ea 01 00 60 ea"),
    "deltas of 4 bytes": ([0, 4_000_000_000, 4_000_000_001, 8_000_000_001],
                          [0, 4_000_000_000, 4_000_000_001, 8_000_000_001], [0.0] * 4,
                          "03 04 01 00  04 00 00 00  00 00 00 00 00 00 00 00"
                          "  00 28 6b ee 01 00 00 00 00 28 6b ee"),
    "deltas of 8 bytes": ([0, 1 << 57], [0, 1 << 57], [0.0] * 2,
                          "03 08 01 00  02 00 00 00  00 00 00 00 00 00 00 00"
                          "  00 00 00 00 00 00 00 02"),
    # packed deltas: 2 bits (1 | 2 << 2 | 3 << 4 = 0x39), 9 bits across bytes
    # (511 | 1 << 9 | 256 << 18 = 0x040003ff), 33 bits (2**32 | 1 << 33, in 9 bytes)
    "deltas of 2 bits": ([10, 11, 13, 16], [10, 11, 13, 16], [0.0] * 4,
                         "03 82 01 00  04 00 00 00  0a 00 00 00 00 00 00 00  39"),
    "deltas of 9 bits": ([0, 511, 512, 768], [0, 511, 512, 768], [0.0] * 4,
                         "03 89 01 00  04 00 00 00  00 00 00 00 00 00 00 00  ff 03 00 04"),
    "deltas of 33 bits": ([5, 5 + (1 << 32), 6 + (1 << 32)], [5, 5 + (1 << 32), 6 + (1 << 32)],
                          [0.0] * 3,
                          "03 a1 01 00  03 00 00 00  05 00 00 00 00 00 00 00"
                          "  00 00 00 00 03 00 00 00 00"),
    # no flag: values (1.5, -2.0), a 1-byte delta (one 3-bit number packs into no fewer
    # bytes), lengths 2 and 0 packed at 2 bits
    "values and lengths": ([0, 5], [2, 5], [1.5, -2.0],
                           "00 01 82 00  02 00 00 00  00 00 00 00 00 00 00 00"
                           "  00 00 00 00 00 00 f8 3f  00 00 00 00 00 00 00 c0  05  02"),
    # flag ZERO alone: lengths of 1, 2, 4 and 8 bytes
    "lengths of 1 byte": ([100, 101], [355, 356], [0.0] * 2,
                          "02 01 01 00  02 00 00 00  64 00 00 00 00 00 00 00  01  ff ff"),
    "lengths of 2 bytes": ([0], [65535], [0.0],
                           "02 81 02 00  01 00 00 00  00 00 00 00 00 00 00 00  ff ff"),
    "lengths of 4 bytes": ([0], [1 << 31], [0.0],
                           "02 81 04 00  01 00 00 00  00 00 00 00 00 00 00 00  00 00 00 80"),
    "lengths of 8 bytes": ([3], [3 + (1 << 57)], [0.0],
                           "02 81 08 00  01 00 00 00  03 00 00 00 00 00 00 00"
                           "  00 00 00 00 00 00 00 02"),
}


@pytest.mark.parametrize("name", GOLDEN_BLOCKS)
def test_golden_blocks(name):
    starts, ends, values, text = GOLDEN_BLOCKS[name]
    golden = bytes.fromhex(text)
    s, e, v = (np.array(starts, np.int64), np.array(ends, np.int64),
               np.array(values, np.float64))
    assert K.encode_block(s, e, v) == golden
    assert lists(*K.decode_block(golden)) == (starts, ends, values)
    assert naive.encode_block(s, e, v) == golden
    assert naive.decode_block(golden) == (starts, ends, values)


def test_the_decoder_refuses_what_the_layout_does_not_allow():
    good = bytes.fromhex(GOLDEN_BLOCKS["deltas of 2 bits"][3])
    for bad in (good[:-1], good + b"\0", good[:15],
                good[:1] + b"\x03" + good[2:],            # a width of 3 bytes
                good[:1] + b"\xb9" + good[2:],            # 57 bits
                good[:-1] + b"\x79"):                     # a spare bit set
        with pytest.raises(ValueError):
            naive.decode_block(bad)


# ---------------------------------------------------------------- every writer, real files


def _widths_hold(buf, s, e):
    """The block's widths hold its numbers with nothing to spare: a byte width is the
    smallest holding the largest number, a packed width is its bits. (Whether to pack
    follows stream_width for a block written whole; a block appended to in place keeps
    the packing it had.)"""
    for code, numbers in ((buf[1], np.diff(s)), (buf[2], None if buf[0] & naive.POINTS
                                                   else np.array(e) - np.array(s))):
        if numbers is None or len(numbers) == 0:
            continue
        largest = int(max(numbers))
        if code > 128:
            assert code - 128 == max(1, largest.bit_length())
        else:
            assert code == next(w for w in (1, 2, 4, 8) if largest < 256 ** w)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from([2, 8, 64, 100, 300, 70000, 1 << 33]),
                          st.integers(1, 600)), min_size=1, max_size=5),
       st.sampled_from([60, 500, 4080]))
def test_point_group_writers_write_the_documented_blocks(spec, budget):
    """encode_point_groups (new token lists) makes exactly the documented blocks;
    append_point_groups (an ingest's appends) makes blocks that decode by the layout."""
    rng = np.random.default_rng(len(spec))
    groups = [np.cumsum(rng.integers(1, gap, n)).astype(np.int64) for gap, n in spec]
    bounds = np.cumsum([0] + [len(g) for g in groups])
    buf, off, grp, first = K.encode_point_groups(np.concatenate(groups), bounds, budget, 2048)
    lasts = []
    for i in range(len(grp)):
        block = bytes(buf[off[i]:off[i + 1]])
        s, e, v = naive.decode_block(block)
        assert block == naive.encode_block(s, e, v) and s[0] == first[i]
        lasts.append(block)
    # append to each group's last block
    last = [max(i for i in range(len(grp)) if grp[i] == g) for g in range(len(groups))]
    new = [groups[g][-1] + np.cumsum(rng.integers(1, gap, n)) for g, (gap, n) in enumerate(spec)]
    offsets = np.cumsum([0] + [len(lasts[i]) for i in last])
    buf, off, grp, first, ok = K.append_point_groups(
        b"".join(lasts[i] for i in last), offsets, np.concatenate(new),
        np.cumsum([0] + [len(x) for x in new]), budget, 2048)
    assert ok.all()
    for i in range(len(grp)):
        block = bytes(buf[off[i]:off[i + 1]])
        s, e, v = naive.decode_block(block)
        assert lists(*K.decode_block(block)) == (s, e, v) and s[0] == first[i]
        assert s == e and not any(v) and len(block) <= budget
        _widths_hold(block, s, e)


def _check_every_block(r):
    """Every block of the snapshot's database, decoded by the layout: keyed by feature id
    and its first start, a feature's blocks make a GC-list, and the engine reads the same
    list."""
    by_feature, shapes = {}, set()
    for fid, key, raw in r._txn.all_blocks():
        s, e, v = naive.decode_block(raw)
        shapes.add((raw[0], raw[1] > 128, raw[2] > 128))
        assert key == s[0]
        _widths_hold(bytes(raw), s, e)
        got = by_feature.setdefault(fid, ([], [], []))
        for part, more in zip(got, (s, e, v)):
            part.extend(more)
    assert by_feature
    for fid, (s, e, v) in by_feature.items():
        assert all(p <= q for p, q in zip(s, e)) and all(   # a GC-list (linear check)
            a < b for x in (s, e) for a, b in zip(x, x[1:])), fid
        es, ee, ev = r._txn.read_list(fid)
        assert (es.tolist(), ee.tolist(), ev.tolist()) == (s, e, v)
    return shapes   # (flags, start width packed, length width packed) of the blocks


@pytest.mark.parametrize("version", [1, 2, 3])
def test_golden_databases_decode_by_the_layout(tmp_path, version):
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN / f"golden-v{version}", path)
    with annodb.open(path, readonly=True) as db, db.read() as r:
        assert r._txn.meta("format") == version
        shapes = _check_every_block(r)
        assert {flags for flags, _, _ in shapes} == {0, 2, 3}
        assert any(packed for _, packed, _ in shapes) == (version >= 2)   # "tick"


def test_a_grown_database_decodes_by_the_layout(tmp_path):
    """Batches that append to lists in place, insert into them, annotate with values and
    lengths: every block still follows the layout."""
    rng = np.random.default_rng(11)
    with annodb.open(tmp_path / "db") as db:
        for batch in range(6):
            with db.write() as w:
                w.add_many([(" ".join("tick" if k < 3 else f"w{k}"
                                      for k in rng.integers(0, [8, 60, 400][batch % 3], 300)),
                             f"d{batch}-{i}") for i in range(40)])
            with db.write() as w:
                for k in range(30):
                    p = int(rng.integers(0, 300 * 40 * (batch + 1)))
                    w.annotate("x:", p, p + int(rng.integers(0, [3, 300, 70000][k % 3])),
                               float(k % 4))
        with db.read() as r:
            shapes = _check_every_block(r)
            assert len([fid for fid, _, _ in r._txn.all_blocks()
                        if fid == r._txn.feature_id("tick")]) > 1
    assert {flags for flags, _, _ in shapes} == {0, 2, 3}
    assert {packed for _, packed, _ in shapes} == {True, False}
