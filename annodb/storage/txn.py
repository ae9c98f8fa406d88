"""Txn: typed access to one LMDB transaction, read or write: the parts of storage/
(counts.py, postings.py, documents.py, features.py) composed, beginning and ending the
transaction, and damage met while reading made a DamagedError (verify.py)."""

from __future__ import annotations

import os
from typing import Any, cast

from ..errors import DamagedError, StorageError
from .documents import Documents
from .environment import Environment, _close_lock_file, _share_writer_lock
from .postings import Postings
from .verify import damage_is_an_error


@damage_is_an_error("__init__", "commit", "abort", "_commit_counts")
class Txn(Postings, Documents):
    """Typed access to one LMDB transaction (read or write). Its methods are its parts':
    Postings (postings.py: blocks and tails) on Counts (counts.py: counts and changes),
    Documents (documents.py: docs, docnos, erased ranges), both on Features (features.py:
    meta and feature names, and the state they share). damage_is_an_error makes every
    method but those it names turn damage met while reading into a DamagedError and mark
    the environment damaged (verify.py); _commit_counts is part of commit's own work, left
    unchecked as commit is."""

    _guard: int | None  # read without lock.mdb: the shared flock held (see Environment.guard)

    def __init__(self, env: Environment, write: bool):
        self.env = env
        self.write = write
        self.dbs = env.dbs
        self.pid = env.pid
        if write and env.damage:
            raise DamagedError(f"{env.damage}; nothing is written into a damaged database")
        if self.pid != os.getpid():
            raise StorageError(f"{env.path}: opened in process {env.pid}, before a fork; "
                               "open the database again in this process")
        self._guard = None if env.guard is None else _share_writer_lock(env)
        try:
            self.txn = cast(Any, env.env).begin(write=write, buffers=not write)
        except BaseException:
            self._unguard()
            raise
        env.txns.add(self)
        self.id = self.txn.id()  # the committed state a read sees
        self._append_cursor = None
        self._counts = {}
        self._count_parts = []
        self._overlaps = set()
        self._df_parts = []
        self._df = {}
        self._df_reduced = True
        self._highs = {}
        self._no_stats = set()
        self._lows = {}
        self._low_parts = []
        self.block_bytes, self.block_count = env.block_bytes, env.block_count
        self._entries = {}
        self._pending = None
        self._present = None

    def commit(self) -> None:
        self._flush_deletions()
        self._close_cursors()
        self._commit_counts()
        self.txn.commit()
        self.env.txns.discard(self)
        self._unguard()

    def abort(self) -> None:
        """End the transaction (in a forked child, one inherited is left as it is: it is
        the parent's)."""
        if self.pid != os.getpid():
            return
        self.env.txns.discard(self)
        self._close_cursors()
        try:
            self.txn.abort()
        finally:
            self._unguard()

    def _unguard(self) -> None:
        if self._guard is not None:
            _close_lock_file(self._guard)  # (releases the shared flock)
            self._guard = None

    def _close_cursors(self) -> None:
        if self._append_cursor is not None:
            self._append_cursor.close()
            self._append_cursor = None
