"""Which files an ingest reads and how (annodb/ingest/inputs.py), checked before anything
is written: formats by name and by content, directories in name order without hidden
entries or the database, plain-text docnos from the common root, runs of plain-text files
grouped into one input, and "file:line" of a grouped file's line."""

from __future__ import annotations

import gzip

import pytest

from annodb.errors import IngestError
from annodb.ingest.formats import FILE_SHIFT
from annodb.ingest.inputs import check_inputs, grouped, where


def write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


def test_the_format_follows_the_name_then_the_content(tmp_path):
    files = {"a.jsonl": '{"id": 1}\n', "b.ndjson.gz": '{"id": 2}\n', "c.json": "[]",
             "d.csv": "id,text\n1,x\n", "e.tsv": "d1\thello\n", "f.trec": "<DOC>\n",
             "g.dat": "\n  <DOC>\n<DOCNO>x</DOCNO>\n</DOC>\n", "h.md": "# notes\n"}
    for name, text in files.items():
        write(tmp_path / name, text)
    found = {s.path.rsplit("/", 1)[1]: (s.format, s.gzip) for s in check_inputs([tmp_path])}
    assert found == {"a.jsonl": ("jsonl", False), "b.ndjson.gz": ("jsonl", True),
                     "c.json": ("json", False), "d.csv": ("csv", False),
                     "e.tsv": ("tsv", False), "f.trec": ("trec", False),
                     "g.dat": ("trec", False), "h.md": ("text", False)}
    assert check_inputs([tmp_path / "h.md"], format="tsv")[0].format == "tsv"


def test_a_directory_is_its_files_in_name_order_without_hidden_ones_or_the_database(tmp_path):
    top = tmp_path / "in"
    for name in ("b/2.txt", "a.txt", "b/1.txt", ".hidden.txt", ".git/x.txt", "db/data.mdb"):
        write(top / name, "text\n")
    sources = check_inputs([top], database=str(top / "db"))
    assert [s.docno for s in sources] == ["a.txt", "b/1.txt", "b/2.txt"]
    assert sources[0].notes and "left out 3 entries" in sources[0].notes[0]


def test_plain_text_docnos_and_a_lone_file(tmp_path):
    one = check_inputs([write(tmp_path / "notes" / "a.txt.gz", "hello\n")])
    assert one[0].docno == "a" and one[0].gzip
    two = check_inputs([write(tmp_path / "t" / "x" / "README.md", "a\n"),
                        write(tmp_path / "t" / "y" / "README.md", "b\n")])
    assert [s.docno for s in two] == ["x/README.md", "y/README.md"]


def test_runs_of_plain_text_files_are_one_source_and_lines_name_their_file(tmp_path):
    paths = [write(tmp_path / "1.txt", "a\n"), write(tmp_path / "2.txt", "b\n"),
             write(tmp_path / "3.jsonl", '{"id": 1}\n'), write(tmp_path / "4.txt", "c\n")]
    sources = grouped(check_inputs(paths))
    assert [(s.format, len(s.files)) for s in sources] == [("text", 2), ("jsonl", 0),
                                                           ("text", 1)]
    assert sources[0].size == 4 and sources[0].path.endswith("1.txt and 1 more files")
    assert where(sources[0], (1 << FILE_SHIFT) | 7) == f"{paths[1]}:7"
    assert where(sources[1], 3) == f"{paths[2]}:3" and where(sources[1], 0) == paths[2]


def test_what_cannot_be_read_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path / "bad.jsonl.gz", "")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all")
    table = write(tmp_path / "t.tsv", "docno\ttext\nd1\thello\n")
    for paths, options, message in [
            ([], {}, "no input files given"),
            ([tmp_path / "missing.jsonl"], {}, "no such file"),
            (["https://example.com/notes.html"], {}, "not URLs; save the page first"),
            ([tmp_path / "empty"], {}, "no files in this directory"),
            ([tmp_path / "bad.jsonl.gz"], {}, "not a readable gzip file"),
            ([table], {"format": "xml"}, "unknown format 'xml'"),
            ([table], {"id_field": "id"}, "--id-field 'id' names no column"),
            ([table], {"text_fields": ["body"]}, "--text-field 'body' names no column"),
            ([write(tmp_path / "n.txt", "x\n")], {"id_field": "id"}, "holds plain text")]:
        with pytest.raises(IngestError, match=message):
            check_inputs(paths, **options)
