"""TREC run and qrels files.

A run line is `qid Q0 docno rank score tag`; a qrels line is `qid iteration docno grade`.
Readers name the file and line of anything malformed (InputError)."""

from __future__ import annotations

from typing import IO, Iterable

from .errors import InputError

TAG = "vole"


def run_lines(qid: str, docnos: Iterable[str], tag: str = TAG) -> list[str]:
    """Run lines for one topic, `docnos` best first: ranks 1.., scores n..1 (decreasing)."""
    docnos = list(docnos)
    n = len(docnos)
    return [f"{qid} Q0 {d} {i + 1} {n - i} {tag}\n" for i, d in enumerate(docnos)]


def write_run(out: IO[str], qid: str, docnos: Iterable[str], tag: str = TAG) -> None:
    out.writelines(run_lines(qid, docnos, tag))


def read_run(path: str) -> dict[str, list[tuple[str, float]]]:
    """{qid: [(docno, score), ...]} best first (by score descending, then rank as given)."""
    found: dict[str, list[tuple[float, int, str]]] = {}
    for number, fields in _lines(path):
        if len(fields) != 6:
            raise InputError(f"{path}:{number}: expected 'qid Q0 docno rank score tag'")
        qid, _, docno, rank, score, _ = fields
        try:
            value, position = float(score), int(rank)
        except ValueError:
            raise InputError(f"{path}:{number}: rank and score must be numbers") from None
        found.setdefault(qid, []).append((-value, position, docno))
    return {qid: [(d, -s) for s, _, d in sorted(rows)] for qid, rows in found.items()}


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    """{qid: {docno: grade}}."""
    found: dict[str, dict[str, int]] = {}
    for number, fields in _lines(path):
        if len(fields) != 4:
            raise InputError(f"{path}:{number}: expected 'qid iteration docno grade'")
        qid, _, docno, grade = fields
        try:
            found.setdefault(qid, {})[docno] = int(grade)
        except ValueError:
            raise InputError(f"{path}:{number}: the grade must be an integer") from None
    return found


def qrels_line(qid: str, docno: str, grade: int) -> str:
    return f"{qid} 0 {docno} {grade}\n"


def _lines(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                fields = line.split()
                if fields:
                    yield number, fields
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason})") from None
