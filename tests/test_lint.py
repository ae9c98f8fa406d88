"""ruff and mypy find nothing in annodb/, vole/ and cli/, as pyproject.toml configures
them ([tool.ruff], [tool.mypy]); each runs from the repository's root with this
interpreter's environment (the `test` extra pins both), so CI checks what a developer
checks by hand:

    .venv/bin/python -m ruff check annodb vole cli
    .venv/bin/python -m mypy

mypy keeps its cache in .mypy_cache at the root: a run after a small change rechecks only
what the change touches.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        pytest.fail(f"`python -m {' '.join(args)}` found:\n{output}", pytrace=False)


def test_ruff_finds_nothing():
    """ruff (pycodestyle, pyflakes, bugbear; pyproject.toml) reports no finding."""
    _run("ruff", "check", "--no-fix", "--output-format", "concise", "annodb", "vole", "cli")


def test_mypy_finds_nothing():
    """mypy reports no error in the files pyproject.toml names (cli/ checked as the module
    it installs as, annodb_cli)."""
    _run("mypy")
