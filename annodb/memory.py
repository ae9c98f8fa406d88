"""Agent memory: a small high-level API over open/write/read (no storage of its own).

    mem = annodb.Memory("agent.db")
    m = mem.remember("Alice prefers tea to coffee", user="alice", importance=3)
    mem.remember("Alice lives in Berlin", key="alice/city", user="alice")  # replaces Paris
    mem.recall("what does alice drink", k=5, where={"user": "alice"})
    mem.recall("where does alice live", as_of=datetime(2024, 5, 1))       # as it was then
    mem.recall("(^ tea coffee)", where={"importance": (">=", 2)})
    mem.annotate(m, "useful", 2)
    page = mem.history(10, where={"user": "alice"}); mem.history(10, before=page.cursor)
    mem.forget(where={"user": "alice"})                                  # one transaction

A memory is a document: its text is the record field `text`, its docno `m<address>` (the
memory's first address: unique for ever, even after forget, and increasing in the order
memories were committed) unless one is given. Its metadata follows metadata.py's rules:
numbers (and times) are values on `:key:`, strings are labels `key:value`, `:time:` is
when it was remembered (seconds since the epoch; `time=` a datetime, seconds or an ISO
8601 string sets it; a naive datetime or a string without a zone is UTC), and the
RESERVED keys (text, docno, key, superseded, and annodb's own judgment, note, order and
call) are refused.

Facts change: `remember(text, key=K)` supersedes the memories with key K remembered at or
before its time (their `:superseded:` is set to that time; they stay stored), and is
itself superseded at once by one with key K and a later time (a fact back-filled into the
past). `remember(text, supersedes=docno)` replaces one memory (taking its key, if any),
which must be current at the new memory's time. recall and history leave superseded
memories out unless `include_superseded=True`; `as_of=T` answers from the memories
current at T (remembered by T, not superseded by T). Forgetting a memory does not make
the one it superseded current again (history is not rewritten: remember the fact again).

`where` (see metadata.py and help(Memory.recall)) is compiled into the query algebra:
results are ranked inside `(>> : c1 c2 ...)` (each condition a containment, `!>` for !=,
not in and exists False), so filtering happens inside the ranking and k results come back
whenever k match. Every call is one transaction: several processes may share a memory.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time as _time
import weakref
from dataclasses import dataclass, field, replace as _replace
from typing import Any, cast

import numpy as np

from . import batch as _batch, query as _query, rankers as _rankers, ranking as _ranking
from . import recall as _recall
from .collection import open as _open
from .errors import AnnodbError, NotFoundError, StorageError
from .metadata import (DOCUMENT, KEY, RESERVED, SUPERSEDED, TEXT, TIME, check_own_key,
                       current_node, duration, label, needed, nfc, number, seconds,
                       stored, value_feature, where_node as _where_node)
from .paths import foreign_files
from .query import Combine, Feature
from .ranking import text_words
from .shards.routing import route, shard_name
from .tokenizer import strip_diacritics
from .transaction import Writer

__all__ = ["Memory", "Entry", "Recalled", "History", "label", "where_node", "is_gcl",
           "RESERVED"]

_VALUE_FEATURE = re.compile(r":[^:]+:")
_GCL_START = re.compile(r"\(\s*(?:" + "|".join(
    re.escape(op) for op in sorted(_query.OPERATORS, key=len, reverse=True)) + r")(?=[\s()\"]|$)")
RECENCY_POOL = 100      # recall with a recency prior re-ranks at least this many


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
    """recall's result: a list of Entry, plus the query and filter that ran and warnings:
    repairs lenient parsing made to the query, or that no word of the question is in the
    memory."""

    def __init__(self, entries=(), query: str = "", filter: str = ":", warnings=()):
        super().__init__(entries)
        self.query, self.filter, self.warnings = query, filter, list(warnings)


class History(list):
    """history's result: a list of Entry, latest first, and `cursor`: pass it as
    `before=` for the next page (None when there is none); `warnings`, when a first page
    is empty, say which conditions of `where` no memory can satisfy."""

    def __init__(self, entries=(), cursor: str | None = None, warnings=()):
        super().__init__(entries)
        self.cursor, self.warnings = cursor, list(warnings)


def where_node(where: dict | None, base: _query.Node = DOCUMENT) -> _query.Node:
    """The query selecting the `base` intervals (memories) that satisfy `where` (without
    `exists` conditions, which need the database: Memory.filter gives those)."""
    return _where_node(where, base)


def is_gcl(text: str) -> bool:
    """Query text that recall reads as GCL rather than free text: an expression (`(`
    followed by an operator, like `(^ tea coffee)` or `(>= :importance: 3)`) or one quoted
    phrase (`"black coffee"`). Anything else is words, whatever characters it holds
    (`bob@example.com`, `10:30`, `user:alice`, `(see above)`)."""
    t = text.strip()
    return (_GCL_START.match(t) is not None
            or (len(t) >= 2 and t[0] == t[-1] == '"' and '"' not in t[1:-1]))


def rank_memories(snapshot, text: str, k: int, box: _query.Node, gcl: bool,
                  rank: str | None, ties: bool = False):
    """The best k memories inside `box` (the filter) for a GCL query or free text: the one
    place recall ranks. Returns a ranking.Results (hits with start, score, snippet; the
    query that ran; warnings). `ties`: also every other memory scoring as the k-th (in
    one ranking with recall's context ranker over one database; with another ranker by
    ranking twice as deep until the tie ends), for a caller ordering ties itself."""
    if gcl:
        def ranked(depth):
            return snapshot.search(text, k=depth, container=box, lenient=True,
                                   rank=rank or "ssr")
    else:
        ranker = _rankers.make(rank or _rankers.Context.name, names=_rankers.MEMORY_RANKS)
        if ties and isinstance(ranker, _rankers.Context) and \
                getattr(snapshot, "lists", None) is not None:   # (one database's)
            return _recall.search(snapshot, text, k=k, container=box,
                                  settings=ranker.params, ties=True)

        def ranked(depth):
            # (a container is as_node'd: a node is one as its text is)
            return _ranking.search_text(snapshot, text, ranker, k=depth,
                                        container=cast(str, box))
    if not ties or k <= 0:
        return ranked(k)
    depth = k
    results = ranked(depth + 1)
    while len(results) > depth and results[-1].score == results[k - 1].score:
        depth *= 2                 # a tie across the cut: see all of it
        results = ranked(depth + 1)
    hits = [h for h in results if h.score >= results[k - 1].score] \
        if len(results) > k else list(results)
    return _ranking.Results(hits, results.query, results.warnings, results.total)


def _check_path(path) -> str | None:
    """The path of a memory, or StorageError for one that cannot be: empty, or a folder
    holding other files but no database."""
    if path is None:
        return None
    name = os.fspath(path)
    if not name or not name.strip():
        raise StorageError("a memory needs a path (a directory for its database), not ''")
    others = foreign_files(name)
    if others:
        raise StorageError(f"{name}: a folder holding other files ({', '.join(others[:3])}"
                           f"{', ...' if len(others) > 3 else ''}), not an annodb "
                           "database; give a new or empty directory")
    return name


def _holds_database(name: str) -> bool:
    """Whether the directory `name` holds a database (or a sharded collection's
    manifest), as far as its files tell."""
    return os.path.exists(os.path.join(name, "data.mdb")) or \
        os.path.exists(os.path.join(name, "manifest.json"))


class Memory:
    """An agent's memory in the annodb database at `path` (created if missing, unless
    `readonly=True`; `fold_diacritics=True` for a new one whose recall ignores accents,
    see annodb.open). `path` must be a new or empty directory or a database; `""` and a
    folder of other files are refused.

    Metadata (keyword arguments of remember): a string is an exact label, a number or a
    bool a value (numpy scalars as the Python values they hold), a datetime a time
    (seconds since the epoch; naive means UTC; `time=` also takes an ISO 8601 string,
    "2025-03-01T09:00:00Z", no zone meaning UTC). A list, None or a dict is refused (a
    key holds one value). Keys are
    names without whitespace or ( ) " : and not one of RESERVED: text, docno, key,
    superseded, judgment, note, order, call (annodb writes those itself).

    `where` (recall, history, forget) maps keys to conditions, all of which must hold:

        {"user": "alice"}                  exact (a string label, or a number)
        {"user": ["alice", "bob"]}         any of (also ("in", [...]))
        {"user": ("not in", ["bob"])}      none of
        {"importance": (">=", 2)}          = != < <= > >= (strings: = and != only)
        {"time": (">=", datetime(2024, 1, 1))}   (or ">=", "2024-01-01")
        {"key": ("exists", True)}          the key is there (False: it is not)

    A condition on a key a memory lacks is false for =, comparisons and in, and true for
    != and not in, for numbers and strings alike. An operator not in the list above is
    an error. A recall that finds nothing says in its warnings which keys of `where` no
    memory has, and which strings no memory has for their key.
    """

    def __init__(self, path, *, readonly: bool = False, timeout: float = 30.0,
                 fold_diacritics: bool | None = None):
        path = _check_path(path)
        if readonly and path is not None and not _holds_database(path):
            raise StorageError(f"{path}: no annodb database here to read (Memory(path) "
                               "without readonly=True creates one)")
        self.readonly = readonly
        self.db = _open(path, readonly=readonly, create=not readonly, timeout=timeout,
                        fold_diacritics=fold_diacritics)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"annodb.Memory({self.db.path!r})"

    # writing
    def remember(self, text: str | None = None, /, *, docno: str | None = None,
                 key: str | None = None, supersedes: str | None = None, **metadata) -> str:
        """Store `text` with `metadata` (time= sets when, default now); returns its docno.
        `key` names what it is about: it supersedes the memories with that key remembered
        at or before its time. `supersedes=docno` supersedes that memory (and takes its
        key; one superseded already at this time is refused). Giving the docno of an
        existing memory replaces it (the latest remember wins)."""
        if text is None and TEXT in metadata:    # (remember(text="...") as a keyword)
            text = metadata.pop(TEXT)
        for name in metadata:
            check_own_key(name)
        item = self._item(dict(metadata, text=text, docno=docno, key=key,
                               supersedes=supersedes))
        with self.db.write() as w:
            return self._write(w, [item])[0]

    def remember_many(self, memories) -> list[str]:
        """Remember many memories in one transaction (all or none): each a string, or a
        dict of remember's arguments ({"text": ..., "key": ..., "user": ..., ...}).
        Returns their docnos, in order."""
        if isinstance(memories, (str, bytes, dict)):
            raise TypeError(f"remember_many() takes a list of memories, not one "
                            f"{type(memories).__name__}: give [it], or call remember()")
        items = []
        for i, memory in enumerate(memories):
            try:
                items.append(self._item(memory))
            except (AnnodbError, TypeError) as e:
                raise type(e)(f"memory {i} of remember_many (nothing was written): "
                              f"{e}") from None
        if not items:
            return []
        with self.db.write() as w:
            return self._write(w, items)

    @staticmethod
    def _item(memory) -> tuple:
        """(record, docno, key, supersedes) of one memory, checked before anything is
        written."""
        if isinstance(memory, str):
            memory = {"text": memory}
        if not isinstance(memory, dict):
            raise TypeError("remember_many() takes strings or dicts of remember's arguments")
        memory = dict(memory)
        text = memory.pop(TEXT, None)
        if not isinstance(text, str):
            raise TypeError("remember() takes the memory's text as a string")
        if not text.strip():
            raise AnnodbError(f"remember: the text {text!r} is empty: no recall would find "
                              "it; give the words to remember (metadata goes with them)")
        text = nfc(text)
        docno = memory.pop("docno", None)
        key = memory.pop(KEY, None)
        supersedes = memory.pop("supersedes", None)
        if key is not None and (not isinstance(key, str) or not key):
            raise AnnodbError(f"key {key!r}: need a non-empty string")
        key = None if key is None else nfc(key)
        record: dict[str, Any] = {TEXT: text}
        for name, value in memory.items():
            check_own_key(name)
            if name == TIME:               # (None, as for key= and docno=: the default, now)
                record[TIME] = _time.time() if value is None else seconds(value)
            else:
                record[name] = stored(name, value)
        if TIME not in record:
            record[TIME] = _time.time()
        if key is not None:
            record[KEY] = key
        return record, (None if docno is None else str(docno)), key, supersedes

    def _write(self, w, items: list[tuple]) -> list[str]:
        records = [it[0] for it in items]
        given = [it[1] for it in items]
        # explicit supersedes: the target's key is taken (checked before anything is added;
        # the target may be a memory given its docno earlier in the batch)
        earlier: dict[str, dict] = {}
        for record, docno, key, target in items:
            if target is not None:
                if str(target) in earlier:
                    theirs = earlier[str(target)].get(KEY)
                else:
                    doc = w.find(str(target))
                    if doc is None:
                        raise NotFoundError(f"supersedes: no memory with docno {target!r}")
                    theirs = doc.meta.get(KEY)
                    _check_current(w, doc, record[TIME])
                if isinstance(theirs, str):
                    if key is not None and key != theirs:
                        raise AnnodbError(f"supersedes {str(target)!r}, whose key is "
                                          f"{theirs!r}, with the key {key!r}: give the same "
                                          "key or none")
                    record[KEY] = theirs
            if docno is not None:
                earlier[docno] = record
        if isinstance(w, Writer):
            added = self._add(w, records, given)
        else:          # a sharded collection's: one shard, one memory at a time
            shard = self._shard_for(w, items)
            added = [self._add_one(w, record, docno, shard)
                     for record, docno in zip(records, given)]
        fold = bool(getattr(w, "fold_diacritics", False))
        for a, record in zip(added, records):
            for name, value in record.items():
                if isinstance(value, str) and name != TEXT:
                    w.annotate(label(name, value), a.start, a.end)
            _derive(w, a.start, a.end, record, fold)
        for a, record, item in zip(added, records, items):
            if KEY in record:
                self._supersede_by_key(w, record[KEY], a, record[TIME])
            elif item[3] is not None:
                self._supersede_one(w, str(item[3]), record[TIME])
        return [a.docno for a in added]

    def _add(self, w, records: list[dict], given: list) -> list:
        """Add the memories' records to one database in one batch (one tokenizer pass),
        named by _docnos."""
        docs = [(None,) + _batch.prepare_item(r, "_", None, [TEXT])[1:] for r in records]
        try:
            made = _batch.make(docs)
        except UnicodeError as err:
            raise AnnodbError(f"memory text is not valid Unicode ({err})") from None
        docnos = self._docnos(w, made, given)
        made = _replace(made, docnos=docnos,
                        documents=[(d,) + doc[1:] for d, doc in zip(docnos, made.documents or ())])
        return w.add_batch(made, replace=any(d is not None for d in given))

    def _shard_for(self, w, items: list[tuple]) -> int:
        """The one shard of a sharded memory that a remember writes (a transaction of a
        sharded collection writes one): the shard of the docnos given, of the memories
        superseded and of those with the keys given (so that a key's memories live in one
        shard and supersede each other atomically); else the one the transaction writes
        already, or the first memory's. AnnodbError when they are in several."""
        n = len(self.db.shards)
        needs: dict[int, str] = {}
        for record, docno, _key, target in items:
            if docno is not None:
                needs.setdefault(route(docno, n), f"the docno {docno!r}")
            if target is not None:
                needs.setdefault(route(str(target), n), f"the memory {target!r} superseded")
            if KEY in record:
                held = w.query(Combine(">>", (DOCUMENT, Feature(label(KEY, record[KEY])))))
                for doc in w.documents_at(held.starts.tolist()[:1]):
                    if doc is not None:
                        needs.setdefault(route(doc.docno, n), f"the key {record[KEY]!r}")
        if len(needs) > 1:
            (a, why_a), (b, why_b) = sorted(needs.items())[:2]
            raise AnnodbError(
                f"these memories belong in {shard_name(a)} ({why_a}) and {shard_name(b)} "
                f"({why_b}) of this sharded memory, and one transaction writes one shard: "
                "nothing was remembered; remember them in separate calls")
        if needs:
            return next(iter(needs))
        writing = getattr(w, "_writing", None)
        return route(f"m{w.address_space()}", n) if writing is None else writing

    @staticmethod
    def _add_one(w, record: dict, docno: str | None, shard: int):
        """Add one memory's record to a sharded collection's shard `shard`: one without
        a docno is named `m<address>`, `.1`, `.2` ... appended until the name is free and
        routes to that shard."""
        replace = docno is not None
        if docno is None:
            n = len(w.db.shards)
            base, i = f"m{w.address_space()}", 0
            docno = base
            while route(docno, n) != shard or w.has(docno):
                i += 1
                docno = f"{base}.{i}"
        return w.add(record, docno=docno, text_fields=[TEXT], replace=replace)

    @staticmethod
    def _docnos(w, made, given: list) -> list[str]:
        """The docno of each memory: the one given, or `m<its first address>` (`.1`, `.2`
        ... appended while that is taken by a docno someone chose)."""
        starts = (w.address_space() + made.starts()).tolist()
        made_names = [f"m{s}" for s, d in zip(starts, given) if d is None]
        taken = set(w.present(made_names)) | {d for d in given if d is not None}
        out = []
        for start, docno in zip(starts, given):
            if docno is None:
                base, n = f"m{start}", 0
                docno = base
                while docno in taken or (n and w.has(docno)):
                    n += 1
                    docno = f"{base}.{n}"
                taken.add(docno)
            out.append(docno)
        return out

    @staticmethod
    def _supersede_by_key(w, key: str, added, t: float) -> None:
        """Keep the memories with `key` a timeline: each is superseded at the time of the
        next one (by time, then address). The new memory `added` (time t) supersedes those
        before it (at or before t; at t, of a lower address) not superseded before t, and
        is superseded by the earliest one after it (a later time, or t and a higher
        address: a later memory of the same remember_many)."""
        times = w.query(Combine(">>", (Feature(value_feature(TIME)),
                                       Feature(label(KEY, key)))))
        if not len(times):
            return
        sup = values_over(w, value_feature(SUPERSEDED), times.starts, times.ends).tolist()
        later = math.inf
        for s, e, v, old in zip(times.starts.tolist(), times.ends.tolist(),
                                times.values.tolist(), sup):
            if s == added.start:
                continue
            if v > t or (v == t and s > added.start):
                later = min(later, v)
                continue
            if old != old or old > t:         # (NaN: not superseded)
                w.annotate(value_feature(SUPERSEDED), s, e, t)
        if later < math.inf:
            w.annotate(value_feature(SUPERSEDED), added.start, added.end, later)

    @staticmethod
    def _supersede_one(w, docno: str, t: float) -> None:
        """Mark the memory `docno` (without a key) superseded at t (unless it already was
        before t)."""
        doc = w.find(docno)
        if doc is None:
            raise NotFoundError(f"supersedes: no memory with docno {docno!r}")
        when = _value_over(w, value_feature(TIME), doc.start, doc.end)
        if when is not None and when > t:
            raise AnnodbError(f"supersedes {doc.docno!r}, remembered after this memory "
                              f"({when} > {t}): a memory supersedes earlier ones")
        old = _value_over(w, value_feature(SUPERSEDED), doc.start, doc.end)
        if old is None or old > t:
            w.annotate(value_feature(SUPERSEDED), doc.start, doc.end, t)

    def annotate(self, docno: str, label: str, value: float = 0.0) -> None:
        """Set `:label:` = value over the memory `docno` (NotFoundError if there is none).
        Without a value it carries 0, as every annotation does (Writer.annotate, `annodb
        annotate`, the server and MCP). A RESERVED label or `time` is refused (use
        remember's key= or supersedes= to supersede)."""
        if check_own_key(label) == TIME:
            raise AnnodbError("the time of a memory is set when it is remembered (time=)")
        value = number(label, value)
        docno = _docno(docno)
        with self.db.write() as w:
            doc = w.document(docno)
            held = doc.meta.get(label)
            if isinstance(held, str):
                raise AnnodbError(
                    f"memory {doc.docno!r} holds {label} = {held!r}, a string: annotate "
                    "sets a number, which would hide behind it; choose another label, or "
                    "remember the memory again (docno=) to change the string")
            w.annotate(value_feature(label), doc.start, doc.end, value)

    def reindex(self) -> int:
        """Write again, in one transaction (one per shard of a sharded memory), what
        recall derives from each memory when it is remembered: the words of its metadata
        strings (a field the question may name), the date its text names relative to its
        time ("yesterday") and the share of its text that asks. Memories that an older
        annodb wrote carry none of them until then (recall still finds them, without those
        signals); writing them again is harmless, so this can be run at any time. Returns
        the number of memories read."""
        n = 0
        for db in getattr(self.db, "shards", None) or [self.db]:
            with db.write() as w:
                fold = bool(getattr(w, "fold_diacritics", False))
                for doc in w.documents():
                    if doc.container == ":":      # (not a note of the Vole's)
                        _derive(w, doc.start, doc.end, {TEXT: doc.text, **doc.meta}, fold)
                        n += 1
        return n

    def forget(self, docnos: str | list | None = None, *, where: dict | None = None):
        """Delete memories and everything annotated inside them, in one transaction (all
        or none): `forget(docno)` -> True, or False when absent; `forget([docnos])` or
        `forget(where={...})` (superseded memories included) -> the docnos deleted.
        `annodb compact` then leaves no trace of them in the copy it writes."""
        if docnos is None and where is None:
            raise AnnodbError("forget what? give docnos or where={...}")
        if where is not None and not where:
            raise AnnodbError("forget(where={}) would forget everything; give a condition")
        one = docnos is not None and (isinstance(docnos, (str, bytes))
                                      or not hasattr(docnos, "__iter__"))
        names = [_docno(docnos)] if one else [_docno(d) for d in
                                              (() if docnos is None else docnos)]
        with self.db.write() as w:
            if where is not None:
                box = self._filter(w, where, DOCUMENT, None, True)
                names += [d.docno for d in w.documents_at(w.query(box).starts.tolist())
                          if d is not None]
            names = list(dict.fromkeys(names))
            if not isinstance(w, Writer):
                self._one_shard(w, names)
            gone = [d for d in names if w.delete(d)]
        return bool(gone) if one else gone

    def _one_shard(self, w, names: list) -> None:
        """AnnodbError unless the memories `names` (those present) live in one shard of
        this sharded memory (a transaction writes one): before anything is forgotten."""
        n = len(self.db.shards)
        held: dict[int, list] = {}
        for name in (str(x) for x in names if w.has(str(x))):
            held.setdefault(route(name, n), []).append(name)
        if len(held) > 1:
            parts = ", ".join(f"{len(v)} in {shard_name(i)}" for i, v in sorted(held.items()))
            raise AnnodbError(
                f"forget: the memories to forget live in several shards of this sharded "
                f"memory ({parts}), and one transaction writes one shard: nothing was "
                "forgotten; forget the docnos of one shard at a time (all or nothing per "
                "shard), or keep memories forgotten together in one database")

    # reading
    def recall(self, query_or_text: str | None, k: int = 10, where: dict | None = None, *,
               gcl: bool | None = None, rank: str | None = None, as_of=None,
               include_superseded: bool = False, recency=None) -> Recalled:
        """The k best memories for a GCL query or free text, among those matching `where`
        (see help(Memory)) and current (not superseded; `as_of=T`: current at T, a datetime
        or seconds; `include_superseded=True`: superseded ones too), ranked by `rank`
        ("context" or one of rankers.RANKS; default: shortest-substring ranking for GCL,
        "context" for free text: BM25 in which a memory borrows the words of its
        neighbours in its session, with the session's score and the dates and labels
        (metadata strings) the text names, a memory that says more above one that says
        less and one that tells above one that asks, annodb/recall.py; a sharded memory
        ranks free text by the engine's free-text default). Equal scores: the newer memory
        first.
        `recency` (a half-life: seconds or a timedelta) multiplies each score by
        0.5 ** (age / half-life), age counted back from as_of or now (the best
        max(4k, 100) by relevance are re-ranked so). No query
        (None or "") gives the latest k. `gcl`: True reads the query as GCL (so a raw term
        like `user:alice` names a feature), False as words; None (the default) decides by
        `is_gcl`. `warnings` says when no word of the question is in the memory and, when
        nothing is found, which keys (or key = string) of `where` no memory has."""
        _count(k, "k")
        if query_or_text is not None and not isinstance(query_or_text, str):
            raise TypeError(f"recall() takes the query as a string (free text or GCL) or "
                            f"None for the latest, not {type(query_or_text).__name__}")
        query_or_text = None if query_or_text is None else nfc(query_or_text)
        as_of = None if as_of is None else seconds(as_of, "as_of")
        half = None if recency is None else duration(recency)
        if not query_or_text or not query_or_text.strip():
            with self.db.read() as r:
                latest = self._filter(r, where, Feature(value_feature(TIME)), as_of,
                                      include_superseded)
            found = self.history(k, where, as_of=as_of, include_superseded=include_superseded)
            return Recalled(found, "", _query.format(latest), found.warnings)
        use_gcl = bool(gcl or (gcl is None and is_gcl(query_or_text)))
        with self.db.read() as r:
            box = self._filter(r, where, DOCUMENT, as_of, include_superseded)
            if k <= 0:
                return Recalled([], "", _query.format(box))
            depth = k if half is None else max(4 * k, RECENCY_POOL)
            results = rank_memories(r, query_or_text, depth, box, use_gcl, rank, ties=True)
            hits = self._order(r, list(results), k, half, as_of)
            entries = _entries(r, r.documents_at([h.start for h, _ in hits]),
                               [s for _, s in hits], [h.snippet for h, _ in hits])
            warnings = list(results.warnings)
            if not entries and not use_gcl and not text_words(r, query_or_text):
                warnings.append(f"no word of {query_or_text!r} is in the memory")
            if not entries and use_gcl:
                warnings += _absent_words(r, results.query)
            if not entries:
                warnings += _absent(r, where, include_superseded)
        return Recalled(entries, results.query, _query.format(box), warnings)

    @staticmethod
    def _order(r, hits: list, k: int, half: float | None, as_of: float | None) -> list:
        """The first k (hit, score) by score, ties to the newer memory (later time, then
        later address); with a half-life, scores decayed by age first."""
        if not hits or k <= 0:
            return []
        starts = np.array([h.start for h in hits], dtype=np.int64)
        when = values_over(r, value_feature(TIME), starts, [h.end for h in hits])
        have = when == when                   # (a document without a time: NaN)
        when = np.where(have, when, -math.inf)
        scores = np.array([h.score for h in hits], dtype=np.float64)
        if half is not None:
            now = _time.time() if as_of is None else as_of
            age = np.where(have, np.maximum(now - when, 0.0), 0.0)
            scores = scores * np.power(0.5, age / half)
        order = np.lexsort((-starts, -when, -scores))[:k]
        return [(hits[j], float(scores[j])) for j in order.tolist()]

    def history(self, n: int = 20, where: dict | None = None, *, before: str | None = None,
                as_of=None, include_superseded: bool = False) -> History:
        """The n most recent memories matching `where` (see help(Memory)): latest `:time:`
        first, ties by the later address (later commit); current ones only unless
        include_superseded (as_of: those current at that time). `before`: the cursor of
        the previous page (History.cursor), to go on after it."""
        _count(n, "n")
        as_of = None if as_of is None else seconds(as_of, "as_of")
        after = None if before is None else _cursor(before)
        with self.db.read() as r:
            times = r.query(self._filter(r, where, Feature(value_feature(TIME)), as_of,
                                         include_superseded))
            starts, values = times.starts, times.values
            if after is not None:
                keep = (values < after[0]) | ((values == after[0]) & (starts < after[1]))
                starts, values = starts[keep], values[keep]
            order = np.lexsort((-starts, -values))
            page = order[:max(n, 0)]
            out = _entries(r, r.documents_at(starts[page].tolist()))
            warnings = _absent(r, where, include_superseded) \
                if not out and after is None else []
        cursor = None
        if len(order) > len(page) and len(page):
            last = int(page[-1])
            cursor = f"{float(values[last])!r}@{int(starts[last])}"
        return History(out, cursor, warnings)

    def get(self, docno: str) -> Entry | None:
        """The memory `docno` (current or not), or None."""
        docno = _docno(docno)
        with self.db.read() as r:
            return _entries(r, [r.document(docno)])[0] if r.has(docno) else None

    def filter(self, where: dict | None = None, *, as_of=None,
               include_superseded: bool = False) -> str:
        """The GCL query selecting the memories that recall would search among."""
        as_of = None if as_of is None else seconds(as_of, "as_of")
        with self.db.read() as r:
            return _query.format(self._filter(r, where, DOCUMENT, as_of, include_superseded))

    @staticmethod
    def _filter(r, where, base, as_of, include_superseded) -> _query.Node:
        def labels_of(key: str) -> list[str]:
            return r.features_with_prefix(f"{key}:", sys.maxsize)
        return current_node(_where_node(where, base, labels_of), as_of, include_superseded,
                            r.has_feature(value_feature(SUPERSEDED)))


