"""A batch of documents made ready to add: each one prepared (docno, text fields, values,
metadata) and all their text tokenized in one pass. Making one needs no database, so a
big ingest makes the next batch in a second process while the writer adds this one (see
ingest.py); `Writer.add_many` makes one for its items.

The tokens are numbered by kind (distinct folded word of the batch), so the writer looks up
each distinct word's feature id once, not once per occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import tokenizer
from .records import prepare

Prepared = tuple  # (docno | None, [(short name, path, text)], [(path, value)], metadata)


@dataclass(frozen=True)
class Batch:
    docs: list            # Prepared, in order, each field's text left out: (docno, ((short,
    #                       path), ...), values, metadata), layouts and empties shared
    joined: str           # every field's text, joined by newlines
    field_begin: np.ndarray   # int64 per field (all documents' fields in order): its text is
    field_end: np.ndarray     # joined[field_begin[f]:field_end[f]]
    field_tokens: np.ndarray  # int64 per field: its token count
    kinds: np.ndarray     # int32 (int64 if need be) per token: its word, names[kinds[i]]
    names: list           # the distinct folded words, in order of first appearance

    def __len__(self) -> int:
        return len(self.docs)

    def fields_per_doc(self) -> np.ndarray:
        return np.fromiter((len(d[1]) for d in self.docs), dtype=np.int64, count=len(self.docs))

    def subset(self, keep) -> "Batch":
        """The batch of the documents at the indices `keep` (ascending)."""
        keep = np.asarray(keep, dtype=np.int64)
        per_doc = self.fields_per_doc()
        doc_mask = np.zeros(len(self.docs), dtype=bool)
        doc_mask[keep] = True
        field_mask = np.repeat(doc_mask, per_doc)
        token_mask = np.repeat(field_mask, self.field_tokens)
        return Batch([self.docs[i] for i in keep.tolist()], self.joined,
                     self.field_begin[field_mask], self.field_end[field_mask],
                     self.field_tokens[field_mask], self.kinds[token_mask], self.names)


def prepare_item(content, docno=None, id_field=None, text_fields=None) -> Prepared:
    """(docno, [(short name, path, text)], [(path, value)], metadata) of one document: plain
    text, or a JSON record (see records.prepare). The docno is checked by the writer."""
    if isinstance(content, str):
        return (None if docno is None else str(docno)), [("", "", content)], [], {}
    if isinstance(content, dict):
        p = prepare(content, id_field=id_field, text_fields=text_fields, docno=docno)
        return (None if p.docno is None else str(p.docno)), p.texts, p.values, p.meta
    raise TypeError("add() takes a string or a dict record")


_NO_META: dict = {}  # shared by the documents without metadata (never changed)
_layouts: dict = {}  # field layouts ((short name, path), ...) seen, one object each


def _layout(fields) -> tuple:
    """The document's (short name, path) pairs as one tuple shared by every document of
    the same layout: handing a batch to the writer process pickles it once."""
    layout = tuple((short, path) for short, path, _ in fields)
    found = _layouts.get(layout)
    if found is None:
        if len(_layouts) > 10000:
            _layouts.clear()
        found = _layouts[layout] = layout
    return found


def make(docs: list) -> Batch:
    """Tokenize prepared documents. UnicodeEncodeError when a text holds a lone surrogate
    (no UTF-8 can store it); bad_documents() finds which."""
    texts = [text for d in docs for _, _, text in d[1]]
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    begins = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=begins[1:])  # fields joined by newlines
    joined = "\n".join(texts)
    starts, kinds, names = tokenizer.distinct_tokens(joined)
    if len(names) < 2**31:
        kinds = kinds.astype(np.int32)  # half the bytes to hand to the writer process
    # a token never spans a newline, so field f's tokens are those starting in its text
    firsts = np.searchsorted(starts, begins)
    docs = [(d[0], _layout(d[1]), d[2] or (), d[3] or _NO_META) for d in docs]
    return Batch(docs, joined, begins[:-1], begins[:-1] + lengths, np.diff(firsts), kinds,
                 names)


def bad_documents(docs: list) -> list[int]:
    """The indices of the documents whose text no UTF-8 can store (a lone surrogate)."""
    bad = []
    for i, d in enumerate(docs):
        try:
            for _, _, text in d[1]:
                text.encode("utf-8")
        except UnicodeEncodeError:
            bad.append(i)
    return bad
