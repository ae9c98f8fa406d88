"""A note or a judgment writes only its own document. A judgment's note is `note:T:D` with
`%`, `:` and `@` of the topic escaped, a query's note (the server's note op) `note:Q@D`: no
two (topic, docno) pairs, and no judgment and query note, share a docno. A docno such a note
would take that holds anything else (a document of the collection, another's note) is an
error and nothing is written, in one database and in a sharded collection; notes written
under the old names are found and replaced."""

from __future__ import annotations


import pytest

import annodb
from annodb import judgments
from annodb.check import check
from annodb.errors import AnnodbError
from annodb.shards.routing import route

pytestmark = pytest.mark.reliability


@pytest.fixture
def db(tmp_path):
    with annodb.open(tmp_path / "n.db") as db:
        with db.write() as w:
            for i in range(1, 6):
                w.add(f"In the beginning verse {i} about light", docno=f"Gen.1.{i}")
            w.add("a collection document that happens to be named like a note",
                  docno="note:t1:Gen.1.1")
            w.add("the first of two colliding docnos", docno="b:c")
            w.add("the second of two colliding docnos", docno="c")
        yield db


def _docnos(snap) -> list[str]:
    return [d.docno for d in snap.documents()]


def test_a_judgment_never_replaces_a_collection_document(db):
    """Judging Gen.1.1 for t1 would write its note as `note:t1:Gen.1.1`, a document of the
    collection here: refused, the document and everything else as they were (before: the
    document was deleted, the reply said "regraded": true and check said ok)."""
    with db.write() as w:
        with pytest.raises(AnnodbError, match="taken by a document of the collection"):
            judgments.judge(w, "t1", "Gen.1.1", 3, "the reason")
    with db.read() as r:
        assert r.document("note:t1:Gen.1.1").container == ":"
        assert r.document_count() == 8 and r.stats().agent_documents == 0
        assert judgments.judgments(r, "t1") == ([], None)
    with db.write() as w:   # through Writer.note itself too
        with pytest.raises(AnnodbError, match="a note does not replace"):
            w.note("Gen.1.2", "a note", note_docno="note:t1:Gen.1.1")
        with pytest.raises(AnnodbError, match="a note does not replace"):
            w.note("Gen.1.2", "a note", note_docno="Gen.1.3")
    assert check(db) == []


def test_topics_and_docnos_with_colons_never_share_a_note(db):
    """(T=a, D=b:c) and (T=a:b, D=c) were both `note:a:b:c`, each overwriting the other;
    now each has its own note and reason, and regrading either keeps its order."""
    with db.write() as w:
        one = judgments.judge(w, "a", "b:c", 1, "reason of a for b:c")
        two = judgments.judge(w, "a:b", "c", 2, "reason of a:b for c")
        judgments.judge(w, "a%3Ab", "c", 3, "an escaped-looking topic is a third one")
    assert (one.note, two.note) == ("note:a:b:c", "note:a%3Ab:c")
    for _ in range(2):
        with db.write() as w:
            assert judgments.judge(w, "a", "b:c", 3, "again a").regraded
            assert judgments.judge(w, "a:b", "c", 0, "again a:b").regraded
    with db.read() as r:
        for topic, docno, grade, reason in (("a", "b:c", 3, "again a"),
                                            ("a:b", "c", 0, "again a:b")):
            found, _ = judgments.judgments(r, topic)
            assert [(j.docno, j.grade, j.order) for j in found] == [(docno, grade, 1)]
            assert r.document(judgments.note_docno(topic, docno)).text == reason
        assert r.document("note:a%253Ab:c").text == \
            "an escaped-looking topic is a third one"
        assert r.stats().agent_documents == 3
    assert check(db) == []


def test_the_note_op_never_replaces_a_judgments_note(db, tmp_path, serve, connect):
    """Over a real socket: a note op with qid T about a document judged for T writes
    `note:T@D`, its own document; the judgment's reason, discovery order and call stay
    (before: the note replaced the reason and reset the order to 0). Repeating the note op
    replaces its own note only; judging a docno held by a collection document is refused."""
    path = db.path
    db.close()
    server = serve(path)
    c = connect(server)
    for call, docno in enumerate(("Gen.1.3", "Gen.1.2", "Gen.1.4"), 1):
        r = c(op="judge", topic="t1", docno=docno, grade=2, text=f"why {docno}",
              call=call)
        assert r["ok"] and r["order"] == call, r
    for text in ("first thought", "second thought"):
        r = c(op="note", docno="Gen.1.3", qid="t1", text=text)
        assert r == {"op": "note", "ok": True, "docno": "note:t1@Gen.1.3",
                     "target": "Gen.1.3"}
    r = c(op="judgments", topic="t1")
    assert [(j["docno"], j["order"], j["call"]) for j in r["judgments"]] == \
        [("Gen.1.3", 1, 1), ("Gen.1.2", 2, 2), ("Gen.1.4", 3, 3)]
    r = c(op="judge", topic="t1", docno="Gen.1.1", grade=1, text="x")
    assert r["ok"] is False and "taken by a document of the collection" in r["error"]
    r = c(op="document", docno="note:t1:Gen.1.1")
    assert r["ok"] and "happens to be named like a note" in r["document"]
    server.shutdown()
    with annodb.open(path) as again:
        assert check(again) == []
        with again.read() as r:
            assert r.document("note:t1:Gen.1.3").text == "why Gen.1.3"
            assert r.document("note:t1@Gen.1.3").text == "second thought"
            assert r.stats().agent_documents == 4


