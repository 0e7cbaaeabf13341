"""The builtins of the Go implementation's test harness (compiled with ``testing=True``)
and freezing.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    catch_call,
    checked,
    heap_limit,
    load,
    set_heap_limit,
    store,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.calls import call_value
    from kforge.starlark.runtime.core import (
        alloc_object,
        buf_byte,
        buf_new,
        caught_error,
        send_buffer,
    )
    from kforge.starlark.runtime.dicts import dict_copy, dict_new
    from kforge.starlark.runtime.format import write_str
    from kforge.starlark.runtime.gc import gc_limit_slack
    from kforge.starlark.runtime.lists import tuple_with


def builtin_catch(f: int) -> int:
    """``catch(f)``: call ``f()``; the message of the error it raised, or None."""
    limit = heap_limit() + gc_limit_slack()
    catch_call(call_value, f, tuple_with(0), 0)
    set_heap_limit(limit - gc_limit_slack())  # the collector may have moved the limit
    message = caught_error()
    if message != 0:
        return message
    return L.NONE_ADDRESS


def builtin_error(message: int) -> int:
    """``error(msg)``: report a failed assertion on stderr and carry on."""
    b = buf_new(64)
    write_str(b, message)
    buf_byte(b, 10)
    send_buffer(2, b)
    return L.NONE_ADDRESS


def builtin_module(name: int, members: int) -> int:
    """``module(name, **members)``: a value whose attributes are ``members``."""
    m = alloc_object(L.TAG_MODULE | L.FLAG_FROZEN, L.MODULE_SIZE)
    store(m + L.MODULE_NAME, name)
    members = dict_new(0) if members == 0 else dict_copy(members)
    store(m + L.MODULE_MEMBERS, members)
    freeze(members)
    return m


def builtin_freeze(x: int) -> int:
    freeze(x)
    return x


@checked
def freeze(v: int) -> None:
    """Make ``v`` and everything reachable from it immutable."""
    if v & 1 or v == 0:
        return
    header = load(v)
    if header & L.FLAG_FROZEN and (header & L.TAG_MASK) != L.TAG_MODULE:
        return
    store(v, header | L.FLAG_FROZEN)
    tag = header & L.TAG_MASK
    if tag == L.TAG_LIST:
        freeze_items(load(v + L.LIST_ITEMS), load(v + L.LIST_LEN))
    elif tag == L.TAG_TUPLE:
        freeze_items(v + L.TUPLE_ITEMS, load(v + L.TUPLE_LEN))
    elif tag == L.TAG_DICT:
        entries = load(v + L.DICT_ENTRIES)
        used = load(v + L.DICT_USED)
        i = 0
        while i < used:
            e = entries + L.DICT_ENTRY_SIZE * i
            if load(e + 8) != 0:
                freeze(load(e + 8))
                freeze(load(e + 16))
            i += 1
    elif tag == L.TAG_FUNCTION:
        freeze(load(v + L.FUNC_DEFAULTS))
        freeze(load(v + L.FUNC_CELLS))
    elif tag == L.TAG_CELL:
        freeze(load(v + L.CELL_VALUE))
    elif tag == L.TAG_BUILTIN:
        freeze(load(v + L.BUILTIN_RECEIVER))
    elif tag == L.TAG_MODULE:
        members = load(v + L.MODULE_MEMBERS)
        if (load(members) & L.FLAG_FROZEN) == 0:
            freeze(members)


def freeze_items(items: int, n: int) -> None:
    i = 0
    while i < n:
        freeze(load(items + 8 * i))
        i += 1
