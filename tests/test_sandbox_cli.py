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
    short = out.strip()
    assert len(short) == 12  # printed short, as git and docker do

    status, out, _ = sandbox("status", short, "--json")
    assert json.loads(out)["state"] == "READY"
    sandbox_id = json.loads(out)["id"]  # the API's form of SANDBOX_INFO
    assert len(sandbox_id) == 64 and sandbox_id.startswith(short)

    status, out, _ = sandbox("start", short[:4], "--json")
    started = json.loads(out)
    assert (status, started["state"], started["blocked_channel"]) == (0, "BLOCKED", 2)

    status, out, err = sandbox("result", short)
    assert status == 1  # not stopped yet: what it wrote so far, and its state, exit 1
    assert out == "first "
    assert "BLOCKED on channel 2" in err and short in err

    status, out, _ = sandbox("deliver", sandbox_id, "second", "--json")
    assert json.loads(out)["state"] == "HALTED"

    status, out, _ = sandbox("result", short, "--json")
    result = json.loads(out)
    assert status == 0
    assert bytes.fromhex(result["output_hex"]) == b"first second"
    assert result["ticks_used"] == 14

    status, out, _ = sandbox("list", "--json")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [sandbox_id]


def test_start_and_deliver_show_the_output_they_cause(sandbox: Any, tmp_path: Path) -> None:
    _, out, _ = sandbox("create", _source(tmp_path), "--input", "one ")
    short = out.strip()
    status, out, err = sandbox("start", short)
    assert (status, out) == (0, "one ")
    assert err.startswith(short) and "BLOCKED on channel 2" in err
    status, out, err = sandbox("deliver", short, "two")
    assert (status, out) == (0, "two")  # only what this delivery made it write
    assert "HALTED" in err
    status, out, err = sandbox("output", short)
    assert (status, out, err) == (0, "one two", "")


def test_output_shows_a_blocked_sandbox_s_output_and_follows_it(
    sandbox: Any, tmp_path: Path
) -> None:
    _, out, _ = sandbox("create", _source(tmp_path), "--input", "so far")
    short = out.strip()
    sandbox("start", short)
    status, out, _ = sandbox("output", short, "--follow")  # blocked: nothing more comes
    assert (status, out) == (0, "so far")
    status, out, _ = sandbox("output", short, "--json")
    values = json.loads(out)
    assert (values["state"], bytes.fromhex(values["output_hex"])) == ("BLOCKED", b"so far")


def test_an_id_prefix_must_name_exactly_one_sandbox(sandbox: Any, tmp_path: Path) -> None:
    ids = []
    for _ in range(17):  # 16 hex digits: some two ids share their first
        _, out, _ = sandbox("create", _source(tmp_path, "HALT\n"), "--json")
        ids.append(json.loads(out)["sandbox_id"])
    shared = next(i[0] for i in ids if sum(j[0] == i[0] for j in ids) > 1)
    status, out, err = sandbox("status", shared)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and "give more digits" in err
    unused = next(
        digit for digit in "0123456789abcdef" if not any(i.startswith(digit * 2) for i in ids)
    )
    status, out, err = sandbox("status", unused * 2)
    assert (status, out) == (2, "") and f"no sandbox id starts with {unused * 2}" in err
    status, out, _ = sandbox("status", ids[0][:10].upper())
    assert status == 0 and out.startswith(ids[0][:12])


def test_bare_sandbox_prints_its_actions(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["sandbox"])
    out, err = capsys.readouterr()
    assert (status, err) == (0, "")
    for action in ("create", "start", "deliver", "output", "result", "kill", "list", "run"):
        assert action in out


def test_run_creates_and_runs_in_one_command(sandbox: Any, tmp_path: Path) -> None:
    status, out, _ = sandbox("run", _source(tmp_path, "FAULT 9\n"), "--json")
    result = json.loads(out)
    assert (status, result["state"], result["fault"], result["fault_detail"]) == (
        1,
        "FAULTED",
        0xFF,  # USER_FAULT: the API's form, a fault code
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
        (("status", "xyz"), "expected a sandbox id or a prefix of one"),
        (("status", "ab" * 32), "sandbox not found"),
        (("deliver", "ab" * 32), "give the message as TEXT or --file"),
        (("output", "ab" * 32, "-f"), "sandbox not found"),
        (("create", "/nonexistent/program.fasm"), "cannot read"),
    ],
)
def test_errors_are_one_line_and_exit_2(sandbox: Any, args: tuple[str, ...], message: str) -> None:
    status, out, err = sandbox(*args)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_create_takes_a_preset(sandbox: Any, tmp_path: Path) -> None:
    status, out, _ = sandbox("create", _source(tmp_path), "--preset", "minimal")
    assert status == 0
    status, out, _ = sandbox("status", out.strip(), "--json")
    assert json.loads(out)["memory_quota"] == 16 * 1024 * 1024
