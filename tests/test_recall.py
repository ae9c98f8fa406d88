"""Context recall (annodb/recall.py), Memory.recall's default for free text: a memory
borrows the words of its neighbours in its session, on real LMDB files; its kernel and the
whole score against their brute-force twins in tests/naive.py."""

import datetime
import math
import tempfile
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import annodb
import naive
from annodb import kernels, recall
from annodb.errors import RankingError
from annodb.gcl import Evaluator
from annodb.memory import label, where_node

HOUR = 3600.0
DAY = 24 * HOUR
UTC = datetime.timezone.utc


@pytest.fixture
def mem(tmp_path):
    with annodb.Memory(tmp_path / "memory.db") as m:
        yield m


def texts(entries):
    return [e.text for e in entries]


def test_the_turn_before_lends_its_words(mem):
    """An answer that does not repeat the question's words is found through the memory
    before it in the same session, above a memory that shares as many of the question's
    words (and is shorter) but whose neighbours are about something else."""
    mem.remember("We finally went camping at the lake", time=0.0)
    mem.remember("Oh nice, how was it?", time=60.0)
    mem.remember("The kids loved it so much", time=120.0)
    mem.remember("Kids at the dentist", time=10 * 24 * HOUR)
    mem.remember("That must have been stressful", time=10 * 24 * HOUR + 60.0)
    got = texts(mem.recall("camping kids", k=5))
    assert "We finally went camping at the lake" in got[:2]
    assert got.index("The kids loved it so much") < got.index("Kids at the dentist")
    # plain BM25 puts the dentist above the answer: it is shorter
    assert texts(mem.recall("camping kids", k=5, rank="bm25")) == [
        "We finally went camping at the lake", "Kids at the dentist",
        "The kids loved it so much"]


def test_a_memory_found_through_its_context_shows_no_cover(mem):
    """A memory that holds no word of the question (found through its neighbour) has no
    cover: its hit's cover is None (null in JSON) and its snippet marks nothing, while
    the memory holding the word has it marked."""
    a = mem.remember("We finally went camping at the lake", time=0.0)
    b = mem.remember("Yes, with the kids, it was lovely", time=60.0)
    got = mem.recall("camping", k=5)
    assert [e.docno for e in got] == [a, b]
    assert "<cover>camping</cover>" in got[0].snippet
    assert got[1].snippet == "Yes, with the kids, it was lovely"
    with mem.db.read() as r:
        hits = recall.search(r, "camping", k=5)
        assert [h.docno for h in hits] == [a, b]
        assert hits[0].cover is not None and hits[1].cover is None
        assert hits[1].as_dict()["cover"] is None
        assert hits[1].snippet == "Yes, with the kids, it was lovely"
        assert [h.cover for h in recall.search(r, "camping", k=5, snippets=False)][1] \
            is not None   # (without snippets no cover is looked for: the memory's start)


def test_a_longer_memory_matching_as_well_ranks_first(mem):
    """Of two memories that hold the question's word once, the one that says more ranks
    first (the length prior); plain BM25 length normalisation alone puts the shorter
    first."""
    short = mem.remember("Wow, Melanie!", time=0.0)
    news = mem.remember("Melanie signed up for a pottery class and made a bowl", time=DAY)
    for i in range(4):
        mem.remember(f"The weather was grey and cold on day {i}", time=DAY * (5 + i))
    assert [e.docno for e in mem.recall("Melanie", k=2)] == [news, short]
    with mem.db.read() as r:
        flat = recall.search(r, "Melanie", k=2, settings=replace(recall.CONTEXT, length=0.0))
        assert [h.docno for h in flat] == [short, news]


def test_neighbours_across_a_silence_lend_nothing(mem):
    """Memories more than half an hour apart are different sessions: the later one
    borrows nothing from the earlier, however close their addresses."""
    a = mem.remember("Planning the hiking trip to the Alps", time=0.0)
    b = mem.remember("It went really well", time=60.0)
    c = mem.remember("It went really badly", time=2 * HOUR)
    got = mem.recall("hiking trip", k=5)
    assert [e.docno for e in got] == [a, b]
    assert c not in [e.docno for e in got]


