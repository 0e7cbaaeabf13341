"""A test program in the runtime dialect that drives the soft-float functions directly.

The test lays out a table in the program's data section: a flag (measure ticks or
not), a count, then records of (operation number, left operand, right operand,
expected result) as 64-bit words.  The driver applies each record's operation and
writes back over the table's head: how many results differed, the index of the first
that did and what it got there, then for each operation the fewest, the most and the
total ticks one call took (read from ``budget()`` as the difference between doing it
twice and once); it sends those words on stdout.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark.runtime.intrinsics import budget, data_address, load, send, store

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc
    from kforge.starlark.runtime.lists import copy_words
    from kforge.starlark.runtime.softfloat import (
        f64_add,
        f64_ceil,
        f64_div,
        f64_floor,
        f64_fmod,
        f64_from_word,
        f64_mul,
        f64_order,
        f64_round,
        f64_sqrt,
        f64_sub,
        f64_trunc,
    )


#: Operation numbers are below this; bit 7 of an operation number asks for it twice.
OPERATIONS: Final = 16


def float_driver_main() -> int:
    table = data_address("float_cases")
    measure = load(table)
    n = load(table + 8)
    stats = alloc(24 * OPERATIONS)
    i = 0
    while i < OPERATIONS:
        store(stats + 24 * i, 0 - 1)
        i += 1
    p = table + 16
    bad = 0
    first = 0 - 1
    first_got = 0
    i = 0
    while i < n:
        op = load(p)
        a = load(p + 8)
        b = load(p + 16)
        before = budget()
        got = float_driver_apply(op, a, b)
        if measure:
            once = before - budget()
            before = budget()
            float_driver_apply(op | 128, a, b)
            ticks = before - budget() - once  # what one more call of the operation cost
            s = stats + 24 * op
            if ticks < load(s):
                store(s, ticks)
            if ticks > load(s + 8):
                store(s + 8, ticks)
            store(s + 16, load(s + 16) + ticks)
        if got != load(p + 24):
            if bad == 0:
                first = i
                first_got = got
            bad += 1
        p += 32
        i += 1
    store(table, bad)
    store(table + 8, first)
    store(table + 16, first_got)
    copy_words(table + 24, stats, 3 * OPERATIONS)
    send(0, table, 24 + 24 * OPERATIONS)
    return 0


def float_driver_apply(op: int, a: int, b: int) -> int:
    """The operation ``op`` on ``a`` and ``b``; done twice when bit 7 of ``op`` is set."""
    twice = op >> 7
    op = op & 127
    r = 0
    if op == 0:
        r = f64_add(a, b)
        if twice:
            r = f64_add(a, b)
    elif op == 1:
        r = f64_sub(a, b)
        if twice:
            r = f64_sub(a, b)
    elif op == 2:
        r = f64_mul(a, b)
        if twice:
            r = f64_mul(a, b)
    elif op == 3:
        r = f64_div(a, b)
        if twice:
            r = f64_div(a, b)
    elif op == 4:
        r = f64_sqrt(a)
        if twice:
            r = f64_sqrt(a)
    elif op == 5:
        r = f64_order(a, b)
        if twice:
            r = f64_order(a, b)
    elif op == 6:
        r = f64_from_word(a)
        if twice:
            r = f64_from_word(a)
    elif op == 7:
        r = f64_trunc(a)
        if twice:
            r = f64_trunc(a)
    elif op == 8:
        r = f64_floor(a)
        if twice:
            r = f64_floor(a)
    elif op == 9:
        r = f64_ceil(a)
        if twice:
            r = f64_ceil(a)
    elif op == 10:
        r = f64_round(a)
        if twice:
            r = f64_round(a)
    elif op == 11:
        r = f64_fmod(a, b)
        if twice:
            r = f64_fmod(a, b)
    return r
