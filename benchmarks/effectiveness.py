"""Effectiveness of every free-text ranker against SQLite FTS5's bm25 (porter), with
ir-measures, on the three development sets of issue 17:

    Nave topics      ../shared/data/naves/topics.tsv (2,329) over the Nave verses
    Nave subtopics   ../shared/data/naves/subtopics.tsv (6,539) over the same verses
    RAG 86           ../shared/data/rag24/man86.topics over msmarco-sample.jsonl

    python -m benchmarks.effectiveness               # the table, into RESULTS.md
    python -m benchmarks.effectiveness --variants    # also the fusion variants tried

Each ranker returns the top 100 of each query (free text, the project's tokenizer); the
table gives nDCG@10, R@100 and ms/query (a fresh snapshot per query, as a server does),
and each ranker's nDCG@10 against FTS5's, query by query (the mean difference, a paired
t-test).
bm25+rm3 is BM25 of the query expanded by RM3 (annodb/feedback.py): with annodb's settings
(the free-text default: stop words dropped, 10 documents, 20 terms, original weight 0.9)
and with Anserini's (10, 10, 0.5, no stop words).
The term-statistics variants (stemmers, df, stop words, idf, k1/b, RM3's settings) are
benchmarks/bm25_variants.py's, computed in memory.
The fusion variants combine the SSR and BM25 rankings computed for the table (their time
is the two rankings'): reciprocal rank fusion (k = 60), SSR re-ranking BM25's top 20 or
100, and the sum of max-normalised scores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import time

from benchmarks.common.paths import SHARED
from benchmarks.common.paths import WORK as _WORK

WORK = os.path.join(_WORK, "effectiveness")
DEPTH = 100

SETS = {  # name: (documents, topics, qrels)
    "Nave topics": ("naves/docs.jsonl", "naves/topics.tsv", "naves/topics.qrels"),
    "Nave subtopics": ("naves/docs.jsonl", "naves/subtopics.tsv", "naves/subtopics.qrels"),
    "RAG 86": ("rag24/msmarco-sample.jsonl", "rag24/man86.topics", "rag24/man86.qrels"),
}


def databases(docs: str):
    """(annodb database, FTS5 connection) of a corpus, built once under benchmarks/work."""
    import annodb
    from annodb import ingest
    from benchmarks.common.engines import records

    name = os.path.splitext(os.path.basename(docs))[0]
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, f"{name}.db")
    stamp = os.path.join(path, "built")
    if not os.path.exists(stamp):
        shutil.rmtree(path, ignore_errors=True)
        ingest.ingest(path, [docs])
        open(stamp, "w").close()
    fts = os.path.join(WORK, f"{name}-fts5.db")
    if not os.path.exists(fts):
        con = sqlite3.connect(fts + ".tmp")
        con.execute("CREATE VIRTUAL TABLE t USING fts5(docid UNINDEXED, body, "
                    "tokenize = 'porter unicode61')")
        con.executemany("INSERT INTO t VALUES (?, ?)",
                        ((d, " ".join(t)) for d, t in records(docs)))
        con.commit()
        con.close()
        os.rename(fts + ".tmp", fts)
    return annodb.open(path, readonly=True), sqlite3.connect(fts)


def topics(path: str) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip()]


def fts5(con, text: str) -> list[tuple[str, float]]:
    from annodb.tokenizer import tokens
    words = list(dict.fromkeys(tokens(text)))
    if not words:
        return []
    rows = con.execute("SELECT docid, bm25(t) FROM t WHERE t MATCH ? ORDER BY bm25(t) "
                       "LIMIT ?", (" OR ".join(f'"{w}"' for w in words), DEPTH)).fetchall()
    return [(d, -s) for d, s in rows]


def annodb_ranker(db, rank: str, **options):
    def run(text: str) -> list[tuple[str, float]]:
        with db.read() as r:
            return [(h.docno, h.score) for h in r.search_text(
                text, k=DEPTH, rank=rank, snippets=False, **options)]
    return run


# fusion variants (on rankings computed already) -----------------------------------------

def rrf(a, b, k=60):
    score = {}
    for ranking in (a, b):
        for i, (d, _) in enumerate(ranking):
            score[d] = score.get(d, 0.0) + 1.0 / (k + i + 1)
    return sorted(score.items(), key=lambda x: -x[1])[:DEPTH]


def rerank(ssr, bm, n):
    """BM25's top n ordered by SSR's order (those SSR did not rank after, by BM25)."""
    at = {d: i for i, (d, _) in enumerate(ssr)}
    top = [d for d, _ in bm[:n]]
    order = sorted(range(len(top)), key=lambda i: (at.get(top[i], len(ssr) + i)))
    out = [(top[i], float(len(top) - j)) for j, i in enumerate(order)]
    return out + [(d, 0.0) for d, _ in bm[n:]]


def normsum(ssr, bm, weight=1.0):
    """SSR's rank as a score (1 at the top, falling to 0 at DEPTH: its tiers' scores are
    not comparable across tiers) plus weight x BM25's score over its best."""
    score = {d: 1.0 - i / DEPTH for i, (d, _) in enumerate(ssr)}
    top = bm[0][1] if bm else 1.0
    for d, s in bm:
        score[d] = score.get(d, 0.0) + weight * s / (top or 1.0)
    return sorted(score.items(), key=lambda x: -x[1])[:DEPTH]


