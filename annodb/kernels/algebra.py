"""Numba kernels of the region algebra over GC-lists (the only module that imports numba).

A *GC-list* is three parallel arrays ``starts`` (int64), ``ends`` (int64), ``values``
(float64) of closed intervals [p, q], sorted by start, in which no interval contains
another and none repeats -- so starts and ends are both strictly increasing. A token list
is a GC-list of points (p == q). Addresses are int64 >= 0.

Every public function is a thin wrapper: it converts its inputs to contiguous arrays of
the right dtype, checks lengths, and calls a private ``@njit(cache=True, nogil=True)``
function that computes over flat arrays and returns new arrays. Wrappers do not check
that GC-list inputs are sorted (that would cost as much as the kernel); use
:func:`is_gc_list` in assertions and tests. Results are defined by the brute-force twins
of the same names in ``tests/naive.py``.

Merges are linear two-pointer walks; every forward search gallops (exponential probe,
then binary search), so when one list is much shorter than the other the cost is
O(short * log(long / short)) rather than O(long).
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit

__all__ = [
    "normalize",
    "both_of",
    "one_of",
    "followed_by",
    "contained_in",
    "containing",
    "not_contained_in",
    "not_containing",
    "ssr",
    "top",
    "drop_erased",
    "merge_ranges",
    "block_ranges",
    "runs_at",
    "merge_ranked",
    "is_gc_list",
]

_I64_MAX = np.iinfo(np.int64).max
_I64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)
_EMPTY_I = np.empty(0, np.int64)


# ---------------------------------------------------------------- input conversion


def _ints(x, name: str) -> np.ndarray:
    """A 1-d contiguous int64 copy-or-view of x; refuses non-integer data (empty is fine)."""
    if type(x) is np.ndarray and x.dtype == _I64 and x.ndim == 1 and x.flags.c_contiguous:
        return x  # (what the kernels' callers pass, ~100 times a query)
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size == 0:
        return _EMPTY_I
    if a.dtype.kind not in "iub":
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")
    if a.dtype == np.uint64 and a.max() > _I64_MAX:
        raise ValueError(f"{name} holds values above the int64 range")
    return np.ascontiguousarray(a, dtype=np.int64)


def _floats(x, name: str) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == _F64 and x.ndim == 1 and x.flags.c_contiguous:
        return x  # (what the BM25 kernels' callers pass, several times a query)
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iubf":
        raise TypeError(f"{name} must hold numbers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float64)


def _pair(starts, ends, name: str) -> tuple[np.ndarray, np.ndarray]:
    if type(starts) is np.ndarray and type(ends) is np.ndarray and \
            starts.dtype == _I64 and ends.dtype == _I64 and starts.ndim == 1 and \
            starts.shape == ends.shape and starts.flags.c_contiguous and \
            ends.flags.c_contiguous:
        return starts, ends  # (what the evaluator passes, ~20 times a query: no more calls)
    s = _ints(starts, f"{name} starts")
    e = _ints(ends, f"{name} ends")
    if s.shape[0] != e.shape[0]:
        raise ValueError(f"{name}: {s.shape[0]} starts but {e.shape[0]} ends")
    return s, e


def _check_ordered(s: np.ndarray, e: np.ndarray, name: str) -> None:
    if s.size and bool((e < s).any()):
        i = int(np.flatnonzero(e < s)[0])
        raise ValueError(f"{name}: interval {i} ends before it starts ({s[i]} > {e[i]})")


def is_gc_list(starts, ends) -> bool:
    """True when (starts, ends) is a GC-list: p <= q, starts and ends strictly increasing."""
    s, e = _pair(starts, ends, "list")
    return bool(
        (e >= s).all() and (np.diff(s) > 0).all() and (np.diff(e) > 0).all()
    )


# ---------------------------------------------------------------- search primitives


@njit(cache=True, nogil=True)
def _ge(a, lo, hi, x):
    """First i in [lo, hi) with a[i] >= x, else hi; a is sorted. Gallops from lo."""
    if lo >= hi or a[lo] >= x:
        return lo
    base = lo  # invariant: a[base] < x
    step = 1
    probe = lo + 1
    while probe < hi and a[probe] < x:
        base = probe
        step *= 2
        probe = base + step
    if probe > hi:
        probe = hi
    lo = base + 1
    while lo < probe:
        mid = (lo + probe) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            probe = mid
    return lo


@njit(cache=True, nogil=True)
def _gt(a, lo, hi, x):
    """First i in [lo, hi) with a[i] > x, else hi; a is sorted. Gallops from lo."""
    if lo >= hi or a[lo] > x:
        return lo
    base = lo  # invariant: a[base] <= x
    step = 1
    probe = lo + 1
    while probe < hi and a[probe] <= x:
        base = probe
        step *= 2
        probe = base + step
    if probe > hi:
        probe = hi
    lo = base + 1
    while lo < probe:
        mid = (lo + probe) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            probe = mid
    return lo


@njit(cache=True, nogil=True)
def _trim(a, m):
    """a[:m]; copied when that frees more than half of a's memory."""
    if 2 * m >= a.shape[0]:
        return a[:m]
    return a[:m].copy()


