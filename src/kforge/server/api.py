"""The engine's operations over HTTP: programs, sandboxes, grants, links, proofs, messages.

Each handler takes a :class:`~kforge.server.endpoint.Context` (the caller is
``ctx.agent``) and returns ``(status, value)``; :data:`OPERATIONS` lists them
with what the OpenAPI document says of each.  Engine errors propagate and
become HTTP errors in :mod:`kforge.server.endpoint`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any, Final

from starlette.responses import Response

from kforge.asm import assemble
from kforge.core import Hash256, MessageCode, NotSupported, PermissionDenied, SandboxNotFound
from kforge.disasm import disassemble, format_instruction
from kforge.engine import (
    CreateSandbox,
    Endpoint,
    SandboxInfo,
    Service,
    create_request_from_values,
    exec_result_values,
    sandbox_info_values,
)
from kforge.engine import (
    Operation as Access,
)
from kforge.engine.artifacts import proof_result_values
from kforge.events import EVENT_FIELDS
from kforge.link import Import
from kforge.messages import (
    SCHEMAS,
    AgentField,
    BytesField,
    Envelope,
    Field,
    HashField,
    InvalidRequest,
    ListField,
    OptionalField,
    ReplyCode,
    StructField,
    TextField,
    UIntField,
    code_name,
    decode_payload,
    pack,
    unpack,
)
from kforge.program import decode_program
from kforge.server.codec import MSGPACK, json_to_wire, object_schema, wants_msgpack
from kforge.server.endpoint import (
    Context,
    Operation,
    Query,
    path_id,
    query_bool,
    query_integer,
    query_number,
)
from kforge.server.notes import NOTE_SCHEMA

__all__ = ["CREATE_FIELDS", "OPERATIONS", "envelope_values"]

_U64 = UIntField(64)
_U8 = UIntField(8)

#: ``SANDBOX_CREATE``'s payload with ``owner`` optional: it defaults to the caller.
CREATE_FIELDS: Final = tuple(
    Field("owner", AgentField(), False, None) if spec.name == "owner" else spec
    for spec in SCHEMAS[MessageCode.SANDBOX_CREATE]
)
PROGRAM_FIELDS: Final = (
    Field("assembly", OptionalField(TextField()), False, None),
    Field("program", OptionalField(BytesField()), False, None),
    Field("name", OptionalField(TextField()), False, None),
)
DELIVER_FIELDS: Final = (Field("channel", _U8, False, 2), Field("data", BytesField()))
GRANT_FIELDS: Final = (
    Field("agent", AgentField()),
    Field("operations", ListField(TextField([access.value for access in Access]), 4)),
)
SERVICE_FIELDS: Final = tuple(
    Field("owner", AgentField(), False, None) if spec.name == "owner" else spec
    for spec in SCHEMAS[MessageCode.SERVICE_CREATE]
)
CALL_FIELDS: Final = (Field("endpoint", BytesField()), Field("data", BytesField(), False, b""))
CYCLE_FIELDS: Final = (
    Field(
        "allowances",
        OptionalField(ListField(StructField((Field("agent", AgentField()), Field("ticks", _U64))))),
        False,
        None,
    ),
)

# ------------------------------------------------------------------ response schemas

_INFO = object_schema(SCHEMAS[ReplyCode.SANDBOX_INFO])
#: A sandbox as the server shows it: SANDBOX_INFO, its budget and the server's notes.
_SHOWN = {
    **_INFO,
    "properties": {**_INFO["properties"], "tick_budget": {"type": "integer"}, **NOTE_SCHEMA},
}
_RESULT = object_schema(SCHEMAS[MessageCode.EXEC_RESULT])
_ID = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_HEX = {"type": "string", "pattern": "^([0-9a-f]{2})*$"}
_OBJECT: dict[str, Any] = {"type": "object"}
_ENVELOPE = {
    "type": "object",
    "properties": {
        "id": _ID,
        "sender": _ID,
        "code": {"type": "integer"},
        "code_name": {"type": "string"},
        "payload": {},
        "timestamp": {"type": "integer"},
        "reply_to": {"anyOf": [_ID, {"type": "null"}]},
    },
    "required": ["id", "sender", "code", "payload", "timestamp", "reply_to"],
}


def _ack(**values: Any) -> dict[str, Any]:
    return values


# ------------------------------------------------------------------ identity


async def create_session(ctx: Context) -> tuple[int, Any]:
    """Trade a signed request for a bearer token."""
    token, expires = ctx.state.authenticator.issue_token(ctx.agent)
    return 201, {"token": token, "agent": ctx.agent, "expires_at_ms": expires}


async def whoami(ctx: Context) -> tuple[int, Any]:
    principal = ctx.principal
    return 200, {
        "agent": principal.agent,
        "operator": principal.operator,
        "method": principal.method,
    }


async def health(ctx: Context) -> tuple[int, Any]:
    engine = ctx.state.engine
    return 200, {"status": "ok", "engine": engine.status.value, "tier": engine.tier}


# ------------------------------------------------------------------ programs


async def put_program(ctx: Context) -> tuple[int, Any]:
    """Store a program (assembly text or FRGP bytes) in the vault."""
    text, blob = ctx.values["assembly"], ctx.values["program"]
    if (text is None) == (blob is None):
        raise InvalidRequest("assembly", "give exactly one of 'assembly' and 'program'")
    program = assemble(text, "<upload>") if text is not None else decode_program(blob)
    program_id = ctx.state.engine.vault.put_program(program)
    if ctx.values["name"]:
        ctx.state.notes.name_program(program_id, ctx.values["name"])
    return 201, {
        "program_id": program_id,
        "code_length": len(program.code),
        "data_length": len(program.data),
        "imports": list(program.imports),
    }


async def get_program(ctx: Context) -> tuple[int, Any]:
    """A stored program's disassembly (programs are content-addressed: the id is the key)."""
    program = ctx.state.engine.programs.load(path_id(ctx, "program_id"))
    return 200, {
        "program_id": program.program_id,
        "entry": program.entry,
        "code": [format_instruction(insn) for insn in program.code],
        "data_length": len(program.data),
        "disassembly": disassemble(program),
    }


