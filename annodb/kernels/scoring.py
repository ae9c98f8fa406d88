"""Numba kernels for BM25 and sparse-vector ranking (annodb/bm25.py drives them).

    document_frequencies(kinds, doc_tokens, n)   a batch's df per word kind
    merge_scores(as, ae, av, bs, be, bv)         the union of two score lists by start
    best_windows(addrs, terms, n, los, his)      per range, the shortest window holding
                                                 every distinct term found in it
    context_sums(values, runs, before, after, reach)
                                                 per item, its neighbours' values (at most
                                                 reach away) decayed by distance within its
                                                 run (recall.py)
    bm25_steps(...)                              BM25's exact top k by MaxScore, resumable
    term_documents(forms, box_s, box_e[, table, shift])
                                                 a word's documents: (start, length, tf)
    start_table(box_s, shift[, c0, j0])          per cell of 2**shift addresses, the boxes
                                                 starting before it (term_documents')
    term_cells(starts, packed, shift, k1, b, avglen)
                                                 a word's largest saturation per cell of
                                                 2**shift addresses (bm25_steps' bounds)
    add_cells(total, cells, values, scale)       total[cells] += scale x values, in place
    bm25_pick(scores, k, positive)               the k best, ties in order

Each public function is a thin validating wrapper of a private jitted one; the brute-force
twins of the same names are in tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _floats, _ge, _gt, _ints, _pair

__all__ = ["document_frequencies", "merge_scores", "best_windows", "context_sums",
           "bm25_steps", "bm25_pick", "term_documents", "start_table", "term_cells", "add_cells",
           "FORMS_PER_CALL"]


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


# BM25's exact top k (bm25.py's MaxScore), a batch of terms a call --------------------------

FORMS_PER_CALL = 32  # the postings arrays one call of bm25_steps takes (a tuple this long)


@njit(cache=True, nogil=True)
def _threshold(sc, n, k, floor):
    """The k-th largest of sc[:n] (1 <= k <= n), or floor when that is higher."""
    kth = np.partition(sc[:n], n - k)[n - k]
    return kth if kth > floor else floor


@njit(cache=True, nogil=True)
def _contribution(factor, tf, length, avglen, k1, b):
    """factor x bm25.saturation, operation for operation (so the same float64)."""
    x = float(tf)
    return factor * (x / (x + k1 * (1.0 - b + b * length / avglen)))


@njit(cache=True, nogil=True)
def _tf(forms, f0, f1, lo, hi, at):
    """How many points of forms[f0:f1] lie in [lo, hi]; at[f]: where the search in form
    f's points starts (calls come with lo nondecreasing), moved on."""
    tf = 0
    for f in range(f0, f1):
        pts = forms[f]
        z = pts.shape[0]
        a = _ge(pts, at[f], z, lo)
        at[f] = a
        y = a  # (a box holds few of a word's points: count them, then gallop)
        while y < z and y < a + 8 and pts[y] <= hi:
            y += 1
        if y == a + 8:
            y = _gt(pts, y, z, hi)
        tf += y - a
    return tf


@njit(cache=True, nogil=True)
def _held_by(pts, box_s, box_e):
    """The boxes (disjoint) holding one of the points and how many each: (indices,
    counts). A box's points are skipped in one gallop."""
    nb = box_s.shape[0]
    end = pts.shape[0]
    idx = np.empty(end, np.int64)
    cnt = np.empty(end, np.int64)
    m = 0
    x = 0
    hi_at = 0
    while x < end:
        p = pts[x]
        hi_at = _gt(box_s, hi_at, nb, p)   # the box that can hold p: hi_at - 1
        j = hi_at - 1
        if j < 0 or box_e[j] < p:          # none: on to the next box's first point
            if hi_at >= nb:
                break
            x = _ge(pts, x + 1, end, box_s[hi_at])
            continue
        y = _gt(pts, x + 1, end, box_e[j])
        idx[m] = j
        cnt[m] = y - x
        m += 1
        x = y
    return idx[:m], cnt[:m]


@njit(cache=True, nogil=True)
def _added(ai, ac, bi, bc):
    """The union of two (box, count) lists sorted by box, counts of a box in both added."""
    na, nb = ai.shape[0], bi.shape[0]
    oi = np.empty(na + nb, np.int64)
    oc = np.empty(na + nb, np.int64)
    i = j = m = 0
    while i < na or j < nb:
        if j == nb or (i < na and ai[i] < bi[j]):
            oi[m], oc[m] = ai[i], ac[i]
            i += 1
        elif i == na or bi[j] < ai[i]:
            oi[m], oc[m] = bi[j], bc[j]
            j += 1
        else:
            oi[m], oc[m] = ai[i], ac[i] + bc[j]
            i += 1
            j += 1
        m += 1
    return oi[:m], oc[:m]


