"""Annotation lists as a query reads them: whole, or only the blocks a plan needs.

A feature's list is stored in blocks (storage/layout.py) keyed by their first start, so the keys
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
list_cache.ListCache (its docstring says what it keeps and what it drops).

A commit that changes a list changes its key in the cache, so what was decoded of it is
read again: the documents' list `:` changes with every document added, and the first
query after each commit read its directory (52,164 keys at 4x the scale corpus) and
decoded it whole for BM25 (107 MB), as it did the common words the new text holds: work
per commit in proportion to the collection, at every search after an agent's `remember`.
A long list's record of its last changes (storage's `changes`: the lowest start each
commit changed) tells what of the new version is as it was: the directory is kept up to
there and read on from it (Lists._patched_directory), and of a list cached whole only the
intervals from there on are decoded and joined to the cached rest (Lists._patched). A
change that only appends, as a new document or note does, is written in place into room
kept at the arrays' end (list_cache._Room), so it costs what it adds; any other copies the list once
instead of decoding it. A delete adds erased ranges: a list cached whole that holds
intervals inside them is copied without those (no decoding), others and the directories
are kept as they are.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .intervals import EMPTY_I, Intervals
from .list_cache import FACTS, ListCache
from .storage import MAX_ADDRESS, OVERLAPPING, UNKNOWN, zero_values

WHOLE_FRACTION = 0.5  # probes in this share of a list's blocks or more: decode it whole
SMALL_LIST = 4096     # a list this short is decoded whole rather than probed (about a block)
# In a snapshot's own lookups (Lists._local): the shared cache was asked for this and did
# not hold it, so the next question about the same list costs one dict lookup, not the
# key's making and the shared cache's lock (a query asks for each word's list 5-10 times).
_ABSENT = object()


def _or_minus_one(fid: int | None) -> int:
    return -1 if fid is None else fid


class Lists:
    """The annotation lists of one transaction (storage.Txn). `shared` is the process's
    ListCache for a read transaction, None for a write transaction (whose lists change as
    it flushes: `reset()` forgets what it decoded). `read` counts the intervals decoded,
    which a query's budget charges."""

    def __init__(self, txn, shared: ListCache | None):
        self._txn = txn
        self._shared = shared
        self._local: dict = {}
        self._fids: dict[str, int] = {}  # feature -> its id or -1 (as _fact's, one lookup)
        self._states: dict[int, tuple] = {}  # fid -> its list's state (as _fact's)
        self._erased: tuple[np.ndarray, np.ndarray] | None = None
        self._intact: bool | None = None  # a read snapshot with nothing erased (see count)
        self.read = 0
        self.patched = 0  # lists and directories read in part, the rest kept from an
                          # earlier version (see _patched)

    def reset(self) -> None:
        self._local.clear()
        self._fids.clear()
        self._states.clear()
        self._erased = None
        self._intact = None

    # ------------------------------------------------------------------ plumbing

    def _fact(self, key: tuple, look):
        """look(), a lookup in this snapshot's committed state (a feature's id, a list's
        state), kept for the transaction and shared with the process's other snapshots of
        the same committed state (each query's snapshot asks again for the same words)."""
        found = self._local.get(key)
        if found is not None:
            return found
        shared = self._shared
        if shared is None:
            found = self._local[key] = look()
            return found
        facts: dict | None
        tid, facts = shared.facts
        if tid == self._txn.id:
            found = facts.get(key)
            if found is not None:
                return found
        elif tid < self._txn.id:  # a newer state: the older one's facts are dropped
            facts = {}
            shared.facts = (self._txn.id, facts)
        else:
            facts = None  # (a snapshot older than the newest: its own lookups only)
        if found is None:
            found = look()
            if facts is not None and len(facts) < FACTS:
                facts[key] = found
        self._local[key] = found
        return found

    def remembered(self, key: tuple, look):
        """look() for this snapshot's committed state, kept for the process's snapshots of
        that state (see _fact): what rankers work out again at every query of the same
        words (their forms, their statistics). look() must depend on that state only."""
        return self._fact(key, look)

    def remembered_many(self, keys: list, look) -> list:
        """remembered(key, lambda: look(key)) of each key, in one pass."""
        local = self._local
        shared = self._shared
        facts: dict = {}
        if shared is not None:
            tid, known = shared.facts
            if tid == self._txn.id:
                facts = known
        out = []
        for key in keys:
            found = local.get(key)
            if found is None:
                found = facts.get(key)
                if found is None:
                    found = self._fact(key, lambda key=key: look(key))
            out.append(found)
        return out

    def remembered_each(self, name: str, items: list, look) -> list:
        """look(item) of each item (never None) for this snapshot's committed state, kept
        for the process's snapshots of that state in one table per `name` (see _fact): a
        query's words found with one lookup each (map), not a key made and looked up in
        two dictionaries. look() must depend on that state only."""
        table = self._fact(("table", name), dict)
        out = list(map(table.get, items))
        if None in out:
            for i, item in enumerate(items):
                if out[i] is None:
                    found = out[i] = look(item)
                    if len(table) < FACTS:
                        table[item] = found
        return out

    def derived(self, key: str, make, lists: tuple = (), extend=None):
        """make() -> (value, its bytes) or None: something computed from whole lists alone
        (bm25.py: a word's documents), kept under `key` (held's: a kind and the lists'
        cache keys, i.e. their versions and the erased ranges', in a string) for every
        snapshot that sees those lists as they are, in this snapshot and the shared
        cache (its own budget: ListCache.put_derived). None (not kept) when make() gives
        None.

        `lists`: (a kind, the lists' ids, their cache keys) as held() gives them;
        `extend(old, low, erased)` -> (value, bytes) or None: the value of an earlier
        version of the same lists made the value of these, given the lowest start changed
        since in any of them (None: none) and, when ranges were erased since (those then
        a subset of those now), the erased ranges' version then (else None): used instead
        of make() when such a version is kept and the lists' records of changes reach
        back to it (see _patched)."""
        found = self._local.get(key)
        if found is None:
            shared = self._shared
            found = None if shared is None else shared.get_derived_many([key])[0]
            if found is None:
                group = (lists[0],) + tuple(lists[1]) if lists else None
                made = None
                if extend is not None and shared is not None and group is not None:
                    earlier = shared.derived_newest.get(group)
                    if earlier is not None and earlier[0] != key:
                        change = self._changed_since(lists[1], earlier[1], lists[2])
                        old = None if change is None else \
                            shared.get_derived_many([earlier[0]])[0]
                        if old is not None:
                            assert change is not None
                            made = extend(old, *change)
                            if made is not None:
                                self.patched += 1
                if made is None:
                    made = make()
                if made is None:
                    return None
                found, size = made
                if shared is not None:
                    shared.put_derived(key, found, size, group, tuple(lists[2]) if lists
                                       else ())
            self._local[key] = found
        return found

    def derived_room(self, size: int, lists: tuple) -> bool:
        """Whether `size` bytes more fit the budget of what derived() keeps without
        dropping any of it (ListCache.derived_room; False without a shared cache), and
        the lists (held's `lists`: a kind, their ids, ...) were asked about before, in
        this state or another (ListCache.again)."""
        shared = self._shared
        return shared is not None and shared.derived_room(size) and \
            shared.again((lists[0],) + tuple(lists[1]))

    def _changed_since(self, fids, old_keys, keys) -> tuple[int | None, object] | None:
        """(the lowest start changed in the lists `fids` since their cache keys were
        old_keys (now keys), None when none; the erased ranges' version then when ranges
        were erased since, else None), or None when that is not known: a list without a
        version or a record of changes reaching back, or erased ranges given back."""
        low: int | None = None
        erased = None
        for fid, old, key in zip(fids, old_keys, keys):
            if old == key:
                continue
            if old[0] != "list" or key[0] != "list" or old[2] > key[2]:
                return None
            if old[3] != key[3]:
                if not self._erased_grew(old[3]):
                    return None
                erased = old[3]
            if old[2] != key[2]:
                since = _low_since(self._txn.list_changes(fid), old[2], key[2])
                if since is None:
                    return None
                low = since if low is None else min(low, since)
        return low, erased

    def erased_since(self, version) -> tuple[np.ndarray, np.ndarray]:
        """The erased ranges that were not, as they are, erased ranges as of erased
        version `version` (all of them when that is no longer cached)."""
        es, ee = self.erased()
        found = None if self._shared is None else self._shared.get(("erased", version))
        if found is None or not len(found[0]) or not len(es):
            return es, ee
        os_, oe = found
        at = np.minimum(np.searchsorted(os_, es), len(os_) - 1)
        new = (os_[at] != es) | (oe[at] != ee)
        return es[new], ee[new]

    def since(self, feature: str, low: int) -> Intervals:
        """The list's intervals starting at or after `low` (erased content removed): a
        slice of the whole list when it is decoded, else decoded from the block holding
        low on."""
        fid = self.fid(feature)
        if fid is None:
            return Intervals.empty()
        found = self._get("list", fid)
        if found is not None:
            at = int(np.searchsorted(found.starts, low, side="left"))
            return Intervals(found.starts[at:], found.ends[at:], found.values[at:])
        s, e, v = self._txn.read_list(fid, low)
        self.read += len(s)
        return self._live(s, e, v)

    def meta(self, name: str, default=None):
        """The committed state's meta value `name` (storage's meta), kept for the process's
        snapshots of that state (a write transaction reads its own)."""
        if self._shared is None:
            return self._txn.meta(name, default)
        found = self._fact(("meta", name), lambda: (self._txn.meta(name),))[0]
        return default if found is None else found

    def _state(self, fid: int) -> tuple:
        found = self._states.get(fid)
        if found is None:
            found = self._states[fid] = self._fact(("state", fid),
                                                   lambda: self._txn.list_state(fid))
        return found

    def _erased_version(self):
        """What the erased ranges' state is known by: 0 when there are none, the id of the
        transaction that last changed them, or None when not recorded (format 3)."""
        def look():
            version = self._txn.meta("erased_version")
            return (None if version is None and self._txn.has_erased() else version or 0,)
        return self._fact(("erased-version",), look)[0]

    def _key(self, kind: str, fid: int) -> tuple:
        """The shared cache's key for something decoded of list `fid`: its version (and the
        erased ranges'), so it outlives commits that touch neither; the snapshot's own
        state where a version is not recorded."""
        return self._fact(("key", kind, fid), lambda: self._made_key(kind, fid))

    def _made_key(self, kind: str, fid: int) -> tuple:
        version = self._state(fid)[1]
        erased = self._erased_version()
        if version is None or erased is None:
            return (self._txn.id, kind, fid)
        return (kind, fid, version, erased)

    def _get(self, kind: str, fid: int):
        found = self._local.get((kind, fid))
        if found is None:
            if self._shared is None:
                return None
            found = self._shared.get(self._key(kind, fid))
            self._local[(kind, fid)] = _ABSENT if found is None else found
        return None if found is _ABSENT else found

    def _put(self, kind: str, fid: int, value, size: int, container: bool = False) -> None:
        self._local[(kind, fid)] = value
        if self._shared is not None:
            self._shared.put(self._key(kind, fid), value, size, container)

    def documents(self):
        """(the process's DocumentCache, this snapshot's token for it), or (None, None)
        for a write transaction or a snapshot older than the cache's (doc_cache.py)."""
        if self._shared is None:
            return None, None
        version = self._erased_version()
        token = (0, version) if version is not None else (1, self._txn.id)
        cache = self._shared.documents
        return (cache, token) if cache.usable(token) else (None, None)

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
        found = self._fids.get(feature)
        if found is None:
            found = self._fids[feature] = self._fact(("fid", feature), lambda: _or_minus_one(
                self._txn.feature_id(feature)))
        return None if found < 0 else found

    def _firsts(self, fid: int) -> np.ndarray:
        found = self._get("dir", fid)
        if found is None:
            found = self._patched_directory(fid)
        if found is None:
            found = self._txn.block_firsts(fid)
            self._put("dir", fid, found, found.nbytes + 100)
        return found

    def _earlier(self, kind: str, fid: int):
        """(the cached earlier version of a list's `kind` and its key, this state's key,
        the lowest start changed since by the list's record of changes), or None."""
        shared = self._shared
        old_key = None if shared is None else shared.newest.get((kind, fid))
        if old_key is None:
            return None
        key = self._key(kind, fid)
        if key[0] != kind or old_key == key:
            return None
        low = None  # (the same version, only the erased ranges changed)
        if old_key[2] != key[2]:
            low = _low_since(self._txn.list_changes(fid), old_key[2], key[2])
            if low is None:
                return None
        assert shared is not None  # (old_key came from it)
        old = shared.get(old_key)
        return None if old is None else (old, old_key, key, low)

    def _patched_directory(self, fid: int) -> np.ndarray | None:
        """The list's directory from the cached one of an earlier version: its blocks
        before the one that held the lowest start changed since are kept (a commit deletes
        and adds blocks only from there on: a block it rewrites before, the last one
        refilled, keeps its key), the keys from there on are read. See _patched."""
        found = self._earlier("dir", fid)
        if found is None:
            return None
        old, old_key, key, low = found
        if low is not None and low < MAX_ADDRESS:
            at = int(np.searchsorted(old, low, side="right")) - 1
            if at < 0:
                return None
            old = np.concatenate((old[:at], self._txn.block_firsts(fid, int(old[at]))))
        assert self._shared is not None  # (_earlier found it there)
        self._shared.replace(old_key, key, old, old.nbytes + 100)
        self._local[("dir", fid)] = old
        self.patched += 1
        return old

    def _read(self, fid: int, firsts: np.ndarray) -> Intervals:
        s, e, v = self._txn.read_blocks(fid, firsts)
        self.read += len(s)
        return self._live(s, e, v)

    def _blocks(self, fid: int, firsts: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """storage's read_blocks(fid, firsts) (erased intervals included), each block kept
        decoded in the shared cache under the list's key (its version and the erased
        ranges'), so the blocks of a container list holding a query's covers (`:`, ~128
        documents a block) are read from LMDB and decoded once for the snapshots of every
        state that keeps the list as it is (the read took ~14 us a query of the 1x scale
        corpus's 4,435 real queries, 2.6 blocks). Only containers' (see containing): a
        common word's blocks, larger and many more, would push whole lists out of the
        cache. Cached arrays are read-only."""
        shared = self._shared
        if shared is None or not len(firsts):
            return self._txn.read_blocks(fid, firsts)
        base = self._key("list", fid)
        at = firsts.tolist()
        got = shared.get_many([("block", base, f) for f in at])
        missing = [i for i, g in enumerate(got) if g is None]
        if missing:
            asked = firsts if len(missing) == len(at) else firsts[missing]
            s, e, v = self._txn.read_blocks(fid, asked)
            bounds = [0] + np.searchsorted(s, asked[1:], side="left").tolist() + [len(s)]
            for k, i in enumerate(missing):
                a, b = bounds[k], bounds[k + 1]
                bs = s[a:b].copy()
                be = bs if e is s else e[a:b].copy()
                bv = v[a:b] if v.strides == (0,) else v[a:b].copy()
                for x in (bs, be, bv):
                    x.flags.writeable = False
                got[i] = (bs, be, bv)
                shared.put(("block", base, at[i]), got[i], 24 * (b - a) + 300)
            if len(missing) == len(at):
                return s, e, v
        if len(got) == 1:
            return got[0]
        s = np.concatenate([g[0] for g in got])
        e = s if all(g[1] is g[0] for g in got) else np.concatenate([g[1] for g in got])
        v = zero_values(len(s)) if all(g[2].strides == (0,) for g in got) else \
            np.concatenate([np.asarray(g[2], np.float64) for g in got])
        return s, e, v

    # ------------------------------------------------------------------ questions

    def disjoint(self, feature: str) -> bool:
        """True when no two intervals of the list overlap (documents, fields, words): each
        block's intervals then lie inside its block range (see block_ranges)."""
        fid = self.fid(feature)
        return fid is not None and not self._state(fid)[2] & (OVERLAPPING | UNKNOWN)

    def directory(self, feature: str) -> np.ndarray:
        """The list's directory: its blocks' first starts, increasing (see block_ranges)."""
        fid = self.fid(feature)
        return EMPTY_I if fid is None else self._firsts(fid)

    def block_ranges(self, feature: str, ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ranges [firsts[j], firsts[j + 1] - 1] of the blocks j of a disjoint list that
        hold the last interval starting at or before one of the sorted positions ps: for
        each p, the one interval that can contain it lies inside one of these ranges.
        Sorted, disjoint; read from the directory alone."""
        fid = self.fid(feature)
        if fid is None or not len(ps):
            return EMPTY_I, EMPTY_I
        # (each block's range ends before the next block's first; the last one's reaches to
        # the end of the addresses. One kernel call galloping through the directory: a
        # directory of `:` has an entry per ~128 documents, 52,164 at 4x the scale corpus)
        return kernels.block_ranges(self._firsts(fid), ps)

    def cached(self, feature: str) -> Intervals | None:
        """The whole list if it is decoded already (here or in the shared cache), or an
        earlier version of it is (see _patched)."""
        fid = self.fid(feature)
        if fid is None:
            return Intervals.empty()
        found = self._get("list", fid)
        return self._patched(fid) if found is None else found

    def held(self, groups: list[tuple[str, ...]], kind: str | None = None
             ) -> list[tuple[tuple[str, ...], list, int, object, str, tuple]]:
        """For each group of features: (those whose stored list holds an interval
        (stored_count > 0); each one's whole list if decoded already (see cached), else
        None; the intervals they hold as stored; what derived() keeps of them under
        `kind` if it is kept already (their lists are not looked for then: None each),
        else None; the key derived() keeps it under; and (kind, their ids, their cache
        keys), derived()'s `lists`). Which they are is kept for the committed state (a
        query asks for the same words again)."""
        def look(group):
            fs = tuple(f for f in group if self.stored_count(f))
            fids = tuple(self.fid(f) for f in fs)
            keys = tuple(self._key("list", fid) for fid in fids)
            # (derived's key as one string, made once: its hash is kept with it, where a
            # tuple of the lists' keys is hashed again at every lookup)
            return (fs, fids, keys, sum(self.stored_count(f) for f in fs),
                    repr((kind,) + keys) if kind is not None else "")
        records = self.remembered_each(f"held {kind}", groups, look)
        local = self._local
        shared = self._shared
        kept: list = [None] * len(records)
        dkeys = [r[4] for r in records]
        if kind is not None:
            ask = []
            for i, key in enumerate(dkeys):
                kept[i] = local.get(key)
                if kept[i] is None and records[i][0]:
                    ask.append(i)
            if ask and shared is not None:
                for i, found in zip(ask, shared.get_derived_many([dkeys[i] for i in ask])):
                    if found is not None:
                        kept[i] = local[dkeys[i]] = found
        decoded = self._decoded([(fid, key) for record, have in zip(records, kept)
                                 if have is None for fid, key in zip(record[1], record[2])])
        out = []
        for (fs, fids, keys, stored, dkey), have_kept in zip(records, kept):
            got = [decoded[fid] for fid in fids] if have_kept is None else [None] * len(fs)
            out.append((fs, got, stored, have_kept, dkey, (kind, fids, keys)))
        return out

    def _decoded(self, lists: list[tuple[int, tuple]]) -> dict[int, Intervals | None]:
        """For each (fid, its cache key): the whole list if decoded already, in this
        snapshot, the shared cache (those not here asked for under one hold of its lock)
        or patched from an earlier version's (see _patched), kept for the snapshot; else
        None."""
        local, shared = self._local, self._shared
        keys = [key for fid, key in lists if ("list", fid) not in local]
        found = dict(zip(keys, shared.get_many(keys))) if shared is not None and keys else {}
        out: dict[int, Intervals | None] = {}
        for fid, key in lists:
            have = local.get(("list", fid))
            if have is _ABSENT:
                have = None
            elif have is None:
                have = found.get(key)
                if have is None:
                    have = self._patched(fid)
                # (not held: the next question in this snapshot is one local lookup, as _get's)
                local[("list", fid)] = _ABSENT if have is None else have
            out[fid] = have
        return out

    def stored_count(self, feature: str) -> int:
        """How many intervals the stored list holds, erased ones included, whether or not
        it is decoded (count() is exact once it is): the same in every snapshot of one
        state, so statistics weighed by it do not depend on what was read before."""
        fid = self.fid(feature)
        return 0 if fid is None else self._state(fid)[0]

    def intact(self) -> bool:
        """Whether this is a read snapshot of a state with nothing erased: every list's
        count is then its stored count (stored_count), decoded or not."""
        if self._intact is None:
            self._intact = self._shared is not None and self._erased_version() == 0
        return self._intact

    def count(self, feature: str) -> int:
        """How many intervals the list holds, without reading it (erased ones included
        unless it is decoded: an upper bound)."""
        fid = self.fid(feature)
        if fid is None:
            return 0
        if self._intact if self._intact is not None else self.intact():
            return self._state(fid)[0]  # (the stored count is the decoded list's length)
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

    def points_only(self, feature: str) -> bool:
        """Whether the list is known to hold points only (what `near` needs): a word's
        postings as text wrote them. Intervals annotated into a word's list make its
        statistics unknown for good (storage's forget_stats), as a list written by format
        3 has them: False then."""
        return self.statistics(feature)[0] is not None

    def whole(self, feature: str, container: bool = False) -> Intervals:
        """The whole list (erased content removed); a `container` list probed in most of
        its blocks is cached up to the whole budget (see the module docstring)."""
        fid = self.fid(feature)
        if fid is None:
            return Intervals.empty()
        found = self._get("list", fid)
        if found is None:
            found = self._patched(fid)
        if found is None:
            s, e, v = self._txn.read_list(fid)
            self.read += len(s)
            found = self._live(s, e, v)
            self._put("list", fid, found, found.nbytes() + 100, container)
        return found

    def _patched(self, fid: int) -> Intervals | None:
        """The whole list, from the cached whole list of an earlier version and what the
        list's record of changes (storage's list_changes) says changed since: only the
        intervals from the lowest start changed on are decoded, and where ranges were
        erased since, the earlier version's intervals inside them are dropped. None when
        no earlier version is cached, the record does not reach back to it, or erased
        ranges were given back (not a subset of today's)."""
        found = self._earlier("list", fid)
        if found is None:
            return None
        old, old_key, key, low = found
        kept = None
        if old_key[3] != key[3]:  # the erased ranges changed
            if not self._erased_grew(old_key[3]):
                return None
            kept = _outside(old, *self.erased())
        part = Intervals.empty()
        if low is None or low >= MAX_ADDRESS:  # no interval changed
            low = MAX_ADDRESS
        else:
            s, e, v = self._txn.read_list(fid, low)
            self.read += len(s)
            part = self._live(s, e, v)
        assert self._shared is not None  # (_earlier found it there)
        found = self._shared.extend(old_key, key, old, part, low, kept)
        if found is not None:
            self._local[("list", fid)] = found
            self.patched += 1
        return found

    def _erased_grew(self, version: int) -> bool:
        """Whether every range erased as of erased version `version` (cached) lies in one
        erased now."""
        if self._shared is None:
            return False
        found = self._shared.get(("erased", version))
        if found is None:
            return False
        os_, oe = found
        es, ee = self.erased()
        at = np.searchsorted(es, os_, side="right") - 1
        return bool((at >= 0).all() and (ee[at] >= oe).all()) if len(os_) else True

    def _whole_if_cheap(self, feature: str) -> Intervals | None:
        """The whole list when it is decoded already or about a block long, else None."""
        found = self.cached(feature)
        if found is None and self.count(feature) <= SMALL_LIST:
            found = self.whole(feature)
        return found

    def at_hand(self, features: list[str]) -> list[tuple[Intervals | None, int, bool]]:
        """For each feature: its whole list when decoded already or about a block long, as
        _whole_if_cheap gives it, else None; how many intervals it holds (the stored
        count when not decoded); whether it holds points only (points_only). Ids, states
        and cache keys are looked up once per committed state, the decoded lists under
        one hold of the shared cache's lock: what a query asks of each of its words."""
        def look(feature):
            fid = self.fid(feature)
            if fid is None:
                return (-1, 0, True, None)
            state = self._state(fid)
            return (fid, state[0], state[3] is not None, self._key("list", fid))
        facts = self.remembered_each("at-hand", features, look)
        decoded = self._decoded([(fid, key) for fid, _, _, key in facts if fid >= 0])
        out: list[tuple[Intervals | None, int, bool]] = []
        for f, (fid, count, points, _) in zip(features, facts):
            if fid < 0:
                out.append((Intervals.empty(), 0, True))
                continue
            have = decoded[fid]
            if have is None and count <= SMALL_LIST:
                have = self.whole(f)
            out.append((have, count if have is None else len(have), points))
        return out

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
        found = self.part(feature, los, his)
        return found.take(kernels.contained_in(found.starts, found.ends, los, his))

    def part(self, feature: str, los: np.ndarray, his: np.ndarray) -> Intervals:
        """A part of the list, in order, holding every interval that starts in one of the
        ranges [los[i], his[i]] (los and his nondecreasing; the ranges may overlap): the
        whole list when it is decoded or short, else the blocks that hold them."""
        found = self._whole_if_cheap(feature)
        if found is not None or not len(los):
            return Intervals.empty() if found is None else found
        fid = self.fid(feature)
        if fid is None:
            return Intervals.empty()
        firsts = self._firsts(fid)
        if los is his:  # (points, as a phrase's candidates ask: each in one block or none)
            b = np.searchsorted(firsts, los, side="right") - 1
            return self._blocks_or_whole(feature, fid, firsts, _distinct(b[b >= 0]))
        # an interval starting in [lo, hi] is in the block holding lo or a later one whose
        # first start is <= hi
        a = np.maximum(np.searchsorted(firsts, los, side="right") - 1, 0)
        b = np.searchsorted(firsts, his, side="right") - 1
        keep = b >= a
        return self._blocks_or_whole(feature, fid, firsts, _spans(a[keep], b[keep]))

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
                s, e, v = self._blocks(fid, firsts[needed])
                # (in a disjoint list the last interval starting at or before p is the only
                # one that can contain [p, q], and it is in the block holding p)
                while not self.disjoint(feature):
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

    def in_blocks(self, feature: str, firsts: np.ndarray) -> Intervals:
        """The intervals of the list's blocks whose first starts are `firsts` (some of its
        directory's, increasing): those blocks as containing reads them (kept decoded), or
        the whole list when it is decoded or short, or they are most of it."""
        if not len(firsts):
            return Intervals.empty()
        found = self._whole_if_cheap(feature)
        if found is not None:
            return found
        fid = self.fid(feature)
        if fid is None:
            return Intervals.empty()
        if len(firsts) >= WHOLE_FRACTION * len(self._firsts(fid)):
            return self.whole(feature, container=True)
        s, e, v = self._blocks(fid, firsts)
        self.read += len(s)
        return self._live(s, e, v)

    def near(self, feature: str, xs: np.ndarray) -> np.ndarray:
        """For sorted positions xs, the points of the list (a word's postings: see
        points_only) just at or before and at or after each: sorted, distinct."""
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


def _outside(a: Intervals, es: np.ndarray, ee: np.ndarray) -> list[slice] | None:
    """The runs of a's intervals not inside one of the sorted ranges [es[i], ee[i]], or
    None when none is inside one. A GC-list's starts and ends both increase, so those
    inside [p, q] are a run, from the first starting at or after p to the last ending at
    or before q: two binary searches a range."""
    lo = np.searchsorted(a.starts, es, side="left")
    hi = np.searchsorted(a.ends, ee, side="right")
    hit = hi > lo
    if not hit.any():
        return None
    cuts = np.concatenate(([0], np.stack((lo[hit], hi[hit]), axis=1).ravel(), [len(a)]))
    return [slice(x, y) for x, y in zip(cuts[0::2].tolist(), cuts[1::2].tolist()) if y > x]


def _low_since(changes: list[tuple[int, int]], old: int, version: int) -> int | None:
    """The lowest start changed from version `old` to `version` by a list's record of
    changes (storage's `changes`), or None when the record does not reach from one to
    the other."""
    if not changes or changes[-1][0] != version:
        return None
    versions = [v for v, _ in changes]
    if old not in versions[:-1]:
        return None
    at = len(versions) - 1 - versions[::-1].index(old)
    return min(low for _, low in changes[at + 1:])


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
