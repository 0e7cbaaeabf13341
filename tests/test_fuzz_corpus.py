"""Every input of the fuzz corpus (fuzz/corpus/TARGET/) still passes its target.

The corpus holds the inputs that reach deep into each target and every input that
once found a bug, so replaying it here keeps those bugs fixed without the fuzzer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

from targets import TARGETS

CASES = [
    pytest.param(target, path, id=f"{target.name}/{path.name}")
    for target in TARGETS.values()
    for path in sorted(target.corpus.iterdir())
]


def test_every_target_has_a_seed_corpus() -> None:
    assert all(any(target.corpus.iterdir()) for target in TARGETS.values())


@pytest.mark.parametrize(("target", "path"), CASES)
def test_a_corpus_input_passes_its_target(target: object, path: Path) -> None:
    target.run(path.read_bytes())  # type: ignore[attr-defined]
