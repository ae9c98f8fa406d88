"""The README's two commands are what CI runs, and every CLI command is documented."""

import os
import re

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _readme_commands():
    text = _read("README.md")
    return re.findall(r"```sh\n(python3 -m venv[^\n]*)\n```", text)


def test_ci_runs_the_readme_commands():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    ci = _read(".ci", "run")
    lines = [line.removesuffix(" || exit 1") for line in ci.splitlines()]
    for command in commands:
        assert command in lines, command


def test_every_command_has_an_example_and_is_in_the_readme():
    from annodb_cli.main import annodb
    readme = _read("README.md")
    import click
    ctx = click.Context(annodb)
    for name in annodb.list_commands(ctx):
        cmd = annodb.get_command(ctx, name)
        assert "Example" in (cmd.help or ""), name
        assert f"annodb {name}" in readme, name
