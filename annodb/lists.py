"""Annotation lists as a query reads them: whole, or only the blocks a plan needs.

A feature's list is stored in blocks (storage.py) keyed by their first start, so the keys
alone are a directory: block i holds the intervals starting in [firsts[i], firsts[i+1]).
A query that only probes a long list (the document list `:` to find which documents hold a
rare word's matches; a common word inside the documents that matter) reads the blocks
holding the probes, with one LMDB getmulti and one decoding kernel call, instead of the
whole list. What the probes need decides which blocks:

    inside(f, los, his)      the intervals lying inside one of the ranges [lo, hi]
    containing(f, ps, qs)    the intervals containing one of the probe intervals [p, q]
    near(f, xs)              for points: the last point <= x and the first point >= x

Each gives exactly what the whole list would give for that question (erased content is
dropped as from the whole list). A list already decoded (in the cache) is filtered instead,
and one whose probes fall in most of its blocks is decoded whole.

Decoded lists and directories are shared by the snapshots of one committed state through
ListCache, keyed by LMDB's transaction id (a commit changes it, so nothing of another state
is seen), least recently used dropped past a byte budget the user sets (`annodb.open(...,
cache_bytes=...)`). A list larger than a quarter of the budget is not cached whole: it
is read by blocks, so no query falls off a cliff when a list outgrows the cache. A
container list that a query's probes reach most of (the documents `:` under every BM25
ranking: a common word's postings are in nearly all of its blocks) is cached up to the
whole budget: not cached, it was decoded whole again at every such query, work in
proportion to the collection (at 4x the scale corpus, 6.7M documents, 107 MB decoded: a
median free-text search took 0.26 s, now 0.05 s). A budget of 16 bytes per document or
more keeps it.

A commit that changes a list changes its directory's key in the cache, and reading a
directory takes one step per block: the documents' list `:` changes with every document
added, so the first query after each commit read 52,164 keys at 4x the scale corpus. A
list whose directory this process has read before is probed by cursor seeks instead
(storage's blocks_over: a few steps per block found), until the seeks in its new state add
up to about one whole read; then the directory is read and kept as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from . import kernels
from .storage import OVERLAPPING, UNKNOWN

EMPTY_I = np.empty(0, dtype=np.int64)
EMPTY_F = np.empty(0, dtype=np.float64)
CACHE_BYTES = 256 << 20
WHOLE_FRACTION = 0.5  # probes in this share of a list's blocks or more: decode it whole
SMALL_LIST = 4096     # a list this short is decoded whole rather than probed (about a block)
SEEKS_PER_READ = 2    # blocks / this: directory seeks costing about one whole read


@dataclass(frozen=True)
class Intervals:
    """An annotation list: parallel arrays sorted by start, no interval nested in another."""

    starts: np.ndarray
    ends: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self):
        return zip(self.starts.tolist(), self.ends.tolist(), self.values.tolist())

    @staticmethod
    def empty() -> "Intervals":
        return Intervals(EMPTY_I, EMPTY_I, EMPTY_F)

    def take(self, idx: np.ndarray) -> "Intervals":
        """The intervals at the (increasing) indices idx."""
        if len(idx) == len(self.starts):
            return self
        return Intervals(self.starts[idx], self.ends[idx], self.values[idx])

    def nbytes(self) -> int:
        """Bytes these arrays hold: an array sharing another's memory (ends of points are
        their starts) once, a zero-stride broadcast (all values 0) not at all."""
        size = 0
        seen = []
        for a in (self.starts, self.ends, self.values):
            if a.strides == (0,) or any(np.may_share_memory(a, b) for b in seen):
                continue
            seen.append(a)
            size += a.nbytes
        return size


class ListCache:
    """Decoded lists (and list directories) shared by the snapshots of one committed state:
    keyed by (LMDB transaction id, ...), least recently used dropped past `max_bytes`.
    Nothing larger than a quarter of the budget is kept, but a container list (see the
    module docstring), up to the whole budget."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._items: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._lock = threading.Lock()
        self.blocks: dict[int, int] = {}   # feature id -> its block count when last read
        self._sought: dict = {}            # (list state) -> ranges sought without it

    def seek(self, key, n: int, limit: int) -> bool:
        """Whether a list's directory may be sought for n more ranges (see
        Lists._sought_blocks): yes while the ranges sought in its state, n included, are
        at most `limit`."""
        with self._lock:
            total = self._sought.get(key, 0) + n
            if total > limit:
                return False
            if len(self._sought) > 100_000:
                self._sought.clear()
            self._sought[key] = total
            return True

    def get(self, key):
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def admits(self, size: int, container: bool = False) -> bool:
        return size <= (self.max_bytes if container else self.max_bytes // 4)

    def put(self, key, value, size: int, container: bool = False) -> None:
        if not self.admits(size, container):
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, old) = self._items.popitem(last=False)
                self.bytes -= old

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0
            self.blocks.clear()
            self._sought.clear()


