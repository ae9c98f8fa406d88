"""The rankers, as objects in one table (ARCHITECTURE.md "Rankers"): each a class owning
its parameters and their validation, looked up by name only at the edges (the API's
`rank=`, the CLI's `--rank`, the server, MCP, Memory.recall's `rank=`) by `make`, which
says which names there are when one is unknown.

    name        class     parameters                          ranks
    ssr         SSR       -                                   covers (ARCHITECTURE.md)
    bm25        BM25      k1, b                               words (bm25.py)
      (fields)  BM25F     k1, b, fields (weight, b each)      words over fields (bm25.py)
    fused       Fused     the BM25 (or BM25F) fused with SSR  both (ranking.fuse)
    sparse      Sparse    field (default: the database's)     sparse vectors (bm25.py)
    bm25+rm3    BM25RM3   the BM25 (or BM25F), feedback       RM3-expanded words
    context     Context   recall.Context                      memories in context
                                                              (recall.py; Memory only)

What a ranker does at each floor is a method: `ranked` (a GCL query's matching containers:
one ranking through the read interface, ReadView.ranked, or RM3's two), `search_text`
(free text). The rankers whose scores a read interface computes itself, SSR and the word
scorers (`Scored`: BM25, BM25F, Sparse), or both fused, answer what it asks of them below
it (`scored`, `fuses`, and the Scored's query_terms, statistics_needed, terms, resolved),
so nothing below the read interface names a ranker.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from . import ranking, recall
from .bm25 import (B, K1, Field, Scoring, checked_feedback, number, query_words, scoring,
                   sparse_terms, word_terms)
from .errors import RankingError
from .feedback import Feedback

if TYPE_CHECKING:
    from .gcl import Budget
    from .reading import ReadView
    from .scoring import Ranking


@dataclass(frozen=True)
class Ranker:
    """A ranker: its `name` where rankers are named, and what it does at each floor."""

    name: ClassVar[str]
    weighs_terms: ClassVar[bool] = False   # free text may be a {term: weight} dict
    fuses: ClassVar[bool] = False          # SSR's ranking fused with `scored`'s

    @property
    def scored(self) -> Scored | None:
        """The word scorer a read interface ranks matching containers by (None: SSR)."""
        return None

    @property
    def settings(self) -> Scoring:
        """bm25.py's settings of this ranker's scores."""
        return _DEFAULT

    def ranked(self, view: ReadView, node, *, depth: int, container: str,
               budget: Budget | None) -> Ranking:
        """The containers matching `node` (a prepared GCL query) ranked to `depth`."""
        return view.ranked(node, self, depth=depth, container=container, budget=budget)

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        """The k best containers for free text."""
        raise NotImplementedError

    @classmethod
    def of(cls, settings: Scoring) -> Ranker:
        """This ranker with its parameters taken from validated Scoring (make)."""
        return cls()


_DEFAULT = Scoring()


@dataclass(frozen=True)
class SSR(Ranker):
    """Shortest-substring ranking: a container scores the sum of 1 / (K + q - p) over the
    query's covers [p, q] inside it (scoring.py); free text by Boolean tiers of its words
    (ranking.search_text_ssr)."""

    name: ClassVar[str] = "ssr"

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        return ranking.search_text_ssr(view, text, k=k, container=container,
                                       snippets=snippets)


@dataclass(frozen=True)
class Scored(Ranker):
    """A ranker scoring words by collection statistics (bm25.py), which a read interface
    computes below itself: BM25, BM25F, sparse vectors."""

    @property
    def scored(self) -> Scored:
        return self

    def resolved(self, view: ReadView) -> Scored:
        """This ranker completed from the database (Sparse: its field)."""
        return self

    def query_terms(self, node) -> list:
        """The words a GCL query is scored by: [((word,), count)] (BM25: each a word's
        forms) or [(term, count)] (sparse)."""
        return [((w,), n) for w, n in query_words(node)]

    def statistics_needed(self, words) -> tuple[list[str], list[str]]:
        """(features, fields) whose collection statistics score `words`."""
        return sorted({f for forms, _ in words for f in forms}), []

    def terms(self, ev, cnode, words, statistics) -> list:
        """bm25.py's scored terms of `words`, weighed by `statistics`."""
        return word_terms(ev, cnode, self.settings, words, statistics)


