"""How a JSON record becomes a document (annodb/records.py): its docno from the id field,
its text fields in order with their paths, numbers and booleans as values on their full
path, everything else kept as metadata, and sparse vectors as folded `field:term` values."""

from __future__ import annotations

import pytest

from annodb.errors import IngestError
from annodb.records import prepare, record_docno


def test_the_docno_is_the_first_id_field_present_or_the_one_chosen():
    assert record_docno({"id": "b", "docno": "a", "_id": "c"}, None) == ("docno", "a")
    assert record_docno({"_id": 7}, None) == ("_id", "7")
    assert record_docno({"id": "b", "key": "k"}, "key") == ("key", "k")
    for record, field, message in [({"text": "x"}, None, "none of the id fields"),
                                   ({"id": "b"}, "key", "no id field 'key'"),
                                   ({"id": True}, None, "non-empty string or integer"),
                                   ({"id": ""}, None, "non-empty string or integer"),
                                   ({"id": 1.5}, None, "non-empty string or integer")]:
        with pytest.raises(IngestError, match=message):
            record_docno(record, field)


def test_every_string_but_the_id_is_text_in_record_order_with_its_path():
    p = prepare({"title": "T", "id": "r1", "n": 2, "a": {"b": "inner", "c": 1},
                 "authors": ["x", "y"], "flag": False})
    assert p.docno == "r1"
    assert p.texts == [("title", ":title:", "T"), ("b", ":a:b:", "inner"),
                       ("authors", ":authors:[0]:", "x"), ("authors", ":authors:[1]:", "y")]
    assert p.values == [(":n:", 2.0), (":a:c:", 1.0), (":flag:", 0.0)]
    assert p.meta == {"n": 2, "a": {"c": 1}, "flag": False}


def test_chosen_text_fields_in_their_order_and_the_rest_as_metadata():
    p = prepare({"id": "r1", "body": "B", "title": "T", "url": "http://x", "big": 2**70,
                 "bad": float("nan")}, text_fields=["title", "body"])
    assert p.texts == [("title", ":title:", "T"), ("body", ":body:", "B")]
    assert p.values == [(":big:", float(2**70))]      # (NaN is no value: kept as it is)
    assert p.meta["url"] == "http://x" and p.meta["big"] == str(2**70)
    assert p.meta["bad"] != p.meta["bad"]


def test_a_sparse_field_is_folded_terms_with_their_weights():
    p = prepare({"id": "r1", "text": "hello", "v": {"Tea": 1.5, "zero": 0, "cup": 2}},
                sparse_fields=["v"])
    assert p.texts == [("text", ":text:", "hello")] and "v" not in p.meta
    assert p.values == [("v:tea", 1.5), ("v:cup", 2.0)]
    for vector, message in [({"two words": 1}, "one word"), ({"t": -1}, "weight from 0"),
                            ({"t": True}, "weight from 0"), ([1, 2], "must be an object")]:
        with pytest.raises(IngestError, match=message):
            prepare({"id": "r1", "v": vector}, sparse_fields=["v"])