@njit(cache=True, nogil=True)
def _holding(forms, f0, f1, box_s, box_e, disjoint):
    """The boxes (a GC-list) holding a point of forms[f0:f1], ascending, and how many of
    the points each holds: (indices, counts)."""
    if disjoint:
        idx, cnt = _held_by(forms[f0], box_s, box_e) if f1 > f0 else \
            (np.empty(0, np.int64), np.empty(0, np.int64))
        for f in range(f0 + 1, f1):
            bi, bc = _held_by(forms[f], box_s, box_e)
            idx, cnt = _added(idx, cnt, bi, bc)
        return idx, cnt
    # boxes may overlap: a point may lie in several (those from the first ending at or
    # after it to the last starting at or before it), counted by a search each
    nb = box_s.shape[0]
    total = 0
    for f in range(f0, f1):
        total += forms[f].shape[0]
    out = np.empty(total + 1, np.int64)
    m = 0
    for f in range(f0, f1):
        pts = forms[f]
        hi_at = 0
        lo_at = 0
        last = -1
        for x in range(pts.shape[0]):
            p = pts[x]
            hi_at = _gt(box_s, hi_at, nb, p)
            lo_at = _ge(box_e, lo_at, nb, p)
            j = lo_at if lo_at > last + 1 else last + 1
            while j < hi_at:
                if m == out.shape[0]:
                    grown = np.empty(out.shape[0] * 2, np.int64)
                    grown[:m] = out[:m]
                    out = grown
                out[m] = j
                m += 1
                last = j
                j += 1
    idx = np.sort(out[:m])
    d = 0
    for x in range(m):
        if d == 0 or idx[x] != idx[d - 1]:
            idx[d] = idx[x]
            d += 1
    idx = idx[:d]
    cnt = np.empty(d, np.int64)
    at = np.zeros(len(forms), np.int64)
    for y in range(d):
        cnt[y] = _tf(forms, f0, f1, box_s[idx[y]], box_e[idx[y]], at)
    return idx, cnt


@njit(cache=True, nogil=True)
def _most(values):
    """The largest of values (non-empty)."""
    top = values[0]
    for x in range(1, values.shape[0]):
        if values[x] > top:
            top = values[x]
    return top


@njit(cache=True, nogil=True)
def _cell_bound(cells, flat, shift, start):
    """What the bounded terms can add to the container starting at `start`: its cell's
    bound, + flat (the terms bounded only as a whole)."""
    c = start >> shift
    return flat + (cells[c] if c < cells.shape[0] else 0.0)


@njit(cache=True, nogil=True)
def _hopeless(score, after, cells, flat, shift, start, slack1, cut):
    """Whether a container with `score` so far cannot reach `cut` (a lower bound of the
    k-th best score) with what the terms after can add: their bounds summed (`after`),
    or the cells' bound where that is lower."""
    left = _cell_bound(cells, flat, shift, start)
    return (score + (after if after < left else left)) * slack1 < cut


