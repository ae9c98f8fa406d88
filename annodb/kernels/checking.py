"""A numba kernel for annodb.check: what check needs to know of one decoded block, in one
pass over it (it was a dozen numpy calls a block, each paying its own overhead; a
database holds millions of blocks).

    facts = block_checker(doc_starts, doc_ends, erased_starts, erased_ends)
    facts(starts, ends, values, last_end, last_doc) -> (flags, held, last_doc, high)

flags says which of the block's own invariants fail (the bits below); `held` counts the
documents (doc_starts / doc_ends: the collection's live documents, in address order)
holding a live interval of the block (one not inside an erased range) that come after the
document `last_doc` (the index of the last one counted for this list, or -1), and
`last_doc` is the new last one; `high` is the largest value (NaN if any value is NaN).
The counting needs the starts to rise: when they do not (flags has STARTS_NOT_RISING),
`held` is -1 and the caller counts another way. The brute-force twin is in tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .algebra import _floats, _gt, _pair

__all__ = ["block_checker", "ENDS_BEFORE_STARTS", "STARTS_NOT_RISING", "ENDS_NOT_RISING",
           "OVERLAPPING"]

ENDS_BEFORE_STARTS = 1   # an interval ends before it starts
STARTS_NOT_RISING = 2    # two starts in a row do not strictly increase
ENDS_NOT_RISING = 4      # two ends in a row do not strictly increase (nesting)
OVERLAPPING = 8          # an interval starts at or before the previous one's end
#                          (the previous block's last one included: last_end)


@njit(cache=True, nogil=True)
def _block_facts(s, e, v, last_end, ds, de, xs, xe, last_doc):
    n = s.shape[0]
    flags = 0
    high = -np.inf
    nan = False
    for i in range(n):
        if e[i] < s[i]:
            flags |= ENDS_BEFORE_STARTS
        if i > 0:
            if s[i] <= s[i - 1]:
                flags |= STARTS_NOT_RISING
            if e[i] <= e[i - 1]:
                flags |= ENDS_NOT_RISING
            if s[i] <= e[i - 1]:
                flags |= OVERLAPPING
        x = v[i]
        if np.isnan(x):
            nan = True
        elif x > high:
            high = x
    if n > 0 and s[0] <= last_end:
        flags |= OVERLAPPING
    if nan:
        high = np.nan
    if flags & STARTS_NOT_RISING:
        return flags, -1, last_doc, high
    held = 0
    nx = xs.shape[0]
    nd = ds.shape[0]
    j = 0   # the first erased range starting after s[i]
    k = 0   # the first document starting after s[i]
    for i in range(n):
        j = _gt(xs, j, nx, s[i])
        if j > 0 and e[i] <= xe[j - 1]:
            continue   # inside an erased range (only the last one starting before can hold it)
        k = _gt(ds, k, nd, s[i])
        at = k - 1
        if at > last_doc and e[i] <= de[at]:
            held += 1
            last_doc = at
    return flags, held, last_doc, high


def block_checker(doc_starts, doc_ends, erased_starts, erased_ends):
    """facts(starts, ends, values, last_end, last_doc) -> (flags, held, last_doc, high)
    for the blocks of a database whose live documents and erased ranges these are (see
    the module docstring; validated here once, not at every block). The documents and the
    erased ranges are sorted (the erased ranges disjoint, as merge_ranges returns them)."""
    ds, de = _pair(doc_starts, doc_ends, "documents")
    xs, xe = _pair(erased_starts, erased_ends, "erased")

    def facts(starts, ends, values, last_end, last_doc):
        s, e = _pair(starts, ends, "block")
        v = _floats(values, "values")
        if v.shape[0] != s.shape[0]:
            raise ValueError(f"block: {s.shape[0]} intervals but {v.shape[0]} values")
        if s.shape[0] == 0:
            raise ValueError("block: no intervals")
        flags, held, last, high = _block_facts(s, e, v, np.int64(last_end), ds, de, xs, xe,
                                               np.int64(last_doc))
        return int(flags), int(held), int(last), float(high)
    return facts
