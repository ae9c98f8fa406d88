"""Every kernel of annodb.kernels equals its brute-force twin in tests/naive.py, exactly.

The same file also runs under NUMBA_DISABLE_JIT=1 (see test_pure_python_run), so the
kernels are checked as plain Python too (coverage, and the interpreter's bounds checks).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from annodb import kernels as K
import naive

NOJIT_CHILD = "ANNODB_KERNELS_NOJIT_CHILD"


def examples(n: int):
    """Hypothesis settings of n examples; a fifth of them in the pure-Python rerun
    (test_pure_python_run: interpreted kernels are 100x slower, and that run is there for
    the interpreter's bounds checks and coverage, which the compiled run's n examples
    already drew in full)."""
    return settings(max_examples=max(10, n // 5) if os.environ.get(NOJIT_CHILD) else n)


# ---------------------------------------------------------------- helpers


def cols(intervals):
    """[(p, q), ...] -> (starts, ends) as int64 arrays."""
    return (
        np.array([p for p, _ in intervals], dtype=np.int64),
        np.array([q for _, q in intervals], dtype=np.int64),
    )


def pairs(s, e):
    return list(zip(s.tolist(), e.tolist()))


def gc(raw):
    """Raw (p, q) pairs -> a GC-list by the naive normalize."""
    return [(p, q) for p, q, _ in naive.normalize([(p, q, 0.0) for p, q in raw])]


def raw_intervals(max_addr, max_len=5, min_size=0, max_size=8):
    """Random (p, q) with 0 <= p <= max_addr and q - p < max_len (may nest, repeat)."""
    one = st.tuples(st.integers(0, max_addr), st.integers(0, max_len - 1))
    return st.lists(one, min_size=min_size, max_size=max_size).map(
        lambda xs: [(p, p + d) for p, d in xs]
    )


def gc_lists(max_addr=40, max_len=6, min_size=0, max_size=8):
    """GC-lists of intervals of 1..max_len addresses over 0..max_addr (+ length)."""
    return raw_intervals(max_addr, max_len, min_size, max_size).map(gc)


def point_lists(max_addr=40, min_size=0, max_size=8):
    return st.lists(st.integers(0, max_addr), min_size=min_size, max_size=max_size).map(
        lambda xs: [(p, p) for p in sorted(set(xs))]
    )


def dense_lists(max_size=40):
    """Runs of short intervals with small gaps: dense in count, placed anywhere in 0..2000."""
    return st.tuples(
        st.integers(0, 1800),
        st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2)), max_size=max_size),
    ).map(lambda t: gc(_run(*t)))


def _run(start, steps):
    out, p = [], start
    for gap, d in steps:
        p += gap
        out.append((p, p + d))
    return out


small = st.one_of(gc_lists(), point_lists(), gc_lists(max_addr=8, max_len=3))
# one list of 1-3 intervals over 0..2000 against a dense one: exercises the galloping
sparse = st.one_of(gc_lists(2000, 6, 1, 3), point_lists(2000, 1, 3))
skewed = st.tuples(sparse, dense_lists()) | st.tuples(dense_lists(), sparse)
two_lists = st.tuples(small, small) | skewed

COMBINE = ["both_of", "one_of", "followed_by"]
SELECT = ["contained_in", "containing", "not_contained_in", "not_containing"]


def run_combine(name, a, b):
    s, e = getattr(K, name)(*cols(a), *cols(b))
    assert s.dtype == np.int64 and e.dtype == np.int64
    assert K.is_gc_list(s, e)
    return pairs(s, e)


def run_select(name, a, b):
    idx = getattr(K, name)(*cols(a), *cols(b))
    assert idx.dtype == np.int64
    return idx.tolist()


def run_ssr(covers, containers, k=42.0):
    scores, best = K.ssr(*cols(covers), *cols(containers), k)
    assert scores.dtype == np.float64 and best.dtype == np.int64
    return scores.tolist(), best.tolist()


# ---------------------------------------------------------------- normalize


@examples(300)
@given(
    raw_intervals(15, 5, 0, 12),
    st.data(),
)
def test_normalize(raw, data):
    values = data.draw(st.lists(st.integers(-3, 3), min_size=len(raw), max_size=len(raw)))
    triples = [(p, q, float(v)) for (p, q), v in zip(raw, values)]
    s, e, v = K.normalize(*cols(raw), np.array(values, dtype=np.float64))
    assert list(zip(s.tolist(), e.tolist(), v.tolist())) == naive.normalize(triples)


def test_normalize_examples():
    # duplicates: the last write wins; nesting: the inner interval stays
    s, e, v = K.normalize([5, 1, 5, 2], [9, 8, 9, 3], [1.0, 2.0, 3.0, 4.0])
    assert (s.tolist(), e.tolist(), v.tolist()) == ([2, 5], [3, 9], [4.0, 3.0])
    # an input that already is a GC-list comes back equal, as new arrays
    a = np.array([1, 4, 7])
    s, e, v = K.normalize(a, a + 1, [0.5, 1.5, 2.5])
    assert (s.tolist(), e.tolist(), v.tolist()) == ([1, 4, 7], [2, 5, 8], [0.5, 1.5, 2.5])
    assert s is not a and not np.shares_memory(s, a)
    s, e, v = K.normalize([], [], [])
    assert s.tolist() == e.tolist() == v.tolist() == []
    assert s.dtype == e.dtype == np.int64 and v.dtype == np.float64


# ---------------------------------------------------------------- combining operators


@pytest.mark.parametrize("name", COMBINE)
@examples(250)
@given(two_lists)
def test_combine(name, ab):
    a, b = ab
    assert run_combine(name, a, b) == getattr(naive, name)(a, b)


@examples(100)
@given(st.one_of(small, dense_lists()))
def test_both_of_self_is_identity(a):
    assert run_combine("both_of", a, a) == a
    assert run_combine("one_of", a, a) == a


@pytest.mark.parametrize("name", COMBINE)
def test_combine_empty(name):
    a = [(1, 2), (4, 4)]
    assert run_combine(name, [], []) == []
    assert run_combine(name, a, []) == (a if name == "one_of" else [])
    assert run_combine(name, [], a) == (a if name == "one_of" else [])


def test_combine_examples():
    a, b = [(1, 1), (10, 10)], [(5, 5)]
    assert run_combine("both_of", a, b) == [(1, 5), (5, 10)]
    assert run_combine("one_of", a, b) == [(1, 1), (5, 5), (10, 10)]
    assert run_combine("followed_by", a, b) == [(1, 5)]
    assert run_combine("followed_by", b, a) == [(5, 10)]
    # a B-interval over each A: the B-intervals themselves are the minimal ones
    b = [(0, 1), (1, 2), (10, 12)]
    assert run_combine("both_of", a, b) == naive.both_of(a, b) == [(0, 1), (1, 2), (10, 12)]


# ---------------------------------------------------------------- containment filters


@pytest.mark.parametrize("name", SELECT)
@examples(250)
@given(two_lists)
def test_select(name, ab):
    a, b = ab
    assert run_select(name, a, b) == getattr(naive, name)(a, b)


@pytest.mark.parametrize("name", SELECT)
@examples(60)
@given(st.tuples(gc_lists(300, 4, 0, 150), gc_lists(300, 30, 0, 12)))
def test_select_many_against_few(name, ab):
    # both sizes in both roles: the kernel drives from the shorter list
    a, b = ab
    assert run_select(name, a, b) == getattr(naive, name)(a, b)
    assert run_select(name, b, a) == getattr(naive, name)(b, a)


@pytest.mark.parametrize("name", SELECT)
def test_select_empty(name):
    a = [(1, 2), (4, 4)]
    negated = name.startswith("not_")
    assert run_select(name, [], []) == []
    assert run_select(name, [], a) == []
    assert run_select(name, a, []) == ([0, 1] if negated else [])


# ---------------------------------------------------------------- ranking


@examples(250)
@given(
    st.one_of(small, dense_lists()),
    st.one_of(gc_lists(40, 15), gc_lists(2000, 300, 0, 6), dense_lists()),
    st.sampled_from([42.0, 1.0, 0.5, 3.25]),
)
def test_ssr(covers, containers, k):
    assert run_ssr(covers, containers, k) == naive.ssr(covers, containers, k)
    # the sparse form: exactly the containers holding a cover, with the same numbers
    scores, best = naive.ssr(covers, containers, k)
    idx, sparse_scores, sparse_best = K.ssr_touched(*cols(covers), *cols(containers), k)
    want = [d for d in range(len(containers)) if best[d] >= 0]
    assert idx.tolist() == want
    assert sparse_scores.tolist() == [scores[d] for d in want]
    assert sparse_best.tolist() == [best[d] for d in want]


@examples(250)
@given(
    st.one_of(small, dense_lists()),
    st.one_of(gc_lists(40, 15), gc_lists(2000, 300, 0, 6), dense_lists()),
    st.sampled_from([42.0, 1.0, 0.5]),
    st.integers(0, 12),
)
def test_ssr_top(covers, containers, k, n):
    """SSR's ranking in one call: the best n containers holding a cover, by score then
    container order, with their scores and best covers, and how many hold one in all."""
    s, e, sc, cp, cq, total = K.ssr_top(*cols(covers), *cols(containers), k, n)
    got = [((p, q), x, (a, b)) for p, q, x, a, b in zip(s.tolist(), e.tolist(), sc.tolist(),
                                                        cp.tolist(), cq.tolist())]
    assert (got, total) == naive.ssr_top(covers, containers, k, n)


def test_ssr_examples():
    covers = [(1, 2), (5, 5), (9, 12)]
    scores, best = run_ssr(covers, [(0, 6), (6, 8), (8, 20)])
    assert scores == [1 / 43 + 1 / 42, 0.0, 1 / 45]
    assert best == [1, -1, 2]
    assert run_ssr([], [(0, 9)]) == ([0.0], [-1])
    assert run_ssr(covers, []) == ([], [])
    # ties: the first of the shortest covers
    assert run_ssr([(1, 2), (4, 5)], [(0, 9)])[1] == [0]


def test_regression_ssr_container_inside_previous():
    # found while writing the examples: the end of the cover run was galloped from the
    # previous container's, so a container inside the previous one (not a GC-list, but
    # sorted by start) picked up a cover lying outside it; now each run end is searched
    # from its own start
    covers = [(1, 2), (5, 5), (9, 12)]
    assert run_ssr(covers, [(0, 6), (3, 4), (8, 20)]) == naive.ssr(covers, [(0, 6), (3, 4), (8, 20)])


scores_lists = st.lists(
    st.sampled_from([0.0, -1.0, 0.5, 1.0, 2.0, 1 / 42, 1e-300, float("inf")]), max_size=30
) | st.lists(st.floats(-1, 10, allow_nan=False), max_size=200)


@examples(300)
@given(scores_lists, st.integers(0, 40))
def test_top(scores, n):
    got = K.top(np.array(scores, dtype=np.float64), n)
    assert got.dtype == np.int64
    assert got.tolist() == naive.top(scores, n)


def test_top_examples():
    assert K.top([0, 3, 1, 3, 0.5], 2).tolist() == [1, 3]
    assert K.top([0, 3, 1, 3, 0.5], 100).tolist() == [1, 3, 2, 4]
    assert K.top([], 5).tolist() == []
    assert K.top([1.0, 1.0, 1.0, 1.0], 2).tolist() == [0, 1]
    assert K.top([float("nan"), 1.0, -0.0], 3).tolist() == [1]
    with pytest.raises(ValueError):
        K.top([1.0], -1)


@st.composite
def rankings(draw):
    """(scores, starts, lengths): runs laid end to end, each usually ranked (score
    descending, ties by start) as a shard's ranking is, sometimes not, with ties, equal
    starts and, rarely, NaN."""
    scores, starts, lengths = [], [], []
    values = st.sampled_from([0.5, 0.25, 1 / 3, 1.0, 0.0]) | st.floats(0, 2) | \
        st.just(float("nan"))
    for _ in range(draw(st.integers(1, 4))):
        rows = draw(st.lists(st.tuples(values, st.integers(0, 30)), max_size=25))
        if draw(st.integers(0, 4)):
            rows.sort(key=lambda r: (-r[0], r[1]))
        scores += [s for s, _ in rows]
        starts += [p for _, p in rows]
        lengths.append(len(rows))
    return scores, starts, lengths


@given(rankings(), st.integers(-1, 120))
def test_merge_ranked(ranked, n):
    scores, starts, lengths = ranked
    order, run = K.merge_ranked(np.array(scores, np.float64), starts, lengths, n)
    assert (order.tolist(), run.tolist()) == naive.merge_ranked(scores, starts, lengths, n)


def test_merge_ranked_examples():
    # two shards' rankings: a tie at 0.5 goes to the lower address, whichever shard
    order, run = K.merge_ranked([0.5, 0.25, 0.5, 0.1], [10, 3, 7, 1], [2, 2], 3)
    assert order.tolist() == [2, 0, 1] and run.tolist() == [1, 0, 0]
    order, run = K.merge_ranked([0.25, 0.5], [1, 2], [2], 5)   # not ranked: sorted
    assert order.tolist() == [1, 0] and run.tolist() == [0, 0]
    assert K.merge_ranked([], [], [0, 0], 10)[0].tolist() == []
    with pytest.raises(ValueError):
        K.merge_ranked([0.5], [1], [2], 1)


# ---------------------------------------------------------------- erasure and ranges


@examples(250)
@given(
    raw_intervals(60, 8, 0, 12) | raw_intervals(2000, 100, 0, 40),
    raw_intervals(60, 10, 0, 5) | raw_intervals(2000, 300, 0, 5),
)
def test_drop_erased(intervals, erase):
    erased = naive.merge_ranges(erase)
    assert K.drop_erased(*cols(intervals), *cols(erased)).tolist() == naive.drop_erased(
        intervals, erased
    )


@examples(250)
@given(raw_intervals(60, 8, 0, 12) | raw_intervals(2000, 200, 0, 30))
def test_merge_ranges(ranges):
    assert pairs(*K.merge_ranges(*cols(ranges))) == naive.merge_ranges(ranges)


@given(st.lists(st.integers(0, 60), max_size=20, unique=True),
       st.lists(st.integers(0, 70), max_size=30))
def test_block_ranges(firsts, ps):
    firsts, ps = sorted(firsts), sorted(ps)
    assert pairs(*K.block_ranges(firsts, ps)) == naive.block_ranges(firsts, ps)


@st.composite
def grouped_queries(draw):
    """(words, groups, firsts) for all_of_groups: a few words' points over 0..50, groups of
    words and phrases naming them, a container list's directory."""
    words = draw(st.lists(st.lists(st.integers(0, 50), max_size=25).map(
        lambda xs: sorted(set(xs))), min_size=1, max_size=5))
    leaf = st.lists(st.integers(0, len(words) - 1), min_size=1, max_size=3).map(tuple)
    groups = draw(st.lists(st.lists(leaf, min_size=1, max_size=3), min_size=1, max_size=3))
    firsts = sorted(set(draw(st.lists(st.integers(0, 50), min_size=1, max_size=8))))
    return words, groups, firsts


