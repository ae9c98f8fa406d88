"""Compaction that keeps nothing of what was erased: what `annodb compact` and
Database.compact write.

Erasing (forget, delete, erase) removes a document's stored text and makes its postings
and annotations invisible at once, but until now the copy compaction wrote still held
them: the postings inside erased ranges, and the names of words and labels that only the
erased content used (the feature table is plain text: `strings data.mdb` showed them).

`compact(env, dest)` with erased ranges present:

1. copies the database as LMDB's compacting copy does (a consistent snapshot, only the
   pages in use) into a temporary directory beside `dest`, which no other process knows;
2. there, in one write transaction, rewrites every list holding an interval inside an
   erased range without it (exactly what reads already saw), and removes each feature
   left with no interval: its name, blocks, tail, counts and changes (storage's
   Txn.replace_list); field statistics of fields no document has any more go too;
3. copies that, key by key, into a new environment (storage.copy_rebuilt: B-trees built
   afresh, so neither the pages the rewrite freed nor the separator keys that branch
   pages keep of deleted entries come along), renames it to `dest`, and removes the
   temporary directory.

The erased ranges themselves stay (addresses are never reused) and so do the docnos of
live documents; nothing else of the erased content does. Step 2 reads every list once,
so compaction then takes time in proportion to the whole index; without erased ranges
it is the plain compacting copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from . import kernels, storage
from .errors import StorageError


def compact(env: storage.Environment, dest: str, timeout: float = 30.0) -> None:
    """Write a compacted copy of the environment to the new directory `dest`, with no
    trace of erased content (see the module's docstring)."""
    probe = storage.Txn(env, write=False)
    try:
        erased = probe.has_erased()
    finally:
        probe.abort()
    if not erased:
        storage.copy_compacted(env, dest)
        return
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise StorageError(f"{dest}: exists and is not an empty directory")
    parent = os.path.dirname(os.path.abspath(dest))
    work = tempfile.mkdtemp(prefix=".annodb-purge-", dir=parent)
    try:
        copy = os.path.join(work, "db")
        storage.copy_compacted(env, copy)
        purge(copy, timeout)
        copied = storage.open_environment(copy, readonly=True, create=False)
        try:
            storage.copy_rebuilt(copied, os.path.join(work, "out"))
        finally:
            storage.close_environment(copied)
        os.rename(os.path.join(work, "out"), dest)   # (dest is missing or empty)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def purge(path: str, timeout: float = 30.0) -> dict:
    """Remove every trace of erased content from the database at `path` in place, in one
    transaction: lists rewritten without the intervals inside erased ranges, features left
    empty removed. Only for a database no other process has open (a copy): others may
    hold removed features' ids. Its file keeps the old bytes in free pages until copied
    with compaction (see compact). Returns counts: lists rewritten, features removed."""
    env = storage.open_environment(path, create=False, timeout=timeout)
    lock = storage.WriterLock(env, timeout)
    lock.acquire()
    try:
        txn = storage.Txn(env, write=True)
        try:
            done = _purge(txn)
            txn.commit()
        except BaseException:
            txn.abort()
            raise
    finally:
        lock.release()
        storage.close_environment(env)
    return done


def _purge(txn: storage.Txn) -> dict:
    es, ee = txn.erased()
    rewritten = removed = 0
    for _, fid in list(txn.features()):
        s, e, v = txn.read_list(fid)
        keep = kernels.drop_erased(s, e, es, ee) if len(s) and len(es) else None
        if keep is not None and len(keep) == len(s):
            continue
        if keep is None:
            if len(s):
                continue
            s2 = e2 = v2 = s[:0]
        else:
            s2, e2, v2 = s[keep], e[keep], v[keep]
        txn.replace_list(fid, s2, e2, v2.astype("float64", copy=True))
        if len(s2):
            rewritten += 1
        else:
            removed += 1
    fields = txn.meta("fields")
    if fields:
        kept = {name: counts for name, counts in fields.items() if counts[0] > 0}
        if kept != fields:
            txn.set_meta("fields", kept)
    return {"rewritten": rewritten, "removed": removed}
