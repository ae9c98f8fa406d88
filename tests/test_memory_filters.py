"""Memory's filters and metadata rules on real LMDB files: conditions on missing keys,
exists, in / not in, reserved keys, the warning when no word of a question is in the
memory, paths that are not a memory, and metadata past the first thousand names."""

import os

import pytest

import annodb
from annodb.errors import AnnodbError, StorageError
from annodb.judgments import judgments
from annodb.metadata import RESERVED


@pytest.fixture
def mem(tmp_path):
    with annodb.Memory(tmp_path / "memory.db") as m:
        yield m


def ids(entries):
    return sorted(e.docno for e in entries)


def test_not_equal_matches_a_memory_without_the_key_for_numbers_and_strings(mem):
    a = mem.remember("tea note", level=1, user="alice")
    b = mem.remember("tea note", level=2, user="bob")
    c = mem.remember("tea note")                       # neither key
    mem.annotate(a, "archived", 1)                     # archiving by a label: `!=` must keep the rest

    def where(**w):
        return ids(mem.recall("tea", k=10, where=w))

    assert where(archived=("!=", 1)) == sorted([b, c])
    assert where(level=("!=", 1)) == sorted([b, c])
    assert where(user=("!=", "alice")) == sorted([b, c])
    # comparisons and = need the key
    assert where(level=(">", 0)) == sorted([a, b])
    assert where(level=("<", 5)) == sorted([a, b])
    assert where(level=1) == [a]
    assert where(user="bob") == [b]
    # in / not in, numbers and strings
    assert where(user=("in", ["alice", "bob"])) == sorted([a, b])
    assert where(user=("not in", ["alice", "carol"])) == sorted([b, c])
    assert where(level=("not in", [2, 3])) == sorted([a, c])
    assert where(level=("in", [2, 3])) == [b]
    # exists
    assert where(level=("exists", True)) == sorted([a, b])
    assert where(level=("exists", False)) == [c]
    assert where(user=("exists", True)) == sorted([a, b])
    assert where(user=("exists", False)) == [c]
    assert where(archived=("exists", True)) == [a]
    assert where(nothing=("exists", False)) == sorted([a, b, c])
    assert where(nothing=("!=", "x")) == sorted([a, b, c])
    assert where(nothing=("exists", True)) == []
    # history and forget take the same conditions
    assert ids(mem.history(where={"level": ("!=", 1)})) == sorted([b, c])
    for bad, message in ((("exists", 1), "True or False"), (("in", "alice"), "a list"),
                         (("!=", [1, 2]), "one value"), ((">", "alice"), "strings take"),
                         (("in", []), "matches nothing")):
        with pytest.raises(AnnodbError, match=message):
            mem.recall("tea", where={"user": bad})
    with pytest.raises(AnnodbError, match="a dict"):
        mem.recall("tea", where=[("user", "alice")])


def test_keys_annodb_writes_itself_are_refused(tmp_path):
    """A label named like annodb's own features would forge a judgment (`judgment:t1`)
    or a note's link; so those keys, and Memory's own, are refused before anything is
    written."""
    path = tmp_path / "m.db"
    with annodb.Memory(path) as mem:
        target = mem.remember("a document worth judging")
        for key in ("judgment", "note", "order", "call", "superseded", "text"):
            with pytest.raises(AnnodbError, match="reserved"):
                mem.remember("x", **{key: "t1"})
            if key != "text":
                with pytest.raises(AnnodbError, match="reserved"):
                    mem.remember_many([{"text": "x", key: "t1"}])
            with pytest.raises(AnnodbError, match="reserved"):
                mem.annotate(target, key, 1)
        with pytest.raises(AnnodbError, match="set when it is remembered"):
            mem.annotate(target, "time", 1)
        assert set(RESERVED) >= {"judgment", "note", "order", "call", "key",
                                 "superseded", "text", "docno"}
        # topic is free (its records are documents, not labels); "" names no container
        m = mem.remember("about birds", topic="birds", note_to_self="", title="")
        assert [e.docno for e in mem.history(10)] == [m, target]  # nothing half-written
        assert [e.docno for e in mem.recall("birds", where={"topic": "birds"})] == [m]
        assert [e.docno for e in mem.recall("birds", where={"title": ""})] == [m]
    with annodb.open(path) as db, db.read() as r:
        assert judgments(r, "t1") == ([], None)
        assert not r.has_feature("judgment:t1") and not r.has_feature("note:t1")
        assert not r.has_feature("topic:") and not r.has_feature("title:")
        assert r.has_feature("title:%")


def test_a_question_none_of_whose_words_is_in_the_memory_says_so(mem):
    mem.remember("Alice is allergic to peanuts")
    found = mem.recall("allergies")
    assert found == [] and found.warnings == ["no word of 'allergies' is in the memory"]
    assert mem.recall("allergic").warnings == []
    assert mem.recall("peanuts", where={"user": "bob"}).warnings == [  # words there
        "no memory has the key 'user'"]                                   # (the filter's)


def test_paths_that_are_not_a_memory_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageError, match="needs a path"):
        annodb.Memory("")
    assert os.listdir(tmp_path) == []                     # no database made in the cwd
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(StorageError, match="not an annodb database"):
        annodb.Memory(folder)
    assert os.listdir(folder) == ["cat.jpg"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with annodb.Memory(empty) as mem:                     # a new or empty folder is fine
        mem.remember("hello")
    with annodb.Memory(empty) as mem:
        assert len(mem.history()) == 1


def test_metadata_past_a_thousand_names_is_all_there(tmp_path):
    """Every `:label:` value over a memory comes back (the first 1,000 names only, once)."""
    path = tmp_path / "m.db"
    n = 1100
    with annodb.Memory(path) as mem:
        m = mem.remember("a memory with many labels")
        with mem.db.write() as w:          # as n annotate() calls, in one transaction
            doc = w.document(m)
            for i in range(n):
                w.annotate(f":label{i:04d}:", doc.start, doc.end, i)
        got = mem.get(m).metadata
        assert all(got[f"label{i:04d}"] == i for i in range(n))
        assert mem.recall("memory", where={"label1099": 1099})[0].metadata["label1099"] == 1099
