"""The static data section of a compiled program: static objects, globals, tables.

Everything here counts against the sandbox's memory quota, so items are only
*declared* while code is compiled and laid out when the code generator first
needs an address: a program carries the constants and globals of the functions it
links, not those of the whole runtime.  Equal strings are one object.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping

from kforge.starlark import layout as L

_U64 = struct.Struct("<Q")


def _header(tag: int) -> int:
    return tag | L.FLAG_STATIC | L.FLAG_FROZEN


def string_object(tag: int, payload: bytes) -> bytes:
    """A static str or bytes object: header (its hash computed at run time), length,
    bytes."""
    padded = payload + bytes(-len(payload) % 8)
    return _U64.pack(_header(tag)) + _U64.pack(len(payload)) + padded


def string_name(payload: bytes, tag: int = L.TAG_STRING) -> str:
    """The data name of the static string (or bytes) object with these bytes."""
    kind = "s" if tag == L.TAG_STRING else "b"
    if len(payload) <= 24 and payload.isascii() and payload.isalnum():
        return f"{kind}:{payload.decode()}"
    return f"{kind}#{hashlib.sha256(payload).hexdigest()[:24]}"


def words(values: list[int]) -> bytes:
    return b"".join(_U64.pack(v & 0xFFFF_FFFF_FFFF_FFFF) for v in values)


#: A data item whose words are numbers or the names of other data items (their addresses).
Record = tuple[int | str, ...]


class Declarations:
    """Named data items that code may refer to, laid out only if referred to."""

    def __init__(self) -> None:
        self.items: dict[str, bytes | Record] = {}

    def record(self, name: str, fields: Record) -> str:
        """A data item of words, some of them the addresses of other items."""
        previous = self.items.get(name)
        if previous is not None and previous != fields:
            raise ValueError(f"data item {name} declared twice with different contents")
        self.items[name] = fields
        return name

    def declare(self, name: str, blob: bytes) -> str:
        previous = self.items.get(name)
        if previous is not None and previous != blob:
            raise ValueError(f"data item {name} declared twice with different contents")
        self.items[name] = blob
        return name

    def string(self, payload: bytes, tag: int = L.TAG_STRING) -> str:
        return self.declare(string_name(payload, tag), string_object(tag, payload))

    def word(self, name: str, value: int = 0) -> str:
        return self.declare(name, _U64.pack(value & 0xFFFF_FFFF_FFFF_FFFF))


class DataLayout:
    """Lays out declared items from :data:`kforge.starlark.layout.STATIC_DATA_START`."""

    def __init__(self, *declarations: Mapping[str, bytes | Record]) -> None:
        self.blob = bytearray(L.STATIC_DATA_START)
        self.blob[L.NONE_ADDRESS : L.NONE_ADDRESS + 8] = _U64.pack(_header(L.TAG_NONE))
        self.blob[L.FALSE_ADDRESS : L.FALSE_ADDRESS + 8] = _U64.pack(_header(L.TAG_BOOL))
        self.blob[L.TRUE_ADDRESS : L.TRUE_ADDRESS + 8] = _U64.pack(_header(L.TAG_BOOL) | 1 << 16)
        self.declared: dict[str, bytes | Record] = {}
        for table in declarations:
            self.declared.update(table)
        self.placed: dict[str, int] = {}

    def address(self, name: str) -> int:
        """The address of item ``name``, laying it out the first time."""
        address = self.placed.get(name)
        if address is None:
            blob = self.declared.get(name)
            if blob is None:
                raise KeyError(f"undeclared data item {name!r}")
            if isinstance(blob, tuple):
                resolved = [f if isinstance(f, int) else self.address(f) for f in blob]
                blob = words(resolved)
            address = self.place(name, blob)
        return address

    def place(self, name: str, blob: bytes) -> int:
        self.blob += bytes(-len(self.blob) % 8)
        address = len(self.blob)
        self.blob += blob
        self.placed[name] = address
        return address

    def finish(self) -> bytes:
        self.blob += bytes(-len(self.blob) % 8)
        return bytes(self.blob)