@njit(cache=True, nogil=True)
def _bm25_steps(t, end, phase, floor, k, prune, slack1, k1, b, avglen, factors, rest,
                forms, term_forms, box_s, box_e, disjoint, acc_s, acc_e, acc_sc, views,
                cells, flat, shift):
    for u in range(term_forms.shape[0] - 1):
        if term_forms[u] > term_forms[u + 1]:
            raise ValueError("term forms must not decrease")
        if views and term_forms[u + 1] - term_forms[u] != 2:
            raise ValueError("a term's documents are two arrays")
    t0 = t
    n_terms = factors.shape[0]
    n = acc_s.shape[0]
    acc_s, acc_e, acc_sc = acc_s.copy(), acc_e.copy(), acc_sc.copy()
    read = 0
    done = False
    bounded = cells.shape[0] > 0   # (terms t0.. bounded per cell: see bm25_steps)
    envelope = -1.0   # the largest of those bounds (found when first needed)
    high = 0.0  # the best score so far (the k-th best is no higher)
    for x in range(n):
        if acc_sc[x] > high:
            high = acc_sc[x]
    while True:
        # before term t: end the reading of whole lists, or drop the hopeless candidates
        if t >= n_terms:
            done = True
            break
        kth = -1.0   # (the k-th best so far or the floor, when found before term t)
        if phase == 1 and prune and k > 0 and n >= k:
            bar = rest[t] * slack1
            if bounded:
                if envelope < 0.0:
                    envelope = flat + _most(cells)
                if envelope < rest[t]:
                    bar = envelope * slack1
            if bar < high or bar < floor:
                kth = _threshold(acc_sc, n, k, floor)
                if bar < kth:
                    phase = 2
        if phase == 2:
            if prune and n > k:
                m = 0
                if k > 0:
                    th = _threshold(acc_sc, n, k, floor)
                    for x in range(n):
                        left = rest[t]
                        if bounded:
                            left = min(left, _cell_bound(cells, flat, shift, acc_s[x]))
                        if (acc_sc[x] + left) * slack1 >= th:
                            acc_s[m], acc_e[m], acc_sc[m] = acc_s[x], acc_e[x], acc_sc[x]
                            m += 1
                n = m
            if n == 0:
                done = True
                break
        if t >= end:
            break
        if phase == 2:  # the batch's terms inside the candidates, a candidate at a time
            n, got = _candidates(t, end, t0, k, prune, slack1, k1, b, avglen, factors, rest,
                                 forms, term_forms, acc_s, acc_e, acc_sc, n,
                                 _threshold(acc_sc, n, k, floor) if k > 0 and n >= k
                                 else floor, views, cells, flat, shift)
            read += got
            t = end
            continue
        # phase 1: the term everywhere, merged into the candidates by start
        f0, f1 = term_forms[t - t0], term_forms[t - t0 + 1]
        if views:  # (the term's documents: starts, then length << 32 | tf)
            vs, vp = forms[f0], forms[f0 + 1]
            held = vs.shape[0]
        else:
            idx, cnt = _holding(forms, f0, f1, box_s, box_e, disjoint)
            held = idx.shape[0]
            for f in range(f0, f1):
                read += forms[f].shape[0]
        factor = factors[t]
        ms = np.empty(n + held, np.int64)
        me = np.empty(n + held, np.int64)
        mv = np.empty(n + held, np.float64)
        # with the bounds: a container whose score so far + what terms t+1.. can add
        # there falls below the k-th best so far (or the floor) is left out: it cannot
        # enter the top k (the k-th best only rises)
        cut = -1.0
        if bounded and prune and k > 0:
            cut = kth if kth >= 0.0 else \
                (_threshold(acc_sc, n, k, floor) if n >= k else floor)
        after = rest[t + 1] if t + 1 < rest.shape[0] else 0.0
        i = 0
        m = 0
        for y in range(held):
            if views:
                s = vs[y]
                length = vp[y] >> 32
                tf = vp[y] & _LOW
                e = s + length - 1
                read += tf
            else:
                s, e = box_s[idx[y]], box_e[idx[y]]
                tf = cnt[y]
            c = _contribution(factor, tf, float(e - s + 1), avglen, k1, b) \
                if tf > 0 else 0.0
            if not c > 0:
                continue
            while i < n and acc_s[i] < s:
                if cut > 0.0 and _hopeless(acc_sc[i], after, cells, flat, shift,
                                           acc_s[i], slack1, cut):
                    i += 1
                    continue
                ms[m], me[m], mv[m] = acc_s[i], acc_e[i], acc_sc[i]
                i += 1
                m += 1
            if i < n and acc_s[i] == s:
                ms[m], me[m], mv[m] = s, e, acc_sc[i] + c
                i += 1
            else:
                ms[m], me[m], mv[m] = s, e, 0.0 + c
            if cut > 0.0 and _hopeless(mv[m], after, cells, flat, shift, s, slack1, cut):
                continue
            if mv[m] > high:
                high = mv[m]
            m += 1
        while i < n:
            if cut > 0.0 and _hopeless(acc_sc[i], after, cells, flat, shift, acc_s[i],
                                       slack1, cut):
                i += 1
                continue
            ms[m], me[m], mv[m] = acc_s[i], acc_e[i], acc_sc[i]
            i += 1
            m += 1
        acc_s, acc_e, acc_sc, n = ms, me, mv, m
        t += 1
    return t, phase, done, acc_s[:n], acc_e[:n], acc_sc[:n], read


CHUNK = 64  # candidates taken through the terms together (each form's array got once)


