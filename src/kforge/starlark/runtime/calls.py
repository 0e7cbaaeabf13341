"""Calls through values: binding arguments to parameters as the Go implementation
does (its ``setArgs``, with its error messages), builtins and bound methods as values.

A call whose callee the compiler cannot know builds a tuple of the positional
arguments and a dict of the keyword arguments (or 0) and calls ``call_value``.  A
Starlark function's *generic entry* (made by the compiler for each function) calls
``bind_arguments`` and jumps to the function with its parameters in registers.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import jump_address, load, store

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        alloc,
        alloc_object,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.dicts import dict_new, dict_put
    from kforge.starlark.runtime.lists import tuple_from_items, tuple_with
    from kforge.starlark.runtime.sequences import is_iterable, iterable_to_list
    from kforge.starlark.runtime.values import (
        bytes_equal,
        dict_find,
        error_with_type,
        hash_value,
        tag_of,
    )


def call_value(fn: int, args: int, kwargs: int) -> int:
    """Call any callable value with an argument tuple and a keyword dict (or 0)."""
    tag = tag_of(fn)
    if tag == L.TAG_FUNCTION:
        jump_address(load(fn + L.FUNC_GENERIC), fn, args, kwargs)
    if tag == L.TAG_BUILTIN:
        return builtin_call(fn, args, kwargs)
    error_with_type("invalid call of non-function (", fn, ")", 0)
    return 0


def builtin_call(fn: int, args: int, kwargs: int) -> int:
    """Replaced, in each program that uses builtins as values, by a dispatch on the
    builtin's number made by the compiler."""
    error("this builtin cannot be called through a value in this program", 0)
    return 0


def bind_arguments(fn: int, args: int, kwargs: int) -> int:
    """Bind a call's arguments to the parameters of Starlark function ``fn``; returns
    a block of words: the ordinary parameters, then ``*args``, then ``**kwargs``."""
    desc = load(fn + L.FUNC_DESCRIPTOR)
    name = load(desc + L.DESC_NAME)
    nparams = load(desc + L.DESC_NPARAMS)
    nkwonly = load(desc + L.DESC_NKWONLY)
    flags = load(desc + L.DESC_FLAGS)
    ndefaults = load(desc + L.DESC_NDEFAULTS)
    has_varargs = flags & L.DESC_HAS_VARARGS
    has_kwargs = (flags & L.DESC_HAS_KWARGS) >> 1
    total = nparams + has_varargs + has_kwargs
    slots = alloc(8 * total + 8)
    nargs = load(args + L.TUPLE_LEN)
    nkeywords = 0
    if kwargs != 0:
        nkeywords = load(kwargs + L.DICT_LEN)
    if total == 0:
        if nargs + nkeywords > 0:
            b = buf_new(64)
            buf_str(b, "function ")
            buf_str(b, name)
            buf_str(b, " accepts no arguments (")
            buf_decimal(b, nargs + nkeywords)
            buf_str(b, " given)")
            error(buf_to_string(b, L.TAG_STRING), 0)
        return slots
    keyword_dict = 0
    if has_kwargs:
        keyword_dict = dict_new(0)
        store(slots + 8 * (nparams + has_varargs), keyword_dict)
    positional_limit = nparams - nkwonly
    n = nargs
    if nargs > positional_limit:
        if has_varargs == 0:
            error_too_many_positional(name, positional_limit, ndefaults > nkwonly, nargs)
        n = positional_limit
    i = 0
    while i < n:
        store(slots + 8 * i, load(args + L.TUPLE_ITEMS + 8 * i))
        i += 1
    if has_varargs:
        store(slots + 8 * nparams, tuple_from_items(args + L.TUPLE_ITEMS + 8 * n, nargs - n))
    if kwargs != 0:
        bind_keywords(desc, name, slots, nparams, kwargs, keyword_dict)
    if n < nparams or nkwonly > 0:
        fill_defaults(fn, desc, name, slots, n, nparams, ndefaults)
    return slots


def error_too_many_positional(name: int, limit: int, at_most: int, given: int) -> None:
    b = buf_new(64)
    buf_str(b, "function ")
    buf_str(b, name)
    buf_str(b, " accepts ")
    if at_most:
        buf_str(b, "at most ")
    buf_decimal(b, limit)
    buf_str(b, " positional argument")
    if limit != 1:
        buf_str(b, "s")
    buf_str(b, " (")
    buf_decimal(b, given)
    buf_str(b, " given)")
    error(buf_to_string(b, L.TAG_STRING), 0)


