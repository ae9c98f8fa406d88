"""fork(): LMDB forbids using an environment across fork(), so a database opened before a
fork reopens itself in the child, a transaction begun before it belongs to the parent, and
the compression pool's thread (which does not survive a fork) is made anew. Each scenario runs
in its own Python process under a time limit (a hang fails the test), with
os.fork() and multiprocessing ('fork' and 'spawn'); each must end in correct data or a
clear StorageError, never a hang or a raw msgspec/struct error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import annodb
from annodb.check import check

from .workload import size

pytestmark = pytest.mark.reliability

PRELUDE = """
import multiprocessing, os, sys, time
import annodb
path = sys.argv[1]

def text(i):
    return f"document {i} " + " ".join(f"w{(i * 7 + k) % 97}" for k in range(40))

def wait_for(name, seconds=60):
    deadline = time.monotonic() + seconds
    while not os.path.exists(name):
        assert time.monotonic() < deadline, f"timed out waiting for {name}"
        time.sleep(0.01)
"""


def script(tmp_path, code: str) -> list[str]:
    """The command running PRELUDE + code from a file (multiprocessing's spawn imports the
    main module from it) with the database path as its first argument."""
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.py"
    path.write_text(PRELUDE + textwrap.dedent(code))
    return [sys.executable, str(path), str(tmp_path / "f.db")]


def run(tmp_path, code: str, *args, timeout: float = 120) -> str:
    """Run the script with these arguments; its stdout (it must exit 0)."""
    out = subprocess.run(script(tmp_path, code) + list(map(str, args)), capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def child_commits(method: str) -> str:
    """The parent wrote once (so its compression pool has a thread); children commit."""
    return f"""
    def work(i):
        db = annodb.open(path, timeout=10)
        with db.write() as w:
            w.add(text(100 + i), docno=f"c{{i}}")
        db.close()
        return i

    if __name__ == "__main__":
        db = annodb.open(path, timeout=10)
        with db.write() as w:
            w.add_many([(text(i), f"p{{i}}") for i in range(100)])
        # the compression pool's thread started, as a regroup of many documents starts it
        from annodb.storage import environment
        environment._pool().submit(int).result()
        if {method!r} == "os.fork":
            pid = os.fork()
            if pid == 0:
                with db.write() as w:               # the parent's Database, reopened here
                    w.add(text(200), docno="inherited")
                m = annodb.Memory(path)            # and a fresh open
                m.remember("the child remembers tea", user="kid")
                print(len(m.recall("tea", where={{"user": "kid"}})), flush=True)
                os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
            expected = 102
        else:
            with multiprocessing.get_context({method!r}).Pool(3) as pool:
                assert sorted(pool.map(work, range(6))) == list(range(6))
            expected = 106
        with db.write(timeout=5) as w:              # no lock left behind
            w.add(text(300), docno="after")
        with db.read() as r:
            print(r.document_count() == expected + 1, r.count("document"))
        from annodb.check import check
        print(check(db))
    """


@pytest.mark.parametrize("method", ["os.fork", "fork", "spawn"])
def test_a_child_commits_after_the_parent_wrote(tmp_path, method):
    out = run(tmp_path, child_commits(method)).split("\n")
    if method == "os.fork":
        assert out[0] == "1", out
        out = out[1:]
    assert out[0].split()[0] == "True", out
    assert out[1] == "[]", out
    with annodb.open(tmp_path / "f.db") as db:
        assert check(db) == []


def test_a_transaction_open_at_the_fork_stays_the_parents(tmp_path):
    """The parent holds a snapshot when it forks: in the child, using it, or opening the
    database, is a clear StorageError; the parent's snapshot stays whole while another
    process then rewrites the database many times."""
    code = """
    import subprocess
    db = annodb.open(path, timeout=10)
    with db.write() as w:
        w.add_many([(text(i), f"p{i}") for i in range(200)])
    snapshot = db.read()
    before = [d.text for d in snapshot.documents()]
    pid = os.fork()
    if pid == 0:
        said = []
        for attempt in (lambda: snapshot.count("document"), lambda: db.read(),
                        lambda: annodb.open(path), lambda: db.write()):
            try:
                attempt()
                said.append("no error")
            except annodb.StorageError as err:
                said.append(str(err))
        snapshot.close()   # the parent's: left untouched
        print("\\n".join(said), flush=True)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    rewrite = (f"import annodb\\ndb = annodb.open({path!r}, timeout=10)\\n"
               "for n in range(%d):\\n"
               "    with db.write() as w:\\n"
               "        for i in range(20):\\n"
               "            w.delete(f'p{(n * 20 + i) %% 200}')\\n"
               "            w.add('rewritten ' * 50, docno=f'p{(n * 20 + i) %% 200}')\\n")
    subprocess.run([sys.executable, "-c", rewrite % int(sys.argv[2])], check=True, timeout=300)
    after = [d.text for d in snapshot.documents()]
    print("unchanged" if after == before else "CHANGED", snapshot.count("document"))
    snapshot.close()
    """
    out = run(tmp_path, code, size(60, 300)).strip().split("\n")
    assert len(out) == 5 and "this transaction was begun in process" in out[0], out
    assert all("a forked child cannot open the database" in line for line in out[1:4]), out
    assert out[4] == "unchanged 200", out
    with annodb.open(tmp_path / "f.db") as db:
        assert check(db) == []


@pytest.mark.parametrize("method", ["os.fork", "fork"])
def test_a_child_keeps_its_snapshot_after_the_parent_exits(tmp_path, method):
    """The parent wrote, forked and exited; the child reads one snapshot while another
    process rewrites the database: every read of the snapshot gives the same state."""
    code = f"""
    def child(go, ready, result):
        try:
            with db.read() as r:                    # the parent's Database, reopened here
                first = [d.text for d in r.documents()]
                open(ready, "w").close()
                wait_for(go)
                again = [d.text for d in r.documents()]
                hits = [h.docno for h in r.search("document", k=1000)]
            said = f"{{again == first and len(hits) == len(first)}} {{len(first)}}"
        except Exception as err:
            said = f"{{type(err).__name__}}: {{err}}"
        with open(result, "w") as f:
            f.write(said)

    if __name__ == "__main__":
        go, ready, result = sys.argv[2:5]
        db = annodb.open(path, timeout=10)
        with db.write() as w:
            w.add_many([(text(i), f"p{{i}}") for i in range(200)])
        if {method!r} == "os.fork":
            if os.fork() == 0:
                child(go, ready, result)
                os._exit(0)
        else:
            multiprocessing.get_context("fork").Process(target=child,
                                                        args=(go, ready, result)).start()
        db.close()
        os._exit(0)                                   # the parent is gone, the child lives on
    """
    go, ready, result = tmp_path / "go", tmp_path / "ready", tmp_path / "result"
    with open(tmp_path / "parent.out", "w") as out:   # (a pipe would wait for the child too)
        parent = subprocess.run(script(tmp_path, code) + [go, ready, result], stdout=out,
                                stderr=subprocess.STDOUT, timeout=120)
    assert parent.returncode == 0, (tmp_path / "parent.out").read_text()
    run(tmp_path, """
    wait_for(sys.argv[2])
    db = annodb.open(path, timeout=10)
    for n in range(int(sys.argv[3])):
        with db.write() as w:
            for i in range(20):
                w.delete(f"p{(n * 20 + i) % 200}")
                w.add("rewritten " * 50, docno=f"p{(n * 20 + i) % 200}")
    open(sys.argv[4], "w").close()
    wait_for(sys.argv[5])
    print(open(sys.argv[5]).read())
    """, ready, size(60, 300), go, result)
    assert result.read_text() == "True 200"
    with annodb.open(tmp_path / "f.db") as db:
        assert check(db) == []
