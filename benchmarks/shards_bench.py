"""Shards: one database against sharded collections (in process and on local Ray actors).

    python -m benchmarks.shards_bench                     # 1x and 4x, 1, 2 and 4 shards
    python -m benchmarks.shards_bench --check-only        # exactness on the MS MARCO sample
    python -m benchmarks.shards_bench --sizes 1 --shards 2 --server-queries 500

Run it with the venv's Python from the repository (`pip install -e '.[ray]'`). In one run:

1. Exactness: the 4,435 real queries (tests/data/vole-queries.tsv) over the whole MS MARCO
   sample (../shared/data/rag24/msmarco-sample.jsonl), one database against 2 and 4
   shards, in process (one shard after another, and worker processes) and on Ray: every ranking to depth 1000 (docnos, scores, covers,
   totals; the first ten hits' docnos), by SSR and by BM25, and the queries' words as free
   text (BM25; every tenth by SSR's tiers and by BM25+RM3) to depth 100, must be identical.
2. For each corpus (benchmarks/work/corpus.jsonl, the scale corpus; corpus4x.jsonl, it four
   times with docids suffixed #r1..#r3, from /work/main/benchmarks/work when this tree has
   none) and each shard count: `annodb ingest` in a child process (wall time; CPU time of
   its whole process tree, from the rusage of reaped children; peak RSS of the tree,
   sampled every 50 ms), the size on disk, then the 4,435 queries replayed warm in a fresh
   process as the server's query runs them (rank to depth 1000 and the first hit with its
   snippet; 300 queries first to warm up), and --free-text questions (the 86 TREC RAG
   2024 questions, then the real queries' words) as an agent asks them, search_text's
   default ranking with snippets (50 first): median / p90 / p99 / max — for one database,
   shards on threads, one after another, in worker processes (fan_out="processes": the
   first shard in the querying process) and on Ray actors.
3. `annodb serve` (its default worker processes; `--ray local` for Ray) replayed with 1, 4
   and 16 clients (benchmarks/server_bench.py) on the first --server-queries queries.

Figures go to stdout as markdown tables (benchmarks/RESULTS.md, "Shards", holds a run's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

from benchmarks import server_bench
from benchmarks.common.paths import QUERIES, REPO, WORK, shared
from benchmarks.common.processes import memory, tree
from benchmarks.common.queries import load_queries

SHARED = shared("data", "rag24")


def corpus_path(name: str) -> str:
    for where in (WORK, "/work/main/benchmarks/work"):
        if os.path.exists(os.path.join(where, name)):
            return os.path.join(where, name)
    raise SystemExit(f"shards_bench: no {name} (build it as benchmarks/README.md says)")


def ingest(corpus: str, db: str, shards: int | None) -> dict:
    """`annodb ingest` in a child process: wall, CPU of the tree, peak RSS, size."""
    shutil.rmtree(db, ignore_errors=True)
    extra = ["--shards", str(shards)] if shards else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                             "ingest", "--quiet", "--db", db, *extra, corpus], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": REPO})
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(memory(p)[0] for p in tree(proc.pid)))
        time.sleep(0.05)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode:
        raise SystemExit(f"shards_bench: ingest failed: {err[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    size = sum(os.stat(os.path.join(root, f)).st_blocks * 512
               for root, _, files in os.walk(db) for f in files)
    return {"wall": wall, "cpu": cpu, "busy": cpu / wall, "rss": peak, "size": size}


REPLAY = r"""
import json, sys, time, gc
import numpy as np, annodb
from benchmarks.common.queries import answer_as_served, load_queries
path, mode, kind = sys.argv[1], sys.argv[2], sys.argv[4]
queries = load_queries(sys.argv[3]) if kind == "gcl" else json.loads(sys.argv[3])
if mode == "ray":
    from annodb.shards import ray as ray_shards
    ray_shards.start_local()
    db = ray_shards.open(path)
else:
    db = annodb.open(path, readonly=True, fan_out=None if mode == "one" else mode)
def one(q):
    return answer_as_served(db, q, kind == "text")
for q in queries[:300 if kind == "gcl" else 50]:
    one(q)
gc.freeze()
lat = []
for q in queries:
    t = time.perf_counter()
    if one(q):
        lat.append(time.perf_counter() - t)
if mode == "ray":
    ray_shards.stop(path)
    ray_shards.ray.shutdown()
print(json.dumps(lat))
"""


def free_texts(n: int) -> list[str]:
    """Natural-language questions for the free-text replay: the 86 TREC RAG 2024 questions
    (../shared; none when it is absent), then the real queries' words as keyword texts,
    n in all."""
    texts = []
    topics = os.path.join(SHARED, "man86.topics")
    if os.path.exists(topics):
        with open(topics, encoding="utf-8") as f:
            texts = [line.rstrip("\n").split("\t", 1)[1] for line in f if "\t" in line]
    words = dict.fromkeys(" ".join(re.findall(r"\w+", q))
                          for q in load_queries(QUERIES))
    return (texts + [t for t in words if t])[:n]


def warm_files(db: str) -> None:
    """Read the collection's files once, so the replay finds them in the page cache (this
    machine's cache had let most of a 2 GB database go by the time its replay began)."""
    for root, _, files in os.walk(db):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                while f.read(1 << 24):
                    pass