def _check_current(w, doc, t: float) -> None:
    """AnnodbError unless the memory `doc` is current at t (not superseded at or before
    it): superseding a memory replaced already would take its key and supersede the
    fact that replaced it instead (or leave two current)."""
    when = _value_over(w, value_feature(SUPERSEDED), doc.start, doc.end)
    if when is not None and when <= t:
        try:
            stamp = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(when))
        except (OverflowError, OSError, ValueError):       # (a time past any calendar)
            stamp = f"at {when!r} s"
        raise AnnodbError(
            f"supersedes {doc.docno!r}, which a later memory superseded already ({stamp}): "
            "supersede the memory current now (recall or history finds it; with a key, "
            "remember(key=...) does it), or give time= before then to correct the past")


def _derive(w, start: int, end: int, record: dict, fold: bool) -> None:
    """Annotate the memory at start..end with what recall derives from its record: each
    word of its metadata strings as LABEL_WORD + word (a question may name a label), the
    date its text names relative to its time as EVENT_FROM / EVENT_TO ("yesterday"), and
    the share of its text's tokens in sentences that ask as ASKING (where above 0: a
    memory that asks tells less)."""
    words: set = set()
    for name, value in record.items():
        if isinstance(value, str) and name != TEXT:
            words.update(_recall.label_words(value, fold))
    for word in sorted(words):
        w.annotate(_recall.LABEL_WORD + word, start, end)
    when = record.get(TIME)
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        event = _recall.memory_event(record[TEXT], float(when))
        if event is not None:
            w.annotate(_recall.EVENT_FROM, start, end, event[0])
            w.annotate(_recall.EVENT_TO, start, end, event[1])
    asked = _recall.asking(record[TEXT])
    if asked:
        w.annotate(_recall.ASKING, start, end, asked)


