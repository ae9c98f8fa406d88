"""Txn's postings: annotation lists read and written as blocks (sub-database blocks) and
token lists' tails (tails), in the block layout of layout.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels
from ..errors import StorageError
from .counts import Counts
from .environment import release_mapped_pages
from .layout import (_HEADER, _KEY, TAIL_BYTES, BadValue, _append_all, decode_block,
                     encode_block, from_u64, name_key, u64, zero_values)

# A flush that appends to this many token lists (an ingest's) lets go of the pages of the
# map it read (release_mapped_pages) after each RELEASE_EVERY lists it reads or writes:
# each read of a page maps its neighbours too (the kernel's fault-around, 16 pages), so
# without this a flush mapped 100-300 MB of the file at 1x and ~800 MB at 4x that it never
# needed again (reading the last blocks of 2,200 spilling lists alone mapped ~150 KB each:
# 330 MB); a release costs ~20 us.
RELEASE_OVER = 1024
RELEASE_EVERY = 512
_ZEROS = np.zeros(4096, dtype=np.float64)  # (add_points allocates for more)


def _append_groups(lasts: list, addresses, bounds, budget: int, count: int):
    """kernels.append_point_groups over lists' last blocks given one by one (b"": none),
    with the first starts and groups as Python lists."""
    offsets = [0]
    for value in lasts:
        offsets.append(offsets[-1] + len(value))
    buf, offs, group, first, ok = kernels.append_point_groups(
        b"".join(lasts), offsets, addresses, bounds, budget, count)
    return buf, offs.tolist(), group.tolist(), first.tolist(), ok


def _by_group(n: int, group: list) -> list[list[int]]:
    """The output blocks' indices of each of n groups, in order."""
    out: list[list[int]] = [[] for _ in range(n)]
    for i, g in enumerate(group):
        out[g].append(i)
    return out


