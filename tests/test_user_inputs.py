"""What a new user meets first: `annodb ingest` and the other commands given the inputs
and paths a person actually has (a mistyped --db, an empty export, a file in another
encoding, a Ctrl-C), through the real command line and real files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import annodb
from annodb_cli.main import annodb as cli
from sigint import interruptible
from test_cli import _committed, console_script

DATA = Path(__file__).parent / "data"


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_error_line(result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("annodb: error: "), lines[0]
    return lines[0]


def test_ingest_into_a_folder_of_other_files_is_refused_and_writes_nothing(tmp_path):
    """A --db naming a folder that holds other files (a project, the home folder) is
    refused with one line naming what it holds, before anything is written into it; a
    --db naming a file is refused too. A new or empty folder, or a database, is ingested
    into as before."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("my project\n")
    for extra in ([], ["--shards", "2"], ["--fold-diacritics"]):
        line = one_error_line(invoke("ingest", "--db", folder, *extra, DATA / "sample.jsonl"))
        assert "project: a folder holding other files (README.md)" in line, line
        assert sorted(p.name for p in folder.iterdir()) == ["README.md"]
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x\n")
    line = one_error_line(invoke("ingest", "--db", a_file, DATA / "sample.jsonl"))
    assert "notes.txt: a file, not a database directory" in line, line
    assert a_file.read_text() == "x\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    for path in (empty, empty):      # a new folder, then the database made in it
        result = invoke("ingest", "--db", path, "--json", DATA / "sample.jsonl")
        assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["present"] > 0
    with annodb.open(empty, readonly=True) as db:
        assert db.stats().documents > 0


