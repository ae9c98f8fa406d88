"""One shard served to another process: snapshots by id and the read methods on them.

Two hosts run it: a Ray actor per shard (ray.py) and a worker process per shard of a
sharded collection opened with `fan_out="processes"` (collection.py), which talks to it over a
pipe (`serve` below; `Connection` and `RemotePart` are the parent's side). A part has
`send(method, args, kwargs)` and `receive(ticket)`, so the collection asks every remote
shard at once, works on its own shard meanwhile, then collects the answers
(ShardedDatabase.ask).

A worker sends a ranking's first document right after the ranking, unasked (a follow-up,
`ShardHost.follow_up`): the merged ranking's first hit is read next (`annodb serve` answers a
query with it), and when it comes from a worker's shard it is then already here, not one
more round trip away (~0.2 ms on this project's VM; benchmarks/RESULTS.md, "Shards").

Both ends may poll for `spin` seconds before they sleep on the pipe: a worker after each
request, for the next, and the parent for an answer it awaits. A query sends a worker a few
messages a fraction of a millisecond apart, and queries come one after another; asleep, a
process is woken in ~50 us, and on a virtual machine whose idle CPU goes back to its host
(as on this project's: no halt polling) its caches are cold when it returns: a worker woken
for each query ranked 1.3x slower than the parent the same shard's work. A poller yields
its CPU to any other process ready to run, but where processes outnumber cores polling
still took their CPU (a server's throughput halved), so the collection polls only when its
processes fit the cores (shards.ShardedDatabase, `spin`).
"""

from __future__ import annotations

import gc
import itertools
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection as _Pipe
from typing import TYPE_CHECKING

from .. import children
from ..errors import AnnodbError, NotFoundError, ShardLostError, StorageError
from .routing import IDENTITY, identity_problem

if TYPE_CHECKING:
    from ..transaction import Snapshot

CLOSED = "the collection is closed"
SPIN = 0.001  # seconds both ends poll before sleeping on the pipe, where they do (above)


def spin_for(processes: int) -> float:
    """How long `processes` busy processes (a parent and its workers, in every process that
    opened the collection) poll: SPIN when they fit the machine's cores, else 0."""
    return SPIN if processes <= (os.cpu_count() or 1) else 0.0


class ShardHost:
    """One shard, opened read-only: snapshots by id, and the read methods on them."""

    def __init__(self, path: str, cache_bytes: int | None = None,
                 expect: dict | None = None):
        """`expect`: the identity the shard must record (routing.identity; a Ray actor's
        node may hold shard folders the collection's open never saw)."""
        from .. import database
        self.db = database.Database(path, readonly=True, cache_bytes=cache_bytes)
        if expect is not None:
            with self.db.read() as r:
                problem = identity_problem(path, r._txn.meta(IDENTITY), expect)
            if problem:
                self.db.close()
                raise StorageError(f"{problem}; restore the shard's folder as it was")
        self.snaps: dict[int, Snapshot] = {}
        self.failed: dict[int, Exception] = {}   # snapshots that could not be taken
        self.scorers: dict[tuple[int, str], Callable[[list], list]] = {}
        self.ids = itertools.count()

    def open(self, sid: int | None = None) -> int:
        """A snapshot: under a new id (returned), or under `sid`, the id a worker's parent
        chose (it does not wait for the answer: a failure is raised by the snapshot's
        first call)."""
        if sid is None:
            sid = next(self.ids)
            self.snaps[sid] = self.db.read()
            return sid
        try:
            self.snaps[sid] = self.db.read()
        except Exception as err:  # noqa: BLE001 - raised by the snapshot's calls
            self.failed[sid] = err
        return sid

    def _snapshot(self, sid: int):
        if sid in self.failed:
            raise self.failed[sid]
        found = self.snaps.get(sid)
        if found is None:
            raise StorageError(f"{self.db.path}: no snapshot {sid} here (closed, or taken "
                               "before this shard's host was restarted): take a new one")
        return found

    def close(self, sid: int) -> None:
        self.failed.pop(sid, None)
        snap = self.snaps.pop(sid, None)
        for key in [k for k in self.scorers if k[0] == sid]:
            del self.scorers[key]
        if snap is not None:
            snap.close()

    def call(self, sid: int, method: str, *args, **kwargs):
        result = getattr(self._snapshot(sid), method)(*args, **kwargs)
        if method == "ranked":
            result.snapshot = None   # (it stays here; the ranking was made for this call)
        elif method == "documents":
            result = list(result)
        return result

    def follow_up(self, name: str, args: tuple, answer):
        """What a request asking for one sends after its answer: a ranking's first
        document (None if it has no hit; see the module docstring); None after any other
        request."""
        if name != "call" or args[1:2] != ("ranked",) or not len(answer):
            return None
        return self._snapshot(args[0]).document_at(int(answer.starts[0]))

    def document(self, sid: int, docno: str):
        try:
            return self._snapshot(sid).document(docno)
        except NotFoundError:
            return None

    def score(self, sid: int, container: str, nodes: list) -> list:
        key = (sid, container)
        if key not in self.scorers:
            self.scorers[key] = self._snapshot(sid).text_scorer(container)
        return self.scorers[key](nodes)

    def shutdown(self) -> None:
        for sid in list(self.snaps):
            self.close(sid)
        self.db.close()


