"""Transactions: a read Snapshot (one committed state for its whole life) and a Writer
(buffered writes, visible to others only when it commits), with the result types they
return. `annodb.database` opens the database that hands them out."""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import warnings
from dataclasses import dataclass
from typing import cast

import msgspec
import numpy as np

from . import (batch, bm25, kernels, rankers, ranking, reading, records, scoring, statistics,
               storage, tokenizer)
from .errors import AbandonedWriteWarning, AnnodbError, NotFoundError, StorageError
from .gcl import evaluate
from .intervals import Intervals
from .lists import Lists
from .query import STRUCTURAL
from .snippets import token_offsets
from .storage import Document


FOLD_DIACRITICS = "fold_diacritics"  # meta: True when words are stored without diacritics
# buffered tokens that trigger a write to LMDB inside the transaction: an ingest's
# transaction of four batches (~4M tokens) flushes twice (its peak private memory at 1x
# ~80 MB lower than with 4M, its CPU the same within the noise: RESULTS.md, "Ingest CPU
# beside SQLite FTS5, 1x: fourth round")
FLUSH_TOKENS = 2_000_000
DOCUMENT = batch.DOCUMENT
NOTES = "note:"           # the container of notes (Writer.note): apart from the collection

_LOOK_UP = object()  # (see Writer._intern_missing)


class Added(msgspec.Struct, frozen=True):
    """A document as add() placed it: its docno and address range (a msgspec Struct, not a
    dataclass: ingest makes one per document, 80 ns instead of 460)."""

    docno: str
    start: int
    end: int


