"""The warm process (cli/warm.py) when it is slow, stopped or still starting, with real
processes, signals and Unix sockets:

- a warm process that does not answer (SIGSTOPped here; swapped out would do) is bypassed:
  the command runs in a process of its own, said once on stderr, and it is not run twice
  when the warm process comes back; `annodb warm --stop` ends it;
- Ctrl-Z (SIGTSTP) stops the command's child in the warm process with the command, and
  SIGCONT continues both;
- of two commands run back to back, only the first starts (and announces) a warm process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from annodb import ingest as _ingest
from annodb_cli import warm

from test_warm import (SAMPLE, _env, _gone, _home, _no_children, _run, _started, _status,
                       _waiting_query)

pytestmark = pytest.mark.reliability

home = pytest.fixture(_home)


@pytest.fixture(scope="module")
def bible(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warm-liveness") / "bible.db")
    _ingest.ingest(path, [SAMPLE])
    return path


def _state(pid: int) -> str:
    """A process's state letter (R, S, T for stopped, ...)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def _until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_stopped_warm_process_is_bypassed_and_said_once(home, bible):
    env = _env(home)
    state = _started(env, bible)
    alone = _run(_env(home, ANNODB_WARM="0"), "count", "--db", bible, "god")
    os.kill(state["pid"], signal.SIGSTOP)
    try:
        first = _run(env, "count", "--db", bible, "god")     # (hung before: no timeout)
        second = _run(env, "count", "--db", bible, "god")
        shown = _run(env, "warm")
    finally:
        os.kill(state["pid"], signal.SIGCONT)
    said = warm.STALLED.format(pid=state["pid"], within=warm.ANSWER_WITHIN) + "\n"
    assert (first.returncode, first.stdout, first.stderr) == \
        (alone.returncode, alone.stdout, said)
    assert (second.returncode, second.stdout, second.stderr) == \
        (alone.returncode, alone.stdout, alone.stderr)
    assert shown.returncode == 0 and "not answering" in shown.stdout
    # back: the command it was sent while stopped is not run now, a new one is served
    assert _no_children(env)
    served = _status(env)["served"]
    done = _run(env, "count", "--db", bible, "god")
    assert (done.returncode, done.stdout, done.stderr) == \
        (alone.returncode, alone.stdout, alone.stderr)
    assert _status(env)["served"] == served + 1


def test_warm_stop_ends_a_stopped_warm_process(home, bible):
    env = _env(home)
    state = _started(env, bible)
    os.kill(state["pid"], signal.SIGSTOP)
    try:
        done = _run(env, "warm", "--stop")
        assert done.returncode == 0 and "stopped" in done.stdout
        assert _gone(state["pid"])
    finally:
        try:
            os.kill(state["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_ctrl_z_stops_the_warm_child_with_the_command(home, bible):
    """SIGTSTP (what Ctrl-Z sends) stops the command and its child; SIGCONT (`fg`, `bg`)
    continues both, and the command goes on answering. (Its own process group, as a
    shell's job has: a stop in an orphaned process group is discarded.)"""
    env = _env(home)
    _started(env, bible)
    p = _waiting_query(env, bible, process_group=0)
    try:
        [child] = _status(env)["children"]
        p.send_signal(signal.SIGTSTP)
        assert _until(lambda: _state(p.pid) == "T")
        assert _until(lambda: _state(child) == "T", timeout=10.0)
        p.send_signal(signal.SIGCONT)
        assert _until(lambda: _state(p.pid) != "T" and _state(child) != "T")
        p.stdin.write("darkness\n")
        p.stdin.flush()
        line = None
        while line != "# darkness\n":                       # it answers again
            line = p.stdout.readline()
            assert line
        out, err = p.communicate("", timeout=60)
        assert p.returncode == 0 and err == ""
    finally:
        p.kill()
        p.communicate(timeout=60)
    assert _no_children(env)


def test_two_commands_back_to_back_start_one_warm_process(home, bible):
    """The second command, ending while the warm process the first started is warming
    up, neither starts another nor announces one (it ran in a process of its own: one is
    on the way)."""
    env = {k: v for k, v in _env(home).items() if k != "ANNODB_WARM"}   # as a person's
    primary, secondary = os.openpty()                # stderr a terminal: it announces
    try:
        for command in (["count", "--db", bible, "god"], ["query", "--help"]):
            done = subprocess.run([sys.executable, "-m", "annodb", *command], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=secondary, timeout=300)
            assert done.returncode == 0
        os.close(secondary)
        said = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:                          # (EIO: no writer left)
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(primary)
    assert said.decode().count("a warm process now serves") == 1, said
    assert _until(lambda: _status(_env(home))["running"], timeout=240)
