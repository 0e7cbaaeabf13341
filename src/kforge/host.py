"""Host adapters: what answers a sandbox's messages on channels 3..7.

A sandbox SENDs a request on a granted channel; between execution slices the
engine hands it to the channel's adapter and delivers the reply on the same
channel, where the sandbox RECVs it.  The machine already refuses SEND on a
channel that was not granted (fault ``PERMISSION_DENIED``); the router checks
the grant again so no adapter ever sees an ungranted request.

Binary formats (all integers little-endian; ``id`` is 32 raw bytes):

    request  = op u8 | body
    reply    = status u8 | op u8 | body        (op echoes the request; 0 if unreadable)
    status   = 0 OK | 1 MALFORMED | 2 NOT_FOUND | 3 DENIED | 4 INSUFFICIENT
               | 5 UNAVAILABLE | 6 UNKNOWN_OP | 7 TOO_LARGE
    an error reply's body is a UTF-8 message saying what went wrong.

    vault  (3)  GET      0x01 id                       -> object bytes
                PUT      0x02 object bytes             -> id
    oracle (4)  QUERY    0x01 key bytes                -> value bytes
    agora  (5)  PUBLISH  0x01 u16 n, topic[n], message -> u64 index in the topic
                READ     0x02 u16 n, topic[n], u64 i   -> publisher owner id, message
                COUNT    0x03 u16 n, topic[n]          -> u64 messages in the topic
    mint   (6)  BALANCE  0x01 (empty)                  -> u64 Spark of the sandbox's owner
                TRANSFER 0x02 payee id, u64 amount     -> u64 owner's balance after
    peer   (7)  SEND     0x01 target sandbox id, data  -> (empty) once queued for the target
                CALL     0x02 service id, u16 n, endpoint[n], data -> u64 ticket once queued
                incoming (not a reply): 0x80 | 0x01 | sender sandbox id | sender owner id | data
                service answer (not a reply):
                         0x80 | 0x02 | service id | u64 ticket | u8 status | u64 ticks | data

Every call is validated, answered (success or error: an adapter's exception
becomes an UNAVAILABLE reply, never a crash) and returned with its status so
the engine can log it with the sandbox's tick count.
"""

from __future__ import annotations

import inspect
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from enum import IntEnum
from typing import Final, NamedTuple, Protocol

from kforge.accounting import InsufficientResources, Ledger
from kforge.core import AgentId, Hash256, VaultFetchFailed
from kforge.isa import Channel
from kforge.storage import Vault

__all__ = [
    "AGORA_ENTRY_BYTES",
    "REPLY_HEADER",
    "AgoraAdapter",
    "AgoraBoard",
    "AgoraOp",
    "HostAdapter",
    "HostError",
    "HostReply",
    "HostRequest",
    "HostRouter",
    "MintAdapter",
    "MintOp",
    "OracleAdapter",
    "OracleHandler",
    "OracleOp",
    "PeerAdapter",
    "PeerDirectory",
    "PeerOp",
    "Status",
    "TableOracle",
    "VaultAdapter",
    "VaultOp",
    "incoming_frame",
    "parse_reply",
    "reply_frame",
    "service_answer_frame",
]

#: Bytes before a reply's body: status and op.
REPLY_HEADER: Final = 2
#: What the agora board counts for one message beyond its bytes (what holds it).
AGORA_ENTRY_BYTES: Final = 128
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")
_ID = Hash256.SIZE


class Status(IntEnum):
    """The first byte of every reply."""

    OK = 0
    MALFORMED = 1  # the request does not follow its format
    NOT_FOUND = 2  # no such object, key, message or sandbox
    DENIED = 3  # the sandbox may not do this (grant, acceptance)
    INSUFFICIENT = 4  # the owner is short of Spark
    UNAVAILABLE = 5  # the adapter failed or is not configured
    UNKNOWN_OP = 6  # the op byte means nothing on this channel
    TOO_LARGE = 7  # the reply would exceed the sandbox's message limit
    INCOMING = 0x80  # not a reply: a message from another sandbox (channel 7)


class VaultOp(IntEnum):
    GET = 0x01
    PUT = 0x02


class OracleOp(IntEnum):
    QUERY = 0x01


class AgoraOp(IntEnum):
    PUBLISH = 0x01
    READ = 0x02
    COUNT = 0x03


class MintOp(IntEnum):
    BALANCE = 0x01
    TRANSFER = 0x02


class PeerOp(IntEnum):
    SEND = 0x01
    CALL = 0x02


def reply_frame(status: Status, op: int, body: bytes = b"") -> bytes:
    return bytes((status, op & 0xFF)) + body


