"""Peak memory of a whole `annodb ingest` process tree, as the corpus grows.

Runs `annodb ingest` in a child process on each corpus given and samples, every 50 ms,
the resident memory of that process and all its descendants (annodb reads and tokenizes a
big input in a second process), summed: RSS (what the processes hold, including pages of
LMDB's file they touched), and private memory (RssAnon: what they allocated). Prints a
table with the peaks, the wall time, and the growth from the first corpus to each other.

    python -m benchmarks.ingest_memory benchmarks/work/corpus.jsonl benchmarks/work/corpus4x.jsonl

benchmarks/growth.py makes the 4x corpus (the scale corpus four times, docnos suffixed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.common.paths import REPO
from benchmarks.common.processes import peaks


def measure(corpus: str, workdir: str, extra: list[str] = ()) -> dict:
    """Ingest `corpus` into a new database under `workdir`; the tree's peak memory."""
    db = os.path.join(workdir, "ingest-memory.db")
    shutil.rmtree(db, ignore_errors=True)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                             "ingest", "--db", db, corpus, *extra], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": REPO})
    peak_rss, peak_anon, processes = peaks(proc)
    seconds = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"ingest_memory: annodb ingest failed ({proc.returncode}): {err[-2000:]}")
    size = sum(os.stat(os.path.join(db, f)).st_blocks * 512 for f in os.listdir(db))
    shutil.rmtree(db, ignore_errors=True)
    return {"corpus": os.path.basename(corpus), "bytes": os.path.getsize(corpus),
            "seconds": seconds, "rss": peak_rss, "anon": peak_anon, "processes": processes,
            "size": size}


def table(rows: list[dict]) -> str:
    first = rows[0]
    out = ["| corpus | input MB | ingest s | peak RSS of the tree MB | peak private MB | "
           "database MB | RSS / first corpus's |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['corpus']} | {r['bytes'] / 1e6:,.0f} | {r['seconds']:.1f} | "
                   f"{r['rss'] / 1e6:,.0f} | {r['anon'] / 1e6:,.0f} | {r['size'] / 1e6:,.0f} | "
                   f"{r['rss'] / first['rss']:.2f}x |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpora", nargs="+", help="JSONL corpora, smallest first")
    ap.add_argument("--workdir", help="where the databases are made (default: a temporary "
                    "directory)")
    args = ap.parse_args(argv)
    missing = [c for c in args.corpora if not os.path.exists(c)]
    if missing:
        print(f"ingest_memory: skipped: {', '.join(missing)} not found (see "
              "benchmarks/README.md to build the corpora)")
        return 0
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="annodb-ingest-memory-") as tmp:
        rows = []
        for corpus in args.corpora:
            rows.append(measure(corpus, tmp))
            print(f"  {rows[-1]['corpus']}: peak {rows[-1]['rss'] / 1e6:,.0f} MB", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