# ---------------------------------------------------------------- a worker process

def _await(conn, spin: float) -> None:
    """Return when `conn` has something to read or `spin` seconds have passed, yielding the
    CPU meanwhile to any other process ready to run."""
    if spin > 0 and not conn.poll(0):
        end = time.perf_counter() + spin
        while time.perf_counter() < end and not conn.poll(0):
            os.sched_yield()


def serve(conn, path: str, cache_bytes: int | None, spin: float = 0.0,
          warm_first: bool = False) -> None:
    """A worker process's loop: (ticket, name, args, kwargs, then) in, (ticket, ok, value)
    out, one request at a time, until the pipe closes (the parent ended or closed the
    collection). An error goes back as the error (or, if it cannot be pickled, an
    AnnodbError saying what it was). `then`, if not None, is the ticket of the request's
    follow-up (ShardHost.follow_up), sent after its answer. Polls `spin` seconds for a
    request before it sleeps. Loads the kernels (ranking.load_kernels) after it says it
    is ready, or, `warm_first`, before (a worker replacing one: its shard is ranked in
    the parent until then)."""
    from ..ranking import load_kernels
    failure: BaseException | None = None
    host: ShardHost | None = None
    try:
        opened = ShardHost(path, cache_bytes)
        if warm_first:
            load_kernels(opened.db)
        host = opened
    except BaseException as err:  # noqa: BLE001 - the parent raises it at its first call
        failure = err
    conn.send(("ready", failure is None, _picklable(failure)))
    if host is None:
        return
    if not warm_first:
        load_kernels(host.db)  # (the parent goes on meanwhile)
    gc.freeze()  # (what exists now lives as long as the process: the collector skips it)
    try:
        while True:
            try:
                _await(conn, spin)
                ticket, name, args, kwargs, then = conn.recv()
            except (EOFError, OSError, KeyboardInterrupt):
                return
            try:
                answer = (ticket, True, getattr(host, name)(*args, **kwargs))
            except Exception as err:  # noqa: BLE001 - every error goes back to the caller
                answer = (ticket, False, _picklable(err))
            if ticket is None:  # a message (a snapshot's close): nobody waits for it
                continue
            if not _send(conn, answer, name):
                return
            if then is not None:
                try:
                    follow = (then, True, host.follow_up(name, args, answer[2]) if answer[1]
                              else None)
                except Exception as err:  # noqa: BLE001 - raised where it is read
                    follow = (then, False, _picklable(err))
                if not _send(conn, follow, name):
                    return
    finally:
        host.shutdown()


def _send(conn, answer: tuple, name: str) -> bool:
    """Send an answer (or, if it cannot be pickled, an error saying so); False when the
    parent is gone."""
    try:
        conn.send_bytes(_pickled(answer))
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        conn.send_bytes(_pickled((answer[0], False, AnnodbError(
            f"shard worker: cannot send the answer of {name}: {err}"))))
    except (BrokenPipeError, OSError):
        return False
    return True


