"""A sharded collection ranks exactly as one database holding the same documents.

Hypothesis draws small collections (records with two fields, judgments over documents,
erased ranges inside them) and query trees; the same documents go into one database and
into collections of 2 and 3 shards, in the same order. Rankings (docnos, scores, covers,
addresses, snippets, totals; by SSR, BM25 and both fused), free-text results (SSR tiers,
BM25, BM25F, fused) and document-bounded query results must be identical. Then the 4,435
real queries over a part of the MS MARCO sample (by SSR and BM25, and their words as free
text), the refusal of a transaction over two shards, and the server, Memory and the
Vole's backend over shards.
"""

import json
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import annodb
from annodb.shards import routing
from annodb.errors import AnnodbError, WriterBusyError
from annodb.gcl import Budget
from annodb.query import Combine, Compare, Feature, Term, Window, format

DATA = Path(__file__).parent / "data"
WORDS = ["a", "b", "c", "d"]
SETTINGS = settings(max_examples=int(os.environ.get("SHARD_EXAMPLES", "40")),
                    deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

BOUNDED = st.one_of(st.sampled_from(["title:", "body:", ":", "judgment:t"]).map(Feature),
                    st.integers(1, 4).map(Window))
leaves = st.one_of(
    st.sampled_from(WORDS).map(lambda w: Term((w,))),
    st.lists(st.sampled_from(WORDS), min_size=2, max_size=3).map(lambda ws: Term(tuple(ws))),
    BOUNDED,
)


def _branches(children):
    # (<< A B) and (!< A B) only with B bounded by a document: an interval spanning two
    # documents of different shards is never formed (see annodb.shards)
    return st.one_of(
        st.builds(lambda op, args: Combine(op, tuple(args)),
                  st.sampled_from(["^", "+", "...", ">>", "!>"]),
                  st.lists(children, min_size=2, max_size=3)),
        st.builds(lambda op, a, b: Combine(op, (a, b)), st.sampled_from(["<<", "!<"]),
                  children, BOUNDED),
        st.builds(Compare, st.sampled_from(["=", ">=", "<"]), children,
                  st.sampled_from([0.0, 1.0, 2.0])),
    )


queries = st.recursive(leaves, _branches, max_leaves=5)
text = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
collections = st.tuples(
    st.lists(st.tuples(text, text), min_size=1, max_size=8),          # (title, body)
    st.lists(st.tuples(st.integers(0, 7), st.sampled_from([0.0, 1.0, 2.0, 3.0])),
             max_size=4),                                              # judgments
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), max_size=2),  # erases
)


def fill(db, records, judged, erased, one_transaction):
    """The same writes in the same order; a sharded collection takes one per document."""
    docnos = [f"doc{i}" for i in range(len(records))]

    def writes():
        for docno, (title, body) in zip(docnos, records):
            yield lambda w, d=docno, t=title, b=body: w.add({"id": d, "title": t, "body": b})
        for i, value in judged:
            if i < len(docnos):
                yield lambda w, d=docnos[i], v=value: w.annotate(
                    "judgment:t", w.document(d).start, w.document(d).end, v)
        for i, at in erased:
            if i < len(docnos):
                def erase(w, d=docnos[i], at=at):
                    doc = w.find(d)
                    if doc is not None and doc.start + at <= doc.end:
                        w.erase(doc.start + at, doc.start + at)
                yield erase
    if one_transaction:
        with db.write() as w:
            for write in writes():
                write(w)
    else:
        for write in writes():
            with db.write() as w:
                write(w)


def ranked(r, node, box, k=20, **how):
    got = r.rank(node, depth=k, container=box, lenient=True, **how)
    return [(h.docno, h.score, h.start, h.end, h.cover, h.snippet)
            for h in got.hits()], got.total, got.query


def same(fn, a, b) -> bool:
    """fn(a) == fn(b), or both raise the same error."""
    try:
        want = fn(a)
    except AnnodbError as err:
        with pytest.raises(type(err), match=re.escape(str(err))):
            fn(b)
        return True
    return want == fn(b)


@SETTINGS
@given(collections, st.lists(queries, min_size=1, max_size=4))
def test_shards_rank_exactly_as_one_database(collection, nodes):
    with tempfile.TemporaryDirectory() as tmp:
        one = annodb.open(os.path.join(tmp, "one.db"))
        many = [annodb.open(os.path.join(tmp, f"{n}.shards"), shards=n) for n in (2, 3)]
        try:
            fill(one, *collection, one_transaction=True)
            for db in many:
                fill(db, *collection, one_transaction=False)
            with one.read() as a:
                for db in many:
                    with db.read() as b:
                        assert a.document_count() == b.document_count()
                        assert [(d.docno, d.start, d.end) for d in a.documents()] == \
                            [(d.docno, d.start, d.end) for d in b.documents()]
                        for node in nodes:
                            for box in (":", "title:"):
                                for how in ("ssr", "bm25", "fused"):
                                    assert same(lambda r: ranked(r, node, box, rank=how),
                                                a, b), (format(node), box, how)
                            inside = Combine("<<", (node, Feature(":")))
                            assert list(a.query(inside)) == list(b.query(inside)), format(node)
                        for words in ("a b", "c", "d a b b"):
                            for how in ({"rank": "ssr"}, {"rank": "bm25"}, {"rank": "fused"},
                                        {"rank": "bm25", "fields": ["title", "body"]},
                                        {"rank": "bm25", "container": "title:"}):
                                assert same(lambda r: r.search_text(words, k=5, **how).hits,
                                            a, b), (words, how)
                        assert a.text(0, a.address_space()) == b.text(0, b.address_space())
                        # texts: a ranked container's from its shard, any other range's
                        # from each shard
                        spans = [(d.start, d.end) for d in a.documents()] + \
                            [(0, a.address_space()), (1, 3)]
                        starts, ends = zip(*spans)
                        assert b.texts(starts, ends) == a.texts(starts, ends)
                        # documents_at: ranked containers' shards known, every other
                        # address (gaps, past the end) looked for in each shard
                        at = list(range(-1, a.address_space() + 2))
                        assert [d and (d.docno, d.start, d.end) for d in b.documents_at(at)] \
                            == [d and (d.docno, d.start, d.end) for d in a.documents_at(at)]
        finally:
            one.close()
            for db in many:
                db.close()


