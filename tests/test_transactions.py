"""Transactions through the API on real LMDB files: writes (add, annotate, erase, delete)
against a reference, visibility and atomicity, snapshots, writers in one process, the
address range, and a writer's life (dropped, nested, busy)."""

from __future__ import annotations

import bisect
import os
import random
import subprocess
import sys
import textwrap
import time

import pytest

import annodb
import naive
from annodb import storage
from annodb.storage import layout
from annodb.check import check
from storage_helpers import intervals


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
                    layout._append_all(cur, [(b"a", storage.u64(5))])
        finally:
            txn.abort()
        with db.write() as w:      # docnos before and after the last: both kept
            w.add_many([("x", "a"), ("y", "c"), ("z", "d")])
        with db.read() as r:
            assert [d.docno for d in r.documents()] == ["b", "a", "c", "d"]
            assert all(r.has(d) for d in "abcd")
        assert check(db) == []


def test_a_huge_annotation_is_refused_and_memory_keeps_working(tmp_path):
    """An annotation past the address range (2**60) is refused and Memory's labels keep
    matching (before: it was stored as (2**60, 2**60) through float64, and every later
    address was rounded, so Memory's labels stopped matching)."""
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


def test_a_word_another_process_interned_keeps_its_id(tmp_path):
    """A writer whose process has seen every stored word takes new words' ids without
    looking them up; once another process has interned words since, it looks them up
    again: a word that process stored keeps its one id and list (no second feature)."""
    path = tmp_path / "d.db"
    with annodb.open(path) as db:
        with db.write() as w:                       # every stored word seen here
            w.add_many([("alpha gamma", "a1")])
        other = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import annodb
            with annodb.open({str(path)!r}, timeout=10) as db, db.write() as w:
                w.add("beta delta", docno="o1")
        """)], capture_output=True, text=True, timeout=60)
        assert other.returncode == 0, other.stderr
        with db.write() as w:
            w.add_many([("beta alpha epsilon", "a2")])
        with db.write() as w:                       # its own commit: seen again
            w.add_many([("epsilon zeta beta", "a3")])
        with db.read() as r:
            assert [r.document_at(s).docno for s in r.term("beta").starts.tolist()] == \
                ["o1", "a2", "a3"]
            assert r.term("epsilon").starts.tolist() == [6, 7]
        ids = list(db._env.vocab.values())
        assert len(ids) == len(set(ids)) and db._env.vocab["beta"] < db._env.vocab["epsilon"]
        assert check(db) == []


def test_a_writer_sees_the_docnos_it_flushed_and_deleted(db):
    """present() asked again after the writer flushed its documents, or deleted one,
    answers from what is stored now, not from its earlier answer."""
    with db.write() as w:
        w.add("kept", docno="k")
    with db.write() as w:
        assert w.present(["k", "n"]) == {"k": 0}
        w.add("new one", docno="n")
        w.query("new")                              # a read: the writer flushes
        assert w.present(["k", "n"]) == {"k": 0, "n": 1}
        assert w.delete("k")
        assert w.present(["k", "n"]) == {"n": 1}
    with db.read() as r:
        assert r.present(["k", "n"]) == {"n": 1}
