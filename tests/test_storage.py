"""Storage and transactions on real LMDB files: the block codec, writes through the API,
visibility, atomicity, two processes, reopening, format versions, and the golden database."""

from __future__ import annotations

import bisect
import contextlib
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import annodb
import naive
from annodb import storage
from annodb.check import check

GOLDEN = Path(__file__).parent / "data" / "golden-v1"


@pytest.fixture
def db(tmp_path):
    database = annodb.open(tmp_path / "s.db", timeout=5)
    yield database
    database.close()


def intervals(db, feature):
    with db.read() as r:
        return list(r.intervals(feature))


# ---------------------------------------------------------------- block codec


def header(buf):
    flags, sw, lw, n, first = storage._HEADER.unpack_from(buf, 0)
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


# ---------------------------------------------------------------- writes through the API


def test_add_annotate_erase_delete(db):
    with db.write() as w:
        a = w.add("The goth rock scene grew out of post-punk.", docno="n1")
        b = w.add({"docid": "n2", "title": "Goth", "text": "Goth rock again", "year": 1982})
        w.annotate("judgment:t1", a.start, a.end, 3)
    assert (a.docno, a.start, a.end) == ("n1", 0, 8)
    assert (b.docno, b.start) == ("n2", 9)
    with db.read() as r:
        assert r.term("goth").starts.tolist() == [1, 9, 10]
        assert r.text(a.start, a.end) == "The goth rock scene grew out of post-punk"
        assert r.text(1, 2) == "goth rock"
        assert list(r.intervals("judgment:t1")) == [(0, 8, 3.0)]
        assert list(r.intervals(":year:")) == [(b.start, b.end, 1982.0)]
        assert r.document("n2").field_text("title") == "Goth"
        assert r.stats().documents == 2 and r.stats().tokens == 13
    with db.write() as w:
        w.erase(2, 3)                               # "rock scene" inside n1
    with db.read() as r:
        assert r.term("rock").starts.tolist() == [11]
        assert r.text(0, 4) == "The goth grew"
        assert r.has("n1")                            # only part of it was erased
    with db.write() as w:
        assert w.delete("n1") is True
        assert w.delete("n1") is False
    with db.read() as r:
        assert not r.has("n1") and r.term("goth").starts.tolist() == [9, 10]
        assert list(r.intervals("judgment:t1")) == []
        assert r.stats().documents == 1 and r.stats().tokens == 4
        with pytest.raises(annodb.NotFoundError):
            r.document("n1")
    assert check(db) == []


def test_docno_conflicts(db):
    with db.write() as w:
        w.add("one", docno="x")
    with pytest.raises(annodb.AnnodbError, match="already exists"):
        with db.write() as w:
            w.add("two", docno="x")
    with db.write() as w:
        w.add("three", docno="x", replace=True)
    with db.read() as r:
        assert r.document("x").text == "three" and r.stats().documents == 1
    assert check(db) == []


def test_nesting_keeps_the_inner_interval(db):
    with db.write() as w:
        w.annotate("f", 10, 20)
        w.annotate("f", 12, 14)     # inside: replaces the outer one
        w.annotate("f", 30, 40)
    assert intervals(db, "f") == [(12, 14, 0.0), (30, 40, 0.0)]
    with db.write() as w:
        w.annotate("f", 25, 50)     # contains 30..40: dropped
        w.annotate("f", 31, 33)     # inside 30..40: replaces it
    assert intervals(db, "f") == [(12, 14, 0.0), (31, 33, 0.0)]
    assert check(db) == []


def test_duplicate_interval_replaces_the_value(db):
    with db.write() as w:
        w.annotate("v", 5, 9, 1.0)
        w.annotate("v", 5, 9, 2.0)
    assert intervals(db, "v") == [(5, 9, 2.0)]
    with db.write() as w:
        w.annotate("v", 5, 9, 7.0)
    assert intervals(db, "v") == [(5, 9, 7.0)]


def test_bad_annotations_are_refused(db):
    with db.write() as w:
        for args in (("f", 5, 4), ("f", -1, 3), ("", 1, 2)):
            with pytest.raises(annodb.AnnodbError):
                w.annotate(*args)


def reference_normalize(triples):
    """naive.normalize, made fast for many short intervals: an interval can only contain
    intervals that start inside it, so only those are compared."""
    latest = {}
    for p, q, v in triples:
        latest[(p, q)] = v
    pool = sorted(latest)
    starts = [p for p, _ in pool]
    kept = []
    for x in pool:
        lo, hi = bisect.bisect_left(starts, x[0]), bisect.bisect_right(starts, x[1])
        if not any(y != x and naive._inside(y, x) for y in pool[lo:hi]):
            kept.append((x[0], x[1], latest[x]))
    return kept


def test_reference_normalize_agrees_with_naive():
    rng = random.Random(3)
    triples = [(p, p + rng.choice((0, 1, 3)), float(rng.randrange(3)))
               for p in (rng.randrange(60) for _ in range(150))]
    assert reference_normalize(triples) == naive.normalize(triples)


