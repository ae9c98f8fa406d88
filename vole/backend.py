"""Where the Vole searches: annodb in this process (`Local`) or an `annodb serve` over TCP
(`Remote`). Both answer with the server's response objects (ARCHITECTURE.md "Interfaces"):

    query(gcl)    {"op":"query","ok":true,"qid":"q0","rank":1,"docno":D,"snippet":S}
                  or {"op":"query","ok":true,"qid":"q0","done":true}; repairs in "warnings"
    next(qid)     the same shape with "op":"next"
    document(d)   {"op":"document","ok":true,"docno":D,"document":TEXT}
    judge(topic, docno, grade, note, call)
                  commits, in one transaction, `judgment:<topic>` = grade over the document
                  and the note linked to it: {"op":"judge","ok":true,"docno":D,
                  "note":N,"order":K,"regraded":R}, K the judgment's discovery order
    judgments(topic)
                  ([{"docno","grade","order","call"}, ...] in discovery order, the topic's
                  record or None): everything judged for the topic, earlier runs too,
                  read back whole (never cut by a depth)
    topic(record) commits the topic's record {"topic","stop","calls","judgments","base",
                  "error"}: how its session stopped (stop None while it runs)

A request the backend refuses (a bad query, an unknown qid or docno) is an `"ok": false`
response with an "error", for the agent to show the model; a backend that cannot answer at
all (the server is gone) raises BackendError. Every request is reported to `audit` (a
callable taking one dict) with its response, its time and the fields of `context` (the
agent puts the model call there); `last` is the latest exchange as the reference server
writes it, {"query": <request>, "response": {...}, "time": ms}. qids name queries of one
`session` (a number that changes when a new connection begins): an earlier session's
qids are unknown to the next.

Judgments as memory (annodb.judgments has the layout): a judgment of `docno` for topic T
is the annotation `judgment:T` over the document with the grade as value, and a note
document `note:T:<docno>` (the reason and what was learned, searchable text, apart from the
collection) linked to it and carrying the judgment's discovery order and model call — in
process one write transaction, over TCP the server's `judge` op. Judging again replaces
the grade and the note and keeps the discovery order.
"""

from __future__ import annotations

import io
import os
import socket
import time
from typing import Callable

import msgspec

import annodb
from annodb.errors import AnnodbError
from annodb.protocol import Protocol, Session
from annodb.ranking import DEPTH

from .errors import BackendError

TIMEOUT = 300.0           # seconds to wait for a server reply
MAX_REPLY = 64 << 20      # bytes in one reply line
NOTE_PREFIX = "note:"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def is_note(docno: str) -> bool:
    """A judgment note's docno (databases written before notes were kept apart from the
    collection have them among its search results)."""
    return docno.startswith(NOTE_PREFIX)


class Backend:
    """What the agent needs from a search backend (see the module docstring)."""

    audit: Callable[[dict], None] | None = None
    last: dict | None = None
    session: int = 0
    context: dict = {}

    def query(self, gcl: str) -> dict:
        return self._request({"op": "query", "query": gcl})

    def next(self, qid: str) -> dict:
        return self._request({"op": "next", "qid": qid})

    def document(self, docno: str) -> dict:
        return self._request({"op": "document", "docno": docno})

    def judge(self, topic: str, docno: str, grade: int, note: str, call: int = 0) -> dict:
        return self._request({"op": "judge", "topic": topic, "docno": docno, "grade": grade,
                              "text": note, "call": call})

    def judgments(self, topic: str) -> tuple[list[dict], dict | None]:
        reply = self._request({"op": "judgments", "topic": topic})
        if not reply.get("ok"):
            raise BackendError(f"cannot read the judgments of topic {topic!r} back: "
                               f"{reply.get('error', 'refused')}")
        return reply["judgments"], reply.get("record")

    def topic(self, record: dict) -> dict:
        return self._request({"op": "topic", **record})

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, request: dict) -> dict:
        started = time.perf_counter()
        self.last = None
        try:
            response = self._answer(request)
        except BackendError as err:
            self._report(request, {"op": request.get("op"), "ok": False, "error": str(err)},
                         started)
            raise
        ms = self._report(request, response, started)
        if self.last is None:
            self.last = {"query": request, "response": response, "time": ms}
        return response

    def _answer(self, request: dict) -> dict:
        raise NotImplementedError

    def _report(self, request: dict, response: dict, started: float) -> float:
        ms = round((time.perf_counter() - started) * 1000, 3)
        if self.audit is not None:
            self.audit({"kind": "backend", **self.context, "request": request,
                        "response": response, "time": ms})
        return ms