# ---------------------------------------------------------------- normalize


@njit(cache=True, nogil=True)
def _normalize(s, e, v):
    # s, e, v sorted by (start asc, end desc), stable in write order.
    n = s.shape[0]
    keep = np.zeros(n, np.bool_)
    min_end = _I64_MAX
    have_min = False
    for i in range(n - 1, -1, -1):
        if i + 1 < n and s[i + 1] == s[i] and e[i + 1] == e[i]:
            continue  # an earlier write of the same (p, q): the later one (i + 1) wins
        # Every later interval starts at or after s[i]; one ending at or before e[i] is
        # a distinct interval inside [s[i], e[i]], so i is not minimal.
        if not have_min or e[i] < min_end:
            keep[i] = True
            min_end = e[i]
            have_min = True
    m = 0
    for i in range(n):
        if keep[i]:
            m += 1
    rs = np.empty(m, np.int64)
    re = np.empty(m, np.int64)
    rv = np.empty(m, np.float64)
    m = 0
    for i in range(n):
        if keep[i]:
            rs[m] = s[i]
            re[m] = e[i]
            rv[m] = v[i]
            m += 1
    return rs, re, rv


def normalize(starts, ends, values):
    """Any intervals (in write order) -> a GC-list (starts, ends, values).

    An exact duplicate (p, q) keeps the value of its last write; an interval that
    contains another distinct interval is dropped (the inner one stays).
    """
    s, e = _pair(starts, ends, "normalize")
    v = _floats(values, "normalize values")
    if v.shape[0] != s.shape[0]:
        raise ValueError(f"normalize: {s.shape[0]} intervals but {v.shape[0]} values")
    _check_ordered(s, e, "normalize")
    if s.shape[0] < 2 or (bool((s[1:] > s[:-1]).all()) and bool((e[1:] > e[:-1]).all())):
        return s.copy(), e.copy(), v.copy()
    order = np.lexsort((~e, s))  # start asc, end desc; stable, so write order within ties
    return _normalize(s[order], e[order], v[order])


# ---------------------------------------------------------------- combining operators


@njit(cache=True, nogil=True)
def _both_of(as_, ae, bs, be):
    na = as_.shape[0]
    nb = bs.shape[0]
    cap = na + nb
    rs = np.empty(cap, np.int64)
    re = np.empty(cap, np.int64)
    m = 0
    if na == 0 or nb == 0:
        return rs[:0], re[:0]
    k = min(as_[0], bs[0])
    ia = 0
    ib = 0
    ja = 0  # first A ending after v
    jb = 0  # first B ending after v
    while True:
        ia = _ge(as_, ia, na, k)  # first A starting at or after k
        ib = _ge(bs, ib, nb, k)
        if ia >= na or ib >= nb:
            break
        v = max(ae[ia], be[ib])
        ja = _gt(ae, max(ja, ia), na, v)  # ja - 1: last A ending at or before v
        jb = _gt(be, max(jb, ib), nb, v)
        u = min(as_[ja - 1], bs[jb - 1])
        rs[m] = u
        re[m] = v
        m += 1
        if u == _I64_MAX:
            break
        k = u + 1
    return _trim(rs, m), _trim(re, m)


