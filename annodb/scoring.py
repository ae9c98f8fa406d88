"""One database's ranked reads: what a snapshot (transaction.Snapshot) answers when a
ranker (rankers.py) asks it, below the read interface (reading.ReadView), never calling
back up. Shortest-substring ranking (SSR, ARCHITECTURE.md "Evaluation and ranking"), and
BM25, BM25F and sparse scores (bm25.py) of a GCL query's matching containers; the best
containers by BM25 or sparse scores of words; what a hit shows; the scorer of free text's
SSR tiers; the stems words are conflated by; and the arrays a ranking is kept as.

A container (a document, by default the `:` list) scores by SSR the sum, over the query's
covers (its minimal intervals) lying inside it, of 1 / (K + q - p), K = 42. Results are
ordered by score descending, ties by address. A result's cover is its shortest (first on
ties).

A ranking is made once to `depth`; hits (docno, snippet) are made only for the ranks
someone looks at, so the server's `next` costs a lookup, not a query.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from . import bm25, kernels, snippets
from .gcl import Budget, Evaluator, Region, as_node, list_name
from .intervals import Intervals
from .query import format as format_query


class RankedBy(Protocol):
    """What one database's ranking asks of a ranker (rankers.Ranker): the word scorer it
    ranks matching containers by (None: SSR), and whether SSR's order is fused with it."""

    @property
    def scored(self) -> WordScorer | None: ...
    @property
    def fuses(self) -> bool: ...


class WordScorer(RankedBy, Protocol):
    """What one database's ranking asks of a ranker scoring words (rankers.Scored: BM25,
    BM25F, Sparse)."""

    def resolved(self, snapshot) -> WordScorer: ...
    def query_terms(self, node) -> list: ...
    def statistics_needed(self, words) -> tuple[list[str], list[str]]: ...
    def terms(self, ev: Evaluator, cnode, words, statistics) -> list: ...


K = 42.0
DEPTH = 1000


def score(p: int, q: int) -> float:
    """The score of one cover [p, q]."""
    return 1.0 / (K + q - p)


class Hit(msgspec.Struct, frozen=True):
    """One ranked container (a msgspec Struct: a top 1000 makes a thousand; a frozen
    dataclass took 1.4 us each, a Struct 0.2)."""

    rank: int
    docno: str
    score: float
    start: int            # the container interval
    end: int
    cover: tuple[int, int] | None   # None: the container holds no word of the query
    snippet: str | None   # `<cover>`-marked text (unmarked without a cover), or None when
    #                       snippets were not asked for

    def as_dict(self) -> dict:
        return {"rank": self.rank, "docno": self.docno, "score": self.score,
                "cover": None if self.cover is None else list(self.cover),
                "snippet": self.snippet}


