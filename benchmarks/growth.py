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

Step by step (what a 16x point needs on a shared machine: each ingest and each replay a
command of its own, under the CPU lock alone; databases of earlier sizes reused; results
gathered in benchmarks/work/growth-steps.json):

    python -m benchmarks.growth ingest annodb 16 benchmarks/work/growth-16x
    python -m benchmarks.growth replay annodb 1=DIR1 4=DIR4 16=benchmarks/work/growth-16x
    python -m benchmarks.growth report

An ingest step records wall, CPU of the whole process tree, peak RSS and private memory,
size, and for annodb each commit's wall and writer CPU (whether a commit grows dearer as
the collection does); `report` fits each percentile's growth as a power law over the sizes
and extrapolates it to the paper's 113.5M segments (68x).
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
            suffix = f"#r{r}".encode()
            for line in lines:
                w.write(line if r == 0 else _suffixed(line, suffix))
    os.replace(out + ".tmp", out)
    return out


_PLAIN_ID = b'{"docid": "'


def _suffixed(line: bytes, suffix: bytes) -> bytes:
    """The JSONL record with its docid suffixed: spliced into the bytes when the line starts
    with a plain `{"docid": "...` (no escapes in the id; 16x is 25M lines, and decoding and
    encoding each took most of the time), else decoded and encoded again."""
    if line.startswith(_PLAIN_ID):
        end = line.index(b'"', len(_PLAIN_ID))
        if b"\\" not in line[len(_PLAIN_ID):end]:
            return line[:end] + suffix + line[end:]
    record = json.loads(line)
    key = next(k for k in engines.ID_FIELDS if k in record)
    record[key] = f"{record[key]}{suffix.decode()}"
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


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
                raise SystemExit(f"growth: {engine_name} died while ingesting {corpus}"
                                 ) from None
    _, lat = out.get()
    p.join()
    ms = np.asarray(lat) * 1000
    return {"ingest_s": ingest_s, "size": size, "rss": peak_rss, "anon": peak_anon,
            "median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max()), "answered": len(ms)}


def tables(results: dict, sizes: list[int]) -> str:
    """results[engine][times] -> the figures; a latency table and an ingest table."""
    lines = ["| engine | size | median ms | p90 ms | p99 ms | max ms |",
             "|---|---|---:|---:|---:|---:|"]
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


# Step by step (a 16x point takes an hour of a shared machine: each step its own command,
# so each can run under the CPU lock alone and the databases of earlier sizes be reused)

ENGINES = {"annodb": "Annodb", "fts5": "Fts5", "tantivy": "Tantivy"}
STEPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work", "growth-steps.json")


def _ingest_child(engine: str, place: str, corpus: str, trace: str) -> None:
    """(In a child process.) Ingest; for annodb, each commit's wall and writer CPU time
    (the writer process, all its threads) and the input read by then, to `trace`."""
    cls = getattr(engines, ENGINES[engine])
    eng = cls(place)
    if engine != "annodb":
        eng.ingest(corpus)
        return
    rows: list[tuple[float, float, int, int]] = [(time.perf_counter(), time.process_time(), 0, 0)]
    eng.ingest(corpus, progress=lambda done, read, total: rows.append(
        (time.perf_counter(), time.process_time(), done, read)))
    with open(trace, "w") as f:
        json.dump(rows, f)


def ingest_step(engine: str, place: str, corpus: str) -> dict:
    """Ingest `corpus` into `place` in a child process: wall, CPU of its whole process tree
    (user + system of the reaped tree), peaks of RSS and private memory (sampled every
    50 ms), size on disk. The database is kept."""
    import subprocess
    import sys

    from benchmarks.common.paths import REPO
    from benchmarks.common.processes import peaks
    from benchmarks.ingest_memory import _children_cpu
    os.makedirs(place, exist_ok=True)
    trace = os.path.join(place, f"{engine}.trace.json")
    code = ("import sys; from benchmarks.growth import _ingest_child; "
            "_ingest_child(*sys.argv[1:])")
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, engine, place, corpus, trace],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    rss, anon, processes = peaks(proc)
    wall = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"growth: {engine} ingest of {corpus} failed ({proc.returncode})")
    size = getattr(engines, ENGINES[engine])(place).size()
    out = {"engine": engine, "corpus": corpus, "input": os.path.getsize(corpus),
           "wall": wall, "cpu": cpu, "rss": rss, "anon": anon, "processes": processes,
           "size": size, "load": os.getloadavg()}
    if os.path.exists(trace):
        with open(trace) as f:
            out["trace"] = json.load(f)
    return out


