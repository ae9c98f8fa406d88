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
import sys

import pytest
from hypothesis import HealthCheck, settings

# tests import the reference semantics as `import naive`
sys.path.insert(0, os.path.dirname(__file__))

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


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Before Hypothesis' own plugin reads --hypothesis-seed: every test uses this seed."""
    seed = _seed(config)
    config.option.hypothesis_seed = seed
    os.environ[SEED_VARIABLE] = seed   # child pytest runs draw the same examples
    config.stash[_SEED] = seed


def pytest_report_header(config):
    return f"hypothesis: profile ci, seed {config.stash[_SEED]} ({SEED_VARIABLE})"


def pytest_terminal_summary(terminalreporter, config):
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        seed = config.stash[_SEED]
        terminalreporter.write_line(
            f"hypothesis seed {seed}: rerun the same examples with {SEED_VARIABLE}={seed}")
