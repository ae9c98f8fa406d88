"""annodb: an embedded, transactional agent-memory database (an annotative index on LMDB).

    import annodb
    db = annodb.open("memory.db")
    with db.write() as w:
        w.add("Goth rock grew out of post-punk.", docno="n1")
    with db.read() as r:
        hits = r.search("(^ goth rock)", k=10)

The names below are imported on first use (`annodb.open`, `from annodb import Memory`), so
importing a submodule such as `annodb.errors` does not load the database and its
dependencies.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_WHERE = {
    "open": "collection", "Database": "database", "Snapshot": "database",
    "Writer": "database", "Intervals": "database", "Added": "database", "Stats": "database",
    "Entry": "memory", "Memory": "memory", "AsyncMemory": "async_memory",
    "AnnodbError": "errors", "FormatVersionError": "errors", "IngestError": "errors",
    "NotFoundError": "errors", "QueryError": "errors", "StorageError": "errors",
    "WriterBusyError": "errors", "DamagedError": "errors", "AbandonedWriteWarning": "errors",
    "QueryCostError": "errors", "RankingError": "errors", "ShardLostError": "errors",
    "Document": "storage", "DocField": "storage",
}

__all__ = [
    "open", "Database", "Snapshot", "Writer", "Intervals", "Added", "Stats", "Document",
    "DocField", "AnnodbError", "QueryError", "StorageError", "DamagedError", "FormatVersionError",
    "WriterBusyError", "NotFoundError", "IngestError", "AbandonedWriteWarning",
    "QueryCostError", "RankingError", "ShardLostError", "Memory", "AsyncMemory", "Entry",
]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:                    # a submodule: annodb.storage, annodb.ranking, ...
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
