"""Dicts: an insertion-ordered table of entries with an open-addressing index.

Entries (hash, key, value) are appended in insertion order; deleting one clears its
key and leaves a hole that the next growth (or iteration) compacts away, in place when
holes fill half the table.  A dict of
up to :data:`LINEAR_MAX` entries has no index and is searched by scanning its
entries' hashes, which is faster at that size and saves memory; a larger one has an
index of ``2 * capacity`` words (entry number + 1, or 0 for empty) probed as
CPython's dict does.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, noreturn, store, text
from kforge.starlark.runtime.values import LOOKUP_FAILED

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        alloc,
        alloc_object,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.format import write_repr
    from kforge.starlark.runtime.values import dict_find, error_compare_depth, hash_key

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
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, verb, 0, 0)


@noreturn
def error_dict_immutable(d: int, verb: int, prefix: int, builtin: int) -> None:
    """``cannot VERB frozen hash table`` or ``... hash table during iteration``, after
    ``PREFIX: `` if ``prefix``; ``builtin`` names the method that tried, or is 0."""
    b = buf_new(64)
    if prefix != 0:
        buf_str(b, prefix)
        buf_str(b, text(": "))
    buf_str(b, text("cannot "))
    buf_str(b, verb)
    if load(d) & L.FLAG_FROZEN:
        buf_str(b, text(" frozen hash table"))
    else:
        buf_str(b, text(" hash table during iteration"))
    error(buf_to_string(b, L.TAG_STRING), builtin)


def dict_resize(d: int, capacity: int) -> None:
    """Give ``d`` a new table for ``capacity`` entries, dropping holes."""
    if capacity > (1 << 32):
        error(text("dict too large"), 0)
    old = load(d + L.DICT_ENTRIES)
    end = old + ENTRY * load(d + L.DICT_USED)
    block = alloc(L.BLOCK_DATA + ENTRY * capacity)
    store(block, L.TAG_EBLOCK)
    store(block + L.BLOCK_CAP, ENTRY * capacity)
    entries = block + L.BLOCK_DATA
    target = entries
    while old < end:
        key = load(old + 8)
        if key != 0:
            store(target, load(old))
            store(target + 8, key)
            store(target + 16, load(old + 16))
            target += ENTRY
        old += ENTRY
    count = (target - entries) // ENTRY
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
    store(d + L.DICT_INDEX, index_block + L.BLOCK_DATA)
    store(d + L.DICT_MASK, size - 1)
    index_entries(d)


def index_entries(d: int) -> None:
    """Enter every entry of ``d`` (which has no holes) in its empty index."""
    index = load(d + L.DICT_INDEX)
    mask = load(d + L.DICT_MASK)
    e = load(d + L.DICT_ENTRIES)
    count = load(d + L.DICT_USED)
    number = 1
    while number <= count:
        index_insert(index, mask, load(e), number)
        e += ENTRY
        number += 1


def index_insert(index: int, mask: int, h: int, number: int) -> None:
    slot = h & mask
    perturb = h
    while load(index + 8 * slot) != 0:
        perturb = perturb >> 5
        slot = (slot * 5 + 1 + perturb) & mask
    store(index + 8 * slot, number)


def dict_compact(d: int) -> None:
    """Drop the holes deleted entries left, in place (keeps the order)."""
    live = load(d + L.DICT_LEN)
    used = load(d + L.DICT_USED)
    if used == live:
        return
    e = load(d + L.DICT_ENTRIES)
    end = e + ENTRY * used
    target = e
    while e < end:
        key = load(e + 8)
        if key != 0:
            if target != e:
                store(target, load(e))
                store(target + 8, key)
                store(target + 16, load(e + 16))
            target += ENTRY
        e += ENTRY
    store(d + L.DICT_USED, live)
    if load(d + L.DICT_INDEX) != 0:
        index_clear(d)
        index_entries(d)


def index_clear(d: int) -> None:
    """Empty the index of ``d`` (if it has one)."""
    index = load(d + L.DICT_INDEX)
    if index != 0:
        last = index + 8 * load(d + L.DICT_MASK)
        while index <= last:
            store(index, 0)
            index += 8


def dict_set(d: int, key: int, value: int) -> None:
    """``d[key] = value``."""
    if (load(d) & L.FLAG_FROZEN) | load(d + L.DICT_ITERS):
        error_dict_immutable(d, text("insert into"), 0, 0)
    dict_put(d, key, value, hash_key(key, 0))


def dict_put(d: int, key: int, value: int, h: int) -> None:
    """Set ``key`` (of hash ``h``) to ``value``, with no mutability check."""
    e = dict_find(d, key, h)
    if e > LOOKUP_FAILED:
        store(e + 16, value)
    elif e == 0:
        dict_add(d, key, value, h)
    else:
        error_compare_depth(0)


def dict_add(d: int, key: int, value: int, h: int) -> None:
    """Add an entry for ``key`` (of hash ``h``), which ``d`` does not hold."""
    used = load(d + L.DICT_USED)
    if used == load(d + L.DICT_CAP):
        live = load(d + L.DICT_LEN)
        if 2 * live <= used and live < used:
            dict_compact(d)  # holes fill half the table: reuse it
        else:
            wanted = 2 * live
            if wanted < 4:
                wanted = 4
            dict_resize(d, wanted)
        used = live
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
    h = hash_key(key, 0)
    e = dict_find(d, key, h)
    if e == LOOKUP_FAILED:
        error_compare_depth(0)
    if e != 0:
        b = buf_new(32)
        buf_str(b, text("duplicate key: "))
        write_repr(b, key)
        error(buf_to_string(b, L.TAG_STRING), 0)
    dict_add(d, key, value, h)


def dict_remove_entry(d: int, e: int) -> None:
    """Delete entry ``e`` of ``d``: it becomes a hole, dropped when the dict next grows
    or is iterated."""
    store(e + 8, 0)
    store(e + 16, 0)
    store(d + L.DICT_LEN, load(d + L.DICT_LEN) - 1)


def dict_update_from(d: int, other: int) -> None:
    """Insert every entry of dict ``other`` into ``d``, in order."""
    add_entries(d, other, 0)


def dict_copy(d: int) -> int:
    """A new dict with the entries of ``d``."""
    result = dict_new(load(d + L.DICT_LEN))
    add_entries(result, d, 1)
    return result


def add_entries(d: int, other: int, fresh: int) -> None:
    """Put the entries of ``other`` into ``d``, in order; into a ``fresh`` dict, which
    cannot hold their keys (distinct already), without looking them up."""
    e = load(other + L.DICT_ENTRIES)
    end = e + ENTRY * load(other + L.DICT_USED)
    while e < end:
        key = load(e + 8)
        if key != 0:
            if fresh:
                dict_add(d, key, load(e + 16), load(e))
            else:
                dict_put(d, key, load(e + 16), load(e))
        e += ENTRY


def dict_union(a: int, b: int) -> int:
    """``a | b``: a new dict with ``a`` 's entries, then ``b`` 's (which win)."""
    result = dict_copy(a)
    dict_update_from(result, b)
    return result