def flat(groups):
    """groups -> (toks, leaf_at, group_at) as all_of_groups takes them."""
    toks, leaf_at, group_at = [], [0], [0]
    for g in groups:
        for leaf in g:
            toks += leaf
            leaf_at.append(len(toks))
        group_at.append(len(leaf_at) - 1)
    return toks, leaf_at, group_at


@examples(400)
@given(grouped_queries())
def test_all_of_groups(case):
    words, groups, firsts = case
    s, e, _, need, _, _, los, his = K.all_of_groups(
        words, [len(w) for w in words], [1] * len(words), *flat(groups), firsts)
    assert not need.any()
    assert pairs(s, e) == naive.all_of_groups(words, groups, firsts)
    # (the ranges: the blocks holding a cover, what a ranking reads its containers from)
    assert pairs(los, his) == naive.block_ranges(firsts, s.tolist())


@examples(400)
@given(grouped_queries(), st.lists(st.booleans(), min_size=15, max_size=15),
       st.sampled_from([0, 2, 100]))
def test_all_of_groups_reads(case, missing, few):
    """Words not at hand are asked for where they are needed (at positions, or inside
    ranges: a phrase's one by one, or all at once at `few` candidates or fewer), and
    given only those points, round after round, the covers are the same."""
    words, groups, firsts = case
    # (a place for each token, as gcl gives them: what is read for one phrase serves it)
    places = [t for g in groups for leaf in g for t in leaf]
    _, leaf_at, group_at = flat(groups)
    # (the rarest group is found whole: its words at hand, the others' maybe not)
    sums = [sum(min(len(words[t]) for t in leaf) for leaf in g) for g in groups]
    rarest = set(range(leaf_at[group_at[sums.index(min(sums))]],
                       leaf_at[group_at[sums.index(min(sums)) + 1]]))
    have = [0 if missing[i % 15] and i not in rarest else 1 for i in range(len(places))]
    arrays = [words[t] if h else [] for t, h in zip(places, have)]
    counts = [len(words[t]) for t in places]
    for _ in range(len(places) + 1):
        s, e, _, need, pos, runs, los, his = K.all_of_groups(
            arrays, counts, have, range(len(places)), leaf_at, group_at, firsts, few)
        if not need.any():
            break
        if need[0] < 0:  # (the rarest group's words must be at hand)
            return
        for i in np.flatnonzero(need).tolist():
            if need[i] == 2:
                arrays[i] = [x for x in words[places[i]]
                             if any(lo <= x <= hi for lo, hi in zip(los.tolist(), his.tolist()))]
            else:
                asked = set(pos[runs[i]:runs[i + 1]].tolist())
                arrays[i] = [x for x in words[places[i]] if x in asked]
            have[i] = 1
    assert not need.any()
    assert pairs(s, e) == naive.all_of_groups(words, groups, firsts)


