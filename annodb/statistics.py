"""What a writer keeps for ranking (storage/layout.py: each word's df in counts, the fields'
documents and tokens in meta "fields"): counted from a batch as it is added, and taken away
for what an erase removes (the erased document's text is at hand: retokenized); and what a
ranker reads of them (Statistics: gathered from one snapshot, combined over shards).
"""

from __future__ import annotations

import msgspec
import numpy as np

from . import kernels, tokenizer


class Statistics(msgspec.Struct, frozen=True):
    """A collection's statistics as rankers weigh words by them (Snapshot.statistics):
    its documents (container `:`) and their tokens; per feature asked for, its postings as
    stored (erased ones included: the same in every snapshot of one state, whatever was
    decoded before; SSR's free-text weights), the live documents holding it (df, BM25's)
    and a bound of its values (high, sparse scores'); per field, (documents, tokens), every
    field kept and the ones asked for. Summed over shards (combine), they are those of one
    database holding the same documents."""

    documents: int
    tokens: int
    postings: dict[str, int] = {}
    df: dict[str, int] = {}
    high: dict[str, float] = {}
    fields: dict[str, tuple[int, int]] = {}


def gather(snapshot, features=(), fields=()) -> Statistics:
    """The Statistics of one database's snapshot, for these features and fields: as
    stored, or counted from the lists where the database does not keep them (written
    before it did)."""
    lists = snapshot.lists
    postings, df, high = {}, {}, {}
    features = list(features)  # (kept for the committed state: the same words come again)
    known = lists.remembered_each("statistics", features, lambda f: _feature(lists, f))
    for f, (count, d, h) in zip(features, known):
        postings[f], df[f], high[f] = count, d, h
    kept = {name: tuple(v) for name, v in (snapshot.field_statistics() or {}).items()}
    for name in fields:
        if not kept.get(name, (0, 0))[0]:  # not kept: the field's documents and tokens
            iv = lists.whole(name)
            held = lists.containing(":", iv.starts, iv.ends)
            kept[name] = (len(held), int((iv.ends - iv.starts + 1).sum()))
    return Statistics(snapshot.document_count(), snapshot.token_count(), postings, df,
                      high, kept)


def _feature(lists, f: str) -> tuple[int, int, float]:
    """(postings as stored, df, high) of feature f: as stored, or counted from its list."""
    d, h = lists.statistics(f)
    if d is None or h is None:
        whole = lists.whole(f)
        if d is None:  # the documents holding a posting
            d = len(lists.containing(":", whole.starts, whole.starts))
        if h is None:
            h = max(float(whole.values.max()), 0.0) if len(whole) else 0.0
    return lists.stored_count(f), int(d), float(h)


def combine(parts: list[Statistics]) -> Statistics:
    """The statistics of shards as one collection's: sums (high: the largest)."""
    def summed(attr):
        out = {}
        for p in parts:
            for k, v in getattr(p, attr).items():
                out[k] = out.get(k, 0) + v
        return out
    high: dict[str, float] = {}
    for p in parts:
        for k, v in p.high.items():
            high[k] = max(high.get(k, 0.0), v)
    fields: dict[str, tuple[int, int]] = {}
    for p in parts:
        for k, (d, t) in p.fields.items():
            d0, t0 = fields.get(k, (0, 0))
            fields[k] = (d0 + d, t0 + t)
    return Statistics(sum(p.documents for p in parts), sum(p.tokens for p in parts),
                      summed("postings"), summed("df"), high, fields)


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
