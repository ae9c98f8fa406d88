"""The rankers as objects (annodb/rankers.py): one table looked up by name at the edges,
each ranker validating its own parameters, and a ranker object ranking as its name does."""

import pytest

import annodb
from annodb import rankers
from annodb.errors import RankingError


def test_an_unknown_name_lists_the_known_ones():
    """An unknown ranker name is a RankingError listing the engine's rankers (and, for
    Memory.recall's names, `context` too)."""
    with pytest.raises(RankingError, match=r"^unknown ranker 'nope': choose one of ssr, "
                       r"bm25, fused, sparse, bm25\+rm3$"):
        rankers.make("nope")
    with pytest.raises(RankingError, match=r"choose one of ssr, bm25, fused, sparse, "
                       r"bm25\+rm3, context$"):
        rankers.make("nope", names=rankers.MEMORY_RANKS)
    with pytest.raises(RankingError, match="unknown ranker 'context'"):
        rankers.make("context")
    assert isinstance(rankers.make("context", names=rankers.MEMORY_RANKS), rankers.Context)
    assert set(rankers.RANKERS) == set(rankers.MEMORY_RANKS)


def test_each_ranker_owns_its_parameters():
    """Names with parameters make the ranker holding them (BM25 with fields is BM25F, a
    fused or RM3 ranker holds its BM25); a parameter out of range is refused, whether
    given by name or to the class, and a bool is no number even after its number was
    made."""
    assert rankers.make("bm25") == rankers.BM25()
    assert rankers.make("bm25", k1=1.2, b=0.75) == rankers.BM25(1.2, 0.75)
    f = rankers.make("bm25", fields={"title": 2.0})
    assert isinstance(f, rankers.BM25F) and f.fields[0].name == "title:"
    assert f.settings.fields == f.fields
    assert rankers.make("fused", k1=1.5) == rankers.Fused(rankers.BM25(1.5))
    assert rankers.make("bm25+rm3", fields=["t"]).bm25 == rankers.BM25F(fields=("t",))
    assert rankers.make("sparse", sparse_field="v") == rankers.Sparse("v")
    for bad in (lambda: rankers.BM25(k1=-1), lambda: rankers.make("bm25", b=2),
                lambda: rankers.BM25F(), lambda: rankers.Sparse(""),
                lambda: rankers.make("ssr", k1="x")):
        with pytest.raises(RankingError):
            bad()
    rankers.make("bm25", k1=1)
    with pytest.raises(RankingError, match="k1 must be a number, not True"):
        rankers.make("bm25", k1=True)


def test_a_ranker_object_ranks_as_its_name(tmp_path):
    """search, search_text and rank take a ranker object as they take its name and
    parameters: the same hits."""
    with annodb.open(str(tmp_path / "db")) as db:
        with db.write() as w:
            for i in range(12):
                w.add(f"goth rock {'rock ' * (i % 3)} post punk {i} scene", docno=f"d{i}")
        with db.read() as r:
            assert r.search("(^ rock punk)", rank=rankers.BM25(1.2, 0.3)).hits == \
                r.search("(^ rock punk)", rank="bm25", k1=1.2, b=0.3).hits
            assert r.search_text("rock scene", rank=rankers.Fused()).hits == \
                r.search_text("rock scene", rank="fused").hits
            a = r.rank("rock", rank=rankers.BM25RM3(), depth=5)
            b = r.rank("rock", rank="bm25+rm3", depth=5)
            assert a.starts.tolist() == b.starts.tolist()
            assert a.scores.tolist() == b.scores.tolist()
