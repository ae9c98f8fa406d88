"""`annodb serve`: real sockets against a real database.

A module-wide database is built in a temporary directory and kept open read-write by the
test process (so in-process servers share its environment and the test can commit beside
them); servers listen on port 0 on loopback. One test runs the server as a real subprocess,
commits from this process while it runs, and stops it with SIGTERM. The contract tests at
the end (qids, depth, snippets, done) check hand-written expectations on a database of
their own.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

import annodb
from annodb import server as server_module
from annodb.transaction import Snapshot
from annodb.ranking import rank
from annodb.server import Server, ServerError
from annodb_cli.serve import serve
from server_client import Client

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ["title:", "headings:", "segment:"]

TEXTS = {
    "p1": "hello world, this is the first document",
    "p2": "hello there, the wide world says hello back to the world",
    "p3": "a world apart from any hello at all in this one",
    "p4": "goodbye world",
    "p5": "hello hello hello and then much later the world",
}


def _build(path):
    db = annodb.open(path)
    with db.write() as w:
        for docno, text in TEXTS.items():
            w.add(text, docno=docno)
        for i in range(20):
            filler = " ".join(["filler"] * i)
            w.add(f"hello {filler} world number {i}", docno=f"n{i:02d}")
        w.add({"docid": "m1", "title": "Hello title", "headings": "Greetings\nWorld",
               "segment": "the world\nis big, hello", "url": "http://example.org/m1"})
        w.add({"docid": "m2", "url": "http://example.org/m2", "body": "no named fields hello world"})
        w.add({"docid": "m3", "title": "", "segment": "only a segment about the world"})
    return db


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("server") / "test.db")
    database = _build(path)
    yield database
    database.close()


@pytest.fixture(scope="module")
def server(db):
    s = Server(db.path).start()
    yield s
    s.shutdown()


@pytest.fixture(scope="module")
def fields_server(db):
    s = Server(db.path, fields=FIELDS).start()
    yield s
    s.shutdown()


def all_ranks(client: Client, query: str) -> list[str]:
    """Docnos of every rank of `query` (query, then next until done)."""
    r = client(op="query", query=query)
    assert r["ok"], r
    docnos = []
    while not r.get("done"):
        docnos.append(r["docno"])
        r = client(op="next", qid=r["qid"])
        assert r["ok"], r
    return docnos


def expected_ranks(db, query: str) -> list[str]:
    with db.read() as snap:
        ranking = rank(snap, query, lenient=True)
        return [ranking.hit(i, snippet=False).docno for i in range(len(ranking))]


# ---------------------------------------------------------------- the protocol


def test_replay_sequence(server, db):
    """The exact sequence a Vole client replays: query, next until done, document of the
    first docno, next on an unknown qid."""
    with Client(server.port) as c:
        request = {"op": "query", "query": "(^ hello world)"}
        record = c.ask(request)
        assert record["query"] == request
        r = record["response"]
        assert list(r) == ["op", "ok", "qid", "rank", "docno", "snippet"]
        assert r["op"] == "query" and r["ok"] is True and r["rank"] == 1
        assert re.fullmatch(r"q\d+", r["qid"])
        assert "<cover>" in r["snippet"] and "</cover>" in r["snippet"]
        qid, first = r["qid"], r["docno"]
        docnos, rank_no = [first], 1
        while True:
            r = c(op="next", qid=qid)
            assert r["ok"] and r["op"] == "next" and r["qid"] == qid
            if r.get("done"):
                assert r == {"op": "next", "ok": True, "qid": qid, "done": True}
                break
            rank_no += 1
            assert r["rank"] == rank_no
            docnos.append(r["docno"])
        assert docnos == expected_ranks(db, "(^ hello world)")
        assert c(op="next", qid=qid)["done"] is True          # still done past the end
        d = c(op="document", docno=first)
        assert d == {"op": "document", "ok": True, "docno": first,
                     "document": TEXTS.get(first) or d["document"]}
        e = c(op="next", qid="q999999")
        assert e["op"] == "next" and e["ok"] is False and "Unknown qid" in e["error"]
        assert list(e) == ["op", "ok", "error"]


def test_no_match_is_done(server):
    with Client(server.port) as c:
        r = c(op="query", query="(^ zebra unicorn)")
        assert r["ok"] and r["done"] is True and re.fullmatch(r"q\d+", r["qid"])
        assert "rank" not in r
        assert c(op="next", qid=r["qid"]) == {"op": "next", "ok": True, "qid": r["qid"],
                                               "done": True}


def test_qids_count_up_on_each_connection(server):
    """q0, q1, ... in the order a connection issued its queries, as the reference server
    numbers them for its (one) client; a qid names a query of its own connection only."""
    with Client(server.port) as a, Client(server.port) as b:
        qids = [x(op="query", query="world")["qid"] for x in (a, b, a, b)]
        assert qids == ["q0", "q0", "q1", "q1"]
        assert a(op="next", qid="q1")["ok"]
    with Client(server.port) as c:
        r = c(op="next", qid="q0")
        assert r["ok"] is False and "Unknown qid" in r["error"]


def test_lenient_repairs_appear_as_warnings(server, db):
    with Client(server.port) as c:
        r = c(op="query", query="(^ hello world")
        assert r["ok"] and r["rank"] == 1
        assert any("missing ')'" in w for w in r["warnings"])
        assert r["docno"] == expected_ranks(db, "(^ hello world)")[0]
        r = c(op="query", query='("hello")')
        assert r["ok"] and any("unwrapped" in w for w in r["warnings"])
        assert "warnings" not in c(op="query", query="(^ hello world)")
        r = c(op="query", query="(^ hello world:)")     # names no feature: its words
        assert r["ok"] and r["docno"] == expected_ranks(db, "(^ hello world)")[0]
        assert r["warnings"] == ["'world:' names no feature of the database; searched its "
                                 'words "world" instead']


def test_query_errors(server):
    with Client(server.port) as c:
        for request, wanted in [
            ({"op": "query"}, "Missing query"),
            ({"op": "query", "query": ""}, "Missing query"),
            ({"op": "query", "query": 7}, "must be a string"),
            ({"op": "query", "query": "(foo a)"}, "offset 1"),
            ({"op": "query", "query": "(^ a b))"}, "offset 7"),
            ({"op": "query", "query": "   "}, "empty query"),
        ]:
            r = c(**request)
            assert r["op"] == "query" and r["ok"] is False, r
            assert wanted in r["error"], (request, r)
            assert list(r) == ["op", "ok", "error"]
        assert c(op="query", query="hello")["ok"]                # connection still open


def test_document_whole_text_and_quotes(server):
    with Client(server.port) as c:
        assert c(op="document", docno="p4")["document"] == "goodbye world"
        r = c(op="document", docno='"p4"')                      # the Vole may quote docnos
        assert r["ok"] and r["docno"] == "p4" and r["document"] == "goodbye world"
        r = c(op="document", docno="m1")                        # newlines become spaces
        assert r["ok"] and "\n" not in r["document"] and "Greetings World" in r["document"]
        for request, wanted in [({"op": "document"}, "Missing docno"),
                                ({"op": "document", "docno": ""}, "Missing docno"),
                                ({"op": "document", "docno": 3}, "must be a string"),
                                ({"op": "document", "docno": "nope"}, "Unknown docno"),
                                ({"op": "document", "docno": '"nope"'}, "Unknown docno")]:
            r = c(**request)
            assert r["op"] == "document" and r["ok"] is False and wanted in r["error"], r


def test_document_fields(fields_server):
    with Client(fields_server.port) as c:
        r = c(op="document", docno="m1")
        assert r["document"] == "Hello title ... Greetings World ... the world is big, hello"
        r = c(op="document", docno="m3")                        # empty title skipped
        assert r["document"] == "only a segment about the world"
        r = c(op="document", docno="m2")                        # no such field: whole text
        assert "no named fields hello world" in r["document"]
        assert c(op="document", docno="p1")["document"] == TEXTS["p1"]


def test_unknown_and_missing_op(server):
    with Client(server.port) as c:
        r = c(op="frobnicate")
        assert r == {"op": "frobnicate", "ok": False, "error": r["error"]}
        assert "Unknown op" in r["error"]
        r = c(qid="q0")
        assert r["ok"] is False and r["op"] == "" and "Unknown op" in r["error"]
        r = c(op=5)
        assert r["ok"] is False and "Unknown op" in r["error"]
        r = c(op="next")
        assert r["ok"] is False and "Missing qid" in r["error"]


@pytest.mark.parametrize("line", [
    b"this is not json",
    b"\x00\x01\x02\xfe\xff garbage \x80",
    b'{"op":"query","query":"\xff\xfe"}',                     # invalid UTF-8
    b"[1, 2, 3]",
    b'"a string"',
    b"null",
    b"",
    b'{"op": "query", "query": ',
])
def test_bad_lines_get_a_parse_error_and_the_connection_stays(server, line):
    with Client(server.port) as c:
        record = c.send_line(line)
        assert record["query"] == {"op": "parse"}
        r = record["response"]
        assert r["op"] == "parse" and r["ok"] is False and r["error"], r
        assert c(op="query", query="hello")["ok"]


def test_carriage_returns_are_ignored(server):
    with Client(server.port) as c:
        c.sock.sendall(b'{"op":"query",\r"query":"hello"}\r\n{"op":"stats"}\r\n')
        assert c.read()["response"]["rank"] == 1
        assert c.read()["response"]["op"] == "stats"


def test_pipelined_requests_are_answered_in_order(server):
    with Client(server.port) as c:
        lines = [json.dumps({"op": "document", "docno": d}).encode() for d in TEXTS]
        c.sock.sendall(b"\n".join(lines) + b"\n")
        assert [c.read()["response"]["docno"] for _ in lines] == list(TEXTS)


def test_a_10mb_line_is_refused_and_the_connection_stays(server):
    with Client(server.port) as c:
        big = b'{"op":"query","query":"' + b"x" * (10 << 20) + b'"}'
        c.sock.sendall(big + b"\n" + b'{"op":"document","docno":"p4"}\n')
        record = c.read()
        assert record["query"] == {"op": "parse"}
        assert record["response"]["ok"] is False and "longer than" in record["response"]["error"]
        r = c.read()["response"]                     # the rest of the long line was dropped
        assert r["ok"] and r["document"] == "goodbye world"
        assert c(op="query", query="hello")["ok"]


def test_max_line_counts_bytes(db):
    with Server(db.path, max_line=100) as s, Client(s.port) as c:
        assert c(op="document", docno="p4")["ok"]
        record = c.send_line(json.dumps({"op": "query", "query": "y" * 200}).encode())
        assert record["response"]["op"] == "parse" and "longer than 100" in \
            record["response"]["error"]
        assert c(op="document", docno="p4")["ok"]


def test_half_line_then_disconnect_and_garbage(server):
    for payload in (b'{"op":"query","que', b"\xff\xfe\x00garbage", b"x" * 3_000_000):
        s = socket.create_connection(("127.0.0.1", server.port))
        try:
            s.sendall(payload)
        finally:
            s.close()
    s = socket.create_connection(("127.0.0.1", server.port))    # reset mid-request
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.sendall(b'{"op":"query","query":"hello"}\n{"op":"next"')
    s.close()
    with Client(server.port) as c:
        assert c(op="query", query="(^ hello world)")["rank"] == 1
    with Client(server.port) as c:                  # an unterminated last line is answered
        c.sock.sendall(b'{"op":"document","docno":"p4"}')
        c.sock.shutdown(socket.SHUT_WR)
        assert c.read()["response"]["document"] == "goodbye world"


def test_concurrent_clients_get_consistent_answers(server, db):
    queries = ["(^ hello world)", "world", "hello", "(... hello world)", "(+ goodbye filler)",
               "(^ hello (+ number filler))"]
    expected = {q: expected_ranks(db, q) for q in queries}
    assert all(expected.values())
    errors: list = []
    results: dict = {}

    def client(k: int):
        try:
            with Client(server.port) as c:
                order = queries[k % len(queries):] + queries[:k % len(queries)]
                open_ = {}
                got = {q: [] for q in order}
                for q in order:                       # open every query, then interleave
                    r = c(op="query", query=q)
                    open_[q] = r["qid"]
                    got[q].append(r["docno"])
                while open_:
                    for q in list(open_):
                        r = c(op="next", qid=open_[q])
                        assert r["ok"], r
                        if r.get("done"):
                            del open_[q]
                        else:
                            assert r["rank"] == len(got[q]) + 1
                            got[q].append(r["docno"])
                results[k] = got
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 12
    for got in results.values():
        assert got == expected


def test_a_slow_query_times_out_and_does_not_stall_others(db, monkeypatch):
    release = threading.Event()
    real_rank = Snapshot.rank  # (the server ranks through the read interface)

    def slow_rank(snapshot, gcl, **kw):
        if "slowpoke" in gcl:
            release.wait(10)
        return real_rank(snapshot, gcl, **kw)

    monkeypatch.setattr(Snapshot, "rank", slow_rank)
    with Server(db.path, query_timeout=4.0) as s, Client(s.port) as slow, \
            Client(s.port) as fast:
        slow.sock.sendall(b'{"op":"query","query":"(+ slowpoke hello)"}\n')
        started = time.monotonic()
        r = fast(op="query", query="(^ hello world)")       # answered while the other runs
        assert r["ok"] and r["rank"] == 1
        assert time.monotonic() - started < 3.0             # before the other's time limit
        r = slow.read()["response"]
        assert r["op"] == "query" and r["ok"] is False and "timed out" in r["error"]
        assert slow(op="query", query="hello")["ok"]        # the connection stays usable
        release.set()


def test_query_states_are_evicted_least_recently_used(db):
    with Server(db.path, max_queries=2) as s, Client(s.port) as c:
        q = [c(op="query", query=w)["qid"] for w in ("hello", "world")]
        assert c(op="next", qid=q[0])["ok"]                 # q0 is now the most recent
        q.append(c(op="query", query="filler")["qid"])      # evicts q1
        assert "Unknown qid" in c(op="next", qid=q[1])["error"]
        assert c(op="next", qid=q[0])["ok"] and c(op="next", qid=q[2])["ok"]
        stats = c(op="stats")["server"]
        assert stats["queries_kept"] == 2 and stats["queries_issued"] == 3
    with Server(db.path, max_query_bytes=1) as s, Client(s.port) as c:  # bytes bound too
        q = [c(op="query", query=w)["qid"] for w in ("hello", "world")]
        assert "Unknown qid" in c(op="next", qid=q[0])["error"]
        assert c(op="next", qid=q[1])["ok"]


# ---------------------------------------------------------------- extensions


def test_count_and_stats(server):
    with Client(server.port) as c:
        r = c(op="count", query="hello")
        assert r == {"op": "count", "ok": True, "count": r["count"]} and r["count"] > 20
        r = c(op="count", query="(^ zebra")
        assert r["count"] == 0 and r["warnings"]
        assert "offset" in c(op="count", query="(bad x)")["error"]
        assert "Missing query" in c(op="count")["error"]
        r = c(op="stats")
        assert r["ok"] and r["op"] == "stats" and r["documents"] >= 28
        assert {"tokens", "features", "size_bytes", "server"} <= set(r)


def test_annotate(server, db):
    with Client(server.port) as c:
        r = c(op="annotate", docno='"p2"', feature="judgment:t1", value=3)
        assert r == {"op": "annotate", "ok": True, "docno": "p2", "feature": "judgment:t1",
                     "value": 3}
        assert c(op="count", query="(= judgment:t1 3)")["count"] == 1
        r = c(op="query", query="(<< (^ hello world) judgment:t1)")
        assert r["docno"] == "p2"
        for request, wanted in [
            ({"docno": "p2", "value": 1}, "Missing feature"),
            ({"docno": "p2", "feature": "hello"}, "not a feature name"),
            ({"docno": "p2", "feature": ":"}, "not a feature name"),
            ({"docno": "p2", "feature": "j:x", "value": "high"}, "finite number"),
            ({"docno": "p2", "feature": "j:x", "value": True}, "finite number"),
            ({"docno": "nope", "feature": "j:x"}, "Unknown docno"),
            ({"feature": "j:x"}, "Missing docno"),
        ]:
            r = c(op="annotate", **request)
            assert r["op"] == "annotate" and r["ok"] is False and wanted in r["error"], r
    with db.read() as snap:
        assert len(snap.intervals("j:x")) == 0


def test_note(server, db):
    with Client(server.port) as c:
        r = c(op="note", docno="p2", qid="t7", text="Explains hello world in full.")
        assert r == {"op": "note", "ok": True, "docno": "note:t7@p2", "target": "p2"}
        assert c(op="query", query="(>> : (@ note:t7))")["docno"] == "p2"
        # notes are apart from the collection: found when a query asks for them
        assert c(op="query", query="explains")["done"] is True
        assert c(op="query", query="explains", container="note:")["docno"] == "note:t7@p2"
        for request, wanted in [({"docno": "p2"}, "Missing text"),
                                ({"docno": "nope", "text": "x"}, "Unknown docno"),
                                ({"docno": "p2", "text": "x", "qid": "a b"}, "qid must")]:
            r = c(op="note", **request)
            assert r["ok"] is False and wanted in r["error"], r


def test_commits_beside_the_server_are_seen_by_the_next_query(server, db):
    with Client(server.port) as c:
        assert c(op="query", query="kumquat")["done"]
        with db.write() as w:
            w.add("a fresh kumquat arrives", docno="fresh1")
        r = c(op="query", query="kumquat")
        assert r["docno"] == "fresh1"
        assert c(op="document", docno="fresh1")["document"] == "a fresh kumquat arrives"


# ---------------------------------------------------------------- security, limits, life cycle


def test_token_mode(db):
    with Server(db.path, token="s3cret") as s, Client(s.port) as c:
        for request in ({"op": "query", "query": "hello"},
                        {"op": "query", "query": "hello", "token": "wrong"},
                        {"op": "stats", "token": 42}):
            r = c(**request)
            assert r["ok"] is False and r["error"] == "unauthorized" and \
                r["op"] == request["op"]
        record = c.ask({"op": "query", "query": "hello", "token": "s3cret"})
        assert record["response"]["ok"] and "token" not in record["query"]
        assert c(op="next", qid=record["response"]["qid"], token="s3cret")["ok"]
        assert c.send_line(b"not json")["response"]["op"] == "parse"


def test_non_loopback_needs_a_token(db):
    for host in ("0.0.0.0", ""):
        with pytest.raises(ServerError, match="token"):
            Server(db.path, host=host)
    with pytest.raises(ServerError, match="empty"):
        Server(db.path, token="")
    assert server_module.is_loopback("localhost") and server_module.is_loopback("::1")
    assert not server_module.is_loopback("0.0.0.0")


def test_bad_configuration_is_reported_before_listening(tmp_path, db):
    with pytest.raises(annodb.StorageError):
        Server(str(tmp_path / "missing.db"))
    with pytest.raises(ServerError, match="container"):
        Server(db.path, container="(bad")


def test_too_many_clients(db):
    with Server(db.path, max_clients=1) as s, Client(s.port) as first:
        assert first(op="stats")["ok"]
        with Client(s.port) as second:
            r = second.read()["response"]
            assert r["ok"] is False and "too many clients" in r["error"]
            assert second.reader.readline() == b""
        assert first(op="stats")["ok"]


def test_shutdown_closes_idle_connections(db):
    s = Server(db.path).start()
    with Client(s.port) as c:
        assert c(op="stats")["ok"]
        started = time.monotonic()
        s.shutdown()
        assert time.monotonic() - started < 4.5   # not shutdown's 5 s wait for threads
        assert c.reader.readline() == b""
    s.shutdown()                                               # twice is fine
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()


def test_shutdown_right_after_a_reply_closes_the_connection(db):
    """stop's cancel reaching a connection as its reply is sent was lost (1 shutdown in
    20 then waited 5 s and left the connection open)."""
    for _ in range(100):
        with Server(db.path, log=io.StringIO()) as s, Client(s.port, timeout=3) as c:
            assert c(op="stats")["ok"]
            s.shutdown()
            assert c.reader.readline() == b""


def test_cli_errors(tmp_path, db):
    runner = CliRunner()
    result = runner.invoke(serve, ["--db", str(tmp_path / "missing.db")])
    assert result.exit_code == 1
    assert result.stderr.startswith("annodb: error: ") and len(result.stderr.splitlines()) == 1
    result = runner.invoke(serve, ["--db", db.path, "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "token" in result.stderr
    result = runner.invoke(serve, ["--db", db.path, "--fields", "title:,,segment:"])
    assert result.exit_code == 2
    result = runner.invoke(serve, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.output


def test_subprocess_server_with_sigterm(db):
    """The real command: listening line on stderr, queries, a commit from this process seen
    by the next query, an annotation (the read-only handle reopened read-write), SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from annodb_cli.serve import serve; serve()", "--db", db.path,
         "--port", "0", "--fields", "title:,segment:"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": REPO})
    try:
        line = proc.stderr.readline().decode()
        m = re.fullmatch(r"listening on port (\d+)\n", line)
        assert m, line + proc.stderr.read().decode() if proc.poll() is not None else line
        with Client(int(m.group(1))) as c:
            assert all_ranks(c, "(^ hello world)") == expected_ranks(db, "(^ hello world)")
            assert c(op="document", docno="m1")["document"].startswith("Hello title ... ")
            assert c(op="query", query="persimmon")["done"]
            with db.write() as w:
                w.add("one persimmon, ripe", docno="fresh2")
            assert c(op="query", query="persimmon")["docno"] == "fresh2"
            r = c(op="annotate", docno="fresh2", feature="judgment:t2", value=2)
            assert r["ok"], r
            assert c(op="count", query="judgment:t2")["count"] == 1
            assert c(op="query", query="(^ hello world)")["rank"] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        err = proc.stderr.read().decode()
        assert "Traceback" not in err and "shutting down" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    with db.read() as snap:                     # the subprocess's commit reached this process
        assert len(snap.intervals("judgment:t2")) == 1


