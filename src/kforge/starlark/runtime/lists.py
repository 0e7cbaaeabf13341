"""Lists and tuples: making, growing, concatenating, repeating; mutation checks.

A list's items live in a raw block that is replaced when the list grows, so the
list keeps its identity.  A list may not change while it is frozen, or change
size while it is being iterated (Go's rule).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, noreturn, sar, slt, store, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        alloc_object,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.format import error_with_value


def items_block(capacity: int) -> int:
    """A raw block of ``capacity`` words; returns the address of its first word."""
    if capacity > (1 << 36):
        error(text("list too large"), 0)
    block = alloc_object(L.TAG_VBLOCK, L.BLOCK_DATA + 8 * capacity)
    store(block + L.BLOCK_CAP, 8 * capacity)
    return block + L.BLOCK_DATA


def list_with(n: int) -> int:
    """A new list of length ``n`` (a machine word), items to be stored by the caller."""
    capacity = n
    if capacity < 4:
        capacity = 4
    lst = alloc_object(L.TAG_LIST, L.LIST_SIZE)
    store(lst + L.LIST_LEN, n)
    store(lst + L.LIST_CAP, capacity)
    store(lst + L.LIST_ITEMS, items_block(capacity))
    return lst


def list_from_items(items: int, n: int) -> int:
    lst = list_with(n)
    copy_words(load(lst + L.LIST_ITEMS), items, n)
    return lst


def tuple_with(n: int) -> int:
    """A new tuple of length ``n``, items to be stored by the caller."""
    if n > (1 << 36):
        error(text("tuple too large"), 0)
    t = alloc_object(L.TAG_TUPLE, L.TUPLE_ITEMS + 8 * n)
    store(t + L.TUPLE_LEN, n)
    return t


def tuple_from_items(items: int, n: int) -> int:
    t = tuple_with(n)
    copy_words(t + L.TUPLE_ITEMS, items, n)
    return t


def copy_words(target: int, source: int, count: int) -> None:
    """Copy ``count`` words (the ranges may overlap only if ``target <= source``)."""
    end = source + 8 * count
    while source < end:
        store(target, load(source))
        target += 8
        source += 8


def list_reserve(lst: int, extra: int) -> None:
    """Room for ``extra`` more items."""
    n = load(lst + L.LIST_LEN)
    capacity = load(lst + L.LIST_CAP)
    if extra <= capacity - n:
        return
    wanted = capacity * 2
    if wanted < n + extra:
        wanted = n + extra
    items = items_block(wanted)
    copy_words(items, load(lst + L.LIST_ITEMS), n)
    store(lst + L.LIST_ITEMS, items)
    store(lst + L.LIST_CAP, wanted)


def list_append_unchecked(lst: int, x: int) -> None:
    """Append to a list nobody else can see yet (comprehensions, builtins)."""
    n = load(lst + L.LIST_LEN)
    if n == load(lst + L.LIST_CAP):
        list_reserve(lst, 1)
    store(load(lst + L.LIST_ITEMS) + 8 * n, x)
    store(lst + L.LIST_LEN, n + 1)


def check_list_mutable(lst: int, verb: int) -> None:
    """Go's rule for changing a list: not frozen, not being iterated.  ``verb`` (a str)
    says what the change does, for the message: ``cannot append to frozen list``."""
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, verb, 0)


@noreturn
def error_list_immutable(lst: int, verb: int, builtin: int) -> None:
    """``cannot VERB frozen list`` or ``cannot VERB list during iteration``, after
    ``NAME: `` when ``builtin`` names the method that tried."""
    b = buf_new(64)
    if builtin != 0:
        buf_str(b, builtin)
        buf_str(b, text(": "))
    buf_str(b, text("cannot "))
    buf_str(b, verb)
    if load(lst) & L.FLAG_FROZEN:
        buf_str(b, text(" frozen list"))
    else:
        buf_str(b, text(" list during iteration"))
    error(buf_to_string(b, L.TAG_STRING), builtin)


def list_concat(a: int, b: int) -> int:
    n = load(a + L.LIST_LEN)
    m = load(b + L.LIST_LEN)
    result = list_with(n + m)
    items = load(result + L.LIST_ITEMS)
    copy_words(items, load(a + L.LIST_ITEMS), n)
    copy_words(items + 8 * n, load(b + L.LIST_ITEMS), m)
    return result


def list_extend_from(lst: int, other: int) -> None:
    """Append the items of list ``other`` (which may be ``lst`` itself)."""
    m = load(other + L.LIST_LEN)
    list_reserve(lst, m)
    n = load(lst + L.LIST_LEN)
    copy_words(load(lst + L.LIST_ITEMS) + 8 * n, load(other + L.LIST_ITEMS), m)
    store(lst + L.LIST_LEN, n + m)


def repeat_count(count: int, length: int) -> int:
    """The number of copies ``x * count`` makes of a sequence of ``length`` items (0 for
    a count below 1), with Go's limits: the count must fit 32 bits (``repeat count N
    too large``), the result must have fewer than 2**30 items."""
    if length == 0:
        return 0
    if (count & 1) == 0 or (sar(count, 1) + (1 << 31)) >= (1 << 32):
        error_with_value(text("repeat count "), count, text(" too large"))
    times = sar(count, 1)
    if slt(times, 1):
        return 0
    if times > ((1 << 30) - 1) // length:
        b = buf_new(64)
        buf_str(b, text("excessive repeat ("))
        buf_decimal(b, length)
        buf_str(b, text(" * "))
        buf_decimal(b, times)
        buf_str(b, text(" elements)"))
        error(buf_to_string(b, L.TAG_STRING), 0)
    return times


def list_repeat(lst: int, count: int) -> int:
    n = load(lst + L.LIST_LEN)
    times = repeat_count(count, n)
    result = list_with(n * times)
    fill_repeated(load(result + L.LIST_ITEMS), load(lst + L.LIST_ITEMS), n, n * times)
    return result


def fill_repeated(target: int, source: int, n: int, total: int) -> None:
    """Write ``total`` words at ``target``: the ``n`` at ``source`` over and over
    (``total`` a multiple of ``n``), doubling what is written: log2 copies, not one per
    repetition."""
    copy_words(target, source, n)
    filled = n
    while filled < total:
        chunk = filled
        if chunk > total - filled:
            chunk = total - filled
        copy_words(target + 8 * filled, target, chunk)
        filled += chunk


def tuple_concat(a: int, b: int) -> int:
    n = load(a + L.TUPLE_LEN)
    m = load(b + L.TUPLE_LEN)
    if n == 0:
        return b
    if m == 0:
        return a
    result = tuple_with(n + m)
    copy_words(result + L.TUPLE_ITEMS, a + L.TUPLE_ITEMS, n)
    copy_words(result + L.TUPLE_ITEMS + 8 * n, b + L.TUPLE_ITEMS, m)
    return result


def tuple_repeat(t: int, count: int) -> int:
    n = load(t + L.TUPLE_LEN)
    times = repeat_count(count, n)
    result = tuple_with(n * times)
    fill_repeated(result + L.TUPLE_ITEMS, t + L.TUPLE_ITEMS, n, n * times)
    return result
