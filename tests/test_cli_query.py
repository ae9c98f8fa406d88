"""`annodb query`, `annodb search` and `annodb count` through click's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import annodb
from annodb_cli.main import annodb as cli

EXAMPLE = Path(__file__).parent.parent / "examples" / "bible-sample.jsonl"


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "bible.db"
    assert invoke("ingest", "--db", path, "--quiet", EXAMPLE).exit_code == 0
    return path


def test_query_prints_rank_docno_score_snippet(db):
    result = invoke("query", "--db", db, "-k", "2", "(^ god light)")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    rank, docno, score, snippet = lines[0].split("\t")
    assert rank == "1" and docno.startswith("Gen.") and float(score) > 0
    assert "<cover>" in snippet and "</cover>" in snippet


def test_query_json_matches_the_api(db):
    result = invoke("query", "--db", db, "--json", "-k", "3", '(^ "the light" darkness)')
    got = [json.loads(line) for line in result.stdout.splitlines()]
    with annodb.open(db, readonly=True) as database, database.read() as r:
        want = [h.as_dict() for h in r.search('(^ "the light" darkness)', k=3)]
    assert got == want and [g["rank"] for g in got] == [1, 2, 3]
    assert set(got[0]) == {"rank", "docno", "score", "cover", "snippet"}


def test_query_container_and_values(db):
    result = invoke("query", "--db", db, "--json", "-k", "50", "(>> : (= :chapter: 2))")
    docnos = [json.loads(line)["docno"] for line in result.stdout.splitlines()]
    assert docnos and all(d.startswith("Gen.2.") for d in docnos)
    result = invoke("query", "--db", db, "--json", "--container", "text:", "-k", "1", "god")
    assert json.loads(result.stdout)["docno"].startswith("Gen.")


def test_lenient_warns_and_strict_refuses(db):
    result = invoke("query", "--db", db, "(^ god light")
    assert result.exit_code == 0 and "warning" in result.stderr and result.stdout
    result = invoke("query", "--db", db, "--strict", "(^ god light")
    assert result.exit_code == 2
    assert result.stderr.startswith("annodb: error: query error at offset")
    assert len(result.stderr.splitlines()) == 1
    result = invoke("query", "--db", db, "(AND god light)")
    assert result.exit_code == 2 and "offset 1" in result.stderr


def test_batch_from_stdin_goes_on_after_a_bad_query(db):
    result = invoke("query", "--db", db, "--json", "-k", "1", "-",
                    input="light\n(bad query)\n(^ day night\n")
    assert result.exit_code == 2   # a query failed; the batch still ran to the end
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["query"] for r in rows] == ["light", "(bad query)", "(^ day night"]
    assert rows[0]["error"] is None and len(rows[0]["results"]) == 1
    assert rows[1]["error"] and rows[1]["results"] == []
    assert rows[2]["warnings"] and rows[2]["results"]


def test_search_says_what_it_ran(db):
    result = invoke("search", "--db", db, "--json", "-k", "3", "waters divided")
    assert result.exit_code == 0
    assert "ran (+ (+ waters water watered) (+ divided divide)) (ranked by bm25+rm3)" in \
        result.stderr
    result = invoke("search", "--db", db, "--rank", "ssr", "-k", "3", "waters divided")
    assert "ran (^" in result.stderr and "(ranked by ssr)" in result.stderr
    assert len(result.stdout.splitlines()) == 3


def test_search_shows_scores_in_rank_order(db):
    """By SSR, tier by tier (all the words together first): the score's whole part is how
    many words matched together, so scores fall with the rank across tiers too; by BM25
    (the default) scores fall with the rank too."""
    result = invoke("search", "--db", db, "--json", "-k", "12", "waters divided light")
    scores = [json.loads(line)["score"] for line in result.stdout.splitlines()]
    assert len(scores) == 12 and scores == sorted(scores, reverse=True)
    result = invoke("search", "--db", db, "--json", "--rank", "ssr", "-k", "12",
                    "waters divided light")
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    scores = [h["score"] for h in hits]
    assert len(hits) == 12 and scores == sorted(scores, reverse=True)
    assert {int(s) for s in scores} == {1, 2}       # pairs of words first, then single ones


def test_total_counts_every_matching_document(db):
    with annodb.open(db, readonly=True) as database, database.read() as r:
        found = r.search("god", k=5)
        assert len(found) == 5 and found.total == r.count("(>> : god)") == 78


def test_count(db):
    assert invoke("count", "--db", db, '"the light"').stdout.strip().isdigit()
    result = invoke("count", "--db", db, "--json", "(<< god text:)")
    row = json.loads(result.stdout)
    with annodb.open(db, readonly=True) as database, database.read() as r:
        assert row == {"query": "(<< god text:)", "count": r.count("(<< god text:)"),
                       "warnings": []}
    assert invoke("count", "--db", db, "(foo bar)").exit_code == 2


def test_missing_database_is_one_error_line(tmp_path):
    result = invoke("query", "--db", tmp_path / "nope.db", "god")
    assert result.exit_code == 1
    assert result.stderr.startswith("annodb: error: ") and len(result.stderr.splitlines()) == 1


def test_a_raw_term_naming_no_feature_is_a_warning_on_stderr(db):
    result = invoke("query", "--db", db, "-k", "1", "(^ god: light)")
    assert result.exit_code == 0 and result.stdout.startswith("1\tGen.")
    assert result.stderr == ("annodb: warning: 'god:' names no feature of the database; "
                             "searched its words \"god\" instead\n")
    result = invoke("query", "--db", db, "--strict", "(^ god: light)")
    assert result.exit_code == 0 and result.stdout == ""
    assert "'god:' names no feature of the database, so it matches nothing" in result.stderr
    result = invoke("count", "--db", db, "light:")
    assert int(result.stdout) > 0 and "searched its words" in result.stderr
    result = invoke("count", "--db", db, "--strict", "light:")
    assert result.stdout == "0\n" and "matches nothing" in result.stderr
    result = invoke("query", "--db", db, "--json", "-", input="light:\n")
    assert "searched its words" in json.loads(result.stdout)["warnings"][0]



def test_an_empty_result_says_so(db):
    result = invoke("query", "--db", db, "(^ water (+ well spring))")  # only across verses
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == ("annodb: no document holds a match of "
                             "(^ water (+ well spring))\n")
    assert invoke("count", "--db", db, "(^ water (+ well spring))").stdout == "3\n"
def test_rank_options(db):
    ssr = invoke("query", "--db", db, "--json", "-k", "5", "(+ light darkness)")
    bm = invoke("query", "--db", db, "--json", "-k", "5", "--rank", "bm25",
                "(+ light darkness)")
    assert ssr.exit_code == bm.exit_code == 0
    with annodb.open(db, readonly=True) as d, d.read() as r:
        want = [h.docno for h in r.search("(+ light darkness)", k=5, rank="bm25")]
        tuned = [h.docno for h in r.search_text("light darkness", k=5, rank="bm25", k1=1.2,
                                                b=0.75, fields={"text": 2})]
    assert [json.loads(line)["docno"] for line in bm.stdout.splitlines()] == want
    assert want != [json.loads(line)["docno"] for line in ssr.stdout.splitlines()]
    result = invoke("search", "--db", db, "--json", "-k", "5", "--rank", "bm25", "--k1",
                    "1.2", "--b", "0.75", "--field", "text=2", "light darkness")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["docno"] for line in result.stdout.splitlines()] == tuned
    assert "(ranked by bm25)" in result.stderr


def test_rank_bm25_rm3(db):
    """--rank bm25+rm3 on free text and on a GCL query: what the API gives."""
    with annodb.open(db, readonly=True) as d, d.read() as r:
        text = [h.docno for h in r.search_text("light darkness", k=5, rank="bm25+rm3")]
        gcl = [h.docno for h in r.search("(+ light darkness)", k=5, rank="bm25+rm3")]
    for cmd, query, want in (("search", "light darkness", text),
                             ("query", "(+ light darkness)", gcl)):
        result = invoke(cmd, "--db", db, "--json", "-k", "5", "--rank", "bm25+rm3", query)
        assert result.exit_code == 0, result.output
        assert [json.loads(line)["docno"] for line in result.stdout.splitlines()] == want


@pytest.mark.parametrize("args, message", [
    (["search", "--rank", "bm2", "light"], "'bm2' is not one of 'ssr', 'bm25', 'fused', 'sparse', 'bm25+rm3'"),
    (["query", "--rank", "BM25", "light"], "is not one of"),
    (["search", "--rank", "bm25", "--field", "titel", "light"], "no document has the field"),
    (["search", "--rank", "bm25", "--b", "2", "light"], "b must be between 0 and 1"),
    (["search", "--rank", "bm25", "--field", "text=x", "light"], "NAME=WEIGHT"),
    (["query", "--rank", "sparse", "light"], "no sparse field in this database"),
])
def test_a_bad_rank_option_is_one_line(db, args, message):
    result = invoke(args[0], "--db", db, *args[1:])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, \
        result.stderr


def test_ingest_sparse_field_then_search_by_it(tmp_path):
    src = tmp_path / "enc.jsonl"
    src.write_text('{"id": "a", "text": "goth rock", "splade": {"goth": 2, "gothic": 1}}\n'
                   '{"id": "b", "text": "rock", "splade": {"rock": 1.5}}\n')
    db = tmp_path / "enc.db"
    assert invoke("ingest", "--db", db, "--quiet", "--sparse-field", "splade", src).exit_code == 0
    result = invoke("search", "--db", db, "--json", "--rank", "sparse", "gothic rock")
    assert result.exit_code == 0, result.output
    assert [(json.loads(x)["docno"], json.loads(x)["score"]) for x in
            result.stdout.splitlines()] == [("b", 1.5), ("a", 1.0)]
    assert "ran (+ splade:gothic splade:rock) (ranked by sparse)" in result.stderr
