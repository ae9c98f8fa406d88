"""Where a document of a sharded collection lives: the shard its docno routes to (its
annotations, notes and judgments go with it; see collection.py), the shards' names, and a
shard's identity (which collection it belongs to, its index and the shard count, recorded
in the shard). What makes a directory a collection (its manifest) is in paths.py."""

from __future__ import annotations

import hashlib
import threading
from collections import deque

import numpy as np

IDENTITY = "collection"      # a shard's meta key: {"id": the collection's, "shard", "shards"}
RANKINGS = 64   # rankings a Homes keeps at most (a lookup that misses searches each)


def route(docno: str, shards: int) -> int:
    """The shard of a document: its docno's SHA-1, first 8 bytes big-endian, mod shards."""
    digest = hashlib.sha1(docno.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_name(i: int) -> str:
    return f"shard-{i:03d}"


def shard_index(name: str) -> int | None:
    """The index in a shard folder's name (shard_name's), or None for any other name."""
    digits = name[6:] if name.startswith("shard-") else ""
    if len(digits) >= 3 and digits.isascii() and digits.isdigit() and \
            shard_name(int(digits)) == name:
        return int(digits)
    return None


def identity(collection: str | None, i: int, shards: int) -> dict:
    """What shard `i` of a collection of `shards` shards records (meta IDENTITY); None for
    `collection`: not known (a collection being adopted whose shards do not agree on one),
    to compare shards against."""
    return {"id": collection, "shard": i, "shards": shards}


def identity_problem(where: str, found, expected: dict) -> str | None:
    """What is wrong with the shard at `where` recording `found` (its IDENTITY meta, None
    when it records none) where `expected` (identity(...)) belongs; None: nothing."""
    i, n = expected["shard"], expected["shards"]
    want = f"shard {i} of {n} of collection {expected['id']}"
    if found is None:
        return (f"{where}: records no collection (expected {want}): it was not made with "
                "this collection (made anew by an older annodb, or copied from elsewhere)")
    if not isinstance(found, dict) or set(found) != {"id", "shard", "shards"}:
        return f"{where}: its record of its collection is damaged ({found!r}; expected {want})"
    if found == expected:
        return None
    got = f"shard {found['shard']} of {found['shards']} of collection {found['id']}"
    if found["id"] != expected["id"]:
        why = "a shard of another collection"
    elif found["shards"] != n:
        why = "the manifest's shard count was changed"
    else:
        why = "shard folders renamed or swapped"
    return f"{where}: is {got}, expected {want} ({why}?)"


class Homes:
    """The shards of recently ranked containers (by start), for a later lookup of their
    documents to ask one shard, not each (on Ray actors a round trip each). Rankings are
    kept whole, the newest `limit` containers' worth and at most `rankings` of them:
    recording one costs a sort of its starts, not a dictionary entry per container (at
    depth 1000 that was 0.4 ms a query); a lookup searches the newest rankings first (one
    that misses, each of them: thousands of small rankings made that 1 ms and more)."""

    def __init__(self, limit: int, rankings: int = RANKINGS):
        self.limit = limit
        self.rankings = rankings
        self._rankings: deque = deque()
        self._size = 0
        self._lock = threading.Lock()

    def remember(self, starts: np.ndarray, shards: np.ndarray) -> None:
        if not len(starts):
            return
        order = np.argsort(starts, kind="stable")
        entry = (np.ascontiguousarray(starts[order], dtype=np.int64),
                 np.ascontiguousarray(shards[order], dtype=np.int32))
        with self._lock:
            self._rankings.append(entry)
            self._size += len(order)
            while (self._size > self.limit or len(self._rankings) > self.rankings) and \
                    len(self._rankings) > 1:
                self._size -= len(self._rankings.popleft()[0])

    def get(self, start: int) -> int | None:
        """The shard that ranked the container starting at `start`, if one is kept."""
        with self._lock:  # (searched in place: a copy of thousands of small rankings
            for starts, shards in reversed(self._rankings):  # cost 0.1 ms a lookup)
                i = int(starts.searchsorted(start))
                if i < len(starts) and starts[i] == start:
                    return int(shards[i])
        return None

    def __len__(self) -> int:
        return self._size
