"""BM25 on BEIR SciFact: annodb beside tantivy and SQLite FTS5, in one process, interleaved
query by query; and its effectiveness beside Anserini's published figures.

    python -m benchmarks.scifact                 # top 10 and top 1000, 300 claims, 5 rounds
    python -m benchmarks.scifact --rounds 3 --no-record

The 5,183 abstracts (title and text) and the 300 test claims as free text
(`../shared/data/scifact`). annodb: `search_text(rank="bm25", k, snippets=False)` in a fresh
read snapshot per query (as a server does), its docnos made; tantivy: a boolean query of
SHOULD term queries over the claim's words (annodb's tokenizer, Lucene's stop words left out as annodb's BM25 leaves them), top k, the docid of every
hit read from its store; FTS5: `MATCH 'w1 OR w2 ...' ORDER BY bm25 LIMIT k` with the docids.
Every query runs on every engine in turn, in rounds, after a warm-up round; the table gives
each engine's median and p99 per query over all rounds, and annodb's ratios to each peer.
The same run checks annodb's nDCG@10 / R@100 against Anserini's published BM25 flat figures
(0.6789 / 0.9253).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import shutil
import sqlite3
import sys
import time

import msgspec
import numpy as np

from benchmarks.common.paths import WORK as _WORK
from benchmarks.common.paths import shared
from benchmarks.common.results import latency_cells, ratio_cells

DATA = shared("data", "scifact")
WORK = os.path.join(_WORK, "scifact")
ANSERINI = {"nDCG@10": 0.6789, "R@100": 0.9253}


def corpus() -> list[dict]:
    dec = msgspec.json.Decoder()
    with open(os.path.join(DATA, "corpus.jsonl"), "rb") as f:
        return [dec.decode(line) for line in f if line.strip()]


def topics() -> list[tuple[str, str]]:
    with open(os.path.join(DATA, "topics.tsv"), encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip()]


def words(text: str) -> list[str]:
    """The claim's words as annodb's BM25 scores them (its tokenizer, Lucene's stop words
    left out unless nothing else is left), so that every engine gets the same words."""
    from annodb.feedback import without_stop_words
    from annodb.tokenizer import tokens
    return list(dict.fromkeys(without_stop_words(tokens(text))))


class Annodb:
    name = "annodb"

    def __init__(self, docs):
        import annodb
        path = os.path.join(WORK, "annodb.db")
        if not os.path.exists(os.path.join(path, "built")):
            shutil.rmtree(path, ignore_errors=True)
            db = annodb.open(path)
            with db.write() as w:
                for d in docs:
                    w.add({"docid": d["docid"], "title": d["title"], "text": d["text"]})
            db.close()
            open(os.path.join(path, "built"), "w").close()
        self.db = annodb.open(path, readonly=True)

    def query(self, text: str, k: int) -> list[str]:
        with self.db.read() as r:
            return [h.docno for h in r.search_text(text, k=k, rank="bm25", snippets=False)]


class Tantivy:
    name = "tantivy"

    def __init__(self, docs):
        import tantivy as tv
        self.tv = tv
        path = os.path.join(WORK, "tantivy")
        builder = tv.SchemaBuilder()
        builder.add_text_field("docid", stored=True, tokenizer_name="raw")
        builder.add_text_field("body", stored=False)
        schema = builder.build()
        if not os.path.exists(os.path.join(path, "built")):
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
            index = tv.Index(schema, path=path)
            w = index.writer()
            for d in docs:
                w.add_document(tv.Document(docid=d["docid"],
                                           body=d["title"] + "\n" + d["text"]))
            w.commit()
            w.wait_merging_threads()
            open(os.path.join(path, "built"), "w").close()
        self.index = tv.Index(schema, path=path)
        self.index.reload()
        self.searcher = self.index.searcher()

    def query(self, text: str, k: int) -> list[str]:
        tv = self.tv
        parts = [(tv.Occur.Should, tv.Query.term_query(self.index.schema, "body", w))
                 for w in words(text)]
        hits = self.searcher.search(tv.Query.boolean_query(parts), k).hits
        return [self.searcher.doc(a)["docid"][0] for _, a in hits]


class Fts5:
    name = "SQLite FTS5"

    def __init__(self, docs):
        path = os.path.join(WORK, "fts5.sqlite")
        if not os.path.exists(path + ".built"):
            if os.path.exists(path):
                os.remove(path)
            con = sqlite3.connect(path)
            con.execute("CREATE VIRTUAL TABLE t USING fts5(docid UNINDEXED, body)")
            con.executemany("INSERT INTO t VALUES (?, ?)",
                            [(d["docid"], d["title"] + "\n" + d["text"]) for d in docs])
            con.commit()
            con.close()
            open(path + ".built", "w").close()
        self.con = sqlite3.connect(path)

    def query(self, text: str, k: int) -> list[str]:
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words(text))
        return [r[0] for r in self.con.execute(
            "SELECT docid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (match, k))]


def effectiveness(engine, queries) -> dict[str, float]:
    """nDCG@10 and R@100 of the engine's top 1000 (ir-measures, as the other benchmarks)."""
    import ir_measures
    from ir_measures import R, nDCG
    qrels = list(ir_measures.read_trec_qrels(os.path.join(DATA, "qrels.txt")))
    run = [ir_measures.ScoredDoc(qid, docno, 1000.0 - i)
           for qid, text in queries for i, docno in enumerate(engine.query(text, 1000))]
    got = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run)
    return {"nDCG@10": got[nDCG @ 10], "R@100": got[R @ 100]}


