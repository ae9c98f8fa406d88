"""annodb.Memory end to end on real LMDB files, several processes on one memory, and the
`annodb mcp` server driven by the mcp package's own client."""

import datetime
import os
import shutil
import subprocess
import sys
import textwrap

import anyio
import pytest

import annodb
from annodb.errors import AnnodbError, NotFoundError
from annodb.memory import is_gcl, label, where_node
from annodb.query import format as format_query

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANNODB = os.path.join(os.path.dirname(sys.executable), "annodb")


@pytest.fixture
def mem(tmp_path):
    with annodb.Memory(tmp_path / "memory.db") as m:
        yield m


def docnos(entries):
    return [e.docno for e in entries]


def test_remember_get_and_recall(mem):
    a = mem.remember("Alice prefers green tea to coffee in the morning", user="alice",
                     importance=3, pinned=True)
    b = mem.remember("Bob drinks coffee, black coffee", user="bob", importance=1)
    assert a.startswith("m") and b.startswith("m") and int(a[1:]) < int(b[1:])
    got = mem.get(a)
    assert got.text == "Alice prefers green tea to coffee in the morning"
    assert got.metadata["user"] == "alice" and got.metadata["importance"] == 3
    assert got.metadata["pinned"] is True and isinstance(got.metadata["time"], float)
    assert mem.get("nope") is None
    # free text
    found = mem.recall("coffee", k=10)
    assert docnos(found) == [b, a]                   # two covers beat one
    assert found[0].snippet == "Bob drinks <cover>coffee</cover>, black coffee"
    assert found[0].score > 0 and found[0].metadata["user"] == "bob"
    # GCL: an expression, a quoted phrase; a feature only when asked for
    assert docnos(mem.recall("(^ tea coffee)")) == [a]
    assert docnos(mem.recall('"black coffee"')) == [b]
    assert docnos(mem.recall("user:bob", gcl=True)) == [b]
    assert mem.recall("user:bob").query == "bob"     # words ("user" is in no memory)
    assert mem.recall("(^ tea coffee)", gcl=False).query == "(+ tea coffee)"  # BM25's words
    assert mem.recall("(^ tea coffee)", gcl=False, rank="ssr").query.startswith(
        "(^ tea coffee) ;")
    # lenient: the repair is reported
    repaired = mem.recall("(^ tea coffee")
    assert docnos(repaired) == [a] and repaired.warnings
    # a given docno; giving it again replaces the memory
    assert mem.remember("v1", docno="profile") == "profile"
    assert mem.remember("v2 of the profile", docno="profile", user="carol") == "profile"
    assert mem.get("profile").text == "v2 of the profile"
    assert docnos(mem.recall("v1")) == []


def test_auto_docnos_step_around_chosen_ones(tmp_path):
    with annodb.Memory(tmp_path / "m.db") as mem:
        assert mem.remember("a b") == "m0"            # addresses 0..1
        assert mem.remember("y", docno="m4") == "m4"  # address 2
        assert mem.remember("z") == "m3"
        assert mem.remember("w") == "m4.1"            # m4 was taken
        assert mem.get("m4").text == "y" and mem.get("m4.1").text == "w"


def test_gcl_detection():
    for gcl in ("(^ a b)", '"a phrase"', "(>= :importance: 3)", " ( + a b)", "(^ a b",
                "(... a b)", "(# 3)", '(<<"a" b)'):
        assert is_gcl(gcl), gcl
    for text in ("what does alice drink", "tea", "note: buy milk", '"unbalanced',
                 "user:alice", ":", "10:30", "bob@example.com", "(see above) the plan",
                 "(^_^)", '"a" and "b"', "=SUM(A1)", "(AND a b)"):
        assert not is_gcl(text), text


