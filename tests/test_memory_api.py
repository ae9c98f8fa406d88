"""What a memory layer is expected to have, on real LMDB files: batch writes in one
transaction, paging by cursor, read-only opening, the asyncio twin (the event loop runs
during a slow recall), and the MCP server's tools driven by the real `mcp` client."""

import asyncio
import threading

import anyio
import pytest

import annodb
import annodb.memory
from annodb import recall
from annodb.errors import AnnodbError, StorageError
from annodb.gcl import Evaluator

from test_memory import _server_params


def test_remember_many_in_one_transaction(tmp_path):
    with annodb.Memory(tmp_path / "m.db") as mem:
        made = mem.remember_many(["plain text", {"text": "with metadata", "user": "alice"},
                                  {"text": "v1", "key": "k"}, {"text": "v2", "key": "k"},
                                  {"text": "chosen", "docno": "mine", "level": 2}])
        assert made[-1] == "mine" and len(set(made)) == 5
        assert [int(d[1:]) for d in made[:4]] == sorted(int(d[1:]) for d in made[:4])
        assert mem.get(made[1]).metadata["user"] == "alice"
        found = [e.text for e in mem.recall("v1 v2", k=5)]   # v2 superseded v1 (its
        assert found[0] == "v2" and "v1" not in found       # neighbours may follow: lent)
        assert mem.get(made[2]).metadata["superseded"] == mem.get(made[3]).metadata["time"]
        # all or none: a bad item anywhere writes nothing
        for bad in ({"text": "x", "judgment": "t1"}, {"text": 3}, {"text": "x", "n": [1]},
                    7, {"text": "x", "supersedes": "nope"}, {"text": "x", "key": ""}):
            with pytest.raises((AnnodbError, TypeError)):
                mem.remember_many(["fine", bad])
        assert len(mem.history(100, include_superseded=True)) == 5
        assert mem.remember_many([]) == []


def test_a_refused_item_of_remember_many_is_named_by_its_position(tmp_path):
    """A bad item in a batch names its position (nothing is written), and remember's own
    error stays without one."""
    with annodb.Memory(tmp_path / "m.db") as mem:
        with pytest.raises(AnnodbError, match=r"^memory 2 of remember_many .*'user'"):
            mem.remember_many(["a", "b", {"text": "c", "user": ["x"]}])
        with pytest.raises(TypeError, match=r"^memory 1 of remember_many"):
            mem.remember_many(["a", 7])
        with pytest.raises(AnnodbError, match=r"^metadata 'user'"):
            mem.remember("c", user=["x"])
        assert mem.history(10) == []


def test_a_negative_count_is_an_error_not_an_empty_page(tmp_path):
    """recall's k and history's n must be whole numbers >= 0: -1 (or 2.5) is refused
    rather than read as "nothing"; 0 gives nothing."""
    with annodb.Memory(tmp_path / "m.db") as mem:
        mem.remember("a fact about zebras")
        assert mem.recall("zebras", k=0) == [] and mem.history(0) == []
        for bad in (-1, 2.5, True):
            with pytest.raises(AnnodbError, match="whole number"):
                mem.recall("zebras", k=bad)
            with pytest.raises(AnnodbError, match="whole number"):
                mem.history(bad)


def test_remember_many_refuses_a_bad_supersedes_before_writing(tmp_path):
    with annodb.Memory(tmp_path / "m.db") as mem:
        with pytest.raises(annodb.NotFoundError):
            mem.remember_many(["fine", {"text": "x", "supersedes": "nope"}])
        assert mem.history(10) == []


