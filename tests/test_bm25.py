"""BM25, BM25F and sparse-vector ranking against their definitions (naive.py), the pruned
top-k against the exhaustive one, the stored statistics against the lists, and BM25
against the bm25s package (method="lucene")."""

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import annodb
from annodb import bm25, kernels
from annodb import lists as lists_module
from annodb.check import check
from annodb.gcl import Evaluator
from annodb.query import Feature

import naive

SETTINGS = settings(max_examples=int(os.environ.get("BM25_EXAMPLES", "100")),
                    deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
# a skewed vocabulary: some words in most documents, some in few
WORDS = ["a", "a", "a", "b", "b", "c", "d", "e", "f", "g"]
DOC = Feature(":")


@st.composite
def collections(draw, max_docs=25, words=WORDS, min_docs=1, min_words=0):
    """(documents as word lists, erased ranges, deleted documents' indexes)."""
    docs = draw(st.lists(st.lists(st.sampled_from(words), min_size=min_words, max_size=12),
                         min_size=min_docs, max_size=max_docs))
    size = sum(max(len(d), 1) for d in docs)
    erased = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 3)),
                           max_size=3))
    deleted = draw(st.sets(st.integers(0, len(docs) - 1), max_size=3))
    return docs, [(p, min(p + d, size - 1)) for p, d in erased], sorted(deleted)


queries = st.lists(st.tuples(st.sampled_from(sorted(set(WORDS)) + ["zz"]),
                             st.integers(1, 3)), min_size=1, max_size=5, unique_by=lambda x: x[0])


def build(path, docs, erased, deleted):
    """The database and its model: documents in one transaction, erases and deletions in
    a second (df kept through both)."""
    model = naive.Model()
    db = annodb.open(path)
    with db.write() as w:
        for i, toks in enumerate(docs):
            w.add(" ".join(toks), docno=f"d{i}")
            model.add(f"d{i}", toks)
    with db.write() as w:
        erase_and_delete(w, model, erased, deleted)
    return db, model


def erase_and_delete(w, model, erased, deleted) -> None:
    """The ranges `erased` erased and the documents d<i> of `deleted` deleted, in the
    writer w and in the model alike."""
    for p, q in erased:
        w.erase(p, q)
        model.erase(p, q)
    for i in deleted:
        doc = next((d for d in model.docs if d[0] == f"d{i}"), None)
        if doc is not None:
            assert w.delete(f"d{i}")
            model.erase(doc[1], doc[2])


def engine_top(r, query, k, prune=True, k1=0.9, b=0.4, compiled=True):
    ev = Evaluator(r)
    terms = bm25.word_terms(ev, DOC, bm25.Scoring(k1, b), [((w,), n) for w, n in query],
                            r.statistics([w for w, _ in query]))
    s, _, sc = bm25.top(terms, k, prune=prune, compiled=compiled)
    return s, sc


def named(r, starts, scores):
    return [(r.document_at(s).docno, x) for s, x in zip(starts.tolist(), scores.tolist())]


def same_ranking(got, want):
    """Equal docnos and scores (to 1e-9), allowing reordering among near ties only."""
    assert len(got) == len(want), (got, want)
    for (gd, gs), (wd, ws) in zip(got, want):
        assert math.isclose(gs, ws, rel_tol=1e-9, abs_tol=1e-12), (got, want)
    assert {d for d, _ in got} == {d for d, _ in want} or \
        sorted(s for _, s in got) == pytest.approx(sorted(s for _, s in want))
    for (gd, gs), (wd, ws) in zip(got, want):
        if gd != wd:  # a tie in exact arithmetic, summed in another order
            assert math.isclose(gs, ws, rel_tol=1e-9)


@SETTINGS
@given(collections(), queries, st.integers(0, 12), st.sampled_from([(0.9, 0.4), (1.2, 0.75),
                                                                      (0.0, 0.0), (2.0, 1.0)]))
def test_bm25_equals_its_definition_and_pruning_changes_nothing(tmp_path_factory, coll, query,
                                                                k, params):
    db, model = build(str(tmp_path_factory.mktemp("b") / "db"), *coll)
    k1, b = params
    with db.read() as r:
        pruned = engine_top(r, query, k, True, k1, b)
        full = engine_top(r, query, k, False, k1, b)
        assert np.array_equal(pruned[0], full[0]) and np.array_equal(pruned[1], full[1])
        for prune in (True, False):  # the compiled steps and the Python ones: one result
            steps = engine_top(r, query, k, prune, k1, b, compiled=False)
            assert np.array_equal(steps[0], full[0]) and np.array_equal(steps[1], full[1])
        same_ranking(named(r, *pruned),
                     naive.bm25(model, [((w,), n) for w, n in query], k, k1, b))
    db.close()


@SETTINGS
@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30), min_size=20,
                max_size=80), queries, st.integers(1, 4))
def test_pruning_on_larger_collections(tmp_path_factory, docs, query, k):
    """Enough documents, and few results wanted, for pruning to drop most candidates."""
    db, model = build(str(tmp_path_factory.mktemp("p") / "db"), docs, [], [])
    with db.read() as r:
        full = engine_top(r, query, k, False)
        # leaders 0: the leaders' scores before every term, the words given by their
        # postings (most -1: no documents made) or by their documents (kept, and looked
        # up in for the leaders' scores: _Words.at_documents)
        # (bounded -1: the terms left bounded per cell at the first long term, their
        # documents' kept by the runs before; alone: the candidates above which phase 2
        # takes a term a call)
        # (table 0: each word's documents made by the table of where each cell's
        # documents begin, cells of 2 addresses: the first run's, where they are made)
        saved = (bm25.LEADERS_OVER, bm25.DOCUMENTS_MOST, bm25.BOUNDED_OVER,
                 bm25.BOUNDED_ALONE, bm25.CELL_SHIFT, bm25.TABLE_OVER, bm25.TABLE_SHIFT,
                 bm25.TABLE_KEPT)
        for leaders, most, bounded, alone, shift, table in (
                (saved[0], saved[1], saved[2], saved[3], saved[4], 0),
                (0, -1, -1, 0, 2, 0), (0, saved[1], saved[2], saved[3], saved[4], 0),
                (0, saved[1], -1, 0, 2, saved[5]), (0, saved[1], -1, 1 << 40, 0, 0),
                (0, saved[1], -1, 2, 4, saved[5])):
            bm25.LEADERS_OVER, bm25.DOCUMENTS_MOST, bm25.BOUNDED_OVER, \
                bm25.BOUNDED_ALONE, bm25.CELL_SHIFT = leaders, most, bounded, alone, shift
            bm25.TABLE_OVER, bm25.TABLE_SHIFT, bm25.TABLE_KEPT = table, 1, table
            try:
                for compiled in (True, False):
                    pruned = engine_top(r, query, k, True, compiled=compiled)
                    assert np.array_equal(pruned[0], full[0]) and \
                        np.array_equal(pruned[1], full[1])
            finally:
                bm25.LEADERS_OVER, bm25.DOCUMENTS_MOST, bm25.BOUNDED_OVER, \
                    bm25.BOUNDED_ALONE, bm25.CELL_SHIFT, bm25.TABLE_OVER, \
                    bm25.TABLE_SHIFT, bm25.TABLE_KEPT = saved
    db.close()


