"""The BM25 variants of issue 17, computed exhaustively in memory (not through annodb) so
that a grid of term statistics runs in seconds: which choice of stemming, df, stop words,
k1/b or feedback moves nDCG@10 and R@100 on the three development sets, before any of it
is built into annodb (benchmarks/effectiveness.py then measures what was built).

    python -m benchmarks.bm25_variants             # every variant, every set
    python -m benchmarks.bm25_variants --set "RAG 86"

A document is the project's tokens of its record's strings (every string but the id, as
annodb ingests it and as the FTS5 table of effectiveness.py holds it: its length is the
same as annodb's container length). A query is the project's tokens of the topic. Words
are conflated by exact stem classes (every word of the collection with the same stem:
tf summed, df the documents holding any: what a stemming index stores), unless the
variant says otherwise. Ties by document order, top 100, ir-measures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

import numpy as np

from annodb.feedback import STOP_WORDS as LUCENE_STOP  # (Anserini's analyzer drops them)
from benchmarks.effectiveness import SETS, SHARED, topics

DEPTH = 100


class Corpus:
    """Documents as a (documents x words) tf matrix, in CSC form per word."""

    def __init__(self, docs_path: str):
        from annodb.tokenizer import tokens
        from benchmarks.common.engines import records
        self.docnos, rows = [], []
        vocab: dict[str, int] = {}
        cols, data, lengths = [], [], []
        for i, (docno, texts) in enumerate(records(docs_path)):
            self.docnos.append(docno)
            toks = tokens(" ".join(texts))
            lengths.append(len(toks))
            for w, n in Counter(toks).items():
                rows.append(i)
                cols.append(vocab.setdefault(w, len(vocab)))
                data.append(n)
        self.n = len(self.docnos)
        self.words = list(vocab)
        self.vocab = vocab
        self.lengths = np.array(lengths, dtype=np.float64)
        rows, cols, data = np.array(rows), np.array(cols), np.array(data, dtype=np.float64)
        order = np.lexsort((rows, cols))
        self.rows, self.data = rows[order], data[order]
        self.ptr = np.searchsorted(cols[order], np.arange(len(vocab) + 1))
        self.cache: dict = {}

    def length(self, how: str) -> np.ndarray:
        """Documents' lengths in tokens: "all" of them (annodb's, FTS5's); "no stop words"
        (Anserini's default analyzer removes Lucene's stop words from the index); "lucene
        bytes" (Lucene keeps a length in one byte, SmallFloat.intToByte4, and scores with
        the decoded value)."""
        if how == "all":
            return self.lengths
        key = ("length", how)
        if key not in self.cache:
            if how == "no stop words":
                out = self.lengths.copy()
                for w in LUCENE_STOP:
                    if w in self.vocab:
                        d, tf = self.postings(self.vocab[w])
                        out[d] -= tf
            else:
                out = np.array([lucene_length(int(n)) for n in self.lengths], np.float64)
            self.cache[key] = out
        return self.cache[key]

    def postings(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        a, z = self.ptr[w], self.ptr[w + 1]
        return self.rows[a:z], self.data[a:z]

    def classes(self, stemmer: str) -> dict[str, list[int]]:
        """stem -> the words having it (stemmer 'none': each word its own)."""
        key = ("classes", stemmer)
        if key not in self.cache:
            stem = stem_function(stemmer)
            out: dict[str, list[int]] = {}
            for i, w in enumerate(self.words):
                out.setdefault(stem(w), []).append(i)
            self.cache[key] = out
        return self.cache[key]

    def term(self, stemmer: str, stem: str) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(documents, tf) of a stem class, its exact df and its sum of the forms' df."""
        key = ("term", stemmer, stem)
        if key not in self.cache:
            forms = self.classes(stemmer).get(stem, [])
            if not forms:
                got = (np.zeros(0, np.int64), np.zeros(0), 0, 0)
            else:
                parts = [self.postings(f) for f in forms]
                d = np.concatenate([p[0] for p in parts])
                t = np.concatenate([p[1] for p in parts])
                u, inv = np.unique(d, return_inverse=True)
                tf = np.bincount(inv, weights=t)
                got = (u, tf, len(u), len(d))
            self.cache[key] = got
        return self.cache[key]


def stem_function(name: str):
    if name == "none":
        return lambda w: w
    import snowballstemmer
    s = snowballstemmer.stemmer({"snowball": "english", "porter": "porter"}[name])

    def stem(w: str) -> str:  # as annodb.ranking.word_forms: short or non-alphabetic as is
        return s.stemWord(w) if len(w) > 2 and w.isalpha() else w
    return stem


def _int4(i: int) -> int:  # Lucene's SmallFloat.longToInt4
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _from_int4(i: int) -> int:  # SmallFloat.int4ToLong
    shift = (i >> 3) - 1
    return i & 0x07 if shift == -1 else ((i & 0x07) | 0x08) << shift


