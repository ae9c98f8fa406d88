"""The Vole: the real openai client against a fake OpenAI-compatible server on
127.0.0.1 (tests/fake_openai.py) playing scripted decisions, on the bundled sample
collection, in process and through a real `annodb serve`. No test reaches the internet:
an autouse fixture refuses every connection to a non-loopback address."""

from __future__ import annotations

import io
import ipaddress
import json
import math
import os
import socket
import subprocess
import sys

import ir_measures
import pytest
from click.testing import CliRunner

import annodb
import vole_policy
from annodb.ingest import ingest
from annodb.judgments import note_docno
from annodb.server import Server
from annodb_cli.vole import vole
from fake_openai import FakeOpenAI, Status
from sigint import interruptible
from vole import decision, runfile
from vole.backend import Local, Remote
from vole.errors import InputError, ModelError
from vole.evaluate import evaluate
from vole.model import Model
from vole.topics import read_topics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "examples", "bible-sample.jsonl")
TOPIC = "t1\tWhat did God create on the first day?\n"


# ---------------------------------------------------------------- no network


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fail any connection to an address that is not loopback (or a Unix socket)."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try:
                loopback = ipaddress.ip_address(host.split("%")[0]).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                raise RuntimeError(f"test tried to reach {address!r}: only loopback allowed")

    def connect(sock, address):
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def test_the_network_guard_refuses_other_hosts():
    with socket.socket() as s, pytest.raises(RuntimeError, match="only loopback"):
        s.connect(("192.0.2.1", 443))


# ---------------------------------------------------------------- helpers


@pytest.fixture
def bible(tmp_path):
    path = str(tmp_path / "bible.db")
    ingest(path, [SAMPLE])
    return path


@pytest.fixture
def topics(tmp_path):
    path = tmp_path / "topics.tsv"
    path.write_text(TOPIC)
    return str(path)


def shown(request):
    """(qid, rank, docno) of the result in the latest observation (either protocol)."""
    kind, result, _ = vole_policy._seen(request.last)
    assert kind == "result", request.last
    return result


def judge(grade, reason="a reason", action=None):
    """A scripted decision: grade the result just shown, then `action` (default: next)."""
    def decide(request):
        qid, _, docno = shown(request)
        return {"judgment": {"docno": docno, "grade": grade, "reason": reason,
                             "learned": ""},
                "action": action or {"type": "next", "qid": qid}}
    return decide


def query(gcl, judgment=None):
    return {"judgment": judgment, "action": {"type": "query", "gcl": gcl}}


def first_script():
    """Malformed JSON, a decision failing validation, an invalid query, a 429, a judgment of
    a document never shown, a 500, four judgments: the limit (4) stops the topic."""
    return [
        "Let me think. {not json",
        {"judgment": {"docno": "Gen.1.3", "grade": 7, "reason": "", "learned": ""},
         "action": {"type": "query", "gcl": "(^ light day)"}},
        query("(~ light day)"),
        Status(429, "slow down", {"retry-after": "0"}),
        query("(^ light day)", {"docno": "Gen.1.1", "grade": 3, "reason": "", "learned": ""}),
        judge(1),                                           # Gen.1.16
        Status(500, "the server had an error"),
        judge(3, "names the luminous first day"),           # Gen.1.5
        judge(2, action={"type": "document", "docno": "Gen.1.3"}),   # Gen.1.18
        lambda r: {"judgment": {"docno": "Gen.1.3", "grade": 3, "reason": "made on day one",
                                "learned": "the first day is in Gen 1"},
                   "action": {"type": "query", "gcl": "(^ never run)"}},
    ]


FIRST_RUN = ["Gen.1.5", "Gen.1.3", "Gen.1.18", "Gen.1.16"]


def second_script():
    """The rerun: its first query matches only a judgment note (kept apart: nothing), its
    second only judged documents (skipped and reported)."""
    return [
        query("luminous"),
        query("(^ light day)"),
        query("(^ light darkness)"),
        judge(3),                                            # Gen.1.4, then skips to done
        query("(+ firmament expanse)"),
        judge(0),                                            # Gen.1.7: the limit (6)
    ]


# by grade, then discovery order over both runs
SECOND_RUN = ["Gen.1.5", "Gen.1.3", "Gen.1.4", "Gen.1.18", "Gen.1.16", "Gen.1.7"]


def vole_run(*args):
    result = CliRunner().invoke(vole, ["run", *map(str, args)])
    return result


def run_lines(out):
    with open(os.path.join(out, "vole.run")) as f:
        return f.read().splitlines()


def jsonl(out, name):
    with open(os.path.join(out, name)) as f:
        return [json.loads(line) for line in f]


def docnos(db, gcl):
    with db.read() as r:
        return {r.document_at(s).docno for s, _, _ in r.query(gcl)}