LITERALS = {"bob@example.com": "Contact bob@example.com at 10:30", "10:30": None,
            "https://example.org/a?b=1": "the docs are at https://example.org/a?b=1",
            "TODO:": "TODO: rotate the keys", r"C:\keys": r"they live in C:\keys",
            "=SUM": "the cell holds =SUM(A1:A3)", "#42": "closes #42", "x<y": "when x<y"}


def test_free_text_is_text_whatever_characters_it_holds(mem):
    """Input that is not GCL is words: an address, a time, a URL or a formula finds the
    memory that holds it (it used to be taken as a feature name and find nothing)."""
    made = {}
    for query, text in LITERALS.items():
        if text:
            made[text] = mem.remember(text)
    made[None] = made[LITERALS["bob@example.com"]]
    for query, text in LITERALS.items():
        found = mem.recall(query)
        assert found and found[0].docno == made[text], (query, docnos(found))
        assert found.warnings == []


def test_a_gcl_term_naming_no_feature_is_searched_as_words_with_a_warning(mem):
    m = mem.remember("Contact bob@example.com at 10:30", user="bob")
    found = mem.recall("(^ contact 10:30)")
    assert docnos(found) == [m]
    assert found.warnings == ["'10:30' names no feature of the database; searched its "
                              'words "10 30" instead']
    assert mem.recall("(^ contact user:bob)").warnings == []      # a feature: no warning


def test_where_strings_numbers_and_comparisons(mem):
    m = {}
    m["alice"] = mem.remember("tea note", user="alice", importance=1, done=False)
    m["alice2"] = mem.remember("tea note", user="alice", importance=4, done=True)
    m["Alice"] = mem.remember("tea note", user="Alice", importance=2)
    m["smith"] = mem.remember("tea note", user="alice smith (work)", importance=5)
    m["bob"] = mem.remember("tea note", user="bob", score=2.5)

    def where(**w):
        return sorted(docnos(mem.recall("tea", k=10, where=w)))

    def ids(*names):
        return sorted(m[n] for n in names)

    assert where(user="alice") == ids("alice", "alice2")          # exact: not Alice, not smith
    assert where(user="alice smith (work)") == ids("smith")      # spaces and ( ) escaped
    assert docnos(mem.recall(label("user", "alice smith (work)"), gcl=True)) == [m["smith"]]
    assert where(user=["Alice", "bob"]) == ids("Alice", "bob")   # any of
    assert where(user=("!=", "alice")) == ids("Alice", "smith", "bob")
    assert where(importance=4) == ids("alice2")
    assert where(importance=(">=", 2)) == ids("alice2", "Alice", "smith")
    assert where(importance=("<", 2)) == ids("alice")
    assert where(importance=[1, 5]) == ids("alice", "smith")
    assert where(done=True) == ids("alice2")
    assert where(done=False) == ids("alice")
    assert where(score=(">", 2)) == ids("bob")
    assert where(user="alice", importance=(">", 1)) == ids("alice2")
    assert where(user="nobody") == []
    t = mem.get(m["Alice"]).metadata["time"]
    assert where(time=(">=", t)) == ids("Alice", "smith", "bob")
    # compiled into the query algebra, as GCL anyone can read and rerun
    node = where_node({"user": "alice", "importance": (">=", 2)})
    assert format_query(node) == "(>> (>> : user:alice) (>= :importance: 2))"
    assert mem.recall("tea", where={"user": "alice"}).filter == "(>> : user:alice)"
    with pytest.raises(AnnodbError, match="strings take = or !="):
        mem.recall("tea", where={"user": (">", "alice")})


