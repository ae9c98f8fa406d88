"""Input formats: how each format becomes documents and problems ("line: message"). Which
files are read, in which format, and the plain-text docnos are decided in inputs.py.

    jsonl    `.jsonl`, `.ndjson`: one JSON object per line. The docno is the id field
             (chosen, or the first of docid, docno, id, _id); the text is the chosen text
             fields in order, or every string but the id (see records.py). A record with
             `docid` and `segment` is an MS MARCO V2.1 segment unless text fields are chosen.
    json     `.json`: JSON values one after another, pretty-printed or not: each object is a
             record, and so is each element of a top-level array. A file holding one object
             is one record, an array of objects a record per element, JSONL still works. The
             file is split into values by a small scanner and each decoded alone, so an
             array is never held whole. A value whose brackets do not close is a problem:
             at the top level reading resumes at the next line starting with `{` or `[`
             (so a bad line among JSON lines costs that line), inside an array the rest
             of the file is not read.
    msmarco  MS MARCO V2.1 segmented JSONL: docno `docid`, text fields title, headings,
             segment (in that order, each annotated `title:` and so on); url and the other
             scalars stay with the document, start_char and end_char also as values.
    csv      `.csv`: comma-separated with a header row (the csv module's Excel dialect,
             quoted cells may span lines; ';', tab or '|' when the header row has no
             comma outside quotes and holds those: inputs._csv_delimiter). Each row is a
             record whose fields are the columns (names stripped of spaces); every cell
             is text, as written: CSV has no types, and reading "007" or "02134" as
             numbers would change them (for values to filter on, give JSONL with
             numbers). The id column is the --id-field, else the
             first of docid, docno, id, _id in the header, else the first column.
    tsv      `.tsv`: tab-separated: a table like CSV, without quoting (a line is a row),
             when its first line is a header row (see inputs.py for how that is decided),
             else `docno<TAB>text` per line (the text may hold further tabs).
    trec     `.trec`, `.sgml`, or any file whose first non-blank line starts with `<DOC>`:
             `<DOC><DOCNO>x</DOCNO> ... </DOC>`; the text is everything inside DOC but the
             DOCNO element, tags removed, entities decoded, blank lines dropped.
    text     any other file: the whole file is one document (its docno: see inputs.py).
             Many files are read as one source (TextFiles), so they share batches.

A TSV or CSV line holding the file's last record with no line end after it may be cut off
(a file still being written): it is reported and not stored, so that a resume stores it
whole (a cut JSONL line is invalid JSON anyway).

Each reader is given its file's `source` (an inputs.Source: path, format, how it opens);
this module does not import inputs, which imports it.
"""

from __future__ import annotations

import csv
import gzip
import html
import io
import re
import zlib
from typing import Iterator, NamedTuple

import msgspec

from ..errors import IngestError
from ..records import ID_FIELDS, record_docno

FORMATS = ("jsonl", "json", "msmarco", "csv", "tsv", "trec", "text")
RECORD_FORMATS = ("jsonl", "json", "msmarco", "csv", "tsv")   # (tsv: with a header row)
MAX_DOCNO_BYTES = 511            # LMDB's largest key
MSMARCO_TEXT_FIELDS = ("title", "headings", "segment")
FILE_SHIFT = 32                  # a text group's line: file index << FILE_SHIFT | line
_READ_BYTES = 1 << 20            # a .json file is scanned this much at a time
CUT_LINE = ("no line end after the last line: it may be cut off (a file still being "
            "written?), so it is not stored; end the file with a newline to store it")


def Doc(line: int, docno: str, content, id_field: str | None,
        text_fields: list[str] | None, nbytes: int) -> tuple:
    """A document as a reader yields it: a plain tuple of these (content a str or a dict
    record), not a NamedTuple, whose construction cost more than decoding the record."""
    return line, docno, content, id_field, text_fields, nbytes


class Problem(NamedTuple):
    line: int
    message: str


def strip_gz(name: str) -> tuple[str, bool]:
    if name.lower().endswith(".gz"):
        return name[:-3], True
    return name, False


