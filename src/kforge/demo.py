"""``make demo``: the machine end to end, as a newcomer would try it.

Assembles every example to FRGP bytes, disassembles one, runs them all with
the ``kforge`` command, traces a short one, shows a fault report and the JSON
result, compiles and runs Starlark (its output, a traceback, a compile error, a
profile), times the reference tier against the fast tier, then starts
``kforge serve`` and runs the examples again through a signed client.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kforge.cli import load_program, main
from kforge.machine import Machine
from kforge.terminal import paint
from kforge.tiers import TierRunner

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INPUTS = {"echo": "ping", "reverse": "stressed", "checksum": "Wikipedia"}


def _heading(title: str) -> None:
    print("\n" + paint(f"== {title}", "bold", sys.stdout), flush=True)


def _kforge(*args: str) -> int:
    """Run a ``kforge`` command as typed at a shell, its output shown as the shell would."""
    print(f"$ kforge {shlex.join(args)}", flush=True)
    raw = io.BytesIO()
    captured = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        status = main(list(args))  # both streams, in the order the command wrote them
    output = raw.getvalue()
    sys.stdout.write(output.decode("utf-8", "replace"))
    if output and not output.endswith(b"\n"):
        sys.stdout.write("\n")  # the program printed no newline; the next prompt gets its own line
    sys.stdout.flush()
    return status


def _text(output: bytes) -> str:
    """Program output for one line of the demo: its text, newlines shown as \\n."""
    return output.decode("utf-8", "replace").replace("\n", "\\n")


def _assemble_all(workdir: Path) -> dict[str, Path]:
    _heading("assemble every example to FRGP bytes")
    built = {}
    for source in sorted(EXAMPLES.glob("*.fasm")):
        target = workdir / f"{source.stem}.frgp"
        _kforge("asm", str(source), "-o", str(target))
        program = load_program(str(target))
        print(f"   {source.name:<16} {len(program.code):>3} instructions  id {program.program_id}")
        built[source.stem] = target
    return built


def _run_all(built: dict[str, Path]) -> None:
    _heading("run each example")
    for name, path in built.items():
        extra = ["--input", INPUTS[name]] if name in INPUTS else []
        _kforge("run", str(path), *extra)


def _show_fault(workdir: Path) -> None:
    _heading("a fault: one line on stderr, exit status 1; --summary and --json say more")
    source = workdir / "divide.fasm"
    source.write_text("LI r1, 7\nLI r2, 0\nDIV r3, r1, r2\nHALT\n")
    _kforge("run", str(source))
    _kforge("run", str(source), "--summary")
    _kforge("run", str(source), "--json")
    _heading("an assembly error names file, line and column")
    broken = workdir / "broken.fasm"
    broken.write_text("LI r1, 7\nADD r1, r2\n")
    _kforge("run", str(broken))


def _starlark(workdir: Path) -> None:
    _heading("Starlark: compiled to a Forge program, run like any other")
    hello = EXAMPLES / "hello.star"
    _kforge("run", str(hello))
    _kforge("run", str(hello), "--tier", "fast", "--summary")
    target = workdir / "hello-star.frgp"
    _kforge("compile", str(hello), "-o", str(target))
    program = load_program(str(target))
    print(f"   {target.name}: {len(program.code)} instructions  id {program.program_id}")
    _heading("a Starlark error: a traceback on stderr, exit status 1")
    failing = workdir / "average.star"
    failing.write_text(
        "def average(values):\n"
        "    return sum(values) // len(values)\n"
        "\n"
        "def sum(values):\n"
        "    total = 0\n"
        "    for v in values:\n"
        "        total += v\n"
        "    return total\n"
        "\n"
        "print(average([3, 4, 5]))\n"
        "print(average([]))\n"
    )
    _kforge("run", str(failing))
    _heading("a Starlark compile error names file, line and column; exit status 2")
    broken = workdir / "broken.star"
    broken.write_text("def f(x):\n    return x +\n")
    _kforge("run", str(broken))
    _heading("where the ticks go, by Starlark function and line")
    _kforge("run", str(hello), "--profile")


def _compare_tiers(built: dict[str, Path]) -> None:
    _heading("the same program on both tiers")
    program = load_program(str(built["sieve"]))
    for tier in ("reference", "fast"):
        machine = Machine.load(program)
        started = time.perf_counter()
        with TierRunner(tier) as runner:
            runner.run(machine)
        elapsed = time.perf_counter() - started
        rate = machine.ticks_used / elapsed / 1e6
        print(
            f"   {tier:<9} {machine.state.value} {_text(bytes(machine.stdout))} "
            f"{machine.ticks_used} ticks in {elapsed * 1e3:.1f} ms ({rate:.1f} M ticks/s)"
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until_serving(url: str, server: subprocess.Popen[str], seconds: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"kforge serve exited with status {server.returncode}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"kforge serve did not answer at {url} within {seconds:.0f} s")


async def _scripted_session(url: str, built: dict[str, Path]) -> None:
    from kforge.client import Client
    from kforge.engine import CreateSandbox
    from kforge.server.signing import AgentKey

    async with Client(url, AgentKey.generate()) as engine:
        print(f"   agent {engine.agent_id.hex[:16]}… signed in")
        for name, path in built.items():
            code = await engine.put_program(load_program(str(path)), name=path.stem)
            request = CreateSandbox(
                engine.agent_id, code, 65_536, 1_000_000, input=INPUTS.get(name, "").encode()
            )
            sandbox = await engine.create_sandbox(request)
            await engine.exec_start(sandbox)
            result = await engine.wait(sandbox)
            print(
                f"   {name:<10} sandbox {sandbox.hex[:12]}… {result.state.value:<8} "
                f"{result.ticks_used:>7} ticks  output {_text(result.output)}"
            )


def _serve_and_script(workdir: Path, built: dict[str, Path]) -> None:
    _heading("kforge serve: the engine over HTTP, driven by a signed client")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "kforge.cli",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(workdir / "data"),
    ]
    print(f"$ kforge serve --port {port} --data-dir {workdir / 'data'}", flush=True)
    log_path = workdir / "serve.log"
    with (
        log_path.open("w") as log,
        subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True) as server,
    ):
        try:
            _wait_until_serving(url, server)
            print("".join(f"   | {line}" for line in log_path.read_text().splitlines(True)), end="")
            asyncio.run(_scripted_session(url, built))
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def run_demo() -> None:
    with tempfile.TemporaryDirectory(prefix="kforge-demo-") as tmp:
        workdir = Path(tmp)
        built = _assemble_all(workdir)
        _heading("disassemble hello.frgp")
        _kforge("disasm", str(built["hello"]))
        _run_all(built)
        _heading("trace factorial: pc, ticks, instruction, registers it changed (first lines)")
        print(f"$ kforge run {built['factorial']} --trace | head -12", flush=True)
        _print_trace_head(built["factorial"], 12)
        _show_fault(workdir)
        _starlark(workdir)
        _compare_tiers(built)
        _serve_and_script(workdir, built)
    print("\ndone.")


def _print_trace_head(path: Path, lines: int) -> None:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        main(["run", str(path), "--trace"])
    print("\n".join(buffer.getvalue().splitlines()[:lines]))
    print("   …")


if __name__ == "__main__":
    run_demo()