@SETTINGS
@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30), min_size=20,
                max_size=60), queries, st.integers(1, 4))
def test_compiled_steps_read_lists_as_the_python_ones_do(tmp_path_factory, docs, query, k):
    """With no list decoded beforehand, the compiled top k reads a list not at hand
    whole while the terms are read whole (after the leaders' floor) and else only inside
    the candidates left, as the Python steps do: the same result from a fresh snapshot,
    the documents' list `:` decoded first (the compiled steps need their containers at
    hand), every other list read as the steps choose."""
    db, _ = build(str(tmp_path_factory.mktemp("c") / "db"), docs, [], [])
    with db.read() as r:
        full = engine_top(r, query, k, False, compiled=False)
    for leaders in (bm25.LEADERS_OVER, 0):
        old, bm25.LEADERS_OVER = bm25.LEADERS_OVER, leaders
        old_small = lists_module.SMALL_LIST
        lists_module.SMALL_LIST = bm25.SMALL_LIST = 0  # no list is cheap to read whole
        try:
            db.close()
            db = annodb.open(db.path)
            with db.read() as r:
                r.lists.whole(":", container=True)
                got = engine_top(r, query, k, True)
                assert np.array_equal(got[0], full[0]) and np.array_equal(got[1], full[1])
        finally:
            bm25.LEADERS_OVER = old
            lists_module.SMALL_LIST = bm25.SMALL_LIST = old_small
    db.close()


@st.composite
def scored_boxes(draw):
    """(boxes, disjoint, terms: forms of points each, factors, matches or None)."""
    disjoint = draw(st.booleans())
    starts = sorted(draw(st.sets(st.integers(0, 60), max_size=12)))
    boxes, last_end = [], -1
    for i, s in enumerate(starts):
        reach = (starts[i + 1] - 1) if disjoint and i + 1 < len(starts) else s + 8
        e = max(draw(st.integers(s, max(s, reach))), last_end + 1)
        if disjoint and i + 1 < len(starts) and e >= starts[i + 1]:
            continue
        boxes.append((s, e))
        last_end = e
    forms = st.lists(st.sets(st.integers(0, 70), max_size=10).map(sorted), min_size=1,
                     max_size=3)
    terms = draw(st.lists(forms, max_size=6))
    factors = sorted(draw(st.lists(st.floats(0.01, 5.0), min_size=len(terms),
                                   max_size=len(terms))), reverse=True)
    matches = None
    if boxes and draw(st.booleans()):
        matches = [x for x in boxes if draw(st.booleans())]
    return boxes, disjoint, terms, factors, matches


def cell_bounds(boxes, terms, factors, t, k1, b, avglen, shift, flat_terms, loose):
    """bm25_steps' `cells` and `flat` for terms t.. (naive.term_cells of each one's
    documents x its factor x loose; those in flat_terms by their factor alone)."""
    cells = np.zeros((max((s for s, _ in boxes), default=0) >> shift) + 1)
    flat = 0.0
    for u in range(t, len(terms)):
        if u in flat_terms:
            flat += factors[u]
            continue
        found = naive.term_cells(naive.term_documents(terms[u], boxes), shift, k1, b, avglen)
        for c, most in found:
            cells[c] += factors[u] * most * loose
    return cells, flat


def kernel_top(boxes, disjoint, terms, factors, k, k1, b, avglen, matches, cuts, prune,
               views=frozenset(), bounds=None):
    """kernels.bm25_steps run from the start, its terms given a call per run between cuts;
    the calls numbered in `views` given each term's documents (kernels.term_documents)
    instead of its postings, when the boxes are disjoint. bounds: (shift, the terms
    bounded as a whole, a factor >= 1 loosening the others) to give each call the terms'
    bounds per cell (cell_bounds), when the boxes are disjoint."""
    pair = lambda xs: (np.array([x[0] for x in xs], dtype=np.int64),
                       np.array([x[1] for x in xs], dtype=np.int64))
    bs, be = pair(boxes)
    call = 0
    factors = np.array(factors, dtype=np.float64)
    rest = np.concatenate((np.cumsum(factors[::-1])[::-1], [0.0]))
    if matches is None:
        phase, (cs, ce), sc = 1, pair([]), np.zeros(0)
    else:
        phase, (cs, ce), sc = 2, pair(matches), np.zeros(len(matches))
    t, done, n = 0, not terms, len(terms)
    while not done:
        end = min([c for c in cuts if c > t] + [n])
        by_documents = disjoint and call in views
        call += 1
        if by_documents:
            forms = [a for u in range(t, end) for a in kernels.term_documents(
                [np.array(f, dtype=np.int64) for f in terms[u]], bs, be)]
            counts = np.arange(0, 2 * (end - t) + 1, 2)
        else:
            forms = [np.array(f, dtype=np.int64) for u in range(t, end) for f in terms[u]]
            counts = np.cumsum([0] + [len(terms[u]) for u in range(t, end)])
        extra = ()
        if bounds is not None and disjoint:
            shift, flat_terms, loose = bounds
            cells, flat = cell_bounds(boxes, terms, factors, t, k1, b, avglen, shift,
                                      flat_terms, loose)
            extra = (cells, flat, shift)
        t, phase, done, cs, ce, sc, _ = kernels.bm25_steps(
            t, end, phase, 0.0, k, prune, 1 + bm25.SLACK, k1, b, avglen, factors, rest,
            forms, counts, bs, be, disjoint, cs, ce, sc, by_documents, *extra)
    pick = kernels.bm25_pick(sc, k, matches is None)
    return list(zip(cs[pick].tolist(), ce[pick].tolist(), sc[pick].tolist()))


@SETTINGS
@given(scored_boxes(), st.integers(0, 8), st.sampled_from([(0.9, 0.4), (1.2, 0.75),
                                                           (0.0, 0.0), (2.0, 1.0)]),
       st.floats(1.0, 20.0), st.sets(st.integers(1, 5)), st.booleans(),
       st.sets(st.integers(0, 6)))
def test_bm25_steps_kernel(case, k, params, avglen, cuts, prune, views):
    """The compiled MaxScore, its terms in any runs of calls, each call given the terms'
    postings or their documents, pruning or not, equals the exhaustive top k (the same
    floats: scores are added in the same order)."""
    boxes, disjoint, terms, factors, matches = case
    k1, b = params
    got = kernel_top(boxes, disjoint, terms, factors, k, k1, b, avglen, matches,
                     sorted(cuts), prune, views)
    assert got == naive.bm25_top(terms, factors, boxes, k, k1, b, avglen, matches)


