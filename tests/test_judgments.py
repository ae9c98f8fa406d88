"""Judgments as stored memory (annodb.judgments): a judgment and its note are one
transaction, each carries its discovery order and model call, a topic's judgments read back
whole (never cut by a depth) in discovery order, with its record; the server's `judge`,
`judgments` and `topic` ops over real sockets; `strict` refuses what lenient repairs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import annodb
from annodb import judgments
from annodb.check import check
from annodb.errors import AnnodbError, NotFoundError


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "db")
    with annodb.open(p) as db, db.write() as w:
        for i in range(30):
            w.add(f"document number {i} about light", docno=f"d{i}")
    return p


def test_judge_records_order_and_call_and_reads_back_in_discovery_order(path):
    with annodb.open(path) as db:
        for call, (docno, grade) in enumerate([("d7", 1), ("d2", 3), ("d9", 0)], 1):
            with db.write() as w:
                done = judgments.judge(w, "t1", docno, grade, f"why {docno}", call)
            assert (done.order, done.regraded) == (call, False)
        with db.write() as w:       # regraded: its order is kept, its call is the latest
            done = judgments.judge(w, "t1", "d7", 2, "second look", 4)
            assert (done.order, done.regraded, done.note) == (1, True, "note:t1:d7")
        with db.read() as r:
            found, record = judgments.judgments(r, "t1")
            assert record is None
            assert [(j.docno, j.grade, j.order, j.call) for j in found] == [
                ("d7", 2, 1, 4), ("d2", 3, 2, 2), ("d9", 0, 3, 3)]
            assert r.document("note:t1:d7").text == "second look"
            assert judgments.judgments(r, "t2") == ([], None)
        with db.write() as w:
            judgments.record(w, judgments.Record("t1", "max-calls", 100, 3))
        with db.write() as w:
            judgments.record(w, judgments.Record("t1", "max-judgments", 101, 3, base=100))
        with db.read() as r:
            assert judgments.judgments(r, "t1")[1] == judgments.Record(
                "t1", "max-judgments", 101, 3, base=100)
            assert r.document_count() == 30 and r.stats().agent_documents == 4
            assert [h.docno for h in r.search("(^ second look)")] == []
        with db.write() as w:
            with pytest.raises(NotFoundError, match="Unknown docno"):
                judgments.judge(w, "t1", "nope", 1, "x")
            with pytest.raises(AnnodbError, match="not a document of the collection"):
                judgments.judge(w, "t1", "note:t1:d7", 1, "x")
            with pytest.raises(AnnodbError, match="one word"):
                judgments.judge(w, "t (1)", "d1", 1, "x")
            w.add("a collection document that happens to be named so", docno="topic:t9")
            with pytest.raises(AnnodbError, match="is a document of the collection"):
                judgments.record(w, judgments.Record("t9"))
        assert check(db) == []


def test_server_ops_judge_judgments_topic(path, serve, connect):
    server = serve(path, depth=10)
    c = connect(server)
    for i in range(25):       # more judgments than the server's depth
        r = c(op="judge", topic="t1", docno=f"d{i}", grade=i % 4, call=i + 1,
              text=f"reason {i}")
        assert r == {"op": "judge", "ok": True, "topic": "t1", "docno": f"d{i}",
                     "grade": i % 4, "note": f"note:t1:d{i}", "order": i + 1,
                     "regraded": False}
    r = c(op="judgments", topic="t1")
    assert r["ok"] and r["record"] is None
    assert [(j["docno"], j["grade"], j["order"], j["call"]) for j in r["judgments"]] == \
        [(f"d{i}", i % 4, i + 1, i + 1) for i in range(25)]
    r = c(op="topic", topic="t1", stop="max-calls", calls=25, judgments=25)
    assert r == {"op": "topic", "ok": True, "topic": "t1"}
    assert c(op="judgments", topic="t1")["record"] == {
        "topic": "t1", "stop": "max-calls", "calls": 25, "judgments": 25, "base": 0,
        "error": None}
    for request, wanted in [
            ({"op": "judge", "docno": "d1", "grade": 1}, "Missing topic"),
            ({"op": "judge", "topic": "t1", "docno": "d1", "grade": 4}, "grade must"),
            ({"op": "judge", "topic": "t1", "docno": "d1", "grade": True}, "grade must"),
            ({"op": "judge", "topic": "t1", "docno": "zz", "grade": 1}, "Unknown docno"),
            ({"op": "judge", "topic": "t1", "docno": "d1", "grade": 1, "call": -1},
             "call must"),
            ({"op": "judge", "topic": "t 1", "docno": "d1", "grade": 1}, "one word"),
            ({"op": "judgments"}, "Missing topic"),
            ({"op": "topic", "topic": "t1", "stop": 3}, "stop must")]:
        r = c(**request)
        assert r["ok"] is False and wanted in r["error"], (request, r)
    server.shutdown()
    with annodb.open(path) as db:
        assert check(db) == []


def test_strict_refuses_what_lenient_repairs(path, serve, connect):
    for server, ok in ((serve(path), True), (serve(path, strict=True), False)):
        c = connect(server)
        for op in ("query", "count"):
            r = c(op=op, query='(^ document ("light")')
            assert r["ok"] is ok, r
            if ok:
                assert r["warnings"]
            else:
                assert "offset" in r["error"]
        assert c(op="query", query="(^ document light)")["ok"]


def test_serve_has_a_strict_option(path):
    out = subprocess.run([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                          "serve", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--strict" in out.stdout, out.stderr
