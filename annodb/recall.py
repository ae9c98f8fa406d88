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
is lent the counts of its neighbours at most `window` (W) memories away, decayed by
distance (kernels.context_sums):

    lent(x)_i = sum over j of its session, 0 < i - j <= W, of before^(i-j) x_j
              + sum over j of its session, 0 < j - i <= W, of after^(j-i) x_j

(earlier memories lend more: an answer follows its question; at W = 8 what a memory
further away would lend, 0.5^9 of its count, is negligible, and the window keeps the work
bounded). Every statistic is the collection's (N, its documents; avglen, their mean
length; df, a word's documents: Snapshot.statistics) or lies in a memory's window, so
that a recall reads only the postings of its words and the memories around them (below),
however many memories the filter selects. For each word w of the query (with the words
sharing its stem, as ranking.text_words conflates them; qtf its count in the query, idf
Lucene's from N and df, as bm25.py), with tf_i its count in m_i, h_i the memories of i's
session at most W away (i included) that hold w, and c_i how many memories that is:

    T_i    = tf_i + lent(tf)_i   (lent nothing where h_i > max(common x c_i, 1): a word most
                                  of a memory's neighbours hold, such as the name of one
                                  side of a conversation, says nothing of where it is)
    A_i    = L_i + lent(L)_i,  avg = avglen x (1 + sum for d = 1..W of before^d + after^d)
    turn_i = sum over w of qtf x idf x T_i / (T_i + k1 x (1 - b + b x A_i / avg))

which is BM25F over a memory and its context as two fields (avg: the mean of A in an
endless session). A memory's **passage** is its session's memories at most `reach` (R)
away, i included, scored as one document by BM25 with their summed counts and lengths,
ptf_i and P_i, and the idf a passage of 2R + 1 memories would have if the word's memories
were spread evenly, pidf = idf(N x (1 - (1 - df / N)^(2R + 1)), N) (a word most passages
hold, like a question word, weighs little):

    pass_i = sum over w of qtf x pidf x ptf_i / (ptf_i + passage_k1 x (1 - passage_b +
             passage_b x P_i / (avglen x (2R + 1))))

and dates the query names ("12 May 2023", "May 12, 2023", "May 2023", "2023-05-12",
"2023"; UTC, as Memory reads a naive datetime) are a term matched by the memories whose
time falls in that day, month or year, weighing ln(1 + date_span / its length) (a day
names more than a year), and, where a memory's time does not fall in it, by a date the
memory's own text names relative to that time that overlaps it ("I watched it last
night", remembered on 2 May, is matched by "1 May 2023"; "yesterday", "last week", "two
months ago", "next month", "last Saturday": event_ranges; Memory stores the shortest
with each memory as it remembers it, EVENT_FROM and EVENT_TO), weighing ln(1 +
date_span / the longer of the two) (never more than the date's own weight: "last month"
matches "1 May 2023" as a month would): date_i = the sum over the query's dates of what
each adds. A memory's
**labels** (its metadata strings: a speaker, a user, a key) are a field the question
may name: Memory writes the feature LABEL_WORD + w over the memory for each word w of
them (label_words), and named_i = the sum of qtf x idf over the query's words (any of
their forms) that i's labels hold; a word that no memory's text holds but a label does
is a query word too, with df the memories whose labels hold it (it adds to named_i only).
Then

    score_i = (turn_i + [turn_i > 0] x (passage x pass_i + dates x date_i
                                        + labels x named_i)) x (1 + length x L_i / (L_i + avglen))
                                                             x (1 - asks x asked_i)

