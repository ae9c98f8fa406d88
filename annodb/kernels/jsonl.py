"""Numba kernels for the common JSONL record read without a Python object per record: a
flat object whose members are all strings (an id field and text fields), scanned from the
raw bytes of a batch's lines, and the batch's documents written as the msgpack a stored
document is.

`scan_flat` reads lines one after another while each is such a record it can prove it
reads exactly as msgspec and records.prepare would (anything else stops it: the caller
reads that line the ordinary way); `write_documents` writes the stored documents of the
records scanned (batch.make's tuples, as msgspec encodes them). The slow twins are the
ordinary path itself (formats, records, batch.make, storage.encode_relative), which
tests/test_flat_jsonl.py compares these with, byte for byte.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# why scan_flat stopped
CUT = 0        # the batch is full (batch_bytes or batch_size reached)
OTHER = 1      # the line at `next` is not a flat record of strings it can read
MORE = 2       # the bytes end inside a line (and the input does not end there)
END = 3        # every line was read (the input ends)



@njit(cache=True, nogil=True, inline="always")
def _skip_ws(buf, i, end):
    while i < end:
        c = buf[i]
        if c != 0x20 and c != 0x09 and c != 0x0D:
            break
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _hex(c):
    if 0x30 <= c <= 0x39:
        return np.int64(c - 0x30)
    if 0x61 <= c <= 0x66:
        return np.int64(c - 0x61 + 10)
    if 0x41 <= c <= 0x46:
        return np.int64(c - 0x41 + 10)
    return np.int64(-1)


@njit(cache=True, nogil=True)
def _u4(buf, i, end):
    """The value of the 4 hex digits at buf[i:i+4], or -1."""
    if i + 4 > end:
        return np.int64(-1)
    v = np.int64(0)
    for j in range(4):
        h = _hex(buf[i + j])
        if h < 0:
            return np.int64(-1)
        v = v * 16 + h
    return v


@njit(cache=True, nogil=True)
def _string(buf, i, end, nc, u8, nu):
    """Decode the JSON string whose opening quote is at buf[i - 1]: its UTF-8 to u8[nu:],
    nc counting its code points. Returns (index after the closing quote, nc, nu), or
    index -1 when it is not a string read exactly here (an invalid or overlong UTF-8
    sequence, an encoded or escaped surrogate, a control character, a bad escape, no
    closing quote)."""
    while i < end:
        c = np.int64(buf[i])
        if c == 0x22:
            return i + 1, nc, nu
        if c < 0x20:
            return -1, nc, nu
        if c < 0x80:
            if c == 0x5C:
                if i + 1 >= end:
                    return -1, nc, nu
                e = buf[i + 1]
                i += 2
                if e == 0x22 or e == 0x5C or e == 0x2F:
                    c = np.int64(e)
                elif e == 0x6E:
                    c = 10
                elif e == 0x74:
                    c = 9
                elif e == 0x72:
                    c = 13
                elif e == 0x62:
                    c = 8
                elif e == 0x66:
                    c = 12
                elif e == 0x75:
                    c = _u4(buf, i, end)
                    i += 4
                    if c < 0 or 0xDC00 <= c <= 0xDFFF:
                        return -1, nc, nu
                    if 0xD800 <= c <= 0xDBFF:   # a high surrogate: its low one must follow
                        if i + 6 > end or buf[i] != 0x5C or buf[i + 1] != 0x75:
                            return -1, nc, nu
                        lo = _u4(buf, i + 2, end)
                        if lo < 0xDC00 or lo > 0xDFFF:
                            return -1, nc, nu
                        i += 6
                        c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00)
                else:
                    return -1, nc, nu
                nc += 1
                if c < 0x80:
                    u8[nu] = c
                    nu += 1
                elif c < 0x800:
                    u8[nu] = 0xC0 | (c >> 6)
                    u8[nu + 1] = 0x80 | (c & 0x3F)
                    nu += 2
                elif c < 0x10000:
                    u8[nu] = 0xE0 | (c >> 12)
                    u8[nu + 1] = 0x80 | ((c >> 6) & 0x3F)
                    u8[nu + 2] = 0x80 | (c & 0x3F)
                    nu += 3
                else:
                    u8[nu] = 0xF0 | (c >> 18)
                    u8[nu + 1] = 0x80 | ((c >> 12) & 0x3F)
                    u8[nu + 2] = 0x80 | ((c >> 6) & 0x3F)
                    u8[nu + 3] = 0x80 | (c & 0x3F)
                    nu += 4
                continue
            nc += 1
            u8[nu] = c
            nu += 1
            i += 1
            continue
        # a multi-byte UTF-8 sequence, strictly (as Python decodes it)
        if 0xC2 <= c <= 0xDF:
            n, lo, hi = 1, 0x80, 0xBF
            v = c & 0x1F
        elif 0xE0 <= c <= 0xEF:
            n = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
            v = c & 0x0F
        elif 0xF0 <= c <= 0xF4:
            n = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
            v = c & 0x07
        else:
            return -1, nc, nu
        if i + n >= end:
            return -1, nc, nu
        b = np.int64(buf[i + 1])
        if b < lo or b > hi:
            return -1, nc, nu
        v = (v << 6) | (b & 0x3F)
        for j in range(2, n + 1):
            b = np.int64(buf[i + j])
            if b < 0x80 or b > 0xBF:
                return -1, nc, nu
            v = (v << 6) | (b & 0x3F)
        for j in range(n + 1):
            u8[nu + j] = buf[i + j]
        nu += n + 1
        nc += 1
        i += n + 1
    return -1, nc, nu


@njit(cache=True, nogil=True)
def _key(buf, i, end):
    """The end (the closing quote's index) of the key whose opening quote is at buf[i - 1],
    if it is printable ASCII without escapes; else -1."""
    while i < end:
        c = buf[i]
        if c == 0x22:
            return i
        if c < 0x20 or c > 0x7E or c == 0x5C:
            return -1
        i += 1
    return -1


@njit(cache=True, nogil=True)
def _same(buf, a, b, arena, x, y):
    if b - a != y - x:
        return False
    for j in range(b - a):
        if buf[a + j] != arena[x + j]:
            return False
    return True


@njit(cache=True, nogil=True)
def _scan_flat(buf, pos, end, eof, id_arena, id_bounds, forbid_arena, forbid_bounds,
               batch_bytes, batch_size, max_docno, keys, key_bounds, n_keys,
               docs_done, size_done, u8, docnos, f_key, f_cps, d_fields, d_u8,
               d_docno, d_bytes):
    n_docs = 0
    nf = 0
    nc = 0
    nu = 0
    nd = 0
    docs = docs_done
    size = size_done
    d_fields[0] = 0
    d_u8[0] = 0
    d_docno[0] = 0
    while True:
        if pos >= end:
            return n_docs, nf, nc, nu, nd, n_keys, pos, (END if eof else MORE)
        # the record, into the outputs after what is there (dropped if it cannot be read),
        # read up to its line's \n, at stop (or the input's end): no key, string or
        # separator holds a \n, so one ends the parse (a record on one line is read
        # whole before it; the line is not searched for it first)
        f0, c0, u0 = nf, nc, nu
        best = len(id_bounds)      # the id field found: its rank among the candidates
        id_a = id_b = id_f = id_u = id_key = -1
        ok = False
        i = _skip_ws(buf, pos, end)
        if i < end and buf[i] == 0x7B:
            i = _skip_ws(buf, i + 1, end)
            while i < end and buf[i] == 0x22:
                ka = i + 1
                kb = _key(buf, ka, end)
                if kb < 0:
                    break
                i = _skip_ws(buf, kb + 1, end)
                if i >= end or buf[i] != 0x3A:
                    break
                i = _skip_ws(buf, i + 1, end)
                if i >= end or buf[i] != 0x22:
                    break
                # the key's number (new keys interned); a repeated key is not read here
                k = -1
                for j in range(n_keys):
                    if _same(buf, ka, kb, keys, key_bounds[j], key_bounds[j + 1]):
                        k = j
                        break
                if k < 0:
                    if n_keys + 1 >= len(key_bounds) or \
                            key_bounds[n_keys] + kb - ka > len(keys):
                        break
                    base = key_bounds[n_keys]
                    for j in range(kb - ka):
                        keys[base + j] = buf[ka + j]
                    key_bounds[n_keys + 1] = base + kb - ka
                    k = n_keys
                    n_keys += 1
                repeated = k == id_key
                for j in range(f0, nf):
                    if f_key[j] == k:
                        repeated = True
                for j in range(len(forbid_bounds) - 1):
                    if _same(buf, ka, kb, forbid_arena, forbid_bounds[j],
                             forbid_bounds[j + 1]):
                        repeated = True
                if repeated:
                    break
                rank = len(id_bounds)
                for j in range(len(id_bounds) - 1):
                    if _same(buf, ka, kb, id_arena, id_bounds[j], id_bounds[j + 1]):
                        rank = j
                        break
                va = i + 1
                f_key[nf] = k
                cstart, ustart = nc, nu
                i, nc, nu = _string(buf, va, end, nc, u8, nu)
                if i < 0:
                    break
                if rank == 0:   # the first candidate: the id field, whatever follows, so
                    best = 0    # its string, the last written, is taken back at once
                    id_a, id_b = va, i - 1
                    id_f, id_key = -1, k
                    nc, nu = cstart, ustart
                else:
                    f_cps[nf] = nc - cstart
                    nf += 1
                    nc += 1        # each field followed by a newline (as batch.make joins them)
                    u8[nu] = 10
                    nu += 1
                    if rank < best:
                        best = rank
                        id_a, id_b = va, i - 1
                        id_f, id_u = nf - 1, ustart
                i = _skip_ws(buf, i, end)
                if i < end and buf[i] == 0x2C:
                    i = _skip_ws(buf, i + 1, end)
                    if i >= end or buf[i] != 0x22:
                        break
                    continue
                if i < end and buf[i] == 0x7D:
                    i = _skip_ws(buf, i + 1, end)
                    ok = i == end or buf[i] == 0x0A
                break
        if ok:
            stop = i
        else:   # (the line's end: is it whole?)
            stop = pos
            while stop < end and buf[stop] != 0x0A:
                stop += 1
        if stop == end and not eof:
            return n_docs, f0, c0, u0, nd, n_keys, pos, MORE
        nbytes = stop - pos + (1 if stop < end else 0)
        # the docno: a string without escapes, not empty, at most max_docno bytes
        if ok:
            ok = best < len(id_bounds) - 1 and 0 < id_b - id_a <= max_docno
            if ok:
                for j in range(id_a, id_b):
                    if buf[j] == 0x5C:
                        ok = False
                        break
        if not ok:
            return n_docs, f0, c0, u0, nd, n_keys, pos, OTHER
        # the id field is no text field: take it out of the fields written (the first
        # candidate's was never kept)
        if id_f >= 0:
            ilen = f_cps[id_f]
            iulen = id_b - id_a    # (no escapes: its UTF-8 is its bytes)
            for q in range(id_u + iulen + 1, nu):
                u8[q - iulen - 1] = u8[q]
            for j in range(id_f + 1, nf):
                f_key[j - 1] = f_key[j]
                f_cps[j - 1] = f_cps[j]
            nf -= 1
            nc -= ilen + 1
            nu -= iulen + 1
        for j in range(id_a, id_b):
            docnos[nd] = buf[j]
            nd += 1
        docnos[nd] = 10
        nd += 1
        n_docs += 1
        d_fields[n_docs] = nf
        d_u8[n_docs] = nu
        d_docno[n_docs] = nd
        d_bytes[n_docs - 1] = nbytes
        pos = stop + (1 if stop < end else 0)
        docs += 1
        size += nbytes
        if size >= batch_bytes or (batch_size > 0 and docs >= batch_size):
            return n_docs, nf, nc, nu, nd, n_keys, pos, CUT


@njit(cache=True, nogil=True, inline="always")
def _put_int(out, o, v):
    """msgpack's shortest form of the integer v (>= -32), as msgspec writes it."""
    if 0 <= v < 128 or -32 <= v < 0:
        out[o] = v & 0xFF
        return o + 1
    if v < 0x100:
        out[o] = 0xCC
        out[o + 1] = v
        return o + 2
    if v < 0x10000:
        out[o] = 0xCD
        out[o + 1] = v >> 8
        out[o + 2] = v & 0xFF
        return o + 3
    if v < 0x100000000:
        out[o] = 0xCE
        for j in range(4):
            out[o + 1 + j] = (v >> (24 - 8 * j)) & 0xFF
        return o + 5
    out[o] = 0xCF
    for j in range(8):
        out[o + 1 + j] = (v >> (56 - 8 * j)) & 0xFF
    return o + 9


@njit(cache=True, nogil=True, inline="always")
def _put_header(out, o, n, small, fix, b8, b16, b32):
    """A msgpack str or array header for length n (small: the fix form's limit; b8 0: no
    8-bit form)."""
    if n < small:
        out[o] = fix | n
        return o + 1
    if b8 and n < 0x100:
        out[o] = b8
        out[o + 1] = n
        return o + 2
    if n < 0x10000:
        out[o] = b16
        out[o + 1] = n >> 8
        out[o + 2] = n & 0xFF
        return o + 3
    out[o] = b32
    for j in range(4):
        out[o + 1 + j] = (n >> (24 - 8 * j)) & 0xFF
    return o + 5


@njit(cache=True, nogil=True, inline="always")
def _put_str(out, o, src, a, b):
    o = _put_header(out, o, b - a, 32, 0xA0, 0xD9, 0xDA, 0xDB)
    for j in range(b - a):
        out[o + j] = src[a + j]
    return o + b - a


@njit(cache=True, nogil=True, inline="always")
def _put_raw(out, o, src, a, b):
    for j in range(b - a):
        out[o + j] = src[a + j]
    return o + b - a


@njit(cache=True, nogil=True)
def _write_documents(docnos, d_docno, u8, d_u8, d_fields, ends, tokens, f_key, f_cs, f_ce,
                     f_fs, f_fe, shorts, short_bounds, paths, path_bounds, out):
    n = len(ends)
    o = _put_header(out, 0, n, 16, 0x90, 0, 0xDC, 0xDD)
    for d in range(n):
        out[o] = 0x97    # (docno, 0, end, text, fields, meta, tokens)
        o = _put_str(out, o + 1, docnos, d_docno[d], d_docno[d + 1] - 1)
        out[o] = 0
        o = _put_int(out, o + 1, ends[d])
        lo, hi = d_fields[d], d_fields[d + 1]
        o = _put_str(out, o, u8, d_u8[d], d_u8[d + 1] - (1 if hi > lo else 0))
        o = _put_header(out, o, hi - lo, 16, 0x90, 0, 0xDC, 0xDD)
        for f in range(lo, hi):
            k = f_key[f]
            out[o] = 0x96  # (short name, path, char start, char end, first, last)
            o = _put_raw(out, o + 1, shorts, short_bounds[k], short_bounds[k + 1])
            o = _put_raw(out, o, paths, path_bounds[k], path_bounds[k + 1])
            o = _put_int(out, o, f_cs[f])
            o = _put_int(out, o, f_ce[f])
            o = _put_int(out, o, f_fs[f])
            o = _put_int(out, o, f_fe[f])
        out[o] = 0x80    # no metadata: {}
        o = _put_int(out, o + 1, tokens[d])
    return o


def scan_flat(buf, pos: int, end: int, eof: bool, ids: list[bytes], forbid: list[bytes],
              batch_bytes: int, batch_size: int, max_docno: int, docs_done: int = 0,
              size_done: int = 0):
    """Read the lines of buf[pos:end] that are flat JSON objects of strings (see the
    module's docstring), from `pos` until the batch is full (batch_bytes of lines,
    batch_size records; counting docs_done and size_done read before), a line that is not
    one (or whose docno, the first of the keys `ids` it has, is not a string of 1 to
    max_docno bytes without escapes; or that has a key of `forbid`, or a key twice), or
    the end. Returns a dict of arrays: per record its fields (keys numbered in `keys`),
    each field's length in code points, the UTF-8 of all its fields each followed by a
    newline (`u8`: the text of record d is u8[d_u8[d]:d_u8[d + 1]] less its last
    newline), its docno's bytes followed by a newline, its line's length; and `next`
    (where it stopped) and `why` (CUT, OTHER, MORE, END)."""
    buf = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    if not 0 <= pos <= end <= len(buf):
        raise ValueError("pos and end must lie in the buffer")
    room = end - pos
    lines = room // 8 + 2                       # a record takes {"":""} at least
    id_arena, id_bounds = _arena(ids)
    forbid_arena, forbid_bounds = _arena(forbid)
    keys = np.empty(1 << 12, np.uint8)
    key_bounds = np.zeros(257, np.int64)
    u8 = np.empty(room + 1, np.uint8)
    docnos = np.empty(room + 1, np.uint8)
    f_key = np.empty(room // 6 + 2, np.int64)
    f_cps = np.empty(len(f_key), np.int64)
    d_fields = np.empty(lines + 1, np.int64)
    d_u8 = np.empty(lines + 1, np.int64)
    d_docno = np.empty(lines + 1, np.int64)
    d_bytes = np.empty(lines, np.int64)
    n, nf, nc, nu, nd, n_keys, stop, why = _scan_flat(
        buf, pos, end, eof, id_arena, id_bounds, forbid_arena, forbid_bounds, batch_bytes,
        batch_size, max_docno, keys, key_bounds, 0, docs_done, size_done, u8, docnos,
        f_key, f_cps, d_fields, d_u8, d_docno, d_bytes)
    names = [keys[key_bounds[k]:key_bounds[k + 1]].tobytes() for k in range(n_keys)]
    return {"docs": n, "keys": names, "f_key": f_key[:nf], "f_cps": f_cps[:nf],
            "code_points": nc, "u8": u8[:nu], "docnos": docnos[:nd],
            "d_fields": d_fields[:n + 1], "d_u8": d_u8[:n + 1], "d_docno": d_docno[:n + 1],
            "d_bytes": d_bytes[:n], "next": int(stop), "why": int(why)}


def _arena(words: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    bounds = np.zeros(len(words) + 1, np.int64)
    bounds[1:] = np.cumsum([len(w) for w in words]) if words else []
    arena = np.frombuffer(b"".join(words) or b"\0", dtype=np.uint8)
    return arena, bounds


def write_documents(scan: dict, ends, tokens, f_cs, f_ce, f_fs, f_fe, shorts: list[bytes],
                    paths: list[bytes]) -> bytes:
    """The msgpack array of the scanned records' stored documents (batch.make's tuples:
    docno, 0, end, text, its fields (short name, path, char start, char end, first and
    last address), no metadata, tokens), byte for byte as msgspec encodes them. `shorts`
    and `paths`: each key's name and path, msgpack-encoded already."""
    n = len(ends)
    nf = len(scan["f_key"])
    short_arena, short_bounds = _arena(shorts)
    path_arena, path_bounds = _arena(paths)
    widest = max(len(s) for s in shorts) + max(len(p) for p in paths) if nf else 0
    size = (5 + n * (1 + 5 + 1 + 9 + 5 + 5 + 1 + 9) + len(scan["docnos"]) + len(scan["u8"])
            + nf * (1 + widest + 4 * 9))
    out = np.empty(size, np.uint8)
    used = _write_documents(
        scan["docnos"], scan["d_docno"], scan["u8"], scan["d_u8"], scan["d_fields"],
        np.ascontiguousarray(ends, np.int64), np.ascontiguousarray(tokens, np.int64),
        scan["f_key"], np.ascontiguousarray(f_cs, np.int64),
        np.ascontiguousarray(f_ce, np.int64), np.ascontiguousarray(f_fs, np.int64),
        np.ascontiguousarray(f_fe, np.int64), short_arena, short_bounds, path_arena,
        path_bounds, out)
    return out[:used].tobytes()