class Postings(Counts):
    """The annotation lists: blocks and tails."""

    _append_cursor: Any  # the cursor append_to_list keeps on blocks

    def read_list(self, fid: int, low: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole annotation list of a feature (empty arrays when it has none), or its
        intervals starting at or after `low`. For a list of points (token postings) ends
        is starts, the same array; when every value is 0, values is a read-only broadcast
        zero (no memory)."""
        prefix = u64(fid)
        bufs = []
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            at = cur.set_range(prefix)
            if low is not None and low > 0:  # from the block holding low
                at = cur.set_range(_KEY.pack(fid, low + 1))
                if (cur.prev() if at else cur.last()) and bytes(cur.key()[:8]) == prefix:
                    at = True
                else:
                    at = cur.set_range(prefix)
            if at:
                for key, value in cur:
                    if key[:8] != prefix:
                        break
                    bufs.append(value)
        tail = self.tail(fid)
        if tail is not None:
            bufs.append(tail)
        if not bufs:
            return (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
        offsets = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in bufs], out=offsets[1:])
        s, e, v, _, zero = kernels.decode_blocks(b"".join(bufs), offsets)
        if low is not None and len(s) and s[0] < low:
            cut = int(np.searchsorted(s, low, side="left"))
            s, e, v = s[cut:], (s[cut:] if e is s else e[cut:]), v[cut:]
        if zero:
            v = zero_values(len(s))
        return s, e, v

    def tail(self, fid: int):
        """The feature's tail block (see `tails`), or None."""
        db = self.dbs["tails"]
        return None if db is None else self.txn.get(u64(fid), db=db)

    def block_firsts(self, fid: int, start: int = 0) -> np.ndarray:
        """The first start of each of the feature's blocks, its tail last, ascending: the
        list's directory (block i holds the intervals starting in [firsts[i],
        firsts[i + 1])); from the block keyed `start` on when given. Reads keys only, and
        the tail's header."""
        prefix = u64(fid)
        keys = []
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            if cur.set_range(_KEY.pack(fid, max(start, 0))):
                for key in cur.iternext(values=False):
                    if key[:8] != prefix:
                        break
                    keys.append(key)
        firsts = np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 2)[:, 1] \
            .astype(np.int64) if keys else np.empty(0, dtype=np.int64)
        tail = self.tail(fid)
        if tail is not None:
            firsts = np.append(firsts, _HEADER.unpack_from(tail, 0)[4])
        return firsts

    def read_blocks(self, fid: int, firsts: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The intervals of the feature's blocks that start at `firsts` (ascending, each a
        block's first start, see block_firsts), decoded as one list in one kernel call."""
        if not len(firsts):
            return (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
        pack = _KEY.pack
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            found = cur.getmulti([pack(fid, f) for f in firsts.tolist()])
        bufs = [v for _, v in found]
        if len(found) == len(firsts) - 1:  # the last one asked for is the tail
            tail = self.tail(fid)
            if tail is not None and _HEADER.unpack_from(tail, 0)[4] == int(firsts[-1]):
                bufs.append(tail)
        if len(bufs) != len(firsts):
            raise BadValue(f"feature {fid}: {len(firsts) - len(bufs)} of its blocks "
                           "are missing (run `annodb check`)")
        offsets = np.zeros(len(bufs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in bufs], out=offsets[1:])
        s, e, v, _, zero = kernels.decode_blocks(b"".join(bufs), offsets)
        if zero:
            v = zero_values(len(s))
        return s, e, v

    def merge_into_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                        count: int | None = None) -> None:
        """Merge the GC-list (s, e, v) into feature `fid`'s list. New intervals win exact
        duplicates; where two would nest, the inner one stays (normalize's rule). The
        rewritten blocks hold at most `count` intervals (default: the environment's
        limit)."""
        if len(s) == 0:
            return
        self._seal_tail(fid)
        blocks = self.dbs["blocks"]
        txn = self.txn
        lo, hi = int(s[0]), int(e[-1])
        prefix = u64(fid)
        # The existing intervals that can interact with the new ones have end >= lo and
        # start <= hi: a contiguous run. Find its blocks: back from the block holding lo
        # while the previous block ends at or after lo, then forward while blocks start <= hi.
        keys: list[bytes] = []
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        with txn.cursor(db=blocks) as cur:
            found = cur.set_range(_KEY.pack(fid, lo + 1))
            found = cur.prev() if found else cur.last()
            if found and bytes(cur.key()[:8]) == prefix:
                # walk back
                while True:
                    ks, ke, kv = decode_block(cur.value())
                    keys.insert(0, bytes(cur.key()))
                    parts.insert(0, (ks, ke, kv))
                    if ke[0] < lo or not cur.prev() or bytes(cur.key()[:8]) != prefix:
                        break
                cur.set_key(keys[-1])
            else:
                found = cur.set_range(prefix)
                if found and bytes(cur.key()[:8]) != prefix:
                    found = False
                if found:
                    ks, ke, kv = decode_block(cur.value())
                    if ks[0] <= hi:
                        keys.append(bytes(cur.key()))
                        parts.append((ks, ke, kv))
                if keys:
                    cur.set_key(keys[-1])
            if keys:
                while cur.next() and bytes(cur.key()[:8]) == prefix:
                    if from_u64(cur.key()[8:]) > hi:
                        break
                    keys.append(bytes(cur.key()))
                    parts.append(decode_block(cur.value()))
        self._changed(fid, min(lo, int(parts[0][0][0])) if parts else lo)
        if parts:
            self._count(fid, -sum(len(p[0]) for p in parts))
            old_s = np.concatenate([p[0] for p in parts])
            old_e = np.concatenate([p[1] for p in parts])
            old_v = np.concatenate([p[2] for p in parts])
            if old_s[-1] < s[0] and old_e[-1] < e[0]:
                ms, me, mv = (np.concatenate((old_s, s)), np.concatenate((old_e, e)),
                              np.concatenate((old_v, v)))
            else:
                ms, me, mv = kernels.normalize(np.concatenate((old_s, s)),
                                               np.concatenate((old_e, e)),
                                               np.concatenate((old_v, v)))
            for key in keys:
                txn.delete(key, db=blocks)
            if ms[0] < old_s[0]:  # a new first interval: it may overlap the list before
                self._overlaps.add(fid)
        else:
            ms, me, mv = s, e, v
            self._overlaps.add(fid)  # (not checked against the intervals around)
        self._mark_overlaps(fid, ms, me)
        self._count(fid, len(ms))
        self._put_list(fid, ms, me, mv, count)

    def add_to_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                    count: int | None = None) -> None:
        """Add a GC-list to a feature's list: appended when it comes after, else merged
        (new blocks of at most `count` intervals)."""
        if not self.append_to_list(fid, s, e, v, count):
            self.merge_into_list(fid, s, e, v, count)

    def add_point_groups(self, fids: list[int], addresses: np.ndarray,
                         bounds: np.ndarray, after: int) -> None:
        """Add token postings to many existing lists, each after all it holds: fids[g]
        gets the sorted points addresses[bounds[g]:bounds[g+1]], all at or past `after`,
        past which no stored interval of theirs ends (a writer's new text).

        A list's new points join its tail while that stays within TAIL_BYTES (one
        getmulti and one kernel call for all the lists: tails are many to a page, so this
        rewrites few pages however many lists a batch adds to). A tail that would grow
        past that spills: with the new points it refills the list's last block in
        `blocks` and goes on in full blocks, and what is left over is the new tail (or,
        when too long for one, the list's new last block)."""
        if not fids:
            return
        for g, fid in enumerate(fids):
            if bounds[g] < bounds[g + 1]:
                self._changed(fid, int(addresses[bounds[g]]))
        tails_db = self.dbs["tails"]
        keys = [u64(f) for f in fids]
        many = len(fids) >= RELEASE_OVER
        found = {}
        with self.txn.cursor(db=tails_db) as cur:
            for piece in self._pieces(keys, many):
                found.update(cur.getmulti(piece))
        old = [found.get(k, b"") for k in keys]
        buf, offs, group, first, ok = _append_groups(old, addresses, bounds, TAIL_BYTES,
                                                     self.block_count)
        out = _by_group(len(fids), group)
        tails, spill = [], []
        for g, members in enumerate(out):
            tail_first = _HEADER.unpack_from(old[g], 0)[4] if old[g] else None
            if ok[g] and len(members) == 1 and (tail_first is None or
                                                first[members[0]] == tail_first):
                i = members[0]
                tails.append((keys[g], memoryview(buf)[offs[i]:offs[i + 1]]))
            else:
                spill.append(g)
        blocks = []
        if spill:
            blocks, spilled_tails, dropped = self._spill(
                [fids[g] for g in spill], [old[g] for g in spill],
                [addresses[bounds[g]:bounds[g + 1]] for g in spill], many)
            tails += spilled_tails
            tails.sort(key=lambda item: item[0])
        if blocks:
            with self.txn.cursor(db=self.dbs["blocks"]) as cur:
                for piece in self._pieces(blocks, many):
                    cur.putmulti(piece)
        with self.txn.cursor(db=tails_db) as cur:
            for piece in self._pieces(tails, many):
                cur.putmulti(piece)
            for k in dropped if spill else ():
                if cur.set_key(k):
                    cur.delete()
        if many:
            release_mapped_pages(self.env)
        for g, n in enumerate(np.diff(bounds).tolist()):
            self._count(fids[g], n)

    def _pieces(self, items: list, many: bool):
        """items in pieces of RELEASE_EVERY when many (an ingest's flush), letting go of
        the map's pages after each (see RELEASE_OVER); else whole."""
        if not many:
            yield items
            return
        for i in range(0, len(items), RELEASE_EVERY):
            yield items[i:i + RELEASE_EVERY]
            release_mapped_pages(self.env)

    def _spill(self, fids: list[int], old_tails: list, points: list[np.ndarray],
               many: bool = False):
        """The blocks, tails and dropped tail keys for lists whose tail spills (see
        add_point_groups): each list's last block in `blocks` refilled with its tail's
        points and the new ones, then full blocks, the rest its new tail."""
        lasts = []
        prefix_of = u64
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            for piece in self._pieces(fids, many):
                for fid in piece:
                    found = cur.set_range(_KEY.pack(fid + 1, 0))
                    found = cur.prev() if found else cur.last()
                    value: bytes | memoryview = b""
                    if found and cur.key()[:8] == prefix_of(fid):
                        value = cur.value()
                    lasts.append(bytes(value))
        joined = [np.concatenate((decode_block(t)[0], p)) if t else p
                  for t, p in zip(old_tails, points)]
        bounds = np.zeros(len(fids) + 1, dtype=np.int64)
        np.cumsum([len(j) for j in joined], out=bounds[1:])
        buf, offs, group, first, ok = _append_groups(lasts, np.concatenate(joined), bounds,
                                                     self.block_bytes, self.block_count)
        if not ok.all():
            raise StorageError("internal error: new postings do not come after a list's "
                               "end; nothing of this transaction was written")
        mv = memoryview(buf)
        pack = _KEY.pack
        blocks, tails, dropped = [], [], []
        for g, members in enumerate(_by_group(len(fids), group)):
            fid = fids[g]
            for n, i in enumerate(members):
                value = mv[offs[i]:offs[i + 1]]
                if n + 1 == len(members) and len(value) <= TAIL_BYTES:
                    tails.append((u64(fid), value))
                else:
                    blocks.append((pack(fid, first[i]), value))
            if old_tails[g] and (not members or len(mv[offs[members[-1]]:
                                                       offs[members[-1] + 1]]) > TAIL_BYTES):
                dropped.append(u64(fid))
        return blocks, tails, dropped

    def _seal_tail(self, fid: int) -> None:
        """Move the feature's tail, if any, into `blocks` (before a write that rewrites the
        end of the list)."""
        db = self.dbs["tails"]
        if db is None:
            return
        key = u64(fid)
        tail = self.txn.get(key, db=db)
        if tail is not None:
            self.txn.put(_KEY.pack(fid, _HEADER.unpack_from(tail, 0)[4]), tail,
                         db=self.dbs["blocks"])
            self.txn.delete(key, db=db)

    def add_points(self, fid: int, addresses: np.ndarray) -> None:
        """Add token postings (points, value 0) to a feature's list."""
        v = _ZEROS[:len(addresses)] if len(addresses) <= len(_ZEROS) else \
            np.zeros(len(addresses), dtype=np.float64)
        self.add_to_list(fid, addresses, addresses, v)

    def append_to_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                       count: int | None = None) -> bool:
        """Append a GC-list that lies wholly after the feature's list. Touches only the last
        block. Returns False (and writes nothing) when the new intervals do not come after."""
        self._seal_tail(fid)
        blocks = self.dbs["blocks"]
        prefix = u64(fid)
        low = int(s[0])
        if self._append_cursor is None:
            self._append_cursor = self.txn.cursor(db=blocks)
        cur = self._append_cursor
        found = cur.set_range(_KEY.pack(fid + 1, 0))
        found = cur.prev() if found else cur.last()
        if found and bytes(cur.key()[:8]) == prefix:
            buf = cur.value()
            n = _HEADER.unpack_from(buf, 0)[3]
            ls, le, lv = decode_block(buf)
            if not (ls[-1] < s[0] and le[-1] < e[0]):
                return False
            self._mark_overlaps(fid, s, e, int(le[-1]))
            self._changed(fid, low)
            if n < self._limit(count) and len(buf) < self.block_bytes:
                # refill the last block (and go on in new blocks past it)
                cur.delete()
                self._count(fid, -len(ls))
                s, e, v = (np.concatenate((ls, s)), np.concatenate((le, e)),
                           np.concatenate((lv, v)))
        else:
            self._mark_overlaps(fid, s, e)
            self._changed(fid, 0)
        self._count(fid, len(s))
        self._put_list(fid, s, e, v, count)
        return True

    def _limit(self, count: int | None) -> int:
        """Intervals a new block may hold: `count`, within the environment's limit."""
        return self.block_count if count is None else min(count, self.block_count)

    def _put_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                  count: int | None = None) -> None:
        """Write a GC-list as new blocks (cut so each fits self.block_bytes, and holds at
        most `count` intervals, default self.block_count)."""
        self._note_high(fid, v)
        cuts = kernels.block_bounds(s, e, v, self.block_bytes, self._limit(count)).tolist()
        blocks = self.dbs["blocks"]
        put = self.txn.put
        for i, j in zip(cuts[:-1], cuts[1:]):
            put(_KEY.pack(fid, int(s[i])), encode_block(s[i:j], e[i:j], v[i:j]), db=blocks)

    def encode_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                    count: int | None = None):
        """A GC-list as blocks (of at most `count` intervals, default self.block_count), in
        put_blocks' form (fids, firsts, buf, offsets)."""
        self._mark_overlaps(fid, s, e)
        self._note_high(fid, v)
        cuts = kernels.block_bounds(s, e, v, self.block_bytes, self._limit(count)).tolist()
        parts = [encode_block(s[i:j], e[i:j], v[i:j]) for i, j in zip(cuts[:-1], cuts[1:])]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(p) for p in parts])
        return (np.full(len(parts), fid, dtype=np.int64), s[cuts[:-1]],
                np.frombuffer(b"".join(parts), dtype=np.uint8), offsets)

    def encode_point_groups(self, addresses: np.ndarray, bounds: np.ndarray):
        """New features' token lists as blocks (kernels.encode_point_groups at this
        environment's block limits): (buf, offsets, group, first)."""
        return kernels.encode_point_groups(addresses, bounds, self.block_bytes,
                                           self.block_count)

    def put_blocks(self, fids, firsts, bufs, offsets, tails=()) -> None:
        """Store the blocks of new features, whose ids are above every stored block's. Block
        i of part k is bufs[k][offsets[k][i]:offsets[k][i+1]]; fids and firsts run over all
        blocks. They are written in key order, so LMDB appends them, filling pages instead
        of splitting them. The last block of each feature in `tails` (token lists) is its
        tail (see `tails`)."""
        pack = _KEY.pack
        values: list[memoryview] = []
        for buf, offs in zip(bufs, offsets):
            mv = memoryview(buf)
            offs = offs.tolist()
            values.extend(mv[a:b] for a, b in zip(offs[:-1], offs[1:]))
        fid_list = fids.tolist()
        keys = [pack(f, a) for f, a in zip(fid_list, firsts.tolist())]
        header = _HEADER.unpack_from
        for f, value in zip(fid_list, values):
            self._count(f, header(value, 0)[3])
            self._changed(f, 0)
        order = sorted(range(len(keys)), key=keys.__getitem__)
        items, tail_items = [], []
        for n, i in enumerate(order):
            f = fid_list[i]
            if f in tails and len(values[i]) <= TAIL_BYTES and \
                    (n + 1 == len(order) or fid_list[order[n + 1]] != f):
                tail_items.append((u64(f), values[i]))   # its last block, when short
            else:
                items.append((keys[i], values[i]))
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            _append_all(cur, items)
        if tail_items:
            with self.txn.cursor(db=self.dbs["tails"]) as cur:
                _append_all(cur, tail_items)

    def replace_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray) -> None:
        """Replace feature fid's whole list by (s, e, v), a GC-list holding some of its
        intervals (so its flags and statistics still hold), in new blocks; when that is
        empty, remove the feature: its name (features, names), blocks, tail, counts and
        changes. For purge.py, on a copy no other process has open (the feature's id may
        be cached by a process that has the database open)."""
        prefix = u64(fid)
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            if cur.set_range(prefix):
                while bytes(cur.key()[:8]) == prefix and cur.delete():
                    pass
        for sub in ("tails", "changes"):
            if self.dbs[sub] is not None:
                self.txn.delete(prefix, db=self.dbs[sub])
        if len(s):
            self._count(fid, len(s) - self.list_count(fid))
            self._changed(fid, 0)
            self._put_list(fid, s, e, v)
            return
        name = self.feature_name(fid)
        if name is not None:
            self.txn.delete(name_key(name), db=self.dbs["features"])
        self.txn.delete(prefix, db=self.dbs["names"])
        self.txn.delete(prefix, db=self.dbs["counts"])
        for pending in (self._counts, self._highs, self._lows):
            pending.pop(fid, None)
        self._overlaps.discard(fid)
        self._no_stats.discard(fid)

    def all_blocks(self):
        """(feature id, first start, raw block) of every block, each list's tail after its
        blocks, in feature order (for check)."""
        tails = []
        if self.dbs["tails"] is not None:
            with self.txn.cursor(db=self.dbs["tails"]) as cur:
                tails = [(from_u64(k), bytes(v)) for k, v in cur]
        t = 0
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            for k, v in cur:
                fid, start = _KEY.unpack(bytes(k))
                while t < len(tails) and tails[t][0] < fid:
                    yield tails[t][0], _HEADER.unpack_from(tails[t][1], 0)[4], tails[t][1]
                    t += 1
                yield fid, start, v
        for tfid, value in tails[t:]:
            yield tfid, _HEADER.unpack_from(value, 0)[4], value
