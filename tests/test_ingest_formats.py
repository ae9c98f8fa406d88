"""Every record in, or a reported problem: JSON files, CSV and TSV tables, folders of plain
text, the options naming fields checked against the records, cut-off last lines, and
complete documents (every field of the record given back)."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import annodb
from annodb.ingest import formats
from annodb.check import check
from annodb.ingest import ingest

DATA = Path(__file__).parent / "data"
SAMPLE = [json.loads(line) for line in (DATA / "sample.jsonl").read_text().splitlines()]


@pytest.fixture
def db(tmp_path):
    database = annodb.open(tmp_path / "t.db")
    yield database
    database.close()


def run(db, *paths, **options):
    summary = ingest(db, [str(p) for p in paths], **options)
    assert check(db) == []
    return summary


def docs(db) -> dict:
    with db.read() as r:
        return {d.docno: d for d in r.documents()}


# ---------------------------------------------------------------- .json


@pytest.mark.parametrize("indent", [2, None])
def test_a_json_array_gives_every_element(db, tmp_path, indent):
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(SAMPLE, indent=indent))
    s = run(db, path)
    assert (s.added, s.skipped, s.error_count) == (4, 0, 0)
    found = docs(db)
    assert list(found) == ["ch1-v1", "ch1-v2", "ch2-v1", "ch2-v2"]
    assert found["ch2-v2"].field_text("text") == "The river runs north to the sea."
    with db.read() as r:
        assert list(r.intervals(":chapter:").values) == [1, 1, 2, 2]


def test_a_json_array_of_msmarco_segments_reads_as_jsonl_does(db, tmp_path):
    path = tmp_path / "segments.json"
    path.write_text(json.dumps([json.loads(line) for line in
                                (DATA / "msmarco.jsonl").read_text().splitlines()], indent=1))
    run(db, path)
    with db.read() as r:
        doc = r.document("msmarco_v2.1_doc_00_0#0_0")
        assert [f.name for f in doc.fields] == ["title", "headings", "segment"]
        assert doc.meta["url"] == "https://example.org/owls"


def test_a_json_file_holding_one_object_is_one_record_and_jsonl_still_works(db, tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps(SAMPLE[0], indent=4))
    lines = tmp_path / "lines.json"
    lines.write_text("".join(json.dumps(r) + "\n" for r in SAMPLE[1:]))
    s = run(db, one, lines)
    assert (s.added, s.skipped) == (4, 0)
    assert list(docs(db)) == ["ch1-v1", "ch1-v2", "ch2-v1", "ch2-v2"]


def test_json_problems_are_reported_with_their_lines(db, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"docid": "a", "text": "one"},\n  {"docid": "b", "text": tru},\n'
                    '  [1, 2],\n  {"text": "no id"},\n  {"docid": "c", "text": "three"}\n]\n')
    s = run(db, path)
    assert list(docs(db)) == ["a", "c"]
    assert [e.split(": ")[0] for e in s.errors] == [f"{path}:3", f"{path}:4", f"{path}:5"]
    assert "invalid JSON" in s.errors[0] and "not a JSON object but an array" in s.errors[1]
    assert s.skipped == 3


def test_a_json_array_cut_off_keeps_the_whole_elements(db, tmp_path):
    path = tmp_path / "cut.json"
    text = json.dumps(SAMPLE, indent=2)
    cut = text.index('"ch2-v2"') + 20                     # inside the last element
    path.write_text(text[:cut])
    s = run(db, path)
    assert list(docs(db)) == ["ch1-v1", "ch1-v2", "ch2-v1"]
    line = text[:text.rindex("{", 0, cut)].count("\n") + 1
    assert s.errors == [f"{path}:{line}: invalid JSON: the file ends inside this value (a file "
                        "still being written?)"]


def test_a_bad_line_among_json_lines_costs_that_line_only(db, tmp_path):
    path = tmp_path / "lines.json"
    path.write_text('{"docid": "a"}\n{"docid": "b", "t": [\n{"docid": "c"}\n{"docid": "d"')
    s = run(db, path)
    assert list(docs(db)) == ["a", "c"]
    assert s.errors == [
        f"{path}:2: invalid JSON: the file ends inside this value (a file still being "
        "written?); reading on from line 3",
        f"{path}:4: invalid JSON: the file ends inside this value (a file still being "
        "written?)"]


def test_mismatched_brackets_stop_the_file_with_a_problem(db, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"docid": "a", "text": "x"},\n {"docid": "b", "t": [1}, {"docid": "c"}]')
    s = run(db, path)
    assert list(docs(db)) == ["a"]
    assert s.errors == [f"{path}:2: invalid JSON: '}}' where ']' was expected; the rest of the "
                        "file is not read"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.text(alphabet=st.sampled_from('ab"\\[]{},: \n\u00e9\U0001f600'), max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet=st.sampled_from('k"\\]}'), max_size=3), inner, max_size=3),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_json, max_size=5), layout=st.sampled_from(["array", "lines", "pretty"]),
       read_bytes=st.integers(1, 17))
def test_the_json_scanner_splits_as_the_json_module_reads(values, layout, read_bytes):
    """JsonValues, reading a few bytes at a time, yields exactly the values, with the line
    each starts on."""
    if layout == "array":
        text = json.dumps(values, indent=1, ensure_ascii=False)
        expected = values
    else:   # values one after another: a top-level array gives its elements
        sep = "\n" if layout == "lines" else "\n\n"
        indent = None if layout == "lines" else 2
        text = sep.join(json.dumps(v, indent=indent) for v in values)
        expected = [x for v in values for x in (v if isinstance(v, list) else [v])]
    got = list(formats.JsonValues(io.BytesIO(text.encode()), read_bytes))
    assert [g[1] for g in got] == expected
    lines = text.split("\n")
    assert [g[0] for g in got] == sorted(g[0] for g in got)
    for line, value, nbytes in got:       # each value starts on its line
        assert json.dumps(value, ensure_ascii=False)[0] in lines[line - 1]


def test_a_big_json_array_is_scanned_in_bounded_memory():
    """The scanner holds the value it is reading and one read, not the array."""
    record = json.dumps({"docid": "x", "text": "word " * 50}, indent=2).encode()
    data = b"[" + b",\n".join([record] * 20000) + b"]"       # 8 MB
    values = formats.JsonValues(io.BytesIO(data), read_bytes=1 << 16)
    held = 0
    for n, _ in enumerate(values, 1):
        held = max(held, len(values.buf))
    assert n == 20000
    assert held <= (1 << 16) + 2 * len(record), held


# ---------------------------------------------------------------- CSV and TSV tables


def test_csv_columns_become_fields(db, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('title,docid,body,year\r\n"Owls, at night",o1,"Owls hunt.\nAt night.",1982\r\n'
                    'Bats,b2,Bats catch moths,007\r\n')
    s = run(db, path)
    assert (s.added, s.skipped, s.notes) == (2, 0, [])
    found = docs(db)
    assert list(found) == ["o1", "b2"]
    assert [f.path for f in found["o1"].fields] == [":title:", ":body:", ":year:"]
    assert found["o1"].field_text("body") == "Owls hunt.\nAt night."
    assert found["b2"].field_text("year") == "007"         # CSV cells stay text
    with db.read() as r:
        assert r.count("(<< 1982 year:)") == 1


def test_csv_without_an_id_column_uses_the_first_and_says_so(db, tmp_path):
    path = tmp_path / "names.csv"
    path.write_text("name,colour\nada,green\ngrace,blue\n")
    s = run(db, path)
    assert list(docs(db)) == ["ada", "grace"]
    assert s.notes == [f"{path}: its header row names none of docid, docno, id, _id: the "
                       "first column, 'name', is the docno (choose another with --id-field)"]
    other = tmp_path / "other.db"
    ingest(other, [path], id_field="colour")
    with annodb.open(other) as o, o.read() as r:
        assert [d.docno for d in r.documents()] == ["green", "blue"]


def test_a_csv_file_written_with_semicolons_is_read_with_them_and_says_so(db, tmp_path):
    """A spreadsheet where the comma is the decimal mark writes ';' between cells (with a
    byte-order mark and CRLF): a header row with no comma outside quotes but semicolons
    is read with them, and a note says so; a header with commas, or a single column,
    stays comma-separated."""
    path = tmp_path / "euro.csv"
    path.write_bytes('\ufeffid;"Titel, kurz";Text\r\n1;Erste;"Hallo; Welt"\r\n'
                     '2;Zweite;Grüße aus Köln, 3,5 km\r\n'.encode())
    s = run(db, path)
    assert (s.added, s.skipped) == (2, 0)
    assert s.notes == [f"{path}: read with ';' between cells (its header row has no comma "
                       "and holds those)"]
    found = docs(db)
    assert found["1"].field_text("Text") == "Hallo; Welt"
    assert found["2"].field_text("Text") == "Grüße aus Köln, 3,5 km"
    assert found["2"].field_text("Titel, kurz") == "Zweite"
    one = tmp_path / "one.csv"
    one.write_text("id\na;b\n")
    s = run(db, one)
    assert "a;b" in docs(db) and s.notes == []       # one column: nothing to split


def test_csv_rows_that_cannot_be_stored_are_reported(db, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"id,text\na,fine\nb,one,two\nc,bad \xff byte\n,no id\nd,last one")
    s = run(db, path)
    assert list(docs(db)) == ["a"]
    assert [e.split(": ", 1) for e in s.errors] == [
        [f"{path}:3", "3 cells, but the header row has 2 columns"],
        [f"{path}:4", "invalid UTF-8 in this row"],
        [f"{path}:5", "id field 'id' must be a non-empty string or integer"],
        [f"{path}:6", formats.CUT_LINE]]


@pytest.mark.parametrize("header, message", [
    ("id,text,id\n", "names the column 'id' twice"),
    ("id,,text\n", "column 2 of the header row has no name")])
def test_a_bad_header_row_fails_before_writing(tmp_path, header, message):
    path = tmp_path / "h.csv"
    path.write_text(header + "a,b,c\n")
    with pytest.raises(annodb.IngestError, match=message):
        ingest(tmp_path / "never.db", [path])
    assert not (tmp_path / "never.db").exists()


def test_tsv_with_a_header_row_is_a_table_and_without_one_docno_tab_text(db, tmp_path):
    table = tmp_path / "table.tsv"
    table.write_text('docno\ttitle\tbody\nd1\tFirst\t"Quoted" body\n')
    lines = tmp_path / "lines.tsv"
    lines.write_text("title\tbody\nFirst\tbody one\n")
    s = run(db, table, lines)
    found = docs(db)
    assert found["d1"].field_text("body") == '"Quoted" body'     # no quoting in TSV
    assert found["title"].text == "body" and found["First"].text == "body one"
    assert s.notes == [
        f"{table}: read as a table: its first line is a header row naming the id column "
        "'docno'",
        f"{lines}: read as docno<TAB>text lines (its first line names no id column; for a "
        "table with a header row, give --id-field COLUMN)"]
    other = tmp_path / "other.db"                     # --id-field names the header's column
    ingest(other, [lines], id_field="title")
    with annodb.open(other) as o, o.read() as r:
        assert r.document("First").field_text("body") == "body one"


def test_tsv_options_that_name_no_column_are_errors(tmp_path):
    lines = tmp_path / "lines.tsv"
    lines.write_text("a\tb\n")
    with pytest.raises(annodb.IngestError, match=r"--id-field 'url' names no column of its "
                                                 r"first line \(a, b\)"):
        ingest(tmp_path / "never.db", [lines], id_field="url")
    with pytest.raises(annodb.IngestError, match="docno<TAB>text lines, which have none"):
        ingest(tmp_path / "never.db", [lines], text_fields=["b"])
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize("name, first, rest", [
    ("growing.tsv", "d1\tcomplete line\n", ["d2\thalf a li", "ne\n"]),
    ("growing.csv", "id,text\nd1,complete line\n", ["d2,half a li", "ne\n"])])
def test_a_file_still_being_written_keeps_its_cut_last_line_for_the_resume(
        db, tmp_path, name, first, rest):
    path = tmp_path / name
    path.write_text(first + rest[0])
    s = run(db, path)
    assert list(docs(db)) == ["d1"]
    assert s.errors == [f"{path}:{first.count(chr(10)) + 1}: {formats.CUT_LINE}"]
    path.write_text(first + "".join(rest))               # the writer finished the line
    s = run(db, path)
    assert (s.added, s.present, s.skipped) == (1, 1, 0)
    assert docs(db)["d2"].text == "half a line"


# ---------------------------------------------------------------- plain-text folders


def test_plain_text_files_are_named_by_their_path_below_the_common_root(db, tmp_path):
    tree = tmp_path / "tree"
    for sub in ("a", "b", "b/deeper"):
        (tree / sub).mkdir(parents=True)
    (tree / "a" / "README.md").write_text("alpha readme\n")
    (tree / "b" / "README.md").write_text("beta readme\n")
    (tree / "b" / "deeper" / "notes.txt.gz").write_bytes(gzip.compress(b"deep notes\n"))
    s = run(db, tree / "a" / "README.md", tree / "b" / "README.md")
    assert (s.added, s.skipped) == (2, 0)
    assert list(docs(db)) == ["a/README.md", "b/README.md"]
    other = tmp_path / "other.db"
    s = ingest(other, [tree])                           # a directory: its files, recursively
    with annodb.open(other) as o, o.read() as r:
        assert [d.docno for d in r.documents()] == [
            "a/README.md", "b/README.md", "b/deeper/notes.txt"]
        assert r.document("b/deeper/notes.txt").text == "deep notes\n"


def test_a_directory_leaves_out_binary_files_and_says_so(db, tmp_path):
    """A folder of notes often holds images and PDFs: a file that would be read as plain
    text but has a NUL byte in its first 8 KB is left out with a note naming it (not an
    error for the whole run); a file named for its format (.jsonl) is read as that
    format whatever it holds, and a binary file given by name is refused before anything
    is written."""
    tree = tmp_path / "notes"
    (tree / "sub").mkdir(parents=True)
    (tree / "meeting.md").write_text("We moved the launch to June.\n")
    (tree / "sub" / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF" + bytes(5000))
    (tree / "sub" / "scan.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00\x01" * 100)
    (tree / "records.jsonl").write_bytes(b'{"id": "r1", "text": "fine"}\n{"id": "r2\x00"\n')
    s = run(db, tree)
    assert sorted(docs(db)) == ["meeting.md", "r1"]
    assert s.error_count == 1                      # the .jsonl's bad line: reported, not left out
    assert s.notes == [f"{tree}: left out 2 binary files (a NUL byte in the first 8 KB: not "
                       f"text): {tree}/sub/photo.jpg, {tree}/sub/scan.pdf"]
    with pytest.raises(annodb.IngestError, match="photo.jpg: a binary file, not text"):
        run(db, tree / "meeting.md", tree / "sub" / "photo.jpg")
    only = tmp_path / "only"
    only.mkdir()
    (only / "a.bin").write_bytes(bytes(10))
    with pytest.raises(annodb.IngestError, match="no files in this directory .1 binary"):
        run(db, only)


def test_a_directory_leaves_out_hidden_entries_and_says_so(db, tmp_path):
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tree / ".DS_Store").write_bytes(b"\x00\x01binary")
    (tree / "doc.txt").write_text("a document\n")
    s = run(db, tree)
    assert list(docs(db)) == ["doc.txt"]
    assert s.notes == [f"{tree}: left out 2 entries: names starting with '.', links to "
                       "directories, special files, the database"]
    s = ingest(tree / "inside.db", [tree])           # never the database's own files
    assert (s.added, s.present, s.skipped) == (1, 0, 0)


def test_many_small_text_files_make_few_batches(db, tmp_path):
    tree = tmp_path / "many"
    tree.mkdir()
    for i in range(50):
        (tree / f"{i:02d}.txt").write_text(f"file {i} says hello\n")
    (tree / "25.txt").write_bytes(b"bad \xff byte")     # one bad file costs itself only
    s = run(db, tree)
    assert (s.files, s.added, s.skipped, s.batches) == (50, 49, 1, 1)
    assert s.errors == [f"{tree / '25.txt'}:1: invalid UTF-8 at byte 4"]
    assert len(docs(db)) == 49
    s = run(db, tree, batch_size=20)                    # a rerun: all there
    assert (s.added, s.present, s.skipped) == (0, 49, 1)


def test_text_files_read_in_a_second_process_are_the_same(tmp_path):
    tree = tmp_path / "many"
    tree.mkdir()
    for i in range(30):
        (tree / f"{i:02d}.txt").write_text(f"file {i} " * (i + 1))
    (tree / "07.txt").write_bytes(b"\xff")
    results = []
    for parallel in (False, True):
        with annodb.open(tmp_path / f"{parallel}.db") as d:
            s = run(d, tree, parallel=parallel, batch_size=7)
            s.seconds = 0.0
            results.append((s, [(x.docno, x.text) for x in docs(d).values()]))
    assert results[0] == results[1]
    assert results[0][0].errors == [f"{tree / '07.txt'}:1: invalid UTF-8 at byte 0"]


# ---------------------------------------------------------------- options naming fields


def test_a_text_field_no_record_has_fails_before_writing_listing_the_fields(tmp_path):
    target = tmp_path / "never.db"
    with pytest.raises(annodb.IngestError) as info:
        ingest(target, [DATA / "sample.jsonl"], text_fields=["text", "txt"])
    assert str(info.value) == (
        f"{DATA / 'sample.jsonl'}: --text-field 'txt' names no field of its first 4 records "
        "(fields seen: docid, book, chapter, verse, text, draft, tags)")
    with pytest.raises(annodb.IngestError, match="--id-field 'key' names no field"):
        ingest(target, [DATA / "sample.jsonl"], id_field="key")
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("id,body\na,text\n")
    with pytest.raises(annodb.IngestError, match=r"--text-field 'text' names no column of "
                                                 r"its header row \(columns: id, body\)"):
        ingest(target, [csv_file], text_fields=["text"])
    with pytest.raises(annodb.IngestError, match="plain text, which have none"):
        ingest(target, [DATA / "note.txt"], text_fields=["text"])
    assert not target.exists()
    sparse = tmp_path / "sparse.jsonl"                  # some records having it is enough
    sparse.write_text('{"id": "a", "body": "x"}\n{"id": "b", "title": "y"}\n')
    assert ingest(target, [sparse], text_fields=["title"]).added == 2


# ---------------------------------------------------------------- complete documents


def test_a_document_gives_back_every_field_of_its_record(db, tmp_path):
    path = tmp_path / "r.jsonl"
    record = {"docid": "x", "title": "A title", "year": 1982, "score": 2.5, "draft": True,
              "gone": None, "tags": ["a", "b"], "mixed": ["a", 1],
              "author": {"name": "Ada", "born": 1815}, "big": 2**70}
    path.write_text(json.dumps(record) + "\n")
    run(db, path)
    doc = docs(db)["x"]
    assert doc.meta == {"year": 1982, "score": 2.5, "draft": True, "gone": None,
                        "mixed": ["a", 1], "author": {"born": 1815}, "big": str(2**70)}
    assert [f.path for f in doc.fields] == [":title:", ":tags:[0]:", ":tags:[1]:",
                                            ":mixed:[0]:", ":author:name:"]
    run(db, DATA / "sample.jsonl")
    run(db, DATA / "records.jsonl", id_field="key", text_fields=["body"])
    with db.read() as r:
        assert r.document("ch2-v1").meta == {"chapter": 2, "verse": 1, "draft": True}
        assert r.document("r1").meta == {"title": "Owls at night", "rating": 4.5,
                                         "extra": "ignored text"}   # not a text field chosen


def test_random_records_lose_nothing(tmp_path):
    """Whatever a record holds comes back: its strings as fields, the rest as metadata."""
    rng = random.Random(16)
    records = []
    for i in range(200):
        rec = {"docid": f"d{i}"}
        for k in range(rng.randrange(5)):
            rec[f"f{k}"] = rng.choice(["text", 3, 2.5, False, None, [1, "x"], {"a": "y", "b": 2}])
        records.append(rec)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    ingest(tmp_path / "r.db", [path])
    with annodb.open(tmp_path / "r.db") as d, d.read() as r:
        for rec in records:
            doc = r.document(rec["docid"])
            texts = {f.path: doc.text[f.char_start:f.char_end] for f in doc.fields}
            for key, value in rec.items():
                if key == "docid":
                    continue
                if isinstance(value, str):
                    assert texts[f":{key}:"] == value
                elif isinstance(value, dict):
                    assert texts[f":{key}:a:"] == "y" and doc.meta[key] == {"b": 2}
                else:
                    assert doc.meta[key] == value