def test_many_transactions_match_the_reference(db):
    """Random annotations over several transactions and many blocks equal naive.normalize."""
    rng = random.Random(11)
    written = []
    for _ in range(6):
        with db.write() as w:
            for _ in range(1500):
                p = rng.randrange(0, 20_000)
                q = p + rng.choice((0, 0, 1, 5, 40))
                v = float(rng.randrange(0, 3))
                w.annotate("r", p, q, v)
                written.append((p, q, v))
        assert intervals(db, "r") == reference_normalize(written)
    with db.read() as r:
        # values take 8 bytes an interval: a block holds at most BLOCK_BYTES / 8 of them
        assert len(r.intervals("r")) > 4 * storage.BLOCK_BYTES // 8
    assert check(db) == []


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


# ---------------------------------------------------------------- transactions


def test_invisible_until_commit(db):
    with db.write() as w:
        w.add("first", docno="a")
        with db.read() as r:
            assert not r.has("a") and r.stats().documents == 0
        assert w.has("a")                      # a writer sees its own work
        assert w.term("first").starts.tolist() == [0]
    with db.read() as r:
        assert r.has("a")


def test_abort_on_exception_leaves_nothing(db):
    with db.write() as w:
        w.add("kept", docno="k")
    with pytest.raises(RuntimeError):
        with db.write() as w:
            w.add("lost words", docno="lost")
            w.annotate("label", 0, 0, 1)
            w.erase(0, 0)
            raise RuntimeError("boom")
    with db.read() as r:
        assert not r.has("lost") and r.has("k")
        assert len(r.term("lost")) == 0 and len(r.intervals("label")) == 0
        assert len(r.erased()[0]) == 0
        assert r.stats().addresses == 1
    with db.write() as w:                      # the next writer starts where commit left
        assert w.add("next", docno="n").start == 1
    assert check(db) == []


def test_snapshot_keeps_its_state_while_a_writer_commits(db):
    with db.write() as w:
        w.add("old text", docno="old")
    with db.read() as before:
        with db.write() as w:
            w.add("new text", docno="new")
            w.delete("old")
        assert before.has("old") and not before.has("new")
        assert before.term("text").starts.tolist() == [1]
        assert before.text(0, 1) == "old text"
    with db.read() as after:
        assert after.has("new") and not after.has("old")


def test_snapshots_share_lookups_only_with_snapshots_of_their_state(db):
    """A snapshot's lookups (feature ids, list states) are shared with the process's later
    snapshots of the same committed state (ListCache.facts), never across a commit: in
    either order, a snapshot sees its own state's words."""
    with db.write() as w:
        w.add("old text", docno="old")
    before = db.read()
    assert (before.count("text"), before.count("later")) == (1, 0)   # state 1 looked up
    with db.write() as w:
        w.add("new text later", docno="new")
    with db.read() as after:                                           # state 2 replaces it
        assert (after.count("text"), after.count("later"), after.count("new")) == (2, 1, 1)
    assert (before.count("text"), before.count("later")) == (1, 0)
    assert before.count("new") == 0     # looked up first by the older snapshot: its own
    with db.read() as again:
        assert (again.count("new"), again.count("text")) == (1, 2)
    before.close()


def test_second_writer_in_this_process_times_out(db):
    import threading
    with db.write():
        started = time.monotonic()
        found = []

        def other():
            try:
                db.write(timeout=0.2)
            except annodb.WriterBusyError as err:
                found.append(str(err))
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert "another writer in this process held the database for 0.2s; retry" in found[0]
        assert time.monotonic() - started >= 0.2
    with db.write(timeout=0.2) as w:            # free again after commit
        w.add("x", docno="x")


def test_reopening_keeps_everything(tmp_path):
    path = tmp_path / "r.db"
    with annodb.open(path) as db, db.write() as w:
        w.add("persistent words", docno="p")
        w.annotate("tag", 0, 1, 4)
    with annodb.open(path) as db, db.read() as r:
        assert r.document("p").text == "persistent words"
        assert list(r.intervals("tag")) == [(0, 1, 4.0)]
    with annodb.open(path, readonly=True) as db:
        with db.read() as r:
            assert r.has("p")
        with pytest.raises(annodb.StorageError, match="read-only"):
            db.write()


def test_open_refuses_missing_and_non_databases(tmp_path):
    with pytest.raises(annodb.StorageError, match="no annodb database"):
        annodb.open(tmp_path / "missing.db", readonly=True)
    with pytest.raises(annodb.StorageError, match="no annodb database"):
        annodb.open(tmp_path / "missing.db", create=False)
    plain = tmp_path / "file.db"
    plain.write_text("not a database")
    with pytest.raises(annodb.StorageError):
        annodb.open(plain)


@pytest.mark.parametrize("key, message", [("format", "written by annodb format 99"),
                                          ("tokenizer", "tokenizer 99")])
def test_other_format_versions_are_refused(tmp_path, key, message):
    path = tmp_path / "v.db"
    with annodb.open(path) as db:
        txn = storage.Txn(db._env, write=True)
        txn.set_meta(key, 99)
        txn.commit()
    with pytest.raises(annodb.FormatVersionError, match=message):
        annodb.open(path)


# ---------------------------------------------------------------- two processes

CHILD_PREAMBLE = "import sys, time, annodb\n"


