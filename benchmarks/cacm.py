"""BM25 and BM25 then RM3 on CACM beside Anserini's published figures, query by query.

    python -m benchmarks.cacm               # the table, into RESULTS.md
    python -m benchmarks.cacm --no-record

CACM (`../shared/data/cacm`: 3,204 abstracts, 64 queries, 52 of them judged) is the
classic collection for which Anserini publishes BM25 and BM25+RM3 figures (its
`cacm.yaml`: MAP 0.3123 / 0.3648, P@30 0.1942 / 0.2224, computed with the published
qrels, in which 55 relevant docids are unpadded and can never be found; SOURCE.md). The
queries are Anserini's (all the text of a topic, author lines included), as free text;
annodb ranks the top 1000 by `search_text(rank="bm25")` (k1 0.9, b 0.4) and by
`rank="bm25+rm3"` with its own feedback settings and with Anserini's (10 documents, 10
terms, original weight 0.5, no stop words dropped). MAP and P@30 are trec_eval's (no
`-c`), by ir-measures, against both the published qrels (to compare with the published
figures) and the padded ones (a correct evaluation); each row also gives the mean
per-query difference of average precision from Anserini's own run of the same model
(`runs/`), and how many of Anserini's top 30 annodb's top 30 hold.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import os
import shutil
import sys
import time

import msgspec

from benchmarks.common.paths import WORK as _WORK
from benchmarks.common.paths import shared

DATA = shared("data", "cacm")
WORK = os.path.join(_WORK, "cacm")
PUBLISHED = {"bm25": (0.3123, 0.1942), "bm25+rm3": (0.3648, 0.2224)}   # MAP, P@30
RUNS = {"bm25": "anserini-0.21.0.cacm.bm25.run.gz",
        "bm25+rm3": "anserini-0.21.0.cacm.bm25+rm3.run.gz"}
DEPTH = 1000


def database():
    """CACM in an annodb database under benchmarks/work/cacm (built once)."""
    import annodb
    path = os.path.join(WORK, "annodb.db")
    if not os.path.exists(os.path.join(path, "built")):
        shutil.rmtree(path, ignore_errors=True)
        dec = msgspec.json.Decoder()
        db = annodb.open(path)
        with open(os.path.join(DATA, "corpus.jsonl"), "rb") as f, db.write() as w:
            for line in f:
                if line.strip():
                    d = dec.decode(line)
                    w.add({"docid": d["docid"], "text": d["text"]})
        db.close()
        open(os.path.join(path, "built"), "w").close()
    return annodb.open(path, readonly=True)


def topics() -> list[tuple[str, str]]:
    with open(os.path.join(DATA, "topics.tsv"), encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip()]


def anserini_run(name: str) -> dict[str, list[str]]:
    """Anserini's run of a model: qid -> docids by rank."""
    run: dict[str, list[tuple[int, str]]] = {}
    with gzip.open(os.path.join(DATA, "runs", RUNS[name]), "rt") as f:
        for line in f:
            qid, _, docid, rank, *_ = line.split()
            run.setdefault(qid, []).append((int(rank), docid))
    return {q: [d for _, d in sorted(v)] for q, v in run.items()}


def measure(run: dict[str, list[str]], qrels_file: str) -> tuple[float, float, dict]:
    """(MAP, P@30, AP per query) of a run (qid -> docids by rank) as trec_eval computes
    them without -c (the judged queries the run answers)."""
    import ir_measures
    from ir_measures import AP, P
    qrels = list(ir_measures.read_trec_qrels(os.path.join(DATA, qrels_file)))
    scored = [ir_measures.ScoredDoc(q, d, float(DEPTH - i))
              for q, docs in run.items() for i, d in enumerate(docs)]
    agg = ir_measures.calc_aggregate([AP, P @ 30], qrels, scored)
    per = {m.query_id: m.value for m in ir_measures.iter_calc([AP], qrels, scored)}
    return agg[AP], agg[P @ 30], per


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if not os.path.isdir(DATA):
        print(f"needs {DATA} (CACM, ../shared/data): nothing measured", file=sys.stderr)
        return 0
    from annodb import feedback
    os.makedirs(WORK, exist_ok=True)
    db = database()
    queries = topics()
    rankers = [
        ("bm25", "annodb bm25 (k1 0.9, b 0.4)", {"rank": "bm25"}),
        ("bm25+rm3", "annodb bm25+rm3, annodb's feedback (stop words, 10 docs, 20 terms, 0.9)",
         {"rank": "bm25+rm3"}),
        ("bm25+rm3", "annodb bm25+rm3, Anserini's feedback (10 docs, 10 terms, 0.5)",
         {"rank": "bm25+rm3", "feedback": feedback.ANSERINI}),
    ]
    rows = ["| model | MAP (published qrels) | P@30 | MAP (padded qrels) | P@30 | "
            "AP - Anserini's run, mean (queries better / worse) | top 30 shared with "
            "Anserini's | ms / query |", "|---|---|---|---|---|---|---|---|"]
    for model in RUNS:
        theirs = anserini_run(model)
        m, p = PUBLISHED[model]
        mp, pp, _ = measure(theirs, "qrels.padded.txt")
        rows.append(f"| Anserini {model} (published; its run with padded qrels) | {m:.4f} | "
                    f"{p:.4f} | {mp:.4f} | {pp:.4f} | | | |")
    for model, label, options in rankers:
        run: dict[str, list[str]] = {}
        with db.read() as r:
            r.search_text(queries[0][1], k=DEPTH, snippets=False, **options)   # (warm)
        t = time.perf_counter()
        for qid, text in queries:
            with db.read() as r:
                run[qid] = [h.docno for h in r.search_text(text, k=DEPTH, snippets=False,
                                                           **options)]
        ms = (time.perf_counter() - t) / len(queries) * 1000
        m, p, per = measure(run, "qrels.txt")
        mp, pp, _ = measure(run, "qrels.padded.txt")
        theirs = anserini_run(model)
        _, _, their_ap = measure(theirs, "qrels.txt")
        diffs = [per[q] - their_ap.get(q, 0.0) for q in per]
        better = sum(d > 1e-9 for d in diffs)
        worse = sum(d < -1e-9 for d in diffs)
        shared_top = [len(set(run.get(q, [])[:30]) & set(theirs.get(q, [])[:30]))
                      / max(min(30, len(theirs.get(q, []))), 1) for q in theirs]
        rows.append(f"| {label} | {m:.4f} | {p:.4f} | {mp:.4f} | {pp:.4f} | "
                    f"{sum(diffs) / max(len(diffs), 1):+.4f} ({better} / {worse}) | "
                    f"{sum(shared_top) / len(shared_top):.1%} | {ms:.2f} |")
    db.close()
    out = "\n".join(rows) + "\n"
    print(out, flush=True)
    if not args.no_record:
        from benchmarks.common.results import machine, record
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        record("cacm", "## BM25 and RM3 on CACM beside Anserini (`python -m benchmarks.cacm`)"
               f"\n\nRun {now} on {machine()}; the 64 topics as free text (52 judged), top "
               f"{DEPTH}, trec_eval's MAP and P@30 (no -c) by ir-measures.\n\n" + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