@SETTINGS
@given(scored_boxes(), st.integers(0, 8), st.sampled_from([(0.9, 0.4), (1.2, 0.75),
                                                           (0.0, 0.0), (2.0, 1.0)]),
       st.floats(1.0, 20.0), st.sets(st.integers(1, 5)), st.sets(st.integers(0, 6)),
       st.integers(0, 5), st.sets(st.integers(0, 5)), st.sampled_from([1.0, 1.5]))
def test_bm25_steps_kernel_with_cell_bounds(case, k, params, avglen, cuts, views, shift,
                                            flat_terms, loose):
    """The compiled MaxScore given, at each call, the bounds of the terms left per cell of
    2**shift addresses (each term's largest contribution in each cell, or looser, or its
    bound everywhere): the exhaustive top k still (the same floats), though it ends the
    reading of whole lists sooner and leaves candidates out."""
    boxes, disjoint, terms, factors, matches = case
    if not disjoint:
        return
    k1, b = params
    got = kernel_top(boxes, disjoint, terms, factors, k, k1, b, avglen, matches,
                     sorted(cuts), True, views, (shift, flat_terms, loose))
    assert got == naive.bm25_top(terms, factors, boxes, k, k1, b, avglen, matches)


@SETTINGS
@given(scored_boxes(), st.integers(0, 6), st.sampled_from([(0.9, 0.4), (1.2, 0.75),
                                                           (0.0, 0.0), (2.0, 1.0)]),
       st.floats(1.0, 20.0))
def test_term_cells_kernel(case, shift, params, avglen):
    """A term's cells: those holding the start of one of its documents, each with the
    largest saturation of the documents starting there."""
    boxes, disjoint, terms, _, _ = case
    if not disjoint:
        boxes = [(s, s) for s, _ in boxes]
    bs = np.array([x[0] for x in boxes], dtype=np.int64)
    be = np.array([x[1] for x in boxes], dtype=np.int64)
    k1, b = params
    for forms in terms:
        starts, packed = kernels.term_documents([np.array(f, dtype=np.int64) for f in forms],
                                                bs, be)
        cells, most = kernels.term_cells(starts, packed, shift, k1, b, avglen)
        want = naive.term_cells(naive.term_documents(forms, boxes), shift, k1, b, avglen)
        assert list(zip(cells.tolist(), most.tolist())) == want


@SETTINGS
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=8), st.data(), st.floats(-3, 3))
def test_add_cells_kernel(total, data, scale):
    """Cells' values scaled and added in place, each at its cell."""
    n = len(total)
    cells = data.draw(st.lists(st.integers(0, n - 1), max_size=10))
    values = data.draw(st.lists(st.floats(0, 5), min_size=len(cells), max_size=len(cells)))
    for ints, floats in ((np.int64, np.float64), (np.int32, np.float32)):
        got = np.array(total, dtype=np.float64)
        small = np.array(values, dtype=floats).tolist()   # (float32: as kept)
        kernels.add_cells(got, np.array(cells, dtype=ints), np.array(small, dtype=floats),
                          scale)
        assert got.tolist() == naive.add_cells(total, cells, small, scale)
    with pytest.raises(ValueError):
        kernels.add_cells(got, np.array([n], dtype=np.int64), np.array([1.0]), scale)


@SETTINGS
@given(scored_boxes())
def test_term_documents_kernel(case):
    """A word's documents: the disjoint boxes holding one of its forms' points, each with
    its length and how many of the points it holds (packed as length << 32 | tf)."""
    boxes, disjoint, terms, _, _ = case
    if not disjoint:
        boxes = [(s, s) for s, _ in boxes]
    bs = np.array([x[0] for x in boxes], dtype=np.int64)
    be = np.array([x[1] for x in boxes], dtype=np.int64)
    tables = [(None, 0)] + [(kernels.start_table(bs, shift), shift) for shift in (0, 2, 4)]
    for forms in terms:
        for table, shift in tables:   # (and by the table of where each cell's boxes begin)
            starts, packed = kernels.term_documents(
                [np.array(f, dtype=np.int64) for f in forms], bs, be, table, shift)
            got = list(zip(starts.tolist(), (packed >> 32).tolist(),
                           (packed & 0xFFFFFFFF).tolist()))
            assert got == naive.term_documents(forms, boxes)


@SETTINGS
@given(st.lists(st.integers(0, 200), max_size=30).map(lambda a: sorted(set(a))),
       st.integers(0, 5), st.data())
def test_start_table_kernel(starts, shift, data):
    """Per cell of 2**shift addresses, to the one after the last start's, the boxes
    starting before it; the rest of a table from a cell on, given its entry there, is
    the table's rest."""
    bs = np.array(starts, dtype=np.int64)
    table = kernels.start_table(bs, shift)
    assert table.tolist() == naive.start_table(starts, shift)
    c0 = data.draw(st.integers(0, len(table) - 1))
    assert kernels.start_table(bs, shift, c0, int(table[c0])).tolist() == \
        table[c0:].tolist()
    with pytest.raises(ValueError):   # (a table of other boxes)
        kernels.term_documents([bs], bs, bs, np.zeros(len(table) + 1, np.int32), shift)


def test_term_documents_refuses_what_does_not_pack():
    """A document longer than the packing holds gives no documents (None), not wrong ones."""
    big = (1 << 31) - 1   # (kernels.scoring.LONGEST)
    bs, be = np.array([0], dtype=np.int64), np.array([big], dtype=np.int64)
    assert kernels.term_documents([np.array([5], dtype=np.int64)], bs, be) is None
    assert kernels.term_documents([np.array([5], dtype=np.int64)], bs, be - 1) is not None


def test_bm25_steps_kernel_past_every_container():
    """A depth past every container (a sharded collection asks for 2**62 to fuse whole
    rankings) is every container, not an allocation of that many scores."""
    boxes = [(0, 3), (5, 9), (12, 12)]
    terms = [[[1, 6]], [[2, 12]]]
    for matches in (None, boxes[1:]):
        got = kernel_top(boxes, True, terms, [2.0, 1.0], 1 << 62, 0.9, 0.4, 4.0, matches,
                         [], True)
        assert got == naive.bm25_top(terms, [2.0, 1.0], boxes, 1 << 62, 0.9, 0.4, 4.0,
                                     matches)