def child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD_PREAMBLE + textwrap.dedent(code)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_second_writer_in_another_process_gets_writer_busy(db):
    # The child opens the database first: opening a writable environment itself waits for
    # LMDB's writer mutex (see the note in the report), which is not what this test is about.
    proc = child(f"""
        db = annodb.open({db.path!r})
        print("open", flush=True)
        sys.stdin.readline()                     # the parent is writing now
        started = time.monotonic()
        try:
            with db.write(timeout=0.3) as w:
                pass
            print("acquired", flush=True)
        except annodb.WriterBusyError as err:
            print("busy", time.monotonic() - started, err, flush=True)
        sys.stdin.readline()                     # the parent has committed
        with db.write(timeout=5) as w:
            w.add("child text", docno="child")
        print("ok", flush=True)
    """)
    try:
        assert proc.stdout.readline().strip() == "open", proc.stderr.read()
        with db.write() as w:
            w.add("held by the parent", docno="held")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            busy = proc.stdout.readline()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert busy.startswith("busy"), err
    assert float(busy.split()[1]) >= 0.3
    assert "another process" in busy
    assert out.strip() == "ok", err
    with db.read() as r:
        assert r.has("child") and r.has("held")


def test_reader_process_keeps_its_snapshot_while_the_writer_commits(db):
    with db.write() as w:
        w.add("before the commit", docno="one")
    proc = child(f"""
        db = annodb.open({db.path!r}, readonly=True)
        with db.read() as r:
            print("holding", r.stats().documents, flush=True)
            sys.stdin.readline()                 # the parent writes meanwhile
            print("same", r.stats().documents, r.has("two"), len(r.term("after")), flush=True)
        with db.read() as r:
            print("fresh", r.stats().documents, r.has("two"), len(r.term("after")), flush=True)
    """)
    try:
        assert proc.stdout.readline().split() == ["holding", "1"], proc.stderr.read()
        with db.write(timeout=5) as w:           # readers never block the writer
            w.add("after the commit", docno="two")
            w.delete("one")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert out.splitlines() == ["same 1 False 0", "fresh 1 True 1"], err


# ---------------------------------------------------------------- the golden database


def test_golden_database_still_opens(tmp_path):
    """tests/data/golden-v1 was written by tests/make_golden.py with format 1; this annodb
    must read it unchanged (or refuse it clearly after a format change: then bump the
    version, keep this directory, and add golden-v2)."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN, path)
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            assert [d.docno for d in r.documents()] == ["intro", "g2", "g3"]
            intro = r.document("intro")
            assert intro.text == "The golden database keeps old formats honest."
            assert (intro.start, intro.end, intro.tokens) == (0, 6, 7)
            assert r.document("g3").field_text("title") == "Third"
            assert r.document("g2").meta == {}
            assert r.term("golden").starts.tolist() == [1, 9]
            assert r.term("erased").starts.tolist() == []      # erased inside g3
            assert r.term("hidden").starts.tolist() == []      # g4 was deleted
            assert list(r.intervals("judgment:t1")) == [(0, 6, 3.0)]
            assert list(r.intervals(":chapter:")) == [(7, 11, 2.0), (12, 18, 3.0)]
            assert list(r.intervals(":")) == [(0, 6, 0.0), (7, 11, 0.0), (12, 18, 0.0)]
            assert list(r.intervals("title:")) == [(7, 7, 0.0), (12, 12, 0.0)]
            assert r.text(12, 18) == "Third\nA third document, partly words"
            assert r.erased()[0].tolist() == [17, 19] and r.erased()[1].tolist() == [17, 20]
            stats = r.stats()
            assert (stats.documents, stats.tokens, stats.addresses, stats.features) == (
                3, 19, 21, 24)


@contextlib.contextmanager
def golden_snapshot(tmp_path, version: int):
    """A read snapshot of a copy of tests/data/golden-v<version>, checked clean and of
    that format."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN.parent / f"golden-v{version}", path)
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == version
            yield r


def test_golden_v2_still_opens(tmp_path):
    """tests/data/golden-v2 (tests/make_golden.py 2): format 2's document groups (a long
    document's group with overflow pages) and a bit-packed block on an overflow page."""
    with golden_snapshot(tmp_path, 2) as r:
        assert [d.docno for d in r.documents()] == (
            ["intro", "g2", "g3"] + [f"psalm{i}" for i in range(40)] + ["long", "tail"])
        assert r.document("intro").text == "The golden database keeps old formats honest."
        assert r.term("erased").starts.tolist() == []
        assert r.document("psalm39").text == "verse 39 of the golden psalm"
        assert len(r.term("psalm")) == 40 and r.document("tail").text == "after the long one"
        long = r.document("long")
        want = [long.start + i for i in range(40000) if i * 7919 % 301 < 60]
        assert r.term("tick").starts.tolist() == want
        fid = r._txn.feature_id("tick")
        (_, _, block), = [b for b in r._txn.all_blocks() if b[0] == fid]
        assert block[1] & 128 and len(block) > 2014        # packed, on an overflow page
        kinds = {bytes(v[:1]) for _, v in r._txn.docs_entries()}
        assert kinds == {b"\x02"}                          # groups only
        assert r.count("(>> : (^ golden psalm))") == 40


