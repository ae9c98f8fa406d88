"""Numba kernels for one ranking's all-of (^ ...) of word groups, in the blocks' ranges:
the covers of `(^ (+ ...) ...)` and what is still to be read for them, in one call
(annodb/ranking.py drives them; algebra.py holds the region algebra they build on).
Results are defined by the brute-force twin `all_of_groups` in tests/naive.py.
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit

from .algebra import _EMPTY_I, _I64_MAX, _block_ranges, _both_of, _ge, _gt, _ints, _one_of

__all__ = ["all_of_groups", "all_of_groups_packed", "ALL_OF_WIDTHS", "FEW"]

_WORDS_WIDTHS = (8, 16, 32, 64)  # all_of_groups: how many words a call may name (one
ALL_OF_WIDTHS = _WORDS_WIDTHS    # compiled kernel each: ranking.load_kernels loads them)
FEW = 64  # all_of_groups: a phrase's words not at hand asked for at once at <= FEW candidates


@njit(cache=True, nogil=True)
def _leaf_in(words, counts, have, toks, t0, t1, los, his, need, few):
    """The intervals of the word or phrase toks[t0:t1] (indices into words: each a word's
    sorted points) lying inside one of the sorted, disjoint ranges [los[r], his[r]], and
    the positions (word, address) at which words not at hand (have 0) must be read for
    them. A phrase is read from its rarest word (by counts); the others are galloped to
    at each candidate, those at hand first. Its rarest word not at hand: need[w] = 2 (read
    it inside the ranges) and nothing found; else the positions of the rarest word not
    at hand at the candidates left (need[w] = 1; of every word not at hand when `few`
    candidates or fewer are left) and nothing found."""
    n = t1 - t0
    k = 0  # (the rarest word's place in the phrase)
    for t in range(1, n):
        if counts[toks[t0 + t]] < counts[toks[t0 + k]]:
            k = t
    w = toks[t0 + k]
    out = np.empty(16, np.int64)
    rw = np.empty(0, np.int64)
    if not have[w]:
        need[w] = 2
        return out[:0], out[:0], rw, rw
    missing = -1  # (the rarest word not at hand, read first: its checks leave fewer)
    for t in range(n):
        if not have[toks[t0 + t]] and (missing < 0 or
                                       counts[toks[t0 + t]] < counts[toks[t0 + missing]]):
            missing = t
    a = words[w]
    na = a.shape[0]
    m = 0
    i = 0
    for r in range(los.shape[0]):
        if his[r] - los[r] < n - 1:
            continue
        # the rarest word's points x with x - k in [lo, hi - (n - 1)]
        i = _ge(a, i, na, los[r] + k)
        j = _gt(a, i, na, his[r] - (n - 1) + k)
        if m + j - i > out.shape[0]:
            grown = np.empty(max(2 * out.shape[0], m + j - i), np.int64)
            grown[:m] = out[:m]
            out = grown
        for x in range(i, j):
            out[m] = a[x] - k
            m += 1
        i = j
    # the other words at hand, rarest first, each galloped to at the candidates left
    ts = np.argsort(counts[toks[t0:t1]], kind="mergesort")
    for t in ts:
        if t == k or not have[toks[t0 + t]] or m == 0:
            continue
        b = words[toks[t0 + t]]
        nb = b.shape[0]
        c = 0
        kept = 0
        for x in range(m):
            p = out[x]
            c = _ge(b, c, nb, p + t)
            if c < nb and b[c] == p + t:
                out[kept] = p
                kept += 1
        m = kept
    if missing >= 0:  # (the candidates left, to be checked where that word is read)
        if m > few:  # (the rarest first: its checks leave fewer for the others)
            w = toks[t0 + missing]
            need[w] = max(need[w], 1)
            rw = np.full(m, w, np.int64)
            return out[:0], out[:0], rw, out[:m] + missing
        rw = np.empty(0, np.int64)  # (every one at once: one call less)
        rx = np.empty(0, np.int64)
        for t in range(n):
            w = toks[t0 + t]
            if not have[w]:
                need[w] = max(need[w], 1)
                rw = np.concatenate((rw, np.full(m, w, np.int64)))
                rx = np.concatenate((rx, out[:m] + t))
        return out[:0], out[:0], rw, rx
    out = out[:m].copy()
    return out, out + (n - 1) if n > 1 else out, rw, rw


@njit(cache=True, nogil=True)
def _group_in(words, counts, have, toks, leaf_at, group_at, g, los, his, need, few):
    """`(+ ...)` of group g's words and phrases, their intervals inside the ranges, and the
    positions words not at hand must be read at for them (see _leaf_in)."""
    l0 = group_at[g]
    s, e, rw, rx = _leaf_in(words, counts, have, toks, leaf_at[l0], leaf_at[l0 + 1], los,
                            his, need, few)
    for leaf in range(l0 + 1, group_at[g + 1]):
        bs, be, bw, bx = _leaf_in(words, counts, have, toks, leaf_at[leaf],
                                  leaf_at[leaf + 1], los, his, need, few)
        s, e = _one_of(s, e, bs, be)
        if bw.shape[0]:
            rw = np.concatenate((rw, bw))
            rx = np.concatenate((rx, bx))
    return s, e, rw, rx


@njit(cache=True, nogil=True)
def _inside_ranges(s, e, los, his):
    """The intervals of a GC-list lying inside one of the sorted, disjoint ranges."""
    keep = np.empty(s.shape[0], np.bool_)
    r = 0
    nr = los.shape[0]
    for i in range(s.shape[0]):
        r = _gt(his, r, nr, s[i] - 1)  # the first range ending at or after s[i]
        keep[i] = r < nr and los[r] <= s[i] and e[i] <= his[r]
    return s[keep], e[keep]


@njit(cache=True, nogil=True)
def _holding(s, e, los, his):
    """The ranges (sorted, disjoint) holding an interval of the GC-list inside them."""
    keep = np.zeros(los.shape[0], np.bool_)
    r = 0
    nr = los.shape[0]
    for i in range(s.shape[0]):
        r = _gt(his, r, nr, s[i] - 1)  # the first range ending at or after s[i]
        if r >= nr:
            break
        if los[r] <= s[i] and e[i] <= his[r]:
            keep[r] = True
    return los[keep], his[keep]


@njit(cache=True, nogil=True)
def _complete(have, toks, leaf_at, group_at, g):
    for leaf in range(group_at[g], group_at[g + 1]):
        for t in range(leaf_at[leaf], leaf_at[leaf + 1]):
            if not have[toks[t]]:
                return False
    return True


@njit(cache=True, nogil=True)
def _packed(s, e, need, pos, runs, los, his):
    """all_of_groups' arrays as one (each array a kernel returns is boxed by a call back
    into Python): their lengths (s's, need's, pos's, runs', los'), then the arrays end to
    end (e as long as s, his as los)."""
    ns, nn, npos, nruns, nlos = s.shape[0], need.shape[0], pos.shape[0], runs.shape[0], \
        los.shape[0]
    out = np.empty(5 + 2 * ns + nn + npos + nruns + 2 * nlos, np.int64)
    out[0], out[1], out[2], out[3], out[4] = ns, nn, npos, nruns, nlos
    o = _put(out, 5, s)
    o = _put(out, o, e)
    o = _put(out, o, need)
    o = _put(out, o, pos)
    o = _put(out, o, runs)
    o = _put(out, o, los)
    _put(out, o, his)
    return out


@njit(cache=True, nogil=True)
def _put(out, o, a):
    for i in range(a.shape[0]):
        out[o + i] = a[i]
    return o + a.shape[0]


@njit(cache=True, nogil=True)
def _all_of_groups(words, plan, nw, nt, nl, firsts, few):
    # (plan: counts, have, toks, leaf_at, group_at laid end to end, one array to pass)
    counts = plan[:nw]
    have = plan[nw:2 * nw]
    toks = plan[2 * nw:2 * nw + nt]
    leaf_at = plan[2 * nw + nt:2 * nw + nt + nl]
    group_at = plan[2 * nw + nt + nl:]
    ng = group_at.shape[0] - 1
    nw = counts.shape[0]
    need = np.zeros(nw, np.int64)
    est = np.zeros(ng, np.int64)  # (an upper bound of each group's intervals)
    for g in range(ng):
        for leaf in range(group_at[g], group_at[g + 1]):
            least = _I64_MAX
            for t in range(leaf_at[leaf], leaf_at[leaf + 1]):
                least = min(least, counts[toks[t]])
            est[g] += least
    order = np.argsort(est, kind="mergesort")
    none = np.empty(0, np.int64)
    if not _complete(have, toks, leaf_at, group_at, order[0]):
        need[:] = -1  # (the rarest group is found whole: its words must be at hand)
        return _packed(none, none, need, none, none, none, none), 0
    los = np.zeros(1, np.int64)
    his = np.full(1, _I64_MAX, np.int64)
    ds, de, _, _ = _group_in(words, counts, have, toks, leaf_at, group_at, order[0], los,
                             his, need, few)
    work = ds.shape[0]
    los, his = _block_ranges(firsts, ds)
    s, e = _inside_ranges(ds, de, los, his)
    rw = none
    rx = none
    rlos = none  # (the ranges a word is asked for in, the first time one is)
    rhis = none
    for x in range(1, ng):
        if s.shape[0] == 0:
            break
        # only the ranges holding a cover so far can hold one of the whole query
        los, his = _holding(s, e, los, his)
        g = order[x]
        if group_at[g + 1] - group_at[g] == 1 and \
                leaf_at[group_at[g] + 1] - leaf_at[group_at[g]] == 1 and \
                have[toks[leaf_at[group_at[g]]]]:
            # one word: its whole list, galloped through (a cover inside a range holds
            # only intervals inside it, and is minimal among those as among all)
            bs = words[toks[leaf_at[group_at[g]]]]
            s, e = _both_of(s, e, bs, bs)
        else:
            asked = (need == 2).sum()
            bs, be, bw, bx = _group_in(words, counts, have, toks, leaf_at, group_at, g,
                                       los, his, need, few)
            if rlos.shape[0] == 0 and (need == 2).sum() > asked:
                rlos = los
                rhis = his
            work += bs.shape[0]
            if bw.shape[0]:
                rw = np.concatenate((rw, bw))
                rx = np.concatenate((rx, bx))
            if not _complete(have, toks, leaf_at, group_at, g):
                continue  # (folded in once its missing words are read)
            s, e = _both_of(s, e, bs, be)
        work += s.shape[0]
    if s.shape[0] == 0:  # (no cover: nothing more to read)
        need[:] = 0
        return _packed(none, none, need, none, none, none, none), work
    if (need > 0).any():
        # the positions asked of each word, sorted and distinct, one run a word
        order = np.argsort(rx, kind="mergesort")
        order = order[np.argsort(rw[order], kind="mergesort")]
        pw = rw[order]
        px = rx[order]
        keep = np.ones(px.shape[0], np.bool_)
        for i in range(1, px.shape[0]):
            keep[i] = pw[i] != pw[i - 1] or px[i] != px[i - 1]
        pw = pw[keep]
        px = px[keep]
        at = np.searchsorted(pw, np.arange(nw + 1))
        return _packed(none, none, need, px, at, rlos, rhis), work
    s, e = _inside_ranges(s, e, los, his)
    los, his = _holding(s, e, los, his)
    return _packed(s, e, need, none, none, los, his), work


def all_of_groups_packed(words, counts, have, toks, leaf_at, group_at, firsts, few=FEW):
    """The covers of `(^ G1 G2 ...)`, each G `(+ ...)` of words and phrases, lying inside
    the blocks of a disjoint container list that hold one of the rarest G's intervals, in
    one call, or what must be read first for them.

    `words` is a sequence of each word's sorted points (at most 64), `counts` how many
    points each has in all (what plans follow), `have` whether each is at hand (the whole
    list, or enough of it: see below); a word or phrase is toks[leaf_at[i]:leaf_at[i +
    1]], indices into words; group g is the words and phrases leaf_at[group_at[g]] ..
    leaf_at[group_at[g + 1]] - 1; `firsts` is the container list's directory (its
    blocks' first starts, see block_ranges). Plans as the evaluator does: the rarest
    group found whole gives the blocks (their ranges); in them the groups rarest first,
    a phrase from its rarest word, the others galloped to at its candidates, a word
    galloped through, stopping when nothing is left. A phrase's words not at hand are
    asked for at its candidates one by one, the rarest first, or all at once when `few`
    candidates or fewer are left (a common word read at many candidates costs more
    than a call).

    Returns (one array, intervals produced): the array holds the lengths of the cover
    starts, need, the positions, their runs and the range starts, then the cover starts,
    ends, need, positions, their runs, range starts, range ends end to end (all_of_groups
    gives them apart). need[w] is 0 when word w was not needed beyond what is at hand,
    1 when its points at positions[runs[w]:runs[w + 1]] must be read, 2 when its points
    inside the ranges must be, -1 everywhere when the rarest group has a word not at
    hand (nothing can be done). When no word is needed, the covers are those inside a
    range, every cover inside a container of those blocks is one of them, and the ranges
    are those of the blocks holding a cover; a second call with the needed words' points
    there (and have 1) gives them. What is read of a word at positions serves only the
    phrase that asked: a word not at hand is named by one token only (the caller gives
    each token its own place)."""
    nw = len(words)
    width = next((w for w in _WORDS_WIDTHS if w >= nw), None)
    if width is None:
        raise ValueError(f"all_of_groups: at most {_WORDS_WIDTHS[-1]} words, got {nw}")
    leaf_at, group_at = list(leaf_at), list(group_at)
    # (each word once, in order, as gcl names them: nothing more to check of the tokens)
    plain = type(toks) is range and toks == range(nw)
    toks = list(toks)
    if len(group_at) < 2 or group_at[0] != 0 or group_at[-1] != len(leaf_at) - 1 or \
            leaf_at[0] != 0 or leaf_at[-1] != len(toks) or \
            not all(map(operator.lt, group_at, group_at[1:])) or \
            not all(map(operator.lt, leaf_at, leaf_at[1:])):
        raise ValueError("all_of_groups: group_at and leaf_at must split the leaves and "
                         "tokens into non-empty runs")
    if len(counts) != nw or len(have) != nw or not plain and \
            any(not 0 <= t < nw for t in toks):
        raise ValueError("all_of_groups: a token names no word, or counts or have are "
                         "not one a word")
    if not plain:
        missing = [t for t in toks if not have[t]]
        if len(set(missing)) != len(missing):
            raise ValueError("all_of_groups: a word not at hand is named more than once")
    # (the tuple padded to one of a few widths: numba compiles one kernel per width)
    padded = tuple([_ints(w, "words") for w in words]) + (_EMPTY_I,) * (width - nw)
    plan = np.array([*counts, *have, *toks, *leaf_at, *group_at], np.int64)
    return _all_of_groups(padded, plan, nw, len(toks), len(leaf_at), _ints(firsts, "firsts"),
                          operator.index(few))


def all_of_groups(words, counts, have, toks, leaf_at, group_at, firsts, few=FEW):
    """all_of_groups_packed's arrays apart: (cover starts, ends, intervals produced, need,
    positions, their runs, range starts, range ends), as all_of_groups_packed says."""
    out, work = all_of_groups_packed(words, counts, have, toks, leaf_at, group_at, firsts,
                                     few)
    ns, nn, npos, nruns, nlos = out[:5].tolist()
    a = 5 + 2 * ns
    b = a + nn
    c = b + npos
    d = c + nruns
    return (out[5:5 + ns], out[5 + ns:a], work, out[a:b], out[b:c], out[c:d],
            out[d:d + nlos], out[d + nlos:d + 2 * nlos])
