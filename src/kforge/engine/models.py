"""The engine's data: requests and results (the message schemas), limits, clock and randomness."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from kforge.core import ErrorCategory, ForgeError, Hash256, InvalidRequest, KingdomError
from kforge.machine import DEFAULT_MESSAGE_LIMIT
from kforge.messages.payloads import (
    CreateSandbox,
    Endpoint,
    ExecResult,
    Operation,
    SandboxInfo,
    SandboxState,
    Service,
    ServiceInfo,
    ServiceResult,
    ServiceState,
)
from kforge.wire import U8, U64, Schema

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


class HostCall(Schema, frozen=True):
    """One logged host call: the request a sandbox sent and the reply it was given.

    ``ticks_used`` is the sandbox's tick count when the request was taken and the
    reply became visible (both happen between the same two slices);
    ``delivered`` is false when the sandbox had already stopped and the reply
    was dropped.
    """

    ticks_used: U64
    channel: U8
    request: bytes
    reply: bytes
    status: U8
    delivered: bool = True


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """What one engine allows (``docs/security.md`` lists each limit and why).

    ``slice_ticks`` is the scheduler's quantum; ``deadline`` the default
    wall-clock seconds per execution and ``max_deadline`` the most a creation
    may ask for.  ``max_sandboxes_per_owner`` and ``max_memory_per_owner`` are
    one agent's share of ``max_sandboxes`` and ``max_total_memory``.  Nothing
    lives forever: a live sandbox the scheduler does not run (created and never
    started, or driven by ``step``) ends ``DEADLINE_EXCEEDED`` after
    ``idle_timeout`` seconds without being started or stepped; a stopped one is
    forgotten ``stopped_retention`` seconds after it stopped, and an owner's
    oldest stopped one as soon as it has more than ``max_stopped_per_owner``.

    The host-memory budget: what the host holds for live sandboxes beyond their
    memory quotas (``Sandbox.host_bytes``: requests, delivery and I/O logs,
    queued messages and calls) is at most ``max_host_bytes_per_sandbox`` for
    one sandbox, ``max_host_bytes_per_owner`` for one agent's, and
    ``max_host_bytes`` for the engine's (:meth:`Policy.host_room`).
    """

    max_sandboxes: int = 1024
    max_sandboxes_per_owner: int = 64
    max_memory_quota: int = 256 * 1024 * 1024
    max_total_memory: int = 1024 * 1024 * 1024
    max_memory_per_owner: int = 256 * 1024 * 1024
    max_tick_budget: int = (1 << 64) - 1
    message_limit: int = DEFAULT_MESSAGE_LIMIT
    slice_ticks: int = DEFAULT_SLICE_TICKS
    deadline: float = 30.0
    max_deadline: float = 3600.0
    idle_timeout: float = 600.0
    stopped_retention: float = 3600.0
    max_stopped_per_owner: int = 128
    max_host_bytes_per_sandbox: int = 16 * 1024 * 1024
    max_host_bytes_per_owner: int = 64 * 1024 * 1024
    max_host_bytes: int = 512 * 1024 * 1024

    def check_message(self, data: object, field: str = "data") -> bytes:
        """``data`` as bytes, when it is bytes within the message limit (``InvalidRequest``
        naming ``field`` otherwise)."""
        if not isinstance(data, bytes | bytearray):
            raise InvalidRequest(field, f"expected bytes, got {type(data).__name__}")
        if len(data) > self.message_limit:
            raise InvalidRequest(
                field, f"{len(data)} bytes is over the message limit of {self.message_limit}"
            )
        return bytes(data)

    def __post_init__(self) -> None:
        for name in (
            "max_sandboxes",
            "max_sandboxes_per_owner",
            "slice_ticks",
            "message_limit",
            "max_stopped_per_owner",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not 0 < self.deadline <= self.max_deadline:
            raise ValueError("deadline must be positive and at most max_deadline")
        if self.idle_timeout <= 0 or self.stopped_retention <= 0:
            raise ValueError("idle_timeout and stopped_retention must be positive")


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
