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


class Next(msgspec.Struct, tag="next", tag_field="type", forbid_unknown_fields=True):
    """Show the next result of an earlier query."""
    qid: Annotated[str, msgspec.Meta(description="The qid of an earlier query, e.g. q3")]


class Document(msgspec.Struct, tag="document", tag_field="type", forbid_unknown_fields=True):
    """Show the full text of a document."""
    docno: str


Action = Query | Next | Document


class Decision(msgspec.Struct, forbid_unknown_fields=True):
    """One model turn: judge the latest unjudged result (or null), then one action."""
    judgment: Judgment | None
    action: Action


_decoders: dict[type, msgspec.json.Decoder] = {}


def parse(text: str, kind: type = Decision):
    """The `kind` (a Decision) in the model's answer. Tolerates a Markdown code fence or words
    around one JSON object (endpoints without structured output add them); raises
    DecisionError naming what is wrong."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    if not text or not text.strip():
        raise DecisionError("the answer was empty; answer with one JSON object")
    try:
        return decoder.decode(text)
    except msgspec.ValidationError as err:
        raise DecisionError(f"the decision is not valid: {err}") from None
    except msgspec.DecodeError as err:
        first, last = text.find("{"), text.rfind("}")
        if 0 <= first < last and text[first:last + 1] != text.strip():
            try:
                return decoder.decode(text[first:last + 1])
            except msgspec.ValidationError as inner:
                raise DecisionError(f"the decision is not valid: {inner}") from None
            except msgspec.DecodeError:
                pass
        raise DecisionError(f"the answer is not one JSON object: {err}") from None


def encode(value) -> str:
    return msgspec.json.encode(value).decode()


def json_schema(kind=Decision) -> dict:
    """`msgspec.json.schema(kind)` made acceptable as a strict structured-output format: the
    root is the object itself (not a `$ref`), and `discriminator` (an OpenAPI keyword that
    strict mode refuses; each action's "type" enum says the same) is dropped."""
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
        return {k: _drop_discriminators(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_drop_discriminators(v) for v in node]
    return node
