"""Open a collection of either kind: one database (database.py) or a sharded collection
(annodb.shards), with the same API. This is `annodb.open`.

    db = annodb.open("memory.db")                  # one database, created if missing
    db = annodb.open("web.shards", shards=4)       # a sharded collection of 4 shards
"""

from __future__ import annotations

import os

from . import database
from .shards import collection as _shards
from .paths import default_path, is_collection


def open(path: str | os.PathLike | None = None, *, readonly: bool = False,
         create: bool = True, timeout: float = 30.0,
         cache_bytes: int | None = None, fold_diacritics: bool | None = None,
         shards: int | None = None, fan_out: str | None = None,
         spin: float | None = None):
    """Open the database at `path` (default: $ANNODB_DB or ./annodb.db), creating it unless
    `readonly` or `create=False`. `timeout` bounds how long a writer waits for another.
    `cache_bytes` is the budget of decoded lists this process keeps for its snapshots
    (default 256 MiB; every opening of one path in a process shares one cache, and the
    last budget given applies), and three times it the budget of the documents kept
    for BM25's words. `fold_diacritics=True` makes a new (empty) database fold
    diacritics in its words and queries (tokenizer.strip_diacritics: `cafe` finds `Café`),
    recorded in it for good; a database that holds content keeps what it was created with
    (asking for another is an error). None: as recorded.

    A sharded collection (a directory holding manifest.json, see annodb.shards) opens as a
    ShardedDatabase, with the same API; `shards=N` creates one of N shards when `path` is
    missing; `fan_out` ("sequential", "threads" or "processes") how its queries run over
    the shards, `spin` how long its processes poll for a message before they sleep (see
    ShardedDatabase; one database ignores both)."""
    path = default_path(path)
    if shards is not None or is_collection(path):
        return _shards.open(path, shards=shards, readonly=readonly, create=create,
                            timeout=timeout, cache_bytes=cache_bytes,
                            fold_diacritics=fold_diacritics,
                            fan_out=fan_out or "sequential", spin=spin)
    return database.open(path, readonly=readonly, create=create, timeout=timeout,
                         cache_bytes=cache_bytes, fold_diacritics=fold_diacritics)
