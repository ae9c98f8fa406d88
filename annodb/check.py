"""Check: verify every invariant of a database's stored state (see storage.py's header).

    problems = check(annodb.open("bible.db", readonly=True))   # [] when healthy

What is verified, in one read snapshot:

- meta: format and tokenizer versions present; counters are non-negative integers.
- features <-> names: the two maps are exact inverses; every id is below next_feature.
- blocks: every block decodes and is exactly as long as its header says; it holds 1 to
  BLOCK_SIZE intervals; its key is its first start; its feature id is known. Within each
  feature, across its blocks, 0 <= start <= end and both starts and ends strictly increase
  (sorted, no nesting, no duplicates). (Annotations may lie past next_address: the API lets
  a writer annotate addresses that hold no content yet.)
- documents: each docs entry decodes (a group: to one or more documents, starts
  ascending); a single document's key is its start, a group's key is at most its first
  start and after the previous entry's last end; 0 <= start <= end < next_address; no two
  overlap; docs and docnos agree exactly; meta's document and token counts match, those of
  the collection (container `:`) and those of the documents kept apart (notes) each.
- erased: each range has start <= end and they are sorted and disjoint.
- the `:` list, with erased intervals dropped, is exactly the ranges of the live documents
  of the collection; every document kept apart has an interval of its container (e.g.
  `note:`) over its range.

It reads everything, so it takes time proportional to the database's size.
"""

from __future__ import annotations

import numpy as np

from . import kernels, storage
from .database import DOCUMENT

MAX_PROBLEMS = 1000  # stop collecting details after this many


class _Problems(list):
    def add(self, message: str) -> None:
        if len(self) < MAX_PROBLEMS:
            self.append(message)
        elif len(self) == MAX_PROBLEMS:
            self.append("... more problems not listed")


def check(db) -> list[str]:
    """The problems found in `db` (an open Database): an empty list when it is healthy."""
    if hasattr(db, "shards"):   # a sharded collection checks each shard, then across them
        return db.check()
    problems = _Problems()
    with db.read() as snapshot:
        txn = snapshot._txn
        next_address = _check_meta(txn, problems)
        ids = _check_features(txn, problems)
        _check_blocks(txn, ids, problems)
        docs = _check_documents(txn, next_address, problems)
        erased = _check_erased(txn, problems)
        _check_document_list(txn, docs, erased, problems)
    return list(problems)


