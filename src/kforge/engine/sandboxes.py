"""Sandbox operations: create, start, deliver, kill, forget, grant, and reading their state.

Each operation checks (the request, the caller's access, the limits), charges
the owner when accounting is on, then records what changed through the
engine's transitions (:mod:`kforge.engine.transitions`): nothing here writes
the state itself.  Lifecycle of a sandbox: ``CREATED → READY → RUNNING ↔
BLOCKED → HALTED | FAULTED | KILLED | DEADLINE_EXCEEDED``; an operation that
does not fit the state raises ``InvalidState``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from kforge.core import (
    AgentId,
    ForgeError,
    Hash256,
    InvalidProgram,
    InvalidRequest,
    InvalidState,
    PermissionDenied,
)
from kforge.engine.context import EngineContext
from kforge.engine.jobs import link_programs
from kforge.engine.models import (
    CreateSandbox,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
)
from kforge.engine.policy import Action
from kforge.engine.presets import resolve_request
from kforge.engine.records import (
    AccessGranted,
    AccessRevoked,
    ExecutionBegan,
    ExecutionScheduled,
    InputDelivered,
    ProgramLinked,
    SandboxCreated,
    SandboxForgotten,
    SandboxStopped,
)
from kforge.engine.sandbox import (
    Sandbox,
    ServiceCall,
    ServiceRecord,
    delivery_bytes,
    request_bytes,
)
from kforge.isa import DEFAULT_GRANTS, Channel
from kforge.limits import MAX_LINK_IMPORTS, check_size
from kforge.link import Import, link_cost
from kforge.machine import MachineState, granted_channels, plan_memory
from kforge.program import ForgeProgram, decode_program
from kforge.storage import decoded_size

__all__ = ["ProgramGate", "Sandboxes"]


class ProgramGate(Protocol):
    """Decides whether a program may run; e.g. ``kforge.registry.TrustPolicy``.

    ``check_runnable`` returns when the program may run and raises a
    ``ForgeError`` naming why not (not trusted, revoked) otherwise.
    """

    def check_runnable(self, program_id: Hash256) -> None: ...


#: Told when a service's sandbox stopped: the service, its result, the ticks at the
#: stop, and the calls it had not answered: the one under way, and those queued.
ServiceStopped = Callable[
    [ServiceRecord, ExecResult, int, ServiceCall | None, list[ServiceCall]], None
]


async def link_off_loop(
    ctx: EngineContext, program_id: Hash256, imports: Sequence[Import], requester: AgentId
) -> ForgeProgram:
    """``program_id`` linked with ``imports``, the work done away from the event loop (in a
    worker process for anything but small programs: :mod:`kforge.engine.offload`).

    The import list is checked against its limit first; the program and each
    dependency are fetched from the vault (each hash-checked) and handed over as
    bytes.  Raises what :func:`kforge.link.link` raises, and ``VaultFetchFailed``.
    """
    check_size("link import list (entries)", len(imports), MAX_LINK_IMPORTS)
    vault = ctx.vault
    main = vault.get(program_id)
    dependencies = {entry.from_.raw: vault.get(entry.from_) for entry in imports}
    size = len(main) + sum(len(blob) for blob in dependencies.values())
    encoded = await ctx.offload.run(
        requester,
        f"linking {program_id}",
        size,
        link_programs,
        main,
        dependencies,
        tuple(imports),
    )
    if size > ctx.offload.limits.inline_bytes:  # decoding a large program is work too
        program = await asyncio.to_thread(decode_program, encoded)
    else:
        program = decode_program(encoded)
    ctx.programs.keep(program)
    return program


class Sandboxes:
    """The sandbox operations of one engine."""

    def __init__(self, ctx: EngineContext, trust: ProgramGate | None = None) -> None:
        self.ctx = ctx
        self.trust = trust
        self.on_service_stopped: ServiceStopped | None = None
        # The live engine's alone (not state): who waits for a sandbox's result, and
        # the EXEC_START messages to answer with it; kept only while someone waits.
        self._waiters: dict[Hash256, list[asyncio.Future[ExecResult]]] = {}
        self._notify: dict[Hash256, list[tuple[AgentId, Hash256]]] = {}

    # ------------------------------------------------------------------ access

    def authorized(self, sandbox_id: Hash256, requester: AgentId, action: Action) -> Sandbox:
        """The sandbox, when ``requester`` may take ``action`` on it (the engine's policy)."""
        return self.ctx.policy.sandbox(action, sandbox_id, requester)

    async def grant(
        self,
        sandbox_id: Hash256,
        requester: AgentId,
        agent: AgentId,
        operations: Iterable[Operation],
    ) -> None:
        """Let ``agent`` do ``operations`` on the sandbox; only its owner may grant."""
        sandbox = self.authorized(sandbox_id, requester, Action.GRANT)
        held = (sandbox.access or {}).get(agent, frozenset())
        given = held | frozenset(operations)
        ordered = tuple(sorted(given, key=lambda operation: operation.value))
        self.ctx.transitions.record(AccessGranted(sandbox.id, agent, ordered))
        self.ctx.commit()

    async def revoke(self, sandbox_id: Hash256, requester: AgentId, agent: AgentId) -> None:
        """Take back every grant ``agent`` holds on the sandbox; only its owner may."""
        sandbox = self.authorized(sandbox_id, requester, Action.GRANT)
        self.ctx.transitions.record(AccessRevoked(sandbox.id, agent))
        self.ctx.commit()

    # ------------------------------------------------------------------ creating

    async def create(self, request: CreateSandbox, requester: AgentId | None = None) -> Hash256:
        """Create a READY sandbox running the program stored under ``request.code``.

        ``requester`` (default: the request's owner, for callers in the
        engine's own process) must be the owner the request names.  Checked in
        this order, before any memory is allocated or anything charged: the
        request's fields and preset (``InvalidRequest``), the requester
        (``PermissionDenied``), the engine's and the owner's sandbox limits
        (``TooManySandboxes``), the memory limits and the owner's share
        (``MemoryQuotaExceeded``, ``OverLimit``), the deadline, the program's
        layout, the grants (``PermissionDenied``), the program and its imports
        (``VaultFetchFailed``, ``InvalidProgram``, ``UnresolvedSymbol``); then
        the owner is charged (``InsufficientResources``): creation, and 2 ticks
        per import when the program is linked from the vault (seed §4.1).
        """
        ctx = self.ctx
        ctx.require_open()
        if not isinstance(request, CreateSandbox):
            raise InvalidRequest(
                "request", f"expected a CreateSandbox, got {type(request).__name__}"
            )
        request.validate()  # the checked copy is dropped: the request itself is kept (small)
        request = resolve_request(request)
        ctx.policy.authorize(
            Action.CREATE_SANDBOX,
            request.owner if requester is None else requester,
            owner=request.owner,
            what=f"owned by {request.owner}",
        )
        self._check_limits(request)
        quota = request.memory_quota or 0
        granted_channels(request.grants - DEFAULT_GRANTS)
        if self.trust is not None:
            self.trust.check_runnable(request.code)  # re-checked at every creation
        program = ctx.programs.load(request.code)
        program_id = request.code
        if request.imports:
            program = await link_off_loop(ctx, request.code, request.imports, request.owner)
            ctx.require_open()
            self._check_limits(request)  # checked again: others may have been created meanwhile
        elif program.imports:
            names = ", ".join(name.decode("utf-8", "replace") for name in program.imports)
            raise InvalidProgram(
                f"unresolved imports ({names}): name their programs in the request's imports"
            )
        plan_memory(program, quota, request.environment or {})
        ctx.policy.admit_program(request.owner, program.program_id, decoded_size(program))
        link_ticks = link_cost(request.imports)
        charge = ctx.ledger.charge_creation(request.owner, quota) if ctx.accounting else None
        try:
            if charge is not None and link_ticks:
                ctx.ledger.charge_ticks(
                    request.owner, link_ticks, f"linking {len(request.imports)} imports"
                )
            if request.imports:
                program_id = ctx.vault.put_program(program)
            counter = ctx.state.sandbox_counter + 1
            sandbox_id = ctx.identities.sandbox_id(counter)
            ctx.transitions.record(SandboxCreated(sandbox_id, counter, request, program_id))
        except ForgeError:
            if charge is not None:
                ctx.ledger.refund_creation(charge)
            raise
        if request.imports:
            ctx.transitions.record(
                ProgramLinked(request.code, program_id, len(request.imports), request.owner)
            )
        self.watch_idle(ctx.state.sandbox(sandbox_id))
        ctx.commit()
        return sandbox_id

    def _check_limits(self, request: CreateSandbox) -> None:
        limits = self.ctx.limits
        budget = request.tick_budget or 0
        if budget > limits.max_tick_budget:
            raise InvalidRequest(
                "tick_budget", f"{budget} is over the engine's limit of {limits.max_tick_budget}"
            )
        deadline = request.deadline
        if deadline is not None and deadline > limits.max_deadline:
            raise InvalidRequest(
                "deadline_ms",
                f"{request.deadline_ms} ms is over the engine's limit of "
                f"{round(limits.max_deadline * 1000)} ms",
            )
        if len(request.input) > limits.message_limit:
            raise InvalidRequest(
                "input",
                f"{len(request.input)} bytes is over the message limit of {limits.message_limit}",
            )
        self.ctx.policy.admit_sandbox(
            request.owner, request.memory_quota or 0, request_bytes(request)
        )

    # ------------------------------------------------------------------ reading

    async def status(self, sandbox_id: Hash256, requester: AgentId) -> SandboxInfo:
        """The sandbox's :class:`SandboxInfo`; the owner or a ``status`` grant only."""
        return self.authorized(sandbox_id, requester, Action.READ_SANDBOX).info()

    async def visible(self, requester: AgentId, *, every: bool = False) -> list[SandboxInfo]:
        """The sandboxes ``requester`` may list, oldest first: its own and those it holds a
        ``status`` grant on; with ``every``, all of them (operators only)."""
        policy = self.ctx.policy
        sandboxes = self.ctx.state.sandboxes.values()
        if every:
            policy.authorize(Action.LIST_ALL_SANDBOXES, requester)
            return [sandbox.info() for sandbox in sandboxes]
        return [sandbox.info() for sandbox in sandboxes if policy.lists(requester, sandbox)]

    async def list(self, owner: AgentId | None = None) -> list[SandboxInfo]:
        """Every sandbox the engine keeps (of ``owner``, when given), oldest first."""
        return [
            sandbox.info()
            for sandbox in self.ctx.state.sandboxes.values()
            if owner is None or sandbox.owner == owner
        ]

    async def io_log(self, sandbox_id: Hash256, requester: AgentId) -> tuple[HostCall, ...]:
        """Every host call the sandbox made, in order, with its tick count (a service's:
        those of the call under way)."""
        sandbox = self.authorized(sandbox_id, requester, Action.READ_SANDBOX)
        return self.ctx.state.run_logs(sandbox).io_log

    async def output(
        self,
        sandbox_id: Hash256,
        requester: AgentId,
        *,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[bytes, int]:
        """The sandbox's stdout (channel 0) from byte ``offset`` on, at most ``limit`` bytes
        (``None``: all), and the output's length: so far, or all once stopped.

        Works in every state: a live sandbox's output as written up to now
        (between slices), a stopped one's ``ExecResult.output`` (read from the
        engine's archive when it went there: a slice, never the whole).  Output
        only grows, so a reader follows it by passing the number of bytes it
        already has as ``offset``; ``offset`` equal to the length gives ``b""``.
        The owner, a ``status`` grant or the operator (``PermissionDenied``);
        ``SandboxNotFound`` for an unknown id; ``InvalidRequest`` (field
        ``offset`` or ``limit``) for one that is not an integer in range.
        """
        sandbox = self.authorized(sandbox_id, requester, Action.READ_SANDBOX)
        state = self.ctx.state
        machine = sandbox.machine
        length = len(machine.stdout) if machine is not None else state.output_length(sandbox)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidRequest("offset", f"expected an integer, got {type(offset).__name__}")
        if not 0 <= offset <= length:
            raise InvalidRequest(
                "offset", f"{offset} is outside 0..{length} (the output's length so far)"
            )
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidRequest("limit", f"expected an integer, got {type(limit).__name__}")
        if limit is not None and limit < 0:
            raise InvalidRequest("limit", f"{limit} is negative")
        end = length if limit is None else min(length, offset + limit)
        if machine is not None:
            return bytes(machine.stdout[offset:end]), length
        return state.run_output(sandbox, offset, end - offset), length

    async def wait(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None = None,
        *,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """The result once the sandbox has stopped (``asyncio.TimeoutError`` after ``timeout``),
        with its whole output, or its first ``output_limit`` bytes."""
        sandbox = (
            self.ctx.state.sandbox(sandbox_id)
            if requester is None
            else self.authorized(sandbox_id, requester, Action.READ_SANDBOX)
        )
        if sandbox.result is None:
            future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(sandbox.id, []).append(future)
            await asyncio.wait_for(future, timeout)
        result = self.ctx.state.result_with_output(sandbox, output_limit)
        assert result is not None
        return result

    # ------------------------------------------------------------------ executing

    async def exec_start(
        self, sandbox_id: Hash256, requester: AgentId, notify: tuple[AgentId, Hash256] | None = None
    ) -> None:
        """Hand the sandbox to the scheduler; its result comes by :meth:`wait` and events.

        Allowed from READY, or after ``step`` (RUNNING or BLOCKED) while no
        scheduler execution is under way.  Reserves the tick budget when
        accounting is on and starts the wall-clock deadline.  ``notify`` is the
        (recipient, request id) of an ``EXEC_START`` message, answered with
        ``EXEC_RESULT`` in the mailbox when the sandbox stops.
        """
        ctx = self.ctx
        ctx.require_open()
        sandbox = self.authorized(sandbox_id, requester, Action.EXECUTE)
        if sandbox.service is not None:
            raise InvalidState(sandbox.state, "exec_start (the sandbox runs a service)")
        runnable = (SandboxState.READY, SandboxState.RUNNING, SandboxState.BLOCKED)
        if sandbox.scheduled or sandbox.state not in runnable:
            operation = "exec_start (already executing)" if sandbox.scheduled else "exec_start"
            raise InvalidState(sandbox.state, operation)
        self.begin(sandbox)
        if notify is not None:
            self._notify.setdefault(sandbox.id, []).append(notify)
        ctx.transitions.record(ExecutionScheduled(sandbox.id, True))
        self.watch_deadline(sandbox)
        if sandbox.state is SandboxState.RUNNING:
            ctx.scheduler.enqueue(sandbox)
        ctx.commit()

    def watch_deadline(self, sandbox: Sandbox) -> None:
        """Start the wall-clock deadline of the sandbox's execution (its request's, or the
        engine's default)."""
        ctx = self.ctx
        limit = sandbox.request.deadline
        deadline = ctx.clock.monotonic() + (limit if limit is not None else ctx.limits.deadline)
        ctx.scheduler.watch_deadline(sandbox, deadline)

    def watch_idle(self, sandbox: Sandbox) -> None:
        """Start (again) the time a live sandbox the scheduler does not run may wait for its
        next start or step (``EngineLimits.idle_timeout``)."""
        ctx = self.ctx
        deadline = ctx.clock.monotonic() + ctx.limits.idle_timeout
        ctx.scheduler.watch_deadline(sandbox, deadline, coarse=True)

    def watch_retention(self, sandbox: Sandbox) -> None:
        """Start the time a stopped sandbox is kept (``EngineLimits.stopped_retention``)."""
        ctx = self.ctx
        retention = ctx.limits.stopped_retention
        ctx.scheduler.watch_deadline(sandbox, ctx.clock.monotonic() + retention, coarse=True)

    def begin(self, sandbox: Sandbox, *, reserve: bool = True) -> None:
        """The first start of execution: reserve the tick budget, announce the start."""
        if sandbox.started:
            return
        ctx = self.ctx
        reserved = 0
        if ctx.accounting and reserve:
            reserved = sandbox.request.tick_budget or 0
            ctx.ledger.reserve_ticks(
                sandbox.owner, reserved, f"the tick budget of sandbox {sandbox.id}"
            )
        ctx.transitions.record(ExecutionBegan(sandbox.id, sandbox.owner, reserved))

    # ------------------------------------------------------------------ input

    async def deliver(
        self, sandbox_id: Hash256, channel: int, data: bytes, requester: AgentId
    ) -> None:
        """Give a sandbox input on stdin (channel 2), waking it if it waits there.

        Channels 3..7 carry host replies and peer messages only, so agents may
        not deliver on them (``PermissionDenied``).  A stopped sandbox takes
        nothing (``InvalidState``).
        """
        ctx = self.ctx
        ctx.require_open()
        sandbox = self.authorized(sandbox_id, requester, Action.DELIVER)
        if channel != Channel.STDIN:
            raise PermissionDenied(
                f"channel {channel} is not open to agents: input goes on stdin (channel 2)"
            )
        data = ctx.limits.check_message(data)
        if sandbox.state.is_final or sandbox.machine is None:
            raise InvalidState(sandbox.state, "deliver")
        over = ctx.policy.host_room(sandbox, delivery_bytes(data))
        if over is not None:
            raise over
        self.deliver_machine(sandbox, channel, data)
        ctx.commit()

    def within_budget(self, sandbox: Sandbox, size: int) -> bool:
        """Whether the host may hold ``size`` more bytes for the sandbox, for something the
        sandbox itself caused (a reply to its own host call, an answer to its own
        service call, a message it sent where nobody listens).  When it may not, the
        sandbox is stopped: ``HOST_MEMORY_EXCEEDED``."""
        if self.ctx.policy.host_room(sandbox, size) is None:
            return True
        self.finalize(sandbox, SandboxState.HOST_MEMORY_EXCEEDED)
        return False

    def deliver_machine(
        self, sandbox: Sandbox, channel: int, data: bytes, call: tuple[bytes, int] | None = None
    ) -> None:
        """Deliver to the sandbox's machine (recorded) and wake it.

        ``call`` is the (request, status) of a host call whose reply this is.  The
        caller has made sure the host may hold it (:meth:`within_budget`,
        ``policy.host_room``).
        """
        machine = sandbox.machine
        assert machine is not None
        request, status = call if call is not None else (None, None)
        self.ctx.transitions.record(
            InputDelivered(sandbox.id, machine.ticks_used, channel, data, request, status)
        )
        if sandbox.scheduled and sandbox.state is SandboxState.RUNNING:
            self.ctx.scheduler.enqueue(sandbox)

    # ------------------------------------------------------------------ stopping

    async def kill(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Stop a READY, RUNNING or BLOCKED sandbox at once; the owner or a ``kill`` grant only."""
        self.ctx.require_open()
        sandbox = self.authorized(sandbox_id, requester, Action.KILL)
        if sandbox.state.is_final or sandbox.machine is None:
            raise InvalidState(sandbox.state, "kill")
        self.finalize(sandbox, SandboxState.KILLED, killed_by=requester)
        self.ctx.commit()

    async def forget(self, sandbox_id: Hash256, requester: AgentId) -> None:
        """Drop the record of a stopped sandbox (its id becomes unknown); the owner only."""
        sandbox = self.authorized(sandbox_id, requester, Action.FORGET)
        if sandbox.state.is_live:
            raise InvalidState(sandbox.state, "forget")
        self.drop(sandbox)
        self.ctx.commit()

    def drop(self, sandbox: Sandbox) -> None:
        """Forget a stopped sandbox (recorded), and its timer."""
        if self.ctx.state.find(sandbox.id) is not sandbox:
            return  # forgotten already
        self.ctx.scheduler.forget_deadline(sandbox)
        self.ctx.transitions.record(SandboxForgotten(sandbox.id))

    def _keep_stopped_within_limit(self, owner: AgentId) -> None:
        """Forget the owner's oldest stopped sandboxes beyond ``max_stopped_per_owner``."""
        state, limit = self.ctx.state, self.ctx.limits.max_stopped_per_owner
        while state.stopped_count(owner) > limit:
            oldest = state.oldest_stopped(owner)
            assert oldest is not None
            self.drop(oldest)

    def finalize(
        self, sandbox: Sandbox, state: SandboxState, *, killed_by: AgentId | None = None
    ) -> None:
        """Stop the sandbox for good: accounting, the record, waiters, replies."""
        ctx = self.ctx
        machine = sandbox.machine
        assert machine is not None and state.is_final
        ticks = machine.ticks_used
        service = sandbox.service
        current = service.current if service is not None else None
        queued = list(service.queue) if service is not None else []
        if service is not None and service.reserved_ticks:
            used = max(0, ticks - service.cycle_start_ticks)
            ctx.ledger.settle_ticks(service.owner, service.reserved_ticks, used)
        if sandbox.reserved_ticks:
            ctx.ledger.settle_ticks(sandbox.owner, sandbox.reserved_ticks, ticks)
        faulted = state is SandboxState.FAULTED and machine.fault is not None
        ctx.transitions.record(
            SandboxStopped(
                sandbox.id,
                sandbox.owner,
                state,
                ticks,
                machine.pc,
                Hash256.of(bytes(machine.stdout)),
                int(machine.fault) if faulted and machine.fault is not None else None,
                machine.fault_detail if faulted else None,
                killed_by,
            )
        )
        self.watch_retention(sandbox)
        waiters = self._waiters.pop(sandbox.id, ())
        notify = self._notify.pop(sandbox.id, ())
        summary = sandbox.result  # without its output when that went to the archive
        assert summary is not None
        if service is not None and self.on_service_stopped is not None:
            self.on_service_stopped(service, summary, ticks, current, queued)
        for waiter in waiters:  # each reads as much of the output as it wants
            if not waiter.done():
                waiter.set_result(summary)
        if notify:
            self._post_results(sandbox, notify)
        self._keep_stopped_within_limit(sandbox.owner)

    def _post_results(self, sandbox: Sandbox, notify: Iterable[tuple[AgentId, Hash256]]) -> None:
        """EXEC_RESULT, with the whole output, to whoever started the sandbox by message.  An
        output larger than a mailbox holds is not read from the archive: the envelope would
        be dropped, and is counted so (the output is read with ``output`` instead)."""
        ctx = self.ctx
        mailbox = ctx.mailbox
        if ctx.state.output_length(sandbox) > mailbox.max_bytes:
            for recipient, _ in notify:
                mailbox.count_dropped(recipient)
            return
        result = ctx.state.result_with_output(sandbox)
        assert result is not None
        for recipient, reply_to in notify:
            mailbox.post(recipient, ctx.replies.exec_result(result, reply_to))

    def cancel_waiting(self) -> None:
        """Cancel every wait for a result (the engine stops, its sandboxes are left running)."""
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.cancel()
        self._waiters.clear()

    def kill_all(self, killed_by: AgentId) -> None:
        """Kill every live sandbox (closing an engine that is not durable)."""
        for sandbox in list(self.ctx.state.live_sandboxes()):
            self.finalize(sandbox, SandboxState.KILLED, killed_by=killed_by)

    def runnable(self, sandbox: Sandbox) -> bool:
        """Whether its machine can run on (not waiting, not stopped)."""
        machine = sandbox.machine
        return machine is not None and machine.state in (MachineState.READY, MachineState.RUNNING)