def incoming_frame(sender: Hash256, sender_owner: AgentId, data: bytes) -> bytes:
    """What a sandbox receives on channel 7 when another sandbox sends it ``data``."""
    return bytes((Status.INCOMING, PeerOp.SEND)) + sender.raw + sender_owner.raw + data


def service_answer_frame(
    service_id: Hash256, ticket: int, status: Status, ticks_used: int, data: bytes
) -> bytes:
    """What a sandbox receives on channel 7 when a service call it made (``CALL``) ends.

    ``status`` is OK with the service's reply as ``data``, or an error status
    with a UTF-8 message (UNAVAILABLE: the service's sandbox stopped).
    """
    return (
        bytes((Status.INCOMING, PeerOp.CALL))
        + service_id.raw
        + _U64.pack(ticket)
        + bytes((status,))
        + _U64.pack(ticks_used)
        + data
    )


def parse_reply(frame: bytes) -> tuple[Status, int, bytes]:
    """Split a reply frame into status, op and body (for hosts' clients and tests)."""
    if len(frame) < REPLY_HEADER:
        raise ValueError("a reply frame has at least 2 bytes")
    return Status(frame[0]), frame[1], frame[2:]


class HostError(Exception):
    """Raised by an adapter to answer with an error status and message."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HostRequest(NamedTuple):
    """One message a sandbox sent on a host channel.

    Performance note: a named tuple, made in a tenth of a microsecond where a frozen
    dataclass takes half of one (one is made per host call).
    """

    sandbox_id: Hash256
    owner: AgentId
    channel: int
    data: bytes
    ticks_used: int
    message_limit: int

    @property
    def op(self) -> int:
        return self.data[0] if self.data else 0

    @property
    def body(self) -> bytes:
        return self.data[1:]


class HostReply(NamedTuple):
    """The answer to a request: the frame delivered to the sandbox and its status (a
    named tuple, like :class:`HostRequest`)."""

    status: Status
    frame: bytes


class HostAdapter(Protocol):
    """Serves one channel.  ``handle`` returns the OK body or raises :class:`HostError`."""

    @property
    def channel(self) -> int: ...

    async def handle(self, request: HostRequest) -> bytes: ...


class _Body:
    """Reads a request body front to back; a shortfall is MALFORMED naming the part."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.offset = 0

    def take(self, size: int, what: str) -> bytes:
        if self.offset + size > len(self.body):
            raise HostError(
                Status.MALFORMED,
                f"{what} needs {size} bytes at body offset {self.offset}, "
                f"{len(self.body) - self.offset} left",
            )
        chunk = self.body[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def u16(self, what: str) -> int:
        value: int = _U16.unpack(self.take(2, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = _U64.unpack(self.take(8, what))[0]
        return value

    def rest(self) -> bytes:
        chunk = self.body[self.offset :]
        self.offset = len(self.body)
        return chunk

    def end(self) -> None:
        if self.offset != len(self.body):
            raise HostError(
                Status.MALFORMED,
                f"{len(self.body) - self.offset} unexpected bytes after the request",
            )


def _unknown_op(request: HostRequest, names: type[IntEnum]) -> HostError:
    known = ", ".join(f"0x{op.value:02X} {op.name}" for op in names)
    return HostError(
        Status.UNKNOWN_OP,
        f"op 0x{request.op:02X} is not defined on channel {request.channel} ({known})",
    )


# =============================================================================
# Vault (channel 3)
# =============================================================================


class VaultAdapter:
    """GET and PUT content-addressed objects in the engine's vault."""

    channel = Channel.VAULT

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    async def handle(self, request: HostRequest) -> bytes:
        body = _Body(request.body)
        if request.op == VaultOp.GET:
            object_id = Hash256(body.take(_ID, "object id"))
            body.end()
            try:
                return self.vault.get(object_id)
            except VaultFetchFailed as error:  # the requester knows the id: say only why
                raise HostError(Status.NOT_FOUND, error.reason or str(error)) from None
        if request.op == VaultOp.PUT:
            return self.vault.put(body.rest()).raw
        raise _unknown_op(request, VaultOp)


# =============================================================================
# Oracle (channel 4)
# =============================================================================

#: Answers a query key with a value, or ``None`` when it has none; may be async.
OracleHandler = Callable[[bytes], "bytes | Awaitable[bytes | None] | None"]


class TableOracle:
    """The default oracle: a fixed key-value table given at engine start (deterministic)."""

    def __init__(self, table: Mapping[bytes, bytes] | None = None) -> None:
        self.table = {bytes(key): bytes(value) for key, value in (table or {}).items()}

    def __call__(self, key: bytes) -> bytes | None:
        return self.table.get(key)


class OracleAdapter:
    """QUERY a pluggable handler; a ``None`` answer is NOT_FOUND."""

    channel = Channel.ORACLE

    def __init__(self, handler: OracleHandler | None = None) -> None:
        self.handler: OracleHandler = handler if handler is not None else TableOracle()

    async def handle(self, request: HostRequest) -> bytes:
        if request.op != OracleOp.QUERY:
            raise _unknown_op(request, OracleOp)
        answer = self.handler(request.body)
        if type(answer) is bytes:  # the usual answer, at once: nothing more to look at
            return answer
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is None:
            raise HostError(Status.NOT_FOUND, f"the oracle has no answer for {request.body!r}")
        if not isinstance(answer, bytes | bytearray):
            raise HostError(Status.UNAVAILABLE, "the oracle answered with something not bytes")
        return bytes(answer)


# =============================================================================
# Agora (channel 5)
# =============================================================================


class AgoraBoard:
    """Topics of messages, each message kept with the owner of the sandbox that published it.

    The board outlives the sandboxes that publish on it, so it is bounded on its
    own: ``max_messages_per_topic`` messages a topic, ``max_topics`` topics,
    ``max_bytes`` bytes in all (messages and topic names, each message counting
    :data:`AGORA_ENTRY_BYTES` more for what holds it), of which one agent's
    publications may take ``max_bytes_per_publisher``.  A publication past any of
    them is refused (DENIED), never an older one dropped.
    """

    def __init__(
        self,
        max_messages_per_topic: int = 100_000,
        *,
        max_topics: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        max_bytes_per_publisher: int = 8 * 1024 * 1024,
    ) -> None:
        self.max_messages_per_topic = max_messages_per_topic
        self.max_topics = max_topics
        self.max_bytes = max_bytes
        self.max_bytes_per_publisher = max_bytes_per_publisher
        self.topics: dict[bytes, list[tuple[AgentId, bytes]]] = {}
        self.size = 0
        self._by_publisher: dict[AgentId, int] = {}

    def publish(self, topic: bytes, publisher: AgentId, message: bytes) -> int:
        """Append ``message`` to ``topic``; returns its index.  Raises ``OverflowError`` when
        the topic, the board or the publisher's share is full."""
        messages = self.topics.get(topic)
        size = len(message) + AGORA_ENTRY_BYTES + (len(topic) if messages is None else 0)
        published = self._by_publisher.get(publisher, 0)
        if messages is None and len(self.topics) >= self.max_topics:
            raise OverflowError(f"the board holds {self.max_topics} topics, its most")
        if messages is not None and len(messages) >= self.max_messages_per_topic:
            raise OverflowError(f"topic {topic!r} is full")
        if self.size + size > self.max_bytes:
            raise OverflowError(f"the board holds {self.size} of at most {self.max_bytes} bytes")
        if published + size > self.max_bytes_per_publisher:
            raise OverflowError(
                f"agent {publisher} has published {published} of at most "
                f"{self.max_bytes_per_publisher} bytes"
            )
        if messages is None:
            messages = self.topics[topic] = []
        messages.append((publisher, message))
        self.size += size
        self._by_publisher[publisher] = published + size
        return len(messages) - 1

    def read(self, topic: bytes, index: int) -> tuple[AgentId, bytes] | None:
        messages = self.topics.get(topic, [])
        return messages[index] if 0 <= index < len(messages) else None

    def count(self, topic: bytes) -> int:
        return len(self.topics.get(topic, []))


class AgoraAdapter:
    """PUBLISH to, READ from and COUNT a topic of the engine's agora board."""

    channel = Channel.AGORA
    max_topic = 255

    def __init__(self, board: AgoraBoard) -> None:
        self.board = board

    def _topic(self, body: _Body) -> bytes:
        length = body.u16("topic length")
        if not 1 <= length <= self.max_topic:
            raise HostError(
                Status.MALFORMED, f"topic length {length} is outside 1..{self.max_topic}"
            )
        return body.take(length, "topic")

    async def handle(self, request: HostRequest) -> bytes:
        body = _Body(request.body)
        if request.op == AgoraOp.PUBLISH:
            topic = self._topic(body)
            try:
                index = self.board.publish(topic, request.owner, body.rest())
            except OverflowError as error:
                raise HostError(Status.DENIED, str(error)) from None
            return _U64.pack(index)
        if request.op == AgoraOp.READ:
            topic = self._topic(body)
            index = body.u64("message index")
            body.end()
            found = self.board.read(topic, index)
            if found is None:
                raise HostError(Status.NOT_FOUND, f"topic {topic!r} has no message {index}")
            publisher, message = found
            return publisher.raw + message
        if request.op == AgoraOp.COUNT:
            topic = self._topic(body)
            body.end()
            return _U64.pack(self.board.count(topic))
        raise _unknown_op(request, AgoraOp)


# =============================================================================
# Mint (channel 6)
# =============================================================================


class MintAdapter:
    """BALANCE and TRANSFER Spark; the payer is always the sandbox's owner."""

    channel = Channel.MINT

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def handle(self, request: HostRequest) -> bytes:
        body = _Body(request.body)
        if request.op == MintOp.BALANCE:
            body.end()
            return _U64.pack(self.ledger.account(request.owner).spark)
        if request.op == MintOp.TRANSFER:
            payee = AgentId(body.take(_ID, "payee id"))
            amount = body.u64("amount")
            body.end()
            if amount == 0 or amount >= 1 << 63:
                raise HostError(Status.MALFORMED, f"amount {amount} is outside 1..2^63-1")
            try:
                balance = self.ledger.transfer(request.owner, payee, amount)
            except InsufficientResources as error:
                raise HostError(Status.INSUFFICIENT, str(error)) from None
            return _U64.pack(balance)
        raise _unknown_op(request, MintOp)


# =============================================================================
# Inter-sandbox (channel 7)
# =============================================================================


class PeerDirectory(Protocol):
    """Finds sandboxes and queues messages for them (the engine)."""

    def send_to_peer(
        self, sender: Hash256, sender_owner: AgentId, target: Hash256, data: bytes
    ) -> None:
        """Queue ``data`` for ``target`` or raise :class:`HostError` (NOT_FOUND, DENIED)."""
        ...

    def call_service_from_sandbox(
        self,
        sender: Hash256,
        sender_owner: AgentId,
        service_id: Hash256,
        endpoint: bytes,
        data: bytes,
    ) -> int:
        """Queue a service call whose answer goes back to ``sender`` on channel 7; its ticket."""
        ...


class PeerAdapter:
    """SEND a message to another sandbox that accepts the sender; CALL a service."""

    channel = Channel.INTER_SANDBOX

    def __init__(self, directory: PeerDirectory) -> None:
        self.directory = directory

    async def handle(self, request: HostRequest) -> bytes:
        if request.op == PeerOp.CALL:
            call = _Body(request.body)
            service_id = Hash256(call.take(_ID, "service id"))
            endpoint = call.take(call.u16("endpoint length"), "endpoint")
            ticket = self.directory.call_service_from_sandbox(
                request.sandbox_id, request.owner, service_id, endpoint, call.rest()
            )
            return _U64.pack(ticket)
        if request.op != PeerOp.SEND:
            raise _unknown_op(request, PeerOp)
        body = _Body(request.body)
        target = Hash256(body.take(_ID, "target sandbox id"))
        data = body.rest()
        if len(data) + 2 + 2 * _ID > request.message_limit:
            raise HostError(Status.TOO_LARGE, "the message would exceed the target's message limit")
        self.directory.send_to_peer(request.sandbox_id, request.owner, target, data)
        return b""


# =============================================================================
# The router
# =============================================================================


class HostRouter:
    """Routes each request to its channel's adapter and always returns a reply."""

    def __init__(self, adapters: Iterable[HostAdapter]) -> None:
        self.adapters: dict[int, HostAdapter] = {}
        for adapter in adapters:
            self.adapters[int(adapter.channel)] = adapter

    async def call(self, request: HostRequest, grants: frozenset[int]) -> HostReply:
        """The reply to ``request``; never raises."""
        op = request.op
        try:
            if request.channel not in grants:
                raise HostError(Status.DENIED, f"channel {request.channel} is not granted")
            adapter = self.adapters.get(request.channel)
            if adapter is None:
                raise HostError(
                    Status.UNAVAILABLE, f"no host adapter serves channel {request.channel}"
                )
            if not request.data:
                raise HostError(Status.MALFORMED, "empty request: the first byte is the op")
            body = await adapter.handle(request)
            if len(body) + REPLY_HEADER > request.message_limit:
                raise HostError(
                    Status.TOO_LARGE,
                    f"the reply of {len(body)} bytes exceeds the message limit "
                    f"of {request.message_limit}",
                )
            return HostReply(Status.OK, reply_frame(Status.OK, op, body))
        except HostError as error:
            message = error.message.encode("utf-8", "replace")[: max(0, request.message_limit - 2)]
            return HostReply(error.status, reply_frame(error.status, op, message))
        except Exception as error:  # an adapter's bug must not crash the engine
            text = f"host adapter failed: {type(error).__name__}: {error}".encode(
                "utf-8", "replace"
            )
            return HostReply(
                Status.UNAVAILABLE,
                reply_frame(Status.UNAVAILABLE, op, text[: max(0, request.message_limit - 2)]),
            )
