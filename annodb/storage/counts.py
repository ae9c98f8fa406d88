"""Txn's counts and changes: what a transaction notes of each list it changes (its length,
whether its intervals may overlap, its df and highest value, the lowest start it changed),
written at commit to counts (and for a long list to changes, see layout.py); and the
lists' state as readers plan from it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import StorageError
from .features import Features
from .layout import (_KEY, _STATS, _STATS_DTYPE, CHANGES_KEPT, CHANGES_OVER, MAX_ADDRESS,
                     NO_STATS, OVERLAPPING, _changes_value, _count_value, _distinct, _keys8,
                     _reduced, from_u64, u64)


class Counts(Features):
    """What this transaction changed of each list, and the lists' counts."""

    # list length changes of this transaction, and the lowest start it changed in a list:
    # by one list (the dicts) and by many at once (arrays (fids, values): an ingest's flush
    # touches tens of thousands of lists), summed or least at commit
    _counts: dict[int, int]
    _count_parts: list
    _overlaps: set[int]      # lists it may have given overlapping intervals
    _df_parts: list          # (fids, deltas) arrays: df changes (see df_changes)
    _df: dict[int, int] | None  # ... summed (None: not yet)
    _highs: dict[int, float]  # the greatest value it wrote to a list, if > 0
    _no_stats: set[int]      # lists whose df is no longer known
    _lows: dict[int, int]
    _low_parts: list
    _df_reduced: bool        # whether _df_parts is one part, summed

    def _commit_counts(self) -> None:
        """Write the count, version, flags and statistics of every list this transaction
        changed to counts, all at once on arrays (an ingest's flush changes tens of
        thousands of lists), and their changes to changes (Txn.commit, before LMDB's
        commit)."""
        count_fids, count_delta = self._combined(self._counts, self._count_parts, np.add)
        df_fids, df_delta = self._df_arrays()
        if not (len(count_fids) or len(df_fids) or self._highs or self._no_stats):
            return
        highs, no_stats = self._highs, self._no_stats
        high_fids = np.fromiter(highs.keys(), dtype=np.int64, count=len(highs))
        no_stat_fids = np.fromiter(no_stats, dtype=np.int64, count=len(no_stats))
        fids = _distinct(np.concatenate((count_fids, df_fids, high_fids, no_stat_fids)))
        n = len(fids)
        keys = _keys8(fids)
        with self.txn.cursor(db=self.dbs["counts"]) as cur:
            found = cur.getmulti(keys)
            # the stored values (a new list: 0 intervals, statistics known)
            count = np.zeros(n, dtype=np.int64)
            version = np.full(n, -1, dtype=np.int64)   # (-1: not known)
            flags = np.zeros(n, dtype=np.int64)
            df = np.zeros(n, dtype=np.int64)
            high = np.zeros(n, dtype=np.float64)
            known = np.ones(n, dtype=bool)
            stored = np.zeros(n, dtype=bool)
            if found:
                raws = [v for _, v in found]
                at = np.arange(n) if len(found) == n else np.searchsorted(   # (key order)
                    fids, np.frombuffer(b"".join(k for k, _ in found), dtype=">u8")
                    .astype(np.int64))
                stored[at] = True
                full = np.fromiter(map(len, raws), dtype=np.int64,
                                   count=len(raws)) == _STATS.size
                whole = bool(full.all())
                rec = np.frombuffer(b"".join(raws if whole else
                                             [r for r, f in zip(raws, full) if f]),
                                    dtype=_STATS_DTYPE)
                p = at if whole else at[full]
                count[p] = rec["count"]
                version[p] = rec["version"]
                flags[p] = rec["flags"]
                unknown = (rec["flags"] & NO_STATS) != 0
                df[p] = np.where(unknown, 0, rec["df"])
                high[p] = np.where(unknown, 0.0, rec["high"])
                known[p] = ~unknown
                for i in ([] if whole else np.flatnonzero(~full).tolist()):  # (older ones)
                    c, v, f, d, h = _count_value(raws[i])
                    g = at[i]
                    count[g], version[g], flags[g] = c, -1 if v is None else v, f
                    known[g] = d is not None
                    df[g], high[g] = (d, h) if d is not None else (0, 0.0)
            delta = np.zeros(n, dtype=np.int64)
            delta[np.searchsorted(fids, count_fids)] = count_delta
            df[np.searchsorted(fids, df_fids)] += df_delta
            if highs:
                at = np.searchsorted(fids, high_fids)
                high[at] = np.maximum(high[at], np.fromiter(highs.values(), dtype=np.float64,
                                                            count=len(highs)))
            if self._overlaps:
                flags[np.isin(fids, np.fromiter(self._overlaps, dtype=np.int64))] |= OVERLAPPING
            lost = ~known | (df < 0) | np.isin(fids, no_stat_fids)   # (not known)
            flags[lost] |= NO_STATS
            df[lost] = 0
            high[lost] = 0.0
            after = count + delta
            if len(after) and after.min() < 0:
                raise StorageError("internal error: a list's count would be negative; "
                                   "nothing of this transaction was written")
            out = np.empty(n, dtype=_STATS_DTYPE)
            out["count"] = after
            out["version"] = self.id
            out["flags"] = flags
            out["df"] = df
            out["high"] = high
            cur.putmulti(list(zip(keys, out.view(f"V{_STATS.size}").tolist())))
        long = np.flatnonzero(stored & (version >= 0) & (after >= CHANGES_OVER))
        if len(long):
            self._record_changes(fids[long], [keys[i] for i in long.tolist()],
                                 version[long], count_fids, self.id)
        self._counts.clear()
        self._count_parts.clear()
        self._overlaps.clear()
        self._df_parts.clear()
        self._df = {}
        self._highs.clear()
        self._no_stats.clear()
        self._lows.clear()
        self._low_parts.clear()

    @staticmethod
    def _combined(one: dict, parts: list, ufunc) -> tuple[np.ndarray, np.ndarray]:
        """A pending change by list, given one list at a time (`one`) and many at once
        (`parts`): (the lists' ids ascending, their changes combined by ufunc)."""
        fids = [np.fromiter(one.keys(), dtype=np.int64, count=len(one))]
        values = [np.fromiter(one.values(), dtype=np.int64, count=len(one))]
        fids += [f for f, _ in parts]
        values += [v for _, v in parts]
        return _reduced(np.concatenate(fids), np.concatenate(values), ufunc)

    def _record_changes(self, fids: np.ndarray, keys: list[bytes], versions: np.ndarray,
                        count_fids: np.ndarray, version: int) -> None:
        """Append this commit's change of each long list (fids, their stored versions
        before it) to its record (see `changes`): the lowest start it changed;
        MAX_ADDRESS (none) where it wrote no interval (only the list's df or high changed:
        a delete), 0 (all of it) where a write was not noted."""
        db = self.dbs["changes"]
        if db is None:
            return
        low_fids, lows = self._combined(self._lows, self._low_parts, np.minimum)
        at = np.minimum(np.searchsorted(low_fids, fids), max(len(low_fids) - 1, 0))
        noted = low_fids[at] == fids if len(low_fids) else np.zeros(len(fids), dtype=bool)
        counted = np.isin(fids, count_fids)
        low = np.where(noted, lows[at] if len(lows) else 0,
                       np.where(counted, 0, MAX_ADDRESS))
        with self.txn.cursor(db=db) as cur:
            records = {bytes(k): v for k, v in cur.getmulti(keys)}
            items = []
            for k, before, lowest in zip(keys, versions.tolist(), low.tolist()):
                pairs = _changes_value(records.get(k, b""))
                if not pairs or pairs[-1][0] != before:  # none, or not the list's
                    pairs = [(before, 0)]
                pairs.append((version, lowest))
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
            self._df_reduced = False

    def forget_stats(self, fid: int) -> None:
        """Mark list fid's df as not known (at commit): intervals not written as text
        went into a word's list."""
        self._no_stats.add(fid)

    def df_changes(self) -> dict[int, int]:
        """This transaction's df changes so far, by feature id (nonzero ones)."""
        if self._df is None:
            ids, sums = self._df_arrays()
            self._df = dict(zip(ids.tolist(), sums.tolist()))
        return self._df

    def _df_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """df_changes as arrays: (the feature ids ascending, their nonzero df changes)."""
        if not self._df_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if not self._df_reduced:
            self._df_reduced = True
            ids, sums = _reduced(np.concatenate([f for f, _ in self._df_parts]),
                                 np.concatenate([d for _, d in self._df_parts]), np.add)
            keep = sums != 0
            self._df_parts = [(ids[keep], sums[keep])]
        return self._df_parts[0]

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

    def _count_many(self, fids: np.ndarray, deltas: np.ndarray) -> None:
        """_count for many lists at once (arrays)."""
        if len(fids):
            self._count_parts.append((np.asarray(fids, np.int64), np.asarray(deltas, np.int64)))

    def _changed_many(self, fids: np.ndarray, lows: np.ndarray) -> None:
        """_changed for many lists at once (arrays)."""
        if len(fids):
            self._low_parts.append((np.asarray(fids, np.int64), np.asarray(lows, np.int64)))

    def _settle(self) -> None:
        """Fold the changes noted for many lists at once into the by-list dicts (before
        one list's are taken away)."""
        for one, parts, ufunc in ((self._counts, self._count_parts, np.add),
                                  (self._lows, self._low_parts, np.minimum)):
            if parts:
                fids, values = self._combined(one, parts, ufunc)
                one.clear()
                one.update(zip(fids.tolist(), values.tolist()))
                parts.clear()
