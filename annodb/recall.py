"""Recall over an agent's memories: BM25 in which a memory borrows the words of its
neighbours (Memory.recall's default for free text).

An agent's memories are rarely self-contained: "Yes, in June, with the kids" answers the
turn before it, and a question about camping finds the answer only through its neighbour.
Memories of one conversation are neighbours in the address space (each is committed
after the one before), so their context is at hand without storing it twice.

The memories ranked are those a filter selects (a container, `(>> : user:alice)`), in
address order, m_1 .. m_n, with lengths L_i (tokens) and times t_i (the `:time:` value
over each memory). A **session** is a maximal run of consecutive memories whose
neighbouring times are at most `gap` seconds apart (a memory without a time is a session
of its own), as web logs are cut into sessions at a silence. Within its session, memory i
is lent its neighbours' counts, decayed by distance (kernels.context_sums):

    lent(x)_i = sum over j < i of before^(i-j) x_j  +  sum over j > i of after^(j-i) x_j

(earlier memories lend more: an answer follows its question). For each word w of the
query (with the words sharing its stem, as ranking.text_words conflates them; qtf its
count in the query, idf Lucene's from the collection's N and df, as bm25.py), with tf_i
its count in m_i:

    T_i    = tf_i + lent(tf)_i      (lent nothing if more than `common` of the n memories,
                                     and more than one, hold w: a word many memories hold,
                                     such as the name of one side of the conversation,
                                     says nothing of where a memory is)
    A_i    = L_i + lent(L)_i,  avg = the mean of A over the n memories
    turn_i = sum over w of qtf x idf x T_i / (T_i + k1 x (1 - b + b x A_i / avg))

which is BM25F over a memory and its context as two fields. Each session s is scored as
one document by BM25 over the same words, with its own statistics (the sessions of the
n memories: sdf of them holding w, S in all, slen_s its tokens, savg their mean):

    sess_s = sum over w of qtf x idf(sdf, S) x stf_s / (stf_s + session_k1 x (1 -
             session_b + session_b x slen_s / savg))

and dates the query names ("12 May 2023", "May 12, 2023", "May 2023", "2023-05-12",
"2023"; UTC, as Memory reads a naive datetime) are a term matched by the memories whose time falls in that day,
month or year (m of the n): date_i = sum over the dates of idf(m, n) where it falls. Then

    score_i = turn_i + [turn_i > 0] x (session x sess_s(i) + dates x date_i)

and the k best memories with a score > 0 are returned, ties by address. The settings
(`Context`) were chosen on half of LoCoMo's conversations and measured on the other half
(benchmarks/memory.py, benchmarks/RESULTS.md, where every variant tried is listed).
"""

from __future__ import annotations

import calendar
import datetime
import re
from dataclasses import dataclass

import numpy as np

from . import kernels, ranking
from .bm25 import idf
from .errors import RankingError
from .gcl import Evaluator, Region, as_node
from .lists import Intervals
from .query import Combine, Term, format as format_query

TIME = ":time:"   # the feature whose value over a memory is its time (seconds)
RANK = "context"  # this ranking's name where rankers are named (Memory.recall's `rank`)


@dataclass(frozen=True)
class Context:
    """Context recall's settings (see the module docstring)."""

    k1: float = 0.9          # BM25's over a memory and its context
    b: float = 0.4          # (Anserini's; 0.7 was second on the tuning half)
    before: float = 0.5      # the decay of what earlier memories lend, per step
    after: float = 0.3       # of what later ones lend
    gap: float = 1800.0      # a longer silence between two memories (seconds) ends a session
    common: float = 0.2      # a word more of the memories hold (and more than one) is not lent
    session: float = 0.5     # the weight of the session's score
    session_k1: float = 0.9
    session_b: float = 0.6
    dates: float = 1.5       # the weight of a date the query names


CONTEXT = Context()


# the formula ----------------------------------------------------------------------------