def test_filtered_recall_returns_k_when_k_exist(mem):
    """Bob's memories match far better, so the unfiltered top k holds none of Alice's:
    filtering after ranking would return nothing; filtering inside it returns k."""
    for i in range(30):
        mem.remember(f"coffee coffee coffee order {i}", user="bob")
    alice = {mem.remember(f"Alice said that in the afternoon she likes coffee with "
                          f"oat milk, note {i}", user="alice") for i in range(6)}
    k = 5
    for query in ("coffee", "(+ coffee milk)", "coffee"):
        unfiltered = mem.recall(query, k=k)
        assert len(unfiltered) == k
        assert not alice & set(docnos(unfiltered))        # post-filtering would give 0
        filtered = mem.recall(query, k=k, where={"user": "alice"})
        assert len(filtered) == k and set(docnos(filtered)) <= alice
    assert len(mem.recall("coffee", k=50, where={"user": "alice"})) == 6


def test_annotate_labels_filter_like_metadata(mem):
    a = mem.remember("the deploy key lives in the vault", importance=1)
    b = mem.remember("the deploy runs on fridays")
    mem.annotate(a, "useful", 3)
    mem.annotate(b, "useful")                        # default 0, as every annotation
    mem.annotate(a, "importance", 5)                 # overrides the remembered value
    assert mem.get(a).metadata["useful"] == 3 and mem.get(a).metadata["importance"] == 5
    assert mem.get(b).metadata["useful"] == 0
    assert docnos(mem.recall("deploy", where={"useful": (">=", 2)})) == [a]
    assert docnos(mem.recall("(>> : (>= :useful: 2))")) == [a]
    assert docnos(mem.recall("deploy", where={"importance": 1})) == []
    mem.annotate(a, "useful", 0)                     # latest write wins
    assert docnos(mem.recall("deploy", where={"useful": (">=", 2)})) == []
    with pytest.raises(NotFoundError):
        mem.annotate("nope", "useful", 1)


def test_forget(mem):
    a = mem.remember("remember the milk", user="alice")
    b = mem.remember("remember the eggs", user="alice")
    assert mem.forget(a) is True
    assert mem.forget(a) is False
    assert mem.get(a) is None
    assert docnos(mem.recall("remember")) == [b]
    assert docnos(mem.recall("milk")) == []
    assert docnos(mem.history(where={"user": "alice"})) == [b]
    c = mem.remember("remember the bread")
    assert c not in (a, b)                           # a forgotten docno is never reused


def test_history_order_and_filters(mem):
    made = [mem.remember(f"event {i}", user="alice" if i % 2 else "bob") for i in range(6)]
    assert docnos(mem.history()) == made[::-1]
    assert docnos(mem.history(2)) == made[:-3:-1]
    assert docnos(mem.history(where={"user": "alice"})) == made[1::2][::-1]
    old = mem.remember("imported from last year", time=1_600_000_000)
    assert docnos(mem.history())[-1] == old          # ordered by :time:, not by address
    assert docnos(mem.history(where={"time": ("<", 1_700_000_000)})) == [old]
    # no query: the latest memories matching where
    latest = mem.recall("", k=2, where={"user": "bob"})
    assert docnos(latest) == [made[4], made[2]] and latest.filter == "(>> :time: user:bob)"
    assert mem.history(0) == []


def test_metadata_errors(mem):
    with pytest.raises(AnnodbError, match="reserved"):
        mem.remember("x", text="y")
    with pytest.raises(AnnodbError, match="not a finite number"):
        mem.remember("x", score=float("nan"))
    with pytest.raises(AnnodbError, match="is a list: a key holds one value"):
        mem.remember("x", tags=["a", "b"])
    with pytest.raises(AnnodbError, match="metadata key"):
        mem.remember("x", **{"two words": "y"})
    with pytest.raises(TypeError):
        mem.remember(None)
    assert mem.history() == []                       # nothing half-written


def test_a_database_made_again_at_the_same_path_shows_its_own_labels(tmp_path):
    """A memory deleted with its folder and made again at the same path in one process
    (its committed states counting anew) shows the numeric labels it carries, not what
    the first database's names said at the same state."""
    path = tmp_path / "m.db"
    with annodb.Memory(path) as first:
        first.remember("one", docno="a")
        first.remember("two", docno="b")
        assert "priority" not in first.get("b").metadata
    shutil.rmtree(path)
    with annodb.Memory(path) as again:
        again.remember("one", docno="a")
        again.annotate("a", "priority", 3)
        assert again.get("a").metadata["priority"] == 3


