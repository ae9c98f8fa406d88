"""The Vole meets a real model: every decision gpt-5.5 made in the published run, replayed
through `vole run` over `annodb serve` on the MS MARCO sample, for the 86 topics.

    python -m benchmarks.vole_replay [--record] [--topics N] [--keep DIR]

1. `vole.decision.parse` on all 6,358 decisions (benchmarks/vole_decisions.py).
2. The MS MARCO sample (../shared/data/rag24/msmarco-sample.jsonl, the 4,036 segments the
   agent saw) ingested into a fresh database, served by `annodb serve --strict` (malformed
   queries refused, as the reference server refuses them).
3. ../shared/tools/replay_decisions.py as the model endpoint (call N of a topic answered
   with the topic's logged decision N; past the log, a query matching nothing), and
   `vole run --protocol reference --instructions ../shared/data/thevole/instructions.txt`
   with the published limits (100 calls, 50 judgments), all as child processes.
4. From the run's logs: decisions refused as invalid, judgments recorded, judgments of
   documents this run never showed (refused by design), model calls (and how many came
   past the end of the log), query latency as the Vole timed it; nDCG@10 with
   `vole eval` against man86.qrels beside the published run's (the sample holds only the
   windows the agent saw, so rankings differ from the full collection's: the figures say
   what the Vole does with real decisions, they are not the paper's).
5. `vole report` on the run, opened in headless Chromium: the topics it shows.
6. Ctrl-C: a real SIGINT to a replaying `vole run` at a few moments, and the time until
   its process has exited.

`--record` writes RESULTS.md's "The Vole meets a real model" section. Needs ../shared
(says so and stops when absent), and Debian's chromium for step 5 (skipped without it).
Run it under the CPU lock: flock /tmp/annodb-cpu.lock python -m benchmarks.vole_replay
"""

from __future__ import annotations

import argparse
import collections
import datetime
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.common.paths import REPO as ROOT, shared

THEVOLE = shared("data", "thevole")
RAG = shared("data", "rag24")
REPLAY = shared("tools", "replay_decisions.py")
SAMPLE = os.path.join(RAG, "msmarco-sample.jsonl")
TOPICS = os.path.join(RAG, "man86.topics")
QRELS = os.path.join(RAG, "man86.qrels")
INSTRUCTIONS = os.path.join(THEVOLE, "instructions.txt")
VOLE = [sys.executable, "-c", "from annodb_cli.vole import vole; vole()"]
ANNODB = [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()"]

from benchmarks import vole_decisions  # noqa: E402
from benchmarks.common.results import machine, record  # noqa: E402
from vole.outputs import read_jsonl  # noqa: E402
from vole.report import percentile  # noqa: E402


class Child:
    """A child process whose first stderr/stdout line gives its port."""

    def __init__(self, args, pattern, stream="stderr"):
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        source = getattr(self.proc, stream)
        line = source.readline()
        m = re.search(pattern, line)
        if not m:
            self.stop()
            raise SystemExit(f"{args[2:5]}: did not start: {line}")
        self.port = int(m.group(1))
        for s in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=s.read, daemon=True).start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def serve(db):
    return Child([*ANNODB, "serve", "--db", db, "--strict", "--port", "0"],
                 r"listening on port (\d+)")


def replayer():
    return Child([sys.executable, REPLAY, THEVOLE, TOPICS], r"^(\d+)", "stdout")


def vole_run(topics, server, endpoint, out):
    return [*VOLE, "run", "--topics", topics, "--server", f"127.0.0.1:{server.port}",
            "--model", "gpt-5.5", "--base-url", f"http://127.0.0.1:{endpoint.port}/v1",
            "--out", out, "--protocol", "reference", "--instructions", INSTRUCTIONS]


def figures_of(out) -> dict:
    audit = list(read_jsonl(os.path.join(out, "audit.jsonl")))
    decisions = [a for a in audit if a["kind"] == "decision"]
    outcomes = collections.Counter(a.get("judged") for a in decisions)
    model = [a for a in audit if a["kind"] == "model"]
    over = sum(1 for a in decisions if (a.get("action") or {}).get("gcl") ==
               "zzzreplayoverzzz")
    queries = [a for a in audit if a["kind"] == "backend" and a["request"]["op"] == "query"]
    q = [a["time"] for a in queries]
    summaries = {s["qid"]: s for s in read_jsonl(os.path.join(out, "summary.jsonl"))}
    runs = collections.Counter(line.split()[0] for line in open(os.path.join(out,
                                                                             "vole.run")))
    return {
        "topics": len(summaries), "decisions": len(decisions),
        "invalid": sum(1 for a in decisions if not a["valid"]),
        "outcomes": dict(outcomes),
        "judged": sum(runs.values()),
        "model_calls": sum(1 for a in model if "usage" in a),
        "failed_attempts": sum(1 for a in model if "usage" not in a),
        "past_the_log": over,
        "stops": dict(collections.Counter(s["stop"] for s in summaries.values())),
        "queries": len(q), "refused_queries": sum(1 for a in queries
                                                  if not a["response"].get("ok")),
        "query_ms": {"median": percentile(q, 50), "p90": percentile(q, 90),
                     "p99": percentile(q, 99), "max": max(q, default=0.0)},
        "backend_requests": sum(1 for a in audit if a["kind"] == "backend"),
    }


