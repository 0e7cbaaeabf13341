"""The ``kforge`` command: assemble, disassemble, run and trace Forge programs.

Every error is one line on stderr and exit status 2; a run exits 0 when the
machine HALTED and 1 when it FAULTED or BLOCKED.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from kforge.cli import link as link_cli
from kforge.cli import proofs as proofs_cli
from kforge.cli import registry as registry_cli
from kforge.cli import sandbox as sandbox_cli
from kforge.cli import server as server_cli
from kforge.cli import starlark as starlark_cli
from kforge.cli.options import CliError, add_machine_options, load_program, read_input
from kforge.core import ForgeError
from kforge.disasm import disassemble, format_instruction
from kforge.machine import Machine, MachineState
from kforge.tiers import run_on_tier

__all__ = ["CliError", "load_program", "main", "result_json"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "kforge sandbox status" -> "sandbox status"
        raise CliError(f"{command}: {message}" if command else message)


def result_json(machine: Machine) -> dict[str, Any]:
    """The result object of ``kforge run --json``."""
    flags = machine.flags
    return {
        "state": machine.state.value,
        "ticks_used": machine.ticks_used,
        "ticks_remaining": machine.ticks_remaining,
        "fault": machine.fault.name if machine.fault is not None else None,
        "fault_detail": machine.fault_detail,
        "pc": machine.pc,
        "output_hex": bytes(machine.stdout).hex(),
        "stderr_hex": bytes(machine.stderr).hex(),
        "registers": {f"r{i}": value for i, value in enumerate(machine.registers) if value},
        "flags": {
            "zero": flags.zero,
            "carry": flags.carry,
            "overflow": flags.overflow,
            "halt": flags.halt,
        },
    }


def _build_parser() -> _Parser:
    parser = _Parser(prog="kforge", description="Forge machine tools")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    asm = commands.add_parser("asm", help="assemble a .fasm file to FRGP bytes")
    asm.add_argument("file")
    asm.add_argument("-o", "--output", required=True, help="where to write the FRGP bytes")

    dis = commands.add_parser("disasm", help="disassemble FRGP bytes (or assembly) to text")
    dis.add_argument("file")

    run = commands.add_parser("run", help="run a program and report its result")
    run.add_argument("file")
    run.add_argument("--json", action="store_true", help="print the result as one JSON object")
    run.add_argument("--trace", action="store_true", help="print each executed instruction")
    add_machine_options(run)
    proofs_cli.add_commands(commands)
    link_cli.add_commands(commands)
    registry_cli.add_commands(commands)
    server_cli.add_commands(commands)
    sandbox_cli.add_commands(commands)
    starlark_cli.add_commands(commands)
    return parser


def _trace(machine: Machine, out: TextIO) -> None:
    """Step the machine, printing pc, ticks after, the instruction and changed registers."""
    while machine.state in (MachineState.READY, MachineState.RUNNING):
        pc = machine.pc
        before = list(machine.registers)
        machine.step()
        if pc < len(machine.code):
            text = format_instruction(machine.code[pc])
        else:
            text = "<outside the code>"
        changes = " ".join(
            f"r{i}={value}"
            for i, (old, value) in enumerate(zip(before, machine.registers, strict=True))
            if old != value
        )
        out.write(f"{pc:>6}  {machine.ticks_used:>10}  {text:<28} {changes}".rstrip() + "\n")


def _summary(machine: Machine) -> str:
    lines = []
    output = bytes(machine.stdout)
    if output:
        text = output.decode("utf-8", "replace")
        lines.append("output:")
        lines += [f"  {line}" for line in text.splitlines() or [""]]
    else:
        lines.append("output: (none)")
    lines.append(
        f"state:  {machine.state.value} at pc {machine.pc} after {machine.ticks_used} ticks "
        f"({machine.ticks_remaining} of {machine.tick_budget} left)"
    )
    if machine.fault is not None:
        where = (
            format_instruction(machine.code[machine.pc])
            if machine.pc < len(machine.code)
            else "outside the code"
        )
        detail = f" (user code {machine.fault_detail})" if machine.fault_detail is not None else ""
        lines.append(f"fault:  {machine.fault.name}{detail} at pc {machine.pc}: {where}")
    if machine.state is MachineState.BLOCKED:
        lines.append(f"blocked on channel {machine.blocked_channel}")
    registers = [f"r{i}={v}" for i, v in enumerate(machine.registers) if v]
    lines.append("registers: " + (" ".join(registers) or "(all zero)"))
    flags = machine.flags
    set_flags = [name for name in ("zero", "carry", "overflow", "halt") if getattr(flags, name)]
    lines.append("flags:  " + (" ".join(set_flags) or "(none)"))
    if machine.stderr:
        lines.append("stderr: " + bytes(machine.stderr).decode("utf-8", "replace").rstrip())
    return "\n".join(lines)


def _command_asm(args: argparse.Namespace) -> int:
    program = load_program(args.file)
    try:
        Path(args.output).write_bytes(program.encoded)
    except OSError as error:
        raise CliError(f"{args.output}: cannot write: {error.strerror or error}") from None
    return 0


def _command_disasm(args: argparse.Namespace) -> int:
    sys.stdout.write(disassemble(load_program(args.file)))
    return 0


def _command_run(args: argparse.Namespace) -> int:
    program = load_program(args.file, memory_quota=args.memory)
    machine = Machine.load(
        program,
        memory_quota=args.memory,
        tick_budget=args.ticks,
        input=read_input(args),
        environment=dict(args.env),
        grants=args.grant,
    )
    if args.trace:
        _trace(machine, sys.stderr if args.json else sys.stdout)
    else:
        run_on_tier(machine, args.tier)
    if args.json:
        sys.stdout.write(json.dumps(result_json(machine)) + "\n")
    else:
        sys.stdout.write(_summary(machine) + "\n")
    return 0 if machine.state is MachineState.HALTED else 1


_COMMANDS = {"asm": _command_asm, "disasm": _command_disasm, "run": _command_run}
_COMMANDS.update(link_cli.COMMANDS)


def _error_name(error: ForgeError) -> str:
    """The seed's name for an error (``InvalidProgram`` for an assembly error, …)."""
    for cls in type(error).__mro__:
        if cls.__module__ == "kforge.core" and cls is not ForgeError:
            return cls.__name__
    return type(error).__name__


def _fail(message: str) -> int:
    """One line on stderr, exit status 2."""
    sys.stderr.write("kforge: " + message.replace("\n", " ") + "\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kforge`` command; returns the exit status."""
    try:
        args = _build_parser().parse_args(argv)
        handler = getattr(args, "handler", None) or _COMMANDS[args.command]
        status: int = handler(args)
        return status
    except CliError as error:
        return _fail(str(error))
    except ForgeError as error:
        return _fail(f"{_error_name(error)}: {error}")
    except MemoryError:
        return _fail("MemoryError: the host ran out of memory for this request")
    except KeyboardInterrupt:
        sys.stderr.write("kforge: interrupted\n")
        return 130


if __name__ == "__main__":  # python -m kforge.cli.main
    raise SystemExit(main())
