"""``apply(state, record)``: the one place the engine's state changes.

The live engine applies each record right after deciding it; a rebuild applies
the journal's records, in order, to an empty state (or to a snapshot).  Each
record type has one small function below, and each reads like what the record
says.  A record that names a tick count first brings the sandbox's machine to
that tick by running it (:func:`advance`): live, the machine is there already
and nothing runs; in a rebuild, execution is deterministic, so running it
again reproduces what ran before.  A record that does not fit the state (a
machine that cannot reach the tick it names, a fault that differs) is
:class:`~kforge.core.StateCorrupted`: the journal and the execution disagree.

Every function checks what it needs before it changes anything, so a record
that cannot be applied leaves the state as it was.

A sandbox whose program cannot be had in a rebuild (the vault's copy missing
or damaged) is *set aside* (``EngineState.set_aside``): it is kept without a
machine, and the records that would run its machine are passed over, so every
other sandbox comes back exactly.  Once the program is put again, a rebuild
from the same journal brings it back too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kforge.core import StateCorrupted, VaultFetchFailed
from kforge.engine.models import ExecResult, HostCall, SandboxState, ServiceState
from kforge.engine.records import (
    AccessGranted,
    AccessRevoked,
    AccountsSet,
    AllocationGranted,
    CallAnswered,
    CallQueued,
    CallStarted,
    CycleBegan,
    ExecutionBegan,
    ExecutionScheduled,
    HostCallDropped,
    InputDelivered,
    ProgramLinked,
    ProofGenerated,
    Record,
    SandboxBlocked,
    SandboxCreated,
    SandboxForgotten,
    SandboxStopped,
    ServiceCreated,
    ServiceResumed,
    ServiceSettled,
    ServiceSuspended,
    SliceRan,
    Stepped,
)
from kforge.engine.sandbox import (
    Sandbox,
    ServiceRecord,
    delivery_bytes,
    dropped_bytes,
    held_bytes,
    queued_bytes,
    recorded_call,
    request_bytes,
)
from kforge.engine.state import EngineState, load_accounts, machine_of
from kforge.isa import DEFAULT_GRANTS, FaultCode
from kforge.machine import Delivery, Machine, MachineState

__all__ = ["advance", "apply", "load_machine", "settle"]

_RUNNABLE: Final = (MachineState.READY, MachineState.RUNNING)


def apply(state: EngineState, record: Record) -> None:
    """Change ``state`` as ``record`` says (nothing, for a record that would run the
    machine of a sandbox set aside)."""
    try:  # noqa: SIM105 (every record passes here, live too: no context manager)
        _APPLY[type(record)](state, record)
    except _SetAside:
        pass


class _SetAside(Exception):
    """A record needs the machine of a sandbox set aside: it is passed over."""


# ----------------------------------------------------------------- machines


def load_machine(state: EngineState, created: SandboxCreated) -> Machine:
    """The READY machine a creation asks for, running its (linked) program."""
    request = created.request
    return Machine.load(
        state.programs.load(created.program),
        memory_quota=request.memory_quota or 0,
        tick_budget=request.tick_budget or 0,
        input=request.input,
        environment=request.environment or {},
        grants=request.grants - DEFAULT_GRANTS,
        message_limit=state.message_limit,
    )


def advance(state: EngineState, sandbox: Sandbox, target: int) -> Machine:
    """Run the sandbox's machine to the instruction boundary at ``target`` ticks.

    The messages it sends on the way are dropped: their replies are recorded
    deliveries of their own.
    """
    if state.set_aside and sandbox.id in state.set_aside:
        raise _SetAside  # before anything changed: every record brings its machine first
    machine = machine_of(sandbox)
    if machine.ticks_used == target:  # live: the machine is there already
        return machine
    while machine.ticks_used < target and machine.state in _RUNNABLE:
        state.runner.run(machine, target - machine.ticks_used, yield_on_tick=True)
        machine.take_outbound()
    if machine.ticks_used != target:
        raise StateCorrupted(
            "engine journal",
            f"sandbox {sandbox.id} reached {machine.ticks_used} ticks "
            f"({machine.state.value}), the record says {target}",
        )
    return machine


def settle(state: EngineState) -> None:
    """After applying recorded records: drop the messages machines sent whose handling is
    past (the live engine takes them as soon as a slice ends)."""
    for sandbox in state.live_sandboxes():
        assert sandbox.machine is not None
        sandbox.machine.take_outbound()


def _sandbox(state: EngineState, record: Any) -> Sandbox:
    sandbox = state.find(record.sandbox)
    if sandbox is None:
        raise StateCorrupted(
            "engine journal", f"a record names an unknown sandbox {record.sandbox}"
        )
    return sandbox


def _service(state: EngineState, record: Any) -> ServiceRecord:
    service = state.services.get(record.service)
    if service is None:
        raise StateCorrupted(
            "engine journal", f"a record names an unknown service {record.service}"
        )
    return service


# ----------------------------------------------------------------- sandboxes


def _created(state: EngineState, record: SandboxCreated) -> None:
    try:
        machine: Machine | None = load_machine(state, record)
    except VaultFetchFailed as problem:  # only in a rebuild: live, the program was just read
        machine = None
        state.set_aside[record.sandbox] = problem
    sandbox = Sandbox(record.sandbox, record.request, record.program)
    sandbox.machine = machine
    sandbox.state = SandboxState.READY
    state.add(sandbox)
    state.hold(sandbox, request_bytes(record.request))
    state.sandbox_counter = max(state.sandbox_counter, record.counter)


def _began(state: EngineState, record: ExecutionBegan) -> None:
    sandbox = _sandbox(state, record)
    sandbox.started = True
    sandbox.reserved_ticks = record.reserved


def _scheduled(state: EngineState, record: ExecutionScheduled) -> None:
    sandbox = _sandbox(state, record)
    sandbox.scheduled = True
    if sandbox.state is not SandboxState.BLOCKED:
        sandbox.state = SandboxState.RUNNING


def _stepped(state: EngineState, record: Stepped) -> None:
    sandbox = _sandbox(state, record)
    advance(state, sandbox, record.ticks).step()
    sandbox.state = SandboxState.RUNNING


def _slice_ran(state: EngineState, record: SliceRan) -> None:
    sandbox = _sandbox(state, record)
    advance(state, sandbox, record.ticks)
    sandbox.state = SandboxState.RUNNING


def _blocked(state: EngineState, record: SandboxBlocked) -> None:
    sandbox = _sandbox(state, record)
    machine = advance(state, sandbox, record.ticks)
    if machine.state is MachineState.RUNNING:  # the RECV that blocks costs nothing: run it
        machine.step()
        machine.take_outbound()
    if machine.state is not MachineState.BLOCKED or machine.blocked_channel != record.channel:
        raise StateCorrupted(
            "engine journal",
            f"sandbox {sandbox.id} is {machine.state.value} at {machine.ticks_used} ticks, "
            f"the record says blocked on channel {record.channel}",
        )
    sandbox.state = SandboxState.BLOCKED


def _delivered(state: EngineState, record: InputDelivered) -> None:
    sandbox = _sandbox(state, record)
    machine = advance(state, sandbox, record.ticks)
    machine.deliver(record.channel, record.data)
    state.hold(sandbox, delivery_bytes(record.data, record.request))
    if record.request is not None and record.status is not None:
        sandbox.log_call(
            HostCall(record.ticks, record.channel, record.request, record.data, record.status)
        )
    if sandbox.state is SandboxState.BLOCKED and machine.state is MachineState.RUNNING:
        sandbox.state = SandboxState.RUNNING


def _dropped(state: EngineState, record: HostCallDropped) -> None:
    sandbox = _sandbox(state, record)
    sandbox.log_call(
        HostCall(record.ticks, record.channel, record.request, record.reply, record.status, False)
    )
    if sandbox.state.is_live:
        state.hold(sandbox, dropped_bytes(record.request, record.reply))


def _stopped(state: EngineState, record: SandboxStopped) -> None:
    sandbox = _sandbox(state, record)
    machine = advance(state, sandbox, record.ticks)
    faulted = record.state is SandboxState.FAULTED
    if faulted and machine.state in _RUNNABLE:  # OUT_OF_TICKS charges nothing: run into it
        machine.step()
        machine.take_outbound()
    fault = machine.fault if faulted else None
    if faulted and (fault is None or int(fault) != record.fault):
        raise StateCorrupted(
            "engine journal",
            f"sandbox {sandbox.id} stopped with fault {fault}, the record says {record.fault}",
        )
    sandbox.result = ExecResult(
        sandbox.id,
        record.state,
        machine.ticks_used,
        bytes(machine.stdout),
        FaultCode(fault) if fault is not None else None,
        machine.fault_detail if faulted else None,
    )
    sandbox.state = record.state
    sandbox.scheduled = False
    sandbox.reserved_ticks = 0
    sandbox.freeze()
    state.put_away(sandbox)
    state.count_live(sandbox, -1)
    state.note_stopped(sandbox)
    service = sandbox.service
    if service is not None:
        service.state = ServiceState.FAILED
        service.reserved_ticks = 0
        service.current = None
        service.queue.clear()


def _forgotten(state: EngineState, record: SandboxForgotten) -> None:
    state.remove(record.sandbox)


def _granted(state: EngineState, record: AccessGranted) -> None:
    sandbox = _sandbox(state, record)
    if sandbox.access is None:
        sandbox.access = {}
    sandbox.access[record.agent] = frozenset(record.operations)


def _revoked(state: EngineState, record: AccessRevoked) -> None:
    sandbox = _sandbox(state, record)
    if sandbox.access is not None:
        sandbox.access.pop(record.agent, None)
        if not sandbox.access:
            sandbox.access = None


# ----------------------------------------------------------------- services


def _service_created(state: EngineState, record: ServiceCreated) -> None:
    sandbox = _sandbox(state, record)
    service = ServiceRecord(
        record.service,
        record.owner,
        sandbox,
        record.name,
        record.tick_budget,
        record.auto_fund,
        record.endpoints,
    )
    state.services[service.id] = service
    state.service_counter = max(state.service_counter, record.counter)
    sandbox.service = service
    sandbox.reserved_ticks = 0  # what it had reserved was settled: the service pays by cycle


def _allocation(state: EngineState, record: AllocationGranted) -> None:
    service = _service(state, record)
    machine = advance(state, service.sandbox, record.ticks)
    machine.tick_budget = record.budget
    service.funded_cycle = record.cycle
    service.cycle_start_ticks = record.ticks
    service.reserved_ticks = record.reserved


def _resumed(state: EngineState, record: ServiceResumed) -> None:
    service = _service(state, record)
    service.state = ServiceState.ACTIVE
    service.sandbox.scheduled = True


def _suspended(state: EngineState, record: ServiceSuspended) -> None:
    service = _service(state, record)
    service.state = ServiceState.SUSPENDED
    service.sandbox.scheduled = False


def _settled(state: EngineState, record: ServiceSettled) -> None:
    _service(state, record).reserved_ticks = 0


def _queued(state: EngineState, record: CallQueued) -> None:
    service = _service(state, record)
    service.queue.append(
        recorded_call(
            service,
            record.number,
            record.endpoint,
            record.data,
            record.caller,
            record.caller_sandbox,
            record.notify_agent,
            record.notify_request,
        )
    )
    state.call_counter = max(state.call_counter, record.number)
    state.hold(service.sandbox, queued_bytes(record.data))


def _call_started(state: EngineState, record: CallStarted) -> None:
    service = _service(state, record)
    if not service.queue or service.queue[0].number != record.number:
        raise StateCorrupted("engine journal", f"call {record.number} is not next in its queue")
    _trim_service_logs(state, service, record.ticks)
    call = service.queue.popleft()
    call.ticks_at_delivery = record.ticks
    service.current = call
    state.hold(service.sandbox, -queued_bytes(call.data))  # it moves to the delivery log


def _call_answered(state: EngineState, record: CallAnswered) -> None:
    service = _service(state, record)
    service.current = None
    service.calls_completed += 1


def _trim_service_logs(state: EngineState, service: ServiceRecord, ticks: int) -> None:
    """A service is given its next call (at ``ticks``): its logs start afresh.

    A service's run is never replayed (its budget changes every cycle, so it
    has no proof) and a rebuild runs it from the journal's records, so its logs
    need to hold only what came since the call before: the host keeps its
    request, the messages it has not received yet, and its queued calls.
    """
    sandbox = service.sandbox
    machine = advance(state, sandbox, ticks)
    machine.deliveries = unread_deliveries(machine)
    sandbox.io_log = None
    state.hold(sandbox, held_bytes(sandbox) - sandbox.host_bytes)


def unread_deliveries(machine: Machine) -> list[Delivery] | tuple[()]:
    """The deliveries whose messages still wait in the machine's inbound queues (each
    queue holds the last messages delivered on its channel, in order)."""
    waiting = {channel: len(queue) for channel, queue in machine.inbound.items() if queue}
    kept: list[Delivery] = []
    for delivery in reversed(machine.deliveries):
        if waiting.get(delivery.channel, 0) > 0:
            waiting[delivery.channel] -= 1
            kept.append(delivery)
    kept.reverse()
    return kept or ()


# ----------------------------------------------------------------- accounts, cycles, artifacts


def _accounts(state: EngineState, record: AccountsSet) -> None:
    load_accounts(state.ledger, record.cycle, record.rows)


def _nothing(state: EngineState, record: Record) -> None:
    """A record that only announces (its events are all it brings)."""


_APPLY: Final[dict[type[Record], Callable[[EngineState, Any], None]]] = {
    SandboxCreated: _created,
    ExecutionBegan: _began,
    ExecutionScheduled: _scheduled,
    Stepped: _stepped,
    SliceRan: _slice_ran,
    SandboxBlocked: _blocked,
    InputDelivered: _delivered,
    HostCallDropped: _dropped,
    SandboxStopped: _stopped,
    SandboxForgotten: _forgotten,
    AccessGranted: _granted,
    AccessRevoked: _revoked,
    ServiceCreated: _service_created,
    AllocationGranted: _allocation,
    ServiceResumed: _resumed,
    ServiceSuspended: _suspended,
    ServiceSettled: _settled,
    CallQueued: _queued,
    CallStarted: _call_started,
    CallAnswered: _call_answered,
    AccountsSet: _accounts,
    CycleBegan: _nothing,
    ProgramLinked: _nothing,
    ProofGenerated: _nothing,
}
