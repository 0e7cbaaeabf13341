"""A partition's journal in the ``KFORGE_JOURNAL`` stream: the engine's
:class:`~kforge.engine.journal.JournalStore`, on JetStream.

The engine writes its journal synchronously, between two awaits; JetStream
answers over the network.  So the store works in two halves:

- **Reading** happens once, before the engine is built: :meth:`JetStreamJournalStore.load`
  fetches every message of the partition's subject (``kforge.journal.<p>``) and
  the latest snapshot (object store ``kforge_snapshots``), and serves the
  engine's reads (``rows``, ``row``, ``meta``, ``latest_snapshot``) from them.
- **Writing** is asynchronous and in order: ``append_rows`` adds to the *batch*
  being gathered, and a writer task publishes batches one at a time.  A request
  is answered only once the batch holding its records is stored (``settled``):
  that is the commit before an acknowledgement.  Batches gather whatever the
  engine recorded while the previous one was on its way (group commit).

One message is one batch: the rows of one or more commits (at most one message's
worth: a larger commit spans several messages, the last one saying it ends the
commit, and a reader drops a commit whose last part never came), with what must
be stored with them: the accounts' changes (:mod:`kforge.cluster.accounts`), the
replies of the requests they answer (so a request sent again after a failover is
answered, not done twice), named values (the engine's secret and start count)
and the mailbox envelopes they post.

**Fencing.**  Every publish names the stream sequence of the partition's previous
message (``Nats-Expected-Last-Subject-Sequence``).  A worker that lost the
partition without knowing it (paused past its lease, cut off) fails its next
write: JetStream refuses it, the store is *fenced*, and nothing it does after
that reaches the journal, the events, the accounts or the mailbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import nats.errors
from nats.js import api
from nats.js.errors import APIError, NotFoundError, ObjectNotFoundError

from kforge.cluster import names
from kforge.cluster.accounts import AccountChange
from kforge.cluster.connection import Layout
from kforge.core import AgentId, Hash256, StateCorrupted
from kforge.engine.journal import Row
from kforge.messages import Envelope
from kforge.wire import U64, Schema, decode_msgpack, encode_msgpack

__all__ = [
    "Batch",
    "JetStreamJournalStore",
    "PartitionLost",
    "Pending",
    "StoredMail",
]

#: JetStream's error code for a publish whose expected last sequence does not match.
_WRONG_LAST_SEQUENCE: Final = 10071
#: Room left in a message for its headers and envelope.
_MESSAGE_MARGIN: Final = 16 * 1024
#: A batch held open by a request for this long is written anyway.
_HOLD_SECONDS: Final = 0.1


class PartitionLost(Exception):
    """This worker no longer runs the partition (another took it, or the lease ran out)."""


class StoredRow(Schema, frozen=True, array_like=True):
    seq: U64
    time_ms: U64
    body: bytes
    link: bytes


class StoredReply(Schema, frozen=True, array_like=True):
    request: Hash256
    reply: bytes


class StoredMail(Schema, frozen=True, array_like=True):
    recipient: AgentId
    envelope: bytes


class StoredMeta(Schema, frozen=True, array_like=True):
    key: str
    value: bytes


class JournalMessage(Schema, frozen=True):
    """One message of ``kforge.journal.<p>`` (``docs/cluster.md``)."""

    rows: tuple[StoredRow, ...]
    #: The last row of the commit this message ends, or continues towards.
    final: U64
    meta: tuple[StoredMeta, ...] = ()
    accounts: tuple[AccountChange, ...] = ()
    replies: tuple[StoredReply, ...] = ()
    mail: tuple[StoredMail, ...] = ()


class SnapshotObject(Schema, frozen=True):
    """The latest snapshot of a partition (object ``partition-<p>`` in ``kforge_snapshots``)."""

    seq: U64
    body: bytes
    mac: bytes


@dataclass(eq=False)
class Batch:
    """What one write stores: rows and what travels with them."""

    rows: list[Row] = field(default_factory=list)
    meta: list[StoredMeta] = field(default_factory=list)
    accounts: tuple[AccountChange, ...] = ()
    replies: list[StoredReply] = field(default_factory=list)
    mail: list[StoredMail] = field(default_factory=list)
    #: Requests under way whose records go into this batch.
    open: int = 0
    opened_at: float = 0.0
    settled: asyncio.Future[None] | None = None

    @property
    def empty(self) -> bool:
        return not (self.rows or self.meta or self.replies or self.mail)

    @property
    def final(self) -> int:
        return self.rows[-1].seq if self.rows else 0


@dataclass(frozen=True, slots=True)
class Pending:
    """A request's place in the batch being gathered (see :meth:`JetStreamJournalStore.begin`)."""

    batch: Batch


