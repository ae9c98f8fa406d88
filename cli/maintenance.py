"""The commands that look after a database as a whole: `check`, `compact` and `split`."""

from __future__ import annotations

import sys

import click
import msgspec

import annodb as _annodb
from annodb.check import check_path as _check_path

from .main import _Bar, db_option, echo_json, fail, open_db


@click.command("check")
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


@click.command()
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
    if not dest.strip():
        raise click.BadParameter(f"{dest!r}: give a new directory for the copy",
                                 param_hint="DEST")
    with open_db(db, readonly=True) as database:
        before = database.stats().size_bytes
        database.compact(dest)
    after = _annodb.storage.disk_size(dest)
    click.echo(f"annodb: compact: {before:,} -> {after:,} bytes in {dest}", err=True)


@click.command()
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
    if not dest.strip():
        raise click.BadParameter(f"{dest!r}: give a new directory for the collection",
                                 param_hint="DEST")
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
