"""Workloads, models and checks shared by the reliability tests, and the entry point of
the child processes they start (`python workload.py MODE ...`; see main()).

The size knob lives here: `LONG` is set by conftest.py (see its docstring) and every test
takes its counts and durations from `size(short, long)`.

Documents are made so that a reader can verify them from their docno alone:

    docno  b<seq>.<i>.<n>   document i of the n written by operation <seq>
           n<seq>           a note written by operation <seq>
    text   "<batch marker> <unique marker> <words...> zend", drawn from Random(docno), so
           doc_text(docno) regenerates it; the batch marker (bt<seq>, or nt<seq> for a
           note) is in every document of the operation, the unique marker in that one only.

The crash workload (class Workload) logs every transaction to a side file: a "begin" line
before it starts and a "commit" line after commit() returned, each written with one
os.write on an O_APPEND descriptor (a SIGKILL cannot tear it). replay() rebuilds the
expected state from such a log, and verify() compares a database with it, accepting the
one operation in flight at a crash as either wholly applied or wholly absent (an ingest in
flight: any prefix of its batches).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback

LONG = False  # set by conftest.py: the long (ANNODB_RELIABILITY=long / -m reliability) run
SEED = int(os.environ.get("ANNODB_RELIABILITY_SEED", "20250101"))
HERE = os.path.dirname(os.path.abspath(__file__))

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu river stone cloud ember frost grove harbor island jungle meadow north ocean "
         "prairie quartz ridge summit tundra valley willow canyon desert forest glacier "
         "lagoon marsh plateau reef savanna volcano basin cliff delta dune estuary fjord "
         "geyser hill inlet key lake mesa oasis peak rapids shoal strait swamp tide").split()


def size(short, long):
    """The short or the long value of a knob, by the run's mode."""
    return long if LONG else short


def seq_of(docno: str) -> int:
    return int(docno[1:].split(".")[0])


def batch_marker(docno: str) -> str:
    return ("nt" if docno.startswith("n") else "bt") + str(seq_of(docno))


def unique_marker(docno: str) -> str:
    return "dn" + docno.replace(".", "x")


def batch_size_of(docno: str) -> int | None:
    """n of a docno b<seq>.<i>.<n>, None for a note."""
    parts = docno.split(".")
    return int(parts[2]) if len(parts) == 3 else None


def doc_text(docno: str, words: int | None = None) -> str:
    rng = random.Random(docno)
    if words is None:
        words = rng.randint(4, 40)
    body = " ".join(rng.choice(WORDS) for _ in range(words))
    return f"{batch_marker(docno)} {unique_marker(docno)} {body} zend"


def jsonl_line(docno: str, text: str) -> str:
    return json.dumps({"docid": docno, "text": text}) + "\n"


def merge_ranges(ranges):
    """Sorted, disjoint, non-adjacent ranges (the storage's rule for erased ranges)."""
    out = []
    for p, q in sorted(ranges):
        if out and p <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], q)
        else:
            out.append([p, q])
    return [tuple(r) for r in out]


# ------------------------------------------------------------------ the logged workload


class Log:
    """The side file: one JSON object per line, each written by one os.write."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    def close(self) -> None:
        os.close(self.fd)


def read_log(path: str) -> list[dict]:
    """The records of a log; a torn last line (there should be none) is ignored."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                break
    return out