def test_respond_without_sockets(server):
    record = json.loads(server.respond('{"op":"document","docno":"p4"}'))
    assert record["response"]["document"] == "goodbye world"
    assert json.loads(server.respond(b"{"))["response"]["op"] == "parse"


def test_query_rank_field(server, db):
    """The additive "rank" field: BM25 (or fused) order of the same matches; without it
    SSR, as the reference server ranks; a mistyped ranker is an error line."""
    query = "(+ hello world)"
    with db.read() as snap:
        want = [h.docno for h in snap.search(query, k=1000, rank="bm25")]
    with Client(server.port) as c:
        r = c(op="query", query=query, rank="bm25")
        assert r["ok"] and r["rank"] == 1 and r["docno"] == want[0]
        got = [r["docno"]]
        while True:
            r = c(op="next", qid=r["qid"])
            if r.get("done"):
                break
            got.append(r["docno"])
        assert got == want
        assert sorted(all_ranks(c, query)) == sorted(want)
        assert all_ranks(c, query) == expected_ranks(db, query) != want
        bad = c(op="query", query=query, rank="bm2")
        assert bad == {"op": "query", "ok": False,
                       "error": "unknown ranker 'bm2': choose one of ssr, bm25, fused, sparse, "
                                "bm25+rm3"}
        assert c(op="query", query=query, rank="fused")["ok"]
        with db.read() as snap:
            rm3 = [h.docno for h in snap.search(query, k=1, rank="bm25+rm3")]
        r = c(op="query", query=query, rank="bm25+rm3")
        assert r["ok"] and [r["docno"]] == rm3


