"""Every error annodb raises is an AnnodbError; each subclass says what went wrong and the fix."""

from __future__ import annotations


class AnnodbError(Exception):
    """Base of every annodb error."""


class QueryError(AnnodbError):
    """A malformed query: names the character offset and what was expected there."""

    def __init__(self, message: str, offset: int, expected: str | None = None):
        self.message = message
        self.offset = offset
        self.expected = expected
        super().__init__(f"query error at offset {offset}: {message}")


class QueryCostError(AnnodbError):
    """A query stopped at its work or time budget: the message says which, and to make the
    query more selective."""


class StorageError(AnnodbError):
    """The database cannot be opened or written (format, permissions, damage)."""


class DamagedError(StorageError):
    """The database file is damaged (truncated, or its pages are not what LMDB wrote): the
    message says what was found; `annodb check` lists everything, and the fix is a copy."""


class ShardLostError(StorageError):
    """A shard's worker process or Ray actor ended (or was cut off) under a snapshot: the
    snapshot cannot go on, and the collection's next one has a new worker (or the
    restarted actor)."""


class FormatVersionError(StorageError):
    """The database was written by an incompatible version of annodb."""


class WriterBusyError(StorageError):
    """Another writer holds the database longer than the timeout allows."""


class NotFoundError(AnnodbError):
    """No document with that docno (or no such feature)."""


class IngestError(AnnodbError):
    """Input that cannot be ingested: names the file and line."""


class AbandonedWriteWarning(UserWarning):
    """A write transaction was garbage-collected without commit() or abort(): its writes were
    thrown away and its locks released. (A UserWarning, shown by default, not a
    ResourceWarning, which Python hides: writes lost without a word would be silent loss.)"""


class BadBlock(ValueError):
    """A stored block whose header does not match its bytes (a damaged database): raised by
    the block kernels, turned into DamagedError by storage."""


class RankingError(AnnodbError):
    """A ranking option that cannot be used (an unknown ranker, a parameter out of range, a
    field no document has): the message lists what can be given."""