def both_of(as_, ae, bs, be):
    """``(^ A B)``: the minimal intervals containing an A-interval and a B-interval."""
    as_, ae = _pair(as_, ae, "A")
    bs, be = _pair(bs, be, "B")
    return _both_of(as_, ae, bs, be)


@njit(cache=True, nogil=True)
def _one_of(as_, ae, bs, be):
    na = as_.shape[0]
    nb = bs.shape[0]
    rs = np.empty(na + nb, np.int64)
    re = np.empty(na + nb, np.int64)
    m = 0
    i = 0
    j = 0
    while i < na and j < nb:
        # a = A[i], b = B[j] are the first of each list starting at or after k; the one
        # ending first is minimal (the other list has nothing starting at or after k
        # that ends sooner). On equal ends the later start is inside the other.
        if ae[i] < be[j] or (ae[i] == be[j] and as_[i] >= bs[j]):
            p = as_[i]
            q = ae[i]
        else:
            p = bs[j]
            q = be[j]
        rs[m] = p
        re[m] = q
        m += 1
        if p == _I64_MAX:
            i = na
            j = nb
            break
        i = _ge(as_, i, na, p + 1)  # skip intervals starting at or before p: they contain [p, q]
        j = _ge(bs, j, nb, p + 1)
    while i < na:
        rs[m] = as_[i]
        re[m] = ae[i]
        m += 1
        i += 1
    while j < nb:
        rs[m] = bs[j]
        re[m] = be[j]
        m += 1
        j += 1
    return _trim(rs, m), _trim(re, m)


def one_of(as_, ae, bs, be):
    """``(+ A B)``: the minimal intervals of A union B (an interval in both appears once)."""
    as_, ae = _pair(as_, ae, "A")
    bs, be = _pair(bs, be, "B")
    return _one_of(as_, ae, bs, be)


@njit(cache=True, nogil=True)
def _followed_by(as_, ae, bs, be):
    na = as_.shape[0]
    nb = bs.shape[0]
    cap = min(na, nb)  # results start at distinct A starts and end at distinct B ends
    rs = np.empty(cap, np.int64)
    re = np.empty(cap, np.int64)
    m = 0
    if cap == 0:
        return rs, re
    k = as_[0]
    ia = 0
    ib = 0
    ja = 0  # first A ending at or after the start of b
    while True:
        ia = _ge(as_, ia, na, k)  # a: first A starting at or after k
        if ia >= na:
            break
        ib = _gt(bs, ib, nb, ae[ia])  # b: first B starting after a ends
        if ib >= nb:
            break
        ja = _ge(ae, max(ja, ia), na, bs[ib])  # ja - 1: last A ending before b starts
        u = as_[ja - 1]
        rs[m] = u
        re[m] = be[ib]
        m += 1
        if u == _I64_MAX:
            break
        k = u + 1
    return _trim(rs, m), _trim(re, m)


def followed_by(as_, ae, bs, be):
    """``(... A B)``: minimal intervals holding an A-interval that ends before a B-interval
    starts."""
    as_, ae = _pair(as_, ae, "A")
    bs, be = _pair(bs, be, "B")
    return _followed_by(as_, ae, bs, be)


# ---------------------------------------------------------------- containment filters