def test_neighbours_are_the_memories_that_pass_the_filter(mem):
    """With a filter, a memory's neighbours are the nearest memories that pass it, so
    another user's memories written in between neither lend nor break the context."""
    a1 = mem.remember("Alice: my sister moved to Lisbon", user="alice", time=0.0)
    mem.remember("Bob: Lisbon is great for surfing", user="bob", time=10.0)
    a2 = mem.remember("Alice: she loves it there", user="alice", time=20.0)
    b2 = mem.remember("Bob: I love it there too", user="bob", time=30.0)
    got = mem.recall("where did the sister move to Lisbon", k=5, where={"user": "alice"})
    assert [e.docno for e in got] == [a1, a2]
    bob = mem.recall("love it there Lisbon", k=5, where={"user": "bob"})
    assert b2 in [e.docno for e in bob]
    assert all(e.metadata["user"] == "bob" for e in bob)


def test_a_word_most_memories_hold_is_not_lent(mem):
    """A word held by more than a fifth of the memories (a speaker's name on every turn)
    scores where it is, and is not lent to its neighbours."""
    for i in range(5):
        mem.remember(f"Dana said, note {i} about the weather", time=60.0 * i)
        mem.remember(f"Eli said, reply {i}", time=60.0 * i + 30)
    got = mem.recall("dana", k=20)
    assert len(got) == 5 and all(e.text.startswith("Dana said") for e in got)


def test_a_date_in_the_question_prefers_memories_of_that_day(mem):
    """A day, month or year the question names is matched by the memories' times:
    between two memories equal in words, the one of that day ranks first."""
    may = datetime.datetime(2023, 5, 8, 23, 30, tzinfo=UTC).timestamp()
    june = datetime.datetime(2023, 6, 20, 9, 0, tzinfo=UTC).timestamp()
    a = mem.remember("We talked about the new garden", time=june)
    b = mem.remember("We talked about the new garden", time=may)
    assert [e.docno for e in mem.recall("garden", k=2)] == [a, b]   # ties: by address
    for asked in ("What about the garden on 8 May, 2023?", "the garden, May 8th 2023",
                  "the garden in May 2023", "garden 2023-05-08"):
        assert [e.docno for e in mem.recall(asked, k=2)] == [b, a], asked


def test_a_question_naming_a_label_prefers_the_memories_carrying_it(mem):
    """A word of the question that one of a memory's metadata strings holds (a speaker's
    name, a user) adds to the memory's score, whether or not any memory's text holds the
    word: between memories equal in words, the one whose label the question names comes
    first."""
    a = mem.remember("I finished the book about whales", speaker="Maria", time=0.0)
    b = mem.remember("I finished the book about whales", speaker="John Smith",
                     time=20 * HOUR)
    assert [e.docno for e in mem.recall("book whales", k=2)] == [b, a]   # ties: newer
    assert [e.docno for e in mem.recall("What book did Maria read?", k=2)] == [a, b]
    assert [e.docno for e in mem.recall("whales, smith", k=2)] == [b, a]
    mem.remember("Maria and John Smith said hello", time=40 * HOUR)   # now a text word
    got = [e.docno for e in mem.recall("What book did Maria read?", k=3)]
    assert got.index(a) < got.index(b)
    assert [e.docno for e in mem.recall("maria", k=3)][0] not in (a, b)  # (no text word)


def utc(*date) -> float:
    return datetime.datetime(*date, tzinfo=UTC).timestamp()


