"""Damage: what an annodb finds wrong with a database file, at open and in `annodb check`
(its meta pages and length, then every page, without letting LMDB read it), and what a
transaction meeting damage while it reads raises (the class decorator damage_is_an_error,
applied to storage.txn.Txn).

LMDB keeps no checksums and trusts its file: a truncated file is a SIGBUS when a page past
its end is read, a damaged tree page can make LMDB abort (an assertion) or read out of
bounds. So before LMDB touches an existing file, its two meta pages are checked (magic,
version, page size, the committed one's txnid parity and roots) and its length against the
last page the committed meta uses; a database file of at most VERIFY_AT_OPEN bytes is then
verified page by page (lmdb.verify: every reachable page, key order, counters, the free
list; pure Python, it cannot crash), a larger one only by `annodb check`. What LMDB or
annodb then meets while reading (an LMDB corruption error, a value that does not decode, a
block whose header does not match it) is a StorageError saying the database is damaged; a
write transaction that meets it writes nothing.
"""

from __future__ import annotations

import functools
import inspect
import os
import struct
import zlib
from collections.abc import Callable
from typing import TypeVar

import lmdb
import lmdb.verify
import msgspec
import zstandard

from ..errors import BadBlock, DamagedError
from .layout import BadValue

VERIFY_AT_OPEN = 8 << 20  # ~0.1 s of lmdb.verify (about 90 MB/s)
_P_META = 0x08
_P_INVALID = (1 << 64) - 1
_META = struct.Struct("<IIQQ48s48sQQ")  # magic, version, address, mapsize, free, main, last, txn
_ENGINES = {16: 1, 24: 3}  # page-header size -> LMDB data version (0.9: 1, 1.0: 3)


def damaged(path: str, what: str) -> DamagedError:
    return DamagedError(f"{path}: the database is damaged: {what}; run `annodb check --db "
                        f"{path}` for the details, and restore it from a copy")


