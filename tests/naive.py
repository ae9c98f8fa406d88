"""Brute-force reference semantics: the definition every fast path is tested against.

Plain Python over lists of (p, q) tuples (closed intervals of int addresses), written by
enumeration rather than by clever algorithms. Slow on purpose; keep it obviously right.
A GC-list here is a sorted list of (p, q) in which no interval contains another.

Index: each twin here, what it defines in annodb (K = annodb.kernels), and the tests that
hold the two equal.

    naive                  annodb                              tests
    is_gc_list             K.is_gc_list                        test_kernels: test_is_gc_list
    normalize              K.normalize (a writer's lists)      test_kernels: test_normalize;
                                                               test_transactions: reference
    both_of, one_of,       K.both_of, one_of, followed_by      test_kernels: test_combine
      followed_by
    contained_in, ...      K.contained_in, containing,         test_kernels: test_select,
      not_containing         not_contained_in, not_containing    test_select_many_against_few
    phrase                 gcl.Evaluator's phrases             (through evaluate)
    ssr                    K.ssr, ssr_touched                  test_kernels: test_ssr
    top                    K.top                               test_kernels: test_top
    ssr_top                K.ssr_top (SSR's ranking in one     test_kernels: test_ssr_top
                           call, scoring.ranked)
    merge_ranked           K.merge_ranked (shards' merge)      test_kernels: test_merge_ranked
    drop_erased            K.drop_erased                       test_kernels: test_drop_erased
    runs_at                K.runs_at                           test_kernels: test_runs_at
    merge_ranges           K.merge_ranges                      test_kernels: test_merge_ranges
    all_of_groups          K.all_of_groups (a ranking's        test_kernels: test_all_of_groups,
                           covers of (^ (+ ...) ...) in one    test_all_of_groups_reads
                           call, gcl.covers_in_blocks)
    Model, evaluate        gcl.Evaluator (Snapshot.query)      test_engine: test_queries_agree_
                                                               with_reference, and others
    search                 ranking.rank (Snapshot.search)      test_engine
    snippet                snippets.make                       test_engine: test_snippets_agree_
                                                               with_reference
    encode_block,          K.encode_block, decode_block        test_block_layout; test_kernels
      decode_block         (storage/layout.py's block layout)
      (stream_width, width_bytes, stream_bytes: their number streams)
    block_cuts             K.block_bounds                      test_kernels: test_block_cuts_
                                                               equal_the_naive_ones
    block_cuts,            K.encode_blocks (a writer's lists   test_kernels: test_encode_blocks_
      encode_block         cut and encoded in one call)        equals_block_by_block
    group_postings         K.group_postings                    test_kernels: test_group_
                                                               postings_against_numpy_and_naive
    join_groups            K.join_groups (a flush's spilling   test_kernels: test_join_groups_
                           tails' points, then the new ones)   equals_the_naive_one
    block_facts            kernels.checking.BlockChecker       test_kernels: test_block_checker_
                                                               equals_the_brute_force
    document_frequencies   K.document_frequencies              test_bm25: test_document_
                                                               frequencies_kernel
    best_windows           K.best_windows                      test_bm25: test_best_windows_kernel
    bm25                   bm25.py (rank="bm25")               test_bm25: test_bm25_equals_its_
                                                               definition..., test_gcl_bm25_...
    bm25f                  bm25.py (fields)                    test_bm25: test_bm25f_equals_...
    sparse                 bm25.py (rank="sparse")             test_bm25: test_sparse_vectors_...
    merge_scores           K.merge_scores                      test_bm25: test_merge_scores_kernel
    bm25_top               K.bm25_steps, bm25_pick (bm25.top's test_bm25: test_bm25_steps_kernel
                           compiled MaxScore)
    bm25_documents_top     K.bm25_documents_top (bm25.top's    test_bm25: test_bm25_documents_
                           MaxScore, document at a time)       top_kernel
    term_documents         K.term_documents (a word's          test_bm25: test_term_documents_
                           documents, bm25.top's)              kernel
    rm3                    feedback.py (rank="bm25+rm3")       test_feedback: test_rm3_equals_its_
                                                               definition
"""

from __future__ import annotations

import math
import struct


def _inside(x, y):
    """True when interval x lies inside interval y (y.p <= x.p and x.q <= y.q)."""
    return y[0] <= x[0] and x[1] <= y[1]


def _minimal(intervals):
    """The intervals that contain no other interval of the collection, sorted, once each."""
    pool = set(intervals)
    return sorted(x for x in pool if not any(y != x and _inside(y, x) for y in pool))


def _minimal_solutions(lists, holds):
    """The minimal intervals [i, j] for which holds(contained) is true, where contained is
    the list of intervals of ``lists`` (each a list of (p, q)) lying inside [i, j].

    Enumerates candidates [i, j] with i a start and j an end of some interval: a minimal
    solution starts and ends there, since moving an endpoint inward past a point that is
    no interval's endpoint leaves the same intervals inside. For each i only the first
    (shortest) solution [i, j] is kept: every longer [i, j'] contains it.
    """
    everything = [x for lst in lists for x in lst]
    starts = sorted({p for p, _ in everything})
    ends = sorted({q for _, q in everything})
    kept = []
    for i in starts:
        for j in ends:
            if i <= j and holds([[x for x in lst if _inside(x, (i, j))] for lst in lists]):
                kept.append((i, j))
                break
    return _minimal(kept)


def is_gc_list(intervals):
    """True when the (p, q) are a GC-list: each p <= q, in order of start, and no interval
    inside another (an exact duplicate lies inside its twin)."""
    return (all(p <= q for p, q in intervals) and list(intervals) == sorted(intervals)
            and not any(i != j and _inside(x, y) for i, x in enumerate(intervals)
                        for j, y in enumerate(intervals)))


