"""Intervals: an annotation list (a GC-list) as parallel numpy arrays, the value every
layer above storage passes around."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .storage import zero_values

EMPTY_I = np.empty(0, dtype=np.int64)
EMPTY_F = np.empty(0, dtype=np.float64)


@dataclass(frozen=True)
class Intervals:
    """An annotation list: parallel arrays sorted by start, no interval nested in another."""

    starts: np.ndarray
    ends: np.ndarray
    values: np.ndarray      # all 0: a view of one zero with stride 0 (storage.zero_values)

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
        s = self.starts[idx]
        v = self.values
        return Intervals(s, s if self.ends is self.starts else self.ends[idx],
                         zero_values(len(s)) if v.strides == (0,) else v[idx])

    def nbytes(self) -> int:
        """Bytes these arrays hold: an array sharing another's memory (ends of points are
        their starts) once, a zero-stride broadcast (all values 0) not at all."""
        size = 0
        seen: list[np.ndarray] = []
        for a in (self.starts, self.ends, self.values):
            if a.strides == (0,) or any(np.may_share_memory(a, b) for b in seen):
                continue
            seen.append(a)
            size += a.nbytes
        return size
