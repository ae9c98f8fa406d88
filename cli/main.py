"""The `annodb` command line: a thin layer over the annodb package.

This module defines the click group, the shared `--db` option and the error handling that
every command gets; commands live here and in the modules listed in COMMAND_MODULES. To add
commands in another file:

    # cli/query.py
    import click
    from .main import db_option, open_db

    @click.command()
    @db_option
    def query(db, ...):
        '''... \\b Example: ...'''

then add "query" to COMMAND_MODULES below: every click command defined at the top level
of a listed module joins the group (decorating with `@annodb.command()` works too). The
folder cli/ is installed as the module `annodb_cli`, so import each other relatively.

Commands raise AnnodbError (or OSError) for anything that goes wrong; the group prints it as
one line `annodb: error: ...` and exits 1 (usage errors exit 2). No command prints a
traceback. `--db PATH` may come before the command (`annodb --db X check`) or after it.
"""

from __future__ import annotations

import importlib
import json
import sys
import time

import click
import msgspec
from click.core import ParameterSource

from . import errors as _errors

import annodb as _annodb
from annodb import ingest as _ingest
from annodb import kernels as _kernels
from annodb import tokenizer as _tokenizer
from annodb.check import check_path as _check_path
from annodb.database import DEFAULT_PATH
from annodb.errors import AnnodbError, NotFoundError

COMMAND_MODULES = ("query", "serve", "mcp")   # more commands, one module each (in cli/)
MAX_PROBLEMS_SHOWN = 20


def fail(message: str, code: int = 1):
    """Print `annodb: error: message` on stderr and exit with `code`."""
    _errors.fail("annodb", message, code)


COMPILING = ("annodb: compiling numba kernels on their first use (up to about a minute on "
             "2 cores); they are cached for later runs")


class Group(_errors.ErrorGroup):
    prog = "annodb"
    debug_env = "ANNODB_DEBUG"
    expected = (AnnodbError,)

    def list_commands(self, ctx):
        _add_commands(COMMAND_MODULES)
        return super().list_commands(ctx)

    def get_command(self, ctx, name):
        _add_commands(COMMAND_MODULES, until=name)
        return super().get_command(ctx, name)


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
    _kernels.on_compile(_say_compiling)


def _say_compiling() -> None:
    click.echo(COMPILING, err=True)


def _db(ctx, param, value):
    """A --db given before the command counts unless one is given after it."""
    if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        return ctx.meta.get("annodb.db", value)
    return value


def db_option(f):
    """The shared `--db PATH` option: passes `db` (a path string) to the command."""
    return click.option(
        "--db", "db", metavar="PATH", envvar="ANNODB_DB", default=DEFAULT_PATH,
        show_default=True, show_envvar=True, type=click.Path(dir_okay=True, file_okay=True),
        callback=_db, help="The database directory.")(f)


def open_db(path: str, *, readonly: bool = False) -> _annodb.Database:
    """Open an existing database (commands other than ingest never create one)."""
    return _annodb.open(path, readonly=readonly, create=False)


def echo_json(value) -> None:
    click.echo(msgspec.json.encode(value).decode())


# ---------------------------------------------------------------- ingest


class _Bar:
    """A progress bar on stderr showing documents and documents/s (only on a terminal)."""

    def __init__(self, enabled: bool, label: str = "ingesting"):
        self.enabled = enabled
        self.label = label
        self.bar = None
        self.docs = 0
        self.started = time.monotonic()

    def __call__(self, docs: int, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=max(total, 1), label=self.label, file=sys.stderr,
                                         item_show_func=self._show, show_percent=True,
                                         show_eta=True)
            self.bar.__enter__()
        self.docs = docs
        self.bar.update(max(done - self.bar.pos, 0), docs)

    def _show(self, _item) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return f"{self.docs:,} documents, {self.docs / elapsed:,.0f}/s"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@annodb.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@db_option
@click.option("--id-field", metavar="NAME", help="The record field (or CSV/TSV column) "
              "holding the docno (default: the first of docid, docno, id, _id).")
@click.option("--text-field", "text_fields", metavar="NAME", multiple=True,
              help="A record field to index as text; repeat for several, in order "
                   "(default: every string field but the id).")
@click.option("--sparse-field", "sparse_fields", metavar="NAME", multiple=True,
              help="A record field holding a sparse vector {term: weight} (SPLADE or any "
                   "learned-sparse encoder), for `search --rank sparse`; repeat for several.")
@click.option("--format", "fmt", type=click.Choice(_ingest.FORMATS),
              help="The input format (default: from the file name; see above).")
