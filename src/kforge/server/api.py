"""The engine's operations over HTTP: identity, programs, links, cycles, services, messages.

Each handler takes a :class:`~kforge.server.endpoint.Context` (the caller is
``ctx.agent``) and returns ``(status, value)``; :data:`OPERATIONS` lists every
operation of the API (the sandbox ones come from :mod:`kforge.server.sandbox_api`)
with what the OpenAPI document says of each.  Engine errors propagate and
become HTTP errors in :mod:`kforge.server.endpoint`.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Final

import msgspec
from starlette.responses import Response

from kforge.core import (
    Hash256,
    InvalidRequest,
    MemoryQuotaExceeded,
    NotSupported,
    PermissionDenied,
)
from kforge.engine import Service, ServiceInfo
from kforge.engine.jobs import ASSEMBLY, FRGP, STARLARK
from kforge.engine.policy import Action
from kforge.messages import (
    SCHEMAS,
    Envelope,
    ReplyCode,
    code_name,
    decode_payload,
    encode_payload,
    pack,
)
from kforge.messages.payloads import LinkResolve, LinkResult, ServiceResult
from kforge.server.codec import MSGPACK, wants_msgpack
from kforge.server.endpoint import Context, Operation, path_id, query_number
from kforge.server.sandbox_api import SANDBOX_OPERATIONS, TIMEOUT
from kforge.server.schemas import (
    Accepted,
    CallBody,
    CycleBody,
    CycleStarted,
    Health,
    ProgramBody,
    ProgramStored,
    ProgramView,
    ServiceCreatedBody,
    ServiceList,
    ServiceRequest,
    Session,
    Stats,
    WhoAmI,
)
from kforge.sources import DEFAULT_STARLARK_MEMORY
from kforge.wire import HEX_ID, U16, Schema, from_json, json_value

__all__ = ["OPERATIONS", "envelope_values"]


# ------------------------------------------------------------------ identity


async def create_session(ctx: Context) -> tuple[int, Any]:
    """Trade a signed request for a bearer token."""
    token, expires = ctx.state.authenticator.issue_token(ctx.agent)
    return 201, Session(token, ctx.agent, expires)


async def whoami(ctx: Context) -> tuple[int, Any]:
    principal = ctx.principal
    operator = ctx.state.engine.policy.is_operator(principal.agent)
    return 200, WhoAmI(principal.agent, operator, principal.method)


async def health(ctx: Context) -> tuple[int, Any]:
    engine = ctx.state.engine
    return 200, Health("ok", engine.status.value, engine.tier)


# ------------------------------------------------------------------ programs


async def put_program(ctx: Context) -> tuple[int, Any]:
    """Store a program (assembly text, Starlark source or FRGP bytes) in the vault."""
    body: ProgramBody = ctx.body
    given = [body.assembly, body.starlark, body.program]
    if sum(value is not None for value in given) != 1:
        raise InvalidRequest("assembly", "give exactly one of 'assembly', 'starlark' and 'program'")
    engine = ctx.state.engine
    if body.starlark is None:
        for field in ("filename", "memory_quota"):
            if getattr(body, field) is not None:
                raise InvalidRequest(
                    field, "only Starlark source is compiled for a file name and memory"
                )
    source: bytes | str
    filename, memory_quota = "<upload>", DEFAULT_STARLARK_MEMORY
    if body.assembly is not None:
        kind, source = ASSEMBLY, body.assembly
    elif body.starlark is not None:
        kind, source = STARLARK, body.starlark
        filename = body.filename or "main.star"
        memory_quota = DEFAULT_STARLARK_MEMORY if body.memory_quota is None else body.memory_quota
        limit = engine.limits.max_memory_quota
        if memory_quota > limit:
            raise MemoryQuotaExceeded(memory_quota, limit)
    else:
        assert body.program is not None
        kind, source = FRGP, body.program
    program_id, built = await engine.build_program(kind, source, filename, ctx.agent, memory_quota)
    if body.name:
        ctx.state.notes.name_program(ctx.agent, program_id, body.name)
    return 201, ProgramStored(program_id, built.code_length, built.data_length, built.imports)


async def get_program(ctx: Context) -> tuple[int, Any]:
    """A stored program's disassembly (programs are content-addressed: the id is the key)."""
    program_id = path_id(ctx, "program_id")
    text = await ctx.state.engine.program_text(program_id, ctx.agent)
    return 200, ProgramView(program_id, text.entry, text.code, text.data_length, text.disassembly)