def documents_top(documents, factors, bounds, k, k1, b, avglen):
    """kernels.bm25_documents_top over terms given by their documents (documents[u]:
    [(start, length, tf)]), each term bounded by bounds[u]: ([(start, end, score)] of the
    k best, the tfs it read)."""
    forms = []
    for docs in documents:
        forms.append(np.array([s for s, _, _ in docs], dtype=np.int64))
        forms.append(np.array([n << 32 | tf for _, n, tf in docs], dtype=np.int64))
    rest = np.concatenate((np.cumsum(np.array(bounds, dtype=np.float64)[::-1])[::-1], [0.0]))
    cs, ce, sc, read = kernels.bm25_documents_top(k, 1 + bm25.SLACK, k1, b, avglen,
                                                  np.array(factors, dtype=np.float64), rest,
                                                  forms)
    return list(zip(cs.tolist(), ce.tolist(), sc.tolist())), read


def tight_bounds(documents, factors, k1, b, avglen):
    """Each term's factor x its largest saturation among its documents (as _Words.bound
    is): the tightest bounds, which prune the most."""
    return [f * max((tf / (tf + k1 * (1.0 - b + b * n / avglen)) for _, n, tf in docs),
                    default=0.0) for docs, f in zip(documents, factors)]


@SETTINGS
@given(scored_boxes(), st.sampled_from([0, 1, 2, 3, 5, 8, 1 << 62]),
       st.sampled_from([(0.9, 0.4), (1.2, 0.75), (0.0, 0.0), (2.0, 1.0)]),
       st.floats(1.0, 20.0), st.booleans())
def test_bm25_documents_top_kernel(case, k, params, avglen, tight):
    """The compiled MaxScore over the terms' documents, document at a time, equals the
    exhaustive top k: the same documents, ties by address, the same floats (each
    document's terms added in term order from 0.0), with the loosest bounds (the factors)
    and the tightest (which leave documents and terms out)."""
    boxes, _, terms, factors, _ = case
    if not terms:
        return
    k1, b = params
    documents = [naive.term_documents(forms, boxes) for forms in terms]
    bounds = tight_bounds(documents, factors, k1, b, avglen) if tight else factors
    got, read = documents_top(documents, factors, bounds, k, k1, b, avglen)
    assert got == naive.bm25_documents_top(documents, factors, k, k1, b, avglen)
    assert got == naive.bm25_top(terms, factors, boxes, k, k1, b, avglen)
    assert read <= sum(tf for docs in documents for _, _, tf in docs)


def test_bm25_documents_top_kernel_prunes_with_tight_bounds():
    """Once the k-th best so far is above what the rarer terms can add, a document none
    of the others holds is not visited and one that cannot reach it is left unfinished:
    fewer tfs read than the terms hold, and still the exhaustive top k, ties by start."""
    k1, b, avglen = 0.9, 0.4, 10.0
    rare = [(100 * d, 10 + d % 7, 3) for d in range(0, 200, 40)]
    common = [(100 * d, 10 + d % 7, 1 + d % 3) for d in range(200)]
    documents, factors = [rare, common], [5.0, 0.5]
    total = sum(tf for docs in documents for _, _, tf in docs)
    for k in (1, 3, 5):
        got, read = documents_top(documents, factors,
                                  tight_bounds(documents, factors, k1, b, avglen), k, k1,
                                  b, avglen)
        assert got == naive.bm25_documents_top(documents, factors, k, k1, b, avglen)
        assert read < (total // 10 if k == 1 else total)


def test_bm25_documents_top_refuses_what_does_not_fit():
    """The wrapper says plainly what is wrong instead of reading out of bounds: no terms,
    too few bounds, a term without its two arrays, a term's arrays of unequal lengths."""
    one = np.array([1.0])
    pair = [np.array([0], dtype=np.int64), np.array([5 << 32 | 1], dtype=np.int64)]
    assert kernels.bm25_documents_top(1, 1.0, 0.9, 0.4, 5.0, one, np.array([1.0, 0.0]),
                                      pair)[2].tolist() == [1.0 / (1.0 + 0.9)]
    for factors, rest, forms in ((np.zeros(0), np.zeros(1), []),
                                 (np.array([1.0, 1.0]), np.array([2.0]), pair + pair),
                                 (one, np.array([1.0, 0.0]), pair[:1]),
                                 (one, np.array([1.0, 0.0]), [pair[0], pair[1][:0]])):
        with pytest.raises(ValueError):
            kernels.bm25_documents_top(1, 1.0, 0.9, 0.4, 5.0, factors, rest, forms)


def test_bm25_top_takes_the_documents_at_a_time_path_only_when_every_term_is_at_hand(
        tmp_path):
    """bm25.top scores document at a time when every term comes by its documents, however
    many the terms (more than one bm25_steps call takes), and term at a time (bm25_steps)
    when they do not (no documents made): the same top k either way, and the exhaustive
    one, at depth 3 and at a depth past every document (as shards ask)."""
    vocabulary = WORDS + [f"w{i}" for i in range(2 * kernels.FORMS_PER_CALL)]
    docs = [[vocabulary[(i * 7 + j * 3) % len(vocabulary)] for j in range(i % 9 + 1)]
            for i in range(120)]
    db, model = build(str(tmp_path / "db"), docs, [], [])
    calls = []
    real = kernels.bm25_documents_top
    kernels.bm25_documents_top = lambda *a: calls.append(1) or real(*a)
    saved = bm25.DOCUMENTS_MOST
    try:
        for query in ([("a", 1), ("c", 2), ("e", 1), ("g", 1)],
                      [(w, 1 + i % 3) for i, w in enumerate(sorted(set(vocabulary)))]):
            for k in (3, 1 << 62):
                db.close()   # (a fresh start: the documents made are kept for the state)
                db = annodb.open(db.path)
                with db.read() as r:
                    found = []
                    # (documents are kept once made: the path without them first)
                    for most, taken in ((-1, False), (saved, True)):
                        bm25.DOCUMENTS_MOST = most
                        calls.clear()
                        found.append(engine_top(r, query, k, True))
                        assert bool(calls) == taken
                    full = engine_top(r, query, k, False)
                    for got in found:
                        assert np.array_equal(got[0], full[0]) and \
                            np.array_equal(got[1], full[1])
                    same_ranking(named(r, *engine_top(r, query, 3)),
                                 naive.bm25(model, [((w,), n) for w, n in query], 3))
    finally:
        kernels.bm25_documents_top = real
        bm25.DOCUMENTS_MOST = saved
    db.close()


@SETTINGS
@given(collections(max_docs=12, min_docs=2), st.lists(st.lists(st.sampled_from(WORDS),
                                                               max_size=8), max_size=4),
       queries, st.integers(1, 6))
def test_words_documents_kept_for_one_state_follow_commits(tmp_path_factory, coll, more,
                                                           query, k):
    """A word's documents are kept for the lists as they are: after a commit that adds
    documents, erases or deletes, the next snapshot's top k equals the exhaustive one
    (no document kept from before is scored as it was)."""
    docs, erased, deleted = coll
    db, model = build(str(tmp_path_factory.mktemp("f") / "db"), docs, [], [])
    words = [((w,), n) for w, n in query]
    for step in range(3):
        with db.read() as r:
            r.lists.whole(":", container=True)
            for w, _ in query:   # (each list at hand, so its documents are made)
                r.lists.whole(w)
            pruned = engine_top(r, query, k)
            full = engine_top(r, query, k, False, compiled=False)
            assert np.array_equal(pruned[0], full[0]) and np.array_equal(pruned[1], full[1])
            same_ranking(named(r, *pruned), naive.bm25(model, words, k))
        with db.write() as w:
            if step == 0:
                for i, toks in enumerate(more):
                    w.add(" ".join(toks), docno=f"m{i}")
                    model.add(f"m{i}", toks)
            else:
                erase_and_delete(w, model, erased, deleted)
    db.close()


@pytest.fixture(params=[(None, 2), (24, 1000)], ids=["2 a block", "24 bytes a block"])
def changes_kept(monkeypatch, request):
    """Lists of at most 2 intervals a block (or blocks of 24 bytes: a tail's postings may
    join the block before, which is rewritten), every list keeping a record of its last
    two changes (storage's `changes`), so a few commits use the record and some reach
    past it."""
    from annodb import storage
    from annodb.storage import counts, environment
    size, count = request.param
    monkeypatch.setattr(environment, "block_limits", lambda psize: (size or psize - 16, count))
    monkeypatch.setattr(storage, "ANNOTATION_BLOCK", 2)
    monkeypatch.setattr(counts, "CHANGES_OVER", 1)
    monkeypatch.setattr(counts, "CHANGES_KEPT", 2)


GROUPS = [("a",), ("b",), ("c",), ("e",), ("a", "g"), ("d", "f", "zz")]
edits = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.sampled_from(WORDS), max_size=6)),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("erase"), st.integers(0, 60), st.integers(0, 3)),
    st.tuples(st.just("annotate"), st.sampled_from("abcg"), st.integers(0, 60)),
    st.tuples(st.just("delete and add"), st.integers(0, 9),
              st.lists(st.sampled_from(WORDS), max_size=4)),
    st.tuples(st.just("read"),)), min_size=1, max_size=10)


