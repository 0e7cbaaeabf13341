"""Services and cycles (seed §3.11, §14), composed around the engine's state.

A service is a live persistent sandbox whose endpoints (channels 3..7) answer
calls one at a time; each cycle it is paid for and its tick budget refilled,
or it is suspended.  :class:`Services` holds these operations and
:meth:`~Services.begin_cycle`; it works on the sandboxes through
:class:`~kforge.engine.sandboxes.Sandboxes` and records every change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from kforge.accounting import PERSISTENT_SPARK_PER_CYCLE, InsufficientResources
from kforge.core import (
    AgentId,
    Hash256,
    InvalidRequest,
    InvalidState,
    PermissionDenied,
    ServiceNotFound,
)
from kforge.engine.context import EngineContext
from kforge.engine.models import (
    ExecResult,
    SandboxState,
    Service,
    ServiceCallFailed,
    ServiceInfo,
    ServiceResult,
    ServiceState,
)
from kforge.engine.policy import Action, OverLimit
from kforge.engine.records import (
    AllocationGranted,
    CallAnswered,
    CallQueued,
    CallStarted,
    CycleBegan,
    ExecutionScheduled,
    HostCallDropped,
    ServiceCreated,
    ServiceResumed,
    ServiceSettled,
    ServiceSuspended,
)
from kforge.engine.sandbox import (
    MAX_SERVICE_NAME,
    ServiceCall,
    ServiceRecord,
    delivery_bytes,
    dropped_bytes,
    queued_bytes,
)
from kforge.engine.sandboxes import Sandboxes
from kforge.host import HostError, Status, service_answer_frame
from kforge.isa import GRANTABLE_CHANNELS, Channel
from kforge.machine import Machine, MachineState

__all__ = ["Services"]


class Services:
    """The services and cycles of one engine."""

    def __init__(self, ctx: EngineContext, sandboxes: Sandboxes) -> None:
        self.ctx = ctx
        self.sandboxes = sandboxes
        sandboxes.on_service_stopped = self._stopped

    # ------------------------------------------------------------------ cycles

    @property
    def cycle(self) -> int:
        """The current cycle number (kept by the ledger)."""
        return self.ctx.ledger.cycle

    async def begin_cycle(
        self, allowances: Mapping[AgentId, int] | None = None, requester: AgentId | None = None
    ) -> int:
        """Start the next cycle; returns its number.  Operators only (``requester``
        defaults to the engine itself, for callers in its own process and its timer).

        Sandboxes that are not persistent do not survive a cycle: live ones are
        killed by the engine and stopped ones forgotten.  Each live persistent
        sandbox that is not a service costs its owner 10 Spark (with accounting
        on); one whose owner is short is killed by the engine.  The ticks the
        services used in the ending cycle are spent from their owners'
        allowances; then the ledger starts the cycle (spent ticks back to 0,
        ``allowances`` replacing those given), CYCLE_STARTED is published, and
        every service is funded for the new cycle (its tick budget refilled to
        its allocation) or suspended (see :meth:`fund_service`).
        """
        ctx = self.ctx
        ctx.require_open()
        ctx.policy.authorize(Action.BEGIN_CYCLE, ctx.agent_id if requester is None else requester)
        for service in ctx.state.services.values():
            self._settle(service)
        engine_agent = ctx.agent_id
        for sandbox in list(ctx.state.sandboxes.values()):
            if sandbox.service is not None:
                continue
            live = sandbox.state.is_live and sandbox.machine is not None
            if sandbox.request.persistent:
                if live and ctx.accounting:
                    try:
                        ctx.ledger.charge_spark(
                            sandbox.owner,
                            PERSISTENT_SPARK_PER_CYCLE,
                            f"keeping persistent sandbox {sandbox.id}",
                        )
                    except InsufficientResources:
                        self.sandboxes.finalize(
                            sandbox, SandboxState.KILLED, killed_by=engine_agent
                        )
                continue
            if live:
                self.sandboxes.finalize(sandbox, SandboxState.KILLED, killed_by=engine_agent)
            self.sandboxes.drop(sandbox)
        cycle = ctx.ledger.begin_cycle(allowances)
        ctx.transitions.record(CycleBegan(cycle))
        for service in list(ctx.state.services.values()):
            if service.state is not ServiceState.FAILED:
                self._fund(service, cycle, automatic=True)
        ctx.commit()
        return cycle

    # ------------------------------------------------------------------ services

    async def create_service(self, service: Service, requester: AgentId | None = None) -> Hash256:
        """Turn a live persistent sandbox into a service (seed §3.11); returns the service id.

        Only the sandbox's owner may (``service.owner`` must be it, and the
        ``requester``, which defaults to it for callers in the engine's process).  Each
        endpoint names a distinct channel among 3..7 that the sandbox was
        granted.  The first cycle is paid at once (with accounting on: 10 Spark
        and the allocation reserved from the owner's ticks; ``InsufficientResources``
        otherwise, and nothing is created).  The sandbox's tick budget becomes
        its ticks used plus ``service.tick_budget``; it is started if READY and
        runs under the scheduler with no wall-clock deadline from now on.
        """
        ctx = self.ctx
        ctx.require_open()
        if not isinstance(service, Service):
            raise InvalidRequest("service", f"expected a Service, got {type(service).__name__}")
        service = service.validate()  # a request built in Python: check its fields' types
        _check_service(service, ctx.limits.max_tick_budget)
        policy = ctx.policy
        policy.authorize(
            Action.CREATE_SERVICE,
            service.owner if requester is None else requester,
            owner=service.owner,
            what=f"owned by {service.owner}",
        )
        sandbox = policy.sandbox(Action.CREATE_SERVICE, service.sandbox, service.owner)
        if not sandbox.request.persistent:
            raise InvalidRequest("sandbox", f"sandbox {sandbox.id} is not persistent")
        if sandbox.service is not None:
            raise InvalidState(sandbox.state, "create_service (the sandbox is already a service)")
        machine = sandbox.machine
        if sandbox.state.is_final or machine is None:
            raise InvalidState(sandbox.state, "create_service")
        for index, endpoint in enumerate(service.endpoints):
            if endpoint.channel not in machine.grants:
                raise PermissionDenied(
                    f"endpoint {endpoint.name!r} (endpoints[{index}]) uses channel "
                    f"{endpoint.channel}, which sandbox {sandbox.id} was not granted"
                )
        if service.id is not None and service.id in ctx.state.services:
            raise InvalidRequest("id", f"service id {service.id} is already in use")
        counter = ctx.state.service_counter + 1
        service_id = service.id if service.id is not None else ctx.identities.service_id(counter)
        cycle = ctx.ledger.cycle
        reserved = self._pay_cycle(service.owner, service_id, service.tick_budget, cycle)
        if sandbox.reserved_ticks:  # an execution started before: its ticks so far are spent
            ctx.ledger.settle_ticks(sandbox.owner, sandbox.reserved_ticks, machine.ticks_used)
        ctx.transitions.record(
            ServiceCreated(
                service_id,
                counter,
                sandbox.id,
                service.owner,
                bytes(service.name),
                service.tick_budget,
                service.auto_fund,
                tuple(service.endpoints),
            )
        )
        record = ctx.state.service(service_id)
        self._grant_allocation(record, cycle, reserved)
        self.sandboxes.begin(sandbox, reserve=False)
        ctx.scheduler.forget_deadline(sandbox)
        ctx.transitions.record(ExecutionScheduled(sandbox.id, False))
        if sandbox.state is SandboxState.RUNNING:
            ctx.scheduler.enqueue(sandbox)
        self.pump(record)
        ctx.commit()
        return service_id

    async def service_info(self, service_id: Hash256) -> ServiceInfo:
        """A service's standing (services are public: anyone may ask)."""
        return self.ctx.state.service(service_id).info()

    async def list_services(self, owner: AgentId | None = None) -> list[ServiceInfo]:
        """Every service (of ``owner``, when given), oldest first."""
        return [
            s.info() for s in self.ctx.state.services.values() if owner is None or s.owner == owner
        ]

    async def call_service(
        self, service_id: Hash256, endpoint: bytes, data: bytes, caller: AgentId
    ) -> ServiceResult:
        """Call a service's endpoint and wait for its answer.

        Calls to one service are answered one at a time in the order they were
        made.  Raises ``ServiceNotFound``, ``InvalidRequest`` (no such endpoint,
        data over the message limit), ``InvalidState`` (the service has
        stopped) at once, and ``ServiceCallFailed`` when the service's sandbox
        stops before answering (e.g. ``OUT_OF_TICKS`` inside the call).
        """
        self.ctx.require_open()
        future: asyncio.Future[ServiceResult] = asyncio.get_running_loop().create_future()
        self.queue_call(service_id, endpoint, data, caller, future=future)
        self.ctx.commit()
        return await future

    def queue_call(
        self,
        service_id: Hash256,
        endpoint: bytes,
        data: bytes,
        caller: AgentId,
        *,
        caller_sandbox: Hash256 | None = None,
        notify: tuple[AgentId, Hash256] | None = None,
        future: asyncio.Future[ServiceResult] | None = None,
    ) -> ServiceCall:
        """Queue one call (checked first); its answer goes to ``future``, ``notify`` or
        ``caller_sandbox``."""
        ctx = self.ctx
        service = ctx.policy.service(Action.CALL_SERVICE, service_id, caller)
        if service.state is ServiceState.FAILED:
            raise InvalidState(service.sandbox.state, "call_service (the service has stopped)")
        if not isinstance(endpoint, bytes | bytearray):
            raise InvalidRequest("endpoint", f"expected bytes, got {type(endpoint).__name__}")
        found = service.endpoint(bytes(endpoint))
        if found is None:
            names = ", ".join(repr(e.name) for e in service.endpoints)
            raise InvalidRequest(
                "endpoint",
                f"service {service_id} has no endpoint {bytes(endpoint)!r} (it has {names})",
            )
        data = ctx.limits.check_message(data)
        over = ctx.policy.host_room(service.sandbox, queued_bytes(data))
        if over is not None:
            raise over
        number = ctx.state.call_counter + 1
        ctx.transitions.record(
            CallQueued(
                service.id,
                number,
                found.name,
                data,
                caller,
                caller_sandbox,
                notify[0] if notify is not None else None,
                notify[1] if notify is not None else None,
            )
        )
        call = service.queue[-1]
        call.future = future
        self.pump(service)
        return call

    def call_service_from_sandbox(
        self,
        sender: Hash256,
        sender_owner: AgentId,
        service_id: Hash256,
        endpoint: bytes,
        data: bytes,
    ) -> int:
        """Channel 7 ``CALL``: queue the call; the answer returns to ``sender`` on channel 7."""
        try:
            call = self.queue_call(service_id, endpoint, data, sender_owner, caller_sandbox=sender)
        except ServiceNotFound:
            raise HostError(Status.NOT_FOUND, f"no service {service_id}") from None
        except InvalidState as error:
            raise HostError(Status.UNAVAILABLE, str(error)) from None
        except InvalidRequest as error:
            status = Status.NOT_FOUND if error.field == "endpoint" else Status.TOO_LARGE
            raise HostError(status, error.reason) from None
        except OverLimit as error:
            raise HostError(Status.INSUFFICIENT, str(error)) from None
        return call.number

    def pump(self, service: ServiceRecord) -> None:
        """Deliver the next queued call when the service is funded, idle and started."""
        if (
            service.state is not ServiceState.ACTIVE
            or service.current is not None
            or not service.queue
        ):
            return
        sandbox = service.sandbox
        machine = sandbox.machine
        if machine is None or sandbox.state.is_final:
            return
        if machine.state not in (MachineState.RUNNING, MachineState.BLOCKED):
            return  # READY: its first slice runs the service's start-up before any call
        call = service.queue[0]
        self.ctx.transitions.record(
            CallStarted(
                service.id,
                call.number,
                machine.ticks_used,
                sandbox.id,
                service.owner,
                call.endpoint.name,
                call.caller,
            )
        )
        self.sandboxes.deliver_machine(sandbox, call.endpoint.channel, call.data)

    def service_output(
        self, service: ServiceRecord, channel: int, data: bytes, machine: Machine
    ) -> None:
        """A message the service sent on an endpoint channel: the current call's reply, or dropped."""
        call = service.current
        ticks = machine.ticks_used
        if call is None or call.endpoint.channel != channel:
            if not self.sandboxes.within_budget(service.sandbox, dropped_bytes(data, b"")):
                return
            self.ctx.transitions.record(
                HostCallDropped(service.sandbox.id, ticks, channel, data, b"", int(Status.DENIED))
            )
            return
        result = ServiceResult(service.id, call.endpoint.name, data, ticks - call.ticks_at_delivery)
        self.ctx.transitions.record(
            CallAnswered(
                service.id,
                call.number,
                service.sandbox.id,
                service.owner,
                result.endpoint,
                result.ticks_used,
            )
        )
        self._answer(call, result, None)

    def _answer(
        self, call: ServiceCall, result: ServiceResult | None, error: ServiceCallFailed | None
    ) -> None:
        """Send a call's outcome where it is awaited: the API caller, the mailbox, a sandbox."""
        ctx = self.ctx
        if call.future is not None and not call.future.done():
            if result is not None:
                call.future.set_result(result)
            else:
                assert error is not None
                call.future.set_exception(error)
        if call.notify is not None:
            recipient, reply_to = call.notify
            if result is not None:
                envelope = ctx.replies.service_result(result, reply_to)
            else:
                assert error is not None
                envelope = ctx.replies.error(error, reply_to)
            ctx.mailbox.post(recipient, envelope)
        if call.caller_sandbox is not None:
            self._answer_sandbox(call, result, error)

    def _answer_sandbox(
        self, call: ServiceCall, result: ServiceResult | None, error: ServiceCallFailed | None
    ) -> None:
        assert call.caller_sandbox is not None
        caller = self.ctx.state.find(call.caller_sandbox)
        machine = caller.machine if caller is not None else None
        if caller is None or machine is None or caller.state.is_final:
            return
        if result is not None:
            status, ticks, body = Status.OK, result.ticks_used, result.data
        else:
            assert error is not None
            status, ticks, body = Status.UNAVAILABLE, error.ticks_used, str(error).encode()
        room = machine.message_limit - len(service_answer_frame(call.service_id, 0, status, 0, b""))
        if len(body) > room:
            status, body = Status.TOO_LARGE, b"the service's answer exceeds the message limit"
        frame = service_answer_frame(call.service_id, call.number, status, ticks, body[:room])
        if Channel.INTER_SANDBOX in machine.grants and self.sandboxes.within_budget(
            caller, delivery_bytes(frame)
        ):
            self.sandboxes.deliver_machine(caller, Channel.INTER_SANDBOX, frame)

    def _stopped(
        self,
        service: ServiceRecord,
        result: ExecResult,
        ticks: int,
        current: ServiceCall | None,
        queued: list[ServiceCall],
    ) -> None:
        """The service's sandbox stopped: the service failed, and so did its calls."""
        fault = result.fault.name if result.fault is not None else None
        if fault == "OUT_OF_TICKS":
            reason = (
                f"the service ran out of ticks: its allocation of {service.tick_budget} ticks "
                f"for cycle {service.funded_cycle} is spent (OUT_OF_TICKS); the service has stopped"
            )
        else:
            reason = f"the service's sandbox stopped ({result.state.value}" + (
                f", {fault})" if fault else ")"
            )
        for call in ([current] if current is not None else []) + queued:
            used = ticks - call.ticks_at_delivery if call is current else 0
            error = ServiceCallFailed(
                service.id,
                call.endpoint.name,
                reason,
                state=result.state.value,
                fault=fault,
                ticks_used=max(0, used),
            )
            self._answer(call, None, error)

    async def fund_service(self, service_id: Hash256, requester: AgentId) -> None:
        """Pay the current cycle of a service and resume it if it was suspended.

        The owner only (``PermissionDenied``); a stopped service is
        ``InvalidState``; a short owner ``InsufficientResources``.  A service
        already paid for this cycle is left as it is.
        """
        ctx = self.ctx
        ctx.require_open()
        service = ctx.policy.service(Action.FUND_SERVICE, service_id, requester)
        if service.state is ServiceState.FAILED:
            raise InvalidState(service.sandbox.state, "fund_service (the service has stopped)")
        cycle = ctx.ledger.cycle
        if service.state is ServiceState.ACTIVE and service.funded_cycle == cycle:
            return
        reserved = self._pay_cycle(service.owner, service.id, service.tick_budget, cycle)
        self._grant_allocation(service, cycle, reserved)
        ctx.commit()

    def _fund(self, service: ServiceRecord, cycle: int, *, automatic: bool) -> None:
        """At a cycle start: pay and refill the service, or suspend it."""
        if automatic and self.ctx.accounting and not service.auto_fund:
            self._suspend(
                service, cycle, "not auto-funded: the owner pays each cycle (fund_service)"
            )
            return
        try:
            reserved = self._pay_cycle(service.owner, service.id, service.tick_budget, cycle)
        except InsufficientResources as shortfall:
            self._suspend(service, cycle, str(shortfall))
            return
        self._grant_allocation(service, cycle, reserved)

    def _pay_cycle(self, owner: AgentId, service_id: Hash256, allocation: int, cycle: int) -> int:
        """Charge one cycle (accounting on): 10 Spark, and the allocation reserved from the
        ticks; returns the ticks reserved.  Raises ``InsufficientResources`` with nothing
        charged when the owner is short of either."""
        ctx = self.ctx
        if not ctx.accounting:
            return 0
        account = ctx.ledger.account(owner)
        purpose = f"cycle {cycle} of service {service_id}"
        if account.spark < PERSISTENT_SPARK_PER_CYCLE:
            raise InsufficientResources(
                owner, "Spark", PERSISTENT_SPARK_PER_CYCLE, account.spark, purpose
            )
        if account.ticks_available < allocation:
            raise InsufficientResources(
                owner, "ticks", allocation, account.ticks_available, purpose
            )
        ctx.ledger.charge_spark(owner, PERSISTENT_SPARK_PER_CYCLE, purpose)
        ctx.ledger.reserve_ticks(owner, allocation, purpose)
        return allocation

    def _grant_allocation(self, service: ServiceRecord, cycle: int, reserved: int) -> None:
        """Refill the machine's budget to one allocation and let the service run."""
        ctx = self.ctx
        sandbox = service.sandbox
        machine = sandbox.machine
        assert machine is not None
        ticks = machine.ticks_used
        ctx.transitions.record(
            AllocationGranted(
                service.id, sandbox.id, ticks, ticks + service.tick_budget, cycle, reserved
            )
        )
        if service.state is ServiceState.SUSPENDED:
            ctx.transitions.record(ServiceResumed(service.id, sandbox.id, service.owner, cycle))
            if sandbox.state is SandboxState.RUNNING:
                ctx.scheduler.enqueue(sandbox)
        self.pump(service)

    def _suspend(self, service: ServiceRecord, cycle: int, reason: str) -> None:
        if service.state is not ServiceState.ACTIVE:
            return
        self.ctx.transitions.record(
            ServiceSuspended(service.id, service.sandbox.id, service.owner, cycle, reason)
        )

    def _settle(self, service: ServiceRecord) -> None:
        """At a cycle's end: the ticks the service used are spent, the rest released."""
        if service.reserved_ticks:
            used = max(0, service.sandbox.ticks_used - service.cycle_start_ticks)
            self.ctx.ledger.settle_ticks(service.owner, service.reserved_ticks, used)
            self.ctx.transitions.record(ServiceSettled(service.id))


