"""What a new user meets first: `annodb ingest` and the other commands given the inputs
and paths a person actually has (a mistyped --db, an empty export, a file in another
encoding, a Ctrl-C), through the real command line and real files."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import annodb
from annodb_cli.main import annodb as cli

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
