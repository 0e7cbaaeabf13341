"""The scheduler: round robin over runnable sandboxes, one slice at a time.

A slice runs a sandbox for at most the quantum (``EngineLimits.slice_ticks``),
or until it executes TICK, blocks, halts or faults.  After each slice the
scheduler yields to the event loop (``await asyncio.sleep(0)``), so API calls,
subscribers and host adapters get their turn.  A sandbox that is still running
goes to the back of the queue, so with ``n`` runnable sandboxes none waits more
than ``n - 1`` slices; a newly started one runs after at most one slice of each
sandbox already queued.  A BLOCKED sandbox is in no queue and costs nothing
until a message wakes it.

Wall-clock deadlines are kept in a heap and checked before every slice and
whenever the scheduler is idle, so a blocked sandbox's deadline passes on time
even while others run.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import deque
from typing import Protocol

from kforge.core import Hash256
from kforge.engine.models import Clock, SandboxState
from kforge.engine.sandbox import Sandbox

__all__ = ["Scheduler", "SliceRunner"]


class SliceRunner(Protocol):
    """What the scheduler needs from the engine."""

    async def run_slice(self, sandbox: Sandbox) -> None:
        """Run one slice of ``sandbox`` and settle its state (re-queueing it if still running)."""
        ...

    def deadline_passed(self, sandbox: Sandbox) -> None:
        """End ``sandbox``, whose execution deadline has passed."""
        ...


class Scheduler:
    """Round-robin slices over the run queue, plus the deadline heap."""

    def __init__(self, runner: SliceRunner, clock: Clock) -> None:
        self._runner = runner
        self._clock = clock
        self._queue: deque[Sandbox] = deque()
        self._queued: set[Hash256] = set()
        self._deadlines: list[tuple[float, int, Sandbox]] = []
        #: The deadline of each execution the scheduler watches (heap entries that
        #: no longer match are stale and skipped).
        self._deadline_of: dict[Hash256, float] = {}
        self._order = itertools.count()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self.slices = 0

    def __len__(self) -> int:
        """Sandboxes waiting in the run queue."""
        return len(self._queue)

    def enqueue(self, sandbox: Sandbox) -> None:
        """Put a runnable sandbox at the back of the queue (once)."""
        if sandbox.id not in self._queued:
            self._queued.add(sandbox.id)
            self._queue.append(sandbox)
            self._wakeup.set()

    def watch_deadline(self, sandbox: Sandbox, deadline: float) -> None:
        """End the sandbox's execution at ``deadline`` (the clock's ``monotonic`` time)."""
        self._deadline_of[sandbox.id] = deadline
        heapq.heappush(self._deadlines, (deadline, next(self._order), sandbox))
        self._wakeup.set()

    def forget_deadline(self, sandbox: Sandbox) -> None:
        """The sandbox's execution has no deadline any more (a service)."""
        self._deadline_of.pop(sandbox.id, None)

    def poke(self) -> None:
        """Make an idle scheduler look at its deadlines again (after moving an injected clock)."""
        self._wakeup.set()

    def expire_deadlines(self) -> list[Sandbox]:
        """End every execution whose deadline is at or before now; returns those ended."""
        now = self._clock.monotonic()
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, sandbox = heapq.heappop(self._deadlines)
            if self._deadline_of.get(sandbox.id) != deadline:
                continue  # stale: replaced, or forgotten
            del self._deadline_of[sandbox.id]
            if sandbox.state.is_live and sandbox.scheduled:
                self._runner.deadline_passed(sandbox)
                expired.append(sandbox)
        return expired

    def _idle_timeout(self) -> float | None:
        while self._deadlines and not self._deadlines[0][2].state.is_live:
            _, _, sandbox = heapq.heappop(self._deadlines)
            self._deadline_of.pop(sandbox.id, None)
        if not self._deadlines:
            return None
        return max(0.0, self._deadlines[0][0] - self._clock.monotonic())

    async def run(self) -> None:
        """The scheduling loop; returns after :meth:`stop`."""
        while not self._stopping:
            self.expire_deadlines()
            if not self._queue:
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self._idle_timeout())
                continue
            sandbox = self._queue.popleft()
            self._queued.discard(sandbox.id)
            if sandbox.state is not SandboxState.RUNNING or not sandbox.scheduled:
                continue
            await self._runner.run_slice(sandbox)
            self.slices += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
