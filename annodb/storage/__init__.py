"""Storage: an annodb database on LMDB, the only package importing lmdb. Its modules, one
for each part of the on-disk state, from the bottom up:

    layout.py       the on-disk format (its docstring documents every sub-database, key
                    and value, and the block layout), FORMAT_VERSION, the key and value
                    packing the other modules share
    verify.py       damage: the file's meta pages and pages checked at open and by
                    `annodb check`, and what a transaction meeting damage raises
    environment.py  an LMDB environment opened and closed, its lock files, fork handling,
                    the compressing thread, the map, compacted and rebuilt copies
    features.py     Txn's base: the state its parts share, meta, feature names
    counts.py       Txn's counts and changes: what a commit records of each list
    postings.py     Txn's annotation lists: blocks and tails
    documents.py    stored documents, their zstd groups, and Txn's docs, docnos and
                    erased ranges
    txn.py          Txn: the parts composed, begin, commit and abort, damage checked

The names below are the ones the rest of annodb uses; `from annodb.storage import X` and
`storage.X` keep working for them.
"""

from .documents import (DocField, Document, decode_docs, encode_doc, encode_docs,
                        encode_relative, relative_raw, split_raws)
from .environment import (MAP_SIZE, Environment, WriterLock, close_environment,
                          copy_compacted, copy_rebuilt, disk_size, explain_write_error,
                          open_environment, page_problems, release_mapped_pages, seconds,
                          stop_threads)
from .layout import (ANNOTATION_BLOCK, BLOCK_BYTES, BLOCK_SIZE, FLAG_POINTS, FLAG_ZERO,
                     FORMAT_VERSION, GROUP_DOCS, MAX_ADDRESS, MAX_KEY, NO_STATS, OVERLAPPING,
                     READS_FORMATS, TAG_DOC, TAG_GROUP, TAG_REL_DOC, TAG_REL_GROUP, TAG_ZDOC,
                     UNKNOWN, BadValue, block_limits, check_address, check_format,
                     decode_block, encode_block, from_u64, name_key, u64, utf8, zero_values)
from .txn import Txn
from .verify import damaged, file_problems

__all__ = [
    "ANNOTATION_BLOCK", "BLOCK_BYTES", "BLOCK_SIZE", "FLAG_POINTS", "FLAG_ZERO",
    "FORMAT_VERSION", "GROUP_DOCS", "MAP_SIZE", "MAX_ADDRESS", "MAX_KEY", "NO_STATS",
    "OVERLAPPING", "READS_FORMATS", "TAG_DOC", "TAG_GROUP", "TAG_REL_DOC", "TAG_REL_GROUP",
    "TAG_ZDOC", "UNKNOWN", "BadValue", "DocField", "Document", "Environment", "Txn",
    "WriterLock", "block_limits", "check_address", "check_format", "close_environment",
    "copy_compacted", "copy_rebuilt", "damaged", "decode_block", "decode_docs", "disk_size",
    "encode_block", "encode_doc", "encode_docs", "encode_relative",
    "explain_write_error", "file_problems", "from_u64", "name_key", "open_environment",
    "page_problems", "relative_raw", "release_mapped_pages", "seconds", "split_raws",
    "stop_threads", "u64", "utf8", "zero_values",
]
