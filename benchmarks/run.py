"""Side-by-side benchmark: annodb, SQLite FTS5 and tantivy on the same corpus and queries.

    python -m benchmarks.run --small     # MS MARCO sample + Nave verses, about a minute
    python -m benchmarks.run             # the scale corpus (see benchmarks/README.md)
    python -m benchmarks.run --growth    # the scale corpus at 1x and 4x (benchmarks/growth.py)

For each corpus and engine (each engine in a child process of its own, so peak memory is
its own): ingest wall time, tokens/s, size on disk, peak RSS; then the 4,435 real LLM
queries replayed one after another, warm, timing the first result page (annodb: SSR to
depth 1000 with the first 10 docnos and snippets; peers: the same Boolean query ranked by
bm25, top 10). On the Nave verses also effectiveness: free-text search against FTS5 bm25
on Nave's topics (nDCG@10, R@100, with ir-measures). Results go to benchmarks/RESULTS.md
with the machine and the date, as ratios annodb / peer.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import multiprocessing
import os
import resource
import sys
import time

import numpy as np

from benchmarks.common.paths import SHARED, WORK
from benchmarks.common.queries import load_queries
from benchmarks.common.results import machine, record


def _engine_child(engine_name: str, workdir: str, corpus: str, queries: list[str], out):
    from benchmarks.common import engines
    cls = next(e for e in engines.available() if e.__name__ == engine_name)
    eng = cls(workdir)
    _, ingest_s = engines.timed(eng.ingest, corpus)
    size = eng.size()
    warm = queries[:300]
    for q in warm:
        eng.query(q)
    gc.freeze()  # as annodb serve does after warming up: no full collections over numba's
    #              long-lived objects in the middle of the replay (the same for every engine)
    lat, answered, with_hits = [], 0, 0
    for q in queries:
        t = time.perf_counter()
        got = eng.query(q)
        dt = time.perf_counter() - t
        if got is None:
            continue
        answered += 1
        with_hits += bool(got)
        lat.append(dt)
    out.put({"engine": cls.name, "ingest_s": ingest_s, "size": size, "latencies": lat,
             "answered": answered, "with_hits": with_hits,
             # peak RSS: this process's plus its children's (annodb's ingest reads in a
             # child process): an upper bound, as the two peaks need not coincide
             "rss": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss +
                     resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024,
             "anon": _status_kb("RssAnon") * 1024})


def _status_kb(field: str) -> int:
    """A field of /proc/self/status in kB (0 where there is none). RssAnon is the private
    memory; peak RSS also counts pages of memory-mapped files (LMDB's data file), which the
    kernel can drop at any time."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_engine(engine_name: str, workdir: str, corpus: str, queries: list[str]) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_engine_child, args=(engine_name, workdir, corpus, queries, out))
    p.start()
    result = out.get()
    p.join()
    return result


def summarize(r: dict, tokens: int) -> dict:
    lat = np.asarray(r["latencies"]) * 1000
    return {
        "engine": r["engine"], "ingest_s": r["ingest_s"], "tokens_s": tokens / r["ingest_s"],
        "size_mb": r["size"] / 1e6, "rss_mb": r["rss"] / 1e6, "anon_mb": r["anon"] / 1e6,
        "median": float(np.median(lat)), "p90": float(np.percentile(lat, 90)),
        "p99": float(np.percentile(lat, 99)), "max": float(lat.max()),
        "qps": len(lat) / (lat.sum() / 1000), "answered": r["answered"],
        "with_hits": r["with_hits"],
    }


def table(rows: list[dict]) -> str:
    head = ("| engine | ingest s | tokens/s | size MB | peak RSS MB | anon MB at end | median ms | "
            "p90 ms | p99 ms | max ms | queries/s | with hits |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = ""
    for r in rows:
        body += (f"| {r['engine']} | {r['ingest_s']:.2f} | {r['tokens_s']:,.0f} | "
                 f"{r['size_mb']:.1f} | {r['rss_mb']:.0f} | {r['anon_mb']:.0f} | "
                 f"{r['median']:.3f} | "
                 f"{r['p90']:.3f} | {r['p99']:.3f} | {r['max']:.2f} | {r['qps']:,.0f} | "
                 f"{r['with_hits']}/{r['answered']} |\n")
    ours = rows[0]
    for r in rows[1:]:
        body += (f"| annodb / {r['engine']} | {ours['ingest_s'] / r['ingest_s']:.2f}x | | "
                 f"{ours['size_mb'] / r['size_mb']:.2f}x | {ours['rss_mb'] / r['rss_mb']:.2f}x | "
                 f"{ours['anon_mb'] / max(r['anon_mb'], 1e-9):.2f}x | "
                 f"{ours['median'] / r['median']:.2f}x | {ours['p90'] / r['p90']:.2f}x | "
                 f"{ours['p99'] / r['p99']:.2f}x | {ours['max'] / r['max']:.2f}x | "
                 f"{ours['qps'] / r['qps']:.2f}x | |\n")
    return head + body


def compare(corpus: str, label: str, queries: list[str]) -> str:
    from benchmarks.common import engines
    workdir = os.path.join(WORK, label)
    os.makedirs(workdir, exist_ok=True)
    tokens = engines.count_tokens(corpus)
    rows = []
    for cls in engines.available():
        print(f"  {label}: {cls.name} ...", file=sys.stderr, flush=True)
        rows.append(summarize(run_engine(cls.__name__, workdir, corpus, queries), tokens))
    text = (f"**{label}** ({os.path.basename(corpus)}, {tokens:,} tokens; "
            f"{len(queries):,} real LLM queries, warm, one after another)\n\n" + table(rows))
    text += compacted(workdir, rows)
    print(text)
    return text


def compacted(workdir: str, rows: list[dict]) -> str:
    """annodb's size after `annodb compact` (a copy without the pages earlier commits
    freed), beside the peers' sizes as ingested."""
    import shutil

    import annodb
    from benchmarks.common.engines import dir_size
    path, dest = os.path.join(workdir, "annodb.db"), os.path.join(workdir, "compacted.db")
    if not os.path.isdir(path):
        return ""
    shutil.rmtree(dest, ignore_errors=True)
    t = time.perf_counter()
    with annodb.open(path, readonly=True) as db:
        db.compact(dest)
    seconds = time.perf_counter() - t
    size = dir_size(dest) / 1e6
    shutil.rmtree(dest, ignore_errors=True)
    ratios = ", ".join(f"{size / r['size_mb']:.2f}x {r['engine']}" for r in rows[1:])
    return (f"\nannodb after `annodb compact` ({seconds:.1f} s): {size:.1f} MB ({ratios}); as "
            f"ingested, {rows[0]['size_mb'] - size:.0f} MB of the file are pages freed by "
            "earlier commits, which LMDB reuses but never returns.\n")


def effectiveness(docs: str, topics: str, qrels: str) -> str:
    """Free-text search on Nave's topics: annodb search_text vs FTS5 bm25 (porter, OR)."""
    import sqlite3

    import ir_measures
    from ir_measures import R, nDCG

    import annodb
    from annodb.tokenizer import tokens
    from benchmarks.common.engines import records

    workdir = os.path.join(WORK, "naves-eff")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "fts5-porter.db")
    if os.path.exists(path):
        os.remove(path)
    con = sqlite3.connect(path)
    con.execute("CREATE VIRTUAL TABLE t USING fts5(docid UNINDEXED, body, "
                "tokenize = 'porter unicode61')")
    con.executemany("INSERT INTO t VALUES (?, ?)",
                    ((d, " ".join(t)) for d, t in records(docs)))
    con.commit()
    db = annodb.open(os.path.join(WORK, "naves", "annodb.db"), readonly=True)
    with open(topics, encoding="utf-8") as f:
        todo = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    runs = {"annodb search_text": [], "SQLite FTS5 bm25 (porter)": []}
    t_ours = t_fts = 0.0
    for qid, text in todo:
        t = time.perf_counter()
        with db.read() as r:
            hits = r.search_text(text, k=100)
        t_ours += time.perf_counter() - t
        runs["annodb search_text"] += [ir_measures.ScoredDoc(qid, h.docno, 100 - h.rank)
                                       for h in hits]
        words = list(dict.fromkeys(tokens(text)))
        if not words:
            continue
        t = time.perf_counter()
        rows = con.execute("SELECT docid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 100",
                           (" OR ".join(f'"{w}"' for w in words),)).fetchall()
        t_fts += time.perf_counter() - t
        runs["SQLite FTS5 bm25 (porter)"] += [ir_measures.ScoredDoc(qid, d, 100 - i)
                                              for i, (d,) in enumerate(rows)]
    judged = list(ir_measures.read_trec_qrels(qrels))
    out = (f"**Effectiveness**: Nave's topics ({len(todo):,}, binary judgments) over the "
           "Nave verses, top 100\n\n| system | nDCG@10 | R@100 | ms/topic |\n|---|---|---|---|\n")
    for name, run in runs.items():
        m = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], judged, run)
        ms = (t_ours if name.startswith("annodb") else t_fts) / len(todo) * 1000
        out += f"| {name} | {m[nDCG @ 10]:.3f} | {m[R @ 100]:.3f} | {ms:.2f} |\n"
    print(out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="MS MARCO sample + Nave verses")
    ap.add_argument("--corpus", help="the scale corpus JSONL (default: built under "
                    "benchmarks/work/ with ../shared/tools/build_bench_corpus.py)")
    ap.add_argument("--growth", action="store_true",
                    help="the scale corpus at 1x and 4x: growth factors, ingest memory, server")
    ap.add_argument("--sixteen", action="store_true", help="with --growth: 16x too")
    args = ap.parse_args(argv)
    if not os.path.isdir(SHARED):
        print(f"benchmarks need ../shared (not found at {SHARED}); set ANNODB_SHARED",
              file=sys.stderr)
        return 0
    queries = load_queries()
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    head = f"Run {now} on {machine()}.\n\n"
    if args.small:
        parts = [compare(os.path.join(SHARED, "data", "rag24", "msmarco-sample.jsonl"),
                         "msmarco-sample", queries),
                 compare(os.path.join(SHARED, "data", "naves", "docs.jsonl"), "naves", queries),
                 effectiveness(os.path.join(SHARED, "data", "naves", "docs.jsonl"),
                               os.path.join(SHARED, "data", "naves", "topics.tsv"),
                               os.path.join(SHARED, "data", "naves", "topics.qrels"))]
        record("small", "## Small (`python -m benchmarks.run --small`)\n\n" + head +
               "\n\n".join(parts))
        return 0
    corpus = args.corpus or os.path.join(WORK, "corpus.jsonl")
    if not os.path.exists(corpus):
        from benchmarks.common import corpus as build
        build.build(corpus, SHARED)
    if args.growth:
        from benchmarks import growth
        record("growth", "## Growth (`python -m benchmarks.run --growth`)\n\n" + head +
               growth.run(corpus, WORK, queries, sixteen=args.sixteen))
        return 0
    record("scale", "## Scale (`python -m benchmarks.run`)\n\n" + head +
           compare(corpus, "scale", queries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
