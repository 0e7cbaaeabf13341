"""Moving a machine's data memory into wasm memory and back.

Used when a machine is bound to a wasm instance and when it is unbound (see
:mod:`kforge.fast.runtime`): from then on its memory *is* the wasm memory and
slices copy nothing.  Small memories are copied whole.  Large ones are compared
chunk by chunk and only differing chunks are written: untouched pages of both
sides are the kernel's shared zero page, so reading them costs no memory, while
writing them would commit the whole quota.  When the destination is known to be
all zero (a new instance), the source is compared with a zero chunk instead, so
the destination's pages are not even read.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Any, Final

__all__ = ["SPARSE_ABOVE", "copy_in", "copy_out"]

#: Memories larger than this are synchronised chunk by chunk (the size ``kforge.memory`` maps).
SPARSE_ABOVE: Final = 1 << 20
_CHUNK: Final = 1 << 16


def _load_memcmp() -> Callable[[int, int, int], int] | None:
    try:
        library = ctypes.CDLL(ctypes.util.find_library("c"))
        memcmp = library.memcmp
    except (OSError, AttributeError, TypeError):
        return None
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    memcmp.restype = ctypes.c_int
    return memcmp


_memcmp = _load_memcmp()
_ZERO_CHUNK: Final = bytearray(_CHUNK)
_ZERO_ADDRESS: Final = ctypes.addressof((ctypes.c_char * _CHUNK).from_buffer(_ZERO_CHUNK))


def _buffer_address(buffer: Any, size: int) -> tuple[int, object]:
    """The address of a writable buffer, and the object that keeps it pinned."""
    pinned = (ctypes.c_char * size).from_buffer(buffer)
    return ctypes.addressof(pinned), pinned


def _sync(destination: int, source: int, size: int, destination_zero: bool = False) -> None:
    """Make ``size`` bytes at ``destination`` equal those at ``source``.

    ``destination_zero`` promises that the destination holds only zero bytes.
    """
    if size <= SPARSE_ABOVE or _memcmp is None:
        ctypes.memmove(destination, source, size)
        return
    memcmp = _memcmp
    # Performance note: compare first; write (and so commit pages) only where they differ.
    for offset in range(0, size, _CHUNK):
        length = min(_CHUNK, size - offset)
        against = _ZERO_ADDRESS if destination_zero else destination + offset
        if memcmp(against, source + offset, length):
            ctypes.memmove(destination + offset, source + offset, length)


def copy_in(address: int, memory: Any, size: int, *, destination_zero: bool = False) -> None:
    """Copy a machine's memory (a writable buffer of ``size`` bytes) to ``address``.

    ``destination_zero``: the ``size`` bytes at ``address`` are known to be zero.
    """
    source, pinned = _buffer_address(memory, size)
    _sync(address, source, size, destination_zero)
    del pinned


def copy_out(address: int, memory: Any, size: int) -> None:
    """Copy ``size`` bytes at ``address`` back into a machine's memory."""
    destination, pinned = _buffer_address(memory, size)
    _sync(destination, address, size)
    del pinned
