"""The warm process: numba's start-up paid once, not by every command.

A warm `annodb query` spends two thirds of its CPU importing numba and building its
compiler target (benchmarks/RESULTS.md, "Start-up"); the query itself takes milliseconds.
So the read-only commands (FORWARDED) run in a *warm process* when one is there:

- The first such command run from a terminal runs in its own process, as always, and on
  its way out starts a warm process in the background (a command run by a script starts
  none unless ANNODB_WARM=1: nothing is left running behind CI, cron or a Makefile). The
  start is claimed under the warm process's lock, which the warm process then holds for
  its life: a command that finds the lock taken starts (and announces) nothing. That
  process imports annodb, runs every kind of read once over a small database of its own
  (so the kernels are loaded from numba's cache), and then listens on a Unix socket.
- A later command connects and checks that the warm process is its own user's (its uid,
  by SO_PEERCRED) before it sends anything; the warm process checks each command's the
  same way. The command hands over its arguments, working directory, environment and what
  a process of its own would inherit from it (its rlimits, umask, niceness, scheduling,
  CPU affinity and OOM score, applied in the child; its cgroup, namespaces, root
  directory, credentials and security label, which must be the warm process's). The warm
  process forks a child that takes all that on, or declines (the command then runs in a
  process of its own), and says hello within a second: only then does the command send
  its stdin, stdout and stderr themselves (file descriptors passed with SCM_RIGHTS), and
  the child runs the command as the command line would: it writes to the same terminal or
  pipe, reads the same stdin and sees the same environment. It opens the database itself,
  after the fork, so it reads the newest committed state, as a process of its own would.
  The command waits for the child's exit status and exits with it (a child killed by a
  signal: the same signal). Ctrl-C and other signals are passed on, but those the command
  was started ignoring (a background job's SIGINT and SIGQUIT, `nohup`'s SIGHUP), which
  the child ignores too; Ctrl-Z (SIGTSTP) stops the child with the command, and both
  continue together.
- Anything else (no warm process yet, an unsafe socket directory, a closed stdin, a warm
  process of another user or one that does not answer within a second, a context the
  child cannot take on, another command) runs in its own process. The output is the same
  either way; only the time differs. A warm process that does not answer is reported on
  stderr once.
- The warm process runs only the read-only commands: any other it is sent is declined.

The warm process exits after ANNODB_WARM_IDLE seconds with no command (default 900), on
`annodb warm --stop`, when its socket is gone, or when the code changes. Its socket's name
is a hash of the installed code (annodb's and the command line's files, their sizes and
times), the interpreter and the NUMBA_ settings, so changed code gets a warm process of its
own. The socket lives in a directory only its user can use ($ANNODB_WARM_DIR, else
$XDG_RUNTIME_DIR/annodb, else /tmp/annodb-UID, mode 0700). That directory is opened once,
without following a link, checked on the descriptor (owner and mode), and everything in it
(socket, lock, log) is reached through that descriptor (/proc/self/fd/N/NAME, files opened
O_NOFOLLOW relative to it): a folder renamed or swapped after the check changes nothing.
ANNODB_WARM=0 turns all of this off (the tests do, except the warm process's own);
ANNODB_WARM=1 lets a command that is not run from a terminal start a warm process too.

This module imports only the standard library (a command the warm process runs costs the
interpreter's start-up and a fork) and nothing of the command line: cli/launch.py, the
console script, decides what runs where and gives serve() the functions that warm up and
run a command.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import select
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

FORWARDED = frozenset({"query", "search", "count", "show", "stats"})
IDLE_SECONDS = 900.0
ANSWER_WITHIN = 1.0      # seconds a warm process has to say hello before it is bypassed
RETRY_AFTER = 300.0      # seconds after a warm process wrote to its log (it failed)
STARTED = ("annodb: a warm process now serves read-only commands, so they start in a few "
           "milliseconds (it exits after {idle} idle; ANNODB_WARM=0 turns it off; "
           "`annodb warm --stop` stops it)")
STALLED = ("annodb: the warm process (pid {pid}) did not answer within {within:g} s "
           "(stopped? swapped out?), so read-only commands run in processes of their own "
           "until it does; `annodb warm --stop` ends it")
_HEADER = struct.Struct("!I")
_RLIMITS = sorted({getattr(resource, n): n                   # (RLIMIT_OFILE: NOFILE)
                   for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")
                   }.values())
_PEER = struct.Struct("3i")                   # SO_PEERCRED: pid, uid, gid
_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


# -- the socket's directory, reached only through its descriptor --------------------------

def _folder() -> str:
    path = os.environ.get("ANNODB_WARM_DIR")
    if path:
        return path
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return (os.path.join(runtime, "annodb") if runtime
            else os.path.join("/tmp", f"annodb-{os.geteuid()}"))


def open_directory(create: bool = True) -> int | None:
    """The socket directory (made if missing) opened without following a link, or None
    when it is not ours alone: owned by us, mode 0700 or stricter, checked on the open
    descriptor. A directory another user could write to could hold a socket, a lock or a
    log that is not ours; the descriptor is the directory that was checked, whatever
    happens to its name afterwards. None too where a Unix socket cannot be reached through
    a descriptor (no /proc) or its peer's uid cannot be known (no SO_PEERCRED)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    path = _folder()
    try:
        if create:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not (_ours(folder) and os.path.isdir(_at(folder, ""))):
        os.close(folder)
        return None
    return folder


