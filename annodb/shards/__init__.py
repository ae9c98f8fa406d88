"""A sharded collection: one collection over many annodb databases (ARCHITECTURE.md
"Shards"). `annodb.open` opens one as it opens one database; the rooms:

    collection.py    the collection: its manifest, shards, address counter, ShardedDatabase
    transactions.py  its read snapshot over every shard and its one-shard write transaction
    routing.py       which shard a document lives in; a shard's identity
    worker.py        one shard served to another process (fan_out="processes")
    split.py         one database split into a collection
    ray.py           the shards on Ray actors (`pip install 'annodb[ray]'`)
"""

from .collection import FAN_OUTS, ShardedDatabase, open
from .transactions import ShardedSnapshot, ShardedWriter

__all__ = ["open", "ShardedDatabase", "ShardedSnapshot", "ShardedWriter", "FAN_OUTS"]