def normalize(triples):
    """Any (p, q, v) triples in write order -> a GC-list of (p, q, v).

    An exact duplicate (p, q) keeps the value of its last write; an interval that
    contains another distinct interval is dropped.
    """
    latest = {}
    for p, q, v in triples:
        assert p <= q
        latest[(p, q)] = v
    return [(p, q, latest[(p, q)]) for p, q in _minimal(latest)]


def both_of(a, b):
    """``(^ A B)``: minimal intervals containing an A-interval and a B-interval."""
    return _minimal_solutions([a, b], lambda inner: bool(inner[0]) and bool(inner[1]))


def one_of(a, b):
    """``(+ A B)``: minimal intervals containing an A-interval or a B-interval."""
    return _minimal_solutions([a, b], lambda inner: bool(inner[0]) or bool(inner[1]))


def followed_by(a, b):
    """``(... A B)``: minimal intervals containing an A-interval x and a B-interval y
    with x.q < y.p."""
    return _minimal_solutions(
        [a, b], lambda inner: any(x[1] < y[0] for x in inner[0] for y in inner[1])
    )


def contained_in(a, b):
    """``(<< A B)``: indices of the A-intervals lying inside some B-interval."""
    return [i for i, x in enumerate(a) if any(_inside(x, y) for y in b)]


def containing(a, b):
    """``(>> A B)``: indices of the A-intervals containing some B-interval."""
    return [i for i, x in enumerate(a) if any(_inside(y, x) for y in b)]


def not_contained_in(a, b):
    """``(!< A B)``: indices of the A-intervals lying inside no B-interval."""
    return [i for i, x in enumerate(a) if not any(_inside(x, y) for y in b)]


def not_containing(a, b):
    """``(!> A B)``: indices of the A-intervals containing no B-interval."""
    return [i for i, x in enumerate(a) if not any(_inside(y, x) for y in b)]


def phrase(lists):
    """Sorted p such that p + i is in lists[i] for every i (lists of addresses)."""
    sets = [set(lst) for lst in lists]
    return sorted(p for p in sets[0] if all(p + i in s for i, s in enumerate(sets)))


def ssr(covers, containers, k=42.0):
    """Shortest-substring ranking: (scores, best), one entry per container.

    scores[d] sums 1 / (k + (q - p)) over the covers (p, q) inside container d, in cover
    order; best[d] is the index of the shortest of those covers (the first on ties), or
    -1 when there is none.
    """
    scores, best = [], []
    for d in containers:
        total, shortest = 0.0, -1
        for c, (p, q) in enumerate(covers):
            if _inside((p, q), d):
                total += 1.0 / (k + (q - p))
                if shortest == -1 or q - p < covers[shortest][1] - covers[shortest][0]:
                    shortest = c
        scores.append(total)
        best.append(shortest)
    return scores, best


def top(scores, n):
    """Indices of the scores > 0, by score descending then index ascending, at most n."""
    ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
    return ranked[:n]


def ssr_top(covers, containers, k, n):
    """The best n containers by ssr's scores, in top's order, each (container, score, its
    best cover); and how many containers hold a cover."""
    scores, best = ssr(covers, containers, k)
    return ([(containers[d], scores[d], covers[best[d]]) for d in top(scores, n)],
            sum(b >= 0 for b in best))


def merge_ranked(scores, starts, lengths, n):
    """Indices of the first n rows of rankings laid end to end, by score descending (NaN
    last), then start, then index; and the ranking (run) each row is in."""
    runs = [r for r, k in enumerate(lengths) for _ in range(k)]
    order = sorted(range(len(scores)), key=lambda i: (
        math.isnan(scores[i]), 0.0 if math.isnan(scores[i]) else -scores[i], starts[i], i))
    return order[:max(n, 0)], [runs[i] for i in order[:max(n, 0)]]


def drop_erased(intervals, erased):
    """Indices of the intervals (any order) lying inside no erased range."""
    return [i for i, x in enumerate(intervals) if not any(_inside(x, r) for r in erased)]


def runs_at(points, at, length):
    """For each address a of `at`: whether a, a + 1, ..., a + length - 1 are all in points."""
    have = set(points)
    return [all(a + t in have for t in range(length)) for a in at]


def block_ranges(firsts, ps):
    """The ranges (firsts[j], firsts[j + 1] - 1) -- the last block's to the int64 maximum --
    of the distinct blocks j that hold the last start at or before some p in ps."""
    blocks = sorted({max(j for j, f in enumerate(firsts) if f <= p)
                     for p in ps if firsts and firsts[0] <= p})
    return [(firsts[j], 2**63 - 1 if j == len(firsts) - 1 else firsts[j + 1] - 1)
            for j in blocks]


def all_of_groups(words, groups, firsts):
    """The covers of (^ G1 G2 ...), each G (+ ...) of words and phrases (a tuple of indices
    into words, each a word's sorted points), lying inside one of the block ranges
    (block_ranges of firsts) holding a start of the rarest G's intervals: the rarest by
    the sum over its words and phrases of their rarest word's count, the first on ties."""
    def group(g):
        acc = []
        for toks in g:
            n = len(toks)
            acc = one_of(acc, [(p, p + n - 1) for p in phrase([words[t] for t in toks])])
        return acc
    counts = [sum(min(len(words[t]) for t in toks) for toks in g) for g in groups]
    rarest = groups[counts.index(min(counts))]
    covers = group(groups[0])
    for g in groups[1:]:
        covers = both_of(covers, group(g))
    ranges = block_ranges(firsts, sorted(p for p, _ in group(rarest)))
    return [c for c in covers if any(_inside(c, r) for r in ranges)]


def merge_ranges(ranges):
    """The covered addresses of closed ranges, as sorted maximal runs (p, q)."""
    covered = sorted({a for p, q in ranges for a in range(p, q + 1)})
    runs = []
    for a in covered:
        if runs and runs[-1][1] == a - 1:
            runs[-1] = (runs[-1][0], a)
        else:
            runs.append((a, a))
    return runs