@click.option("--batch-size", type=click.IntRange(min=1), metavar="N",
              help="Commit every N documents (default: every "
              f"{_ingest.DEFAULT_BATCH_BYTES >> 20} MiB of input).")
@click.option("--replace", is_flag=True, help="Replace documents whose docno is already "
              "in the database (default: leave them as they are).")
@click.option("--skip-bad", is_flag=True, help="Exit 0 even if bad records or repeated "
              "docnos were skipped (each is still reported), as long as something was "
              "stored.")
@click.option("--strict", is_flag=True, help="Stop at the first malformed record instead of "
              "reporting and skipping it.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no list of problems "
              "and notes (the summary line stays).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--fold-diacritics", is_flag=True,
              help="Make a new database that folds diacritics (cafe finds Café): chosen "
                   "when it is created, recorded in it; refused for one that holds "
                   "content without it.")
@click.option("--shards", type=click.IntRange(1, 1024), metavar="N",
              help="Make (or add to) a sharded collection of N databases, read, tokenized "
                   "and written by parallel processes (a collection is ingested so "
                   "without it too). N is at most what one process can map (each shard "
                   "maps 1 TiB of address space: about 129 on x86-64).")
def ingest(files, db, id_field, text_fields, sparse_fields, fmt, batch_size, replace,
           skip_bad, strict, quiet, as_json, fold_diacritics, shards):
    """Add documents from FILES and directories (JSONL, JSON, CSV, TSV, TREC, MS MARCO
    segments or plain text; .gz too).

    The format follows the file name: .jsonl/.ndjson one JSON record per line, .json JSON
    records (one object, an array of them, or one per line), .csv a table with a header
    row, .tsv a table if its first line names the id column and else docno<TAB>text
    lines, .trec/.sgml (or a first line <DOC>) TREC <DOC> files; any other file is one
    plain-text document whose docno is its path relative to the common root of the
    plain-text inputs (a lone file: its name without extension). A directory is read
    recursively (hidden names left out). Records with docid and segment are MS MARCO
    V2.1 segments.

    Ingest commits in batches and is idempotent by docno: documents already present are
    left as they are, so re-running an interrupted ingest (Ctrl-C: exit 130) resumes it.
    Each record that cannot be stored is reported (file:line: message) and skipped, as is
    a repeated docno; the last line says "added N, skipped M", and the exit code is 1 if
    anything was skipped, unless --skip-bad accepts that (--strict stops at the first).

    \b
    Example:
      annodb ingest --db bible.db examples/bible-sample.jsonl
      annodb ingest --db notes.db notes/ tables/*.csv
      annodb ingest --db web.db --id-field url --text-field title --text-field body pages.jsonl.gz
      annodb ingest --db cafes.db --fold-diacritics reviews.jsonl
      annodb ingest --db web.db --sparse-field splade encoded.jsonl
      annodb ingest --db web.shards --shards 4 corpus.jsonl
    """
    if strict and skip_bad:
        raise click.UsageError("--strict stops at the first bad record and --skip-bad "
                               "accepts skipping them: give one of them")
    bar = _Bar(enabled=not quiet and sys.stderr.isatty())
    target = db
    if fold_diacritics or shards:
        _ingest.check_inputs(files, fmt)       # before the database is created
        target = _annodb.open(db, fold_diacritics=fold_diacritics or None, shards=shards)
    try:
        summary = _ingest.ingest(target, files, format=fmt, id_field=id_field,
                                 text_fields=list(text_fields) or None, batch_size=batch_size,
                                 replace=replace, strict=strict, progress=bar,
                                 sparse_fields=sparse_fields)
    except _ingest.Interrupted as stop:
        bar.close()
        s = stop.summary
        click.echo(f"annodb: interrupted: {s.documents:,} documents in {s.batches:,} "
                   "batches were committed (the batch in progress was not); run the same "
                   "command again to resume: documents already present are left as they "
                   "are", err=True)
        click.echo(f"annodb: ingest: {s.line()}", err=True)
        if as_json:
            echo_json(s)
        sys.exit(130)
    except KeyboardInterrupt:   # (only before the first batch: see ingest.Interrupted)
        click.echo("annodb: interrupted before anything was committed", err=True)
        sys.exit(130)
    finally:
        bar.close()
        if target is not db:
            target.close()
    if not quiet:
        _print_problems(summary)
    failed = summary.skipped and (not skip_bad or not summary.documents)
    if failed:
        n = summary.skipped
        skipped = f"{n:,} record{' was' if n == 1 else 's were'} skipped (listed above)"
        if summary.documents:
            why = f"{skipped}; what was stored stays"
            hint = "" if skip_bad else " (or give --skip-bad to accept skipping them)"
        else:
            why, hint = f"nothing was stored: {skipped}", ""
        click.echo(f"annodb: error: {why}; fix the input and run the same command again to "
                   f"add the rest{hint}", err=True)
    click.echo(f"annodb: ingest: {summary.line()}", err=True)
    if as_json:
        echo_json(summary)
    if failed:
        sys.exit(1)


