"""The engine's services and cycles (seed §3.11, §14): a mixin of :class:`Engine`.

A service is a live persistent sandbox whose endpoints (channels 3..7) answer
calls one at a time; each cycle it is paid for and its tick budget refilled,
or it is suspended.  :class:`ServiceOperations` holds these operations and
:meth:`~ServiceOperations.begin_cycle`; :class:`kforge.engine.Engine` inherits
them and provides the state and the sandbox operations declared below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from kforge.accounting import PERSISTENT_SPARK_PER_CYCLE, InsufficientResources, Ledger
from kforge.core import AgentId, EventKind, Hash256, InvalidState, PermissionDenied, ServiceNotFound
from kforge.engine.models import (
    Endpoint,
    EngineLimits,
    ExecResult,
    HostCall,
    SandboxState,
    Service,
    ServiceCallFailed,
    ServiceInfo,
    ServiceResult,
    ServiceState,
)
from kforge.engine.sandbox import Sandbox
from kforge.engine.scheduler import Scheduler
from kforge.engine.services import MAX_SERVICE_NAME, ServiceCall, ServiceRecord
from kforge.events import EventBus, ExtensionEventKind
from kforge.host import HostError, Status, service_answer_frame
from kforge.isa import GRANTABLE_CHANNELS, Channel
from kforge.machine import Machine, MachineState
from kforge.messages import InvalidRequest, Mailbox

if TYPE_CHECKING:
    from kforge.engine.dispatch import Dispatcher

__all__ = ["ServiceOperations"]

_SERVICE_DOMAIN: Final = b"kforge/service/v1\0"


class ServiceOperations:
    """Services and cycles of :class:`kforge.engine.Engine` (a mixin; not usable alone).

    The annotations below are what the mixin relies on; ``Engine`` sets them
    in ``__init__`` and defines the methods declared under ``TYPE_CHECKING``.
    """

    agent_id: AgentId
    accounting: bool
    ledger: Ledger
    limits: EngineLimits
    bus: EventBus
    mailbox: Mailbox
    scheduler: Scheduler
    _dispatcher: Dispatcher
    _secret: bytes
    _sandboxes: dict[Hash256, Sandbox]
    _services: dict[Hash256, ServiceRecord]
    _service_counter: int
    _call_counter: int

    if TYPE_CHECKING:

        def _require_open(self) -> None: ...

        def _get(self, sandbox_id: Hash256) -> Sandbox: ...

        def _begin(self, sandbox: Sandbox, *, reserve: bool = True) -> None: ...

        def _deliver_machine(
            self,
            sandbox: Sandbox,
            channel: int,
            data: bytes,
            call: tuple[bytes, int] | None = None,
        ) -> None: ...

        def _finalize(
            self, sandbox: Sandbox, state: SandboxState, *, killed_by: AgentId | None = None
        ) -> None: ...

        def _drop(self, sandbox: Sandbox) -> None: ...

        def _log(self, kind: str, **fields: Any) -> None: ...

        def _commit(self) -> None: ...

    # ------------------------------------------------------------------ cycles

    @property
    def cycle(self) -> int:
        """The current cycle number (kept by the ledger)."""
        return self.ledger.cycle

    async def begin_cycle(self, allowances: Mapping[AgentId, int] | None = None) -> int:
        """Start the next cycle; returns its number.

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
        self._require_open()
        for service in self._services.values():
            self._settle_service(service)
        for sandbox in list(self._sandboxes.values()):
            if sandbox.service is not None:
                continue
            if sandbox.request.persistent:
                if sandbox.state.is_live and sandbox.machine is not None and self.accounting:
                    try:
                        self.ledger.charge_spark(
                            sandbox.owner,
                            PERSISTENT_SPARK_PER_CYCLE,
                            f"keeping persistent sandbox {sandbox.id}",
                        )
                    except InsufficientResources:
                        self._finalize(sandbox, SandboxState.KILLED, killed_by=self.agent_id)
                continue
            if sandbox.state.is_live and sandbox.machine is not None:
                self._finalize(sandbox, SandboxState.KILLED, killed_by=self.agent_id)
            self._drop(sandbox)
        cycle = self.ledger.begin_cycle(allowances)
        self.bus.publish(ExtensionEventKind.CYCLE_STARTED, {"cycle": cycle})
        for service in list(self._services.values()):
            if service.state is not ServiceState.FAILED:
                self._fund(service, cycle, automatic=True)
        self._commit()
        return cycle

    # ------------------------------------------------------------------ services

    def _new_service_id(self) -> Hash256:
        self._service_counter += 1
        return Hash256.of(_SERVICE_DOMAIN + self._secret + self._service_counter.to_bytes(8, "big"))

    def _get_service(self, service_id: Hash256) -> ServiceRecord:
        service = self._services.get(service_id) if isinstance(service_id, Hash256) else None
        if service is None:
            raise ServiceNotFound(service_id)
        return service

    async def create_service(self, service: Service) -> Hash256:
        """Turn a live persistent sandbox into a service (seed §3.11); returns the service id.

        Only the sandbox's owner may (``service.owner`` must be it).  Each
        endpoint names a distinct channel among 3..7 that the sandbox was
        granted.  The first cycle is paid at once (with accounting on: 10 Spark
        and the allocation reserved from the owner's ticks; ``InsufficientResources``
        otherwise, and nothing is created).  The sandbox's tick budget becomes
        its ticks used plus ``service.tick_budget``; it is started if READY and
        runs under the scheduler with no wall-clock deadline from now on.
        """
        self._require_open()
        if not isinstance(service, Service):
            raise InvalidRequest("service", f"expected a Service, got {type(service).__name__}")
        _check_service(service, self.limits.max_tick_budget)
        sandbox = self._get(service.sandbox)
        if service.owner != sandbox.owner:
            raise PermissionDenied(
                f"agent {service.owner} is not the owner of sandbox {sandbox.id}: "
                "only the owner may make it a service"
            )
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
        if service.id is not None and service.id in self._services:
            raise InvalidRequest("id", f"service id {service.id} is already in use")
        service_id = service.id if service.id is not None else self._new_service_id()
        record = ServiceRecord(
            service_id,
            service.owner,
            sandbox,
            bytes(service.name),
            service.tick_budget,
            service.auto_fund,
            tuple(service.endpoints),
        )
        cycle = self.ledger.cycle
        shortfall = self._pay_cycle(record, cycle)
        if shortfall is not None:
            raise shortfall
        if sandbox.reserved_ticks:  # an execution started before: its ticks so far are spent
            self.ledger.settle_ticks(sandbox.owner, sandbox.reserved_ticks, machine.ticks_used)
            sandbox.reserved_ticks = 0
        self._services[service_id] = record
        sandbox.service = record
        self._log(
            "service",
            id=service_id.raw,
            counter=self._service_counter,
            sandbox=sandbox.id.raw,
            name=record.name,
            tick_budget=record.tick_budget,
            auto_fund=record.auto_fund,
            endpoints=[[e.name, e.channel, e.schema] for e in record.endpoints],
        )
        self._grant_allocation(record, cycle)
        self._begin(sandbox, reserve=False)
        sandbox.scheduled = True
        sandbox.deadline_at = None
        self._log("start", id=sandbox.id.raw, deadline=False)
        if sandbox.state in (SandboxState.READY, SandboxState.RUNNING):
            sandbox.state = SandboxState.RUNNING
            self.scheduler.enqueue(sandbox)
        self.bus.publish(
            EventKind.SERVICE_CREATED,
            {
                "service_id": service_id,
                "owner": record.owner,
                "name": record.name,
                "endpoints": [
                    {"name": e.name, "channel": e.channel, "schema": e.schema}
                    for e in record.endpoints
                ],
            },
            sandbox_id=sandbox.id,
            owner=record.owner,
        )
        self._pump(record)
        self._commit()
        return service_id

    async def service_info(self, service_id: Hash256) -> ServiceInfo:
        """A service's standing (services are public: anyone may ask)."""
        return self._get_service(service_id).info()

    async def list_services(self, owner: AgentId | None = None) -> list[ServiceInfo]:
        """Every service (of ``owner``, when given), oldest first."""
        return [s.info() for s in self._services.values() if owner is None or s.owner == owner]

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
        self._require_open()
        future: asyncio.Future[ServiceResult] = asyncio.get_running_loop().create_future()
        self._queue_call(service_id, endpoint, data, caller, future=future)
        self._commit()
        return await future

    def _queue_call(
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
        service = self._get_service(service_id)
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
        if not isinstance(data, bytes | bytearray):
            raise InvalidRequest("data", f"expected bytes, got {type(data).__name__}")
        if len(data) > self.limits.message_limit:
            raise InvalidRequest(
                "data",
                f"{len(data)} bytes is over the message limit of {self.limits.message_limit}",
            )
        self._call_counter += 1
        call = ServiceCall(
            self._call_counter,
            service.id,
            found,
            bytes(data),
            caller,
            caller_sandbox,
            notify,
            future,
        )
        service.queue.append(call)
        self._log(
            "call",
            service=service.id.raw,
            number=call.number,
            endpoint=found.name,
            data=call.data,
            caller=caller.raw,
            caller_sandbox=caller_sandbox.raw if caller_sandbox is not None else None,
            notify=[notify[0].raw, notify[1].raw] if notify is not None else None,
        )
        self._pump(service)
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
            call = self._queue_call(service_id, endpoint, data, sender_owner, caller_sandbox=sender)
        except ServiceNotFound:
            raise HostError(Status.NOT_FOUND, f"no service {service_id}") from None
        except InvalidState as error:
            raise HostError(Status.UNAVAILABLE, str(error)) from None
        except InvalidRequest as error:
            status = Status.NOT_FOUND if error.field == "endpoint" else Status.TOO_LARGE
            raise HostError(status, error.reason) from None
        return call.number

    def _pump(self, service: ServiceRecord) -> None:
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
        call = service.queue.popleft()
        service.current = call
        call.ticks_at_delivery = machine.ticks_used
        self._log(
            "call_started", service=service.id.raw, number=call.number, ticks=machine.ticks_used
        )
        self.bus.publish(
            EventKind.SERVICE_CALLED,
            {"service_id": service.id, "endpoint": call.endpoint.name, "caller": call.caller},
            sandbox_id=sandbox.id,
            owner=service.owner,
        )
        self._deliver_machine(sandbox, call.endpoint.channel, call.data)

    def _service_output(
        self, service: ServiceRecord, channel: int, data: bytes, machine: Machine
    ) -> None:
        """A message the service sent on an endpoint channel: the current call's reply, or dropped."""
        call = service.current
        if call is None or call.endpoint.channel != channel:
            service.sandbox.io_log.append(
                HostCall(machine.ticks_used, channel, data, b"", Status.DENIED, False)
            )
            return
        service.current = None
        service.calls_completed += 1
        result = ServiceResult(
            service.id, call.endpoint.name, data, machine.ticks_used - call.ticks_at_delivery
        )
        self._log("call_done", service=service.id.raw, number=call.number)
        self.bus.publish(
            EventKind.SERVICE_COMPLETED,
            {
                "service_id": service.id,
                "endpoint": result.endpoint,
                "ticks_used": result.ticks_used,
            },
            sandbox_id=service.sandbox.id,
            owner=service.owner,
        )
        self._answer(call, result, None)

    def _answer(
        self, call: ServiceCall, result: ServiceResult | None, error: ServiceCallFailed | None
    ) -> None:
        """Send a call's outcome where it is awaited: the API caller, the mailbox, a sandbox."""
        if call.future is not None and not call.future.done():
            if result is not None:
                call.future.set_result(result)
            else:
                assert error is not None
                call.future.set_exception(error)
        if call.notify is not None:
            recipient, reply_to = call.notify
            if result is not None:
                envelope = self._dispatcher.service_result_envelope(result, reply_to)
            else:
                assert error is not None
                envelope = self._dispatcher.error_reply(error, reply_to)
            self.mailbox.post(recipient, envelope)
        if call.caller_sandbox is not None:
            caller = self._sandboxes.get(call.caller_sandbox)
            machine = caller.machine if caller is not None else None
            if caller is None or machine is None or caller.state.is_final:
                return
            if result is not None:
                status, ticks, body = Status.OK, result.ticks_used, result.data
            else:
                assert error is not None
                status, ticks, body = Status.UNAVAILABLE, error.ticks_used, str(error).encode()
            room = machine.message_limit - len(
                service_answer_frame(call.service_id, 0, status, 0, b"")
            )
            if len(body) > room:
                status, body = Status.TOO_LARGE, b"the service's answer exceeds the message limit"
            frame = service_answer_frame(call.service_id, call.number, status, ticks, body[:room])
            if Channel.INTER_SANDBOX in machine.grants:
                self._deliver_machine(caller, Channel.INTER_SANDBOX, frame)

    def _service_stopped(self, service: ServiceRecord, result: ExecResult, ticks: int) -> None:
        """The service's sandbox stopped: the service fails, and so do its calls."""
        if service.reserved_ticks:
            used = max(0, ticks - service.cycle_start_ticks)
            self.ledger.settle_ticks(service.owner, service.reserved_ticks, used)
            service.reserved_ticks = 0
        service.state = ServiceState.FAILED
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
        current = service.current
        calls = ([current] if current is not None else []) + list(service.queue)
        service.current = None
        service.queue.clear()
        for call in calls:
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
        self._require_open()
        service = self._get_service(service_id)
        if requester != service.owner:
            raise PermissionDenied(f"only the owner of service {service_id} may fund it")
        if service.state is ServiceState.FAILED:
            raise InvalidState(service.sandbox.state, "fund_service (the service has stopped)")
        cycle = self.ledger.cycle
        if service.state is ServiceState.ACTIVE and service.funded_cycle == cycle:
            return
        shortfall = self._pay_cycle(service, cycle)
        if shortfall is not None:
            raise shortfall
        self._grant_allocation(service, cycle)
        self._commit()

    def _fund(self, service: ServiceRecord, cycle: int, *, automatic: bool) -> None:
        """At a cycle start: pay and refill the service, or suspend it."""
        if automatic and self.accounting and not service.auto_fund:
            self._suspend(
                service, cycle, "not auto-funded: the owner pays each cycle (fund_service)"
            )
            return
        shortfall = self._pay_cycle(service, cycle)
        if shortfall is not None:
            self._suspend(service, cycle, str(shortfall))
            return
        self._grant_allocation(service, cycle)

    def _pay_cycle(self, service: ServiceRecord, cycle: int) -> InsufficientResources | None:
        """Charge one cycle (accounting on): 10 Spark, and the allocation reserved from the ticks."""
        if not self.accounting:
            return None
        account = self.ledger.account(service.owner)
        purpose = f"cycle {cycle} of service {service.id}"
        if account.spark < PERSISTENT_SPARK_PER_CYCLE:
            return InsufficientResources(
                service.owner, "Spark", PERSISTENT_SPARK_PER_CYCLE, account.spark, purpose
            )
        if account.ticks_available < service.tick_budget:
            return InsufficientResources(
                service.owner, "ticks", service.tick_budget, account.ticks_available, purpose
            )
        self.ledger.charge_spark(service.owner, PERSISTENT_SPARK_PER_CYCLE, purpose)
        self.ledger.reserve_ticks(service.owner, service.tick_budget, purpose)
        service.reserved_ticks = service.tick_budget
        return None

    def _grant_allocation(self, service: ServiceRecord, cycle: int) -> None:
        """Refill the machine's budget to one allocation and let the service run."""
        sandbox = service.sandbox
        machine = sandbox.machine
        assert machine is not None
        service.funded_cycle = cycle
        service.cycle_start_ticks = machine.ticks_used
        machine.tick_budget = machine.ticks_used + service.tick_budget
        self._log(
            "budget",
            id=sandbox.id.raw,
            ticks=machine.ticks_used,
            budget=machine.tick_budget,
            cycle=cycle,
            reserved=service.reserved_ticks,
        )
        if service.state is ServiceState.SUSPENDED:
            service.state = ServiceState.ACTIVE
            sandbox.scheduled = True
            self._log("resume", service=service.id.raw)
            self.bus.publish(
                ExtensionEventKind.SERVICE_RESUMED,
                {"service_id": service.id, "cycle": cycle},
                sandbox_id=sandbox.id,
                owner=service.owner,
            )
            if sandbox.state is SandboxState.RUNNING:
                self.scheduler.enqueue(sandbox)
        self._pump(service)

    def _suspend(self, service: ServiceRecord, cycle: int, reason: str) -> None:
        if service.state is not ServiceState.ACTIVE:
            return
        service.state = ServiceState.SUSPENDED
        service.sandbox.scheduled = False
        self._log("suspend", service=service.id.raw)
        self.bus.publish(
            ExtensionEventKind.SERVICE_SUSPENDED,
            {"service_id": service.id, "cycle": cycle, "reason": reason},
            sandbox_id=service.sandbox.id,
            owner=service.owner,
        )

    def _settle_service(self, service: ServiceRecord) -> None:
        """At a cycle's end: the ticks the service used are spent, the rest released."""
        if service.reserved_ticks:
            used = max(0, service.sandbox.ticks_used - service.cycle_start_ticks)
            self.ledger.settle_ticks(service.owner, service.reserved_ticks, used)
            service.reserved_ticks = 0
            self._log("settle", service=service.id.raw)


def _check_service(service: Service, max_tick_budget: int) -> None:
    """Type and range checks of a ``Service`` request (``InvalidRequest`` naming the field)."""
    if not isinstance(service.owner, AgentId):
        raise InvalidRequest("owner", "expected an AgentId")
    if not isinstance(service.sandbox, Hash256):
        raise InvalidRequest("sandbox", "expected a Hash256")
    if service.id is not None and not isinstance(service.id, Hash256):
        raise InvalidRequest("id", "expected a Hash256 or None")
    if (
        not isinstance(service.name, bytes | bytearray)
        or not 1 <= len(service.name) <= MAX_SERVICE_NAME
    ):
        raise InvalidRequest("name", f"expected 1..{MAX_SERVICE_NAME} bytes")
    budget = service.tick_budget
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int)
        or not 1 <= budget <= max_tick_budget
    ):
        raise InvalidRequest(
            "tick_budget", f"expected a per-cycle allocation in 1..{max_tick_budget}"
        )
    if not isinstance(service.auto_fund, bool):
        raise InvalidRequest("auto_fund", "expected a boolean")
    endpoints = tuple(service.endpoints)
    if not endpoints:
        raise InvalidRequest("endpoints", "a service needs at least one endpoint")
    names: set[bytes] = set()
    channels: set[int] = set()
    for index, endpoint in enumerate(endpoints):
        path = f"endpoints[{index}]"
        if not isinstance(endpoint, Endpoint):
            raise InvalidRequest(path, "expected an Endpoint")
        if not isinstance(endpoint.name, bytes | bytearray) or not 1 <= len(endpoint.name) <= 255:
            raise InvalidRequest(f"{path}.name", "expected 1..255 bytes")
        if endpoint.name in names:
            raise InvalidRequest(f"{path}.name", f"endpoint {endpoint.name!r} is named twice")
        if not isinstance(endpoint.schema, bytes | bytearray):
            raise InvalidRequest(f"{path}.schema", "expected bytes")
        channel = endpoint.channel
        if (
            isinstance(channel, bool)
            or not isinstance(channel, int)
            or channel not in GRANTABLE_CHANNELS
        ):
            raise InvalidRequest(
                f"{path}.channel", f"expected one of channels 3..7, got {channel!r}"
            )
        if channel in channels:
            raise InvalidRequest(f"{path}.channel", f"channel {channel} serves two endpoints")
        names.add(bytes(endpoint.name))
        channels.add(channel)
