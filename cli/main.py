"""The `annodb` command line: a thin layer over the annodb package.

This module defines the click group, the shared `--db` option and the error handling that
every command gets; each command lives in a module of its own concept (ingest.py,
documents.py, maintenance.py, query.py, serve.py, mcp.py; `warm` here), listed in COMMANDS
with the one line `annodb --help` shows for it. The group imports a command's module only
when that command runs or shows its own help, so `annodb --help` and `--version` load
neither numpy, numba nor the database (benchmarks/startup.py times them). To add a
command:

    # cli/notes.py
    import click
    from .main import db_option, open_db

    @click.command()
    @db_option
    def notes(db, ...):
        '''List the notes. \\b Example: ...'''

then add `"notes": ("notes", "List the notes.")` to COMMANDS (tests/test_docs.py checks
that the line is the command's own). The folder cli/ is installed as the module
`annodb_cli`, so import each other relatively.

Commands raise AnnodbError (or OSError) for anything that goes wrong; the group prints it as
one line `annodb: error: ...` and exits 1 (usage errors exit 2). No command prints a
traceback. `--db PATH` may come before the command (`annodb --db X check`) or after it.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import TYPE_CHECKING

import click
import msgspec
from click.core import ParameterSource

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar   # (what click.progressbar returns)

from . import errors as _errors

import annodb as _annodb
from annodb.errors import AnnodbError
from annodb.paths import DEFAULT_PATH

# command -> (the module of cli/ defining it, the line `annodb --help` shows for it)
COMMANDS = {
    "ingest": ("ingest", "Add documents from FILES and directories (JSONL, JSON, CSV, TSV, "
                         "TREC, MS MARCO segments or plain text; .gz too)."),
    "query": ("query", "Rank documents for a GCL query by shortest-substring ranking, or "
                       "by BM25."),
    "search": ("query", "Free-text search, for when you would rather not write GCL."),
    "count": ("query", "Count the intervals a GCL query denotes (its minimal matches)."),
    "show": ("documents", "Print the document DOCNO: its address range, fields and "
                          "metadata."),
    "stats": ("documents", "Print the database's counts: documents, tokens, features, "
                           "size."),
    "annotate": ("documents", "Annotate the whole of document DOCNO with FEATURE (and a "
                              "value)."),
    "delete": ("documents", "Delete document DOCNO (its text and every annotation inside "
                            "it)."),
    "check": ("maintenance", "Verify every invariant of the database; exit 1 if it is "
                             "damaged."),
    "compact": ("maintenance", "Write a compacted copy of the database to DEST (a new or "
                               "empty directory)."),
    "split": ("maintenance", "Write the database as a new sharded collection DEST of N "
                             "shards."),
    "serve": ("serve", "Serve the database to search agents: newline-delimited JSON over "
                       "TCP."),
    "mcp": ("mcp", "Serve the database as agent memory over the Model Context Protocol "
                   "(stdio)."),
    "warm": ("main", "Show (or stop) the warm process that runs read-only commands."),
}
MAX_PROBLEMS_SHOWN = 20


def fail(message: str, code: int = 1):
    """Print `annodb: error: message` on stderr and exit with `code`."""
    _errors.fail("annodb", message, code)


COMPILING = ("annodb: compiling numba kernels on their first use (up to about a minute on "
             "2 cores); they are cached for later runs")


class Group(_errors.ErrorGroup):
    """The commands of COMMANDS, each imported from its module when it is first needed."""

    prog = "annodb"
    debug_env = "ANNODB_DEBUG"
    expected = (AnnodbError,)

    def list_commands(self, ctx):
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMANDS:
            module = importlib.import_module(f"{__package__}.{COMMANDS[name][0]}")
            for value in vars(module).values():
                if isinstance(value, click.Command) and value.name in COMMANDS \
                        and value.name not in self.commands and value is not self:
                    self.add_command(value)
        return self.commands.get(name)

    def format_commands(self, ctx, formatter):
        """The commands and their lines from COMMANDS: no command's module is imported."""
        rows = []
        limit = formatter.width - 6 - max(map(len, self.list_commands(ctx)))
        for name in self.list_commands(ctx):
            if name in COMMANDS and name not in self.commands:
                text = click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit)
            else:
                text = self.commands[name].get_short_help_str(limit)
            rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _given_db(ctx, param, value):
    if value is not None:
        ctx.meta["annodb.db"] = value
    return value


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_annodb.__version__, prog_name="annodb")
@click.option("--db", metavar="PATH", expose_value=False, callback=_given_db,
              type=click.Path(dir_okay=True, file_okay=True),
              help="The database directory, for the command that follows (it may also "
                   "come after the command).")
