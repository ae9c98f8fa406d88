"""What an agent developer hands Memory besides plain strings and numbers, on real LMDB
files: numpy scalars as metadata, times and filters, odd texts, odd values where a time or
a condition goes, and the errors each gets instead of a traceback or a silent empty
result."""

import asyncio
import datetime as dt
import threading

import numpy as np
import pytest

import annodb
from annodb.errors import AnnodbError


@pytest.fixture
def mem(tmp_path):
    with annodb.Memory(tmp_path / "memory.db") as m:
        yield m


def test_numpy_scalars_are_metadata_times_and_conditions_like_python_ones(mem):
    """np.int64, np.float32, np.bool_ and np.str_ (what a pandas or numpy pipeline hands
    over) are stored as the Python number, bool or string they hold, and filter the same;
    a numpy array in `where` is any of its values."""
    a = mem.remember("score from numpy", user=np.str_("alice"), n=np.int64(3),
                     w=np.float32(2.5), flag=np.bool_(True), time=np.int64(1_000_000))
    b = mem.remember("score from python", user="bob", n=4, w=0.5, flag=False, time=2_000_000)
    got = mem.get(a).metadata
    assert got == {"user": "alice", "n": 3, "w": 2.5, "flag": True, "time": 1_000_000}
    assert [type(got[k]) for k in ("user", "n", "w", "flag")] == [str, int, float, bool]

    def where(**w):
        return [e.docno for e in mem.recall("score", k=5, where=w)]

    assert where(n=np.int64(3)) == [a]
    assert where(user=np.str_("alice")) == [a]
    assert where(flag=np.bool_(True)) == [a] and where(flag=True) == [a]
    assert where(w=(">", np.float64(1))) == [a]
    assert where(n=np.array([3, 4])) == [b, a]
    assert where(n=("not in", np.array([4]))) == [a]
    assert [e.docno for e in mem.recall("score", as_of=np.float64(1_500_000))] == [a]
    mem.annotate(b, "used", np.int64(2))
    assert mem.get(b).metadata["used"] == 2


def test_a_bool_is_not_a_time_and_a_huge_integer_is_refused_clearly(mem):
    """time=True (or as_of=True, as JSON's `true` reaches it from MCP) is refused rather
    than read as one second after 1970, and an integer beyond a float's range is refused
    with one line naming the key, not an OverflowError from deep inside."""
    for bad in (True, False, np.bool_(True)):
        with pytest.raises(AnnodbError, match="is not a time"):
            mem.remember("when?", time=bad)
        with pytest.raises(AnnodbError, match="is not a time"):
            mem.recall("when", as_of=bad)
    with pytest.raises(AnnodbError, match=r"^metadata 'big': an integer of 401 digits"):
        mem.remember("huge", big=10 ** 400)
    with pytest.raises(AnnodbError, match=r"^metadata 'big': an integer of 401 digits"):
        mem.recall("huge", where={"big": (">", -10 ** 400)})
    assert mem.history(5) == []


def test_an_integer_beyond_64_bits_comes_back_as_the_number_it_filters_as(mem):
    """An int past 64 bits is kept as the float its value is (what where compares), not
    returned as a string of digits the memory's metadata never had."""
    d = mem.remember("large but fine", big=2 ** 70, small=-2 ** 63)
    got = mem.get(d).metadata
    assert got["big"] == float(2 ** 70) and isinstance(got["big"], float)
    assert got["small"] == -2 ** 63 and isinstance(got["small"], int)
    assert [e.docno for e in mem.recall("large", where={"big": 2 ** 70})] == [d]


def test_an_empty_or_blank_text_is_refused(mem):
    """remember("") or whitespace alone is an error (no recall can find such a memory; it
    would only fill history), in a batch too, where nothing is written."""
    for blank in ("", "   ", "\n\t "):
        with pytest.raises(AnnodbError, match="is empty: no recall would find it"):
            mem.remember(blank, user="alice")
        with pytest.raises(AnnodbError, match=r"^memory 1 of remember_many .* is empty"):
            mem.remember_many(["fine", {"text": blank, "user": "alice"}])
    assert mem.history(5) == []
    assert mem.get(mem.remember(" x ")).text == " x "