def test_all_of_groups_refuses_a_malformed_query():
    with pytest.raises(ValueError, match="non-empty runs"):
        K.all_of_groups([[1]], [1], [1], [0], [0, 1], [0, 0, 1], [0])
    with pytest.raises(ValueError, match="names no word"):
        K.all_of_groups([[1]], [1], [1], [1], [0, 1], [0, 1], [0])
    with pytest.raises(ValueError, match="named more than once"):
        K.all_of_groups([[]], [5], [0], [0, 0], [0, 2], [0, 1], [0])


@given(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(0, 45), max_size=30),
       st.integers(1, 4))
def test_runs_at(points, at, length):
    points, at = sorted(points), sorted(at)   # (points may repeat: nested intervals)
    assert K.runs_at(points, at, length).tolist() == naive.runs_at(points, at, length)


def test_runs_at_examples():
    assert K.runs_at([2, 3, 4, 7, 9], [2, 3, 6, 7, 9], 2).tolist() == [
        True, True, False, False, False]
    assert K.runs_at([5, 5, 6], [5], 2).tolist() == [True]
    assert K.runs_at([], [1], 1).tolist() == [False]
    with pytest.raises(ValueError):
        K.runs_at([1], [1], 0)


def test_ranges_examples():
    assert pairs(*K.merge_ranges([4, 1, 9], [5, 3, 10])) == [(1, 5), (9, 10)]
    assert pairs(*K.merge_ranges([], [])) == []
    # any order; an interval is dropped only when one erased range holds all of it
    got = K.drop_erased([1, 5, 9, 4, 3], [2, 5, 12, 10, 6], [4, 12], [10, 20])
    assert got.tolist() == [0, 2, 4]
    with pytest.raises(ValueError):
        K.merge_ranges([3], [2])


# ---------------------------------------------------------------- check's look at the blocks


