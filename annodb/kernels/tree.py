"""A whole operator tree of all-of, one-of and followed-by over words and phrases,
evaluated inside a region in one kernel call (the evaluator's compiled path, gcl.py).

The tree is flat arrays, one row per distinct node, children before parents:

- ``kind[i]``: TERM (a word or a phrase), ALL ``(^ ...)``, ONE ``(+ ...)``, FOLLOW
  ``(... ...)``; ``args[arg_lo[i]:arg_hi[i]]`` the operands of an operator (distinct for
  ALL and ONE, in order, repeats kept for FOLLOW); ``words[word_lo[i]:word_hi[i]]`` a
  term's words, in phrase order, as slots into ``ws``/``we``.
- ``ws[k]``, ``we[k]``: word k's intervals (a GC-list: starts and ends), its whole list or
  any run of it holding every interval that starts inside a range of the region;
  ``counts[k]`` its list's count (the planner's estimate, as gcl.Evaluator.estimate).
- ``los``, ``his``: the region, sorted disjoint closed ranges.

The result is the root's intervals lying inside a range of the region: exactly
``region.select(eval(root))`` (tests/naive.py, ``eval_tree``). The plan is the
evaluator's: all-of and followed-by evaluate their rarest operand first and the others
only in the ranges holding one of its intervals; a phrase starts from its rarest word and
checks each run of another word at the candidates left (galloping); one-of merges its
operands pairwise; a node met again in the same ranges is not evaluated again. ``room``
bounds the intervals produced (-1: no bound); past it the call stops and says so.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _I64_MAX, _both_of, _followed_by, _ge, _gt, _ints, _one_of, _runs_at, _select

TERM, ALL, ONE, FOLLOW = 0, 1, 2, 3
BUCKETS = (8, 32, 128)   # words are passed as tuples of these sizes (one compilation each)
_EMPTY = np.empty(0, np.int64)


@njit(cache=True, nogil=True)
def _inside(s, e, los, his):
    """The intervals of the GC-list (s, e) lying inside one of the ranges: for each range,
    a run from the first starting at or after its low end to the last ending at or before
    its high end (both galloped to)."""
    n = s.shape[0]
    nr = los.shape[0]
    a = np.empty(nr, np.int64)
    b = np.empty(nr, np.int64)
    total = 0
    i = 0
    for r in range(nr):
        i = _ge(s, i, n, los[r])
        j = _gt(e, i, n, his[r])
        a[r] = i
        b[r] = j
        total += j - i
        i = j
    rs = np.empty(total, np.int64)
    re = np.empty(total, np.int64)
    m = 0
    for r in range(nr):
        for x in range(a[r], b[r]):
            rs[m] = s[x]
            re[m] = e[x]
            m += 1
    return rs, re


@njit(cache=True, nogil=True)
def _term(ws, we, slots, counts, los, his):
    """A word's or a phrase's intervals inside the ranges, and the candidate checks made."""
    nt = slots.shape[0]
    if nt == 0:
        return _EMPTY, _EMPTY, 0
    if nt == 1:
        s, e = _inside(ws[slots[0]], we[slots[0]], los, his)
        return s, e, 0
    for t in range(nt):
        if counts[slots[t]] == 0:
            return _EMPTY, _EMPTY, 0
    # runs of one word (`a a a` is one run of three): (slot, offset, length)
    run_w = np.empty(nt, np.int64)
    run_off = np.empty(nt, np.int64)
    run_len = np.empty(nt, np.int64)
    nr = 0
    for t in range(nt):
        if nr > 0 and run_w[nr - 1] == slots[t]:
            run_len[nr - 1] += 1
        else:
            run_w[nr] = slots[t]
            run_off[nr] = t
            run_len[nr] = 1
            nr += 1
    # rarest word first; then the longer run; then the earlier (insertion sort: few runs)
    for x in range(1, nr):
        w, o, ln = run_w[x], run_off[x], run_len[x]
        y = x - 1
        while y >= 0 and (counts[run_w[y]], -run_len[y], run_off[y]) > (counts[w], -ln, o):
            run_w[y + 1], run_off[y + 1], run_len[y + 1] = run_w[y], run_off[y], run_len[y]
            y -= 1
        run_w[y + 1], run_off[y + 1], run_len[y + 1] = w, o, ln
    s0, _ = _inside(ws[run_w[0]], we[run_w[0]], los, his)
    starts = s0 - run_off[0]
    starts = starts[_ge(starts, 0, starts.shape[0], 0):]
    checked = 0
    for x in range(1 if run_len[0] == 1 else 0, nr):
        if starts.shape[0] == 0:
            break
        at = starts + run_off[x]
        checked += at.shape[0]
        starts = starts[_runs_at(ws[run_w[x]], at, run_len[x])]
    s, e = _inside(starts, starts + (nt - 1), los, his)
    return s, e, checked


@njit(cache=True, nogil=True)
def _grown(a, n):
    if n < a.shape[0]:
        return a
    out = np.empty(2 * a.shape[0] + n, np.int64)
    out[:a.shape[0]] = a
    return out


@njit(cache=True, nogil=True)
def _eval_tree(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts, ws, we,
               los, his, root, room):
    n = kind.shape[0]
    est = _estimates(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts)
    reg_lo = [los]
    reg_hi = [his]
    res_s = [_EMPTY]   # results, written once each; 0 is the root's
    res_e = [_EMPTY]
    memo_rid = np.full(n, -1, np.int64)   # the region and result of each node's last
    memo_res = np.full(n, -1, np.int64)   # evaluation
    # frames: node, region, state, its result's slot, its operands' first slot, region 2
    f_node = np.empty(16, np.int64)
    f_rid = np.empty(16, np.int64)
    f_state = np.empty(16, np.int64)
    f_out = np.empty(16, np.int64)
    f_base = np.empty(16, np.int64)
    f_rid2 = np.empty(16, np.int64)
    f_node[0], f_rid[0], f_state[0], f_out[0] = root, 0, 0, 0
    sp = 1
    spent = 0
    while sp > 0:
        t = sp - 1
        node, rid, state, out = f_node[t], f_rid[t], f_state[t], f_out[t]
        if state == 0 and memo_rid[node] == rid:
            res_s[out] = res_s[memo_res[node]]
            res_e[out] = res_e[memo_res[node]]
            sp -= 1
            continue
        rl = reg_lo[rid]
        rh = reg_hi[rid]
        k = kind[node]
        done = False
        s = _EMPTY
        e = _EMPTY
        if rl.shape[0] == 0:
            done = True
        elif k == TERM:
            s, e, checked = _term(ws, we, words[word_lo[node]:word_hi[node]], counts, rl, rh)
            spent += checked
            done = True
        elif state == 0:  # operands to evaluate: all of them (ONE), or the rarest first
            base = len(res_s)
            f_base[t] = base
            lo, hi = arg_lo[node], arg_hi[node]
            if k == ONE:
                f_state[t] = 2
                count = hi - lo
            else:
                f_state[t] = 1
                rarest = _rarest(est, args, lo, hi)
                lo, hi, count = rarest, rarest + 1, 1
            need = sp + count
            f_node, f_rid, f_state = _grown(f_node, need), _grown(f_rid, need), \
                _grown(f_state, need)
            f_out, f_base, f_rid2 = _grown(f_out, need), _grown(f_base, need), \
                _grown(f_rid2, need)
            for j in range(count):
                res_s.append(_EMPTY)
                res_e.append(_EMPTY)
            for j in range(hi - 1, lo - 1, -1):  # (the first operand on top)
                f_node[sp], f_rid[sp], f_state[sp], f_out[sp] = args[j], rid, 0, base + j - lo
                sp += 1
            continue
        elif state == 1:  # ALL, FOLLOW: the rarest operand is known; the others in the
            first = res_s[f_base[t]]  # ranges holding one of its intervals
            if first.shape[0] == 0:
                done = True
            else:
                keep = _select(rl, rh, first, res_e[f_base[t]], False, False)
                rid2 = rid
                if keep.shape[0] < rl.shape[0]:
                    reg_lo.append(rl[keep])
                    reg_hi.append(rh[keep])
                    rid2 = len(reg_lo) - 1
                f_rid2[t] = rid2
                f_state[t] = 3
                lo, hi = arg_lo[node], arg_hi[node]
                base = len(res_s)
                f_base[t] = base
                need = sp + hi - lo
                f_node, f_rid, f_state = _grown(f_node, need), _grown(f_rid, need), \
                    _grown(f_state, need)
                f_out, f_base, f_rid2 = _grown(f_out, need), _grown(f_base, need), \
                    _grown(f_rid2, need)
                for j in range(hi - lo):
                    res_s.append(_EMPTY)
                    res_e.append(_EMPTY)
                for j in range(hi - 1, lo - 1, -1):
                    f_node[sp], f_rid[sp], f_state[sp], f_out[sp] = \
                        args[j], rid2, 0, base + j - lo
                    sp += 1
                continue
        elif state == 2:  # ONE: its operands' results, merged pairwise
            base = f_base[t]
            parts = [j for j in range(base, base + arg_hi[node] - arg_lo[node])
                     if res_s[j].shape[0] > 0]
            while len(parts) > 1:
                merged = []
                for j in range(0, len(parts) - 1, 2):
                    ms, me = _one_of(res_s[parts[j]], res_e[parts[j]], res_s[parts[j + 1]],
                                     res_e[parts[j + 1]])
                    spent += ms.shape[0]
                    res_s.append(ms)
                    res_e.append(me)
                    merged.append(len(res_s) - 1)
                if len(parts) % 2:
                    merged.append(parts[-1])
                parts = merged
            if len(parts):
                s, e = res_s[parts[0]], res_e[parts[0]]
            done = True
        else:  # state 3: ALL, FOLLOW with every operand evaluated in region 2
            base = f_base[t]
            count = arg_hi[node] - arg_lo[node]
            r2l = reg_lo[f_rid2[t]]
            r2h = reg_hi[f_rid2[t]]
            if k == ALL:  # shortest first (stable), folded
                order = np.argsort(np.array([res_s[base + j].shape[0] for j in range(count)]),
                                   kind="mergesort")
                s, e = res_s[base + order[0]], res_e[base + order[0]]
                for j in range(1, count):
                    if s.shape[0] == 0:
                        break
                    s, e = _both_of(s, e, res_s[base + order[j]], res_e[base + order[j]])
                    spent += s.shape[0]
            else:
                s, e = res_s[base], res_e[base]
                for j in range(1, count):
                    if s.shape[0] == 0:
                        break
                    s, e = _followed_by(s, e, res_s[base + j], res_e[base + j])
                    spent += s.shape[0]
            s, e = _inside(s, e, r2l, r2h)
            done = True
        if done:
            spent += s.shape[0]
            res_s[out] = s
            res_e[out] = e
            memo_rid[node] = rid
            memo_res[node] = out
            sp -= 1
            if room >= 0 and spent > room:
                return _EMPTY, _EMPTY, spent, False
    return res_s[0], res_e[0], spent, True


@njit(cache=True, nogil=True)
def _estimates(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts):
    """Each node's estimate (gcl.Evaluator.estimate): a term's rarest word's count, the
    least of all-of's and followed-by's operands, the sum of one-of's."""
    n = kind.shape[0]
    est = np.zeros(n, np.int64)
    for i in range(n):  # children come before their parents
        if kind[i] == TERM:
            if word_hi[i] > word_lo[i]:
                m = counts[words[word_lo[i]]]
                for j in range(word_lo[i] + 1, word_hi[i]):
                    m = min(m, counts[words[j]])
                est[i] = m
        elif kind[i] == ONE:
            for j in range(arg_lo[i], arg_hi[i]):
                est[i] += est[args[j]]
        else:
            m = est[args[arg_lo[i]]]
            for j in range(arg_lo[i] + 1, arg_hi[i]):
                m = min(m, est[args[j]])
            est[i] = m
    return est


