"""A new user's first hour, scripted: the installed ``kforge`` command, run as a shell would.

Every step is a real process of the ``kforge`` script in this environment, with its
own data directory: usage and version, programs whose output comes out as they
wrote it, one-line errors that name what and where, sandboxes named by a prefix of
their id, the registry's log in dates, a server that says its port is taken and
sends a browser at ``/`` to the dashboard.  (How fast the command starts is
reported by ``make bench``, ``benchmarks/bench_cli.py``.)
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kforge import __version__
from test_sandbox_cli import TWICE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
KFORGE = Path(sys.executable).with_name("kforge")
EPOCH_MILLISECONDS = re.compile(r"\b1[5-9]\d{11}\b")

STDERR_TOO = """\
.data
out:    .ascii "to stdout\\n"
err:    .ascii "to stderr\\n"
.code
        LI   r1, out
        LI   r2, 10
        SEND 0, r1, r2
        LI   r1, err
        SEND 1, r1, r2
        HALT
"""


class Shell:
    """Runs ``kforge`` in a scratch folder with its own data directory and no colour."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.environment = {
            **{key: value for key, value in os.environ.items() if key != "KFORGE_DATA_DIR"},
            "KFORGE_DATA_DIR": str(folder / "data"),
            "NO_COLOR": "1",
        }

    def __call__(
        self, *argv: str, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(KFORGE), *argv],
            input=input,
            capture_output=True,
            cwd=self.folder,
            env=self.environment,
            timeout=60,
            check=False,
        )

    def write(self, name: str, text: str) -> str:
        (self.folder / name).write_text(text)
        return name


@pytest.fixture
def kforge(tmp_path: Path) -> Shell:
    assert KFORGE.exists(), f"the kforge command is not installed in this environment ({KFORGE})"
    return Shell(tmp_path)


def one_line_error(done: subprocess.CompletedProcess[bytes], *fragments: str) -> str:
    """The error of a command that failed as it should: nothing on stdout, one line, exit 2."""
    message = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b""), message
    assert message.startswith("kforge: ") and message.count("\n") == 1, message
    assert "Traceback" not in message and "b'" not in message and "None" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def test_first_look(kforge: Shell) -> None:
    done = kforge()
    assert done.returncode == 0 and done.stdout.startswith(b"usage: kforge")
    for command in (b"run", b"asm", b"sandbox", b"serve", b"cache"):
        assert command in done.stdout
    assert kforge("--version").stdout == f"kforge {__version__}\n".encode()
    help_text = kforge("run", "--help").stdout.decode()
    assert "(default: 1000000)" in help_text and "(default: auto)" in help_text


def test_programs_write_their_output_as_it_is(kforge: Shell) -> None:
    done = kforge("run", str(EXAMPLES / "hello.fasm"))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"Hello, Forge!\n", b"")
    done = kforge("run", str(EXAMPLES / "echo.fasm"), "--input", "ping")
    assert (done.returncode, done.stdout) == (0, b"ping")
    done = kforge("run", kforge.write("both.fasm", STDERR_TOO))
    assert (done.stdout, done.stderr) == (b"to stdout\n", b"to stderr\n")
    summary = kforge("run", str(EXAMPLES / "hello.fasm"), "--summary").stdout.decode()
    assert "HALTED" in summary and "Hello, Forge!" in summary
    json_line = kforge("run", str(EXAMPLES / "hello.fasm"), "--json").stdout.decode()
    assert '"output_text": "Hello, Forge!\\n"' in json_line


def test_a_fault_is_one_line_after_the_output_and_exit_1(kforge: Shell) -> None:
    done = kforge("run", kforge.write("divide.fasm", "LI r1, 7\nDIV r2, r1, r0\nHALT\n"))
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == (
        b"kforge: FAULTED: DIVIDE_BY_ZERO at pc 1 (DIV r2, r1, r0) after 3 ticks\n"
    )


def test_assembling_to_stdout_and_running_from_stdin(kforge: Shell) -> None:
    program = kforge("asm", str(EXAMPLES / "hello.fasm"), "-o", "-")
    assert program.returncode == 0 and program.stdout.startswith(b"FRGP")
    done = kforge("run", "-", input=program.stdout)
    assert done.stdout == b"Hello, Forge!\n"


def test_a_trace_piped_into_head_ends_quietly(kforge: Shell) -> None:
    with subprocess.Popen(
        [str(KFORGE), "run", str(EXAMPLES / "sieve.fasm"), "--trace"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=kforge.environment,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().split()[:2] == [b"0", b"1"]
        process.stdout.close()
        assert process.stderr.read() == b""
        assert process.wait(60) == 141


def test_every_mistake_is_one_line_naming_what_and_where(kforge: Shell) -> None:
    one_line_error(kforge("run", "missing.fasm"), "missing.fasm: cannot read")
    broken = kforge.write("broken.fasm", "LI r1, 7\nADD r1, r2\n")
    one_line_error(kforge("run", broken), "broken.fasm:2:11:")
    one_line_error(kforge("frobnicate"), "invalid choice")
    one_line_error(kforge("run", broken, "--ticks", "lots"), "--ticks", "'lots'")
    gcd = str(EXAMPLES / "lib" / "use_gcd.fasm")
    one_line_error(kforge("run", gcd), "unresolved imports")
    one_line_error(kforge("link", gcd, str(EXAMPLES / "hello.fasm"), "-o", "x"), "'print_str'")
    one_line_error(kforge("sandbox", "status", "zz"), "a prefix of one")


def test_sandboxes_answer_to_a_prefix_of_their_id(kforge: Shell) -> None:
    created = kforge("sandbox", "create", kforge.write("twice.fasm", TWICE), "--input", "one ")
    short = created.stdout.decode().strip()
    assert created.returncode == 0 and re.fullmatch(r"[0-9a-f]{12}", short)
    started = kforge("sandbox", "start", short[:6])
    assert (started.returncode, started.stdout) == (0, b"one ")
    assert b"BLOCKED on channel 2" in started.stderr
    assert kforge("sandbox", "output", short[:6]).stdout == b"one "
    delivered = kforge("sandbox", "deliver", short[:6], "two")
    assert (delivered.stdout, b"HALTED" in delivered.stderr) == (b"two", True)
    listed = kforge("sandbox", "list").stdout.decode()
    assert listed.startswith(short + "  HALTED")


def test_the_registry_log_shows_dates(kforge: Shell) -> None:
    proposed = kforge(
        "registry", "propose", str(EXAMPLES / "registry" / "numlib.fasm"), "--version", "1"
    )
    assert proposed.returncode == 0, proposed.stderr
    log = kforge("registry", "log").stdout.decode()
    assert "numlib@1" in log and not EPOCH_MILLISECONDS.search(log)
    assert re.search(r"\b20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ\b", log)


def test_the_server_says_its_port_is_taken_and_sends_browsers_to_the_dashboard(
    kforge: Shell,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        one_line_error(kforge("serve", "--port", str(port)), f"127.0.0.1:{port}", "in use")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with subprocess.Popen(
        [str(KFORGE), "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=kforge.environment,
        cwd=kforge.folder,
    ) as server:
        try:
            assert server.stdout is not None
            assert (
                server.stdout.readline()
                == f"kforge serve: listening on http://127.0.0.1:{port}\n".encode()
            )
            root = httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=False, timeout=10)
            assert root.status_code in (302, 307) and root.headers["location"] == "/dashboard/"
            page = httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=True, timeout=10)
            assert "Sandboxes" in page.text
        finally:
            server.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 10
            while server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if server.poll() is None:
                server.kill()
        assert server.wait(10) == 0
