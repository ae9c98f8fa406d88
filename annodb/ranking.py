"""Shortest-substring ranking (SSR, ARCHITECTURE.md "Evaluation and ranking") and free-text
search.

A container (a document, by default the `:` list) scores the sum, over the query's covers
(its minimal intervals) lying inside it, of 1 / (K + q - p), K = 42. Results are ordered by
score descending, ties by address. A result's cover is its shortest (first on ties).

`rank` does the work once and keeps the order to `depth`; hits (docno, snippet) are made
only for the ranks someone looks at, so the server's `next` costs a lookup, not a query.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import combinations

import msgspec
import numpy as np

from . import bm25, feedback, kernels, records, snippets, tokenizer
from .errors import RankingError
from .gcl import Budget, Evaluator, Region, as_node, list_name, prepare
from .lists import Intervals
from .query import Combine, Feature, Term, format as format_query
from .tokenizer import strip_diacritics, tokens

K = 42.0
DEPTH = 1000
RANKS = ("ssr", "bm25", "fused", "sparse", "bm25+rm3")
RM3 = "bm25+rm3"  # BM25, then BM25 of the query expanded by RM3 (feedback.py)
# Free text's default ranker (GCL's is SSR), by measurement (benchmarks/RESULTS.md):
# bm25+rm3 with annodb's feedback settings (feedback.Feedback(): stop words dropped, 20
# terms, the query weighing 0.9) beats SQLite FTS5's nDCG@10 on all three development sets
# (0.550, 0.339, 0.553 against 0.539, 0.334, 0.545); plain BM25 is within 0.005 of FTS5
# everywhere, and every fusion of SSR and BM25 tried fell between the two.
TEXT_RANK = RM3


def check_rank(rank) -> str:
    """The ranker named, or RankingError listing the choices."""
    if rank not in RANKS:
        raise RankingError(f"unknown ranker {rank!r}: choose one of {', '.join(RANKS)}")
    return rank


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
    total: int = 0                  # containers holding a cover (all, not only to depth)

    def __len__(self) -> int:
        return len(self.starts)

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
        docno = doc.docno if doc is not None else f"@{s}"
        text = None
        if snippet and doc is not None:
            text = snippets.make(doc, p, q).marked()
        return Hit(i + 1, docno, float(self.scores[i]), s, e, (p, q), text)

    def hits(self, k: int | None = None, snippet: bool = True) -> list[Hit]:
        """The first k hits (all: None), their documents read at once (documents_at; only
        their docnos without snippets, docnos_at)."""
        n = len(self) if k is None else min(k, len(self))
        if not n:
            return []
        starts = self.starts[:n].tolist()
        if snippet:
            docs = self.snapshot.documents_at(starts)
            return [self.hit(i, snippet, doc=doc) for i, doc in zip(range(n), docs)]
        docnos = self.snapshot.docnos_at(starts)
        ends, scores = self.ends[:n].tolist(), self.scores[:n].tolist()
        cps, cqs = self.cover_starts[:n].tolist(), self.cover_ends[:n].tolist()
        return [Hit(i + 1, f"@{s}" if d is None else d, sc, s, e, (p, q), None)
                for i, (d, s, e, sc, p, q) in enumerate(zip(docnos, starts, ends, scores,
                                                            cps, cqs))]


def _unpacked(snapshot, query: str, warnings: list, total: int, n: int,
              buffer: bytes) -> Ranking:
    """A Ranking from what its __reduce__ gave (its arrays writable, as made)."""
    cols = np.frombuffer(buffer, np.int64).reshape(5, n).copy()
    return Ranking(snapshot, query, warnings, cols[0], cols[1], cols[2].view(np.float64),
                   cols[3], cols[4], total)


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


def rank(snapshot, gcl, *, depth: int = DEPTH, container: str = ":", lenient: bool = False,
         evaluator: Evaluator | None = None, budget: Budget | None = None,
         rank: str = "ssr", scoring: bm25.Scoring | None = None,
         statistics=None, words=None) -> Ranking:
    """Evaluate `gcl` and rank the containers that hold a match, keeping the best `depth`:
    by SSR (`rank="ssr"`), by BM25 over the query's words (`"bm25"`, see bm25.py), by
    BM25 over the words expanded by RM3 (`"bm25+rm3"`, see rm3_rank), by the
    dot product of their sparse vectors with the words' (`"sparse"`), or by both SSR and
    BM25 (`"fused"`, see fuse). Only the containers that can hold a cover are read (found
    from the query's rarest operands, see Evaluator.drivers), and the query is evaluated
    inside them. `statistics` (statistics.Statistics) are the collection's that BM25 and
    sparse scores weigh words by (default: the snapshot's, see top_words); `words`
    [(forms, weight)] the words BM25 scores (default: the query's, query_terms)."""
    how = check_rank(rank)
    node, warnings = prepare(snapshot, gcl, lenient=lenient)
    if how == RM3:
        return rm3_rank(snapshot, node, warnings, depth=depth, container=container,
                        budget=budget, scoring=scoring)
    ev = evaluator or Evaluator(snapshot, budget)
    ev.check(node)
    cnode = as_node(container)[0]
    covers, boxes = _covers_and_boxes(ev, node, cnode)
    idx, scores, best = kernels.ssr_touched(covers.starts, covers.ends, boxes.starts,
                                            boxes.ends, K)
    if how != "ssr":  # the containers holding a match, ranked by another score
        settings = scoring or bm25.Scoring()
        matched = Intervals(boxes.starts[idx], boxes.ends[idx], scores)
        if how == "sparse":
            settings = _sparse(snapshot, settings)
        terms = _terms(snapshot, ev, cnode, query_terms(node, how) if words is None else
                       words, how, settings, statistics)
        s, _, sc = bm25.top(terms, depth if how != "fused" else len(matched), matched)
        at = np.searchsorted(matched.starts, s)
        if how == "fused":  # the whole rankings of the matches
            at, sc = fuse(kernels.top(scores, len(matched)), at, depth, len(matched))
        b, d = best[at], idx[at]
        return Ranking(snapshot, _text(node), warnings, boxes.starts[d], boxes.ends[d], sc,
                       covers.starts[b], covers.ends[b], len(idx))
    order = kernels.top(scores, depth)  # ties: container order, i.e. by address
    b = best[order]
    d = idx[order]
    return Ranking(snapshot, _text(node), warnings, boxes.starts[d], boxes.ends[d],
                   scores[order], covers.starts[b], covers.ends[b], len(idx))


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


def query_terms(node, how: str) -> list:
    """The words a GCL query is scored by when ranked by BM25 (`how` "bm25" or "fused":
    [((word,), count)]) or sparse vectors ([(term, count)]), see top_words."""
    words = bm25.query_words(node)
    return words if how == "sparse" else [((w,), n) for w, n in words]


def rm3_rank(snapshot, node, warnings, *, depth: int, container: str, budget,
             scoring: bm25.Scoring | None) -> Ranking:
    """A GCL query's matches ranked by BM25 over its words expanded by RM3: its best
    matches by BM25 (scoring.feedback.docs of them) give the relevance model (its words as
    they are, as GCL's BM25 scores them; none dropped as a stop word), and the matches are
    ranked again by the expanded words. Through `snapshot`'s own rank, so a sharded
    collection expands once, from its merged ranking, as one database would."""
    settings = scoring or bm25.Scoring()
    fb = settings.feedback
    words = query_terms(node, "bm25")
    first = snapshot.rank(node, depth=fb.docs, container=container, budget=budget,
                          rank="bm25", scoring=settings)
    model = feedback.relevance_model(snapshot, first.starts, first.ends, first.scores,
                                     key=lambda w: w,
                                     forms_of=lambda ws: {w: (w,) for w in ws},
                                     fb_terms=fb.terms)
    expanded = feedback.expand(snapshot, [(f[0], f, n) for f, n in words], model,
                               fb.original)
    out = snapshot.rank(node, depth=depth, container=container, budget=budget, rank="bm25",
                        scoring=settings, words=expanded)
    out.warnings[:0] = warnings
    return out


def rm3_words(snapshot, words, container: str, settings: bm25.Scoring
              ) -> list[tuple[tuple[str, ...], float]]:
    """Free text's words [(forms, count)] (text_words) expanded by RM3 (feedback.py):
    the relevance model of their best containers by BM25 (settings.feedback.docs), a
    term a word with the words sharing its stem (counted_forms)."""
    fb = settings.feedback
    s, e, sc = snapshot.top_words(words, fb.docs, container=container, rank="bm25",
                                  scoring=settings)

    model = feedback.relevance_model(snapshot, s, e, sc, key=stem,
                                     forms_of=lambda ws: counted_forms(snapshot, ws),
                                     fb_terms=fb.terms)
    return feedback.expand(snapshot, [(stem(f[0]), f, n) for f, n in words], model,
                           fb.original)


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


def _sparse(snapshot, settings: bm25.Scoring) -> bm25.Scoring:
    """The settings with their sparse field: the one given, or the database's only one."""
    if settings.sparse is not None:
        return settings
    known = snapshot.sparse_fields()
    if len(known) != 1:
        raise RankingError("no sparse field in this database: ingest records with "
                           "--sparse-field NAME" if not known else
                           f"several sparse fields ({', '.join(known)}): choose one with "
                           "sparse_field=")
    return replace(settings, sparse=known[0])


def _covers_and_boxes(ev: Evaluator, node, cnode) -> tuple[Intervals, Intervals]:
    """The query's covers inside containers (and maybe a few more), and the containers
    that hold at least one of them (and maybe a few more).

    A container list named by a feature (`:` or a field) is probed only where the query's
    drivers are. When its intervals never overlap (documents), the query is evaluated
    inside the address ranges of the list's blocks holding a driver — read from the
    list's directory, nothing decoded — and only its covers' containers are looked up;
    else the containers holding a driver are looked up first, and the query evaluated
    inside them. Another container query is evaluated whole."""
    cnode = ev.folded(cnode)
    name = list_name(cnode)
    if name is None:
        boxes = ev.eval(cnode)
    elif ev.lists.disjoint(name):
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


def search(snapshot, gcl, *, k: int = 10, container: str = ":", lenient: bool = False,
           snippets: bool = True, rank: str = "ssr",
           scoring: bm25.Scoring | None = None) -> Results:
    r = snapshot.rank(gcl, depth=max(k, 0), container=container, lenient=lenient,
                      rank=rank, scoring=scoring)
    return Results(r.hits(k, snippets), r.query, r.warnings, r.total)


# free text ---------------------------------------------------------------------------

MAX_WORDS = 8
MAX_SUBSETS = 12


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
        def look(key):
            [(names, counts)] = word_candidates(snapshot, [key[1]], limit)
            return _counted(key[1], names, counts, limit)
        return dict(zip(words, lists.remembered_many([("forms", w, limit) for w in words],
                                                     look)))
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


def statistics_needed(words, how: str, settings: bm25.Scoring
                      ) -> tuple[list[str], list[str]]:
    """(features, fields) whose collection statistics score `words` (see top_words)."""
    if how == "sparse":
        return sorted({f"{settings.sparse}:{t}" for t, _ in words}), []
    return sorted({f for forms, _ in words for f in forms}), [f.name for f in settings.fields]


def _terms(snapshot, ev: Evaluator, cnode, words, how: str, settings: bm25.Scoring,
           statistics) -> list:
    """The scored terms of `words` (see top_words), weighed by `statistics` (default: the
    snapshot's own, Snapshot.statistics; a shard of a collection is given the
    collection's)."""
    if statistics is None:
        statistics = snapshot.statistics(*statistics_needed(words, how, settings))
    if how == "sparse":
        return bm25.sparse_terms(ev, cnode, settings, words, statistics)
    return bm25.word_terms(ev, cnode, settings, words, statistics)


def top_words(snapshot, words, k: int, *, container: str = ":", rank: str = "bm25",
              scoring: bm25.Scoring | None = None, statistics=None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best k containers (starts, ends, scores; by score, ties by address) by BM25
    over words [(forms, query count)] (`rank="bm25"`), or by sparse vectors over
    [(term, query weight)] (`"sparse"`, scoring.sparse named)."""
    ev = Evaluator(snapshot)
    terms = _terms(snapshot, ev, as_node(container)[0], words, rank,
                   scoring or bm25.Scoring(), statistics)
    return bm25.top(terms, k)


def word_covers(snapshot, words, s: np.ndarray, e: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """What each container's hit shows (bm25.covers): words, a tuple of forms each."""
    return bm25.covers(Evaluator(snapshot), words, s, e)


def _ranked_text(snapshot, text, k: int, container: str, how: str,
                 settings: bm25.Scoring, snippets: bool) -> Results:
    """search_text by BM25 (with RM3 or not), by sparse vectors or fused (see
    search_text)."""
    if how == "sparse":
        settings = _sparse(snapshot, settings)
        if isinstance(text, dict):
            terms = [_sparse_entry(t, w) for t, w in text.items()]
        else:
            terms = [(w, float(n)) for w, n in Counter(tokens(text)).items()]
        shown = [format_query(Feature(f"{settings.sparse}:{t}")) for t, _ in terms]
        words = [(t,) for t, _ in terms]
    else:
        terms = text_words(snapshot, text, how == RM3 and settings.feedback.stop_words)
        words = [forms for forms, _ in terms]
        shown = [_shown(f) for f in words]
        if how == RM3:
            terms = rm3_words(snapshot, terms, container, settings)
    s, e, sc = snapshot.top_words(terms, k if how != "fused" else FUSE_DEPTH,
                                  container=container,
                                  rank="sparse" if how == "sparse" else "bm25",
                                  scoring=settings)
    # (the query: format_query of the words, or of `+` of them, printed word by word)
    query = "" if not shown else shown[0] if len(shown) == 1 else \
        "(+ " + " ".join(shown) + ")"
    if how == "fused":
        ssr = search_text(snapshot, text, k=FUSE_DEPTH, container=container, rank="ssr",
                          snippets=False)
        first = np.array([h.start for h in ssr], dtype=np.int64)
        ends = dict(zip(s.tolist(), e.tolist()))
        ends.update((h.start, h.end) for h in ssr)
        s, sc = fuse(first, s, k)
        e = np.array([ends[x] for x in s.tolist()], dtype=np.int64)
    cs, ce = snapshot.word_covers(words, s, e) if snippets else (s, s)
    hits = Ranking(snapshot, query, [], s, e, sc, cs, ce).hits(k, snippets)
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


def search_text(snapshot, text: str, *, k: int = 10, container: str = ":",
                rank: str = TEXT_RANK, scoring: bm25.Scoring | None = None,
                snippets: bool = True) -> Results:
    """Free-text search. By SSR (`rank="ssr"`): containers matching an earlier tier rank
    above later ones; within a tier, by the sum s over its subsets of weight x SSR score (a
    hit's score is n + s / (1 + s) for a tier of n words together, so scores fall with the
    rank and the whole part says how many of the words matched together). By
    BM25 over the words (each conflated with its forms), by BM25 over them expanded by
    RM3 (pseudo-relevance feedback from their best containers, feedback.py), by the dot
    product of the
    containers' sparse vectors with the words' (1 each, or `text` a {term: weight} dict),
    or both SSR and BM25 fused (see fuse)."""
    if not isinstance(text, str) and check_rank(rank) != "sparse":
        raise RankingError(f"free text is a string (a {{term: weight}} dict is for "
                           f"rank='sparse'), not {type(text).__name__}")
    if check_rank(rank) != "ssr":
        return _ranked_text(snapshot, text, k, container, rank, scoring or bm25.Scoring(),
                            snippets)
    score = snapshot.text_scorer(container)
    seen = set()  # containers ranked already (by start)
    hits: list[Hit] = []
    ran = []
    tiers = text_tiers(snapshot, text)
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
            ranking = Ranking(snapshot, "", [], bs[[f]], be[[f]], total[[j]], cp[[f]],
                              cq[[f]])
            h = ranking.hit(0, snippets)
            hits.append(Hit(len(hits) + 1, h.docno, level + h.score / (1 + h.score),
                            h.start, h.end, h.cover, h.snippet))
    return Results(hits, " ; ".join(ran), [], len(hits))
