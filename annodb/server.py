"""The SSR search server (`annodb serve`): newline-delimited JSON over TCP (DESIGN §7).

It speaks the protocol of Cottontail's `ssr-server` as the published Vole runner uses it, so
an agent written for that server runs unchanged. One request per line (`\\r` ignored), exactly
one reply line per request, in order:

    {"query": <the request>, "response": {...}, "time": <milliseconds>}

Requests and their responses:

    {"op":"query","query":G}    evaluate G (lenient parse: repairs are listed in "warnings"),
                                rank containers by SSR to the server's depth, answer rank 1:
        {"op":"query","ok":true,"qid":"q0","rank":1,"docno":D,"snippet":S}
        {"op":"query","ok":true,"qid":"q0","done":true}             (nothing matched)
    {"op":"next","qid":Q}       the next rank of Q (same shape, "op":"next"), or "done":true
    {"op":"document","docno":D} {"op":"document","ok":true,"docno":D,"document":TEXT}: the
                                fields named by --fields joined with " ... ", or the whole
                                text; newlines become spaces; surrounding quotes on D ignored

Extensions (additive; the reference server answers "Unknown op" to them):

    {"op":"count","query":G}    {"op":"count","ok":true,"count":N} (+ "warnings")
    {"op":"stats"}              {"op":"stats","ok":true,"documents":..,"tokens":..,
                                 "features":..,"addresses":..,"erased_ranges":..,
                                 "path":..,"size_bytes":..,"server":{...}}
    {"op":"annotate","docno":D,"feature":F,"value":V}
                                commits F = V (default 0) over the whole document D:
                                {"op":"annotate","ok":true,"docno":D,"feature":F,"value":V}
    {"op":"note","docno":D,"text":T,"qid":Q}
                                commits a searchable note linked to document D (see
                                Writer.note): a document `note:Q:D` (Q optional) annotated
                                `note:` and `note:Q` with D's first address as value:
                                {"op":"note","ok":true,"docno":"note:Q:D","target":D}

Every error has one shape, `{"op": <the op, or "parse">, "ok": false, "error": message}`,
and the connection stays open: a line that is not JSON (or not UTF-8, or not an object),
a line longer than `max_line` (the rest of it is discarded), an unknown op, a missing query,
a query syntax error (the message names the offset), a query over the time limit, an unknown
qid (never issued, or evicted), a missing or unknown docno.

Each request reads its own snapshot, so documents committed by an `annodb ingest` running
beside the server are seen by the next query; no read transaction stays open between
requests. A query keeps only its ranked arrays (its "state"), evicted least recently used
beyond `max_queries` states or `max_query_bytes` bytes. Clients are served on their own
threads and queries run on a pool of workers (the numba kernels release the GIL); a query
over `query_timeout` seconds is answered with an error while its worker finishes in the
background. The database is opened read-only; the first `annotate` reopens it read-write.

Listening on anything but loopback requires a token, and with a token every request must
carry `"token": T` (else "unauthorized"); the token is never echoed back.
"""

from __future__ import annotations

import gc
import hmac
import ipaddress
import math
import os
import queue
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections import OrderedDict
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import replace

import msgspec

from . import database as _database
from .errors import AnnodbError, QueryError, StorageError, WriterBusyError
from .gcl import as_node
from .query import STRUCTURAL
from .ranking import DEPTH, rank

MAX_LINE = 1 << 20                  # bytes in one request line
QUERY_TIMEOUT = 30.0                # seconds a query may run before it is answered with an error
MAX_QUERIES = 10_000                # query states kept (least recently used are evicted)
MAX_QUERY_BYTES = 256 << 20         # bytes of query states kept
MAX_CLIENTS = 512                   # connections served at once
WRITE_TIMEOUT = 10.0                # seconds `annotate` waits for another writer
SEND_TIMEOUT = 60.0                 # seconds a reply may wait for a client that does not read
RECV_SIZE = 1 << 16
STATE_OVERHEAD = 256                # bytes counted per query state besides its arrays
OPS = ("query", "next", "document", "count", "stats", "annotate", "note")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class ServerError(AnnodbError):
    """The server cannot start as configured (the message says what to change)."""


