"""Security of `annodb serve`: it binds loopback by default and refuses any other address
without a token; no request reads a file outside the database or runs code; the line,
query-time and client limits hold under a flood of requests. Every connection here goes
to 127.0.0.1 and every flood is bounded in count and time (sizes: workload.size)."""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import annodb
from annodb import server as server_module
from annodb.transaction import Snapshot
from annodb.server import Server, ServerError
from annodb_cli.serve import serve
from server_client import Client

from .workload import size

pytestmark = pytest.mark.reliability

PACKAGE = Path(annodb.__file__).parent


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("security") / "db"
    database = annodb.open(path)
    with database.write() as w:
        for i in range(50):
            w.add(f"hello world document {i} about passwords and secrets", docno=f"d{i}")
    yield database
    database.close()


def test_the_server_binds_loopback_by_default(db):
    with Server(db.path) as s:
        assert s.host == "127.0.0.1"
        assert s._listener.getsockname()[0] == "127.0.0.1"
    default = {p.name: p.default for p in serve.params}["host"]
    assert default == "127.0.0.1"


def _non_loopback_addresses() -> list[str]:
    found = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            address = info[4][0]
            if not server_module.is_loopback(address):
                found.add(address)
    except (OSError, ServerError):
        pass
    return sorted(found)


def test_non_loopback_bind_without_a_token_is_refused(db):
    hosts = ["0.0.0.0", "", "*", "::", "0", "::ffff:0.0.0.0", "0:0:0:0:0:0:0:0",
             *_non_loopback_addresses()]
    for host in hosts:
        with pytest.raises(ServerError, match="token|resolve"):
            Server(db.path, host=host)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert server_module.is_loopback(host), host
    result = CliRunner().invoke(serve, ["--db", db.path, "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "token" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    s = Server(db.path, host="0.0.0.0", token="a-long-token")   # allowed (not started here)
    s.shutdown()


PATHS = ["../../../../../../etc/passwd", "/etc/passwd", "file:///etc/passwd", "/etc/shadow",
         "../secret.txt", "../../secret.txt", "..\\..\\secret.txt", "%2e%2e%2fsecret.txt",
         "data.mdb", "lock.mdb", "writer.lock", "./data.mdb", "\x00/etc/passwd",
         "d1/../../secret.txt", "~/.ssh/id_rsa", "/proc/self/environ", "/dev/zero"]


def _requests(secret: Path, database: str) -> list[dict]:
    out = []
    for p in PATHS + [str(secret), os.path.join(database, "data.mdb")]:
        out += [{"op": "document", "docno": p}, {"op": "document", "docno": f'"{p}"'},
                {"op": "query", "query": p}, {"op": "query", "query": f'"{p}"'},
                {"op": "count", "query": f"(<< {p} :)"}, {"op": "query", "query": f"(@ {p}:)"},
                {"op": "annotate", "docno": p, "feature": "x:"},
                {"op": "note", "docno": p, "text": "n"},
                {"op": "annotate", "docno": "d1", "feature": p + ":"},
                {"op": "stats", "path": p, "db": p}, {"op": p}]
    return out


def test_no_request_reads_files_outside_the_database(db, tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-8f1c2e")
    opened = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *a, **kw):
        opened.append(os.fspath(file) if not isinstance(file, int) else file)
        return real_open(file, *a, **kw)

    def spy_os_open(path, *a, **kw):
        opened.append(os.fspath(path))
        return real_os_open(path, *a, **kw)

    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with Server(db.path) as s, Client(s.port) as c:
        monkeypatch.setattr(builtins, "open", spy_open)
        monkeypatch.setattr(io, "open", spy_open)
        monkeypatch.setattr(os, "open", spy_os_open)
        replies = [c(**request) for request in _requests(secret, db.path)]
        monkeypatch.undo()
    text = json.dumps(replies)
    assert "TOPSECRET" not in text and "root:x:0:0" not in text and "root:" not in text
    for request, reply in zip(_requests(secret, db.path), replies):
        if request["op"] in ("document", "note") or (request["op"] == "annotate" and
                                                     request["docno"] != "d1"):
            assert reply["ok"] is False and "Unknown docno" in reply["error"], (request, reply)
    database_dir = os.path.realpath(db.path)
    outside = [p for p in opened if isinstance(p, str) and
               not os.path.realpath(p).startswith(database_dir + os.sep)]
    assert outside == [], outside
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


PAYLOADS = ["__import__('os').system('touch {m}')", "$(touch {m})", "; touch {m}",
            "`touch {m}`", "| touch {m}", "{{{{7*7}}}}", "%s%s%s%n", "${{jndi:ldap://x}}",
            "eval(open('{m}','w'))", "exec('import os')", "(+ __import__ os)",
            "(@ (= :__class__: 1))", "' OR 1=1 --", "\"; DROP TABLE docs; --"]


def _code_ast_calls(path: Path) -> list[str]:
    """Dynamic code execution or process spawning in a module: calls of eval/exec/compile/
    __import__, imports of pickle/marshal/shelve/subprocess, os.system/popen/exec*/spawn*."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("eval", "exec", "compile", "__import__"):
                found.append(f"{path.name}:{node.lineno} {f.id}()")
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                    f.value.id == "os" and (f.attr in ("system", "popen") or
                                            f.attr.startswith(("exec", "spawn"))):
                found.append(f"{path.name}:{node.lineno} os.{f.attr}()")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            for name in names:
                if name.split(".")[0] in ("pickle", "marshal", "shelve", "subprocess", "dill"):
                    found.append(f"{path.name}:{node.lineno} import {name}")
    return found


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line == text)


def test_no_request_runs_code(db, tmp_path):
    marker = tmp_path / "pwned"
    with Server(db.path) as s, Client(s.port) as c:
        for payload in PAYLOADS:
            p = payload.format(m=marker)
            for request in ({"op": "query", "query": p}, {"op": "count", "query": p},
                            {"op": "document", "docno": p}, {"op": "next", "qid": p},
                            {"op": "annotate", "docno": "d1", "feature": "x:" + p},
                            {"op": "note", "docno": "d1", "text": p, "qid": "t1"},
                            {"op": p, "query": p}):
                r = c(**request)
                assert isinstance(r["ok"], bool)
                assert "internal error" not in r.get("error", ""), (request, r)
        c.send(b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94"
               b"\x93\x94.")                                    # a pickle: not JSON
        assert c.read()["response"]["op"] == "parse"
        assert c(op="query", query="hello")["ok"]
    assert not marker.exists()
    # and nothing on the request path can: no eval/exec, no pickle, no process spawning
    request_path = ["protocol", "query", "gcl", "lists", "ranking", "snippets", "transaction",
                    "database", "records", "tokenizer", "errors", "check"]
    found = [f for name in request_path for f in _code_ast_calls(PACKAGE / f"{name}.py")]
    for package in ("storage", "kernels"):
        for module in (PACKAGE / package).glob("*.py"):
            found += _code_ast_calls(module)
    assert found == [], found
    # the transport starts its worker processes, always the same code, at start (and again
    # when one dies): nothing a request says reaches that command
    spawned = _code_ast_calls(PACKAGE / "server.py")
    assert spawned == [f"server.py:{_line_of(PACKAGE / 'server.py', 'import subprocess')} "
                       "import subprocess"], spawned
    text = (PACKAGE / "server.py").read_text()
    assert text.count("subprocess.Popen(") == 1 and \
        'code = ("import sys; from annodb.server import _worker_main; "' in text


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_limits_hold_under_a_flood(db, monkeypatch, figures):
    """max_clients+8 connections; each admitted one pipelines normal queries, slow
    queries (held back by a patched ranker), over-long lines (8 KiB and 1 MiB), a query as
    long as a line may be and garbage. Every line gets exactly one reply; a query's reply
    comes within the time limit (plus scheduling slack); the query states stay bounded;
    extra connections are turned away; memory stays bounded; the server serves normally
    afterwards."""
    per_client, clients, timeout, max_line = size(60, 1500), 16, 0.3, 4096
    release = threading.Event()
    real_rank = Snapshot.rank  # (the server ranks through the read interface)

    def slow_rank(snapshot, gcl, **kw):
        if "slowpoke" in gcl:
            release.wait(0.6)
        return real_rank(snapshot, gcl, **kw)

    monkeypatch.setattr(Snapshot, "rank", slow_rank)
    long_query = ("(+ " + " ".join(["hello", "world", "secrets"] * 2000))[:max_line - 40] + ")"
    lines = [json.dumps({"op": "query", "query": "(^ hello world)"}).encode(),
             json.dumps({"op": "count", "query": "(+ hello passwords)"}).encode(),
             json.dumps({"op": "query", "query": "(+ slowpoke hello)"}).encode(),
             json.dumps({"op": "query", "query": long_query}).encode(),
             b"x" * 8192, b"y" * (1 << 20), b"\xff\xfe garbage {", b'{"op":"next","qid":"q1"}']
    weights = [30, 20, 3, 4, 4, 1, 10, 25]
    rss_before = _rss_mb()
    stats_seen, slowest, problems = {}, {}, []
    lock = threading.Lock()
    started = time.perf_counter()
    with Server(db.path, max_line=max_line, query_timeout=timeout, max_clients=clients,
                max_queries=200, workers=4, log=io.StringIO()) as s:
        admitted = [Client(s.port, timeout=120) for _ in range(clients)]
        try:
            for c in admitted:
                assert c(op="stats")["ok"]
            refused = 0
            for _ in range(8):                             # past max_clients
                with Client(s.port) as extra:
                    r = extra.read()["response"]
                    refused += (r["ok"] is False and "too many clients" in r["error"])
                    assert extra.reader.readline() == b""

            def flood(k: int, c: Client) -> None:
                import random
                rng = random.Random(k)
                mine = [rng.choices(range(len(lines)), weights)[0] for _ in range(per_client)]
                def send():   # line by line: a socket timeout bounds each sendall
                    for i in mine:
                        c.sock.sendall(lines[i] + b"\n")

                sender = threading.Thread(target=send)
                sender.start()
                try:
                    for i in mine:
                        record = c.read()
                        response, ms = record["response"], record["time"]
                        with lock:
                            key = "slow" if i == 2 else response["op"]
                            slowest[key] = max(slowest.get(key, 0.0), ms)
                            stats_seen[key] = stats_seen.get(key, 0) + 1
                        if i in (0, 1, 3) and "timed out" in response.get("error", ""):
                            with lock:
                                stats_seen["fast query timed out"] = \
                                    stats_seen.get("fast query timed out", 0) + 1
                        # generous: on a loaded machine a reply may wait for a core
                        # (that slow queries are cut off, their error says)
                        if i in (0, 1, 2, 3) and ms > (timeout + 10.0) * 1000:
                            problems.append(f"{key} took {ms} ms")
                        if i == 2 and "timed out" not in response.get("error", ""):
                            problems.append(f"slow query not cut off: {response}")
                        if i in (4, 5) and "longer than" not in response.get("error", ""):
                            problems.append(f"long line: {response}")
                finally:
                    sender.join(120)

            threads = [threading.Thread(target=flood, args=(k, c))
                       for k, c in enumerate(admitted)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            assert not any(t.is_alive() for t in threads)
            with Client(s.port) as after:       # a free slot again once one leaves? not yet:
                r = after.read()["response"]   # still max_clients connected
                assert "too many clients" in r["error"]
        finally:
            for c in admitted:
                c.close()
        release.set()
        time.sleep(0.2)
        with Client(s.port) as c:
            r = c(op="query", query="(^ hello world)")
            assert r["ok"] and r["docno"].startswith("d")
            kept = c(op="stats")["server"]["queries_kept"]
    seconds = time.perf_counter() - started
    rss_growth = _rss_mb() - rss_before
    figures.update(clients=clients, refused_connections=refused,
                   lines=clients * per_client, replies=stats_seen,
                   slowest_reply_ms={k: round(v, 1) for k, v in slowest.items()},
                   query_timeout_ms=timeout * 1000, queries_kept=kept,
                   rss_growth_mb=round(rss_growth, 1), seconds=round(seconds, 1))
    assert refused == 8
    assert not problems, problems[:10]
    assert sum(v for k, v in stats_seen.items() if k != "fast query timed out") == \
        clients * per_client
    assert kept <= 200
    assert rss_growth < 300, rss_growth