# ------------------------------------------------------------------ linking, cycles, services


async def link(ctx: Context) -> tuple[int, Any]:
    body: LinkResolve = ctx.body
    resolved = await ctx.state.engine.link_resolve(body.program, body.imports, ctx.agent)
    return 200, LinkResult(resolved)


async def begin_cycle(ctx: Context) -> tuple[int, Any]:
    body: CycleBody = ctx.body
    allowances = (
        {entry.agent: entry.ticks for entry in body.allowances}
        if body.allowances is not None
        else None
    )
    return 200, CycleStarted(await ctx.state.engine.begin_cycle(allowances, ctx.agent))


def _services_supported(ctx: Context, method: str) -> Any:
    found = getattr(ctx.state.engine, method, None)
    if found is None:
        raise NotSupported(f"services ({method}) on this engine")
    return found


async def list_services(ctx: Context) -> tuple[int, Any]:
    """Every service (services are public), once the engine has them; else ``supported: false``."""
    lister = getattr(ctx.state.engine, "list_services", None)
    if lister is None:
        return 200, ServiceList(False, ())
    return 200, ServiceList(True, tuple(await lister()))


async def service_info(ctx: Context) -> tuple[int, Any]:
    info = _services_supported(ctx, "service_info")
    return 200, await info(path_id(ctx, "service_id"))


async def create_service(ctx: Context) -> tuple[int, Any]:
    """SERVICE_CREATE as the caller (who must be the owner)."""
    body: ServiceRequest = ctx.body
    fields = msgspec.structs.asdict(body)
    fields["owner"] = body.owner or ctx.agent
    service_id = await ctx.state.engine.create_service(Service(**fields), ctx.agent)
    return 201, ServiceCreatedBody(service_id)


async def call_service(ctx: Context) -> tuple[int, Any]:
    """Call an endpoint and wait (up to ``timeout``) for the service's answer."""
    call = _services_supported(ctx, "call_service")
    timeout = query_number(ctx, "timeout", 30.0, 0.0, ctx.state.config.max_wait_seconds)
    body: CallBody = ctx.body
    result: ServiceResult = await asyncio.wait_for(
        call(path_id(ctx, "service_id"), body.endpoint, body.data, ctx.agent), timeout
    )
    return 200, result


async def fund_service(ctx: Context) -> tuple[int, Any]:
    fund = _services_supported(ctx, "fund_service")
    await fund(path_id(ctx, "service_id"), ctx.agent)
    return 200, Accepted()


async def stats(ctx: Context) -> tuple[int, Any]:
    engine = ctx.state.engine
    every = engine.policy.allows(Action.LIST_ALL_SANDBOXES, ctx.agent)
    infos = await engine.visible_sandboxes(ctx.agent, every=every)
    by_state: dict[str, int] = {}
    for info in infos:
        by_state[info.state.value] = by_state.get(info.state.value, 0) + 1
    return 200, Stats(len(infos), by_state, engine.bus.published, len(ctx.state.debug))


# ------------------------------------------------------------------ messages


