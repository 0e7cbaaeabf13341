"""The scheduler: round robin over the owners of runnable sandboxes, one slice at a time.

A slice runs a sandbox for at most the quantum (``EngineLimits.slice_ticks``),
or until it executes TICK, blocks, halts or faults.  After each slice the
scheduler yields to the event loop (``await asyncio.sleep(0)``), so API calls,
subscribers and host adapters get their turn.

The engine's time is shared fairly among agents, not among sandboxes: the run
queue is a ring of owners, each with its own queue of sandboxes.  Each turn
takes the owner at the front, runs one slice of its first sandbox, and puts the
owner at the back (its sandbox at the back of its own queue, if it still runs).
So an agent running 64 sandboxes gets the same share as one running a single
sandbox; with ``n`` owners waiting, a newly started sandbox runs after at most
one slice of each of them.  A BLOCKED sandbox is in no queue and costs nothing
until a message wakes it.

Timers (wall clock) are checked before every slice and whenever the scheduler
is idle, so a blocked sandbox's deadline passes on time even while others run.
What a timer means is the engine's to say (:meth:`SliceRunner.deadline_passed`):
an execution's deadline, an idle sandbox's expiry, a stopped sandbox's
retention.  A sandbox has one timer at a time (``Sandbox.timer`` marks it;
entries for an earlier one are skipped).  Exact ones (deadlines) are in a heap;
coarse ones (expiry, retention: minutes) run out at the next whole second, in
one list per second, so that a sandbox waiting to be started costs its timer a
few bytes (an idle sandbox is to cost under a kilobyte beyond its quota).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Protocol

from kforge.core import AgentId, Hash256
from kforge.engine.models import Clock, SandboxState
from kforge.engine.sandbox import Sandbox

__all__ = ["Scheduler", "SliceRunner"]


class SliceRunner(Protocol):
    """What the scheduler needs from the engine."""

    async def run_slice(self, sandbox: Sandbox) -> None:
        """Run one slice of ``sandbox`` and settle its state (re-queueing it if still running)."""
        ...

    def deadline_passed(self, sandbox: Sandbox) -> None:
        """The sandbox's timer has run out: end its execution, or forget it."""
        ...


class Scheduler:
    """Round-robin slices over the owners' run queues, plus the timer heap."""

    def __init__(self, runner: SliceRunner, clock: Clock) -> None:
        self._runner = runner
        self._clock = clock
        #: The ring of owners with runnable sandboxes, each with its queue, next owner first.
        self._owners: OrderedDict[AgentId, deque[Sandbox]] = OrderedDict()
        self._length = 0
        self._queued: set[Hash256] = set()
        #: Exact timers: (deadline, order, sandbox), valid while ``sandbox.timer`` is that
        #: deadline (the same object).
        self._deadlines: list[tuple[float, int, Sandbox]] = []
        #: Coarse timers: the sandboxes whose timer runs out at each whole second, valid
        #: while ``sandbox.timer`` is that second's list; and the seconds, as a heap.
        self._seconds: dict[int, list[Sandbox]] = {}
        self._second_heap: list[int] = []
        self._order = itertools.count()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self.slices = 0

    def __len__(self) -> int:
        """Sandboxes waiting in the run queues."""
        return self._length

    def enqueue(self, sandbox: Sandbox) -> None:
        """Put a runnable sandbox at the back of its owner's queue (once); an owner new to
        the ring goes to its back."""
        if sandbox.id not in self._queued:
            self._queued.add(sandbox.id)
            queue = self._owners.get(sandbox.owner)
            if queue is None:
                queue = self._owners[sandbox.owner] = deque()
            queue.append(sandbox)
            self._length += 1
            self._wakeup.set()

    def _next(self) -> Sandbox:
        """The first sandbox of the owner at the front of the ring; the owner moves to the back."""
        owner, queue = next(iter(self._owners.items()))
        sandbox = queue.popleft()
        self._length -= 1
        del self._owners[owner]
        if queue:
            self._owners[owner] = queue
        self._queued.discard(sandbox.id)
        return sandbox

    def watch_deadline(self, sandbox: Sandbox, deadline: float, *, coarse: bool = False) -> None:
        """Tell the engine at ``deadline`` (the clock's ``monotonic`` time) that the sandbox's
        timer ran out; replaces the sandbox's earlier timer.  ``coarse``: at the first
        whole second at or after it."""
        if coarse:
            second = math.ceil(deadline)
            bucket = self._seconds.get(second)
            if bucket is None:
                bucket = self._seconds[second] = []
                heapq.heappush(self._second_heap, second)
            bucket.append(sandbox)
            sandbox.timer = bucket
        else:
            sandbox.timer = deadline
            heapq.heappush(self._deadlines, (deadline, next(self._order), sandbox))
        self._wakeup.set()

    def forget_deadline(self, sandbox: Sandbox) -> None:
        """The sandbox has no timer any more (a service, or a sandbox forgotten)."""
        sandbox.timer = None

    def poke(self) -> None:
        """Make an idle scheduler look at its deadlines again (after moving an injected clock)."""
        self._wakeup.set()

    def expire_deadlines(self) -> list[Sandbox]:
        """Tell the engine of every timer that ran out at or before now, earliest first;
        returns their sandboxes."""
        now = self._clock.monotonic()
        expired = []
        for sandbox, mark in self._due(now):
            if sandbox.timer is not mark:
                continue  # stale: replaced, or forgotten
            sandbox.timer = None
            self._runner.deadline_passed(sandbox)
            expired.append(sandbox)
        return expired

    def _due(self, now: float) -> Iterator[tuple[Sandbox, object]]:
        """Every timer entry at or before ``now``, earliest first, taken off as it goes, with
        the mark a live one still has on its sandbox."""
        while True:
            exact = self._deadlines[0][0] if self._deadlines else math.inf
            coarse = self._second_heap[0] if self._second_heap else math.inf
            if min(exact, coarse) > now:
                return
            if coarse <= exact:
                bucket = self._seconds.pop(heapq.heappop(self._second_heap))
                for sandbox in bucket:
                    yield sandbox, bucket
            else:
                deadline, _, sandbox = heapq.heappop(self._deadlines)
                yield sandbox, deadline

    def _idle_timeout(self) -> float | None:
        while self._deadlines:
            deadline, _, sandbox = self._deadlines[0]
            if sandbox.timer is deadline:
                break
            heapq.heappop(self._deadlines)  # stale: replaced, or forgotten
        times = [self._deadlines[0][0]] if self._deadlines else []
        if self._second_heap:
            times.append(self._second_heap[0])
        if not times:
            return None
        return max(0.0, min(times) - self._clock.monotonic())

    async def run(self) -> None:
        """The scheduling loop; returns after :meth:`stop`."""
        while not self._stopping:
            self.expire_deadlines()
            if not self._owners:
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self._idle_timeout())
                continue
            sandbox = self._next()
            if sandbox.state is not SandboxState.RUNNING or not sandbox.scheduled:
                continue
            await self._runner.run_slice(sandbox)
            self.slices += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
