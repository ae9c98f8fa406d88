"""Agent-memory recall on LoCoMo (Maharana et al., ACL 2024; ../shared/data/locomo, see its
SOURCE.md): evidence recall at k = 5, 10, 25, 50 on all 1,986 questions, and recall
latency with a filter, for annodb's Memory and SQLite FTS5 side by side.

    python -m benchmarks.memory               # the table and latencies, into RESULTS.md
    python -m benchmarks.memory --no-record   # print only
    python -m benchmarks.memory --quick       # the default and the peers only
    python -m benchmarks.memory --growth      # recall latency over 1x, 4x, 16x LoCoMo
    python -m benchmarks.memory --growth-filler   # the memory grown with other text

The memory: every turn remembered in conversation order with `conv`, `session`, `speaker`
and `time` (its session's date_time, as UTC) as metadata; its text is corpus.jsonl's
`text` (the paper's indexed string). The 5,882 turns are remembered in one transaction:
by `Memory.remember_many` where it exists, else through the lower-level API exactly as
`Memory.remember` adds each (the record, then a label per string value). Each question
runs `recall(question, k=50, where={"conv": ...})`; the metric is eval_recall.py's (the
paper's, on the raw evidence ids; a question without evidence scores 1), ported here and
checked against that script on the default's run.

Rows: annodb's default (annodb/recall.py), the variants of it that were tried (its
settings, recall.Context), the engine's other free-text rankers through Memory.recall,
the Anserini BM25 run shipped in runs/, and FTS5's bm25 (porter tokenizer; the question's
words OR-ed, `MATCH` with `WHERE conv = ?`). Columns per half: the conversations the
settings were tuned on (conv-26, -30, -41, -42, -43), the five held out, and all ten.
The variants that are not settings (RM3 on top, expansion, diversity, fusions) were
measured with the prototype in benchmarks/memory_prototype.py (the eighth round's with
annodb's own scores, benchmarks/memory_eighth.py); RESULTS.md lists them.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
SHARED = os.environ.get("ANNODB_SHARED", os.path.join(ROOT, "..", "shared"))
DATA = os.path.join(SHARED, "data", "locomo")
WORK = os.path.join(HERE, "work", "memory")
TUNE = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")
KS = (5, 10, 25, 50)
DEPTH = 50
DRAGON = {5: 56.7, 10: 66.2, 25: 76.7, 50: 82.7}   # the paper's Table 3, Dialog rows
TARGET = {5: 66, 10: 77, 25: 86, 50: 91}           # issue 37's


def when(date_time: str) -> float:
    """LoCoMo's "1:56 pm on 8 May, 2023" as seconds since the epoch, read as UTC (as Memory
    reads a naive datetime)."""
    return datetime.datetime.strptime(date_time, "%I:%M %p on %d %B, %Y").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def turns() -> list[dict]:
    with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def questions() -> list[dict]:
    with open(os.path.join(DATA, "queries.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# the metric (eval_recall.py's) ---------------------------------------------------------

def recall_at(run: dict, qs: list[dict], k: int) -> float:
    """The mean over the questions of the share of their raw evidence ids among the first
    k dialog ids retrieved (1 without evidence), in percent, as eval_recall.py rounds."""
    total = 0.0
    for q in qs:
        evidence = q["evidence_raw"]
        got = [d.split(":", 1)[1] for d in run.get(q["qid"], [])[:k]]
        total += 1.0 if not evidence else sum(e in got for e in evidence) / len(evidence)
    return round(100 * total / len(qs), 1)


def halves(run: dict, qs: list[dict]) -> dict:
    parts = {"tune": [q for q in qs if q["conv"] in TUNE],
             "held out": [q for q in qs if q["conv"] not in TUNE], "all": qs}
    return {name: {k: recall_at(run, part, k) for k in KS} for name, part in parts.items()}


def write_run(run: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for qid, docids in run.items():
            for rank, docid in enumerate(docids, 1):
                f.write(f"{qid} Q0 {docid} {rank} {DEPTH + 1 - rank} annodb\n")


def read_run(path: str) -> dict:
    run = collections.defaultdict(list)
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for line in f:
            qid, _, docid, rank, _, _ = line.split()
            run[qid].append((int(rank), docid))
    return {q: [d for _, d in sorted(v)] for q, v in run.items()}


def check_port(run_path: str, mine: dict) -> str:
    """eval_recall.py's overall figures for a run file against this port's."""
    out = subprocess.run([sys.executable, os.path.join(DATA, "eval_recall.py"),
                          os.path.join(DATA, "queries.jsonl"), run_path],
                         capture_output=True, text=True, check=True).stdout
    theirs = {}
    for line in out.splitlines():
        k, rest = line.split(" ", 1)
        theirs[int(k)] = eval(rest)["overall"]  # noqa: S307 - the script prints a dict
    same = all(theirs[k] == mine[k] for k in KS)
    return (f"eval_recall.py on the default's run: {theirs} — "
            f"{'the same as this port' if same else 'DIFFERS from this port: ' + str(mine)}")


# the memories --------------------------------------------------------------------------

def build_annodb(path: str, rows: list[dict]) -> tuple[float, str]:
    """The LoCoMo memory at `path` in one transaction: Memory.remember_many where this
    annodb has it, else the lower-level API as remember adds each memory (see the module
    docstring); (seconds taken, how)."""
    import annodb
    from annodb import memory as M
    shutil.rmtree(path, ignore_errors=True)
    mem = annodb.Memory(path)
    memories = [{"text": d["text"], "docno": d["docid"], "conv": d["conv"],
                 "session": d["session"], "speaker": d["speaker"],
                 "time": when(d["date_time"])} for d in rows]
    t = time.perf_counter()
    if hasattr(mem, "remember_many"):
        mem.remember_many(memories)
        how = "Memory.remember_many"
    else:
        how = "one write transaction of the lower-level API (no remember_many here)"
        with mem.db.write() as w:
            for m in memories:
                record = {k: v for k, v in m.items() if k not in ("text", "docno")}
                added = w.add({M.TEXT: m["text"], **record}, docno=m["docno"],
                              text_fields=[M.TEXT])
                for key, value in record.items():
                    if isinstance(value, str):
                        w.annotate(M.label(key, value), added.start, added.end)
    took = time.perf_counter() - t
    mem.close()
    return took, how


def build_fts5(path: str, rows: list[dict]) -> tuple[sqlite3.Connection, float]:
    if os.path.exists(path):
        os.remove(path)
    con = sqlite3.connect(path)
    t = time.perf_counter()
    con.execute("CREATE VIRTUAL TABLE turns USING fts5(docid UNINDEXED, conv UNINDEXED, "
                "text, tokenize = 'porter unicode61')")
    with con:
        con.executemany("INSERT INTO turns VALUES (?, ?, ?)",
                        [(d["docid"], d["conv"], d["text"]) for d in rows])
    return con, time.perf_counter() - t


def fts5_match(question: str) -> str | None:
    from annodb.tokenizer import tokens
    words = list(dict.fromkeys(tokens(question)))
    return " OR ".join(f'"{w}"' for w in words) if words else None


def fts5_recall(con, question: str, conv: str, k: int) -> list[str]:
    match = fts5_match(question)
    if match is None:
        return []
    return [r[0] for r in con.execute(
        "SELECT docid FROM turns WHERE turns MATCH ? AND conv = ? ORDER BY bm25(turns) "
        "LIMIT ?", (match, conv, k))]


# runs ----------------------------------------------------------------------------------

def variants() -> list[tuple[str, dict]]:
    """(name, Memory.recall arguments or recall.Context changes) of every row run."""
    return [
        ("no context (BM25 k1 0.9 b 0.4, passages and dates)", {"before": 0.0, "after": 0.0}),
        ("context only (no passage score, no dates)", {"passage": 0.0, "dates": 0.0}),
        ("without the passage score", {"passage": 0.0}),
        ("without dates", {"dates": 0.0}),
        ("dates the memories' texts name not matched (events off: the sixth round's default)",
         {"events": False}),
        ("every word lent (common = 1)", {"common": 1.0}),
        ("common = 0.3", {"common": 0.3}),
        ("common = 0.5", {"common": 0.5}),
        ("symmetric decay 0.5 / 0.5", {"after": 0.5}),
        ("decay 0.7 / 0.5", {"before": 0.7, "after": 0.5}),
        ("window 4", {"window": 4}),
        ("window 12", {"window": 12}),
        ("passage weight 1.0", {"passage": 1.0}),
        ("passage weight 0.25", {"passage": 0.25}),
        ("reach 6", {"reach": 6}),
        ("reach 15", {"reach": 15}),
        ("dates weight 0.75", {"dates": 0.75}),
        ("dates weight 3", {"dates": 3.0}),
        ("k1 0.6", {"k1": 0.6}),
        ("k1 1.2", {"k1": 1.2}),
        ("b 0.7", {"b": 0.7}),
        ("passage_b 0.4", {"passage_b": 0.4}),
        ("passage_b 0.8", {"passage_b": 0.8}),
        ("sessions across the conversation (gap = inf)", {"gap": float("inf")}),
        ("labels not scored (labels = 0: the second round's default)", {"labels": 0.0}),
        ("labels weight 0.15", {"labels": 0.15}),
        ("labels weight 0.4", {"labels": 0.4}),
        ("labels 0.3 and passage weight 1.0 (the third round's grid's best)",
         {"passage": 1.0}),
        ("no length prior (length = 0: the third round's default)", {"length": 0.0}),
        ("length prior 0.2", {"length": 0.2}),
        ("length prior 0.4", {"length": 0.4}),
        ("no asking prior (asks = 0: the seventh round's default)", {"asks": 0.0}),
        ("asking prior 0.2", {"asks": 0.2}),
        ("asking prior 0.6", {"asks": 0.6}),
    ]


def run_annodb(path: str, qs: list[dict], rank=None, settings=None) -> dict:
    import annodb
    from annodb import memory as M, recall
    mem = annodb.Memory(path)
    run = {}
    try:
        for q in qs:
            where = {"conv": q["conv"]}
            if settings is None:
                got = mem.recall(q["question"], k=DEPTH, where=where, gcl=False, rank=rank)
                run[q["qid"]] = [e.docno for e in got]
            else:
                with mem.db.read() as r:
                    got = recall.search(r, q["question"], k=DEPTH,
                                        container=M.where_node(where), settings=settings,
                                        snippets=False)
                    run[q["qid"]] = [h.docno for h in got]
    finally:
        mem.close()
    return run


def latency(path: str, con, qs: list[dict], k: int) -> dict:
    """p50 / p99 ms of a recall with a `where`, annodb's Memory.recall, its ranking alone
    (recall.search with snippets, no Entry made) and FTS5, interleaved question by
    question in one process after a warm-up pass."""
    import annodb
    from annodb import memory as M, recall
    mem = annodb.Memory(path)
    times = {"annodb Memory.recall": [], "annodb recall.search (ranking, snippets)": [],
             "SQLite FTS5 bm25": []}
    for q in qs[:200]:  # warm-up
        mem.recall(q["question"], k=k, where={"conv": q["conv"]})
        fts5_recall(con, q["question"], q["conv"], k)
    for q in qs:
        where = {"conv": q["conv"]}
        t0 = time.perf_counter()
        mem.recall(q["question"], k=k, where=where)
        t1 = time.perf_counter()
        with mem.db.read() as r:
            recall.search(r, q["question"], k=k, container=M.where_node(where))
        t2 = time.perf_counter()
        fts5_recall(con, q["question"], q["conv"], k)
        t3 = time.perf_counter()
        for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
            times[name].append(dt * 1000)
    mem.close()
    out = {}
    for name, v in times.items():
        v.sort()
        out[name] = (v[len(v) // 2], v[min(len(v) - 1, int(len(v) * 0.99))])
    return out


def _memories(rows: list[dict], tag: str = "") -> list[dict]:
    """remember_many's arguments for LoCoMo's turns (a copy's: docnos and conv ids
    tagged)."""
    return [{"text": d["text"], "docno": d["docid"] + tag, "conv": d["conv"] + tag,
             "session": d["session"], "speaker": d["speaker"], "time": when(d["date_time"])}
            for d in rows]


def growth(sizes=(1, 4, 16), n_questions: int = 400, k: int = 10) -> str:
    """Recall latency as the memory grows: LoCoMo's turns remembered `size` times (each
    copy a conversation of its own: new conv ids and docnos, the same text and times),
    the first `n_questions` questions asked with no `where` and with `where={"conv":
    ...}`; the default (recall.search: following the postings where that reads less) and
    the whole filter read and scored (recall.search(scan=True), what every recall did
    before). p50 / p99 ms of
    Memory.recall, after a warm-up pass."""
    import annodb
    from annodb import memory as M, recall
    rows = turns()
    qs = questions()[:n_questions]
    lines = ["| memories | no `where`: Memory.recall p50 / p99 | recall.search (default) | "
             "whole memory scored (scan) | `where` conv: Memory.recall | recall.search "
             "(default) | whole filter scored (scan) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        path = os.path.join(WORK, f"growth-{size}x.db")
        shutil.rmtree(path, ignore_errors=True)
        mem = annodb.Memory(path)
        for copy in range(size):
            mem.remember_many(_memories(rows, "" if copy == 0 else f"-r{copy}"))
        cells = []
        for where in (None, "conv"):
            times = {"recall": [], "follow": [], "scan": []}
            for rep in range(2):
                for q in qs:
                    w = None if where is None else {"conv": q["conv"]}
                    node = M.where_node(w)
                    t0 = time.perf_counter()
                    mem.recall(q["question"], k=k, where=w)
                    t1 = time.perf_counter()
                    with mem.db.read() as r:
                        recall.search(r, q["question"], k=k, container=node)
                    t2 = time.perf_counter()
                    with mem.db.read() as r:
                        recall.search(r, q["question"], k=k, container=node, scan=True)
                    t3 = time.perf_counter()
                    if rep:
                        for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                            times[name].append(dt * 1000)
            for name in times:
                v = sorted(times[name])
                cells.append(f"{v[len(v) // 2]:.2f} / {v[int(len(v) * 0.99)]:.2f}")
        mem.close()
        lines.append(f"| {size * len(rows):,} ({size}x) | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
        shutil.rmtree(path, ignore_errors=True)
    return "\n".join(lines)


SCALE_CORPUS = os.path.join(HERE, "work", "corpus.jsonl")


def filler(n: int, path: str = SCALE_CORPUS) -> list[str]:
    """n passages spread evenly over the scale corpus (benchmarks/work/corpus.jsonl: a
    dictionary, manuals, books and MS MARCO segments, ../shared/tools), every passage at
    the same stride from the first, so each size's filler holds the smaller ones'."""
    with open(path, "rb") as f:
        total = sum(1 for _ in f)
    stride = max(total // max(n, 1), 1)
    out = []
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            if i % stride == 0:
                out.append(json.loads(line)["text"])
                if len(out) == n:
                    break
    return out


def growth_filler(sizes=(1, 4, 16), n_questions: int = 400) -> str:
    """Recall as the memory grows with other text, not with copies of itself: LoCoMo's
    5,882 turns, then (size - 1) x 5,882 passages of the scale corpus as memories of
    their own (conv "filler", an hour apart: each its own session), so the words the
    conversations share stay as rare as they were and the filler brings its own. All
    1,986 questions with no `where` (the ten conversations and the filler compete):
    evidence recall at 10 and 50 (the paper's metric); and for the first `n_questions`,
    p50 / p99 ms of Memory.recall at k = 10, the default (following the postings where
    that reads less) beside recall.search(scan=True) (every memory scored), after a
    warm-up pass. The copies of `--growth` make every word's df grow with the memory, so
    no exact top k can read less than a share of it; text that is new is the other
    extreme."""
    import annodb
    from annodb import memory as M, recall
    rows, qs = turns(), questions()
    more = filler((max(sizes) - 1) * len(rows))
    lines = ["| memories | no `where`: recall @10 / @50 | Memory.recall p50 / p99 ms | "
             "recall.search (default) | every memory scored (scan) | read whole |",
             "|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        path = os.path.join(WORK, f"filler-{size}x.db")
        shutil.rmtree(path, ignore_errors=True)
        mem = annodb.Memory(path)
        mem.remember_many(_memories(rows))
        start = when("1:00 pm on 1 January, 2020")
        extra = more[:(size - 1) * len(rows)]
        for at in range(0, len(extra), 20_000):
            mem.remember_many([{"text": t, "docno": f"filler:{at + i}", "conv": "filler",
                                "time": start + 3600.0 * (at + i)}
                               for i, t in enumerate(extra[at:at + 20_000])])
        run = {q["qid"]: [e.docno for e in mem.recall(q["question"], k=DEPTH)] for q in qs}
        quality = f"{recall_at(run, qs, 10):.1f} / {recall_at(run, qs, 50):.1f}"
        times: dict = {"recall": [], "follow": [], "scan": []}
        whole = 0
        node = M.where_node(None)
        for rep in range(2):
            for q in qs[:n_questions]:
                t0 = time.perf_counter()
                mem.recall(q["question"], k=10)
                t1 = time.perf_counter()
                with mem.db.read() as r:
                    recall.search(r, q["question"], k=10, container=node)
                t2 = time.perf_counter()
                with mem.db.read() as r:
                    recall.search(r, q["question"], k=10, container=node, scan=True)
                t3 = time.perf_counter()
                if rep:
                    for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                        times[name].append(dt * 1000)
                    whole += _reads_whole(mem, q["question"], node)
        cells = []
        for name in times:
            v = sorted(times[name])
            cells.append(f"{v[len(v) // 2]:.2f} / {v[int(len(v) * 0.99)]:.2f}")
        mem.close()
        lines.append(f"| {size * len(rows):,} ({size}x) | {quality} | " + " | ".join(cells)
                     + f" | {whole / n_questions:.0%} |")
        print(lines[-1], flush=True)
        shutil.rmtree(path, ignore_errors=True)
    return "\n".join(lines)


def _reads_whole(mem, question: str, node) -> bool:
    """Whether recall.search read every memory for this question (following the postings
    would have read too much), by asking its _followed directly."""
    from annodb import recall
    said = []
    original = recall._followed

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        said.append(out is None)
        return out
    recall._followed = spy
    try:
        with mem.db.read() as r:
            recall.search(r, question, k=10, container=node)
    finally:
        recall._followed = original
    return bool(said and said[-1])


def row(name: str, figures: dict) -> str:
    cells = [" / ".join(f"{figures[h][k]:.1f}" for k in KS) for h in ("tune", "held out",
                                                                       "all")]
    return f"| {name} | " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.memory --no-record")
    ap.add_argument("--no-record", action="store_true", help="print only")
    ap.add_argument("--quick", action="store_true",
                    help="the default and the peers only (no variants)")
    ap.add_argument("--growth", action="store_true",
                    help="only recall latency over 1x, 4x and 16x LoCoMo")
    ap.add_argument("--growth-filler", action="store_true",
                    help="only recall and its latency over LoCoMo grown 4x and 16x with "
                         "passages of the scale corpus (benchmarks/work/corpus.jsonl)")
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(DATA, "corpus.jsonl")):
        print(f"benchmarks.memory needs LoCoMo in {DATA} (not found); set "
              "ANNODB_SHARED to the folder holding data/locomo", file=sys.stderr)
        return 1
    from annodb import recall
    from benchmarks.common.results import machine, record
    os.makedirs(WORK, exist_ok=True)
    if args.growth_filler:
        if not os.path.isfile(SCALE_CORPUS):
            print(f"--growth-filler needs the scale corpus at {SCALE_CORPUS} (not found; "
                  "build it with ../shared/tools)", file=sys.stderr)
            return 1
        table = growth_filler()
        if not args.no_record:
            now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
            record("memory-filler", "## Agent memory grown with other text (`python -m "
                   f"benchmarks.memory --growth-filler`)\n\nRun {now} on {machine()}, under "
                   "the shared CPU lock. " + growth_filler.__doc__.replace("\n    ", " ")
                   + "\n\n" + table)
        return 0
    if args.growth:
        table = growth()
        if not args.no_record:
            now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
            record("memory-growth", "## Agent memory as it grows (`python -m benchmarks.memory "
                   f"--growth`)\n\nRun {now} on {machine()}, under the shared CPU lock. "
                   + growth.__doc__.split("\n\n")[0].replace("\n    ", " ") + " k = 10; "
                   "p50 / p99 ms over 400 questions (the second of two passes).\n\n" + table)
        return 0
    rows, qs = turns(), questions()
    db_path = os.path.join(WORK, "locomo.db")
    built, how = build_annodb(db_path, rows)
    con, fts_built = build_fts5(os.path.join(WORK, "fts5.db"), rows)
    print(f"built: annodb {built:.2f} s ({how}), FTS5 {fts_built:.2f} s", flush=True)

    lines = ["| recall | tune: @5 / @10 / @25 / @50 | held out | all ten |", "|---|---|---|---|"]

    def show(name, run):
        figures = halves(run, qs)
        lines.append(row(name, figures))
        print(lines[-1], flush=True)
        return figures

    default = run_annodb(db_path, qs)
    default_path = os.path.join(WORK, "annodb-default.run")
    write_run(default, default_path)
    figures = show("**annodb Memory.recall default (context)**", default)
    port = check_port(default_path, figures["all"])
    print(port, flush=True)
    if not args.quick:
        for name, change in variants():
            show(f"context: {name}", run_annodb(db_path, qs,
                                                settings=replace(recall.CONTEXT, **change)))
    for rank in (("bm25+rm3", "bm25") if args.quick else ("bm25+rm3", "bm25", "fused", "ssr")):
        show(f"Memory.recall rank={rank!r}" + (" (the default before)" if rank == "bm25+rm3"
                                               else ""),
             run_annodb(db_path, qs, rank=rank))
    show("Anserini 0.21.0 BM25 (runs/)", read_run(os.path.join(
        DATA, "runs", "anserini-0.21.0.locomo-turns.bm25.top50.run.gz")))
    show("SQLite FTS5 bm25 (porter, words OR-ed, WHERE conv)",
         {q["qid"]: fts5_recall(con, q["question"], q["conv"], DEPTH) for q in qs})
    lines.append("| DRAGON dense retriever (paper, Table 3; all ten) | | | "
                 + " / ".join(f"{DRAGON[k]}" for k in KS) + " |")
    lines.append("| target (issue 37; all ten) | | | "
                 + " / ".join(f"{TARGET[k]}" for k in KS) + " |")

    lat = ["| recall with `where={\"conv\": ...}`, ms | k=10 p50 | p99 | k=50 p50 | p99 |",
           "|---|---:|---:|---:|---:|"]
    at10, at50 = latency(db_path, con, qs, 10), latency(db_path, con, qs, 50)
    for name in at10:
        lat.append(f"| {name} | {at10[name][0]:.2f} | {at10[name][1]:.2f} | "
                   f"{at50[name][0]:.2f} | {at50[name][1]:.2f} |")
    print("\n".join(lat), flush=True)
    n_tune = sum(q["conv"] in TUNE for q in qs)
    if not args.no_record:
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        record("memory", "## Agent memory on LoCoMo (`python -m benchmarks.memory`)\n\n"
               f"Run {now} on {machine()}, under the shared CPU lock. Evidence recall (%) "
               "at k = 5 / 10 / 25 / 50, the paper's metric on the raw evidence; "
               f"{len(qs):,} questions (tune: conv-26, -30, -41, -42, -43, {n_tune} "
               f"questions; held out: the other five, {len(qs) - n_tune}). {port}.\n\n"
               + "\n".join(lines) + "\n\n"
               f"Built in one transaction: annodb {built:.2f} s ({how}), FTS5 "
               f"{fts_built:.2f} s. "
               "Latency over the 1,986 questions (after 200 warm-up), each engine in turn "
               "per question:\n\n" + "\n".join(lat))
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
