"""The search server (`annodb serve`): annodb.protocol over TCP, on every core
(ARCHITECTURE.md "Interfaces").

    server = Server("memory.db").start()      # listens on a free loopback port
    print(server.port)
    ...
    server.shutdown()

`serve_forever()` (what `annodb serve` runs) starts it, prints `listening on port N` to
stderr, blocks until SIGINT or SIGTERM, then shuts down cleanly. `respond(line)` is the
protocol without the sockets.

How it serves:

- **Processes.** With `processes=N > 1` (`annodb serve` uses one per core) the listening
  process only accepts: each connection is handed (its file descriptor, over a Unix socket)
  to the worker process serving the fewest, and stays there. Every worker is a `python -c`
  child with its own database handle and read snapshots (LMDB readers are
  multi-process), its own query cache and states, so the Python work of queries runs on
  every core. A worker that dies is started again (its connections are lost; the others
  are not). With `processes=1` the same serving core runs in a thread of this process.
- **The serving core** is one asyncio event loop per process, which reads and writes every
  connection of the process, and a fixed pool of query threads created at start (so no
  thread ever has to start under load, and the acceptor cannot die for want of one).
  Requests of a connection are answered one at a time, in order; a client that pipelines
  is read only as fast as it is answered.
- **Limits.** A started line must be complete within `line_timeout` seconds and a silent
  connection is closed after `idle_timeout` (so half-sent lines cannot hold connections
  for ever); at most `max_clients` connections at once (one more is told "too many
  clients"); a reply a client does not read within SEND_TIMEOUT closes it. A query's work
  is bounded inside evaluation (query_timeout, max_postings): it stops there and its thread
  is free for the next.
- **Writes** (annotate, note) are write transactions of the worker that got them, taking
  turns with every other writer (annodb's writer lock): readers never wait for them.

Listening on anything but loopback requires a token (see annodb.protocol).
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import children
from .shards import collection as _shards, worker as shard_worker
from .paths import default_path, is_collection
from .protocol import (MAX_LINE, MAX_POSTINGS, MAX_QUERIES, MAX_QUERY_BYTES, QUERY_TIMEOUT,
                       Protocol, ServerError, Session)
from .ranking import DEPTH

MAX_CLIENTS = 4096                  # connections served at once
THREADS = 4                         # query threads per process
IDLE_TIMEOUT = 900.0                # seconds a connection may stay silent
LINE_TIMEOUT = 60.0                 # seconds a started request line may take to arrive
SEND_TIMEOUT = 60.0                 # seconds a reply may wait for a client that does not read
GRACE = 0.1                         # seconds past a query's time limit before its reply is forced
RECV_SIZE = 1 << 16
READY, CLOSED = b"r", b"x"          # what a worker tells the listening process

__all__ = ["Server", "ServerError", "is_loopback", "QUERY_TIMEOUT", "MAX_CLIENTS"]


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address."""
    if host in ("", "*"):
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ServerError(f"cannot resolve host {host!r}: {err.strerror}") from None
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


# ---------------------------------------------------------------- the serving core


def _settle(future) -> None:
    if not future.done():
        future.set_result(None)