@njit(cache=True, nogil=True)
def _candidates(t, end, t0, k, prune, slack1, k1, b, avglen, factors, rest, forms,
                term_forms, acc_s, acc_e, acc_sc, n, th, views, cells, flat, shift):
    """Terms t..end-1 added to the candidates (in place, the first n; in address order),
    CHUNK candidates at a time through them all before the next: one whose score so far
    + the bounds left (x slack1) falls below th is dropped, and th rises to the k-th best
    of the scores the candidates kept reach (each a lower bound of a final score, as th
    is of the k-th best one). Returns (the candidates kept, the points counted)."""
    at = np.zeros(len(forms), np.int64)
    bounded = cells.shape[0] > 0
    heap = np.empty(max(min(k, n), 1), np.float64)  # the k best kept: a min-heap
    held = 0
    read = 0
    m = 0
    alive = np.empty(CHUNK, np.bool_)
    score = np.empty(CHUNK, np.float64)
    tfs = np.empty(CHUNK, np.int64)
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        for x in range(c0, c1):
            alive[x - c0] = True
            score[x - c0] = acc_sc[x]
        for u in range(t, end):
            left = 0
            for x in range(c0, c1):
                if alive[x - c0]:
                    left = rest[u]
                    if bounded:
                        left = min(left, _cell_bound(cells, flat, shift, acc_s[x]))
                    if prune and (score[x - c0] + left) * slack1 < th:
                        alive[x - c0] = False
                    else:
                        left += 1
                        tfs[x - c0] = 0
            if left == 0:
                break
            if views:  # (a candidate is a document: its entry, if any, by its start)
                f = term_forms[u - t0]
                vs, vp = forms[f], forms[f + 1]
                z = vs.shape[0]
                a = at[f]
                for x in range(c0, c1):
                    if alive[x - c0]:
                        a = _ge(vs, a, z, acc_s[x])
                        if a < z and vs[a] == acc_s[x]:
                            tfs[x - c0] = vp[a] & _LOW
                at[f] = a
            for f in range(term_forms[u - t0], term_forms[u - t0 + 1] if not views else
                           term_forms[u - t0]):
                pts = forms[f]
                z = pts.shape[0]
                a = at[f]
                for x in range(c0, c1):
                    if not alive[x - c0]:
                        continue
                    a = _ge(pts, a, z, acc_s[x])
                    hi = acc_e[x]
                    y = a  # (a box holds few of a word's points: count them, then gallop)
                    while y < z and y < a + 8 and pts[y] <= hi:
                        y += 1
                    if y == a + 8:
                        y = _gt(pts, y, z, hi)
                    tfs[x - c0] += y - a
                at[f] = a
            factor = factors[u]
            for x in range(c0, c1):
                if alive[x - c0]:
                    tf = tfs[x - c0]
                    read += tf
                    if tf > 0:
                        score[x - c0] = score[x - c0] + _contribution(
                            factor, tf, float(acc_e[x] - acc_s[x] + 1), avglen, k1, b)
        for x in range(c0, c1):
            if not alive[x - c0]:
                continue
            sc = score[x - c0]
            acc_s[m], acc_e[m], acc_sc[m] = acc_s[x], acc_e[x], sc
            m += 1
            if prune and k > 0:
                if held < k:
                    _heap_push(heap, held, sc)
                    held += 1
                elif sc > heap[0]:
                    _heap_replace(heap, held, sc)
        if prune and k > 0 and held == k and heap[0] > th:
            th = heap[0]
    return m, read


@njit(cache=True, nogil=True)
def _heap_push(heap, n, x):
    i = n
    heap[i] = x
    while i > 0:
        p = (i - 1) >> 1
        if heap[p] <= heap[i]:
            break
        heap[p], heap[i] = heap[i], heap[p]
        i = p


@njit(cache=True, nogil=True)
def _heap_replace(heap, n, x):
    heap[0] = x
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        if a + 1 < n and heap[a + 1] < heap[a]:
            a += 1
        if heap[i] <= heap[a]:
            break
        heap[i], heap[a] = heap[a], heap[i]
        i = a


_LOW = (1 << 32) - 1  # a term's documents: length << 32 | tf (term_documents)
LONGEST = (1 << 31) - 1  # the longest document (in tokens) term_documents packs


@njit(cache=True, nogil=True)
def _held_at(pts, box_s, box_e, table, shift):
    """_held_by by start_table's table: each point's box found from the first box of the
    point's cell on, apart from the point before (so the loads of many points overlap,
    where _held_by's gallops wait each on the last), then the runs of one box counted."""
    nb = box_s.shape[0]
    end = pts.shape[0]
    nt = table.shape[0]
    at = np.empty(end, np.int64)
    for x in range(end):
        p = pts[x]
        c = p >> shift
        j = 0 if p < 0 else (table[c] if c < nt else nb)
        while j < nb and box_s[j] <= p:
            j += 1
        j -= 1   # (the last box starting at or before p: p's, if it ends at or after p)
        at[x] = j if j >= 0 and box_e[j] >= p else -1
    idx = np.empty(end, np.int64)
    cnt = np.empty(end, np.int64)
    m = 0
    last = -1
    for x in range(end):
        j = at[x]
        if j < 0:
            continue
        if j != last:
            idx[m] = j
            cnt[m] = 0
            m += 1
            last = j
        cnt[m - 1] += 1
    return idx[:m], cnt[:m]


