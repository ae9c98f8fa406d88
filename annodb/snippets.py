"""Snippets: a window of a document's text around a cover (DESIGN §5).

A snippet is WIDTH tokens of the document centred on the cover, clipped to the document
(shifted, not shortened, when the document allows); a cover longer than WIDTH shows its
first WIDTH tokens, all of them highlighted. `make` returns data (the text and the
highlighted character range); `Snippet.marked()` renders the `<cover>...</cover>` markup
the server and the CLI show. Newlines become spaces.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from . import tokenizer
from .storage import Document

WIDTH = 200


OFFSETS_CACHE_BYTES = 32 << 20  # token offsets (and the texts they key) kept for snippets
_offsets: OrderedDict = OrderedDict()  # text -> (starts, ends, bytes)
_offsets_bytes = 0
_offsets_lock = threading.Lock()


def token_offsets(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Character offsets of the tokens of a document's text. The most recently used are
    kept (snippets of a query's hits and the next query's often share documents), within
    OFFSETS_CACHE_BYTES counting the text too: a huge document is not kept at all."""
    global _offsets_bytes
    with _offsets_lock:
        found = _offsets.get(text)
        if found is not None:
            _offsets.move_to_end(text)
            return found[0], found[1]
    starts, ends = tokenizer.offsets(text)
    size = starts.nbytes + ends.nbytes + len(text) + 100
    if size <= OFFSETS_CACHE_BYTES // 8:
        with _offsets_lock:
            if text not in _offsets:
                _offsets[text] = (starts, ends, size)
                _offsets_bytes += size
                while _offsets_bytes > OFFSETS_CACHE_BYTES:
                    _offsets_bytes -= _offsets.popitem(last=False)[1][2]
    return starts, ends


@dataclass(frozen=True)
class Snippet:
    text: str
    cover_start: int   # the highlighted characters are text[cover_start:cover_end]
    cover_end: int

    def marked(self, before: str = "<cover>", after: str = "</cover>") -> str:
        t = self.text
        return t[:self.cover_start] + before + t[self.cover_start:self.cover_end] + after + \
            t[self.cover_end:]


def window(n_tokens: int, a: int, b: int, width: int = WIDTH) -> tuple[int, int, int, int]:
    """Token indices (lo, hi) of the snippet and (a, b) of the highlight, for a cover of
    token indices a..b in a document of n_tokens tokens."""
    a = max(a, 0)
    b = min(b, n_tokens - 1)
    length = b - a + 1
    if length >= width:
        return a, a + width - 1, a, a + width - 1
    lo = a - (width - length) // 2
    hi = lo + width - 1
    if lo < 0:
        hi, lo = hi - lo, 0
    if hi > n_tokens - 1:
        lo, hi = max(lo - (hi - (n_tokens - 1)), 0), n_tokens - 1
    return lo, hi, a, b


def make(doc: Document, p: int, q: int, width: int = WIDTH) -> Snippet:
    """The snippet of `doc` for the cover [p, q] (addresses)."""
    starts, ends = token_offsets(doc.text)
    n = len(starts)
    if n == 0:
        return Snippet("", 0, 0)
    lo, hi, a, b = window(n, p - doc.start, q - doc.start, width)
    base = int(starts[lo])
    text = doc.text[base:int(ends[hi])]
    text = text.replace("\r\n", "  ").replace("\n", " ").replace("\r", " ")
    return Snippet(text, int(starts[a]) - base, int(ends[b]) - base)