def test_golden_v3_still_opens(tmp_path):
    """tests/data/golden-v3 (tests/make_golden.py 3): format 3's relative document groups,
    one of them keyed where its deleted first document was."""
    with golden_snapshot(tmp_path, 3) as r:
        assert [d.docno for d in r.documents()] == (
            ["intro", "g2", "g3"] + [f"psalm{i}" for i in range(1, 40)] + ["long", "tail"])
        assert r.document("intro").text == "The golden database keeps old formats honest."
        assert r.document("g3").field_text("title") == "Third"
        assert list(r.intervals(":chapter:")) == [(7, 11, 2.0), (12, 18, 3.0)]
        psalm1 = r.document("psalm1")
        assert (psalm1.start, psalm1.end) == (27, 32)
        assert [(f.start, f.end) for f in psalm1.fields] == [(27, 32)]
        assert r.document_at(26) is None and r.document_at(30).docno == "psalm1"
        assert r.text(27, 32) == "verse 1 of the golden psalm"
        long = r.document("long")
        want = [long.start + i for i in range(40000) if i * 7919 % 301 < 60]
        assert r.term("tick").starts.tolist() == want
        kinds = {bytes(v[:1]) for _, v in r._txn.docs_entries()}
        assert kinds <= {b"\x03", b"\x04"} and b"\x03" in kinds
        assert r.count("(>> : (^ golden psalm))") == 39


def test_golden_v4_still_opens(tmp_path):
    """tests/data/golden-v4 (tests/make_golden.py 4): format 4's tails, each word's df
    and bound in its counts value, a note kept apart and a sparse-vector field."""
    with golden_snapshot(tmp_path, 4) as r:
        assert [d.docno for d in r.documents()][-4:] == ["tail", "ticks", "n1", "s1"]
        assert r.document_count() == 46 and r.document("n1").container == "note:"
        txn = r._txn
        assert txn.txn.stat(txn.dbs["tails"])["entries"] > 0
        assert r.lists.statistics("tick") == (2, 0.0)       # df: "long" and "ticks"
        assert r.lists.statistics("golden") == (41, 0.0)
        long, ticks = r.document("long"), r.document("ticks")
        want = [long.start + i for i in range(40000) if i * 7919 % 301 < 60]
        assert r.term("tick").starts.tolist() == want + list(range(ticks.start,
                                                                   ticks.end, 2))
        assert [h.docno for h in r.search("golden", container="note:")] == ["n1"]
        assert "n1" not in [h.docno for h in r.search_text("golden note", k=50)]
        assert [h.docno for h in r.search_text("gold", rank="sparse")] == ["s1"]
        assert txn.meta("sparse_fields") == ["splade"]


def test_golden_v2_takes_writes_and_deletions(tmp_path):
    """A format-2 database takes format-3 writes; deleting from one of its groups rewrites
    it as it was (tag 2, absolute addresses)."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN.parent / "golden-v2", path)
    with annodb.open(path) as db:
        with db.write() as w:
            w.delete("psalm5")
            w.add_many([(f"golden words number {i}", f"new{i}") for i in range(300)])
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == storage.FORMAT_VERSION
            kinds = [bytes(v[:1]) for _, v in r._txn.docs_entries()]
            assert b"\x02" in kinds and b"\x03" in kinds
            assert not r.has("psalm5") and r.document("psalm6").text == \
                "verse 6 of the golden psalm"
            assert r.document("new299").text == "golden words number 299"
            assert r.count("(>> : (^ golden psalm))") == 39


def test_golden_v1_takes_writes_and_becomes_the_current_format(tmp_path):
    """A format-1 database opens for writing; what is written is format 3, the meta says so
    at commit, and the old content still reads beside the new."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN, path)
    with annodb.open(path) as db:
        with db.read() as r:
            assert r._txn.meta("format") == 1
        with db.write() as w:
            w.add_many([(f"golden words number {i}", f"new{i}") for i in range(3000)])
            w.annotate("judgment:t1", 7, 11, 1)
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == storage.FORMAT_VERSION
            assert r.document("intro").text == "The golden database keeps old formats honest."
            assert r.document("new2999").text == "golden words number 2999"
            golden = r.term("golden").starts.tolist()
            assert golden[:2] == [1, 9] and len(golden) == 3002
            assert list(r.intervals("judgment:t1")) == [(0, 6, 3.0), (7, 11, 1.0)]


# ---------------------------------------------------------------- check finds damage


def _key(fid: int, start: int) -> bytes:
    return storage.u64(fid) + storage.u64(start)


def _points(*addresses) -> bytes:
    a = np.array(addresses, dtype=np.int64)
    return storage.encode_block(a, a, np.zeros(len(a)))


def _damage_truncated_block(txn, fid):
    txn.txn.put(_key(fid, 0), _points(0, 1)[:-1], db=txn.dbs["blocks"])


def _damage_wrong_key(txn, fid):
    txn.txn.put(_key(fid, 5), _points(0), db=txn.dbs["blocks"])


def _damage_nested_across_blocks(txn, fid):
    txn.txn.put(_key(fid, 0), storage.encode_block(np.array([0]), np.array([10]), np.zeros(1)),
                db=txn.dbs["blocks"])
    txn.txn.put(_key(fid, 2), _points(2), db=txn.dbs["blocks"])


