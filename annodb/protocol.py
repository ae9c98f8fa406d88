"""The search server's protocol: newline-delimited JSON requests -> reply lines
(ARCHITECTURE.md "Interfaces").

Independent of sockets and processes (annodb/server.py carries it over TCP): `Protocol`
answers one request line for one `Session` (a client connection) at a time. It speaks the
protocol of Cottontail's `ssr-server` as the published Vole runner uses it, so an agent
written for that server runs unchanged. Exactly one reply line per request, in order:

    {"query": <the request>, "response": {...}, "time": <milliseconds>}

Requests and their responses:

    {"op":"query","query":G}    evaluate G (lenient parse: repairs are listed in "warnings";
                                `strict`: a malformed query is an error, as the reference
                                server answers), rank containers (the server's container,
                                or the request's "container", e.g. "note:" for the notes
                                kept apart from the collection) by SSR to the server's
                                depth, answer rank 1:
        {"op":"query","ok":true,"qid":"q0","rank":1,"docno":D,"snippet":S}
        {"op":"query","ok":true,"qid":"q0","done":true}             (nothing matched)
    {"op":"next","qid":Q}       the next rank of Q (same shape, "op":"next"), or "done":true
    {"op":"document","docno":D} {"op":"document","ok":true,"docno":D,"document":TEXT}: the
                                fields named by --fields joined with " ... ", or the whole
                                text; newlines become spaces; surrounding quotes on D ignored

qids are `q0, q1, ...` in the order a connection issued its queries, and name queries of
that connection only. (The reference numbers them over the server's life, serving one
client at a time, so its first client sees the same sequence.)

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
                                Writer.note): a document `note:Q@D` (Q optional: without
                                it `note:D:<address>`, a new one each time) annotated
                                `note:` and `note:Q` with D's first address as value:
                                {"op":"note","ok":true,"docno":"note:Q@D","target":D}
    {"op":"judge","topic":T,"docno":D,"grade":G,"text":R,"call":C}
                                commits, in one transaction, a judgment of document D for
                                topic T (grade G 0-3, made by model call C) and its note R
                                (see annodb.judgments): {"op":"judge","ok":true,"topic":T,
                                "docno":D,"grade":G,"note":"note:T:D","order":N,
                                "regraded":false}, N the judgment's discovery order
    {"op":"judgments","topic":T}
                                every judgment of topic T, never cut by a depth, in
                                discovery order, and its record: {"op":"judgments","ok":true,
                                "topic":T,"judgments":[{"docno","grade","order","call"}...],
                                "record":{"topic","stop","calls","judgments",...} or null}
    {"op":"topic","topic":T,"stop":S,"calls":C,"judgments":J,"base":B,"error":E}
                                commits topic T's record (S null while a session runs):
                                {"op":"topic","ok":true,"topic":T}

Every error has one shape, `{"op": <the op, or "parse">, "ok": false, "error": message}`:
a line that is not JSON (or not UTF-8, or not an object), a line longer than `max_line`,
an unknown op, a missing query, a query syntax error (the message names the offset), a
query over its time limit or its work budget, an unknown qid (never issued on this
connection, or evicted), a missing or unknown docno.

Each request reads its own snapshot, so documents committed by an `annodb ingest` running
beside the server are seen by the next query; no read transaction stays open between
requests. Writes (annotate, note) are write transactions of their own: queries never wait
for them (LMDB readers are never blocked). A query keeps only its ranked arrays (its
"state"), evicted least recently used beyond `max_queries` states or `max_query_bytes`
bytes over all the connections the process serves. A query's work is bounded inside
evaluation (annodb.gcl.Budget): `query_timeout` seconds and `max_postings` postings.

With a token every request must carry `"token": T` (else "unauthorized"); the token is
never echoed back.
"""

from __future__ import annotations

import hmac
import math
import os
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

import msgspec

from . import collection as _collection
from . import judgments as _judgments
from .errors import AnnodbError, QueryCostError, ShardLostError, StorageError
from .gcl import Budget, as_node, prepare
from .query import STRUCTURAL
from .rankers import RANKS
from .ranking import DEPTH, load_kernels

