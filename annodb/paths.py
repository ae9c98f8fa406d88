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


# what a database directory holds (a database begun, not made, has the lock files first;
# another process may make data.mdb, or a collection's files, while one looks)
OWN_FILES = frozenset({"data.mdb", "lock.mdb", "writer.lock", "turnstile.lock",
                       "create.lock", MANIFEST, CREATING})


def foreign_files(path) -> list[str]:
    """The names in directory `path` that are neither a database's nor a collection's, when
    it is neither (an empty list: `path` is missing, a database, a collection, or a
    directory only a database begun there left files in): a directory a database would be
    made in among other files, which a mistyped --db (the home folder, a project) names."""
    path = os.fspath(path)
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, "data.mdb")) \
            or is_collection(path):
        return []
    return sorted(set(os.listdir(path)) - OWN_FILES)


def database_of_file(path) -> str | None:
    """The database directory `path` is a file of (`notes.db/data.mdb`, what tab
    completion or a file manager gives for the database), or None."""
    path = os.fspath(path)
    if os.path.isfile(path) and os.path.exists(os.path.join(os.path.dirname(path),
                                                            "data.mdb")):
        return os.path.dirname(path) or "."
    return None
