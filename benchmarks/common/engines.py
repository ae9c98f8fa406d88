"""The engines compared, each behind the same three calls: ingest a JSONL corpus, run one
query (first page ready), and report its size. Each runs in a child process of its own
(see run.py), so peak memory is per engine."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time

import msgspec

from annodb.query import parse
from annodb.tokenizer import tokens

from . import translate

ID_FIELDS = ("docid", "docno", "id", "_id")


def records(path: str):
    """(docid, [text fields]) of each JSONL record: every string but the id, in order."""
    dec = msgspec.json.Decoder()
    with open(path, "rb") as f:
        for line in f:
            rec = dec.decode(line)
            key = next(k for k in ID_FIELDS if k in rec)
            yield str(rec[key]), [v for k, v in rec.items() if k != key and isinstance(v, str)]


def dir_size(path: str) -> int:
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


class Annodb:
    name = "annodb"

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, "annodb.db")

    def ingest(self, corpus: str, progress=None) -> None:
        import annodb
        from annodb import ingest
        shutil.rmtree(self.path, ignore_errors=True)
        ingest.ingest(self.path, [corpus], progress=progress)
        self.db = annodb.open(self.path, readonly=True)

    def open(self, cache_bytes: int | None = None) -> None:
        import annodb
        self.db = annodb.open(self.path, readonly=True, cache_bytes=cache_bytes)

    def query(self, text: str):
        """SSR to depth 1000, the first 10 docnos and snippets ready (a fresh snapshot each
        query, as a server does)."""
        from annodb import ranking
        with self.db.read() as r:
            ranked = ranking.rank(r, text, depth=1000, lenient=True)
            return [h.docno for h in ranked.hits(10)]

    def size(self) -> int:
        return dir_size(self.path)


class Fts5:
    name = "SQLite FTS5"

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, "fts5.db")

    def ingest(self, corpus: str) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)
        width = None
        con = sqlite3.connect(self.path)
        batch = []
        for docid, texts in records(corpus):
            if width is None:
                width = max(len(texts), 1)
                cols = ", ".join(f"f{i}" for i in range(width))
                con.execute(f"CREATE VIRTUAL TABLE t USING fts5(docid UNINDEXED, {cols}, "
                            "tokenize = 'unicode61 remove_diacritics 0')")
                insert = f"INSERT INTO t VALUES (?{', ?' * width})"
            row = (texts + [""] * width)[:width - 1] + [" ".join(texts[width - 1:])]
            batch.append([docid] + row)
            if len(batch) >= 10000:
                con.executemany(insert, batch)
                batch = []
        if batch:
            con.executemany(insert, batch)
        con.commit()
        self.con = con

    def open(self) -> None:
        self.con = sqlite3.connect(self.path)

    def query(self, text: str):
        match = translate.fts5(parse(text, lenient=True).node)
        if match is None:
            return None
        rows = self.con.execute("SELECT docid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 10",
                                (match,)).fetchall()
        return [r[0] for r in rows]

    def size(self) -> int:
        return dir_size(self.path)


class Tantivy:
    name = "tantivy"
    stored = False  # whether the body is stored (annodb and FTS5 keep the text)

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, "tantivy-stored" if self.stored else "tantivy")

    def ingest(self, corpus: str) -> None:
        import tantivy as tv
        shutil.rmtree(self.path, ignore_errors=True)
        os.makedirs(self.path)
        builder = tv.SchemaBuilder()
        builder.add_text_field("docid", stored=True, tokenizer_name="raw")
        builder.add_text_field("body", stored=self.stored)
        index = tv.Index(builder.build(), path=self.path)
        writer = index.writer(heap_size=512_000_000, num_threads=2)
        for docid, texts in records(corpus):
            writer.add_document(tv.Document(docid=docid, body="\n".join(texts)))
        writer.commit()
        writer.wait_merging_threads()
        self.index = index
        self.index.reload()

    def open(self) -> None:
        import tantivy as tv
        self.index = tv.Index.open(self.path)

    def query(self, text: str):
        q = translate.tantivy(parse(text, lenient=True).node, self.index, "body")
        if q is None:
            return None
        searcher = self.index.searcher()
        hits = searcher.search(q, 10).hits
        return [searcher.doc(addr)["docid"][0] for _, addr in hits]

    def size(self) -> int:
        return dir_size(self.path)


class TantivyStored(Tantivy):
    """tantivy keeping the body too: the fair size comparison."""
    name = "tantivy (body stored)"
    stored = True


def available(stored: bool = False) -> list[type]:
    """The engines to compare (tantivy when installed; with `stored`, also tantivy keeping
    the text, as annodb and FTS5 do)."""
    engines = [Annodb, Fts5]
    try:
        import tantivy  # noqa: F401
        engines.append(Tantivy)
        if stored:
            engines.append(TantivyStored)
    except ImportError:
        pass
    return engines


def count_tokens(corpus: str) -> int:
    return sum(len(tokens(t)) for _, texts in records(corpus) for t in texts)


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t