class Workload:
    """Random transactions on one database, each logged: batches (add_many), ingests of a
    JSONL file in several batches, annotations, deletes, erases (whole documents, or a
    range inside one) and notes."""

    OPS = (("batch", 30), ("ingest", 12), ("annotate", 22), ("delete", 10),
           ("erase_docs", 8), ("erase_inside", 8), ("note", 10))

    def __init__(self, db, log_path: str, seed: int, seq_base: int, scratch: str,
                 big_every: int = 25, linger: float = 0.0):
        self.db = db
        self.log = Log(log_path)
        self.rng = random.Random(seed)
        self.seq = seq_base
        self.scratch = scratch
        self.big_every = big_every
        self.linger = linger  # up to this long between a commit and its log line
        self.live = {}  # docno -> (start, end, tokens)
        with db.read() as r:
            for d in r.documents():
                self.live[d.docno] = (d.start, d.end, d.tokens)
        names, weights = zip(*self.OPS)
        self._names, self._weights = names, weights

    def step(self, single: bool = False) -> str:
        """One transaction (or one ingest, several; `single`: never an ingest); returns
        its kind."""
        op = self.rng.choices(self._names, self._weights)[0]
        if single and op == "ingest":
            op = "batch"
        if op != "batch" and op != "ingest" and len(self.live) < 5:
            op = "batch"
        self.seq += 1
        getattr(self, "_" + op)()
        return op

    def _committed(self) -> None:
        """Called after commit() returned, before the log says so: lingering here (half
        the time) widens the window where a kill finds a commit the log does not show."""
        if self.linger and self.rng.random() < 0.5:
            time.sleep(self.rng.uniform(0, self.linger))

    def _docs_by_address(self):
        return sorted(self.live.items(), key=lambda kv: kv[1][0])

    def _batch(self):
        n = self.rng.randint(1, 40)
        big = self.rng.randrange(self.big_every) == 0
        docnos = [f"b{self.seq}.{i}.{n}" for i in range(n)]
        words = 3000 if big else None
        self.log.write({"k": "begin", "op": "batch", "seq": self.seq, "docnos": docnos,
                        "words": words})
        with self.db.write() as w:
            added = w.add_many([(doc_text(d, words), d) for d in docnos])
        self._committed()
        self.log.write({"k": "commit", "added": [[a.docno, a.start, a.end] for a in added]})
        for a in added:
            self.live[a.docno] = (a.start, a.end, a.end - a.start + 1)

    def _ingest(self):
        from annodb.ingest import ingest
        per = self.rng.randint(1, 15)
        batches = self.rng.randint(2, 5)
        n = per * batches
        docnos = [f"b{self.seq}.{i}.{n}" for i in range(n)]
        path = os.path.join(self.scratch, f"ingest{self.seq}.jsonl")
        with open(path, "w") as f:
            for d in docnos:
                f.write(jsonl_line(d, doc_text(d)))
        self.log.write({"k": "begin", "op": "ingest", "seq": self.seq,
                        "batches": [docnos[i:i + per] for i in range(0, n, per)]})
        summary = ingest(self.db, [path], batch_size=per, strict=True)
        assert summary.added == n, summary
        with self.db.read() as r:
            docs = [r.document(d) for d in docnos]
        self._committed()
        self.log.write({"k": "commit", "added": [[d.docno, d.start, d.end] for d in docs]})
        for d in docs:
            self.live[d.docno] = (d.start, d.end, d.tokens)
        os.unlink(path)

    def _annotate(self):
        picks = self.rng.sample(sorted(self.live), min(len(self.live), self.rng.randint(1, 6)))
        items = []
        for d in picks:
            start, end, _ = self.live[d]
            items.append([d, start, end, f"tag:{self.rng.randrange(4)}",
                          float(self.rng.randint(-1000, 1000))])
        self.log.write({"k": "begin", "op": "annotate", "items": items})
        with self.db.write() as w:
            for _, start, end, feature, value in items:
                w.annotate(feature, start, end, value)
        self._committed()
        self.log.write({"k": "commit"})

    def _delete(self):
        picks = self.rng.sample(sorted(self.live), min(len(self.live), self.rng.randint(1, 3)))
        self.log.write({"k": "begin", "op": "delete", "docnos": picks})
        with self.db.write() as w:
            for d in picks:
                assert w.delete(d)
        self._committed()
        self.log.write({"k": "commit"})
        for d in picks:
            del self.live[d]

    def _erase_docs(self):
        docs = self._docs_by_address()
        i = self.rng.randrange(len(docs))
        j = min(len(docs) - 1, i + self.rng.randint(0, 4))
        p, q = docs[i][1][0], docs[j][1][1]
        self.log.write({"k": "begin", "op": "erase", "p": p, "q": q})
        with self.db.write() as w:
            w.erase(p, q)
        self._committed()
        self.log.write({"k": "commit"})
        for d, (s, e, _) in docs[i:j + 1]:
            del self.live[d]

    def _erase_inside(self):
        # a range strictly inside one document, sparing its two markers and its last token
        fit = [d for d, (_, _, n) in self.live.items() if n >= 8]
        if not fit:
            return self._batch()
        d = self.rng.choice(sorted(fit))
        start, end, n = self.live[d]
        p = start + self.rng.randint(2, n - 3)
        q = self.rng.randint(p, end - 1)
        self.log.write({"k": "begin", "op": "erase", "p": p, "q": q})
        with self.db.write() as w:
            w.erase(p, q)
        self._committed()
        self.log.write({"k": "commit"})

    def _note(self):
        target = self.rng.choice(sorted(self.live))
        docno = f"n{self.seq}"
        self.log.write({"k": "begin", "op": "note", "docno": docno, "target": target,
                        "target_start": self.live[target][0]})
        with self.db.write() as w:
            added = w.note(target, doc_text(docno), note_docno=docno)
        self._committed()
        self.log.write({"k": "commit", "added": [[added.docno, added.start, added.end]]})
        self.live[docno] = (added.start, added.end, added.end - added.start + 1)