# ---------------------------------------------------------------- decisions


# ---------------------------------------------------------------- the model


def test_model_speaks_both_apis_with_the_schema():
    schema = decision.json_schema()
    with FakeOpenAI(["one", "two"]) as fake:
        audit = []
        for api in ("responses", "chat"):
            with Model("m", api=api, base_url=fake.base_url, audit=audit.append) as model:
                done = model.complete("be brief", [{"role": "user", "content": "hi"}], schema)
                assert done.text == ("one" if api == "responses" else "two")
                assert done.usage.total_tokens == (done.usage.input_tokens
                                                   + done.usage.output_tokens) > 0
        responses, chat = fake.requests
    assert responses.path == "/v1/responses" and chat.path == "/v1/chat/completions"
    assert responses.body["instructions"] == "be brief"
    assert responses.body["input"] == [{"role": "user", "content": "hi"}]
    assert responses.body["text"]["format"] == {"type": "json_schema", "name": "decision",
                                                "schema": schema, "strict": True}
    assert chat.body["messages"][0] == {"role": "system", "content": "be brief"}
    assert chat.body["response_format"]["json_schema"]["schema"] == schema
    assert responses.headers["authorization"] == "Bearer none"   # dummy key for --base-url
    assert [a["latency_ms"] >= 0 and a["usage"]["total_tokens"] > 0 for a in audit] == [True] * 2


def test_model_retries_rate_limits_and_server_errors_then_gives_up():
    waits = []
    script = [Status(429, "slow", {"retry-after": "7"}), Status(503), "ok",
              Status(400, "bad request"),
              Status(500), Status(500), Status(500)]
    with FakeOpenAI(script) as fake, \
            Model("m", base_url=fake.base_url, sleep=waits.append, max_retries=2,
                  seed=1) as model:
        done = model.complete("i", [{"role": "user", "content": "x"}])
        assert done.text == "ok" and done.attempts == 3
        assert waits[0] == 7.0 and 1.0 <= waits[1] < 2.0       # retry-after; then 2nd backoff
        with pytest.raises(ModelError, match="400"):             # not retried
            model.complete("i", [{"role": "user", "content": "x"}])
        assert len(fake.requests) == 4
        with pytest.raises(ModelError, match="gave up after 3 attempts"):
            model.complete("i", [{"role": "user", "content": "x"}])
    # the jitter is seeded: the same seed waits the same
    with FakeOpenAI(script[:3]) as fake:
        again = []
        with Model("m", base_url=fake.base_url, sleep=again.append, seed=1) as model:
            model.complete("i", [{"role": "user", "content": "x"}])
    assert again == waits[:2]


def test_no_api_key_is_an_error_without_a_base_url():
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        Model("m")


# ---------------------------------------------------------------- end to end