The first factor is a **length prior**: of two memories that match the question about as
well, the longer one more likely holds what is asked (BM25's length normalisation works
the other way: a memory that says little but a name, "wow, Melanie!", outscores the one
that tells her news for the name alone). It saturates (below 1 + length), it scales with
what the memory matched (so a memory matching the question better is not overtaken for
its length alone, however small the words' idf), and it reads nothing but the memory's
extent. The second is an **asking prior**: asked_i is the share of the memory's tokens in
its sentences that end in a question mark (asking: "How was the camping trip?" 1,
"Camping was great! How are the kids?" 4 / 7); a question states nothing, so of two
memories that match as well, the one that asks is less likely to hold the answer (it
more often holds the words of the answer that follows it, which its context lends
anyway). Memory computes the share as it remembers a memory and stores it over the
memory where it is above 0 (ASKING); a memory an older annodb wrote counts as asking
nothing until Memory.reindex() writes its share. The factor lies in (1 - asks, 1]: it
never raises a score.

The k best memories with a score > 0 are returned, ties by address. The settings
(`Context`) were chosen on half of LoCoMo's conversations and measured on the other half
(benchmarks/memory.py, benchmarks/RESULTS.md, where every variant tried is listed).

**What a recall reads.** A filter of at most FILTER_SCAN memories (by the lists' counts)
is read whole, with the postings inside it. Otherwise the work follows the postings: the
words are taken rarest first, and the memories within max(W, R) of one holding a word
taken so far (those passing the filter, found by evaluating it only around them) are
scored exactly, from their neighbours' lengths, times and postings; a memory further
away holds none of those words nearby (in its text or labels), so it scores less than
the sum over the words left of qtf x (idf + passage x pidf + labels x idf, the last for
a word some label holds), plus the dates' weights (a date its text names adds no more
than its time would), times the length prior's 1 + length (the asking prior's factor is
at most 1).
Once the k-th best score reaches that bound, no other memory can enter the k best;
otherwise twice as many words are taken. A round is run only when the words taken could
outscore those left, and only while the memories to read around their holders are at
most a quarter of what the filter holds (by the words' df, before anything is read);
else the filter is read whole (a question of common words, "what did she say"). Either
way the scores are the formula's: only the work differs. With LoCoMo's questions (eight
or so words, several of them common) the k-th score seldom passes the bound before the
common words are taken, so a recall without a `where` still reads about as much as the
memory holds (benchmarks/RESULTS.md, "as it grows").
"""

from __future__ import annotations

import calendar
import datetime
import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from . import kernels, ranking
from .bm25 import idf
from .gcl import Evaluator, Region, as_node
from .intervals import Intervals
from .query import Combine, Feature, Term, format as format_query
from .tokenizer import strip_diacritics, tokens

TIME = ":time:"   # the feature whose value over a memory is its time (seconds)
LABEL_WORD = "(label)"  # + a word: over each memory one of whose metadata strings holds it
RANK = "context"  # this ranking's name where rankers are named (Memory.recall's `rank`)
DAY = 86400.0
FILTER_SCAN = 2048  # a filter of at most this many memories (an upper bound) is read whole
ROUND = 4           # a round following the postings reads at most 1 / ROUND of the filter


@dataclass(frozen=True)
class Context:
    """Context recall's settings (see the module docstring)."""

    k1: float = 0.9          # BM25's over a memory and its context
    b: float = 0.4           # (Anserini's; 0.7 was second on the tuning half)
    before: float = 0.5      # the decay of what earlier memories lend, per step
    after: float = 0.3       # of what later ones lend
    window: int = 8          # memories further away lend nothing
    gap: float = 1800.0      # a longer silence between two memories (seconds) ends a session
    common: float = 0.4      # a word more of a memory's window holds (and more than one)
    #                          is not lent to it
    passage: float = 0.5     # the weight of the passage's score
    reach: int = 10          # a passage: the memories of the session at most this far away
    passage_k1: float = 0.9
    passage_b: float = 0.6
    dates: float = 1.5       # the weight of a date the query names
    events: bool = True      # a date a memory's text names relative to its time counts too
    date_span: float = 365 * DAY   # a date of length D weighs ln(1 + date_span / D)
    labels: float = 0.3      # the weight of a query word one of a memory's labels holds
    length: float = 0.3      # a memory's length prior: its score x (1 + length x
    #                          L / (L + avglen))
    asks: float = 0.4        # a memory that asks: its score x (1 - asks x the share of its
    #                          tokens in sentences ending in a question mark); 0 to 1

    def spread(self) -> float:
        """A memory's context length over its own in an endless session."""
        return 1.0 + sum(self.before ** d + self.after ** d for d in range(1, self.window + 1))

    def zone(self) -> int:
        """How far a word's holder reaches: the memories it lends to or shares a passage
        with are at most this many away."""
        return max(self.window, self.reach)


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


def passage_idf(df, n: int, reach: int) -> float:
    """The idf of a word held by df of n memories, for a passage of 2 reach + 1 of them:
    the share of passages that would hold it were its memories spread evenly."""
    share = 1.0 - (1.0 - min(df, n) / n) ** (2 * reach + 1)
    return float(idf(n * share, n))


def date_weight(lo: float, hi: float, settings: "Context | None" = None) -> float:
    """The weight of a date [lo, hi) (seconds) the query names: ln(1 + date_span / length)."""
    s = settings or CONTEXT
    return math.log1p(s.date_span / max(hi - lo, 1.0))


def score(tf: np.ndarray, counts: np.ndarray, idfs: np.ndarray, pidfs: np.ndarray,
          lengths: np.ndarray, runs: np.ndarray, dated: np.ndarray, avglen: float,
          settings: Context = CONTEXT, named: np.ndarray | None = None,
          asked: np.ndarray | None = None) -> np.ndarray:
    """Each memory's score (module docstring), over consecutive memories: tf[w, i] the
    count of the query's word w in memory i, counts[w] its count in the query, idfs[w]
    and pidfs[w] its idf and passage idf, lengths[i] the memory's tokens, runs[i] its
    session (ids nondecreasing; a new one also where the memories are not consecutive),
    dated[i] the weights of the dates its time falls in, avglen the collection's mean
    length, named[i] the sum of qtf x idf over the query's words its labels hold,
    asked[i] the share of its tokens in sentences that ask (asking; None: none asks)."""
    s = settings
    scores = kernels.context_scores(
        tf, counts, idfs, pidfs, lengths, runs, dated, named, avglen,
        (s.k1, s.b, s.before, s.after, s.window, s.common, s.passage, s.reach, s.passage_k1,
         s.passage_b, s.dates, s.labels, s.length, s.spread()))
    if asked is not None and s.asks:
        scores *= 1.0 - s.asks * asked
    return scores


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
    epoch, in UTC (as Memory takes a naive datetime): "12 May 2023", "12th of May, 2023",
    "May 12, 2023", "2023-05-12" (a day), "May 2023" (a month; months by name or three
    letters), "2023" (a year from 1800 to 2999). A month or day without a year names
    nothing (which year?), nor an impossible date; a text that names one day twice gives it
    once."""
    found: list[tuple[float, float]] = []
    taken: list[tuple[int, int]] = []
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


# dates a memory's own text names relative to its time ------------------------------------

EVENT_FROM = "(event)from"  # over a memory: the start (seconds) of the date its text names
EVENT_TO = "(event)to"      # ... and its end: [from, to), as memory_event gives it
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2}
_WEEKDAYS = [name.lower() for name in calendar.day_name]
_N = r"\d{1,2}|a couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten"
_RELATIVE = re.compile(  # over the lowercased text; at a place, the first alternative wins
    r"\b(?:(?P<before>(?:the\s+)?day\s+before\s+yesterday)"
    r"|(?P<yesterday>yesterday|last\s+night)"
    r"|(?P<tomorrow>tomorrow)"
    rf"|(?P<n>{_N})\s+(?P<ago>day|week|weekend|month|year)s?\s+ago"
    r"|(?:last|past|previous)\s+(?P<last>week|weekend|month|year)"
    r"|next\s+(?P<next>week|weekend|month|year)"
    r"|(?:last|this\s+past)\s+(?P<weekday>" + "|".join(_WEEKDAYS) + r"))\b")
_HINTS = ("yesterday", "night", "tomorrow", "ago", "last", "past", "previous", "next")
# (a text without any of these names no such date: most do not)


def _unit(day: datetime.datetime, unit: str, k: int) -> tuple[datetime.datetime,
                                                               datetime.datetime]:
    """The calendar day, week (Monday to Sunday), weekend, month or year k units from the
    one holding `day` (a midnight, UTC): [start, end)."""
    one = datetime.timedelta(days=1)
    if unit == "day":
        return day + k * one, day + (k + 1) * one
    if unit == "week":
        monday = day - day.weekday() * one + datetime.timedelta(weeks=k)
        return monday, monday + 7 * one
    if unit == "weekend":
        if k > 0:      # the k-th weekend after `day` (not one it is in)
            saturday = day + ((5 - day.weekday()) % 7 or 7) * one
            saturday += datetime.timedelta(weeks=k - 1)
        else:          # the k-th before: "last weekend" is not the one `day` is in
            saturday = day - ((day.weekday() - 5) % 7) * one
            if day.weekday() >= 5:
                saturday -= datetime.timedelta(weeks=1)
            saturday += datetime.timedelta(weeks=k + 1)
        return saturday, saturday + 2 * one
    if unit == "month":
        m = day.year * 12 + day.month - 1 + k
        return (datetime.datetime(m // 12, m % 12 + 1, 1, tzinfo=_UTC),
                datetime.datetime((m + 1) // 12, (m + 1) % 12 + 1, 1, tzinfo=_UTC))
    return (datetime.datetime(day.year + k, 1, 1, tzinfo=_UTC),
            datetime.datetime(day.year + k + 1, 1, 1, tzinfo=_UTC))


def event_ranges(text: str, when: float) -> list[tuple[float, float]]:
    """The dates a memory's text names relative to its time `when` (seconds, read in UTC),
    as [start, end) in seconds: "yesterday" and "last night" (the day before), "the day
    before yesterday", "tomorrow", "N days / weeks / weekends / months / years ago" (N a
    number to 99 or one to ten, "a", "a couple of"), "last (or past, previous) week /
    weekend / month / year", "next week / ...", "last Saturday" (the last one before
    that day). Calendar units: a week is Monday to Sunday, "last week" the one before the
    week holding `when`. In order of appearance, each once; none without a time."""
    low = text.lower()
    if when != when or not math.isfinite(when) or not any(h in low for h in _HINTS):
        return []
    try:
        moment = datetime.datetime.fromtimestamp(when, _UTC)
    except (ValueError, OverflowError, OSError):
        return []
    day = datetime.datetime(moment.year, moment.month, moment.day, tzinfo=_UTC)
    found: list[tuple[float, float]] = []
    for match in _RELATIVE.finditer(low):
        try:
            if match["before"]:
                span = _unit(day, "day", -2)
            elif match["yesterday"]:
                span = _unit(day, "day", -1)
            elif match["tomorrow"]:
                span = _unit(day, "day", 1)
            elif match["ago"]:
                n = re.sub(r"\s+", " ", match["n"])
                span = _unit(day, match["ago"], -(int(n) if n.isdigit() else _NUMBERS[n]))
            elif match["last"] or match["next"]:
                span = _unit(day, match["last"] or match["next"], -1 if match["last"] else 1)
            else:
                back = (day.weekday() - _WEEKDAYS.index(match["weekday"])) % 7 or 7
                span = _unit(day, "day", -back)
        except (ValueError, OverflowError):
            continue
        seconds = (span[0].timestamp(), span[1].timestamp())
        if seconds not in found:
            found.append(seconds)
    return found


def memory_event(text: str, when: float) -> tuple[float, float] | None:
    """The date a memory's text names relative to its time that Memory stores with it
    (EVENT_FROM, EVENT_TO): the shortest of event_ranges (the first of equal length), or
    None."""
    found = event_ranges(text, when)
    return min(found, key=lambda r: r[1] - r[0]) if found else None


# what a memory asks ---------------------------------------------------------------------

ASKING = "(text)asks"  # over a memory: the share of its tokens in sentences that ask
_SENTENCE = re.compile(r"([^.!?]*)([.!?]*)")   # a sentence, then the marks that end it


def asking(text: str) -> float:
    """The share of a text's tokens that are in its sentences ending in a question mark
    ("How was the trip?", "Really?!"): a sentence runs to a run of . ! or ?, and it asks
    when that run holds a ?. 0.0 for a text without one (Memory stores the share with each
    memory whose text asks something, ASKING)."""
    if "?" not in text:
        return 0.0
    asked = total = 0
    for words, marks in _SENTENCE.findall(text):
        if words or marks:
            n = len(tokens(words))
            total += n
            asked += n if "?" in marks else 0
    return asked / total if total else 0.0


# labels ---------------------------------------------------------------------------------

def label_words(value: str, fold_diacritics: bool = False) -> list[str]:
    """The distinct words of a metadata string as a memory's text words are stored
    (folded; without diacritics in a database made with fold_diacritics): Memory writes
    the feature LABEL_WORD + word over the memory for each."""
    words = tokens(value)
    if fold_diacritics:
        words = [strip_diacritics(w) for w in words]
    return list(dict.fromkeys(words))


# ranking --------------------------------------------------------------------------------

@dataclass
class _Word:
    forms: tuple        # the word and the database's words sharing its stem
    count: int          # in the query
    df: int
    idf: float
    pidf: float
    labels: tuple = ()  # LABEL_WORD + each of its forms that some memory's label holds

    def bound(self, settings: Context) -> float:
        """More than this word adds to a memory's score."""
        named = settings.labels * self.idf if self.labels else 0.0
        return self.count * (self.idf + settings.passage * self.pidf + named)