@njit(cache=True, nogil=True)
def _select(as_, ae, bs, be, inside, negate):
    """Indices of A contained in some B (inside) or containing some B (not inside);
    with negate, the indices of the others."""
    na = as_.shape[0]
    nb = bs.shape[0]
    out = np.empty(na, np.int64)
    m = 0
    if nb < na:
        # Drive from B: the A-intervals related to one b form a run [lo, hi) of A, and
        # both ends of the run only move forward from one b to the next.
        pos = 0  # A indices below pos are settled
        lo = 0
        hi = 0
        for j in range(nb):
            if inside:  # b.p <= a.p and a.q <= b.q
                lo = _ge(as_, lo, na, bs[j])
                hi = _gt(ae, max(hi, lo), na, be[j])
            else:  # a.p <= b.p and b.q <= a.q
                lo = _ge(ae, lo, na, be[j])
                hi = _gt(as_, max(hi, lo), na, bs[j])
            if lo >= hi:
                continue
            if negate:
                for i in range(pos, lo):
                    out[m] = i
                    m += 1
            else:
                for i in range(max(pos, lo), hi):
                    out[m] = i
                    m += 1
            if hi > pos:
                pos = hi
        if negate:
            for i in range(pos, na):
                out[m] = i
                m += 1
    else:
        # Drive from A: only one B can decide each a -- the last B starting at or before
        # a.p has the greatest end of those (inside); the first B starting at or after
        # a.p has the smallest end of those (not inside).
        j = 0
        for i in range(na):
            if inside:
                j = _gt(bs, j, nb, as_[i])
                hit = j > 0 and be[j - 1] >= ae[i]
            else:
                j = _ge(bs, j, nb, as_[i])
                hit = j < nb and be[j] <= ae[i]
            if hit != negate:
                out[m] = i
                m += 1
    return _trim(out, m)


def _select_wrapper(as_, ae, bs, be, inside, negate):
    as_, ae = _pair(as_, ae, "A")
    bs, be = _pair(bs, be, "B")
    return _select(as_, ae, bs, be, inside, negate)


def contained_in(as_, ae, bs, be):
    """``(<< A B)``: increasing indices of the A-intervals contained in some B-interval."""
    return _select_wrapper(as_, ae, bs, be, True, False)


def containing(as_, ae, bs, be):
    """``(>> A B)``: increasing indices of the A-intervals containing some B-interval."""
    return _select_wrapper(as_, ae, bs, be, False, False)


def not_contained_in(as_, ae, bs, be):
    """``(!< A B)``: increasing indices of the A-intervals contained in no B-interval."""
    return _select_wrapper(as_, ae, bs, be, True, True)


def not_containing(as_, ae, bs, be):
    """``(!> A B)``: increasing indices of the A-intervals containing no B-interval."""
    return _select_wrapper(as_, ae, bs, be, False, True)


# ---------------------------------------------------------------- ranking


@njit(cache=True, nogil=True)
def _score(cs, ce, lo, hi, k):
    """(SSR score, index of the shortest cover, first on ties; -1 when none) of the covers
    lo..hi-1: the sum, left to right, of 1 / (k + q - p)."""
    total = 0.0
    shortest = _I64_MAX
    best = -1
    for c in range(lo, hi):
        length = ce[c] - cs[c]
        total += 1.0 / (k + length)
        if length < shortest:
            shortest = length
            best = c
    return total, best


@njit(cache=True, nogil=True)
def _ssr(cs, ce, ds, de, k):
    nc = cs.shape[0]
    nd = ds.shape[0]
    scores = np.zeros(nd, np.float64)
    best = np.full(nd, -1, np.int64)
    lo = 0
    for d in range(nd):
        # covers inside d: [lo, hi), the covers from the first one starting in d up
        # to the first one ending after d
        lo = _ge(cs, lo, nc, ds[d])
        hi = _gt(ce, lo, nc, de[d])  # galloping from lo costs log(run length)
        scores[d], best[d] = _score(cs, ce, lo, hi, k)
    return scores, best


def ssr(cs, ce, ds, de, k=42.0):
    """Shortest-substring ranking of containers ds/de by the covers cs/ce inside each.

    Returns (scores, best): scores[d] = sum, left to right, of 1 / (k + q - p) over the
    covers [p, q] inside container d; best[d] = index of its shortest cover (first on
    ties), -1 when it has none.
    """
    cs, ce = _pair(cs, ce, "covers")
    ds, de = _pair(ds, de, "containers")
    return _ssr(cs, ce, ds, de, float(k))