@dataclass(frozen=True)
class BM25(Scored):
    """BM25 over the query's words (Lucene's, as Anserini: k1 0.9, b 0.4). Free text
    loses Lucene's 33 English stop words first (feedback.STOP_WORDS, unless it holds
    nothing else), as Anserini's analyzer does: a verbose question repeats "of" and "the",
    whose weight a small collection's idf does not make negligible (CACM's 64 queries:
    MAP 0.284 with them, 0.314 without, Anserini 0.312). A GCL query's words are the
    user's own: none is dropped."""

    name: ClassVar[str] = "bm25"
    k1: float = K1
    b: float = B
    _settings: Scoring = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_settings", Scoring(
            number(self.k1, "k1", 0.0, 1e6), number(self.b, "b", 0.0, 1.0),
            self._fields()))

    def _fields(self) -> tuple[Field, ...]:
        return ()

    @property
    def settings(self) -> Scoring:
        return self._settings

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        terms, words, shown = ranking.text_terms(view, text, stop_words=True)
        return ranking.words_text(view, text, terms, words, shown, self, k=k,
                                  container=container, snippets=snippets)

    @classmethod
    def of(cls, settings: Scoring) -> BM25:
        if settings.fields:
            return BM25F(settings.k1, settings.b, settings.fields)
        return BM25(settings.k1, settings.b)


@dataclass(frozen=True)
class BM25F(BM25):
    """BM25F over fields (Robertson and Zaragoza): `fields` as bm25.scoring takes them
    (names, {name: weight or (weight, b)}, or Field), each its weight and b."""

    fields: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        made = scoring(self.k1, self.b, self.fields).fields
        if not made:
            raise RankingError("BM25F needs one field or more (BM25 is without)")
        object.__setattr__(self, "fields", made)
        super().__post_init__()

    def _fields(self) -> tuple[Field, ...]:
        return self.fields

    def statistics_needed(self, words) -> tuple[list[str], list[str]]:
        return super().statistics_needed(words)[0], [f.name for f in self.fields]


@dataclass(frozen=True)
class Sparse(Scored):
    """The dot product of the containers' sparse vectors (the record field `field`,
    ingested with --sparse-field; None: the database's only one) with the query's."""

    name: ClassVar[str] = "sparse"
    weighs_terms: ClassVar[bool] = True
    field: str | None = None

    def __post_init__(self) -> None:
        if self.field is not None and (not isinstance(self.field, str) or not self.field):
            raise RankingError(f"the sparse field is a name, not {self.field!r}")

    @property
    def settings(self) -> Scoring:
        return Scoring(sparse=self.field)

    def resolved(self, view: ReadView) -> Sparse:
        """This ranker with its field: the one given, or the database's only one."""
        if self.field is not None:
            return self
        known = view.sparse_fields()
        if len(known) != 1:
            raise RankingError("no sparse field in this database: ingest records with "
                               "--sparse-field NAME" if not known else
                               f"several sparse fields ({', '.join(known)}): choose one "
                               "with sparse_field=")
        return Sparse(known[0])

    def query_terms(self, node) -> list:
        return query_words(node)

    def statistics_needed(self, words) -> tuple[list[str], list[str]]:
        return sorted({f"{self.field}:{t}" for t, _ in words}), []

    def terms(self, ev, cnode, words, statistics) -> list:
        return sparse_terms(ev, cnode, self.settings, words, statistics)

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        scored = self.resolved(view)
        terms, words, shown = ranking.sparse_text_terms(text, scored.field)
        return ranking.words_text(view, text, terms, words, shown, scored, k=k,
                                  container=container, snippets=snippets)

    @classmethod
    def of(cls, settings: Scoring) -> Sparse:
        return Sparse(settings.sparse)


@dataclass(frozen=True)
class Fused(Ranker):
    """SSR and BM25 (or BM25F) fused by reciprocal rank (ranking.fuse)."""

    name: ClassVar[str] = "fused"
    fuses: ClassVar[bool] = True
    bm25: BM25 = BM25()

    @property
    def scored(self) -> BM25:
        return self.bm25

    @property
    def settings(self) -> Scoring:
        return self.bm25.settings

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        terms, words, shown = ranking.text_terms(view, text)
        return ranking.words_text(view, text, terms, words, shown, self.bm25, k=k,
                                  container=container, snippets=snippets, fused=True)

    @classmethod
    def of(cls, settings: Scoring) -> Fused:
        return Fused(BM25.of(settings))


