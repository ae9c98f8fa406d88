"""Check: verify every invariant of a database's stored state (see storage/layout.py).

    problems = check_path("bible.db")                            # [] when healthy
    problems = check(annodb.open("bible.db", readonly=True))   # annodb's invariants only

check_path first checks the LMDB file without letting LMDB read it (its meta pages and
length, then every reachable page, by storage.page_problems: nothing there can crash on a
damaged file); only when the pages are sound does it open the database and run check.
What check verifies, in one read snapshot:

- meta: format and tokenizer versions present; counters are non-negative integers;
  next_address <= MAX_ADDRESS (2**53), and every stored interval (blocks, documents,
  erased ranges) ends below it.
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
- ranking statistics: each word's stored df is the number of live documents of the
  collection holding one of its live postings (other features' is 0); each list's stored
  high is at least 0 and every value it holds; meta "fields" is exactly the collection's
  live documents' fields (how many documents have each, and their tokens).

A sharded collection: its shard folders against the manifest (none missing or past the
count, each recording its place: shards.ShardError's problems), each shard's pages and
the above, then across shards: each document in the shard its docno routes to, no two
shards' documents overlapping, and the address counter a number up to 2**53 and at least
every shard's next address.

It reads everything, so it takes time proportional to the database's size.
"""

from __future__ import annotations

import os

import numpy as np

from . import kernels, storage, tokenizer
from .collection import open as open_database
from .errors import StorageError
from .paths import is_collection
from .shards.routing import route, shard_name
from .shards.collection import COUNTER, ShardError, folder_problems, read_manifest
from .storage import layout
from .transaction import DOCUMENT, NOTES

MAX_PROBLEMS = 1000  # stop collecting details after this many


class _Problems(list):
    def add(self, message: str) -> None:
        if len(self) < MAX_PROBLEMS:
            self.append(message)
        elif len(self) == MAX_PROBLEMS:
            self.append("... more problems not listed")


def check_path(path) -> list[str]:
    """The problems found in the database at `path`: an empty list when it is healthy.
    StorageError when there is no database there."""
    path = os.fspath(path)
    if is_collection(path):   # its shard folders, each shard's pages, then its invariants
        n = read_manifest(path)["shards"]
        problems = folder_problems(path, n)
        if problems:
            return problems
        problems = [f"{shard_name(i)}: pages: {p}" for i in range(n)
                    for p in storage.page_problems(os.path.join(path, shard_name(i)))]
        if problems:
            return problems
        try:
            db = open_database(path, readonly=True, create=False)
        except ShardError as err:        # shards that are not where the manifest says
            return list(err.problems)
        with db:
            return check(db)
    elif not os.path.exists(os.path.join(path, "data.mdb")):
        raise StorageError(f"{path}: no annodb database here")
    else:
        problems = storage.page_problems(path)
        if problems:
            return [f"pages: {p}" for p in problems]  # (annodb's invariants need sound pages)
    with open_database(path, readonly=True, create=False) as db:
        return check(db)


def check(db) -> list[str]:
    """The problems found in `db` (an open Database): an empty list when it is healthy."""
    if hasattr(db, "shards"):   # a sharded collection checks each shard, then across them
        return _check_collection(db)
    problems = _Problems()
    with db.read() as snapshot:
        txn = snapshot._txn
        next_address = _check_meta(txn, problems)
        ids = _check_features(txn, problems)
        docs = _check_documents(txn, next_address, problems)
        erased = _check_erased(txn, problems)
        _check_blocks(txn, ids, problems, docs, erased)
        _check_document_list(txn, docs, erased, problems)
    return list(problems)


def _check_collection(db) -> list[str]:
    """Every shard's problems (check, each prefixed with its shard), then the
    collection's: each document in the shard its docno routes to (a note: its
    target's, while the target is there; a note whose target was deleted or replaced
    since stays where it was, as in one database), no two shards' documents overlapping,
    the counter past every address."""
    problems = []
    for i, shard in enumerate(db.shards):
        problems += [f"{shard_name(i)}: {p}" for p in check(shard)]
    n = len(db.shards)
    with db.read() as r:
        starts = {}  # every document's start -> its shard
        for i, part in enumerate(r.parts):
            for doc in part.documents():
                starts[doc.start] = i
        ranges = []
        for i, part in enumerate(r.parts):
            links = dict(zip(part.intervals(NOTES).starts.tolist(),
                             part.intervals(NOTES).values.tolist()))
            for doc in part.documents():
                ranges.append((doc.start, doc.end, doc.docno, i))
                if doc.container == NOTES and doc.start in links:
                    home = starts.get(int(links[doc.start]))
                    if home is not None and home != i:
                        problems.append(f"{shard_name(i)}: the note {doc.docno!r} is "
                                    f"not in its document's shard ({home})")
                elif doc.container != NOTES and route(doc.docno, n) != i:
                    problems.append(f"{shard_name(i)}: {doc.docno!r} routes to "
                                    f"{shard_name(route(doc.docno, n))}")
        ranges.sort()
        for (s0, e0, d0, i0), (s1, e1, d1, i1) in zip(ranges, ranges[1:]):
            if s1 <= e0:
                problems.append(f"{d0!r} ({shard_name(i0)}, {s0}..{e0}) overlaps {d1!r} "
                                f"({shard_name(i1)}, {s1}..{e1})")
        problems += _counter_problems(db, r.address_space())
    return problems[:1000]


