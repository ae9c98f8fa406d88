"""The 4,435 real LLM queries (tests/data/vole-queries.tsv, 4th column), and one query
answered as `annodb serve` answers it."""

from __future__ import annotations

import csv

from .paths import QUERIES


def load_queries(path: str = QUERIES) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [row[3] for row in rows[1:] if len(row) >= 4]


def answer_as_served(db, q: str, free_text: bool = False) -> bool:
    """One query in a fresh snapshot as `annodb serve` answers it: ranked by SSR to depth
    1000 and the first hit made with its snippet (free_text: `search_text(q, k=10)` with
    snippets, as an agent asks). False when the query is refused (an AnnodbError)."""
    import annodb
    with db.read() as r:
        if free_text:
            r.search_text(q, k=10)
            return True
        try:
            ranking = r.rank(q, depth=1000, lenient=True)
        except annodb.AnnodbError:
            return False
        if len(ranking):
            ranking.hit(0)
    return True