def bind_keywords(desc: int, name: int, slots: int, nparams: int, kwargs: int, keyword_dict: int) -> None:
    entries = load(kwargs + L.DICT_ENTRIES)
    used = load(kwargs + L.DICT_USED)
    k = 0
    while k < used:
        e = entries + L.DICT_ENTRY_SIZE * k
        key = load(e + 8)
        k += 1
        if key == 0:
            continue
        value = load(e + 16)
        i = parameter_index(desc, nparams, key)
        if i != 0 - 1:
            if load(slots + 8 * i) != 0:
                error_parameter(name, " got multiple values for parameter ", key)
            store(slots + 8 * i, value)
            continue
        if keyword_dict == 0:
            error_parameter(name, " got an unexpected keyword argument ", key)
        h = hash_value(key)
        if dict_find(keyword_dict, key, h) != 0:
            error_parameter(name, " got multiple values for parameter ", key)
        dict_put(keyword_dict, key, value, h)


def parameter_index(desc: int, nparams: int, key: int) -> int:
    i = 0
    while i < nparams:
        if bytes_equal(load(desc + L.DESC_PARAMS + 8 * i), key):
            return i
        i += 1
    return 0 - 1


def error_parameter(name: int, middle: int, parameter: int) -> None:
    b = buf_new(64)
    buf_str(b, "function ")
    buf_str(b, name)
    buf_str(b, middle)
    buf_str(b, parameter)
    error(buf_to_string(b, L.TAG_STRING), 0)


def fill_defaults(fn: int, desc: int, name: int, slots: int, n: int, nparams: int, ndefaults: int) -> None:
    first_default = nparams - ndefaults
    defaults = load(fn + L.FUNC_DEFAULTS)
    missing = buf_new(32)
    count = 0
    i = n
    while i < nparams:
        if load(slots + 8 * i) == 0:
            value = 0
            if i >= first_default:
                value = load(defaults + L.TUPLE_ITEMS + 8 * (i - first_default))
            if value == 0:
                if count > 0:
                    buf_str(missing, ", ")
                buf_str(missing, load(desc + L.DESC_PARAMS + 8 * i))
                count += 1
            else:
                store(slots + 8 * i, value)
        i += 1
    if count > 0:
        b = buf_new(64)
        buf_str(b, "function ")
        buf_str(b, name)
        buf_str(b, " missing ")
        buf_decimal(b, count)
        buf_str(b, " argument")
        if count > 1:
            buf_str(b, "s")
        buf_str(b, " (")
        buf_str(b, buf_to_string(missing, L.TAG_STRING))
        buf_str(b, ")")
        error(buf_to_string(b, L.TAG_STRING), 0)


def make_builtin(number: int, receiver: int, name: int) -> int:
    """A builtin function (``receiver`` 0) or a method bound to ``receiver``, as a value."""
    v = alloc_object(L.TAG_BUILTIN, L.BUILTIN_SIZE)
    store(v + L.BUILTIN_ID, number)
    store(v + L.BUILTIN_RECEIVER, receiver)
    store(v + L.BUILTIN_NAME, name)
    return v


def concat_args(positional: int, extra: int) -> int:
    """``f(a, *extra)``: the positional tuple with the items of ``extra`` appended."""
    if is_iterable(extra) == 0:
        error_with_type("argument after * must be iterable, not ", extra, "", 0)
    items = iterable_to_list(extra)
    n = load(positional + L.TUPLE_LEN)
    m = load(items + L.LIST_LEN)
    result = tuple_with(n + m)
    i = 0
    while i < n:
        store(result + L.TUPLE_ITEMS + 8 * i, load(positional + L.TUPLE_ITEMS + 8 * i))
        i += 1
    items_address = load(items + L.LIST_ITEMS)
    i = 0
    while i < m:
        store(result + L.TUPLE_ITEMS + 8 * (n + i), load(items_address + 8 * i))
        i += 1
    return result


def merge_kwargs(keywords: int, mapping: int) -> None:
    """``f(**mapping)``: its string keys join the keyword arguments."""
    if tag_of(mapping) != L.TAG_DICT:
        error_with_type("argument after ** must be a mapping, not ", mapping, "", 0)
    entries = load(mapping + L.DICT_ENTRIES)
    used = load(mapping + L.DICT_USED)
    i = 0
    while i < used:
        e = entries + L.DICT_ENTRY_SIZE * i
        key = load(e + 8)
        i += 1
        if key == 0:
            continue
        if tag_of(key) != L.TAG_STRING:
            error_with_type("keywords must be strings, not ", key, "", 0)
        h = hash_value(key)
        if dict_find(keywords, key, h) != 0:
            b = buf_new(64)
            buf_str(b, "got multiple values for keyword argument ")
            buf_str(b, key)
            error(buf_to_string(b, L.TAG_STRING), 0)
        dict_put(keywords, key, load(e + 16), h)
