"""The model's decision: an optional judgment of what it read and exactly one action.

    {"judgment": {"docno": "Gen.1.3", "grade": 3, "reason": "...", "learned": "..."},
     "action": {"type": "query", "gcl": "(^ light darkness)"}}

`judgment` may be null (nothing new to judge). `action` is one of

    {"type": "query", "gcl": G}         run a GCL query; the reply shows its first result
    {"type": "next", "qid": Q}          the next result of an earlier query
    {"type": "document", "docno": D}    the full text of a document

The same Structs validate the model's answer (`parse`) and give the JSON Schema sent as the
structured-output format (`schema`): a decision the model gets wrong comes back as a
`DecisionError` whose message names the place (msgspec's `at $.judgment.grade`), and the
agent shows that message to the model instead of crashing.

`parse` also reads the published Vole runner's shape, and any mix of the two as models
write them (the schema sent stays ours):

    {"latest_judgment": {"docno": D, "relevance": 3, "reason": "...", "learned": "..."},
     "action": {"op": "query", "query": G} | {"op": "next", "qid": Q}
             | {"op": "document", "docno": D}}

`latest_judgment` is `judgment`, `relevance` is `grade`, `op` is `type` and an action's
`query` is `gcl`; an error names the place in the words the model used. A judgment whose
docno is null (the published runner's "nothing to judge", relevance 0) is no judgment. An
action may carry a `reason` (the published runner asks for one): it is kept, for the logs,
but not asked for (the schema sent has only the required fields: see `json_schema`).
"""

from __future__ import annotations

import copy
from typing import Annotated

import msgspec

from .errors import DecisionError

Grade = Annotated[int, msgspec.Meta(ge=0, le=3, description=(
    "0 irrelevant, 1 related but does not answer, 2 partly answers, 3 dedicated to the "
    "topic and answers it"))]


class Judgment(msgspec.Struct, forbid_unknown_fields=True):
    """The grade of one document read (a search result or a full document)."""
    docno: Annotated[str, msgspec.Meta(description="The docno of the document judged.")]
    grade: Grade
    reason: Annotated[str, msgspec.Meta(description="Why this grade, in a sentence or two.")]
    learned: Annotated[str, msgspec.Meta(description=(
        "What this document taught you about the topic or about how to search for it "
        "(may be empty)."))]


class Query(msgspec.Struct, tag="query", tag_field="type", forbid_unknown_fields=True):
    """Run a GCL query; the reply shows its first result and its qid."""
    gcl: Annotated[str, msgspec.Meta(description="The query, e.g. (^ vicarious trauma)")]
    reason: str = ""


class Next(msgspec.Struct, tag="next", tag_field="type", forbid_unknown_fields=True):
    """Show the next result of an earlier query."""
    qid: Annotated[str, msgspec.Meta(description="The qid of an earlier query, e.g. q3")]
    reason: str = ""


class Document(msgspec.Struct, tag="document", tag_field="type", forbid_unknown_fields=True):
    """Show the full text of a document."""
    docno: str
    reason: str = ""


Action = Query | Next | Document


class Decision(msgspec.Struct, forbid_unknown_fields=True):
    """One model turn: judge the latest unjudged result (or null), then one action."""
    judgment: Judgment | None
    action: Action


_any = msgspec.json.Decoder()

# the published runner's names -> ours: (where, theirs, ours)
SYNONYMS = ((None, "latest_judgment", "judgment"), ("judgment", "relevance", "grade"),
            ("action", "op", "type"), ("action", "query", "gcl"))


def parse(text: str, kind: type = Decision):
    """The `kind` (a Decision) in the model's answer. Tolerates a Markdown code fence or words
    around one JSON object (endpoints without structured output add them); a Decision in
    either shape (see the module docstring). Raises DecisionError naming what is wrong."""
    if not text or not text.strip():
        raise DecisionError("the answer was empty; answer with one JSON object")
    try:
        value = _any.decode(text)
    except msgspec.DecodeError as err:
        first, last = text.find("{"), text.rfind("}")
        value = None
        if 0 <= first < last and text[first:last + 1] != text.strip():
            try:
                value = _any.decode(text[first:last + 1])
            except msgspec.DecodeError:
                pass
        if value is None:
            raise DecisionError(f"the answer is not one JSON object: {err}") from None
    renamed = _ours(value) if kind is Decision else {}
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as err:
        message = str(err)
        for ours, theirs in renamed.items():
            message = message.replace(f"`{ours}`", f"`{theirs}`").replace(
                f".{ours}`", f".{theirs}`").replace(f".{ours}.", f".{theirs}.")
        raise DecisionError(f"the decision is not valid: {message}") from None


def _ours(value) -> dict[str, str]:
    """Rename the published runner's keys in `value` (a decoded decision) to ours, in place;
    {our name: theirs} of the renames made. Both names at once are left for validation
    to refuse (an unknown field)."""
    renamed: dict[str, str] = {}
    if not isinstance(value, dict):
        return renamed
    for where, theirs, ours in SYNONYMS:
        target = value if where is None else value.get(where)
        if isinstance(target, dict) and theirs in target and ours not in target:
            target[ours] = target.pop(theirs)
            renamed[ours] = theirs
    judgment = value.get("judgment")
    if isinstance(judgment, dict) and "docno" in judgment and judgment["docno"] is None:
        value["judgment"] = None        # the published shape's "nothing to judge"
    if "judgment" in renamed:    # errors speak the model's language for missing fields too
        renamed.setdefault("grade", "relevance")
    if "type" in renamed:
        renamed.setdefault("gcl", "query")
    return renamed


def encode(value) -> str:
    return msgspec.json.encode(value).decode()


def json_schema(kind=Decision) -> dict:
    """`msgspec.json.schema(kind)` made acceptable as a strict structured-output format: the
    root is the object itself (not a `$ref`), `discriminator` (an OpenAPI keyword that
    strict mode refuses; each action's "type" enum says the same) is dropped, and so is
    every property that is not required (strict mode wants each property listed required:
    a field with a default, such as an action's `reason`, is read when given, never asked
    for)."""
    schema = msgspec.json.schema(kind)
    defs = schema.get("$defs", {})
    root = schema
    ref = schema.get("$ref", "")
    if ref.startswith("#/$defs/"):
        name = ref[len("#/$defs/"):]
        root = copy.deepcopy(defs[name])
        rest = {k: v for k, v in defs.items() if k != name}
        if rest:
            root["$defs"] = rest
    return _drop_discriminators(root)


def _drop_discriminators(node):
    if isinstance(node, dict):
        node = {k: _drop_discriminators(v) for k, v in node.items() if k != "discriminator"}
        if isinstance(node.get("properties"), dict):
            required = set(node.get("required", ()))
            node["properties"] = {k: v for k, v in node["properties"].items()
                                  if k in required}
        return node
    if isinstance(node, list):
        return [_drop_discriminators(v) for v in node]
    return node
