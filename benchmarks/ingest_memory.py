"""Peak memory of a whole `annodb ingest` process tree, as the corpus grows.

Runs `annodb ingest` in a child process on each corpus given and samples, every 50 ms,
the resident memory of that process and all its descendants (annodb reads and tokenizes a
big input in a second process), summed: RSS (what the processes hold, including pages of
LMDB's file they touched), and private memory (RssAnon: what they allocated). Prints a
table with the peaks, the wall time, the CPU time of the whole tree (user + system, from
the rusage of the reaped children) and the growth from the first corpus to each other.
`--fts5` ingests each corpus into SQLite FTS5 the same way (benchmarks.common.engines,
a child process of its own) right after annodb, for the ratios.

    python -m benchmarks.ingest_memory benchmarks/work/corpus.jsonl benchmarks/work/corpus4x.jsonl
    python -m benchmarks.ingest_memory --fts5 benchmarks/work/corpus.jsonl

benchmarks/growth.py makes the 4x corpus (the scale corpus four times, docnos suffixed).
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

from benchmarks.common.paths import REPO
from benchmarks.common.processes import peaks


def _children_cpu() -> float:
    """User + system seconds of this process's reaped children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(corpus: str, workdir: str, extra: list[str] = (), engine: str = "annodb"
            ) -> dict:
    """Ingest `corpus` into a new database under `workdir` (annodb, or SQLite FTS5 with
    engine "fts5"); the tree's peak memory and CPU time."""
    db = os.path.join(workdir, "ingest-memory.db")
    shutil.rmtree(db, ignore_errors=True)
    if engine == "fts5":
        code = ("import sys; from benchmarks.common.engines import Fts5; e = Fts5(sys.argv[1]); "
                "e.ingest(sys.argv[2]); e.con.close()")
        os.makedirs(db)
        argv = [sys.executable, "-c", code, db, corpus]
    else:
        argv = [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                "ingest", "--db", db, corpus, *extra]
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": REPO})
    peak_rss, peak_anon, processes = peaks(proc)
    seconds = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"ingest_memory: annodb ingest failed ({proc.returncode}): {err[-2000:]}")
    size = sum(os.stat(os.path.join(db, f)).st_blocks * 512 for f in os.listdir(db))
    shutil.rmtree(db, ignore_errors=True)
    return {"corpus": os.path.basename(corpus), "bytes": os.path.getsize(corpus),
            "seconds": seconds, "rss": peak_rss, "anon": peak_anon, "processes": processes,
            "size": size, "cpu": cpu, "engine": engine}


def table(rows: list[dict]) -> str:
    firsts: dict = {}
    out = ["| engine | corpus | input MB | ingest s | CPU s of the tree | peak RSS of the tree MB "
           "| peak private MB | database MB | RSS / first corpus's |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        first = firsts.setdefault(r["engine"], r)
        out.append(f"| {r['engine']} | {r['corpus']} | {r['bytes'] / 1e6:,.0f} | "
                   f"{r['seconds']:.1f} | {r['cpu']:.1f} | {r['rss'] / 1e6:,.0f} | "
                   f"{r['anon'] / 1e6:,.0f} | {r['size'] / 1e6:,.0f} | "
                   f"{r['rss'] / first['rss']:.2f}x |")
    ours = {r["corpus"]: r for r in rows if r["engine"] == "annodb"}
    for r in rows:
        a = ours.get(r["corpus"])
        if r["engine"] != "annodb" and a is not None:
            out.append(f"| annodb / {r['engine']} | {r['corpus']} | | "
                       f"{a['seconds'] / r['seconds']:.2f}x | {a['cpu'] / r['cpu']:.2f}x | "
                       f"{a['rss'] / r['rss']:.2f}x | {a['anon'] / r['anon']:.2f}x | "
                       f"{a['size'] / r['size']:.2f}x | |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpora", nargs="+", help="JSONL corpora, smallest first")
    ap.add_argument("--workdir", help="where the databases are made (default: a temporary "
                    "directory)")
    ap.add_argument("--fts5", action="store_true",
                    help="also ingest each corpus into SQLite FTS5 (after annodb), for the ratios")
    args = ap.parse_args(argv)
    missing = [c for c in args.corpora if not os.path.exists(c)]
    if missing:
        print(f"ingest_memory: skipped: {', '.join(missing)} not found (see "
              "benchmarks/README.md to build the corpora)")
        return 0
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="annodb-ingest-memory-") as tmp:
        rows = []
        for corpus in args.corpora:
            for engine in ("annodb", "fts5") if args.fts5 else ("annodb",):
                rows.append(measure(corpus, tmp, engine=engine))
                r = rows[-1]
                print(f"  {engine} {r['corpus']}: {r['seconds']:.1f} s, CPU {r['cpu']:.1f} s, "
                      f"peak {r['rss'] / 1e6:,.0f} MB", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