def _damage_nested_after_a_wrong_key(txn, fid):
    """The kernel stops at the first block (its key is wrong); the check of the second
    needs where the first left the list."""
    txn.txn.put(_key(fid, 1), storage.encode_block(np.array([0]), np.array([10]), np.zeros(1)),
                db=txn.dbs["blocks"])
    txn.txn.put(_key(fid, 2), _points(2), db=txn.dbs["blocks"])


def _damage_unsorted_block(txn, fid):
    raw = bytearray(_points(0, 3, 5))   # deltas 3, 2: make the last one 0 (a repeated start)
    raw[-1] = 0
    txn.txn.put(_key(fid, 0), bytes(raw), db=txn.dbs["blocks"])


def _damage_names(txn, fid):
    txn.txn.put(storage.u64(999), b"ghost", db=txn.dbs["names"])


def _damage_count(txn, fid):
    txn.set_meta("documents", 7)


def _damage_erased(txn, fid):
    txn.txn.put(storage.u64(5), storage.u64(10), db=txn.dbs["erased"])
    txn.txn.put(storage.u64(8), storage.u64(12), db=txn.dbs["erased"])


def _damage_document_list(txn, fid):
    container = txn.feature_id(":")
    txn.txn.delete(_key(container, 0), db=txn.dbs["blocks"])
    txn.txn.put(_key(container, 0), storage.encode_block(
        np.array([0]), np.array([1]), np.zeros(1)), db=txn.dbs["blocks"])


def _damage_docno_map(txn, fid):
    txn.txn.put(b"a", storage.u64(3), db=txn.dbs["docnos"])


def _damage_group(txn, fid):
    docs = txn.dbs["docs"]
    assert txn.txn.get(storage.u64(0), db=docs)[0] == storage.TAG_REL_GROUP   # "a" and "b"
    txn.txn.put(storage.u64(0), b"\x03" + b"not zstd", db=docs)


def _damage_group_key(txn, fid):
    docs = txn.dbs["docs"]
    value = txn.txn.get(storage.u64(0), db=docs)
    txn.txn.delete(storage.u64(0), db=docs)
    txn.txn.put(storage.u64(1), value, db=docs)


@pytest.mark.parametrize("damage, expected", [
    (_damage_truncated_block, "header says"),
    (_damage_wrong_key, "its first start is 0"),
    (_damage_nested_across_blocks, "nested or out of order"),
    (_damage_nested_after_a_wrong_key, "block at 2: first end 2 is not after the previous "
                                       "block's last end 10"),
    (_damage_unsorted_block, "do not strictly increase"),
    (_damage_names, "names: id 999 -> 'ghost'"),
    (_damage_count, "'documents' is 7"),
    (_damage_erased, "erased: ranges overlap"),
    (_damage_document_list, "has no ':' interval"),
    (_damage_docno_map, "docnos: 'a' -> 3"),
    (_damage_group, "the group at 0 does not decode"),
    (_damage_group_key, "docnos: 'a' -> 0, but the document starts at 1"),
])
def test_check_finds_damage(db, damage, expected):
    with db.write() as w:
        w.add("alpha beta gamma", docno="a")
        w.add("delta", docno="b")
        w.annotate("probe", 0, 0)
    assert check(db) == []
    txn = storage.Txn(db._env, write=True)
    fid = txn.feature_id("probe")
    txn.txn.delete(_key(fid, 0), db=txn.dbs["blocks"])
    damage(txn, fid)
    txn.commit()
    problems = check(db)
    assert any(expected in p for p in problems), problems


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


def test_annotations_past_the_content_reserve_their_addresses(tmp_path):
    import annodb
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        a = w.add("one two three", docno="d")
        w.annotate("x:", a.start, a.end + 5)
        b = w.add("four", docno="e")
        assert b.start == a.end + 6
        with pytest.raises(annodb.AnnodbError, match="NaN"):
            w.annotate("x:", a.start, a.end, float("nan"))
    db.close()


def test_opening_while_another_process_writes_waits_at_most_the_timeout(tmp_path):
    import annodb
    path = tmp_path / "db"
    db = annodb.open(path)
    with db.write() as w:
        w.add("hello", docno="d")
        code = textwrap.dedent(f"""
            import time, annodb
            t = time.monotonic()
            try:
                annodb.open({str(path)!r}, timeout=0.3)
                print("opened")
            except annodb.WriterBusyError:
                print("busy", round(time.monotonic() - t, 1))
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
    assert out.stdout.startswith("busy"), out.stdout + out.stderr
    assert float(out.stdout.split()[1]) < 15      # its own timeout, not the default 30 s
    reader = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import annodb
        db = annodb.open({str(path)!r}, readonly=True)
        with db.read() as r:
            print(r.count("hello"))
    """)], capture_output=True, text=True, timeout=60)
    assert reader.stdout.strip() == "1", reader.stderr
    db.close()


def test_notes_link_to_their_document(tmp_path):
    import annodb
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        w.add("goth rock and society", docno="a")
        b = w.add("politics of punk", docno="b")
        n = w.note("b", "punk politics answer the question", features=("note:", "note:t1"),
                   note_docno="note:t1:b")
    with db.read() as r:
        assert [h.docno for h in r.search("(>> : (@ note:t1))")] == ["b"]
        # notes are apart from the collection: found by searching their container
        assert [h.docno for h in r.search("(<< question note:)")] == []
        assert [h.docno for h in r.search("question", container="note:")] == ["note:t1:b"]
        assert list(r.intervals("note:t1")) == [(n.start, n.end, float(b.start))]
    with db.write() as w:  # a second note with the same docno replaces the first
        w.note("b", "revised", features=("note:t1",), note_docno="note:t1:b")
    with db.read() as r:
        assert r.count("question") == 0 and r.count("revised") == 1
        assert len(r.intervals("note:t1")) == 1
    db.close()


