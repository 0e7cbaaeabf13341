"""`kforge sandbox`: a durable engine carries sandboxes from one command to the next."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kforge.cli import main

TWICE = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""


@pytest.fixture
def sandbox(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    data_dir = str(tmp_path / "data")

    def kforge(*args: str) -> tuple[int, str, str]:
        status = main(["sandbox", *args, "--data-dir", data_dir])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return kforge


def _source(tmp_path: Path, text: str = TWICE) -> str:
    path = tmp_path / "program.fasm"
    path.write_text(text)
    return str(path)


def test_a_sandbox_lives_across_commands_from_create_to_result(
    sandbox: Any, tmp_path: Path
) -> None:
    status, out, _ = sandbox("create", _source(tmp_path), "--input", "first ")
    assert status == 0
    sandbox_id = out.strip()
    assert len(sandbox_id) == 64

    status, out, _ = sandbox("status", sandbox_id, "--json")
    assert json.loads(out)["state"] == "READY"

    status, out, _ = sandbox("start", sandbox_id, "--json")
    started = json.loads(out)
    assert (status, started["state"], started["blocked_channel"]) == (0, "BLOCKED", 2)

    status, out, _ = sandbox("result", sandbox_id)
    assert status == 1 and "BLOCKED" in out  # not stopped yet: its status, exit 1

    status, out, _ = sandbox("deliver", sandbox_id, "second", "--json")
    assert json.loads(out)["state"] == "HALTED"

    status, out, _ = sandbox("result", sandbox_id, "--json")
    result = json.loads(out)
    assert status == 0
    assert bytes.fromhex(result["output_hex"]) == b"first second"
    assert result["ticks_used"] == 14

    status, out, _ = sandbox("list", "--json")
    assert [json.loads(line)["sandbox"] for line in out.splitlines()] == [sandbox_id]


def test_run_creates_and_runs_in_one_command(sandbox: Any, tmp_path: Path) -> None:
    status, out, _ = sandbox("run", _source(tmp_path, "FAULT 9\n"), "--json")
    result = json.loads(out)
    assert (status, result["state"], result["fault"], result["fault_detail"]) == (
        1,
        "FAULTED",
        "USER_FAULT",
        9,
    )


def test_kill_stops_a_blocked_sandbox_and_a_second_kill_is_refused(
    sandbox: Any, tmp_path: Path
) -> None:
    _, out, _ = sandbox("create", _source(tmp_path))
    sandbox_id = out.strip()
    sandbox("start", sandbox_id)
    status, out, _ = sandbox("kill", sandbox_id, "--json")
    assert (status, json.loads(out)["state"]) == (0, "KILLED")
    status, out, err = sandbox("kill", sandbox_id)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and "invalid state KILLED" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("status", "abc"), "Hash256 hex must be 64 digits"),
        (("status", "ab" * 32), "sandbox not found"),
        (("deliver", "ab" * 32), "give the message as TEXT or --file"),
        (("create", "/nonexistent/program.fasm"), "cannot read"),
    ],
)
def test_errors_are_one_line_and_exit_2(sandbox: Any, args: tuple[str, ...], message: str) -> None:
    status, out, err = sandbox(*args)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
