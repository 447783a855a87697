"""The README's example runs as written against the real server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import Server


def test_the_readme_example(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    assert len(blocks) == 1 and len(blocks[0].splitlines()) < 20
    monkeypatch.setenv("AGENT_RUNNER_URL", server.url)

    exec(compile(blocks[0], "README.md", "exec"), {})

    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "1 run_start"
    assert any(line.endswith(" actions_required") for line in printed)
    assert printed[-2].endswith(" run_end")
    assert printed[-1] == "aborted"
