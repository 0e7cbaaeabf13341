"""The builtin functions about values in general: len, str, repr, type, bool, fail,
list, tuple, dict.

Each ``builtin_NAME`` receives its parameters as bound by the compiler (0 for an
optional parameter not given); see :mod:`kforge.starlark.builtins` for the table.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        buf_byte,
        buf_new,
        buf_str,
        buf_to_string,
        error,
        output_buffer,
    )
    from kforge.starlark.runtime.dicts import dict_copy, dict_new, dict_set
    from kforge.starlark.runtime.format import (
        print_end,
        print_separator,
        value_repr,
        value_str,
        write_str,
    )
    from kforge.starlark.runtime.lists import list_from_items, tuple_from_items
    from kforge.starlark.runtime.sequences import elems_indexable, is_iterable, iterable_to_list
    from kforge.starlark.runtime.values import (
        bool_value,
        error_with_type,
        length_of,
        small,
        tag_of,
        truth,
        type_name,
    )


def builtin_len(x: int) -> int:
    n = length_of(x)
    if n == 0 - 1:
        if elems_indexable(x):
            return small(load(load(x + L.ELEMS_STRING) + L.STR_LEN))
        error_with_type("len: value of type ", x, " has no len", "len")
    return small(n)


def builtin_str(x: int) -> int:
    return value_str(x)


def builtin_repr(x: int) -> int:
    return value_repr(x)


def builtin_type(x: int) -> int:
    return type_name(x)


def builtin_bool(x: int) -> int:
    if x == 0:
        return L.FALSE_ADDRESS
    return bool_value(truth(x))


def builtin_fail(sep: int, args: int) -> int:
    """``fail(*args, sep=" ")``: the error ``fail: ARGS`` (str of each, joined)."""
    if sep != 0 and tag_of(sep) != L.TAG_STRING:
        error_with_type("fail: for parameter sep: got ", sep, ", want string", "fail")
    b = buf_new(64)
    buf_str(b, "fail: ")
    n = load(args + L.TUPLE_LEN)
    i = 0
    while i < n:
        if i > 0:
            if sep != 0:
                buf_str(b, sep)
            else:
                buf_byte(b, 32)
        write_str(b, load(args + L.TUPLE_ITEMS + 8 * i))
        i += 1
    error(buf_to_string(b, L.TAG_STRING), "fail")
    return 0


def builtin_list(x: int) -> int:
    if x == 0:
        return list_from_items(0, 0)
    if is_iterable(x) == 0:
        error_with_type("list: for parameter 1: got ", x, ", want iterable", "list")
    return iterable_to_list(x)


def builtin_tuple(x: int) -> int:
    if x == 0:
        return tuple_from_items(0, 0)
    if tag_of(x) == L.TAG_TUPLE:
        return x
    if is_iterable(x) == 0:
        error_with_type("tuple: for parameter 1: got ", x, ", want iterable", "tuple")
    items = iterable_to_list(x)
    return tuple_from_items(load(items + L.LIST_ITEMS), load(items + L.LIST_LEN))


def builtin_dict(pairs: int, kwargs: int) -> int:
    """``dict(pairs?, **kwargs)``."""
    if pairs == 0:
        result = dict_new(0)
    elif tag_of(pairs) == L.TAG_DICT:
        result = dict_copy(pairs)
    else:
        result = dict_new(0)
        if is_iterable(pairs) == 0:
            error_with_type("dict: got ", pairs, ", want iterable", "dict")
        items = iterable_to_list(pairs)
        n = load(items + L.LIST_LEN)
        address = load(items + L.LIST_ITEMS)
        i = 0
        while i < n:
            pair = load(address + 8 * i)
            if is_iterable(pair) == 0:
                dict_error_pair(i, pair)
            two = unpack_pair(i, pair)
            dict_set(result, load(two), load(two + 8))
            i += 1
    if kwargs != 0:
        entries = load(kwargs + L.DICT_ENTRIES)
        used = load(kwargs + L.DICT_USED)
        i = 0
        while i < used:
            e = entries + L.DICT_ENTRY_SIZE * i
            if load(e + 8) != 0:
                dict_set(result, load(e + 8), load(e + 16))
            i += 1
    return result


def dict_error_pair(i: int, pair: int) -> None:
    b = buf_new(64)
    buf_str(b, "dict: cannot convert ")
    buf_str(b, type_name(pair))
    buf_str(b, " to sequence")
    error(buf_to_string(b, L.TAG_STRING), "dict")


def unpack_pair(i: int, pair: int) -> int:
    items = iterable_to_list(pair)
    if load(items + L.LIST_LEN) != 2:
        b = buf_new(64)
        buf_str(b, "dict: sequence has length ")
        write_str(b, small(load(items + L.LIST_LEN)))
        buf_str(b, ", want 2")
        error(buf_to_string(b, L.TAG_STRING), "dict")
    return load(items + L.LIST_ITEMS)


def builtin_print(sep: int, args: int) -> int:
    """``print`` called through a value (direct calls are compiled inline)."""
    if sep != 0:
        sep = print_separator(sep)
    b = output_buffer()
    n = load(args + L.TUPLE_LEN)
    i = 0
    while i < n:
        if i > 0:
            if sep != 0:
                buf_str(b, sep)
            else:
                buf_byte(b, 32)
        write_str(b, load(args + L.TUPLE_ITEMS + 8 * i))
        i += 1
    print_end(b)
    return L.NONE_ADDRESS


def builtin_float(x: int) -> int:
    """``float``: not available until floats are (a clear error, never a wrong answer)."""
    error("float: floating-point numbers are not supported yet", "float")
    return 0
