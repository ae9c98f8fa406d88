"""Annotation lists as a query reads them (annodb/lists.py): a list too long to read whole
is probed by its blocks (inside, containing, near), and each probe gives exactly what the
whole list gives for it, erased content dropped alike."""

from __future__ import annotations

import random

import numpy as np
import pytest

import annodb

N = 6000          # documents: `:` and `title:` are longer than lists.SMALL_LIST


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    path = tmp_path_factory.mktemp("lists") / "l.db"
    rng = random.Random(5)
    with annodb.open(path) as db:
        with db.write() as w:
            w.add_many([({"id": f"d{i}", "title": rng.choice(["word", "other x"]),
                          "text": " ".join(rng.choice(["word", "other", "x"])
                                           for _ in range(rng.randrange(1, 6)))}, None)
                        for i in range(N)])
        with db.write() as w:
            w.erase(1000, 1400)
    return path


def brute(whole, keep) -> list:
    return [(p, q) for p, q in zip(whole.starts.tolist(), whole.ends.tolist()) if keep(p, q)]


def pairs(found) -> list:
    return list(zip(found.starts.tolist(), found.ends.tolist()))


@pytest.mark.parametrize("feature", [":", "title:"])
def test_probing_by_blocks_gives_what_the_whole_list_gives(path, feature):
    rng = np.random.default_rng(11)
    with annodb.open(path, readonly=True, cache_bytes=0) as db:
        with db.read() as r:
            whole = r.lists.whole(feature)
            space = r.address_space()
        assert len(whole) > 4096
        for n in (1, 3, 10):     # (probes in under half its blocks: read by blocks)
            ps = np.sort(rng.integers(0, space, n))
            qs = ps + rng.integers(0, 3, n)
            with db.read() as r:                     # (a snapshot that decoded nothing)
                read_before = r.lists.read
                got = pairs(r.lists.containing(feature, ps, qs))
                assert r.lists.read - read_before < len(whole)   # (blocks, not the list)
            assert got == brute(whole, lambda p, q: any(
                p <= a and b <= q for a, b in zip(ps.tolist(), qs.tolist())))
            los = np.sort(rng.integers(0, space, n))
            his = los + rng.integers(0, 200, n)
            with db.read() as r:
                got = pairs(r.lists.inside(feature, los, his))
            assert got == brute(whole, lambda p, q: any(
                a <= p and q <= b for a, b in zip(los.tolist(), his.tolist())))


@pytest.mark.parametrize("feature", [":", "title:"])
def test_a_part_at_points_and_whole_blocks_give_what_the_whole_list_gives(path, feature):
    """A list's part at points (what a phrase's candidates ask) holds every interval
    starting at one of them and nothing the list does not; its blocks by their first
    starts (in_blocks, what a ranking's containers are) are the intervals starting in
    those blocks' ranges, erased ones dropped alike."""
    rng = np.random.default_rng(12)
    with annodb.open(path, readonly=True, cache_bytes=0) as db:
        with db.read() as r:
            whole = r.lists.whole(feature)
            firsts = r.lists.directory(feature)
        listed = set(pairs(whole))
        for n in (1, 3, 10):
            at = np.unique(np.concatenate((rng.choice(whole.starts, n),
                                           rng.integers(0, int(whole.starts[-1]) + 9, n))))
            with db.read() as r:
                got = set(pairs(r.lists.part(feature, at, at)))
            asked = set(at.tolist())
            assert {(p, q) for p, q in listed if p in asked} <= got <= listed
            # (and the block holding the erased range's start: its erased intervals dropped)
            erased = int(np.searchsorted(firsts, 1000, side="right")) - 1
            blocks = np.unique(np.append(rng.choice(len(firsts) - 1, n, replace=False),
                                         erased))
            ranges = [(int(firsts[j]), int(firsts[j + 1]) - 1) for j in blocks.tolist()]
            with db.read() as r:
                got_blocks = pairs(r.lists.in_blocks(feature, firsts[blocks]))
            assert got_blocks == brute(whole, lambda p, q, ranges=ranges: any(
                lo <= p <= hi for lo, hi in ranges))


