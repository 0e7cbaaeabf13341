"""The sandbox operations over HTTP: create, list, status, start, step, kill, deliver, wait,
output, I/O log, run record, proof, grants.

Each handler takes a :class:`~kforge.server.endpoint.Context` (the caller is
``ctx.agent``) and returns ``(status, value)`` with ``value`` a schema of
:mod:`kforge.server.schemas` or of the engine; :data:`SANDBOX_OPERATIONS`
lists them with what the OpenAPI document says of each.  Engine errors
propagate and become HTTP errors in :mod:`kforge.server.endpoint`.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from kforge.core import AgentId
from kforge.engine import CreateSandbox, ExecResult, SandboxInfo
from kforge.engine.artifacts import proof_result
from kforge.engine.policy import Action
from kforge.messages.payloads import ProofResult
from kforge.server.endpoint import (
    Context,
    Operation,
    Query,
    path_id,
    query_bool,
    query_integer,
    query_number,
)
from kforge.server.schemas import (
    Accepted,
    DeliverBody,
    GrantBody,
    HostCalls,
    OutputChunk,
    RunRecordView,
    SandboxCreated,
    SandboxList,
    SandboxRequest,
    SandboxStatus,
    StepResult,
    WaitResult,
)

__all__ = ["OUTPUT_CHUNK", "SANDBOX_OPERATIONS", "TIMEOUT"]

#: The most output bytes one ``/output`` reply carries (``limit`` may ask for fewer).
OUTPUT_CHUNK: Final = 256 * 1024


def _status(ctx: Context, info: SandboxInfo) -> SandboxStatus:
    """The sandbox as the server shows it: its status, its budget, the server's notes."""
    fields = msgspec.structs.asdict(info)
    fields.update(ctx.state.notes.values(info.id))
    return SandboxStatus(**fields, tick_budget=info.ticks_used + info.ticks_remaining)


async def create_sandbox(ctx: Context) -> tuple[int, Any]:
    body: SandboxRequest = ctx.body
    fields = msgspec.structs.asdict(body)
    fields["owner"] = body.owner or ctx.agent
    if body.preset is None and (body.memory_quota is None or body.tick_budget is None):
        fields["preset"] = ctx.state.config.default_preset
    sandbox_id = await ctx.state.engine.create_sandbox(CreateSandbox(**fields), ctx.agent)
    return 201, SandboxCreated(sandbox_id)


async def list_sandboxes(ctx: Context) -> tuple[int, Any]:
    """The caller's sandboxes and those it was granted; every one for the operator with ``all``."""
    infos = await ctx.state.engine.visible_sandboxes(ctx.agent, every=query_bool(ctx, "all"))
    return 200, SandboxList(tuple(_status(ctx, info) for info in infos))


