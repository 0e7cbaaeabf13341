"""Request and response bodies: JSON or msgpack, each read and written by its schema.

Bodies are chosen by ``Content-Type`` (request) and ``Accept`` (response,
defaulting to the request's):

- ``application/msgpack``: exactly the message wire form (ids and byte
  strings as msgpack binaries);
- ``application/json``: the JSON conventions of :mod:`kforge.wire` (ids as 64
  hex digits; a bytes field ``name`` given as one of ``name`` (text),
  ``name_hex`` or ``name_b64``, answered as ``name_hex``).

Both decode through the same schemas, so a field that does not fit is refused
with the same ``InvalidRequest`` (and field path) whichever encoding it came in.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from kforge.messages import unpack
from kforge.wire import decode_json, decode_msgpack, encode_json, encode_msgpack, parse_json

__all__ = [
    "JSON",
    "MSGPACK",
    "BodyError",
    "decode_body",
    "decode_plain",
    "encode_body",
    "is_msgpack",
    "wants_msgpack",
]

T = TypeVar("T")

JSON: Final = "application/json"
MSGPACK: Final = "application/msgpack"
_MSGPACK_TYPES: Final = (MSGPACK, "application/x-msgpack")


class BodyError(Exception):
    """A body that cannot be read at all: wrong media type (415) or too large (413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def is_msgpack(content_type: str | None) -> bool:
    """Whether a body of this ``Content-Type`` is msgpack (else JSON; others are refused)."""
    kind = media_type(content_type)
    if kind in _MSGPACK_TYPES:
        return True
    if kind not in ("", JSON):
        raise BodyError(415, f"unsupported Content-Type {kind!r}: use {JSON} or {MSGPACK}")
    return False


def wants_msgpack(accept: str | None, content_type: str | None) -> bool:
    """msgpack replies when asked for by ``Accept``, or when the request came as msgpack."""
    accepted = [media_type(part) for part in (accept or "").split(",")]
    if any(kind in accepted for kind in _MSGPACK_TYPES):
        return True
    if JSON in accepted:
        return False
    return media_type(content_type) in _MSGPACK_TYPES


def decode_body(raw: bytes, content_type: str | None, kind: type[T]) -> T:
    """The body checked into ``kind`` (an empty body is ``{}``)."""
    if is_msgpack(content_type):
        return decode_msgpack(raw or b"\x80", kind, "body")
    return decode_json(raw, kind, "body")


def decode_plain(raw: bytes, content_type: str | None) -> tuple[Any, bool]:
    """A body as plain data, and whether it was msgpack (an empty body is ``{}``)."""
    if is_msgpack(content_type):
        return (unpack(raw, "body") if raw else {}), True
    return parse_json(raw, "body"), False


def encode_body(value: Any, as_msgpack: bool) -> tuple[bytes, str]:
    """The response bytes and their media type."""
    if as_msgpack:
        return encode_msgpack(value), MSGPACK
    return encode_json(value), JSON
