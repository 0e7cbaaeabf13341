"""The ``kforge`` command keeps the conventions people expect of a command-line tool.

Help for everything (with defaults), ``--version``, usage when given nothing, ``-``
for stdin and stdout, a quiet end when the reader of a pipe goes away, colour only
on a terminal and never under ``NO_COLOR``, one line for a port that is taken.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import pty
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge import __version__
from kforge.asm import assemble
from kforge.cli import main
from kforge.cli.options import STDIO
from kforge.cli.registry import format_time
from kforge.program import decode_program

SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FLAG_ACTIONS = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse._HelpAction,
    argparse._VersionAction,
    argparse._SubParsersAction,
)


def kforge_process(
    *argv: str, input: bytes | None = None, env: dict[str, str] | None = None, **options: Any
) -> subprocess.CompletedProcess[bytes]:
    environment = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    environment |= {"PYTHONPATH": str(SRC), **(env or {})}
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} | options
    return subprocess.run(
        [sys.executable, "-m", "kforge.cli", *argv],
        input=input,
        env=environment,
        timeout=60,
        check=False,
        **streams,
    )


def every_parser() -> list[argparse.ArgumentParser]:
    found = []
    pending = [importlib.import_module("kforge.cli.main")._build_parser()]
    while pending:
        parser = pending.pop()
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += list(action.choices.values())
    return found


def test_every_option_has_help_that_states_its_default() -> None:
    parsers = every_parser()
    assert len(parsers) > 30  # every command and action was walked
    missing = []
    for parser in parsers:
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or isinstance(action, FLAG_ACTIONS) or action.required:
                continue
            text = formatter._expand_help(action) if action.help else ""
            if "default" not in text:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings)}")
    assert missing == []


def test_every_positional_argument_is_explained() -> None:
    unexplained = [
        f"{parser.prog} {action.dest}"
        for parser in every_parser()
        for action in parser._actions
        if not action.option_strings
        and not isinstance(action, argparse._SubParsersAction)
        and not action.help
    ]
    assert unexplained == []


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kforge {__version__}\n"


@pytest.mark.parametrize("argv", [[], ["registry"], ["sandbox"], ["cache"]])
def test_a_command_group_without_a_command_prints_its_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: kforge") and err == ""


def test_asm_to_dash_writes_the_program_to_stdout() -> None:
    done = kforge_process("asm", str(EXAMPLES / "hello.fasm"), "-o", STDIO)
    assert (done.returncode, done.stderr) == (0, b"")
    source = (EXAMPLES / "hello.fasm").read_text()
    assert decode_program(done.stdout) == assemble(source, "hello.fasm")


def test_binary_output_is_not_written_to_a_terminal() -> None:
    leader, follower = pty.openpty()
    try:
        done = kforge_process("asm", str(EXAMPLES / "hello.fasm"), "-o", STDIO, stdout=follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    assert b"not writing FRGP bytes to a terminal" in done.stderr


def test_dash_reads_the_program_and_the_input_from_stdin() -> None:
    source = (EXAMPLES / "echo.fasm").read_bytes()
    done = kforge_process("run", STDIO, "--input", "ping", input=source)
    assert (done.returncode, done.stdout) == (0, b"ping")
    program = (EXAMPLES / "echo.fasm").as_posix()
    done = kforge_process("run", program, "--input-file", STDIO, input=b"\x00\xffpong")
    assert (done.returncode, done.stdout) == (0, b"\x00\xffpong")


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    command = [sys.executable, "-m", "kforge.cli", "run", str(EXAMPLES / "sieve.fasm"), "--trace"]
    environment = {**os.environ, "PYTHONPATH": str(SRC)}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # as `| head -1` does
        errors = process.stderr.read()
        status = process.wait(60)
    assert first.split()[:2] == [b"0", b"1"]
    assert errors == b""
    assert status == 141  # 128 + SIGPIPE, as if the signal had ended it


def test_colour_only_on_a_terminal_and_never_under_no_color(tmp_path: Path) -> None:
    source = tmp_path / "divide.fasm"
    source.write_text("DIV r1, r1, r0\n")

    def stderr_of_run(environment: dict[str, str]) -> bytes:
        leader, follower = pty.openpty()
        try:
            kforge_process(
                "run", str(source), stderr=follower, stdout=subprocess.PIPE, env=environment
            )
            return os.read(leader, 4096)
        finally:
            os.close(follower)
            os.close(leader)

    coloured = stderr_of_run({"TERM": "xterm"})
    assert ANSI.search(coloured.decode()) and b"FAULTED" in coloured
    plain = stderr_of_run({"TERM": "xterm", "NO_COLOR": "1"})
    assert not ANSI.search(plain.decode()) and b"FAULTED" in plain
    piped = kforge_process("run", str(source), env={"TERM": "xterm"})
    assert not ANSI.search(piped.stderr.decode()) and b"FAULTED" in piped.stderr


def test_a_busy_port_is_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = kforge_process("serve", "--port", str(port), "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.count(b"\n") == 1
    assert f"127.0.0.1:{port}".encode() in done.stderr and b"in use" in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_port_out_of_range_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--port", "99999"]) == 2
    assert "port 99999 is outside 0..65535" in capsys.readouterr().err


def test_times_are_shown_as_dates_not_epoch_milliseconds() -> None:
    assert format_time(0) == "1970-01-01T00:00:00Z"
    assert format_time(1_795_514_438_123) == "2026-11-24T10:00:38Z"


COMMAND_WORDS = st.sampled_from(
    [
        "link", "prove", "verify", "keys", "registry", "sandbox", "cache", "asm", "disasm",
        "propose", "show", "log", "check", "export", "keygen", "create", "status", "result",
        "output", "kill", "list", "info", "clear", "-o", "-", "--json", "--pem", "--version",
        "--dir", "--name", "--agent-key", "--public-key", "--file", "-f", "--ticks", "0", "1",
        "abc", "0" * 64, "x", "", "HALT.fasm", "BAD.fasm", "missing.fasm", "USE.fasm",
    ]
)  # fmt: skip
SCRATCH = Path(__file__).parent / "conformance"
FILES = {
    "HALT.fasm": str(SCRATCH / "halt_only.fasm"),
    "BAD.fasm": str(SCRATCH / "asm_bad_register.fasm"),
    "USE.fasm": str(EXAMPLES / "lib" / "use_gcd.fasm"),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(COMMAND_WORDS, min_size=1, max_size=6))
def test_no_command_line_of_any_command_prints_a_traceback(words: list[str]) -> None:
    argv = [FILES.get(word, word) for word in words]
    if "-o" in argv or "--dir" in argv or "clear" in argv:  # never write outside the data dir
        argv = [w for w in argv if w not in ("-o", "--dir", "clear")]
    with tempfile.TemporaryDirectory() as data_dir:
        previous = os.environ.get("KFORGE_DATA_DIR")
        os.environ["KFORGE_DATA_DIR"] = data_dir
        here = os.getcwd()
        os.chdir(data_dir)  # a path a command writes (say, a key) stays in the temporary dir
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(argv)
        finally:
            os.chdir(here)
            if previous is None:
                del os.environ["KFORGE_DATA_DIR"]
            else:
                os.environ["KFORGE_DATA_DIR"] = previous
    assert status in (0, 1, 2), (argv, status)
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), argv
    if status == 2:
        assert out.getvalue() == "", argv
        assert err.getvalue().count("\n") == 1, (argv, err.getvalue())