def test_near_gives_the_points_at_or_around_each_position(path):
    with annodb.open(path, readonly=True, cache_bytes=0) as db:
        with db.read() as r:
            points = r.lists.whole("word").starts.tolist()
            space = r.address_space()
        xs = np.array(sorted({0, 999, 1000, 1200, 1401, space // 2, space + 5}))
        with db.read() as r:
            got = r.lists.near("word", xs).tolist()
    want = set()
    for x in xs.tolist():
        want.update(p for p in [max((p for p in points if p <= x), default=None),
                                min((p for p in points if p >= x), default=None)]
                    if p is not None)
    assert got == sorted(want)
    assert not any(1000 <= p <= 1400 for p in got)     # (erased: as from the whole list)


def test_blocks_kept_decoded_are_those_of_the_state_read(tmp_path, monkeypatch):
    """Blocks read by probes are kept decoded in the shared cache for the snapshots of a
    state; after a commit that deletes a document and one that annotates into a block
    already read, a new snapshot's probes give what its whole list gives, not the
    blocks kept from before (a snapshot taken before still gets its own state's)."""
    from annodb import lists, storage
    monkeypatch.setattr(storage, "block_limits", lambda psize: (psize - 16, 2))
    monkeypatch.setattr(storage, "ANNOTATION_BLOCK", 2)
    monkeypatch.setattr(lists, "SMALL_LIST", -1)     # always probed by blocks ...
    monkeypatch.setattr(lists, "WHOLE_FRACTION", 2.0)  # ... never decoded whole
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(40):
            w.add(f"doc {i} words here", docno=f"d{i}")
    with db.read() as r:
        starts = [r.document(f"d{i}").start for i in (5, 17, 30)]
    ps = np.array([s + 1 for s in starts])
    qs = ps + 1

    def at_probes(p, q):
        return any(a <= p <= b for a, b in zip(ps, qs))

    def probe(snap):  # (part may give more than the probes' blocks: only those compared)
        return (pairs(snap.lists.containing(":", ps, qs)),
                [x for x in pairs(snap.lists.part("words", ps, qs)) if at_probes(*x)])

    def truth(snap):
        return (brute(snap.lists.whole(":"),
                      lambda p, q: any(p <= a and b <= q for a, b in zip(ps, qs))),
                brute(snap.lists.whole("words"), at_probes))

    old = db.read()
    first = probe(old)
    assert any(key[0] == "block" for key in old.lists._shared._items)  # (kept)
    assert first[0] == truth(old)[0]
    with db.write() as w:
        w.delete("d17")
    with db.write() as w:
        w.annotate("words", starts[0] + 1, starts[0] + 1)  # (into a block read before)
    with db.read() as r:
        got = probe(r)
        assert got == truth(r)
        assert len(got[0]) == 2 and (starts[0] + 1, starts[0] + 1) in got[1]
    assert probe(old) == first  # (the old snapshot reads its own state)
    old.close()
    db.close()


def test_a_list_the_shared_cache_did_not_hold_is_asked_for_once_a_snapshot(tmp_path,
                                                                           monkeypatch):
    """A snapshot that found a query's word not decoded in the shared cache (Lists.at_hand)
    does not ask the cache again for it (each question is its lock and a key made) when
    the same snapshot asks for the word again; what it gives is unchanged, and a list it
    decodes itself is what it finds next."""
    from annodb import lists
    monkeypatch.setattr(lists, "SMALL_LIST", -1)     # (no list read whole for being short)
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(20):
            w.add(f"jazz note {i}", docno=f"d{i}")
    asked = []
    with db.read() as r:
        cache = r.lists._shared
        cache.clear()
        real_many, real_get = cache.get_many, cache.get
        monkeypatch.setattr(cache, "get_many", lambda keys: asked.extend(keys) or
                            real_many(keys))
        monkeypatch.setattr(cache, "get", lambda key: asked.append(key) or real_get(key))
        [(found, count, points)] = r.lists.at_hand(["jazz"])
        assert found is None and count == 20 and points
        assert sum(key[0] == "list" for key in asked) == 1
        asked.clear()
        assert r.lists.at_hand(["jazz"])[0][0] is None and r.lists.cached("jazz") is None
        assert [key for key in asked if key[0] == "list"] == []
        whole = r.lists.whole("jazz")
        assert r.lists.at_hand(["jazz"])[0][0] is whole and len(whole) == 20
    db.close()


def test_what_derived_keeps_forgets_the_groups_it_drops():
    """ListCache's derived budget drops the least recently used values past it, and with
    them its record of each dropped group's newest version (which would otherwise grow
    with every word ever asked for)."""
    from annodb.list_cache import DERIVED_SHARE, ListCache
    cache = ListCache(max_bytes=4000)
    budget = int(4000 * DERIVED_SHARE)
    for i in range(100):
        cache.put_derived(f"k{i}", object(), 600, group=("docs", i), lists=(("list", i, 1),))
    assert cache.derived_bytes <= budget
    kept = {key for key in cache._derived}
    assert len(kept) == budget // 600
    assert {newest[0] for newest in cache.derived_newest.values()} == kept