@dataclass
class Ranking:
    """The ranked containers of one query: arrays to `depth`, hits made on demand."""

    snapshot: Any                   # the read it was made in (None once it has ended)
    _query: Any                     # the query text (query), or the node it is made of
    warnings: list[str]
    starts: np.ndarray              # container intervals, in rank order
    ends: np.ndarray
    scores: np.ndarray
    cover_starts: np.ndarray
    cover_ends: np.ndarray
    total: int = 0                  # containers holding a cover (all, not only to depth)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def query(self) -> str:
        """The canonical text of what was run, made from its node when first asked for
        (a server or a search shows it; a ranking alone need not pay ~5 us for it)."""
        if not isinstance(self._query, str):
            self._query = _text(self._query)
        return self._query

    def __reduce__(self):
        """Pickled as one buffer holding its five arrays: a shard's worker sends a ranking
        to depth 1000 for every query, and five arrays pickled one by one took 36 us to
        write and 16 us to read here, one buffer 6 and 2 (benchmarks/RESULTS.md)."""
        cols = np.empty((5, len(self.starts)), np.int64)
        cols[0], cols[1], cols[3], cols[4] = (self.starts, self.ends, self.cover_starts,
                                              self.cover_ends)
        cols[2] = np.asarray(self.scores, np.float64).view(np.int64)
        return _unpacked, (self.snapshot, self.query, self.warnings, self.total,
                           len(self.starts), cols.tobytes())

    def hit(self, i: int, snippet: bool = True, snapshot=None, doc=False) -> Hit:
        """The hit at rank i + 1, its document read from `snapshot` (default: the one the
        ranking was made in; a server passes a fresh one so no read stays open), unless
        given (`doc`: a Document or None)."""
        s, e = int(self.starts[i]), int(self.ends[i])
        p, q = int(self.cover_starts[i]), int(self.cover_ends[i])
        if doc is False:
            doc = (snapshot or self.snapshot).document_at(s)
        return _hit(i + 1, doc, s, e, float(self.scores[i]), p, q, snippet)

    def hits(self, k: int | None = None, snippet: bool = True) -> list[Hit]:
        """The first k hits (all: None), their documents read at once (documents_at; only
        their docnos without snippets, docnos_at)."""
        n = len(self) if k is None else min(k, len(self))
        if not n:
            return []
        starts = self.starts[:n].tolist()
        ends, scores = self.ends[:n].tolist(), self.scores[:n].tolist()
        cps, cqs = self.cover_starts[:n].tolist(), self.cover_ends[:n].tolist()
        if snippet:  # (each number taken out of its array once, not a hit at a time)
            docs = self.snapshot.documents_at(starts)
            return [_hit(i + 1, doc, s, e, sc, p, q, True)
                    for i, (doc, s, e, sc, p, q) in enumerate(zip(docs, starts, ends,
                                                                  scores, cps, cqs))]
        docnos = self.snapshot.docnos_at(starts)
        return [Hit(i + 1, f"@{s}" if d is None else d, sc, s, e,
                    (p, q) if p >= 0 else None, None)
                for i, (d, s, e, sc, p, q) in enumerate(zip(docnos, starts, ends, scores,
                                                            cps, cqs))]


def _hit(rank: int, doc, s: int, e: int, score: float, p: int, q: int, snippet: bool
         ) -> Hit:
    """The hit of a container [s, e] with its score and cover [p, q] (-1: none), named
    by its document (a Document, or None: `@s`), its snippet made when asked for."""
    if doc is None:
        return Hit(rank, f"@{s}", score, s, e, (p, q) if p >= 0 else None, None)
    text = None
    if snippet:
        # (a cover of -1: none to show; the document's opening, nothing marked)
        text = snippets.make(doc, p, q).marked() if p >= 0 else snippets.make(
            doc, s, s).text
    return Hit(rank, doc.docno, score, s, e, (p, q) if p >= 0 else None, text)


def _unpacked(snapshot, query: str, warnings: list, total: int, n: int,
              buffer: bytes) -> Ranking:
    """A Ranking from what its __reduce__ gave (its arrays writable, as made)."""
    cols = np.frombuffer(buffer, np.int64).reshape(5, n).copy()
    return Ranking(snapshot, query, warnings, cols[0], cols[1], cols[2].view(np.float64),
                   cols[3], cols[4], total)


FUSE_K = 60       # reciprocal rank fusion's constant
FUSE_DEPTH = 100  # how deep each ranking is fused


