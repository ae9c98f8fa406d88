"""The Vole's loop, one topic at a time (ARCHITECTURE.md "Interfaces"):

    instructions + topic + append-only transcript -> model -> one decision -> execute
    -> observation appended -> check the limits

A decision may grade a document the model was shown (committed to the database at once,
with its reason, in one transaction: see backend.py) and then takes one action: query, next
or document. An answer that is not a valid decision, a query the backend refuses, or any
other backend refusal becomes the observation (it costs the call). Results already graded
for the topic (in this run or an earlier one, read back from the database at the start)
are skipped and listed in the observation. The loop stops at `max_calls` model calls or
`max_judgments` distinct graded documents (the last call's judgment is recorded, its
action not executed); a model or backend that fails for good stops the topic with that
reason, and the run goes on with the next topic.

Resumes are exact: each judgment is stored with its discovery order and the model call
that made it, and a topic's stop (reason, calls, judgments) is recorded in the database.
A rerun skips a topic that reached a limit (unless the limits are raised, or
`continue_topics` gives it max_calls more calls); a topic cut short (killed, or stopped by
an error) resumes with the calls it has left; the run file lists a topic's judgments by
grade, then discovery order, whichever session made them.

`protocol` picks the observations' form: ours (sentences and a status line) or the
published runner's ("reference": server replies as JSON lines, see prompts.Reference).
"""

from __future__ import annotations

import time
import traceback
from typing import Callable

import msgspec

from . import decision, prompts
from .backend import Backend, is_note
from .errors import BackendError, DecisionError, ModelError, UnreachableError
from .model import Model
from .topics import Topic

MAX_CALLS = 100
MAX_JUDGMENTS = 50
DOCUMENT_CHARS = 20_000   # longest document text shown to the model
SCHEMA = decision.json_schema()

# stop reasons
MAX_CALLS_REACHED = "max-calls"
MAX_JUDGMENTS_REACHED = "max-judgments"
MODEL_ERROR = "model-error"
BACKEND_ERROR = "backend-error"
ERROR = "error"


class Limits(msgspec.Struct, frozen=True):
    max_calls: int = MAX_CALLS
    max_judgments: int = MAX_JUDGMENTS
    document_chars: int = DOCUMENT_CHARS


LIMIT_STOPS = (MAX_CALLS_REACHED, MAX_JUDGMENTS_REACHED)


class Summary(msgspec.Struct):
    """How one topic went."""
    qid: str
    calls: int = 0
    judgments: int = 0          # distinct documents graded for the topic, earlier runs too
    new_judgments: int = 0      # of them, graded in this run
    earlier: int = 0            # graded by earlier runs (read back at the start)
    grade3: int = 0
    stop: str = ""
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    total_calls: int = 0        # model calls for the topic over every session
    finished_earlier: bool = False  # skipped: an earlier run reached the limits

    def line(self) -> str:
        if self.finished_earlier:
            more = ("--continue gives it more calls" if self.stop == MAX_CALLS_REACHED
                    else "a higher --max-judgments lets it go on")
            return (f"{self.qid}: finished earlier ({self.total_calls} calls, "
                    f"{self.judgments} judgments, {self.grade3} of grade 3, stop "
                    f"{self.stop}); skipped ({more})")
        text = (f"{self.qid}: {self.calls} calls, {self.judgments} judgments "
                f"({self.new_judgments} new, {self.grade3} of grade 3), stop {self.stop}")
        return text + (f": {self.error}" if self.error else "")

    @property
    def complete(self) -> bool:
        """The topic reached a limit (a rerun skips it)."""
        return self.stop in LIMIT_STOPS


