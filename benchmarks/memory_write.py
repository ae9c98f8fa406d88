"""Memory writes: a single `Memory.remember` and `Memory.remember_many` of the LoCoMo turns,
beside SQLite FTS5 doing the same (an insert in a transaction of its own; all rows in one).

    python -m benchmarks.memory_write                 # print the tables
    python -m benchmarks.memory_write --record        # and write them to RESULTS.md

The turns are /work/shared/data/locomo/corpus.jsonl (5,882 turns of 10 conversations, each
remembered with its conversation, session and speaker as metadata); `--corpus` picks
another copy. Without it the script says so and stops.

Each engine writes into a fresh database in each place: `--dir` (default: a temporary
directory on the disk holding benchmarks/) and /dev/shm (tmpfs, when there is one), where
a commit's fdatasync costs nothing, so what is left is the engines' own work. For a
single write: p50 / p90 / p99 wall milliseconds over `--single` writes (default 500, the
first turns, after one write to warm up) and the CPU milliseconds per write (the process's
CPU time over them: work, not waiting for the disk). For the batch: the best of `--runs`
fresh databases, in seconds. FTS5 runs in WAL mode with synchronous=FULL (each commit
fsynced: durable as an annodb commit is) and with synchronous=NORMAL (WAL's usual setting:
a commit is not fsynced, so a power cut may lose the last ones; a crashed process loses
nothing). An annodb commit fdatasyncs twice (the pages, then the meta page).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time

import annodb
from benchmarks.common.paths import BENCHMARKS, shared
from benchmarks.common.results import machine, record

CORPUS = shared("data", "locomo", "corpus.jsonl")


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [{"text": r["text"], "conv": r["conv"], "session": r["session"],
             "speaker": r["speaker"]} for r in rows]


def percentiles(seconds: list[float]) -> tuple[float, float, float]:
    s = sorted(seconds)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000   # noqa: E731
    return pick(0.5), pick(0.9), pick(0.99)


def fdatasync_ms(where: str, n: int = 50) -> float:
    """The p50 of a 4 KB write and fdatasync in `where` (what a durable commit waits for)."""
    path = os.path.join(where, "probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    walls = []
    try:
        for i in range(n):
            os.pwrite(fd, b"x" * 4096, (i % 8) * 4096)
            start = time.perf_counter()
            os.fdatasync(fd)
            walls.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.remove(path)
    return percentiles(walls)[0]


def annodb_single(where: str, turns: list[dict], n: int) -> tuple:
    path = os.path.join(where, "annodb-single.db")
    with annodb.Memory(path) as mem:
        mem.remember("warm up", conv="none")
        walls = []
        cpu = time.process_time()
        for t in turns[:n]:
            start = time.perf_counter()
            mem.remember(t["text"], conv=t["conv"], session=t["session"], speaker=t["speaker"])
            walls.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
    shutil.rmtree(path)
    return percentiles(walls) + (cpu / n * 1000,)


def annodb_batch(where: str, turns: list[dict], runs: int) -> float:
    best = float("inf")
    for i in range(runs):
        path = os.path.join(where, f"annodb-batch{i}.db")
        with annodb.Memory(path) as mem:
            mem.remember("warm up", conv="none")
            start = time.perf_counter()
            made = mem.remember_many(turns)
            best = min(best, time.perf_counter() - start)
            assert len(made) == len(turns)
        shutil.rmtree(path)
    return best


def fts5(path: str, synchronous: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous}")
    con.execute("CREATE VIRTUAL TABLE IF NOT EXISTS m USING fts5(text, conv UNINDEXED, "
                "session UNINDEXED, speaker UNINDEXED, time UNINDEXED)")
    return con


INSERT = "INSERT INTO m (text, conv, session, speaker, time) VALUES (?, ?, ?, ?, ?)"


def fts5_single(where: str, turns: list[dict], n: int, synchronous: str) -> tuple:
    path = os.path.join(where, f"fts5-single-{synchronous}.db")
    con = fts5(path, synchronous)
    con.execute("BEGIN")
    con.execute(INSERT, ("warm up", "none", 0, "", time.time()))
    con.execute("COMMIT")
    walls = []
    cpu = time.process_time()
    for t in turns[:n]:
        start = time.perf_counter()
        con.execute("BEGIN")
        con.execute(INSERT, (t["text"], t["conv"], t["session"], t["speaker"], time.time()))
        con.execute("COMMIT")
        walls.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    con.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return percentiles(walls) + (cpu / n * 1000,)


def fts5_batch(where: str, turns: list[dict], runs: int, synchronous: str) -> float:
    best = float("inf")
    for i in range(runs):
        path = os.path.join(where, f"fts5-batch{i}.db")
        con = fts5(path, synchronous)
        start = time.perf_counter()
        con.execute("BEGIN")
        con.executemany(INSERT, [(t["text"], t["conv"], t["session"], t["speaker"],
                                  time.time()) for t in turns])
        con.execute("COMMIT")
        best = min(best, time.perf_counter() - start)
        con.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--dir", default=None, help="where the on-disk databases go")
    ap.add_argument("--single", type=int, default=500, help="single writes timed")
    ap.add_argument("--runs", type=int, default=3, help="batch runs (the best is kept)")
    ap.add_argument("--record", action="store_true", help="write the tables to RESULTS.md")
    args = ap.parse_args()
    if not os.path.exists(args.corpus):
        sys.exit(f"memory_write: {args.corpus} is absent (the LoCoMo turns; see "
                 "/work/shared/data/locomo/SOURCE.md): nothing measured")
    turns = load(args.corpus)
    places = [("disk", tempfile.mkdtemp(prefix="memory-write-", dir=args.dir or BENCHMARKS))]
    if os.path.isdir("/dev/shm"):
        places.append(("tmpfs", tempfile.mkdtemp(prefix="memory-write-", dir="/dev/shm")))
    single_rows, batch_rows, syncs = [], [], []
    try:
        for place, where in places:
            syncs.append(f"{place} {fdatasync_ms(where):.2f} ms")
            p50, p90, p99, cpu = annodb_single(where, turns, args.single)
            single_rows.append(f"| {place} | annodb `remember` | {p50:.2f} | {p90:.2f} | "
                               f"{p99:.2f} | {cpu:.2f} |")
            for sync in ("FULL", "NORMAL"):
                p50, p90, p99, cpu = fts5_single(where, turns, args.single, sync)
                single_rows.append(f"| {place} | FTS5 insert, synchronous={sync} | {p50:.2f} "
                                   f"| {p90:.2f} | {p99:.2f} | {cpu:.2f} |")
            batch_rows.append(f"| {place} | annodb `remember_many` | "
                              f"{annodb_batch(where, turns, args.runs):.3f} |")
            for sync in ("FULL", "NORMAL"):
                batch_rows.append(f"| {place} | FTS5, one transaction, synchronous={sync} | "
                                  f"{fts5_batch(where, turns, args.runs, sync):.3f} |")
    finally:
        for _, where in places:
            shutil.rmtree(where, ignore_errors=True)
    text = "\n".join([
        "## Memory writes (`python -m benchmarks.memory_write`)",
        "",
        f"{datetime.date.today().isoformat()}, {machine()}, SQLite "
        f"{sqlite3.sqlite_version}. The LoCoMo turns ({len(turns):,}), each with its "
        "conversation, session and speaker; disk: the VM's disk, tmpfs: /dev/shm. A 4 KB "
        f"write and fdatasync took (p50, just before): {', '.join(syncs)}.",
        "",
        f"A single write, its own transaction ({args.single} writes), milliseconds:",
        "",
        "| where | what | p50 | p90 | p99 | CPU per write |",
        "|---|---|---:|---:|---:|---:|",
        *single_rows,
        "",
        f"All {len(turns):,} turns in one transaction, seconds (best of {args.runs}):",
        "",
        "| where | what | seconds |",
        "|---|---|---:|",
        *batch_rows,
    ])
    print(text)
    if args.record:
        record("memory-write", text)


if __name__ == "__main__":
    main()
