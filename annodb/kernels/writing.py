"""Numba kernels of a write transaction's flush: laying out many lists' postings at once,
where numpy took a dozen temporary arrays of all the postings (storage/postings.py).

`join_groups` puts, group by group, one run of an array after another: the points of a
token list's tail before its new points, for the lists whose tails spill into blocks. The
slow twin is tests/naive.py's join_groups (np.concatenate group by group).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _join_groups(first, first_bounds, second, los, his):
    n = len(los)
    bounds = np.empty(n + 1, dtype=np.int64)
    bounds[0] = 0
    for g in range(n):
        bounds[g + 1] = bounds[g] + (first_bounds[g + 1] - first_bounds[g]) + (his[g] - los[g])
    out = np.empty(bounds[n], dtype=np.int64)
    at = 0
    for g in range(n):
        for i in range(first_bounds[g], first_bounds[g + 1]):
            out[at] = first[i]
            at += 1
        for i in range(los[g], his[g]):
            out[at] = second[i]
            at += 1
    return out, bounds


def join_groups(first, first_bounds, second, los, his) -> tuple[np.ndarray, np.ndarray]:
    """(values, bounds): group g of the result, values[bounds[g]:bounds[g+1]], is
    first[first_bounds[g]:first_bounds[g+1]] followed by second[los[g]:his[g]] (int64)."""
    f = np.ascontiguousarray(first, dtype=np.int64)
    fb = np.ascontiguousarray(first_bounds, dtype=np.int64)
    s = np.ascontiguousarray(second, dtype=np.int64)
    lo = np.ascontiguousarray(los, dtype=np.int64)
    hi = np.ascontiguousarray(his, dtype=np.int64)
    n = len(lo)
    if len(hi) != n or len(fb) != n + 1:
        raise ValueError("join_groups: one (lo, hi) and one first group per group")
    if n and (fb[0] < 0 or fb[-1] > len(f) or (np.diff(fb) < 0).any()):
        raise ValueError("join_groups: first_bounds must rise within first")
    if n and (lo.min() < 0 or hi.max() > len(s) or (hi < lo).any()):
        raise ValueError("join_groups: each second group must lie within second")
    return _join_groups(f, fb, s, lo, hi)
