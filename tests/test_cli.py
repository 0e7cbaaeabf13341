"""The ``kforge`` command: asm, disasm and run, its results and every error path (spec §8)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kforge.asm import assemble
from kforge.cli import main
from kforge.isa import Instruction, Opcode
from kforge.program import ForgeProgram, Relocation, RelocationKind, decode_program

SRC = Path(__file__).resolve().parents[1] / "src"
HAS_FAST_TIER = importlib.util.find_spec("kforge.fast") is not None
SPEC_KEYS = {
    "state", "ticks_used", "ticks_remaining", "fault", "fault_detail", "pc", "output_hex", "stderr_hex",
    "registers", "flags",
}  # fmt: skip
RESULT_KEYS = SPEC_KEYS | {"output_text", "stderr_text"}

HELLO = """\
.data
msg:    .ascii "hi\\n"
msg_end:
.code
        LI   r1, msg
        LI   r2, msg_end
        SUB  r2, r2, r1
        SEND 0, r1, r2
        HALT
"""
DIVIDE = """\
        LI   r1, 7
        DIV  r2, r1, r0
        HALT
"""
ECHO = """\
        LI   r2, 64
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""
BLOCKS = """\
        LI   r2, 8
        RECV 2, r3, r253, r2
        RECV 2, r3, r253, r2
        HALT
"""


