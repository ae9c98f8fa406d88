"""A new process's first write loads nothing while it holds the writer lock: numba's kernels
(compiled, or loaded from its cache) and the modules they live in are loaded before the lock
is taken, so another writer never waits for them. Checked by order, not by time: numba
reports every kernel it loads (its "numba:compiler_lock" event), and each one must come
while this process holds no writer lock of the database written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import annodb

pytestmark = pytest.mark.reliability

CHILD = r"""
import json, os, sys, threading, traceback
from numba.core import event          # (numba itself; annodb has loaded no kernel yet)
import annodb
from annodb import judgments, storage
from annodb.storage import environment

path = os.path.realpath(sys.argv[1])
seen = {"loads": 0, "under_lock": [], "imported_under_lock": [], "writes": 0}
held = threading.local()

def holding() -> bool:
    if collection_locks:
        return True
    env = environment._open_envs.get(path)
    return env is not None and env.writer_thread is not None

from annodb.shards import collection as shards
collection_locks = []     # a sharded collection's writer lock, while held
take, drop = shards._FileLock.acquire, shards._FileLock.release

def took(self):
    got = take(self)
    if self.path.endswith("writer.lock") and os.path.dirname(self.path) == path:
        collection_locks.append(self)
        held.modules = set(sys.modules)
    return got

def dropped(self):
    if self in collection_locks:
        collection_locks.remove(self)
        seen["imported_under_lock"] += sorted(set(sys.modules) - held.modules)
        held.modules = None
        seen["writes"] += 1
    drop(self)

shards._FileLock.acquire, shards._FileLock.release = took, dropped

class Loads(event.Listener):
    def on_start(self, ev):
        seen["loads"] += 1
        if holding():   # the annodb function that asked for it
            frames = [f for f in traceback.extract_stack() if "annodb" in f.filename]
            seen["under_lock"].append(f"{frames[-1].filename}:{frames[-1].name}"
                                      if frames else "?")
    def on_end(self, ev):
        pass

event.register("numba:compiler_lock", Loads())

acquire, release = storage.WriterLock.acquire, storage.WriterLock.release

def acquired(self):
    acquire(self)
    if self.env.path == path:
        held.modules = set(sys.modules)

def released(self):
    if self.env.path == path and getattr(held, "modules", None) is not None \
            and not collection_locks:
        seen["imported_under_lock"] += sorted(set(sys.modules) - held.modules)
        held.modules = None
        seen["writes"] += 1
    release(self)

storage.WriterLock.acquire, storage.WriterLock.release = acquired, released

db = annodb.open(path)
sharded = hasattr(db, "shards")


def one_database(round):
    with db.write() as w:
        a = w.add(f"the first write of a fresh process, round {round}", docno=f"a{round}")
        w.add_many([({"docid": f"r{round}-{i}", "title": "a record",
                      "text": "words of a record " * (300 if i == 1 else 3),
                      "splade": {"gold": 1.5}}, None) for i in range(3)],
                   sparse_fields=["splade"])
        w.annotate("label:x", a.start, a.end, 1.0)
        judgments.judge(w, "t1", f"a{round}", 2, "a reason")
        judgments.record(w, judgments.Record("t1", calls=1, judgments=round + 1))
        judgments.judgments(w, "t1")
        w.note(f"a{round}", "a note")
        w.search("(^ first write)", k=3)
        w.search_text("record words", k=3, rank="bm25")
        w.search_text({"gold": 1.0}, k=3, rank="sparse")
        w.count('(>> : (^ "fresh process" write))')
        w.erase(a.start + 2, a.start + 2)
        if round:
            w.delete("r0-0")


def sharded_collection(round):   # (a transaction writes one shard: one document each)
    with db.write() as w:
        a = w.add(f"the first write of a fresh process, round {round}", docno=f"a{round}")
        w.annotate("label:x", a.start, a.end, 1.0)
        w.note(f"a{round}", "a note")
        w.search("(^ first write)", k=3)
        w.count('(>> : (^ "fresh process" write))')
    with db.write() as w:
        w.add_many([({"docid": f"r{round}", "title": "a record",
                      "text": "words of a record " * 300, "splade": {"gold": 1.5}}, None)],
                   sparse_fields=["splade"])
        w.search_text("record words", k=3, rank="bm25")
        w.search_text({"gold": 1.0}, k=3, rank="sparse")
    if round:
        with db.write() as w:
            w.delete("r0")


for round in range(2):
    (sharded_collection if sharded else one_database)(round)
print(json.dumps(seen))
"""


@pytest.mark.parametrize("shards", [None, 2], ids=["database", "2-shards"])
def test_a_fresh_process_loads_every_kernel_before_it_takes_the_writer_lock(tmp_path,
                                                                             figures, shards):
    """A fresh process (beside this one, which has written already) runs two write
    transactions of every kind: numba loads its kernels (many times: the event counts each
    one) but never while the process holds the database's writer lock (a sharded
    collection's: the collection's), and no module is imported while it does. (Before:
    every kernel the write used was loaded inside the lock, 2 s on an idle machine and
    5-6 s under load, while other writers waited.)"""
    path = tmp_path / "w.db"
    with annodb.open(path, shards=shards) as db:   # a warm writer: this process, which has written before
        with db.write() as w:
            w.add("written by the warm process", docno="warm")
        script = tmp_path / "child.py"
        script.write_text(textwrap.dedent(CHILD))
        done = subprocess.run([sys.executable, str(script), str(path)], capture_output=True,
                              text=True, timeout=300, env={**os.environ})
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.splitlines()[-1])
        assert seen["writes"] == (2 if shards is None else 5)
        assert seen["loads"] > 0               # the hook sees numba load kernels
        assert seen["under_lock"] == []
        assert seen["imported_under_lock"] == []
        with db.write() as w:               # and the warm process writes after it
            w.add("after the fresh one", docno="after")
        with db.read() as r:
            assert r.has("a1") and r.has("warm") and r.has("after")
    figures.update(kernel_loads=seen["loads"], loads_under_the_lock=len(seen["under_lock"]))


def test_a_killed_rehearsals_directory_is_removed_by_the_next(tmp_path):
    """The kernels are loaded by rehearsing on a scratch database in the temporary
    directory. A process killed meanwhile leaves that directory behind: the next process's
    first write removes it (its process is gone), keeps a live process's, and leaves none
    of its own."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp / f"annodb-rehearsal-{dead.pid}-x1"
    (stale / "db").mkdir(parents=True)
    (stale / "db" / "data.mdb").write_bytes(bytes(16384))
    live = tmp / f"annodb-rehearsal-{os.getpid()}-x2"   # this process is alive
    live.mkdir()
    code = "import annodb, sys\nwith annodb.open(sys.argv[1]) as db, db.write() as w:\n" \
           "    w.add('a first write', docno='d')\n"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "d.db")], check=True,
                   timeout=300, env={**os.environ, "TMPDIR": str(tmp)})
    assert sorted(p.name for p in tmp.iterdir()) == [live.name]
