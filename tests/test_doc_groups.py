"""Documents stored in compressed groups (docs values of tag 3, format 3: addresses
relative to the key), on real LMDB files: round trips, deletions at every place in a group,
lookups at group edges, format-1 and format-2 databases written to, and random adds and
deletes against a model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import annodb
from annodb import storage
from annodb.storage import documents
from annodb.check import check

GOLDEN = Path(__file__).parent / "data" / "golden-v1"


@pytest.fixture
def db(tmp_path):
    database = annodb.open(tmp_path / "g.db", timeout=5)
    yield database
    database.close()


def entries(db):
    """(key, tag, [docno, ...]) of every docs entry, in key order."""
    out = []
    with db.read() as r:
        for key, value in r._txn.docs_entries():
            docs = storage.decode_docs(value, storage.from_u64(key))
            out.append((storage.from_u64(key), value[0], [d.docno for d in docs]))
    return out


def text_of(i: int, words: int = 3) -> str:
    return " ".join(f"w{i}x{k}" for k in range(words))


def assert_lookups(db, model: dict[str, str]):
    """Every read agrees with `model` (docno -> text, in address order) and check passes."""
    assert check(db) == []
    with db.read() as r:
        docs = list(r.documents())
        assert [d.docno for d in docs] == list(model)
        assert [d.text for d in docs] == list(model.values())
        assert r.document_count() == len(model)
        for i, d in enumerate(docs):
            assert r.document(d.docno) == d
            assert r._txn.doc_at_start(d.start) == d
            for a in {d.start, d.end, (d.start + d.end) // 2}:
                assert r.document_at(a) == d
            if i + 1 < len(docs):
                for a in range(d.end + 1, docs[i + 1].start):   # gaps: erased addresses
                    assert r.document_at(a) is None
                    assert r._txn.doc_at_start(a) is None
        if docs:
            assert r.document_at(docs[-1].end + 1) is None
            lo, hi = docs[0].start, docs[-1].end
            assert [d.docno for d in r._txn.docs_overlapping(lo, hi)] == list(model)
            assert [d.docno for d in r._txn.docs_overlapping(0, 1 << 40)] == list(model)


# ---------------------------------------------------------------- round trips


def test_groups_round_trip(db):
    import random
    rng = random.Random(5)  # a long text that compresses badly: it needs overflow pages
    long_text = " ".join(f"{rng.random():.12f}" for _ in range(600))
    model = {}
    with db.write() as w:
        for i in range(300):
            text = long_text if i in (5, 150, 151, 299) else text_of(i, 1 + i % 7)
            w.add(text, docno=f"d{i}")
            model[f"d{i}"] = text
    found = entries(db)
    tags = {tag for _, tag, _ in found}
    assert tags == {storage.TAG_REL_GROUP}          # the last one alone: a group of one
    assert found[-1][1:] == (storage.TAG_REL_GROUP, ["d299"])
    assert any(docnos[0] == "d5" and len(docnos) > 1 for _, _, docnos in found)
    assert sum(len(d) for _, _, d in found) == 300
    assert all(len(d) <= storage.GROUP_DOCS for _, _, d in found)
    for key, tag, docnos in found:
        if tag != storage.TAG_REL_GROUP:
            assert len(docnos) == 1
    assert [d for _, _, ds in found for d in ds] == list(model)
    assert_lookups(db, model)


def test_group_value_is_the_msgpack_of_starts_and_relative_documents(db):
    import msgspec
    import zstandard
    with db.write() as w:
        w.add("a first one", docno="first")
    with db.write() as w:
        for i in range(20):
            w.add(text_of(i), docno=f"d{i}")
        w.delete("first")   # the group keeps its key: the starts are relative to it
    with db.read() as r:
        docs = list(r.documents())
        (key, value), = list(r._txn.docs_entries())
        assert value[0] == storage.TAG_REL_GROUP and storage.from_u64(key) == 0
        assert docs[0].start == 3 and docs[1].fields[0].start == 6
        # each document is the array of its fields (the container last only when it is
        # not ":"), its addresses less its start
        relative = [(d.docno, 0, d.end - d.start, d.text,
                     [msgspec.structs.replace(f, start=f.start - d.start, end=f.end - d.start)
                      for f in d.fields], d.meta, d.tokens) for d in docs]
        assert zstandard.ZstdDecompressor().decompress(bytes(value[1:])) == \
            msgspec.msgpack.encode([[d.start for d in docs], relative])
        assert [msgspec.msgpack.encode(d) for d in relative] == \
            [storage.relative_raw(d) for d in docs]


def test_a_value_does_not_depend_on_where_its_documents_land(tmp_path):
    values = []
    for offset in (0, 1000):
        with annodb.open(tmp_path / f"{offset}.db") as db:
            with db.write() as w:
                if offset:
                    w.annotate("reserve", 0, offset - 1)
                for i in range(30):
                    w.add(text_of(i), docno=f"d{i}")
            with db.read() as r:
                (key, value), = [(storage.from_u64(k), bytes(v))
                                 for k, v in r._txn.docs_entries()]
                assert key == offset
                values.append(value)
    assert values[0] == values[1]


def test_array_header_matches_msgspec():
    import msgspec
    for n in (0, 1, 15, 16, 65535, 65536):
        items = [1] * n
        assert documents._array_header(n) + b"\x01" * n == msgspec.msgpack.encode(items)


def test_small_commits_refill_the_last_group(db):
    model = {}
    for i in range(40):
        with db.write() as w:
            w.add(text_of(i), docno=f"d{i}")
            model[f"d{i}"] = text_of(i)
    found = entries(db)
    assert len(found) < 5 and found[0][1] == storage.TAG_REL_GROUP
    assert_lookups(db, model)


# ---------------------------------------------------------------- deletions


def _one_group(db, n=10):
    with db.write() as w:
        for i in range(n):
            w.add(text_of(i), docno=f"d{i}")
    (key, tag, docnos), = entries(db)
    assert tag == storage.TAG_REL_GROUP and docnos == [f"d{i}" for i in range(n)]
    return {f"d{i}": text_of(i) for i in range(n)}


@pytest.mark.parametrize("which", [0, 4, 9])
def test_delete_first_middle_last_of_a_group(db, which):
    model = _one_group(db)
    with db.write() as w:
        assert w.delete(f"d{which}")
    del model[f"d{which}"]
    (key, tag, docnos), = entries(db)
    assert key == 0 and docnos == list(model)      # the key stays the first address
    assert_lookups(db, model)
    with db.write() as w:                          # and the group takes more documents
        w.add("after the deletion", docno="new")
    model["new"] = "after the deletion"
    assert_lookups(db, model)


def test_delete_every_document_of_a_group_one_by_one(db):
    model = _one_group(db, 6)
    with db.write() as w:
        w.add(" ".join(f"big{k}" for k in range(1500)), docno="big")   # a separate entry
    model["big"] = " ".join(f"big{k}" for k in range(1500))
    for i in (2, 0, 5, 1, 4):
        with db.write() as w:
            w.delete(f"d{i}")
        del model[f"d{i}"]
        assert_lookups(db, model)
    with db.write() as w:                          # the only one left
        w.delete("d3")
    del model["d3"]
    assert [docnos for _, _, docnos in entries(db)] == [["big"]]
    assert_lookups(db, model)


def test_reads_inside_a_writer_see_its_deletions_and_additions(db):
    model = _one_group(db)
    with db.write() as w:
        assert w.document("d3").text == text_of(3)  # caches the decoded group
        w.delete("d4")
        assert not w.has("d4") and w.document_at(w.document("d3").end + 1) is None
        assert w.document("d5").text == text_of(5)
        w.add("one more", docno="m")                # refills the group
        assert w.document("m").text == "one more"
        assert [d.docno for d in w.documents()][-2:] == ["d9", "m"]
        w.erase(w.document("d0").start, w.document("d1").end)
        assert [d.docno for d in w.documents()][:2] == ["d2", "d3"]
    for docno in ("d4", "d0", "d1"):
        del model[docno]
    model["m"] = "one more"
    assert_lookups(db, model)


def test_documents_returned_are_not_shared(db):
    _one_group(db)
    with db.read() as r:
        a = r.document("d2")
        a.text = "changed"
        assert r.document("d2").text == text_of(2)


# ---------------------------------------------------------------- edges and ranges


def test_lookups_at_group_edges_and_across_groups(db):
    with db.write() as w:
        for i in range(1500):
            w.add(text_of(i, 2 + i % 5), docno=f"d{i}")
    found = entries(db)
    assert len(found) > 3
    with db.read() as r:
        docs = list(r.documents())
        txn = r._txn
        by_start = {d.start: d for d in docs}
        keys = [k for k, _, _ in found]
        edges = set()
        for k in keys:
            edges.update({k - 1, k, k + 1})
        edges.update({docs[-1].end, docs[-1].end + 1, 0})
        for a in sorted(x for x in edges if x >= 0):
            want = next((d for d in docs if d.start <= a <= d.end), None)
            assert txn.doc_containing(a) == want
            assert txn.doc_at_start(a) == by_start.get(a)
        points = sorted(x for x in edges if x >= 0)
        for p in points:
            for q in points:
                if q < p:
                    continue
                want = [d.docno for d in docs if d.start <= q and d.end >= p]
                assert [d.docno for d in txn.docs_overlapping(p, q)] == want
        p, q = docs[3].end, docs[150].start                # a range over many groups
        assert r.text(p, q).count("\n") == 147


def test_erase_across_groups(db):
    with db.write() as w:
        for i in range(200):
            w.add(text_of(i, 6), docno=f"d{i}")
    model = {f"d{i}": text_of(i, 6) for i in range(200)}
    with db.read() as r:
        p, q = r.document("d20").start, r.document("d120").end
    with db.write() as w:
        w.erase(p, q)
    for i in range(20, 121):
        del model[f"d{i}"]
    assert_lookups(db, model)


# ---------------------------------------------------------------- format 1


def test_format_1_database_takes_groups_and_reads_mixed(tmp_path):
    path = tmp_path / "golden.db"
    shutil.copytree(GOLDEN, path)
    with annodb.open(path) as db:
        before = entries(db)
        assert {tag for _, tag, _ in before} <= {storage.TAG_DOC, storage.TAG_ZDOC}
        model = {d.docno: d.text for d in db.read().documents()}
        with db.write() as w:
            for i in range(100):
                w.add(text_of(i), docno=f"n{i}")
                model[f"n{i}"] = text_of(i)
        after = entries(db)
        assert after[0] == before[0]               # untouched format-1 entries stay
        assert storage.TAG_REL_GROUP in {tag for _, tag, _ in after}
        assert_lookups(db, model)
        with db.write() as w:                      # delete old and new documents
            w.delete("intro")
            w.delete("g3")
            w.delete("n0")
            w.delete("n50")
        for docno in ("intro", "g3", "n0", "n50"):
            del model[docno]
        assert_lookups(db, model)
        with db.read() as r:
            assert r.document("g2").field_text("title") == "Second"


# ---------------------------------------------------------------- random, against a model


_OP = st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(1, 400), min_size=1, max_size=30)),
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("erase"), st.integers(0, 10_000), st.integers(0, 60)),
    st.tuples(st.just("read"), st.integers(0, 10_000)))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_OP, min_size=1, max_size=5), min_size=1, max_size=8))
def test_random_adds_and_deletes_match_a_model(tmp_path_factory, batches):
    """Each batch is one writer: reads inside it see its own adds and deletions."""
    path = tmp_path_factory.mktemp("h") / "h.db"
    model: dict[str, str] = {}
    n = 0
    with annodb.open(path, timeout=5) as db:
        for ops in batches:
            with db.write() as w:
                for op in ops:
                    if op[0] == "add":
                        for words in op[1]:
                            text = text_of(n, words)
                            w.add(text, docno=f"d{n}")
                            model[f"d{n}"] = text
                            n += 1
                    elif op[0] == "delete" and model:
                        docno = list(model)[op[1] % len(model)]
                        assert w.delete(docno)
                        del model[docno]
                    elif op[0] == "erase" and model:
                        docs = list(w.documents())
                        first = docs[op[1] % len(docs)]
                        last = docs[min(op[1] % len(docs) + op[2], len(docs) - 1)]
                        w.erase(first.start, last.end)
                        for d in docs:
                            if first.start <= d.start and d.end <= last.end:
                                del model[d.docno]
                    elif op[0] == "read" and model:
                        docno = list(model)[op[1] % len(model)]
                        d = w.document(docno)
                        assert d.text == model[docno] and w.document_at(d.end) == d
                assert [d.docno for d in w.documents()] == list(model)
            assert_lookups(db, model)


def test_deletions_in_one_writer_across_groups_and_back(db):
    with db.write() as w:
        for i in range(200):
            w.add(text_of(i, 6), docno=f"d{i}")
    model = {f"d{i}": text_of(i, 6) for i in range(200)}
    order = ["d3", "d150", "d4", "d199", "d0", "d151", "d5", "d1", "d2"]
    with db.write() as w:
        for docno in order:
            gone = w.document(docno)
            assert w.delete(docno)
            del model[docno]
            assert w.document_at(gone.start) is None and w.document_at(gone.end) is None
            assert list(w._txn.docs_overlapping(gone.start, gone.end)) == []
        assert [d.docno for d in w.documents()] == list(model)
    assert_lookups(db, model)


def test_a_damaged_last_group_is_left_alone_by_writes(db):
    _one_group(db, 3)
    txn = storage.Txn(db._env, write=True)
    txn.txn.put(storage.u64(0), b"\x02not zlib", db=txn.dbs["docs"])
    txn.commit()
    with db.write() as w:                          # no refill of what does not decode
        w.add("still writable", docno="later")
    with db.read() as r:
        assert r.document("later").text == "still writable"
    assert any("the group at 0 does not decode" in p for p in check(db))


def test_leaf_max_is_where_lmdb_starts_overflow_pages(tmp_path):
    import lmdb
    env = lmdb.open(str(tmp_path / "raw"), max_dbs=8, map_size=1 << 26)
    psize = env.stat()["psize"]
    limit = documents._leaf_max(psize)
    for size, overflow in ((limit, 0), (limit + 1, 1), (2 * psize - 16, 2), (2 * psize - 15, 3)):
        db = env.open_db(f"d{size}".encode())
        with env.begin(write=True) as txn:
            txn.put(storage.u64(0), b"x" * size, db=db)
            assert txn.stat(db)["overflow_pages"] == overflow, size
    env.close()


def test_a_long_document_takes_the_next_ones_into_its_overflow_pages(db):
    import random
    rng = random.Random(4)
    long_text = " ".join(f"{rng.random():.12f}" for _ in range(400))  # compresses badly
    model = {"long": long_text}
    with db.write() as w:
        w.add(long_text, docno="long")
        for i in range(40):
            w.add(text_of(i, 5), docno=f"d{i}")
            model[f"d{i}"] = text_of(i, 5)
    found = entries(db)
    key, tag, docnos = found[0]
    assert tag == storage.TAG_REL_GROUP and docnos[0] == "long" and len(docnos) > 1
    with db.read() as r:
        value = dict((storage.from_u64(k), v) for k, v in r._txn.docs_entries())[key]
        psize = r._txn.txn.stat(r._txn.dbs["docs"])["psize"]
        alone = len(storage.encode_doc(r.document("long")))
        pages = -(-(alone + 16) // psize)
        assert alone > documents._leaf_max(psize) and len(value) <= pages * psize - 16
    assert_lookups(db, model)


def test_stored_documents_are_the_documents_msgpack(db):
    """batch.make's document tuples encode to exactly what storage.relative_raw gives for
    the Document (trailing defaults left out the same way)."""
    import msgspec
    from annodb import batch
    items = [batch.prepare_item("three plain words", "a"),
             batch.prepare_item("", "b"),                                   # no tokens
             batch.prepare_item({"docid": "c", "text": ""}),
             batch.prepare_item({"docid": "d", "title": "T", "n": 2, "tags": ["x y", "z"]}),
             batch.prepare_item({"docid": "e", "t": "", "x": 5}, text_fields=["t"]),
             batch.prepare_item({"docid": "f", "t": "one two"}, text_fields=["t"])]
    made = batch.make([i for i in items])
    for raw in made.doc_raws():
        doc = msgspec.msgpack.decode(raw, type=storage.Document)
        assert storage.relative_raw(doc) == raw
    assert [msgspec.msgpack.decode(r, type=storage.Document).meta
            for r in made.doc_raws()][4:] == [{"x": 5}, {}]


def test_a_made_up_docno_does_not_take_one_given_in_the_same_batch(db):
    with db.write() as w:
        added = w.add_many([("first words", None), ("second", "d2"), ("third", None)])
    assert [a.docno for a in added] == ["d0", "d2", "d3"]
    with db.write() as w:
        added = w.add_many([("x", None), ("y", f"d{w.address_space()}")])
    assert added[0].docno == added[1].docno + "_"
    assert_lookups(db, {"d0": "first words", "d2": "second", "d3": "third",
                        added[0].docno: "x", added[1].docno: "y"})


# ---------------------------------------------------------------- groups cut from one stream


def _varied_raws(n: int, seed: int) -> tuple[list, list]:
    """The relative msgpack and starts of n documents whose compression ratios vary (mixed
    repetitive text, random digits and word lists, and runs of the repetitive kind)."""
    import random
    rng = random.Random(seed)
    raws, starts, at = [], [], 0
    for i in range(n):
        kind = rng.randrange(3) if i % 400 < 300 else 0   # and runs of one kind
        if kind == 0:
            text = " ".join(["the same words again"] * rng.randint(1, 30))
        elif kind == 1:
            text = " ".join(f"{rng.random():.9f}" for _ in range(rng.randint(1, 60)))
        else:
            text = " ".join(f"w{rng.randint(0, 500)}" for _ in range(rng.randint(1, 120)))
        doc = storage.Document(f"doc-{i}", at, at + len(text.split()) - 1, text, [],
                               tokens=len(text.split()))
        raws.append(storage.relative_raw(doc))
        starts.append(at)
        at += len(text.split())
    return raws, starts


def test_a_run_of_documents_is_compressed_about_once_and_fills_its_pages():
    """encode_docs compresses each group once (a stream cut at the last document boundary
    that fits the page; again only when its first block alone overfills it), not once and
    again with fewer documents; every group fits one overflow page, most fill it to within
    a few percent, and every document reads back as it went in."""
    raws, starts = _varied_raws(3000, 7)
    psize = 4096
    room = psize - 16
    calls = [0]
    real = documents._compressor()

    class Counting:   # the thread's compressor, its compressions counted
        def compress(self, data):
            calls[0] += 1
            return real.compress(data)

        def compressobj(self, *args, **kwargs):
            calls[0] += 1
            return real.compressobj(*args, **kwargs)

    documents._zstd.c = Counting()
    try:
        out = storage.encode_docs(raws, starts, psize, threads=1)
    finally:
        documents._zstd.c = real
    assert calls[0] <= len(out) * 1.45   # (compressed and compressed again: ~1.8)
    i = 0
    sizes = []
    for start, value, n in out:
        assert start == starts[i] and n <= storage.GROUP_DOCS
        if n > 1:
            assert len(value) <= room
            sizes.append(len(value))
        found = storage.decode_docs(value, start)
        assert [storage.relative_raw(d) for d in found] == raws[i:i + n]
        assert [d.start for d in found] == starts[i:i + n]
        i += n
    assert i == len(raws)
    # (groups before a long document, or at the run's end, end there)
    assert sorted(sizes)[len(sizes) // 2] >= 0.96 * room


@pytest.mark.parametrize("content", [3, 255, 256, 65791, 65792, 200_000])
def test_a_spliced_frame_header_reads_back_at_every_size_class(content):
    """The frame header a cut group is given (one segment, its content size in 1, 2 or 4
    bytes) and a raw block: any zstd decoder reads back exactly that content."""
    import zstandard
    data = bytes(range(256)) * (content // 256) + b"x" * (content % 256)
    frame = documents._frame_head(len(data))
    for at in range(0, len(data), 100_000):   # raw blocks of at most 128 KiB
        piece = data[at:at + 100_000]
        last = int(at + 100_000 >= len(data))
        frame += ((len(piece) << 3) | last).to_bytes(3, "little") + piece
    assert documents._frame_head_size(frame) == len(documents._frame_head(len(data)))
    assert zstandard.ZstdDecompressor().decompress(frame) == data
