"""The in-process event bus: every state change of the engine, in order, to whoever listens.

Events carry one of the seed's kinds (0x4000-0x4030, :class:`kforge.core.EventKind`)
and exactly the payload fields :data:`EVENT_FIELDS` lists for it.  Each event gets
a bus-wide sequence number at publication, so the order of events is total and,
for one sandbox, the order its changes happened in.

Subscribers choose by kind, by sandbox and by owner.  Each subscription has a
bounded queue: when it is full, the oldest queued event is dropped and counted,
and the subscriber's next read returns a :class:`Gap` saying how many events it
missed.  Publishing never waits, so a slow subscriber cannot stall the engine.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from kforge.core import AgentId, EventKind, Hash256
from kforge.messages import pack

__all__ = [
    "EVENT_FIELDS",
    "AnyEventKind",
    "Event",
    "EventBus",
    "ExtensionEventKind",
    "Gap",
    "Subscription",
    "SubscriptionClosed",
    "event_kind",
]


class ExtensionEventKind(IntEnum):
    """Event kinds beyond the seed's table (same Forge range, documented in docs/engine.md)."""

    SERVICE_SUSPENDED = 0x4013  # a service its owner could not pay for this cycle
    SERVICE_RESUMED = 0x4014  # a suspended service was paid for and runs again
    CYCLE_STARTED = 0x4040  # the engine began a cycle


#: Any event kind the bus carries.
AnyEventKind = EventKind | ExtensionEventKind


def event_kind(value: int) -> AnyEventKind:
    """The kind numbered ``value`` (``ValueError`` for a number that is no kind)."""
    try:
        return EventKind(value)
    except ValueError:
        return ExtensionEventKind(value)


#: The payload fields of each event kind: the seed's §6.2, plus the extensions
#: ``fault_name`` and ``fault_detail`` on SANDBOX_FAULTED (see docs/engine.md).
EVENT_FIELDS: Final[dict[AnyEventKind, tuple[str, ...]]] = {
    EventKind.SANDBOX_CREATED: (
        "sandbox_id",
        "owner",
        "code",
        "memory_quota",
        "tick_budget",
        "persistent",
    ),
    EventKind.SANDBOX_STARTED: ("sandbox_id", "owner"),
    EventKind.SANDBOX_HALTED: ("sandbox_id", "ticks_used", "output_hash"),
    EventKind.SANDBOX_FAULTED: (
        "sandbox_id",
        "fault",
        "ticks_used",
        "pc",
        "fault_name",
        "fault_detail",
    ),
    EventKind.SANDBOX_KILLED: ("sandbox_id", "killed_by"),
    EventKind.SANDBOX_BLOCKED: ("sandbox_id", "blocked_on_channel"),
    EventKind.SERVICE_CREATED: ("service_id", "owner", "name", "endpoints"),
    EventKind.SERVICE_CALLED: ("service_id", "endpoint", "caller"),
    EventKind.SERVICE_COMPLETED: ("service_id", "endpoint", "ticks_used"),
    EventKind.PROOF_GENERATED: (
        "program",
        "input",
        "output",
        "ticks_used",
        "trace_hash",
        "forge_sig",
    ),
    EventKind.LINK_COMPLETED: ("original", "resolved", "import_count"),
    ExtensionEventKind.SERVICE_SUSPENDED: ("service_id", "cycle", "reason"),
    ExtensionEventKind.SERVICE_RESUMED: ("service_id", "cycle"),
    ExtensionEventKind.CYCLE_STARTED: ("cycle",),
}


@dataclass(frozen=True, slots=True)
class Event:
    """One published event.

    ``seq`` orders all events of a bus; ``sandbox_id`` and ``owner`` say whom it
    concerns (for filtering; ``None`` when it concerns no sandbox or owner);
    ``timestamp_ms`` comes from the engine's injected clock.
    """

    seq: int
    kind: AnyEventKind
    sandbox_id: Hash256 | None
    owner: AgentId | None
    timestamp_ms: int
    payload: Mapping[str, Any]

    def encode(self) -> bytes:
        """The event as a msgpack map (ids as 32-byte binaries)."""
        return pack(
            {
                "seq": self.seq,
                "kind": int(self.kind),
                "sandbox_id": self.sandbox_id,
                "owner": self.owner,
                "timestamp_ms": self.timestamp_ms,
                "payload": dict(self.payload),
            }
        )


@dataclass(frozen=True, slots=True)
class Gap:
    """A marker: ``dropped`` events were lost here because the subscriber fell behind."""

    dropped: int


class SubscriptionClosed(Exception):
    """Raised by :meth:`Subscription.get` on a closed subscription with nothing left."""


