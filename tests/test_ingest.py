"""Ingest of every format into real databases: options, idempotence, malformed input."""

from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
from pathlib import Path

import msgspec
import pytest

import annodb
from annodb import storage
from annodb.check import check
from annodb.ingest import Summary, check_inputs, ingest
from sigint import sigint_default

DATA = Path(__file__).parent / "data"


@pytest.fixture
def db(tmp_path):
    database = annodb.open(tmp_path / "t.db")
    yield database
    database.close()


def docnos(db) -> list[str]:
    with db.read() as r:
        return [d.docno for d in r.documents()]


def field_text(db, docno, name):
    with db.read() as r:
        return r.document(docno).field_text(name)


def run(db, *paths, **options) -> Summary:
    summary = ingest(db, [str(p) for p in paths], **options)
    assert check(db) == []
    return summary


# ---------------------------------------------------------------- formats


def test_jsonl(db):
    s = run(db, DATA / "sample.jsonl")
    assert (s.files, s.added, s.skipped, s.present, s.error_count) == (1, 4, 0, 0, 0)
    assert docnos(db) == ["ch1-v1", "ch1-v2", "ch2-v1", "ch2-v2"]
    with db.read() as r:
        doc = r.document("ch1-v1")
        assert doc.field_text("text") == "The quick brown fox jumps over the lazy dog."
        assert doc.field_text("book") == "Notes"
        assert s.tokens == r.stats().tokens
        assert len(r.term("fox")) == 1 and len(r.term("lazy")) == 2
        # every string but the id is text, in record order: book, text, then tags
        assert [f.path for f in r.document("ch2-v2").fields] == [
            ":book:", ":text:", ":tags:[0]:", ":tags:[1]:"]


def test_numbers_and_booleans_become_values_over_the_record(db):
    run(db, DATA / "sample.jsonl")
    with db.read() as r:
        chapter = r.intervals(":chapter:")
        records = r.intervals(":")
        assert list(chapter.starts) == list(records.starts)
        assert list(chapter.ends) == list(records.ends)
        assert list(chapter.values) == [1, 1, 2, 2]
        draft = list(r.intervals(":draft:"))
        doc = r.document("ch2-v1")
        assert draft == [(doc.start, doc.end, 1.0)]


def test_values_select_chapter_with_query(db):
    run(db, DATA / "sample.jsonl")
    with db.read() as r:
        found = r.query("(>> : (= :chapter: 2))")
        assert [r.document_at(p).docno for p in found.starts] == ["ch2-v1", "ch2-v2"]


def test_gzip_is_read_transparently(db, tmp_path):
    gz = tmp_path / "sample.jsonl.gz"
    gz.write_bytes(gzip.compress((DATA / "sample.jsonl").read_bytes()))
    s = run(db, gz)
    assert s.added == 4
    assert docnos(db) == ["ch1-v1", "ch1-v2", "ch2-v1", "ch2-v2"]


def test_id_and_text_field_options(db):
    s = run(db, DATA / "records.jsonl", id_field="key", text_fields=["body", "title"])
    assert s.added == 2
    with db.read() as r:
        doc = r.document("r1")
        assert doc.text == "Owls hunt mice in the dark.\nOwls at night"   # the order given
        assert [f.name for f in doc.fields] == ["body", "title"]
        assert doc.meta["extra"] == "ignored text"                      # not text: metadata
        assert len(r.term("ignored")) == 0
        assert list(r.intervals(":rating:").values) == [4.5, 3.0]
        title = r.intervals("title:")
        assert r.text(title.starts[0], title.ends[0]) == "Owls at night"


def test_missing_id_field_is_reported(db):
    s = run(db, DATA / "records.jsonl")   # no docid/docno/id/_id: every line is malformed
    assert s.added == 0 and s.error_count == 2
    assert "records.jsonl:1:" in s.errors[0] and "--id-field" in s.errors[0]


