"""Forge messages on the wire: envelopes, msgpack payload schemas, reply codes, mailboxes.

Every message is an :class:`Envelope` whose ``payload`` is a msgpack map with
string keys.  Each message code has one schema (:data:`SCHEMAS`): the fields it
carries, their wire types and which are optional.  :func:`decode_payload`
checks a payload against its schema and returns plain Python values
(``Hash256``/``AgentId`` for 32-byte ids); anything else is refused with
:class:`InvalidRequest` naming the field.  :func:`encode_payload` is the inverse.

Codes beyond the seed's tables (documented in ``docs/engine.md``):

- ``ReplyCode.ACK`` (0x05F0): a request was done or accepted; payload per request.
- ``ReplyCode.ERROR`` (0x05F1): a request was refused; payload is a ``KingdomError``.
- ``ReplyCode.SANDBOX_INFO`` (0x05F2): the answer to ``SANDBOX_STATUS``.
- ``ReplyCode.LINK_RESULT`` (0x05F3): the answer to ``LINK_RESOLVE``.
- ``ExtensionCode.SANDBOX_DELIVER`` (0x0507): input for a sandbox's stdin.
- ``ExtensionCode.CYCLE_ADVANCE`` (0x0508): begin the engine's next cycle.
- ``ExtensionCode.SERVICE_FUND`` (0x0509): pay a suspended service's cycle and resume it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

import msgpack

from kforge.core import (
    AgentId,
    ErrorCategory,
    Hash256,
    InvalidRequest,
    KingdomError,
    MessageCode,
)

__all__ = [
    "ENVELOPE_SCHEMA",
    "MAX_MESSAGE_BYTES",
    "OMIT",
    "SCHEMAS",
    "STATE_NAMES",
    "AgentField",
    "BoolField",
    "BytesField",
    "BytesMapField",
    "Envelope",
    "ExtensionCode",
    "Field",
    "HashField",
    "InvalidRequest",
    "ListField",
    "Mailbox",
    "OptionalField",
    "ReplyCode",
    "StructField",
    "TextField",
    "UIntField",
    "WireType",
    "code_name",
    "decode_payload",
    "encode_payload",
    "error_payload",
    "kingdom_error_from_payload",
    "pack",
    "unpack",
]

#: The largest payload or envelope :func:`unpack` accepts (16 MiB).
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024


class ReplyCode(IntEnum):
    """Codes of the engine's direct replies (the seed leaves them to the implementation)."""

    ACK = 0x05F0
    ERROR = 0x05F1
    SANDBOX_INFO = 0x05F2
    LINK_RESULT = 0x05F3


class ExtensionCode(IntEnum):
    """Requests beyond the seed's table."""

    SANDBOX_DELIVER = 0x0507  # { sandbox_id, channel, data }: input for a sandbox (stdin)
    CYCLE_ADVANCE = 0x0508  # { allowances: [{agent, ticks}] }: begin the next cycle
    SERVICE_FUND = 0x0509  # { service_id }: pay this cycle of a service and resume it


def code_name(code: int) -> str:
    """The name of a message code, or its hex form when it has none."""
    for enum in (MessageCode, ReplyCode, ExtensionCode):
        try:
            return enum(code).name
        except ValueError:
            continue
    return f"0x{code:04X}"


# =============================================================================
# msgpack
# =============================================================================


def pack(value: Any) -> bytes:
    """msgpack bytes of ``value`` (bytes as bin, str as str; maps keep their order)."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def unpack(raw: bytes, what: str = "payload") -> Any:
    """Decode msgpack ``raw``; any problem is :class:`InvalidRequest` naming ``what``."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise InvalidRequest(what, f"must be bytes, got {type(raw).__name__}")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidRequest(what, f"{len(raw)} bytes is over the {MAX_MESSAGE_BYTES} limit")
    try:
        return msgpack.unpackb(bytes(raw), raw=False, strict_map_key=False, use_list=True)
    except Exception as error:  # msgpack raises several unrelated types
        raise InvalidRequest(what, f"not valid msgpack ({type(error).__name__})") from None


# =============================================================================
# Wire types: each converts one field between its wire form and its value.
# =============================================================================


