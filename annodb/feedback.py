"""Pseudo-relevance feedback: RM3 (Abdul-Jaleel et al. 2004; Lavrenko and Croft's
relevance model interpolated with the query), as Anserini's bm25+rm3 runs it, over BM25.

The query's words are ranked by BM25 (bm25.py); the FB_DOCS best containers are taken as
relevant, and the relevance model weighs each term t by

    rm(t) = sum over those containers d of  tf(t, d) / len(d) x bm25(d)

(len(d) the container's tokens, as BM25 counts them), keeping the FB_TERMS heaviest of
the terms of 2 to 20 letters or digits held by at most MAX_DF of the documents (more
common ones are the collection's stop words: Anserini's rule), scaled to sum 1. The new
query is

    weight(t) = ORIGINAL x q(t) / sum q  +  (1 - ORIGINAL) x rm(t)

(q the query's own counts), ranked by BM25 again: the same exact, pruned top k.
FB_DOCS 10, FB_TERMS 10 and ORIGINAL 0.5 are Anserini's defaults. Anserini divides tf by
the document's kept terms rather than its length; length is the relevance model's own
estimate (Lavrenko and Croft's maximum likelihood p(t|d)) and lets the terms be taken
from the heaviest down, the df of only those looked up (measured against Anserini's:
benchmarks/RESULTS.md).

A term is what the BM25 it feeds scores: in free text a word with the words sharing its
English stem (ranking.word_forms; the stem is the term), in a GCL query a word as it is.
"""

from __future__ import annotations

from collections import Counter

from .tokenizer import strip_diacritics, tokens

FB_DOCS = 10
FB_TERMS = 10
ORIGINAL = 0.5
MAX_DF = 0.1          # a term in more than this share of the documents is not fed back
MIN_LENGTH, MAX_LENGTH = 2, 20
CHUNK = 32            # candidate terms whose statistics are read at once


def eligible(term: str) -> bool:
    """Whether a term may be fed back: 2 to 20 characters, letters and digits only."""
    return MIN_LENGTH <= len(term) <= MAX_LENGTH and term.isalnum()


def relevance_model(snapshot, starts, ends, scores, key, forms_of
                    ) -> list[tuple[str, tuple[str, ...], float]]:
    """The FB_TERMS heaviest terms of the relevance model of the containers (starts, ends)
    with BM25 scores `scores`: [(term, its words, weight)], weights summing to 1, by
    weight descending, ties by term. key(word) is a word's term; forms_of(word) the
    words of the database the term stands for (the word among them)."""
    n = max(snapshot.document_count(), 1)
    fb_terms = FB_TERMS
    weight: dict[str, float] = {}
    seen: dict[str, str] = {}  # term -> the first word of it met
    fold = getattr(snapshot, "fold_diacritics", False)
    for s, e, sc in zip(starts.tolist(), ends.tolist(), scores.tolist()):
        words = tokens(snapshot.text(s, e))
        if fold:
            words = [strip_diacritics(w) for w in words]
        length = e - s + 1
        for w, tf in Counter(words).items():
            t = key(w)
            if not eligible(t):
                continue
            seen.setdefault(t, w)
            weight[t] = weight.get(t, 0.0) + tf / length * sc
    ranked = sorted(weight, key=lambda t: (-weight[t], t))
    kept = []
    for i in range(0, len(ranked), CHUNK):  # the heaviest first, until fb_terms pass
        chunk = [(t, tuple(forms_of(seen[t]))) for t in ranked[i:i + CHUNK]]
        stats = snapshot.statistics(sorted({f for _, fs in chunk for f in fs}))
        for t, fs in chunk:
            df = min(sum(stats.df.get(f, 0) for f in fs), n)
            if fs and df / n <= MAX_DF:
                kept.append((t, fs, weight[t]))
                if len(kept) >= fb_terms:
                    break
        if len(kept) >= fb_terms:
            break
    total = sum(w for _, _, w in kept)
    return [(t, fs, w / total) for t, fs, w in kept] if total > 0 else []


def expand(snapshot, query, model) -> list[tuple[tuple[str, ...], float]]:
    """RM3's query: query [(term, its words, count)] and the relevance model
    [(term, its words, weight)] interpolated: [(words, weight)], the query's terms first
    (in their order), then the model's new ones. The query's counts are scaled over its
    terms some live document holds (df > 0; the others score nothing)."""
    stats = snapshot.statistics(sorted({f for _, fs, _ in query for f in fs}))
    query = [(t, fs, c) for t, fs, c in query if sum(stats.df.get(f, 0) for f in fs) > 0]
    qsum = sum(c for _, _, c in query) or 1.0
    original = ORIGINAL
    out: dict[str, list] = {}
    for t, fs, c in query:
        if t in out:
            out[t][1] += original * c / qsum
        else:
            out[t] = [fs, original * c / qsum]
    for t, fs, w in model:
        if t in out:
            out[t][1] += (1.0 - original) * w
        else:
            out[t] = [fs, (1.0 - original) * w]
    return [(tuple(fs), w) for fs, w in out.values() if w > 0]
