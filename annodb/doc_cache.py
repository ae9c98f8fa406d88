"""Documents by address, decoded once and shared by the snapshots of one database.

A ranking names its hits by their documents: the document holding each container's
start. Stored documents are compressed in groups (storage's `docs`), so finding one
decompressed its group, ~30-60 us, at every hit of every query: a tenth of a top-10
BM25 query on SciFact, and most of a top 1000. DocumentCache keeps the decoded groups
(storage's _Entry: each document's range, docno and msgpack) that reads asked for, found
again by the start of each document they hold, least recently used dropped past a byte
budget.

What a start names never changes while the erased ranges do not: addresses are never
reused, documents are only appended (a group rewritten to take documents after it keeps
those it held, byte for byte), and a document goes only by being deleted, which erases
its range and so changes the erased ranges' version (storage's meta "erased_version").
The cache is therefore valid for every committed state with one erased version, across
commits that add documents, and is emptied when a newer version is seen; a snapshot of
an older version reads past it. A database that does not record the version (format 3
with erased ranges) keeps it per committed state. A writer's snapshot does not use it
(its documents are not committed; an aborted writer's addresses are used again).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

DOC_CACHE_BYTES = 32 << 20  # decoded documents kept (msgpack bytes), at most


class DocumentCache:
    """Decoded docs entries by the start of each document they hold, for one version of
    the erased ranges (`token`, see the module docstring)."""

    def __init__(self, max_bytes: int = DOC_CACHE_BYTES):
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._token = None
        self._starts: dict[int, tuple[object, int]] = {}  # start -> (entry, its index)
        self._entries: OrderedDict = OrderedDict()          # key -> (entry, bytes)
        self._lock = threading.Lock()

    def usable(self, token) -> bool:
        """Whether a snapshot whose erased ranges are `token` may read and fill the cache:
        its version or a newer one (the cache is emptied for a newer one)."""
        with self._lock:
            if token == self._token:
                return True
            if self._token is not None and type(token) is type(self._token) and \
                    token < self._token:
                return False  # (an older snapshot: it reads past the cache)
            self._clear()
            self._token = token
            return True

    def get(self, token, start: int):
        """(entry, index) of the document starting at `start`, if cached for `token`."""
        found = self._starts.get(start)
        if found is None or token != self._token:
            return None
        return found

    def get_many(self, token, starts: list[int]) -> list:
        """get(token, start) of each start."""
        if token != self._token:
            return [None] * len(starts)
        return list(map(self._starts.get, starts))

    def add(self, token, key: int, entry) -> None:
        """Keep a decoded entry (stored under `key`) for `token`: its documents by start."""
        size = sum(len(raw) for raw in entry.raws) + 100 * len(entry.starts) + 200
        if size > self.max_bytes // 4:
            return
        with self._lock:
            if token != self._token:
                return
            old = self._entries.pop(key, None)
            if old is not None:
                self._forget(old)
            self._entries[key] = (entry, size)
            self.bytes += size
            for i, s in enumerate(entry.starts):
                self._starts[s] = (entry, i)
            while self.bytes > self.max_bytes and self._entries:
                _, gone = self._entries.popitem(last=False)
                self._forget(gone)

    def _forget(self, item) -> None:
        entry, size = item
        self.bytes -= size
        for s in entry.starts:
            if self._starts.get(s, (None,))[0] is entry:
                del self._starts[s]

    def _clear(self) -> None:
        self._starts.clear()
        self._entries.clear()
        self.bytes = 0

    def clear(self) -> None:
        with self._lock:
            self._clear()
            self._token = None