@njit(cache=True, nogil=True)
def _rarest(est, args, lo, hi):
    """The position in args[lo:hi] of the first operand of the least estimate."""
    best = lo
    for j in range(lo + 1, hi):
        if est[args[j]] < est[args[best]]:
            best = j
    return best


@njit(cache=True, nogil=True)
def _tree_drivers(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts, ws, we,
                  whole):
    n = kind.shape[0]
    est = _estimates(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts)
    needed = np.zeros(n, np.bool_)
    needed[n - 1] = True
    for i in range(n - 1, -1, -1):  # parents before their children
        if not needed[i] or kind[i] == TERM:
            continue
        if kind[i] == ONE:
            for j in range(arg_lo[i], arg_hi[i]):
                needed[args[j]] = True
        else:
            needed[args[_rarest(est, args, arg_lo[i], arg_hi[i])]] = True
    everywhere_lo = np.zeros(1, np.int64)
    everywhere_hi = np.full(1, _I64_MAX, np.int64)
    res_s = [_EMPTY] * n
    res_e = [_EMPTY] * n
    produced = 0
    for i in range(n):  # children before their parents
        if not needed[i]:
            continue
        if kind[i] == TERM:
            slots = words[word_lo[i]:word_hi[i]]
            for t in range(slots.shape[0]):
                if not whole[slots[t]]:
                    return _EMPTY, _EMPTY, produced, False
            s, e, checked = _term(ws, we, slots, counts, everywhere_lo, everywhere_hi)
            produced += checked + s.shape[0]
        elif kind[i] == ONE:
            parts = [args[j] for j in range(arg_lo[i], arg_hi[i])
                     if res_s[args[j]].shape[0] > 0]
            sl = [res_s[j] for j in parts]
            el = [res_e[j] for j in parts]
            while len(sl) > 1:
                ms = [sl[0]] * 0
                me = [el[0]] * 0
                for j in range(0, len(sl) - 1, 2):
                    a, b = _one_of(sl[j], el[j], sl[j + 1], el[j + 1])
                    produced += a.shape[0]
                    ms.append(a)
                    me.append(b)
                if len(sl) % 2:
                    ms.append(sl[-1])
                    me.append(el[-1])
                sl, el = ms, me
            s, e = (sl[0], el[0]) if len(sl) else (_EMPTY, _EMPTY)
        else:
            r = args[_rarest(est, args, arg_lo[i], arg_hi[i])]
            s, e = res_s[r], res_e[r]
        res_s[i] = s
        res_e[i] = e
    return res_s[n - 1], res_e[n - 1], produced, True