# ------------------------------------------------------------------ the model and verify


class Model:
    """The expected state: live documents (docno -> [start, end], None when not known),
    tags (feature -> docno -> value), notes (docno -> target start), erased ranges."""

    def __init__(self):
        self.docs: dict[str, list] = {}
        self.words: dict[str, int | None] = {}
        self.tags: dict[str, dict[str, float]] = {}
        self.notes: dict[str, float] = {}
        self.erased: list[tuple[int, int]] = []

    def copy(self) -> "Model":
        m = Model()
        m.docs = {k: list(v) for k, v in self.docs.items()}
        m.words = dict(self.words)
        m.tags = {k: dict(v) for k, v in self.tags.items()}
        m.notes = dict(self.notes)
        m.erased = list(self.erased)
        return m

    def apply(self, begin: dict, added=None, prefix: int | None = None) -> None:
        """Apply one logged operation. `added`: [docno, start, end] of what it added, when
        known; `prefix`: for an ingest, how many of its batches (None: all)."""
        where = {d: (s, e) for d, s, e in (added or [])}
        op = begin["op"]
        if op in ("batch", "ingest"):
            batches = begin["batches"] if op == "ingest" else [begin["docnos"]]
            if prefix is not None:
                batches = batches[:prefix]
            for batch in batches:
                for d in batch:
                    self.docs[d] = list(where.get(d, (None, None)))
                    self.words[d] = begin.get("words")
        elif op == "annotate":
            for d, _, _, feature, value in begin["items"]:
                self.tags.setdefault(feature, {})[d] = value
        elif op == "delete":
            for d in begin["docnos"]:
                self._erase(*self.docs.pop(d))
        elif op == "erase":
            p, q = begin["p"], begin["q"]
            for d, (s, e) in list(self.docs.items()):
                if p <= s and e <= q:
                    del self.docs[d]
            self._erase(p, q)
        elif op == "note":
            self.docs[begin["docno"]] = list(where.get(begin["docno"], (None, None)))
            self.words[begin["docno"]] = None
            self.notes[begin["docno"]] = float(begin["target_start"])
        else:
            raise AssertionError(f"unknown op {op!r}")

    def _erase(self, p, q) -> None:
        self.erased = merge_ranges(self.erased + [(p, q)])


def replay(records: list[dict]):
    """(model of every resolved operation, the begin record in flight or None)."""
    model = Model()
    pending = None
    for rec in records:
        if rec["k"] == "begin":
            assert pending is None, "two operations in flight"
            pending = rec
        elif rec["k"] == "commit":
            model.apply(pending, rec.get("added"))
            pending = None
        elif rec["k"] == "resolved":      # a crash's in-flight op, as verify() found it
            if rec["applied"]:
                model.apply(pending, rec.get("added"), rec.get("prefix"))
            pending = None
    return model, pending


