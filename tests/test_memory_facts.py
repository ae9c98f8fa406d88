"""Facts that change, in annodb.Memory on real LMDB files: a key supersedes the earlier
memories with it, reads as of a past time, the newer of two equal scores first, a recency
prior, times given as datetimes, and two processes racing on one key."""

import datetime as dt
import os
import subprocess
import sys
import textwrap
import time

import pytest

import annodb
from annodb.errors import AnnodbError, NotFoundError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOW = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
DAY = dt.timedelta(days=1)
T, D = NOW.timestamp(), 86400.0          # the same in seconds since the epoch


@pytest.fixture
def mem(tmp_path):
    with annodb.Memory(tmp_path / "memory.db") as m:
        yield m


def texts(entries):
    return [e.text for e in entries]


def test_a_changed_fact_recalls_its_latest_version_and_the_old_one_as_of_then(mem):
    paris = mem.remember("Alice lives in Paris", user="alice", key="alice/city",
                         time=T - 30 * D)
    berlin = mem.remember("Alice lives in Berlin", user="alice", key="alice/city", time=T)
    other = mem.remember("Alice likes Berlin in spring", user="alice", time=T - 20 * D)
    question = "where does Alice live?"
    for rank in (None, "bm25", "ssr", "fused", "bm25+rm3"):
        assert texts(mem.recall(question, k=1, where={"user": "alice"}, rank=rank)) == \
            ["Alice lives in Berlin"], rank
    # as of a past time: the memories remembered by then and not superseded by then
    then = mem.recall(question, k=1, where={"user": "alice"}, as_of=T - 10 * D)
    assert texts(then) == ["Alice lives in Paris"]
    assert texts(mem.recall(question, k=5, as_of=T - 25 * D)) == ["Alice lives in Paris"]
    assert mem.recall(question, as_of=T - 40 * D) == []          # nothing yet
    assert texts(mem.recall(question, k=1, as_of=T)) == ["Alice lives in Berlin"]
    # kept, marked with the time it was superseded, and found when asked for
    old = mem.get(paris)
    assert old.text == "Alice lives in Paris" and old.metadata["key"] == "alice/city"
    assert old.metadata["superseded"] == T
    assert "superseded" not in mem.get(berlin).metadata
    both = mem.recall(question, k=5, where={"key": "alice/city"}, include_superseded=True)
    assert sorted(texts(both)) == ["Alice lives in Berlin", "Alice lives in Paris"]
    # history likewise
    assert [e.docno for e in mem.history()] == [berlin, other]
    assert [e.docno for e in mem.history(include_superseded=True)] == [berlin, other, paris]
    assert [e.docno for e in mem.history(as_of=T - 10 * D)] == [other, paris]
    # the mark is an annotation: GCL sees it
    marked = mem.recall("(>> : (<= :superseded: %d))" % T,
                        include_superseded=True)
    assert [e.docno for e in marked] == [paris]


def test_a_fact_back_filled_into_the_past_is_superseded_at_once(mem):
    new = mem.remember("the deploy key is K2", key="deploy/key", time=NOW)
    old = mem.remember("the deploy key is K1", key="deploy/key", time=NOW - 5 * DAY)
    assert texts(mem.recall("deploy key", k=5)) == ["the deploy key is K2"]
    assert mem.get(old).metadata["superseded"] == NOW.timestamp()
    assert texts(mem.recall("deploy key", as_of=NOW - DAY)) == ["the deploy key is K1"]
    # a third in between: the first is now superseded when it came
    mid = mem.remember("the deploy key is K1b", key="deploy/key", time=NOW - 2 * DAY)
    assert mem.get(old).metadata["superseded"] == (NOW - 2 * DAY).timestamp()
    assert mem.get(mid).metadata["superseded"] == NOW.timestamp()
    assert texts(mem.recall("deploy key", as_of=NOW - DAY)) == ["the deploy key is K1b"]
    assert [e.docno for e in mem.history(where={"key": "deploy/key"})] == [new]


def test_the_same_time_the_later_memory_wins(mem):
    first = mem.remember("status: red", key="status", time=NOW)
    second = mem.remember("status: green", key="status", time=NOW)
    assert [e.docno for e in mem.history()] == [second]
    assert [e.docno for e in mem.history(as_of=NOW)] == [second]
    assert mem.get(first).metadata["superseded"] == NOW.timestamp()