def _check_meta(txn, problems) -> int:
    for key in ("format", "tokenizer"):
        if txn.meta(key) is None:
            problems.add(f"meta: no {key!r} entry")
    values = {}
    for key in ("next_address", "next_feature", "documents", "tokens"):
        value = txn.meta(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.add(f"meta: {key!r} is {value!r}, not a non-negative integer")
            value = 0
        values[key] = value
    return values["next_address"]


def _check_features(txn, problems) -> dict[int, str]:
    """The id -> name map, after checking it against name -> id."""
    by_name = {}  # the features key (the name, or a long name's hashed key) -> id
    for name, fid in txn.features():
        by_name[name] = fid
    by_id = {}
    with txn.txn.cursor(db=txn.dbs["names"]) as cur:
        for key, value in cur:
            if len(key) != 8:
                problems.add(f"names: key of {len(key)} bytes, not 8")
                continue
            try:
                by_id[storage.from_u64(key)] = bytes(value).decode()
            except UnicodeDecodeError:
                problems.add(f"names: id {storage.from_u64(key)} has a name that is not UTF-8")
    next_feature = txn.meta("next_feature", 1)
    keys = {fid: storage.name_key(name).decode() for fid, name in by_id.items()}
    for name, fid in by_name.items():
        if keys.get(fid) != name:
            problems.add(f"features: {name!r} -> id {fid}, but names has id {fid} -> "
                         f"{by_id.get(fid)!r}")
        if isinstance(next_feature, int) and fid >= next_feature:
            problems.add(f"features: {name!r} has id {fid}, not below next_feature "
                         f"{next_feature}")
    for fid, name in by_id.items():
        if by_name.get(keys[fid]) != fid:
            problems.add(f"names: id {fid} -> {name!r}, but features has {name!r} -> "
                         f"{by_name.get(name)!r}")
    return by_id


def _block_size(buf, max_count: int) -> tuple[int, str | None]:
    """(interval count, a problem with the block's layout or None)."""
    if len(buf) < storage._HEADER.size:
        return 0, f"{len(buf)} bytes, shorter than a block header"
    flags, sw, lw, n, _ = storage._HEADER.unpack_from(buf, 0)
    if flags & ~(storage.FLAG_POINTS | storage.FLAG_ZERO):
        return n, f"unknown flags {flags:#x}"
    if n < 1 or n > max_count:
        return n, f"holds {n} intervals (allowed 1 to {max_count})"
    size = kernels.block_bytes(bytes(buf[:16]))
    if size is None:
        return n, f"bad widths {sw}/{lw}"
    if size != len(buf):
        return n, f"is {len(buf)} bytes, its header says {size}"
    return n, None


def _check_blocks(txn, names, problems) -> None:
    fid_prev = None
    last_start = last_end = -1
    name = ""
    lengths: dict[int, int] = {}
    overlapping: set[int] = set()  # lists two of whose intervals overlap
    for fid, key_start, buf in txn.all_blocks():
        lengths[fid] = lengths.get(fid, 0) + storage._HEADER.unpack_from(buf, 0)[3]
        if fid != fid_prev:
            fid_prev = fid
            last_start = last_end = -1
            name = names.get(fid)
            if name is None:
                problems.add(f"blocks: feature id {fid} has blocks but no name")
                name = f"#{fid}"
        where = f"blocks: {name!r} block at {key_start}"
        _, bad = _block_size(buf, max(storage.BLOCK_SIZE, txn.block_count))
        if bad:
            problems.add(f"{where} {bad}")
            continue
        try:
            starts, ends, _ = storage.decode_block(buf)
        except Exception as err:  # any failure to decode is damage
            problems.add(f"{where} does not decode: {err}")
            continue
        if int(starts[0]) != key_start:
            problems.add(f"{where}: its first start is {int(starts[0])}")
        if starts[0] < 0:
            problems.add(f"{where}: negative start {int(starts[0])}")
        if (ends < starts).any():
            problems.add(f"{where}: an interval ends before it starts")
        if len(starts) > 1 and (np.diff(starts) <= 0).any():
            problems.add(f"{where}: starts do not strictly increase")
        if len(ends) > 1 and (np.diff(ends) <= 0).any():
            problems.add(f"{where}: ends do not strictly increase (nested intervals)")
        if starts[0] <= last_start:
            problems.add(f"{where}: starts at {int(starts[0])}, not after the previous "
                         f"block's last start {last_start}")
        if ends[0] <= last_end:
            problems.add(f"{where}: first end {int(ends[0])} is not after the previous "
                         f"block's last end {last_end} (nested or out of order)")
        if starts[0] <= last_end or (len(starts) > 1 and (starts[1:] <= ends[:-1]).any()):
            overlapping.add(fid)
        last_start, last_end = int(starts[-1]), int(ends[-1])
    with txn.txn.cursor(db=txn.dbs["counts"]) as cur:
        counts = {}
        for k, v in cur:
            if len(v) not in (8, 17):
                problems.add(f"counts: feature {storage.from_u64(k)} has a value of "
                             f"{len(v)} bytes (8 or 17 expected)")
                continue
            fid = storage.from_u64(k)
            counts[fid], _, flags = storage._count_value(v)
            if fid in overlapping and not flags:
                problems.add(f"counts: feature {names.get(fid, fid)!r} is marked as holding "
                             "no overlapping intervals, but two of them overlap")
    for fid in sorted(set(counts) | set(lengths)):
        if counts.get(fid, 0) != lengths.get(fid, 0):
            problems.add(f"counts: feature {names.get(fid, fid)!r} is counted "
                         f"{counts.get(fid, 0)} but its list holds {lengths.get(fid, 0)}")


_GROUPS = (storage.TAG_GROUP, storage.TAG_REL_GROUP)


def _check_documents(txn, next_address, problems) -> list[tuple[int, int, str, str]]:
    """(start, end, docno, container) of every document that decodes, in address order."""
    docs = []
    tokens = apart = apart_tokens = 0
    prev_end, prev_docno = -1, None
    for key, value in txn.docs_entries():
        key_start = storage.from_u64(key) if len(key) == 8 else None
        kind = value[0] if len(value) else None
        try:
            entry = storage.decode_docs(value, key_start or 0)
        except Exception as err:  # any failure to decode is damage
            what = "group" if kind in _GROUPS else "document"
            problems.add(f"docs: the {what} at {key_start} does not decode: {err}")
            continue
        if not entry:
            problems.add(f"docs: the group at {key_start} is empty")
            continue
        if kind in _GROUPS:
            first = entry[0]
            if key_start is None or key_start > first.start:
                problems.add(f"docs: the group at {key_start} holds {first.docno!r} starting "
                             f"at {first.start}, before its key")
            if key_start is not None and key_start <= prev_end:
                problems.add(f"docs: the group at {key_start} is keyed inside {prev_docno!r} "
                             f"(ending at {prev_end})")
        for doc in entry:
            where = f"docs: {doc.docno!r}"
            if kind not in _GROUPS and key_start != doc.start:
                problems.add(f"{where} is stored under {key_start} but starts at {doc.start}")
            if not 0 <= doc.start <= doc.end:
                problems.add(f"{where} has the bad range [{doc.start}, {doc.end}]")
            if doc.end >= next_address:
                problems.add(f"{where} ends at {doc.end}, at or past next_address "
                             f"{next_address}")
            if doc.start <= prev_end:
                problems.add(f"{where} [{doc.start}, {doc.end}] overlaps {prev_docno!r}")
            prev_end, prev_docno = max(prev_end, doc.end), doc.docno
            if doc.container == DOCUMENT:
                tokens += doc.tokens
            else:
                apart += 1
                apart_tokens += doc.tokens
            docs.append((doc.start, doc.end, doc.docno, doc.container))
    by_docno = {}
    for docno, start in txn.docnos():
        by_docno[docno] = start
    stored = {docno: start for start, _, docno, _ in docs}
    for docno, start in by_docno.items():
        if stored.get(docno) != start:
            found = stored.get(docno)
            problems.add(f"docnos: {docno!r} -> {start}, but "
                         + ("no document has that docno" if found is None
                            else f"the document starts at {found}"))
    for docno, start in stored.items():
        if docno not in by_docno:
            problems.add(f"docnos: {docno!r} (document at {start}) is missing")
    if len(stored) != len(docs):
        problems.add(f"docs: {len(docs) - len(stored)} documents share a docno")
    for key, found, what in (
            ("documents", len(docs) - apart, "documents in the collection"),
            ("tokens", tokens, "tokens in the collection's documents"),
            ("agent_documents", apart, "documents kept apart"),
            ("agent_tokens", apart_tokens, "tokens in the documents kept apart")):
        count = txn.meta(key, 0)
        if count != found:
            problems.add(f"meta: {key!r} is {count}, but there are {found} {what}")
    return docs


def _check_erased(txn, problems) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = txn.erased()
    if len(starts):
        if (ends < starts).any():
            problems.add("erased: a range ends before it starts")
        if (starts[1:] <= ends[:-1]).any():
            problems.add("erased: ranges overlap")
    return starts, ends


def _live_list(txn, name, erased, problems) -> set | None:
    """The (start, end) of the feature's intervals outside the erased ranges (None when it
    cannot be read: reported)."""
    fid = txn.feature_id(name)
    if fid is None:
        return set()
    try:
        s, e, _ = txn.read_list(fid)
    except Exception as err:  # reported in detail by _check_blocks
        problems.add(f"the {name!r} list cannot be read: {err}")
        return None
    es, ee = erased
    if len(es) and len(s):
        keep = kernels.drop_erased(s, e, es, ee)
        s, e = s[keep], e[keep]
    return set(zip(s.tolist(), e.tolist()))


def _check_document_list(txn, docs, erased, problems) -> None:
    by_container: dict[str, dict] = {}
    for start, end, docno, container in docs:
        by_container.setdefault(container, {})[(start, end)] = docno
    if DOCUMENT in by_container and txn.feature_id(DOCUMENT) is None:
        problems.add(f"features: no {DOCUMENT!r} feature, but there are documents")
        return
    for container, ranges in by_container.items():
        if container == DOCUMENT:
            continue
        live = _live_list(txn, container, erased, problems)
        for (start, end), docno in ranges.items():
            if live is not None and (start, end) not in live:
                problems.add(f"documents: {docno!r} [{start}, {end}] (kept apart) has no "
                             f"{container!r} interval over its range")
    live = _live_list(txn, DOCUMENT, erased, problems)
    if live is None:
        return
    ranges = by_container.get(DOCUMENT, {})
    for (start, end), docno in ranges.items():
        if (start, end) not in live:
            problems.add(f"documents: {docno!r} [{start}, {end}] has no {DOCUMENT!r} "
                         "interval over its range")
    extra = [pq for pq in live if pq not in ranges]
    for p, q in sorted(extra)[:20]:
        problems.add(f"documents: the {DOCUMENT!r} interval [{p}, {q}] is no document's range")
    if len(extra) > 20:
        problems.add(f"documents: {len(extra) - 20} more {DOCUMENT!r} intervals are no "
                     "document's range")
