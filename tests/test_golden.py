"""Format versions and the golden databases (tests/data/golden-vN): what is not a database,
or of another format, is refused in one line; every older format opens, reads as it was
written, and takes writes."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

import annodb
from annodb import storage
from annodb.check import check


GOLDEN = Path(__file__).parent / "data" / "golden-v1"


def test_open_refuses_missing_and_non_databases(tmp_path):
    with pytest.raises(annodb.StorageError, match="no annodb database"):
        annodb.open(tmp_path / "missing.db", readonly=True)
    with pytest.raises(annodb.StorageError, match="no annodb database"):
        annodb.open(tmp_path / "missing.db", create=False)
    plain = tmp_path / "file.db"
    plain.write_text("not a database")
    with pytest.raises(annodb.StorageError):
        annodb.open(plain)


@pytest.mark.parametrize("key, message", [("format", "written by annodb format 99"),
                                          ("tokenizer", "tokenizer 99")])
def test_other_format_versions_are_refused(tmp_path, key, message):
    path = tmp_path / "v.db"
    with annodb.open(path) as db:
        txn = storage.Txn(db._env, write=True)
        txn.set_meta(key, 99)
        txn.commit()
    with pytest.raises(annodb.FormatVersionError, match=message):
        annodb.open(path)


def test_golden_database_still_opens(tmp_path):
    """tests/data/golden-v1 was written by tests/make_golden.py with format 1; this annodb
    must read it unchanged (or refuse it clearly after a format change: then bump the
    version, keep this directory, and add golden-v2)."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN, path)
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            assert [d.docno for d in r.documents()] == ["intro", "g2", "g3"]
            intro = r.document("intro")
            assert intro.text == "The golden database keeps old formats honest."
            assert (intro.start, intro.end, intro.tokens) == (0, 6, 7)
            assert r.document("g3").field_text("title") == "Third"
            assert r.document("g2").meta == {}
            assert r.term("golden").starts.tolist() == [1, 9]
            assert r.term("erased").starts.tolist() == []      # erased inside g3
            assert r.term("hidden").starts.tolist() == []      # g4 was deleted
            assert list(r.intervals("judgment:t1")) == [(0, 6, 3.0)]
            assert list(r.intervals(":chapter:")) == [(7, 11, 2.0), (12, 18, 3.0)]
            assert list(r.intervals(":")) == [(0, 6, 0.0), (7, 11, 0.0), (12, 18, 0.0)]
            assert list(r.intervals("title:")) == [(7, 7, 0.0), (12, 12, 0.0)]
            assert r.text(12, 18) == "Third\nA third document, partly words"
            assert r.erased()[0].tolist() == [17, 19] and r.erased()[1].tolist() == [17, 20]
            stats = r.stats()
            assert (stats.documents, stats.tokens, stats.addresses, stats.features) == (
                3, 19, 21, 24)


@contextlib.contextmanager
def golden_snapshot(tmp_path, version: int):
    """A read snapshot of a copy of tests/data/golden-v<version>, checked clean and of
    that format."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN.parent / f"golden-v{version}", path)
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == version
            yield r


def test_golden_v2_still_opens(tmp_path):
    """tests/data/golden-v2 (tests/make_golden.py 2): format 2's document groups (a long
    document's group with overflow pages) and a bit-packed block on an overflow page."""
    with golden_snapshot(tmp_path, 2) as r:
        assert [d.docno for d in r.documents()] == (
            ["intro", "g2", "g3"] + [f"psalm{i}" for i in range(40)] + ["long", "tail"])
        assert r.document("intro").text == "The golden database keeps old formats honest."
        assert r.term("erased").starts.tolist() == []
        assert r.document("psalm39").text == "verse 39 of the golden psalm"
        assert len(r.term("psalm")) == 40 and r.document("tail").text == "after the long one"
        long = r.document("long")
        want = [long.start + i for i in range(40000) if i * 7919 % 301 < 60]
        assert r.term("tick").starts.tolist() == want
        fid = r._txn.feature_id("tick")
        (_, _, block), = [b for b in r._txn.all_blocks() if b[0] == fid]
        assert block[1] & 128 and len(block) > 2014        # packed, on an overflow page
        kinds = {bytes(v[:1]) for _, v in r._txn.docs_entries()}
        assert kinds == {b"\x02"}                          # groups only
        assert r.count("(>> : (^ golden psalm))") == 40


