"""Write the golden database tests/data/golden-vN (format N), read by test_golden.py.

Run it only when creating a new golden version (`python tests/make_golden.py N`): a golden
database is written once and then kept unchanged, so that every later annodb proves it still
reads it. After a format change, bump storage.FORMAT_VERSION, keep golden-v1 (the test then
expects a clear refusal or a successful read), and write golden-vN with this script
(golden-v5: `python tests/make_golden.py 5`), with a line in CHANGELOG.md.
golden-v1 was written by format 1's annodb; `python tests/make_golden.py 1` today would
write format 2.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import annodb  # noqa: E402

DATA = Path(__file__).parent / "data"


def main(version: int) -> None:
    target = DATA / f"golden-v{version}"
    if target.exists():
        shutil.rmtree(target)
    with annodb.open(target) as db:
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
        if version >= 2:  # what format 2 added: document groups, packed and page-sized blocks
            with db.write() as w:
                w.add_many([(f"verse {i} of the golden psalm", f"psalm{i}") for i in range(40)])
                words = []
                for i in range(40000):   # "tick" at small gaps: bit-packed, over one page
                    words.append("tick" if i * 7919 % 301 < 60 else f"w{i % 97}")
                w.add(" ".join(words), docno="long")
                w.add("after the long one", docno="tail")
        if version >= 3:  # format 3: relative addresses; a group whose first one is deleted
            with db.write() as w:
                w.delete("psalm0")
        if version >= 4:  # format 4: tails, df and bounds in counts, notes apart, sparse
            with db.write() as w:  # "tick" again: its list's last postings join a tail
                w.add(" ".join(["tick tock"] * 30), docno="ticks")
                w.note("intro", "a note about the golden intro", note_docno="n1")
                w.add({"docid": "s1", "text": "sparse words", "splade": {"gold": 2.5,
                                                                          "lead": 0.5}},
                      sparse_fields=["splade"])
    # format 5 stores what format 4 came to store (golden-v4 was written at its end): the
    # same content, under the number that an annodb of early format 4 refuses
    for name in ("lock.mdb", "writer.lock", "turnstile.lock", "create.lock"):  # per-machine files
        path = target / name
        if path.exists():
            os.remove(path)
    for path in sorted(target.iterdir()):
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