@njit(cache=True, nogil=True)
def _term_documents(forms, n, box_s, box_e, table, shift):
    if table.shape[0] == 0:
        idx, cnt = _holding(forms, 0, n, box_s, box_e, True)
    else:
        idx, cnt = _held_at(forms[0], box_s, box_e, table, shift)
        for f in range(1, n):
            bi, bc = _held_at(forms[f], box_s, box_e, table, shift)
            idx, cnt = _added(idx, cnt, bi, bc)
    m = idx.shape[0]
    starts = np.empty(m, np.int64)
    packed = np.empty(m, np.int64)
    for y in range(m):
        j = idx[y]
        length = box_e[j] - box_s[j] + 1
        if length > LONGEST or cnt[y] > _LOW:
            return starts[:0], packed[:0], False
        starts[y] = box_s[j]
        packed[y] = (length << 32) | cnt[y]
    return starts, packed, True


def term_documents(forms, box_s, box_e, table=None, shift=0):
    """The documents (box_s, box_e: disjoint, a GC-list) holding a point of a term's forms
    (each an ascending array of points; at most FORMS_PER_CALL), as bm25_steps takes a
    term's documents (`views`): their starts, ascending, and for each its length
    (e - s + 1) << 32 | the points it holds. None when a document is longer than LONGEST
    tokens or holds 2**32 points or more (they do not pack).
    `table`: start_table(box_s, shift) of these boxes (not checked but for its length),
    by which each point's document is found from its cell's first instead of by a
    gallop from the point before's: the same result, in about 0.6x the time for a
    common word of a large collection (the gallops' loads wait each on the last)."""
    box_s, box_e = _pair(box_s, box_e, "boxes")
    if len(forms) > FORMS_PER_CALL:
        raise ValueError(f"{len(forms)} postings arrays, more than {FORMS_PER_CALL}")
    if table is None:
        table = _NO_TABLE
    else:
        _table_shape(table, box_s, shift)
    n = len(forms)
    # (the shortest first: each form's boxes are added to the union of those before it,
    # so a word's rare forms are added to each other before its common one, not each
    # to the common one's: a stem group's documents in ~0.65x the time)
    padded = tuple(sorted((_ints(a, "points") for a in forms), key=len)) + \
        (_NO_POINTS,) * (FORMS_PER_CALL - n)
    starts, packed, ok = _term_documents(padded, n, box_s, box_e, table, int(shift))
    return (starts, packed) if ok else None


def _table_shape(table, box_s, shift) -> None:
    """Refuse a table that cannot be start_table(box_s, shift)."""
    if not (type(table) is np.ndarray and table.dtype in (np.int32, np.int64) and
            table.ndim == 1 and table.flags.c_contiguous):
        raise TypeError("table must be a one-dimensional int32 or int64 array")
    if not 0 <= int(shift) < 63:
        raise ValueError(f"shift must lie in [0, 63), not {shift!r}")
    if table.shape[0] != _table_length(box_s, int(shift)):
        raise ValueError(f"a table of {table.shape[0]} cells is not of these boxes")


def _table_length(box_s, shift: int) -> int:
    return (int(box_s[-1]) >> shift) + 2 if len(box_s) else 1


@njit(cache=True, nogil=True)
def _start_table(box_s, shift, c0, j0, out):
    nb = box_s.shape[0]
    j = j0
    for c in range(out.shape[0]):
        lo = (c0 + c) << shift
        while j < nb and box_s[j] < lo:
            j += 1
        out[c] = j


def start_table(box_s, shift, c0=0, j0=0):
    """For term_documents: for each cell c of 2**shift addresses from c0 on, to the one
    after the last box's start's, how many of the boxes (starts box_s, ascending) start
    before c << shift; j0: how many start before c0 << shift (a table's own entry at c0:
    the rest of a table whose boxes before cell c0 are as they were, made again). int32
    when the boxes are fewer than 2**31."""
    box_s = _ints(box_s, "starts")
    c0, j0 = int(c0), int(j0)
    if not 0 <= int(shift) < 63:
        raise ValueError(f"shift must lie in [0, 63), not {shift!r}")
    n = _table_length(box_s, int(shift))
    if not 0 <= c0 < n or not 0 <= j0 <= box_s.shape[0]:
        raise ValueError(f"cell {c0} (of {n}) or box {j0} out of range")
    out = np.empty(n - c0, np.int32 if box_s.shape[0] < 1 << 31 else np.int64)
    _start_table(box_s, int(shift), c0, j0, out)
    return out