def test_date_ranges():
    """The dates a text names, in UTC (as Memory reads a naive datetime); ambiguous or
    impossible ones name nothing."""
    one = (utc(2023, 12, 11), utc(2023, 12, 12))
    assert recall.date_ranges("on 11 December, 2023") == [one]
    assert recall.date_ranges("December 11th, 2023 and 11 Dec 2023") == [one]
    assert recall.date_ranges("in Sept. 2023") == [(utc(2023, 9, 1), utc(2023, 10, 1))]
    assert recall.date_ranges("back in 1999") == [(utc(1999, 1, 1), utc(2000, 1, 1))]
    assert recall.date_ranges("in May") == recall.date_ranges("31 February 2023") == []
    assert recall.date_ranges("error 12345, port 8080") == []


def test_event_ranges():
    """The dates a memory's text names relative to its time, in UTC, by the calendar
    (a week from Monday); nothing without a time."""
    wed = utc(2023, 5, 10, 15, 30)      # a Wednesday afternoon
    assert recall.event_ranges("Yesterday I went camping", wed) == \
        [(utc(2023, 5, 9), utc(2023, 5, 10))]
    assert recall.event_ranges("watched it last night, and tomorrow again", wed) == \
        [(utc(2023, 5, 9), utc(2023, 5, 10)), (utc(2023, 5, 11), utc(2023, 5, 12))]
    assert recall.event_ranges("the day before yesterday", wed) == \
        [(utc(2023, 5, 8), utc(2023, 5, 9))]
    assert recall.event_ranges("3 days ago; a couple of days ago", wed) == \
        [(utc(2023, 5, 7), utc(2023, 5, 8)), (utc(2023, 5, 8), utc(2023, 5, 9))]
    assert recall.event_ranges("last week", wed) == [(utc(2023, 5, 1), utc(2023, 5, 8))]
    assert recall.event_ranges("two weeks ago", wed) == [(utc(2023, 4, 24), utc(2023, 5, 1))]
    assert recall.event_ranges("last weekend", wed) == [(utc(2023, 5, 6), utc(2023, 5, 8))]
    assert recall.event_ranges("last weekend", utc(2023, 5, 13, 12)) == \
        [(utc(2023, 5, 6), utc(2023, 5, 8))]     # (on a Saturday: the weekend before)
    assert recall.event_ranges("next weekend", wed) == [(utc(2023, 5, 13), utc(2023, 5, 15))]
    assert recall.event_ranges("last month", utc(2023, 1, 20)) == \
        [(utc(2022, 12, 1), utc(2023, 1, 1))]
    assert recall.event_ranges("a year ago", wed) == [(utc(2022, 1, 1), utc(2023, 1, 1))]
    assert recall.event_ranges("next month", wed) == [(utc(2023, 6, 1), utc(2023, 7, 1))]
    assert recall.event_ranges("last Saturday", wed) == [(utc(2023, 5, 6), utc(2023, 5, 7))]
    assert recall.event_ranges("last Wednesday", wed) == [(utc(2023, 5, 3), utc(2023, 5, 4))]
    assert recall.event_ranges("99 years ago", utc(50, 6, 1)) == []   # (no year -49)
    assert recall.event_ranges("yesterday", 1e18) == []
    assert recall.event_ranges("we talked at length about the week", wed) == []
    assert recall.event_ranges("yesterday", float("nan")) == []
    assert recall.memory_event("last month and yesterday", wed) == \
        (utc(2023, 5, 9), utc(2023, 5, 10))      # (the shortest)
    assert recall.memory_event("nothing dated", wed) is None


def test_a_date_the_memory_names_matches_the_question(mem):
    """A memory saying "last night" is matched by a question naming the day before the
    memory's time, as a memory of that day would be: between memories equal in words, it
    ranks first for that day, and adds nothing for another."""
    may2 = datetime.datetime(2023, 5, 2, 10, 0, tzinfo=UTC).timestamp()
    a = mem.remember("I watched a great movie at home", time=may2)
    b = mem.remember("I watched a great movie last night", time=may2 + 7200)
    c = mem.remember("I watched a great movie last night", time=may2 + 40 * 86400)
    got = [e.docno for e in mem.recall("What movie did I watch on 1 May, 2023?", k=3)]
    assert got[0] == b
    assert [e.docno for e in mem.recall("movie watched 2023-06-10", k=3)][0] == c
    scores = {e.docno: e.score for e in mem.recall("movie watched 2023-05-02", k=3)}
    assert scores[a] == scores[b] > scores[c]    # (b's night was the 1st: the 2nd is its time)


