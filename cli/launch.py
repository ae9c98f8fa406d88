"""The `annodb` console script (and `python -m annodb`): a read-only command runs in the warm
process when there is one (cli/warm.py says how), anything else here, through the click
group of cli/main.py. `python -m annodb_cli.launch FOLDER-FD NAME LOCK-FD IDLE` is the warm
process itself (started by warm.start(), which passes it the socket's directory and the
lock it took, open).

Until a command is known to run here, nothing but the standard library is imported."""

from __future__ import annotations

import os
import sys

from . import warm


def main() -> None:
    """Run the command of sys.argv: in the warm process, or here (then start one)."""
    argv = sys.argv[1:]
    if warm.enabled() and warm.command_of(argv) in warm.FORWARDED:
        try:
            code = warm.forward(argv)
        except KeyboardInterrupt:        # Ctrl-C while it waited for the warm process
            sys.stderr.write("annodb: error: interrupted\n")
            sys.exit(130)
        if code is not None:
            sys.exit(code)
        if warm.may_start():
            import atexit
            atexit.register(warm.start)
    sys.exit(run(argv))


def run(argv: list[str]) -> int:
    """Run one command line in this process; its exit status."""
    from .main import annodb
    try:
        annodb.main(argv, prog_name="annodb")
    except SystemExit as done:
        if done.code is None:
            return 0
        if isinstance(done.code, int):
            return done.code
        print(done.code, file=sys.stderr)
        return 1
    return 0


def warm_up() -> None:
    """Run each kind of read once over a small database of our own, so that the modules and
    kernels the read-only commands use are loaded before the warm process first forks."""
    import shutil
    import tempfile

    import annodb
    from annodb import rankers, storage
    from .main import COMMANDS, annodb as group
    import click
    context = click.Context(group)
    for name in COMMANDS:            # (every command's module imported before a fork)
        group.get_command(context, name)
    ranks = [rank for rank in rankers.RANKS if rank != rankers.Sparse.name]  # (needs vectors)
    folder = tempfile.mkdtemp(prefix="annodb-warm-")
    try:
        with annodb.open(os.path.join(folder, "warm.db")) as db:
            with db.write() as w:
                for i, text in enumerate(("Light and darkness, evening and morning.",
                                          "The waters were divided from the waters.",
                                          "God saw the light, and it was good.")):
                    w.add({"text": text, "chapter": i + 1}, docno=f"w{i}")
            with db.read() as r:
                for gcl in ('(^ light darkness)', '(+ light "the waters")',
                            '(<< light text:)', '(>> : (= :chapter: 2))',
                            '(... waters divided)'):
                    for rank in ranks:
                        [hit.snippet for hit in r.search(gcl, k=3, rank=rank)]
                    r.count(gcl)
                for rank in ranks:
                    [hit.snippet for hit in r.search_text("the waters of light", k=3,
                                                          rank=rank)]
                r.document("w1")
                r.stats()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    storage.stop_threads()       # no thread may run when the warm process forks


if __name__ == "__main__":
    warm.serve(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
               run=run, warm_up=warm_up)