def _ours(folder: int) -> bool:
    try:
        info = os.fstat(folder)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & 0o077)


def _at(folder: int, name: str) -> str:
    """A path to `name` in the directory open as `folder`, for what takes only a path (a
    Unix socket's bind and connect): the kernel follows /proc/self/fd/N to the directory
    itself, not to whatever now has its name."""
    return f"/proc/self/fd/{folder}/{name}"


def _open_in(folder: int, name: str, flags: int) -> int:
    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)


def _name() -> str:
    return f"warm-{code_key()}.sock"


def code_key() -> str:
    """A hash of what a warm process runs: the files of annodb and of this command line
    (names, sizes, modification times), the interpreter, and numba's settings."""
    import importlib.util
    digest = hashlib.sha256()
    digest.update(f"{sys.executable}\0{sys.version}\0".encode())
    for name, value in sorted(os.environ.items()):
        if name.startswith("NUMBA_"):
            digest.update(f"{name}={value}\0".encode())
    spec = importlib.util.find_spec("annodb")
    folders = list(spec.submodule_search_locations or []) if spec else []
    folders.append(os.path.dirname(os.path.abspath(__file__)))
    for folder in folders:
        for sub in ("", "kernels"):
            where = os.path.join(folder, sub)
            try:
                entries = sorted(os.scandir(where), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.endswith(".py"):
                    info = entry.stat()
                    digest.update(f"{where}/{entry.name}\0{info.st_size}\0"
                                  f"{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:20]


def socket_path(create: bool = True) -> str | None:
    """Where the socket is, to show (None when the directory is not ours alone)."""
    folder = open_directory(create)
    if folder is None:
        return None
    os.close(folder)
    return os.path.join(_folder(), _name())


# -- the command's side -------------------------------------------------------------------

def _setting() -> str:
    """ANNODB_WARM: "off" (0, no, false, off), "on" (1, yes, true, on), else "auto"."""
    value = os.environ.get("ANNODB_WARM", "auto").strip().lower()
    if value in ("0", "no", "false", "off", ""):
        return "off"
    return "on" if value in ("1", "yes", "true", "on") else "auto"


def enabled() -> bool:
    """Whether a command may run in a warm process that is already there."""
    return _setting() != "off"


def may_start() -> bool:
    """Whether this command may start a warm process: always when ANNODB_WARM=1, never
    when it is 0, and by default only from a terminal. A script's command (CI, cron, a
    Makefile) leaves nothing running behind it, that could hold its files or write into
    the install it is about to remove; a script that runs many commands can ask for one
    with ANNODB_WARM=1, or use the Python API or `annodb serve`."""
    setting = _setting()
    if setting != "auto":
        return setting == "on"
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.isatty():
                return True
        except (OSError, ValueError):
            continue
    return False


def command_of(argv: list[str]) -> str | None:
    """The command an `annodb` argument list runs (None: --help, --version, or none)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--db":
            i += 2
            continue
        if arg.startswith("--db="):
            i += 1
            continue
        return None if arg.startswith("-") else arg
    return None


def _peer(s: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end (the listener's when it listened,
    the connecting process's when it connected)."""
    pid, uid, _ = _PEER.unpack(s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                            _PEER.size))
    return pid, uid


def _connect(folder: int, name: str, timeout: float | None) -> tuple[socket.socket, int] | None:
    """A connection to the warm process and its pid; None when there is none, or when
    whoever listens is not our own user (then nothing has been sent to it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(_at(folder, name))
        pid, uid = _peer(s)
    except OSError:
        s.close()
        return None
    if uid != os.geteuid():
        s.close()
        return None
    return s, pid


def _send(s: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    body = json.dumps(message).encode()
    socket.send_fds(s, [_HEADER.pack(len(body))], list(fds))
    s.sendall(body)


def _receive_exactly(s: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _receive(s: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (and the file descriptors that came with it); (None, []) at the end."""
    if with_fds:
        head, fds, _, _ = socket.recv_fds(s, _HEADER.size, with_fds)
        if len(head) < _HEADER.size:
            rest = _receive_exactly(s, _HEADER.size - len(head)) if head else None
            if rest is None:
                for fd in fds:
                    os.close(fd)
                return None, []
            head += rest
    else:
        got = _receive_exactly(s, _HEADER.size)
        if got is None:
            return None, []
        head, fds = got, []
    body = _receive_exactly(s, _HEADER.unpack(head)[0])
    if body is None:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(body), fds


def forward(argv: list[str]) -> int | None:
    """Run the command in the warm process and return its exit status; None when there is
    no warm process to run it (nothing has been run then)."""
    folder = open_directory()
    if folder is None:
        return None
    try:
        name = _name()
        try:
            cwd = os.getcwd()
            for fd in (0, 1, 2):
                os.fstat(fd)
        except OSError:          # a deleted working directory, a closed standard stream
            return None
        return _forward(folder, name, argv, cwd)
    finally:
        os.close(folder)


def _forward(folder: int, name: str, argv: list[str], cwd: str) -> int | None:
    deadline = time.monotonic() + ANSWER_WITHIN
    connected = _connect(folder, name, ANSWER_WITHIN)
    if connected is None:
        return None
    s, pid = connected
    if _stalled_before(folder, name, pid) and _stopped(pid):
        s.close()                # said once already, and still stopped: do not wait again
        return None
    streams = {stream: [getattr(getattr(sys, stream), "encoding", None),
                        getattr(getattr(sys, stream), "errors", None)]
               for stream in ("stdin", "stdout", "stderr")}
    ignored, previous = _pass_signals_on()
    hello = None
    try:
        _send(s, {"op": "run", "argv": argv, "cwd": cwd, "env": dict(os.environ),
                  "streams": streams, "ignored": ignored, "context": _context()})
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        hello, _ = _receive(s)
        if hello is not None and "pid" in hello:
            s.settimeout(None)
            _send(s, {"go": True}, [0, 1, 2])    # only now: our streams, to a live child
            try:
                os.unlink(name + ".stalled", dir_fd=folder)    # it answers (again)
            except OSError:
                pass
    except TimeoutError:
        _stalled(folder, name, pid)
        hello = None
    except (OSError, ValueError):
        hello = None
    if hello is None or "pid" not in hello:      # it did not take the command: run it here
        s.close()
        _restore_signals(previous)
        return None
    return _wait(s, hello["pid"])


def _stalled_before(folder: int, name: str, pid: int) -> bool:
    """Whether warm process `pid` was found not answering before (and said so)."""
    try:
        fd = _open_in(folder, name + ".stalled", os.O_RDONLY)
        try:
            return os.read(fd, 32).strip() == str(pid).encode()
        finally:
            os.close(fd)
    except OSError:
        return False


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP, SIGTSTP, a debugger)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def _stalled(folder: int, name: str, pid: int) -> None:
    """Say once per warm process that it did not answer (this command runs here)."""
    if _stalled_before(folder, name, pid):
        return
    try:
        fd = _open_in(folder, name + ".stalled", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, f"{pid}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    sys.stderr.write(STALLED.format(pid=pid, within=ANSWER_WITHIN) + "\n")
    sys.stderr.flush()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _context() -> dict:
    """What a command run in a process of its own inherits from its caller and a child of
    the warm process would not: what the child takes on (limits, umask, niceness,
    scheduling, CPU affinity, OOM score), and, under "same", what it cannot and must
    already share (cgroup, namespaces, root directory, credentials, security label)."""
    mask = os.umask(0o077)
    os.umask(mask)
    status = _read("/proc/self/status") or ""
    credentials = [line for line in status.splitlines()
                   if line.split(":")[0] in ("Uid", "Gid", "Groups", "CapInh", "CapPrm",
                                             "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
                                             "Seccomp", "Seccomp_filters")]
    namespaces: dict[str, str | None] = {}
    for ns in ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts"):
        try:
            namespaces[ns] = os.readlink(f"/proc/self/ns/{ns}")
        except OSError:
            namespaces[ns] = None
    root = os.stat("/")
    return {
        "umask": mask,
        "scheduler": [os.sched_getscheduler(0), os.sched_getparam(0).sched_priority],
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "oom_score_adj": (_read("/proc/self/oom_score_adj") or "").strip(),
        "rlimits": {name: list(resource.getrlimit(getattr(resource, name)))
                    for name in _RLIMITS},
        "same": {"cgroup": _read("/proc/self/cgroup"), "namespaces": namespaces,
                 "root directory": [root.st_dev, root.st_ino], "credentials": credentials,
                 "security label": _read("/proc/self/attr/current")},
    }


def _differs(theirs) -> str | None:
    """How the context of the command's process (_context()) differs from ours in what a
    child of ours cannot take on (a cgroup, namespaces, ...); None when it does not."""
    if not isinstance(theirs, dict) or not isinstance(theirs.get("same"), dict):
        return "no context came with the command"
    for what, value in _context()["same"].items():
        if theirs["same"].get(what) != value:
            return f"the command runs with another {what}"
    return None


def _adopt(theirs) -> str | None:
    """Take on the context of the command's process (_context(), and _differs() found it
    the same where it must be); why not when it cannot be (the command then runs in a
    process of its own)."""
    mine = _context()
    what = "context"
    try:
        what = "scheduling"
        if theirs["scheduler"] != mine["scheduler"]:
            os.sched_setscheduler(0, theirs["scheduler"][0],
                                  os.sched_param(theirs["scheduler"][1]))
        what = "niceness"
        os.setpriority(os.PRIO_PROCESS, 0, theirs["nice"])
        what = "CPU affinity"
        if theirs["affinity"] != mine["affinity"]:
            os.sched_setaffinity(0, theirs["affinity"])
        what = "OOM score"
        if theirs["oom_score_adj"] != mine["oom_score_adj"]:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write(theirs["oom_score_adj"])
        what = "umask"
        os.umask(theirs["umask"])
        for name in _RLIMITS:
            what = name
            soft, hard = theirs["rlimits"][name]
            resource.setrlimit(getattr(resource, name), (soft, hard))
    except (OSError, ValueError, TypeError, KeyError, IndexError) as err:
        return f"cannot take on the command's {what}: {err}"
    return None


_child_pid: list[int] = []       # the child running our command, once it said hello
_pending: list[int] = []         # signals that came before it did


def _pass_on(signum, frame) -> None:
    if not _child_pid:
        _pending.append(signum)
        return
    try:
        os.kill(_child_pid[0], signum)
    except OSError:
        pass


def _suspend(signum, frame) -> None:
    """Ctrl-Z: stop the child and ourselves; when we are continued, continue it. (The
    child is in the warm process's orphaned process group, where a SIGTSTP would be
    discarded: it gets SIGSTOP.)"""
    import signal
    child = _child_pid[0] if _child_pid else None
    if child is not None:
        try:
            os.kill(child, signal.SIGSTOP)
        except OSError:
            pass
    signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTSTP)        # stops here until SIGCONT
    signal.signal(signal.SIGTSTP, _suspend)
    if child is not None:
        try:
            os.kill(child, signal.SIGCONT)
        except OSError:
            pass