def test_memory_on_a_database_with_other_documents(tmp_path):
    """Memory composes the ordinary API: documents added by db.write() are recallable."""
    path = tmp_path / "mixed.db"
    with annodb.open(path) as db, db.write() as w:
        w.add({"id": "doc1", "title": "Coffee", "body": "coffee growing regions", "year": 1999})
    with annodb.Memory(path) as mem:
        m = mem.remember("coffee with alice on friday", user="alice")
        assert sorted(docnos(mem.recall("coffee"))) == sorted(["doc1", m])
        assert docnos(mem.recall("coffee", where={"year": (">", 1990)})) == ["doc1"]
        assert mem.get("doc1").metadata == {"year": 1999}
        assert docnos(mem.history()) == [m]          # history lists memories (with :time:)


AGENT = textwrap.dedent("""
    import sys
    import annodb
    path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mem = annodb.Memory(path)
    for i in range(n):
        docno = mem.remember(f"agent {name} observation {i} about topic{i % 4}",
                             agent=name, step=i)
        print(docno, flush=True)
        mine = mem.recall("observation", k=5, where={"agent": name})
        assert mine and all(e.metadata["agent"] == name for e in mine), mine
        assert len(mem.recall(f"(^ observation topic{i % 4})", k=3)) >= 1
        if i % 5 == 4:
            mem.annotate(docno, "checked", i)
            assert mem.history(1, where={"agent": name})[0].docno == docno
    mem.close()
""")


