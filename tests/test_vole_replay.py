"""The Vole driven by a real model's decisions: two topics of the published run (gpt-5.5,
tests/data/thevole) replayed call by call by a fake OpenAI-compatible endpoint on
127.0.0.1 (fake_openai.Replay) through the real openai client, searching a real
`annodb serve --strict` (a child process) over 600 MS MARCO segments that hold every
document the model judged for those topics, with the published runner's protocol
(`--protocol reference`) and instructions shaped like its own (`{information_need}`).

The collection is a sample, so the model's decisions, made against the full collection,
sometimes judge a document this run never showed (refused, and counted) or ask for the
next result of a query that ranks differently here: what is checked is what the Vole does
with real decisions, not the published figures."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

import annodb
from annodb.ingest import ingest
from annodb_cli.vole import vole
from fake_openai import FakeOpenAI, Status, load_replay

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data")
THEVOLE = os.path.join(DATA, "thevole")
SAMPLE = os.path.join(DATA, "msmarco-sample-600.jsonl")
TOPICS = os.path.join(THEVOLE, "topics.tsv")
FIRST, SECOND = "2024-105741", "2024-121840"
LIMITS = ["--max-judgments", "35"]     # the first topic stops on judgments, the second on calls
INSTRUCTIONS = ("You are a search agent.\n\nINFORMATION NEED:\n{information_need}\n\n"
                "Answer with one JSON object: latest_judgment and action.\n")


class Served:
    """`annodb serve` in a child process; `address` is HOST:PORT."""

    def __init__(self, db: str, *extra: str):
        self.child = subprocess.Popen(
            [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()", "serve",
             "--db", db, "--port", "0", *extra], cwd=REPO, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        line = self.child.stderr.readline()
        m = re.search(r"listening on port (\d+)", line)
        assert m, line + self.child.stderr.read()
        self.address = f"127.0.0.1:{m.group(1)}"
        self._drain = threading.Thread(target=self.child.stderr.read, daemon=True)
        self._drain.start()

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.child.poll() is None:
            self.child.send_signal(sig)
        self.child.wait(30)
        self._drain.join(30)
        self.child.stderr.close()


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("replay") / "sample.db")
    ingest(path, [SAMPLE])
    return path


@pytest.fixture
def served(tmp_path, collection):
    db = str(tmp_path / "db")
    shutil.copytree(collection, db)
    server = Served(db, "--strict")
    yield db, server
    server.stop()


def run_args(tmp_path, out, server, base_url):
    instructions = tmp_path / "instructions.txt"
    instructions.write_text(INSTRUCTIONS)
    return ["run", "--topics", TOPICS, "--server", server.address, "--model", "gpt-5.5",
            "--base-url", base_url, "--out", str(out), "--protocol", "reference",
            "--instructions", str(instructions), *LIMITS]


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def run_file(out):
    with open(os.path.join(out, "vole.run")) as f:
        return f.read()


def expected_run(audit) -> dict[str, list[str]]:
    """The run file worked out from the decisions log alone: per topic the documents whose
    judgment was recorded, by the latest grade given, then the order first recorded."""
    grades, order = collections.defaultdict(dict), collections.defaultdict(dict)
    for a in audit:
        if a["kind"] == "decision" and a.get("judged") in ("recorded", "regraded"):
            docno = a["judgment"]["docno"]
            grades[a["topic"]][docno] = a["judgment"]["grade"]
            order[a["topic"]].setdefault(docno, len(order[a["topic"]]))
    return {t: sorted(g, key=lambda d: (-g[d], order[t][d])) for t, g in grades.items()}


def test_published_decisions_replayed_through_the_server(tmp_path, served):
    db, server = served
    out = tmp_path / "out"
    replay = load_replay(THEVOLE)
    with FakeOpenAI([replay] * 400) as fake:
        result = CliRunner().invoke(vole, run_args(tmp_path, out, server, fake.base_url))
        requests = list(fake.requests)
    server.stop()
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{FIRST}: 49 calls, 35 judgments (35 new, 16 of grade 3), stop max-judgments",
        f"{SECOND}: 100 calls, 30 judgments (30 new, 8 of grade 3), stop max-calls"]
    audit = jsonl(out / "audit.jsonl")
    decisions = [a for a in audit if a["kind"] == "decision"]

    # every decision parses: the published shape, with `reason` on actions and
    # `docno: null` for "nothing to judge"
    assert len(decisions) == 149 and all(d["valid"] for d in decisions)
    logged = jsonl(os.path.join(THEVOLE, "decisions.jsonl"))
    made = {(e["topic"], e["call"]): e["decision"] for e in logged}
    assert [(d["topic"], d["call"]) for d in decisions] == \
        [(FIRST, n) for n in range(1, 50)] + [(SECOND, n) for n in range(1, 101)]
    nothing = [d for d in decisions if made[(d["topic"], d["call"])]["latest_judgment"][
        "docno"] is None]
    assert len(nothing) == 64 and all(d["judgment"] is None for d in nothing)
    assert all(d["action"]["reason"] == made[(d["topic"], d["call"])]["action"]["reason"]
               for d in decisions)                                 # the reasons are kept
    outcomes = collections.Counter(d["judged"] for d in decisions)
    assert outcomes == {None: 64, "recorded": 65, "not shown": 15, "regraded": 5}
    # the action of the last call allowed is not executed
    assert [(d["topic"], d["call"]) for d in decisions if not d["executed"]] == [
        (FIRST, 49), (SECOND, 100)]

    # what the model read: the instructions with the topic's text, queries lower-cased
    # and answered as the published runner shows them, judged results passed over
    first = [r for r in requests if r.messages[0]["content"].find(FIRST) >= 0]
    assert all("is it dangerous to have wbc over 15,000" in r.instructions for r in first)
    sent = [a["request"]["query"] for a in audit
            if a["kind"] == "backend" and a["request"]["op"] == "query"]
    assert sent and all(q == q.lower() for q in sent)
    observations = [line for r in requests for line in r.last.splitlines()]
    envelopes = [json.loads(o) for o in observations if o.startswith('{"request":{"op"')]
    skipped = [e for e in envelopes if "skipped" in e["response"]]
    assert len(skipped) == 23 and all(
        set(s) == {"docno", "rank", "relevance"} for e in skipped
        for s in e["response"]["skipped"])
    documents = [e for e in envelopes if e["request"]["op"] == "document"]
    assert len(documents) == 6 and all(e["response"]["ok"] for e in documents)

    # the run file: by grade, then discovery order, as the decisions log says
    lines = run_file(out).splitlines()
    ranked = collections.defaultdict(list)
    for line in lines:
        qid, _, docno, rank, score, tag = line.split()
        ranked[qid].append(docno)
        assert tag == "vole"
    assert ranked == expected_run(audit)
    assert [len(ranked[FIRST]), len(ranked[SECOND])] == [35, 30]
    with open(os.path.join(THEVOLE, "replay.run")) as f:     # what the next test expects
        assert run_file(out) == f.read()

    # the judgments are annotations of the database, and their reasons notes linked to them
    with annodb.open(db, create=False, readonly=True) as d, d.read() as r:
        for topic, docnos in ranked.items():
            found = {r.document_at(s).docno: v for s, _, v in
                     r.query(f"judgment:{topic}")}
            graded = {d["judgment"]["docno"]: d["judgment"]["grade"] for d in decisions
                      if d["topic"] == topic and d["judged"] in ("recorded", "regraded")}
            assert found == graded and set(found) == set(docnos)
            starts = sorted(r.document(x).start for x in docnos)
            assert r.query(f"(@ note:{topic})").starts.tolist() == starts


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of `address`: `hook(request)` sees each request
    line a client sends before it is passed on, and may kill the client instead (it
    returns True: the line is dropped and the connection closed)."""

    def __init__(self, address: str, hook):
        import socket
        host, port = address.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.hook = hook
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump_lines, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump_lines(self, client, upstream):
        with client.makefile("rb") as lines:
            for line in lines:
                if self.hook(json.loads(line)):
                    break
                upstream.sendall(line)
        for s in (client, upstream):
            s.close()

    @staticmethod
    def _pump(source, target):
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass

    def close(self):
        self.listener.close()


