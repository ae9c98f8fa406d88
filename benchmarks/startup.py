"""Start-up: how long whole `annodb` processes take, warm (the kernels cached), over runs.

    python -m benchmarks.startup                  # 10 runs of each command after a warm-up
    python -m benchmarks.startup --runs 20 --record   # and write the tables to RESULTS.md

Each `annodb` command is timed alone (ANNODB_WARM=0) and, for the read-only ones, through
a warm process (cli/warm.py) started in a private directory first.

Run it with the Python of the venv under test (its `annodb` console script is the one
timed; `--annodb PATH` picks another). The bundled sample (examples/bible-sample.jsonl)
is ingested into a temporary database first, and one query is run so the kernels are
compiled and cached before anything is timed. Each command is started as its own
process, one after another; wall time is measured around the process, user and system
time and peak RSS come from the kernel's accounting of the finished child (os.wait4).
The machine is shared: quote medians, and the CPU time when the wall time is noisy.

Also printed: whether `annodb --help` and `--version` load numba, and which kernels a
query loads from numba's cache with the CPU time each took (the first one carries numba's
own start-up: its compiler target is built on the first load).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common.paths import REPO

EXAMPLE = os.path.join(REPO, "examples", "bible-sample.jsonl")
QUERY = "(^ god (+ light darkness))"

_KERNELS = """
import sys, time
import annodb
from numba.core import dispatcher
loaded = []
compile = dispatcher.Dispatcher.compile
def timed(self, sig):
    t = time.process_time()
    try:
        return compile(self, sig)
    finally:
        loaded.append((self.py_func.__module__.rsplit(".", 1)[-1] + "." +
                       self.py_func.__name__, time.process_time() - t))
dispatcher.Dispatcher.compile = timed
with annodb.open(sys.argv[1], readonly=True) as db, db.read() as r:
    r.search(sys.argv[2], k=10)
for name, seconds in loaded:
    print(f"{name}\\t{seconds * 1000:.1f}")
"""

_PROBE = """
import sys
from annodb_cli.main import main
sys.argv[1:] = [sys.argv[1]]
try:
    main()
except SystemExit:
    pass
print("numba" in sys.modules, file=sys.stderr)
"""


def children_cpu(pid: int | None) -> float:
    """CPU seconds of the reaped children of `pid` (the warm process's forked commands)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def run_once(argv: list[str], env: dict, warm_pid: int | None = None) -> dict:
    before = children_cpu(warm_pid)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    forked = children_cpu(warm_pid) - before
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime + forked,
            "user": usage.ru_utime, "rss": usage.ru_maxrss / 1024}


def measure(argv: list[str], runs: int, warmup: int, env: dict,
            warm_pid: int | None = None) -> dict:
    for _ in range(warmup):
        run_once(argv, env, warm_pid)
    rows = [run_once(argv, env, warm_pid) for _ in range(runs)]
    return {key: [r[key] for r in rows] for key in rows[0]}