def _absent_words(r, query: str) -> list[str]:
    """For a GCL query that found nothing: a warning naming the words of its terms and
    phrases that no memory holds (a word misspelt, or not the one the memory uses)."""
    try:
        node = _query.parse(query, lenient=True).node
    except AnnodbError:
        return []
    fold = bool(getattr(r, "fold_diacritics", False))
    missing: dict[str, None] = {}

    def walk(n) -> None:
        if isinstance(n, _query.Term):
            for word in n.tokens:
                if not r.has_feature(strip_diacritics(word) if fold else word):
                    missing[word] = None
        elif isinstance(n, Combine):
            for arg in n.args:
                walk(arg)
        elif isinstance(n, (_query.Link, _query.Compare)):
            walk(n.arg)
    walk(node)
    if not missing:
        return []
    return [f"no memory holds the word{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(repr, missing))} (of the query {query!r})"]


def _absent(r, where: dict | None, include_superseded: bool = True) -> list[str]:
    """Warnings for the conditions of `where` that no memory can satisfy: a key no memory
    has, a string no memory has for its key (a typo filters everything out), a number
    asked of a key that holds only strings, or a string of one that holds only numbers;
    and `superseded` asked for among the current memories only."""
    out = []
    for key, value, numbers in needed(where):
        if key == SUPERSEDED and not include_superseded:
            out.append("where asks for superseded memories, and they are left out: give "
                       "include_superseded=True")
            continue
        has_numbers = r.has_feature(value_feature(key))
        has_strings = bool(r.features_with_prefix(f"{key}:", 1))
        if not has_numbers and not has_strings:
            out.append(f"no memory has the key {key!r}")
        elif numbers and not has_numbers:
            out.append(f"no memory has a number for {key!r} (its values are strings: "
                       "compare them with = or !=)")
        elif value is not None and not r.has_feature(label(key, value)):
            out.append(f"no memory has {key} = {value!r}" + (
                "" if has_strings else " (its values are numbers: give one, not a string)"))
    return out


