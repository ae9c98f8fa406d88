"""Records: how a JSON record becomes a document's text fields and value annotations.

The docno is the id field (chosen, or the first of docid, docno, id, _id present). The text
is the chosen text fields in the order given, or else every string in the record but the
id, in record order; nested objects and arrays give paths like `:a:b:` and
`:authors:[0]:`. Numbers and booleans become values on their full-path feature over the
whole record (`:chapter:` = 2), so `(>> : (= :chapter: 2))` selects records of chapter 2.

Whatever is not text stays with the document as metadata (`Document.meta`), so a document
gives back every field its record had but the id (which is its docno): each top-level
field that is not wholly text, as it was (numbers, booleans, null, strings that are not
text fields, lists holding anything but strings); an object holding text keeps its other
members (`{"a": {"b": "text", "c": 1}}` -> meta `{"a": {"c": 1}}` and the text field
`:a:b:`). An integer beyond 64 bits (msgpack has none) is kept as its decimal string.

A sparse field (`sparse_fields`) holds a sparse vector, `{"term": weight, ...}` as a
learned-sparse encoder such as SPLADE writes it: each term becomes the value annotation
`field:term` (the term folded like text) over the record, its weight the value, for
ranking by dot product (bm25.py). Weights are numbers from 0 to MAX_WEIGHT (a weight of 0
is left out), and terms one word without spaces, parentheses or double quotes (a query can
then name the feature).
"""

from __future__ import annotations

import math

from .errors import IngestError
from .tokenizer import fold

ID_FIELDS = ("docid", "docno", "id", "_id")


class Prepared:
    """A record split up: docno, text fields, values and metadata. (A plain class with
    slots: ingest makes one per record, and a dataclass with default factories took 1 us.)"""

    __slots__ = ("docno", "texts", "values", "meta")

    def __init__(self, docno: str):
        self.docno = docno
        self.texts: list[tuple[str, str, str]] = []   # (short name, path, text)
        self.values: list[tuple[str, float]] = []     # (path feature, value)
        self.meta: dict = {}


_paths: dict[str, str] = {}  # top-level key -> its path ":key:", made once


def _path(key: str) -> str:
    path = _paths.get(key)
    if path is None:
        if len(_paths) > 100_000:
            _paths.clear()
        path = _paths[key] = f":{key}:"
    return path


def record_docno(record: dict, id_field: str | None) -> tuple[str, str]:
    """(the id field, the docno) of a record: `id_field`, or the first of ID_FIELDS it has;
    IngestError when it has none, or when its value is not a non-empty string or integer."""
    if id_field is not None:
        if id_field not in record:
            raise IngestError(f"record has no id field {id_field!r}")
        key = id_field
    else:
        for key in ID_FIELDS:
            if key in record:
                break
        else:
            raise IngestError(f"record has none of the id fields {', '.join(ID_FIELDS)} "
                              "(choose one with --id-field)")
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise IngestError(f"id field {key!r} must be a non-empty string or integer")
    return key, str(value)


def _number(value) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    return None


