"""Forge messages on the wire: envelopes, the payload schema of every code, mailboxes.

Every message is an :class:`Envelope` whose ``payload`` is the msgpack form of
its code's schema (:data:`SCHEMAS`, in :mod:`kforge.messages.payloads`).
:func:`decode_payload` checks a payload against its schema and returns the
schema value; anything else is refused with :class:`InvalidRequest` naming
the field.  :func:`encode_payload` is the inverse.  The codes beyond the
seed's tables are in :mod:`kforge.messages.codes` (and ``docs/engine.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from kforge.core import InvalidRequest, KingdomError
from kforge.messages.codes import ExtensionCode, ReplyCode, code_name
from kforge.messages.envelope import MAX_MESSAGE_BYTES, Envelope
from kforge.messages.mailbox import Mailbox
from kforge.messages.payloads import SCHEMAS, ErrorReply
from kforge.wire import Schema, convert, encode_msgpack
from kforge.wire import decode_msgpack as _decode_msgpack

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SCHEMAS",
    "Envelope",
    "ExtensionCode",
    "InvalidRequest",
    "Mailbox",
    "ReplyCode",
    "code_name",
    "decode_payload",
    "encode_payload",
    "error_payload",
    "kingdom_error_from_payload",
    "pack",
    "unpack",
]


def _schema(code: int) -> type[Schema]:
    schema = SCHEMAS.get(code)
    if schema is None:
        raise InvalidRequest("envelope.code", f"unknown message code 0x{code:04X}")
    return schema


def decode_payload(code: int, payload: bytes) -> Any:
    """Check ``payload`` against the schema of ``code`` and return its value.

    Raises :class:`InvalidRequest` naming the field for anything that does not fit,
    and for a code that has no schema.
    """
    schema = _schema(code)
    if isinstance(payload, bytes | bytearray) and len(payload) > MAX_MESSAGE_BYTES:
        raise InvalidRequest(
            "payload", f"{len(payload)} bytes is over the {MAX_MESSAGE_BYTES} limit"
        )
    return _decode_msgpack(payload, schema, "payload")


def encode_payload(code: int, value: Schema | Mapping[str, Any]) -> bytes:
    """The msgpack payload of ``value`` (``code``'s schema value, or a mapping of its fields).

    Raises ``InvalidRequest`` for a mapping that does not fit the schema.
    """
    schema = _schema(code)
    if not isinstance(value, schema):
        value = convert(value, schema, "payload")
    return encode_msgpack(value)


def error_payload(error: KingdomError) -> bytes:
    """The ``ReplyCode.ERROR`` payload of ``error``."""
    return encode_msgpack(ErrorReply(error.code, error.category, error.message, error.context))


def kingdom_error_from_payload(payload: bytes) -> KingdomError:
    """The ``KingdomError`` an ERROR reply carries."""
    reply: ErrorReply = decode_payload(ReplyCode.ERROR, payload)
    return KingdomError(reply.code, reply.category, reply.message, dict(reply.context))


def pack(value: Any) -> bytes:
    """msgpack bytes of plain data (ids as 32-byte binaries; maps keep their order)."""
    return encode_msgpack(value)


def unpack(raw: bytes, what: str = "payload") -> Any:
    """Decode msgpack ``raw`` as plain data; any problem is :class:`InvalidRequest` naming ``what``."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise InvalidRequest(what, f"must be bytes, got {type(raw).__name__}")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidRequest(what, f"{len(raw)} bytes is over the {MAX_MESSAGE_BYTES} limit")
    try:
        return msgspec.msgpack.decode(raw)
    except (msgspec.DecodeError, ValueError) as error:  # UnicodeDecodeError: a bad str
        raise InvalidRequest(what, f"not valid msgpack ({type(error).__name__})") from None
