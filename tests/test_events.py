"""The event bus: every kind with its payload, filters, order, bounded queues and gaps."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack  # type: ignore[import-untyped, unused-ignore]
import pytest

from kforge.core import AgentId, EventKind, Hash256
from kforge.engine import ManualClock
from kforge.events import (
    EVENT_FIELDS,
    AnyEventKind,
    Event,
    EventBus,
    ExtensionEventKind,
    Gap,
    SubscriptionClosed,
)
from test_engine_support import (
    DIVIDE_BY_ZERO,
    ECHO,
    ECHO_TWICE,
    OTHER,
    OWNER,
    SHORT,
    create,
    execute,
    open_engine,
    run,
)

S1 = Hash256(b"\x11" * 32)
S2 = Hash256(b"\x12" * 32)
A1 = AgentId(b"\x21" * 32)
A2 = AgentId(b"\x22" * 32)
H = Hash256(b"\x33" * 32)

#: One payload per kind, with exactly the seed's fields (plus the documented extensions).
PAYLOADS: dict[AnyEventKind, dict[str, Any]] = {
    EventKind.SANDBOX_CREATED: {
        "sandbox_id": S1,
        "owner": A1,
        "code": H,
        "memory_quota": 64,
        "tick_budget": 10,
        "persistent": False,
    },
    EventKind.SANDBOX_STARTED: {"sandbox_id": S1, "owner": A1},
    EventKind.SANDBOX_HALTED: {"sandbox_id": S1, "ticks_used": 3, "output_hash": H},
    EventKind.SANDBOX_FAULTED: {
        "sandbox_id": S1,
        "fault": 3,
        "ticks_used": 3,
        "pc": 1,
        "fault_name": "DIVIDE_BY_ZERO",
        "fault_detail": None,
    },
    EventKind.SANDBOX_KILLED: {"sandbox_id": S1, "killed_by": A2},
    EventKind.SANDBOX_BLOCKED: {"sandbox_id": S1, "blocked_on_channel": 2},
    EventKind.SERVICE_CREATED: {"service_id": H, "owner": A1, "name": b"svc", "endpoints": []},
    EventKind.SERVICE_CALLED: {"service_id": H, "endpoint": b"get", "caller": A2},
    EventKind.SERVICE_COMPLETED: {"service_id": H, "endpoint": b"get", "ticks_used": 5},
    EventKind.PROOF_GENERATED: {
        "program": H,
        "input": H,
        "output": H,
        "ticks_used": 5,
        "trace_hash": H,
        "forge_sig": b"sig",
    },
    EventKind.LINK_COMPLETED: {"original": H, "resolved": S2, "import_count": 2},
    ExtensionEventKind.SERVICE_SUSPENDED: {"service_id": H, "cycle": 3, "reason": "short"},
    ExtensionEventKind.SERVICE_RESUMED: {"service_id": H, "cycle": 3},
    ExtensionEventKind.CYCLE_STARTED: {"cycle": 3},
}


def test_every_event_kind_has_its_seed_payload() -> None:
    assert set(EVENT_FIELDS) == {*EventKind, *ExtensionEventKind}
    assert set(PAYLOADS) == {*EventKind, *ExtensionEventKind}
    seed_fields = {
        EventKind.SANDBOX_CREATED: {
            "sandbox_id",
            "owner",
            "code",
            "memory_quota",
            "tick_budget",
            "persistent",
        },
        EventKind.SANDBOX_STARTED: {"sandbox_id", "owner"},
        EventKind.SANDBOX_HALTED: {"sandbox_id", "ticks_used", "output_hash"},
        EventKind.SANDBOX_FAULTED: {"sandbox_id", "fault", "ticks_used", "pc"},
        EventKind.SANDBOX_KILLED: {"sandbox_id", "killed_by"},
        EventKind.SANDBOX_BLOCKED: {"sandbox_id", "blocked_on_channel"},
        EventKind.SERVICE_CREATED: {"service_id", "owner", "name", "endpoints"},
        EventKind.SERVICE_CALLED: {"service_id", "endpoint", "caller"},
        EventKind.SERVICE_COMPLETED: {"service_id", "endpoint", "ticks_used"},
        EventKind.PROOF_GENERATED: {
            "program",
            "input",
            "output",
            "ticks_used",
            "trace_hash",
            "forge_sig",
        },
        EventKind.LINK_COMPLETED: {"original", "resolved", "import_count"},
    }
    for kind, fields in seed_fields.items():
        assert fields <= set(EVENT_FIELDS[kind]), kind


@pytest.mark.parametrize("kind", list(EventKind), ids=lambda kind: kind.name)
def test_each_kind_publishes_and_encodes(kind: EventKind) -> None:
    bus = EventBus(lambda: 99)
    subscription = bus.subscribe([kind])
    event = bus.publish(kind, PAYLOADS[kind], sandbox_id=S1, owner=A1)
    assert subscription.get_nowait() == event
    assert (event.seq, event.timestamp_ms) == (1, 99)
    wire = msgpack.unpackb(event.encode(), raw=False)
    assert wire["kind"] == int(kind) and wire["sandbox_id"] == S1.raw and wire["owner"] == A1.raw
    assert set(wire["payload"]) == set(EVENT_FIELDS[kind])


def test_payloads_with_missing_or_extra_fields_are_refused() -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match="missing"):
        bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S1})
    with pytest.raises(ValueError, match="unexpected"):
        bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S1, "owner": A1, "x": 1})
    assert bus.published == 0


def test_filters_by_kind_sandbox_and_owner() -> None:
    bus = EventBus()
    everything = bus.subscribe()
    started = bus.subscribe([EventKind.SANDBOX_STARTED])
    second = bus.subscribe(sandbox_id=S2)
    by_owner = bus.subscribe(owner=A2)
    both = bus.subscribe([EventKind.SANDBOX_KILLED], owner=A1)
    bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S1, "owner": A1}, sandbox_id=S1, owner=A1)
    bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S2, "owner": A2}, sandbox_id=S2, owner=A2)
    bus.publish(
        EventKind.SANDBOX_KILLED, {"sandbox_id": S1, "killed_by": A1}, sandbox_id=S1, owner=A1
    )
    assert [e.seq for e in everything.events()] == [1, 2, 3]
    assert [e.seq for e in started.events()] == [1, 2]
    assert [e.seq for e in second.events()] == [2]
    assert [e.seq for e in by_owner.events()] == [2]
    assert [e.seq for e in both.events()] == [3]


def test_a_full_queue_drops_the_oldest_and_leaves_a_gap_marker() -> None:
    bus = EventBus()
    slow = bus.subscribe(maxsize=3)
    for index in range(5):
        bus.publish(EventKind.SANDBOX_BLOCKED, {"sandbox_id": S1, "blocked_on_channel": index})
    assert slow.dropped == 2 and len(slow) == 4
    items = slow.drain()
    assert items[0] == Gap(2)
    assert [
        item.payload["blocked_on_channel"] for item in items[1:] if isinstance(item, Event)
    ] == [2, 3, 4]
    for index in range(4):
        bus.publish(EventKind.SANDBOX_BLOCKED, {"sandbox_id": S1, "blocked_on_channel": index})
    assert slow.get_nowait() == Gap(1)
    assert slow.dropped == 3
    with pytest.raises(ValueError):
        bus.subscribe(maxsize=0)


def test_get_waits_and_close_ends_iteration() -> None:
    async def body() -> None:
        bus = EventBus()
        subscription = bus.subscribe()
        waiter = asyncio.ensure_future(subscription.get())
        await asyncio.sleep(0)
        event = bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S1, "owner": A1})
        assert await waiter == event
        bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S2, "owner": A1})
        subscription.close()
        subscription.close()  # idempotent
        bus.publish(EventKind.SANDBOX_STARTED, {"sandbox_id": S1, "owner": A1})  # not received
        received = [item async for item in subscription]
        assert len(received) == 1
        with pytest.raises(SubscriptionClosed):
            await subscription.get()
        with bus.subscribe() as scoped:
            assert not scoped.closed
        assert scoped.closed

    asyncio.run(body())


def test_a_slow_subscriber_never_stalls_the_engine() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            stalled = engine.bus.subscribe(maxsize=1)
            for _ in range(20):
                await execute(engine, SHORT)
            assert stalled.dropped > 0
            assert isinstance(stalled.get_nowait(), Gap)

    run(body)


def test_engine_events_for_one_sandbox_come_in_lifecycle_order() -> None:
    async def body() -> None:
        async with open_engine(clock=ManualClock(epoch_ms=5000)) as engine:
            halted = engine.bus.subscribe(owner=OWNER)
            blocked_id = await create(engine, ECHO_TWICE, input=b"x")
            faulty = engine.bus.subscribe(owner=OTHER)
            await execute(engine, DIVIDE_BY_ZERO, owner=OTHER)
            await engine.exec_start(blocked_id, OWNER)
            while len(halted) < 3:
                await asyncio.sleep(0)
            await engine.kill_sandbox(blocked_id, OWNER)
            kinds = [event.kind for event in halted.events()]
            assert kinds == [
                EventKind.SANDBOX_CREATED,
                EventKind.SANDBOX_STARTED,
                EventKind.SANDBOX_BLOCKED,
                EventKind.SANDBOX_KILLED,
            ]
            faults = faulty.events()
            assert [event.kind for event in faults] == [
                EventKind.SANDBOX_CREATED,
                EventKind.SANDBOX_STARTED,
                EventKind.SANDBOX_FAULTED,
            ]
            payload = faults[-1].payload
            assert payload["fault"] == 3 and payload["fault_name"] == "DIVIDE_BY_ZERO"
            assert payload["pc"] == 1 and payload["ticks_used"] == 3
            assert all(event.timestamp_ms == 5000 for event in faults)
            seqs = [event.seq for event in faults]
            assert seqs == sorted(seqs)

    run(body)


def test_halted_event_carries_the_output_hash() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            subscription = engine.bus.subscribe([EventKind.SANDBOX_HALTED])
            result = await execute(engine, ECHO, input=b"out")
            event = subscription.events()[0]
            assert event.payload == {
                "sandbox_id": result.sandbox_id,
                "ticks_used": result.ticks_used,
                "output_hash": Hash256.of(result.output),
            }

    run(body)
