"""The numba kernels (the only package that imports numba): the region algebra over
GC-lists (algebra.py), the storage block codec (codec.py), tokenizing (text.py) and BM25's
counting (scoring.py)."""

from .algebra import (both_of, contained_in, containing, drop_erased, followed_by,
                      is_gc_list, merge_ranges, normalize, not_contained_in, not_containing,
                      one_of, ssr, ssr_touched, top)
from .text import LoneSurrogate, intern_tokens, token_spans
from .codec import (append_point_groups, block_bounds, block_bytes, decode_block,
                    decode_blocks, encode_block, encode_point_groups, group_order,
                    group_postings)
from .scoring import best_windows, document_frequencies, merge_scores

__all__ = [
    "normalize", "both_of", "one_of", "followed_by", "contained_in", "containing",
    "not_contained_in", "not_containing", "ssr", "ssr_touched", "top", "drop_erased",
    "merge_ranges", "is_gc_list", "encode_block", "block_bytes", "decode_block",
    "decode_blocks", "encode_point_groups", "append_point_groups", "block_bounds",
    "group_order", "group_postings", "token_spans", "intern_tokens", "LoneSurrogate",
    "document_frequencies", "merge_scores", "best_windows",
]
