"""Judgments an agent records for its topics (the Vole's memory), in the one layout that the
Vole in process and the server's `judge`, `judgments` and `topic` ops share.

For topic T (one word without whitespace, parentheses or double quotes) and a document D
of the collection:

    judgment:T   over D's range: the grade (the latest judgment of D wins)
    note:T:D     a note document (container `note:`, apart from the collection: see
                 Writer.note) holding the reason (T written with `%`, `:` and `@` as
                 `%25`, `%3A` and `%40`, so no two topics and docnos give one docno:
                 (a, b:c) and (a:b, c) were both `note:a:b:c`); over its range
        note:, note:T   D's first address (a link: `(@ note:T)` is the judged documents)
        order:T         the judgment's discovery order 1, 2, ... (D regraded keeps its own)
        call:T          the model call that made the latest judgment of D, counted over
                        every session of the topic
    topic:T      the topic's record (container `topic:`, apart from the collection): its
                 text is the JSON of a Record: how its last session stopped ("stop" null
                 while it runs), with how many calls and judgments

`judge` writes a judgment and its note in the caller's write transaction (so both or
neither are committed); `judgments` reads a topic's judgments back whole, in discovery
order, with its record. The server's `note` op (`note`) writes a note of query Q about D as
`note:Q@D` (Q escaped the same way), annotated `note:` and `note:Q`: never a judgment's docno.

Each writes only its own document: a docno it would take that holds anything else (a
document of the collection, another topic's or query's note) is an AnnodbError and nothing
is written. A judgment's note written before topics were escaped (`note:T:D` for a T holding
one of `%:@`) is found and replaced by the escaped one when D is judged again.
"""

from __future__ import annotations

import msgspec
import numpy as np

from .errors import AnnodbError, NotFoundError
from .transaction import DOCUMENT, NOTES

TOPICS = "topic:"          # the container of topic records


class Judgment(msgspec.Struct):
    docno: str
    grade: int
    order: int = 0         # 0: recorded before discovery order was (first, by docno)
    call: int = 0


class Record(msgspec.Struct):
    """A topic's state: how its last session stopped (None while it runs), the model calls
    made for it over every session, its judgments, and the calls made before the session
    began (`base`: a session may make up to base + its limit)."""
    topic: str
    stop: str | None = None
    calls: int = 0
    judgments: int = 0
    base: int = 0
    error: str | None = None


class Judged(msgspec.Struct):
    docno: str             # the document judged (its docno as stored)
    note: str              # the note's docno
    order: int
    regraded: bool


_encode = msgspec.json.Encoder().encode
_record = msgspec.json.Decoder(Record)


def check_topic(topic) -> str:
    """The topic, or AnnodbError when it cannot be part of a feature name."""
    if not isinstance(topic, str) or not topic or \
            any(c.isspace() or c in '()"' for c in topic):
        raise AnnodbError(f"topic {topic!r} must be one word without spaces, parentheses "
                          "or double quotes (it becomes part of feature names)")
    return topic


def feature(kind: str, topic: str) -> str:
    """`judgment:T`, `note:T`, `order:T` or `call:T`."""
    return f"{kind}:{topic}"


def _escaped(name: str) -> str:
    """`name` with `%`, `:` and `@` written `%25`, `%3A`, `%40`: the first of `:` and `@`
    after it then tells a judgment's note from a query's, and where the docno begins."""
    return name.replace("%", "%25").replace(":", "%3A").replace("@", "%40")


def note_docno(topic: str, docno: str) -> str:
    """The docno of the note of topic's judgment of `docno`: `note:T:D`."""
    return f"{NOTES}{_escaped(topic)}:{docno}"


def query_note_docno(qid: str, docno: str) -> str:
    """The docno of the note op's note of query `qid` about `docno`: `note:Q@D`."""
    return f"{NOTES}{_escaped(qid)}@{docno}"


def check_count(value, name: str) -> int:
    """A count (a model call, calls, judgments): a whole number from 0 to 2**53 - 1 (it is
    stored as an annotation's value, a float64, which holds it exactly), else AnnodbError."""
    if isinstance(value, bool) or not isinstance(value, int) or \
            not 0 <= value < MAX_COUNT:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise AnnodbError(f"{name} must be a whole number from 0 to 2**53 - 1, not {shown}")
    return value


MAX_COUNT = 1 << 53


def _exact(w, docno: str):
    """The document with exactly this docno (in any shard), or None."""
    try:
        return w.document(docno)
    except NotFoundError:
        return None


def _value_at(w, name: str, start: int) -> float | None:
    """The value of the interval of feature `name` starting at `start`, or None."""
    found = w.intervals(name)
    at = np.flatnonzero(found.starts == start)
    return float(found.values[at[0]]) if len(at) else None


def _is_note_of(w, note, topic: str, target, judgment: bool | None) -> bool:
    """Whether `note` is a note of `topic` about `target` (container `note:`, carrying
    `note:T` valued with the target's start): any such note (judgment None), a judgment's
    (True: carrying `order:T` too) or not a judgment's (False)."""
    if note.container != NOTES or \
            _value_at(w, feature("note", topic), note.start) != float(target.start):
        return False
    if judgment is None:
        return True
    return (_value_at(w, feature("order", topic), note.start) is not None) == judgment


