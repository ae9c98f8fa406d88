"""The language model: one client for any OpenAI-compatible endpoint (the only module that
imports openai).

    model = Model("gpt-4.1", api="responses")            # key from OPENAI_API_KEY
    model = Model("qwen3", base_url="http://127.0.0.1:8000/v1", api="chat")
    done = model.complete(instructions, [{"role": "user", "content": "..."}], schema)
    done.text, done.usage.total_tokens, done.latency_ms

`api="responses"` calls `client.responses.create` with `text.format` a JSON Schema;
`api="chat"` calls `client.chat.completions.create` with `response_format` a JSON Schema.
Rate limits (429), server errors (5xx), 408/409 and timeouts are retried with exponential
backoff (honouring `retry-after`), at most `max_retries` times, with jitter from a seeded
generator so a rerun waits the same. An endpoint that cannot be reached (refused, no such
host: a wrong --base-url) is tried CONNECT_RETRIES more times only, and connecting is
given CONNECT_TIMEOUT seconds (the SDK's own timeout), so it is one clear error within
seconds; anything else (an unknown model, or no Responses API at the endpoint: 404, whose
message suggests --api chat), or running out of retries, raises ModelError at once. Every
attempt is reported to `audit` (a callable taking one dict) with its latency and token
usage.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import time
from typing import Callable

import msgspec
import openai

from .errors import ModelError, UnreachableError

APIS = ("responses", "chat")
MAX_RETRIES = 8
BACKOFF = 1.0            # seconds before the first retry (doubling after each)
MAX_BACKOFF = 60.0       # longest wait between two attempts
MAX_RETRY_AFTER = 600.0  # longest `retry-after` honoured
TIMEOUT = 300.0          # seconds per HTTP request
CONNECT_TIMEOUT = 10.0   # seconds to connect to the endpoint
CONNECT_RETRIES = 2      # retries of an endpoint that cannot be reached
DUMMY_KEY = "none"       # sent to a --base-url endpoint when no key is given
RETRY_STATUS = frozenset({408, 409, 429})


class Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class Completion(msgspec.Struct):
    text: str
    usage: Usage
    latency_ms: float            # of the successful attempt
    attempts: int = 1
    response_id: str | None = None


def api_key_for(base_url: str | None, api_key: str | None = None) -> str:
    """The key to send: the one given, else OPENAI_API_KEY, else (only for a --base-url
    endpoint, which may need none) a dummy. ModelError when none fits."""
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    if base_url:
        return DUMMY_KEY
    raise ModelError("no API key: set OPENAI_API_KEY, or give --base-url for an endpoint "
                     "that needs none")


class Model:
    def __init__(self, name: str, *, api: str = "responses", base_url: str | None = None,
                 api_key: str | None = None, structured: bool = True, strict: bool = True,
                 timeout: float = TIMEOUT, max_retries: int = MAX_RETRIES,
                 backoff: float = BACKOFF, max_backoff: float = MAX_BACKOFF, seed: int = 0,
                 sleep: Callable[[float], None] = time.sleep,
                 audit: Callable[[dict], None] | None = None):
        if api not in APIS:
            raise ModelError(f"unknown API {api!r}: use one of {', '.join(APIS)}")
        if not name:
            raise ModelError("no model name given")
        self.name = name
        self.api = api
        self.base_url = base_url
        self.structured = structured
        self.strict = strict
        self.max_retries = max(int(max_retries), 0)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.audit = audit
        self._sleep = sleep
        self._random = random.Random(seed)
        try:
            self._client = openai.OpenAI(
                api_key=api_key_for(base_url, api_key), base_url=base_url,
                timeout=openai.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
                max_retries=0)
        except openai.OpenAIError as err:
            raise ModelError(f"cannot set up the {api} client: {err}") from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def complete(self, instructions: str, messages: list[dict], schema: dict | None = None,
                 schema_name: str = "decision", context: dict | None = None) -> Completion:
        """The model's answer to `instructions` + `messages` ({"role": "user"|"assistant",
        "content": text}), constrained to `schema` when given. `context` (e.g. the topic) is
        added to each audit record."""
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            record = {"kind": "model", **(context or {}), "api": self.api,
                      "model": self.name, "attempt": attempt,
                      "request": {"messages": len(messages),
                                  "last": messages[-1] if messages else None}}
            try:
                text, usage, response_id = self._call(instructions, messages, schema,
                                                      schema_name)
            except openai.APIStatusError as err:
                status = err.status_code
                retry = status in RETRY_STATUS or status >= 500
                self._report(record, started, error=_describe(err), status=status)
                if not retry or attempt > self.max_retries:
                    message = _give_up(err, attempt, retry)
                    if status == 404:
                        message += (f" (is there a model {self.name!r} at "
                                    f"{self._client.base_url}? check --model and --base-url"
                                    + ("; an endpoint without the Responses API answers "
                                       "404 too: try --api chat)" if self.api == "responses"
                                       else ")"))
                    raise ModelError(message) from None
                self._wait(attempt, _retry_after(err.response.headers), context)
                continue
            except openai.APIConnectionError as err:  # includes timeouts
                self._report(record, started, error=_describe(err))
                timeout = isinstance(err, openai.APITimeoutError)
                if attempt > (self.max_retries if timeout else
                              min(self.max_retries, CONNECT_RETRIES)):
                    if timeout:
                        raise ModelError(_give_up(err, attempt, True)) from None
                    raise UnreachableError(
                        f"cannot reach the model endpoint {self._client.base_url}: "
                        f"{_give_up(err, attempt, True)}; check --base-url") from None
                self._wait(attempt, None, context)
                continue
            except openai.OpenAIError as err:
                self._report(record, started, error=_describe(err))
                raise ModelError(_describe(err)) from None
            latency = (time.perf_counter() - started) * 1000
            self._report(record, started, response={"id": response_id, "text": text},
                         usage=msgspec.to_builtins(usage))
            return Completion(text, usage, round(latency, 3), attempt, response_id)

    # the two APIs -------------------------------------------------------------

    def _call(self, instructions, messages, schema, schema_name):
        if self.api == "responses":
            extra = {}
            if schema is not None and self.structured:
                extra["text"] = {"format": {"type": "json_schema", "name": schema_name,
                                            "schema": schema, "strict": self.strict}}
            r = self._client.responses.create(model=self.name, instructions=instructions,
                                              input=list(messages), **extra)
            text = r.output_text or ""
            if not text:
                text = _refusal(r)
            u = r.usage
            usage = Usage(_int(u, "input_tokens"), _int(u, "output_tokens"),
                          _int(u, "total_tokens")) if u is not None else Usage()
            return text, usage, getattr(r, "id", None)
        extra = {}
        if schema is not None and self.structured:
            extra["response_format"] = {"type": "json_schema", "json_schema": {
                "name": schema_name, "schema": schema, "strict": self.strict}}
        r = self._client.chat.completions.create(
            model=self.name, messages=[{"role": "system", "content": instructions},
                                       *messages], **extra)
        text = ""
        if r.choices:
            message = r.choices[0].message
            text = message.content or ""
            if not text and getattr(message, "refusal", None):
                text = f"(refusal) {message.refusal}"
        u = r.usage
        usage = Usage(_int(u, "prompt_tokens"), _int(u, "completion_tokens"),
                      _int(u, "total_tokens")) if u is not None else Usage()
        return text, usage, getattr(r, "id", None)

    # retries and the audit ----------------------------------------------------

    def _wait(self, attempt: int, retry_after: float | None, context: dict | None) -> None:
        """Sleep before retry number `attempt`: the server's retry-after when it gave one,
        else backoff * 2^(attempt-1) capped at max_backoff, times a jitter in [0.5, 1)."""
        if retry_after is not None:
            delay = min(retry_after, MAX_RETRY_AFTER)
        else:
            delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
            delay *= 0.5 + 0.5 * self._random.random()
        if self.audit is not None:
            self.audit({"kind": "model-retry", **(context or {}), "model": self.name,
                        "attempt": attempt, "wait_s": round(delay, 3)})
        if delay > 0:
            self._sleep(delay)

    def _report(self, record: dict, started: float, **fields) -> None:
        if self.audit is None:
            return
        record["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
        record.update(fields)
        self.audit(record)


def _int(obj, name: str) -> int:
    value = getattr(obj, name, None)
    return int(value) if isinstance(value, (int, float)) else 0


def _refusal(response) -> str:
    for item in getattr(response, "output", None) or []:
        for content in getattr(item, "content", None) or []:
            if getattr(content, "type", None) == "refusal":
                return f"(refusal) {getattr(content, 'refusal', '')}"
    return ""


def _retry_after(headers) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (a number or an HTTP date)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                continue
            seconds = when.timestamp() - time.time()
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None


def _describe(err: Exception) -> str:
    status = getattr(err, "status_code", None)
    message = getattr(err, "message", None) or str(err) or type(err).__name__
    kind = type(err).__name__
    return f"{kind} ({status}): {message}" if status is not None else f"{kind}: {message}"


def _give_up(err: Exception, attempts: int, retried: bool) -> str:
    if retried and attempts > 1:
        return f"{_describe(err)} (gave up after {attempts} attempts)"
    return _describe(err)
