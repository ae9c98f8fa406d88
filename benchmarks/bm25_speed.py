"""BM25 top-10 speed at scale: annodb against SQLite FTS5 and tantivy, the same free-text
queries (the 86 TREC RAG questions and the 6,539 Nave subtopics) on the scale corpus.

    python -m benchmarks.bm25_speed                  # builds what is missing under work/
    python -m benchmarks.bm25_speed --db PATH        # an annodb database of the corpus

Every engine gets each query as the OR of its distinct words (annodb's tokenizer) and
returns the ten best document ids by its BM25: annodb `search_text(rank="bm25", k=10)`
(docnos, no snippets; a fresh snapshot per query, as a server does; its words conflated
with their Snowball forms) and the free-text default, `rank="bm25+rm3"` (the same, then
RM3's second query; `--annodb-only --db PATH` times these two alone, for a growth point), FTS5 `... MATCH 'w1 OR w2 ...' ORDER BY bm25(t) LIMIT 10`,
tantivy a boolean query of SHOULD term queries, top 10. Each engine runs in a child
process of its own, after a warm-up on the first WARM queries; the table gives the median,
p90, p99 and max per query set, and annodb's ratios to each peer measured in the same run.
Every 10th subtopic is timed (654 of 6,539): FTS5 takes about a second for some.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import multiprocessing
import os
import sys
import time

import numpy as np

from benchmarks.common.paths import SHARED, WORK
SETS = {"RAG 86 questions": ("rag24/man86.topics", 1),
        "Nave subtopics, every 10th": ("naves/subtopics.tsv", 10)}
WARM = 50  # queries run before timing (each engine's caches, numba's compiled code)


def load(path: str, every: int = 1) -> list[str]:
    with open(path, encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t", 1)[1] for line in f if line.strip()]
    return texts[::every]


def words(text: str) -> list[str]:
    from annodb.tokenizer import tokens
    return list(dict.fromkeys(tokens(text)))


class Annodb:
    name = "annodb"

    def __init__(self, path):
        import annodb
        self.db = annodb.open(path, readonly=True)

    def query(self, text):
        with self.db.read() as r:
            return [h.docno for h in r.search_text(text, k=10, rank="bm25", snippets=False)]


class AnnodbRm3(Annodb):
    """The free-text default: BM25 of the query expanded by RM3 (annodb.feedback)."""
    name = "annodb bm25+rm3"

    def query(self, text):
        with self.db.read() as r:
            return [h.docno for h in r.search_text(text, k=10, rank="bm25+rm3",
                                                   snippets=False)]


class Fts5:
    name = "SQLite FTS5"

    def __init__(self, path):
        import sqlite3
        self.con = sqlite3.connect(path)

    def query(self, text):
        ws = words(text)
        if not ws:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in ws)
        return [r[0] for r in self.con.execute(
            "SELECT docid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 10", (match,))]


class Tantivy:
    name = "tantivy"

    def __init__(self, path):
        import tantivy as tv
        self.tv = tv
        self.index = tv.Index.open(path)
        self.searcher = self.index.searcher()

    def query(self, text):
        tv = self.tv
        parts = [(tv.Occur.Should, tv.Query.term_query(self.index.schema, "body", w))
                 for w in words(text)]
        if not parts:
            return []
        hits = self.searcher.search(tv.Query.boolean_query(parts), 10).hits
        return [self.searcher.doc(a)["docid"][0] for _, a in hits]


def _child(engine, path, queries, out):
    e = engine(path)
    for text in queries[:WARM]:
        e.query(text)
    gc.collect()
    gc.freeze()
    times = []
    for text in queries:
        t = time.perf_counter()
        e.query(text)
        times.append(time.perf_counter() - t)
    out.send(times)


def timed(engine, path, queries) -> np.ndarray:
    ctx = multiprocessing.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=_child, args=(engine, path, queries, b))
    p.start()
    times = a.recv()
    p.join()
    return np.array(times) * 1000


def build(corpus: str, annodb_path: str | None) -> dict:
    """The engines' indexes of the corpus under work/ (built when missing)."""
    from benchmarks.common import engines
    paths = {"annodb": annodb_path}
    for engine, sub in ((engines.Annodb, "annodb"), (engines.Fts5, "fts5"),
                        (engines.Tantivy, "tantivy")):
        if paths.get(sub):
            continue
        if engine is engines.Tantivy and engines.Tantivy not in engines.available():
            print("tantivy is not installed (pip install tantivy): its rows are left out",
                  file=sys.stderr, flush=True)
            continue
        workdir = os.path.join(WORK, "bm25-" + sub)
        os.makedirs(workdir, exist_ok=True)
        e = engine(workdir)
        stamp = os.path.join(workdir, "built")
        if not os.path.exists(stamp):
            print(f"building {engine.name} ...", file=sys.stderr, flush=True)
            e.ingest(corpus)
            open(stamp, "w").close()
        paths[sub] = e.path
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=os.path.join(WORK, "corpus.jsonl"))
    ap.add_argument("--db", help="an annodb database of the corpus (default: built)")
    ap.add_argument("--no-record", action="store_true", help="print only")
    ap.add_argument("--annodb-only", action="store_true",
                    help="annodb's rankers only (no peer built or timed): for a growth "
                         "point, e.g. --db of the 4x corpus")
    args = ap.parse_args(argv)
    if not os.path.isdir(SHARED) or not os.path.exists(args.corpus):
        print("needs ../shared and the scale corpus (see benchmarks/README.md)",
              file=sys.stderr)
        return 0
    if args.annodb_only:
        if not args.db:
            ap.error("--annodb-only needs --db")
        paths = {"annodb": args.db}
        engines = []
    else:
        paths = build(args.corpus, args.db)
        engines = [(Fts5, paths["fts5"])]
        try:
            import tantivy  # noqa: F401
            engines.append((Tantivy, paths["tantivy"]))
        except ImportError:
            pass
    engines[:0] = [(Annodb, paths["annodb"]), (AnnodbRm3, paths["annodb"])]
    out = ("| queries | engine | median ms | p90 ms | p99 ms | max ms |\n"
           "|---|---|---|---|---|---|\n")
    for label, (rel, every) in SETS.items():
        queries = load(os.path.join(SHARED, "data", rel), every)
        got = {e.name: timed(e, path, queries) for e, path in engines}
        for name, t in got.items():
            out += (f"| {label} ({len(queries):,}) | {name} | {np.median(t):.2f} | "
                    f"{np.percentile(t, 90):.2f} | {np.percentile(t, 99):.2f} | "
                    f"{t.max():.1f} |\n")
        pairs = [("annodb bm25+rm3", "annodb")] + [
            (mine, name) for mine in ("annodb", "annodb bm25+rm3") for name in got
            if not name.startswith("annodb")]
        for mine, name in pairs:
            ours, t = got[mine], got[name]
            out += (f"| | {mine} / {name} | {np.median(ours) / np.median(t):.2f}x | "
                    f"{np.percentile(ours, 90) / np.percentile(t, 90):.2f}x | "
                    f"{np.percentile(ours, 99) / np.percentile(t, 99):.2f}x | "
                    f"{ours.max() / t.max():.2f}x |\n")
        print(out, flush=True)
    if not args.no_record:
        from benchmarks.common.results import machine, record
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        record("bm25-speed", "## BM25 top-10 at scale (`python -m benchmarks.bm25_speed`)"
               f"\n\nRun {now} on {machine()}; the scale corpus (1.67M passages), free-text "
               "queries as the OR of their words, ten best by each engine's BM25.\n\n" + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