@njit(cache=True, nogil=True)
def _term_cells(starts, packed, shift, k1, b, avglen):
    n = starts.shape[0]
    cells = np.empty(n, np.int64)
    most = np.empty(n, np.float64)
    m = 0
    for y in range(n):
        x = float(packed[y] & _LOW)
        length = float(packed[y] >> 32)
        sat = x / (x + k1 * (1.0 - b + b * length / avglen))   # (as _contribution)
        c = starts[y] >> shift
        if m and cells[m - 1] == c:
            if sat > most[m - 1]:
                most[m - 1] = sat
        else:
            cells[m] = c
            most[m] = sat
            m += 1
    return cells[:m].copy(), most[:m].copy()


def term_cells(starts, packed, shift, k1, b, avglen):
    """A term's bounds per cell of the address space, for bm25_steps' `cells`: of the term's
    documents (term_documents' starts, ascending, and packed length << 32 | tf), the cells
    (start >> shift) holding one's start, ascending, and in each the largest saturation
    tf / (tf + k1 (1 - b + b length / avglen)) of its documents (computed as bm25_steps
    computes a contribution, before the factor: factor x it bounds each one's there)."""
    s = _ints(starts, "starts")
    p = _ints(packed, "packed")
    if s.shape[0] != p.shape[0]:
        raise ValueError(f"{s.shape[0]} starts but {p.shape[0]} packed lengths and tfs")
    if not 0 <= int(shift) < 63:
        raise ValueError(f"shift must lie in [0, 63), not {shift!r}")
    return _term_cells(s, p, int(shift), float(k1), float(b), float(avglen))



@njit(cache=True, nogil=True)
def _add_cells(total, cells, values, scale):
    for y in range(cells.shape[0]):
        total[cells[y]] += scale * values[y]


def add_cells(total, cells, values, scale) -> None:
    """total[cells[y]] += scale x values[y] for each y, in place (total: float64; cells:
    indices into it, int32 or int64; values float32 or float64, taken as they are)."""
    if not (type(total) is np.ndarray and total.dtype == np.float64 and total.ndim == 1
            and total.flags.c_contiguous and total.flags.writeable):
        raise TypeError("total must be a writeable one-dimensional float64 array")
    c = cells if isinstance(cells, np.ndarray) and cells.dtype == np.int32 and \
        cells.ndim == 1 and cells.flags.c_contiguous else _ints(cells, "cells")
    v = values if isinstance(values, np.ndarray) and values.dtype == np.float32 and \
        values.ndim == 1 and values.flags.c_contiguous else _floats(values, "values")
    if c.shape[0] != v.shape[0]:
        raise ValueError(f"{c.shape[0]} cells but {v.shape[0]} values")
    if c.size and (int(c[0]) < 0 or int(c.max()) >= total.shape[0]):
        raise ValueError(f"cells must lie in [0, {total.shape[0]})")
    _add_cells(total, c, v, float(scale))


_NO_POINTS = np.empty(0, np.int64)
_NO_CELLS = np.empty(0, np.float64)
_NO_TABLE = np.empty(0, np.int32)


