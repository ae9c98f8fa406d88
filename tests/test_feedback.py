"""BM25 with RM3 pseudo-relevance feedback ("bm25+rm3", annodb/feedback.py) against its
definition (naive.rm3), for GCL queries and free text; a sharded collection against one
database; stem classes fed back as one term; and a question whose answer holds none of
its words, found through the feedback."""

import dataclasses
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import annodb
from annodb import feedback, rankers, ranking
from annodb.errors import RankingError

import naive
import test_bm25
from test_bm25 import build, same_ranking

SETTINGS = settings(max_examples=int(os.environ.get("RM3_EXAMPLES", "60")),
                    deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
# two letters: fed back as they are (free text stems only longer words); skewed; "of" and
# "the" are stop words (dropped from free text's query by default)
WORDS = ["aa", "aa", "aa", "bb", "bb", "cc", "dd", "ee", "ff", "gg", "h1", "x", "of", "the"]


def collections(max_docs=30):
    return test_bm25.collections(max_docs=max_docs, words=WORDS, min_docs=4, min_words=1)


queries = st.lists(st.tuples(st.sampled_from(sorted(set(WORDS)) + ["zz"]),
                             st.integers(1, 3)), min_size=1, max_size=4,
                   unique_by=lambda x: x[0])


@pytest.fixture
def knobs():
    """Restores feedback's MAX_DF after a test changes it."""
    old = feedback.MAX_DF
    yield
    feedback.MAX_DF = old


@SETTINGS
@given(collections(), queries, st.integers(1, 12),
       st.sampled_from([(10, 10, 0.5, 0.1, False), (3, 2, 0.9, 0.5, True),
                        (2, 10, 0.0, 1.0, True), (30, 1, 1.0, 1.0, False),
                        (10, 20, 0.9, 0.1, True)]))
def test_rm3_equals_its_definition(tmp_path_factory, knobs, coll, query, k, params):
    fb_docs, fb_terms, original, max_df, stop = params
    feedback.MAX_DF = max_df
    fb = feedback.Feedback(fb_docs, fb_terms, original, stop)
    db, model = build(str(tmp_path_factory.mktemp("f") / "db"), *coll)
    try:
        with db.read() as r:
            def named(starts, scores):
                return [(r.document_at(s).docno, x)
                        for s, x in zip(starts.tolist(), scores.tolist())]
            # free text: every document may enter
            text = " ".join(w for w, n in query for _ in range(n))
            got = r.search_text(text, k=k, rank="bm25+rm3", snippets=False, feedback=fb)
            want = naive.rm3(model, query, k, fb_docs=fb_docs, fb_terms=fb_terms,
                             original=original, max_df=max_df, stop_words=stop)
            same_ranking([(h.docno, h.score) for h in got], want)
            # GCL: the matches only (the documents holding a query word); no stop words
            # dropped from it
            gcl = "(+ " + " ".join(w for w, n in query for _ in range(n)) + " zz)"
            ranked = r.rank(gcl, depth=k, rank="bm25+rm3",
                            scoring=ranking.bm25.scoring(feedback=fb))
            holding = {d[0] for d in model.docs
                       if any(d[1] <= p <= d[2] for w, _ in query
                              for p, _, _ in model.feature(w))}
            want = naive.rm3(model, query + [("zz", 1)] if all(w != "zz" for w, _ in query)
                             else query, k, only=holding, fb_docs=fb_docs,
                             fb_terms=fb_terms, original=original, max_df=max_df)
            same_ranking(named(ranked.starts, ranked.scores), want)
            assert ranked.total == len(holding)
    finally:
        db.close()


def test_stop_words_leave_the_query_unless_nothing_else_is_left(tmp_path):
    """By default (feedback.Feedback()) free text's stop words are dropped before BM25
    and RM3 see it: "the lineage of aaron" ranks as "lineage aaron"; a query of stop
    words only keeps them; Anserini's settings drop them too (its analyzer does), and
    Feedback(stop_words=False) keeps every word."""
    db = annodb.open(str(tmp_path / "db"))
    with db.write() as w:
        for i, text in enumerate(["the lineage of aaron", "aaron the priest of the tribe",
                                  "lineage of david", "moses and aaron", "of the the of",
                                  "to be or not to be"]):
            w.add(text, docno=f"d{i}")
    with db.read() as r:
        def ranked(text, **kw):
            return [(h.docno, h.score) for h in r.search_text(text, k=10, rank="bm25+rm3",
                                                               snippets=False, **kw)]
        assert ranked("the lineage of aaron") == ranked("lineage aaron")
        assert ranked("the lineage of aaron", feedback=feedback.ANSERINI) == \
            ranked("lineage aaron", feedback=feedback.ANSERINI)
        keep = dataclasses.replace(feedback.ANSERINI, stop_words=False)
        assert ranked("the lineage of aaron", feedback=keep) != \
            ranked("lineage aaron", feedback=keep)
        assert ranked("of the")[0][0] == "d4"         # stop words only: kept
        assert ranked("to be or not to be")[0][0] == "d5"
        with pytest.raises(RankingError, match="feedback terms"):
            ranked("aaron", feedback=feedback.Feedback(terms=-1))
        with pytest.raises(RankingError, match="original"):
            ranked("aaron", feedback=feedback.Feedback(original=1.5))
    db.close()


def test_rm3_without_feedback_is_bm25_order(tmp_path):
    """Nothing fed back (every word too common): the order is BM25's."""
    db = annodb.open(str(tmp_path / "db"))
    with db.write() as w:
        for i, text in enumerate(["aa bb", "aa aa bb", "bb cc", "aa"]):
            w.add(text, docno=f"d{i}")
    with db.read() as r:
        bm = [h.docno for h in r.search_text("aa bb", rank="bm25")]
        rm = [h.docno for h in r.search_text("aa bb", rank="bm25+rm3")]
        assert bm == rm
        assert r.search_text("qq", rank="bm25+rm3").hits == []
    db.close()


def _corpus():
    rng = np.random.default_rng(7)
    filler = ["stone", "river", "walked", "walking", "walks", "garden", "yellow", "table",
              "window", "music", "running", "runner", "runs", "quiet", "summer", "letter"]
    docs = [" ".join(rng.choice(filler, rng.integers(3, 12))) for _ in range(60)]
    docs += ["alice is allergic to peanuts", "alice allergic reaction peanuts epipen",
             "peanuts epipen anaphylaxis clinic", "alice walked to the river"]
    return docs


def test_sharded_rm3_ranks_exactly_as_one_database():
    docs = _corpus()
    with tempfile.TemporaryDirectory() as tmp:
        one = annodb.open(os.path.join(tmp, "one.db"))
        many = [annodb.open(os.path.join(tmp, f"{n}.shards"), shards=n) for n in (2, 3)]
        try:
            with one.write() as w:
                for i, d in enumerate(docs):
                    w.add({"id": f"d{i}", "title": d.split()[0], "body": d})
            for db in many:
                for i, d in enumerate(docs):
                    with db.write() as w:
                        w.add({"id": f"d{i}", "title": d.split()[0], "body": d})
            with one.read() as a:
                for db in many:
                    with db.read() as b:
                        for text in ("alice allergic", "walking river", "quiet summer runs"):
                            for box in (":", "title:"):
                                assert [h.as_dict() for h in a.search_text(
                                    text, k=20, rank="bm25+rm3", container=box)] == \
                                    [h.as_dict() for h in b.search_text(
                                        text, k=20, rank="bm25+rm3", container=box)]
                        for q in ("(+ alice river)", "(^ walked river)", "peanuts"):
                            assert [h.as_dict() for h in a.search(q, k=20, rank="bm25+rm3")] \
                                == [h.as_dict() for h in b.search(q, k=20, rank="bm25+rm3")]
        finally:
            one.close()
            for db in many:
                db.close()


def test_a_stem_class_is_fed_back_as_one_term(tmp_path, knobs):
    feedback.MAX_DF = 1.0  # (every filler word is in more than a tenth of the documents)
    db = annodb.open(str(tmp_path / "db"))
    with db.write() as w:
        for i, d in enumerate(_corpus()):
            w.add(d, docno=f"d{i}")
        w.add("gardening tips gardens gardened", docno="g0")
    with db.read() as r:
        words = ranking.text_words(r, "walks")
        expanded = ranking.rm3_words(r, words, ":", rankers.BM25RM3())
        forms = [set(f) for f, _ in expanded]
        assert {"walks", "walked", "walking"} <= forms[0]  # the query's term first
        assert sum(w for _, w in expanded) == pytest.approx(1.0)
        assert len({frozenset(f) for f in forms}) == len(forms)  # no class twice
        assert all(len({ranking.stem(x) for x in f}) == 1 for f in forms)
    db.close()


def test_feedback_finds_the_answer_without_the_question_words(tmp_path):
    """'alice allergic' holds none of the clinic note's words; the notes about Alice's
    allergy feed back 'peanuts' and 'epipen', which find it."""
    db = annodb.open(str(tmp_path / "db"))
    docs = _corpus()
    with db.write() as w:
        for i, d in enumerate(docs):
            w.add(d, docno=f"d{i}")
    clinic = f"d{docs.index('peanuts epipen anaphylaxis clinic')}"
    with db.read() as r:
        assert clinic not in [h.docno for h in r.search_text("alice allergic", k=20,
                                                             rank="bm25")]
        got = r.search_text("alice allergic", k=5, rank="bm25+rm3")
        assert clinic in [h.docno for h in got]
        assert got.query == "(+ alice allergic)"
    db.close()


def test_the_rank_name_is_checked(tmp_path):
    db = annodb.open(str(tmp_path / "db"))
    with db.write() as w:
        w.add("aa bb", docno="d0")
    with db.read() as r:
        with pytest.raises(RankingError, match="choose one of ssr, bm25, fused, sparse, "
                                               "bm25\\+rm3"):
            r.search_text("aa", rank="bm25+rm4")
    db.close()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.text(max_size=4) | st.sampled_from(
    ["Café", "CAFÉ", "naïve", "ǅ", "ß", "ẞ", " ", "'", "-", "\ud800"]), max_size=12).map(
        " ".join), st.booleans())