def test_asking():
    """The share of a text's tokens in its sentences ending in a question mark."""
    assert recall.asking("How was the camping trip?") == 1.0
    assert recall.asking("Camping was great! How are the kids?") == 4 / 7
    assert recall.asking('Mel said, "Hey! How have you been?" and waved') == 4 / 9
    assert recall.asking("Really?! Yes. Why?") == 2 / 3
    assert recall.asking("No question here. None!") == 0.0
    assert recall.asking("?? ...") == 0.0 and recall.asking("") == 0.0


def test_a_memory_that_asks_ranks_below_one_that_tells(mem):
    """Of two memories holding the same words, the one that asks ranks below the one that
    states them (the asking prior), though it is the newer (which a tie would put first);
    Memory stores the share only for the memory that asks."""
    tells = mem.remember("Camping at the lake with the kids.", time=0.0)
    asks = mem.remember("Camping at the lake with the kids?", time=DAY)
    mem.remember("The weather was grey and cold", time=5 * DAY)
    got = mem.recall("camping with the kids", k=2)
    assert [e.docno for e in got] == [tells, asks]
    assert got[1].score == pytest.approx(got[0].score * (1 - recall.CONTEXT.asks))
    with mem.db.read() as r:
        shares = Evaluator(r).lists.whole(recall.ASKING)
        assert shares.values.tolist() == [1.0]
        assert shares.starts.tolist() == [r.document(asks).start]
        flat = recall.search(r, "camping with the kids", k=2,
                             settings=replace(recall.CONTEXT, asks=0.0))
        assert flat[0].score == flat[1].score


def test_rank_names_are_checked(mem):
    """recall's `rank` takes "context" or the engine's rankers; "context" is for free
    text only."""
    mem.remember("tea and coffee")
    assert texts(mem.recall("tea", rank="context")) == ["tea and coffee"]
    assert texts(mem.recall("tea", rank="bm25+rm3")) == ["tea and coffee"]
    with pytest.raises(RankingError, match="choose one of ssr, bm25"):
        mem.recall("(^ tea coffee)", rank="context")
    with pytest.raises(RankingError, match="choose one of ssr, .*, context"):
        mem.recall("tea", rank="nope")


# the kernel and the whole score against their definitions -------------------------------

@settings(max_examples=200)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=12).flatmap(
    lambda sizes: st.tuples(
        st.just(sizes),
        st.lists(st.lists(st.floats(0, 100), min_size=len(sizes), max_size=len(sizes)),
                 min_size=1, max_size=3))),
       st.floats(0, 1), st.floats(0, 1), st.integers(0, 4))
def test_context_sums_is_its_definition(shape, before, after, reach):
    """kernels.context_sums equals the term-by-term sum of tests/naive.py (up to
    floating-point rounding: it sums by a recurrence)."""
    steps, rows = shape
    runs = np.cumsum(steps).astype(np.int64)
    got = kernels.context_sums(np.array(rows, dtype=np.float64).reshape(len(rows), len(runs)),
                               runs, before, after, reach)
    want = naive.context_sums(rows, runs.tolist(), before, after, reach)
    assert np.allclose(got, np.array(want).reshape(got.shape), rtol=1e-9, atol=1e-9)


