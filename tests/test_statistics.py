"""What a writer keeps for ranking and what a ranker reads of it (annodb/statistics.py):
the statistics of shards combined are one database's holding the same documents; a
batch's fields counted by short name only; the words an erase takes from a document."""

from __future__ import annotations

import numpy as np

import annodb
from annodb import statistics

DOCS = [({"id": f"d{i}", "title": f"title {i % 3}", "text": ("tea " * (i % 4)) + "cup",
          "v": {"tea": i / 2}}, None) for i in range(12)]
WORDS = ["tea", "cup", "title", "absent"]


def gathered(path, docs) -> statistics.Statistics:
    with annodb.open(path) as db:
        with db.write() as w:
            w.add_many(docs, sparse_fields=["v"])
        with db.read() as r:
            return statistics.gather(r, WORDS + ["v:tea"], ["title:", "text:"])


def test_shards_combined_are_one_database(tmp_path):
    whole = gathered(tmp_path / "one.db", DOCS)
    parts = [gathered(tmp_path / f"p{k}.db", DOCS[k::3]) for k in range(3)]
    assert statistics.combine(parts) == whole
    assert whole.documents == 12 and whole.df["tea"] == 9 and whole.df["absent"] == 0
    assert whole.high["v:tea"] == 5.5 and whole.fields["title:"] == (12, 24)


def test_a_batchs_fields_are_counted_by_short_name_only():
    names = ["title:", ":title:", ":", "v:tea", "text:", "gen:"]
    name = np.array([0, 1, 2, 3, 0, 4, 4, 5])
    doc = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    lengths = np.array([2, 2, 9, 1, 3, 4, 5, 1])
    assert statistics.batch_fields(names, name, doc, lengths, sparse=("v", "gen")) == {
        "title:": (2, 5), "text:": (1, 9)}
    assert statistics.batch_fields([], np.zeros(0, int), np.zeros(0, int),
                                   np.zeros(0, int)) == {}


def test_the_words_an_erase_takes_from_a_document(tmp_path):
    with annodb.open(tmp_path / "e.db") as db:
        with db.write() as w:
            w.add("Tea and more tea then Café cafe", docno="d")
        with db.read() as r:
            doc = r.document("d")
        none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        s = doc.start
        assert statistics.lost_words(doc, s + 1, s + 2, none) == ["and", "more"]
        assert statistics.lost_words(doc, s, s, none) == []        # tea is also at s + 3
        assert statistics.lost_words(doc, s, s, (np.array([s + 3]), np.array([s + 3]))) \
            == ["tea"]                                               # (that one erased)
        assert statistics.lost_words(doc, s + 5, s + 5, none) == ["café"]
        assert statistics.lost_words(doc, s + 5, s + 5, none, fold=True) == []
        assert statistics.document_fields(doc) == {}               # (plain text: none)
