"""Wall time and peak memory of `annodb split`, as the database grows.

Splits each database given into a new collection of `--shards` shards, in a child process,
and samples every 50 ms the memory of that process and all its descendants (the splitting
processes), summed (common/processes.py, as benchmarks/ingest_memory.py does for ingest);
also the CPU time of the tree over the wall time. Prints a table with the growth from the first database to
each other.

    python -m benchmarks.split_memory benchmarks/work/shards/1x-1.db benchmarks/work/shards/4x-1.db
    python -m benchmarks.split_memory DB ... --code /path/to/other/checkout   # its annodb

The databases come from `annodb ingest` of benchmarks/work/corpus.jsonl and corpus4x.jsonl
(benchmarks/growth.py makes the 4x corpus).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.common.paths import REPO, WORK
from benchmarks.common.processes import peaks

SPLIT = ("import sys; from annodb.shards.split import split; "
         "split(sys.argv[1], sys.argv[2], int(sys.argv[3]))")


def measure(db: str, workdir: str, shards: int, code: str) -> dict:
    dest = os.path.join(workdir, "split-memory.shards")
    shutil.rmtree(dest, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", SPLIT, db, dest, str(shards)], cwd=code,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": code})
    peak_rss, peak_anon, processes = peaks(proc)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"split_memory: the split failed ({proc.returncode}): {err[-2000:]}")
    shutil.rmtree(dest, ignore_errors=True)
    return {"db": db, "seconds": seconds, "cpu": cpu, "rss": peak_rss, "anon": peak_anon,
            "processes": processes}


def table(rows: list[dict]) -> str:
    first = rows[0]
    out = ["| database | split s | CPU / wall | processes | peak RSS of the tree MB | "
           "peak private MB | RSS / first's |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {os.path.basename(r['db'])} | {r['seconds']:.1f} | "
                   f"{r['cpu'] / r['seconds']:.2f} | {r['processes']} | {r['rss'] / 1e6:,.0f} | "
                   f"{r['anon'] / 1e6:,.0f} | {r['rss'] / first['rss']:.2f}x |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--code", default=REPO, help="the checkout whose annodb splits")
    ap.add_argument("--work", default=None, help="where the collection is written")
    args = ap.parse_args(argv)
    missing = [d for d in args.dbs if not os.path.isdir(d)]
    if missing:
        print(f"split_memory: no database at {', '.join(missing)} (make them with annodb "
              "ingest; see the docstring)", file=sys.stderr)
        return 2
    work = args.work or tempfile.mkdtemp(prefix="split-memory-", dir=WORK
                                         if os.path.isdir(WORK) else None)
    rows = []
    try:
        for db in args.dbs:
            rows.append(measure(os.path.abspath(db), work, args.shards,
                                os.path.abspath(args.code)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)  # (the temporary directory made above)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
