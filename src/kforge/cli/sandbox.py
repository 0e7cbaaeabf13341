"""``kforge sandbox``: drive sandboxes of a durable engine embedded in the command.

Each invocation opens the engine on the data directory (``--data-dir``, else
``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``), does one thing, and
closes it; the engine's journal and snapshots carry sandboxes from one
invocation to the next.  The acting agent is the node key's identity.

    kforge sandbox create FILE [--ticks N --memory B --input T --grant CH --env K=V]
    kforge sandbox start ID          # run until it halts, faults or blocks
    kforge sandbox deliver ID TEXT   # input on stdin; run on until it stops or blocks again
    kforge sandbox output ID [-f]    # its output so far; -f: and on, until it stops or blocks
    kforge sandbox status ID | result ID | kill ID | list
    kforge sandbox run FILE [...]    # create + start in one

ID is any unique prefix of a sandbox id (ids are printed 12 digits long).
Commands that run a sandbox (``start``, ``deliver``, ``run``) copy its stdout to
stdout as it is written, and ``result`` and ``output`` show what it wrote, byte
for byte; their own line about the sandbox then goes to stderr.  ``--json``
prints objects instead.

Exit status: 0 when the command did its job (``result`` and ``run``: the
sandbox HALTED), 1 when ``result``/``run`` found it FAULTED, KILLED, out of
time or BLOCKED, 2 for errors (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TextIO

from kforge.cli.options import (
    PROGRAM_HELP,
    CliError,
    add_data_dir_option,
    add_machine_options,
    load_program,
    read_input,
    show_help,
    write_bytes,
)
from kforge.terminal import STATE_STYLES, paint

if TYPE_CHECKING:
    from kforge.core import AgentId, Hash256
    from kforge.engine import Engine, ExecResult, SandboxInfo

__all__ = ["SHORT_ID_DIGITS", "add_commands", "short_id"]

#: Digits of a sandbox id shown to people (as git and docker shorten theirs).
SHORT_ID_DIGITS: Final = 12
_POLL_SECONDS: Final = 0.002
#: The most output copied to stdout in one piece.
_COPY_CHUNK: Final = 1 << 20
#: The defaults of ``--memory`` and ``--ticks`` (kforge.cli.options): with a preset, a
#: value equal to its default is taken as not given.
_DEFAULT_MEMORY: Final = 65_536
_DEFAULT_TICKS: Final = 1_000_000
_HEX_PREFIX: Final = re.compile(r"[0-9a-f]{1,64}")

_Action = Callable[["Engine", "AgentId", argparse.Namespace], Awaitable[int]]


def add_commands(subparsers: Any) -> None:
    """Add ``sandbox`` and its actions; each action parser sets ``handler``."""
    sandbox = subparsers.add_parser("sandbox", help="drive sandboxes of an embedded engine")
    sandbox.set_defaults(handler=lambda args: show_help(sandbox))
    actions = sandbox.add_subparsers(dest="action", metavar="ACTION", parser_class=type(sandbox))

    def action(name: str, help_text: str, handler: _Action) -> Any:
        parser = actions.add_parser(name, help=help_text)
        add_data_dir_option(parser, "the engine keeps its sandboxes")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.set_defaults(handler=lambda args: _run(handler, args))
        return parser

    create = action("create", "create a sandbox from a program; prints its id", _create)
    create.add_argument("file", help=PROGRAM_HELP)
    add_machine_options(create)
    _add_preset(create)
    create.add_argument("--persistent", action="store_true", help="survives across cycles")

    run = action("run", "create a sandbox and run it until it stops or blocks", _create_and_run)
    run.add_argument("file", help=PROGRAM_HELP)
    add_machine_options(run)
    _add_preset(run)

    for name, help_text, handler in (
        ("start", "start a sandbox; show its output until it stops or blocks", _start),
        ("status", "print a sandbox's state and counters", _status),
        ("result", "show a sandbox's output and how it stopped (or its state)", _result),
        ("kill", "kill a sandbox", _kill),
    ):
        _sandbox_argument(action(name, help_text, handler))

    output = action("output", "show a sandbox's output so far, live or stopped", _output)
    _sandbox_argument(output)
    output.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep showing new output until the sandbox stops or blocks",
    )

    deliver = action("deliver", "give a sandbox input on stdin and let it run on", _deliver)
    _sandbox_argument(deliver)
    deliver.add_argument("text", nargs="?", default=None, help="the message (UTF-8)")
    deliver.add_argument("--file", help="take the message from this file (- for stdin)")

    action("list", "list this agent's sandboxes", _list)


def _add_preset(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        choices=("minimal", "standard", "generous"),
        help="take the preset's memory, ticks, deadline and grants for those not given "
        "(--memory and --ticks at their defaults count as not given)",
    )


def _sandbox_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sandbox", type=_id_prefix, metavar="ID", help="a unique prefix of its id")


def _id_prefix(text: str) -> str:
    prefix = text.strip().lower()
    if not _HEX_PREFIX.fullmatch(prefix):
        raise argparse.ArgumentTypeError(
            f"expected a sandbox id or a prefix of one (1 to 64 hex digits), got '{text}'"
        )
    return prefix


def short_id(sandbox_id: Hash256) -> str:
    """The id as people see it: its first digits, enough to name it among any few."""
    return sandbox_id.hex[:SHORT_ID_DIGITS]


async def _resolve(engine: Engine, owner: AgentId, prefix: str) -> Hash256:
    """The one sandbox of ``owner`` whose id starts with ``prefix``; a full id is taken as is."""
    from kforge.core import Hash256

    if len(prefix) == 64:
        return Hash256.from_hex(prefix)  # the engine says whether it exists and is ours
    matches = [
        info.id for info in await engine.list_sandboxes(owner) if info.id.hex.startswith(prefix)
    ]
    if not matches:
        raise CliError(f"sandbox {prefix}: no sandbox id starts with {prefix}")
    if len(matches) > 1:
        shown = ", ".join(short_id(match) for match in matches[:5])
        more = ", …" if len(matches) > 5 else ""
        raise CliError(
            f"sandbox {prefix}: {len(matches)} sandbox ids start with {prefix} "
            f"({shown}{more}); give more digits"
        )
    return matches[0]


def _run(handler: _Action, args: Any) -> int:
    import asyncio

    from kforge.core import AgentId
    from kforge.engine import Engine
    from kforge.proofs.keys import load_or_create_key

    async def main() -> int:
        owner = AgentId(load_or_create_key(args.data_dir).public_raw)
        async with Engine(data_dir=args.data_dir, durable=True, standalone=True) as engine:
            if isinstance(getattr(args, "sandbox", None), str):
                args.sandbox = await _resolve(engine, owner, args.sandbox)
            return await handler(engine, owner, args)

    return asyncio.run(main())


class _Follower:
    """Copies a sandbox's new output to stdout while the command waits on it."""

    def __init__(self, engine: Engine, sandbox: Hash256, owner: AgentId, start: int = 0) -> None:
        self.engine, self.sandbox, self.owner = engine, sandbox, owner
        self.offset = start

    @classmethod
    async def from_now(cls, engine: Engine, sandbox: Hash256, owner: AgentId) -> _Follower:
        """A follower of what the sandbox writes from now on."""
        _, length = await engine.output_chunk(sandbox, owner, offset=0, limit=0)
        return cls(engine, sandbox, owner, length)

    async def copy(self) -> None:
        """Copy what was written since the last copy, a piece at a time (never all at once)."""
        while True:
            data, length = await self.engine.output_chunk(
                self.sandbox, self.owner, offset=self.offset, limit=_COPY_CHUNK
            )
            if data:
                write_bytes(sys.stdout, data)
                self.offset += len(data)
            if self.offset >= length or not data:
                return


