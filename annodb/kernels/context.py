"""Numba kernels for recall's context score (annodb/recall.py drives them).

    word_counts(points, starts, ends)            per memory [s, e], the sorted points
                                                 inside it (a word's count)
    context_scores(tf, ..., settings)            each memory's score: BM25F over it and
                                                 its neighbours, the passage around it,
                                                 dates, labels and the length prior

One call scores every memory of a recall, where numpy made a dozen arrays of the
memories' length per query word (a recall without a filter over 94,112 memories: 44 ->
14 ms; benchmarks/RESULTS.md, "Recall without a filter"). The score is recall.py's
formula operation for operation, so the same float64 to the bit; the brute-force twins
are in tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _floats, _ints, _pair

__all__ = ["word_counts", "context_scores", "SETTINGS"]

# the order of the settings context_scores takes (recall.Context's names)
# (spread: a memory's context length over its own in an endless session, recall.Context's
# spread(), summed there in its own order)
SETTINGS = ("k1", "b", "before", "after", "window", "common", "passage", "reach",
            "passage_k1", "passage_b", "dates", "labels", "length", "spread")


@njit(cache=True, nogil=True)
def _word_counts(points, starts, ends):
    n = starts.shape[0]
    out = np.zeros(n, np.float64)
    m = points.shape[0]
    p = 0                     # the points before starts[i]
    q = 0                     # the points at or before ends[i]
    for i in range(n):
        if i and (starts[i] <= starts[i - 1] or ends[i] <= ends[i - 1]):
            raise ValueError("the memories must be a GC-list (starts and ends ascending)")
        while p < m and points[p] < starts[i]:
            p += 1
        while q < m and points[q] <= ends[i]:
            q += 1
        out[i] = q - p
    return out


def word_counts(points, starts, ends) -> np.ndarray:
    """For each interval [starts[i], ends[i]] of a GC-list (starts and ends ascending, as
    a filter's memories are), how many of `points` (ascending) lie inside it, as float64:
    searchsorted(points, ends, "right") - searchsorted(points, starts, "left")."""
    pts = _ints(points, "points")
    s, e = _pair(starts, ends, "memories")
    return _word_counts(pts, s, e)


@njit(cache=True, nogil=True)
def _plain_sums(values, first, last, reach, out):
    """out[i] = the sum of values[j] over j != i of i's run at most reach away, from
    prefix sums (as kernels.context_sums does when nothing decays)."""
    n = values.shape[0]
    total = np.zeros(n + 1, np.float64)
    for i in range(n):
        total[i + 1] = total[i] + values[i]
    for i in range(n):
        lo = max(i - reach, first[i])
        hi = min(i + reach, last[i])
        out[i] = (total[hi + 1] - total[lo]) - values[i]


@njit(cache=True, nogil=True)
def _decayed_at(values, nz, m, p, i, lo, hi, down, up):
    """The decayed sum of item i's neighbours in [lo, hi] (nz[:m]: the nonzero items in
    order, p the first at or after i), added in the order kernels.context_sums adds
    them (j = i - 1 down, then i + 1 up), its zero terms skipped (adding 0.0 changes no
    sum): the same float64."""
    acc = 0.0
    q = p - 1
    while q >= 0 and nz[q] >= lo:
        j = nz[q]
        acc += down[i - j] * values[j]
        q -= 1
    q = p
    if q < m and nz[q] == i:
        q += 1
    while q < m and nz[q] <= hi:
        j = nz[q]
        acc += up[j - i] * values[j]
        q += 1
    return acc


@njit(cache=True, nogil=True)
def _decayed_sums(values, first, last, before, after, reach, out):
    """out[i] = the sum over j != i of i's run at most reach away of before ** (i - j)
    values[j] (j before i) or after ** (j - i) values[j] (after), as kernels.context_sums
    gives it (_decayed_at)."""
    n = values.shape[0]
    if before == 1.0 and after == 1.0:
        _plain_sums(values, first, last, reach, out)
        return
    down = np.ones(reach + 1, np.float64)
    up = np.ones(reach + 1, np.float64)
    for d in range(1, reach + 1):
        down[d] = down[d - 1] * before
        up[d] = up[d - 1] * after
    nz = np.empty(n, np.int64)
    m = 0
    for j in range(n):
        if values[j] != 0.0:
            nz[m] = j
            m += 1
    p = 0                                   # the first nonzero at or after i
    for i in range(n):
        while p < m and nz[p] < i:
            p += 1
        out[i] = _decayed_at(values, nz, m, p, i, max(i - reach, first[i]),
                             min(i + reach, last[i]), down, up)


@njit(cache=True, nogil=True, error_model="numpy")
def _sparse_word(x, nz, m, cx, far, weight, pweight, norm, pnorm, limit, wlo, whi, rlo, rhi,
                 down, up, plain, turn, passage):
    """One word's terms, added only to the memories at most `far` from one holding it
    (nz[:m]): any other's window and passage hold none of it, so its term is 0.0 and
    adding it changes nothing (the caller made sure: norms > 0, finite weights, counts
    >= 0). The window's and the passage's sums from prefix sums over the holders alone
    (cx), which add the same nonzero terms in the same order as the dense path's prefix
    sums over every memory: the same float64. A rare word costs what is near it, not a
    pass over every memory."""
    n = x.shape[0]
    for k in range(m):
        cx[k + 1] = cx[k] + x[nz[k]]
    p = 0      # the first holder at or after i
    a = 0      # ... at or after wlo[i]; b: after whi[i]; c: at or after rlo[i]; d: after rhi[i]
    b = 0
    c = 0
    d = 0
    done = -1  # the memories up to here are done
    for j in range(m):
        lo = max(nz[j] - far, done + 1)
        hi = min(nz[j] + far, n - 1)
        for i in range(lo, hi + 1):
            while p < m and nz[p] < i:
                p += 1
            while a < m and nz[a] < wlo[i]:
                a += 1
            while b < m and nz[b] <= whi[i]:
                b += 1
            while c < m and nz[c] < rlo[i]:
                c += 1
            while d < m and nz[d] <= rhi[i]:
                d += 1
            if plain:
                lent = (cx[b] - cx[a]) - x[i]
            else:
                lent = _decayed_at(x, nz, m, p, i, wlo[i], whi[i], down, up)
            h = 1.0 if x[i] > 0 else 0.0
            near = float(b - a) - h
            flat = (cx[d] - cx[c]) - x[i]
            wide = x[i] + (lent if h + near <= limit[i] else 0.0)
            turn[i] += weight * wide / (wide + norm[i])
            pp = x[i] + flat
            passage[i] += pweight * pp / (pp + pnorm[i])
        if hi > done:
            done = hi


@njit(cache=True, nogil=True, error_model="numpy")   # (x / 0.0 as numpy: inf or nan)
def _context_scores(tf, counts, idfs, pidfs, lengths, runs, dated, named, has_named,
                    avglen, st):
    k1, b, before, after = st[0], st[1], st[2], st[3]
    window, common, passage_w, reach = int(st[4]), st[5], st[6], int(st[7])
    pk1, pb, dates_w, labels_w, length_w, spread = st[8], st[9], st[10], st[11], st[12], st[13]
    words, n = tf.shape
    out = np.zeros(n, np.float64)
    if n == 0:
        return out
    first = np.zeros(n, np.int64)
    last = np.zeros(n, np.int64)
    for i in range(1, n):
        first[i] = first[i - 1] if runs[i] == runs[i - 1] else i
    last[n - 1] = n - 1
    for i in range(n - 2, -1, -1):
        last[i] = last[i + 1] if runs[i] == runs[i + 1] else i
    # the memory's own context (decayed) and passage (flat) lengths
    lent0 = np.zeros(n, np.float64)
    _decayed_sums(lengths, first, last, before, after, window, lent0)
    flat0 = np.zeros(n, np.float64)
    _plain_sums(lengths, first, last, reach, flat0)
    ones = np.ones(n, np.float64)
    near0 = np.zeros(n, np.float64)
    _plain_sums(ones, first, last, window, near0)
    norm = np.empty(n, np.float64)
    pnorm = np.empty(n, np.float64)
    limit = np.empty(n, np.float64)
    for i in range(n):
        norm[i] = k1 * (1.0 - b + b * (lengths[i] + lent0[i]) / (avglen * spread))
        pnorm[i] = pk1 * (1.0 - pb + pb * (lengths[i] + flat0[i]) / (avglen * (2 * reach + 1)))
        limit[i] = max(common * (1.0 + near0[i]), 1.0)
    # each memory's window and passage bounds (within its run)
    wlo = np.empty(n, np.int64)
    whi = np.empty(n, np.int64)
    rlo = np.empty(n, np.int64)
    rhi = np.empty(n, np.int64)
    for i in range(n):
        wlo[i] = max(i - window, first[i])
        whi[i] = min(i + window, last[i])
        rlo[i] = max(i - reach, first[i])
        rhi[i] = min(i + reach, last[i])
    down = np.ones(window + 1, np.float64)
    up = np.ones(window + 1, np.float64)
    for d in range(1, window + 1):
        down[d] = down[d - 1] * before
        up[d] = up[d - 1] * after
    plain = before == 1.0 and after == 1.0
    skip = True           # (a word no memory here holds adds 0.0 to each: skipped)
    for i in range(n):
        if not (norm[i] > 0.0 and pnorm[i] > 0.0):
            skip = False  # (0 / 0 is NaN: added, as the formula does)
    turn = np.zeros(n, np.float64)
    passage = np.zeros(n, np.float64)
    th = np.zeros(n + 1, np.float64)     # prefix sums of held, and of the counts
    tx = np.zeros(n + 1, np.float64)
    nz = np.empty(n, np.int64)
    cx = np.zeros(n + 1, np.float64)     # (the sparse path's prefix sums, over nz)
    far = max(window, reach)
    for w in range(words):
        x = tf[w]
        m = 0
        counts_only = True   # (every count >= 0: held is nonzero)
        for i in range(n):
            if x[i] != 0.0:
                nz[m] = i
                m += 1
            if not x[i] >= 0.0:
                counts_only = False
        if m == 0 and skip:
            continue
        weight = counts[w] * idfs[w]
        pweight = counts[w] * pidfs[w]
        if skip and counts_only and np.isfinite(weight) and np.isfinite(pweight):
            _sparse_word(x, nz, m, cx, far, weight, pweight, norm, pnorm, limit, wlo, whi,
                         rlo, rhi, down, up, plain, turn, passage)
            continue
        for i in range(n):
            h = 1.0 if x[i] > 0 else 0.0
            th[i + 1] = th[i] + h
            tx[i + 1] = tx[i] + x[i]
        p = 0
        for i in range(n):
            while p < m and nz[p] < i:
                p += 1
            # the same sums as _decayed_sums and _plain_sums, term by term
            if plain:
                lent = (tx[whi[i] + 1] - tx[wlo[i]]) - x[i]
            else:
                lent = _decayed_at(x, nz, m, p, i, wlo[i], whi[i], down, up)
            h = 1.0 if x[i] > 0 else 0.0
            near = (th[whi[i] + 1] - th[wlo[i]]) - h
            flat = (tx[rhi[i] + 1] - tx[rlo[i]]) - x[i]
            wide = x[i] + (lent if h + near <= limit[i] else 0.0)
            turn[i] += weight * wide / (wide + norm[i])
            pp = x[i] + flat
            passage[i] += pweight * pp / (pp + pnorm[i])
    for i in range(n):
        extra = passage_w * passage[i] + dates_w * dated[i]
        if has_named:
            extra = extra + labels_w * named[i]
        gate = 1.0 if turn[i] > 0 else 0.0
        out[i] = (turn[i] + gate * extra) * (1.0 + length_w * lengths[i] / (lengths[i] + avglen))
    return out


def context_scores(tf, counts, idfs, pidfs, lengths, runs, dated, named, avglen: float,
                   settings) -> np.ndarray:
    """recall.score's formula over consecutive memories (see recall.score for the
    arguments; `named` None: no labels; `settings` the values of SETTINGS, in order)."""
    length = _floats(lengths, "lengths")
    n = length.shape[0]
    counts_ = _floats(counts, "counts")
    words = counts_.shape[0]
    t = np.ascontiguousarray(np.asarray(tf, dtype=np.float64))
    if t.size != words * n:
        raise ValueError(f"tf has {t.size} counts, not {words} words x {n} memories")
    t = t.reshape(words, n)
    idf_ = _floats(idfs, "idfs")
    pidf_ = _floats(pidfs, "pidfs")
    if idf_.shape[0] != words or pidf_.shape[0] != words:
        raise ValueError(f"{words} words but {idf_.shape[0]} idfs and {pidf_.shape[0]} "
                         "passage idfs")
    g = _ints(runs, "runs")
    d = _floats(dated, "dated")
    if g.shape[0] != n or d.shape[0] != n:
        raise ValueError(f"{n} memories but {g.shape[0]} run ids and {d.shape[0]} dates")
    has = named is not None
    m = _floats(named, "named") if has else np.zeros(n, np.float64)
    if m.shape[0] != n:
        raise ValueError(f"{n} memories but {m.shape[0]} label weights")
    st = np.array([float(v) for v in settings], dtype=np.float64)
    if st.shape[0] != len(SETTINGS):
        raise ValueError(f"settings: {len(SETTINGS)} values ({', '.join(SETTINGS)}), "
                         f"not {st.shape[0]}")
    if not (0.0 <= st[2] <= 1.0 and 0.0 <= st[3] <= 1.0):
        raise ValueError("the decays must lie in [0, 1]")
    for i in (4, 7):
        if st[i] != int(st[i]) or st[i] < 0:
            raise ValueError(f"{SETTINGS[i]} must be a whole number >= 0, not {st[i]!r}")
    return _context_scores(t, counts_, idf_, pidf_, length, g, d, m, has, float(avglen), st)
