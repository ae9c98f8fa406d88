"""How an ingesting process runs (the one-database writer and its reading process, a
sharded ingest's readers and writers): glibc's malloc told to keep freed memory, Python's
cyclic garbage collector off, and Ctrl-C noted rather than raised wherever it lands."""

from __future__ import annotations

import contextlib
import gc
import signal
import sys
import threading

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt options
GLIBC_DEFAULTS = {_M_TRIM_THRESHOLD: 128 << 10, _M_TOP_PAD: 128 << 10,
                  _M_MMAP_THRESHOLD: 128 << 10}
INGEST_MALLOC = {_M_TRIM_THRESHOLD: (1 << 31) - 1, _M_TOP_PAD: 32 << 20,
                 _M_MMAP_THRESHOLD: 32 << 20}  # (C ints: ctypes wraps a larger one silently)


def _libc():
    """glibc's handle, or None elsewhere (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):
        return None


def set_malloc(options: dict) -> bool:
    """glibc's mallopt for each option (INGEST_MALLOC for the life of a reading process,
    or GLIBC_DEFAULTS back); whether every one was taken (False off glibc)."""
    libc = _libc()
    if libc is None:
        return False
    return all(libc.mallopt(k, v) == 1 for k, v in options.items())


def set_hugepages(enabled: bool) -> bool | None:
    """numpy's madvise(MADV_HUGEPAGE) of each big array (4 MB and up) on or off; whether
    it was on (None: this numpy has no such switch). An ingest turns it off: most of its
    big arrays are fresh mappings (over INGEST_MALLOC's 32 MB mmap threshold) or partly
    written, and the kernel zeroes a huge page's 2 MB whole at its first touch (in the
    1x ingest, ~6% of the writer's CPU samples were clear_page_erms under
    do_huge_pmd_anonymous_page)."""
    try:
        from numpy._core import multiarray
    except ImportError:
        return None
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    return None if switch is None else bool(switch(enabled))


@contextlib.contextmanager
def keep_freed_memory():
    """glibc's malloc told to keep freed memory for reuse for the duration: arrays up to 32
    MB from the heap instead of fresh mmaps, and no trimming. Every flush allocates and
    frees hundreds of MB of arrays; by default each big one is a fresh mapping whose pages
    the kernel faults in and zeroes, and frees unmap them again. On the scale corpus this
    took the writer's system time from 7.2 to 3.7 s (wall 36.9 -> 31.5 s). numpy's huge
    pages are off too (see set_hugepages). Afterwards the defaults are back and the heap
    is trimmed, so the memory returns to the system."""
    tuned = set_malloc(INGEST_MALLOC)
    huge = set_hugepages(False)
    try:
        yield
    finally:
        if huge:
            set_hugepages(True)
        if tuned:
            set_malloc(GLIBC_DEFAULTS)
            _libc().malloc_trim(0)


@contextlib.contextmanager
def ctrl_c_noted():
    """Ctrl-C (SIGINT) noted for the duration, not raised wherever it lands: raised inside a
    numba kernel or a commit, KeyboardInterrupt came out as another error (a SystemError, a
    "commit failed"). The ingest stops between two records or batches instead (the Event
    yielded is set); a second Ctrl-C raises at once. Only where Python's default handler is
    in place (the main thread, no handler of the caller's own); else yields None."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield None
        return
    stop = threading.Event()

    def noted(signum, frame):
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, noted)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def no_cyclic_gc():
    """Python's cyclic garbage collector off for the duration: an ingest allocates millions
    of small containers (records, fields, documents) and makes no reference cycles, and the
    collections those allocations trigger cost more than the work (unpickling a batch's
    documents took 8x longer with it on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