def test_an_empty_result_says_which_condition_no_memory_can_meet(mem):
    """A filter that matches nothing is never a silent empty result: recall with no query
    (the latest) and history's first page say, as recall with a query does, which key
    no memory has, and a number asked of a key holding only strings (or a string of one
    holding only numbers) is named as such, not left to look like "nothing yet"."""
    mem.remember("Alice likes tea", user="alice", importance=3)
    assert mem.recall("", where={"user": "alicee"}).warnings == \
        ["no memory has user = 'alicee'"]
    assert mem.recall(None, where={"usr": "alice"}).warnings == ["no memory has the key 'usr'"]
    page = mem.history(5, where={"user": "alicee"})
    assert page == [] and page.warnings == ["no memory has user = 'alicee'"]
    for query in ("tea", ""):
        assert mem.recall(query, where={"user": (">=", 3)}).warnings == \
            ["no memory has a number for 'user' (its values are strings: compare them "
             "with = or !=)"]
        assert mem.recall(query, where={"user": 3}).warnings == \
            ["no memory has a number for 'user' (its values are strings: compare them "
             "with = or !=)"]
        assert mem.recall(query, where={"importance": "3"}).warnings == \
            ["no memory has importance = '3' (its values are numbers: give one, not a "
             "string)"]
    assert mem.recall("", where={"user": "alice"}).warnings == []
    assert mem.history(5, where={"user": "alice"}).warnings == []


def test_a_time_in_where_is_a_time_whatever_the_condition(mem):
    """An ISO 8601 string (any offset) or a datetime in any zone names the same instant in
    where={"time": ...} whether it is compared, equalled or listed, as remember's time=
    takes it; before, a plain or listed string was looked up as a label and matched
    nothing."""
    kolkata = dt.timezone(dt.timedelta(hours=5, minutes=30))
    a = mem.remember("a meeting note", time="2025-03-01T12:00:00+05:30")
    b = mem.remember("a meeting note", time=dt.datetime(2025, 3, 1, 9, 0))      # naive: UTC
    assert mem.get(a).metadata["time"] == dt.datetime(2025, 3, 1, 6, 30,
                                                       tzinfo=dt.timezone.utc).timestamp()

    def where(want):
        return [e.docno for e in mem.recall("meeting", where={"time": want})]

    assert where("2025-03-01T06:30:00Z") == [a]
    assert where(("=", "2025-03-01T12:00:00+05:30")) == [a]
    assert where(dt.datetime(2025, 3, 1, 12, 0, tzinfo=kolkata)) == [a]
    assert where(["2025-03-01T09:00:00", "2025-03-01T06:30:00+00:00"]) == [b, a]
    assert where(("in", ("2025-03-01T09:00:00Z",))) == [b]
    assert where(("not in", ["2025-03-01T09:00:00Z"])) == [a]
    assert where(("!=", "2025-03-01T09:00:00Z")) == [a]
    assert where(("<", dt.datetime(2025, 3, 1, 14, 30, tzinfo=kolkata))) == [a]
    with pytest.raises(AnnodbError, match="ISO 8601"):
        where("yesterday")
    assert mem.recall("meeting", where={"time": "2025-03-01T00:00:00Z"}).warnings == []


def test_an_async_memory_finishes_the_calls_before_close_and_refuses_those_after(tmp_path):
    """Calls awaited before close() run to their end (their memories are committed);
    one made after it, or a call left pending when `async with` ends, gets a one-line
    StorageError saying the memory is closed (not "cannot schedule new futures after
    shutdown"), and closing twice is harmless."""
    from annodb.errors import StorageError

    async def main():
        mem = annodb.AsyncMemory(tmp_path / "m.db")
        pending = [asyncio.ensure_future(mem.remember(f"note {i} about tea")) for i in range(5)]
        await asyncio.sleep(0)                 # (submitted to the worker before close)
        await mem.close()
        made = await asyncio.gather(*pending)
        with pytest.raises(StorageError, match="this AsyncMemory is closed"):
            await mem.recall("tea")
        await mem.close()
        async with annodb.AsyncMemory(tmp_path / "m.db") as again:
            assert len(await again.history(10)) == 5
            late = asyncio.ensure_future(again.recall("tea"))
        with pytest.raises(StorageError, match="closed"):
            await late
        return made

    assert len(set(asyncio.run(main()))) == 5


