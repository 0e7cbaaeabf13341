"""The README's Python examples run and print what they say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_python_example_prints_what_its_comments_say(block: str) -> None:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(block, "README.md", "exec"), {"__name__": "__readme__"})
    expected = [
        match.group(1).strip()
        for line in block.splitlines()
        if "print(" in line and (match := re.search(r"#\s*(.+)$", line))
    ]
    assert output.getvalue().splitlines() == expected