def _print_problems(summary) -> None:
    """Each skipped record, repeated docno and note (at most MAX_PROBLEMS_SHOWN each)."""
    for text in summary.errors[:MAX_PROBLEMS_SHOWN]:
        click.echo(f"annodb: skipped {text}", err=True)
    if summary.error_count > MAX_PROBLEMS_SHOWN:
        click.echo(f"annodb: ... and {summary.error_count - MAX_PROBLEMS_SHOWN:,} more "
                   "malformed records (see --json)", err=True)
    for text in summary.warnings[:MAX_PROBLEMS_SHOWN]:
        click.echo(f"annodb: {text}", err=True)
    if summary.duplicates > MAX_PROBLEMS_SHOWN:
        click.echo(f"annodb: ... and {summary.duplicates - MAX_PROBLEMS_SHOWN:,} more "
                   "duplicate docnos (see --json)", err=True)
    for text in summary.notes[:MAX_PROBLEMS_SHOWN]:
        click.echo(f"annodb: note: {text}", err=True)
    if len(summary.notes) > MAX_PROBLEMS_SHOWN:
        click.echo(f"annodb: ... and {len(summary.notes) - MAX_PROBLEMS_SHOWN:,} more notes "
                   "(see --json)", err=True)


# ---------------------------------------------------------------- reading


@annodb.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def stats(db, as_json):
    """Print the database's counts: documents, tokens, features, size.

    \b
    Example:
      annodb stats --db bible.db
      annodb stats --db bible.db --json
    """
    with open_db(db, readonly=True) as database:
        result = database.stats().as_dict()
    if as_json:
        echo_json(result)
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        click.echo(f"{key:<{width}}  {value}")


def _document_dict(doc) -> dict:
    return {
        "docno": doc.docno, "start": doc.start, "end": doc.end, "tokens": doc.tokens,
        "text": doc.text,
        "fields": [{"name": f.name, "path": f.path, "start": f.start, "end": f.end,
                    "text": doc.text[f.char_start:f.char_end]} for f in doc.fields],
        "meta": doc.meta,
    }


