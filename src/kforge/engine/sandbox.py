"""One sandbox and one service as the engine keeps them: the records its state is made of.

Part of the engine's state (:class:`kforge.engine.state.EngineState`); only
:func:`kforge.engine.apply.apply` changes its fields.

Performance note: an idle sandbox must stay small (seed: under 1 KB beyond
its memory and registers), so the lists and maps most sandboxes never use are
made on first use (``None`` until then), the class has slots only, and what
only the live engine needs (who waits for the result, the scheduler's queue
and deadlines) is kept by the parts that need it, for the few sandboxes that
need it.

Services (seed §3.11) are persistent sandboxes answering calls on named
endpoints.  A service owns one persistent sandbox.  Each endpoint names a channel (3..7,
granted to the sandbox).  A call is delivered as one inbound message on the
endpoint's channel; the service's reply is the first message it SENDs on that
channel after the delivery.  Messages the service sends on an endpoint channel
never reach a host adapter, and nothing but requests is ever delivered there.

Calls wait in one FIFO queue per service and never interleave: the next call
is delivered only after the current one was answered and the service's
machine is waiting again (BLOCKED on a RECV, or not yet started).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from kforge.core import AgentId, Hash256, StateCorrupted
from kforge.engine.models import (
    CreateSandbox,
    Endpoint,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
    ServiceInfo,
    ServiceResult,
    ServiceState,
)
from kforge.machine import Delivery, Machine
from kforge.wire import U64, Schema

__all__ = [
    "LOG_ENTRY_BYTES",
    "MAX_SERVICE_NAME",
    "FinalMachine",
    "Sandbox",
    "ServiceCall",
    "ServiceRecord",
    "delivery_bytes",
    "dropped_bytes",
    "held_bytes",
    "memory_used",
    "queued_bytes",
    "recorded_call",
    "request_bytes",
]


#: What the host counts for one entry of a log or queue beyond its bytes (the objects
#: holding it), so that many small entries weigh what they cost.
LOG_ENTRY_BYTES: Final = 128


def memory_used(machine: Machine) -> int:
    """Data and environment, stack in use, and bytes the host holds for the sandbox."""
    return machine.heap_start + (machine.stack_start - machine.sp) + machine.held_bytes


class FinalMachine(Schema, frozen=True):
    """What is kept of a machine once its sandbox has stopped (the machine is freed)."""

    ticks_used: U64
    memory_used: U64
    pc: U64
    deliveries: tuple[Delivery, ...]


class Sandbox:
    """The engine's record of one sandbox.

    ``machine`` is present from READY until the sandbox stops; afterwards the
    record keeps the result, the I/O log and the delivery log (for replay).
    ``program`` is the program the machine runs: ``request.code``, or the
    program it was linked into at creation.  ``scheduled`` is true while the
    scheduler owns its execution (after ``exec_start``); a sandbox driven by
    ``step`` is not scheduled.

    ``host_bytes`` is what the host holds for the live sandbox beyond its memory
    quota (its request's input, its delivery and I/O logs, calls queued for its
    service), counted against its host-memory budget; 0 once it has stopped.
    ``run_digest`` is set when its stopped run went to the engine's archive
    (:mod:`kforge.engine.archive`): the output, the delivery log and the I/O log
    are then read from there, and ``output_length`` is the output's length.
    """

    __slots__ = (
        "access",
        "archived",
        "final",
        "host_bytes",
        "id",
        "io_log",
        "machine",
        "program",
        "request",
        "reserved_ticks",
        "result",
        "scheduled",
        "service",
        "started",
        "state",
        "timer",
    )

    def __init__(self, sandbox_id: Hash256, request: CreateSandbox, program: Hash256) -> None:
        self.id = sandbox_id
        self.request = request
        self.program = program
        self.machine: Machine | None = None
        self.state = SandboxState.CREATED
        self.scheduled = False
        self.started = False
        self.reserved_ticks = 0
        #: Grants to agents other than the owner (``None``: none yet).
        self.access: dict[AgentId, frozenset[Operation]] | None = None
        #: Host calls made so far (``None``: none yet).
        self.io_log: list[HostCall] | None = None
        self.result: ExecResult | None = None
        self.final: FinalMachine | None = None
        #: The service this sandbox runs, if it was made one.
        self.service: ServiceRecord | None = None
        self.host_bytes = 0
        #: The digest and the output's length of its run, once it went to the archive.
        self.archived: tuple[Hash256, int] | None = None
        #: The scheduler's mark of the sandbox's one timer (``kforge.engine.scheduler``).
        self.timer: object = None

    @property
    def owner(self) -> AgentId:
        return self.request.owner

    @property
    def run_digest(self) -> Hash256 | None:
        return self.archived[0] if self.archived is not None else None

    @property
    def output_length(self) -> int:
        return self.archived[1] if self.archived is not None else 0

    def log_call(self, call: HostCall) -> None:
        if self.io_log is None:
            self.io_log = []
        self.io_log.append(call)

    @property
    def ticks_used(self) -> int:
        if self.machine is not None:
            return self.machine.ticks_used
        return self.final.ticks_used if self.final is not None else 0

    @property
    def deliveries(self) -> tuple[Delivery, ...] | list[Delivery]:
        """Every message delivered to the machine, with its tick (the replay log)."""
        if self.machine is not None:
            return self.machine.deliveries
        return self.final.deliveries if self.final is not None else ()

    def info(self) -> SandboxInfo:
        machine = self.machine
        if machine is not None:
            used = memory_used(machine)
            blocked = machine.blocked_channel if self.state is SandboxState.BLOCKED else None
            budget = machine.tick_budget
        else:
            used = self.final.memory_used if self.final is not None else 0
            blocked = None
            budget = self.request.tick_budget or 0
        ticks_used = self.ticks_used
        return SandboxInfo(
            id=self.id,
            owner=self.owner,
            state=self.state,
            ticks_used=ticks_used,
            ticks_remaining=max(0, budget - ticks_used),
            memory_used=used,
            memory_quota=self.request.memory_quota or 0,
            persistent=self.request.persistent,
            blocked_channel=blocked,
        )

    def freeze(self) -> None:
        """Keep what matters of the stopped machine and let its memory go."""
        machine = self.machine
        if machine is None:
            return
        self.final = FinalMachine(
            machine.ticks_used, memory_used(machine), machine.pc, tuple(machine.deliveries)
        )
        self.machine = None


def request_bytes(request: CreateSandbox) -> int:
    """What a creation request makes the host hold for its sandbox: its input (also queued
    on stdin) and its environment."""
    environment = request.environment or {}
    return (
        LOG_ENTRY_BYTES
        + len(request.input)
        + sum(len(key) + len(value) for key, value in environment.items())
    )


def delivery_bytes(data: bytes, request: bytes | None = None) -> int:
    """What one delivery makes the host hold: the message (queued, then in the delivery
    log) and, for a host call's reply, the request in the I/O log."""
    logged = len(request) + LOG_ENTRY_BYTES if request is not None else 0
    return len(data) + LOG_ENTRY_BYTES + logged


