"""Where the benchmarks find things: this repository, the shared data directory (not in the
repository: ../shared beside it, or $ANNODB_SHARED), and work/ for what they build."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(REPO, "benchmarks")
WORK = os.path.join(BENCHMARKS, "work")
SHARED = os.environ.get("ANNODB_SHARED", os.path.join(REPO, "..", "shared"))
QUERIES = os.path.join(REPO, "tests", "data", "vole-queries.tsv")  # the real LLM queries


def shared(*parts: str) -> str:
    """A path inside the shared data directory."""
    return os.path.join(SHARED, *parts)
