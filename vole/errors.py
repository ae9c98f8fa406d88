"""Every error the Vole raises is a VoleError; each subclass says what went wrong."""

from __future__ import annotations


class VoleError(Exception):
    """Base of every Vole error."""


class ModelError(VoleError):
    """The model could not be reached or refused the request (after any retries)."""


class UnreachableError(ModelError):
    """The model endpoint cannot be reached at all (a wrong --base-url): every topic would
    fail the same way, so the run ends."""


class BackendError(VoleError):
    """The search backend cannot answer at all (unreachable server, closed database)."""


class DecisionError(VoleError, ValueError):
    """The model's answer is not a valid decision; the message says what is wrong."""


class InputError(VoleError):
    """A topics, run or qrels file that cannot be read: names the file and line."""
