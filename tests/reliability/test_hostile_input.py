"""Hostile input: the query parser and evaluator fuzzed, the server fuzzed over a real
socket, and ingest of malformed, oversized, empty, duplicate, missing, read-only and
full-disk input. Sizes: workload.size(short, long) (see conftest.py).

Rules checked throughout: the parser raises only QueryError (strict and lenient), and a
query that parses has a canonical form that parses back to the same AST and evaluates
without an exception other than an AnnodbError; the server answers every line with one
JSON reply of the protocol's shape, never an internal error, and keeps serving; ingest
reports bad records as "file:line: message" (or raises IngestError/StorageError naming
the problem), the command line prints one `annodb: error:` line and never a traceback,
and a failed batch leaves the database exactly as it was (documents, erased ranges,
statistics, check()).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import resource
import socket
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import annodb
from annodb.check import check
from annodb.errors import AnnodbError, IngestError, QueryError, StorageError
from annodb.ingest import ingest
from annodb.query import OPERATORS, format as format_query, parse
from annodb.server import Server
from annodb_cli.main import annodb as annodb_cli

from .workload import SEED, size

pytestmark = pytest.mark.reliability

DATA = Path(__file__).parent.parent / "data"
QUERIES = [line.rstrip("\n").split("\t", 3)[3]
           for line in (DATA / "vole-queries.tsv").read_text().splitlines(True)[1:]]
VOCAB = sorted({w for q in QUERIES for w in annodb.tokenizer.tokens(q)})
OPS = list(OPERATORS) + ["", "?", "^^", "<<<", "..", "!", "@@", "##"]
NASTY = ['"', "(", ")", "((", "))", "\\", "\x00", "\t", "\n", "\r", "\u00e9", "\u200b",
         "\U0001f600", "\ud800", "\udc80", "\ufeff", "9" * 30, "-1", "1e309", "nan",
         "inf", "0", "-0", "1.5", ":", "::", "title:", ":year:", "#", "@", "="]


# ------------------------------------------------------------------ a small database


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    """200 records made of the vole queries' words (so fuzzed queries find things), with
    title and body fields and numeric values (:year:, :score:)."""
    path = tmp_path_factory.mktemp("hostile") / "small.db"
    rng = random.Random(SEED)
    db = annodb.open(path)
    with db.write() as w:
        w.add_many([({"docid": f"r{i}", "title": " ".join(rng.choices(VOCAB, k=5)),
                      "body": " ".join(rng.choices(VOCAB, k=rng.randint(0, 80))),
                      "year": rng.randint(1990, 2025), "score": rng.random()}, None)
                    for i in range(200)])
        w.add("", docno="empty")
    with db.write() as w:
        d = w.document("r7")
        w.annotate("judgment:t1", d.start, d.end, 2)
        w.erase(w.document("r9").start + 1, w.document("r9").start + 2)
    yield db
    db.close()


# ------------------------------------------------------------------ the parser


def mutate(rng: random.Random, text: str) -> str:
    """One to four random edits of a query: characters, spans, parentheses, operators,
    numbers, splices with other queries, truncations, deep nesting."""
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        i, j = sorted((rng.randint(0, n), rng.randint(0, n)))
        kind = rng.randrange(12)
        if kind == 0:
            text = text[:i] + text[j:]
        elif kind == 1:
            text = text[:i] + rng.choice(NASTY) + text[i:]
        elif kind == 2:
            text = text[:i] + rng.choice(string.printable) + text[i + 1:]
        elif kind == 3:
            text = text[:i] + text[i:j] + text[i:j] + text[j:]
        elif kind == 4:
            text = text[:i]
        elif kind == 5:
            other = rng.choice(QUERIES)
            k = rng.randint(0, len(other))
            text = text[:i] + other[k:] if rng.random() < 0.5 else other[:k] + text[i:]
        elif kind == 6:
            text = f"({rng.choice(OPS)} {text} {rng.choice(VOCAB)})"
        elif kind == 7:
            text = text[:i] + f"(# {rng.choice(['1', '0', '5', '9' * 25, '-3', '1.5'])})" + text[i:]
        elif kind == 8:
            text = text.replace(")", "", 1) if rng.random() < 0.5 else "(" + text
        elif kind == 9:
            op = rng.choice(["=", "<", ">=", "!="])
            text = f"({op} {text} {rng.choice(['1', '-2.5', '1e308', '1e309', 'x', '(+ a b)'])})"
        elif kind == 10:
            depth = rng.choice([5, 199, 200, 201, 1000])
            text = "(^ " * depth + text + ")" * rng.choice([depth, depth - 1, 0])
        else:
            text = text[:i] + rng.choice(OPS) + text[i:]
    return text


class Fuzz:
    """Parse `text` strict and lenient; what parses is round-tripped and evaluated."""

    def __init__(self, snapshot, search_every: int = 5):
        self.snapshot = snapshot
        self.search_every = search_every
        self.failures: list = []
        self.counts = {"queries": 0, "parsed_strict": 0, "parsed_lenient": 0,
                       "evaluated": 0, "searched": 0, "annodb_errors_in_evaluation": 0}
        self.slowest = (0.0, "")
        self._seen_nodes = {}

    def fail(self, text, where, err):
        if len(self.failures) < 20:
            self.failures.append((text[:300], where, f"{type(err).__name__}: {err}"))

    def __call__(self, text: str) -> None:
        self.counts["queries"] += 1
        for lenient in (False, True):
            try:
                parsed = parse(text, lenient=lenient)
            except QueryError:
                continue
            except Exception as err:  # the bug this fuzz looks for
                self.fail(text, f"parse(lenient={lenient})", err)
                continue
            self.counts["parsed_lenient" if lenient else "parsed_strict"] += 1
            try:
                canonical = format_query(parsed.node)
                if parse(canonical).node != parsed.node:
                    self.fail(text, "round trip", AssertionError(canonical))
            except Exception as err:
                self.fail(text, "format", err)
            if parsed.node in self._seen_nodes:
                continue
            self._seen_nodes[parsed.node] = True
            started = time.perf_counter()
            try:
                self.snapshot.count(parsed.node)
                self.counts["evaluated"] += 1
                if self.counts["evaluated"] % self.search_every == 0:
                    self.snapshot.search(text, k=5, lenient=lenient)
                    self.counts["searched"] += 1
            except AnnodbError:
                self.counts["annodb_errors_in_evaluation"] += 1
            except Exception as err:
                self.fail(text, "evaluate", err)
            took = time.perf_counter() - started
            if took > self.slowest[0]:
                self.slowest = (took, text[:120])
            if len(self._seen_nodes) > 50_000:
                self._seen_nodes.clear()


def test_parser_and_evaluator_fuzzed_with_mutated_real_queries(small_db, figures):
    n = size(3000, 100_000)
    rng = random.Random(SEED)
    with small_db.read() as snap:
        fuzz = Fuzz(snap)
        for q in QUERIES:                       # the real queries themselves first
            fuzz(q)
        for _ in range(n):
            fuzz(mutate(rng, rng.choice(QUERIES)))
    figures.update(fuzz.counts, slowest_ms=round(fuzz.slowest[0] * 1000, 1),
                   slowest_query=fuzz.slowest[1])
    assert not fuzz.failures, fuzz.failures


def _atoms():
    return st.one_of(st.sampled_from(VOCAB), st.sampled_from(NASTY),
                     st.text(min_size=1, max_size=8),
                     st.sampled_from(["title:", "body:", ":year:", ":score:", ":",
                                      "judgment:t1", "nothing:"]),
                     st.builds(lambda w: f'"{w}"', st.text(max_size=12)))


queries = st.recursive(
    _atoms(),
    lambda inner: st.builds(
        lambda op, args, num: f"({op} {' '.join(args)}{num})",
        st.sampled_from(OPS), st.lists(inner, min_size=0, max_size=4),
        st.sampled_from(["", " 1", " 3", " -1", " 2.5", " 1e400", " x", " 99999999999999999999"])),
    max_leaves=12)


def test_parser_and_evaluator_fuzzed_with_hypothesis(small_db, figures):
    examples = size(300, 20_000)
    with small_db.read() as snap:
        fuzz = Fuzz(snap, search_every=3)

        @seed(SEED)   # like every random choice of the reliability suite
        @settings(max_examples=examples, suppress_health_check=list(HealthCheck))
        @given(st.one_of(queries, st.lists(st.sampled_from(
            list('()"^+.<>!#@=: \t') + NASTY + VOCAB[:50]), max_size=40).map("".join)))
        def run(text):
            fuzz(text)

        run()
    figures.update(fuzz.counts, slowest_ms=round(fuzz.slowest[0] * 1000, 1))
    assert not fuzz.failures, fuzz.failures


def test_lone_surrogates_are_clear_errors(tmp_path):
    path = base_db(tmp_path / "db")
    with annodb.open(path) as db:
        with db.read() as r:
            for call in (lambda: r.count("(^ alpha x\ud800:)"),
                         lambda: r.search("\udcff:", k=1),
                         lambda: r.document("\ud800")):
                with pytest.raises(AnnodbError):
                    call()
        for write in (lambda w: w.add("text", docno="\ud800"),
                      lambda w: w.add({"docid": "s1", "t\ud800": "x"}),
                      lambda w: w.annotate("x\ud800:", 0, 0),
                      lambda w: w.add("text \ud800 more", docno="s2")):
            with pytest.raises(AnnodbError) as failed:
                with db.write() as w:
                    write(w)
            assert "commit failed" not in str(failed.value)
        assert check(db) == []
    for command in (["query", "--db", str(path), "(^ alpha \udcff:)"],
                    ["show", "--db", str(path), "\udcff"]):
        done = subprocess.run([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                               *[os.fsencode(a) for a in command]],
                              capture_output=True, text=True, timeout=60)
        assert "internal error" not in done.stderr, done.stderr


# ------------------------------------------------------------------ the server


class Lines:
    """Random request lines: bytes, JSON values, requests of every op with fields of every
    type, over-long lines, carriage returns and NULs."""

    def __init__(self, rng: random.Random, docnos: list[str], max_line: int):
        self.rng = rng
        self.docnos = docnos
        self.max_line = max_line
        self.qids = ["q0"]

    def value(self, depth=0):
        rng = self.rng
        kind = rng.randrange(9 if depth < 4 else 6)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.choice([0, -1, 1, 2**63, -2**63 - 1, 10**30, 1.5, -0.0, 1e308, 5e-324])
        if kind == 2:
            return rng.choice(NASTY + VOCAB[:20])
        if kind == 3:
            return "".join(rng.choice(string.printable + "\u00e9\u200b") for _ in range(rng.randint(0, 30)))
        if kind == 4:
            return mutate(rng, rng.choice(QUERIES))
        if kind == 5:
            return rng.choice(self.docnos + ["../../etc/passwd", "/etc/passwd", '"r1"', " r1 "])
        if kind == 6:
            return [self.value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {rng.choice(["op", "query", "x", "", "qid"]): self.value(depth + 1)
                for _ in range(rng.randint(0, 4))}

    def request(self) -> dict:
        rng = self.rng
        req = {"op": rng.choice(["query", "next", "document", "count", "stats", "annotate",
                                 "note", "Query", "", "nope"]) if rng.random() < 0.95
               else self.value()}
        op = req["op"]
        if op in ("query", "count"):
            req["query"] = rng.choice(QUERIES) if rng.random() < 0.3 else \
                mutate(rng, rng.choice(QUERIES)) if rng.random() < 0.8 else self.value()
        if op == "next":
            req["qid"] = rng.choice(self.qids) if rng.random() < 0.7 else self.value()
        if op in ("document", "annotate", "note"):
            req["docno"] = rng.choice(self.docnos) if rng.random() < 0.6 else self.value()
        if op == "annotate":
            req["feature"] = rng.choice(["judgment:t2", "x", ":", "a:b", ""]) \
                if rng.random() < 0.7 else self.value()
            if rng.random() < 0.7:
                req["value"] = self.value()
        if op == "note":
            req["text"] = rng.choice(["a note", "", " "]) if rng.random() < 0.7 else self.value()
            if rng.random() < 0.5:
                req["qid"] = rng.choice(["t1", "bad qid", "(", ""]) if rng.random() < 0.7 \
                    else self.value()
        for _ in range(rng.randint(0, 2)):
            req[rng.choice(["token", "extra", "query", "docno"])] = self.value()
        return req

    def line(self) -> bytes:
        rng = self.rng
        kind = rng.randrange(20)
        if kind == 0:
            return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))).replace(b"\n", b"")
        if kind == 1:
            return json.dumps(self.value()).encode()
        if kind == 2:
            return b"x" * rng.randint(self.max_line + 1, self.max_line * 3)
        if kind == 3:
            raw = json.dumps(self.request()).encode()
            i = rng.randint(0, len(raw))
            return raw[:i] + rng.choice([b"\r", b"\x00", b"\xff", b"\xef\xbb\xbf", b""]) + raw[i:]
        line = json.dumps(self.request(), ensure_ascii=rng.random() < 0.5).encode(
            "utf-8", "surrogatepass")
        return line.replace(b"\n", b" ")


def check_reply(raw: bytes, problems: list, ops: dict) -> None:
    try:
        record = json.loads(raw)
        assert set(record) == {"query", "response", "time"}, record
        response = record["response"]
        assert isinstance(response["op"], str) and isinstance(response["ok"], bool), record
        if not response["ok"]:
            assert isinstance(response["error"], str) and response["error"], record
            assert not response["error"].startswith("internal error"), record
        key = f"{response['op'] if response['op'] in ('parse', 'query', 'next', 'document', 'count', 'stats', 'annotate', 'note') else 'other'} {'ok' if response['ok'] else 'error'}"
        ops[key] = ops.get(key, 0) + 1
    except Exception as err:
        if len(problems) < 20:
            problems.append(f"{type(err).__name__}: {err}: {raw[:300]!r}")


def test_server_fuzzed_with_random_lines(small_db, tmp_path, figures, fan_out=None):
    """(`fan_out`: how the server runs a sharded collection's queries, see
    test_shards_reliability.)"""
    total, conns, chunk = size(1500, 50_000), 4, 25
    log = io.StringIO()
    with small_db.read() as r:
        docnos = [d.docno for d in r.documents()]
    problems, ops = [], {}
    lock = threading.Lock()
    started = time.perf_counter()
    with Server(small_db.path, max_line=4096, query_timeout=5.0, log=log,
                fan_out=fan_out) as server:
        def client(k: int) -> None:
            try:
                talk(k)
            except Exception as err:
                with lock:
                    problems.append(f"client {k}: {type(err).__name__}: {err}")

        def talk(k: int) -> None:
            rng = random.Random(SEED + k)
            lines = Lines(rng, docnos, server.max_line)
            mine, counts = [], {}
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock, \
                    sock.makefile("rb") as reader:
                for _ in range(total // conns // chunk):
                    batch = [lines.line() for _ in range(chunk)]
                    sock.sendall(b"".join(x + b"\n" for x in batch))
                    for _ in batch:
                        raw = reader.readline()
                        if not raw.endswith(b"\n"):
                            mine.append(f"no reply (connection closed) after {batch!r:.300}")
                            break
                        check_reply(raw, mine, counts)
                        qid = json.loads(raw)["response"].get("qid")
                        if isinstance(qid, str):
                            lines.qids.append(qid)
                    if mine:
                        break
                sock.sendall(b'{"op":"stats"}\n')
                assert json.loads(reader.readline())["response"]["ok"]
            with lock:
                problems.extend(mine)
                for key, n in counts.items():
                    ops[key] = ops.get(key, 0) + n

        threads = [threading.Thread(target=client, args=(k,)) for k in range(conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads)
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock, \
                sock.makefile("rb") as reader:
            sock.sendall(b'{"op":"query","query":"(^ patient treatment)"}\n')
            first = json.loads(reader.readline())["response"]
    with small_db.read() as r:       # (the fuzz may have added notes)
        expected = [h.docno for h in r.search("(^ patient treatment)", k=3)]
    figures.update(lines=sum(ops.values()), connections=conns, replies=ops,
                   lines_per_second=round(sum(ops.values()) / (time.perf_counter() - started)))
    assert not problems, problems
    assert "internal error" not in log.getvalue() and "Traceback" not in log.getvalue(), \
        log.getvalue()[-3000:]
    assert sum(ops.values()) == total // conns // chunk * chunk * conns
    assert first["ok"] and (first.get("docno") == (expected[0] if expected else None))


def test_server_answers_deeply_nested_json(small_db):
    """Regression (found by this suite): deeply nested JSON made msgspec raise
    RecursionError out of Server._dispatch: the connection was dropped without a reply."""
    with Server(small_db.path, log=io.StringIO()) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock, \
            sock.makefile("rb") as reader:
        for line in (b"[" * 5000, b'{"op":"stats","x":' + b"[" * 3000 + b"]" * 3000 + b"}",
                     b'{"op":"stats"}'):
            sock.sendall(line + b"\n")
            reply = json.loads(reader.readline())
            assert set(reply) == {"query", "response", "time"}


# ------------------------------------------------------------------ ingest


def state(path) -> tuple:
    """Everything a failed batch must leave as it was (after check() passes)."""
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            docs = [(d.docno, d.start, d.end, d.text, d.meta) for d in r.documents()]
            es, ee = r.erased()
            st_ = r.stats()
            return (docs, es.tolist(), ee.tolist(), st_.documents, st_.tokens, st_.features,
                    st_.addresses)


def base_db(path) -> Path:
    with annodb.open(path) as db, db.write() as w:
        for i in range(20):
            w.add(f"base document {i} alpha bravo", docno=f"base{i}")
        w.delete("base3")
    return Path(path)


def cli(*args) -> tuple[int, str]:
    """Run the annodb command line in this process: (exit code, stderr)."""
    result = CliRunner().invoke(annodb_cli, [str(a) for a in args])
    return result.exit_code, result.stderr


def one_error_line(code: int, stderr: str, *words: str) -> None:
    assert code == 1, stderr
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("annodb: error: "), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    for word in words:
        assert word.lower() in lines[0].lower(), (word, stderr)


MALFORMED = {
    "jsonl": (b'{"docid":"g1","text":"good one"}\n'
              b'{"docid":"g2","text":"bad \xff utf8"}\n'
              b'{"docid":"g3","text":"truncated"\n'
              b'[1, 2]\n'
              b'{"text":"no id"}\n'
              b'{"docid":"","text":"empty id"}\n'
              b'{"docid":{"a":1},"text":"object id"}\n'
              b'{"docid":"' + b"x" * 600 + b'","text":"id too long"}\n'
              b'"a string"\n'
              b'{"docid":"g4","text":"good too"}\n',
              ["invalid JSON", "not a JSON object", "id field", "longer than"]),
    "tsv": (b"t1\tgood\nt2 no tab\nt3\tbad \xc3\x28 utf8\n\tno docno\nt4\tgood\n",
            ["no tab", "invalid UTF-8", "empty docno"]),
    "trec": (b"<DOC><DOCNO>r1</DOCNO>good</DOC>\n<DOC>no docno</DOC>\n"
             b"<DOC><DOCNO>r2</DOCNO>bad \xff</DOC>\nstray text\n<DOC><DOCNO>r3</DOCNO>open",
             ["without <DOCNO>", "invalid UTF-8", "outside <DOC>", "not closed"]),
}


@pytest.mark.parametrize("fmt", sorted(MALFORMED))
def test_ingest_malformed_input(tmp_path, fmt):
    data, messages = MALFORMED[fmt]
    path = base_db(tmp_path / "db")
    src = tmp_path / f"input.{fmt}"
    src.write_bytes(data)
    before = state(path)
    # strict: the first bad record stops it, naming file:line; its batch is not written
    with pytest.raises(IngestError, match=rf"input\.{fmt}:\d+: "):
        ingest(path, [src], strict=True)
    assert state(path) == before
    code, err = cli("ingest", "--db", path, "--strict", src)
    one_error_line(code, err, f"input.{fmt}:")
    assert state(path) == before
    # not strict: every bad record reported as file:line: message, the good ones added
    summary = ingest(path, [src])
    assert summary.added >= 1 and summary.error_count >= len(messages)
    for text in summary.errors:
        assert text.startswith(f"{src}:") and text.split(":")[1].isdigit(), text
    for message in messages:
        assert any(message in text for text in summary.errors), (message, summary.errors)
    after = state(path)
    assert after[0][:len(before[0])] == before[0]      # what was there is untouched
    code, err = cli("ingest", "--db", path, src)          # again: all skipped, reported
    assert code == 1 and "Traceback" not in err and "annodb: skipped" in err, err


def test_ingest_invalid_utf8_plain_text_and_gzip(tmp_path):
    path = base_db(tmp_path / "db")
    before = state(path)
    bad_text = tmp_path / "notes.txt"
    bad_text.write_bytes(b"fine start \xc0\xaf then bad")
    not_gzip = tmp_path / "fake.jsonl.gz"
    not_gzip.write_bytes(b'{"docid":"a","text":"not gzipped"}\n')
    summary = ingest(path, [bad_text])
    assert summary.added == 0 and "invalid UTF-8" in summary.errors[0]
    with pytest.raises(IngestError, match="gzip"):
        ingest(path, [not_gzip])
    code, err = cli("ingest", "--db", path, not_gzip)
    one_error_line(code, err, "gzip")
    assert state(path) == before


def test_ingest_deeply_nested_json_is_a_malformed_record(tmp_path):
    """Regression (found by this suite): a deeply nested JSONL line raised RecursionError
    out of ingest(): the rest of the file was lost and the CLI said 'internal error'."""
    path = base_db(tmp_path / "db")
    src = tmp_path / "deep.jsonl"
    src.write_bytes(b'{"docid":"d1","text":"ok"}\n{"docid":"d2","x":' + b"[" * 5000 +
                    b"]" * 5000 + b'}\n{"docid":"d3","text":"ok"}\n')
    summary = ingest(path, [src])
    assert summary.added == 2 and summary.error_count == 1
    assert summary.errors[0].startswith(f"{src}:2: ")


def test_ingest_a_huge_document(tmp_path, figures):
    """One document of size(5, 100) MB through the command line, in a child process (its
    peak memory is measured): stored whole, searchable to its last word, check passes."""
    megabytes = size(5, 100)
    rng = random.Random(SEED)
    words = [f"w{i}" for i in range(50_000)]
    chunk = " ".join(rng.choices(words, k=100_000))
    text = (chunk + " ") * (megabytes * 10**6 // (len(chunk) + 1) + 1)
    text = text[:megabytes * 10**6] + " lastwordmarker"
    src = tmp_path / "huge.jsonl"
    src.write_text(json.dumps({"docid": "huge", "text": text}) + "\n")
    path = base_db(tmp_path / "db")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                           "ingest", "--db", str(path), "--json", str(src)],
                          capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 1
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            doc = r.document("huge")
            assert doc.text == text
            assert r.count("lastwordmarker") == 1
            hits = r.search("lastwordmarker", k=1)
            assert hits.hits[0].docno == "huge"
    figures.update(megabytes=megabytes, tokens=doc.tokens, ingest_seconds=round(seconds, 1),
                   child_peak_rss_mb=round(peak))


def test_ingest_empty_documents(tmp_path):
    path = base_db(tmp_path / "db")
    (tmp_path / "e.jsonl").write_text('{"docid":"j1","text":""}\n{"docid":"j2"}\n'
                                      '{"docid":"j3","text":"   "}\n')
    (tmp_path / "e.tsv").write_text("t1\t\nt2\t \n")
    (tmp_path / "emptyfile.txt").write_text("")
    (tmp_path / "e.trec").write_text("<DOC><DOCNO>r1</DOCNO></DOC>\n")
    summary = ingest(path, [tmp_path / n for n in ("e.jsonl", "e.tsv", "emptyfile.txt",
                                                   "e.trec")])
    assert summary.error_count == 0 and summary.added == 7, summary
    with annodb.open(path) as db:
        assert check(db) == []
        with db.read() as r:
            for docno in ("j1", "j2", "j3", "t1", "t2", "emptyfile", "r1"):
                d = r.document(docno)
                assert d.tokens == 0 and d.start == d.end and d.text.strip() == ""
                assert r.text(d.start, d.end) == ""
            assert r.count(":") == r.document_count() == 19 + 7
            r.search("alpha", k=50)
        with db.write() as w:                      # an empty document can be deleted
            assert w.delete("j1")
        assert check(db) == []


def test_ingest_duplicate_docnos(tmp_path):
    path = base_db(tmp_path / "db")
    src = tmp_path / "dups.tsv"
    src.write_text("n1\tfirst\nn1\tsecond\nbase1\tclash with the database\nn2\tother\n"
                   "n2\tagain\n")
    summary = ingest(path, [src], batch_size=2)            # duplicates across batches too
    assert (summary.added, summary.present, summary.duplicates, summary.skipped) == (
        2, 1, 2, 2), summary
    assert any(f"{src}:2: duplicate docno 'n1'" in w for w in summary.warnings)
    with annodb.open(path, readonly=True) as db, db.read() as r:
        assert r.document("n1").text == "first" and r.document("n2").text == "other"
        assert r.document("base1").text.startswith("base document 1")
    summary = ingest(path, [src], replace=True)
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            assert r.document("n1").text == "second" and r.document("n2").text == "again"
            assert r.document("base1").text == "clash with the database"
            assert r.count("first") == 0 and r.count(":") == r.document_count()


def test_ingest_missing_and_unreadable_inputs(tmp_path):
    path = base_db(tmp_path / "db")
    good = tmp_path / "good.tsv"
    good.write_text("ok1\tgood\n")
    before = state(path)
    (tmp_path / "empty").mkdir()
    for bad, words in ((tmp_path / "missing.jsonl", "no such file"),
                       (tmp_path / "empty", "no files in this directory")):
        with pytest.raises(IngestError, match=words):
            ingest(path, [good, bad])                     # checked before anything is written
        code, err = cli("ingest", "--db", path, good, bad)
        one_error_line(code, err, words)
        assert state(path) == before
    new = tmp_path / "never.db"
    code, err = cli("ingest", "--db", new, tmp_path / "missing.jsonl")
    one_error_line(code, err, "no such file")
    assert not new.exists()
    code, err = cli("stats", "--db", new)
    one_error_line(code, err, "no annodb database")


@contextlib.contextmanager
def mounted(*how: str, at: Path):
    """mount(8) `how` at `at` for the block; skip when this process may not mount."""
    at.mkdir(exist_ok=True)
    done = subprocess.run(["mount", *how, str(at)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount ({' '.join(how)}): {done.stderr.strip()} "
                    "(needs root or CAP_SYS_ADMIN)")
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], capture_output=True)


@contextlib.contextmanager
def read_only_view(src: Path, at: Path):
    """A read-only bind mount of `src` (chmod does not stop root: a read-only mount does)."""
    with mounted("--bind", str(src), at=at):
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(at)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")
        yield at


def test_ingest_into_a_read_only_directory(tmp_path):
    src = tmp_path / "rw"
    src.mkdir()
    base_db(src / "db")
    good = tmp_path / "good.tsv"
    good.write_text("ok1\tgood words\n")
    before = state(src / "db")
    with read_only_view(src, tmp_path / "ro") as ro:
        for target in (ro / "db", ro / "new.db"):
            with pytest.raises(StorageError, match="Read-only file system"):
                ingest(target, [good])
            code, err = cli("ingest", "--db", target, good)
            one_error_line(code, err, "read-only file system")
        assert not (ro / "new.db").exists() or not any((ro / "new.db").iterdir())
        with annodb.open(ro / "db", readonly=True) as db, db.read() as r:
            assert r.count("alpha") == 19                 # reading still works
        code, err = cli("stats", "--db", ro / "db")
        assert code == 0, err
    assert state(src / "db") == before


def _filler(directory: Path) -> Path:
    """Fill the file system holding `directory` (a file of zeros until ENOSPC)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def _big_jsonl(path: Path, megabytes: float) -> Path:
    rng = random.Random(SEED)
    words = [f"w{i}" for i in range(5000)]
    with open(path, "w") as f:
        i = 0
        while f.tell() < megabytes * 1e6:
            f.write(json.dumps({"docid": f"big{i}", "text": " ".join(rng.choices(words, k=200))})
                    + "\n")
            i += 1
    return path