def _pass_signals_on() -> tuple[list[str], dict]:
    """Pass the signals on to the child, but those this process was started ignoring (a
    background job ignores SIGINT and SIGQUIT, `nohup` SIGHUP): the names of those, which
    the child ignores too, as this command run in a process of its own would; and the
    handlers there were, for _restore_signals()."""
    import signal
    ignored, previous = [], {}
    for name in _SIGNALS + ("SIGTSTP",):
        signum = getattr(signal, name)
        handler = signal.getsignal(signum)
        if handler is signal.SIG_IGN:
            if name != "SIGTSTP":
                ignored.append(name)
            continue
        previous[signum] = handler
        signal.signal(signum, _suspend if name == "SIGTSTP" else _pass_on)
    return ignored, previous


def _restore_signals(previous: dict) -> None:
    """The handlers before _pass_signals_on(), and the signals that came meanwhile
    delivered to this process, which runs the command itself after all."""
    import signal
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    pending = list(_pending)
    _pending.clear()
    for signum in pending:
        if signum != signal.SIGTSTP:
            os.kill(os.getpid(), signum)


def _wait(s: socket.socket, pid: int) -> int:
    """Pass signals on to the child `pid` until its exit status comes."""
    _child_pid.append(pid)
    for signum in _pending:
        _pass_on(signum, None)
    while True:
        try:
            reply, _ = _receive(s)
            break
        except InterruptedError:
            continue
        except (OSError, ValueError):
            reply = None
            break
    s.close()
    return _ended(reply)