def test_msmarco_segments(db):
    s = run(db, DATA / "msmarco.jsonl")
    assert s.added == 3
    with db.read() as r:
        doc = r.document("msmarco_v2.1_doc_00_0#0_0")
        assert [f.name for f in doc.fields] == ["title", "headings", "segment"]
        assert doc.field_text("segment").startswith("Owls of the northern woods nest")
        assert doc.meta["url"] == "https://example.org/owls"
        assert "example" not in doc.text                               # the url is no text
        assert len(r.intervals("title:")) == 3 and len(r.intervals("segment:")) == 3
        assert list(r.intervals(":start_char:").values) == [0, 85, 0]
        assert list(r.intervals(":end_char:").values) == [84, 138, 32]
        segment = r.intervals("segment:")
        assert r.text(segment.starts[2], segment.ends[2]) == "Bats find moths by echolocation"


def test_msmarco_format_option_and_text_fields_override(db, tmp_path):
    run(db, DATA / "msmarco.jsonl", format="msmarco")
    assert len(docnos(db)) == 3
    other = annodb.open(tmp_path / "other.db")
    try:
        ingest(other, [DATA / "msmarco.jsonl"], text_fields=["segment"])
        with other.read() as r:
            assert [f.name for f in r.document("msmarco_v2.1_doc_01_7#0_0").fields] == ["segment"]
    finally:
        other.close()


def test_tsv(db):
    s = run(db, DATA / "sample.tsv")
    assert s.added == 3 and s.error_count == 0   # the blank line is no document
    with db.read() as r:
        assert r.document("q2").text == "Second: tabs\tinside the text stay."
        assert r.document("q1").text == "The first line of a tab-separated file."


def test_trec(db):
    s = run(db, DATA / "sample.trec")
    assert s.added == 2
    with db.read() as r:
        assert r.document("FT911-1").text == "Markets rally\nShares rose & bonds fell on Monday."
        assert r.document("FT911-2").text == "Second story: rain in Spain."
        assert len(r.term("docno")) == 0 and len(r.term("ft911")) == 0


def test_trec_detected_by_first_line(db, tmp_path):
    other = tmp_path / "fr94-0001"
    shutil.copy(DATA / "sample.trec", other)
    assert check_inputs([other])[0].format == "trec"
    assert run(db, other).added == 2


def test_a_lone_plain_text_file_docno_is_its_stem(db, tmp_path):
    gz = tmp_path / "heron.txt.gz"
    gz.write_bytes(gzip.compress("Herons wait.\n".encode()))
    for path, docno in ((DATA / "note.txt", "note"), (gz, "heron")):
        s = run(db, path)
        assert (s.files, s.added) == (1, 1)
        with db.read() as r:
            assert r.document(docno).text == (
                "Herons wait.\n" if docno == "heron" else path.read_text())


def test_format_detection():
    found = {Path(s.path).name: s.format for s in check_inputs(
        [DATA / n for n in ("sample.jsonl", "sample.tsv", "sample.trec", "note.txt")])}
    assert found == {"sample.jsonl": "jsonl", "sample.tsv": "tsv", "sample.trec": "trec",
                     "note.txt": "text"}
    assert not check_inputs([DATA / "sample.tsv"])[0].header   # docno<TAB>text
    assert check_inputs([DATA / "note.txt"], format="tsv")[0].format == "tsv"


# ---------------------------------------------------------------- idempotence, replace


def test_reingest_changes_nothing(db):
    run(db, DATA / "sample.jsonl")
    before = db.stats()
    s = run(db, DATA / "sample.jsonl")
    assert (s.added, s.skipped, s.present, s.tokens) == (0, 0, 4, 0)
    after = db.stats()
    assert (after.documents, after.tokens, after.addresses) == (
        before.documents, before.tokens, before.addresses)


def test_interrupted_ingest_resumes(db, tmp_path):
    lines = (DATA / "sample.jsonl").read_text().splitlines(keepends=True)
    part = tmp_path / "part.jsonl"
    part.write_text("".join(lines[:2]))
    run(db, part)
    s = run(db, DATA / "sample.jsonl", batch_size=1)
    assert (s.added, s.skipped, s.present) == (2, 0, 2)
    assert docnos(db) == ["ch1-v1", "ch1-v2", "ch2-v1", "ch2-v2"]


def test_replace(db, tmp_path):
    run(db, DATA / "sample.jsonl")
    changed = tmp_path / "changed.jsonl"
    changed.write_text('{"docid": "ch1-v2", "text": "A busy morning."}\n'
                       '{"docid": "new", "text": "brand new"}\n')
    s = run(db, changed, replace=True)
    assert (s.added, s.replaced, s.skipped, s.present) == (1, 1, 0, 0)
    with db.read() as r:
        assert r.document("ch1-v2").text == "A busy morning."
        assert len(r.term("afternoon")) == 0 and len(r.term("busy")) == 1
        assert r.stats().documents == 5
    assert docnos(db)[-2:] == ["ch1-v2", "new"]   # the replacement is appended