#: Called in order with each stored batch, before the requests it answers are told.
AfterStored = Callable[[Batch], Awaitable[None]]
#: Called before each write (e.g. to store the programs its records name first).
BeforeWrite = Callable[[], Awaitable[None]]


class JetStreamJournalStore:
    """One partition's journal (see the module's description)."""

    def __init__(
        self,
        layout: Layout,
        partition: int,
        *,
        rows: list[Row],
        meta: dict[str, bytes],
        replies: dict[Hash256, bytes],
        accounts: list[tuple[int, tuple[AccountChange, ...]]],
        mail: list[tuple[int, StoredMail]],
        snapshot: tuple[int, bytes, bytes] | None,
        last_stream_seq: int,
        write_timeout: float,
    ) -> None:
        self.layout = layout
        self.partition = partition
        self.subject = names.journal_subject(partition)
        self._rows = rows
        self._last: Row | None = rows[-1] if rows else None
        self._meta = meta
        #: The replies of the requests the journal answers (loaded; taken by the partition).
        self.replies = replies
        #: The accounts' changes of every stored batch, by its last row (loaded).
        self.account_batches = accounts
        #: The mailbox envelopes of every stored batch, with its time (loaded).
        self.mail = mail
        self._snapshot = snapshot
        self._last_stream_seq = last_stream_seq
        self._write_timeout = write_timeout
        self._gathering = Batch()
        self._writing: Batch | None = None
        #: The last row stored in the stream.
        self._stored_row = self._last.seq if self._last is not None else 0
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._snapshots: asyncio.Task[None] | None = None
        self._snapshot_due: SnapshotObject | None = None
        #: The accounts' changes to store with the batch ending at the given row.
        self.take_accounts: Callable[[int], tuple[AccountChange, ...]] = lambda row: ()
        self.after_stored: AfterStored | None = None
        self.before_write: BeforeWrite | None = None
        self.on_lost: Callable[[str], None] | None = None
        self.lost: str | None = None
        self.closed = False
        self.batches_written = 0

    # ------------------------------------------------------------------ loading

    @classmethod
    async def load(
        cls, layout: Layout, partition: int, *, write_timeout: float = 10.0
    ) -> JetStreamJournalStore:
        """Read the partition's journal and latest snapshot (every message up to the last)."""
        subject = names.journal_subject(partition)
        js = layout.js
        try:
            last = (await js.get_last_msg(names.JOURNAL_STREAM, subject)).seq or 0
        except NotFoundError:
            last = 0
        reader = _Reader(partition)
        if last:
            subscription = await js.pull_subscribe(
                subject,
                stream=names.JOURNAL_STREAM,
                config=api.ConsumerConfig(
                    ack_policy=api.AckPolicy.NONE,
                    deliver_policy=api.DeliverPolicy.ALL,
                    inactive_threshold=30.0,
                    mem_storage=True,
                ),
            )
            try:
                seen = 0
                while seen < last:
                    with contextlib.suppress(nats.errors.TimeoutError):
                        for message in await subscription.fetch(256, timeout=5):
                            metadata = message.metadata
                            seen = metadata.sequence.stream
                            reader.take(message.data, seen)
            finally:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
        rows = reader.rows()
        snapshot: tuple[int, bytes, bytes] | None = None
        try:
            stored = await layout.snapshots.get(names.snapshot_name(partition))
            found = decode_msgpack(stored.data or b"", SnapshotObject, "snapshot")
            if rows and found.seq <= rows[-1].seq:
                snapshot = (found.seq, found.body, found.mac)
        except ObjectNotFoundError:
            pass
        return cls(
            layout,
            partition,
            rows=rows,
            meta=reader.meta,
            replies=reader.replies,
            accounts=reader.accounts,
            mail=reader.mail,
            snapshot=snapshot,
            last_stream_seq=last,
            write_timeout=write_timeout,
        )

    def forget_history(self) -> None:
        """Drop the rows read at load (the engine has rebuilt from them)."""
        self._rows = []

    # ------------------------------------------------------------------ JournalStore: reading

    def meta(self, key: str) -> bytes | None:
        return self._meta.get(key)

    def rows(self, after: int = 0) -> Iterator[Row]:
        return iter([row for row in self._rows if row.seq > after])

    def last_row(self) -> Row | None:
        return self._last

    def row(self, seq: int) -> Row | None:
        return next((row for row in self._rows if row.seq == seq), None)

    def latest_snapshot(self) -> tuple[int, bytes, bytes] | None:
        return self._snapshot

    # ------------------------------------------------------------------ JournalStore: writing

    def set_meta(self, key: str, value: bytes) -> None:
        self._meta[key] = value
        self._gathering.meta.append(StoredMeta(key, value))
        self._wake.set()

    def append_rows(self, rows: Sequence[Row]) -> None:
        if self.lost is not None:
            return  # fenced: nothing reaches the journal any more
        self._gathering.rows.extend(rows)
        self._last = rows[-1] if rows else self._last
        self._wake.set()

    def save_snapshot(self, seq: int, body: bytes, mac: bytes) -> None:
        """Upload after the rows it includes are stored (only the latest is kept)."""
        self._snapshot = (seq, body, mac)
        self._snapshot_due = SnapshotObject(seq, body, mac)
        self._wake.set()

    def close(self) -> None:
        """The engine is done with the store (:meth:`drain` writes what it left)."""
        self.closed = True

    # ------------------------------------------------------------------ requests

    def begin(self) -> Pending:
        """A request starts: the batch gathering now holds its records and waits for its reply."""
        batch = self._gathering
        if batch.open == 0:
            batch.opened_at = time.monotonic()
        batch.open += 1
        return Pending(batch)

    def finish(self, pending: Pending, request: Hash256 | None, reply: bytes) -> Batch:
        """The request's reply is known: keep it with its records; returns the batch to await."""
        batch = pending.batch
        batch.open -= 1
        if batch is not self._gathering:  # written already (held too long): the next one
            batch = self._gathering
        if request is not None and not batch.empty:
            batch.replies.append(StoredReply(request, reply))
        self._wake.set()
        return batch

    def post_mail(self, recipient: AgentId, envelope: Envelope) -> None:
        """An envelope for ``recipient``'s mailbox, sent once the batch gathering now is stored."""
        if self.lost is None:
            self._gathering.mail.append(StoredMail(recipient, envelope.encode()))
            self._wake.set()

    async def settled(self, batch: Batch) -> None:
        """Wait until ``batch`` is stored and what follows from it done; ``PartitionLost``."""
        if self.lost is not None:
            raise PartitionLost(self.lost)
        if batch.empty:
            return
        if batch.settled is None:
            batch.settled = asyncio.get_running_loop().create_future()
        await asyncio.shield(batch.settled)

    # ------------------------------------------------------------------ the writer

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    async def drain(self) -> None:
        """Write everything gathered, then stop (the partition is handed over)."""
        self.closed = True
        self._wake.set()
        if self._writer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._start_snapshot_upload()
        if self._snapshots is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._snapshots

    async def stop(self) -> None:
        """Stop at once, writing nothing more (the partition is lost)."""
        self.closed = True
        for task in (self._writer, self._snapshots):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def _lose(self, reason: str) -> None:
        if self.lost is None:
            self.lost = reason
            if self.on_lost is not None:
                self.on_lost(reason)

    async def _write_loop(self) -> None:
        try:
            while True:
                batch = self._gathering
                if batch.empty:
                    if self.closed:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if batch.open and time.monotonic() - batch.opened_at < _HOLD_SECONDS:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), _HOLD_SECONDS)
                    continue
                self._gathering = Batch()
                self._writing = batch
                if batch.rows:  # changes travel with rows: their row numbers the change
                    batch.accounts = self.take_accounts(batch.final)
                await self._write(batch)
                self._stored_row = max(self._stored_row, batch.final)
                if self.after_stored is not None:
                    await self.after_stored(batch)
                self.batches_written += 1
                if batch.settled is None:
                    batch.settled = asyncio.get_running_loop().create_future()
                batch.settled.set_result(None)
                self._writing = None
                self._start_snapshot_upload()
        except asyncio.CancelledError:
            self._fail_waiters(PartitionLost("the partition was stopped"))
            raise
        except Exception as error:  # PartitionLost, or a failure nothing else expected
            reason = str(error) if isinstance(error, PartitionLost) else repr(error)
            self._lose(reason)
            self._fail_waiters(PartitionLost(self.lost or reason))

    def _fail_waiters(self, error: PartitionLost) -> None:
        for batch in (self._writing, self._gathering):
            if batch is None:
                continue
            if batch.settled is None:
                batch.settled = asyncio.get_running_loop().create_future()
            if not batch.settled.done():
                batch.settled.set_exception(error)
                batch.settled.exception()  # marked as seen: a batch nobody awaits is not an error

    async def _write(self, batch: Batch) -> None:
        if self.before_write is not None:
            await self.before_write()
        for body in _messages(batch, self.layout.nc.max_payload - _MESSAGE_MARGIN):
            await self._publish(body, batch)

    async def _publish(self, body: bytes, batch: Batch) -> None:
        started = time.monotonic()
        delay = 0.05
        while True:
            if self.lost is not None:
                raise PartitionLost(self.lost)
            headers = {
                api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(self._last_stream_seq),
            }
            try:
                ack = await self.layout.js.publish(self.subject, body, timeout=2.0, headers=headers)
            except APIError as error:
                if error.err_code == _WRONG_LAST_SEQUENCE:
                    self._lose("another worker wrote its journal")
                    raise PartitionLost(self.lost or "") from None
                reason = str(error)
            except (TimeoutError, nats.errors.Error, OSError) as error:
                reason = str(error) or type(error).__name__
            else:
                self._last_stream_seq = ack.seq
                return
            if time.monotonic() - started > self._write_timeout:
                self._lose(
                    f"its journal could not be written for {self._write_timeout:.0f} s ({reason})"
                )
                raise PartitionLost(self.lost or "")
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)

    def _start_snapshot_upload(self) -> None:
        due = self._snapshot_due
        if due is None or (self._snapshots is not None and not self._snapshots.done()):
            return
        if due.seq > self._stored_row:
            return  # its rows are not all stored yet
        self._snapshot_due = None
        self._snapshots = asyncio.get_running_loop().create_task(self._upload(due))

    async def _upload(self, snapshot: SnapshotObject) -> None:
        with contextlib.suppress(Exception):
            await self.layout.snapshots.put(
                names.snapshot_name(self.partition), encode_msgpack(snapshot)
            )


