"""BM25, BM25F and sparse-vector (impact) scores over the annotative index, and their
exact top-k under dynamic pruning (ARCHITECTURE.md "Evaluation and ranking").

Everything comes from what the index holds: a term's frequency in a container is the
number of its postings inside the container's interval, a container's length is its
interval's (q - p + 1: its tokens), and the collection's statistics are stored (storage's
counts hold each word's document frequency, its meta the documents, tokens and fields).

**BM25** is Lucene's (as Anserini and Pyserini use it, and bm25s with method="lucene"):

    idf(t)    = ln(1 + (N - df + 0.5) / (df + 0.5))
    w(t, d)   = idf(t) * tf / (tf + k1 * (1 - b + b * len(d) / avglen))
    score(d)  = sum over the query's distinct terms t of qtf(t) * w(t, d)

N is the live documents, avglen their tokens / N, k1 = 0.9 and b = 0.4 by default
(Anserini's). A term that stands for several words (a word and the words sharing its
Snowball stem, conflated as a stemming index would) has the sum of their tf, and the sum
of their df (at most N: an upper bound of its documents, exact when the forms do not
share one). The containers ranked are the documents by default; any other container
(a filter such as `(>> : user:alice)`, or fields) is scored with its own tf and length and
the collection's df, N and avglen. An erase inside a document leaves its length as it was.

**BM25F** (Robertson and Zaragoza), over fields f with weights w_f and b_f:

    tf~(t, d) = sum_f w_f * tf_f / (1 - b_f + b_f * len_f(d) / avglen_f)
    w(t, d)   = idf(t) * tf~ / (k1 + tf~)

tf_f counts the postings inside d's f-intervals, len_f(d) their tokens, avglen_f the
tokens of f over the documents having f (meta "fields"); the idf is the document's.

**Sparse vectors** (SPLADE or any learned-sparse encoder): a record's `{term: weight}`
field F is stored as the features `F:term` over the record with the weight as value;
score(d) = sum over the query's terms of q(t) * v(t, d), v the values of `F:t` inside d.
Stored weights are >= 0 (ingest refuses others).

**Top-k** is MaxScore (Turtle and Flood 1995) over whole terms: each term's contribution
is bounded (idf x qtf for BM25 and BM25F, as tf grows; q(t) x the list's stored value
bound for sparse), terms are taken from the highest bound down, and once the bounds of the
terms left sum below the k-th best score so far, a container holding none of the terms
read can no longer enter the top k: those terms are read only inside the candidates left,
and every candidate whose score so far plus the bounds left falls below the k-th best is
dropped before each. Partial scores only grow, so the k-th best partial score bounds the
final k-th best from below and nothing that belongs in the top k is dropped: the result
is the exhaustive one, scores added in the same order (`prune=False` computes that).
Before a long list would be read whole, the k best candidates' scores are completed
(each list left probed in the few blocks holding them): their least is a floor under the
final k-th best too, and often ends the reading of whole lists (a question's "the").
When many documents are left to read, the terms left are bounded per cell of the address
space as well (each term's largest contribution among its documents starting in the cell,
kept beside its documents): the whole lists' reading ends once no cell's bound reaches the
k-th best, and a candidate whose score so far + its cell's bound cannot reach it is left
out, as it is read or before a term is looked up in it (RM3's expanded queries, of many
words of flat weights, are where the bounds summed whole stay high longest).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np

from . import kernels
from .errors import RankingError
from .feedback import Feedback
from .gcl import Evaluator, Region, list_name
from .intervals import EMPTY_F, EMPTY_I, Intervals
from .lists import SMALL_LIST, _distinct
from .query import Combine, Compare, Link, Node, Term
from .records import MAX_WEIGHT

K1 = 0.9
B = 0.4
SLACK = 1e-9  # relative margin of the pruning comparisons (sums added in another order)


# scoring --------------------------------------------------------------------------------

def idf(df, n):
    """Lucene's idf of a term held by df of n documents (always > 0)."""
    return np.log(1.0 + (n - df + 0.5) / (df + 0.5))


@functools.lru_cache(maxsize=1 << 16)
def _idf(df: int, n: int) -> float:
    """idf(df, n) of two integers, as a float (each query's words come again)."""
    return float(idf(df, n))


def saturation(tf, length, avglen, k1: float, b: float):
    """Lucene's BM25 term-frequency part: tf / (tf + k1 * (1 - b + b * length / avglen))."""
    return tf / (tf + k1 * (1.0 - b + b * length / avglen))


# settings -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    """A field BM25F scores: its short name (`title:`), weight and length normalisation."""

    name: str
    weight: float = 1.0
    b: float = B


@dataclass(frozen=True)
class Scoring:
    """BM25's parameters, BM25F's fields (empty: plain BM25), the sparse field and RM3's
    settings (feedback.Feedback: for rank "bm25+rm3")."""

    k1: float = K1
    b: float = B
    fields: tuple[Field, ...] = ()
    sparse: str | None = None
    feedback: Feedback = Feedback()


def number(value, name: str, lo: float, hi: float = math.inf) -> float:
    """value as a float in [lo, hi], or RankingError naming it."""
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if isinstance(value, bool):
        raise RankingError(f"{name} must be a number, not {shown}")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):   # (an int past float's range)
        if not isinstance(value, int) or isinstance(value, bool):
            raise RankingError(f"{name} must be a number, not {shown}") from None
        x = math.nan
    if not (lo <= x <= hi) or math.isnan(x):
        where = f"between {lo:g} and {hi:g}" if hi < math.inf else f">= {lo:g}"
        raise RankingError(f"{name} must be {where}, not {shown}")
    return x


def field_name(name: str) -> str:
    """A field's short-name feature: `title` and `title:` are `title:`."""
    if not isinstance(name, str) or not name.strip(":"):
        raise RankingError(f"a field is named by its short name, like title or title:, not "
                           f"{name!r}")
    return name if name.endswith(":") else name + ":"


