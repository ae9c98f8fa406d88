"""`check` finds damage: each kind of damaged block, name, count, erased range, document
list, docno map and group is reported in one line; addresses past the range are
reported; damage met while reading is an error and stops writes; one damaged block among
thousands is reported and nothing else."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import annodb
from annodb import storage
from annodb.check import check


def _key(fid: int, start: int) -> bytes:
    return storage.u64(fid) + storage.u64(start)


def _points(*addresses) -> bytes:
    a = np.array(addresses, dtype=np.int64)
    return storage.encode_block(a, a, np.zeros(len(a)))


def _damage_truncated_block(txn, fid):
    txn.txn.put(_key(fid, 0), _points(0, 1)[:-1], db=txn.dbs["blocks"])


def _damage_wrong_key(txn, fid):
    txn.txn.put(_key(fid, 5), _points(0), db=txn.dbs["blocks"])


def _damage_nested_across_blocks(txn, fid):
    txn.txn.put(_key(fid, 0), storage.encode_block(np.array([0]), np.array([10]), np.zeros(1)),
                db=txn.dbs["blocks"])
    txn.txn.put(_key(fid, 2), _points(2), db=txn.dbs["blocks"])


def _damage_nested_after_a_wrong_key(txn, fid):
    """The kernel stops at the first block (its key is wrong); the check of the second
    needs where the first left the list."""
    txn.txn.put(_key(fid, 1), storage.encode_block(np.array([0]), np.array([10]), np.zeros(1)),
                db=txn.dbs["blocks"])
    txn.txn.put(_key(fid, 2), _points(2), db=txn.dbs["blocks"])


def _damage_unsorted_block(txn, fid):
    raw = bytearray(_points(0, 3, 5))   # deltas 3, 2: make the last one 0 (a repeated start)
    raw[-1] = 0
    txn.txn.put(_key(fid, 0), bytes(raw), db=txn.dbs["blocks"])


def _damage_names(txn, fid):
    txn.txn.put(storage.u64(999), b"ghost", db=txn.dbs["names"])


def _damage_count(txn, fid):
    txn.set_meta("documents", 7)


def _damage_erased(txn, fid):
    txn.txn.put(storage.u64(5), storage.u64(10), db=txn.dbs["erased"])
    txn.txn.put(storage.u64(8), storage.u64(12), db=txn.dbs["erased"])


def _damage_document_list(txn, fid):
    container = txn.feature_id(":")
    txn.txn.delete(_key(container, 0), db=txn.dbs["blocks"])
    txn.txn.put(_key(container, 0), storage.encode_block(
        np.array([0]), np.array([1]), np.zeros(1)), db=txn.dbs["blocks"])


def _damage_docno_map(txn, fid):
    txn.txn.put(b"a", storage.u64(3), db=txn.dbs["docnos"])


def _damage_group(txn, fid):
    docs = txn.dbs["docs"]
    assert txn.txn.get(storage.u64(0), db=docs)[0] == storage.TAG_REL_GROUP   # "a" and "b"
    txn.txn.put(storage.u64(0), b"\x03" + b"not zstd", db=docs)


def _damage_group_key(txn, fid):
    docs = txn.dbs["docs"]
    value = txn.txn.get(storage.u64(0), db=docs)
    txn.txn.delete(storage.u64(0), db=docs)
    txn.txn.put(storage.u64(1), value, db=docs)


@pytest.mark.parametrize("damage, expected", [
    (_damage_truncated_block, "header says"),
    (_damage_wrong_key, "its first start is 0"),
    (_damage_nested_across_blocks, "nested or out of order"),
    (_damage_nested_after_a_wrong_key, "block at 2: first end 2 is not after the previous "
                                       "block's last end 10"),
    (_damage_unsorted_block, "do not strictly increase"),
    (_damage_names, "names: id 999 -> 'ghost'"),
    (_damage_count, "'documents' is 7"),
    (_damage_erased, "erased: ranges overlap"),
    (_damage_document_list, "has no ':' interval"),
    (_damage_docno_map, "docnos: 'a' -> 3"),
    (_damage_group, "the group at 0 does not decode"),
    (_damage_group_key, "docnos: 'a' -> 0, but the document starts at 1"),
])
def test_check_finds_damage(db, damage, expected):
    with db.write() as w:
        w.add("alpha beta gamma", docno="a")
        w.add("delta", docno="b")
        w.annotate("probe", 0, 0)
    assert check(db) == []
    txn = storage.Txn(db._env, write=True)
    fid = txn.feature_id("probe")
    txn.txn.delete(_key(fid, 0), db=txn.dbs["blocks"])
    damage(txn, fid)
    txn.commit()
    problems = check(db)
    assert any(expected in p for p in problems), problems


def test_check_reports_addresses_past_the_range(db):
    with db.write() as w:
        w.add("some words", docno="a")
    txn = storage.Txn(db._env, write=True)
    txn.set_meta("next_address", 2**60)
    fid = txn.feature_id(":")
    txn.txn.put(_key(fid, 2**60), storage.encode_block(
        np.array([2**60]), np.array([2**60 + 2]), np.zeros(1)), db=txn.dbs["blocks"])
    txn.txn.put(storage.u64(2**61), storage.u64(2**61 + 1), db=txn.dbs["erased"])
    txn.commit()
    found = "\n".join(check(db))
    assert "'next_address' is 1,152,921,504,606,846,976, past the address range" in found
    assert "ends at 1,152,921,504,606,846,978, past the address range" in found
    assert "erased: a range ends at 2,305,843,009,213,693,953, past the address range" in found


def test_damage_met_while_reading_is_an_error_and_stops_writes(db):
    """Values LMDB hands over intact but that do not decode (a block whose header claims
    more than it holds, a document that is not msgpack): DamagedError, never a read past
    the block; after it, no write transaction begins in the process."""
    with db.write() as w:
        w.add("goth rock scene", docno="a")
    txn = storage.Txn(db._env, write=True)
    bad_block = bytes([storage.FLAG_POINTS | storage.FLAG_ZERO, 1, 1, 0]) + \
        (1000).to_bytes(4, "little") + bytes(8) + b"\x01\x01"
    txn.txn.put(_key(txn.feature_id("goth"), 0), bad_block, db=txn.dbs["blocks"])
    txn.txn.put(storage.u64(0), b"\x04\xc1 not msgpack", db=txn.dbs["docs"])
    txn.commit()
    with db.read() as r:
        with pytest.raises(annodb.DamagedError, match="the database is damaged: .*block"):
            r.count("goth")
        with pytest.raises(annodb.DamagedError, match="annodb check --db"):
            r.document("a")
        assert r.count("rock") == 1                      # what is intact still reads
    with pytest.raises(annodb.DamagedError, match="nothing is written into a damaged"):
        db.write()
    problems = check(db)
    assert any("'goth'" in p for p in problems) and any("docs:" in p for p in problems)


def test_every_method_of_every_part_of_a_transaction_turns_damage_into_an_error():
    """Txn's methods, those of each of its parts (features, counts, postings, documents)
    included, turn damage met while reading into DamagedError (verify.damage_is_an_error),
    all but those that begin and end the transaction."""
    unchecked = {"__init__", "commit", "abort", "_commit_counts"}
    names = {name for part in storage.Txn.__mro__[:-1] for name, value in vars(part).items()
             if inspect.isfunction(value)}
    assert len(names) > 60 and unchecked <= names
    for name in names:
        checked = hasattr(inspect.getattr_static(storage.Txn, name), "__wrapped__")
        assert checked == (name not in unchecked), name


def test_check_reports_one_damaged_block_among_thousands_and_nothing_else(db):
    """check looks at blocks in batches (kernels/checking.py) and says in full what it
    finds at the one it stops at: after that block it goes on where it was, so the blocks
    after it, in its list and in the others, and the lists' counts raise nothing."""
    with db.write() as w:
        for i in range(3000):
            w.add(f"common rare{i} common", docno=f"d{i}")
        for i in range(8000):          # (values take room: many blocks)
            w.annotate("probe", 3 * i, 3 * i + 1, i + 0.5)
    assert check(db) == []
    txn = storage.Txn(db._env, write=True)
    fid = txn.feature_id("probe")
    with txn.txn.cursor(db=txn.dbs["blocks"]) as cur:
        keys = [bytes(k) for k, _ in cur if bytes(k).startswith(_key(fid, 0)[:8])]
    assert len(keys) > 4                      # (the middle one of several blocks)
    key = keys[len(keys) // 2]
    value = txn.txn.get(key, db=txn.dbs["blocks"])
    start = int.from_bytes(key[8:], "big")
    txn.txn.delete(key, db=txn.dbs["blocks"])
    txn.txn.put(_key(fid, start + 1), value, db=txn.dbs["blocks"])   # stored under start + 1
    txn.commit()
    assert check(db) == [f"blocks: 'probe' block at {start + 1}: its first start is {start}"]
