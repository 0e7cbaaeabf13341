"""The Forge engine: its parts put together, its lifecycle, and its public methods.

Use it as an async context manager::

    async with Engine(Vault(":memory:")) as engine:
        code = engine.vault.put_program(program)
        sandbox = await engine.create_sandbox(CreateSandbox(owner, code, 65536, 100_000))
        await engine.exec_start(sandbox, owner)
        result = await engine.wait(sandbox)

The engine is a small facade.  Its state is an :class:`~kforge.engine.state.EngineState`
changed only by records (:mod:`kforge.engine.records`, :mod:`kforge.engine.apply`)
going through :class:`~kforge.engine.transitions.Transitions`; its operations
live in :class:`~kforge.engine.sandboxes.Sandboxes`,
:class:`~kforge.engine.service_ops.Services`, :class:`~kforge.engine.artifacts.Artifacts`
and :class:`~kforge.engine.execution.Executor`, composed around one
:class:`~kforge.engine.context.EngineContext`; messages enter through
:class:`~kforge.engine.dispatch.Dispatcher`.  The clock and the random source
are injected; with a seeded source and a manual clock, the same requests in
the same order give the same ids, events and results.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Final

from kforge.accounting import OPEN_ACCOUNTS, Ledger
from kforge.core import (
    AgentId,
    ForgeError,
    Hash256,
    Internal,
    InvalidState,
    SandboxSetAside,
)
from kforge.engine.archive import RUNS_DB, RunArchive, SqliteArchive
from kforge.engine.artifacts import Artifacts, derived_signer
from kforge.engine.context import EngineContext, Identities, Replies
from kforge.engine.dispatch import Dispatcher
from kforge.engine.execution import LONE_SLICE_SECONDS, Executor, SliceObserver
from kforge.engine.jobs import BuiltProgram, ProgramText, compile_module
from kforge.engine.journal import Journal, JournalStore, SqliteJournalStore, chain_key
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
    Service,
    ServiceInfo,
    ServiceResult,
    SystemClock,
    system_random,
)
from kforge.engine.offload import Offload, WorkLimits
from kforge.engine.policy import Action, Policy
from kforge.engine.rebuild import rebuild
from kforge.engine.sandbox import delivery_bytes
from kforge.engine.sandboxes import ProgramGate, Sandboxes
from kforge.engine.scheduler import Scheduler
from kforge.engine.service_ops import Services
from kforge.engine.state import EngineState
from kforge.engine.transitions import Transitions
from kforge.events import EventBus
from kforge.host import (
    AgoraAdapter,
    AgoraBoard,
    HostError,
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
from kforge.isa import Channel
from kforge.link import Import
from kforge.messages import Envelope, Mailbox
from kforge.program import ForgeProgram
from kforge.proofs import ExecutionProof, Signer
from kforge.proofs.replay import RunRecord
from kforge.sources import DEFAULT_STARLARK_MEMORY
from kforge.storage import ProgramCache, Vault, default_data_dir
from kforge.tiers import TIERS, TierRunner

__all__ = ["TIERS", "Engine", "EngineStatus", "ProgramGate", "SliceObserver", "compiling_in"]

log = logging.getLogger("kforge.engine")

_ENGINE_DOMAIN: Final = b"kforge/engine/v1\0"


class EngineStatus(Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class Engine:
    """The Forge engine (seed §4 ``ForgeEngine``) for one process.

    ``vault`` holds programs and channel-3 objects (default: the SQLite vault
    under the data directory).  Accounting is on by default (seed §11):
    creation and execution are charged to the owner, from ``ledger`` (default:
    an in-memory ledger that opens every new agent an account with
    :data:`~kforge.accounting.OPEN_ACCOUNTS`); ``standalone=True`` turns it
    off (nothing is charged; the ledger then serves only the mint channel).
    ``oracle`` is a handler or a fixed table for channel 4.  ``tier`` is the
    execution tier: a :class:`~kforge.tiers.TierRunner` (shared, not closed by
    the engine) or a tier's name (the engine makes and closes its own runner).
    ``clock`` and ``random_source`` are injected; ``mailbox`` is where envelopes sent
    later go (default: an in-process :class:`~kforge.messages.Mailbox` of
    ``mailbox_size`` per recipient).  ``operators`` are the agents
    that may take the operator's actions (begin cycles, read every sandbox; the
    engine's own agent always may): :attr:`policy` decides who may do what for
    every caller.  ``on_slice`` observes every scheduler slice (metrics, tracing,
    tests).  ``lone_slice_seconds`` is the wall time a slice of a sandbox running
    alone aims at (engines sharing one event loop divide it between them, so that
    the loop still turns every few milliseconds).  ``signer`` signs execution
    proofs (default: a key derived from the secret; pass the node's key,
    ``kforge.proofs.keys.load_or_create_key()``, in production).

    Durability: ``durable=True`` keeps a journal in ``engine.sqlite3`` under
    ``data_dir`` (and stopped sandboxes' runs in ``runs.sqlite3`` beside it);
    ``journal_store`` keeps it in the given store instead (e.g. a
    :class:`~kforge.engine.journal.MemoryJournalStore`).  ``archive`` is where
    stopped sandboxes' runs go (:mod:`kforge.engine.archive`; default: beside a
    durable journal, else a temporary file): a journal kept elsewhere than the
    data directory needs an archive that lasts as long as it does.  ``work`` bounds
    the CPU-heavy work (linking, proofs, building uploads) done away from the
    event loop (:mod:`kforge.engine.offload`).  A journaled engine
    rebuilds its state from the journal when it opens, snapshots it every
    ``snapshot_every`` rows and on close, and leaves its sandboxes to the next
    start instead of killing them.  A live sandbox whose program the vault no
    longer gives back (missing or damaged) does not stop that: it is set aside
    (:attr:`set_aside`, logged as a warning) and every operation on it is refused
    with ``SandboxSetAside``, until the program is put again and the engine reopens.
    """

    def __init__(
        self,
        vault: Vault | None = None,
        *,
        ledger: Ledger | None = None,
        standalone: bool = False,
        limits: EngineLimits | None = None,
        clock: Clock | None = None,
        random_source: RandomSource | None = None,
        tier: str | TierRunner = "auto",
        oracle: OracleHandler | Mapping[bytes, bytes] | None = None,
        agora: AgoraBoard | None = None,
        agent_id: AgentId | None = None,
        event_queue_size: int = 4096,
        mailbox_size: int = 1024,
        mailbox: Mailbox | None = None,
        program_cache_size: int = 256,
        on_slice: SliceObserver | None = None,
        lone_slice_seconds: float = LONE_SLICE_SECONDS,
        signer: Signer | None = None,
        cycle_interval: float | None = None,
        operators: Collection[AgentId] = (),
        data_dir: str | Path | None = None,
        durable: bool = False,
        journal_store: JournalStore | None = None,
        snapshot_every: int = 1000,
        trust: ProgramGate | None = None,
        archive: RunArchive | None = None,
        work: WorkLimits | None = None,
    ) -> None:
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        if cycle_interval is not None and not cycle_interval > 0:
            raise ValueError("cycle_interval must be a positive number of seconds")
        if standalone and ledger is not None:
            raise ValueError("a standalone engine charges nothing: give it no ledger")
        self._owned: list[Any] = []
        folder = Path(data_dir) if data_dir is not None else default_data_dir()
        clock = clock or SystemClock()
        secret = (random_source or system_random)(32)
        epoch = 0
        if journal_store is None and durable:
            journal_store = SqliteJournalStore(folder)
        self.journal: Journal | None = None
        if journal_store is not None:
            self._owned.append(journal_store)
            # a journaled engine keeps its secret (ids, signer, chain key) across starts
            stored = journal_store.meta("secret")
            if stored is None:
                journal_store.set_meta("secret", secret)
            else:
                secret = stored
            epoch = int.from_bytes(journal_store.meta("epoch") or b"", "big") + 1
            journal_store.set_meta("epoch", epoch.to_bytes(8, "big"))
            self.journal = Journal(journal_store, chain_key(secret))
        self.snapshot_every = snapshot_every
        if vault is None:
            vault = Vault.open_default(folder)
            self._owned.append(vault)
        self.accounting = not standalone
        if ledger is None:
            ledger = Ledger(opening=OPEN_ACCOUNTS if self.accounting else None)
            self._owned.append(ledger)
        offload = Offload(work)
        if isinstance(tier, TierRunner):
            self.runner = tier
        else:  # the engine's own: its fast tier compiles in a worker, like every heavy job
            self.runner = TierRunner(tier, builder=compiling_in(offload))
            self._owned.append(self.runner)
        limits = limits or EngineLimits()
        agent = agent_id or AgentId(Hash256.of(_ENGINE_DOMAIN + secret).raw)
        self.signer: Signer = signer or derived_signer(secret)
        bus = EventBus(clock.time_ms, event_queue_size)
        programs = ProgramCache(vault, program_cache_size)
        if oracle is None or isinstance(oracle, Mapping):
            oracle = TableOracle(oracle)
        self.agora = agora or AgoraBoard()
        host = HostRouter(
            [
                VaultAdapter(vault),
                OracleAdapter(oracle),
                AgoraAdapter(self.agora),
                MintAdapter(ledger),
                PeerAdapter(self),
            ]
        )
        if archive is None:
            archive = SqliteArchive(folder / RUNS_DB, durable=True) if durable else SqliteArchive()
            self._owned.append(archive)
        self.archive = archive
        self.state = EngineState(programs, self.runner, ledger, limits.message_limit, archive)
        self.policy = Policy(self.state, limits, agent, operators)
        identities = Identities(secret, epoch)
        self.ctx = EngineContext(
            state=self.state,
            transitions=Transitions(self.state, bus, self.journal, clock.time_ms),
            ledger=ledger,
            accounting=self.accounting,
            limits=limits,
            clock=clock,
            bus=bus,
            mailbox=mailbox if mailbox is not None else Mailbox(mailbox_size),
            vault=vault,
            programs=programs,
            host=host,
            identities=identities,
            replies=Replies(agent, identities, clock),
            agent_id=agent,
            policy=self.policy,
            offload=offload,
        )
        self.sandboxes = Sandboxes(self.ctx, trust)
        self.services = Services(self.ctx, self.sandboxes)
        self.artifacts = Artifacts(self.ctx, self.sandboxes, self.runner, self.signer)
        self.executor = Executor(
            self.ctx,
            self.sandboxes,
            self.services,
            self.runner,
            on_slice=on_slice,
            after_slice=self._snapshot_if_due,
            lone_slice_seconds=lone_slice_seconds,
        )
        self.ctx.scheduler = Scheduler(self.executor, clock)
        self.dispatcher = Dispatcher(
            self.ctx,
            self.sandboxes,
            self.services,
            self.artifacts,
            self._spawn,
        )
        self.cycle_interval = cycle_interval
        self.status = EngineStatus.UNOPENED
        self.rebuilt_records = 0
        self._task: asyncio.Task[None] | None = None
        self._cycle_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ the parts, by name

    @property
    def vault(self) -> Vault:
        return self.ctx.vault

    @property
    def ledger(self) -> Ledger:
        return self.ctx.ledger

    @property
    def limits(self) -> EngineLimits:
        return self.ctx.limits

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    @property
    def bus(self) -> EventBus:
        return self.ctx.bus

    @property
    def mailbox(self) -> Mailbox:
        return self.ctx.mailbox

    @property
    def programs(self) -> ProgramCache:
        return self.ctx.programs

    @property
    def host(self) -> HostRouter:
        return self.ctx.host

    @property
    def scheduler(self) -> Scheduler:
        return self.ctx.scheduler

    @property
    def agent_id(self) -> AgentId:
        return self.ctx.agent_id

    @property
    def tier(self) -> str:
        """The name of the execution tier (``runner.name``)."""
        return self.runner.name

    @property
    def trust(self) -> ProgramGate | None:
        return self.sandboxes.trust

    @property
    def set_aside(self) -> Mapping[Hash256, ForgeError]:
        """The sandboxes set aside when the engine reopened, each with why (see the class)."""
        return MappingProxyType(self.state.set_aside)

    @property
    def operators(self) -> frozenset[AgentId]:
        """The agents that may take the operator's actions (see :mod:`kforge.engine.policy`)."""
        return self.policy.operators

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> Engine:
        """Start the scheduler (after rebuilding a journaled engine).  Called by ``async with``;
        opening twice is harmless.  A journal that does not check out is ``StateCorrupted``."""
        if self.status is EngineStatus.CLOSED:
            raise Internal("the engine is closed and cannot be reopened")
        if self.status is EngineStatus.UNOPENED:
            if self.journal is not None:
                self.rebuilt_records = rebuild(self.state, self.journal)
                for sandbox_id, problem in self.state.set_aside.items():
                    log.warning("%s", SandboxSetAside(sandbox_id, problem))
                self._collect_runs()
                self.ctx.transitions.resume()
                self.bus.resume_at(self.state.events)
                self._resume_scheduling()
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self.scheduler.run())
            self.status = EngineStatus.OPEN
            self.ctx.status = self.status.value
            if self.cycle_interval is not None:
                self._cycle_task = loop.create_task(self._cycle_timer())
        return self

    def _resume_scheduling(self) -> None:
        """Queue what runs again after a rebuild; every timer starts afresh (executions'
        deadlines, idle sandboxes' expiry, stopped sandboxes' retention)."""
        scheduler = self.scheduler
        for sandbox in list(self.state.sandboxes.values()):
            if sandbox.state.is_final:
                self.sandboxes.watch_retention(sandbox)
            elif sandbox.machine is None:
                continue
            elif sandbox.service is not None:
                if sandbox.scheduled and sandbox.state is SandboxState.RUNNING:
                    scheduler.enqueue(sandbox)
            elif not sandbox.scheduled:
                self.sandboxes.watch_idle(sandbox)
            else:
                if sandbox.state is SandboxState.RUNNING:
                    scheduler.enqueue(sandbox)
                self.sandboxes.watch_deadline(sandbox)

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
        """Stop, release storage.  Idempotent.

        A journaled engine snapshots its state and leaves its sandboxes to the
        next start; any other kills every live sandbox (``killed_by`` the engine).
        """
        if self.status is EngineStatus.CLOSED:
            return
        if self.journal is not None and self.status is EngineStatus.OPEN:
            async with self.executor.lock:
                self._snapshot_now()
            self._cancel_waiting()
        elif self.journal is None:
            self.sandboxes.kill_all(self.agent_id)
        self.status = EngineStatus.CLOSED
        self.ctx.status = self.status.value
        if self._cycle_task is not None:
            self._cycle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cycle_task
            self._cycle_task = None
        self.scheduler.stop()
        if self._task is not None:
            await self._task
            self._task = None
        self.ctx.offload.close()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for resource in self._owned:
            resource.close()

    def _cancel_waiting(self) -> None:
        self.sandboxes.cancel_waiting()
        for service in self.state.services.values():
            for call in [service.current, *service.queue]:
                if call is not None and call.future is not None:
                    call.future.cancel()

    async def __aenter__(self) -> Engine:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background; :meth:`close` waits for it."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ snapshots

    def _snapshot_now(self) -> int:
        """Write everything recorded, then a snapshot of the state (between slices); its row.

        While a sandbox is set aside there is no new snapshot: the one before and the
        records after it are what brings that sandbox back once its program is put again.
        """
        journal = self.journal
        assert journal is not None
        self.ctx.transitions.commit()
        if self.state.set_aside:
            return journal.last_seq
        journal.save_snapshot(self.state.snapshot())
        self._collect_runs()
        return journal.last_seq

    def _collect_runs(self) -> None:
        """Drop the archived runs of sandboxes the state no longer holds."""
        self.archive.collect(
            [s.id for s in self.state.sandboxes.values() if s.run_digest is not None]
        )

    def _snapshot_if_due(self) -> None:
        journal = self.journal
        if journal is not None and journal.since_snapshot >= self.snapshot_every:
            self._snapshot_now()

    async def snapshot(self) -> int:
        """Store a snapshot now (journaled engines); returns the last journal row it includes."""
        if self.journal is None:
            raise Internal("the engine is not durable: there is nothing to snapshot to")
        self.ctx.require_open()
        if self.state.set_aside:
            raise InvalidState(f"{len(self.state.set_aside)} sandbox(es) set aside", "a snapshot")
        async with self.executor.lock:
            return self._snapshot_now()

    # ------------------------------------------------------------------ programs

    async def program_bytes(self, program_id: Hash256) -> bytes:
        """The FRGP bytes stored under ``program_id`` (``VaultFetchFailed``)."""
        return self.vault.get(program_id)

    @property
    def offload(self) -> Offload:
        """Where the engine's CPU-heavy work runs (:mod:`kforge.engine.offload`)."""
        return self.ctx.offload

    # ------------------------------------------------------------------ sandboxes

    async def create_sandbox(
        self, request: CreateSandbox, requester: AgentId | None = None
    ) -> Hash256:
        """Create a READY sandbox (see :meth:`Sandboxes.create`); ``requester``, when given,
        must be the owner the request names."""
        return await self.sandboxes.create(request, requester)

    async def sandbox_status(self, sandbox_id: Hash256, requester: AgentId) -> SandboxInfo:
        """The sandbox's :class:`SandboxInfo`; the owner or a ``status`` grant only."""
        return await self.sandboxes.status(sandbox_id, requester)

    async def list_sandboxes(self, owner: AgentId | None = None) -> list[SandboxInfo]:
        """Every sandbox the engine keeps (of ``owner``, when given), oldest first."""
        return await self.sandboxes.list(owner)

    async def authorize_sandbox(
        self, action: Action, sandbox_id: Hash256, requester: AgentId
    ) -> None:
        """Return when ``requester`` may take ``action`` on the sandbox (``SandboxNotFound``,
        ``PermissionDenied``): what a way in that holds no sandbox itself (the event
        socket) asks before it serves one."""
        self.policy.sandbox(action, sandbox_id, requester)

    async def visible_sandboxes(
        self, requester: AgentId, *, every: bool = False
    ) -> list[SandboxInfo]:
        """The sandboxes ``requester`` may list: its own and those it holds a ``status``
        grant on; with ``every``, all of them (operators only)."""
        return await self.sandboxes.visible(requester, every=every)

    async def io_log(self, sandbox_id: Hash256, requester: AgentId) -> tuple[HostCall, ...]:
        """Every host call the sandbox made, in order, with its tick count."""
        return await self.sandboxes.io_log(sandbox_id, requester)

    async def output(
        self, sandbox_id: Hash256, requester: AgentId, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """The sandbox's stdout from ``offset`` on, at most ``limit`` bytes (see
        :meth:`Sandboxes.output`)."""
        chunk, _ = await self.sandboxes.output(sandbox_id, requester, offset=offset, limit=limit)
        return chunk

    async def output_chunk(
        self, sandbox_id: Hash256, requester: AgentId, *, offset: int, limit: int
    ) -> tuple[bytes, int]:
        """At most ``limit`` bytes of the sandbox's stdout from ``offset`` on, and the output's
        length so far: how a reader follows a large output without copying it whole."""
        return await self.sandboxes.output(sandbox_id, requester, offset=offset, limit=limit)

    async def wait(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None = None,
        *,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """The result once the sandbox has stopped (``asyncio.TimeoutError`` after ``timeout``),
        with its whole output or its first ``output_limit`` bytes."""
        return await self.sandboxes.wait(
            sandbox_id, requester, timeout=timeout, output_limit=output_limit
        )

    async def exec_start(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Hand the sandbox to the scheduler (see :meth:`Sandboxes.exec_start`)."""
        await self.sandboxes.exec_start(sandbox_id, requester)

    async def step(self, sandbox_id: Hash256, requester: AgentId) -> SandboxState:
        """Execute one instruction of a sandbox not under the scheduler (for debugging)."""
        return await self.executor.step(sandbox_id, requester)

    async def deliver(
        self, sandbox_id: Hash256, channel: int, data: bytes, requester: AgentId
    ) -> None:
        """Give a sandbox input on stdin (channel 2), waking it if it waits there."""
        await self.sandboxes.deliver(sandbox_id, channel, data, requester)

    async def kill_sandbox(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Stop a live sandbox at once; the owner or a ``kill`` grant only."""
        await self.sandboxes.kill(sandbox_id, requester)

    async def forget(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Drop the record of a stopped sandbox; the owner only."""
        await self.sandboxes.forget(sandbox_id, requester)

    async def grant(
        self,
        sandbox_id: Hash256,
        requester: AgentId,
        agent: AgentId,
        operations: Iterable[Operation],
    ) -> None:
        """Let ``agent`` do ``operations`` on the sandbox; only its owner may grant."""
        await self.sandboxes.grant(sandbox_id, requester, agent, operations)

    async def revoke(self, sandbox_id: Hash256, requester: AgentId, agent: AgentId) -> None:
        """Take back every grant ``agent`` holds on the sandbox; only its owner may."""
        await self.sandboxes.revoke(sandbox_id, requester, agent)

    def expire_deadlines(self) -> list[Hash256]:
        """End every execution whose deadline has passed now; returns their ids.

        The scheduler does this on its own; call it after moving a manual clock.
        """
        return [sandbox.id for sandbox in self.scheduler.expire_deadlines()]

    # ------------------------------------------------------------------ peers (channel 7)

    def send_to_peer(
        self, sender: Hash256, sender_owner: AgentId, target: Hash256, data: bytes
    ) -> None:
        """Channel 7: queue ``data`` for ``target`` if it is live, listens on 7 and accepts the sender."""
        sandbox = self.state.find(target)
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
        frame = incoming_frame(sender, sender_owner, data)
        over = self.policy.host_room(sandbox, delivery_bytes(frame))
        if over is not None:  # the target is not stopped for what another sandbox sends
            raise HostError(Status.INSUFFICIENT, str(over))
        self.sandboxes.deliver_machine(sandbox, Channel.INTER_SANDBOX, frame)

    def call_service_from_sandbox(
        self,
        sender: Hash256,
        sender_owner: AgentId,
        service_id: Hash256,
        endpoint: bytes,
        data: bytes,
    ) -> int:
        """Channel 7 ``CALL``: queue the call; the answer returns to ``sender`` on channel 7."""
        return self.services.call_service_from_sandbox(
            sender, sender_owner, service_id, endpoint, data
        )

    # ------------------------------------------------------------------ services and cycles

    @property
    def cycle(self) -> int:
        """The current cycle number (kept by the ledger)."""
        return self.services.cycle

    async def begin_cycle(
        self, allowances: Mapping[AgentId, int] | None = None, requester: AgentId | None = None
    ) -> int:
        """Start the next cycle; returns its number (see :meth:`Services.begin_cycle`).
        Operators only: ``requester`` defaults to the engine itself."""
        return await self.services.begin_cycle(allowances, requester)

    async def create_service(self, service: Service, requester: AgentId | None = None) -> Hash256:
        """Turn a live persistent sandbox into a service (see :meth:`Services.create_service`)."""
        return await self.services.create_service(service, requester)

    async def service_info(self, service_id: Hash256) -> ServiceInfo:
        """A service's standing (services are public: anyone may ask)."""
        return await self.services.service_info(service_id)

    async def list_services(self, owner: AgentId | None = None) -> list[ServiceInfo]:
        """Every service (of ``owner``, when given), oldest first."""
        return await self.services.list_services(owner)

    async def call_service(
        self, service_id: Hash256, endpoint: bytes, data: bytes, caller: AgentId
    ) -> ServiceResult:
        """Call a service's endpoint and wait for its answer (see :meth:`Services.call_service`)."""
        return await self.services.call_service(service_id, endpoint, data, caller)

    async def fund_service(self, service_id: Hash256, requester: AgentId) -> None:
        """Pay the current cycle of a service and resume it if it was suspended."""
        await self.services.fund_service(service_id, requester)

    # ------------------------------------------------------------------ linking and proofs

    async def link_resolve(
        self, program_id: Hash256, imports: Sequence[Import], requester: AgentId
    ) -> Hash256:
        """Link the program with ``imports``; returns the new id (see :meth:`Artifacts.link_resolve`)."""
        return await self.artifacts.link_resolve(program_id, imports, requester)

    async def build_program(
        self,
        kind: str,
        source: bytes | str,
        filename: str,
        requester: AgentId,
        memory_quota: int = DEFAULT_STARLARK_MEMORY,
    ) -> tuple[Hash256, BuiltProgram]:
        """Build a program from an upload and store it (see :meth:`Artifacts.build_program`)."""
        return await self.artifacts.build_program(kind, source, filename, requester, memory_quota)

    async def starlark_libraries(self, source: str) -> dict[bytes, bytes | None]:
        """The vault's libraries Starlark ``source`` may load by content id (see
        :meth:`Artifacts.starlark_libraries`)."""
        return self.artifacts.starlark_libraries(source)

    async def program_text(self, program_id: Hash256, requester: AgentId) -> ProgramText:
        """A stored program's disassembly (see :meth:`Artifacts.program_text`)."""
        return await self.artifacts.program_text(program_id, requester)

    async def run_record(self, sandbox_id: Hash256, requester: AgentId) -> RunRecord:
        """What determines the sandbox's run (for replay and for verifying its proof)."""
        return await self.artifacts.run_record(sandbox_id, requester)

    async def request_proof(self, sandbox_id: Hash256, requester: AgentId) -> ExecutionProof:
        """An execution proof of a HALTED or FAULTED sandbox (see :mod:`kforge.proofs`).

        The run is replayed from its record in a worker thread and signed with
        :attr:`signer`; with accounting on the requester pays 2 ticks per tick
        of the run.  Publishes PROOF_GENERATED.  The owner or a ``status`` grant only.
        """
        return await self.artifacts.prove(self.artifacts.prepare_proof(sandbox_id, requester))

    # ------------------------------------------------------------------ messages

    async def dispatch(self, envelope: Envelope) -> Envelope:
        """Answer one inbound message (seed §5): ACK, a response, or an ERROR reply.

        Never raises: every failure becomes an ERROR reply carrying a ``KingdomError``.
        ``EXEC_START``'s result arrives later in :attr:`mailbox` as ``EXEC_RESULT``.
        """
        return await self.dispatcher.dispatch(envelope)

    async def dispatch_bytes(self, raw: bytes) -> bytes:
        """:meth:`dispatch` for an encoded envelope; returns the encoded reply."""
        return await self.dispatcher.dispatch_bytes(raw)


def compiling_in(offload: Offload) -> Callable[[ForgeProgram, int], bytes]:
    """The fast tier's compiles, run as jobs of ``offload`` (a worker process under the time
    limit), waited for on the compile thread."""

    def build(program: ForgeProgram, max_region_blocks: int) -> bytes:
        return offload.run_blocking(
            f"compiling {program.program_id} for the fast tier",
            compile_module,
            program.encoded,
            max_region_blocks,
        )

    return build
