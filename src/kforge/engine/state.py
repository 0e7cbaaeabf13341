"""The engine's state: every sandbox and service, the id counters and the live tallies.

An :class:`EngineState` is changed only by :func:`kforge.engine.apply.apply`,
one record at a time; everything else reads it through its public methods.
It knows how to load a program (:class:`ProgramSource`) and run a machine (a
:class:`~kforge.tiers.TierRunner`), because applying a record may need to: a
rebuild brings each machine forward by running it.

:meth:`EngineState.snapshot` is the whole state as one value (machines as
checkpoints): the journal stores it, and two states are the same exactly when
their snapshots are equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

from msgspec.structs import replace

from kforge.accounting import Account, Ledger
from kforge.core import (
    AgentId,
    ForgeError,
    Hash256,
    SandboxNotFound,
    ServiceNotFound,
    StateCorrupted,
    VaultFetchFailed,
)
from kforge.engine.archive import (
    KEEP_IN_MEMORY,
    ArchivedLogs,
    MemoryArchive,
    RunArchive,
    decode_logs,
    encode_logs,
    run_digest,
)
from kforge.engine.models import (
    CreateSandbox,
    Endpoint,
    ExecResult,
    HostCall,
    Operation,
    SandboxState,
    ServiceState,
)
from kforge.engine.sandbox import (
    FinalMachine,
    Sandbox,
    ServiceCall,
    ServiceRecord,
    held_bytes,
    recorded_call,
)
from kforge.machine import Machine
from kforge.program import ForgeProgram
from kforge.proofs.snapshot import SnapshotProgramMissing, checkpoint, restore
from kforge.storage import decoded_size
from kforge.tiers import TierRunner
from kforge.wire import U64, Schema

__all__ = [
    "SNAPSHOT_VERSION",
    "EngineState",
    "ProgramSource",
    "StateSnapshot",
]

SNAPSHOT_VERSION: Final = 3


class ProgramSource(Protocol):
    """Where programs come from by id (the vault's cache, ``kforge.storage.ProgramCache``)."""

    def load(self, program_id: Hash256) -> ForgeProgram:
        """The program stored under ``program_id``; raises ``VaultFetchFailed``."""
        ...


# ----------------------------------------------------------------- the state as one value


class SandboxSnapshot(Schema, frozen=True):
    id: Hash256
    request: CreateSandbox
    program: Hash256
    state: SandboxState
    started: bool
    scheduled: bool
    reserved: U64
    access: tuple[tuple[AgentId, tuple[Operation, ...]], ...]
    io_log: tuple[HostCall, ...]
    result: ExecResult | None
    final: FinalMachine | None
    machine: bytes | None
    #: Set when the stopped run is in the archive (its output and logs are not here).
    run_digest: Hash256 | None = None
    output_length: U64 = 0


class CallSnapshot(Schema, frozen=True):
    number: U64
    endpoint: bytes
    data: bytes
    caller: AgentId
    caller_sandbox: Hash256 | None
    notify_agent: AgentId | None
    notify_request: Hash256 | None
    ticks: U64


class ServiceSnapshot(Schema, frozen=True):
    id: Hash256
    sandbox: Hash256
    name: bytes
    tick_budget: U64
    auto_fund: bool
    endpoints: tuple[Endpoint, ...]
    state: ServiceState
    funded_cycle: U64
    reserved: U64
    cycle_start: U64
    queue: tuple[CallSnapshot, ...]
    current: CallSnapshot | None
    completed: U64


class StateSnapshot(Schema, frozen=True):
    """Everything an :class:`EngineState` holds (machines as checkpoints)."""

    version: U64
    sandbox_counter: U64
    service_counter: U64
    call_counter: U64
    events: U64
    cycle: U64
    accounts: tuple[tuple[AgentId, U64, U64, U64, U64], ...]
    sandboxes: tuple[SandboxSnapshot, ...]
    services: tuple[ServiceSnapshot, ...]


# ----------------------------------------------------------------- the state


class Holdings:
    """What one owner's live sandboxes hold of the engine's pools.

    ``host_bytes`` counts its sandboxes' own (``Sandbox.host_bytes``) and each
    distinct program they run once (its decoded size); ``programs`` holds, by
    program id, how many of them run it and that size.
    """

    __slots__ = ("count", "host_bytes", "memory", "programs")

    def __init__(self) -> None:
        self.count = 0
        self.memory = 0
        self.host_bytes = 0
        self.programs: dict[Hash256, list[int]] = {}

    @property
    def empty(self) -> bool:
        return self.count == 0 and self.memory == 0 and self.host_bytes == 0


class EngineState:
    """Sandboxes, services, counters and tallies of one engine."""

    def __init__(
        self,
        programs: ProgramSource,
        runner: TierRunner,
        ledger: Ledger,
        message_limit: int,
        archive: RunArchive | None = None,
    ) -> None:
        self.programs = programs
        self.runner = runner
        self.ledger = ledger
        self.message_limit = message_limit
        #: Where stopped runs larger than ``KEEP_IN_MEMORY`` go (``kforge.engine.archive``).
        self.archive: RunArchive = archive if archive is not None else MemoryArchive()
        self.sandboxes: dict[Hash256, Sandbox] = {}
        self.services: dict[Hash256, ServiceRecord] = {}
        #: The last sandbox, service and call numbers handed out.
        self.sandbox_counter = 0
        self.service_counter = 0
        self.call_counter = 0
        #: Events derived from the records applied so far (the bus's last ``seq``).
        self.events = 0
        self._live_count = 0
        self._live_memory = 0
        self._host_bytes = 0
        #: What each owner's live sandboxes hold (owners holding nothing are not kept).
        self._holdings: dict[AgentId, Holdings] = {}
        #: Each owner's stopped sandboxes still kept, oldest first.
        self._stopped: dict[AgentId, dict[Hash256, None]] = {}
        #: Live sandboxes whose program could not be had when the state was rebuilt (the
        #: vault's copy missing or damaged), with why: they keep no machine, the records
        #: that would run them are passed over, and every operation on them is refused.
        self.set_aside: dict[Hash256, ForgeError] = {}

    # ------------------------------------------------------------------ reading

    def sandbox(self, sandbox_id: Hash256) -> Sandbox:
        """The sandbox ``sandbox_id``; ``SandboxNotFound`` when there is none."""
        sandbox = self.sandboxes.get(sandbox_id) if isinstance(sandbox_id, Hash256) else None
        if sandbox is None:
            raise SandboxNotFound(sandbox_id)
        return sandbox

    def find(self, sandbox_id: Hash256) -> Sandbox | None:
        return self.sandboxes.get(sandbox_id)

    def service(self, service_id: Hash256) -> ServiceRecord:
        """The service ``service_id``; ``ServiceNotFound`` when there is none."""
        service = self.services.get(service_id) if isinstance(service_id, Hash256) else None
        if service is None:
            raise ServiceNotFound(service_id)
        return service

    def live_sandboxes(self) -> Iterator[Sandbox]:
        """Sandboxes that have not stopped and still have their machine."""
        return (s for s in self.sandboxes.values() if s.state.is_live and s.machine is not None)

    @property
    def live_count(self) -> int:
        return self._live_count

    @property
    def live_memory(self) -> int:
        """The memory quotas of every live sandbox, summed."""
        return self._live_memory

    def live_owned_by(self, owner: AgentId) -> int:
        """How many live sandboxes ``owner`` has."""
        held = self._holdings.get(owner)
        return held.count if held is not None else 0

    @property
    def host_bytes(self) -> int:
        """What the host holds for all live sandboxes (``Sandbox.host_bytes``), summed."""
        return self._host_bytes

    def host_bytes_of(self, owner: AgentId) -> int:
        """What the host holds for ``owner``'s live sandboxes."""
        held = self._holdings.get(owner)
        return held.host_bytes if held is not None else 0

    def live_memory_of(self, owner: AgentId) -> int:
        """The memory quotas of ``owner``'s live sandboxes, summed."""
        held = self._holdings.get(owner)
        return held.memory if held is not None else 0

    def stopped_count(self, owner: AgentId) -> int:
        """How many stopped sandboxes of ``owner`` are kept."""
        return len(self._stopped.get(owner, ()))

    def oldest_stopped(self, owner: AgentId) -> Sandbox | None:
        """The stopped sandbox of ``owner`` kept longest."""
        kept = self._stopped.get(owner)
        return self.sandboxes[next(iter(kept))] if kept else None

    # ------------------------------------------------------------------ changing (apply only)

    def add(self, sandbox: Sandbox) -> None:
        self.sandboxes[sandbox.id] = sandbox
        if sandbox.state.is_live:
            self.count_live(sandbox, +1)
        else:
            self.note_stopped(sandbox)

    def note_stopped(self, sandbox: Sandbox) -> None:
        """Count ``sandbox`` among its owner's stopped ones (it stopped, or was restored so)."""
        self._stopped.setdefault(sandbox.owner, {})[sandbox.id] = None

    def remove(self, sandbox_id: Hash256) -> None:
        """Drop a sandbox's record (forgotten)."""
        sandbox = self.sandboxes.pop(sandbox_id, None)
        if sandbox is None:
            return
        self.set_aside.pop(sandbox_id, None)
        if sandbox.state.is_live:
            self.count_live(sandbox, -1)
            return
        kept = self._stopped.get(sandbox.owner)
        if kept is not None:
            kept.pop(sandbox_id, None)
            if not kept:
                del self._stopped[sandbox.owner]
        if sandbox.run_digest is not None:
            self.archive.discard(sandbox_id)

    def hold(self, sandbox: Sandbox, delta: int) -> None:
        """The host holds ``delta`` more bytes for ``sandbox`` (fewer when negative)."""
        if not delta:
            return
        sandbox.host_bytes += delta
        self._host_bytes += delta
        held = self._holdings.get(sandbox.owner)
        if held is None:
            held = self._holdings[sandbox.owner] = Holdings()
        held.host_bytes += delta
        if delta < 0 and held.empty:  # (holding more never empties an owner's holdings)
            del self._holdings[sandbox.owner]

    def holds_program(self, owner: AgentId, program_id: Hash256) -> bool:
        """Whether a live sandbox of ``owner`` runs ``program_id`` (it is counted already)."""
        held = self._holdings.get(owner)
        return held is not None and program_id in held.programs

    def count_live(self, sandbox: Sandbox, delta: int) -> None:
        quota = delta * (sandbox.request.memory_quota or 0)
        self._live_count += delta
        self._live_memory += quota
        held = self._holdings.get(sandbox.owner)
        if held is None:
            held = self._holdings[sandbox.owner] = Holdings()
        held.count += delta
        held.memory += quota
        weight = self._count_program(held, sandbox, delta)
        held.host_bytes += weight
        self._host_bytes += weight
        if held.empty:
            del self._holdings[sandbox.owner]

    @staticmethod
    def _count_program(held: Holdings, sandbox: Sandbox, delta: int) -> int:
        """Count the sandbox's program for its owner; the host bytes that adds (a program's
        decoded size counts once per owner, however many of its sandboxes run it)."""
        entry = held.programs.get(sandbox.program)
        if delta > 0:
            if entry is not None:
                entry[0] += 1
                return 0
            machine = sandbox.machine
            size = decoded_size(machine.program) if machine is not None else 0
            held.programs[sandbox.program] = [1, size]
            return size
        if entry is None:
            return 0
        entry[0] -= 1
        if entry[0]:
            return 0
        del held.programs[sandbox.program]
        return -entry[1]

    # ------------------------------------------------------------------ stopped runs

    def put_away(self, sandbox: Sandbox) -> None:
        """A sandbox has stopped (its machine frozen): the host holds nothing more for it,
        and a run larger than ``KEEP_IN_MEMORY`` goes to the archive (apply only)."""
        self.hold(sandbox, -sandbox.host_bytes)
        result, final = sandbox.result, sandbox.final
        assert result is not None and final is not None
        io_log = tuple(sandbox.io_log or ())
        size = (
            len(result.output)
            + sum(len(delivery.data) for delivery in final.deliveries)
            + sum(len(call.request) + len(call.reply) for call in io_log)
        )
        if size <= KEEP_IN_MEMORY:
            return
        logs = encode_logs(ArchivedLogs(final.deliveries, io_log))
        self.archive.put(sandbox.id, result.output, logs)
        sandbox.archived = (run_digest(result.output, logs), len(result.output))
        sandbox.result = replace(result, output=b"")
        sandbox.final = replace(final, deliveries=())
        sandbox.io_log = None

    def run_output(self, sandbox: Sandbox, offset: int = 0, limit: int | None = None) -> bytes:
        """A stopped sandbox's output from ``offset`` on (at most ``limit`` bytes), from
        memory or the archive."""
        if sandbox.run_digest is None:
            output = sandbox.result.output if sandbox.result is not None else b""
            return output[offset : None if limit is None else offset + limit]
        found = self.archive.output(sandbox.id, offset, limit)
        if found is None:
            raise StateCorrupted("run archive", f"the run of sandbox {sandbox.id} is missing")
        return found

    def output_length(self, sandbox: Sandbox) -> int:
        """The length of a stopped sandbox's output."""
        if sandbox.run_digest is not None:
            return sandbox.output_length
        return len(sandbox.result.output) if sandbox.result is not None else 0

    def run_logs(self, sandbox: Sandbox) -> ArchivedLogs:
        """The sandbox's delivery log and I/O log, live or stopped, from memory or the archive
        (an archived run is checked against its digest)."""
        if sandbox.run_digest is None:
            return ArchivedLogs(tuple(sandbox.deliveries), tuple(sandbox.io_log or ()))
        raw = self.archive.logs(sandbox.id)
        output = self.run_output(sandbox)
        if raw is None or run_digest(output, raw) != sandbox.run_digest:
            raise StateCorrupted(
                "run archive", f"the run of sandbox {sandbox.id} is missing or altered"
            )
        return decode_logs(sandbox.id, raw)

    def result_with_output(self, sandbox: Sandbox, limit: int | None = None) -> ExecResult | None:
        """The sandbox's result with its whole output, or its first ``limit`` bytes (read
        back from the archive when the run went there)."""
        result = sandbox.result
        if result is None:
            return None
        if sandbox.run_digest is None and (limit is None or len(result.output) <= limit):
            return result
        return replace(result, output=self.run_output(sandbox, 0, limit))

    # ------------------------------------------------------------------ as one value

    def snapshot(self) -> StateSnapshot:
        """The whole state (call between slices only)."""
        cycle, accounts = self.ledger.dump()
        return StateSnapshot(
            version=SNAPSHOT_VERSION,
            sandbox_counter=self.sandbox_counter,
            service_counter=self.service_counter,
            call_counter=self.call_counter,
            events=self.events,
            cycle=cycle,
            accounts=tuple(account_row(a) for a in accounts),
            sandboxes=tuple(_sandbox_snapshot(s) for s in self.sandboxes.values()),
            services=tuple(_service_snapshot(s) for s in self.services.values()),
        )

    def restore(self, snapshot: StateSnapshot) -> None:
        """Take every value of ``snapshot`` (into an empty state)."""
        self.sandbox_counter = snapshot.sandbox_counter
        self.service_counter = snapshot.service_counter
        self.call_counter = snapshot.call_counter
        self.events = snapshot.events
        load_accounts(self.ledger, snapshot.cycle, snapshot.accounts)
        for values in snapshot.sandboxes:
            try:
                sandbox = _sandbox_from(values, self._lookup)
            except SnapshotProgramMissing:
                sandbox = _sandbox_from(replace(values, machine=None), self._lookup)
                self.set_aside[sandbox.id] = self.program_problem(values.program)
            self.add(sandbox)
        for service in snapshot.services:
            _service_from(self, service)
        for sandbox in self.live_sandboxes():
            self.hold(sandbox, held_bytes(sandbox))

    def _lookup(self, program_id: Hash256) -> ForgeProgram | None:
        try:
            return self.programs.load(program_id)
        except ForgeError:  # restore() sets the sandbox aside, saying why
            return None

    def program_problem(self, program_id: Hash256) -> ForgeError:
        """Why ``program_id`` cannot be loaded (the vault's error, e.g. ``DamagedObject``)."""
        try:
            self.programs.load(program_id)
        except ForgeError as problem:
            return problem
        return VaultFetchFailed(program_id, "could not be loaded")


AccountRow = tuple[AgentId, int, int, int, int]


def account_row(account: Account) -> AccountRow:
    return (
        account.agent,
        account.tick_allowance,
        account.ticks_spent,
        account.ticks_reserved,
        account.spark,
    )


def load_accounts(ledger: Ledger, cycle: int, rows: tuple[AccountRow, ...]) -> None:
    ledger.load(cycle, [Account(AgentId(row[0].raw), *row[1:]) for row in rows])


def _sandbox_snapshot(sandbox: Sandbox) -> SandboxSnapshot:
    access = sandbox.access or {}
    return SandboxSnapshot(
        id=sandbox.id,
        request=sandbox.request,
        program=sandbox.program,
        state=sandbox.state,
        started=sandbox.started,
        scheduled=sandbox.scheduled,
        reserved=sandbox.reserved_ticks,
        access=tuple(
            (agent, tuple(sorted(ops, key=lambda op: op.value))) for agent, ops in access.items()
        ),
        io_log=tuple(sandbox.io_log or ()),
        result=sandbox.result,
        final=sandbox.final,
        machine=checkpoint(sandbox.machine, include_program=False)
        if sandbox.machine is not None
        else None,
        run_digest=sandbox.run_digest,
        output_length=sandbox.output_length,
    )


def _sandbox_from(values: SandboxSnapshot, lookup: object) -> Sandbox:
    sandbox = Sandbox(values.id, values.request, values.program)
    sandbox.state = values.state
    sandbox.started = values.started
    sandbox.scheduled = values.scheduled
    sandbox.reserved_ticks = values.reserved
    if values.access:
        sandbox.access = {agent: frozenset(ops) for agent, ops in values.access}
    if values.io_log:
        sandbox.io_log = list(values.io_log)
    sandbox.result = values.result
    sandbox.final = values.final
    if values.run_digest is not None:
        sandbox.archived = (values.run_digest, values.output_length)
    if values.machine is not None:
        sandbox.machine = restore(values.machine, lookup)  # type: ignore[arg-type]
    return sandbox


def _call_snapshot(call: ServiceCall) -> CallSnapshot:
    notify = call.notify
    return CallSnapshot(
        number=call.number,
        endpoint=call.endpoint.name,
        data=call.data,
        caller=call.caller,
        caller_sandbox=call.caller_sandbox,
        notify_agent=notify[0] if notify is not None else None,
        notify_request=notify[1] if notify is not None else None,
        ticks=call.ticks_at_delivery,
    )


def service_call(service: ServiceRecord, values: CallSnapshot) -> ServiceCall:
    """A queued call of ``service`` from its snapshot."""
    return recorded_call(
        service,
        values.number,
        values.endpoint,
        values.data,
        values.caller,
        values.caller_sandbox,
        values.notify_agent,
        values.notify_request,
        values.ticks,
    )


def _service_snapshot(service: ServiceRecord) -> ServiceSnapshot:
    return ServiceSnapshot(
        id=service.id,
        sandbox=service.sandbox.id,
        name=service.name,
        tick_budget=service.tick_budget,
        auto_fund=service.auto_fund,
        endpoints=service.endpoints,
        state=service.state,
        funded_cycle=service.funded_cycle,
        reserved=service.reserved_ticks,
        cycle_start=service.cycle_start_ticks,
        queue=tuple(_call_snapshot(call) for call in service.queue),
        current=_call_snapshot(service.current) if service.current is not None else None,
        completed=service.calls_completed,
    )


def _service_from(state: EngineState, values: ServiceSnapshot) -> None:
    sandbox = state.sandbox(values.sandbox)
    service = ServiceRecord(
        values.id,
        sandbox.owner,
        sandbox,
        values.name,
        values.tick_budget,
        values.auto_fund,
        values.endpoints,
    )
    service.state = values.state
    service.funded_cycle = values.funded_cycle
    service.reserved_ticks = values.reserved
    service.cycle_start_ticks = values.cycle_start
    service.calls_completed = values.completed
    service.queue.extend(service_call(service, call) for call in values.queue)
    if values.current is not None:
        service.current = service_call(service, values.current)
    state.services[service.id] = service
    sandbox.service = service


def machine_of(sandbox: Sandbox) -> Machine:
    """The sandbox's machine; ``StateCorrupted`` when a record needs one it does not have."""
    if sandbox.machine is None:
        from kforge.core import StateCorrupted

        raise StateCorrupted("engine journal", f"sandbox {sandbox.id} has no machine to run")
    return sandbox.machine
