"""Numba kernels for BM25 and sparse-vector ranking (annodb/bm25.py drives them).

    document_frequencies(kinds, doc_tokens, n)   a batch's df per word kind
    best_windows(addrs, terms, n, los, his)      per range, the shortest window holding
                                                 every distinct term found in it

Each public function is a thin validating wrapper of a private jitted one; the brute-force
twins of the same names are in tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _ge, _gt, _ints, _pair

__all__ = ["document_frequencies", "best_windows"]


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
    k = np.ascontiguousarray(kinds)
    if k.ndim != 1 or (k.size and k.dtype.kind not in "iu"):
        raise TypeError("kinds must be a one-dimensional array of integers")
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