def _replay_child(engine: str, place: str, queries: list[str], passes: int, cache_mb, out
                  ) -> None:
    import gc
    import resource
    eng = getattr(engines, ENGINES[engine])(place)
    if cache_mb is None:
        eng.open()
    else:   # annodb's cache of decoded lists (default 256 MB)
        eng.open(cache_bytes=cache_mb << 20)
    for q in queries[:300]:
        eng.query(q)
    gc.freeze()
    runs = []
    for _ in range(passes):
        before = resource.getrusage(resource.RUSAGE_SELF)
        lat: list[float | None] = []
        for q in queries:
            t = time.perf_counter()
            got = eng.query(q)
            dt = time.perf_counter() - t
            lat.append(None if got is None else dt)
        after = resource.getrusage(resource.RUSAGE_SELF)
        runs.append({"lat": lat, "major faults": after.ru_majflt - before.ru_majflt,
                     "minor faults": after.ru_minflt - before.ru_minflt})
    out.put(runs)


def preread(place: str, engine: str) -> float:
    """Read the engine's files in `place` once (into the page cache); seconds taken."""
    started = time.perf_counter()
    path = getattr(engines, ENGINES[engine])(place).path
    files = [path] if os.path.isfile(path) else [
        os.path.join(root, n) for root, _, names in os.walk(path) for n in names]
    for name in files:
        with open(name, "rb") as f:
            while f.read(1 << 24):
                pass
    return time.perf_counter() - started


