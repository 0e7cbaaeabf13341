"""Range values: ``range(start, stop, step)``, an immutable arithmetic sequence.

Its bounds are signed machine words (the Go implementation takes them as 32-bit
ints), kept with its length so that indexing, slicing and membership are arithmetic.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, sar, slt, store, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import big_to_word
    from kforge.starlark.runtime.core import alloc_object, buf_new, buf_str, buf_to_string, error
    from kforge.starlark.runtime.format import write_str
    from kforge.starlark.runtime.strings import string_concat
    from kforge.starlark.runtime.values import error_with_type, tag_of


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
        stop = range_argument(first, text("range: for parameter 1: "))
    else:
        start = range_argument(first, text("range: for parameter 1: "))
        stop = range_argument(second, text("range: for parameter 2: "))
        if third != 0:
            step = range_argument(third, text("range: for parameter 3: "))
            if step == 0:
                error(text("range: step argument must not be zero"), text("range"))
    count = 0
    if slt(0, step):
        if slt(start, stop):
            count = (stop - start + step - 1) // step
    else:
        if slt(stop, start):
            count = (start - stop + (0 - step) - 1) // (0 - step)
    return make_range(start, stop, step, count)


def range_argument(v: int, what: int) -> int:
    """A bound of ``range`` as a signed machine word (Go takes them as 64-bit ints)."""
    if v & 1:
        return sar(v, 1)
    if tag_of(v) == L.TAG_BIGINT:
        info = load(v + L.BIGINT_INFO)
        if (info & L.BIGINT_COUNT_MASK) == 1:
            n = big_to_word(v)
            if (info >> 32) == 0:
                if slt(n, 0) == 0:
                    return n
            elif slt(n, 0) or n == 0:
                return n
        b = buf_new(64)
        buf_str(b, what)
        write_str(b, v)
        buf_str(b, text(" out of range (want value in signed 64-bit range)"))
        error(buf_to_string(b, L.TAG_STRING), text("range"))
    error_with_type(string_concat(what, text("got ")), v, text(", want int"), text("range"))
    return 0
