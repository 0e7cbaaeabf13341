"""One sandbox as the engine keeps it: the machine, its owner, its state and its logs.

Part of the engine's state (:class:`kforge.engine.state.EngineState`); only
:func:`kforge.engine.apply.apply` changes its fields.

Performance note: an idle sandbox must stay small (seed: under 1 KB beyond
its memory and registers), so the lists and maps most sandboxes never use are
made on first use (``None`` until then), the class has slots only, and what
only the live engine needs (who waits for the result, the scheduler's queue
and deadlines) is kept by the parts that need it, for the few sandboxes that
need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from kforge.wire import U64, Schema

if TYPE_CHECKING:  # services.py imports this module; the annotation only names the type
    from kforge.engine.services import ServiceRecord

__all__ = ["FinalMachine", "Sandbox", "memory_used"]


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
    """

    __slots__ = (
        "access",
        "final",
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

    @property
    def owner(self) -> AgentId:
        return self.request.owner

    def allows(self, agent: AgentId, operation: Operation) -> bool:
        """Whether ``agent`` may do ``operation``: the owner always, others by grant."""
        if agent == self.owner:
            return True
        return self.access is not None and operation in self.access.get(agent, ())

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
