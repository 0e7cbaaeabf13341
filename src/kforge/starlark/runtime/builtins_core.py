"""The builtin functions about values in general: len, str, repr, type, bool, fail,
list, tuple, dict.

Each ``builtin_NAME`` receives its parameters as bound by the compiler (0 for an
optional parameter not given); see :mod:`kforge.starlark.builtins` for the table.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, noreturn, sar, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        buf_byte,
        buf_new,
        buf_str,
        buf_to_string,
        error,
        output_buffer,
    )
    from kforge.starlark.runtime.dict_methods import update_dict
    from kforge.starlark.runtime.dicts import dict_copy, dict_new
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
    if (x & 1) == 0:
        tag = load(x) & L.TAG_MASK
        if tag == L.TAG_LIST or tag == L.TAG_TUPLE:  # both keep their length at offset 8
            return (load(x + L.LIST_LEN) << 1) | 1
        n = length_of(x)
        if n != 0 - 1:
            return small(n)
        if elems_indexable(x):
            return small(load(load(x + L.ELEMS_STRING) + L.STR_LEN))
    error_with_type(text("len: value of type "), x, text(" has no len"), text("len"))
    return 0


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
        error_with_type(
            text("fail: for parameter sep: got "), sep, text(", want string"), text("fail")
        )
    b = buf_new(64)
    buf_str(b, text("fail: "))
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
    error(buf_to_string(b, L.TAG_STRING), text("fail"))
    return 0


def builtin_list(x: int) -> int:
    if x == 0:
        return list_from_items(0, 0)
    if is_iterable(x) == 0:
        error_argument_type(text("list"), text("1"), x, text("iterable"))
    return iterable_to_list(x)


def builtin_tuple(x: int) -> int:
    if x == 0:
        return tuple_from_items(0, 0)
    if tag_of(x) == L.TAG_TUPLE:
        return x
    if is_iterable(x) == 0:
        error_argument_type(text("tuple"), text("1"), x, text("iterable"))
    items = iterable_to_list(x)
    return tuple_from_items(load(items + L.LIST_ITEMS), load(items + L.LIST_LEN))


def builtin_dict(pairs: int, kwargs: int) -> int:
    """``dict(pairs?, **kwargs)``."""
    if kwargs == 0 and pairs != 0 and tag_of(pairs) == L.TAG_DICT:
        return dict_copy(pairs)
    result = dict_new(0)
    update_dict(result, pairs, kwargs, text("dict"))
    return result


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


# -- arguments, checked as Go's UnpackArgs checks them ---------------------------------


@noreturn
def error_argument_type(builtin: int, parameter: int, v: int, want: int) -> None:
    """``NAME: for parameter P: got T, want WANT``, Go's words for an argument of the
    wrong type.  ``parameter`` (a str) is as Go shows it: the position (``1``) of an
    argument given by position to most builtins, the name (``iterable``) for builtins
    that take keywords, the quoted name (``"key"``) of an argument given by keyword."""
    b = buf_new(64)
    buf_str(b, builtin)
    buf_str(b, text(": for parameter "))
    buf_str(b, parameter)
    buf_str(b, text(": got "))
    buf_str(b, type_name(v))
    buf_str(b, text(", want "))
    buf_str(b, want)
    error(buf_to_string(b, L.TAG_STRING), builtin)


def int_argument(v: int, builtin: int, parameter: int) -> int:
    """An int argument as a signed machine word (Go's ``AsInt`` into an ``int``); the
    errors name the builtin and the parameter (see ``error_argument_type``)."""
    if v & 1:
        return sar(v, 1)
    if tag_of(v) != L.TAG_BIGINT:
        error_argument_type(builtin, parameter, v, text("int"))
    info = load(v + L.BIGINT_INFO)
    if (info & L.BIGINT_COUNT_MASK) == 1:
        magnitude = load(v + L.BIGINT_LIMBS)
        if info >> 32 == 0 and magnitude < L.SIGN_BIT:
            return magnitude
        if info >> 32 != 0 and magnitude <= L.SIGN_BIT:
            return 0 - magnitude
    b = buf_new(64)
    buf_str(b, builtin)
    buf_str(b, text(": for parameter "))
    buf_str(b, parameter)
    buf_str(b, text(": "))
    write_str(b, v)
    buf_str(b, text(" out of range (want value in signed 64-bit range)"))
    error(buf_to_string(b, L.TAG_STRING), builtin)
    return 0


def check_iterable(v: int, builtin: int) -> None:
    """Go's ``Iterable`` first parameter: ``NAME: for parameter 1: got T, want iterable``."""
    if is_iterable(v) == 0:
        error_argument_type(builtin, text("1"), v, text("iterable"))


def is_callable(v: int) -> int:
    if v & 1:
        return 0
    tag = load(v) & L.TAG_MASK
    return tag == L.TAG_FUNCTION or tag == L.TAG_BUILTIN
