"""A fake OpenAI-compatible HTTP server on 127.0.0.1 that plays scripted answers.

    with FakeOpenAI([answer1, answer2, ...]) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="x")

It serves POST /v1/responses and POST /v1/chat/completions with well-formed API JSON. Each
request takes the next item of the script:

    a str            the model's output text, verbatim (so malformed JSON is easy)
    a dict           the output text is this, encoded as JSON
    Status(code, message, headers)
                     an HTTP error with the API's error body (e.g. a 429 with retry-after)
    a callable       called with the Request; returns any of the above

A request past the end of the script gets a 400 ("script exhausted"), which the client does
not retry, so a test that runs longer than scripted fails plainly. `requests` keeps every
request (path, headers, JSON body) for assertions. Token usage is deterministic: a quarter
of the request and answer lengths. A client that went away before its answer was sent (a
killed `vole run`) is not an error here.

`Replay` is a script item that plays decisions a real model made, as
../shared/tools/replay_decisions.py does: model call N of a topic (N = the answers in the
conversation sent) gets that topic's decision N, verbatim; a `next` names the qid this
runner gave the same query (the k-th query's qid in the log -> the k-th qid shown in this
conversation); past the last decision, a query that matches nothing.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Status:
    code: int
    message: str = "scripted error"
    headers: dict = field(default_factory=dict)


@dataclass
class Request:
    path: str
    headers: dict
    body: dict

    @property
    def messages(self) -> list[dict]:
        """The conversation sent: Responses `input`, or Chat messages after the system one."""
        if "input" in self.body:
            return list(self.body["input"])
        return [m for m in self.body.get("messages", []) if m.get("role") != "system"]

    @property
    def instructions(self) -> str:
        if "instructions" in self.body:
            return self.body["instructions"]
        return next((m["content"] for m in self.body.get("messages", [])
                     if m.get("role") == "system"), "")

    @property
    def last(self) -> str:
        """The text of the last message (the latest observation)."""
        messages = self.messages
        return messages[-1]["content"] if messages else ""


class FakeOpenAI:
    def __init__(self, script=()):
        self.script = list(script)
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._calls = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                fake._handle(self)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def add(self, *items) -> None:
        with self._lock:
            self.script.extend(items)

    def start(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # serving ------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        request = Request(h.path, {k.lower(): v for k, v in h.headers.items()}, body)
        with self._lock:
            self.requests.append(request)
            item = self.script[self._calls] if self._calls < len(self.script) else \
                Status(400, "fake: script exhausted")
            self._calls += 1
        if callable(item):
            item = item(request)
        if h.path.rstrip("/") not in ("/v1/responses", "/v1/chat/completions"):
            item = Status(404, f"fake: no endpoint {h.path}")
        if isinstance(item, Status):
            kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}.get(
                item.code, "server_error")
            self._send(h, item.code, {"error": {"message": item.message, "type": kind,
                                                "param": None, "code": kind}}, item.headers)
            return
        text = item if isinstance(item, str) else json.dumps(item)
        usage_in, usage_out = max(len(raw) // 4, 1), max(len(text) // 4, 1)
        model = body.get("model", "fake")
        n = self._calls
        if h.path.rstrip("/") == "/v1/responses":
            payload = {
                "id": f"resp_{n}", "object": "response", "created_at": 1_700_000_000 + n,
                "status": "completed", "model": model, "error": None,
                "incomplete_details": None, "instructions": body.get("instructions"),
                "output": [{"type": "message", "id": f"msg_{n}", "status": "completed",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": text,
                                         "annotations": []}]}],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "temperature": 1.0, "top_p": 1.0, "text": body.get("text"),
                "usage": {"input_tokens": usage_in, "output_tokens": usage_out,
                          "total_tokens": usage_in + usage_out,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}},
            }
        else:
            payload = {
                "id": f"chatcmpl-{n}", "object": "chat.completion",
                "created": 1_700_000_000 + n, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": text,
                                         "refusal": None}}],
                "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out,
                          "total_tokens": usage_in + usage_out},
            }
        self._send(h, 200, payload, {})

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, payload: dict, headers: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            h.send_response(code)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                h.send_header(name, str(value))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass        # the client went away (killed)


OVER = {"latest_judgment": {"docno": None, "relevance": 0, "reason": "replay over",
                            "learned": ""},
        "action": {"op": "query", "query": "zzzreplayoverzzz", "reason": "replay over"}}


class Replay:
    """Plays logged decisions (see the module docstring). `decisions`: {topic: [decision,
    ...]} in call order; `qids`: {topic: [the qids the logged run's queries were given, in
    order]}. `answered` counts the answers given per (topic, call), so a test sees whether
    a call was asked twice; `before(topic, call)`, when set, is called first and may
    return a Status (then no decision is given out)."""

    def __init__(self, decisions: dict[str, list[dict]], qids: dict[str, list[str]]):
        self.decisions = decisions
        self.qids = qids
        self.answered: Counter = Counter()
        self.before = None
        self._lock = threading.Lock()

    @staticmethod
    def locate(request: Request) -> tuple[str | None, int, list[str]]:
        """(topic, 0-based call, the qids shown in this conversation in order)."""
        messages = request.messages
        first = messages[0]["content"] if messages else ""
        calls = sum(1 for m in messages if m["role"] == "assistant")
        shown = " ".join(m["content"] for m in messages if m["role"] != "assistant")
        seen = list(dict.fromkeys(re.findall(r"\bq[0-9]+\b", shown)))
        m = re.match(r"Topic (\S+):", first)
        if m:
            return m.group(1), calls, seen
        try:
            return json.loads(first)["qid"], calls, seen
        except (ValueError, KeyError, TypeError):
            return None, calls, seen

    def __call__(self, request: Request):
        topic, n, seen = self.locate(request)
        if self.before is not None:
            status = self.before(topic, n + 1)
            if status is not None:
                return status
        sequence = self.decisions.get(topic, [])
        if n >= len(sequence):
            return json.loads(json.dumps(OVER))
        d = json.loads(json.dumps(sequence[n]))
        action = d.get("action") or {}
        logged = self.qids.get(topic, [])
        if action.get("op") == "next" and action.get("qid") in logged:
            k = logged.index(action["qid"])
            if k < len(seen):
                action["qid"] = seen[k]
        with self._lock:
            self.answered[(topic, n + 1)] += 1
        return d


def load_replay(folder) -> Replay:
    """A Replay of the decisions.jsonl and qids.jsonl in `folder` (the published run's
    layout: {"topic", "call", "attempt", "decision"}, the last attempt of a call wins)."""
    import os
    calls: dict[str, dict[int, dict]] = {}
    with open(os.path.join(folder, "decisions.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            calls.setdefault(e["topic"], {})[e["call"]] = e["decision"]
    qids = {}
    with open(os.path.join(folder, "qids.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            qids[e["topic"]] = e["qids"]
    return Replay({t: [c[k] for k in sorted(c)] for t, c in calls.items()}, qids)