@njit(cache=True, nogil=True)
def _ssr_touched(cs, ce, ds, de, k):
    nc = cs.shape[0]
    nd = ds.shape[0]
    touched = np.empty(16, np.int64)
    m = 0
    lo_d = 0
    hi_d = 0  # containers [0, hi_d) start at or before the current cover
    last = -1
    for c in range(nc):
        lo_d = _ge(de, lo_d, nd, ce[c])   # first container ending at or after c
        hi_d = _gt(ds, hi_d, nd, cs[c])   # first container starting after c
        for d in range(max(lo_d, last + 1), hi_d):
            if m == touched.shape[0]:
                grown = np.empty(2 * m, np.int64)
                grown[:m] = touched
                touched = grown
            touched[m] = d
            m += 1
            last = d
    idx = touched[:m].copy()
    scores = np.zeros(m, np.float64)
    best = np.full(m, -1, np.int64)
    lo = 0
    for j in range(m):
        d = idx[j]
        lo = _ge(cs, lo, nc, ds[d])
        hi = _gt(ce, lo, nc, de[d])
        scores[j], best[j] = _score(cs, ce, lo, hi, k)
    return idx, scores, best


def ssr_touched(cs, ce, ds, de, k=42.0):
    """`ssr` for the containers that hold at least one cover only: (idx, scores, best),
    idx the container indices in order. Costs O(covers log containers) however many
    containers there are (a million documents, a query matching ten)."""
    cs, ce = _pair(cs, ce, "covers")
    ds, de = _pair(ds, de, "containers")
    return _ssr_touched(cs, ce, ds, de, float(k))


def top(scores, n):
    """Indices of the scores > 0, best first, ties by index, at most n of them."""
    sc = _floats(scores, "scores")
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"top: n must be >= 0, got {n}")
    cand = np.flatnonzero(sc > 0)
    if n == 0 or cand.size == 0:
        return np.empty(0, np.int64)
    vals = sc[cand]
    if n < cand.size:
        # keep the n largest without sorting the rest: everything above the n-th
        # largest value, then the lowest-indexed of the ties at it
        kth = np.partition(vals, cand.size - n)[cand.size - n]
        above = vals > kth
        ties = np.flatnonzero(vals == kth)[: n - int(above.sum())]
        keep = above
        keep[ties] = True
        cand = cand[keep]
        vals = vals[keep]
    order = np.argsort(-vals, kind="stable")  # cand is increasing: ties stay by index
    return cand[order].astype(np.int64)


@njit(cache=True, nogil=True)
def _merge_ranked(scores, starts, lengths, n):
    k = lengths.shape[0]
    bounds = np.zeros(k + 1, np.int64)
    for r in range(k):
        bounds[r + 1] = bounds[r] + lengths[r]
    for r in range(k):  # each run ranked: score descending, ties by start ascending
        for i in range(bounds[r], bounds[r + 1]):
            if scores[i] != scores[i] or i > bounds[r] and not (
                    scores[i - 1] > scores[i] or
                    (scores[i - 1] == scores[i] and starts[i - 1] < starts[i])):
                return _EMPTY_I, _EMPTY_I, False
    n = min(n, bounds[k])
    order = np.empty(n, np.int64)
    run = np.empty(n, np.int64)
    at = bounds[:k].copy()
    for m in range(n):
        best = -1
        br = -1
        for r in range(k):
            i = at[r]
            if i < bounds[r + 1] and (best < 0 or scores[i] > scores[best] or (
                    scores[i] == scores[best] and starts[i] < starts[best])):
                best = i
                br = r
        order[m] = best
        run[m] = br
        at[br] += 1
    return order, run, True


def merge_ranked(scores, starts, lengths, n):
    """Rankings laid end to end (`lengths[r]` rows each, every one ranked by score
    descending, ties by start) merged: (indices of the first n rows by score descending,
    ties by start, then by run; the run of each). The same order as
    np.lexsort((starts, -scores)), in time O(n x runs) instead of a sort. Runs not ranked
    so (or holding a NaN) are sorted instead."""
    sc = _floats(scores, "scores")
    st = _ints(starts, "starts")
    lengths = [operator.index(x) for x in lengths]
    if sc.shape[0] != st.shape[0] or sum(lengths) != st.shape[0] or \
            min(lengths, default=0) < 0:
        raise ValueError(f"merge_ranked: {sc.shape[0]} scores, {st.shape[0]} starts and "
                         f"runs of {lengths} rows")
    n = max(operator.index(n), 0)
    order, run, ok = _merge_ranked(sc, st, np.array(lengths, np.int64), n)
    if not ok:
        order = np.lexsort((st, -sc))[:n]
        run = np.searchsorted(np.cumsum(lengths), order, side="right")
    return order, run