def _check_service(service: Service, max_tick_budget: int) -> None:
    """Range checks of a ``Service`` request beyond its schema (``InvalidRequest`` naming
    the field)."""
    if not 1 <= len(service.name) <= MAX_SERVICE_NAME:
        raise InvalidRequest("name", f"expected 1..{MAX_SERVICE_NAME} bytes")
    if not 1 <= service.tick_budget <= max_tick_budget:
        raise InvalidRequest(
            "tick_budget", f"expected a per-cycle allocation in 1..{max_tick_budget}"
        )
    if not service.endpoints:
        raise InvalidRequest("endpoints", "a service needs at least one endpoint")
    names: set[bytes] = set()
    channels: set[int] = set()
    for index, endpoint in enumerate(service.endpoints):
        path = f"endpoints[{index}]"
        if not 1 <= len(endpoint.name) <= 255:
            raise InvalidRequest(f"{path}.name", "expected 1..255 bytes")
        if endpoint.name in names:
            raise InvalidRequest(f"{path}.name", f"endpoint {endpoint.name!r} is named twice")
        if endpoint.channel not in GRANTABLE_CHANNELS:
            raise InvalidRequest(
                f"{path}.channel", f"expected one of channels 3..7, got {endpoint.channel!r}"
            )
        if endpoint.channel in channels:
            raise InvalidRequest(
                f"{path}.channel", f"channel {endpoint.channel} serves two endpoints"
            )
        names.add(endpoint.name)
        channels.add(endpoint.channel)