# ---------------------------------------------------------------------------------------
# Whole queries over a whole (tiny) database: the definition of a query's meaning.

class Model:
    """A database as plain data: feature -> GC-list of (p, q, v), the address space size,
    the erased ranges, and the documents (docno, start, end, tokens)."""

    def __init__(self):
        self.lists = {}        # feature -> {(p, q): v} in write order
        self.size = 0
        self.erased = []
        self.docs = []         # (docno, start, end, tokens)

    def add(self, docno, toks):
        start = self.size
        for i, t in enumerate(toks):
            self._write(t, start + i, start + i, 0.0)
        end = start + max(len(toks), 1) - 1
        self._write(":", start, end, 0.0)
        self.docs.append((docno, start, end, list(toks)))
        self.size = end + 1
        return start, end

    def _write(self, feature, p, q, v):
        self.lists.setdefault(feature, []).append((p, q, v))

    def annotate(self, feature, p, q, v):
        self._write(feature, p, q, v)

    def erase(self, p, q):
        self.erased = merge_ranges(self.erased + [(p, q)])
        self.docs = [d for d in self.docs if not (p <= d[1] and d[2] <= q)]

    def delete(self, docno):
        """Writer.delete: erase the document's addresses; False when it is not there."""
        doc = next((d for d in self.docs if d[0] == docno), None)
        if doc is None:
            return False
        self.erase(doc[1], doc[2])
        return True

    def feature(self, name):
        triples = normalize(self.lists.get(name, []))
        return [t for t in triples if not any(_inside(t[:2], r) for r in self.erased)]


def evaluate(model, node):
    """The (p, q, v) triples a query AST denotes (see annodb.query for the node types)."""
    from annodb.query import Combine, Compare, Feature, Link, Term, Window
    if isinstance(node, Feature):
        return model.feature(node.name)
    if isinstance(node, Term):
        if not node.tokens:
            return []
        lists = [[p for p, _, _ in model.feature(t)] for t in node.tokens]
        n = len(node.tokens)
        if n == 1:
            return model.feature(node.tokens[0])
        return [(p, p + n - 1, 0.0) for p in phrase(lists)]
    if isinstance(node, Window):
        n = node.size
        wins = [(k, k + n - 1) for k in range(0, model.size - n + 1)]
        return [(p, q, 0.0) for p, q in wins if not any(_inside((p, q), r) for r in model.erased)]
    if isinstance(node, Link):
        a = evaluate(model, node.arg)
        addrs = sorted({int(v) for _, _, v in a if v >= 0 and v == int(v)})
        return [(x, x, 0.0) for x in addrs if not any(_inside((x, x), r) for r in model.erased)]
    if isinstance(node, Compare):
        ops = {"=": lambda v, x: v == x, "!=": lambda v, x: v != x, "<": lambda v, x: v < x,
               "<=": lambda v, x: v <= x, ">": lambda v, x: v > x, ">=": lambda v, x: v >= x}
        return [t for t in evaluate(model, node.arg) if ops[node.op](t[2], node.value)]
    if isinstance(node, Combine):
        acc = evaluate(model, node.args[0])
        for arg in node.args[1:]:
            b = evaluate(model, arg)
            pa, pb = [t[:2] for t in acc], [t[:2] for t in b]
            if node.op in ("^", "+", "..."):
                fn = {"^": both_of, "+": one_of, "...": followed_by}[node.op]
                acc = [(p, q, 0.0) for p, q in fn(pa, pb)]
            else:
                fn = {"<<": contained_in, ">>": containing, "!<": not_contained_in,
                      "!>": not_containing}[node.op]
                acc = [acc[i] for i in fn(pa, pb)]
        return acc
    raise TypeError(node)


def search(model, node, container_node, k):
    """SSR ranking: [(docno, score, cover)] of the top k containers; a container inside no
    document is named "@<its start>"."""
    covers = [t[:2] for t in evaluate(model, node)]
    boxes = [t[:2] for t in evaluate(model, container_node)]
    scores, best = ssr(covers, boxes)
    out = []
    for i in top(scores, k):
        start = boxes[i][0]
        doc = next((d for d in model.docs if d[1] <= start <= d[2]), None)
        out.append((doc[0] if doc else f"@{start}", scores[i], covers[best[i]]))
    return out


def snippet(text, spans, a, b, width=200, first=0):
    """The snippet of a document `text` whose tokens are at the character ranges `spans`
    ((start, end) pairs) for the cover of token indices a..b: `width` tokens centred on the
    cover, clipped to the tokens first..n-1 (the fields from the cover's on); a cover longer
    than `width` shows its first `width` tokens, all inside the tags. The characters run
    from the first token's leading punctuation (after the last whitespace before it; the
    whole text before the document's first token; none when the text between it and the
    token before has no whitespace) to the last token's trailing punctuation (up to the
    first whitespace after it), newlines and carriage returns as spaces."""
    n = len(spans)
    a = max(a, first)
    if b - a + 1 >= width:
        lo, hi, hb = a, a + width - 1, a + width - 1
    else:
        best = None
        for lo in range(first, max(n - width, first) + 1):
            hi = min(lo + width - 1, n - 1)
            if lo <= a and b <= hi:
                # centred: the left margin is (width - cover length) // 2 when it fits
                want = a - (width - (b - a + 1)) // 2
                key = abs(lo - want)
                if best is None or key < best[0]:
                    best = (key, lo, hi)
        _, lo, hi = best
        hb = b
    begin = spans[lo][0]
    floor = spans[lo - 1][1] if lo else 0
    while begin > floor and not text[begin - 1].isspace():
        begin -= 1
    if lo and begin == floor:               # no whitespace: it belongs to the token before
        begin = spans[lo][0]
    stop = spans[hi][1]
    ceiling = spans[hi + 1][0] if hi + 1 < n else len(text)
    while stop < ceiling and not text[stop].isspace():
        stop += 1
    shown = "".join(" " if c in "\r\n" else c for c in text)
    return (shown[begin:spans[a][0]] + "<cover>" + shown[spans[a][0]:spans[hb][1]] +
            "</cover>" + shown[spans[hb][1]:stop])


