"""What every part of the engine shares: its state, the way to change it, and its surroundings.

The engine's operations (:mod:`~kforge.engine.sandboxes`,
:mod:`~kforge.engine.service_ops`, :mod:`~kforge.engine.execution`,
:mod:`~kforge.engine.dispatch`) are composed around one :class:`EngineContext`
instead of reaching into an engine class: they read the state through its
public methods and change it only by recording (``ctx.transitions.record``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final

from kforge.accounting import Ledger
from kforge.core import AgentId, EngineNotOpen, ForgeError, Hash256, MessageCode
from kforge.engine.models import (
    Clock,
    EngineLimits,
    ExecResult,
    ServiceResult,
)
from kforge.engine.offload import Offload
from kforge.engine.policy import Policy
from kforge.engine.scheduler import Scheduler
from kforge.engine.state import EngineState
from kforge.engine.transitions import Transitions
from kforge.events import EventBus
from kforge.host import HostRouter
from kforge.messages import Envelope, Mailbox, ReplyCode, encode_payload, error_payload
from kforge.storage import ProgramCache, Vault
from kforge.wire import Schema

__all__ = ["EngineContext", "Identities", "Replies"]

_SANDBOX_DOMAIN: Final = b"kforge/sandbox/v1\0"
_SERVICE_DOMAIN: Final = b"kforge/service/v1\0"
_ENVELOPE_DOMAIN: Final = b"kforge/envelope/v1\0"


class Identities:
    """Ids nobody can guess from caller data: the engine's random secret and a counter, hashed."""

    def __init__(self, secret: bytes, epoch: int) -> None:
        self.secret = secret
        self.epoch = epoch
        self._envelopes = 0

    def sandbox_id(self, counter: int) -> Hash256:
        return Hash256.of(_SANDBOX_DOMAIN + self.secret + counter.to_bytes(8, "big"))

    def service_id(self, counter: int) -> Hash256:
        return Hash256.of(_SERVICE_DOMAIN + self.secret + counter.to_bytes(8, "big"))

    def envelope_id(self) -> Hash256:
        self._envelopes += 1
        epoch = self.epoch.to_bytes(8, "big") if self.epoch else b""
        return Hash256(
            hashlib.sha256(
                _ENVELOPE_DOMAIN + self.secret + epoch + self._envelopes.to_bytes(8, "big")
            ).digest()
        )


class Replies:
    """The envelopes the engine sends: replies, results that come later, errors."""

    def __init__(self, agent_id: AgentId, identities: Identities, clock: Clock) -> None:
        self.agent_id = agent_id
        self._identities = identities
        self._clock = clock

    def envelope(self, code: int, payload: Schema | bytes, reply_to: Hash256 | None) -> Envelope:
        raw = payload if isinstance(payload, bytes) else encode_payload(code, payload)
        return Envelope(
            self._identities.envelope_id(),
            self.agent_id,
            int(code),
            raw,
            self._clock.time_ms(),
            reply_to,
        )

    def error(self, error: ForgeError, reply_to: Hash256 | None) -> Envelope:
        return self.envelope(ReplyCode.ERROR, error_payload(error.to_kingdom_error()), reply_to)

    def exec_result(self, result: ExecResult, reply_to: Hash256) -> Envelope:
        """The ``EXEC_RESULT`` sent when an execution started by message stops."""
        return self.envelope(MessageCode.EXEC_RESULT, result, reply_to)

    def service_result(self, result: ServiceResult, reply_to: Hash256) -> Envelope:
        """The ``SERVICE_RESULT`` sent when a call made by message is answered."""
        return self.envelope(MessageCode.SERVICE_RESULT, result, reply_to)


@dataclass(eq=False)
class EngineContext:
    """The engine's shared parts (one per engine)."""

    state: EngineState
    transitions: Transitions
    ledger: Ledger
    accounting: bool
    limits: EngineLimits
    clock: Clock
    bus: EventBus
    mailbox: Mailbox
    vault: Vault
    programs: ProgramCache
    host: HostRouter
    identities: Identities
    replies: Replies
    agent_id: AgentId
    #: Who may do what, and each agent's share of the pools (``kforge.engine.policy``).
    policy: Policy
    #: Where CPU-heavy work runs, away from the event loop (``kforge.engine.offload``).
    offload: Offload
    scheduler: Scheduler = field(init=False)
    #: The engine's lifecycle, as ``EngineStatus.value`` ("unopened", "open", "closed").
    status: str = "unopened"

    def require_open(self) -> None:
        if self.status != "open":
            raise EngineNotOpen(self.status)

    def record(self, record: object) -> None:
        self.transitions.record(record)  # type: ignore[arg-type]

    def commit(self) -> None:
        self.transitions.commit()
