"""A Python child process running this same annodb: an ingest's readers and writers, a
shard's worker, a server's worker processes.

    subprocess.Popen(children.command("from annodb.shard_worker import main; main()"),
                     env=children.environment())

The child imports the annodb its parent imported: this package's directory goes first on
its PYTHONPATH, and `-P` keeps the child's working directory off its path (`python -c`
puts it first). Without it, a command run from a directory holding another annodb (a
checkout beside an installed copy) started children of the other version: a shard's worker
of a newer checkout took the installed server's requests and died on them.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds this annodb


def command(code: str) -> list[str]:
    """The argv of a child running `code` (`python -c`) with this annodb."""
    return [sys.executable, "-P", "-c", code]


def environment(env: dict | None = None) -> dict:
    """`env` (default: this process's environment) with this annodb first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    return env