def dropped_bytes(request: bytes, reply: bytes) -> int:
    """What a host call logged without a delivery makes the host hold (its I/O log entry)."""
    return len(request) + len(reply) + LOG_ENTRY_BYTES


def queued_bytes(data: bytes) -> int:
    """What one call waiting in a service's queue makes the host hold for the service."""
    return len(data) + LOG_ENTRY_BYTES


def held_bytes(sandbox: Sandbox) -> int:
    """What the host holds for a live sandbox (``Sandbox.host_bytes``): its request, its
    delivery log (holding its unread messages), its I/O log, its service's queued calls.

    Applying records keeps this count as they go; a restored snapshot counts it here.
    """
    held = request_bytes(sandbox.request)
    held += sum(delivery_bytes(delivery.data) for delivery in sandbox.deliveries)
    for call in sandbox.io_log or ():
        held += len(call.request) + LOG_ENTRY_BYTES + (0 if call.delivered else len(call.reply))
    if sandbox.service is not None:
        held += sum(queued_bytes(call.data) for call in sandbox.service.queue)
    return held


MAX_SERVICE_NAME: Final = 255


@dataclass(eq=False, slots=True)
class ServiceCall:
    """One queued or running call and where its answer goes.

    ``future`` is the API caller's; ``notify`` the (recipient, request id) of a
    ``SERVICE_CALL`` message; ``caller_sandbox`` a sandbox that called over
    channel 7 (its ``ticket`` is ``number``).
    """

    number: int
    service_id: Hash256
    endpoint: Endpoint
    data: bytes
    caller: AgentId
    caller_sandbox: Hash256 | None = None
    notify: tuple[AgentId, Hash256] | None = None
    future: asyncio.Future[ServiceResult] | None = None
    ticks_at_delivery: int = 0


def recorded_call(
    service: ServiceRecord,
    number: int,
    endpoint: bytes,
    data: bytes,
    caller: AgentId,
    caller_sandbox: Hash256 | None,
    notify_agent: AgentId | None,
    notify_request: Hash256 | None,
    ticks_at_delivery: int = 0,
) -> ServiceCall:
    """A queued call of ``service`` from the values a record or a snapshot keeps of it.

    Raises ``StateCorrupted`` when the service has no such endpoint.
    """
    found = service.endpoint(endpoint)
    if found is None:
        raise StateCorrupted("engine journal", f"service {service.id} has no endpoint {endpoint!r}")
    notify = (
        (notify_agent, notify_request)
        if notify_agent is not None and notify_request is not None
        else None
    )
    return ServiceCall(
        number, service.id, found, data, caller, caller_sandbox, notify, None, ticks_at_delivery
    )


@dataclass(eq=False, slots=True)
class ServiceRecord:
    """The engine's record of one service."""

    id: Hash256
    owner: AgentId
    sandbox: Sandbox
    name: bytes
    tick_budget: int
    auto_fund: bool
    endpoints: tuple[Endpoint, ...]
    state: ServiceState = ServiceState.ACTIVE
    funded_cycle: int = 0
    #: Ticks reserved from the owner's allowance for the funded cycle (accounting on).
    reserved_ticks: int = 0
    #: The machine's ticks_used when the current cycle's allocation was granted.
    cycle_start_ticks: int = 0
    queue: deque[ServiceCall] = field(default_factory=deque)
    current: ServiceCall | None = None
    calls_completed: int = 0

    def endpoint(self, name: bytes) -> Endpoint | None:
        for endpoint in self.endpoints:
            if endpoint.name == name:
                return endpoint
        return None

    @property
    def channels(self) -> frozenset[int]:
        return frozenset(endpoint.channel for endpoint in self.endpoints)

    def info(self) -> ServiceInfo:
        return ServiceInfo(
            id=self.id,
            owner=self.owner,
            sandbox=self.sandbox.id,
            name=self.name,
            tick_budget=self.tick_budget,
            auto_fund=self.auto_fund,
            endpoints=self.endpoints,
            state=self.state,
            funded_cycle=self.funded_cycle,
            calls_queued=len(self.queue),
            calls_completed=self.calls_completed,
            in_call=self.current is not None,
        )