# ------------------------------------------------------------------ sandboxes


async def _info(ctx: Context, sandbox_id: Hash256) -> SandboxInfo:
    """The sandbox's status for the caller; the operator may read any."""
    engine = ctx.state.engine
    try:
        return await engine.sandbox_status(sandbox_id, ctx.agent)
    except PermissionDenied:
        if not ctx.principal.operator:
            raise
    for info in await engine.list_sandboxes():
        if info.id == sandbox_id:
            return info
    raise SandboxNotFound(sandbox_id)


def _info_values(ctx: Context, info: SandboxInfo) -> dict[str, Any]:
    values = sandbox_info_values(info)
    values["tick_budget"] = info.ticks_used + info.ticks_remaining
    values.update(ctx.state.notes.values(info.id))
    return values


async def create_sandbox(ctx: Context) -> tuple[int, Any]:
    values = dict(ctx.values)
    owner = values["owner"] or ctx.agent
    if owner != ctx.agent:
        raise PermissionDenied(f"agent {ctx.agent} may not create a sandbox owned by {owner}")
    values["owner"] = owner
    engine = ctx.state.engine
    limit = ctx.state.config.max_live_sandboxes_per_agent
    live = sum(1 for info in await engine.list_sandboxes(owner) if info.state.is_live)
    if live >= limit:
        from kforge.core import TooManySandboxes

        raise TooManySandboxes(
            f"agent {owner} already has {live} live of at most {limit} on this server"
        )
    request: CreateSandbox = create_request_from_values(values)
    sandbox_id = await engine.create_sandbox(request)
    return 201, {"sandbox_id": sandbox_id}


async def list_sandboxes(ctx: Context) -> tuple[int, Any]:
    """The caller's sandboxes and those it was granted; every one for the operator with ``all``."""
    engine = ctx.state.engine
    every = query_bool(ctx, "all")
    if every and not ctx.principal.operator:
        raise PermissionDenied("only the operator may list every sandbox")
    infos = []
    for info in await engine.list_sandboxes():
        if every or info.owner == ctx.agent:
            infos.append(info)
            continue
        try:
            infos.append(await engine.sandbox_status(info.id, ctx.agent))
        except PermissionDenied:
            continue
    return 200, {"sandboxes": [_info_values(ctx, info) for info in infos]}


async def sandbox_status(ctx: Context) -> tuple[int, Any]:
    return 200, _info_values(ctx, await _info(ctx, path_id(ctx, "sandbox_id")))


async def exec_start(ctx: Context) -> tuple[int, Any]:
    await ctx.state.engine.exec_start(path_id(ctx, "sandbox_id"), ctx.agent)
    return 202, _ack()