def test_duplicates_first_wins(db, tmp_path):
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"docid": "a", "text": "first"}\n{"docid": "b", "text": "other"}\n'
                   '{"docid": "a", "text": "second"}\n')
    for batch_size in (10, 1):   # inside one batch, and across batches
        db_path = tmp_path / f"dup{batch_size}.db"
        s = ingest(db_path, [dup], batch_size=batch_size)
        assert (s.added, s.duplicates, s.skipped, s.present) == (2, 1, 1, 0)
        assert s.warnings == [f"{dup}:3: duplicate docno 'a' skipped (the first is kept)"]
        with annodb.open(db_path) as other, other.read() as r:
            assert r.document("a").text == "first"


def test_duplicates_with_replace_last_wins(db, tmp_path):
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"docid": "a", "text": "first"}\n{"docid": "a", "text": "second"}\n')
    s = run(db, dup, replace=True)
    assert (s.added, s.duplicates, s.skipped) == (1, 1, 0)   # nothing lost
    with db.read() as r:
        assert r.document("a").text == "second"
        assert r.stats().documents == 1


# ---------------------------------------------------------------- malformed input


def test_malformed_lines_are_reported_and_skipped(db):
    path = DATA / "malformed.jsonl"
    problems = []
    s = run(db, path, on_problem=problems.append)
    assert docnos(db) == ["g1", "g4"]
    assert s.duplicates == 1 and s.error_count == 4 and s.skipped == 5
    assert problems == s.errors
    assert s.errors[0].startswith(f"{path}:2: invalid JSON")
    assert s.errors[1] == f"{path}:3: not a JSON object but an array"
    assert s.errors[2].startswith(f"{path}:4: record has none of the id fields")
    assert s.errors[3].startswith(f"{path}:5: invalid JSON") and "UTF-8" in s.errors[3]


def test_malformed_tsv(db):
    path = DATA / "malformed.tsv"
    s = run(db, path)
    assert docnos(db) == ["m1", "m3"]
    assert s.errors == [f"{path}:2: no tab: expected docno<TAB>text",
                        f"{path}:3: invalid UTF-8 at byte 7 of the line"]


def test_malformed_trec(db, tmp_path):
    path = tmp_path / "bad.trec"
    path.write_text("<DOC>\n<TEXT>no docno</TEXT>\n</DOC>\n<DOC><DOCNO>ok</DOCNO>fine</DOC>\n"
                    "<DOC><DOCNO>open</DOCNO>\nnever closed\n")
    s = run(db, path)
    assert docnos(db) == ["ok"]
    assert s.errors == [f"{path}:1: <DOC> without <DOCNO>",
                        f"{path}:5: <DOC> not closed at the end of the file"]


def test_strict_stops_at_the_first_problem_keeping_earlier_batches(db):
    path = DATA / "malformed.jsonl"
    with pytest.raises(annodb.IngestError) as info:
        ingest(db, [path], strict=True, batch_size=1)
    message = str(info.value)
    assert message.startswith(f"{path}:2: invalid JSON")
    assert "1 documents of earlier batches were committed" in message
    assert docnos(db) == ["g1"]
    assert check(db) == []


def test_strict_does_not_commit_the_current_batch(db):
    with pytest.raises(annodb.IngestError, match="the 1 of the current batch were not"):
        ingest(db, [DATA / "malformed.jsonl"], strict=True)
    assert docnos(db) == []


def test_a_record_the_database_refuses_is_never_half_written(db, tmp_path):
    """A 601-character token is longer than LMDB's largest key. Whatever the store does
    with it -- refuse the record at add (reported, skipped), fail the batch's commit
    (IngestError naming the lines), or store it -- no document is ever half written."""
    path = tmp_path / "long.jsonl"
    path.write_text('{"docid": "a", "text": "short"}\n'
                    '{"docid": "b", "text": "x' + "y" * 600 + '"}\n'
                    '{"docid": "c", "text": "fine"}\n')
    try:
        s = ingest(db, [path])
    except annodb.IngestError as err:
        assert str(err).startswith(f"{path}:1-3: the batch of 3 documents could not be "
                                   "committed")
        assert docnos(db) == []
    else:
        if s.error_count:
            assert s.errors[0].startswith(f"{path}:2: not stored")
            assert docnos(db) == ["a", "c"]
        else:
            assert docnos(db) == ["a", "b", "c"]
    assert check(db) == []


