"""The wire codecs: one schema per payload, result and record, in msgpack, JSON and JSON Schema.

Every type that crosses a boundary (a message payload, an engine result, a
journal record, an HTTP body) is a :class:`Schema`: a frozen ``msgspec.Struct``
whose fields and their types are the one definition of its form.  msgspec
validates, encodes and decodes it; this module adds the conventions kforge's
forms share, in one place:

* **Ids** (``Hash256``, ``AgentId``): 32 raw bytes in msgpack, 64 hex digits in JSON.
* **Integers**: :data:`U64` unless the field says narrower (:data:`U8`, :data:`U16`,
  :data:`U32`, :data:`U63`); booleans are never integers.
* **Bytes in msgpack**: binaries.
* **Bytes in JSON** guess nothing.  A bytes field ``name`` (or a list or map of
  bytes) is given as exactly one of ``name`` (UTF-8 text), ``name_hex`` (hex
  digits) or ``name_b64`` (standard base64); two of them, or text that is not
  what its name says, is :class:`~kforge.core.AmbiguousField` (HTTP 422)
  naming the field.  Answers carry ``name_hex``.

Decoding problems are :class:`~kforge.core.InvalidRequest` naming the field
(``memory_quota``, ``endpoints[0].channel``); encoding never fails for a value
that was built from its type.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Final, TypeVar

import msgspec
import msgspec.inspect as mi

from kforge.core import AmbiguousField, Hash256, InvalidRequest

__all__ = [
    "HEX_ID",
    "U8",
    "U16",
    "U32",
    "U63",
    "U64",
    "Schema",
    "checked_value",
    "convert",
    "decode_json",
    "decode_msgpack",
    "encode_json",
    "encode_msgpack",
    "from_json",
    "json_schemas",
    "json_value",
    "parse_json",
    "to_builtins",
]

T = TypeVar("T")

U8 = Annotated[int, msgspec.Meta(ge=0, le=0xFF)]
U16 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF_FFFF)]
U63 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
# msgspec's integers stop at 2^64-1: ``ge=0`` makes a u64 (a bound above int64 is not accepted).
U64 = Annotated[int, msgspec.Meta(ge=0, extra_json_schema={"maximum": (1 << 64) - 1})]
_U64_LIMIT: Final = 1 << 64

#: The JSON Schema of an id.
HEX_ID: Final = {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}
_HEX_BYTES: Final = {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$"}
_B64_BYTES: Final = {"type": "string", "contentEncoding": "base64"}
_TEXT: Final = {"type": "string"}


class Schema(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A wire form: frozen, unknown fields refused, fields in declaration order.

    Performance note: ``gc=False``: a schema value holds plain data and never a
    reference back to itself, so the garbage collector need not track it (16 bytes
    less each; an idle sandbox keeps its creation request).
    """


# ----------------------------------------------------------------- ids: the one custom type


def _encode_id_raw(value: Any) -> Any:
    if isinstance(value, Hash256):
        return value.raw
    raise NotImplementedError(f"no wire form for {type(value).__name__}")


def _encode_id_hex(value: Any) -> Any:
    if isinstance(value, Hash256):
        return value.hex
    raise NotImplementedError(f"no wire form for {type(value).__name__}")


def _decode_id(kind: type, value: Any) -> Any:
    """An id from its Python, msgpack (32 bytes) or JSON (64 hex digits) form."""
    if isinstance(kind, type) and issubclass(kind, Hash256):
        if isinstance(value, Hash256):
            return value if type(value) is kind else kind(value.raw)
        if isinstance(value, bytes | bytearray | memoryview):
            if len(value) != Hash256.SIZE:
                raise ValueError(f"expected a 32-byte id, got {len(value)} bytes")
            return kind(bytes(value))
        if isinstance(value, str):
            return kind.from_hex(value)
        raise ValueError(f"expected an id, got {type(value).__name__}")
    raise NotImplementedError(f"no wire form for {kind!r}")


def _decode_id_raw(kind: type, value: Any) -> Any:
    """An id from msgpack: 32 bytes, nothing else."""
    if isinstance(value, str):
        raise ValueError("expected a 32-byte id, got str")
    return _decode_id(kind, value)


