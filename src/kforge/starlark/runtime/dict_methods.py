"""The methods of dicts: clear, get, items, keys, pop, popitem, setdefault, update,
values; and the updating that ``dict(...)`` shares with ``update``.

Each checks what the Go implementation checks, in its order, and fails in its words
(``Error in pop: pop: missing key``).  ``items``, ``keys`` and ``values`` return new
lists, as Go's do.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, store, text
from kforge.starlark.runtime.values import LOOKUP_FAILED

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        alloc,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.dicts import (
        dict_add,
        dict_remove_entry,
        error_dict_immutable,
        index_clear,
    )
    from kforge.starlark.runtime.lists import list_with
    from kforge.starlark.runtime.sequences import is_iterable, iter_end, iter_item, iter_start
    from kforge.starlark.runtime.values import (
        dict_find,
        error_compare_depth,
        error_with_type,
        hash_key,
        prefixed,
        type_name,
    )

ENTRY = L.DICT_ENTRY_SIZE


def dict_clear(d: int) -> int:
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, text("clear"), 0, text("clear"))  # Go's clear names no method here
    store(d + L.DICT_LEN, 0)
    store(d + L.DICT_USED, 0)
    index_clear(d)
    return L.NONE_ADDRESS


def dict_get(d: int, key: int, default: int) -> int:
    e = dict_find(d, key, hash_key(key, text("get")))
    if e > LOOKUP_FAILED:
        return load(e + 16)
    if e == LOOKUP_FAILED:
        error_compare_depth(text("get"))
    if default != 0:
        return default
    return L.NONE_ADDRESS


def find_entry(d: int, key: int, h: int, builtin: int) -> int:
    """The entry of ``key`` (of hash ``h``), or 0; a failed comparison is an error of
    the method ``builtin``."""
    e = dict_find(d, key, h)
    if e == LOOKUP_FAILED:
        error_compare_depth(builtin)
    return e


def dict_items(d: int) -> int:
    """A new list of ``(key, value)`` tuples, in order (the tuples in one allocation)."""
    n = load(d + L.DICT_LEN)
    result = list_with(n)
    if n == 0:
        return result
    size = L.TUPLE_ITEMS + 16
    pair = alloc(size * n)
    target = load(result + L.LIST_ITEMS)
    e = load(d + L.DICT_ENTRIES)
    end = e + ENTRY * load(d + L.DICT_USED)
    while e < end:
        key = load(e + 8)
        if key != 0:
            store(pair, L.TAG_TUPLE)
            store(pair + L.TUPLE_LEN, 2)
            store(pair + L.TUPLE_ITEMS, key)
            store(pair + L.TUPLE_ITEMS + 8, load(e + 16))
            store(target, pair)
            target += 8
            pair += size
        e += ENTRY
    return result


def dict_keys(d: int) -> int:
    return entry_words(d, 8)


def dict_values(d: int) -> int:
    return entry_words(d, 16)


def entry_words(d: int, offset: int) -> int:
    """A new list of the keys (``offset`` 8) or the values (16) of ``d``, in order."""
    result = list_with(load(d + L.DICT_LEN))
    target = load(result + L.LIST_ITEMS)
    e = load(d + L.DICT_ENTRIES)
    end = e + ENTRY * load(d + L.DICT_USED)
    while e < end:
        if load(e + 8) != 0:
            store(target, load(e + offset))
            target += 8
        e += ENTRY
    return result


def dict_pop(d: int, key: int, default: int) -> int:
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, text("delete from"), text("pop"), text("pop"))
    # Go hashes no key for a dict that never held one: d.pop([]) is then only missing
    if load(d + L.DICT_CAP) != 0:
        e = find_entry(d, key, hash_key(key, text("pop")), text("pop"))
        if e != 0:
            value = load(e + 16)
            dict_remove_entry(d, e)
            return value
    if default != 0:
        return default
    error(text("pop: missing key"), text("pop"))
    return 0


def dict_popitem(d: int) -> int:
    """Remove and return the first entry, as a ``(key, value)`` tuple.

    The holes that successive calls leave at the front are skipped with a hint kept in
    the first hole's value word: the entries before it are all holes (a hole's value
    word is otherwise 0, and compaction removes the holes with the hint)."""
    if load(d + L.DICT_LEN) == 0:
        error(text("popitem: empty dict"), text("popitem"))
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, text("delete from"), text("popitem"), text("popitem"))
    first = load(d + L.DICT_ENTRIES)
    e = first
    if load(first + 8) == 0:
        e = first + ENTRY * load(first + 16)
    while load(e + 8) == 0:
        e += ENTRY
    key = load(e + 8)
    value = load(e + 16)
    dict_remove_entry(d, e)
    store(first + 16, (e - first) // ENTRY + 1)
    pair = alloc(L.TUPLE_ITEMS + 16)
    store(pair, L.TAG_TUPLE)
    store(pair + L.TUPLE_LEN, 2)
    store(pair + L.TUPLE_ITEMS, key)
    store(pair + L.TUPLE_ITEMS + 8, value)
    return pair


def dict_setdefault(d: int, key: int, default: int) -> int:
    if default == 0:
        default = L.NONE_ADDRESS
    h = hash_key(key, text("setdefault"))
    e = find_entry(d, key, h, text("setdefault"))
    if e != 0:
        return load(e + 16)
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, text("insert into"), text("setdefault"), text("setdefault"))
    dict_add(d, key, default, h)
    return default


def dict_update(d: int, pairs: int, kwargs: int) -> int:
    update_dict(d, pairs, kwargs, text("update"))
    return L.NONE_ADDRESS


def update_dict(d: int, pairs: int, kwargs: int, builtin: int) -> None:
    """Go's ``updateDict``, for ``d.update`` and ``dict``: the entries of a dict, or the
    ``(key, value)`` pairs of an iterable, then the keyword arguments; the errors say
    ``NAME: ...`` for the builtin ``builtin``."""
    if pairs != 0:
        if (pairs & 1) == 0 and (load(pairs) & L.TAG_MASK) == L.TAG_DICT:
            update_from_entries(d, pairs, builtin)
        elif is_iterable(pairs):
            update_from_pairs(d, pairs, builtin)
        else:
            error_with_type(
                prefixed(builtin, text("got ")), pairs, text(", want iterable"), builtin
            )
    if kwargs != 0:
        update_from_entries(d, kwargs, builtin)


def update_from_entries(d: int, other: int, builtin: int) -> None:
    e = load(other + L.DICT_ENTRIES)
    end = e + ENTRY * load(other + L.DICT_USED)
    while e < end:
        key = load(e + 8)
        if key != 0:
            put_entry(d, key, load(e + 16), load(e), builtin)
        e += ENTRY


def put_entry(d: int, key: int, value: int, h: int, builtin: int) -> None:
    """``d[key] = value`` (``h`` the hash of ``key``) for the method ``builtin``."""
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, text("insert into"), builtin, builtin)
    e = find_entry(d, key, h, builtin)
    if e != 0:
        store(e + 16, value)
    else:
        dict_add(d, key, value, h)


def update_from_pairs(d: int, pairs: int, builtin: int) -> None:
    seq = iter_start(pairs)
    i = 0
    while True:
        pair = iter_item(seq, i)
        if pair == 0:
            break
        if is_iterable(pair) == 0:
            error_pair(builtin, i, text(" is not iterable ("), pair, text(")"))
        n = known_length(pair)
        if n == 0 - 1:
            error_pair(builtin, i, text(" has unknown length ("), pair, text(")"))
        if n != 2:
            b = buf_new(64)
            buf_str(b, builtin)
            buf_str(b, text(": dictionary update sequence element #"))
            buf_decimal(b, i)
            buf_str(b, text(" has length "))
            buf_decimal(b, n)
            buf_str(b, text(", want 2"))
            error(buf_to_string(b, L.TAG_STRING), builtin)
        tag = load(pair) & L.TAG_MASK
        if tag == L.TAG_TUPLE:
            key = load(pair + L.TUPLE_ITEMS)
            value = load(pair + L.TUPLE_ITEMS + 8)
        elif tag == L.TAG_LIST:
            key = load(load(pair + L.LIST_ITEMS))
            value = load(load(pair + L.LIST_ITEMS) + 8)
        else:
            inner = iter_start(pair)
            key = iter_item(inner, 0)
            value = iter_item(inner, 1)
            iter_end(inner)
        put_entry(d, key, value, hash_key(key, builtin), builtin)
        i += 1
    iter_end(seq)


def known_length(v: int) -> int:
    """The length of an iterable that has one in Go (not ``codepoints()`` and the
    like), or -1."""
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_LIST:
        return load(v + L.LIST_LEN)
    if tag == L.TAG_TUPLE:
        return load(v + L.TUPLE_LEN)
    if tag == L.TAG_DICT:
        return load(v + L.DICT_LEN)
    if tag == L.TAG_RANGE:
        return load(v + L.RANGE_LEN)
    kind = load(v + L.ELEMS_KIND)
    if kind == L.ELEMS_ELEMS or kind == L.ELEMS_ELEM_ORDS:
        return load(load(v + L.ELEMS_STRING) + L.STR_LEN)
    return 0 - 1


def error_pair(builtin: int, i: int, middle: int, pair: int, after: int) -> None:
    """``NAME: dictionary update sequence element #I MIDDLE TYPE AFTER``."""
    b = buf_new(64)
    buf_str(b, builtin)
    buf_str(b, text(": dictionary update sequence element #"))
    buf_decimal(b, i)
    buf_str(b, middle)
    buf_str(b, type_name(pair))
    buf_str(b, after)
    error(buf_to_string(b, L.TAG_STRING), builtin)
