"""A batch of documents made ready to add: each one prepared (docno, text fields, values,
metadata), all their text tokenized in one pass, their annotations laid out in columns and
the documents in their stored form. Making one needs no database (addresses are relative
to the batch, a stored document's to its own start), so a big ingest makes the next batch
in a second process while the writer adds this one (see ingest/database.py); `Writer.add_many`
makes one for its items.

The tokens are numbered by kind (distinct folded word of the batch), so the writer looks up
each distinct word's feature id once, not once per occurrence; likewise the annotation
names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import storage, tokenizer
from .records import prepare

Prepared = tuple  # (docno | None, [(short name, path, text)], [(path, value)], metadata)
DOCUMENT = ":"    # the feature every document's range carries


@dataclass(frozen=True)
class Batch:
    docnos: list              # str per document, or None: the writer makes one from its start
    doc_tokens: np.ndarray    # int64 per document: its tokens (it takes max(tokens, 1) addresses)
    kinds: np.ndarray         # int32 (int64 if need be) per token: its word, names[kinds[i]]
    names: list               # the distinct folded words, in order of first appearance
    ann_doc: np.ndarray       # int64 per annotation (documents, fields, values): its document,
    ann_name: np.ndarray      # int64: its feature, ann_names[ann_name[i]],
    ann_p: np.ndarray         # int64: its first and last address less its document's start,
    ann_q: np.ndarray
    ann_v: np.ndarray         # float64: its value
    ann_names: list           # the distinct annotation feature names
    documents: list | None    # each document as the tuple of its stored fields (see make),
    #                           until encoded (a missing docno: the writer names it first)
    raws: list | bytes | None  # each document's stored msgpack (storage.relative_raw), or
    #                           the msgpack array of them all (with_raws: what crosses the pipe)
    container: str = DOCUMENT  # the feature over each document's range (see make)
    sparse: tuple = ()        # the sparse fields its records were read with (records.py)
    # numbered words (a reading process's batches, see make_scanned): each kind's number
    # in its tokenizer.WordNumbers; `names` then holds only the words numbered first in
    # this batch, from the number new_from on; the writer's FeatureIds hold the rest
    words: np.ndarray | None = None
    new_from: int = 0
    word_ids: FeatureIds | None = None

    def __len__(self) -> int:
        return len(self.docnos)

    def spans(self) -> np.ndarray:
        """The addresses each document takes: its tokens, at least one."""
        return np.maximum(self.doc_tokens, 1)

    def starts(self) -> np.ndarray:
        """Each document's first address less the batch's."""
        spans = self.spans()
        return np.cumsum(spans) - spans

    def doc_raws(self) -> list:
        """Each document's stored msgpack (every docno given)."""
        if isinstance(self.raws, bytes):
            return storage.split_raws(self.raws)
        if self.raws is not None:
            return self.raws
        assert self.documents is not None   # (a batch keeps its documents or their raws)
        encode = storage.encode_relative
        return [encode(d) for d in self.documents]

    def subset(self, keep) -> "Batch":
        """The batch of the documents at the indices `keep` (ascending)."""
        keep = np.asarray(keep, dtype=np.int64)
        doc_mask = np.zeros(len(self), dtype=bool)
        doc_mask[keep] = True
        renumber = np.cumsum(doc_mask) - 1
        rows = doc_mask[self.ann_doc]
        pick = keep.tolist()
        raws = None if self.documents is not None else self.doc_raws()
        return replace(
            self, docnos=[self.docnos[i] for i in pick], doc_tokens=self.doc_tokens[keep],
            kinds=self.kinds[np.repeat(doc_mask, self.doc_tokens)],
            ann_doc=renumber[self.ann_doc[rows]], ann_name=self.ann_name[rows],
            ann_p=self.ann_p[rows], ann_q=self.ann_q[rows], ann_v=self.ann_v[rows],
            documents=None if self.documents is None else [self.documents[i] for i in pick],
            raws=None if raws is None else [raws[i] for i in pick])