MAX_LINE = 1 << 20                  # bytes in one request line
QUERY_TIMEOUT = 30.0                # seconds a query may run
MAX_POSTINGS = 50_000_000           # postings a query may read plus intervals it may make
MAX_QUERIES = 10_000                # query states kept (least recently used are evicted)
MAX_QUERY_BYTES = 256 << 20         # bytes of query states kept
WRITE_TIMEOUT = 10.0                # seconds `annotate` waits for another writer
STATE_OVERHEAD = 256                # bytes counted per query state besides its arrays
OPS = ("query", "next", "document", "count", "stats", "annotate", "note", "judge",
       "judgments", "topic")
# the reads run again once when a shard's worker or actor ended under them (ShardLostError):
# they change nothing before their snapshot ("next" moves its query's position back)
RETRIED = ("query", "next", "document", "count", "stats", "judgments")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class ServerError(AnnodbError):
    """The server cannot start as configured (the message says what to change)."""


class _Refusal(Exception):
    """A request that gets an error reply (the message is the reply's "error")."""


def _error(op: str, message: str) -> dict:
    return {"op": op, "ok": False, "error": message}


class _States:
    """Ranked arrays of the queries issued, by (session, qid), evicted least recently used
    over all sessions."""

    def __init__(self, max_queries: int, max_bytes: int):
        self.max_queries = max(int(max_queries), 1)
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._states: OrderedDict[tuple, list] = OrderedDict()  # -> [ranking, next, bytes]
        self._bytes = 0
        self.issued = 0

    def add(self, session: "Session", ranking, position: int) -> str:
        size = STATE_OVERHEAD + sum(a.nbytes for a in (
            ranking.starts, ranking.ends, ranking.scores, ranking.cover_starts,
            ranking.cover_ends))
        with self._lock:
            qid = f"q{session.issued}"
            session.issued += 1
            self.issued += 1
            self._states[(session.id, qid)] = [ranking, position, size]
            self._bytes += size
            while len(self._states) > 1 and (len(self._states) > self.max_queries
                                             or self._bytes > self.max_bytes):
                _, (_, _, evicted) = self._states.popitem(last=False)
                self._bytes -= evicted
        return qid

    def advance(self, session: "Session", qid: str):
        """(ranking, index of the next rank) for `qid`, index None past the end."""
        with self._lock:
            entry = self._states.get((session.id, qid))
            if entry is None:
                raise _Refusal(f"Unknown qid {qid!r}: never issued on this connection, or "
                               "evicted to bound memory; run the query again")
            self._states.move_to_end((session.id, qid))
            ranking, position, _ = entry
            if position >= len(ranking):
                return ranking, None
            entry[1] = position + 1
            return ranking, position

    def back(self, session: "Session", qid: str, position: int) -> None:
        """Undo advance() to `position` (its hit could not be read), unless the query
        moved on since or is gone."""
        with self._lock:
            entry = self._states.get((session.id, qid))
            if entry is not None and entry[1] == position + 1:
                entry[1] = position

    def forget(self, session: "Session") -> None:
        """Drop a closed session's states."""
        with self._lock:
            for key in [k for k in self._states if k[0] == session.id]:
                self._bytes -= self._states.pop(key)[2]

    def info(self) -> dict:
        with self._lock:
            return {"queries_issued": self.issued, "queries_kept": len(self._states),
                    "query_bytes": self._bytes}


class Session:
    """One client connection: its own qids."""

    _ids = iter(range(1 << 62))
    _ids_lock = threading.Lock()

    def __init__(self):
        with Session._ids_lock:
            self.id = next(Session._ids)
        self.issued = 0


class Handle:
    """The served database, opened once: read-write when its directory is writable (so
    `annotate` and `note` commit without reopening anything: readers never wait), else, or
    when asked, read-only (writes are refused with a message saying why)."""

    def __init__(self, path, cache_bytes: int | None = None, readonly: bool = False,
                 ray: str | None = None, fan_out: str | None = None,
                 spin: float | None = None):
        self.write_error = None
        self.own = isinstance(path, (str, os.PathLike))
        if not self.own:  # an open database or collection (the Vole's in-process backend)
            self.db, self.path = path, path.path
            if path.readonly:
                self.write_error = f"{path.path} is open read-only"
            return
        self.path = path
        if ray is not None:  # a sharded collection on Ray actors ("local": a new cluster)
            from .shards import ray as ray_shards
            self.db = ray_shards.open(path, address=None if ray == "local" else ray)
            self.write_error = "the server reads the collection through Ray actors"
            return
        if readonly:
            self.db = _collection.open(path, readonly=True, cache_bytes=cache_bytes,
                                       fan_out=fan_out, spin=spin)
            self.write_error = "the server was started with --read-only"
            return
        try:
            self.db = _collection.open(path, create=False, cache_bytes=cache_bytes,
                                       fan_out=fan_out, spin=spin)
        except StorageError as err:
            if "no annodb database" in str(err):
                raise
            self.db = _collection.open(path, readonly=True, cache_bytes=cache_bytes,
                                       fan_out=fan_out, spin=spin)
            self.write_error = f"the server opened {path} read-only ({err})"

    def writable(self):
        if self.write_error is not None:
            raise _Refusal(f"cannot write: {self.write_error}")
        return self.db

    def close(self) -> None:
        if self.own:
            self.db.close()


