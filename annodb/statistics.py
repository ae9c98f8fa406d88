"""What a writer keeps for ranking (storage.py: each word's df in counts, the fields'
documents and tokens in meta "fields"): counted from a batch as it is added, and taken away
for what an erase removes (the erased document's text is at hand: retokenized).
"""

from __future__ import annotations

import numpy as np

from . import kernels, tokenizer


def batch_words(kinds: np.ndarray, doc_tokens: np.ndarray, n: int) -> np.ndarray:
    """How many of a batch's documents hold each of its n words (kinds: each token's)."""
    return kernels.document_frequencies(kinds, doc_tokens, n)


def merged(ids: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct ids, each token's index among them) when several words share an id
    (a database folding diacritics stores "café" and "cafe" as one word): a document
    holding both counts once in the word's df."""
    distinct, at = np.unique(ids, return_inverse=True)
    return distinct, at[kinds]


def batch_fields(names: list, name: np.ndarray, doc: np.ndarray, lengths: np.ndarray,
                 sparse=()) -> dict[str, tuple[int, int]]:
    """{field: (documents, tokens)} of annotations of documents doc[i] named
    names[name[i]], lengths[i] tokens long: the fields' short names (`title:`) only, not
    the terms of the sparse fields (`splade::`)."""
    prefixes = tuple(f + ":" for f in sparse)
    short = np.array([n.endswith(":") and not n.startswith(":") and
                      not (prefixes and n.startswith(prefixes)) for n in names] or [False],
                     dtype=bool)
    rows = np.flatnonzero(short[name]) if len(name) else name
    if not len(rows):
        return {}
    ids, at = np.unique(name[rows], return_inverse=True)
    tokens = np.bincount(at, weights=lengths[rows], minlength=len(ids)).astype(np.int64)
    width = int(doc[rows].max()) + 1
    pairs = np.sort(at * width + doc[rows])  # (field, document), each distinct one once:
    pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]]  # (np.unique hashes: 100x slower)
    docs = np.bincount(pairs // width, minlength=len(ids))
    return {names[i]: (d, t) for i, d, t in zip(ids.tolist(), docs.tolist(), tokens.tolist())}


def document_fields(doc) -> dict[str, tuple[int, int]]:
    """{field: (1, tokens)} of a stored document's fields (short names)."""
    out: dict[str, tuple[int, int]] = {}
    for f in doc.fields:
        if f.name and f.start <= f.end:
            out[f.name + ":"] = (1, out.get(f.name + ":", (1, 0))[1] + f.end - f.start + 1)
    return out


def add_fields(kept: dict, counts: dict, sign: int) -> None:
    """Add (sign 1) or take away (-1) field counts to meta "fields" (`kept`)."""
    for name, (docs, tokens) in counts.items():
        entry = kept.setdefault(name, [0, 0])
        entry[0] += sign * docs
        entry[1] += sign * tokens


def lost_words(doc, p: int, q: int, erased: tuple[np.ndarray, np.ndarray],
               fold: bool = False) -> list[str]:
    """The words of `doc` whose live postings in it all lie in p..q (so erasing p..q takes
    the document from their df), erased the ranges already erased; stripped of their
    diacritics when the database folds them (fold)."""
    _, kinds, names = tokenizer.distinct_tokens(doc.text)
    if not len(kinds):
        return []
    if fold:
        names = list(map(tokenizer.strip_diacritics, names))
        distinct = list(dict.fromkeys(names))
        where = {n: i for i, n in enumerate(distinct)}
        kinds = np.array([where[n] for n in names], dtype=np.int64)[kinds]
        names = distinct
    addrs = np.arange(doc.start, doc.start + len(kinds), dtype=np.int64)
    live = np.zeros(len(addrs), bool)
    live[kernels.drop_erased(addrs, addrs, *erased)] = True
    stays = live & ((addrs < p) | (addrs > q))
    had = np.zeros(len(names), bool)
    had[kinds[live]] = True
    had[kinds[stays]] = False
    return [names[k] for k in np.flatnonzero(had).tolist()]