def sessions(times: np.ndarray, gap: float) -> np.ndarray:
    """Session ids 0, 1, ... of memories in order: a new one wherever two neighbours'
    times are more than `gap` apart or either has none (NaN)."""
    t = np.asarray(times, dtype=np.float64)
    if not len(t):
        return np.zeros(0, np.int64)
    new = ~(np.abs(np.diff(t)) <= gap)  # (NaN compares false: a new session)
    return np.concatenate(([0], np.cumsum(new))).astype(np.int64)


def score(tf: np.ndarray, counts: np.ndarray, idfs: np.ndarray, lengths: np.ndarray,
          runs: np.ndarray, hits: np.ndarray, settings: Context = CONTEXT) -> np.ndarray:
    """Each memory's score (module docstring): tf[w, i] the count of the query's word w in
    memory i, counts[w] its count in the query, idfs[w] its idf, lengths[i] the
    memory's tokens, runs[i] its session (ids 0, 1, ... in order), hits[d, i] whether its
    time falls in the d-th date the query names."""
    tf = np.asarray(tf, dtype=np.float64).reshape(len(counts), len(lengths))
    lengths = np.asarray(lengths, dtype=np.float64)
    n = len(lengths)
    if not n:
        return np.zeros(0)
    s = settings
    lent = kernels.context_sums(np.vstack((lengths[None, :], tf)), runs, s.before, s.after)
    wide_length = lengths + lent[0]
    norm = s.k1 * (1.0 - s.b + s.b * wide_length / wide_length.mean())
    turn = np.zeros(n)
    n_sessions = int(runs[-1]) + 1
    session_length = np.bincount(runs, weights=lengths, minlength=n_sessions)
    session_norm = s.session_k1 * (1.0 - s.session_b + s.session_b * session_length /
                                   session_length.mean())
    session = np.zeros(n_sessions)
    for w in range(len(counts)):
        x = tf[w]
        held = np.count_nonzero(x)
        if not held:
            continue
        wide = x + lent[w + 1] if held <= max(s.common * n, 1) else x
        turn += counts[w] * idfs[w] * wide / (wide + norm)
        stf = np.bincount(runs, weights=x, minlength=n_sessions)
        session += counts[w] * idf(np.count_nonzero(stf), n_sessions) * stf / (
            stf + session_norm)
    dated = np.zeros(n)
    for hit in np.asarray(hits, dtype=bool).reshape(-1, n):
        m = np.count_nonzero(hit)
        if m:
            dated += idf(m, n) * hit
    return turn + (turn > 0) * (s.session * session[runs] + s.dates * dated)


# dates ----------------------------------------------------------------------------------

_UTC = datetime.timezone.utc
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:1[89]|2\d)\d\d)"
_DATES = [  # (pattern, (year, month, day) groups; 0: none)
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I), (3, 2, 1)),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I), (3, 1, 2)),
    (re.compile(rf"\b{_YEAR}-(\d\d)-(\d\d)\b"), (1, 2, 3)),
    (re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I), (2, 1, 0)),
    (re.compile(rf"\b{_YEAR}\b"), (1, 0, 0)),
]


