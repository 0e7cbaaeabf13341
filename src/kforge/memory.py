"""Memory layout of a Forge machine: data, environment block, heap, stack.

From address 0: the program's data; the environment block at the smallest
multiple of 8 at or above the data's length; ``heap_start`` right after the
block.  The stack starts at ``memory_quota`` rounded down to a multiple of 8
and grows down towards ``heap_start``.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kforge.core import MemoryQuotaExceeded

__all__ = [
    "MAX_MEMORY_QUOTA",
    "MIN_STACK_BYTES",
    "Layout",
    "Memory",
    "PrivateMapping",
    "allocate_memory",
    "encode_environment",
    "plan_layout",
]

#: The largest memory quota any machine may ask for (4 GiB).
MAX_MEMORY_QUOTA: Final = 1 << 32
#: Room for one stack slot must remain above the heap start.
MIN_STACK_BYTES: Final = 8
#: Quotas above this are backed by an anonymous mapping, zeroed lazily by the OS.
_MAPPED_ABOVE: Final = 1 << 20

#: A machine's data memory: any writable, fixed-size buffer of exactly ``memory_quota``
#: bytes (format ``B``).  :func:`allocate_memory` makes a ``bytearray`` or an ``mmap``;
#: an execution tier may put a ``memoryview`` of its own memory in its place (the fast
#: tier does, for as long as the machine is bound to a wasm instance).
Memory = bytearray | mmap.mmap | memoryview

_U64 = struct.Struct("<Q")


def _align8(value: int) -> int:
    return (value + 7) & ~7


def _padded(blob: bytes) -> bytes:
    return blob + bytes(_align8(len(blob)) - len(blob))


def encode_environment(environment: Mapping[bytes, bytes]) -> bytes:
    """The environment block: u64 count, then per entry (keys in ascending byte order)
    u64 key length, key padded to 8, u64 value length, value padded to 8."""
    parts = [_U64.pack(len(environment))]
    for key in sorted(environment):
        value = environment[key]
        parts += [_U64.pack(len(key)), _padded(key), _U64.pack(len(value)), _padded(value)]
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each region of memory starts."""

    memory_quota: int
    environment_address: int
    environment_length: int
    heap_start: int
    stack_start: int


def plan_layout(data_length: int, environment_length: int, memory_quota: int) -> Layout:
    """Place data, environment and stack in ``memory_quota`` bytes.

    Raises ``MemoryQuotaExceeded`` when data, the environment block and one
    8-byte stack slot do not fit, or the quota is above ``MAX_MEMORY_QUOTA``.
    """
    environment_address = _align8(data_length)
    heap_start = environment_address + environment_length
    needed = heap_start + MIN_STACK_BYTES
    if memory_quota > MAX_MEMORY_QUOTA:
        raise MemoryQuotaExceeded(memory_quota, MAX_MEMORY_QUOTA)
    if needed > memory_quota:
        raise MemoryQuotaExceeded(needed, memory_quota)
    return Layout(
        memory_quota=memory_quota,
        environment_address=environment_address,
        environment_length=environment_length,
        heap_start=heap_start,
        stack_start=memory_quota & ~7,
    )


class PrivateMapping(mmap.mmap):
    """A private anonymous mapping: a page no one ever touched holds zeros, and only this
    process sees it (what lets the fast tier skip untouched pages when it copies one)."""


def allocate_memory(memory_quota: int) -> Memory:
    """Zero-filled memory of exactly ``memory_quota`` bytes.

    Small quotas are a ``bytearray``; large ones an anonymous mapping (a
    :class:`PrivateMapping` where the platform has them), so that untouched pages
    of a big quota cost nothing.
    """
    if memory_quota > _MAPPED_ABOVE:
        if hasattr(mmap, "MAP_PRIVATE"):
            # Private, not shared: reading an untouched page then costs no memory.
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
            return PrivateMapping(-1, memory_quota, flags=flags)
        return mmap.mmap(-1, memory_quota)
    return bytearray(memory_quota)
