"""The model's decision (vole/decision.py): our shape and the published Vole runner's, in
any mix, read by one parser; the JSON Schema sent as the structured-output format stays
ours and fit for strict mode."""

from __future__ import annotations

import json
import os

import pytest

from vole import decision
from vole.errors import DecisionError

THEVOLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "thevole")


def test_decision_schema_is_the_structs_schema_fit_for_strict_mode():
    schema = decision.json_schema()
    assert schema["type"] == "object" and "$ref" not in schema
    assert schema["required"] == ["judgment", "action"]
    assert schema["additionalProperties"] is False
    assert "discriminator" not in json.dumps(schema)
    assert set(schema["$defs"]) == {"Judgment", "Query", "Next", "Document"}
    assert schema["$defs"]["Judgment"]["properties"]["grade"]["maximum"] == 3


def test_decisions_parse_and_fail_with_the_place():
    d = decision.parse('```json\n{"judgment": null, "action": {"type": "next", '
                       '"qid": "q2"}}\n```')
    assert d.judgment is None and d.action == decision.Next("q2")
    with pytest.raises(DecisionError, match=r"\$\.judgment\.grade"):
        decision.parse('{"judgment": {"docno": "a", "grade": 4, "reason": "", '
                       '"learned": ""}, "action": {"type": "next", "qid": "q0"}}')
    with pytest.raises(DecisionError, match="action"):
        decision.parse('{"judgment": null}')
    with pytest.raises(DecisionError, match="not one JSON object"):
        decision.parse("no json here")
    with pytest.raises(DecisionError, match="empty"):
        decision.parse("  ")



def test_decisions_in_the_published_shape_or_mixed():
    ours = decision.parse('{"judgment": {"docno": "a", "grade": 2, "reason": "r", '
                          '"learned": ""}, "action": {"type": "query", "gcl": "(^ a b)"}}')
    for text in ['{"latest_judgment": {"docno": "a", "relevance": 2, "reason": "r", '
                 '"learned": ""}, "action": {"op": "query", "query": "(^ a b)"}}',
                 '{"judgment": {"docno": "a", "relevance": 2, "reason": "r", "learned": ""},'
                 ' "action": {"op": "query", "gcl": "(^ a b)"}}']:
        assert decision.parse(text) == ours
    assert decision.parse('{"latest_judgment": null, "action": {"op": "next", "qid": "q1"}}'
                          ) == decision.Decision(None, decision.Next("q1"))
    # errors name the place in the model's own words
    with pytest.raises(DecisionError, match=r"\$\.latest_judgment\.relevance"):
        decision.parse('{"latest_judgment": {"docno": "a", "relevance": 7, "reason": "", '
                       '"learned": ""}, "action": {"op": "next", "qid": "q0"}}')
    with pytest.raises(DecisionError, match="`query`"):
        decision.parse('{"latest_judgment": null, "action": {"op": "query"}}')
    with pytest.raises(DecisionError, match=r"\$\.action\.op"):
        decision.parse('{"latest_judgment": null, "action": {"op": "search", "query": "x"}}')
    with pytest.raises(DecisionError, match="unknown field"):
        decision.parse('{"latest_judgment": null, "judgment": null, '
                       '"action": {"op": "next", "qid": "q0"}}')


def test_the_published_shape_with_action_reasons_and_nothing_to_judge():
    """The published runner's actions carry a `reason`, and its "nothing to judge" is a
    judgment whose docno is null (relevance 0): both are read, the reason kept."""
    d = decision.parse('{"latest_judgment": {"docno": null, "relevance": 0, "reason": '
                       '"No result yet.", "learned": ""}, "action": {"op": "query", '
                       '"query": "(^ goth rock)", "reason": "start broad"}}')
    assert d == decision.Decision(None, decision.Query("(^ goth rock)", "start broad"))
    d = decision.parse('{"latest_judgment": {"docno": "D1", "relevance": 3, "reason": "r", '
                       '"learned": "l"}, "action": {"op": "document", "docno": "D2", '
                       '"reason": "read it"}}')
    assert d.judgment == decision.Judgment("D1", 3, "r", "l")
    assert d.action == decision.Document("D2", "read it")
    # our shape may carry them too, and a reason is not required
    d = decision.parse('{"judgment": {"docno": null, "grade": 0, "reason": "", "learned": '
                       '""}, "action": {"type": "next", "qid": "q1", "reason": "more"}}')
    assert d == decision.Decision(None, decision.Next("q1", "more"))
    assert decision.parse('{"judgment": null, "action": {"type": "next", "qid": "q1"}}'
                          ).action.reason == ""
    # a null docno is "nothing to judge" only: other nulls are still refused
    with pytest.raises(DecisionError, match=r"\$\.latest_judgment\.relevance"):
        decision.parse('{"latest_judgment": {"docno": "D", "relevance": null, "reason": "",'
                       ' "learned": ""}, "action": {"op": "next", "qid": "q0"}}')
    with pytest.raises(DecisionError, match=r"\$\.action\.reason"):
        decision.parse('{"latest_judgment": null, "action": {"op": "next", "qid": "q0", '
                       '"reason": 3}}')


def test_the_schema_sent_asks_for_no_reason_and_lists_every_property_required():
    """Strict structured output wants every property required: the action's optional
    `reason` is read when given but not part of the schema sent."""
    schema = decision.json_schema()
    for name in ("Query", "Next", "Document"):
        action = schema["$defs"][name]
        assert "reason" not in action["properties"]
        assert set(action["properties"]) == set(action["required"])
    assert set(schema["$defs"]["Judgment"]["required"]) == {"docno", "grade", "reason",
                                                            "learned"}
    assert schema["$defs"]["Judgment"]["properties"]["docno"] == {
        "description": "The docno of the document judged.", "type": "string"}


def test_every_decision_of_the_published_run_parses():
    """Every decision gpt-5.5 made for the two topics copied from the published run."""
    with open(os.path.join(THEVOLE, "decisions.jsonl")) as f:
        logged = [json.loads(line) for line in f]
    parsed = [decision.parse(json.dumps(e["decision"])) for e in logged]
    assert len(parsed) == 157
    assert sum(d.judgment is None for d in parsed) == sum(
        e["decision"]["latest_judgment"]["docno"] is None for e in logged) == 65
    assert {type(d.action).__name__ for d in parsed} == {"Query", "Next", "Document"}
    assert all(d.action.reason for d in parsed)
