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
        self._deadlines: list[tuple[float, int, Sandbox]] = []
        self._order = itertools.count()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self.slices = 0

    def __len__(self) -> int:
        """Sandboxes waiting in the run queue."""
        return len(self._queue)

    def enqueue(self, sandbox: Sandbox) -> None:
        """Put a runnable sandbox at the back of the queue (once)."""
        if not sandbox.queued:
            sandbox.queued = True
            self._queue.append(sandbox)
            self._wakeup.set()

    def watch_deadline(self, sandbox: Sandbox) -> None:
        """Remember ``sandbox.deadline_at``; entries for finished sandboxes are skipped later."""
        if sandbox.deadline_at is not None:
            heapq.heappush(self._deadlines, (sandbox.deadline_at, next(self._order), sandbox))
            self._wakeup.set()

    def poke(self) -> None:
        """Make an idle scheduler look at its deadlines again (after moving an injected clock)."""
        self._wakeup.set()

    def expire_deadlines(self) -> list[Sandbox]:
        """End every execution whose deadline is at or before now; returns those ended."""
        now = self._clock.monotonic()
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, sandbox = heapq.heappop(self._deadlines)
            if sandbox.state.is_live and sandbox.scheduled and sandbox.deadline_at == deadline:
                self._runner.deadline_passed(sandbox)
                expired.append(sandbox)
        return expired

    def _idle_timeout(self) -> float | None:
        while self._deadlines and not self._deadlines[0][2].state.is_live:
            heapq.heappop(self._deadlines)
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
            sandbox.queued = False
            if sandbox.state is not SandboxState.RUNNING or not sandbox.scheduled:
                continue
            await self._runner.run_slice(sandbox)
            self.slices += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