@pytest.fixture
def write(tmp_path: Path) -> Any:
    def write_file(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        return str(path)

    return write_file


def kforge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    status, out, err = kforge(capsys, "run", *argv, "--json")
    assert err == ""
    lines = out.splitlines()
    assert len(lines) == 1
    return status, json.loads(lines[0])


def assert_one_line_error(status: int, out: str, err: str, *fragments: str) -> None:
    assert status == 2
    assert out == ""
    assert err.startswith("kforge: ")
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# ======================================================================= asm, disasm, run


def test_asm_writes_the_frgp_bytes_of_the_program(capsys: Any, write: Any, tmp_path: Path) -> None:
    source = write("hello.fasm", HELLO)
    target = tmp_path / "hello.frgp"
    status, out, err = kforge(capsys, "asm", source, "-o", str(target))
    assert (status, out, err) == (0, "", "")
    blob = target.read_bytes()
    assert blob[:4] == b"FRGP"
    assert blob == assemble(HELLO, source).encoded
    assert decode_program(blob).data == b"hi\n"


def test_running_the_frgp_file_gives_the_same_result_as_the_source(
    capsys: Any, write: Any, tmp_path: Path
) -> None:
    source = write("hello.fasm", HELLO)
    target = tmp_path / "hello.frgp"
    assert main(["asm", source, "-o", str(target)]) == 0
    from_source = run_json(capsys, source)
    from_bytes = run_json(capsys, str(target))
    assert from_source == from_bytes
    status, result = from_bytes
    assert status == 0
    assert result["output_hex"] == b"hi\n".hex()
    assert result["state"] == "HALTED"


def test_json_reports_stderr_bytes_apart_from_stdout(capsys: Any, write: Any) -> None:
    source = write(
        "both.fasm",
        """\
.data
out:    .ascii "ok\\n"
err:    .ascii "bad\\n"
.code
        LI   r1, out
        LI   r2, 3
        SEND 0, r1, r2
        LI   r1, err
        LI   r2, 4
        SEND 1, r1, r2
        HALT
""",
    )
    status, result = run_json(capsys, source)
    assert status == 0
    assert result["output_hex"] == b"ok\n".hex()
    assert result["stderr_hex"] == b"bad\n".hex()
    assert (result["output_text"], result["stderr_text"]) == ("ok\n", "bad\n")


def test_json_gives_text_only_for_valid_utf8(capsys: Any, write: Any) -> None:
    source = write(
        "bytes.fasm",
        """\
.data
out:    .byte 0xff, 0x41
.code
        LI   r1, out
        LI   r2, 2
        SEND 0, r1, r2
        HALT
""",
    )
    _, result = run_json(capsys, source)
    assert result["output_hex"] == "ff41"
    assert result["output_text"] is None
    assert result["stderr_text"] == ""


def test_json_keeps_the_specification_keys_first_and_in_order(capsys: Any, write: Any) -> None:
    _, out, _ = kforge(capsys, "run", write("hello.fasm", HELLO), "--json")
    keys = list(json.loads(out))
    assert keys[: len(SPEC_KEYS)] == [
        "state", "ticks_used", "ticks_remaining", "fault", "fault_detail", "pc", "output_hex",
        "stderr_hex", "registers", "flags",
    ]  # fmt: skip


def test_disasm_output_assembles_back_to_the_same_bytes(
    capsys: Any, write: Any, tmp_path: Path
) -> None:
    source = write("hello.fasm", HELLO)
    target = tmp_path / "hello.frgp"
    assert main(["asm", source, "-o", str(target)]) == 0
    status, text, err = kforge(capsys, "disasm", str(target))
    assert (status, err) == (0, "")
    assert "SEND" in text and "HALT" in text
    assert assemble(text, "disasm").encoded == target.read_bytes()


def test_disasm_reads_assembly_text_too(capsys: Any, write: Any) -> None:
    status, text, _ = kforge(capsys, "disasm", write("d.fasm", DIVIDE))
    assert status == 0
    assert "DIV r2, r1, r0" in text
    assert assemble(text, "again").encoded == assemble(DIVIDE, "d").encoded


def test_disasm_writes_unknown_opcodes_as_raw_instructions(capsys: Any, write: Any) -> None:
    program = ForgeProgram((Instruction(0xEE, 1, 2, 3, 4), Instruction(Opcode.HALT)))
    status, text, _ = kforge(capsys, "disasm", write("raw.frgp", program.encoded))
    assert status == 0
    assert ".insn" in text.lower()
    assert assemble(text, "raw").encoded == program.encoded


def test_frgp_and_assembly_are_told_apart_by_magic_not_by_name(capsys: Any, write: Any) -> None:
    bytes_named_fasm = write("really_bytes.fasm", assemble(HELLO, "x").encoded)
    text_named_frgp = write("really_text.frgp", HELLO)
    assert run_json(capsys, bytes_named_fasm) == run_json(capsys, text_named_frgp)


# ======================================================================= results and exit codes


def test_json_result_has_exactly_the_spec_fields(capsys: Any, write: Any) -> None:
    status, result = run_json(capsys, write("hello.fasm", HELLO))
    assert status == 0
    assert set(result) == RESULT_KEYS
    assert set(result["flags"]) == {"zero", "carry", "overflow", "halt"}
    assert result["output_hex"] == result["output_hex"].lower() == "68690a"
    # Only non-zero registers appear: r1 holds msg = 0.
    assert result["registers"] == {"r2": 3, "r253": 16, "r254": 8, "r255": 8}
    assert result["flags"] == {"zero": False, "carry": False, "overflow": False, "halt": True}
    assert (result["ticks_used"], result["pc"], result["state"]) == (7, 4, "HALTED")
    assert result["fault"] is None and result["fault_detail"] is None


def test_exit_status_is_0_halted_1_faulted_1_blocked(capsys: Any, write: Any) -> None:
    assert run_json(capsys, write("h.fasm", HELLO))[0] == 0
    status, result = run_json(capsys, write("d.fasm", DIVIDE))
    assert (status, result["state"], result["fault"], result["pc"]) == (
        1,
        "FAULTED",
        "DIVIDE_BY_ZERO",
        1,
    )
    status, result = run_json(capsys, write("b.fasm", BLOCKS))
    assert (status, result["state"], result["fault"], result["pc"]) == (1, "BLOCKED", None, 2)


def test_large_register_values_are_exact_json_integers(capsys: Any, write: Any) -> None:
    _, result = run_json(capsys, write("big.fasm", "LI r9, -1\nHALT\n"))
    assert result["registers"]["r9"] == 2**64 - 1


def test_ticks_and_memory_options(capsys: Any, write: Any) -> None:
    source = write("d.fasm", DIVIDE)
    _, result = run_json(capsys, source, "--ticks", "2")
    assert (result["fault"], result["pc"], result["ticks_used"], result["ticks_remaining"]) == (
        "OUT_OF_TICKS",
        1,
        1,
        1,
    )
    _, result = run_json(
        capsys, write("m.fasm", "LOAD r1, r0, 31\nLOAD r1, r0, 32\n"), "--memory", "32"
    )
    assert (result["fault"], result["pc"]) == ("INVALID_ADDRESS", 1)


def test_default_budget_is_one_million_ticks(capsys: Any, write: Any) -> None:
    _, result = run_json(capsys, write("h.fasm", "HALT\n"))
    assert result["ticks_used"] + result["ticks_remaining"] == 1_000_000


def test_default_memory_is_64_kib(capsys: Any, write: Any) -> None:
    _, result = run_json(capsys, write("m.fasm", "LOAD r1, r0, 65535\nLOAD r1, r0, 65536\n"))
    assert (result["fault"], result["pc"]) == ("INVALID_ADDRESS", 1)


def test_input_text_is_taken_as_utf8(capsys: Any, write: Any) -> None:
    _, result = run_json(capsys, write("e.fasm", ECHO), "--input", "ping é")
    assert bytes.fromhex(result["output_hex"]) == "ping é".encode()


def test_input_file_bytes_reach_stdin_unchanged(capsys: Any, write: Any) -> None:
    data = write("input.bin", b"\xff\x00\xfe\n")
    status, result = run_json(capsys, write("e.fasm", ECHO), "--input-file", data)
    assert status == 0
    assert result["output_hex"] == "ff00fe0a"


def test_grant_opens_a_channel(capsys: Any, write: Any) -> None:
    source = write("g.fasm", "SEND 5, r0, r0\nHALT\n")
    assert run_json(capsys, source)[1]["fault"] == "PERMISSION_DENIED"
    assert run_json(capsys, source, "--grant", "5")[1]["state"] == "HALTED"
    assert run_json(capsys, source, "--grant", "3", "--grant", "5")[1]["state"] == "HALTED"


def test_env_is_repeatable_and_fills_the_environment_block(capsys: Any, write: Any) -> None:
    source = write("env.fasm", "SEND 0, r254, r255\nHALT\n")
    _, result = run_json(capsys, source, "--env", "B=22", "--env", "A=1=x")
    block = bytes.fromhex(result["output_hex"])
    assert result["registers"]["r255"] == len(block) == 8 + 2 * 32
    assert block[:8] == (2).to_bytes(8, "little")
    assert block[8:40] == (1).to_bytes(8, "little") + b"A" + bytes(7) + (3).to_bytes(
        8, "little"
    ) + b"1=x" + bytes(5)
    assert block[40:] == (1).to_bytes(8, "little") + b"B" + bytes(7) + (2).to_bytes(
        8, "little"
    ) + b"22" + bytes(6)


def test_env_takes_command_line_bytes_like_input_does(capsys: Any, write: Any) -> None:
    # A non-UTF-8 argv byte reaches Python as a lone surrogate (surrogateescape); --input
    # turns it back into the byte, and --env must do the same instead of refusing it.
    source = write("env.fasm", "SEND 0, r254, r255\nHALT\n")
    status, out, err = kforge(capsys, "run", source, "--env", "K=\udcff", "--json")
    assert (status, err) == (0, "")
    block = bytes.fromhex(json.loads(out)["output_hex"])
    assert block[8:] == (1).to_bytes(8, "little") + b"K" + bytes(7) + (1).to_bytes(
        8, "little"
    ) + b"\xff" + bytes(7)


@pytest.mark.parametrize(
    "tier",
    [
        "auto",
        pytest.param("fast", marks=pytest.mark.skipif(not HAS_FAST_TIER, reason="no fast tier")),
    ],
)
def test_every_tier_gives_the_reference_result(capsys: Any, write: Any, tier: str) -> None:
    source = write(
        "loop.fasm",
        """\
        LI   r1, 300
        LI   r2, 1
loop:   MUL  r3, r1, r1
        ADD  r4, r4, r3
        SUB  r1, r1, r2
        JNZ  r1, loop
        LI   r5, 8
        STOREW r4, r253, 0
        SEND 0, r253, r5
        HALT
""",
    )
    reference = run_json(capsys, source, "--tier", "reference")
    assert run_json(capsys, source, "--tier", tier) == reference
    assert reference[1]["registers"]["r4"] == sum(i * i for i in range(1, 301))


@pytest.mark.skipif(HAS_FAST_TIER, reason="the fast tier is installed")
def test_asking_for_a_missing_fast_tier_is_an_error(capsys: Any, write: Any) -> None:
    status, out, err = kforge(capsys, "run", write("h.fasm", "HALT\n"), "--tier", "fast")
    assert_one_line_error(status, out, err, "fast")


# ======================================================================= summary and trace


def test_summary_mentions_output_state_and_ticks(capsys: Any, write: Any) -> None:
    status, out, err = kforge(capsys, "run", write("hello.fasm", HELLO), "--summary")
    assert (status, err) == (0, "")
    assert "output" in out and "hi" in out
    assert "HALTED" in out
    assert re.search(r"\b7 ticks\b|\bticks\D{0,5}7\b", out), out


def test_summary_of_a_fault_names_it_with_its_pc_and_instruction(capsys: Any, write: Any) -> None:
    status, out, _ = kforge(capsys, "run", write("d.fasm", DIVIDE), "-v")
    assert status == 1
    assert "FAULTED" in out
    fault_lines = [line for line in out.splitlines() if "DIVIDE_BY_ZERO" in line]
    assert fault_lines, out
    assert re.search(r"\bpc 1\b", fault_lines[0])
    assert "DIV r2, r1, r0" in fault_lines[0]
    assert re.search(r"\b3 ticks\b|\bticks\D{0,5}3\b", out), out


def test_summary_of_a_user_fault_shows_the_user_code(capsys: Any, write: Any) -> None:
    _, out, _ = kforge(capsys, "run", write("f.fasm", "NOP\nFAULT 4242\n"), "-v")
    assert "USER_FAULT" in out and "4242" in out


def test_summary_of_a_blocked_run_names_the_channel(capsys: Any, write: Any) -> None:
    status, out, _ = kforge(capsys, "run", write("b.fasm", BLOCKS), "-v")
    assert status == 1
    assert "BLOCKED" in out
    assert re.search(r"channel 2\b", out)


def trace_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_trace_shows_pc_ticks_instruction_and_changed_registers(capsys: Any, write: Any) -> None:
    source = write("t.fasm", "LI r1, 5\nMUL r2, r1, r1\nHALT\n")
    status, out, err = kforge(capsys, "run", source, "--trace")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["0", "1"] and "LI r1, 5" in lines[0]
    assert lines[0].rstrip().endswith("r1=5")
    assert lines[1].split()[:2] == ["1", "3"] and "MUL r2, r1, r1" in lines[1]
    assert lines[1].rstrip().endswith("r2=25")
    assert lines[2].split()[:2] == ["2", "4"] and "HALT" in lines[2]
    assert "r" not in lines[2].split("HALT", 1)[1]
    assert len(lines) == 3  # no output: nothing follows the trace


def test_the_program_output_follows_the_trace(capsys: Any, write: Any) -> None:
    status, out, err = kforge(capsys, "run", write("hello.fasm", HELLO), "--trace")
    assert (status, err) == (0, "")
    assert out.endswith("HALT\nhi\n")


def test_a_summary_follows_the_trace_when_asked(capsys: Any, write: Any) -> None:
    _, out, _ = kforge(capsys, "run", write("hello.fasm", HELLO), "--trace", "--summary")
    assert "HALTED" in out.splitlines()[-3]


def test_trace_of_a_fault_ends_on_the_faulting_instruction(capsys: Any, write: Any) -> None:
    _, out, err = kforge(capsys, "run", write("d.fasm", DIVIDE), "--trace")
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[1].split()[:2] == ["1", "3"] and "DIV r2, r1, r0" in lines[1]
    assert "r2=" not in lines[1]
    assert err.startswith("kforge: FAULTED: DIVIDE_BY_ZERO")


def test_trace_with_json_goes_to_stderr_and_stdout_stays_one_json_object(
    capsys: Any, write: Any
) -> None:
    source = write("t.fasm", "LI r1, 5\nMUL r2, r1, r1\nHALT\n")
    status, out, err = kforge(capsys, "run", source, "--trace", "--json")
    assert status == 0
    assert json.loads(out)["registers"]["r2"] == 25
    assert [line[:2] for line in trace_lines(err)] == [["0", "1"], ["1", "3"], ["2", "4"]]


def test_trace_gives_the_same_result_as_a_plain_run(capsys: Any, write: Any) -> None:
    source = write("e.fasm", ECHO)
    plain = run_json(capsys, source, "--input", "abc")
    status, out, _ = kforge(capsys, "run", source, "--input", "abc", "--trace", "--json")
    assert (status, json.loads(out)) == plain


# ======================================================================= error paths


def test_a_missing_file_is_one_line(capsys: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.fasm")
    assert_one_line_error(*kforge(capsys, "run", missing), missing)
    assert_one_line_error(*kforge(capsys, "asm", missing, "-o", str(tmp_path / "x")), missing)
    assert_one_line_error(*kforge(capsys, "disasm", missing), missing)


def test_an_unreadable_path_is_one_line(capsys: Any, tmp_path: Path) -> None:
    assert_one_line_error(*kforge(capsys, "run", str(tmp_path)), str(tmp_path))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads anything")
def test_a_file_without_read_permission_is_one_line(capsys: Any, write: Any) -> None:
    path = write("secret.fasm", "HALT\n")
    os.chmod(path, 0)
    assert_one_line_error(*kforge(capsys, "run", path), path)


def test_text_that_is_not_utf8_is_one_line(capsys: Any, write: Any) -> None:
    path = write("latin1.fasm", b"; caf\xe9\nHALT\n")
    assert_one_line_error(*kforge(capsys, "run", path), path, "UTF-8")


@pytest.mark.parametrize(
    "blob",
    [
        b"FRGP",
        b"FRGP\x01\x00\x00\x00" + bytes(8),
        b"FRGP\x02\x00" + bytes(30),
        ForgeProgram((Instruction(Opcode.HALT),)).encoded + b"\0",
    ],
    ids=["magic-only", "truncated", "version-2", "trailing-byte"],
)
def test_bad_frgp_bytes_are_one_line(capsys: Any, write: Any, blob: bytes) -> None:
    path = write("bad.frgp", blob)
    assert_one_line_error(*kforge(capsys, "run", path), path)
    assert_one_line_error(*kforge(capsys, "disasm", path), path)


def test_a_program_with_unresolved_imports_is_refused_with_exit_2(capsys: Any, write: Any) -> None:
    program = ForgeProgram(
        (Instruction(Opcode.CALL, imm=0), Instruction(Opcode.HALT)),
        relocations=(Relocation(0, RelocationKind.SYMBOL, b"helper"),),
    )
    path = write("needs_link.frgp", program.encoded)
    assert_one_line_error(*kforge(capsys, "run", path), "helper")


def test_an_assembly_error_names_file_line_and_column(
    capsys: Any, write: Any, tmp_path: Path
) -> None:
    path = write("broken.fasm", "        NOP\n        LI   r1, r2\n")
    expected = f"{path}:2:18:"
    assert_one_line_error(*kforge(capsys, "run", path), expected)
    assert_one_line_error(*kforge(capsys, "asm", path, "-o", str(tmp_path / "out")), expected)
    assert not (tmp_path / "out").exists()


def test_an_empty_file_is_an_assembly_error(capsys: Any, write: Any) -> None:
    path = write("empty.fasm", "")
    assert_one_line_error(*kforge(capsys, "run", path), path)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--memory", "15"], "memory"),
        (["--memory", "0"], "memory"),
        (["--memory", str(2**32 + 1)], "memory"),
        (["--memory", "lots"], "--memory"),
        (["--memory", "-1"], "--memory"),
        (["--ticks", "-1"], "--ticks"),
        (["--ticks", str(2**64)], "--ticks"),
        (["--ticks", "ten"], "--ticks"),
        (["--grant", "2"], "--grant"),
        (["--grant", "8"], "--grant"),
        (["--grant", "99"], "--grant"),
        (["--grant", "x"], "--grant"),
        (["--env", "NOEQUALS"], "--env"),
        (["--tier", "turbo"], "--tier"),
        (["--input", "a", "--input-file", "b"], "--input"),
        (["--input-file", "/nonexistent/input"], "/nonexistent/input"),
        (["--bogus"], "--bogus"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_bad_run_arguments_are_one_line_with_exit_2(
    capsys: Any, write: Any, options: list[str], fragment: str
) -> None:
    path = write("h.fasm", "HALT\n")
    assert_one_line_error(*kforge(capsys, "run", path, *options), fragment)


@pytest.mark.parametrize(
    "argv",
    [["frobnicate"], ["run"], ["asm", "x.fasm"], ["disasm"], ["run", "a", "b"]],
    ids=[
        "unknown-command",
        "run-no-file",
        "asm-no-output",
        "disasm-no-file",
        "two-files",
    ],
)
def test_bad_commands_are_one_line_with_exit_2(capsys: Any, argv: list[str]) -> None:
    assert_one_line_error(*kforge(capsys, *argv))


def test_asm_into_a_missing_directory_is_one_line(capsys: Any, write: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "no" / "such" / "dir" / "out.frgp")
    assert_one_line_error(*kforge(capsys, "asm", write("h.fasm", "HALT\n"), "-o", target), target)


ARGUMENT_WORDS = st.sampled_from(
    [
        "run",
        "asm",
        "disasm",
        "-o",
        "--json",
        "--trace",
        "--ticks",
        "--memory",
        "--input",
        "--input-file",
        "--grant",
        "--env",
        "--tier",
        "reference",
        "0",
        "1",
        "3",
        "8",
        "16",
        "-1",
        "64",
        "100",
        "65536",
        "A=1",
        "=",
        "x",
        "",
        "HALT.fasm",
        "BAD.fasm",
        "missing.fasm",
    ]
)


@settings(max_examples=100, deadline=None)
@given(st.lists(ARGUMENT_WORDS, max_size=8))
def test_no_command_line_raises_or_prints_a_traceback(words: list[str]) -> None:
    # Paths are relative to a fixed scratch directory holding HALT.fasm and BAD.fasm.
    scratch = Path(__file__).parent / "conformance"
    argv = [
        str(scratch / "halt_only.fasm")
        if w == "HALT.fasm"
        else str(scratch / "asm_bad_register.fasm")
        if w == "BAD.fasm"
        else w
        for w in words
    ]
    if "asm" in argv:  # never write files from this test
        argv = [w for w in argv if w != "-o"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([*argv, "--tier", "reference"] if argv[:1] == ["run"] else argv)
    assert status in (0, 1, 2)
    assert "Traceback" not in err.getvalue()
    assert "internal error" not in err.getvalue()
    if status == 2:
        assert out.getvalue() == ""
        assert err.getvalue().count("\n") == 1


FILE_WORDS = st.sampled_from(
    [
        "LI",
        "ADD",
        "SEND",
        "RECV",
        "JMP",
        "CALL",
        "RET",
        "HALT",
        ".data",
        ".code",
        ".byte",
        ".u64",
        ".ascii",
        ".zero",
        ".align",
        ".equ",
        ".entry",
        ".export",
        ".import",
        ".insn",
        "r1",
        "r255",
        "r256",
        "0",
        "-1",
        "0x",
        "'a'",
        '"s"',
        '"\\q"',
        ",",
        ":",
        "lbl",
        "lbl:",
        "\n",
        "\n",
        " ",
        ";c",
        "18446744073709551616",
        "é",
    ]
)
FILE_CONTENTS = st.one_of(
    st.binary(max_size=120),
    st.binary(max_size=120).map(lambda tail: b"FRGP\x01\x00\x00\x00" + tail),
    st.lists(FILE_WORDS, max_size=30).map(lambda words: " ".join(words).encode()),
)


@settings(max_examples=150, deadline=None)
@given(FILE_CONTENTS)
def test_no_file_content_makes_run_or_disasm_raise(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "fuzz.fasm"
        path.write_bytes(content)
        for argv in (
            ["run", str(path), "--json", "--tier", "reference", "--ticks", "500"],
            ["disasm", str(path)],
        ):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(argv)
            assert status in (0, 1, 2)
            assert "internal error" not in err.getvalue()
            if status == 2:
                assert out.getvalue() == ""
                assert err.getvalue().count("\n") == 1
                assert err.getvalue().startswith("kforge: ")
            else:
                assert err.getvalue() == ""


# ======================================================================= a real process


def run_process(*argv: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "kforge.cli", *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=environment,
        timeout=60,
        check=False,
    )


def test_the_module_runs_as_a_command(write: Any) -> None:
    done = run_process("run", write("hello.fasm", HELLO), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output_hex"] == "68690a"


def test_the_command_reports_errors_in_one_line_without_a_traceback(write: Any) -> None:
    done = run_process("run", write("x.fasm", "HALT\n"), "--grant", "9")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    done = run_process("frobnicate")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_byte_order_mark_before_assembly_text_is_ignored(capsys: Any, write: Any) -> None:
    source = write("bom.fasm", b"\xef\xbb\xbfLI r1, 7\nHALT\n")
    status, result = run_json(capsys, source)
    assert (status, result["registers"]["r1"]) == (0, 7)


@pytest.mark.parametrize(
    ("content", "memory", "name"),
    [
        ("ADD r1\n", "65536", "InvalidProgram: "),
        (b"FRGP\x02\x00", "65536", "InvalidProgram: "),
        ("HALT\n", "4", "MemoryQuotaExceeded: "),
    ],
)
def test_errors_on_stderr_carry_the_seed_error_name(
    capsys: Any, write: Any, content: str | bytes, memory: str, name: str
) -> None:
    source = write("named.fasm", content)
    status, out, err = kforge(capsys, "run", source, "--memory", memory, "--json")
    assert (status, out) == (2, "")
    assert err.startswith("kforge: " + name) and err.count("\n") == 1


def test_running_out_of_host_memory_is_one_line_not_a_traceback(
    capsys: Any, write: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kforge import asm as assembler

    def exhausted(text: str, filename: str) -> Any:
        raise MemoryError

    monkeypatch.setattr(assembler, "assemble", exhausted)
    status, out, err = kforge(capsys, "run", write("big.fasm", ".data\n.zero 3000000000\n"))
    assert (status, out) == (2, "")
    assert err == "kforge: MemoryError: the host ran out of memory for this request\n"
