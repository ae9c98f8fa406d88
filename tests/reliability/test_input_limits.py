"""Numbers and names at their limits get one clear error, at the edge and in the API: a
sparse vector's weights are numbers from 0 to records.MAX_WEIGHT and its terms one word
(stored or a query's), so no score overflows to inf; a judgment's counts are whole numbers
below 2**53 (stored exactly as float64 values)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import annodb
from annodb import judgments
from annodb.check import check
from annodb.errors import AnnodbError, IngestError, RankingError
from annodb.records import MAX_WEIGHT

pytestmark = pytest.mark.reliability


@pytest.fixture
def db(tmp_path):
    with annodb.open(tmp_path / "s.db") as db:
        with db.write() as w:
            for docno, vector in (("a", {"gold": 2.0, "lead": 1.0}), ("b", {"gold": 1.0}),
                                  ("c", {"lead": MAX_WEIGHT})):
                w.add({"docid": docno, "text": f"document {docno}", "splade": vector},
                      sparse_fields=["splade"])
        yield db


@pytest.mark.parametrize("weight", [math.inf, -math.inf, math.nan, 1e308, 1.5e9, -1,
                                    pytest.param(10 ** 400, id="10**400"), "heavy", None,
                                    True])
def test_a_sparse_querys_weights_out_of_range_are_refused(db, weight):
    """A query weight of inf or 1e308 made every score inf (and the order arbitrary):
    refused, with the weight and the range in one line."""
    with db.read() as r:
        with pytest.raises(RankingError, match="weight of 'gold' must be") as caught:
            r.search_text({"gold": weight}, rank="sparse")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_sparse_scores_stay_finite_at_the_largest_weights(db):
    """The largest weights on both sides, summed over terms: finite scores, in order."""
    with db.read() as r:
        hits = r.search_text({"gold": MAX_WEIGHT, "lead": MAX_WEIGHT}, rank="sparse")
        assert [h.docno for h in hits] == ["c", "a", "b"]
        assert all(math.isfinite(h.score) for h in hits)
        assert hits[0].score == MAX_WEIGHT * MAX_WEIGHT


@pytest.mark.parametrize("term", ["go ld", "gol(d", 'gold"', "gold)", "\tgold", ""])
def test_sparse_terms_a_query_cannot_name_are_refused(db, term):
    """A term with a space or a parenthesis raised a bare ValueError from the query
    printer; it is a RankingError in a query and an IngestError in a stored vector."""
    with db.read() as r:
        with pytest.raises(RankingError, match="one word without spaces"):
            r.search_text({term: 1.0}, rank="sparse")
    with db.write() as w:
        with pytest.raises(IngestError, match="one word without spaces"):
            w.add({"docid": "x", "text": "x", "splade": {term: 1.0}},
                  sparse_fields=["splade"])


@pytest.mark.parametrize("weight", [1.7e308, 1e10, math.inf, -0.5,
                                    pytest.param(10 ** 400, id="10**400")])
def test_stored_sparse_weights_out_of_range_are_refused(db, tmp_path, weight):
    """Stored weights near 1.7e308 summed to inf: a record with a weight past MAX_WEIGHT
    is refused, through the API and by `annodb ingest` (file:line, exit 1, nothing
    written)."""
    with db.write() as w:
        with pytest.raises(IngestError, match="needs a weight from 0 to 1e"):
            w.add({"docid": "x", "text": "x", "splade": {"gold": weight}},
                  sparse_fields=["splade"])
    if isinstance(weight, float) and not math.isfinite(weight):
        return   # (JSON has no inf)
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "ok", "text": "fine", "splade": {"gold": 1}}) + "\n"
                      + f'{{"id": "x", "text": "x", "splade": {{"gold": {weight!r}}}}}\n')
    done = subprocess.run([sys.executable, "-m", "annodb", "ingest", "--db",
                           str(tmp_path / "cli.db"), "--sparse-field", "splade",
                           str(source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{source}:2:" in done.stderr and "needs a weight from 0 to 1e+09" in done.stderr
    assert "Traceback" not in done.stderr


def test_stored_values_past_the_largest_weight_are_refused_when_ranking(db):
    """Values put into a sparse feature's list by annotate() (or ingested before weights
    were bounded) up to 1.7e308: ranking by that term is a RankingError naming the
    feature, never scores of inf."""
    with db.write() as w:
        a = w.document("a")
        w.annotate("splade:gold", a.start, a.end, 1.7e308)
    with db.read() as r:
        with pytest.raises(RankingError, match=r"splade:gold go up to 1\.7e\+308"):
            r.search_text({"gold": 1.0}, rank="sparse")
        assert [h.docno for h in r.search_text({"lead": 1.0}, rank="sparse")] == ["c", "a"]


def answer(c, text: str) -> dict:
    """The response to one raw request line."""
    return c.send_line(text.encode())["response"]


def test_a_judgments_counts_are_bounded(db, serve, connect):
    """`"call": 10**400` answered "internal error: OverflowError": a judgment's call and
    a topic record's calls, judgments and base are refused past 2**53 - 1, over a real
    socket and in the API; 2**53 - 1 itself is stored and read back exactly."""
    huge = "1" + "0" * 400
    path = db.path
    db.close()
    server = serve(path)
    c = connect(server)
    for line in (f'{{"op":"judge","topic":"t1","docno":"a","grade":1,"call":{huge}}}',
                 f'{{"op":"judge","topic":"t1","docno":"a","grade":1,"call":{2**53}}}',
                 f'{{"op":"topic","topic":"t1","calls":{huge}}}',
                 f'{{"op":"topic","topic":"t1","judgments":{2**64}}}',
                 f'{{"op":"topic","topic":"t1","base":{huge}}}'):
        r = answer(c, line)
        assert r["ok"] is False, (line, r)
        assert "must be a whole number from 0 to 2**53 - 1" in r["error"], r
        assert "internal error" not in r["error"] and len(r["error"]) < 200
    r = answer(c, f'{{"op":"judge","topic":"t1","docno":"a","grade":1,'
                  f'"call":{2**53 - 1}}}')
    assert r["ok"], r
    r = answer(c, '{"op":"judgments","topic":"t1"}')
    assert r["judgments"][0]["call"] == 2**53 - 1
    server.shutdown()
    with annodb.open(path) as again:
        with again.write() as w:
            for bad in (10 ** 400, 2 ** 53, -1, 1.5, True):
                with pytest.raises(AnnodbError, match="call must be a whole number"):
                    judgments.judge(w, "t1", "b", 2, "reason", bad)
            with pytest.raises(AnnodbError, match="calls must be a whole number"):
                judgments.record(w, judgments.Record("t1", calls=10 ** 400))
        assert check(again) == []
