"""``kforge worker --nats URL``: a process that runs the partitions its leases give it.

Every quarter of the lease time the worker writes its heartbeat (``kforge_workers``:
its partitions and their load), renews its leases, works out the placement from
the live workers (:func:`kforge.cluster.leases.assignment`), takes the partitions
placed on it whose leases are free or expired (rebuilding each from its journal),
and hands over those placed on another live worker.  A partition whose lease it
cannot renew it abandons at once.

On SIGTERM (or Ctrl-C) the worker *drains*: it says so in its heartbeat (so it
gets nothing new), hands over every partition (snapshot, last batch written,
lease released: the next worker need not wait for it to expire) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TextIO

from nats.aio.client import Client as Nats
from nats.js.kv import KV_DEL, KV_PURGE

from kforge.accounting import OPEN_ACCOUNTS, Opening
from kforge.cluster import names
from kforge.cluster.accounts import AccountsBucket, StoredAccount
from kforge.cluster.connection import Layout, connect, learn_operators, open_layout
from kforge.cluster.leases import (
    LeaseBook,
    PartitionLoad,
    WorkerRecord,
    assignment,
    live_workers,
)
from kforge.cluster.partition import Partition, PartitionSettings
from kforge.core import AgentId
from kforge.engine import EngineLimits
from kforge.engine.engine import compiling_in
from kforge.engine.offload import Offload
from kforge.tiers import TierRunner
from kforge.wire import decode_msgpack, encode_msgpack

__all__ = ["Worker", "WorkerConfig"]


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker runs.  ``lease_seconds``: how long a dead worker's partitions wait."""

    url: str
    worker_id: str = ""
    lease_seconds: float = 3.0
    tier: str = "auto"
    limits: EngineLimits = field(default_factory=EngineLimits)
    opening: Opening = OPEN_ACCOUNTS
    snapshot_every: int = 1000
    partitions: int = 16


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker:
    """One worker process (see the module's description)."""

    def __init__(self, config: WorkerConfig, *, out: TextIO | None = None) -> None:
        self.config = config
        self.id = config.worker_id or f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self.out = out if out is not None else sys.stderr
        self.partitions: dict[int, Partition] = {}
        self._taking: dict[int, asyncio.Task[None]] = {}
        self._accounts: dict[AgentId, tuple[StoredAccount, int]] = {}
        #: The cluster's operators (``kforge_cluster``'s ``operator.*`` keys, which each
        #: gateway writes for its dashboard agent): every partition's policy knows them.
        self.operators: set[AgentId] = set()
        self._settings = PartitionSettings(
            limits=config.limits,
            opening=config.opening,
            snapshot_every=config.snapshot_every,
            write_timeout=config.lease_seconds,
        )
        self.started_ms = _now_ms()
        #: When this worker last renewed its leases.
        self._last_renewed = self.started_ms
        self.draining = False
        self._lost: set[int] = set()
        self.nc: Nats | None = None
        self.layout: Layout | None = None
        self._wake = asyncio.Event()
        self._followers: list[asyncio.Task[None]] = []
        #: When the last heartbeat was written, and each partition's ticks then.
        self._last_beat: tuple[float, dict[int, int]] = (time.monotonic(), {})

    def say(self, line: str) -> None:
        with contextlib.suppress(Exception):
            self.out.write(f"kforge worker {self.id}: {line}\n")
            self.out.flush()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain and return."""
        config = self.config
        self.nc = await connect(config.url, name=f"kforge-worker-{self.id}", who="kforge worker")
        try:
            self.layout = layout = await open_layout(self.nc, config.partitions)
            accounts = AccountsBucket(layout.accounts, config.opening)
            watcher = await accounts.watch(self._absorb)
            # Compiles for the fast tier run in worker processes under the time limit, as
            # an engine's own tier's do (the partitions share this runner).
            offload = Offload()
            runner = TierRunner(config.tier, builder=compiling_in(offload))
            leases = LeaseBook(layout.leases, self.id, config.lease_seconds)
            followers = await self._follow_placement(layout)
            followers.append(await self._follow_operators(layout))
            self.say(f"serving {layout.partitions} partitions' worth of leases on {config.url}")
            try:
                while not stop.is_set():
                    self._wake.clear()
                    next_round_ms = await self._tick(layout, leases, runner, accounts)
                    pause = min(config.lease_seconds / 4, (next_round_ms - _now_ms()) / 1000)
                    await _first_of(stop, self._wake, timeout=max(0.01, pause))
                await self._drain(layout, leases)
            finally:
                for follower in [watcher, *followers]:
                    with contextlib.suppress(Exception):
                        await follower.stop()
                runner.close()
                offload.close()
        finally:
            with contextlib.suppress(Exception):
                await self.nc.drain()

    async def _follow_placement(self, layout: Layout) -> list[Any]:
        """Start the next round at once when a lease is let go (a drain, a hand-over) or a
        worker comes, goes or drains, instead of at the next quarter of the lease time."""
        leases = await layout.leases.watchall()
        workers = await layout.workers.watchall()
        loop = asyncio.get_running_loop()
        self._followers = [
            loop.create_task(_wake_on_releases(leases, self._wake)),
            loop.create_task(_wake_on_crew_changes(workers, self._wake)),
        ]
        return [leases, workers]

    async def _follow_operators(self, layout: Layout) -> Any:
        watcher = await layout.cluster.watch(names.OPERATORS_KEYS)
        self._followers.append(asyncio.get_running_loop().create_task(self._learn(watcher)))
        return watcher

    async def _learn(self, watcher: Any) -> None:
        await learn_operators(watcher, self._add_operator)

    def _add_operator(self, agent: AgentId) -> None:
        self.operators.add(agent)
        for partition in list(self.partitions.values()):
            partition.engine.policy.add_operator(agent)

    def _absorb(self, agent: AgentId, stored: StoredAccount, revision: int) -> None:
        known = self._accounts.get(agent)
        if known is None or known[1] <= revision:
            self._accounts[agent] = (stored, revision)
        for partition in self.partitions.values():
            partition.ledger.absorb(agent, stored, revision)

    # ------------------------------------------------------------------ one round

    async def _tick(
        self, layout: Layout, leases: LeaseBook, runner: TierRunner, accounts: AccountsBucket
    ) -> int:
        """One round; returns when the next must come at the latest (milliseconds): when a
        worker that stopped beating counts as gone, or a lease this worker wants runs out,
        so that a dead worker's partitions move the moment its lease allows."""
        now = _now_ms()
        lease_ms = int(self.config.lease_seconds * 1000)
        next_round_ms = now + lease_ms
        try:
            await self._heartbeat(layout)
            keeping = [number for number in leases.held if number not in self._lost]
            renewed = await asyncio.gather(*(leases.renew(number, now) for number in keeping))
            kept = {number for number, ok in zip(keeping, renewed, strict=True) if ok}
            for number in list(leases.held):
                if number not in kept:
                    await self._abandon(number, leases, "its lease is another worker's")
            crew = await live_workers(layout)
        except Exception as error:  # NATS away: the leases run out by themselves
            self._check_expiry(leases)
            self.say(f"cannot reach the cluster's state ({type(error).__name__}); retrying")
            return next_round_ms
        self._last_renewed = now
        active = [worker for worker, record in crew.items() if not record.draining]
        plan = assignment(layout.partitions, [*active, self.id])
        for number in range(layout.partitions):
            wanted = plan.get(number) == self.id
            held = number in leases.held
            if wanted and not held and number not in self._taking:
                if await leases.acquire(number, now):
                    self._taking[number] = asyncio.get_running_loop().create_task(
                        self._take(number, layout, leases, runner, accounts)
                    )
            elif held and not wanted and plan.get(number) in active and number in self.partitions:
                await self._hand_over(number, leases)
        gone_at = [
            record.heartbeat_ms + record.lease_ms
            for worker, record in crew.items()
            if worker != self.id
        ]
        free_at = [at for number, at in leases.refused_until.items() if plan.get(number) == self.id]
        return min([next_round_ms, *gone_at, *free_at]) + 1

    def _check_expiry(self, leases: LeaseBook) -> None:
        """Without NATS for a whole lease time, the partitions are another worker's by now."""
        if _now_ms() - self._last_renewed > self.config.lease_seconds * 1000:
            for number in list(self.partitions):
                self._lost.add(number)

    async def _take(
        self,
        number: int,
        layout: Layout,
        leases: LeaseBook,
        runner: TierRunner,
        accounts: AccountsBucket,
    ) -> None:
        started = time.monotonic()
        try:
            partition = await Partition.take(
                layout,
                number,
                runner,
                accounts,
                self._accounts,
                self._settings,
                partial(self._on_lost, number),
            )
        except Exception as error:
            self.say(f"could not take partition {number}: {type(error).__name__}: {error}")
            await leases.release(number)
            return
        finally:
            self._taking.pop(number, None)
        for agent in self.operators:  # those named while it was being taken
            partition.engine.policy.add_operator(agent)
        self.partitions[number] = partition
        with contextlib.suppress(Exception):  # the status shows it now, not a round later
            await self._heartbeat(layout)
        self.say(
            f"took partition {number} ({partition.engine.rebuilt_records} records, "
            f"{partition.live_sandboxes} live sandboxes) in {time.monotonic() - started:.2f} s"
        )

    def _on_lost(self, number: int, reason: str) -> None:
        self.say(f"lost partition {number}: {reason}")
        self._lost.add(number)

    async def _abandon(self, number: int, leases: LeaseBook, reason: str) -> None:
        partition = self.partitions.pop(number, None)
        leases.held.pop(number, None)
        self._lost.discard(number)
        if partition is not None:
            self.say(f"gave up partition {number}: {reason}")
            await partition.abandon()

    async def _hand_over(self, number: int, leases: LeaseBook) -> None:
        partition = self.partitions.pop(number, None)
        if partition is not None:
            await partition.hand_over()
        await leases.release(number)
        self.say(f"handed over partition {number}")

    async def _drain(self, layout: Layout, leases: LeaseBook) -> None:
        self.draining = True
        self.say("draining: handing over every partition")
        for task in list(self._taking.values()):
            with contextlib.suppress(Exception):
                await task
        with contextlib.suppress(Exception):
            await self._heartbeat(layout)
        for number in list(self.partitions):
            await self._hand_over(number, leases)
        with contextlib.suppress(Exception):
            await layout.workers.purge(self.id)
        self.say("drained")

    async def _heartbeat(self, layout: Layout) -> None:
        loads = tuple(
            PartitionLoad(
                number,
                partition.live_sandboxes,
                len(partition.engine.state.sandboxes),
                partition.engine.scheduler.slices,
                partition.meter.ticks,
                int(partition.taken_at * 1000),
            )
            for number, partition in sorted(self.partitions.items())
        )
        now = time.monotonic()
        ran = sum(load.ticks - self._last_beat[1].get(load.partition, 0) for load in loads)
        elapsed = now - self._last_beat[0]
        rate = int(max(0, ran) / elapsed) if elapsed > 0 else 0
        self._last_beat = (now, {load.partition: load.ticks for load in loads})
        record = WorkerRecord(
            worker=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_ms=self.started_ms,
            heartbeat_ms=_now_ms(),
            draining=self.draining,
            partitions=loads,
            lease_ms=int(self.config.lease_seconds * 1000),
            ticks_per_second=rate,
        )
        await layout.workers.put(self.id, encode_msgpack(record))

    def status(self) -> Mapping[int, Partition]:
        return dict(self.partitions)


async def _first_of(*events: asyncio.Event, timeout: float) -> None:
    """Return when one of ``events`` is set, or after ``timeout`` seconds."""
    waiting = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiting:
            task.cancel()


async def _wake_on_releases(watcher: Any, wake: asyncio.Event) -> None:
    with contextlib.suppress(Exception):
        async for entry in watcher:
            if entry is not None and entry.operation in (KV_DEL, KV_PURGE):
                wake.set()


async def _wake_on_crew_changes(watcher: Any, wake: asyncio.Event) -> None:
    """Wake on a worker's first heartbeat, its last (deleted), and a change of its
    draining flag; not on every heartbeat, which would wake every worker each round."""
    draining: dict[str, bool] = {}
    with contextlib.suppress(Exception):
        async for entry in watcher:
            if entry is None:
                continue
            if entry.operation in (KV_DEL, KV_PURGE):
                draining.pop(entry.key, None)
                wake.set()
                continue
            record = decode_msgpack(entry.value or b"", WorkerRecord, "worker")
            if draining.get(entry.key) != record.draining:
                draining[entry.key] = record.draining
                wake.set()