def ndcg(run_path, qrels) -> float:
    done = subprocess.run([*VOLE, "eval", "--qrels", qrels, run_path, "--json",
                           "--measure", "nDCG@10"], capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"vole eval: {done.stderr}")
    return json.loads(done.stdout)["measures"]["nDCG@10"]


def browser_topics(page) -> dict | None:
    binary = shutil.which("chromium")
    if binary is None:
        return None
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu",
                               "--disable-background-networking",
                               "--disable-component-update", "--disable-sync",
                               "--no-first-run", f"--user-data-dir={profile}",
                               "--dump-dom", "file://" + os.path.abspath(page)],
                              capture_output=True, text=True, timeout=600)
    m = re.search(r'data-check="([^"]*)"', done.stdout)
    check = json.loads(html.unescape(m.group(1))) if m else {}
    shown = re.search(r'<output id="shown">([^<]*)</output>', done.stdout)
    return {**check, "shown": shown.group(1) if shown else None,
            "sections": len(re.findall(r'<details class="topic"', done.stdout))}


def _sigint_default() -> None:
    """(In the child:) SIGINT at its default, as at a terminal: a benchmark started in
    the background of a non-interactive shell has it ignored, and its children with it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupts(work, db, delays) -> list[float]:
    """Seconds from a SIGINT to the exit of a replaying `vole run`, one per delay."""
    seconds = []
    for i, delay in enumerate(delays):
        copy = os.path.join(work, f"sigint{i}.db")
        shutil.copytree(db, copy)
        server, endpoint = serve(copy), replayer()
        try:
            child = subprocess.Popen(vole_run(TOPICS, server, endpoint,
                                              os.path.join(work, f"sigint{i}")),
                                     cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=_sigint_default)
            time.sleep(delay)
            sent = time.perf_counter()
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=120)
            seconds.append(time.perf_counter() - sent)
            if child.returncode != 130:
                raise SystemExit(f"SIGINT: exit {child.returncode}: {err[-500:]}")
        finally:
            server.stop()
            endpoint.stop()
        shutil.rmtree(copy)
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="write RESULTS.md's section")
    ap.add_argument("--topics", type=int, metavar="N", help="only the first N topics")
    ap.add_argument("--keep", metavar="DIR", help="keep the database and the run here")
    args = ap.parse_args(argv)
    for path in (THEVOLE, SAMPLE, REPLAY):
        if not os.path.exists(path):
            print(f"{path}: not here (../shared is needed); nothing measured",
                  file=sys.stderr)
            return 2
    parsed = vole_decisions.parse_all(os.path.join(THEVOLE, "decisions.jsonl"))
    print(f"parse: {parsed.get('parsed', 0)} of {parsed['decisions']} decisions")
    work = args.keep or tempfile.mkdtemp(prefix="vole-replay-")
    os.makedirs(work, exist_ok=True)
    base, db, out = (os.path.join(work, n) for n in ("sample.db", "replay.db", "out"))
    topics = TOPICS
    if args.topics:
        topics = os.path.join(work, "topics.tsv")
        with open(TOPICS) as f, open(topics, "w") as t:
            t.writelines(f.readlines()[:args.topics])
    try:
        if not os.path.exists(base):
            started = time.perf_counter()
            subprocess.run([*ANNODB, "ingest", "--db", base, SAMPLE], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"ingest: {time.perf_counter() - started:.1f} s")
        for path in (db, out):
            shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(base, db)
        server, endpoint = serve(db), replayer()
        try:
            started = time.perf_counter()
            done = subprocess.run(vole_run(topics, server, endpoint, out), cwd=ROOT,
                                  capture_output=True, text=True)
            wall = time.perf_counter() - started
        finally:
            server.stop()
            endpoint.stop()
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        found = figures_of(out)
        found["wall_s"] = round(wall, 1)
        found["ndcg10"] = ndcg(os.path.join(out, "vole.run"), QRELS)
        found["published_ndcg10"] = ndcg(os.path.join(THEVOLE, "vole.man86.run"), QRELS)
        page = os.path.join(out, "report.html")
        rep = subprocess.run([*VOLE, "report", out, "--qrels", QRELS, "-o", page, "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        if rep.returncode:
            print(rep.stderr, file=sys.stderr)
            return 1
        found["report_mb"] = round(os.path.getsize(page) / 1e6, 1)
        found["browser"] = browser_topics(page)
        found["sigint_s"] = [round(s, 3) for s in interrupts(work, base, (1.0, 3.0, 6.0))]
        found["parse"] = parsed
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(found, indent=1))
    if args.record:
        record("vole-replay", section(found))
    return 0


def section(f: dict) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    q, o, p = f["query_ms"], f["outcomes"], f["parse"]
    b = f["browser"] or {}
    judgments = sum(v for k, v in o.items() if k not in (None, "null"))
    shown = (f"{b.get('topics')} topics (the page's script counted "
             f"{b.get('topics')} topic sections, showing \"{b.get('shown')}\"; "
             f"{len(b.get('plots', []))} plots laid out; {b.get('resources')} resources "
             "fetched)" if b else "not checked (no chromium binary)")
    return f"""## The Vole meets a real model (`python -m benchmarks.vole_replay`)

