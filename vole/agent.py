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

A topic cut short continues its own conversation when the log of it is at hand (`history`:
the conversation entries of earlier runs into the same --out): the transcript is given
back to the model as it was, an answer that was received but not yet acted on is acted on
now (no model call is made twice), and the topic's queries are issued again when the model
asks for more of their results. Without the log (or when it does not agree with the
database) the topic starts a new conversation whose opening lists what is judged.

A topic's qids are its own, q0, q1, ... in the order of its queries, whatever connection
or session of the backend answers them: the agent keeps each query's text and how far the
model has read it (a `Cursor`), so a `next` after a reconnect or a resume is answered by
issuing the query again and passing the ranks already read.

`protocol` picks the observations' form: ours (sentences and a status line) or the
published runner's ("reference": server replies as JSON lines, see prompts.Reference).
Instructions holding `{information_need}` (the published runner's template) get the
topic's text there.
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


class Cursor(msgspec.Struct):
    """One query of a topic: its text as sent, the rank of the last result read from it (0:
    none), whether it is used up, and the backend's qid for it in `session` (None: not
    issued in this session)."""
    gcl: str
    rank: int = 0
    done: bool = False
    backend: str | None = None
    session: int = -1


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
    (the conversation log), `audit(record)` every decision and the errors worth keeping,
    `history(qid)` gives the conversation entries earlier runs logged for a topic (see the
    module docstring). `instructions` replaces ours (e.g. the published runner's, read from
    a file); `protocol` is "ours" or "reference" (prompts.PROTOCOLS); `continue_topic`
    gives a topic that stopped at the call limit in an earlier run max_calls more calls."""

    def __init__(self, topic: Topic, model: Model, backend: Backend, limits: Limits = Limits(),
                 record: Callable[[dict], None] | None = None,
                 audit: Callable[[dict], None] | None = None, *,
                 instructions: str | None = None, protocol: str = "ours",
                 continue_topic: bool = False,
                 history: Callable[[str], list[dict]] | None = None):
        self.topic = topic
        self.model = model
        self.backend = backend
        self.limits = limits
        self.instructions = (instructions or prompts.INSTRUCTIONS).replace(
            "{information_need}", topic.text)
        self.protocol = protocol
        self.say = prompts.PROTOCOLS[protocol]()
        self.continue_topic = continue_topic
        self._record = record
        self._audit = audit
        self._history = history
        self.messages: list[dict] = []          # the transcript the model sees
        self.judged: dict[str, int] = {}        # docno -> grade, in discovery order
        self.order: dict[str, int] = {}         # docno -> discovery order
        self.earlier: dict[str, int] = {}
        self.new: set[str] = set()
        self.shown: set[str] = set()            # docnos the model has seen this session
        self.cursors: dict[str, Cursor] = {}    # the topic's qids -> its queries
        self.summary = Summary(topic.qid)
        self.call = 0                           # model calls for the topic, every session
        self.call_limit = limits.max_calls
        self._base = 0
        self._step = 0
        self._fresh = False                     # a --continue session: a new conversation
        self.fatal = False                      # the run cannot go on (no model endpoint)

    # the loop -----------------------------------------------------------------

    def run(self) -> Summary:
        started = time.perf_counter()
        s = self.summary
        try:
            if self._resume():
                self._note({"kind": "topic", "text": self.topic.text,
                            "protocol": self.protocol, "calls": self.call})
                if not self._restore():
                    self._say("system", self.instructions, calls_before=self.call,
                              protocol=self.protocol)
                    self._say("user", self.say.opening(self.topic.qid, self.topic.text,
                                                       self.call_limit - self.call,
                                                       self.limits.max_judgments,
                                                       self.earlier))
                self._loop()
        except ModelError as err:
            s.stop, s.error = MODEL_ERROR, str(err)
            self.fatal = isinstance(err, UnreachableError)
        except BackendError as err:
            s.stop, s.error = BACKEND_ERROR, str(err)
        except Exception as err:  # a bug: keep it in the audit, go on with the next topic
            s.stop, s.error = ERROR, f"{type(err).__name__}: {err}"
            self._note({"kind": "error", "traceback": traceback.format_exc()})
        s.judgments = len(self.judged)
        s.new_judgments = len(self.new - self.earlier.keys())
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
            self._fresh = stop in LIMIT_STOPS     # reopened: a new conversation
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

    def _restore(self) -> bool:
        """Continue the conversation of the session that was cut short, from the log of
        it; False (a new conversation) when there is none, or it does not agree with the
        database. An answer received but not acted on is acted on now."""
        if self._history is None or self._fresh:
            return False
        entries = self._history(self.topic.qid)
        starts = [i for i, e in enumerate(entries) if e.get("role") == "system"]
        if not starts:
            return False
        session = entries[starts[-1]:]
        system = session[0]
        why = None
        if "calls_before" not in system:
            why = "the log is from an older version"
        elif system.get("content") != self.instructions or \
                system.get("protocol") != self.protocol:
            why = "its instructions or protocol differ from this run's"
        messages: list[dict] = []
        shown, cursors, recorded = set(), {}, set()
        calls, pending, step = system.get("calls_before", 0), None, system.get("step", 0)
        for e in session[1:]:
            if why is not None:
                break
            step = e.get("step", step)
            if e.get("role") == "assistant":
                if pending is not None or not messages:
                    why = "the log is not a conversation"
                calls, pending = e.get("call", calls + 1), e
            elif e.get("role") == "user":
                pending = None
                state = e.get("state") or {}
                if state.get("shown"):
                    shown.add(state["shown"])
                if state.get("judged"):
                    recorded.add(state["judged"])
                if state.get("cursor"):
                    qid, gcl, rank, done = state["cursor"]
                    cursors[qid] = Cursor(gcl, rank, done)
            else:
                why = f"an entry of role {e.get('role')!r}"
            if why is None:
                messages.append({"role": e["role"], "content": e["content"]})
        if why is None and calls < self.call:
            why = (f"the log has {calls} model calls, the database {self.call}: the log is "
                   "not this database's (another --out?)")
        if why is None and not recorded <= set(self.judged):
            why = "the log has judgments the database does not have"
        if why is not None:
            self._note({"kind": "resume", "restored": False, "why": why})
            return False
        self.messages, self.shown, self.cursors = messages, shown, cursors
        self.call, self._step = calls, step + 1
        self._note({"kind": "resume", "restored": True, "calls": calls,
                    "messages": len(messages), "pending": pending is not None})
        if pending is not None:      # received, not acted on: act on it now
            self._act_on(pending["content"])
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
            self._say("assistant", done.text, call=self.call)
            self._act_on(done.text)

    def _act_on(self, text: str) -> None:
        """Execute the answer of call `self.call` and log the observation."""
        self.backend.context = {"call": self.call}
        try:
            observation, state = self.step(text)
        finally:
            self.backend.context = {}
        self._say("user", observation, state=state)

    def ranked(self) -> list[str]:
        """The judged docnos for the run file: by grade descending, then discovery order."""
        return sorted(self.judged, key=lambda d: (-self.judged[d], self.order.get(d, 0)))

    def step(self, text: str) -> tuple[str, dict]:
        """Execute one answer of the model: the observation to show it, and the state the
        log keeps with it ({"judged": docno recorded, "shown": docno shown, "cursor": [qid,
        query, rank, done] of the query read}). The answer of the last call allowed has its
        judgment recorded and its action not executed."""
        note = {"kind": "decision", "call": self.call}
        state: dict = {}
        try:
            d = decision.parse(text)
        except DecisionError as err:
            self._note({**note, "valid": False, "error": str(err)})
            return self._join([self.say.invalid(str(err)), self._status()]), state
        parts = []
        outcome = None
        if d.judgment is not None:
            said, outcome, docno = self._judge(d.judgment)
            parts.append(said)
            if outcome in ("recorded", "regraded"):
                state["judged"] = docno
        executed = False
        if len(self.judged) >= self.limits.max_judgments:
            parts.append(self.say.stopped("the judgment limit is reached"))
        elif self.call >= self.call_limit:
            parts.append(self.say.stopped("the call limit is reached"))
        else:
            parts.extend(self._act(d.action, state))
            executed = True
        parts.append(self._status())
        self._note({**note, "valid": True,
                    "judgment": msgspec.to_builtins(d.judgment), "judged": outcome,
                    "action": msgspec.to_builtins(d.action), "executed": executed,
                    **({"shown": state["shown"]} if "shown" in state else {})})
        return self._join(parts), state

    @staticmethod
    def _join(parts) -> str:
        return "\n".join(p for p in parts if p is not None)

    def _status(self) -> str | None:
        lim = self.limits
        return self.say.status(self.call - self._base, lim.max_calls,
                               len(self.judged), lim.max_judgments,
                               sum(1 for g in self.judged.values() if g == 3))

    # judging and acting -------------------------------------------------------

    def _judge(self, j: decision.Judgment) -> tuple[str | None, str, str]:
        """(what to tell the model, the outcome: recorded, regraded, note, not shown or
        refused, the docno)."""
        docno = j.docno.strip()
        if is_note(docno):
            return (self.say.not_judged(docno, "it is a judgment note, not a document"),
                    "note", docno)
        if docno not in self.shown:
            return (self.say.not_judged(docno, "it was not shown to you for this topic; "
                                        "grade only the results and documents you were "
                                        "shown"), "not shown", docno)
        note = prompts.note(self.topic.qid, self.topic.text, docno, j.grade, j.reason,
                            j.learned)
        reply = self.backend.judge(self.topic.qid, docno, j.grade, note, self.call)
        if not reply.get("ok"):
            return self.say.not_judged(docno, reply.get("error", "refused")), "refused", docno
        docno = reply.get("docno") or docno
        regraded = docno in self.judged
        self.judged[docno] = j.grade
        self.order[docno] = reply.get("order", len(self.order) + 1)
        self.new.add(docno)
        return (self.say.judged(docno, j.grade, regraded),
                "regraded" if regraded else "recorded", docno)

    def _act(self, action, state: dict) -> list[str]:
        if isinstance(action, decision.Query):
            gcl = self.say.query_text(action.gcl)
            request = {"op": "query", "query": gcl}
            reply = self.backend.query(gcl)
            qid, cursor = None, None
            if reply.get("ok") and reply.get("qid"):
                qid = f"q{len(self.cursors)}"
                cursor = self.cursors[qid] = Cursor(gcl, backend=reply["qid"],
                                                    session=self.backend.session)
                self._advance(cursor, reply)
            return self._show(request, reply, qid, cursor, state)
        if isinstance(action, decision.Next):
            qid = action.qid.strip()
            request = {"op": "next", "qid": qid}
            cursor = self.cursors.get(qid)
            if cursor is None:
                known = (f"its queries are q0 to q{len(self.cursors) - 1}" if self.cursors
                         else "it has no query yet")
                reply = {"op": "next", "ok": False,
                         "error": f"Unknown qid {qid!r}: not a query of this topic ({known})"}
                return self._show(request, reply, qid, None, state)
            return self._show(request, self._next(cursor), qid, cursor, state)
        request = {"op": "document", "docno": action.docno.strip()}
        reply = self.backend.document(request["docno"])
        if reply.get("ok"):
            self.shown.add(reply["docno"])
            state["shown"] = reply["docno"]
        return [self.say.document(request, reply, self.limits.document_chars)]

    def _next(self, cursor: Cursor) -> dict:
        """The next result of a query of the topic, issuing it again first (and passing the
        ranks read) when this backend session has not issued it, or when the session
        changed under the request (a reconnect)."""
        for _ in range(2):
            if cursor.backend is None or cursor.session != self.backend.session:
                refused = self._reissue(cursor)
                if refused is not None:
                    return refused
            session = self.backend.session
            assert cursor.backend is not None   # (issued in this session, above)
            reply = self.backend.next(cursor.backend)
            if reply.get("ok") or self.backend.session == session:
                break
        self._advance(cursor, reply)
        return reply

    def _reissue(self, cursor: Cursor) -> dict | None:
        """Issue the cursor's query in this session and read up to its rank; the refusal,
        if the backend refuses."""
        context = self.backend.context
        self.backend.context = {**context, "reissue": True}
        try:
            reply = self.backend.query(cursor.gcl)
            if not reply.get("ok") or not reply.get("qid"):
                return {**reply, "op": "next"}
            cursor.backend, cursor.session = reply["qid"], self.backend.session
            while reply.get("ok") and not reply.get("done") and reply["rank"] < cursor.rank:
                reply = self.backend.next(cursor.backend)
        finally:
            self.backend.context = context
        if not reply.get("ok"):
            return reply
        if reply.get("done") or reply["rank"] < cursor.rank:
            cursor.done = True
        return None

    @staticmethod
    def _advance(cursor: Cursor, reply: dict) -> None:
        if reply.get("ok"):
            if reply.get("done"):
                cursor.done = True
            else:
                cursor.rank = reply["rank"]

    def _show(self, request: dict, reply: dict, qid: str | None, cursor: Cursor | None,
              state: dict) -> list[str]:
        """A result for the model, after passing over those already judged (and notes)."""
        first = reply
        passed: list[tuple[str, int, int | None]] = []   # (docno, rank, grade; None: a note)
        while reply.get("ok") and not reply.get("done") and cursor is not None:
            docno = reply["docno"]
            if docno in self.judged:
                passed.append((docno, reply["rank"], self.judged[docno]))
            elif is_note(docno):
                passed.append((docno, reply["rank"], None))
            else:
                break
            reply = self._next(cursor)
        if reply.get("ok") and not reply.get("done") and "docno" in reply:
            self.shown.add(reply["docno"])
            state["shown"] = reply["docno"]
        if cursor is not None:
            state["cursor"] = [qid, cursor.gcl, cursor.rank, cursor.done]
        if qid is not None:
            first = {**first, "qid": qid} if "qid" in first else first
            reply = {**reply, "qid": qid} if "qid" in reply else reply
        return self.say.shown(request, first, reply, passed)

    def _say(self, role: str, content: str, **extra) -> None:
        """Append to the transcript (the system entry is logged, not sent as a message)
        and save the entry at once."""
        if role != "system":
            self.messages.append({"role": role, "content": content})
        if self._record is not None:
            self._record({"topic": self.topic.qid, "step": self._step, "role": role,
                          "content": content, **extra})
        self._step += 1

    def _note(self, record: dict) -> None:
        if self._audit is not None:
            self._audit({"topic": self.topic.qid, **record})


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
                      continue_topic=continue_topics,
                      history=outputs.history if outputs is not None else None)
        summary = agent.run()
        if outputs is not None:
            outputs.topic(summary, agent.ranked())
        if echo is not None:
            echo(summary.line())
        summaries.append(summary)
        if agent.fatal:
            break
    return summaries