# ---------------------------------------------------------------- the contracts
# What an agent written for the reference server depends on, against expectations written
# by hand (not ranking.rank's output): qids, the depth, the snippet's width, `done`.

DEEP = 1200                                   # documents holding "common": more than DEPTH
LONG = [f"w{i:03d}" for i in range(500)]      # one document of 500 distinct words


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    """A database where "common" matches 1200 documents, "(^ alpha omega)" three (in a
    known SSR order: the shorter the cover, the higher) and w250 one long document."""
    path = str(tmp_path_factory.mktemp("deep") / "deep.db")
    with annodb.open(path) as database, database.write() as w:
        for i in range(DEEP):
            w.add(f"common filler{i}", docno=f"c{i:04d}")
        w.add("alpha x x x omega", docno="far")
        w.add("alpha omega", docno="near")
        w.add("alpha x omega", docno="mid")
        w.add(" ".join(LONG), docno="long")
    return path


def ranks(ask, query: str) -> list[dict]:
    """Every response of `query`: the query's, then next until done (that one included)."""
    responses = [ask(op="query", query=query)]
    while not responses[-1].get("done"):
        assert len(responses) <= DEEP + 1
        responses.append(ask(op="next", qid=responses[0]["qid"]))
    return responses


def test_done_comes_right_after_the_last_rank(deep):
    with Server(deep) as s, Client(s.port) as c:
        got = ranks(c, "(^ alpha omega)")
    assert [(r["op"], r.get("rank"), r.get("docno")) for r in got] == [
        ("query", 1, "near"), ("next", 2, "mid"), ("next", 3, "far"), ("next", None, None)]
    assert got[-1] == {"op": "next", "ok": True, "qid": "q0", "done": True}