def envelope_values(envelope: Envelope) -> dict[str, Any]:
    """An envelope for JSON: the payload decoded under its code when it fits."""
    try:
        payload: Any = json_value(decode_payload(envelope.code, envelope.payload))
    except InvalidRequest:
        payload = {"undecoded_hex": envelope.payload.hex()}
    values = {
        "id": envelope.id.hex,
        "sender": envelope.sender.hex,
        "code": envelope.code,
        "code_name": code_name(envelope.code),
        "payload": payload,
        "timestamp": envelope.timestamp,
        "reply_to": envelope.reply_to.hex if envelope.reply_to is not None else None,
    }
    if envelope.code == ReplyCode.ERROR:
        error = decode_payload(ReplyCode.ERROR, envelope.payload)
        values["error_message"] = error.message.decode("utf-8", "replace")
    return values


class _JsonEnvelope(Schema, frozen=True):
    """``POST /v1/messages`` in JSON: the code, its payload in JSON form, an optional id."""

    code: U16
    payload: dict[str, Any] = msgspec.field(default_factory=dict)
    id: Hash256 | None = None


def _envelope_from_body(ctx: Context) -> Envelope:
    """msgpack: the body is the envelope map; JSON: ``{code, payload, id?}``."""
    if ctx.msgpack:
        return Envelope.decode(pack(ctx.body))
    given = from_json(ctx.body, _JsonEnvelope)
    schema = SCHEMAS.get(given.code)
    if schema is not None:
        payload = encode_payload(given.code, from_json(given.payload, schema, "payload"))
    else:  # the engine answers an unknown code with ERROR
        try:
            payload = pack(given.payload)
        except (OverflowError, ValueError, TypeError) as error:  # huge ints, lone surrogates
            raise InvalidRequest(
                "payload", f"cannot be encoded as msgpack ({type(error).__name__})"
            ) from None
    return Envelope(
        given.id if given.id is not None else Hash256(os.urandom(32)),
        ctx.agent,
        given.code,
        payload,
        ctx.state.engine.clock.time_ms(),
    )


async def send_message(ctx: Context) -> tuple[int, Any] | Response:
    """Dispatch one envelope as the caller; the reply (ACK, a result or ERROR) comes back."""
    envelope = _envelope_from_body(ctx)
    if envelope.sender != ctx.agent:
        raise PermissionDenied(f"agent {ctx.agent} may not send as {envelope.sender}")
    reply = await ctx.state.engine.dispatch(envelope)
    if wants_msgpack(ctx.request.headers.get("accept"), ctx.request.headers.get("content-type")):
        return Response(reply.encode(), 200, media_type=MSGPACK)
    return 200, envelope_values(reply)


async def mailbox(ctx: Context) -> tuple[int, Any] | Response:
    """Envelopes the engine sent the caller later (EXEC_RESULT, PROOF_RESULT), waiting up to ``timeout``."""
    timeout = query_number(ctx, "timeout", 0.0, 0.0, ctx.state.config.max_wait_seconds)
    envelopes = await ctx.state.engine.mailbox.take(ctx.agent, timeout)
    if wants_msgpack(ctx.request.headers.get("accept"), ctx.request.headers.get("content-type")):
        return 200, {"envelopes": envelopes}
    return 200, {"envelopes": [envelope_values(envelope) for envelope in envelopes]}


# ------------------------------------------------------------------ the table

_ENVELOPE = {
    "type": "object",
    "properties": {
        "id": HEX_ID,
        "sender": HEX_ID,
        "code": {"type": "integer"},
        "code_name": {"type": "string"},
        "payload": {"type": "object"},
        "timestamp": {"type": "integer"},
        "reply_to": {"anyOf": [HEX_ID, {"type": "null"}]},
    },
    "required": ["id", "sender", "code", "payload", "timestamp", "reply_to"],
}

