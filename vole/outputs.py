"""The files a run writes under `--out DIR`:

    vole.run            TREC run: per topic, the judged documents by grade, then discovery
                        order (rewritten by each run; a resumed topic lists its earlier
                        judgments too)
    conversation.jsonl  per topic, every transcript entry as it happens:
                        {"run","topic","step","role","content","at"}
    audit.jsonl         every model request/response (usage, latency, attempt) and every
                        backend request/response (time in ms), each with the topic it
                        was made for: {"run","kind","topic",...,"at"}
    summary.jsonl       one line per topic: calls, judgments, grade-3 count, stop reason

The JSONL logs are appended to (a rerun adds to them; "run" tells the runs apart) and
flushed after every line, so a run killed at any point keeps everything up to its last
step. A rerun reads the conversation back (`history`) to continue a topic cut short; a
line cut short by a kill is passed over (and the next run starts on a new line).

A conversation entry of the model's answer carries "call" (the topic's model call); one of
an observation carries "state" (what the agent keeps to continue: agent.Agent.step); the
system entry, "calls_before" and "protocol".
"""

from __future__ import annotations

import datetime
import os
from typing import IO

import msgspec

from . import runfile

RUN = "vole.run"
CONVERSATION = "conversation.jsonl"
AUDIT = "audit.jsonl"
SUMMARY = "summary.jsonl"

_encode = msgspec.json.Encoder().encode


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


class Outputs:
    def __init__(self, directory: str):
        self.directory = directory
        self.run_id = now()
        self.current: str | None = None     # the topic being run
        os.makedirs(directory, exist_ok=True)
        self._files: list[IO[str]] = []
        self._history: dict[str, list[dict]] | None = None
        self._run = self._open(RUN, "w")
        _end_line(self.path(CONVERSATION))
        self._conversation = self._open(CONVERSATION, "a")
        self._audit = self._open(AUDIT, "a")
        self._summary = self._open(SUMMARY, "a")

    def _open(self, name: str, mode: str):
        f = open(os.path.join(self.directory, name), mode, encoding="utf-8")
        self._files.append(f)
        return f

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def history(self, qid: str) -> list[dict]:
        """The conversation entries logged for topic `qid` before this run, in order."""
        if self._history is None:
            self._history = {}
            for entry in read_jsonl(self.path(CONVERSATION)):
                if entry.get("run") != self.run_id and isinstance(entry.get("topic"), str):
                    self._history.setdefault(entry["topic"], []).append(entry)
        return self._history.get(qid, [])

    def begin(self, qid: str) -> None:
        """A topic starts: later audit records are about it."""
        self.current = qid

    def audit(self, record: dict) -> None:
        self._line(self._audit, {"run": self.run_id, "topic": self.current, **record,
                                 "at": now()})

    def conversation(self, entry: dict) -> None:
        self._line(self._conversation, {"run": self.run_id, **entry, "at": now()})

    def topic(self, summary, ranked: list[str]) -> None:
        """A finished topic: its run lines and its summary line."""
        runfile.write_run(self._run, summary.qid, ranked)
        self._run.flush()
        self._line(self._summary, {"run": self.run_id, **msgspec.to_builtins(summary)})

    def _line(self, f, record: dict) -> None:
        f.write(_encode(record).decode() + "\n")
        f.flush()

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_decode = msgspec.json.Decoder().decode


def read_jsonl(path: str):
    """The objects of a JSONL log, in order; a line that is not one (cut short by a kill)
    is passed over. Nothing when the file does not exist."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for line in f:
            try:
                value = _decode(line)
            except msgspec.DecodeError:
                continue
            if isinstance(value, dict):
                yield value


def _end_line(path: str) -> None:
    """End a log's last line if a kill cut it short, so the next line starts clean."""
    try:
        with open(path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
    except FileNotFoundError:
        pass
