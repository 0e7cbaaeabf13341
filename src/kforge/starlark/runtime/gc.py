"""The garbage collector: non-moving, conservative mark-sweep, run only when an
allocation fails (or a stack check does: ``gc_room``).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`).  ``alloc`` bumps the heap
pointer; when the bump would cross the limit it calls the generated slow path
``gc_alloc`` (:data:`kforge.starlark.emit.GC_ALLOC`): first :func:`gc_take_free` (a
free run the last sweep found), then, with every register saved in the emergency
reserve just above ``LIM`` and the stack marker pushed, :func:`gc_alloc_slow`: a
collection, then a free run or the top of the heap, else 0 (the out-of-memory error).
docs/starlark.md (*Memory*) explains it.

The emergency reserve (``core.EMERGENCY`` bytes above ``LIM``, used by nothing else
while no error is being reported) holds, from ``LIM``: the saved registers
(``GC_SAVE_END`` bytes), the window's bitmap of object starts, the mark stack; all of it
is zeros again when the slow path returns, since the heap may grow there later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    Global,
    data_address,
    heap_limit,
    heap_pointer,
    inline,
    load,
    loadb,
    set_heap_limit,
    set_heap_pointer,
    store,
    text,
)

#: Where the slow path saved r1..r248 (at their numbers) and r255 (at 249), from LIM.
GC_SAVE_END: Final = 8 * 250
#: The bitmap of object starts in the heap window being matched with the roots.
GC_BITMAP: Final = 2048
GC_BITMAP_WORDS: Final = 128
#: Bytes of heap one window covers (a bit per word).
GC_WINDOW: Final = GC_BITMAP_WORDS * 64 * 8
#: The mark stack (object addresses still to trace).
GC_STACK: Final = GC_BITMAP + 8 * GC_BITMAP_WORDS
GC_STACK_WORDS: Final = 64
#: Where the collector's own frames may begin (below the program's stack).
GC_AREA_END: Final = GC_STACK + 8 * GC_STACK_WORDS

#: The limit is kept ``heap span >> HEADROOM_SHIFT`` below where the stack allows once
#: a collection has run, so that the top of the heap (which a live object may pin) is
#: not where the stack needs room; a failed stack check gets it back.
HEADROOM_SHIFT: Final = 3

#: The tags of objects that refer to no other object (``mark`` does not queue them).
LEAF_TAGS: Final = (
    1 << L.TAG_BIGINT
    | 1 << L.TAG_STRING
    | 1 << L.TAG_BYTES
    | 1 << L.TAG_RANGE
    | 1 << L.TAG_FLOAT
    | 1 << L.TAG_BLOCK
)
#: No end: the bump region is the top of the heap, bounded by ``LIM`` alone.
NO_END: Final = 0xFFFF_FFFF_FFFF_FFFF
#: A free run at least this large becomes the bump region; a smaller one is cut.
REGION_MIN: Final = 512

_free_runs = Global(__name__)
#: At least the size of the largest free run in the list (runs join the list only at a
#: sweep, and only shrink or leave it after): a search for a larger one is skipped.
_largest_run = Global(__name__)
#: The end of the bump region when it is a free run below the top of the heap, else
#: ``NO_END`` (``alloc`` reads it).
bump_end = Global(__name__, NO_END)
#: While the bump region is below the top: the top of the heap, the region's base as
#: ``LIM`` last counted it, and how far ``LIM`` is kept below the stack's limit.
_heap_top = Global(__name__)
_region_base = Global(__name__)
_gap = Global(__name__)
#: The headroom kept back now (0 or the bytes).
_headroom = Global(__name__)
#: What the slow path adds to ``LIM`` once it has restored the registers (saved at
#: ``LIM``): the collector moves the limit only through this.
_limit_shift = Global(__name__)
#: Where the bump region began: everything from there to ``HP`` was given out since,
#: so a heap mark in between may be given back (``heap_release``).
heap_floor = Global(__name__)
_heap_base = Global(__name__)
_mark_count = Global(__name__)
#: The lowest grey object (marked, not traced: see ``FLAG_GREY``), or the heap's top.
_grey_low = Global(__name__)
_mark_overflow = Global(__name__)
_mark_base = Global(__name__)
_mark_top = Global(__name__)
#: Collections run so far (for tests and ``--profile``-style figures).
gc_collections = Global(__name__)


def gc_take_free(size: int) -> int:
    """``size`` bytes of zeroed heap without a collection, or 0: the slow path's first
    try, made with only the registers this changes saved.  The bump region first (a
    region below the top gives ``LIM`` back as it fills, ``rebase``), then the free runs
    in address order, then the top of the heap."""
    if size == 0 or size > (1 << 40):
        return 0
    need = (size + 7) & ~7
    p = bump(need)
    if p != 0 or (_free_runs.value == 0 and bump_end.value == NO_END):
        return p
    # the top rises only while the stack keeps ample room above it, else collect first
    # (an error being reported cannot collect)
    limit = heap_limit() + _limit_shift.value + _gap.value
    ample = limit - heap_top() > (limit - heap_base()) >> 2
    return alloc_elsewhere(need, ample or _in_error.value != 0)


def gc_alloc_slow(size: int) -> int:
    """``size`` bytes of zeroed heap after a collection; 0 if there is still no room.
    ``size`` 0 asks for a collection alone and gives the stack the headroom (the
    result is then 1)."""
    if size == 0:
        top = heap_top()
        if _in_error.value == 0 and gc_collect() != 0:
            release_headroom()
            alloc_elsewhere(0, 1)  # the heap grows below its top from now on
            # half of what the top came down keeps the next failed check cheap
            reserve_headroom((top - heap_top()) >> 1)
        return 1
    if _in_error.value != 0 or size > (1 << 40):
        return 0
    need = (size + 7) & ~7
    if gc_collect() == 0:
        return 0
    p = alloc_elsewhere(need, 1)
    if p == 0:
        release_headroom()
        p = bump(need)
        if p == 0:
            return 0
    reserve_headroom(NO_END)
    return p


def bump(need: int) -> int:
    """``need`` bytes from the bump region, or 0 if they do not fit there."""
    p = heap_pointer()
    if bump_end.value == NO_END:
        if need > heap_limit() + _limit_shift.value - p:
            return 0
        set_heap_pointer(p + need)
        return p
    if need > bump_end.value - p:
        return 0
    set_heap_pointer(p + need)
    rebase()
    return p


def alloc_elsewhere(need: int, top_too: int) -> int:
    """First fit in address order, so that the top of the heap (which a live object
    pins) rises only when nothing below it fits: the first free run of ``REGION_MIN``
    bytes or more that fits becomes the bump region; failing that, the first run that
    fits is cut to size; failing that, the top of the heap is the bump region again
    (if ``top_too``).  0 if even the top has no room.  ``need`` 0 only moves the bump
    region to the first run of ``REGION_MIN`` bytes, if there is one."""
    wanted = need
    if wanted < REGION_MIN:
        wanted = REGION_MIN
    previous = 0
    run = _free_runs.value
    small = 0
    small_previous = 0
    if wanted <= _largest_run.value:
        largest = 0
        while run != 0:
            size = load(run + L.FREE_SIZE)
            following = load(run + L.FREE_NEXT)
            if size >= wanted:
                if previous == 0:
                    _free_runs.value = following
                else:
                    store(previous + L.FREE_NEXT, following)
                enter_region(run, size)
                return bump(need)
            if size > largest:
                largest = size
            if small == 0 and need != 0 and size >= need:
                small = run
                small_previous = previous
            previous = run
            run = following
        _largest_run.value = largest
    elif need != 0:  # no run is large enough to become the region: the first that fits
        while run != 0:
            if load(run + L.FREE_SIZE) >= need:
                small = run
                small_previous = previous
                break
            previous = run
            run = load(run + L.FREE_NEXT)
    if small != 0:
        return cut_free_run(small_previous, small, need)
    if top_too == 0:
        return 0
    enter_top()
    return bump(need)


def enter_region(run: int, size: int) -> None:
    """Make the free run at ``run`` (``size`` bytes, off the list) the bump region.
    ``LIM`` goes down by the distance from the run to the top of the heap (``_gap``),
    so that ``LIM - HP`` (what a stack check measures) stays the stack's room above
    the top; what the region gives out is given back to ``LIM`` (``rebase``)."""
    if bump_end.value == NO_END:
        _heap_top.value = heap_pointer()
    else:
        seal_region()
    store(run, 0)
    store(run + L.FREE_SIZE, 0)
    store(run + L.FREE_NEXT, 0)
    gap = _heap_top.value - run
    _limit_shift.value = _limit_shift.value + _gap.value - gap
    _gap.value = gap
    _region_base.value = run
    bump_end.value = run + size
    heap_floor.value = run
    set_heap_pointer(run)


def enter_top() -> None:
    """Make the top of the heap the bump region again (``LIM`` gets the gap back)."""
    if bump_end.value == NO_END:
        return
    seal_region()
    set_heap_pointer(_heap_top.value)
    bump_end.value = NO_END
    _limit_shift.value = _limit_shift.value + _gap.value
    _gap.value = 0
    heap_floor.value = heap_pointer()


def seal_region() -> None:
    """Leave a bump region below the top: its unused tail becomes a free block the
    heap walk steps over in one step (reused once the next sweep lists it)."""
    p = heap_pointer()
    rest = bump_end.value - p
    if rest >= L.FREE_MIN:
        store(p, L.TAG_FREE)
        store(p + L.FREE_SIZE, rest)


def rebase() -> None:
    """In a bump region below the top, what was given out since the region's base lies
    below the top: the base moves up to ``HP`` and ``LIM`` up with it."""
    used = heap_pointer() - _region_base.value
    _gap.value = _gap.value - used
    _limit_shift.value = _limit_shift.value + used
    _region_base.value = heap_pointer()


def heap_top() -> int:
    """The end of the highest block of the heap."""
    if bump_end.value == NO_END:
        return heap_pointer()
    return _heap_top.value


def reserve_headroom(most: int) -> None:
    """Keep room back from the heap for the stack again (the start code keeps an
    eighth of the heap's room; a failed stack check takes it first, before it collects):
    up to that much, half the room above the top of the heap, which a collection cannot
    lower past a live object, and ``most``.  The slow path moves the limit once its
    registers are back (``_limit_shift``)."""
    if _headroom.value != 0:
        return
    limit = heap_limit() + _limit_shift.value + _gap.value
    room = ((limit - heap_base()) >> HEADROOM_SHIFT) & ~7
    above = ((limit - heap_top()) >> 1) & ~7
    if above < room:
        room = above
    if most < room:
        room = most & ~7
    _headroom.value = room
    _limit_shift.value = _limit_shift.value - room


def release_headroom() -> None:
    """Give the headroom kept back to the heap and the stack."""
    room = _headroom.value
    _headroom.value = 0
    _limit_shift.value = _limit_shift.value + room


def gc_limit_slack() -> int:
    """The bytes ``LIM`` is kept below where the stack allows (the headroom and the
    gap of a bump region below the top): ``builtin_catch`` restores the limit it saved
    by this, which an error leaves anywhere."""
    return _headroom.value + _gap.value


def gc_make_room() -> None:
    """Collect when the room above the heap is smaller than the heap below it, and
    make the top the bump region (before a message lands above ``HP``: one that does
    not fit is lost)."""
    top = heap_top()
    if heap_limit() + _gap.value - top < top - data_address("rt$data_end"):
        gc_alloc(0)
    if bump_end.value != NO_END:
        enter_top()
        set_heap_limit(heap_limit() + _limit_shift.value)
        _limit_shift.value = 0


def cut_free_run(previous: int, run: int, need: int) -> int:
    """The free run at ``run`` (after ``previous`` in the list, or first), cut to
    ``need`` bytes (zeroed); the rest stays a free run when it is large enough."""
    size = load(run + L.FREE_SIZE)
    following = load(run + L.FREE_NEXT)
    store(run, 0)
    store(run + L.FREE_SIZE, 0)
    store(run + L.FREE_NEXT, 0)
    rest = size - need
    if rest >= L.FREE_MIN:
        remainder = run + need
        store(remainder, L.TAG_FREE)
        store(remainder + L.FREE_SIZE, rest)
        store(remainder + L.FREE_NEXT, following)
        following = remainder
    if previous == 0:
        _free_runs.value = following
    else:
        store(previous + L.FREE_NEXT, following)
    return run


def heap_base() -> int:
    """Where the heap starts (after the data and the environment block), or 0 when the
    collector cannot run: the program runs in more memory than it was compiled for, so
    its stack is not where the collector would look for it."""
    base = _heap_base.value
    if base != 0:
        return base
    top = data_address("rt$memory_top")
    if load(top - 8) != data_address("rt$bottom_return"):
        return 0
    q = data_address("rt$data_end")
    count = load(q)
    q += 8
    i = 0
    while i < count:
        q += 8 + ((load(q) + 7) & ~7)
        q += 8 + ((load(q) + 7) & ~7)
        i += 1
    _heap_base.value = q
    return q


@inline
def block_size(p: int) -> int:
    """The bytes of the heap block at ``p`` (a zero word is a gap of 8); 0 if its header
    is not one the heap may hold (the heap cannot be walked)."""
    header = load(p)
    if header == 0:
        return 8
    tag = header & L.TAG_MASK
    if tag >= L.TAG_COUNT:
        return 0
    # by tag: the size of a fixed-size object, 1 where the object says, 0 for a tag
    # no heap block has (BLOCK_SIZES in tests/starlark/test_rt_gc.py checks the bytes)
    size = loadb(
        text(
            b"\x00\x00\x00\x01\x01\x01\x28\x01\x40\x28\x30\x20\x10\x18\x10\x01\x18\x20\x01\x01\x01"
        )
        + L.STR_DATA
        + tag
    )
    if size != 1:
        return size
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return (L.STR_DATA + load(p + L.STR_LEN) + 7) & ~7
    if tag == L.TAG_BLOCK or tag == L.TAG_VBLOCK or tag == L.TAG_EBLOCK:
        return L.BLOCK_DATA + ((load(p + L.BLOCK_CAP) + 7) & ~7)
    if tag == L.TAG_TUPLE:
        return L.TUPLE_ITEMS + 8 * load(p + L.TUPLE_LEN)
    if tag == L.TAG_FREE:
        return load(p + L.FREE_SIZE)
    return L.BIGINT_LIMBS + 8 * (load(p + L.BIGINT_INFO) & L.BIGINT_COUNT_MASK)


def heap_walkable(base: int, top: int) -> int:
    """1 if the blocks from ``base`` end exactly at ``top``."""
    q = base
    while q < top:
        size = block_size(q)
        if size == 0 or size > top - q:
            return 0
        q += size
    return 1


def gc_collect() -> int:
    """Mark what the roots reach, sweep the rest into free runs; 0 if it cannot run.
    The slow path has given ``LIM`` the gap back (``_gap`` is 0): the top of the heap
    is the bump region again."""
    base = heap_base()
    if base == 0:
        return 0
    stack = stack_start()
    if stack == 0:
        return 0
    enter_top()
    top = heap_pointer()
    if top - base > GC_WINDOW and heap_walkable(base, top) == 0:
        return 0
    _free_runs.value = 0
    _largest_run.value = 0
    _mark_base.value = base
    _mark_top.value = top
    _mark_count.value = 0
    _mark_overflow.value = 0
    _grey_low.value = top
    if mark_roots(base, top, stack) == 0:
        return 0
    gc_collections.value = gc_collections.value + 1
    while _mark_overflow.value != 0:  # trace the grey objects, from the lowest up
        _mark_overflow.value = 0
        q = _grey_low.value
        _grey_low.value = top
        while q < top:
            header = load(q)
            if header & L.FLAG_GREY:
                store(q, header & ~L.FLAG_GREY)
                trace(q)
                drain()
            q += block_size(q)
    sweep(base, top)
    heap_floor.value = heap_pointer()
    # the reserve may become heap once the limit rises again, and fresh heap is zeros
    zero_words(heap_limit() + GC_BITMAP, heap_limit() + GC_AREA_END)
    return 1


def stack_start() -> int:
    """Where the program's stack begins: just above the lowest copy of the marker the
    slow path pushed; 0 if there is none.  The collector's frames lie above the
    collector's area at the stack's limit (``LIM`` and the headroom; the emergency
    reserve holds them), so the search starts there; a copy further down would only
    make the collector keep more."""
    top = data_address("rt$memory_top")
    p = heap_limit() + _headroom.value + GC_AREA_END
    while p < top:
        if load(p) == L.GC_STACK_MARKER:
            return p + 8
        p += 8
    return 0


def mark_roots(base: int, top: int, stack: int) -> int:
    """Mark what the saved registers, the stack (from ``stack``) and the data section
    point into, a window of the heap at a time: the window's object starts go into a
    bitmap, then every root word inside the window finds the object that contains it.
    0 if the heap's blocks do not end at ``top`` (checked before anything is marked
    when the heap is one window; ``gc_collect`` checks a larger one first)."""
    bitmap = heap_limit() + GC_BITMAP
    low = base
    q = base
    carry = 0
    while low < top:
        high = low + GC_WINDOW
        if high > top:
            high = top
        i = 0
        while i < GC_BITMAP_WORDS:
            store(bitmap + 8 * i, 0)
            i += 1
        last = carry
        while q < high:
            header = load(q)
            size = block_size(q)
            if size == 0 or size > top - q:
                return 0
            if header != 0 and (header & L.TAG_MASK) != L.TAG_FREE:
                bit = (q - low) >> 3
                word = bitmap + 8 * (bit >> 6)
                store(word, load(word) | (1 << (bit & 63)))
                last = q
            q += size
        limit = heap_limit()
        mark_range(limit + 8, limit + GC_SAVE_END, low, high, carry)
        mark_range(stack, data_address("rt$memory_top"), low, high, carry)
        mark_range(8, data_address("rt$data_end"), low, high, carry)
        drain()
        carry = last
        low = high
    return 1


def mark_range(start: int, end: int, low: int, high: int, carry: int) -> None:
    """Mark the objects of the window [low, high) that the words in [start, end) point
    into (``carry`` is the object that began before the window, or 0).  A word need
    not be aligned: a register may hold a cursor into a string's bytes."""
    bitmap = heap_limit() + GC_BITMAP
    span = high - low
    p = start
    while p < end:
        offset = load(p) - low
        p += 8
        if offset >= span:  # below the window too (unsigned)
            continue
        bit = offset >> 3
        index = bit >> 6
        bits = load(bitmap + 8 * index) & ((2 << (bit & 63)) - 1)
        while bits == 0 and index > 0:
            index -= 1
            bits = load(bitmap + 8 * index)
        owner = carry
        if bits != 0:  # the nearest object start at or below the word (a binary search)
            owner = low + 8 * (64 * index + 63 - clz64(bits))
        if owner != 0 and low + offset - owner < block_size(owner):
            mark(owner)


