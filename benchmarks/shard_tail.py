"""Which queries gain from shards: the 4,435 real queries, query by query, one database
against a sharded collection holding the same documents.

    python -m benchmarks.shard_tail benchmarks/work/shards/4x-1.db \\
        benchmarks/work/shards/4x-2.shards [--fan-out processes] [--reps 3] [--top 25] \\
        [--cache-mb 512] [--spin-ms 1,0] [--block 20]

Both collections are open in one fresh process (their files read first, so both find them
in the page cache) and replayed warm as the server's query runs (rank to depth 1000 by SSR
and the first hit with its snippet; 300 queries first to warm up), interleaved: each query
runs on both, in an order drawn per query (seeded), `--reps` times over. A shared machine's
noise then falls on both alike; replayed one after the other, in processes of their own
(this script's first version), one database's own p99 moved 1.6x between two replays.
Printed: each replay's median / p90 / p99 / max and the ratio of the p99s; the p99 of each
query's fastest time over the replays; the slowest queries of one database with their
time in the shards and the ratio, then the ratio by band of one database's time (where the
shards' fixed cost per query, paid by every query, meets the half of the work each shard
does). With `--block N`, N queries in a row run on one collection, then the same N on
the other (the order drawn per block): interleaving query by query leaves a worker process
idle while one database answers (its polling ends after 1 ms and it sleeps; on this VM an
idle CPU goes back to the host and comes back with cold caches), which this process, always
busy, never is; in blocks both sides run as a busy server does. With `--spin-ms A,B`,
the sharded collection is opened once per value (how long its worker processes and this
process poll before sleeping, annodb.shards.worker.SPIN), each replayed in the same interleaving;
the per-query tables are the first one's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from benchmarks.common.paths import QUERIES, REPO
from benchmarks.common.queries import load_queries
from benchmarks.shards_bench import warm_files

REPLAY = r"""
import gc, json, random, sys, time
import annodb
from benchmarks.common.queries import answer_as_served, load_queries
import annodb.shards
one, sharded, fan_out, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5])
cache = None if sys.argv[6] == "-" else int(sys.argv[6])
spins = json.loads(sys.argv[7])
queries = load_queries(sys.argv[4])
dbs = [annodb.open(one, readonly=True, cache_bytes=cache)] + [
    annodb.shards.open(sharded, readonly=True, fan_out=fan_out, cache_bytes=cache,
                       **({} if spin is None else {"spin": spin})) for spin in spins]
for q in queries[:300]:
    for db in dbs:
        answer_as_served(db, q)
gc.freeze()
block = int(sys.argv[8])
order = random.Random(0)
out = [[[None] * len(queries) for _ in range(reps)] for _ in dbs]
for r in range(reps):
    for b in range(0, len(queries), block):
        which = list(range(len(dbs)))
        order.shuffle(which)
        for k in which:
            for i in range(b, min(b + block, len(queries))):
                t = time.perf_counter()
                ok = answer_as_served(dbs[k], queries[i])
                out[k][r][i] = time.perf_counter() - t if ok else None