# ---------------------------------------------------------------- storage blocks


# The block layout, written from storage/layout.py's docstring alone (never from
# kernels/codec.py), as a second reading of the format.

BLOCK_HEADER = struct.Struct("<BBBBIq")
POINTS, ZERO = 1, 2   # the flags (storage.FLAG_POINTS, storage.FLAG_ZERO)


def stream_width(largest, count):
    """The width byte a writer gives an array of `count` numbers whose largest is
    `largest`: the smallest byte width holding it or, when bit-packing saves at least a
    quarter of the bytes, 128 + b, b its bits (at least 1, at most 56)."""
    largest = int(largest)
    width = next(w for w in (1, 2, 4, 8) if largest < 256 ** w)
    bits = max(1, largest.bit_length())
    packed = (bits * count + 7) // 8
    return 128 + bits if bits <= 56 and packed * 4 <= width * count * 3 else width


def width_bytes(code, count):
    """Bytes of an array of `count` numbers of width byte `code`."""
    return (count * (code - 128) + 7) // 8 if code > 128 else count * code


def stream_bytes(largest, count):
    """Bytes of a stream of `count` numbers whose largest is `largest` (format 2)."""
    return width_bytes(stream_width(largest, count), count)


def _put_numbers(numbers, code):
    if code < 128:
        return b"".join(int(x).to_bytes(code, "little") for x in numbers)
    b = code - 128
    if any(int(x) >> b for x in numbers):
        raise ValueError(f"a number does not fit in {b} bits")
    return sum(int(x) << (i * b) for i, x in enumerate(numbers)).to_bytes(
        width_bytes(code, len(numbers)), "little")


def _get_numbers(buf, pos, code, count):
    """(the `count` numbers of width byte `code` at buf[pos:], the position after them)."""
    if code in (1, 2, 4, 8):
        return [int.from_bytes(buf[pos + i * code:pos + (i + 1) * code], "little")
                for i in range(count)], pos + count * code
    b = code - 128
    if not 1 <= b <= 56:
        raise ValueError(f"width byte {code} is neither 1, 2, 4, 8 nor 128 + 1..56")
    size = width_bytes(code, count)
    whole = int.from_bytes(buf[pos:pos + size], "little")
    if whole >> (count * b):
        raise ValueError("the spare bits of a packed array are not 0")
    return [(whole >> (i * b)) & ((1 << b) - 1) for i in range(count)], pos + size


def encode_block(starts, ends, values, widths=None):
    """The bytes a writer makes of one block of a GC-list: flag ZERO when every value is
    0, flag POINTS when every interval is a point (its length width byte is then 1), and
    each array in its width by stream_width, or in the width bytes `widths` (start width,
    length width) when given: any width that holds the numbers is a valid block."""
    s, e, v = [int(x) for x in starts], [int(x) for x in ends], [float(x) for x in values]
    n = len(s)
    deltas = [b - a for a, b in zip(s, s[1:])]
    lengths = [q - p for p, q in zip(s, e)]
    flags = (ZERO if all(x == 0.0 for x in v) else 0) | \
        (POINTS if not any(lengths) else 0)
    sw, lw = widths or (stream_width(max(deltas, default=0), n - 1),
                        1 if flags & POINTS else stream_width(max(lengths), n))
    out = BLOCK_HEADER.pack(flags, sw, lw, 0, n, s[0])
    if not flags & ZERO:
        out += struct.pack(f"<{n}d", *v)
    out += _put_numbers(deltas, sw)
    if not flags & POINTS:
        out += _put_numbers(lengths, lw)
    return out


def decode_block(buf):
    """(starts, ends, values) of one block, as lists; ValueError when the bytes do not
    follow the layout (an unknown width byte, spare bits set, a size that does not match
    the header)."""
    buf = bytes(buf)
    if len(buf) < BLOCK_HEADER.size:
        raise ValueError(f"a block of {len(buf)} bytes has no whole header")
    flags, sw, lw, _, n, first = BLOCK_HEADER.unpack_from(buf)
    pos = BLOCK_HEADER.size
    values = [0.0] * n
    if not flags & ZERO:
        values = list(struct.unpack_from(f"<{n}d", buf, pos))
        pos += 8 * n
    deltas, pos = _get_numbers(buf, pos, sw, n - 1)
    lengths = [0] * n
    if not flags & POINTS:
        lengths, pos = _get_numbers(buf, pos, lw, n)
    if pos != len(buf):
        raise ValueError(f"the header makes the block {pos} bytes, not {len(buf)}")
    starts = [first]
    for d in deltas:
        starts.append(starts[-1] + d)
    return starts, [p + d for p, d in zip(starts, lengths)], values


def block_cuts(s, e, v, budget, max_count):
    """Where block_bounds cuts a GC-list: each block takes intervals while the block they
    make fits in `budget` bytes (at least one, at most max_count); the first that does not
    fit starts the next block. The size is recomputed from scratch at every interval."""
    s, e, v = [int(x) for x in s], [int(x) for x in e], [float(x) for x in v]
    cuts, lo, n = [0], 0, len(s)
    while lo < n:
        hi, max_gap, max_len, values, lengths = lo + 1, 0, e[lo] - s[lo], v[lo] != 0.0, \
            e[lo] != s[lo]
        while hi < n and hi - lo < max_count:
            gap, length = s[hi] - s[hi - 1], e[hi] - s[hi]
            count = hi - lo + 1
            size = 16 + stream_bytes(max(max_gap, gap), count - 1)
            if values or v[hi] != 0.0:
                size += 8 * count
            if lengths or length != 0:
                size += stream_bytes(max(max_len, length), count)
            if size > budget:
                break
            max_gap, max_len = max(max_gap, gap), max(max_len, length)
            values, lengths = values or v[hi] != 0.0, lengths or length != 0
            hi += 1
        cuts.append(hi)
        lo = hi
    return cuts


