"""A Python child process running this same annodb: an ingest's readers and writers, a
shard's worker, a server's worker processes.

    subprocess.Popen(children.command("from annodb.shards.worker import main; main()"),
                     env=children.environment())

The child imports the annodb its parent imported: this package's directory goes first on
its PYTHONPATH, and `-P` keeps the child's working directory off its path (`python -c`
puts it first). Without it, a command run from a directory holding another annodb (a
checkout beside an installed copy) started children of the other version: a shard's worker
of a newer checkout took the installed server's requests and died on them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, Protocol, cast

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds this annodb


def command(code: str) -> list[str]:
    """The argv of a child running `code` (`python -c`) with this annodb."""
    return [sys.executable, "-P", "-c", code]


def environment(env: dict | None = None) -> dict:
    """`env` (default: this process's environment) with this annodb first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    return env


class Erring(Protocol):
    """A child process whose stderr is kept in the temporary file `errors`."""

    errors: IO[bytes]


class Child(subprocess.Popen):
    """A child of start(): a subprocess.Popen whose stderr goes to the temporary file
    `errors` (replacing Popen's own `errors`, the text-mode error handler, which Popen reads
    only while it starts the child)."""

    errors: IO[bytes]


def start(code: str, args: Sequence[str] = (), **popen) -> Child:
    """A child running `code` with this annodb, its stderr kept in a temporary file for
    said() (the child's `errors`); `popen`, more of subprocess.Popen's arguments."""
    errors = tempfile.TemporaryFile()
    try:
        child = Child(command(code) + list(args), stderr=errors, env=environment(), **popen)
    except BaseException:
        errors.close()
        raise
    child.errors = errors
    return child


def said(child: subprocess.Popen | Erring) -> str:
    """": " and the last line a child of start() (or another holding its stderr in
    `errors`) wrote on stderr (its death's message), or "" when it wrote none."""
    errors = cast(Erring, child).errors   # (callers may hold it as a plain Popen)
    try:
        errors.seek(0)
        lines = errors.read().decode("utf-8", "replace").strip().splitlines()
        return f": {lines[-1]}" if lines else ""
    except (OSError, ValueError):
        return ""
