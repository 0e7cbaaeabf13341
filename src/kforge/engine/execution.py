"""Running sandboxes: one scheduler slice, one debugging step, and the host calls they make.

A slice runs the machine for at most its quantum of ticks (see
:meth:`Executor.quantum`).  When the machine sends on channels 3..7 and waits
for the reply, the reply is answered and delivered within the same slice and
the machine runs on: a host reply never waits for the scheduler's next turn.
A TICK ends the slice only when another sandbox is waiting to run; alone, a
TICK costs what its tick says and nothing more.  After the slice the sandbox's
state is recorded (still running, blocked, stopped) and a running one goes to
the back of the run queue.

The quantum is :attr:`EngineLimits.slice_ticks` (a hundred times that for a
machine bound to compiled code, which runs that much faster) whenever another
sandbox is waiting, so sandboxes take turns fairly.  A sandbox running alone
gets a quantum that adapts to wall time: doubled while its slices take under
:data:`LONE_SLICE_SECONDS` (or the engine's own target: a cluster's worker divides
it between its partitions), halved while they take over twice that, so that a
CPU-bound sandbox on compiled code pays the engine's cost per slice seldom
while the event loop still gets a turn every few milliseconds.  Nothing a
sandbox computes depends on where its slices end, so results are the same
whatever the quantum.

Host calls cost the host more than their ticks: a SEND of nothing costs three
ticks, and answering it tens of microseconds; a reply of 64 KiB, more.  So the
host's share of a slice is bounded too, in calls, a call counting once more for
every :data:`HOST_BYTES_PER_CALL` of its request and reply.  The event loop gets
a turn after every :data:`HOST_CALLS_PER_TURN` of them (the machine does not run
meanwhile, so its answers are the same as if given at once), and a sandbox's
quantum is paced by them: after a slice that made host calls, the next one runs
only as many ticks as that slice took per call, times
:data:`HOST_CALLS_PER_TURN`; a sandbox's first slice gets the interpreter's
quantum even on compiled code, before its pace is known.

On the ``fast`` tier, a slice that would compile its program first waits for
that compile on the fast tier's compile thread (an engine's own fast tier
compiles in a worker process, under the time limit of ``WorkLimits``), so no
compile runs on the event loop (``auto`` compiles there anyway); a program that
could not be compiled runs on the interpreter, with the same results.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

from kforge.core import AgentId, Hash256, InvalidState
from kforge.engine.context import EngineContext
from kforge.engine.models import SandboxState
from kforge.engine.policy import Action
from kforge.engine.records import HostCallDropped, SandboxBlocked, SliceRan, Stepped
from kforge.engine.sandbox import Sandbox, delivery_bytes
from kforge.engine.sandboxes import Sandboxes
from kforge.engine.service_ops import Services
from kforge.host import HostRequest
from kforge.machine import Machine, MachineState
from kforge.tiers import REFERENCE, TierRunner

__all__ = [
    "COMPILED_QUANTUM_FACTOR",
    "HOST_BYTES_PER_CALL",
    "HOST_CALLS_PER_TURN",
    "LONE_SLICE_SECONDS",
    "MAX_LONE_GROWTH",
    "Executor",
    "SliceObserver",
]

#: Called after every scheduler slice with the sandbox, its state and its ticks used.
SliceObserver = Callable[[Hash256, SandboxState, int], None]

# Performance note: compiled code runs a hundred times the interpreter's ticks in the
# same time, so a machine bound to compiled code gets a quantum that much longer: the
# slices of both tiers then take about the same wall time, and the engine's cost per
# slice stays small beside the slice itself.
COMPILED_QUANTUM_FACTOR: Final = 100
#: The wall time a lone sandbox's slice aims at.
LONE_SLICE_SECONDS: Final = 0.002
#: A lone sandbox's quantum grows to at most this many times the fair one.
MAX_LONE_GROWTH: Final = 1024
#: Host calls answered before the event loop gets a turn, and what a sandbox's paced
#: quantum aims at in a slice; a call counts once more for every HOST_BYTES_PER_CALL of its
#: request and reply (so a turn is 64 calls, or a megabyte).
HOST_CALLS_PER_TURN: Final = 64
HOST_BYTES_PER_CALL: Final = 16 * 1024


class _HostWork:
    """The host calls one slice answered (each counted by its size), in all and since the
    event loop last had a turn."""

    __slots__ = ("calls", "since_turn")

    def __init__(self) -> None:
        self.calls = self.since_turn = 0

    def add(self, size: int) -> None:
        """Count one call whose request and reply took ``size`` bytes."""
        counted = 1 + size // HOST_BYTES_PER_CALL
        self.calls += counted
        self.since_turn += counted

    def turn_due(self) -> bool:
        """Whether the event loop is due a turn (and from now on, counted as had)."""
        if self.since_turn < HOST_CALLS_PER_TURN:
            return False
        self.since_turn = 0
        return True


class Executor:
    """Runs slices for the scheduler and steps for debuggers."""

    def __init__(
        self,
        ctx: EngineContext,
        sandboxes: Sandboxes,
        services: Services,
        runner: TierRunner,
        *,
        on_slice: SliceObserver | None = None,
        after_slice: Callable[[], None] | None = None,
        lone_slice_seconds: float = LONE_SLICE_SECONDS,
    ) -> None:
        self.ctx = ctx
        self.sandboxes = sandboxes
        self.services = services
        self.runner = runner
        self.on_slice = on_slice
        self._after_slice = after_slice
        #: The wall time a lone sandbox's slice aims at.
        self.lone_slice_seconds = lone_slice_seconds
        #: Held while a machine runs, so a snapshot never sees one mid-slice.
        self.lock = asyncio.Lock()
        #: The adapted quantum of sandboxes that ran alone (the live engine's alone).
        self._lone_quantum: dict[Hash256, int] = {}
        #: Ticks per host call of each sandbox's last slice (``None``: it made none); a
        #: sandbox missing here has not run a slice yet.
        self._host_pace: dict[Hash256, int | None] = {}

    def fair_quantum(self, machine: Machine) -> int:
        """The ticks one slice may run while others wait: longer for compiled code."""
        base = self.ctx.limits.slice_ticks
        return base * COMPILED_QUANTUM_FACTOR if machine.tier_state is not None else base

    def _paced(self, sandbox: Sandbox, quantum: int) -> int:
        """``quantum``, shortened for a sandbox whose slices make many host calls (or whose
        pace is not known yet)."""
        if sandbox.id not in self._host_pace:
            return min(quantum, self.ctx.limits.slice_ticks)
        per_call = self._host_pace[sandbox.id]
        return quantum if per_call is None else min(quantum, per_call * HOST_CALLS_PER_TURN)

    def _note_pace(self, sandbox: Sandbox, ticks: int, work: _HostWork) -> None:
        self._host_pace[sandbox.id] = max(1, ticks // work.calls) if work.calls else None
        if len(self._host_pace) > 2 * self.ctx.limits.max_sandboxes:
            self._forget_stopped()

    def _forget_stopped(self) -> None:
        """Drop what is kept per sandbox for those no longer live (killed between slices)."""
        for table in (self._host_pace, self._lone_quantum):
            for sandbox_id in list(table):
                found = self.ctx.state.find(sandbox_id)
                if found is None or not found.state.is_live:
                    del table[sandbox_id]

    def _adapt(self, sandbox: Sandbox, quantum: int, fair: int, seconds: float) -> None:
        """After a lone slice that used its whole quantum: grow or shrink the next one."""
        if seconds < self.lone_slice_seconds and quantum < fair * MAX_LONE_GROWTH:
            self._lone_quantum[sandbox.id] = quantum * 2
        elif seconds > 2 * self.lone_slice_seconds and quantum > fair:
            self._lone_quantum[sandbox.id] = max(fair, quantum // 2)

    # ------------------------------------------------------------------ slices

    async def run_slice(self, sandbox: Sandbox) -> None:
        """One scheduler slice (see :class:`~kforge.engine.scheduler.Scheduler`).

        An unexpected exception (a bug in a tier or the engine) must not stop the
        scheduler: the sandbox is killed by the engine, with the error appended
        to its stderr.  An exception of the ``on_slice`` observer is ignored.
        """
        machine = sandbox.machine
        if machine is None:
            return
        runner = self.runner
        compiling = runner.compile_before_running(machine)
        if compiling is not None:  # the fast tier's compile: on its thread, not the loop
            try:
                await asyncio.wrap_future(compiling)
            except Exception:  # not compiled (in time): the interpreter gives the same results
                runner = REFERENCE
            if sandbox.machine is not machine or not sandbox.state.is_live:
                return  # stopped meanwhile
        async with self.lock:
            try:
                await self._run(sandbox, machine, runner)
            except Exception as error:
                machine.stderr += f"\nkforge engine: execution failed: {error!r}\n".encode()
                if sandbox.state.is_live and sandbox.machine is not None:
                    self.sandboxes.finalize(
                        sandbox, SandboxState.KILLED, killed_by=self.ctx.agent_id
                    )
            self.ctx.transitions.commit(lazy=True)
            if self._after_slice is not None:
                self._after_slice()
        if self.on_slice is not None:
            with contextlib.suppress(Exception):
                self.on_slice(sandbox.id, sandbox.state, machine.ticks_used)

    async def _run(self, sandbox: Sandbox, machine: Machine, runner: TierRunner) -> None:
        start = machine.ticks_used
        scheduler = self.ctx.scheduler
        fair = self.fair_quantum(machine)
        alone = len(scheduler) == 0
        quantum = max(fair, self._lone_quantum.get(sandbox.id, fair)) if alone else fair
        quantum = self._paced(sandbox, quantum)
        work = _HostWork()
        # Performance note: wall time only tunes the next lone quantum; results never see it.
        started = time.perf_counter()
        while True:
            others_waiting = len(scheduler) > 0
            runner.run(
                machine, quantum - (machine.ticks_used - start), yield_on_tick=others_waiting
            )
            if not machine.outbound:
                break  # no host call to answer: the slice is over
            answered = await self.answer_host_calls(sandbox, machine, work)
            if (
                answered
                and sandbox.state.is_live
                and machine.state is MachineState.RUNNING
                and machine.ticks_used - start < quantum
                and work.calls < HOST_CALLS_PER_TURN
            ):
                continue  # the reply is there: run on within this slice
            break
        self._note_pace(sandbox, machine.ticks_used - start, work)
        if alone and machine.ticks_used - start >= quantum:
            self._adapt(sandbox, quantum, fair, time.perf_counter() - started)
        elif not alone:
            self._lone_quantum.pop(sandbox.id, None)
        self.settle(sandbox, machine, scheduled=True)
        if sandbox.state.is_final:
            self._lone_quantum.pop(sandbox.id, None)
            self._host_pace.pop(sandbox.id, None)

    async def step(self, sandbox_id: Hash256, requester: AgentId) -> SandboxState:
        """Execute one instruction of a sandbox not under the scheduler (for debugging).

        Allowed in READY and RUNNING; a BLOCKED sandbox needs input first.
        Host calls the instruction makes are answered before this returns.
        """
        ctx = self.ctx
        ctx.require_open()
        sandbox = self.sandboxes.authorized(sandbox_id, requester, Action.EXECUTE)
        if sandbox.scheduled or sandbox.service is not None:
            raise InvalidState(sandbox.state, "step (the scheduler is executing it)")
        if sandbox.state not in (SandboxState.READY, SandboxState.RUNNING):
            raise InvalidState(sandbox.state, "step")
        machine = sandbox.machine
        assert machine is not None
        async with self.lock:
            self.sandboxes.begin(sandbox)
            ctx.transitions.record(Stepped(sandbox.id, machine.ticks_used))
            await self.answer_host_calls(sandbox, machine)
            self.settle(sandbox, machine, scheduled=False)
            if sandbox.state.is_live:
                self.sandboxes.watch_idle(sandbox)
            ctx.commit()
        return sandbox.state

    # ------------------------------------------------------------------ after running

    async def answer_host_calls(
        self, sandbox: Sandbox, machine: Machine, work: _HostWork | None = None
    ) -> bool:
        """Answer every message the machine sent on channels 3..7, counted in ``work`` (the
        event loop gets a turn every so often); whether any reply was delivered (the
        machine may then run on)."""
        work = work or _HostWork()
        delivered_any = False
        service = sandbox.service
        host, sandboxes = self.ctx.host, self.sandboxes
        for channel, data in machine.take_outbound():
            if work.turn_due():
                await asyncio.sleep(0)  # the machine waits: its answers stay the same
            if sandbox.state.is_final:  # killed while an adapter (or the loop) was awaited
                break
            if service is not None and channel in service.channels:
                self.services.service_output(service, channel, data, machine)
                work.add(len(data))
                continue
            request = HostRequest(
                sandbox.id, sandbox.owner, channel, data, machine.ticks_used, machine.message_limit
            )
            reply = await host.call(request, machine.grants)
            frame, status = reply.frame, int(reply.status)
            work.add(len(data) + len(frame))
            if sandbox.state.is_live and not machine.state.is_final:
                if not sandboxes.within_budget(sandbox, delivery_bytes(frame, data)):
                    break
                sandboxes.deliver_machine(sandbox, channel, frame, (data, status))
                delivered_any = True
            else:
                self.ctx.transitions.record(
                    HostCallDropped(sandbox.id, machine.ticks_used, channel, data, frame, status)
                )
        return delivered_any

    def settle(self, sandbox: Sandbox, machine: Machine, *, scheduled: bool) -> None:
        """Record where the machine is after running: stopped, blocked, or running on."""
        if sandbox.state.is_final:
            return
        record = self.ctx.transitions.record
        state = machine.state
        if state is MachineState.HALTED:
            self.sandboxes.finalize(sandbox, SandboxState.HALTED)
        elif state is MachineState.FAULTED:
            self.sandboxes.finalize(sandbox, SandboxState.FAULTED)
        elif state is MachineState.BLOCKED:
            if sandbox.state is not SandboxState.BLOCKED:
                channel = machine.blocked_channel
                assert channel is not None
                record(SandboxBlocked(sandbox.id, sandbox.owner, machine.ticks_used, channel))
        else:
            if scheduled:
                record(SliceRan(sandbox.id, machine.ticks_used))
            if sandbox.scheduled:
                self.ctx.scheduler.enqueue(sandbox)
        if sandbox.service is not None:
            self.services.pump(sandbox.service)

    # ------------------------------------------------------------------ deadlines

    def deadline_passed(self, sandbox: Sandbox) -> None:
        """The scheduler's call when a sandbox's timer runs out.

        A live sandbox ends ``DEADLINE_EXCEEDED``: its execution outlived its
        deadline, or it waited longer than ``idle_timeout`` for a start or a step.
        A stopped one is forgotten: its retention is over.
        """
        if self.ctx.state.find(sandbox.id) is not sandbox:
            return  # forgotten meanwhile
        if sandbox.state.is_final:
            self.sandboxes.drop(sandbox)
        elif sandbox.machine is not None and sandbox.service is None:
            self.sandboxes.finalize(sandbox, SandboxState.DEADLINE_EXCEEDED)
        else:
            return
        self.ctx.commit()