async def sandbox_status(ctx: Context) -> tuple[int, Any]:
    info = await ctx.state.engine.sandbox_status(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, _status(ctx, info)


async def exec_start(ctx: Context) -> tuple[int, Any]:
    await ctx.state.engine.exec_start(path_id(ctx, "sandbox_id"), ctx.agent)
    return 202, Accepted()


async def step(ctx: Context) -> tuple[int, Any]:
    state = await ctx.state.engine.step(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, StepResult(state)


async def kill(ctx: Context) -> tuple[int, Any]:
    await ctx.state.engine.kill_sandbox(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, Accepted()


async def deliver(ctx: Context) -> tuple[int, Any]:
    body: DeliverBody = ctx.body
    await ctx.state.engine.deliver(path_id(ctx, "sandbox_id"), body.channel, body.data, ctx.agent)
    return 200, Accepted()


async def wait(ctx: Context) -> tuple[int, Any]:
    """The result once stopped; 408 when ``timeout`` seconds pass first (0: do not wait)."""
    sandbox_id = path_id(ctx, "sandbox_id")
    timeout = query_number(ctx, "timeout", 30.0, 0.0, ctx.state.config.max_wait_seconds)
    engine = ctx.state.engine
    result: ExecResult = await engine.wait(
        sandbox_id, ctx.agent, timeout=timeout, output_limit=OUTPUT_CHUNK
    )
    _, length = await engine.output_chunk(sandbox_id, ctx.agent, offset=0, limit=0)
    return 200, WaitResult(**msgspec.structs.asdict(result), output_length=length)


async def forget(ctx: Context) -> tuple[int, Any]:
    await ctx.state.engine.forget(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, Accepted()


async def io_log(ctx: Context) -> tuple[int, Any]:
    calls = await ctx.state.engine.io_log(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, HostCalls(calls)


async def output(ctx: Context) -> tuple[int, Any]:
    """The sandbox's stdout from ``offset`` on, while it runs or once stopped.

    At most ``limit`` bytes a reply: ``next_offset`` is where the next read
    starts, ``length`` how much has been written so far.  ``state`` is read
    before the output, so a reply with a stopped state and ``next_offset ==
    length`` has the whole output.  The operator reads any sandbox.
    """
    sandbox_id = path_id(ctx, "sandbox_id")
    offset = query_integer(ctx, "offset", 0, 0, 2**63 - 1)
    limit = query_integer(ctx, "limit", OUTPUT_CHUNK, 1, OUTPUT_CHUNK)
    info = await ctx.state.engine.sandbox_status(sandbox_id, ctx.agent)
    chunk, length = await ctx.state.engine.output_chunk(
        sandbox_id, ctx.agent, offset=offset, limit=limit
    )
    return 200, OutputChunk(sandbox_id, info.state, offset, offset + len(chunk), length, chunk)


async def run_record(ctx: Context) -> tuple[int, Any]:
    record = await ctx.state.engine.run_record(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, RunRecordView(
        record.program_id,
        record.memory_quota,
        record.tick_budget,
        len(record.deliveries),
        record.to_bytes(),
    )


async def request_proof(ctx: Context) -> tuple[int, Any]:
    proof = await ctx.state.engine.request_proof(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, proof_result(proof)


async def grant(ctx: Context) -> tuple[int, Any]:
    body: GrantBody = ctx.body
    await ctx.state.engine.grant(path_id(ctx, "sandbox_id"), ctx.agent, body.agent, body.operations)
    return 200, Accepted()


async def revoke(ctx: Context) -> tuple[int, Any]:
    agent = AgentId(path_id(ctx, "agent").raw)
    await ctx.state.engine.revoke(path_id(ctx, "sandbox_id"), ctx.agent, agent)
    return 200, Accepted()


_SANDBOX = "/v1/sandboxes/{sandbox_id}"
#: The ``timeout`` query parameter of long polls.
TIMEOUT: Final = Query(
    "timeout", {"type": "number", "minimum": 0, "maximum": 60}, "seconds to wait"
)
_NOT_MINE = (400, 403, 404)

SANDBOX_OPERATIONS: Final[tuple[Operation, ...]] = (
    Operation(
        "POST",
        "/v1/sandboxes",
        create_sandbox,
        "Create a sandbox (SANDBOX_CREATE)",
        Action.CREATE_SANDBOX,
        body=SandboxRequest,
        status=201,
        errors=(400, 403, 404, 422, 429),
        response=SandboxCreated,
    ),
    Operation(
        "GET",
        "/v1/sandboxes",
        list_sandboxes,
        "The caller's sandboxes (all: the operator's view)",
        Action.LIST_SANDBOXES,
        query=(Query("all", {"type": "boolean"}, "every sandbox (operator only)"),),
        errors=(400, 403),
        response=SandboxList,
    ),
    Operation(
        "GET",
        _SANDBOX,
        sandbox_status,
        "A sandbox's status (SANDBOX_STATUS)",
        Action.READ_SANDBOX,
        errors=_NOT_MINE,
        response=SandboxStatus,
    ),
    Operation(
        "DELETE",
        _SANDBOX,
        forget,
        "Forget a stopped sandbox",
        Action.FORGET,
        errors=(*_NOT_MINE, 409),
        response=Accepted,
    ),
    Operation(
        "POST",
        _SANDBOX + "/start",
        exec_start,
        "Start execution (EXEC_START)",
        Action.EXECUTE,
        status=202,
        errors=(*_NOT_MINE, 409, 429),
        response=Accepted,
    ),
    Operation(
        "POST",
        _SANDBOX + "/step",
        step,
        "Execute one instruction",
        Action.EXECUTE,
        errors=(*_NOT_MINE, 409),
        response=StepResult,
    ),
    Operation(
        "POST",
        _SANDBOX + "/kill",
        kill,
        "Kill (SANDBOX_KILL)",
        Action.KILL,
        errors=(*_NOT_MINE, 409),
        response=Accepted,
    ),
    Operation(
        "POST",
        _SANDBOX + "/deliver",
        deliver,
        "Input on stdin (SANDBOX_DELIVER)",
        Action.DELIVER,
        body=DeliverBody,
        errors=(*_NOT_MINE, 409),
        response=Accepted,
    ),
    Operation(
        "GET",
        _SANDBOX + "/wait",
        wait,
        "The result once stopped (EXEC_RESULT)",
        Action.READ_SANDBOX,
        query=(TIMEOUT,),
        errors=(*_NOT_MINE, 408),
        response=WaitResult,
    ),
    Operation(
        "GET",
        _SANDBOX + "/io",
        io_log,
        "Every host call with its tick",
        Action.READ_SANDBOX,
        errors=_NOT_MINE,
        response=HostCalls,
    ),
    Operation(
        "GET",
        _SANDBOX + "/output",
        output,
        "Its stdout from offset on, live or stopped",
        Action.READ_SANDBOX,
        query=(
            Query("offset", {"type": "integer", "minimum": 0}, "bytes already read (0..length)"),
            Query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": OUTPUT_CHUNK},
                f"at most this many bytes (default {OUTPUT_CHUNK})",
            ),
        ),
        errors=_NOT_MINE,
        response=OutputChunk,
    ),
    Operation(
        "GET",
        _SANDBOX + "/record",
        run_record,
        "The run record (replay input)",
        Action.READ_RUN_RECORD,
        errors=_NOT_MINE,
        response=RunRecordView,
    ),
    Operation(
        "POST",
        _SANDBOX + "/proof",
        request_proof,
        "An execution proof (PROOF_REQUEST)",
        Action.REQUEST_PROOF,
        errors=(*_NOT_MINE, 409, 429),
        response=ProofResult,
    ),
    Operation(
        "POST",
        _SANDBOX + "/grants",
        grant,
        "Let another agent act on the sandbox",
        Action.GRANT,
        body=GrantBody,
        errors=_NOT_MINE,
        response=Accepted,
    ),
    Operation(
        "DELETE",
        _SANDBOX + "/grants/{agent}",
        revoke,
        "Take back an agent's grants",
        Action.GRANT,
        errors=_NOT_MINE,
        response=Accepted,
    ),
)
