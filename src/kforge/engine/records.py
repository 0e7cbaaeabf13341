"""Transition records: every change of the engine's state, one typed, frozen value each.

The engine decides (checks, charges, runs machines, asks host adapters) and
then states what changed as a record; :func:`kforge.engine.apply.apply` is the
one function that changes an :class:`~kforge.engine.state.EngineState`, live
and when a state is rebuilt from the journal; the events subscribers see are
derived from the records (:mod:`kforge.engine.projection`).  A record holds
every fact its application and its events need, so a journal of records is
all a rebuild needs, on any storage: a sandbox's machine is brought forward by
running it to the tick count each record names (execution is deterministic).

Each record is a :class:`kforge.wire.Schema` tagged with its class name, so the
journal stores it as msgpack and reads it back as the same type.
"""

from __future__ import annotations

from typing import Final

from kforge.core import AgentId, Hash256
from kforge.engine.models import CreateSandbox, Endpoint, Operation, SandboxState
from kforge.messages.payloads import ProofResult
from kforge.wire import U8, U64, Schema

__all__ = [
    "RECORD_TYPES",
    "AccessGranted",
    "AccessRevoked",
    "AccountsSet",
    "AllocationGranted",
    "CallAnswered",
    "CallQueued",
    "CallStarted",
    "CycleBegan",
    "ExecutionBegan",
    "ExecutionScheduled",
    "HostCallDropped",
    "InputDelivered",
    "ProgramLinked",
    "ProofGenerated",
    "Record",
    "SandboxBlocked",
    "SandboxCreated",
    "SandboxForgotten",
    "SandboxStopped",
    "ServiceCreated",
    "ServiceResumed",
    "ServiceSettled",
    "ServiceSuspended",
    "SliceRan",
    "Stepped",
]


class Record(Schema, frozen=True, tag=True, tag_field="record"):
    """One change of the engine's state (the tag is the class name)."""


# ----------------------------------------------------------------- sandboxes


class SandboxCreated(Record, frozen=True):
    """A READY sandbox running ``program`` (``request.code``, or what it linked to).

    ``counter`` is the sandbox counter its id was drawn with.
    """

    sandbox: Hash256
    counter: U64
    request: CreateSandbox
    program: Hash256


class ExecutionBegan(Record, frozen=True):
    """The sandbox's first execution started; ``reserved`` ticks were set aside for it."""

    sandbox: Hash256
    owner: AgentId
    reserved: U64


class ExecutionScheduled(Record, frozen=True):
    """The scheduler owns the sandbox's execution from now on (with a deadline, or not:
    a service runs without one)."""

    sandbox: Hash256
    deadline: bool


class Stepped(Record, frozen=True):
    """One instruction executed outside the scheduler (``step``), from ``ticks``."""

    sandbox: Hash256
    ticks: U64


class SliceRan(Record, frozen=True):
    """The machine ran on to ``ticks`` and is still running."""

    sandbox: Hash256
    ticks: U64


class SandboxBlocked(Record, frozen=True):
    """The machine waits at ``ticks`` for a message on ``channel``."""

    sandbox: Hash256
    owner: AgentId
    ticks: U64
    channel: U8


class InputDelivered(Record, frozen=True):
    """A message became visible to the machine at ``ticks`` on ``channel``.

    ``request`` and ``status`` are set when it is a host adapter's reply to the
    request the sandbox sent (logged as a ``HostCall``).
    """

    sandbox: Hash256
    ticks: U64
    channel: U8
    data: bytes
    request: bytes | None = None
    status: U8 | None = None


class HostCallDropped(Record, frozen=True):
    """A host call whose reply was not delivered (the sandbox had stopped, or it sent on a
    service endpoint with no call to answer), logged as it was."""

    sandbox: Hash256
    ticks: U64
    channel: U8
    request: bytes
    reply: bytes
    status: U8


class SandboxStopped(Record, frozen=True):
    """The sandbox stopped for good at ``ticks``: its outcome and what its event reports.

    ``fault`` and ``fault_detail`` are the machine's (FAULTED only); ``pc`` where
    it stopped; ``output_hash`` the SHA-256 of its stdout; ``killed_by`` who
    killed it (KILLED only).
    """

    sandbox: Hash256
    owner: AgentId
    state: SandboxState
    ticks: U64
    pc: U64
    output_hash: Hash256
    fault: U8 | None = None
    fault_detail: U64 | None = None
    killed_by: AgentId | None = None


class SandboxForgotten(Record, frozen=True):
    """A stopped sandbox's record was dropped (its id is unknown from now on)."""

    sandbox: Hash256