# a list's blocks: each a few (delta, length) pairs (a delta of 0 repeats a start: damage)
_BLOCK = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 6)), min_size=1, max_size=9)
_DAMAGE = st.sampled_from(["none"] * 6 + ["key", "cut", "far"])


def _encoded(pairs, at, values):
    s = list(itertools.accumulate([at] + [d for d, _ in pairs[1:]]))
    e = [p + length for p, (_, length) in zip(s, pairs)]
    return s, e, naive.encode_block(s, e, values[:len(s)])


@examples(200)
@given(st.lists(st.tuples(st.integers(1, 3), _BLOCK, _DAMAGE, st.integers(-3, 12)),
                min_size=1, max_size=12),
       st.lists(st.floats(-3, 3) | st.just(float("nan")), min_size=9, max_size=9),
       raw_intervals(120, 12, 0, 12), raw_intervals(120, 5, 0, 3), st.integers(2, 9))
@example([(1, [(0, 2)], "none", 0), (1, [(0, 1)], "none", 2)],
         [1.0] * 9, [(0, 9)], [], 9)          # touching the previous block: an overlap
@example([(1, [(0, 2)], "none", 1)], [1.0] * 9, [(0, 3)], [], 9)   # ends with its document
@example([(1, [(0, 2)], "none", 6)], [1.0] * 9, [(4, 9)], [(5, 8)], 9)   # ends with an erasure
def test_block_checker_equals_the_brute_force(blocks, values, doc_ranges, erase,
                                              max_count):
    """Over a run of blocks (features in order, each block's start after the previous
    one's, except where a step back or a damage is drawn), the kernel stops exactly at
    each block that is not clean and its figures for the clean ones are the brute force's;
    the caller's handling of a block it stops at is simulated as check does it."""
    docs = naive.merge_ranges(doc_ranges)
    erased = naive.merge_ranges(erase)
    rows, at, fid_prev = [], 0, None
    for fid, pairs, damage, gap in sorted(blocks, key=lambda b: b[0]):
        if fid != fid_prev:
            at, fid_prev = 0, fid
        s, e, buf = _encoded(pairs, max(at + gap, 0), values)
        at = s[-1]
        key = s[0] + 1 if damage == "key" else s[0]
        if damage == "cut":
            buf = buf[:-1]
        if damage == "far":
            s, e, buf = _encoded(pairs, (1 << 53) - 2, values)
            key = s[0]
        rows.append((fid, key, buf, s, e, damage))
    checker = K.BlockChecker(*cols(docs), *cols(erased), max_count, 1 << 53)
    bufs = [r[2] for r in rows]
    offsets = np.cumsum([0] + [len(b) for b in bufs])
    fids = np.array([r[0] for r in rows])
    keys = np.array([r[1] for r in rows])
    i, last = 0, (None, -1, -1, -1)        # (fid, last_start, last_end, last_doc)
    while i < len(rows):
        done, n, held, high, over = checker.run(b"".join(bufs), offsets[i:], fids[i:], keys[i:])
        for j in range(i, len(rows)):      # the brute force, block by block
            fid, key, buf, s, e, damage = rows[j]
            if fid != last[0]:
                last = (fid, -1, -1, -1)
            ivs = list(zip(s, e))
            flags, h, last_doc, top = naive.block_facts(
                ivs, values[:len(s)], last[2], docs, erased, last[3])
            clean = (damage != "cut" and flags & 7 == 0 and key == s[0] and
                     s[0] > last[1] and e[0] > last[2] and e[-1] < (1 << 53) and
                     len(s) <= max_count)
            if damage != "cut" and len(s) <= max_count:   # (what check does at a stop too)
                last = (fid, s[-1], e[-1], last_doc)
            if not clean:
                assert done == j - i, (j, done)
                break
            k = j - i
            assert (n[k], held[k], bool(over[k])) == (len(s), h, bool(flags & 8)), j
            assert high[k] == top or (high[k] != high[k] and top != top)
        else:
            assert done == len(rows) - i
        i += done + 1
        if i <= len(rows):
            checker.set_position(last[0], last[1], last[2], last[3])


def test_block_checker_refuses_what_it_cannot_read():
    checker = K.BlockChecker([0], [5], [], [], 8192, 1 << 53)
    with pytest.raises(ValueError, match="2 blocks need 3 offsets"):
        checker.run(b"", [0, 0], [1, 1], [0, 0])
    with pytest.raises(ValueError, match="offsets must rise"):
        checker.run(b"abc", [0, 9], [1], [0])
    with pytest.raises(TypeError):
        K.BlockChecker([0.5], [5], [], [], 8192, 1 << 53)
    assert checker.run(b"", [0], [], [])[0] == 0


# ---------------------------------------------------------------- wrappers


def test_wrappers_validate_inputs():
    with pytest.raises(ValueError):
        K.both_of([1, 2], [1], [1], [1])
    with pytest.raises(TypeError):
        K.one_of(np.array([1.5]), np.array([2.0]), [1], [1])
    with pytest.raises(ValueError):
        K.contained_in(np.zeros((2, 2), np.int64), [1, 2], [1], [1])
    with pytest.raises(ValueError):
        K.normalize([1], [1], [1.0, 2.0])
    with pytest.raises(ValueError):
        K.normalize([3], [2], [0.0])


def test_wrappers_accept_other_int_dtypes_and_readonly_arrays():
    a = np.frombuffer(np.array([1, 10], dtype="<i8").tobytes(), dtype="<i8")
    assert not a.flags.writeable
    b = np.array([5], dtype=np.int32)
    s, e = K.both_of(a, a, b, b)
    assert pairs(s, e) == [(1, 5), (5, 10)]
    assert K.contained_in(a, a, [], []).tolist() == []
    assert pairs(*K.one_of([], [], np.array([3], np.uint8), np.array([4], np.uint8))) == [(3, 4)]


def _nudged(intervals, data):
    """A GC-list with one endpoint moved by -1, 0 or +1: the lists on either side of
    the definition's edges (equal starts or ends, p = q + 1, a neighbour just inside)."""
    if not intervals:
        return intervals
    out = list(intervals)
    i = data.draw(st.integers(0, len(out) - 1))
    end, by = data.draw(st.integers(0, 1)), data.draw(st.integers(-1, 1))
    p, q = out[i]
    out[i] = (p, q + by) if end else (p + by, q)
    return out


@examples(500)
@given(st.one_of(raw_intervals(12, 4), small, dense_lists(12), st.lists(st.tuples(
    st.integers(0, 6), st.integers(0, 6)), max_size=5)), st.booleans(), st.data())
def test_is_gc_list(intervals, nudge, data):
    if nudge:
        intervals = _nudged(intervals, data)
    assert K.is_gc_list(*cols(intervals)) == naive.is_gc_list(intervals), intervals


