"""Inputs: which files an ingest reads and in which format, checked before anything is
written (how each format is read: formats.py).

    sources = check_inputs(["notes/", "pages.jsonl.gz"])   # IngestError if one cannot be

The format follows the file name (`.gz` read transparently): `.jsonl`/`.ndjson` jsonl,
`.json` json, `.csv` csv, `.tsv` tsv, `.trec`/`.sgml` trec; any other file is trec if its
first non-blank line starts with `<DOC>`, else text; `format=` overrides it.

A directory stands for the regular files under it, recursively, in name order; names
starting with `.`, links to directories, special files and the database being written are
left out (a note counts them).

A TSV file is a table with a header row if its first line names the id column (the
--id-field, or one of docid, docno, id, _id), else `docno<TAB>text` lines. Which way
each was read is a note in the summary; an --id-field its first line does not name, or a
--text-field for docno<TAB>text lines, is an error.

A plain-text file's docno is its path relative to the common root of the plain-text
inputs, `/`-separated and without `.gz` (`tree/a/README.md` and `tree/b/README.md` are
`a/README.md` and `b/README.md`): the root is the deepest directory holding all of them,
a directory given counting as itself. A lone plain-text file given by name keeps its name
without its extension(s) (`notes/a.txt`, `a.txt.gz` -> `a`). Consecutive plain-text files
are grouped into one source (grouped()), read as one input.

The --text-field and --id-field options are checked against each input: against a
table's header row (which must name each column once), and a JSON input's first
RECORDS_CHECKED records (its first CHECKED_BYTES at least): a name that no record has is
an IngestError listing the fields seen. Inputs without fields (docno<TAB>text, TREC,
plain text) refuse both.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import zlib
from dataclasses import dataclass

from ..errors import IngestError
from ..paths import database_of_file, foreign_files
from .formats import (FILE_SHIFT, FORMATS, RECORD_FORMATS, JsonValues, Table, json_lines,
                      open_binary, strip_gz, table_id)
from ..records import ID_FIELDS

RECORDS_CHECKED = 1000           # records whose fields --text-field / --id-field must name
CHECKED_BYTES = 1 << 20
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv",
               ".tsv": "tsv", ".trec": "trec", ".sgml": "trec"}
_PEEK_BYTES = 1 << 16


@dataclass(frozen=True)
class Source:
    """One checked input: a file, or (files given) a run of plain-text files read as one."""

    path: str
    format: str
    gzip: bool
    size: int
    docno: str | None = None     # a plain-text file's docno
    header: bool = False         # a TSV file with a header row
    delimiter: str = ","         # a CSV file's (";" or "|" when its header row says so)
    notes: tuple = ()            # what the summary should say about how it was read
    files: tuple = ()            # a group's plain-text files (Sources)


def where(source: Source, line: int) -> str:
    """"file:line" of a line of `source` (just the file for line 0; a group's lines are
    the file's index << FILE_SHIFT | its line)."""
    path = source.path
    if source.files:
        path = source.files[line >> FILE_SHIFT].path
        line &= (1 << FILE_SHIFT) - 1
    return f"{path}:{line}" if line else path


def _first_line(head: bytes) -> bytes:
    for line in head.splitlines():
        if line.strip():
            return line.strip().lstrip(b"\xef\xbb\xbf")
    return b""


def _binary(path: str) -> bool:
    """A file of bytes, not text: a NUL byte in its first 8 KB (git's and grep's test; an
    image, a PDF, an archive, a database), unless it is UTF-16 text (see _utf16), which
    _source refuses saying so."""
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError:
        return False    # (_source says why it cannot be read)
    return b"\x00" in head and not _utf16(head)


def _utf16(head: bytes) -> bool:
    """UTF-16 text, by its byte-order mark (Windows' "Unicode" text, Excel's "Unicode
    text" export), which ingest does not read: its NUL bytes made a CSV's records vanish
    and a text file pass for binary."""
    return head.startswith((b"\xff\xfe", b"\xfe\xff"))


def _walk(top: str, database: str | None, format: str | None = None
          ) -> tuple[list[str], int, list[str]]:
    """The regular files under the directory `top`, in name order, how many entries were
    left out (hidden names, links to directories, special files, the database) and the
    binary files left out: those that would be read as plain text (no format given or
    named by their extension) and hold a NUL byte (see _binary)."""
    files, left_out, binary = [], 0, []

    def fail(err: OSError):
        raise IngestError(f"{err.filename}: cannot read the directory: "
                          f"{err.strerror or err}") from None

    for here, dirs, names in os.walk(top, onerror=fail):
        keep = sorted(d for d in dirs if not d.startswith(".")
                      and not os.path.islink(os.path.join(here, d))
                      and os.path.realpath(os.path.join(here, d)) != database)
        left_out += len(dirs) - len(keep)
        dirs[:] = keep
        for name in sorted(names):
            path = os.path.join(here, name)
            if name.startswith(".") or not os.path.isfile(path):
                left_out += 1
            elif format in (None, "text") and not name.endswith(".gz") and \
                    (format or _EXTENSIONS.get(os.path.splitext(name)[1].lower()) is None) \
                    and _binary(path):
                binary.append(path)
            else:
                files.append(path)
    return files, left_out, binary


def _check_database(path: str) -> None:
    """IngestError for a database path that no database can be made at: a file, or a
    folder holding other files (a mistyped --db, the home folder or a project's, would
    otherwise get LMDB's files among its own), or an empty path (the working directory)."""
    if not path.strip():
        raise IngestError(f"{path!r}: give a database directory (e.g. notes.db), not an "
                          "empty path")
    folder = database_of_file(path)
    if folder is not None:
        raise IngestError(f"{path}: a file of the database {folder}: give the folder")
    if os.path.exists(path) and not os.path.isdir(path):
        raise IngestError(f"{path}: a file, not a database directory; give a new or empty "
                          "directory, or a database")
    others = foreign_files(path)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise IngestError(f"{path}: a folder holding other files ({shown}), not an annodb "
                          "database; give a new or empty directory, or a database")


def check_inputs(paths, format: str | None = None, id_field: str | None = None,
                 text_fields: list[str] | None = None,
                 database: str | None = None) -> list[Source]:
    """Check that every input can be read, decide its format and check the options naming
    fields against it; IngestError otherwise. A directory stands for the files in it (the
    directory of `database`, the one ingested into, left out). Nothing is written: call
    this before opening the database."""
    if database is not None:
        _check_database(database)
        database = os.path.realpath(database)
    if format is not None and format not in FORMATS:
        raise IngestError(f"unknown format {format!r}: choose one of {', '.join(FORMATS)}")
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise IngestError("no input files given")
    found: list[tuple[str, str | None, str | None]] = []  # (file, its directory given, note)
    for path in paths:
        if not os.path.exists(path):
            if re.match(r"[a-z][a-z0-9+.-]*://", path, re.I):
                raise IngestError(f"{path}: ingest reads files and folders, not URLs; save the "
                                  "page first (e.g. curl -o page.html URL) and ingest the file")
            raise IngestError(f"{path}: no such file")
        if not os.path.isdir(path):
            found.append((path, None, None))
            continue
        files, left_out, binary = _walk(path, database, format)
        if not files:
            raise IngestError(f"{path}: no files in this directory" + (
                f" ({left_out} hidden or special entries left out)" if left_out else "") + (
                f" ({len(binary)} binary files left out, as {binary[0]})" if binary else ""))
        entries = "entries" if left_out != 1 else "entry"
        notes = [f"left out {left_out} {entries}: names starting with '.', links to "
                 "directories, special files, the database"] if left_out else []
        if binary:
            shown = ", ".join(binary[:3]) + (f" and {len(binary) - 3} more"
                                             if len(binary) > 3 else "")
            notes.append(f"left out {len(binary)} binary file{'s' * (len(binary) > 1)} "
                         f"(a NUL byte in the first 8 KB: not text): {shown}")
        note = f"{path}: " + "; ".join(notes) if notes else None
        found.extend((f, path, note if i == 0 else None) for i, f in enumerate(files))
    sources = [_source(path, format, id_field, text_fields, note)
               for path, _, note in found]
    return _name_texts(sources, [top for _, top, _ in found])


def _source(path: str, format, id_field, text_fields, note) -> Source:
    name, gz = strip_gz(os.path.basename(path))
    try:
        reader, raw = open_binary(path, gz)
        with raw, reader:
            head = reader.read(_PEEK_BYTES)
    except PermissionError:
        raise IngestError(f"{path}: permission denied") from None
    except (gzip.BadGzipFile, zlib.error, EOFError) as err:
        raise IngestError(f"{path}: not a readable gzip file ({err})") from None
    except OSError as err:
        raise IngestError(f"{path}: cannot read: {err.strerror or err}") from None
    fmt = format
    if fmt is None:
        fmt = _EXTENSIONS.get(os.path.splitext(name)[1].lower())
    if fmt is None:
        fmt = "trec" if _first_line(head).startswith(b"<DOC>") else "text"
    if _utf16(head):
        raise IngestError(f"{path}: UTF-16 text (it starts with a UTF-16 byte-order mark), "
                          "and ingest reads UTF-8: convert it first, e.g. iconv -f UTF-16 "
                          f"-t UTF-8 {path} > converted{os.path.splitext(name)[1]}")
    if fmt == "text" and b"\x00" in head[:8192]:
        raise IngestError(f"{path}: a binary file, not text (a NUL byte in its first 8 KB); "
                          "ingest reads JSONL, JSON, CSV, TSV, TREC and plain text")
    source = Source(path, fmt, gz, os.path.getsize(path), notes=(note,) if note else ())
    if fmt == "tsv":
        source = _tsv_source(source, head, id_field, text_fields)
    if fmt not in RECORD_FORMATS or (fmt == "tsv" and not source.header):
        if id_field or text_fields:
            option = "--id-field" if id_field else "--text-field"
            kind = ("docno<TAB>text lines" if fmt == "tsv" else
                    "TREC documents" if fmt == "trec" else "plain text")
            raise IngestError(f"{path}: {option} names a field of records, and this file "
                              f"holds {kind}, which have none: ingest it in a run of its own")
        return source
    if fmt == "csv":
        source = _csv_delimiter(source, head)
    if fmt in ("csv", "tsv"):
        return _check_table(source, id_field, text_fields)
    if id_field or text_fields:
        _check_record_fields(source, id_field, text_fields)
    return source


def _csv_delimiter(source: Source, head: bytes) -> Source:
    """A CSV file whose header row holds no comma outside quotes but semicolons (what a
    spreadsheet writes where the comma is the decimal mark), tabs or bars is read with
    that delimiter, and the summary says so."""
    line = _first_line(head).decode("utf-8", "replace")
    outside = re.sub(r'"[^"]*"', "", line)
    if "," in outside:
        return source
    counts = {d: outside.count(d) for d in ";\t|"}
    best = max(counts, key=lambda d: counts[d])
    if not counts[best]:
        return source
    shown = {";": "';'", "\t": "tabs", "|": "'|'"}[best]
    note = (f"{source.path}: read with {shown} between cells (its header row has no comma "
            "and holds those)")
    return dataclasses.replace(source, delimiter=best, notes=source.notes + (note,))


def _tsv_source(source: Source, head: bytes, id_field, text_fields) -> Source:
    cells = [c.strip() for c in _first_line(head).decode("utf-8", "replace").split("\t")]
    if id_field is not None:
        if id_field in cells:
            return dataclasses.replace(source, header=True)
        shown = ", ".join(cells[:10]) + (", ..." if len(cells) > 10 else "")
        raise IngestError(f"{source.path}: --id-field {id_field!r} names no column of its "
                          f"first line ({shown}); a TSV file is a table when its first line "
                          "is a header row naming the id column, else docno<TAB>text lines")
    key = next((k for k in ID_FIELDS if k in cells), None)
    if key is not None:
        note = (f"{source.path}: read as a table: its first line is a header row naming "
                f"the id column {key!r}")
        return dataclasses.replace(source, header=True, notes=source.notes + (note,))
    note = (f"{source.path}: read as docno<TAB>text lines (its first line names no id "
            "column; for a table with a header row, give --id-field COLUMN)")
    return dataclasses.replace(source, notes=source.notes + (note,))


def _check_table(source: Source, id_field, text_fields) -> Source:
    """The table's header row must name each column once, and the options' fields."""
    reader, raw = open_binary(source.path, source.gzip)
    with raw, reader:
        header = Table(reader, source).header
    if header is None:
        return source
    for i, name in enumerate(header):
        if not name:
            raise IngestError(f"{source.path}: column {i + 1} of the header row has no name")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise IngestError(f"{source.path}: the header row is not valid UTF-8") from None
        if header.index(name) != i:
            raise IngestError(f"{source.path}: the header row names the column {name!r} "
                              "twice")
    _check_names(source, id_field, text_fields, header, "column of its header row",
                 "columns")
    key = table_id(header, id_field)
    if id_field is None and key not in ID_FIELDS:
        note = (f"{source.path}: its header row names none of {', '.join(ID_FIELDS)}: the "
                f"first column, {key!r}, is the docno (choose another with --id-field)")
        source = dataclasses.replace(source, notes=source.notes + (note,))
    return source


def _check_record_fields(source: Source, id_field, text_fields) -> None:
    seen: dict = {}
    count = 0
    reader, raw = open_binary(source.path, source.gzip)
    values = JsonValues if source.format == "json" else json_lines
    with raw, reader:
        try:
            for item in values(reader):
                if type(item) is tuple and type(item[1]) is dict:
                    seen.update(dict.fromkeys(item[1]))
                    count += 1
                if count >= RECORDS_CHECKED or raw.tell() >= CHECKED_BYTES:
                    break
        except (gzip.BadGzipFile, zlib.error, EOFError, OSError):
            pass  # reported when it is read
    if seen:
        _check_names(source, id_field, text_fields, seen,
                     f"field of its first {count} records", "fields seen")


def _check_names(source: Source, id_field, text_fields, names, what: str, listed: str):
    for option, name in [("--id-field", id_field)] + [("--text-field", t)
                                                       for t in text_fields or ()]:
        if name is not None and name not in names:
            shown = list(names)[:30]
            raise IngestError(f"{source.path}: {option} {name!r} names no {what} ({listed}: "
                              f"{', '.join(shown)}{', ...' if len(names) > 30 else ''})")


def _name_texts(sources: list[Source], tops: list[str | None]) -> list[Source]:
    """Give each plain-text source its docno (see the module's docstring)."""
    texts = [i for i, s in enumerate(sources) if s.format == "text"]
    if len(texts) == 1 and tops[texts[0]] is None:
        i = texts[0]
        name, _ = strip_gz(os.path.basename(sources[i].path))
        docno = name.split(".", 1)[0] if not name.startswith(".") else name
        sources[i] = dataclasses.replace(sources[i], docno=docno)
        return sources
    if not texts:
        return sources
    dirs = [os.path.abspath(tops[i] or os.path.dirname(os.path.abspath(sources[i].path)))
            for i in texts]
    root = os.path.commonpath(dirs)
    for i in texts:
        relative = os.path.relpath(os.path.abspath(sources[i].path), root)
        docno = strip_gz(relative.replace(os.sep, "/"))[0]
        sources[i] = dataclasses.replace(sources[i], docno=docno)
    return sources


def grouped(sources: list[Source]) -> list[Source]:
    """The sources with each run of consecutive plain-text files made one source, read as
    one input (so many small files make few batches, not a commit each)."""
    out: list[Source] = []
    run: list[Source] = []
    for source in sources + [None]:
        if source is not None and source.format == "text":
            run.append(source)
            continue
        if run:
            more = f" and {len(run) - 1} more files" if len(run) > 1 else ""
            out.append(Source(run[0].path + more, "text", False, sum(s.size for s in run),
                              notes=sum((s.notes for s in run), ()), files=tuple(run)))
            run = []
        if source is not None:
            out.append(source)
    return out
