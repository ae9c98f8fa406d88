"""The warm process: numba's start-up paid once, not by every command.

A warm `annodb query` spends two thirds of its CPU importing numba and building its
compiler target (benchmarks/RESULTS.md, "Start-up"); the query itself takes milliseconds.
So the read-only commands (FORWARDED) run in a *warm process* when one is there:

- The first such command run from a terminal runs in its own process, as always, and on
  its way out starts a warm process in the background (a command run by a script starts
  none unless ANNODB_WARM=1: nothing is left running behind CI, cron or a Makefile). That
  process imports annodb, runs every kind of read once over a small database of its own
  (so the kernels are loaded from numba's cache), and then listens on a Unix socket.
- A later command connects and hands over its arguments, working directory and environment,
  and its stdin, stdout and stderr themselves (file descriptors passed with SCM_RIGHTS). The
  warm process forks a child that runs the command as the command line would: it writes to
  the same terminal or pipe, reads the same stdin and sees the same environment. It opens
  the database itself, after the fork, so it reads the newest committed state, as a process
  of its own would. The command waits for the child's exit status and exits with it (a
  child killed by a signal: the same signal). Ctrl-C and other signals are passed on, but
  those the command was started ignoring (a background job's SIGINT and SIGQUIT, `nohup`'s
  SIGHUP), which the child ignores too.
- Anything else (no warm process yet, an unsafe socket directory, a closed stdin, another
  command) runs in its own process. The output is the same either way; only the time
  differs.

The warm process exits after ANNODB_WARM_IDLE seconds with no command (default 900), on
`annodb warm --stop`, when its socket is gone, or when the code changes. Its socket's name is a hash of the
installed code (annodb's and the command line's files, their sizes and times), the
interpreter and the NUMBA_ settings, so changed code gets a warm process of its own. The
socket lives in a directory only its user can use ($ANNODB_WARM_DIR, else
$XDG_RUNTIME_DIR/annodb, else /tmp/annodb-UID, mode 0700, checked before every use).
ANNODB_WARM=0 turns all of this off (the tests do, except tests/test_warm.py); ANNODB_WARM=1
lets a command that is not run from a terminal start a warm process too.

This module imports only the standard library (a command the warm process runs costs the
interpreter's start-up and a fork) and nothing of the command line: cli/launch.py, the
console script, decides what runs where and gives serve() the functions that warm up and
run a command.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import socket
import stat
import struct
import sys
import threading
import time

FORWARDED = frozenset({"query", "search", "count", "show", "stats"})
IDLE_SECONDS = 900.0
RETRY_AFTER = 300.0      # seconds after a warm process wrote to its log (it failed)
STARTED = ("annodb: a warm process now serves read-only commands, so they start in a few "
           "milliseconds (it exits after {idle} idle; ANNODB_WARM=0 turns it off; "
           "`annodb warm --stop` stops it)")
_HEADER = struct.Struct("!I")
_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


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


def directory(create: bool = True) -> str | None:
    """The socket directory, made if missing; None when it is not ours alone (a directory
    another user could write to could hold a socket that is not ours)."""
    path = os.environ.get("ANNODB_WARM_DIR")
    if not path:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        path = (os.path.join(runtime, "annodb") if runtime
                else os.path.join("/tmp", f"annodb-{os.getuid()}"))
    try:
        if create:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        info = os.lstat(path)
    except OSError:
        return None
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & 0o077):
        return None
    return path


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
    folder = directory(create)
    if folder is None:
        return None
    path = os.path.join(folder, f"warm-{code_key()}.sock")
    return path if len(path.encode()) < 100 else None    # AF_UNIX's limit is 108 bytes


def _connect(path: str) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        return None
    return s


def _send(s: socket.socket, message: dict, fds: list[int] = ()) -> None:
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
        head, fds = _receive_exactly(s, _HEADER.size), []
        if head is None:
            return None, []
    body = _receive_exactly(s, _HEADER.unpack(head)[0])
    if body is None:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(body), fds


def forward(argv: list[str]) -> int | None:
    """Run the command in the warm process and return its exit status; None when there is
    no warm process to run it (nothing has been run then)."""
    path = socket_path()
    if path is None:
        return None
    try:
        cwd = os.getcwd()
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:              # a deleted working directory, a closed standard stream
        return None
    s = _connect(path)
    if s is None:
        return None
    ignored = _pass_signals_on()
    streams = {name: [getattr(getattr(sys, name), "encoding", None),
                      getattr(getattr(sys, name), "errors", None)]
               for name in ("stdin", "stdout", "stderr")}
    try:
        _send(s, {"op": "run", "argv": argv, "cwd": cwd, "env": dict(os.environ),
                  "streams": streams, "ignored": ignored}, [0, 1, 2])
        reply, _ = _receive(s)
    except (OSError, ValueError):
        reply = None
    if reply is None:                            # it did not take the command: run it here
        s.close()
        return None
    if "pid" not in reply:                       # the child died before it said hello
        return _ended(reply)
    return _wait(s, reply["pid"])


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


def _pass_signals_on() -> list[str]:
    """Pass the signals on to the child, but those this process was started ignoring (a
    background job ignores SIGINT and SIGQUIT, `nohup` SIGHUP): the names of those, which
    the child ignores too, as this command run in a process of its own would."""
    import signal
    ignored = []
    for name in _SIGNALS:
        signum = getattr(signal, name)
        if signal.getsignal(signum) is signal.SIG_IGN:
            ignored.append(name)
        else:
            signal.signal(signum, _pass_on)
    return ignored


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
    """Start a warm process in the background unless one is running (it keeps a lock, so
    two starting at once leave one)."""
    import subprocess
    path = socket_path()
    if path is None:
        return
    probe = _connect(path)
    if probe is not None:
        probe.close()
        return
    try:
        log_info = os.stat(path + ".log")
        if log_info.st_size and time.time() - log_info.st_mtime < RETRY_AFTER:
            return            # the last one failed (its log says why): not one per command
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
    with open(os.devnull, "rb") as null, open(path + ".log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "annodb_cli.launch", path, str(idle)],
                         stdin=null, stdout=null, stderr=log, cwd="/", env=env,
                         start_new_session=True, close_fds=True)
    if sys.stderr.isatty():
        minutes = f"{idle / 60:g} min" if idle >= 60 else f"{idle:g} s"
        sys.stderr.write(STARTED.format(idle=minutes) + "\n")


def status() -> dict:
    """What `annodb warm` reports: the socket, and the process's own answer if it runs."""
    path = socket_path(create=False)
    out = {"socket": path, "enabled": enabled(), "running": False}
    s = _connect(path) if path else None
    if s is not None:
        try:
            _send(s, {"op": "status"})
            reply, _ = _receive(s)
        except OSError:
            reply = None
        s.close()
        if reply is not None:
            out.update(reply, running=True)
    return out


