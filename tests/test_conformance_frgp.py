"""Conformance cases for hand-crafted FRGP containers (spec §6) and binary input.

The bytes are built here with ``struct`` straight from the spec's layout, not with
kforge's own encoder, the way an outside test author would.  Each valid container is
run through ``kforge run FILE --json`` on the reference and the fast tier and its whole
JSON result compared with a hand-computed one; each invalid form must exit 2 with
nothing on stdout and one stderr line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kforge.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"
HAS_FAST_TIER = importlib.util.find_spec("kforge.fast") is not None
TIERS = [
    "reference",
    pytest.param(
        "fast", marks=pytest.mark.skipif(not HAS_FAST_TIER, reason="kforge.fast is not installed")
    ),
]
MASK = (1 << 64) - 1


def insn(
    op: int, rd: int = 0, rs1: int = 0, rs2: int = 0, imm: int = 0, reserved: int = 0
) -> bytes:
    return struct.pack("<BBBBIQ", op, rd, rs1, rs2, reserved, imm & MASK)


def frgp(
    code: list[bytes],
    *,
    data: bytes = b"",
    entry: int = 0,
    symbols: tuple[tuple[bytes, int, int], ...] = (),
    relocations: tuple[tuple[int, int, bytes], ...] = (),
    metadata: bytes = b"",
    version: int = 1,
    flags: int = 0,
    code_count: int | None = None,
) -> bytes:
    out = b"FRGP" + struct.pack("<HHQ", version, flags, entry)
    out += struct.pack("<I", len(data)) + data
    count = len(code) if code_count is None else code_count
    out += struct.pack("<I", count) + b"".join(code)
    out += struct.pack("<I", len(symbols))
    for name, kind, value in symbols:
        out += struct.pack("<H", len(name)) + name + struct.pack("<BQ", kind, value)
    out += struct.pack("<I", len(relocations))
    for index, kind, name in relocations:
        out += struct.pack("<IBH", index, kind, len(name)) + name
    return out + struct.pack("<I", len(metadata)) + metadata


LI, LOAD, JMP, ADD, HALT, FAULT, SEND, RECV = 0x40, 0x20, 0x30, 0x01, 0x50, 0x51, 0x60, 0x61
NO_FLAGS = {"zero": False, "carry": False, "overflow": False}


def result(
    state: str,
    ticks: int,
    pc: int,
    registers: dict[str, int],
    *,
    fault: str | None = None,
    detail: int | None = None,
    output: str = "",
    stderr: str = "",
    budget: int = 1_000_000,
) -> dict[str, Any]:
    return {
        "state": state,
        "ticks_used": ticks,
        "ticks_remaining": budget - ticks,
        "fault": fault,
        "fault_detail": detail,
        "pc": pc,
        "output_hex": output,
        "stderr_hex": stderr,
        "registers": registers,
        "flags": {**NO_FLAGS, "halt": state == "HALTED"},
        "output_text": _text(output),
        "stderr_text": _text(stderr),
    }


def _text(hex_digits: str) -> str | None:
    try:
        return bytes.fromhex(hex_digits).decode("utf-8")
    except UnicodeDecodeError:
        return None


EMPTY_ENV = {"r253": 8, "r255": 8}

VALID: dict[str, tuple[bytes, int, dict[str, Any]]] = {
    "minimal": (frgp([insn(HALT)]), 0, result("HALTED", 1, 0, EMPTY_ENV)),
    "symbols_relocations_metadata": (
        frgp(
            [insn(LI, 1, imm=1), insn(LOAD, 2, 0, imm=0), insn(HALT)],
            data=b"\x2a\x00\x07",
            symbols=((b"B", 0, 2), (b"a", 1, 0), (b"main", 0, 0)),
            relocations=((0, 0, b""), (1, 1, b"")),
            metadata=b"hello",
        ),
        0,
        result("HALTED", 3, 2, {"r1": 1, "r2": 42, "r253": 16, "r254": 8, "r255": 8}),
    ),
    "entry_not_zero": (
        frgp([insn(FAULT, imm=9), insn(LI, 1, imm=5), insn(HALT)], entry=1),
        0,
        result("HALTED", 2, 2, {"r1": 5, **EMPTY_ENV}),
    ),
    "entry_last_instruction": (
        frgp([insn(FAULT, imm=9), insn(FAULT, imm=8)], entry=1),
        1,
        result("FAULTED", 1, 1, EMPTY_ENV, fault="USER_FAULT", detail=8),
    ),
    "unknown_opcode_fields_unchecked": (
        frgp([insn(0xAA, 1, 2, 3, 0xDEADBEEF)]),
        1,
        result("FAULTED", 1, 0, EMPTY_ENV, fault="INVALID_INSTRUCTION"),
    ),
    "opcode_zero_is_unknown": (
        frgp([insn(0x00)]),
        1,
        result("FAULTED", 1, 0, EMPTY_ENV, fault="INVALID_INSTRUCTION"),
    ),
    "unknown_opcode_after_halt_loads": (
        frgp([insn(HALT), insn(0xFF, 255, 255, 255, MASK)]),
        0,
        result("HALTED", 1, 0, EMPTY_ENV),
    ),
    "symbol_names_in_byte_order": (
        frgp([insn(HALT)], symbols=((b"Z", 0, 0), (b"_", 0, 0), (b"a", 1, 99))),
        0,
        result("HALTED", 1, 0, EMPTY_ENV),
    ),
    "send_data": (
        frgp([insn(LI, 1, imm=2), insn(SEND, 0, 0, 1, imm=0), insn(HALT)], data=b"hi"),
        0,
        result("HALTED", 5, 2, {"r1": 2, "r253": 16, "r254": 8, "r255": 8}, output="6869"),
    ),
    "recv_all_fields_used": (
        frgp([insn(RECV, 1, 2, 3, imm=2), insn(HALT)]),
        0,
        result("HALTED", 4, 1, EMPTY_ENV),
    ),
    "fault_code_max": (
        frgp([insn(FAULT, imm=MASK)]),
        1,
        result("FAULTED", 1, 0, EMPTY_ENV, fault="USER_FAULT", detail=MASK),
    ),
}

_GOOD = frgp([insn(HALT)])
INVALID: dict[str, bytes] = {
    "version_2": frgp([insn(HALT)], version=2),
    "version_0": frgp([insn(HALT)], version=0),
    "flags_1": frgp([insn(HALT)], flags=1),
    "flags_high_bit": frgp([insn(HALT)], flags=0x8000),
    "truncated_last_byte": _GOOD[:-1],
    "trailing_byte": _GOOD + b"\0",
    "magic_only": b"FRGP",
    "header_only": _GOOD[:16],
    "code_count_past_end": frgp([insn(HALT)], code_count=1000),
    "data_count_past_end": _GOOD[:16] + b"\xff\xff\xff\xff",
    "metadata_count_past_end": frgp([insn(HALT)], metadata=b"abc")[:-1],
    "reserved_non_zero": frgp([insn(HALT, reserved=0x100)]),
    "jmp_rd_non_zero": frgp([insn(JMP, rd=1, imm=0)]),
    "add_imm_non_zero": frgp([insn(ADD, 1, 2, 3, imm=1)]),
    "halt_imm_non_zero": frgp([insn(HALT, imm=1)]),
    "li_rs1_non_zero": frgp([insn(LI, 1, rs1=1, imm=1), insn(HALT)]),
    "send_rd_non_zero": frgp([insn(SEND, rd=1), insn(HALT)]),
    "symbols_unsorted": frgp([insn(HALT)], symbols=((b"b", 0, 0), (b"a", 0, 0))),
    "symbols_duplicate": frgp([insn(HALT)], symbols=((b"a", 0, 0), (b"a", 1, 0))),
    "code_empty": frgp([]),
    "entry_equals_code_length": frgp([insn(HALT)], entry=1),
    "entry_huge": frgp([insn(HALT)], entry=MASK),
    "bad_magic": b"FRGQ" + _GOOD[4:],
    "relocations_unsorted": frgp([insn(HALT), insn(HALT)], relocations=((1, 0, b""), (0, 0, b""))),
    "code_relocation_with_a_name": frgp([insn(HALT)], relocations=((0, 0, b"x"),)),
    # Documented decisions (docs/spec.md §7) where the spec leaves room:
    "decision_reserved_non_zero_on_unknown_opcode": frgp([insn(0xAA, reserved=1)]),
    "decision_symbol_kind_2": frgp([insn(HALT)], symbols=((b"a", 2, 0),)),
    "decision_relocation_index_outside_code": frgp([insn(HALT)], relocations=((5, 0, b""),)),
    "decision_unlinked_import": frgp([insn(JMP, imm=0)], relocations=((0, 2, b"ext"),)),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_container(
    name: str, tier: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob, exit_status, expected = VALID[name]
    path = tmp_path / "program.frgp"
    path.write_bytes(blob)
    status, out, err = _run(["run", str(path), "--json", "--tier", tier], capsys)
    assert (status, err) == (exit_status, "")
    assert json.loads(out) == expected


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_container(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "program.frgp"
    path.write_bytes(INVALID[name])
    status, out, err = _run(["run", str(path), "--json"], capsys)
    assert status == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err


def test_frgp_told_by_magic_not_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """FRGP bytes in a ``.fasm`` file run as a container; text in a ``.frgp`` file assembles."""
    (tmp_path / "bytes.fasm").write_bytes(frgp([insn(LI, 1, imm=7), insn(HALT)]))
    (tmp_path / "text.frgp").write_text("LI r1, 7\nHALT\n")
    for name in ("bytes.fasm", "text.frgp"):
        status, out, err = _run(["run", str(tmp_path / name), "--json"], capsys)
        assert (status, err) == (0, "")
        assert json.loads(out) == result("HALTED", 2, 1, {"r1": 7, **EMPTY_ENV})


def test_invalid_container_through_a_real_process(tmp_path: Path) -> None:
    path = tmp_path / "bad.frgp"
    path.write_bytes(INVALID["trailing_byte"])
    completed = subprocess.run(
        [sys.executable, "-m", "kforge.cli", "run", str(path), "--json"],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stdout == b""
    assert completed.stderr.count(b"\n") == 1


ECHO = "LI r2, 70000\nLI r1, 100\nRECV 2, r3, r1, r2\nSEND 0, r1, r3\nHALT\n"


@pytest.mark.parametrize("tier", TIERS)
def test_binary_input_file(tier: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--input-file`` bytes are the stdin message as they are, not decoded."""
    (tmp_path / "echo.fasm").write_text(ECHO)
    (tmp_path / "in.bin").write_bytes(b"\x00\xff\x80\n\r")
    argv = ["run", str(tmp_path / "echo.fasm"), "--json", "--tier", tier]
    status, out, _ = _run([*argv, "--input-file", str(tmp_path / "in.bin")], capsys)
    assert status == 0
    registers = {"r1": 100, "r2": 70000, "r3": 5, **EMPTY_ENV}
    assert json.loads(out) == result("HALTED", 9, 4, registers, output="00ff800a0d")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize(("size", "fault"), [(65536, None), (65537, "CHANNEL_ERROR")])
def test_input_against_the_message_limit(
    size: int, fault: str | None, tier: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An inbound message longer than 64 KiB faults RECV with CHANNEL_ERROR (charged)."""
    (tmp_path / "echo.fasm").write_text(ECHO)
    (tmp_path / "in.bin").write_bytes(b"y" * size)
    argv = ["run", str(tmp_path / "echo.fasm"), "--json", "--tier", tier, "--memory", "200000"]
    status, out, _ = _run([*argv, "--input-file", str(tmp_path / "in.bin")], capsys)
    got = json.loads(out)
    if fault is None:
        assert status == 0
        assert (got["state"], got["ticks_used"], got["registers"]["r3"]) == ("HALTED", 9, size)
        assert got["output_hex"] == "79" * size
    else:
        assert status == 1
        assert (got["state"], got["fault"], got["pc"], got["ticks_used"]) == (
            "FAULTED",
            fault,
            2,
            5,
        )
        assert "r3" not in got["registers"]