def mark(p: int) -> None:
    """Mark the heap object at ``p`` and queue it for tracing (grey it when the mark
    stack is full: ``gc_collect`` traces it later)."""
    header = load(p)
    if header & L.FLAG_MARK:
        return
    if (LEAF_TAGS >> (header & L.TAG_MASK)) & 1:
        store(p, header | L.FLAG_MARK)
        return  # nothing to trace: a string, a number, raw bytes...
    count = _mark_count.value
    if count == GC_STACK_WORDS:
        store(p, header | L.FLAG_MARK | L.FLAG_GREY)
        _mark_overflow.value = 1
        if p < _grey_low.value:
            _grey_low.value = p
        return
    store(p, header | L.FLAG_MARK)
    store(heap_limit() + GC_STACK + 8 * count, p)
    _mark_count.value = count + 1


def mark_value(v: int) -> None:
    """Mark ``v`` if it is a heap object (a value word: 0, a small int or an address)."""
    if (v & 7) == 0 and v >= _mark_base.value and v < _mark_top.value:
        mark(v)


def drain() -> None:
    count = _mark_count.value
    while count != 0:
        count -= 1
        _mark_count.value = count
        trace(load(heap_limit() + GC_STACK + 8 * count))
        count = _mark_count.value


def trace(p: int) -> None:
    """Mark what the object at ``p`` refers to, by its layout."""
    tag = load(p) & L.TAG_MASK
    if tag == L.TAG_TUPLE:
        n = load(p + L.TUPLE_LEN)
        i = 0
        while i < n:
            mark_value(load(p + L.TUPLE_ITEMS + 8 * i))
            i += 1
    elif tag == L.TAG_VBLOCK:
        end = p + L.BLOCK_DATA + load(p + L.BLOCK_CAP)
        q = p + L.BLOCK_DATA
        while q < end:
            mark_value(load(q))
            q += 8
    elif tag == L.TAG_EBLOCK:
        end = p + L.BLOCK_DATA + load(p + L.BLOCK_CAP)
        q = p + L.BLOCK_DATA
        while q < end:
            mark_value(load(q + 8))
            mark_value(load(q + 16))
            q += L.DICT_ENTRY_SIZE
    elif tag == L.TAG_LIST:
        mark_value(load(p + L.LIST_ITEMS) - L.BLOCK_DATA)
    elif tag == L.TAG_DICT:
        mark_value(load(p + L.DICT_ENTRIES) - L.BLOCK_DATA)
        mark_value(load(p + L.DICT_INDEX) - L.BLOCK_DATA)
    elif tag == L.TAG_BUFFER:
        mark_value(load(p + L.BUF_DATA) - L.BLOCK_DATA)
    elif tag == L.TAG_FUNCTION:
        mark_value(load(p + L.FUNC_DEFAULTS))
        mark_value(load(p + L.FUNC_CELLS))
    elif tag == L.TAG_BUILTIN:
        mark_value(load(p + L.BUILTIN_RECEIVER))
        mark_value(load(p + L.BUILTIN_NAME))
    elif tag == L.TAG_CELL:
        mark_value(load(p + L.CELL_VALUE))
    elif tag == L.TAG_MODULE:
        mark_value(load(p + L.MODULE_NAME))
        mark_value(load(p + L.MODULE_MEMBERS))
    elif tag == L.TAG_STRING_ELEMS:
        mark_value(load(p + L.ELEMS_STRING))


def sweep(base: int, top: int) -> None:
    """Unmark the live, zero the rest into free runs (in address order); a free stretch
    at the top gives its room back to the heap pointer."""
    last = 0
    q = base
    while q < top:
        header = load(q)
        if header & L.FLAG_MARK:
            store(q, header & ~L.FLAG_MARK)
            q += block_size(q)
            continue
        start = q
        while q < top and (load(q) & L.FLAG_MARK) == 0:
            q += block_size(q)
        zero_words(start, q)  # the dead run at once
        if q == top:
            set_heap_pointer(start)
            break
        if q - start >= L.FREE_MIN:
            store(start, L.TAG_FREE)
            store(start + L.FREE_SIZE, q - start)
            if q - start > _largest_run.value:
                _largest_run.value = q - start
            if last == 0:
                _free_runs.value = start
            else:
                store(last + L.FREE_NEXT, start)
            last = start


if TYPE_CHECKING:
    from kforge.starlark.runtime.core import _in_error, zero_words
    from kforge.starlark.runtime.generated import gc_alloc
    from kforge.starlark.runtime.softfloat import clz64