def test_is_gc_list_examples():
    assert K.is_gc_list([], [])
    assert K.is_gc_list([1, 2], [3, 4])
    assert not K.is_gc_list([1, 1], [3, 4])
    assert not K.is_gc_list([1, 2], [4, 3])
    assert not K.is_gc_list([2], [1])
    assert not K.is_gc_list([1, 2], [3, 3])    # (2, 3) inside (1, 3)
    assert K.is_gc_list([5], [5])


# ---------------------------------------------------------------- the same tests without the JIT


@pytest.mark.skipif(bool(os.environ.get(NOJIT_CHILD)), reason="already the pure-Python run")
def test_pure_python_run():
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", **{NOJIT_CHILD: "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-n", "0",
         "-p", "no:cacheprovider"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_append_point_groups_refills_last_blocks_and_flags_non_appends():
    rng = np.random.default_rng(7)
    lasts, offsets, groups, bounds, want = [], [0], [], [0], []
    for g in range(40):
        old = np.cumsum(rng.integers(1, [3, 300, 70000][g % 3], rng.integers(1, 900)))
        new = old[-1] + np.cumsum(rng.integers(1, 50, rng.integers(1, 3000)))
        if g % 7 == 3:
            new = new - old[-1]             # starts before the list's end: not an append
        block = K.encode_block(old, old, np.zeros(len(old))) if g % 5 else b""
        lasts.append(block)
        offsets.append(offsets[-1] + len(block))
        groups.append(new)
        bounds.append(bounds[-1] + len(new))
        want.append((old if g % 5 else np.empty(0, np.int64), new))
    buf, offs, grp, first, ok = K.append_point_groups(
        b"".join(lasts), offsets, np.concatenate(groups), bounds, 2000, 2048)
    for g, (old, new) in enumerate(want):
        mine = [i for i in range(len(grp)) if grp[i] == g]
        if g % 7 == 3 and len(old):
            assert not ok[g] and not mine
            continue
        assert ok[g]
        blocks = [K.decode_block(bytes(buf[offs[i]:offs[i + 1]])) for i in mine]
        assert all(offs[i + 1] - offs[i] <= 2000 for i in mine)
        got = np.concatenate([b[0] for b in blocks])
        refilled = len(old) and len(lasts[g]) < 2000
        expect = np.concatenate((old, new)) if refilled else new
        assert got.tolist() == expect.tolist()
        assert [int(first[i]) for i in mine] == [int(b[0][0]) for b in blocks]


def test_group_order_is_a_stable_sort():
    rng = np.random.default_rng(3)
    for n, k in [(0, 1), (1, 1), (50, 3), (5000, 700), (0, 10**6), (30, 10**6)]:
        ids = rng.integers(0, k, n)
        assert K.group_order(ids, k).tolist() == np.argsort(ids, kind="stable").tolist()
    with pytest.raises(ValueError):
        K.group_order([0, 5], 5)


def test_encode_point_groups_cuts_lists_into_point_blocks_within_the_budget():
    rng = np.random.default_rng(0)
    for t in range(30):
        sizes = rng.integers(1, 6000 if t % 5 == 0 else 20, rng.integers(1, 30))
        groups = [np.cumsum(rng.integers(1, [3, 300, 70000, 1 << 33][t % 4], n))
                  for n in sizes]
        addrs, bounds = np.concatenate(groups), np.concatenate(([0], np.cumsum(sizes)))
        buf, off, grp, first = K.encode_point_groups(addrs, bounds, 2000, 2048)
        blocks = [K.decode_block(bytes(buf[off[i]:off[i + 1]])) for i in range(len(grp))]
        assert all(off[i + 1] - off[i] <= 2000 for i in range(len(grp)))
        assert all((b[0] == b[1]).all() and not b[2].any() for b in blocks)
        assert [int(b[0][0]) for b in blocks] == first.tolist()
        for g, want in enumerate(groups):
            got = np.concatenate([b[0] for b, gg in zip(blocks, grp) if gg == g])
            assert got.tolist() == want.tolist()


# ---------------------------------------------------------------- block encodings (format 2)


SPAN = 1 << 59


@st.composite
def block_lists(draw, max_size=300):
    """A GC-list whose gaps and lengths come from one magnitude per list, so both byte
    widths and bit-packing occur (and, with 58-bit gaps, 8-byte numbers). Addresses stay
    within the int64 contract: non-negative and below SPAN (2**59; lengths add < 2**40), so
    eight lists laid end to end are still far from 2**63 (its gaps once summed past it)."""
    gap_bits = draw(st.sampled_from([1, 4, 7, 8, 9, 15, 16, 17, 31, 33, 50, 58]))
    n = draw(st.integers(1, min(max_size, SPAN >> gap_bits)))
    len_bits = draw(st.sampled_from([0, 0, 3, 9, 20, 40]))
    gaps = draw(st.lists(st.integers(1, (1 << gap_bits) - 1), min_size=n, max_size=n))
    lengths = draw(st.lists(st.integers(0, (1 << len_bits) - 1) if len_bits else
                            st.just(0), min_size=n, max_size=n))
    s = np.cumsum(np.array(gaps, dtype=np.int64)) - 1
    e = s + np.array(lengths, dtype=np.int64)
    # lengths must not let a later interval nest in an earlier one
    e = np.maximum.accumulate(e)
    e[1:] = np.maximum(e[1:], e[:-1] + 1)
    assert s[0] >= 0 and e[-1] < 2 * SPAN
    zero = draw(st.booleans())
    v = np.zeros(n) if zero else np.array(draw(st.lists(
        st.floats(allow_nan=False), min_size=n, max_size=n)), dtype=np.float64)
    return s, e, v


def _header_widths(buf):
    return buf[1], buf[2]


@examples(150)
@given(block_lists())
def test_block_round_trip_both_encodings(lst):
    s, e, v = lst
    buf = K.encode_block(s, e, v)
    assert K.block_bytes(buf[:16]) == len(buf)
    for w in _header_widths(buf):
        assert w in (1, 2, 4, 8) or (w & 128 and 1 <= w & 127 <= 56)
    got = K.decode_block(buf)
    assert got[0].tolist() == s.tolist() and got[1].tolist() == e.tolist()
    assert got[2].tolist() == v.tolist()


def test_bit_packing_rule():
    # gaps < 128: 7 bits save only 1/8 of one byte each: whole bytes
    a = np.cumsum(np.full(100, 127)).astype(np.int64)
    assert K.encode_block(a, a, np.zeros(100))[1] == 1
    # gaps < 512: 9 bits against 2 bytes: packed
    b = np.cumsum(np.full(100, 511)).astype(np.int64)
    buf = K.encode_block(b, b, np.zeros(100))
    assert buf[1] == 128 + 9 and len(buf) == 16 + (99 * 9 + 7) // 8
    # lengths too
    c = np.arange(100, dtype=np.int64) * 1000
    buf = K.encode_block(c, c + 300, np.zeros(100))
    assert buf[2] == 128 + 9