class WireType:
    """How one field looks on the wire; subclasses check and convert."""

    description = "value"

    def decode(self, wire: Any, path: str) -> Any:
        raise NotImplementedError

    def encode(self, value: Any) -> Any:
        raise NotImplementedError

    def _refuse(self, wire: Any, path: str) -> InvalidRequest:
        return InvalidRequest(path, f"expected {self.description}, got {_describe(wire)}")


def _describe(wire: Any) -> str:
    if isinstance(wire, bytes):
        return f"{len(wire)}-byte binary"
    if isinstance(wire, bool):
        return "boolean"
    if isinstance(wire, int):
        return f"integer {wire}"
    if wire is None:
        return "nil"
    return type(wire).__name__


class HashField(WireType):
    """A 32-byte binary, decoded as ``Hash256``."""

    description = "32-byte binary"
    kind: type[Hash256] = Hash256

    def decode(self, wire: Any, path: str) -> Hash256:
        if not isinstance(wire, bytes) or len(wire) != Hash256.SIZE:
            raise self._refuse(wire, path)
        return self.kind(wire)

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, Hash256):
            raise TypeError(f"expected a Hash256, got {type(value).__name__}")
        return value.raw


class AgentField(HashField):
    """A 32-byte binary, decoded as ``AgentId``."""

    kind = AgentId


class UIntField(WireType):
    """An unsigned integer of at most ``bits`` bits."""

    def __init__(self, bits: int = 64) -> None:
        self.bits = bits
        self.description = f"unsigned {bits}-bit integer"

    def decode(self, wire: Any, path: str) -> int:
        if isinstance(wire, bool) or not isinstance(wire, int):
            raise self._refuse(wire, path)
        if not 0 <= wire < 1 << self.bits:
            raise InvalidRequest(path, f"{wire} is outside 0..2^{self.bits}-1")
        return wire

    def encode(self, value: Any) -> int:
        return int(value)


class BytesField(WireType):
    """A binary of at most ``max_length`` bytes."""

    description = "binary"

    def __init__(self, max_length: int | None = None) -> None:
        self.max_length = max_length

    def decode(self, wire: Any, path: str) -> bytes:
        if not isinstance(wire, bytes):
            raise self._refuse(wire, path)
        if self.max_length is not None and len(wire) > self.max_length:
            raise InvalidRequest(path, f"{len(wire)} bytes is over the {self.max_length} limit")
        return wire

    def encode(self, value: Any) -> bytes:
        return bytes(value)


class TextField(WireType):
    """A UTF-8 string, optionally one of ``choices``."""

    description = "string"

    def __init__(self, choices: Sequence[str] | None = None) -> None:
        self.choices = tuple(choices) if choices is not None else None

    def decode(self, wire: Any, path: str) -> str:
        if not isinstance(wire, str):
            raise self._refuse(wire, path)
        if self.choices is not None and wire not in self.choices:
            raise InvalidRequest(path, f"{wire!r} is not one of {', '.join(self.choices)}")
        return wire

    def encode(self, value: Any) -> str:
        return str(value)


class BoolField(WireType):
    description = "boolean"

    def decode(self, wire: Any, path: str) -> bool:
        if not isinstance(wire, bool):
            raise self._refuse(wire, path)
        return wire

    def encode(self, value: Any) -> bool:
        return bool(value)


class BytesMapField(WireType):
    """A map from binary keys to binary values."""

    description = "map of binary to binary"

    def decode(self, wire: Any, path: str) -> dict[bytes, bytes]:
        if not isinstance(wire, dict):
            raise self._refuse(wire, path)
        result: dict[bytes, bytes] = {}
        for key, value in wire.items():
            if not isinstance(key, bytes):
                raise InvalidRequest(f"{path} key", f"expected binary, got {_describe(key)}")
            if not isinstance(value, bytes):
                raise InvalidRequest(f"{path}[{key!r}]", f"expected binary, got {_describe(value)}")
            result[key] = value
        return result

    def encode(self, value: Any) -> dict[bytes, bytes]:
        return {bytes(key): bytes(item) for key, item in sorted(dict(value).items())}