def group_postings(ids, runs):
    """(fids, bounds, addrs) of token ids in address order whose addresses are the runs
    [(first, count), ...]: the distinct ids ascending, and id fids[g]'s addresses
    addrs[bounds[g]:bounds[g+1]] ascending."""
    addrs = [a + t for a, c in runs for t in range(c)]
    groups = {}
    for i, a in zip(ids, addrs):
        groups.setdefault(int(i), []).append(a)
    fids = sorted(groups)
    bounds, out = [0], []
    for f in fids:
        out += sorted(groups[f])
        bounds.append(len(out))
    return fids, bounds, out


def join_groups(first, first_bounds, second, los, his):
    """(values, bounds): group g is first[first_bounds[g]:first_bounds[g+1]] followed by
    second[los[g]:his[g]]."""
    values, bounds = [], [0]
    for g in range(len(los)):
        values += list(first[first_bounds[g]:first_bounds[g + 1]])
        values += list(second[los[g]:his[g]])
        bounds.append(len(values))
    return values, bounds


def block_facts(intervals, values, last_end, docs, erased, last_doc):
    """What annodb.check learns of one block (kernels/checking.py): (flags, held, last_doc,
    high). flags: 1 an interval ends before it starts, 2 two starts in a row do not rise,
    4 two ends in a row do not rise, 8 an interval starts at or before the previous one's
    end (the first: before last_end). held: the documents (docs: sorted, disjoint) after
    index last_doc holding a block's interval lying inside no erased range; last_doc the
    last of them (-1 for held when the starts do not rise). high: the largest value, NaN
    if one is."""
    flags = 0
    pairs = list(zip(intervals, intervals[1:]))
    if any(q < p for p, q in intervals):
        flags |= 1
    if any(b[0] <= a[0] for a, b in pairs):
        flags |= 2
    if any(b[1] <= a[1] for a, b in pairs):
        flags |= 4
    if intervals[0][0] <= last_end or any(b[0] <= a[1] for a, b in pairs):
        flags |= 8
    high = float("nan") if any(v != v for v in values) else max(values)
    if flags & 2:
        return flags, -1, last_doc, high
    live = [intervals[i] for i in drop_erased(intervals, erased)]
    held = sorted({d for d, doc in enumerate(docs) for x in live if _inside(x, doc)})
    held = [d for d in held if d > last_doc]
    return flags, len(held), (held[-1] if held else last_doc), high


# ---------------------------------------------------------------- BM25 and sparse vectors

def document_frequencies(kinds, doc_tokens, n):
    """df[k]: the documents (consecutive runs of doc_tokens[d] tokens) holding kind k."""
    df, at = [0] * n, 0
    for count in doc_tokens:
        for k in set(kinds[at:at + count]):
            df[k] += 1
        at += count
    return df


def best_windows(addrs, terms, ranges):
    """Per range (lo, hi): the shortest [p, q] of addrs holding every distinct term of the
    range (the first of the shortest), or (-1, -1) when the range holds none."""
    out = []
    for lo, hi in ranges:
        inside = [(a, t) for a, t in zip(addrs, terms) if lo <= a <= hi]
        want = {t for _, t in inside}
        best = (-1, -1)
        for i in range(len(inside)):
            for j in range(i, len(inside)):
                if {t for _, t in inside[i:j + 1]} == want:
                    p, q = inside[i][0], inside[j][0]
                    if best == (-1, -1) or q - p < best[1] - best[0]:
                        best = (p, q)
                    break
        out.append(best)
    return out


def bm25(model, query, k, k1=0.9, b=0.4):
    """Lucene's BM25 by its definition: the top k [(docno, score)] of the live documents,
    score > 0, by score descending then address. query: [(forms, weight)]: a term is one of
    its forms (tf summed; df the sum of the forms', at most N)."""
    import math
    docs = model.docs
    n = len(docs)
    if not n:
        return []
    avg = sum(len(toks) for *_, toks in docs) / n
    points = {}

    def postings(f):
        if f not in points:
            points[f] = [p for p, _, _ in model.feature(f)]
        return points[f]

    def tf(f, doc):
        return sum(1 for p in postings(f) if doc[1] <= p <= doc[2])

    scores = [0.0] * n
    for forms, weight in query:
        df = min(n, sum(sum(1 for d in docs if tf(f, d)) for f in forms))
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            t = sum(tf(f, d) for f in forms)
            if t:
                length = d[2] - d[1] + 1
                scores[i] += weight * idf * t / (t + k1 * (1 - b + b * length / avg))
    ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i],
                                                                        docs[i][1]))
    return [(docs[i][0], scores[i]) for i in ranked[:k]]


def bm25_top(terms, factors, boxes, k, k1, b, avglen, matches=None):
    """The twin of kernels.bm25_steps run to the end: the k best boxes [(start, end,
    score)] by the sum over the terms, in order from 0.0, of factors[u] x tf / (tf + k1
    (1 - b + b (end - start + 1) / avglen)) where the box holds tf > 0 of term u's points
    (terms: a list of forms each, a form a list of points); by score descending, then
    start. Without `matches`, the boxes (a GC-list) holding a point, score > 0; with them
    (a GC-list), every one of them."""
    found = []
    for s, e in (boxes if matches is None else matches):
        score = 0.0
        for forms, factor in zip(terms, factors):
            tf = sum(1 for pts in forms for p in pts if s <= p <= e)
            if tf:
                score += factor * (tf / (tf + k1 * (1.0 - b + b * (e - s + 1) / avglen)))
        if matches is not None or score > 0:
            found.append((s, e, score))
    found.sort(key=lambda x: (-x[2], x[0]))
    return found[:max(k, 0)]


