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
from kforge.starlark.runtime.intrinsics import (
    Global,
    jump_address,
    load,
    loadb,
    store,
    storeb,
    text,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        alloc_block,
        alloc_object,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.dicts import dict_new, dict_put
    from kforge.starlark.runtime.format import write_repr
    from kforge.starlark.runtime.generated import method_names, method_number
    from kforge.starlark.runtime.lists import (
        list_append_unchecked,
        list_from_items,
        list_with,
        tuple_from_items,
        tuple_with,
    )
    from kforge.starlark.runtime.sequences import is_iterable, iterable_to_list
    from kforge.starlark.runtime.values import (
        bytes_compare,
        bytes_equal,
        dict_find,
        error_with_type,
        hash_value,
        tag_of,
        type_name,
    )


#: A keyword given twice in one call (by name and through ``**``), for the callee's
#: binding to report in its own words.
_duplicate_keyword = Global(__name__)


def call_value(fn: int, args: int, kwargs: int) -> int:
    """Call any callable value with an argument tuple and a keyword dict (or 0)."""
    tag = tag_of(fn)
    if tag == L.TAG_FUNCTION:
        jump_address(load(fn + L.FUNC_GENERIC), fn, args, kwargs)
    if tag == L.TAG_BUILTIN:
        return builtin_call(fn, args, kwargs)
    _duplicate_keyword.value = 0
    error_with_type(text("invalid call of non-function ("), fn, text(")"), 0)
    return 0


def builtin_call(fn: int, args: int, kwargs: int) -> int:
    """Replaced, in each program that uses builtins as values, by a dispatch on the
    builtin's number made by the compiler."""
    error(text("this builtin cannot be called through a value in this program"), 0)
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
    slots = alloc_block(L.TAG_VBLOCK, 8 * total + 8)
    nargs = load(args + L.TUPLE_LEN)
    nkeywords = 0
    if kwargs != 0:
        nkeywords = load(kwargs + L.DICT_LEN)
    duplicate = _duplicate_keyword.value
    if duplicate != 0:
        _duplicate_keyword.value = 0
        error_parameter(name, text(" got multiple values for parameter "), duplicate)
    if total == 0:
        if nargs + nkeywords > 0:
            b = buf_new(64)
            buf_str(b, text("function "))
            buf_str(b, name)
            buf_str(b, text(" accepts no arguments ("))
            buf_decimal(b, nargs + nkeywords)
            buf_str(b, text(" given)"))
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
    buf_str(b, text("function "))
    buf_str(b, name)
    buf_str(b, text(" accepts "))
    if at_most:
        buf_str(b, text("at most "))
    buf_decimal(b, limit)
    buf_str(b, text(" positional argument"))
    if limit != 1:
        buf_str(b, text("s"))
    buf_str(b, text(" ("))
    buf_decimal(b, given)
    buf_str(b, text(" given)"))
    error(buf_to_string(b, L.TAG_STRING), 0)


def bind_keywords(
    desc: int, name: int, slots: int, nparams: int, kwargs: int, keyword_dict: int
) -> None:
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
                error_parameter(name, text(" got multiple values for parameter "), key)
            store(slots + 8 * i, value)
            continue
        if keyword_dict == 0:
            error_parameter(name, text(" got an unexpected keyword argument "), key)
        h = hash_value(key)
        if dict_find(keyword_dict, key, h) != 0:
            error_parameter(name, text(" got multiple values for parameter "), key)
        dict_put(keyword_dict, key, value, h)


def parameter_index(desc: int, nparams: int, key: int) -> int:
    i = 0
    while i < nparams:
        if bytes_equal(load(desc + L.DESC_PARAMS + 8 * i), key):
            return i
        i += 1
    return 0 - 1


def error_parameter(name: int, middle: int, parameter: int) -> None:
    """``function NAME got ... "parameter"`` (the name quoted, as Go's %q does)."""
    b = buf_new(64)
    buf_str(b, text("function "))
    buf_str(b, name)
    buf_str(b, middle)
    write_repr(b, parameter)
    error(buf_to_string(b, L.TAG_STRING), 0)


def fill_defaults(
    fn: int, desc: int, name: int, slots: int, n: int, nparams: int, ndefaults: int
) -> None:
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
                    buf_str(missing, text(", "))
                buf_str(missing, load(desc + L.DESC_PARAMS + 8 * i))
                count += 1
            else:
                store(slots + 8 * i, value)
        i += 1
    if count > 0:
        b = buf_new(64)
        buf_str(b, text("function "))
        buf_str(b, name)
        buf_str(b, text(" missing "))
        buf_decimal(b, count)
        buf_str(b, text(" argument"))
        if count > 1:
            buf_str(b, text("s"))
        buf_str(b, text(" ("))
        buf_str(b, buf_to_string(missing, L.TAG_STRING))
        buf_str(b, text(")"))
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
        error_with_type(text("argument after * must be iterable, not "), extra, text(""), 0)
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
        error_with_type(text("argument after ** must be a mapping, not "), mapping, text(""), 0)
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
            error_with_type(text("keywords must be strings, not "), key, text(""), 0)
        h = hash_value(key)
        if dict_find(keywords, key, h) != 0:
            # reported by the callee's binding, which knows the callee's name
            _duplicate_keyword.value = key
        dict_put(keywords, key, load(e + 16), h)


# -- builtins as values ---------------------------------------------------------------


def bind_builtin(desc: int, args: int, kwargs: int) -> int:
    """Bind the arguments of a call of a builtin through a value, by its descriptor
    (see ``builtin_descriptor`` in the compiler): returns the words its runtime
    function takes: parameters, keyword-only parameters, ``*args`` tuple, ``**kwargs``."""
    name = load(desc + L.BDESC_NAME)
    nparams = load(desc + L.BDESC_NPARAMS)
    nkwonly = load(desc + L.BDESC_NKWONLY)
    required = load(desc + L.BDESC_REQUIRED)
    flags = load(desc + L.BDESC_FLAGS)
    keywords_allowed = load(desc + L.BDESC_KEYWORDS)
    total = nparams + nkwonly
    slots = alloc_block(L.TAG_VBLOCK, 8 * total + 24)
    nargs = load(args + L.TUPLE_LEN)
    nkeywords = 0
    if kwargs != 0:
        nkeywords = load(kwargs + L.DICT_LEN)
    duplicate = _duplicate_keyword.value
    if duplicate != 0:
        _duplicate_keyword.value = 0
        if flags & L.BDESC_HAS_KWARGS:  # dict and update: Go merges them as entries
            error_builtin_keyword(name, text(": duplicate keyword arg: "), duplicate)
        error_builtin_keyword(name, text(": got multiple values for keyword argument "), duplicate)
    if nkeywords > 0 and keywords_allowed == 0 and (flags & L.BDESC_HAS_KWARGS) == 0:
        error_builtin_text(name, text(": unexpected keyword arguments"))
    if nargs > nparams and (flags & L.BDESC_HAS_VARARGS) == 0:
        error_builtin_count(name, nargs, nparams, flags, required)
    n = nargs
    if n > nparams:
        n = nparams
    i = 0
    while i < n:
        store(slots + 8 * i, load(args + L.TUPLE_ITEMS + 8 * i))
        i += 1
    extra_keywords = 0
    if nkeywords > 0:
        entries = load(kwargs + L.DICT_ENTRIES)
        used = load(kwargs + L.DICT_USED)
        k = 0
        while k < used:
            e = entries + L.DICT_ENTRY_SIZE * k
            key = load(e + 8)
            k += 1
            if key == 0:
                continue
            j = 0
            found = 0 - 1
            while j < total:
                if (keywords_allowed >> j) & 1 and bytes_equal(
                    load(desc + L.BDESC_PARAMS + 8 * j), key
                ):
                    found = j

                j += 1
            if found == 0 - 1:
                if (flags & L.BDESC_HAS_KWARGS) == 0:
                    error_unexpected_keyword(desc, name, key, total, keywords_allowed)
                if extra_keywords == 0:
                    extra_keywords = dict_new(0)
                dict_put(extra_keywords, key, load(e + 16), hash_value(key))
                continue
            if load(slots + 8 * found) != 0:
                error_builtin_keyword(
                    name, text(": got multiple values for keyword argument "), key
                )
            store(slots + 8 * found, load(e + 16))
    i = 0
    while i < required:
        if load(slots + 8 * i) == 0:
            if nkeywords == 0 and keywords_allowed == 0:
                error_builtin_count(name, nargs, nparams, flags, required)
            b = buf_new(64)
            buf_str(b, name)
            buf_str(b, text(": missing argument for "))
            buf_str(b, load(desc + L.BDESC_PARAMS + 8 * i))
            error(buf_to_string(b, L.TAG_STRING), name)
        i += 1
    position = total
    if flags & L.BDESC_HAS_VARARGS:
        extra = 0
        if nargs > nparams:
            extra = nargs - nparams
        store(slots + 8 * position, tuple_from_items(args + L.TUPLE_ITEMS + 8 * n, extra))
        position += 1
    if flags & L.BDESC_HAS_KWARGS:
        store(slots + 8 * position, extra_keywords)
    return slots


def error_builtin_text(name: int, text: int) -> None:
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text)
    error(buf_to_string(b, L.TAG_STRING), name)