def test_over_long_docno_is_reported(db, tmp_path):
    path = tmp_path / "docno.tsv"
    path.write_text("x" * 600 + "\ttext\nok\ttext\n")
    s = run(db, path)
    assert docnos(db) == ["ok"]
    assert s.errors == [f"{path}:1: docno longer than 511 bytes"]


def test_missing_file_empty_directory_and_bad_gzip_fail_before_writing(tmp_path):
    target = tmp_path / "never.db"
    bad_gz = tmp_path / "bad.jsonl.gz"
    bad_gz.write_bytes(b"not gzip at all")
    empty = tmp_path / "empty"
    (empty / ".git").mkdir(parents=True)
    cases = [([tmp_path / "missing.jsonl"], "no such file"),
             ([DATA / "sample.jsonl", empty], r"no files in this directory \(1 hidden"),
             ([bad_gz], "not a readable gzip file"),
             ([], "no input files")]
    for paths, message in cases:
        with pytest.raises(annodb.IngestError, match=message):
            ingest(target, paths)
        assert not target.exists()


def _in_a_child_as(user, fn):
    """fn() in a forked child that has dropped to `user` (a pwd entry) for good; the
    child's exception comes back as 'Type: message', or None."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            fn()
            os.write(write, b"None")
        except BaseException as err:
            os.write(write, f"{type(err).__name__}: {err}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        reply = f.read().decode()
    os.waitpid(pid, 0)
    return None if reply == "None" else reply


def test_unreadable_file():
    """An input file the process may not read fails before anything is written. Root
    reads every file: as root, the ingest runs in a child dropped to the user nobody, in
    a directory of nobody's own (so only the input is out of its reach)."""
    import pwd
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "secret.jsonl"
        path.write_text('{"docid": "a", "text": "x"}\n')
        path.chmod(0)
        target = Path(tmp) / "never.db"

        def attempt():
            with pytest.raises(annodb.IngestError, match="permission denied"):
                ingest(target, [path])

        if os.geteuid() != 0:
            attempt()
        else:
            try:
                nobody = pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("running as root, and there is no user nobody to drop to")
            for own in (tmp, path):
                os.chown(own, nobody.pw_uid, nobody.pw_gid)
            assert _in_a_child_as(nobody, attempt) is None
        assert not target.exists()


