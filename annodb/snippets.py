"""Snippets: a window of a document's text around a cover (DESIGN §5).

A snippet is WIDTH tokens of the document centred on the cover, clipped to the document
(shifted, not shortened, when the document allows); a cover longer than WIDTH shows its
first WIDTH tokens, all of them highlighted. `make` returns data (the text and the
highlighted character range); `Snippet.marked()` renders the `<cover>...</cover>` markup
the server and the CLI show. Newlines become spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import tokenizer
from .storage import Document

WIDTH = 200


@lru_cache(maxsize=256)
def token_offsets(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Character offsets of the tokens of a document's text (cached: snippets reuse them)."""
    return tokenizer.offsets(text)


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
