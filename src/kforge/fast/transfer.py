"""Moving a machine's data memory into wasm memory and back.

Used when a machine is bound to a wasm instance and when it is unbound (see
:mod:`kforge.fast.runtime`): from then on its memory *is* the wasm memory and
slices copy nothing.  Small memories are copied whole.  Large ones are compared
chunk by chunk and only differing chunks are written: untouched pages of both
sides are the kernel's shared zero page, so reading them costs no memory, while
writing them would commit the whole quota.  When the destination is known to be
all zero (a new instance), the source is compared with a zero chunk instead, so
the destination's pages are not even read.  And when the source is an
private anonymous mapping (what ``kforge.memory`` makes for a large quota) and Linux's
``/proc/self/pagemap`` says which of its pages were ever present or swapped out,
only those are compared: the others were never touched, so they are zero.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Callable, Iterator
from typing import Any, Final

from kforge.memory import PrivateMapping

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


_PAGEMAP: Final = "/proc/self/pagemap"
_PAGE_SIZE: Final = mmap.PAGESIZE
#: A page's pagemap entry (a little-endian u64) has bit 63 set when the page is present
#: and bit 62 when it is swapped out: both in its last byte.
_TOUCHED_BITS: Final = 0xC0
_TOUCHED: Final = bytes(1 if byte & _TOUCHED_BITS else 0 for byte in range(256))


def _touched_chunks(address: int, size: int) -> Iterator[int] | None:
    """Offsets of the chunks of ``size`` bytes at ``address`` holding a page ever touched,
    or ``None`` when the kernel does not say (then every chunk must be looked at)."""
    if address % _PAGE_SIZE or _CHUNK % _PAGE_SIZE:
        return None
    pages = -(-size // _PAGE_SIZE)
    try:
        descriptor = os.open(_PAGEMAP, os.O_RDONLY)
    except OSError:
        return None
    try:
        entries = os.pread(descriptor, 8 * pages, 8 * (address // _PAGE_SIZE))
    except OSError:
        return None
    finally:
        os.close(descriptor)
    if len(entries) != 8 * pages:
        return None
    # Performance note: one byte per page, in C; then jumps from touched page to touched page.
    touched = entries[7::8].translate(_TOUCHED)
    pages_per_chunk = _CHUNK // _PAGE_SIZE

    def offsets() -> Iterator[int]:
        page = touched.find(1)
        while page != -1:
            chunk = page // pages_per_chunk
            yield chunk * _CHUNK
            page = touched.find(1, (chunk + 1) * pages_per_chunk)

    return offsets()


def _buffer_address(buffer: Any, size: int) -> tuple[int, object]:
    """The address of a writable buffer, and the object that keeps it pinned."""
    pinned = (ctypes.c_char * size).from_buffer(buffer)
    return ctypes.addressof(pinned), pinned


def _sync(
    destination: int,
    source: int,
    size: int,
    destination_zero: bool = False,
    source_anonymous: bool = False,
) -> None:
    """Make ``size`` bytes at ``destination`` equal those at ``source``.

    ``destination_zero`` promises that the destination holds only zero bytes;
    ``source_anonymous`` that the source is a private anonymous mapping (untouched pages
    are zero).
    """
    if size <= SPARSE_ABOVE or _memcmp is None:
        ctypes.memmove(destination, source, size)
        return
    memcmp = _memcmp
    offsets: Iterator[int] | range | None = None
    if destination_zero and source_anonymous:
        offsets = _touched_chunks(source, size)
    # Performance note: compare first; write (and so commit pages) only where they differ.
    for offset in offsets if offsets is not None else range(0, size, _CHUNK):
        length = min(_CHUNK, size - offset)
        against = _ZERO_ADDRESS if destination_zero else destination + offset
        if memcmp(against, source + offset, length):
            ctypes.memmove(destination + offset, source + offset, length)


def copy_in(address: int, memory: Any, size: int, *, destination_zero: bool = False) -> None:
    """Copy a machine's memory (a writable buffer of ``size`` bytes) to ``address``.

    ``destination_zero``: the ``size`` bytes at ``address`` are known to be zero.
    """
    source, pinned = _buffer_address(memory, size)
    _sync(address, source, size, destination_zero, isinstance(memory, PrivateMapping))
    del pinned


def copy_out(address: int, memory: Any, size: int) -> None:
    """Copy ``size`` bytes at ``address`` back into a machine's memory."""
    destination, pinned = _buffer_address(memory, size)
    _sync(destination, address, size)
    del pinned
