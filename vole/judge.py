"""Hole filling, as the paper did with UMBRELA: for each (topic, docno) of a run that the
qrels do not grade, ask a model for a grade 0-3 (our own prompt, prompts.JUDGE_INSTRUCTIONS)
and write it as a TREC qrels line.

Only the holes are written. Each line is written as soon as it is made, and pairs already
in the output file are not asked again, so an interrupted judging resumes where it stopped.
An answer that is not a valid grade is asked again (up to ATTEMPTS times), then counted as
failed; a model that fails for good raises ModelError (what was written stays).
"""

from __future__ import annotations

import os
from typing import Annotated, Callable

import msgspec

from . import decision, prompts, runfile
from .backend import Backend
from .errors import DecisionError, InputError
from .model import Model
from .topics import Topic

ATTEMPTS = 3
PASSAGE_CHARS = 20_000


class Assessment(msgspec.Struct, forbid_unknown_fields=True):
    """The judge's answer."""
    reason: str
    grade: Annotated[int, msgspec.Meta(ge=0, le=3)]


SCHEMA = decision.json_schema(Assessment)


class Filled(msgspec.Struct):
    holes: int = 0         # (topic, docno) pairs of the run without a qrel
    judged: int = 0        # graded now
    already: int = 0       # found in the output file from an earlier, interrupted run
    failed: int = 0        # document missing, or no valid grade after ATTEMPTS
    failures: list[str] = []


def holes(run: dict[str, list[tuple[str, float]]], qrels: dict[str, dict[str, int]],
          depth: int | None = None) -> list[tuple[str, str]]:
    """(qid, docno) of the run (its first `depth` per topic) that the qrels lack, in run
    order."""
    found = []
    for qid, docs in run.items():
        graded = qrels.get(qid, {})
        for docno, _ in docs[:depth]:
            if docno not in graded:
                found.append((qid, docno))
    return found


def fill(run_path: str, qrels_path: str, topics: list[Topic], backend: Backend,
         model: Model, out_path: str, *, depth: int | None = None,
         echo: Callable[[str], None] | None = None) -> Filled:
    run = runfile.read_run(run_path)
    qrels = runfile.read_qrels(qrels_path)
    texts = {t.qid: t.text for t in topics}
    missing = sorted(set(run) - set(texts))
    if missing:
        raise InputError(f"the run has topics the topics file lacks: {', '.join(missing[:10])}")
    todo = holes(run, qrels, depth)
    done = runfile.read_qrels(out_path) if os.path.exists(out_path) else {}
    result = Filled(holes=len(todo))
    with open(out_path, "a", encoding="utf-8") as out:
        for qid, docno in todo:
            if docno in done.get(qid, {}):
                result.already += 1
                continue
            grade, why = assess(model, backend, texts[qid], qid, docno)
            if grade is None:
                result.failed += 1
                result.failures.append(f"{qid} {docno}: {why}")
                if echo is not None:
                    echo(f"{qid} {docno}: not graded: {why}")
                continue
            out.write(runfile.qrels_line(qid, docno, grade))
            out.flush()
            result.judged += 1
    return result


def assess(model: Model, backend: Backend, query: str, qid: str,
           docno: str) -> tuple[int | None, str]:
    """(grade, reason) for one passage, or (None, why not)."""
    reply = backend.document(docno)
    if not reply.get("ok"):
        return None, f"cannot read the document: {reply.get('error')}"
    passage = reply.get("document", "")[:PASSAGE_CHARS]
    messages = [{"role": "user", "content": prompts.judge_request(query, passage)}]
    why = ""
    for attempt in range(ATTEMPTS):
        done = model.complete(prompts.JUDGE_INSTRUCTIONS, messages, SCHEMA,
                              schema_name="assessment",
                              context={"topic": qid, "docno": docno, "try": attempt + 1})
        try:
            answer = decision.parse(done.text, Assessment)
        except DecisionError as err:
            why = str(err)
            continue
        return answer.grade, answer.reason
    return None, f"no valid grade in {ATTEMPTS} answers ({why})"
