"""A sharded collection on local Ray actors answers exactly as in process (annodb.shards.ray).

One local Ray cluster (annodb.shards.ray.start_local: this machine's CPUs, every Ray process on
127.0.0.1) for the module: its start takes a few seconds.
"""

import importlib.util
import json
from pathlib import Path

import pytest

import annodb
from annodb.ingest import ingest

if importlib.util.find_spec("ray") is None:  # (not imported here: see start_local)
    pytest.skip("pip install 'annodb[ray]'", allow_module_level=True)
DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    from annodb.shards import ray as ray_shards
    path = tmp_path_factory.mktemp("ray") / "c.shards"
    annodb.open(path, shards=2).close()
    ingest(str(path), [DATA / "msmarco-sample-600.jsonl"])
    with annodb.open(path) as db, db.write() as w:
        w.annotate("judgment:t", w.document(_first(db)).start, w.document(_first(db)).end, 2)
    ray_shards.start_local(num_cpus=2)   # (on loopback)
    try:
        yield path
    finally:
        ray_shards.stop(path)
        ray_shards.ray.shutdown()


def _first(db):
    with db.read() as r:
        return next(iter(r.documents())).docno


def _queries():
    rows = (DATA / "vole-queries.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [row.split("\t", 3)[3] for row in rows][::8]


def test_ray_actors_answer_as_the_collection_in_process(collection):
    from annodb.shards import ray as ray_shards
    remote = ray_shards.open(collection)
    with annodb.open(collection, readonly=True) as local, local.read() as a, \
            remote.read() as b:
        for i, q in enumerate(_queries()):
            how = ("ssr", "bm25")[i % 2]
            try:
                ra = a.rank(q, depth=50, lenient=True, rank=how)
            except annodb.AnnodbError as err:
                with pytest.raises(annodb.AnnodbError, match=str(err)[:20]):
                    b.rank(q, depth=50, lenient=True, rank=how)
                continue
            rb = b.rank(q, depth=50, lenient=True, rank=how)
            assert [h.as_dict() for h in ra.hits()] == [h.as_dict() for h in rb.hits()], q
            assert (ra.total, ra.warnings) == (rb.total, rb.warnings)
        for how in ("bm25", "ssr", "fused", "bm25+rm3"):
            assert a.search_text("white blood cells", k=5, rank=how).hits == \
                b.search_text("white blood cells", k=5, rank=how).hits
        assert a.count("(>> : (>= judgment:t 2))") == b.count("(>> : (>= judgment:t 2))") == 1
        assert a.stats() == b.stats()
        docno = _first(local)
        assert a.document(docno) == b.document(docno) and b.find(f' "{docno}" ')
        with pytest.raises(annodb.NotFoundError):
            b.document("no such docno")
    with pytest.raises(annodb.StorageError, match="read-only"):
        remote.write()
    remote.close()


def test_the_server_fronts_ray_actors(collection):
    from annodb.protocol import Protocol, Session
    lines = [{"op": "query", "query": "(^ blood cell)"}, {"op": "next", "qid": "q0"},
             {"op": "count", "query": "blood"}, {"op": "stats"}]
    got = {}
    for ray_address in (None, "auto"):
        protocol = Protocol(str(collection), ray=ray_address)
        session = Session()
        got[ray_address] = [json.loads(protocol.respond(json.dumps(line), session))["response"]
                            for line in lines]
        if ray_address:
            judge = json.loads(protocol.respond(json.dumps(
                {"op": "judge", "topic": "t", "docno": got[ray_address][0]["docno"],
                 "grade": 1}), session))["response"]
        protocol.close()
    for stats in (got[None][3], got["auto"][3]):
        stats.pop("server")
    assert got[None] == got["auto"] and got[None][0]["ok"]
    assert not judge["ok"] and "Ray actors" in judge["error"]


def test_an_actor_that_died_is_restarted_for_the_next_snapshot(collection):
    """A shard's actor killed (its node's OOM killer, a crash): Ray restarts it, the
    snapshot that used it raises a clear StorageError, and the next one answers as
    before."""
    from annodb.shards import ray as ray_shards
    remote = ray_shards.open(collection)
    query = "(^ blood cell)"
    with remote.read() as r:
        want = [h.as_dict() for h in r.search(query, k=10)]
        ray_shards.ray.kill(remote.actors[1], no_restart=False)
        with pytest.raises(annodb.StorageError, match="shard-001"):
            r.search(query, k=10)
    with remote.read() as r:
        assert [h.as_dict() for h in r.search(query, k=10)] == want
    remote.close()
