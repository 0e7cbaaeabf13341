"""Reaching NATS: connecting (and waiting, with a clear message, while it cannot be
reached), and the cluster's streams, buckets and object stores, made when missing.

:func:`connect` never prints a traceback: a server that is not there yet is one
line saying so and when the next attempt comes; once connected, the client
reconnects by itself and says so.  :func:`open_layout` makes (idempotently) and
opens everything ``docs/cluster.md`` lists, and reads the cluster's fixed
partition count from ``kforge_cluster.layout`` (written once, by whoever made
the cluster first).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TextIO

import nats
import nats.errors
from nats.aio.client import Client as Nats
from nats.js import JetStreamContext, api
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from nats.js.object_store import ObjectStore

from kforge.cluster import names
from kforge.core import AgentId
from kforge.messages.mailbox import MAX_MAILBOX_TOTAL_BYTES
from kforge.wire import U16, Schema, decode_msgpack, encode_msgpack

__all__ = [
    "DUPLICATE_WINDOW",
    "Layout",
    "NatsUnreachable",
    "NoCluster",
    "connect",
    "learn_operators",
    "open_layout",
    "shared_secret",
]

#: How long JetStream remembers a message id (events and mailbox envelopes are sent again
#: after a failover; the copies within this window are dropped).
DUPLICATE_WINDOW: Final = 120.0
#: Mailbox envelopes not taken within this long are dropped.
MAILBOX_AGE: Final = 3600.0
#: The envelopes one recipient's mailbox holds at most (as the embedded engine's).
MAILBOX_PER_RECIPIENT: Final = 1024
#: The bytes of events the events stream keeps at most (the oldest go first).
EVENTS_BYTES: Final = 1024 * 1024 * 1024
#: How long where a creation went is remembered (a creation sent again later than this
#: may be placed anew).
PLACEMENT_AGE: Final = 3600.0
#: How soon a connection that failed (or was lost) is tried again: a restarted server
#: is back within this.
_RETRY_SECONDS: Final = 0.25
#: How often a first connection that keeps failing is reported.
_REPORT_SECONDS: Final = 10.0


class NatsUnreachable(Exception):
    """NATS could not be reached within the time allowed (the message says where and why)."""


class NoCluster(Exception):
    """NATS answers, but no worker has made a kforge cluster there yet."""

    def __init__(self, url: str) -> None:
        super().__init__(f"no kforge cluster at {url} yet (no worker has started there)")
        self.url = url


class LayoutRecord(Schema, frozen=True):
    """``kforge_cluster.layout``: the facts every worker and gateway must agree on."""

    version: U16
    partitions: U16


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = str(error) or type(error).__name__
    return text.removeprefix("nats: ")


async def connect(
    url: str,
    *,
    name: str,
    who: str,
    out: TextIO | None = None,
    give_up_after: float | None = None,
    on_reconnect: Callable[[], None] | None = None,
) -> Nats:
    """A connection to the NATS server at ``url``, tried again until it answers.

    While it cannot be reached, one line on ``out`` (stderr by default), prefixed with
    ``who`` (``kforge worker``), says so at once and every ten seconds after;
    ``give_up_after`` seconds without success raise :class:`NatsUnreachable`.  Once
    connected the client reconnects for ever, saying when it lost the server and
    when it is back.
    """
    stream = out if out is not None else sys.stderr
    started = time.monotonic()
    connection: list[Nats] = []
    last_failure: list[BaseException] = []
    said_at: list[float] = []

    def say(line: str) -> None:
        with contextlib.suppress(Exception):
            stream.write(f"{who}: {line}\n")
            stream.flush()

    async def on_error(error: Exception) -> None:
        """Every failed attempt of the first connection arrives here (the client retries
        it by itself); later errors are told by the callbacks below."""
        if connection:
            return
        last_failure[:] = [error]
        now = time.monotonic()
        if not said_at or now - said_at[-1] >= _REPORT_SECONDS:
            said_at.append(now)
            say(
                f"NATS at {url} is not reachable ({_describe(error)}); "
                + (
                    f"retrying for up to {give_up_after:.0f} s"
                    if give_up_after is not None
                    else "retrying until it answers (Ctrl-C to stop)"
                )
            )

    async def disconnected() -> None:
        if connection and (connection[0].is_closed or connection[0].is_draining):
            return  # closed on purpose
        if connection:
            say(f"lost NATS at {url}; reconnecting")

    async def reconnected() -> None:
        say(f"reconnected to NATS at {url}")
        if on_reconnect is not None:
            on_reconnect()

    attempt = nats.connect(
        url,
        name=name,
        connect_timeout=2,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=_RETRY_SECONDS,
        error_cb=on_error,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
    )
    try:
        nc = await asyncio.wait_for(attempt, give_up_after)
    except TimeoutError:
        reason = _describe(last_failure[0]) if last_failure else "no answer"
        raise NatsUnreachable(
            f"NATS at {url} is not reachable ({reason}) after {time.monotonic() - started:.0f} s"
        ) from None
    connection.append(nc)
    return nc


@dataclass(eq=False)
class Layout:
    """The cluster's handles on one connection."""

    nc: Nats
    js: JetStreamContext
    partitions: int
    cluster: KeyValue
    leases: KeyValue
    workers: KeyValue
    directory: KeyValue
    accounts: KeyValue
    placements: KeyValue
    programs: ObjectStore
    snapshots: ObjectStore