def file_problems(real: str) -> tuple[list[str], bool]:
    """(problems, truncated) of data.mdb found without LMDB, from its meta pages and its
    length: the committed meta's last page must lie in the file (else a full page-by-page
    verification decides: LMDB may leave free pages at the end unwritten)."""
    data = os.path.join(real, "data.mdb")
    try:
        with open(data, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(65536 * 2)
    except OSError as err:
        return [f"data.mdb cannot be read: {err.strerror}"], False
    if size < 2 * 512:
        return [f"data.mdb is {size:,} bytes, shorter than two LMDB meta pages "
                "(truncated)"], True
    hdr = next((h for h in _ENGINES if head[h:h + 4] == b"\xde\xc0\xef\xbe"), None)
    if hdr is None:
        return ["meta page 0 is not an LMDB meta page (no magic number)"], False
    metas: list[tuple[int, int, int, list[int]]] = []
    for i in (0, 1):
        psize = metas[0][1] if metas else 0
        at = i * psize
        if at + hdr + _META.size > len(head):
            return [f"meta page 1 lies past the end of the file ({size:,} bytes)"], True
        magic, version, _, _, free, main, last, txnid = _META.unpack_from(head, at + hdr)
        flags = int.from_bytes(head[at + hdr - 6:at + hdr - 4], "little")
        if magic != 0xBEEFC0DE or not flags & _P_META:
            return [f"meta page {i} is not an LMDB meta page"], False
        if version != _ENGINES[hdr]:
            return [f"meta page {i} has LMDB data version {version}, not {_ENGINES[hdr]}"], False
        psize = int.from_bytes(free[:4], "little")
        if i == 0 and (psize < 512 or psize > 65536 or psize & (psize - 1)):
            return [f"meta page 0 gives the page size {psize}"], False
        roots = [int.from_bytes(d[40:48], "little") for d in (free, main)]
        metas.append((txnid, psize, last, roots))
    if metas[1][1] != metas[0][1]:
        return [f"the meta pages disagree on the page size ({metas[0][1]}, {metas[1][1]})"], False
    problems = [f"meta page {i} has txnid {m[0]}, of the wrong parity"
                for i, m in enumerate(metas) if m[0] and m[0] % 2 != i]
    txnid, psize, last, roots = max(metas)
    if any(r != _P_INVALID and not 2 <= r <= last for r in roots):
        problems.append(f"the committed meta page's roots {roots} are not pages 2..{last}")
    if problems:
        return problems, False
    if size < (last + 1) * psize:
        found = _verify(real)
        if found:
            return [f"data.mdb is {size:,} bytes, but the committed state uses pages up to "
                    f"byte {(last + 1) * psize:,} (truncated)"] + found[:5], True
    return [], False


def _verify(real: str) -> list[str]:
    """lmdb.verify's findings for data.mdb (every reachable page checked; no LMDB)."""
    try:
        return lmdb.verify.verify(real, subdir=True)
    except lmdb.verify.VerifyError as err:
        return [str(err)]
    except OSError as err:
        return [f"data.mdb cannot be read: {err.strerror}"]


def _verified_pinned(env, real: str) -> list[str]:
    """_verify while a read transaction pins the pages of the committed state (so a writer
    committing meanwhile reuses none of them); findings are confirmed by a second pass, so a
    meta page caught mid-write is not taken for damage."""
    for _attempt in (0, 1):
        txn = env.begin()
        try:
            found = _verify(real)
        finally:
            txn.abort()
        if not found:
            return []
    return found


def check_file_at_open(path: str, real: str) -> None:
    """DamagedError when data.mdb's meta pages or length are wrong (file_problems): before
    LMDB opens it."""
    problems, truncated = file_problems(real)
    if problems:
        if truncated:
            raise DamagedError(f"{path}: the database file is truncated: "
                               f"{problems[0].removesuffix(' (truncated)')}; restore "
                               "it from a copy")
        raise damaged(path, problems[0])


def check_pages_at_open(path: str, real: str, env: lmdb.Environment, unlocked: bool) -> None:
    """DamagedError when a database file of at most VERIFY_AT_OPEN bytes has a damaged
    page (every page verified; `unlocked`: read without lock.mdb, no reader slot to pin the
    pages with, while a shared flock holds writers off)."""
    if os.path.getsize(os.path.join(real, "data.mdb")) <= VERIFY_AT_OPEN:
        found = _verify(real) if unlocked else _verified_pinned(env, real)
        if found:
            raise damaged(path, found[0] + (f" (and {len(found) - 1} more problems)"
                                            if len(found) > 1 else ""))


# What reading a damaged database raises: LMDB's corruption errors (and the error state
# they leave the transaction in), values that do not decode, blocks whose header does not
# match them.
_DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadTxnError, lmdb.InvalidError,
           lmdb.PanicError, lmdb.BadValsizeError, msgspec.DecodeError, struct.error,
           zlib.error, zstandard.ZstdError, UnicodeDecodeError, BadBlock, BadValue)


def _damage_is_an_error(method):
    """The Txn method, with damage met while it reads turned into DamagedError (and the
    environment marked, so no write transaction begins in it afterwards)."""
    def seen(txn, err):
        message = damaged(txn.env.path, f"{type(err).__name__}: {err}")
        txn.env.damage = str(message).split("; run `annodb check")[0]  # (without the advice)
        return message

    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                yield from method(self, *args, **kwargs)
            except _DAMAGE as err:
                raise seen(self, err) from None
    else:
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except _DAMAGE as err:
                raise seen(self, err) from None
    return wrapper


T = TypeVar("T")


def damage_is_an_error(*unchecked: str) -> Callable[[type[T]], type[T]]:
    """A class decorator: every method of the class, its bases' included, but those named
    in `unchecked`, replaced on the class by _damage_is_an_error of it: damage met while it
    reads (_DAMAGE) is a DamagedError, and the environment is marked damaged, so no write
    transaction begins in it afterwards. A method calling another goes through both
    wrappers; the inner one's DamagedError passes the outer one as it is."""
    def decorate(cls: type[T]) -> type[T]:
        names = {name: None for k in reversed(cls.__mro__[:-1]) for name in vars(k)}
        for name in names:
            method = next(vars(k)[name] for k in cls.__mro__ if name in vars(k))
            if inspect.isfunction(method) and name not in unchecked:
                setattr(cls, name, _damage_is_an_error(method))
        return cls
    return decorate
