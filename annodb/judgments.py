"""Judgments an agent records for its topics (the Vole's memory), in the one layout that the
Vole in process and the server's `judge`, `judgments` and `topic` ops share.

For topic T (one word without whitespace, parentheses or double quotes) and a document D
of the collection:

    judgment:T   over D's range: the grade (the latest judgment of D wins)
    note:T:D     a note document (container `note:`, apart from the collection: see
                 Writer.note) holding the reason; over its range
        note:, note:T   D's first address (a link: `(@ note:T)` is the judged documents)
        order:T         the judgment's discovery order 1, 2, ... (D regraded keeps its own)
        call:T          the model call that made the latest judgment of D, counted over
                        every session of the topic
    topic:T      the topic's record (container `topic:`, apart from the collection): its
                 text is the JSON of a Record: how its last session stopped ("stop" null
                 while it runs), with how many calls and judgments

`judge` writes a judgment and its note in the caller's write transaction (so both or
neither are committed); `judgments` reads a topic's judgments back whole, in discovery
order, with its record.
"""

from __future__ import annotations

import msgspec

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


def note_docno(topic: str, docno: str) -> str:
    return f"{NOTES}{topic}:{docno}"


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
    order_feature = feature("order", topic)
    old = w.find(note_docno(topic, doc.docno))
    order = 0
    if old is not None:
        for s, _, v in w.intervals(order_feature):
            if s == old.start:
                order = int(v)
    if not order:
        orders = w.intervals(order_feature).values
        order = int(orders.max()) + 1 if len(orders) else 1
    w.annotate(feature("judgment", topic), doc.start, doc.end, grade)
    added = w.note(doc.docno, text, note_docno=note_docno(topic, doc.docno),
                   features=(feature("note", topic),))
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
        if j is not None:
            j.order = int(orders.get(start, 0))
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


def record(w, state: Record) -> None:
    """Write (replace) the topic's record in the write transaction `w`."""
    check_topic(state.topic)
    docno = topic_docno(state.topic)
    old = w.find(docno)
    if old is not None and old.container != TOPICS:
        raise AnnodbError(f"cannot record topic {state.topic!r}: the docno {docno!r} is a "
                          "document of the collection")
    w.add(_encode(state).decode(), docno=docno, replace=True, container=TOPICS)
