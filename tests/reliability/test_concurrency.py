"""Concurrency: 4 reader processes query continuously through three phases: (1) a writer
process committing batches and an annotator process annotating (two writers taking turns)
in windows of `window` seconds alternating with windows where both pause, so reader
latency during writes is compared with idle at the same database size; (2) a third
process holding a write transaction open (uncommitted documents, writer lock held) for the
whole phase; (3) idle again (the same size as (2)).

Every snapshot of every reader is checked (workload.reader): within one snapshot the
document count, the `:` list's length and count(":") agree and do not change; each
document looked at (two search hits and one at a random address) is wholly there: its `:`
interval, its docno lookup, its text, its unique word's one posting at its second address,
and its whole batch (count of the batch's word = the batch's size); nothing of the held
transaction is visible; across one reader's successive snapshots the document and
annotation counts never go backwards (this workload only adds). Reader latency (snapshot
open to close: counts, a ranked search, three documents, their checks) is reported per
phase; "never blocked" is asserted where a writer holds the lock for the whole phase.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest

import annodb
from annodb.check import check

from . import workload
from .workload import SEED, doc_text, size

pytestmark = pytest.mark.reliability

SCRIPT = os.path.join(workload.HERE, "workload.py")
READERS = 4


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SCRIPT, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_ready(procs) -> None:
    for proc in procs:
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            for p in procs:
                p.kill()
                p.wait()
            raise AssertionError(proc.stderr.read().decode()[-2000:])


def join(procs, timeout: float = 120.0) -> None:
    for proc in procs:
        if proc.stdout.closed:
            continue
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err = proc.stderr.read().decode()
            proc.stdout.close()
            proc.stderr.close()
        assert proc.returncode == 0, err[-3000:]


def touch(path: str) -> None:
    open(path, "w").close()


def load(path):
    with open(path) as f:
        return json.load(f)


def summary(latencies: list[float]) -> dict:
    if not latencies:
        return {"ops": 0}
    ms = sorted(x * 1000 for x in latencies)
    return {"ops": len(ms), "median_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
            "max_ms": round(ms[-1], 2)}


def test_readers_writers_and_a_held_write_transaction(tmp_path, figures):
    writing, window, holding, idle_again = size((2.0, 0.5, 1.0, 0.5), (120.0, 2.0, 20.0, 20.0))
    path = tmp_path / "db"
    with annodb.open(path) as db, db.write() as w:
        w.add_many([(doc_text(f"b0.{i}.300"), f"b0.{i}.300") for i in range(300)])
    cue = {name: str(tmp_path / name) for name in
           ("stop-read", "go-write", "stop-write", "go-hold", "holding", "stop-hold")}
    pause = cue["go-write"] + ".pause"
    outs = [str(tmp_path / f"reader{i}.json") for i in range(READERS)]
    readers = [start("reader", path, out, cue["stop-read"], SEED + i)
               for i, out in enumerate(outs)]
    # every process starts now (importing on a loaded machine is slow) and waits its cue
    writers = [start("batch-writer", path, tmp_path / "writer.json", cue["go-write"],
                     cue["stop-write"], SEED),
               start("annotator", path, tmp_path / "annotator.json", cue["go-write"],
                     cue["stop-write"], SEED)]
    hold = start("holder", path, cue["go-hold"], cue["holding"], cue["stop-hold"])
    windows = []        # (kind, start, end)
    try:
        wait_ready(readers + writers + [hold])
        touch(cue["go-write"])
        end = time.monotonic() + writing
        writes = True
        while time.monotonic() < end:
            if writes and os.path.exists(pause):
                os.unlink(pause)
            elif not writes:
                touch(pause)
            t = time.monotonic()
            time.sleep(window)
            windows.append(("during writes" if writes else "idle (between write windows)",
                            t, time.monotonic()))
            writes = not writes
        touch(cue["stop-write"])
        join(writers)

        touch(cue["go-hold"])
        deadline = time.monotonic() + 60
        while not os.path.exists(cue["holding"]):
            assert hold.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        t = time.monotonic()
        time.sleep(holding)
        windows.append(("held write transaction", t, time.monotonic()))
        touch(cue["stop-hold"])
        join([hold])

        t = time.monotonic()
        time.sleep(idle_again)
        windows.append(("idle after", t, time.monotonic()))
    finally:
        for name in ("stop-read", "go-write", "stop-write", "go-hold", "stop-hold"):
            touch(cue[name])
        join(readers + writers + [hold])

    results = [load(out) for out in outs]
    writer, annotator = load(tmp_path / "writer.json"), load(tmp_path / "annotator.json")
    errors = [e for r in results for e in r["errors"]]
    problems = [p for r in results for p in r["problems"]]
    lats = {}
    for name, lo, hi in windows:    # an op counts when it ran wholly inside a window,
        lo += 0.05                  # past its first 50 ms (a commit may end late)
        lats.setdefault(name, []).extend(
            lat for r in results for end, lat in r["latencies"] if lo <= end - lat and end <= hi)
    by_phase = {name: summary(found) for name, found in lats.items()}
    commit = sorted(writer["commit_seconds"])
    figures.update(
        readers=READERS, snapshots=sum(r["snapshots"] for r in results),
        documents_checked=sum(r["docs_checked"] for r in results),
        batches_committed=writer["commits"], documents_written=writer["docs"],
        annotation_commits=annotator["commits"],
        writer_commit_median_ms=round(statistics.median(commit) * 1000, 1) if commit else None,
        reader_latency=by_phase, errors=len(errors), inconsistencies=len(problems))
    assert not errors, errors[:3]
    assert not problems, problems[:10]
    assert writer["commits"] > 0 and annotator["commits"] > 0
    for name, found in by_phase.items():
        assert found["ops"] >= READERS, (name, found)
    # never blocked: with the writer lock held for the whole phase, no read waited on it
    assert by_phase["held write transaction"]["max_ms"] < holding * 1000 / 2, by_phase
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            assert r.document_count() == 300 + writer["docs"]
            assert r.count("holdmarker") == 0


def test_three_ingests_of_the_same_files_at_once(tmp_path, figures):
    """Three `annodb ingest` processes given the same two files (in different orders) at
    the same time: they take turns at the writer lock, and by docno idempotence every
    document ends up stored exactly once."""
    n = size(1500, 30000)
    files = []
    for k in range(2):
        src = tmp_path / f"in{k}.jsonl"
        with open(src, "w") as f:
            for i in range(k * n // 2, (k + 1) * n // 2):
                docno = f"b{i}.0.1"
                f.write(json.dumps({"docid": docno, "text": doc_text(docno)}) + "\n")
        files.append(str(src))
    path = str(tmp_path / "db")
    command = [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()", "ingest",
               "--db", path, "--json", "--batch-size", "10"]
    started = time.perf_counter()
    procs = [subprocess.Popen(command + (files if k % 2 == 0 else files[::-1]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()
    summaries = [json.loads(out) for out, _ in outs]
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            docnos = [d.docno for d in r.documents()]
            assert sorted(docnos) == sorted(f"b{i}.0.1" for i in range(n))
            assert r.count(":") == n
    figures.update(documents=n, processes=3, added=[s["added"] for s in summaries],
                   present=[s["present"] for s in summaries],
                   seconds=round(time.perf_counter() - started, 1))
    assert sum(s["added"] for s in summaries) == n