def test_run_end_to_end_then_resume(bible, topics, tmp_path):
    out = tmp_path / "out"
    with FakeOpenAI(first_script()) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "fake-model",
                          "--base-url", fake.base_url, "--out", out, "--max-judgments", 4)
        requests = list(fake.requests)
    assert result.exit_code == 0, result.output
    assert "t1: 8 calls, 4 judgments (4 new, 2 of grade 3), stop max-judgments" in \
        result.stdout

    # the run file: by grade, then discovery order; scores decreasing
    lines = run_lines(out)
    assert [line.split()[2] for line in lines] == FIRST_RUN
    assert [line.split()[3:] for line in lines] == [["1", "4", "vole"], ["2", "3", "vole"],
                                                    ["3", "2", "vole"], ["4", "1", "vole"]]

    # what the model was told
    observations = [r.last for r in requests if r.body.get("model") == "fake-model"]
    assert "not a valid decision (the answer is not one JSON object" in observations[1]
    assert "$.judgment.grade" in observations[2]
    assert "The query failed: query error at offset 1" in observations[3]
    assert observations[4] == observations[3]                    # the 429, retried
    assert "Gen.1.1 not recorded: it was not shown to you" in observations[5]
    assert "q0 rank 1: docno Gen.1.16" in observations[5]
    assert "<cover>" in observations[5]
    assert "Recorded Gen.1.16: grade 1." in observations[6]
    assert "Document Gen.1.3:\nGen God said" in observations[9]
    assert all(r.body["text"]["format"]["name"] == "decision" for r in requests)

    # the conversation: system, opening, then assistant/user per call; saved as it went
    conversation = jsonl(out, "conversation.jsonl")
    assert [e["role"] for e in conversation[:3]] == ["system", "user", "assistant"]
    assert len(conversation) == 2 + 2 * 8
    assert [e["step"] for e in conversation] == list(range(18))
    assert conversation[-1]["content"].startswith("Recorded Gen.1.3: grade 3.\nStopped")

    # the audit: every model attempt (usage, latency), retries, every backend request
    audit = jsonl(out, "audit.jsonl")
    model = [a for a in audit if a["kind"] == "model"]
    assert len(model) == 10 and sum("usage" in a for a in model) == 8
    assert [a["status"] for a in model if "status" in a] == [429, 500]
    assert all(a["latency_ms"] >= 0 and a["topic"] == "t1" for a in model)
    assert len([a for a in audit if a["kind"] == "model-retry"]) == 2
    backend = [a for a in audit if a["kind"] == "backend"]
    assert [a["request"]["op"] for a in backend] == [
        "judgments", "query", "query", "judge", "next", "judge", "next", "judge",
        "document", "judge", "topic"]
    assert all(a["topic"] == "t1" for a in audit)
    assert all("time" in a and "response" in a for a in backend)
    assert backend[1]["response"]["ok"] is False                 # the invalid query
    summary = jsonl(out, "summary.jsonl")
    assert summary[0]["calls"] == 8 and summary[0]["grade3"] == 2
    assert summary[0]["stop"] == "max-judgments" and summary[0]["input_tokens"] > 0

    # the annotations: judgments by grade, notes linked to the judged documents
    with annodb.open(bible) as db:
        assert docnos(db, "(>> : (>= judgment:t1 0))") == set(FIRST_RUN)
        assert docnos(db, "(>> : (= judgment:t1 3))") == {"Gen.1.5", "Gen.1.3"}
        with db.read() as r:
            starts = sorted(r.document(d).start for d in FIRST_RUN)
            assert r.query("(@ note:t1)").starts.tolist() == starts
            assert r.query("(@ note:)").starts.tolist() == starts
            # the notes are apart from the collection, found when asked for
            assert list(r.search("(^ luminous day)", k=5)) == []
            hits = r.search("(^ luminous (<< day note:t1))", k=5, container="note:")
            assert [h.docno for h in hits] == [note_docno("t1", "Gen.1.5")]
            assert r.stats().documents == 398 and r.stats().agent_documents == 5
            assert "Reason: names the luminous first day" in \
                r.document(note_docno("t1", "Gen.1.5")).text

    # the rerun resumes: earlier judgments count, judged results are skipped and reported
    out2 = tmp_path / "out2"
    with FakeOpenAI(second_script()) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "fake-model",
                          "--base-url", fake.base_url, "--out", out2, "--max-judgments", 6)
        requests = list(fake.requests)
    assert result.exit_code == 0, result.output
    assert "t1: 6 calls, 6 judgments (2 new, 3 of grade 3), stop max-judgments" in \
        result.stdout
    opening = requests[0].last
    assert "already graded 4 documents" in opening
    assert "Gen.1.16 (grade 1), Gen.1.5 (grade 3), Gen.1.18 (grade 2), Gen.1.3 (grade 3)" \
        in opening
    assert requests[1].last.startswith("q0: nothing matched this query.")
    assert ("Skipped 3 result(s) graded before: Gen.1.16 (rank 1, grade 1), Gen.1.5 "
            "(rank 2, grade 3), Gen.1.18 (rank 3, grade 2).\nq1: no more results."
            ) in requests[2].last
    assert "q2 rank 1: docno Gen.1.4" in requests[3].last
    assert "Skipped 2 result(s)" in requests[4].last and "q2: no more results" in \
        requests[4].last
    assert [line.split()[2] for line in run_lines(out2)] == SECOND_RUN
    with annodb.open(bible) as db:
        assert docnos(db, "(>> : (>= judgment:t1 0))") == set(SECOND_RUN)
        assert docnos(db, "(>> : (= judgment:t1 0))") == {"Gen.1.7"}


def test_same_run_through_the_server(bible, topics, tmp_path):
    """The scripted runs through a real `annodb serve` (and the Chat API) give the run files
    of the in-process runs."""
    out, out2 = tmp_path / "s1", tmp_path / "s2"
    server = Server(bible, log=io.StringIO()).start()
    try:
        address = f"127.0.0.1:{server.port}"
        for script, target, limit in ((first_script(), out, 4), (second_script(), out2, 6)):
            with FakeOpenAI(script) as fake:
                result = vole_run("--topics", topics, "--server", address, "--model", "m",
                                  "--base-url", fake.base_url, "--api", "chat", "--out",
                                  target, "--max-judgments", limit)
                assert all(r.path == "/v1/chat/completions" for r in fake.requests)
            assert result.exit_code == 0, result.output
    finally:
        server.shutdown()
    assert [line.split()[2] for line in run_lines(out)] == FIRST_RUN
    assert [line.split()[2] for line in run_lines(out2)] == SECOND_RUN
    ops = [a["request"]["op"] for a in jsonl(out, "audit.jsonl") if a["kind"] == "backend"]
    # a judgment and its reason are one request (one transaction)
    assert ops.count("judge") == 4 and "annotate" not in ops and "note" not in ops
    with annodb.open(bible) as db:
        assert docnos(db, "(>> : (>= judgment:t1 0))") == set(SECOND_RUN)
        with db.read() as r:
            starts = sorted(r.document(d).start for d in SECOND_RUN)
            assert r.query("(@ note:t1)").starts.tolist() == starts


