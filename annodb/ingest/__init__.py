"""Ingest: read documents from files and add them to a database or a sharded collection
in batched commits.

    summary = ingest("bible.db", ["docs.jsonl.gz", "notes/"])

Which files are read in which format (JSONL, JSON, MS MARCO segments, CSV, TSV, TREC,
plain text; `.gz` too; directories) is decided in inputs.py, how each format is read in
formats.py.

Every commit holds whole batches (one with batch_size, else four: see database.ingest),
so an interrupted ingest leaves whole batches and never a half-written document. Ingest
is idempotent by docno: a document whose docno is already in the database is left as it
is (counted as `present`), so re-running an ingest changes nothing and resumes an
interrupted one; `replace=True` replaces such documents instead. Inside one input a
repeated docno keeps its first occurrence (later ones are reported and skipped), unless
`replace=True`, where the later one replaces it. Plain-text files are batched like the
lines of one file (a batch spans many small files).

A malformed record (bad JSON, not an object, no id, invalid UTF-8, a TSV line without a
tab, a cut-off last line, a DOC without DOCNO, a record the database refuses) is reported
as "file:line: message" and skipped; with `strict=True` the first one raises IngestError
and its batch is not written. `Summary.skipped` counts what was not stored: each such
problem, and each repeated docno skipped (not with `replace`). Inputs that cannot be read
at all (missing, unreadable, not gzip) and options naming fields the records lack raise
IngestError before anything is written. Ctrl-C stops the ingest between two records or
batches, never inside a commit or a kernel, raising Interrupted, a KeyboardInterrupt
carrying the Summary of what was committed.

One database is written by database.py, a sharded collection (a directory holding a
manifest, see annodb.shards) by sharded.py, in parallel processes.
"""
from __future__ import annotations

import os

from ..paths import is_collection
from . import database, sharded
from .database import (COMMIT_BATCHES, DEFAULT_BATCH_BYTES, MAX_MESSAGES, PARALLEL_OVER,
                       Interrupted, Progress, Summary)
from .formats import FORMATS
from .inputs import check_inputs

__all__ = ["ingest", "Summary", "Interrupted", "Progress", "check_inputs", "FORMATS",
           "DEFAULT_BATCH_BYTES", "COMMIT_BATCHES", "MAX_MESSAGES", "PARALLEL_OVER"]


def ingest(db, paths, **options) -> Summary:
    """Ingest the files `paths` into `db`: a database or a sharded collection, open or a
    path (see database.ingest for the options, and sharded.ingest)."""
    if hasattr(db, "shards") or (isinstance(db, (str, os.PathLike)) and is_collection(db)):
        return sharded.ingest(db, paths, **options)
    return database.ingest(db, paths, **options)
