"""The block codec on real LMDB files: blocks round-trip every width and flag, full blocks
fill one overflow page each, long words and names are stored, and letting go of mapped
pages while flushing writes the same database."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

import annodb
from annodb import storage
from annodb.storage import layout, postings
from annodb.check import check


def header(buf):
    flags, sw, lw, n, first = layout._HEADER.unpack_from(buf, 0)
    return flags, sw, lw, n, first


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_block_round_trip_start_widths(width):
    gap = {1: 200, 2: 60_000, 4: 4_000_000_000, 8: 5_000_000_000}[width]
    starts = np.array([7, 7 + gap, 8 + gap, 8 + 2 * gap], dtype=np.int64)
    buf = storage.encode_block(starts, starts, np.zeros(4))
    flags, sw, _, n, first = header(buf)
    # 5e9 needs 33 bits: packed (13 bytes) beats 8-byte ints (24)
    assert (sw, n, first) == ({8: 128 + 33}.get(width, width), 4, 7)
    assert flags == storage.FLAG_POINTS | storage.FLAG_ZERO
    s, e, v = storage.decode_block(buf)
    assert s.tolist() == starts.tolist() and e.tolist() == starts.tolist()
    assert v.tolist() == [0.0] * 4


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_block_round_trip_length_widths_and_values(width):
    length = {1: 255, 2: 65_535, 4: 1 << 31, 8: 1 << 40}[width]
    starts = np.array([0, 10, 20], dtype=np.int64)
    ends = starts + np.array([length, length + 1, length + 2])
    values = np.array([1.5, -2.0, 0.0])
    buf = storage.encode_block(starts, ends, values)
    flags, _, lw, n, _ = header(buf)
    assert lw >= width and flags == 0 and n == 3
    s, e, v = storage.decode_block(buf)
    assert (s.tolist(), e.tolist(), v.tolist()) == (starts.tolist(), ends.tolist(),
                                                    values.tolist())


def test_block_flags_points_with_values_and_single_interval():
    starts = np.array([42], dtype=np.int64)
    buf = storage.encode_block(starts, starts, np.array([3.0]))
    flags, _, _, n, first = header(buf)
    assert flags == storage.FLAG_POINTS and (n, first) == (1, 42)
    assert [a.tolist() for a in storage.decode_block(buf)] == [[42], [42], [3.0]]
    ends = np.array([50], dtype=np.int64)
    buf = storage.encode_block(starts, ends, np.zeros(1))
    assert header(buf)[0] == storage.FLAG_ZERO
    assert [a.tolist() for a in storage.decode_block(buf)] == [[42], [50], [0.0]]


def test_block_round_trip_random():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, storage.BLOCK_SIZE + 1))
        starts = np.cumsum(rng.integers(1, 1 << int(rng.integers(1, 40)), n)).astype(np.int64)
        ends = starts + rng.integers(0, 3, n)
        ends = np.maximum.accumulate(ends)   # keep ends strictly increasing
        ends[1:] = np.maximum(ends[1:], ends[:-1] + 1)
        values = rng.normal(size=n) * rng.integers(0, 2)
        s, e, v = storage.decode_block(storage.encode_block(starts, ends, values))
        assert np.array_equal(s, starts) and np.array_equal(e, ends)
        assert np.array_equal(v, values)


def test_full_blocks_fill_one_overflow_page_each(db):
    """A big list's full blocks are cut to one LMDB overflow page (psize - 16 bytes, over
    LMDB's inline limit), also when later batches add to it: each costs exactly one page
    that is never split, and the leaves only hold their small stubs."""
    rng = np.random.default_rng(5)
    for batch in range(4):
        with db.write() as w:   # "common" about every 20th token: ~40,000 postings
            w.add_many([(" ".join("common" if k < 5 else f"x{k}"
                                  for k in rng.integers(0, 100, 300)), f"d{batch}-{i}")
                        for i in range(400)])
    txn = storage.Txn(db._env, write=False)
    try:
        psize = db._env.env.stat()["psize"]
        budget = storage.block_limits(psize)[0]
        assert budget == psize - 16 == txn.block_bytes
        fid = txn.feature_id("common")
        sizes = [len(v) for _, s, v in txn.all_blocks() if _ == fid]
        full = sizes[:-1]
        assert len(full) >= 4 and all(budget - 16 < n <= budget for n in full)
        stat = txn.txn.stat(db._env.dbs["blocks"])
        tails = txn.txn.stat(db._env.dbs["tails"])
        nodemax = (psize - 16) // 2 - 2 - 8  # LMDB's nodemax less the node header
        sizes = [len(v) for _, _, v in txn.all_blocks()]
        assert all(n <= budget for n in sizes)
        with txn.txn.cursor(db=db._env.dbs["blocks"]) as cur:   # (keys of 16 bytes)
            big = sum(1 for v in cur.iternext(keys=False) if len(v) > nodemax - 16)
        with txn.txn.cursor(db=db._env.dbs["tails"]) as cur:    # (keys of 8 bytes)
            big_tails = sum(1 for v in cur.iternext(keys=False) if len(v) > nodemax - 8)
        assert stat["overflow_pages"] == big >= len(full)
        assert tails["overflow_pages"] == big_tails
        assert stat["leaf_pages"] < stat["overflow_pages"]
        s = txn.read_list(fid)[0]
        assert len(s) > 20_000 and (np.diff(s) > 0).all()
    finally:
        txn.abort()
    assert check(db) == []


def test_long_words_and_feature_names_are_stored(tmp_path):
    import annodb
    long_word = "x" * 700
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        a = w.add(f"start {long_word} end", docno="d")
        w.annotate("label:" + "y" * 600, a.start, a.end, 2)
    with db.read() as r:
        assert r.count(long_word) == 1
        assert r.count(f'(^ start "{long_word}")') == 1
        assert list(r.intervals("label:" + "y" * 600)) == [(a.start, a.end, 2.0)]
        assert r.count("label:" + "y" * 599) == 0
    from annodb.check import check
    assert check(db) == []
    with pytest.raises(annodb.AnnodbError, match="docno longer"):
        with db.write() as w:
            w.add("text", docno="z" * 600)
    db.close()


def _memory_of(path, words, monkeypatch, over, every):
    """A database of 60 batches over a vocabulary of 300 words, flushed as an ingest
    flushes (releasing the map's pages every `every` lists once a flush has `over`)."""
    monkeypatch.setattr(postings, "RELEASE_OVER", over)
    monkeypatch.setattr(postings, "RELEASE_EVERY", every)
    rng = random.Random(5)
    db = annodb.open(path)
    for b in range(60):
        with db.write() as w:
            for i in range(20):
                w.add(" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))),
                      docno=f"b{b}d{i}")
    return db


def test_flushes_that_let_go_of_mapped_pages_write_the_same(tmp_path, monkeypatch):
    """Letting go of the map's pages between pieces of a flush (what keeps an ingest's
    resident memory flat) changes nothing that is written or read."""
    words = [f"w{i}" for i in range(300)]
    a = _memory_of(tmp_path / "a", words, monkeypatch, 10**9, 4096)
    b = _memory_of(tmp_path / "b", words, monkeypatch, 2, 3)
    assert b._env.mapped  # (the pieces were released: the map's range was found)
    with a.read() as ra, b.read() as rb:
        for w in words[:60] + ["(^ w1 w2)", '"w3 w4"', "(+ w5 w299)"]:
            assert list(ra.query(w)) == list(rb.query(w)), w
    assert check(a) == [] and check(b) == []


def test_a_stale_map_range_is_never_released(tmp_path):
    """release_mapped_pages checks its remembered range still maps the database file
    before dropping its pages (anything else mapped there would be zeroed)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        w.add("some words here", docno="a")
    keep = bytearray(b"x" * 8192)  # memory of ours: its range stands in for a stale one
    import ctypes
    lo = ctypes.addressof((ctypes.c_char * len(keep)).from_buffer(keep)) // 4096 * 4096
    db._env.mapped = [(lo, lo + 4096)]
    assert storage.release_mapped_pages(db._env)
    assert keep == bytearray(b"x" * 8192)
    assert db._env.mapped and db._env.mapped[0] != (lo, lo + 4096)
    with db.read() as r:
        assert list(r.query("words"))
