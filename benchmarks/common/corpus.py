"""The scale corpus: 1.67M passages (53.9M words) of real text from Debian packages plus the
MS MARCO segments the real queries were written for, built deterministically by
../shared/tools/build_bench_corpus.py. Missing packages are installed with apt-get when we
are root, else listed with the command to install them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

PACKAGES = ["dict-gcide", "dict-wn", "wordnet-base", "dict-foldoc", "dict-jargon", "fortunes",
            "linux-doc-6.1", "python3.11-doc", "postgresql-doc-15", "perl-doc", "manpages",
            "manpages-dev"]


def missing_packages() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return list(PACKAGES)
    out = []
    for p in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                           text=True)
        if "install ok installed" not in r.stdout:
            out.append(p)
    return out


def build(out: str, shared: str) -> None:
    missing = missing_packages()
    if missing:
        command = ["apt-get", "install", "-y", "-q"] + missing
        if os.geteuid() != 0:
            sys.exit("the scale corpus needs Debian packages: sudo apt-get update && sudo "
                     + " ".join(command))
        print("installing " + " ".join(missing), file=sys.stderr)
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(command, check=True, env=dict(os.environ,
                                                     DEBIAN_FRONTEND="noninteractive"))
    script = os.path.join(shared, "tools", "build_bench_corpus.py")
    sample = os.path.join(shared, "data", "rag24", "msmarco-sample.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    print(f"building {out} ...", file=sys.stderr)
    subprocess.run([sys.executable, script, out + ".tmp", "--msmarco", sample], check=True)
    os.replace(out + ".tmp", out)