def bm25_steps(t, end, phase, floor, k, prune, slack1, k1, b, avglen, factors, rest, forms,
               term_forms, box_s, box_e, disjoint, acc_s, acc_e, acc_sc, views=False,
               cells=None, flat=0.0, shift=0):
    """BM25's exact top k by MaxScore (bm25.top's), resumable: terms t..end-1 of the query
    (ordered by their bounds, highest first) taken in turn from the state (phase, floor,
    the candidates acc_s, acc_e and their scores acc_sc, sorted by start). Term u's
    contribution to a box [s, e] holding tf > 0 of its points is
    factors[u] x tf / (tf + k1 (1 - b + b (e - s + 1) / avglen)); its points are those of
    the forms (each an ascending array of points; at most FORMS_PER_CALL)
    forms[term_forms[u - t]:term_forms[u - t + 1]].

    Before each term u (and once more before `end`, when the query has more terms): in
    phase 1, once there are k candidates and rest[u] (the bounds of terms u.. summed)
    x slack1 falls below the larger of their k-th best score and `floor`, phase 2 begins;
    in phase 2, a candidate whose score + rest[u] (x slack1) falls below that is dropped
    (prune false: neither). In phase 1 a term's scores (where positive) are merged into
    the candidates by start, the boxes (box_s, box_e: a GC-list holding every box that
    holds one of its points) holding its points found; in phase 2 the terms are added to
    the candidates, each candidate through every term of the call, dropped as soon as it
    cannot reach the k-th best of the scores the candidates kept reach (its points
    inside the candidates are enough). `disjoint`: no two boxes overlap. Scores are
    added in term order (0.0 + the first), as bm25.top adds them.

    `views`: each term of the call is given by its documents instead (term_documents: two
    arrays, the starts and the packed lengths and tfs, as forms[term_forms[u - t]] and
    the next; the boxes disjoint, and every candidate one of them): its contributions
    are read off them, the same floats.

    `cells` (float64; None: none): bounds of what terms t.. can add to a box, per cell of
    2**shift addresses: a box starting at s gets at most cells[s >> shift] + `flat` (0
    past the array's end: + flat) from them, each term's contributions there summed
    (term_cells x its factor; a term bounded only as a whole adds its bound to `flat`).
    With them (and prune), the lower of that and rest[u] bounds what terms u.. add to a
    box: phase 1 ends once the largest cell (+ flat) falls below the k-th best; a box
    whose score so far + that cannot reach the k-th best so far (or `floor`) is left out
    as terms are merged, and dropped in phase 2. The bounds must hold (the top k is then
    the same): they are not checked.

    Returns (the next term, phase, done: no term or no candidate left, acc_s, acc_e,
    acc_sc, points read)."""
    factors, rest = _floats(factors, "factors"), _floats(rest, "rest")
    term_forms = _ints(term_forms, "term forms")
    box_s, box_e = _pair(box_s, box_e, "boxes")
    acc_s, acc_e = _pair(acc_s, acc_e, "candidates")
    acc_sc = _floats(acc_sc, "candidate scores")
    t, end = int(t), int(end)
    if not 0 <= t <= end <= factors.shape[0] or rest.shape[0] < factors.shape[0]:
        raise ValueError(f"terms {t}..{end} of {factors.shape[0]}")
    if len(forms) > FORMS_PER_CALL:
        raise ValueError(f"{len(forms)} postings arrays, more than {FORMS_PER_CALL}")
    if term_forms.shape[0] != end - t + 1 or term_forms[0] < 0 or \
            term_forms[-1] > len(forms):
        raise ValueError("term_forms must give each term's forms, ascending")
    if acc_sc.shape[0] != acc_s.shape[0]:
        raise ValueError("a score per candidate is needed")
    if views and not disjoint:
        raise ValueError("a term's documents are of disjoint boxes")
    forms = tuple(_ints(a, "points") for a in forms) + \
        (_NO_POINTS,) * (FORMS_PER_CALL - len(forms))
    cells = _NO_CELLS if cells is None else _floats(cells, "cells")
    if not 0 <= int(shift) < 63:
        raise ValueError(f"shift must lie in [0, 63), not {shift!r}")
    return _bm25_steps(t, end, int(phase), float(floor), int(k), bool(prune), float(slack1),
                       float(k1), float(b), float(avglen), factors, rest, forms,
                       term_forms, box_s, box_e, bool(disjoint), acc_s, acc_e, acc_sc,
                       bool(views), cells, float(flat), int(shift))


