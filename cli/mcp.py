"""`annodb mcp`: the memory (annodb.Memory) as a Model Context Protocol server over stdio.

The tools are thin wrappers of Memory's methods; `make_server(memory)` builds the server
(the `mcp` package is imported only when it runs, so other commands start fast).
"""

from __future__ import annotations

import threading
from typing import Any, Union

import click
from pydantic import StrictFloat, StrictInt, StrictStr

from annodb.errors import AnnodbError
from annodb.metadata import seconds
from annodb.memory import Memory
from .main import db_option

SNIPPET_CHARS = 1000       # a listing without a query shows this much of each text
MAX_RESULTS = 1000         # the most results a search or a list page returns

INSTRUCTIONS = """\
A persistent, searchable memory (annodb). `remember` stores a text with metadata
(strings are exact labels, numbers are values; `time` is set for you); give a `key` naming
what a fact is about (e.g. "alice/city") and a later memory with that key replaces it.
`search` finds current memories by free text or by a GCL query, filtered by metadata with
`where` (or as they were at a past time with `as_of`); `list` pages through the latest;
`read_document` returns one in full; `annotate` puts a number on a memory under a label
(e.g. useful = 2) that `where` can filter on; `forget` deletes memories by docno or by
filter. Search everything before remembering something that may already be there."""

SEARCH_HELP = """\
Search the memory. `query` is free text (its words, whatever characters it holds: an email
address, a time, a URL; ranked by "context" by default: BM25 over each memory and the
memories around it in its conversation, with dates it names) or a GCL query: one "quoted phrase", or
an expression starting with `(` and an operator: (^ A B) all of, (+ A B) one of, (... A B)
A then B, (<< A B) A inside B, (>> : user:alice) memories carrying the label user:alice,
(>> : (>= :importance: 3)). `rank` orders them: "context", "bm25", "bm25+rm3" (BM25 with the words
of the best matches added: finds memories that use other words), "ssr"
(shortest-substring ranking: how close together the words occur), "fused" (both) or
"sparse"; the default is "context" for free text, "ssr" for GCL.
`where` filters inside the ranking, so k results come back when k match: {"user": "alice"}
(exact), {"user": ["alice", "bob"]} (any of), {"importance": [">=", 3]} (= != < <= > >=),
{"time": [">=", 1735689600]} (seconds since the epoch), {"user": ["not in", ["bob"]]},
{"key": ["exists", true]}; a condition on a key a memory lacks is false, except != and
not in. Memories replaced by a newer one with their key are left out unless
include_superseded; `as_of` (seconds since the epoch, or ISO 8601 like
"2025-01-31T12:00:00Z"; no zone means UTC) searches the memories current at that time;
`recency` (a half-life in seconds) favours newer memories. An empty query lists the most
recent memories matching `where`. `k` (at most 1000) is how many results. Returns docno,
score, metadata and a snippet with the match marked <cover>...</cover>, and warnings
(e.g. that no word of the query is in the memory)."""


# (strict: JSON's true is not a number of seconds; a lax float took it as 1.0, 1970)
Seconds = Union[StrictInt, StrictFloat, None]
Time = Union[StrictInt, StrictFloat, StrictStr, None]


def _time(value, what: str):
    """A time from JSON: seconds since the epoch, or an ISO 8601 string (no zone: UTC)."""
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return seconds(value, what)
    raise AnnodbError(f"{what}: {value!r} is neither seconds since the epoch nor an ISO "
                      "8601 time")


def _count(value: int, what: str) -> int:
    """A search's k or a page's n, or ToolError naming the range: never cut to it in
    silence (k = -1 had returned no results and k = 5000 a thousand, without a word)."""
    from mcp.server.mcpserver.exceptions import ToolError
    if not 0 <= value <= MAX_RESULTS:
        raise ToolError(f"{what} must be between 0 and {MAX_RESULTS}, not {value}")
    return value


def _shown(e) -> dict[str, Any]:
    snippet = e.snippet if e.snippet is not None else e.text[:SNIPPET_CHARS]
    return {"docno": e.docno, "score": e.score, "metadata": e.metadata, "snippet": snippet}