@dataclass(frozen=True)
class BM25RM3(Ranker):
    """BM25 (or BM25F), then BM25 of the query expanded by RM3 from its best containers
    (feedback.py; `feedback` its settings: feedback.ANSERINI for Anserini's)."""

    name: ClassVar[str] = "bm25+rm3"
    bm25: BM25 = BM25()
    feedback: Feedback = Feedback()

    def __post_init__(self) -> None:
        checked_feedback(self.feedback)

    @property
    def settings(self) -> Scoring:
        return self.bm25.settings

    def ranked(self, view: ReadView, node, *, depth: int, container: str,
               budget: Budget | None) -> Ranking:
        return ranking.rm3_rank(view, node, self, depth=depth, container=container,
                                budget=budget)

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        terms, words, shown = ranking.text_terms(view, text, self.feedback.stop_words)
        terms = ranking.rm3_words(view, terms, container, self)
        return ranking.words_text(view, text, terms, words, shown, self.bm25, k=k,
                                  container=container, snippets=snippets)

    @classmethod
    def of(cls, settings: Scoring) -> BM25RM3:
        return BM25RM3(BM25.of(settings), settings.feedback)


@dataclass(frozen=True)
class Context(Ranker):
    """Memory.recall's free text: BM25 in which a memory borrows the words of its
    neighbours (recall.py; `settings` a recall.Context). One database's: a sharded
    collection has no one address space to find neighbours in, and ranks by the engine's
    free-text default (TEXT_RANK) instead."""

    name: ClassVar[str] = recall.RANK
    params: recall.Context = recall.CONTEXT

    def ranked(self, view: ReadView, node, *, depth: int, container: str,
               budget: Budget | None) -> Ranking:
        raise RankingError(f"unknown ranker {self.name!r}: choose one of {', '.join(RANKS)}")

    def search_text(self, view: ReadView, text, *, k: int, container: str,
                    snippets: bool) -> ranking.Results:
        if getattr(view, "lists", None) is None:   # (not one database's snapshot)
            return TEXT_RANKER.search_text(view, text, k=k, container=container,
                                           snippets=snippets)
        return recall.search(view, text, k=k, container=container, settings=self.params,
                             snippets=snippets)


# the table -----------------------------------------------------------------------------

RANKERS: dict[str, type[Ranker]] = {r.name: r for r in (SSR, BM25, Fused, Sparse, BM25RM3,
                                                         Context)}
RANKS = tuple(name for name in RANKERS if name != Context.name)   # the engine's (GCL, text)
MEMORY_RANKS = tuple(RANKERS)                                       # Memory.recall's
# Free text's default ranker (GCL's is SSR), by measurement (benchmarks/RESULTS.md):
# bm25+rm3 with annodb's feedback settings (feedback.Feedback(): stop words dropped, 20
# terms, the query weighing 0.9) beats SQLite FTS5's nDCG@10 on all three development sets
# (0.550, 0.339, 0.553 against 0.539, 0.334, 0.545); plain BM25 is within 0.005 of FTS5
# everywhere, and every fusion of SSR and BM25 tried fell between the two.
TEXT_RANK = BM25RM3.name
TEXT_RANKER = BM25RM3()
BY_SSR = SSR()   # GCL's default ranker (ReadView.ranked's)


def check_rank(rank, names: tuple[str, ...] = RANKS) -> type[Ranker]:
    """The class of the ranker named (one of `names`), or RankingError listing them."""
    if not isinstance(rank, str) or rank not in names:
        raise RankingError(f"unknown ranker {rank!r}: choose one of {', '.join(names)}")
    return RANKERS[rank]


def make(rank, k1=None, b=None, fields=None, sparse_field=None, feedback=None, *,
         settings: Scoring | None = None, names: tuple[str, ...] = RANKS) -> Ranker:
    """The ranker `rank` names (one of `names`), or `rank` itself when it is a Ranker and
    no parameter is given: with its parameters (k1, b, fields for BM25F, sparse_field,
    feedback: see bm25.scoring, which checks every one given whichever ranker takes it;
    or `settings`, a bm25.Scoring made by bm25.scoring); RankingError saying what is wrong."""
    if isinstance(rank, Ranker) and settings is None and \
            k1 is None and b is None and fields is None and sparse_field is None and \
            feedback is None:
        return rank
    if settings is not None:
        return check_rank(rank, names).of(settings)
    if fields is None and feedback is None and isinstance(rank, str):
        return _made(rank, k1, b, sparse_field, names)   # (each query: made once)
    return check_rank(rank, names).of(scoring(k1, b, fields, sparse_field, feedback))


@functools.lru_cache(maxsize=256, typed=True)   # (typed: k1=True is refused, not 1's)
def _made(rank: str, k1, b, sparse_field, names: tuple[str, ...]) -> Ranker:
    return check_rank(rank, names).of(scoring(k1, b, None, sparse_field, None))