def timed(engines, queries, k: int, rounds: int) -> dict[str, np.ndarray]:
    """Each engine's time per query (ms), every query run on each engine in turn."""
    for e in engines:  # warm-up round
        for _, text in queries:
            e.query(text, k)
    gc.collect()
    gc.freeze()
    times = {e.name: [] for e in engines}
    for _ in range(rounds):
        for _, text in queries:
            for e in engines:
                t = time.perf_counter()
                e.query(text, k)
                times[e.name].append(time.perf_counter() - t)
    gc.unfreeze()
    return {name: np.array(t) * 1000 for name, t in times.items()}


def table(got: dict[str, np.ndarray], k: int) -> str:
    out = ""
    for name, t in got.items():
        out += f"| top {k} | {name} | {latency_cells(t)} |\n"
    for name, t in got.items():
        if name != "annodb":
            out += f"| | annodb / {name} | {ratio_cells(got['annodb'], t)} |\n"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds over the claims")
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if not os.path.isdir(DATA):
        print(f"needs {DATA} (BEIR SciFact, ../shared/data): nothing measured",
              file=sys.stderr)
        return 0
    os.makedirs(WORK, exist_ok=True)
    docs, queries = corpus(), topics()
    engines = [Annodb(docs), Fts5(docs)]
    try:
        engines.append(Tantivy(docs))
    except ImportError:
        print("tantivy is not installed (pip install tantivy): its rows are left out",
              file=sys.stderr)
    quality = effectiveness(engines[0], queries)
    out = (f"annodb BM25 (k1 0.9, b 0.4; title and text): nDCG@10 {quality['nDCG@10']:.4f}, "
           f"R@100 {quality['R@100']:.4f}; Anserini BM25 flat (published): "
           f"{ANSERINI['nDCG@10']:.4f}, {ANSERINI['R@100']:.4f}.\n\n"
           "| depth | engine | median ms | p90 ms | p99 ms |\n|---|---|---|---|---|\n")
    for k in (10, 1000):
        out += table(timed(engines, queries, k, args.rounds), k)
    print(out, flush=True)
    if not args.no_record:
        from benchmarks.common.results import machine, record
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        record("scifact", "## BM25 on SciFact beside tantivy and FTS5 "
               "(`python -m benchmarks.scifact`)\n\n"
               f"Run {now} on {machine()}; 300 claims as free text, {args.rounds} rounds, "
               "interleaved query by query in one process, docnos of every hit made.\n\n"
               + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