def candidates(model: Model, pending: dict | None):
    """(label, model, prefix) of every state a crash may leave."""
    out = [("absent", model, 0)]
    if pending is None:
        return out
    steps = range(1, len(pending["batches"]) + 1) if pending["op"] == "ingest" else [None]
    for prefix in steps:
        m = model.copy()
        m.apply(pending, None, prefix)
        label = "applied" if prefix in (None, len(pending.get("batches", []))) else \
            f"prefix {prefix}/{len(pending['batches'])}"
        out.append((label, m, prefix))
    return out


def differences(snapshot, model: Model, sample: int, rng: random.Random) -> list[str]:
    """How the snapshot differs from the model (empty when it matches exactly)."""
    out = []
    docs = {d.docno: d for d in snapshot.documents()}
    if set(docs) != set(model.docs):
        extra, missing = sorted(set(docs) - set(model.docs)), sorted(set(model.docs) - set(docs))
        return [f"docnos differ: {len(extra)} unexpected {extra[:5]}, "
                f"{len(missing)} missing {missing[:5]}"]
    notes = sum(1 for d in docs.values() if d.container != ":")   # kept apart
    if snapshot.document_count() != len(docs) - notes:
        out.append(f"document_count {snapshot.document_count()} != {len(docs) - notes}")
    if notes != sum(1 for d in docs if d.startswith("n")):
        out.append(f"{notes} documents kept apart, not the notes")
    ranges = {}
    for docno, d in docs.items():
        start, end = model.docs[docno]
        if start is not None and (d.start, d.end) != (start, end):
            out.append(f"{docno} moved: [{d.start}, {d.end}] != [{start}, {end}]")
        if d.text != doc_text(docno, model.words.get(docno)):
            out.append(f"{docno}: wrong text")
        ranges[(d.start, d.end)] = docno
    es, ee = snapshot.erased()
    erased = list(zip(es.tolist(), ee.tolist()))
    if erased != model.erased:
        out.append(f"erased ranges {erased[:6]} != {model.erased[:6]}")
    features = set(model.tags) | set(snapshot.features_with_prefix("tag:", 1000))
    for feature in sorted(features):
        got = {}
        for s, e, v in snapshot.intervals(feature):
            d = ranges.get((s, e))
            if d is None:
                out.append(f"{feature}: [{s}, {e}] is no live document's range")
            got[d] = v
        want = {d: v for d, v in model.tags.get(feature, {}).items() if d in docs}
        if got != want:
            out.append(f"{feature}: {len(got)} intervals, expected {len(want)}")
    got = {ranges.get((s, e)): v for s, e, v in snapshot.intervals("note:")}
    want = {d: v for d, v in model.notes.items() if d in docs}
    if got != want:
        out.append(f"note: {len(got)} intervals, expected {len(want)}")
    # every batch is whole: its marker's postings are exactly its live documents' starts
    by_marker = {}
    for docno, d in docs.items():
        by_marker.setdefault(batch_marker(docno), []).append(d.start)
    markers = sorted(by_marker)
    for marker in rng.sample(markers, min(sample, len(markers))):
        starts = snapshot.intervals(marker).starts.tolist()
        if starts != sorted(by_marker[marker]):
            out.append(f"{marker}: postings {starts[:5]} != {sorted(by_marker[marker])[:5]}")
    for docno in rng.sample(sorted(docs), min(sample, len(docs))):
        starts = snapshot.intervals(unique_marker(docno)).starts.tolist()
        if starts != [docs[docno].start + 1]:
            out.append(f"{docno}: unique marker at {starts}, not {docs[docno].start + 1}")
    return out


