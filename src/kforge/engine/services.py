"""Services (seed §3.11): persistent sandboxes answering calls on named endpoints.

A service owns one persistent sandbox.  Each endpoint names a channel (3..7,
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
from kforge.engine.models import Endpoint, ServiceInfo, ServiceResult, ServiceState
from kforge.engine.sandbox import Sandbox

__all__ = ["MAX_SERVICE_NAME", "ServiceCall", "ServiceRecord", "recorded_call"]

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
