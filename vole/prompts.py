"""Everything the model reads: the instructions, the opening message of a topic, and the
observations that answer each decision, in our own words (`Ours`) or in the published Vole
runner's form (`Reference`)."""

from __future__ import annotations

from typing import Protocol

import msgspec

_encode = msgspec.json.Encoder().encode

INSTRUCTIONS = """\
You are the Vole, a search agent. You are given a topic: a question or an information need. \
You search a collection of documents for it and grade what you read. Your goal is to find \
the documents that deserve grade 3 - documents dedicated to the topic that answer it - and, \
after them, those of grade 2. Every document you grade is recorded, and the ones graded \
highest become the answer to the topic.

# How a turn works

Each turn you answer with exactly one JSON object, a decision:

{"judgment": {"docno": "...", "grade": 0, "reason": "...", "learned": "..."} or null,
 "action": {"type": "query", "gcl": "..."}
         | {"type": "next", "qid": "..."}
         | {"type": "document", "docno": "..."}}

- "judgment" grades the latest result or document you were shown that you have not graded \
yet (use its docno). Use null when there is nothing new to grade, for example after a query \
that matched nothing. "reason" says briefly why; "learned" notes anything the document \
taught you about the topic or about how to search for it (words, names, dates, spellings), \
or "".
- "action" is what to do next:
  - "query": search with a query in the language below. The reply shows the first result: \
the query's qid, the rank, the docno and a snippet in which the best-matching passage is \
marked <cover>...</cover>.
  - "next": the next result of an earlier query, by its qid.
  - "document": the full text of a document, when the snippet is not enough to grade it.

Results you have already graded for this topic, in this session or an earlier one, are \
skipped: the reply lists them with their ranks and grades and shows the next ungraded one.

# Grades

3 - dedicated to the topic: the document is about it and answers it.
2 - partly answers: part of an answer is there, but incomplete, or mixed with other matter.
1 - related: on the subject of the topic, but does not answer it.
0 - irrelevant: nothing to do with the topic.

Grade what the document says, not whether it matched your query. When a snippet does not \
show enough to tell 2 from 3, read the document first.

# The query language

Results are ranked by how close together the query's matches are: a document containing \
short passages that satisfy the whole query ranks first.

  word                   a word (case does not matter; no stemming, so coping is not cope)
  "two words"            a phrase: the words adjacent, in this order
  (^ A B ...)            all of: passages containing an A and a B and ...
  (+ A B ...)            one of: passages containing an A or a B or ...
  (... A B)              followed by: an A, then later a B
  (<< A title:)          an A inside a title (a field; which fields exist depends on the \
collection: title:, headings:, segment:, text: ...)
  (>> A B)               an A containing a B;  (!< A B) an A not inside any B;  \
(!> A B) an A containing no B

A, B are words, phrases or parenthesised queries, nested as deep as you like.

Examples:
  (^ "vicarious trauma" (+ cope coping manage managing))
  (^ (+ disability "income protection") insurance (+ investment worth benefits))
  (^ vietnam war economy 1968)
  (+ (^ light darkness) (^ light day night))
  (<< (^ goth rock) title:)

Tips: start with the two or three words that matter most, joined by ^. Too many words \
under one ^ may match nothing; then drop some, or offer alternatives with +. Add \
synonyms, other word forms and names you learn from what you read. Go deeper with next \
while a query keeps giving useful results; change it when it stops.

# Limits

You have a limited number of turns and of judgments for each topic; every reply says how \
many you have used. A turn whose answer is not a valid decision is wasted, so answer with \
the JSON object only.
"""


def opening(qid: str, text: str, max_calls: int, max_judgments: int,
            earlier: dict[str, int]) -> str:
    lines = [f"Topic {qid}: {text}", "",
             f"You have {max_calls} turns and up to {max_judgments} judgments."]
    if earlier:
        shown = ", ".join(f"{d} (grade {g})" for d, g in earlier.items())
        lines.append(f"An earlier session already graded {len(earlier)} documents for this "
                     f"topic; they count toward the limit and will be skipped: {shown}.")
    lines.append("Start with a query.")
    return "\n".join(lines)


