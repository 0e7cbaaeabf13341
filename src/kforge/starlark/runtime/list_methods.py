"""The methods of lists: append, clear, extend, index, insert, pop, remove.

Each checks what the Go implementation checks, in its order, and fails in its words:
the arguments first, then that the list may change (not frozen, not being iterated:
``cannot append to list during iteration``), then the operation.  An error names the
method (``Error in pop: pop: ...``).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import FLOATS, load, slt, store, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.builtins_core import check_iterable, int_argument
    from kforge.starlark.runtime.core import error
    from kforge.starlark.runtime.lists import copy_words, error_list_immutable, list_reserve
    from kforge.starlark.runtime.sequences import (
        int32_argument,
        list_extend_iterable,
        out_of_range_message,
    )
    from kforge.starlark.runtime.values import equal_in, prefixed


def list_append(lst: int, x: int) -> int:
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, text("append to"), text("append"))
    n = load(lst + L.LIST_LEN)
    if n == load(lst + L.LIST_CAP):
        list_reserve(lst, 1)
    store(load(lst + L.LIST_ITEMS) + 8 * n, x)
    store(lst + L.LIST_LEN, n + 1)
    return L.NONE_ADDRESS


def list_clear(lst: int) -> int:
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, text("clear"), text("clear"))
    store(lst + L.LIST_LEN, 0)
    return L.NONE_ADDRESS


def list_extend(lst: int, x: int) -> int:
    check_iterable(x, text("extend"))
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, text("extend"), text("extend"))
    list_extend_iterable(lst, x)
    return L.NONE_ADDRESS


def list_index(lst: int, x: int, start: int, end: int) -> int:
    """``lst.index(x[, start[, end]])``: bounds as a slice's (None for a default)."""
    n = load(lst + L.LIST_LEN)
    first = 0
    if start != 0 and start != L.NONE_ADDRESS:
        first = clamp_bound(
            int32_argument(start, text("index: invalid start index: "), text("index")), n
        )
    last = n
    if end != 0 and end != L.NONE_ADDRESS:
        last = clamp_bound(
            int32_argument(end, text("index: invalid end index: "), text("index")), n
        )
    items = load(lst + L.LIST_ITEMS)
    i = first
    if FLOATS:  # a small int may equal a float, and a float a small int
        while slt(i, last):
            y = load(items + 8 * i)
            if y == x or ((x & y & 1) == 0 and equal_in(y, x, text("index"))):
                return (i << 1) | 1
            i += 1
    elif x & 1:
        while slt(i, last):
            if load(items + 8 * i) == x:
                return (i << 1) | 1
            i += 1
    else:
        while slt(i, last):
            y = load(items + 8 * i)
            if (y & 1) == 0 and equal_in(y, x, text("index")):
                return (i << 1) | 1
            i += 1
    error(text("index: value not in list"), text("index"))
    return 0


def clamp_bound(i: int, n: int) -> int:
    """A start or end index (a signed word) as Go's ``indices`` takes it: negative
    counts from the end, then clamped to ``[0, n]``."""
    if slt(i, 0):
        i += n
        if slt(i, 0):
            return 0
    if slt(n, i):
        return n
    return i


def list_insert(lst: int, index: int, x: int) -> int:
    """``lst.insert(i, x)``: an index past either end inserts at that end."""
    i = int_argument(index, text("insert"), text("1"))
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, text("insert into"), text("insert"))
    n = load(lst + L.LIST_LEN)
    if slt(i, 0):
        i += n
        if slt(i, 0):
            i = 0
    if n == load(lst + L.LIST_CAP):
        list_reserve(lst, 1)
    items = load(lst + L.LIST_ITEMS)
    if slt(i, n):
        move_up(items + 8 * i, n - i)
    else:
        i = n
    store(items + 8 * i, x)
    store(lst + L.LIST_LEN, n + 1)
    return L.NONE_ADDRESS


def move_up(p: int, count: int) -> None:
    """Move ``count`` words at ``p`` one word up (the word after them is free)."""
    q = p + 8 * count
    while q != p:
        store(q, load(q - 8))
        q -= 8


def list_pop(lst: int, index: int) -> int:
    """``lst.pop([i])``: the item at ``i`` (the last by default), removed."""
    n = load(lst + L.LIST_LEN)
    i = n - 1
    if index != 0:
        i = int_argument(index, text("pop"), text("1"))
    j = i
    if slt(j, 0):
        j += n
    if j >= n:  # negative words are larger than any length
        error(prefixed(text("pop"), out_of_range_message(i, n, lst)), text("pop"))
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, text("pop from"), text("pop"))
    items = load(lst + L.LIST_ITEMS)
    p = items + 8 * j
    value = load(p)
    if j + 1 < n:
        copy_words(p, p + 8, n - 1 - j)
    store(lst + L.LIST_LEN, n - 1)
    return value


def list_remove(lst: int, x: int) -> int:
    """``lst.remove(x)``: drop the first item equal to ``x``."""
    if (load(lst) & L.FLAG_FROZEN) | load(lst + L.LIST_ITERS):
        error_list_immutable(lst, text("remove from"), text("remove"))
    n = load(lst + L.LIST_LEN)
    items = load(lst + L.LIST_ITEMS)
    i = 0
    while i < n:
        y = load(items + 8 * i)
        if y == x and (x & 1):
            break
        if FLOATS:
            if (x & y & 1) == 0 and equal_in(y, x, text("remove")):
                break
        elif (y & 1) == 0 and (x & 1) == 0 and equal_in(y, x, text("remove")):
            break
        i += 1
    if i == n:
        error(text("remove: element not found"), text("remove"))
    p = items + 8 * i
    if i + 1 < n:
        copy_words(p, p + 8, n - 1 - i)
    store(lst + L.LIST_LEN, n - 1)
    return L.NONE_ADDRESS