def fuse(a: np.ndarray, b: np.ndarray, depth: int, deep: int = FUSE_DEPTH
         ) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal rank fusion (Cormack, Clarke and Buettcher 2009) of two rankings of
    items (arrays of ids, best first): score(x) = sum of 1 / (FUSE_K + rank) over the
    rankings holding x in their first `deep`; (ids, scores) of the best `depth`, ties by
    the rank in `a`, then in `b`."""
    a, b = a[:deep], b[:deep]
    ids = np.union1d(a, b)
    score = np.zeros(len(ids))
    ra = np.full(len(ids), len(a) + len(b), np.int64)
    rb = np.full(len(ids), len(a) + len(b), np.int64)
    for ranking, r in ((a, ra), (b, rb)):
        at = np.searchsorted(ids, ranking)
        r[at] = np.arange(len(ranking))
        score[at] += 1.0 / (FUSE_K + 1 + np.arange(len(ranking)))
    order = np.lexsort((rb, ra, -score))[:max(depth, 0)]
    return ids[order], score[order]


# one database's rankings ----------------------------------------------------------------

def ranked(snapshot, node, ranker: RankedBy, *, depth: int = DEPTH, container: str = ":",
           evaluator: Evaluator | None = None, budget: Budget | None = None,
           statistics=None, words=None) -> Ranking:
    """The containers of one database that hold a match of `node` (a prepared query),
    ranked to `depth`: by SSR, or by `ranker`'s scores of words (ranker.scored: BM25, BM25F
    or sparse vectors) over the matching containers, or by both fused (ranker.fuses, see
    fuse). Only the containers that can hold a cover are read (found from the query's
    rarest operands, see Evaluator.drivers), and the query is evaluated inside them.
    `statistics` (statistics.Statistics) are the collection's that words are weighed by
    (default: the snapshot's own; a shard of a collection is given the collection's);
    `words` [(forms, weight)] the words scored (default: the query's,
    ranker.query_terms)."""
    ev = evaluator or Evaluator(snapshot, budget)
    ev.check(node)
    cnode = as_node(container)[0]
    covers, boxes = _covers_and_boxes(ev, node, cnode)
    scored = ranker.scored
    if scored is not None:  # the containers holding a match, ranked by another score
        idx, scores, best = kernels.ssr_touched(covers.starts, covers.ends, boxes.starts,
                                                boxes.ends, K)
        matched = Intervals(boxes.starts[idx], boxes.ends[idx], scores)
        scored = scored.resolved(snapshot)
        terms = _terms(snapshot, ev, cnode, scored.query_terms(node) if words is None else
                       words, scored, statistics)
        s, _, sc = bm25.top(terms, depth if not ranker.fuses else len(matched), matched)
        at = np.searchsorted(matched.starts, s)
        if ranker.fuses:  # the whole rankings of the matches
            at, sc = fuse(kernels.top(scores, len(matched)), at, depth, len(matched))
        b, d = best[at], idx[at]
        return Ranking(snapshot, node, [], boxes.starts[d], boxes.ends[d], sc,
                       covers.starts[b], covers.ends[b], len(idx))
    # (ssr_touched then top, ties in container order, i.e. by address, in one call)
    s, e, sc, cp, cq, total = kernels.ssr_top(covers.starts, covers.ends, boxes.starts,
                                              boxes.ends, K, depth)
    return Ranking(snapshot, node, [], s, e, sc, cp, cq, total)


def _covers_and_boxes(ev: Evaluator, node, cnode) -> tuple[Intervals, Intervals]:
    """The query's covers inside containers (and maybe a few more), and the containers
    that hold at least one of them (and maybe a few more).

    A container list named by a feature (`:` or a field) is probed only where the query's
    drivers are. When its intervals never overlap (documents), the query is evaluated
    inside the address ranges of the list's blocks holding a driver — read from the
    list's directory, nothing decoded — and only its covers' containers are looked up
    (for the common shape, Evaluator.covers_in_blocks, every container of the blocks
    holding a cover: a ranking takes those holding one);
    else the containers holding a driver are looked up first, and the query evaluated
    inside them. Another container query is evaluated whole."""
    cnode = ev.folded(cnode)
    name = list_name(cnode)
    if name is None:
        boxes = ev.eval(cnode)
    elif ev.lists.disjoint(name):
        found = ev.covers_in_blocks(node, ev.lists.directory(name))
        if found is not None:  # (the common shape, in one kernel call; the containers:
            covers, blocks = found  # every one of the blocks holding a cover)
            return covers, ev.lists.in_blocks(name, blocks)
        drivers = ev.drivers(node)
        los, his = ev.lists.block_ranges(name, drivers.starts)
        covers = ev.eval_in(node, Region(los, his))
        return covers, ev.lists.containing(name, covers.starts, covers.ends)
    else:
        drivers = ev.drivers(node)
        boxes = ev.lists.containing(name, drivers.starts, drivers.ends)
    if not len(boxes):
        return Intervals.empty(), boxes
    return ev.eval_in(node, Region.around(boxes)), boxes


def _text(node) -> str:
    """Canonical query text, or a repr for a feature name no query text can spell."""
    try:
        return format_query(node)
    except ValueError:
        return repr(node)


def _terms(snapshot, ev: Evaluator, cnode, words, scored: WordScorer, statistics) -> list:
    """The scored terms of `words` (see top_words), weighed by `statistics` (default: the
    snapshot's own, Snapshot.statistics; a shard of a collection is given the
    collection's)."""
    if statistics is None:
        statistics = snapshot.statistics(*scored.statistics_needed(words))
    return scored.terms(ev, cnode, words, statistics)


def top_words(snapshot, words, k: int, *, container: str = ":", scored: WordScorer,
              statistics=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best k containers (starts, ends, scores; by score, ties by address) by the
    scores of `scored` (rankers.BM25 over words [(forms, query count)], rankers.Sparse
    over [(term, query weight)], its field named)."""
    ev = Evaluator(snapshot)
    terms = _terms(snapshot, ev, as_node(container)[0], words, scored, statistics)
    return bm25.top(terms, k)


def word_covers(snapshot, words, s: np.ndarray, e: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """What each container's hit shows (bm25.covers): words, a tuple of forms each."""
    return bm25.covers(Evaluator(snapshot), words, s, e)



def scorer(snapshot, container: str = ":"):
    """A function of a list of query nodes giving, for each, the containers its covers
    touch and their SSR scores: (container starts, ends, scores, best cover starts,
    ends), containers in address order. One Evaluator serves every call (subexpressions
    shared by the tiers are solved once); a sharded collection concatenates its
    shards'."""
    ev = Evaluator(snapshot)
    cnode = as_node(container)[0]

    def score(nodes) -> list[tuple]:
        out = []
        for node in nodes:
            covers, boxes = _covers_and_boxes(ev, node, cnode)
            idx, scores, best = kernels.ssr_touched(covers.starts, covers.ends,
                                                    boxes.starts, boxes.ends, K)
            out.append((boxes.starts[idx], boxes.ends[idx], scores, covers.starts[best],
                        covers.ends[best]))
        return out
    return score



# stems --------------------------------------------------------------------------------

_stemmer = None


@functools.lru_cache(maxsize=1 << 16)
def _stem_word(word: str) -> str:
    global _stemmer
    if _stemmer is None:
        import snowballstemmer
        _stemmer = snowballstemmer.stemmer("english")
    return _stemmer.stemWord(word)


@functools.lru_cache(maxsize=1 << 16)  # (RM3 stems every word of the best containers)
def stem(word: str) -> str:
    """A word's English (Snowball) stem; a word of two letters or fewer, or not all
    letters, is its own."""
    return _stem_word(word) if _stemmed(word) else word


FORMS = 32   # at most this many words of the database share one term


def _shares_stem(f: str, word: str, root: str) -> bool:
    return f != word and f.isalpha() and _stem_word(f) == root


def _stemmed(word: str) -> bool:
    return len(word) > 2 and word.isalpha()


def _forms(word: str, names: list[str], limit: int) -> list[str]:
    """The word, then the names (in name order) that share its stem, `limit` in all."""
    forms = [word]
    if names:
        root = _stem_word(word)
        for f in names:
            if _shares_stem(f, word, root):
                forms.append(f)
                if len(forms) >= limit:
                    break
    return forms


def word_candidates(snapshot, words: list[str], limit: int = FORMS
                    ) -> list[tuple[list[str], dict[str, int]]]:
    """What counted_forms needs of one database, for each word: the features that may
    share its stem (the first 4 * limit its stem begins, in name order) and the list
    counts (list_count) of the word and of those that do share it. A sharded collection
    asks each shard once, and unites and adds up their answers."""
    out = []
    for w in words:
        names, sharing = [], []
        if _stemmed(w):
            root = _stem_word(w)
            names = snapshot.features_with_prefix(root, 4 * limit)
            sharing = [f for f in names if _shares_stem(f, w, root)]
        out.append((names, {f: snapshot.list_count(f) for f in [w] + sharing}))
    return out

