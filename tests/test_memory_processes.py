"""annodb.Memory across real processes: a process killed inside remember_many leaves none
of the batch (and the memory writable), and a read-only Memory in another process sees
each commit of a writer whole, never a key with two current memories."""

import os
import subprocess
import sys
import textwrap

import annodb
from annodb.check import check

from test_memory_erasure import kill_inside

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KILLED = textwrap.dedent("""
    import sys, time
    import annodb
    import annodb.memory
    path = sys.argv[1]
    derive, done = annodb.memory._derive, [0]

    def pausing(w, start, end, record, fold):     # the test's hook: stop inside the batch
        derive(w, start, end, record, fold)
        done[0] += 1
        if done[0] == 50:
            print("inside", flush=True)
            time.sleep(60)

    annodb.memory._derive = pausing
    with annodb.Memory(path) as mem:
        mem.remember_many([{"text": f"batch note {i}", "user": "batch", "key": f"k{i % 7}"}
                           for i in range(200)])
""")


def test_a_process_killed_inside_remember_many_leaves_none_of_it(tmp_path):
    """SIGKILL after 50 of 200 memories were added (and some keys superseded) inside one
    remember_many: none of the batch is there afterwards, what was there before is
    unchanged and current, the database checks clean, and the next writer is not
    blocked by the dead one."""
    path = str(tmp_path / "m.db")
    with annodb.Memory(path) as mem:
        before = mem.remember("an earlier note", key="k1", user="batch")
    kill_inside(KILLED, path)
    with annodb.Memory(path, timeout=5) as mem:
        assert [e.docno for e in mem.history(500, include_superseded=True)] == [before]
        assert [e.docno for e in mem.recall("note", where={"key": "k1"})] == [before]
        after = mem.remember("a later note", key="k1")
        assert [e.docno for e in mem.recall("note", where={"key": "k1"})] == [after]
    with annodb.open(path) as db:
        assert check(db) == []


READER = textwrap.dedent("""
    import sys
    import annodb
    with annodb.Memory(sys.argv[1], readonly=True) as mem:
        for line in sys.stdin:
            current = mem.recall("", k=50, where={"key": "alice/city"})
            print(len(current), ",".join(e.text for e in current),
                  len(mem.history(50, include_superseded=True)), flush=True)
""")


def test_a_read_only_memory_in_another_process_sees_each_commit_whole(tmp_path):
    """A reader process (Memory(readonly=True), opened before the writes) sees each
    committed remember at its next call: one current memory for the key, the latest,
    and every superseded one kept; never a state between two commits."""
    path = str(tmp_path / "m.db")
    writer = annodb.Memory(path)
    writer.remember("Alice lives in Paris", key="alice/city")
    reader = subprocess.Popen([sys.executable, "-c", READER, path], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    seen = []
    try:
        for city in ("Berlin", "Rome", "Oslo"):
            reader.stdin.write("?\n")
            reader.stdin.flush()
            seen.append(reader.stdout.readline().split())
            writer.remember(f"Alice lives in {city}", key="alice/city")
        reader.stdin.write("?\n")
        reader.stdin.flush()
        seen.append(reader.stdout.readline().split())
    finally:
        reader.communicate(timeout=30)          # (closes its stdin: it ends)
        writer.close()
    assert seen == [["1", "Alice", "lives", "in", city, str(n)]
                    for n, city in enumerate(("Paris", "Berlin", "Rome", "Oslo"), 1)]