async def _settle(
    engine: Engine, sandbox: Hash256, owner: AgentId, follower: _Follower | None = None
) -> SandboxInfo:
    """Wait until the sandbox has stopped, or waits for input (copying its output if asked)."""
    import asyncio

    from kforge.engine import SandboxState

    while True:
        info = await engine.sandbox_status(sandbox, owner)
        if follower is not None:
            await follower.copy()
        if info.state.is_final or info.state in (SandboxState.BLOCKED, SandboxState.READY):
            return info
        await asyncio.sleep(_POLL_SECONDS)


def _info_values(info: SandboxInfo) -> dict[str, Any]:
    """The status in the API's JSON form (``kforge.wire``: ids as hex, bytes as ``name_hex``)."""
    from kforge.wire import json_value

    values: dict[str, Any] = json_value(info)
    return values


def _result_values(result: ExecResult) -> dict[str, Any]:
    """The result in the API's JSON form (``fault`` is the code; ``output_hex`` the bytes)."""
    from kforge.wire import json_value

    values: dict[str, Any] = json_value(result)
    return values


def _state_text(state: str, stream: TextIO) -> str:
    return paint(state, STATE_STYLES.get(state), stream)


def _info_line(info: SandboxInfo, stream: TextIO) -> str:
    blocked = f" on channel {info.blocked_channel}" if info.blocked_channel is not None else ""
    return (
        f"{short_id(info.id)}  {_state_text(info.state.value, stream)}{blocked}  "
        f"ticks {info.ticks_used}/{info.ticks_used + info.ticks_remaining}  "
        f"memory {info.memory_used}/{info.memory_quota}"
    )


