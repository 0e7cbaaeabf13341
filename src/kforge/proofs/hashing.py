"""State hashes (docs/proofs.md §2): everything that evolves in a machine, memory hashed per 4 KiB page."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import struct
from collections.abc import Callable
from typing import Any, Final

from kforge.machine import Machine, MachineState
from kforge.memory import allocate_memory

PAGE_SIZE: Final = 4096

_STATE_TAG: Final = b"KFORGE-STATE-V1\x00"
_PAGE_TAG: Final = b"KFORGE-PAGE-V1\x00"
_MEMORY_TAG: Final = b"KFORGE-MEMORY-V1\x00"
_QUEUES_TAG: Final = b"KFORGE-QUEUES-V1\x00"
_STDOUT_TAG: Final = b"KFORGE-STDOUT-V1\x00"
_STDERR_TAG: Final = b"KFORGE-STDERR-V1\x00"

#: State codes in the state hash input (docs/proofs.md §2).
STATE_CODES: Final = {
    MachineState.READY: 0,
    MachineState.RUNNING: 1,
    MachineState.BLOCKED: 2,
    MachineState.HALTED: 3,
    MachineState.FAULTED: 4,
}
_NONE: Final = (1 << 64) - 1
_HEADER: Final = struct.Struct("<BQQBQQBQBQQ")
_REGISTERS: Final = struct.Struct("<256Q")
_U64: Final = struct.Struct("<Q")
_ZERO_PAGE: Final = bytes(PAGE_SIZE)
_ZERO_PAGE_HASH: Final = hashlib.sha256(_PAGE_TAG + _ZERO_PAGE).digest()
#: Ranges up to this long are compared page by page rather than halved again.
_LEAF_SPAN: Final = 16 * PAGE_SIZE
#: The first hash of a memory looks for non-zero bytes in spans this long.
_ZERO_SPAN: Final = 16 * PAGE_SIZE


# =============================================================================
# State hashing
# =============================================================================


def _load_memcmp() -> Callable[[int, int, int], int]:
    """libc ``memcmp`` on addresses, or a slower stand-in that copies both ranges."""
    try:
        memcmp = ctypes.CDLL(ctypes.util.find_library("c")).memcmp
        memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        memcmp.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):
        return lambda a, b, n: int(ctypes.string_at(a, n) != ctypes.string_at(b, n))
    return memcmp


_memcmp: Final = _load_memcmp()
_ZERO_BUFFER: Final = bytearray(_ZERO_SPAN)
_ZERO_ADDRESS: Final = ctypes.addressof((ctypes.c_char * _ZERO_SPAN).from_buffer(_ZERO_BUFFER))


def _page_hash(page: bytes) -> bytes:
    """``H("KFORGE-PAGE-V1\\0" || page)``."""
    if page == _ZERO_PAGE:
        return _ZERO_PAGE_HASH
    # Performance note: one concatenation beats feeding a copied prefix digest.
    return hashlib.sha256(_PAGE_TAG + page).digest()


def _pinned_address(memory: Any, size: int) -> tuple[int, Any]:
    """The address of a machine's memory, and what keeps it there (drop it when done)."""
    try:
        pinned: Any = (ctypes.c_char * size).from_buffer(memory)
    except TypeError:  # not a writable buffer: hash a copy
        pinned = (ctypes.c_char * size).from_buffer(bytearray(memory))
    return ctypes.addressof(pinned), pinned


_NO_MESSAGES: Final = _U64.pack(0)
_EMPTY_QUEUES_HASH: Final = hashlib.sha256(
    _QUEUES_TAG + _NO_MESSAGES * (16 + 1)  # sixteen empty inbound queues, no outbound
).digest()


def queues_hash(machine: Machine) -> bytes:
    """SHA-256 over the inbound queues (channels 0..15 in order), then the outbound list."""
    inbound = machine.inbound
    if not machine.outbound and not any(inbound.values()):
        return _EMPTY_QUEUES_HASH
    parts = [_QUEUES_TAG]
    for channel in range(16):
        queue = inbound.get(channel)
        if not queue:
            parts.append(_NO_MESSAGES)
            continue
        parts.append(_U64.pack(len(queue)))
        for message in queue:
            parts += (_U64.pack(len(message)), message)
    parts.append(_U64.pack(len(machine.outbound)))
    for channel, message in machine.outbound:
        parts += (_U64.pack(channel), _U64.pack(len(message)), message)
    return hashlib.sha256(b"".join(parts)).digest()


class _OutputHash:
    """SHA-256 of a tag and an append-only buffer, fed only the bytes appended since."""

    def __init__(self, tag: bytes) -> None:
        self._tag = tag
        self._digest = hashlib.sha256(tag)
        self._buffer: bytearray | bytes | None = None
        self._length = 0
        self._last = b""

    def digest(self, buffer: bytearray | bytes) -> bytes:
        length = len(buffer)
        if buffer is self._buffer and length == self._length and self._last:
            return self._last
        if buffer is not self._buffer or length < self._length:  # another buffer
            self._digest, self._buffer, self._length = hashlib.sha256(self._tag), buffer, 0
        if length > self._length:
            self._digest.update(buffer[self._length :])
            self._length = length
        self._last = self._digest.copy().digest()
        return self._last


