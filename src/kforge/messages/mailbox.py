"""Mailboxes: replies that arrive later (``EXEC_RESULT``, ``PROOF_RESULT``), per recipient."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Final

from kforge.core import AgentId
from kforge.messages.envelope import Envelope

__all__ = ["MAX_MAILBOX_BYTES", "MAX_MAILBOX_TOTAL_BYTES", "MAX_RECIPIENTS", "Mailbox"]

#: The payload bytes one recipient's box holds at most.
MAX_MAILBOX_BYTES: Final = 16 * 1024 * 1024
#: The payload bytes all boxes together hold at most.
MAX_MAILBOX_TOTAL_BYTES: Final = 256 * 1024 * 1024
#: The recipients the mailbox keeps boxes for at most.
MAX_RECIPIENTS: Final = 10_000


@dataclass
class _Box:
    queue: deque[Envelope] = field(default_factory=deque)
    size: int = 0
    dropped: int = 0
    waiter: asyncio.Event | None = None
    waiting: int = 0


class Mailbox:
    """Envelopes waiting for their recipients, bounded per recipient and in all.

    A recipient's box holds at most ``maxsize`` envelopes and ``max_bytes`` bytes
    of payload: posting beyond either drops the oldest (an envelope larger than
    ``max_bytes`` by itself is dropped), counted in :meth:`dropped`, so a
    recipient that never reads cannot make the engine hold unbounded memory.
    An emptied box is let go (unless it counts drops), and at most
    ``max_recipients`` boxes are kept: a box for one more recipient replaces the
    one posted to longest ago that nobody waits on.  All boxes together hold at
    most ``max_total_bytes``: past it, the oldest envelopes of the boxes posted to
    longest ago are dropped first (so many recipients, each within its own bound,
    cannot add up to more).
    """

    def __init__(
        self,
        maxsize: int = 1024,
        *,
        max_bytes: int = MAX_MAILBOX_BYTES,
        max_recipients: int = MAX_RECIPIENTS,
        max_total_bytes: int = MAX_MAILBOX_TOTAL_BYTES,
    ) -> None:
        if min(maxsize, max_bytes, max_recipients, max_total_bytes) < 1:
            raise ValueError(
                "maxsize, max_bytes, max_recipients and max_total_bytes must be at least 1"
            )
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.max_recipients = max_recipients
        self.max_total_bytes = max_total_bytes
        #: Boxes, the one posted to longest ago first.
        self._boxes: OrderedDict[AgentId, _Box] = OrderedDict()
        #: The payload bytes of every box.
        self.size = 0

    def __len__(self) -> int:
        """The recipients with a box."""
        return len(self._boxes)

    def _box(self, recipient: AgentId) -> _Box:
        box = self._boxes.get(recipient)
        if box is not None:
            self._boxes.move_to_end(recipient)  # now the most recently used
            return box
        if len(self._boxes) >= self.max_recipients:
            idle = next((key for key, kept in self._boxes.items() if not kept.waiting), None)
            if idle is not None:
                self.size -= self._boxes.pop(idle).size
        box = self._boxes[recipient] = _Box()
        return box

    def post(self, recipient: AgentId, envelope: Envelope) -> None:
        box = self._box(recipient)
        size = len(envelope.payload)
        if size > self.max_bytes:
            box.dropped += 1
            return
        while box.queue and (len(box.queue) >= self.maxsize or box.size + size > self.max_bytes):
            self._drop_oldest(box)
        box.queue.append(envelope)
        box.size += size
        self.size += size
        self._within_total()
        if box.waiter is not None:
            box.waiter.set()

    def _drop_oldest(self, box: _Box) -> None:
        dropped = len(box.queue.popleft().payload)
        box.size -= dropped
        self.size -= dropped
        box.dropped += 1

    def _within_total(self) -> None:
        """Drop the oldest envelopes of the boxes posted to longest ago while all boxes
        hold more than ``max_total_bytes``."""
        while self.size > self.max_total_bytes:
            box = next(kept for kept in self._boxes.values() if kept.queue)
            self._drop_oldest(box)

    def _take(self, recipient: AgentId, box: _Box) -> Envelope:
        envelope = box.queue.popleft()
        box.size -= len(envelope.payload)
        self.size -= len(envelope.payload)
        self._let_go_if_empty(recipient, box)
        return envelope

    def _let_go_if_empty(self, recipient: AgentId, box: _Box) -> None:
        if not box.queue and not box.waiting and not box.dropped:
            self._boxes.pop(recipient, None)

    def get_nowait(self, recipient: AgentId) -> Envelope | None:
        box = self._boxes.get(recipient)
        if box is None or not box.queue:
            return None
        return self._take(recipient, box)

    async def get(self, recipient: AgentId) -> Envelope:
        """The next envelope for ``recipient``, waiting for one if need be."""
        box = self._box(recipient)  # a box somebody waits on is never let go
        box.waiting += 1
        try:
            while not box.queue:
                if box.waiter is None:
                    box.waiter = asyncio.Event()
                box.waiter.clear()
                await box.waiter.wait()
        finally:
            box.waiting -= 1
            if not box.waiting:
                box.waiter = None
        return self._take(recipient, box)

    async def take(self, recipient: AgentId, timeout: float = 0.0) -> list[Envelope]:
        """Every envelope waiting for ``recipient``; with none, the first to come within
        ``timeout`` seconds and any that came with it."""
        taken = self.drain(recipient)
        if not taken and timeout > 0:
            try:
                taken = [await asyncio.wait_for(self.get(recipient), timeout)]
            except TimeoutError:
                return []
            taken += self.drain(recipient)
        return taken

    def drain(self, recipient: AgentId) -> list[Envelope]:
        box = self._boxes.get(recipient)
        if box is None:
            return []
        taken = list(box.queue)
        box.queue.clear()
        self.size -= box.size
        box.size = 0
        self._let_go_if_empty(recipient, box)
        return taken

    def count_dropped(self, recipient: AgentId) -> None:
        """An envelope for ``recipient`` was dropped before it was posted (too large)."""
        self._box(recipient).dropped += 1

    def dropped(self, recipient: AgentId) -> int:
        box = self._boxes.get(recipient)
        return box.dropped if box else 0
