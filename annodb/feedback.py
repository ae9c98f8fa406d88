"""Pseudo-relevance feedback: RM3 (Abdul-Jaleel et al. 2004; Lavrenko and Croft's
relevance model interpolated with the query), as Anserini's bm25+rm3 runs it, over BM25.

The query's words are ranked by BM25 (bm25.py); the `docs` best containers are taken as
relevant, and the relevance model weighs each term t by

    rm(t) = sum over those containers d of  tf(t, d) / len(d) x bm25(d)

(len(d) the container's tokens, as BM25 counts them), keeping the `terms` heaviest of
the terms of 2 to 20 letters or digits held by at most MAX_DF of the documents (more
common ones are the collection's stop words: Anserini's rule), scaled to sum 1. The new
query is

    weight(t) = original x q(t) / sum q  +  (1 - original) x rm(t)

(q the query's own counts), ranked by BM25 again: the same exact, pruned top k.

The settings (`Feedback`, carried by bm25.Scoring): Anserini's defaults are 10 documents,
10 terms and `original` 0.5, its analyzer leaving the stop words out of the query
(`ANSERINI`; CACM's 64 queries: MAP 0.368 / P@30 0.223, Anserini's published 0.3648 /
0.2224; with the stop words kept, 0.358). annodb's (`Feedback()`) are 10 documents, 20 terms,
`original` 0.9, and free text's Lucene stop words (STOP_WORDS, Anserini's analyzer's) dropped
from the query first (unless it holds nothing else): of the settings tried on the three
development sets of issue 17, the one whose smallest lead over SQLite FTS5's nDCG@10 was
largest (benchmarks/RESULTS.md, where every one tried is listed; tuned on the sets it is
measured on). A GCL query's words are the user's own: none is dropped. Anserini divides tf by
the document's kept terms rather than its length; length is the relevance model's own
estimate (Lavrenko and Croft's maximum likelihood p(t|d)) and lets the terms be taken
from the heaviest down, the df of only those looked up (measured against Anserini's:
benchmarks/RESULTS.md).

A term is what the BM25 it feeds scores: in free text a word with the words sharing its
English stem (ranking.counted_forms; the stem is the term), in a GCL query a word as it is.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .tokenizer import distinct_tokens, strip_diacritics, tokens

MAX_DF = 0.1          # a term in more than this share of the documents is not fed back
MIN_LENGTH, MAX_LENGTH = 2, 20
CHUNK = 32            # candidate terms whose statistics are read at once
# Lucene's English stop words (EnglishAnalyzer's, which Anserini's default analyzer drops)
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the "
    "their then there these they this to was will with".split())


@dataclass(frozen=True)
class Feedback:
    """RM3's settings: how many best containers feed back (`docs`), how many terms they
    add (`terms`), the original query's weight (`original`, 0-1), and whether free text's
    STOP_WORDS are dropped from the query first (`stop_words`)."""

    docs: int = 10
    terms: int = 20
    original: float = 0.9
    stop_words: bool = True


ANSERINI = Feedback(docs=10, terms=10, original=0.5, stop_words=True)


def without_stop_words(words: list[str]) -> list[str]:
    """The words that are not STOP_WORDS, or all of them if nothing else is left."""
    kept = [w for w in words if w not in STOP_WORDS]
    return kept or words


def eligible(term: str) -> bool:
    """Whether a term may be fed back: 2 to 20 characters, letters and digits only."""
    return MIN_LENGTH <= len(term) <= MAX_LENGTH and term.isalnum()


def word_counts(text: str, fold: bool = False):
    """The words of `text` (folded; without diacritics if `fold`) with how many times each
    occurs, in order of first occurrence (as Counter(tokens(text)) gives them): one kernel
    pass numbers the tokens (tokenizer.distinct_tokens), so Python makes each distinct
    word once."""
    names, counts = word_count_arrays(text, fold)
    return zip(names, counts.tolist())


def word_count_arrays(text: str, fold: bool = False) -> tuple[list[str], np.ndarray]:
    """word_counts as (the words, their counts as an int64 array)."""
    try:
        _, kinds, names = distinct_tokens(text)
    except UnicodeEncodeError:  # (a lone surrogate: the regex path reads it)
        words = tokens(text)
        counted = Counter([strip_diacritics(w) for w in words] if fold else words)
        return list(counted), np.array(list(counted.values()), dtype=np.int64)
    counts = np.bincount(kinds, minlength=len(names))
    if not fold:
        return names, counts
    merged: dict[str, int] = {}
    for w, c in zip(names, counts.tolist()):
        w = strip_diacritics(w)
        merged[w] = merged.get(w, 0) + c
    return list(merged), np.array(list(merged.values()), dtype=np.int64)


class _Terms:
    """Words' terms under one key function, memoised for the process: each word's term
    numbered once (-1: a term that may not be fed back). A key is a pure function of the
    word (a stem, or the word itself), and the best containers of one query after another
    share most of their words. Safe across threads: a word not yet numbered is numbered
    under a lock."""

    LIMIT = 1 << 17   # words remembered before the memo starts over (~20 MB)

    def __init__(self, key):
        self.key = key
        self.lock = threading.Lock()
        # (word -> its term's number, term number -> the term, term -> its number),
        # replaced as a whole when it starts over
        self.table: tuple[dict[str, int], list[str], dict[str, int]] = ({}, [], {})

    def numbers(self, words: list[str]) -> tuple[list[int], list[str]]:
        """The words' terms' numbers, and the list of the terms by number."""
        number, names, _ = self.table
        out = [number.get(w, -2) for w in words]
        if -2 not in out:
            return out, names
        with self.lock:
            if len(self.table[0]) > self.LIMIT:     # start over (readers keep theirs)
                self.table = ({}, [], {})
            number, names, of_term = self.table
            for i, w in enumerate(words):
                x = number.get(w)
                if x is None:
                    t = self.key(w)
                    if not eligible(t):
                        x = -1
                    elif (x := of_term.get(t)) is None:
                        x = of_term[t] = len(names)
                        names.append(t)
                    number[w] = x
                out[i] = x
        return out, names


_TERMS: dict = {}     # key function -> its _Terms


def _terms(key) -> _Terms:
    terms = _TERMS.get(key)
    if terms is None:
        if len(_TERMS) > 8:      # (key functions made per call would pile up)
            _TERMS.clear()
        terms = _TERMS.setdefault(key, _Terms(key))
    return terms


def relevance_model(snapshot, starts, ends, scores, key, forms_of, fb_terms: int
                    ) -> list[tuple[str, tuple[str, ...], float]]:
    """The `fb_terms` heaviest terms of the relevance model of the containers (starts, ends)
    with BM25 scores `scores`: [(term, its words, weight)], weights summing to 1, by
    weight descending, ties by term. key(word) is a word's term (a pure function: its
    results are memoised); forms_of(words) maps each word to the words of the database
    its term stands for (the word among them).

    Each term's weight is summed with one bincount over the containers' words, in the
    containers' order and each one's words' order (the order a loop would add them in,
    so the sums are the same to the last bit); the terms are ranked a chunk at a time
    from the heaviest, so only the heaviest few are sorted by Python."""
    n = max(snapshot.document_count(), 1)
    fold = getattr(snapshot, "fold_diacritics", False)
    texts = snapshot.texts(starts.tolist(), ends.tolist())
    words: list[str] = []
    factors = []
    for s, e, sc, text in zip(starts.tolist(), ends.tolist(), scores.tolist(), texts):
        names, counts = word_count_arrays(text, fold)
        words += names
        factors.append(counts / (e - s + 1) * sc)    # tf / length x score, as floats do
    if not words:
        return []
    terms = _terms(key)
    numbered, term_names = terms.numbers(words)
    numbers = np.array(numbered, dtype=np.int64)
    # the query's terms numbered 0.. (by their process-wide numbers; -1 first, if any)
    found, first, ids = np.unique(numbers, return_index=True, return_inverse=True)
    names = [term_names[x] if x >= 0 else "" for x in found.tolist()]
    first_word = [words[i] for i in first.tolist()]    # a term's first word met
    weight = np.bincount(ids, weights=np.concatenate(factors), minlength=len(names))
    left = found >= 0
    kept: list[tuple[str, tuple[str, ...], float]] = []
    while left.any() and len(kept) < fb_terms:  # the heaviest first, until fb_terms pass
        # the next CHUNK heaviest (with every term tied with the last of them), in order
        pool = np.flatnonzero(left)
        w = weight[pool]
        if len(pool) > CHUNK:
            floor = np.partition(w, len(w) - CHUNK)[len(w) - CHUNK]
            pool = pool[w >= floor]
        left[pool] = False
        chunk_ids = [i for _, _, i in sorted((-float(weight[i]), names[i], i)
                                             for i in pool.tolist())]
        forms = forms_of([first_word[i] for i in chunk_ids])
        chunk = [(i, tuple(forms[first_word[i]])) for i in chunk_ids]
        stats = snapshot.statistics(sorted({f for _, fs in chunk for f in fs}))
        for i, fs in chunk:
            df = min(sum(stats.df.get(f, 0) for f in fs), n)
            if fs and df / n <= MAX_DF:
                kept.append((names[i], fs, float(weight[i])))
                if len(kept) >= fb_terms:
                    break
    total = sum(w for _, _, w in kept)
    return [(t, fs, w / total) for t, fs, w in kept] if total > 0 else []


def expand(snapshot, query, model, original: float
           ) -> list[tuple[tuple[str, ...], float]]:
    """RM3's query: query [(term, its words, count)] and the relevance model
    [(term, its words, weight)] interpolated, the query weighing `original`: [(words,
    weight)], the query's terms first (in their order), then the model's new ones. The
    query's counts are scaled over its terms some live document holds (df > 0; the others
    score nothing)."""
    stats = snapshot.statistics(sorted({f for _, fs, _ in query for f in fs}))
    query = [(t, fs, c) for t, fs, c in query if sum(stats.df.get(f, 0) for f in fs) > 0]
    qsum = sum(c for _, _, c in query) or 1.0
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
