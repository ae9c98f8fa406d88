"""Shared test configuration: the import path of the reference semantics, and the one
Hypothesis configuration of the whole suite.

Hypothesis, profile "ci" (loaded here; no test module loads or registers a profile, so a
module's settings never leak into the modules collected after it). The choice:
**derandomized, with a printed seed**. Every property test draws its examples from one
seed, ANNODB_HYPOTHESIS_SEED (default 0), so every run of the suite tests the same
examples on every machine: a red run is red again when rerun, and a green one does not
turn red by chance on someone else's change. The seed is printed in the report header and
again after a failure, with how to rerun it; a failure also prints its
`@reproduce_failure` blob. To explore other examples, set ANNODB_HYPOTHESIS_SEED to
another integer, or to `random` for a fresh seed (printed like the default); Hypothesis'
own `--hypothesis-seed N` works too. Child pytest runs (the NUMBA_DISABLE_JIT reruns)
inherit the seed through the environment.

The profile keeps no example database (what a run tests depends on the seed alone, not
on a `.hypothesis` directory left by earlier runs) and sets no wall-clock limits (no
`deadline`, no `too_slow` health check): on a loaded 2-core machine those fail tests that
are merely slow. Tests keep their own `max_examples` and non-timing health checks.
"""

import os
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

# tests import the reference semantics as `import naive`
sys.path.insert(0, os.path.dirname(__file__))

# Every process a test starts imports annodb from this checkout, as the tests do: one copy
# of the code under test, and one numba cache (a child that imported the installed copy
# compiled every kernel a second time, into site-packages).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

# every `annodb` the tests run does its own work: no warm process (cli/warm.py) is started
# or used, except by tests/test_warm.py, which gives its commands a private one
os.environ["ANNODB_WARM"] = "0"

SEED_VARIABLE = "ANNODB_HYPOTHESIS_SEED"
_SEED = pytest.StashKey[str]()

settings.register_profile("ci", derandomize=False, database=None, deadline=None,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


def _seed(config) -> str:
    given = config.getoption("hypothesis_seed", None)
    if given is not None:
        return str(given)
    raw = os.environ.get(SEED_VARIABLE, "0").strip()
    if raw.lower() == "random":
        return str(random.SystemRandom().randrange(1 << 32))
    if not raw.isdigit():
        raise pytest.UsageError(f"{SEED_VARIABLE}={raw!r}: give an integer or 'random'")
    return raw


# One process runs the commands that use most kernels, so numba compiles them once, before
# any test, instead of in the first tests' children at once (on a fresh install that cost
# ~90 s of the first test; loading them from the cache afterwards costs ~3 s).
WARM_UP = """
import os, sys, tempfile
from annodb_cli.main import annodb
with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "warm.db")
    for args in (["ingest", sys.argv[1]], ["query", "(^ god (+ light darkness))"],
                 ["search", "waters divided"], ["count", "(... god light)"], ["check"]):
        try:
            annodb(args + ["--db", db], standalone_mode=False)
        except SystemExit:
            pass
"""


def _warm_kernels() -> None:
    """Run WARM_UP unless it ran since the kernels' sources last changed (numba's cache
    follows the sources' modification times; so does the stamp it leaves)."""
    kernels = os.path.join(REPO, "annodb", "kernels")
    stamp = os.path.join(kernels, "__pycache__", "tests-warmed")
    newest = max(os.path.getmtime(os.path.join(kernels, f))
                 for f in os.listdir(kernels) if f.endswith(".py"))
    if os.path.exists(stamp) and os.path.getmtime(stamp) >= newest:
        return
    sample = os.path.join(REPO, "examples", "bible-sample.jsonl")
    done = subprocess.run([sys.executable, "-c", WARM_UP, sample], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:   # the tests will say what is wrong; say it here too
        sys.stderr.write(f"warming the kernels failed:\n{done.stderr}")
        return
    try:
        with open(stamp, "w"):
            pass
    except OSError:
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Before Hypothesis' own plugin reads --hypothesis-seed: every test uses this seed.
    Then (in the main process only, not in a pytest-xdist worker) the kernels' warm-up."""
    seed = _seed(config)
    config.option.hypothesis_seed = seed
    os.environ[SEED_VARIABLE] = seed   # child pytest runs draw the same examples
    config.stash[_SEED] = seed
    if not hasattr(config, "workerinput") and os.environ.get("NUMBA_DISABLE_JIT") != "1":
        _warm_kernels()


@pytest.fixture
def db(tmp_path):
    """A new database in tmp_path whose writers wait at most 5 s for another, closed when
    the test ends (a test module may define a `db` of its own)."""
    import annodb
    database = annodb.open(tmp_path / "s.db", timeout=5)
    yield database
    database.close()


@pytest.fixture
def serve():
    """serve(path, **options): an annodb Server (annodb.server.Server with these options,
    its log kept quiet unless one is given) started on a free loopback port. Every server
    started is shut down when the test ends, whatever happened (shutting one down earlier,
    to check the database after it, is fine: shutdown is safe twice)."""
    import io

    from annodb.server import Server
    started = []

    def start(path, **options):
        options.setdefault("log", io.StringIO())
        server = Server(path, **options).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.shutdown()


@pytest.fixture
def connect():
    """connect(server, **options): a Client (tests/server_client.py) of that server, closed when
    the test ends."""
    from server_client import Client
    clients = []

    def open_client(server, **options):
        clients.append(Client(server.port, **options))
        return clients[-1]

    yield open_client
    for c in clients:
        c.close()


def pytest_report_header(config):
    return f"hypothesis: profile ci, seed {config.stash[_SEED]} ({SEED_VARIABLE})"


def pytest_terminal_summary(terminalreporter, config):
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        seed = config.stash[_SEED]
        terminalreporter.write_line(
            f"hypothesis seed {seed}: rerun the same examples with {SEED_VARIABLE}={seed}")