@annodb.command()
@click.argument("docno")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole document as JSON.")
def show(docno, db, as_json):
    """Print the document DOCNO: its address range, fields and metadata.

    \b
    Example:
      annodb show --db bible.db Gen.1.1
      annodb show --db bible.db Gen.1.1 --json
    """
    with open_db(db, readonly=True) as database, database.read() as snapshot:
        doc = snapshot.document(docno)
    if as_json:
        echo_json(_document_dict(doc))
        return
    click.echo(f"docno: {doc.docno}")
    click.echo(f"range: {doc.start}..{doc.end} ({doc.tokens} tokens)")
    for key, value in doc.meta.items():
        click.echo(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    named = [f for f in doc.fields if f.name or f.path]
    if named:
        for f in named:
            click.echo(f"{f.path or f.name}: {doc.text[f.char_start:f.char_end]}")
    else:
        click.echo("")
        click.echo(doc.text)


# ---------------------------------------------------------------- writing


@annodb.command()
@click.argument("feature")
@click.argument("docno")
@db_option
@click.option("--value", type=float, default=0.0, show_default=True,
              help="The number the annotation carries.")
def annotate(feature, docno, db, value):
    """Annotate the whole of document DOCNO with FEATURE (and a value).

    \b
    Example:
      annodb annotate --db bible.db judgment:creation Gen.1.1 --value 3
    """
    with open_db(db) as database, database.write() as w:
        doc = w.document(docno)
        w.annotate(feature, doc.start, doc.end, value)
    click.echo(f"annotated {docno} [{doc.start}, {doc.end}] with {feature} = {value:g}",
               err=True)
    if _tokenizer.tokens(feature) == [feature]:
        click.echo(f"annodb: note: {feature!r} is also a word: its list holds the text's "
                   f"{feature!r} too, and a query of it finds both (a name with a ':', "
                   f"such as {feature + ':'!r}, keeps a label apart)", err=True)


@annodb.command()
@click.argument("docno")
@db_option
def delete(docno, db):
    """Delete document DOCNO (its text and every annotation inside it).

    \b
    Example:
      annodb delete --db bible.db Gen.1.1
    """
    with open_db(db) as database, database.write() as w:
        if not w.delete(docno):
            raise NotFoundError(f"no document with docno {docno!r}")
    click.echo(f"deleted {docno}", err=True)


@annodb.command("check")
@db_option
def check_command(db):
    """Verify every invariant of the database; exit 1 if it is damaged.

    Prints each problem found, or "ok". The LMDB file is checked first, page by page,
    without letting LMDB read it (a damaged file cannot crash the check); annodb's own
    invariants only when the pages are sound. Exit 0: healthy; 1: damaged (each problem on
    a line, then one error line) or no database there.

    \b
    Example:
      annodb check --db bible.db
    """
    problems = _check_path(db)
    for problem in problems:
        click.echo(problem)
    if problems:
        fail(f"{db}: {len(problems)} problem{'s' if len(problems) != 1 else ''} found")
    click.echo("ok")


@annodb.command()
@db_option
@click.argument("dest", type=click.Path(file_okay=False))
def compact(db, dest):
    """Write a compacted copy of the database to DEST (a new or empty directory).

    Pages freed by earlier transactions are left out, so an ingest done in
    many batches shrinks; the database itself is untouched (a consistent
    snapshot is copied even while others write). Nothing of what was deleted
    or forgotten is copied: not its text, nor a word or label that no
    remaining document uses (the file's bytes hold none of them). Replace
    the database with the copy when no process has it open.

    \b
    Example:
      annodb compact --db bible.db bible-compact.db
      mv bible.db bible-old.db && mv bible-compact.db bible.db
    """
    with open_db(db, readonly=True) as database:
        before = database.stats().size_bytes
        database.compact(dest)
    after = _annodb.storage.disk_size(dest)
    click.echo(f"annodb: compact: {before:,} -> {after:,} bytes in {dest}", err=True)


@annodb.command()
@db_option
@click.argument("dest", type=click.Path(file_okay=False))
@click.option("--shards", type=click.IntRange(1, 1024), required=True, metavar="N",
              help="How many shards (databases) the collection has: at most what one "
                   "process can map (each maps 1 TiB of address space: about 129 on "
                   "x86-64).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def split(db, dest, shards, as_json):
    """Write the database as a new sharded collection DEST of N shards.

    Each document goes to the shard its docno routes to (a note with its
    document), at the address it has, with every annotation inside it, so DEST
    ranks exactly as the database does; it is searched, served and ingested into
    like a database (an ingest into it runs in parallel processes). The database
    is only read, as it was when the split began. The shards are written by
    parallel processes, a window of documents at a time; interrupted (Ctrl-C,
    exit 130), the same command completes it.

    \b
    Example:
      annodb split --db web.db web.shards --shards 4
      annodb query --db web.shards '(^ goth rock)'
    """
    from annodb.shards.split import split as _split
    bar = _Bar(enabled=sys.stderr.isatty(), label="splitting")
    try:
        summary = _split(db, dest, shards,
                         progress=lambda done, total: bar(done, done, total))
    except KeyboardInterrupt:
        bar.close()
        fail(f"interrupted: the documents written to {dest} stay; run the same command "
             "again to complete the split", 130)
    finally:
        bar.close()
    if as_json:
        echo_json(msgspec.to_builtins(summary) | {"dest": dest})
    note = (f"; {summary.not_copied} annotations over no single document were not copied"
            if summary.not_copied else "")
    again = (f"; {summary.already:,} documents were there already (a split completed)"
             if summary.already else "")
    click.echo(f"annodb: split: {summary.documents:,} documents and {summary.annotations:,} "
               f"annotations into {shards} shards in {dest}{note}{again}", err=True)


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


def _add_commands(names, until: str | None = None) -> None:
    """Add the commands of the modules `names`, in order, each once, stopping as soon as
    the command `until` is there (when the group first needs them, so a module importing
    this one is wholly imported by then; `annodb query` imports the query module only)."""
    for name in names:
        if until is not None and until in annodb.commands:
            return
        if name in _added:
            continue
        _added.append(name)
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"{__package__}.{name}":   # not written yet
                continue
            raise
        for value in list(vars(module).values()):
            if isinstance(value, click.Command) and value is not annodb \
                    and value.name not in annodb.commands:
                annodb.add_command(value)


_added: list[str] = []   # the modules imported


def main() -> None:
    """Run a command in this process (the console script, cli/warm.py's main, runs the
    read-only ones in the warm process when there is one)."""
    annodb(prog_name="annodb")
