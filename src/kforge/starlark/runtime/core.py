"""Allocation, byte buffers, output, and the error path with its traceback.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    Global,
    data_address,
    fault,
    heap_limit,
    heap_pointer,
    inline,
    jump_address,
    load,
    loadb,
    noreturn,
    pop,
    send,
    set_heap_limit,
    set_heap_pointer,
    site_info,
    store,
    storeb,
    text,
)

#: Bytes the heap limit keeps back so that an error can still be reported.
EMERGENCY: Final = 4096
#: Frames a traceback shows from each end of a deep stack.
TRACEBACK_KEEP: Final = 32
#: The largest single message the runtime sends (sandboxes may lower the limit).
CHUNK: Final = 4096

#: Fault codes (``FAULT`` immediates) that end a Starlark program.
FAULT_ERROR: Final = 1
FAULT_DOUBLE: Final = 3

SITE_RUNTIME: Final = 0
SITE_STARLARK: Final = 1
SITE_BOTTOM: Final = 2
SITE_CATCH: Final = 3
#: A call made by a builtin's runtime function (see ``kforge.starlark.emit``).
SITE_BUILTIN_FRAME: Final = 1 << 10

_in_error = Global(__name__)
if TYPE_CHECKING:
    from kforge.starlark.runtime.gc import bump_end, heap_floor
    from kforge.starlark.runtime.generated import gc_alloc
_caught = Global(__name__)
_out = Global(__name__)
#: The environment block the machine laid out (address and length), saved at start.
environment_address = Global(__name__)
environment_length = Global(__name__)


# -- allocation -------------------------------------------------------------------------


def alloc(size: int) -> int:
    """``size`` bytes of zeroed heap, 8-aligned; a Starlark error when there is no room.
    Past the limit, the slow path (``gc_alloc``) collects garbage and tries again."""
    p = heap_pointer()
    if size > heap_limit() - p:
        return gc_alloc(size)
    top = p + ((size + 7) & ~7)
    if top > heap_limit() or top > bump_end.value:
        return gc_alloc(size)
    set_heap_pointer(top)
    return p


def heap_release(mark: int) -> None:
    """Give back the heap above ``mark`` (the heap pointer some time before): for
    temporaries only, made since by code that kept nothing of them (memory above the
    heap pointer must be zeros).  When a collection may have run since the mark (the
    mark is not above the heap's top when the last one ran), nothing is given back:
    the heap above the mark may hold free runs and blocks cut from them, and the next
    collection frees the temporaries anyway."""
    if mark <= heap_floor.value:
        return
    heap_give_back(mark)


def heap_give_back(mark: int) -> None:
    """Zero the heap above ``mark`` and lower the heap pointer to it (no collection may
    have run since the heap pointer was ``mark``)."""
    zero_words(mark, heap_pointer())
    set_heap_pointer(mark)


def zero_words(p: int, end: int) -> None:
    """Zero the words from ``p`` (8-aligned) to ``end``, eight a turn: what goes back to
    the heap is long (dead strings, a traceback's blocks)."""
    while p + 64 <= end:
        store(p, 0)
        store(p + 8, 0)
        store(p + 16, 0)
        store(p + 24, 0)
        store(p + 32, 0)
        store(p + 40, 0)
        store(p + 48, 0)
        store(p + 56, 0)
        p += 64
    while p < end:
        store(p, 0)
        p += 8


def alloc_object(tag: int, size: int) -> int:
    p = alloc(size)
    store(p, tag)
    return p


def alloc_block(tag: int, size: int) -> int:
    """A zeroed block of ``size`` bytes for the runtime's own use, with the header the
    collector walks the heap by: ``TAG_VBLOCK`` if it holds values (which it traces),
    ``TAG_BLOCK`` for bytes and raw words.  Returns the address of its first byte."""
    block = alloc(L.BLOCK_DATA + size)
    store(block, tag)
    store(block + L.BLOCK_CAP, size)
    return block + L.BLOCK_DATA


#: The messages of the errors that find no room: static (named constants), since a
#: cold literal would be made on the heap (see :mod:`kforge.starlark.lowlevel`).
_NO_HEAP: Final = text("out of memory: the program's heap reached its memory quota")
_NO_STACK: Final = text("Starlark stack overflow: calls nested too deeply for the memory quota")


@noreturn
def out_of_memory() -> None:
    error(_NO_HEAP, 0)


@noreturn
def rt_stack_overflow() -> None:
    error(_NO_STACK, 0)


# -- byte buffers ---------------------------------------------------------------------


def buf_new(capacity: int) -> int:
    b = alloc_object(L.TAG_BUFFER, L.BUF_SIZE)
    block = alloc_object(L.TAG_BLOCK, L.BLOCK_DATA + capacity)
    store(block + L.BLOCK_CAP, capacity)
    store(b + L.BUF_CAP, capacity)
    store(b + L.BUF_DATA, block + L.BLOCK_DATA)
    return b


@inline
def buf_reserve(b: int, extra: int) -> int:
    """Make room for ``extra`` more bytes; returns the address where they go."""
    length = load(b + L.BUF_LEN)
    if extra > load(b + L.BUF_CAP) - length:
        buf_grow(b, extra)
    return load(b + L.BUF_DATA) + length


def buf_grow(b: int, extra: int) -> None:
    """Move the buffer's bytes to a block with room for ``extra`` more (at least twice
    its capacity)."""
    length = load(b + L.BUF_LEN)
    capacity = load(b + L.BUF_CAP)
    if extra > (1 << 40):
        out_of_memory()
    wanted = capacity * 2
    if wanted < length + extra:
        wanted = length + extra
    block = alloc_object(L.TAG_BLOCK, L.BLOCK_DATA + wanted)
    store(block + L.BLOCK_CAP, wanted)
    copy_bytes(block + L.BLOCK_DATA, load(b + L.BUF_DATA), length)
    store(b + L.BUF_DATA, block + L.BLOCK_DATA)
    store(b + L.BUF_CAP, wanted)


@inline
def buf_write(b: int, address: int, count: int) -> None:
    target = buf_reserve(b, count)
    copy_bytes(target, address, count)
    store(b + L.BUF_LEN, load(b + L.BUF_LEN) + count)


def buf_byte(b: int, byte: int) -> None:
    target = buf_reserve(b, 1)
    storeb(target, byte)
    store(b + L.BUF_LEN, load(b + L.BUF_LEN) + 1)


def buf_str(b: int, s: int) -> None:
    """Append the bytes of the str (or bytes) object ``s``."""
    buf_write(b, s + L.STR_DATA, load(s + L.STR_LEN))


def buf_decimal(b: int, value: int) -> None:
    """Append the unsigned word ``value`` in decimal."""
    digits = 1
    rest = value
    while rest >= 10:
        rest = rest // 10
        digits += 1
    target = buf_reserve(b, digits)
    position = digits
    while position > 0:
        position -= 1
        storeb(target + position, 48 + value % 10)
        value = value // 10
    store(b + L.BUF_LEN, load(b + L.BUF_LEN) + digits)


def buf_to_string(b: int, tag: int) -> int:
    """A new str (or bytes) object holding the buffer's bytes."""
    length = load(b + L.BUF_LEN)
    s = alloc_object(tag, L.STR_DATA + length)
    store(s + L.STR_LEN, length)
    copy_bytes(s + L.STR_DATA, load(b + L.BUF_DATA), length)
    return s


def copy_bytes(target: int, source: int, count: int) -> None:
    """Copy ``count`` bytes (the ranges may overlap only if ``target <= source``)."""
    words = count >> 3
    i = 0
    while i < words:
        store(target + (i << 3), load(source + (i << 3)))
        i += 1
    i = words << 3
    while i < count:
        storeb(target + i, loadb(source + i))
        i += 1


def send_buffer(channel: int, b: int) -> None:
    """Send the buffer's bytes on stdout (1) or stderr (2) in chunks; empties it."""
    address = load(b + L.BUF_DATA)
    length = load(b + L.BUF_LEN)
    while length > CHUNK:
        if channel == 1:
            send(0, address, CHUNK)
        else:
            send(1, address, CHUNK)
        address += CHUNK
        length -= CHUNK
    if channel == 1:
        send(0, address, length)
    else:
        send(1, address, length)
    store(b + L.BUF_LEN, 0)


def output_buffer() -> int:
    """The one buffer ``print`` writes into (made on first use, then reused)."""
    b = _out.value
    if b == 0:
        b = buf_new(256)
        _out.value = b
    return b


# -- errors ---------------------------------------------------------------------------


@noreturn
def error(message: int, builtin: int) -> None:
    """Raise a Starlark error: unwind to a ``catch`` if one is active, else write the
    traceback and ``Error: message`` (``Error in builtin: message`` when ``builtin``,
    a str, names the builtin that failed) to stderr and end the machine."""
    if _in_error.value != 0:
        fault(FAULT_DOUBLE)
    _in_error.value = 1
    set_heap_limit(heap_limit() + EMERGENCY)
    keep = TRACEBACK_KEEP
    mark = heap_pointer()
    inner = alloc_block(L.TAG_BLOCK, 8 * keep)
    outer = alloc_block(L.TAG_BLOCK, 8 * keep)
    total = 0
    seen_starlark = 0
    return_address = pop()
    while True:
        info = site_info(return_address)
        kind = (info >> 8) & 3
        if kind == SITE_CATCH:
            # the catch lowers the limit again: what the traceback took above it goes
            # back (no collection runs while an error is being raised, but its blocks
            # may have come from another bump region)
            heap_release(mark)
            _in_error.value = 0
            _caught.value = message
            jump_address(return_address)
        pushes = info & 255
        while pushes > 0:
            pop()
            pushes -= 1
        if kind == SITE_BOTTOM:
            break
        # a builtin shows as a frame only below Starlark code it called back into
        if kind == SITE_STARLARK or ((info & SITE_BUILTIN_FRAME) != 0 and seen_starlark != 0):
            if kind == SITE_STARLARK:
                seen_starlark = 1
            if total < keep:
                store(inner + 8 * total, info)
            store(outer + 8 * (total % keep), info)
            total += 1
        return_address = pop()
    b = buf_new(256)
    buf_str(b, text("Traceback (most recent call last):\n"))
    shown_outer = total - keep if total > 2 * keep else 0
    i = total
    while i > 0:
        i -= 1
        if shown_outer > 0 and i < total - keep and i >= keep:
            if i == total - keep - 1:
                buf_str(b, text("  ... ("))
                buf_decimal(b, total - 2 * keep)
                buf_str(b, text(" frames omitted)\n"))
            continue
        info = load(outer + 8 * (i % keep)) if i >= keep else load(inner + 8 * i)
        if load(b + L.BUF_LEN) > 128:  # sent as it goes: the heap may be nearly full
            send_buffer(2, b)
        write_frame(b, info)
    if builtin != 0:
        buf_str(b, text("Error in "))
        buf_str(b, builtin)
        buf_str(b, text(": "))
    else:
        buf_str(b, text("Error: "))
    buf_str(b, message)
    buf_byte(b, 10)
    send_buffer(2, b)
    fault(FAULT_ERROR)


def write_frame(b: int, info: int) -> None:
    """``  FILE:LINE:COL: in FUNCTION`` for a Starlark frame's site word, ``  <builtin>:
    in NAME`` for a builtin's."""
    number = (info >> 16) & 0xFFFF
    if ((info >> 8) & 3) != SITE_STARLARK:
        buf_str(b, text("  <builtin>: in "))
        buf_str(b, load(data_address("rt$builtins") + 4 * number) & 0xFFFFFFFF)
        buf_byte(b, 10)
        return
    names = load(data_address("rt$frames") + 8 * number)  # file | function << 32
    buf_str(b, text("  "))
    buf_str(b, names & 0xFFFFFFFF)
    buf_byte(b, 58)
    buf_decimal(b, (info >> 32) & 0xFFFFF)
    buf_byte(b, 58)
    buf_decimal(b, info >> 52)
    buf_str(b, text(": in "))
    buf_str(b, names >> 32)
    buf_byte(b, 10)


def caught_error() -> int:
    """The message of the error a ``catch`` site just caught (0 when none), and clear it."""
    message = _caught.value
    _caught.value = 0
    return message