def result(reply: dict) -> str:
    """A query or next reply that shows a result (or says there are none left)."""
    qid = reply.get("qid", "?")
    if reply.get("done"):
        if reply.get("op") == "query":
            return f"{qid}: nothing matched this query."
        return f"{qid}: no more results."
    return (f"{qid} rank {reply['rank']}: docno {reply['docno']}\n"
            f"{reply.get('snippet', '')}")


def skipped(items: list[tuple[str, int, str]]) -> str:
    """items: (docno, rank, why) for results skipped before the one shown."""
    shown = ", ".join(f"{d} (rank {r}, {why})" for d, r, why in items)
    return f"Skipped {len(items)} result(s) graded before: {shown}."


def repaired(warnings: list[str]) -> str:
    return "The query was repaired: " + "; ".join(warnings)


def document(reply: dict, limit: int) -> str:
    text = reply.get("document", "")
    if len(text) > limit:
        text = text[:limit] + f" [... {len(text) - limit} more characters not shown]"
    return f"Document {reply.get('docno')}:\n{text}"


def refused(action: str, error: str) -> str:
    return f"The {action} failed: {error}"


def invalid(error: str) -> str:
    return (f"Your answer was not a valid decision ({error}). Nothing was done. Answer with "
            'one JSON object only, for example {"judgment": null, "action": {"type": '
            '"query", "gcl": "(^ first second)"}}')


def judged(docno: str, grade: int, regraded: bool) -> str:
    return f"Recorded {docno}: grade {grade}" + (" (regraded)." if regraded else ".")


def not_judged(docno: str, why: str) -> str:
    return f"Judgment of {docno} not recorded: {why}"


def status(calls: int, max_calls: int, judgments: int, max_judgments: int,
           grade3: int) -> str:
    return (f"[turns used {calls} of {max_calls}; judgments {judgments} of "
            f"{max_judgments}, {grade3} of grade 3]")


def stopped(reason: str) -> str:
    return f"Stopped: {reason}."


def note(topic: str, topic_text: str, docno: str, grade: int, reason: str,
         learned: str) -> str:
    """The searchable text stored with a judgment (linked to the judged document)."""
    parts = [f"Judgment of {docno} for topic {topic} ({topic_text}): grade {grade}."]
    if reason.strip():
        parts.append(f"Reason: {reason.strip()}")
    if learned.strip():
        parts.append(f"Learned: {learned.strip()}")
    return "\n".join(parts)


JUDGE_INSTRUCTIONS = """\
You assess search results. You are given a query and a passage, and you say how well the \
passage answers the query, on a scale of 0 to 3:

3 - the passage is dedicated to the query and contains its answer.
2 - the passage answers the query in part: the answer is incomplete, unclear, or buried \
among other matter.
1 - the passage is on the subject of the query but does not answer it.
0 - the passage has nothing to do with the query.

Before grading, consider what the person asking most likely wants to know, how much of \
that the passage provides, and whether it can be trusted. Then answer with one JSON \
object: {"reason": "<one or two sentences>", "grade": <0, 1, 2 or 3>}.
"""


def judge_request(query: str, passage: str) -> str:
    return f"Query: {query}\n\nPassage: {passage}"


# ---------------------------------------------------------------- the two protocols
#
# Each protocol turns what happened into the text the model reads. `request` is the
# request as the model made it ({"op": "query", "query": G} with G as sent, {"op": "next",
# "qid": Q}, {"op": "document", "docno": D}); `first` the backend's reply to it, `reply` the
# result shown after passing over `passed`: (docno, rank, grade) of results judged before
# (grade None: a judgment note), in rank order. qids are the topic's own (see agent.py).


