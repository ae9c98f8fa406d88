"""Format versions between installs: a database is refused, with one line naming both
formats, by an annodb of an older format (at open, at every transaction, by every command),
never misread; an annodb reads every older format, including each variant of format 4 (which
grew without a new number), and its first write records the current format."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import annodb
from annodb import storage
from annodb.storage import layout
from annodb.check import check

pytestmark = pytest.mark.reliability

DATA = Path(__file__).resolve().parent.parent / "data"
NEWER = storage.FORMAT_VERSION + 1


def _set_format(path, version) -> None:
    """Record `version` as the database's format, as an annodb of that format would."""
    with annodb.open(path) as db:
        txn = storage.Txn(db._env, write=True)
        txn.set_meta("format", version)
        txn.commit()


def _small(path) -> None:
    with annodb.open(path) as db, db.write() as w:
        w.add("a document of this format", docno="d1")


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "annodb", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_format_is_five_and_a_new_database_records_it(tmp_path):
    """Format 4 grew (the counts value from 17 to 33 bytes, tails, containers, changes)
    without a new number; this annodb writes format 5 and reads 1 to 5."""
    assert storage.FORMAT_VERSION == 5 and storage.READS_FORMATS == (1, 2, 3, 4, 5)
    _small(tmp_path / "f.db")
    with annodb.open(tmp_path / "f.db", readonly=True) as db, db.read() as r:
        assert r._txn.meta("format") == 5


def test_a_newer_format_is_refused_with_one_line(tmp_path):
    """A database written by a newer annodb (its format number above this one's): open,
    read-only or not, raises FormatVersionError "written by annodb format N; this is format
    M: upgrade annodb"; each command prints that line alone and exits 1, `check` too."""
    path = tmp_path / "newer.db"
    _small(path)
    _set_format(path, NEWER)
    want = f"{path}: written by annodb format {NEWER}; this is format " \
           f"{storage.FORMAT_VERSION}: upgrade annodb"
    for readonly in (False, True):
        with pytest.raises(annodb.FormatVersionError) as caught:
            annodb.open(path, readonly=readonly)
        assert str(caught.value) == want
    for args in (["stats", "--db", str(path)], ["check", "--db", str(path)],
                 ["query", "--db", str(path), "document"],
                 ["show", "--db", str(path), "d1"]):
        done = _cli(*args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr == f"annodb: error: {want}\n", args


def test_a_database_upgraded_while_open_is_refused_at_the_next_transaction(tmp_path):
    """A process that opened the database before a newer annodb wrote it (a server, say)
    neither reads nor writes it afterwards: its next snapshot and its next write transaction
    raise the same one-line error, and the writer lock is not left taken."""
    path = tmp_path / "upgraded.db"
    _small(path)
    with annodb.open(path) as db:
        with db.read() as r:
            assert r.document("d1").text == "a document of this format"
        code = f"""
            import annodb
            from annodb import storage
            with annodb.open({str(path)!r}) as db:
                txn = storage.Txn(db._env, write=True)
                txn.set_meta("format", {NEWER})
                txn.commit()
            """
        subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True,
                       timeout=120)
        for _ in range(2):   # (twice: the first refusal released the writer lock)
            with pytest.raises(annodb.FormatVersionError, match="upgrade annodb"):
                db.read()
            with pytest.raises(annodb.FormatVersionError, match="upgrade annodb"):
                db.write(timeout=1)
    with pytest.raises(annodb.FormatVersionError):
        annodb.open(path)


def test_an_older_annodb_refuses_this_format(tmp_path):
    """What an annodb of the previous format does with a database this one wrote, by the
    same check: a process whose annodb is format 4 refuses it in one line."""
    path = tmp_path / "this.db"
    _small(path)
    code = f"""
        import sys
        import annodb
        from annodb.storage import layout
        layout.FORMAT_VERSION, layout.READS_FORMATS = 4, (1, 2, 3, 4)
        try:
            annodb.open({str(path)!r}, readonly=True)
        except annodb.FormatVersionError as err:
            print(err)
        """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout == f"{path}: written by annodb format 5; this is format 4: " \
                          "upgrade annodb\n", done.stderr


@pytest.mark.parametrize("version", [0, -1, "5", 2.5, None])
def test_a_format_number_no_annodb_wrote_is_refused(tmp_path, version):
    path = tmp_path / "odd.db"
    _small(path)
    _set_format(path, version)
    with pytest.raises(annodb.FormatVersionError, match="not one annodb has written"):
        annodb.open(path)


def test_golden_v5_still_opens(tmp_path):
    """tests/data/golden-v5 (tests/make_golden.py 5): format 4's last layout under its
    own number: tails, df and bound in each counts value, a note apart, a sparse field."""
    path = tmp_path / "golden.db"
    shutil.copytree(DATA / "golden-v5", path)
    with annodb.open(path) as db:
        assert check(db) == []
        with db.read() as r:
            assert r._txn.meta("format") == 5
            assert [d.docno for d in r.documents()][-4:] == ["tail", "ticks", "n1", "s1"]
            assert r.document_count() == 46 and r.document("n1").container == "note:"
            assert r.lists.statistics("tick") == (2, 0.0)
            assert r.lists.statistics("golden") == (41, 0.0)
            assert [h.docno for h in r.search("golden", container="note:")] == ["n1"]
            assert [h.docno for h in r.search_text("gold", rank="sparse")] == ["s1"]


def _as_early_format_4(path) -> int:
    """Rewrite a copy of golden-v4 as the annodb of early format 4 (2026-12-01, before df
    and bounds were kept) left it: every counts value the 17 bytes of count, version and
    flags, and no fields in meta. Returns how many values it rewrote."""
    with annodb.open(path) as db:
        txn = storage.Txn(db._env, write=True)
        with txn.txn.cursor(db=txn.dbs["counts"]) as cur:
            values = [(bytes(k), bytes(v)) for k, v in cur]
        for key, value in values:
            count, version, flags, _, _ = layout._STATS.unpack(value)
            txn.txn.put(key, layout._COUNT.pack(count, version, flags & ~storage.NO_STATS),
                        db=txn.dbs["counts"])
        txn.txn.delete(b"fields", db=txn.dbs["meta"])
        txn.commit()
    return len(values)


def test_both_variants_of_format_4_are_read_and_upgraded_by_a_write(tmp_path, figures):
    """golden-v4 (format 4 at its end: 33-byte counts values) and the same database as
    early format 4 wrote it (17-byte values): each opens, checks clean and ranks the same
    documents (BM25 counts df itself where it is not stored); the first write records
    format 5, and what it adds is found beside the old content."""
    rewritten = 0
    for variant in ("late", "early"):
        path = tmp_path / f"{variant}.db"
        shutil.copytree(DATA / "golden-v4", path)
        if variant == "early":
            rewritten = _as_early_format_4(path)
        with annodb.open(path) as db:
            assert check(db) == []
            with db.read() as r:
                assert r._txn.meta("format") == 4
                known = r.lists.statistics("golden")
                assert known == ((41, 0.0) if variant == "late" else (None, None))
                top = [h.docno for h in r.search_text("golden psalm", rank="bm25", k=5)]
                assert len(top) == 5 and all(d.startswith("psalm") for d in top)
            with db.write() as w:
                w.add("a golden verse written by format five", docno="new")
            assert check(db) == []
            with db.read() as r:
                assert r._txn.meta("format") == 5
                assert r.document("intro").text == \
                    "The golden database keeps old formats honest."
                assert r.count('(>> : (^ golden verse))') == 40
    figures.update(counts_values_rewritten=rewritten)