def verify(db, log_path: str, rng: random.Random, sample: int = 50, resolve: bool = True):
    """Check `db` against the log: check() passes and the state is the logged one, with the
    operation in flight (if any) wholly applied or wholly absent. Appends a "resolved"
    record for that operation (when `resolve`). Returns (label, pending op or None)."""
    from annodb.check import check
    problems = check(db)
    assert problems == [], problems[:10]
    model, pending = replay(read_log(log_path))
    tried = []
    with db.read() as r:
        for label, m, prefix in candidates(model, pending):
            diff = differences(r, m, sample, rng)
            if not diff:
                break
            tried.append((label, diff[:5]))
        else:
            raise AssertionError(f"the database matches no committed state: {tried}")
        if pending is not None and resolve:
            record = {"k": "resolved", "applied": label != "absent", "prefix": prefix}
            if label != "absent":
                record["added"] = [[d, r.document(d).start, r.document(d).end]
                                   for d in m.docs if d not in model.docs]
            log = Log(log_path)
            log.write(record)
            log.close()
    return label, pending


# ------------------------------------------------------------------ child processes


def _stopped(stop_file: str) -> bool:
    return os.path.exists(stop_file)


def _warm_up(db) -> None:
    """Load the compiled kernels (a first call costs a moment) with a write thrown away.
    On a clean checkout numba compiles them first, in every process at once, while each
    warm-up holds the write lock in turn: the lock waits as long as that takes (CI timed
    out at 30 s once the codec's kernels grew)."""
    with db.read() as r:
        r.search("(^ alpha bravo)", k=3)
    w = db.write(timeout=600)
    try:
        w.add_many([(doc_text("b0.0.1"), "warm-up")])
        w.annotate("tag:0", 0, 0, 1)
        w.count(":")
    finally:
        w.abort()


def _wait_for(go_file: str) -> None:
    """Children start early (importing under load is slow) and wait for their cue."""
    while not os.path.exists(go_file):
        time.sleep(0.005)


def crash_writer(db_path, log_path, seed, seq_base, scratch):
    """Run the Workload until killed. Prints "ready" once the database is open (opening it
    read-write settles a previous writer's crash: see test_sigkill_at_random_points), then
    waits for a line on stdin before it starts writing."""
    import annodb
    db = annodb.open(db_path)
    print("ready", flush=True)
    sys.stdin.readline()
    work = Workload(db, log_path, int(seed), int(seq_base), scratch, linger=0.003)
    while True:
        work.step()


def batch_writer(db_path, out, go_file, stop_file, seed):
    """Commit batches b<seq>.<i>.<n> from the go file until the stop file appears (not
    while the file <go file>.pause exists); record commit times."""
    import annodb
    db = annodb.open(db_path)
    rng = random.Random(int(seed))
    seq, commits, docs = 0, [], 0
    pause = go_file + ".pause"
    _warm_up(db)
    print("ready", flush=True)
    _wait_for(go_file)
    while not _stopped(stop_file):
        if os.path.exists(pause):
            time.sleep(0.002)
            continue
        seq += 1
        n = rng.randint(1, 60)
        docnos = [f"b{seq}.{i}.{n}" for i in range(n)]
        t = time.perf_counter()
        with db.write() as w:
            w.add_many([(doc_text(d), d) for d in docnos])
        commits.append(time.perf_counter() - t)
        docs += n
        time.sleep(rng.uniform(0, 0.01))
    _dump(out, {"commits": len(commits), "docs": docs, "commit_seconds": commits})


def annotator(db_path, out, go_file, stop_file, seed):
    """Annotate random committed documents (tag:0..3 over their whole range) from the go
    file until the stop file appears (not while <go file>.pause exists): a second writer
    taking turns with the batch writer."""
    import annodb
    db = annodb.open(db_path)
    rng = random.Random(int(seed))
    n = 0
    pause = go_file + ".pause"
    _warm_up(db)
    print("ready", flush=True)
    _wait_for(go_file)
    while not _stopped(stop_file):
        if os.path.exists(pause):
            time.sleep(0.002)
            continue
        with db.write() as w:
            top = w.address_space()
            for _ in range(rng.randint(1, 8)):
                if not top:
                    break
                d = w.document_at(rng.randrange(top))
                if d is not None:
                    w.annotate(f"tag:{rng.randrange(4)}", d.start, d.end, rng.randint(0, 9))
        n += 1
        time.sleep(rng.uniform(0, 0.01))
    _dump(out, {"commits": n})