@SETTINGS
@given(st.lists(st.lists(st.sampled_from(WORDS), max_size=6), min_size=1, max_size=8), edits,
       st.integers(1, 5))
def test_words_documents_extended_after_commits_equal_documents_made_anew(
        changes_kept, tmp_path_factory, docs, steps, k):
    """A word's documents made once, then commits (documents added, deleted, ranges
    erased, a word's posting put inside a document, a delete and an add in one commit),
    with reads between some: the documents a
    snapshot gives (extended from the earlier version's by what the lists' records of
    changes say changed, _Words._documents_since) equal those made anew from the whole
    lists, and the top k by them the exhaustive one; appends and deletes extend them (an
    append in place: what earlier snapshots were given stays as it was), and an earlier
    version is not kept beside the newer one. Each word's bounds per cell, kept beside
    its documents at the average length they were made at and extended after an append
    from the first cell changed, bound every one of its documents' contributions at the
    average length now, and the top k by them is the exhaustive one. The documents are
    made by the table of where each cell's documents begin (kernels.start_table), kept
    for `:` as it is and, after an append, counted again from the first cell changed:
    it equals the table made anew."""
    db = annodb.open(tmp_path_factory.mktemp("docs") / "db")
    model = naive.Model()
    saved = bm25.LEADERS_OVER, bm25.BOUNDED_OVER, bm25.CELL_SHIFT, bm25.TABLE_OVER, \
        bm25.TABLE_SHIFT, bm25.TABLE_KEPT
    bm25.LEADERS_OVER, bm25.BOUNDED_OVER, bm25.CELL_SHIFT, bm25.TABLE_OVER, \
        bm25.TABLE_SHIFT, bm25.TABLE_KEPT = 0, -1, 2, 0, 1, 0
    counted = []   # the documents each making of a word's cells counted
    cells_made = kernels.term_cells
    kernels.term_cells = lambda starts, *a: counted.append(len(starts)) or \
        cells_made(starts, *a)
    for i, toks in enumerate(docs):
        model.add(f"d{i}", toks)
    try:
        with db.write() as w:
            for i, toks in enumerate(docs):
                w.add(" ".join(toks), docno=f"d{i}")
        n = len(docs)

        extended = []
        since = bm25._Words._documents_since

        views = []   # (documents a snapshot was given, a copy of them)

        def read():
            extended.clear()
            for got, copy in views:   # (what is written in place is after theirs)
                assert np.array_equal(got[0], copy[0]) and np.array_equal(got[1], copy[1])
            with db.read() as r:
                ev = Evaluator(r)
                boxes = r.lists.whole(":", container=True)
                fresh = lists_module.Lists(r._txn, None)
                terms = bm25.word_terms(ev, DOC, bm25.Scoring(), [(g, 1) for g in GROUPS],
                                        r.statistics([f for g in GROUPS for f in g]))
                for t in terms:
                    got = t.documents(boxes.starts, boxes.ends)
                    want = kernels.term_documents([fresh.whole(f).starts for f in t.forms],
                                                  boxes.starts, boxes.ends)
                    assert got is not None and want is not None
                    assert np.array_equal(got[0], want[0]), t.forms
                    assert np.array_equal(got[1], want[1]), t.forms
                    views.append((got, (got[0].copy(), got[1].copy())))
                    cells, most, scale = t.cell_bounds()
                    tf, length = want[1] & 0xFFFFFFFF, want[1] >> 32
                    sat = tf / (tf + 0.9 * (1 - 0.4 + 0.4 * length / t.stats.avglen))
                    at = np.searchsorted(cells, want[0] >> bm25.CELL_SHIFT)
                    assert np.array_equal(cells[at], want[0] >> bm25.CELL_SHIFT)
                    assert (t.factor * sat <= scale * most[at].astype(np.float64)).all(), \
                        t.forms   # (float32 kept: taken as float64, as add_cells does)
                table = bm25._starts_table(ev, [boxes.starts], boxes.starts)
                assert not len(boxes) or np.array_equal(
                    table[0], kernels.start_table(boxes.starts, bm25.TABLE_SHIFT))
                kept = r.lists._shared   # (one version of each group's documents kept)
                assert set(kept._derived) <= {v[0] for v in kept.derived_newest.values()}
                query = [(g, 1) for g in GROUPS[:3]]
                pruned = engine_top(r, [(g[0], 1) for g, _ in query], k)
                same_ranking(named(r, *pruned), naive.bm25(model, query, k))
                return len(extended)

        bm25._Words._documents_since = lambda *a: extended.append(1) or since(*a)
        read()
        for step in steps:
            if step[0] == "read":
                read()
                continue
            with db.write() as w:
                if step[0] in ("delete", "delete and add"):
                    erase_and_delete(w, model, [], [step[1]])
                size = model.size or 1
                if step[0] == "erase":
                    erase_and_delete(w, model, [(step[1] % size,
                                                 min(step[1] % size + step[2], size - 1))], [])
                if step[0] == "annotate":  # (a posting put inside a document, not after)
                    w.annotate(step[1], step[2] % size, step[2] % size, 0.0)
                    model.annotate(step[1], step[2] % size, step[2] % size, 0.0)
                if step[0] in ("add", "delete and add"):
                    w.add(" ".join(step[-1]), docno=f"d{n}")
                    model.add(f"d{n}", step[-1])
                    n += 1
        for docno, text in (("every", "a b c d e f g"), ("last", "a b c e g d")):
            with db.write() as w:  # after a read, an append: every group extended
                w.add(text, docno=docno)
                model.add(docno, text.split())
            counted.clear()
            read()
        assert len(extended) == len(GROUPS)
        assert len(counted) == len(GROUPS) and \
            sum(counted) < sum(len(got[0]) for got, _ in views[-len(GROUPS):])
        with db.write() as w:  # a delete: the documents less what it erased
            assert w.delete("last")
            model.erase(*next((d[1], d[2]) for d in model.docs if d[0] == "last"))
        assert read() == len(GROUPS)
    finally:
        bm25._Words._documents_since = since
        kernels.term_cells = cells_made
        bm25.LEADERS_OVER, bm25.BOUNDED_OVER, bm25.CELL_SHIFT, bm25.TABLE_OVER, \
            bm25.TABLE_SHIFT, bm25.TABLE_KEPT = saved
        db.close()