def test_a_topic_that_fails_hard_does_not_stop_the_run(bible, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text("t1\tlight\n# a comment\n\nt2\tdarkness\n")
    out = tmp_path / "out"
    with FakeOpenAI([Status(401, "bad key"), query("darkness"), judge(2)]) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                          fake.base_url, "--out", out, "--max-calls", 2)
    assert result.exit_code == 1
    assert "t1: 0 calls, 0 judgments (0 new, 0 of grade 3), stop model-error" in result.stdout
    assert "t2: 2 calls, 1 judgments (1 new, 0 of grade 3), stop max-calls" in result.stdout
    assert result.stderr.splitlines()[-1].startswith("vole: error: 1 of 2 topics stopped")
    assert [s["stop"] for s in jsonl(out, "summary.jsonl")] == ["model-error", "max-calls"]
    assert [line.split()[0] for line in run_lines(out)] == ["t2"]


def test_remote_backend_errors_come_back_as_responses(bible):
    server = Server(bible, log=io.StringIO()).start()
    try:
        with Remote(f"127.0.0.1:{server.port}") as remote:
            assert remote.query("(^ light").get("warnings")
            assert not remote.next("q99")["ok"]
            assert not remote.document("nope")["ok"]
            assert not remote.judge("t9", "nope", 2, "x")["ok"]
            assert remote.judgments("t9") == ([], None)
    finally:
        server.shutdown()
    with Local(bible) as local:
        assert local.query("(^ light").get("warnings")
        assert "Unknown qid" in local.next("q99")["error"]
        assert "Unknown docno" in local.document("nope")["error"]
        assert local.document('"Gen.1.3"')["docno"] == "Gen.1.3"


# ---------------------------------------------------------------- eval and judge


def test_eval_gives_the_ndcg_ir_measures_computes(tmp_path):
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 a 3\n1 0 b 1\n1 0 c 0\n2 0 d 2\n3 0 e 1\n")
    run = tmp_path / "run"
    run.write_text("1 Q0 b 1 3 x\n1 Q0 a 2 2 x\n1 Q0 z 3 1 x\n2 Q0 d 1 1 x\n")
    expected = ir_measures.calc_aggregate(
        [ir_measures.nDCG @ 10], ir_measures.read_trec_qrels(str(qrels)),
        ir_measures.read_trec_run(str(run)))[ir_measures.nDCG @ 10]
    # by hand (trec_eval's linear gain): topic 1 DCG 1/log2(2) + 3/log2(3) over the ideal
    # 3/log2(2) + 1/log2(3); topic 2 perfect; topic 3 absent from the run: 0
    t1 = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert expected == pytest.approx((t1 + 1 + 0) / 3)
    result = CliRunner().invoke(vole, ["eval", "--qrels", str(qrels), str(run)])
    assert result.exit_code == 0, result.output
    assert f"nDCG@10\tall\t{expected:.4f}" in result.stdout.splitlines()
    assert "R@100\tall\t" in result.stdout and "P@10\tall\t" in result.stdout
    assert "1 of 3 qrels topics are not in the run" in result.stderr
    result = CliRunner().invoke(vole, ["eval", "--qrels", str(qrels), str(run), "--json",
                                       "--per-topic"])
    data = json.loads(result.stdout)
    assert data["measures"]["nDCG@10"] == pytest.approx(expected)
    assert data["per_topic"]["2"]["nDCG@10"] == 1.0 and data["per_topic"]["3"]["P@10"] == 0
    assert evaluate(str(qrels), str(run)).missing == ["3"]


