"""Numba kernels for BM25 and sparse-vector ranking (annodb/bm25.py drives them).

    document_frequencies(kinds, doc_tokens, n)   a batch's df per word kind
    merge_scores(as, ae, av, bs, be, bv)         the union of two score lists by start
    best_windows(addrs, terms, n, los, his)      per range, the shortest window holding
                                                 every distinct term found in it
    context_sums(values, runs, before, after, reach)
                                                 per item, its neighbours' values (at most
                                                 reach away) decayed by distance within its
                                                 run (recall.py)

Each public function is a thin validating wrapper of a private jitted one; the brute-force
twins of the same names are in tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _floats, _ge, _gt, _ints, _pair

__all__ = ["document_frequencies", "merge_scores", "best_windows", "context_sums"]


@njit(cache=True, nogil=True)
def _document_frequencies(kinds, doc_tokens, n):
    df = np.zeros(n, np.int64)
    last = np.full(n, -1, np.int64)  # the last document each kind was seen in
    t = 0
    for d in range(doc_tokens.shape[0]):
        for _ in range(doc_tokens[d]):
            k = kinds[t]
            t += 1
            if last[k] != d:
                last[k] = d
                df[k] += 1
    return df


def document_frequencies(kinds, doc_tokens, n):
    """df[k]: how many documents hold a token of kind k, for the tokens of consecutive
    documents (document d has the next doc_tokens[d] tokens of `kinds`); 0 <= kinds < n."""
    k = np.asarray(kinds)
    if k.ndim != 1 or (k.size and k.dtype.kind not in "iu"):
        raise TypeError("kinds must be a one-dimensional array of integers")
    k = np.ascontiguousarray(k, dtype=np.int64)  # (numba did not keep an int32 version)
    d = _ints(doc_tokens, "doc_tokens")
    if int(d.sum()) != k.shape[0]:
        raise ValueError(f"doc_tokens sum to {int(d.sum())}, but there are {k.shape[0]} "
                         "tokens")
    if k.size and (int(k.min()) < 0 or int(k.max()) >= n):
        raise ValueError(f"kinds must lie in [0, {n})")
    if k.size == 0:
        return np.zeros(int(n), np.int64)
    return _document_frequencies(k, d, int(n))


@njit(cache=True, nogil=True)
def _merge_scores(as_, ae, av, bs, be, bv):
    na, nb = as_.shape[0], bs.shape[0]
    s = np.empty(na + nb, np.int64)
    e = np.empty(na + nb, np.int64)
    v = np.empty(na + nb, np.float64)
    i = j = m = 0
    while i < na or j < nb:
        if j == nb or (i < na and as_[i] < bs[j]):
            s[m], e[m], v[m] = as_[i], ae[i], av[i]
            i += 1
        elif i == na or bs[j] < as_[i]:
            s[m], e[m], v[m] = bs[j], be[j], 0.0 + bv[j]
            j += 1
        else:
            s[m], e[m], v[m] = as_[i], ae[i], av[i] + bv[j]
            i += 1
            j += 1
        m += 1
    return s[:m].copy(), e[:m].copy(), v[:m].copy()


def merge_scores(as_, ae, av, bs, be, bv):
    """The union of two lists of (container start, end, score), each sorted by start with
    distinct starts: a container in both gets av + bv (added in that order), one in only
    the second 0.0 + bv."""
    as_, ae = _pair(as_, ae, "first")
    bs, be = _pair(bs, be, "second")
    av, bv = _floats(av, "first scores"), _floats(bv, "second scores")
    if av.shape[0] != as_.shape[0] or bv.shape[0] != bs.shape[0]:
        raise ValueError("a score per container is needed")
    return _merge_scores(as_, ae, av, bs, be, bv)


@njit(cache=True, nogil=True)
def _best_windows(addrs, terms, n_terms, los, his):
    n = addrs.shape[0]
    m = los.shape[0]
    ws = np.full(m, -1, np.int64)
    we = np.full(m, -1, np.int64)
    seen = np.zeros(n_terms, np.int64)
    i = 0
    for r in range(m):
        a = _ge(addrs, i, n, los[r])
        b = _gt(addrs, a, n, his[r])
        i = a  # (ranges may overlap: the next one starts after this one does)
        if a == b:
            continue
        # the distinct terms of the range
        distinct = 0
        for x in range(a, b):
            if seen[terms[x]] == 0:
                distinct += 1
            seen[terms[x]] += 1
        for x in range(a, b):
            seen[terms[x]] = 0
        # the shortest window holding all of them (first on ties), by a sliding window
        have = 0
        left = a
        best = -1
        for right in range(a, b):
            t = terms[right]
            if seen[t] == 0:
                have += 1
            seen[t] += 1
            while have == distinct:
                length = addrs[right] - addrs[left]
                if best < 0 or length < best:
                    best = length
                    ws[r] = addrs[left]
                    we[r] = addrs[right]
                u = terms[left]
                seen[u] -= 1
                if seen[u] == 0:
                    have -= 1
                left += 1
        for x in range(left, b):
            seen[terms[x]] = 0
    return ws, we


def best_windows(addrs, terms, n_terms, los, his):
    """For each range [los[r], his[r]] (a GC-list): the shortest window [p, q] of
    the sorted, distinct addresses `addrs` (each holding term terms[i] < n_terms) that holds
    every distinct term occurring in the range, the first of the shortest; (-1, -1) where
    the range holds none. What a BM25 hit shows in its snippet."""
    a = _ints(addrs, "addrs")
    t = _ints(terms, "terms")
    if t.shape[0] != a.shape[0]:
        raise ValueError(f"{a.shape[0]} addresses but {t.shape[0]} terms")
    if t.size and (int(t.min()) < 0 or int(t.max()) >= n_terms):
        raise ValueError(f"terms must lie in [0, {n_terms})")
    lo, hi = _pair(los, his, "ranges")
    return _best_windows(a, t, int(max(n_terms, 1)), lo, hi)


@njit(cache=True, nogil=True)
def _context_sums(values, runs, before, after, reach):
    rows, n = values.shape
    out = np.zeros((rows, n), np.float64)
    # the first and last item of each item's run
    first = np.zeros(n, np.int64)
    last = np.zeros(n, np.int64)
    for i in range(1, n):
        first[i] = first[i - 1] if runs[i] == runs[i - 1] else i
    if n:
        last[n - 1] = n - 1
    for i in range(n - 2, -1, -1):
        last[i] = last[i + 1] if runs[i] == runs[i + 1] else i
    if before == 1.0 and after == 1.0:
        # plain window sums, from prefix sums (exact for whole numbers, as counts are)
        total = np.zeros(n + 1, np.float64)
        for r in range(rows):
            for i in range(n):
                total[i + 1] = total[i] + values[r, i]
            for i in range(n):
                lo = max(i - reach, first[i])
                hi = min(i + reach, last[i])
                out[r, i] = (total[hi + 1] - total[lo]) - values[r, i]
        return out
    down = np.ones(reach + 1, np.float64)
    up = np.ones(reach + 1, np.float64)
    for d in range(1, reach + 1):
        down[d] = down[d - 1] * before
        up[d] = up[d - 1] * after
    for i in range(n):
        lo = max(i - reach, first[i])
        hi = min(i + reach, last[i])
        for r in range(rows):
            acc = 0.0
            for j in range(i - 1, lo - 1, -1):
                acc += down[i - j] * values[r, j]
            for j in range(i + 1, hi + 1):
                acc += up[j - i] * values[r, j]
            out[r, i] = acc
    return out


def context_sums(values, runs, before: float, after: float, reach: int) -> np.ndarray:
    """For each row of `values` (rows x n items in order) and each item i: the sum over
    the items j != i of its run (the stretch of consecutive items with the same `runs`
    id) at most `reach` items away of before ** (i - j) * values[j] for those before it
    and after ** (j - i) * values[j] for those after it (before = after = 1: the plain sum
    of the window, from prefix sums: exact where the values are whole numbers, else up to
    floating-point rounding)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"values must be two-dimensional (rows x items), got shape {v.shape}")
    g = _ints(runs, "runs")
    if g.shape[0] != v.shape[1]:
        raise ValueError(f"{v.shape[1]} items but {g.shape[0]} run ids")
    before, after = float(before), float(after)
    if not (0.0 <= before <= 1.0 and 0.0 <= after <= 1.0):
        raise ValueError("the decays must lie in [0, 1]")
    if int(reach) != reach or reach < 0:
        raise ValueError(f"reach must be a whole number >= 0, not {reach!r}")
    return _context_sums(np.ascontiguousarray(v), g, before, after, int(reach))