class Agent:
    """The loop for one topic. `record(entry)` receives each transcript entry as it is made
    (the conversation log), `audit(record)` errors worth keeping. `instructions` replaces
    ours (e.g. the published runner's, read from a file); `protocol` is "ours" or
    "reference" (prompts.PROTOCOLS); `continue_topic` gives a topic that stopped at the call
    limit in an earlier run max_calls more calls."""

    def __init__(self, topic: Topic, model: Model, backend: Backend, limits: Limits = Limits(),
                 record: Callable[[dict], None] | None = None,
                 audit: Callable[[dict], None] | None = None, *,
                 instructions: str | None = None, protocol: str = "ours",
                 continue_topic: bool = False):
        self.topic = topic
        self.model = model
        self.backend = backend
        self.limits = limits
        self.instructions = instructions or prompts.INSTRUCTIONS
        self.say = prompts.PROTOCOLS[protocol]()
        self.continue_topic = continue_topic
        self._record = record
        self._audit = audit
        self.messages: list[dict] = []          # the transcript the model sees
        self.judged: dict[str, int] = {}        # docno -> grade, in discovery order
        self.order: dict[str, int] = {}         # docno -> discovery order
        self.earlier: dict[str, int] = {}
        self.new: set[str] = set()
        self.shown: set[str] = set()            # docnos the model has seen this run
        self.summary = Summary(topic.qid)
        self.call = 0                           # model calls for the topic, every session
        self.call_limit = limits.max_calls
        self._base = 0
        self._step = 0
        self.fatal = False                      # the run cannot go on (no model endpoint)

    # the loop -----------------------------------------------------------------

    def run(self) -> Summary:
        started = time.perf_counter()
        s = self.summary
        try:
            if self._resume():
                self._say("system", self.instructions)
                self._say("user", self.say.opening(self.topic.qid, self.topic.text,
                                                   self.call_limit - self.call,
                                                   self.limits.max_judgments, self.earlier))
                self._loop()
        except ModelError as err:
            s.stop, s.error = MODEL_ERROR, str(err)
            self.fatal = isinstance(err, UnreachableError)
        except BackendError as err:
            s.stop, s.error = BACKEND_ERROR, str(err)
        except Exception as err:  # a bug: keep it in the audit, go on with the next topic
            s.stop, s.error = ERROR, f"{type(err).__name__}: {err}"
            if self._audit is not None:
                self._audit({"kind": "error", "topic": self.topic.qid,
                             "traceback": traceback.format_exc()})
        s.judgments = len(self.judged)
        s.new_judgments = len(self.new)
        s.earlier = len(self.earlier)
        s.grade3 = sum(1 for g in self.judged.values() if g == 3)
        s.total_calls = self.call
        s.seconds = round(time.perf_counter() - started, 3)
        if not s.finished_earlier and s.stop != BACKEND_ERROR:
            try:
                self._write_record(s.stop, s.error)
            except BackendError as err:   # not recorded: a rerun resumes the topic
                s.stop, s.error = BACKEND_ERROR, str(err)
        return s

    def _resume(self) -> bool:
        """Read back what earlier sessions recorded; False when the topic is finished."""
        found, record = self.backend.judgments(self.topic.qid)
        for j in found:
            self.judged[j["docno"]] = j["grade"]
            self.order[j["docno"]] = j["order"]
        self.earlier = dict(self.judged)
        self.call = max([record["calls"] if record else 0] + [j["call"] for j in found])
        if record is not None:
            self._base = record["base"]
            stop = record["stop"]
            reached = (stop == MAX_JUDGMENTS_REACHED and len(found) >= self.limits.max_judgments
                       or stop == MAX_CALLS_REACHED and
                       self.call >= self._base + self.limits.max_calls)
            if reached and record["calls"] >= self.call:
                if not (self.continue_topic and stop == MAX_CALLS_REACHED):
                    self.summary.stop, self.summary.finished_earlier = stop, True
                    return False
                self._base = self.call
        self.call_limit = self._base + self.limits.max_calls
        if self._base != (record["base"] if record else 0):   # a --continue session
            self._write_record(None, None)
        return True

    def _write_record(self, stop: str | None, error: str | None) -> None:
        reply = self.backend.topic({"topic": self.topic.qid, "stop": stop, "calls": self.call,
                                    "judgments": len(self.judged), "base": self._base,
                                    "error": error})
        if not reply.get("ok"):
            raise BackendError(f"cannot record the state of topic {self.topic.qid}: "
                               f"{reply.get('error', 'refused')}")

    def _loop(self) -> None:
        s = self.summary
        while True:
            if len(self.judged) >= self.limits.max_judgments:
                s.stop = MAX_JUDGMENTS_REACHED
                return
            if self.call >= self.call_limit:
                s.stop = MAX_CALLS_REACHED
                return
            done = self.model.complete(self.instructions, self.messages, SCHEMA,
                                       context={"topic": self.topic.qid,
                                                "call": self.call + 1})
            self.call += 1
            s.calls += 1
            s.input_tokens += done.usage.input_tokens
            s.output_tokens += done.usage.output_tokens
            self._say("assistant", done.text)
            self._say("user", self.step(done.text))

    def ranked(self) -> list[str]:
        """The judged docnos for the run file: by grade descending, then discovery order."""
        return sorted(self.judged, key=lambda d: (-self.judged[d], self.order.get(d, 0)))

    def step(self, text: str) -> str:
        """Execute one answer of the model; the observation to show it. The answer of the
        last call allowed has its judgment recorded and its action not executed."""
        try:
            d = decision.parse(text)
        except DecisionError as err:
            return self._join([self.say.invalid(str(err)), self._status()])
        parts = []
        if d.judgment is not None:
            parts.append(self._judge(d.judgment))
        if len(self.judged) >= self.limits.max_judgments:
            parts.append(self.say.stopped("the judgment limit is reached"))
        elif self.call >= self.call_limit:
            parts.append(self.say.stopped("the call limit is reached"))
        else:
            parts.extend(self._act(d.action))
        parts.append(self._status())
        return self._join(parts)

    @staticmethod
    def _join(parts) -> str:
        return "\n".join(p for p in parts if p is not None)

    def _status(self) -> str | None:
        lim = self.limits
        return self.say.status(self.call - self._base, lim.max_calls,
                               len(self.judged), lim.max_judgments,
                               sum(1 for g in self.judged.values() if g == 3))

    # judging and acting -------------------------------------------------------

    def _judge(self, j: decision.Judgment) -> str | None:
        docno = j.docno.strip()
        if is_note(docno):
            return self.say.not_judged(docno, "it is a judgment note, not a document")
        if docno not in self.shown:
            return self.say.not_judged(docno, "it was not shown to you for this topic; "
                                       "grade only the results and documents you were shown")
        note = prompts.note(self.topic.qid, self.topic.text, docno, j.grade, j.reason,
                            j.learned)
        reply = self.backend.judge(self.topic.qid, docno, j.grade, note, self.call)
        if not reply.get("ok"):
            return self.say.not_judged(docno, reply.get("error", "refused"))
        docno = reply.get("docno") or docno
        regraded = docno in self.judged
        self.judged[docno] = j.grade
        self.order[docno] = reply.get("order", len(self.order) + 1)
        self.new.add(docno)
        return self.say.judged(docno, j.grade, regraded)

    def _act(self, action) -> list[str]:
        if isinstance(action, decision.Query):
            return self._show("query", self.backend.query(action.gcl))
        if isinstance(action, decision.Next):
            return self._show("next", self.backend.next(action.qid.strip()))
        reply = self.backend.document(action.docno.strip())
        if reply.get("ok"):
            self.shown.add(reply["docno"])
        return [self.say.document(reply, self.backend.last, self.limits.document_chars)]

    def _show(self, action: str, reply: dict) -> list[str]:
        """A result for the model, after skipping those already graded (and notes)."""
        first = reply
        skipped = []
        while reply.get("ok") and not reply.get("done"):
            docno = reply["docno"]
            if docno in self.judged:
                skipped.append((docno, reply["rank"], f"grade {self.judged[docno]}"))
            elif is_note(docno):
                skipped.append((docno, reply["rank"], "a judgment note, not a document"))
            else:
                break
            reply = self.backend.next(reply["qid"])
        if reply.get("ok") and not reply.get("done"):
            self.shown.add(reply["docno"])
        return self.say.shown(action, first, reply, self.backend.last, skipped)

    def _say(self, role: str, content: str) -> None:
        """Append to the transcript (the system entry is logged, not sent as a message)
        and save the entry at once."""
        if role != "system":
            self.messages.append({"role": role, "content": content})
        if self._record is not None:
            self._record({"topic": self.topic.qid, "step": self._step, "role": role,
                          "content": content})
        self._step += 1


def run(topics: list[Topic], model: Model, backend: Backend, outputs=None,
        limits: Limits = Limits(), echo: Callable[[str], None] | None = None, *,
        instructions: str | None = None, protocol: str = "ours",
        continue_topics: bool = False, summaries: list | None = None) -> list[Summary]:
    """Every topic in turn; after each, its run lines and summary go to `outputs` (an
    outputs.Outputs), its summary line to `echo`, and the summary to `summaries` (so a
    caller interrupted midway knows which topics are done). A model endpoint that cannot
    be reached ends the run after the topic it failed (the others would fail the same)."""
    summaries = [] if summaries is None else summaries
    for topic in topics:
        if outputs is not None:
            outputs.begin(topic.qid)
        agent = Agent(topic, model, backend, limits,
                      record=outputs.conversation if outputs is not None else None,
                      audit=outputs.audit if outputs is not None else None,
                      instructions=instructions, protocol=protocol,
                      continue_topic=continue_topics)
        summary = agent.run()
        if outputs is not None:
            outputs.topic(summary, agent.ranked())
        if echo is not None:
            echo(summary.line())
        summaries.append(summary)
        if agent.fatal:
            break
    return summaries
