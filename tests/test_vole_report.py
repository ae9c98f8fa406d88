"""`vole report` (vole/report.py): the data a run's page is built from, nDCG@10 as
trec_eval computes it, and the page itself as headless Chromium renders it (Debian's
`chromium`; that test is skipped, saying so, when no chromium binary exists)."""

from __future__ import annotations

import html
import json
import os
import random
import re
import shutil
import subprocess

import ir_measures
import pytest
from click.testing import CliRunner

import vole_policy
from annodb.ingest import ingest
from annodb_cli.vole import vole
from fake_openai import FakeOpenAI
from vole import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "examples", "bible-sample.jsonl")
QUERIES = {"t1": ["light", "(^ god said)", "(+ waters firmament)"],
           "t2": ["(^ god saw good)", "zzqq", "darkness"],
           "t3": ["(^ seed fruit)", "(^ seed fruit)", "heavens"]}   # again: passed over
TOPICS = "t1\tlight and darkness\nt2\twhat God saw\nt3\tliving creatures\n"


@pytest.fixture(scope="module")
def policy_run(tmp_path_factory):
    """Three topics run by the deterministic policy over the Bible sample: (out dir, the
    requests the model endpoint saw)."""
    tmp = tmp_path_factory.mktemp("report")
    db = str(tmp / "bible.db")
    ingest(db, [SAMPLE])
    topics = tmp / "topics.tsv"
    topics.write_text(TOPICS)
    out = tmp / "out"
    with FakeOpenAI([vole_policy.Policy(QUERIES)] * 200) as fake:
        result = CliRunner().invoke(vole, [
            "run", "--topics", str(topics), "--db", db, "--model", "m", "--base-url",
            fake.base_url, "--out", str(out), "--max-judgments", "5", "--max-calls", "30"])
        requests = list(fake.requests)
    assert result.exit_code == 0, result.output
    return out, requests