class _Core:
    """One process's connections: an asyncio loop (on its own thread, or the process's
    main thread in a worker) and a fixed pool of threads that answer requests."""

    def __init__(self, protocol: Protocol, *, threads: int, idle_timeout: float,
                 line_timeout: float, max_clients: int, on_close=None):
        self.protocol = protocol
        self.idle_timeout = idle_timeout
        self.line_timeout = line_timeout
        self.max_clients = max_clients
        self.on_close = on_close
        self.pool = ThreadPoolExecutor(max(int(threads), 1), thread_name_prefix="annodb-query")
        for _ in range(self.pool._max_workers):  # start them all now, not under load
            self.pool.submit(int).result()
        self.loop = asyncio.new_event_loop()
        self.clients = 0
        self.tasks: set[asyncio.Task] = set()
        self.stopping = False

    def admit(self, sock: socket.socket) -> None:
        """Serve an accepted connection (call on the loop's thread)."""
        if self.stopping:
            sock.close()
            return
        task = self.loop.create_task(self._serve(sock))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, sock: socket.socket) -> None:
        self.clients += 1
        session = Session()
        writer = None
        try:
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock, limit=RECV_SIZE)
            if self.clients > self.max_clients:
                await self._send(writer, self.protocol.refusal(
                    "connect", f"too many clients ({self.max_clients}); retry later"))
                return
            await self._lines(reader, writer, session)
        except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
            pass  # the client went away, stopped reading, or the server is stopping
        except Exception as err:  # a bug: report it, drop this client, keep serving
            self.protocol.say(f"annodb serve: client error: {type(err).__name__}: {err}")
        finally:
            self.clients -= 1
            self.protocol.forget(session)
            if writer is not None:
                writer.close()
            else:
                sock.close()
            if self.on_close is not None:
                self.on_close()

    async def _lines(self, reader, writer, session: Session) -> None:
        """Read request lines and answer each; a line over max_line is answered once and
        the rest of it discarded; an unterminated last line is answered too (as the
        reference does)."""
        buf = bytearray()
        discarding = False
        started = 0.0  # when the pending partial line began to arrive (set by the first read)
        max_line = self.protocol.max_line
        while True:
            if self.stopping:  # stop's cancel can be lost (3.11's wait_for swallows one
                return         # that comes as the awaited future completes)
            if buf or discarding:
                left = self.line_timeout - (time.monotonic() - started)
                try:
                    if left <= 0:
                        raise asyncio.TimeoutError
                    chunk = await asyncio.wait_for(reader.read(RECV_SIZE), left)
                except asyncio.TimeoutError:
                    await self._send(writer, self.protocol.refusal("parse", (
                        f"request line not finished within {self.line_timeout:g}s; "
                        "closing the connection")))
                    return
            else:
                try:
                    chunk = await asyncio.wait_for(reader.read(RECV_SIZE), self.idle_timeout)
                except asyncio.TimeoutError:
                    return  # idle: close quietly
                started = time.monotonic()
            if not chunk:
                break
            buf += chunk
            begin = 0
            while True:
                end = buf.find(b"\n", begin)
                if end < 0:
                    break
                line = bytes(buf[begin:end])
                begin = end + 1
                if discarding:
                    discarding = False
                    continue
                await self._send(writer, await self._answer(line, session))
            del buf[:begin]
            if discarding:
                buf.clear()
            elif len(buf) > max_line:
                buf.clear()
                discarding = True
                await self._send(writer, self.protocol.too_long())
            if begin:
                started = time.monotonic()
        if buf and not discarding:
            await self._send(writer, await self._answer(bytes(buf), session))

    async def _answer(self, line: bytes, session: Session) -> bytes:
        """The reply to one line, from a query thread. Waiting for a free thread is not
        counted against the query's time limit; once running, a query that its budget has
        not stopped GRACE seconds past its limit (it is inside one long kernel call) is
        answered with the time-limit error while its thread finishes."""
        began = self.loop.create_future()

        def run():
            self.loop.call_soon_threadsafe(_settle, began)
            return self.protocol.respond(line, session)

        future = self.loop.run_in_executor(self.pool, run)
        limit = self.protocol.query_timeout
        if limit is None:
            return await future
        await asyncio.wait([began, future], return_when=asyncio.FIRST_COMPLETED)
        started = time.perf_counter()
        try:
            return await asyncio.wait_for(asyncio.shield(future), limit + GRACE)
        except asyncio.TimeoutError:
            return self.protocol.timeout_reply(line, (time.perf_counter() - started) * 1000)

    @staticmethod
    async def _send(writer, data: bytes) -> None:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), SEND_TIMEOUT)

    def stop(self) -> None:
        """Cancel every connection (on the loop's thread)."""
        self.stopping = True
        for task in list(self.tasks):
            task.cancel()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------- worker processes