def test_add_many_is_add_item_by_item(tmp_path):
    import annodb
    items = [("alpha beta", "a"), ({"id": "r", "title": "Gamma", "n": 3}, None), ("", "empty"),
             ("delta  epsilon", None), ("zeta", None)]
    one, many = annodb.open(tmp_path / "one"), annodb.open(tmp_path / "many")
    with one.write() as w:
        added_one = [w.add(c, docno=d) for c, d in items]
    with many.write() as w:
        added_many = w.add_many(items)
    assert added_one == added_many
    assert len({a.docno for a in added_many}) == len(items)
    with one.read() as r1, many.read() as r2:
        for a in added_one:
            assert r1.document(a.docno) == r2.document(a.docno)
        for feature in ("alpha", ":", "title:", ":title:", ":n:", "gamma", "zeta"):
            assert list(r1.intervals(feature)) == list(r2.intervals(feature))
    with many.write() as w:  # a duplicate docno: nothing of the call is added
        with pytest.raises(annodb.AnnodbError, match="already exists"):
            w.add_many([("new", "fresh"), ("again", "a")])
        assert not w.has("fresh")
    one.close()
    many.close()


def test_a_busy_writer_does_not_starve_another(tmp_path):
    """A process committing back to back, with no pause between its transactions, until
    told to stop (at most 120 s): another writer still gets its turns, each within its
    timeout (a generous 30 s: starved, it would wait until the busy one stops)."""
    import annodb
    path = tmp_path / "db"
    stop = tmp_path / "stop"
    annodb.open(path).close()
    code = textwrap.dedent(f"""
        import os, time, annodb
        db = annodb.open({str(path)!r})
        end = time.monotonic() + 120
        i = 0
        while time.monotonic() < end and not os.path.exists({str(stop)!r}):
            with db.write() as w:
                w.add("busy " * 200, docno=f"b{{i}}")
                time.sleep(0.02)
            i += 1
            if i == 3:
                print("go", flush=True)
        print(i, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "go"
        for turn in range(3):
            db = annodb.open(path, timeout=30)          # opening needs the writer slot too
            with db.write(timeout=30) as w:
                w.add("mine", docno=f"m{turn}")
            db.close()
        stop.touch()
        assert int(proc.stdout.readline()) > 3        # it was busy all along
    finally:
        stop.touch()
        proc.wait(timeout=60)
        proc.stdout.close()


def test_an_append_out_of_order_is_an_error_not_a_silent_skip(tmp_path):
    """LMDB's append mode skips a key that is not past the last one without an error:
    storage turns that into a StorageError, so nothing is lost silently."""
    with annodb.open(tmp_path / "a.db") as db:
        with db.write() as w:
            w.add("first words", docno="b")
        txn = storage.Txn(db._env, write=True)
        try:
            with pytest.raises(annodb.StorageError, match="not past the last one"):
                with txn.txn.cursor(db=txn.dbs["docnos"]) as cur:
                    storage._append_all(cur, [(b"a", storage.u64(5))])
        finally:
            txn.abort()
        with db.write() as w:      # docnos before and after the last: both kept
            w.add_many([("x", "a"), ("y", "c"), ("z", "d")])
        with db.read() as r:
            assert [d.docno for d in r.documents()] == ["b", "a", "c", "d"]
            assert all(r.has(d) for d in "abcd")
        assert check(db) == []


# ---------------------------------------------------------------- the address range

def test_a_huge_annotation_is_refused_and_memory_keeps_working(tmp_path):
    """Issue 14's reproduction: an annotation at 2**60 was stored as (2**60, 2**60) (through
    float64) and every later address was rounded, so Memory's labels stopped matching."""
    path = tmp_path / "m.db"
    with annodb.open(path) as db:
        with db.write() as w:
            w.add("hello world", docno="d1")
            with pytest.raises(annodb.AnnodbError, match=r"past the last address annodb "
                               r"stores .*2\*\*53 - 1"):
                w.annotate("big:", 2**60 + 3, 2**60 + 5, 1)
        with db.read() as r:
            assert r.count("big:") == 0 and r.address_space() == 2
        with db.write() as w:
            for q in (storage.MAX_ADDRESS, 2**63, 2**64 + 1):
                with pytest.raises(annodb.AnnodbError, match="past the last address"):
                    w.erase(5, q)
    memory = annodb.Memory(path)
    memory.remember("alice likes tea", user="alice")
    assert [m.text for m in memory.recall("tea", where={"user": "alice"})] == \
        ["alice likes tea"]
    memory.close()
    with annodb.open(path) as db:
        assert check(db) == []