@st.composite
def score_inputs(draw):
    """Random arguments of recall.score: counts of 1-3 words over 0-30 memories in runs,
    lengths, dates, labels (or none) and settings (decayed or not, k1 0 included)."""
    n = draw(st.integers(0, 30))
    words = draw(st.integers(1, 3))
    tf = np.array(draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 5]), min_size=n * words,
                                max_size=n * words)), dtype=np.float64).reshape(words, n)
    runs = np.cumsum(draw(st.lists(st.sampled_from([0, 0, 0, 1]), min_size=n,
                                   max_size=n))).astype(np.int64)
    lengths = np.array(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)), float)
    dated = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 1.7]), min_size=n,
                                   max_size=n)))
    named = draw(st.sampled_from([None, "some"]))
    if named:
        named = np.array(draw(st.lists(st.sampled_from([0.0, 0.4]), min_size=n,
                                       max_size=n)))
    counts = np.array(draw(st.lists(st.integers(1, 2), min_size=words, max_size=words)),
                      float)
    idfs = np.array(draw(st.lists(st.floats(0.01, 5), min_size=words, max_size=words)))
    pidfs = np.array(draw(st.lists(st.floats(0.0, 2), min_size=words, max_size=words)))
    settings_ = recall.Context(
        k1=draw(st.sampled_from([0.9, 1.2, 0.0])), b=draw(st.sampled_from([0.4, 0.0, 1.0])),
        before=draw(st.sampled_from([0.5, 1.0, 0.0, 0.3])),
        after=draw(st.sampled_from([0.3, 1.0, 0.7])), window=draw(st.integers(0, 9)),
        reach=draw(st.integers(0, 12)), common=draw(st.sampled_from([0.4, 1.0, 0.0])),
        passage_b=draw(st.sampled_from([0.6, 0.0])))
    return tf, counts, idfs, pidfs, lengths, runs, dated, draw(st.floats(1, 30)), \
        settings_, named


@settings(max_examples=300)
@given(score_inputs())
def test_context_scores_is_the_formula_to_the_bit(args):
    """kernels.context_scores (recall.score) gives the float64 the formula computed array
    by array in numpy gives (tests/naive.py), to the bit, 0 / 0 included (k1 = 0)."""
    tf, counts, idfs, pidfs, lengths, runs, dated, avglen, settings_, named = args
    got = recall.score(tf, counts, idfs, pidfs, lengths, runs, dated, avglen, settings_,
                       named)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = naive.context_scores(tf, counts, idfs, pidfs, lengths, runs, dated, avglen,
                                    settings_, named)
    assert np.array_equal(got, want, equal_nan=True)


@given(st.lists(st.integers(0, 60), max_size=30),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=12))
def test_word_counts_is_the_points_inside(points, steps):
    """kernels.word_counts counts the points inside each interval of a GC-list
    (overlapping ones too), as two searchsorted calls do."""
    pts = np.sort(np.array(points, dtype=np.int64))
    s, e, at = [], [], 0
    for gap, width in steps:        # starts and ends both ascending
        at += gap + 1
        start = at
        end = max(start + width, (e[-1] + 1) if e else 0)
        s.append(start)
        e.append(end)
    s, e = np.array(s, dtype=np.int64), np.array(e, dtype=np.int64)
    want = np.searchsorted(pts, e, "right") - np.searchsorted(pts, s, "left")
    assert np.array_equal(kernels.word_counts(pts, s, e), want.astype(np.float64))
    if len(s) > 1:
        with pytest.raises(ValueError, match="GC-list"):
            kernels.word_counts(pts, s[::-1].copy(), e[::-1].copy())


def test_ties_give_every_memory_scoring_as_the_kth(tmp_path):
    """recall.search(ties=True): the k best and every other memory scoring as the k-th,
    in address order after them; without it, the k best only."""
    db = annodb.open(str(tmp_path / "t.db"))
    with db.write() as w:
        for i in range(12):
            w.add({"text": "apple pie" if i % 3 else "apple"}, docno=f"d{i}")
    with db.read() as r:
        plain = recall.search(r, "apple pie", k=2)
        tied = recall.search(r, "apple pie", k=2, ties=True)
        every = recall.search(r, "apple pie", k=12)
    db.close()
    assert [h.docno for h in plain] == [h.docno for h in every][:2]
    kth = every[1].score
    assert [h.docno for h in tied] == [h.docno for h in every if h.score >= kth]
    assert len(tied) == 8 and len({h.score for h in tied}) == 1


