"""Peak memory of a whole `annodb ingest` process tree, as the corpus grows.

Runs `annodb ingest` in a child process on each corpus given and samples, every 50 ms,
the resident memory of that process and all its descendants (annodb reads and tokenizes a
big input in a second process), summed: RSS (what the processes hold, including pages of
LMDB's file they touched), and private memory (RssAnon: what they allocated). Prints a
table with the peaks, the wall time, and the growth from the first corpus to each other.

    python benchmarks/ingest_memory.py benchmarks/work/corpus.jsonl benchmarks/work/corpus4x.jsonl

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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, RssAnon) of one process, in bytes (0, 0 when it is gone)."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, anon


def peaks(proc: subprocess.Popen) -> tuple[int, int, int]:
    """Until `proc` ends, every 50 ms, the memory of it and its descendants summed: the
    peaks of RSS and of private memory (bytes), and the most processes seen."""
    peak_rss = peak_anon = 0
    processes = 1
    while proc.poll() is None:
        tree = _tree(proc.pid)
        processes = max(processes, len(tree))
        sizes = [_memory(p) for p in tree]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_anon = max(peak_anon, sum(a for _, a in sizes))
        time.sleep(0.05)
    return peak_rss, peak_anon, processes


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
