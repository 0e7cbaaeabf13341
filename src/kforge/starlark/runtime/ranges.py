"""Range values: ``range(start, stop, step)``, an immutable arithmetic sequence.

Its bounds are signed machine words (the Go implementation takes them as 32-bit
ints), kept with its length so that indexing, slicing and membership are arithmetic.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import slt, store

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc_object, error
    from kforge.starlark.runtime.sequences import index_word


def make_range(start: int, stop: int, step: int, count: int) -> int:
    r = alloc_object(L.TAG_RANGE, L.RANGE_SIZE)
    store(r + L.RANGE_START, start)
    store(r + L.RANGE_STOP, stop)
    store(r + L.RANGE_STEP, step)
    store(r + L.RANGE_LEN, count)
    return r


def builtin_range(first: int, second: int, third: int) -> int:
    """``range(stop)``, ``range(start, stop)``, ``range(start, stop, step)``."""
    start = 0
    stop = 0
    step = 1
    if second == 0:
        stop = index_word(first, "range: for parameter stop: ")
    else:
        start = index_word(first, "range: for parameter start: ")
        stop = index_word(second, "range: for parameter stop: ")
        if third != 0:
            step = index_word(third, "range: for parameter step: ")
            if step == 0:
                error("step argument must not be zero", "range")
    count = 0
    if slt(0, step):
        if slt(start, stop):
            count = (stop - start + step - 1) // step
    else:
        if slt(stop, start):
            count = (start - stop + (0 - step) - 1) // (0 - step)
    return make_range(start, stop, step, count)
