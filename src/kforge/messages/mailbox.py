"""Mailboxes: replies that arrive later (``EXEC_RESULT``, ``PROOF_RESULT``), per recipient."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from kforge.core import AgentId
from kforge.messages.envelope import Envelope

__all__ = ["Mailbox"]


@dataclass
class _Box:
    queue: deque[Envelope] = field(default_factory=deque)
    dropped: int = 0
    waiter: asyncio.Event | None = None


class Mailbox:
    """Envelopes waiting for their recipients, bounded per recipient.

    When a recipient's box holds ``maxsize`` envelopes, posting drops the oldest
    and counts it in :meth:`dropped`, so a recipient that never reads cannot make
    the engine hold unbounded memory.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._boxes: dict[AgentId, _Box] = {}

    def _box(self, recipient: AgentId) -> _Box:
        box = self._boxes.get(recipient)
        if box is None:
            box = self._boxes[recipient] = _Box()
        return box

    def post(self, recipient: AgentId, envelope: Envelope) -> None:
        box = self._box(recipient)
        if len(box.queue) >= self.maxsize:
            box.queue.popleft()
            box.dropped += 1
        box.queue.append(envelope)
        if box.waiter is not None:
            box.waiter.set()

    def get_nowait(self, recipient: AgentId) -> Envelope | None:
        box = self._boxes.get(recipient)
        if box is None or not box.queue:
            return None
        return box.queue.popleft()

    async def get(self, recipient: AgentId) -> Envelope:
        """The next envelope for ``recipient``, waiting for one if need be."""
        box = self._box(recipient)
        while not box.queue:
            if box.waiter is None:
                box.waiter = asyncio.Event()
            box.waiter.clear()
            await box.waiter.wait()
        return box.queue.popleft()

    def drain(self, recipient: AgentId) -> list[Envelope]:
        box = self._boxes.get(recipient)
        if box is None:
            return []
        taken = list(box.queue)
        box.queue.clear()
        return taken

    def dropped(self, recipient: AgentId) -> int:
        box = self._boxes.get(recipient)
        return box.dropped if box else 0
