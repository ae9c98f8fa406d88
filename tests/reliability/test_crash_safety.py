"""Crash safety: a writer killed with SIGKILL at random points, a reader killed inside its
snapshot, and simulated power cuts. Sizes: workload.size(short, long) (see conftest.py).

What a power cut can leave, and how it is simulated honestly. LMDB (opened by annodb with
sync and metasync on, no writemap: asserted below) commits in three steps: write the
transaction's new pages (copy-on-write: never a page reachable from the last two committed
states), fdatasync, then write the meta page through an O_DSYNC descriptor. So at a power
cut the disk holds everything up to the last commit plus ANY subset of the pages of the
commit in progress, written in any order and possibly torn at sector granularity, with
the old meta page; or, after the meta write, the new state. (A disk that acknowledges
fdatasync without persisting breaks every database; that is not simulated.) Copying
data.mdb with `cp` while a writer runs is NOT such a state: the copy reads the meta at
the start and other pages later, after further commits may have reused them, a mix no
power cut produces. Two honest simulations instead:

- frozen copies: the writer process is stopped (SIGSTOP, delivered between system calls)
  at a random instant, data.mdb, lock.mdb and the log are copied, and it continues
  (SIGCONT): the copy is the page cache at that instant, i.e. a power cut after which every
  write issued so far reached the disk; it is opened as a fresh database would be after a
  reboot;
- reordered writes: around one commit the file is captured before and after; images are
  built from "before" plus a random subset of the pages that commit changed (each whole or
  torn at 512-byte sectors, the file extended with zeros or not), with the old meta pages:
  every state a power cut inside that commit can leave. Each must open at the old commit.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

import annodb
from annodb.check import check
from annodb.storage import disk_size

from . import workload
from .workload import (SEED, Workload, differences, doc_text, read_log, replay, size,
                       verify)

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")]

SCRIPT = os.path.join(workload.HERE, "workload.py")


def spawn(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SCRIPT, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def go(proc: subprocess.Popen) -> None:
    """Let a crash writer that said "ready" start writing."""
    proc.stdin.write(b"go\n")
    proc.stdin.flush()


def wait_ready(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else b""
    if line.strip() != b"ready":
        proc.kill()
        proc.wait()
        raise AssertionError(f"child did not start: {proc.stderr.read().decode()[-2000:]}")


def finish(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=60)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:   # stdin's buffer, when the child is gone
                pass


def test_lmdb_is_opened_for_durability(tmp_path):
    """The power-cut reasoning above holds only with these flags."""
    with annodb.open(tmp_path / "x.db") as db:
        flags = db._env.env.flags()
    assert flags["sync"] and flags["metasync"] and not flags["writemap"], flags
    assert not flags.get("map_async", False)


def test_sigkill_at_random_points(tmp_path, figures):
    """A writer running the Workload (batches, multi-batch ingests, annotations, deletes,
    erases, notes) is killed at random instants; each time the database passes check and
    holds exactly the logged commits, the one in flight wholly or not at all (an ingest in
    flight: whole batches). Every `rotate` kills start a fresh database (keeping each check
    fast). Between kills this process keeps the database open half of the time (so the
    next writer must recover LMDB's lock table and robust writer mutex from a dead owner),
    otherwise it reopens it from scratch.

    When the fate of the transaction in flight is settled: LMDB makes a commit durable by
    writing its meta page, then publishes it in lock.mdb for the processes that have the
    database open. A writer killed between the two leaves a durable commit that those
    processes do not see yet (they keep seeing the state before it, whole and consistent)
    until the next writer opens the database and recovers it; a process opening the
    database afresh sees it at once. So right after each kill the state is checked as it
    is seen (the state before or after the transaction in flight), and the outcome is
    recorded once the next writer has opened the database ("late" counts the kills where
    the two differ)."""
    kills, rotate = size(8, 200), size(8, 25)
    rng = random.Random(SEED)
    outcomes = {}
    held = reopened = commits = late = 0
    keeper = path = log = None
    seen_after_kill = None
    verify_seconds = 0.0

    def settle(log, label_seen) -> None:
        nonlocal late, verify_seconds
        started = time.perf_counter()
        label, pending = verify(keeper, log, rng)
        verify_seconds += time.perf_counter() - started
        key = f"{pending['op'] if pending else 'none'} {label.split(' ')[0]}"
        outcomes[key] = outcomes.get(key, 0) + 1
        late += label != label_seen

    try:
        for kill in range(kills):
            if kill % rotate == 0:
                if keeper is not None:          # settle the last kill: reopen from scratch
                    keeper.close()
                    keeper = annodb.open(path, create=False)
                    settle(log, seen_after_kill)
                    commits += sum(1 for r in read_log(log) if r["k"] == "commit")
                    keeper.close()
                path = tmp_path / f"db{kill // rotate}"
                log = str(tmp_path / f"log{kill // rotate}.jsonl")
                scratch = tmp_path / f"scratch{kill // rotate}"
                scratch.mkdir()
                keeper = annodb.open(path)
            proc = spawn("crash-writer", path, log, SEED + kill, (kill + 1) * 10**6, scratch)
            try:
                wait_ready(proc)                # it has opened the database read-write
                if kill % rotate:
                    settle(log, seen_after_kill)
                go(proc)
                time.sleep(rng.choice((rng.uniform(0.0, 0.3), rng.uniform(0.1, 1.5))))
            finally:
                finish(proc)
            if rng.random() < 0.5:
                held += 1
            else:
                keeper.close()
                keeper = annodb.open(path, create=False)
                reopened += 1
            seen_after_kill, _ = verify(keeper, log, rng, resolve=False)
        keeper.close()
        keeper = annodb.open(path, create=False)
        settle(log, seen_after_kill)
        commits += sum(1 for r in read_log(log) if r["k"] == "commit")
    finally:
        if keeper is not None:
            keeper.close()
    figures.update(kills=kills, kept_open=held, reopened=reopened,
                   logged_commits=commits, in_flight_at_kill=outcomes,
                   settled_after_the_next_open=late, verify_seconds=round(verify_seconds, 1))
    applied = sum(v for k, v in outcomes.items() if "applied" in k or "prefix" in k)
    absent = sum(v for k, v in outcomes.items() if "absent" in k and not k.startswith("none"))
    if workload.LONG:   # the kills must land both before and after commit points
        assert applied >= 5 and absent >= 5, outcomes


def test_sigkill_while_creating_a_database(tmp_path, figures):
    """`annodb ingest` into a new database killed early (while starting, creating the
    database, or in its first batches): the directory it leaves is always a database that
    opens read-write, passes check and holds whole batches; re-running the ingest
    completes it."""
    kills = size(4, 60)
    rng = random.Random(SEED + 3)
    src = tmp_path / "in.tsv"
    src.write_text("".join(f"t{i}\t{doc_text(f'b1.{i}.1500')}\n" for i in range(1500)))
    outcomes = {}
    for kill in range(kills):
        path = tmp_path / f"new{kill}.db"
        proc = subprocess.Popen([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                                 "ingest", "--db", str(path), "--batch-size", "20", str(src)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.25, 0.9))
        proc.kill()
        proc.wait()
        if not (path / "data.mdb").exists():
            key = "before the database existed"
        else:
            with annodb.open(path, create=False) as db:
                assert check(db) == []
                n = db.stats().documents
            assert n % 20 == 0, n
            key = "empty database" if n == 0 else "some batches" if n < 1500 else "finished"
            if n == 1500:
                outcomes[key] = outcomes.get(key, 0) + 1
                continue
            done = subprocess.run([sys.executable, "-c",
                                   "from annodb_cli.main import annodb; annodb()", "ingest", "--db",
                                   str(path), "--json", str(src)],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            with annodb.open(path, readonly=True) as db:
                assert check(db) == [] and db.stats().documents == 1500
        outcomes[key] = outcomes.get(key, 0) + 1
    figures.update(kills=kills, killed=outcomes)


def test_a_reader_killed_mid_snapshot_does_not_pin_old_pages(tmp_path, figures):
    """Regression (found by this suite): a reader process killed inside a snapshot left its
    LMDB reader slot behind; while any process kept the database open, that slot pinned
    the snapshot, so no freed page was reused again (the file grew without bound) and after
    MAX_READERS such deaths every read would have failed. storage now runs LMDB's
    reader_check on open and before every write."""
    commits = size(150, 600)
    path = tmp_path / "db"
    db = annodb.open(path)
    try:
        with db.write() as w:
            for i in range(200):
                w.add("hello world " * 50, docno=f"a{i}")
        code = ("import annodb, sys, time\n"
                f"db = annodb.open({str(path)!r}, readonly=True)\n"
                "r = db.read(); r.document_count()\n"
                "print('ready', flush=True); time.sleep(600)\n")
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            wait_ready(proc)
        finally:
            finish(proc)
        before = disk_size(path)
        for k in range(commits):
            with db.write() as w:
                w.annotate("tag:x", 0, 10, k)
                w.add("more text here " * 20, docno=f"k{k}")
                w.delete(f"k{k}")
        after = disk_size(path)
        stale = [line for line in db._env.env.readers().splitlines()[1:]
                 if line.split() and line.split()[0] == str(proc.pid)]
        figures.update(commits=commits, mb_before=round(before / 1e6, 2),
                       mb_after=round(after / 1e6, 2), stale_slots=len(stale))
        assert check(db) == []
        assert not stale, f"the dead reader's slot is still there: {stale}"
        assert after < before + 2_000_000, f"grew from {before} to {after} bytes"
    finally:
        db.close()


def _open_image(path, model) -> None:
    """Open a power-cut image as a database would be after a reboot: it passes check,
    equals `model`, and takes a new commit."""
    with annodb.open(path, create=False) as db:
        assert check(db) == []
        with db.read() as r:
            diff = differences(r, model, 1000, random.Random(0))
        assert diff == [], diff[:5]
        with db.write() as w:
            w.add("after the power cut", docno="reboot")
        assert check(db) == []


def test_power_cut_frozen_copies(tmp_path, figures):
    """Copies of a running writer's files taken while it is frozen at random instants:
    each opens, passes check and holds the logged commits (the one in flight wholly or not
    at all), and a writer can go on from it. A fresh database every 10 copies keeps each
    check short."""
    copies, per_database = size(6, 100), 10
    rng = random.Random(SEED + 1)
    outcomes = {}
    done = 0
    for session in range(0, copies, per_database):
        base = tmp_path / f"s{session}"
        base.mkdir()
        path, log, scratch = base / "db", str(base / "log.jsonl"), base / "scratch"
        scratch.mkdir()
        annodb.open(path).close()
        proc = spawn("crash-writer", path, log, SEED + 1 + session, 10**6, scratch)
        images = []
        try:
            wait_ready(proc)
            go(proc)
            for i in range(min(per_database, copies - session)):
                time.sleep(rng.uniform(0.01, 0.25))
                proc.send_signal(signal.SIGSTOP)
                try:
                    image = base / f"image{i}"
                    image.mkdir()
                    for name in ("data.mdb", "lock.mdb"):
                        shutil.copyfile(path / name, image / name)
                    shutil.copyfile(log, image / "log.jsonl")
                finally:
                    proc.send_signal(signal.SIGCONT)
                images.append(image)
        finally:
            finish(proc)
        for image in images:
            with annodb.open(image, create=False) as db:
                label, pending = verify(db, str(image / "log.jsonl"), rng, sample=200)
            key = f"{pending['op'] if pending else 'none'} {label.split(' ')[0]}"
            outcomes[key] = outcomes.get(key, 0) + 1
            model, _ = replay(read_log(str(image / "log.jsonl")))
            _open_image(image, model)
            shutil.rmtree(image)
            done += 1
        shutil.rmtree(base)
    figures.update(frozen_copies=copies, opened_and_checked=done, in_flight_at_copy=outcomes)
    assert done == copies


def _power_cut_image(before: bytes, after: bytes, psize: int, rng: random.Random):
    """`before` plus a random subset of the data pages `after` changed (some torn at
    512-byte sectors), the meta pages (0 and 1) of `before`."""
    pages = (len(after) + psize - 1) // psize
    changed = [p for p in range(2, pages)
               if after[p * psize:(p + 1) * psize] != before[p * psize:(p + 1) * psize]]
    share = rng.choice((0.0, 1.0, rng.random()))
    taken = [p for p in changed if rng.random() < share]
    out = bytearray(before) + bytes(max(len(after) - len(before), 0))
    torn = 0
    for p in taken:
        lo, hi = p * psize, min((p + 1) * psize, len(after))
        if rng.random() < 0.3:
            torn += 1
            for s in range(lo, hi, 512):
                if rng.random() < 0.5:
                    out[s:s + 512] = after[s:s + 512]
        else:
            out[lo:hi] = after[lo:hi]
    if len(after) > len(before) and rng.random() < 0.5 and \
            not any((p + 1) * psize > len(before) for p in taken):
        del out[len(before):]          # the file's extension did not reach the disk
    return bytes(out), len(changed), len(taken), torn


def test_power_cut_reordered_writes(tmp_path, figures):
    """Every commit k -> k+1 captured here yields images holding commit k plus any subset
    of k+1's page writes, whole or torn: each opens at commit k exactly (check passes, the
    content is k's), and the complete image opens at k+1."""
    pairs, per_pair = size(5, 60), size(4, 10)
    rng = random.Random(SEED + 2)
    path, log, scratch = tmp_path / "db", str(tmp_path / "log.jsonl"), tmp_path / "scratch"
    scratch.mkdir()
    db = annodb.open(path)
    work = Workload(db, log, SEED + 2, 10**6, str(scratch))
    psize = db._env.env.stat()["psize"]
    images = changed_pages = taken_pages = torn_pages = 0
    kinds = {}
    try:
        for _ in range(20):                     # some content first
            work.step()
        for pair in range(pairs):
            for _ in range(rng.randint(0, 3)):
                work.step()
            records = read_log(log)
            before = (path / "data.mdb").read_bytes()
            kind = work.step(single=True)
            kinds[kind] = kinds.get(kind, 0) + 1
            after = (path / "data.mdb").read_bytes()
            assert before[:2 * psize] != after[:2 * psize], "the commit wrote no meta page"
            old, _ = replay(records)
            new, _ = replay(read_log(log))
            for i in range(per_pair):
                blob, changed, taken, torn = _power_cut_image(before, after, psize, rng)
                image = tmp_path / f"image{pair}.{i}"
                image.mkdir()
                (image / "data.mdb").write_bytes(blob)
                _open_image(image, old)
                shutil.rmtree(image)
                images += 1
                changed_pages, taken_pages, torn_pages = (changed_pages + changed,
                                                          taken_pages + taken, torn_pages + torn)
            image = tmp_path / f"image{pair}.new"
            image.mkdir()
            (image / "data.mdb").write_bytes(after)
            _open_image(image, new)
            shutil.rmtree(image)
    finally:
        db.close()
    figures.update(commits_cut=pairs, images_opened=images + pairs,
                   changed_pages=changed_pages, pages_written_in_images=taken_pages,
                   torn_pages=torn_pages, ops=kinds)