def test_addresses_up_to_the_limit_are_exact_links_too(tmp_path):
    top = storage.MAX_ADDRESS - 1
    with annodb.open(tmp_path / "a.db") as db:
        with db.write() as w:
            w.annotate("far:", top - 8, top - 6, 2)      # reserves everything below top - 5
            target = w.add("the far document", docno="far")
            assert (target.start, target.end) == (top - 5, top - 3)
            w.note("far", "a note", features=("note:",), note_docno="n")  # ends at top
            with pytest.raises(annodb.AnnodbError, match="past the last address"):
                w.add("one more", docno="x")            # would need top + 1
            w.annotate("edge:", top, top, 1)
            with pytest.raises(annodb.AnnodbError, match="past the last address"):
                w.annotate("edge:", top, top + 1, 1)
        with db.read() as r:
            assert list(r.intervals("far:")) == [(top - 8, top - 6, 2.0)]
            assert list(r.intervals("edge:")) == [(top, top, 1.0)]
            assert [h.docno for h in r.search("(>> : (@ note:))")] == ["far"]
            assert r.document_at(top - 4).docno == "far"
            assert r.document_at(2**70) is None and r.document_at(-3) is None
            assert r.text(-5, 2**70).split("\n")[0] == "the far document"
        assert check(db) == []


def test_check_reports_addresses_past_the_range(db):
    with db.write() as w:
        w.add("some words", docno="a")
    txn = storage.Txn(db._env, write=True)
    txn.set_meta("next_address", 2**60)
    fid = txn.feature_id(":")
    txn.txn.put(_key(fid, 2**60), storage.encode_block(
        np.array([2**60]), np.array([2**60 + 2]), np.zeros(1)), db=txn.dbs["blocks"])
    txn.txn.put(storage.u64(2**61), storage.u64(2**61 + 1), db=txn.dbs["erased"])
    txn.commit()
    found = "\n".join(check(db))
    assert "'next_address' is 1,152,921,504,606,846,976, past the address range" in found
    assert "ends at 1,152,921,504,606,846,978, past the address range" in found
    assert "erased: a range ends at 2,305,843,009,213,693,953, past the address range" in found


# ---------------------------------------------------------------- writer lifecycle

