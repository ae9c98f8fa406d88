"""Where a database is: the default path, and what makes a directory a sharded collection
rather than one database (its manifest). The one place both kinds ask, so that database.py
need not import the shards to refuse one, nor each opener spell out the default."""

from __future__ import annotations

import os

DEFAULT_PATH = "annodb.db"   # the database when none is named and $ANNODB_DB is unset
MANIFEST = "manifest.json"   # a sharded collection's list of shards (see annodb.shards)
CREATING = "creating.json"   # a collection being made: its manifest-to-be (shards.create)


def default_path(path: str | os.PathLike | None = None) -> str | os.PathLike:
    """`path`, or when it is None: $ANNODB_DB, else ./annodb.db."""
    if path is None:
        return os.environ.get("ANNODB_DB") or DEFAULT_PATH
    return path


def is_collection(path) -> bool:
    """Whether `path` is a sharded collection (a directory holding a manifest), or one
    being made (its making interrupted: shards.open says so)."""
    path = os.fspath(path)
    return os.path.isfile(os.path.join(path, MANIFEST)) or \
        os.path.isfile(os.path.join(path, CREATING))