def test_history_pages_by_cursor(tmp_path):
    with annodb.Memory(tmp_path / "m.db") as mem:
        made = mem.remember_many([{"text": f"event {i}", "time": 1000 + i // 2,
                                   "user": "alice" if i % 3 else "bob"} for i in range(11)])
        newest_first = sorted(made, key=lambda d: (-(1000 + made.index(d) // 2),
                                                   -int(d[1:])))
        pages, cursor = [], None
        while True:
            page = mem.history(4, before=cursor)
            pages.append([e.docno for e in page])
            cursor = page.cursor
            if cursor is None:
                break
        assert [len(p) for p in pages] == [4, 4, 3]
        assert sum(pages, []) == newest_first
        # a memory remembered meanwhile, newer than the cursor, does not shift the pages
        first = mem.history(4)
        mem.remember("late news", time=5000)
        assert [e.docno for e in mem.history(4, before=first.cursor)] == pages[1]
        alice = mem.history(3, where={"user": "alice"})
        rest = mem.history(100, where={"user": "alice"}, before=alice.cursor)
        assert len(alice) + len(rest) == 7 and rest.cursor is None
        assert mem.history(100).cursor is None
        with pytest.raises(AnnodbError, match="bad cursor"):
            mem.history(4, before="yesterday")


def test_read_only_memory(tmp_path):
    path = tmp_path / "m.db"
    with pytest.raises(StorageError, match="no annodb database"):
        annodb.Memory(path, readonly=True)
    assert not path.exists()
    with annodb.Memory(path) as mem:
        m = mem.remember("Alice lives in Paris", user="alice")
    with annodb.Memory(path, readonly=True) as mem:
        assert [e.docno for e in mem.recall("Paris")] == [m]
        assert mem.get(m).text == "Alice lives in Paris"
        for write in (lambda: mem.remember("x"), lambda: mem.forget(m),
                      lambda: mem.annotate(m, "useful", 1),
                      lambda: mem.remember_many(["x"])):
            with pytest.raises(StorageError, match="read-only"):
                write()
        assert len(mem.history()) == 1


def test_async_memory_does_not_block_the_event_loop(tmp_path, monkeypatch):
    """A recall that cannot finish until the event loop has ticked five times: if it ran
    on the loop, the ticker could never tick and it would fail (after 30 s)."""
    ticks = []
    ticked = threading.Event()
    rank = annodb.memory.rank_memories

    def slow_rank(*args, **kwargs):
        if not ticked.wait(30):
            raise AssertionError("the event loop did not run during the recall")
        return rank(*args, **kwargs)

    monkeypatch.setattr(annodb.memory, "rank_memories", slow_rank)

    async def main():
        async with annodb.AsyncMemory(tmp_path / "m.db") as mem:
            a = await mem.remember("Alice lives in Paris", key="alice/city", time=1000)
            await mem.remember_many([{"text": "Alice lives in Berlin", "key": "alice/city",
                                      "time": 2000}])

            async def ticker():
                while len(ticks) < 5:
                    await asyncio.sleep(0)
                    ticks.append(len(ticks))
                ticked.set()

            found, _ = await asyncio.gather(mem.recall("where does alice live"), ticker())
            assert [e.text for e in found] == ["Alice lives in Berlin"]
            assert [e.text for e in await mem.recall("alice", as_of=1500)] == \
                ["Alice lives in Paris"]
            assert (await mem.get(a)).metadata["superseded"] == 2000
            page = await mem.history(1, include_superseded=True)
            assert page.cursor is not None
            await mem.annotate(a, "useful", 2)
            assert await mem.forget(where={"useful": 2}) == [a]
            assert "superseded" in await mem.filter({"user": "x"})

    asyncio.run(main())
    assert len(ticks) == 5


def test_mcp_tools_update_by_key_list_pages_and_forget_by_filter(tmp_path):
    from mcp import Client

    path = str(tmp_path / "mcp.db")

    async def session():
        async with Client(_server_params(path)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"key", "supersedes", "metadata"} <= set(
                tools["remember"].input_schema["properties"])
            assert {"docno", "docnos", "where"} <= set(tools["forget"].input_schema["properties"])
            assert {"n", "where", "before"} <= set(tools["list"].input_schema["properties"])
            assert {"as_of", "include_superseded", "recency"} <= set(
                tools["search"].input_schema["properties"])

            async def call(name, **args):
                result = await client.call_tool(name, args)
                assert not result.is_error, result.content
                return result.structured_content

            paris = (await call("remember", text="Alice lives in Paris", key="alice/city",
                                metadata={"user": "alice", "time": "2025-01-01T00:00:00"}))
            berlin = (await call("remember", text="Alice lives in Berlin", key="alice/city",
                                 metadata={"user": "alice", "time": "2025-03-01T00:00:00Z"}))
            found = await call("search", query="where does Alice live", k=1)
            assert [r["docno"] for r in found["results"]] == [berlin["docno"]]
            found = await call("search", query="where does Alice live", k=1,
                               as_of="2025-02-01T00:00:00+00:00")
            assert [r["docno"] for r in found["results"]] == [paris["docno"]]
            assert found["results"][0]["metadata"]["superseded"] == 1740787200
            found = await call("search", query="Alice", k=5, include_superseded=True)
            assert len(found["results"]) == 2
            assert (await call("search", query="allergies"))["warnings"] == \
                ["no word of 'allergies' is in the memory"]
            for i in range(5):
                await call("remember", text=f"bob note {i}", metadata={"user": "bob"})
            page = await call("list", n=3, where={"user": "bob"})
            rest = await call("list", n=3, where={"user": "bob"}, before=page["cursor"])
            assert len(page["results"]) == 3 and len(rest["results"]) == 2
            assert rest["cursor"] is None
            assert [r["snippet"] for r in rest["results"]] == ["bob note 1", "bob note 0"]
            gone = await call("forget", where={"user": "alice"})
            assert sorted(gone["forgotten"]) == sorted([paris["docno"], berlin["docno"]])
            some = [r["docno"] for r in page["results"][:2]]
            assert (await call("forget", docnos=some + ["nope"]))["forgotten"] == some
            assert len((await call("list"))["results"]) == 3
            both = await client.call_tool("forget", {"docno": "x", "where": {"user": "bob"}})
            assert both.is_error and "one of" in both.content[0].text
            empty = await client.call_tool("forget", {"where": {}})
            assert empty.is_error and "everything" in empty.content[0].text
            bad = await client.call_tool("search", {"query": "x", "as_of": "last week"})
            assert bad.is_error and "ISO 8601" in bad.content[0].text
            for args in ({"as_of": True}, {"recency": True}):   # (not 1 s: 1970, 1 s)
                bad = await client.call_tool("search", {"query": "x", **args})
                assert bad.is_error, (args, bad.content)
            for tool in ("search", "list"):
                assert (await client.call_tool(tool, {"as_of": 1741000000})).is_error is False

    anyio.run(session)


def _old_memory(path, memories):
    """A memory as annodb wrote it before recall derived anything at remember time: each
    record with its exact labels only (no label words, no event dates)."""
    from annodb.memory import TEXT, label
    with annodb.Memory(path) as mem, mem.db.write() as w:
        for m in memories:
            record = {k: v for k, v in m.items() if k not in ("text", "docno")}
            added = w.add({TEXT: m["text"], **record}, docno=m["docno"], text_fields=[TEXT])
            for key, value in record.items():
                if isinstance(value, str):
                    w.annotate(label(key, value), added.start, added.end)


def test_reindex_gives_an_old_memory_what_remember_derives(tmp_path):
    """Memories written without the label words and event dates that remember derives
    recall differently; after reindex() (one transaction) they recall exactly as the same
    memories remembered today, scores included, and a second reindex changes nothing."""
    day = 1_682_985_600.0                          # 2 May 2023, 00:00 UTC
    memories = [
        {"text": "I watched a film about whales last night", "docno": "a", "speaker": "Ann",
         "time": day + 3600},
        {"text": "Which one? The one with the blue whale?", "docno": "b", "speaker": "Ben",
         "time": day + 3660},
        {"text": "Ann said the whale film was long", "docno": "c", "speaker": "Cy",
         "time": day + 90000},
        {"text": "Ben watched a film too", "docno": "d", "speaker": "Ann", "time": day + 90060},
    ]
    questions = ["What did Ann watch on 1 May, 2023?", "What film did Ann watch?",
                 "whale film", "What did Ben say?"]

    def recalls(mem):
        return [[(e.docno, e.score) for e in mem.recall(q, k=4)] for q in questions]

    with annodb.Memory(tmp_path / "new.db") as mem:
        mem.remember_many(memories)
        want = recalls(mem)
        assert want[0][0][0] == "a"               # watched "last night": on 1 May
        assert mem.reindex() == 4 and recalls(mem) == want
    _old_memory(tmp_path / "old.db", memories)
    with annodb.Memory(tmp_path / "old.db") as mem:
        assert recalls(mem) != want                # (the test can tell them apart)
        assert mem.reindex() == 4
        assert recalls(mem) == want
        with mem.db.read() as r:                   # (b asks: its share is written too)
            asked = Evaluator(r).lists.whole(recall.ASKING)
            assert asked.values.tolist() == [1.0]
            assert asked.starts.tolist() == [r.document("b").start]
        assert mem.reindex() == 4 and recalls(mem) == want
    with annodb.Memory(tmp_path / "old.db", readonly=True) as mem:
        with pytest.raises(AnnodbError):
            mem.reindex()
