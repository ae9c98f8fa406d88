"""Threads and write transactions: a Writer belongs to the thread that began it. Another
thread's call is a StorageError naming the fix (a write transaction per thread, or the work
passed to the thread holding it), and the database is left whole; threads that each begin
their own write transaction take turns and lose nothing."""

from __future__ import annotations

import threading

import pytest

import annodb
from annodb.check import check

from .workload import size

pytestmark = pytest.mark.reliability

THREADS = 4


def _run(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_sharing_one_writer_are_refused_and_nothing_is_corrupted(tmp_path, figures):
    """Four threads calling add() on one Writer: every call from a thread other than the
    one that began it raises StorageError saying what to do; the owner's own documents
    commit, and check finds the database whole (before: no error, then hundreds of
    overlapping documents, missing docnos and documents returning another's text)."""
    per_thread = size(250, 1000)
    errors: list[BaseException] = []
    with annodb.open(tmp_path / "t.db") as db:
        with db.write() as w:
            def work(t: int) -> None:
                for i in range(per_thread):
                    try:
                        w.add(f"thread {t} document {i} with some words", docno=f"t{t}-{i}")
                    except annodb.StorageError as err:
                        errors.append(err)
            _run([threading.Thread(target=work, args=(t,)) for t in range(THREADS)])
            for i in range(3):   # the thread that began it goes on using it
                w.add(f"owner document {i}", docno=f"own{i}")
        assert len(errors) == THREADS * per_thread
        message = str(errors[0])
        assert "belongs to the thread that began it" in message
        assert "Begin a write transaction in each thread" in message
        assert check(db) == []
        with db.read() as r:
            assert [d.docno for d in r.documents()] == ["own0", "own1", "own2"]
            assert r.document("own1").text == "owner document 1"
    figures.update(threads=THREADS, calls_refused=len(errors))


def test_another_thread_cannot_commit_or_abort_a_writer(tmp_path):
    """commit() and abort() from another thread are refused too (LMDB's writer mutex
    belongs to the thread that took it); the owner can then commit."""
    with annodb.open(tmp_path / "t.db") as db:
        w = db.write()
        w.add("kept", docno="k")
        seen = []

        def other() -> None:
            for call in (w.commit, w.abort, lambda: w.search("kept"),
                         lambda: w.annotate("label:x", 0, 0)):
                try:
                    call()
                except annodb.StorageError as err:
                    seen.append(str(err))
        _run([threading.Thread(target=other)])
        assert len(seen) == 4 and all("belongs to the thread" in s for s in seen)
        w.commit()
        with db.read() as r:
            assert r.document("k").text == "kept"
        assert check(db) == []


def test_a_write_transaction_per_thread_loses_nothing(tmp_path, figures):
    """The fix the error names: each thread begins its own write transactions; they take
    turns on the writer lock and every document is stored once, whole."""
    per_thread = size(60, 300)
    with annodb.open(tmp_path / "t.db") as db:
        def work(t: int) -> None:
            for i in range(0, per_thread, 20):
                with db.write() as w:
                    for j in range(i, min(i + 20, per_thread)):
                        w.add(f"thread {t} document {j}", docno=f"t{t}-{j}")
        _run([threading.Thread(target=work, args=(t,)) for t in range(THREADS)])
        assert check(db) == []
        with db.read() as r:
            assert r.document_count() == THREADS * per_thread
            for t in range(THREADS):
                assert r.document(f"t{t}-{per_thread - 1}").text == \
                    f"thread {t} document {per_thread - 1}"
    figures.update(documents=THREADS * per_thread)