def tree_drivers(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts, ws, we,
                 whole):
    """The root's drivers (gcl.Evaluator.drivers): for all-of and followed-by its rarest
    operand's, for one-of every operand's merged, for a term its whole intervals; every
    container holding one of the root's intervals holds one of these. ws/we: the words'
    whole lists where `whole` (booleans) says so. (starts, ends, intervals produced,
    True), or False for the last when a term it needs has a word not given whole."""
    tables = _tables(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts)
    whole = np.ascontiguousarray(whole, dtype=np.bool_)
    if whole.shape != tables[7].shape:
        raise ValueError(f"{len(whole)} flags for {len(tables[7])} words")
    ws, we = _words(ws, we, len(tables[7]))
    return _tree_drivers(*tables, ws, we, whole)


def _tables(*tables) -> list[np.ndarray]:
    names = ("kind", "arg_lo", "arg_hi", "args", "word_lo", "word_hi", "words", "counts")
    out = [_ints(x, name) for x, name in zip(tables, names)]
    n = len(out[0])
    if n == 0 or any(len(out[i]) != n for i in (1, 2, 4, 5)):
        raise ValueError("a tree is one row per node in kind, arg_lo, arg_hi, word_lo, "
                         "word_hi (at least one)")
    return out


def _words(ws, we, n: int) -> tuple[tuple, tuple]:
    """The words' starts and ends as tuples of one of the BUCKETS' sizes."""
    if len(ws) != n or len(we) != n:
        raise ValueError(f"{len(ws)} words' starts, {len(we)} ends, {n} counts")
    size = next((b for b in BUCKETS if b >= n), None)
    if size is None:
        raise ValueError(f"{n} words: at most {BUCKETS[-1]}")
    pad = (_EMPTY,) * (size - n)
    return (tuple([_ints(a, "a word's starts") for a in ws]) + pad,
            tuple([_ints(a, "a word's ends") for a in we]) + pad)


def eval_tree(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts, ws, we,
              los, his, room: int = -1):
    """The root's (the last node's) intervals inside the region (see the module
    docstring): (starts, ends, intervals produced, whether it finished: False when
    `room` >= 0 ran out)."""
    tables = _tables(kind, arg_lo, arg_hi, args, word_lo, word_hi, words, counts)
    ws, we = _words(ws, we, len(tables[7]))
    return _eval_tree(*tables, ws, we, _ints(los, "los"), _ints(his, "his"),
                      len(tables[0]) - 1, int(room))
