"""Agent memory: a small high-level API over open/write/read (no storage of its own).

    mem = annodb.Memory("agent.db")
    m = mem.remember("Alice prefers tea to coffee", user="alice", importance=3)
    mem.recall("what does alice drink", k=5, where={"user": "alice"})
    mem.recall("(^ tea coffee)", where={"importance": (">=", 2)})
    mem.annotate(m, "useful", 2)
    mem.history(10, where={"user": "alice"})
    mem.forget(m)

A memory is a document: its text is the record field `text`, its docno `m<address>` (the
memory's first address: unique for ever, even after forget, and increasing in the order
memories were committed) unless one is given. Metadata (str, int, float or bool values;
keys without whitespace, `( ) " :`) is kept with the document and indexed over it:

- a number or a bool is a value on the feature `:key:` (records.py's scheme), so
  `where={"importance": (">=", 3)}` is `(>= :importance: 3)`;
- a string is a label, the feature `key:value` (whitespace, `( ) " %` in the value written
  `%XX`), so `where={"user": "alice"}` is the feature `user:alice`, matched exactly;
- `:time:` holds when it was remembered, in seconds since the epoch (give `time=` to set it).

`annotate(docno, label, value)` sets the value of `:label:` over a memory (the latest write
wins), so a later judgment filters like metadata: `where={"useful": (">=", 2)}`.

`where` maps keys to a value (exact match), a list of values (any of), or a pair
(op, value) with op one of = != < <= > >= (strings: = and != only). It is compiled into the
query algebra: results are ranked inside `(>> : c1 c2 ...)` (every condition as a
containment, `!>` for !=), so filtering happens inside the ranking and k results come back
whenever k match. Every call is one transaction: several processes may share a memory.
"""

from __future__ import annotations

import re
import time as _time
from dataclasses import dataclass, field

import numpy as np

from . import query as _query, recall as _recall
from .collection import open as _open
from .errors import AnnodbError
from .query import Combine, Compare, Feature

DOCUMENT = Feature(":")
TIME = "time"
TEXT = "text"                      # the record field holding a memory's text
RESERVED = (TEXT, "docno")
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_BAD_KEY = re.compile(r'[\s()":]')
_ESCAPE = re.compile(r'[\s()"%]')
_VALUE_FEATURE = re.compile(r":[^:]+:")


@dataclass(frozen=True)
class Entry:
    """One memory: from recall (with score and snippet), history or get (score None)."""

    docno: str
    text: str
    metadata: dict = field(default_factory=dict)
    score: float | None = None
    snippet: str | None = None     # the text around the best match, marked <cover>...</cover>

    def as_dict(self) -> dict:
        return {"docno": self.docno, "score": self.score, "text": self.text,
                "metadata": self.metadata, "snippet": self.snippet}


class Recalled(list):
    """recall's result: a list of Entry, plus the query and filter that ran and any repairs
    lenient parsing made to the query."""

    def __init__(self, entries=(), query: str = "", filter: str = ":", warnings=()):
        super().__init__(entries)
        self.query, self.filter, self.warnings = query, filter, list(warnings)


def label(key: str, value: str) -> str:
    """The feature of a string metadata value: `key:value`, escaped so it can be queried."""
    return f"{_key(key)}:" + _ESCAPE.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), value)


def _key(key) -> str:
    if not isinstance(key, str) or not key or _BAD_KEY.search(key):
        raise AnnodbError(f"metadata key {key!r}: need a non-empty name without whitespace "
                          'or ( ) " :')
    return key


def _number(key: str, value) -> float:
    if isinstance(value, (bool, int, float)):
        value = float(value)
        if value == value and abs(value) != float("inf"):
            return value
    raise AnnodbError(f"metadata {key!r}: {value!r} is not a finite number")


def _term(key: str, value) -> _query.Node:
    """The exact-match condition for one value of `key`."""
    if isinstance(value, str):
        return Feature(label(key, value))
    return Compare("=", Feature(f":{_key(key)}:"), _number(key, value))


