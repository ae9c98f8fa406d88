"""The README's agent-memory example runs as written (so it cannot rot)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## Using annodb as agent memory"


def _example() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert SECTION in readme
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "no python block in the agent-memory section"
    return blocks[0]


def test_agent_memory_example_runs(tmp_path, monkeypatch, capsys):
    code = _example()
    assert "annodb.Memory(" in code
    monkeypatch.chdir(tmp_path)         # the example writes ./agent-memory.db
    exec(compile(code, "README.md (agent memory example)", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "bob> how does Bob take his coffee?\nagent> Bob takes his coffee black" in out
    assert os.path.isdir(tmp_path / "agent-memory.db")
