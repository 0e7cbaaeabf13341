"""A test program in the runtime dialect that drives the soft-float functions directly.

The test lays out a table in the program's data section: a flag (measure ticks or
not), a count, then records of (operation number, left operand, right operand,
expected result) as 64-bit words.  Operations from ``NUMBER_OPERATIONS`` on are
Starlark's operators as compiled programs call them (``number_add`` and the like), on
float objects made from the operands' bits or on small ints made from them (signed
words), and give the bits of the float they make.  The driver applies each record's operation and
writes back over the table's head: how many results differed, the index of the first
that did and what it got there, then for each operation the fewest, the most and the
total ticks one call took (read from ``budget()`` as the difference between doing it
twice and once); it sends those words on stdout.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark.runtime.intrinsics import (
    budget,
    data_address,
    heap_pointer,
    load,
    send,
    set_heap_pointer,
    store,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc
    from kforge.starlark.runtime.floats import (
        float_new,
        number_add,
        number_inplace_add,
        number_mul,
        number_sub,
        number_truediv,
        small_int_bits,
    )
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
OPERATIONS: Final = 32
#: The first operation on Starlark values: ``+ - * / +=`` on two floats (12 to 16),
#: ``+ - * /`` on a float and a small int (17 to 20) and on a small int and a float (21
#: to 24), ``/`` on two small ints (25), and a small int's double (26).
NUMBER_OPERATIONS: Final = 12


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
        mark = heap_pointer()  # the operands and results of one record given back after it
        a = float_driver_operand(op, 0, load(p + 8))
        b = float_driver_operand(op, 1, load(p + 16))
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
        set_heap_pointer(mark)
        p += 32
        i += 1
    store(table, bad)
    store(table + 8, first)
    store(table + 16, first_got)
    copy_words(table + 24, stats, 3 * OPERATIONS)
    send(0, table, 24 + 24 * OPERATIONS)
    return 0


def float_driver_operand(op: int, right: int, bits: int) -> int:
    """An operand of operation ``op`` (the left one, or the ``right``): the bits
    themselves for a soft-float function, else a float object with these bits, or the
    small int whose value they are."""
    if op < NUMBER_OPERATIONS:
        return bits
    if op >= 25 or (op >= 21 and right == 0) or (op >= 17 and op < 21 and right):
        return (bits << 1) | 1
    return float_new(bits)


def float_driver_number(op: int, a: int, b: int) -> int:
    """The Starlark operator of ``op`` (from ``NUMBER_OPERATIONS`` on): the bits of the
    float it makes."""
    if op == 26:
        return small_int_bits(a)
    kind = 3  # 0 add, 1 subtract, 2 multiply, 3 divide, 4 add in place
    if op < 17:
        kind = op - 12
    elif op < 25:
        kind = (op - 17) % 4
    r = 0
    if kind == 0:
        r = number_add(a, b)
    elif kind == 1:
        r = number_sub(a, b)
    elif kind == 2:
        r = number_mul(a, b)
    elif kind == 3:
        r = number_truediv(a, b)
    else:
        r = number_inplace_add(a, b)
    return load(r + 8)


def float_driver_apply(op: int, a: int, b: int) -> int:
    """The operation ``op`` on ``a`` and ``b``; done twice when bit 7 of ``op`` is set."""
    twice = op >> 7
    op = op & 127
    r = 0
    if op >= NUMBER_OPERATIONS:
        r = float_driver_number(op, a, b)
        if twice:
            r = float_driver_number(op, a, b)
    elif op == 0:
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
