"""The debugger over HTTP: load a program, step, run to a breakpoint, look at everything.

Every answer is the session's full view (:meth:`DebugManager.view`,
:class:`~kforge.server.schemas.DebugView`): state, pc, registers (with those the
last command changed), flags, the stack, a memory window, the channel queues,
the disassembly with its labels and source positions.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from kforge.core import InvalidRequest, MemoryQuotaExceeded
from kforge.debuginfo import code_labels
from kforge.engine.jobs import build_debug_program, build_starlark_program
from kforge.engine.policy import Action
from kforge.limits import check_size
from kforge.program import ForgeProgram, decode_program
from kforge.server.endpoint import Context, Handler, Operation, Query, query_number
from kforge.server.schemas import (
    Accepted,
    BreakpointsBody,
    DebugCreateBody,
    DebugFiles,
    DebugRunBody,
    DebugSessions,
    DebugSessionSummary,
    DebugStepBody,
    DebugView,
    DeliverBody,
)
from kforge.sources import is_starlark_name
from kforge.wire import Schema

__all__ = ["DEBUG_OPERATIONS"]


async def _program(
    ctx: Context, body: DebugCreateBody
) -> tuple[ForgeProgram, dict[int, tuple[str, ...]]]:
    """The program to debug and the names of its instructions (every label of assembly
    text; a container's code symbols).  Assembling, compiling Starlark (always in a
    worker process: its cost does not follow its size; loading libraries from the
    vault by content id, never files) and decoding happen away from the event loop
    (``engine.offload``); a program over
    ``DebugLimits.max_code_length`` instructions is refused (every view shows the whole
    disassembly)."""
    given = [body.assembly, body.starlark, body.program, body.program_id]
    if sum(value is not None for value in given) != 1:
        raise InvalidRequest(
            "assembly",
            "give exactly one of 'assembly', 'starlark', 'program' and 'program_id'",
        )
    offload = ctx.state.engine.offload
    labels: dict[int, tuple[str, ...]] | None = None
    if body.assembly is not None:
        encoded, labels = await offload.run(
            ctx.agent,
            "assembling for the debugger",
            len(body.assembly),
            build_debug_program,
            body.assembly,
            "<debugger>",
        )
    elif body.starlark is not None:
        if not is_starlark_name(body.filename) or "/" in body.filename:
            raise InvalidRequest("filename", "a Starlark file name ends in .star, without '/'")
        encoded = await offload.run(
            ctx.agent,
            f"compiling {body.filename} for the debugger",
            len(body.starlark),
            build_starlark_program,
            body.starlark,
            body.filename,
            body.memory_quota,
            await ctx.state.engine.starlark_libraries(body.starlark),
            inline=False,
        )
    elif body.program is not None:
        encoded = body.program
    else:
        assert body.program_id is not None
        encoded = await ctx.state.engine.program_bytes(body.program_id)
    if len(encoded) > offload.limits.inline_bytes:
        program = await asyncio.to_thread(decode_program, encoded)
    else:
        program = decode_program(encoded)
    limit = ctx.state.debug.limits.max_code_length
    check_size("debugged program (instructions)", len(program.code), limit)
    return program, labels if labels is not None else code_labels(program)


def _view(ctx: Context, session_id: str) -> DebugView:
    debug = ctx.state.debug
    session = debug.get(session_id, ctx.agent)
    address = int(query_number(ctx, "memory_address", 0, 0, 1 << 40))
    length = int(query_number(ctx, "memory_length", 256, 0, 4096))
    return debug.view(session, address, length)


async def create(ctx: Context) -> tuple[int, Any]:
    body: DebugCreateBody = ctx.body
    limit = ctx.state.engine.limits.max_memory_quota
    if body.memory_quota > limit:
        raise MemoryQuotaExceeded(body.memory_quota, limit)
    if body.tick_budget > ctx.state.engine.limits.max_tick_budget:
        raise InvalidRequest("tick_budget", "over the engine's limit")
    program, labels = await _program(ctx, body)
    session = ctx.state.debug.create(
        ctx.agent,
        program,
        memory_quota=body.memory_quota,
        tick_budget=body.tick_budget,
        input=body.input,
        environment=body.environment,
        grants=list(body.grants),
        labels=labels,
        files={body.filename: body.starlark} if body.starlark is not None else None,
    )
    session.breakpoints = set(body.breakpoints)
    return 201, _view(ctx, session.id)


async def list_sessions(ctx: Context) -> tuple[int, Any]:
    sessions = ctx.state.debug.list(ctx.agent)
    return 200, DebugSessions(
        tuple(
            DebugSessionSummary(s.id, s.program.program_id, s.machine.state.value) for s in sessions
        )
    )


async def show(ctx: Context) -> tuple[int, Any]:
    return 200, _view(ctx, ctx.path("session_id"))


async def delete(ctx: Context) -> tuple[int, Any]:
    ctx.state.debug.delete(ctx.path("session_id"), ctx.agent)
    return 200, Accepted()


async def step(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    body: DebugStepBody = ctx.body
    await ctx.state.debug.step(session, max(1, body.count))
    return 200, _view(ctx, session.id)


async def step_over(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.step_over(session)
    return 200, _view(ctx, session.id)


async def step_line(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.step_line(session)
    return 200, _view(ctx, session.id)


async def files(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    return 200, DebugFiles(dict(session.files))


async def step_out(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    await ctx.state.debug.step_out(session)
    return 200, _view(ctx, session.id)


async def run(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    body: DebugRunBody = ctx.body
    await ctx.state.debug.run(session, body.max_ticks, body.breakpoints)
    return 200, _view(ctx, session.id)


async def set_breakpoints(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    body: BreakpointsBody = ctx.body
    session.breakpoints = set(body.breakpoints)
    return 200, _view(ctx, session.id)


async def deliver(ctx: Context) -> tuple[int, Any]:
    session = ctx.state.debug.get(ctx.path("session_id"), ctx.agent)
    body: DeliverBody = ctx.body
    await ctx.state.debug.deliver(session, body.channel, body.data)
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
    body: type[Schema] | None = None,
    *,
    errors: tuple[int, ...] = _ERRORS,
) -> Operation:
    """An operation on one session that answers with its view (and takes the memory window)."""
    return Operation(
        method,
        _SESSION + path,
        handler,
        summary,
        Action.DEBUG,
        body=body,
        query=_MEMORY,
        errors=errors,
        tag="debugger",
        response=DebugView,
    )


DEBUG_OPERATIONS: Final[tuple[Operation, ...]] = (
    Operation(
        "POST",
        "/v1/debug",
        create,
        "Load a program into a new debug session",
        Action.DEBUG,
        body=DebugCreateBody,
        status=201,
        errors=(400, 404, 422, 429),
        tag="debugger",
        response=DebugView,
    ),
    Operation(
        "GET",
        "/v1/debug",
        list_sessions,
        "The caller's debug sessions",
        Action.DEBUG,
        tag="debugger",
        response=DebugSessions,
    ),
    _command("GET", "", show, "The session's full view"),
    Operation(
        "DELETE",
        _SESSION,
        delete,
        "End the session",
        Action.DEBUG,
        errors=_ERRORS,
        tag="debugger",
        response=Accepted,
    ),
    _command("POST", "/step", step, "Execute count instructions", DebugStepBody),
    _command(
        "POST",
        "/step_over",
        step_over,
        "One instruction; a CALL runs until it returns (or a breakpoint)",
    ),
    _command(
        "POST", "/step_out", step_out, "Run until the current function returns (or a breakpoint)"
    ),
    _command(
        "POST",
        "/step_line",
        step_line,
        "Run to the next source line; calls on the way run through (or a breakpoint)",
    ),
    Operation(
        "GET",
        _SESSION + "/files",
        files,
        "The source the session's program was compiled from",
        Action.DEBUG,
        errors=_ERRORS,
        tag="debugger",
        response=DebugFiles,
    ),
    _command("POST", "/run", run, "Run to a breakpoint, a stop, or max_ticks", DebugRunBody),
    _command("PUT", "/breakpoints", set_breakpoints, "Replace the breakpoints", BreakpointsBody),
    _command(
        "POST",
        "/deliver",
        deliver,
        "Queue a message on a receiving channel",
        DeliverBody,
        errors=(*_ERRORS, 403, 409),
    ),
)
