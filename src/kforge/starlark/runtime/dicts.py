"""Dicts: an insertion-ordered table of entries with an open-addressing index.

Entries (hash, key, value) are appended in insertion order; deleting one clears its
key and leaves a hole that the next growth (or iteration) compacts away.  A dict of
up to :data:`LINEAR_MAX` entries has no index and is searched by scanning its
entries' hashes, which is faster at that size and saves memory; a larger one has an
index of ``2 * capacity`` words (entry number + 1, or 0 for empty) probed as
CPython's dict does.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, store

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc, alloc_object, copy_bytes, error
    from kforge.starlark.runtime.format import error_with_value
    from kforge.starlark.runtime.strings import string_concat
    from kforge.starlark.runtime.values import dict_find, hash_value

LINEAR_MAX: Final = 8
ENTRY: Final = L.DICT_ENTRY_SIZE


def dict_new(capacity: int) -> int:
    """A new empty dict with room for ``capacity`` entries (a machine word)."""
    d = alloc_object(L.TAG_DICT, L.DICT_SIZE)
    if capacity > 0:
        dict_resize(d, capacity)
    return d


def check_dict_mutable(d: int, verb: int) -> None:
    """``cannot insert into frozen hash table`` and its siblings (Go's words)."""
    if load(d) & L.FLAG_FROZEN:
        error(string_concat(string_concat("cannot ", verb), " frozen hash table"), 0)
    if load(d + L.DICT_ITERS) != 0:
        error(string_concat(string_concat("cannot ", verb), " hash table during iteration"), 0)


def dict_resize(d: int, capacity: int) -> None:
    """Give ``d`` room for ``capacity`` entries, dropping holes; rebuild the index."""
    if capacity > (1 << 32):
        error("dict too large", 0)
    old = load(d + L.DICT_ENTRIES)
    used = load(d + L.DICT_USED)
    block = alloc(L.BLOCK_DATA + ENTRY * capacity)
    store(block, L.TAG_BLOCK)
    store(block + L.BLOCK_CAP, ENTRY * capacity)
    entries = block + L.BLOCK_DATA
    count = 0
    i = 0
    while i < used:
        e = old + ENTRY * i
        if load(e + 8) != 0:
            copy_bytes(entries + ENTRY * count, e, ENTRY)
            count += 1
        i += 1
    store(d + L.DICT_ENTRIES, entries)
    store(d + L.DICT_CAP, capacity)
    store(d + L.DICT_USED, count)
    store(d + L.DICT_LEN, count)
    if capacity <= LINEAR_MAX:
        store(d + L.DICT_INDEX, 0)
        return
    size = 16
    while size < 2 * capacity:
        size = size * 2
    index_block = alloc(L.BLOCK_DATA + 8 * size)
    store(index_block, L.TAG_BLOCK)
    store(index_block + L.BLOCK_CAP, 8 * size)
    index = index_block + L.BLOCK_DATA
    store(d + L.DICT_INDEX, index)
    store(d + L.DICT_MASK, size - 1)
    i = 0
    while i < count:
        index_insert(index, size - 1, load(entries + ENTRY * i), i + 1)
        i += 1


def index_insert(index: int, mask: int, h: int, number: int) -> None:
    slot = h & mask
    perturb = h
    while load(index + 8 * slot) != 0:
        perturb = perturb >> 5
        slot = (slot * 5 + 1 + perturb) & mask
    store(index + 8 * slot, number)


def dict_compact(d: int) -> None:
    """Drop the holes deleted entries left (keeps the order)."""
    if load(d + L.DICT_USED) != load(d + L.DICT_LEN):
        dict_resize(d, load(d + L.DICT_CAP))


def dict_set(d: int, key: int, value: int) -> None:
    """``d[key] = value``."""
    check_dict_mutable(d, "insert into")
    dict_put(d, key, value, hash_value(key))


def dict_put(d: int, key: int, value: int, h: int) -> None:
    e = dict_find(d, key, h)
    if e != 0:
        store(e + 16, value)
        return
    used = load(d + L.DICT_USED)
    capacity = load(d + L.DICT_CAP)
    if used == capacity:
        wanted = 2 * load(d + L.DICT_LEN)
        if wanted < 4:
            wanted = 4
        if wanted <= load(d + L.DICT_LEN):
            wanted = load(d + L.DICT_LEN) + 1
        dict_resize(d, wanted)
        used = load(d + L.DICT_USED)
    e = load(d + L.DICT_ENTRIES) + ENTRY * used
    store(e, h)
    store(e + 8, key)
    store(e + 16, value)
    store(d + L.DICT_USED, used + 1)
    store(d + L.DICT_LEN, load(d + L.DICT_LEN) + 1)
    index = load(d + L.DICT_INDEX)
    if index != 0:
        index_insert(index, load(d + L.DICT_MASK), h, used + 1)


def dict_literal_set(d: int, key: int, value: int) -> None:
    """An entry of a dict literal: a key given twice is an error."""
    h = hash_value(key)
    if dict_find(d, key, h) != 0:
        error_with_value("duplicate key: ", key, "")
    dict_put(d, key, value, h)


def dict_get_entry(d: int, key: int) -> int:
    """The entry of ``key`` (an error if ``key`` is unhashable), or 0."""
    return dict_find(d, key, hash_value(key))


def dict_delete(d: int, key: int) -> int:
    """Remove ``key``; returns its value, or 0 if it was absent."""
    check_dict_mutable(d, "delete from")
    e = dict_find(d, key, hash_value(key))
    if e == 0:
        return 0
    value = load(e + 16)
    store(e + 8, 0)
    store(e + 16, 0)
    store(d + L.DICT_LEN, load(d + L.DICT_LEN) - 1)
    return value


def dict_update_from(d: int, other: int) -> None:
    """Insert every entry of dict ``other`` into ``d``, in order."""
    entries = load(other + L.DICT_ENTRIES)
    used = load(other + L.DICT_USED)
    i = 0
    while i < used:
        e = entries + ENTRY * i
        key = load(e + 8)
        if key != 0:
            dict_put(d, key, load(e + 16), load(e))
        i += 1


def dict_copy(d: int) -> int:
    result = dict_new(load(d + L.DICT_LEN))
    dict_update_from(result, d)
    return result


def dict_union(a: int, b: int) -> int:
    """``a | b``: a new dict with ``a`` 's entries, then ``b`` 's (which win)."""
    result = dict_copy(a)
    dict_update_from(result, b)
    return result


def dict_key_at(d: int, i: int) -> int:
    """The key of the ``i`` th entry of a dict without holes, or 0 past the end."""
    if i >= load(d + L.DICT_USED):
        return 0
    return load(load(d + L.DICT_ENTRIES) + ENTRY * i + 8)
