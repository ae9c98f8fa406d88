"""SSR on the 4,435 real LLM queries beside tantivy and SQLite FTS5, at 1x and 4x of the
scale corpus, in one process, interleaved query by query.

    python -m benchmarks.ssr_speed                    # build what is missing, 3 rounds
    python -m benchmarks.ssr_speed --rounds 5 --sizes 1,4
    python -m benchmarks.ssr_speed --engines Annodb        # annodb alone in the process
    PYTHONPATH=/tmp/before python -m benchmarks.ssr_speed   # another checkout's annodb

The databases are the growth benchmark's (benchmarks/work/growth-1x/, growth-4x/: annodb.db,
fts5.db, tantivy/), each built here in a child process when absent (the 4x corpus is
corpus.jsonl four times, docids suffixed #r1..#r3, as `python -m benchmarks.run --growth`
makes it). What is timed per query: annodb ranks by SSR to depth 1000 and makes the first
10 hits with docnos and snippets in a fresh read snapshot (as a server does); the peers
parse the same query, translate it to their Boolean query (all-of -> AND, one-of -> OR,
phrases) and return their bm25 top 10 docids (benchmarks/engines.py). After one warm-up
round, every query runs on each engine and size in turn (the order of queries shuffled
per round with a fixed seed), so the machine's load falls on all of them alike. Per engine
and size: median / p90 / p99 / max over every (query, round), and each query's fastest
round's percentiles; annodb's ratios to each peer; each engine's growth 1x -> 4x.
Queries that a peer cannot express (translate gives None) are left out for every engine.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import random
import sys
import time

import numpy as np

from benchmarks.common import engines
from benchmarks.common.paths import WORK  # (this tree's, whichever checkout's annodb runs)
from benchmarks.common.queries import load_queries

ENGINES = ("Annodb", "Fts5", "Tantivy")
PCT = ("median", "p90", "p99", "max")


def place(times: int) -> str:
    return os.path.join(WORK, f"growth-{times}x")


def _build_child(engine_name: str, workdir: str, corpus: str) -> None:
    cls = getattr(engines, engine_name)
    eng = cls(workdir)
    t = time.perf_counter()
    eng.ingest(corpus)
    print(f"  {cls.name} {workdir}: {time.perf_counter() - t:.1f} s, "
          f"{eng.size() / 1e6:,.0f} MB", flush=True)


def build(times: int, names: tuple[str, ...] = ENGINES) -> None:
    """Each engine's database for `times` x the corpus, when it is not built yet."""
    from benchmarks.growth import corpus_times
    os.makedirs(place(times), exist_ok=True)
    corpus = None
    for name in names:
        eng = getattr(engines, name)(place(times))
        marker = eng.path + ".built"
        if os.path.exists(marker):
            continue
        corpus = corpus or corpus_times(os.path.join(WORK, "corpus.jsonl"), times)
        print(f"  building {eng.name} at {times}x ...", flush=True)
        p = multiprocessing.get_context("spawn").Process(
            target=_build_child, args=(name, place(times), corpus))
        p.start()
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"ssr_speed: building {eng.name} at {times}x failed")
        open(marker, "w").close()


def percentiles(ms: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max())}


def replay(sizes: list[int], queries: list[str], rounds: int, seed: int,
           names: tuple[str, ...] = ENGINES) -> dict:
    """{(engine name, times): (every time in ms, each query's fastest in ms)}."""
    opened = []
    for times in sizes:
        for name in names:
            eng = getattr(engines, name)(place(times))
            eng.open()
            opened.append((eng, times))
    # the queries every engine can run (a peer's translation may have none)
    runnable = [q for q in queries if all(e.query(q) is not None for e, _ in opened)]
    for eng, _ in opened:  # warm-up round
        for q in runnable:
            eng.query(q)
    gc.collect()
    gc.freeze()  # as annodb serve does after warming up, for every engine alike
    times_ms = np.zeros((len(opened), rounds, len(runnable)))
    rng = random.Random(seed)
    order = list(range(len(runnable)))
    clock = time.perf_counter
    for r in range(rounds):
        rng.shuffle(order)
        for i in order:
            q = runnable[i]
            for k, (eng, _) in enumerate(opened):
                t = clock()
                eng.query(q)
                times_ms[k, r, i] = (clock() - t) * 1000
    return {(eng.name, times): (times_ms[k].ravel(), times_ms[k].min(axis=0))
            for k, (eng, times) in enumerate(opened)}, len(runnable)


def tables(got: dict, sizes: list[int]) -> str:
    names = list(dict.fromkeys(name for name, _ in got))
    out = []
    for label, which in (("every query, every round", 0), ("each query's fastest round", 1)):
        stats = {key: percentiles(v[which]) for key, v in got.items()}
        out += [f"{label}:", "", "| engine | size | median ms | p90 ms | p99 ms | max ms |",
                "|---|---|---:|---:|---:|---:|"]
        for name in names:
            for t in sizes:
                s = stats[(name, t)]
                out.append(f"| {name} | {t}x | " + " | ".join(f"{s[p]:.3f}" for p in PCT) + " |")
            for t in sizes[1:]:
                out.append(f"| {name} | growth 1x -> {t}x | " + " | ".join(
                    f"x{stats[(name, t)][p] / stats[(name, sizes[0])][p]:.2f}" for p in PCT) +
                    " |")
        for peer in names[1:] if names[0] == engines.Annodb.name else ():
            for t in sizes:
                out.append(f"| annodb / {peer} | {t}x | " + " | ".join(
                    f"{stats[(names[0], t)][p] / stats[(peer, t)][p]:.2f}x" for p in PCT) + " |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n" + __doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4", help="corpus multiples (default 1,4)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--build-only", action="store_true", help="build what is missing, stop")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help=f"which to replay, in this order (default {','.join(ENGINES)}; "
                    "annodb's ratios to the others when it is first)")
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(WORK, "corpus.jsonl")):
        print(f"ssr_speed: no scale corpus at {WORK}/corpus.jsonl "
              "(python -m benchmarks.run builds it)", file=sys.stderr)
        return 1
    names = tuple(args.engines.split(","))
    if not names or not set(names) <= set(ENGINES):
        print(f"ssr_speed: --engines names some of {', '.join(ENGINES)}", file=sys.stderr)
        return 2
    have = {cls.__name__ for cls in engines.available()}
    if not set(names) <= have:
        print(f"ssr_speed: {', '.join(sorted(set(names) - have))} not installed "
              "(pip install tantivy); left out", file=sys.stderr)
        names = tuple(n for n in names if n in have)
    sizes = [int(s) for s in args.sizes.split(",")]
    for t in sizes:
        build(t, names)
    if args.build_only:
        return 0
    import annodb
    from benchmarks.common.results import machine
    print(f"annodb from {os.path.dirname(os.path.dirname(annodb.__file__))}; {machine()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    got, n = replay(sizes, load_queries(), args.rounds, args.seed, names)
    print(f"{n:,} queries every engine runs, {args.rounds} rounds after a warm-up round\n")
    print(tables(got, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