class StateHasher:
    """Incremental :func:`state_hash` of machines over time.

    Keeps a copy of the memory last hashed and its per-page hashes.  Finding the
    changed pages is a ``memcmp`` of the whole memory against the copy, halving
    the ranges that differ down to single pages, so unchanged memory costs one
    ``memcmp`` and no hashing, and the memory hash is recomputed only when a
    page changed.  The copy starts as zeros (lazily mapped for large memories),
    so the first hash reads the machine's memory once and hashes only its
    non-zero pages.
    """

    def __init__(self) -> None:
        self._size = -1
        self._copy: Any = None
        self._copy_pin: Any = None
        self._copy_address = 0
        self._pages: list[bytes] = []
        self._memory_digest = b""
        self._stdout = _OutputHash(_STDOUT_TAG)
        self._stderr = _OutputHash(_STDERR_TAG)

    def hash(self, machine: Machine) -> bytes:
        """The 32-byte state hash of ``machine`` now (docs/proofs.md §2)."""
        fault = machine.fault
        detail = machine.fault_detail
        blocked = machine.blocked_channel
        header = _HEADER.pack(
            STATE_CODES[machine.state],
            machine.pc,
            machine.sp,
            machine.zero | machine.carry << 1 | machine.overflow << 2 | machine.halt << 3,
            machine.ticks_used,
            machine.held_bytes,
            fault is not None,
            0 if fault is None else int(fault),
            detail is not None,
            detail or 0,
            _NONE if blocked is None else blocked,
        )
        return hashlib.sha256(
            b"".join(
                (
                    _STATE_TAG,
                    header,
                    _REGISTERS.pack(*machine.registers),
                    self.memory_hash(machine),
                    queues_hash(machine),
                    self._stdout.digest(machine.stdout),
                    self._stderr.digest(machine.stderr),
                )
            )
        ).digest()

    def memory_hash(self, machine: Machine) -> bytes:
        """SHA-256 of the memory size and the page hashes; only changed pages are rehashed."""
        memory = machine.memory
        size = len(memory)
        fresh = size != self._size
        if fresh:
            self._start(size)
        address, pinned = _pinned_address(memory, size)
        try:
            if fresh:
                changed = self._refresh_from_zero(address, size)
            else:
                changed = self._refresh(address, 0, size)
        finally:
            del pinned
        if changed or fresh:
            self._memory_digest = hashlib.sha256(
                b"".join((_MEMORY_TAG, _U64.pack(size), *self._pages))
            ).digest()
        return self._memory_digest

    def _start(self, size: int) -> None:
        """An all-zero copy of ``size`` bytes and the page hashes of zero memory."""
        self._size = size
        self._copy = allocate_memory(size)
        self._copy_pin = (ctypes.c_char * size).from_buffer(self._copy)
        self._copy_address = ctypes.addressof(self._copy_pin)
        full, tail = divmod(size, PAGE_SIZE)
        self._pages = [_ZERO_PAGE_HASH] * full
        if tail:
            self._pages.append(_page_hash(bytes(tail)))

    def _refresh_from_zero(self, now: int, size: int) -> bool:
        """First hash: refresh only the spans of memory that are not all zero."""
        changed = False
        for start in range(0, size, _ZERO_SPAN):
            length = min(_ZERO_SPAN, size - start)
            if _memcmp(now + start, _ZERO_ADDRESS, length):
                changed |= self._refresh(now, start, start + length)
        return changed

    def _refresh(self, now: int, start: int, end: int) -> bool:
        """Rehash the changed pages of ``[start, end)`` (``start`` page aligned); update the copy."""
        before = self._copy_address
        if not _memcmp(now + start, before + start, end - start):
            return False
        if end - start > _LEAF_SPAN:
            middle = start + (end - start) // 2 // PAGE_SIZE * PAGE_SIZE
            left = self._refresh(now, start, middle)
            return self._refresh(now, middle, end) or left
        # Performance note: one copy of the span, then page compares of bytes slices
        # (a memcmp each) and one write back: fewer ctypes calls than page by page.
        span = ctypes.string_at(now + start, end - start)
        copy, pages = self._copy, self._pages
        for offset in range(0, end - start, PAGE_SIZE):
            page = span[offset : offset + PAGE_SIZE]
            page_start = start + offset
            if page != copy[page_start : page_start + len(page)]:
                pages[page_start // PAGE_SIZE] = _page_hash(page)
        ctypes.memmove(before + start, span, end - start)
        return True


def state_hash(machine: Machine) -> bytes:
    """The 32-byte state hash of ``machine``, computed from scratch."""
    return StateHasher().hash(machine)