def scoring(k1=None, b=None, fields=None, sparse=None, feedback=None) -> Scoring:
    """Validated Scoring. fields: names (weight 1), {name: weight}, {name: (weight, b)} or
    Field objects; feedback: a feedback.Feedback (RM3's settings; default Feedback());
    RankingError says what is wrong."""
    k1 = K1 if k1 is None else number(k1, "k1", 0.0, 1e6)
    b = B if b is None else number(b, "b", 0.0, 1.0)
    made = []
    if fields:
        items: Iterable[tuple[Any, Any]]
        if isinstance(fields, dict):
            items = fields.items()
        elif isinstance(fields, (list, tuple)):
            items = [(f, None) for f in fields]
        else:
            raise RankingError(f"fields must be a list of names or a dict of weights, not "
                               f"{type(fields).__name__}")
        for name, spec in items:
            if isinstance(name, Field):
                spec = (name.weight, name.b)
                name = name.name
            weight, fb = 1.0, b
            if isinstance(spec, (tuple, list)):
                if len(spec) != 2:
                    raise RankingError(f"field {name!r}: give a weight or (weight, b), not "
                                       f"{spec!r}")
                weight, fb = spec
            elif spec is not None:
                weight = spec
            made.append(Field(field_name(name), number(weight, f"the weight of {name!r}",
                                                        1e-9, 1e9),
                              number(fb, f"b of {name!r}", 0.0, 1.0)))
        names = [f.name for f in made]
        if len(set(names)) != len(names):
            raise RankingError(f"a field is given twice: {names}")
    if sparse is not None and (not isinstance(sparse, str) or not sparse):
        raise RankingError(f"the sparse field is a name, not {sparse!r}")
    return Scoring(k1, b, tuple(made), sparse, checked_feedback(feedback))


def checked_feedback(fb) -> Feedback:
    """fb (None: Feedback()) if its settings are in range, else RankingError."""
    if fb is None:
        return Feedback()
    if not isinstance(fb, Feedback):
        raise RankingError(f"feedback is an annodb.feedback.Feedback, not {type(fb).__name__}")
    for name, lo, hi in (("docs", 1, 10_000), ("terms", 0, 10_000)):
        x = getattr(fb, name)
        if not isinstance(x, int) or isinstance(x, bool) or not lo <= x <= hi:
            raise RankingError(f"feedback {name} must be a whole number from {lo} to {hi}, "
                               f"not {x!r}")
    number(fb.original, "feedback original (the query's weight)", 0.0, 1.0)
    if not isinstance(fb.stop_words, bool):
        raise RankingError(f"feedback stop_words is True or False, not {fb.stop_words!r}")
    return fb


# queries -------------------------------------------------------------------------------

def query_words(node: Node) -> list[tuple[str, int]]:
    """The words a GCL query scores, with how often it names each: the words of its terms
    and phrases, except those only a negation names (the B of `(!< A B)`, `(!> A B)`)."""
    counts: dict[str, int] = {}
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, Term):
            for t in n.tokens:
                counts[t] = counts.get(t, 0) + 1
        elif isinstance(n, Combine):
            todo.extend(n.args[:1] if n.op in ("!<", "!>") else n.args)
        elif isinstance(n, (Link, Compare)):
            todo.append(n.arg)
    return sorted(counts.items())


# containers ----------------------------------------------------------------------------

class _Boxes:
    """The containers ranked: a feature's list (documents: `:`) probed by blocks, or the
    intervals of any other GCL expression, evaluated whole."""

    def __init__(self, ev: Evaluator, cnode: Node):
        self.ev = ev
        self.name = list_name(cnode)
        self.node = cnode

    def at_hand(self) -> tuple[Intervals, bool] | None:
        """All the containers when they are at hand: the list decoded already or about a
        block long, or the expression (evaluated whole, as holding does); and whether no
        two of them overlap. Else None."""
        if self.name is not None:
            found = self.ev.lists._whole_if_cheap(self.name)
            return None if found is None else (found, self.ev.lists.disjoint(self.name))
        found = self.ev.eval(self.node)
        s, e = found.starts, found.ends
        return found, len(s) < 2 or bool((s[1:] > e[:-1]).all())

    def holding(self, s: np.ndarray, e: np.ndarray) -> Intervals:
        """The containers holding one of the sorted intervals (s, e)."""
        if self.name is not None:
            return self.ev.lists.containing(self.name, s, e)
        boxes = self.ev.eval(self.node)
        return boxes.take(kernels.containing(boxes.starts, boxes.ends, s, e))


def _inside_counts(s, e, los, his):
    """For each range [los[r], his[r]] (a GC-list), how many of the intervals (s, e), a
    GC-list, lie inside it: the index range [first start >= lo, last end <= hi]."""
    a = np.searchsorted(s, los, side="left")
    z = np.searchsorted(e, his, side="right")
    return a, np.maximum(z, a)


def _sums_inside(s, e, values, los, his):
    """The sum of the values of the intervals inside each range (see _inside_counts), in
    list order: each range's own, not a difference of prefix sums (whose last bits depend
    on every value before the range: on other containers, so a shard holding some of the
    documents would score apart from one database holding them all)."""
    a, z = _inside_counts(s, e, los, his)
    n = z - a
    at = np.arange(int(n.sum())) + np.repeat(a - (np.cumsum(n) - n), n)
    return np.bincount(np.repeat(np.arange(len(los)), n),
                       weights=np.asarray(values, dtype=np.float64)[at], minlength=len(los))


# terms ---------------------------------------------------------------------------------

