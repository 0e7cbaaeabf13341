"""Conformance cases: annotated ``.fasm`` files run through ``kforge run --json``.

Each file in ``tests/conformance/`` states what the spec says must happen, in header
comments, worked out by hand:

- ``; args: ...`` extra command-line arguments (shell-quoted);
- ``; expect: {...}`` a subset of the JSON result (several lines are merged). Under
  ``registers`` a value of 0 means the register must be absent (zero); the runner's own
  key ``all_registers`` compares the whole register object;
- ``; expect-exit: N`` the exit status;
- ``; expect-error: TEXT`` for exit status 2: a substring of the one stderr line
  (for assembly errors, ``FILE:LINE:COL:``).

Every case runs in-process for the reference tier, and for the fast tier when
``kforge.fast`` exists; a few also run as a real ``python -m kforge.cli`` process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kforge.cli import main

CASES_DIR = Path(__file__).parent / "conformance"
CASE_FILES = sorted(CASES_DIR.glob("*.fasm"))
SRC = Path(__file__).resolve().parents[1] / "src"
HAS_FAST_TIER = importlib.util.find_spec("kforge.fast") is not None
RESULT_KEYS = {
    "state", "ticks_used", "ticks_remaining", "fault", "fault_detail", "pc", "output_hex", "stderr_hex",
    "registers", "flags", "output_text", "stderr_text",
}  # fmt: skip
_DIRECTIVE = re.compile(r"^;\s*(args|expect|expect-exit|expect-error):\s?(.*)$")


@dataclass
class Case:
    path: Path
    args: list[str] = field(default_factory=list)
    expect: dict[str, Any] = field(default_factory=dict)
    exit_status: int | None = None
    error: str | None = None


def parse_case(path: Path) -> Case:
    case = Case(path)
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _DIRECTIVE.match(line.strip())
        if match is None:
            continue
        key, value = match.groups()
        if key == "args":
            case.args += shlex.split(value)
        elif key == "expect":
            case.expect.update(json.loads(value))
        elif key == "expect-exit":
            case.exit_status = int(value)
        else:
            case.error = value.strip()
    return case


def test_there_are_enough_conformance_cases() -> None:
    assert len(CASE_FILES) >= 40


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_every_case_states_its_expectation(path: Path) -> None:
    case = parse_case(path)
    assert case.exit_status in (0, 1, 2), "missing or bad '; expect-exit:'"
    if case.exit_status == 2:
        assert case.error, "an exit-2 case needs '; expect-error:'"
        assert not case.expect
    else:
        assert case.expect, "missing '; expect:'"
        assert set(case.expect) <= RESULT_KEYS | {"all_registers"}
        assert "state" in case.expect


def check_result(case: Case, status: int, stdout: str, stderr: str) -> None:
    assert status == case.exit_status, f"exit {status}, stderr {stderr!r}"
    if case.exit_status == 2:
        assert stdout == ""
        assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
        assert "Traceback" not in stderr
        assert case.error is not None and case.error in stderr, stderr
        return
    assert stderr == ""
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    result = json.loads(lines[0])
    assert set(result) == RESULT_KEYS
    for key, expected in case.expect.items():
        if key == "registers":
            for name, value in expected.items():
                assert result["registers"].get(name, 0) == value, name
        elif key == "all_registers":
            assert result["registers"] == expected
        elif key == "flags":
            for name, value in expected.items():
                assert result["flags"][name] is value, name
        else:
            assert result[key] == expected, key
    assert all(value != 0 for value in result["registers"].values())
    assert result["ticks_used"] + result["ticks_remaining"] == ticks_budget(case)


def ticks_budget(case: Case) -> int:
    if "--ticks" in case.args:
        return int(case.args[case.args.index("--ticks") + 1], 0)
    return 1_000_000


TIERS = [
    "reference",
    pytest.param(
        "fast", marks=pytest.mark.skipif(not HAS_FAST_TIER, reason="kforge.fast is not installed")
    ),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_conformance_case(path: Path, tier: str, capsys: pytest.CaptureFixture[str]) -> None:
    case = parse_case(path)
    status = main(["run", str(path), *case.args, "--json", "--tier", tier])
    captured = capsys.readouterr()
    check_result(case, status, captured.out, captured.err)


SUBPROCESS_CASES = [
    "halt_only",
    "div_by_zero",
    "input_is_utf8",
    "recv_blocks",
    "memory_too_small",
    "asm_unknown_mnemonic",
]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_conformance_case_through_a_real_process(name: str) -> None:
    case = parse_case(CASES_DIR / f"{name}.fasm")
    environment = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONIOENCODING": "utf-8"}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "kforge.cli",
            "run",
            str(case.path),
            *case.args,
            "--json",
            "--tier",
            "reference",
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=environment,
        timeout=60,
        check=False,
    )
    check_result(case, completed.returncode, completed.stdout, completed.stderr)
