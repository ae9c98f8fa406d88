"""Where a document of a sharded collection lives: the shard its docno routes to (its
annotations, notes and judgments go with it; see shards.py), the shards' names, and the
manifest that makes a directory a sharded collection."""

from __future__ import annotations

import hashlib
import os

MANIFEST = "manifest.json"


def is_collection(path) -> bool:
    """Whether `path` is a sharded collection (a directory holding a manifest)."""
    return os.path.isfile(os.path.join(os.fspath(path), MANIFEST))


def route(docno: str, shards: int) -> int:
    """The shard of a document: its docno's SHA-1, first 8 bytes big-endian, mod shards."""
    digest = hashlib.sha1(docno.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_name(i: int) -> str:
    return f"shard-{i:03d}"