@njit(cache=True, nogil=True)
def _bm25_documents_top(k, slack1, k1, b, avglen, factors, rest, starts, packed, sizes):
    n_terms = factors.shape[0]
    off = np.zeros(n_terms + 1, np.int64)   # (term u's documents: off[u]:off[u + 1])
    for u in range(n_terms):
        off[u + 1] = off[u] + sizes[u]
    at = off[:n_terms].copy()
    big = np.iinfo(np.int64).max
    heads = np.empty(n_terms, np.int64)   # (starts[at[u]], big past term u's last)
    for u in range(n_terms):
        heads[u] = starts[at[u]] if at[u] < off[u + 1] else big
    out_s = np.empty(off[n_terms], np.int64)
    out_e = np.empty(off[n_terms], np.int64)
    out_sc = np.empty(off[n_terms], np.float64)
    # the k best scores so far: a min-heap (k may be past every document: 2**62)
    heap = np.empty(max(min(k, off[n_terms]), 1), np.float64)
    size = 0
    kth = 0.0         # the k-th best so far (0 until there are k)
    essential = n_terms   # terms 0..essential-1: a document none of them holds is hopeless
    read = 0
    m = 0
    while True:
        while essential > 1 and size == k and rest[essential - 1] * slack1 < kth:
            essential -= 1
        doc = big
        for u in range(essential):
            if heads[u] < doc:
                doc = heads[u]
        if doc == big:
            break
        score = 0.0
        length = -1
        norm = 0.0
        hopeless = False
        for u in range(n_terms):
            if u >= essential:   # (a term left out of the essential ones: looked up)
                if size == k and (score + rest[u]) * slack1 < kth:
                    hopeless = True
                    break
                if heads[u] < doc:
                    end = off[u + 1]
                    lo = _ge(starts, at[u], end, doc)    # (galloping)
                    at[u] = lo
                    heads[u] = starts[lo] if lo < end else big
            if heads[u] == doc:
                y = at[u]
                tf = packed[y] & _LOW
                read += tf
                at[u] = y + 1
                heads[u] = starts[y + 1] if y + 1 < off[u + 1] else big
                if length < 0:   # (the length's part of _contribution, once a document)
                    length = packed[y] >> 32
                    norm = k1 * (1.0 - b + b * float(length) / avglen)
                if tf > 0:
                    x = float(tf)
                    c = factors[u] * (x / (x + norm))   # (_contribution's floats)
                    if c > 0:
                        score = score + c
        if hopeless or not score > 0 or (size == k and not score > kth):
            continue   # (k documents before it score as much: it is not among the k best)
        out_s[m], out_e[m], out_sc[m] = doc, doc + length - 1, score
        m += 1
        if k > 0:
            if size < k:
                _heap_push(heap, size, score)
                size += 1
                if size == k:
                    kth = heap[0]
            elif score > heap[0]:
                _heap_replace(heap, size, score)
                kth = heap[0]
    pick = _bm25_pick(out_sc[:m], k, True)   # (in address order: ties by address)
    return out_s[pick], out_e[pick], out_sc[pick], read


def bm25_documents_top(k, slack1, k1, b, avglen, factors, rest, forms):
    """BM25's top k over documents, document at a time (MaxScore): the terms (ordered by
    their bounds, highest first; rest[u] the bounds of terms u.. summed, as bm25_steps
    takes them) given by their documents (term_documents: forms[2u] the starts of term
    u's documents, ascending, forms[2u + 1] each one's length << 32 | tf; any number of
    terms, as one flat array each way in the call). A document's
    score is 0.0 + its terms' contributions in term order, as bm25_steps adds them (the
    same float64); a document none of the terms a document could still need holds is
    not visited, and one is left once its score so far + rest[u] (x slack1) falls below
    the k-th best so far. Returns (starts, ends, scores, tfs read) of the k best
    documents with a score > 0, by score descending, ties by start (as bm25_pick picks
    them from the documents it scored whole, in address order). Each document's length
    normalization is computed once, by _contribution's operations (the same float64 for
    every term)."""
    factors, rest = _floats(factors, "factors"), _floats(rest, "rest")
    n = factors.shape[0]
    if rest.shape[0] < n or len(forms) != 2 * n or not n:
        raise ValueError(f"{n} terms need {n} bounds and their documents' two arrays each")
    sizes = [len(a) for a in forms]
    if sizes[0::2] != sizes[1::2]:
        raise ValueError("a term's starts and lengths differ in length")
    # (flat arrays, checked once: numba types and unboxes a tuple of arrays element by
    # element at each call, and indexes one at run time slowly)
    return _bm25_documents_top(max(int(k), 0), float(slack1), float(k1), float(b),
                               float(avglen), factors, rest,
                               _ints(np.concatenate(forms[0::2]), "documents"),
                               _ints(np.concatenate(forms[1::2]), "documents"),
                               np.array(sizes[0::2], np.int64))


@njit(cache=True, nogil=True)
def _bm25_pick(scores, k, positive):
    order = np.argsort(-scores, kind="mergesort")
    out = np.empty(min(k, scores.shape[0]), np.int64)
    m = 0
    for x in range(order.shape[0]):
        if m == out.shape[0]:
            break
        if positive and not scores[order[x]] > 0:
            break
        out[m] = order[x]
        m += 1
    return out[:m]


def bm25_pick(scores, k, positive):
    """The indices of the k best scores (descending; ties in index order), only positive
    ones if `positive`."""
    return _bm25_pick(_floats(scores, "scores"), max(int(k), 0), bool(positive))
