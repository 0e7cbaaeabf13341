"""Message dispatch: inbound envelopes (seed §5) to engine operations, and the replies.

:meth:`Dispatcher.dispatch` is the single entry point of every message.  Each
code is one action of the engine's policy (:data:`MESSAGE_ACTIONS`,
:mod:`kforge.engine.policy`), and the operation it calls asks the policy, with
the envelope's sender as the requester, exactly as when the same operation is
called by method or over HTTP: one table decides, whatever the way in.  Replies
(``docs/engine.md`` has the table):

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
- ``CYCLE_ADVANCE`` (extension) → ``ACK {cycle}`` (operators only);
- any refusal → ``ERROR`` carrying the ``KingdomError``; a malformed envelope or
  payload is ``InvalidRequest`` naming the field.  Nothing escapes as an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from kforge.core import (
    AgentId,
    ForgeError,
    Hash256,
    Internal,
    InvalidRequest,
    MessageCode,
)
from kforge.engine.artifacts import Artifacts, ProofJob, proof_result
from kforge.engine.context import EngineContext
from kforge.engine.policy import Action
from kforge.engine.sandboxes import Sandboxes
from kforge.engine.service_ops import Services
from kforge.messages import Envelope, ExtensionCode, ReplyCode, code_name, decode_payload
from kforge.messages.payloads import (
    Ack,
    CreateSandbox,
    CycleAdvance,
    LinkResolve,
    LinkResult,
    SandboxDeliver,
    SandboxRef,
    Service,
    ServiceCallRequest,
    ServiceFund,
)
from kforge.wire import Schema

__all__ = ["MESSAGE_ACTIONS", "Dispatcher"]

Reply = tuple[int, Schema]
Handler = Callable[[Envelope, Any], Awaitable[Reply]]
Spawn = Callable[[Coroutine[Any, Any, None]], None]

#: The policy's action of every request code (any other code is refused as unknown).
MESSAGE_ACTIONS: Final[dict[int, Action]] = {
    MessageCode.SANDBOX_CREATE: Action.CREATE_SANDBOX,
    MessageCode.SANDBOX_STATUS: Action.READ_SANDBOX,
    MessageCode.SANDBOX_KILL: Action.KILL,
    MessageCode.EXEC_START: Action.EXECUTE,
    ExtensionCode.SANDBOX_DELIVER: Action.DELIVER,
    MessageCode.PROOF_REQUEST: Action.REQUEST_PROOF,
    MessageCode.LINK_RESOLVE: Action.LINK,
    MessageCode.SERVICE_CREATE: Action.CREATE_SERVICE,
    MessageCode.SERVICE_CALL: Action.CALL_SERVICE,
    ExtensionCode.SERVICE_FUND: Action.FUND_SERVICE,
    ExtensionCode.CYCLE_ADVANCE: Action.BEGIN_CYCLE,
}


class Dispatcher:
    """Turns envelopes into engine operations and their outcomes into reply envelopes."""

    def __init__(
        self,
        ctx: EngineContext,
        sandboxes: Sandboxes,
        services: Services,
        artifacts: Artifacts,
        spawn: Spawn,
    ) -> None:
        self.ctx = ctx
        self.sandboxes = sandboxes
        self.services = services
        self.artifacts = artifacts
        self._spawn = spawn
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
        assert self._handlers.keys() == MESSAGE_ACTIONS.keys()

    # ------------------------------------------------------------------ dispatching

    async def dispatch(self, envelope: Envelope) -> Envelope:
        """Answer one inbound message: ACK, a response, or an ERROR reply (never raises)."""
        replies = self.ctx.replies
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
            payload = decode_payload(envelope.code, envelope.payload)
            code, reply = await handler(envelope, payload)
            return replies.envelope(code, reply, envelope.id)
        except ForgeError as error:
            return replies.error(error, reply_to)
        except Exception as error:  # a bug must still be answered, not raised
            return replies.error(Internal(f"{type(error).__name__}: {error}"), reply_to)

    async def dispatch_bytes(self, raw: bytes) -> bytes:
        """:meth:`dispatch` for an encoded envelope; returns the encoded reply."""
        try:
            envelope = Envelope.decode(raw)
        except ForgeError as error:
            return self.ctx.replies.error(error, None).encode()
        except Exception as error:
            return self.ctx.replies.error(
                Internal(f"{type(error).__name__}: {error}"), None
            ).encode()
        return (await self.dispatch(envelope)).encode()

    # ------------------------------------------------------------------ handlers

    async def _create(self, envelope: Envelope, request: CreateSandbox) -> Reply:
        return ReplyCode.ACK, Ack(sandbox_id=await self.sandboxes.create(request, envelope.sender))

    async def _status(self, envelope: Envelope, ref: SandboxRef) -> Reply:
        return ReplyCode.SANDBOX_INFO, await self.sandboxes.status(ref.sandbox_id, envelope.sender)

    async def _kill(self, envelope: Envelope, ref: SandboxRef) -> Reply:
        await self.sandboxes.kill(ref.sandbox_id, envelope.sender)
        return ReplyCode.ACK, Ack()

    async def _exec_start(self, envelope: Envelope, ref: SandboxRef) -> Reply:
        sender = envelope.sender
        await self.sandboxes.exec_start(ref.sandbox_id, sender, notify=(sender, envelope.id))
        return ReplyCode.ACK, Ack()

    async def _deliver(self, envelope: Envelope, deliver: SandboxDeliver) -> Reply:
        await self.sandboxes.deliver(
            deliver.sandbox_id, deliver.channel, deliver.data, envelope.sender
        )
        return ReplyCode.ACK, Ack()

    async def _link_resolve(self, envelope: Envelope, request: LinkResolve) -> Reply:
        resolved = await self.artifacts.link_resolve(
            request.program, request.imports, envelope.sender
        )
        return ReplyCode.LINK_RESULT, LinkResult(resolved)

    async def _proof_request(self, envelope: Envelope, ref: SandboxRef) -> Reply:
        job = self.artifacts.prepare_proof(ref.sandbox_id, envelope.sender)
        self._spawn(self._deliver_proof(job, envelope.sender, envelope.id))
        return ReplyCode.ACK, Ack()

    async def _deliver_proof(self, job: ProofJob, recipient: AgentId, reply_to: Hash256) -> None:
        """Generate the proof and post PROOF_RESULT, or ERROR when generation fails."""
        replies, mailbox = self.ctx.replies, self.ctx.mailbox
        try:
            proof = await self.artifacts.prove(job)
        except ForgeError as error:
            mailbox.post(recipient, replies.error(error, reply_to))
            return
        except Exception as error:
            mailbox.post(
                recipient, replies.error(Internal(f"{type(error).__name__}: {error}"), reply_to)
            )
            return
        mailbox.post(
            recipient, replies.envelope(MessageCode.PROOF_RESULT, proof_result(proof), reply_to)
        )

    async def _service_create(self, envelope: Envelope, service: Service) -> Reply:
        service_id = await self.services.create_service(service, envelope.sender)
        return ReplyCode.ACK, Ack(service_id=service_id)

    async def _service_call(self, envelope: Envelope, call: ServiceCallRequest) -> Reply:
        self.ctx.require_open()
        self.services.queue_call(
            call.service_id,
            call.endpoint,
            call.data,
            envelope.sender,
            notify=(envelope.sender, envelope.id),
        )
        self.ctx.commit()
        return ReplyCode.ACK, Ack()

    async def _service_fund(self, envelope: Envelope, fund: ServiceFund) -> Reply:
        await self.services.fund_service(fund.service_id, envelope.sender)
        return ReplyCode.ACK, Ack()

    async def _cycle_advance(self, envelope: Envelope, advance: CycleAdvance) -> Reply:
        allowances = {entry.agent: entry.ticks for entry in advance.allowances}
        cycle = await self.services.begin_cycle(allowances or None, envelope.sender)
        return ReplyCode.ACK, Ack(cycle=cycle)
