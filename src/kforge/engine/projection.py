"""Events: the public projection of the engine's records, derived in this one place.

:func:`events_of` says which events (seed §6.2 and the extensions, each with
the payload :data:`kforge.events.EVENT_FIELDS` lists) a record announces.  The
live engine publishes them as it applies the record; a rebuild counts them;
:meth:`kforge.engine.journal.Journal.events` derives the stored history from
the stored records.  A record holds all its events need, so no state is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kforge.core import AgentId, EventKind, Hash256
from kforge.engine.models import SandboxState
from kforge.engine.records import (
    CallAnswered,
    CallStarted,
    CycleBegan,
    ExecutionBegan,
    ProgramLinked,
    ProofGenerated,
    Record,
    SandboxBlocked,
    SandboxCreated,
    SandboxStopped,
    ServiceCreated,
    ServiceResumed,
    ServiceSuspended,
)
from kforge.events import EVENT_FIELDS, AnyEventKind, ExtensionEventKind
from kforge.isa import FaultCode

__all__ = ["EventSpec", "events_of"]


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One event to publish: its kind, payload, and whom it concerns."""

    kind: AnyEventKind
    payload: dict[str, Any]
    sandbox_id: Hash256 | None = None
    owner: AgentId | None = None


_NONE: Final[tuple[EventSpec, ...]] = ()


def events_of(record: Record) -> tuple[EventSpec, ...]:
    """The events ``record`` announces, in order (most records announce none)."""
    project = _PROJECT.get(type(record))
    return project(record) if project is not None else _NONE


def _created(record: SandboxCreated) -> tuple[EventSpec, ...]:
    request = record.request
    payload = {
        "sandbox_id": record.sandbox,
        "owner": request.owner,
        "code": request.code,
        "memory_quota": request.memory_quota,
        "tick_budget": request.tick_budget,
        "persistent": request.persistent,
    }
    return (EventSpec(EventKind.SANDBOX_CREATED, payload, record.sandbox, request.owner),)


def _began(record: ExecutionBegan) -> tuple[EventSpec, ...]:
    payload = {"sandbox_id": record.sandbox, "owner": record.owner}
    return (EventSpec(EventKind.SANDBOX_STARTED, payload, record.sandbox, record.owner),)


def _blocked(record: SandboxBlocked) -> tuple[EventSpec, ...]:
    payload = {"sandbox_id": record.sandbox, "blocked_on_channel": record.channel}
    return (EventSpec(EventKind.SANDBOX_BLOCKED, payload, record.sandbox, record.owner),)


def _stopped(record: SandboxStopped) -> tuple[EventSpec, ...]:
    sandbox, owner = record.sandbox, record.owner
    if record.state is SandboxState.HALTED:
        payload: dict[str, Any] = {
            "sandbox_id": sandbox,
            "ticks_used": record.ticks,
            "output_hash": record.output_hash,
        }
        return (EventSpec(EventKind.SANDBOX_HALTED, payload, sandbox, owner),)
    if record.state is SandboxState.KILLED:
        payload = {"sandbox_id": sandbox, "killed_by": record.killed_by}
        return (EventSpec(EventKind.SANDBOX_KILLED, payload, sandbox, owner),)
    fault = FaultCode(record.fault) if record.fault is not None else None
    payload = {
        "sandbox_id": sandbox,
        "fault": record.fault,
        "ticks_used": record.ticks,
        "pc": record.pc,
        "fault_name": fault.name if fault is not None else record.state.value,
        "fault_detail": record.fault_detail,
    }
    return (EventSpec(EventKind.SANDBOX_FAULTED, payload, sandbox, owner),)


def _service_created(record: ServiceCreated) -> tuple[EventSpec, ...]:
    payload = {
        "service_id": record.service,
        "owner": record.owner,
        "name": record.name,
        "endpoints": [
            {"name": e.name, "channel": e.channel, "schema": e.schema} for e in record.endpoints
        ],
    }
    return (EventSpec(EventKind.SERVICE_CREATED, payload, record.sandbox, record.owner),)


def _call_started(record: CallStarted) -> tuple[EventSpec, ...]:
    payload = {"service_id": record.service, "endpoint": record.endpoint, "caller": record.caller}
    return (EventSpec(EventKind.SERVICE_CALLED, payload, record.sandbox, record.owner),)


def _call_answered(record: CallAnswered) -> tuple[EventSpec, ...]:
    payload = {
        "service_id": record.service,
        "endpoint": record.endpoint,
        "ticks_used": record.ticks_used,
    }
    return (EventSpec(EventKind.SERVICE_COMPLETED, payload, record.sandbox, record.owner),)


def _resumed(record: ServiceResumed) -> tuple[EventSpec, ...]:
    payload = {"service_id": record.service, "cycle": record.cycle}
    return (EventSpec(ExtensionEventKind.SERVICE_RESUMED, payload, record.sandbox, record.owner),)


def _suspended(record: ServiceSuspended) -> tuple[EventSpec, ...]:
    payload = {"service_id": record.service, "cycle": record.cycle, "reason": record.reason}
    kind = ExtensionEventKind.SERVICE_SUSPENDED
    return (EventSpec(kind, payload, record.sandbox, record.owner),)


def _cycle(record: CycleBegan) -> tuple[EventSpec, ...]:
    return (EventSpec(ExtensionEventKind.CYCLE_STARTED, {"cycle": record.cycle}),)


def _linked(record: ProgramLinked) -> tuple[EventSpec, ...]:
    payload = {
        "original": record.original,
        "resolved": record.resolved,
        "import_count": record.import_count,
    }
    return (EventSpec(EventKind.LINK_COMPLETED, payload, owner=record.requester),)


def _proved(record: ProofGenerated) -> tuple[EventSpec, ...]:
    proof = record.proof
    payload = {name: getattr(proof, name) for name in EVENT_FIELDS[EventKind.PROOF_GENERATED]}
    return (EventSpec(EventKind.PROOF_GENERATED, payload, record.sandbox, record.owner),)


_PROJECT: Final[dict[type[Record], Callable[[Any], tuple[EventSpec, ...]]]] = {
    SandboxCreated: _created,
    ExecutionBegan: _began,
    SandboxBlocked: _blocked,
    SandboxStopped: _stopped,
    ServiceCreated: _service_created,
    CallStarted: _call_started,
    CallAnswered: _call_answered,
    ServiceResumed: _resumed,
    ServiceSuspended: _suspended,
    CycleBegan: _cycle,
    ProgramLinked: _linked,
    ProofGenerated: _proved,
}