def _real_queries():
    rows = (DATA / "vole-queries.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [row.split("\t", 3)[3] for row in rows]


def test_real_queries_rank_exactly_as_one_database(tmp_path):
    """The 4,435 real queries (lenient, as the server runs them) over 600 MS MARCO segments:
    the same hits, scores and order from 1 database and 3 shards (to depth 100), by SSR and
    by BM25; their words as free text, the same top 10 by BM25 (a sixth of them) and by
    SSR's tiers (a sixtieth: up to 96 Boolean queries each; benchmarks/shards_bench.py
    checks more, over the whole sample). A quarter of the queries in the short run, all of
    them with ANNODB_RELIABILITY=long."""
    from annodb.ingest import ingest
    step = 1 if os.environ.get("ANNODB_RELIABILITY", "").strip().lower() == "long" else 4
    source = DATA / "msmarco-sample-600.jsonl"
    ingest(str(tmp_path / "one.db"), [source])
    many = annodb.open(tmp_path / "c.shards", shards=3)
    ingest(many, [source])
    many.threads = True          # the shards' work on threads (the default: one after another)
    with annodb.open(tmp_path / "one.db") as one, one.read() as a, many.read() as b:
        assert a.document_count() == b.document_count() == 600
        compared = matched = 0
        texts = set()
        for q in _real_queries()[::step]:
            texts.add(" ".join(re.findall(r"\w+", q)))
            for how in ("ssr", "bm25"):
                try:
                    ra = a.rank(q, depth=100, lenient=True, rank=how)
                except AnnodbError as err:
                    with pytest.raises(type(err)):
                        b.rank(q, depth=100, lenient=True, rank=how)
                    continue
                rb = b.rank(q, depth=100, lenient=True, rank=how)
                assert [h.as_dict() for h in ra.hits(snippet=False)] == \
                    [h.as_dict() for h in rb.hits(snippet=False)], (q, how)
                assert (ra.total, ra.query, ra.warnings) == (rb.total, rb.query, rb.warnings)
                compared += 1
                matched += bool(len(ra))
        assert compared > 8000 // step and matched > 600 // step
        found = 0
        for i, text in enumerate(sorted(texts)):
            for how in ("bm25",) * (i % 6 == 0) + ("ssr",) * (i % 60 == 0):
                got = a.search_text(text, k=10, rank=how, snippets=False).hits
                assert got == b.search_text(text, k=10, rank=how, snippets=False).hits, \
                    (text, how)
                found += bool(got)
        assert len(texts) > 4000 // step and found > 500 // step
    many.close()


def _answers(db, chunk) -> list:
    """Rankings by SSR and BM25, their first hits, free-text searches: to compare."""
    out = []
    with db.read() as r:
        for q in chunk:
            for how in ("ssr", "bm25"):
                try:
                    got = r.rank(q, depth=100, lenient=True, rank=how)
                except AnnodbError as err:
                    out.append(type(err).__name__)
                    continue
                out.append((got.total, got.query, got.warnings, got.scores.tolist(),
                            got.starts.tolist(), got.cover_starts.tolist(),
                            [h.as_dict() for h in got.hits(10)]))
        for q in chunk[::5]:
            text = " ".join(re.findall(r"\w+", q))
            out.append(r.search_text(text, k=10, snippets=False).hits)
    return out


def test_worker_processes_answer_as_one_database(tmp_path):
    """fan_out="processes": the first shard in this process, the others in worker
    processes asked at once. Every 16th real query over 600 MS MARCO segments ranks as
    one database does (SSR, BM25; their words as free text by the default, bm25+rm3), from
    four threads at once over one collection; documents, counts, text and errors come back
    as in process. A worker killed mid-life, or cut off by a Ctrl-C inside a request, is a
    clear error in the snapshot that used it, not a hang; the next snapshot starts a new
    worker for that shard and ranks the shard here until it is ready, with the same
    answers; close ends the workers."""
    import threading
    from annodb.errors import NotFoundError, QueryCostError, StorageError
    from annodb.ingest import ingest
    source = DATA / "msmarco-sample-600.jsonl"
    ingest(str(tmp_path / "one.db"), [source])
    annodb.open(tmp_path / "c.shards", shards=3).close()
    ingest(str(tmp_path / "c.shards"), [source])
    with pytest.raises(AnnodbError, match="fan_out must be one of"):
        annodb.open(tmp_path / "c.shards", fan_out="fork")
    one = annodb.open(tmp_path / "one.db", readonly=True)
    many = annodb.open(tmp_path / "c.shards", readonly=True, fan_out="processes")
    assert many.workers[0] is None and len(many.workers) == 3
    queries = _real_queries()[::16]

    chunks = [queries[i::4] for i in range(4)]
    want = [_answers(one, c) for c in chunks]
    got: list = [None] * 4

    def run(i):
        got[i] = _answers(many, chunks[i])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want
    assert sum(isinstance(a, tuple) and a[0] > 0 for c in want for a in c) > 30
    with one.read() as a, many.read() as b:
        assert b.document_count() == a.document_count() == 600
        assert b.count("(^ water boil)") == a.count("(^ water boil)")
        doc = a.documents_at([0])[0]
        assert b.document(doc.docno).text == doc.text
        assert b.text(doc.start, doc.end) == a.text(doc.start, doc.end)
        with pytest.raises(NotFoundError):
            b.document("no such docno")
        with pytest.raises(QueryCostError):
            b.rank("water", budget=Budget(postings=1))
        assert b.stats().documents == 600
    want_water = [a for a in _answers(one, ["water"]) if isinstance(a, tuple)]
    # a request that cannot be pickled is an error sent nowhere: the pipe stays in step
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        many.workers[1].send("call", 0, "count", lambda: "water")
    assert many.workers[1].alive() and not many.workers[1].closed
    assert [a for a in _answers(many, ["water"]) if isinstance(a, tuple)] == want_water
    cut = many.workers[2]        # Ctrl-C while a request is half sent: the pipe is cut

    def interrupted(message):
        raise KeyboardInterrupt
    with many.read() as r:
        real, cut.conn.send_bytes = cut.conn.send_bytes, interrupted
        with pytest.raises(KeyboardInterrupt):
            r.rank("water", depth=10)
        cut.conn.send_bytes = real
        with pytest.raises(StorageError, match="was interrupted; the collection's next "
                                               "snapshot starts a new one"):
            r.rank("water", depth=10)
    # the next snapshot starts a new worker for that shard and, not waiting for it, ranks
    # the shard here: the same answers; then the new worker does
    assert [a for a in _answers(many, ["water"]) if isinstance(a, tuple)] == want_water
    assert many.workers[2] is None and many.restarts == 1
    assert many.shards[2]._lists.bytes > 0               # (decoded here meanwhile)
    many.wait_for_workers()
    assert many.workers[2] not in (None, cut) and many.workers[2].alive()
    assert many.shards[2]._lists.bytes == 0              # (and let go)
    assert [a for a in _answers(many, ["water"]) if isinstance(a, tuple)] == want_water
    assert cut.process.poll() is not None                # the old one ended, reaped
    killed = many.workers[1]
    with many.read() as r:       # a worker killed (the OOM killer, a crash) under a snapshot
        os.kill(killed.process.pid, signal.SIGKILL)
        killed.process.wait()
        with pytest.raises(StorageError, match="worker process ended .* next snapshot"):
            r.rank("water", depth=10)
    assert [a for a in _answers(many, ["water"]) if isinstance(a, tuple)] == want_water
    assert many.workers[1] is None and many.restarts == 2
    many.wait_for_workers()
    assert many.workers[1] not in (None, killed)
    os.kill(many.workers[1].process.pid, signal.SIGKILL)  # killed between snapshots
    many.workers[1].process.wait()
    assert [a for a in _answers(many, ["water"]) if isinstance(a, tuple)] == want_water
    assert many.restarts == 3
    starting = list(many._starting.values())
    many.wait_for_workers()
    workers = many.workers[1:] + starting
    many.close()
    for w in workers:
        assert w.process.poll() is not None      # ended (reaped), not left behind
    with pytest.raises(StorageError, match="closed"):
        many.read()
    one.close()


@given(st.lists(st.tuples(st.integers(0, 2**62), st.floats(allow_nan=True)), max_size=40),
       st.integers(0, 10**6))
def test_a_ranking_crosses_to_another_process_as_it_was(rows, total):
    """A worker sends its ranking pickled as one buffer (Ranking.__reduce__): the same
    addresses, the same scores to the bit (NaN and -0.0 too), arrays writable as made."""
    from annodb.ranking import Ranking
    s = np.array([p for p, _ in rows], np.int64)
    sc = np.array([x for _, x in rows], np.float64)
    r = Ranking(None, "(^ a b)", ["a warning"], s, s + 3, sc, s + 1, s + 2, total)
    got = pickle.loads(pickle.dumps(r))
    assert (got.query, got.warnings, got.total, got.snapshot) == (r.query, r.warnings, total,
                                                                  None)
    for name in ("starts", "ends", "cover_starts", "cover_ends", "scores"):
        a, b = getattr(got, name), getattr(r, name)
        assert a.dtype == b.dtype and a.flags.writeable
        assert a.tobytes() == b.tobytes()


def test_a_worker_that_cannot_start_again_leaves_its_shard_to_this_process(tmp_path,
                                                                          monkeypatch):
    """A worker killed, and its replacement unable to start (here: the interpreter it runs
    exits at once): the reads go on, ranking that shard in this process, as one database
    ranks; the other worker stays in use."""
    from annodb.ingest import ingest
    source = DATA / "msmarco-sample-600.jsonl"
    ingest(str(tmp_path / "one.db"), [source])
    annodb.open(tmp_path / "c.shards", shards=3).close()
    ingest(str(tmp_path / "c.shards"), [source])
    queries = _real_queries()[::150]
    with annodb.open(tmp_path / "one.db", readonly=True) as one, \
            annodb.open(tmp_path / "c.shards", readonly=True, fan_out="processes") as many:
        want = _answers(one, queries)
        killed, kept = many.workers[1], many.workers[2]
        fake = tmp_path / "python"
        fake.write_text("#!/bin/sh\nexit 3\n")
        fake.chmod(0o755)
        monkeypatch.setattr("sys.executable", str(fake))
        os.kill(killed.process.pid, signal.SIGKILL)
        killed.process.wait()
        assert _answers(many, queries) == want
        many.wait_for_workers()
        assert many.workers[1] is None and many.workers[2] is kept and many.restarts == 1
        assert _answers(many, queries) == want and many.restarts == 1


def test_a_workers_first_document_comes_with_its_ranking(tmp_path):
    """A worker sends its ranking's first document right after the ranking: the merged
    ranking's first hit (what `annodb serve` answers a query with) is read without
    another request when it comes from a worker's shard, and is the hit one database
    gives. Follow-ups nobody reads (the first hit in another shard, a second ranking in
    the same snapshot, an empty or a refused ranking) are dropped, not left to put the
    answers out of step or to pile up."""
    from annodb.errors import QueryCostError
    from annodb.ingest import ingest
    source = DATA / "msmarco-sample-600.jsonl"
    ingest(str(tmp_path / "one.db"), [source])
    annodb.open(tmp_path / "c.shards", shards=2).close()
    ingest(str(tmp_path / "c.shards"), [source])
    one = annodb.open(tmp_path / "one.db", readonly=True)
    many = annodb.open(tmp_path / "c.shards", readonly=True, fan_out="processes")
    worker = many.workers[1]
    sent = []
    real_send = worker.send

    def counted(name, *args, **kwargs):
        sent.append(args[1] if name == "call" else name)
        return real_send(name, *args, **kwargs)
    worker.send = counted
    remote_first = local_first = 0
    for i, q in enumerate(_real_queries()[::15]):
        with one.read() as a, many.read() as b:
            want = a.rank(q, depth=50, lenient=True)
            if i % 5 == 0:
                b.rank("(^ zzzqqq xxxyyy)", depth=10)          # nothing: no follow-up kept
            if i % 7 == 0:
                with pytest.raises(QueryCostError):
                    b.rank("water", budget=Budget(postings=1))
            got = b.rank(q, depth=50, lenient=True)
            assert got.starts.tolist() == want.starts.tolist()
            if i % 3 == 0:    # a later ranking in the snapshot drops the follow-up
                assert not len(b.rank("(^ zzzqqq xxxyyy)", depth=10))
            if not len(want):
                continue
            before = len(sent)
            assert got.hit(0) == want.hit(0), q
            if many.homes.get(int(got.starts[0])) == 1:
                remote_first += 1
                assert sent[before:] == (["document_at"] if i % 3 == 0 else []), q
            else:
                local_first += 1
                assert sent[before:] == [], q
            assert [h.as_dict() for h in got.hits(5)] == [h.as_dict() for h in want.hits(5)]
    assert remote_first > 10 and local_first > 10
    with many.read() as b:    # every answer and follow-up has come and none is kept
        b.document_count()
    assert worker._answers == {} and worker._unwanted == set()
    many.close()
    one.close()


def test_children_run_their_parents_annodb_from_any_directory(tmp_path, monkeypatch):
    """Every child process (a sharded ingest's readers and writers, a shard's worker, a
    server's worker processes) imports the annodb its parent imported, even when started
    from a directory holding another annodb package (a checkout beside an installed
    copy: `python -c` puts the working directory first on its path)."""
    import socket
    from annodb.ingest import ingest
    from annodb.server import Server
    decoy = tmp_path / "checkout" / "annodb"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the other annodb was imported')\n")
    monkeypatch.chdir(tmp_path / "checkout")
    annodb.open(tmp_path / "c.shards", shards=2).close()
    summary = ingest(str(tmp_path / "c.shards"), [DATA / "msmarco-sample-600.jsonl"])
    assert summary.added == 600
    with annodb.open(tmp_path / "c.shards", readonly=True, fan_out="processes") as db:
        with db.read() as r:
            assert r.search("water", k=3).hits
    with Server(str(tmp_path / "c.shards"), processes=2, readonly=True) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock, \
                sock.makefile("rb") as reader:
            sock.sendall(b'{"op":"query","query":"water"}\n')
            reply = json.loads(reader.readline())["response"]
    assert reply["ok"] and reply.get("docno"), reply


def _cpu_ticks(pid: int) -> int:
    """User + system CPU time of a process, in clock ticks (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_workers_poll_only_for_spin_after_a_request(tmp_path, monkeypatch):
    """A worker polls `spin` seconds for the next request, then sleeps: it burns CPU
    right after a request and none once idle; spin=0 never polls; a bad spin is refused.
    By default a collection polls only when its processes (one per shard) fit the cores,
    and a server whose processes' workers outnumber the cores does not."""
    from annodb.shards import collection as shards, worker as shard_worker
    from annodb.server import Server
    annodb.open(tmp_path / "c.shards", shards=2).close()
    with annodb.open(tmp_path / "c.shards") as db:
        for i in range(12):
            with db.write() as w:     # (a write transaction writes one shard)
                w.add(f"water boils at {i} degrees", docno=f"d{i}")
    for bad in (-0.1, 2, True, "1"):
        with pytest.raises(AnnodbError, match="spin must be 0 to 1 seconds"):
            shards.open(tmp_path / "c.shards", readonly=True, fan_out="processes", spin=bad)
    for cores, processes, polls in ((2, 1, True), (1, 1, False), (4, 2, True),
                                    (2, 2, False)):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        server = Server(str(tmp_path / "c.shards"), processes=processes, fan_out="processes",
                        readonly=True)
        try:
            worker = server._protocol._handle.db.workers[1]
            assert worker.spin == (shard_worker.SPIN if polls else 0), (cores, processes)
        finally:
            server.shutdown()
        if processes == 1:
            with annodb.open(tmp_path / "c.shards", readonly=True, fan_out="processes") as db:
                assert db.workers[1].spin == (shard_worker.SPIN if polls else 0), cores
    monkeypatch.undo()
    hz = os.sysconf("SC_CLK_TCK")
    for spin in (0.4, 0.0):
        db = shards.open(tmp_path / "c.shards", readonly=True, fan_out="processes", spin=spin)
        pid = db.workers[1].process.pid
        with db.read() as r:
            assert r.search("(^ water boils)", k=3).hits
        polling = _running(pid, 0.3)                     # polling, if spin is 0.4 s
        time.sleep(0.3)
        before = _cpu_ticks(pid)
        asleep = _running(pid, 0.5)
        idle = _cpu_ticks(pid) - before
        db.close()
        assert idle <= 0.02 * hz and asleep <= 0.1, (spin, idle, asleep)
        if spin:
            assert polling >= 0.5, polling
        else:
            assert polling <= 0.2, polling


def _running(pid: int, seconds: float) -> float:
    """The share of `seconds` a process is running or ready to run (state R, sampled
    every 5 ms), not sleeping: a poller is R even while a busy machine gives its CPU to
    others (its CPU time then says little)."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.append(_state(pid) == "R")
        time.sleep(0.005)
    return sum(seen) / len(seen)


def test_a_transaction_over_two_shards_is_refused_whole(tmp_path):
    db = annodb.open(tmp_path / "c.shards", shards=2)
    names = [f"d{i}" for i in range(20)]
    a = names[0]
    b = next(n for n in names if routing.route(n, 2) != routing.route(a, 2))
    with pytest.raises(AnnodbError, match="writes one shard"):
        with db.write() as w:
            w.add("first", docno=a)
            w.add("second", docno=b)
    with pytest.raises(AnnodbError, match="route to shard-00"):
        with db.write() as w:
            w.add_many([("first", a), ("second", b)])
    with db.read() as r:
        assert not r.has(a) and not r.has(b) and r.document_count() == 0
    with db.write() as w:
        w.add("first", docno=a)
    with db.write() as w:
        w.add("second", docno=b)
    with pytest.raises(AnnodbError, match="spans documents of shard-000 and shard-001"):
        with db.write() as w:
            w.annotate("label:", w.document(a).start, w.document(b).end)
    with db.read() as r:
        assert r.count("label:") == 0 and r.count(":") == 2
    db.close()


def test_writers_take_turns_and_addresses_are_never_handed_out_twice(tmp_path):
    db = annodb.open(tmp_path / "c.shards", shards=2)
    other = annodb.shards.open(tmp_path / "c.shards")  # a second handle, as another process
    w = db.write()
    with pytest.raises(WriterBusyError):
        other.write(timeout=0.05)
    w.add("one two three", docno="x")
    w.commit()
    with other.write() as w2:
        added = w2.add("four five", docno="y")
    assert added.start == 3
    with db.read() as r:
        assert [(d.docno, d.start) for d in r.documents()] == [("x", 0), ("y", 3)]
    other.close()
    db.close()


def test_notes_and_judgments_live_with_their_document(tmp_path):
    from annodb import judgments
    db = annodb.open(tmp_path / "c.shards", shards=3)
    for i in range(6):
        with db.write() as w:
            w.add(f"owls hunt voles {i}", docno=f"d{i}")
    for i in (4, 1, 2):
        with db.write() as w:
            judgments.judge(w, "t1", f"d{i}", 3 - i % 3, f"about owls {i}")
    with db.write() as w:
        judgments.record(w, judgments.Record("t1", "done", 3, 3))
    with db.read() as r:
        found, record = judgments.judgments(r, "t1")
        assert [(j.docno, j.order) for j in found] == [("d4", 1), ("d1", 2), ("d2", 3)]
        assert record.stop == "done"
        for i in (4, 1, 2):
            home = routing.route(f"d{i}", 3)
            assert r.parts[home].has(f"note:t1:d{i}")
        assert r.search("owls", container="note:").total == 3
        assert r.document_count() == 6
    db.close()


def test_a_note_whose_noted_note_is_replaced_stays_in_its_shard(tmp_path):
    """A note on a note whose target is then replaced (the same note docno: deleted and
    added anew) links to no document any more; it stays in its shard, as in one database,
    and the collection's check does not take it for a document in the wrong shard (the
    server's fuzz over worker processes met it). A note in another shard than its live
    target is still found."""
    from annodb.check import check
    db = annodb.open(tmp_path / "c.shards", shards=3)
    with db.write() as w:
        w.add("water boils", docno="r76")
    with db.write() as w:
        w.note("r76", "a note", note_docno="note:t1:r76")
    with db.write() as w:
        w.note("note:t1:r76", "a note on the note", note_docno="note:t1:note:t1:r76")
    with db.write() as w:
        w.note("r76", "the note again", note_docno="note:t1:r76")
    assert check(db) == []
    home = routing.route("r76", 3)
    with db.read() as r:
        assert r.parts[home].has("note:t1:note:t1:r76") and r.parts[home].has("note:t1:r76")
    from annodb import batch
    other = (home + 1) % 3                      # a note put in another shard by hand
    with db.read() as r:
        target = r.document("r76").start
    b = batch.make([batch.prepare_item("stray", "stray", None, None, ())], container="note:")
    with db.shards[other].write() as w:
        w.add_batch(b, starts=np.array([db.reserve(int(b.spans().sum()))]))
        stray = w.document("stray")
        w.annotate("note:", stray.start, stray.end, float(target))
    assert any("the note 'stray' is not in its document's shard" in p for p in check(db))
    db.close()


def test_server_memory_and_vole_backend_over_shards(tmp_path):
    from annodb.ingest import ingest
    from annodb.protocol import Protocol, Session
    from vole.backend import Local
    for name, n in (("one.db", None), ("c.shards", 2)):
        if n:
            annodb.open(tmp_path / name, shards=n).close()
        ingest(str(tmp_path / name), [DATA / "msmarco-sample-600.jsonl"])
    lines = [{"op": "query", "query": "(^ blood cell)"}, {"op": "next", "qid": "q0"},
             {"op": "next", "qid": "q0"}, {"op": "count", "query": "(^ blood cell)"},
             {"op": "document", "docno": None}]
    replies = {}
    for name in ("one.db", "c.shards"):
        protocol = Protocol(str(tmp_path / name))
        session = Session()
        got = []
        for line in lines:
            if line["op"] == "document":
                line = {"op": "document", "docno": got[0]["docno"]}
            got.append(json.loads(protocol.respond(json.dumps(line), session))["response"])
        got.append(json.loads(protocol.respond(json.dumps(
            {"op": "judge", "topic": "t", "docno": got[0]["docno"], "grade": 2,
             "text": "on topic"}), session))["response"])
        protocol.close()
        replies[name] = got
        local = Local(str(tmp_path / name))
        assert local.query("(^ blood cell)")["docno"] == got[0]["docno"]
        local.close()
        with annodb.open(tmp_path / name) as open_db:  # an open one: used, not reopened
            local = Local(open_db)
            assert local.query("(^ blood cell)")["docno"] == got[0]["docno"]
            local.close()
    assert replies["one.db"] == replies["c.shards"]
    assert replies["one.db"][0]["ok"] and "docno" in replies["one.db"][0]
    # the server over real sockets, 2 processes each asking its own shard worker
    import io
    import socket
    from annodb.server import Server, ServerError
    server = Server(str(tmp_path / "c.shards"), processes=2, fan_out="processes",
                    log=io.StringIO()).start()

    def ask_both():
        for _ in range(2):               # connections spread over both processes
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
                reader = s.makefile("rb")
                got = []
                for line in lines:
                    if line["op"] == "document":
                        line = {"op": "document", "docno": got[0]["docno"]}
                    s.sendall(json.dumps(line).encode() + b"\n")
                    got.append(json.loads(reader.readline())["response"])
                reader.close()
            assert got == replies["one.db"][:len(lines)]

    def shard_workers():
        found = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read()
            except OSError:
                continue
            if b"annodb.shards.worker" in line and str(tmp_path).encode() in line:
                found.append(int(pid))
        return found
    try:
        ask_both()
        workers = shard_workers()        # each server process asked a shard worker
        assert len(workers) >= 2
        for pid in workers:              # killed (the OOM killer, a crash), and asked at
            os.kill(pid, signal.SIGKILL)  # once: a read that meets the dead worker runs
        ask_both()                       # again in a snapshot with a new one
        # (a killed process shows in /proc until it has let go of its memory: a moment,
        # longer on a loaded machine; the replies above came from the new workers)
        deadline = time.monotonic() + 60
        while set(workers) & set(shard_workers()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shard_workers() and not set(workers) & set(shard_workers())
    finally:
        server.shutdown()
    with pytest.raises(ServerError, match="not both"):
        Server(str(tmp_path / "c.shards"), fan_out="processes", ray="local")
    with annodb.Memory(tmp_path / "c.shards") as memory:
        docno = memory.remember("the owl ate a vole", topic="birds")
        assert memory.recall("owl vole", 3)[0].docno == docno
        assert memory.get(docno).metadata["topic"] == "birds"
        assert memory.forget(docno)


def test_a_served_read_that_loses_its_shard_worker_runs_again(tmp_path):
    """The server's reads (query, count, document, stats, next) run once more, in a new
    snapshot, when a shard's worker ends under them: each answers as one database does
    (`next` moves its query's position back first: no hit is skipped)."""
    from annodb.ingest import ingest
    from annodb.protocol import Protocol, Session
    for name, n in (("one.db", None), ("c.shards", 2)):
        if n:
            annodb.open(tmp_path / name, shards=n).close()
        ingest(str(tmp_path / name), [DATA / "msmarco-sample-600.jsonl"])
    one = Protocol(str(tmp_path / "one.db"), readonly=True)
    many = Protocol(str(tmp_path / "c.shards"), readonly=True, fan_out="processes")
    db = many._handle.db
    real_read, doomed = db.read, []

    def read():                              # the worker dies once the snapshot is taken
        if doomed:
            db.wait_for_workers()            # (one started after the last kill is ready)
        snap = real_read()
        if doomed:
            worker = db.workers[doomed.pop()]
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.wait()
        return snap
    db.read = read
    from annodb.shards.routing import route
    docnos = [json.loads(line)["docid"] for line in
              (DATA / "msmarco-sample-600.jsonl").read_text(encoding="utf-8").splitlines()]
    theirs = next(d for d in docnos if route(d, 2) == 1)    # in the worker's shard
    lines = [{"op": "query", "query": "(^ blood cell)"}, {"op": "count", "query": "blood"},
             {"op": "document", "docno": theirs}, {"op": "stats"}]
    want, got = Session(), Session()
    for i, line in enumerate(lines):
        doomed.append(1)
        a = json.loads(one.respond(json.dumps(line), want))["response"]
        b = json.loads(many.respond(json.dumps(line), got))["response"]
        if line["op"] == "stats":
            for stats in (a, b):
                for differs in ("server", "path", "size_bytes", "features"):  # (README)
                    stats.pop(differs)
        assert a == b and a["ok"], (a, b)
        assert db.restarts == i + 1
    while True:      # `next` to a hit in the worker's shard, the worker killed under it
        a = json.loads(one.respond('{"op": "next", "qid": "q0"}', want))["response"]
        assert a["ok"] and not a.get("done"), "no hit in the worker's shard"
        kill = route(a["docno"], 2) == 1
        doomed.extend([1] * kill)
        b = json.loads(many.respond('{"op": "next", "qid": "q0"}', got))["response"]
        assert b == a
        if kill:
            assert db.restarts == 5
            break
    for _ in range(3):                   # and the hits after it are the same too
        assert json.loads(one.respond('{"op": "next", "qid": "q0"}', want))["response"] == \
            json.loads(many.respond('{"op": "next", "qid": "q0"}', got))["response"]
    one.close()
    many.close()


def _state(pid: int) -> str | None:
    """A process's state letter (R, S, Z ...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_open_refuses_what_is_not_a_collection(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(annodb.StorageError, match="not an empty directory"):
        annodb.open(tmp_path / "full", shards=2)
    annodb.open(tmp_path / "c.shards", shards=2).close()
    with pytest.raises(annodb.StorageError, match="has 2 shards, not 4"):
        annodb.open(tmp_path / "c.shards", shards=4)
    from annodb import database          # one database's open: never one inside a collection
    before = sorted(os.listdir(tmp_path / "c.shards"))
    with pytest.raises(annodb.StorageError, match="a sharded collection, not one database"):
        database.open(tmp_path / "c.shards")
    assert sorted(os.listdir(tmp_path / "c.shards")) == before
    (tmp_path / "c.shards" / "manifest.json").write_text('{"format": "x"}')
    with pytest.raises(annodb.StorageError, match="not an annodb sharded collection"):
        annodb.open(tmp_path / "c.shards")


def _split_source(tmp_path) -> Path:
    """600 MS MARCO segments and 7 more documents (judgments, a record), with an erase, a
    delete, and a label spanning documents 12 and 13."""
    from annodb import judgments
    from annodb.ingest import ingest
    source = tmp_path / "one.db"
    ingest(str(source), [DATA / "msmarco-sample-600.jsonl"])
    with annodb.open(source) as db:
        with db.read() as r:
            docnos = [d.docno for d in r.documents()][:40]
        for i, docno in enumerate(docnos[:6]):
            with db.write() as w:
                judgments.judge(w, "t1", docno, i % 4, f"reason {i} blood")
        with db.write() as w:
            doc = w.document(docnos[10])
            w.erase(doc.start + 2, doc.start + 4)
            w.delete(docnos[11])
            w.annotate("label:x", w.document(docnos[12]).start, w.document(docnos[13]).end)
            doc = w.document(docnos[14])   # a word's list annotated by hand: an interval,
            w.annotate("blood", doc.start + 1, doc.start + 4, 2.0)      # and a value
            w.annotate("the", doc.start, doc.end, 0.5)                  # over a document
        with db.write() as w:
            judgments.record(w, judgments.Record("t1", "done", 6, 6))
    return source


@pytest.mark.parametrize("window, processes", [(20_000, None), (12, 2), (7, 3)])
def test_split_turns_a_database_into_shards_that_rank_as_it_did(tmp_path, window,
                                                                 processes):
    """Split in one window and in many (the documents label:x spans, the 12th and 13th
    once the 11th is deleted, in one window or across two), by 1 to 3 processes: the
    collection ranks as the database."""
    from annodb.shards.split import split
    source = _split_source(tmp_path)
    summary = split(source, tmp_path / "c.shards", 3, window=window, processes=processes)
    assert summary.documents == 599 + 7 and summary.not_copied == 1  # (label:x spans two)
    assert summary.already == 0 and not (tmp_path / "c.shards" / "split.json").exists()
    _same_as_split(source, tmp_path / "c.shards")


def _same_as_split(source, dest) -> None:
    from annodb import judgments
    from annodb.check import check
    with annodb.open(source, readonly=True) as one, annodb.open(dest) as many:
        assert check(many) == []
        with one.read() as a, many.read() as b:
            assert [(d.docno, d.start, d.end, d.text) for d in a.documents()] == \
                [(d.docno, d.start, d.end, d.text) for d in b.documents()]
            for q in _real_queries()[::10] + ["blood", "(>> : (>= judgment:t1 1))"]:
                assert ranked(a, q, ":") == ranked(b, q, ":"), q
            assert ranked(a, "blood", "note:") == ranked(b, "blood", "note:")
            assert judgments.judgments(a, "t1") == judgments.judgments(b, "t1")
            for word in ("blood", "the", "cell"):
                assert list(a.intervals(word)) == list(b.intervals(word)), word
            for q in ("(^ blood the)", "(^ cell blood)", '"the blood"'):
                assert ranked(a, q, ":") == ranked(b, q, ":"), q
            assert a.text(0, a.address_space()) == b.text(0, b.address_space())
            assert a.stats().documents == b.stats().documents


def test_a_splitting_process_that_dies_is_a_clear_error(tmp_path, monkeypatch):
    """What a splitting process said on its way out ends the message; the split then runs
    again to the end."""
    from annodb.shards.split import split
    source = _split_source(tmp_path)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Traceback ...' >&2\necho 'MemoryError: no room' >&2\n"
                    "exit 3\n")
    fake.chmod(0o755)
    real = sys.executable
    monkeypatch.setattr("sys.executable", str(fake))
    with pytest.raises(AnnodbError, match=r"a splitting process ended \(exit code 3\): "
                                          r"MemoryError: no room; .* completes it"):
        split(source, tmp_path / "c.shards", 2)
    monkeypatch.setattr("sys.executable", real)
    assert split(source, tmp_path / "c.shards", 2).documents == 606
    _same_as_split(source, tmp_path / "c.shards")


def test_a_split_killed_part_way_is_completed_by_running_it_again(tmp_path):
    """Every splitting process killed (SIGKILL) once some windows are written: the
    collection keeps whole windows; the same split again completes it, as if never
    stopped. Another split into that directory is refused, and so is completing it from
    the database written since."""
    import subprocess
    from annodb.shards.split import split, split_into
    source = _split_source(tmp_path)
    dest = tmp_path / "c.shards"
    code = ("import sys; from annodb.shards.split import split; "
            "split(sys.argv[1], sys.argv[2], 2, window=5, processes=2)")
    p = subprocess.Popen([sys.executable, "-c", code, str(source), str(dest)],
                         start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with annodb.open(dest / "shard-000", readonly=True) as db, db.read() as r:
                if r.document_count() >= 60:
                    break
        except AnnodbError:
            pass
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    with annodb.open(dest / "shard-000", readonly=True) as db, db.read() as r:
        written = r.document_count()
    assert 0 < written < 400 and (dest / "split.json").exists()
    with pytest.raises(AnnodbError, match="a split of .* into 2 shards was begun here"):
        split(source, dest, 3)
    copy = tmp_path / "written.db"                 # the same database, written since
    shutil.copytree(source, copy)
    (dest / "split.json").write_text(json.dumps({"source": str(copy), "state": json.loads(
        (dest / "split.json").read_text())["state"]}))
    with annodb.open(copy) as db, db.write() as w:
        w.add("written after the split began", docno="late")
    with pytest.raises(AnnodbError, match="was written since this split began"):
        split(copy, dest, 2)
    with pytest.raises(AnnodbError, match="written as the split began"):  # (a process's
        split_into(str(source), str(dest), 2, [0], state=-1)          # check of its own)
    (dest / "split.json").write_text(json.dumps({"source": str(source), "state": json.loads(
        (dest / "split.json").read_text())["state"]}))
    summary = split(source, dest, 2, window=5)
    assert summary.documents == 606 and summary.already >= written
    assert not (dest / "split.json").exists()
    _same_as_split(source, dest)


def test_sparse_vectors_over_shards(tmp_path):
    """Records with a sparse field, ingested into one database and into 2 shards (in
    parallel processes): the same sparse rankings (free text, weighted terms, GCL), and
    the same problems reported."""
    import numpy as np
    from annodb.ingest import ingest
    rng = np.random.default_rng(3)
    terms = [f"t{i}" for i in range(10)]
    lines = [json.dumps({"id": f"v{i}", "text": f"document {i} {' '.join(rng.choice(terms, 3))}",
                         "splade": {t: round(float(rng.uniform(0, 3)), 3)
                                    for t in rng.choice(terms, 4, replace=False)}})
             for i in range(80)]
    lines[7] = json.dumps({"id": "bad", "text": "x", "splade": {"t1": -1}})
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    one = tmp_path / "one.db"
    many = tmp_path / "c.shards"
    annodb.open(many, shards=2).close()
    got = [ingest(str(p), [src], sparse_fields=["splade"]) for p in (one, many)]
    assert [(s.added, s.error_count, s.errors) for s in got] == [(79, 1, got[0].errors)] * 2
    with annodb.open(one) as a_db, annodb.open(many) as b_db, a_db.read() as a, \
            b_db.read() as b:
        assert b.sparse_fields() == ["splade"]
        for query in ({"t1": 1.0, "t3": 0.5}, {"t2": 2.0}, "t4 t5 t5", {"t9": 1, "t0": 3}):
            for k in (1, 5, 100):
                assert same(lambda r: r.search_text(query, k=k, rank="sparse").hits, a, b)
        for q in ("(+ t1 t2)", "document", "(^ t3 t4)"):
            assert same(lambda r: [h.as_dict() for h in r.search(q, k=50, rank="sparse")],
                        a, b)


@settings(max_examples=150)
@given(st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), max_size=12),
                max_size=12),
       st.integers(1, 30), st.integers(1, 14))
def test_homes_remember_the_newest_rankings_whole(rankings, limit, most):
    homes = routing.Homes(limit, most)
    for r in rankings:
        homes.remember(np.array([s for s, _ in r], dtype=np.int64),
                       np.array([h for _, h in r], dtype=np.int64))
    kept, size = [], 0    # the model: newest first, whole, until past limit or `most` kept
    for r in reversed([r for r in rankings if r]):
        if kept and (size + len(r) > limit or len(kept) == most):
            break
        kept.append(r)
        size += len(r)
    for start in range(61):
        want = None
        for r in kept:                      # the newest ranking holding it; its first entry
            hits = [h for s, h in sorted(r, key=lambda x: x[0]) if s == start]
            if hits:
                want = hits[0]
                break
        assert homes.get(start) == want


STEMMED = ["walk", "walks", "walked", "walking", "walker", "walkers", "walkway", "walka",
           "walkabout", "walkie", "walkb", "walk2", "talk"]


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(STEMMED), min_size=1, max_size=6), min_size=1,
                max_size=12),
       st.sampled_from([1, 2, 3, 32]))
def test_the_words_sharing_a_stem_are_one_databases(docs, limit):
    """ranking.counted_forms asks each shard once (word_candidates) and unites their names
    cut where one database's scan stops (4 * limit names the stem begins): the same forms
    as one database, however the words fall into shards; and the default free-text
    ranking (bm25+rm3, which feeds back words of the best documents) the same hits."""
    from annodb import ranking
    with tempfile.TemporaryDirectory() as tmp:
        one = annodb.open(os.path.join(tmp, "one.db"))
        many = [annodb.open(os.path.join(tmp, f"{n}.shards"), shards=n) for n in (2, 3)]
        try:
            for db in [one] + many:
                for i, words in enumerate(docs):
                    with db.write() as w:
                        w.add(" ".join(words), docno=f"d{i}")
            asked = ["walk", "walking", "walker", "walkway", "talk", "walk2", "wal"]
            with one.read() as a:
                expected = ranking.counted_forms(a, asked, limit)
                every = a.features_with_prefix("", 1 << 20)     # brute force
                for w in asked:
                    sharing = {f for f in every if f == w or (   # by a prefix scan
                        ranking._stemmed(w) and f.isalpha() and f.startswith(ranking.stem(w))
                        and ranking.stem(f) == ranking.stem(w))}
                    sharing = {f for f in sharing if a.list_count(f)}
                    assert set(expected[w]) <= sharing, w
                    if limit == 32:           # (no cut: fewer names than 4 * limit)
                        assert set(expected[w]) == sharing, w
                hits = [(h.docno, h.score) for h in a.search_text("walking talk", k=5)]
                for db in many:
                    with db.read() as b:
                        assert ranking.counted_forms(b, asked, limit) == expected
                        assert [(h.docno, h.score)
                                for h in b.search_text("walking talk", k=5)] == hits
        finally:
            for db in [one] + many:
                db.close()


@pytest.mark.parametrize("left", ["a marker cut short", "the marker",
                                  "marker and half a collection"])
def test_a_split_stopped_as_it_began_is_completed_by_running_it_again(tmp_path, left):
    """What a split stopped while making its collection leaves (its marker's temporary
    file; the marker alone, written first; the marker and a collection half made: its
    own marker and one shard, before the manifest): running it again completes it."""
    from annodb.shards.split import split
    source = _split_source(tmp_path)
    dest = tmp_path / "c.shards"
    split(source, dest, 2)
    marker = {"source": str(source), "shards": 2}
    with annodb.open(source, readonly=True) as db, db.read() as r:
        marker["state"] = r._txn.id                      # (what split() records)
    shutil.rmtree(dest)
    dest.mkdir()
    if left == "a marker cut short":
        (dest / "split.json.123.tmp").write_text('{"sour')
    else:
        (dest / "split.json").write_text(json.dumps(marker))
    if left == "marker and half a collection":
        from annodb.shards import collection as shards
        manifest = shards.new_manifest(2, False)
        (dest / "creating.json").write_bytes(shards._json(manifest))
        shards._create_shard(str(dest), 0, manifest, 30.0)
    summary = split(source, dest, 2)
    assert summary.documents == 606 and summary.already == 0
    assert sorted(p.name for p in dest.iterdir()) == [
        "addresses", "addresses.lock", "manifest.json", "shard-000", "shard-001"]
    _same_as_split(source, dest)


def test_a_sharded_snapshot_gives_text_pieces_as_one_database(tmp_path):
    """A sharded snapshot's text_pieces (each range's text a document at a time, in
    address order) is one database's, erased addresses left out, for ranges within a
    document and across documents of different shards."""
    texts = [f"doc {i} holds words w{i} and more w{i}" for i in range(6)]
    one = annodb.open(str(tmp_path / "one.db"))
    many = annodb.open(str(tmp_path / "c.shards"), shards=3)
    try:
        for db in (one, many):
            for i, text in enumerate(texts):
                with db.write() as w:
                    w.add(text, docno=f"n{i}")
            with db.write() as w:
                d = w.document("n2")
                w.erase(d.start + 1, d.start + 2)
        with one.read() as a, many.read() as b:
            space = a.address_space()
            assert b.address_space() == space
            starts = [0, 3, 0, 10, space - 4]
            ends = [2, 30, space - 1, 10, space - 1]
            want = a.text_pieces(starts, ends)
            assert want and all(want)
            assert b.text_pieces(starts, ends) == want
            assert b.texts(starts, ends) == a.texts(starts, ends)
    finally:
        one.close()
        many.close()


def test_both_snapshots_have_every_member_of_the_read_interface(tmp_path):
    """One database's snapshot and writer and a sharded collection's snapshot and writer
    each have every method and attribute the read interface (reading.ReadView)
    declares."""
    from annodb.reading import ReadView
    members = [n for n, v in vars(ReadView).items()
               if callable(v) and not n.startswith("_")] + ["fold_diacritics"]
    assert {"ranked", "text_pieces", "find", "statistics", "top_words"} <= set(members)
    one = annodb.open(str(tmp_path / "one.db"))
    many = annodb.open(str(tmp_path / "c.shards"), shards=2)
    try:
        for db in (one, many):
            with db.read() as r:
                assert [n for n in members if not hasattr(r, n)] == []
            with db.write() as w:
                assert [n for n in members if not hasattr(w, n)] == []
    finally:
        one.close()
        many.close()
