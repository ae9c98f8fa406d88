"""The numba kernels (the only package that imports numba): the region algebra over
GC-lists (algebra.py), a ranking's all-of of word groups in the blocks' ranges
(groups.py), SSR's ranking in one call (ranked.py), the storage block codec
(codec.py), tokenizing (text.py), BM25's counting (scoring.py), recall's context score
(context.py), check's look at each block (checking.py), reading flat JSONL records
(jsonl.py) and a flush's layout of many lists (writing.py).

The modules are imported on first use of one of their names (`kernels.both_of`), not when
annodb is: numba takes a fifth of a second to import, and `annodb --help` or a command that
never runs a kernel should not pay it. Numba compiles a kernel the first time it runs and
caches it on disk (`cache=True`); `on_compile(callback)` calls back once, when the first
actual compilation (a cache miss) starts, so the command line can say why it is waiting.
"""

from __future__ import annotations

import importlib
import sys

_MODULES = {
    "algebra": ("normalize", "both_of", "one_of", "followed_by", "contained_in",
                "containing", "not_contained_in", "not_containing", "ssr", "ssr_touched",
                "top", "merge_ranked", "drop_erased", "merge_ranges", "block_ranges",
                "runs_at", "is_gc_list"),
    "groups": ("all_of_groups", "all_of_groups_packed", "ALL_OF_WIDTHS"),
    "text": ("token_spans", "intern_tokens", "intern_tokens_utf8", "number_words",
             "number_utf8", "LoneSurrogate"),
    "codec": ("encode_block", "block_bytes", "decode_block", "decode_blocks",
              "encode_point_groups", "append_point_groups", "block_bounds", "encode_blocks",
              "group_order", "group_postings", "BadBlock"),
    "scoring": ("document_frequencies", "merge_scores", "best_windows", "context_sums",
                "bm25_steps", "bm25_pick", "bm25_documents_top", "term_documents",
                "start_table", "term_cells", "add_cells", "FORMS_PER_CALL"),
    "ranked": ("ssr_top",),
    "checking": ("BlockChecker",),
    "jsonl": ("scan_flat", "write_documents", "CUT", "OTHER", "MORE", "END"),
    "context": ("word_counts", "context_scores"),
    "writing": ("join_groups",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = list(_WHERE) + ["on_compile", "compile_seconds"]

_callbacks: list = []
_listening = False
_compiling = [0, 0.0, 0.0]   # (compiles under way, when the outermost began, seconds so far)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _callbacks and not _listening:
        _listen()
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


def on_compile(callback) -> None:
    """Call `callback()` once, when numba first compiles a kernel in this process (rather
    than loading it from its cache)."""
    if callback not in _callbacks:
        _callbacks.append(callback)
    if "numba" in sys.modules and not _listening:
        _listen()


def compile_seconds() -> float:
    """The seconds this process has spent compiling kernels (rather than loading them from
    numba's cache) since it first called this or on_compile: a caller timing its work
    takes the difference of two calls, to tell the one-time compilation apart."""
    if not _listening:
        _listen()
    return _compiling[2]


def _listen() -> None:
    global _listening
    import time

    from numba.core import event

    class FirstCompile(event.Listener):
        def on_start(self, ev):
            if not _compiling[0]:
                _compiling[1] = time.perf_counter()
            _compiling[0] += 1     # (a kernel's callees compile inside its compilation)
            callbacks = list(_callbacks)
            _callbacks.clear()
            for callback in callbacks:
                callback()

        def on_end(self, ev):
            _compiling[0] -= 1
            if not _compiling[0]:
                _compiling[2] += time.perf_counter() - _compiling[1]

    _listening = True
    event.register("numba:compile", FirstCompile())