@examples(100)
@given(block_lists(max_size=2000), st.integers(40, 5000), st.integers(1, 9000))
def test_block_bounds_cut_exactly_at_the_budget(lst, budget, max_count):
    s, e, v = lst
    cuts = K.block_bounds(s, e, v, budget, max_count).tolist()
    assert cuts[0] == 0 and cuts[-1] == len(s)
    bufs = []
    for i, j in zip(cuts[:-1], cuts[1:]):
        buf = K.encode_block(s[i:j], e[i:j], v[i:j])
        assert j - i <= max_count
        assert len(buf) <= budget or j - i == 1
        if j < len(s) and j - i < max_count:   # one more interval would not have fit
            assert len(K.encode_block(s[i:j + 1], e[i:j + 1], v[i:j + 1])) > budget
        bufs.append(buf)
    offsets = np.concatenate(([0], np.cumsum([len(b) for b in bufs])))
    gs, ge, gv, points, zero = K.decode_blocks(b"".join(bufs), offsets)
    assert gs.tolist() == s.tolist() and ge.tolist() == e.tolist()
    assert zero == (not v.any()) and (zero or gv.tolist() == v.tolist())


@examples(60)
@given(st.lists(block_lists(max_size=200), min_size=1, max_size=6))
def test_decode_blocks_mixes_encodings_points_and_values(lists):
    # blocks of unrelated lists laid end to end, shifted so starts keep rising
    bufs, want_s, want_e, want_v, base = [], [], [], [], 0
    for s, e, v in lists:
        s, e = s + base, e + base
        base = int(e[-1]) + 1
        bufs.append(K.encode_block(s, e, v))
        want_s += s.tolist(); want_e += e.tolist(); want_v += v.tolist()
    offsets = np.concatenate(([0], np.cumsum([len(b) for b in bufs])))
    gs, ge, gv, points, zero = K.decode_blocks(b"".join(bufs), offsets)
    assert gs.tolist() == want_s and ge.tolist() == want_e
    assert points == all(w == s for w, s in zip(want_e, want_s))
    assert (not any(want_v)) if zero else gv.tolist() == want_v


@examples(60)
@given(st.lists(st.tuples(st.sampled_from([2, 100, 300, 70000, 1 << 20]),
                          st.integers(1, 3000), st.integers(0, 3000), st.booleans()),
                min_size=1, max_size=8))
def test_append_point_groups_with_packed_and_byte_blocks(spec):
    rng = np.random.default_rng(len(spec))
    lasts, offsets, groups, bounds, want = [], [0], [], [0], []
    for gap, n_old, n_new, has_last in spec:
        old = np.cumsum(rng.integers(1, gap, n_old)).astype(np.int64)
        if has_last:
            old = old[:K.block_bounds(old, old, np.zeros(len(old)), 4080, 8192)[1]]
        new = (old[-1] if has_last else 0) + np.cumsum(rng.integers(1, gap, n_new + 1))
        block = K.encode_block(old, old, np.zeros(len(old))) if has_last else b""
        lasts.append(block)
        offsets.append(offsets[-1] + len(block))
        groups.append(new)
        bounds.append(bounds[-1] + len(new))
        want.append((old if has_last else np.empty(0, np.int64), new, block))
    buf, offs, grp, first, ok = K.append_point_groups(
        b"".join(lasts), offsets, np.concatenate(groups), bounds, 4080, 8192)
    assert ok.all()
    for g, (old, new, block) in enumerate(want):
        mine = [i for i in range(len(grp)) if grp[i] == g]
        blocks = [K.decode_block(bytes(buf[offs[i]:offs[i + 1]])) for i in mine]
        assert all(offs[i + 1] - offs[i] <= 4080 for i in mine)
        got = np.concatenate([b[0] for b in blocks])
        refilled = len(old) and len(block) < 4080 and len(old) < 8192
        expect = np.concatenate((old, new)) if refilled else new
        assert got.tolist() == expect.tolist()


@examples(60)
@given(st.lists(st.tuples(st.sampled_from([2, 100, 300, 70000]), st.integers(0, 400),
                          st.integers(0, 4500), st.booleans(), st.booleans()),
                min_size=1, max_size=8),
       st.sampled_from([(512, 8192), (512, 40), (4080, 8192)]))
def test_append_point_groups_single_leaves_out_the_lists_of_many_blocks(spec, limits):
    """With single=True, append_point_groups writes exactly the blocks it writes without,
    for the groups that make one block (or none, not being an append) there; a group that
    makes more than one block there makes none, and is ok (a flush's tails that spill), as
    is a group of more new points than one block can hold, unchecked."""
    budget, max_count = limits
    rng = np.random.default_rng(len(spec))
    lasts, offsets, groups, bounds = [], [0], [], [0]
    for gap, n_old, n_new, has_last, after in spec:
        old = np.cumsum(rng.integers(1, gap, n_old + 1)).astype(np.int64)
        old = old[:K.block_bounds(old, old, np.zeros(len(old)), budget, max_count)[1]]
        start = old[-1] if after or not len(old) else old[0] - 1
        new = start + np.cumsum(rng.integers(1, gap, n_new + 1))
        block = K.encode_block(old, old, np.zeros(len(old))) if has_last else b""
        lasts.append(block)
        offsets.append(offsets[-1] + len(block))
        groups.append(new)
        bounds.append(bounds[-1] + len(new))
    args = (b"".join(lasts), offsets, np.concatenate(groups), bounds, budget, max_count)
    buf, offs, grp, first, ok = K.append_point_groups(*args)
    sbuf, soffs, sgrp, sfirst, sok = K.append_point_groups(*args, single=True)
    made = np.bincount(grp, minlength=len(spec))
    want = [i for i in range(len(grp)) if made[grp[i]] == 1]
    assert sgrp.tolist() == grp[want].tolist() and sfirst.tolist() == first[want].tolist()
    assert [bytes(sbuf[soffs[i]:soffs[i + 1]]) for i in range(len(sgrp))] == \
        [bytes(buf[offs[i]:offs[i + 1]]) for i in want]
    # a group of more new points than one block holds is left out unchecked
    one_block = min(max_count, (budget - 16) * 8 + 1)
    many = np.diff(bounds) > one_block
    assert sok.tolist() == (ok | (made > 1) | many).tolist()