class FeatureIds:
    """The words a reading process numbered (Batch.words) as its batches arrive (learn),
    and the feature id a writer gave each number (-1: none yet), kept across batches and
    transactions, so a writer looks up only the words it has not given an id since
    (transaction.Writer._numbered_ids). A transaction thrown away forgets the ids it gave
    (forget), which another may give to other words."""

    def __init__(self) -> None:
        self.ids = np.full(1 << 16, -1, np.int64)
        self.names: list[str] = []   # the word of each number

    def learn(self, b: Batch) -> Batch:
        """The numbered batch `b` (the next from its reading process) with these ids,
        its new words learnt."""
        if b.new_from != len(self.names):
            raise ValueError(f"a batch's new words are numbered from {b.new_from}, "
                             f"{len(self.names)} were numbered before it")
        self.names.extend(b.names)
        return replace(b, word_ids=self)

    def get(self, numbers: np.ndarray) -> np.ndarray:
        """The feature id of each number (-1: none)."""
        if len(numbers) and int(numbers.max()) >= len(self.ids):
            grown = np.full(max(2 * len(self.ids), int(numbers.max()) + 1), -1, np.int64)
            grown[:len(self.ids)] = self.ids
            self.ids = grown
        return self.ids[numbers]

    def set(self, numbers: np.ndarray, ids: np.ndarray) -> None:
        self.ids[numbers] = ids   # (get grew the array past these numbers)

    def forget(self, first: int) -> None:
        """Forget the feature ids from `first` on (a transaction that gave them is thrown
        away)."""
        self.ids[self.ids >= first] = -1


def prepare_item(content, docno=None, id_field=None, text_fields=None,
                 sparse_fields=()) -> Prepared:
    """(docno, [(short name, path, text)], [(path, value)], metadata) of one document: plain
    text, or a JSON record (see records.prepare). The docno is checked by the writer."""
    if isinstance(content, str):
        return (None if docno is None else str(docno)), [("", "", content)], [], {}
    if isinstance(content, dict):
        p = prepare(content, id_field=id_field, text_fields=text_fields, docno=docno,
                    sparse_fields=sparse_fields)
        return (None if p.docno is None else str(p.docno)), p.texts, p.values, p.meta
    raise TypeError("add() takes a string or a dict record")


_NO_META: dict = {}  # shared by the documents without metadata (never changed)


class _Names(dict):
    """Annotation feature name -> its number in the batch, numbered as first asked for."""

    def __missing__(self, name: str) -> int:
        n = self[name] = len(self)
        return n


def _numbered(names, numbers: _Names, suffix: str = "") -> np.ndarray:
    """The number of each name + suffix in `numbers` (each distinct name looked up once)."""
    known = {name: numbers[name + suffix] for name in dict.fromkeys(names)}
    return np.fromiter(map(known.__getitem__, names), dtype=np.int64, count=len(names))


def _layout(per_doc: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> tuple:
    """Where each field and document of a batch lies, given each document's number of
    fields, each field's length in characters and where each token of the fields joined
    by newlines starts: (field_doc, field_tokens, doc_tokens, field_at, field_char, ends,
    first_field): each field's document, tokens, first address and first character
    within its document; each document's tokens and last address less its start; each
    document's first field."""
    n_docs = len(per_doc)
    begins = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=begins[1:])  # fields joined by newlines
    # a token never spans a newline, so field f's tokens are those starting in its text
    field_tokens = np.diff(np.searchsorted(starts, begins))
    field_doc = np.repeat(np.arange(n_docs, dtype=np.int64), per_doc)
    doc_tokens = np.zeros(n_docs, dtype=np.int64)
    np.add.at(doc_tokens, field_doc, field_tokens)
    # each field's first address and first character within its document
    before = np.cumsum(field_tokens) - field_tokens
    first_field = np.cumsum(per_doc) - per_doc
    has_fields = per_doc > 0
    doc_base = np.zeros(n_docs, dtype=np.int64)
    doc_char = np.zeros(n_docs, dtype=np.int64)
    doc_base[has_fields] = before[first_field[has_fields]]
    doc_char[has_fields] = begins[first_field[has_fields]]
    field_at = before - doc_base[field_doc]
    field_char = begins[:-1] - doc_char[field_doc]
    ends = np.maximum(doc_tokens, 1) - 1
    return field_doc, field_tokens, doc_tokens, field_at, field_char, ends, first_field