def error_builtin_keyword(name: int, text: int, key: int) -> None:
    """``NAME: TEXT "key"`` (the key quoted, as Go's %q does)."""
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text)
    write_repr(b, key)
    error(buf_to_string(b, L.TAG_STRING), name)


def error_unexpected_keyword(desc: int, name: int, key: int, total: int, allowed: int) -> None:
    """``NAME: unexpected keyword argument "key"``, with the nearest parameter that may
    be given by keyword as a hint."""
    candidates = alloc_block(L.TAG_VBLOCK, 8 * total + 8)
    count = 0
    j = 0
    while j < total:
        if (allowed >> j) & 1:
            store(candidates + 8 * count, load(desc + L.BDESC_PARAMS + 8 * j))
            count += 1
        j += 1
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text(": unexpected keyword argument "))
    write_repr(b, key)
    hint = nearest_name(key, candidates, count)
    if hint != 0:
        buf_str(b, text(" (did you mean "))
        buf_str(b, hint)
        buf_str(b, text("?)"))
    error(buf_to_string(b, L.TAG_STRING), name)


def error_builtin_count(name: int, given: int, nparams: int, flags: int, required: int) -> None:
    """``NAME: got N arguments, want [at least |at most |exactly ]M``."""
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text(": got "))
    buf_decimal(b, given)
    buf_str(b, text(" arguments, want "))
    if given > nparams:
        if flags & L.BDESC_EXACTLY:
            buf_str(b, text("exactly "))
        elif required < nparams:
            buf_str(b, text("at most "))
        buf_decimal(b, nparams)
    else:
        if flags & L.BDESC_EXACTLY:
            buf_str(b, text("exactly "))
        elif required < nparams:
            buf_str(b, text("at least "))
        buf_decimal(b, required)
    error(buf_to_string(b, L.TAG_STRING), name)


