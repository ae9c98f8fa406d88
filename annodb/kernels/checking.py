"""A numba kernel for annodb.check: every block of the database looked at in batches, one
kernel call a batch (it was a dozen numpy calls and a decode a block, each paying its own
overhead: 150 us a block, and a database holds millions of blocks).

    checker = BlockChecker(doc_starts, doc_ends, erased_starts, erased_ends, max_count,
                           max_address)
    done, n, held, high, overlapping = checker.run(buf, offsets, fids, keys)

The blocks are buf[offsets[i]:offsets[i+1]], of feature fids[i], stored under the key
(first start) keys[i], in the database's order (by feature, then start). `run` goes
through them until one is not clean (below) and returns how many it went through
(`done`) and, for each of those: its interval count, the documents it adds to its list's
document frequency (`held`: the collection's live documents, doc_starts / doc_ends in
address order, holding a live interval of the block, i.e. one inside no erased range,
and not already counted for an earlier block of the list), its largest value (NaN if one
is) and whether one of its intervals starts at or before the previous one's end (the
previous block's last one included). The checker keeps the position in the current list
(`fid`, `last_start`, `last_end`, `last_doc`) from one call to the next, and the caller
sets it after handling a block that was not clean itself.

A clean block's header matches its length, it holds 1 to max_count intervals, its first
start is its key, its starts and ends strictly increase (within it and after the previous
block of its list), every end is at or after its start and below max_address, and no start
is negative. The brute-force twin is in tests/naive.py (block_facts).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _gt, _ints, _pair
from .codec import _decode_block, _first_bad_block, _get_uint

__all__ = ["BlockChecker"]


@njit(cache=True, nogil=True)
def _run(buf, offsets, fids, keys, max_count, max_address, ds, de, xs, xe, state,
         n_out, held_out, high_out, over_out):
    """state = [fid, last_start, last_end, last_doc], updated in place."""
    nx = xs.shape[0]
    nd = ds.shape[0]
    for b in range(fids.shape[0]):
        if fids[b] != state[0]:
            state[0] = fids[b]
            state[1] = -1
            state[2] = -1
            state[3] = -1
        if _first_bad_block(buf, offsets[b:b + 2], False) >= 0:
            return b
        block = buf[offsets[b]:offsets[b + 1]]
        n = _get_uint(block, 4, 4)
        if n > max_count:
            return b
        s, e, v = _decode_block(block)
        last_start, last_end = state[1], state[2]
        if s[0] != keys[b] or s[0] < 0 or s[0] <= last_start or e[0] <= last_end or \
                e[n - 1] >= max_address:
            return b
        over = s[0] <= last_end
        high = -np.inf
        nan = False
        for i in range(n):
            if e[i] < s[i]:
                return b
            if i > 0:
                if s[i] <= s[i - 1] or e[i] <= e[i - 1]:
                    return b
                if s[i] <= e[i - 1]:
                    over = True
            x = v[i]
            if np.isnan(x):
                nan = True
            elif x > high:
                high = x
        held = 0
        last_doc = state[3]
        j = 0   # the first erased range starting after s[i]
        k = 0   # the first document starting after s[i]
        for i in range(n):
            j = _gt(xs, j, nx, s[i])
            if j > 0 and e[i] <= xe[j - 1]:
                continue   # inside an erased range (only the last one starting before can)
            k = _gt(ds, k, nd, s[i])
            at = k - 1
            if at > last_doc and e[i] <= de[at]:
                held += 1
                last_doc = at
        state[1] = s[n - 1]
        state[2] = e[n - 1]
        state[3] = last_doc
        n_out[b] = n
        held_out[b] = held
        high_out[b] = np.nan if nan else high
        over_out[b] = over
    return fids.shape[0]


class BlockChecker:
    """See the module docstring. The documents and the erased ranges are sorted (the
    erased ranges disjoint, as merge_ranges returns them); validated here once."""

    def __init__(self, doc_starts, doc_ends, erased_starts, erased_ends, max_count: int,
                 max_address: int):
        self.ds, self.de = _pair(doc_starts, doc_ends, "documents")
        self.xs, self.xe = _pair(erased_starts, erased_ends, "erased")
        self.max_count, self.max_address = int(max_count), int(max_address)
        self.state = np.array([-1, -1, -1, -1], np.int64)

    def position(self) -> tuple[int, int, int]:
        """(last_start, last_end, last_doc) in the current list."""
        return int(self.state[1]), int(self.state[2]), int(self.state[3])

    def set_position(self, fid: int, last_start: int, last_end: int, last_doc: int) -> None:
        self.state[:] = (fid, last_start, last_end, last_doc)

    def run(self, buf, offsets, fids, keys):
        b = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
        if b.dtype != np.uint8 or b.ndim != 1:
            raise TypeError("buf must be bytes or a one-dimensional uint8 array")
        o = _ints(offsets, "offsets")
        f = _ints(fids, "fids")
        k = _ints(keys, "keys")
        if len(o) != len(f) + 1 or len(k) != len(f):
            raise ValueError(f"{len(f)} blocks need {len(f) + 1} offsets and {len(f)} keys, "
                             f"not {len(o)} and {len(k)}")
        if len(o) and (o[0] < 0 or o[-1] > len(b) or (np.diff(o) < 0).any()):
            raise ValueError("offsets must rise within the buffer")
        m = len(f)
        n, held = np.zeros(m, np.int64), np.zeros(m, np.int64)
        high, over = np.zeros(m, np.float64), np.zeros(m, np.bool_)
        done = _run(b, o, f, k, self.max_count, self.max_address, self.ds, self.de,
                    self.xs, self.xe, self.state, n, held, high, over)
        return int(done), n[:done], held[:done], high[:done], over[:done]
