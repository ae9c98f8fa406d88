"""annodb: an embedded, transactional agent-memory database (an annotative index on LMDB).

    import annodb
    db = annodb.open("memory.db")
    with db.write() as w:
        w.add("Goth rock grew out of post-punk.", docno="n1")
    with db.read() as r:
        hits = r.search("(^ goth rock)", k=10)
"""

from .database import Added, Database, Intervals, Snapshot, Stats, Writer, open
from .memory import Entry, Memory
from .errors import (AnnodbError, FormatVersionError, IngestError, NotFoundError, QueryError,
                     RankingError, StorageError, WriterBusyError)
from .storage import Document, DocField

__version__ = "0.1.0"

__all__ = [
    "open", "Database", "Snapshot", "Writer", "Intervals", "Added", "Stats", "Document",
    "DocField", "AnnodbError", "QueryError", "StorageError", "FormatVersionError",
    "WriterBusyError", "NotFoundError", "IngestError", "RankingError", "Memory", "Entry",
]