def search(snapshot, text: str, *, k: int = 10, container=":", settings: Context = CONTEXT,
           time_feature: str = TIME, snippets: bool = True, scan: bool | None = None,
           ties: bool = False) -> ranking.Results:
    """The k best of the memories `container` selects (a GCL query or node; default every
    document) for free text, by the module docstring's score; their times are the values
    of `time_feature` over them. One database's snapshot (a sharded collection has no
    single address space to find neighbours in). `scan`: True reads the filter whole,
    False follows the postings, None chooses by the filter's size (the same results
    either way); `total` counts the memories scored above 0 (following the postings, the
    ones looked at). `ties`: the k best and every other memory scoring as the k-th (in
    address order), so that a caller ordering ties otherwise sees all of them."""
    words = ranking.text_words(snapshot, text)
    shown = [Term(f) if len(f) == 1 else Combine("+", tuple(Term((x,)) for x in f))
             for f, _ in words]
    query = "" if not shown else format_query(shown[0] if len(shown) == 1 else
                                             Combine("+", tuple(shown)))
    empty = ranking.Results([], query, [], 0)
    ev = Evaluator(snapshot)
    only = _label_only(ev, text, words, getattr(snapshot, "fold_diacritics", False)) \
        if settings.labels else []
    if not words and not only:
        return empty
    cnode = ev.folded(as_node(container)[0])
    stats = snapshot.statistics(sorted({f for forms, _ in words for f in forms}))
    n_docs = max(stats.documents, 1)
    avglen = stats.tokens / n_docs if stats.tokens else 1.0
    terms = []
    for forms, count in words:
        df = min(sum(stats.df.get(f, 0) for f in forms), n_docs)
        if df:
            named = tuple(LABEL_WORD + f for f in forms if settings.labels and
                          ev.lists.fid(LABEL_WORD + f) is not None)
            terms.append(_Word(forms, count, df, float(idf(df, n_docs)),
                               passage_idf(df, n_docs, settings.reach), named))
    for name, count, held in only:   # (a word no text holds: df, the memories labelled)
        df = min(held, n_docs)
        terms.append(_Word((), count, df, float(idf(df, n_docs)),
                           passage_idf(df, n_docs, settings.reach), (name,)))
    if not terms:
        return empty
    dates = [(lo, hi, date_weight(lo, hi, settings)) for lo, hi in date_ranges(text)]
    size = _documents_in(ev, cnode, stats.documents)
    follow = scan is False or (scan is None and size is not None and size > FILTER_SCAN)
    found = None if not follow or size is None else _followed(
        ev, cnode, terms, dates, avglen, settings, time_feature, max(k, 0),
        snapshot.address_space(), stats.documents, None if scan is False else size)
    if found is None:
        boxes = ev.eval(cnode)
        cuts = np.zeros(len(boxes), dtype=bool)
        s, e, scores = _scored(ev, boxes, Region.around(boxes), cuts, terms, dates, avglen,
                               settings, time_feature)[:3]
    else:
        s, e, scores = found
    pick = kernels.top(scores, max(k, 0))
    if ties and k > 0 and len(pick) == k:
        tied = np.flatnonzero(scores == scores[pick[-1]])
        pick = np.concatenate((pick, tied[tied > pick[-1]]))   # (top: ties by address)
    rs, re_, rsc = s[pick], e[pick], scores[pick]
    cs, ce = snapshot.word_covers([f for f, _ in words], rs, re_) if snippets else (rs, rs)
    hits = ranking.Ranking(snapshot, query, [], rs, re_, rsc, cs, ce).hits(len(pick),
                                                                             snippets)
    return ranking.Results(hits, query, [], int(np.count_nonzero(scores > 0)))


