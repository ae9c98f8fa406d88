"""The reliability tests against a sharded collection (annodb.shards, annodb.ingest.sharded).

- A parallel ingest (readers, router, a writer per shard) killed with SIGKILL at random
  instants, either its whole process tree or the router alone (its children then see their
  pipes close), making the collection or writing it: what it leaves passes check, holds
  each document at most once and whole batches only, and a rerun completes it, scoring every document as one database holding the same file.
- Reader processes check every snapshot of the collection while a writer process adds
  documents and annotates them, one shard per transaction, and an ingest runs beside it.
- The server's fuzz (random lines of every op, over 4 pipelining connections) against a
  sharded collection, its queries run one shard after another and then by worker
  processes (whose pipe the connections' threads share).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

import annodb
from annodb.check import check

from . import test_hostile_input
from .workload import SEED, doc_text, size

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")]

INGEST = ("import sys; from annodb.ingest.sharded import ingest; "
          "ingest(sys.argv[1], [sys.argv[2]], shards=2, batch_bytes=8192, readers=2)")
QUERIES = ["(^ alpha bravo)", "zend", '"river stone"', "(+ summit (^ delta echo))"]


def _ranks(db):
    """Each query's score of every document (a rerun adds what was missing after what was
    there, so ties need not fall as in an uninterrupted ingest; in one database neither)."""
    with db.read() as r:
        return [sorted((h.docno, h.score) for h in r.search(q, k=2000, snippets=False))
                for q in QUERIES]


def _wait_for_documents(path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with annodb.open(path, readonly=True) as db:
                if db.stats().documents:
                    return
        except annodb.StorageError:  # (not made yet)
            pass
        time.sleep(0.05)


def test_sharded_ingest_killed_at_random_points(tmp_path, figures):
    kills, first = size(1, 40), size(1, 0)  # (short: the router alone, once batches are in)
    rng = random.Random(SEED + 19)
    n_docs = 1500
    src = tmp_path / "in.tsv"
    src.write_text("".join(f"t{i}\t{doc_text(f'b1.{i}.1500')}\n" for i in range(n_docs)))
    one = annodb.open(tmp_path / "one.db")
    annodb.ingest.ingest(one, [src])
    expected = _ranks(one)
    one.close()
    outcomes = {}
    for kill in range(first, first + kills):
        path = tmp_path / f"c{kill}.shards"
        whole_tree = kill % 4 in (0, 3)
        proc = subprocess.Popen([sys.executable, "-c", INGEST, str(path), str(src)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        if kill % 2 == 0:       # early: maybe before anything is written
            time.sleep(rng.uniform(0.5, 4.0))
        else:                   # once the first batches are committed
            _wait_for_documents(path)
            time.sleep(rng.uniform(0.0, 1.5))
        if whole_tree:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60
        while True:  # the orphans of a killed router end when their pipes close
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, "a child of the killed ingest lives on"
            time.sleep(0.1)
        if not (path / "manifest.json").exists():   # (a rerun completes its making)
            key = ("while making the collection" if (path / "creating.json").exists()
                   else "before the collection existed")
        else:
            with annodb.open(path) as db:
                assert check(db) == []
                with db.read() as r:
                    docnos = [d.docno for d in r.documents()]
                assert len(docnos) == len(set(docnos)) <= n_docs
                n = len(docnos)
            key = "empty" if n == 0 else "some batches" if n < n_docs else "finished"
        done = subprocess.run([sys.executable, "-c", INGEST, str(path), str(src)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        with annodb.open(path) as db:
            assert check(db) == [] and db.stats().documents == n_docs
            assert _ranks(db) == expected
        key += ", whole tree" if whole_tree else ", router only"
        outcomes[key] = outcomes.get(key, 0) + 1
    figures.update(kills=kills, killed=outcomes)


READER = """
import sys, time, annodb
db = annodb.open(sys.argv[1], readonly=True)
end, snaps, bad = time.monotonic() + float(sys.argv[2]), 0, []
while time.monotonic() < end:
    with db.read() as r:
        docs = list(r.documents())
        n = r.document_count()
        if n != len([d for d in docs if d.container == ":"]) or r.count(":") != n:
            bad.append(f"counts {n} {len(docs)} {r.count(':')}")
        for d in docs[-3:]:
            if d.container == ":" and not r.text(d.start, d.end).endswith("zend"):
                bad.append(f"{d.docno} not whole")
        judged = r.query("(>> : judgment:x)")
        if len(judged) != r.count("judgment:x"):
            bad.append("a judgment outside its document")
        snaps += 1