def test_a_cancelled_async_call_that_has_started_runs_to_its_end(tmp_path, monkeypatch):
    """Cancelling the task awaiting a remember that the worker thread is already running
    cancels the wait, not the write: it is committed, and the next call runs after it
    (a thread cannot be stopped halfway through a transaction)."""
    started, release = threading.Event(), threading.Event()
    write = annodb.Memory._write

    def held_write(self, w, items):
        started.set()
        release.wait(30)
        return write(self, w, items)

    monkeypatch.setattr(annodb.Memory, "_write", held_write)

    async def main():
        async with annodb.AsyncMemory(tmp_path / "m.db") as mem:
            task = asyncio.ensure_future(mem.remember("the cancelled one about tea"))
            while not started.is_set():
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            after = asyncio.ensure_future(mem.recall("tea"))
            release.set()
            return [e.text for e in await after]

    assert asyncio.run(main()) == ["the cancelled one about tea"]


def test_async_memory_has_every_public_method_of_memory():
    """AsyncMemory is Memory's twin: each public method of Memory (reindex included) is a
    coroutine of AsyncMemory with its documentation."""
    import inspect
    names = [n for n, f in vars(annodb.Memory).items() if inspect.isfunction(f)
             and not n.startswith("_")]
    assert "reindex" in names
    for name in names:
        method = getattr(annodb.AsyncMemory, name)
        assert inspect.iscoroutinefunction(method), name
        assert name == "close" or method.__doc__ == getattr(annodb.Memory, name).__doc__


def test_a_docno_or_query_of_another_type_is_a_one_line_error(mem):
    """remember(docno=3) stores the docno "3", so get, annotate and forget find it by 3
    too; None, a float or bytes where a docno goes, and a query that is not a string, are
    a TypeError naming what to give, not an AttributeError from inside the storage."""
    assert mem.remember("a fact about owls", docno=3) == "3"
    assert mem.get(3).text == "a fact about owls" and mem.get(np.int64(3)).docno == "3"
    mem.annotate(3, "used", 1)
    assert mem.get("3").metadata["used"] == 1
    for bad in (None, 3.0, b"3", True):
        with pytest.raises(TypeError, match="a docno is a string"):
            mem.get(bad)
    with pytest.raises(TypeError, match="a docno is a string"):
        mem.annotate(None, "used", 1)
    with pytest.raises(TypeError, match="a docno is a string"):
        mem.forget(["3", None])
    for bad in (3, ["owls"], b"owls"):
        with pytest.raises(TypeError, match="recall.. takes the query as a string"):
            mem.recall(bad)
    assert mem.forget(np.array(["nope"])) == []
    assert mem.forget(d for d in ["3"]) == ["3"] and mem.forget(3) is False


def test_remember_many_of_one_string_or_dict_is_refused_not_split(mem):
    """remember_many("a text") is refused: a string is iterable, and was remembered as a
    memory per character; a single dict was remembered as a memory per key name."""
    for one in ("Alice likes tea", {"text": "Alice likes tea", "user": "alice"}):
        with pytest.raises(TypeError, match="takes a list of memories"):
            mem.remember_many(one)

    async def twin():
        async with annodb.AsyncMemory(mem.db.path) as other:
            with pytest.raises(TypeError, match="takes a list of memories"):
                await other.remember_many("Alice likes tea")
    mem.close()
    asyncio.run(twin())
    with annodb.Memory(mem.db.path) as again:
        assert again.history(50) == []