def test_supersedes_a_docno(mem):
    a = mem.remember("the meeting is on Monday", time=NOW - DAY)
    b = mem.remember("the meeting moved to Tuesday", supersedes=a, time=NOW)
    assert texts(mem.recall("meeting", k=5)) == ["the meeting moved to Tuesday"]
    assert mem.get(a).metadata["superseded"] == NOW.timestamp()
    assert texts(mem.recall("meeting", as_of=NOW - DAY / 2)) == ["the meeting is on Monday"]
    # a memory with a key passes it on
    k1 = mem.remember("Bob's phone is 111", key="bob/phone", time=NOW - DAY)
    k2 = mem.remember("Bob's phone is 222", supersedes=k1, time=NOW)
    assert mem.get(k2).metadata["key"] == "bob/phone"
    assert [e.docno for e in mem.history(where={"key": "bob/phone"})] == [k2]
    with pytest.raises(AnnodbError, match="give the same key"):
        mem.remember("x", supersedes=k2, key="other")
    with pytest.raises(NotFoundError, match="no memory"):
        mem.remember("x", supersedes="nope")
    with pytest.raises(AnnodbError, match="supersedes earlier ones"):
        mem.remember("older", supersedes=b, time=NOW - 3 * DAY)
    assert len(mem.history(100, include_superseded=True)) == 4      # nothing half-written


def test_the_newer_of_two_equal_scores_comes_first(mem):
    rome = mem.remember("Bob lives in Rome", user="bob", time=T - 30 * D)
    oslo = mem.remember("Bob lives in Oslo", user="bob", time=T)
    # remembered later but dated earlier: older, so it loses the tie
    mem.remember("Bob lives in Lima", user="bob", time=T - 60 * D)
    for rank in (None, "bm25", "ssr"):
        found = mem.recall("where does Bob live?", k=3, where={"user": "bob"}, rank=rank)
        assert found[0].score == found[1].score == found[2].score
        assert texts(found) == ["Bob lives in Oslo", "Bob lives in Rome",
                                "Bob lives in Lima"], rank
        assert [e.docno for e in mem.recall("where does Bob live?", k=1, rank=rank)] == [oslo]
    assert rome != oslo


def test_a_tie_across_the_cut_is_broken_by_age(mem):
    """k=2 of 30 equally scored memories: the two newest, wherever their addresses are,
    by every ranker (the context ranking gives the whole tie in one ranking; the others
    rank deeper until it ends)."""
    made = [mem.remember("note about the garden", time=NOW - i * DAY) for i in range(30)]
    mem.remember("a note on something else", time=NOW + DAY)
    for rank in (None, "bm25", "ssr", "fused"):
        assert [e.docno for e in mem.recall("garden", k=2, rank=rank)] == made[:2], rank
        assert [e.docno for e in mem.recall("garden", k=29, rank=rank)] == made[:29], rank


def test_recency_blends_age_into_the_score(mem):
    old = mem.remember("coffee coffee coffee with Carol", time=NOW - 100 * DAY)
    new = mem.remember("coffee with Dan", time=NOW - DAY)
    plain = mem.recall("coffee", k=2, rank="bm25", as_of=NOW)
    assert [e.docno for e in plain] == [old, new]
    decayed = mem.recall("coffee", k=2, rank="bm25", as_of=NOW, recency=dt.timedelta(days=7))
    assert [e.docno for e in decayed] == [new, old]
    assert decayed[0].score == pytest.approx(plain[1].score * 0.5 ** (1 / 7))
    slow = mem.recall("coffee", k=2, rank="bm25", as_of=NOW, recency=3650 * 86400)
    assert [e.docno for e in slow] == [old, new]
    with pytest.raises(AnnodbError, match="half-life"):
        mem.recall("coffee", recency=0)


def test_times_are_datetimes_or_seconds_naive_meaning_utc(mem):
    naive = mem.remember("a", time=dt.datetime(2024, 1, 1))
    aware = mem.remember("b", time=dt.datetime(2024, 1, 1, 2, tzinfo=dt.timezone(
        dt.timedelta(hours=2))))
    secs = mem.remember("c", time=1704067200)
    for docno in (naive, aware, secs):
        assert mem.get(docno).metadata["time"] == 1704067200
    assert len(mem.history(where={"time": (">=", dt.datetime(2024, 1, 1))})) == 3
    assert mem.history(where={"time": (">", dt.datetime(2024, 1, 1))}) == []
    with pytest.raises(AnnodbError, match="is a date"):
        mem.recall("a", as_of=dt.date(2024, 1, 1))


