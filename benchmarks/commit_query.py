"""Queries between commits: an agent's memory, written to while it is searched.

    python -m benchmarks.commit_query                  # 1x and 4x, a commit every 10 queries
    python -m benchmarks.commit_query --sizes 1 --every 5 --tree /tmp/before
    python -m benchmarks.commit_query --free-text      # search_text, as Memory.recall

For each size, a copy of the one-database collection shards_bench.py builds
(benchmarks/work/shards/{1x,4x}-1.db) is opened for writing in a fresh process; the real
queries (tests/data/vole-queries.tsv) are replayed as the server runs them
(common.queries.answer_as_served: rank to depth 1000 and the first hit with its snippet),
300 first to warm up (with commits as below), then --queries more with a one-document
commit (a short note, as Memory.remember writes) before every --every-th. With --forget
every other commit deletes the note the commit before added (an agent's `forget`)
instead of adding one. With --free-text the queries are natural-language questions
instead (the 86 TREC RAG 2024 questions, then the real queries' words; shards_bench.py's
free_texts), each `search_text(q, k=10)` with snippets, as Memory.recall and the MCP
search tool ask, 50 first to warm up. The first query after each commit and the others
are reported apart (median / p90 / p99 ms), with the commits' own time. --tree runs
another checkout's annodb (for a before / after pair on one machine, in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

from benchmarks.common.paths import QUERIES, REPO, WORK

REPLAY = r"""
import json, sys, time
import annodb
sys.path.insert(0, sys.argv[5])
from benchmarks.common.queries import answer_as_served, load_queries
path, n, every, free = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[6] == "free"
forget = sys.argv[7] == "forget"
notes = []
if free:
    with open(sys.argv[4], encoding="utf-8") as f:
        queries = json.load(f)
else:
    queries = load_queries(sys.argv[4])
warm = 50 if free else 300
db = annodb.open(path)
def one(q):
    return answer_as_served(db, q, free)
after, others, commits = [], [], []
for i, q in enumerate(queries[:warm + n]):
    if i == warm:  # (the warm-up's commits compiled the writer's kernels too)
        after, others, commits = [], [], []
    if i % every == 0:
        t = time.perf_counter()
        with db.write() as w:
            if forget and notes and (i // every) % 2:
                w.delete(notes.pop())
            else:
                notes.append(f"note-{i}-{time.time_ns()}")
                w.add({"docno": notes[-1], "text": "remembered: " + " ".join(q.split()[:8])})
        commits.append(time.perf_counter() - t)
    t = time.perf_counter()
    if one(q):
        (after if i % every == 0 else others).append(time.perf_counter() - t)
db.close()
print(json.dumps({"after": after, "others": others, "commits": commits}))
"""


def stats(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"n": len(ms), "median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99))}


def run(source: str, work: str, tree: str, n: int, every: int, free: bool,
        forget: bool) -> dict:
    copy = os.path.join(work, os.path.basename(source))
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    queries = QUERIES
    if free:
        from benchmarks.shards_bench import free_texts
        queries = os.path.join(work, "free-texts.json")
        with open(queries, "w", encoding="utf-8") as f:
            json.dump(free_texts(n + 50), f)
    try:
        out = subprocess.run([sys.executable, "-c", REPLAY, copy, str(n), str(every), queries,
                              REPO, "free" if free else "gcl", "forget" if forget else "add"],
                             cwd=tree, capture_output=True,
                             text=True,
                             env={**os.environ, "PYTHONPATH": tree})
        if out.returncode:
            raise SystemExit(f"commit_query: the replay failed: {out.stderr[-2000:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return {k: stats(v) for k, v in got.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,4")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--every", type=int, default=10, help="a commit before every n-th query")
    ap.add_argument("--tree", action="append", default=None,
                    help="an annodb checkout to run (repeatable; default this one)")
    ap.add_argument("--work", default=os.path.join(WORK, "commit"))
    ap.add_argument("--free-text", action="store_true",
                    help="natural-language questions by search_text (default: GCL queries)")
    ap.add_argument("--forget", action="store_true",
                    help="every other commit deletes the note the one before added")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    trees = args.tree or [REPO]
    rows = []
    for times in [int(x) for x in args.sizes.split(",")]:
        source = os.path.join(WORK, "shards", f"{times}x-1.db")
        if not os.path.exists(source):
            raise SystemExit(f"commit_query: no {source} (benchmarks/shards_bench.py builds it)")
        for tree in trees:
            got = run(source, args.work, tree, args.queries, args.every, args.free_text,
                      args.forget)
            rows.append((f"{times}x", tree, got))
            print(f"{times}x {tree}: {got}", flush=True)
    print("\n| corpus | annodb | queries | median ms | p90 ms | p99 ms |\n|---|---|---|---:|---:|---:|")
    for size, tree, got in rows:
        for kind, label in (("after", "first after a commit"), ("others", "the others"),
                            ("commits", "the commits")):
            r = got[kind]
            print(f"| {size} | {tree} | {label} ({r['n']}) | {r['median']:.2f} | "
                  f"{r['p90']:.2f} | {r['p99']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