def test_mcp_tools_refuse_odd_inputs_with_one_line_and_explain_empty_pages(tmp_path):
    """Over the real MCP client and server: an empty text, `true` as a time and a
    400-digit number are tool errors of one line (not an 'unexpected exception' or a
    memory written at 1970); emoji, NUL and text that looks like GCL are stored as they
    are; a list page that a filter leaves empty says which condition nothing meets."""
    import anyio
    from mcp import Client

    from test_memory import _server_params

    async def session():
        async with Client(_server_params(str(tmp_path / "mcp.db"))) as client:
            async def error(name, **args):
                result = await client.call_tool(name, args)
                assert result.is_error
                return result.content[0].text

            async def call(name, **args):
                result = await client.call_tool(name, args)
                assert not result.is_error, result.content
                return result.structured_content

            assert "is empty" in await error("remember", text="  ")
            assert "is not a time" in await error("remember", text="x",
                                                  metadata={"time": True})
            big = await error("remember", text="x", metadata={"big": 10 ** 400})
            assert "an integer of 401 digits" in big and "\n" not in big
            odd = "pizza 🍕 \x00 שלום (^ a b)"
            docno = (await call("remember", text=odd, metadata={"user": "alice"}))["docno"]
            assert (await call("read_document", docno=docno))["text"] == odd
            found = await call("search", query="🍕", where={"user": "alice"})
            assert [r["docno"] for r in found["results"]] == [docno]
            page = await call("list", where={"user": "alicee"})
            assert page["results"] == [] and page["warnings"] == \
                ["no memory has user = 'alicee'"]

    anyio.run(session)


def test_an_operator_with_other_than_one_value_is_an_error(mem):
    """("in", "a", "b"), (">=", 1, 5) or ("exists",) start with an operator but are not a
    pair: they were read as "any of" the listed strings, the operator one of them, and
    matched nothing in silence."""
    mem.remember("a note", user="alice", level=3)
    for bad in (("in", "alice", "bob"), [">=", 1, 5], ("exists",), ["not in", "a", "b"]):
        with pytest.raises(AnnodbError, match=r"takes one value, as a pair"):
            mem.recall("note", where={"user": bad})
    assert len(mem.recall("note", where={"user": ["alice", "bob", "carol"]})) == 1


