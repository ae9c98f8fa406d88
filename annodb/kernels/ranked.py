"""A ranking's last step in one numba call: SSR's scores of the containers holding a
query's covers and their best `depth`, gathered as the ranking keeps them (scoring.ranked).

What it does is algebra.ssr_touched then algebra.top, and the five gathers of their
results, done by numpy one at a time before: seven calls and their arrays a query, ~8 us
of a 1x median query of ~180 (benchmarks/RESULTS.md, "SSR's fixed cost, fourth round").
The brute-force twin is tests/naive.py's ssr_top.
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit

from .algebra import _pair, _ssr_touched

__all__ = ["ssr_top"]


@njit(cache=True, nogil=True)
def _top(sc, n):
    """Indices of the scores > 0, best first, ties by index, at most n (algebra.top)."""
    m = 0
    cand = np.empty(sc.shape[0], np.int64)
    for i in range(sc.shape[0]):
        if sc[i] > 0:
            cand[m] = i
            m += 1
    cand = cand[:m]
    if n == 0 or m == 0:
        return cand[:0]
    vals = sc[cand]
    if n < m:
        # the n largest without sorting the rest: those above the n-th largest value,
        # then the lowest-indexed of the ties at it
        kth = np.partition(vals, m - n)[m - n]
        keep = np.empty(m, np.int64)
        k = 0
        above = 0
        for i in range(m):
            if vals[i] > kth:
                above += 1
        ties = n - above
        for i in range(m):
            if vals[i] > kth:
                keep[k] = i
                k += 1
            elif vals[i] == kth and ties > 0:
                keep[k] = i
                k += 1
                ties -= 1
        cand = cand[keep[:k]]
        vals = vals[keep[:k]]
    order = np.argsort(-vals, kind="mergesort")  # (stable: cand increases, ties by index)
    return cand[order]


@njit(cache=True, nogil=True)
def _ssr_top(cs, ce, ds, de, k, depth):
    idx, scores, best = _ssr_touched(cs, ce, ds, de, k)
    order = _top(scores, depth)
    n = order.shape[0]
    # (the four int64 results as the rows of one array: each array numba returns is boxed
    # by a call back into Python, ~0.5 us warm and several cold)
    out = np.empty((4, n), np.int64)
    for i in range(n):
        d = idx[order[i]]
        b = best[order[i]]
        out[0, i] = ds[d]
        out[1, i] = de[d]
        out[2, i] = cs[b]
        out[3, i] = ce[b]
    return out, scores[order], idx.shape[0]


def ssr_top(cs, ce, ds, de, k=42.0, depth=1000):
    """The best `depth` containers by SSR (algebra.ssr_touched's scores, then
    algebra.top's order: score descending, ties by container order) of the containers
    ds/de (a GC-list) holding a cover cs/ce: (their starts, ends, scores, their best
    covers' starts and ends, how many containers hold a cover in all)."""
    cs, ce = _pair(cs, ce, "covers")
    ds, de = _pair(ds, de, "containers")
    depth = operator.index(depth)
    if depth < 0:
        raise ValueError(f"ssr_top: depth must be >= 0, got {depth}")
    out, scores, total = _ssr_top(cs, ce, ds, de, float(k), depth)
    return out[0], out[1], scores, out[2], out[3], total
