"""The warm process (cli/warm.py) between users and contexts, with real processes and real
Unix sockets; the other user is `nobody`, a process this test starts as uid 65534 (the
tests that need it skip unless run as root).

- A command never talks to a warm process of another user, and a warm process never
  serves a command of another user (SO_PEERCRED both ways).
- The socket's folder is the one that was checked, whatever happens to its name after:
  a command whose folder is swapped for another user's between the check and the use
  (the race a user who can write the folder's parent wins now and then) sends that user
  nothing, and a warm process started then binds, locks and logs only in the folder that
  was checked.
- A command run in the warm process gets what it would get in a process of its own: its
  caller's rlimits, umask and niceness; when it cannot (another mount namespace, another
  cgroup), it runs in a process of its own.
- The warm process runs only the read-only commands; any other is declined.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

import annodb
from annodb import ingest as _ingest
from annodb_cli import warm

from test_warm import (SAMPLE, _env, _gone, _home, _no_children, _run, _started, _status,
                       _waiting_query)

from .workload import size

pytestmark = pytest.mark.reliability

NOBODY = 65534
shared_home = pytest.fixture(scope="module")(_home)


@pytest.fixture(scope="module")
def bible(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("warm-security") / "bible.db")
    _ingest.ingest(path, [SAMPLE])
    return path


@pytest.fixture(scope="module")
def nobody_python():
    """A Python the user nobody can run (the test's own may live under /root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a process as another user (nobody)")
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            done = subprocess.run([candidate, "-c", "import json, socket, struct"],
                                  user=NOBODY, group=NOBODY, extra_groups=[],
                                  capture_output=True, timeout=60)
        except OSError:
            continue
        if done.returncode == 0:
            return candidate
    pytest.skip("no Python that the user nobody can run")


# A process of another user that listens on a socket it is given (bound by the test, as
# only root can bind in the folders these tests use) and records what each connection
# sent it, until its stdin closes: then it reports them all, those still unaccepted too.
LISTENER = r"""
import json, os, select, socket, struct, sys
listener = socket.socket(fileno=int(sys.argv[1]))
listener.listen(16)
print("listening", flush=True)
seen = []
def take():
    conn, _ = listener.accept()
    conn.settimeout(3.0)
    got = fds = 0
    try:
        while True:
            data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(64))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    for fd in struct.unpack(f"{len(payload) // 4}i", payload):
                        os.close(fd)                  # (a stdout it kept: no EOF)
                        fds += 1
            if not data:
                break
            got += len(data)
    except OSError:
        pass
    conn.close()
    seen.append({"bytes": got, "fds": fds})
while True:
    ready, _, _ = select.select([listener, sys.stdin], [], [])
    if listener in ready:
        take()
    if sys.stdin in ready and not sys.stdin.read():
        break
listener.setblocking(False)
while True:
    try:
        take()
    except BlockingIOError:
        break
print(json.dumps(seen), flush=True)
"""


class OtherUsersListener:
    """A socket bound at `path` and listened on by a process of the user nobody."""

    def __init__(self, python: str, path: str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        self.process = subprocess.Popen([python, "-c", LISTENER, str(s.fileno())],
                                        user=NOBODY, group=NOBODY, extra_groups=[],
                                        pass_fds=[s.fileno()], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        s.close()
        assert self.process.stdout.readline() == "listening\n"

    def received(self) -> list[dict]:
        """What each connection made to it sent (it stops)."""
        out, _ = self.process.communicate(timeout=60)
        return json.loads(out)


def _name() -> str:
    """The warm process's socket's name (in whichever folder)."""
    return f"warm-{warm.code_key()}.sock"


def _folders(tmp: str) -> tuple[str, str]:
    """(the folder a root command uses, inside a parent the user nobody owns, as an
    XDG_RUNTIME_DIR kept across su or sudo -E is; and nobody's own folder beside it)."""
    parent = os.path.join(tmp, "run")
    os.mkdir(parent, 0o700)
    os.chown(parent, NOBODY, NOBODY)
    theirs = os.path.join(parent, "theirs")
    os.mkdir(theirs, 0o700)
    os.chown(theirs, NOBODY, NOBODY)
    return os.path.join(parent, "annodb"), theirs


# The command line with the other user winning the race: the folder checked is swapped
# for theirs right after the check (warm.code_key() runs between the check and the use).
SWAPPED = r"""
import os, sys
from annodb_cli import launch, warm
real, theirs = warm.code_key, sys.argv[1]
def swapped_after_the_check():
    if not os.path.exists(theirs + ".swapped"):
        ours = os.environ["ANNODB_WARM_DIR"]
        os.rename(ours, ours + ".moved")
        os.rename(theirs, ours)
        open(theirs + ".swapped", "w").close()
    return real()
warm.code_key = swapped_after_the_check
if sys.argv[2] == "start":
    warm.start()
else:
    sys.argv = ["annodb"] + sys.argv[2:]
    launch.main()
"""


def _tmp():
    folder = tempfile.mkdtemp(prefix="aws-", dir="/tmp")   # short: a socket's path
    os.chmod(folder, 0o755)
    return folder


def test_a_command_sends_nothing_to_a_warm_process_of_another_user(nobody_python, bible):
    """A socket in the command's own folder, listened on by another user: the command
    connects, sees the uid, and runs in a process of its own having sent nothing (not its
    arguments, environment or streams)."""
    tmp = _tmp()
    try:
        ours = os.path.join(tmp, "annodb")
        os.mkdir(ours, 0o700)
        env = {k: v for k, v in _env(ours).items() if k != "ANNODB_WARM"}   # starts none
        other = OtherUsersListener(nobody_python, os.path.join(ours, _name()))
        done = _run(env, "count", "--db", bible, "god")
        alone = _run(_env(ours, ANNODB_WARM="0"), "count", "--db", bible, "god")
        assert (done.returncode, done.stdout, done.stderr) == \
            (alone.returncode, alone.stdout, alone.stderr)
        assert other.received() == [{"bytes": 0, "fds": 0}]       # it connected: no more
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_command_whose_folder_is_swapped_after_the_check_sends_nothing(nobody_python,
                                                                          bible):
    tmp = _tmp()
    try:
        ours, theirs = _folders(tmp)
        os.mkdir(ours, 0o700)
        env = {k: v for k, v in _env(ours).items() if k != "ANNODB_WARM"}
        other = OtherUsersListener(nobody_python, os.path.join(theirs, _name()))
        done = subprocess.run([sys.executable, "-c", SWAPPED, theirs, "count", "--db", bible,
                               "god"], env=env, capture_output=True, text=True, timeout=300)
        assert os.path.exists(theirs + ".swapped")        # the swap happened
        assert done.returncode == 0 and int(done.stdout) > 0, done.stderr
        assert other.received() == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# The other user swapping folders in a loop: theirs (with its listening socket) and ours
# exchanged, atomically (renameat2 RENAME_EXCHANGE: the name is always one of the two),
# over and over, as fast as it goes, until its stdin closes.
SWAPPER = r"""
import ctypes, os, select, sys
ours, theirs = (p.encode() for p in sys.argv[1:3])
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
AT_FDCWD, RENAME_EXCHANGE = -100, 2
swaps = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    if renameat2(AT_FDCWD, ours, AT_FDCWD, theirs, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    swaps += 1
print(swaps, flush=True)
"""

# Root's commands, one after another, each handed to the warm process or bypassing it
# (a bypassed one would run in its own process; here it is only counted), until `served`
# of them were served (or 200 times as many were tried).
FORWARDS = r"""
import sys
from annodb_cli import warm
target = int(sys.argv[1])
served = bypassed = 0
while served < target and served + bypassed < 200 * target:
    if warm.forward(sys.argv[2:]) is None:
        bypassed += 1
    else:
        served += 1
print(served, bypassed, file=sys.stderr)
"""


def test_a_folder_swapped_in_a_loop_by_another_user_gets_nothing(nobody_python, bible,
                                                                  figures):
    """The red team's reproduction: while another user who owns the folder's parent swaps
    our folder and theirs in a loop, root's commands go to the warm process (or bypass it
    when the folder they find is not root's): every one served gives the right answer,
    and the other user's socket receives nothing."""
    tmp = _tmp()
    swapper, state = None, {}
    try:
        ours, theirs = _folders(tmp)
        env = _env(ours)
        state = _started(env, bible)
        other = OtherUsersListener(nobody_python, os.path.join(theirs, _name()))
        swapper = subprocess.Popen([nobody_python, "-c", SWAPPER, ours, theirs],
                                   user=NOBODY, group=NOBODY, extra_groups=[],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        expected = _run(_env(ours, ANNODB_WARM="0"), "count", "--db", bible, "god").stdout
        target = size(50, 1000)
        done = subprocess.run([sys.executable, "-c", FORWARDS, str(target), "count",
                               "--db", bible, "god"], env=env, capture_output=True,
                              text=True, timeout=1200)
        out, _ = swapper.communicate("", timeout=60)
        assert swapper.returncode == 0
        swaps = int(out)
        received = other.received()
        served, bypassed = map(int, done.stderr.split()[-2:])
        figures.update(commands=served + bypassed, served=served, bypassed=bypassed,
                       swaps=swaps, connections_to_the_other_user=len(received),
                       bytes_sent_to_it=sum(r["bytes"] for r in received))
        assert done.returncode == 0, done.stderr
        assert done.stdout == expected * served
        assert received == []
    finally:
        if swapper is not None and swapper.poll() is None:
            swapper.kill()
            swapper.wait()
        if state.get("pid"):
            _end(state["pid"])
        shutil.rmtree(tmp, ignore_errors=True)


def _end(pid: int) -> None:
    """Terminate the warm process `pid`, if it has not ended already."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    _gone(pid)


def _listening_pid(path: str) -> int | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                12))[0]
    except OSError:
        return None
    finally:
        s.close()


def test_a_warm_process_started_as_the_folder_is_swapped_stays_in_the_checked_one(bible):
    """Its socket, lock and log are made in the folder the command checked, never in the
    folder that took its name (which belongs to another user)."""
    tmp = _tmp()
    pid = None
    try:
        ours, theirs = _folders(tmp)
        os.mkdir(ours, 0o700)
        env = _env(ours)
        done = subprocess.run([sys.executable, "-c", SWAPPED, theirs, "start"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert os.path.exists(theirs + ".swapped")
        name = _name()
        checked = ours + ".moved"                       # the folder checked, renamed
        deadline = time.monotonic() + 240
        while pid is None and time.monotonic() < deadline:
            for folder in (checked, ours):
                if os.path.exists(os.path.join(folder, name)):
                    pid = _listening_pid(os.path.join(folder, name))
            time.sleep(0.2)
        assert pid is not None, "no warm process started"
        assert os.listdir(ours) == []                   # theirs, under our folder's name
        assert sorted(os.listdir(checked)) == sorted([name, name + ".lock", name + ".log"])
    finally:
        if pid is not None:
            _end(pid)
        shutil.rmtree(tmp, ignore_errors=True)


# A client of another user: asks for the status and to stop, as `annodb warm` does.
ASKER = r"""
import json, socket, struct, sys
replies = []
for op in sys.argv[2:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sys.argv[1])
    body = json.dumps({"op": op}).encode()
    try:
        s.sendall(struct.pack("!I", len(body)) + body)
        replies.append(s.recv(65536).decode(errors="replace"))
    except OSError as err:
        replies.append("")
    s.close()
print(json.dumps(replies))
"""


def test_a_warm_process_serves_no_command_of_another_user(nobody_python, shared_home, bible):
    """Another user who reaches the socket (here by a hard link in a folder of theirs;
    a bind mount, a copied descriptor would do) is closed on before anything is read:
    no status, no stop, no command."""
    env = _env(shared_home)
    state = _started(env, bible)
    tmp = _tmp()
    try:
        theirs = os.path.join(tmp, "theirs")
        os.mkdir(theirs, 0o700)
        os.chown(theirs, NOBODY, NOBODY)
        link = os.path.join(theirs, "s")
        os.link(os.path.join(shared_home, _name()), link)
        os.chmod(link, 0o777)                  # (its folder kept it from others until now)
        done = subprocess.run([nobody_python, "-c", ASKER, link, "status", "stop"],
                              user=NOBODY, group=NOBODY, extra_groups=[],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == ["", ""]
        after = _status(env)
        assert after["running"] and after["pid"] == state["pid"]
        assert after["served"] == state["served"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


FORWARD = r"""
import sys
from annodb_cli import warm
code = warm.forward(sys.argv[1:])
print("declined" if code is None else f"ran: {code}")
"""


@pytest.mark.parametrize("command", [
    ["delete", "--db", "{db}", "Gen.1.3"],
    ["--db", "{db}", "delete", "Gen.1.3"],
    ["annotate", "--db", "{db}", "judgment:t1", "Gen.1.3", "--value", "3"],
    ["compact", "--db", "{db}", "{db}.compact"],
])
def test_the_warm_process_runs_only_read_only_commands(shared_home, tmp_path, command):
    """Sent straight to the socket (no `annodb` command line sends these), a write or any
    command but query, search, count, show and stats is declined, and nothing changes."""
    db = str(tmp_path / "bible.db")
    _ingest.ingest(db, [SAMPLE])
    env = _env(shared_home)
    _started(env, db)
    args = [a.format(db=db) for a in command]
    done = subprocess.run([sys.executable, "-c", FORWARD, *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout == "declined\n", (done.stdout, done.stderr)
    with annodb.open(db, readonly=True) as database, database.read() as r:
        assert r.document("Gen.1.3") is not None
        assert r.count("judgment:t1") == 0
    assert not os.path.exists(db + ".compact")


def _proc(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/{name}") as f:
        return f.read()


def _umask(pid: int) -> str:
    return [line for line in _proc(pid, "status").splitlines()
            if line.startswith("Umask:")][0]


def _nice(pid: int) -> int:
    return int(_proc(pid, "stat").rpartition(")")[2].split()[16])


def _limited():
    """A caller with limits of its own: umask 027, niceness 3, 300 CPU seconds, 64 GiB of
    address space, 64 MiB files, 512 open files."""
    import resource
    os.umask(0o027)
    os.nice(3)
    resource.setrlimit(resource.RLIMIT_CPU, (300, 301))
    resource.setrlimit(resource.RLIMIT_AS, (64 << 30, 64 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, 1024))


def test_a_warm_command_has_its_callers_limits_umask_and_niceness(shared_home, bible):
    env = _env(shared_home)
    _started(env, bible)
    assert _no_children(env)
    p = _waiting_query(env, bible, setup=_limited)
    try:
        [child] = _status(env)["children"]
        assert _proc(child, "limits") == _proc(p.pid, "limits")
        assert _umask(child) == _umask(p.pid) == "Umask:\t0027"
        assert _nice(child) == _nice(p.pid) == _nice(os.getpid()) + 3
        assert _proc(child, "cgroup") == _proc(p.pid, "cgroup")
    finally:
        p.kill()
        p.communicate(timeout=60)


def test_a_command_under_ulimit_v_fails_warm_as_it_fails_alone(shared_home, bible):
    """200 MB of address space does not hold a database's map: the command fails the
    same way in the warm process (which had passed it by before) as in its own."""
    env = _env(shared_home)
    _started(env, bible)
    limit = "ulimit -v 200000; exec \"$@\""
    command = [sys.executable, "-m", "annodb", "count", "--db", bible, "god"]
    runs = {mode: subprocess.run(["sh", "-c", limit, "sh", *command],
                                 env=_env(shared_home, ANNODB_WARM=mode),
                                 capture_output=True, text=True, timeout=300)
            for mode in ("0", "1")}
    assert runs["0"].returncode == 1 and "address space is limited" in runs["0"].stderr
    assert (runs["1"].returncode, runs["1"].stdout, runs["1"].stderr) == \
        (runs["0"].returncode, runs["0"].stdout, runs["0"].stderr)


def test_a_command_in_another_mount_namespace_runs_in_a_process_of_its_own(shared_home,
                                                                           bible):
    """The warm process's child cannot enter the caller's mount namespace (its paths,
    its database could be other files): the command runs in a process of its own."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (util-linux)")
    env = _env(shared_home)
    before = _started(env, bible)
    done = subprocess.run(["unshare", "--mount", sys.executable, "-m", "annodb", "count",
                           "--db", bible, "god"], env=env, capture_output=True, text=True,
                          timeout=300)
    alone = _run(_env(shared_home, ANNODB_WARM="0"), "count", "--db", bible, "god")
    assert (done.returncode, done.stdout, done.stderr) == \
        (alone.returncode, alone.stdout, alone.stderr)
    assert _no_children(env)
    assert _run(env, "count", "--db", bible, "god").stdout == alone.stdout
    after = _status(env)
    assert (after["served"], after.get("declined")) == (before["served"] + 1,
                                                        before.get("declined", 0) + 1)


def _cgroup2_root() -> str | None:
    """A cgroup2 hierarchy that no service manager uses (every process at its root), where
    a test may make a cgroup of its own; None elsewhere."""
    try:
        with open("/proc/self/cgroup") as f:
            if "0::/\n" not in f.read().splitlines(keepends=True):
                return None
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[2] == "cgroup2"]
    except OSError:
        return None
    return next((m for m in mounts if os.access(m, os.W_OK)), None)


def test_a_command_in_another_cgroup_runs_in_a_process_of_its_own(shared_home, bible):
    """Another cgroup (its memory, CPU and pids limits) is the caller's to keep: the warm
    process's child, in the warm process's cgroup, declines the command."""
    root = _cgroup2_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup2 hierarchy no service manager uses")
    env = _env(shared_home)
    before = _started(env, bible)
    group = os.path.join(root, f"annodb-test-{os.getpid()}")
    os.mkdir(group)
    try:
        def move():
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        done = subprocess.run([sys.executable, "-m", "annodb", "count", "--db", bible, "god"],
                              env=env, capture_output=True, text=True, timeout=300,
                              preexec_fn=move)
        assert done.returncode == 0 and int(done.stdout) > 0 and done.stderr == ""
        assert _no_children(env)
        after = _status(env)
        assert (after["served"], after.get("declined")) == (before["served"],
                                                            before.get("declined", 0) + 1)
    finally:
        os.rmdir(group)
