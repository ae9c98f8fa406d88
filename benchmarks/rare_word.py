"""A rare word over many tiny documents: the cost of a query must follow its postings, not
the collection (issue 13's reproduction: 0.65 ms over 0.5M documents, 34.4 ms over 5M).

Builds databases of N tiny documents (three common words each; ten of them, evenly spread,
also hold the word `needle`: the answer is the same size at every N), then times `rank` of `needle` (SSR to depth 1000, the first 10
hits with docnos and snippets, in a fresh snapshot each time, as the server does) and of
`(^ needle w1)`. Prints the median of 200 runs per size and the ratio to the smallest.

    python -m benchmarks.rare_word                 # 0.5M and 5M documents
    python -m benchmarks.rare_word --sizes 500000,5000000,20000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import annodb
from annodb import ranking
from benchmarks.common.paths import WORK

QUERIES = ("needle", "(^ needle w1)")
NEEDLES = 10  # documents holding `needle`, at every size


def build(path: str, n: int) -> float:
    started = time.perf_counter()
    with annodb.open(path) as db:
        step, every = 200_000, n // NEEDLES
        for lo in range(0, n, step):
            with db.write() as w:
                w.add_many([(f"w{i % 7} w{i % 11} w{i % 13}" + (" needle" if i % every == 7
                                                                 else ""), f"d{i}")
                            for i in range(lo, min(lo + step, n))])
    return time.perf_counter() - started


def timed(path: str, query: str, runs: int = 200) -> float:
    with annodb.open(path, readonly=True) as db:
        def once():
            with db.read() as r:
                return [h.docno for h in ranking.rank(r, query, depth=1000).hits(10)]
        for _ in range(20):
            once()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            once()
            times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="500000,5000000")
    ap.add_argument("--workdir", default=WORK)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    os.makedirs(args.workdir, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="rare-word-") as tmp:
        for n in sizes:
            path = os.path.join(tmp, f"{n}.db")
            seconds = build(path, n)
            rows.append((n, seconds, [timed(path, q) for q in QUERIES]))
            shutil.rmtree(path)
            print(f"  {n:,} documents: built in {seconds:.0f} s", flush=True)
    lines = ["| documents | " + " | ".join(f"`{q}` median ms" for q in QUERIES) +
             " | " + " | ".join(f"`{q}` / smallest" for q in QUERIES) + " |",
             "|---:|" + "---:|" * (2 * len(QUERIES))]
    for n, _, ms in rows:
        lines.append(f"| {n:,} | " + " | ".join(f"{m:.3f}" for m in ms) + " | " +
                     " | ".join(f"{m / b:.2f}x" for m, b in zip(ms, rows[0][2])) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