FTS5 = "SQLite FTS5 bm25 (porter)"


def paired(a: dict, b: dict, queries) -> tuple[float, float, float]:
    """(mean of a - b, Student's t, two-sided p) over the queries' per-query values
    (a query a run answers nothing for: 0)."""
    import math
    d = [a.get(q, 0.0) - b.get(q, 0.0) for q in queries]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    if sd == 0:
        return mean, 0.0, 1.0
    t = mean / (sd / math.sqrt(n))
    try:
        from scipy import stats
        p = float(2 * stats.t.sf(abs(t), n - 1))
    except ImportError:  # (the normal approximation)
        p = math.erfc(abs(t) / math.sqrt(2))
    return mean, t, p


def measure(judged, runs: dict, seconds: dict, n: int) -> list[tuple]:
    """Per ranker: (name, nDCG@10, R@100, ms/query, its nDCG@10 against FTS5's: mean
    difference, paired t, p)."""
    import ir_measures
    from ir_measures import R, nDCG
    rows, per = [], {}
    queries = sorted({j.query_id for j in judged})
    for name, run in runs.items():
        scored = [ir_measures.ScoredDoc(q, d, DEPTH - i) for q, ranking in run.items()
                  for i, (d, _) in enumerate(ranking)]  # (by rank: SSR's tiers come first)
        m = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], judged, scored)
        per[name] = {x.query_id: x.value for x in
                     ir_measures.iter_calc([nDCG @ 10], judged, scored)}
        rows.append((name, m[nDCG @ 10], m[R @ 100], seconds[name] / n * 1000))
    return [r + ((paired(per[r[0]], per[FTS5], queries),) if r[0] != FTS5 and FTS5 in per
                 else (None,)) for r in rows]


RM3_ROW = "annodb bm25+rm3 (stop words, 10 docs, 20 terms, 0.9)"


def evaluate(name: str, variants: bool) -> str:
    import ir_measures
    from annodb import feedback
    docs, tpath, qpath = (os.path.join(SHARED, "data", p) for p in SETS[name])
    db, con = databases(docs)
    todo = topics(tpath)
    rankers = {
        "annodb ssr (search_text tiers)": annodb_ranker(db, "ssr"),
        "annodb bm25": annodb_ranker(db, "bm25"),
        "annodb fused": annodb_ranker(db, "fused"),
        RM3_ROW: annodb_ranker(db, "bm25+rm3"),
        "annodb bm25+rm3, Anserini's (10 docs, 10 terms, 0.5)":
            annodb_ranker(db, "bm25+rm3", feedback=feedback.ANSERINI),
        FTS5: lambda text: fts5(con, text),
    }
    if variants:
        rankers["annodb bm25 k1=1.2 b=0.75"] = annodb_ranker(db, "bm25", k1=1.2, b=0.75)
    runs, seconds = {}, {}
    for label, fn in rankers.items():
        fn(todo[0][1])  # warm
        run, t = {}, time.perf_counter()
        for qid, text in todo:
            run[qid] = fn(text)
        seconds[label] = time.perf_counter() - t
        runs[label] = run
    if variants:
        ssr, bm = runs["annodb ssr (search_text tiers)"], runs["annodb bm25"]
        both = seconds["annodb ssr (search_text tiers)"] + seconds["annodb bm25"]
        for label, fn in (("fusion: RRF k=60", lambda a, b: rrf(a, b)),
                          ("fusion: RRF k=20", lambda a, b: rrf(a, b, 20)),
                          ("fusion: SSR re-ranks BM25's top 20", lambda a, b: rerank(a, b, 20)),
                          ("fusion: SSR re-ranks BM25's top 100",
                           lambda a, b: rerank(a, b, 100)),
                          ("fusion: normalised sum", lambda a, b: normsum(a, b)),
                          ("fusion: normalised sum, BM25 x2", lambda a, b: normsum(a, b, 2.0))):
            runs[label] = {q: fn(ssr.get(q, []), bm.get(q, [])) for q in ssr}
            seconds[label] = both
    judged = list(ir_measures.read_trec_qrels(qpath))
    rows = measure(judged, runs, seconds, len(todo))
    out = (f"**{name}** ({len(todo):,} queries, {os.path.basename(tpath)} over "
           f"{os.path.basename(docs)}; top {DEPTH})\n\n"
           "| ranker | nDCG@10 | R@100 | ms/query | nDCG@10 - FTS5's (paired t, p) |\n"
           "|---|---|---|---|---|\n")
    out += "".join(f"| {r[0]} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.2f} | "
                   + (f"{r[4][0]:+.4f} (t {r[4][1]:+.2f}, p {r[4][2]:.2g})" if r[4] else "")
                   + " |\n" for r in rows)
    print(out, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", action="store_true", help="also the fusion variants")
    ap.add_argument("--set", choices=list(SETS), action="append", help="only these sets")
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if not os.path.isdir(SHARED):
        print(f"benchmarks need ../shared (not found at {SHARED}); set ANNODB_SHARED",
              file=sys.stderr)
        return 0
    from benchmarks.common.results import machine, record
    import datetime
    parts = [evaluate(name, args.variants) for name in args.set or SETS]
    if not args.no_record:
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        record("effectiveness", "## Effectiveness (`python -m benchmarks.effectiveness"
               + (" --variants" if args.variants else "") + "`)\n\n"
               f"Run {now} on {machine()}.\n\n" + "\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
