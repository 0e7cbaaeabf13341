"""The ``kforge`` command: assemble, disassemble, run and trace Forge programs.

``kforge run`` behaves like ``python prog.py``: the program's stdout (channel 0)
goes to stdout and its stderr (channel 1) to stderr, byte for byte; the exit
status is 0 when the machine HALTED and 1 when it FAULTED or BLOCKED (then one
line on stderr says what happened).  ``--summary`` shows a readable report
instead, ``--json`` one JSON object.  Every error is one line on stderr and
exit status 2.

Start-up is kept short: this module and the command modules import only what
building the parser needs; each command imports the rest when it runs.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from kforge import __version__
from kforge.cli import cache as cache_cli
from kforge.cli import cluster as cluster_cli
from kforge.cli import link as link_cli
from kforge.cli import proofs as proofs_cli
from kforge.cli import registry as registry_cli
from kforge.cli import sandbox as sandbox_cli
from kforge.cli import server as server_cli
from kforge.cli import starlark as starlark_cli
from kforge.cli.options import (
    PROGRAM_HELP,
    CliError,
    Parser,
    add_machine_options,
    load_program,
    read_input,
    show_help,
    write_bytes,
    write_output,
)
from kforge.core import ForgeError
from kforge.terminal import STATE_STYLES, paint

if TYPE_CHECKING:
    from kforge.machine import Machine

__all__ = ["CliError", "load_program", "main", "result_json"]

#: Ticks a run spends in the interpreter before the fast tier is even loaded: a
#: short program has finished by then, and never pays for importing wasmtime.
_INTERPRETED_FIRST_TICKS: Final = 20_000
#: Ticks between two copies of new output to the terminal while a program runs.
_SLICE_TICKS: Final = 1_000_000
#: Set (to anything) to see the traceback of an internal error instead of its one line.
TRACEBACK_ENVIRONMENT: Final = "KFORGE_TRACEBACK"
#: 128 + SIGPIPE: the status of a process that wrote to a pipe nobody reads any more.
_BROKEN_PIPE_STATUS: Final = 141


def _text_or_none(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


#: How much of a large output is converted at a time when it is printed (its JSON text may
#: take six times as much: a control character is written as a six-character escape).
_CHUNK: Final = 1 << 16
#: How much of the output a summary shows.
_SUMMARY_OUTPUT: Final = 64 * 1024


def _chunks(data: bytes | bytearray | memoryview) -> Iterator[memoryview]:
    view = memoryview(data)
    for start in range(0, len(view), _CHUNK):
        yield view[start : start + _CHUNK]


def _is_utf8(data: bytes | bytearray) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for chunk in _chunks(data):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _json_hex(data: bytes | bytearray) -> Iterator[str]:
    yield '"'
    for chunk in _chunks(data):
        yield chunk.hex()
    yield '"'


def _json_text(data: bytes | bytearray) -> Iterator[str]:
    """``data`` as a JSON string (as ``json.dumps`` writes it), or null when not UTF-8."""
    if not _is_utf8(data):
        yield "null"
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    yield '"'
    for chunk in _chunks(data):
        yield json.dumps(decoder.decode(chunk))[1:-1]
    yield json.dumps(decoder.decode(b"", final=True))[1:-1] + '"'


def write_result_json(machine: Machine, stream: TextIO) -> None:
    """Write :func:`result_json` of ``machine`` to ``stream`` as ``json.dumps`` would, a
    piece at a time: the output and stderr are converted 64 KiB at a time, never
    copied whole (a run's output may be as large as its memory quota)."""
    fields = result_json(machine, with_streams=False)
    streamed = {
        "output_hex": lambda: _json_hex(machine.stdout),
        "stderr_hex": lambda: _json_hex(machine.stderr),
        "output_text": lambda: _json_text(machine.stdout),
        "stderr_text": lambda: _json_text(machine.stderr),
    }
    stream.write("{")
    for index, (key, value) in enumerate(fields.items()):
        stream.write((", " if index else "") + json.dumps(key) + ": ")
        if key in streamed:
            for piece in streamed[key]():
                stream.write(piece)
        else:
            stream.write(json.dumps(value))
    stream.write("}\n")


def result_json(machine: Machine, *, with_streams: bool = True) -> dict[str, Any]:
    """The result object of ``kforge run --json``.

    The keys up to ``flags`` are the specification's (§9); ``output_text`` and
    ``stderr_text`` repeat the bytes as text when they are valid UTF-8, else null.
    ``with_streams=False`` leaves those four values ``None`` (keys and order kept)
    for :func:`write_result_json`, which writes them a piece at a time.
    """
    flags = machine.flags
    output, stderr = (bytes(machine.stdout), bytes(machine.stderr)) if with_streams else (b"", b"")
    return {
        "state": machine.state.value,
        "ticks_used": machine.ticks_used,
        "ticks_remaining": machine.ticks_remaining,
        "fault": machine.fault.name if machine.fault is not None else None,
        "fault_detail": machine.fault_detail,
        "pc": machine.pc,
        "output_hex": output.hex() if with_streams else None,
        "stderr_hex": stderr.hex() if with_streams else None,
        "registers": {f"r{i}": value for i, value in enumerate(machine.registers) if value},
        "flags": {
            "zero": flags.zero,
            "carry": flags.carry,
            "overflow": flags.overflow,
            "halt": flags.halt,
        },
        "output_text": _text_or_none(output) if with_streams else None,
        "stderr_text": _text_or_none(stderr) if with_streams else None,
    }


def _build_parser() -> Parser:
    parser = Parser(
        prog="kforge",
        description="Forge machine tools: assemble, run, trace, prove, link, serve.",
        epilog="Run 'kforge COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"kforge {__version__}")
    parser.set_defaults(handler=lambda args: show_help(parser))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    asm = commands.add_parser("asm", help="assemble a .fasm file to FRGP bytes")
    asm.add_argument("file", help="assembly text (- for stdin)")
    asm.add_argument(
        "-o", "--output", required=True, help="where to write the FRGP bytes (- for stdout)"
    )
    asm.set_defaults(handler=_command_asm)

    dis = commands.add_parser("disasm", help="disassemble FRGP bytes (or assembly) to text")
    dis.add_argument("file", help=f"{PROGRAM_HELP} (- for stdin)")
    dis.set_defaults(handler=_command_disasm)

    run = commands.add_parser(
        "run",
        help="run a program: its stdout and stderr as they are",
        description="Run a program. Its stdout (channel 0) goes to stdout and its stderr "
        "(channel 1) to stderr, unchanged; exit status 0 when it halted, 1 when it faulted "
        "or blocked (then one line on stderr says what happened), 2 when it could not run.",
    )
    run.add_argument("file", help=f"{PROGRAM_HELP} (- for stdin)")
    report = run.add_mutually_exclusive_group()
    report.add_argument("--json", action="store_true", help="print the result as one JSON object")
    report.add_argument(
        "-v",
        "--summary",
        action="store_true",
        help="print a readable report (output, state, ticks, fault, registers) instead",
    )
    run.add_argument(
        "--trace",
        action="store_true",
        help="print each executed instruction first, with its source line when the program "
        "has one (on stderr with --json)",
    )
    run.add_argument(
        "--profile",
        action="store_true",
        help="count ticks per source function and line (on the reference tier) and print "
        "the table on stderr at the end",
    )
    add_machine_options(run)
    run.set_defaults(handler=_command_run)

    proofs_cli.add_commands(commands)
    link_cli.add_commands(commands)
    registry_cli.add_commands(commands)
    server_cli.add_commands(commands)
    cluster_cli.add_commands(commands)
    sandbox_cli.add_commands(commands)
    cache_cli.add_commands(commands)
    starlark_cli.add_commands(commands)
    return parser


def _instruction_at(machine: Machine, pc: int) -> str:
    from kforge.disasm import format_instruction

    return format_instruction(machine.code[pc]) if pc < len(machine.code) else "outside the code"


def _trace(machine: Machine, out: TextIO) -> None:
    """Step the machine, printing pc, ticks after, the instruction and changed registers;
    for a program with a source map, a line naming the source position each time the
    position changes."""
    from kforge.debuginfo import source_location
    from kforge.machine import MachineState

    shown = None
    while machine.state in (MachineState.READY, MachineState.RUNNING):
        pc = machine.pc
        where = source_location(machine.program, pc)
        if where is not None and where != shown:
            out.write(f"# {where}\n")
            shown = where
        before = list(machine.registers)
        machine.step()
        text = _instruction_at(machine, pc)
        changes = " ".join(
            f"r{i}={value}"
            for i, (old, value) in enumerate(zip(before, machine.registers, strict=True))
            if old != value
        )
        out.write(f"{pc:>6}  {machine.ticks_used:>10}  {text:<28} {changes}".rstrip() + "\n")


class _OutputCopier:
    """Copies what a machine wrote on stdout and stderr to ours, as it grows."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.stdout_at = 0
        self.stderr_at = 0

    def __call__(self) -> None:
        stdout, stderr = self.machine.stdout, self.machine.stderr
        if len(stdout) > self.stdout_at:
            write_bytes(sys.stdout, memoryview(stdout)[self.stdout_at :])
            self.stdout_at = len(stdout)
        if len(stderr) > self.stderr_at:
            write_bytes(sys.stderr, memoryview(stderr)[self.stderr_at :])
            self.stderr_at = len(stderr)


def _nothing() -> None:
    """What a run copies as it goes when its output is reported at the end instead."""


def _run_to_stop(machine: Machine, tier: str, after_slice: Callable[[], None]) -> None:
    """Run until the machine halts, faults or blocks, calling ``after_slice`` now and then."""
    from kforge.machine import MachineState
    from kforge.tiers import TierRunner

    running = (MachineState.READY, MachineState.RUNNING)
    if tier == "auto":
        machine.run(_INTERPRETED_FIRST_TICKS)
        after_slice()
    if machine.state not in running:
        return
    with TierRunner(tier) as runner:
        while machine.state in running:
            runner.run(machine, _SLICE_TICKS)
            after_slice()


def _stop_line(machine: Machine) -> str | None:
    """One line saying why a machine that did not halt stopped; ``None`` when it halted."""
    from kforge.debuginfo import source_frames
    from kforge.isa import Channel, FaultCode

    where = _instruction_at(machine, machine.pc)
    frames = source_frames(machine)
    if frames:  # a compiled program: say where in its source
        where = (
            f"{where}; {frames[0].file}:{frames[0].line}:{frames[0].column} in {frames[0].function}"
        )
    after = f"at pc {machine.pc} ({where}) after {machine.ticks_used} ticks"
    if machine.fault is not None:
        detail = f" {machine.fault_detail}" if machine.fault_detail is not None else ""
        hint = "; give more with --ticks" if machine.fault is FaultCode.OUT_OF_TICKS else ""
        return f"FAULTED: {machine.fault.name}{detail} {after}{hint}"
    if machine.blocked_channel is not None:
        channel = machine.blocked_channel
        hint = (
            "; a run delivers one stdin message (--input), 'kforge sandbox deliver' more"
            if channel == Channel.STDIN
            else ""
        )
        return f"BLOCKED: waiting for a message on channel {channel} {after}{hint}"
    return None


def _summary(machine: Machine, out: TextIO) -> str:
    from kforge.machine import MachineState

    lines = []
    output = bytes(machine.stdout[:_SUMMARY_OUTPUT])
    if output:
        text = output.decode("utf-8", "replace")
        lines.append("output:")
        lines += [f"  {line}" for line in text.splitlines() or [""]]
        more = len(machine.stdout) - len(output)
        if more:
            lines.append(f"  … and {more} bytes more (the whole output: without --summary)")
    else:
        lines.append("output: (none)")
    state = paint(machine.state.value, STATE_STYLES.get(machine.state.value), out)
    lines.append(
        f"state:  {state} at pc {machine.pc} after {machine.ticks_used} ticks "
        f"({machine.ticks_remaining} of {machine.tick_budget} left)"
    )
    if machine.fault is not None:
        detail = f" (user code {machine.fault_detail})" if machine.fault_detail is not None else ""
        where = _instruction_at(machine, machine.pc)
        lines.append(f"fault:  {machine.fault.name}{detail} at pc {machine.pc}: {where}")
    if machine.state is MachineState.BLOCKED:
        lines.append(f"blocked on channel {machine.blocked_channel}")
    registers = [f"r{i}={v}" for i, v in enumerate(machine.registers) if v]
    lines.append("registers: " + (" ".join(registers) or "(all zero)"))
    flags = machine.flags
    set_flags = [name for name in ("zero", "carry", "overflow", "halt") if getattr(flags, name)]
    lines.append("flags:  " + (" ".join(set_flags) or "(none)"))
    if machine.stderr:
        shown = bytes(machine.stderr[:_SUMMARY_OUTPUT])
        more = len(machine.stderr) - len(shown)
        tail = f" … and {more} bytes more" if more else ""
        lines.append("stderr: " + shown.decode("utf-8", "replace").rstrip() + tail)
    return "\n".join(lines)


def _command_asm(args: argparse.Namespace) -> int:
    write_output(args.output, load_program(args.file).encoded, "FRGP bytes")
    return 0


def _command_disasm(args: argparse.Namespace) -> int:
    from kforge.disasm import disassemble

    sys.stdout.write(disassemble(load_program(args.file)))
    return 0


def _command_run(args: argparse.Namespace) -> int:
    from kforge.machine import Machine, MachineState

    program = load_program(args.file, memory_quota=args.memory)
    machine = Machine.load(
        program,
        memory_quota=args.memory,
        tick_budget=args.ticks,
        input=read_input(args),
        environment=dict(args.env),
        grants=args.grant,
    )
    raw = not (args.json or args.summary)
    copy_output: Callable[[], None] = _OutputCopier(machine) if raw else _nothing
    if args.trace:
        _trace(machine, sys.stderr if args.json else sys.stdout)
        copy_output()
    elif args.profile:
        from kforge.profiler import format_profile, profile

        counts = profile(machine)
        copy_output()
        sys.stderr.write(format_profile(counts) + "\n")
    else:
        _run_to_stop(machine, args.tier, copy_output)
    if args.json:
        write_result_json(machine, sys.stdout)
    elif args.summary:
        sys.stdout.write(_summary(machine, sys.stdout) + "\n")
    else:
        line = _stop_line(machine)
        if line is not None:
            _say(line)
    return 0 if machine.state is MachineState.HALTED else 1


def _error_name(error: ForgeError) -> str:
    """The seed's name for an error (``InvalidProgram`` for an assembly error, …)."""
    for cls in type(error).__mro__:
        if cls.__module__ == "kforge.core" and cls is not ForgeError:
            return cls.__name__
    return type(error).__name__


def _say(message: str) -> None:
    """One line on stderr, after ``kforge:``."""
    prefix = paint("kforge:", "bold red", sys.stderr)
    sys.stderr.write(f"{prefix} " + message.replace("\n", " ") + "\n")
    sys.stderr.flush()


def _fail(message: str) -> int:
    """One line on stderr, exit status 2."""
    _say(message)
    return 2


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (captured in a test)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kforge`` command; returns the exit status."""
    try:
        parser = _build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help and --version print, then exit
            return done.code if isinstance(done.code, int) else 0
        status: int = args.handler(args)
        return status
    except CliError as error:
        return _fail(str(error))
    except ForgeError as error:
        return _fail(f"{_error_name(error)}: {error}")
    except MemoryError:
        return _fail("MemoryError: the host ran out of memory for this request")
    except BrokenPipeError:
        # The reader went away (``kforge run --trace | head``): stop quietly, as a
        # process killed by SIGPIPE would.
        _quiet_stdout()
        return _BROKEN_PIPE_STATUS
    except KeyboardInterrupt:
        sys.stderr.write("kforge: interrupted\n")
        return 130
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        return _fail(f"{where}{error.strerror or error}")
    except Exception as error:  # a bug: still one line, and the way to see where it is
        if os.environ.get(TRACEBACK_ENVIRONMENT):
            raise
        return _fail(
            f"internal error: {type(error).__name__}: {error} "
            f"({TRACEBACK_ENVIRONMENT}=1 shows where; please report it)"
        )


if __name__ == "__main__":  # python -m kforge.cli.main
    raise SystemExit(main())
