"""Growth: ingesting far past any initial size needs no user action (the map is 1 TiB of
address space, sparse on disk). The database grows past size(20, 200) MB through repeated
`ingest` calls of generated JSONL files; then check passes, every file's documents are
there and searchable, and the file's allocated size matches what it holds. A second test
checks that a process that may not map 1 TiB (an address-space limit) still works."""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
import time

import pytest

import annodb
from annodb.check import check
from annodb.ingest import ingest
from annodb.storage import MAP_SIZE, disk_size

from .workload import SEED, size

pytestmark = pytest.mark.reliability


def write_chunk(path, rng, words, first: int, megabytes: float) -> int:
    """A JSONL file of about `megabytes` of records c<first>, c<first+1>, ...; returns the
    number of records."""
    n = 0
    with open(path, "w") as f:
        while f.tell() < megabytes * 1e6:
            f.write(json.dumps({"docid": f"c{first + n}", "title": f"chunk record {first + n}",
                                "body": " ".join(rng.choices(words, k=rng.randint(50, 400)))})
                    + "\n")
            n += 1
    return n


def test_database_grows_far_past_its_initial_size(tmp_path, figures):
    target = size(20, 200) * 10**6
    rng = random.Random(SEED)
    words = [f"w{i}" for i in range(30_000)]
    path = tmp_path / "db"
    annodb.open(path).close()
    initial = disk_size(path)
    docs = ingests = 0
    started = time.perf_counter()
    input_bytes = 0
    while disk_size(path) < target:
        chunk = tmp_path / "chunk.jsonl"
        n = write_chunk(chunk, rng, words, docs, size(3, 8))
        input_bytes += os.path.getsize(chunk)
        summary = ingest(path, [chunk])
        assert summary.added == n and summary.error_count == 0, summary.line()
        docs += n
        ingests += 1
        chunk.unlink()
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    with annodb.open(path, readonly=True) as db:
        assert check(db) == []
        check_seconds = time.perf_counter() - started
        stats = db.stats()
        with db.read() as r:
            assert r.document_count() == docs
            for docno in ("c0", f"c{docs // 2}", f"c{docs - 1}"):
                d = r.document(docno)
                assert r.search(f'(^ "chunk record {docno[1:]}" title:)', k=1).hits[0].docno \
                    == docno, docno
                assert d.field_text("title") == f"chunk record {docno[1:]}"
    apparent = os.path.getsize(path / "data.mdb")
    figures.update(initial_kb=initial // 1024, final_mb=round(stats.size_bytes / 1e6, 1),
                   data_mdb_apparent_mb=round(apparent / 1e6, 1), map_tib=MAP_SIZE / 2**40,
                   ingests=ingests, documents=docs, tokens=stats.tokens,
                   input_mb=round(input_bytes / 1e6, 1), ingest_seconds=round(seconds, 1),
                   input_mb_per_second=round(input_bytes / 1e6 / seconds, 2),
                   check_seconds=round(check_seconds, 1))
    assert stats.size_bytes >= target
    assert stats.size_bytes < apparent * 1.1 + 1e6    # what is allocated is what is used


def test_open_and_ingest_under_an_address_space_limit(tmp_path):
    """Regression (found by this suite): with the map a fixed 1 TiB no database opened
    under an address-space limit (ulimit -v): 'Cannot allocate memory'. The map is now
    halved until it maps."""
    src = tmp_path / "in.tsv"
    src.write_text("a\tsome words\nb\tmore words\n")
    command = (f"ulimit -v {8 << 20} && exec {shlex.quote(sys.executable)} -c "
               f"'from annodb_cli.main import annodb; annodb()' ingest --db "
               f"{shlex.quote(str(tmp_path / 'db'))} {shlex.quote(str(src))}")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr     # 8 GiB of address space is plenty
