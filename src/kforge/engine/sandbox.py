"""One sandbox as the engine keeps it: the machine, its owner, its state and its log."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kforge.core import AgentId, Hash256
from kforge.engine.models import (
    CreateSandbox,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
)
from kforge.machine import Delivery, Machine

__all__ = ["Sandbox", "memory_used"]


def memory_used(machine: Machine) -> int:
    """Data and environment, stack in use, and bytes the host holds for the sandbox."""
    return machine.heap_start + (machine.stack_start - machine.sp) + machine.held_bytes


@dataclass(frozen=True, slots=True)
class _Final:
    """What is kept of a machine once its sandbox has stopped (the machine is freed)."""

    ticks_used: int
    memory_used: int
    pc: int
    deliveries: tuple[Delivery, ...]


class Sandbox:
    """The engine's record of one sandbox.

    ``machine`` is present from READY until the sandbox stops; afterwards the
    record keeps the result, the I/O log and the delivery log (for replay).
    ``scheduled`` is true while the scheduler owns its execution (after
    ``exec_start``); a sandbox driven by ``step`` is not scheduled.
    """

    __slots__ = (
        "access",
        "deadline_at",
        "final",
        "id",
        "io_log",
        "machine",
        "notify",
        "owner",
        "queued",
        "request",
        "reserved_ticks",
        "result",
        "scheduled",
        "service",
        "slices",
        "started",
        "state",
        "waiters",
    )

    def __init__(self, sandbox_id: Hash256, request: CreateSandbox) -> None:
        self.id = sandbox_id
        self.owner = request.owner
        self.request = request
        self.machine: Machine | None = None
        self.state = SandboxState.CREATED
        self.scheduled = False
        self.queued = False
        self.started = False
        self.reserved_ticks = 0
        self.deadline_at: float | None = None
        self.access: dict[AgentId, frozenset[Operation]] = {}
        self.io_log: list[HostCall] = []
        self.result: ExecResult | None = None
        self.final: _Final | None = None
        self.waiters: list[asyncio.Future[ExecResult]] = []
        self.notify: list[tuple[AgentId, Hash256]] = []
        self.slices = 0
        #: The service this sandbox runs, if it was made one (``ServiceRecord``).
        self.service: Any = None

    def allows(self, agent: AgentId, operation: Operation) -> bool:
        """Whether ``agent`` may do ``operation``: the owner always, others by grant."""
        return agent == self.owner or operation in self.access.get(agent, frozenset())

    @property
    def ticks_used(self) -> int:
        if self.machine is not None:
            return self.machine.ticks_used
        return self.final.ticks_used if self.final is not None else 0

    def info(self) -> SandboxInfo:
        machine = self.machine
        if machine is not None:
            used = memory_used(machine)
            blocked = machine.blocked_channel if self.state is SandboxState.BLOCKED else None
        else:
            used = self.final.memory_used if self.final is not None else 0
            blocked = None
        ticks_used = self.ticks_used
        return SandboxInfo(
            id=self.id,
            owner=self.owner,
            state=self.state,
            ticks_used=ticks_used,
            ticks_remaining=max(
                0,
                (machine.tick_budget if machine is not None else self.request.tick_budget)
                - ticks_used,
            ),
            memory_used=used,
            memory_quota=self.request.memory_quota,
            persistent=self.request.persistent,
            blocked_channel=blocked,
        )

    def freeze(self) -> None:
        """Keep what matters of the stopped machine and let its memory go."""
        machine = self.machine
        if machine is None:
            return
        self.final = _Final(
            machine.ticks_used, memory_used(machine), machine.pc, tuple(machine.deliveries)
        )
        self.machine = None