class AccessGranted(Record, frozen=True):
    """``agent`` may do ``operations`` on the sandbox (replacing what it held)."""

    sandbox: Hash256
    agent: AgentId
    operations: tuple[Operation, ...]


class AccessRevoked(Record, frozen=True):
    """``agent`` holds no grant on the sandbox any more."""

    sandbox: Hash256
    agent: AgentId


# ----------------------------------------------------------------- services


class ServiceCreated(Record, frozen=True):
    """A live persistent sandbox became a service (its first cycle paid)."""

    service: Hash256
    counter: U64
    sandbox: Hash256
    owner: AgentId
    name: bytes
    tick_budget: U64
    auto_fund: bool
    endpoints: tuple[Endpoint, ...]


class AllocationGranted(Record, frozen=True):
    """A service's cycle is paid: its machine may run to ``budget`` ticks from ``ticks``."""

    service: Hash256
    sandbox: Hash256
    ticks: U64
    budget: U64
    cycle: U64
    reserved: U64


class ServiceResumed(Record, frozen=True):
    """A suspended service was paid for and runs again."""

    service: Hash256
    sandbox: Hash256
    owner: AgentId
    cycle: U64


class ServiceSuspended(Record, frozen=True):
    """A service could not be paid for this cycle: it waits (calls queue up)."""

    service: Hash256
    sandbox: Hash256
    owner: AgentId
    cycle: U64
    reason: str


class ServiceSettled(Record, frozen=True):
    """The ticks a service reserved for a cycle were settled with its owner."""

    service: Hash256


class CallQueued(Record, frozen=True):
    """A call waits in the service's queue (``number`` counts every call the engine took).

    Its answer goes to ``caller_sandbox`` (a channel-7 CALL), to ``notify`` (the
    recipient and request id of a ``SERVICE_CALL`` message), or to a live API
    caller (neither).
    """

    service: Hash256
    number: U64
    endpoint: bytes
    data: bytes
    caller: AgentId
    caller_sandbox: Hash256 | None = None
    notify_agent: AgentId | None = None
    notify_request: Hash256 | None = None


class CallStarted(Record, frozen=True):
    """The next call was delivered to the service at ``ticks``."""

    service: Hash256
    number: U64
    ticks: U64
    sandbox: Hash256
    owner: AgentId
    endpoint: bytes
    caller: AgentId


class CallAnswered(Record, frozen=True):
    """The service answered its current call, having used ``ticks_used`` ticks on it."""

    service: Hash256
    number: U64
    sandbox: Hash256
    owner: AgentId
    endpoint: bytes
    ticks_used: U64


# ----------------------------------------------------------------- accounts, cycles, artifacts


class AccountsSet(Record, frozen=True):
    """The ledger's accounts as they are now: ``[agent, allowance, spent, reserved, spark]``."""

    cycle: U64
    rows: tuple[tuple[AgentId, U64, U64, U64, U64], ...]


class CycleBegan(Record, frozen=True):
    """The engine began cycle ``cycle``."""

    cycle: U64


class ProgramLinked(Record, frozen=True):
    """``original`` linked with its imports into ``resolved`` (stored in the vault)."""

    original: Hash256
    resolved: Hash256
    import_count: U64
    requester: AgentId


class ProofGenerated(Record, frozen=True):
    """An execution proof of the sandbox was made and signed (its seed fields)."""

    sandbox: Hash256
    owner: AgentId
    proof: ProofResult


#: Every record type (the journal decodes any of them).
RECORD_TYPES: Final = (
    SandboxCreated,
    ExecutionBegan,
    ExecutionScheduled,
    Stepped,
    SliceRan,
    SandboxBlocked,
    InputDelivered,
    HostCallDropped,
    SandboxStopped,
    SandboxForgotten,
    AccessGranted,
    AccessRevoked,
    ServiceCreated,
    AllocationGranted,
    ServiceResumed,
    ServiceSuspended,
    ServiceSettled,
    CallQueued,
    CallStarted,
    CallAnswered,
    AccountsSet,
    CycleBegan,
    ProgramLinked,
    ProofGenerated,
)

#: Any record, for decoding.
AnyRecord = (
    SandboxCreated
    | ExecutionBegan
    | ExecutionScheduled
    | Stepped
    | SliceRan
    | SandboxBlocked
    | InputDelivered
    | HostCallDropped
    | SandboxStopped
    | SandboxForgotten
    | AccessGranted
    | AccessRevoked
    | ServiceCreated
    | AllocationGranted
    | ServiceResumed
    | ServiceSuspended
    | ServiceSettled
    | CallQueued
    | CallStarted
    | CallAnswered
    | AccountsSet
    | CycleBegan
    | ProgramLinked
    | ProofGenerated
)
