"""What a gateway reads from streams: the events (``KFORGE_EVENTS``) as an
:class:`~kforge.events.EventBus`, the live sandboxes of each partition as those events
tell them, and the agents' mailboxes (``KFORGE_MAILBOX``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js import api

from kforge.cluster import names
from kforge.cluster.connection import Layout
from kforge.cluster.placement import PartitionLoads
from kforge.core import AgentId, EngineNotOpen, Hash256
from kforge.events import AnyEventKind, Event, EventBus, Subscription, event_kind
from kforge.messages import Envelope
from kforge.wire import decode_msgpack

__all__ = ["ClusterBus", "ClusterMailbox"]


class ClusterMailbox:
    """Envelopes the engines sent an agent later, taken from ``KFORGE_MAILBOX``."""

    def __init__(self) -> None:
        self.layout: Layout | None = None
        self._consumers: dict[AgentId, Any] = {}

    async def _consumer(self, agent: AgentId) -> Any:
        found = self._consumers.get(agent)
        if found is None:
            if self.layout is None:
                raise EngineNotOpen("unopened")
            found = await self.layout.js.pull_subscribe(
                names.mailbox_subject(agent),
                durable=f"mailbox-{agent.hex[:32]}",
                stream=names.MAILBOX_STREAM,
                config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30.0),
            )
            self._consumers[agent] = found
        return found

    async def take(self, recipient: AgentId, timeout: float = 0.0) -> list[Envelope]:
        """Every envelope waiting for ``recipient`` (waiting up to ``timeout`` for the first)."""
        consumer = await self._consumer(recipient)
        taken: list[Envelope] = []
        wait = max(timeout, 0.05)
        while True:
            try:
                messages = await consumer.fetch(64, timeout=wait)
            except nats.errors.TimeoutError:
                return taken
            for message in messages:
                with contextlib.suppress(Exception):
                    taken.append(Envelope.decode(message.data))
                await message.ack()
            if len(messages) < 64:
                return taken
            wait = 0.05

    def drain(self, agent: AgentId) -> list[Envelope]:
        """Nothing is kept here (see :meth:`take`)."""
        return []


class ClusterBus(EventBus):
    """The events of every partition (``KFORGE_EVENTS``), as the in-process bus offers them.

    ``seq`` is the stream's sequence number: cluster-wide, and where a subscriber
    asks to start again (``since``).
    """

    def __init__(self, default_maxsize: int = 4096) -> None:
        super().__init__(default_maxsize=default_maxsize)
        self.layout: Layout | None = None
        self._feeds: dict[int, Any] = {}
        self._listening: Any = None
        self._last_seq = 0
        #: Live sandboxes per partition, as the events tell them (for placement).
        self.loads = PartitionLoads()

    @property
    def published(self) -> int:
        return self._last_seq

    async def start(self, layout: Layout) -> None:
        """Follow new events for the listeners (the server's notes on sandboxes)."""
        self.layout = layout
        self._listening = await layout.js.subscribe(
            "kforge.events.>",
            stream=names.EVENTS_STREAM,
            cb=self._heard,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.NEW,
        )

    async def stop(self) -> None:
        for feed in [self._listening, *self._feeds.values()]:
            if feed is not None:
                with contextlib.suppress(Exception):
                    await feed.unsubscribe()
        self._feeds.clear()

    async def _heard(self, message: Msg) -> None:
        event = _event_of(message)
        if event is None:
            return
        partition = (message.headers or {}).get(names.PARTITION_HEADER)
        if partition is not None and partition.isdigit():
            self.loads.heard(int(partition), event.kind)
        self._last_seq = max(self._last_seq, event.seq)
        for listener in self.listeners:
            with contextlib.suppress(Exception):
                listener(event)

    def subscribe(
        self,
        kinds: Iterable[AnyEventKind] | None = None,
        *,
        sandbox_id: Hash256 | None = None,
        owner: AgentId | None = None,
        maxsize: int | None = None,
        since: int | None = None,
    ) -> Subscription:
        """A subscription fed by a JetStream consumer on the matching subjects (from the
        stream sequence ``since``, else from now)."""
        subscription = super().subscribe(kinds, sandbox_id=sandbox_id, owner=owner, maxsize=maxsize)
        filters = (
            [names.events_filter(int(kind), owner, sandbox_id) for kind in subscription.kinds]
            if subscription.kinds
            else [names.events_filter(None, owner, sandbox_id)]
        )
        config = api.ConsumerConfig(
            filter_subjects=filters if len(filters) > 1 else None,
            deliver_policy=(
                api.DeliverPolicy.BY_START_SEQUENCE if since else api.DeliverPolicy.NEW
            ),
            opt_start_seq=since or None,
        )

        async def feed(message: Msg) -> None:
            event = _event_of(message)
            if event is not None and not subscription.closed:
                subscription._offer(event)

        layout = self.layout
        if layout is None:
            raise EngineNotOpen("unopened")

        async def open_feed() -> None:
            self._feeds[id(subscription)] = await layout.js.subscribe(
                filters[0],
                stream=names.EVENTS_STREAM,
                cb=feed,
                ordered_consumer=True,
                config=config,
            )

        self._opening = asyncio.get_running_loop().create_task(open_feed())
        return subscription

    async def ready(self) -> None:
        """Wait until the last subscription's consumer exists (its events flow from then)."""
        opening = getattr(self, "_opening", None)
        if opening is not None:
            await opening

    def _remove(self, subscription: Subscription) -> None:
        super()._remove(subscription)
        feed = self._feeds.pop(id(subscription), None)
        if feed is not None:
            asyncio.get_running_loop().create_task(_unsubscribe(feed))


async def _unsubscribe(feed: Any) -> None:
    with contextlib.suppress(Exception):
        await feed.unsubscribe()


def _event_of(message: Msg) -> Event | None:
    """The event a stream message holds, numbered by its stream sequence."""
    try:
        values = decode_msgpack(message.data, dict[str, Any], "event")
        sandbox = values["sandbox_id"]
        owner = values["owner"]
        return Event(
            message.metadata.sequence.stream,
            event_kind(values["kind"]),
            Hash256(bytes(sandbox)) if sandbox is not None else None,
            AgentId(bytes(owner)) if owner is not None else None,
            values["timestamp_ms"],
            values["payload"],
        )
    except Exception:
        return None
