"""Split a database into a sharded collection (`annodb split`).

    split("web.db", "web.shards", 4)

Every document goes to the shard its docno routes to (a note: its target's), at the
address it has in the database, so the collection ranks exactly as the database did. Its
words are tokenized again from its stored text; every other annotation (fields, values,
judgments, notes' links, any label) lying inside one document is copied with it, and the
erased ranges inside the documents are erased again. An annotation over no single document
(one spanning two documents, or over addresses holding none) has no shard to go to: it is
not copied, and the summary counts it. The database is only read.
"""

from __future__ import annotations

import os

import msgspec
import numpy as np

from . import batch, shards as _shards, tokenizer, transaction
from .collection import open as open_collection
from .query import STRUCTURAL
from .routing import route

WINDOW = 20_000   # documents per transaction of each shard


class SplitSummary(msgspec.Struct):
    documents: int = 0
    annotations: int = 0
    not_copied: int = 0          # annotations over no single document
    shards: int = 0


def _batch(docs: list, anns: list) -> batch.Batch:
    """A batch of stored documents (addresses relative to each) with their annotations
    (doc index, feature name, p, q, value relative to the document)."""
    texts = [d.text for d in docs]
    _, kinds, names = tokenizer.distinct_tokens("\n".join(texts))
    doc_tokens = np.fromiter((d.tokens for d in docs), dtype=np.int64, count=len(docs))
    if len(kinds) != int(doc_tokens.sum()):
        raise transaction.AnnodbError("a stored document's text does not tokenize to its "
                                      "token count (made with another tokenizer?)")
    ann_names = sorted({a[1] for a in anns})
    number = {n: i for i, n in enumerate(ann_names)}
    cols = list(zip(*anns)) if anns else [(), (), (), (), ()]
    stored = []
    for d in docs:
        fields = [(f.name, f.path, f.char_start, f.char_end, f.start - d.start,
                   f.end - d.start) for f in d.fields]
        row = (d.docno, 0, d.end - d.start, d.text, fields, d.meta, d.tokens)
        stored.append(row if d.container == transaction.DOCUMENT else row + (d.container,))
    return batch.Batch(
        [d.docno for d in docs], doc_tokens, kinds, names,
        np.asarray(cols[0], dtype=np.int64),
        np.fromiter((number[n] for n in cols[1]), dtype=np.int64, count=len(anns)),
        np.asarray(cols[2], dtype=np.int64), np.asarray(cols[3], dtype=np.int64),
        np.asarray(cols[4], dtype=np.float64), ann_names, stored, None,
        docs[0].container)


def split(source, dest, shards: int, *, progress=None) -> SplitSummary:
    """Write the database at `source` into a new sharded collection at `dest` of `shards`
    shards (see the module docstring). progress(documents done, documents in all)."""
    summary = SplitSummary(shards=shards)
    with open_collection(source, readonly=True) as src, src.read() as r:
        dest = os.fspath(dest)
        _shards.create_manifest(dest, shards, r.fold_diacritics)  # (refuses an existing one)
        collection = _shards.open(dest)
        try:
            _split(r, collection, summary, progress)
        finally:
            collection.close()
    return summary


def _split(r, collection, summary: SplitSummary, progress) -> None:
    n = len(collection.shards)
    heads = [(d.start, d.end, d.docno, d.container) for d in r.documents()]
    starts = np.array([h[0] for h in heads], dtype=np.int64)
    ends = np.array([h[1] for h in heads], dtype=np.int64)
    notes = r.intervals(transaction.NOTES)
    targets = dict(zip(notes.starts.tolist(), notes.values.tolist()))
    home = np.empty(len(heads), dtype=np.int64)
    for i, (start, _, docno, container) in enumerate(heads):
        home[i] = route(docno, n)
    for i, (start, _, docno, container) in enumerate(heads):   # notes live with their target
        if container == transaction.NOTES and start in targets:
            j = int(np.searchsorted(starts, int(targets[start])))
            if j < len(starts) and starts[j] == int(targets[start]):
                home[i] = home[j]
    # every annotation that is not a word: the document holding it, or none
    names = [f for f in r.features_with_prefix("", 1 << 62) if not STRUCTURAL.isdisjoint(f)]
    lists = {}
    for name in names:
        found = r.intervals(name)
        j = np.searchsorted(starts, found.starts, side="right") - 1
        inside = (j >= 0) & (found.ends <= ends[np.maximum(j, 0)])
        summary.not_copied += int((~inside).sum())
        lists[name] = (j[inside], found.starts[inside], found.ends[inside],
                       found.values[inside])
    erased_s, erased_e = r.erased()
    docs_iter = iter(r.documents())
    for lo in range(0, len(heads), WINDOW):
        docs = [next(docs_iter) for _ in range(min(WINDOW, len(heads) - lo))]
        hi = lo + len(docs)
        for s in range(n):
            pick = [k for k in range(lo, hi) if home[k] == s]
            if not pick:
                continue
            _write_shard(collection, s, [docs[k - lo] for k in pick], pick, lists, starts,
                         (erased_s, erased_e), summary)
        summary.documents += len(docs)
        if progress is not None:
            progress(summary.documents, len(heads))


def _write_shard(collection, s: int, docs: list, picked: list, lists: dict,
                 starts: np.ndarray, erased, summary: SplitSummary) -> None:
    """One transaction of shard s: these documents, their annotations and erased ranges."""
    index = {k: i for i, k in enumerate(picked)}
    anns = []
    lo, hi = picked[0], picked[-1]
    for name, (j, ps, qs, vs) in lists.items():
        a, b = np.searchsorted(j, lo), np.searchsorted(j, hi, side="right")
        for k, p, q, v in zip(j[a:b].tolist(), ps[a:b].tolist(), qs[a:b].tolist(),
                              vs[a:b].tolist()):
            i = index.get(k)
            if i is not None:
                base = int(starts[k])
                anns.append((i, name, p - base, q - base, v))
    summary.annotations += len(anns)
    # one batch per container (a batch's documents share theirs), in address order
    by_doc: dict[int, list] = {}
    for a in anns:
        by_doc.setdefault(a[0], []).append(a)
    with collection.shards[s].write() as w:
        run, run_anns = [], []
        for i, d in enumerate(docs):
            if run and d.container != run[0].container:
                _add(w, run, run_anns)
                run, run_anns = [], []
            run_anns += [(len(run),) + a[1:] for a in by_doc.get(i, ())]
            run.append(d)
        if run:
            _add(w, run, run_anns)
        es, ee = erased
        for d in docs:
            a = np.searchsorted(ee, d.start)
            while a < len(es) and es[a] <= d.end:
                w.erase(max(int(es[a]), d.start), min(int(ee[a]), d.end))
                a += 1


def _add(w, docs: list, anns: list) -> None:
    w.add_batch(_batch(docs, anns), starts=[d.start for d in docs])