def _walk(value, path: str, short: str, out: Prepared, text: bool) -> None:
    if isinstance(value, str):
        if text:
            out.texts.append((short, path, value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{path}{k}:", str(k), out, text)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i}]:", short, out, text)
    else:
        number = _number(value)
        if number is not None:
            out.values.append((path, number))


_TEXT = object()  # _untext's "all of it is text"
_INT_RANGE = range(-2**63, 2**64)


def _stored(value):
    """value as metadata can store it: an int beyond 64 bits as its decimal string."""
    t = type(value)
    if t is int:
        return value if value in _INT_RANGE else str(value)
    if t is dict:
        return {k: _stored(v) for k, v in value.items()}
    if t is list:
        return [_stored(v) for v in value]
    return value


def _untext(value):
    """The part of a value whose strings are text that is not text (_TEXT if none is): an
    object keeps its other members; a list is kept whole unless all of it is text."""
    t = type(value)
    if t is str:
        return _TEXT
    if t is dict and value:
        rest = {}
        for k, v in value.items():
            r = _untext(v)
            if r is not _TEXT:
                rest[k] = r
        return rest or _TEXT
    if t is list and value and all(_untext(v) is _TEXT for v in value):
        return _TEXT
    return _stored(value)


def check_sparse_field(name: str) -> str:
    """The name of a sparse field, or IngestError when it cannot be one."""
    if not isinstance(name, str) or not name or any(c in name for c in ':<>#@="() \t\n'):
        raise IngestError(f"a sparse field is a plain record key (no spaces, quotes, "
                          f"parentheses or : < > # @ =), not {name!r}")
    return name


# The largest sparse weight, stored or a query's. A score sums a query weight times a
# stored one over the query's terms: with both at most 1e9, no sum of even a million terms
# comes near float64's overflow (1.8e308), where weights near it made every score inf.
# Learned-sparse encoders write weights of a few units (SPLADE) or impacts below 2**16.
MAX_WEIGHT = 1e9


def sparse_problem(term, weight) -> str | None:
    """Why (term, weight) cannot be an entry of a sparse vector (stored or a query's), or
    None."""
    if not isinstance(term, str) or not term or \
            any(c.isspace() or c in '()"' for c in term):
        return (f"term {term!r} must be one word without spaces, parentheses or double "
                "quotes (a query names it as the feature field:term)")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or \
            not 0 <= weight <= MAX_WEIGHT:   # (NaN fails the comparison)
        shown = repr(weight) if len(repr(weight)) <= 40 else repr(weight)[:37] + "..."
        return f"term {term!r} needs a weight from 0 to {MAX_WEIGHT:g}, not {shown}"
    return None


def _sparse(name: str, vector, out: Prepared) -> None:
    if not isinstance(vector, dict):
        raise IngestError(f"sparse field {name!r} must be an object of term: weight, not "
                          f"{type(vector).__name__}")
    for term, weight in vector.items():
        problem = sparse_problem(term, weight)
        if problem is not None:
            raise IngestError(f"sparse field {name!r}: {problem}")
        if weight:
            out.values.append((f"{name}:{fold(term)}", float(weight)))


def prepare(record: dict, *, id_field: str | None = None,
            text_fields: list[str] | None = None, docno: str | None = None,
            sparse_fields=()) -> Prepared:
    """Split a JSON record into docno, text fields, value annotations and metadata."""
    if not isinstance(record, dict):
        raise IngestError(f"a record must be a JSON object, not {type(record).__name__}")
    key = None
    if docno is None:
        key, docno = record_docno(record, id_field)
    elif id_field is not None:
        key = id_field
    out = Prepared(docno)
    if sparse_fields:
        record = dict(record)
        for name in sparse_fields:
            if name in record:
                _sparse(name, record.pop(name), out)
    if text_fields:
        for name in text_fields:
            if name in record:
                _walk(record[name], f":{name}:", name, out, True)
    as_text = text_fields is None
    texts, values, meta = out.texts, out.values, out.meta
    for k, v in record.items():
        if k == key:
            continue
        t = type(v)
        if text_fields and k in text_fields:  # (walked above)
            rest = _untext(v)
            if rest is not _TEXT:
                meta[k] = rest
            continue
        if t is str:  # the common flat cases without a call
            if as_text:
                texts.append((k, _path(k), v))
            else:
                meta[k] = v
            continue
        if (t is int or t is float) and math.isfinite(v):
            values.append((_path(k), float(v)))
            meta[k] = v if t is float or v in _INT_RANGE else str(v)
            continue
        _walk(v, f":{k}:", str(k), out, as_text)
        rest = _untext(v) if as_text else _stored(v)
        if rest is not _TEXT:
            meta[k] = rest
    return out
