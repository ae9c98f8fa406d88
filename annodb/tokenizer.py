"""The tokenizer: text -> folded tokens, one address each (ARCHITECTURE.md
"Data model").

A token is a maximal run of Unicode letters, marks and digits (categories L*, M*, Nd, Nl,
No); each symbol of category So (emoji and the like) and each CJK or Tangut ideograph is a
token of one character; everything else separates. Case is folded per code point with simple
(one-to-one) folding, so a token's characters keep their offsets in the original text.

The character classes and the folding come from committed tables (unicode_tables.py), so the
tokenizer is the same whatever Unicode version the running Python has. Change anything here
and bump VERSION: the version is recorded in every database, which refuses another one.

The bulk path is one C-level `str.translate`/`str.lower` and one `re.findall` per call, so
tokenizing a batch of documents never loops per character in Python.

Diacritic folding is an option a database is created with (`annodb ingest
--fold-diacritics`, `annodb.open(path, fold_diacritics=True)`; recorded in its meta), not
part of the tokenizer: the tokens are found and case-folded as above, then each distinct
word is passed through `strip_diacritics` when it is indexed and when a query meets the
database (`cafe` finds `Café`, `Café` finds `cafe`).
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from .unicode_tables import FOLD, SINGLE_RANGES, UNICODE_VERSION, WORD_RANGES

VERSION = 1
NAME = f"annodb-{VERSION} (unicode {UNICODE_VERSION}, simple case folding)"


def _char_class(ranges) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(re.escape(chr(lo)) if lo == hi
                     else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
    return "[" + "".join(parts) + "]"


def _class_pattern(ranges) -> str:
    """A character class that `re` tests fast: the BMP part compiles to a bitmap; the
    astral ranges (a list `re` scans one by one) are tried only for astral characters."""
    bmp = [(lo, min(hi, 0xFFFF)) for lo, hi in ranges if lo <= 0xFFFF]
    astral = [(max(lo, 0x10000), hi) for lo, hi in ranges if hi > 0xFFFF]
    return f"(?:{_char_class(bmp)}|(?=[\U00010000-\U0010FFFF]){_char_class(astral)})"


_TOKEN = re.compile(f"{_class_pattern(WORD_RANGES)}+|{_class_pattern(SINGLE_RANGES)}")

# str.lower() is C-fast and agrees with simple folding except on the few characters that
# lower() leaves alone but folding changes (final sigma, long s, Cherokee, ...) and on the
# one character whose lowercase is two code points (U+0130).
_FOLD_AFTER_LOWER = re.compile(
    "[" + "".join(re.escape(chr(k)) for k in sorted(FOLD) if chr(k).lower() == chr(k)) + "]")


def fold(text: str) -> str:
    """Simple case folding, one code point to one code point (offsets are preserved)."""
    lowered = text.lower()
    if text.isascii():
        return lowered
    if len(lowered) != len(text):
        return text.translate(FOLD)
    if _FOLD_AFTER_LOWER.search(lowered):
        return lowered.translate(FOLD)
    return lowered


def tokens(text: str) -> list[str]:
    """The folded tokens of `text`, in order."""
    return _TOKEN.findall(fold(text))


def tokens_with_offsets(text: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Tokens with their character offsets: token i is original text[starts[i]:ends[i]]."""
    folded = fold(text)
    starts, ends = offsets(text)
    return [folded[a:b] for a, b in zip(starts.tolist(), ends.tolist())], starts, ends


