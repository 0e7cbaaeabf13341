"""``str`` and ``repr`` of every value, written into byte buffers; ``print``.

Values are written straight into the buffer they end up in (the output buffer of
``print``, the buffer of a new string), so printing makes no intermediate strings.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import FLOATS, Global, load, loadb, sar, slt, store, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import big_write_decimal
    from kforge.starlark.runtime.core import (
        alloc_block,
        buf_byte,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        buf_write,
        error,
        send_buffer,
    )
    from kforge.starlark.runtime.float_text import write_float
    from kforge.starlark.runtime.strings import utf8_decode
    from kforge.starlark.runtime.unicode import is_printable
    from kforge.starlark.runtime.values import tag_of, type_name

_HEX: Final = text("0123456789abcdef")
#: Containers being written (for ``[...]`` on a cycle): a block of words and a count.
_active = Global(__name__)
_active_count = Global(__name__)
_ACTIVE_MAX: Final = 1024


def write_str(b: int, v: int) -> None:
    """Append ``str(v)``: a string's own bytes, anything else as ``repr``."""
    if v & 1:
        write_int(b, v)
        return
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_STRING:
        buf_str(b, v)
        return
    if tag == L.TAG_BYTES:
        write_bytes_as_text(b, v)
        return
    write_repr(b, v)


def write_int(b: int, v: int) -> None:
    if v & 1:
        n = sar(v, 1)
        if slt(n, 0):
            buf_byte(b, 45)
            n = 0 - n
        buf_decimal(b, n)
        return
    big_write_decimal(b, v)


def write_repr(b: int, v: int) -> None:
    """Append ``repr(v)``."""
    if v & 1:
        write_int(b, v)
        return
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_STRING:
        write_quoted(b, v, 0)
    elif tag == L.TAG_BYTES:
        write_quoted(b, v, 1)
    elif tag == L.TAG_NONE:
        buf_str(b, text("None"))
    elif tag == L.TAG_BOOL:
        if v == L.TRUE_ADDRESS:
            buf_str(b, text("True"))
        else:
            buf_str(b, text("False"))
    elif tag == L.TAG_BIGINT:
        big_write_decimal(b, v)
    elif tag == L.TAG_LIST:
        if enter(v):
            buf_byte(b, 91)
            write_items(b, load(v + L.LIST_ITEMS), load(v + L.LIST_LEN))
            buf_byte(b, 93)
            leave()
        else:
            buf_str(b, text("[...]"))
    elif tag == L.TAG_TUPLE:
        buf_byte(b, 40)
        n = load(v + L.TUPLE_LEN)
        write_items(b, v + L.TUPLE_ITEMS, n)
        if n == 1:
            buf_byte(b, 44)
        buf_byte(b, 41)
    elif tag == L.TAG_DICT:
        if enter(v):
            write_dict(b, v)
            leave()
        else:
            buf_str(b, text("{...}"))
    elif tag == L.TAG_RANGE:
        write_range(b, v)
    elif tag == L.TAG_FUNCTION:
        buf_str(b, text("<function "))
        buf_str(b, load(load(v + L.FUNC_DESCRIPTOR) + L.DESC_NAME))
        buf_byte(b, 62)
    elif tag == L.TAG_BUILTIN:
        receiver = load(v + L.BUILTIN_RECEIVER)
        if receiver == 0:
            buf_str(b, text("<built-in function "))
            buf_str(b, load(v + L.BUILTIN_NAME))
            buf_byte(b, 62)
        else:
            buf_str(b, text("<built-in method "))
            buf_str(b, load(v + L.BUILTIN_NAME))
            buf_str(b, text(" of "))
            buf_str(b, type_name(receiver))
            buf_str(b, text(" value>"))
    elif tag == L.TAG_MODULE:
        buf_str(b, text("<module "))
        write_quoted(b, load(v + L.MODULE_NAME), 0)
        buf_byte(b, 62)
    elif tag == L.TAG_STRING_ELEMS:
        write_elems(b, v)
    else:
        if FLOATS and tag == L.TAG_FLOAT:
            write_float(b, v)
            return
        buf_str(b, text("<"))
        buf_str(b, type_name(v))
        buf_str(b, text(">"))


def write_items(b: int, items: int, n: int) -> None:
    i = 0
    while i < n:
        if i > 0:
            buf_byte(b, 44)
            buf_byte(b, 32)
        write_repr(b, load(items + 8 * i))
        i += 1


def write_dict(b: int, d: int) -> None:
    buf_byte(b, 123)
    entries = load(d + L.DICT_ENTRIES)
    used = load(d + L.DICT_USED)
    first = 1
    i = 0
    while i < used:
        e = entries + L.DICT_ENTRY_SIZE * i
        key = load(e + 8)
        if key != 0:
            if first == 0:
                buf_byte(b, 44)
                buf_byte(b, 32)
            first = 0
            write_repr(b, key)
            buf_byte(b, 58)
            buf_byte(b, 32)
            write_repr(b, load(e + 16))
        i += 1
    buf_byte(b, 125)


def write_range(b: int, r: int) -> None:
    start = load(r + L.RANGE_START)
    stop = load(r + L.RANGE_STOP)
    step = load(r + L.RANGE_STEP)
    buf_str(b, text("range("))
    if start != 0 or step != 1:
        write_signed(b, start)
        buf_str(b, text(", "))
    write_signed(b, stop)
    if step != 1:
        buf_str(b, text(", "))
        write_signed(b, step)
    buf_byte(b, 41)


def write_signed(b: int, n: int) -> None:
    if slt(n, 0):
        buf_byte(b, 45)
        n = 0 - n
    buf_decimal(b, n)