def test_default_note_names_step_around_taken_docnos(db):
    """A note without a docno is `note:D:<address>`; when a document already has that
    docno the note takes another (`_` added), never replacing it."""
    with db.write() as w:
        at = w.address_space()
        w.add("squatter", docno=f"note:Gen.1.5:{at + 1}")   # one token: the note comes next
        added = w.note("Gen.1.5", "a note with a default name")
    assert added.docno == f"note:Gen.1.5:{at + 1}_"
    with db.read() as r:
        assert r.document(f"note:Gen.1.5:{at + 1}").text == "squatter"
    assert check(db) == []


def test_notes_under_the_old_names_are_found_and_replaced(db):
    """A judgment of topic `a:b` written before topics were escaped (`note:a:b:Gen.1.2`)
    and a note op's note written as `note:q1:Gen.1.3`: judging and noting again replace
    them by the new names, the judgment keeping its discovery order."""
    with db.write() as w:   # what the old judge and note op wrote
        for order, docno in enumerate(("Gen.1.4", "Gen.1.2"), 1):
            target = w.document(docno)
            w.annotate("judgment:a:b", target.start, target.end, 1)
            old = w.note(docno, "old reason", note_docno=f"note:a:b:{docno}",
                         features=("note:a:b",))
            w.annotate("order:a:b", old.start, old.end, order)
            w.annotate("call:a:b", old.start, old.end, 7)
        w.note("Gen.1.3", "old query note", note_docno="note:q1:Gen.1.3",
               features=("note:q1",))
    with db.write() as w:
        done = judgments.judge(w, "a:b", "Gen.1.2", 3, "new reason", 9)
        assert (done.note, done.order, done.regraded) == ("note:a%3Ab:Gen.1.2", 2, True)
        judgments.note(w, w.document("Gen.1.3"), "new query note", "q1")
    with db.read() as r:
        found, _ = judgments.judgments(r, "a:b")
        assert [(j.docno, j.grade, j.order, j.call) for j in found] == \
            [("Gen.1.4", 1, 1, 7), ("Gen.1.2", 3, 2, 9)]
        assert not r.has("note:a:b:Gen.1.2") and not r.has("note:q1:Gen.1.3")
        assert r.document("note:q1@Gen.1.3").text == "new query note"
    assert check(db) == []


@pytest.mark.parametrize("target", ["Gen.1.1", "Gen.1.2"])
def test_a_sharded_collection_keeps_one_document_per_docno(tmp_path, target):
    """In a collection of 3 shards the note lives in its target's shard and the document
    named like it may live in another: the judgment and Writer.note are refused there too
    (before: two documents with one docno, and check passed). Gen.1.1 and its note's
    docno route to one shard, Gen.1.2 and its note's to two."""
    note = f"note:t1:{target}"
    assert (route(target, 3) == route(note, 3)) == (target == "Gen.1.1")
    with annodb.open(tmp_path / "c.shards", shards=3) as coll:
        for docno, text in ((target, "In the beginning"),
                            (note, "a document named like a note")):
            with coll.write() as w:
                w.add(text, docno=docno)
        with coll.write() as w:
            with pytest.raises(AnnodbError, match="taken by a document of the collection"):
                judgments.judge(w, "t1", target, 2, "reason")
        with coll.write() as w:
            with pytest.raises(AnnodbError, match="a note does not replace"):
                w.note(target, "a note", note_docno=note)
        with coll.write() as w:
            judgments.judge(w, "t2", target, 2, "a judgment of another topic")
        with coll.read() as r:
            docnos = _docnos(r)
            assert sorted(docnos) == sorted([target, note, f"note:t2:{target}"])
            assert r.document(note).container == ":"
        assert check(coll) == []
