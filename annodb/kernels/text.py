"""Numba kernels for text: token offsets (the tokenizer's regex, as one pass over code
points) and the same pass numbering the distinct tokens of a batch (so Python looks up each
word once, not once per occurrence).

`tokenizer.tokens` uses `re.findall` (fast, returns the token strings); snippets need only
where each token starts and ends, which a Python loop over match objects makes slow for
long documents. This kernel gives the same spans from a code point -> class table
(0 separator, 1 word character, 2 one-character token).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _token_spans(cps, classes):
    n = len(cps)
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    m = 0
    i = 0
    while i < n:
        c = classes[cps[i]]
        if c == 1:
            j = i + 1
            while j < n and classes[cps[j]] == 1:
                j += 1
            starts[m] = i
            ends[m] = j
            m += 1
            i = j
        elif c == 2:
            starts[m] = i
            ends[m] = i + 1
            m += 1
            i += 1
        else:
            i += 1
    return starts[:m].copy(), ends[:m].copy()


def token_spans(codepoints, classes) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the tokens in a uint32 array of code points, given a uint8 class
    for every code point 0..0x10FFFF."""
    cps = np.ascontiguousarray(codepoints, dtype=np.uint32)
    table = np.ascontiguousarray(classes, dtype=np.uint8)
    if len(table) != 0x110000:
        raise ValueError("the class table needs one entry per code point (0x110000)")
    if len(cps) and int(cps.max()) >= 0x110000:
        raise ValueError("not a code point")
    return _token_spans(cps, table)


@njit(cache=True, nogil=True)
def _intern_run(cps, classes, fold, i, t, m, starts, kinds, table, hashes, bounds, arena):
    """The loop of _intern_tokens from code point i (t tokens, m kinds so far). It returns
    (i, t, m) where it stopped: at the end, or before a token that needs a bigger array
    (the caller grows them and calls again; no array is replaced inside the loop, which
    keeps numba from reference-counting them on every token)."""
    n = len(cps)
    mask = len(table) - 1
    while i < n:
        c = fold[cps[i]]
        cls = classes[c]
        if cls == 0:
            if 0xD800 <= c <= 0xDFFF:  # a lone surrogate (a separator; only they fold to one)
                return i, t, m, i
            i += 1
            continue
        if t == len(starts):
            return i, t, m, -1
        a = i
        h = 2166136261  # 32-bit FNV-1a over the folded code points (int64: no overflow)
        while True:
            h = ((h ^ np.int64(c)) * 16777619) & 0xFFFFFFFF
            i += 1
            if cls == 2 or i >= n:
                break
            c = fold[cps[i]]
            if classes[c] != 1:
                break
        length = i - a
        slot = h & mask
        kind = -1
        while True:
            k = table[slot]
            if k < 0:
                break
            if hashes[k] == h and bounds[k + 1] - bounds[k] == length:
                base = bounds[k]
                same = True
                for j in range(length):
                    if arena[base + j] != fold[cps[a + j]]:
                        same = False
                        break
                if same:
                    kind = k
                    break
            slot = (slot + 1) & mask
        if kind < 0:  # a new kind, into the empty slot found
            base = bounds[m]
            if m + 1 == len(hashes) or base + length > len(arena) or 2 * (m + 1) > len(table):
                return a, t, m, -1  # grow first, then redo this token
            for j in range(length):
                arena[base + j] = fold[cps[a + j]]
            bounds[m + 1] = base + length
            hashes[m] = h
            table[slot] = m
            kind = m
            m += 1
        starts[t] = a
        kinds[t] = kind
        t += 1
    return i, t, m, -1


