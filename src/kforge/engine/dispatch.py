"""Message dispatch: inbound envelopes (seed §5) to engine calls, and the replies.

Replies (``docs/engine.md`` has the table):

- ``SANDBOX_CREATE`` → ``ACK {sandbox_id}``; ``SANDBOX_KILL`` → ``ACK {}``;
- ``SANDBOX_STATUS`` → ``SANDBOX_INFO`` (the seed's ``SandboxInfo``);
- ``EXEC_START`` → ``ACK {}`` at once, then ``EXEC_RESULT`` in the engine's
  mailbox for the sender (``reply_to`` = the request's id) when it stops;
- ``SANDBOX_DELIVER`` (extension) → ``ACK {}``;
- ``PROOF_REQUEST`` → ``ACK {}`` at once (after the checks and the charge), then
  ``PROOF_RESULT`` (or ``ERROR``) in the mailbox when the proof is generated;
- ``LINK_RESOLVE`` → ``LINK_RESULT {resolved}``;
- ``SERVICE_CREATE`` → ``ACK {service_id}`` (the owner must be the sender);
- ``SERVICE_CALL`` → ``ACK {}`` at once, then ``SERVICE_RESULT`` (or ``ERROR``
  when the service stopped before answering) in the mailbox;
- ``SERVICE_FUND`` (extension) → ``ACK {}``;
- ``CYCLE_ADVANCE`` (extension) → ``ACK {cycle}`` (only ``Engine.cycle_agents``
  when that is set);
- any refusal → ``ERROR`` carrying the ``KingdomError``; a malformed envelope or
  payload is ``InvalidRequest`` naming the field.  Nothing escapes as an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kforge.core import (
    AgentId,
    ForgeError,
    Hash256,
    Internal,
    MessageCode,
    NotSupported,
    PermissionDenied,
)
from kforge.engine.artifacts import ProofJob, proof_result_values
from kforge.engine.models import (
    CreateSandbox,
    Endpoint,
    ExecResult,
    SandboxInfo,
    SandboxState,
    Service,
    ServiceResult,
)
from kforge.isa import FaultCode
from kforge.link import Import
from kforge.messages import (
    Envelope,
    ExtensionCode,
    InvalidRequest,
    ReplyCode,
    code_name,
    decode_payload,
    encode_payload,
    error_payload,
)

if TYPE_CHECKING:
    from kforge.engine.engine import Engine

__all__ = [
    "Dispatcher",
    "create_request_from_values",
    "exec_result_from_values",
    "exec_result_values",
    "sandbox_info_values",
]

Reply = tuple[int, dict[str, Any]]
Handler = Callable[[Envelope, dict[str, Any]], Awaitable[Reply]]

#: Requests whose handling belongs to later work.
NOT_SUPPORTED: tuple[int, ...] = ()


def create_request_from_values(values: dict[str, Any]) -> CreateSandbox:
    """A ``CreateSandbox`` from a checked ``SANDBOX_CREATE`` payload."""
    deadline_ms = values["deadline_ms"]
    return CreateSandbox(
        owner=values["owner"],
        code=values["code"],
        memory_quota=values["memory_quota"],
        tick_budget=values["tick_budget"],
        input=values["input"],
        environment=values["environment"],
        persistent=values["persistent"],
        grants=frozenset(values["grants"]),
        accept_from=frozenset(values["accept_from"]),
        deadline=deadline_ms / 1000 if deadline_ms is not None else None,
    )


def sandbox_info_values(info: SandboxInfo) -> dict[str, Any]:
    """The ``SANDBOX_INFO`` payload values of ``info``."""
    return {
        "id": info.id,
        "owner": info.owner,
        "state": info.state.value,
        "ticks_used": info.ticks_used,
        "ticks_remaining": info.ticks_remaining,
        "memory_used": info.memory_used,
        "memory_quota": info.memory_quota,
        "persistent": info.persistent,
        "blocked_channel": info.blocked_channel,
    }


def exec_result_values(result: ExecResult) -> dict[str, Any]:
    """The ``EXEC_RESULT`` payload values of ``result``."""
    return {
        "sandbox_id": result.sandbox_id,
        "state": result.state.value,
        "ticks_used": result.ticks_used,
        "output": result.output,
        "fault": int(result.fault) if result.fault is not None else None,
        "fault_detail": result.fault_detail,
    }


def exec_result_from_values(values: dict[str, Any]) -> ExecResult:
    """An ``ExecResult`` from a checked ``EXEC_RESULT`` payload (for clients)."""
    fault = values["fault"]
    return ExecResult(
        values["sandbox_id"],
        SandboxState(values["state"]),
        values["ticks_used"],
        values["output"],
        FaultCode(fault) if fault is not None else None,
        values["fault_detail"],
    )


class Dispatcher:
    """Turns envelopes into engine calls and results into reply envelopes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._handlers: dict[int, Handler] = {
            MessageCode.SANDBOX_CREATE: self._create,
            MessageCode.SANDBOX_STATUS: self._status,
            MessageCode.SANDBOX_KILL: self._kill,
            MessageCode.EXEC_START: self._exec_start,
            ExtensionCode.SANDBOX_DELIVER: self._deliver,
            MessageCode.PROOF_REQUEST: self._proof_request,
            MessageCode.LINK_RESOLVE: self._link_resolve,
            MessageCode.SERVICE_CREATE: self._service_create,
            MessageCode.SERVICE_CALL: self._service_call,
            ExtensionCode.SERVICE_FUND: self._service_fund,
            ExtensionCode.CYCLE_ADVANCE: self._cycle_advance,
        }
        for code in NOT_SUPPORTED:
            self._handlers[code] = self._not_supported

    # ------------------------------------------------------------------ replies

    def _envelope(self, code: int, payload: bytes, reply_to: Hash256 | None) -> Envelope:
        engine = self.engine
        return Envelope(
            engine.new_envelope_id(),
            engine.agent_id,
            int(code),
            payload,
            engine.clock.time_ms(),
            reply_to,
        )

    def reply(self, request: Envelope, code: int, values: dict[str, Any]) -> Envelope:
        return self._envelope(code, encode_payload(code, values), request.id)

    def error_reply(self, error: ForgeError, reply_to: Hash256 | None) -> Envelope:
        return self._envelope(ReplyCode.ERROR, error_payload(error.to_kingdom_error()), reply_to)

    def exec_result_envelope(self, result: ExecResult, reply_to: Hash256) -> Envelope:
        """The ``EXEC_RESULT`` sent when an execution started by message stops."""
        return self._envelope(
            MessageCode.EXEC_RESULT,
            encode_payload(MessageCode.EXEC_RESULT, exec_result_values(result)),
            reply_to,
        )

    def service_result_envelope(self, result: ServiceResult, reply_to: Hash256) -> Envelope:
        """The ``SERVICE_RESULT`` sent when a call made by message is answered."""
        values = {
            "service_id": result.service_id,
            "endpoint": result.endpoint,
            "data": result.data,
            "ticks_used": result.ticks_used,
        }
        return self._envelope(
            MessageCode.SERVICE_RESULT, encode_payload(MessageCode.SERVICE_RESULT, values), reply_to
        )

    # ------------------------------------------------------------------ dispatching

    async def dispatch(self, envelope: Envelope) -> Envelope:
        reply_to = envelope.id if isinstance(envelope, Envelope) else None
        try:
            if not isinstance(envelope, Envelope):
                raise InvalidRequest(
                    "envelope", f"expected an Envelope, got {type(envelope).__name__}"
                )
            handler = self._handlers.get(envelope.code)
            if handler is None:
                raise InvalidRequest(
                    "envelope.code",
                    f"{code_name(envelope.code)} is not a request the Forge engine takes",
                )
            values = decode_payload(envelope.code, envelope.payload)
            code, reply_values = await handler(envelope, values)
            return self.reply(envelope, code, reply_values)
        except ForgeError as error:
            return self.error_reply(error, reply_to)
        except Exception as error:  # a bug must still be answered, not raised
            return self.error_reply(Internal(f"{type(error).__name__}: {error}"), reply_to)

    async def dispatch_bytes(self, raw: bytes) -> bytes:
        try:
            envelope = Envelope.decode(raw)
        except ForgeError as error:
            return self.error_reply(error, None).encode()
        except Exception as error:
            return self.error_reply(Internal(f"{type(error).__name__}: {error}"), None).encode()
        return (await self.dispatch(envelope)).encode()

    # ------------------------------------------------------------------ handlers

    async def _create(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        request = create_request_from_values(values)
        if request.owner != envelope.sender:
            raise PermissionDenied(
                f"agent {envelope.sender} may not create a sandbox owned by {request.owner}"
            )
        sandbox_id = await self.engine.create_sandbox(request)
        return ReplyCode.ACK, {"sandbox_id": sandbox_id}

    async def _status(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        info = await self.engine.sandbox_status(values["sandbox_id"], envelope.sender)
        return ReplyCode.SANDBOX_INFO, sandbox_info_values(info)

    async def _kill(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        await self.engine.kill_sandbox(values["sandbox_id"], envelope.sender)
        return ReplyCode.ACK, {}

    async def _exec_start(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        sender: AgentId = envelope.sender
        await self.engine._exec_start(values["sandbox_id"], sender, notify=(sender, envelope.id))
        return ReplyCode.ACK, {}

    async def _deliver(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        await self.engine.deliver(
            values["sandbox_id"], values["channel"], values["data"], envelope.sender
        )
        return ReplyCode.ACK, {}

    async def _link_resolve(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        imports = [Import(entry["from"], tuple(entry["symbols"])) for entry in values["imports"]]
        resolved = await self.engine.link_resolve(values["program"], imports, envelope.sender)
        return ReplyCode.LINK_RESULT, {"resolved": resolved}

    async def _proof_request(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        job = self.engine._prepare_proof(values["sandbox_id"], envelope.sender)
        self.engine._spawn(self._deliver_proof(job, envelope.sender, envelope.id))
        return ReplyCode.ACK, {}

    async def _deliver_proof(self, job: ProofJob, recipient: AgentId, reply_to: Hash256) -> None:
        """Generate the proof and post PROOF_RESULT, or ERROR when generation fails."""
        try:
            proof = await self.engine._prove(job)
        except ForgeError as error:
            self.engine.mailbox.post(recipient, self.error_reply(error, reply_to))
            return
        except Exception as error:
            failure = Internal(f"{type(error).__name__}: {error}")
            self.engine.mailbox.post(recipient, self.error_reply(failure, reply_to))
            return
        payload = encode_payload(MessageCode.PROOF_RESULT, proof_result_values(proof))
        self.engine.mailbox.post(
            recipient, self._envelope(MessageCode.PROOF_RESULT, payload, reply_to)
        )

    async def _service_create(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        if values["owner"] != envelope.sender:
            raise PermissionDenied(
                f"agent {envelope.sender} may not create a service owned by {values['owner']}"
            )
        service = Service(
            owner=values["owner"],
            sandbox=values["sandbox"],
            name=values["name"],
            tick_budget=values["tick_budget"],
            auto_fund=values["auto_fund"],
            endpoints=tuple(
                Endpoint(e["name"], e["channel"], e["schema"]) for e in values["endpoints"]
            ),
            id=values["id"],
        )
        service_id = await self.engine.create_service(service)
        return ReplyCode.ACK, {"service_id": service_id}

    async def _service_call(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        engine = self.engine
        engine._require_open()
        engine._queue_call(
            values["service_id"],
            values["endpoint"],
            values["data"],
            envelope.sender,
            notify=(envelope.sender, envelope.id),
        )
        engine._commit()
        return ReplyCode.ACK, {}

    async def _service_fund(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        await self.engine.fund_service(values["service_id"], envelope.sender)
        return ReplyCode.ACK, {}

    async def _cycle_advance(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        agents = self.engine.cycle_agents
        if agents is not None and envelope.sender not in agents:
            raise PermissionDenied(f"agent {envelope.sender} may not advance the engine's cycles")
        allowances = {entry["agent"]: entry["ticks"] for entry in values["allowances"]}
        cycle = await self.engine.begin_cycle(allowances or None)
        return ReplyCode.ACK, {"cycle": cycle}

    async def _not_supported(self, envelope: Envelope, values: dict[str, Any]) -> Reply:
        raise NotSupported(code_name(envelope.code))