def test_truncated_gzip_keeps_what_came_before(db, tmp_path):
    lines = "".join(f'{{"docid": "d{i}", "text": "line {i} of many"}}\n' for i in range(3000))
    data = gzip.compress(lines.encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    s = run(db, path, batch_size=100)
    assert s.error_count == 1 and "cannot read further" in s.errors[0]
    found = docnos(db)
    assert 0 < len(found) < 3000
    assert found == [f"d{i}" for i in range(len(found))]


def test_unknown_format():
    with pytest.raises(annodb.IngestError, match="unknown format"):
        check_inputs([DATA / "sample.jsonl"], format="xml")


def test_progress_callback(db):
    calls = []
    run(db, DATA / "sample.jsonl", DATA / "sample.tsv", progress=lambda *a: calls.append(a))
    total = os.path.getsize(DATA / "sample.jsonl") + os.path.getsize(DATA / "sample.tsv")
    assert calls[-1] == (7, total, total)
    assert all(c[2] == total for c in calls)


# ---------------------------------------------------------------- the reading process


def dump(db) -> tuple:
    """Everything a database holds, comparable across databases."""
    with db.read() as r:
        docs = [(d.docno, d.start, d.end, d.text,
                 [msgspec.structs.astuple(f) for f in d.fields], d.meta, d.tokens)
                for d in r.documents()]
        lists = {name: list(r.intervals(name)) for name, _ in r._txn.features()}
        return docs, lists, r.stats().as_dict() | {"path": None, "size_bytes": None}


def _scenario_files(tmp_path) -> list[tuple[list, dict]]:
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"docid": "a", "text": "Alpha beta"}\n'
                     '{"docid": "s", "text": "lone \\ud800 surrogate"}\n'
                     'not json\n'
                     '{"docid": "a", "text": "again alpha"}\n'
                     '{"docid": "b", "text": "Beta gamma", "n": 3}\n' * 3)
    cut = tmp_path / "cut.jsonl.gz"
    data = gzip.compress("".join(f'{{"docid": "d{i}", "text": "line {i} {i * 7919 % 10007}"}}\n'
                                 for i in range(20000)).encode())
    cut.write_bytes(data[: len(data) // 2])
    array = tmp_path / "array.json"
    array.write_text("[\n" + ",\n".join(['{"docid": "j1", "text": "one"}', '{"bad": }',
                                          '{"docid": "j2", "n": 2, "text": "two"}']) + "\n]\n")
    table = tmp_path / "table.csv"
    table.write_text('id,text\nc1,"a, b"\nc2,x,y\nc3,three\n')
    return [([DATA / "sample.jsonl", DATA / "sample.tsv", DATA / "sample.trec"], {}),
            ([array, table, DATA / "note.txt"], {"batch_size": 1}),
            ([DATA / "malformed.jsonl", DATA / "malformed.tsv"], {}),
            ([DATA / "msmarco.jsonl"], {}),
            ([mixed], {"batch_size": 2}),
            ([mixed], {"replace": True}),
            ([cut], {"batch_size": 3000})]


def test_reading_in_a_second_process_gives_the_same_database(tmp_path):
    """parallel=True (what big inputs get) reads, parses and tokenizes in a child process;
    everything written, counted and reported is the same as in-process."""
    for n, (paths, options) in enumerate(_scenario_files(tmp_path)):
        results = []
        for parallel in (False, True):
            with annodb.open(tmp_path / f"{n}-{parallel}.db") as db:
                s = run(db, *paths, parallel=parallel, **options)
                s.seconds = 0.0
                results.append((s, dump(db)))
        assert results[0] == results[1], paths


def test_batches_committed_together_give_what_each_alone_gives(tmp_path, monkeypatch):
    """Batches committed several to a transaction (commit_batches) leave the database,
    summary and problems that one transaction a batch leaves, whatever the input holds:
    malformed records, repeated docnos (within one transaction and across two), a record
    the database refuses at add (the transaction is thrown away and its batches redone a
    transaction each), replace."""
    encode = storage.encode_relative

    def refusing(doc):   # the stored form of the documents "x..." cannot be made
        if doc[0].startswith("x"):
            raise UnicodeError("refused")
        return encode(doc)

    monkeypatch.setattr(storage, "encode_relative", refusing)
    refused = tmp_path / "refused.jsonl"
    refused.write_text("".join(f'{{"docid": "r{i}", "text": "word{i % 7} and more"}}\n'
                               for i in range(12)) +
                       '{"docid": "r3", "text": "again"}\n{"docid": "r12", "text": "twelve"}\n' +
                       "".join(f'{{"docid": "x{i}", "text": "refused"}}\n' for i in range(3)) +
                       "".join(f'{{"docid": "s{i}", "text": "after {i}"}}\n'
                               for i in range(12)))
    scenarios = _scenario_files(tmp_path) + [([refused], {}), ([refused], {"replace": True})]
    for n, (paths, options) in enumerate(scenarios):
        results = []
        for together in (1, 3):
            with annodb.open(tmp_path / f"{n}-{together}.db") as db:
                small = {} if "batch_size" in options else {"batch_bytes": 60}
                s = run(db, *paths, commit_batches=together, **small, **options)
                s.seconds = 0.0
                results.append((s, dump(db)))
        assert results[0] == results[1], paths
    s = results[0][0]   # (the last: 29 records in 15 batches, the 8th and 9th refused)
    assert (s.batches, s.added, s.replaced, s.duplicates, s.error_count) == (14, 25, 0, 1, 3)
    assert s.errors == [f"{refused}:{line}: not stored: document is not valid Unicode "
                        "(refused)" for line in (15, 16, 17)]


@pytest.mark.parametrize("parallel", [False, True])
def test_ctrl_c_commits_the_batches_of_the_open_transaction_first(tmp_path, parallel):
    """Ctrl-C (a real SIGINT to this process) while a transaction holds some batches of its
    commit_batches: they are committed before the ingest stops, so Interrupted's summary
    is exactly what the database holds, whole batches in input order, and the same ingest
    again completes it; read in this process or by a reading process (forked)."""
    import signal
    per_batch, width = 20, 48   # every line as long: a batch is per_batch records
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(f'{{"docid": "d{i}", "text": "line {i}"}}'.ljust(width - 1) + "\n"
                           for i in range(400)))
    reports = []

    def progress(done, read, total):   # Ctrl-C after the 7th batch: 5 committed, 2 open
        reports.append(done)
        if len(reports) == 7:
            os.kill(os.getpid(), signal.SIGINT)

    path = tmp_path / "p.db"
    with sigint_default(), pytest.raises(annodb.ingest.Interrupted) as info:
        ingest(path, [src], batch_bytes=per_batch * width, commit_batches=5,
               progress=progress, parallel=parallel)
    s = info.value.summary
    assert (s.documents, s.batches) == (7 * per_batch, 7)
    with annodb.open(path) as db:
        assert docnos(db) == [f"d{i}" for i in range(7 * per_batch)]
        assert check(db) == []
    s = ingest(path, [src], batch_bytes=per_batch * width, commit_batches=5)
    assert (s.present, s.added) == (7 * per_batch, 400 - 7 * per_batch)


def test_strict_in_a_second_process(db):
    with pytest.raises(annodb.IngestError, match="malformed.jsonl:2"):
        ingest(db, [DATA / "malformed.jsonl"], strict=True, parallel=True)
    assert docnos(db) == []


def test_a_reading_process_that_dies_is_a_clear_error(db, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.executable", "/bin/false")
    with pytest.raises(annodb.IngestError, match="reading process ended unexpectedly"):
        ingest(db, [DATA / "sample.jsonl"], parallel=True)
    assert docnos(db) == []
    fake = tmp_path / "python"   # what the child says on its way out ends the message
    fake.write_text("#!/bin/sh\necho 'Traceback ...' >&2\necho 'MemoryError: no room' >&2\n"
                    "exit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr("sys.executable", str(fake))
    with pytest.raises(annodb.IngestError, match=r"\(exit code 3\): MemoryError: no room$"):
        ingest(db, [DATA / "sample.jsonl"], parallel=True)


_FORKING = """
import json, sys
from annodb import children
from annodb.ingest import database as module, ingest
order = []
def logged(name, f):
    def call(*args, **options):
        order.append(name)
        return f(*args, **options)
    return call
module._forked_reader = logged("fork", module._forked_reader)
module.database.open = logged("open", module.database.open)
children.start = logged("python -c", children.start)
if sys.argv[3] == "dying":
    def dying(args, out):
        raise MemoryError("no room")
    module._read_and_send = dying   # (the fork inherits it)
try:
    s = ingest(sys.argv[1], sys.argv[2].split(","), parallel=True)
    print(json.dumps([order, s.added, s.error_count]))
except Exception as err:
    print(json.dumps([order, type(err).__name__, str(err)]))
"""


def _forking(tmp_path, paths, how="") -> list:
    """What an ingest into a path in a fresh process (one thread: it may fork) did, in
    order (fork, open, python -c), and its outcome."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _FORKING, str(tmp_path / "p.db"),
                          ",".join(map(str, paths)), how],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_first_files_reading_process_is_forked_before_the_database_opens(tmp_path):
    """An ingest into a database given by its path forks its first big file's reading
    process before it opens the database (no fresh interpreter to start: no `python -c`
    child), a later file's is a `python -c` child, and both give what reading in-process
    gives."""
    paths = [DATA / "sample.jsonl", DATA / "msmarco.jsonl"]
    order, added, errors = _forking(tmp_path, paths)
    assert order == ["fork", "open", "python -c"]
    with annodb.open(tmp_path / "alone.db") as db:
        alone = run(db, *paths, parallel=False)
        expected = dump(db)
    assert (added, errors) == (alone.added, alone.error_count) and added > 0
    with annodb.open(tmp_path / "p.db") as db:
        assert dump(db) == expected


def test_a_forked_reading_process_that_dies_is_a_clear_error(tmp_path):
    """The forked reading process dying says so, with its exit code and the last line it
    wrote on stderr, and nothing is written."""
    order, kind, message = _forking(tmp_path, [DATA / "sample.jsonl"], "dying")
    assert order == ["fork", "open"] and kind == "IngestError"
    assert message.endswith("reading process ended unexpectedly (exit code 1): "
                            "MemoryError: no room"), message
    with annodb.open(tmp_path / "p.db") as db:
        assert docnos(db) == []


def test_a_script_without_a_main_guard_ingests_in_parallel(tmp_path):
    """The child is a plain `python -c`: it never re-runs the caller's script (as
    multiprocessing's spawn would)."""
    script = tmp_path / "script.py"
    script.write_text(
        "import annodb\n"
        "from annodb.ingest import ingest\n"
        f"s = ingest({str(tmp_path / 'x.db')!r}, [{str(DATA / 'sample.jsonl')!r}], "
        "parallel=True)\n"
        "print('ADDED', s.added)\n")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("ADDED") == 1 and "ADDED 4" in out.stdout


@pytest.mark.parametrize("parallel", [False, True])
def test_a_lone_surrogate_in_a_field_name_rejects_only_its_record(tmp_path, parallel):
    src = tmp_path / "docs.jsonl"
    src.write_text('{"docid": "a", "text": "one"}\n'
                   '{"docid": "b", "t\\ud800": "two"}\n'
                   '{"docid": "c", "text": "three", "m": {"x\\udcff": 1}}\n'
                   '{"docid": "d", "text": "four"}\n')
    summary = ingest(str(tmp_path / "db"), [str(src)], parallel=parallel)
    assert summary.added == 2 and summary.error_count == 2
    assert [e.split(": ")[0] for e in summary.errors] == [f"{src}:2", f"{src}:3"]
    with annodb.open(tmp_path / "db") as db, db.read() as r:
        assert [d.docno for d in r.documents()] == ["a", "d"]
        assert r.count("four") == 1


@dataclasses.dataclass(frozen=True)
class _Made:
    """As much of a batch.Batch as packed and unpacked use."""

    docnos: list


def test_a_chunk_crosses_the_pipe_unchanged():
    """A chunk packed for the pipe and unpacked is the same chunk: documents' lines as an
    array, problems put back in place, the batch's docnos the same list (sent as one
    string unless one holds a newline or is still to be made)."""
    import pickle
    import random
    from annodb.ingest.formats import Problem
    from annodb.ingest.stages import Chunk, packed, unpacked

    rng = random.Random(7)
    for _ in range(300):
        items, docnos = [], []
        for line in range(1, rng.randrange(0, 30) + 1):
            if rng.random() < 0.4:
                items.append(Problem(line, f"bad {line}"))
            else:
                docnos.append(rng.choice([f"d{line}", "", f"a\nb{line}", f"é\r{line}",
                                          None] if rng.random() < 0.1 else [f"d{line}"]))
                items.append((line, docnos[-1]))
        chunk = Chunk(items, _Made(docnos) if docnos else None, 99)
        back = unpacked(pickle.loads(pickle.dumps(packed(chunk))))
        assert back.items == items and back.tell == 99
        assert (back.batch is None) == (not docnos)
        assert back.batch is None or back.batch.docnos == docnos


@pytest.mark.parametrize("where", ["making", "reading"])
def test_the_reading_process_sends_no_chunk_after_a_failure(tmp_path, monkeypatch, where):
    """The reading process with its two threads: the chunks before a failure are sent in
    order, then the error, and never a chunk after it."""
    import io
    import pickle
    import signal
    import sys
    import types
    from annodb.ingest import database as module, process, stages

    source = module.check_inputs([str(DATA / "sample.jsonl")])[0]
    chunks = list(stages.read(source, None, None, 1, None))[:4]
    assert len(chunks) == 4

    def read_chunks(*args, **options):
        for k, chunk in enumerate(chunks):
            if where == "reading" and k == 2:
                raise OSError("the disk went away")
            yield chunk

    made = stages.make

    def make(items, prepared, tell, sparse):
        if where == "making" and len(made_calls) == 1:
            made_calls.append(tell)
            raise ValueError("a bug")
        made_calls.append(tell)
        return made(items, prepared, tell, sparse)

    made_calls: list = []
    monkeypatch.setattr(stages, "read", read_chunks)
    monkeypatch.setattr(stages, "make", make)
    stdin = types.SimpleNamespace(buffer=io.BytesIO(pickle.dumps(
        (source, None, None, 1, None, ()))))
    stdout = types.SimpleNamespace(buffer=io.BytesIO())
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", stdout)
    import gc
    was = gc.isenabled()
    ctrl_c = signal.getsignal(signal.SIGINT)
    huge = process.set_hugepages(True)
    try:
        module._reader_main()       # (made for a process of its own: it turns gc off ...)
    finally:
        if was:
            gc.enable()
        process.set_malloc(process.GLIBC_DEFAULTS)  # (... tunes malloc, ignores Ctrl-C)
        process.set_hugepages(huge is not False)
        signal.signal(signal.SIGINT, ctrl_c)
    stdout.buffer.seek(0)
    sent = []
    while True:
        kind, value = pickle.load(stdout.buffer)
        sent.append((kind, value))
        if kind in ("end", "error"):
            break
    kinds = [kind for kind, _ in sent]
    if where == "making":
        assert kinds == ["chunk", "error"] and "a bug" in sent[-1][1]
        assert stages.unpacked(sent[0][1]).tell == chunks[0][1]
    else:
        assert kinds == ["chunk", "chunk", "error"] and "the disk went away" in sent[-1][1]
        assert [stages.unpacked(v).tell for _, v in sent[:2]] == [c[1] for c in chunks[:2]]


def test_word_numbers_forget_the_ids_of_a_transaction_thrown_away(tmp_path, monkeypatch):
    """Through the reading process (its batches' words numbered across batches, the writer
    keeping each number's feature id): a transaction of three batches thrown away after
    its second batch's words were given ids (a document refused after add), its batches
    redone one a transaction, leaves what the same ingest read in this process leaves:
    the ids the thrown-away transaction gave are not taken for the redone batches' words
    nor for the later ones', whose words the refused document's took before."""
    from annodb import transaction
    real = transaction.Writer.add_batch

    def refusing(self, part, **options):
        added = real(self, part, **options)
        if part.docnos[0].startswith("x"):   # (its first document: the culprit found)
            raise annodb.AnnodbError("refused")
        return added

    monkeypatch.setattr(transaction.Writer, "add_batch", refusing)
    src = tmp_path / "words.jsonl"
    records = [("r0", "alpha common"), ("r1", "beta common"), ("x0", "zebra only here"),
               ("r2", "yak common"), ("r3", "walrus yak"), ("r4", "zebra alpha"),
               ("r5", "gnu"), ("r6", "walrus ibex")]
    src.write_text("".join(f'{{"docid": "{d}", "text": "{t}"}}\n' for d, t in records))
    results = []
    for parallel in (True, False):
        with annodb.open(tmp_path / f"{parallel}.db") as db:
            s = run(db, src, batch_size=2, commit_batches=3, parallel=parallel)
            s.seconds = 0.0
            results.append((s, dump(db)))
    assert results[0] == results[1]
    s, (docs, lists, _) = results[0]
    assert (s.added, s.error_count) == (7, 1) and "not stored: refused" in s.errors[0]
    assert [d[0] for d in docs] == ["r0", "r1", "r2", "r3", "r4", "r5", "r6"]
    assert len(lists["zebra"]) == 1 and len(lists["walrus"]) == 2 and not lists["here"]


def test_numbered_words_of_a_database_that_folds_diacritics(tmp_path):
    """Through the reading process (words numbered across batches) into a database that
    folds diacritics: words the tokenizer keeps apart (café, cafe) share one feature, in
    every batch and transaction, as when the same input is read in this process."""
    src = tmp_path / "d.jsonl"
    texts = ["Café naïve", "cafe naive CAFÉ", "über uber", "x café"] * 10
    src.write_text("".join(f'{{"docid": "d{i}", "text": "{t}"}}\n'
                           for i, t in enumerate(texts)))
    results = []
    for parallel in (True, False):
        with annodb.open(tmp_path / f"{parallel}.db", fold_diacritics=True) as db:
            run(db, src, batch_size=3, commit_batches=2, parallel=parallel)
            results.append(dump(db))
    assert results[0] == results[1]
    lists = results[0][1]
    assert "café" not in lists and len(lists["cafe"]) == 40 and len(lists["uber"]) == 20
