"""A deterministic stand-in for the Vole's model, to play behind tests/fake_openai.py.

For each topic it runs through a fixed list of queries in order; it asks for the full text
of every third result before judging it, judges every result it is shown (the grade a
function of the docno) and then asks for the next; when a query has nothing more, it runs
the next one; when the list is used up, a query that matches nothing. Its answers depend
only on what the conversation shows (the observations and its own earlier answers), so a
resumed topic, whose already judged results the Vole skips, judges the same documents in
the same order as an uninterrupted one.

It reads observations in both protocols (ours and the published runner's) and answers in
our decision shape or the published runner's (`shape="published"`).
"""

from __future__ import annotations

import json
import re

NOTHING = "(^ zzqqxx qqzzyy)"      # matches nothing: what it asks once its queries are used


def grade(docno: str) -> int:
    return sum(map(ord, docno)) % 4


def _json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _topic(first: str) -> str:
    for value in _json_lines(first):
        if "qid" in value:
            return value["qid"]
    return re.match(r"Topic (\S+):", first).group(1)


def _seen(text: str) -> tuple[str, tuple[str, int, str] | None, str | None]:
    """What an observation shows: ("result", (qid, rank, docno)), ("document", docno) or
    ("none", None)."""
    for value in reversed(_json_lines(text)):
        r = value.get("response")
        if isinstance(r, dict) and r.get("ok"):
            if r.get("op") == "document":
                return "document", None, r["docno"]
            if not r.get("done"):
                return "result", (r["qid"], r["rank"], r["docno"]), None
            return "none", None, None
    found = re.findall(r"(q\d+) rank (\d+): docno (\S+)", text)
    if found:
        qid, rank, docno = found[-1]
        return "result", (qid, int(rank), docno), None
    found = re.findall(r"^Document (\S+):$", text, re.M)
    if found:
        return "document", None, found[-1]
    return "none", None, None


def _action(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    action = value.get("action") if isinstance(value, dict) else None
    return action if isinstance(action, dict) else {}


class Policy:
    def __init__(self, queries: dict[str, list[str]], shape: str = "ours"):
        self.queries = queries
        self.shape = shape

    def __call__(self, request) -> dict:
        messages = request.messages
        topic = _topic(messages[0]["content"])
        mine = [_action(m["content"]) for m in messages if m["role"] == "assistant"]
        issued = sum(1 for a in mine if a.get("type", a.get("op")) == "query")
        kind, result, docno = _seen(messages[-1]["content"])
        if kind == "result":
            qid, rank, shown = result
            if rank % 3 == 0:
                return self._decide(None, {"type": "document", "docno": shown})
            return self._decide((shown, grade(shown)), {"type": "next", "qid": qid})
        if kind == "document":
            qid = None      # the query it came from: the latest result shown
            for m in reversed(messages[:-1]):
                if m["role"] == "user" and _seen(m["content"])[0] == "result":
                    qid = _seen(m["content"])[1][0]
                    break
            return self._decide((docno, grade(docno)), {"type": "next", "qid": qid})
        listed = self.queries.get(topic, [])
        gcl = listed[issued] if issued < len(listed) else NOTHING
        return self._decide(None, {"type": "query", "gcl": gcl})

    def _decide(self, judged, action) -> dict:
        judgment = None
        if judged is not None:
            judgment = {"docno": judged[0], "grade": judged[1], "reason": "by the policy",
                        "learned": ""}
        if self.shape == "ours":
            return {"judgment": judgment, "action": action}
        if judgment is not None:
            judgment["relevance"] = judgment.pop("grade")
        action = dict(action)
        action["op"] = action.pop("type")
        if "gcl" in action:
            action["query"] = action.pop("gcl")
        return {"latest_judgment": judgment, "action": action}


def script(policy: Policy, calls: int) -> list:
    """A FakeOpenAI script of `calls` answers by the policy."""
    return [policy] * calls