class Lists:
    """The annotation lists of one transaction (storage.Txn). `shared` is the process's
    ListCache for a read transaction, None for a write transaction (whose lists change as
    it flushes: `reset()` forgets what it decoded). `read` counts the intervals decoded,
    which a query's budget charges."""

    def __init__(self, txn, shared: ListCache | None):
        self._txn = txn
        self._shared = shared
        self._local: dict = {}
        self._erased = None
        self.read = 0
        self.sought = 0   # ranges whose blocks were sought (not read from a directory)

    def reset(self) -> None:
        self._local.clear()
        self._erased = None

    # ------------------------------------------------------------------ plumbing

    def _state(self, fid: int) -> tuple:
        key = ("state", fid)
        found = self._local.get(key)
        if found is None:
            found = self._local[key] = self._txn.list_state(fid)
        return found

    def _erased_version(self):
        """What the erased ranges' state is known by: 0 when there are none, the id of the
        transaction that last changed them, or None when not recorded (format 3)."""
        key = ("erased-version",)
        if key not in self._local:
            version = self._txn.meta("erased_version")
            if version is None and self._txn.has_erased():
                self._local[key] = None
            else:
                self._local[key] = version or 0
        return self._local[key]

    def _key(self, kind: str, fid: int) -> tuple:
        """The shared cache's key for something decoded of list `fid`: its version (and the
        erased ranges'), so it outlives commits that touch neither; the snapshot's own
        state where a version is not recorded."""
        version = self._state(fid)[1]
        erased = self._erased_version()
        if version is None or erased is None:
            return (self._txn.id, kind, fid)
        return (kind, fid, version, erased)

    def _get(self, kind: str, fid: int):
        found = self._local.get((kind, fid))
        if found is None and self._shared is not None:
            found = self._shared.get(self._key(kind, fid))
            if found is not None:
                self._local[(kind, fid)] = found
        return found

    def _put(self, kind: str, fid: int, value, size: int, container: bool = False) -> None:
        self._local[(kind, fid)] = value
        if self._shared is not None:
            self._shared.put(self._key(kind, fid), value, size, container)

    def erased(self) -> tuple[np.ndarray, np.ndarray]:
        """The erased ranges: sorted, disjoint."""
        if self._erased is None:
            version = self._erased_version()
            key = ("erased", version)
            found = None
            if self._shared is not None and version is not None:
                found = self._shared.get(key)
            if found is None:
                found = self._txn.erased()
                if self._shared is not None and version is not None:
                    self._shared.put(key, found, found[0].nbytes * 2 + 100)
            self._erased = found
        return self._erased

    def _live(self, s, e, v) -> Intervals:
        """The intervals not inside an erased range."""
        es, ee = self.erased()
        if len(es) and len(s):
            keep = kernels.drop_erased(s, e, es, ee)
            if len(keep) != len(s):
                s, e, v = s[keep], e[keep], v[keep]
        return Intervals(s, e, v)

    def fid(self, feature: str) -> int | None:
        key = ("fid", feature)
        found = self._local.get(key)
        if found is None:
            found = self._txn.feature_id(feature)
            self._local[key] = -1 if found is None else found
            return found
        return None if found < 0 else found

    def _firsts(self, fid: int) -> np.ndarray:
        found = self._get("dir", fid)
        if found is None:
            found = self._txn.block_firsts(fid)
            self._put("dir", fid, found, found.nbytes + 100)
            if self._shared is not None:
                self._shared.blocks[fid] = len(found)
        return found

    def _sought_blocks(self, fid: int, los: np.ndarray, his: np.ndarray):
        """(firsts, nexts, the list's block count when last read) of the blocks meeting the
        ranges (storage's blocks_over), found by seeks when the list's whole directory is
        not at hand; or None, to read it (_firsts). A commit that changes a list (the documents `:` at every document
        added) makes its directory one to read again, one step per block: 52,164 at 4x the
        scale corpus, 30-90 ms for the first query after each commit, growing with the
        collection. Seeks cost a few steps per block they find instead (about 2x a full
        read's per block), so they are taken while the ranges sought in the list's state
        stay under half its block count when last read (costing, all together, about one
        full read); past that the directory is read and kept, as before. A list whose
        directory this process never read is read (its block count is not known)."""
        if self._shared is None or self._get("dir", fid) is not None:
            return None
        blocks = self._shared.blocks.get(fid)
        if blocks is None or not self._shared.seek(self._key("sought", fid), len(los),
                                                   blocks // SEEKS_PER_READ):
            return None
        self.sought += len(los)
        return (*self._txn.blocks_over(fid, los, his), blocks)

    def _read(self, fid: int, firsts: np.ndarray) -> Intervals:
        s, e, v = self._txn.read_blocks(fid, firsts)
        self.read += len(s)
        return self._live(s, e, v)

    # ------------------------------------------------------------------ questions

    def disjoint(self, feature: str) -> bool:
        """True when no two intervals of the list overlap (documents, fields, words): each
        block's intervals then lie inside its block range (see block_ranges)."""
        fid = self.fid(feature)
        return fid is not None and not self._state(fid)[2] & (OVERLAPPING | UNKNOWN)

    def block_ranges(self, feature: str, ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ranges [firsts[j], firsts[j + 1] - 1] of the blocks j of a disjoint list that
        hold the last interval starting at or before one of the sorted positions ps: for
        each p, the one interval that can contain it lies inside one of these ranges.
        Sorted, disjoint; read from the directory alone."""
        fid = self.fid(feature)
        if fid is None or not len(ps):
            return EMPTY_I, EMPTY_I
        ps = _distinct(ps)
        sought = self._sought_blocks(fid, ps, ps)
        if sought is not None:
            firsts, nexts, _ = sought
            return firsts, np.where(nexts < 0, np.iinfo(np.int64).max, nexts - 1)
        firsts = self._firsts(fid)
        at = _distinct(np.searchsorted(firsts, ps, side="right") - 1)
        at = at[at >= 0]
        nexts = np.append(firsts[1:], np.iinfo(np.int64).max)
        return firsts[at], nexts[at] - (at < len(firsts) - 1)

    def cached(self, feature: str) -> Intervals | None:
        """The whole list if it is decoded already (here or in the shared cache)."""
        fid = self.fid(feature)
        return Intervals.empty() if fid is None else self._get("list", fid)

    def stored_count(self, feature: str) -> int:
        """How many intervals the stored list holds, erased ones included, whether or not
        it is decoded (count() is exact once it is): the same in every snapshot of one
        state, so statistics weighed by it do not depend on what was read before."""
        fid = self.fid(feature)
        return 0 if fid is None else self._state(fid)[0]

    def count(self, feature: str) -> int:
        """How many intervals the list holds, without reading it (erased ones included
        unless it is decoded: an upper bound)."""
        fid = self.fid(feature)
        if fid is None:
            return 0
        found = self._get("list", fid)
        return len(found) if found is not None else self._state(fid)[0]

    def statistics(self, feature: str) -> tuple[int | None, float | None]:
        """(df, high) of the list as stored (see storage's counts): the live documents
        holding one of a word's postings, and a bound of its values; None when not known."""
        fid = self.fid(feature)
        if fid is None:
            return 0, 0.0
        state = self._state(fid)
        return state[3], state[4]

    def whole(self, feature: str, container: bool = False) -> Intervals:
        """The whole list (erased content removed); a `container` list probed in most of
        its blocks is cached up to the whole budget (see the module docstring)."""
        fid = self.fid(feature)
        if fid is None:
            return Intervals.empty()
        found = self._get("list", fid)
        if found is None:
            s, e, v = self._txn.read_list(fid)
            self.read += len(s)
            found = self._live(s, e, v)
            self._put("list", fid, found, found.nbytes() + 100, container)
        return found

    def _whole_if_cheap(self, feature: str) -> Intervals | None:
        """The whole list when it is decoded already or about a block long, else None."""
        found = self.cached(feature)
        if found is None and self.count(feature) <= SMALL_LIST:
            found = self.whole(feature)
        return found

    def _blocks_or_whole(self, feature: str, fid: int, firsts: np.ndarray, needed):
        """The intervals of the needed blocks (indices into firsts), or the whole list when
        they are most of it."""
        if len(needed) >= WHOLE_FRACTION * len(firsts):
            return self.whole(feature)
        return self._read(fid, firsts[needed])

    def inside(self, feature: str, los: np.ndarray, his: np.ndarray) -> Intervals:
        """The intervals of the list lying inside one of the ranges [los[i], his[i]]
        (sorted, disjoint)."""
        if not len(los):
            return Intervals.empty()
        found = self._whole_if_cheap(feature)
        if found is None:
            fid = self.fid(feature)
            if fid is None:
                return Intervals.empty()
            # an interval starting in [lo, hi] is in the block holding lo or a later one
            # whose first start is <= hi
            sought = self._sought_blocks(fid, los, his)
            if sought is not None:
                needed, _, blocks = sought
                found = self.whole(feature) if len(needed) >= WHOLE_FRACTION * blocks \
                    else self._read(fid, needed)
            else:
                firsts = self._firsts(fid)
                a = np.maximum(np.searchsorted(firsts, los, side="right") - 1, 0)
                b = np.searchsorted(firsts, his, side="right") - 1
                keep = b >= a
                found = self._blocks_or_whole(feature, fid, firsts,
                                              _spans(a[keep], b[keep]))
        return found.take(kernels.contained_in(found.starts, found.ends, los, his))

    def containing(self, feature: str, ps: np.ndarray, qs: np.ndarray) -> Intervals:
        """The intervals of the list that contain one of the probes [ps[i], qs[i]] (sorted
        by start and by end: a GC-list)."""
        if not len(ps):
            return Intervals.empty()
        found = self._whole_if_cheap(feature)
        if found is None:
            fid = self.fid(feature)
            if fid is None:
                return Intervals.empty()
            # in a disjoint list only the interval starting last at or before p can
            # contain [p, q], and it is in the block holding p
            sought = self._sought_blocks(fid, _distinct(ps), _distinct(ps)) \
                if self.disjoint(feature) else None
            if sought is not None:
                needed, _, blocks = sought
                found = self.whole(feature, container=True) if len(needed) >= \
                    WHOLE_FRACTION * blocks else self._read(fid, needed)
                return found.take(kernels.containing(found.starts, found.ends, ps, qs))
            firsts = self._firsts(fid)
            # the intervals containing [p, q] start at or before p: a run that ends at the
            # last such, in the block holding p, and reaches into the block before only
            # when the first interval of the block holds the probe too
            at = np.searchsorted(firsts, ps, side="right") - 1
            live = at >= 0
            ps, qs, at = ps[live], qs[live], at[live]
            needed = _distinct(at)
            if len(needed) >= WHOLE_FRACTION * len(firsts):
                found = self.whole(feature, container=True)
            else:
                s, e, v = self._txn.read_blocks(fid, firsts[needed])
                while True:
                    missing = _reaching_back(s, e, firsts, needed, ps, qs, at)
                    if not len(missing):
                        break
                    ms, me, mv = self._txn.read_blocks(fid, firsts[missing])
                    needed = _distinct(np.sort(np.concatenate((needed, missing))))
                    order = np.argsort(np.concatenate((s, ms)), kind="stable")
                    s, e, v = (np.concatenate((s, ms))[order], np.concatenate((e, me))[order],
                               np.concatenate((np.asarray(v), np.asarray(mv)))[order])
                self.read += len(s)
                found = self._live(s, e, v)
        return found.take(kernels.containing(found.starts, found.ends, ps, qs))

    def near(self, feature: str, xs: np.ndarray) -> np.ndarray:
        """For sorted positions xs, the points of the list (a word's postings) just at or
        before and at or after each: sorted, distinct."""
        if not len(xs):
            return EMPTY_I
        found = self._whole_if_cheap(feature)
        if found is None and len(self.erased()[0]):
            found = self.whole(feature)  # (the nearest live point may be blocks away)
        if found is None:
            fid = self.fid(feature)
            if fid is None:
                return EMPTY_I
            firsts = self._firsts(fid)
            # the block holding x, and the next one (its first point may be the first >= x)
            at = np.maximum(np.searchsorted(firsts, xs, side="right") - 1, 0)
            needed = _distinct(np.sort(np.concatenate((at, np.minimum(at + 1,
                                                                       len(firsts) - 1)))))
            found = self._blocks_or_whole(feature, fid, firsts, needed)
        pts = found.starts
        if not len(pts):
            return EMPTY_I
        i = np.searchsorted(pts, xs, side="right")
        before = pts[i[i > 0] - 1]
        j = np.searchsorted(pts, xs, side="left")
        after = pts[j[j < len(pts)]]
        return _distinct(np.sort(np.concatenate((before, after))))


def _distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (numpy's unique hashes, ~200x slower here), a
    new array (callers change theirs in place)."""
    if len(a) < 2:
        return a.copy()
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


def _spans(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distinct integers of the ranges [a[i], b[i]] (a, b nondecreasing), ascending."""
    if not len(a):
        return EMPTY_I
    counts = b - a + 1
    total = int(counts.sum())
    starts = np.repeat(a - (np.cumsum(counts) - counts), counts)
    return _distinct(np.sort(starts + np.arange(total, dtype=np.int64)))


def _reaching_back(s, e, firsts, needed, ps, qs, at) -> np.ndarray:
    """The blocks not read yet (not in `needed`) that may hold intervals containing a
    probe. s, e: the needed blocks as read (erased intervals included, so each block's
    first interval starts at its key). at[k]: the block holding the last interval that
    starts at or before probe k; while that block's first interval contains the probe
    too, the run of containing intervals goes on in the block before: at[k] moves back
    (in place) until it does not, or reaches a block not read."""
    while True:
        first = np.searchsorted(s, firsts[at], side="left")
        reach = (e[first] >= qs) & (at > 0)
        if not reach.any():
            return EMPTY_I
        at[reach] -= 1
        moved = _distinct(np.sort(at[reach]))
        missing = moved[~np.isin(moved, needed)]
        if len(missing):
            return missing