def test_ctrl_c_during_a_sharded_ingest_says_what_the_shards_committed(tmp_path):
    """A real SIGINT to `annodb ingest --shards 2` (the router; its writers in the same
    process group too, as a terminal's Ctrl-C sends it) once the shards hold documents:
    exit 130 and a line saying how many documents were committed, exactly what the
    collection holds, never "interrupted before anything was committed"; the summary names
    the file it stopped in; the same command again adds exactly the rest."""
    n = 200_000
    src = tmp_path / "big.jsonl"
    src.write_text("".join(f'{{"docid": "d{i}", "text": "line {i} of many {i * 7919 % 10007}"}}\n'
                           for i in range(n)))
    path = tmp_path / "big.shards"
    command = console_script() + ["ingest", "--db", str(path), "--shards", "2",
                                  "--batch-size", "1000", str(src)]
    child = interruptible(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while _committed(path) < 2000:
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert time.monotonic() < deadline, "no batch committed within 120 s"
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGINT)
    err = child.communicate(timeout=60)[1]
    assert child.returncode == 130, err
    said = re.search(r"^annodb: interrupted: ([\d,]+) documents were committed .*run the "
                     r"same command again to resume", err, re.M)
    assert said, err
    held = _committed(path)
    assert int(said.group(1).replace(",", "")) == held and 2000 <= held < n
    last = err.splitlines()[-1]
    assert last.startswith(f"annodb: ingest: added {held:,}, skipped 0") and \
        f"; 0 files read whole, stopped in {src}, " in last, err
    again = subprocess.run(command + ["--json"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["added"], summary["present"], summary["skipped"]) == (n - held, held, 0)
    assert summary["files"] == 1 and summary["stopped_in"] == ""


def test_mcp_k_and_n_out_of_range_are_errors_never_a_silent_cut(tmp_path):
    """Over the real mcp client: a search's k or a list's n below 0 or above 1000 is an
    error naming the range (before, k = -1 came back as no results and k = 5000 as at
    most 1000, without a word); 0 and 1000 are served."""
    import anyio
    from mcp import Client
    from test_memory import _server_params

    path = str(tmp_path / "mcp.db")
    with annodb.Memory(path) as m:
        m.remember_many([f"note {i} about seats" for i in range(3)])

    async def session():
        async with Client(_server_params(path)) as client:
            for tool, name, value in (("search", "k", -1), ("search", "k", 5000),
                                      ("list", "n", -1), ("list", "n", 1001)):
                args = {name: value, "query": "seats"} if tool == "search" else {name: value}
                result = await client.call_tool(tool, args)
                assert result.is_error, (tool, value, result.structured_content)
                assert f"{name} must be between 0 and 1000, not {value}" in \
                    result.content[0].text
            for tool, args in (("search", {"query": "seats", "k": 1000}),
                               ("list", {"n": 1000})):
                result = await client.call_tool(tool, args)
                assert not result.is_error and len(result.structured_content["results"]) == 3

    anyio.run(session)


def test_an_input_holding_no_record_is_noted(tmp_path):
    """An empty export (an empty JSONL, JSON array or CSV, a CSV with its header row
    alone) is named in a note, into a database and into a collection alike: it used to
    pass as "1 file, added 0" with nothing said."""
    inputs = {"empty.jsonl": "", "none.json": "[]", "header.csv": "id,text\n",
              "empty.csv": ""}
    for name, text in inputs.items():
        (tmp_path / name).write_text(text)
    for db, extra in (("one.db", []), ("many.shards", ["--shards", "2"])):
        for name in inputs:
            result = invoke("ingest", "--db", tmp_path / db, *extra, tmp_path / name)
            assert result.exit_code == 0, result.output
            assert f"annodb: note: {tmp_path / name}: no records in it\n" in result.stderr, \
                (db, result.stderr)
    result = invoke("ingest", "--db", tmp_path / "one.db", DATA / "sample.jsonl")
    assert "no records" not in result.stderr


def test_utf16_text_is_refused_saying_how_to_convert_it(tmp_path):
    """A UTF-16 file (Windows' "Unicode" text; Excel's "Unicode text" export), as a CSV,
    a JSONL or plain text, named or in a folder, is refused before anything is written,
    with one line naming UTF-16 and the conversion: its CSV had passed as "added 0"
    with exit 0 (its first column named '\\x00') and its text file as "binary"."""
    table = "id,text\r\nu1,hello world\r\nu2,café\r\n"
    (tmp_path / "export.csv").write_bytes(table.encode("utf-16"))
    (tmp_path / "rec.jsonl").write_bytes('{"id": "a", "text": "x"}\n'.encode("utf-16"))
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("plain note\n")
    (folder / "win.txt").write_bytes("a note from Notepad\r\n".encode("utf-16"))
    db = tmp_path / "u.db"
    for given, named in ((tmp_path / "export.csv", "export.csv"),
                         (tmp_path / "rec.jsonl", "rec.jsonl"), (folder, "win.txt")):
        line = one_error_line(invoke("ingest", "--db", db, given))
        assert f"{named}: UTF-16 text" in line and "iconv -f UTF-16 -t UTF-8" in line, line
    assert not (db / "data.mdb").exists()
    (tmp_path / "export.csv").write_bytes(table.encode("utf-16").decode("utf-16")
                                          .encode("utf-8"))
    result = invoke("ingest", "--db", db, tmp_path / "export.csv")
    assert result.exit_code == 0 and "added 2," in result.stderr, result.output


def test_a_latin1_file_is_skipped_with_a_note_on_converting_it(tmp_path):
    """A Latin-1 text file or CSV row is skipped as invalid UTF-8 (exit 1, nothing
    stored from it) and one note says that ingest reads UTF-8 and how to convert such a
    file; a clean ingest has no such note."""
    (tmp_path / "latin1.txt").write_bytes("Café crème brûlée\n".encode("latin-1"))
    (tmp_path / "latin1.csv").write_bytes("id,text\nl1,café\nl2,ok\n".encode("latin-1"))
    db = tmp_path / "l.db"
    for name, where in (("latin1.txt", "latin1.txt:1: invalid UTF-8 at byte 3"),
                        ("latin1.csv", "latin1.csv:2: invalid UTF-8 in this row")):
        result = invoke("ingest", "--db", db, tmp_path / name)
        assert result.exit_code == 1 and where in result.stderr, result.stderr
        notes = [x for x in result.stderr.splitlines() if "ingest reads UTF-8" in x]
        assert len(notes) == 1 and "iconv -f WINDOWS-1252 -t UTF-8" in notes[0], notes
    result = invoke("ingest", "--db", db, DATA / "sample.jsonl")
    assert result.exit_code == 0 and "UTF-8" not in result.stderr


def test_a_csv_quote_never_closed_is_reported_not_swallowing_the_rest(tmp_path):
    """A CSV row whose quoted field is never closed (a stray quote) is reported with its
    line and skipped, not stored holding every later row as its text (it was: "added 2",
    exit 0, the rows after it gone into one field); rows before it and a closed quoted
    field spanning lines, also as the last row, are stored as they were."""
    good = 'id,text\nq1,"line one\nline two"\nq2,"He said ""hi"""\n'
    (tmp_path / "good.csv").write_text(good + 'q3,"last, over\ntwo lines"\n')
    (tmp_path / "stray.csv").write_text('id,text\nr1,fine\nr2,"a stray quote\n'
                                        'r3,lost\nr4,lost too\n')
    db = tmp_path / "q.db"
    result = invoke("ingest", "--db", db, "--json", tmp_path / "good.csv")
    assert result.exit_code == 0 and json.loads(result.stdout)["added"] == 3, result.output
    result = invoke("ingest", "--db", db, "--json", tmp_path / "stray.csv")
    assert result.exit_code == 1, result.output
    assert "stray.csv:3: a quoted field opened in this row is never closed: the row runs " \
           "to the end of the file (line 5)" in result.stderr, result.stderr
    assert json.loads(result.stdout)["added"] == 1
    with annodb.open(db, readonly=True) as opened, opened.read() as r:
        assert r.document("q1").text == "line one\nline two"
        assert r.document("q3").text == "last, over\ntwo lines"
        assert sorted(d.docno for d in r.documents()) == ["q1", "q2", "q3", "r1"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_server_stopped_while_its_workers_start_says_no_traceback(tmp_path):
    """`annodb serve` sent SIGTERM as soon as its worker processes exist (before they are
    ready): the workers end without a word; they used to print a BrokenPipeError
    traceback each, onto the terminal the server had left."""
    db = tmp_path / "s.db"
    assert invoke("ingest", "--db", db, DATA / "sample.jsonl").exit_code == 0
    err = tmp_path / "serve.err"
    with open(err, "w") as sink:
        server = subprocess.Popen(console_script() + ["serve", "--db", str(db),
                                                      "--processes", "2"],
                                  stderr=sink, env=dict(os.environ, ANNODB_WARM="0"))
    deadline = time.monotonic() + 60
    while len(workers := _children(server.pid)) < 2:
        assert server.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.01)
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    while any(_running(pid) for pid in workers):
        assert time.monotonic() < deadline + 60, "a worker outlived its server by a minute"
        time.sleep(0.05)
    assert "Traceback" not in err.read_text(), err.read_text()


def test_serve_fields_no_document_has_are_refused_at_start(tmp_path):
    """`annodb serve --fields` naming a field no document has (a typo) is refused before
    listening, with one line listing the fields there are; every `document` request had
    answered with the whole text instead, without a word. Short names with or without
    the colon are served; a database without documents yet is not checked."""
    from annodb.server import Server, ServerError
    from server_client import Client

    db = tmp_path / "f.db"
    assert invoke("ingest", "--db", db, DATA / "sample.jsonl").exit_code == 0
    with annodb.open(db, readonly=True) as opened, opened.read() as r:
        have = sorted(k for k, (docs, _) in r.field_statistics().items() if docs)
        first = next(iter(r.documents()))
    with pytest.raises(ServerError, match="no document has the field 'body'"):
        Server(str(db), fields=["body"])
    line = one_error_line(invoke("serve", "--db", db, "--fields", f"{have[0]},tilte:"))
    assert line == ("annodb: error: fields: no document has the field 'tilte:'; the fields "
                    f"are: {', '.join(have)}"), line
    name = have[0].rstrip(":")
    with Server(str(db), fields=[name], processes=1).start() as server, \
            Client(server.port) as client:
        shown = client(op="document", docno=first.docno)["document"]
        assert shown == first.display_text([name])
    empty = tmp_path / "empty.db"
    annodb.open(empty).close()
    Server(str(empty), fields=["tilte:"], processes=1).shutdown()


def test_annotate_refuses_a_feature_name_no_query_can_name(tmp_path):
    """`annodb annotate` with a feature name a query cannot name (a space, as in
    "judgment: t1"; a parenthesis or quote; ':' alone, every document's own feature) is a
    usage error (exit 2) and writes nothing; it used to be stored, and a query for
    judgment:t1 then found nothing, without a word. So is a value that is not finite
    (inf was stored; the server refuses it). judgment:t1 and a plain word are annotated
    as before."""
    db = tmp_path / "a.db"
    assert invoke("ingest", "--db", db, DATA / "sample.jsonl").exit_code == 0
    with annodb.open(db, readonly=True) as opened, opened.read() as r:
        docno = next(iter(r.documents())).docno
        features = r.stats().features
    for bad in ("judgment: t1", "a(b:", 'say"x":', ":"):
        line = one_error_line(invoke("annotate", "--db", db, bad, docno, "--value", 3), 2)
        assert "is not a feature name a query can use" in line, line
    with annodb.open(db, readonly=True) as opened:
        assert opened.stats().features == features
    for value in ("inf", "-inf", "nan"):       # (as the server refuses them)
        line = one_error_line(invoke("annotate", "--db", db, "judgment:t1", docno,
                                     "--value", value), 2)
        assert "is not a finite number" in line, line
    with annodb.open(db, readonly=True) as opened:
        assert opened.stats().features == features
    for good in ("judgment:t1", "relevant"):
        assert invoke("annotate", "--db", db, good, docno, "--value", 3).exit_code == 0
    assert invoke("count", "--db", db, "(>= judgment:t1 3)").stdout.strip() == "1"


def test_an_empty_database_path_is_a_usage_error_never_the_working_directory(
        tmp_path, monkeypatch):
    """`--db ""` (an unset shell variable: --db "$DB"), before or after the command, and an
    empty DEST of compact or split, are usage errors naming the option, and nothing is
    written into the working directory: `ingest --db ""` had made a database among its
    files, and compact "" said only "No such file or directory"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes\n")
    db = tmp_path / "x.db"
    assert invoke("ingest", "--db", db, DATA / "sample.jsonl").exit_code == 0
    for args, named in ((["ingest", "--db", "", DATA / "sample.jsonl"], "--db"),
                        (["--db", "", "stats"], "--db"), (["query", "--db", "", "a"], "--db"),
                        (["compact", "--db", db, ""], "DEST"),
                        (["split", "--db", db, "", "--shards", "2"], "DEST")):
        line = one_error_line(invoke(*args), 2)
        assert f"Invalid value for {named}: '': give a" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "x.db"]
    with pytest.raises(annodb.AnnodbError, match="not an empty path"):
        from annodb.ingest import ingest
        ingest("", [DATA / "sample.jsonl"])


def test_counts_of_one_are_singular(tmp_path):
    """A count of one reads "1 entry", "1 repeated docno", "1 token" (in the ingest
    summary and `show`), not "1 entries", "1 repeated docnos", "1 tokens"."""
    tree = tmp_path / "tree"
    (tree / ".hidden").mkdir(parents=True)
    (tree / "word.txt").write_text("hello\n")
    (tmp_path / "dup.jsonl").write_text('{"id": "a", "text": "one"}\n'
                                        '{"id": "a", "text": "two"}\n')
    db = tmp_path / "g.db"
    result = invoke("ingest", "--db", db, tree)
    assert "tree: left out 1 entry: names" in result.stderr and \
        "; 1 file, 1 token in " in result.stderr, result.stderr
    result = invoke("ingest", "--db", db, tmp_path / "dup.jsonl")
    assert "(1 repeated docno), " in result.stderr and ", 1 token in " in result.stderr
    assert "range: 0..0 (1 token)" in invoke("show", "--db", db, "word.txt").stdout


def test_documents_left_as_they_were_are_said_with_how_to_update_them(tmp_path):
    """Ingesting a folder of notes again after editing one: the documents already there
    are left as stored (a rerun resumes), and a note says so and that --replace updates
    them, where the edit had been passed over with only "already present 2"; with
    --replace the edit is stored and there is no such note."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("buy milk\n")
    (notes / "b.md").write_text("call the plumber\n")
    db = tmp_path / "n.db"
    assert "left as stored" not in invoke("ingest", "--db", db, notes).stderr
    (notes / "a.md").write_text("buy oat milk\n")
    result = invoke("ingest", "--db", db, notes)
    assert result.exit_code == 0 and "annodb: note: 2 documents were in the database " \
        "already (by docno) and left as stored, even where the input differs; --replace " \
        "updates them\n" in result.stderr, result.stderr
    result = invoke("ingest", "--db", db, "--replace", notes)
    assert result.exit_code == 0 and "left as stored" not in result.stderr
    assert invoke("count", "--db", db, "oat").stdout.strip() == "1"


def test_count_json_carries_the_warnings(tmp_path):
    """`count --json` gives a script the lenient repairs and the terms naming no feature
    in "warnings", as query's batch JSON and the server do; they were on stderr only, so
    a script saw a count of a query other than the one it wrote without a word."""
    db = tmp_path / "c.db"
    assert invoke("ingest", "--db", db, DATA / "sample.jsonl").exit_code == 0
    row = json.loads(invoke("count", "--db", db, "--json", "(^ the light").stdout)
    assert row["warnings"] == ["offset 12: added 1 missing ')' at the end of the query"], row
    row = json.loads(invoke("count", "--db", db, "--json", "TODO:").stdout)
    assert len(row["warnings"]) == 1 and "'TODO:' names no feature" in row["warnings"][0]
    assert json.loads(invoke("count", "--db", db, "--json", "light").stdout)["warnings"] == []


def test_a_file_of_a_database_given_as_the_database_names_its_folder(tmp_path):
    """`--db a.db/data.mdb` (or lock.mdb: what a file manager or tab completion gives)
    is one line naming the folder that is the database; it said "no annodb database here
    (create one with `annodb ingest`)", and ingest would have failed the same way."""
    db = tmp_path / "a.db"
    assert invoke("ingest", "--db", db, DATA / "sample.jsonl").exit_code == 0
    for name in ("data.mdb", "lock.mdb"):
        for args in (("stats",), ("query", "light"), ("ingest", DATA / "sample.jsonl")):
            line = one_error_line(invoke(*args, "--db", db / name))
            assert f"a file of the database {db}: give the folder" in line, line


def test_a_database_made_while_its_folder_is_looked_at_is_not_other_files(tmp_path,
                                                                           monkeypatch):
    """A database another process makes between the look for its data.mdb and the
    listing of the folder (three ingests of one --db at once) is not "a folder holding
    other files (data.mdb)": a database's and a collection's own files never count."""
    from annodb import paths
    db = tmp_path / "a.db"
    db.mkdir()
    for name in ("lock.mdb", "data.mdb", paths.CREATING):
        (db / name).write_bytes(b"")
    real = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if str(p).endswith(
        ("data.mdb", paths.CREATING)) else real(p))
    monkeypatch.setattr(paths, "is_collection", lambda p: False)   # (not yet, as it looked)
    assert paths.foreign_files(db) == []
    (db / "notes.txt").write_text("mine")
    assert paths.foreign_files(db) == ["notes.txt"]