@dataclass(frozen=True)
class Stats:
    documents: int
    tokens: int
    features: int
    addresses: int
    erased_ranges: int
    path: str
    size_bytes: int
    agent_documents: int = 0   # documents kept apart from the collection (notes), and
    agent_tokens: int = 0      # their tokens: not in `documents` and `tokens`

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class Snapshot:
    """Read access to one committed state of the database."""

    def __init__(self, db, txn: storage.Txn, shared=None):
        self.db = db
        self._txn = txn
        self.lists = Lists(txn, shared)  # the annotation lists, whole or by blocks
        self._done = False
        try:  # (a newer annodb may have written it since this process opened it)
            storage.check_format(db.path, self.lists.meta("format"))
        except BaseException:
            Snapshot.close(self)  # (a Writer's close needs what its __init__ sets next)
            raise
        # words are stored without diacritics (an option set when the database was made)
        self.fold_diacritics = bool(self.lists.meta(FOLD_DIACRITICS, False))

    # context manager
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._txn.abort()

    def _check(self) -> None:
        if self._done:
            raise StorageError("this transaction has ended")
        if self._txn.pid != os.getpid():
            raise StorageError(
                f"{self.db.path}: this transaction was begun in process {self._txn.pid}, "
                "before a fork; it belongs to that process. Begin a new one here (the "
                "database reopens itself in a forked child)")

    def _before_read(self) -> None:
        self._check()

    # annotation lists
    def erased(self) -> tuple[np.ndarray, np.ndarray]:
        """The erased ranges: sorted, disjoint."""
        self._before_read()
        return self.lists.erased()

    def intervals(self, feature: str) -> Intervals:
        """The annotation list of `feature` as it stands in this snapshot (erased content
        removed): starts, ends, values."""
        self._before_read()
        return self.lists.whole(feature)

    def list_count(self, feature: str) -> int:
        """How many intervals the feature's list holds, without reading it (erased ones
        included: an upper bound)."""
        self._before_read()
        return self.lists.count(feature)

    def features_with_prefix(self, prefix: str, limit: int = 100) -> list[str]:
        """Feature names starting with `prefix` (at most `limit`), in name order."""
        self._before_read()
        return self._txn.features_with_prefix(prefix, limit)

    def term(self, token: str) -> Intervals:
        """The postings of a word (folded the way the tokenizer folds, and without
        diacritics in a database made with fold_diacritics)."""
        token = tokenizer.fold(token)
        return self.intervals(tokenizer.strip_diacritics(token) if self.fold_diacritics
                              else token)

    # documents
    def has(self, docno: str) -> bool:
        self._before_read()
        return self._txn.doc_start(docno) is not None

    def document(self, docno: str) -> Document:
        """The document with this docno; NotFoundError when there is none."""
        self._before_read()
        start = self._txn.doc_start(docno)
        doc = None if start is None else self._txn.doc_at_start(start)
        if doc is None:
            raise NotFoundError(f"no document with docno {docno!r}")
        return doc

    def find(self, docno: str) -> Document | None:
        """The document a docno names as agents write it (surrounding whitespace and
        double quotes ignored), or None."""
        return reading.find(self, docno)

    def document_at(self, address: int) -> Document | None:
        """The document whose address range holds `address`, or None."""
        return self.documents_at([address])[0]

    def documents_at(self, addresses) -> list[Document | None]:
        """document_at of each address, in order."""
        return [None if found is None else found[0].doc(found[1])
                for found in self._holding(addresses)]

    def docnos_at(self, addresses) -> list[str | None]:
        """The docno of document_at of each address (None where there is none), in order:
        what a ranking's hits are named by, without decoding their documents."""
        return [None if found is None else found[0].docnos[found[1]]
                for found in self._holding(addresses)]

    def _holding(self, addresses) -> list:
        """For each address, (the decoded docs entry holding its document, the document's
        index in it), or None: from the documents cached by start (doc_cache.py), else
        read (and cached)."""
        self._before_read()
        cache, token = self.lists.documents()
        addresses = [int(a) for a in addresses]
        out = [None] * len(addresses) if cache is None else \
            cache.get_many(token, addresses)
        missing = [i for i, a in enumerate(addresses)
                   if out[i] is None and 0 <= a < storage.MAX_ADDRESS]
        if missing:
            found = self._txn.doc_entries([addresses[i] for i in missing])
            for i, (key, entry) in zip(missing, found):
                j = -1 if entry is None else entry.find(addresses[i])
                if j >= 0:
                    out[i] = (entry, j)
                    if cache is not None:
                        cache.add(token, key, entry)
        return out

    def documents(self):
        """Every document, in address order."""
        self._before_read()
        return self._txn.docs()

    def documents_in(self, p: int, q: int) -> list[Document]:
        """The documents whose ranges overlap addresses p..q, in address order."""
        self._before_read()
        return list(self._txn.docs_overlapping(int(p), int(q)))

    def present(self, docnos: list[str]) -> dict[str, int]:
        """The docnos among these that are in the database, with their documents' first
        addresses."""
        self._check()
        return self._txn.docnos_present(docnos)

    def text(self, p: int, q: int) -> str:
        """The text of addresses p..q: from the start of the token at p to the end of the
        token at q, documents joined by newlines, erased addresses left out."""
        return self.texts([p], [q])[0]

    def texts(self, starts, ends) -> list[str]:
        """text(p, q) of each range (p, q), in order."""
        return ["\n".join(piece for _, piece in found)
                for found in self.text_pieces(starts, ends)]

    def text_pieces(self, starts, ends) -> list[list[tuple[int, str]]]:
        """Each range's text (see text) a document at a time: [(the document's start, its
        text in the range)], in address order (a sharded collection joins its shards')."""
        self._before_read()
        es, ee = self.erased()
        return [self._pieces(max(int(p), 0), min(int(q), storage.MAX_ADDRESS - 1), es, ee)
                for p, q in zip(starts, ends)]

    def _pieces(self, p: int, q: int, es, ee) -> list[tuple[int, str]]:
        pieces = []
        for doc in self._overlapping(p, q):
            starts, ends = token_offsets(doc.text)
            lo, hi = max(p, doc.start) - doc.start, min(q, doc.end) - doc.start
            hi = min(hi, len(starts) - 1)
            if lo > hi:
                continue
            if not len(es):  # (nothing erased: one run)
                pieces.append((doc.start, doc.text[starts[lo]:ends[hi]]))
                continue
            addrs = np.arange(lo, hi + 1, dtype=np.int64) + doc.start
            if len(es):
                keep = kernels.drop_erased(addrs, addrs, es, ee)
                addrs = addrs[keep]
            if not len(addrs):
                continue
            # runs of consecutive live addresses, joined by a space
            idx = addrs - doc.start
            breaks = np.flatnonzero(np.diff(idx) != 1)
            runs = np.split(idx, breaks + 1)
            pieces.append((doc.start, " ".join(doc.text[starts[r[0]]:ends[r[-1]]]
                                               for r in runs)))
        return pieces

    def _overlapping(self, p: int, q: int):
        """The documents overlapping p..q: the one holding p alone when it reaches q (a
        container's range, as rankings ask; from the cached documents), else read."""
        found = self._holding([p])[0] if p <= q else None
        if found is not None and found[0].ends[found[1]] >= q:
            return [found[0].doc(found[1])]
        return self._txn.docs_overlapping(p, q)

    def address_space(self) -> int:
        """The first unused address: content lives in [0, address_space())."""
        self._before_read()
        if isinstance(self, Writer):
            return self._next_address
        return self._txn.meta("next_address", 0)

    def document_count(self) -> int:
        """How many documents the collection holds (container `:`; notes and other
        documents kept apart are not counted)."""
        self._before_read()
        if isinstance(self, Writer):
            return self._documents
        return self.lists.meta("documents", 0)

    def token_count(self) -> int:
        """The tokens of the live documents."""
        self._before_read()
        if isinstance(self, Writer):
            return self._tokens
        return self.lists.meta("tokens", 0)

    def sparse_fields(self) -> list[str]:
        """The record fields ingested as sparse vectors (features `field:term`)."""
        self._check()
        if isinstance(self, Writer) and self._sparse is not None:
            return list(self._sparse)
        return list(self._txn.meta("sparse_fields") or [])

    def field_statistics(self) -> dict[str, tuple[int, int]] | None:
        """{short field name ("title:"): (live documents having it, tokens in it)}, or None
        when the database does not keep them (written before they were)."""
        self._before_read()
        found = cast("dict | None", self._fields) \
            if isinstance(self, Writer) and self._fields is not False \
            else self.lists.meta("fields")
        return None if found is None else {k: tuple(v) for k, v in found.items()}

    def stats(self) -> Stats:
        self._before_read()
        txn = self._txn
        return Stats(documents=txn.meta("documents", 0), tokens=txn.meta("tokens", 0),
                     features=txn.feature_count(), addresses=txn.meta("next_address", 0),
                     erased_ranges=len(self.erased()[0]), path=self.db.path,
                     size_bytes=storage.disk_size(self.db._env.path),
                     agent_documents=txn.meta("agent_documents", 0),
                     agent_tokens=txn.meta("agent_tokens", 0))

    # queries (the evaluator lives in gcl, ranking in ranking)
    def query(self, gcl, *, lenient: bool = False, budget=None) -> Intervals:
        """The intervals (and values) that a GCL query denotes (within `budget`, a
        gcl.Budget, when given)."""
        self._before_read()
        return evaluate(self, gcl, lenient=lenient, budget=budget)

    def count(self, gcl, *, lenient: bool = False) -> int:
        return len(self.query(gcl, lenient=lenient))

    def search(self, gcl, k: int = 10, *, container: str = DOCUMENT, lenient: bool = False,
               snippets: bool = True, rank: str | rankers.Ranker = "ssr",
               k1: float | None = None, b: float | None = None, fields=None,
               sparse_field: str | None = None, feedback=None) -> ranking.Results:
        """Rank the containers (documents by default) that match a GCL query: by
        shortest-substring ranking (`rank="ssr"`), by BM25 over the query's words
        ("bm25"; k1, b, and `fields` for BM25F: names, or {name: weight or (weight, b)}),
        by sparse vectors ("sparse", the field `sparse_field`), both fused ("fused"), or by
        BM25 over the words expanded by RM3 pseudo-relevance feedback ("bm25+rm3";
        `feedback` its settings, an annodb.feedback.Feedback: feedback.ANSERINI for
        Anserini's). `rank` may be a rankers.Ranker (rankers.py) instead of a name."""
        self._before_read()
        return ranking.search(self, gcl, rankers.make(rank, k1, b, fields, sparse_field,
                                                      feedback),
                              k=k, container=container, lenient=lenient, snippets=snippets)

    def search_text(self, text, k: int = 10, *, container: str = DOCUMENT,
                    snippets: bool = True, rank: str | rankers.Ranker = rankers.TEXT_RANK,
                    k1: float | None = None, b: float | None = None, fields=None,
                    sparse_field: str | None = None, feedback=None) -> ranking.Results:
        """Free-text search: the words ranked by `rank` (see search; SSR ranks Boolean
        tiers built from the words). For rank="sparse", `text` may be a {term: weight}
        dict of the query's own weights."""
        self._before_read()
        return ranking.search_text(self, text, rankers.make(rank, k1, b, fields,
                                                            sparse_field, feedback),
                                   k=k, container=container, snippets=snippets)

    def rank(self, gcl, *, depth: int = scoring.DEPTH, container: str = DOCUMENT,
             lenient: bool = False, budget=None, rank: str | rankers.Ranker = "ssr",
             scoring: bm25.Scoring | None = None) -> scoring.Ranking:
        """The containers ranked to `depth`, as arrays (ranking.rank): what the server
        keeps for a query's `next`, and what search() shows the first k of. `scoring`:
        the ranker's parameters (bm25.scoring), or none (its defaults)."""
        self._before_read()
        return ranking.rank(self, gcl, rankers.make(rank, settings=scoring), depth=depth,
                            container=container, lenient=lenient, budget=budget)

    # what rankers ask (the read interface, reading.ReadView): one database's work,
    # scoring.py
    def ranked(self, node, ranker: scoring.RankedBy = rankers.BY_SSR, *,
               depth: int = scoring.DEPTH,
               container: str = DOCUMENT, budget=None, statistics=None,
               words=None) -> scoring.Ranking:
        """The containers holding a match of `node` (a prepared query) ranked by `ranker`
        (SSR, a word scorer or both fused; scoring.ranked), weighing words by
        `statistics` (default: this database's)."""
        self._before_read()
        return scoring.ranked(self, node, ranker, depth=depth, container=container,
                              budget=budget, statistics=statistics, words=words)

    def top_words(self, words, k: int, *, container: str = DOCUMENT,
                  scored: scoring.WordScorer, statistics=None):
        """The best k containers by BM25 or sparse scores of words (scoring.top_words)."""
        self._before_read()
        return scoring.top_words(self, words, k, container=container, scored=scored,
                                 statistics=statistics)

    def word_candidates(self, words: list[str], limit: int = scoring.FORMS) -> list:
        """What the words' forms sharing a stem are found from (scoring.word_candidates)."""
        self._before_read()
        return scoring.word_candidates(self, words, limit)

    def word_covers(self, words, s, e):
        """What each container's BM25 hit shows (scoring.word_covers)."""
        self._before_read()
        return scoring.word_covers(self, words, s, e)

    def text_scorer(self, container: str = DOCUMENT):
        """The function search_text scores its tiers with (see scoring.scorer)."""
        self._before_read()
        return scoring.scorer(self, container)

    def has_feature(self, name: str) -> bool:
        """Whether some annotation list is named `name` (a word, a field, a label)."""
        self._before_read()
        return self.lists.fid(name) is not None

    def statistics(self, features=(), fields=()) -> statistics.Statistics:
        """The collection statistics rankers weigh words by (statistics.gather): the one
        place a sharded collection sums its shards'."""
        self._before_read()
        return statistics.gather(self, features, fields)


