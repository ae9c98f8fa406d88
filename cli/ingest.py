"""`annodb ingest`: files and directories into a database or a sharded collection (the
reading, parsing and committing are annodb.ingest's; this is the command's options,
progress bar and report)."""

from __future__ import annotations

import os
import sys

# an ingest runs no BLAS, and OpenBLAS starts a thread a core when numpy (and then scipy,
# which numba loads) is imported, each spinning ~0.1 s of CPU before it sleeps: one is
# enough (set before annodb.ingest imports numpy, and only then: a process that has
# imported it already, e.g. one running this command in-process, keeps its environment)
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click  # noqa: E402 - after the environment above

import annodb as _annodb  # noqa: E402
from annodb import ingest as _ingest  # noqa: E402

from .main import MAX_PROBLEMS_SHOWN, _Bar, db_option, echo_json


@click.command()
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
              f"{(_ingest.DEFAULT_BATCH_BYTES >> 20) * _ingest.COMMIT_BATCHES} MiB "
              "of input).")
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
        _ingest.check_inputs(files, fmt, database=db)   # before the database is created
        target = _annodb.open(db, fold_diacritics=fold_diacritics or None, shards=shards)
    try:
        summary = _ingest.ingest(target, files, format=fmt, id_field=id_field,
                                 text_fields=list(text_fields) or None, batch_size=batch_size,
                                 replace=replace, strict=strict, progress=bar,
                                 sparse_fields=sparse_fields)
    except _ingest.Interrupted as stop:
        bar.close()
        s = stop.summary
        # (a collection's writers are stopped too: their documents are counted, not their
        # batches)
        batches = f" in {s.batches:,} batches" if s.batches else ""
        click.echo(f"annodb: interrupted: {s.documents:,} documents{batches} were "
                   "committed (the batch in progress was not); run the same command again "
                   "to resume: documents already present are left as they are", err=True)
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
        if summary.present and not replace:
            n = summary.present
            what = "document was" if n == 1 else "documents were"
            click.echo(f"annodb: note: {n:,} {what} in the database already (by docno) and "
                       "left as stored, even where the input differs; --replace updates "
                       "them", err=True)
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
    if any(": invalid UTF-8" in text for text in summary.errors):
        click.echo("annodb: note: ingest reads UTF-8; a file in another encoding (Latin-1, "
                   "Windows-1252) must be converted first, e.g. iconv -f WINDOWS-1252 -t "
                   "UTF-8 FILE > NEW", err=True)
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