print(json.dumps(out))
"""


def replay(one: str, sharded: str, fan_out: str, reps: int, cache_bytes: int | None = None,
           spins: list = (None,), block: int = 1) -> tuple[np.ndarray, ...]:
    """(one database's, the shards' for each spin (None: annodb's)) times: reps x queries,
    in ms (NaN: refused); `block` queries on one collection, then on the other(s)."""
    warm_files(one)
    warm_files(sharded)
    out = subprocess.run([sys.executable, "-c", REPLAY, one, sharded, fan_out, QUERIES,
                          str(reps), "-" if cache_bytes is None else str(cache_bytes),
                          json.dumps(list(spins)), str(block)],
                         cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": REPO})
    if out.returncode:
        raise SystemExit(f"shard_tail: replay failed: {out.stderr[-2000:]}")
    both = json.loads(out.stdout.strip().splitlines()[-1])
    return tuple(np.array([[np.nan if t is None else t * 1000 for t in row] for row in rows])
                 for rows in both)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("one", help="one database")
    ap.add_argument("sharded", help="a sharded collection of the same documents")
    ap.add_argument("--fan-out", default="processes", choices=("sequential", "threads",
                                                                "processes"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--spin-ms", default=None,
                    help="comma-separated: the sharded collection once per value of its "
                         "spin, in ms (default: annodb's)")
    ap.add_argument("--cache-mb", type=int, default=None,
                    help="the decoded-list cache of each collection, in MB (a sharded one "
                         "splits it between its shards); default: annodb's, 256 MB per "
                         "database, so 2 shards have twice one database's")
    ap.add_argument("--block", type=int, default=1,
                    help="queries run on one collection before the other takes its turn "
                         "(default 1: each query on both; see the module docstring)")
    args = ap.parse_args(argv)
    if args.block < 1:
        raise SystemExit("shard_tail: --block must be at least 1")
    for path in (args.one, args.sharded):
        if not os.path.exists(path):
            raise SystemExit(f"shard_tail: no {path} (benchmarks/shards_bench.py builds both)")
    queries = load_queries(QUERIES)
    cache = None if args.cache_mb is None else args.cache_mb << 20
    spins = [None] if args.spin_ms is None else \
        [float(x) / 1000 for x in args.spin_ms.split(",")]
    a, *bs = replay(args.one, args.sharded, args.fan_out, args.reps, cache, spins,
                    args.block)
    names = ["one database"] + [f"shards, {args.fan_out}" + (
        "" if spin is None else f", spin {spin * 1000:g} ms") for spin in spins]
    print("| collection | replay | median ms | p90 ms | p99 ms | max ms |\n"
          "|---|---:|---:|---:|---:|---:|")
    for name, x in zip(names, [a] + bs):
        for r, row in enumerate(x):
            v = row[~np.isnan(row)]
            print(f"| {name} | {r + 1} | {np.median(v):.2f} | {np.percentile(v, 90):.2f} | "
                  f"{np.percentile(v, 99):.2f} | {v.max():.1f} |")
    fa = np.nanmin(a, axis=0)
    for name, b in zip(names[1:], bs):
        ratios = [np.nanpercentile(y, 99) / np.nanpercentile(x, 99) for x, y in zip(a, b)]
        fb = np.nanmin(b, axis=0)
        ok = ~np.isnan(fa) & ~np.isnan(fb)
        pa, pb = np.percentile(fa[ok], 99), np.percentile(fb[ok], 99)
        print(f"\n{name}: p99 against one database's, replay by replay: "
              + ", ".join(f"{r:.3f}x" for r in ratios)
              + f". Each query's fastest of {args.reps} replays, {ok.sum():,} queries: p99 "
              f"{pa:.2f} ms (one database) against {pb:.2f} ms ({pb / pa:.2f}x); median "
              f"{np.median(fa[ok]):.2f} against {np.median(fb[ok]):.2f} ms.")
    fb = np.nanmin(bs[0], axis=0)
    ok = ~np.isnan(fa) & ~np.isnan(fb)
    print()
    print("| one database ms | shards ms | ratio | query |\n|---:|---:|---:|---|")
    idx = np.nonzero(ok)[0]
    for i in idx[np.argsort(-fa[idx])][:args.top]:
        q = queries[i].replace("|", "\\|")
        print(f"| {fa[i]:.2f} | {fb[i]:.2f} | {fb[i] / fa[i]:.2f}x | `{q[:90]}` |")
    print("\n| one database's time | queries | shards / one database (median of the ratios) |"
          "\n|---|---:|---:|")
    edges = np.percentile(fa[ok], [0, 50, 90, 99, 99.9, 100])
    labels = ("fastest half", "50-90%", "90-99%", "99-99.9%", "slowest 0.1%")
    for lo, hi, label in zip(edges, edges[1:], labels):
        sel = ok & (fa >= lo) & (fa <= hi)
        print(f"| {label} ({lo:.2f}-{hi:.2f} ms) | {sel.sum():,} | "
              f"{np.median(fb[sel] / fa[sel]):.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
