"""The debugger over HTTP: load a program, step, run to a breakpoint, look at everything.

Every answer is the session's full view (:meth:`DebugManager.view`): state,
pc, registers (with those the last command changed), flags, the stack, a
memory window, the channel queues and the disassembly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kforge.asm import assemble_with_labels
from kforge.core import MemoryQuotaExceeded
from kforge.debuginfo import code_labels
from kforge.messages import (
    BytesField,
    BytesMapField,
    Field,
    HashField,
    InvalidRequest,
    ListField,
    OptionalField,
    TextField,
    UIntField,
)
from kforge.program import ForgeProgram, decode_program
from kforge.server.endpoint import Context, Handler, Operation, Query, query_number

__all__ = ["DEBUG_OPERATIONS"]

_U64 = UIntField(64)
_BREAKPOINTS = ListField(_U64, 1024)

CREATE_FIELDS: Final = (
    Field("assembly", OptionalField(TextField()), False, None),
    Field("program", OptionalField(BytesField()), False, None),
    Field("program_id", OptionalField(HashField()), False, None),
    Field("memory_quota", _U64, False, 65536),
    Field("tick_budget", _U64, False, 1_000_000),
    Field("input", BytesField(), False, b""),
    Field("environment", BytesMapField(), False, {}),
    Field("grants", ListField(UIntField(8), 16), False, []),
    Field("breakpoints", _BREAKPOINTS, False, []),
)
STEP_FIELDS: Final = (Field("count", UIntField(32), False, 1),)
RUN_FIELDS: Final = (
    Field("max_ticks", _U64, False, 1_000_000),
    Field("breakpoints", OptionalField(_BREAKPOINTS), False, None),
)
BREAKPOINT_FIELDS: Final = (Field("breakpoints", _BREAKPOINTS),)
DELIVER_FIELDS: Final = (Field("channel", UIntField(8), False, 2), Field("data", BytesField()))

_VIEW: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string"},
        "state": {"type": "string"},
        "pc": {"type": "integer"},
        "registers": {"type": "array", "items": {"type": "string"}},
        "changed": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["session_id", "state", "pc", "registers", "changed"],
}


def _program(ctx: Context) -> tuple[ForgeProgram, dict[int, tuple[str, ...]]]:
    """The program to debug and the names of its instructions (every label of assembly
    text; a container's code symbols)."""
    values = ctx.values
    given = [name for name in ("assembly", "program", "program_id") if values[name] is not None]
    if len(given) != 1:
        raise InvalidRequest(
            "assembly", "give exactly one of 'assembly', 'program' and 'program_id'"
        )
    if values["assembly"] is not None:
        return assemble_with_labels(values["assembly"], "<debugger>")
    if values["program"] is not None:
        program = decode_program(values["program"])
    else:
        program = ctx.state.engine.programs.load(values["program_id"])
    return program, code_labels(program)


def _view(ctx: Context, session_id: str) -> dict[str, Any]:
    debug = ctx.state.debug
    session = debug.get(session_id, ctx.agent)
    address = int(query_number(ctx, "memory_address", 0, 0, 1 << 40))
    length = int(query_number(ctx, "memory_length", 256, 0, 4096))
    return debug.view(session, address, length)


async def create(ctx: Context) -> tuple[int, Any]:
    values = ctx.values
    program, labels = _program(ctx)
    limit = ctx.state.engine.limits.max_memory_quota
    if values["memory_quota"] > limit:
        raise MemoryQuotaExceeded(values["memory_quota"], limit)
    if values["tick_budget"] > ctx.state.engine.limits.max_tick_budget:
        raise InvalidRequest("tick_budget", "over the engine's limit")
    session = ctx.state.debug.create(
        ctx.agent,
        program,
        memory_quota=values["memory_quota"],
        tick_budget=values["tick_budget"],
        input=values["input"],
        environment=values["environment"],
        grants=values["grants"],
        labels=labels,
    )
    session.breakpoints = set(values["breakpoints"])
    return 201, _view(ctx, session.id)


async def list_sessions(ctx: Context) -> tuple[int, Any]:
    sessions = ctx.state.debug.list(ctx.agent)
    return 200, {
        "sessions": [
            {"session_id": s.id, "program_id": s.program.program_id, "state": s.machine.state.value}
            for s in sessions
        ]
    }


async def show(ctx: Context) -> tuple[int, Any]:
    return 200, _view(ctx, ctx.path("session_id"))


async def delete(ctx: Context) -> tuple[int, Any]:
    ctx.state.debug.delete(ctx.path("session_id"), ctx.agent)
    return 200, {}


async def step(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.step(session, max(1, ctx.values["count"]))
    return 200, _view(ctx, session.id)


async def step_over(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.step_over(session)
    return 200, _view(ctx, session.id)


async def step_out(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.step_out(session)
    return 200, _view(ctx, session.id)


async def run(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.run(session, ctx.values["max_ticks"], ctx.values["breakpoints"])
    return 200, _view(ctx, session.id)


async def set_breakpoints(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    session.breakpoints = set(ctx.values["breakpoints"])
    return 200, _view(ctx, session.id)


async def deliver(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.deliver(session, ctx.values["channel"], ctx.values["data"])
    return 200, _view(ctx, session.id)


_SESSION = "/v1/debug/{session_id}"
_MEMORY = (
    Query("memory_address", {"type": "integer", "minimum": 0}, "start of the memory window"),
    Query(
        "memory_length", {"type": "integer", "minimum": 0, "maximum": 4096}, "bytes in the window"
    ),
)
_ERRORS = (400, 404)


def _command(
    method: str,
    path: str,
    handler: Handler,
    summary: str,
    fields: Sequence[Field] | None = None,
    *,
    errors: tuple[int, ...] = _ERRORS,
) -> Operation:
    """An operation on one session that answers with its view (and takes the memory window)."""
    return Operation(
        method,
        _SESSION + path,
        handler,
        summary,
        fields=fields,
        query=_MEMORY,
        errors=errors,
        tag="debugger",
        response=_VIEW,
    )


DEBUG_OPERATIONS: Final[tuple[Operation, ...]] = (
    Operation(
        "POST",
        "/v1/debug",
        create,
        "Load a program into a new debug session",
        fields=CREATE_FIELDS,
        status=201,
        errors=(400, 404, 422, 429),
        tag="debugger",
        response=_VIEW,
    ),
    Operation(
        "GET",
        "/v1/debug",
        list_sessions,
        "The caller's debug sessions",
        tag="debugger",
        response={"type": "object"},
    ),
    _command("GET", "", show, "The session's full view"),
    Operation(
        "DELETE",
        _SESSION,
        delete,
        "End the session",
        errors=_ERRORS,
        tag="debugger",
        response={"type": "object"},
    ),
    _command("POST", "/step", step, "Execute count instructions", STEP_FIELDS),
    _command(
        "POST",
        "/step_over",
        step_over,
        "One instruction; a CALL runs until it returns (or a breakpoint)",
    ),
    _command(
        "POST", "/step_out", step_out, "Run until the current function returns (or a breakpoint)"
    ),
    _command("POST", "/run", run, "Run to a breakpoint, a stop, or max_ticks", RUN_FIELDS),
    _command("PUT", "/breakpoints", set_breakpoints, "Replace the breakpoints", BREAKPOINT_FIELDS),
    _command(
        "POST",
        "/deliver",
        deliver,
        "Queue a message on a receiving channel",
        DELIVER_FIELDS,
        errors=(*_ERRORS, 403, 409),
    ),
)
