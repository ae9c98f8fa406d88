"""Numba kernel for token offsets: the tokenizer's regex, as one pass over code points.

`tokenizer.tokens` uses `re.findall` (fast, returns the token strings); snippets need only
where each token starts and ends, which a Python loop over match objects makes slow for
long documents. This kernel gives the same spans from a code point -> class table
(0 separator, 1 word character, 2 one-character token).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _token_spans(cps, classes):
    n = len(cps)
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    m = 0
    i = 0
    while i < n:
        c = classes[cps[i]]
        if c == 1:
            j = i + 1
            while j < n and classes[cps[j]] == 1:
                j += 1
            starts[m] = i
            ends[m] = j
            m += 1
            i = j
        elif c == 2:
            starts[m] = i
            ends[m] = i + 1
            m += 1
            i += 1
        else:
            i += 1
    return starts[:m].copy(), ends[:m].copy()


def token_spans(codepoints, classes) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the tokens in a uint32 array of code points, given a uint8 class
    for every code point 0..0x10FFFF."""
    cps = np.ascontiguousarray(codepoints, dtype=np.uint32)
    table = np.ascontiguousarray(classes, dtype=np.uint8)
    if len(table) != 0x110000:
        raise ValueError("the class table needs one entry per code point (0x110000)")
    if len(cps) and int(cps.max()) >= 0x110000:
        raise ValueError("not a code point")
    return _token_spans(cps, table)
