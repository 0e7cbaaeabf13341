"""The primitives of the ``forge`` module: channels, the environment, the tick budget,
and the little-endian numbers the host protocols use.

The ``forge`` module itself (``forge.star`` beside the compiler) is Starlark built on
these; they are predeclared in it only.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    budget,
    heap_limit,
    heap_pointer,
    load,
    loadb,
    poll,
    recv,
    sar,
    send,
    set_heap_pointer,
    slt,
    store,
    storeb,
    text,
    tick,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import environment_address, error, out_of_memory
    from kforge.starlark.runtime.dicts import dict_new, dict_set
    from kforge.starlark.runtime.format import error_with_value
    from kforge.starlark.runtime.gc import gc_make_room
    from kforge.starlark.runtime.strings import string_new
    from kforge.starlark.runtime.values import error_with_type, small, tag_of


def host_channel(channel: int, name: int) -> int:
    """A channel argument (an int 0..7) as a machine word."""
    if (channel & 1) == 0:
        error_with_type(name, channel, text(", want int"), 0)
    number = sar(channel, 1)
    if slt(number, 0) or number > 7:
        error_with_value(
            text("forge: no channel "), channel, text(" (channels are 0..7; 8..15 are reserved)")
        )
    return number


def host_data(data: int) -> int:
    """The str or bytes a message is made of."""
    tag = tag_of(data)
    if tag != L.TAG_STRING and tag != L.TAG_BYTES:
        error_with_type(text("forge: a message is str or bytes, not "), data, text(""), 0)
    return data


def builtin__send(channel: int, data: int) -> int:
    """``_send(channel, data)``: one message out on ``channel``."""
    number = host_channel(channel, text("forge.send: for parameter channel: got "))
    data = host_data(data)
    address = data + L.STR_DATA
    length = load(data + L.STR_LEN)
    if number == 0:
        send(0, address, length)
    elif number == 1:
        send(1, address, length)
    elif number == 2:
        send(2, address, length)
    elif number == 3:
        send(3, address, length)
    elif number == 4:
        send(4, address, length)
    elif number == 5:
        send(5, address, length)
    elif number == 6:
        send(6, address, length)
    else:
        send(7, address, length)
    return L.NONE_ADDRESS


def builtin__recv(channel: int, as_text: int) -> int:
    """``_recv(channel, as_text)``: the next message on ``channel`` (waiting for one), as
    bytes, or as a str when ``as_text`` is true.  The message lands straight in the free
    heap, so receiving copies nothing and wastes nothing."""
    number = host_channel(channel, text("forge.recv: for parameter channel: got "))
    gc_make_room()  # a message that does not fit is lost: collect while it may help
    s = heap_pointer()
    if heap_limit() - s < L.STR_DATA + 8:
        out_of_memory()
    room = heap_limit() - s - L.STR_DATA
    address = s + L.STR_DATA
    if number == 0:
        length = recv(0, address, room)
    elif number == 1:
        length = recv(1, address, room)
    elif number == 2:
        length = recv(2, address, room)
    elif number == 3:
        length = recv(3, address, room)
    elif number == 4:
        length = recv(4, address, room)
    elif number == 5:
        length = recv(5, address, room)
    elif number == 6:
        length = recv(6, address, room)
    else:
        length = recv(7, address, room)
    if length > room:
        error(text("forge.recv: the message does not fit in the memory left"), 0)
    tag = L.TAG_BYTES
    if as_text != L.FALSE_ADDRESS and as_text != 0:
        tag = L.TAG_STRING
    store(s, tag)
    store(s + L.STR_LEN, length)
    set_heap_pointer(s + ((L.STR_DATA + length + 7) & ~7))
    return s


def builtin__poll(channel: int) -> int:
    number = host_channel(channel, text("forge.poll: for parameter channel: got "))
    if number == 0:
        return small(poll(0))
    if number == 1:
        return small(poll(1))
    if number == 2:
        return small(poll(2))
    if number == 3:
        return small(poll(3))
    if number == 4:
        return small(poll(4))
    if number == 5:
        return small(poll(5))
    if number == 6:
        return small(poll(6))
    return small(poll(7))


def builtin__budget() -> int:
    return small(budget())


def builtin__tick() -> int:
    tick()
    return L.NONE_ADDRESS


def builtin__env() -> int:
    """The environment block as a dict of str to str (keys in ascending order)."""
    address = environment_address.value
    result = dict_new(0)
    count = load(address)
    position = address + 8
    i = 0
    while i < count:
        key_length = load(position)
        key = text_at(position + 8, key_length)
        position += 8 + ((key_length + 7) & ~7)
        value_length = load(position)
        value = text_at(position + 8, value_length)
        position += 8 + ((value_length + 7) & ~7)
        dict_set(result, key, value)
        i += 1
    return result


def text_at(address: int, length: int) -> int:
    s = string_new(L.TAG_STRING, length)
    i = 0
    while i < length:
        storeb(s + L.STR_DATA + i, loadb(address + i))
        i += 1
    return s


def builtin__le(value: int, width: int) -> int:
    """``_le(value, width)``: the ``width`` (small int 1..8) low bytes of ``value``, least
    significant first, as bytes."""
    if (value & 1) == 0:
        error_with_type(text("forge: a number must be an int, not "), value, text(""), 0)
    n = sar(value, 1)
    count = sar(width, 1)
    b = string_new(L.TAG_BYTES, count)
    i = 0
    while i < count:
        storeb(b + L.STR_DATA + i, n)
        n = n >> 8
        i += 1
    return b


def builtin__read_le(data: int, offset: int, width: int) -> int:
    """``_read_le(data, offset, width)``: the unsigned little-endian number of ``width``
    bytes (1..7, so it fits a small int) at ``offset`` in ``data``."""
    start = sar(offset, 1)
    count = sar(width, 1)
    if slt(start, 0) or start + count > load(data + L.STR_LEN):
        error(text("forge: a reply from the host is shorter than its protocol says"), 0)
    n = 0
    i = count
    while i > 0:
        i -= 1
        n = (n << 8) | loadb(data + L.STR_DATA + start + i)
    return small(n)