def main() -> None:
    """The worker process: `python -c "from annodb.shards.worker import main; main()" FD
    PATH CACHE_BYTES SPIN`, FD its end of the socket pair (start below)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: its close ends us
    fd, path = int(sys.argv[1]), sys.argv[2]
    cache = None if sys.argv[3] == "-" else int(sys.argv[3])
    serve(_Pipe(fd), path, cache, float(sys.argv[4]), sys.argv[5:] == ["warm-first"])


def start(path: str, cache_bytes: int | None, name: str, spin: float = 0.0,
          warm_first: bool = False) -> "Connection":
    """A worker process serving the shard at `path` (a process of its own, not a fork or a
    multiprocessing spawn: it imports no module of the parent's program), connected by a
    socket pair; wait_ready() waits for it to have opened the shard (and, `warm_first`,
    loaded the kernels: see serve). Both ends poll `spin` seconds before sleeping (see the
    module docstring)."""
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            children.command("from annodb.shards.worker import main; main()") +
            [str(theirs.fileno()), path, "-" if cache_bytes is None else str(cache_bytes),
             repr(float(spin))] + (["warm-first"] if warm_first else []),
            pass_fds=(theirs.fileno(),), env=children.environment(),
            stdin=subprocess.DEVNULL)
    except OSError as err:
        ours.close()
        raise StorageError(f"{name}: cannot start a worker process: {err}") from None
    finally:
        theirs.close()
    return Connection(_Pipe(ours.detach()), process, name, spin)


def _pickled(message) -> bytes:
    """A message as the pipe's recv() reads it, pickled whole before anything is sent (so
    one that cannot be pickled sends nothing), by pickle itself: multiprocessing's pickler,
    there for the handles and sockets no message here holds, took 2.8 us for a snapshot's
    close, pickle 0.5."""
    return pickle.dumps(message, pickle.HIGHEST_PROTOCOL)


def _picklable(err):
    if err is None:
        return None
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return AnnodbError(f"{type(err).__name__}: {err}")


class Connection:
    """The parent's end of one worker's pipe, shared by the parent's threads: requests are
    numbered, and whichever thread reads an answer that is another's keeps it for it."""

    def __init__(self, conn, process, name: str, spin: float = 0.0):
        self.conn, self.process, self.name, self.spin = conn, process, name, spin
        self._sending = threading.Lock()
        self._receiving = threading.Lock()
        self._tickets = itertools.count()
        self._snapshots = itertools.count()
        self._answers: dict[int, tuple] = {}
        self._unwanted: set[int] = set()   # tickets whose answers are dropped (forget)
        self.closed = False
        self.why = CLOSED

    def alive(self) -> bool:
        """Whether requests can still be sent: not closed, cut, or its worker ended."""
        return not self.closed and self.process.poll() is None

    def started(self) -> bool:
        """Whether the worker has said it is ready, or ended: wait_ready() returns (or
        raises) at once."""
        return self.process.poll() is not None or self.conn.poll(0)

    def wait_ready(self) -> None:
        try:
            tag, ok, err = self.conn.recv()
        except (EOFError, OSError):
            raise StorageError(f"{self.name}: the shard's worker process did not start "
                               f"(exit code {self._exit_code()})") from None
        if not ok:
            raise err

    def _exit_code(self):
        try:
            return self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return None

    def send(self, name: str, *args, follow_up: bool = False, **kwargs):
        """Send a request: its ticket; with `follow_up`, (its ticket, its follow-up's)."""
        with self._sending:
            if self.closed:
                raise self._closed()
            ticket = next(self._tickets)
            then = next(self._tickets) if follow_up else None
            data = _pickled((ticket, name, args, kwargs, then))  # (an error: nothing sent)
            try:
                self.conn.send_bytes(data)
            except (BrokenPipeError, OSError):
                raise self._gone() from None
            except BaseException:  # (Ctrl-C) perhaps half a message sent: the pipe is done
                self._cut()
                raise
        return ticket if then is None else (ticket, then)

    def receive(self, ticket: int):
        while True:
            with self._receiving:
                if ticket not in self._answers:
                    if self.closed:
                        raise self._closed()
                    try:
                        _await(self.conn, self.spin)
                        got, ok, value = self.conn.recv()
                    except (EOFError, OSError):
                        raise self._gone() from None
                    except BaseException:  # (Ctrl-C) perhaps half an answer read
                        self._cut()
                        raise
                    if got in self._unwanted:
                        self._unwanted.discard(got)
                        continue
                    self._answers[got] = (ok, value)
                    if got != ticket:
                        continue
                ok, value = self._answers.pop(ticket)
            if not ok:
                raise value
            return value

    def forget(self, ticket: int) -> None:
        """Drop the answer of `ticket`, come or to come (a follow-up nobody read)."""
        with self._receiving:
            if self._answers.pop(ticket, None) is None:
                self._unwanted.add(ticket)

    def call(self, name: str, *args, **kwargs):
        return self.receive(self.send(name, *args, **kwargs))

    def open_snapshot(self) -> int:
        """A snapshot in the worker, its id chosen here: asked for, not waited for (the
        worker answers requests in order)."""
        with self._sending:
            sid = next(self._snapshots)
        self.tell("open", sid)
        return sid

    def tell(self, name: str, *args) -> None:
        """A request nobody waits for (its answer is not sent)."""
        data = _pickled((None, name, args, {}, None))
        with self._sending:
            if not self.closed:
                try:
                    self.conn.send_bytes(data)
                except (BrokenPipeError, OSError):
                    pass    # the worker is gone: it holds nothing any more
                except BaseException:  # (Ctrl-C) perhaps half a message sent
                    self._cut()
                    raise

    def _cut(self) -> None:
        """A request or an answer was interrupted part-way: the pipe can no longer be
        read in step, so it is closed (the worker exits) and later calls say so."""
        self.closed = True
        self.why = ("a request to its worker process was interrupted; the collection's "
                    "next snapshot starts a new one")
        self.conn.close()

    def _closed(self) -> StorageError:
        """The error of a call after the pipe was closed: cut off (ShardLostError), or the
        collection closed."""
        kind = StorageError if self.why == CLOSED else ShardLostError
        return kind(f"{self.name}: {self.why}")

    def _gone(self) -> ShardLostError:
        return ShardLostError(f"{self.name}: the shard's worker process ended (exit code "
                            f"{self._exit_code()}); the collection's next snapshot starts "
                            f"a new one")

    def close(self, wait: float = 5.0) -> None:
        """Close the pipe (the worker's recv ends: it closes its shard and exits) and reap
        the worker, killed if it has not ended within `wait` seconds (it only reads)."""
        with self._sending:
            if not self.closed:
                self.closed = True
                self.conn.close()
        if self.process.returncode is not None:
            return
        try:
            self.process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Remote:
    """A snapshot held elsewhere (a worker process, a Ray actor), with the methods
    ShardedSnapshot calls on a part: every read method is `send` a request, then `receive`
    its answer; a host answers with `_answer(ticket)`."""

    def send(self, method: str, args: tuple, kwargs: dict):
        raise NotImplementedError

    def _answer(self, ticket):
        raise NotImplementedError

    def receive(self, ticket, method: str):
        result = self._answer(ticket)
        if method == "ranked":
            result.snapshot = self
        return result

    def _get(self, method: str, *args, **kwargs):
        return self.receive(self.send(method, args, kwargs), method)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._get(method, *args, **kwargs)


