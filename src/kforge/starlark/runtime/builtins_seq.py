"""The builtins that work through sequences: sorted, min, max, enumerate, zip,
reversed, any, all.

They take any iterable (a list, tuple, dict, range or a string's ``elems()`` view),
reading a list's or a tuple's items in place and any other iterable through the
iteration protocol.  A builtin that calls a key function holds its iterable as a
``for`` loop does (a list being sorted by key cannot change meanwhile), and calls it
through ``call_value`` with one argument tuple, reused.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, store, text
from kforge.starlark.runtime.values import COMPARE_DEPTH, FAILED

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import int_from_word
    from kforge.starlark.runtime.builtins_core import (
        check_iterable,
        error_argument_type,
        int_argument,
        is_callable,
    )
    from kforge.starlark.runtime.calls import call_value
    from kforge.starlark.runtime.core import (
        alloc,
        alloc_block,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.lists import (
        list_from_items,
        list_with,
        tuple_with,
    )
    from kforge.starlark.runtime.sequences import (
        is_iterable,
        iter_end,
        iter_item,
        iter_start,
        iterable_to_list,
        iterated_list,
    )
    from kforge.starlark.runtime.sorting import sort_items
    from kforge.starlark.runtime.values import (
        comparison_failure,
        error_with_type,
        order_within,
        prefixed,
        truth,
    )


def items_of(x: int) -> int:
    """A list or tuple whose items are those of the iterable ``x``: ``x`` itself when it
    is one, else a new list."""
    tag = load(x) & L.TAG_MASK
    if tag == L.TAG_LIST or tag == L.TAG_TUPLE:
        return x
    return iterable_to_list(x)


def items_address(seq: int) -> int:
    """Where the items of a list or tuple are."""
    if (load(seq) & L.TAG_MASK) == L.TAG_LIST:
        return load(seq + L.LIST_ITEMS)
    return seq + L.TUPLE_ITEMS


def items_count(seq: int) -> int:
    """How many items a list or tuple has (both keep their length at offset 8)."""
    return load(seq + L.LIST_LEN)


# -- any, all ---------------------------------------------------------------------------


def builtin_any(x: int) -> int:
    check_iterable(x, text("any"))
    return first_truth(x, 1)


def builtin_all(x: int) -> int:
    check_iterable(x, text("all"))
    return first_truth(x, 0)


def first_truth(x: int, wanted: int) -> int:
    """``any`` (``wanted`` 1): True if some item of ``x`` is true; ``all`` (``wanted``
    0): True if none is false."""
    found = 0
    tag = load(x) & L.TAG_MASK
    if tag == L.TAG_LIST or tag == L.TAG_TUPLE:
        p = items_address(x)
        end = p + 8 * items_count(x)
        while p < end:
            if truth(load(p)) == wanted:
                found = 1
                break
            p += 8
    else:
        seq = iter_start(x)
        i = 0
        while True:
            item = iter_item(seq, i)
            if item == 0:
                break
            if truth(item) == wanted:
                found = 1
                break
            i += 1
        iter_end(seq)
    if found == wanted:
        return L.TRUE_ADDRESS
    return L.FALSE_ADDRESS


# -- enumerate, zip, reversed -----------------------------------------------------------


def builtin_enumerate(x: int, start: int) -> int:
    """``enumerate(x, start=0)``: a list of ``(index, item)`` tuples."""
    check_iterable(x, text("enumerate"))
    first = 0
    if start != 0:
        first = int_argument(start, text("enumerate"), text("2"))
    seq = items_of(x)
    n = items_count(seq)
    result = list_with(n)
    if n == 0:
        return result
    size = L.TUPLE_ITEMS + 16
    pair = alloc(size * n)
    if first + (1 << 62) >= (1 << 63) - n:
        # some index is a big int, made while the tuples after it are still unwritten:
        # give them their headers first, so that a collection can walk past them
        q = pair
        while q < pair + size * n:
            store(q, L.TAG_TUPLE)
            store(q + L.TUPLE_LEN, 2)
            q += size
    source = items_address(seq)
    target = load(result + L.LIST_ITEMS)
    end = target + 8 * n
    index = first
    while target < end:
        store(pair, L.TAG_TUPLE)
        store(pair + L.TUPLE_LEN, 2)
        store(pair + L.TUPLE_ITEMS, int_from_word(index))
        store(pair + L.TUPLE_ITEMS + 8, load(source))
        store(target, pair)
        pair += size
        source += 8
        target += 8
        index += 1
    return result


def builtin_zip(args: int) -> int:
    """``zip(*iterables)``: a list of tuples, as long as the shortest iterable."""
    cols = load(args + L.TUPLE_LEN)
    if cols == 0:
        return list_with(0)
    columns = tuple_with(cols)  # the items of each iterable, as a list or tuple
    rows = 0 - 1
    j = 0
    while j < cols:
        x = load(args + L.TUPLE_ITEMS + 8 * j)
        if is_iterable(x) == 0:
            b = buf_new(64)
            buf_str(b, text("zip: argument #"))
            buf_decimal(b, j + 1)
            buf_str(b, text(" is not iterable: "))
            error_with_type(buf_to_string(b, L.TAG_STRING), x, text(""), text("zip"))
        seq = items_of(x)
        store(columns + L.TUPLE_ITEMS + 8 * j, seq)
        if items_count(seq) < rows:
            rows = items_count(seq)
        j += 1
    result = list_with(rows)
    if rows == 0:
        return result
    size = L.TUPLE_ITEMS + 8 * cols
    row = alloc(size * rows)
    target = load(result + L.LIST_ITEMS)
    i = 0
    while i < rows:
        store(row, L.TAG_TUPLE)
        store(row + L.TUPLE_LEN, cols)
        j = 0
        while j < cols:
            seq = load(columns + L.TUPLE_ITEMS + 8 * j)
            store(row + L.TUPLE_ITEMS + 8 * j, load(items_address(seq) + 8 * i))
            j += 1
        store(target + 8 * i, row)
        row += size
        i += 1
    return result


def builtin_reversed(x: int) -> int:
    """``reversed(x)``: a new list of the items of ``x``, last first."""
    check_iterable(x, text("reversed"))
    seq = items_of(x)
    n = items_count(seq)
    result = list_with(n)
    source = items_address(seq) + 8 * n
    target = load(result + L.LIST_ITEMS)
    end = target + 8 * n
    while target < end:
        source -= 8
        store(target, load(source))
        target += 8
    return result


# -- sorted, min, max -------------------------------------------------------------------
#
# The calls of a key function are made by the builtin's own function, not a helper, so
# that a traceback through the key function shows the builtin's frame as Go's does.


def builtin_sorted(x: int, key: int, reverse: int) -> int:
    """``sorted(iterable, key=None, reverse=False)``: a new list, sorted stably."""
    if is_iterable(x) == 0:
        error_argument_type(text("sorted"), text("iterable"), x, text("iterable"))
    if key != 0 and is_callable(key) == 0:
        error_argument_type(text("sorted"), text('"key"'), key, text("callable"))
    backwards = 0
    if reverse != 0:
        if reverse != L.TRUE_ADDRESS and reverse != L.FALSE_ADDRESS:
            error_argument_type(text("sorted"), text('"reverse"'), reverse, text("bool"))
        backwards = reverse == L.TRUE_ADDRESS
    held = iter_start(x)
    result = list_from_seq(held)
    n = load(result + L.LIST_LEN)
    values = load(result + L.LIST_ITEMS)
    keys = values
    if key != 0 and n > 0:
        keys = alloc_block(L.TAG_VBLOCK, 8 * n)
        argument = tuple_with(1)
        i = 0
        while i < n:
            store(argument + L.TUPLE_ITEMS, load(values + 8 * i))
            store(keys + 8 * i, call_value(key, argument, 0))
            i += 1
    iter_end(held)
    if sort_items(values, keys, n, backwards) == FAILED:
        error(comparison_failure(0), text("sorted"))
    return result


def list_from_seq(seq: int) -> int:
    """A new list of the items of a sequence being iterated (``iter_start``)."""
    tag = load(seq) & L.TAG_MASK
    if tag == L.TAG_LIST or tag == L.TAG_TUPLE:
        return list_from_items(items_address(seq), items_count(seq))
    return iterated_list(seq)


def builtin_min(key: int, args: int) -> int:
    held = extremum_iterable(key, args, text("min"))
    seq = held_items(held, text("min"))
    n = items_count(seq)
    items = items_address(seq)
    best = load(items)
    best_key = best
    argument = 0
    if key != 0:
        argument = tuple_with(1)
        store(argument + L.TUPLE_ITEMS, best)
        best_key = call_value(key, argument, 0)
    i = 1
    while i < n:
        item = load(items + 8 * i)
        item_key = item
        if key != 0:
            store(argument + L.TUPLE_ITEMS, item)
            item_key = call_value(key, argument, 0)
        if beats(item_key, best_key, text("min"), 0):
            best = item
            best_key = item_key
        i += 1
    iter_end(held)
    return best


def builtin_max(key: int, args: int) -> int:
    held = extremum_iterable(key, args, text("max"))
    seq = held_items(held, text("max"))
    n = items_count(seq)
    items = items_address(seq)
    best = load(items)
    best_key = best
    argument = 0
    if key != 0:
        argument = tuple_with(1)
        store(argument + L.TUPLE_ITEMS, best)
        best_key = call_value(key, argument, 0)
    i = 1
    while i < n:
        item = load(items + 8 * i)
        item_key = item
        if key != 0:
            store(argument + L.TUPLE_ITEMS, item)
            item_key = call_value(key, argument, 0)
        if beats(item_key, best_key, text("max"), 2):
            best = item
            best_key = item_key
        i += 1
    iter_end(held)
    return best


def extremum_iterable(key: int, args: int, name: int) -> int:
    """What ``min`` or ``max`` (``name``) goes through: the one iterable argument, or
    all the arguments; checked as Go checks it, and held (see ``iter_start``)."""
    count = load(args + L.TUPLE_LEN)
    if count == 0:
        b = buf_new(64)
        buf_str(b, name)
        buf_str(b, text(" requires at least one positional argument"))
        error(buf_to_string(b, L.TAG_STRING), name)
    if key != 0 and is_callable(key) == 0:
        error_argument_type(name, text('"key"'), key, text("callable"))
    x = args
    if count == 1:
        x = load(args + L.TUPLE_ITEMS)
        if is_iterable(x) == 0:
            error_with_type(prefixed(name, text("")), x, text(" value is not iterable"), name)
    return iter_start(x)


def held_items(held: int, name: int) -> int:
    """A list or tuple of the items of the held iterable, which must have some."""
    seq = held
    tag = load(held) & L.TAG_MASK
    if tag != L.TAG_LIST and tag != L.TAG_TUPLE:
        seq = list_from_seq(held)
    if items_count(seq) == 0:
        error(prefixed(name, text("argument is an empty sequence")), name)
    return seq


def beats(item_key: int, best_key: int, name: int, op: int) -> int:
    """Whether ``item_key < best_key`` (``op`` 0, for ``min``) or ``item_key >
    best_key`` (``op`` 2, ``max``); an error of the builtin ``name`` if they have no
    order."""
    if item_key & best_key & 1:
        if op == 0:
            return (item_key ^ L.SIGN_BIT) < (best_key ^ L.SIGN_BIT)
        return (item_key ^ L.SIGN_BIT) > (best_key ^ L.SIGN_BIT)
    order = order_within(item_key, best_key, COMPARE_DEPTH)
    if order == FAILED:
        error(prefixed(name, comparison_failure(op)), name)
    if op == 0:
        return order == 0 - 1
    return order == 1