def test_a_words_documents_are_read_whole_for_it_when_it_is_asked_again(tmp_path,
                                                                          monkeypatch):
    """A word whose lists are not at hand has its documents made (its lists read whole)
    only when it is asked for again, and while they fit their budget without dropping
    others: a stream of new queries only probes its words' lists, as before."""
    monkeypatch.setattr(lists_module, "SMALL_LIST", -1)   # (no list about a block long)
    monkeypatch.setattr(bm25, "SMALL_LIST", -1)
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(40):
            w.add(f"goth rock {'jazz ' * (i % 3)}note {i}", docno=f"d{i}")
    made = []
    real = kernels.term_documents
    monkeypatch.setattr(kernels, "term_documents", lambda *a: made.append(1) or real(*a))
    cache = db._lists

    def ask():
        cache._items.clear()   # (no list decoded: the documents' kept, if any)
        cache.bytes = 0
        cache.newest.clear()
        with db.read() as r:
            r.lists.whole(":", container=True)   # (at hand, as in a warm process)
            return [(h.docno, h.score) for h in r.search_text("jazz", rank="bm25", k=5,
                                                              snippets=False)]

    try:
        first = ask()
        assert made == []
        assert ask() == first and made == [1]
        assert ask() == first and made == [1]   # (kept)
        cache.clear()
        cache.max_bytes = 100   # (no room: its documents would drop others)
        for _ in range(3):
            assert ask() == first
        assert made == [1]
    finally:
        db.close()


def test_a_table_of_where_documents_begin_is_made_for_a_long_word_only(tmp_path,
                                                                       monkeypatch):
    """A word's documents are made by the table of where each cell's documents begin
    when its postings are TABLE_OVER or more (the table made then, once), or TABLE_KEPT
    or more once the table is kept; else by galloping, no table made. The same
    documents either way."""
    monkeypatch.setattr(bm25, "TABLE_OVER", 30)
    monkeypatch.setattr(bm25, "TABLE_KEPT", 5)
    monkeypatch.setattr(bm25, "TABLE_SHIFT", 2)
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(40):
            w.add(f"alpha {'beta ' * (i % 4 == 0)}{'delta ' * (i % 4 == 1)}"
                  f"{'gamma' * (i == 7)} note {i}", docno=f"d{i}")
    by_table, tables = [], []
    real, real_table = kernels.term_documents, kernels.start_table
    monkeypatch.setattr(kernels, "term_documents",
                        lambda forms, *a: by_table.append(len(a) > 2) or real(forms, *a))
    monkeypatch.setattr(kernels, "start_table",
                        lambda *a: tables.append(1) or real_table(*a))
    try:
        for word in ("beta", "alpha", "delta", "gamma"):
            with db.read() as r:
                boxes = r.lists.whole(":", container=True)
                got = r.search_text(word, rank="bm25", k=3, snippets=False)
                assert got
                [term] = bm25.word_terms(Evaluator(r), DOC, bm25.Scoring(), [((word,), 1)],
                                         r.statistics([word]))
                want = real([r.lists.whole(word).starts], boxes.starts, boxes.ends)
                assert np.array_equal(term.documents(boxes.starts, boxes.ends)[0], want[0])
                assert np.array_equal(term.documents(boxes.starts, boxes.ends)[1], want[1])
        assert by_table == [False, True, True, False] and tables == [1]
    finally:
        db.close()


@SETTINGS
@given(st.lists(st.floats(0, 5), max_size=12), st.integers(0, 14), st.booleans())
def test_bm25_pick_kernel(scores, k, positive):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if positive:
        order = [i for i in order if scores[i] > 0]
    assert kernels.bm25_pick(np.array(scores), k, positive).tolist() == order[:k]


@SETTINGS
@given(collections())
def test_document_frequencies_are_kept_through_adds_erases_and_deletes(tmp_path_factory,
                                                                        coll):
    db, model = build(str(tmp_path_factory.mktemp("f") / "db"), *coll)
    assert check(db) == []
    with db.read() as r:
        for w in set(WORDS):
            want = sum(1 for d in model.docs if any(d[1] <= p <= d[2] for p, _, _ in
                                                    model.feature(w)))
            assert r.lists.statistics(w)[0] == want, w
    db.close()


def test_a_document_added_and_deleted_in_one_transaction_leaves_no_df(tmp_path):
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        w.add("keep this", docno="a")
        w.add("gone this fleeting", docno="b")
        w.delete("b")
    with db.read() as r:
        assert [r.lists.statistics(x)[0] for x in ("keep", "this", "gone", "fleeting")] == \
            [1, 1, 0, 0]
    assert check(db) == []


def test_words_one_by_folding_count_once_in_df(tmp_path):
    """In a database folding diacritics "café" and "Cafe" are one word: a document holding
    both counts once in its df, and deleting it takes it away once."""
    db = annodb.open(tmp_path / "db", fold_diacritics=True)
    with db.write() as w:
        w.add("café and Cafe and cafe", docno="a")
        w.add("naïve cafe", docno="b")
        w.add("résumé", docno="c")
    with db.read() as r:
        assert [r.lists.statistics(x)[0] for x in ("cafe", "naive", "resume")] == [2, 1, 1]
    assert check(db) == []
    with db.write() as w:
        w.delete("a")
        w.delete("c")
    with db.read() as r:
        assert [r.lists.statistics(x)[0] for x in ("cafe", "naive", "resume")] == [1, 1, 0]
    assert check(db) == []