class _Term:
    """One query term: `bound` bounds its contribution to any container; `everywhere()`
    gives the containers holding it with its contributions, `at(s, e, region)` its
    contributions to the given containers (zeros where it is absent); `size()` the
    intervals everywhere() reads."""

    bound: float
    boxes: _Boxes

    def size(self) -> int:
        raise NotImplementedError

    def everywhere(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def at(self, s: np.ndarray, e: np.ndarray, region: Region) -> np.ndarray:
        raise NotImplementedError


class _Words(_Term):
    """A word (or a word and its forms, conflated) scored by BM25, or BM25F over fields."""

    def __init__(self, ev, boxes, forms, weight, term_idf, stats, decoded=None, stored=0,
                 docs=None, docs_key=None, docs_lists=()):
        self.ev, self.boxes, self.forms = ev, boxes, forms
        self.factor = weight * term_idf
        self.bound = self.factor
        self.stats = stats
        self.decoded = decoded  # each form's whole list if decoded when made, or None
        self.stored = stored    # the postings its lists hold as stored
        self.docs = docs        # its documents (see documents) if kept already
        self.docs_key = docs_key  # the key they are kept under (Lists.held, derived)
        self.docs_lists = docs_lists  # (the kind, the lists' ids and keys: Lists.held)
        self.tried = False      # documents() asked already

    def size(self) -> int:
        lists = self.ev.lists  # (nothing erased: the count of each form is as stored)
        return self.stored if lists.intact() else sum(lists.count(f) for f in self.forms)

    def at_hand(self) -> list[np.ndarray] | None:
        """Each form's postings when every form's list is decoded already or about a block
        long (read whole then, as everywhere() would), else None; in
        kernels.FORMS_PER_CALL arrays at most."""
        lists = self.ev.lists
        out = []
        for f, found in zip(self.forms, self.decoded or [None] * len(self.forms)):
            if found is None:
                found = lists.cached(f)
            if found is None:
                if lists.count(f) > SMALL_LIST:
                    return None
                found = self.ev._whole(f)
            out.append(found.starts)
        return _few(out, kernels.FORMS_PER_CALL)

    def documents(self, box_s: np.ndarray, box_e: np.ndarray) -> list[np.ndarray] | None:
        """The term's documents as kernels.bm25_steps takes them (`views`: the starts of
        the documents (box_s, box_e: the whole list `:`) holding one of its postings, and
        each one's length and tf; kernels.term_documents), when every form's list is at
        hand (see at_hand) and they hold DOCUMENTS_MOST postings or fewer: made once for
        the lists as they are, kept for the snapshots that see them so (Lists.derived).
        Else None."""
        if self.docs is not None or self.tried or not self.docs_key or \
                self.stored > DOCUMENTS_MOST:
            return self.docs
        self.tried = True   # (asked once a query: see make)

        def make():
            forms = self.at_hand()
            if forms is None:   # read whole once, when kept without dropping others
                # (else a set of words a little larger than the budget would each be read
                # whole again at every query: as they were before, they go by postings),
                # for words asked for before (a query of words seen once, as most are in
                # a stream of new queries, only probes their lists, as before)
                if not self.docs_lists or not self.ev.lists.derived_room(
                        16 * self.stored + 200, self.docs_lists):
                    return None
                forms = _few([self.ev._whole(f).starts for f in self.forms],
                             kernels.FORMS_PER_CALL)
            found = kernels.term_documents(forms, box_s, box_e,
                                           *_starts_table(self.ev, forms, box_s))
            return None if found is None else (list(found), 16 * len(found[0]) + 200)

        def extend(old, low, erased):
            found = self._documents_since(old, low, erased, box_s, box_e)
            return None if found is None else \
                (found, found.room.nbytes if isinstance(found, _Documents)
                 else 16 * len(found[0]) + 200)
        self.docs = self.ev.lists.derived(self.docs_key, make, self.docs_lists, extend)
        return self.docs

    def cell_bounds(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The term's bounds per cell of 2**CELL_SHIFT addresses (_Bounds): the cells
        holding the start of one of its documents (see documents), the largest saturation
        of its documents in each and what to scale them by (its factor, and the average
        length's growth below), when its documents are kept already; else None. The largest
        saturations are kept beside the documents (Lists.derived) for the lists as they
        are and BM25's k1 and b, at the average length when made: at another one they are
        scaled by how much it grew (tf / (tf + k1 (1 - b + b len / a)) grows by at most
        a / a0 from a0 to a > a0, and only falls as a falls), so a commit does not make
        them anew; after one that adds documents only the cells from the first changed
        are counted again."""
        docs = self.docs   # (kept already: none is made for the bounds alone)
        if docs is None or not self.docs_lists:
            return None
        st = self.stats
        k1, b, avglen = st.scoring.k1, st.scoring.b, float(st.avglen)
        kind = f"cells {CELL_SHIFT} {k1!r} {b!r}"
        vs, vp = docs[0], docs[1]

        def make():
            cells, most = kernels.term_cells(vs, vp, CELL_SHIFT, k1, b, avglen)
            return _Cells.of(cells, most, avglen)

        def extend(old: _Cells, low: int | None, erased):
            if erased is not None:
                return None   # (made anew)
            if low is None:
                return old, old.nbytes
            j = int(np.searchsorted(vs, low, side="right")) - 1
            first = min(int(vs[j]) if j >= 0 else 0, low) >> CELL_SHIFT
            # (the documents starting before the one holding low are as they were)
            a = int(np.searchsorted(vs, first << CELL_SHIFT, side="left"))
            cells, most = kernels.term_cells(vs[a:], vp[a:], CELL_SHIFT, k1, b,
                                             old.avglen)
            tail = _Cells.of(cells, most, old.avglen)[0]
            keep = int(np.searchsorted(old.cells, first, side="left"))
            made = _Cells(np.concatenate((old.cells[:keep], tail.cells)),
                          np.concatenate((old.most[:keep], tail.most)), old.avglen)
            return made, made.nbytes
        found = self.ev.lists.derived(f"{self.docs_key} {kind}", make,
                                      (kind,) + tuple(self.docs_lists[1:]), extend)
        if found is None:
            return None
        grown = avglen / found.avglen
        return found.cells, found.most, \
            self.factor * (grown if grown > 1.0 else 1.0) * (1.0 + 1e-12)

    def _documents_since(self, old: list[np.ndarray], low: int | None, erased,
                         box_s: np.ndarray, box_e: np.ndarray) -> list[np.ndarray] | None:
        """The term's documents (see documents) from those of an earlier version of its
        lists (old), where nothing changed before start `low` (None: nothing changed;
        erased: ranges were erased since, as well, their version then; else None): the
        documents starting before the one holding low are kept, the rest made from the
        postings from there on, and those touching a range erased since counted again.
        The same arrays as made from scratch (box_s, box_e: the documents' list as it is
        now). None when they do not pack.
        What only appends is written in place after the earlier version's documents when
        they are the newest (_DocumentsRoom), else copied into a room of their own."""
        vs, vp = old
        if low is None:
            return old if erased is None else self._recounted(vs, vp, box_s, erased)
        lists = self.ev.lists
        j = int(np.searchsorted(box_s, low, side="right")) - 1
        since = int(box_s[j]) if j >= 0 and box_e[j] >= low else low  # (its document)
        cut = int(np.searchsorted(vs, since, side="left"))
        if cut < len(vs):
            since = min(since, int(vs[cut]))
        forms = _few([lists.since(f, since).starts for f in self.forms],
                     kernels.FORMS_PER_CALL)
        self.ev.charge(sum(len(f) for f in forms))
        found = kernels.term_documents(forms, box_s, box_e,
                                       *_starts_table(self.ev, forms, box_s))
        if found is None:
            return None
        if erased is not None:
            return self._recounted(np.concatenate((vs[:cut], found[0])),
                                   np.concatenate((vp[:cut], found[1])), box_s, erased)
        room = getattr(old, "room", None)
        grown = None if room is None or cut < len(vs) else room.append(len(vs), *found)
        return grown or _DocumentsRoom([(vs[:cut], vp[:cut]), found]).view()

    def _recounted(self, vs: np.ndarray, vp: np.ndarray, box_s: np.ndarray, version
                   ) -> list[np.ndarray]:
        """The documents (vs, vp; not changed) with those touching a range erased since
        erased version `version` counted again (dropped when they hold none of the term
        or are erased)."""
        lists = self.ev.lists
        es, ee = lists.erased_since(version)
        ends = vs + (vp >> 32) - 1
        a = np.searchsorted(ends, es, side="left")   # the documents touching each range
        z = np.searchsorted(vs, ee, side="right")
        n = np.maximum(z - a, 0)
        if not n.sum():
            return [vs, vp]
        at = _distinct(np.sort(np.repeat(a - (np.cumsum(n) - n), n)
                               + np.arange(int(n.sum()))))
        s, e = vs[at], ends[at]
        region = _region(s, e)
        tf = np.zeros(len(at), np.int64)
        for f in self.forms:
            points = lists.inside(f, region.los, region.his).starts
            self.ev.charge(len(points))
            lo, hi = _inside_counts(points, points, s, e)
            tf += hi - lo
        b = np.minimum(np.searchsorted(box_s, s), len(box_s) - 1)
        live = box_s[b] == s if len(box_s) else np.zeros(len(s), bool)
        keep = np.ones(len(vs), bool)
        keep[at] = (tf > 0) & live
        vp = vp.copy()
        vp[at] = (vp[at] >> 32 << 32) | tf
        return [vs[keep], vp[keep]]

    def _postings(self, region: Region | None) -> np.ndarray:
        parts = []
        for f in self.forms:
            got = self.ev._whole(f) if region is None else \
                self.ev.lists.inside(f, region.los, region.his)
            parts.append(got.starts)
        points = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
        self.ev.charge(len(points))
        return points

    def everywhere(self):
        points = self._postings(None)
        boxes = self.boxes.holding(points, points)
        c = self._score(points, boxes.starts, boxes.ends)
        keep = c > 0
        return boxes.starts[keep], boxes.ends[keep], c[keep]

    def at(self, s, e, region):
        return self._score(self._postings(region), s, e)

    def at_documents(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """at() of documents (s, e) (the documents' list's: not any other container) by
        the term's documents, kept already (self.docs: no list is read), as at() gives."""
        assert self.docs is not None
        vs, vp = self.docs
        if not len(vs):
            return np.zeros(len(s))
        at = np.minimum(np.searchsorted(vs, s), len(vs) - 1)
        tf = np.where(vs[at] == s, vp[at] & 0xFFFFFFFF, 0)  # (length << 32 | tf)
        return self._score_tf(tf.astype(np.float64), s, e)

    def _score(self, points, s, e) -> np.ndarray:
        st = self.stats
        if not st.scoring.fields:
            a, z = _inside_counts(points, points, s, e)
            return self._score_tf((z - a).astype(np.float64), s, e)
        tilde = np.zeros(len(s))
        for f in st.scoring.fields:
            fi = st.field_intervals(self.ev, f.name, s, e)
            fa, fz = _inside_counts(points, points, fi.starts, fi.ends)
            per = (fz - fa).astype(np.float64)  # postings in each field interval
            tf_f = _sums_inside(fi.starts, fi.ends, per, s, e)
            len_f = _sums_inside(fi.starts, fi.ends, (fi.ends - fi.starts + 1), s, e)
            norm = 1.0 - f.b + f.b * len_f / st.field_avg(f.name)
            tilde += np.where(tf_f > 0, f.weight * tf_f / np.where(norm > 0, norm, 1.0), 0.0)
        c = self.factor * (tilde / (st.scoring.k1 + tilde))
        return np.where(tilde > 0, c, 0.0)

    def _score_tf(self, tf, s, e) -> np.ndarray:
        """BM25's contributions (no fields) to the containers (s, e) holding tf each."""
        st = self.stats
        with np.errstate(invalid="ignore", divide="ignore"):  # (0 / 0 where tf = k1 = 0)
            c = self.factor * saturation(tf, (e - s + 1).astype(np.float64), st.avglen,
                                         st.scoring.k1, st.scoring.b)
        return np.where(tf > 0, c, 0.0)


@dataclass(frozen=True)
class _Cells:
    """A term's largest saturation per cell (kernels.term_cells) at average length
    `avglen` (_Words.cell_bounds), kept in half the room: the cells as int32, the
    saturations as float32 rounded up (still bounds)."""

    cells: np.ndarray
    most: np.ndarray
    avglen: float

    @classmethod
    def of(cls, cells: np.ndarray, most: np.ndarray, avglen: float
           ) -> tuple[_Cells, int]:
        """(kept, its bytes) of term_cells' arrays."""
        if len(cells) and int(cells[-1]) >= 1 << 31:
            small = cells   # (past int32: as they are)
        else:
            small = cells.astype(np.int32)
        up = most.astype(np.float32)
        low = up < most
        up[low] = np.nextafter(up[low], np.float32(np.inf))
        made = cls(small, up, avglen)
        return made, made.nbytes

    @property
    def nbytes(self) -> int:
        return self.cells.nbytes + self.most.nbytes + 200


class _DocumentsRoom:
    """A word's documents (as _Words.documents gives them) in arrays with room at their
    end, so that the next version, when a commit only appends documents, is written in
    place (as list_cache._Room does for lists): the views older snapshots hold stay as
    they are."""

    def __init__(self, pairs):
        """The documents of pairs ((starts, packed) each), one after the other, with room
        for a sixteenth more (and 1,024)."""
        n = sum(len(a) for a, _ in pairs)
        cap = n + n // 16 + 1024
        self.s = np.empty(cap, np.int64)
        self.p = np.empty(cap, np.int64)
        self.used = 0
        self.lock = threading.Lock()
        for a, b in pairs:
            self.s[self.used:self.used + len(a)] = a
            self.p[self.used:self.used + len(a)] = b
            self.used += len(a)

    @property
    def nbytes(self) -> int:
        return self.s.nbytes + self.p.nbytes + 200

    def view(self) -> "_Documents":
        n = self.used
        return _Documents([self.s[:n], self.p[:n]], self)

    def append(self, at: int, s: np.ndarray, p: np.ndarray) -> "_Documents | None":
        """The documents with (s, p) written after the first `at`, when those are the
        newest version's (nothing was appended since) and there is room; else None."""
        with self.lock:
            if self.used != at or at + len(s) > len(self.s):
                return None
            self.s[at:at + len(s)] = s
            self.p[at:at + len(s)] = p
            self.used = at + len(s)
            return self.view()


class _Documents(list):
    """A word's documents, [starts, packed], in a _DocumentsRoom's arrays."""

    def __init__(self, arrays: list[np.ndarray], room: _DocumentsRoom):
        super().__init__(arrays)
        self.room = room


class _Sparse(_Term):
    """A sparse-vector term: the feature F:term, each container scored q x its values."""

    def __init__(self, ev, boxes, feature, weight, high):
        self.ev, self.boxes, self.feature, self.weight = ev, boxes, feature, weight
        self.bound = weight * high

    def size(self) -> int:
        return self.ev.lists.count(self.feature)

    def _score(self, iv: Intervals, s, e) -> np.ndarray:
        return self.weight * _sums_inside(iv.starts, iv.ends, iv.values, s, e)

    def everywhere(self):
        iv = self.ev._whole(self.feature)
        self.ev.charge(len(iv))
        boxes = self.boxes.holding(iv.starts, iv.ends)
        c = self._score(iv, boxes.starts, boxes.ends)
        keep = c > 0
        return boxes.starts[keep], boxes.ends[keep], c[keep]

    def at(self, s, e, region):
        iv = self.ev.lists.inside(self.feature, region.los, region.his)
        self.ev.charge(len(iv))
        return self._score(iv, s, e)


# statistics ----------------------------------------------------------------------------

class Statistics:
    """What scoring needs of the collection: N, the average length, each word's df, the
    fields' averages, taken from `known` (statistics.Statistics, Snapshot.statistics: a
    database's, or a sharded collection's summed over its shards, so that each shard
    scores as one database would)."""

    def __init__(self, settings: Scoring, known):
        self.scoring = settings
        self.known = known
        self.n = known.documents
        self.avglen = known.tokens / self.n if self.n and known.tokens else 1.0

    def df(self, word: str) -> int:
        return self.known.df.get(word, 0)

    def high(self, feature: str) -> float:
        return self.known.high.get(feature, 0.0)

    def field_avg(self, name: str) -> float:
        docs, tokens = self.known.fields.get(name, (0, 0))
        return tokens / docs if docs else 1.0

    def field_intervals(self, ev: Evaluator, name: str, s: np.ndarray, e: np.ndarray
                        ) -> Intervals:
        """The intervals of field `name` inside the containers (s, e)."""
        region = Region.around(Intervals(s, e, EMPTY_F))
        return ev.lists.inside(name, region.los, region.his)


def check_fields(settings: Scoring, known) -> None:
    """RankingError for a BM25F field no document has (a typo), listing the fields."""
    for f in settings.fields:
        if not known.fields.get(f.name, (0, 0))[0]:
            have = sorted(k for k, v in known.fields.items() if v[0])
            raise RankingError(f"no document has the field {f.name!r}; the fields are: "
                               f"{', '.join(have) or '(none)'}")


# top k ---------------------------------------------------------------------------------

def word_terms(ev, cnode, settings: Scoring, words, known) -> list[_Term]:
    """BM25 (or BM25F) terms for [(forms, weight)]: each a word, or a word and its forms,
    weighed by the collection statistics `known` (statistics.Statistics of every form)."""
    check_fields(settings, known)
    stats = Statistics(settings, known)
    boxes = _Boxes(ev, cnode)
    out: list[_Term] = []
    words = [(tuple(forms), weight) for forms, weight in words if weight > 0]
    n = max(stats.n, 1)
    dfs = known.df
    # (BM25 of documents: each word's documents kept, if they are, instead of its lists)
    kind = "documents" if not settings.fields and boxes.name == ":" else None
    for (forms, weight), (held, decoded, stored, docs, docs_key, docs_lists) in zip(
            words, ev.lists.held([f for f, _ in words], kind)):
        if held:  # (the forms this database holds; df: the collection's)
            df = min(sum(dfs.get(f, 0) for f in forms), n)
            out.append(_Words(ev, boxes, list(held), float(weight), _idf(int(df), int(n)),
                              stats, decoded, stored, docs, docs_key, docs_lists))
    return out


def sparse_terms(ev, cnode, settings: Scoring, weights, known) -> list[_Term]:
    """Sparse terms for [(term, query weight)] of the field settings.sparse, bounded by
    the collection statistics `known`."""
    stats = Statistics(settings, known)
    boxes = _Boxes(ev, cnode)
    out: list[_Term] = []
    for term, weight in weights:
        feature = f"{settings.sparse}:{term}"
        if weight > 0 and ev.lists.count(feature):
            high = stats.high(feature)
            if not high <= MAX_WEIGHT:   # (written before weights were bounded, or annotated)
                raise RankingError(
                    f"the stored values of {feature} go up to {high:g}, past the largest "
                    f"sparse weight ({MAX_WEIGHT:g}), where scores overflow: ingest the "
                    "vectors again with weights in range")
            out.append(_Sparse(ev, boxes, feature, float(weight), high))
    return out


def top(terms: list[_Term], k: int, matches: Intervals | None = None, *,
        prune: bool = True, compiled: bool = True
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best k containers by the sum of the terms' contributions (starts, ends,
    scores), by score descending, ties by start. Without `matches`, the containers
    holding a term with a positive score; with them (a GCL query's matching containers,
    a GC-list), those containers only, every one a result (score 0 too). BM25 words
    (no fields) whose containers are at hand are ranked by the compiled steps
    (_top_compiled; `compiled=False`: by the steps below, the same result)."""
    order = sorted(range(len(terms)), key=lambda i: -terms[i].bound)
    terms = [terms[i] for i in order]
    # the bound of terms i.., summed from the last (a list first: a numpy item at a time
    # is ~10x slower)
    rest = np.array(list(accumulate((t.bound for t in reversed(terms)), initial=0.0))[::-1])
    if compiled and terms:
        words = [t for t in terms if type(t) is _Words and not t.stats.scoring.fields]
        if len(words) == len(terms):   # (all BM25 words: the same list, typed so)
            boxes = None if matches is not None else words[0].boxes.at_hand()
            if matches is not None or boxes is not None:
                return _top_compiled(words, k, matches, prune, rest, boxes)
    floor = 0.0  # the least of k containers' whole scores: the k-th best is no lower
    i = 0
    if matches is None:
        cs, ce, sc = EMPTY_I, EMPTY_I, EMPTY_F
        while i < len(terms):
            if prune and len(sc) >= k > 0:
                if rest[i] * (1 + SLACK) < max(_kth(sc, k), floor):
                    break  # no container holding none of the terms so far can enter
                if terms[i].size() > LEADERS_OVER:  # before reading a long list whole
                    floor = max(floor, _leaders(terms, i, cs, ce, sc, k))
                    if rest[i] * (1 + SLACK) < floor:
                        break
            s, e, c = terms[i].everywhere()
            cs, ce, sc = kernels.merge_scores(cs, ce, sc, s, e, c)
            i += 1
    else:
        cs, ce, sc = matches.starts, matches.ends, np.zeros(len(matches))
    while i < len(terms) and len(cs):
        if prune and len(sc) > k:
            keep = (sc + rest[i]) * (1 + SLACK) >= max(_kth(sc, k), floor) if k else \
                np.zeros(len(sc), bool)
            if not keep.all():
                cs, ce, sc = cs[keep], ce[keep], sc[keep]
                if not len(cs):
                    break
        sc = sc + terms[i].at(cs, ce, _region(cs, ce))
        i += 1
    pick = np.lexsort((cs, -sc))
    if matches is None:
        pick = pick[sc[pick] > 0]
    pick = pick[:max(k, 0)]
    return cs[pick], ce[pick], sc[pick]


LEADERS_OVER = 50_000  # a term with more postings than this is read whole only when needed
LEADERS = 8  # the best LEADERS x k candidates so far are completed for the floor (_leaders)
# A word's documents (_Words.documents) are made for words of this many postings or fewer
# (16 bytes a document, in the list cache's budget for them: ListCache.put_derived). After
# a commit that changes its lists they are extended by what changed (_documents_since),
# or remade when the lists' records of changes do not reach back: that work is bounded by
# this, not by the collection.
DOCUMENTS_MOST = 1 << 20


def _top_compiled(terms: list[_Words], k: int, matches: Intervals | None, prune: bool,
                  rest: np.ndarray, boxes: tuple[Intervals, bool] | None):
    """top() of BM25 words (no fields) by the compiled MaxScore (kernels.bm25_steps): the
    same steps, in the same order, with the same result, taken a batch of terms a call.
    The terms whose lists are at hand (decoded already, or short) go in one call, their
    decoded postings as they are (kernels.FORMS_PER_CALL lists at most); a term whose
    list is not goes in a call of its own, its postings read as top() reads them: the
    whole list while the terms are read whole (after the leaders' floor, for a long
    one), else only inside the candidates left (the kernel drops the hopeless ones
    before each term, so the region read is theirs)."""
    ev = terms[0].ev
    lists = ev.lists
    st = terms[0].stats
    k1, b, avglen = st.scoring.k1, st.scoring.b, float(st.avglen)
    factors = np.array([t.factor for t in terms], dtype=np.float64)
    if matches is None:
        assert boxes is not None   # (top() passes them when there are no matches)
        phase, cs, ce, sc = 1, EMPTY_I, EMPTY_I, EMPTY_F
        (bs, be), disjoint = (boxes[0].starts, boxes[0].ends), boxes[1]
    else:
        phase, cs, ce, sc = 2, matches.starts, matches.ends, np.zeros(len(matches))
        bs = be = EMPTY_I
        disjoint = True
    most = kernels.FORMS_PER_CALL
    n_terms, t, floor, led = len(terms), 0, 0.0, -1
    done = not n_terms
    slack1 = 1 + SLACK
    # the documents' list: a term at hand is given by its documents (_Words.documents)
    by_documents = matches is None and disjoint and terms[0].boxes.name == ":"
    intact = lists.intact()   # (each term's size its stored count: _Words.size)
    bounds: _Bounds | None = None   # (the terms bounded per cell too, a term a call)
    if by_documents and prune and k > 0 and \
            all((term.stored if intact else term.size()) <= LEADERS_OVER
                for term in terms[1:]):
        # every term by its documents: document at a time, each document read once
        # rather than the candidates merged into each term's documents in turn (the same
        # scores, added in the same order), in one call however many the terms are
        every: list[np.ndarray] = []
        for term in terms:
            got = term.documents(bs, be)
            if got is None:
                break   # (term at a time, below; the documents found are kept)
            every += got
        else:
            cs, ce, sc, read = kernels.bm25_documents_top(k, slack1, k1, b, avglen,
                                                          factors, rest, every)
            ev.charge(int(read))
            return cs, ce, sc
    while not done:
        forms: list[np.ndarray] = []
        counts = [0]
        end = t
        views = None   # (the call's terms: all by their documents, or all by postings)
        if phase == 1 and prune and led != t and len(sc) >= k > 0 and \
                terms[t].size() > LEADERS_OVER:
            # before a long term is read whole (by its documents or its postings): the
            # leaders' floor, which may end phase 1 here (the kernel takes it, reading
            # nothing: the term comes in the next call)
            led = t
            floor = max(floor, _leaders(terms, t, cs, ce, sc, k, by_documents))
            if bounds is None and by_documents and \
                    sum(term.stored for term in terms[t:]) > BOUNDED_OVER:
                # (many documents left to read: the terms left bounded per cell, which
                # may end phase 1 here, and else drop most of them as they are read)
                bounds = _Bounds(terms, t, bs)
        else:
            while end < n_terms:  # the terms at hand from t on
                if phase == 1 and prune and end > t and terms[end].size() > LEADERS_OVER:
                    break  # (a long term starts a call of its own, after the leaders' floor)
                if bounds is not None and end > t and (phase == 1 or len(cs) > BOUNDED_ALONE):
                    break  # (the bounds are of the terms from the call's first on)
                got = terms[end].documents(bs, be) if by_documents else None
                kind = got is not None
                if got is None:
                    got = terms[end].at_hand()
                if got is None or len(forms) + len(got) > most or views not in (None, kind):
                    break
                views = kind
                forms += got
                counts.append(len(forms))
                end += 1
            if end == t:  # term t alone: its whole list, or its postings inside the candidates
                term = terms[t]
                if phase == 1:
                    forms = [ev._whole(f).starts for f in term.forms]
                else:
                    region = _region(cs, ce)
                    forms = [lists.inside(f, region.los, region.his).starts
                             for f in term.forms]
                forms = _few(forms, most)
                end = t + 1
                counts.append(len(forms))
        was = t
        t, phase, done, cs, ce, sc, read = kernels.bm25_steps(
            t, end, phase, floor, k, prune, slack1, k1, b, avglen, factors, rest, forms,
            np.array(counts, dtype=np.int64), bs, be, disjoint, cs, ce, sc, bool(views),
            *(bounds.now() if bounds is not None else ()))
        ev.charge(int(read))
        if bounds is not None:
            bounds.past(was, t)
    pick = kernels.bm25_pick(sc, k, matches is None)
    return cs[pick], ce[pick], sc[pick]


CELL_SHIFT = 12   # the bounds' cells: 4,096 addresses each (_Bounds)
# the terms left are bounded per cell (_Bounds) when phase 1 comes to a long term and
# their lists hold more postings than this
BOUNDED_OVER = 200_000
BOUNDED_ALONE = 10_000  # in phase 2, a call of one term while more candidates are left


class _Bounds:
    """What the terms from t on can add to a document, bounded per cell of the address
    space (2**CELL_SHIFT addresses, by the document's start): for kernels.bm25_steps'
    `cells`. Each term whose documents are kept adds factor x its largest saturation in
    each cell holding one (_Words.cell_bounds); one without them its bound everywhere
    (`flat`). Where a query's words are many and their weights flat (RM3's), the sum of
    the bounds of the terms left (rest) stays high long after few documents can still
    reach it: the cells' bounds are lower where the terms left are rare or their
    documents long, so MaxScore ends the reading of whole lists sooner and drops most
    candidates before a term is looked up in them."""

    def __init__(self, terms: list[_Words], t: int, bs: np.ndarray):
        """The bounds of terms t.. (the documents' list's starts: bs)."""
        self.cells = np.zeros((int(bs[-1]) >> CELL_SHIFT) + 1 if len(bs) else 1)
        self.flat = 0.0
        self.terms, self.first = terms, t
        self.each: list[tuple[np.ndarray, np.ndarray, float] | None] = [None] * t
        for term in terms[t:]:
            got = term.cell_bounds()
            if got is None:
                self.flat += term.bound
            else:
                kernels.add_cells(self.cells, *got)
            self.each.append(got)

    def now(self) -> tuple[np.ndarray, float, int]:
        """(cells, flat, shift) of the terms not yet past."""
        return self.cells, self.flat, CELL_SHIFT

    def past(self, t0: int, t1: int) -> None:
        """Terms t0..t1-1 are added: their bounds are taken out."""
        for u in range(max(t0, self.first), t1):
            got = self.each[u]
            if got is None:
                self.flat = max(self.flat - self.terms[u].bound, 0.0)
            else:
                kernels.add_cells(self.cells, got[0], got[1], -got[2])


# a word's documents are made by the table of where each cell of 2**TABLE_SHIFT addresses'
# documents begin (_starts_table) when its postings are TABLE_OVER or more, or TABLE_KEPT
# or more and the table is kept already for the documents as they are
TABLE_SHIFT = 6
TABLE_OVER = 1 << 16
TABLE_KEPT = 1 << 10


def _starts_table(ev: Evaluator, forms: list[np.ndarray], box_s: np.ndarray) -> tuple:
    """kernels.term_documents' (table, shift) for the documents (box_s: the list `:` as it
    is) when the forms hold TABLE_OVER postings or more, or TABLE_KEPT or more and the
    table is kept already, else (). The table (kernels.start_table: per cell of
    2**TABLE_SHIFT addresses, the documents starting before it; 4 bytes a cell, 16 MB
    at 6.7M documents of ~37 tokens) is made once for `:` as it is and kept beside a
    word's documents (Lists.derived); after a commit that appends documents only its
    cells from the first changed are counted again (one copy of it), after an erase it
    is made anew. By the table each posting's document is found from its cell's first,
    apart from the posting before (their loads overlap), where a gallop from the
    posting before waits on each load: a common word's documents from its whole lists
    in ~0.6x the time at 4x the scale corpus (~17 against ~28 ns a posting), a word of
    many forms' in ~0.25x (each form galloped through the documents on its own)."""
    size = sum(len(f) for f in forms)
    if size < TABLE_KEPT or not len(box_s):
        return ()
    lists = ev.lists
    shift = TABLE_SHIFT
    [(held, _, _, kept, key, group)] = lists.held([(":",)], f"starts {shift}")
    if kept is not None:
        return kept, shift
    if not held or not key or size < TABLE_OVER:
        return ()

    def make():
        table = kernels.start_table(box_s, shift)
        return table, table.nbytes + 200

    def extend(old: np.ndarray, low: int | None, erased):
        if erased is not None:
            return None   # (documents gone: made anew)
        if low is None:
            return old, old.nbytes + 200
        # (the documents starting before `low` are as they were: so are the cells
        # up to low's)
        c0 = min(low >> shift, len(old) - 1)
        table = np.concatenate((old[:c0], kernels.start_table(box_s, shift, c0,
                                                              int(old[c0]))))
        return table, table.nbytes + 200
    found = lists.derived(key, make, group, extend)
    return () if found is None else (found, shift)


def _few(forms: list[np.ndarray], most: int) -> list[np.ndarray]:
    """A word's postings, one array each form, in `most` arrays at most (the last ones
    merged into one)."""
    if len(forms) <= most:
        return forms
    return forms[:most - 1] + [np.sort(np.concatenate(forms[most - 1:]))]


def _leaders(terms, i, cs, ce, sc, k, documents: bool = False) -> float:
    """The k-th best whole score of the LEADERS x k containers best so far (terms i..
    added where they are): a lower bound of the final k-th best, found by probing a few
    blocks of each list left, which can spare reading a long one whole. (More than k:
    the best so far are often not the best in the end.) `documents`: the candidates are
    documents of the documents' list, so a term whose documents are kept is looked up
    in them (_Words.at_documents)."""
    m = min(len(sc), k * LEADERS)
    best = np.sort(np.argpartition(-sc, m - 1)[:m])
    s, e = cs[best], ce[best]
    region = _region(s, e)
    whole = sc[best].copy()
    for t in terms[i:]:
        whole += t.at_documents(s, e) if documents and getattr(t, "docs", None) is not None \
            else t.at(s, e, region)
    return _kth(whole, k)


def _region(s, e) -> Region:
    return Region.around(Intervals(s, e, EMPTY_F))


def _kth(scores: np.ndarray, k: int) -> float:
    """The k-th largest score (len(scores) >= k >= 1)."""
    return float(np.partition(scores, len(scores) - k)[len(scores) - k])


# what a hit shows ----------------------------------------------------------------------

def covers(ev: Evaluator, words: list[tuple[str, ...]], s: np.ndarray, e: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """For each container (s, e): the shortest window holding each of the query's terms
    that it holds (a term: one of the words of a tuple), the first of the shortest; (-1,
    -1) where it holds none (a hit found through its neighbours or by an expansion word:
    no cover to show). What a BM25 or sparse hit's snippet shows."""
    if not len(s):
        return EMPTY_I, EMPTY_I
    order = np.argsort(s, kind="stable")
    ss, se = s[order], e[order]
    region = _region(ss, se)
    addrs, ids = [], []
    for i, forms in enumerate(words):
        for w in forms:
            found = ev.lists.inside(w, region.los, region.his).starts
            addrs.append(found)
            ids.append(np.full(len(found), i, np.int64))
    cs, ce = np.full(len(s), -1, np.int64), np.full(len(s), -1, np.int64)
    if addrs:
        a = np.concatenate(addrs)
        pick = np.argsort(a, kind="stable")
        ws, we = kernels.best_windows(a[pick], np.concatenate(ids)[pick], len(words), ss, se)
        cs[order], ce[order] = ws, we
    return cs, ce
