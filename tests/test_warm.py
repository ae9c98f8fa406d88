"""The warm process (cli/warm.py): real `annodb` processes, a real Unix socket, real forks and
signals. A command run by the warm process must be indistinguishable from one run in a
process of its own (the same stdout, stderr and exit status), read the newest committed
state, and pass Ctrl-C on; a warm process must not outlive its purpose."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import annodb
from annodb import ingest as _ingest
from annodb_cli import warm

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(os.path.dirname(HERE), "examples", "bible-sample.jsonl")


@pytest.fixture(scope="module")
def bible(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warm") / "bible.db")
    _ingest.ingest(path, [SAMPLE])
    return path


def _home():
    """A private socket directory (short: a Unix socket's path has a limit), and whatever
    warm process started in it stopped afterwards."""
    folder = tempfile.mkdtemp(prefix="aw-", dir="/tmp")
    os.chmod(folder, 0o700)
    yield folder
    env = _env(folder)
    state = _status(env)
    _in(env, warm.stop)
    if state.get("running"):
        _gone(state["pid"])
    shutil.rmtree(folder, ignore_errors=True)


home = pytest.fixture(_home)                         # a warm process of the test's own
shared_home = pytest.fixture(scope="module")(_home)  # one for the tests that share it


def _env(folder: str, **more) -> dict:
    env = dict(os.environ, ANNODB_WARM="1", ANNODB_WARM_DIR=folder)
    env.pop("ANNODB_DB", None)
    env.update(more)
    return env


def _run(env: dict, *args, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "annodb", *map(str, args)], env=env,
                          input=input, capture_output=True, text=True, timeout=300)


def _in(env: dict, function):
    """function() with the environment variables of the warm process set as in `env`."""
    saved = {name: os.environ.get(name) for name in ("ANNODB_WARM", "ANNODB_WARM_DIR")}
    try:
        for name in saved:
            os.environ[name] = env[name]
        return function()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _status(env: dict) -> dict:
    return _in(env, warm.status)


def _started(env: dict, bible: str) -> dict:
    """Run a read-only command (which starts a warm process) and wait until one serves."""
    _run(env, "count", "--db", bible, "god")
    deadline = time.monotonic() + 240       # its warm-up loads (or compiles) the kernels
    while time.monotonic() < deadline:
        state = _status(env)
        if state["running"]:
            return state
        time.sleep(0.2)
    log = [open(os.path.join(env["ANNODB_WARM_DIR"], f)).read()
           for f in os.listdir(env["ANNODB_WARM_DIR"]) if f.endswith(".log")]
    raise AssertionError(f"no warm process started: {log}")


def _no_children(env: dict, timeout: float = 30.0) -> bool:
    """Whether the warm process has reaped every child within `timeout` (a child that has
    told its command its exit status is reaped a moment later)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _status(env)["children"] == []:
            return True
        time.sleep(0.05)
    return False


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_command_of_finds_the_command_past_the_db_option():
    assert warm.command_of(["query", "god"]) == "query"
    assert warm.command_of(["--db", "x.db", "search", "a b"]) == "search"
    assert warm.command_of(["--db=x.db", "count", "god"]) == "count"
    assert warm.command_of(["--help"]) is None
    assert warm.command_of(["--version"]) is None
    assert warm.command_of([]) is None


COMMANDS = [
    ("query", "--db", "{db}", "(^ god (+ light darkness))"),
    ("query", "--db", "{db}", "-k", "3", "--json", "(<< god text:)"),
    ("query", "--db", "{db}", "(^ god"),                       # repaired, with a warning
    ("query", "--db", "{db}", "--strict", "(^ god"),           # refused: exit 2
    ("query", "--db", "{db}", "zzzunknownword"),                # nothing, and it says so
    ("query", "--db", "{db}", "--rank", "bm2", "god"),          # a usage error
    ("--db", "{db}", "search", "waters divided"),
    ("count", "--db", "{db}", '"living creature"'),
    ("show", "--db", "{db}", "Gen.1.3"),
    ("show", "--db", "{db}", "--json", "No.Such.Verse"),
    ("stats", "--db", "{db}", "--json"),
    ("query", "--db", "{missing}", "god"),                      # no database: exit 1
    ("query", "--help",),
]


def test_a_warm_command_is_the_same_as_a_command_of_its_own(shared_home, bible):
    env = _env(shared_home)
    cold = _env(shared_home, ANNODB_WARM="0")
    first = _started(env, bible)["served"]
    missing = os.path.join(shared_home, "missing.db")
    for i, command in enumerate(COMMANDS):
        args = [a.format(db=bible, missing=missing) for a in command]
        alone, served = _run(cold, *args), _run(env, *args)
        assert (served.returncode, served.stdout, served.stderr) == \
            (alone.returncode, alone.stdout, alone.stderr), args
        assert _status(env)["served"] == first + i + 1, args     # it ran in the warm one
    stdin = "light\n(^ day night)\n(^ broken\n"
    alone = _run(cold, "query", "--db", bible, "--json", "-", input=stdin)
    served = _run(env, "query", "--db", bible, "--json", "-", input=stdin)
    assert (served.returncode, served.stdout, served.stderr) == \
        (alone.returncode, alone.stdout, alone.stderr)
    assert served.stdout.count("\n") == 3
    state = _status(env)
    assert state["served"] == first + len(COMMANDS) + 1
    assert state["threads"] == 1            # it forks: no other thread may hold a lock


def test_a_warm_command_reads_the_newest_commit(shared_home, bible, tmp_path):
    env = _env(shared_home)
    path = str(tmp_path / "notes.db")
    with annodb.open(path).write() as w:
        w.add("an old note about herons", docno="n1")
    _started(env, path)
    assert _run(env, "count", "--db", path, "kingfisher").stdout.strip() == "0"
    with annodb.open(path).write() as w:
        w.add("a new note about a kingfisher", docno="n2")
    done = _run(env, "query", "--db", path, "kingfisher")
    assert done.returncode == 0 and "\tn2\t" in done.stdout
    assert _status(env)["served"] >= 2


def test_a_closed_pipe_ends_quietly_as_it_does_alone(shared_home, bible):
    env = _env(shared_home)
    _started(env, bible)
    line = "\n".join(["(+ god the and of)"] * 40) + "\n"     # far more than a pipe holds
    for mode in ("0", "1"):
        script = (f"set -o pipefail; printf '{line}' | "
                  f"{sys.executable} -m annodb query --db {bible} -k 400 - | head -n 1")
        done = subprocess.run(["bash", "-c", script], env=_env(shared_home, ANNODB_WARM=mode),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (mode, done.stderr)
        assert done.stderr == "" and done.stdout.startswith("# "), mode


def _waiting_query(env: dict, bible: str, ignoring: tuple = (), setup=None,
                   **popen) -> subprocess.Popen:
    """`annodb query -` that has answered one line and waits for the next, started with
    Ctrl-C's and `ignoring`'s signals as given (a foreground command of a terminal has
    SIGINT at its default, whatever the test runner was started with: a background job,
    say, ignores SIGINT and SIGQUIT, and so would every process it starts), after
    setup() (its limits, say) and with Popen's `popen` keywords."""
    def dispositions():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for signum in ignoring:
            signal.signal(signum, signal.SIG_IGN)
        if setup is not None:
            setup()
    p = subprocess.Popen([sys.executable, "-m", "annodb", "query", "--db", bible, "-"],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=dispositions,
                         **popen)
    p.stdin.write("light\n")
    p.stdin.flush()
    assert p.stdout.readline().startswith("# light")
    return p


@pytest.mark.parametrize("mode", ["0", "1"])
def test_ctrl_c_reaches_the_command(shared_home, bible, mode):
    env = _env(shared_home, ANNODB_WARM=mode)
    if mode == "1":
        _started(env, bible)
    p = _waiting_query(env, bible)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)          # stdin still open: the command ends by the Ctrl-C, not by EOF
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert err.strip().endswith("annodb: error: interrupted")
    if mode == "1":
        assert _no_children(env)


@pytest.mark.parametrize("mode", ["0", "1"])
def test_signals_the_command_was_started_ignoring_stay_ignored(shared_home, bible, mode):
    """A background job ignores SIGINT and SIGQUIT, `nohup annodb ...` SIGHUP: a warm
    command ignores them as a command in a process of its own does (it passed them on to
    its child, which died of SIGHUP under nohup)."""
    env = _env(shared_home, ANNODB_WARM=mode)
    if mode == "1":
        _started(env, bible)
    ignoring = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
    p = _waiting_query(env, bible, ignoring=(signal.SIGQUIT, signal.SIGHUP))
    p.send_signal(signal.SIGHUP)
    p.send_signal(signal.SIGQUIT)
    p.stdin.write("darkness\n")
    p.stdin.flush()
    line = None
    while line != "# darkness\n":                           # still running
        line = p.stdout.readline()
        assert line, p.communicate(timeout=60)
    p.terminate()
    p.wait(timeout=60)           # (stdin still open: it ends by the signal, not by EOF)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM
    p = _waiting_query(env, bible, ignoring=ignoring)
    for signum in ignoring:
        p.send_signal(signum)
    out, err = p.communicate("(^ light darkness)\n", timeout=60)   # then ends by EOF
    assert p.returncode == 0 and "# (^ light darkness)" in out and err == ""
    if mode == "1":
        assert _no_children(env)


def test_a_killed_child_is_the_commands_death_too(shared_home, bible):
    env = _env(shared_home)
    _started(env, bible)
    assert _no_children(env)              # (the tests before: their children reaped)
    p = _waiting_query(env, bible)
    children = _status(env)["children"]
    assert len(children) == 1
    os.kill(children[0], signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL


def test_a_killed_command_takes_its_child_with_it(shared_home, bible):
    env = _env(shared_home)
    _started(env, bible)
    assert _no_children(env)              # (the tests before: their children reaped)
    p = _waiting_query(env, bible)
    child = _status(env)["children"][0]
    p.kill()
    p.communicate(timeout=60)
    assert _gone(child)
    assert _no_children(env)


def test_no_warm_process_in_a_directory_others_can_write(bible):
    folder = tempfile.mkdtemp(prefix="aw-", dir="/tmp")
    try:
        os.chmod(folder, 0o777)
        env = _env(folder)
        done = _run(env, "count", "--db", bible, "god")
        assert done.returncode == 0 and int(done.stdout) > 0
        time.sleep(1.0)
        assert os.listdir(folder) == []
        assert _status(env)["running"] is False
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_off_means_off(home, bible):
    env = _env(home, ANNODB_WARM="0")
    assert _run(env, "count", "--db", bible, "god").returncode == 0
    time.sleep(1.0)
    assert not [f for f in os.listdir(home) if f.endswith(".sock")]
    state = _status(env)
    assert state == {**state, "running": False, "enabled": False}


def test_it_exits_when_idle_and_when_told(home, bible):
    env = _env(home, ANNODB_WARM_IDLE="2")
    state = _started(env, bible)
    assert _gone(state["pid"], timeout=60)
    assert not [f for f in os.listdir(home) if f.endswith(".sock")]
    assert _status(env)["running"] is False
    env = _env(home)
    state = _started(env, bible)
    done = _run(env, "warm", "--stop")
    assert done.returncode == 0 and "stopped" in done.stdout
    assert _gone(state["pid"])
    assert "no warm process" in _run(env, "warm", "--stop").stdout


def test_the_socket_is_named_by_the_code_it_runs(monkeypatch):
    key = warm.code_key()
    assert warm.code_key() == key
    monkeypatch.setenv("NUMBA_OPT", "1")
    assert warm.code_key() != key


def test_a_warm_process_that_failed_is_not_started_again_at_once(home, bible):
    env = _env(home)
    log = _in(env, warm.socket_path) + ".log"
    with open(log, "w") as f:
        f.write("Traceback ...: the warm-up failed\n")
    assert _run(env, "count", "--db", bible, "god").returncode == 0
    time.sleep(1.0)
    assert _status(env)["running"] is False
    os.utime(log, (time.time() - 3600, time.time() - 3600))    # long ago: try again
    assert _started(env, bible)["running"]


def test_by_default_only_a_command_from_a_terminal_starts_one(home, bible):
    """ANNODB_WARM unset: a command run by a script (CI, cron) leaves nothing running
    behind it (a warm process warming up had written into an install that CI was removing);
    one run from a terminal starts a warm process, and a script's command then uses it."""
    env = _env(home)
    script = {k: v for k, v in env.items() if k != "ANNODB_WARM"}
    assert _run(script, "count", "--db", bible, "god").returncode == 0
    time.sleep(2.0)
    assert _status(env)["running"] is False
    assert not [f for f in os.listdir(home) if f.endswith((".sock", ".log"))]
    primary, secondary = os.openpty()            # stdin a terminal, as a person's would be
    try:
        done = subprocess.run([sys.executable, "-m", "annodb", "count", "--db", bible, "god"],
                              env=script, stdin=secondary, capture_output=True, text=True,
                              timeout=300)
    finally:
        os.close(secondary)
        os.close(primary)
    assert done.returncode == 0 and int(done.stdout) > 0
    deadline = time.monotonic() + 240
    while not _status(env)["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    served = _status(env)["served"]
    assert _run(script, "count", "--db", bible, "god").stdout == done.stdout
    assert _status(env)["served"] == served + 1


def test_the_setting_reads_as_people_write_it(monkeypatch):
    for value, enabled in (("0", False), ("off", False), ("", False), ("1", True),
                           ("yes", True), ("auto", True)):
        monkeypatch.setenv("ANNODB_WARM", value)
        assert warm.enabled() is enabled, value
    monkeypatch.setenv("ANNODB_WARM", "1")
    assert warm.may_start()
    monkeypatch.setenv("ANNODB_WARM", "0")
    assert not warm.may_start()
