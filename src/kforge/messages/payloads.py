"""The payload of every Forge message code, each one schema (seed §5, §6.1, plus extensions).

These are the engine's own request and result types too: ``CreateSandbox`` is
the ``SANDBOX_CREATE`` payload, ``SandboxInfo`` the ``SANDBOX_INFO`` reply,
``ExecResult`` the ``EXEC_RESULT`` message, and so on.  The message layer, the
journal, the HTTP API (and its OpenAPI document), the client and the command
line all read and write them through :mod:`kforge.wire`.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Final

import msgspec

from kforge.core import AgentId, ErrorCategory, Hash256, InvalidRequest, MessageCode
from kforge.isa import FaultCode
from kforge.link import Import
from kforge.messages.codes import ExtensionCode, ReplyCode
from kforge.wire import U8, U32, U63, U64, Schema, checked_value

__all__ = [
    "SCHEMAS",
    "Ack",
    "Allowance",
    "CreateSandbox",
    "CycleAdvance",
    "Endpoint",
    "ErrorReply",
    "ExecResult",
    "LinkResolve",
    "LinkResult",
    "Operation",
    "ProofResult",
    "SandboxDeliver",
    "SandboxInfo",
    "SandboxRef",
    "SandboxState",
    "Service",
    "ServiceCallRequest",
    "ServiceFund",
    "ServiceInfo",
    "ServiceResult",
    "ServiceState",
]

#: A channel number (0..15).
ChannelNumber = Annotated[int, msgspec.Meta(ge=0, le=15)]
#: Milliseconds, at least 1.
Milliseconds = Annotated[int, msgspec.Meta(ge=1)]


class SandboxState(Enum):
    """Where a sandbox is in its life.

    ``CREATED → READY → RUNNING ↔ BLOCKED → HALTED | FAULTED | KILLED | DEADLINE_EXCEEDED
    | HOST_MEMORY_EXCEEDED``.  CREATED lasts only while ``create_sandbox`` builds the
    machine.  The last two are the engine's own outcomes, not machine faults (so
    they have no fault code): DEADLINE_EXCEEDED, the execution ran past its
    wall-clock deadline, or the sandbox waited too long to be started;
    HOST_MEMORY_EXCEEDED, what the host would have held for the sandbox (the
    replies to its host calls, its logs) went past its host-memory budget.
    """

    CREATED = "CREATED"
    READY = "READY"
    RUNNING = "RUNNING"
    BLOCKED = "BLOCKED"
    HALTED = "HALTED"
    FAULTED = "FAULTED"
    KILLED = "KILLED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    HOST_MEMORY_EXCEEDED = "HOST_MEMORY_EXCEEDED"

    #: Set on each member below.  Performance note: a flag read, not a lookup by the
    #: enum's hash (the engine asks this several times per host call).
    _final: bool

    @property
    def is_final(self) -> bool:
        return self._final

    @property
    def is_live(self) -> bool:
        return not self._final


_FINAL: Final = frozenset(
    {
        SandboxState.HALTED,
        SandboxState.FAULTED,
        SandboxState.KILLED,
        SandboxState.DEADLINE_EXCEEDED,
        SandboxState.HOST_MEMORY_EXCEEDED,
    }
)
for _state in SandboxState:
    _state._final = _state in _FINAL


class Operation(Enum):
    """What an agent other than the owner may be granted on a sandbox."""

    STATUS = "status"
    EXEC = "exec"  # exec_start and step
    KILL = "kill"
    DELIVER = "deliver"


class ServiceState(Enum):
    """ACTIVE: runs and takes calls; SUSPENDED: unpaid this cycle (calls wait);
    FAILED: its sandbox stopped (calls are refused)."""

    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"
    FAILED = "FAILED"


# ----------------------------------------------------------------- sandboxes


class CreateSandbox(Schema, frozen=True):
    """A request for a new sandbox (seed §3.10, plus engine options; ``SANDBOX_CREATE``).

    ``environment`` (``None``: empty) is what the program finds in its
    environment block; ``grants`` are the extra channels (3..7) the sandbox may use; ``accept_from``
    the owners whose sandboxes may send to it on channel 7 (its own owner's
    always may); ``deadline_ms`` the wall-clock milliseconds one execution may
    take (``None``: the preset's or the engine's default).  ``imports`` name the
    dependencies of a program that ``.import``s symbols: the engine links it
    from the vault at creation (2 ticks per import).  ``preset`` (``minimal``,
    ``standard``, ``generous``; see :mod:`kforge.engine.presets`) fills the
    quota, budget, deadline and grants that are left out.
    """

    owner: AgentId
    code: Hash256
    memory_quota: U64 | None = None
    tick_budget: U64 | None = None
    input: bytes = b""
    # Performance note: None, not an empty map: an idle sandbox keeps its request.
    environment: dict[bytes, bytes] | None = None
    persistent: bool = False
    grants: frozenset[ChannelNumber] = frozenset()
    accept_from: frozenset[AgentId] = frozenset()
    deadline_ms: Milliseconds | None = None
    imports: tuple[Import, ...] = ()
    preset: str | None = None

    def validate(self) -> CreateSandbox:
        """This request with its field types checked (a request built in Python is not).

        Raises ``InvalidRequest`` naming the first field that does not fit.
        """
        if not isinstance(self, CreateSandbox):
            raise InvalidRequest("request", f"expected a CreateSandbox, got {type(self).__name__}")
        return checked_value(self, "request")

    @property
    def deadline(self) -> float | None:
        """``deadline_ms`` in seconds."""
        return self.deadline_ms / 1000 if self.deadline_ms is not None else None


class SandboxRef(Schema, frozen=True):
    """``SANDBOX_STATUS``, ``SANDBOX_KILL``, ``EXEC_START``, ``PROOF_REQUEST``: which sandbox."""

    sandbox_id: Hash256


class SandboxDeliver(Schema, frozen=True):
    """``SANDBOX_DELIVER`` (extension): input for a sandbox (stdin)."""

    sandbox_id: Hash256
    channel: U8
    data: bytes


class SandboxInfo(Schema, frozen=True):
    """A sandbox's status (seed §3.10, plus ``blocked_channel``; the ``SANDBOX_INFO`` reply).

    ``memory_used`` counts data and environment (``heap_start``), the stack in
    use, and the output and outbound messages the host holds for the sandbox.
    """

    id: Hash256
    owner: AgentId
    state: SandboxState
    ticks_used: U64
    ticks_remaining: U64
    memory_used: U64
    memory_quota: U64
    persistent: bool
    blocked_channel: U8 | None = None


class ExecResult(Schema, frozen=True):
    """The outcome of one execution (seed §3.13, plus the FAULT instruction's
    ``fault_detail``; the ``EXEC_RESULT`` message)."""

    sandbox_id: Hash256
    state: SandboxState
    ticks_used: U64
    output: bytes
    fault: FaultCode | None
    fault_detail: U64 | None = None


# ----------------------------------------------------------------- services


class Endpoint(Schema, frozen=True):
    """A named entry point of a service (seed §3.11): requests arrive on ``channel``
    (one of the sandbox's granted channels 3..7) and the reply is the service's
    next SEND on that same channel.  ``schema`` describes the message format (free text)."""

    name: bytes
    channel: U8
    schema: bytes = b""


class Service(Schema, frozen=True):
    """A request to turn a persistent sandbox into a service (seed §3.11; ``SERVICE_CREATE``).

    ``tick_budget`` is the allocation the sandbox gets at every cycle;
    ``auto_fund`` lets the engine pay each cycle from the owner's account
    (otherwise the owner calls ``fund_service`` each cycle).  ``id`` may be
    left ``None``: the engine assigns one.
    """

    owner: AgentId
    sandbox: Hash256
    name: bytes
    tick_budget: U64
    auto_fund: bool = True
    endpoints: tuple[Endpoint, ...] = ()
    id: Hash256 | None = None

    def validate(self) -> Service:
        """This request with its field types checked (a request built in Python is not)."""
        return checked_value(self, "service")


class ServiceCallRequest(Schema, frozen=True):
    """``SERVICE_CALL``: call an endpoint of a service."""

    service_id: Hash256
    endpoint: bytes
    data: bytes


class ServiceResult(Schema, frozen=True):
    """The answer to one service call (seed §6.1 ``SERVICE_RESULT``).

    ``ticks_used`` counts the service's ticks from the delivery of the request
    to its reply.
    """

    service_id: Hash256
    endpoint: bytes
    data: bytes
    ticks_used: U64


class ServiceFund(Schema, frozen=True):
    """``SERVICE_FUND`` (extension): pay this cycle of a service and resume it."""

    service_id: Hash256


class ServiceInfo(Schema, frozen=True):
    """A service's standing."""

    id: Hash256
    owner: AgentId
    sandbox: Hash256
    name: bytes
    tick_budget: U64
    auto_fund: bool
    endpoints: tuple[Endpoint, ...]
    state: ServiceState
    funded_cycle: U64
    calls_queued: U64
    calls_completed: U64
    in_call: bool


# ----------------------------------------------------------------- linking, proofs, cycles


class LinkResolve(Schema, frozen=True):
    """``LINK_RESOLVE``: link a stored program with the dependencies ``imports`` name."""

    program: Hash256
    imports: tuple[Import, ...]


class LinkResult(Schema, frozen=True):
    """The answer to ``LINK_RESOLVE``: the linked program's id."""

    resolved: Hash256


class ProofResult(Schema, frozen=True):
    """``PROOF_RESULT``: the seed's ``ExecutionProof`` fields, plus the whole proof
    (``kforge.proofs.ExecutionProof.to_bytes()``) for verifiers."""

    program: Hash256
    input: Hash256
    output: Hash256
    ticks_used: U64
    trace_hash: Hash256
    forge_sig: bytes
    proof: bytes | msgspec.UnsetType = msgspec.UNSET


class Allowance(Schema, frozen=True):
    """An agent's tick allowance for the cycle being started."""

    agent: AgentId
    ticks: U63


class CycleAdvance(Schema, frozen=True):
    """``CYCLE_ADVANCE`` (extension): begin the engine's next cycle."""

    allowances: tuple[Allowance, ...] = ()


# ----------------------------------------------------------------- replies


class Ack(Schema, frozen=True, omit_defaults=True):
    """``ACK``: a request was done or accepted; what it created, if anything."""

    sandbox_id: Hash256 | None = None
    service_id: Hash256 | None = None
    cycle: U64 | None = None


class ErrorReply(Schema, frozen=True):
    """``ERROR``: a ``KingdomError``."""

    code: U32
    category: ErrorCategory
    message: bytes
    context: dict[bytes, bytes] = msgspec.field(default_factory=dict)


#: The payload schema of every message code.
SCHEMAS: Final[dict[int, type[Schema]]] = {
    MessageCode.SANDBOX_CREATE: CreateSandbox,
    MessageCode.SANDBOX_STATUS: SandboxRef,
    MessageCode.SANDBOX_KILL: SandboxRef,
    MessageCode.EXEC_START: SandboxRef,
    MessageCode.EXEC_RESULT: ExecResult,
    MessageCode.PROOF_REQUEST: SandboxRef,
    MessageCode.PROOF_RESULT: ProofResult,
    MessageCode.SERVICE_CREATE: Service,
    MessageCode.SERVICE_CALL: ServiceCallRequest,
    MessageCode.SERVICE_RESULT: ServiceResult,
    MessageCode.LINK_RESOLVE: LinkResolve,
    ExtensionCode.SANDBOX_DELIVER: SandboxDeliver,
    ExtensionCode.CYCLE_ADVANCE: CycleAdvance,
    ExtensionCode.SERVICE_FUND: ServiceFund,
    ReplyCode.ACK: Ack,
    ReplyCode.ERROR: ErrorReply,
    ReplyCode.SANDBOX_INFO: SandboxInfo,
    ReplyCode.LINK_RESULT: LinkResult,
}