@examples(60)
@given(block_lists(max_size=600), st.sampled_from([(120, 8192), (300, 7), (4080, 128)]))
def test_encode_blocks_equals_block_by_block(lst, limits):
    """encode_blocks cuts a list where naive.block_cuts does and encodes each block byte for
    byte as naive.encode_block does."""
    s, e, v = lst
    buf, offsets, cuts = K.encode_blocks(s, e, v, *limits)
    assert cuts.tolist() == naive.block_cuts(s, e, v, *limits)
    assert offsets[0] == 0 and offsets[-1] == len(buf)
    assert [bytes(buf[a:b]) for a, b in zip(offsets[:-1], offsets[1:])] == \
        [naive.encode_block(s[a:b], e[a:b], v[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def test_a_token_block_with_room_is_appended_to_in_place():
    """The last block of a token list takes new points without being decoded and re-encoded
    when its number width holds their gaps: its bytes are kept, the count grows."""
    old = np.arange(0, 3000, 3, dtype=np.int64)
    block = K.encode_block(old, old, np.zeros(len(old)))
    for new, in_place in ((old[-1] + np.arange(3, 300, 3), True),
                          (old[-1] + np.array([3, 70000]), False)):   # a gap too wide
        new = new.astype(np.int64)
        buf, offs, grp, first, ok = K.append_point_groups(
            block, [0, len(block)], new, [0, len(new)], 4080, 8192)
        assert ok.all() and grp.tolist() == [0] * len(grp) and first[0] == 0
        out = bytes(buf[offs[0]:offs[1]])
        if in_place:
            assert len(grp) == 1
            assert out[:4] == block[:4] and out[8:len(block) - 1] == block[8:len(block) - 1]
        got = np.concatenate([K.decode_block(bytes(buf[offs[i]:offs[i + 1]]))[0]
                              for i in range(len(grp))])
        assert got.tolist() == old.tolist() + new.tolist()
    # not after the last point: flagged, nothing written for it
    _, _, grp, _, ok = K.append_point_groups(block, [0, len(block)], np.array([5]), [0, 1],
                                             4080, 8192)
    assert not ok[0] and len(grp) == 0


# ---------------------------------------------------------------- the ingest writer's kernels

from annodb.kernels import codec as C  # noqa: E402  (the kernels behind the wrappers)


@examples(150)
@given(block_lists(max_size=1200), st.sampled_from([16, 17, 30, 40, 100, 333, 2000, 4080, 9000]),
       st.sampled_from([1, 2, 5, 100, 1000, 8192, 1 << 40]))
def test_block_cuts_equal_the_naive_ones(lst, budget, max_count):
    """_cut keeps the widths between intervals and _cut_points skips the size test while
    the count surely fits: the cuts and shapes are still the ones a fresh size computation
    at every interval gives (the block format depends on them)."""
    s, e, v = lst
    cuts = K.block_bounds(s, e, v, budget, max_count).tolist()
    assert cuts == naive.block_cuts(s, e, v, budget, max_count)
    points = s.copy()
    assert K.block_bounds(points, points, np.zeros(len(s)), budget, max_count).tolist() == \
        naive.block_cuts(points, points, np.zeros(len(s)), budget, max_count)
    for i, j in zip(cuts[:-1], cuts[1:]):
        end, size, flags, sw, lw = C._cut(s, e, v, i, len(s), budget, max_count)
        assert end == j
        assert (size, flags, sw, lw) == tuple(C._block_shape(s, e, v, i, j))
        assert size == len(K.encode_block(s[i:j], e[i:j], v[i:j]))
    lo = 0
    while lo < len(s):
        end, size, sw = C._cut_points(points, lo, len(s), budget, max_count)
        assert (end, size, 3, sw, 1) == C._cut(points, points, np.zeros(len(s)), lo, len(s),
                                               budget, max_count)
        lo = end


@examples(100)
@given(block_lists(max_size=600))
def test_a_blocks_last_interval_without_decoding(lst):
    s, e, v = lst
    buf = np.frombuffer(K.encode_block(s, e, v), np.uint8)
    assert C._block_last(buf) == (s[-1], e[-1])
    # the gap stream's sum, wherever the stream ends in the buffer
    sw = int(buf[1])
    pos = 16 + (0 if buf[0] & 2 else 8 * len(s))
    for tail in (0, 3, 8):
        padded = np.concatenate((buf, np.full(tail, 255, np.uint8)))
        assert C._stream_sum(padded, pos, sw, len(s) - 1) == s[-1] - s[0]


@examples(150)
@given(st.sampled_from([1, 4, 7, 9, 16, 17, 24, 33]), st.integers(2, 1500),
       st.sampled_from([1, 4, 7, 9, 16, 17, 24, 33]), st.integers(1, 600),
       st.integers(-3, 3), st.sampled_from([100, 1000, 4080]),
       st.sampled_from([50, 700, 8192]), st.randoms(use_true_random=False))
def test_appendable_against_a_decoding_reference(old_bits, n_old, new_bits, n_new, shift,
                                                 budget, max_count, rnd):
    """_appendable tests the cheap conditions first and sums the gaps only then; its answer
    is the one got by decoding the block."""
    old = np.cumsum([rnd.randint(1, (1 << old_bits) - 1) for _ in range(n_old)])
    new = np.cumsum([rnd.randint(1, (1 << new_bits) - 1) for _ in range(n_new)])
    old, new = old.astype(np.int64), new.astype(np.int64) + old[-1]
    if shift <= 0:  # the first new point at or before the last: no append
        new += old[-1] + shift - new[0]
    elif shift == 1:  # right after it
        new += old[-1] + 1 - new[0]
    block = np.frombuffer(K.encode_block(old, old, np.zeros(n_old)), np.uint8)
    addrs = np.concatenate(([7, 7], new, [0])).astype(np.int64)  # new is addrs[2:-1]
    size, last = C._appendable(block, addrs, 2, 2 + n_new, budget, max_count)
    # the reference: decode, then test every condition
    code = int(block[1])
    last_ref = int(K.decode_block(block.tobytes())[0][-1])
    limit = 1 << (code & 127) if code & 128 else 1 << (8 * code)
    gaps = np.diff(np.concatenate(([last_ref], new)))
    count = n_old + n_new
    want = 16 + naive_stream_size(code, count - 1)
    no_append = new[0] <= last_ref
    fits = count <= max_count and want <= budget and bool((gaps < limit).all())
    if not no_append and fits:
        assert (size, last) == (want, last_ref)
    elif size == -2:
        assert no_append and last == last_ref
    else:
        assert size == -1 and (no_append or not fits)
        assert last in (-1, last_ref)
    if no_append and fits:
        assert size == -2


def naive_stream_size(code, count):
    return ((code & 127) * count + 7) // 8 if code & 128 else code * count


def test_new_points_after_blocks_with_values_have_value_0():
    """A last block with values that is not refilled (full, or the new points do not come
    after it) does not lend its values to the points written after it: they make points of
    value 0 (they once took that block's values)."""
    s = np.arange(0, 4000, 10, dtype=np.int64)
    e = s + 3
    v = np.arange(1, len(s) + 1, dtype=np.float64)
    k = int(K.block_bounds(s, e, v, 300, 8192)[1])
    full = K.encode_block(s[:k], e[:k], v[:k])  # full: max_count below is k
    some = K.encode_block(s[:k - 3], e[:k - 3], v[:k - 3])  # room
    tokens = K.encode_block(s[:5], s[:5], np.zeros(5))
    lasts = [full, tokens, full, some, b""]
    offsets = np.cumsum([0] + [len(b) for b in lasts])
    last_end = int(K.decode_block(full)[1][-1])
    groups = [np.arange(last_end + 1, last_end + 80, dtype=np.int64),
              np.arange(100, 140, dtype=np.int64),
              np.array([last_end], dtype=np.int64),  # not after its last interval
              np.arange(50, 90, dtype=np.int64),  # nor this
              np.arange(5000, 5050, dtype=np.int64)]
    bounds = np.cumsum([0] + [len(x) for x in groups])
    buf, offs, grp, first, ok = K.append_point_groups(b"".join(lasts), offsets,
                                                      np.concatenate(groups), bounds, 300, k)
    assert ok.tolist() == [True, True, False, False, True]
    for g, want in ((0, groups[0]), (1, np.concatenate((s[:5], groups[1]))), (4, groups[4])):
        blocks = [K.decode_block(bytes(buf[offs[i]:offs[i + 1]]))
                  for i in range(len(grp)) if grp[i] == g]
        assert np.concatenate([b[0] for b in blocks]).tolist() == want.tolist()
        assert all((b[0] == b[1]).all() and not b[2].any() for b in blocks)
        assert all(buf[offs[i]] == 3 for i in range(len(grp)) if grp[i] == g)
    assert set(grp.tolist()) == {0, 1, 4}


@examples(100)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 60)), max_size=25),
       st.integers(1, 30), st.randoms(use_true_random=False), st.sampled_from([1, 99_991]))
