"""The fast reading of flat JSONL records (ingest/flat.py, kernels/jsonl.py) against the
ordinary path (formats, records.prepare, batch.make, with_raws), its slow twin: the same
batches, cut at the same lines, with the same problems, documents, tokens, annotations
and stored bytes, for flat records and for every kind of line it leaves to the ordinary
path; and the same database from an ingest's reading process."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import annodb
from annodb.ingest import flat, ingest, stages
from annodb.ingest.inputs import check_inputs

from test_ingest import dump


def _chunks(path, fast: bool, batch_bytes: int, batch_size=None, id_field=None) -> list:
    """Each batch as stages.read and the reading process make it, in a comparable form;
    and how many the kernel read."""
    source = check_inputs([str(path)], id_field=id_field)[0]
    out, scanned = [], 0
    for pending, tell in stages.read(source, id_field, None, batch_bytes, batch_size,
                                     fast_sparse=() if fast else None):
        if isinstance(pending, flat.Scanned):
            scanned += 1
            chunk = stages.made(pending, tell)
        else:
            chunk = stages.encode(stages.make(*stages.prepare(pending), tell))
        b = chunk.batch
        made = None if b is None else (
            b.docnos, b.doc_tokens.tolist(), str(b.kinds.dtype), b.kinds.tolist(), b.names,
            b.ann_doc.tolist(), b.ann_name.tolist(), b.ann_p.tolist(), b.ann_q.tolist(),
            b.ann_v.tolist(), b.ann_names, b.doc_raws(), b.container, b.sparse)
        out.append((chunk.items, chunk.tell, made))
    return out, scanned


def _same(path, batch_bytes: int, batch_size=None, id_field=None) -> tuple[int, int]:
    """(batches the kernel read, batches with documents), the chunks being the same."""
    slow, none = _chunks(path, False, batch_bytes, batch_size, id_field)
    fast, scanned = _chunks(path, True, batch_bytes, batch_size, id_field)
    assert none == 0
    assert fast == slow
    return scanned, sum(made is not None for _, _, made in slow)


def _line(record: dict, ascii_only: bool = True) -> bytes:
    return json.dumps(record, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


FLAT = [_line({"docid": f"d{i}", "source": "web", "text": f"Word {i} and words\nmore {i}"})
        for i in range(40)]


def test_flat_records_are_read_by_the_kernel(tmp_path):
    """A file of flat records is read by the kernel, batch for batch as the ordinary path
    cuts it (by bytes and by records)."""
    path = tmp_path / "flat.jsonl"
    path.write_bytes(b"\n".join(FLAT) + b"\n")
    assert _same(path, 300) == (8, 8)
    assert _same(path, 1 << 20, batch_size=7) == (6, 6)
    assert _same(path, 1 << 20) == (1, 1)


ODD_LINES = {
    "a number": b'{"docid": "n1", "text": "x", "n": 3}',
    "a float": b'{"docid": "n2", "text": "x", "f": 1.5e3}',
    "nested": b'{"docid": "n3", "meta": {"a": "b c", "k": [1, "two"]}}',
    "null": b'{"docid": "n4", "text": null}',
    "true": b'{"docid": "n5", "text": true}',
    "blank": b"   ",
    "empty line": b"",
    "broken JSON": b'{"docid": "n6", "text": "x"',
    "not an object": b'["docid", "n7"]',
    "trailing junk": b'{"docid": "n8", "text": "x"} x',
    "two objects": b'{"docid": "n8"}{"docid": "n9"}',
    "an integer id": b'{"id": 12, "text": "twelve"}',
    "a big integer id": b'{"id": 123456789012345678901234567890, "text": "big"}',
    "a float id": b'{"id": 1.5, "text": "float"}',
    "no id": b'{"text": "no id here"}',
    "an empty docno": b'{"docid": "", "text": "x"}',
    "a long docno": b'{"docid": "' + b"x" * 600 + b'", "text": "x"}',
    "a docno of 511 bytes": b'{"docid": "' + b"y" * 511 + b'", "text": "x"}',
    "an escaped docno": b'{"docid": "a\\"b", "text": "x"}',
    "a duplicate key": b'{"docid": "n10", "text": "one", "text": "two"}',
    "a duplicate id": b'{"docid": "n11", "docid": "n12", "text": "x"}',
    "docid and id": b'{"id": "i1", "docid": "n13", "text": "x"}',
    "MS MARCO": b'{"docid": "m1", "url": "u", "title": "T", "headings": "H", "segment": "S"}',
    "segment alone": b'{"id": "s1", "segment": "seg text"}',
    "not UTF-8": b'{"docid": "n14", "text": "caf\xe9"}',
    "an overlong UTF-8": b'{"docid": "n15", "text": "\xc0\xaf"}',
    "an encoded surrogate": b'{"docid": "n16", "text": "\xed\xa0\x80"}',
    "a lone surrogate escape": b'{"docid": "n17", "text": "a \\ud800 b"}',
    "a lone low surrogate": b'{"docid": "n18", "text": "a \\udc00 b"}',
    "a surrogate pair": b'{"docid": "n19", "text": "smile \\ud83d\\ude00 ok"}',
    "escapes": b'{"docid": "n20", "text": "t\\tab\\nnl\\r\\b\\f\\/\\\\ \\u00e9\\u4e2d"}',
    "a NUL escape": b'{"docid": "n21", "text": "a\\u0000b"}',
    "a bad escape": b'{"docid": "n22", "text": "a\\xb"}',
    "a bad unicode escape": b'{"docid": "n23", "text": "a\\u12g4"}',
    "a raw control character": b'{"docid": "n24", "text": "a\x01b"}',
    "a raw tab": b'{"docid": "n25", "text": "a\tb"}',
    "DEL": b'{"docid": "n26", "text": "a\x7fb"}',
    "a non-ASCII key": '{"docid": "n27", "tête": "x"}'.encode(),
    "an escaped key": b'{"docid": "n28", "t\\u0065xt": "x"}',
    "an empty key": b'{"docid": "n29", "": "empty key"}',
    "a key with a colon": b'{"docid": "n30", "a:b": "x", ":x": "y", "x": "z"}',
    "whitespace": b' \t{ "docid" : "n31" ,\t"text" : "x" } \r',
    "a CRLF line": b'{"docid": "n32", "text": "x"}\r',
    "no text": b'{"docid": "n33"}',
    "empty texts": b'{"docid": "n34", "a": "", "b": "", "c": "words"}',
    "only separators": b'{"docid": "n35", "text": " ,.;! "}',
    "a form feed": b'{"docid": "n36", "text": "x"}\x0c',
    "a long text": b'{"docid": "n37", "text": "' + b"w\xc3\xa9 " * 30000 + b'"}',
    "non-ASCII text": '{"docid": "n38", "text": "Ἀθῆναι İstanbul ǅ ß ﬃ 中文 😀 a\u0301"}'.encode(),
    "a non-ASCII docno": '{"docid": "dé-中", "text": "x"}'.encode(),
    "a numeric-looking docno": b'{"docid": "007", "text": "x"}',
}


@pytest.mark.parametrize("kind", sorted(ODD_LINES))
def test_lines_left_to_the_ordinary_path(tmp_path, kind):
    """Whatever line the kernel does not read, and the flat records around it, give the
    same batches as the ordinary path (the batch holding the line read that way)."""
    odd = ODD_LINES[kind]
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"\n".join(FLAT[:10] + [odd] + FLAT[10:20] + [odd]) + b"\n")
    for batch_bytes in (1, 200, 1 << 20):
        _same(path, batch_bytes)
    _same(path, 1 << 20, batch_size=3)


def test_a_first_line_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(FLAT) + b"\n")
    assert _same(path, 300) == (7, 8)   # the first batch read the ordinary way


@pytest.mark.parametrize("end", [b"", b"\n", b'\n{"docid": "cut", "te', b'\n{"docid": "x"}'])
def test_the_end_of_the_file(tmp_path, end):
    """A last line without a line end (whole or cut off), or none."""
    path = tmp_path / "end.jsonl"
    path.write_bytes(b"\n".join(FLAT) + end)
    for batch_bytes in (1, 300, 1 << 20):
        _same(path, batch_bytes)


def test_an_id_field_chosen(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_bytes(b"\n".join(_line({"key": f"k{i}", "docid": f"d{i}", "text": "a b"})
                                for i in range(20)) + b"\n")
    assert _same(path, 200, id_field="key") == (4, 4)
    assert _same(path, 200, id_field="docid") == (4, 4)


def test_an_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    _same(path, 100)


_KEYS = st.sampled_from(["docid", "id", "docno", "_id", "text", "source", "title",
                         "segment", "a:b", "", "x"])
_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)


@st.composite
def _jsonl(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.sampled_from(sorted(ODD_LINES.values()))))
            continue
        record = {"docid": draw(st.text(min_size=0, max_size=6))} if kind > 1 else {}
        for _ in range(draw(st.integers(0, 4))):
            record[draw(_KEYS)] = draw(_TEXT)
        if kind == 9:
            record["n"] = draw(st.integers(-5, 5))
        lines.append(_line(record, ascii_only=draw(st.booleans())))
    end = draw(st.sampled_from([b"\n", b""]))
    return b"\n".join(lines) + end


@settings(max_examples=150)
@given(data=_jsonl(), batch_bytes=st.integers(1, 400), batch_size=st.sampled_from([None, 1, 3]))
def test_random_files_read_both_ways(tmp_path_factory, data, batch_bytes, batch_size):
    """Random files of flat records (any strings, escaped or not, lone surrogates too),
    other records and odd lines: the same batches either way."""
    path = tmp_path_factory.mktemp("random") / "r.jsonl"
    path.write_bytes(data)
    _same(path, batch_bytes, batch_size)


def test_the_reading_process_writes_the_same_database(tmp_path):
    """An ingest whose reading process reads flat records by the kernel (and the odd lines
    among them the ordinary way) writes what an ingest reading them in-process does."""
    path = tmp_path / "mixed.jsonl"
    lines = list(FLAT)
    for i, odd in enumerate(ODD_LINES.values()):
        lines.insert(3 * i % len(lines), odd)
    lines += FLAT[:5]   # (repeated docnos)
    path.write_bytes(b"\n".join(lines) + b"\n")
    results = []
    for parallel in (False, True):
        with annodb.open(tmp_path / f"{parallel}.db") as db:
            s = ingest(db, [str(path)], parallel=parallel, batch_size=7)
            s.seconds = 0.0
            results.append((s, dump(db)))
    assert results[0] == results[1]
    assert results[0][0].added > 40 and results[0][0].error_count > 10


def test_the_kernel_reads_without_python_objects_per_record():
    """scan_flat stops at the first line it cannot read and reports where."""
    from annodb import kernels
    data = b'{"docid": "a", "text": "x"}\n{"docid": "b", "n": 1}\n'
    scan = kernels.scan_flat(np.frombuffer(data, np.uint8), 0, len(data), True,
                             [b"docid"], [], 1 << 20, 0, 511)
    assert scan["docs"] == 1 and scan["why"] == kernels.OTHER
    assert scan["next"] == data.index(b"\n") + 1


def test_the_kernel_given_bytes_that_end_inside_a_line():
    """scan_flat given bytes cut anywhere (the input not ended there): the whole lines
    before the cut read as if they were all (the same records, or the same unreadable
    line reported), and MORE for the rest, even where the cut leaves a record that
    would read whole (`{...}` without its newline, or before its trailing blanks)."""
    from annodb import kernels
    data = (b'{"docid": "a", "text": "one two"}\n{"docid": "b", "text": "x"} \t\r\n'
            b'{"id": "c", "docid": "d", "t": "\\u00e9 y"}\n{"docid": "e"}\n'
            b'{"docid": "f", "n": 1}\n{"docid": "g", "text": "z"}\n')
    buf = np.frombuffer(data, np.uint8)
    keys = ("docs", "f_key", "f_cps", "u8", "docnos", "d_fields", "d_u8", "d_docno",
            "d_bytes", "next")

    def scan(end, eof):
        s = kernels.scan_flat(buf, 0, end, eof, [b"docid", b"id"], [], 1 << 20, 0, 511)
        return s["why"], [np.asarray(s[k]).tolist() for k in keys]

    for cut in range(len(data) + 1):
        whole = data.rfind(b"\n", 0, cut) + 1
        why, got = scan(cut, False)
        want_why, want = scan(whole, True)
        assert got == want, cut
        assert why == (kernels.OTHER if want_why == kernels.OTHER else kernels.MORE), cut
