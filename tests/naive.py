"""Brute-force reference semantics: the definition every fast path is tested against.

Plain Python over lists of (p, q) tuples (closed intervals of int addresses), written by
enumeration rather than by clever algorithms. Slow on purpose; keep it obviously right.
A GC-list here is a sorted list of (p, q) in which no interval contains another.
"""

from __future__ import annotations


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


def drop_erased(intervals, erased):
    """Indices of the intervals (any order) lying inside no erased range."""
    return [i for i, x in enumerate(intervals) if not any(_inside(x, r) for r in erased)]


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


def stream_bytes(largest, count):
    """Bytes of a stream of `count` numbers whose largest is `largest` (format 2): whole
    bytes (1, 2, 4, 8) or, when that saves a quarter of them, `bits` bits each."""
    width = next(w for w in (1, 2, 4, 8) if largest < 256 ** w)
    bits = max(1, int(largest).bit_length())
    packed = (bits * count + 7) // 8
    return packed if bits <= 56 and packed * 4 <= width * count * 3 else width * count


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