def getattr_value(x: int, name: int) -> int:
    """``x.name`` for a name that is no method of ``x`` 's type: a module's member, or
    the error ``T has no .name field or method``."""
    if tag_of(x) == L.TAG_MODULE:
        e = dict_find(load(x + L.MODULE_MEMBERS), name, hash_value(name))
        if e != 0:
            return load(e + 16)
    b = buf_new(64)
    buf_str(b, type_name(x))
    buf_str(b, text(" has no ."))
    buf_str(b, name)
    buf_str(b, text(" field or method"))
    names = builtin_dir(x)
    hint = nearest_name(name, load(names + L.LIST_ITEMS), load(names + L.LIST_LEN))
    if hint != 0:
        buf_str(b, text(" (did you mean ."))
        buf_str(b, hint)
        buf_str(b, text("?)"))
    error(buf_to_string(b, L.TAG_STRING), 0)
    return 0


def nearest_name(name: int, names: int, count: int) -> int:
    """The str among ``count`` words at ``names`` that ``name`` most likely misspells, or
    0: ``kforge.starlark.spelling.nearest`` (underscores dropped, ASCII letters lowered;
    a candidate needs fewer edits than half the folded name; the first of equals wins)."""
    x = folded_name(name)
    best = 0
    best_distance = (load(x) + 1) >> 1
    i = 0
    while i < count:
        candidate = load(names + 8 * i)
        i += 1
        distance = edit_distance(x, folded_name(candidate))
        if distance < best_distance:
            best = candidate
            best_distance = distance
    return best


