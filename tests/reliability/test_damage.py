"""Damage: copies of a small database are damaged in random ways (truncated, pages
overwritten with random bytes or zeros, meta pages zeroed or overwritten) and every command
(`check`, `query`, `count`, `show`, `stats`, `ingest`) runs on each copy in a child process
of its own. Each must end with exit 0 or 1 -- never a signal, never a traceback -- and on
failure print one `annodb: error:` line; `check` must report every damage LMDB's own
verifier (lmdb.verify, used here as the independent reference) finds; such a copy must
fail every command (a database this small is verified page by page at open), and `ingest`
into it must leave its file byte for byte as it was. A second pass runs the truncations and
meta damages with page-by-page verification at open switched off, as for a large
database: the checks of the meta pages and the file's length must still refuse them.

The commands run in children forked from one driver process that imported the CLI once
(a fork is a real process: its signals and exit codes are what a shell would see)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .workload import SEED, size

pytestmark = pytest.mark.reliability

SAMPLE = Path(__file__).parents[2] / "examples" / "bible-sample.jsonl"

DRIVER = r'''
import hashlib, json, os, random, shutil, subprocess, sys, tempfile
import lmdb.verify
from annodb.storage import verify
from annodb_cli.main import annodb as cli

out_path, work, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
source = os.path.join(work, "source.db")
subprocess.run([sys.executable, "-c", "from annodb_cli.main import annodb; annodb()", "ingest",
                "--db", source, sys.argv[5]], check=True, capture_output=True)
extra = os.path.join(work, "extra.jsonl")
with open(extra, "w") as f:
    f.write('{"id": "extra-1", "text": "a record added to a damaged copy"}\n')
COMMANDS = {"check": [], "query": ["light"], "count": ["(^ god light)"], "show": ["Gen.1.3"],
            "stats": [], "ingest": [extra]}
data_size = os.path.getsize(os.path.join(source, "data.mdb"))
PSIZE = 4096
pages = data_size // PSIZE


def damage(path, kinds):
    kind = rng.choice(kinds)
    with open(os.path.join(path, "data.mdb"), "r+b") as f:
        if kind == "truncate":
            n = rng.randrange(0, data_size)
            f.truncate(n)
            return kind, f"truncated to {n} bytes"
        if kind in ("zero meta", "overwrite meta"):
            which = rng.choice([[0], [1], [0, 1]])
            for p in which:
                f.seek(p * PSIZE)
                f.write(bytes(PSIZE) if kind == "zero meta" else rng.randbytes(PSIZE))
            return kind, f"{kind} {which}"
        p = rng.randrange(2, pages)
        f.seek(p * PSIZE)
        f.write(bytes(PSIZE) if kind == "zero page" else rng.randbytes(PSIZE))
        return kind, f"{kind} {p}"


def run(args):
    """Run the CLI in a forked child: (exit code or -signal, stdout, stderr)."""
    o, e = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            cli.main(args, prog_name="annodb")
        except SystemExit as exit:
            os._exit(exit.code if isinstance(exit.code, int) else 1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    o.seek(0), e.seek(0)
    return code, o.read().decode("utf-8", "replace"), e.read().decode("utf-8", "replace")


def digest(path):
    p = os.path.join(path, "data.mdb")
    return hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.exists(p) else None


results = []
kinds = ["truncate", "overwrite page", "overwrite page", "zero page", "zero meta",
         "overwrite meta"]
for mode, n, allowed in (("verified", count, kinds),
                         ("large", count // 4, ["truncate", "zero meta", "overwrite meta"])):
    verify.VERIFY_AT_OPEN = 8 << 20 if mode == "verified" else 0
    for i in range(n):
        copy = os.path.join(work, f"copy{i}.db")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(source, copy)
        kind, what = damage(copy, allowed)
        try:
            reference = lmdb.verify.verify(copy)
        except lmdb.verify.VerifyError as err:
            reference = [str(err)]
        except OSError as err:
            reference = [str(err)]
        row = {"mode": mode, "kind": kind, "what": what, "reference": reference[:3],
               "commands": {}}
        for name, args in COMMANDS.items():
            before = digest(copy)
            code, stdout, stderr = run([name, "--db", copy] + args)
            row["commands"][name] = {"code": code, "stderr": stderr[-2000:],
                                     "stdout": stdout[-300:],
                                     "unchanged": digest(copy) == before}
        results.append(row)
        shutil.rmtree(copy, ignore_errors=True)
with open(out_path, "w") as f:
    json.dump(results, f)
'''


def test_damaged_databases_give_errors_never_signals(tmp_path, figures):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "results.json"
    count = size(100, 400)
    proc = subprocess.run([sys.executable, str(driver), str(out), str(tmp_path), str(SEED),
                           str(count), str(SAMPLE)], capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())
    failures = []
    tally = {"damages": len(rows), "commands run": 0, "damaged by lmdb.verify": 0,
             "refused at open": 0, "harmless (a free page)": 0, "kinds": {}}
    for row in rows:
        tally["kinds"][row["kind"]] = tally["kinds"].get(row["kind"], 0) + 1
        damaged = bool(row["reference"])
        tally["damaged by lmdb.verify"] += damaged
        where = f"{row['mode']}: {row['what']} (verify: {row['reference'][:1]})"
        cmds = row["commands"]
        tally["commands run"] += len(cmds)
        for name, r in cmds.items():
            lines = r["stderr"].strip().splitlines()
            errors = [line for line in lines if line.startswith("annodb: error:")]
            if r["code"] not in (0, 1):
                failures.append(f"{where}: {name} ended with {r['code']}: {lines[-3:]}")
            elif "Traceback" in r["stderr"] or "internal error" in r["stderr"]:
                failures.append(f"{where}: {name}: {lines[-3:]}")
            elif r["code"] == 1 and (len(errors) != 1 or lines[-1] != errors[0]):
                failures.append(f"{where}: {name} exit 1 without one error line: {lines}")
            elif r["code"] == 1 and name != "ingest" and name != "check" and len(lines) != 1:
                failures.append(f"{where}: {name} printed more than its error: {lines}")
        if damaged:
            if cmds["check"]["code"] != 1:
                failures.append(f"{where}: check passed a damaged database")
            for name, r in cmds.items():
                if r["code"] == 0:
                    failures.append(f"{where}: {name} succeeded on a damaged database")
            if not cmds["ingest"]["unchanged"]:
                failures.append(f"{where}: ingest changed a damaged database")
            if all(r["code"] == 1 and "the database" in r["stderr"] and "damaged" in
                   r["stderr"] + r["stdout"] or "truncated" in r["stderr"]
                   for n, r in cmds.items() if n != "check"):
                tally["refused at open"] += 1
        else:
            tally["harmless (a free page)"] += 1
    figures.update(tally)
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} failures)"
    assert tally["damaged by lmdb.verify"] >= len(rows) // 2, tally  # (the damage is real)