def test_group_postings_against_numpy_and_naive(spec, n_ids, rnd, spread):
    """Also with few ids out of many (spread: ids and n_ids scaled up), which the wrappers
    count over the ids' ranks rather than over every id (COMPACT_BELOW)."""
    runs, at = [], 0  # (first address, count), in address order
    for gap, count in spec:
        runs.append((at + gap, count))
        at += gap + count
    n = sum(c for _, c in runs)
    # skewed to small ids, as word frequencies are
    ids = np.array([min(rnd.randrange(n_ids) for _ in range(3)) * spread for _ in range(n)],
                   dtype=np.int64)
    n_ids *= spread
    starts = np.array([a for a, _ in runs], dtype=np.int64)
    counts = np.array([c for _, c in runs], dtype=np.int64)
    fids, bounds, addrs = K.group_postings(ids, starts, counts, n_ids)
    assert fids.dtype == bounds.dtype == addrs.dtype == np.int64
    want = naive.group_postings(ids.tolist(), runs)
    assert (fids.tolist(), bounds.tolist(), addrs.tolist()) == want
    if n:  # the numpy code Writer._flush had (it fails on no tokens)
        offsets = np.cumsum(counts) - counts
        all_addrs = np.arange(n, dtype=np.int64) + np.repeat(starts - offsets, counts)
        order = K.group_order(ids, n_ids)
        sorted_ids = ids[order]
        cuts = np.flatnonzero(np.diff(sorted_ids)) + 1
        ref_bounds = np.concatenate(([0], cuts, [n]))
        assert fids.tolist() == sorted_ids[ref_bounds[:-1]].tolist()
        assert bounds.tolist() == ref_bounds.tolist()
        assert addrs.tolist() == all_addrs[order].tolist()


@examples(100)
@given(st.lists(st.tuples(st.lists(st.integers(-5, 10**15), max_size=6),
                          st.integers(0, 8), st.integers(0, 8)), max_size=12),
       st.lists(st.integers(-5, 10**15), max_size=30))
def test_join_groups_equals_the_naive_one(groups, second):
    """Each group of the result is its run of `first`, then its run of `second` (which
    may be empty, overlap other groups' or leave parts of `second` out)."""
    first = [x for f, _, _ in groups for x in f]
    first_bounds = np.cumsum([0] + [len(f) for f, _, _ in groups]).tolist()
    los = [min(a, len(second)) for _, a, _ in groups]
    his = [min(a + b, len(second)) for _, a, b in groups]
    values, bounds = K.join_groups(np.array(first, dtype=np.int64), first_bounds,
                                   np.array(second, dtype=np.int64), los, his)
    assert values.dtype == bounds.dtype == np.int64
    assert (values.tolist(), bounds.tolist()) == naive.join_groups(first, first_bounds,
                                                                   second, los, his)


def test_join_groups_validation():
    K.join_groups([], [0], [], [], [])
    with pytest.raises(ValueError):
        K.join_groups([1], [0, 1], [5], [0], [2])      # a second group past its end
    with pytest.raises(ValueError):
        K.join_groups([1], [0, 2], [5], [0], [1])      # a first group past its end
    with pytest.raises(ValueError):
        K.join_groups([1], [0], [5], [0], [1])         # one first group per group
    with pytest.raises(ValueError):
        K.join_groups([1, 2], [0, 2, 1], [5], [0, 0], [1, 1])   # bounds fall


def test_group_postings_edges_and_validation():
    fids, bounds, addrs = K.group_postings(np.zeros(0, np.int64), [], [], 5)
    assert fids.tolist() == [] and bounds.tolist() == [0] and addrs.tolist() == []
    fids, bounds, addrs = K.group_postings([2, 0, 2, 2], [10], [4], 3)   # one run
    assert fids.tolist() == [0, 2] and bounds.tolist() == [0, 1, 4]
    assert addrs.tolist() == [11, 10, 12, 13]
    with pytest.raises(ValueError):
        K.group_postings([0, 1], [0], [3], 2)         # counts do not sum to len(ids)
    with pytest.raises(ValueError):
        K.group_postings([0, 2], [0], [2], 2)         # id out of range
    with pytest.raises(ValueError):
        K.group_postings([0, -1], [0], [2], 2)
    with pytest.raises(ValueError):
        K.group_postings([0, 1], [0, 5], [3, -1], 2)  # a negative count
    with pytest.raises(ValueError):
        K.group_postings([0, 1], [0, 5], [2], 2)      # one count per run
