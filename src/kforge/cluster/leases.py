"""Leases and placement: which worker runs which partition.

A partition is run by the worker holding its lease: key ``partition.<p>`` in
``kforge_leases``, ``{worker, expires_ms}``.  The holder renews it every quarter
of the lease time by an update naming the revision it holds; a worker takes a
partition only when the key is missing (released) or has expired, again by an
update naming the revision it read, so two workers never both win.  A lease
that cannot be renewed (someone else holds it, or NATS has not answered for the
whole lease time) is given up at once: the engine stops without writing, and
its journal is fenced anyway (:mod:`kforge.cluster.journal_store`).

Placement: :func:`assignment` maps each partition to one of the live workers
(those whose heartbeat in ``kforge_workers`` is younger than the lease time),
balanced to within one partition, each partition going to the worker that
ranks it highest by a hash of both (rendezvous hashing) among those with room.
Every worker computes the same map from the same set of workers; a worker takes
the partitions the map gives it as their leases come free, and hands over the
ones it holds that the map gives to another live worker.  When a worker joins or
leaves, few partitions move.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Iterable

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from kforge.cluster import names
from kforge.cluster.connection import Layout
from kforge.wire import U16, U32, U64, Schema, decode_msgpack, encode_msgpack

__all__ = [
    "Lease",
    "LeaseBook",
    "PartitionLoad",
    "WorkerRecord",
    "assignment",
    "lease_holders",
    "live_workers",
]


class Lease(Schema, frozen=True):
    worker: str
    expires_ms: U64


class PartitionLoad(Schema, frozen=True):
    """One partition a worker runs, as ``kforge cluster status`` shows it."""

    partition: U16
    live: U32
    sandboxes: U32
    slices: U64
    #: Ticks its machines ran since the worker took it.
    ticks: U64
    taken_ms: U64


class WorkerRecord(Schema, frozen=True):
    """A worker's heartbeat (``kforge_workers``, key: the worker's id)."""

    worker: str
    host: str
    pid: U32
    started_ms: U64
    heartbeat_ms: U64
    draining: bool
    partitions: tuple[PartitionLoad, ...]
    #: The worker's lease time: a heartbeat older than this is a dead worker's.
    lease_ms: U64
    #: Ticks run per second since the worker's previous heartbeat: its load.
    ticks_per_second: U64 = 0


def _rank(worker: str, partition: int) -> bytes:
    return hashlib.sha256(f"kforge/lease/v1\0{worker}\0{partition}".encode()).digest()


def assignment(partitions: int, workers: Iterable[str]) -> dict[int, str]:
    """Each partition's worker: balanced (at most one apart), rendezvous-ranked, the same
    for everyone who knows the same workers."""
    crew = sorted(set(workers))
    if not crew:
        return {}
    share, extra = divmod(partitions, len(crew))  # ``extra`` workers run one more
    load = dict.fromkeys(crew, 0)
    placed: dict[int, str] = {}
    for partition in range(partitions):
        for worker in sorted(crew, key=lambda w: _rank(w, partition), reverse=True):
            if load[worker] < share or (load[worker] == share and extra > 0):
                if load[worker] == share:
                    extra -= 1
                placed[partition] = worker
                load[worker] += 1
                break
    return placed


async def lease_holders(layout: Layout) -> dict[int, str | None]:
    """Each partition's worker by its unexpired lease (``None``: nobody holds it)."""
    book = LeaseBook(layout.leases, "", 0.0)
    now = time.time_ns() // 1_000_000
    return {partition: await book.holder(partition, now) for partition in range(layout.partitions)}


class LeaseBook:
    """One worker's side of ``kforge_leases``."""

    def __init__(self, bucket: KeyValue, worker: str, seconds: float) -> None:
        self.bucket = bucket
        self.worker = worker
        self.seconds = seconds
        #: The revision of each lease this worker holds.
        self.held: dict[int, int] = {}
        #: When the other worker's lease runs out, for each partition :meth:`acquire` could
        #: not take (the worker tries again then, not a round later).
        self.refused_until: dict[int, int] = {}

    def _lease(self, now_ms: int) -> bytes:
        return encode_msgpack(Lease(self.worker, now_ms + int(self.seconds * 1000)))

    async def holder(self, partition: int, now_ms: int) -> str | None:
        """Who holds the partition now (``None``: nobody, or an expired lease)."""
        try:
            entry = await self.bucket.get(names.lease_key(partition))
        except KeyNotFoundError:
            return None
        lease = decode_msgpack(entry.value or b"", Lease, "lease")
        return lease.worker if lease.expires_ms >= now_ms else None

    async def acquire(self, partition: int, now_ms: int) -> bool:
        """Take the partition's lease if it is free or expired."""
        key = names.lease_key(partition)
        try:
            try:
                entry = await self.bucket.get(key)
            except KeyNotFoundError:
                revision = await self.bucket.create(key, self._lease(now_ms))
            else:
                lease = decode_msgpack(entry.value or b"", Lease, "lease")
                if lease.worker != self.worker and lease.expires_ms >= now_ms:
                    self.refused_until[partition] = lease.expires_ms
                    return False
                revision = await self.bucket.update(key, self._lease(now_ms), last=entry.revision)
        except KeyWrongLastSequenceError:
            return False
        self.refused_until.pop(partition, None)
        self.held[partition] = revision
        return True

    async def renew(self, partition: int, now_ms: int) -> bool:
        """Extend a held lease; false when it is no longer this worker's."""
        revision = self.held.get(partition)
        if revision is None:
            return False
        try:
            self.held[partition] = await self.bucket.update(
                names.lease_key(partition), self._lease(now_ms), last=revision
            )
        except KeyWrongLastSequenceError:
            self.held.pop(partition, None)
            return False
        return True

    async def release(self, partition: int) -> None:
        """Let the partition go (after handing it over), so the next worker need not wait."""
        revision = self.held.pop(partition, None)
        if revision is not None:
            with contextlib.suppress(KeyWrongLastSequenceError):
                await self.bucket.delete(names.lease_key(partition), last=revision)


async def live_workers(layout: Layout) -> dict[str, WorkerRecord]:
    """The workers whose heartbeat is younger than their lease time (draining ones too)."""
    found: dict[str, WorkerRecord] = {}
    try:
        keys = await layout.workers.keys()
    except Exception:  # nats' NoKeysError: an empty bucket
        return found
    entries = await asyncio.gather(
        *(layout.workers.get(key) for key in keys), return_exceptions=True
    )
    now = time.time_ns() // 1_000_000
    for entry in entries:
        if isinstance(entry, KeyNotFoundError):
            continue  # gone since the keys were listed
        if isinstance(entry, BaseException):
            raise entry
        record = decode_msgpack(entry.value or b"", WorkerRecord, "worker")
        if now - record.heartbeat_ms <= record.lease_ms:
            found[record.worker] = record
    return found