def bm25_documents_top(documents, factors, k, k1, b, avglen):
    """The twin of kernels.bm25_documents_top then bm25_pick: the k best documents
    [(start, end, score)] of the terms' documents (documents[u]: term u's [(start, length,
    tf)]), a document's score the sum over the terms holding it, in term order from 0.0,
    of factors[u] x tf / (tf + k1 (1 - b + b length / avglen)); score > 0 only, by score
    descending, then start."""
    held = {}
    for u, docs in enumerate(documents):
        for s, length, tf in docs:
            held.setdefault(s, (length, {}))[1][u] = tf
    found = []
    for s, (length, tfs) in held.items():
        score = 0.0
        for u, factor in enumerate(factors):
            tf = tfs.get(u, 0)
            if tf:
                score += factor * (tf / (tf + k1 * (1.0 - b + b * length / avglen)))
        if score > 0:
            found.append((s, s + length - 1, score))
    found.sort(key=lambda x: (-x[2], x[0]))
    return found[:max(k, 0)]


def term_documents(forms, boxes):
    """The twin of kernels.term_documents: [(start, length, tf)] of the boxes (disjoint)
    holding tf > 0 of the points of the forms (lists of points), by start."""
    out = []
    for s, e in boxes:
        tf = sum(1 for pts in forms for p in pts if s <= p <= e)
        if tf:
            out.append((s, e - s + 1, tf))
    return out


def start_table(starts, shift):
    """The twin of kernels.start_table: for each cell c from 0 to the one after the last
    start's, how many of the starts lie before c << shift."""
    last = (max(starts) >> shift) + 1 if starts else 0
    return [sum(1 for s in starts if s < c << shift) for c in range(last + 1)]


def term_cells(documents, shift, k1, b, avglen):
    """The twin of kernels.term_cells: of a term's documents [(start, length, tf)], the
    cells (start >> shift) holding one's start, ascending, each with the largest
    tf / (tf + k1 (1 - b + b length / avglen)) of the documents starting in it."""
    most = {}
    for s, length, tf in documents:
        x = float(tf)
        sat = x / (x + k1 * (1.0 - b + b * float(length) / avglen))
        most[s >> shift] = max(most.get(s >> shift, sat), sat)
    return sorted(most.items())


def add_cells(total, cells, values, scale):
    """The twin of kernels.add_cells: total (a list) with scale x values[y] added at
    cells[y], each in turn."""
    out = list(total)
    for c, v in zip(cells, values):
        out[c] += scale * v
    return out


def bm25f(docs, fields, query, k, k1=0.9):
    """BM25F by its definition over documents given as (docno, {field: [tokens]}) in
    address order; fields: [(field, weight, b)]; query: [(word, weight)]; idf from the
    documents holding the word in any field. The top k [(docno, score)], score > 0."""
    import math
    n = len(docs)
    avg = {}
    for f, _, _ in fields:
        having = [d for d in docs if d[1].get(f)]
        avg[f] = sum(len(d[1][f]) for d in having) / len(having) if having else 1.0
    scores = [0.0] * n
    for word, weight in query:
        df = sum(1 for _, fs in docs if any(word in toks for toks in fs.values()))
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, (_, fs) in enumerate(docs):
            tilde = 0.0
            for f, w, bf in fields:
                toks = fs.get(f, [])
                if toks.count(word):
                    tilde += w * toks.count(word) / (1 - bf + bf * len(toks) / avg[f])
            if tilde:
                scores[i] += weight * idf * tilde / (k1 + tilde)
    ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], i))
    return [(docs[i][0], scores[i]) for i in ranked[:k]]


def sparse(vectors, query, k):
    """The dot product of each document's {term: weight} with the query's: the top k
    [(docno, score)] of vectors [(docno, {term: weight})] in address order, score > 0."""
    scores = [sum(w * vec.get(t, 0.0) for t, w in query) for _, vec in vectors]
    ranked = sorted((i for i in range(len(vectors)) if scores[i] > 0),
                    key=lambda i: (-scores[i], i))
    return [(vectors[i][0], scores[i]) for i in ranked[:k]]


def merge_scores(a, b):
    """The union of two [(start, end, score)] lists (distinct starts): scores added."""
    out = {s: (e, v) for s, e, v in a}
    for s, e, v in b:
        out[s] = (e, out[s][1] + v) if s in out else (e, 0.0 + v)
    return [(s, e, v) for s, (e, v) in sorted(out.items())]


# Lucene's English stop words, written out here on purpose: the reference does not read
# annodb's list (annodb.feedback.STOP_WORDS), so a slip in either one fails the tests
LUCENE_STOP_WORDS = set(
    "a an and are as at be but by for if in into is it no not of on or such that the "
    "their then there these they this to was will with".split())