def _label_only(ev: Evaluator, text: str, words: list, fold: bool) -> list:
    """(LABEL_WORD + word, its count in the text, the memories whose labels hold it) of
    the text's words that no memory's text holds but some memory's label does."""
    seen = {f for forms, _ in words for f in forms}
    found = []
    for word, count in Counter(strip_diacritics(w) if fold else w
                               for w in tokens(text)).items():
        name = LABEL_WORD + word
        if word not in seen and ev.lists.fid(name) is not None:
            held = len(ev.lists.whole(name))
            if held:
                found.append((name, count, held))
    return found


def _documents_in(ev: Evaluator, node, documents: int) -> int | None:
    """An upper bound of the documents a filter selects (from the lists' counts), or None
    when it is not documents narrowed by containment (`:`, `(>> : a)`, `(!> : a)`)."""
    if node == Feature(":"):
        return documents
    if isinstance(node, Combine) and node.op in (">>", "!>"):
        base = _documents_in(ev, node.args[0], documents)
        if base is None or node.op == "!>":
            return base
        # (each document holds its own intervals of the others: disjoint ones)
        return min([base] + [ev.estimate(a) for a in node.args[1:]])
    return None


def _scored(ev: Evaluator, docs: Intervals, region: Region, cuts: np.ndarray, terms: list,
            dates: list, avglen: float, settings: Context, time_feature: str) -> tuple:
    """(starts, ends, scores, runs, held) of consecutive stretches of the filter's memories
    `docs` (inside `region`; `cuts[i]`: memory i does not follow memory i - 1 in the
    filter); held[w, i]: memory i holds word w, in its text or its labels."""
    s, e = docs.starts, docs.ends
    n = len(s)
    times = _values(ev, time_feature, region, s, e)
    runs = sessions(times, settings.gap)
    if n and cuts.any():
        runs = runs + np.cumsum(cuts)
    tf = np.zeros((len(terms), n))
    for w, term in enumerate(terms):
        parts = [ev.lists.inside(f, region.los, region.his).starts for f in term.forms]
        if not parts:
            continue      # (a word only labels hold)
        points = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
        tf[w] = kernels.word_counts(points, s, e)
    held = tf > 0
    named = np.zeros(n)
    for w, term in enumerate(terms):
        mine = np.zeros(n, dtype=bool)
        for name in term.labels:
            found = ev.lists.inside(name, region.los, region.his)
            if not n or not len(found):
                continue
            at = np.minimum(np.searchsorted(s, found.starts), n - 1)
            mine[at[(s[at] == found.starts) & (e[at] == found.ends)]] = True
        named += term.count * term.idf * mine
        held[w] |= mine
    dated = np.zeros(n)
    told = [_values(ev, name, region, s, e) for name in (EVENT_FROM, EVENT_TO)] \
        if dates and settings.events else None
    for lo, hi, weight in dates:
        add = np.where((times >= lo) & (times < hi), weight, 0.0)
        if told is not None:   # (a date the memory's text names: NaN where none, never in)
            ev_lo, ev_hi = told
            by_text = (add == 0) & (ev_lo < hi) & (ev_hi > lo)
            longer = np.maximum(ev_hi[by_text] - ev_lo[by_text], max(hi - lo, 1.0))
            add[by_text] = np.log1p(settings.date_span / longer)
        dated += add
    asked = np.nan_to_num(_values(ev, ASKING, region, s, e)) if settings.asks else None
    scores = score(tf, np.array([t.count for t in terms], float),
                   np.array([t.idf for t in terms]), np.array([t.pidf for t in terms]),
                   (e - s + 1).astype(np.float64), runs, dated, avglen, settings, named,
                   asked)
    return s, e, scores, runs, held