_FREE = 255 - _int4(2 ** 31 - 1)  # SmallFloat.NUM_FREE_VALUES (24)


def lucene_length(n: int) -> int:
    """A length as Lucene scores it: byte4ToInt(intToByte4(n))."""
    if n < _FREE:
        return n
    return _FREE + _from_int4(_int4(n - _FREE))


def lucene_idf(df, n):
    return np.log(1.0 + (n - df + 0.5) / (df + 0.5))


def robertson_idf(df, n):  # FTS5's, with its floor
    x = np.log((n - df + 0.5) / (df + 0.5))
    return np.where(x <= 0, 1e-6, x)


class Variant:
    def __init__(self, label, stemmer="snowball", df="union", idf="lucene", k1=0.9, b=0.4,
                 stop=False, dedup=False, rm3=None, bm25plus=0.0, rm3_norm="kept",
                 lengths="all"):
        self.label, self.stemmer, self.df, self.idf = label, stemmer, df, idf
        self.k1, self.b, self.stop, self.dedup, self.rm3 = k1, b, stop, dedup, rm3
        self.delta = bm25plus
        self.rm3_norm = rm3_norm  # p(t|d): tf / the kept terms' tf (Anserini) or / |d|
        self.lengths = lengths  # Corpus.length's choice


def query_vector(c: Corpus, v: Variant, text: str) -> dict[str, float]:
    from annodb.tokenizer import tokens
    stem = stem_function(v.stemmer)
    words = [w for w in tokens(text) if not (v.stop and w in LUCENE_STOP)]
    if v.dedup:
        words = list(dict.fromkeys(words))
    return dict(Counter(stem(w) for w in words))


def score(c: Corpus, v: Variant, q: dict[str, float]) -> np.ndarray:
    # Lucene's average is exact (the indexed tokens / the documents), not of the bytes
    avg = c.length("all" if v.lengths == "lucene bytes" else v.lengths).mean()
    norm = v.k1 * (1.0 - v.b + v.b * c.length(v.lengths) / avg)
    total = np.zeros(c.n)
    idf = lucene_idf if v.idf == "lucene" else robertson_idf
    for stem, weight in q.items():
        d, tf, exact, summed = c.term(v.stemmer, stem)
        if not len(d):
            continue
        df = exact if v.df == "union" else min(summed, c.n)
        w = weight * float(idf(df, c.n))
        total[d] += w * (tf / (tf + norm[d]) + v.delta)
    return total


def best(scores: np.ndarray, k: int = DEPTH) -> np.ndarray:
    hit = np.flatnonzero(scores > 0)
    order = np.lexsort((hit, -scores[hit]))
    return hit[order[:k]]


def rm3(c: Corpus, v: Variant, q: dict[str, float], scores: np.ndarray) -> dict[str, float]:
    """Anserini's bm25+rm3 (Rm3Reranker): the fb_docs best documents' term vectors (terms
    of 2-20 characters [a-z0-9], in at most 10% of the documents), each L1-normalised
    (or divided by the document's length, rm3_norm "length")
    and weighed by the document's BM25 score, summed; the fb_terms heaviest, L1-normalised,
    interpolated with the L1-normalised query at the original weight."""
    fb_docs, fb_terms, weight = v.rm3
    top = best(scores, fb_docs)
    stem = stem_function(v.stemmer)
    model: dict[str, float] = {}
    for d in top:
        vec: dict[str, float] = {}
        for w, tf in zip(*doc_vector(c, d)):
            s = stem(c.words[w])
            if not (2 <= len(s) <= 20 and s.isascii() and s.isalnum()):
                continue
            _, _, exact, summed = c.term(v.stemmer, s)
            df = exact if v.df == "union" else min(summed, c.n)
            if df / c.n > 0.1:
                continue
            vec[s] = vec.get(s, 0.0) + float(tf)
        l1 = sum(vec.values()) if v.rm3_norm == "kept" else c.lengths[d]
        if l1 > 0.001:
            for s, x in vec.items():
                model[s] = model.get(s, 0.0) + x / l1 * scores[d]
    kept = sorted(model.items(), key=lambda x: (-x[1], x[0]))[:fb_terms]
    z = sum(x for _, x in kept) or 1.0
    qz = sum(q.values()) or 1.0
    out = {t: weight * x / qz for t, x in q.items()}
    for t, x in kept:
        out[t] = out.get(t, 0.0) + (1 - weight) * x / z
    return out


