"""One partition served by a worker: an :class:`~kforge.engine.Engine` on a JetStream
journal, answering its subjects.

Taking a partition over (:meth:`Partition.take`): read its journal and latest
snapshot, add to the shared accounts what the journal holds and they do not,
fetch the programs its records name, build the engine on the journal (the
engine rebuilds itself exactly as a durable engine does after a restart: same
records, same ``apply``), send again the events and directory entries of the
last minute (JetStream drops the copies), then subscribe to
``kforge.forge.<p>`` and ``kforge.engine.<p>``.

A request that changes the engine is answered once its records are stored
(:meth:`~kforge.cluster.journal_store.JetStreamJournalStore.settled`), and its
reply is stored with them: the same request id sent again, here or to the next
worker that takes the partition, gets the same reply.

After each stored batch, what follows from it: the directory entries of new
(and forgotten) sandboxes and services, the accounts' changes, the events
(derived from the records, exactly as the embedded engine derives them, each
with the message id ``<p>.<row>.<n>`` so that none is stored twice) and the
mailbox envelopes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from kforge.accounting import Opening
from kforge.cluster import names
from kforge.cluster.accounts import AccountChange, AccountsBucket, SharedLedger, StoredAccount
from kforge.cluster.connection import DUPLICATE_WINDOW, Layout
from kforge.cluster.journal_store import Batch, JetStreamJournalStore, PartitionLost, StoredMail
from kforge.cluster.programs import ObjectVault
from kforge.cluster.protocol import (
    MOVED,
    OUTPUT_PER_ANSWER,
    Answer,
    AnyCall,
    Authorize,
    Call,
    CallService,
    Create,
    CreateService,
    Deliver,
    DirectoryEntry,
    Forget,
    FundService,
    Grant,
    IoLog,
    Kill,
    Link,
    ListSandboxes,
    ListServices,
    Output,
    Prove,
    Revoke,
    RunRecordOf,
    ServiceInfoOf,
    Start,
    Status,
    Step,
    Visible,
    Wait,
    failure_of,
)
from kforge.core import AgentId, ForgeError, Hash256, InvalidRequest, MessageCode, NotSupported
from kforge.engine import Engine, EngineLimits, SandboxState
from kforge.engine.execution import LONE_SLICE_SECONDS
from kforge.engine.journal import Row
from kforge.engine.policy import Action
from kforge.engine.projection import events_of
from kforge.engine.records import (
    AnyRecord,
    Record,
    SandboxCreated,
    SandboxForgotten,
    ServiceCreated,
)
from kforge.events import Event
from kforge.messages import Envelope, ExtensionCode, Mailbox, decode_payload
from kforge.messages.payloads import CreateSandbox, LinkResolve
from kforge.tiers import TierRunner
from kforge.wire import decode_msgpack, encode_msgpack

__all__ = ["Partition", "PartitionSettings", "TickMeter"]

T = TypeVar("T")

#: Replies remembered per partition, in number and in bytes (a request sent again after
#: this many, or after this many bytes of newer replies, is done again): 8 MiB a
#: partition, 128 MiB for a worker holding all sixteen (proofs are the large replies).
_REMEMBERED_REPLIES: Final = 100_000
_REMEMBERED_REPLY_BYTES: Final = 8 << 20
#: Events and directory entries of the journal's rows younger than this are sent again
#: when a worker takes a partition over (within JetStream's duplicate window).
_RESEND_SECONDS: Final = DUPLICATE_WINDOW * 0.8
#: At most this many events are sent before their acknowledgements are awaited.
_EVENTS_IN_FLIGHT: Final = 512


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    """What every partition of a worker shares."""

    limits: EngineLimits
    opening: Opening
    snapshot_every: int = 1000
    write_timeout: float = 10.0
    max_wait_seconds: float = 60.0


class TickMeter:
    """The ticks a partition's machines ran since it was taken (its load, for the status)."""

    def __init__(self) -> None:
        self.ticks = 0
        self._seen: dict[Hash256, int] = {}

    def observe(self, sandbox: Hash256, state: SandboxState, ticks_used: int) -> None:
        """The engine's slice observer: ``ticks_used`` is the machine's count so far."""
        # A machine first seen here counts from 0: one rebuilt after a takeover counts
        # its earlier ticks once more, which a load figure can bear.
        self.ticks += ticks_used - self._seen.get(sandbox, 0)
        if state in (SandboxState.RUNNING, SandboxState.BLOCKED):
            self._seen[sandbox] = ticks_used
        else:
            self._seen.pop(sandbox, None)


