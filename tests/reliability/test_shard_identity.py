"""A sharded collection knows its shards (annodb.shards): what a damaged collection does.

- A shard folder removed (an unmounted disk, a partial copy): every open, read-write or
  not, and `annodb ingest` refuse the collection naming the folder, and make nothing;
  `check` reports it.
- The manifest's shard count edited, or two shard folders swapped: refused at open, naming
  what each folder holds and what was expected; an ingest adds nothing.
- A collection made before shards recorded their place: opened, checked by its folders
  and its shards' first documents, and adopted at its first read-write open.
- The address counter damaged (past 2**53, or not a number): `annodb ingest` fails with
  one line saying how to repair it and leaves the counter as it was; `check` reports it;
  the repair works.
- A shard count one process cannot map: refused before anything is written, naming the
  address space and what limits it (never `ulimit -v` when none is set).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import annodb
from annodb.shards import collection as shards, routing
from annodb.check import check_path
from annodb.errors import StorageError

from .test_hostile_input import cli, one_error_line

pytestmark = pytest.mark.reliability

DOCS = 30


def _collection(path, n: int = 3):
    """A collection of n shards holding DOCS documents (each shard some), made through
    the API (a transaction per document: each writes one shard)."""
    with annodb.open(path, shards=n) as db:
        for i in range(DOCS):
            with db.write() as w:
                w.add(f"alpha bravo word{i} charlie", docno=f"d{i}")
        for i in range(n):
            assert db.shards[i].stats().documents > 0
    return path


def _input(tmp_path):
    src = tmp_path / "more.jsonl"
    src.write_text("".join(json.dumps({"docno": f"d{i}", "text": f"alpha word{i}"}) + "\n"
                           for i in range(DOCS + 10)))
    return src


def _swap(path, a: str, b: str) -> None:
    os.rename(path / a, path / "moving")
    os.rename(path / b, path / a)
    os.rename(path / "moving", path / b)


def _refused(path, *words, readonly=False):
    with pytest.raises(StorageError) as err:
        annodb.open(path, readonly=readonly)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    return str(err.value)


def test_a_missing_shard_is_refused_never_made_anew(tmp_path):
    """A 3-shard collection whose shard-001 was removed: annodb.open (read-write and
    read-only) and `annodb ingest` into it fail naming shard-001, and no shard-001 is
    made; check reports it. With the folder back, everything is as before."""
    path = _collection(tmp_path / "c.shards")
    kept = tmp_path / "kept"
    shutil.move(path / "shard-001", kept)
    for readonly in (False, True):
        _refused(path, "shard-001", "missing", "expected shard 1 of 3", readonly=readonly)
    code, err = cli("ingest", "--db", path, _input(tmp_path))
    one_error_line(code, err, "shard-001", "missing")
    assert not (path / "shard-001").exists()
    problems = check_path(path)
    assert len(problems) == 1 and "shard-001" in problems[0] and "missing" in problems[0]
    (path / "shard-001").mkdir()          # an empty mount point: the same
    _refused(path, "shard-001", "holds no database")
    assert os.listdir(path / "shard-001") == []
    shutil.rmtree(path / "shard-001")
    shutil.move(kept, path / "shard-001")
    with annodb.open(path) as db:
        assert db.stats().documents == DOCS
    assert check_path(path) == []


@pytest.mark.parametrize("count", [2, 4])
def test_a_manifest_whose_shard_count_was_edited_is_refused(tmp_path, count):
    """The manifest of a 3-shard collection edited to say 2 or 4 shards: refused at open
    (nothing served: no wrong stats), by check and by an ingest, which adds nothing."""
    path = _collection(tmp_path / "c.shards")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["shards"] = count
    (path / "manifest.json").write_text(json.dumps(manifest))
    expected = "shard-002" if count == 2 else "shard-003"
    for readonly in (False, True):
        _refused(path, expected, "shard count", readonly=readonly)
    assert check_path(path)
    code, err = cli("ingest", "--db", path, _input(tmp_path))
    one_error_line(code, err, expected)
    manifest["shards"] = 3
    (path / "manifest.json").write_text(json.dumps(manifest))
    with annodb.open(path) as db:
        assert db.stats().documents == DOCS
    assert check_path(path) == []


def test_swapped_shard_folders_are_refused(tmp_path):
    """shard-000 and shard-001 swapped: refused at open naming both, each with what it
    holds and what was expected; check lists both; a re-ingest adds no duplicate."""
    path = _collection(tmp_path / "c.shards")
    _swap(path, "shard-000", "shard-001")
    message = _refused(path, "shard-000", "is shard 1 of 3", "expected shard 0 of 3",
                       "swapped")
    assert "1 more problem" in message
    _refused(path, "shard-000", readonly=True)
    problems = check_path(path)
    assert len(problems) == 2 and "shard-000" in problems[0] and "shard-001" in problems[1]
    with pytest.raises(StorageError, match="shard-000"):
        annodb.ingest.ingest(str(path), [_input(tmp_path)])
    _swap(path, "shard-000", "shard-001")
    with annodb.open(path) as db:
        assert db.stats().documents == DOCS
    assert check_path(path) == []


def test_a_shard_of_another_collection_is_refused(tmp_path):
    """A shard folder copied from another collection of the same count: refused."""
    path = _collection(tmp_path / "c.shards")
    other = _collection(tmp_path / "other.shards")
    shutil.rmtree(path / "shard-002")
    shutil.copytree(other / "shard-002", path / "shard-002")
    _refused(path, "shard-002", "another collection")


def _made_before_identities(path) -> None:
    """Make the collection at `path` what an annodb before shards recorded their place
    wrote: no id in the manifest, no identity in the shards."""
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["id"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    for i in range(manifest["shards"]):
        with annodb.open(path / routing.shard_name(i)) as db, db.write() as w:
            w._txn.txn.delete(routing.IDENTITY.encode(), db=w._txn.dbs["meta"])


def test_a_collection_from_before_is_checked_and_adopted(tmp_path):
    """A collection whose shards record no place (made by an older annodb) opens
    read-only as it is; its first read-write open records each shard's place and the
    manifest's id, and from then on a swap is refused as for any collection. Before its
    adoption, swapped folders are caught by their documents' routing, a removed shard by
    its folder."""
    path = _collection(tmp_path / "c.shards")
    _made_before_identities(path)
    swapped = tmp_path / "swapped.shards"
    shutil.copytree(path, swapped)
    _swap(swapped, "shard-000", "shard-002")
    for readonly in (True, False):
        _refused(swapped, "shard-000", "routes to shard-", readonly=readonly)
    missing = tmp_path / "missing.shards"
    shutil.copytree(path, missing)
    shutil.rmtree(missing / "shard-001")
    _refused(missing, "shard-001", "missing")
    assert not (missing / "shard-001").exists()
    with annodb.open(path, readonly=True) as db:
        assert db.stats().documents == DOCS
    assert "id" not in json.loads((path / "manifest.json").read_text())
    with annodb.open(path) as db:
        assert db.stats().documents == DOCS
    cid = json.loads((path / "manifest.json").read_text())["id"]
    for i in range(3):
        with annodb.open(path / routing.shard_name(i), readonly=True) as db, \
                db.read() as r:
            assert r._txn.meta(routing.IDENTITY) == routing.identity(cid, i, 3)
    assert check_path(path) == []
    _swap(path, "shard-000", "shard-001")
    _refused(path, "is shard 1 of 3")


@pytest.mark.parametrize("damage", [str(10 ** 23), str(2 ** 53 + 1), "12x4"])
def test_a_damaged_address_counter_is_reported_and_repaired(tmp_path, damage):
    """The collection's address counter damaged (10**23, 2**53+1, not a number): ingest
    fails with one line naming the counter and the repair, and leaves it as it was (every
    attempt used to raise it further); check reports it; deleting the file, as the line
    says, repairs it and the ingest then adds its documents."""
    path = _collection(tmp_path / "c.shards")
    (path / "addresses").write_text(damage)
    src = _input(tmp_path)
    for _ in range(2):
        code, err = cli("ingest", "--db", path, src)
        one_error_line(code, err, "address counter is damaged", "delete that file")
        assert (path / "addresses").read_text() == damage
    problems = check_path(path)
    assert len(problems) == 1 and "address counter is damaged" in problems[0]
    with annodb.open(path, readonly=True) as db:   # (reading needs no counter)
        assert db.stats().documents == DOCS
    os.unlink(path / "addresses")
    code, err = cli("ingest", "--db", path, src)
    assert code == 0, err
    with annodb.open(path, readonly=True) as db:
        assert db.stats().documents == DOCS + 10
    assert check_path(path) == []
    assert int((path / "addresses").read_text()) < 2 ** 53


def test_a_counter_behind_the_shards_is_reported(tmp_path):
    """A counter behind a shard's next address (a stale copy of the file): check reports
    it (it did only in a read-write open, which check never is)."""
    path = _collection(tmp_path / "c.shards")
    (path / "addresses").write_text("3")
    problems = check_path(path)
    assert len(problems) == 1 and "behind the shards" in problems[0]


def test_addresses_past_2_53_are_refused_before_anything_is_written(tmp_path):
    """A counter at the end of the address range (valid, but full): a write is refused
    with a clear error and the counter is not raised past 2**53."""
    path = _collection(tmp_path / "c.shards")
    (path / "addresses").write_text(str(2 ** 53 - 2))
    with annodb.open(path) as db:
        with pytest.raises(StorageError, match="addresses are used up"):
            with db.write() as w:
                w.add("one more document", docno="late")
        assert db.stats().documents == DOCS
    assert int((path / "addresses").read_text()) == 2 ** 53 - 2


def test_more_shards_than_a_process_can_map_are_refused_before_anything_is_written(
        tmp_path):
    """A shard count past what one process can map (each shard maps storage.MAP_SIZE):
    `annodb.open(shards=N)`, `annodb split` and `annodb ingest --shards N` refuse it
    naming the address space, before anything is written (no directory left behind),
    and never blame `ulimit -v` when no limit is set; one that fits is made as before."""
    most, _ = shards.max_shards()
    if most >= shards.MAX_SHARDS:
        pytest.skip(f"this machine's processes can map {most} shards")
    too_many = shards.MAX_SHARDS      # (a 47-bit address space maps ~129)
    dest = tmp_path / "many.shards"
    with pytest.raises(StorageError) as err:
        annodb.open(dest, shards=too_many)
    assert f"at most {most} shards" in str(err.value)
    assert "address space" in str(err.value) and "ulimit" not in str(err.value)
    assert not dest.exists()
    source = tmp_path / "one.db"
    with annodb.open(source) as db, db.write() as w:
        w.add("alpha bravo", docno="a")
    code, err = cli("split", "--db", source, dest, "--shards", too_many)
    one_error_line(code, err, "address space", f"{too_many} shards")
    assert not dest.exists()
    code, err = cli("ingest", "--db", dest, "--shards", too_many, _input(tmp_path))
    one_error_line(code, err, "address space")
    assert not dest.exists()


def test_a_limited_address_space_caps_the_shard_count(tmp_path):
    """Under an address-space limit (ulimit -v 8 GiB) the cap follows it, and the refusal
    names the limit; a count that fits under it is made and written to."""
    probe = ("import sys, resource, annodb\n"
             "resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))\n"
             "try:\n    annodb.open(sys.argv[1], shards=16).close()\n"
             "except annodb.StorageError as err:\n    print(err)\n"
             "with annodb.open(sys.argv[2], shards=2) as db, db.write() as w:\n"
             "    w.add('alpha', docno='a')\n")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "no.shards"),
                           str(tmp_path / "yes.shards")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    refusal = done.stdout
    assert "16 shards are more than one process can open" in refusal, refusal
    assert "ulimit -v 8388608" in refusal and "at most 2 shards" in refusal, refusal
    assert not (tmp_path / "no.shards").exists()
    with annodb.open(tmp_path / "yes.shards", readonly=True) as db:
        assert db.stats().documents == 1


def test_a_collection_made_twice_at_once_is_made_once(tmp_path):
    """Two processes making the same new collection at once (two `annodb ingest --shards
    2` of the same files): one collection, each document once, check clean."""
    src = _input(tmp_path)
    path = tmp_path / "c.shards"
    code = ("import sys; from annodb.ingest.sharded import ingest\n"
            "ingest(sys.argv[1], [sys.argv[2]], shards=2, readers=1)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(src)],
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    with annodb.open(path, readonly=True) as db:
        assert db.stats().documents == DOCS + 10
    assert check_path(path) == []


def test_a_compacted_copy_is_the_same_collection(tmp_path):
    """compact() copies the shards with their places and the manifest with its id: the
    copy opens, and is checked clean."""
    path = _collection(tmp_path / "c.shards")
    with annodb.open(path) as db:
        db.compact(tmp_path / "copy.shards")
    with annodb.open(tmp_path / "copy.shards") as db:
        assert db.stats().documents == DOCS
    assert check_path(tmp_path / "copy.shards") == []


def test_a_making_killed_part_way_is_completed_by_the_same_command(tmp_path):
    """A process killed (SIGKILL) while making a 3-shard collection, after its second
    shard: what it leaves is no collection yet (opening it says its making was
    interrupted), making it again completes it, and making one of another count there is
    refused."""
    path = tmp_path / "c.shards"
    code = ("import os, signal, sys, annodb\nfrom annodb.shards import collection as shards\n"
            "made = shards._create_shard\n"
            "def then_killed(path, i, manifest, timeout):\n"
            "    made(path, i, manifest, timeout)\n"
            "    if i == 1:\n        os.kill(os.getpid(), signal.SIGKILL)\n"
            "shards._create_shard = then_killed\n"
            "annodb.open(sys.argv[1], shards=3)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert sorted(os.listdir(path)) == ["addresses.lock", "creating.json", "shard-000",
                                        "shard-001"]
    for readonly in (False, True):
        _refused(path, "making was interrupted", readonly=readonly)
    with pytest.raises(StorageError, match="a collection of 3 shards"):
        annodb.open(path, shards=2)
    with annodb.open(path, shards=3) as db, db.write() as w:
        w.add("alpha bravo", docno="a")
    assert not (path / "creating.json").exists()
    assert check_path(path) == []


def test_a_ray_actors_shard_is_checked_where_it_is_opened(tmp_path):
    """A shard's host (what each Ray actor runs, on the node holding the shard's folder,
    which the collection's own open may never see) refuses a shard recording another
    place than the manifest gives it."""
    from annodb.shards.worker import ShardHost
    path = _collection(tmp_path / "c.shards")
    cid = json.loads((path / "manifest.json").read_text())["id"]
    _swap(path, "shard-000", "shard-001")
    with pytest.raises(StorageError, match="shard-000: is shard 1 of 3"):
        ShardHost(str(path / "shard-000"), None, routing.identity(cid, 0, 3))
    host = ShardHost(str(path / "shard-000"), None, routing.identity(cid, 1, 3))
    host.db.close()
