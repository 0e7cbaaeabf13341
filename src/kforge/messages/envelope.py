"""The envelope every Forge message travels in."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from kforge.core import AgentId, Hash256, InvalidRequest
from kforge.wire import U16, U64, Schema, decode_msgpack, encode_msgpack

__all__ = ["MAX_MESSAGE_BYTES", "Envelope"]

#: The largest payload or envelope accepted (16 MiB).
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024


class Envelope(Schema, frozen=True):
    """One message: who sent it, which code, its msgpack payload, when.

    ``timestamp`` is milliseconds since the Unix epoch; ``reply_to`` is the id of
    the request a reply answers (``None`` for requests).  On the wire it is a
    msgpack map of these fields.  Construction and :meth:`decode` refuse anything
    that does not fit with :class:`InvalidRequest` naming the field
    (``envelope.sender``).
    """

    id: Hash256
    sender: AgentId
    code: U16
    payload: bytes = b""
    timestamp: U64 = 0
    reply_to: Hash256 | None = None

    def __post_init__(self) -> None:
        # Performance note: checked field by field (not through the schema): every message
        # and every reply is built here.
        if not isinstance(self.id, Hash256):
            raise InvalidRequest("envelope.id", f"expected a Hash256, got {type(self.id).__name__}")
        if not isinstance(self.sender, Hash256):
            raise InvalidRequest(
                "envelope.sender", f"expected an AgentId, got {type(self.sender).__name__}"
            )
        if not isinstance(self.sender, AgentId):  # an agent given as a plain id
            msgspec.structs.force_setattr(self, "sender", AgentId(self.sender.raw))
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
            or not 0 <= self.timestamp < 1 << 64
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
        payload: Any,
        *,
        id: Hash256,
        timestamp: int = 0,
        reply_to: Hash256 | None = None,
    ) -> Envelope:
        """An envelope whose payload encodes ``payload`` (a schema value of ``code``'s type,
        or a mapping of its fields)."""
        from kforge.messages import encode_payload

        return cls(id, sender, int(code), encode_payload(code, payload), timestamp, reply_to)

    def values(self) -> Any:
        """The payload decoded under this envelope's code (see :func:`decode_payload`)."""
        from kforge.messages import decode_payload

        return decode_payload(self.code, self.payload)

    def encode(self) -> bytes:
        """The envelope as a msgpack map."""
        return encode_msgpack(self)

    @classmethod
    def decode(cls, raw: bytes) -> Envelope:
        """Parse :meth:`encode`'s form; raises :class:`InvalidRequest` naming the field."""
        if isinstance(raw, bytes | bytearray | memoryview) and len(raw) > MAX_MESSAGE_BYTES:
            raise InvalidRequest(
                "envelope", f"{len(raw)} bytes is over the {MAX_MESSAGE_BYTES} limit"
            )
        return decode_msgpack(raw, cls, "envelope", "envelope")