WORDS = ["w1", "w2", "w3", "w4", "w5"]
BASE = datetime.datetime(2023, 5, 1, tzinfo=UTC).timestamp()


PHRASES = ["", "", "", "yesterday", "two days ago", "last week", "last month"]
ASKS = ["", "", "", " ?", " ? w4", " . w2 ?", " w1 ?! w3 ."]   # (ends of a memory's text)


def words(text: str) -> list[str]:
    """The tokens of a test memory's text: its words without the marks . ! ?"""
    return [w for w in text.split() if w.strip(".!?")]


def event(phrase: str, t: float):
    """The date `phrase` names relative to the time t (UTC), worked out by hand."""
    moment = datetime.datetime.fromtimestamp(t, UTC)
    day = datetime.datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    one = datetime.timedelta(days=1)
    if phrase in ("yesterday", "two days ago"):
        back = 1 if phrase == "yesterday" else 2
        return ((day - back * one).timestamp(), (day - (back - 1) * one).timestamp())
    if phrase == "last week":
        monday = day - (day.weekday() + 7) * one
        return monday.timestamp(), (monday + 7 * one).timestamp()
    if phrase == "last month":
        first = day.replace(day=1)
        before = (first - one).replace(day=1)
        return before.timestamp(), first.timestamp()
    return None


@st.composite
def memories(draw):
    n = draw(st.integers(1, 9))
    out = []
    t = BASE
    for _ in range(n):
        toks = draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=6))
        toks = toks + draw(st.sampled_from(PHRASES)).split()
        t += draw(st.sampled_from([0.0, 60.0, 1800.0, 1801.0, 3 * 24 * HOUR, 40 * 24 * HOUR]))
        timed = draw(st.sampled_from([True, True, True, False]))
        out.append((toks, t if timed else None,
                    draw(st.sampled_from(["a", "b", "a", "w2", "w5 b"])),
                    draw(st.sampled_from(ASKS))))
    return out


@settings(max_examples=40)
@given(memories(), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
       st.sampled_from(["", " 2023", " May 2023", " 2023-05-04", " 2024", " 2023-04-30",
                        " April 2023", " 2023-05-02"]),
       st.booleans(), st.sampled_from([recall.CONTEXT,
                                       recall.Context(common=1.0, before=0.8, after=0.0),
                                       recall.Context(passage=2.0, dates=0.0, b=0.0,
                                                      labels=1.0, asks=0.9),
                                       recall.Context(window=1, reach=2, common=0.0)]),
       st.sampled_from([None, True, False]), st.integers(1, 12))
