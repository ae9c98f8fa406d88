"""Txn's counts and changes: what a transaction notes of each list it changes (its length,
whether its intervals may overlap, its df and highest value, the lowest start it changed),
written at commit to counts (and for a long list to changes, see layout.py); and the
lists' state as readers plan from it."""

from __future__ import annotations

from typing import Any

import numpy as np

from .features import Features
from .layout import (_KEY, _STATS, _U64, CHANGES_KEPT, CHANGES_OVER, MAX_ADDRESS, NO_STATS,
                     OVERLAPPING, _changes_value, _count_value, from_u64, u64)


class Counts(Features):
    """What this transaction changed of each list, and the lists' counts."""

    _counts: dict[int, int]  # list length changes of this transaction
    _overlaps: set[int]      # lists it may have given overlapping intervals
    _df_parts: list          # (fids, deltas) arrays: df changes (see df_changes)
    _df: dict[int, int] | None  # ... summed (None: not yet)
    _highs: dict[int, float]  # the greatest value it wrote to a list, if > 0
    _no_stats: set[int]      # lists whose df is no longer known
    _lows: dict[int, int]    # the lowest start it changed in a list

    def _commit_counts(self) -> None:
        """Write the count, version, flags and statistics of every list this transaction
        changed to counts, and their changes to changes (Txn.commit, before LMDB's
        commit)."""
        df = self.df_changes()
        if self._counts or df or self._highs or self._no_stats:
            pack = _U64.pack
            deltas, overlaps, highs = self._counts, self._overlaps, self._highs
            fids = sorted(set(deltas) | set(df) | set(highs) | self._no_stats)
            keys = [pack(fid) for fid in fids]
            version = self.id
            fresh = (0, None, 0, 0, 0.0)  # a new list: its statistics are known
            with self.txn.cursor(db=self.dbs["counts"]) as cur:
                old = {bytes(k): _count_value(v) for k, v in cur.getmulti(keys)}
                items = []
                high: Any  # (a float where d is not None: _count_value gives both or neither)
                for fid, k in zip(fids, keys):
                    n, _, flags, d, high = old.get(k, fresh)
                    if fid in overlaps:
                        flags |= OVERLAPPING
                    if d is not None:
                        d += df.get(fid, 0)
                        high = max(high, highs.get(fid, 0.0))
                    if d is None or d < 0 or fid in self._no_stats:  # (not known)
                        flags, d, high = flags | NO_STATS, 0, 0.0
                    items.append((k, _STATS.pack(n + deltas.get(fid, 0), version, flags, d,
                                                 high)))
                cur.putmulti(items)
            self._record_changes(fids, keys, old, version)
            self._counts.clear()
            self._overlaps.clear()
            self._df_parts.clear()
            self._df = {}
            self._highs.clear()
            self._no_stats.clear()
            self._lows.clear()

    def _record_changes(self, fids: list[int], keys: list[bytes], old: dict,
                        version: int) -> None:
        """Append this commit's change of each long list to its record (see `changes`):
        the lowest start it changed; MAX_ADDRESS (none) where it wrote no interval (only
        the list's df or high changed: a delete), 0 (all of it) where a write was not
        noted."""
        db = self.dbs["changes"]
        if db is None:
            return
        long = [(fid, k) for fid, k in zip(fids, keys)
                if k in old and old[k][1] is not None and
                old[k][0] + self._counts.get(fid, 0) >= CHANGES_OVER]
        if not long:
            return
        with self.txn.cursor(db=db) as cur:
            records = {bytes(k): v for k, v in cur.getmulti([k for _, k in long])}
            items = []
            for fid, k in long:
                pairs = _changes_value(records.get(k, b""))
                if not pairs or pairs[-1][0] != old[k][1]:  # none, or not the list's
                    pairs = [(old[k][1], 0)]
                low = self._lows.get(fid)
                if low is None:
                    low = 0 if fid in self._counts else MAX_ADDRESS
                pairs.append((version, low))
                if len(pairs) > CHANGES_KEPT + 1:
                    pairs = [(pairs[-CHANGES_KEPT - 1][0], 0)] + pairs[-CHANGES_KEPT:]
                items.append((k, b"".join(_KEY.pack(*p) for p in pairs)))
            cur.putmulti(items)

    def list_changes(self, fid: int) -> list[tuple[int, int]]:
        """The record of a long list's last changes (see `changes`): [(base, 0), (version,
        low), ...], oldest first; [] when none is kept."""
        db = self.dbs["changes"]
        return [] if db is None else _changes_value(self.txn.get(u64(fid), db=db) or b"")

    def _changed(self, fid: int, low: int) -> None:
        """Note that this transaction changed list fid from start `low` on."""
        self._lows[fid] = min(self._lows.get(fid, low), low)

    def lists_without_stats(self) -> list[int]:
        """The ids of the lists whose statistics are not known (see counts): a word's list
        that intervals were annotated into (forget_stats), or one written before
        statistics were kept."""
        out = []
        flags = 16                   # (the flags byte: after count and version, u64 each)
        with self.txn.cursor(db=self.dbs["counts"]) as cur:
            for k, v in cur:
                if len(v) != _STATS.size or v[flags] & NO_STATS:
                    out.append(from_u64(k))
        return out

    def list_count(self, fid: int) -> int:
        """How many intervals the feature's list holds (committed, erased ones included)."""
        return self.list_state(fid)[0]

    def list_state(self, fid: int) -> tuple[int, int | None, int, int | None, float | None]:
        """(how many intervals the list holds, its version: the id of the write transaction
        that last changed it, None when not known; its flags, OVERLAPPING | UNKNOWN |
        NO_STATS; its df and high, None when not known). Committed state; a write
        transaction's own df and high changes are added (see df_changes)."""
        raw = self.txn.get(u64(fid), db=self.dbs["counts"])
        state: tuple[int, int | None, int, Any, Any] = (  # (df and high: both or neither)
            (0, None, 0, 0, 0.0) if raw is None else _count_value(raw))
        if self.write and fid in self._no_stats:
            return state[:3] + (None, None)
        if self.write and state[3] is not None:
            df = self.df_changes().get(fid, 0)
            high = self._highs.get(fid, 0.0)
            if df or high > state[4]:
                state = state[:3] + (state[3] + df, max(state[4], high))
        return state

    def add_doc_frequencies(self, fids: np.ndarray, deltas: np.ndarray) -> None:
        """Change the df of lists fids[i] by deltas[i] (at commit)."""
        if len(fids):
            self._df_parts.append((np.asarray(fids, np.int64), np.asarray(deltas, np.int64)))
            self._df = None

    def forget_stats(self, fid: int) -> None:
        """Mark list fid's df as not known (at commit): intervals not written as text
        went into a word's list."""
        self._no_stats.add(fid)

    def df_changes(self) -> dict[int, int]:
        """This transaction's df changes so far, by feature id (nonzero ones)."""
        if self._df is None:
            fids = np.concatenate([f for f, _ in self._df_parts])
            deltas = np.concatenate([d for _, d in self._df_parts])
            ids, at = np.unique(fids, return_inverse=True)
            sums = np.zeros(len(ids), np.int64)
            np.add.at(sums, at, deltas)
            keep = sums != 0
            self._df = dict(zip(ids[keep].tolist(), sums[keep].tolist()))
            self._df_parts = [(ids[keep], sums[keep])]
        return self._df

    def _note_high(self, fid: int, v: np.ndarray) -> None:
        """Keep the greatest value written to list fid (when it is above 0)."""
        if len(v) and v.strides != (0,):
            high = float(v.max())
            if high > self._highs.get(fid, 0.0):
                self._highs[fid] = high

    def _mark_overlaps(self, fid: int, s: np.ndarray, e: np.ndarray, before: int = -1) -> None:
        """Note that list `fid` may now hold overlapping intervals, if the sorted (s, e)
        written to it overlap each other or the interval ending at `before` just before."""
        if len(s) and (before >= s[0] or (len(s) > 1 and bool((s[1:] <= e[:-1]).any()))):
            self._overlaps.add(fid)

    def _count(self, fid: int, delta: int) -> None:
        self._counts[fid] = self._counts.get(fid, 0) + delta