def check_container(name: str) -> None:
    """AnnodbError unless `name` can be a container of documents kept apart: a feature
    name a query can use (one word holding a structural character, e.g. `note:`)."""
    if not isinstance(name, str) or not name or name == DOCUMENT or \
            STRUCTURAL.isdisjoint(name) or any(c.isspace() or c in '()"' for c in name):
        raise AnnodbError(f"container {name!r} is not a feature name a query can use: one "
                          "word holding : < > # @ or =, other than ':' alone (e.g. 'note:')")


def check_note_docno(snap, docno: str) -> None:
    """AnnodbError when the document `docno` exists (in `snap`, a writer) and is not a note:
    a note may replace only a note."""
    try:
        found = snap.document(docno)
    except NotFoundError:
        return
    if found.container != NOTES:
        holder = "a document of the collection" if found.container == DOCUMENT else \
            f"a document in {found.container!r}"
        raise AnnodbError(f"cannot write the note {docno!r}: that docno is taken by "
                          f"{holder}, which a note does not replace; nothing was written")


def check_docno(docno: str) -> None:
    """AnnodbError unless the docno can be stored (not empty, an LMDB key's length)."""
    if not docno:
        raise AnnodbError("a docno cannot be empty")
    if len(storage.utf8(docno, "docno")) > storage.MAX_KEY:
        raise AnnodbError(f"docno longer than {storage.MAX_KEY} bytes: {docno[:40]!r}...")