def test_several_processes_share_one_memory(tmp_path):
    path = str(tmp_path / "shared.db")
    with annodb.Memory(path) as mem:
        first = mem.remember("the shared memory was created", agent="test")
    n = 25
    agents = [subprocess.Popen([sys.executable, "-c", AGENT, path, name, str(n)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT) for name in ("a", "b")]
    cli_runs = 0
    while any(p.poll() is None for p in agents) or cli_runs < 2:
        done = subprocess.run([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()",
                               "query", "--db", path, "--json", "-k", "3",
                               "(^ observation agent)"],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr
        cli_runs += 1
    made = {}
    for name, p in zip(("a", "b"), agents):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        made[name] = out.split()
        assert len(made[name]) == n
    everything = [first] + made["a"] + made["b"]
    assert len(set(everything)) == len(everything)
    with annodb.Memory(path) as mem:
        for name in ("a", "b"):
            got = mem.recall("observation", k=100, where={"agent": name})
            assert sorted(docnos(got)) == sorted(made[name])
            assert sorted(e.metadata["step"] for e in got) == list(range(n))
        assert sorted(docnos(mem.history(1000))) == sorted(everything)
        assert len(mem.recall("", k=100, where={"checked": (">=", 0)})) == 2 * (n // 5)
    from annodb.check import check
    with annodb.open(path) as db:
        assert check(db) == []


def _server_params(path):
    """The MCP server as a client starts it; with this environment (the mcp client passes
    a server only a few variables unless told), so that it imports annodb from this
    checkout, as every process of the tests does (conftest.py), not the installed copy."""
    from mcp import StdioServerParameters
    env = dict(os.environ)
    if os.path.exists(ANNODB):
        return StdioServerParameters(command=ANNODB, args=["mcp", "--db", path], cwd=ROOT,
                                     env=env)
    return StdioServerParameters(command=sys.executable, cwd=ROOT, env=env, args=[
        "-c", "from annodb_cli.main import annodb; annodb()", "mcp", "--db", path])


def test_mcp_server_with_the_mcp_client(tmp_path):
    from mcp import Client

    path = str(tmp_path / "mcp.db")

    async def session():
        async with Client(_server_params(path)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"search", "read_document", "remember", "annotate", "forget",
                                  "list"}
            assert "where" in tools["search"].input_schema["properties"]

            async def call(name, **args):
                result = await client.call_tool(name, args)
                assert not result.is_error, result.content
                return result.structured_content

            a = (await call("remember", text="Alice is allergic to peanuts",
                            metadata={"user": "alice", "importance": 5}))["docno"]
            b = (await call("remember", text="Bob is allergic to cats",
                            metadata={"user": "bob"}))["docno"]
            found = await call("search", query="allergic", k=5, where={"user": "alice"})
            assert [r["docno"] for r in found["results"]] == [a]
            assert found["results"][0]["snippet"] == "Alice is <cover>allergic</cover> to peanuts"
            found = await call("search", query='(^ allergic (+ cats peanuts))',
                               where={"importance": [">=", 3]})
            assert [r["docno"] for r in found["results"]] == [a]
            assert found["filter"] == "(>> : (>= :importance: 3))"
            c = (await call("remember", text="Carol: call bob@example.com at 10:30"))["docno"]
            for query in ("bob@example.com", "10:30", "Carol:"):    # free text is text
                found = await call("search", query=query)
                assert found["results"][0]["docno"] == c, query
            found = await call("search", query="(^ call 10:30)")
            assert [r["docno"] for r in found["results"]] == [c]
            assert "searched its words" in found["warnings"][0]
            await call("forget", docno=c)
            found = await call("search")               # no query: the latest first
            assert [r["docno"] for r in found["results"]] == [b, a]
            doc = await call("read_document", docno=a)
            assert doc["text"] == "Alice is allergic to peanuts"
            assert doc["metadata"]["user"] == "alice"
            assert (await call("annotate", docno=b, label="seen"))["value"] == 0   # default
            await call("annotate", docno=b, label="useful", value=2)
            found = await call("search", query="allergic", where={"useful": [">=", 2]})
            assert [r["docno"] for r in found["results"]] == [b]
            assert (await call("forget", docno=a)) == {"docno": a, "forgotten": True}
            missing = await client.call_tool("read_document", {"docno": a})
            assert missing.is_error and "no document" in missing.content[0].text
            bad = await client.call_tool("search", {"query": "(^ a b))"})
            assert bad.is_error and "offset" in bad.content[0].text

    anyio.run(session)
    with annodb.Memory(path) as mem:                 # what the server committed is there
        (left,) = mem.history()
        assert left.text == "Bob is allergic to cats" and left.metadata["useful"] == 2


FACTS = ["Alice is allergic to peanuts", "Alice's favourite colour is green",
         "The meeting with the design team is on Tuesday",
         "Bob's flight to Berlin leaves at 9am", "The wifi password is hunter2",
         "Carol prefers tea over coffee", "It is what it is, said the team lead to the team",
         "The cat is on the mat and it is happy, is it not?"]
QUESTIONS = [("what is Alice allergic to?", 0), ("when does Bob's flight leave?", 3),
             ("what's the wifi password?", 4), ("when is the meeting with the design team?", 2),
             ("does Carol like coffee or tea?", 5), ("what colour does Alice like?", 1)]


@pytest.mark.parametrize("rank", [None, "bm25", "fused", "ssr", "bm25+rm3"])
def test_recall_answers_natural_language_questions(mem, rank):
    ids = [mem.remember(fact, user="u") for fact in FACTS]
    for question, i in QUESTIONS:
        found = mem.recall(question, k=1, rank=rank, where={"user": "u"})
        assert [e.docno for e in found] == [ids[i]], (question, rank)
    with pytest.raises(annodb.RankingError, match="choose one of"):
        mem.recall("alice", rank="nope")


def test_mcp_search_takes_a_rank(tmp_path):
    from mcp import Client

    path = str(tmp_path / "mcp.db")
    with annodb.Memory(path) as m:
        ids = [m.remember(fact) for fact in FACTS]

    async def session():
        async with Client(_server_params(path)) as client:
            for rank in ("bm25", "fused", "ssr", "bm25+rm3"):
                result = await client.call_tool("search", {"query": "what is Alice allergic "
                                                           "to?", "k": 1, "rank": rank})
                assert not result.is_error, result.content
                assert [r["docno"] for r in result.structured_content["results"]] == [ids[0]]
            bad = await client.call_tool("search", {"query": "alice", "rank": "bm2"})
            assert bad.is_error and "choose one of ssr, bm25" in bad.content[0].text

    anyio.run(session)


def test_a_filter_no_memory_can_satisfy_says_why_it_is_empty(mem):
    """An empty recall whose `where` names a key no memory has, or a string no memory has
    for its key, says so in warnings (a typo would otherwise filter everything out in
    silence); conditions a missing key satisfies (!=, exists False) warn of nothing."""
    mem.remember("Alice takes her tea green", user="alice", importance=2)
    r = mem.recall("tea", where={"usr": "alice"})
    assert list(r) == [] and r.warnings == ["no memory has the key 'usr'"]
    r = mem.recall("tea", where={"user": "alicee"})
    assert list(r) == [] and r.warnings == ["no memory has user = 'alicee'"]
    r = mem.recall("tea", where={"user": ["bob"], "level": (">", 3)})
    assert r.warnings == ["no memory has the key 'level'"]
    r = mem.recall("tea", where={"importance": (">", 5), "mood": ("exists", False)})
    assert list(r) == [] and r.warnings == []          # the keys are there: just no match
    assert docnos(mem.recall("tea", where={"level": ("!=", 3)})) != []


def test_an_unknown_operator_in_where_is_refused_not_read_as_values(mem):
    """A pair whose first element is an operator-like symbol that is not one of where's
    operators is an error; before, ("~", 3) read as "any of '~' and 3" and matched
    nothing in silence."""
    mem.remember("a note", n=3)
    for op in ("~", "==", "=>", "<>"):
        with pytest.raises(annodb.AnnodbError, match="unknown operator"):
            mem.recall("note", where={"n": (op, 3)})
    assert len(mem.recall("note", where={"n": ("=", 3)})) == 1


def test_times_may_be_iso_8601_strings_as_over_mcp(mem):
    """remember's time=, as_of= and where's comparisons on time take an ISO 8601 string
    (no zone: UTC), as MCP's tools do; a string that is no time is an error naming it."""
    old = mem.remember("Alice lives in Paris", key="alice/city", time="2025-03-01")
    new = mem.remember("Alice lives in Berlin", key="alice/city", time="2025-03-10T09:00:00Z")
    assert mem.get(old).metadata["time"] == datetime.datetime(
        2025, 3, 1, tzinfo=datetime.timezone.utc).timestamp()
    assert docnos(mem.recall("alice lives", as_of="2025-03-05")) == [old]
    assert docnos(mem.recall("alice lives")) == [new]
    assert docnos(mem.recall("alice", where={"time": (">=", "2025-03-02")},
                             include_superseded=True)) == [new]
    with pytest.raises(annodb.AnnodbError, match="'yesterday' is neither"):
        mem.remember("x", time="yesterday")


def test_metadata_values_of_the_wrong_kind_are_named_in_the_error(mem):
    """remember(text=...) works as a keyword; a list, None or a dict as a metadata value is
    refused with what to do instead, not "is not a finite number"."""
    assert mem.get(mem.remember(text="by keyword")).text == "by keyword"
    for value, said in ((["a", "b"], "is a list: a key holds one value"),
                        (None, "is None: leave the key out"),
                        ({"a": 1}, "is a dict: a key holds a string")):
        with pytest.raises(annodb.AnnodbError, match=said):
            mem.remember("x", tags=value)
