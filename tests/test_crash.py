"""A writer killed with SIGKILL in the middle of `annodb ingest` leaves the last committed
state: the database opens, passes check, and holds exactly the first N batches of the input.
Re-running the same ingest then completes it (resumable by docno)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import annodb
from annodb.check import check

SEED = 20_240_917
KILLS = 5
BATCH = 200
COPIES = 80     # 80 copies of the 398-verse example: 31,840 records (kills must land mid-ingest)
EXAMPLE = Path(__file__).parent.parent / "examples" / "bible-sample.jsonl"

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def annodb_command() -> list[str]:
    script = Path(sys.executable).parent / "annodb"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[str]]:
    lines = EXAMPLE.read_text().splitlines()
    path = tmp_path_factory.mktemp("crash") / "input.jsonl"
    docnos = []
    with open(path, "w") as out:
        for copy in range(COPIES):
            for line in lines:
                record = json.loads(line)
                record["docid"] = f"{record['docid']}#{copy}"
                docnos.append(record["docid"])
                out.write(json.dumps(record) + "\n")
    return path, docnos


def ingest_process(db: Path, corpus: Path) -> subprocess.Popen:
    return subprocess.Popen(annodb_command() + ["ingest", "--db", str(db), "--quiet",
                                                "--batch-size", str(BATCH), str(corpus)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def started(db: Path) -> bool:
    """Has the ingest committed its first batch? (How long it takes to get there -- start-up,
    loading the kernels -- must not decide whether the kills land mid-ingest.)"""
    if not (db / "data.mdb").exists():
        return False
    try:
        with annodb.open(db, readonly=True) as database:
            return database.stats().documents > 0
    except annodb.AnnodbError:                        # still being created
        return False


def committed(db: Path) -> list[str]:
    """The docnos in the database, in address order, after checking every invariant."""
    with annodb.open(db) as database:
        assert check(database) == []
        with database.read() as r:
            return [d.docno for d in r.documents()]


def test_sigkill_mid_ingest_leaves_whole_batches(corpus, tmp_path):
    path, docnos = corpus
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    partial = []
    for kill in range(KILLS):
        db = tmp_path / f"kill{kill}.db"
        proc = ingest_process(db, path)
        try:
            deadline = time.monotonic() + 60
            while not started(db):                    # the writer has committed a batch
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(rng.uniform(0.05, 1.2))
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
            proc.stderr.close()
        found = committed(db)
        n = len(found)
        print(f"kill {kill}: {n} documents committed")
        assert found == docnos[:n]                      # a prefix of the input ...
        assert n % BATCH == 0 or n == len(docnos)       # ... made of whole batches
        if 0 < n < len(docnos):
            partial.append(db)
    assert len(partial) >= 2, "the kills should land mid-ingest; adjust the delays"

    # resuming: the same command finishes the job, skipping what is there
    db = partial[0]
    before = len(committed(db))
    done = subprocess.run(annodb_command() + ["ingest", "--db", str(db), "--json",
                                              "--batch-size", str(BATCH), str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["present"], summary["added"]) == (before, len(docnos) - before)
    assert committed(db) == docnos
    with annodb.open(db, readonly=True) as database:
        assert database.stats().documents == len(docnos)
