"""Does `vole.decision.parse` read every decision the real model made in the published Vole
run? (../shared/data/thevole/decisions.jsonl: gpt-5.5, the 86 TREC 2024 RAG topics.)

    python -m benchmarks.vole_decisions [--data DIR]

Prints how many parse, how many of them are "nothing to judge" (a null docno) and how
many carry an action's reason, and for any refused the first error of each kind with its
count; exit 1 when any is refused. Needs ../shared (says so and stops when absent).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

from benchmarks.common.paths import shared  # noqa: E402
DATA = shared("data", "thevole")

from vole import decision  # noqa: E402
from vole.errors import DecisionError  # noqa: E402


def parse_all(path: str) -> dict:
    """{"decisions", "parsed", "nothing_to_judge", "with_reason", "actions", "refused":
    {first error: count}}."""
    counts = collections.Counter()
    actions = collections.Counter()
    refused = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            counts["decisions"] += 1
            try:
                d = decision.parse(json.dumps(entry["decision"]))
            except DecisionError as err:
                refused[str(err)] += 1
                continue
            counts["parsed"] += 1
            counts["nothing_to_judge"] += d.judgment is None
            counts["with_reason"] += bool(getattr(d.action, "reason", ""))
            actions[type(d.action).__name__.lower()] += 1
    return {**counts, "actions": dict(actions), "refused": dict(refused)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA, help="the folder holding decisions.jsonl")
    args = ap.parse_args(argv)
    path = os.path.join(args.data, "decisions.jsonl")
    if not os.path.exists(path):
        print(f"{path}: not here (the published Vole run is in ../shared/data/thevole); "
              "nothing measured", file=sys.stderr)
        return 2
    found = parse_all(path)
    print(f"{found.get('parsed', 0)} of {found['decisions']} decisions parse; "
          f"{found.get('nothing_to_judge', 0)} judge nothing (docno null), "
          f"{found.get('with_reason', 0)} carry an action's reason; actions "
          + ", ".join(f"{k} {v}" for k, v in sorted(found["actions"].items())))
    for error, n in sorted(found["refused"].items(), key=lambda x: -x[1])[:10]:
        print(f"  refused {n}: {error}")
    return 0 if found.get("parsed", 0) == found["decisions"] else 1


if __name__ == "__main__":
    sys.exit(main())