def _ended(reply: dict | None) -> int:
    """The command's exit status from the child's last message."""
    import signal
    if reply is not None and "signal" in reply:
        # die as the child died, so a shell or a parent sees the same status
        signum = reply["signal"]
        sys.stdout.flush()
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    if reply is None or "exit" not in reply:
        sys.stderr.write("annodb: error: the warm process ended before the command did; "
                         "rerun it (ANNODB_WARM=0 runs it in a process of its own)\n")
        return 1
    return int(reply["exit"])


def start() -> None:
    """Start a warm process in the background unless one is running or starting: the
    start is claimed by taking the warm process's lock, which the new process inherits
    and holds while it lives, so of two commands ending at once one starts it (and says
    so), and a command ending while it warms up starts nothing."""
    import fcntl
    import subprocess
    folder = open_directory()
    if folder is None:
        return
    lock = log = -1
    try:
        name = _name()
        try:
            lock = _open_in(folder, name + ".lock", os.O_RDWR | os.O_CREAT)
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return               # one runs or is starting (or the lock is not a file)
        try:
            info = os.stat(name + ".log", dir_fd=folder, follow_symlinks=False)
            if info.st_size and time.time() - info.st_mtime < RETRY_AFTER:
                return        # the last one failed (its log says why): not one per command
        except OSError:
            pass
        idle = float(os.environ.get("ANNODB_WARM_IDLE") or IDLE_SECONDS)
        # the warm process imports the annodb this command found (which `python -m annodb`
        # may have found in the working directory), not whatever "/" would find
        import importlib.util
        spec = importlib.util.find_spec("annodb")
        roots = [os.path.dirname(p) for p in (spec.submodule_search_locations or [])] \
            if spec else []
        roots.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            roots + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        try:
            log = _open_in(folder, name + ".log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError:
            return
        with open(os.devnull, "rb") as null:
            subprocess.Popen([sys.executable, "-m", "annodb_cli.launch", str(folder), name,
                              str(lock), str(idle)],
                             stdin=null, stdout=null, stderr=log, cwd="/", env=env,
                             start_new_session=True, close_fds=True,
                             pass_fds=(folder, lock))
    finally:
        for fd in (log, lock, folder):
            if fd >= 0:
                os.close(fd)
    if sys.stderr.isatty():
        minutes = f"{idle / 60:g} min" if idle >= 60 else f"{idle:g} s"
        sys.stderr.write(STARTED.format(idle=minutes) + "\n")


def _ask(op: str, create: bool = False) -> tuple[str | None, int | None, dict | None]:
    """Send `op` to the warm process: (its socket path to show, its pid or None when
    none runs, its reply or None when it did not answer within ANSWER_WITHIN)."""
    folder = open_directory(create)
    if folder is None:
        return None, None, None
    try:
        name = _name()
        shown = os.path.join(_folder(), name)
        connected = _connect(folder, name, ANSWER_WITHIN)
    finally:
        os.close(folder)
    if connected is None:
        return shown, None, None
    s, pid = connected
    try:
        _send(s, {"op": op})
        reply, _ = _receive(s)
    except (OSError, ValueError):
        reply = None
    s.close()
    return shown, pid, reply


def status() -> dict:
    """What `annodb warm` reports: the socket, and the process's own answer if it runs
    ("answering": False when it is there but did not answer within a second)."""
    shown, pid, reply = _ask("status")
    out: dict[str, Any] = {"socket": shown, "enabled": enabled(), "running": pid is not None}
    if reply is not None:
        out.update(reply, running=True, answering=True)
    elif pid is not None:
        out.update(pid=pid, answering=False)
    return out


def stop() -> bool:
    """Ask the warm process to exit (one that does not answer is terminated); True if one
    was running."""
    import signal
    _, pid, reply = _ask("stop")
    if pid is None:
        return False
    if reply is None:                         # stopped or stuck: it is ours (SO_PEERCRED)
        for signum in (signal.SIGTERM, signal.SIGCONT):
            try:
                os.kill(pid, signum)
            except OSError:
                pass
    return True


# -- the warm process ---------------------------------------------------------------------

def serve(folder: int, name: str, lock: int, idle: float, run, warm_up) -> None:
    """warm_up(), then run the commands that connect to the socket `name` in the directory
    open as `folder` (inherited from start(), with the lock it holds), each in a forked
    child with run(argv) -> exit status, until `idle` seconds pass with no command and no
    child, or until told to stop."""
    import fcntl
    import signal

    if not _ours(folder):
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)    # (held already: start() took it)
    except OSError:
        return                                   # another one is starting or running
    warm_up()
    os.chdir("/")
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_at(folder, name))
    listener.listen(64)
    inode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    selector = _Watch()
    selector.register(listener, select.POLLIN, "accept")
    selector.register(wake_r, select.POLLIN, "wake")
    children: dict[int, socket.socket] = {}      # pid -> the command's connection
    began, last = time.time(), time.monotonic()
    count = {"served": 0, "declined": 0}
    checked = last
    running = True
    try:
        while running or children:
            for fileobj, data in selector.select(timeout=1.0):
                if data == "wake":
                    try:
                        os.read(wake_r, 512)
                    except BlockingIOError:
                        pass
                elif data == "accept":
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        continue
                    outcome = _take(conn, selector, listener,
                                    (lock, wake_r, wake_w, folder), children, began,
                                    count, run)
                    if outcome == "stop":
                        running = False
                        selector.unregister(listener)
                        listener.close()
                        os.unlink(name, dir_fd=folder)
                    elif outcome in count:
                        count[outcome] += 1
                    if outcome not in ("refused", "declined"):    # not kept by those
                        last = time.monotonic()
                else:                             # a command's connection: it went away
                    try:
                        os.kill(data, signal.SIGTERM)
                    except OSError:
                        pass
                    selector.unregister(fileobj)
            _reap(children, selector)
            if running and not children and time.monotonic() - last > idle:
                running = False
            if running and time.monotonic() - checked > 2.0:
                checked = time.monotonic()
                try:
                    if (os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino != inode
                            or name != _name()):
                        running = False          # replaced, or the code changed
                except OSError:
                    running = False
    finally:
        try:
            if os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino == inode:
                os.unlink(name, dir_fd=folder)
        except OSError:
            pass