def test_eval_without_the_eval_extra_says_how_to_install_it(tmp_path):
    """ir-measures (and scipy) are the extra annodb[eval]: without them `vole eval` is one
    error line saying so, and the rest of the Vole runs (this runs in a child process so
    the missing package is really missing there)."""
    (tmp_path / "q").write_text("1 0 a 1\n")
    (tmp_path / "r").write_text("1 Q0 a 1 1 x\n")
    code = ("import sys\nsys.modules['ir_measures'] = None\n"
            "from annodb_cli.vole import vole\nvole()")
    for args, status in ((["eval", "--qrels", "q", "r"], 1), (["--help"], 0)):
        done = subprocess.run([sys.executable, "-c", code] + args, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == status, done.stderr
    assert done.stdout.startswith("Usage:")
    done = subprocess.run([sys.executable, "-c", code, "eval", "--qrels", "q", "r"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.stderr == ("vole: error: vole eval needs the evaluation extra (ir_measures "
                           "is not installed): pip install 'annodb[eval]'\n")


def test_judge_writes_qrels_for_the_holes_only(bible, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPIC)
    qrels = tmp_path / "qrels"
    qrels.write_text("t1 0 Gen.1.5 3\n")
    run = tmp_path / "run"
    run.write_text("t1 Q0 Gen.1.5 1 3 v\nt1 Q0 Gen.1.3 2 2 v\nt1 Q0 Gen.1.7 3 1 v\n")
    out = tmp_path / "holes.qrels"
    script = ["{broken", {"reason": "says light was made", "grade": 3},
              {"reason": "about the expanse", "grade": 0}]
    with FakeOpenAI(script) as fake:
        result = CliRunner().invoke(vole, [
            "judge", "--qrels", str(qrels), "--topics", str(topics), str(run), "--db", bible,
            "--model", "j", "--base-url", fake.base_url, "--api", "chat", "--out", str(out)])
        requests = list(fake.requests)
    assert result.exit_code == 0, result.output
    assert out.read_text() == "t1 0 Gen.1.3 3\nt1 0 Gen.1.7 0\n"
    assert "2 holes, 2 judged" in result.stderr
    assert "Query: What did God create on the first day?" in requests[0].last
    assert "Let there be light" in requests[0].last
    assert requests[0].body["response_format"]["json_schema"]["name"] == "assessment"
    # a rerun finds nothing left to do
    with FakeOpenAI([]) as fake:
        result = CliRunner().invoke(vole, [
            "judge", "--qrels", str(qrels), "--topics", str(topics), str(run), "--db", bible,
            "--model", "j", "--base-url", fake.base_url, "--out", str(out)])
        assert not fake.requests
    assert "2 already in" in result.stderr and out.read_text().count("\n") == 2


# ---------------------------------------------------------------- files and the CLI


def test_topics_and_run_files(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("t1 no tab here\n")
    with pytest.raises(InputError, match="bad.tsv:1: expected qid<TAB>text"):
        read_topics(str(bad))
    bad.write_text("t(1)\ttext\n")
    with pytest.raises(InputError, match="parentheses"):
        read_topics(str(bad))
    assert runfile.run_lines("q", ["a", "b"]) == ["q Q0 a 1 2 vole\n", "q Q0 b 2 1 vole\n"]
    run = tmp_path / "run"
    run.write_text("q Q0 a 2 1.5 x\nq Q0 b 1 2.5 x\n")
    assert runfile.read_run(str(run)) == {"q": [("b", 2.5), ("a", 1.5)]}
    run.write_text("q Q0 a\n")
    with pytest.raises(InputError, match="run:1"):
        runfile.read_run(str(run))


def test_cli_errors_are_one_line(bible, topics, tmp_path):
    def error(args, code):
        result = CliRunner().invoke(vole, args)
        assert result.exit_code == code, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vole: error: "), result.stderr
        return lines[0]

    assert "--model" in error(["run", "--topics", topics, "--db", bible], 2)
    assert "not both" in error(["run", "--topics", topics, "--db", bible, "--server",
                                "127.0.0.1:1", "--model", "m", "--base-url", "http://x"], 2)
    assert "no annodb database here" in error(
        ["run", "--topics", topics, "--db", tmp_path / "none.db", "--model", "m",
         "--base-url", "http://127.0.0.1:9/v1", "--out", tmp_path / "o"], 1)
    assert "OPENAI_API_KEY" in error(["run", "--topics", topics, "--db", bible, "--model",
                                      "m", "--out", tmp_path / "o"], 1)
    assert "cannot reach the server" in error(
        ["run", "--topics", topics, "--server", "127.0.0.1:1", "--model", "m",
         "--base-url", "http://127.0.0.1:9/v1", "--out", tmp_path / "o"], 1)
    assert "no.tsv" in error(["run", "--topics", tmp_path / "no.tsv", "--db", bible,
                              "--model", "m"], 1)
    assert "unknown measure" in error(["eval", "--qrels", topics, topics, "--measure",
                                       "Bogus@3"], 1)
    for name in ("run", "eval", "judge", "report"):
        result = CliRunner().invoke(vole, [name, "--help"])
        assert result.exit_code == 0 and f"vole {name}" in result.stdout.split("Example")[1]


# ---------------------------------------------------------------- the published runner


def published(item):
    """A scripted answer in the published runner's decision shape (latest_judgment,
    relevance, op, query)."""
    if callable(item):
        return lambda request: published(item(request))
    if not isinstance(item, dict):
        return item
    judgment = item["judgment"]
    if judgment is not None:
        judgment = {"docno": judgment["docno"], "relevance": judgment["grade"],
                    "reason": judgment["reason"], "learned": judgment["learned"]}
    action = {("op" if k == "type" else "query" if k == "gcl" else k): v
              for k, v in item["action"].items()}
    return {"latest_judgment": judgment, "action": action}


def test_an_endpoint_speaking_only_the_published_shape_gives_the_same_run(bible, topics,
                                                                          tmp_path):
    instructions = tmp_path / "published-instructions.txt"
    instructions.write_text("You are the Vole. Answer with latest_judgment and action.\n")
    outs = (tmp_path / "p1", tmp_path / "p2")
    runs = []
    for script, out, limit in ((first_script(), outs[0], 4), (second_script(), outs[1], 6)):
        with FakeOpenAI([published(item) for item in script]) as fake:
            result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                              fake.base_url, "--out", out, "--max-judgments", limit,
                              "--protocol", "reference", "--instructions", instructions)
            runs.append(list(fake.requests))
        assert result.exit_code == 0, result.output
    assert [line.split()[2] for line in run_lines(outs[0])] == FIRST_RUN
    assert [line.split()[2] for line in run_lines(outs[1])] == SECOND_RUN
    first = runs[0]
    assert all(r.instructions == instructions.read_text() for r in first)
    assert json.loads(first[0].last) == {"qid": "t1", "topic": TOPIC.split("\t")[1].strip()}
    # each observation is JSON lines as the published runner writes them: the envelope
    # {"request", "response"}, then the judgments used
    lines = [json.loads(line) for line in first[5].last.splitlines()]
    assert lines[-1] == {"request": {"judgments": "0/4"}}
    record = lines[-2]
    assert set(record) == {"request", "response"}
    assert record["request"] == {"op": "query", "query": "(^ light day)"}
    assert record["response"]["docno"] == "Gen.1.16" and "<cover>" in \
        record["response"]["snippet"]
    assert lines[0]["error"].startswith("judgment of Gen.1.1 not recorded")
    assert "relevance" in json.loads(first[2].last.splitlines()[0])["error"]
    assert json.loads(first[3].last.splitlines()[0])["response"]["ok"] is False  # bad query
    assert json.loads(first[7].last.splitlines()[-1]) == {"request": {"judgments": "1/4"}}
    opening = json.loads(runs[1][0].last)
    assert opening["judged"][0] == {"docno": "Gen.1.16", "relevance": 1}
    # results judged before are passed over and listed in the response's "skipped"
    skipped = json.loads(runs[1][2].last.splitlines()[0])
    assert skipped["request"] == {"op": "query", "query": "(^ light day)"}
    assert skipped["response"]["skipped"] == [
        {"docno": "Gen.1.16", "rank": 1, "relevance": 1},
        {"docno": "Gen.1.5", "rank": 2, "relevance": 3},
        {"docno": "Gen.1.18", "rank": 3, "relevance": 2}]
    assert skipped["response"]["op"] == "next" and skipped["response"]["qid"] == "q1"
    assert skipped["response"]["done"]
    conversation = jsonl(outs[0], "conversation.jsonl")
    assert conversation[0]["content"] == instructions.read_text()


# ---------------------------------------------------------------- exact resumes


QUERIES = {"t1": ["light", "(^ god said)", "(+ waters firmament)"],
           "t2": ["(^ god saw good)", "earth", "darkness"],
           "t3": ["(+ fish birds)", "(^ seed fruit)", "heavens"]}
TOPICS3 = "t1\tlight and darkness\nt2\twhat God saw\nt3\tliving creatures\n"


def policy_run(bible, tmp_path, name, script, *extra):
    topics = tmp_path / "topics3.tsv"
    topics.write_text(TOPICS3)
    out = tmp_path / name
    with FakeOpenAI(script) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                          fake.base_url, "--out", out, "--max-judgments", 5, "--max-calls",
                          30, *extra)
        calls = len(fake.requests)
    return result, run_lines(out), calls


def test_a_topic_cut_short_resumes_exactly_and_finished_topics_are_skipped(tmp_path):
    import shutil
    path = str(tmp_path / "bible.db")
    ingest(path, [SAMPLE])
    shutil.copytree(path, tmp_path / "copy.db")
    policy = vole_policy.Policy(QUERIES)
    result, whole, calls = policy_run(path, tmp_path, "whole", [policy] * 200)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("stop max-judgments") == 3 and len(whole) == 15

    # the model fails for good in the middle of t2: t2 stops, t3 runs; a rerun resumes t2
    # and skips t1 and t3 without a call
    copy = str(tmp_path / "copy.db")
    cut = [policy] * 10 + [Status(401, "bad key")] + [policy] * 200
    result, lines, _ = policy_run(copy, tmp_path, "cut", cut)
    assert result.exit_code == 1, result.output
    assert "t2: 3 calls, 2 judgments (2 new, 1 of grade 3), stop model-error" in result.stdout
    result, lines, resumed = policy_run(copy, tmp_path, "rerun", [policy] * 200)
    assert result.exit_code == 0, result.output
    assert lines == whole
    assert "t1: finished earlier" in result.stdout and "t3: finished earlier" in result.stdout
    result, lines, again = policy_run(copy, tmp_path, "again", [])
    assert result.exit_code == 0 and again == 0 and lines == whole
    with annodb.open(copy) as db, db.read() as r:
        from annodb.judgments import judgments
        found, record = judgments(r, "t2")
        assert [j.order for j in found] == [1, 2, 3, 4, 5]
        assert record.stop == "max-judgments" and record.judgments == 5
        assert record.calls == max(j.call for j in found)


def test_the_last_call_is_judged_but_its_action_not_executed(bible, topics, tmp_path):
    out = tmp_path / "out"
    script = [query("(^ light day)"), judge(2, action={"type": "query", "gcl": "darkness"})]
    with FakeOpenAI(script) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                          fake.base_url, "--out", out, "--max-calls", 2)
    assert result.exit_code == 0, result.output
    assert "t1: 2 calls, 1 judgments (1 new, 0 of grade 3), stop max-calls" in result.stdout
    ops = [a["request"] for a in jsonl(out, "audit.jsonl") if a["kind"] == "backend"]
    assert [r["op"] for r in ops] == ["judgments", "query", "judge", "topic"]
    last = jsonl(out, "conversation.jsonl")[-1]["content"]
    assert last.startswith("Recorded Gen.1.16: grade 2.\nStopped: the call limit is reached")
    # a rerun skips the finished topic; --continue gives it more calls
    with FakeOpenAI([]) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                          fake.base_url, "--out", tmp_path / "o2", "--max-calls", 2)
        assert not fake.requests
    assert "t1: finished earlier (2 calls, 1 judgments" in result.stdout
    with FakeOpenAI([query("darkness"), judge(1)]) as fake:
        result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                          fake.base_url, "--out", tmp_path / "o3", "--max-calls", 2,
                          "--continue")
        assert len(fake.requests) == 2
    assert "t1: 2 calls, 2 judgments (1 new, 0 of grade 3), stop max-calls" in result.stdout
    assert "turns used 2 of 2" in jsonl(tmp_path / "o3", "conversation.jsonl")[-1]["content"]


