"""A sharded collection's transactions: a read snapshot over every shard and a write
transaction of one shard (annodb.shards has the layout, the routing and what differs from
one database). Their methods are those of annodb.Snapshot and annodb.Writer: per-shard
work, one exact merge (SSR needs only what is inside a container, so per-shard rankings
merged by score, then address, are one database's; BM25 and sparse scores need, besides,
the collection's statistics: summed over the shards in one place, `statistics`, and given
to every shard's ranking, so each scores as one database would).
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from .. import (batch, bm25, kernels, rankers, ranking, reading, records, scoring, statistics,
               transaction)
from ..errors import AnnodbError, NotFoundError, StorageError
from ..gcl import Budget, prepare
from ..intervals import Intervals
from ..statistics import Statistics
from ..transaction import DOCUMENT, Stats
from .routing import route, shard_name


def _merge_intervals(found: list[Intervals]) -> Intervals:
    """The union of per-shard lists, by start then end; a duplicate once (the first)."""
    found = [x for x in found if len(x)]
    if not found:
        return Intervals.empty()
    if len(found) == 1:
        return found[0]
    s = np.concatenate([x.starts for x in found])
    e = np.concatenate([x.ends for x in found])
    v = np.concatenate([x.values for x in found])
    order = np.lexsort((e, s))
    s, e, v = s[order], e[order], v[order]
    keep = np.r_[True, (s[1:] != s[:-1]) | (e[1:] != e[:-1])]
    return Intervals(s[keep], e[keep], v[keep])


ALL = 1 << 62  # a depth past every container (a fused ranking fuses whole rankings)


def load_merge_kernels() -> None:
    """Load the kernel merge_rankings runs (the one a sharded collection's reads add to a
    database's), as database.load_write_kernels loads a write's: before a sharded write
    takes the collection's lock, whose searches merge."""
    kernels.merge_ranked(np.zeros(2), np.arange(2, dtype=np.int64), [1, 1], 2)


def merge_rankings(snapshot, rankings: list, depth: int) -> scoring.Ranking:
    """Per-shard rankings (each to `depth`) merged exactly: score descending, ties by
    address, to `depth`. Where each ranked container lives is remembered (see
    ShardedSnapshot.document_at)."""
    first = rankings[0]
    s, e, sc, cs, ce = [np.concatenate([getattr(r, name) for r in rankings]) for name in
                        ("starts", "ends", "scores", "cover_starts", "cover_ends")]
    order, home = kernels.merge_ranked(sc, s, [len(r) for r in rankings], depth)
    snapshot.db.homes.remember(s[order], home)
    return scoring.Ranking(snapshot, first.query, list(first.warnings), s[order], e[order],
                           sc[order], cs[order], ce[order], sum(r.total for r in rankings))


class ShardedSnapshot:
    """A read snapshot over every shard, with the methods of annodb.Snapshot: per-shard
    work, one exact merge."""

    def __init__(self, db, parts: list):
        self.db = db
        self.parts = parts
        self.fold_diacritics = db.fold_diacritics
        self._done = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if not self._done:
            self._done = True
            for part in self.parts:
                part.close()

    def _ask(self, method: str, *args, **kwargs) -> list:
        """part.method(*args, **kwargs) of every part, in order (ShardedDatabase.ask: the
        shards in worker processes or on Ray asked at once, the others meanwhile)."""
        if self._done:
            raise StorageError("this transaction has ended")
        return self.db.ask(self.parts, method, args, kwargs)

    def _order(self, docno: str) -> list:
        """The parts in the order a docno is looked for: its shard first."""
        home = route(docno, len(self.parts))
        return [self.parts[home]] + self.parts[:home] + self.parts[home + 1:]

    # annotation lists
    def intervals(self, feature: str) -> Intervals:
        return _merge_intervals([p.intervals(feature) for p in self.parts])

    def term(self, token: str) -> Intervals:
        return _merge_intervals([p.term(token) for p in self.parts])

    def list_count(self, feature: str) -> int:
        return sum(p.list_count(feature) for p in self.parts)

    def has_feature(self, name: str) -> bool:
        return any(p.has_feature(name) for p in self.parts)

    def features_with_prefix(self, prefix: str, limit: int = 100) -> list[str]:
        names = set()
        for p in self.parts:
            names.update(p.features_with_prefix(prefix, limit))
        return sorted(names)[:limit]

    def word_candidates(self, words: list[str], limit: int = scoring.FORMS) -> list:
        """Each shard's word_candidates, in one call each: per word the union of their
        names, cut where one database's would be (each shard's first 4 * limit hold every
        name of the union's first 4 * limit that it has), and their counts added up."""
        out = []
        for found in zip(*self._ask("word_candidates", list(words), limit)):
            names = sorted({f for part_names, _ in found for f in part_names})[:4 * limit]
            counts: dict[str, int] = {}
            for _, part_counts in found:
                for f, n in part_counts.items():
                    counts[f] = counts.get(f, 0) + n
            out.append((names, counts))
        return out

    def erased(self) -> tuple[np.ndarray, np.ndarray]:
        found = [p.erased() for p in self.parts]
        return kernels.merge_ranges(np.concatenate([s for s, _ in found]),
                                    np.concatenate([e for _, e in found]))

    # documents
    def has(self, docno: str) -> bool:
        return any(p.has(docno) for p in self._order(docno))

    def present(self, docnos: list[str]) -> dict[str, int]:
        found = {}
        for p in self.parts:
            found.update(p.present(docnos))
        return found

    def _holding(self, docno: str):
        """(the part holding docno, its document), or (None, None)."""
        for p in self._order(docno):
            try:
                return p, p.document(docno)
            except NotFoundError:
                continue
        return None, None

    def document(self, docno: str):
        doc = self._holding(docno)[1]
        if doc is None:
            raise NotFoundError(f"no document with docno {docno!r}")
        return doc

    def find(self, docno: str):
        """As Snapshot.find (reading.find)."""
        return reading.find(self, docno)

    def document_at(self, address: int):
        """The document holding `address`: asked of the shard that ranked it, if a ranking
        did (one lookup, not one per shard: on Ray actors a round trip each), else of each
        shard in turn."""
        home = self.db.homes.get(int(address))
        parts = self.parts if home is None else \
            [self.parts[home]] + self.parts[:home] + self.parts[home + 1:]
        for p in parts:
            doc = p.document_at(address)
            if doc is not None:
                return doc
        return None

    def documents_at(self, addresses) -> list:
        """document_at of each address, in order: one call per shard for the addresses a
        ranking placed there (on Ray actors one round trip per shard, not per address),
        then document_at for the rest."""
        addresses = [int(a) for a in addresses]
        found: list = [None] * len(addresses)
        asked: dict[int, list[int]] = {}
        for i, a in enumerate(addresses):
            home = self.db.homes.get(a)
            if home is not None:
                asked.setdefault(home, []).append(i)
        for home, which in asked.items():
            docs = self.parts[home].documents_at([addresses[i] for i in which])
            for i, doc in zip(which, docs):
                found[i] = doc
        for i, a in enumerate(addresses):
            if found[i] is None:
                found[i] = self.document_at(a)
        return found

    def docnos_at(self, addresses) -> list:
        """The docno of documents_at of each address (None where there is none)."""
        return [None if d is None else d.docno for d in self.documents_at(addresses)]

    def documents(self):
        return heapq.merge(*(p.documents() for p in self.parts), key=lambda d: d.start)

    def documents_in(self, p: int, q: int) -> list:
        return list(heapq.merge(*(part.documents_in(p, q) for part in self.parts),
                                key=lambda d: d.start))

    def _parts_over(self, p: int, q: int) -> list[int]:
        return [i for i, part in enumerate(self.parts) if part.documents_in(p, q)]

    def text(self, p: int, q: int) -> str:
        """As Snapshot.text: each document's live text of p..q, joined by newlines."""
        return self.texts([p], [q])[0]

    def texts(self, starts, ends) -> list[str]:
        """text(p, q) of each range (p, q), in order: every shard asked once for its
        documents' pieces (text_pieces), joined in address order, as one database joins
        them."""
        return ["\n".join(piece for _, piece in found)
                for found in self.text_pieces(starts, ends)]

    def text_pieces(self, starts, ends) -> list[list[tuple[int, str]]]:
        """As Snapshot.text_pieces: each range's text a document at a time, [(the
        document's start, its text in the range)] in address order; every shard asked once
        for its documents' pieces, joined."""
        starts, ends = [int(p) for p in starts], [int(q) for q in ends]
        found = self._ask("text_pieces", starts, ends)
        return [sorted(p for part in each for p in part) for each in zip(*found)]

    def address_space(self) -> int:
        return max(p.address_space() for p in self.parts)

    def document_count(self) -> int:
        return sum(p.document_count() for p in self.parts)

    def stats(self) -> Stats:
        """Sums over the shards (`features` counts each shard's lists: a word in two shards
        counts twice); `addresses` is the collection's address space."""
        found = [p.stats() for p in self.parts]
        return Stats(documents=sum(s.documents for s in found),
                     tokens=sum(s.tokens for s in found),
                     features=sum(s.features for s in found),
                     addresses=max(s.addresses for s in found),
                     erased_ranges=sum(s.erased_ranges for s in found), path=self.db.path,
                     size_bytes=sum(s.size_bytes for s in found),
                     agent_documents=sum(s.agent_documents for s in found),
                     agent_tokens=sum(s.agent_tokens for s in found))

    def token_count(self) -> int:
        return sum(p.token_count() for p in self.parts)

    def sparse_fields(self) -> list[str]:
        return sorted({f for p in self.parts for f in p.sparse_fields()})

    def field_statistics(self) -> dict[str, tuple[int, int]]:
        return self.statistics().fields

    def statistics(self, features=(), fields=()) -> statistics.Statistics:
        """The shards' statistics combined (statistics.combine): what a ranker weighing
        words (SSR's free text, BM25, sparse) needs to rank exactly as one database."""
        features, fields = list(features), list(fields)
        return statistics.combine(self._ask("statistics", features, fields))

    # queries
    def query(self, gcl, *, lenient: bool = False, budget: Budget | None = None) -> Intervals:
        """The union of each shard's intervals (see the module docstring: no interval
        spans two shards)."""
        node, _ = prepare(self, gcl, lenient=lenient)
        budget = budget or Budget()
        return _merge_intervals(self._ask("query", node, budget=budget))

    def count(self, gcl, *, lenient: bool = False) -> int:
        return len(self.query(gcl, lenient=lenient))

    def rank(self, gcl, *, depth: int = scoring.DEPTH, container: str = DOCUMENT,
             lenient: bool = False, budget: Budget | None = None,
             rank: str | rankers.Ranker = "ssr", scoring: bm25.Scoring | None = None
             ) -> scoring.Ranking:
        """As Snapshot.rank: the ranker's ranking (ranking.rank), through ranked."""
        return ranking.rank(self, gcl, rankers.make(rank, settings=scoring), depth=depth,
                            container=container, lenient=lenient, budget=budget)

    def ranked(self, node, ranker: scoring.RankedBy = rankers.BY_SSR, *,
               depth: int = scoring.DEPTH,
               container: str = DOCUMENT, budget: Budget | None = None,
               statistics: Statistics | None = None,
               words=None) -> scoring.Ranking:
        """Each shard ranked to `depth`, merged exactly (see merge_rankings); by BM25 or
        sparse scores with the collection's statistics; fused from the whole merged SSR
        and BM25 rankings, as one database fuses them."""
        budget = budget or Budget()
        scored = ranker.scored
        if ranker.fuses and scored is not None:
            a = self.ranked(node, rankers.BY_SSR, depth=ALL, container=container,
                            budget=budget)
            b = self.ranked(node, scored, depth=ALL, container=container, budget=budget)
            ids, sc = scoring.fuse(a.starts, b.starts, depth, len(a))
            at = np.argsort(a.starts)
            at = at[np.searchsorted(a.starts[at], ids)]
            return scoring.Ranking(self, a.query, [], a.starts[at], a.ends[at], sc,
                                   a.cover_starts[at], a.cover_ends[at], a.total)
        if scored is not None:
            scored = scored.resolved(self)
            if statistics is None:
                statistics = self.statistics(*scored.statistics_needed(
                    scored.query_terms(node) if words is None else words))
        # (only what differs from ranked's defaults: a worker's request is pickled, and an
        # SSR ranking's ranker and a budget without limits cost half its time)
        options: dict = {"depth": depth, "container": container}
        if budget.postings is not None or budget.deadline is not None:
            options["budget"] = budget
        if scored is not None:
            options.update(ranker=scored, statistics=statistics)
        if words is not None:
            options["words"] = words
        found = self._ask("ranked", node, **options)
        return merge_rankings(self, found, depth)

    def search(self, gcl, k: int = 10, *, container: str = DOCUMENT, lenient: bool = False,
               snippets: bool = True, rank: str | rankers.Ranker = "ssr",
               k1: float | None = None, b: float | None = None, fields=None,
               sparse_field: str | None = None, feedback=None) -> ranking.Results:
        return ranking.search(self, gcl, rankers.make(rank, k1, b, fields, sparse_field,
                                                      feedback),
                              k=k, container=container, lenient=lenient, snippets=snippets)

    def search_text(self, text, k: int = 10, *, container: str = DOCUMENT,
                    snippets: bool = True, rank: str | rankers.Ranker = rankers.TEXT_RANK,
                    k1: float | None = None, b: float | None = None, fields=None,
                    sparse_field: str | None = None, feedback=None) -> ranking.Results:
        return ranking.search_text(self, text, rankers.make(rank, k1, b, fields,
                                                            sparse_field, feedback),
                                   k=k, container=container, snippets=snippets)

    def top_words(self, words, k: int, *, container: str = DOCUMENT,
                  scored: scoring.WordScorer, statistics: Statistics | None = None):
        """Each shard's best k by the collection's statistics, merged (score, address);
        where each lives is remembered, as merge_rankings does (their documents are read
        next)."""
        if statistics is None:
            statistics = self.statistics(*scored.statistics_needed(words))
        found = self._ask("top_words", words, k, container=container, scored=scored,
                          statistics=statistics)
        s, e, sc = (np.concatenate(x) for x in zip(*found))
        order = np.lexsort((s, -sc))[:max(k, 0)]
        home = np.repeat(np.arange(len(found)), [len(f[0]) for f in found])[order]
        self.db.homes.remember(s[order], home)
        return s[order], e[order], sc[order]

    def word_covers(self, words, s, e):
        """Each container's window, from the one shard holding it (the others find none
        of the words inside it: they answer (-1, -1), as bm25.covers does where no shard
        finds one)."""
        cs, ce = np.full(len(s), -1, np.int64), np.full(len(s), -1, np.int64)
        for ps, pe in self._ask("word_covers", words, s, e):
            found = ps >= 0
            cs[found], ce[found] = ps[found], pe[found]
        return cs, ce

    def text_scorer(self, container: str = DOCUMENT):
        """scoring.scorer per shard; a node's containers are the shards' concatenated
        (search_text orders them itself)."""
        scorers = [p.text_scorer(container) for p in self.parts]

        def score(nodes) -> list[tuple]:
            found = self.db.each(lambda s: s(nodes), scorers)
            return [tuple(np.concatenate([f[j][c] for f in found]) for c in range(5))
                    for j in range(len(nodes))]
        return score


class ShardedWriter(ShardedSnapshot):
    """A write transaction of a sharded collection: it writes one shard (the one its first
    write routes to, see the module docstring) and reads every shard, its own writes
    included."""

    def __init__(self, db, parts: list, lock, timeout: float):
        super().__init__(db, parts)
        self._lock = lock
        self._timeout = timeout
        self._writing: int | None = None

    def _ask(self, method: str, *args, **kwargs) -> list:
        # a write transaction stays on its thread (LMDB's rule), its parts in this process
        if self._done:
            raise StorageError("this transaction has ended")
        return [getattr(p, method)(*args, **kwargs) for p in self.parts]

    def _writer(self, i: int, what: str) -> transaction.Writer:
        """The write transaction of shard i (begun on first use); AnnodbError when this
        transaction writes another shard already."""
        if self._done:
            raise StorageError("this transaction has ended")
        if self._writing is None:
            w = self.db.shards[i].write(self._timeout, allocate=self.db.allocate)
            self.parts[i].close()
            self.parts[i] = w
            self._writing = i
        elif self._writing != i:
            raise AnnodbError(
                f"{self.db.path}: this write transaction writes {shard_name(self._writing)} "
                f"and {what} lives in {shard_name(i)}: a transaction of a sharded "
                "collection writes one shard (each document and everything about it lives "
                "in one); commit this one and write that in a transaction of its own")
        return self.parts[i]

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def commit(self) -> None:
        """Commit the shard written (if any): atomically, as one database commits."""
        if self._done:
            raise StorageError("this transaction has ended")
        try:
            if self._writing is not None:
                self.parts[self._writing].commit()
        finally:
            self._end()

    def abort(self) -> None:
        if not self._done:
            self._end()

    def _end(self) -> None:
        try:
            self.close()  # (a writer's close aborts what was not committed)
        finally:
            self._lock.release()

    # writes
    def add(self, content, docno: str | None = None, *, id_field: str | None = None,
            text_fields: list[str] | None = None, replace: bool = False,
            container: str = DOCUMENT, sparse_fields=()) -> transaction.Added:
        """As Writer.add: the document goes to the shard its docno routes to."""
        return self.add_many([(content, docno)], id_field=id_field, text_fields=text_fields,
                             replace=replace, container=container,
                             sparse_fields=sparse_fields)[0]

    def add_many(self, items, *, id_field: str | None = None,
                 text_fields: list[str] | None = None, replace: bool = False,
                 container: str = DOCUMENT, sparse_fields=()) -> list[transaction.Added]:
        """As Writer.add_many; every document must route to the shard this transaction
        writes (AnnodbError naming both shards otherwise). A document without a docno is
        named `d<start>` from its global start, as one database names it."""
        if container != DOCUMENT:
            transaction.check_container(container)
        sparse = tuple(records.check_sparse_field(f) for f in sparse_fields)
        docs = [batch.prepare_item(content, docno, id_field, text_fields, sparse)
                for content, docno in items]
        try:
            b = batch.make(docs, container, sparse)
        except UnicodeError as err:
            raise AnnodbError(f"document text is not valid Unicode ({err})") from None
        except ValueError as err:
            raise AnnodbError(str(err)) from None
        docnos = list(b.docnos)
        for docno in docnos:
            if docno is not None:
                transaction.check_docno(docno)
        shards = {route(d, len(self.parts)) for d in docnos if d is not None}
        if len(shards) > 1:
            a, c = sorted(shards)[:2]
            raise AnnodbError(
                f"{self.db.path}: these documents route to {shard_name(a)} and "
                f"{shard_name(c)} (by docno): a transaction of a sharded collection writes "
                "one shard; add them in a transaction each, or ingest them (`annodb ingest` "
                "writes every shard in parallel)")
        starts = None
        if None in docnos:  # named from the start they will have: reserve it first
            at_least = self.parts[self._writing].address_space() \
                if self._writing is not None else 0
            starts = self.db.allocate(b, at_least)
            taken = set(docnos)
            documents = list(b.documents or ())
            for i, docno in enumerate(docnos):
                if docno is None:
                    docno = f"d{int(starts[i])}"
                    while docno in taken or self.has(docno):
                        docno += "_"
                    taken.add(docno)
                    docnos[i] = docno
                    documents[i] = (docno,) + documents[i][1:]
            b = dataclasses.replace(b, docnos=docnos, documents=documents)
            named = {route(d, len(self.parts)): d for d in docnos}
            if len(named) > 1:  # docno-less documents route by the names they get
                a, c = list(named.values())[:2]
                self._refuse_split(a, c)
        if not docnos:
            return []
        w = self._writer(route(docnos[0], len(self.parts)), f"the document {docnos[0]!r}")
        return w.add_batch(b, replace=replace, starts=starts)

    def _refuse_split(self, a: str, b: str) -> None:
        n = len(self.parts)
        raise AnnodbError(
            f"{self.db.path}: the documents {a!r} and {b!r} route to "
            f"{shard_name(route(a, n))} and {shard_name(route(b, n))}: a transaction of a "
            "sharded collection writes one shard; add them in a transaction each")

    def _over(self, p: int, q: int, what: str) -> transaction.Writer:
        """The writer of the one shard holding documents over p..q."""
        found = self._parts_over(p, q)
        if not found:
            raise AnnodbError(f"{self.db.path}: no document lies over [{p}, {q}]; in a "
                              f"sharded collection {what} goes to the shard of the document "
                              "it is about")
        if len(found) > 1:
            raise AnnodbError(
                f"{self.db.path}: [{p}, {q}] spans documents of {shard_name(found[0])} and "
                f"{shard_name(found[1])}: a transaction of a sharded collection writes one "
                f"shard; {what} one document at a time")
        return self._writer(found[0], f"[{p}, {q}]")

    def annotate(self, feature: str, p: int, q: int, value: float = 0.0) -> None:
        """As Writer.annotate, in the shard of the documents over p..q (one shard)."""
        if int(q) < int(p) or int(p) < 0:
            raise AnnodbError(f"bad interval [{p}, {q}]: need 0 <= p <= q")
        self._over(int(p), int(q), "an annotation").annotate(feature, p, q, value)

    def erase(self, p: int, q: int) -> None:
        if int(q) < int(p) or int(p) < 0:
            raise AnnodbError(f"bad range [{p}, {q}]: need 0 <= p <= q")
        self._over(int(p), int(q), "an erase").erase(p, q)

    def delete(self, docno: str) -> bool:
        part, doc = self._holding(docno)
        if doc is None:
            return False
        return self._writer(self.parts.index(part), f"the document {docno!r}").delete(docno)

    def note(self, docno: str, text: str, *, features=(),
             note_docno: str | None = None) -> transaction.Added:
        """As Writer.note: the note lives in its target's shard (a `note_docno` held in
        another shard, by anything, is an AnnodbError: one docno, one document)."""
        part, doc = self._holding(docno)
        if doc is None:
            raise NotFoundError(f"no document with docno {docno!r}")
        w = self._writer(self.parts.index(part), f"the document {docno!r}")
        if note_docno is not None:
            transaction.check_note_docno(self, note_docno)
            holder = self._holding(note_docno)[0]
            if holder is not None and holder is not w:
                raise AnnodbError(f"cannot write the note {note_docno!r} about {docno!r}: "
                                  "a note of that docno lives in another shard than its "
                                  "target's; nothing was written")
        return w.note(docno, text, features=features, note_docno=note_docno)

    def address_space(self) -> int:
        return max(max(p.address_space() for p in self.parts), self.db._counter())

    def set_folding(self, fold: bool) -> None:
        raise StorageError(f"{self.db.path}: a sharded collection's diacritic folding is "
                           "chosen when it is created (annodb.open(path, shards=N, "
                           "fold_diacritics=True))")


def _conforms(snapshot: ShardedSnapshot, writer: ShardedWriter
              ) -> tuple[reading.ReadView, reading.ReadView]:
    """(mypy checks here that a sharded snapshot and write transaction are read
    interfaces)"""
    return snapshot, writer
