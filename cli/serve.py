"""`annodb serve`: the SSR search server (annodb.server) on the command line."""

from __future__ import annotations

import os
import sys

import click

from annodb.errors import AnnodbError
from annodb.ranking import DEPTH
from annodb.protocol import MAX_POSTINGS
from annodb.server import IDLE_TIMEOUT, LINE_TIMEOUT, QUERY_TIMEOUT, THREADS, Server
from annodb.shards import FAN_OUTS

from .main import db_option


def _fields(ctx, param, value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise click.BadParameter(f"{value!r} has an empty field name (write e.g. "
                                 "title:,headings:,segment:)")
    return names


@click.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on; anything but loopback requires --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The port; 0 picks a free one. The port is printed on stderr.")
@click.option("--container", default=":", show_default=True, metavar="GCL",
              help="What is ranked: the feature (or query) whose intervals are results.")
@click.option("--fields", callback=_fields, metavar="NAMES",
              help="Comma-separated fields a `document` request returns, joined with "
                   "' ... ' (default: the whole document); a name no document has is "
                   "refused.")
@click.option("--depth", type=click.IntRange(min=1), default=DEPTH, show_default=True,
              help="Results kept per query (how far `next` can go).")
@click.option("--token", envvar="ANNODB_TOKEN", show_envvar=True, metavar="T",
              help="Require \"token\": T in every request.")
@click.option("--timeout", type=click.FloatRange(min=0), default=QUERY_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="Stop a query still running after this long, with an error (0: no limit).")
@click.option("--max-postings", type=click.IntRange(min=0), default=MAX_POSTINGS,
              show_default=True, metavar="N",
              help="Stop a query that reads or makes more than N intervals (0: no limit).")
@click.option("--processes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes serving connections  [default: one per core]")
@click.option("--threads", type=click.IntRange(min=1), default=THREADS, show_default=True,
              metavar="N", help="Query threads in each worker process.")
@click.option("--idle-timeout", type=click.FloatRange(min=1), default=IDLE_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="Close a connection silent this long.")
@click.option("--line-timeout", type=click.FloatRange(min=1), default=LINE_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="Close a connection whose request line is not complete this long after "
                   "it began.")
@click.option("--cache-mb", type=click.IntRange(min=0), default=256, show_default=True,
              metavar="MB", help="Decoded lists kept for queries, over all processes.")
@click.option("--read-only", "readonly", is_flag=True,
              help="Open the database read-only: annotate, note and judge are refused.")
@click.option("--strict", is_flag=True,
              help="Refuse malformed queries with an error, as the reference server does "
                   "(default: lenient, repairs listed in \"warnings\").")
@click.option("--ray", metavar="ADDRESS",
              help="Serve a sharded collection from Ray actors, one per shard: the "
                   "cluster's address (auto: the running one), or local to start one here "
                   "(pip install 'annodb[ray]'). Writes are refused.")
@click.option("--fan-out", type=click.Choice(FAN_OUTS), default=None,
              help="How each query of a sharded collection runs over its shards: one "
                   "after another (the default; the server's processes already use every "
                   "core for many agents), on threads, or in a worker process per shard "
                   "besides the first (lower latency for one agent over a large "
                   "collection: each server process then has its own shard workers).")
def serve(db, host, port, container, fields, depth, token, timeout, max_postings, processes,
          threads, idle_timeout, line_timeout, cache_mb, readonly, strict, ray, fan_out):
    """Serve the database to search agents: newline-delimited JSON over TCP.

    Speaks the protocol of Cottontail's ssr-server, so the Vole runner works unchanged:
    {"op":"query","query":G}, {"op":"next","qid":Q}, {"op":"document","docno":D}, plus
    {"op":"count","query":G}, {"op":"stats"}, {"op":"annotate","docno":D,
    "feature":F,"value":V}, and the Vole's {"op":"judge",...}, {"op":"judgments",
    "topic":T} and {"op":"topic",...}. Notes are kept apart from the collection: a query
    finds them with "container":"note:". Prints `listening on port N` on stderr once it accepts
    connections; stops cleanly on Ctrl-C or SIGTERM. `annodb ingest` may run beside it:
    new documents are seen by the next query. Connections are spread over worker
    processes (one per core by default), so many agents are served at once.

    \b
    Example:
      annodb serve --db msmarco.db --fields title:,headings:,segment:
      annodb serve --db msmarco.db --strict --port 8765
      annodb serve --db web.shards --ray local       # shards on Ray actors
      annodb serve --db web.shards --fan-out processes --processes 2
      printf '%s\\n' '{"op":"query","query":"(^ goth rock)"}' | nc 127.0.0.1 PORT
    """
    try:
        server = Server(db, host=host, port=port, container=container, fields=fields,
                        depth=depth, token=token, query_timeout=timeout or None,
                        max_postings=max_postings or None,
                        processes=processes or os.cpu_count() or 1, workers=threads,
                        idle_timeout=idle_timeout, line_timeout=line_timeout,
                        cache_bytes=cache_mb << 20, readonly=readonly, strict=strict,
                        ray=ray, fan_out=fan_out)
        server.serve_forever()
    except AnnodbError as err:
        click.echo(f"annodb: error: {err}", err=True)
        sys.exit(1)
    except OSError as err:
        click.echo(f"annodb: error: {err.strerror or err}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:            # Ctrl-C before the server was listening
        click.echo("annodb: error: interrupted", err=True)
        sys.exit(130)