def test_golden_v3_still_opens(tmp_path):
    """tests/data/golden-v3 (tests/make_golden.py 3): format 3's relative document groups,
    one of them keyed where its deleted first document was."""
    with golden_snapshot(tmp_path, 3) as r:
        assert [d.docno for d in r.documents()] == (
            ["intro", "g2", "g3"] + [f"psalm{i}" for i in range(1, 40)] + ["long", "tail"])
        assert r.document("intro").text == "The golden database keeps old formats honest."
        assert r.document("g3").field_text("title") == "Third"
        assert list(r.intervals(":chapter:")) == [(7, 11, 2.0), (12, 18, 3.0)]
        psalm1 = r.document("psalm1")
        assert (psalm1.start, psalm1.end) == (27, 32)
        assert [(f.start, f.end) for f in psalm1.fields] == [(27, 32)]
        assert r.document_at(26) is None and r.document_at(30).docno == "psalm1"
        assert r.text(27, 32) == "verse 1 of the golden psalm"
        long = r.document("long")
        want = [long.start + i for i in range(40000) if i * 7919 % 301 < 60]
        assert r.term("tick").starts.tolist() == want
        kinds = {bytes(v[:1]) for _, v in r._txn.docs_entries()}
        assert kinds <= {b"\x03", b"\x04"} and b"\x03" in kinds
        assert r.count("(>> : (^ golden psalm))") == 39


def test_golden_v4_still_opens(tmp_path):
    """tests/data/golden-v4 (tests/make_golden.py 4): format 4's tails, each word's df
    and bound in its counts value, a note kept apart and a sparse-vector field."""
    with golden_snapshot(tmp_path, 4) as r:
        assert [d.docno for d in r.documents()][-4:] == ["tail", "ticks", "n1", "s1"]
        assert r.document_count() == 46 and r.document("n1").container == "note:"
        txn = r._txn
        assert txn.txn.stat(txn.dbs["tails"])["entries"] > 0
        assert r.lists.statistics("tick") == (2, 0.0)       # df: "long" and "ticks"
        assert r.lists.statistics("golden") == (41, 0.0)
        long, ticks = r.document("long"), r.document("ticks")
        want = [long.start + i for i in range(40000) if i * 7919 % 301 < 60]
        assert r.term("tick").starts.tolist() == want + list(range(ticks.start,
                                                                   ticks.end, 2))
        assert [h.docno for h in r.search("golden", container="note:")] == ["n1"]
        assert "n1" not in [h.docno for h in r.search_text("golden note", k=50)]
        assert [h.docno for h in r.search_text("gold", rank="sparse")] == ["s1"]
        assert txn.meta("sparse_fields") == ["splade"]


def test_golden_v2_takes_writes_and_deletions(tmp_path):
    """A format-2 database takes format-3 writes; deleting from one of its groups rewrites
    it as it was (tag 2, absolute addresses)."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN.parent / "golden-v2", path)
    with annodb.open(path) as db:
        with db.write() as w:
            w.delete("psalm5")
            w.add_many([(f"golden words number {i}", f"new{i}") for i in range(300)])
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == storage.FORMAT_VERSION
            kinds = [bytes(v[:1]) for _, v in r._txn.docs_entries()]
            assert b"\x02" in kinds and b"\x03" in kinds
            assert not r.has("psalm5") and r.document("psalm6").text == \
                "verse 6 of the golden psalm"
            assert r.document("new299").text == "golden words number 299"
            assert r.count("(>> : (^ golden psalm))") == 39


def test_golden_v1_takes_writes_and_becomes_the_current_format(tmp_path):
    """A format-1 database opens for writing; what is written is format 3, the meta says so
    at commit, and the old content still reads beside the new."""
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN, path)
    with annodb.open(path) as db:
        with db.read() as r:
            assert r._txn.meta("format") == 1
        with db.write() as w:
            w.add_many([(f"golden words number {i}", f"new{i}") for i in range(3000)])
            w.annotate("judgment:t1", 7, 11, 1)
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == storage.FORMAT_VERSION
            assert r.document("intro").text == "The golden database keeps old formats honest."
            assert r.document("new2999").text == "golden words number 2999"
            golden = r.term("golden").starts.tolist()
            assert golden[:2] == [1, 9] and len(golden) == 3002
            assert list(r.intervals("judgment:t1")) == [(0, 6, 3.0), (7, 11, 1.0)]