def test_word_counts_are_the_counts_of_the_tokens_in_order(text, fold):
    """What RM3 weighs a container's words by: each folded word (without diacritics when
    the database folds them) with its count, in order of first occurrence, as
    Counter(tokenizer.tokens(text)) gives them, for any text (a lone surrogate too)."""
    from collections import Counter

    from annodb.tokenizer import strip_diacritics, tokens
    words = tokens(text)
    if fold:
        words = [strip_diacritics(w) for w in words]
    assert list(feedback.word_counts(text, fold)) == list(Counter(words).items())


def test_the_terms_memo_numbers_each_term_once_across_threads_and_restarts(monkeypatch):
    """RM3's process-wide memo of words' terms: threads numbering overlapping words at once
    agree on every number, each number names the word's own term (-1 exactly for the
    words that may not be fed back), and a memo that starts over (past its limit) still
    answers the same terms."""
    import threading

    from annodb.scoring import stem
    words = [f"{a}{b}ing" for a in "abcdefghij" for b in "klmnopqrst"] + ["x", "a-b", "ok"]
    for limit in (1 << 17, 7):
        monkeypatch.setattr(feedback._Terms, "LIMIT", limit)
        terms = feedback._Terms(stem)
        got: list = [None] * 8
        start = threading.Barrier(8)

        def number(i):
            start.wait()
            mine = words[i:] + words[:i]
            numbers, names = terms.numbers(mine)
            got[i] = [(w, names[x] if x >= 0 else None) for w, x in zip(mine, numbers)]
        threads = [threading.Thread(target=number, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for pairs in got:
            assert all(t == (stem(w) if feedback.eligible(stem(w)) else None)
                       for w, t in pairs)
