"""Exact resumes of the Vole: `vole run` killed with SIGKILL at random points, or
the `annodb serve` it searches through killed at random points, and the same command run
again: every time the run file equals the one an uninterrupted run writes, and the
database passes check.

The model is tests/vole_policy.py's deterministic policy behind the fake OpenAI endpoint
(tests/fake_openai.py), so the uninterrupted run is reproducible and a rerun judges the
same documents in the same order. A kill is triggered by the fake endpoint when it is
asked for the k-th decision (k at random over the calls an uninterrupted run makes),
after a random delay of 0-40 ms, so it lands anywhere: waiting for the model, inside a
judgment's commit, between a judgment and the next request, while a topic's stop is
recorded, or between topics.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

import annodb
import vole_policy
from annodb.check import check
from annodb.ingest import ingest
from annodb_cli.vole import vole
from fake_openai import FakeOpenAI
from test_vole_replay import Served

from .workload import SEED, size

pytestmark = pytest.mark.reliability

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO, "examples", "bible-sample.jsonl")
QUERIES = {"t1": ["light", "(^ god said)", "(+ waters firmament)"],
           "t2": ["(^ god saw good)", "earth", "darkness"],
           "t3": ["(+ fish birds)", "(^ seed fruit)", "heavens"],
           "t4": ["(^ man image)", "(+ day night)", "(^ beast earth)"]}
TOPICS = "".join(f"{qid}\ttopic {qid}\n" for qid in QUERIES)
LIMITS = ["--max-judgments", "6", "--max-calls", "40"]
POLICY = vole_policy.Policy(QUERIES)


def vole_args(tmp_path, out, base_url, target):
    topics = tmp_path / "topics.tsv"
    if not topics.exists():
        topics.write_text(TOPICS)
    return ["run", "--topics", str(topics), *target, "--model", "m", "--base-url", base_url,
            "--out", str(out), *LIMITS]


def run_in_process(tmp_path, out, target):
    with FakeOpenAI([POLICY] * 400) as fake:
        result = CliRunner().invoke(vole, vole_args(tmp_path, out, fake.base_url, target))
        return result, len(fake.requests)


def run_file(out) -> str:
    with open(os.path.join(out, "vole.run")) as f:
        return f.read()


class Killer:
    """A fake-endpoint script item: at the k-th request, SIGKILL `pid` after `delay` s."""

    def __init__(self, k: int, delay: float):
        self.k, self.delay, self.pid, self.seen = k, delay, None, 0
        self.fired = threading.Event()

    def __call__(self, request):
        self.seen += 1
        if self.seen == self.k and self.pid is not None:
            threading.Timer(self.delay, self._kill).start()
        return POLICY(request)

    def _kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.fired.set()


@pytest.fixture
def collection(tmp_path):
    path = str(tmp_path / "base.db")
    ingest(path, [SAMPLE])
    return path


@pytest.fixture
def baseline(tmp_path, collection):
    db = str(tmp_path / "baseline.db")
    shutil.copytree(collection, db)
    result, calls = run_in_process(tmp_path, tmp_path / "baseline", ["--db", db])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("stop max-judgments") == len(QUERIES), result.stdout
    return run_file(tmp_path / "baseline"), calls


def kill_point(rng, trial, trials, calls):
    """(k, delay): the k-th request, drawn from the trial's share of the calls (so even a
    short run spreads its kills over the whole run)."""
    lo, hi = 1 + trial * calls // trials, max(1 + trial * calls // trials,
                                               (trial + 1) * calls // trials)
    return rng.randint(lo, hi), rng.uniform(0, 0.04)


def judged(db) -> int:
    with annodb.open(db, create=False) as d, d.read() as r:
        return sum(len(r.intervals(f"judgment:{q}")) for q in QUERIES)


def test_vole_run_killed_at_random_points_resumes_exactly(tmp_path, collection, baseline,
                                                          figures):
    expected, calls = baseline
    rng = random.Random(SEED + 15)
    trials = size(3, 10)
    at_kill = []
    for trial in range(trials):
        db, out = str(tmp_path / f"k{trial}.db"), tmp_path / f"k{trial}"
        shutil.copytree(collection, db)
        killer = Killer(*kill_point(rng, trial, trials, calls))
        with FakeOpenAI([killer] * 400) as fake:
            child = subprocess.Popen(
                [sys.executable, "-c", "from annodb_cli.vole import vole; vole()",
                 *vole_args(tmp_path, out, fake.base_url, ["--db", db])],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            killer.pid = child.pid
            _, err = child.communicate(timeout=300)
        assert child.returncode == -signal.SIGKILL, err
        at_kill.append(judged(db))
        with annodb.open(db, create=False) as d:
            assert check(d) == []
        result, rerun = run_in_process(tmp_path, out, ["--db", db])
        assert result.exit_code == 0, result.output
        assert run_file(out) == expected, f"trial {trial}: {result.stdout}"
        # only the call in flight when the kill landed may be asked again
        assert killer.seen + rerun - calls in (0, 1), (trial, killer.seen, rerun, calls)
    figures.update(trials=trials, reruns_equal=trials, calls_uninterrupted=calls,
                   judgments_at_kill=at_kill)


def test_server_killed_at_random_points_resumes_exactly(tmp_path, collection, baseline,
                                                        figures):
    expected, calls = baseline
    rng = random.Random(SEED + 16)
    trials = size(2, 10)
    failed_runs = 0
    for trial in range(trials):
        db, out = str(tmp_path / f"s{trial}.db"), tmp_path / f"s{trial}"
        shutil.copytree(collection, db)
        server = Served(db)
        killer = Killer(*kill_point(rng, trial, trials, calls))
        killer.pid = server.child.pid
        try:
            with FakeOpenAI([killer] * 400) as fake:
                result = CliRunner().invoke(vole, vole_args(
                    tmp_path, out, fake.base_url, ["--server", server.address]))
            killer.fired.wait(5)
        finally:
            server.stop(signal.SIGKILL)
        failed_runs += result.exit_code != 0
        with annodb.open(db, create=False) as d:
            assert check(d) == []
        server = Served(db)
        try:
            result, rerun = run_in_process(tmp_path, out, ["--server", server.address])
        finally:
            server.stop()
        assert result.exit_code == 0, result.output
        assert run_file(out) == expected, f"trial {trial}: {result.stdout}"
        # the answers received before the server died are acted on, not asked again
        assert killer.seen + rerun == calls, (trial, killer.seen, rerun, calls)
    figures.update(trials=trials, reruns_equal=trials, runs_cut_by_the_kill=failed_runs)