def rm3(model, query, k, only=None, fb_docs=10, fb_terms=10, original=0.5, max_df=0.1,
        k1=0.9, b=0.4, stop_words=False):
    """BM25 of the query [(word, count)] expanded by RM3 by its definition (as
    annodb/feedback.py states it), words as they are: the fb_docs best documents by BM25
    weigh each word of 2-20 letters or digits held by at most max_df of the documents by
    the sum of tf / length x score; the fb_terms heaviest (ties by word), scaled to sum 1,
    weigh (1 - original), the counts of the query's words some document holds, scaled to
    sum 1, weigh original. The top k
    [(docno, score)] by BM25 of that, among the documents `only` (docnos) if given. With
    stop_words, Lucene's English stop words leave the query first, unless nothing else
    is left."""
    if stop_words:
        kept = [(w, c) for w, c in query if w not in LUCENE_STOP_WORDS]
        query = kept or query
    docs = model.docs
    n = len(docs)
    first = bm25(model, [((w,), c) for w, c in query], fb_docs if only is None else n,
                 k1, b)
    if only is not None:
        first = [x for x in first if x[0] in only][:fb_docs]
    by_docno = {d[0]: d for d in docs}

    def live(p):
        return not any(lo <= p <= hi for lo, hi in model.erased)

    def df(word):
        points = [p for p, _, _ in model.feature(word)]
        return sum(1 for d in docs if any(d[1] <= p <= d[2] for p in points))

    weight = {}
    for docno, score in first:
        _, start, end, toks = by_docno[docno]
        words = [t for i, t in enumerate(toks) if live(start + i)]
        for w in dict.fromkeys(words):
            if 2 <= len(w) <= 20 and w.isalnum():
                weight[w] = weight.get(w, 0.0) + words.count(w) / (end - start + 1) * score
    kept = [w for w in sorted(weight, key=lambda w: (-weight[w], w))
            if df(w) / max(n, 1) <= max_df][:fb_terms]
    total = sum(weight[w] for w in kept)
    query = [(w, c) for w, c in query if df(w)]
    qsum = sum(c for _, c in query) or 1.0
    expanded = {}
    for w, c in query:
        expanded[w] = expanded.get(w, 0.0) + original * c / qsum
    for w in kept:
        expanded[w] = expanded.get(w, 0.0) + (1 - original) * weight[w] / total
    ranked = bm25(model, [((w,), x) for w, x in expanded.items()], n, k1, b)
    if only is not None:
        ranked = [x for x in ranked if x[0] in only]
    return ranked[:k]


def context_sums(values, runs, before, after, reach):
    """For each row of values and each item i: the sum over the other items j of i's run
    (the consecutive items with the same id as i) at most `reach` away of
    before ** (i - j) * values[j] for j before i, after ** (j - i) * values[j] for j
    after it."""
    out = []
    for row in values:
        sums = []
        for i in range(len(row)):
            total = 0.0
            for j in range(len(row)):
                lo, hi = min(i, j), max(i, j)
                if j != i and hi - lo <= reach and \
                        all(runs[x] == runs[i] for x in range(lo, hi + 1)):
                    total += (before ** (i - j) if j < i else after ** (j - i)) * row[j]
            sums.append(total)
        out.append(sums)
    return out


def context_scores(tf, counts, idfs, pidfs, lengths, runs, dated, avglen, settings,
                   named=None):
    """recall.score's formula in numpy, array by array (what recall.score computed before
    kernels.context_scores): the same float64 to the bit is asked of the kernel."""
    import numpy as np
    lengths = np.asarray(lengths, dtype=np.float64)
    n = len(lengths)
    if not n:
        return np.zeros(0)
    tf = np.asarray(tf, dtype=np.float64).reshape(len(counts), n)
    s = settings
    held = (tf > 0).astype(np.float64)
    lent = np.array(context_sums_fast(np.vstack((lengths[None, :], tf)), runs, s.before,
                                      s.after, s.window))
    near = np.array(context_sums_fast(np.vstack((np.ones((1, n)), held)), runs, 1.0, 1.0,
                                      s.window))
    flat = np.array(context_sums_fast(np.vstack((lengths[None, :], tf)), runs, 1.0, 1.0,
                                      s.reach))
    norm = s.k1 * (1.0 - s.b + s.b * (lengths + lent[0]) / (avglen * s.spread()))
    passage_norm = s.passage_k1 * (1.0 - s.passage_b + s.passage_b * (lengths + flat[0]) /
                                   (avglen * (2 * s.reach + 1)))
    limit = np.maximum(s.common * (1.0 + near[0]), 1.0)
    turn = np.zeros(n)
    passage = np.zeros(n)
    for w in range(len(counts)):
        x = tf[w]
        wide = x + np.where(held[w] + near[w + 1] <= limit, lent[w + 1], 0.0)
        turn += counts[w] * idfs[w] * wide / (wide + norm)
        p = x + flat[w + 1]
        passage += counts[w] * pidfs[w] * p / (p + passage_norm)
    extra = s.passage * passage + s.dates * np.asarray(dated, float)
    if named is not None:
        extra = extra + s.labels * np.asarray(named, float)
    return (turn + (turn > 0) * extra) * (1.0 + s.length * lengths / (lengths + avglen))


def context_sums_fast(values, runs, before, after, reach):
    """context_sums as kernels.context_sums adds its terms (prefix sums where nothing
    decays; else from the nearest neighbour out, those before first), in Python floats:
    the same float64 as the kernel, for context_scores' comparisons to the bit."""
    out = []
    for row in values:
        row = [float(x) for x in row]
        n = len(row)
        first = [0] * n
        last = [n - 1] * n
        for i in range(1, n):
            first[i] = first[i - 1] if runs[i] == runs[i - 1] else i
        for i in range(n - 2, -1, -1):
            last[i] = last[i + 1] if runs[i] == runs[i + 1] else i
        sums = []
        if before == 1.0 and after == 1.0:
            total = [0.0]
            for x in row:
                total.append(total[-1] + x)
            for i in range(n):
                lo, hi = max(i - reach, first[i]), min(i + reach, last[i])
                sums.append((total[hi + 1] - total[lo]) - row[i])
        else:
            down, up = [1.0], [1.0]
            for _ in range(reach):
                down.append(down[-1] * before)
                up.append(up[-1] * after)
            for i in range(n):
                lo, hi = max(i - reach, first[i]), min(i + reach, last[i])
                acc = 0.0
                for j in range(i - 1, lo - 1, -1):
                    acc += down[i - j] * row[j]
                for j in range(i + 1, hi + 1):
                    acc += up[j - i] * row[j]
                sums.append(acc)
        out.append(sums)
    return out