class Protocol:
    """Answers request lines against one database (see the module docstring): `path` is
    its directory, or an open Database (then it is used, not opened or closed)."""

    def __init__(self, path: str, *, container: str = ":", fields: list[str] | None = None,
                 depth: int = DEPTH, token: str | None = None,
                 query_timeout: float | None = QUERY_TIMEOUT,
                 max_postings: int | None = MAX_POSTINGS, max_line: int = MAX_LINE,
                 max_queries: int = MAX_QUERIES, max_query_bytes: int = MAX_QUERY_BYTES,
                 cache_bytes: int | None = None, readonly: bool = False,
                 strict: bool = False, log=None, info=None, ray: str | None = None,
                 fan_out: str | None = None, spin: float | None = None):
        if depth < 1:
            raise ServerError(f"depth must be at least 1, not {depth}")
        if max_line < 1:
            raise ServerError(f"max_line must be at least 1, not {max_line}")
        if token is not None and not token:
            raise ServerError("the token cannot be empty")
        try:
            as_node(container)
        except AnnodbError as err:
            raise ServerError(f"container {container!r}: {err}") from None
        self.container = container
        self.fields = [f for f in (fields or []) if f]
        self.depth = int(depth)
        self.token = token
        self.query_timeout = query_timeout if query_timeout and query_timeout > 0 else None
        self.max_postings = max_postings if max_postings and max_postings > 0 else None
        self.max_line = int(max_line)
        self.strict = bool(strict)
        self._log = log
        # what the transport adds to stats' "server"
        self._info: Callable[[], dict] = info or (lambda: {})
        self._states = _States(max_queries, max_query_bytes)
        self._ops = {"query": self._query, "next": self._next, "document": self._document,
                     "count": self._count, "stats": self._stats, "annotate": self._annotate,
                     "note": self._note, "judge": self._judge, "judgments": self._judgments,
                     "topic": self._topic}
        if ray is not None and fan_out is not None:
            raise ServerError("choose shards on Ray actors (ray, --ray) or a fan-out from "
                              "the server's processes (fan_out, --fan-out), not both")
        # StorageError when missing
        self._handle = Handle(path, cache_bytes, readonly, ray, fan_out, spin)
        try:
            self._check_fields()
        except BaseException:
            self._handle.close()
            raise

    def _check_fields(self) -> None:
        """ServerError for a `fields` name no document of the database has (a typo, or
        `text` for `text:`'s short name misspelt): every `document` request would have
        answered with the whole text, saying nothing. A database without documents yet
        (an ingest may run beside the server) or without field statistics is not
        checked, nor a full path (`:meta:author:`)."""
        names = [f for f in self.fields if not f.startswith(":")]
        if not names:
            return
        with self._handle.db.read() as snap:
            known = snap.field_statistics() if hasattr(snap, "field_statistics") else None
            if not known or not snap.document_count():
                return
        have = {name for name, (docs, _) in known.items() if docs}
        for name in names:
            if name not in have and name + ":" not in have:
                raise ServerError(f"fields: no document has the field {name!r}; the "
                                  f"fields are: {', '.join(sorted(have)) or '(none)'}")

    def close(self) -> None:
        self._handle.close()

    def forget(self, session: Session) -> None:
        self._states.forget(session)

    def say(self, message: str) -> None:
        if self._log is not None:
            print(message, file=self._log, flush=True)

    def warm_up(self) -> None:
        """Load the compiled kernels before the first client (best effort)."""
        load_kernels(self._handle.db, self.container)

    # ------------------------------------------------------------------ requests

    def respond(self, line: bytes | str, session: Session) -> bytes:
        """The reply line (with its newline) to one request line."""
        started = time.perf_counter()
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogatepass")
        request, response = self._dispatch(line, session)
        return self.record(request, response, (time.perf_counter() - started) * 1000)

    def too_long(self) -> bytes:
        return self.record({"op": "parse"}, _error(
            "parse", f"request line longer than {self.max_line} bytes; the rest of the line "
            "was discarded"), 0.0)

    def timeout_reply(self, line: bytes, ms: float) -> bytes:
        """The reply to a request still running past its time limit."""
        try:
            request = _decode(line)
        except (msgspec.DecodeError, RecursionError):
            request = {}
        op = request.get("op") if isinstance(request, dict) else None
        op = op if isinstance(op, str) else "query"
        echo = {k: v for k, v in request.items() if k != "token"} \
            if isinstance(request, dict) else {"op": op}
        return self.record(echo, _error(op, self.timed_out()), ms)

    def refusal(self, op: str, message: str) -> bytes:
        """A reply line for an error the transport finds (too many clients, a time limit)."""
        return self.record({"op": op} if op else {}, _error(op, message), 0.0)

    def record(self, request, response: dict, ms: float) -> bytes:
        record = {"query": request, "response": response, "time": round(ms, 3)}
        try:
            return _encode(record) + b"\n"
        except (msgspec.EncodeError, UnicodeError, OverflowError, TypeError, RecursionError):
            record["query"] = {"op": response.get("op", "parse")}
            return _encode(record) + b"\n"

    def _dispatch(self, line: bytes, session: Session) -> tuple[object, dict]:
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
            try:
                return echo, handler(request, session)
            except ShardLostError:
                if name not in RETRIED:
                    raise
                return echo, handler(request, session)  # (the next snapshot has a new one)
        except _Refusal as err:
            return echo, _error(name, str(err))
        except QueryCostError as err:
            if "time limit" in str(err):
                return echo, _error(name, self.timed_out())
            return echo, _error(name, str(err))
        except AnnodbError as err:
            return echo, _error(name, str(err))
        except Exception as err:
            self.say(f"annodb serve: internal error on {_shown(echo)}:\n"
                     + traceback.format_exc())
            return echo, _error(name, f"internal error: {type(err).__name__}: {err}")

    def timed_out(self) -> str:
        return (f"query timed out after {self.query_timeout:g}s (the server's time limit); "
                "make it more selective")

    def _budget(self) -> Budget:
        return Budget(self.max_postings, self.query_timeout)

    # ------------------------------------------------------------------ ops

    def _query(self, request: dict, session: Session) -> dict:
        text = _query_text(request)
        container = request.get("container", self.container)
        if not isinstance(container, str) or not container:
            raise _Refusal(f"container must be a feature name or query (e.g. \"note:\"), "
                           f"not {_shown(container)}")
        how = request.get("rank", "ssr")
        if not isinstance(how, str):
            raise _Refusal(f"rank must be a string (one of {', '.join(RANKS)}), not "
                           f"{_json_kind(how)}")
        with self._handle.db.read() as snap:
            ranking = snap.rank(text, depth=self.depth, container=container,
                                lenient=not self.strict, budget=self._budget(), rank=how)
            first = ranking.hit(0, snapshot=snap) if len(ranking) else None
        ranking = replace(ranking, snapshot=None)
        qid = self._states.add(session, ranking, 1 if first is not None else 0)
        return query_response(qid, ranking, first)

    def _next(self, request: dict, session: Session) -> dict:
        qid = request.get("qid")
        if not isinstance(qid, str) or not qid:
            raise _Refusal("Missing qid: give the \"qid\" of an earlier query")
        ranking, index = self._states.advance(session, qid)
        if index is None:
            return {"op": "next", "ok": True, "qid": qid, "done": True}
        try:
            with self._handle.db.read() as snap:
                hit = ranking.hit(index, snapshot=snap)
        except ShardLostError:     # (run again: see RETRIED)
            self._states.back(session, qid, index)
            raise
        return hit_response("next", qid, hit)

    def _document(self, request: dict, session: Session) -> dict:
        docno = _docno(request)
        with self._handle.db.read() as snap:
            doc = _find(snap, docno)
        return {"op": "document", "ok": True, "docno": doc.docno,
                "document": doc.display_text(self.fields)}

    def _count(self, request: dict, session: Session) -> dict:
        text = _query_text(request)
        with self._handle.db.read() as snap:
            node, warnings = prepare(snap, text, lenient=not self.strict)
            count = len(snap.query(node, budget=self._budget()))
        response = {"op": "count", "ok": True, "count": count}
        if warnings:
            response["warnings"] = list(warnings)
        return response

    def _stats(self, request: dict, session: Session) -> dict:
        stats = self._handle.db.stats().as_dict()
        return {"op": "stats", "ok": True, **stats,
                "server": {"depth": self.depth, "container": self.container,
                           "fields": self.fields, "writes": self._handle.write_error is None,
                           **self._states.info(), **self._info()}}

    def _annotate(self, request: dict, session: Session) -> dict:
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
        db = self._handle.writable()
        with db.write(timeout=WRITE_TIMEOUT) as w:
            doc = _find(w, docno)
            w.annotate(feature, doc.start, doc.end, float(value))
        return {"op": "annotate", "ok": True, "docno": doc.docno, "feature": feature,
                "value": value}

    def _note(self, request: dict, session: Session) -> dict:
        docno = _docno(request)
        text = request.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _Refusal("Missing text: give \"text\", the note to attach")
        qid = request.get("qid")
        if qid is not None and (not isinstance(qid, str) or not qid or
                                any(c.isspace() or c in '()"' for c in qid)):
            raise _Refusal(f"qid must be a string without spaces, parentheses or quotes "
                           f"(it becomes part of a feature name), not {_shown(qid)}")
        db = self._handle.writable()
        with db.write(timeout=WRITE_TIMEOUT) as w:
            doc = _find(w, docno)
            added = _judgments.note(w, doc, text, qid)
        return {"op": "note", "ok": True, "docno": added.docno, "target": doc.docno}

    def _judge(self, request: dict, session: Session) -> dict:
        topic = _topic_of(request)
        docno = _docno(request)
        grade = request.get("grade")
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 3:
            raise _Refusal(f"grade must be 0, 1, 2 or 3, not {_shown(grade)}")
        text = request.get("text", "")
        if not isinstance(text, str):
            raise _Refusal(f"text must be a string (the reason), not {_json_kind(text)}")
        call = _count_field(request, "call")
        db = self._handle.writable()
        with db.write(timeout=WRITE_TIMEOUT) as w:
            done = _judgments.judge(w, topic, docno, grade, text, call)
        return {"op": "judge", "ok": True, "topic": topic, "docno": done.docno,
                "grade": grade, "note": done.note, "order": done.order,
                "regraded": done.regraded}

    def _judgments(self, request: dict, session: Session) -> dict:
        topic = _topic_of(request)
        with self._handle.db.read() as snap:
            found, record = _judgments.judgments(snap, topic)
        return {"op": "judgments", "ok": True, "topic": topic,
                "judgments": msgspec.to_builtins(found),
                "record": None if record is None else msgspec.to_builtins(record)}

    def _topic(self, request: dict, session: Session) -> dict:
        topic = _topic_of(request)
        stop, error = request.get("stop"), request.get("error")
        for name, value in (("stop", stop), ("error", error)):
            if value is not None and not isinstance(value, str):
                raise _Refusal(f"{name} must be a string or null, not {_json_kind(value)}")
        state = _judgments.Record(topic, stop, _count_field(request, "calls"),
                                  _count_field(request, "judgments"),
                                  _count_field(request, "base"), error)
        db = self._handle.writable()
        with db.write(timeout=WRITE_TIMEOUT) as w:
            _judgments.record(w, state)
        return {"op": "topic", "ok": True, "topic": topic}


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


def _topic_of(request: dict) -> str:
    topic = request.get("topic")
    if topic is None or topic == "":
        raise _Refusal("Missing topic: give \"topic\", e.g. \"2024-105741\"")
    try:
        return _judgments.check_topic(topic)
    except AnnodbError as err:
        raise _Refusal(str(err)) from None


def _count_field(request: dict, name: str) -> int:
    value = request.get(name, 0)
    try:
        return _judgments.check_count(value, name)
    except AnnodbError:
        raise _Refusal(f"{name} must be a whole number from 0 to 2**53 - 1, not "
                       f"{_shown(value)}") from None


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
