"""Moving a machine's data memory into wasm memory and back.

``Machine.memory`` is a ``bytearray`` (or an ``mmap`` above 1 MiB) that the
machine owns, so each compiled slice copies it into the instance's memory 0 and
back (see :mod:`kforge.fast.runtime` for why, and for the change that would make
this unnecessary).  Small memories are copied whole.  Large ones are compared
chunk by chunk and only differing chunks are written: untouched pages of both
sides are the kernel's shared zero page, so reading them costs no memory, while
writing them would commit the whole quota.
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


def _buffer_address(buffer: Any, size: int) -> tuple[int, object]:
    """The address of a writable buffer, and the object that keeps it pinned."""
    pinned = (ctypes.c_char * size).from_buffer(buffer)
    return ctypes.addressof(pinned), pinned


def _sync(destination: int, source: int, size: int) -> None:
    """Make ``size`` bytes at ``destination`` equal those at ``source``."""
    if size <= SPARSE_ABOVE or _memcmp is None:
        ctypes.memmove(destination, source, size)
        return
    memcmp = _memcmp
    # Performance note: compare first; write (and so commit pages) only where they differ.
    for offset in range(0, size, _CHUNK):
        length = min(_CHUNK, size - offset)
        if memcmp(destination + offset, source + offset, length):
            ctypes.memmove(destination + offset, source + offset, length)


def copy_in(address: int, memory: Any, size: int) -> None:
    """Copy a machine's memory (a writable buffer of ``size`` bytes) to ``address``."""
    source, pinned = _buffer_address(memory, size)
    _sync(address, source, size)
    del pinned


def copy_out(address: int, memory: Any, size: int) -> None:
    """Copy ``size`` bytes at ``address`` back into a machine's memory."""
    destination, pinned = _buffer_address(memory, size)
    _sync(destination, address, size)
    del pinned