def _messages(batch: Batch, limit: int) -> list[bytes]:
    """The messages of ``batch``: one, or the rows spread over several when too large
    (what travels with the rows goes with the last)."""
    rows = tuple(StoredRow(row.seq, row.time_ms, row.body, row.link) for row in batch.rows)
    whole = JournalMessage(
        rows,
        batch.final,
        tuple(batch.meta),
        batch.accounts,
        tuple(batch.replies),
        tuple(batch.mail),
    )
    encoded = encode_msgpack(whole)
    if len(encoded) <= limit or len(rows) <= 1:
        return [encoded]
    parts: list[bytes] = []
    chunk: list[StoredRow] = []
    size = 0
    for row in rows:
        weight = len(row.body) + len(row.link) + 32
        if chunk and size + weight > limit:
            parts.append(encode_msgpack(JournalMessage(tuple(chunk), batch.final)))
            chunk, size = [], 0
        chunk.append(row)
        size += weight
    parts.append(
        encode_msgpack(
            JournalMessage(
                tuple(chunk),
                batch.final,
                tuple(batch.meta),
                batch.accounts,
                tuple(batch.replies),
                tuple(batch.mail),
            )
        )
    )
    return parts


class _Reader:
    """Messages in, the journal out: rows of whole commits, values, replies, changes."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self._rows: list[Row] = []
        self._partial: list[JournalMessage] = []
        self.meta: dict[str, bytes] = {}
        self.replies: dict[Hash256, bytes] = {}
        self.accounts: list[tuple[int, tuple[AccountChange, ...]]] = []
        #: Each envelope with the time of the commit that posted it.
        self.mail: list[tuple[int, StoredMail]] = []

    def take(self, data: bytes, stream_seq: int) -> None:
        try:
            message = decode_msgpack(data, JournalMessage, "journal message")
        except Exception as error:
            raise StateCorrupted(
                f"journal of partition {self.partition}, stream message {stream_seq}",
                f"it does not decode ({error})",
            ) from None
        first = message.rows[0].seq if message.rows else None
        expected = self._next_seq()
        if first is not None and first != expected:
            # a commit whose last part never came, and a new writer went on from before it
            self._partial.clear()
            expected = self._next_seq()
        self._partial.append(message)
        last = message.rows[-1].seq if message.rows else message.final
        if last < message.final:
            return
        for part in self._partial:
            self._rows.extend(Row(r.seq, r.time_ms, r.body, r.link) for r in part.rows)
        self._partial.clear()
        for value in message.meta:
            self.meta[value.key] = value.value
        for reply in message.replies:
            self.replies[reply.request] = reply.reply
        if message.accounts:
            self.accounts.append((message.final, message.accounts))
        at_ms = self._rows[-1].time_ms if self._rows else 0
        self.mail.extend((at_ms, mail) for mail in message.mail)

    def _next_seq(self) -> int:
        done = self._rows[-1].seq if self._rows else 0
        return done + sum(len(part.rows) for part in self._partial) + 1

    def rows(self) -> list[Row]:
        return self._rows