def folded_name(s: int) -> int:
    """A scratch copy of a str's bytes (length word, then bytes) without underscores and
    with ASCII capitals lowered."""
    n = load(s + L.STR_LEN)
    out = alloc_block(L.TAG_BLOCK, n + 8)
    length = 0
    i = 0
    while i < n:
        c = loadb(s + L.STR_DATA + i)
        i += 1
        if c == 95:
            continue
        if c >= 65 and c <= 90:
            c += 32
        storeb(out + 8 + length, c)
        length += 1
    store(out, length)
    return out


def edit_distance(a: int, b: int) -> int:
    """Levenshtein distance between two folded names, one row of the table at a time."""
    if load(a) > load(b):
        t = a
        a = b
        b = t
    na = load(a)
    nb = load(b)
    row = alloc_block(L.TAG_BLOCK, 8 * nb + 8)
    j = 0
    while j <= nb:
        store(row + 8 * j, j)
        j += 1
    i = 1
    while i <= na:
        previous = load(row)
        store(row, i)
        ca = loadb(a + 7 + i)
        j = 1
        while j <= nb:
            best = previous
            if ca != loadb(b + 7 + j):
                best += 1
            previous = load(row + 8 * j)
            if load(row + 8 * (j - 1)) + 1 < best:
                best = load(row + 8 * (j - 1)) + 1
            if previous + 1 < best:
                best = previous + 1
            store(row + 8 * j, best)
            j += 1
        i += 1
    return load(row + 8 * nb)


def setattr_value(x: int, name: int, value: int) -> None:
    b = buf_new(64)
    buf_str(b, text("can't assign to ."))
    buf_str(b, name)
    buf_str(b, text(" field of "))
    buf_str(b, type_name(x))
    error(buf_to_string(b, L.TAG_STRING), 0)


def builtin_getattr(x: int, name: int, default: int) -> int:
    """``getattr(x, name[, default])``."""
    if tag_of(name) != L.TAG_STRING:
        error_with_type(
            text("getattr: for parameter name: got "), name, text(", want string"), text("getattr")
        )
    value = attribute_or_zero(x, name)
    if value != 0:
        return value
    if default != 0:
        return default
    b = buf_new(64)
    buf_str(b, text("getattr: "))
    buf_str(b, type_name(x))
    buf_str(b, text(" has no ."))
    buf_str(b, name)
    buf_str(b, text(" field or method"))
    error(buf_to_string(b, L.TAG_STRING), text("getattr"))
    return 0


def builtin_hasattr(x: int, name: int) -> int:
    if tag_of(name) != L.TAG_STRING:
        error_with_type(
            text("hasattr: for parameter name: got "), name, text(", want string"), text("hasattr")
        )
    if attribute_or_zero(x, name) != 0:
        return L.TRUE_ADDRESS
    return L.FALSE_ADDRESS


