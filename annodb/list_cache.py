"""The decoded lists a process keeps for its snapshots (lists.Lists reads through it).

Decoded lists and directories are shared by the snapshots of one committed state through
ListCache, keyed by LMDB's transaction id (a commit changes it, so nothing of another state
is seen), least recently used dropped past a byte budget the user sets (`annodb.open(...,
cache_bytes=...)`). A list larger than a quarter of the budget is not cached whole: it
is read by blocks, so no query falls off a cliff when a list outgrows the cache. A
container list that a query's probes reach most of (the documents `:` under every BM25
ranking: a common word's postings are in nearly all of its blocks) is cached up to the
whole budget: not cached, it was decoded whole again at every such query, work in
proportion to the collection (at 4x the scale corpus, 6.7M documents, 107 MB decoded: a
median free-text search took 0.26 s, now 0.05 s). A budget of 18 bytes per document or
more keeps it (16 for the list, and after a commit room for a sixteenth more, see _Room).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .doc_cache import DocumentCache
from .intervals import Intervals
from .storage import zero_values

CACHE_BYTES = 256 << 20
DERIVED_SHARE = 3.0  # what derived() keeps (a word's documents) has this x the budget, apart
# (at 4x the scale corpus the 86 RAG questions' words, BM25 then RM3, keep 626 MB of them)
FACTS = 200_000  # lookups kept per committed state (ListCache.facts), ~100 bytes each


class _Room:
    """The arrays of the newest version of a list cached whole, with room at their end, so
    that the next version, when it only appends, is written in place: the cached views of
    the first `used` intervals stay as they are (see Lists._patched)."""

    def __init__(self, pieces: list[tuple[Intervals, slice]]):
        """The intervals of the pieces (a list and a slice of it each), one after the
        other, with room for a sixteenth more (and 4,096)."""
        n = sum(len(range(*r.indices(len(a)))) for a, r in pieces)
        capacity = n + n // 16 + 4096
        self.points = all(_points(a) for a, _ in pieces)
        self.zero = all(_zero(a) for a, _ in pieces)
        self.s = np.empty(capacity, dtype=np.int64)
        self.e = self.s if self.points else np.empty(capacity, dtype=np.int64)
        self.v = None if self.zero else np.empty(capacity, dtype=np.float64)
        self.used = 0
        for a, r in pieces:
            self._write(Intervals(a.starts[r], a.ends[r], a.values[r]))

    def _write(self, part: Intervals) -> None:
        at, to = self.used, self.used + len(part)
        self.s[at:to] = part.starts
        if not self.points:
            self.e[at:to] = part.ends
        if self.v is not None:
            self.v[at:to] = part.values
        self.used = to

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in {id(a): a for a in (self.s, self.e, self.v)
                                      if a is not None}.values())

    def append(self, part: Intervals) -> bool:
        """Write part after the used intervals, if it fits the room and the arrays' kind."""
        if self.used + len(part) > len(self.s) or (self.points and not _points(part)) or \
                (self.zero and not _zero(part)):
            return False
        self._write(part)
        return True

    def view(self) -> Intervals:
        n = self.used
        s = self.s[:n]
        return Intervals(s, s if self.points else self.e[:n],
                         zero_values(n) if self.v is None
                         else self.v[:n])


def _points(a: Intervals) -> bool:
    return a.ends is a.starts or np.array_equal(a.starts, a.ends)


def _zero(a: Intervals) -> bool:
    return a.values.strides == (0,) or not a.values.any()