def test_ingest_on_a_full_disk(tmp_path, figures):
    """A 2 MB tmpfs: a database with content, then an input that does not fit. The batch
    fails with an error, the database stays exactly as it was (and passes check), and it
    takes new writes once there is room."""
    big = _big_jsonl(tmp_path / "big.jsonl", 3)
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", at=tmp_path / "small") as disk:
        path = base_db(disk / "db")
        before = state(path)
        with pytest.raises(IngestError) as failed:
            ingest(path, [big])
        message = str(failed.value)
        assert "could not be committed" in message and "big.jsonl:1-" in message
        assert state(path) == before
        code, err = cli("ingest", "--db", path, big)
        one_error_line(code, err, "could not be committed")
        assert state(path) == before
        filler = _filler(disk)                 # now completely full
        with pytest.raises(AnnodbError):
            with annodb.open(path) as db, db.write() as w:
                w.add(big.read_text(), docno="more")
        assert state(path) == before
        filler.unlink()
        with annodb.open(path) as db:
            with db.write() as w:
                w.add("room again", docno="again")
            assert check(db) == []
        figures.update(error=message.replace(str(tmp_path), "")[:300])


def test_full_disk_error_names_the_full_disk(tmp_path):
    """Regression (found by this suite): LMDB reports a short write on a full disk as
    'Input/output error', which reads as a failing disk; the error now says it is full."""
    big = _big_jsonl(tmp_path / "big.jsonl", 3)
    with mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", at=tmp_path / "small") as disk:
        path = base_db(disk / "db")
        with pytest.raises(IngestError) as failed:
            ingest(path, [big])
        message = str(failed.value).replace(str(tmp_path), "")     # the path says "full"
        assert re.search(r"no space|disk is full|device is full|ENOSPC", message, re.I), message


def test_creating_a_database_on_a_full_disk_is_an_error_not_a_crash(tmp_path):
    """Regression (found by this suite): creating a database on a full disk killed the
    process with SIGBUS (LMDB creates lock.mdb sparse and writes it through a shared
    mapping); storage now allocates lock.mdb first, so it is an error line."""
    good = tmp_path / "good.tsv"
    good.write_text("ok1\tgood words\n")
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", at=tmp_path / "small") as disk:
        _filler(disk)
        done = subprocess.run([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                               "ingest", "--db", str(disk / "new.db"), str(good)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, (done.returncode, done.stderr)
        one_error_line(done.returncode, done.stderr, "no space")