def audit(out):
    with open(os.path.join(out, "audit.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_ndcg_is_trec_evals():
    """nDCG@10 equals ir-measures' (trec_eval's) on runs with tied scores, unjudged and
    negative-graded documents, and topics with nothing relevant."""
    rng = random.Random(7)
    qrels, run = [], []
    per_topic = {}
    for t in range(40):
        qid = f"q{t}"
        docs = [f"d{i}" for i in range(rng.randint(1, 30))]
        graded = {d: rng.choice([-1, 0, 0, 1, 2, 3]) for d in docs if rng.random() < 0.7}
        if t % 9 == 0:
            graded = {d: 0 for d in graded}            # nothing relevant
        ranked = [(d, float(rng.randint(0, 5))) for d in docs if rng.random() < 0.8]
        if not graded or not ranked:
            continue
        qrels += [ir_measures.Qrel(qid, d, g) for d, g in graded.items()]
        run += [ir_measures.ScoredDoc(qid, d, s) for d, s in ranked]
        per_topic[qid] = report.ndcg(ranked, graded, 10)
    expected = {m.query_id: m.value for m in
                ir_measures.iter_calc([ir_measures.nDCG @ 10], qrels, run)}
    assert len(expected) > 30
    assert per_topic == pytest.approx(expected, abs=1e-12)
    # by hand: grades 1 then 3 ranked, ideal 3 then 1
    assert report.ndcg([("b", 2), ("a", 1)], {"a": 3, "b": 1}) == pytest.approx(
        (1 + 3 / 1.5849625007211562) / (3 + 1 / 1.5849625007211562))


def test_the_report_data_of_a_run(policy_run, tmp_path):
    """Per topic: every model call with its tokens, the action, the result shown, results
    passed over as judged before, the judgment and what became of it; over the run the
    latency of every query and the grades; nDCG@10 against qrels."""
    out, requests = policy_run
    records = audit(out)
    qrels = tmp_path / "qrels"
    qrels.write_text("t1 0 Gen.1.3 3\nt1 0 Gen.1.4 2\nt1 0 Gen.1.9 1\nt2 0 Gen.1.4 0\n"
                     "t9 0 Gen.1.1 3\n")
    r = report.build(str(out), str(qrels))
    assert [t.qid for t in r.topics] == ["t1", "t2", "t3"]
    assert [t.text for t in r.topics] == ["light and darkness", "what God saw",
                                          "living creatures"]
    assert sum(t.model_calls for t in r.topics) == len(requests)
    model = [a for a in records if a["kind"] == "model"]
    assert sum(t.input_tokens for t in r.topics) == sum(a["usage"]["input_tokens"]
                                                        for a in model)
    for t in r.topics:
        assert [c.call for c in t.calls] == list(range(1, t.model_calls + 1))
        assert t.stop == "max-judgments" and len(t.grades) == 5
        assert sorted(t.ranked) == sorted(t.grades)
        assert {d: g for d, g in t.grades.items()} == {
            d: vole_policy.grade(d) for d in t.grades}
    # the queries' latencies are every query request's, as audited
    queries = [a for a in records if a["kind"] == "backend" and a["request"]["op"] == "query"]
    assert r.query_ms == [a["time"] for a in queries]
    # a call's result: shown, or passed over as judged before; judged when the next call
    # graded it
    t1 = r.topics[0]
    first = t1.calls[0]
    assert first.action["type"] == "query" and first.action["gcl"] == "light"
    assert [(x.op, x.rank, x.passed) for x in first.results] == [("query", 1, False)]
    assert "<cover>" in first.results[0].text
    assert t1.calls[1].judgment["docno"] == first.results[0].docno
    assert t1.calls[1].judged == "recorded"
    t3 = r.topics[2]
    passed = [x.docno for c in t3.calls for x in c.results if x.passed]
    assert passed and set(passed) <= set(t3.grades)
    documents = [x for c in t1.calls for x in c.results if x.op == "document"]
    assert documents and documents[0].text
    done = [x for t in r.topics for c in t.calls for x in c.results if x.done]
    assert done                                      # t2's "zzqq" matches nothing
    assert r.grades == [sum(1 for t in r.topics for g in t.grades.values() if g == k)
                        for k in range(4)]
    # nDCG@10 per topic of the qrels (t3 has none), the mean over the qrels' 3 topics
    assert r.topics[2].ndcg10 is None
    graded = {"Gen.1.3": 3, "Gen.1.4": 2, "Gen.1.9": 1}
    ranked = list(zip(t1.ranked, range(len(t1.ranked), 0, -1)))
    assert t1.ndcg10 == report.ndcg(ranked, graded)
    assert r.ndcg10 == pytest.approx((t1.ndcg10 + r.topics[1].ndcg10 + 0) / 3)
    figures = report.figures(r)
    assert figures["topics"] == 3 and figures["judged"] == 15
    assert figures["queries"] == len(queries)


def test_vole_report_writes_one_page_and_refuses_what_is_not_a_run(policy_run, tmp_path):
    out, _ = policy_run
    page = tmp_path / "page.html"
    result = CliRunner().invoke(vole, ["report", str(out), "-o", str(page), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["topics"] == 3
    assert result.stderr.startswith(f"vole: wrote {page}: 3 topics")
    text = page.read_text()
    # nothing is loaded at view time: no URL in a src, href or url(), no external script
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    assert "url(" not in text and "@import" not in text
    for args in (["report", str(tmp_path / "nothing")], ["report", str(tmp_path)]):
        result = CliRunner().invoke(vole, args)
        assert result.exit_code == 1
        assert result.stderr.startswith("vole: error: ") and "vole run" in result.stderr
        assert len(result.stderr.splitlines()) == 1


def chromium_dom(page) -> str:
    """The page's DOM after its script ran, from headless Chromium."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("no chromium binary (Debian: apt-get install chromium; CI installs it)")
    profile = page.parent / "chromium-profile"
    done = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_page_in_headless_chromium(policy_run, tmp_path):
    """What a person sees: the browser runs the page's script (the topic count, each
    plot laid out with its bars, nothing fetched) and shows every topic with its timeline
    and the run's table."""
    out, requests = policy_run
    page = tmp_path / "report.html"
    result = CliRunner().invoke(vole, ["report", str(out), "-o", str(page)])
    assert result.exit_code == 0, result.output
    dom = chromium_dom(page)
    check = json.loads(html.unescape(re.search(r'data-check="([^"]*)"', dom).group(1)))
    assert check["topics"] == 3 and check["resources"] == 0
    sizes = [re.fullmatch(r"(\d+)x(\d+):(\d+)", p).groups() for p in check["plots"]]
    assert len(sizes) == 4 and all(int(w) > 100 and int(h) > 50 for w, h, _ in sizes)
    assert [int(n) for _, _, n in sizes] == [3, 3, len(report.LATENCY_BINS) + 1, 4]
    assert re.search(r'<output id="shown">3 of 3 topics</output>', dom)
    for qid, text in (line.split("\t") for line in TOPICS.splitlines()):
        section = re.search(rf'<details class="topic" id="topic-{qid}".*?</details>', dom,
                            re.S).group(0)
        assert text in section
        calls = re.findall(r'<li class="call" data-call="(\d+)"', section)
        asked = [r for r in requests if vole_policy._topic(r.messages[0]["content"]) == qid]
        assert [int(c) for c in calls] == list(range(1, len(asked) + 1))
        assert "<mark>" in section and "judged <code>" in section
    rows = re.findall(r'<tr><td><a href="#topic-(t\d)">', dom)
    assert rows == ["t1", "t2", "t3"]