def asking(text):
    """recall.asking by its definition, for texts of words split by spaces and the marks
    . ! ?: the share of the words in sentences whose closing marks hold a ?, a sentence
    ending at each run of marks (or the text's end)."""
    sentences, words, marks = [], [], ""
    for ch in text + " ":
        if ch in ".!?":
            marks += ch
            continue
        if marks:
            sentences.append((words, marks))
            words, marks = [], ""
        if ch == " ":
            words.append("")
        elif words:
            words[-1] += ch
        else:
            words.append(ch)
    sentences.append((words, marks))
    counted = [(sum(1 for w in ws if w), "?" in m) for ws, m in sentences]
    total = sum(n for n, _ in counted)
    return sum(n for n, asks in counted if asks) / total if total else 0.0


def context_recall(memories, selected, words, dates, k, settings, labels=None, events=None,
                   asked=None):
    """annodb/recall.py's context recall by its definition. memories: [(docno, tokens,
    time or None)], every document of the collection in address order (N, df and the mean
    length are theirs); selected: the docnos ranked; words: [(word, count in the query)];
    dates: [(lo, hi)] the query names; settings: a recall.Context; labels: {docno: the
    words of its metadata strings} (a word no text holds has for df the memories whose
    labels hold it); events: {docno: (lo, hi), the date its text names relative to its
    time}: a query date it overlaps counts as ln(1 + date_span / the longer of the two)
    where the memory's time is not in that date; asked: {docno: the share of its tokens
    in sentences that ask} (the score x (1 - asks x it)). The top k [(docno, score)],
    score > 0, by score, ties by address."""
    import math

    def idf(df, n):
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    s = settings
    n_docs = len(memories)
    avglen = sum(len(toks) for _, toks, _ in memories) / n_docs or 1.0
    mine = [m for m in memories if m[0] in selected]
    n = len(mine)
    if not n:
        return []
    length = [max(len(toks), 1) for _, toks, _ in mine]
    times = [t for _, _, t in mine]
    session = [0]
    for i in range(1, n):
        a, b = times[i - 1], times[i]
        same = a is not None and b is not None and abs(b - a) <= s.gap
        session.append(session[-1] + (0 if same else 1))

    def near(i, reach):  # i's session's memories at most `reach` away, i included
        return [j for j in range(n) if abs(j - i) <= reach and session[j] == session[i]]

    def lent(x, i):
        return sum((s.before ** (i - j) if j < i else s.after ** (j - i)) * x[j]
                   for j in near(i, s.window) if j != i)

    spread = 1 + sum(s.before ** d + s.after ** d for d in range(1, s.window + 1))
    turn = [0.0] * n
    passage = [0.0] * n
    named = [0.0] * n
    labels = labels or {}
    for word, count in words:
        df = sum(1 for _, toks, _ in memories if word in toks) or \
            sum(1 for d, _, _ in memories if word in labels.get(d, ()))
        if not df:
            continue
        tf = [toks.count(word) for _, toks, _ in mine]
        share = 1 - (1 - df / n_docs) ** (2 * s.reach + 1)
        pidf = idf(n_docs * share, n_docs)
        for i in range(n):
            around = near(i, s.window)
            holding = sum(1 for j in around if tf[j])
            wide = tf[i] + (lent(tf, i) if holding <= max(s.common * len(around), 1) else 0.0)
            norm = s.k1 * (1 - s.b + s.b * (length[i] + lent(length, i)) / (avglen * spread))
            turn[i] += count * idf(df, n_docs) * wide / (wide + norm)
            pas = near(i, s.reach)
            ptf = sum(tf[j] for j in pas)
            plen = sum(length[j] for j in pas)
            pnorm = s.passage_k1 * (1 - s.passage_b + s.passage_b * plen /
                                    (avglen * (2 * s.reach + 1)))
            passage[i] += count * pidf * ptf / (ptf + pnorm)
            if word in labels.get(mine[i][0], ()):
                named[i] += count * idf(df, n_docs)
    dated = [0.0] * n
    events = events or {}
    for lo, hi in dates:
        for i in range(n):
            event = events.get(mine[i][0])
            if times[i] is not None and lo <= times[i] < hi:
                dated[i] += math.log(1 + s.date_span / (hi - lo))
            elif event is not None and event[0] < hi and lo < event[1]:
                dated[i] += math.log(1 + s.date_span / max(hi - lo, event[1] - event[0]))
    asked = asked or {}
    scores = [(turn[i] + ((s.passage * passage[i] + s.dates * dated[i] +
                           s.labels * named[i]) if turn[i] > 0 else 0.0))
              * (1 + s.length * length[i] / (length[i] + avglen))
              * (1 - s.asks * asked.get(mine[i][0], 0.0)) for i in range(n)]
    ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: -scores[i])
    return [(mine[i][0], scores[i]) for i in ranked[:k]]


def number_words(batches):
    """The numbers kernels.number_words gives the words of each batch, kept across
    batches: each distinct word numbered in order of first appearance."""
    numbers: dict = {}
    return [[numbers.setdefault(w, len(numbers)) for w in words] for words in batches]


def number_utf8(texts):
    """What kernels.number_utf8 gives each text, called on them in order: (starts, kinds,
    words): each token's start (code points), its kind (its folded word, numbered in
    order of first appearance in the text) and each kind's number (numbered in order of
    first appearance in any text so far), tokens found by the tokenizer's regex."""
    import re as _re

    from annodb import tokenizer
    numbers: dict = {}
    out = []
    for text in texts:
        found = [(m.start(), m.group()) for m in
                 _re.finditer(tokenizer._TOKEN, tokenizer.fold(text))]
        kinds: dict = {}
        for _, w in found:
            kinds.setdefault(w, len(kinds))
            numbers.setdefault(w, len(numbers))
        out.append(([a for a, _ in found], [kinds[w] for _, w in found],
                    [numbers[w] for w in kinds]))
    return out