def date_ranges(text: str) -> list[tuple[float, float]]:
    """The days, months and years a text names, as [start, end) in seconds since the
    epoch, in UTC (as Memory takes a naive datetime): "12 May 2023", "12th of May, 2023", "May 12, 2023", "2023-05-12"
    (a day), "May 2023" (a month; months by name or three letters), "2023" (a year from
    1800 to 2999). A month or day without a year names nothing (which year?), nor an
    impossible date; a text that names one day twice gives it once."""
    found, taken = [], []
    for pattern, (y, m, d) in _DATES:
        for match in pattern.finditer(text):
            if any(a < match.end() and match.start() < b for a, b in taken):
                continue
            taken.append((match.start(), match.end()))
            year = int(match[y])
            month = 0 if not m else (int(match[m]) if match[m].isdigit()
                                     else _MONTHS[match[m].lower()])
            day = int(match[d]) if d else 0
            try:
                if day:
                    first = datetime.datetime(year, month, day)
                    last = first + datetime.timedelta(days=1)
                elif month:
                    first = datetime.datetime(year, month, 1)
                    last = datetime.datetime(year + month // 12, month % 12 + 1, 1)
                else:
                    first, last = datetime.datetime(year, 1, 1), datetime.datetime(year + 1, 1, 1)
                span = (first.replace(tzinfo=_UTC).timestamp(),
                        last.replace(tzinfo=_UTC).timestamp())
            except (ValueError, OverflowError, OSError):
                continue
            if span not in found:
                found.append(span)
    return found


# ranking --------------------------------------------------------------------------------

def rank_text(snapshot, text: str, k: int, container, rank: str | None = None
              ) -> ranking.Results:
    """Memory.recall's free text: the k best memories inside `container` by this module's
    ranking (`rank` None or RANK) or by the engine's ranker `rank` (ranking.RANKS). A
    sharded collection has no one address space to find neighbours in: there, RANK is
    the engine's free-text default (ranking.TEXT_RANK)."""
    if rank is not None and rank != RANK and rank not in ranking.RANKS:
        raise RankingError(f"unknown ranker {rank!r}: choose one of "
                           f"{', '.join(ranking.RANKS + (RANK,))}")
    if rank in (None, RANK):
        if getattr(snapshot, "lists", None) is not None:   # one database's snapshot
            return search(snapshot, text, k=k, container=container)
        rank = ranking.TEXT_RANK
    return snapshot.search_text(text, k=k, container=container, rank=rank)


def search(snapshot, text: str, *, k: int = 10, container=":", settings: Context = CONTEXT,
           time_feature: str = TIME, snippets: bool = True) -> ranking.Results:
    """The k best of the memories `container` selects (a GCL query or node; default every
    document) for free text, by the module docstring's score; their times are the values
    of `time_feature` over them. One database's snapshot (a sharded collection has no
    single address space to find neighbours in)."""
    words = ranking.text_words(snapshot, text)
    shown = [Term(f) if len(f) == 1 else Combine("+", tuple(Term((x,)) for x in f))
             for f, _ in words]
    query = "" if not shown else format_query(shown[0] if len(shown) == 1 else
                                             Combine("+", tuple(shown)))
    ev = Evaluator(snapshot)
    boxes = ev.eval(ev.folded(as_node(container)[0])) if words else Intervals.empty()
    if not len(boxes):
        return ranking.Results([], query, [], 0)
    s, e = boxes.starts, boxes.ends
    region = Region.around(boxes)
    times = np.full(len(s), np.nan)
    found = ev.lists.inside(time_feature, region.los, region.his)
    at = np.minimum(np.searchsorted(s, found.starts), len(s) - 1)
    own = (s[at] == found.starts) & (e[at] == found.ends)
    times[at[own]] = found.values[own]
    stats = snapshot.statistics(sorted({f for forms, _ in words for f in forms}))
    n_docs = max(stats.documents, 1)
    tf, counts, idfs = [], [], []
    for forms, count in words:
        df = min(sum(stats.df.get(f, 0) for f in forms), n_docs)
        if not df:
            continue
        parts = [ev.lists.inside(f, region.los, region.his).starts for f in forms]
        points = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
        tf.append((np.searchsorted(points, e, "right") -
                   np.searchsorted(points, s, "left")).astype(np.float64))
        counts.append(float(count))
        idfs.append(float(idf(df, n_docs)))
    ranges = date_ranges(text)
    hits = np.array([(times >= lo) & (times < hi) for lo, hi in ranges], dtype=bool)
    scores = score(np.array(tf), np.array(counts), np.array(idfs),
                   (e - s + 1).astype(np.float64), sessions(times, settings.gap), hits,
                   settings)
    pick = kernels.top(scores, max(k, 0))
    rs, re_, rsc = s[pick], e[pick], scores[pick]
    cs, ce = snapshot.word_covers([f for f, _ in words], rs, re_) if snippets else (rs, rs)
    hits_ = ranking.Ranking(snapshot, query, [], rs, re_, rsc, cs, ce).hits(k, snippets)
    return ranking.Results(hits_, query, [], int(np.count_nonzero(scores > 0)))
