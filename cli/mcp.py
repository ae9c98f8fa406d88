"""`annodb mcp`: the memory (annodb.Memory) as a Model Context Protocol server over stdio.

The tools are thin wrappers of Memory's methods; `make_server(path)` builds the server (the
`mcp` package is imported only when it runs, so other commands start fast).
"""

from __future__ import annotations

import threading
from typing import Any

import click

from annodb.errors import AnnodbError
from annodb.memory import Memory
from .main import db_option

SNIPPET_CHARS = 1000       # a listing without a query shows this much of each text

INSTRUCTIONS = """\
A persistent, searchable memory (annodb). `remember` stores a text with metadata
(strings are exact labels, numbers are values; `time` is set for you); `search` finds
memories by free text or by a GCL query, filtered by metadata with `where`; `read_document`
returns one in full; `annotate` puts a number on a memory under a label (e.g. useful = 2)
that `where` can filter on; `forget` deletes one. Search everything before remembering
something that may already be there."""

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
{"time": [">=", 1735689600]} (seconds since the epoch). An empty query lists the most
recent memories matching `where`. Returns docno, score, metadata and a snippet with the
match marked <cover>...</cover>."""


def make_server(path: str):
    """The MCP server (an mcp.server.mcpserver.MCPServer) over the memory at `path`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    memory = Memory(path)
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
               rank: str | None = None) -> dict[str, Any]:
        found = call(memory.recall, query, k=max(0, min(k, 1000)), where=where, rank=rank)
        results = []
        for e in found:
            snippet = e.snippet if e.snippet is not None else e.text[:SNIPPET_CHARS]
            results.append({"docno": e.docno, "score": e.score, "metadata": e.metadata,
                            "snippet": snippet})
        return {"results": results, "query": found.query, "filter": found.filter,
                "warnings": found.warnings}

    @server.tool()
    def read_document(docno: str) -> dict[str, Any]:
        """The whole memory (document) DOCNO: its text and metadata."""
        entry = call(memory.get, docno)
        if entry is None:
            raise ToolError(f"no document with docno {docno!r}")
        return {"docno": entry.docno, "text": entry.text, "metadata": entry.metadata}

    @server.tool()
    def remember(text: str, metadata: dict | None = None,
                 docno: str | None = None) -> dict[str, Any]:
        """Store TEXT in the memory, committed before this returns. metadata: string values
        become exact labels (filter with where={"key": "value"}), numbers and booleans
        become values (where={"key": [">=", 2]}). Give the docno of an existing memory to
        replace it; otherwise one is made (m<n>). Returns the docno."""
        return {"docno": call(memory.remember, text, docno=docno, **(metadata or {}))}

    @server.tool()
    def annotate(docno: str, label: str, value: float = 0.0) -> dict[str, Any]:
        """Put VALUE (default 0) on the memory DOCNO under LABEL (replacing an earlier
        value), e.g. a judgment like useful = 2; then search where={"useful": [">=", 2]} or
        the GCL (>> : (>= :useful: 2)) finds it."""
        call(memory.annotate, docno, label, value)
        return {"docno": docno, "label": label, "value": value}

    @server.tool()
    def forget(docno: str) -> dict[str, Any]:
        """Delete the memory DOCNO and everything annotated inside it."""
        return {"docno": docno, "forgotten": call(memory.forget, docno)}

    server.memory = memory
    return server


@click.command("mcp")
@db_option
def mcp(db):
    """Serve the database as agent memory over the Model Context Protocol (stdio).

    Tools: search (free text or GCL, k, where filters), read_document, remember,
    annotate and forget. The database is created if missing; every call is a
    transaction, so agents, `annodb` commands and other programs can use it at once.

    \b
    Example:
      annodb mcp --db memory.db
    Register it with an MCP client (Claude Desktop, Cursor, ...):
      {"mcpServers": {"memory": {"command": "annodb",
                                 "args": ["mcp", "--db", "/home/me/memory.db"]}}}
    or: claude mcp add memory -- annodb mcp --db /home/me/memory.db
    """
    server = make_server(db)
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        server.memory.close()
