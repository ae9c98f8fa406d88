"""Effectiveness of a run against qrels, computed by ir-measures: nDCG@10, R@100 and P@10
by default, averaged over the topics of the qrels (a topic the run lacks scores 0)."""

from __future__ import annotations

import ir_measures
import msgspec

from . import runfile
from .errors import InputError

MEASURES = ("nDCG@10", "R@100", "P@10")


class Evaluation(msgspec.Struct):
    measures: dict[str, float]                  # measure -> mean over the qrels' topics
    per_topic: dict[str, dict[str, float]]      # qid -> measure -> value
    topics: int                                 # topics in the qrels
    missing: list[str]                          # qrels topics the run does not have


def parse_measures(names) -> list:
    found = []
    for name in names:
        try:
            found.append(ir_measures.parse_measure(name))
        except Exception as err:  # ir-measures raises several kinds for a bad name
            raise InputError(f"unknown measure {name!r} (ir-measures says: {err}); "
                             "e.g. nDCG@10, R@100, P@10, AP, RR") from None
    return found


def evaluate(qrels_path: str, run_path: str, measures=MEASURES) -> Evaluation:
    parsed = parse_measures(measures)
    qrels = runfile.read_qrels(qrels_path)
    run = runfile.read_run(run_path)
    if not qrels:
        raise InputError(f"{qrels_path}: no qrels")
    q = [ir_measures.Qrel(qid, docno, grade) for qid, docs in qrels.items()
         for docno, grade in docs.items()]
    r = [ir_measures.ScoredDoc(qid, docno, score) for qid, docs in run.items()
         for docno, score in docs]
    per_topic: dict[str, dict[str, float]] = {qid: {} for qid in qrels}
    for metric in ir_measures.iter_calc(parsed, q, r):
        if metric.query_id in per_topic:
            per_topic[metric.query_id][str(metric.measure)] = float(metric.value)
    for values in per_topic.values():
        for m in parsed:
            values.setdefault(str(m), 0.0)
    means = ir_measures.calc_aggregate(parsed, q, r)
    return Evaluation({str(m): float(means.get(m, 0.0)) for m in parsed}, per_topic,
                      len(qrels), sorted(set(qrels) - set(run)))