def _conditions(key: str, want) -> list[tuple[str, _query.Node]]:
    """(containment operator, node) pairs a memory must satisfy for `where[key] = want`."""
    if isinstance(want, (list, tuple)) and len(want) == 2 and want[0] in OPERATORS \
            and not isinstance(want[1], (list, tuple)):
        op, value = want
        if isinstance(value, str):
            if op not in ("=", "!="):
                raise AnnodbError(f"where {key!r}: {op} compares numbers; strings take = or !=")
            return [(">>" if op == "=" else "!>", Feature(label(key, value)))]
        return [(">>", Compare(op, Feature(f":{_key(key)}:"), _number(key, value)))]
    if isinstance(want, (list, tuple, set, frozenset)):
        nodes = tuple(dict.fromkeys(_term(key, v) for v in want))
        if not nodes:
            raise AnnodbError(f"where {key!r}: an empty list matches nothing")
        return [(">>", nodes[0] if len(nodes) == 1 else Combine("+", nodes))]
    return [(">>", _term(key, want))]


def where_node(where: dict | None, base: _query.Node = DOCUMENT) -> _query.Node:
    """The query selecting the `base` intervals (memories) that satisfy `where`."""
    node = base
    for key, want in (where or {}).items():
        for op, cond in _conditions(key, want):
            node = Combine(op, (node, cond))
    return node


_GCL_START = re.compile(r"\(\s*(?:" + "|".join(
    re.escape(op) for op in sorted(_query.OPERATORS, key=len, reverse=True)) + r")(?=[\s()\"]|$)")


def is_gcl(text: str) -> bool:
    """Query text that recall reads as GCL rather than free text: an expression (`(`
    followed by an operator, like `(^ tea coffee)` or `(>= :importance: 3)`) or one quoted
    phrase (`"black coffee"`). Anything else is words, whatever characters it holds
    (`bob@example.com`, `10:30`, `user:alice`, `(see above)`)."""
    t = text.strip()
    return (_GCL_START.match(t) is not None
            or (len(t) >= 2 and t[0] == t[-1] == '"' and '"' not in t[1:-1]))