def _values(ev: Evaluator, feature: str, region: Region, s: np.ndarray,
            e: np.ndarray) -> np.ndarray:
    """The value of `feature` over each memory [s, e] (inside `region`), NaN where none."""
    out = np.full(len(s), np.nan)
    if len(s) and ev.lists.fid(feature) is not None:
        found = ev.lists.inside(feature, region.los, region.his)
        at = np.minimum(np.searchsorted(s, found.starts), len(s) - 1)
        own = (s[at] == found.starts) & (e[at] == found.ends)
        out[at[own]] = found.values[own]
    return out


def _followed(ev: Evaluator, cnode, terms: list, dates: list, avglen: float,
              settings: Context, time_feature: str, k: int, space: int, documents: int,
              size: int | None) -> tuple | None:
    """(starts, ends, scores) of the memories that may be among the k best, following
    the postings (the module docstring's "What a recall reads"): the others scored 0.
    None when the memories to read around the holders of the words taken could be more
    than 1 / ROUND of the filter's `size` (by the words' df: a round that may not end it
    costs too much then, and reading the filter whole is cheaper)."""
    order = sorted(range(len(terms)), key=lambda w: (terms[w].df, w))
    zone = settings.zone()
    radius = zone + max(settings.window, settings.reach)
    holders: dict[int, Intervals] = {}
    taken = 0
    while True:
        taken = min(max(2 * taken, 1), len(order))    # 1, 2, 4, ... words
        rest = order[taken:]
        if size is not None and \
                sum(terms[w].df for w in order[:taken]) * (2 * radius + 1) * ROUND >= size:
            return None   # (df: the holders anywhere, an upper bound of those in the filter)
        bound = sum(terms[w].bound(settings) for w in rest)
        if rest and dates:
            bound += settings.dates * sum(weight for _, _, weight in dates)
        if bound > sum(terms[w].bound(settings) for w in order[:taken]):
            continue      # (the words taken could not outscore the rest: take more first)
        bound *= 1.0 + settings.length  # (the length prior's factor is below it, the
        #                                  asking prior's at most 1)
        for w in order[:taken]:
            if w not in holders:
                holders[w] = _holders(ev, cnode, terms[w].forms + terms[w].labels)
        held = _union([holders[w] for w in order[:taken]])
        if not len(held):
            if not rest:
                return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
            continue
        docs, region, cuts = _stretches(ev, cnode, held, radius, space, documents)
        s, e, scores, runs, held_by = _scored(ev, docs, region, cuts, terms, dates, avglen,
                                              settings, time_feature)
        mine = held_by[order[:taken]].any(axis=0).astype(np.float64)[None, :]
        near = mine[0] + kernels.context_sums(mine, runs, 1.0, 1.0, zone)[0]
        scores = np.where(near > 0, scores, 0.0)
        positive = scores[scores > 0]
        kth = np.partition(positive, len(positive) - k)[len(positive) - k] \
            if k and len(positive) >= k else 0.0
        if not rest or (k and kth > 0 and kth >= bound):
            return s, e, scores