def start_warm(annodb: str, db: str, env: dict) -> int:
    """Start a warm process (cli/warm.py) in env's private directory; its pid."""
    subprocess.run([annodb, "count", "--db", db, "god"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        done = subprocess.run([annodb, "warm", "--json"], env=env, check=True,
                              capture_output=True, text=True)
        state = json.loads(done.stdout)
        if state["running"]:
            return state["pid"]
        time.sleep(0.2)
    raise SystemExit("the warm process did not start")


def fmt(values: list[float], unit: str = "s") -> str:
    return (f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
            if unit == "s" else f"{statistics.median(values):.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="counted runs of each command")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted runs first")
    ap.add_argument("--annodb", default=os.path.join(os.path.dirname(sys.executable), "annodb"),
                    help="the console script to time (default: next to this Python)")
    ap.add_argument("--record", action="store_true",
                    help="write the tables to benchmarks/RESULTS.md (section startup)")
    args = ap.parse_args(argv)
    py, annodb = sys.executable, args.annodb
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bible.db")
        subprocess.run([annodb, "ingest", "--db", db, "--quiet", EXAMPLE], check=True)
        subprocess.run([annodb, "query", "--db", db, QUERY], check=True,
                       stdout=subprocess.DEVNULL,        # compiles the kernels if need be
                       env=dict(os.environ, ANNODB_WARM="0"))
        commands = [
            ("python -c pass (the interpreter alone)", [py, "-c", "pass"]),
            ("python -c 'import numpy'", [py, "-c", "import numpy"]),
            ("python -c 'import numba'", [py, "-c", "import numba"]),
            ("annodb --version", [annodb, "--version"]),
            ("annodb --help", [annodb, "--help"]),
            (f"annodb query '{QUERY}'", [annodb, "query", "--db", db, QUERY]),
            ("annodb count god", [annodb, "count", "--db", db, "god"]),
            ("annodb search 'waters divided'", [annodb, "search", "--db", db,
                                                "waters divided"]),
        ]
        alone = dict(os.environ, ANNODB_WARM="0")
        warm = dict(os.environ, ANNODB_WARM="1", ANNODB_WARM_DIR=os.path.join(tmp, "warm"))
        lines = [f"{args.runs} runs of each after {args.warmup} warm-up, one process after "
                 "another; median (min-max). \"alone\": ANNODB_WARM=0, the command does "
                 "all its work in its own process; \"warm process\": the read-only "
                 "commands run in a warm process (cli/warm.py); their CPU column adds "
                 "the forked child's CPU (the warm process's reaped children's) to the "
                 "command's own", "",
                 "| command | wall s | CPU s (user + sys) | peak RSS MB |", "|---|---|---|---|"]
        for name, command in commands:
            m = measure(command, args.runs, args.warmup, alone)
            lines.append(f"| `{name}`{' (alone)' if name.startswith('annodb ') else ''} | "
                         f"{fmt(m['wall'])} | {fmt(m['cpu'])} | {fmt(m['rss'], 'MB')} |")
            print(lines[-1], flush=True)
        os.makedirs(warm["ANNODB_WARM_DIR"], mode=0o700)
        pid = start_warm(annodb, db, warm)
        try:
            for name, command in commands:
                if command[0] != annodb or command[1] not in ("query", "count", "search"):
                    continue
                m = measure(command, args.runs, args.warmup, warm, pid)
                lines.append(f"| `{name}` (warm process) | {fmt(m['wall'])} | "
                             f"{fmt(m['cpu'])} | {fmt(m['rss'], 'MB')} |")
                print(lines[-1], flush=True)
        finally:
            subprocess.run([annodb, "warm", "--stop"], env=warm, stdout=subprocess.DEVNULL)
        lines += ["", "numba loaded by: " + ", ".join(
            f"`annodb {flag}`: {probe(py, flag)}" for flag in ("--help", "--version")), ""]
        kernels = subprocess.run([py, "-c", _KERNELS, db, QUERY], check=True,
                                 capture_output=True, text=True).stdout.splitlines()
        lines += [f"Kernels `annodb query '{QUERY}'` loads from numba's cache, in order, "
                  "with the CPU time each load took (the first builds numba's compiler "
                  "target):", "", "| kernel | ms |", "|---|---|"]
        lines += [f"| {k} | {ms} |" for k, ms in (row.split("\t") for row in kernels)]
    text = "\n".join(lines)
    print(text)
    if args.record:
        from benchmarks.common.results import machine, record
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        record("startup", f"## Start-up (`python -m benchmarks.startup`)\n\nRun {now} on "
               f"{machine()}; load average {load} at the end.\n\n{text}")
    return 0


def probe(py: str, flag: str) -> str:
    done = subprocess.run([py, "-c", _PROBE, flag], capture_output=True, text=True,
                          check=True)
    return "yes" if done.stderr.strip().endswith("True") else "no"


if __name__ == "__main__":
    sys.exit(main())