class _Refusal(Exception):
    """A request that gets an error reply (the message is the reply's "error")."""


def _error(op: str, message: str) -> dict:
    return {"op": op, "ok": False, "error": message}


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address."""
    if host in ("", "*"):
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ServerError(f"cannot resolve host {host!r}: {err.strerror}") from None
    return bool(infos) and all(
        ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


# ---------------------------------------------------------------- the database handle


class _Handle:
    """The server's database: read-only until the first write asks for read-write.

    A process may hold one LMDB environment per path, so upgrading means closing the
    read-only one and opening it read-write; that waits until no request is reading."""

    def __init__(self, path: str):
        self.path = path
        self._db = _database.open(path, readonly=True)
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        self._closed = False

    @contextmanager
    def reading(self):
        """The open Database, guaranteed to stay open while the block runs."""
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            if self._closed:
                raise StorageError("the server is shutting down")
            self._readers += 1
            db = self._db
        try:
            yield db
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    def writable(self, timeout: float) -> _database.Database:
        """The Database opened read-write (reopening it so the first time)."""
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            if self._closed:
                raise StorageError("the server is shutting down")
            if not self._db.readonly:
                return self._db
            self._exclusive = True
            try:
                if not self._cond.wait_for(lambda: not self._readers, timeout):
                    raise WriterBusyError(
                        f"{self.path}: queries kept the database busy for {timeout:g}s; "
                        "retry the annotation")
                self._db.close()
                try:
                    self._db = _database.open(self.path, create=False)
                except BaseException:
                    self._db = _database.open(self.path, readonly=True)
                    raise
                return self._db
            finally:
                self._exclusive = False
                self._cond.notify_all()

    def close(self, wait: float) -> None:
        """Close once no request is reading (a query still running past its time limit
        after `wait` seconds keeps it open; the process's exit releases it)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if self._cond.wait_for(lambda: not self._readers, wait):
                self._db.close()


# ---------------------------------------------------------------- query states


class _States:
    """Ranked arrays of the queries issued, by qid, evicted least recently used."""

    def __init__(self, max_queries: int, max_bytes: int):
        self.max_queries = max(int(max_queries), 1)
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._states: OrderedDict[str, list] = OrderedDict()  # qid -> [ranking, next, bytes]
        self._bytes = 0
        self._issued = 0

    def add(self, ranking, position: int) -> str:
        size = STATE_OVERHEAD + sum(a.nbytes for a in (
            ranking.starts, ranking.ends, ranking.scores, ranking.cover_starts,
            ranking.cover_ends))
        with self._lock:
            qid = f"q{self._issued}"
            self._issued += 1
            self._states[qid] = [ranking, position, size]
            self._bytes += size
            while len(self._states) > 1 and (len(self._states) > self.max_queries
                                             or self._bytes > self.max_bytes):
                _, (_, _, evicted) = self._states.popitem(last=False)
                self._bytes -= evicted
        return qid

    def advance(self, qid: str):
        """(ranking, index of the next rank) for `qid`, index None past the end."""
        with self._lock:
            entry = self._states.get(qid)
            if entry is None:
                raise _Refusal(f"Unknown qid {qid!r}: never issued, or evicted to bound "
                               "memory; run the query again")
            self._states.move_to_end(qid)
            ranking, position, _ = entry
            if position >= len(ranking):
                return ranking, None
            entry[1] = position + 1
            return ranking, position

    def info(self) -> dict:
        with self._lock:
            return {"queries_issued": self._issued, "queries_kept": len(self._states),
                    "query_bytes": self._bytes}


# ---------------------------------------------------------------- workers


class _Workers:
    """Daemon threads running queries, so a query past its time limit can be abandoned
    (it finishes in the background) without holding up its client or the process's exit."""

    def __init__(self, count: int):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"annodb-query-{i}",
                                          daemon=True) for i in range(count)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as err:  # handed to the waiting client thread
                future.set_exception(err)
            del fn, future, job

    def run(self, fn, timeout: float | None):
        """fn() on a worker; TimeoutError after `timeout` seconds (None: no limit)."""
        future: Future = Future()
        self._jobs.put((fn, future))
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self, wait: float) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + wait
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0))


