"""Server throughput and latency: 1, 2, 4 and 16 concurrent clients replaying real agent queries.

Builds a database of the MS MARCO sample (../shared/data/rag24/msmarco-sample.jsonl, records
{"docid", "text"}) in a temporary directory (or uses the database given with --db, e.g. the
scale corpus's benchmarks/work/scale/annodb.db), starts `annodb serve` on it as a subprocess
(one worker process per core unless --processes says otherwise),
and has N client threads (one connection each) replay the 4,435 queries an LLM agent wrote
(tests/data/vole-queries.tsv, 4th column), each taking the next query from a shared list:
one query = one `query` op (rank 1) and 9 `next` ops (fewer when the ranking ends first),
the way the Vole reads a result page. Latency is per query (all its round trips) and for
the `query` op alone, measured by the client. Prints a markdown table.

    python -m benchmarks.server_bench                      # 1, 2, 4 and 16 clients
    python -m benchmarks.server_bench --clients 1,8 --limit 500
    python -m benchmarks.server_bench --db benchmarks/work/scale/annodb.db --processes 1

Without ../shared (the data is not in this repository) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

import msgspec
import numpy as np

from benchmarks.common.paths import QUERIES, REPO, shared
from benchmarks.common.queries import load_queries

SAMPLE = shared("data", "rag24", "msmarco-sample.jsonl")
PAGE = 10              # ranks read per query: the query op and 9 next


def build(path: str) -> tuple[float, int]:
    import annodb
    decode = msgspec.json.Decoder().decode
    started = time.perf_counter()
    n = 0
    with annodb.open(path) as db:
        with open(SAMPLE, "rb") as f, db.write() as w:
            for line in f:
                if line.strip():
                    w.add(decode(line))
                    n += 1
    return time.perf_counter() - started, n


class Served:
    """`annodb serve` in a subprocess; its stderr is drained on a thread."""

    def __init__(self, db: str, timeout: float, processes: int | None = None):
        extra = ["--processes", str(processes)] if processes else []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from annodb_cli.serve import serve; serve()", "--db", db,
             "--port", "0", "--timeout", str(timeout)] + extra,
            cwd=REPO, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": REPO})
        line = self.proc.stderr.readline().decode()
        m = re.search(r"listening on port (\d+)", line)
        if not m:
            self.stop()
            raise SystemExit(f"server_bench: the server did not start: {line}")
        self.port = int(m.group(1))
        self.log: list[str] = []
        self._drain = threading.Thread(target=self._read, daemon=True)
        self._drain.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line.decode(errors="replace"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(30)
        self.proc.stderr.close()
        return code


class Client:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")
        self.encode = msgspec.json.Encoder().encode
        self.decode = msgspec.json.Decoder().decode

    def ask(self, request: dict) -> dict:
        self.sock.sendall(self.encode(request) + b"\n")
        return self.decode(self.reader.readline())["response"]

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def replay(port: int, queries: list[str], clients: int) -> dict:
    """Every query once, spread over `clients` connections."""
    lock = threading.Lock()
    position = [0]
    totals: list[float] = []
    firsts: list[float] = []
    outcome = {"hits": 0, "empty": 0, "query error": 0, "timeout": 0}
    requests = [0]
    failures: list[BaseException] = []

    def work():
        try:
            c = Client(port)
        except OSError as err:
            failures.append(err)
            return
        try:
            while True:
                with lock:
                    i = position[0]
                    position[0] += 1
                if i >= len(queries):
                    return
                n = 1
                t0 = time.perf_counter()
                r = c.ask({"op": "query", "query": queries[i]})
                t1 = time.perf_counter()
                if r.get("ok") and not r.get("done"):
                    qid = r["qid"]
                    for _ in range(PAGE - 1):
                        n += 1
                        nr = c.ask({"op": "next", "qid": qid})
                        if nr.get("done") or not nr.get("ok"):
                            break
                t2 = time.perf_counter()
                kind = ("hits" if not r.get("done") else "empty") if r.get("ok") else \
                    ("timeout" if "timed out" in r.get("error", "") else "query error")
                with lock:
                    totals.append(t2 - t0)
                    firsts.append(t1 - t0)
                    outcome[kind] += 1
                    requests[0] += n
        except BaseException as err:
            failures.append(err)
        finally:
            c.close()

    threads = [threading.Thread(target=work) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"server_bench: a client failed: {failures[0]!r}")
    return {"clients": clients, "wall": wall, "queries": len(totals), "requests": requests[0],
            "total": np.array(totals) * 1000, "first": np.array(firsts) * 1000,
            "outcome": outcome}


def _lat(ms: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return f"{p50:.2f} / {p90:.2f} / {p99:.2f} / {ms.max():.1f}"


def measure(db: str, queries: list[str], counts: list[int], timeout: float = 60.0,
            processes: int | None = None) -> str:
    """Serve `db` and replay `queries` with each number of clients: a markdown table."""
    served = Served(db, timeout, processes)
    try:
        replay(served.port, queries, 2)  # warm up: every query once (the page cache and
        #                                  each worker's list cache), or the first run pays
        runs = [replay(served.port, queries, n) for n in counts]
    finally:
        code = served.stop()
    return _table(runs, code)


def _table(runs: list[dict], code: int) -> str:
    lines = ["| clients | queries/s | requests/s | per query (query + next), ms: median / p90 / "
             "p99 / max | `query` op alone, ms: median / p90 / p99 / max | wall s |",
             "|---:|---:|---:|---|---|---:|"]
    for r in runs:
        lines.append(f"| {r['clients']} | {r['queries'] / r['wall']:,.0f} | "
                     f"{r['requests'] / r['wall']:,.0f} | {_lat(r['total'])} | "
                     f"{_lat(r['first'])} | {r['wall']:.1f} |")
    base = runs[0]["queries"] / runs[0]["wall"]
    lines += ["", "queries/s against " + f"{runs[0]['clients']} client(s): " + ", ".join(
        f"{r['clients']} clients {r['queries'] / r['wall'] / base:.2f}x" for r in runs[1:])]
    o = runs[0]["outcome"]
    lines += ["", f"{runs[0]['queries']:,} queries per run: {o['hits']:,} with results, "
              f"{o['empty']:,} with none, {o['query error']:,} query errors, {o['timeout']:,} "
              f"over the time limit; {runs[0]['requests']:,} requests. Server exit code {code}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", default="1,2,4,16", help="comma-separated client counts")
    ap.add_argument("--db", help="serve this database (default: the MS MARCO sample, built "
                    "in a temporary directory)")
    ap.add_argument("--processes", type=int, help="the server's worker processes (default: "
                    "one per core)")
    ap.add_argument("--limit", type=int, default=0, help="replay only the first N queries")
    ap.add_argument("--timeout", type=float, default=60.0, help="the server's query limit (s)")
    args = ap.parse_args(argv)
    if not os.path.exists(SAMPLE):
        print(f"server_bench: skipped: {os.path.normpath(SAMPLE)} is absent (the shared data "
              "directory ../shared is not here)")
        return 0
    queries = load_queries(QUERIES)
    if args.limit:
        queries = queries[:args.limit]
    counts = [int(x) for x in args.clients.split(",") if x.strip()]
    with tempfile.TemporaryDirectory(prefix="annodb-server-bench-") as tmp:
        if args.db:
            db = args.db
            import annodb
            with annodb.open(db, readonly=True) as opened:
                docs = opened.stats().documents
            print(f"serving {db} ({docs:,} documents)", flush=True)
        else:
            db = os.path.join(tmp, "msmarco.db")
            seconds, docs = build(db)
            print(f"ingested {docs:,} documents in {seconds:.1f}s", flush=True)
        print(f"replaying {len(queries):,} queries (query + {PAGE - 1} next each), "
              f"{os.cpu_count()} CPUs", flush=True)
        text = measure(db, queries, counts, args.timeout, args.processes)
    print()
    print(text)
    if not args.limit:
        import datetime
        from benchmarks.common.results import machine, record
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        what = f"`{os.path.relpath(db, REPO)}` ({docs:,} documents)" if args.db else \
            "the MS MARCO sample"
        procs = args.processes or os.cpu_count()
        record("server", "## Server (`python -m benchmarks.server_bench`)\n\n"
               f"Run {now} on {machine()}: `annodb serve` ({procs} worker processes) on "
               f"{what}, clients on the same machine (loopback), each query = `query` + up "
               "to 9 `next`.\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