def test_an_annotated_word_has_its_df_counted_at_query_time(tmp_path):
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        a = w.add("rare word here", docno="a")
        w.add("another text", docno="b")
        w.annotate("rare", a.end, a.end)  # a posting written as an annotation
    with db.read() as r:
        assert r.lists.statistics("rare") == (None, None)
        assert [h.docno for h in r.search_text("rare", rank="bm25")] == ["a"]
    assert check(db) == []


@SETTINGS
@given(collections(max_docs=12), queries, st.integers(1, 8))
def test_gcl_bm25_ranks_exactly_the_matches(tmp_path_factory, coll, query, k):
    """rank="bm25" on a GCL query: the same containers as SSR, ordered by BM25 over the
    query's words (every match is a result, score 0 too)."""
    db, model = build(str(tmp_path_factory.mktemp("g") / "db"), *coll)
    words = [w for w, _ in query]
    gcl = words[0] if len(words) == 1 else "(+ " + " ".join(words) + ")"
    with db.read() as r:
        ssr = r.search(gcl, k=1000)
        got = r.search(gcl, k=k, rank="bm25")
        scores = dict(naive.bm25(model, [((w,), 1) for w in words], 1000))
        want = sorted(((scores.get(h.docno, 0.0), h.start, h.docno) for h in ssr),
                      key=lambda x: (-x[0], x[1]))[:k]
        same_ranking([(h.docno, h.score) for h in got], [(d, s) for s, _, d in want])
    db.close()


def test_bm25_agrees_with_bm25s_lucene():
    """Scores to 1e-6 against the bm25s package (method="lucene"), same tokens, no
    stemming, on the bundled Bible sample."""
    bm25s = pytest.importorskip("bm25s")
    from annodb.tokenizer import tokens
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "bible-sample.jsonl")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        db = annodb.open(os.path.join(tmp, "db"))
        from annodb import ingest
        ingest.ingest(db, [path])
        with db.read() as r:
            docs = list(r.documents())
            corpus = [tokens(d.text) for d in docs]
            for k1, b in ((0.9, 0.4), (1.2, 0.75)):
                ref = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
                ref.index(corpus, show_progress=False)
                for query in (["god", "light"], ["waters", "the", "earth"],
                              ["and", "and", "lord", "spirit"], ["firmament"]):
                    want = ref.get_scores(query)
                    counted = {}
                    for w in query:
                        counted[w] = counted.get(w, 0) + 1
                    s, sc = engine_top(r, list(counted.items()), len(docs), True, k1, b)
                    got = np.zeros(len(docs))
                    at = {d.start: i for i, d in enumerate(docs)}
                    for start, score in zip(s.tolist(), sc.tolist()):
                        got[at[start]] = score
                    assert np.allclose(got, want, rtol=0, atol=1e-6), query
        db.close()


def test_free_text_bm25_leaves_out_the_stop_words_as_anserini_does(tmp_path):
    """Free text ranked by BM25 loses Lucene's 33 stop words first, as Anserini's
    analyzer does: a verbose question ranks exactly (docnos and scores) as its other
    words, where a repeated "of" would otherwise decide; a text of stop words only keeps
    them; a GCL query's words are all kept."""
    db = annodb.open(str(tmp_path / "db"))
    with db.write() as w:
        for i, text in enumerate(["the history of the theory of the study of rome",
                                  "rome history", "a history", "of the of the of the",
                                  "to be or not to be"]):
            w.add(text, docno=f"d{i}")
    with db.read() as r:
        def ranked(text):
            return [(h.docno, h.score) for h in r.search_text(text, k=10, rank="bm25",
                                                               snippets=False)]
        question = "the history of the rome of the empire of the"
        assert ranked(question) == ranked("history rome empire")
        assert ranked(question)[0][0] == "d1"
        assert ranked("of the")[0][0] == "d3"          # stop words only: kept
        assert ranked("to be or not to be")[0][0] == "d4"
        gcl = [h.docno for h in r.search("(+ the of history)", k=10, rank="bm25")]
        assert gcl[0] == "d0"                          # (GCL: "the" and "of" count)
    db.close()


def test_bm25f_equals_its_definition(tmp_path):
    recs = [{"id": "r0", "title": "goth rock", "body": "the scene of goth and punk rock"},
            {"id": "r1", "title": "punk", "body": "rock rock rock and more rock"},
            {"id": "r2", "body": "goth"},
            {"id": "r3", "title": "goth goth", "body": "a long body of text with no match"},
            {"id": "r4", "title": "nothing here"}]
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for rec in recs:
            w.add(rec)
    from annodb.tokenizer import tokens
    docs = [(rec["id"], {f: tokens(rec[f]) for f in ("title", "body") if f in rec})
            for rec in recs]
    with db.read() as r:
        for fields in ({"title": 2.0, "body": 1.0}, {"title": (3.0, 0.2), "body": (1.0, 0.9)},
                       ["body"]):
            spec = [(f, *(fields[f] if isinstance(fields, dict) and
                          isinstance(fields[f], tuple) else
                          ((fields[f] if isinstance(fields, dict) else 1.0), 0.4)))
                    for f in fields]
            for query in (["goth"], ["rock", "goth"], ["punk", "rock", "more"]):
                got = r.search_text(" ".join(query), k=10, rank="bm25", fields=fields)
                want = naive.bm25f(docs, spec, [(q, 1) for q in query], 10)
                same_ranking([(h.docno, h.score) for h in got], want)
    db.close()


def test_sparse_vectors_rank_by_dot_product(tmp_path):
    rng = np.random.default_rng(7)
    terms = [f"t{i}" for i in range(12)]
    vectors = []
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(40):
            vec = {t: round(float(rng.uniform(0, 3)), 3) for t in rng.choice(terms, 5,
                                                                              replace=False)}
            vec[terms[int(rng.integers(0, 12))]] = 0.0  # a zero weight: left out
            w.add({"id": f"v{i}", "text": f"document {i}", "splade": vec},
                  sparse_fields=["splade"])
            vectors.append((f"v{i}", vec))
    assert check(db) == []
    with db.read() as r:
        assert r.sparse_fields() == ["splade"]
        for _ in range(20):
            query = {t: round(float(rng.uniform(0.1, 2)), 2) for t in rng.choice(terms, 3,
                                                                                  replace=False)}
            for k in (1, 5, 40):
                got = r.search_text(query, k=k, rank="sparse")
                same_ranking([(h.docno, h.score) for h in got],
                             naive.sparse(vectors, list(query.items()), k))
        # free text: 1 per word
        got = r.search_text("t1 t2 t2", k=40, rank="sparse")
        same_ranking([(h.docno, h.score) for h in got],
                     naive.sparse(vectors, [("t1", 1.0), ("t2", 2.0)], 40))
    db.close()


