"""Where a new sandbox goes: the partition with the fewest live sandboxes.

Hashing the request id alone spreads sandboxes evenly in number but not in work: a
worker that drew the long sandboxes stays busy while another idles.  So a creation
goes to the partition with the fewest live sandboxes (ties to the first at or after
the one its request id hashes to, :func:`~kforge.cluster.names.partition_of`); since
every worker holds its share of the partitions, that keeps the workers' loads even
too, and a worker whose sandboxes run longer gets fewer new ones.  The counts are
each gateway's own view (:class:`PartitionLoads`): the workers' heartbeats when it
starts, then every creation and every end the events stream tells (each event names
its partition in a header), and the creations it placed whose event has not come
yet, so that creations made at the same moment do not all pick the same partition.

A choice made on counts is not a function of the request id, so it is written down:
``kforge_placements.request.<id>`` is created (once: the first writer wins) with the
partition, and a creation sent again — to any gateway — goes where that says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import nats.errors
from nats.js.errors import KeyWrongLastSequenceError

from kforge.cluster import names
from kforge.cluster.connection import Layout
from kforge.core import EventKind, Hash256

__all__ = ["PartitionLoads", "PlacementUnavailable", "place"]

#: The events that end a sandbox's life as a load.
_ENDS: Final = frozenset(
    {EventKind.SANDBOX_HALTED, EventKind.SANDBOX_FAULTED, EventKind.SANDBOX_KILLED}
)


class PlacementUnavailable(Exception):
    """The placement could not be written or read (NATS did not answer)."""


class PartitionLoads:
    """Live sandboxes per partition, as one gateway knows them."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        #: Creations this gateway placed whose SANDBOX_CREATED has not come yet.
        self._pending: dict[int, int] = {}

    def seed(self, live: Iterable[tuple[int, int]]) -> None:
        """Start from the workers' heartbeats: ``(partition, live sandboxes)``."""
        for partition, count in live:
            self.live[partition] = count

    def heard(self, partition: int, kind: int) -> None:
        """An event of ``kind`` from ``partition``."""
        if kind == EventKind.SANDBOX_CREATED:
            self.live[partition] = self.live.get(partition, 0) + 1
            if self._pending.get(partition, 0) > 0:
                self._pending[partition] -= 1
        elif kind in _ENDS:
            self.live[partition] = max(0, self.live.get(partition, 0) - 1)

    def load(self, partition: int) -> int:
        return self.live.get(partition, 0) + self._pending.get(partition, 0)

    def lightest(self, start: int, partitions: int) -> int:
        """The partition with the fewest live sandboxes; of equals, the first from ``start``."""
        order = [(start + step) % partitions for step in range(partitions)]
        return min(order, key=self.load)

    def placed(self, partition: int) -> None:
        self._pending[partition] = self._pending.get(partition, 0) + 1


async def place(layout: Layout, loads: PartitionLoads, request_id: Hash256) -> int:
    """The partition of the creation ``request_id``: where it went if it was placed
    before, else the lightest (written down before it is used)."""
    choice = loads.lightest(names.partition_of(request_id, layout.partitions), layout.partitions)
    key = names.placement_key(request_id)
    try:
        try:
            await layout.placements.create(key, choice.to_bytes(2, "big"))
        except KeyWrongLastSequenceError:  # placed before: by this gateway or another
            entry = await layout.placements.get(key)
            return int.from_bytes(entry.value or b"", "big")
    except (nats.errors.Error, TimeoutError) as error:
        raise PlacementUnavailable(f"the placement of a creation ({error!r})") from None
    loads.placed(choice)
    return choice