def _counter_problems(db, highest: int) -> list[str]:
    """The collection's address counter (the next address to hand out) against the
    shards: a number up to 2**53, and at least every shard's next address (read after the
    snapshot, so a writer meanwhile only raises it). No counter yet is none: the next
    read-write open sets it."""
    try:
        counter = db._counter()
    except StorageError as err:
        return [str(err)]
    if counter < highest and os.path.exists(os.path.join(db.path, COUNTER)):
        return [f"the address counter ({counter:,}) is behind the shards ({highest:,}): "
                "with no writer running, delete the file 'addresses' (the next read-write "
                "open sets it from the shards)"]
    return []


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
    if values["next_address"] > storage.MAX_ADDRESS:
        problems.add(f"meta: 'next_address' is {values['next_address']:,}, past the address "
                     f"range (addresses must be below 2**53 = {storage.MAX_ADDRESS:,})")
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
    if len(buf) < layout._HEADER.size:
        return 0, f"{len(buf)} bytes, shorter than a block header"
    flags, sw, lw, n, _ = layout._HEADER.unpack_from(buf, 0)
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


def _check_blocks(txn, names, problems, docs, erased) -> None:
    lengths: dict[int, int] = {}
    overlapping: set[int] = set()  # lists two of whose intervals overlap
    collection = [d for d in docs if d[3] == DOCUMENT]  # (what df counts)
    doc_starts = np.array([d[0] for d in collection], dtype=np.int64)
    doc_ends = np.array([d[1] for d in collection], dtype=np.int64)
    df: dict[int, int] = {}        # live documents holding a live interval of the list
    highs: dict[int, float] = {}   # the greatest value of a list
    checker = kernels.BlockChecker(doc_starts, doc_ends, *erased,
                                   max(storage.BLOCK_SIZE, txn.block_count),
                                   storage.MAX_ADDRESS)
    named: set[int] = set()        # the features whose name was looked up

    def run(batch) -> None:
        """The batch's blocks through the kernel; each one it stops at (not clean) here."""
        for fid in dict.fromkeys(f for f, _, _ in batch):
            if fid not in named:
                named.add(fid)
                if fid not in names:
                    problems.add(f"blocks: feature id {fid} has blocks but no name")
        bufs = [b for _, _, b in batch]
        offsets = np.zeros(len(batch) + 1, np.int64)
        np.cumsum([len(b) for b in bufs], out=offsets[1:])
        buf = b"".join(bufs)
        fids = np.array([f for f, _, _ in batch], np.int64)
        keys = np.array([k for _, k, _ in batch], np.int64)
        i = 0
        while i < len(batch):
            done, n, held, high, over = checker.run(buf, offsets[i:], fids[i:], keys[i:])
            for fid, count, h, top, o in zip(fids[i:i + done].tolist(), n.tolist(),
                                              held.tolist(), high.tolist(), over.tolist()):
                lengths[fid] = lengths.get(fid, 0) + count
                df[fid] = df.get(fid, 0) + h
                highs[fid] = max(highs.get(fid, 0.0), top)
                if o:
                    overlapping.add(fid)
            i += done
            if i < len(batch):
                _check_block(txn, names, problems, checker, batch[i], lengths, overlapping,
                             doc_starts, doc_ends, erased, df, highs)
                i += 1

    batch, size = [], 0
    for fid, key_start, buf in txn.all_blocks():
        buf = bytes(buf)    # (LMDB's buffer is only valid until the cursor moves on)
        batch.append((fid, key_start, buf))
        size += len(buf)
        if len(batch) >= _BATCH_BLOCKS or size >= _BATCH_BYTES:
            run(batch)
            batch, size = [], 0
    if batch:
        run(batch)
    with txn.txn.cursor(db=txn.dbs["counts"]) as cur:
        counts = {}
        for k, v in cur:
            if len(v) not in (8, 17, 33):
                problems.add(f"counts: feature {storage.from_u64(k)} has a value of "
                             f"{len(v)} bytes (8, 17 or 33 expected)")
                continue
            fid = storage.from_u64(k)
            counts[fid], _, flags, stored_df, high = layout._count_value(v)
            if fid in overlapping and not flags & (storage.OVERLAPPING | storage.UNKNOWN):
                problems.add(f"counts: feature {names.get(fid, fid)!r} is marked as holding "
                             "no overlapping intervals, but two of them overlap")
            if stored_df is None:
                continue
            name = names.get(fid, "")
            want = df.get(fid, 0) if tokenizer.tokens(name) == [name] else 0
            if stored_df != want:
                problems.add(f"counts: feature {name or fid!r} has df {stored_df}, but "
                             f"{want} live documents hold it")
            if not high >= highs.get(fid, 0.0):
                problems.add(f"counts: feature {name or fid!r} has high {high}, below its "
                             f"value {highs.get(fid, 0.0)}")
    for fid in sorted(set(counts) | set(lengths)):
        if counts.get(fid, 0) != lengths.get(fid, 0):
            problems.add(f"counts: feature {names.get(fid, fid)!r} is counted "
                         f"{counts.get(fid, 0)} but its list holds {lengths.get(fid, 0)}")


