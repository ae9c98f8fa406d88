"""What building a list's block directory costs (postings.block_firsts, a walk over every
key of a word's blocks): per word, its first walk in a fresh process and a second one,
with the page faults of each; and with --replay, the share of the real queries' first
pass (after 300 of them as a warm-up, as benchmarks.growth replays) spent in it, under
cProfile.

    python -m benchmarks.directory_walk benchmarks/work/growth-16x/annodb.db the for what
    python -m benchmarks.directory_walk --replay benchmarks/work/growth-16x/annodb.db

Measured in benchmarks/RESULTS.md, "Growth to 16x": each step of the cursor touches the
block's overflow page, so the walk reads the whole list (one page fault a block or so).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import resource
import sys
import time

import annodb


def walk(db_path: str, words: list[str]) -> None:
    db = annodb.open(db_path, readonly=True)
    with db.read() as r:
        txn = r._txn
        for word in words:
            fid = txn.feature_id(word)
            if fid is None:
                print(f"{word}: not in the database")
                continue
            for k in (1, 2):
                before = resource.getrusage(resource.RUSAGE_SELF)
                t = time.perf_counter()
                firsts = txn.block_firsts(fid)
                dt = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_SELF)
                print(f"{word}: {r.list_count(word):,} postings, {len(firsts):,} blocks, "
                      f"walk {k}: {dt * 1000:.2f} ms ({dt / max(len(firsts), 1) * 1e6:.2f} us "
                      f"a block), page faults major {after.ru_majflt - before.ru_majflt:,} "
                      f"minor {after.ru_minflt - before.ru_minflt:,}")


def replay(db_path: str) -> None:
    import os

    from benchmarks.common import engines
    from benchmarks.common.queries import load_queries
    queries = load_queries()
    eng = engines.Annodb(os.path.dirname(os.path.abspath(db_path)))
    eng.path = db_path
    eng.open()
    for q in queries[:300]:
        eng.query(q)
    gc.freeze()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    for q in queries:
        eng.query(q)
    prof.disable()
    total = time.perf_counter() - t
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    found = [v for k, v in stats.items() if k[2] == "block_firsts"]
    calls, cum = sum(v[1] for v in found), sum(v[3] for v in found)
    print(f"{db_path}: the first pass {total:.2f} s under cProfile, block_firsts {calls:,} "
          f"calls, {cum:.2f} s ({cum / total:.0%})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db")
    ap.add_argument("words", nargs="*", help="words whose directory to walk")
    ap.add_argument("--replay", action="store_true",
                    help="the share of the real queries' first pass in the walks")
    args = ap.parse_args(argv)
    if args.replay:
        replay(args.db)
    if args.words:
        walk(args.db, args.words)
    return 0


if __name__ == "__main__":
    sys.exit(main())