@njit(cache=True, nogil=True)
def _intern_more(cps, classes, fold, base, t, m, starts, kinds, table, hashes, bounds,
                 arena):
    """The tokens of cps interned after t tokens and m kinds (cps being the code points
    from `base` on of the whole text: starts count from its start), the arrays grown as
    need be. Returns (t, m, starts, kinds, table, hashes, bounds, arena, bad): bad >= 0
    is where a lone surrogate is (in the whole text)."""
    n = len(cps)
    i = 0
    t0 = t
    while True:
        i, t, m, bad = _intern_run(cps, classes, fold, i, t, m, starts, kinds, table, hashes,
                                   bounds, arena)
        if bad >= 0:
            return t, m, starts, kinds, table, hashes, bounds, arena, bad + base
        if i >= n:
            break
        starts, kinds, table, hashes, bounds = _grown_tables(t, m, starts, kinds, table,
                                                             hashes, bounds)
        arena = _room(arena, bounds[m], cps, classes, fold, i)
    if base:
        for j in range(t0, t):
            starts[j] += base
    return t, m, starts, kinds, table, hashes, bounds, arena, -1


@njit(cache=True, nogil=True)
def _intern_tokens(cps, classes, fold):
    n = len(cps)
    starts = np.empty(max(16, n // 5), np.int64)
    kinds = np.empty(len(starts), np.int64)
    table = np.full(4096, -1, np.int64)   # open addressing, at most half full: slot -> kind
    hashes = np.empty(2048, np.int64)     # kind -> hash
    bounds = np.zeros(2048, np.int64)     # kind k's code points: arena[bounds[k]:bounds[k+1]]
    arena = np.empty(16384, np.uint32)
    t, m, starts, kinds, table, hashes, bounds, arena, bad = _intern_more(
        cps, classes, fold, 0, 0, 0, starts, kinds, table, hashes, bounds, arena)
    if bad >= 0:
        return starts[:0], kinds[:0], arena[:0], bounds[:1], bad
    return (starts[:t].copy(), kinds[:t].copy(), arena[:bounds[m]].copy(),
            bounds[:m + 1].copy(), -1)


@njit(cache=True, nogil=True, inline="always")
def _code_point(u8, i):
    """The code point whose valid UTF-8 starts at u8[i], and its length in bytes."""
    c = np.int64(u8[i])
    if c < 0x80:
        return c, 1
    if c < 0xE0:
        return ((c & 0x1F) << 6) | (np.int64(u8[i + 1]) & 0x3F), 2
    if c < 0xF0:
        return (((c & 0x0F) << 12) | ((np.int64(u8[i + 1]) & 0x3F) << 6)
                | (np.int64(u8[i + 2]) & 0x3F)), 3
    return (((c & 0x07) << 18) | ((np.int64(u8[i + 1]) & 0x3F) << 12)
            | ((np.int64(u8[i + 2]) & 0x3F) << 6) | (np.int64(u8[i + 3]) & 0x3F)), 4


@njit(cache=True, nogil=True)
def _intern_utf8_run(u8, classes, fold, i, cp, t, m, starts, kinds, table, hashes, bounds,
                     arena):
    """_intern_run over valid UTF-8 (no surrogates) from byte i, code point cp: each code
    point decoded as it is met, no array of them made. Returns (i, cp, t, m) where it
    stopped: at the end, or before a token that needs a bigger array."""
    n = len(u8)
    mask = len(table) - 1
    while i < n:
        c, w = _code_point(u8, i)
        c = np.int64(fold[c])
        cls = classes[c]
        if cls == 0:
            i += w
            cp += 1
            continue
        if t == len(starts):
            return i, cp, t, m
        a, a_cp = i, cp
        h = 2166136261  # 32-bit FNV-1a over the folded code points (as _intern_run)
        while True:
            h = ((h ^ c) * 16777619) & 0xFFFFFFFF
            i += w
            cp += 1
            if cls == 2 or i >= n:
                break
            c, w = _code_point(u8, i)
            c = np.int64(fold[c])
            if classes[c] != 1:
                break
        length = cp - a_cp
        slot = h & mask
        kind = -1
        while True:
            k = table[slot]
            if k < 0:
                break
            if hashes[k] == h and bounds[k + 1] - bounds[k] == length:
                base = bounds[k]
                same = True
                x = a
                for j in range(length):
                    d, v = _code_point(u8, x)
                    x += v
                    if arena[base + j] != fold[d]:
                        same = False
                        break
                if same:
                    kind = k
                    break
            slot = (slot + 1) & mask
        if kind < 0:  # a new kind, into the empty slot found
            base = bounds[m]
            if m + 1 == len(hashes) or base + length > len(arena) or 2 * (m + 1) > len(table):
                return a, a_cp, t, m  # grow first, then redo this token
            x = a
            for j in range(length):
                d, v = _code_point(u8, x)
                x += v
                arena[base + j] = fold[d]
            bounds[m + 1] = base + length
            hashes[m] = h
            table[slot] = m
            kind = m
            m += 1
        starts[t] = a_cp
        kinds[t] = kind
        t += 1
    return i, cp, t, m


@njit(cache=True, nogil=True)
def _intern_utf8(u8, classes, fold):
    n = len(u8)
    starts = np.empty(max(16, n // 5), np.int64)
    kinds = np.empty(len(starts), np.int64)
    table = np.full(4096, -1, np.int64)
    hashes = np.empty(2048, np.int64)
    bounds = np.zeros(2048, np.int64)
    arena = np.empty(16384, np.uint32)
    i = cp = t = m = 0
    while True:
        i, cp, t, m = _intern_utf8_run(u8, classes, fold, i, cp, t, m, starts, kinds, table,
                                       hashes, bounds, arena)
        if i >= n:
            break
        starts, kinds, table, hashes, bounds = _grown_tables(t, m, starts, kinds, table,
                                                             hashes, bounds)
        # room in the arena for the token at byte i (at most its bytes' count of code points)
        j = i
        c, w = _code_point(u8, j)
        j += w
        if classes[fold[c]] == 1:
            while j < n:
                c, w = _code_point(u8, j)
                if classes[fold[c]] != 1:
                    break
                j += w
        size = len(arena)
        while size < bounds[m] + (j - i):
            size *= 2
        if size != len(arena):
            out = np.empty(size, np.uint32)
            out[:bounds[m]] = arena[:bounds[m]]
            arena = out
    # (the tokens' arrays as views: a batch's ~8 MB each not copied again; make_scanned
    # keeps neither)
    return starts[:t], kinds[:t], arena[:bounds[m]].copy(), bounds[:m + 1].copy()


@njit(cache=True, nogil=True)
def _grown_tables(t, m, starts, kinds, table, hashes, bounds):
    """An interning run's arrays when it stopped for room after t tokens and m kinds: the
    tokens' and kinds' arrays doubled when full, the hash table doubled (every kind
    re-placed by its hash) when more than half full."""
    if t == len(starts):
        starts = _grown(starts, t)
        kinds = _grown(kinds, t)
    if m + 1 == len(hashes):
        hashes = _grown(hashes, m)
        bounds = _grown(bounds, m + 1)
    if 2 * (m + 1) > len(table):
        table = np.full(2 * len(table), -1, np.int64)
        mask = len(table) - 1
        for k in range(m):
            slot = hashes[k] & mask
            while table[slot] >= 0:
                slot = (slot + 1) & mask
            table[slot] = k
    return starts, kinds, table, hashes, bounds


@njit(cache=True, nogil=True)
def _grown(a, used):
    out = np.empty(2 * len(a), a.dtype)
    out[:used] = a[:used]
    return out


@njit(cache=True, nogil=True)
def _room(arena, used, cps, classes, fold, i):
    """The arena, grown if it cannot take the token at code point i after `used`."""
    n = len(cps)
    j = i + 1
    if classes[fold[cps[i]]] == 1:
        while j < n and classes[fold[cps[j]]] == 1:
            j += 1
    size = len(arena)
    while size < used + (j - i):
        size *= 2
    if size == len(arena):
        return arena
    out = np.empty(size, np.uint32)
    out[:used] = arena[:used]
    return out


def intern_tokens(codepoints, classes, fold):
    """Tokenize and number the distinct tokens in one pass over the code points of a text
    (not folded: `fold` maps each code point to its folded one, `classes` each folded code
    point to 0 separator, 1 word character, 2 one-character token). Returns (starts, kinds,
    arena, bounds): token i starts at character starts[i] and is of kind kinds[i]; kinds
    are numbered in order of first appearance, and kind k's folded code points are
    arena[bounds[k]:bounds[k+1]]. The same tokens as token_spans on the folded text.
    LoneSurrogate (a ValueError) when a code point is a surrogate (no UTF-8 can hold it;
    checked here rather than in another pass over the text)."""
    cps = np.ascontiguousarray(codepoints, dtype=np.uint32)
    table = np.ascontiguousarray(classes, dtype=np.uint8)
    folding = np.ascontiguousarray(fold, dtype=np.uint32)
    if len(table) != 0x110000 or len(folding) != 0x110000:
        raise ValueError("the class and fold tables need one entry per code point (0x110000)")
    if len(cps) and int(cps.max()) >= 0x110000:
        raise ValueError("not a code point")
    starts, kinds, arena, bounds, bad = _intern_tokens(cps, table, folding)
    if bad >= 0:
        raise LoneSurrogate(bad)
    return starts, kinds, arena, bounds


def intern_tokens_utf8(text, classes, fold):
    """intern_tokens of a text given as valid UTF-8 without surrogates (uint8, e.g. as
    kernels.scan_flat writes it), each code point decoded as the pass meets it (no array
    of code points is made). Token i starts at code point starts[i] of the text (starts
    and kinds are views of arrays sized for the text: copy them to keep them long)."""
    data = np.ascontiguousarray(text, dtype=np.uint8)
    table = np.ascontiguousarray(classes, dtype=np.uint8)
    folding = np.ascontiguousarray(fold, dtype=np.uint32)
    if len(table) != 0x110000 or len(folding) != 0x110000:
        raise ValueError("the class and fold tables need one entry per code point (0x110000)")
    return _intern_utf8(data, table, folding)


@njit(cache=True, nogil=True)
def _number_words(arena, bounds, table, hashes, known, kept, count):
    m = len(bounds) - 1
    out = np.empty(m, np.int64)
    for k in range(m):
        a = bounds[k]
        length = bounds[k + 1] - a
        h = 2166136261  # (FNV-1a as _intern_run)
        for j in range(a, a + length):
            h = ((h ^ np.int64(arena[j])) * 16777619) & 0xFFFFFFFF
        mask = len(table) - 1
        slot = h & mask
        number = -1
        while True:
            x = table[slot]
            if x < 0:
                break
            if hashes[x] == h and known[x + 1] - known[x] == length:
                base = known[x]
                same = True
                for j in range(length):
                    if kept[base + j] != arena[a + j]:
                        same = False
                        break
                if same:
                    number = x
                    break
            slot = (slot + 1) & mask
        if number < 0:   # a word new to the numbering: the next number
            if count + 1 == len(hashes):
                hashes = _grown(hashes, count)
                known = _grown(known, count + 1)
            size = len(kept)
            while size < known[count] + length:
                size *= 2
            if size != len(kept):
                grown = np.empty(size, np.uint32)
                grown[:known[count]] = kept[:known[count]]
                kept = grown
            if 2 * (count + 1) > len(table):
                table = np.full(2 * len(table), -1, np.int64)
                mask = len(table) - 1
                for x in range(count):  # re-place every word by its hash
                    slot = hashes[x] & mask
                    while table[slot] >= 0:
                        slot = (slot + 1) & mask
                    table[slot] = x
                slot = h & mask
                while table[slot] >= 0:
                    slot = (slot + 1) & mask
            base = known[count]
            for j in range(length):
                kept[base + j] = arena[a + j]
            known[count + 1] = base + length
            hashes[count] = h
            table[slot] = count
            number = count
            count += 1
        out[k] = number
    return out, count, table, hashes, known, kept


def number_words(arena, bounds, table, hashes, known, kept, count: int):
    """Number words across calls: word k of this call is arena[bounds[k]:bounds[k+1]]
    (uint32 code points, as intern_tokens gives its kinds); the `count` words numbered
    before are kept[known[x]:known[x + 1]] for number x, found by their hashes[x] in the
    open-addressed `table` (slot -> number, -1 empty, at most half full). A word met
    before gets its number, a new one the next. Returns (numbers (int64 per word), count,
    table, hashes, known, kept): the arrays grown as need be (pass them to the next
    call)."""
    arena = np.ascontiguousarray(arena, dtype=np.uint32)
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    if len(bounds) == 0 or (len(bounds) > 1 and (bounds[0] < 0 or bounds[-1] > len(arena)
                                                 or np.any(np.diff(bounds) < 0))):
        raise ValueError("bounds must rise within the arena")
    if len(table) < 2 or len(table) & (len(table) - 1) or 2 * count > len(table) or \
            len(known) != len(hashes) or count >= len(hashes) or len(kept) == 0:
        raise ValueError("not the arrays of a numbering (see tokenizer.WordNumbers)")
    out, count, table, hashes, known, kept = _number_words(arena, bounds, table, hashes,
                                                           known, kept, int(count))
    return out, int(count), table, hashes, known, kept


@njit(cache=True, nogil=True)
def _number_utf8_run(u8, classes, fold, i, cp, t, m, starts, kinds, words, table, hashes,
                     known, kept, marks, count, batch):
    """_intern_utf8_run interning each token straight into a numbering across calls (see
    number_utf8): one look-up a token. A word's number gives its kind in this call by
    marks[number] (this call's `batch` in the high bits, the kind in the low ones).
    Returns (i, cp, t, m, count) where it stopped: at the end, or before a token that needs
    a bigger array."""
    n = len(u8)
    mask = len(table) - 1
    while i < n:
        c, w = _code_point(u8, i)
        c = np.int64(fold[c])
        cls = classes[c]
        if cls == 0:
            i += w
            cp += 1
            continue
        if t == len(starts) or m == len(words):
            return i, cp, t, m, count
        a, a_cp = i, cp
        h = 2166136261  # 32-bit FNV-1a over the folded code points (as _intern_run)
        while True:
            h = ((h ^ c) * 16777619) & 0xFFFFFFFF
            i += w
            cp += 1
            if cls == 2 or i >= n:
                break
            c, w = _code_point(u8, i)
            c = np.int64(fold[c])
            if classes[c] != 1:
                break
        length = cp - a_cp
        slot = h & mask
        number = -1
        while True:
            x = table[slot]
            if x < 0:
                break
            if hashes[x] == h and known[x + 1] - known[x] == length:
                base = known[x]
                same = True
                y = a
                for j in range(length):
                    d, v = _code_point(u8, y)
                    y += v
                    if kept[base + j] != fold[d]:
                        same = False
                        break
                if same:
                    number = x
                    break
            slot = (slot + 1) & mask
        if number < 0:  # a word new to the numbering, into the empty slot found
            base = known[count]
            if count + 1 == len(hashes) or base + length > len(kept) or \
                    2 * (count + 1) > len(table):
                return a, a_cp, t, m, count  # grow first, then redo this token
            y = a
            for j in range(length):
                d, v = _code_point(u8, y)
                y += v
                kept[base + j] = fold[d]
            known[count + 1] = base + length
            hashes[count] = h
            table[slot] = count
            number = count
            count += 1
        mark = marks[number]
        if mark >> 32 == batch:
            kind = mark & 0xFFFFFFFF
        else:   # the word's first token in this call: the next kind
            kind = m
            marks[number] = (batch << 32) | m
            words[m] = number
            m += 1
        starts[t] = a_cp
        kinds[t] = kind
        t += 1
    return i, cp, t, m, count


@njit(cache=True, nogil=True)
def _number_utf8(u8, classes, fold, table, hashes, known, kept, marks, count, batch):
    n = len(u8)
    starts = np.empty(max(16, n // 5), np.int64)
    kinds = np.empty(len(starts), np.int64)
    words = np.empty(max(16, n // 64), np.int64)
    i = cp = t = m = 0
    while True:
        i, cp, t, m, count = _number_utf8_run(u8, classes, fold, i, cp, t, m, starts, kinds,
                                              words, table, hashes, known, kept, marks,
                                              count, batch)
        if i >= n:
            break
        if t == len(starts):
            starts = _grown(starts, t)
            kinds = _grown(kinds, t)
        if m == len(words):
            words = _grown(words, m)
        if count + 1 == len(hashes):
            hashes = _grown(hashes, count)
            known = _grown(known, count + 1)
            grown = np.zeros(len(hashes), np.int64)   # (no mark of this batch: a kind
            grown[:len(marks)] = marks                #  is taken only from one)
            marks = grown
        if 2 * (count + 1) > len(table):
            table = np.full(2 * len(table), -1, np.int64)
            mask = len(table) - 1
            for x in range(count):  # re-place every word by its hash
                slot = hashes[x] & mask
                while table[slot] >= 0:
                    slot = (slot + 1) & mask
                table[slot] = x
        # room in kept for the token at byte i (at most its bytes' count of code points)
        j = i
        c, w = _code_point(u8, j)
        j += w
        if classes[fold[c]] == 1:
            while j < n:
                c, w = _code_point(u8, j)
                if classes[fold[c]] != 1:
                    break
                j += w
        size = len(kept)
        while size < known[count] + (j - i):
            size *= 2
        if size != len(kept):
            out = np.empty(size, np.uint32)
            out[:known[count]] = kept[:known[count]]
            kept = out
    # (the tokens' arrays as views, as _intern_utf8's)
    return starts[:t], kinds[:t], words[:m].copy(), count, table, hashes, known, kept, marks


def number_utf8(text, classes, fold, table, hashes, known, kept, marks, count: int,
                batch: int):
    """intern_tokens_utf8 with each kind numbered across calls in one pass, as
    number_words numbers intern_tokens_utf8's kinds (the same numbers, the same arrays,
    and `marks`: int64 per number, as long as `hashes`, zeros at first; `batch`: this
    call's number, from 1 up, below 2**31). Returns (starts, kinds, words, count, table,
    hashes, known, kept, marks): token i starts at code point starts[i] and is of kind
    kinds[i] (numbered in order of first appearance in this text), kind k's word is the
    number words[k]; the arrays grown as need be (pass them to the next call)."""
    data = np.ascontiguousarray(text, dtype=np.uint8)
    table_ = np.ascontiguousarray(classes, dtype=np.uint8)
    folding = np.ascontiguousarray(fold, dtype=np.uint32)
    if len(table_) != 0x110000 or len(folding) != 0x110000:
        raise ValueError("the class and fold tables need one entry per code point (0x110000)")
    if len(table) < 2 or len(table) & (len(table) - 1) or 2 * count > len(table) or \
            len(known) != len(hashes) or len(marks) != len(hashes) or \
            count >= len(hashes) or len(kept) == 0:
        raise ValueError("not the arrays of a numbering (see tokenizer.WordNumbers)")
    if not 0 < batch < 2**31:
        raise ValueError("a call's number is from 1 to 2**31 - 1")
    out = _number_utf8(data, table_, folding, table, hashes, known, kept, marks, int(count),
                       int(batch))
    return out[:3] + (int(out[3]),) + out[4:]


class LoneSurrogate(ValueError):
    """A lone surrogate among the code points: `position` is its index."""

    def __init__(self, position: int):
        super().__init__(f"a lone surrogate at code point {position}")
        self.position = int(position)
