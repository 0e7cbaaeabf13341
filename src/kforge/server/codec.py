"""Request and response bodies: JSON or msgpack, checked against the message schemas.

The HTTP bodies are the Forge message payloads (:data:`kforge.messages.SCHEMAS`)
in one of two encodings, chosen by ``Content-Type`` (request) and ``Accept``
(response, defaulting to the request's):

- ``application/msgpack``: exactly the message wire form (ids and byte
  strings as msgpack binaries);
- ``application/json``: the same maps with every binary (ids included) as a
  lower-case hex string, since JSON has no bytes.

Both decode through the same :class:`kforge.messages.Field` schemas, so a bad
field is refused with the same ``InvalidRequest`` (and field path) whichever
encoding it came in.  :func:`json_schema` turns those schemas into the
OpenAPI document's JSON Schemas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, Final

from kforge.core import Hash256
from kforge.messages import (
    BoolField,
    BytesField,
    BytesMapField,
    Field,
    HashField,
    InvalidRequest,
    ListField,
    OptionalField,
    StructField,
    TextField,
    UIntField,
    WireType,
    pack,
    unpack,
)

__all__ = [
    "JSON",
    "MSGPACK",
    "BodyError",
    "decode_body",
    "decode_fields",
    "encode_body",
    "json_schema",
    "json_to_wire",
    "object_schema",
    "to_json",
    "to_wire",
    "wants_msgpack",
]

JSON: Final = "application/json"
MSGPACK: Final = "application/msgpack"
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


class BodyError(Exception):
    """A body that cannot be read at all: wrong media type (415) or too large (413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def wants_msgpack(accept: str | None, content_type: str | None) -> bool:
    """msgpack replies when asked for by ``Accept``, or when the request came as msgpack."""
    accepted = [media_type(part) for part in (accept or "").split(",")]
    if MSGPACK in accepted or "application/x-msgpack" in accepted:
        return True
    if JSON in accepted:
        return False
    return media_type(content_type) in (MSGPACK, "application/x-msgpack")


def decode_body(raw: bytes, content_type: str | None) -> tuple[Any, bool]:
    """The body's value and whether it was msgpack (an empty body is ``{}``)."""
    kind = media_type(content_type)
    if kind in (MSGPACK, "application/x-msgpack"):
        return (unpack(raw, "body") if raw else {}), True
    if kind not in ("", JSON):
        raise BodyError(415, f"unsupported Content-Type {kind!r}: use {JSON} or {MSGPACK}")
    if not raw.strip():
        return {}, False
    try:
        return json.loads(raw), False
    except (ValueError, RecursionError) as error:
        raise InvalidRequest("body", f"not valid JSON ({type(error).__name__})") from None


def decode_fields(fields: Sequence[Field], body: Any, is_msgpack: bool) -> dict[str, Any]:
    """Check ``body`` against ``fields``; returns the values (``Hash256`` for ids).

    Raises ``InvalidRequest`` naming the first field that does not fit.
    """
    wire = body if is_msgpack else json_to_wire(StructField(fields), body, "")
    return StructField(fields).decode(wire, "")


def _hex(value: Any, path: str) -> bytes:
    if not isinstance(value, str) or len(value) % 2 or not set(value) <= _HEX_DIGITS:
        raise InvalidRequest(
            path, f"expected a hex string (JSON has no binaries), got {value!r:.80}"
        )
    return bytes.fromhex(value)


def json_to_wire(kind: WireType, value: Any, path: str) -> Any:
    """``value`` from JSON turned into the msgpack wire form ``kind`` checks."""
    if isinstance(kind, HashField | BytesField):
        return _hex(value, path)
    if isinstance(kind, OptionalField):
        return None if value is None else json_to_wire(kind.inner, value, path)
    if isinstance(kind, ListField) and isinstance(value, list):
        return [
            json_to_wire(kind.item, item, f"{path}[{index}]") for index, item in enumerate(value)
        ]
    if isinstance(kind, BytesMapField) and isinstance(value, dict):
        return {
            _hex(key, f"{path} key"): _hex(item, f"{path}[{key!r}]") for key, item in value.items()
        }
    if isinstance(kind, StructField) and isinstance(value, dict):
        prefix = f"{path}." if path else ""
        known = {spec.name: spec.type for spec in kind.fields}
        return {
            key: json_to_wire(known[key], item, f"{prefix}{key}") if key in known else item
            for key, item in value.items()
        }
    return value  # the schema's decode refuses what does not fit


def to_json(value: Any) -> Any:
    """``value`` as JSON-able data: ids and bytes as hex, enums as their values."""
    if isinstance(value, Hash256):
        return value.hex
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, Enum):
        return to_json(value.value)
    if isinstance(value, Mapping):
        return {_json_key(key): to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(item) for item in value]
    return value


def _json_key(key: Any) -> str:
    converted = to_json(key)
    return converted if isinstance(converted, str) else str(converted)


def to_wire(value: Any) -> Any:
    """``value`` as msgpack-able data: ids as 32-byte binaries, enums as their values."""
    if isinstance(value, Hash256):
        return value.raw
    if isinstance(value, Enum):
        return to_wire(value.value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Mapping):
        return {to_wire(key): to_wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_wire(item) for item in value]
    return value


def encode_body(value: Any, as_msgpack: bool) -> tuple[bytes, str]:
    """The response bytes and their media type."""
    if as_msgpack:
        return pack(to_wire(value)), MSGPACK
    return json.dumps(to_json(value), separators=(",", ":")).encode(), JSON


# ------------------------------------------------------------------ JSON Schema (OpenAPI)

HEX_ID: Final = {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}
HEX_BYTES: Final = {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$"}


def json_schema(kind: WireType) -> dict[str, Any]:
    """The JSON Schema of a wire type in its JSON encoding."""
    if isinstance(kind, HashField):
        return dict(HEX_ID)
    if isinstance(kind, BytesField):
        schema: dict[str, Any] = dict(HEX_BYTES)
        if kind.max_length is not None:
            schema["maxLength"] = 2 * kind.max_length
        return schema
    if isinstance(kind, UIntField):
        return {"type": "integer", "minimum": 0, "maximum": (1 << kind.bits) - 1}
    if isinstance(kind, BoolField):
        return {"type": "boolean"}
    if isinstance(kind, TextField):
        return (
            {"type": "string", "enum": list(kind.choices)} if kind.choices else {"type": "string"}
        )
    if isinstance(kind, OptionalField):
        return {"anyOf": [json_schema(kind.inner), {"type": "null"}]}
    if isinstance(kind, ListField):
        return {"type": "array", "items": json_schema(kind.item), "maxItems": kind.max_items}
    if isinstance(kind, BytesMapField):
        return {
            "type": "object",
            "propertyNames": dict(HEX_BYTES),
            "additionalProperties": dict(HEX_BYTES),
        }
    if isinstance(kind, StructField):
        return object_schema(kind.fields)
    return {}


def object_schema(fields: Sequence[Field]) -> dict[str, Any]:
    """The JSON Schema of a map with these fields (no others allowed)."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {spec.name: json_schema(spec.type) for spec in fields},
        "additionalProperties": False,
    }
    required = [spec.name for spec in fields if spec.required]
    if required:
        schema["required"] = required
    return schema
