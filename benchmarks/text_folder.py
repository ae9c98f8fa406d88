"""A folder of many small plain-text files against the same text as one JSONL file.

    python -m benchmarks.text_folder [--files 3000] [--kib 4] [--runs 3] [--each-file]

Makes N files of about K KiB from the bundled Bible sample (its verses one after another,
round and round), and the same texts as JSONL records ({"docid": <file name>, "text": ...}),
then times `annodb ingest DIR` and `annodb ingest FILE.jsonl` into fresh databases as whole
processes (start-up included, the kernels compiled and cached already), the median of
--runs each, and prints a table: wall seconds, the ingest's own seconds (its summary),
batches (commits). Runs `python -c "from annodb_cli.main import annodb; annodb()"`, so PYTHONPATH
chooses the code measured; --each-file names every file instead of the folder (as
`annodb ingest DIR/*/*.txt` would, and as code that refuses a directory needs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "bible-sample.jsonl"


def texts(files: int, kib: int) -> list[str]:
    verses = [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()]
    out, k = [], 0
    for _ in range(files):
        parts, size = [], 0
        while size < kib * 1024:
            parts.append(verses[k % len(verses)])
            size += len(parts[-1].encode()) + 1
            k += 1
        out.append("\n".join(parts) + "\n")
    return out


def ingest(targets: list, db: Path) -> tuple[float, dict]:
    command = [sys.executable, "-c", "from annodb_cli.main import annodb; annodb()", "ingest",
               "--db", str(db), "--json", "--quiet", *map(str, targets)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"ingest failed: {done.stderr}")
    return wall, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--kib", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--each-file", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="annodb-text-folder-") as tmp:
        root = Path(tmp)
        folder = root / "folder"
        folder.mkdir()
        jsonl = root / "same.jsonl"
        with jsonl.open("w") as out:
            for i, text in enumerate(texts(args.files, args.kib)):
                name = f"{i // 100:03d}/{i:05d}.txt"
                (folder / name).parent.mkdir(exist_ok=True)
                (folder / name).write_text(text)
                out.write(json.dumps({"docid": name, "text": text}) + "\n")
        mib = sum(f.stat().st_size for f in folder.rglob("*.txt")) / 2**20
        ingest([jsonl], root / "warm.db")                 # kernels loaded and cached
        rows = {}
        each = sorted(folder.rglob("*.txt")) if args.each_file else [folder]
        for label, targets in (("folder", each), ("jsonl", [jsonl])):
            runs = [ingest(targets, root / f"{label}{r}.db") for r in range(args.runs)]
            wall = statistics.median(w for w, _ in runs)
            own = statistics.median(s["seconds"] for _, s in runs)
            summary = runs[0][1]
            if summary["added"] != args.files:
                sys.exit(f"{label}: added {summary['added']} of {args.files}")
            rows[label] = (wall, own, summary["batches"], summary["tokens"])
    print(f"{args.files:,} files of ~{args.kib} KiB ({mib:.1f} MiB), median of {args.runs}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print()
    print("| input | wall s | ingest s | batches | tokens |")
    print("|---|---|---|---|---|")
    for label, (wall, own, batches, tokens) in rows.items():
        name = ("`annodb ingest DIR/*/*.txt`" if args.each_file else "`annodb ingest DIR`")
        name = f"{name} ({args.files:,} files)" if label == "folder" else \
            "`annodb ingest same.jsonl`"
        print(f"| {name} | {wall:.2f} | {own:.2f} | {batches:,} | {tokens:,} |")
    print(f"| folder / jsonl | {rows['folder'][0] / rows['jsonl'][0]:.2f}x | "
          f"{rows['folder'][1] / rows['jsonl'][1]:.2f}x | | |")


if __name__ == "__main__":
    main()
