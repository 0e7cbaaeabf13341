"""``kforge sandbox``: drive sandboxes of a durable engine embedded in the command.

Each invocation opens the engine on the data directory (``--data-dir``, else
``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``), does one thing, and
closes it; the engine's journal and snapshots carry sandboxes from one
invocation to the next.  The acting agent is the node key's identity.

    kforge sandbox create FILE [--ticks N --memory B --input T --grant CH --env K=V]
    kforge sandbox start ID          # run until it halts, faults or blocks
    kforge sandbox deliver ID TEXT   # input on stdin; run on until it stops or blocks again
    kforge sandbox status ID | result ID | kill ID | list
    kforge sandbox run FILE [...]    # create + start in one

Exit status: 0 when the command did its job (``result`` and ``run``: the
sandbox HALTED), 1 when ``result``/``run`` found it FAULTED, KILLED, out of
time or BLOCKED, 2 for errors (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from kforge.cli.options import CliError, add_machine_options, load_program, read_input
from kforge.core import AgentId, Hash256
from kforge.engine import CreateSandbox, Engine, ExecResult, SandboxInfo, SandboxState
from kforge.proofs.keys import load_or_create_key

__all__ = ["add_commands"]

_T = TypeVar("_T")
_POLL_SECONDS: Final = 0.002
_SETTLED: Final = frozenset({SandboxState.BLOCKED, SandboxState.READY})


def add_commands(subparsers: Any) -> None:
    """Add ``sandbox`` and its actions; each action parser sets ``handler``."""
    sandbox = subparsers.add_parser("sandbox", help="drive sandboxes of an embedded engine")
    actions = sandbox.add_subparsers(dest="action", required=True, parser_class=type(sandbox))

    def action(name: str, help_text: str, handler: Callable[..., Awaitable[int]]) -> Any:
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("--data-dir", help="the engine's data directory")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.set_defaults(handler=lambda args: _run(handler, args))
        return parser

    create = action("create", "create a sandbox from a program; prints its id", _create)
    create.add_argument("file")
    add_machine_options(create)
    create.add_argument("--persistent", action="store_true", help="survives across cycles")

    run = action("run", "create a sandbox and run it until it stops or blocks", _create_and_run)
    run.add_argument("file")
    add_machine_options(run)

    for name, help_text, handler in (
        ("start", "start a sandbox; wait until it stops or blocks", _start),
        ("status", "print a sandbox's state and counters", _status),
        ("result", "print a sandbox's result once it has stopped", _result),
        ("kill", "kill a sandbox", _kill),
    ):
        action(name, help_text, handler).add_argument("sandbox", type=_sandbox_id)

    deliver = action("deliver", "give a sandbox input on stdin and let it run on", _deliver)
    deliver.add_argument("sandbox", type=_sandbox_id)
    deliver.add_argument("text", nargs="?", default=None, help="the message (UTF-8)")
    deliver.add_argument("--file", help="take the message from this file")

    action("list", "list this agent's sandboxes", _list)


def _sandbox_id(text: str) -> Hash256:
    try:
        return Hash256.from_hex(text.strip().lower())
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _run(
    handler: Callable[[Engine, AgentId, argparse.Namespace], Awaitable[int]], args: Any
) -> int:
    async def main() -> int:
        owner = AgentId(load_or_create_key(args.data_dir).public_raw)
        async with Engine(data_dir=args.data_dir, durable=True) as engine:
            return await handler(engine, owner, args)

    return asyncio.run(main())


async def _settle(engine: Engine, sandbox: Hash256, owner: AgentId) -> SandboxInfo:
    """Wait until the sandbox has stopped, or waits for input."""
    while True:
        info = await engine.sandbox_status(sandbox, owner)
        if info.state.is_final or info.state in _SETTLED:
            return info
        await asyncio.sleep(_POLL_SECONDS)


def _info_values(info: SandboxInfo) -> dict[str, Any]:
    return {
        "sandbox": info.id.hex,
        "state": info.state.value,
        "ticks_used": info.ticks_used,
        "ticks_remaining": info.ticks_remaining,
        "memory_used": info.memory_used,
        "memory_quota": info.memory_quota,
        "blocked_channel": info.blocked_channel,
    }


def _result_values(result: ExecResult) -> dict[str, Any]:
    return {
        "sandbox": result.sandbox_id.hex,
        "state": result.state.value,
        "ticks_used": result.ticks_used,
        "fault": result.fault.name if result.fault is not None else None,
        "fault_detail": result.fault_detail,
        "output_hex": result.output.hex(),
    }


def _print_info(info: SandboxInfo, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_info_values(info)))
        return
    blocked = f" on channel {info.blocked_channel}" if info.state is SandboxState.BLOCKED else ""
    print(
        f"{info.id.hex}  {info.state.value}{blocked}  "
        f"ticks {info.ticks_used}/{info.ticks_used + info.ticks_remaining}  "
        f"memory {info.memory_used}/{info.memory_quota}"
    )


def _print_result(result: ExecResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_result_values(result)))
        return
    fault = f" {result.fault.name}" if result.fault is not None else ""
    print(f"{result.sandbox_id.hex}  {result.state.value}{fault} after {result.ticks_used} ticks")
    print(
        result.output.decode("utf-8", "replace"), end="" if result.output.endswith(b"\n") else "\n"
    )


async def _report(engine: Engine, sandbox: Hash256, owner: AgentId, as_json: bool) -> int:
    """Print the result of a stopped sandbox (exit 0 when HALTED), else its status (exit 1)."""
    info = await _settle(engine, sandbox, owner)
    if not info.state.is_final:
        _print_info(info, as_json)
        return 1
    result = await engine.wait(sandbox, owner)
    _print_result(result, as_json)
    return 0 if result.state is SandboxState.HALTED else 1


async def _new_sandbox(engine: Engine, owner: AgentId, args: argparse.Namespace) -> Hash256:
    code = engine.vault.put_program(load_program(args.file))
    return await engine.create_sandbox(
        CreateSandbox(
            owner,
            code,
            memory_quota=args.memory,
            tick_budget=args.ticks,
            input=read_input(args),
            environment=dict(args.env),
            persistent=getattr(args, "persistent", False),
            grants=frozenset(args.grant),
        )
    )


async def _create(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    sandbox = await _new_sandbox(engine, owner, args)
    print(json.dumps({"sandbox": sandbox.hex}) if args.json else sandbox.hex)
    return 0


async def _create_and_run(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    sandbox = await _new_sandbox(engine, owner, args)
    await engine.exec_start(sandbox, owner)
    return await _report(engine, sandbox, owner, args.json)


async def _start(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    await engine.exec_start(args.sandbox, owner)
    _print_info(await _settle(engine, args.sandbox, owner), args.json)
    return 0


async def _deliver(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    if (args.text is None) == (args.file is None):
        raise CliError("kforge sandbox deliver: give the message as TEXT or --file, not both")
    data = (
        args.text.encode("utf-8", "surrogateescape")
        if args.file is None
        else read_input(argparse.Namespace(input_file=args.file))
    )
    await engine.deliver(args.sandbox, 2, data, owner)
    _print_info(await _settle(engine, args.sandbox, owner), args.json)
    return 0


async def _status(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    _print_info(await engine.sandbox_status(args.sandbox, owner), args.json)
    return 0


async def _result(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    return await _report(engine, args.sandbox, owner, args.json)


async def _kill(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    await engine.kill_sandbox(args.sandbox, owner)
    _print_info(await engine.sandbox_status(args.sandbox, owner), args.json)
    return 0


async def _list(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    for info in await engine.list_sandboxes(owner=owner):
        _print_info(info, args.json)
    return 0