print(snaps, len(bad), bad[:3])
"""

WRITER = """
import sys, annodb
db = annodb.open(sys.argv[1])
for i in range(int(sys.argv[2])):
    with db.write() as w:
        a = w.add(sys.argv[3].replace("N", str(i)), docno=f"w{i}")
        w.annotate("judgment:x", a.start, a.end, i % 4)
print("done")
"""


def test_readers_and_writers_on_a_sharded_collection(tmp_path, figures):
    seconds, writes = size(6, 60), size(60, 1500)
    path = tmp_path / "c.shards"
    src = tmp_path / "in.tsv"
    src.write_text("".join(f"t{i}\t{doc_text(f'b1.{i}.3000')}\n" for i in range(3000)))
    annodb.open(path, shards=3).close()
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(path), str(seconds)],
                                stdout=subprocess.PIPE, text=True) for _ in range(2)]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(writes),
                               "written by a writer N zend"], stdout=subprocess.PIPE, text=True)
    ingest = subprocess.Popen([sys.executable, "-c", INGEST.replace("shards=2", "shards=3"),
                               str(path), str(src)], stdout=subprocess.DEVNULL)
    results = [p.communicate(timeout=600)[0] for p in readers]
    assert writer.communicate(timeout=600)[0].strip() == "done" and writer.returncode == 0
    assert ingest.wait(timeout=600) == 0
    snapshots = 0
    for out in results:
        snaps, bad, examples = out.split(" ", 2)
        assert int(bad) == 0, examples
        snapshots += int(snaps)
    with annodb.open(path) as db:
        assert check(db) == []
        assert db.stats().documents == 3000 + writes
        with db.read() as r:
            assert r.count("judgment:x") == writes
    figures.update(snapshots=snapshots, writer_transactions=writes, ingested=3000)


@pytest.fixture(scope="module")
def sharded_small_db(tmp_path_factory):
    """test_hostile_input's small database as a collection of 3 shards."""
    path = tmp_path_factory.mktemp("hostile") / "small.shards"
    rng = random.Random(SEED)
    db = annodb.open(path, shards=3)
    for i in range(200):
        with db.write() as w:
            w.add({"docid": f"r{i}", "title": " ".join(rng.choices(test_hostile_input.VOCAB, k=5)),
                   "body": " ".join(rng.choices(test_hostile_input.VOCAB,
                                                k=rng.randint(0, 80))),
                   "year": rng.randint(1990, 2025), "score": rng.random()})
    with db.write() as w:
        w.add("", docno="empty")
    with db.write() as w:
        d = w.document("r7")
        w.annotate("judgment:t1", d.start, d.end, 2)
    with db.write() as w:
        w.erase(w.document("r9").start + 1, w.document("r9").start + 2)
    yield db
    db.close()


def test_server_fuzzed_with_random_lines_over_shards(sharded_small_db, tmp_path, figures):
    test_hostile_input.test_server_fuzzed_with_random_lines(sharded_small_db, tmp_path,
                                                            figures)
    assert check(sharded_small_db) == []


def test_server_fuzzed_over_shards_in_worker_processes(sharded_small_db, tmp_path, figures):
    """The same, the server's queries fanned out to a worker process per other shard: its
    connections' threads share each worker's pipe, with the first documents that come
    after rankings and the ones nobody reads dropped."""
    test_hostile_input.test_server_fuzzed_with_random_lines(sharded_small_db, tmp_path,
                                                            figures, fan_out="processes")
    assert check(sharded_small_db) == []
