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


class FormatVersionError(StorageError):
    """The database was written by an incompatible version of annodb."""


class WriterBusyError(StorageError):
    """Another writer holds the database longer than the timeout allows."""


class NotFoundError(AnnodbError):
    """No document with that docno (or no such feature)."""


class IngestError(AnnodbError):
    """Input that cannot be ingested: names the file and line."""


class RankingError(AnnodbError):
    """A ranking option that cannot be used (an unknown ranker, a parameter out of range, a
    field no document has): the message lists what can be given."""
