"""Documents by address from the process's decoded groups (doc_cache.py): what a read
returns is what the committed state stores, through appends, deletes, aborted writes
and snapshots of older states."""

import annodb


def names(r, addresses):
    docs = r.documents_at(addresses)
    return [None if d is None else d.docno for d in docs], r.docnos_at(addresses)


def test_documents_by_address_follow_appends_and_deletes(tmp_path):
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        added = [w.add(f"text of document {i} " * (i + 1), docno=f"d{i}") for i in range(40)]
    starts = [a.start for a in added]
    with db.read() as r:
        assert names(r, starts) == ([a.docno for a in added],) * 2
        assert r.document_at(added[3].end).docno == "d3"   # inside, not at the start
    with db.write() as w:   # appended: the cached documents stay right
        more = w.add("one more", docno="late")
    with db.read() as r:
        assert names(r, starts + [more.start]) == ([a.docno for a in added] + ["late"],) * 2
    old = db.read()          # a snapshot of the state before the delete
    with db.write() as w:
        assert w.delete("d5")
    with db.read() as r:     # a deleted document is not found at its addresses
        assert names(r, [starts[5], starts[6]]) == ([None, "d6"],) * 2
        assert r.document_at(added[5].end) is None
    assert names(old, [starts[5]]) == (["d5"],) * 2   # the older state still holds it
    assert old.document_at(starts[5]).text.startswith("text of document 5")
    old.close()
    with db.read() as r:
        assert names(r, [starts[5]]) == ([None],) * 2
    db.close()


def test_an_aborted_writers_addresses_name_the_next_writers_documents(tmp_path):
    """A writer reads its own documents, not cached ones; an aborted writer's addresses
    are used again by the next writer, and reads then name its documents."""
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        w.add("first document", docno="a")
    w = db.write()
    gone = w.add("never committed", docno="gone")
    assert w.document_at(gone.start).docno == "gone"
    w.abort()
    with db.read() as r:
        assert r.document_at(gone.start) is None
    with db.write() as w:
        kept = w.add("committed instead", docno="kept")
    assert kept.start == gone.start
    with db.read() as r:
        assert names(r, [kept.start]) == (["kept"],) * 2
        assert r.document_at(kept.start).text == "committed instead"
    db.close()


def test_ranked_hits_are_named_after_deletes(tmp_path):
    """Hits without snippets take their docnos from the cached groups: a document
    deleted and another added in its place are named as stored."""
    db = annodb.open(tmp_path / "db")
    with db.write() as w:
        for i in range(30):
            w.add(f"goth rock number {i}", docno=f"g{i}")
    with db.read() as r:
        first = [h.docno for h in r.search_text("goth", k=30, rank="bm25", snippets=False)]
    assert sorted(first) == sorted(f"g{i}" for i in range(30))
    with db.write() as w:
        w.delete("g0")
        w.add("goth rock again", docno="new")
    with db.read() as r:
        hits = r.search_text("goth", k=30, rank="bm25", snippets=False)
        with_snippets = r.search_text("goth", k=30, rank="bm25")
        assert [h.docno for h in hits] == [h.docno for h in with_snippets]
        assert "g0" not in [h.docno for h in hits] and "new" in [h.docno for h in hits]
    db.close()