async def step(ctx: Context) -> tuple[int, Any]:
    state = await ctx.state.engine.step(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, {"state": state}


async def kill(ctx: Context) -> tuple[int, Any]:
    await ctx.state.engine.kill_sandbox(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, _ack()


async def deliver(ctx: Context) -> tuple[int, Any]:
    sandbox_id = path_id(ctx, "sandbox_id")
    await ctx.state.engine.deliver(sandbox_id, ctx.values["channel"], ctx.values["data"], ctx.agent)
    return 200, _ack()


async def wait(ctx: Context) -> tuple[int, Any]:
    """The result once stopped; 408 when ``timeout`` seconds pass first (0: do not wait)."""
    sandbox_id = path_id(ctx, "sandbox_id")
    timeout = query_number(ctx, "timeout", 30.0, 0.0, ctx.state.config.max_wait_seconds)
    engine = ctx.state.engine
    info = await _info(ctx, sandbox_id)  # checks access (the operator reads any)
    requester = None if info.owner != ctx.agent and ctx.principal.operator else ctx.agent
    if requester is None:
        result = await engine.wait(sandbox_id, None, timeout=timeout)
    else:
        result = await engine.wait(sandbox_id, requester, timeout=timeout)
    return 200, exec_result_values(result)


async def forget(ctx: Context) -> tuple[int, Any]:
    await ctx.state.engine.forget(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, _ack()


async def io_log(ctx: Context) -> tuple[int, Any]:
    calls = await ctx.state.engine.io_log(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, {"calls": [dataclasses.asdict(call) for call in calls]}


#: The most output bytes one ``/output`` reply carries (``limit`` may ask for fewer).
OUTPUT_CHUNK: Final = 256 * 1024


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
    info = await _info(ctx, sandbox_id)  # checks access (the operator reads any)
    reader = info.owner if info.owner != ctx.agent and ctx.principal.operator else ctx.agent
    data = await ctx.state.engine.output(sandbox_id, reader, offset=offset)
    chunk = data[:limit]
    return 200, {
        "sandbox_id": sandbox_id,
        "state": info.state,
        "offset": offset,
        "next_offset": offset + len(chunk),
        "length": offset + len(data),
        "data": chunk,
    }


async def run_record(ctx: Context) -> tuple[int, Any]:
    record = await ctx.state.engine.run_record(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, {
        "program_id": record.program_id,
        "memory_quota": record.memory_quota,
        "tick_budget": record.tick_budget,
        "deliveries": len(record.deliveries),
        "record": record.to_bytes(),
    }


async def request_proof(ctx: Context) -> tuple[int, Any]:
    proof = await ctx.state.engine.request_proof(path_id(ctx, "sandbox_id"), ctx.agent)
    return 200, proof_result_values(proof)


async def grant(ctx: Context) -> tuple[int, Any]:
    operations = [Access(name) for name in ctx.values["operations"]]
    await ctx.state.engine.grant(
        path_id(ctx, "sandbox_id"), ctx.agent, ctx.values["agent"], operations
    )
    return 200, _ack()


async def revoke(ctx: Context) -> tuple[int, Any]:
    from kforge.core import AgentId

    agent = AgentId(path_id(ctx, "agent").raw)
    await ctx.state.engine.revoke(path_id(ctx, "sandbox_id"), ctx.agent, agent)
    return 200, _ack()


# ------------------------------------------------------------------ linking, cycles, services


async def link(ctx: Context) -> tuple[int, Any]:
    imports = [Import(entry["from"], tuple(entry["symbols"])) for entry in ctx.values["imports"]]
    resolved = await ctx.state.engine.link_resolve(ctx.values["program"], imports, ctx.agent)
    return 200, {"resolved": resolved}


async def begin_cycle(ctx: Context) -> tuple[int, Any]:
    if not ctx.principal.operator:
        raise PermissionDenied("only the operator may start a cycle")
    given = ctx.values["allowances"]
    allowances = {entry["agent"]: entry["ticks"] for entry in given} if given is not None else None
    return 200, {"cycle": await ctx.state.engine.begin_cycle(allowances)}


def _services_supported(ctx: Context, method: str) -> Any:
    found = getattr(ctx.state.engine, method, None)
    if found is None:
        raise NotSupported(f"services ({method}) on this engine")
    return found


def _plain(item: Any) -> Any:
    return (
        dataclasses.asdict(item)
        if dataclasses.is_dataclass(item) and not isinstance(item, type)
        else item
    )


async def list_services(ctx: Context) -> tuple[int, Any]:
    """Every service (services are public), once the engine has them; else ``supported: false``."""
    lister = getattr(ctx.state.engine, "list_services", None)
    if lister is None:
        return 200, {"supported": False, "services": []}
    return 200, {"supported": True, "services": [_plain(item) for item in await lister()]}


async def service_info(ctx: Context) -> tuple[int, Any]:
    info = _services_supported(ctx, "service_info")
    return 200, _plain(await info(path_id(ctx, "service_id")))


async def create_service(ctx: Context) -> tuple[int, Any]:
    """SERVICE_CREATE as the caller (who must be the owner)."""
    values = ctx.values
    owner = values["owner"] or ctx.agent
    if owner != ctx.agent:
        raise PermissionDenied(f"agent {ctx.agent} may not create a service owned by {owner}")
    service = Service(
        owner=owner,
        sandbox=values["sandbox"],
        name=values["name"],
        tick_budget=values["tick_budget"],
        auto_fund=values["auto_fund"],
        endpoints=tuple(
            Endpoint(e["name"], e["channel"], e["schema"]) for e in values["endpoints"]
        ),
        id=values["id"],
    )
    return 201, {"service_id": await ctx.state.engine.create_service(service)}


async def call_service(ctx: Context) -> tuple[int, Any]:
    """Call an endpoint and wait (up to ``timeout``) for the service's answer."""
    call = _services_supported(ctx, "call_service")
    timeout = query_number(ctx, "timeout", 30.0, 0.0, ctx.state.config.max_wait_seconds)
    service_id = path_id(ctx, "service_id")
    result = await asyncio.wait_for(
        call(service_id, ctx.values["endpoint"], ctx.values["data"], ctx.agent), timeout
    )
    return 200, _plain(result)


async def fund_service(ctx: Context) -> tuple[int, Any]:
    fund = _services_supported(ctx, "fund_service")
    await fund(path_id(ctx, "service_id"), ctx.agent)
    return 200, _ack()


async def stats(ctx: Context) -> tuple[int, Any]:
    engine = ctx.state.engine
    infos = await engine.list_sandboxes(None if ctx.principal.operator else ctx.agent)
    by_state: dict[str, int] = {}
    for info in infos:
        by_state[info.state.value] = by_state.get(info.state.value, 0) + 1
    return 200, {
        "sandboxes": len(infos),
        "by_state": by_state,
        "events_published": engine.bus.published,
        "debug_sessions": len(ctx.state.debug),
    }


# ------------------------------------------------------------------ messages


def envelope_values(envelope: Envelope) -> dict[str, Any]:
    """An envelope for JSON: the payload decoded under its code when it fits."""
    try:
        payload: Any = decode_payload(envelope.code, envelope.payload)
    except InvalidRequest:
        payload = envelope.payload
    values = {
        "id": envelope.id,
        "sender": envelope.sender,
        "code": envelope.code,
        "code_name": code_name(envelope.code),
        "payload": payload,
        "timestamp": envelope.timestamp,
        "reply_to": envelope.reply_to,
    }
    if envelope.code == ReplyCode.ERROR and isinstance(payload, dict):
        values["error_message"] = payload["message"].decode("utf-8", "replace")
    return values


def _envelope_from_body(ctx: Context) -> Envelope:
    """msgpack: the body is the envelope map; JSON: ``{code, payload, id?}``."""
    if ctx.msgpack:
        return Envelope.decode(pack(ctx.body))
    body = ctx.body
    if not isinstance(body, dict) or set(body) - {"code", "payload", "id"}:
        raise InvalidRequest("body", "expected {code, payload, id?}")
    code = StructField((Field("code", UIntField(16)),)).decode({"code": body.get("code")}, "")[
        "code"
    ]
    fields = SCHEMAS.get(code, ())
    payload_wire = json_to_wire(StructField(fields), body.get("payload", {}), "payload")
    envelope_id = body.get("id")
    raw_id = (
        json_to_wire(HashField(), envelope_id, "id") if envelope_id is not None else os.urandom(32)
    )
    if len(raw_id) != 32:
        raise InvalidRequest("id", "expected 64 hex digits")
    try:
        payload = pack(payload_wire)
    except (OverflowError, ValueError, TypeError) as error:  # huge ints, lone surrogates
        raise InvalidRequest(
            "payload", f"cannot be encoded as msgpack ({type(error).__name__})"
        ) from None
    return Envelope(
        Hash256(raw_id),
        ctx.agent,
        code,
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
    box = ctx.state.engine.mailbox
    envelopes = box.drain(ctx.agent)
    if not envelopes and timeout > 0:
        try:
            envelopes = [await asyncio.wait_for(box.get(ctx.agent), timeout)]
        except TimeoutError:
            envelopes = []
        envelopes += box.drain(ctx.agent)
    if wants_msgpack(ctx.request.headers.get("accept"), ctx.request.headers.get("content-type")):
        return 200, {"envelopes": [unpack(envelope.encode()) for envelope in envelopes]}
    return 200, {"envelopes": [envelope_values(envelope) for envelope in envelopes]}


# ------------------------------------------------------------------ the table

_SANDBOX = "/v1/sandboxes/{sandbox_id}"
_TIMEOUT = Query("timeout", {"type": "number", "minimum": 0, "maximum": 60}, "seconds to wait")
_EVENT_KINDS = [kind.name for kind in EVENT_FIELDS]
_NOT_MINE = (400, 403, 404)

OPERATIONS: Final[tuple[Operation, ...]] = (
    Operation(
        "GET",
        "/v1/health",
        health,
        "Liveness and the engine's state",
        authenticated=False,
        response={"type": "object"},
        tag="server",
    ),
    Operation(
        "POST",
        "/v1/session",
        create_session,
        "Trade a signed request for a bearer token",
        status=201,
        signature_only=True,
        tag="identity",
        response={
            "type": "object",
            "properties": {
                "token": {"type": "string"},
                "agent": _ID,
                "expires_at_ms": {"type": "integer"},
            },
        },
    ),
    Operation(
        "GET",
        "/v1/whoami",
        whoami,
        "Who the server takes the caller for",
        tag="identity",
        response={"type": "object"},
    ),
    Operation(
        "POST",
        "/v1/programs",
        put_program,
        "Store a program (assembly or FRGP) in the vault",
        fields=PROGRAM_FIELDS,
        status=201,
        errors=(400,),
        tag="programs",
        response={"type": "object", "properties": {"program_id": _ID}},
    ),
    Operation(
        "GET",
        "/v1/programs/{program_id}",
        get_program,
        "A stored program's disassembly",
        errors=(400, 404),
        tag="programs",
        response={"type": "object"},
    ),
    Operation(
        "POST",
        "/v1/sandboxes",
        create_sandbox,
        "Create a sandbox (SANDBOX_CREATE)",
        fields=CREATE_FIELDS,
        status=201,
        errors=(400, 403, 404, 422, 429),
        response={"type": "object", "properties": {"sandbox_id": _ID}, "required": ["sandbox_id"]},
    ),
    Operation(
        "GET",
        "/v1/sandboxes",
        list_sandboxes,
        "The caller's sandboxes (all: the operator's view)",
        query=(Query("all", {"type": "boolean"}, "every sandbox (operator only)"),),
        errors=(400, 403),
        response={
            "type": "object",
            "properties": {"sandboxes": {"type": "array", "items": _SHOWN}},
        },
    ),
    Operation(
        "GET",
        _SANDBOX,
        sandbox_status,
        "A sandbox's status (SANDBOX_STATUS)",
        errors=_NOT_MINE,
        response=_SHOWN,
    ),
    Operation(
        "DELETE",
        _SANDBOX,
        forget,
        "Forget a stopped sandbox",
        errors=(*_NOT_MINE, 409),
        response=_OBJECT,
    ),
    Operation(
        "POST",
        _SANDBOX + "/start",
        exec_start,
        "Start execution (EXEC_START)",
        status=202,
        errors=(*_NOT_MINE, 409, 429),
        response=_OBJECT,
    ),
    Operation(
        "POST",
        _SANDBOX + "/step",
        step,
        "Execute one instruction",
        errors=(*_NOT_MINE, 409),
        response={"type": "object", "properties": {"state": {"type": "string"}}},
    ),
    Operation(
        "POST",
        _SANDBOX + "/kill",
        kill,
        "Kill (SANDBOX_KILL)",
        errors=(*_NOT_MINE, 409),
        response=_OBJECT,
    ),
    Operation(
        "POST",
        _SANDBOX + "/deliver",
        deliver,
        "Input on stdin (SANDBOX_DELIVER)",
        fields=DELIVER_FIELDS,
        errors=(*_NOT_MINE, 409),
        response=_OBJECT,
    ),
    Operation(
        "GET",
        _SANDBOX + "/wait",
        wait,
        "The result once stopped (EXEC_RESULT)",
        query=(_TIMEOUT,),
        errors=(*_NOT_MINE, 408),
        response=_RESULT,
    ),
    Operation(
        "GET",
        _SANDBOX + "/io",
        io_log,
        "Every host call with its tick",
        errors=_NOT_MINE,
        response={"type": "object"},
    ),
    Operation(
        "GET",
        _SANDBOX + "/output",
        output,
        "Its stdout from offset on, live or stopped",
        query=(
            Query("offset", {"type": "integer", "minimum": 0}, "bytes already read (0..length)"),
            Query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": OUTPUT_CHUNK},
                f"at most this many bytes (default {OUTPUT_CHUNK})",
            ),
        ),
        errors=_NOT_MINE,
        response={
            "type": "object",
            "properties": {
                "sandbox_id": _ID,
                "state": {"type": "string"},
                "offset": {"type": "integer"},
                "next_offset": {"type": "integer"},
                "length": {"type": "integer"},
                "data": _HEX,
            },
            "required": ["sandbox_id", "state", "offset", "next_offset", "length", "data"],
        },
    ),
    Operation(
        "GET",
        _SANDBOX + "/record",
        run_record,
        "The run record (replay input)",
        errors=_NOT_MINE,
        response={"type": "object"},
    ),
    Operation(
        "POST",
        _SANDBOX + "/proof",
        request_proof,
        "An execution proof (PROOF_REQUEST)",
        errors=(*_NOT_MINE, 409, 429),
        response={"type": "object"},
    ),
    Operation(
        "POST",
        _SANDBOX + "/grants",
        grant,
        "Let another agent act on the sandbox",
        fields=GRANT_FIELDS,
        errors=_NOT_MINE,
        response=_OBJECT,
    ),
    Operation(
        "DELETE",
        _SANDBOX + "/grants/{agent}",
        revoke,
        "Take back an agent's grants",
        errors=_NOT_MINE,
        response=_OBJECT,
    ),
    Operation(
        "POST",
        "/v1/link",
        link,
        "Link a program with its imports (LINK_RESOLVE)",
        fields=SCHEMAS[MessageCode.LINK_RESOLVE],
        errors=(400, 404, 429),
        response={"type": "object", "properties": {"resolved": _ID}},
    ),
    Operation(
        "POST",
        "/v1/cycles",
        begin_cycle,
        "Start the next cycle (operator only)",
        fields=CYCLE_FIELDS,
        errors=(400, 403),
        response={"type": "object"},
    ),
    Operation(
        "GET",
        "/v1/services",
        list_services,
        "Every service, when the engine has them",
        tag="services",
        response={"type": "object"},
    ),
    Operation(
        "POST",
        "/v1/services",
        create_service,
        "Make a persistent sandbox a service (SERVICE_CREATE)",
        fields=SERVICE_FIELDS,
        status=201,
        errors=(400, 403, 404, 409, 429, 501),
        tag="services",
        response={"type": "object", "properties": {"service_id": _ID}},
    ),
    Operation(
        "GET",
        "/v1/services/{service_id}",
        service_info,
        "A service's standing",
        tag="services",
        errors=(400, 404, 501),
        response={"type": "object"},
    ),
    Operation(
        "POST",
        "/v1/services/{service_id}/call",
        call_service,
        "Call an endpoint (SERVICE_CALL)",
        fields=CALL_FIELDS,
        query=(_TIMEOUT,),
        errors=(400, 403, 404, 408, 409, 429, 501),
        tag="services",
        response={"type": "object"},
    ),
    Operation(
        "POST",
        "/v1/services/{service_id}/fund",
        fund_service,
        "Pay this cycle of a service",
        errors=(400, 403, 404, 409, 429, 501),
        tag="services",
        response={"type": "object"},
    ),
    Operation(
        "GET",
        "/v1/stats",
        stats,
        "Counts for the dashboard",
        tag="server",
        response={"type": "object"},
    ),
    Operation(
        "POST",
        "/v1/messages",
        send_message,
        "Dispatch one Forge message envelope",
        raw_body=True,
        body_schema={
            "type": "object",
            "properties": {
                "code": {"type": "integer", "minimum": 0, "maximum": 65535},
                "payload": {"type": "object"},
                "id": _ID,
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
        query=(_TIMEOUT,),
        errors=(400,),
        tag="messages",
        response={
            "type": "object",
            "properties": {"envelopes": {"type": "array", "items": _ENVELOPE}},
        },
    ),
)