def make(docs: list, container: str = DOCUMENT, sparse: tuple = ()) -> Batch:
    """Tokenize prepared documents and lay out their annotations and stored form.
    UnicodeEncodeError when a text holds a lone surrogate (no UTF-8 can store it);
    bad_documents() finds which. `container` is the feature each document's range carries:
    `:` for the collection, another (e.g. `note:`) for documents kept apart from it;
    `sparse`: the sparse fields they were prepared with."""
    n_docs = len(docs)
    fields = [f for d in docs for f in d[1]]
    shorts = [f[0] for f in fields]
    if container != DOCUMENT and any(f[1] and f[0] + ":" == container for f in fields):
        raise ValueError(f"a document in the container {container!r} cannot have a field "
                         f"of that name")
    paths = [f[1] for f in fields]
    texts = [f[2] for f in fields]
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    starts, kinds, names = tokenizer.distinct_tokens("\n".join(texts))
    if len(names) < 2**31:
        kinds = kinds.astype(np.int32)  # half the bytes to hand to the writer process
    per_doc = np.fromiter(map(len, [d[1] for d in docs]), dtype=np.int64, count=n_docs)
    field_doc, field_tokens, doc_tokens, field_at, field_char, ends, first_field = \
        _layout(per_doc, lengths, starts)

    # annotations: each field with tokens and a path (short name + ":" and path over its
    # tokens), each document (its container, ":", over its range), each value (its path
    # over the range)
    ann_names = _Names()
    document = ann_names[container]
    annotated = np.flatnonzero((field_tokens > 0) & np.fromiter(
        map(bool, paths), dtype=bool, count=len(paths)))
    sel = annotated.tolist()
    short_ids = _numbered([shorts[f] for f in sel], ann_names, ":")
    path_ids = _numbered([paths[f] for f in sel], ann_names)
    f_doc, f_p = field_doc[annotated], field_at[annotated]
    f_q = f_p + field_tokens[annotated] - 1
    values = [(i, path, value) for i, d in enumerate(docs) if d[2] for path, value in d[2]]
    v_doc = np.fromiter((v[0] for v in values), dtype=np.int64, count=len(values))
    v_ids = _numbered([v[1] for v in values], ann_names)
    everything = np.arange(n_docs, dtype=np.int64)
    ann_doc = np.concatenate((f_doc, f_doc, everything, v_doc))
    ann_name = np.concatenate((short_ids, path_ids, np.full(n_docs, document, np.int64), v_ids))
    ann_p = np.concatenate((f_p, f_p, np.zeros(n_docs + len(values), np.int64)))
    ann_q = np.concatenate((f_q, f_q, ends, ends[v_doc]))
    ann_v = np.zeros(len(ann_doc), dtype=np.float64)
    ann_v[len(ann_v) - len(values):] = np.fromiter((v[2] for v in values), dtype=np.float64,
                                                   count=len(values))

    # the documents, as the tuples whose msgpack is a storage.Document's (an array of its
    # fields) with its addresses less its start; a document's text is its fields joined
    # by newlines; the container is stored only when it is not ":"
    field_rows = list(zip(shorts, paths, field_char.tolist(),
                          (field_char + lengths).tolist(), field_at.tolist(),
                          (field_at + field_tokens - 1).tolist()))
    documents: list[tuple] = []
    add = documents.append
    for d, f, end, tokens in zip(docs, first_field.tolist(), ends.tolist(),
                                 doc_tokens.tolist()):
        fs = d[1]
        k = len(fs)
        if k == 1:
            text = fs[0][2]
        elif k == 2:
            text = fs[0][2] + "\n" + fs[1][2]
        else:
            text = "\n".join([t for _, _, t in fs])
        add((d[0], 0, end, text, field_rows[f:f + k], d[3] or _NO_META, tokens))
    if container != DOCUMENT:
        documents = [d + (container,) for d in documents]
    return Batch([d[0] for d in docs], doc_tokens, kinds, names, ann_doc, ann_name, ann_p,
                 ann_q, ann_v, list(ann_names), documents, None, container, tuple(sparse))