def test_the_depth_is_1000_by_default(deep):
    """A query matching 1200 documents: exactly ranks 1..1000, then done."""
    with Server(deep) as s, Client(s.port) as c:
        got = ranks(c, "common")
        assert c(op="next", qid="q0")["done"] is True             # still done past it
    assert [r.get("rank") for r in got] == list(range(1, 1001)) + [None]
    assert got[-1] == {"op": "next", "ok": True, "qid": "q0", "done": True}
    docnos = {r["docno"] for r in got[:-1]}
    assert len(docnos) == 1000 and docnos <= {f"c{i:04d}" for i in range(DEEP)}


def test_qids_start_at_q0_on_every_connection(deep):
    with Server(deep) as s:
        for _ in range(2):
            with Client(s.port) as c:
                assert [c(op="query", query=q)["qid"] for q in ("common", "zebra", "alpha")] \
                    == ["q0", "q1", "q2"]
                assert c(op="next", qid="q0")["rank"] == 2


def test_a_snippet_is_200_tokens_around_the_cover(deep):
    """w250 in a document of 500 distinct words: 99 tokens before it and 100 after
    (w151 .. w350), the cover highlighted."""
    with Server(deep) as s, Client(s.port) as c:
        r = c(op="query", query="w250")
    assert r["docno"] == "long"
    words = r["snippet"].split()
    assert len(words) == 200
    assert words[0] == "w151" and words[99] == "<cover>w250</cover>" and words[-1] == "w350"
    assert r["snippet"] == " ".join(LONG[151:250] + ["<cover>w250</cover>"] + LONG[251:351])


