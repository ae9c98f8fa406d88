"""Erasure in annodb.Memory on real LMDB files and real processes: forget by docnos or by
filter in one transaction (a process killed inside it leaves all or nothing), and
`annodb compact` then keeps no byte of what was forgotten."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import annodb
from annodb.check import check
from annodb.errors import AnnodbError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANNODB = [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()"]


def test_forget_by_docnos_and_by_filter(tmp_path):
    with annodb.Memory(tmp_path / "m.db") as mem:
        a = [mem.remember(f"alice fact {i}", user="alice") for i in range(3)]
        b = [mem.remember(f"bob fact {i}", user="bob", level=i) for i in range(3)]
        old = mem.remember("alice's old city", user="alice", key="alice/city")
        mem.remember("alice's new city", user="alice", key="alice/city")
        assert mem.forget([a[0], "nope", a[0]]) == [a[0]]
        assert mem.forget(a[1]) is True and mem.forget(a[1]) is False
        assert mem.forget(where={"user": "bob", "level": (">=", 1)}) == b[1:]
        gone = mem.forget(where={"user": "alice"})     # superseded ones too
        assert len(gone) == 3 and old in gone
        assert [e.docno for e in mem.history(10, include_superseded=True)] == [b[0]]
        with pytest.raises(AnnodbError, match="everything"):
            mem.forget(where={})
        with pytest.raises(AnnodbError, match="forget what"):
            mem.forget()


KILLED = textwrap.dedent("""
    import sys, time
    import annodb
    from annodb.transaction import Writer
    path = sys.argv[1]
    deleted = 0
    delete = Writer.delete

    def pausing(self, docno):           # the test's hook: stop inside the transaction
        global deleted
        found = delete(self, docno)
        deleted += 1
        if deleted == 3:
            print("inside", flush=True)
            time.sleep(60)
        return found

    Writer.delete = pausing
    with annodb.Memory(path) as mem:
        mem.forget(where={"user": "alice"})
""")



def kill_inside(script: str, path: str) -> None:
    """Run `script` (which prints "inside" once it is inside the transaction under test,
    then waits) on the memory at `path` in a child process, and SIGKILL it there."""
    child = subprocess.Popen([sys.executable, "-c", script, path], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline() == "inside\n", child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL


def test_a_process_killed_inside_forget_leaves_everything(tmp_path):
    path = str(tmp_path / "m.db")
    with annodb.Memory(path) as mem:
        alice = [mem.remember(f"alice remembers {i}", user="alice") for i in range(6)]
        bob = mem.remember("bob remembers", user="bob")
    kill_inside(KILLED, path)
    with annodb.Memory(path) as mem:        # three deletes were made, none committed
        assert sorted(e.docno for e in mem.history(10)) == sorted(alice + [bob])
        assert len(mem.recall("remembers", k=10)) == 7
        assert sorted(mem.forget(where={"user": "alice"})) == sorted(alice)
        assert [e.docno for e in mem.history(10)] == [bob]
    with annodb.open(path) as db:
        assert check(db) == []


SECRETS = [b"peanuts", b"zanzibar", b"allergic", b"alice", b"user:alice",
           b":allergy_level:", b"key:alice/home"]


def test_compact_keeps_no_byte_of_what_was_forgotten(tmp_path):
    path = str(tmp_path / "m.db")
    with annodb.Memory(path) as mem:
        for i in range(40):
            mem.remember(f"Bob note {i}: coffee with the team, then the weather", user="bob")
        mem.remember("Alice is allergic to peanuts", user="alice", allergy_level=3)
        mem.remember("Alice moved to Zanzibar last spring", user="alice", key="alice/home")
        for i in range(40):
            mem.remember(f"Bob note {i + 40}: tea with the team", user="bob")
        assert len(mem.forget(where={"user": "alice"})) == 2
        want = {q: [(e.docno, e.score) for e in mem.recall(q, k=100)]
                for q in ("coffee team", "tea", "weather note")}
    with open(os.path.join(path, "data.mdb"), "rb") as f:
        before = f.read()
    for secret in SECRETS:                     # (what the test looks for is there before)
        assert secret in before, secret
    dest = str(tmp_path / "compact.db")
    done = subprocess.run(ANNODB + ["compact", "--db", path, dest], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(dest, "data.mdb"), "rb") as f:
        after = f.read()
    for secret in SECRETS:                     # its words, labels, key and value names
        assert secret not in after, secret
    for kept in (b"coffee", b"user:bob", b"weather"):
        assert kept in after
    assert sorted(os.listdir(tmp_path)) == ["compact.db", "m.db"]   # no temporary left
    with annodb.Memory(dest) as mem:           # the rest answers as before
        for q, ranked in want.items():
            assert [(e.docno, e.score) for e in mem.recall(q, k=100)] == ranked
        assert mem.recall("peanuts") == []
        assert len(mem.history(1000)) == 80
    with annodb.open(dest) as db:
        assert check(db) == []
        assert not db.read().has_feature("user:alice")