# ---------------------------------------------------------------- the server


class Server:
    """An SSR search server over one database.

        server = Server("memory.db").start()      # listens on a free loopback port
        print(server.port)
        ...
        server.shutdown()

    `serve_forever()` (what `annodb serve` runs) starts it, blocks until SIGINT or SIGTERM,
    then shuts down cleanly. `respond(line)` is the protocol without the sockets.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, container: str = ":", fields: list[str] | None = None,
                 depth: int = DEPTH, token: str | None = None,
                 query_timeout: float | None = QUERY_TIMEOUT, max_line: int = MAX_LINE,
                 max_queries: int = MAX_QUERIES, max_query_bytes: int = MAX_QUERY_BYTES,
                 max_clients: int = MAX_CLIENTS, workers: int | None = None,
                 log=None):
        if depth < 1:
            raise ServerError(f"depth must be at least 1, not {depth}")
        if max_line < 1:
            raise ServerError(f"max_line must be at least 1, not {max_line}")
        if query_timeout is not None and query_timeout <= 0:
            query_timeout = None
        if token is not None and not token:
            raise ServerError("the token cannot be empty")
        if token is None and not is_loopback(host):
            raise ServerError(
                f"refusing to listen on {host!r} without a token: anyone who can reach it "
                "could read the database; give --token T (then every request must carry "
                "\"token\": T), or listen on 127.0.0.1")
        try:
            as_node(container)
        except QueryError as err:
            raise ServerError(f"container {container!r}: {err}") from None
        if path is None:
            path = os.environ.get("ANNODB_DB") or _database.DEFAULT_PATH
        self.path = os.fspath(path)
        self.host = host
        self.container = container
        self.fields = [f for f in (fields or []) if f]
        self.depth = int(depth)
        self.token = token
        self.query_timeout = query_timeout
        self.max_line = int(max_line)
        self.max_clients = int(max_clients)
        self._requested_port = int(port)
        self._log = log
        self._ops = {"query": self._query, "next": self._next, "document": self._document,
                     "count": self._count, "stats": self._stats, "annotate": self._annotate,
                     "note": self._note}
        self._states = _States(max_queries, max_query_bytes)
        self._db = _Handle(self.path)        # raises StorageError for a missing database
        self._workers = _Workers(workers or max(8, min(32, 4 * (os.cpu_count() or 1))))
        self._lock = threading.Lock()
        self._clients: dict[socket.socket, threading.Thread] = {}
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._acceptor: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self.port: int | None = None

    # life cycle ---------------------------------------------------------------

    def start(self) -> "Server":
        """Bind, listen, print `listening on port N` to stderr and accept clients on a
        background thread. Returns the server (its `.port` is then known)."""
        if self._listener is not None:
            return self
        if self._closed:
            raise ServerError("this server has been shut down")
        self._warm_up()
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
            listener.listen(128)
            listener.setblocking(False)
        except OSError as err:
            listener.close()
            self.shutdown()
            raise ServerError(f"cannot listen on {self.host}:{self._requested_port}: "
                              f"{err.strerror or err}") from None
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._wake = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake[0], selectors.EVENT_READ)
        self._acceptor = threading.Thread(target=self._accept_loop, name="annodb-accept",
                                          daemon=True)
        self._acceptor.start()
        self._say(f"listening on port {self.port}")
        return self

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
        """Stop accepting, close every client connection, wait for their threads (up to
        `wait` seconds) and close the database. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._wake is not None:
            try:
                self._wake[1].send(b"x")
            except OSError:
                pass
        if self._acceptor is not None:
            self._acceptor.join(wait)
        for closable in (self._selector, self._listener, *(self._wake or ())):
            if closable is not None:
                closable.close()
        with self._lock:
            clients = list(self._clients.items())
        for conn, _ in clients:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        for _, thread in clients:
            thread.join(max(deadline - time.monotonic(), 0))
        self._workers.close(max(deadline - time.monotonic(), 0))
        self._db.close(max(deadline - time.monotonic(), 0.1))

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def _say(self, message: str) -> None:
        out = self._log or sys.stderr
        print(message, file=out, flush=True)

    def _warm_up(self) -> None:
        """Run one query through every kernel so the first client does not pay for loading
        the compiled kernels (best effort), then freeze what exists now out of the cyclic
        garbage collector: numba's typing and code objects are long-lived, and a full
        collection over them paused a query for 50-80 ms every few thousand queries."""
        try:
            with self._db.reading() as db, db.read() as snap:
                rank(snap, '(+ (^ "a b" c) (... d e) (<< f (# 3)) (>> : g) (!< h :) (!> : i))',
                     depth=1, container=self.container)
        except Exception:
            pass
        gc.freeze()

    # connections --------------------------------------------------------------

    def _accept_loop(self) -> None:
        selector, listener, wake = self._selector, self._listener, self._wake[0]
        while not self._stop.is_set():
            try:
                events = selector.select()
            except (OSError, ValueError):
                return
            for key, _ in events:
                if key.fileobj is wake:
                    return
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    if self._stop.is_set():
                        return
                    time.sleep(0.05)   # e.g. out of file descriptors: back off, keep serving
                    continue
                self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        conn.setblocking(True)
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                            struct.pack("ll", int(SEND_TIMEOUT), 0))
        except OSError:
            pass
        with self._lock:
            closed = self._closed
            full = len(self._clients) >= self.max_clients
            if not (full or closed):
                thread = threading.Thread(target=self._serve_client, args=(conn,),
                                          name="annodb-client", daemon=True)
                self._clients[conn] = thread
        if closed:
            conn.close()
            return
        if full:
            try:
                conn.sendall(self._record({}, _error(
                    "connect", f"too many clients ({self.max_clients}); retry later"), 0.0))
            except OSError:
                pass
            conn.close()
            return
        thread.start()

    def _serve_client(self, conn: socket.socket) -> None:
        """Read lines, answer each; a line over max_line is answered once and the rest of
        it discarded. An unterminated last line is answered too (as the reference does)."""
        buf = bytearray()
        discarding = False
        try:
            while True:
                chunk = conn.recv(RECV_SIZE)
                if not chunk:
                    break
                buf += chunk
                start = 0
                while True:
                    end = buf.find(b"\n", start)
                    if end < 0:
                        break
                    line = bytes(buf[start:end])
                    start = end + 1
                    if discarding:
                        discarding = False
                        continue
                    conn.sendall(self.respond(line))
                del buf[:start]
                if discarding:
                    buf.clear()
                elif len(buf) > self.max_line:
                    buf.clear()
                    discarding = True
                    conn.sendall(self._too_long())
            if buf and not discarding:
                conn.sendall(self.respond(bytes(buf)))
        except OSError:
            pass               # the client went away (or shutdown closed it)
        except Exception:      # a bug: report it, drop this client, keep serving the others
            self._say("annodb serve: client error:\n" + traceback.format_exc())
        finally:
            with self._lock:
                self._clients.pop(conn, None)
            conn.close()

    def _too_long(self) -> bytes:
        return self._record({"op": "parse"}, _error(
            "parse", f"request line longer than {self.max_line} bytes; the rest of the line "
            "was discarded"), 0.0)

    # the protocol -------------------------------------------------------------

    def respond(self, line: bytes | str) -> bytes:
        """The reply line (with its newline) to one request line."""
        started = time.perf_counter()
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogatepass")
        request, response = self._dispatch(line)
        return self._record(request, response, (time.perf_counter() - started) * 1000)

    def _record(self, request, response: dict, ms: float) -> bytes:
        record = {"query": request, "response": response, "time": round(ms, 3)}
        try:
            return _encode(record) + b"\n"
        except (msgspec.EncodeError, UnicodeError, OverflowError, TypeError, RecursionError):
            record["query"] = {"op": response.get("op", "parse")}
            return _encode(record) + b"\n"

    def _dispatch(self, line: bytes) -> tuple[object, dict]:
        if len(line) > self.max_line:
            return {"op": "parse"}, _error(
                "parse", f"request line longer than {self.max_line} bytes")
        if b"\r" in line:
            line = line.replace(b"\r", b"")
        try:
            request = _decode(line)
        except msgspec.DecodeError as err:
            return {"op": "parse"}, _error("parse", f"not a JSON request: {err}")
        except RecursionError:
            return {"op": "parse"}, _error("parse", "not a JSON request: nested too deeply")
        if not isinstance(request, dict):
            return {"op": "parse"}, _error(
                "parse", f"a request is a JSON object, not {_json_kind(request)}")
        echo = request
        if "token" in request:
            echo = {k: v for k, v in request.items() if k != "token"}
        op = request.get("op")
        name = op if isinstance(op, str) else ""
        if self.token is not None:
            given = request.get("token")
            if not (isinstance(given, str) and hmac.compare_digest(
                    given.encode("utf-8", "surrogatepass"), self.token.encode())):
                return echo, _error(name, "unauthorized")
        handler = self._ops.get(name)
        if handler is None:
            what = "no \"op\"" if op is None else f"op {_shown(op)}"
            return echo, _error(name, f"Unknown op: the request has {what} "
                                      f"(one of {', '.join(OPS)})")
        try:
            return echo, handler(request)
        except _Refusal as err:
            return echo, _error(name, str(err))
        except TimeoutError:
            return echo, _error(name, f"query timed out after {self.query_timeout:g}s "
                                      "(the server's time limit); make it more selective")
        except AnnodbError as err:
            return echo, _error(name, str(err))
        except Exception as err:
            self._say(f"annodb serve: internal error on {_shown(echo)}:\n"
                      + traceback.format_exc())
            return echo, _error(name, f"internal error: {type(err).__name__}: {err}")

    # ops ----------------------------------------------------------------------

    def _query(self, request: dict) -> dict:
        text = _query_text(request)

        def work():
            with self._db.reading() as db, db.read() as snap:
                ranking = rank(snap, text, depth=self.depth, container=self.container,
                               lenient=True, rank=request.get("rank", "ssr"))
                first = ranking.hit(0, snapshot=snap) if len(ranking) else None
            return replace(ranking, snapshot=None), first

        ranking, first = self._workers.run(work, self.query_timeout)
        qid = self._states.add(ranking, 1 if first is not None else 0)
        return query_response(qid, ranking, first)

    def _next(self, request: dict) -> dict:
        qid = request.get("qid")
        if not isinstance(qid, str) or not qid:
            raise _Refusal("Missing qid: give the \"qid\" of an earlier query")
        ranking, index = self._states.advance(qid)
        if index is None:
            return {"op": "next", "ok": True, "qid": qid, "done": True}
        with self._db.reading() as db, db.read() as snap:
            hit = ranking.hit(index, snapshot=snap)
        return hit_response("next", qid, hit)

    def _document(self, request: dict) -> dict:
        docno = _docno(request)
        with self._db.reading() as db, db.read() as snap:
            doc = _find(snap, docno)
        return {"op": "document", "ok": True, "docno": doc.docno,
                "document": doc.display_text(self.fields)}

    def _count(self, request: dict) -> dict:
        text = _query_text(request)

        def work():
            node, warnings = as_node(text, lenient=True)
            with self._db.reading() as db, db.read() as snap:
                return len(snap.query(node)), warnings

        count, warnings = self._workers.run(work, self.query_timeout)
        response = {"op": "count", "ok": True, "count": count}
        if warnings:
            response["warnings"] = list(warnings)
        return response

    def _stats(self, request: dict) -> dict:
        with self._db.reading() as db:
            stats = db.stats().as_dict()
        with self._lock:
            clients = len(self._clients)
        return {"op": "stats", "ok": True, **stats,
                "server": {"clients": clients, "depth": self.depth,
                           "container": self.container, "fields": self.fields,
                           **self._states.info()}}

    def _annotate(self, request: dict) -> dict:
        docno = _docno(request)
        feature = request.get("feature")
        if not isinstance(feature, str) or not feature:
            raise _Refusal("Missing feature: give \"feature\", e.g. \"judgment:t1\"")
        if STRUCTURAL.isdisjoint(feature) or feature == ":":
            raise _Refusal(f"feature {_shown(feature)} is not a feature name a query can "
                           f"use: include one of {' '.join(sorted(STRUCTURAL))} and do not "
                           "use ':' alone (e.g. \"judgment:t1\")")
        value = request.get("value", 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(float(value)):
            raise _Refusal(f"value must be a finite number, not {_shown(value)}")
        db = self._db.writable(WRITE_TIMEOUT)
        with db.write(timeout=WRITE_TIMEOUT) as w:
            doc = _find(w, docno)
            w.annotate(feature, doc.start, doc.end, float(value))
        return {"op": "annotate", "ok": True, "docno": doc.docno, "feature": feature,
                "value": value}

    def _note(self, request: dict) -> dict:
        docno = _docno(request)
        text = request.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _Refusal("Missing text: give \"text\", the note to attach")
        qid = request.get("qid")
        if qid is not None and (not isinstance(qid, str) or not qid or
                                any(c.isspace() or c in '()"' for c in qid)):
            raise _Refusal(f"qid must be a string without spaces, parentheses or quotes "
                           f"(it becomes part of a feature name), not {_shown(qid)}")
        features = ("note:",) + ((f"note:{qid}",) if qid else ())
        db = self._db.writable(WRITE_TIMEOUT)
        with db.write(timeout=WRITE_TIMEOUT) as w:
            doc = _find(w, docno)
            added = w.note(doc.docno, text, features=features,
                           note_docno=f"note:{qid}:{doc.docno}" if qid else None)
        return {"op": "note", "ok": True, "docno": added.docno, "target": doc.docno}


# ---------------------------------------------------------------- helpers


def query_response(qid: str, ranking, first) -> dict:
    """The protocol's response to a query: its first hit, or done; repairs as warnings."""
    if first is None:
        response = {"op": "query", "ok": True, "qid": qid, "done": True}
    else:
        response = hit_response("query", qid, first)
    if ranking.warnings:
        response["warnings"] = list(ranking.warnings)
    return response


def hit_response(op: str, qid: str, hit) -> dict:
    """The protocol's response for one ranked hit."""
    return {"op": op, "ok": True, "qid": qid, "rank": hit.rank, "docno": hit.docno,
            "snippet": hit.snippet if hit.snippet is not None else ""}


def _query_text(request: dict) -> str:
    text = request.get("query")
    if text is None or text == "":
        raise _Refusal("Missing query: give \"query\", e.g. \"(^ goth rock)\"")
    if not isinstance(text, str):
        raise _Refusal(f"query must be a string (GCL text), not {_json_kind(text)}")
    return text


def _docno(request: dict) -> str:
    docno = request.get("docno")
    if docno is None or docno == "":
        raise _Refusal("Missing docno: give \"docno\"")
    if not isinstance(docno, str):
        raise _Refusal(f"docno must be a string, not {_json_kind(docno)}")
    return docno


def _find(snap, docno: str):
    """The document `docno` names, ignoring surrounding whitespace and double quotes."""
    doc = snap.find(docno)
    if doc is None:
        raise _Refusal(f"Unknown docno {_shown(docno)}")
    return doc


def _json_kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value),
                                                                       type(value).__name__)


def _shown(value) -> str:
    try:
        text = _encode(value).decode()
    except (msgspec.EncodeError, UnicodeError, OverflowError, TypeError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