class Subscription:
    """One subscriber's bounded, filtered view of the bus.

    Read with :meth:`get` (waits), :meth:`get_nowait`, :meth:`drain`, or
    ``async for``.  ``dropped`` counts every event lost to a full queue.
    """

    def __init__(
        self,
        bus: EventBus,
        kinds: frozenset[AnyEventKind] | None,
        sandbox_id: Hash256 | None,
        owner: AgentId | None,
        maxsize: int,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._bus = bus
        self.kinds = kinds
        self.sandbox_id = sandbox_id
        self.owner = owner
        self.maxsize = maxsize
        self.dropped = 0
        self.closed = False
        self._queue: deque[Event] = deque()
        self._gap = 0
        self._waiter: asyncio.Event | None = None

    def matches(self, event: Event) -> bool:
        return (
            (self.kinds is None or event.kind in self.kinds)
            and (self.sandbox_id is None or event.sandbox_id == self.sandbox_id)
            and (self.owner is None or event.owner == self.owner)
        )

    def _offer(self, event: Event) -> None:
        """Queue ``event``; on a full queue drop the oldest (the gap is before the head)."""
        if len(self._queue) >= self.maxsize:
            self._queue.popleft()
            self.dropped += 1
            self._gap += 1
        self._queue.append(event)
        if self._waiter is not None:
            self._waiter.set()

    def __len__(self) -> int:
        return len(self._queue) + (1 if self._gap else 0)

    def get_nowait(self) -> Event | Gap | None:
        """The next item, or ``None`` when nothing is queued."""
        if self._gap:
            gap = Gap(self._gap)
            self._gap = 0
            return gap
        if self._queue:
            return self._queue.popleft()
        return None

    async def get(self) -> Event | Gap:
        """The next item, waiting for one; raises :class:`SubscriptionClosed` once closed and empty."""
        while True:
            item = self.get_nowait()
            if item is not None:
                return item
            if self.closed:
                raise SubscriptionClosed("subscription is closed")
            if self._waiter is None:
                self._waiter = asyncio.Event()
            self._waiter.clear()
            await self._waiter.wait()

    def drain(self) -> list[Event | Gap]:
        """Everything queued now, in order."""
        items: list[Event | Gap] = []
        while (item := self.get_nowait()) is not None:
            items.append(item)
        return items

    def events(self) -> list[Event]:
        """Everything queued now, gaps left out."""
        return [item for item in self.drain() if isinstance(item, Event)]

    def close(self) -> None:
        """Stop receiving; items already queued can still be read.  Idempotent."""
        if not self.closed:
            self.closed = True
            self._bus._remove(self)
            if self._waiter is not None:
                self._waiter.set()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event | Gap:
        try:
            return await self.get()
        except SubscriptionClosed:
            raise StopAsyncIteration from None


class EventBus:
    """Publish/subscribe within one process.

    ``clock_ms`` gives each event its timestamp (inject a fixed clock for
    deterministic tests).  Delivery to subscribers happens inside
    :meth:`publish`, in subscription order, without awaiting.
    """

    def __init__(
        self,
        clock_ms: Callable[[], int] | None = None,
        default_maxsize: int = 4096,
        history: int = 4096,
    ) -> None:
        self._clock_ms = clock_ms or (lambda: 0)
        self.default_maxsize = default_maxsize
        self._subscriptions: list[Subscription] = []
        self._seq = 0
        #: The latest events, for subscribers that start from a sequence number.
        self._history: deque[Event] = deque(maxlen=history)
        #: Called with every event right after it is numbered (e.g. the durable log).
        self.listeners: list[Callable[[Event], None]] = []

    def resume_at(self, seq: int) -> None:
        """Continue numbering after ``seq`` (an engine rebuilt from its log)."""
        self._seq = seq

    @property
    def published(self) -> int:
        """How many events were published so far (the last ``seq``)."""
        return self._seq

    def subscribe(
        self,
        kinds: Iterable[AnyEventKind] | None = None,
        *,
        sandbox_id: Hash256 | None = None,
        owner: AgentId | None = None,
        maxsize: int | None = None,
        since: int | None = None,
    ) -> Subscription:
        """A new subscription to events matching every filter given.

        With ``since``, the events numbered ``since`` and later that the bus still
        holds (its latest ``history``) come first; older ones it no longer holds are
        one :class:`Gap` before them.
        """
        subscription = Subscription(
            self,
            frozenset(event_kind(kind) for kind in kinds) if kinds is not None else None,
            sandbox_id,
            owner,
            maxsize if maxsize is not None else self.default_maxsize,
        )
        if since is not None:
            oldest = self._history[0].seq if self._history else self._seq + 1
            if since < oldest:
                subscription._gap = oldest - max(since, 1)
            for event in self._history:
                if event.seq >= since and subscription.matches(event):
                    subscription._offer(event)
        self._subscriptions.append(subscription)
        return subscription

    def _remove(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def publish(
        self,
        kind: AnyEventKind,
        payload: Mapping[str, Any],
        *,
        sandbox_id: Hash256 | None = None,
        owner: AgentId | None = None,
    ) -> Event:
        """Number, stamp and deliver one event.

        Raises ``ValueError`` when ``payload`` does not hold exactly the fields of
        ``kind`` (a programming error, never a runtime condition).
        """
        kind = event_kind(kind)
        expected = EVENT_FIELDS[kind]
        if tuple(payload) != expected and set(payload) != set(expected):
            missing = sorted(set(expected) - set(payload))
            extra = sorted(set(payload) - set(expected))
            raise ValueError(f"{kind.name} payload: missing {missing}, unexpected {extra}")
        self._seq += 1
        event = Event(
            self._seq,
            kind,
            sandbox_id,
            owner,
            self._clock_ms(),
            {name: payload[name] for name in expected},
        )
        self._history.append(event)
        for listener in self.listeners:
            listener(event)
        for subscription in tuple(self._subscriptions):
            if subscription.matches(event):
                subscription._offer(event)
        return event