def make_scanned(scan: dict, numbers: tokenizer.WordNumbers | None = None) -> Batch:
    """The batch of flat JSONL records read by kernels.scan_flat (each record's docno and
    text fields, no metadata, the collection's container): what make gives for the same
    records prepared (records.prepare), with its documents encoded (with_raws), made from
    the scan's arrays without a Python object per record or field; its kinds numbered
    in `numbers` when given (Batch.words: `names` holds only the words new to them)."""
    from . import kernels
    n_docs = scan["docs"]
    keys = [k.decode("ascii") for k in scan["keys"]]
    f_key = scan["f_key"]
    lengths = scan["f_cps"]
    words, new_from = None, 0
    if numbers is None:
        starts, kinds, names = tokenizer.distinct_utf8_tokens(scan["u8"])
    else:
        starts, kinds, words, new_from, names = tokenizer.numbered_utf8_tokens(scan["u8"],
                                                                               numbers)
    if (len(names) if words is None else len(words)) < 2**31:   # (how many kinds)
        kinds = kinds.astype(np.int32)  # (as make)
    per_doc = np.diff(scan["d_fields"])
    field_doc, field_tokens, doc_tokens, field_at, field_char, ends, _ = \
        _layout(per_doc, lengths, starts)
    # annotations as make numbers them: the container, then each field's short name + ":"
    # and then its path, in order of first appearance among the fields with tokens
    ann_names = _Names()
    document = ann_names[DOCUMENT]
    annotated = np.flatnonzero(field_tokens > 0)
    sel_keys = f_key[annotated]
    seen, first = np.unique(sel_keys, return_index=True)
    order = seen[np.argsort(first)].tolist()
    short_number = np.zeros(len(keys), np.int64)
    path_number = np.zeros(len(keys), np.int64)
    for k in order:
        short_number[k] = ann_names[keys[k] + ":"]
    for k in order:
        path_number[k] = ann_names[f":{keys[k]}:"]
    f_doc, f_p = field_doc[annotated], field_at[annotated]
    f_q = f_p + field_tokens[annotated] - 1
    everything = np.arange(n_docs, dtype=np.int64)
    ann_doc = np.concatenate((f_doc, f_doc, everything))
    ann_name = np.concatenate((short_number[sel_keys], path_number[sel_keys],
                               np.full(n_docs, document, np.int64)))
    ann_p = np.concatenate((f_p, f_p, np.zeros(n_docs, np.int64)))
    ann_q = np.concatenate((f_q, f_q, ends))
    ann_v = np.zeros(len(ann_doc), dtype=np.float64)
    encode = storage.encode_relative
    raws = kernels.write_documents(
        scan, ends, doc_tokens, field_char, field_char + lengths, field_at,
        field_at + field_tokens - 1, [encode(k) for k in keys],
        [encode(f":{k}:") for k in keys])
    docnos = scan["docnos"].tobytes().decode("utf-8").split("\n")
    docnos.pop()   # (each docno is followed by a newline)
    return Batch(docnos, doc_tokens, kinds, names, ann_doc, ann_name, ann_p, ann_q, ann_v,
                 list(ann_names), None, raws, words=words, new_from=new_from)


def with_raws(b: Batch) -> Batch:
    """The batch with its documents encoded (every docno given) as one msgpack array, not
    yet compressed (one bytes object pickles at once): what an ingest's reading process
    hands the writer, which compresses them on a thread of its own while it does the rest
    (the reading process is the busier one)."""
    if b.raws is not None:
        return b
    if any(d is None for d in b.docnos):
        raise ValueError("a document has no docno yet")
    return replace(b, raws=storage.encode_relative(b.documents), documents=None)


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