class ListField(WireType):
    """A list of items of one type, at most ``max_items`` long."""

    def __init__(self, item: WireType, max_items: int = 1024) -> None:
        self.item = item
        self.max_items = max_items
        self.description = f"list of {item.description}"

    def decode(self, wire: Any, path: str) -> list[Any]:
        if not isinstance(wire, list):
            raise self._refuse(wire, path)
        if len(wire) > self.max_items:
            raise InvalidRequest(path, f"{len(wire)} items is over the {self.max_items} limit")
        return [self.item.decode(element, f"{path}[{index}]") for index, element in enumerate(wire)]

    def encode(self, value: Any) -> list[Any]:
        return [self.item.encode(element) for element in value]


class OptionalField(WireType):
    """Either nil or the inner type."""

    def __init__(self, inner: WireType) -> None:
        self.inner = inner
        self.description = f"nil or {inner.description}"

    def decode(self, wire: Any, path: str) -> Any:
        return None if wire is None else self.inner.decode(wire, path)

    def encode(self, value: Any) -> Any:
        return None if value is None else self.inner.encode(value)


#: The default of an optional field that is left out of the values when absent.
OMIT: Final[Any] = object()


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a schema; an optional field takes ``default`` when absent
    (or stays absent when its default is :data:`OMIT`)."""

    name: str
    type: WireType
    required: bool = True
    default: Any = None


class StructField(WireType):
    """A nested map with its own fields."""

    description = "map"

    def __init__(self, fields: Sequence[Field]) -> None:
        self.fields = tuple(fields)

    def decode(self, wire: Any, path: str) -> dict[str, Any]:
        return _decode_map(self.fields, wire, path)

    def encode(self, value: Any) -> dict[str, Any]:
        return _encode_map(self.fields, value)


def _decode_map(fields: Sequence[Field], wire: Any, path: str) -> dict[str, Any]:
    prefix = f"{path}." if path else ""
    if not isinstance(wire, dict):
        raise InvalidRequest(path or "payload", f"expected a map, got {_describe(wire)}")
    known = {spec.name for spec in fields}
    for key in wire:
        if not isinstance(key, str):
            raise InvalidRequest(
                path or "payload", f"field names must be strings, got {_describe(key)}"
            )
        if key not in known:
            raise InvalidRequest(f"{prefix}{key}", "unknown field")
    values: dict[str, Any] = {}
    for spec in fields:
        if spec.name in wire:
            values[spec.name] = spec.type.decode(wire[spec.name], f"{prefix}{spec.name}")
        elif spec.required:
            raise InvalidRequest(f"{prefix}{spec.name}", "missing")
        elif spec.default is not OMIT:
            default = spec.default
            values[spec.name] = (
                list(default)
                if isinstance(default, list | tuple)
                else (dict(default) if isinstance(default, dict) else default)
            )
    return values


def _encode_map(fields: Sequence[Field], values: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(values) - {spec.name for spec in fields}
    if unknown:
        raise ValueError(f"fields not in the schema: {', '.join(sorted(unknown))}")
    wire: dict[str, Any] = {}
    for spec in fields:
        if spec.name in values:
            wire[spec.name] = spec.type.encode(values[spec.name])
        elif spec.required:
            raise ValueError(f"required field {spec.name!r} is missing")
    return wire


# =============================================================================
# Schemas, one per code
# =============================================================================

_HASH = HashField()
_AGENT = AgentField()
_U64 = UIntField(64)
_U32 = UIntField(32)
_U8 = UIntField(8)
_BYTES = BytesField()
_BOOL = BoolField()
_SANDBOX_ID = (Field("sandbox_id", _HASH),)
#: Names a SandboxState takes on the wire.
STATE_NAMES: Final = (
    "CREATED",
    "READY",
    "RUNNING",
    "BLOCKED",
    "HALTED",
    "FAULTED",
    "KILLED",
    "DEADLINE_EXCEEDED",
)
_ENDPOINT = StructField((Field("name", _BYTES), Field("channel", _U8), Field("schema", _BYTES)))
_IMPORT = StructField((Field("from", _HASH), Field("symbols", ListField(_BYTES))))

SCHEMAS: Final[dict[int, tuple[Field, ...]]] = {
    MessageCode.SANDBOX_CREATE: (
        Field("owner", _AGENT),
        Field("code", _HASH),
        Field("memory_quota", _U64),
        Field("tick_budget", _U64),
        Field("input", _BYTES, False, b""),
        Field("environment", BytesMapField(), False, {}),
        Field("persistent", _BOOL, False, False),
        Field("grants", ListField(_U8, 16), False, []),
        Field("accept_from", ListField(_AGENT), False, []),
        Field("deadline_ms", OptionalField(_U64), False, None),
    ),
    MessageCode.SANDBOX_STATUS: _SANDBOX_ID,
    MessageCode.SANDBOX_KILL: _SANDBOX_ID,
    MessageCode.EXEC_START: _SANDBOX_ID,
    MessageCode.EXEC_RESULT: (
        Field("sandbox_id", _HASH),
        Field("state", TextField(STATE_NAMES)),
        Field("ticks_used", _U64),
        Field("output", _BYTES),
        Field("fault", OptionalField(_U8)),
        Field("fault_detail", OptionalField(_U64), False, None),
    ),
    MessageCode.PROOF_REQUEST: _SANDBOX_ID,
    MessageCode.PROOF_RESULT: (
        Field("program", _HASH),
        Field("input", _HASH),
        Field("output", _HASH),
        Field("ticks_used", _U64),
        Field("trace_hash", _HASH),
        Field("forge_sig", _BYTES),
        Field("proof", _BYTES, False, OMIT),  # extension: kforge.proofs.ExecutionProof.to_bytes()
    ),
    MessageCode.SERVICE_CREATE: (
        Field("id", OptionalField(_HASH), False, None),
        Field("owner", _AGENT),
        Field("sandbox", _HASH),
        Field("name", _BYTES),
        Field("tick_budget", _U64),
        Field("auto_fund", _BOOL),
        Field("endpoints", ListField(_ENDPOINT)),
    ),
    MessageCode.SERVICE_CALL: (
        Field("service_id", _HASH),
        Field("endpoint", _BYTES),
        Field("data", _BYTES),
    ),
    MessageCode.SERVICE_RESULT: (
        Field("service_id", _HASH),
        Field("endpoint", _BYTES),
        Field("data", _BYTES),
        Field("ticks_used", _U64),
    ),
    MessageCode.LINK_RESOLVE: (
        Field("program", _HASH),
        Field("imports", ListField(_IMPORT)),
    ),
    ExtensionCode.SANDBOX_DELIVER: (
        Field("sandbox_id", _HASH),
        Field("channel", _U8),
        Field("data", _BYTES),
    ),
    ExtensionCode.CYCLE_ADVANCE: (
        Field(
            "allowances",
            ListField(StructField((Field("agent", _AGENT), Field("ticks", UIntField(63))))),
            False,
            [],
        ),
    ),
    ExtensionCode.SERVICE_FUND: (Field("service_id", _HASH),),
    ReplyCode.ACK: (
        Field("sandbox_id", _HASH, False, OMIT),
        Field("service_id", _HASH, False, OMIT),
        Field("cycle", _U64, False, OMIT),
    ),
    ReplyCode.ERROR: (
        Field("code", _U32),
        Field("category", TextField([category.value for category in ErrorCategory])),
        Field("message", _BYTES),
        Field("context", BytesMapField(), False, {}),
    ),
    ReplyCode.SANDBOX_INFO: (
        Field("id", _HASH),
        Field("owner", _AGENT),
        Field("state", TextField(STATE_NAMES)),
        Field("ticks_used", _U64),
        Field("ticks_remaining", _U64),
        Field("memory_used", _U64),
        Field("memory_quota", _U64),
        Field("persistent", _BOOL),
        Field("blocked_channel", OptionalField(_U8), False, None),
    ),
    ReplyCode.LINK_RESULT: (Field("resolved", _HASH),),
}


def decode_payload(code: int, payload: bytes) -> dict[str, Any]:
    """Check ``payload`` against the schema of ``code`` and return its values.

    Raises :class:`InvalidRequest` naming the field for anything that does not fit,
    and for a code that has no schema.
    """
    fields = SCHEMAS.get(code)
    if fields is None:
        raise InvalidRequest("envelope.code", f"unknown message code 0x{code:04X}")
    return _decode_map(fields, unpack(payload), "")


def encode_payload(code: int, values: Mapping[str, Any]) -> bytes:
    """msgpack payload of ``values`` under the schema of ``code`` (omitted optionals are left out).

    Raises ``ValueError``/``TypeError`` for values that do not fit: a programming error.
    """
    fields = SCHEMAS.get(code)
    if fields is None:
        raise ValueError(f"no schema for message code 0x{code:04X}")
    return pack(_encode_map(fields, values))


def error_payload(error: KingdomError) -> bytes:
    """The ``ReplyCode.ERROR`` payload of ``error``."""
    return encode_payload(
        ReplyCode.ERROR,
        {
            "code": error.code,
            "category": error.category.value,
            "message": error.message,
            "context": error.context,
        },
    )


def kingdom_error_from_payload(payload: bytes) -> KingdomError:
    """The ``KingdomError`` an ERROR reply carries."""
    values = decode_payload(ReplyCode.ERROR, payload)
    return KingdomError(
        values["code"], ErrorCategory(values["category"]), values["message"], values["context"]
    )


# =============================================================================
# Envelope
# =============================================================================

ENVELOPE_SCHEMA: Final = (
    Field("id", _HASH),
    Field("sender", _AGENT),
    Field("code", UIntField(16)),
    Field("payload", BytesField(MAX_MESSAGE_BYTES)),
    Field("timestamp", _U64),
    Field("reply_to", OptionalField(_HASH), False, None),
)


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message: who sent it, which code, its msgpack payload, when.

    ``timestamp`` is milliseconds since the Unix epoch; ``reply_to`` is the id of
    the request a reply answers (``None`` for requests).  Construction checks
    the field types and raises :class:`InvalidRequest` naming the field.
    """

    id: Hash256
    sender: AgentId
    code: int
    payload: bytes = b""
    timestamp: int = 0
    reply_to: Hash256 | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, Hash256):
            raise InvalidRequest("envelope.id", f"expected a Hash256, got {type(self.id).__name__}")
        if not isinstance(self.sender, Hash256):
            raise InvalidRequest(
                "envelope.sender", f"expected an AgentId, got {type(self.sender).__name__}"
            )
        if not isinstance(self.sender, AgentId):
            object.__setattr__(self, "sender", AgentId(self.sender.raw))
        if (
            isinstance(self.code, bool)
            or not isinstance(self.code, int)
            or not 0 <= self.code <= 0xFFFF
        ):
            raise InvalidRequest("envelope.code", f"expected a 16-bit code, got {self.code!r}")
        if not isinstance(self.payload, bytes):
            raise InvalidRequest(
                "envelope.payload", f"expected bytes, got {type(self.payload).__name__}"
            )
        if (
            isinstance(self.timestamp, bool)
            or not isinstance(self.timestamp, int)
            or not (0 <= self.timestamp < 1 << 64)
        ):
            raise InvalidRequest("envelope.timestamp", f"expected a u64, got {self.timestamp!r}")
        if self.reply_to is not None and not isinstance(self.reply_to, Hash256):
            raise InvalidRequest(
                "envelope.reply_to", f"expected a Hash256, got {type(self.reply_to).__name__}"
            )

    @classmethod
    def build(
        cls,
        code: int,
        sender: AgentId,
        values: Mapping[str, Any],
        *,
        id: Hash256,
        timestamp: int = 0,
        reply_to: Hash256 | None = None,
    ) -> Envelope:
        """An envelope whose payload encodes ``values`` under the schema of ``code``."""
        return cls(id, sender, int(code), encode_payload(code, values), timestamp, reply_to)

    def values(self) -> dict[str, Any]:
        """The payload decoded under this envelope's code (see :func:`decode_payload`)."""
        return decode_payload(self.code, self.payload)

    def encode(self) -> bytes:
        """The envelope as a msgpack map."""
        return pack(
            _encode_map(
                ENVELOPE_SCHEMA,
                {
                    "id": self.id,
                    "sender": self.sender,
                    "code": self.code,
                    "payload": self.payload,
                    "timestamp": self.timestamp,
                    "reply_to": self.reply_to,
                },
            )
        )

    @classmethod
    def decode(cls, raw: bytes) -> Envelope:
        """Parse :meth:`encode`'s form; raises :class:`InvalidRequest` naming the field."""
        values = _decode_map(ENVELOPE_SCHEMA, unpack(raw, "envelope"), "envelope")
        return cls(
            values["id"],
            values["sender"],
            values["code"],
            values["payload"],
            values["timestamp"],
            values["reply_to"],
        )


# =============================================================================
# Mailbox: replies that arrive later (EXEC_RESULT), per recipient
# =============================================================================


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