def write_elems(b: int, v: int) -> None:
    kind = load(v + L.ELEMS_KIND)
    s = load(v + L.ELEMS_STRING)
    if kind == L.ELEMS_BYTES_ELEMS:
        write_quoted(b, s, 1)
        buf_str(b, text(".elems()"))
        return
    write_quoted(b, s, 0)
    if kind == L.ELEMS_ELEMS:
        buf_str(b, text(".elems()"))
    elif kind == L.ELEMS_CODEPOINTS:
        buf_str(b, text(".codepoints()"))
    elif kind == L.ELEMS_CODEPOINT_ORDS:
        buf_str(b, text(".codepoint_ords()"))
    else:
        buf_str(b, text(".elem_ords()"))


def enter(v: int) -> int:
    """Note that container ``v`` is being written; 0 if it already is (a cycle)."""
    active = _active.value
    if active == 0:
        active = alloc_block(L.TAG_VBLOCK, 8 * _ACTIVE_MAX)
        _active.value = active
    count = _active_count.value
    i = 0
    while i < count:
        if load(active + 8 * i) == v:
            return 0
        i += 1
    if count >= _ACTIVE_MAX:
        error(text("value nested too deeply to print"), 0)
    store(active + 8 * count, v)
    _active_count.value = count + 1
    return 1


def leave() -> None:
    _active_count.value = _active_count.value - 1


def write_quoted(b: int, s: int, is_bytes: int) -> None:
    """Append the quoted form of a str (or bytes, with the ``b`` prefix), escaping as
    the Go implementation does."""
    if is_bytes:
        buf_byte(b, 98)
    buf_byte(b, 34)
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    i = 0
    while i < n:
        c = loadb(p + i)
        if c < 128:
            write_ascii_escaped(b, c)
            i += 1
            continue
        decoded = utf8_decode(p + i, n - i)
        width = decoded >> 32
        if width == 0:
            buf_str(b, text("\\x"))
            buf_byte(b, loadb(_HEX + L.STR_DATA + (c >> 4)))
            buf_byte(b, loadb(_HEX + L.STR_DATA + (c & 15)))
            i += 1
            continue
        code = decoded & 0xFFFFFFFF
        if is_printable(code):
            buf_write(b, p + i, width)
        else:
            write_code_escape(b, code)
        i += width
    buf_byte(b, 34)


def write_ascii_escaped(b: int, c: int) -> None:
    if c == 34 or c == 92:
        buf_byte(b, 92)
        buf_byte(b, c)
    elif c >= 32 and c < 127:
        buf_byte(b, c)
    elif c == 7:
        buf_str(b, text("\\a"))
    elif c == 8:
        buf_str(b, text("\\b"))
    elif c == 12:
        buf_str(b, text("\\f"))
    elif c == 10:
        buf_str(b, text("\\n"))
    elif c == 13:
        buf_str(b, text("\\r"))
    elif c == 9:
        buf_str(b, text("\\t"))
    elif c == 11:
        buf_str(b, text("\\v"))
    else:
        buf_str(b, text("\\x"))
        buf_byte(b, loadb(_HEX + L.STR_DATA + (c >> 4)))
        buf_byte(b, loadb(_HEX + L.STR_DATA + (c & 15)))


def write_code_escape(b: int, code: int) -> None:
    digits = 4
    if code >= 0x10000:
        buf_str(b, text("\\U"))
        digits = 8
    else:
        buf_str(b, text("\\u"))
    shift = 4 * digits
    while shift > 0:
        shift -= 4
        buf_byte(b, loadb(_HEX + L.STR_DATA + ((code >> shift) & 15)))


def write_bytes_as_text(b: int, v: int) -> None:
    """``str(bytes)``: the bytes as UTF-8 text, each invalid byte as U+FFFD."""
    p = v + L.STR_DATA
    n = load(v + L.STR_LEN)
    i = 0
    while i < n:
        c = loadb(p + i)
        if c < 128:
            buf_byte(b, c)
            i += 1
            continue
        width = utf8_decode(p + i, n - i) >> 32
        if width == 0:
            buf_byte(b, 0xEF)
            buf_byte(b, 0xBF)
            buf_byte(b, 0xBD)
            i += 1
        else:
            buf_write(b, p + i, width)
            i += width


# -- print ----------------------------------------------------------------------------


def print_end(b: int) -> None:
    """End a ``print``: a newline, and the line goes out on stdout."""
    buf_byte(b, 10)
    send_buffer(1, b)


def print_separator(sep: int) -> int:
    if tag_of(sep) != L.TAG_STRING:
        error_with_type_name(
            text('print: for parameter "sep": got '), sep, text(", want string"), text("print")
        )
    return sep


def error_with_type_name(before: int, v: int, after: int, builtin: int) -> None:
    b = buf_new(64)
    buf_str(b, before)
    buf_str(b, type_name(v))
    buf_str(b, after)
    error(buf_to_string(b, L.TAG_STRING), builtin)


def error_with_value(before: int, v: int, after: int) -> None:
    """An error whose message shows ``str(v)`` between two strs."""
    b = buf_new(64)
    buf_str(b, before)
    write_str(b, v)
    buf_str(b, after)
    error(buf_to_string(b, L.TAG_STRING), 0)


def value_str(v: int) -> int:
    """``str(v)`` as a new str (a str is itself)."""
    if tag_of(v) == L.TAG_STRING:
        return v
    b = buf_new(32)
    write_str(b, v)
    return buf_to_string(b, L.TAG_STRING)


def value_repr(v: int) -> int:
    b = buf_new(32)
    write_repr(b, v)
    return buf_to_string(b, L.TAG_STRING)