def make_server(memory: Memory):
    """The MCP server (an mcp.server.mcpserver.MCPServer) over `memory` (the caller closes
    it)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    lock = threading.Lock()          # tools run in worker threads: one call at a time here;
    server = MCPServer("annodb", instructions=INSTRUCTIONS, log_level="WARNING")

    def call(method, *args, **kwargs):
        with lock:
            try:
                return method(*args, **kwargs)
            except (AnnodbError, TypeError, ValueError) as err:
                raise ToolError(str(err)) from None

    @server.tool(description=SEARCH_HELP)
    def search(query: str = "", k: int = 10, where: dict | None = None,
               rank: str | None = None, as_of: Time = None,
               include_superseded: bool = False,
               recency: Seconds = None) -> dict[str, Any]:
        found = call(lambda: memory.recall(
            query, k=_count(k, "k"), where=where, rank=rank,
            as_of=_time(as_of, "as_of"), include_superseded=include_superseded,
            recency=recency))
        return {"results": [_shown(e) for e in found], "query": found.query,
                "filter": found.filter, "warnings": found.warnings}

    @server.tool(name="list")
    def list_memories(n: int = 20, where: dict | None = None, before: str | None = None,
                      as_of: Time = None,
                      include_superseded: bool = False) -> dict[str, Any]:
        """The latest N (at most 1000) memories matching `where` (as search takes it),
        newest first, a page at a time: pass the `cursor` a page returned as `before`
        for the next one (null when there is none). Current memories only unless
        include_superseded; as_of as for search."""
        page = call(lambda: memory.history(_count(n, "n"), where,
                                           before=before, as_of=_time(as_of, "as_of"),
                                           include_superseded=include_superseded))
        return {"results": [_shown(e) for e in page], "cursor": page.cursor,
                "warnings": page.warnings}

    @server.tool()
    def read_document(docno: str) -> dict[str, Any]:
        """The whole memory (document) DOCNO: its text and metadata."""
        entry = call(memory.get, docno)
        if entry is None:
            raise ToolError(f"no document with docno {docno!r}")
        return {"docno": entry.docno, "text": entry.text, "metadata": entry.metadata}

    @server.tool()
    def remember(text: str, metadata: dict | None = None, key: str | None = None,
                 supersedes: str | None = None, docno: str | None = None) -> dict[str, Any]:
        """Store TEXT in the memory, committed before this returns. metadata: string values
        become exact labels (filter with where={"key": "value"}), numbers and booleans
        become values (where={"key": [">=", 2]}); "time" (seconds since the epoch or ISO
        8601) says when, default now. key names what the memory is about ("alice/city"):
        the memories with that key remembered before it are superseded (kept, but no
        longer found unless asked for). supersedes: the docno of one memory this one
        replaces. Give the docno of an existing memory to overwrite it; otherwise one is
        made (m<n>). Returns the docno."""
        def write():
            fields = dict(metadata or {})
            if "time" in fields:
                fields["time"] = _time(fields["time"], "time")
            return memory.remember(text, docno=docno, key=key, supersedes=supersedes,
                                   **fields)
        return {"docno": call(write)}

    @server.tool()
    def annotate(docno: str, label: str, value: float = 0.0) -> dict[str, Any]:
        """Put VALUE (default 0) on the memory DOCNO under LABEL (replacing an earlier
        value), e.g. a judgment like useful = 2; then search where={"useful": [">=", 2]} or
        the GCL (>> : (>= :useful: 2)) finds it."""
        call(memory.annotate, docno, label, value)
        return {"docno": docno, "label": label, "value": value}

    @server.tool()
    def forget(docno: str | None = None, docnos: list[str] | None = None,
               where: dict | None = None) -> dict[str, Any]:
        """Delete memories and everything annotated inside them, in one transaction: the
        memory DOCNO (returns forgotten: true or false), or the memories DOCNOS, or every
        memory matching WHERE (as search takes it; superseded ones too; it must not be
        empty), returning forgotten: the docnos deleted. `annodb compact` then writes a
        copy holding no trace of them."""
        if sum(x is not None for x in (docno, docnos, where)) != 1:
            raise ToolError("give one of docno, docnos or where")
        if docno is not None:
            return {"docno": docno, "forgotten": call(memory.forget, docno)}
        return {"forgotten": call(memory.forget, docnos, where=where)}

    return server


@click.command("mcp")
@db_option
def mcp(db):
    """Serve the database as agent memory over the Model Context Protocol (stdio).

    Tools: search (free text or GCL, k, where filters, as_of), list (the latest,
    a page at a time), read_document, remember (with a key that supersedes),
    annotate and forget (by docno or by filter). The database is created if
    missing; every call is a transaction, so agents, `annodb` commands and other
    programs can use it at once.

    \b
    Example:
      annodb mcp --db memory.db
    Register it with an MCP client (Claude Desktop, Cursor, ...):
      {"mcpServers": {"memory": {"command": "annodb",
                                 "args": ["mcp", "--db", "/home/me/memory.db"]}}}
    or: claude mcp add memory -- annodb mcp --db /home/me/memory.db
    """
    memory = Memory(db)
    try:
        make_server(memory).run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        memory.close()
