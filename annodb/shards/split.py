"""Split a database into a sharded collection (`annodb split`).

    split("web.db", "web.shards", 4)

Every document goes to the shard its docno routes to (a note: its target's), at the
address it has in the database, so the collection ranks exactly as the database did. Its
words are tokenized again from its stored text; every other annotation (fields, values,
judgments, notes' links, any label, intervals annotated into a word's list) lying inside
one document is copied with it, and the erased ranges inside the documents are erased
again. An annotation over no single document (one spanning two documents, or over
addresses holding none) has no shard to go to: it is not copied, and the summary counts
it. The database is only read. (A database written before statistics were kept has every
list copied so, words' too: it cannot tell what was annotated by hand. Exact, slower.)

**In parallel, in bounded memory.** One process per core (at most one per shard) writes
its own shards; each reads the database from its start, WINDOW documents at a time, with
the annotations inside them read by blocks, so memory does not grow with the database
(the first version held every document's head and every annotation list at once: 1.9 GB
at the 1.67M-passage scale corpus, 5 GB and more at 4x, on one core). The split copies the
state the database had when it began: every process checks that its snapshot is that
one (a commit in between: an error, and the same split again).

**Interrupted, it resumes.** A shard's part of a window is one transaction, so a split
stopped at any point (Ctrl-C, a kill) leaves whole windows; running the same split again
skips the documents a shard holds already and completes it. The marker file `split.json`
in the collection names the database it is being split from, and the state it had, until
the split is done; a database written in between is refused (the collection would hold
two states of it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import msgspec
import numpy as np

from .. import batch, children, database, storage, tokenizer, transaction
from ..errors import AnnodbError, StorageError
from ..paths import MANIFEST, is_collection
from ..query import STRUCTURAL
from . import collection as _shards
from .routing import route, shard_name

WINDOW = 20_000      # documents read at a time; a shard's part of them is one transaction
MARKER = "split.json"
CACHE_BYTES = 64 << 20   # decoded lists a splitting process keeps of each database


class SplitSummary(msgspec.Struct):
    documents: int = 0
    annotations: int = 0
    not_copied: int = 0          # annotations over no single document
    shards: int = 0
    already: int = 0             # documents a shard held already (a resumed split)


def split(source, dest, shards: int, *, progress=None, processes: int | None = None,
          window: int = WINDOW) -> SplitSummary:
    """Write the database at `source` into a new sharded collection at `dest` of `shards`
    shards, or complete a split into `dest` that was interrupted (see the module
    docstring). progress(documents done, documents in all); `processes` (default: the
    cores, at most one per shard) write the shards, `window` documents at a time."""
    source, dest = os.fspath(source), os.fspath(dest)
    if is_collection(source):
        raise StorageError(f"{source}: is a sharded collection already; `annodb split` "
                           "splits one database")
    with database.Database(source, readonly=True, create=False) as db, db.read() as r:
        state, fold, total = r._txn.id, r.fold_diacritics, r.document_count()
    _begin(source, dest, shards, fold, state)
    k = max(1, min(shards, processes or os.cpu_count() or 1))
    groups = [[s for s in range(shards) if s % k == c] for c in range(k)]
    done = [0] * k
    summaries: list = [None] * k
    failures: list[tuple[str, bool]] = []   # (message, resumable)

    def follow(c: int, child: children.Child) -> None:
        assert child.stdout is not None     # (stdout=PIPE)
        for line in child.stdout:
            try:
                said = json.loads(line)
            except ValueError:      # (not ours: something the child printed)
                continue
            if not isinstance(said, dict):
                continue
            if "done" in said:
                done[c] = said["done"]
                if progress is not None and c == 0:
                    progress(min(done), total)
            elif "summary" in said:
                summaries[c] = msgspec.convert(said["summary"], SplitSummary)
            elif "error" in said:
                failures.append((said["error"], said.get("again", True)))

    procs: list[children.Child] = []
    threads = []
    try:
        try:
            for c, group in enumerate(groups):
                job = {"source": source, "dest": dest, "shards": shards, "mine": group,
                       "state": state, "count": c == 0, "window": window}
                child = children.start("from annodb.shards.split import main; main()",
                                       [json.dumps(job)], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, text=True)
                procs.append(child)
                t = threading.Thread(target=follow, args=(c, child), daemon=True)
                t.start()
                threads.append(t)
            for child, t in zip(procs, threads):
                child.wait()
                t.join()
        except BaseException:  # (Ctrl-C: the children have it too; a window is all or none)
            for child in procs:
                if child.poll() is None:
                    child.terminate()
            for child in procs:
                child.wait()
            raise
        again = "what was written stays, and running the same split again completes it"
        if failures:
            message, resumable = failures[0]
            raise StorageError(f"{dest}: the split failed: {message}" +
                               (f"; {again}" if resumable else ""))
        for child, got in zip(procs, summaries):
            if got is None or child.returncode != 0:
                raise StorageError(f"{dest}: a splitting process ended (exit code "
                                   f"{child.returncode}){children.said(child)}; {again}")
    finally:
        for child in procs:
            assert child.stdout is not None     # (stdout=PIPE)
            child.stdout.close()
            child.errors.close()
    _shards.open(dest).close()     # (the address counter raised to the shards' highest)
    os.unlink(os.path.join(dest, MARKER))
    out = SplitSummary(shards=shards, documents=summaries[0].documents)
    for got in summaries:
        out.annotations += got.annotations
        out.not_copied += got.not_copied
        out.already += got.already
    if progress is not None:
        progress(total, total)
    return out


def _begin(source: str, dest: str, shards: int, fold: bool, state: int) -> None:
    """Make the collection and its marker, or check that `dest` is this split begun, of
    the database in the state it has now (`state`, its last transaction's id). The marker
    is written first (whole, or not at all), then the collection (shards.create_collection:
    its shards, then its manifest): a split stopped at any point is one its rerun
    completes."""
    marker = os.path.join(dest, MARKER)
    if os.path.exists(marker):
        try:
            with open(marker, encoding="utf-8") as f:
                begun = json.load(f)
            count = begun.get("shards")
            if os.path.exists(os.path.join(dest, MANIFEST)):
                count = _shards.read_manifest(dest)["shards"]
        except (OSError, ValueError) as err:
            raise StorageError(f"{dest}: cannot read {MARKER}: {err}") from None
        if begun.get("source") != os.path.abspath(source) or count != shards:
            raise StorageError(f"{dest}: a split of {begun.get('source')} into "
                               f"{count} shards was begun here; run that one "
                               "again to complete it, or split into a new directory")
        if begun.get("state") != state:
            raise StorageError(f"{dest}: {source} was written since this split began, so "
                               "completing it would mix two states of it; split into a new "
                               "directory")
    else:
        _shards.check_shard_count(shards)
        try:
            names = os.listdir(dest) if os.path.isdir(dest) else []
            if names and all(n.startswith(MARKER + ".") and n.endswith(".tmp") for n in names):
                for name in names:  # (a marker's write cut short by a crash: nothing more)
                    os.unlink(os.path.join(dest, name))
            _shards.check_new_directory(dest)
            os.makedirs(dest, exist_ok=True)
            _shards.write_atomic(marker, json.dumps(
                {"source": os.path.abspath(source), "state": state, "shards": shards}
            ).encode() + b"\n")
        except OSError as err:
            raise StorageError(f"{dest}: cannot create the collection: {err.strerror}"
                               ) from None
    if not os.path.exists(os.path.join(dest, MANIFEST)):
        # the shards, made (and their options)
        _shards.create_collection(dest, shards, fold, new=False)


# ---------------------------------------------------------------- a splitting process


class _Changed(StorageError):
    """The database is not in the state the split began with: running it again cannot
    complete it (see _begin)."""


def main() -> None:
    """A splitting process: splits into its shards, saying {"done": n} after each window
    and {"summary": ...} at the end (or {"error": message}) on stdout."""
    job = json.loads(sys.argv[1])

    def say(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()
    try:
        summary = split_into(job["source"], job["dest"], job["shards"], job["mine"],
                             job["state"], job["count"], job["window"],
                             progress=lambda n: say({"done": n}))
    except AnnodbError as err:
        say({"error": str(err), "again": not isinstance(err, _Changed)})
        sys.exit(1)
    say({"summary": msgspec.to_builtins(summary)})


def split_into(source: str, dest: str, n: int, mine: list[int], state: int | None = None,
               count: bool = True, window: int = WINDOW, progress=None) -> SplitSummary:
    """Write the documents of the database at `source` that route to the shards `mine` of
    the collection at `dest` (of n shards), a window at a time; `state`, the transaction
    id the split began with; `count`: count the annotations over no single document."""
    summary = SplitSummary(shards=n)
    outs = {s: database.Database(os.path.join(dest, shard_name(s)), create=False,
                                 cache_bytes=CACHE_BYTES)
            for s in mine}
    try:
        with database.Database(source, readonly=True, create=False,
                               cache_bytes=CACHE_BYTES) as db, db.read() as r:
            if state is not None and r._txn.id != state:
                raise _Changed(f"{source}: the database was written as the split began "
                               "(between its start and a splitting process's); split into "
                               "a new directory")
            _split_windows(r, n, outs, summary, count, window, progress)
    finally:
        for out in outs.values():
            out.close()
    return summary


def _split_windows(r, n: int, outs: dict, summary: SplitSummary, count: bool, size: int,
                   progress) -> None:
    notes = r.intervals(transaction.NOTES)
    targets = dict(zip(notes.starts.tolist(), notes.values.tolist()))
    homes: dict[int, int] = {}      # a note's home, by its address (notes live with targets)

    def home(d) -> int:
        if d.container == transaction.NOTES and d.start in targets:
            found = homes.get(d.start)
            if found is None:
                target = r.document_at(int(targets[d.start]))
                found = homes[d.start] = route(d.docno, n) if target is None or \
                    target.start != int(targets[d.start]) else home(target)
            return found
        return route(d.docno, n)

    names = _names(r)
    erased = r.erased()
    window: list[storage.Document] = []
    lo = 0
    for d in r.documents():
        if len(window) == size:
            _window(r, window, lo, d.start, names, n, outs, home, erased, summary, count)
            summary.documents += len(window)
            if progress is not None:
                progress(summary.documents)
            window, lo = [], d.start
        window.append(d)
    _window(r, window, lo, None, names, n, outs, home, erased, summary, count)
    summary.documents += len(window)


def _names(r) -> list[str]:
    """The lists copied as annotations: every feature named with a structural character,
    and the words whose lists were annotated by hand (their statistics forgotten for it,
    storage's forget_stats; a list written before statistics were kept is copied too: it
    cannot be told apart). Other words' lists are made again from the documents' text."""
    names = [f for f in r.features_with_prefix("", 1 << 62) if not STRUCTURAL.isdisjoint(f)]
    words = (r._txn.feature_name(fid) for fid in r._txn.lists_without_stats())
    return names + sorted(f for f in words if f is not None and STRUCTURAL.isdisjoint(f))


def _window(r, docs: list, lo: int, hi: int | None, names: list, n: int, outs: dict, home,
            erased, summary: SplitSummary, count: bool) -> None:
    """The documents of addresses [lo, hi) (hi None: to the end) into the shards `outs`,
    with the annotations lying inside each."""
    starts = np.array([d.start for d in docs], dtype=np.int64)
    ends = np.array([d.end for d in docs], dtype=np.int64)
    homes = np.array([home(d) for d in docs], dtype=np.int64)
    ours = np.isin(homes, list(outs))
    last = storage.MAX_ADDRESS - 1 if hi is None else hi - 1
    parts = []          # (doc index, name index, p, q, value) of the annotations copied
    for i, name in enumerate(names):
        found = r.lists.inside(name, np.array([lo], np.int64), np.array([last], np.int64))
        j = np.searchsorted(starts, found.starts, side="right") - 1
        inside = (j >= 0) & (found.ends <= ends[np.maximum(j, 0)])
        if count:
            summary.not_copied += int((~inside).sum())
            if hi is not None:    # (over the window's end: counted at the first one crossed)
                over = r.lists.containing(name, np.array([hi - 1], np.int64),
                                          np.array([hi], np.int64))
                summary.not_copied += int((over.starts >= lo).sum())
        keep = np.flatnonzero(inside)
        keep = keep[ours[j[keep]]]
        k = j[keep]
        parts.append((k, np.full(len(k), i, np.int64), found.starts[keep] - starts[k],
                      found.ends[keep] - starts[k], found.values[keep]))
    k, nid, p, q, v = (np.concatenate(c) for c in zip(*parts)) if parts else \
        (np.zeros(0, np.int64),) * 4 + (np.zeros(0),)
    order = np.argsort(k, kind="stable")        # by document, then name, then start
    k, nid, p, q, v = k[order], nid[order], p[order], q[order], v[order]
    for s, out in outs.items():
        picked = np.flatnonzero(homes == s)
        if len(picked):
            sel = homes[k] == s
            local = np.searchsorted(picked, k[sel])  # (index among the picked documents)
            _write_shard(out, [docs[i] for i in picked.tolist()],
                         (local, nid[sel], p[sel], q[sel], v[sel]), names, erased, summary)


def _write_shard(out, docs: list, anns: tuple, names: list, erased,
                 summary: SplitSummary) -> None:
    """One transaction of a shard: these documents (those it does not hold already), their
    annotations (arrays: document index, name index, start and end relative to the
    document, value; by document) and erased ranges."""
    k, nid, p, q, v = anns
    with out.write() as w:
        present = w.present([d.docno for d in docs])
        keep = np.array([d.docno not in present for d in docs], dtype=bool)
        summary.already += int((~keep).sum())
        if not keep.any():
            return
        if not keep.all():
            renumber = np.cumsum(keep) - 1
            sel = keep[k]
            k, nid, p, q, v = renumber[k[sel]], nid[sel], p[sel], q[sel], v[sel]
            docs = [d for d, kept in zip(docs, keep.tolist()) if kept]
        summary.annotations += len(k)
        word = np.array([STRUCTURAL.isdisjoint(n) for n in names], dtype=bool)[nid] if \
            len(nid) else np.zeros(0, dtype=bool)
        hand = (k[word], nid[word], p[word], q[word], v[word])
        k, nid, p, q, v = k[~word], nid[~word], p[~word], q[~word], v[~word]
        first = 0        # one batch per run of one container (a batch's documents share it)
        for i in range(1, len(docs) + 1):
            if i == len(docs) or docs[i].container != docs[first].container:
                a, b = np.searchsorted(k, first), np.searchsorted(k, i)
                _add(w, docs[first:i], (k[a:b] - first, nid[a:b], p[a:b], q[a:b], v[a:b]),
                     names)
                first = i
        # a word's list annotated by hand: its intervals, over the postings the text made
        # again (the same ones among them), as annotate() writes them (see _names)
        for di, ni, pi, qi, vi in zip(*(c.tolist() for c in hand)):
            start = docs[di].start
            w.annotate(names[ni], start + pi, start + qi, vi)
        es, ee = erased
        for d in docs:
            a = np.searchsorted(ee, d.start)
            while a < len(es) and es[a] <= d.end:
                w.erase(max(int(es[a]), d.start), min(int(ee[a]), d.end))
                a += 1


def _batch(docs: list, anns: tuple, names: list) -> batch.Batch:
    """A batch of stored documents (addresses relative to each) with their annotations
    (arrays: document index, name index into `names`, p, q relative to the document,
    value)."""
    texts = [d.text for d in docs]
    _, kinds, words = tokenizer.distinct_tokens("\n".join(texts))
    doc_tokens = np.fromiter((d.tokens for d in docs), dtype=np.int64, count=len(docs))
    if len(kinds) != int(doc_tokens.sum()):
        raise AnnodbError("a stored document's text does not tokenize to its token count "
                          "(made with another tokenizer?)")
    k, nid, p, q, v = anns
    used, number = np.unique(nid, return_inverse=True)
    stored = []
    for d in docs:
        fields = [(f.name, f.path, f.char_start, f.char_end, f.start - d.start,
                   f.end - d.start) for f in d.fields]
        row = (d.docno, 0, d.end - d.start, d.text, fields, d.meta, d.tokens)
        stored.append(row if d.container == transaction.DOCUMENT else row + (d.container,))
    return batch.Batch(
        [d.docno for d in docs], doc_tokens, kinds, words, k.astype(np.int64),
        number.astype(np.int64).reshape(-1), p.astype(np.int64), q.astype(np.int64),
        v.astype(np.float64), [names[i] for i in used.tolist()], stored, None,
        docs[0].container)


def _add(w, docs: list, anns: tuple, names: list) -> None:
    w.add_batch(_batch(docs, anns, names), starts=[d.start for d in docs])