def annodb():
    """annodb: an embedded, transactional search database (an annotative index on LMDB).

    Every command that uses a database takes --db PATH, before or after the
    command name (or the environment variable ANNODB_DB; default ./annodb.db).

    \b
    Example:
      annodb ingest --db bible.db examples/bible-sample.jsonl
      annodb --db bible.db stats
      annodb show --db bible.db Gen.1.1
    """
    from annodb import kernels
    kernels.on_compile(_say_compiling)


def _say_compiling() -> None:
    click.echo(COMPILING, err=True)


def _db(ctx, param, value):
    """A --db given before the command counts unless one is given after it; an empty one
    is a usage error (an empty path is the working directory: `ingest --db ""` made a
    database among its files)."""
    if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        value = ctx.meta.get("annodb.db", value)
    if value is not None and not str(value).strip():
        raise click.BadParameter(f"{value!r}: give a database directory (e.g. notes.db)",
                                 param_hint="--db")
    return value


def db_option(f):
    """The shared `--db PATH` option: passes `db` (a path string) to the command."""
    return click.option(
        "--db", "db", metavar="PATH", envvar="ANNODB_DB", default=DEFAULT_PATH,
        show_default=True, show_envvar=True, type=click.Path(dir_okay=True, file_okay=True),
        callback=_db, help="The database directory.")(f)


def open_db(path: str, *, readonly: bool = False) -> "_annodb.Database":
    """Open an existing database (commands other than ingest never create one)."""
    return _annodb.open(path, readonly=readonly, create=False)


def echo_json(value) -> None:
    click.echo(msgspec.json.encode(value).decode())


class _Bar:
    """A progress bar on stderr showing documents and documents/s (only on a terminal)."""

    def __init__(self, enabled: bool, label: str = "ingesting"):
        self.enabled = enabled
        self.label = label
        self.bar: ProgressBar[int] | None = None
        self.docs = 0
        self.started = time.monotonic()

    def __call__(self, docs: int, done: int, total: int) -> None:
        if not self.enabled:
            return
        bar = self.bar
        if bar is None:
            bar = self.bar = click.progressbar(length=max(total, 1), label=self.label,
                                               file=sys.stderr, item_show_func=self._show,
                                               show_percent=True, show_eta=True)
            bar.__enter__()
        self.docs = docs
        bar.update(max(done - bar.pos, 0), docs)

    def _show(self, _item) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return f"{self.docs:,} documents, {self.docs / elapsed:,.0f}/s"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None




@annodb.command()
@click.option("--stop", is_flag=True, help="Stop the warm process.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def warm(stop, as_json):
    """Show (or stop) the warm process that runs read-only commands.

    query, search, count, show and stats run in a warm process when one is
    there: numba's start-up is paid once, and a command takes milliseconds
    instead of about a second. The first of them run from a terminal starts it
    (from a script only with ANNODB_WARM=1); it exits after $ANNODB_WARM_IDLE
    seconds with no command (default 900). ANNODB_WARM=0 turns it off. The
    output is the same either way.

    \b
    Example:
      annodb warm
      annodb warm --json
      annodb warm --stop
    """
    from . import warm as _warm
    if stop:
        stopped = _warm.stop()
        if as_json:
            echo_json({"stopped": stopped})
        else:
            click.echo("stopped the warm process" if stopped else "no warm process was running")
        return
    state = _warm.status()
    if as_json:
        echo_json(state)
    elif state["running"] and not state["answering"]:
        click.echo(f"running: pid {state['pid']}, not answering (stopped?); commands run in "
                   f"processes of their own; `annodb warm --stop` ends it")
    elif state["running"]:
        click.echo(f"running: pid {state['pid']}, {state['served']:,} commands served, "
                   f"socket {state['socket']}")
    else:
        click.echo("not running" + ("" if state["enabled"] else " (ANNODB_WARM=0: off)"))


def main() -> None:
    """Run a command in this process (the console script, cli/warm.py's main, runs the
    read-only ones in the warm process when there is one)."""
    annodb(prog_name="annodb")
