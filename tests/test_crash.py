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
COPIES = 30     # 30 copies of the 398-verse example: 11,940 records, 60 batches (killed by 10)
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


def committed(db: Path) -> list[str]:
    """The docnos in the database, in address order, after checking every invariant."""
    with annodb.open(db) as database:
        assert check(database) == []
        with database.read() as r:
            return [d.docno for d in r.documents()]


def wait_for_documents(db: Path, n: int, proc: subprocess.Popen) -> None:
    """Until a reader of `db` sees at least n documents committed by the running `proc`
    (a reader never blocks the writer); at most 120 s."""
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        if (db / "data.mdb").exists():
            try:
                with annodb.open(db, readonly=True) as database, database.read() as r:
                    if r.document_count() >= n:
                        return
            except annodb.AnnodbError:    # still being created
                pass
        time.sleep(0.01)


def killed_once_past(proc, db, documents: int, rng) -> list:
    """SIGKILL the ingest `proc` at a random instant soon after a reader sees `documents`
    committed in `db`; the docnos it left committed."""
    try:
        wait_for_documents(db, documents, proc)
        time.sleep(rng.uniform(0, 0.05))
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        proc.stderr.close()
    return committed(db)


def test_sigkill_mid_ingest_leaves_whole_batches(corpus, tmp_path):
    path, docnos = corpus
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    partial = []
    for kill in range(KILLS):
        db = tmp_path / f"kill{kill}.db"
        # killed by progress, not after a fixed delay (which lands before the first batch
        # on a loaded machine and after the last on a fast one): once a reader sees 1-10
        # batches committed, at a random instant soon after
        found = killed_once_past(ingest_process(db, path), db, rng.randint(1, 10) * BATCH,
                                 rng)
        n = len(found)
        print(f"kill {kill}: {n} documents committed")
        assert found == docnos[:n]                      # a prefix of the input ...
        assert n % BATCH == 0 or n == len(docnos)       # ... made of whole batches
        if 0 < n < len(docnos):
            partial.append(db)
    assert len(partial) >= 2, "the kills should land mid-ingest"

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


GROUPED = 3   # batches a transaction in the test below
PER_BATCH = 40


def test_sigkill_mid_ingest_leaves_whole_transactions_of_batches(corpus, tmp_path):
    """An ingest committing several batches a transaction (commit_batches, the default
    without --batch-size), killed with SIGKILL mid-way, leaves a prefix of the input made of
    whole transactions, each of whole batches; running it again completes it."""
    path, docnos = corpus
    width = max(len(line) for line in path.read_bytes().splitlines()) + 1
    fixed = tmp_path / "fixed.jsonl"   # every line as long: a batch is PER_BATCH records
    fixed.write_bytes(b"".join(line.ljust(width - 1) + b"\n"
                               for line in path.read_bytes().splitlines()))
    code = ("import sys; from annodb.ingest import ingest; "
            f"s = ingest(sys.argv[1], [sys.argv[2]], batch_bytes={PER_BATCH * width}, "
            f"commit_batches={GROUPED}); print(s.present, s.added)")
    whole = PER_BATCH * GROUPED
    rng = random.Random(SEED)
    partial = []
    for kill in range(3):
        db = tmp_path / f"kill{kill}.db"
        proc = subprocess.Popen([sys.executable, "-c", code, str(db), str(fixed)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        found = killed_once_past(proc, db, rng.randint(1, 20) * whole, rng)
        n = len(found)
        print(f"kill {kill}: {n} documents committed")
        assert found == docnos[:n]
        assert n % whole == 0 or n == len(docnos)
        if 0 < n < len(docnos):
            partial.append(db)
    assert partial, "the kills should land mid-ingest"
    db = partial[0]
    before = len(committed(db))
    done = subprocess.run([sys.executable, "-c", code, str(db), str(fixed)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(before), str(len(docnos) - before)]
    assert committed(db) == docnos