def killed_run(tmp_path, out, proxy, replay, victim) -> int:
    """`vole run` in a child process until `victim` kills it; its exit status."""
    with FakeOpenAI([replay] * 400) as fake:
        child = subprocess.Popen(
            [sys.executable, "-c", "from annodb_cli.vole import vole; vole()",
             *run_args(tmp_path, out, proxy, fake.base_url)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        victim["pid"] = child.pid
        _, err = child.communicate(timeout=300)
    return child.returncode, err


def kill(victim) -> None:
    os.kill(victim["pid"], signal.SIGKILL)
    try:
        os.waitid(os.P_PID, victim["pid"], os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        pass
    victim["killed"] += 1


def test_a_replay_killed_twice_resumes_to_the_same_run_asking_no_call_twice(tmp_path,
                                                                              served):
    """`vole run` killed (SIGKILL) while waiting for the model's answer to a call, and
    again after an answer was received and its judgment committed but before its action
    was done; each rerun continues the topic's own conversation: the same run file as an
    uninterrupted run, and no decision given out twice."""
    db, server = served
    out = tmp_path / "out"
    replay = load_replay(THEVOLE)
    victim = {"pid": None, "killed": 0}
    judged = collections.Counter()

    def before(topic, call):          # first run: killed while call 30 is asked
        if (topic, call) == (FIRST, 30) and not victim["killed"]:
            kill(victim)
            return Status(500, "killed")

    def hook(request):                # second run: killed after the 10th judgment of the
        if request.get("op") == "judge" and request["topic"] == SECOND:  # second topic,
            judged[SECOND] += 1                                # before its action is done
        elif judged[SECOND] == 10 and victim["killed"] == 1:
            kill(victim)
            return True
        return False

    replay.before = before
    proxy = Proxy(server.address, hook)
    try:
        code, err = killed_run(tmp_path, out, proxy, replay, victim)
        assert code == -signal.SIGKILL and victim["killed"] == 1, err
        code, err = killed_run(tmp_path, out, proxy, replay, victim)
        assert code == -signal.SIGKILL and victim["killed"] == 2, err
    finally:
        proxy.close()
    with FakeOpenAI([replay] * 400) as fake:
        result = CliRunner().invoke(vole, run_args(tmp_path, out, server, fake.base_url))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{FIRST}: finished earlier (49 calls, 35 judgments, 16 of grade 3, stop "
        "max-judgments); skipped (a higher --max-judgments lets it go on)",
        f"{SECOND}: 83 calls, 30 judgments (20 new, 8 of grade 3), stop max-calls"]
    with open(os.path.join(THEVOLE, "replay.run")) as f:
        assert run_file(out) == f.read()
    # every decision was given out once: none was asked again after a kill
    assert set(replay.answered) == {(FIRST, n) for n in range(1, 50)} | \
        {(SECOND, n) for n in range(1, 101)}
    assert set(replay.answered.values()) == {1}
    resumes = [a for a in jsonl(out / "audit.jsonl") if a["kind"] == "resume"]
    assert [(a["topic"], a["restored"], a["calls"], a["pending"]) for a in resumes] == [
        (FIRST, True, 29, False), (SECOND, True, 17, True)]


def test_a_query_read_on_after_a_reconnect_is_issued_again(tmp_path):
    """The connection to the server drops while the model asks for a query's third
    result: the server forgets the query (qids are per connection), so the Vole issues it
    again on the new connection, passes the two ranks already read, and shows rank 3 under
    the topic's own qid."""
    import io

    from annodb.server import Server
    from test_vole import judge, query
    db = str(tmp_path / "bible.db")
    ingest(db, [os.path.join(REPO, "examples", "bible-sample.jsonl")])
    topics = tmp_path / "topics.tsv"
    topics.write_text("t1\tWhat did God create on the first day?\n")
    nexts = []

    def hook(request):           # drop the connection at the second `next`, once
        if request.get("op") == "next":
            nexts.append(request)
            return len(nexts) == 2
        return False

    server = Server(db, log=io.StringIO()).start()
    proxy = Proxy(f"127.0.0.1:{server.port}", hook)
    try:
        script = [query("(^ light day)"), judge(1), judge(3), judge(2)]
        with FakeOpenAI(script) as fake:
            result = CliRunner().invoke(vole, [
                "run", "--topics", str(topics), "--server", proxy.address, "--model", "m",
                "--base-url", fake.base_url, "--out", str(tmp_path / "out"),
                "--max-judgments", "3"])
            requests = list(fake.requests)
    finally:
        proxy.close()
        server.shutdown()
    assert result.exit_code == 0, result.output
    assert "q0 rank 3: docno Gen.1.18" in requests[3].last
    audit = jsonl(tmp_path / "out" / "audit.jsonl")
    again = [a for a in audit if a.get("reissue")]
    assert [a["request"]["op"] for a in again] == ["query", "next"]
    assert run_file(tmp_path / "out").split()[2::6] == ["Gen.1.5", "Gen.1.18", "Gen.1.16"]