class _JournalMailbox(Mailbox):
    """The engine's mailbox in a cluster: envelopes go out with the batch being gathered."""

    def __init__(self, store: JetStreamJournalStore) -> None:
        super().__init__()
        self._store = store

    def post(self, recipient: AgentId, envelope: Envelope) -> None:
        if len(envelope.payload) > self.max_bytes:  # as the embedded mailbox drops it
            self.count_dropped(recipient)
            return
        self._store.post_mail(recipient, envelope)


def _envelope_id(encoded: bytes) -> str:
    return Envelope.decode(encoded).id.hex


def _record(row: Row) -> Record:
    record: Record = decode_msgpack(row.body, AnyRecord, "record")  # type: ignore[arg-type]
    return record


def _program_ids(code: Hash256, imports: Iterable[Any]) -> list[Hash256]:
    return [code, *(item.from_ for item in imports)]


class Partition:
    """A partition this worker serves (see the module's description)."""

    def __init__(
        self,
        layout: Layout,
        number: int,
        store: JetStreamJournalStore,
        ledger: SharedLedger,
        vault: ObjectVault,
        engine: Engine,
        accounts: AccountsBucket,
        settings: PartitionSettings,
    ) -> None:
        self.layout = layout
        self.number = number
        self.store = store
        self.ledger = ledger
        self.vault = vault
        self.engine = engine
        self.accounts = accounts
        self.settings = settings
        self._replies: OrderedDict[Hash256, bytes] = OrderedDict()
        self._reply_bytes = 0
        for request, reply in store.replies.items():
            self._remember(request, reply)
        store.replies = {}
        self._running: dict[Hash256, asyncio.Future[bytes]] = {}
        self._subscriptions: list[Subscription] = []
        self.closing = False
        self.taken_at = time.time()
        self.meter = TickMeter()

    # ------------------------------------------------------------------ taking, leaving

    @classmethod
    async def take(
        cls,
        layout: Layout,
        number: int,
        runner: TierRunner,
        accounts: AccountsBucket,
        mirror: dict[AgentId, tuple[StoredAccount, int]],
        settings: PartitionSettings,
        on_lost: Callable[[str], None],
    ) -> Partition:
        """Rebuild the partition from its journal and start serving it."""
        store = await JetStreamJournalStore.load(
            layout, number, write_timeout=settings.write_timeout
        )
        await accounts.catch_up(number, store.account_batches)
        ledger = SharedLedger(number, settings.opening)
        for agent in {change.agent for _, batch in store.account_batches for change in batch}:
            mirror[agent] = await accounts.read(agent)
        for agent, (stored, revision) in mirror.items():
            ledger.absorb(agent, stored, revision)
        store.account_batches = []
        vault = ObjectVault(layout.programs)
        await vault.fetch(_named_programs(store.rows()))
        meter = TickMeter()
        engine = Engine(
            vault,
            ledger=ledger,
            tier=runner,
            limits=settings.limits,
            journal_store=store,
            snapshot_every=settings.snapshot_every,
            mailbox=_JournalMailbox(store),
            on_slice=meter.observe,
            # A worker's partitions share one event loop: their lone slices together aim
            # at what one engine's does, so the loop (leases, requests) still turns often.
            lone_slice_seconds=LONE_SLICE_SECONDS / layout.partitions,
        )
        partition = cls(layout, number, store, ledger, vault, engine, accounts, settings)
        partition.meter = meter
        since_ms = (time.time() - _RESEND_SECONDS) * 1000
        recent = [row for row in store.rows() if row.time_ms >= since_ms]
        recent_mail = [mail for at_ms, mail in store.mail if at_ms >= since_ms]
        store.mail = []
        store.on_lost = on_lost
        store.take_accounts = partition._take_accounts
        store.after_stored = partition._after_stored
        store.before_write = vault.upload
        # What follows from the journal's last batches, sent again before anything new
        # (the last worker may have died between storing a batch and sending these), so
        # that each sandbox's events stay in order.
        await partition._record_directory(recent)
        await partition._publish_events(recent)
        await partition._send_mail(recent_mail)
        store.start()
        await engine.open()
        store.forget_history()
        await partition._subscribe()
        return partition

    async def _subscribe(self) -> None:
        nc = self.layout.nc
        self._subscriptions = [
            await nc.subscribe(names.forge_subject(self.number), cb=self._on_forge),
            await nc.subscribe(names.engine_subject(self.number), cb=self._on_engine),
        ]

    async def _unsubscribe(self) -> None:
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        self._subscriptions = []

    async def hand_over(self) -> None:
        """Stop serving, snapshot, write everything, and let go (a drain or a rebalance)."""
        self.closing = True
        await self._unsubscribe()
        with contextlib.suppress(Exception):
            await self.engine.close()
        await self.store.drain()

    async def abandon(self) -> None:
        """Stop at once, writing nothing (another worker has the partition, or will)."""
        self.closing = True
        self.store.lost = self.store.lost or "abandoned"
        await self._unsubscribe()
        await self.store.stop()
        with contextlib.suppress(Exception):
            await self.engine.close()

    @property
    def live_sandboxes(self) -> int:
        return self.engine.state.live_count

    # ------------------------------------------------------------------ after each stored batch

    def _take_accounts(self, row: int) -> tuple[AccountChange, ...]:
        return self.ledger.take_changes(row)

    async def _after_stored(self, batch: Batch) -> None:
        """What follows from a stored batch, before the requests it answers are told (as the
        embedded engine has done all of it when it answers): the directory entries of the
        sandboxes and services it creates, the accounts' changes, the events and the mailbox
        envelopes, all at once."""
        await asyncio.gather(
            self._record_directory(batch.rows),
            self._apply_accounts(batch),
            self._publish_events(batch.rows),
            self._send_mail(batch.mail),
        )

    async def _apply_accounts(self, batch: Batch) -> None:
        """Add the batch's accounts' changes to the shared accounts (each account at once)."""
        changed = await asyncio.gather(
            *(
                self._persist(
                    partial(
                        self.accounts.add, self.number, batch.final, change.agent, change.amounts()
                    )
                )
                for change in batch.accounts
            )
        )
        for change, (stored, revision) in zip(batch.accounts, changed, strict=True):
            self.ledger.absorb(change.agent, stored, revision)
        if batch.accounts:
            self.ledger.applied(batch.final)

    async def _send_mail(self, mail: Iterable[StoredMail]) -> None:
        """Mailbox envelopes, each with a message id of its own, so none arrives twice."""
        await self._publish_all(
            [
                (
                    names.mailbox_subject(item.recipient),
                    item.envelope,
                    f"mail.{_envelope_id(item.envelope)}",
                )
                for item in mail
            ]
        )

    async def _record_directory(self, rows: Iterable[Row]) -> None:
        """The directory entries of stored rows (each sandbox or service created, forgotten):
        one entry after another in the journal's order, different entries at once."""
        by_entry: dict[Hash256, list[Record]] = {}
        for row in rows:
            record = _record(row)
            if isinstance(record, SandboxCreated | SandboxForgotten):
                by_entry.setdefault(record.sandbox, []).append(record)
            elif isinstance(record, ServiceCreated):
                by_entry.setdefault(record.service, []).append(record)

        async def in_order(records: list[Record]) -> None:
            for record in records:
                await self._persist(partial(self._directory, record))

        await asyncio.gather(*(in_order(records) for records in by_entry.values()))

    async def _publish_events(self, rows: Iterable[Row]) -> None:
        """The events of stored rows, derived as the embedded engine derives them."""
        events: list[tuple[str, bytes, str]] = []
        for row in rows:
            for index, spec in enumerate(events_of(_record(row))):
                event = Event(0, spec.kind, spec.sandbox_id, spec.owner, row.time_ms, spec.payload)
                subject = names.event_subject(int(spec.kind), spec.owner, spec.sandbox_id)
                events.append((subject, event.encode(), f"{self.number}.{row.seq}.{index}"))
        await self._publish_all(events)

    async def _persist(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until NATS takes it (while the partition is still this worker's)."""
        delay = 0.05
        started = time.monotonic()
        while True:
            if self.store.lost is not None:
                raise PartitionLost(self.store.lost)
            try:
                return await attempt()
            except (TimeoutError, nats.errors.Error, OSError) as error:
                if time.monotonic() - started > self.settings.write_timeout:
                    raise PartitionLost(
                        f"NATS did not take what follows from the journal ({error!r})"
                    ) from None
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)

    async def _publish_all(self, messages: list[tuple[str, bytes, str]]) -> None:
        """Publish to JetStream in order, each once (a message id JetStream remembers), in
        flights of :data:`_EVENTS_IN_FLIGHT`; a flight that fails is sent again whole."""
        js = self.layout.js
        headers = {names.PARTITION_HEADER: str(self.number)}
        for start in range(0, len(messages), _EVENTS_IN_FLIGHT):
            flight = messages[start : start + _EVENTS_IN_FLIGHT]

            async def send(flight: list[tuple[str, bytes, str]] = flight) -> None:
                acks = [
                    await js.publish_async(
                        subject, data, headers=headers | {"Nats-Msg-Id": message_id}
                    )
                    for subject, data, message_id in flight
                ]
                done, pending = await asyncio.wait(acks, timeout=5.0)
                for future in pending:
                    future.cancel()
                if pending:
                    raise TimeoutError("event acknowledgements did not come")
                for future in done:
                    future.result()

            await self._persist(send)

    async def _directory(self, record: Record) -> None:
        directory = self.layout.directory
        if isinstance(record, SandboxCreated):
            entry = DirectoryEntry(self.number, record.request.owner)
            with contextlib.suppress(KeyWrongLastSequenceError):
                await directory.create(f"sandbox.{record.sandbox.hex}", encode_msgpack(entry))
        elif isinstance(record, ServiceCreated):
            entry = DirectoryEntry(self.number, record.owner)
            with contextlib.suppress(KeyWrongLastSequenceError):
                await directory.create(f"service.{record.service.hex}", encode_msgpack(entry))
        elif isinstance(record, SandboxForgotten):
            with contextlib.suppress(KeyNotFoundError):
                await directory.purge(f"sandbox.{record.sandbox.hex}")

    # ------------------------------------------------------------------ requests

    async def _respond(self, message: Msg, reply: bytes | None, moved: str | None = None) -> None:
        if not message.reply:
            return
        headers = {MOVED: moved} if moved is not None else None
        with contextlib.suppress(Exception):
            await self.layout.nc.publish(message.reply, reply or b"", headers=headers)

    async def _once(
        self, requester: AgentId, request_id: Hash256, work: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        """Answer ``requester``'s request ``request_id`` once: its stored reply if it was
        answered before.  Replies are kept under the requester and the id together, as the
        id is the client's choice: another agent naming the same id is another request,
        decided by the policy like any, never handed the first one's reply."""
        request = Hash256.of(requester.raw + request_id.raw)
        known = self._replies.get(request)
        if known is not None:
            return known
        running = self._running.get(request)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._running[request] = future
        try:
            pending = self.store.begin()
            reply = b""
            try:
                reply = await work()
            finally:
                batch = self.store.finish(pending, request, reply)
            await self.store.settled(batch)
            self._remember(request, reply)
            future.set_result(reply)
            return reply
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # marked as seen
            raise
        finally:
            self._running.pop(request, None)

    def _remember(self, request: Hash256, reply: bytes) -> None:
        """Keep ``reply`` for ``request``, forgetting the oldest beyond either bound."""
        previous = self._replies.pop(request, None)
        if previous is not None:
            self._reply_bytes -= len(previous)
        self._replies[request] = reply
        self._reply_bytes += len(reply)
        while len(self._replies) > 1 and (
            len(self._replies) > _REMEMBERED_REPLIES or self._reply_bytes > _REMEMBERED_REPLY_BYTES
        ):
            self._reply_bytes -= len(self._replies.popitem(last=False)[1])

    async def _on_forge(self, message: Msg) -> None:
        """A Forge envelope: the engine's dispatcher answers it."""
        if self.closing:
            await self._respond(message, None, "the partition is being handed over")
            return
        raw = message.data
        try:
            envelope = Envelope.decode(raw)
        except ForgeError:
            await self._respond(message, await self.engine.dispatch_bytes(raw))
            return
        try:
            if envelope.code == ExtensionCode.CYCLE_ADVANCE:
                reply = self.engine.ctx.replies.error(
                    NotSupported("CYCLE_ADVANCE in a cluster"), envelope.id
                ).encode()
            elif envelope.code == MessageCode.SANDBOX_STATUS:
                reply = await self.engine.dispatch_bytes(raw)
            else:
                await self._fetch_for_envelope(envelope)
                reply = await self._once(
                    envelope.sender, envelope.id, lambda: self.engine.dispatch_bytes(raw)
                )
        except (PartitionLost, asyncio.CancelledError):
            await self._respond(message, None, "the partition moved")
            return
        await self._respond(message, reply)

    async def _fetch_for_envelope(self, envelope: Envelope) -> None:
        try:
            if envelope.code == MessageCode.SANDBOX_CREATE:
                create: CreateSandbox = decode_payload(envelope.code, envelope.payload)
                await self.vault.fetch(_program_ids(create.code, create.imports))
            elif envelope.code == MessageCode.LINK_RESOLVE:
                link: LinkResolve = decode_payload(envelope.code, envelope.payload)
                await self.vault.fetch(_program_ids(link.program, link.imports))
        except InvalidRequest:
            return  # the dispatcher refuses it

    async def _on_engine(self, message: Msg) -> None:
        """An engine operation from a gateway (:mod:`kforge.cluster.protocol`)."""
        if self.closing:
            await self._respond(message, None, "the partition is being handed over")
            return
        try:
            call: Call = decode_msgpack(message.data, AnyCall, "call")  # type: ignore[arg-type]
        except ForgeError as error:
            await self._respond(message, encode_msgpack(Answer(failure=failure_of(error))))
            return
        try:
            if call.changes:
                requester: AgentId = call.requester  # type: ignore[attr-defined]
                reply = await self._once(requester, call.request, lambda: self._perform(call))
            else:
                reply = await self._perform(call)
        except (PartitionLost, asyncio.CancelledError):
            await self._respond(message, None, "the partition moved")
            return
        if self.closing and call.changes is False and not reply:
            await self._respond(message, None, "the partition moved")
            return
        await self._respond(message, reply)

    async def _perform(self, call: Any) -> bytes:
        try:
            value = await self._run(call)
        except asyncio.CancelledError:
            if self.closing:
                raise
            return encode_msgpack(Answer(failure=failure_of(TimeoutError("cancelled"))))
        except Exception as error:
            return encode_msgpack(Answer(failure=failure_of(error)))
        return encode_msgpack(Answer(value=encode_msgpack(value)))

    async def _run(self, call: Any) -> Any:
        engine = self.engine
        match call:
            case Create(create=request, requester=requester):
                await self.vault.fetch(_program_ids(request.code, request.imports))
                return await engine.create_sandbox(request, requester)
            case Authorize(sandbox=sandbox, requester=requester, action=action):
                return await engine.authorize_sandbox(_action(action), sandbox, requester)
            case Status(sandbox=sandbox, requester=requester):
                return await engine.sandbox_status(sandbox, requester)
            case ListSandboxes(owner=owner):
                return tuple(await engine.list_sandboxes(owner))
            case Visible(requester=requester, every=every):
                return tuple(await engine.visible_sandboxes(requester, every=every))
            case Start(sandbox=sandbox, requester=requester):
                return await engine.exec_start(sandbox, requester)
            case Step(sandbox=sandbox, requester=requester):
                return await engine.step(sandbox, requester)
            case Deliver(sandbox=sandbox, requester=requester, channel=channel, data=data):
                return await engine.deliver(sandbox, channel, data, requester)
            case Kill(sandbox=sandbox, requester=requester):
                return await engine.kill_sandbox(sandbox, requester)
            case Wait(sandbox=sandbox, requester=requester, timeout=timeout):
                limit = max(0.0, min(timeout, self.settings.max_wait_seconds))
                return await engine.wait(
                    sandbox, requester, timeout=limit, output_limit=_output_limit(call.output_limit)
                )
            case Forget(sandbox=sandbox, requester=requester):
                return await engine.forget(sandbox, requester)
            case IoLog(sandbox=sandbox, requester=requester):
                return await engine.io_log(sandbox, requester)
            case Output(sandbox=sandbox, requester=requester, offset=offset, limit=limit):
                reader = requester if requester is not None else engine.agent_id
                return await engine.output_chunk(
                    sandbox, reader, offset=offset, limit=_output_limit(limit)
                )
            case RunRecordOf(sandbox=sandbox, requester=requester):
                return (await engine.run_record(sandbox, requester)).to_bytes()
            case Prove(sandbox=sandbox, requester=requester):
                return (await engine.request_proof(sandbox, requester)).to_bytes()
            case Grant(sandbox=sandbox, requester=requester, agent=agent, operations=operations):
                return await engine.grant(sandbox, requester, agent, operations)
            case Revoke(sandbox=sandbox, requester=requester, agent=agent):
                return await engine.revoke(sandbox, requester, agent)
            case Link(program=program, imports=imports, requester=requester):
                await self.vault.fetch(_program_ids(program, imports))
                return await engine.link_resolve(program, imports, requester)
            case CreateService(service=service, requester=requester):
                return await engine.create_service(service, requester)
            case ServiceInfoOf(service=service):
                return await engine.service_info(service)
            case ListServices(owner=owner):
                return tuple(await engine.list_services(owner))
            case CallService(service=service, endpoint=endpoint, data=data, caller=caller):
                limit = max(0.0, min(call.timeout, self.settings.max_wait_seconds))
                return await asyncio.wait_for(
                    engine.call_service(service, endpoint, data, caller), limit
                )
            case FundService(service=service, requester=requester):
                return await engine.fund_service(service, requester)
        raise InvalidRequest("op", f"{type(call).__name__} is not an operation of the engine")


def _output_limit(asked: int | None) -> int:
    """The output bytes one answer carries at most (NATS bounds a message's size)."""
    return OUTPUT_PER_ANSWER if asked is None else min(asked, OUTPUT_PER_ANSWER)


def _action(name: str) -> Action:
    try:
        return Action(name)
    except ValueError:
        raise InvalidRequest("action", f"{name!r} is no action of the engine") from None


def _named_programs(rows: Iterable[Row]) -> list[Hash256]:
    """Every program the journal's creations name (what a rebuild loads)."""
    found: list[Hash256] = []
    for row in rows:
        record = _record(row)
        if isinstance(record, SandboxCreated):
            found.append(record.program)
            found.extend(_program_ids(record.request.code, record.request.imports))
    return found
