"""The reliability suite: one knob, two sizes.

Every test here is marked `reliability` and takes its counts and durations from
`workload.size(short, long)`. The plain CI run (`pytest -q`, no -m) runs the SHORT version
of every test (together well under a minute). The LONG version runs when

    ANNODB_RELIABILITY=long pytest -m reliability tests/reliability -n 0 -s

(-n 0: one test at a time, as its figures were measured; the suite's default runs a test
process per core, pytest-xdist)
or simply `pytest -m reliability` (selecting the marker alone means "the long run");
ANNODB_RELIABILITY=short forces the short sizes whatever -m says. ANNODB_RELIABILITY_SEED
changes the seeds (default 20250101); every random choice derives from it.

Each test records its figures with the `figures` fixture; they are printed at the end of
the run and written to $ANNODB_RELIABILITY_REPORT (a JSON file) when that is set.
"""

from __future__ import annotations

import json
import os
import platform
import time

import pytest

from . import workload

_FIGURES: dict[str, dict] = {}


def pytest_configure(config):
    mode = os.environ.get("ANNODB_RELIABILITY", "").strip().lower()
    if mode in ("long", "short"):
        workload.LONG = mode == "long"
    else:
        workload.LONG = (config.getoption("markexpr", "") or "").strip() == "reliability"


@pytest.fixture
def figures(request):
    """A dict for the test's figures, reported at the end of the run."""
    found = {}
    started = time.perf_counter()
    yield found
    found.setdefault("seconds", round(time.perf_counter() - started, 1))
    _FIGURES[request.node.name] = found


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: hand this worker's figures to the main process."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["reliability_figures"] = json.dumps(_FIGURES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """In the main process: a worker's figures, as it ends (pytest-xdist)."""
    found = getattr(node, "workeroutput", {}).get("reliability_figures")
    if found:
        _FIGURES.update(json.loads(found))


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    mode = "long" if workload.LONG else "short"
    terminalreporter.section(f"reliability figures ({mode} run, seed {workload.SEED})")
    for name, found in _FIGURES.items():
        terminalreporter.write_line(f"{name}: {json.dumps(found)}")
    path = os.environ.get("ANNODB_RELIABILITY_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"mode": mode, "seed": workload.SEED, "machine": platform.platform(),
                       "cpus": os.cpu_count(), "figures": _FIGURES}, f, indent=1)
