"""Shortest-substring ranking (SSR, DESIGN §5) and free-text search.

A container (a document, by default the `:` list) scores the sum, over the query's covers
(its minimal intervals) lying inside it, of 1 / (K + q - p), K = 42. Results are ordered by
score descending, ties by address. A result's cover is its shortest (first on ties).

`rank` does the work once and keeps the order to `depth`; hits (docno, snippet) are made
only for the ranks someone looks at, so the server's `next` costs a lookup, not a query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from . import kernels, snippets
from .gcl import Evaluator, as_node
from .query import Combine, Term, format as format_query
from .tokenizer import tokens

K = 42.0
DEPTH = 1000


def score(p: int, q: int) -> float:
    """The score of one cover [p, q]."""
    return 1.0 / (K + q - p)


@dataclass(frozen=True)
class Hit:
    rank: int
    docno: str
    score: float
    start: int            # the container interval
    end: int
    cover: tuple[int, int]
    snippet: str | None   # `<cover>`-marked text, or None when snippets were not asked for

    def as_dict(self) -> dict:
        return {"rank": self.rank, "docno": self.docno, "score": self.score,
                "cover": list(self.cover), "snippet": self.snippet}


@dataclass
class Ranking:
    """The ranked containers of one query: arrays to `depth`, hits made on demand."""

    snapshot: object
    query: str                      # canonical text of what was run
    warnings: list[str]
    starts: np.ndarray              # container intervals, in rank order
    ends: np.ndarray
    scores: np.ndarray
    cover_starts: np.ndarray
    cover_ends: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def hit(self, i: int, snippet: bool = True, snapshot=None) -> Hit:
        """The hit at rank i + 1, its document read from `snapshot` (default: the one the
        ranking was made in; a server passes a fresh one so no read stays open)."""
        s, e = int(self.starts[i]), int(self.ends[i])
        p, q = int(self.cover_starts[i]), int(self.cover_ends[i])
        doc = (snapshot or self.snapshot).document_at(s)
        docno = doc.docno if doc is not None else f"@{s}"
        text = None
        if snippet and doc is not None:
            text = snippets.make(doc, p, q).marked()
        return Hit(i + 1, docno, float(self.scores[i]), s, e, (p, q), text)

    def hits(self, k: int | None = None, snippet: bool = True) -> list[Hit]:
        n = len(self) if k is None else min(k, len(self))
        return [self.hit(i, snippet) for i in range(n)]


@dataclass
class Results:
    """What `search` returns: the hits, the query that ran and any repairs made to it."""

    hits: list[Hit]
    query: str
    warnings: list[str] = field(default_factory=list)
    total: int = 0                  # containers with a positive score (up to the depth)

    def __iter__(self):
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i):
        return self.hits[i]


def rank(snapshot, gcl, *, depth: int = DEPTH, container: str = ":", lenient: bool = False,
         evaluator: Evaluator | None = None) -> Ranking:
    """Evaluate `gcl` and rank the containers by SSR, keeping the best `depth`."""
    node, warnings = as_node(gcl, lenient=lenient)
    ev = evaluator or Evaluator(snapshot)
    covers = ev.eval(node)
    cnode, _ = as_node(container)
    boxes = ev.eval(cnode)
    idx, scores, best = kernels.ssr_touched(covers.starts, covers.ends, boxes.starts,
                                            boxes.ends, K)
    order = kernels.top(scores, depth)  # ties: container order, i.e. by address
    b = best[order]
    d = idx[order]
    return Ranking(snapshot, _text(node), warnings, boxes.starts[d], boxes.ends[d],
                   scores[order], covers.starts[b], covers.ends[b])


def _text(node) -> str:
    """Canonical query text, or a repr for a feature name no query text can spell."""
    try:
        return format_query(node)
    except ValueError:
        return repr(node)


def search(snapshot, gcl, *, k: int = 10, container: str = ":", lenient: bool = False,
           snippets: bool = True) -> Results:
    r = rank(snapshot, gcl, depth=max(k, 0), container=container, lenient=lenient)
    return Results(r.hits(k, snippets), r.query, r.warnings, len(r))


# free text ---------------------------------------------------------------------------

MAX_WORDS = 8
MAX_SUBSETS = 12


_stemmer = None


def word_forms(snapshot, word: str, limit: int = 32) -> list[str]:
    """The word and the words of the database that share its English (Snowball) stem, as
    a stemming engine would conflate them: found by a prefix scan of the features."""
    global _stemmer
    if _stemmer is None:
        import snowballstemmer
        _stemmer = snowballstemmer.stemmer("english")
    forms = [word]
    if len(word) > 2 and word.isalpha():
        stem = _stemmer.stemWord(word)
        for f in snapshot.features_with_prefix(stem, 4 * limit):
            if f != word and f.isalpha() and _stemmer.stemWord(f) == stem:
                forms.append(f)
                if len(forms) >= limit:
                    break
    return forms


def text_tiers(snapshot, text: str) -> list[list[tuple[Combine | Term, float]]]:
    """Boolean tiers for free text: all the words together first, then smaller subsets, each
    subset weighted by the rarity (idf) of its words; at most MAX_SUBSETS per tier, the
    rarest first. A word stands for itself or any word of the database with the same
    English stem; words absent from it are dropped."""
    words = list(dict.fromkeys(tokens(text)))
    n_docs = max(snapshot.document_count(), 1)
    weighted = []
    for w in words:
        forms = [f for f in word_forms(snapshot, w) if len(snapshot.intervals(f))]
        if not forms:
            continue
        df = sum(len(snapshot.intervals(f)) for f in forms)
        node = Term((forms[0],)) if len(forms) == 1 else \
            Combine("+", tuple(Term((f,)) for f in forms))
        weighted.append((node, math.log(1 + n_docs / df)))
    weighted.sort(key=lambda x: -x[1])
    weighted = weighted[:MAX_WORDS]
    tiers = []
    for size in range(len(weighted), 0, -1):
        subsets = sorted(combinations(weighted, size), key=lambda s: -sum(w for _, w in s))
        tier = []
        for subset in subsets[:MAX_SUBSETS]:
            terms = tuple(n for n, _ in subset)
            node = terms[0] if len(terms) == 1 else Combine("^", terms)
            tier.append((node, sum(w for _, w in subset)))
        tiers.append(tier)
    return tiers


def search_text(snapshot, text: str, *, k: int = 10, container: str = ":") -> Results:
    """Free-text search: containers matching an earlier tier rank above later ones; within a
    tier, by the sum over its subsets of weight x SSR score."""
    ev = Evaluator(snapshot)
    boxes = ev.eval(as_node(container)[0])
    seen = set()
    hits: list[Hit] = []
    ran = []
    for tier in text_tiers(snapshot, text):
        if len(hits) >= k:
            break
        parts = []  # per subset: touched containers, weighted scores, cover starts and ends
        for node, weight in tier:
            covers = ev.eval(node)
            idx, scores, best = kernels.ssr_touched(covers.starts, covers.ends,
                                                    boxes.starts, boxes.ends, K)
            parts.append((idx, weight * scores, covers.starts[best], covers.ends[best]))
        ran.append(format_query(Combine("+", tuple(n for n, _ in tier)))
                   if len(tier) > 1 else format_query(tier[0][0]))
        idx, contrib, cp, cq = (np.concatenate(x) for x in zip(*parts))
        if not len(idx):
            continue
        # per container: the sum in subset order, and the shortest cover (first on ties)
        boxes_hit, inverse = np.unique(idx, return_inverse=True)
        total = np.zeros(len(boxes_hit))
        np.add.at(total, inverse, contrib)
        pick = np.lexsort((np.arange(len(idx)), cq - cp, inverse))
        first = pick[np.r_[True, inverse[pick][1:] != inverse[pick][:-1]]]
        for j, d in enumerate(boxes_hit.tolist()):
            if d in seen:
                total[j] = 0.0
        for j in kernels.top(total, k - len(hits)).tolist():
            d = int(boxes_hit[j])
            seen.add(d)
            f = first[j]
            ranking = Ranking(snapshot, "", [], boxes.starts[[d]], boxes.ends[[d]],
                              total[[j]], cp[[f]], cq[[f]])
            h = ranking.hit(0)
            hits.append(Hit(len(hits) + 1, h.docno, h.score, h.start, h.end, h.cover,
                            h.snippet))
    return Results(hits, " ; ".join(ran), [], len(hits))