def test_context_recall_is_its_definition(mems, query, date, filtered, context, scan, k):
    """recall.search over a real database gives the scores and order of the brute-force
    computation of the same formula (tests/naive.py), with and without a filter, memories
    with and without a time, over sessions cut at the gap, labels holding the query's
    words (and memories written without label words, as before labels were scored),
    memories whose text names a date relative to their time ("yesterday", "last week")
    and questions naming that date, memories whose sentences ask (and memories written
    without their share, as before it was stored: they count as asking nothing)."""
    with tempfile.TemporaryDirectory() as tmp, annodb.Memory(f"{tmp}/m.db") as mem:
        stored, labels, events, asked = [], {}, {}, {}
        for i, (toks, t, user, asks) in enumerate(mems):
            text = " ".join(toks) + asks
            if t is not None and text.strip():
                docno = mem.remember(text, user=user, time=t)
                asked[docno] = naive.asking(text)
                labels[docno] = set(recall.label_words(user))
                phrase = " ".join(w for w in toks if w not in WORDS)
                if event(phrase, t) is not None:
                    events[docno] = event(phrase, t)
            else:  # (remember stamps every memory with a time and refuses an empty text:
                #      one without a time, or empty as an older annodb kept it, written here)
                with mem.db.write() as w:
                    record = {"text": text, "user": user} | ({} if t is None else {"time": t})
                    docno = w.add(record, docno=f"x{i}", text_fields=["text"]).docno
                    doc = w.document(docno)
                    w.annotate(label("user", user), doc.start, doc.end)
            stored.append((docno, words(text), t, user))
        with mem.db.read() as r:
            times = r.query(":time:")
            at = dict(zip(times.starts.tolist(), times.values.tolist()))
            model = [(d, toks, at.get(r.document(d).start)) for d, toks, _, _ in stored]
        where = {"user": "a"} if filtered else None
        selected = {d for d, _, _, u in stored if not filtered or u == "a"}
        text = " ".join(query) + date
        counts = {}
        for w in query:
            counts[w] = counts.get(w, 0) + 1
        every = dict(naive.context_recall(model, selected, list(counts.items()),
                                          recall.date_ranges(text), 100, context, labels,
                                          events, asked))
        with mem.db.read() as r:
            got = recall.search(r, text, k=k, container=where_node(where),
                                settings=context, snippets=False, scan=scan)
        assert len(got) == min(k, len(every))
        for h in got:
            assert math.isclose(h.score, every[h.docno], rel_tol=1e-9, abs_tol=1e-12)
        order = [h.score for h in got]
        assert all(a >= b - 1e-9 * abs(a) for a, b in zip(order, order[1:]))
        left = [v for d, v in every.items() if d not in {h.docno for h in got}]
        assert not got or all(v <= got[-1].score * (1 + 1e-9) for v in left)


SKEWED = ["w1"] * 6 + ["w2"] * 3 + ["w3"] * 2 + ["w4", "w5", "w6", "w7"]


@settings(max_examples=100)
@given(st.lists(st.tuples(st.lists(st.sampled_from(SKEWED), min_size=1, max_size=4),
                          st.sampled_from([0.0, 60.0, 60.0, 60.0, 4000.0]),
                          st.sampled_from(["a", "a", "b", "c w6", "w7"]),
                          st.sampled_from(PHRASES), st.sampled_from(ASKS)),
                min_size=1, max_size=45),
       st.lists(st.sampled_from(["w1", "w2", "w3", "w4", "w5", "w6", "w7"]), min_size=1,
                max_size=4),
       st.sampled_from([None, "a", "b"]), st.integers(1, 8),
       st.sampled_from([recall.Context(window=1, reach=2), recall.Context(window=2, reach=1),
                        recall.Context(window=3, reach=3, dates=0.0)]),
       st.sampled_from(["", "", " 2023-04-30", " April 2023", " 2023"]))
def test_following_the_postings_is_exact(mems, query, user, k, context, date):
    """Following the postings (the filter evaluated only around the memories holding the
    words taken so far, stopped once the k-th best score beats what any other memory could
    score) gives the k best of the brute-force definition, over many memories of several
    users interleaved, with words of very different frequencies and small windows, query
    words that labels hold (some of them no text), and a date the question names that
    some memories' times hold and others' texts name ("yesterday", "last month"), and
    memories that ask (the asking prior only lowers a score: the bound stays one)."""
    with tempfile.TemporaryDirectory() as tmp, annodb.Memory(f"{tmp}/m.db") as mem:
        t = BASE
        rows = []
        for toks, step, who, phrase, asks in mems:
            t += step
            rows.append({"text": " ".join(toks + phrase.split()) + asks, "user": who,
                         "time": t})
        docnos = mem.remember_many(rows)
        events = {d: event(p, r["time"]) for d, r, (_, _, _, p, _) in zip(docnos, rows, mems)
                  if event(p, r["time"]) is not None}
        asked = {d: naive.asking(r["text"]) for d, r in zip(docnos, rows)}
        model = [(d, words(r["text"]), r["time"]) for d, r in zip(docnos, rows)]
        where = None if user is None else {"user": user}
        selected = {d for d, r in zip(docnos, rows) if user is None or r["user"] == user}
        counts = {}
        for w in query:
            counts[w] = counts.get(w, 0) + 1
        labels = {d: set(recall.label_words(r["user"])) for d, r in zip(docnos, rows)}
        every = dict(naive.context_recall(model, selected, list(counts.items()),
                                          recall.date_ranges(date), 100, context, labels,
                                          events, asked))
        with mem.db.read() as r:
            for scan in (False, True):
                got = recall.search(r, " ".join(query) + date, k=k, container=where_node(where),
                                    settings=context, snippets=False, scan=scan)
                assert len(got) == min(k, len(every))
                for h in got:
                    assert math.isclose(h.score, every[h.docno], rel_tol=1e-9, abs_tol=1e-12)
                kept = {h.docno for h in got}
                assert not got or all(v <= got[-1].score * (1 + 1e-9)
                                      for d, v in every.items() if d not in kept)