_BATCH_BLOCKS = 4096           # blocks per kernel call (check's batches)
_BATCH_BYTES = 16 << 20        # and at most about this many bytes


def _check_block(txn, names, problems, checker, block, lengths, overlapping, doc_starts,
                 doc_ends, erased, df, highs) -> None:
    """One block the kernel stopped at: every problem it has, said in full; the position
    in its list (the checker's) moved on past it as the kernel would."""
    fid, key_start, buf = block
    last_start, last_end, last_doc = checker.position()
    lengths[fid] = lengths.get(fid, 0) + layout._HEADER.unpack_from(buf, 0)[3]
    where = f"blocks: {names.get(fid, f'#{fid}')!r} block at {key_start}"
    _, bad = _block_size(buf, max(storage.BLOCK_SIZE, txn.block_count))
    if bad:
        problems.add(f"{where} {bad}")
        return
    try:
        starts, ends, values = storage.decode_block(buf)
    except Exception as err:  # any failure to decode is damage
        problems.add(f"{where} does not decode: {err}")
        return
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
    if int(ends[-1]) >= storage.MAX_ADDRESS:
        problems.add(f"{where}: an interval ends at {int(ends[-1]):,}, past the address "
                     "range (addresses must be below 2**53)")
    if starts[0] <= last_start:
        problems.add(f"{where}: starts at {int(starts[0])}, not after the previous "
                     f"block's last start {last_start}")
    if ends[0] <= last_end:
        problems.add(f"{where}: first end {int(ends[0])} is not after the previous "
                     f"block's last end {last_end} (nested or out of order)")
    if starts[0] <= last_end or (len(starts) > 1 and (starts[1:] <= ends[:-1]).any()):
        overlapping.add(fid)
    last_doc = _count_documents(fid, starts, ends, doc_starts, doc_ends, erased, df,
                                last_doc)
    highs[fid] = max(highs.get(fid, 0.0), float(values.max()))
    checker.set_position(fid, int(starts[-1]), int(ends[-1]), last_doc)


def _count_documents(fid, starts, ends, doc_starts, doc_ends, erased, df, last_doc) -> int:
    """Add to df[fid] the live documents holding a live interval of this block that were
    not counted yet (a list's blocks come in order: its documents do too; last_doc is the
    last one counted). Returns the new last one."""
    es, ee = erased
    if len(es):
        keep = kernels.drop_erased(starts, ends, es, ee)
        starts, ends = starts[keep], ends[keep]
    at = np.searchsorted(doc_starts, starts, side="right") - 1
    inside = at >= 0
    inside[inside] = ends[inside] <= doc_ends[at[inside]]
    held = np.unique(at[inside])
    held = held[held > last_doc]
    df[fid] = df.get(fid, 0) + len(held)
    return int(held[-1]) if len(held) else last_doc


_GROUPS = (storage.TAG_GROUP, storage.TAG_REL_GROUP)


def _check_documents(txn, next_address, problems) -> list[tuple[int, int, str, str]]:
    """(start, end, docno, container) of every document that decodes, in address order."""
    docs = []
    tokens = apart = apart_tokens = 0
    fields: dict[str, list[int]] = {}  # short name -> [documents, tokens]
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
            docs.append((doc.start, doc.end, doc.docno, doc.container))
            if doc.container != DOCUMENT:
                apart += 1
                apart_tokens += doc.tokens
                continue
            tokens += doc.tokens
            names = set()
            for f in doc.fields:
                if f.name and f.start <= f.end:
                    entry = fields.setdefault(f.name + ":", [0, 0])
                    entry[1] += f.end - f.start + 1
                    if f.name not in names:
                        names.add(f.name)
                        entry[0] += 1
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
    kept = txn.meta("fields")
    if kept is not None:
        kept = {k: list(v) for k, v in kept.items() if list(v) != [0, 0]}
        if kept != fields:
            bad = sorted(k for k in set(kept) | set(fields) if kept.get(k) != fields.get(k))
            problems.add("meta: 'fields' does not match the documents' fields: " + ", ".join(
                f"{k} is {kept.get(k, [0, 0])}, the documents have {fields.get(k, [0, 0])}"
                for k in bad[:5]))
    return docs


def _check_erased(txn, problems) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = txn.erased()
    if len(starts):
        if (ends < starts).any():
            problems.add("erased: a range ends before it starts")
        if (starts[1:] <= ends[:-1]).any():
            problems.add("erased: ranges overlap")
        if int(ends.max()) >= storage.MAX_ADDRESS:
            problems.add(f"erased: a range ends at {int(ends.max()):,}, past the address range "
                         "(addresses must be below 2**53)")
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