def _docno(docno) -> str:
    """A docno argument as the string it names (an int as remember(docno=3) stores it:
    "3"), or TypeError."""
    if isinstance(docno, str):
        return docno
    if isinstance(docno, (int, np.integer)) and not isinstance(docno, (bool, np.bool_)):
        return str(docno)
    raise TypeError(f"a docno is a string (the one remember returned), not "
                    f"{type(docno).__name__} {docno!r}")


def _count(n, name: str) -> None:
    """A count of results: an int >= 0 (0 gives none)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise AnnodbError(f"{name} = {n!r}: give a whole number >= 0")


def _cursor(text) -> tuple[float, int]:
    """(time, address) of a history cursor (`<time>@<address>`)."""
    try:
        when, at = str(text).rsplit("@", 1)
        if math.isfinite(float(when)):         # (nan would match nothing, in silence)
            return float(when), int(at)
    except ValueError:
        pass
    raise AnnodbError(f"bad cursor {text!r}: pass the cursor a history page returned")


def values_over(snap, name: str, starts, ends) -> np.ndarray:
    """The value of feature `name` over exactly [starts[i], ends[i]] (ranges of documents,
    so disjoint), NaN where it has none: only the blocks of its list holding them are read
    (lists.inside; a sharded collection's snapshot reads the list whole)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    out = np.full(len(starts), np.nan)
    if not len(starts) or not snap.has_feature(name):      # (a writer flushes first)
        return out
    lists = getattr(snap, "lists", None)     # (a sharded collection's snapshot has none)
    if lists is None:
        found = snap.intervals(name)
    else:
        s, first = np.unique(starts, return_index=True)
        found = lists.inside(name, s, ends[first])
    if len(found):
        i = np.minimum(np.searchsorted(found.starts, starts), len(found) - 1)
        hit = (found.starts[i] == starts) & (found.ends[i] == ends)
        out[hit] = np.asarray(found.values)[i[hit]]
    return out


def _value_over(snap, name: str, start: int, end: int) -> float | None:
    """The value of feature `name` over exactly start..end, or None."""
    v = float(values_over(snap, name, [start], [end])[0])
    return None if v != v else v


_NAMES: dict = {}   # id(environment) -> (a weak reference to it, committed state, names)


def value_names(snap) -> list[str]:
    """The names of the value features (`:name:`) of the snapshot's database: looked up
    once per committed state (the state a read sees) and kept for the reads after it,
    by the open environment (the storage layer's, one per process and database while it
    is open: a database deleted and made again at the same path is another, whose
    states count anew)."""
    txn = getattr(snap, "_txn", None)     # (None: a sharded one's)
    env, state = getattr(txn, "env", None), getattr(txn, "id", None)
    held = _NAMES.get(id(env)) if env is not None and state is not None else None
    if held is not None and held[0]() is env and held[1] == state:
        return held[2]
    found = [n for n in snap.features_with_prefix(":", sys.maxsize)
             if _VALUE_FEATURE.fullmatch(n)]
    if env is not None and state is not None and not isinstance(snap, Writer):
        if len(_NAMES) >= 64:
            for key in [k for k, v in _NAMES.items() if v[0]() is None]:
                del _NAMES[key]
            if len(_NAMES) >= 64:
                _NAMES.clear()
        _NAMES[id(env)] = (weakref.ref(env), state, found)
    return found


def _entries(snap, docs, scores=None, snippets=None) -> list[Entry]:
    """The Entry of each document (None ones left out): its record's metadata, with the
    values that `:name:` features hold over it (what annotate() set after remember(),
    and `:superseded:`) put over it. Only the value features that some of the records
    do not hold are read (their names: value_names, once per committed state)."""
    keep = [i for i, d in enumerate(docs) if d is not None]
    docs = [docs[i] for i in keep]
    scores = [None] * len(docs) if scores is None else [scores[i] for i in keep]
    snippets = [None] * len(docs) if snippets is None else [snippets[i] for i in keep]
    metas = [dict(d.meta) for d in docs]
    if docs:
        starts = [d.start for d in docs]
        ends = [d.end for d in docs]
        own = [{f.path for f in d.fields} for d in docs]
        for name in value_names(snap):
            if all(name in o for o in own):
                continue
            key = name[1:-1]
            for j, value in enumerate(values_over(snap, name, starts, ends).tolist()):
                meta = metas[j]
                if value != value or name in own[j] or isinstance(meta.get(key), str):
                    continue
                if key not in meta or float(meta[key]) != value:
                    meta[key] = int(value) if value.is_integer() else value
    return [Entry(d.docno, d.text, m, sc, sn)
            for d, m, sc, sn in zip(docs, metas, scores, snippets)]