async def _stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError:  # made by another process meanwhile, or already there
        assert config.name is not None
        await js.stream_info(config.name)


async def _bucket(js: JetStreamContext, bucket: str, ttl: float | None = None) -> KeyValue:
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        with contextlib.suppress(BadRequestError):
            return await js.create_key_value(api.KeyValueConfig(bucket=bucket, ttl=ttl))
        return await js.key_value(bucket)


async def _object_store(js: JetStreamContext, bucket: str) -> ObjectStore:
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        with contextlib.suppress(BadRequestError):
            return await js.create_object_store(bucket)
        return await js.object_store(bucket)


async def open_layout(nc: Nats, partitions: int | None = names.DEFAULT_PARTITIONS) -> Layout:
    """Make what is missing and open it all; ``partitions`` counts only for a new cluster.

    With ``partitions=None`` (a gateway, the status) no cluster is made: a NATS server
    where no worker has made one yet raises :class:`NoCluster`.
    """
    js = nc.jetstream(timeout=10)
    await _stream(
        js,
        api.StreamConfig(
            name=names.JOURNAL_STREAM,
            subjects=["kforge.journal.>"],
            storage=api.StorageType.FILE,
            max_msg_size=-1,
        ),
    )
    await _stream(
        js,
        api.StreamConfig(
            name=names.EVENTS_STREAM,
            subjects=["kforge.events.>"],
            storage=api.StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW,
            max_bytes=EVENTS_BYTES,
            discard=api.DiscardPolicy.OLD,
        ),
    )
    await _stream(
        js,
        api.StreamConfig(
            name=names.MAILBOX_STREAM,
            subjects=["kforge.mailbox.>"],
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.WORK_QUEUE,
            duplicate_window=DUPLICATE_WINDOW,
            max_age=MAILBOX_AGE,
            # The embedded engine's mailbox bounds, for the cluster's: envelopes per
            # recipient, and bytes in all (the oldest go first).
            max_msgs_per_subject=MAILBOX_PER_RECIPIENT,
            max_bytes=MAX_MAILBOX_TOTAL_BYTES,
            discard=api.DiscardPolicy.OLD,
        ),
    )
    cluster = await _bucket(js, names.CLUSTER_BUCKET)
    if partitions is not None:
        with contextlib.suppress(KeyWrongLastSequenceError):
            await cluster.create("layout", encode_msgpack(LayoutRecord(1, partitions)))
    try:
        entry = await cluster.get("layout")
    except KeyNotFoundError:
        raise NoCluster(nc.connected_url.geturl() if nc.connected_url else "NATS") from None
    stored = decode_msgpack(entry.value or b"", LayoutRecord, "layout")
    return Layout(
        nc=nc,
        js=js,
        partitions=stored.partitions,
        cluster=cluster,
        leases=await _bucket(js, names.LEASES_BUCKET),
        workers=await _bucket(js, names.WORKERS_BUCKET),
        directory=await _bucket(js, names.DIRECTORY_BUCKET),
        accounts=await _bucket(js, names.ACCOUNTS_BUCKET),
        placements=await _bucket(js, names.PLACEMENTS_BUCKET, ttl=PLACEMENT_AGE),
        programs=await _object_store(js, names.PROGRAMS_STORE),
        snapshots=await _object_store(js, names.SNAPSHOTS_STORE),
    )


async def shared_secret(layout: Layout, name: str) -> bytes:
    """A random secret the whole cluster shares (``kforge_cluster.<name>``), made once."""
    with contextlib.suppress(KeyWrongLastSequenceError):
        await layout.cluster.create(name, os.urandom(32))
    return (await layout.cluster.get(name)).value or b""


async def learn_operators(watcher: Any, add: Callable[[AgentId], None]) -> None:
    """Call ``add`` with every agent ``kforge_cluster`` names an operator (``operator.*``,
    each gateway's dashboard agent), now and as gateways come.  One named and gone stays
    an operator where it was learnt: its key lived only with its gateway."""
    with contextlib.suppress(Exception):
        async for entry in watcher:
            if entry is None or entry.operation in (KV_DEL, KV_PURGE):
                continue
            with contextlib.suppress(ValueError):
                add(AgentId.from_hex(entry.key.removeprefix("operator.")))