@pytest.mark.parametrize("adds", [0, 1])
def test_a_dropped_writer_is_aborted_warned_and_releases_its_locks(tmp_path, adds):
    path = tmp_path / "d.db"
    with annodb.open(path) as db:
        w = db.write()
        for _ in range(adds):
            w.add("never committed", docno="lost")
        with pytest.warns(annodb.AbandonedWriteWarning, match="dropped without commit"):
            del w
        started = time.monotonic()
        with db.write(timeout=2) as w:              # this process: the thread lock is free
            w.add("kept", docno="kept")
        other = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import annodb
            with annodb.open({str(path)!r}, timeout=2) as db, db.write() as w:
                w.add("from another process", docno="other")
        """)], capture_output=True, text=True, timeout=60)  # the flock is free too
        assert other.returncode == 0, other.stderr
        assert time.monotonic() - started < 30
        with db.read() as r:
            assert not r.has("lost") and r.has("kept") and r.has("other")


def test_a_nested_write_in_the_same_thread_raises_at_once(db):
    with db.write() as w:
        w.add("outer", docno="o")
        started = time.monotonic()
        with pytest.raises(annodb.StorageError, match="already open in this thread"):
            db.write(timeout=30)
        assert time.monotonic() - started < 5
    with db.read() as r:
        assert r.has("o")
    with db.write(timeout=1) as w:   # nothing was left held
        w.add("next", docno="n")


def test_writer_busy_names_the_timeout_it_was_given(db):
    import fcntl
    fd = os.open(os.path.join(db._env.path, "writer.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)            # as another process's writer would
        with pytest.raises(annodb.WriterBusyError) as err:
            db.write(timeout=1)
        assert "timeout (1s)" in str(err.value), str(err.value)
        assert storage.seconds(4.99999) == "5s" and storage.seconds(0.25) == "0.25s"
    finally:
        os.close(fd)


# ---------------------------------------------------------------- a reader who may not write

def _as_nobody(tmp: str):
    """(command prefix, subprocess keywords) that run a child as the user nobody, or None
    where this process cannot switch users. setpriv drops root only at the exec (this
    interpreter may live where nobody cannot reach, as under /root), and numba's cache is
    copied where nobody may use it (numba needs a writable cache directory to load it)."""
    import hashlib
    import pwd
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        return None
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return None
    kernels = Path(annodb.__file__).parent / "kernels"
    cache = Path(tmp) / "numba-cache"
    where = cache / ("kernels_" + hashlib.sha1(str(kernels).encode()).hexdigest())
    shutil.copytree(kernels / "__pycache__", where, ignore=shutil.ignore_patterns("*.pyc"))
    for path in [cache, *cache.rglob("*")]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), HOME=tmp)
    return ([setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"],
            dict(env=env, cwd=tmp))


def test_a_reader_who_may_not_write_lock_mdb_can_query(tmp_path):
    """Another user's database (files 0644): the reader cannot take a slot in lock.mdb, so
    it reads without it (MDB_NOLOCK), holding a shared flock on writer.lock per snapshot, so
    it waits for a writer and no writer runs while it reads."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="annodb-ro-")      # (tmp_path's parents are 0700)
    try:
        os.chmod(tmp, 0o755)
        found = _as_nobody(tmp)
        if found is None:
            pytest.skip("needs root and setpriv to run a reader as the user nobody")
        prefix, nobody = found
        path = os.path.join(tmp, "ro.db")
        with annodb.open(path) as db, db.write() as w:
            w.add("light was made on the first day", docno="a")
        cli = prefix + [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()"]
        out = subprocess.run(cli + ["query", "--db", path, "--json", "light"],
                             capture_output=True, text=True, timeout=300, **nobody)
        assert out.returncode == 0, out.stderr
        assert '"a"' in out.stdout
        code = textwrap.dedent(f"""
            import sys, time, annodb
            db = annodb.open({path!r}, readonly=True, timeout=0.5)
            print("open", flush=True)
            sys.stdin.readline()                       # a writer is writing now
            try:
                db.read()
            except annodb.WriterBusyError as err:
                print("busy:", err, flush=True)
            sys.stdin.readline()                       # the writer has committed
            with db.read() as r:
                print(r.count("light"), r.count("second"), flush=True)
                sys.stdin.readline()                   # a writer tries now, and must wait
                time.sleep(0.5)
                print(r.count("second"), flush=True)
        """)
        reader = subprocess.Popen(prefix + [sys.executable, "-c", code], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  **nobody)
        assert reader.stdout.readline() == "open\n", reader.stderr.read()
        with annodb.open(path) as db:
            with db.write() as w:                      # the reader waits, then gives up
                w.add("light again on the second day", docno="b")
                reader.stdin.write("\n")
                reader.stdin.flush()
                busy = reader.stdout.readline()
            reader.stdin.write("\n")
            reader.stdin.flush()
            assert reader.stdout.readline().split() == ["2", "1"], reader.stderr.read()
            reader.stdin.write("\n")
            reader.stdin.flush()
            with pytest.raises(annodb.WriterBusyError):
                db.write(timeout=0.2)                  # the reader's snapshot holds it off
            out, err = reader.communicate(timeout=60)
            assert out.split() == ["1"], err
            with db.write(timeout=5) as w:             # free once the snapshot ended
                w.add("third", docno="c")
        assert busy.startswith("busy:") and "may not write lock.mdb" in busy, busy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_damage_met_while_reading_is_an_error_and_stops_writes(db):
    """Values LMDB hands over intact but that do not decode (a block whose header claims
    more than it holds, a document that is not msgpack): DamagedError, never a read past
    the block; after it, no write transaction begins in the process."""
    with db.write() as w:
        w.add("goth rock scene", docno="a")
    txn = storage.Txn(db._env, write=True)
    bad_block = bytes([storage.FLAG_POINTS | storage.FLAG_ZERO, 1, 1, 0]) + \
        (1000).to_bytes(4, "little") + bytes(8) + b"\x01\x01"
    txn.txn.put(_key(txn.feature_id("goth"), 0), bad_block, db=txn.dbs["blocks"])
    txn.txn.put(storage.u64(0), b"\x04\xc1 not msgpack", db=txn.dbs["docs"])
    txn.commit()
    with db.read() as r:
        with pytest.raises(annodb.DamagedError, match="the database is damaged: .*block"):
            r.count("goth")
        with pytest.raises(annodb.DamagedError, match="annodb check --db"):
            r.document("a")
        assert r.count("rock") == 1                      # what is intact still reads
    with pytest.raises(annodb.DamagedError, match="nothing is written into a damaged"):
        db.write()
    problems = check(db)
    assert any("'goth'" in p for p in problems) and any("docs:" in p for p in problems)


def _memory_of(path, words, monkeypatch, over, every):
    """A database of 60 batches over a vocabulary of 300 words, flushed as an ingest
    flushes (releasing the map's pages every `every` lists once a flush has `over`)."""
    monkeypatch.setattr(storage, "RELEASE_OVER", over)
    monkeypatch.setattr(storage, "RELEASE_EVERY", every)
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


def test_check_reports_one_damaged_block_among_thousands_and_nothing_else(db):
    """check looks at blocks in batches (kernels/checking.py) and says in full what it
    finds at the one it stops at: after that block it goes on where it was, so the blocks
    after it, in its list and in the others, and the lists' counts raise nothing."""
    with db.write() as w:
        for i in range(3000):
            w.add(f"common rare{i} common", docno=f"d{i}")
        for i in range(8000):          # (values take room: many blocks)
            w.annotate("probe", 3 * i, 3 * i + 1, i + 0.5)
    assert check(db) == []
    txn = storage.Txn(db._env, write=True)
    fid = txn.feature_id("probe")
    with txn.txn.cursor(db=txn.dbs["blocks"]) as cur:
        keys = [bytes(k) for k, _ in cur if bytes(k).startswith(_key(fid, 0)[:8])]
    assert len(keys) > 4                      # (the middle one of several blocks)
    key = keys[len(keys) // 2]
    value = txn.txn.get(key, db=txn.dbs["blocks"])
    start = int.from_bytes(key[8:], "big")
    txn.txn.delete(key, db=txn.dbs["blocks"])
    txn.txn.put(_key(fid, start + 1), value, db=txn.dbs["blocks"])   # stored under start + 1
    txn.commit()
    assert check(db) == [f"blocks: 'probe' block at {start + 1}: its first start is {start}"]