def distinct_tokens(text: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The tokens of `text` numbered by kind: (starts, kinds, names), token i starting at
    character starts[i] and being the folded word names[kinds[i]] (names in order of first
    appearance). The bulk path for ingest: one kernel pass folds, finds and numbers the
    tokens, so Python makes each distinct string once. UnicodeEncodeError for a lone
    surrogate."""
    from . import kernels
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    try:
        return distinct_code_point_tokens(cps)
    except kernels.LoneSurrogate as err:
        at = err.position
        raise UnicodeEncodeError("utf-8", text, at, at + 1, "a lone surrogate") from None


def distinct_code_point_tokens(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """distinct_tokens of a text given as its code points (uint32); kernels.LoneSurrogate
    for a lone surrogate."""
    from . import kernels
    starts, kinds, arena, bounds = kernels.intern_tokens(cps, _class_table(), _fold_table())
    return starts, kinds, _words(arena, bounds)


def distinct_utf8_tokens(text: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """distinct_tokens of a text given as valid UTF-8 without surrogates (uint8; starts
    count code points)."""
    from . import kernels
    starts, kinds, arena, bounds = kernels.intern_tokens_utf8(text, _class_table(),
                                                              _fold_table())
    return starts, kinds, _words(arena, bounds)


class WordNumbers:
    """A number for each distinct folded word met in any batch of one reading process, in
    order of first appearance: a batch's kinds numbered so (see batch.Batch.words), the
    writer looks up the feature id of a word it has seen from this process in an array,
    not a dict of strings (kernels.number_words keeps the words met in arrays; a text's
    tokens are numbered in them as they are found by kernels.number_utf8)."""

    def __init__(self) -> None:
        self.table = np.full(1 << 16, -1, np.int64)
        self.hashes = np.empty(1 << 14, np.int64)
        self.known = np.zeros(1 << 14, np.int64)
        self.kept = np.empty(1 << 17, np.uint32)
        self.count = 0
        self.marks = np.zeros(1 << 14, np.int64)   # (kernels.number_utf8's, and
        self.calls = 0                              # the calls it has numbered)

    def __call__(self, arena: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """The number of each word arena[bounds[k]:bounds[k + 1]] (intern_tokens')."""
        from . import kernels
        out, self.count, self.table, self.hashes, self.known, self.kept = \
            kernels.number_words(arena, bounds, self.table, self.hashes, self.known,
                                 self.kept, self.count)
        return out

    def names(self, first: int) -> list[str]:
        """The words numbered first, first + 1, ... (the last numbered)."""
        edges = self.known[first:self.count + 1]
        return _words(self.kept[edges[0]:edges[-1]], edges - edges[0])


def numbered_utf8_tokens(text: np.ndarray, numbers: WordNumbers
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, list[str]]:
    """The tokens of a text given as valid UTF-8 without surrogates (as
    distinct_utf8_tokens), their kinds numbered in `numbers` too: (starts, kinds, each
    kind's number, the first number new here, the words of the new numbers in order)."""
    from . import kernels
    first = numbers.count
    numbers.calls += 1
    n = numbers
    if len(n.marks) != len(n.hashes):   # (grown by a call of `numbers` itself)
        n.marks = np.concatenate((n.marks, np.zeros(len(n.hashes) - len(n.marks), np.int64)))
    starts, kinds, words, n.count, n.table, n.hashes, n.known, n.kept, n.marks = \
        kernels.number_utf8(text, _class_table(), _fold_table(), n.table, n.hashes, n.known,
                            n.kept, n.marks, n.count, n.calls)
    return starts, kinds, words, first, numbers.names(first)


def _words(arena: np.ndarray, bounds: np.ndarray) -> list[str]:
    words = arena.tobytes().decode("utf-32-le")
    edges = bounds.tolist()
    return [words[a:b] for a, b in zip(edges, edges[1:])]


_folds = None


def _fold_table() -> np.ndarray:
    """Code point -> its simple case folding (itself for most)."""
    global _folds
    if _folds is None:
        table = np.arange(0x110000, dtype=np.uint32)
        for k, v in FOLD.items():
            table[k] = v if isinstance(v, int) else ord(v)
        _folds = table
    return _folds


_classes = None


def _class_table() -> np.ndarray:
    """Code point -> 0 separator, 1 word character, 2 one-character token."""
    global _classes
    if _classes is None:
        table = np.zeros(0x110000, dtype=np.uint8)
        for lo, hi in WORD_RANGES:
            table[lo:hi + 1] = 1
        for lo, hi in SINGLE_RANGES:
            table[lo:hi + 1] = 2
        _classes = table
    return _classes


def offsets(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Character offsets (starts, ends) of the tokens of `text`, without the strings: one
    kernel pass, for snippets of long documents."""
    from . import kernels
    cps = np.frombuffer(fold(text).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return kernels.token_spans(cps, _class_table())


def token_count(text: str) -> int:
    return len(_TOKEN.findall(fold(text)))


_DIACRITICS = re.compile("[\u0300-\u036f]")


def strip_diacritics(word: str) -> str:
    """`word` without diacritics: Unicode NFD, then the combining diacritical marks
    U+0300..U+036F dropped (the marks SQLite FTS5's unicode61 tokenizer removes with
    remove_diacritics; FTS5 folds Latin letters only, this folds every letter they
    decompose from: é -> e, ñ -> n, ά -> α, й -> и), then NFC. A word of such marks
    alone is kept as it is. Characters without a decomposition (ø, ł, ß) stay."""
    if word.isascii():
        return word
    stripped = _DIACRITICS.sub("", unicodedata.normalize("NFD", word))
    return unicodedata.normalize("NFC", stripped) if stripped else word