def open_binary(path: str, gz: bool) -> tuple[io.BufferedIOBase, io.BufferedIOBase]:
    """(reader, raw file): the raw file's position tells how many bytes were consumed."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    if not gz:
        return raw, raw
    return gzip.GzipFile(fileobj=raw, mode="rb"), raw


# ---------------------------------------------------------------- format readers
# Each reader yields Doc tuples and Problems, in file order.


def check_docno(docno: str) -> str | None:
    if not docno:
        return "empty docno"
    if len(docno) <= 100 and docno.isascii():  # (most: no encoding needed to know)
        return None
    try:
        size = len(docno.encode("utf-8"))
    except UnicodeEncodeError:
        return "docno is not valid Unicode (a lone surrogate)"
    if size > MAX_DOCNO_BYTES:
        return f"docno longer than {MAX_DOCNO_BYTES} bytes"
    return None


def _read_jsonl(reader, source, id_field, text_fields) -> Iterator:
    return jsonl_items(enumerate(reader, 1), source, id_field, text_fields)


def jsonl_items(lines, source, id_field, text_fields) -> Iterator:
    """The Docs and Problems of JSONL lines given as (line number, line) (see
    _read_jsonl; ingest/flat.py reads the lines its kernel does not this way)."""
    decode = msgspec.json.Decoder().decode
    msmarco = source.format == "msmarco"
    resolve = record_docno
    for lineno, line in lines:
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if not line.strip():
            continue
        try:
            record = decode(line)
        except msgspec.DecodeError as err:
            hint = ""
            if lineno == 1 and line.strip() in (b"[", b"{"):
                hint = " (a pretty-printed JSON file? name it .json or give --format json)"
            yield Problem(lineno, f"invalid JSON: {err}{hint}")
            continue
        except RecursionError:
            yield Problem(lineno, "invalid JSON: nested too deeply")
            continue
        if not isinstance(record, dict):
            yield Problem(lineno, f"not a JSON object but {_json_kind(record)}")
            continue
        fields, key = text_fields, id_field
        if text_fields is None and (msmarco or ("segment" in record and "docid" in record)):
            fields = list(MSMARCO_TEXT_FIELDS)
            key = id_field or "docid"
        try:
            key, docno = resolve(record, key)
        except IngestError as err:
            yield Problem(lineno, str(err))
            continue
        bad = check_docno(docno)
        if bad:
            yield Problem(lineno, bad)
            continue
        yield lineno, docno, record, key, fields, len(line)  # a Doc


def json_lines(reader) -> Iterator:
    """(line, value, bytes) of each line of a JSONL file, or a Problem (for checking)."""
    decode = msgspec.json.Decoder().decode
    for lineno, line in enumerate(reader, 1):
        if line.strip():
            try:
                yield lineno, decode(line.removeprefix(b"\xef\xbb\xbf")), len(line)
            except (msgspec.DecodeError, RecursionError):
                yield Problem(lineno, "invalid JSON")


def _json_kind(value) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def _record_docs(records, source, id_field, text_fields) -> Iterator:
    """Docs of the (line, record, bytes) items of `records` (Problems pass through)."""
    for item in records:
        if type(item) is not tuple:
            yield item
            continue
        line, record, nbytes = item
        if not isinstance(record, dict):
            yield Problem(line, f"not a JSON object but {_json_kind(record)}")
            continue
        fields, key = text_fields, id_field
        if text_fields is None and "segment" in record and "docid" in record:
            fields, key = list(MSMARCO_TEXT_FIELDS), id_field or "docid"   # (as in JSONL)
        try:
            key, docno = record_docno(record, key)
        except IngestError as err:
            yield Problem(line, str(err))
            continue
        bad = check_docno(docno)
        if bad:
            yield Problem(line, bad)
            continue
        yield line, docno, record, key, fields, nbytes  # a Doc


_OPENERS = {ord("{"): ord("}"), ord("["): ord("]")}
_SKIP = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+', re.S)  # text, whole strings
#                    (possessive: a string the buffer cuts is given up at once, not retried)
_SIGNIFICANT = re.compile(rb"[^ \t\r\n]")
_IN_ARRAY = re.compile(rb"[^ \t\r\n,]")            # (commas between elements)
_SCALAR_END = re.compile(rb'[ \t\r\n,\[\]{}"]')
_LINE_START = re.compile(rb"\n[\[{]")                 # a line starting a value


class JsonValues:
    """The values of a .json file one by one, as (line, value, bytes) or a Problem: the
    values of the top level, and instead of a top-level array its elements. A scanner that
    knows brackets and strings finds where each value ends, reading _READ_BYTES at a time;
    msgspec decodes the value (and finds whatever else is wrong in it). Only the value
    being scanned is held."""

    def __init__(self, reader, read_bytes: int = _READ_BYTES):
        self.reader = reader
        self.read_bytes = read_bytes
        self.buf = bytearray()
        self.line = 1        # the line at buf[self.counted]
        self.counted = 0
        self.eof = False

    def _more(self, keep: int) -> int:
        """Read on, dropping the bytes before buf[keep]; how many were dropped (the shift
        of every index), or -1 at the end of the input."""
        if self.eof:
            return -1
        data = self.reader.read(max(self.read_bytes, len(self.buf) - keep))  # (a big value:
        #                                                  doubling, so it is scanned O(n))
        if not data:
            self.eof = True
            return -1
        self.line += self.buf.count(b"\n", self.counted, keep)
        del self.buf[:keep]
        self.buf += data
        self.counted = 0
        return keep

    def _line_at(self, i: int) -> int:
        self.line += self.buf.count(b"\n", self.counted, i)
        self.counted = i
        return self.line

    def _find(self, pattern, i: int, keep: int) -> tuple[int, int]:
        """(index of the next match of the one-byte pattern from buf[i], bytes dropped on
        the way, keeping buf[keep:]); index -1 at the end of the input."""
        shift = 0
        while True:
            m = pattern.search(self.buf, i)
            if m is not None:
                return m.start(), shift
            i = len(self.buf)
            dropped = self._more(keep)
            if dropped < 0:
                return -1, shift
            i -= dropped
            keep -= dropped
            shift += dropped

    def __iter__(self):
        decode = msgspec.json.Decoder().decode
        pos = 0
        in_array, array_line = False, 0
        first = True
        while True:
            i, shift = self._find(_IN_ARRAY if in_array else _SIGNIFICANT, pos, pos)
            if i < 0:
                if in_array:
                    yield Problem(array_line, "the array is not closed at the end of the file "
                                  "(a file still being written?)")
                return
            if first:
                first = False
                if self.buf.startswith(b"\xef\xbb\xbf", i):
                    pos = i + 3
                    continue
            c = self.buf[i]
            if in_array and c == 0x5D:  # ]
                in_array, pos = False, i + 1
                continue
            if not in_array and c == 0x5B:  # [ a top-level array: its elements are values
                in_array, array_line, pos = True, self._line_at(i), i + 1
                continue
            line = self._line_at(i)
            (start, stop), broken = self._end(i)   # (where buf holds it now)
            if broken or stop < 0:
                rest = "; the rest of the file is not read" if broken else ""
                broken = broken or ("the file ends inside this value (a file still being "
                                    "written?)")
                # at the top level (JSON objects one per line, say), reading resumes at
                # the next line starting with { or [; inside an array it cannot
                resume = None if in_array else _LINE_START.search(self.buf, start)
                if resume is None:
                    yield Problem(line, f"invalid JSON: {broken}{rest}")
                    return
                pos = resume.start() + 1
                yield Problem(line, f"invalid JSON: {broken}; reading on from line "
                              f"{self._line_at(pos)}")
                continue
            pos = stop
            data = bytes(self.buf[start:stop])
            try:
                yield line, decode(data), len(data)
            except msgspec.DecodeError as err:
                yield Problem(line, f"invalid JSON: {err}")
            except RecursionError:
                yield Problem(line, "invalid JSON: nested too deeply")

    def _end(self, start: int) -> tuple[tuple[int, int], str | None]:
        """((start, end) of the value starting at buf[start], as buf is once it is found;
        end -1 if the input ends inside it), or a message when its brackets do not match."""
        opener = self.buf[start]
        if opener == 0x22:  # "
            end, start = self._string_end(start + 1, start)
            return (start, end), None
        if opener not in _OPENERS:  # a number, true, false, null, or something invalid
            i, shift = self._find(_SCALAR_END, start + 1, start)
            start -= shift
            return (start, len(self.buf) if i < 0 else i), None
        closers = bytearray([_OPENERS[opener]])
        i = start + 1
        while True:
            skipped = _SKIP.match(self.buf, i)
            assert skipped is not None              # (_SKIP matches the empty string too)
            j = skipped.end()                       # past all but brackets, strings whole
            if j == len(self.buf) or self.buf[j] == 0x22:   # the end, or a string it cuts
                dropped = self._more(start)
                if dropped < 0:
                    return (start, -1), None
                start -= dropped
                i = j - dropped
                continue
            c = self.buf[j]
            if c in _OPENERS:
                closers.append(_OPENERS[c])
                i = j + 1
            elif c == closers[-1]:
                closers.pop()
                i = j + 1
                if not closers:
                    return (start, i), None
            else:
                return (start, j), f"{chr(c)!r} where {chr(closers[-1])!r} was expected"

    def _string_end(self, i: int, start: int) -> tuple[int, int]:
        """(index after the string's closing quote, the value's start), the string's
        content starting at buf[i]; -1 if the input ends first."""
        while True:
            j = self.buf.find(b'"', i)
            if j < 0:
                i = len(self.buf)
                dropped = self._more(start)
                if dropped < 0:
                    return -1, start
                i -= dropped
                start -= dropped
                continue
            k = j - 1
            while self.buf[k] == 0x5C:  # backslashes before it: escaped if odd
                k -= 1
            if (j - 1 - k) % 2 == 0:
                return j + 1, start
            i = j + 1


def _read_json(reader, source, id_field, text_fields) -> Iterator:
    return _record_docs(JsonValues(reader), source, id_field, text_fields)


class _LineEnds:
    """The lines of a binary file as text (invalid UTF-8 kept as lone surrogates, found
    per row), noting whether the last one read had a line end and whether the reader
    asked past the last line (`exhausted`: a CSV row still open at the end of the file)."""

    def __init__(self, reader):
        self.lines = iter(reader)
        self.ended = True
        self.first = True
        self.exhausted = False

    def __iter__(self):
        return self

    def __next__(self) -> str:
        try:
            line = next(self.lines)
        except StopIteration:
            self.exhausted = True
            raise
        if self.first:
            self.first = False
            line = line.removeprefix(b"\xef\xbb\xbf")
        self.ended = line.endswith(b"\n")
        return line.decode("utf-8", "surrogateescape")


class Table:
    """The rows of a CSV file (or a TSV file with a header row) as (line, record, bytes),
    or Problems; `header` is its header row's column names (None for an empty file)."""

    def __init__(self, reader, source):
        csv.field_size_limit(max(csv.field_size_limit(), (1 << 31) - 1))  # documents are big
        self.lines = _LineEnds(reader)
        if source.format == "tsv":
            self.rows = csv.reader(self.lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            self.rows = csv.reader(self.lines, delimiter=source.delimiter)
        self.header = None
        self.before = 0      # lines before the next row
        for _line, row in self._rows():
            if isinstance(row, list) and row:
                self.header = [name.strip() for name in row]
                break

    def _rows(self):
        while True:
            try:
                row = next(self.rows)
            except StopIteration:
                return
            except csv.Error as err:
                row = f"invalid CSV: {err}"
            line, self.before = self.before + 1, self.rows.line_num
            yield line, row

    def __iter__(self):
        header = self.header
        if header is None:
            return
        width = len(header)
        for line, row in self._rows():
            if isinstance(row, str):
                yield Problem(line, row)
                continue
            if not row:
                continue
            if not self.lines.ended:
                yield Problem(line, CUT_LINE)
                continue
            if self.lines.exhausted:   # (a row that ended with its line end is returned
                # before the next line is asked for: this one's quoted field never closed)
                yield Problem(line, "a quoted field opened in this row is never closed: "
                              f"the row runs to the end of the file (line "
                              f"{self.rows.line_num}) and is not stored; close the quote")
                continue
            if len(row) > width:
                yield Problem(line, f"{len(row)} cells, but the header row has {width} "
                              "columns")
                continue
            joined = "\t".join(row)
            if not joined.isascii():
                try:
                    joined.encode("utf-8")
                except UnicodeEncodeError:
                    yield Problem(line, "invalid UTF-8 in this row")
                    continue
            yield line, dict(zip(header, row)), len(joined)


def table_id(header: list[str], id_field: str | None) -> str:
    """A table's id column: the one chosen, else the first of ID_FIELDS, else the first."""
    if id_field is not None:
        return id_field
    return next((k for k in ID_FIELDS if k in header), header[0])


def _read_table(reader, source, id_field, text_fields) -> Iterator:
    table = Table(reader, source)
    if table.header is not None:
        yield from _record_docs(table, source, table_id(table.header, id_field), text_fields)


def _decode_line(line: bytes) -> tuple[str | None, str | None]:
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return None, f"invalid UTF-8 at byte {err.start} of the line"


def _read_tsv(reader, source, id_field, text_fields) -> Iterator:
    if source.header:
        yield from _read_table(reader, source, id_field, text_fields)
        return
    for lineno, raw in enumerate(reader, 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        line, bad = _decode_line(raw)
        if bad:
            yield Problem(lineno, bad)
            continue
        assert line is not None   # (_decode_line gives a line or a message)
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        if not raw.endswith(b"\n"):
            yield Problem(lineno, CUT_LINE)
            continue
        docno, tab, text = line.partition("\t")
        if not tab:
            yield Problem(lineno, "no tab: expected docno<TAB>text")
            continue
        docno = docno.strip()
        bad = check_docno(docno)
        if bad:
            yield Problem(lineno, bad)
            continue
        yield Doc(lineno, docno, text, None, None, len(raw))


class TextFiles:
    """The documents of a plain-text source (a group of files or one), one per file, read
    one after another; tell() is the bytes of the group consumed. A file that cannot be
    read is a problem, and the next one is read."""

    def __init__(self, source):
        self.files = source.files or (source,)
        self.done = 0
        self.raw = None

    def tell(self) -> int:
        raw = self.raw
        return self.done + (raw.tell() if raw is not None and not raw.closed else 0)

    def __iter__(self):
        for k, f in enumerate(self.files):
            base = k << FILE_SHIFT
            try:
                reader, self.raw = open_binary(f.path, f.gzip)
                with self.raw, reader:
                    data = reader.read()
            except (gzip.BadGzipFile, zlib.error, EOFError, OSError) as err:
                yield Problem(base, f"cannot read: {getattr(err, 'strerror', None) or err}")
                data = None
            self.raw = None
            self.done += f.size
            if data is not None:
                yield _text_doc(data, f.docno, base)


def _text_doc(data: bytes, docno: str, base: int):
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return Problem(base | line, f"invalid UTF-8 at byte {err.start}")
    bad = check_docno(docno)
    if bad:
        return Problem(base | 1, bad)
    return Doc(base | 1, docno, text, None, None, len(data))


_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S)
_TAG = re.compile(r"<[^<>]*>")


def _trec_doc(body: str, line: int, nbytes: int):
    m = _DOCNO.search(body)
    if m is None:
        return Problem(line, "<DOC> without <DOCNO>")
    docno = m.group(1)
    bad = check_docno(docno)
    if bad:
        return Problem(line, bad)
    text = html.unescape(_TAG.sub("\n", body[:m.start()] + body[m.end():]))
    text = "\n".join(s for s in (part.strip() for part in text.splitlines()) if s)
    return Doc(line, docno, text, None, None, nbytes)


def _read_trec(reader, source, id_field, text_fields) -> Iterator:
    parts: list[str]
    inside, start_line, parts, nbytes, broken = False, 0, [], 0, None
    lineno = 0
    for lineno, raw in enumerate(reader, 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        line, bad = _decode_line(raw)
        if bad:
            if inside:
                broken = broken or Problem(lineno, bad)
                nbytes += len(raw)
            else:
                yield Problem(lineno, bad)
            continue
        assert line is not None   # (_decode_line gives a line or a message)
        pos = 0
        while True:
            if not inside:
                i = line.find("<DOC>", pos)
                if i < 0:
                    if line[pos:].strip():
                        yield Problem(lineno, "text outside <DOC> ... </DOC>")
                    break
                if line[pos:i].strip():
                    yield Problem(lineno, "text outside <DOC> ... </DOC>")
                inside, start_line, parts, nbytes, broken = True, lineno, [], 0, None
                pos = i + 5
            else:
                j = line.find("</DOC>", pos)
                k = line.find("<DOC>", pos)
                if 0 <= k and (j < 0 or k < j):
                    yield Problem(start_line, "<DOC> not closed before the next <DOC>")
                    inside = False
                    pos = k
                    continue
                if j < 0:
                    parts.append(line[pos:])
                    break
                parts.append(line[pos:j])
                inside = False
                pos = j + 6
                yield broken or _trec_doc("".join(parts), start_line, nbytes + len(raw))
        if inside:
            nbytes += len(raw)
    if inside:
        yield Problem(start_line, "<DOC> not closed at the end of the file")


READERS = {"jsonl": _read_jsonl, "msmarco": _read_jsonl, "json": _read_json,
           "csv": _read_table, "tsv": _read_tsv, "trec": _read_trec}
