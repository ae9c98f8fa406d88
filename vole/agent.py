"""The Vole's loop, one topic at a time (DESIGN §7 "The Vole"):

    instructions + topic + append-only transcript -> model -> one decision -> execute
    -> observation appended -> check the limits

A decision may grade a document the model was shown (committed to the database at once,
see backend.py) and then takes one action: query, next or document. An answer that is not
a valid decision, a query the backend refuses, or any other backend refusal becomes the
observation (it costs the call). Results already graded for the topic (in this run or an
earlier one, read back from the database at the start) are skipped and listed in the
observation. The loop stops at `max_calls` model calls or `max_judgments` distinct graded
documents; a model or backend that fails for good stops the topic with that reason, and
the run goes on with the next topic.
"""

from __future__ import annotations

import time
import traceback
from typing import Callable

import msgspec

from . import decision, prompts
from .backend import Backend, is_note
from .errors import BackendError, DecisionError, ModelError
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

    def line(self) -> str:
        text = (f"{self.qid}: {self.calls} calls, {self.judgments} judgments "
                f"({self.new_judgments} new, {self.grade3} of grade 3), stop {self.stop}")
        return text + (f": {self.error}" if self.error else "")


class Agent:
    """The loop for one topic. `record(entry)` receives each transcript entry as it is made
    (the conversation log), `audit(record)` errors worth keeping."""

    def __init__(self, topic: Topic, model: Model, backend: Backend, limits: Limits = Limits(),
                 record: Callable[[dict], None] | None = None,
                 audit: Callable[[dict], None] | None = None):
        self.topic = topic
        self.model = model
        self.backend = backend
        self.limits = limits
        self._record = record
        self._audit = audit
        self.messages: list[dict] = []          # the transcript the model sees
        self.judged: dict[str, int] = {}        # docno -> grade: earlier first, then discovery
        self.earlier: dict[str, int] = {}
        self.new: set[str] = set()
        self.shown: set[str] = set()            # docnos the model has seen this run
        self.summary = Summary(topic.qid)
        self._step = 0

    # the loop -----------------------------------------------------------------

    def run(self) -> Summary:
        started = time.perf_counter()
        s = self.summary
        try:
            self.earlier = dict(sorted(self.backend.judged(self.topic.qid).items()))
            self.judged = dict(self.earlier)
            self._say("system", prompts.INSTRUCTIONS)
            self._say("user", prompts.opening(self.topic.qid, self.topic.text,
                                              self.limits.max_calls,
                                              self.limits.max_judgments, self.earlier))
            while True:
                if len(self.judged) >= self.limits.max_judgments:
                    s.stop = MAX_JUDGMENTS_REACHED
                    break
                if s.calls >= self.limits.max_calls:
                    s.stop = MAX_CALLS_REACHED
                    break
                done = self.model.complete(prompts.INSTRUCTIONS, self.messages, SCHEMA,
                                           context={"topic": self.topic.qid,
                                                    "call": s.calls + 1})
                s.calls += 1
                s.input_tokens += done.usage.input_tokens
                s.output_tokens += done.usage.output_tokens
                self._say("assistant", done.text)
                self._say("user", self.step(done.text))
        except ModelError as err:
            s.stop, s.error = MODEL_ERROR, str(err)
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
        s.seconds = round(time.perf_counter() - started, 3)
        return s

    def ranked(self) -> list[str]:
        """The judged docnos for the run file: by grade descending, then discovery order
        (earlier runs' judgments first, by docno, as their order is not recorded)."""
        return [d for d, _ in sorted(self.judged.items(), key=lambda item: -item[1])]

    def step(self, text: str) -> str:
        """Execute one answer of the model; the observation to show it."""
        try:
            d = decision.parse(text)
        except DecisionError as err:
            return "\n".join([prompts.invalid(str(err)), self._status()])
        parts = []
        if d.judgment is not None:
            parts.append(self._judge(d.judgment))
        if len(self.judged) >= self.limits.max_judgments:
            parts.append(prompts.stopped("the judgment limit is reached"))
        else:
            parts.extend(self._act(d.action))
        parts.append(self._status())
        return "\n".join(parts)

    def _status(self) -> str:
        lim = self.limits
        return prompts.status(self.summary.calls, lim.max_calls, len(self.judged),
                              lim.max_judgments, sum(1 for g in self.judged.values() if g == 3))

    # judging and acting -------------------------------------------------------

    def _judge(self, j: decision.Judgment) -> str:
        docno = j.docno.strip()
        if is_note(docno):
            return prompts.not_judged(docno, "it is a judgment note, not a document")
        if docno not in self.shown:
            return prompts.not_judged(docno, "it was not shown to you for this topic; grade "
                                      "only the results and documents you were shown")
        note = prompts.note(self.topic.qid, self.topic.text, docno, j.grade, j.reason,
                            j.learned)
        reply = self.backend.judge(self.topic.qid, docno, j.grade, note)
        if not reply.get("ok"):
            return prompts.not_judged(docno, reply.get("error", "refused"))
        docno = reply.get("docno") or docno
        regraded = docno in self.judged
        self.judged[docno] = j.grade
        self.new.add(docno)
        return prompts.judged(docno, j.grade, regraded)

    def _act(self, action) -> list[str]:
        if isinstance(action, decision.Query):
            return self._show("query", self.backend.query(action.gcl))
        if isinstance(action, decision.Next):
            return self._show("next", self.backend.next(action.qid.strip()))
        reply = self.backend.document(action.docno.strip())
        if not reply.get("ok"):
            return [prompts.refused("document request", reply.get("error", "refused"))]
        self.shown.add(reply["docno"])
        return [prompts.document(reply, self.limits.document_chars)]

    def _show(self, action: str, reply: dict) -> list[str]:
        """A result for the model, after skipping those already graded (and notes)."""
        parts = []
        if reply.get("warnings"):
            parts.append(prompts.repaired(reply["warnings"]))
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
        if skipped:
            parts.append(prompts.skipped(skipped))
        if not reply.get("ok"):
            parts.append(prompts.refused(action, reply.get("error", "refused")))
            return parts
        if not reply.get("done"):
            self.shown.add(reply["docno"])
        parts.append(prompts.result(reply))
        return parts

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
        limits: Limits = Limits(), echo: Callable[[str], None] | None = None) -> list[Summary]:
    """Every topic in turn; after each, its run lines and summary go to `outputs` (an
    outputs.Outputs) and its summary line to `echo`."""
    summaries = []
    for topic in topics:
        agent = Agent(topic, model, backend, limits,
                      record=outputs.conversation if outputs is not None else None,
                      audit=outputs.audit if outputs is not None else None)
        summary = agent.run()
        if outputs is not None:
            outputs.topic(summary, agent.ranked())
        if echo is not None:
            echo(summary.line())
        summaries.append(summary)
    return summaries