def _print_info(info: SandboxInfo, as_json: bool) -> None:
    """The sandbox's state on stdout (``status``, ``kill``, ``list``)."""
    print(json.dumps(_info_values(info)) if as_json else _info_line(info, sys.stdout))


def _tell(info: SandboxInfo, as_json: bool) -> None:
    """The sandbox's state after a command that showed its output: on stderr, unless JSON."""
    if as_json:
        print(json.dumps(_info_values(info)))
    else:
        sys.stderr.write(_info_line(info, sys.stderr) + "\n")


def _result_line(result: ExecResult, stream: TextIO) -> str:
    fault = f" {result.fault.name}" if result.fault is not None else ""
    detail = f" {result.fault_detail}" if result.fault_detail is not None else ""
    return (
        f"{short_id(result.sandbox_id)}  {_state_text(result.state.value, stream)}{fault}{detail} "
        f"after {result.ticks_used} ticks"
    )


async def _report(engine: Engine, sandbox: Hash256, owner: AgentId, as_json: bool) -> int:
    """Everything a sandbox wrote (as it writes it, if it runs) and how it ended: exit 0 when
    it HALTED, 1 when it stopped otherwise or has not stopped yet (then: its state so far)."""
    from kforge.engine import SandboxState

    follower = None if as_json else _Follower(engine, sandbox, owner)
    info = await _settle(engine, sandbox, owner, follower)
    if not info.state.is_final:
        _tell(info, as_json)
        return 1
    result = await engine.wait(sandbox, owner)
    if as_json:
        print(json.dumps(_result_values(result)))
    else:
        sys.stderr.write(_result_line(result, sys.stderr) + "\n")
    return 0 if result.state is SandboxState.HALTED else 1


async def _new_sandbox(engine: Engine, owner: AgentId, args: argparse.Namespace) -> Hash256:
    from kforge.engine import PRESETS, CreateSandbox

    preset = getattr(args, "preset", None)
    defaults = {"memory": _DEFAULT_MEMORY, "ticks": _DEFAULT_TICKS}
    given = {
        name: value
        for name, value in (("memory", args.memory), ("ticks", args.ticks))
        if preset is None or value != defaults[name]
    }
    memory = given.get("memory") or (PRESETS[preset].memory_quota if preset else args.memory)
    code = engine.vault.put_program(load_program(args.file, memory_quota=memory))
    return await engine.create_sandbox(
        CreateSandbox(
            owner,
            code,
            memory_quota=given.get("memory"),
            tick_budget=given.get("ticks"),
            preset=preset,
            input=read_input(args),
            environment=dict(args.env),
            persistent=getattr(args, "persistent", False),
            grants=frozenset(args.grant),
        )
    )


async def _create(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    sandbox = await _new_sandbox(engine, owner, args)
    print(json.dumps({"sandbox_id": sandbox.hex}) if args.json else short_id(sandbox))
    return 0


async def _create_and_run(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    sandbox = await _new_sandbox(engine, owner, args)
    await engine.exec_start(sandbox, owner)
    return await _report(engine, sandbox, owner, args.json)


async def _start(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    follower = None if args.json else await _Follower.from_now(engine, args.sandbox, owner)
    await engine.exec_start(args.sandbox, owner)
    _tell(await _settle(engine, args.sandbox, owner, follower), args.json)
    return 0


async def _deliver(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    if (args.text is None) == (args.file is None):
        raise CliError("sandbox deliver: give the message as TEXT or --file, not both")
    data = (
        args.text.encode("utf-8", "surrogateescape")
        if args.file is None
        else read_input(argparse.Namespace(input_file=args.file))
    )
    follower = None if args.json else await _Follower.from_now(engine, args.sandbox, owner)
    await engine.deliver(args.sandbox, 2, data, owner)
    _tell(await _settle(engine, args.sandbox, owner, follower), args.json)
    return 0


async def _output(engine: Engine, owner: AgentId, args: argparse.Namespace) -> int:
    if args.json:
        data = await engine.output(args.sandbox, owner)
        info = await engine.sandbox_status(args.sandbox, owner)
        print(json.dumps({**_info_values(info), "output_hex": data.hex()}))
        return 0
    follower = _Follower(engine, args.sandbox, owner)
    if args.follow:
        await _settle(engine, args.sandbox, owner, follower)
    else:
        await follower.copy()
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
