"""Free text on the 86 TREC RAG questions: annodb's BM25 and its free-text default (BM25
then RM3) beside tantivy's BM25, in one process, interleaved question by question.

    python -m benchmarks.free_text                          # the MS MARCO sample
    python -m benchmarks.free_text --corpus benchmarks/work/corpus.jsonl --rounds 3
    python -m benchmarks.free_text --corpus benchmarks/work/corpus.jsonl \
        --work benchmarks/work/growth-1x --name 1x     # indexes built already: read only

The corpus: `../shared/data/rag24/msmarco-sample.jsonl` (4,036 passages) by default, or
any JSONL of the same shape (the scale corpus, benchmarks/common/corpus.py: 1.67M
passages). Each engine's index is built once under work/free-text/<corpus name>/, or
read from `--work DIR` (DIR/annodb.db and DIR/tantivy, as benchmarks.growth leaves them;
never rebuilt there: a missing one is an error).
annodb: `search_text(q, k=10, rank="bm25", snippets=False)` and `rank="bm25+rm3"` (the
free-text default) in a fresh read snapshot per query, as a server does, docnos made;
tantivy: a boolean query of SHOULD term queries over the question's words (annodb's
tokenizer), top 10, each hit's docid read from its store (tantivy has no RM3: the default
is set beside its BM25). After a warm-up round, every question runs on every engine in
turn, in rounds; the table gives each one's median, p90 and p99 per query and annodb's
ratios to tantivy.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

from benchmarks.common.engines import Annodb as Built, Tantivy as TantivyBuilt
from benchmarks.common.paths import SHARED, WORK
from benchmarks.common.results import latency_cells, ratio_cells
from benchmarks.scifact import timed, words

SAMPLE = os.path.join(SHARED, "data", "rag24", "msmarco-sample.jsonl")
TOPICS = os.path.join(SHARED, "data", "rag24", "man86.topics")


def questions() -> list[tuple[str, str]]:
    with open(TOPICS, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip()]


def built(engine, corpus: str):
    """The engine's index of the corpus, built when missing."""
    done = os.path.join(engine.path + ".built")
    if not os.path.exists(done):
        engine.ingest(corpus)
        open(done, "w").close()
    else:
        engine.open()
    return engine


class Annodb:
    def __init__(self, db, rank: str):
        self.db, self.rank = db, rank
        self.name = "annodb" if rank == "bm25" else f"annodb {rank}"

    def query(self, text: str, k: int) -> list[str]:
        with self.db.read() as r:
            return [h.docno for h in r.search_text(text, k=k, rank=self.rank,
                                                   snippets=False)]


class Tantivy:
    name = "tantivy"

    def __init__(self, index):
        import tantivy as tv
        self.tv, self.index = tv, index
        self.index.reload()
        self.searcher = index.searcher()

    def query(self, text: str, k: int) -> list[str]:
        tv = self.tv
        parts = [(tv.Occur.Should, tv.Query.term_query(self.index.schema, "body", w))
                 for w in words(text)]
        hits = self.searcher.search(tv.Query.boolean_query(parts), k).hits
        return [self.searcher.doc(a)["docid"][0] for _, a in hits]


def table(got: dict[str, np.ndarray]) -> str:
    out = "| engine | median ms | p90 ms | p99 ms |\n|---|---|---|---|\n"
    for name, t in got.items():
        out += f"| {name} | {latency_cells(t)} |\n"
    for name, t in got.items():
        if name != "tantivy":
            out += f"| {name} / tantivy | {ratio_cells(t, got['tantivy'])} |\n"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.free_text --rounds 3")
    ap.add_argument("--corpus", default=SAMPLE, help="a JSONL corpus (default: the MS "
                    "MARCO sample)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds over the questions")
    ap.add_argument("--work", help="a folder holding the indexes built already "
                    "(annodb.db, tantivy: benchmarks.growth's growth-1x): opened read only")
    ap.add_argument("--name", help="the corpus's name in the table and the RESULTS.md "
                    "section (default: the corpus file's)")
    ap.add_argument("--no-record", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if args.work is not None:
        for need in ("annodb.db", "tantivy"):
            if not os.path.exists(os.path.join(args.work, need)):
                print(f"error: --work {args.work} has no {need}", file=sys.stderr)
                return 2
    for need in (args.corpus, TOPICS):
        if not os.path.exists(need):
            print(f"needs {need}: nothing measured", file=sys.stderr)
            return 0
    try:
        import tantivy  # noqa: F401
    except ImportError:
        print("tantivy is not installed (pip install tantivy): nothing measured",
              file=sys.stderr)
        return 0
    name = args.name or os.path.splitext(os.path.basename(args.corpus))[0]
    if args.work is not None:  # (built elsewhere: opened, never rebuilt)
        annodb_index, tantivy_index = Built(args.work), TantivyBuilt(args.work)
        annodb_index.open()
        tantivy_index.open()
        db, index = annodb_index.db, tantivy_index.index
    else:
        work = os.path.join(WORK, "free-text", name)
        os.makedirs(work, exist_ok=True)
        db = built(Built(work), args.corpus).db
        index = built(TantivyBuilt(work), args.corpus).index
    engines = [Annodb(db, "bm25"), Annodb(db, "bm25+rm3"), Tantivy(index)]
    qs = questions()
    got = timed(engines, qs, 10, args.rounds)
    with db.read() as r:
        docs = r.document_count()
    out = (f"{name}: {docs:,} passages; the 86 questions, top 10 with docids, "
           f"{args.rounds} rounds.\n\n" + table(got))
    print(out, flush=True)
    if not args.no_record:
        from benchmarks.common.results import machine, record
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        record(f"free-text-{name}", f"## Free text on the 86 RAG questions, {name} "
               f"(`python -m benchmarks.free_text --corpus {args.corpus}"
               + (f" --work {args.work} --name {name}" if args.work else "") + "`)\n\n"
               f"Run {now} on {machine()}; interleaved question by question in one "
               "process, a fresh read snapshot per annodb query.\n\n" + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