class Memory:
    """An agent's memory in the annodb database at `path` (created if missing;
    `fold_diacritics=True` for a new one whose recall ignores accents, see annodb.open)."""

    def __init__(self, path, *, timeout: float = 30.0, fold_diacritics: bool | None = None):
        self.db = _open(path, timeout=timeout, fold_diacritics=fold_diacritics)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"annodb.Memory({self.db.path!r})"

    # writing
    def remember(self, text: str, /, *, docno: str | None = None, **metadata) -> str:
        """Store `text` with `metadata`; returns its docno. Giving the docno of an existing
        memory replaces it (the latest remember wins)."""
        if not isinstance(text, str):
            raise TypeError("remember() takes the memory's text as a string")
        record = {}
        for key, value in metadata.items():
            if _key(key) in RESERVED:
                raise AnnodbError(f"metadata key {key!r} is reserved")
            if not isinstance(value, str):
                _number(key, value)
            record[key] = value
        record.setdefault(TIME, _time.time())
        _number(TIME, record[TIME])
        with self.db.write() as w:
            replace = docno is not None
            if docno is None:
                base, n = f"m{w.address_space()}", 0
                docno = base
                while w.has(docno):    # taken by a docno someone chose
                    n += 1
                    docno = f"{base}.{n}"
            added = w.add({TEXT: text, **record}, docno=str(docno), text_fields=[TEXT],
                          replace=replace)
            for key, value in record.items():
                if isinstance(value, str):
                    w.annotate(label(key, value), added.start, added.end)
        return added.docno

    def annotate(self, docno: str, label: str, value: float = 0.0) -> None:
        """Set `:label:` = value over the memory `docno` (NotFoundError if there is none).
        Without a value it carries 0, as every annotation does (Writer.annotate, `annodb
        annotate`, the server and MCP)."""
        value = _number(label, value)
        with self.db.write() as w:
            doc = w.document(docno)
            w.annotate(f":{_key(label)}:", doc.start, doc.end, value)

    def forget(self, docno: str) -> bool:
        """Delete the memory `docno` and everything annotated inside it. False if absent."""
        with self.db.write() as w:
            return w.delete(docno)

    # reading
    def recall(self, query_or_text: str | None, k: int = 10, where: dict | None = None, *,
               gcl: bool | None = None, rank: str | None = None) -> Recalled:
        """The k best memories for a GCL query or free text, among those matching `where`,
        ranked by `rank` ("context" or one of ranking.RANKS; default: shortest-substring
        ranking for GCL, "context" for free text: BM25 in which a memory borrows the words
        of its neighbours in its session, with the session's score and the dates the text
        names, annodb/recall.py; a sharded memory ranks free text by the engine's
        free-text default). No query (None or "") gives the latest k. `gcl`: True
        reads the query as GCL (so a raw term like `user:alice` names a feature), False as
        words; None (the default) decides by `is_gcl`."""
        if not query_or_text or not query_or_text.strip():
            latest = where_node(where, Feature(f":{TIME}:"))
            return Recalled(self.history(k, where), "", _query.format(latest))
        box = where_node(where)
        with self.db.read() as r:
            if gcl or (gcl is None and is_gcl(query_or_text)):
                results = r.search(query_or_text, k=k, container=box, lenient=True,
                                   rank=rank or "ssr")
            else:
                results = _recall.rank_text(r, query_or_text, k, box, rank)
            fields = _Fields(r)
            entries = [self._entry(r.document_at(h.start), fields, h.score, h.snippet)
                       for h in results]
        return Recalled(entries, results.query, _query.format(box), results.warnings)

    def history(self, n: int = 20, where: dict | None = None) -> list[Entry]:
        """The n most recent memories matching `where`: latest `:time:` first, ties by the
        later address (later commit)."""
        with self.db.read() as r:
            times = r.query(where_node(where, Feature(f":{TIME}:")))
            order = np.lexsort((-times.starts, -times.values))[:max(n, 0)]
            fields = _Fields(r)
            out = []
            for i in order.tolist():
                doc = r.document_at(int(times.starts[i]))
                if doc is not None:
                    out.append(self._entry(doc, fields))
        return out

    def get(self, docno: str) -> Entry | None:
        """The memory `docno`, or None."""
        with self.db.read() as r:
            return self._entry(r.document(docno), _Fields(r)) if r.has(docno) else None

    @staticmethod
    def _entry(doc, fields: "_Fields", score=None, snippet=None) -> Entry:
        metadata = dict(doc.meta)
        own = {f.path for f in doc.fields}
        for name in fields.names():
            key = name[1:-1]
            if name in own:
                continue
            value = fields.value(name, doc.start, doc.end)
            if value is not None and not isinstance(metadata.get(key), str) and (
                    key not in metadata or float(metadata[key]) != value):
                metadata[key] = int(value) if value.is_integer() else value
        return Entry(doc.docno, doc.text, metadata, score, snippet)


class _Fields:
    """The values of `:name:` features over whole documents, as of one snapshot: what
    annotate() set after remember()."""

    LIMIT = 1000

    def __init__(self, snapshot):
        self.r = snapshot
        self._names = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = [f for f in self.r.features_with_prefix(":", self.LIMIT)
                           if _VALUE_FEATURE.fullmatch(f)]
        return self._names

    def value(self, name: str, start: int, end: int) -> float | None:
        found = self.r.intervals(name)
        i = int(np.searchsorted(found.starts, start))
        if i < len(found) and found.starts[i] == start and found.ends[i] == end:
            return float(found.values[i])
        return None
