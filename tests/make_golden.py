"""Write the golden database tests/data/golden-v1 (format 1), read by test_storage.py.

Run it only when creating a new golden version (`python tests/make_golden.py`): a golden
database is written once and then kept unchanged, so that every later annodb proves it still
reads it. After a format change, bump storage.FORMAT_VERSION, keep golden-v1 (the test then
expects a clear refusal or a successful read), and write golden-v2 with a copy of this script.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import annodb  # noqa: E402

TARGET = Path(__file__).parent / "data" / "golden-v1"


def main() -> None:
    if TARGET.exists():
        shutil.rmtree(TARGET)
    with annodb.open(TARGET) as db:
        with db.write() as w:
            intro = w.add("The golden database keeps old formats honest.", docno="intro")
            w.annotate("judgment:t1", intro.start, intro.end, 3)
            w.add({"docid": "g2", "title": "Second", "text": "a golden second one",
                   "chapter": 2})
        with db.write() as w:
            g3 = w.add({"docid": "g3", "title": "Third",
                        "text": "A third document, partly erased words", "chapter": 3})
            w.add("hidden text", docno="g4")
            w.erase(g3.start + 5, g3.start + 5)      # "erased"
        with db.write() as w:
            w.delete("g4")
    for name in ("lock.mdb", "writer.lock"):          # per-machine files, not part of it
        path = TARGET / name
        if path.exists():
            os.remove(path)
    for path in sorted(TARGET.iterdir()):
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