OPERATIONS: Final[tuple[Operation, ...]] = (
    Operation(
        "GET",
        "/v1/health",
        health,
        "Liveness and the engine's state",
        Action.HEALTH,
        authenticated=False,
        response=Health,
        tag="server",
    ),
    Operation(
        "POST",
        "/v1/session",
        create_session,
        "Trade a signed request for a bearer token",
        Action.IDENTIFY,
        status=201,
        signature_only=True,
        tag="identity",
        response=Session,
    ),
    Operation(
        "GET",
        "/v1/whoami",
        whoami,
        "Who the server takes the caller for",
        Action.IDENTIFY,
        tag="identity",
        response=WhoAmI,
    ),
    Operation(
        "POST",
        "/v1/programs",
        put_program,
        "Store a program (assembly, Starlark or FRGP) in the vault",
        Action.PUT_PROGRAM,
        body=ProgramBody,
        status=201,
        errors=(400, 422, 429),
        tag="programs",
        response=ProgramStored,
    ),
    Operation(
        "GET",
        "/v1/programs/{program_id}",
        get_program,
        "A stored program's disassembly",
        Action.READ_PROGRAM,
        errors=(400, 404),
        tag="programs",
        response=ProgramView,
    ),
    *SANDBOX_OPERATIONS,
    Operation(
        "POST",
        "/v1/link",
        link,
        "Link a program with its imports (LINK_RESOLVE)",
        Action.LINK,
        body=LinkResolve,
        errors=(400, 404, 429),
        response=LinkResult,
    ),
    Operation(
        "POST",
        "/v1/cycles",
        begin_cycle,
        "Start the next cycle (operator only)",
        Action.BEGIN_CYCLE,
        body=CycleBody,
        errors=(400, 403),
        response=CycleStarted,
    ),
    Operation(
        "GET",
        "/v1/services",
        list_services,
        "Every service, when the engine has them",
        Action.READ_SERVICE,
        tag="services",
        response=ServiceList,
    ),
    Operation(
        "POST",
        "/v1/services",
        create_service,
        "Make a persistent sandbox a service (SERVICE_CREATE)",
        Action.CREATE_SERVICE,
        body=ServiceRequest,
        status=201,
        errors=(400, 403, 404, 409, 429, 501),
        tag="services",
        response=ServiceCreatedBody,
    ),
    Operation(
        "GET",
        "/v1/services/{service_id}",
        service_info,
        "A service's standing",
        Action.READ_SERVICE,
        tag="services",
        errors=(400, 404, 501),
        response=ServiceInfo,
    ),
    Operation(
        "POST",
        "/v1/services/{service_id}/call",
        call_service,
        "Call an endpoint (SERVICE_CALL)",
        Action.CALL_SERVICE,
        body=CallBody,
        query=(TIMEOUT,),
        errors=(400, 403, 404, 408, 409, 429, 501),
        tag="services",
        response=ServiceResult,
    ),
    Operation(
        "POST",
        "/v1/services/{service_id}/fund",
        fund_service,
        "Pay this cycle of a service",
        Action.FUND_SERVICE,
        errors=(400, 403, 404, 409, 429, 501),
        tag="services",
        response=Accepted,
    ),
    Operation(
        "GET",
        "/v1/stats",
        stats,
        "Counts for the dashboard",
        Action.READ_STATS,
        tag="server",
        response=Stats,
    ),
    Operation(
        "POST",
        "/v1/messages",
        send_message,
        "Dispatch one Forge message envelope",
        Action.SEND_MESSAGE,
        raw_body=True,
        body_schema={
            "type": "object",
            "properties": {
                "code": {"type": "integer", "minimum": 0, "maximum": 65535},
                "payload": {"type": "object"},
                "id": HEX_ID,
            },
            "required": ["code"],
            "additionalProperties": False,
        },
        errors=(400, 403),
        tag="messages",
        response=_ENVELOPE,
    ),
    Operation(
        "GET",
        "/v1/mailbox",
        mailbox,
        "Envelopes sent to the caller later",
        Action.READ_MAILBOX,
        query=(TIMEOUT,),
        errors=(400,),
        tag="messages",
        response={
            "type": "object",
            "properties": {"envelopes": {"type": "array", "items": _ENVELOPE}},
        },
    ),
)