RACER = textwrap.dedent("""
    import os, sys, time
    import annodb
    path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with annodb.Memory(path) as mem:
        open(os.path.join(path, name + ".ready"), "w").close()
        while not os.path.exists(os.path.join(path, "go")):   # both start together
            time.sleep(0.01)
        for i in range(n):
            mem.remember(f"the build status is {name}{i}", key="build/status", who=name)
""")


def test_two_processes_racing_on_one_key_leave_exactly_one_current(tmp_path):
    """Each remember checks and supersedes in its own write transaction, so whatever the
    interleaving, one memory with the key is current and the others form a timeline."""
    path = str(tmp_path / "race.db")
    with annodb.Memory(path):
        pass
    n = 20
    racers = [subprocess.Popen([sys.executable, "-c", RACER, path, name, str(n)], cwd=ROOT,
                               stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    while not all(os.path.exists(os.path.join(path, f"{name}.ready")) for name in "ab"):
        assert all(p.poll() is None for p in racers)
        time.sleep(0.01)
    open(os.path.join(path, "go"), "w").close()
    for p in racers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with annodb.Memory(path) as mem:
        current = mem.history(100, where={"key": "build/status"})
        everything = mem.history(100, where={"key": "build/status"}, include_superseded=True)
        assert len(current) == 1 and len(everything) == 2 * n
        assert len(mem.recall("build status", k=100)) == 1
        # the timeline: by (time, docno address), each superseded when the next came
        chain = sorted(everything, key=lambda e: (e.metadata["time"], int(e.docno[1:])))
        for before, after in zip(chain, chain[1:]):
            assert before.metadata["superseded"] == after.metadata["time"]
        assert chain[-1].docno == current[0].docno
        assert "superseded" not in chain[-1].metadata


def test_a_sharded_memory_keeps_a_key_in_one_shard_and_refuses_a_split_forget(tmp_path):
    """On a sharded collection, a key's memories are written to one shard, so a key
    supersedes the earlier memories with it (as_of reads the old one) and remember_many
    writes its memories in one transaction; forget(where=) forgets the matching memories
    of one shard, and when they live in several it refuses with a clear error, forgetting
    nothing (a transaction of a sharded collection writes one shard)."""
    from annodb import shards
    from annodb.shards.routing import route
    shards.open(tmp_path / "c", shards=2).close()
    with annodb.Memory(tmp_path / "c") as mem:
        docnos = [mem.remember(f"Alice lives in city{i}", key="alice/city", user="alice",
                               time=T + i * D) for i in range(6)]
        assert len({route(d, 2) for d in docnos}) == 1
        other = 1 - route(docnos[0], 2)
        bob = [f"b{i}" for i in range(40) if route(f"b{i}", 2) == other][:3]
        assert mem.remember_many([{"text": f"Bob note {i}", "docno": d, "user": "bob",
                                   "time": T} for i, d in enumerate(bob)]) == bob
        many = mem.remember_many([{"text": f"Carol note {i}", "user": "carol", "time": T}
                                  for i in range(8)])
        assert len(many) == 8
        assert [e.docno for e in mem.history(10, where={"user": "alice"})] == [docnos[-1]]
        assert texts(mem.recall("where does alice live", k=5, where={"user": "alice"})) \
            == ["Alice lives in city5"]
        assert texts(mem.recall("alice", k=5, as_of=T + 2.5 * D)) == ["Alice lives in city2"]
        with pytest.raises(AnnodbError, match="several shards.*nothing was forgotten"):
            mem.forget(where={"user": ["alice", "bob"]})
        assert len(mem.history(20, include_superseded=True)) == 6 + 3 + 8
        before = [(e.docno, e.score) for e in mem.recall("alice bob note", k=20)]
        assert mem.reindex() == 17      # (one transaction a shard: both are written)
        assert [(e.docno, e.score) for e in mem.recall("alice bob note", k=20)] == before
        assert sorted(mem.forget(where={"user": "alice"})) == sorted(docnos)
        assert sorted(mem.forget(where={"user": "bob"})) == sorted(bob)
        with pytest.raises(AnnodbError, match="nothing was remembered"):
            mem.remember_many([{"text": "x", "docno": bob[0]},
                               {"text": "y", "docno": docnos[0]}])


def test_a_key_given_twice_at_one_time_in_one_batch_leaves_the_later_current(tmp_path):
    """Two memories of one key with the same time in one remember_many (a transcript with
    second-resolution stamps, or a coarse clock): the later one in the batch is current
    and supersedes the earlier at that time, as two remember calls do; before, each
    superseded the other and the fact vanished from recall."""
    with annodb.Memory(tmp_path / "m.db") as mem:
        first, second = mem.remember_many([
            {"text": "Alice lives in Paris", "key": "alice/city", "time": 1000},
            {"text": "Alice lives in Berlin", "key": "alice/city", "time": 1000}])
        assert [e.docno for e in mem.recall("Alice lives", k=5)] == [second]
        assert [e.docno for e in mem.recall("Alice lives", as_of=1000)] == [second]
        assert mem.get(first).metadata["superseded"] == 1000
        assert "superseded" not in mem.get(second).metadata
        third = mem.remember("Alice lives in Rome", key="alice/city", time=1000)
        assert [e.docno for e in mem.recall("Alice lives", k=5)] == [third]


def test_remember_many_may_supersede_a_memory_given_earlier_in_the_batch(tmp_path):
    """An import writing a memory and its correction in one remember_many: supersedes=
    names a docno given earlier in the batch (taking its key, if any), as it would across
    two calls; before, it was 'no memory with docno' and nothing was written."""
    with annodb.Memory(tmp_path / "m.db") as mem:
        made = mem.remember_many([
            {"text": "Bob likes jazz", "docno": "b1", "time": 10},
            {"text": "Bob likes rock now", "supersedes": "b1", "time": 20},
            {"text": "Carol lives in Oslo", "docno": "c1", "key": "carol/city", "time": 10},
            {"text": "Carol lives in Bergen", "supersedes": "c1", "time": 20}])
        current = [e.docno for e in mem.recall("Bob likes Carol lives", k=10)]
        assert sorted(current) == sorted([made[1], made[3]])     # (b1 and c1 superseded)
        assert mem.get("b1").metadata["superseded"] == 20
        assert mem.get(made[3]).metadata["key"] == "carol/city"
        with pytest.raises(AnnodbError, match="give the same key or none"):
            mem.remember_many([{"text": "Dan is here", "docno": "d1", "key": "dan"},
                               {"text": "Dan left", "supersedes": "d1", "key": "other"}])
        with pytest.raises(NotFoundError):
            mem.remember_many([{"text": "late", "supersedes": "e1"},
                               {"text": "Eve", "docno": "e1"}])
        assert not mem.get("d1") and len(mem.history(10, include_superseded=True)) == 4


def test_superseding_a_memory_replaced_already_is_refused(tmp_path):
    """supersedes= names a memory current at the new memory's time: superseding Paris
    after Berlin replaced it took Paris's key and superseded Berlin, the current fact,
    without a word. It is refused, nothing is written; a time= before the replacement
    corrects the past (the correction is then superseded by Berlin in its turn)."""
    with annodb.Memory(tmp_path / "m.db") as mem:
        paris = mem.remember("Alice lives in Paris", key="alice/city", time=NOW - 10 * DAY)
        berlin = mem.remember("Alice lives in Berlin", key="alice/city", time=NOW - DAY)
        jazz = mem.remember("Bob likes jazz", time=NOW - 10 * DAY)
        rock = mem.remember("Bob likes rock", supersedes=jazz, time=NOW - DAY)
        for old in (paris, jazz):
            with pytest.raises(AnnodbError, match=rf"supersedes '{old}', which a later "
                                                  "memory superseded already"):
                mem.remember("a correction", supersedes=old, time=NOW)
        city = {"key": "alice/city"}
        assert [e.docno for e in mem.recall("Alice lives in", where=city)] == [berlin]
        lyon = mem.remember("Alice lived in Lyon, not Paris", supersedes=paris,
                            time=NOW - 5 * DAY)
        assert [e.docno for e in mem.recall("Alice lives in", where=city)] == [berlin]
        assert [e.docno for e in mem.recall("Alice", where=city, as_of=NOW - 3 * DAY)] \
            == [lyon]
        assert mem.get(rock).metadata.get("superseded") is None