@pytest.mark.parametrize("bad, message", [
    ({"rank": "bm2"}, "choose one of ssr, bm25, fused, sparse, bm25\\+rm3"),
    ({"rank": "bm25", "k1": -1}, "k1 must be between"),
    ({"rank": "bm25", "b": 1.5}, "b must be between"),
    ({"rank": "bm25", "fields": {"titel": 1}}, "no document has the field 'titel:'"),
    ({"rank": "bm25", "fields": {"title": 0}}, "the weight of 'title' must be"),
    ({"rank": "sparse"}, "no sparse field in this database"),
])
def test_ranking_options_are_checked(tmp_path, bad, message):
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        w.add({"id": "x", "title": "goth", "body": "rock"})
    with db.read() as r:
        with pytest.raises(annodb.RankingError, match=message):
            r.search_text("goth", **bad)
        with pytest.raises(annodb.RankingError, match=message):
            r.search("goth", **bad)


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 4), max_size=8), max_size=6))
def test_document_frequencies_kernel(docs):
    kinds = np.array([k for d in docs for k in d], dtype=np.int32)
    counts = np.array([len(d) for d in docs], dtype=np.int64)
    assert kernels.document_frequencies(kinds, counts, 5).tolist() == \
        naive.document_frequencies(kinds.tolist(), counts.tolist(), 5)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=25,
                unique_by=lambda x: x[0]),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), max_size=6))
def test_best_windows_kernel(points, ranges):
    points.sort()
    addrs = np.array([p for p, _ in points], dtype=np.int64)
    terms = np.array([t for _, t in points], dtype=np.int64)
    ranges = sorted({(lo, lo + n) for lo, n in ranges})
    ranges = [r for i, r in enumerate(ranges) if not i or r[0] > ranges[i - 1][0] and
              r[1] > ranges[i - 1][1]]  # a GC-list
    los = np.array([r[0] for r in ranges], dtype=np.int64)
    his = np.array([r[1] for r in ranges], dtype=np.int64)
    ws, we = kernels.best_windows(addrs, terms, 4, los, his)
    assert list(zip(ws.tolist(), we.tolist())) == naive.best_windows(
        addrs.tolist(), terms.tolist(), ranges)


def _reference_scores(docs, query, k1=0.9, b=0.4):
    """BM25 of each document by bm25s (lucene) over its text's tokens."""
    bm25s = pytest.importorskip("bm25s")
    from annodb.tokenizer import tokens
    ref = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
    ref.index([tokens(d.text) for d in docs], show_progress=False)
    return ref.get_scores(query)


def test_bm25_on_a_format_3_database_and_after_its_first_write(tmp_path):
    """golden-v3 keeps no df (8-byte counts): BM25 counts the documents itself; a write then
    keeps df for the words it brings, the old words stay counted at query time."""
    import shutil
    path = tmp_path / "golden.db"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "golden-v3"), path)
    query = ["golden", "psalm", "verse", "tick"]

    def agree(r):
        docs = list(r.documents())
        want = _reference_scores(docs, query)
        s, sc = engine_top(r, [(w, 1) for w in query], len(docs))
        got = dict(zip(s.tolist(), sc.tolist()))
        assert np.allclose([got.get(d.start, 0.0) for d in docs], want, atol=1e-9)

    with annodb.open(path) as db:
        with db.read() as r:
            assert r.lists.statistics("golden") == (None, None)
            agree(r)
        with db.write() as w:
            w.add("a new golden verse about fresh words", docno="new")
        with db.read() as r:
            assert r.lists.statistics("golden") == (None, None)
            assert r.lists.statistics("fresh")[0] == 1
            agree(r)
        assert check(db) == []


@pytest.mark.parametrize("parallel", [False, True])
def test_ingest_sparse_field(tmp_path, parallel):
    """--sparse-field through both ingest paths (in process, and the reading process):
    `splade:term` values over each record, bad weights reported against their line."""
    import json
    from annodb import ingest
    lines = [{"id": "s1", "text": "goth rock music", "splade": {"Goth": 1.25, "music": 0.5}},
             {"id": "s2", "text": "rock and stones", "splade": {"rock": 1.5, "stone": 1.0}},
             {"id": "s3", "text": "bad weights", "splade": {"x": -1}},
             {"id": "s4", "text": "not a vector", "splade": [1, 2]}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = annodb.open(tmp_path / "db")
    summary = ingest.ingest(db, [str(src)], sparse_fields=["splade"], parallel=parallel)
    assert summary.added == 2 and summary.error_count == 2
    assert "in.jsonl:3" in summary.errors[0] and "weight from 0 to 1e+09" in summary.errors[0]
    assert "in.jsonl:4" in summary.errors[1] and "term: weight" in summary.errors[1]
    with db.read() as r:
        assert r.sparse_fields() == ["splade"]
        assert list(r.intervals("splade:goth")) == [(0, 2, 1.25)]
        assert r.document("s1").text == "goth rock music"   # the vector is not text
        hits = r.search_text({"goth": 2.0, "rock": 1.0}, rank="sparse")
        assert [(h.docno, h.score) for h in hits] == [("s1", 2.5), ("s2", 1.5)]
    assert check(db) == []
    db.close()


@SETTINGS
@given(st.dictionaries(st.integers(0, 30), st.floats(0, 5)),
       st.dictionaries(st.integers(0, 30), st.floats(0, 5)))
def test_merge_scores_kernel(a, b):
    a = [(s, s + 1, v) for s, v in sorted(a.items())]
    b = [(s, s + 1, v) for s, v in sorted(b.items())]
    cols = lambda x, i: np.array([t[i] for t in x], dtype=np.float64 if i == 2 else np.int64)
    s, e, v = kernels.merge_scores(cols(a, 0), cols(a, 1), cols(a, 2), cols(b, 0), cols(b, 1),
                                   cols(b, 2))
    assert list(zip(s.tolist(), e.tolist(), v.tolist())) == naive.merge_scores(a, b)


def test_a_words_size_is_its_lists_counts_live_ones_once_decoded_after_an_erase(tmp_path):
    """A BM25 word's size (whether its list is long enough to wait for the leaders' floor
    before it is read whole) is its forms' list counts: the stored postings while nothing
    is erased, and once a range is erased, a decoded list's live postings."""
    from annodb import rankers
    from annodb.gcl import as_node
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(10):
            w.add(f"jazz note {i}", docno=f"d{i}")

    def size():
        with db.read() as r:
            r.lists.whole("jazz")   # (decoded: its count is exact)
            [term] = rankers.make("bm25").terms(Evaluator(r), as_node(":")[0],
                                                [(("jazz",), 1)], r.statistics(["jazz"]))
            return term.size(), r.lists.stored_count("jazz")

    try:
        assert size() == (10, 10)
        with db.write() as w:
            d0 = w.document("d0")
            w.erase(d0.start, d0.end)
        assert size() == (9, 10)
    finally:
        db.close()