def test_a_read_only_memory_where_there_is_none_says_how_one_is_made(tmp_path):
    """Memory(path, readonly=True) on a path holding no database says that Memory(path)
    creates one, not to run `annodb ingest` (a command for document collections), and
    creates nothing."""
    from annodb.errors import StorageError
    for path in (tmp_path / "none.db", tmp_path / "empty"):
        if path.name == "empty":
            path.mkdir()
        with pytest.raises(StorageError, match="no annodb database here to read .Memory.path. "
                                               "without readonly=True creates one"):
            annodb.Memory(path, readonly=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_gcl_query_that_finds_nothing_names_the_words_no_memory_holds(mem):
    """(^ alice allergy) finding nothing says that no memory holds 'allergy', as a free
    text question whose words are all absent says so; a GCL query whose words are all
    there but never together says nothing (nothing is wrong with its words)."""
    mem.remember("Alice is allergic to peanuts", user="alice")
    found = mem.recall("(^ alice allergy)")
    assert found == [] and found.warnings == \
        ["no memory holds the word 'allergy' (of the query '(^ alice allergy)')"]
    assert mem.recall('(+ "peanuts butter" zzz)').warnings == [
        "no memory holds the words 'butter', 'zzz' (of the query '(+ \"peanuts butter\" "
        "zzz)')"]
    assert mem.recall("(... peanuts alice)").warnings == []
    assert mem.recall("(^ alice allergic)", where={"user": "bob"}).warnings == \
        ["no memory has user = 'bob'"]


def test_a_cursor_history_never_returned_is_refused(mem):
    """A `before` that no page returned ('nan@3', 'inf@1', text) is an error, not an
    empty page that looks like the end of the history."""
    mem.remember("a note")
    for bad in ("nan@3", "inf@1", "-inf@0", "garbage", "3", "1.5@x"):
        with pytest.raises(AnnodbError, match="bad cursor"):
            mem.history(5, before=bad)


def test_asking_for_superseded_memories_without_including_them_says_so(mem):
    """where={"superseded": ...} without include_superseded=True can match nothing (only
    current memories are searched): the empty result says to include them."""
    mem.remember("Alice lives in Paris", key="alice/city", time=1000)
    mem.remember("Alice lives in Berlin", key="alice/city", time=2000)
    changed = {"superseded": ("exists", True)}
    for found in (mem.recall("Alice", where=changed), mem.recall("", where=changed),
                  mem.history(5, where=changed)):
        assert found == [] and found.warnings == [
            "where asks for superseded memories, and they are left out: give "
            "include_superseded=True"]
    assert [e.text for e in mem.recall("Alice", where=changed, include_superseded=True)] \
        == ["Alice lives in Paris"]


def test_annotating_a_number_over_a_string_key_of_the_memory_is_refused(mem):
    """annotate(d, "user", 1) on a memory whose user is "alice" set a number that get()
    never showed (the string stays its metadata) while where={"user": 1} matched it: it
    is refused; a number key is set as before, and replaces the remembered value."""
    d = mem.remember("Alice note", user="alice", level=2)
    with pytest.raises(AnnodbError, match="holds user = 'alice', a string"):
        mem.annotate(d, "user", 1)
    assert mem.recall("note", where={"user": 1}) == []
    mem.annotate(d, "level", 5)
    assert mem.get(d).metadata == {"user": "alice", "level": 5,
                                   "time": mem.get(d).metadata["time"]}
    assert mem.recall("note", where={"level": 2}) == []


def test_time_none_means_now_as_key_none_means_no_key(mem):
    """remember(text, time=None) (a handler passing on an event's missing time) is
    remembered now, as key=None and docno=None are the defaults, rather than refused as
    metadata None; a None for any other key is still refused."""
    import time
    before = time.time()
    d = mem.remember("a note without a time", time=None, key=None)
    assert before <= mem.get(d).metadata["time"] <= time.time()
    assert mem.remember_many([{"text": "another", "time": None}])
    with pytest.raises(AnnodbError, match="None is None: leave the key out"):
        mem.remember("x", user=None)


def test_text_labels_and_keys_match_however_an_accent_was_typed(mem):
    """"Zürich" typed as u and a combining diaeresis (NFD: macOS, some PDFs) and as one
    character (NFC) are one word, one label and one key: a memory remembered in one form
    is recalled, filtered and superseded in the other (stored composed, NFC)."""
    import unicodedata

    def nfd(text):
        return unicodedata.normalize("NFD", text)

    old = mem.remember(nfd("Renée lives in Zürich"), user=nfd("José"), key=nfd("renée/city"),
                       time=1000)
    assert [e.docno for e in mem.recall("Renée Zürich")] == [old]
    assert [e.docno for e in mem.recall("", where={"user": "José"})] == [old]
    assert mem.get(old).text == "Renée lives in Zürich"
    assert mem.get(old).metadata["user"] == "José"
    new = mem.remember("Renée lives in Genève", key="renée/city", user="José", time=2000)
    assert [e.docno for e in mem.recall(nfd("Renée lives"), where={"user": nfd("José")})] \
        == [new]
    assert mem.get(old).metadata["superseded"] == 2000


def test_a_numpy_datetime64_is_a_time(mem):
    """An np.datetime64 (a pandas column's .values) is a time like a naive datetime (UTC)
    for time=, as_of= and where, to its fraction of a second; NaT is refused."""
    when = np.datetime64("2025-03-01T06:30:00.250")
    d = mem.remember("a note from a dataframe", time=when, due=np.datetime64("2025-03-02"))
    got = mem.get(d).metadata
    assert got["time"] == dt.datetime(2025, 3, 1, 6, 30, 0, 250000,
                                      tzinfo=dt.timezone.utc).timestamp()
    assert got["due"] == dt.datetime(2025, 3, 2, tzinfo=dt.timezone.utc).timestamp()
    assert [e.docno for e in mem.recall("note", as_of=np.datetime64("2025-03-01T07:00"))] \
        == [d]
    assert mem.recall("note", where={"time": ("<", np.datetime64("2025-03-01"))}) == []
    with pytest.raises(AnnodbError, match="NaT"):
        mem.remember("x", time=np.datetime64("NaT"))