# ---------------------------------------------------------------- erasure and ranges


@njit(cache=True, nogil=True)
def _drop_erased(s, e, xs, xe):
    n = s.shape[0]
    nx = xs.shape[0]
    out = np.empty(n, np.int64)
    m = 0
    j = 0  # first erased range starting after s[i]
    for i in range(n):
        if i > 0 and s[i] < s[i - 1]:
            j = 0  # unsorted input: search again from the front
        j = _gt(xs, j, nx, s[i])
        # only the last erased range starting at or before s[i] can hold interval i
        if j == 0 or xe[j - 1] < e[i]:
            out[m] = i
            m += 1
    return _trim(out, m)


def drop_erased(starts, ends, erased_starts, erased_ends):
    """Indices of the intervals not contained in any erased range.

    The intervals may be in any order; the erased ranges are sorted, disjoint and
    non-adjacent (as :func:`merge_ranges` returns them).
    """
    s, e = _pair(starts, ends, "intervals")
    xs, xe = _pair(erased_starts, erased_ends, "erased")
    return _drop_erased(s, e, xs, xe)


@njit(cache=True, nogil=True)
def _merge_ranges(s, e):
    n = s.shape[0]
    rs = np.empty(n, np.int64)
    re = np.empty(n, np.int64)
    m = 0
    if n == 0:
        return rs, re
    p = s[0]
    q = e[0]
    for i in range(1, n):
        if s[i] - 1 <= q:  # overlapping or adjacent
            if e[i] > q:
                q = e[i]
        else:
            rs[m] = p
            re[m] = q
            m += 1
            p = s[i]
            q = e[i]
    rs[m] = p
    re[m] = q
    m += 1
    return _trim(rs, m), _trim(re, m)


@njit(cache=True, nogil=True)
def _runs_at(points, at, length):
    n = points.shape[0]
    out = np.zeros(at.shape[0], np.bool_)
    j = 0
    for i in range(at.shape[0]):
        j = _ge(points, j, n, at[i])
        k = j
        for t in range(length):
            k = _ge(points, k, n, at[i] + t)
            if k >= n or points[k] != at[i] + t:
                break
        else:
            out[i] = True
    return out


def runs_at(points, at, length: int) -> np.ndarray:
    """For sorted addresses `at`: whether each of at[i], at[i] + 1, ..., at[i] + length - 1
    is in the sorted `points` (repeats allowed), as a boolean array: where a run of one
    word of a phrase is (the points a word's list starts at)."""
    pts = _ints(points, "points")
    a = _ints(at, "at")
    if int(length) < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    return _runs_at(pts, a, int(length))


@njit(cache=True, nogil=True)
def _block_ranges(firsts, ps):
    nf = firsts.shape[0]
    los = np.empty(min(ps.shape[0], nf), np.int64)
    his = np.empty(min(ps.shape[0], nf), np.int64)
    m = 0
    j = 0
    last = -1
    for i in range(ps.shape[0]):
        j = _gt(firsts, j, nf, ps[i])  # blocks 0..j-1 start at or before ps[i]
        b = j - 1
        if b < 0 or b == last:
            continue
        last = b
        los[m] = firsts[b]
        his[m] = _I64_MAX if b == nf - 1 else firsts[b + 1] - 1
        m += 1
    return _trim(los, m), _trim(his, m)


def block_ranges(firsts, ps):
    """For a list's directory `firsts` (its blocks' first starts, increasing) and sorted
    positions `ps`: the ranges [firsts[j], firsts[j + 1] - 1] (the last block's to the
    int64 maximum) of the distinct blocks j holding the last start at or before some p,
    as (los, his), ascending. Positions before the first block have none."""
    return _block_ranges(_ints(firsts, "firsts"), _ints(ps, "positions"))


def merge_ranges(starts, ends):
    """Union of closed ranges in any order -> sorted, disjoint, non-adjacent ranges."""
    s, e = _pair(starts, ends, "ranges")
    _check_ordered(s, e, "merge_ranges")
    if s.shape[0] > 1 and not bool((s[1:] >= s[:-1]).all()):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    return _merge_ranges(s, e)