class ListCache:
    """Decoded lists (and list directories) shared by the snapshots of one committed state:
    keyed by (LMDB transaction id, ...), least recently used dropped past `max_bytes`.
    Nothing larger than a quarter of the budget is kept, but a container list (see the
    module docstring), up to the whole budget."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        # what the newest committed state's snapshots looked up (feature ids, list states;
        # see Lists._fact): (its transaction id, {key: value})
        self.facts: tuple[int, dict] = (-1, {})
        self._items: OrderedDict = OrderedDict()  # key -> (value, bytes, room, container)
        self._lock = threading.Lock()
        self.newest: dict[tuple, tuple] = {}  # (kind, fid) -> key of its newest version
        self.documents = DocumentCache()  # decoded documents by start (doc_cache.py)
        # what is derived from whole lists (Lists.derived: a word's documents), in a budget
        # of its own as large, so that the longest lists cannot push it out, nor it them:
        # key -> (value, bytes), least recently used first; and for each group of lists
        # (a kind and their ids) the key and the lists' keys of its newest version
        self.derived_bytes = 0
        self._derived: OrderedDict = OrderedDict()
        self._asked: dict[tuple, bool] = {}  # groups derived() was asked for (see again)
        self.derived_newest: dict[tuple, tuple[str, tuple]] = {}

    def get(self, key):
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def get_many(self, keys: list) -> list:
        """get of each key (None where absent), under one hold of the lock."""
        return self._many(self._items, keys)

    def get_derived_many(self, keys: list) -> list:
        """What derived() keeps under each key (None where nothing), under one hold of
        the lock."""
        return self._many(self._derived, keys)

    def _many(self, items: OrderedDict, keys: list) -> list:
        """The value under each key of `items` (None where absent), each found made the
        most recently used, under one hold of the lock."""
        out = []
        with self._lock:
            for key in keys:
                found = items.get(key)
                if found is not None:
                    items.move_to_end(key)
                    found = found[0]
                out.append(found)
        return out

    def again(self, group: tuple) -> bool:
        """Whether `group` was asked about before (by again(); the record is started over
        past FACTS groups)."""
        with self._lock:
            if group in self._asked:
                return True
            if len(self._asked) >= FACTS:
                self._asked.clear()
            self._asked[group] = True
            return False

    @property
    def derived_max(self) -> int:
        """The budget of what derived() keeps (DERIVED_SHARE x max_bytes)."""
        return int(self.max_bytes * DERIVED_SHARE)

    def derived_room(self, size: int) -> bool:
        """Whether `size` bytes more fit what derived() keeps without dropping any."""
        return self.derived_bytes + size <= self.derived_max

    def put_derived(self, key: str, value, size: int, group: tuple | None = None,
                    lists: tuple = ()) -> None:
        """Keep value under key (derived from the lists whose cache keys are `lists`, of
        `group`); an earlier version of the group's is dropped (a snapshot of its state
        keeps its own)."""
        if size > self.derived_max // 4:
            return
        with self._lock:
            items = self._derived
            if key in items:
                return
            items[key] = (value, size, group)
            self.derived_bytes += size
            if group is not None:
                newest = self.derived_newest.get(group)
                if newest is None or all(o[2:] <= n[2:] for o, n in zip(newest[1], lists)):
                    self.derived_newest[group] = (key, lists)
                    gone = None if newest is None or newest[0] == key else \
                        items.pop(newest[0], None)
                    if gone is not None:
                        self.derived_bytes -= gone[1]
            most = self.derived_max
            while self.derived_bytes > most:
                old_key, (_, old, old_group) = items.popitem(last=False)
                self.derived_bytes -= old
                newest = self.derived_newest.get(old_group)
                if newest is not None and newest[0] == old_key:   # (what names the group's
                    del self.derived_newest[old_group]            # newest is gone: forgotten)

    def admits(self, size: int, container: bool = False) -> bool:
        return size <= (self.max_bytes if container else self.max_bytes // 4)

    def put(self, key, value, size: int, container: bool = False, room=None) -> None:
        if not self.admits(size, container):
            return
        with self._lock:
            self._insert(key, value, size, container, room)

    def _insert(self, key, value, size: int, container: bool, room) -> None:
        if key in self._items:
            return
        self._items[key] = (value, size, room, container)
        self.bytes += size
        if key[0] in ("list", "dir"):  # (kind, fid, version, erased): see Lists._key
            newest = self.newest.get(key[:2])
            if newest is None or newest[2:] < key[2:]:  # (version, erased)
                self.newest[key[:2]] = key
                gone = None if newest is None else self._items.pop(newest, None)
                if gone is not None:  # (a snapshot of its state keeps its own)
                    self.bytes -= gone[1]
        while self.bytes > self.max_bytes:
            _, (_, old, _, _) = self._items.popitem(last=False)
            self.bytes -= old

    def extend(self, old_key, key, old: Intervals, part: Intervals, low: int,
               kept: list[slice] | None = None) -> Intervals | None:
        """The list `key` whose intervals starting before `low` are those of the cached
        list `old_key` (old; or only its runs `kept`, the rest erased since), and the
        rest `part`: written in place after old's when it only appends and old is its
        room's newest version, else copied into a new room. It replaces old_key in the
        cache; None when old_key is no longer cached."""
        cut = int(np.searchsorted(old.starts, low, side="left"))
        with self._lock:
            entry = self._items.get(old_key)
            if entry is None:
                return None
            room, container = entry[2], entry[3]
            if kept is None and room is not None and cut == len(old) == room.used and \
                    room.append(part):
                value = room.view()
            else:
                room = None
        if room is None:
            runs = [slice(0, cut)] if kept is None else \
                [slice(r.start, min(r.stop, cut)) for r in kept if r.start < cut]
            room = _Room([(old, r) for r in runs] + [(part, slice(None))])
            value = room.view()
        self.replace(old_key, key, value, room.nbytes, container, room)
        return value

    def replace(self, old_key, key, value, size: int, container: bool = False,
                room=None) -> None:
        """Put value under key, dropping old_key's (an earlier version of it)."""
        with self._lock:
            gone = self._items.pop(old_key, None)
            if gone is not None:
                self.bytes -= gone[1]
            if self.admits(size, container):
                self._insert(key, value, size, container, room)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0
            self.newest.clear()
            self.facts = (-1, {})
            self._derived.clear()
            self._asked.clear()
            self.derived_bytes = 0
            self.derived_newest.clear()
        self.documents.clear()