def _id_schema(kind: type) -> dict[str, Any]:
    if isinstance(kind, type) and issubclass(kind, Hash256):
        return dict(HEX_ID)
    raise NotImplementedError(f"no JSON Schema for {kind!r}")


# Performance note: one encoder, and one decoder per type, made once.
_MSGPACK: Final = msgspec.msgpack.Encoder(enc_hook=_encode_id_raw)


@cache
def _msgpack_decoder(kind: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(kind, dec_hook=_decode_id_raw)


# ----------------------------------------------------------------- errors


_PATH = re.compile(r" - at (?:`(?P<key>key)` in )?`\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<name>[^`]+)`")
_UNKNOWN = re.compile(r"unknown field `(?P<name>[^`]+)`")


def _refusal(
    error: msgspec.ValidationError | msgspec.DecodeError, what: str, prefix: str = ""
) -> InvalidRequest:
    """msgspec's message (``Expected `int` >= 0 - at `$.quota```) as the field it names."""
    message = str(error)
    found = _PATH.search(message)
    path = found.group("path").lstrip(".") if found else ""
    if found and found.group("key"):
        path = f"{path or what} key"
    reason = message[: found.start()] if found else message
    for pattern, said in ((_MISSING, "missing"), (_UNKNOWN, "unknown field")):
        named = pattern.search(reason)
        if named:
            path = f"{path}.{named.group('name')}" if path else named.group("name")
            reason = said
            break
    field = f"{prefix}.{path}" if prefix and path else (path or prefix or what)
    return InvalidRequest(field, reason[:1].lower() + reason[1:])


# ----------------------------------------------------------------- msgpack


def encode_msgpack(value: Any) -> bytes:
    """msgpack bytes of a schema value (or of plain data holding ids)."""
    return _MSGPACK.encode(value)


def decode_msgpack(
    raw: bytes | bytearray | memoryview, kind: type[T], what: str = "payload", prefix: str = ""
) -> T:
    """``raw`` checked against ``kind``; :class:`InvalidRequest` naming the field otherwise
    (``prefix.field`` when a ``prefix`` is given, e.g. ``envelope.sender``)."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise InvalidRequest(what, f"must be bytes, got {type(raw).__name__}")
    try:
        decoded: T = _msgpack_decoder(kind).decode(raw)  # type: ignore[arg-type]
    except msgspec.ValidationError as error:
        raise _refusal(error, what, prefix) from None
    except (msgspec.DecodeError, ValueError):  # UnicodeDecodeError: a str that is not UTF-8
        raise InvalidRequest(what, "not valid msgpack") from None
    return decoded


def convert(values: Any, kind: type[T], what: str = "payload", prefix: str = "") -> T:
    """Plain Python data (maps, lists, ids, bytes) checked into ``kind``."""
    try:
        # bytes must be bytes: no text read as base64 behind the caller's back
        converted: T = msgspec.convert(
            values, kind, dec_hook=_decode_id, builtin_types=(bytes, bytearray)
        )
    except msgspec.ValidationError as error:
        raise _refusal(error, what, prefix) from None
    return converted


def checked_value(value: T, what: str, prefix: str = "") -> T:
    """``value`` (a schema value built in Python, whose fields nothing checked) with every
    field's type checked against its schema; :class:`InvalidRequest` naming the field."""
    _check_id_kinds(value, prefix)
    try:
        plain = to_builtins(value)
    except (TypeError, ValueError) as error:
        raise InvalidRequest(prefix or what, str(error)) from None
    return convert(plain, type(value), what, prefix)


@cache
def _id_fields(kind: type) -> tuple[tuple[str, str, type, bool], ...]:
    """``(attribute, wire name, id class, holds many)`` of each id field of ``kind``."""
    info = mi.type_info(kind)
    if not isinstance(info, mi.StructType):
        return ()
    found = []
    for field in info.fields:
        inner = _unwrap(field.type)
        many = isinstance(inner, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType)
        if many:
            inner = _unwrap(inner.item_type)
        if isinstance(inner, mi.CustomType) and issubclass(inner.cls, Hash256):
            found.append((field.name, field.encode_name, inner.cls, many))
    return tuple(found)


def _check_id_kinds(value: Any, prefix: str) -> None:
    """An id field must hold an id of its kind: 32 bytes, or a plain ``Hash256`` where an
    ``AgentId`` is due, are refused (their plain forms would not tell them apart)."""
    kind: type = type(value)
    for attribute, name, id_class, many in _id_fields(kind):
        given = getattr(value, attribute, None)
        if many:
            items = list(given) if isinstance(given, list | tuple | set | frozenset) else []
        else:
            items = [given]
        for item in items:
            if item is not None and not isinstance(item, id_class):
                path = f"{prefix}.{name}" if prefix else name
                raise InvalidRequest(
                    path, f"expected an {id_class.__name__}, got a {type(item).__name__}"
                )


def to_builtins(value: Any) -> Any:
    """Plain msgpack-ready data of a schema value: maps, lists, ids as 32 raw bytes."""
    return msgspec.to_builtins(value, builtin_types=(bytes, bytearray), enc_hook=_encode_id_raw)


# ----------------------------------------------------------------- JSON: which fields are bytes


@dataclass(frozen=True, slots=True)
class _Field:
    """How one field of a schema looks in JSON."""

    name: str
    #: "bytes" for a bytes field (or a list or map of them), "struct" for a nested
    #: schema (or a list of them), "" for anything else.
    shape: str
    #: For "bytes": "one", "list" or "map"; for "struct": "one" or "list".
    arity: str = "one"
    nested: type | None = None


def _unwrap(info: Any) -> Any:
    """The type under ``X | None``."""
    if isinstance(info, mi.UnionType):
        rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(rest) == 1:
            return rest[0]
    return info


def _classify(name: str, info: Any) -> _Field:
    info = _unwrap(info)
    if isinstance(info, mi.BytesType | mi.ByteArrayType):
        return _Field(name, "bytes")
    if isinstance(info, mi.StructType):
        return _Field(name, "struct", "one", info.cls)
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        item = _unwrap(info.item_type)
        if isinstance(item, mi.BytesType | mi.ByteArrayType):
            return _Field(name, "bytes", "list")
        if isinstance(item, mi.StructType):
            return _Field(name, "struct", "list", item.cls)
    if isinstance(info, mi.DictType) and isinstance(
        _unwrap(info.value_type), mi.BytesType | mi.ByteArrayType
    ):
        return _Field(name, "bytes", "map")
    return _Field(name, "")


@cache
def _fields(kind: type) -> tuple[_Field, ...]:
    info = mi.type_info(kind)
    if not isinstance(info, mi.StructType):
        return ()
    return tuple(_classify(field.encode_name, field.type) for field in info.fields)


# ----------------------------------------------------------------- JSON: reading


def _text_bytes(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise AmbiguousField(path, f"expected UTF-8 text, got {_json_type(value)}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise AmbiguousField(path, "text that is not valid Unicode (a lone surrogate)") from None


def _hex_bytes(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise AmbiguousField(path, f"expected hex digits, got {_json_type(value)}")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise AmbiguousField(path, f"not an even number of hex digits: {value!r:.80}") from None


def _b64_bytes(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise AmbiguousField(path, f"expected base64 text, got {_json_type(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise AmbiguousField(path, f"not standard base64: {value!r:.80}") from None


_READERS: Final[dict[str, Callable[[Any, str], bytes]]] = {
    "": _text_bytes,
    "_hex": _hex_bytes,
    "_b64": _b64_bytes,
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def _read_bytes(field: _Field, given: Any, path: str, read: Callable[[Any, str], bytes]) -> Any:
    if given is None:
        return None
    if field.arity == "one":
        return read(given, path)
    if field.arity == "list":
        if not isinstance(given, list):
            raise InvalidRequest(path, f"expected an array, got {_json_type(given)}")
        return [read(item, f"{path}[{index}]") for index, item in enumerate(given)]
    if not isinstance(given, dict):
        raise InvalidRequest(path, f"expected an object, got {_json_type(given)}")
    return {read(key, f"{path} key"): read(item, f"{path}[{key!r}]") for key, item in given.items()}


def _check_numbers(value: Any, path: str) -> None:
    """JSON numbers beyond 64 bits (msgspec checks the rest)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(1 << 63) <= value < _U64_LIMIT:
            raise InvalidRequest(path, f"{value} does not fit in 64 bits")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, f"{path}[{index}]")


def _from_json_fields(kind: type, given: Any, path: str) -> Any:
    """JSON ``given`` as the plain data ``kind`` converts from (bytes decoded by field name)."""
    if not isinstance(given, dict):
        raise InvalidRequest(path or "body", f"expected an object, got {_json_type(given)}")
    prefix = f"{path}." if path else ""
    plain = dict(given)
    for field in _fields(kind):
        name = field.name
        if field.shape == "bytes":
            present = [suffix for suffix in _READERS if name + suffix in plain]
            if len(present) > 1:
                names = " and ".join(repr(name + suffix) for suffix in present)
                raise AmbiguousField(prefix + name, f"given as {names}: give exactly one encoding")
            if present:
                suffix = present[0]
                raw = plain.pop(name + suffix)
                plain[name] = _read_bytes(field, raw, prefix + name + suffix, _READERS[suffix])
        elif field.shape == "struct" and plain.get(name) is not None:
            nested = field.nested
            assert nested is not None
            if field.arity == "one":
                plain[name] = _from_json_fields(nested, plain[name], prefix + name)
            elif isinstance(plain[name], list):
                plain[name] = [
                    _from_json_fields(nested, item, f"{prefix}{name}[{index}]")
                    for index, item in enumerate(plain[name])
                ]
        elif name in plain:
            _check_numbers(plain[name], prefix + name)
    return plain


def from_json(given: Any, kind: type[T], what: str = "body") -> T:
    """A decoded JSON value (``json.loads``'s) checked into ``kind`` by the JSON conventions."""
    return convert(_from_json_fields(kind, given, ""), kind, what)


def parse_json(raw: bytes, what: str = "body") -> Any:
    """JSON bytes as plain data (an empty body is ``{}``); ``InvalidRequest`` naming
    ``what`` for anything that is not JSON, text that is not UTF-8 included."""
    if not raw.strip():
        return {}
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        raise InvalidRequest(what, f"not valid JSON ({error})") from None


def decode_json(raw: bytes, kind: type[T], what: str = "body") -> T:
    """JSON bytes checked into ``kind``; an empty body is ``{}``."""
    return from_json(parse_json(raw, what), kind, what)


# ----------------------------------------------------------------- JSON: writing


def _hex_of(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [_hex_of(item) for item in value]
    if isinstance(value, dict):
        return {_hex_of(key): _hex_of(item) for key, item in value.items()}
    return value


def _json_shape(kind: type | None, value: Any) -> Any:
    """Plain data (``to_builtins``' with raw bytes) in the JSON conventions."""
    if isinstance(value, list | tuple):
        return [_json_shape(kind, item) for item in value]
    if not isinstance(value, dict):
        return _hex_of(value) if isinstance(value, bytes | bytearray) else value
    fields = {field.name: field for field in _fields(kind)} if kind is not None else {}
    shaped: dict[str, Any] = {}
    for key, item in value.items():
        field = fields.get(key)
        if field is not None and field.shape == "bytes":
            shaped[f"{key}_hex"] = _hex_of(item)
        elif field is not None and field.shape == "struct":
            shaped[key] = _json_shape(field.nested, item)
        elif field is None and isinstance(item, bytes | bytearray):
            shaped[f"{key}_hex"] = item.hex()  # plain maps: a bytes value says what it is
        else:
            shaped[key] = _json_shape(None, item)
    return shaped


def json_value(value: Any) -> Any:
    """``value`` (a schema value, or plain data holding them) as JSON-ready data."""
    plain = msgspec.to_builtins(value, builtin_types=(bytes, bytearray), enc_hook=_encode_id_hex)
    return _json_shape(type(value) if isinstance(value, msgspec.Struct) else None, plain)


def encode_json(value: Any) -> bytes:
    """JSON bytes of ``value`` by the JSON conventions."""
    return msgspec.json.encode(json_value(value))


# ----------------------------------------------------------------- JSON Schema

_REF = "#/components/schemas/"
_INPUT = "Input"


def _bytes_schema(base: dict[str, Any], arity: str, nullable: bool) -> dict[str, Any]:
    schema: dict[str, Any] = dict(base)
    if arity == "list":
        schema = {"type": "array", "items": schema}
    elif arity == "map":
        schema = {"type": "object", "additionalProperties": schema}
    return {"anyOf": [schema, {"type": "null"}]} if nullable else schema


def _nullable(schema: dict[str, Any]) -> bool:
    return any(part.get("type") == "null" for part in schema.get("anyOf", ()))


def _rewrite_refs(value: Any) -> Any:
    """Point every ``$ref`` at the request (``…Input``) form of its component."""
    if isinstance(value, dict):
        return {
            key: (item + _INPUT if key == "$ref" else _rewrite_refs(item))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_rewrite_refs(item) for item in value]
    return value


def _component(kind: type, schema: dict[str, Any], request: bool) -> dict[str, Any]:
    """A struct's component with its bytes fields in the JSON convention."""
    properties: dict[str, Any] = {}
    required = [name for name in schema.get("required", ())]
    choices: list[dict[str, Any]] = []
    fields = {field.name: field for field in _fields(kind)}
    for name, prop in schema.get("properties", {}).items():
        field = fields.get(name)
        if field is None or field.shape != "bytes":
            properties[name] = _rewrite_refs(prop) if request else prop
            continue
        nullable = _nullable(prop)
        if not request:
            properties[f"{name}_hex"] = _bytes_schema(_HEX_BYTES, field.arity, nullable)
            continue
        for suffix, base in (("", _TEXT), ("_hex", _HEX_BYTES), ("_b64", _B64_BYTES)):
            properties[name + suffix] = _bytes_schema(base, field.arity, nullable)
        exactly_one = [{"required": [name + suffix]} for suffix in _READERS]
        if name in required:
            required.remove(name)
            choices.append({"oneOf": exactly_one})
        else:
            choices.append({"not": {"anyOf": _pairs(name)}})
    component: dict[str, Any] = {
        "title": schema.get("title", kind.__name__),
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if "description" in schema:
        component["description"] = schema["description"]
    if not request:
        required = [
            f"{name}_hex" if name in fields and fields[name].shape == "bytes" else name
            for name in schema.get("required", ())
        ]
    if required:
        component["required"] = required
    if choices:
        component["allOf"] = choices
    return component


def _pairs(name: str) -> list[dict[str, Any]]:
    """Any two encodings of ``name`` given together."""
    names = [name + suffix for suffix in _READERS]
    return [
        {"required": [first, second]}
        for index, first in enumerate(names)
        for second in names[index + 1 :]
    ]


def json_schemas(kinds: Iterable[type]) -> dict[str, dict[str, Any]]:
    """OpenAPI components for ``kinds`` and every schema they hold.

    Each schema ``X`` is there as ``X`` (what answers carry) and ``XInput`` (what
    requests may give); refer to them as ``#/components/schemas/X``.
    """
    kinds = tuple(kinds)
    _, components = msgspec.json.schema_components(
        kinds, schema_hook=_id_schema, ref_template=_REF + "{name}"
    )
    structs = {_struct_named(kinds, name): name for name in components}
    documents: dict[str, dict[str, Any]] = {}
    for kind, name in structs.items():
        schema = components[name]
        if kind is None:  # enums and other non-struct components
            documents[name] = schema
            documents[name + _INPUT] = schema
            continue
        documents[name] = _component(kind, schema, request=False)
        documents[name + _INPUT] = _component(kind, schema, request=True)
    return documents


def _struct_named(kinds: tuple[type, ...], name: str) -> type | None:
    for kind in _reachable(kinds):
        if kind.__name__ == name:
            return kind
    return None


def _reachable(kinds: Iterable[type]) -> list[type]:
    """Every struct type ``kinds`` hold, themselves included."""
    seen: list[type] = []
    pending = list(kinds)
    while pending:
        kind = pending.pop()
        if kind in seen or not (isinstance(kind, type) and issubclass(kind, msgspec.Struct)):
            continue
        seen.append(kind)
        pending += [field.nested for field in _fields(kind) if field.nested is not None]
    return seen


def schema_ref(kind: type, *, request: bool = False) -> dict[str, str]:
    """A ``$ref`` to ``kind``'s component (its request form with ``request``)."""
    return {"$ref": _REF + kind.__name__ + (_INPUT if request else "")}