def test_annodb_serve_honours_depth(deep):
    """The real command on a real socket: `annodb serve --depth 3` gives three ranks of a
    query matching 1200 documents, then done."""
    script = os.path.join(os.path.dirname(sys.executable), "annodb")
    command = [script] if os.path.exists(script) else \
        [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()"]
    proc = subprocess.Popen(command + ["serve", "--db", deep, "--port", "0", "--depth", "3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline().decode()
        m = re.fullmatch(r"listening on port (\d+)\n", line)
        assert m, line
        with Client(int(m.group(1))) as c:
            got = ranks(c, "common")
            assert c(op="stats")["server"]["depth"] == 3
        assert [r.get("rank") for r in got] == [1, 2, 3, None]
        assert got[-1] == {"op": "next", "ok": True, "qid": "q0", "done": True}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_the_vole_in_process_answers_as_the_server(deep):
    """vole's Local backend speaks the server's protocol (annodb.protocol, one connection):
    the same responses, qids from q0, depth and snippets included."""
    from vole.backend import Local
    queries = ["common", "(^ alpha omega)", "w250", "zebra"]
    with Server(deep) as s, Client(s.port) as c, Local(deep, readonly=True) as local:
        def ask(op, query=None, qid=None):
            return local.query(query) if op == "query" else local.next(qid)
        assert [ranks(ask, q) for q in queries] == [ranks(c, q) for q in queries]
