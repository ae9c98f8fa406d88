"""How cost grows with the collection: annodb, SQLite FTS5 and tantivy at 1x and 4x (and
16x, with --sixteen) of the scale corpus, side by side in one run.

    python -m benchmarks.run --growth            # 1x and 4x; --sixteen adds 16x

The 1x corpus is benchmarks/work/corpus.jsonl (built as for `python -m benchmarks.run`);
the 4x (16x) corpus is it repeated 4 (16) times, each repetition's docids suffixed `#r1`,
`#r2`, ... (real text, so term statistics grow as they would with more of the same kind
of text; every document has a distinct docno). For each engine and size, in a child
process of its own: ingest (wall time; peak memory of the ingest's whole process tree,
sampled every 50 ms: RSS and private memory), size on disk, and the 4,435 real LLM queries
replayed warm as `benchmarks.run` does. Printed and recorded in RESULTS.md: per engine and
size the latency percentiles, each percentile's growth factor from 1x to 4x, and the
ingest figures; then `annodb serve` on the 1x database with 1, 2, 4 and 16 clients
(benchmarks/server_bench.py's replay).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import numpy as np

from benchmarks.common import engines
from benchmarks.common.processes import memory, tree

PERCENTILES = ("median", "p90", "p99", "max")


def corpus_times(base: str, times: int) -> str:
    """base repeated `times` times with docids suffixed #r1.. (made once, beside base)."""
    if times == 1:
        return base
    out = base.replace(".jsonl", f"{times}x.jsonl")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(base):
        return out
    print(f"  making {out} ...", flush=True)
    with open(base, "rb") as f:
        lines = f.readlines()
    with open(out + ".tmp", "wb") as w:
        for r in range(times):
            for line in lines:
                if r == 0:
                    w.write(line)
                    continue
                record = json.loads(line)
                key = next(k for k in engines.ID_FIELDS if k in record)
                record[key] = f"{record[key]}#r{r}"
                w.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")
    os.replace(out + ".tmp", out)
    return out


def _child(engine_name: str, workdir: str, corpus: str, queries: list[str], out) -> None:
    cls = next(e for e in engines.available(stored=True) if e.__name__ == engine_name)
    eng = cls(workdir)
    _, ingest_s = engines.timed(eng.ingest, corpus)
    out.put(("ingested", ingest_s, eng.size()))
    for q in queries[:300]:
        eng.query(q)
    import gc
    gc.freeze()
    lat = []
    for q in queries:
        t = time.perf_counter()
        got = eng.query(q)
        dt = time.perf_counter() - t
        if got is not None:
            lat.append(dt)
    out.put(("replayed", lat))


def run_engine(engine_name: str, workdir: str, corpus: str, queries: list[str]) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_child, args=(engine_name, workdir, corpus, queries, out))
    p.start()
    peak_rss = peak_anon = 0
    while True:  # the ingest's process tree, until the child says it is done
        pids = tree(p.pid)
        sizes = [memory(pid) for pid in pids]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_anon = max(peak_anon, sum(a for _, a in sizes))
        try:
            _, ingest_s, size = out.get(timeout=0.05)
            break
        except Exception:  # noqa: BLE001 - queue.Empty: still ingesting
            if not p.is_alive():
                raise SystemExit(f"growth: {engine_name} died while ingesting {corpus}")
    _, lat = out.get()
    p.join()
    ms = np.asarray(lat) * 1000
    return {"ingest_s": ingest_s, "size": size, "rss": peak_rss, "anon": peak_anon,
            "median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max()), "answered": len(ms)}


def tables(results: dict, sizes: list[int]) -> str:
    """results[engine][times] -> the figures; a latency table and an ingest table."""
    lines = ["| engine | size | median ms | p90 ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|"]
    for name, by_size in results.items():
        for times in sizes:
            r = by_size[times]
            lines.append(f"| {name} | {times}x | " +
                         " | ".join(f"{r[p]:.3f}" for p in PERCENTILES) + " |")
        for times in sizes[1:]:
            lines.append(f"| {name} | growth 1x -> {times}x | " + " | ".join(
                f"x{by_size[times][p] / by_size[1][p]:.2f}" for p in PERCENTILES) + " |")
    ours = results["annodb"]
    for name in list(results)[1:]:
        for times in sizes:
            lines.append(f"| annodb / {name} | {times}x | " + " | ".join(
                f"{ours[times][p] / results[name][times][p]:.2f}x" for p in PERCENTILES) +
                " |")
    lines += ["", "| engine | size | ingest s | size MB | peak RSS of the ingest's process "
              "tree MB | peak private MB |", "|---|---|---:|---:|---:|---:|"]
    for name, by_size in results.items():
        for times in sizes:
            r = by_size[times]
            lines.append(f"| {name} | {times}x | {r['ingest_s']:.1f} | {r['size'] / 1e6:,.0f} | "
                         f"{r['rss'] / 1e6:,.0f} | {r['anon'] / 1e6:,.0f} |")
    return "\n".join(lines)


def run(base_corpus: str, workdir: str, queries: list[str], sixteen: bool = False) -> str:
    sizes = [1, 4] + ([16] if sixteen else [])
    results: dict = {}
    for times in sizes:
        corpus = corpus_times(base_corpus, times)
        for cls in engines.available(stored=True):
            place = os.path.join(workdir, f"growth-{times}x")
            os.makedirs(place, exist_ok=True)
            print(f"  {times}x: {cls.name} ...", flush=True)
            results.setdefault(cls.name, {})[times] = run_engine(cls.__name__, place, corpus,
                                                                 queries)
    text = (f"The scale corpus at {', '.join(f'{t}x' for t in sizes)} "
            f"({os.path.basename(base_corpus)} repeated, docids suffixed); "
            f"{len(queries):,} real LLM queries, warm, one after another.\n\n" +
            tables(results, sizes))
    from benchmarks import server_bench
    server = server_bench.measure(os.path.join(workdir, "growth-1x", "annodb.db"), queries,
                                  [1, 2, 4, 16])
    text += "\n\n`annodb serve` on the 1x database:\n\n" + server
    print(text)
    return text