class _Watch:
    """poll(), for the events a selector cannot ask for: a command's connection is watched
    for its hang-up alone (POLLRDHUP), not for the data its child is about to read."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._data: dict[int, tuple] = {}

    def register(self, fileobj, events: int, data) -> None:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        self._poll.register(fd, events)
        self._data[fd] = (fileobj, data)

    def unregister(self, fileobj) -> None:
        for fd, (known, _) in list(self._data.items()):
            if known is fileobj:
                self._poll.unregister(fd)
                del self._data[fd]

    def select(self, timeout: float) -> list[tuple]:
        try:
            events = self._poll.poll(timeout * 1000)
        except InterruptedError:
            return []
        return [self._data[fd] for fd, _ in events if fd in self._data]

    def close(self) -> None:
        self._data.clear()


def _well_formed(message: dict) -> bool:
    argv, env = message.get("argv"), message.get("env")
    return (isinstance(argv, list) and all(isinstance(a, str) for a in argv)
            and isinstance(message.get("cwd"), str) and isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()))


def _take(conn, selector, listener, keep, children, began, count, run) -> str:
    """One connection: a status, a stop, or a command to fork a child for ("served"), or
    to decline ("declined": not read-only, or from another context); from another user,
    nothing ("refused", before anything is read)."""
    try:
        _, uid = _peer(conn)
    except OSError:
        uid = -1
    if uid != os.geteuid():
        conn.close()
        return "refused"
    try:
        conn.settimeout(ANSWER_WITHIN)        # (it sends at once; others wait meanwhile)
        message, _ = _receive(conn)
    except (OSError, ValueError):
        message = None
    if not isinstance(message, dict):
        conn.close()
        return "none"
    op = message.get("op")
    if op in ("status", "stop"):
        try:
            _send(conn, {"pid": os.getpid(), **count, "children": sorted(children),
                         "started": began, "threads": threading.active_count()})
        except OSError:
            pass
        conn.close()
        return op
    if op != "run" or not _well_formed(message) \
            or command_of(message["argv"]) not in FORWARDED:
        why: str | None = ("the warm process runs only the read-only commands "
                           + ", ".join(sorted(FORWARDED)))
    else:
        why = _differs(message.get("context"))
    if why is not None:
        try:
            _send(conn, {"declined": why})
        except OSError:
            pass
        conn.close()
        return "declined"
    pid = os.fork()
    if pid == 0:                                  # the child: never returns
        selector.close()
        listener.close()
        for fd in keep:
            os.close(fd)
        for other in children.values():
            other.close()
        _child(conn, message, run)
    conn.settimeout(None)
    children[pid] = conn
    selector.register(conn, select.POLLRDHUP, pid)      # (its "go" for the child: no event)
    return "served"


def _reap(children: dict, selector) -> None:
    """Collect the children that ended; one killed by a signal has its command told so
    (one that exited told its command itself)."""
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done == 0:
            continue
        conn = children.pop(pid)
        selector.unregister(conn)
        if os.WIFSIGNALED(status):
            try:
                _send(conn, {"signal": os.WTERMSIG(status)})
            except OSError:
                pass
        conn.close()


def _child(conn, message: dict, run) -> None:
    """Take on the command's context, say hello, and when the command says go (sending
    its streams), run it as the `annodb` it came from would, on its streams; then exit.
    Until go, nothing of the command has run and the child leaves without a word: a
    command that stopped waiting (the hello came too late) runs in its own process."""
    import signal
    try:
        signal.set_wakeup_fd(-1)
        conn.settimeout(10.0)
        why = _adopt(message.get("context"))
        if why is not None:
            _send(conn, {"declined": why})
            os._exit(0)
        _send(conn, {"pid": os.getpid()})   # only the child writes to `conn` while it lives
        go, fds = _receive(conn, with_fds=3)
        if go is None or not go.get("go") or len(fds) != 3:
            os._exit(0)
    except BaseException:                         # noqa: BLE001 - nothing ran: just leave
        os._exit(0)
    code = 1
    try:
        for name in ("SIGCHLD", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                     "SIGWINCH", "SIGPIPE"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)     # as Python sets it up
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for name in message.get("ignored") or ():          # as the command's process did
            if name in _SIGNALS:
                signal.signal(getattr(signal, name), signal.SIG_IGN)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["env"])
        streams = message.get("streams") or {}
        # (typeshed declares sys.__stdin__ and the others Final; this child is the
        # command's process now, and its streams are the command's)
        sys.stdin = sys.__stdin__ = _stream(0, "r", streams.get("stdin"))  # type: ignore[misc]
        sys.stdout = sys.__stdout__ = _stream(1, "w", streams.get("stdout"))  # type: ignore[misc]
        sys.stderr = sys.__stderr__ = _stream(  # type: ignore[misc]
            2, "w", streams.get("stderr"), stderr=True)
        sys.argv = ["annodb"] + list(message["argv"])
        code = run(list(message["argv"]))
    except BaseException as err:                  # noqa: BLE001 - the child must exit
        code = 1
        try:
            sys.stderr.write(f"annodb: error: internal error in the warm process: "
                             f"{type(err).__name__}: {err} (ANNODB_WARM=0 runs commands "
                             f"in a process of their own; please report it)\n")
            if os.environ.get("ANNODB_DEBUG"):
                import traceback
                traceback.print_exc()
        except BaseException:                     # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:                 # noqa: BLE001 - a reader that went away
                pass
        try:
            _send(conn, {"exit": code})
        except BaseException:                     # noqa: BLE001
            pass
        os._exit(code)


def _stream(fd: int, mode: Literal["r", "w"], how, stderr: bool = False):
    encoding, errors = (how or [None, None])
    tty = os.isatty(fd)
    stream = open(fd, mode, encoding=encoding or "utf-8",
                  errors=errors or ("backslashreplace" if stderr else "strict"), closefd=False)
    stream.reconfigure(line_buffering=tty or stderr)
    return stream