def holder(db_path, go_file, ready_file, stop_file):
    """From the go file, hold one write transaction open (uncommitted documents h.<i>
    with the word holdmarker) until the stop file appears, then abort it."""
    import annodb
    db = annodb.open(db_path)
    print("ready", flush=True)
    _wait_for(go_file)
    w = db.write()
    w.add_many([(f"holdmarker {doc_text('b0.0.1')}", f"h.{i}") for i in range(200)])
    w.count(":")  # flushed into the LMDB transaction: written, not committed
    open(ready_file, "w").close()
    while not _stopped(stop_file):
        time.sleep(0.01)
    w.abort()


READ_QUERIES = ["alpha", "(^ river stone)", "(... north ocean)", "(+ glacier fjord)",
                "(<< zend :)", "(>> : tag:0)", "(^ (+ alpha bravo) (+ delta echo))",
                "(<< summit (# 5))", "(!> : island)"]


def reader(db_path, out, stop_file, seed):
    """Query continuously until the stop file appears; check every snapshot (see
    test_concurrency.py) and record (time, latency) of each."""
    import numpy as np

    import annodb
    db = annodb.open(db_path, readonly=True)
    rng = random.Random(int(seed))
    lat, problems, errors = [], [], []
    prev_docs, prev_tags, snaps, docs_checked = -1, -1, 0, 0

    def problem(text):
        if len(problems) < 50:
            problems.append(text)

    def check_doc(r, d, colon):
        i = int(np.searchsorted(colon.starts, d.start))
        if i >= len(colon) or colon.starts[i] != d.start or colon.ends[i] != d.end:
            problem(f"{d.docno}: no ':' interval [{d.start}, {d.end}]")
        if r.document(d.docno).start != d.start:
            problem(f"{d.docno}: docno lookup disagrees")
        if d.text != doc_text(d.docno):
            problem(f"{d.docno}: wrong text")
        if r.intervals(unique_marker(d.docno)).starts.tolist() != [d.start + 1]:
            problem(f"{d.docno}: unique marker postings wrong")
        n = batch_size_of(d.docno)
        if n is not None and r.count(batch_marker(d.docno)) != n:
            problem(f"{d.docno}: {r.count(batch_marker(d.docno))} of its batch of {n}")

    warm = 3   # the first iterations load the compiled kernels: not measured
    while not _stopped(stop_file):
        started = time.perf_counter()
        try:
            with db.read() as r:
                n1, c1 = r.document_count(), r.count(":")
                tags = sum(r.list_count(f"tag:{k}") for k in range(4))
                hits = r.search(rng.choice(READ_QUERIES), k=5)
                colon = r.intervals(":")
                docs = [r.document(h.docno) for h in hits.hits[:2]]
                top = r.address_space()
                if top:
                    d = r.document_at(rng.randrange(top))
                    if d is not None:
                        docs.append(d)
                for d in docs:
                    check_doc(r, d, colon)
                docs_checked += len(docs)
                if r.count("holdmarker"):
                    problem("an uncommitted document is visible")
                n2, c2 = r.document_count(), r.count(":")
                if not (n1 == c1 == n2 == c2 == len(colon)):
                    problem(f"counts changed within a snapshot: {n1} {c1} {n2} {c2}")
                if c1 < prev_docs:
                    problem(f"document count went backwards: {prev_docs} -> {c1}")
                if tags < prev_tags:
                    problem(f"annotation count went backwards: {prev_tags} -> {tags}")
                prev_docs, prev_tags = c1, tags
        except Exception:
            errors.append(traceback.format_exc())
            if len(errors) > 20:
                break
        if warm:
            warm -= 1
            if not warm:
                print("ready", flush=True)
            continue
        lat.append((time.monotonic(), time.perf_counter() - started))
        snaps += 1
    _dump(out, {"latencies": lat, "problems": problems, "errors": errors,
                "snapshots": snaps, "docs_checked": docs_checked})


def _dump(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


MODES = {"crash-writer": crash_writer, "batch-writer": batch_writer, "annotator": annotator,
         "holder": holder, "reader": reader}


def main(argv):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    MODES[argv[0]](*argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