Run {now} on {machine()}. Every decision gpt-5.5 made in the published run
(`../shared/data/thevole`), replayed through `vole run --protocol reference
--instructions ../shared/data/thevole/instructions.txt` (limits 100 calls, 50 judgments)
over `annodb serve --strict` on the MS MARCO sample (4,036 segments), with
`../shared/tools/replay_decisions.py` as the model endpoint.

| | |
|---|---:|
| decisions in the published run that `decision.parse` reads | {p['parsed']:,} of {p['decisions']:,} (before: 0) |
| of them "nothing to judge" (`docno: null`) / with an action's reason | {p['nothing_to_judge']:,} / {p['with_reason']:,} |
| topics run | {f['topics']} ({', '.join(f'{k} {v}' for k, v in sorted(f['stops'].items()))}) |
| model calls | {f['model_calls']:,} ({f['past_the_log']:,} past the end of a topic's log, answered with a query matching nothing) |
| decisions refused as invalid | {f['invalid']} |
| judgments recorded (run file lines) | {f['judged']:,} |
| judgments of documents this run never showed (refused) | {o.get('not shown', 0):,} |
| judgments of a document judged before (regraded) | {o.get('regraded', 0):,} |
| queries (refused as malformed by `--strict`) | {f['queries']:,} ({f['refused_queries']}) |
| query latency as the Vole timed it (server and socket): median / p90 / p99 / max | {q['median']:.1f} / {q['p90']:.1f} / {q['p99']:.1f} / {q['max']:.1f} ms |
| nDCG@10 (man86.qrels) of this run / of the published run | {f['ndcg10']:.4f} / {f['published_ndcg10']:.4f} |
| whole replay (wall) | {f['wall_s']} s |
| `vole report` page | {f['report_mb']} MB; headless Chromium shows {shown} |
| Ctrl-C: SIGINT to a replaying `vole run` after 1, 3, 6 s, seconds until it exited | {', '.join(f'{s:.2f}' for s in f['sigint_s'])} |

The sample holds only the 200-token windows the agent saw, so its rankings differ from the
full collection's: the model's decisions (made against what the reference server showed
it) sometimes judge a document this run never showed ({o.get('not shown', 0):,} of the
{judgments:,} judgments made, refused by design: see README, "Where we follow the published
runner"), or ask for the next result of a query whose ranking differs here. So topics
judge fewer documents than in the published run ({f['judged']:,} run-file lines against its
4,066), none reaches the 50-judgment limit, all go on to the 100-call limit, and past the
end of a topic's log the replay endpoint answers with a query that matches nothing. The run cannot equal the
published one and its nDCG@10 is not the paper's. What the figures show is that every real
decision is read and acted on.

Reproduce (from the repository, with its venv):

```sh
python -m benchmarks.vole_decisions
flock /tmp/annodb-cpu.lock python -m benchmarks.vole_replay --record
# by hand: the same run, step by step
annodb ingest --db sample.db ../shared/data/rag24/msmarco-sample.jsonl
annodb serve --db sample.db --strict --port 8765 &
python ../shared/tools/replay_decisions.py ../shared/data/thevole ../shared/data/rag24/man86.topics &  # prints its port P
vole run --topics ../shared/data/rag24/man86.topics --server 127.0.0.1:8765 --model gpt-5.5 \\
    --base-url http://127.0.0.1:P/v1 --out runs/replay --protocol reference \\
    --instructions ../shared/data/thevole/instructions.txt
vole report runs/replay --qrels ../shared/data/rag24/man86.qrels
```"""


if __name__ == "__main__":
    sys.exit(main())