def _taken(docno: str, doc, what: str) -> AnnodbError:
    holder = "a document of the collection" if doc.container == DOCUMENT else \
        "another note" if doc.container == NOTES else f"a document in {doc.container!r}"
    return AnnodbError(f"cannot write {what}: its docno {docno!r} is taken by {holder}; "
                       "nothing was written")


def topic_docno(topic: str) -> str:
    return f"{TOPICS}{topic}"


def judge(w, topic: str, docno: str, grade: int, text: str, call: int = 0) -> Judged:
    """Judge the document `docno` (surrounding quotes ignored) for `topic` in the write
    transaction `w`. NotFoundError for an unknown docno, AnnodbError for a document
    outside the collection (a note)."""
    check_topic(topic)
    doc = w.find(docno)
    if doc is None:
        raise NotFoundError(f"Unknown docno {docno!r}")
    if doc.container != DOCUMENT:
        raise AnnodbError(f"{doc.docno!r} is not a document of the collection (it is in "
                          f"{doc.container!r}); judge the documents you were shown")
    call = check_count(call, "call")
    order_feature = feature("order", topic)
    name = note_docno(topic, doc.docno)
    what = f"the judgment of {doc.docno!r} for topic {topic!r}"
    old, stale = _exact(w, name), None
    if old is not None and not _is_note_of(w, old, topic, doc, None):
        raise _taken(name, old, what)
    legacy = f"{NOTES}{topic}:{doc.docno}"   # (its docno before topics were escaped)
    if old is None and legacy != name:
        found = _exact(w, legacy)
        if found is not None and _is_note_of(w, found, topic, doc, None):
            old = stale = found
    order = 0
    if old is not None:
        order = int(_value_at(w, order_feature, old.start) or 0)
    if not order:
        orders = w.intervals(order_feature).values
        order = int(orders.max()) + 1 if len(orders) else 1
    if stale is not None:
        w.delete(legacy)
    w.annotate(feature("judgment", topic), doc.start, doc.end, grade)
    added = w.note(doc.docno, text, note_docno=name, features=(feature("note", topic),))
    w.annotate(order_feature, added.start, added.end, order)
    w.annotate(feature("call", topic), added.start, added.end, call)
    return Judged(doc.docno, added.docno, order, old is not None)


def judgments(snap, topic: str) -> tuple[list[Judgment], Record | None]:
    """The topic's judgments (documents of the collection still there), in discovery
    order, and its record (None when none was written)."""
    check_topic(topic)
    found: dict[int, Judgment] = {}
    for start, _, value in snap.intervals(feature("judgment", topic)):
        doc = snap.document_at(start)
        if doc is not None and doc.start == start and doc.container == DOCUMENT:
            found[start] = Judgment(doc.docno, min(max(int(round(value)), 0), 3))
    orders = {s: v for s, _, v in snap.intervals(feature("order", topic))}
    calls = {s: v for s, _, v in snap.intervals(feature("call", topic))}
    for start, _, target in snap.intervals(feature("note", topic)):
        j = found.get(int(target))
        if j is not None and start in orders:   # a judgment's note (a query's has no order)
            j.order = int(orders[start])
            j.call = int(calls.get(start, 0))
    ranked = sorted(found.values(), key=lambda j: (j.order, j.docno))
    doc = snap.find(topic_docno(topic))
    record = None
    if doc is not None and doc.container == TOPICS:
        try:
            record = _record.decode(doc.text)
        except msgspec.DecodeError:
            record = None
    return ranked, record


def note(w, target, text: str, qid: str | None = None):
    """The server's `note` op in the write transaction `w`: a note about the document
    `target` (as stored), of the query `qid` (`note:Q@D`, replacing that query's earlier
    note about it; annotated `note:` and `note:Q`) or of none (`note:D:<address>`, a new
    one each time). Returns what Writer.note returns."""
    if qid is None:
        return w.note(target.docno, text)
    check_topic(qid)
    name = query_note_docno(qid, target.docno)
    old = _exact(w, name)
    if old is not None and not _is_note_of(w, old, qid, target, False):
        raise _taken(name, old, f"the note of {qid!r} about {target.docno!r}")
    legacy = f"{NOTES}{qid}:{target.docno}"   # (its docno before: a judgment's docno)
    if old is None:
        found = _exact(w, legacy)
        if found is not None and _is_note_of(w, found, qid, target, False):
            w.delete(legacy)
    return w.note(target.docno, text, features=(feature("note", qid),), note_docno=name)


def record(w, state: Record) -> None:
    """Write (replace) the topic's record in the write transaction `w`."""
    check_topic(state.topic)
    for name in ("calls", "judgments", "base"):
        check_count(getattr(state, name), name)
    docno = topic_docno(state.topic)
    old = w.find(docno)
    if old is not None and old.container != TOPICS:
        raise AnnodbError(f"cannot record topic {state.topic!r}: the docno {docno!r} is a "
                          "document of the collection")
    w.add(_encode(state).decode(), docno=docno, replace=True, container=TOPICS)
