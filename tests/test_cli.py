"""The `annodb` command line: every command through click's runner, and the installed
console script in a real subprocess."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import click
from click.testing import CliRunner

import annodb
from annodb import storage
from annodb.shards import routing
from annodb_cli.main import _Bar, annodb as cli
from sigint import interruptible

DATA = Path(__file__).parent / "data"
EXAMPLE = Path(__file__).parent.parent / "examples" / "bible-sample.jsonl"


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "cli.db"
    result = invoke("ingest", "--db", path, DATA / "sample.jsonl")
    assert result.exit_code == 0, result.output
    return path


def one_error_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("annodb: error: ")
    assert "Traceback" not in result.output
    return lines[0]


# ---------------------------------------------------------------- commands


def test_ingest_prints_a_summary_line_and_json(tmp_path):
    path = tmp_path / "i.db"
    result = invoke("ingest", "--db", path, "--json", DATA / "sample.jsonl", DATA / "sample.tsv")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["files"], summary["added"], summary["error_count"]) == (2, 7, 0)
    assert result.stderr.splitlines()[-1].startswith("annodb: ingest: added 7, skipped 0")
    again = invoke("ingest", "--db", path, "--json", DATA / "sample.jsonl")
    assert again.exit_code == 0                           # a rerun resumes: nothing lost
    assert (json.loads(again.stdout)["present"], json.loads(again.stdout)["skipped"]) == (4, 0)


def test_ingest_options(tmp_path):
    path = tmp_path / "o.db"
    result = invoke("ingest", "--db", path, "--id-field", "key", "--text-field", "body",
                    "--text-field", "title", "--batch-size", "1", DATA / "records.jsonl")
    assert result.exit_code == 0, result.output
    with annodb.open(path) as db, db.read() as r:
        assert r.document("r2").text == "Bats catch moths above the pond.\nBats at dusk"
    result = invoke("ingest", "--db", path, "--format", "tsv", DATA / "sample.tsv")
    assert result.exit_code == 0 and "added 3" in result.stderr


def test_ingest_replace(db, tmp_path):
    changed = tmp_path / "c.jsonl"
    changed.write_text('{"docid": "ch1-v1", "text": "replaced"}\n')
    result = invoke("ingest", "--db", db, "--replace", changed)
    assert "replaced 1" in result.stderr
    assert json.loads(invoke("show", "--db", db, "--json", "ch1-v1").stdout)["text"] == "replaced"


def test_ingest_reports_malformed_lines_and_strict_stops(tmp_path):
    path = tmp_path / "m.db"
    bad = DATA / "malformed.jsonl"
    result = invoke("ingest", "--db", path, bad)
    assert result.exit_code == 1                          # records were skipped
    assert f"annodb: skipped {bad}:2: invalid JSON" in result.stderr
    assert f"annodb: {bad}:6: duplicate docno 'g1' skipped (the first is kept)" in result.stderr
    *_, error, last = result.stderr.splitlines()
    assert error == ("annodb: error: 5 records were skipped (listed above); what was stored "
                     "stays; fix the input and run the same command again to add the rest (or "
                     "give --skip-bad to accept skipping them)")
    assert last.startswith("annodb: ingest: added 2, skipped 5 (4 malformed or unreadable, "
                           "1 repeated docno), already present 0")
    quiet = invoke("ingest", "--db", tmp_path / "q.db", "--quiet", bad)
    assert len(quiet.stderr.splitlines()) == 2 and quiet.exit_code == 1
    strict = invoke("ingest", "--db", tmp_path / "s.db", "--strict", bad)
    assert f"{bad}:2: invalid JSON" in one_error_line(strict, 1)


def test_skip_bad_accepts_skipped_records_but_never_a_run_that_stored_nothing(tmp_path):
    bad = DATA / "malformed.jsonl"
    result = invoke("ingest", "--db", tmp_path / "a.db", "--skip-bad", bad)
    assert result.exit_code == 0
    assert f"annodb: skipped {bad}:2: invalid JSON" in result.stderr     # still reported
    assert result.stderr.splitlines()[-1].startswith("annodb: ingest: added 2, skipped 5")
    worse = tmp_path / "worse.jsonl"
    worse.write_text("not json\n[1]\n")
    result = invoke("ingest", "--db", tmp_path / "b.db", "--skip-bad", worse)
    assert result.exit_code == 1
    assert "annodb: error: nothing was stored: 2 records were skipped" in result.stderr
    assert "give one of them" in one_error_line(
        invoke("ingest", "--db", tmp_path / "c.db", "--strict", "--skip-bad", bad), 2)
    dup = tmp_path / "dup.jsonl"                          # repeated docnos are skipped too
    dup.write_text('{"id": "a", "t": "x"}\n{"id": "a", "t": "y"}\n')
    assert invoke("ingest", "--db", tmp_path / "d.db", dup).exit_code == 1
    assert invoke("ingest", "--db", tmp_path / "e.db", "--replace", dup).exit_code == 0


def test_stats(db):
    result = invoke("stats", "--db", db, "--json")
    assert result.exit_code == 0
    stats = json.loads(result.stdout)
    assert stats["documents"] == 4 and stats["features"] > 10
    assert stats["tokens"] == 4 + 28 + 2 and stats["size_bytes"] > 0   # Notes, texts, tags
    text = invoke("stats", "--db", db).stdout
    assert "documents" in text and "4" in text


def test_show(db):
    result = invoke("show", "--db", db, "ch2-v1")
    assert result.exit_code == 0
    assert "docno: ch2-v1" in result.stdout
    assert ":text:: Foxes are quick; dogs are loyal." in result.stdout
    doc = json.loads(invoke("show", "--db", db, "--json", "ch2-v1").stdout)
    assert doc["docno"] == "ch2-v1" and doc["text"] == "Notes\nFoxes are quick; dogs are loyal."
    assert [f["name"] for f in doc["fields"]] == ["book", "text"]
    assert doc["fields"][1]["text"] == "Foxes are quick; dogs are loyal."
    assert doc["meta"] == {"chapter": 2, "verse": 1, "draft": True}   # every field
    assert "chapter: 2\nverse: 1\ndraft: true\n" in result.stdout


def test_show_plain_text_document(tmp_path):
    path = tmp_path / "p.db"
    invoke("ingest", "--db", path, DATA / "note.txt")
    result = invoke("show", "--db", path, "note")
    assert result.stdout.endswith((DATA / "note.txt").read_text() + "\n")


def test_annotate_and_delete(db):
    result = invoke("annotate", "--db", db, "judgment:t1", "ch1-v2", "--value", "3")
    assert result.exit_code == 0, result.output
    with annodb.open(db) as database, database.read() as r:
        doc = r.document("ch1-v2")
        assert list(r.intervals("judgment:t1")) == [(doc.start, doc.end, 3.0)]
    assert "also a word" not in result.stderr
    result = invoke("annotate", "--db", db, "seen", "ch1-v2")
    assert result.exit_code == 0 and "'seen' is also a word" in result.stderr  # (a note)
    with annodb.open(db) as database, database.read() as r:
        assert r.intervals("seen").values.tolist() == [0.0]   # the default, as everywhere
    assert invoke("delete", "--db", db, "ch1-v2").exit_code == 0
    with annodb.open(db) as database, database.read() as r:
        assert not r.has("ch1-v2")
        assert len(r.intervals("judgment:t1")) == 0
    assert invoke("check", "--db", db).stdout == "ok\n"


def test_check_ok_and_damaged(db):
    result = invoke("check", "--db", db)
    assert (result.exit_code, result.stdout) == (0, "ok\n")
    with annodb.open(db) as database:      # damage it: drop one docno -> start entry
        txn = storage.Txn(database._env, write=True)
        txn.txn.delete(b"ch1-v1", db=txn.dbs["docnos"])
        txn.commit()
    result = invoke("check", "--db", db)
    assert result.exit_code == 1
    assert "docnos: 'ch1-v1' (document at 0) is missing" in result.stdout
    assert one_error_line(result, 1).endswith("1 problem found")


def test_check_a_sharded_collection(db, tmp_path):
    """`annodb check` of a collection (it said "no annodb database here"): ok, a damaged
    shard's invariants, then a shard's file cut short, named by shard."""
    shards = tmp_path / "c.shards"
    result = invoke("split", "--db", db, str(shards), "--shards", "2", "--json")
    assert json.loads(result.stdout)["documents"] == 4
    result = invoke("check", "--db", shards)
    assert (result.exit_code, result.stdout) == (0, "ok\n")
    home = routing.shard_name(routing.route("ch1-v1", 2))
    with annodb.open(shards / home) as database:      # drop one docno -> start entry
        txn = storage.Txn(database._env, write=True)
        txn.txn.delete(b"ch1-v1", db=txn.dbs["docnos"])
        txn.commit()
    result = invoke("check", "--db", shards)
    assert result.exit_code == 1 and f"{home}: docnos: 'ch1-v1'" in result.stdout, result.stdout
    data = shards / home / "data.mdb"
    os.truncate(data, os.path.getsize(data) // 2)
    result = invoke("check", "--db", shards)
    assert result.exit_code == 1 and f"{home}: pages: " in result.stdout, result.stdout


def test_db_from_environment_and_default(db, tmp_path, monkeypatch):
    result = invoke("stats", "--json", env={"ANNODB_DB": str(db)})
    assert json.loads(result.stdout)["documents"] == 4
    monkeypatch.chdir(tmp_path)
    shutil.copytree(db, tmp_path / "annodb.db")
    result = invoke("stats", "--json", env={"ANNODB_DB": None})
    assert json.loads(result.stdout)["documents"] == 4


# ---------------------------------------------------------------- errors and help


def test_errors_are_one_line_with_exit_codes(db, tmp_path):
    assert "no document with docno 'nope'" in one_error_line(invoke("show", "--db", db, "nope"), 1)
    assert "nope" in one_error_line(invoke("delete", "--db", db, "nope"), 1)
    assert "nope" in one_error_line(invoke("annotate", "--db", db, "f", "nope"), 1)
    line = one_error_line(invoke("stats", "--db", tmp_path / "none.db"), 1)
    assert "no annodb database here" in line
    assert not (tmp_path / "none.db").exists()          # reading never creates one
    line = one_error_line(invoke("ingest", "--db", tmp_path / "x.db", tmp_path / "no.jsonl"), 1)
    assert "no.jsonl: no such file" in line
    assert not (tmp_path / "x.db").exists()
    assert "Missing argument" in one_error_line(invoke("show", "--db", db), 2)
    assert "No such option" in one_error_line(invoke("stats", "--bogus"), 2)
    assert "No such command" in one_error_line(invoke("bogus"), 2)
    assert "--value" in one_error_line(invoke("annotate", "f", "d", "--value", "x"), 2)


def test_every_command_has_an_example_in_its_help():
    assert "Example" in invoke("--help").stdout
    names = cli.list_commands(click.Context(cli))
    assert set(names) >= {"ingest", "stats", "show", "annotate", "delete", "check"}
    for name in names:
        result = invoke(name, "--help")
        assert result.exit_code == 0
        assert "Example" in result.stdout, name
        assert f"annodb {name}" in result.stdout.split("Example", 1)[1], name
        if name != "warm":                 # the warm process serves every database
            assert "--db" in result.stdout, name


def test_progress_bar_draws_on_stderr(capsys):
    bar = _Bar(enabled=True)
    bar(10, 50, 100)
    bar(20, 100, 100)
    bar.close()
    assert "ingesting" in capsys.readouterr().err


# ---------------------------------------------------------------- the real console script


def console_script() -> list[str]:
    script = Path(sys.executable).parent / "annodb"
    if script.exists():
        return [str(script)]
    found = shutil.which("annodb")
    if found:
        return [found]
    pytest.skip("the annodb console script is not installed (pip install -e .)")


def test_console_script_in_a_subprocess(tmp_path):
    path = tmp_path / "bible.db"
    env = dict(os.environ, ANNODB_DB=str(path))
    done = subprocess.run(console_script() + ["ingest", str(EXAMPLE)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1].startswith("annodb: ingest: added 398, skipped 0")
    done = subprocess.run(console_script() + ["stats", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    stats = json.loads(done.stdout)
    assert stats["documents"] == 398 and stats["tokens"] > 5_000
    done = subprocess.run(console_script() + ["show", "Gen.99.1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == "annodb: error: no document with docno 'Gen.99.1'\n"


def test_db_before_or_after_the_command(db, tmp_path):
    assert json.loads(invoke("--db", db, "stats", "--json").stdout)["documents"] == 4
    assert invoke("--db", db, "check").stdout == "ok\n"
    assert invoke("check", "--db", db).stdout == "ok\n"
    other = tmp_path / "none.db"                   # after the command wins, then before,
    assert invoke("--db", other, "check", "--db", db).stdout == "ok\n"   # then ANNODB_DB
    assert invoke("--db", db, "check", env={"ANNODB_DB": str(other)}).stdout == "ok\n"
    assert "no annodb database here" in one_error_line(invoke("--db", other, "check"), 1)


def test_a_closed_pipe_ends_quietly_with_exit_0(tmp_path):
    """`annodb query ... | head`: the reader goes away; no message, exit 0."""
    path = tmp_path / "bible.db"
    assert invoke("ingest", "--db", path, "--quiet", EXAMPLE).exit_code == 0
    for args in (["query", "--db", str(path), "-k", "300", "the"], ["--help"],
                 ["query", "--help"]):
        read_end, write_end = os.pipe()
        os.close(read_end)                         # the reader is gone before any output
        done = subprocess.run(console_script() + args, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        os.close(write_end)
        assert (done.returncode, done.stderr) == (0, ""), args


def test_python_m_annodb_and_help_and_version_without_numba():
    """`annodb --help` and `--version` (through the console script's launcher too) load
    neither numba nor numpy, the database layer or the server: no command's module."""
    for args, out in ((["--version"], "annodb, version "), (["--help"], "Usage: annodb")):
        done = subprocess.run([sys.executable, "-m", "annodb"] + args, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith(out), done.stderr
        probe = ("import sys\nfrom annodb_cli.main import main\nsys.argv[1:] = %r\n"
                 "try:\n    main()\nexcept SystemExit:\n    pass\n"
                 "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', "
                 "'numpy', 'lmdb') or m in ('annodb.transaction', 'annodb.server', "
                 "'annodb.kernels', 'annodb_cli.query', 'annodb_cli.ingest')), "
                 "file=sys.stderr)" % args)
        for launcher in ("annodb_cli.main", "annodb_cli.launch"):
            done = subprocess.run([sys.executable, "-c", probe.replace(
                "annodb_cli.main", launcher)], capture_output=True, text=True, timeout=120,
                env={**os.environ, "ANNODB_WARM": "0"})
            assert done.stderr == "[]\n", (args, launcher)


def test_the_help_lists_each_command_with_its_own_line():
    """`annodb --help` shows each command's line from COMMANDS without importing its
    module: the same page as with every command loaded (so each line is the command's
    own)."""
    import click
    from annodb_cli import main
    lazy = CliRunner().invoke(main.annodb, ["--help"], terminal_width=100).output
    ctx = click.Context(main.annodb)
    for name in main.COMMANDS:
        command = main.annodb.get_command(ctx, name)
        assert command is not None and command.name == name, name
        assert main.COMMANDS[name][1] == command.get_short_help_str(10 ** 6), name
    loaded = CliRunner().invoke(main.annodb, ["--help"], terminal_width=100).output
    assert lazy == loaded and "ingest" in lazy


def test_the_package_is_typed_and_the_cli_does_not_install_as_cli():
    import importlib.resources
    import importlib.util
    assert importlib.resources.files("annodb").joinpath("py.typed").is_file()
    assert importlib.util.find_spec("annodb_cli") is not None


def test_the_first_compilation_is_announced_once(monkeypatch):
    """kernels.on_compile calls back when numba really compiles (a cache miss), once; a
    kernel loaded or run again says nothing."""
    import numba
    import numpy as np
    from annodb import kernels
    monkeypatch.setattr(kernels, "_callbacks", [])
    calls = []
    kernels.on_compile(lambda: calls.append(1))
    kernels.both_of(np.arange(3), np.arange(3), np.arange(3), np.arange(3))
    compiled_before = len(calls)               # 0, unless this run compiled the kernel
    kernels.both_of(np.arange(3), np.arange(3), np.arange(3), np.arange(3))
    assert len(calls) == compiled_before
    if not calls:
        numba.njit(lambda x: x + 1)(1)           # a real compilation
        assert calls == [1]
        numba.njit(lambda x: x + 2)(1)
        assert calls == [1]


def test_compile_seconds_count_a_real_compilation_once_with_its_callees():
    """kernels.compile_seconds grows by the time numba spends compiling, a kernel's
    callees (compiled inside its compilation) counted once: never more than the wall
    time of the call that compiled them."""
    import time

    import numba
    from annodb import kernels
    inner = numba.njit(lambda x: x * 3 + 1)
    outer = numba.njit(lambda x: inner(x) + inner(x + 1))
    before = kernels.compile_seconds()
    started = time.perf_counter()
    assert outer(2) == 17
    wall = time.perf_counter() - started
    spent = kernels.compile_seconds() - before
    assert 0 < spent <= wall
    outer(3)                                   # compiled now: nothing more
    assert kernels.compile_seconds() - before == spent


def test_an_ingest_summary_tells_compiling_apart_from_the_rate():
    """A first run's summary says how much of its time went to compiling the kernels and
    gives the rate over the rest; without compiling, the line is as it was."""
    from annodb.ingest.database import Summary
    first = Summary(added=2, files=1, tokens=2000, seconds=10.0, compiling=8.0).line()
    assert "2,000 tokens in 10.0 s (8.0 s of it compiling the kernels, once" in first
    assert "1,000 tokens/s in the rest" in first
    warm = Summary(added=2, files=1, tokens=2000, seconds=2.0).line()
    assert warm.endswith("2,000 tokens in 2.0 s (1,000 tokens/s)")


def test_ingest_fold_diacritics_only_into_a_new_database(tmp_path, db):
    src = tmp_path / "cafes.jsonl"
    src.write_text('{"id": "a", "text": "Un Café crème"}\n')
    path = tmp_path / "fold.db"
    assert invoke("ingest", "--db", path, "--quiet", "--fold-diacritics", src).exit_code == 0
    assert invoke("count", "--db", path, '"cafe creme"').stdout == "1\n"
    assert invoke("count", "--db", path, "CAFÉ").stdout == "1\n"
    line = one_error_line(invoke("ingest", "--db", db, "--fold-diacritics", src), 1)
    assert "does not fold diacritics" in line and "new database" in line
    missing = tmp_path / "new.db"
    one_error_line(invoke("ingest", "--db", missing, "--fold-diacritics", tmp_path / "no"), 1)
    assert not missing.exists()                     # inputs are checked first


def test_compact_writes_a_smaller_copy_that_passes_check(tmp_path):
    path = tmp_path / "many.db"
    for i in range(6):  # many small transactions leave free pages behind
        src = tmp_path / f"part{i}.tsv"
        src.write_text("".join(f"d{i}-{j}\tword{j} text number {i} {j}\n" for j in range(300)))
        assert invoke("ingest", "--db", path, "--quiet", src).exit_code == 0
    dest = tmp_path / "compact.db"
    result = invoke("compact", "--db", path, dest)
    assert result.exit_code == 0, result.output
    assert "->" in result.stderr
    assert storage.disk_size(str(dest)) <= storage.disk_size(str(path))
    assert invoke("check", "--db", dest).stdout.strip() == "ok"
    with annodb.open(path, readonly=True) as a, annodb.open(dest, readonly=True) as b:
        assert a.stats().documents == b.stats().documents == 1800
        with a.read() as ra, b.read() as rb:
            assert list(ra.intervals("word7")) == list(rb.intervals("word7"))
    result = invoke("compact", "--db", path, dest)       # not an empty directory
    assert result.exit_code == 1 and "not an empty directory" in result.stderr


def _committed(path) -> int:
    """Documents committed in the database at path so far (0 while it is being created)."""
    try:
        with annodb.open(path, readonly=True, create=False) as database:
            return database.stats().documents
    except annodb.AnnodbError:
        return 0


def test_ctrl_c_during_ingest_exits_130_saying_what_was_committed(tmp_path):
    """A real SIGINT to a real `annodb ingest` between its batches: exit 130, a line saying
    how many documents in how many batches were committed (exactly what the database
    holds), a summary naming the file it stopped in (not "0 files"), and the same command
    again resumes."""
    n, size = 200_000, 1000
    src = tmp_path / "big.jsonl"
    src.write_text("".join(f'{{"docid": "d{i}", "text": "line {i} of many {i * 7919 % 10007}"}}\n'
                           for i in range(n)))
    path = tmp_path / "big.db"
    command = console_script() + ["ingest", "--db", str(path), "--batch-size", str(size),
                                  str(src)]
    child = interruptible(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _committed(path) < 2 * size:
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline, "no batch committed within 120 s"
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    err = child.communicate(timeout=60)[1]
    assert child.returncode == 130, err
    said = re.search(r"^annodb: interrupted: ([\d,]+) documents in ([\d,]+) batches were "
                     r"committed .*run the same command again to resume", err, re.M)
    assert said, err
    docs, batches = (int(g.replace(",", "")) for g in said.groups())
    held = _committed(path)
    assert held % size == 0 and 2 * size <= held < n
    assert docs == batches * size == held
    assert "Traceback" not in err and err.splitlines()[-1].startswith("annodb: ingest: added")
    assert f"; 0 files read whole, stopped in {src}, " in err.splitlines()[-1], err
    again = subprocess.run(command + ["--json"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["added"], summary["present"], summary["skipped"]) == (n - held, held, 0)


def test_ctrl_c_with_a_reading_process_leaves_no_process_behind(tmp_path):
    src = tmp_path / "big.jsonl"
    src.write_text("".join(f'{{"docid": "d{i}", "text": "line {i} of many"}}\n'
                           for i in range(200_000)))
    script = (
        "import os, sys\n"
        "from annodb.ingest import ingest, Interrupted\n"
        "try:\n"
        f"    ingest({str(tmp_path / 'p.db')!r}, [{str(src)!r}], batch_size=500, parallel=True)\n"
        "except Interrupted as stop:\n"
        "    kids = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/stat')"
        ".read().rsplit(')', 1)[1].split()[1] == str(os.getpid())]\n"
        "    print('INTERRUPTED', stop.summary.documents, len(kids), flush=True)\n"
        "    sys.exit(130)\n")
    child = interruptible([sys.executable, "-c", script], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _committed(tmp_path / "p.db") < 1000:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    words = out.split()
    assert words[0] == "INTERRUPTED" and int(words[1]) >= 1000 and words[2] == "0", out


@pytest.mark.parametrize("growing", [False, True])
def test_a_file_size_limit_is_named_not_an_input_output_error(tmp_path, growing):
    """ulimit -f during ingest (SIGXFSZ ignored, so the write fails with EFBIG, or is cut
    short, which LMDB reports as an I/O error): the error names the limit."""
    path = tmp_path / "f.db"
    limit = 300_000
    if growing:       # the database is there; this ingest makes it cross the limit
        assert invoke("ingest", "--db", path, "--batch-size", "50", EXAMPLE).exit_code == 0
        limit = os.path.getsize(path / "data.mdb") + 64 * 1024
    src = tmp_path / "more.jsonl"
    src.write_text("".join(line.replace('"Gen.', '"More.') + "\n"
                           for line in EXAMPLE.read_text().splitlines()))

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(console_script() + ["ingest", "--db", str(path), "--batch-size",
                                              "20", str(src)],
                          preexec_fn=limited, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    line = one_error_line(types.SimpleNamespace(exit_code=done.returncode,
                                                stderr=done.stderr, output=done.stderr), 1)
    assert f"file too large (the file size limit, ulimit -f, is {limit:,} bytes" in line
    assert "Input/output error" not in line and "run the same ingest again" in line
    assert invoke("check", "--db", path).stdout == "ok\n"


def test_bare_words_given_to_query_and_an_empty_search_say_what_to_do(db):
    """`annodb query 'two words'` says to join the terms with an operator or search them
    as free text; `annodb search ''` is a usage error, not "no word is in the database"."""
    line = one_error_line(invoke("query", "--db", db, "river sea"), 2)
    assert "trailing input" in line and "(^ a b) all of them" in line
    assert "free text" in line
    line = one_error_line(invoke("search", "--db", db, "  "), 2)
    assert line == "annodb: error: an empty query: give the words to search for"