def _worker_main(fd: int, config: str) -> None:
    """A worker process: serve the connections the listening process hands over on the
    Unix socket `fd`; end when it closes or on SIGTERM."""
    options = json.loads(config)
    core_options = {k: options.pop(k) for k in ("threads", "idle_timeout", "line_timeout",
                                               "max_clients")}
    channel = socket.socket(fileno=fd)
    lock = threading.Lock()

    def closed():
        with lock:
            try:
                channel.sendall(CLOSED)
            except OSError:
                pass

    cores: list[_Core] = []

    def info():
        return {"clients": cores[0].clients if cores else 0, "process": os.getpid()}

    try:
        protocol = Protocol(options.pop("path"), log=sys.stderr, info=info, **options)
    except Exception as err:  # tell the listening process why, then stop
        print(f"annodb serve: worker {os.getpid()}: {err}", file=sys.stderr, flush=True)
        sys.exit(1)
    protocol.warm_up()
    gc.freeze()
    core = _Core(protocol, on_close=closed, **core_options)
    cores.append(core)
    loop = core.loop
    channel.setblocking(False)

    def receive():
        try:
            data, fds, _, _ = socket.recv_fds(channel, 16, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = b"", []
        if not data and not fds:  # the listening process is gone
            loop.stop()
            return
        for received in fds:
            core.admit(socket.socket(fileno=received))

    loop.add_reader(channel.fileno(), receive)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.add_signal_handler(signal.SIGINT, lambda: None)  # the listening process decides
    try:
        with lock:
            channel.sendall(READY)
    except OSError:   # the listening process is gone (stopped while this one started):
        core.close()  # end quietly, not with a traceback on the terminal it left
        protocol.close()
        return
    try:
        loop.run_forever()
    finally:
        core.stop()
        loop.run_until_complete(asyncio.sleep(0))
        core.close()
        protocol.close()


class _Worker:
    """The listening process's view of one worker process."""

    def __init__(self, index: int, config: dict):
        self.index = index
        self.config = config
        self.connections = 0
        self.proc: subprocess.Popen | None = None      # both set by start()
        self.channel: socket.socket | None = None

    def start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        code = ("import sys; from annodb.server import _worker_main; "
                f"_worker_main({child.fileno()}, sys.argv[1])")
        # a session of its own: Ctrl-C at a terminal reaches the listening process only,
        # which stops the workers; a worker whose listening process died sees its channel
        # close and ends
        self.proc = subprocess.Popen(children.command(code) + [json.dumps(self.config)],
                                     pass_fds=[child.fileno()], start_new_session=True,
                                     env=children.environment())
        child.close()
        self.channel = parent
        self.connections = 0

    def wait_ready(self, timeout: float) -> bool:
        channel = self.channel
        assert channel is not None      # (started)
        channel.settimeout(timeout)
        try:
            return channel.recv(1) == READY
        except OSError:
            return False
        finally:
            channel.settimeout(None)

    def hand(self, conn: socket.socket) -> bool:
        assert self.channel is not None     # (started)
        try:
            socket.send_fds(self.channel, [b"c"], [conn.fileno()])
        except OSError:
            return False
        self.connections += 1
        return True

    def poll(self) -> int | None:
        """The started worker process's exit code, or None while it runs."""
        assert self.proc is not None        # (started)
        return self.proc.poll()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def reap(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.channel is not None:
            self.channel.close()


# ---------------------------------------------------------------- the server


class Server:
    """An SSR search server over one database (see the module docstring)."""

    def __init__(self, path: str | os.PathLike | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, container: str = ":", fields: list[str] | None = None,
                 depth: int = DEPTH, token: str | None = None,
                 query_timeout: float | None = QUERY_TIMEOUT,
                 max_postings: int | None = MAX_POSTINGS, max_line: int = MAX_LINE,
                 max_queries: int = MAX_QUERIES, max_query_bytes: int = MAX_QUERY_BYTES,
                 max_clients: int = MAX_CLIENTS, workers: int | None = None,
                 processes: int = 1, idle_timeout: float = IDLE_TIMEOUT,
                 line_timeout: float = LINE_TIMEOUT, cache_bytes: int | None = None,
                 readonly: bool = False, strict: bool = False, log=None,
                 ray: str | None = None, fan_out: str | None = None):
        if token is None and not is_loopback(host):
            raise ServerError(
                f"refusing to listen on {host!r} without a token: anyone who can reach it "
                "could read the database; give --token T (then every request must carry "
                "\"token\": T), or listen on 127.0.0.1")
        if processes < 1:
            raise ServerError(f"processes must be at least 1, not {processes}")
        if ray == "local":
            processes = 1  # (each worker process would start a cluster of its own)
        if max_clients < 1:
            raise ServerError(f"max_clients must be at least 1, not {max_clients}")
        self.path = os.fspath(default_path(path))
        self.host = host
        self.processes = int(processes)
        self.max_clients = int(max_clients)
        self._requested_port = int(port)
        self._log = log
        per_process = None if cache_bytes is None else int(cache_bytes) // self.processes
        spin = None  # (every process of the server has a worker per other shard)
        if fan_out == "processes" and is_collection(self.path):
            spin = shard_worker.spin_for(
                self.processes * _shards.read_manifest(self.path)["shards"])
        self._options: dict[str, Any] = dict(
            container=container, fields=fields, depth=depth, token=token,
            query_timeout=query_timeout, max_postings=max_postings, max_line=max_line,
            max_queries=max(int(max_queries) // self.processes, 1),
            max_query_bytes=int(max_query_bytes) // self.processes, cache_bytes=per_process,
            readonly=readonly, strict=strict, ray=ray, fan_out=fan_out, spin=spin)
        self._core_options: dict[str, Any] = dict(
            threads=workers or THREADS, idle_timeout=idle_timeout, line_timeout=line_timeout,
            max_clients=self.max_clients)
        # checks the options and opens the database here (in every mode): a missing
        # database or a bad container is an error now, not in a worker
        self._protocol = Protocol(self.path, log=log or sys.stderr, info=self._info,
                                  **self._options)
        self.max_line = self._protocol.max_line
        self._core: _Core | None = None
        self._loop_thread: threading.Thread | None = None
        self._workers: list[_Worker] = []
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._wake = socket.socketpair()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._session = Session()
        self.port: int | None = None

    # life cycle ---------------------------------------------------------------

    def start(self) -> "Server":
        """Bind, listen, print `listening on port N` to stderr and serve on background
        threads (and worker processes). Returns the server (its `.port` is then known)."""
        if self._listener is not None:
            return self
        if self._closed:
            raise ServerError("this server has been shut down")
        listener = self._listen()
        try:
            if self.processes == 1:
                self._start_core(listener)
            else:
                self._start_workers()
        except BaseException:
            listener.close()
            self.shutdown()
            raise
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listener,),
                                          name="annodb-accept", daemon=True)
        self._acceptor.start()
        self._say(f"listening on port {self.port}")
        return self

    def _listen(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self.host or None, self._requested_port,
                                       type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            infos.sort(key=lambda info: info[0] != socket.AF_INET)  # "localhost": IPv4 first
            family, kind, proto, _, address = infos[0]
            listener = socket.socket(family, kind, proto)
        except (OSError, IndexError) as err:
            self.shutdown()
            raise ServerError(f"cannot listen on {self.host}:{self._requested_port}: "
                              f"{getattr(err, 'strerror', None) or err}") from None
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
            listener.listen(1024)
            listener.setblocking(False)
        except OSError as err:
            listener.close()
            self.shutdown()
            raise ServerError(f"cannot listen on {self.host}:{self._requested_port}: "
                              f"{err.strerror or err}") from None
        self.port = listener.getsockname()[1]
        return listener

    def _start_core(self, listener) -> None:
        self._protocol.warm_up()
        gc.freeze()
        self._core = _Core(self._protocol, **self._core_options)
        self._loop_thread = threading.Thread(target=self._core.loop.run_forever,
                                             name="annodb-serve", daemon=True)
        self._loop_thread.start()

    def _start_workers(self) -> None:
        config = dict(self._options, path=self.path, **self._core_options)
        self._workers = [_Worker(i, config) for i in range(self.processes)]
        for worker in self._workers:
            worker.start()
        for worker in self._workers:
            if not worker.wait_ready(300):  # (a first run compiles the kernels)
                raise ServerError(f"worker process {worker.index} did not start (its error "
                                  "is above)")
        threading.Thread(target=self._watch_workers, name="annodb-workers",
                         daemon=True).start()

    def serve_forever(self) -> None:
        """Start (if needed), serve until SIGINT or SIGTERM (or shutdown()), then shut
        down: stop accepting, close every connection, close the database."""
        self.start()
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            while not self._stop.wait(0.5):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.shutdown()

    def _on_signal(self, signum, _frame) -> None:
        self._say(f"{signal.Signals(signum).name}: shutting down")
        self._stop.set()

    def shutdown(self, wait: float = 5.0) -> None:
        """Stop accepting, close every client connection, stop the workers and close the
        database. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        try:
            self._wake[1].send(b"x")
        except OSError:
            pass
        if self._acceptor is not None:
            self._acceptor.join(wait)
        for closable in (self._listener, *self._wake):
            if closable is not None:
                closable.close()
        core = self._core
        if core is not None:
            core.loop.call_soon_threadsafe(core.stop)
            deadline = time.monotonic() + wait
            while core.tasks and time.monotonic() < deadline:
                time.sleep(0.01)
            core.loop.call_soon_threadsafe(core.loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(max(deadline - time.monotonic(), 0.1))
            core.close()
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            worker.reap(wait)
        self._protocol.close()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def respond(self, line: bytes | str) -> bytes:
        """The reply line (with its newline) to one request line, without sockets (every
        call in one session: its qids go on from call to call)."""
        return self._protocol.respond(line, self._session)

    def _say(self, message: str) -> None:
        print(message, file=self._log or sys.stderr, flush=True)

    def _info(self) -> dict:
        """What `stats` reports of the transport."""
        if self._core is not None:
            return {"clients": self._core.clients, "process": os.getpid()}
        return {}

    # connections --------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        selector.register(self._wake[0], selectors.EVENT_READ)
        channels: dict[int, socket.socket] = {}
        try:
            while not self._stop.is_set():
                self._listen_to_workers(selector, channels)
                try:
                    events = selector.select()
                except (OSError, ValueError):
                    return
                for key, _ in events:
                    if key.fileobj is self._wake[0]:
                        if b"x" in self._wake[0].recv(64):
                            return
                        continue  # a worker was started again: listen to its channel
                    if key.data is not None:
                        self._heard(selector, key.data)
                        continue
                    try:
                        conn, _ = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        if self._stop.is_set():
                            return
                        time.sleep(0.05)   # e.g. out of file descriptors: back off, go on
                        continue
                    self._dispatch(conn)
        finally:
            selector.close()

    def _dispatch(self, conn: socket.socket) -> None:
        if self._core is not None:
            self._core.loop.call_soon_threadsafe(self._core.admit, conn)
            return
        with self._lock:
            live = [w for w in self._workers if w.poll() is None]
            busy = sum(w.connections for w in self._workers)
        if busy >= self.max_clients or not live:
            message = f"too many clients ({self.max_clients}); retry later" if live else \
                "the server's worker processes are restarting; retry"
            try:
                conn.setblocking(True)
                conn.settimeout(1.0)
                conn.sendall(self._protocol.refusal("connect", message))
            except OSError:
                pass
            conn.close()
            return
        worker = min(live, key=lambda w: w.connections)
        if not worker.hand(conn):
            self._say(f"annodb serve: worker process {worker.index} did not take a "
                      "connection")
        conn.close()  # (the worker has its own descriptor now)

    def _listen_to_workers(self, selector, channels: dict) -> None:
        """Have the selector hear each worker's current channel."""
        for worker in self._workers:
            if channels.get(worker.index) is not worker.channel:
                old = channels.pop(worker.index, None)
                if old is not None:
                    try:
                        selector.unregister(old)
                    except (KeyError, ValueError):
                        pass
                    old.close()
                selector.register(worker.channel, selectors.EVENT_READ, worker)
                channels[worker.index] = worker.channel

    def _heard(self, selector, worker: _Worker) -> None:
        """Messages from a worker: one CLOSED per connection it closed; nothing when it
        died (the watcher restarts it)."""
        assert worker.channel is not None   # (started)
        try:
            data = worker.channel.recv(4096)
        except OSError:
            data = b""
        if not data:
            try:
                selector.unregister(worker.channel)
            except (KeyError, ValueError):
                pass
            return
        with self._lock:
            worker.connections = max(worker.connections - data.count(CLOSED), 0)

    def _watch_workers(self) -> None:
        """Start a worker again when one dies."""
        while not self._stop.wait(0.5):
            for worker in self._workers:
                code = worker.poll()
                if code is None or self._stop.is_set():
                    continue
                self._say(f"annodb serve: worker process {worker.index} ended (exit "
                          f"{code}); starting it again")
                with self._lock:
                    worker.start()
                if worker.wait_ready(300):
                    try:
                        self._wake[1].send(b"w")
                    except OSError:
                        pass
