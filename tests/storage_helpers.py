"""Helpers of the storage tests (test_codec, test_transactions, test_processes, test_golden,
test_check); their database is conftest.py's `db` fixture."""

from __future__ import annotations


def intervals(db, feature: str) -> list:
    """The (start, end, value) intervals of `feature`'s list, in a snapshot of its own."""
    with db.read() as r:
        return list(r.intervals(feature))