def replay(db: str, mode: str, texts: list[str] | None = None) -> dict:
    """The real queries (or, given `texts`, those as free text) replayed in a fresh
    process: latency in ms."""
    warm_files(db)
    kind, queries = ("gcl", QUERIES) if texts is None else ("text", json.dumps(texts))
    out = subprocess.run([sys.executable, "-c", REPLAY, db, mode, queries, kind], cwd=REPO,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    if out.returncode:
        raise SystemExit(f"shards_bench: replay failed: {out.stderr[-2000:]}")
    ms = np.asarray(json.loads(out.stdout.strip().splitlines()[-1])) * 1000
    return {"median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max()), "n": len(ms)}


CHECK = r"""
import sys, annodb
from annodb.ingest import ingest
from benchmarks.common.queries import load_queries
work, sample, queries = sys.argv[1], sys.argv[2], load_queries(sys.argv[3])
ingest(f"{work}/one.db", [sample])
dbs = {"one": annodb.open(f"{work}/one.db", readonly=True)}
for n in (2, 4):
    annodb.open(f"{work}/s{n}.shards", shards=n).close()
    ingest(f"{work}/s{n}.shards", [sample])
    dbs[f"{n} shards"] = annodb.open(f"{work}/s{n}.shards", readonly=True)
    dbs[f"{n} shards, processes"] = annodb.open(f"{work}/s{n}.shards", readonly=True,
                                                fan_out="processes")
from annodb.shards import ray as ray_shards
ray_shards.start_local()
for n in (2, 4):
    dbs[f"{n} shards on Ray"] = ray_shards.open(f"{work}/s{n}.shards")
import re
import numpy as np
def answer(db, q, how):
    # a ranking to depth 1000 as what makes it: its arrays (global addresses, so the same
    # in every collection), totals, query and warnings, and the first ten hits' docnos
    # read through the collection (documents_at)
    with db.read() as r:
        try:
            got = r.rank(q, depth=1000, lenient=True, rank=how)
        except annodb.AnnodbError as err:
            return type(err).__name__
        arrays = tuple(np.asarray(a).tobytes() for a in (got.starts, got.ends, got.scores,
                                                          got.cover_starts, got.cover_ends))
        return (got.total, got.query, tuple(got.warnings), arrays,
                tuple(h.docno for h in got.hits(10, snippet=False)))
def free(db, text, how):
    with db.read() as r:
        return [(h.docno, h.score, h.start, h.end)
                for h in r.search_text(text, k=100, rank=how, snippets=False)]
same = {name: 0 for name in dbs if name != "one"}
ranked = 0
texts = sorted({" ".join(re.findall(r"\w+", q)) for q in queries})
asked = [(answer, q, how) for q in queries for how in ("ssr", "bm25")] + \
    [(free, t, "bm25") for t in texts] + [(free, t, "ssr") for t in texts[::10]] + \
    [(free, t, "bm25+rm3") for t in texts[::10]]
for i, (fn, q, how) in enumerate(asked):
    if i % 1000 == 0:
        print(f"check: {i:,} of {len(asked):,} rankings compared", file=sys.stderr, flush=True)
    want = fn(dbs["one"], q, how)
    ranked += fn is answer and how == "ssr" and isinstance(want, tuple) and bool(want[0])
    for name in same:
        agrees = fn(dbs[name], q, how) == want
        same[name] += agrees
        if not agrees:
            print(f"differs: {name}, {how}: {q!r}", file=sys.stderr)
for n in (2, 4):
    ray_shards.stop(f"{work}/s{n}.shards")
ray_shards.ray.shutdown()
print(len(queries), ranked, len(texts), len(asked), " ".join(f"{k.replace(' ', '_')}={v}" for k, v in same.items()))
"""


def check(work: str) -> str:
    sample = os.path.join(SHARED, "msmarco-sample.jsonl")
    os.makedirs(work, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", CHECK, work, sample, QUERIES], cwd=REPO,
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": REPO})  # (progress on stderr)
    if out.returncode:
        raise SystemExit("shards_bench: the check failed (its error is above)")
    n, ranked, texts, asked, *rest = out.stdout.strip().splitlines()[-1].split()
    return (f"Exactness on the MS MARCO sample (4,036 segments): {n} real queries ({ranked} "
            f"rank at least one segment) ranked by SSR and by BM25 to depth 1000, their "
            f"words ({texts} texts) as free text by BM25 and every tenth by SSR's tiers and "
            f"by BM25+RM3 to depth 100: of {asked} rankings, identical to one database's: " +
            ", ".join(x.replace("_", " ").replace("=", ": ") for x in rest))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,4", help="corpus multiples (1: corpus.jsonl)")
    ap.add_argument("--shards", default="2,4", help="shard counts besides one database")
    ap.add_argument("--work", default=os.path.join(WORK, "shards"))
    ap.add_argument("--server-queries", type=int, default=1000)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--corpus", help="the 1x corpus (default: benchmarks/work/corpus.jsonl)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--free-text", type=int, default=500,
                    help="free-text questions replayed besides the GCL queries (0: none)")
    ap.add_argument("--no-gcl", action="store_true", help="replay free text only")
    ap.add_argument("--no-ingest", action="store_true",
                    help="time the collections already in --work (made by an earlier run)")
    args = ap.parse_args(argv)
    if not args.no_check:
        print(check(os.path.join(args.work, "check")), flush=True)
    if args.check_only:
        return 0
    counts = [None] + [int(x) for x in args.shards.split(",")]
    queries = load_queries(QUERIES)[:args.server_queries]
    ingests, latency, servers = [], [], []
    for times in [int(x) for x in args.sizes.split(",")]:
        corpus = args.corpus if args.corpus and times == 1 else \
            corpus_path("corpus.jsonl" if times == 1 else f"corpus{times}x.jsonl")
        for n in counts:
            name = "one database" if n is None else f"{n} shards"
            db = os.path.join(args.work, f"{times}x-{n or 1}.{'shards' if n else 'db'}")
            if not args.no_ingest:
                got = ingest(corpus, db, n)
                ingests.append((f"{times}x", name, got))
                print(f"ingest {times}x {name}: {got}", flush=True)
            elif not os.path.exists(db):
                raise SystemExit(f"shards_bench: --no-ingest, and no {db}")
            modes = ["one"] if n is None else ["threads", "sequential", "processes"] + \
                ([] if args.no_ray else ["ray"])
            for mode in modes:
                label = name if n is None else f"{name}, {mode}"
                for kind, texts in ([] if args.no_gcl else [("GCL", None)]) + \
                        ([("free text", free_texts(args.free_text))] if args.free_text else []):
                    lat = replay(db, mode, texts)
                    latency.append((f"{times}x", kind, label, lat))
                    print(f"queries {times}x {kind} {label}: {lat}", flush=True)
            if args.server_queries and times == max(int(x) for x in args.sizes.split(",")):
                for mode in (["processes"] if n is None else ["processes"] +
                             ([] if args.no_ray else ["ray"])):
                    table = _serve(db, queries, ray=mode == "ray")
                    servers.append((f"{times}x", name if n is None else f"{name}, {mode}",
                                    table))
                    print(f"server {times}x {name} {mode}:\n{table}", flush=True)
    print("\n| corpus | collection | ingest s | CPU s of the tree | CPU / wall | peak RSS MB "
          "| size MB |\n|---|---|---:|---:|---:|---:|---:|")
    for size, name, r in ingests:
        print(f"| {size} | {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['busy']:.2f} | "
              f"{r['rss'] / 1e6:,.0f} | {r['size'] / 1e6:,.0f} |")
    print("\n| corpus | queries | collection | median ms | p90 ms | p99 ms | max ms |\n"
          "|---|---|---|---:|---:|---:|---:|")
    for size, kind, name, r in latency:
        print(f"| {size} | {kind} | {name} | {r['median']:.2f} | {r['p90']:.2f} | "
              f"{r['p99']:.1f} | {r['max']:.0f} |")
    for size, name, table in servers:
        print(f"\n`annodb serve`, {size}, {name}:\n\n{table}")
    return 0


def _serve(db: str, queries: list[str], ray: bool) -> str:
    """server_bench's replay with 1, 4 and 16 clients; `annodb serve --ray local` for Ray."""
    if not ray:
        return server_bench.measure(db, queries, [1, 4, 16])
    proc = subprocess.Popen([sys.executable, "-c", "from annodb_cli.serve import serve; serve()",
                             "--db", db, "--port", "0", "--timeout", "60", "--ray", "local"],
                            cwd=REPO, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": REPO})
    port, said = None, []
    while port is None:
        line = proc.stderr.readline().decode(errors="replace")
        if not line:
            raise SystemExit(f"shards_bench: the Ray server did not start: {''.join(said)}")
        said.append(line)
        m = re.search(r"listening on port (\d+)", line)
        port = int(m.group(1)) if m else None
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    try:
        server_bench.replay(port, queries[:200], 4)     # warm up
        runs = [server_bench.replay(port, queries, c) for c in (1, 4, 16)]
    finally:
        proc.terminate()
        code = proc.wait(60)
    return server_bench._table(runs, code)


if __name__ == "__main__":
    sys.exit(main())