def stop() -> bool:
    """Ask the warm process to exit; True if one was running."""
    path = socket_path(create=False)
    s = _connect(path) if path else None
    if s is None:
        return False
    try:
        _send(s, {"op": "stop"})
        _receive(s)
    except OSError:
        pass
    s.close()
    return True


# -- the warm process ---------------------------------------------------------------------

def serve(path: str, idle: float, run, warm_up) -> None:
    """warm_up(), then run the commands that connect to `path`, each in a forked child with
    run(argv) -> exit status, until `idle` seconds pass with no command and no child, or
    until told to stop."""
    import fcntl
    import signal

    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return                                   # another one is starting or running
    warm_up()
    os.chdir("/")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    inode = os.stat(path).st_ino
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}      # pid -> the command's connection
    began, served, last = time.time(), 0, time.monotonic()
    checked = last
    running = True
    try:
        while running or children:
            events = selector.select(timeout=1.0)
            for key, _ in events:
                if key.data == "wake":
                    try:
                        os.read(wake_r, 512)
                    except BlockingIOError:
                        pass
                elif key.data == "accept":
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        continue
                    outcome = _take(conn, selector, listener, (lock, wake_r, wake_w),
                                    children, began, served, run)
                    if outcome == "stop":
                        running = False
                        selector.unregister(listener)
                        listener.close()
                        os.unlink(path)
                    elif outcome == "run":
                        served += 1
                    last = time.monotonic()
                else:                             # a command's connection: it went away
                    pid = key.data
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except OSError:
                        pass
                    selector.unregister(key.fileobj)
            _reap(children, selector)
            if running and not children and time.monotonic() - last > idle:
                running = False
            if running and time.monotonic() - checked > 2.0:
                checked = time.monotonic()
                try:
                    if (os.stat(path).st_ino != inode
                            or not path.endswith(f"warm-{code_key()}.sock")):
                        running = False          # replaced, or the code changed
                except OSError:
                    running = False
    finally:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass


def _take(conn, selector, listener, keep, children, began, served, run) -> str:
    """One connection: a status, a stop, or a command to fork a child for."""
    try:
        conn.settimeout(10.0)
        message, fds = _receive(conn, with_fds=3)
    except OSError:
        message, fds = None, []
    if message is None:
        conn.close()
        return "none"
    op = message.get("op")
    if op in ("status", "stop"):
        for fd in fds:
            os.close(fd)
        try:
            _send(conn, {"pid": os.getpid(), "served": served, "children": sorted(children),
                         "started": began, "threads": threading.active_count()})
        except OSError:
            pass
        conn.close()
        return op
    if op != "run" or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return "none"
    pid = os.fork()
    if pid == 0:                                  # the child: never returns
        selector.close()
        listener.close()
        for fd in keep:
            os.close(fd)
        for other in children.values():
            other.close()
        _child(conn, message, fds, run)
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    children[pid] = conn
    selector.register(conn, selectors.EVENT_READ, pid)
    return "run"


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
        try:
            selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        if os.WIFSIGNALED(status):
            try:
                _send(conn, {"signal": os.WTERMSIG(status)})
            except OSError:
                pass
        conn.close()


def _child(conn, message: dict, fds: list[int], run) -> None:
    """Run the command as the `annodb` it came from would, on its streams, then exit."""
    import signal
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        conn.settimeout(10.0)
        _send(conn, {"pid": os.getpid()})   # only the child writes to `conn` while it lives
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
        sys.stdin = sys.__stdin__ = _stream(0, "r", streams.get("stdin"))
        sys.stdout = sys.__stdout__ = _stream(1, "w", streams.get("stdout"))
        sys.stderr = sys.__stderr__ = _stream(2, "w", streams.get("stderr"), stderr=True)
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


def _stream(fd: int, mode: str, how, stderr: bool = False):
    encoding, errors = (how or [None, None])
    tty = os.isatty(fd)
    stream = open(fd, mode, encoding=encoding or "utf-8",
                  errors=errors or ("backslashreplace" if stderr else "strict"), closefd=False)
    stream.reconfigure(line_buffering=tty or stderr)
    return stream