# ---------------------------------------------------------------- in this process


class Local(Backend):
    """annodb in this process, answering exactly as `annodb serve` does: the server's own
    protocol (annodb.protocol) without the sockets, one connection's qids q0, q1, ...
    `db` is an open Database or a path (then it is opened, not created, and closed with
    the backend; `readonly` when nothing will be judged)."""

    def __init__(self, db, *, depth: int = DEPTH, container: str = ":",
                 fields: list[str] | None = None, readonly: bool = False, audit=None):
        self._own = isinstance(db, (str, os.PathLike))  # else an open database or collection
        try:
            self.db = annodb.open(db, create=False, readonly=readonly) if self._own else db
            self._protocol = Protocol(self.db, depth=depth, container=container,
                                      fields=fields, query_timeout=None, max_postings=None)
        except AnnodbError as err:
            raise BackendError(str(err)) from None
        self._session = Session()
        self.audit = audit

    def close(self) -> None:
        if self._own:
            self.db.close()

    def _answer(self, request: dict) -> dict:
        if getattr(self.db, "_closed", False):
            raise BackendError(f"{self.db.path}: database is closed")
        return _decode(self._protocol.respond(_encode(request), self._session))["response"]


# ---------------------------------------------------------------- over TCP


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (or [v6]:PORT, or PORT alone for loopback) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", address
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise BackendError(f"bad server address {address!r}: expected HOST:PORT, "
                           "e.g. 127.0.0.1:4000")
    return host, number


class Remote(Backend):
    """A client of `annodb serve` at HOST:PORT. One connection, one request at a time; a
    broken connection is reopened once per request before giving up. qids name queries of
    one connection, so each connection is a new `session` (the agent issues an earlier
    query again when the model asks for its next result after a reconnect)."""

    def __init__(self, address: str, *, token: str | None = None,
                 timeout: float = TIMEOUT, audit=None):
        self.host, self.port = parse_address(address)
        self.address = address
        self.token = token
        self.timeout = timeout
        self.audit = audit
        self._sock: socket.socket | None = None
        self._reader: io.BufferedReader | None = None
        self._connect()

    def _connect(self) -> None:
        self.close()
        self.session += 1
        try:
            self._sock = socket.create_connection((self.host, self.port), self.timeout)
        except OSError as err:
            raise BackendError(f"cannot reach the server at {self.host}:{self.port}: "
                               f"{err.strerror or err}") from None
        self._reader = self._sock.makefile("rb")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _answer(self, request: dict) -> dict:
        line = _encode({**request, "token": self.token} if self.token else request) + b"\n"
        for attempt in (1, 2):
            try:
                if self._sock is None:
                    self._connect()
                assert self._sock is not None and self._reader is not None   # (connected)
                self._sock.sendall(line)
                reply = self._reader.readline(MAX_REPLY)
                if not reply.endswith(b"\n"):
                    raise ConnectionError("the server closed the connection")
                break
            except (OSError, ValueError) as err:  # ValueError: I/O on a closed file
                self.close()
                if attempt == 2:
                    raise BackendError(f"the server at {self.host}:{self.port} does not "
                                       f"answer: {err}") from None
        try:
            record = _decode(reply)
            response = record["response"]
            if not isinstance(response, dict):
                raise TypeError("response is not an object")
        except (msgspec.DecodeError, KeyError, TypeError) as err:
            raise BackendError(f"the server at {self.host}:{self.port} sent a reply that "
                               f"is not its protocol ({err}): {reply[:200]!r}") from None
        self.last = record
        return response


def open_backend(*, db: str | os.PathLike | None = None, server: str | None = None,
                 token: str | None = None, readonly: bool = False, audit=None) -> Backend:
    """The backend the command line asks for: `server` if given, else the database."""
    if server:
        return Remote(server, token=token, audit=audit)
    return Local(os.fspath(db) if db is not None else annodb.database.DEFAULT_PATH,
                 readonly=readonly, audit=audit)
