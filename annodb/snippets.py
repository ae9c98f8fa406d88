"""Snippets: a window of a document's text around a cover (ARCHITECTURE.md
"Evaluation and ranking").

A snippet is WIDTH tokens of the document centred on the cover, clipped to the document
(shifted, not shortened, when the document allows); a cover longer than WIDTH shows its
first WIDTH tokens, all of them highlighted. The document's fields before the one holding
the cover's start are left out, so a hit in a record's text does not begin with the short
fields before it (the Bible's `book`, "Gen"); a plain document is one field.

The characters shown run from the first token's leading punctuation to the last token's
trailing punctuation: the text between two tokens up to its first whitespace belongs to
the token before, after its last whitespace to the token after, and text between tokens
with no whitespace (`10:30`, `covid-19`) to the token before. So "rose 3%." stays "rose
3%." and "“Let there be light,”" keeps its quotes. The cover's highlight is exactly its
tokens' characters. `make` returns data (the text and the highlighted character range);
`Snippet.marked()` renders the `<cover>...</cover>` markup the server and the CLI show.
Newlines become spaces.
"""

from __future__ import annotations

import re
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


def window(n_tokens: int, a: int, b: int, width: int = WIDTH, first: int = 0
           ) -> tuple[int, int, int, int]:
    """Token indices (lo, hi) of the snippet and (a, b) of the highlight, for a cover of
    token indices a..b in a document of n_tokens tokens whose tokens before `first` are
    left out."""
    a = max(a, first)
    b = min(b, n_tokens - 1)
    length = b - a + 1
    if length >= width:
        return a, a + width - 1, a, a + width - 1
    lo = a - (width - length) // 2
    hi = lo + width - 1
    if lo < first:
        hi, lo = hi + first - lo, first
    if hi > n_tokens - 1:
        lo, hi = max(lo - (hi - (n_tokens - 1)), first), n_tokens - 1
    return lo, hi, a, b


_FIRST_SPACE = re.compile(r"\s")
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.S)


def _lead(text: str, gap_start: int, token_start: int, first_token: bool) -> int:
    """Where the text shown before a token starts: after the last whitespace of the gap
    before it (the whole gap before a document's first token, none of one without
    whitespace between two tokens)."""
    m = _UP_TO_LAST_SPACE.match(text, gap_start, token_start)
    if m is not None:
        return m.end()
    return gap_start if first_token else token_start


def _trail(text: str, token_end: int, gap_end: int) -> int:
    """Where the text shown after a token ends: at the first whitespace of the gap after
    it (the whole gap when it has none)."""
    m = _FIRST_SPACE.search(text, token_end, gap_end)
    return gap_end if m is None else m.start()


def _first_token(doc: Document, p: int) -> int:
    """The index of the first token of the field holding address p (0 if none does)."""
    for f in doc.fields:
        if f.start <= p <= f.end:
            return f.start - doc.start
    return 0


def make(doc: Document, p: int, q: int, width: int = WIDTH) -> Snippet:
    """The snippet of `doc` for the cover [p, q] (addresses)."""
    starts, ends = token_offsets(doc.text)
    n = len(starts)
    if n == 0:
        return Snippet("", 0, 0)
    first = min(_first_token(doc, p), n - 1)
    lo, hi, a, b = window(n, p - doc.start, q - doc.start, width, first)
    text = doc.text
    base = _lead(text, int(ends[lo - 1]) if lo else 0, int(starts[lo]), lo == 0)
    stop = _trail(text, int(ends[hi]), int(starts[hi + 1]) if hi + 1 < n else len(text))
    shown = text[base:stop]
    if "\n" in shown or "\r" in shown:  # (two scans for a character, not three copies)
        shown = shown.replace("\r\n", "  ").replace("\n", " ").replace("\r", " ")
    return Snippet(shown, int(starts[a]) - base, int(ends[b]) - base)