def doc_vector(c: Corpus, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(words, tf) of document d."""
    if "bydoc" not in c.cache:
        order = np.argsort(c.rows, kind="stable")
        col = np.repeat(np.arange(len(c.words)), np.diff(c.ptr))
        c.cache["bydoc"] = (col[order], c.data[order],
                            np.searchsorted(c.rows[order], np.arange(c.n + 1)))
    cols, data, ptr = c.cache["bydoc"]
    return cols[ptr[d]:ptr[d + 1]], data[ptr[d]:ptr[d + 1]]


VARIANTS = [
    Variant("snowball, sum df (annodb bm25 today)", df="sum"),
    Variant("snowball, union df"),
    Variant("porter, sum df", stemmer="porter", df="sum"),
    Variant("porter, union df", stemmer="porter"),
    Variant("no stemming", stemmer="none"),
    Variant("snowball, union df, Lucene stop words", stop=True),
    Variant("porter, union df, Lucene stop words", stemmer="porter", stop=True),
    Variant("snowball, union df, query words once", dedup=True),
    Variant("porter, union df, Lucene stop words out of query and index (Anserini's "
            "analyzer)", stemmer="porter", stop=True, lengths="no stop words"),
    Variant("porter, union df, lengths in Lucene's byte", stemmer="porter",
            lengths="lucene bytes"),
    Variant("porter, Robertson idf, k1 1.2, b 0.75 (FTS5's formula)", stemmer="porter",
            idf="robertson", k1=1.2, b=0.75),
    Variant("snowball, Robertson idf", idf="robertson"),
    Variant("snowball, BM25+ (delta 1)", bm25plus=1.0),
    Variant("snowball, union df, +rm3 (10, 10, 0.5)", rm3=(10, 10, 0.5)),
    Variant("snowball, sum df, +rm3 (10, 10, 0.5)", df="sum", rm3=(10, 10, 0.5)),
    Variant("porter, union df, +rm3 (10, 10, 0.5)", stemmer="porter", rm3=(10, 10, 0.5)),
    Variant("snowball, union df, stop words, +rm3 (10, 10, 0.5)", stop=True,
            rm3=(10, 10, 0.5)),
    Variant("snowball, sum df, +rm3 (10, 10, 0.5), p(t|d) = tf / |d|", df="sum",
            rm3=(10, 10, 0.5), rm3_norm="length"),
]
GRID = [Variant(f"snowball, union df, k1 {k1}, b {b}", k1=k1, b=b)
        for k1 in (0.6, 0.9, 1.2, 1.5) for b in (0.3, 0.4, 0.6, 0.75)
        if (k1, b) != (0.9, 0.4)] + [
    Variant("porter, Robertson idf, k1 1.2, b 0.75, query words once (FTS5's, as it "
            "queries)", stemmer="porter", idf="robertson", k1=1.2, b=0.75, dedup=True),
    Variant("snowball, union df, query words once, Robertson idf", dedup=True,
            idf="robertson"),
    Variant("snowball, union df, query words once, +rm3 (10, 10, 0.5)", dedup=True,
            rm3=(10, 10, 0.5)),
] + [Variant(f"snowball, union df, +rm3 (10, {t}, {w})", rm3=(10, t, w))
     for w in (0.5, 0.6, 0.7, 0.8, 0.9) for t in (10, 20) if (t, w) != (10, 0.5)] + [
    Variant(f"snowball, union df, stop words, +rm3 (10, {t}, {w})", stop=True,
            rm3=(10, t, w))
    for w in (0.6, 0.7, 0.8, 0.9) for t in (10, 20)] + [
    # annodb's estimates (sum df, p(t|d) = tf / len(d)): the four nearest the choice
    Variant(f"snowball, sum df, stop words, +rm3 (10, {t}, {w}), p(t|d) = tf / len(d)",
            df="sum", stop=True, rm3=(10, t, w), rm3_norm="length")
    for w in (0.8, 0.9) for t in (10, 20)]


def run_set(name: str, variants: list[Variant]) -> list[tuple]:
    import ir_measures
    from ir_measures import R, nDCG
    docs, tpath, qpath = (os.path.join(SHARED, "data", p) for p in SETS[name])
    c = Corpus(docs)
    todo = topics(tpath)
    judged = list(ir_measures.read_trec_qrels(qpath))
    rows = []
    for v in variants:
        t = time.perf_counter()
        run = []
        for qid, text in todo:
            q = query_vector(c, v, text)
            s = score(c, v, q)
            if v.rm3:
                s = score(c, v, rm3(c, v, q, s))
            for i, d in enumerate(best(s)):
                run.append(ir_measures.ScoredDoc(qid, c.docnos[d], DEPTH - i))
        m = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], judged, run)
        rows.append((v.label, m[nDCG @ 10], m[R @ 100], time.perf_counter() - t))
        print(f"{name} | {v.label} | {m[nDCG @ 10]:.4f} | {m[R @ 100]:.4f}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=list(SETS), action="append")
    ap.add_argument("--grid", action="store_true",
                    help="also the k1/b grid and RM3's (original weight, terms) grid")
    args = ap.parse_args(argv)
    if not os.path.isdir(SHARED):
        print(f"benchmarks need ../shared (not found at {SHARED}); set ANNODB_SHARED",
              file=sys.stderr)
        return 0
    variants = VARIANTS + (GRID if args.grid else [])
    for name in args.set or SETS:
        run_set(name, variants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