def test_sigterm_says_which_topics_are_complete_and_a_rerun_resumes(bible, tmp_path):
    import signal
    import subprocess
    import sys
    import threading
    topics = tmp_path / "topics3.tsv"
    topics.write_text(TOPICS3)
    policy = vole_policy.Policy(QUERIES)
    started = threading.Event()

    def slow(request):          # the first call of t2 hangs until the test has signalled
        if vole_policy._topic(request.messages[0]["content"]) == "t2":
            started.set()
            release.wait(30)
        return policy(request)

    release = threading.Event()
    with FakeOpenAI([slow] * 200) as fake:
        child = subprocess.Popen(
            [sys.executable, "-c", "from annodb_cli.vole import vole; vole()", "run", "--topics",
             str(topics), "--db", bible, "--model", "m", "--base-url", fake.base_url,
             "--out", str(tmp_path / "out"), "--max-judgments", "5"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert started.wait(120), "t2 never started"
            child.send_signal(signal.SIGTERM)
            out, err = child.communicate(timeout=60)
        finally:
            release.set()
            if child.poll() is None:
                child.kill()
    assert child.returncode == 143, err
    assert "t1: " in out and "stop max-judgments" in out
    line = err.strip().splitlines()[-1]
    assert line.startswith("vole: interrupted (SIGTERM): 1 of 3 topics complete (t1); not "
                           "complete: t2, t3."), err
    assert "rerun the same command to resume" in line and "Traceback" not in err
    result, lines, _ = policy_run(bible, tmp_path, "rest", [policy] * 200)
    assert result.exit_code == 0, result.output
    assert "t1: finished earlier" in result.stdout and len(lines) == 15


def test_an_endpoint_that_cannot_be_reached_or_an_unknown_model_fails_fast():
    waits = []
    with socket.socket() as s:          # a port nobody listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Model("m", base_url=f"http://127.0.0.1:{port}/v1", sleep=waits.append) as model:
        with pytest.raises(ModelError, match=r"cannot reach the model endpoint .*"
                                             r"gave up after 3 attempts.*check --base-url"):
            model.complete("i", [{"role": "user", "content": "x"}])
    assert len(waits) == 2 and sum(waits) < 5
    with FakeOpenAI([Status(404, "The model `nope` does not exist")]) as fake, \
            Model("nope", base_url=fake.base_url, sleep=waits.append) as model:
        with pytest.raises(ModelError, match=r"404.*does not exist.*check --model"):
            model.complete("i", [{"role": "user", "content": "x"}])
        assert len(fake.requests) == 1


def test_a_run_ends_when_the_model_endpoint_cannot_be_reached(bible, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text("t1\tlight\nt2\tdarkness\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = vole_run("--topics", topics, "--db", bible, "--model", "m", "--base-url",
                      f"http://127.0.0.1:{port}/v1", "--out", tmp_path / "out")
    assert result.exit_code == 1
    assert result.stdout.count("stop model-error") == 1 and "t2" not in result.stdout
    assert "(the run stopped: 1 topics not run)" in result.stderr.splitlines()[-1]


def test_a_404_on_the_responses_api_suggests_the_chat_api():
    """An endpoint without the Responses API answers 404: the error says to try --api chat
    (and still to check the model's name); on the Chat API a 404 does not say so."""
    with FakeOpenAI([Status(404, "Not Found"), Status(404, "Not Found")]) as fake:
        with Model("m", base_url=fake.base_url) as model, \
                pytest.raises(ModelError, match=r"404.*check --model.*try --api chat"):
            model.complete("i", [{"role": "user", "content": "x"}])
        with Model("m", base_url=fake.base_url, api="chat") as model, \
                pytest.raises(ModelError) as err:
            model.complete("i", [{"role": "user", "content": "x"}])
        assert "--api chat" not in str(err.value) and "check --model" in str(err.value)


def interrupted(tmp_path, bible, target, wait):
    """`vole run` in a child process, sent a real SIGINT once `wait` says it is waiting
    (for the model or for the server); (exit status, stdout, stderr)."""
    import signal
    topics = tmp_path / "topics.tsv"
    topics.write_text(TOPICS3)
    child = interruptible(
        [sys.executable, "-X", "faulthandler", "-c", "from annodb_cli.vole import vole; vole()",
         "run", "--topics", str(topics), *target, "--model", "m", "--out",
         str(tmp_path / "out")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait(), "the run never started waiting"
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=60)   # a hang guard, not a speed check
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGABRT)          # faulthandler prints every thread
            out, err = child.communicate(timeout=30)
            raise AssertionError(f"no exit 60 s after SIGINT; its threads:\n{err}") from None
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, out, err


def test_ctrl_c_while_waiting_for_the_model_or_the_server_ends_the_run(bible, tmp_path):
    """SIGINT to a real `vole run` process while the model has not answered its first call,
    and while the server has not answered: exit 130 with the line saying what is complete,
    no traceback, and an empty vole.run (no topic finished) for scripts to find."""
    import threading
    started, release = threading.Event(), threading.Event()

    def hang(request):
        started.set()
        release.wait(60)
        return query("light")

    with FakeOpenAI([hang] * 3) as fake:
        try:
            code, out, err = interrupted(tmp_path, bible, ["--db", bible, "--base-url",
                                                           fake.base_url],
                                         lambda: started.wait(120))
        finally:
            release.set()
    assert code == 130 and out == "", err
    assert err.splitlines()[-1].startswith("vole: interrupted (SIGINT): 0 of 3 topics "
                                           "complete (none); not complete: t1, t2, t3.")
    assert "Traceback" not in err
    assert (tmp_path / "out" / "vole.run").read_text() == ""

    # a server that accepts and never answers
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    def connected():
        for _ in range(1200):
            if accepted:
                return True
            threading.Event().wait(0.1)
        return False

    try:
        code, out, err = interrupted(tmp_path, bible, ["--server", address, "--base-url",
                                                       "http://127.0.0.1:9/v1"], connected)
    finally:
        listener.close()
        for conn, _ in accepted:
            conn.close()
    assert code == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("vole: interrupted (SIGINT): 0 of 3 topics")
    assert (tmp_path / "out" / "vole.run").read_text() == ""


def test_a_log_line_cut_short_by_a_kill_is_passed_over_and_ends_before_the_next(tmp_path):
    """A kill can leave the conversation log's last line half written: a rerun reads the
    lines before it back, and its own lines start on a new line."""
    from vole.outputs import CONVERSATION, Outputs, read_jsonl
    path = tmp_path / CONVERSATION
    path.write_text('{"run": "a", "topic": "t1", "step": 0, "role": "system", '
                    '"content": "x"}\n{"run": "a", "topic": "t1", "st')
    with Outputs(str(tmp_path)) as out:
        assert [e["step"] for e in out.history("t1")] == [0]
        out.conversation({"topic": "t1", "step": 1, "role": "user", "content": "y"})
    assert [e["step"] for e in read_jsonl(str(path))] == [0, 1]
    assert path.read_text().splitlines()[1] == '{"run": "a", "topic": "t1", "st'
