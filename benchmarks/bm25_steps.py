"""Where a BM25 top k on SciFact goes, step by step: each claim's search timed apart in one
read snapshot (opening it, the words and their forms, the statistics, the terms, the top k,
the docnos, closing it) and whole (search_text), best of `--repeat` per claim, then the
median, p90 and p99 over the 300 claims, in microseconds.

    python -m benchmarks.bm25_steps                 # top 10, best of 7
    python -m benchmarks.bm25_steps --k 1000 --repeat 3

Needs the SciFact database `python -m benchmarks.scifact` builds (work/scifact/annodb.db).
Prints only; run it alone (under the CPU lock on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from benchmarks.scifact import WORK, topics


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.bm25_steps --k 10")
    ap.add_argument("--k", type=int, default=10, help="the depth ranked (default 10)")
    ap.add_argument("--repeat", type=int, default=7, help="runs per claim, the best kept")
    args = ap.parse_args(argv)
    path = os.path.join(WORK, "annodb.db")
    if not os.path.exists(os.path.join(path, "built")):
        print(f"needs {path}: run python -m benchmarks.scifact first; nothing measured",
              file=sys.stderr)
        return 0
    import annodb
    from annodb import bm25, rankers, ranking, scoring
    from annodb.gcl import Evaluator, as_node
    db = annodb.open(path, readonly=True)
    claims = [text for _, text in topics()]
    ranker, k, documents = rankers.make("bm25"), args.k, as_node(":")[0]
    for text in claims:  # warm: the lists, the kernels, what is kept per state
        with db.read() as r:
            r.search_text(text, k=k, rank="bm25", snippets=False)
    steps: dict[str, list[int]] = {}
    for text in claims:
        best: dict[str, int] = {}
        for _ in range(args.repeat):
            t0 = time.perf_counter_ns()
            r = db.read()
            t1 = time.perf_counter_ns()
            terms, _, _ = ranking.text_terms(r, text)
            t2 = time.perf_counter_ns()
            stats = r.statistics(*ranker.statistics_needed(terms))
            t3 = time.perf_counter_ns()
            scored = ranker.terms(Evaluator(r), documents, terms, stats)
            t4 = time.perf_counter_ns()
            s, e, sc = bm25.top(scored, k)
            t5 = time.perf_counter_ns()
            scoring.Ranking(r, "", [], s, e, sc, s, s).hits(k, False)
            t6 = time.perf_counter_ns()
            r.close()
            t7 = time.perf_counter_ns()
            took = {"open the snapshot": t1 - t0, "words and forms": t2 - t1,
                    "statistics": t3 - t2, "terms": t4 - t3, "top k": t5 - t4,
                    "docnos": t6 - t5, "close": t7 - t6}
            t8 = time.perf_counter_ns()
            with db.read() as r2:
                r2.search_text(text, k=k, rank="bm25", snippets=False)
            took["whole"] = time.perf_counter_ns() - t8
            for name, ns in took.items():
                best[name] = min(best.get(name, ns), ns)
        for name, ns in best.items():
            steps.setdefault(name, []).append(ns)
    print(f"SciFact, {len(claims)} claims, BM25 top {k}, best of {args.repeat} (us)\n")
    print("| step | median | p90 | p99 |\n|---|---|---|---|")
    for name, ns in steps.items():
        us = np.array(ns) / 1000
        print(f"| {name} | " + " | ".join(f"{np.percentile(us, p):.1f}" for p in (50, 90, 99))
              + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
