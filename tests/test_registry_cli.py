"""The ``kforge registry`` commands, driven through their own argparse parser; the walkthrough."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from kforge.cli import CliError
from kforge.cli.proofs import add_commands as add_proof_commands
from kforge.cli.registry import add_commands
from kforge.core import ForgeError
from kforge.registry import InvalidTransition, PromotionRefused

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "registry"


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kforge")
    commands = parser.add_subparsers(dest="command", required=True)
    add_commands(commands)
    add_proof_commands(commands)
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path / "data"))
    shutil.copy(EXAMPLES / "numlib.fasm", tmp_path)
    shutil.copy(EXAMPLES / "numlib.vectors.json", tmp_path)
    assert _run(["registry", "keygen", str(tmp_path / "agent.pem")]) == 0
    agent = capsys.readouterr().out.strip()
    (tmp_path / "policy.json").write_text(json.dumps({"promoters": [agent]}))
    return tmp_path


def _registry(work: Path, command: str, *rest: str) -> int:
    return _run(["registry", command, "--policy", str(work / "policy.json"), *rest])


def test_propose_verify_promote_show_log_check_export(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _registry(work, "propose", str(work / "numlib.fasm"), "--version", "1") == 0
    assert "numlib@1 PROPOSED program" in capsys.readouterr().out
    assert _registry(work, "verify", "numlib", "1") == 0
    assert "VERIFIED" in capsys.readouterr().out
    key = str(work / "agent.pem")
    assert _registry(work, "promote", "numlib", "1", "--agent-key", key, "--reason", "ok") == 0
    assert capsys.readouterr().out == "numlib@1 VERIFIED -> TRUSTED\n"
    assert _registry(work, "show", "numlib", "1") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "TRUSTED" and len(shown["gates"]) == 5
    assert _registry(work, "log", "numlib", "1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[3] for line in lines] == [
        "- -> PROPOSED",
        "PROPOSED -> BUILT",
        "BUILT -> VERIFIED",
        "VERIFIED -> TRUSTED",
    ]
    assert _registry(work, "check") == 0
    assert capsys.readouterr().out.startswith("OK")
    assert _registry(work, "export", "numlib", "1", "--dir", str(work / "out")) == 0
    proofs = sorted((work / "out").glob("*.proof"))
    assert len(proofs) == 4
    capsys.readouterr()
    assert _run(["verify", str(proofs[0]), str(work / "out" / "numlib-1.frgp")]) == 0
    assert capsys.readouterr().out.startswith("OK")
    assert _registry(work, "revoke", "numlib", "1", "--agent-key", key, "--reason", "bad") == 0
    assert capsys.readouterr().out == "numlib@1 TRUSTED -> REVOKED\n"


def test_a_failed_gate_exits_one_with_json_facts(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "numlib.vectors.json").write_text(
        json.dumps({"vectors": [{"name": "wrong", "input": "4 6", "output": "3\n"}]})
    )
    assert _registry(work, "propose", str(work / "numlib.fasm"), "--version", "1") == 0
    capsys.readouterr()
    assert _registry(work, "verify", "numlib", "1", "--json") == 1
    outcome = json.loads(capsys.readouterr().out)
    (test,) = [r for r in outcome["results"] if r["gate"] == "test"]
    facts = test["failures"][0]["facts"]
    assert (facts["expected_output"]["text"], facts["actual_output"]["text"]) == ("3\n", "2\n")
    key = str(work / "agent.pem")
    with pytest.raises(PromotionRefused, match="test failed"):
        _registry(work, "promote", "numlib", "1", "--agent-key", key, "--reason", "x")


def test_promotion_refusals_through_the_cli(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _registry(work, "propose", str(work / "numlib.fasm"), "--version", "1") == 0
    key = str(work / "agent.pem")
    with pytest.raises(PromotionRefused, match="gates not green"):
        _registry(work, "promote", "numlib", "1", "--agent-key", key, "--reason", "skip")
    assert _registry(work, "verify", "numlib", "1") == 0
    assert _run(["registry", "keygen", str(work / "other.pem")]) == 0
    with pytest.raises(PromotionRefused, match="may not promote"):
        _registry(
            work, "promote", "numlib", "1", "--agent-key", str(work / "other.pem"), "--reason", "me"
        )
    with pytest.raises(InvalidTransition):
        _registry(work, "propose", str(work / "numlib.fasm"), "--version", "1")
    with pytest.raises(ForgeError, match="already exists"):
        _run(["registry", "keygen", str(work / "agent.pem")])
    (work / "agent.pem").chmod(0o644)
    with pytest.raises(ForgeError, match="too open"):
        _registry(work, "promote", "numlib", "1", "--agent-key", key, "--reason", "x")


def test_check_reports_a_tampered_ledger(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _registry(work, "propose", str(work / "numlib.fasm"), "--version", "1") == 0
    db = sqlite3.connect(work / "data" / "registry.sqlite3")
    db.execute("DROP TRIGGER programs_no_update")
    db.execute("UPDATE programs SET version = '2'")
    db.commit()
    db.close()
    capsys.readouterr()
    assert _registry(work, "check") == 1
    assert "TAMPERED: programs row" in capsys.readouterr().out


def test_cli_errors_for_missing_files_and_bad_arguments(work: Path) -> None:
    with pytest.raises(CliError, match="cannot read"):
        _registry(work, "propose", str(work / "missing.fasm"), "--version", "1")
    with pytest.raises(SystemExit):
        _registry(work, "propose", str(work / "numlib.fasm"), "--version", "1", "--grant", "9")
    with pytest.raises(CliError, match="both NAME and VERSION"):
        _registry(work, "log", "numlib")


def test_the_walkthrough_runs_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("walkthrough", EXAMPLES / "walkthrough.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ran use_numlib: HALTED" in out and "was revoked by agent" in out
    assert out.count(": OK: signed by") == 5