def attribute_or_zero(x: int, name: int) -> int:
    tag = tag_of(x)
    if tag == L.TAG_MODULE:
        e = dict_find(load(x + L.MODULE_MEMBERS), name, hash_value(name))
        if e != 0:
            return load(e + 16)
        return 0
    number = method_number(tag, name)
    if number == 0:
        return 0
    return make_builtin(number, x, name)


def builtin_dir(x: int) -> int:
    """``dir(x)``: the sorted names of ``x`` 's methods (or a module's members)."""
    if tag_of(x) == L.TAG_MODULE:
        return sorted_keys(load(x + L.MODULE_MEMBERS))
    names = method_names(tag_of(x))
    return list_from_items(names + L.TUPLE_ITEMS, load(names + L.TUPLE_LEN))


def sorted_keys(d: int) -> int:
    """A new list of a dict's string keys in ascending order (insertion sort: small)."""
    result = list_with(0)
    entries = load(d + L.DICT_ENTRIES)
    used = load(d + L.DICT_USED)
    i = 0
    while i < used:
        key = load(entries + L.DICT_ENTRY_SIZE * i + 8)
        i += 1
        if key == 0:
            continue
        list_append_unchecked(result, key)
        items = load(result + L.LIST_ITEMS)
        j = load(result + L.LIST_LEN) - 1
        while j > 0 and bytes_compare(load(items + 8 * (j - 1)), key) == 1:
            store(items + 8 * j, load(items + 8 * (j - 1)))
            j -= 1
        store(items + 8 * j, key)
    return result


# -- calls through values that allocate nothing ---------------------------------------


def simple_arity(fn: int) -> int:
    """For a Starlark function whose fast entry takes exactly its positional parameters
    (no defaults needed beyond them, no ``*args``, ``**kwargs`` or keyword-only
    parameters): their number; otherwise -1 (as a word)."""
    if tag_of(fn) != L.TAG_FUNCTION:
        return 0 - 1
    desc = load(fn + L.FUNC_DESCRIPTOR)
    if (load(desc + L.DESC_FLAGS) & (L.DESC_HAS_VARARGS | L.DESC_HAS_KWARGS)) != 0:
        return 0 - 1
    if load(desc + L.DESC_NKWONLY) != 0:
        return 0 - 1
    return load(desc + L.DESC_NPARAMS)


def call_value0(fn: int) -> int:
    """``fn()`` for any callable; a Starlark function of no parameters is entered directly."""
    if simple_arity(fn) == 0:
        jump_address(load(fn + L.FUNC_ENTRY), fn)
    return call_value(fn, tuple_with(0), 0)


def call_value1(a: int, fn: int) -> int:
    """``fn(a)``: the argument stays in its register when ``fn`` takes exactly one."""
    if simple_arity(fn) == 1:
        jump_address(load(fn + L.FUNC_ENTRY), a, fn)
    args = tuple_with(1)
    store(args + L.TUPLE_ITEMS, a)
    return call_value(fn, args, 0)


def call_value2(a: int, b: int, fn: int) -> int:
    if simple_arity(fn) == 2:
        jump_address(load(fn + L.FUNC_ENTRY), a, b, fn)
    args = tuple_with(2)
    store(args + L.TUPLE_ITEMS, a)
    store(args + L.TUPLE_ITEMS + 8, b)
    return call_value(fn, args, 0)


def call_value3(a: int, b: int, c: int, fn: int) -> int:
    if simple_arity(fn) == 3:
        jump_address(load(fn + L.FUNC_ENTRY), a, b, c, fn)
    args = tuple_with(3)
    store(args + L.TUPLE_ITEMS, a)
    store(args + L.TUPLE_ITEMS + 8, b)
    store(args + L.TUPLE_ITEMS + 16, c)
    return call_value(fn, args, 0)