class Observations(Protocol):
    """What a protocol (Ours, Reference) writes for each event; None: nothing."""

    name: str

    def query_text(self, gcl: str) -> str: ...

    def opening(self, qid: str, text: str, max_calls: int, max_judgments: int,
                earlier: dict[str, int]) -> str: ...

    def invalid(self, error: str) -> str: ...

    def judged(self, docno: str, grade: int, regraded: bool) -> str | None: ...

    def not_judged(self, docno: str, why: str) -> str: ...

    def shown(self, request: dict, first: dict, reply: dict,
              passed: list[tuple[str, int, int | None]]) -> list[str]: ...

    def document(self, request: dict, reply: dict, limit: int) -> str: ...

    def status(self, calls: int, max_calls: int, judgments: int, max_judgments: int,
               grade3: int) -> str: ...

    def stopped(self, reason: str) -> str: ...


class Ours:
    """Observations in our words (the functions above), with a status line each turn."""

    name = "ours"

    def query_text(self, gcl: str) -> str:
        return gcl

    def opening(self, qid, text, max_calls, max_judgments, earlier):
        return opening(qid, text, max_calls, max_judgments, earlier)

    def invalid(self, error):
        return invalid(error)

    def judged(self, docno, grade, regraded):
        return judged(docno, grade, regraded)

    def not_judged(self, docno, why):
        return not_judged(docno, why)

    def shown(self, request, first, reply, passed):
        parts = [repaired(first["warnings"])] if first.get("warnings") else []
        if passed:
            parts.append(skipped([(d, r, "a judgment note, not a document" if g is None
                                   else f"grade {g}") for d, r, g in passed]))
        if not reply.get("ok"):
            parts.append(refused(request["op"], reply.get("error", "refused")))
        else:
            parts.append(result(reply))
        return parts

    def document(self, request, reply, limit):
        if not reply.get("ok"):
            return refused("document request", reply.get("error", "refused"))
        return document(reply, limit)

    def status(self, calls, max_calls, judgments, max_judgments, grade3):
        return status(calls, max_calls, judgments, max_judgments, grade3)

    def stopped(self, reason):
        return stopped(reason)


class Reference:
    """Observations as the published Vole runner writes them into its conversation, one
    JSON line each: a tool reply is the envelope {"request": <the model's request>,
    "response": <the server's response>}, the response carrying "skipped": [{"docno",
    "rank", "relevance"}] when results judged before were passed over (its "op" is then
    "next"); after each observation the judgments used, {"request": {"judgments": "3/50"}}.
    Queries are sent lower-cased, as that runner sends them. The opening is {"qid",
    "topic"} (and "judged": [{"docno", "relevance"}] when an earlier session judged some);
    anything else is {"error": ...} or {"stopped": ...}. Documents are shown whole."""

    name = "reference"

    @staticmethod
    def _line(value) -> str:
        return _encode(value).decode()

    def query_text(self, gcl: str) -> str:
        return gcl.lower()

    def opening(self, qid, text, max_calls, max_judgments, earlier):
        value = {"qid": qid, "topic": text}
        if earlier:
            value["judged"] = [{"docno": d, "relevance": g} for d, g in earlier.items()]
        return self._line(value)

    def invalid(self, error):
        return self._line({"error": f"not a valid decision ({error}); nothing was done"})

    def judged(self, docno, grade, regraded):
        return None

    def not_judged(self, docno, why):
        return self._line({"error": f"judgment of {docno} not recorded: {why}"})

    def shown(self, request, first, reply, passed):
        response = dict(reply)
        if first.get("warnings") and "warnings" not in response:
            response["warnings"] = first["warnings"]
        if passed:
            response["skipped"] = [{"docno": d, "rank": r, "relevance": g} if g is not None
                                   else {"docno": d, "rank": r, "note": True}
                                   for d, r, g in passed]
        return [self._line({"request": request, "response": response})]

    def document(self, request, reply, limit):
        return self._line({"request": request, "response": reply})

    def status(self, calls, max_calls, judgments, max_judgments, grade3):
        return self._line({"request": {"judgments": f"{judgments}/{max_judgments}"}})

    def stopped(self, reason):
        return self._line({"stopped": reason})


PROTOCOLS: dict[str, type[Observations]] = {"ours": Ours, "reference": Reference}
