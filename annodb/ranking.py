"""Ranking: the walk from a query to its hits, one way (ARCHITECTURE.md "The walk of a
query"): the API (Snapshot.search, search_text, rank) names a ranker; rankers.py makes the
object, whose methods call the functions here; these read the database only through the
read interface (reading.ReadView: one database's snapshot or a sharded collection's),
handing it collection statistics as values; scoring.py does one database's work below it.

Free text: SSR ranks Boolean tiers of the words (search_text_ssr); BM25, its RM3 expansion
and sparse vectors rank the words themselves (words_text), conflated with the words of the
database sharing their English stem (counted_forms); fused rankings fuse both (fuse).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from typing import Protocol

import numpy as np

from . import bm25, feedback, kernels, records, tokenizer
from .errors import RankingError
from .feedback import Feedback
from .gcl import Budget, prepare
from .query import Combine, Feature, Term, format as format_query
from .reading import ReadView
from .scoring import DEPTH as DEPTH
from .scoring import FORMS as FORMS
from .scoring import FUSE_DEPTH as FUSE_DEPTH
from .scoring import K as K
from .scoring import Hit as Hit
from .scoring import Ranking as Ranking
from .scoring import _forms
from .scoring import _stemmed as _stemmed
from .scoring import fuse as fuse
from .scoring import score as score
from .scoring import stem as stem
from .scoring import word_candidates as word_candidates
from .tokenizer import strip_diacritics, tokens
from .scoring import WordScorer

MAX_WORDS = 8
MAX_SUBSETS = 12


class TextRanker(Protocol):
    """What the walk asks of a ranker (rankers.Ranker): its ranking of a GCL query's
    matches, its free-text search, and whether free text may be {term: weight}."""

    @property
    def weighs_terms(self) -> bool: ...
    def ranked(self, view: ReadView, node, *, depth: int, container: str,
               budget: Budget | None) -> Ranking: ...
    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> Results: ...


class Expanding(Protocol):
    """What RM3 asks of its ranker (rankers.BM25RM3): its settings and the BM25 (or
    BM25F) it ranks by."""

    @property
    def feedback(self) -> Feedback: ...
    @property
    def bm25(self) -> WordScorer: ...


@dataclass
class Results:
    """What `search` returns: the hits, the query that ran and any repairs made to it."""

    hits: list[Hit]
    query: str
    warnings: list[str] = field(default_factory=list)
    total: int = 0                  # how many containers match (not only the hits)

    def __iter__(self):
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i):
        return self.hits[i]



# GCL queries ---------------------------------------------------------------------------

def rank(view: ReadView, gcl, ranker: TextRanker | None = None, *, depth: int = DEPTH,
         container: str = ":", lenient: bool = False, budget: Budget | None = None
         ) -> Ranking:
    """Evaluate `gcl` and rank the containers that hold a match by `ranker` (a
    rankers.Ranker; None: SSR), keeping the best `depth` (ranker.ranked: one ranking
    through the read interface, ReadView.ranked, or RM3's two, rm3_rank)."""
    node, warnings = prepare(view, gcl, lenient=lenient)
    out = view.ranked(node, depth=depth, container=container, budget=budget) \
        if ranker is None else \
        ranker.ranked(view, node, depth=depth, container=container, budget=budget)
    out.warnings[:0] = warnings
    return out


def search(view: ReadView, gcl, ranker: TextRanker, *, k: int = 10, container: str = ":",
           lenient: bool = False, snippets: bool = True) -> Results:
    """The first k hits of `gcl` ranked by `ranker` (see rank)."""
    r = rank(view, gcl, ranker, depth=max(k, 0), container=container, lenient=lenient)
    return Results(r.hits(k, snippets), r.query, r.warnings, r.total)


def load_kernels(db, container: str = ":") -> None:
    """Rank one query through every GCL kernel in `db` (a database or a collection), so
    that a server's first client does not pay for loading the compiled kernels. Best
    effort: a database that cannot answer it (a container it does not hold) is skipped."""
    try:
        with db.read() as snap:
            snap.rank('(+ (^ "a b" c) (... d e) (<< f (# 3)) (>> : g) (!< h :) (!> : i))',
                      depth=1, container=container)
    except Exception:  # noqa: BLE001 - what fails here fails again for the client, said
        pass
    # (the common shape's kernel is compiled once per width of its words: a query of more
    # words than the one above names loads its width then, at a client's query otherwise)
    none = np.empty(0, np.int64)
    for width in kernels.ALL_OF_WIDTHS:
        kernels.all_of_groups([none] * width, [0] * width, [1] * width, range(width),
                              list(range(width + 1)), [0, width], none)



def _itself(word: str) -> str:
    return word


def _alone(words: list[str]) -> dict[str, tuple[str, ...]]:
    return {w: (w,) for w in words}


def rm3_rank(view: ReadView, node, ranker: Expanding, *, depth: int, container: str,
             budget: Budget | None) -> Ranking:
    """A GCL query's matches ranked by BM25 over its words expanded by RM3: its best
    matches by BM25 (ranker.feedback.docs of them) give the relevance model (its words as
    they are, as GCL's BM25 scores them; none dropped as a stop word), and the matches are
    ranked again by the expanded words. Both rankings through the read interface, so a
    sharded collection expands once, from its merged ranking, as one database would."""
    fb = ranker.feedback
    scored = ranker.bm25
    words = scored.query_terms(node)
    first = view.ranked(node, scored, depth=fb.docs, container=container, budget=budget)
    model = feedback.relevance_model(view, first.starts, first.ends, first.scores,
                                     key=_itself, forms_of=_alone,
                                     fb_terms=fb.terms)
    expanded = feedback.expand(view, [(f[0], f, n) for f, n in words], model,
                               fb.original)
    return view.ranked(node, scored, depth=depth, container=container, budget=budget,
                       words=expanded)


def rm3_words(view: ReadView, words, container: str, ranker: Expanding
              ) -> list[tuple[tuple[str, ...], float]]:
    """Free text's words [(forms, count)] (text_words) expanded by RM3 (feedback.py):
    the relevance model of their best containers by BM25 (ranker.feedback.docs), a
    term a word with the words sharing its stem (counted_forms)."""
    fb = ranker.feedback
    s, e, sc = view.top_words(words, fb.docs, container=container, scored=ranker.bm25)

    model = feedback.relevance_model(view, s, e, sc, key=stem,
                                     forms_of=lambda ws: counted_forms(view, ws),
                                     fb_terms=fb.terms)
    return feedback.expand(view, [(stem(f[0]), f, n) for f, n in words], model,
                           fb.original)


# free text ---------------------------------------------------------------------------

def counted_forms(snapshot, words: list[str], limit: int = FORMS
                  ) -> dict[str, tuple[str, ...]]:
    """Each word's forms that some list holds (list_count > 0): the word and the words of
    the database sharing its English (Snowball) stem, as a stemming engine would conflate
    them, found by a prefix scan of the features (at most `limit`, from the first
    4 * limit names the stem begins). For many words in one call of
    snapshot.word_candidates: on shards in other processes one round trip per shard, not
    two per word and form."""
    words = list(dict.fromkeys(words))
    lists = getattr(snapshot, "lists", None)
    if lists is not None:  # one database: each word's forms kept per committed state
        def look(w):
            [(names, counts)] = word_candidates(snapshot, [w], limit)
            return _counted(w, names, counts, limit)
        return dict(zip(words, lists.remembered_each(f"forms {limit}", words, look)))
    return {w: _counted(w, names, counts, limit)
            for w, (names, counts) in zip(words, snapshot.word_candidates(words, limit))}


def _counted(word: str, names: list[str], counts: dict[str, int], limit: int
             ) -> tuple[str, ...]:
    return tuple(f for f in _forms(word, names, limit) if counts.get(f, 0))


def text_tiers(snapshot, text: str) -> list[list[tuple[Combine | Term, float]]]:
    """Boolean tiers for free text: all the words together first, then smaller subsets, each
    subset weighted by the rarity (idf) of its words; at most MAX_SUBSETS per tier, the
    rarest first. A word stands for itself or any word of the database with the same
    English stem; words absent from it are dropped."""
    words = tokens(text)
    if getattr(snapshot, "fold_diacritics", False):   # stored without diacritics
        words = list(map(strip_diacritics, words))
    words = list(dict.fromkeys(words))
    all_forms = counted_forms(snapshot, words)
    stats = snapshot.statistics(sorted({f for fs in all_forms.values() for f in fs}))
    n_docs = max(stats.documents, 1)
    weighted = []
    for w in words:
        forms = [f for f in all_forms[w] if stats.postings.get(f)]
        if not forms:
            continue
        df = sum(stats.postings[f] for f in forms)
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



def text_words(snapshot, text: str, stop_words: bool = False
               ) -> list[tuple[tuple[str, ...], int]]:
    """The words of free text as BM25 scores them: (the word and the words of the database
    sharing its stem, how often the text has it), in order; words absent from it dropped,
    and with `stop_words`, feedback.STOP_WORDS too (unless nothing else is left)."""
    words = tokens(text)
    if stop_words:
        words = feedback.without_stop_words(words)
    if getattr(snapshot, "fold_diacritics", False):   # stored without diacritics
        words = list(map(strip_diacritics, words))
    counted = Counter(words)
    forms = counted_forms(snapshot, list(counted))
    return [(forms[w], n) for w, n in counted.items() if forms[w]]



def text_terms(view: ReadView, text: str, stop_words: bool = False):
    """Free text as BM25 scores it: (its words [(forms, count)], text_words; each word's
    forms; each word as query text)."""
    terms = text_words(view, text, stop_words)
    words = [forms for forms, _ in terms]
    return terms, words, [_shown(f) for f in words]


def sparse_text_terms(text, field: str | None):
    """Free text (or a {term: weight} dict) as sparse vectors score it: ([(term,
    weight)], each term as a one-form word, each as query text)."""
    if isinstance(text, dict):
        terms = [_sparse_entry(t, w) for t, w in text.items()]
    else:
        terms = [(w, float(n)) for w, n in Counter(tokens(text)).items()]
    shown = [format_query(Feature(f"{field}:{t}")) for t, _ in terms]
    return terms, [(t,) for t, _ in terms], shown


def words_text(view: ReadView, text, terms, words, shown, scored: WordScorer, *, k: int,
               container: str, snippets: bool, fused: bool = False) -> Results:
    """search_text by the scores of `scored` (rankers.BM25 or Sparse) of `terms`, or
    (`fused`) those fused with SSR's ranking of the text (see fuse). `words` are what a
    hit's cover shows (word_covers), `shown` the query text of each."""
    s, e, sc = view.top_words(terms, k if not fused else FUSE_DEPTH, container=container,
                              scored=scored)
    # (the query: format_query of the words, or of `+` of them, printed word by word)
    query = "" if not shown else shown[0] if len(shown) == 1 else \
        "(+ " + " ".join(shown) + ")"
    if fused:
        ssr = search_text_ssr(view, text, k=FUSE_DEPTH, container=container,
                              snippets=False)
        first = np.array([h.start for h in ssr], dtype=np.int64)
        ends = dict(zip(s.tolist(), e.tolist()))
        ends.update((h.start, h.end) for h in ssr)
        s, sc = fuse(first, s, k)
        e = np.array([ends[x] for x in s.tolist()], dtype=np.int64)
    cs, ce = view.word_covers(words, s, e) if snippets else (s, s)
    hits = Ranking(view, query, [], s, e, sc, cs, ce).hits(k, snippets)
    return Results(hits, query, [], len(hits))


@functools.lru_cache(maxsize=1 << 16)
def _shown(forms: tuple[str, ...]) -> str:
    """The query text of a word and its forms: the term, or `+` of its forms."""
    return format_query(Term(forms) if len(forms) == 1 else
                        Combine("+", tuple(Term((x,)) for x in forms)))


def _sparse_entry(term, weight) -> tuple[str, float]:
    """(the term folded, its weight) of a query's {term: weight}, or RankingError."""
    weight = bm25.number(weight, f"the weight of {term!r}", 0.0, records.MAX_WEIGHT)
    problem = records.sparse_problem(str(term), weight)
    if problem is not None:
        raise RankingError(f"a sparse query's {problem}")
    return tokenizer.fold(str(term)), weight


def search_text(view: ReadView, text, ranker: TextRanker, *, k: int = 10,
                container: str = ":", snippets: bool = True) -> Results:
    """Free-text search by `ranker` (its search_text): by SSR (search_text_ssr), by BM25
    over the words (each conflated with its forms), by BM25 over them expanded by RM3
    (pseudo-relevance feedback from their best containers, feedback.py), by the dot
    product of the containers' sparse vectors with the words' (1 each, or `text` a
    {term: weight} dict), or both SSR and BM25 fused (see fuse)."""
    if not isinstance(text, str) and not ranker.weighs_terms:
        raise RankingError(f"free text is a string (a {{term: weight}} dict is for "
                           f"rank='sparse'), not {type(text).__name__}")
    return ranker.search_text(view, text, k=k, container=container, snippets=snippets)


def search_text_ssr(view: ReadView, text: str, *, k: int = 10, container: str = ":",
                    snippets: bool = True) -> Results:
    """Free text by SSR: containers matching an earlier tier (text_tiers) rank above later
    ones; within a tier, by the sum s over its subsets of weight x SSR score (a hit's
    score is n + s / (1 + s) for a tier of n words together, so scores fall with the rank
    and the whole part says how many of the words matched together)."""
    score = view.text_scorer(container)
    seen: set[int] = set()  # containers ranked already (by start)
    hits: list[Hit] = []
    ran: list[str] = []
    tiers = text_tiers(view, text)
    for level, tier in zip(range(len(tiers), 0, -1), tiers):
        if len(hits) >= k:
            break
        # per subset: touched containers, weighted scores, cover starts and ends
        parts = [(bs, be, weight * sc, cp, cq) for (bs, be, sc, cp, cq), (_, weight)
                 in zip(score([node for node, _ in tier]), tier)]
        ran.append(format_query(Combine("+", tuple(n for n, _ in tier)))
                   if len(tier) > 1 else format_query(tier[0][0]))
        bs, be, contrib, cp, cq = (np.concatenate(x) for x in zip(*parts))
        if not len(bs):
            continue
        # per container: the sum in subset order, and the shortest cover (first on ties)
        boxes_hit, inverse = np.unique(bs, return_inverse=True)
        total = np.zeros(len(boxes_hit))
        np.add.at(total, inverse, contrib)
        pick = np.lexsort((np.arange(len(bs)), cq - cp, inverse))
        first = pick[np.r_[True, inverse[pick][1:] != inverse[pick][:-1]]]
        for j, d in enumerate(boxes_hit.tolist()):
            if d in seen:
                total[j] = 0.0
        for j in kernels.top(total, k - len(hits)).tolist():
            seen.add(int(boxes_hit[j]))
            f = first[j]
            ranking = Ranking(view, "", [], bs[[f]], be[[f]], total[[j]], cp[[f]],
                              cq[[f]])
            h = ranking.hit(0, snippets)
            hits.append(Hit(len(hits) + 1, h.docno, level + h.score / (1 + h.score),
                            h.start, h.end, h.cover, h.snippet))
    return Results(hits, " ; ".join(ran), [], len(hits))
