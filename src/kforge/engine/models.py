"""The engine's data: sandbox states, requests and results, limits, clock and randomness."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Protocol

from kforge.core import AgentId, ErrorCategory, ForgeError, Hash256, KingdomError
from kforge.isa import CHANNEL_COUNT, DEFAULT_GRANTS, FaultCode
from kforge.machine import DEFAULT_MESSAGE_LIMIT, Machine
from kforge.messages import InvalidRequest
from kforge.program import ForgeProgram

__all__ = [
    "DEFAULT_SLICE_TICKS",
    "Clock",
    "CreateSandbox",
    "Endpoint",
    "EngineLimits",
    "ExecResult",
    "HostCall",
    "ManualClock",
    "Operation",
    "RandomSource",
    "SandboxInfo",
    "SandboxState",
    "Service",
    "ServiceCallFailed",
    "ServiceInfo",
    "ServiceResult",
    "ServiceState",
    "SystemClock",
    "seeded_random",
    "system_random",
]

DEFAULT_SLICE_TICKS: Final = 10_000


class SandboxState(Enum):
    """Where a sandbox is in its life.

    ``CREATED → READY → RUNNING ↔ BLOCKED → HALTED | FAULTED | KILLED | DEADLINE_EXCEEDED``.
    CREATED lasts only while ``create_sandbox`` builds the machine.
    DEADLINE_EXCEEDED is the engine's own outcome: the execution ran past its
    wall-clock deadline (it is not a machine fault, so it has no fault code).
    """

    CREATED = "CREATED"
    READY = "READY"
    RUNNING = "RUNNING"
    BLOCKED = "BLOCKED"
    HALTED = "HALTED"
    FAULTED = "FAULTED"
    KILLED = "KILLED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"

    @property
    def is_final(self) -> bool:
        return self in _FINAL

    @property
    def is_live(self) -> bool:
        return not self.is_final


_FINAL: Final = frozenset(
    {
        SandboxState.HALTED,
        SandboxState.FAULTED,
        SandboxState.KILLED,
        SandboxState.DEADLINE_EXCEEDED,
    }
)


class Operation(Enum):
    """What an agent other than the owner may be granted on a sandbox."""

    STATUS = "status"
    EXEC = "exec"  # exec_start and step
    KILL = "kill"
    DELIVER = "deliver"


@dataclass(frozen=True, slots=True)
class CreateSandbox:
    """A request for a new sandbox (seed §3.10, plus engine options).

    ``grants`` are the extra channels (3..7) the sandbox may use; ``accept_from``
    the owners whose sandboxes may send to it on channel 7 (its own owner's
    always may); ``deadline`` the wall-clock seconds one execution may take
    (``None``: the engine's default).
    """

    owner: AgentId
    code: Hash256
    memory_quota: int
    tick_budget: int
    input: bytes = b""
    environment: Mapping[bytes, bytes] = field(default_factory=dict)
    persistent: bool = False
    grants: frozenset[int] = frozenset()
    accept_from: frozenset[AgentId] = frozenset()
    deadline: float | None = None

    def validate(self, max_tick_budget: int = (1 << 64) - 1) -> None:
        """Type and range checks (the wire schema makes the same for messages).

        Raises ``InvalidRequest`` naming the first field that does not fit.
        """
        if not isinstance(self.owner, AgentId):
            raise InvalidRequest("owner", f"expected an AgentId, got {type(self.owner).__name__}")
        if not isinstance(self.code, Hash256):
            raise InvalidRequest("code", f"expected a Hash256, got {type(self.code).__name__}")
        for name in ("memory_quota", "tick_budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
                raise InvalidRequest(name, f"expected an integer in 0..2^64-1, got {value!r}")
        if self.tick_budget > max_tick_budget:
            raise InvalidRequest(
                "tick_budget", f"{self.tick_budget} is over the engine's limit of {max_tick_budget}"
            )
        if not isinstance(self.input, bytes | bytearray):
            raise InvalidRequest("input", f"expected bytes, got {type(self.input).__name__}")
        if not isinstance(self.environment, Mapping) or not all(
            isinstance(key, bytes) and isinstance(value, bytes)
            for key, value in self.environment.items()
        ):
            raise InvalidRequest("environment", "expected a mapping of bytes to bytes")
        if not all(
            isinstance(channel, int) and 0 <= channel < CHANNEL_COUNT for channel in self.grants
        ):
            raise InvalidRequest(
                "grants", f"expected channel numbers 0..15, got {sorted(self.grants)!r}"
            )
        if not all(isinstance(agent, AgentId) for agent in self.accept_from):
            raise InvalidRequest("accept_from", "expected AgentIds")
        if self.deadline is not None and not (
            isinstance(self.deadline, int | float) and self.deadline > 0
        ):
            raise InvalidRequest(
                "deadline", f"expected a positive number of seconds, got {self.deadline!r}"
            )

    def load_machine(self, program: ForgeProgram, message_limit: int) -> Machine:
        """The READY machine this request asks for, running ``program``."""
        return Machine.load(
            program,
            memory_quota=self.memory_quota,
            tick_budget=self.tick_budget,
            input=self.input,
            environment=self.environment,
            grants=self.grants - DEFAULT_GRANTS,
            message_limit=message_limit,
        )


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """A sandbox's status (seed §3.10, plus ``blocked_channel``).

    ``memory_used`` counts data and environment (``heap_start``), the stack in
    use, and the output and outbound messages the host holds for the sandbox.
    """

    id: Hash256
    owner: AgentId
    state: SandboxState
    ticks_used: int
    ticks_remaining: int
    memory_used: int
    memory_quota: int
    persistent: bool
    blocked_channel: int | None = None


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of one execution (seed §3.13, plus the FAULT instruction's ``fault_detail``)."""

    sandbox_id: Hash256
    state: SandboxState
    ticks_used: int
    output: bytes
    fault: FaultCode | None
    fault_detail: int | None = None


@dataclass(frozen=True, slots=True)
class HostCall:
    """One logged host call: the request a sandbox sent and the reply it was given.

    ``ticks_used`` is the sandbox's tick count when the request was taken and the
    reply became visible (both happen between the same two slices);
    ``delivered`` is false when the sandbox had already stopped and the reply
    was dropped.
    """

    ticks_used: int
    channel: int
    request: bytes
    reply: bytes
    status: int
    delivered: bool = True


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """What one engine allows.

    ``slice_ticks`` is the scheduler's quantum; ``deadline`` the default
    wall-clock seconds per execution.
    """

    max_sandboxes: int = 1024
    max_sandboxes_per_owner: int = 256
    max_memory_quota: int = 64 * 1024 * 1024
    max_total_memory: int = 1024 * 1024 * 1024
    max_tick_budget: int = (1 << 64) - 1
    message_limit: int = DEFAULT_MESSAGE_LIMIT
    slice_ticks: int = DEFAULT_SLICE_TICKS
    deadline: float = 30.0

    def __post_init__(self) -> None:
        for name in ("max_sandboxes", "max_sandboxes_per_owner", "slice_ticks", "message_limit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.deadline <= 0:
            raise ValueError("deadline must be positive")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A named entry point of a service (seed §3.11): requests arrive on ``channel``
    (one of the sandbox's granted channels 3..7) and the reply is the service's
    next SEND on that same channel.  ``schema`` describes the message format (free text)."""

    name: bytes
    channel: int
    schema: bytes = b""


@dataclass(frozen=True, slots=True)
class Service:
    """A request to turn a persistent sandbox into a service (seed §3.11).

    ``tick_budget`` is the allocation the sandbox gets at every cycle;
    ``auto_fund`` lets the engine pay each cycle from the owner's account
    (otherwise the owner calls ``fund_service`` each cycle).  ``id`` may be
    left ``None``: the engine assigns one.
    """

    owner: AgentId
    sandbox: Hash256
    name: bytes
    tick_budget: int
    auto_fund: bool = True
    endpoints: tuple[Endpoint, ...] = ()
    id: Hash256 | None = None


class ServiceState(Enum):
    """ACTIVE: runs and takes calls; SUSPENDED: unpaid this cycle (calls wait);
    FAILED: its sandbox stopped (calls are refused)."""

    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class ServiceResult:
    """The answer to one service call (seed §6.1 ``SERVICE_RESULT``).

    ``ticks_used`` counts the service's ticks from the delivery of the request
    to its reply.
    """

    service_id: Hash256
    endpoint: bytes
    data: bytes
    ticks_used: int


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """A service's standing."""

    id: Hash256
    owner: AgentId
    sandbox: Hash256
    name: bytes
    tick_budget: int
    auto_fund: bool
    endpoints: tuple[Endpoint, ...]
    state: ServiceState
    funded_cycle: int
    calls_queued: int
    calls_completed: int
    in_call: bool


class ServiceCallFailed(ForgeError):
    """A service call that got no answer: the service's sandbox stopped before replying.

    ``state`` is the sandbox's final state, ``fault`` the fault name (``OUT_OF_TICKS``
    when the cycle's allocation ran out inside the call), ``ticks_used`` the
    ticks the call had used.
    """

    category = ErrorCategory.CONFLICT
    code = 0x0507
    http_status = 409

    def __init__(
        self,
        service_id: Hash256,
        endpoint: bytes,
        reason: str,
        *,
        state: str,
        fault: str | None,
        ticks_used: int,
    ) -> None:
        super().__init__(f"service {service_id} call to endpoint {endpoint!r} failed: {reason}")
        self.service_id = service_id
        self.endpoint = endpoint
        self.reason = reason
        self.state = state
        self.fault = fault
        self.ticks_used = ticks_used

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        merged = {
            b"state": self.state.encode(),
            b"fault": (self.fault or "").encode(),
            b"ticks_used": str(self.ticks_used).encode(),
        }
        merged.update(context or {})
        return super().to_kingdom_error(merged)


class Clock(Protocol):
    """Time as the engine sees it: ``monotonic`` for deadlines, ``time_ms`` for timestamps."""

    def monotonic(self) -> float: ...

    def time_ms(self) -> int: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to: for deterministic tests."""

    def __init__(self, start: float = 0.0, epoch_ms: int = 1_700_000_000_000) -> None:
        self.now = start
        self.epoch_ms = epoch_ms

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def monotonic(self) -> float:
        return self.now

    def time_ms(self) -> int:
        return self.epoch_ms + int(self.now * 1000)


#: Returns ``n`` random bytes.
RandomSource = Callable[[int], bytes]


def system_random(size: int) -> bytes:
    return os.urandom(size)


def seeded_random(seed: int) -> RandomSource:
    """A deterministic random source: the same seed gives the same bytes."""
    generator = random.Random(seed)
    return generator.randbytes
