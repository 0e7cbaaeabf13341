"""The prove / verify / keys commands, driven through their own argparse parser."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgpack
import pytest

from kforge.cli import CliError
from kforge.cli.proofs import add_commands
from kforge.core import ForgeError
from kforge.proofs.keys import load_or_create_key

COUNT = "LI r1, 0\nLI r2, 50\nLI r3, 1\nl:\nADD r1, r1, r3\nJLT r1, r2, l\nSEND 0, r253, r1\nHALT\n"


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kforge")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "count.fasm").write_text(COUNT)
    (tmp_path / "other.fasm").write_text(COUNT.replace("50", "51"))
    return tmp_path


def _prove(files: Path, *extra: str) -> Path:
    proof = files / "count.proof"
    argv = ["prove", str(files / "count.fasm"), "-o", str(proof), "--tier", "reference"]
    assert _run([*argv, "--sample-interval", "16", *extra]) == 0
    return proof


def test_prove_then_verify_ok(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proof = _prove(files, "--input", "hi", "--ticks", "5000")
    capsys.readouterr()
    assert _run(["verify", str(proof), str(files / "count.fasm"), "--tier", "reference"]) == 0
    assert capsys.readouterr().out.startswith("OK")


def test_verify_with_pinned_key(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proof = _prove(files)
    key = load_or_create_key(files / "data")
    assert (
        _run(["verify", str(proof), str(files / "count.fasm"), "--public-key", key.public_hex]) == 0
    )
    other = load_or_create_key(files / "elsewhere")
    capsys.readouterr()
    assert (
        _run(["verify", str(proof), str(files / "count.fasm"), "--public-key", other.public_hex])
        == 1
    )
    assert "forge_key is not the expected public key" in capsys.readouterr().out


def test_verify_against_another_program_names_the_divergence(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proof = _prove(files)
    capsys.readouterr()
    assert _run(["verify", str(proof), str(files / "other.fasm")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("MISMATCH") and "first divergent sample" in out and "program:" in out


def test_tampered_bundle_is_a_mismatch(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proof = _prove(files)
    version, proof_bytes, record_bytes = msgpack.unpackb(proof.read_bytes())
    fields = msgpack.unpackb(proof_bytes)
    fields[4] += 1  # ticks_used
    proof.write_bytes(msgpack.packb([version, msgpack.packb(fields), record_bytes]))
    capsys.readouterr()
    assert _run(["verify", str(proof), str(files / "count.fasm")]) == 1
    assert "ticks_used" in capsys.readouterr().out


def test_bad_bundle_is_a_clear_error(files: Path) -> None:
    junk = files / "junk.proof"
    junk.write_bytes(b"\xc1 not msgpack")
    with pytest.raises((CliError, ForgeError), match=r"junk\.proof"):
        _run(["verify", str(junk), str(files / "count.fasm")])
    with pytest.raises(CliError, match="cannot read"):
        _run(["verify", str(files / "missing.proof"), str(files / "count.fasm")])


def test_keys_prints_the_node_key(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["keys"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == load_or_create_key(files / "data").public_hex
    assert _run(["keys", "--pem"]) == 0
    assert capsys.readouterr().out.startswith("-----BEGIN PUBLIC KEY-----")


def test_prove_refuses_a_quota_that_does_not_fit(files: Path) -> None:
    with pytest.raises(ForgeError, match="memory quota exceeded"):
        _prove(files, "--memory", "4")
