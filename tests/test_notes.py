"""Agent writes stay out of the collection: a note (Writer.note,
and any document added with a container other than `:`) is no hit of an ordinary search,
not counted among the collection's documents, yet found when a search asks for its
container; `check` verifies both kinds of documents. Through the server, with two real
socket clients."""

from __future__ import annotations


import msgspec
import pytest

import annodb
from annodb import storage
from annodb.check import check
from annodb.errors import AnnodbError

TEXTS = [("In the beginning God created the heavens and the earth.", "Gen.1.1"),
         ("God said, Let there be light, and there was light.", "Gen.1.3"),
         ("God saw the light, that it was good; he divided the light from the darkness.",
          "Gen.1.4")]


@pytest.fixture
def db(tmp_path):
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for text, docno in TEXTS:
            w.add(text, docno=docno)
    yield db
    db.close()


def test_notes_are_no_hits_of_ordinary_searches_nor_counted(db):
    with db.read() as r:
        before = r.stats()
        ranked = [h.docno for h in r.search("light")]
    with db.write() as w:
        n = w.note("Gen.1.3", "It talks about light: the first light, grade 3.",
                   note_docno="note:t1:Gen.1.3", features=("note:t1",))
        assert w.document_count() == 3
    with db.read() as r:
        assert [h.docno for h in r.search("light")] == ranked
        assert [h.docno for h in r.search("talks")] == []
        assert [h.docno for h in r.search_text("talks")] == []
        assert r.document_count() == 3
        stats = r.stats()
        assert (stats.documents, stats.tokens) == (before.documents, before.tokens)
        assert (stats.agent_documents, stats.agent_tokens) == (1, n.end - n.start + 1)
        # asked for, the notes are there: their container, or GCL naming it
        assert [h.docno for h in r.search("talks", container="note:")] == ["note:t1:Gen.1.3"]
        assert r.count("(<< talks note:)") == 1
        assert [h.docno for h in r.search("(>> : (@ note:t1))")] == ["Gen.1.3"]
        assert r.document("note:t1:Gen.1.3").container == "note:"
        assert r.document("Gen.1.3").container == ":"
        for docno in ("note:t1:Gen.1.3", "Gen.1.3"):   # the stored form keeps it
            doc = r.document(docno)
            again = msgspec.msgpack.decode(storage.relative_raw(doc), type=storage.Document)
            assert again.container == doc.container and again.text == doc.text
    assert check(db) == []


def test_replacing_and_deleting_notes_keeps_the_counts(db):
    with db.write() as w:
        w.note("Gen.1.1", "first version", note_docno="note:t1:Gen.1.1")
        w.note("Gen.1.1", "second version of the note", note_docno="note:t1:Gen.1.1")
        w.add("an agent's summary of the topic", docno="summary:t1", container="summary:")
    with db.read() as r:
        s = r.stats()
        assert (s.documents, s.agent_documents) == (3, 2)
        assert r.count("first") == 0 and r.count("second") == 1
        assert [h.docno for h in r.search("summary")] == []
        assert [h.docno for h in r.search("summary", container="summary:")] == ["summary:t1"]
    assert check(db) == []
    with db.write() as w:
        w.delete("note:t1:Gen.1.1")
        w.delete("Gen.1.4")
    with db.read() as r:
        s = r.stats()
        assert (s.documents, s.agent_documents) == (2, 1)
        assert s.agent_tokens == r.document("summary:t1").tokens
    assert check(db) == []


def test_check_tells_the_two_kinds_apart(db):
    with db.write() as w:
        n = w.note("Gen.1.1", "a note", note_docno="note:x")
    with db.write() as w:   # damage: the note also carries `:`, a document loses it
        w.annotate(":", n.start, n.end)
    problems = check(db)
    assert any("':' interval" in p and "no document's range" in p for p in problems), problems


def test_containers_are_feature_names(db):
    with db.write() as w:
        for bad in ("note", "a b", "", "(x:)"):
            with pytest.raises(AnnodbError, match="container"):
                w.add("x", docno="x", container=bad)
        with pytest.raises(AnnodbError, match="field of that name"):
            w.add({"id": "r", "note": "clashes with the container"}, container="note:")


def all_hits(client, query, **extra):
    reply = client(op="query", query=query, **extra)
    found = []
    while reply["ok"] and not reply.get("done"):
        found.append(reply["docno"])
        reply = client(op="next", qid=reply["qid"])
    return found


def test_another_client_never_sees_the_agents_notes_unless_it_asks(db, serve, connect):
    path = db.path
    db.close()
    server = serve(path)
    agent, other = connect(server), connect(server)
    before = all_hits(other, "(+ light god talks)")
    documents = other(op="stats")["documents"]
    r = agent(op="judge", topic="t1", docno="Gen.1.3", grade=3, call=1,
              text="Judgment of Gen.1.3: it talks of the light God made.")
    assert r["ok"] and r["note"] == "note:t1:Gen.1.3", r
    r = agent(op="note", docno="Gen.1.4", qid="t1", text="God and light again")
    assert r["ok"], r
    assert all_hits(other, "(+ light god talks)") == before
    assert all_hits(other, "talks") == []
    stats = other(op="stats")
    assert stats["documents"] == documents and stats["agent_documents"] == 2
    # asking for them: the notes' container, or a GCL query naming it
    assert all_hits(other, "(+ light god talks)", container="note:") == \
        ["note:t1:Gen.1.3", "note:t1@Gen.1.4"]
    assert other(op="count", query="(<< talks note:)")["count"] == 1
    assert all_hits(other, "(>> : (@ note:t1))") == ["Gen.1.3", "Gen.1.4"]
    server.shutdown()
    with annodb.open(path) as again:
        assert check(again) == []
