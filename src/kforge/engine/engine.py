"""The Forge engine: sandboxes, their lifecycle, scheduling, host calls, accounting, events.

Use it as an async context manager::

    async with Engine(Vault(":memory:")) as engine:
        code = engine.vault.put_program(program)
        sandbox = await engine.create_sandbox(CreateSandbox(owner, code, 65536, 100_000))
        await engine.exec_start(sandbox, owner)
        result = await engine.wait(sandbox)

Lifecycle of a sandbox: ``CREATED → READY → RUNNING ↔ BLOCKED → HALTED | FAULTED |
KILLED | DEADLINE_EXCEEDED``; an operation that does not fit the state raises
``InvalidState``.  Every change is published on :attr:`Engine.bus`.  The clock
and the random source are injected; with a seeded source and a manual clock,
the same requests in the same order give the same ids, events and results.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol

from kforge.accounting import Ledger
from kforge.core import (
    AgentId,
    EngineNotOpen,
    EventKind,
    ForgeError,
    Hash256,
    Internal,
    InvalidState,
    MemoryQuotaExceeded,
    PermissionDenied,
    SandboxNotFound,
    TooManySandboxes,
)
from kforge.engine.artifacts import (
    PROVABLE,
    ProofJob,
    derived_signer,
    link_program,
    proof_event_payload,
    run_proof_job,
    run_record,
)
from kforge.engine.dispatch import Dispatcher
from kforge.engine.durable import Journal, accounts_record, create_record, rebuild, take_snapshot
from kforge.engine.models import (
    Clock,
    CreateSandbox,
    EngineLimits,
    ExecResult,
    HostCall,
    Operation,
    RandomSource,
    SandboxInfo,
    SandboxState,
    SystemClock,
    system_random,
)
from kforge.engine.sandbox import Sandbox
from kforge.engine.scheduler import Scheduler
from kforge.engine.service_ops import ServiceOperations
from kforge.engine.services import ServiceRecord
from kforge.events import AnyEventKind, EventBus
from kforge.host import (
    AgoraAdapter,
    AgoraBoard,
    HostError,
    HostRequest,
    HostRouter,
    MintAdapter,
    OracleAdapter,
    OracleHandler,
    PeerAdapter,
    Status,
    TableOracle,
    VaultAdapter,
    incoming_frame,
)
from kforge.isa import DEFAULT_GRANTS, Channel
from kforge.link import Import
from kforge.machine import Machine, MachineState, granted_channels, plan_memory
from kforge.messages import Envelope, InvalidRequest, Mailbox
from kforge.proofs import ExecutionProof, Signer
from kforge.proofs.replay import RunRecord
from kforge.storage import ProgramCache, Vault, default_data_dir
from kforge.tiers import TIERS, TierRunner

__all__ = ["TIERS", "Engine", "EngineStatus", "SliceObserver"]

_SANDBOX_DOMAIN: Final = b"kforge/sandbox/v1\0"
_ENVELOPE_DOMAIN: Final = b"kforge/envelope/v1\0"
_ENGINE_DOMAIN: Final = b"kforge/engine/v1\0"

#: Called after every scheduler slice with the sandbox, its state and its ticks used.
SliceObserver = Callable[[Hash256, SandboxState, int], None]


class ProgramGate(Protocol):
    """Decides whether a program may run; e.g. ``kforge.registry.TrustPolicy``.

    ``check_runnable`` returns when the program may run and raises a
    ``ForgeError`` naming why not (not trusted, revoked) otherwise.
    """

    def check_runnable(self, program_id: Hash256) -> None: ...


class EngineStatus(Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class Engine(ServiceOperations):
    """The Forge engine (seed §4 ``ForgeEngine``) for one process.

    ``vault`` holds programs and channel-3 objects (default: the SQLite vault
    under the data directory).  ``ledger`` turns accounting on: creation and
    execution are charged to the owner (seed §11); without it nothing is
    charged and an in-memory ledger serves only the mint channel.
    ``oracle`` is a handler or a fixed table for channel 4.  ``tier`` is the
    execution tier: a :class:`~kforge.tiers.TierRunner` (shared, not closed by
    the engine) or a tier's name (the engine makes and closes its own runner).  ``clock`` and ``random_source`` are injected.
    ``on_slice`` observes every scheduler slice (metrics, tracing, tests).
    ``signer`` signs execution proofs (default: a key derived from the secret;
    pass the node's key, ``kforge.proofs.keys.load_or_create_key()``, in production).
    """

    def __init__(
        self,
        vault: Vault | None = None,
        *,
        ledger: Ledger | None = None,
        limits: EngineLimits | None = None,
        clock: Clock | None = None,
        random_source: RandomSource | None = None,
        tier: str | TierRunner = "auto",
        oracle: OracleHandler | Mapping[bytes, bytes] | None = None,
        agora: AgoraBoard | None = None,
        agent_id: AgentId | None = None,
        event_queue_size: int = 4096,
        mailbox_size: int = 1024,
        program_cache_size: int = 256,
        on_slice: SliceObserver | None = None,
        signer: Signer | None = None,
        cycle_interval: float | None = None,
        cycle_agents: Collection[AgentId] | None = None,
        data_dir: str | Path | None = None,
        durable: bool = False,
        snapshot_every: int = 1000,
        trust: ProgramGate | None = None,
    ) -> None:
        self._owned: list[Vault | Ledger | Journal | TierRunner] = []
        self.trust = trust
        folder = Path(data_dir) if data_dir is not None else default_data_dir()
        self.journal: Journal | None = None
        if durable:
            self.journal = Journal(folder)
            self._owned.append(self.journal)
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.snapshot_every = snapshot_every
        if vault is None:
            vault = Vault.open_default(folder)
            self._owned.append(vault)
        self.vault = vault
        self.accounting = ledger is not None
        if ledger is None:
            ledger = Ledger()
            self._owned.append(ledger)
        self.ledger = ledger
        self.limits = limits or EngineLimits()
        self.clock: Clock = clock or SystemClock()
        self._secret = (random_source or system_random)(32)
        self._epoch = 0
        if (
            self.journal is not None
        ):  # a durable engine keeps its secret (ids, signer) across starts
            stored = self.journal.meta("secret")
            if stored is None:
                self.journal.set_meta("secret", self._secret)
            else:
                self._secret = stored
            self._epoch = int.from_bytes(self.journal.meta("epoch") or b"", "big") + 1
            self.journal.set_meta("epoch", self._epoch.to_bytes(8, "big"))
        self.agent_id = agent_id or AgentId(Hash256.of(_ENGINE_DOMAIN + self._secret).raw)
        self.signer: Signer = signer or derived_signer(self._secret)
        self.runner = TierRunner.of(tier)
        if not isinstance(tier, TierRunner):
            self._owned.append(self.runner)
        self.on_slice = on_slice
        self.bus = EventBus(self.clock.time_ms, event_queue_size)
        self.mailbox = Mailbox(mailbox_size)
        self.programs = ProgramCache(vault, program_cache_size)
        if oracle is None or isinstance(oracle, Mapping):
            oracle = TableOracle(oracle)
        self.agora = agora or AgoraBoard()
        self.host = HostRouter(
            [
                VaultAdapter(vault),
                OracleAdapter(oracle),
                AgoraAdapter(self.agora),
                MintAdapter(ledger),
                PeerAdapter(self),
            ]
        )
        self.scheduler = Scheduler(self, self.clock)
        self.status = EngineStatus.UNOPENED
        self._task: asyncio.Task[None] | None = None
        self._sandboxes: dict[Hash256, Sandbox] = {}
        self._live_by_owner: dict[AgentId, int] = {}
        self._live_count = 0
        self._live_memory = 0
        self._sandbox_counter = 0
        self._envelope_counter = 0
        self._background: set[asyncio.Task[None]] = set()
        self._dispatcher = Dispatcher(self)
        if cycle_interval is not None and not cycle_interval > 0:
            raise ValueError("cycle_interval must be a positive number of seconds")
        self.cycle_interval = cycle_interval
        #: Who may advance cycles by message (``None``: any agent).
        self.cycle_agents = frozenset(cycle_agents) if cycle_agents is not None else None
        self._services: dict[Hash256, ServiceRecord] = {}
        self._service_counter = 0
        self._call_counter = 0
        self._cycle_task: asyncio.Task[None] | None = None
        self._exec_lock = asyncio.Lock()
        self._ledger_changes = -1
        self.rebuilt_records = 0
        if self.journal is not None:
            journal = self.journal
            self.bus.listeners.append(lambda event: journal.append_raw("event", event.encode()))

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> Engine:
        """Start the scheduler.  Called by ``async with``; opening twice is harmless."""
        if self.status is EngineStatus.CLOSED:
            raise Internal("the engine is closed and cannot be reopened")
        if self.status is EngineStatus.UNOPENED:
            if self.journal is not None:
                self.rebuilt_records = rebuild(self, self.journal)
                self._ledger_changes = self.ledger.changes
            self._task = asyncio.get_running_loop().create_task(self.scheduler.run())
            self.status = EngineStatus.OPEN
            if self.cycle_interval is not None:
                self._cycle_task = asyncio.get_running_loop().create_task(self._cycle_timer())
        return self

    async def _cycle_timer(self) -> None:
        """Begin a cycle every ``cycle_interval`` seconds (real time) while open."""
        assert self.cycle_interval is not None
        while self.status is EngineStatus.OPEN:
            await asyncio.sleep(self.cycle_interval)
            if self.status is not EngineStatus.OPEN:
                return
            with contextlib.suppress(ForgeError):
                await self.begin_cycle()

    async def close(self) -> None:
        """Kill every live sandbox (``killed_by`` is the engine), stop, release storage.  Idempotent."""
        if self.status is EngineStatus.CLOSED:
            return
        if self.journal is not None and self.status is EngineStatus.OPEN:
            # a durable engine leaves its sandboxes to the next start: snapshot, don't kill
            async with self._exec_lock:
                self._snapshot_now()
            for sandbox in self._sandboxes.values():
                for waiter in sandbox.waiters:
                    waiter.cancel()
            for service in self._services.values():
                for call in [service.current, *service.queue]:
                    if call is not None and call.future is not None:
                        call.future.cancel()
        else:
            for sandbox in list(self._sandboxes.values()):
                if sandbox.state.is_live and sandbox.machine is not None:
                    self._finalize(sandbox, SandboxState.KILLED, killed_by=self.agent_id)
        self.status = EngineStatus.CLOSED
        if self._cycle_task is not None:
            self._cycle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cycle_task
            self._cycle_task = None
        self.scheduler.stop()
        if self._task is not None:
            await self._task
            self._task = None
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for resource in self._owned:
            resource.close()

    async def __aenter__(self) -> Engine:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _require_open(self) -> None:
        if self.status is not EngineStatus.OPEN:
            raise EngineNotOpen(self.status.value)

    # ------------------------------------------------------------------ ids

    def _new_sandbox_id(self) -> Hash256:
        """Never guessable from caller data: hashes the engine's random secret and a counter."""
        self._sandbox_counter += 1
        return Hash256.of(_SANDBOX_DOMAIN + self._secret + self._sandbox_counter.to_bytes(8, "big"))

    def new_envelope_id(self) -> Hash256:
        """A fresh id for an envelope the engine sends."""
        self._envelope_counter += 1
        epoch = self._epoch.to_bytes(8, "big") if self._epoch else b""
        return Hash256.of(
            _ENVELOPE_DOMAIN + self._secret + epoch + self._envelope_counter.to_bytes(8, "big")
        )

    # ------------------------------------------------------------------ lookup and access

    def _get(self, sandbox_id: Hash256) -> Sandbox:
        sandbox = self._sandboxes.get(sandbox_id) if isinstance(sandbox_id, Hash256) else None
        if sandbox is None:
            raise SandboxNotFound(sandbox_id)
        return sandbox

    def _authorized(self, sandbox_id: Hash256, requester: AgentId, operation: Operation) -> Sandbox:
        sandbox = self._get(sandbox_id)
        if not sandbox.allows(requester, operation):
            raise PermissionDenied(
                f"agent {requester} is not the owner of sandbox {sandbox_id} "
                f"and holds no '{operation.value}' grant"
            )
        return sandbox

    async def grant(
        self,
        sandbox_id: Hash256,
        requester: AgentId,
        agent: AgentId,
        operations: Iterable[Operation],
    ) -> None:
        """Let ``agent`` do ``operations`` on the sandbox; only its owner may grant."""
        sandbox = self._get(sandbox_id)
        if requester != sandbox.owner:
            raise PermissionDenied(f"only the owner of sandbox {sandbox_id} may grant access")
        sandbox.access[agent] = sandbox.access.get(agent, frozenset()) | frozenset(operations)
        self._log(
            "grant",
            id=sandbox.id.raw,
            agent=agent.raw,
            operations=sorted(op.value for op in sandbox.access[agent]),
        )
        self._commit()

    async def revoke(self, sandbox_id: Hash256, requester: AgentId, agent: AgentId) -> None:
        """Take back every grant ``agent`` holds on the sandbox; only its owner may."""
        sandbox = self._get(sandbox_id)
        if requester != sandbox.owner:
            raise PermissionDenied(f"only the owner of sandbox {sandbox_id} may revoke access")
        sandbox.access.pop(agent, None)
        self._log("revoke", id=sandbox.id.raw, agent=agent.raw)
        self._commit()

    # ------------------------------------------------------------------ creating

    async def create_sandbox(self, request: CreateSandbox) -> Hash256:
        """Create a READY sandbox running the program stored under ``request.code``.

        Checked in this order, before any memory is allocated or anything
        charged: the request's fields (``InvalidRequest``), the engine's and the
        owner's sandbox limits (``TooManySandboxes``), the memory limits and the
        program's layout (``MemoryQuotaExceeded``), the grants
        (``PermissionDenied``), the program (``VaultFetchFailed``,
        ``InvalidProgram``); then the owner is charged (``InsufficientResources``).
        """
        self._require_open()
        if not isinstance(request, CreateSandbox):
            raise InvalidRequest(
                "request", f"expected a CreateSandbox, got {type(request).__name__}"
            )
        request.validate(self.limits.max_tick_budget)
        owner = request.owner
        limits = self.limits
        if self._live_count >= limits.max_sandboxes:
            raise TooManySandboxes(
                f"the engine already runs {self._live_count} of at most {limits.max_sandboxes}"
            )
        owned = self._live_by_owner.get(owner, 0)
        if owned >= limits.max_sandboxes_per_owner:
            raise TooManySandboxes(
                f"owner {owner} already has {owned} of at most {limits.max_sandboxes_per_owner}"
            )
        if request.memory_quota > limits.max_memory_quota:
            raise MemoryQuotaExceeded(request.memory_quota, limits.max_memory_quota)
        if self._live_memory + request.memory_quota > limits.max_total_memory:
            raise MemoryQuotaExceeded(
                self._live_memory + request.memory_quota, limits.max_total_memory
            )
        granted_channels(frozenset(request.grants) - DEFAULT_GRANTS)
        if self.trust is not None:
            self.trust.check_runnable(request.code)  # re-checked at every creation
        program = self.programs.load(request.code)
        plan_memory(program, request.memory_quota, request.environment)
        charge = (
            self.ledger.charge_creation(owner, request.memory_quota) if self.accounting else None
        )

        sandbox = Sandbox(self._new_sandbox_id(), request)
        self._sandboxes[sandbox.id] = sandbox
        self._count_live(sandbox, +1)
        try:
            sandbox.machine = request.load_machine(program, limits.message_limit)
        except ForgeError:
            del self._sandboxes[sandbox.id]
            self._count_live(sandbox, -1)
            if charge is not None:
                self.ledger.refund_creation(charge)
            raise
        sandbox.state = SandboxState.READY
        self._log("create", **create_record(sandbox, self._sandbox_counter))
        self._emit(
            EventKind.SANDBOX_CREATED,
            sandbox,
            sandbox_id=sandbox.id,
            owner=owner,
            code=request.code,
            memory_quota=request.memory_quota,
            tick_budget=request.tick_budget,
            persistent=request.persistent,
        )
        self._commit()
        return sandbox.id

    def _count_live(self, sandbox: Sandbox, delta: int) -> None:
        self._live_count += delta
        self._live_memory += delta * sandbox.request.memory_quota
        owned = self._live_by_owner.get(sandbox.owner, 0) + delta
        if owned:
            self._live_by_owner[sandbox.owner] = owned
        else:
            self._live_by_owner.pop(sandbox.owner, None)

    # ------------------------------------------------------------------ querying

    async def sandbox_status(self, sandbox_id: Hash256, requester: AgentId) -> SandboxInfo:
        """The sandbox's :class:`SandboxInfo`; the owner or a ``status`` grant only."""
        return self._authorized(sandbox_id, requester, Operation.STATUS).info()

    async def list_sandboxes(self, owner: AgentId | None = None) -> list[SandboxInfo]:
        """Every sandbox the engine keeps (of ``owner``, when given), oldest first."""
        return [
            sandbox.info()
            for sandbox in self._sandboxes.values()
            if owner is None or sandbox.owner == owner
        ]

    async def io_log(self, sandbox_id: Hash256, requester: AgentId) -> tuple[HostCall, ...]:
        """Every host call the sandbox made, in order, with its tick count."""
        return tuple(self._authorized(sandbox_id, requester, Operation.STATUS).io_log)

    async def output(self, sandbox_id: Hash256, requester: AgentId, *, offset: int = 0) -> bytes:
        """The sandbox's stdout (channel 0) from byte ``offset`` on: so far, or all once stopped.

        Works in every state: a live sandbox's output as written up to now
        (between slices), a stopped one's ``ExecResult.output``.  Output only
        grows, so a reader follows it by passing the number of bytes it
        already has as ``offset``; ``offset`` equal to the length gives
        ``b""``.  The owner or a ``status`` grant only (``PermissionDenied``);
        ``SandboxNotFound`` for an unknown id; ``InvalidRequest`` (field
        ``offset``) for an offset that is not an integer in 0..length.
        """
        sandbox = self._authorized(sandbox_id, requester, Operation.STATUS)
        machine = sandbox.machine
        if machine is not None:
            written: bytes | bytearray = machine.stdout
        elif sandbox.result is not None:
            written = sandbox.result.output
        else:
            written = b""
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidRequest("offset", f"expected an integer, got {type(offset).__name__}")
        if not 0 <= offset <= len(written):
            raise InvalidRequest(
                "offset", f"{offset} is outside 0..{len(written)} (the output's length so far)"
            )
        return bytes(written[offset:])

    async def wait(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None = None,
        *,
        timeout: float | None = None,
    ) -> ExecResult:
        """The result once the sandbox has stopped (``asyncio.TimeoutError`` after ``timeout``)."""
        sandbox = (
            self._get(sandbox_id)
            if requester is None
            else self._authorized(sandbox_id, requester, Operation.STATUS)
        )
        if sandbox.result is not None:
            return sandbox.result
        future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
        sandbox.waiters.append(future)
        return await asyncio.wait_for(future, timeout)

    # ------------------------------------------------------------------ executing

    async def exec_start(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Hand the sandbox to the scheduler; its result comes by :meth:`wait` and events.

        Allowed from READY, or after :meth:`step` (RUNNING or BLOCKED) while no
        scheduler execution is under way.  Reserves the tick budget when
        accounting is on and starts the wall-clock deadline.
        """
        await self._exec_start(sandbox_id, requester)

    async def _exec_start(
        self, sandbox_id: Hash256, requester: AgentId, notify: tuple[AgentId, Hash256] | None = None
    ) -> None:
        self._require_open()
        sandbox = self._authorized(sandbox_id, requester, Operation.EXEC)
        if sandbox.service is not None:
            raise InvalidState(sandbox.state, "exec_start (the sandbox runs a service)")
        runnable = (SandboxState.READY, SandboxState.RUNNING, SandboxState.BLOCKED)
        if sandbox.scheduled or sandbox.state not in runnable:
            operation = "exec_start (already executing)" if sandbox.scheduled else "exec_start"
            raise InvalidState(sandbox.state, operation)
        self._begin(sandbox)
        if notify is not None:
            sandbox.notify.append(notify)
        sandbox.scheduled = True
        sandbox.deadline_at = self.clock.monotonic() + (
            sandbox.request.deadline
            if sandbox.request.deadline is not None
            else self.limits.deadline
        )
        self.scheduler.watch_deadline(sandbox)
        self._log("start", id=sandbox.id.raw, deadline=True)
        if sandbox.state is not SandboxState.BLOCKED:
            sandbox.state = SandboxState.RUNNING
            self.scheduler.enqueue(sandbox)
        self._commit()

    def _begin(self, sandbox: Sandbox, *, reserve: bool = True) -> None:
        """The first start of execution: reserve the tick budget, announce the start."""
        if sandbox.started:
            return
        if self.accounting and reserve:
            self.ledger.reserve_ticks(
                sandbox.owner,
                sandbox.request.tick_budget,
                f"the tick budget of sandbox {sandbox.id}",
            )
            sandbox.reserved_ticks = sandbox.request.tick_budget
        sandbox.started = True
        self._log("begin", id=sandbox.id.raw, reserved=sandbox.reserved_ticks)
        self._emit(EventKind.SANDBOX_STARTED, sandbox, sandbox_id=sandbox.id, owner=sandbox.owner)

    async def step(self, sandbox_id: Hash256, requester: AgentId) -> SandboxState:
        """Execute one instruction of a sandbox not under the scheduler (for debugging).

        Allowed in READY and RUNNING; a BLOCKED sandbox needs input first.
        Host calls the instruction makes are answered before this returns.
        """
        self._require_open()
        sandbox = self._authorized(sandbox_id, requester, Operation.EXEC)
        if sandbox.scheduled or sandbox.service is not None:
            raise InvalidState(sandbox.state, "step (the scheduler is executing it)")
        if sandbox.state not in (SandboxState.READY, SandboxState.RUNNING):
            raise InvalidState(sandbox.state, "step")
        machine = sandbox.machine
        assert machine is not None
        async with self._exec_lock:
            self._begin(sandbox)
            sandbox.state = SandboxState.RUNNING
            self._log("step", id=sandbox.id.raw, ticks=machine.ticks_used)
            machine.step()
            await self._after_execution(sandbox, machine)
            self._commit()
        return sandbox.state

    async def run_slice(self, sandbox: Sandbox) -> None:
        """One scheduler slice (see :class:`Scheduler`).

        An unexpected exception (a bug in a tier or the engine) must not stop the
        scheduler: the sandbox is killed by the engine, with the error appended
        to its stderr.  An exception of the ``on_slice`` observer is ignored.
        """
        machine = sandbox.machine
        if machine is None:
            return
        async with self._exec_lock:
            try:
                self.runner.run(machine, self.limits.slice_ticks, yield_on_tick=True)
                sandbox.slices += 1
                await self._after_execution(sandbox, machine)
            except Exception as error:
                machine.stderr += f"\nkforge engine: execution failed: {error!r}\n".encode()
                if sandbox.state.is_live:
                    self._finalize(sandbox, SandboxState.KILLED, killed_by=self.agent_id)
                self._commit()
                return
            self._commit()
            journal = self.journal
            if journal is not None and journal.since_snapshot >= self.snapshot_every:
                self._snapshot_now()
        if self.on_slice is not None:
            with contextlib.suppress(Exception):
                self.on_slice(sandbox.id, sandbox.state, machine.ticks_used)

    async def _after_execution(self, sandbox: Sandbox, machine: Machine) -> None:
        """Answer the host calls the sandbox made, then settle its state."""
        service: ServiceRecord | None = sandbox.service
        for channel, data in machine.take_outbound():
            if sandbox.state.is_final:  # killed while an adapter was awaited
                break
            if service is not None and channel in service.channels:
                self._service_output(service, channel, data, machine)
                continue
            request = HostRequest(
                sandbox.id, sandbox.owner, channel, data, machine.ticks_used, machine.message_limit
            )
            reply = await self.host.call(request, machine.grants)
            delivered = False
            if sandbox.state.is_live and not machine.state.is_final:
                self._deliver_machine(sandbox, channel, reply.frame, (data, int(reply.status)))
                delivered = True
            sandbox.io_log.append(
                HostCall(machine.ticks_used, channel, data, reply.frame, reply.status, delivered)
            )
        if sandbox.state.is_final:
            return
        state = machine.state
        if state is MachineState.HALTED:
            self._finalize(sandbox, SandboxState.HALTED)
        elif state is MachineState.FAULTED:
            self._finalize(sandbox, SandboxState.FAULTED)
        elif state is MachineState.BLOCKED:
            if sandbox.state is not SandboxState.BLOCKED:
                sandbox.state = SandboxState.BLOCKED
                self._emit(
                    EventKind.SANDBOX_BLOCKED,
                    sandbox,
                    sandbox_id=sandbox.id,
                    blocked_on_channel=machine.blocked_channel,
                )
        else:
            sandbox.state = SandboxState.RUNNING
            if sandbox.scheduled:
                self.scheduler.enqueue(sandbox)
        if service is not None:
            self._pump(service)

    def deadline_passed(self, sandbox: Sandbox) -> None:
        """The scheduler's call when an execution outlives its wall-clock deadline."""
        if sandbox.state.is_live and sandbox.machine is not None:
            self._finalize(sandbox, SandboxState.DEADLINE_EXCEEDED)
            self._commit()

    def expire_deadlines(self) -> list[Hash256]:
        """End every execution whose deadline has passed now; returns their ids.

        The scheduler does this on its own; call it after moving a manual clock.
        """
        return [sandbox.id for sandbox in self.scheduler.expire_deadlines()]

    # ------------------------------------------------------------------ input and peers

    async def deliver(
        self, sandbox_id: Hash256, channel: int, data: bytes, requester: AgentId
    ) -> None:
        """Give a sandbox input on stdin (channel 2), waking it if it waits there.

        Channels 3..7 carry host replies and peer messages only, so agents may
        not deliver on them (``PermissionDenied``).  A stopped sandbox takes
        nothing (``InvalidState``).
        """
        self._require_open()
        sandbox = self._authorized(sandbox_id, requester, Operation.DELIVER)
        if channel != Channel.STDIN:
            raise PermissionDenied(
                f"channel {channel} is not open to agents: input goes on stdin (channel 2)"
            )
        if not isinstance(data, bytes | bytearray):
            raise InvalidRequest("data", f"expected bytes, got {type(data).__name__}")
        if len(data) > self.limits.message_limit:
            raise InvalidRequest(
                "data",
                f"{len(data)} bytes is over the message limit of {self.limits.message_limit}",
            )
        if sandbox.state.is_final or sandbox.machine is None:
            raise InvalidState(sandbox.state, "deliver")
        self._deliver_machine(sandbox, channel, bytes(data))
        self._commit()

    def _deliver_machine(
        self, sandbox: Sandbox, channel: int, data: bytes, call: tuple[bytes, int] | None = None
    ) -> None:
        """Deliver to the sandbox's machine (logged for the durable engine) and wake it.

        ``call`` is the (request, status) of a host call whose reply this is.
        """
        machine = sandbox.machine
        assert machine is not None
        machine.deliver(channel, data)
        self._log(
            "deliver",
            id=sandbox.id.raw,
            ticks=machine.ticks_used,
            channel=channel,
            data=data,
            call=list(call) if call is not None else None,
        )
        self._wake(sandbox)

    def _wake(self, sandbox: Sandbox) -> None:
        machine = sandbox.machine
        if (
            machine is not None
            and sandbox.state is SandboxState.BLOCKED
            and machine.state is MachineState.RUNNING
        ):
            sandbox.state = SandboxState.RUNNING
            if sandbox.scheduled:
                self.scheduler.enqueue(sandbox)

    def send_to_peer(
        self, sender: Hash256, sender_owner: AgentId, target: Hash256, data: bytes
    ) -> None:
        """Channel 7: queue ``data`` for ``target`` if it is live, listens on 7 and accepts the sender."""
        sandbox = self._sandboxes.get(target)
        if sandbox is None or sandbox.machine is None or sandbox.state.is_final:
            raise HostError(Status.NOT_FOUND, f"no live sandbox {target}")
        if Channel.INTER_SANDBOX not in sandbox.machine.grants:
            raise HostError(Status.DENIED, f"sandbox {target} was not granted channel 7")
        if sandbox.service is not None and Channel.INTER_SANDBOX in sandbox.service.channels:
            raise HostError(
                Status.DENIED, f"channel 7 of sandbox {target} is a service endpoint: use CALL"
            )
        if sender_owner != sandbox.owner and sender_owner not in sandbox.request.accept_from:
            raise HostError(
                Status.DENIED,
                f"sandbox {target} does not accept messages from owner {sender_owner}",
            )
        self._deliver_machine(
            sandbox, Channel.INTER_SANDBOX, incoming_frame(sender, sender_owner, data)
        )

    # ------------------------------------------------------------------ stopping

    async def kill_sandbox(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Stop a READY, RUNNING or BLOCKED sandbox at once; the owner or a ``kill`` grant only."""
        self._require_open()
        sandbox = self._authorized(sandbox_id, requester, Operation.KILL)
        if sandbox.state.is_final or sandbox.machine is None:
            raise InvalidState(sandbox.state, "kill")
        self._finalize(sandbox, SandboxState.KILLED, killed_by=requester)
        self._commit()

    async def forget(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Drop the record of a stopped sandbox (its id becomes unknown); the owner only."""
        sandbox = self._get(sandbox_id)
        if requester != sandbox.owner:
            raise PermissionDenied(f"only the owner of sandbox {sandbox_id} may forget it")
        if sandbox.state.is_live:
            raise InvalidState(sandbox.state, "forget")
        self._drop(sandbox)
        self._commit()

    def _finalize(
        self, sandbox: Sandbox, state: SandboxState, *, killed_by: AgentId | None = None
    ) -> None:
        """Stop the sandbox for good: result, accounting, event, waiters, replies, memory."""
        machine = sandbox.machine
        assert machine is not None and state.is_final
        sandbox.state = state
        sandbox.scheduled = False
        fault = machine.fault if state is SandboxState.FAULTED else None
        detail = machine.fault_detail if state is SandboxState.FAULTED else None
        output = bytes(machine.stdout)
        result = ExecResult(sandbox.id, state, machine.ticks_used, output, fault, detail)
        sandbox.result = result
        ticks_at_stop = machine.ticks_used
        self._log(
            "final",
            id=sandbox.id.raw,
            state=state.value,
            ticks=ticks_at_stop,
            killed_by=killed_by.raw if killed_by is not None else None,
        )
        sandbox.freeze()
        self._count_live(sandbox, -1)
        if sandbox.service is not None:
            self._service_stopped(sandbox.service, result, ticks_at_stop)
        if sandbox.reserved_ticks:
            self.ledger.settle_ticks(sandbox.owner, sandbox.reserved_ticks, result.ticks_used)
            sandbox.reserved_ticks = 0
        if state is SandboxState.HALTED:
            self._emit(
                EventKind.SANDBOX_HALTED,
                sandbox,
                sandbox_id=sandbox.id,
                ticks_used=result.ticks_used,
                output_hash=Hash256.of(output),
            )
        elif state is SandboxState.KILLED:
            self._emit(
                EventKind.SANDBOX_KILLED, sandbox, sandbox_id=sandbox.id, killed_by=killed_by
            )
        else:
            self._emit(
                EventKind.SANDBOX_FAULTED,
                sandbox,
                sandbox_id=sandbox.id,
                fault=int(fault) if fault is not None else None,
                ticks_used=result.ticks_used,
                pc=machine.pc,
                fault_name=fault.name if fault is not None else state.value,
                fault_detail=detail,
            )
        for waiter in sandbox.waiters:
            if not waiter.done():
                waiter.set_result(result)
        sandbox.waiters.clear()
        for recipient, reply_to in sandbox.notify:
            self.mailbox.post(recipient, self._dispatcher.exec_result_envelope(result, reply_to))
        sandbox.notify.clear()

    def _drop(self, sandbox: Sandbox) -> None:
        del self._sandboxes[sandbox.id]
        self._log("forget", id=sandbox.id.raw)

    # ------------------------------------------------------------------ linking and proofs

    async def link_resolve(
        self, program_id: Hash256, imports: Sequence[Import], requester: AgentId
    ) -> Hash256:
        """Link the program with ``imports`` (see :func:`kforge.link.link`); returns the new id.

        The linked program is stored in the vault; with accounting on the
        requester pays 2 ticks per import.  Publishes LINK_COMPLETED.
        """
        self._require_open()
        resolved = link_program(
            self.programs,
            self.vault,
            self.ledger if self.accounting else None,
            program_id,
            imports,
            requester,
        )
        self.bus.publish(
            EventKind.LINK_COMPLETED,
            {"original": program_id, "resolved": resolved, "import_count": len(imports)},
            owner=requester,
        )
        self._commit()
        return resolved

    async def run_record(self, sandbox_id: Hash256, requester: AgentId) -> RunRecord:
        """What determines the sandbox's run (for replay and for verifying its proof)."""
        sandbox = self._authorized(sandbox_id, requester, Operation.STATUS)
        program = self.programs.load(sandbox.request.code)
        return run_record(sandbox, program, self.limits.message_limit)

    async def request_proof(self, sandbox_id: Hash256, requester: AgentId) -> ExecutionProof:
        """An execution proof of a HALTED or FAULTED sandbox (see :mod:`kforge.proofs`).

        The run is replayed from its record in a worker thread and signed with
        :attr:`signer`; with accounting on the requester pays 2 ticks per tick
        of the run.  Publishes PROOF_GENERATED.  The owner or a ``status`` grant only.
        """
        return await self._prove(self._prepare_proof(sandbox_id, requester))

    def _prepare_proof(self, sandbox_id: Hash256, requester: AgentId) -> ProofJob:
        """Check and charge a proof request (raises at once); generation comes later."""
        self._require_open()
        sandbox = self._authorized(sandbox_id, requester, Operation.STATUS)
        if sandbox.state not in PROVABLE:
            raise InvalidState(sandbox.state, "request_proof (only a halted or faulted run)")
        program = self.programs.load(sandbox.request.code)
        record = run_record(sandbox, program, self.limits.message_limit)
        cost = ProofJob.cost_of(sandbox.ticks_used) if self.accounting else 0
        if cost:
            self.ledger.charge_ticks(requester, cost, f"a proof of sandbox {sandbox_id}")
        return ProofJob(sandbox, requester, program, record, cost)

    async def _prove(self, job: ProofJob) -> ExecutionProof:
        try:
            proof = await run_proof_job(job, self.signer, self.runner)
        except BaseException:
            if job.cost:
                self.ledger.refund_ticks(job.requester, job.cost)
            raise
        self.bus.publish(
            EventKind.PROOF_GENERATED,
            proof_event_payload(proof),
            sandbox_id=job.sandbox.id,
            owner=job.sandbox.owner,
        )
        self._commit()
        return proof

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background; :meth:`close` waits for it."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ messages

    async def dispatch(self, envelope: Envelope) -> Envelope:
        """Answer one inbound message (seed §5): ACK, a response, or an ERROR reply.

        Never raises: every failure becomes an ERROR reply carrying a ``KingdomError``.
        ``EXEC_START``'s result arrives later in :attr:`mailbox` as ``EXEC_RESULT``.
        """
        return await self._dispatcher.dispatch(envelope)

    async def dispatch_bytes(self, raw: bytes) -> bytes:
        """:meth:`dispatch` for an encoded envelope; returns the encoded reply."""
        return await self._dispatcher.dispatch_bytes(raw)

    # ------------------------------------------------------------------ events

    def _emit(self, kind: AnyEventKind, sandbox: Sandbox, **payload: Any) -> None:
        self.bus.publish(kind, payload, sandbox_id=sandbox.id, owner=sandbox.owner)

    # ------------------------------------------------------------------ durability hooks

    def _log(self, kind: str, **fields: Any) -> None:
        """Record a change for the durable log (a no-op for an engine that is not durable)."""
        if self.journal is not None:
            self.journal.append(kind, fields)

    def _commit(self) -> None:
        """Make the recorded changes durable before acknowledging (no-op when not durable).

        The ledger's accounts are logged whole whenever the ledger was written.
        """
        journal = self.journal
        if journal is None:
            return
        changes = self.ledger.changes
        if changes != self._ledger_changes:
            self._ledger_changes = changes
            journal.append("accounts", accounts_record(self))
        journal.commit()

    def _snapshot_now(self) -> int:
        """Commit, then store a snapshot of everything (between slices only); its log seq."""
        journal = self.journal
        assert journal is not None
        self._commit()
        journal.save_snapshot(take_snapshot(self))
        return journal.last_seq

    async def snapshot(self) -> int:
        """Store a snapshot now (durable engines); returns the last log row it includes."""
        if self.journal is None:
            raise Internal("the engine is not durable: there is nothing to snapshot to")
        self._require_open()
        async with self._exec_lock:
            return self._snapshot_now()

    @property
    def tier(self) -> str:
        """The name of the execution tier (``runner.name``)."""
        return self.runner.name