def _holders(ev: Evaluator, cnode, forms: tuple) -> Intervals:
    """The memories the filter selects that hold one of the forms (words, or label
    words: LABEL_WORD + a word, over the whole memory)."""
    parts = [ev.lists.whole(f).starts for f in forms]
    points = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))
    docs = ev.lists.containing(":", points, points)
    if not len(docs):
        return docs
    return ev.eval_in(cnode, Region(docs.starts, docs.ends))


def _union(parts: list) -> Intervals:
    """The union of GC-lists of documents (disjoint intervals)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return Intervals.empty()
    s = np.concatenate([p.starts for p in parts])
    e = np.concatenate([p.ends for p in parts])
    s, first = np.unique(s, return_index=True)
    e = e[first]
    return Intervals(s, e, np.zeros(len(s)))


def _stretches(ev: Evaluator, cnode, held: Intervals, radius: int, space: int,
               documents: int) -> tuple:
    """(docs, region, cuts): the filter's memories from the `radius`-th before each of
    `held` (memories the filter selects) to the `radius`-th after it, or to the ends; the
    region they were found in; where a memory does not follow the one before in the
    filter. The filter is evaluated only around them, in ranges widened until they hold
    as many."""
    hs, he = held.starts, held.ends
    pad = (radius + 1) * max(space // max(documents, 1), 1)
    below = np.full(len(hs), pad, dtype=np.int64)
    above = below.copy()
    while True:
        los = np.maximum(hs - below, 0)
        his = np.minimum(he + above, space - 1)
        ms, me = kernels.merge_ranges(los, his)
        region = Region(ms, me)
        docs = ev.eval_in(cnode, region)
        at = np.searchsorted(docs.starts, hs)
        fewer = at - np.searchsorted(docs.starts, los) < radius
        after = np.searchsorted(docs.starts, his, "right") - at - 1 < radius
        wider_below = fewer & (los > 0)
        wider_above = after & (his < space - 1)
        if not wider_below.any() and not wider_above.any():
            part = np.searchsorted(ms, docs.starts, "right")
            cuts = np.concatenate(([False], part[1:] != part[:-1])) if len(part) else \
                np.zeros(0, dtype=bool)
            return docs, region, cuts
        below[wider_below] *= 4
        above[wider_above] *= 4