def test_following_the_postings_finds_a_memory_by_its_label():
    """Following the postings, a memory whose label holds a rare word of the question,
    far from any memory whose text holds it, is scored too: it is the best here (a label
    weighing as much as the word), and stopping after the rare word's text holders would
    miss it."""
    context = recall.Context(window=1, reach=2, labels=1.0)
    with tempfile.TemporaryDirectory() as tmp, annodb.Memory(f"{tmp}/m.db") as mem:
        rows = [{"text": "zeta zeta", "user": "a", "time": BASE}]
        for i in range(1, 40):
            rows.append({"text": "w2" if i % 2 else "w1", "user": "zeta" if i == 31 else "a",
                         "time": BASE + 4000.0 * i})   # (each memory a session of its own)
        docnos = mem.remember_many(rows)
        model = [(d, r["text"].split(), r["time"]) for d, r in zip(docnos, rows)]
        labels = {d: set(recall.label_words(r["user"])) for d, r in zip(docnos, rows)}
        every = naive.context_recall(model, set(docnos), [("zeta", 1), ("w2", 1)], [], 3,
                                     context, labels)
        assert every[0][0] == docnos[31]
        with mem.db.read() as r:
            for scan in (False, True):
                got = recall.search(r, "zeta w2", k=1, settings=context, snippets=False,
                                    scan=scan)
                assert [(h.docno, round(h.score, 9)) for h in got] == \
                    [(d, round(s, 9)) for d, s in every[:1]]


def test_following_the_postings_bounds_a_date_named_by_a_memory():
    """A memory holding only a common word of the question, whose text names the day
    before its time ("yesterday", the last day of the year the question names), adds at
    most that year's weight for it (the date as long as the longer of the two), so
    following the postings may stop after the rare words and still give the brute-force
    best: scanning and following agree with tests/naive.py."""
    context = recall.Context(window=1, reach=1)
    start = utc(2024, 1, 1)
    with tempfile.TemporaryDirectory() as tmp, annodb.Memory(f"{tmp}/m.db") as mem:
        rows = [{"text": "zeta eta w2", "time": start}]
        for i in range(1, 40):
            rows.append({"text": "w1 yesterday" if i == 10 else ("w1 w2" if i % 2 else "w3"),
                         "time": start + 4000.0 * i})   # (each memory a session of its own)
        docnos = mem.remember_many(rows)
        model = [(d, r["text"].split(), r["time"]) for d, r in zip(docnos, rows)]
        events = {docnos[10]: event("yesterday", rows[10]["time"])}
        assert events[docnos[10]] == (utc(2023, 12, 31), start)
        want = naive.context_recall(model, set(docnos), [("zeta", 1), ("eta", 1), ("w1", 1)],
                                    recall.date_ranges("2023"), 2, context, events=events)
        assert [d for d, _ in want] == [docnos[0], docnos[10]]
        with mem.db.read() as r:
            for scan in (False, True):
                got = recall.search(r, "zeta eta w1 2023", k=1, settings=context,
                                    snippets=False, scan=scan)
                assert [(h.docno, round(h.score, 9)) for h in got] == \
                    [(want[0][0], round(want[0][1], 9))]