class RemotePart(Remote):
    """One worker's snapshot. A ranking made there is followed by its first document
    (see the module docstring), kept for document_at until the next ranking or the close."""

    def __init__(self, connection: Connection, sid: int):
        self.connection, self.sid = connection, sid
        self._first = None     # (the address of the last ranking's first hit, its ticket)

    def send(self, method: str, args: tuple, kwargs: dict):
        if method != "ranked":
            return self.connection.send("call", self.sid, method, *args, **kwargs)
        self._drop_first()
        return self.connection.send("call", self.sid, method, *args, follow_up=True,
                                    **kwargs)

    def _answer(self, ticket):
        if not isinstance(ticket, tuple):
            return self.connection.receive(ticket)
        ticket, then = ticket
        try:
            ranking = self.connection.receive(ticket)
        except BaseException:
            self.connection.forget(then)
            raise
        if len(ranking):
            self._first = (int(ranking.starts[0]), then)
        else:
            self.connection.forget(then)
        return ranking

    def _drop_first(self) -> None:
        if self._first is not None:
            self.connection.forget(self._first[1])
            self._first = None

    def document_at(self, address: int):
        if self._first is not None and self._first[0] == int(address):
            then, self._first = self._first[1], None
            return self.connection.receive(then)
        return self._get("document_at", address)

    def document(self, docno: str):
        doc = self.connection.call("document", self.sid, docno)
        if doc is None:
            raise NotFoundError(f"no document with docno {docno!r}")
        return doc

    def text_scorer(self, container: str):
        return lambda nodes: self.connection.call("score", self.sid, container, nodes)

    def close(self) -> None:
        self._drop_first()
        self.connection.tell("close", self.sid)
