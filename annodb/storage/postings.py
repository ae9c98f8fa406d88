"""Txn's postings: annotation lists read and written as blocks (sub-database blocks) and
token lists' tails (tails), in the block layout of layout.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels
from ..errors import StorageError
from .counts import Counts
from .environment import release_mapped_pages
from .layout import (_HEADER, _KEY, TAIL_BYTES, BadValue, _append_all, _first_item,
                     _found_values, _header_numbers, _keys8, _keys16, decode_block,
                     from_u64, name_key, u64, zero_values)

# A flush that appends to this many token lists (an ingest's) lets go of the pages of the
# map it read (release_mapped_pages) after each RELEASE_EVERY lists it reads or writes:
# each read of a page maps its neighbours too (the kernel's fault-around, 16 pages), so
# without this a flush mapped 100-300 MB of the file at 1x and ~800 MB at 4x that it never
# needed again (reading the last blocks of 2,200 spilling lists alone mapped ~150 KB each:
# 330 MB); a release costs ~20 us.
RELEASE_OVER = 1024
RELEASE_EVERY = 512
_ZEROS = np.zeros(4096, dtype=np.float64)  # (add_points allocates for more)


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

    def add_point_groups(self, fids, addresses: np.ndarray, bounds: np.ndarray,
                         after: int) -> None:
        """Add token postings to many existing lists, each after all it holds: fids[g]
        (ascending) gets the sorted points addresses[bounds[g]:bounds[g+1]], all at or
        past `after`, past which no stored interval of theirs ends (a writer's new text).

        A list's new points join its tail while that stays within TAIL_BYTES (one
        getmulti and one kernel call for all the lists: tails are many to a page, so this
        rewrites few pages however many lists a batch adds to). A tail that would grow
        past that spills: with the new points it refills the list's last block in
        `blocks` and goes on in full blocks, and what is left over is the new tail (or,
        when too long for one, the list's new last block). The work per list is done on
        arrays, not in Python per list (a flush touches tens of thousands)."""
        fids = np.asarray(fids, dtype=np.int64)
        if not len(fids):
            return
        if len(fids) > 1 and not (fids[1:] > fids[:-1]).all():
            raise StorageError("internal error: add_point_groups takes feature ids "
                               "ascending; nothing of this transaction was written")
        bounds = np.asarray(bounds, dtype=np.int64)
        sizes = np.diff(bounds)
        some = sizes > 0
        self._changed_many(fids[some], addresses[bounds[:-1][some]])
        tails_db = self.dbs["tails"]
        keys = _keys8(fids)
        many = len(fids) >= RELEASE_OVER
        found: list = []
        with self.txn.cursor(db=tails_db) as cur:
            for piece in self._pieces(keys, many):
                found += cur.getmulti(piece)
        old, old_offsets = _found_values(fids, found)
        # (a list that would take more than one block spills: not encoded here)
        buf, offs, group, first, ok = kernels.append_point_groups(
            old, old_offsets, addresses, bounds, TAIL_BYTES, self.block_count, single=True)
        n = len(fids)
        made = np.bincount(group, minlength=n)       # blocks made for each list
        at = np.searchsorted(group, np.arange(n))    # its first (the kernel's order)
        has_tail = old_offsets[1:] > old_offsets[:-1]
        tail_first = np.zeros(n, dtype=np.int64)
        if has_tail.any():
            tail_first[has_tail] = _header_numbers(old, old_offsets[:-1][has_tail], 8, 8)
        kept = ok & (made == 1)  # still a tail: one block, at the tail's key (or a new one)
        kept[kept] &= ~has_tail[kept] | (first[at[kept]] == tail_first[kept])
        mv = memoryview(buf)
        chosen = np.flatnonzero(kept)
        tails = [(keys[g], mv[a:b]) for g, a, b in zip(
            chosen.tolist(), offs[at[chosen]].tolist(), offs[at[chosen] + 1].tolist())]
        spill = np.flatnonzero(~kept)
        blocks: list = []
        dropped: list = []
        if len(spill):
            old_mv = memoryview(old)
            olds = [old_mv[a:b] for a, b in zip(old_offsets[spill].tolist(),
                                                old_offsets[spill + 1].tolist())]
            blocks, spilled_tails, dropped = self._spill(
                fids[spill], olds, addresses, bounds[spill], bounds[spill + 1], many)
            tails += spilled_tails
            tails.sort(key=_first_item)
        if blocks:
            with self.txn.cursor(db=self.dbs["blocks"]) as cur:
                for piece in self._pieces(blocks, many):
                    cur.putmulti(piece)
        with self.txn.cursor(db=tails_db) as cur:
            for piece in self._pieces(tails, many):
                cur.putmulti(piece)
            for k in dropped:
                if cur.set_key(k):
                    cur.delete()
        if many:
            release_mapped_pages(self.env)
        self._count_many(fids, sizes)

    def _pieces(self, items: list, many: bool):
        """items in pieces of RELEASE_EVERY when many (an ingest's flush), letting go of
        the map's pages after each (see RELEASE_OVER); else whole."""
        if not many:
            yield items
            return
        for i in range(0, len(items), RELEASE_EVERY):
            yield items[i:i + RELEASE_EVERY]
            release_mapped_pages(self.env)

    def _spill(self, fids: np.ndarray, old_tails: list, addresses: np.ndarray,
               los: np.ndarray, his: np.ndarray, many: bool = False):
        """The blocks, tails and dropped tail keys for lists whose tail spills (see
        add_point_groups): list fids[g]'s tail old_tails[g] (empty: none) and new points
        addresses[los[g]:his[g]]: its last block in `blocks` refilled with its tail's
        points and the new ones, then full blocks, the rest its new tail."""
        fid_list = fids.tolist()
        lasts = []
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            for piece in self._pieces(fid_list, many):
                for fid in piece:
                    found = cur.set_range(_KEY.pack(fid + 1, 0))
                    found = cur.prev() if found else cur.last()
                    value: bytes | memoryview = b""
                    if found and from_u64(cur.key()[:8]) == fid:
                        value = cur.value()
                    lasts.append(value)
        n = len(fid_list)
        # each list's points: its tail's (decoded in one call), then its new ones
        tail_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, old_tails), dtype=np.int64, count=n),
                  out=tail_offsets[1:])
        joined_tails = b"".join(old_tails)
        has = tail_offsets[1:] > tail_offsets[:-1]
        in_tail = np.zeros(n, dtype=np.int64)
        tail_points = np.zeros(0, dtype=np.int64)
        if has.any():
            in_tail[has] = _header_numbers(joined_tails, tail_offsets[:-1][has], 4, 4)
            tail_points = kernels.decode_blocks(joined_tails, tail_offsets[np.r_[has, True]]
                                                if not has.all() else tail_offsets)[0]
        # the tails' points go first in each list, the new ones after them (one kernel
        # call: numpy took ~0.9 s of CPU at 1x for its temporary arrays of every point)
        tail_bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(in_tail, out=tail_bounds[1:])
        points, bounds = kernels.join_groups(tail_points, tail_bounds, addresses, los, his)
        last_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, lasts), dtype=np.int64, count=n), out=last_offsets[1:])
        buf, offs, group, first, ok = kernels.append_point_groups(
            b"".join(lasts), last_offsets, points, bounds, self.block_bytes, self.block_count)
        if not ok.all():
            raise StorageError("internal error: new postings do not come after a list's "
                               "end; nothing of this transaction was written")
        sizes = np.diff(offs)
        last_of_list = np.r_[group[1:] != group[:-1], True] if len(group) else group
        is_tail = last_of_list & (sizes <= TAIL_BYTES)
        keys = _keys16(fids[group], first)
        mv = memoryview(buf)
        blocks, tails = [], []
        for i, (a, b, tail) in enumerate(zip(offs[:-1].tolist(), offs[1:].tolist(),
                                             is_tail.tolist())):
            if tail:
                tails.append((keys[i][:8], mv[a:b]))
            else:
                blocks.append((keys[i], mv[a:b]))
        # a list whose tail is now a block (or whose new end is too long for a tail)
        ends_as_tail = np.zeros(n, dtype=bool)
        ends_as_tail[group[is_tail]] = True
        dropped = [u64(fid) for fid in fids[has & ~ends_as_tail].tolist()]
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
        buf, offsets, cuts = kernels.encode_blocks(s, e, v, self.block_bytes,
                                                   self._limit(count))
        keys = _keys16(np.full(len(cuts) - 1, fid, dtype=np.int64), s[cuts[:-1]])
        mv = memoryview(buf)
        with self.txn.cursor(db=self.dbs["blocks"]) as cur:
            cur.putmulti(list(zip(keys, [mv[a:b] for a, b in zip(offsets[:-1].tolist(),
                                                                 offsets[1:].tolist())])))

    def encode_list(self, fid: int, s: np.ndarray, e: np.ndarray, v: np.ndarray,
                    count: int | None = None):
        """A GC-list as blocks (of at most `count` intervals, default self.block_count), in
        put_blocks' form (fids, firsts, buf, offsets)."""
        self._mark_overlaps(fid, s, e)
        self._note_high(fid, v)
        buf, offsets, cuts = kernels.encode_blocks(s, e, v, self.block_bytes,
                                                   self._limit(count))
        return np.full(len(cuts) - 1, fid, dtype=np.int64), s[cuts[:-1]], buf, offsets

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
        fids = np.asarray(fids, dtype=np.int64)
        firsts = np.asarray(firsts, dtype=np.int64)
        values: list[memoryview] = []
        count_parts, length_parts = [], []
        for buf, offs in zip(bufs, offsets):
            offs = np.asarray(offs, dtype=np.int64)
            mv = memoryview(buf)
            values.extend(mv[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist()))
            count_parts.append(_header_numbers(buf, offs[:-1], 4, 4))
            length_parts.append(np.diff(offs))
        counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.int64)
        lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
        self._count_many(fids, counts)
        self._changed_many(fids, np.zeros(len(fids), dtype=np.int64))
        order = np.lexsort((firsts, fids))
        f = fids[order]
        keys = _keys16(f, firsts[order])
        last = np.r_[f[1:] != f[:-1], True] if len(f) else np.zeros(0, dtype=bool)
        tail_fids = np.fromiter(tails, dtype=np.int64, count=len(tails))
        is_tail = last & (lengths[order] <= TAIL_BYTES) & np.isin(f, tail_fids)
        items, tail_items = [], []
        for key, i, tail in zip(keys, order.tolist(), is_tail.tolist()):
            if tail:
                tail_items.append((key[:8], values[i]))   # its last block, when short
            else:
                items.append((key, values[i]))
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
        self._settle()
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