def replay_step(engine: str, place: str, queries: list[str], passes: int = 1,
                cache_mb: int | None = None) -> list[dict]:
    """The real queries replayed on the database in `place` (made earlier), in a fresh child
    process, after 300 of them as a warm-up, `passes` times over: each query's seconds
    (None: the engine cannot express it) and the page faults of each pass. The first pass
    runs each query for the first time in the process (its pages in the page cache, not
    yet in the process's map); later passes run them again."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_replay_child, args=(engine, place, queries, passes, cache_mb, out))
    p.start()
    runs = out.get()
    p.join()
    return runs


def percentiles(lat: list[float | None]) -> dict:
    ms = np.asarray([x for x in lat if x is not None]) * 1000
    return {"median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max()), "answered": len(ms)}


def fit(points: dict[int, float]) -> tuple[float, float, float]:
    """A power law through (times, ms) in log-log: (exponent, ms at 1x by the line, the
    largest distance of a point from the line as a factor)."""
    x = np.log(np.asarray(list(points), dtype=float))
    y = np.log(np.asarray(list(points.values()), dtype=float))
    b, a = np.polyfit(x, y, 1)
    off = float(np.exp(np.abs(y - (a + b * x)).max()))
    return float(b), float(np.exp(a)), off


def _load() -> dict:
    if os.path.exists(STEPS):
        with open(STEPS) as f:
            return json.load(f)
    return {"ingest": {}, "replay": {}}


def _save(steps: dict) -> None:
    with open(STEPS + ".tmp", "w") as f:
        json.dump(steps, f)
    os.replace(STEPS + ".tmp", STEPS)


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(
        description="Growth step by step: ingest one engine at one size, replay the real "
        "queries on databases already made, or print the tables and the power-law fit.",
        epilog="example: python -m benchmarks.growth ingest annodb 16 benchmarks/work/growth-16x"
        "; python -m benchmarks.growth replay annodb 1=DIR 4=DIR 16=DIR; "
        "python -m benchmarks.growth report")
    sub = ap.add_subparsers(dest="step", required=True)
    a = sub.add_parser("ingest", help="ingest the corpus N times over into DIR")
    a.add_argument("engine", choices=list(ENGINES))
    a.add_argument("times", type=int)
    a.add_argument("place")
    a.add_argument("--corpus", help="the corpus N times over (default: made beside the 1x)")
    r = sub.add_parser("replay", help="replay the real queries on SIZE=DIR, in the order given")
    r.add_argument("engine", choices=list(ENGINES))
    r.add_argument("places", nargs="+", metavar="SIZE=DIR")
    r.add_argument("--label", default="", help="a name for this replay (default: the engine)")
    r.add_argument("--passes", type=int, default=1, help="replay the queries this many times "
                   "in the same process (default 1)")
    r.add_argument("--cache-mb", type=int, help="annodb: its cache of decoded lists, MB "
                   "(default: annodb's own, 256)")
    r.add_argument("--preread", action="store_true",
                   help="read the database's files once first, into the page cache")
    sub.add_parser("report", help="the tables and the fit from the steps recorded so far")
    args = ap.parse_args(argv)
    from benchmarks.common.paths import WORK
    from benchmarks.common.queries import load_queries
    steps = _load()
    if args.step == "ingest":
        corpus = args.corpus or corpus_times(os.path.join(WORK, "corpus.jsonl"), args.times)
        got = ingest_step(args.engine, args.place, corpus)
        steps["ingest"][f"{args.engine} {args.times}x"] = got
        _save(steps)
        print(json.dumps({k: v for k, v in got.items() if k != "trace"}))
    elif args.step == "replay":
        queries = load_queries()
        label = args.label or args.engine
        for item in args.places:
            times, place = item.split("=", 1)
            read_s = preread(place, args.engine) if args.preread else None
            runs = replay_step(args.engine, place, queries, args.passes, args.cache_mb)
            for k, run in enumerate(runs):
                name = label if k == 0 else f"{label}, pass {k + 1}"
                steps["replay"].setdefault(name, {})[times] = {
                    **run, "place": place, "load": os.getloadavg(), "preread s": read_s,
                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                print(name, times, json.dumps(percentiles(run["lat"])),
                      f"major faults {run['major faults']:,}, minor {run['minor faults']:,}",
                      flush=True)
            _save(steps)
    else:
        text = report(steps)
        queries = load_queries()
        for label, by in steps["replay"].items():
            if len(by) >= 2:
                text += f"\n\n{label}: the queries that grew the most\n\n" + grown(
                    steps, label, queries)
        print(text)
    return 0



PAPER_TIMES = 113_520_750 / 1_669_226   # the paper's segments over the 1x corpus's passages


def report(steps: dict) -> str:
    """Markdown: the latency percentiles by size, their growth and the power-law fit with
    its extrapolation to the paper's collection; the ingests; annodb's commits along the
    largest ingest; the queries that grew the most."""
    out = ["| replay | size | median ms | p90 ms | p99 ms | max ms | answered | major / minor "
           "page faults | load |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    fits = []
    for label, by in steps["replay"].items():
        sizes = sorted(by, key=int)
        got = {int(t): percentiles(by[t]["lat"]) for t in sizes}
        for t in sizes:
            g = got[int(t)]
            out.append(f"| {label} | {t}x | " + " | ".join(f"{g[p]:.3f}" for p in PERCENTILES) +
                       f" | {g['answered']:,} | {by[t].get('major faults', '?')} / "
                       f"{by[t].get('minor faults', '?')} | {by[t]['load'][0]:.1f} |")
        ts = sorted(got)
        for lo, hi in zip(ts, ts[1:]):
            out.append(f"| {label} | growth {lo}x -> {hi}x | " + " | ".join(
                f"x{got[hi][p] / got[lo][p]:.2f}" for p in PERCENTILES) + " | | | |")
        if len(ts) >= 3:
            for p in PERCENTILES:
                b, _, off = fit({t: got[t][p] for t in ts})
                last = ts[-1]
                pair = np.log(got[last][p] / got[ts[-2]][p]) / np.log(last / ts[-2])
                fits.append(f"| {label} | {p} | {b:.3f} | x{off:.3f} | {pair:.3f} | "
                            f"{got[last][p] * (PAPER_TIMES / last) ** b:,.1f} | "
                            f"{got[last][p] * (PAPER_TIMES / last) ** pair:,.1f} |")
    if fits:
        out += ["", "| replay | percentile | exponent, fit over all sizes | farthest point "
                "from the line | exponent, last two sizes | ms at 68x by the fit | ms at 68x "
                "by the last two |", "|---|---|---:|---:|---:|---:|---:|"] + fits
    out += ["", "| ingest | input MB | wall s | CPU s of the tree | CPU ns per input byte | "
            "peak RSS of the tree MB | peak private MB | database MB | database / input | "
            "load (1 min) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, g in steps["ingest"].items():
        out.append(f"| {name} | {g['input'] / 1e6:,.0f} | {g['wall']:.1f} | {g['cpu']:.1f} | "
                   f"{g['cpu'] / g['input'] * 1e9:.1f} | {g['rss'] / 1e6:,.0f} | "
                   f"{g['anon'] / 1e6:,.0f} | {g['size'] / 1e6:,.0f} | "
                   f"{g['size'] / g['input']:.3f} | {g['load'][0]:.1f} |")
    for name, g in steps["ingest"].items():
        if g.get("trace"):
            out += ["", commits(name, g["trace"])]
    return "\n".join(out)


def commits(name: str, trace: list, parts: int = 8) -> str:
    """The writer's cost along an ingest, in `parts` equal spans of input: does a commit
    cost more as the collection grows?"""
    rows = np.asarray(trace, dtype=float)   # (wall, writer CPU, documents, bytes read)
    read = rows[:, 3]
    lines = [f"{name}: the writer along the ingest ({len(rows):,} commits)", "",
             "| input span | commits | writer CPU ns per input byte | wall ns per input byte |",
             "|---|---:|---:|---:|"]
    edges = np.linspace(0, read[-1], parts + 1)
    for lo, hi in zip(edges, edges[1:]):
        k = np.flatnonzero((read > lo) & (read <= hi))
        if len(k) < 2:
            continue
        a, b = max(k[0] - 1, 0), k[-1]
        span = read[b] - read[a]
        lines.append(f"| {lo / read[-1]:.3f}-{hi / read[-1]:.3f} | {len(k)} | "
                     f"{(rows[b, 1] - rows[a, 1]) / span * 1e9:.1f} | "
                     f"{(rows[b, 0] - rows[a, 0]) / span * 1e9:.1f} |")
    return "\n".join(lines)


def grown(steps: dict, label: str, queries: list[str], top: int = 15) -> str:
    """The queries whose time grew the most from the second-largest size to the largest,
    among those over 1 ms at the largest."""
    by = steps["replay"][label]
    sizes = sorted(by, key=int)
    lo, hi = sizes[-2], sizes[-1]
    a, b = by[lo]["lat"], by[hi]["lat"]
    rows = [(b[i] / a[i], i) for i in range(len(queries))
            if a[i] is not None and b[i] is not None and b[i] > 0.001]
    rows.sort(reverse=True)
    out = [f"| query | ms at {' / '.join(t + 'x' for t in sizes)} | growth {lo}x -> {hi}x |",
           "|---|---|---:|"]
    for ratio, i in rows[:top]:
        ms = " / ".join(f"{by[t]['lat'][i] * 1000:.2f}" for t in sizes)
        out.append(f"| `{queries[i][:90]}` | {ms} | x{ratio:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