class Writer(Snapshot):
    """A write transaction. Everything it does is invisible to others until commit.

    It belongs to the thread that began it: a call from any other thread is a StorageError
    (LMDB binds a write transaction and its writer mutex to one thread, and the buffers
    here are not guarded: four threads adding through one writer made overlapping
    documents and lost docnos, without an error). Threads that write begin a write
    transaction each (they take turns), or hand their work to the one that holds it."""

    def __init__(self, db, txn: storage.Txn, lock: storage.WriterLock, allocate=None):
        super().__init__(db, txn)
        self._lock = lock
        self._thread = threading.get_ident()
        self._vocab: dict[str, int] = db._env.vocab
        self._new_names: list[str] = []  # interned here (dropped on abort)
        self._word_ids: set[batch.FeatureIds] = set()  # (forget on abort what it gave)
        self._named = 0  # how many of them are written
        self._next_feature = txn.meta("next_feature", 1)
        self._first_new_feature = self._next_feature  # ids from here have no blocks yet
        # every stored name in the cache (none new looked up in LMDB; see vocab_through)
        self._all_known = db._env.vocab_through == self._next_feature
        self._next_address = txn.meta("next_address", 0)
        self._documents = txn.meta("documents", 0)
        self._tokens = txn.meta("tokens", 0)
        self._apart = self._apart_before = (txn.meta("agent_documents", 0),
                                            txn.meta("agent_tokens", 0))
        self._format = txn.meta("format")
        self._tok_ids: list[np.ndarray] = []  # feature ids of buffered tokens, in address order
        self._tok_count = 0
        self._tok_runs: list = []  # (first addresses, counts) of the runs of each batch
        self._ann: list = []  # feature id, p, q, value, feature id, p, ... (annotate())
        self._ann_arrays: list = []  # (fids, ps, qs, values): all annotations in write order
        self._new_docnos: dict[str, int] = {}  # docno -> start, not yet written
        self._dirty = False
        self._doc_runs: list[list] = []  # docs entries not yet written, a list per batch
        self._allocate = allocate  # (batch, next address) -> starts (see Database.write)
        # the fields' [documents, tokens] (storage's meta "fields"); None when not kept
        # (documents written before they were), loaded at the first change
        self._fields: dict | None | bool = False
        self._sparse: list[str] | None = None  # the sparse fields, when this writer adds one

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __del__(self) -> None:
        """A writer dropped while open (never committed, aborted or exited) is aborted, its
        locks released, with an AbandonedWriteWarning."""
        if getattr(self, "_done", True) or self._txn.pid != os.getpid():
            return
        try:
            self._abort()
            warnings.warn(f"{self.db.path}: a write transaction was dropped without commit() "
                          "or abort(); its writes were thrown away (use `with db.write() as "
                          "w:`)", AbandonedWriteWarning, stacklevel=2)
        except Exception:  # (at interpreter exit modules may be gone)
            pass

    def commit(self) -> None:
        """Write everything and make it visible, atomically."""
        self._check()
        try:
            self._flush()
            txn = self._txn
            txn.set_meta("next_feature", self._next_feature)
            txn.set_meta("next_address", self._next_address)
            txn.set_meta("documents", self._documents)
            txn.set_meta("tokens", self._tokens)
            if self._apart != self._apart_before:
                txn.set_meta("agent_documents", self._apart[0])
                txn.set_meta("agent_tokens", self._apart[1])
            if isinstance(self._fields, dict):
                txn.set_meta("fields", self._fields)
            if self._sparse is not None:
                txn.set_meta("sparse_fields", self._sparse)
            if self._format != storage.FORMAT_VERSION:
                txn.set_meta("format", storage.FORMAT_VERSION)  # what it writes now
            txn.commit()
            if self._all_known:
                self.db._env.vocab_through = self._next_feature
        except BaseException as err:
            self._abort()
            if isinstance(err, AnnodbError) or not isinstance(err, Exception):
                raise
            raise StorageError(f"{self.db.path}: commit failed, nothing of this transaction "
                               f"was written: {storage.explain_write_error(self.db.path, err)}"
                               ) from err
        self._new_names.clear()
        self._done = True
        self._lock.release()

    def abort(self) -> None:
        """Throw the transaction away."""
        if not self._done:
            self._check_thread()
            self._abort()

    def _check(self) -> None:
        super()._check()
        self._check_thread()

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise StorageError(
                f"{self.db.path}: this write transaction belongs to the thread that began "
                "it, and another thread used it: a write transaction is used by one thread "
                "(LMDB's rule; shared, it corrupts the database). Begin a write transaction "
                "in each thread that writes (`with db.write() as w:`; they take turns), or "
                "pass the work to the thread holding this one (a queue)")

    def _abort(self) -> None:
        for name in self._new_names:
            self._vocab.pop(name, None)
        for word_ids in self._word_ids:
            word_ids.forget(self._first_new_feature)
        self._new_names.clear()
        self._done = True
        try:
            self._txn.abort()
        finally:
            self._lock.release()

    def close(self) -> None:
        self.abort()

    def _before_read(self) -> None:
        self._check()
        if self._dirty:
            self._flush()

    def has(self, docno: str) -> bool:
        self._check()
        return docno in self._new_docnos or self._txn.doc_start(docno) is not None

    def present(self, docnos: list[str]) -> dict[str, int]:
        """The docnos among these that are in the database (or added by this writer), with
        their documents' first addresses."""
        self._check()
        found = self._txn.docnos_present(docnos)
        new = self._new_docnos
        if new:   # (the intersection in C: an ingest asks this twice a batch)
            found.update((d, new[d]) for d in new.keys() & docnos)
        return found

    # features
    def _intern(self, name: str) -> int:
        fid = self._vocab.get(name)
        if fid is not None:
            return fid
        return self._intern_missing(name)

    def _ids(self, names: list[str]) -> np.ndarray:
        """The feature id of each name (int64), interning the new ones in order (the
        process's cache in one pass; what it misses looked up in LMDB at once, unless the
        cache holds every stored name: then new distinct names take the next ids in one
        step, not a Python step each: ~1M new words at 1x)."""
        vocab = self._vocab
        found = np.fromiter(map(vocab.get, names, itertools.repeat(-1)), dtype=np.int64,
                            count=len(names))
        missing = np.flatnonzero(found < 0).tolist()
        if not missing:
            return found
        new, next_id = self._new_names, self._next_feature
        fresh = [names[i] for i in missing]
        if self._all_known and len(set(fresh)) == len(fresh):
            found[missing] = np.arange(next_id, next_id + len(fresh))
            vocab.update(zip(fresh, range(next_id, next_id + len(fresh))))
            new.extend(fresh)
            self._next_feature = next_id + len(fresh)
            return found
        stored = [None] * len(fresh) if self._all_known else self._txn.feature_ids(fresh)
        for i, name, fid in zip(missing, fresh, stored):   # (_intern_missing, inline)
            if fid is None:
                fid = vocab.get(name)   # (twice in names)
                if fid is None:
                    fid = next_id
                    next_id += 1
                    new.append(name)
            vocab[name] = fid
            found[i] = fid
        self._next_feature = next_id
        return found

    def _numbered_ids(self, words: np.ndarray, word_ids: batch.FeatureIds | None
                      ) -> np.ndarray:
        """The feature id of each numbered word (Batch.words) as _ids gives it: the ids
        word_ids holds (of words this process committed or gave in this transaction;
        _abort forgets what it gave), the others looked up by their names (_ids)."""
        if word_ids is None:
            raise AnnodbError("a batch of numbered words needs the FeatureIds of the "
                              "reading process that numbered them (FeatureIds.learn)")
        known = word_ids.get(words)
        unknown = np.flatnonzero(known < 0)
        if len(unknown):
            self._word_ids.add(word_ids)
            numbers = words[unknown]
            names = [word_ids.names[w] for w in numbers.tolist()]
            if self.fold_diacritics:
                names = list(map(tokenizer.strip_diacritics, names))
            given = self._ids(names)
            known[unknown] = given
            word_ids.set(numbers, given)
        return known

    def _intern_missing(self, name: str, stored=_LOOK_UP) -> int:
        """A name not in the process's cache: its stored id (`stored`, None when it has
        none; looked up unless given), or the next id."""
        if stored is _LOOK_UP:
            stored = None if self._all_known else self._txn.feature_id(name)
        fid = stored if stored is not None else self._vocab.get(name)  # (twice in a batch)
        if fid is None:
            fid = self._next_feature
            self._next_feature += 1
            self._new_names.append(name)
        self._vocab[name] = fid
        return fid

    # writes
    def add(self, content, docno: str | None = None, *, id_field: str | None = None,
            text_fields: list[str] | None = None, replace: bool = False,
            container: str = DOCUMENT, sparse_fields=()) -> Added:
        """Append a document: plain text (give a docno, or one is made from its address) or a
        JSON record (docno from its id field; see records.prepare; `sparse_fields`: its
        fields holding sparse vectors). A docno already present raises unless
        replace=True, which deletes the old document first. `container` is the feature
        over its range: `:` for a document of the collection; another name (e.g. `note:`)
        keeps it apart: it is then no hit of searches of the collection, not counted among
        its documents nor in its ranking statistics, and found by searching that
        container."""
        return self.add_many([(content, docno)], id_field=id_field, text_fields=text_fields,
                             replace=replace, container=container,
                             sparse_fields=sparse_fields)[0]

    def add_many(self, items, *, id_field: str | None = None,
                 text_fields: list[str] | None = None, replace: bool = False,
                 container: str = DOCUMENT, sparse_fields=()) -> list[Added]:
        """Append many documents: each item is `(content, docno)` as for add() (docno may be
        None). The same as add() item by item, with one tokenizer pass for them all. Every
        docno is checked before anything is added: on an error nothing of the call is."""
        self._check()
        if container != DOCUMENT:
            check_container(container)
        sparse = tuple(records.check_sparse_field(f) for f in sparse_fields)
        docs = [batch.prepare_item(content, docno, id_field, text_fields, sparse)
                for content, docno in items]
        try:
            made = batch.make(docs, container, sparse)
        except UnicodeError as err:  # a lone surrogate: no UTF-8 can store the text
            raise AnnodbError(f"document text is not valid Unicode ({err})") from None
        except ValueError as err:    # a field named as the container
            raise AnnodbError(str(err)) from None
        return self.add_batch(made, replace=replace)

    def add_batch(self, b: batch.Batch, *, replace: bool = False,
                  starts=None) -> list[Added]:
        """Append a batch of documents made by batch.make (what add_many does after
        tokenizing; an ingest makes its batches in another process). `starts`: each
        document's first address (increasing, each after the previous document, the first
        at or past address_space()), leaving gaps where another shard's documents are (see
        annodb.shards); default: right after the content."""
        self._check()
        if len(b):  # (before a replace deletes anything)
            storage.check_address(self._next_address + int(b.spans().sum()) - 1,
                                  f"adding {len(b)} documents at {self._next_address:,}")
        named = [d for d in b.docnos if d is not None]
        if not all(named) or max(map(len, named), default=0) > storage.MAX_KEY // 4:
            for docno in named:   # (else every one is short enough)
                if not docno or len(docno) > storage.MAX_KEY // 4:
                    check_docno(docno)
        stored = self.present(named)  # (and a clear error for a lone surrogate)
        seen = set()
        for i, docno in enumerate(b.docnos if stored or len(set(named)) < len(named) else ()):
            if docno is None:
                continue
            if docno in seen or docno in stored:
                if not replace:
                    raise AnnodbError(f"docno {docno!r} already exists (use replace=True)")
                if docno in seen:  # replaced again within this call: one at a time
                    head, tail = (None, None) if starts is None else (starts[:i], starts[i:])
                    out = self.add_batch(b.subset(range(i)), replace=True, starts=head)
                    return out + self.add_batch(b.subset(range(i, len(b))), replace=True,
                                                starts=tail)
            seen.add(docno)
        if replace and stored:   # (present: in the database or added by this writer)
            for docno in b.docnos:
                if docno is not None and (docno in self._new_docnos or
                                          self._txn.doc_start(docno) is not None):
                    self.delete(docno)
        return self._append(b, starts)

    def _placed(self, b: batch.Batch, starts) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the batch's documents: `starts` checked, or those the
        allocator given to Database.write gives (`allocate(batch, address_space)`: a sharded
        collection's), or right after the content."""
        base = self._next_address
        spans = b.spans()
        if starts is None and self._allocate is not None:
            starts = self._allocate(b, base)
        if starts is None:
            ends = np.cumsum(spans) + (base - 1)
            return ends - spans + 1, ends
        starts = np.asarray(starts, dtype=np.int64)
        ends = starts + spans - 1
        if len(starts) != len(spans) or (len(starts) and (
                starts[0] < base or np.any(starts[1:] <= ends[:-1]))):
            raise AnnodbError(f"{self.db.path}: a batch's starts must be one per document, "
                              f"increasing, each past the previous document and the first "
                              f"at or past {base} (the next free address)")
        if len(ends):
            storage.check_address(int(ends[-1]), f"adding {len(ends)} documents at "
                                                 f"{int(starts[0]):,}")
        return starts, ends

    def _append(self, b: batch.Batch, starts=None) -> list[Added]:
        """Place the batch's documents after the content (or at `starts`, see add_batch):
        its addresses, relative to the batch, become these; tokens and annotations are
        buffered until the flush, its docs entries likewise."""
        base = self._next_address
        starts, ends = self._placed(b, starts)
        starts_list = starts.tolist()
        docnos = b.docnos
        if b.documents is not None:  # name the documents without a docno by their start
            docnos, documents = list(docnos), list(b.documents)
            taken = set(docnos)
            for i, docno in enumerate(docnos):
                if docno is None:
                    docno = f"d{starts_list[i]}"
                    while docno in taken or docno in self._new_docnos or \
                            self._txn.doc_start(docno) is not None:
                        docno += "_"
                    taken.add(docno)
                    docnos[i] = docno
                    documents[i] = (docno,) + documents[i][1:]
            b = dataclasses.replace(b, docnos=docnos, documents=documents)
        try:
            raws = b.doc_raws()
        except UnicodeError as err:  # a lone surrogate in a name or metadata
            raise AnnodbError(f"document is not valid Unicode ({err})") from None
        # compressed here, not on a second thread while this one goes on: on the 1x
        # corpus the thread saved ~0.7 s of an ingest's wall time and cost ~1 s of its CPU
        # (the GIL handed back and forth at each zstd call; benchmarks/RESULTS.md, "the
        # writer's documents")
        self._doc_runs.append([(base + start, value, n) for start, value, n in
                               storage.encode_docs(raws, (starts - base).tolist(),
                                                   self._txn.page_size(), threads=1)])
        # tokens: the ids of their words, and the runs of addresses they fill
        if b.words is not None:   # (numbered by a reading process: see batch.FeatureIds)
            fids = self._numbered_ids(b.words, b.word_ids)
        else:
            names = b.names if not self.fold_diacritics else \
                list(map(tokenizer.strip_diacritics, b.names))
            fids = self._ids(names)
        ids = fids[b.kinds]
        self._tok_ids.append(ids)
        self._tok_count += len(ids)
        has = b.doc_tokens > 0
        self._tok_runs.append((starts[has], b.doc_tokens[has]))
        if b.container == DOCUMENT:  # (documents kept apart are not in the statistics)
            words, kinds = (fids, b.kinds) if not self.fold_diacritics else \
                statistics.merged(fids, b.kinds)
            self._txn.add_doc_frequencies(words, statistics.batch_words(kinds, b.doc_tokens,
                                                                        len(words)))
            self._count_fields(statistics.batch_fields(b.ann_names, b.ann_name, b.ann_doc,
                                                       b.ann_q - b.ann_p + 1, b.sparse), 1)
        if b.sparse and not set(b.sparse) <= set(self.sparse_fields()):
            self._sparse = sorted(set(self.sparse_fields()) | set(b.sparse))
        # annotations
        self._ann_flush_list()
        ann_fids = self._ids(b.ann_names)
        at = starts[b.ann_doc]
        self._ann_arrays.append((ann_fids[b.ann_name], at + b.ann_p, at + b.ann_q, b.ann_v))
        self._new_docnos.update(zip(docnos, starts_list))
        self._next_address = int(ends[-1]) + 1 if len(ends) else base
        if b.container == DOCUMENT:
            self._documents += len(docnos)
            self._tokens += int(b.doc_tokens.sum())
        else:
            self._apart = (self._apart[0] + len(docnos),
                           self._apart[1] + int(b.doc_tokens.sum()))
        self._dirty = True
        out = list(map(Added, docnos, starts_list, ends.tolist()))
        if self._tok_count >= FLUSH_TOKENS:
            self._flush()
        return out

    def _count_fields(self, counts: dict, sign: int) -> None:
        """Add (sign 1) or take away (-1) statistics.batch_fields' counts to meta
        "fields" (loaded at the first change; not kept for documents written before)."""
        if self._fields is False:
            found = self._txn.meta("fields")
            self._fields = found if found is not None else \
                ({} if not self._txn.meta("documents", 0) else None)
        if self._fields is not None and counts:
            statistics.add_fields(cast(dict, self._fields), counts, sign)

    def _ann_flush_list(self) -> None:
        """Move annotate()'s buffered annotations to the arrays (keeping write order)."""
        if self._ann:
            ann = self._ann  # ids and addresses int64 (exact), values float64
            self._ann_arrays.append((np.array(ann[0::4], dtype=np.int64),
                                     np.array(ann[1::4], dtype=np.int64),
                                     np.array(ann[2::4], dtype=np.int64),
                                     np.array(ann[3::4], dtype=np.float64)))
            self._ann = []

    def set_folding(self, fold: bool) -> None:
        """Record whether this (empty) database folds diacritics (see annodb.open)."""
        self._check()
        if self._next_address or self._documents:
            raise StorageError(f"{self.db.path}: diacritic folding is chosen when a database "
                               "is created, before it holds content")
        self._txn.set_meta(FOLD_DIACRITICS, bool(fold))
        self.fold_diacritics = bool(fold)

    def annotate(self, feature: str, p: int, q: int, value: float = 0.0) -> None:
        """Annotate addresses p..q with `feature` carrying `value`. An exact duplicate (p, q)
        replaces the value; if it would nest with an interval of the same feature, the inner
        one is kept. Addresses past the content are reserved (later text goes after)."""
        self._check()
        p, q = int(p), int(q)
        if not feature:
            raise AnnodbError("a feature name cannot be empty")
        if p < 0 or q < p:
            raise AnnodbError(f"bad interval [{p}, {q}]: need 0 <= p <= q")
        storage.check_address(q, f"annotating [{p}, {q}]")
        if q >= self._next_address:
            # reserve the addresses: text added later goes after them, never inside
            self._next_address = q + 1
        value = float(value)
        if value != value:
            raise AnnodbError("an annotation value cannot be NaN")
        fid = self._intern(feature)
        if tokenizer.tokens(feature) == [feature]:  # a word's list: df no longer known
            self._txn.forget_stats(fid)
        self._annotate_id(fid, p, q, value)
        self._dirty = True

    def _annotate_id(self, fid: int, p: int, q: int, value: float) -> None:
        self._ann.extend((fid, p, q, value))

    def note(self, docno: str, text: str, *, features=(),
             note_docno: str | None = None) -> Added:
        """Attach a searchable note to the document `docno`: a new document holding `text`
        (docno `note_docno`, replacing the note of that docno if there is one; default
        `note:<docno>:<address>`, with `_` added while that is taken) in the container
        `note:`, apart from the collection (no hit of its searches, not counted among its
        documents). Its range carries `note:` and each of `features`, valued with the
        target's first address, a link: `(>> : (@ note:))` is the noted documents;
        `search(q, container="note:")` and `(<< word note:)` search the notes. A
        `note_docno` held by a document that is not a note (one of the collection, a
        topic's record) is an AnnodbError: a note replaces only a note."""
        self._check()
        target = self.document(docno)
        if note_docno is None:
            note_docno = f"note:{docno}:{self._next_address}"
            while self.has(note_docno):
                note_docno += "_"
        else:
            check_note_docno(self, note_docno)
        added = self.add(text, docno=note_docno, replace=True, container=NOTES)
        for feature in dict.fromkeys((NOTES, *features)):
            self.annotate(feature, added.start, added.end, float(target.start))
        return added

    def erase(self, p: int, q: int) -> None:
        """Erase addresses p..q: content and annotations inside disappear from every read at
        commit (documents wholly inside are deleted). Erased addresses are never reused."""
        self._check()
        self._flush_docs()
        p, q = int(p), int(q)
        if p < 0 or q < p:
            raise AnnodbError(f"bad range [{p}, {q}]: need 0 <= p <= q")
        storage.check_address(q, f"erasing [{p}, {q}]")
        es, ee = self._txn.erased()
        for doc in list(self._txn.docs_overlapping(p, q)):
            if doc.container == DOCUMENT:  # (documents kept apart are not in the statistics)
                self._uncount(doc, p, q, (es, ee))
            if p <= doc.start and doc.end <= q:
                self._txn.delete_doc(doc)
                if doc.container == DOCUMENT:
                    self._documents -= 1
                    self._tokens -= doc.tokens
                else:
                    self._apart = (self._apart[0] - 1, self._apart[1] - doc.tokens)
        es, ee = kernels.merge_ranges(np.append(es, p), np.append(ee, q))
        self._txn.set_erased(es, ee)
        self.lists.reset()

    def _uncount(self, doc: Document, p: int, q: int, erased) -> None:
        """Take what erasing p..q removes of `doc` out of the statistics: the df of each
        word whose live postings in it all lie in p..q, and when it goes whole, its
        fields."""
        words = statistics.lost_words(doc, p, q, erased, self.fold_diacritics)
        if words:
            found = list(map(self._vocab.get, words))  # (new words are not stored yet)
            if None in found:
                found = [f if f is not None else g for f, g in
                         zip(found, self._txn.feature_ids(words))]
            fids = np.array([f for f in found if f is not None], dtype=np.int64)
            self._txn.add_doc_frequencies(fids, np.full(len(fids), -1, np.int64))
        if p <= doc.start and doc.end <= q:
            self._count_fields(statistics.document_fields(doc), -1)

    def delete(self, docno: str) -> bool:
        """Delete the document with this docno (erasing its addresses). False if absent."""
        self._check()
        self._flush_docs()
        start = self._txn.doc_start(docno)
        if start is None:
            return False
        doc = cast(Document, self._txn.doc_at_start(start))   # (its docno is there)
        self.erase(doc.start, doc.end)
        return True

    def _flush_docs(self) -> None:
        if self._doc_runs:
            runs = [r if isinstance(r, list) else r.result() for r in self._doc_runs]
            self._doc_runs = []
            self._txn.put_docs(runs)
        if self._new_docnos:
            self._txn.put_docnos(sorted(self._new_docnos.items()))
            self._new_docnos = {}

    def _flush(self) -> None:
        """Write the buffered documents and annotations into the LMDB transaction.

        Features first interned since the last flush have no blocks yet and ids above every
        stored block's: their lists (token postings encoded by one kernel call, other
        annotations list by list) go to LMDB as one sorted append, which fills pages. The
        other features add to their existing lists (append to, or merge into, the last
        blocks)."""
        txn = self._txn
        if self._new_names:
            names = self._new_names[self._named:]
            txn.add_features(names, np.fromiter(map(self._vocab.__getitem__, names),
                                                dtype=np.int64, count=len(names)))
            self._named = len(self._new_names)
        fresh = self._first_new_feature
        new_blocks = []  # (fids, firsts, buf, offsets) of new features' lists
        token_fids = set()
        if not self._tok_count:
            self._tok_ids, self._tok_runs = [], []
        else:
            ids = np.concatenate(self._tok_ids)
            run_starts, run_counts = (np.concatenate(c) for c in zip(*self._tok_runs))
            # the tokens' addresses grouped by feature (ascending), in address order
            fids, bounds, sorted_addrs = kernels.group_postings(ids, run_starts, run_counts,
                                                                self._next_feature)
            # the ids ascending: the stored features' groups first, then the new ones',
            # each a run of the sorted points
            k = int(np.searchsorted(fids, fresh))
            cut = int(bounds[k])
            if k:
                # every stored interval ends before this flush's new text: addresses only
                # grow (annotate reserves any address it uses past the content)
                txn.add_point_groups(fids[:k], sorted_addrs[:cut], bounds[:k + 1],
                                     after=int(run_starts.min()))  # (no empty runs)
            if k < len(fids):
                buf, offs, grp, first = txn.encode_point_groups(sorted_addrs[cut:],
                                                                bounds[k:] - cut)
                new_blocks.append((fids[k:][grp], first, buf, offs))
                token_fids = set(fids[k:].tolist())
            self._tok_ids, self._tok_runs, self._tok_count = [], [], 0
        later = []
        self._ann_flush_list()
        if self._ann_arrays:
            fids, ps, qs, vs = (np.concatenate(c) for c in zip(*self._ann_arrays))
            order = kernels.group_order(fids, self._next_feature)  # stable: write order
            fids, ps, qs, vs = fids[order], ps[order], qs[order], vs[order]
            cuts = (np.flatnonzero(np.diff(fids)) + 1).tolist()
            for a, b in zip([0] + cuts, cuts + [len(fids)]):
                fid = int(fids[a])
                lst = kernels.normalize(ps[a:b], qs[a:b], vs[a:b])
                if fid >= fresh and fid not in token_fids:
                    new_blocks.append(txn.encode_list(fid, lst[0], lst[1], lst[2],
                                                      storage.ANNOTATION_BLOCK))
                else:
                    later.append((fid, lst))
            self._ann_arrays = []
        if new_blocks:
            fids, firsts, bufs, offsets = zip(*new_blocks)
            txn.put_blocks(np.concatenate(fids), np.concatenate(firsts), bufs, offsets,
                           tails=token_fids)
        for fid, lst in later:  # old features, or new ones with tokens too: after the append
            txn.add_to_list(fid, lst[0], lst[1], lst[2], storage.ANNOTATION_BLOCK)
        self._flush_docs()  # last: their compression ran meanwhile
        self._first_new_feature = self._next_feature
        self.lists.reset()
        self._dirty = False


def _conforms(snapshot: Snapshot, writer: Writer) -> tuple[reading.ReadView, reading.ReadView]:
    """(mypy checks here that a snapshot and a write transaction are read interfaces)"""
    return snapshot, writer
