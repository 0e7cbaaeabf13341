"""The builtins about ints and characters: int, abs, hash, chr, ord.

Each ``builtin_NAME`` receives its parameters as bound by the compiler (0 for an
optional parameter not given); see :mod:`kforge.starlark.builtins` for the table.
Messages are the Go implementation's, word for word.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import FLOATS, load, loadb, sar, sgt, slt, store, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import (
        big_abs,
        big_alloc,
        big_finish,
        copy_limbs,
        int_fits_int32,
        mag_mul_limb,
        scratch,
    )
    from kforge.starlark.runtime.core import (
        buf_byte,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.floats import float_abs, float_int_value
    from kforge.starlark.runtime.format import write_str
    from kforge.starlark.runtime.strings import string_new, utf8_decode, utf8_encode
    from kforge.starlark.runtime.values import error_with_type, is_int, small, tag_of

_HEX_UPPER: Final = text("0123456789ABCDEF")
_LIMB_BASE: Final = 1 << 32


# -- int ------------------------------------------------------------------------------------


def builtin_int(x: int, base: int) -> int:
    """``int(x)``: an int, a bool, or a str in ``base`` (10 unless given; 0 lets a
    ``0x``/``0o``/``0b`` prefix decide)."""
    if tag_of(x) == L.TAG_STRING:
        b = 10
        if base != 0:
            if int_fits_int32(base) == 0:
                error_with_type(text("int: for base, got "), base, text(", want int"), text("int"))
            b = sar(base, 1)
            if b != 0 and (slt(b, 2) or sgt(b, 36)):
                error(text("int: base must be an integer >= 2 && <= 36"), text("int"))
        result = parse_int(x, b)
        if result == 0:
            error_invalid_literal(x, b)
        return result
    if base != 0:
        error(text("int: can't convert non-string with explicit base"), text("int"))
    if x == L.TRUE_ADDRESS:
        return small(1)
    if x == L.FALSE_ADDRESS:
        return small(0)
    if is_int(x):
        return x
    if FLOATS and tag_of(x) == L.TAG_FLOAT:
        return float_int_value(x, text("int: "), text("int"))
    error_with_type(text("int: cannot convert "), x, text(" to int"), text("int"))
    return 0


def parse_int(s: int, base: int) -> int:
    """The int the str ``s`` spells in ``base`` (0: by its prefix), or 0 (no value)
    if it spells none, by Go's rules: an optional sign, then a prefix (``0x``, ``0o``,
    ``0b``, either case) that ``base`` 0 requires for anything but zeros and an equal
    base permits, then digits; no spaces, no underscores."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    negative = 0
    if n > 0:
        c = loadb(p)
        if c == 43 or c == 45:  # + -
            negative = c == 45
            p += 1
            n -= 1
    if n > 1 and loadb(p) == 48:  # a leading 0
        prefix = 0
        if n > 2:
            letter = loadb(p + 1) | 32
            if letter == 111:  # o
                prefix = 8
            elif letter == 120:  # x
                prefix = 16
            elif letter == 98:  # b
                prefix = 2
        if prefix != 0:
            if base == 0 or base == prefix:
                base = prefix
                p += 2
                n -= 2
        elif base == 0:  # without a prefix, base 0 takes only zeros after a 0
            i = 1
            while i < n:
                if loadb(p + i) != 48:
                    return 0
                i += 1
            return small(0)
    if base == 0:
        base = 10
    if n > 0:
        c = loadb(p)
        if c == 43 or c == 45:  # a second sign
            return 0
    return parse_digits(p, n, base, negative)


# -- parsing ------------------------------------------------------------------------------------


def parse_digits(p: int, n: int, base: int, negative: int) -> int:
    """The int written by the ``n`` digits at ``p`` in ``base`` (2..36), negated if
    ``negative``; 0 (no value) if there are no digits or one is not a digit of
    ``base``.

    Digits are taken in chunks that fit a limb: each multiplies the magnitude so far
    by ``base ** chunk`` and adds the chunk's value."""
    if n == 0:
        return 0
    per_chunk = 1
    chunk_scale = base
    while chunk_scale * base < _LIMB_BASE:
        chunk_scale = chunk_scale * base
        per_chunk += 1
    first = n % per_chunk
    if first == 0:
        first = per_chunk
    value = chunk_value(p, first, base)
    if value >> 32:
        return 0
    if n == first:  # below 2**32: a small int
        if negative:
            return ((0 - value) << 1) | 1
        return (value << 1) | 1
    bits = 1
    while (1 << bits) < base:
        bits += 1
    capacity = (n * bits) // 64 + 2
    other = scratch(capacity)  # the products go back and forth between it and r
    r = big_alloc(capacity)
    rl = r + L.BIGINT_LIMBS
    store(rl, value)
    a = rl
    used = 1
    i = first
    while i < n:
        value = chunk_value(p + i, per_chunk, base)
        if value >> 32:
            return 0
        mag_mul_limb(other, a, used, chunk_scale, value)
        t = a
        a = other
        other = t
        if load(a + (used << 3)) != 0:
            used += 1
        i += per_chunk
    if a != rl:  # the words of r above these are zero: a carry stored there was zero
        copy_limbs(rl, a, used)
    return big_finish(r, capacity, negative)


def chunk_value(p: int, count: int, base: int) -> int:
    """The value of the ``count`` digits at ``p`` in ``base`` (below 2**32), or
    2**32 or more if one of them is not a digit of ``base``."""
    ten = 10
    letters = 26
    value = 0
    end = p + count
    while p < end:
        c = loadb(p)
        digit = c - 48
        if digit >= ten:
            digit = (c | 32) - 97  # a letter, either case, is 10 and up
            if digit >= letters:
                return _LIMB_BASE
            digit += ten
        if digit >= base:
            return _LIMB_BASE
        value = value * base + digit
        p += 1
    return value


def error_invalid_literal(s: int, base: int) -> None:
    b = buf_new(64)
    buf_str(b, text("int: invalid literal with base "))
    buf_decimal(b, base)
    buf_str(b, text(": "))
    buf_str(b, s)
    error(buf_to_string(b, L.TAG_STRING), text("int"))


# -- abs ------------------------------------------------------------------------------------


def builtin_abs(x: int) -> int:
    if FLOATS and tag_of(x) == L.TAG_FLOAT:
        return float_abs(x)
    if is_int(x) == 0:
        error_with_type(text("got "), x, text(", want int or float"), text("abs"))
    return big_abs(x)


# -- hash -------------------------------------------------------------------------------------


def builtin_hash(x: int) -> int:
    """``hash(x)`` of a str (Java's ``String.hashCode`` over its code points) or bytes
    (32-bit FNV-1a): values fixed by the language, not the hash dicts use."""
    tag = tag_of(x)
    if tag == L.TAG_STRING:
        return small(string_java_hash(x))
    if tag == L.TAG_BYTES:
        return small(bytes_fnv32(x))
    error_with_type(text("hash: got "), x, text(", want string or bytes"), text("hash"))
    return 0


def string_java_hash(s: int) -> int:
    """``h = 31 * h + c`` over the code points (invalid bytes count as U+FFFD), as a
    signed 32-bit value.  The Go implementation adds a code point above U+FFFF whole,
    not as two UTF-16 halves, and so does this."""
    p = s + L.STR_DATA
    end = p + load(s + L.STR_LEN)
    h = 0
    while p < end:
        c = loadb(p)
        if c < 128:
            p += 1
        else:
            decoded = utf8_decode(p, end - p)
            width = decoded >> 32
            if width == 0:
                c = 0xFFFD
                p += 1
            else:
                c = decoded & 0xFFFFFFFF
                p += width
        h = h * 31 + c
    h = h & 0xFFFFFFFF
    if h >= (1 << 31):
        return h - (1 << 32)
    return h


def bytes_fnv32(s: int) -> int:
    p = s + L.STR_DATA
    end = p + load(s + L.STR_LEN)
    mask = 0xFFFFFFFF
    h = 2166136261
    while p < end:
        h = ((h ^ loadb(p)) * 16777619) & mask
        p += 1
    return h


# -- chr and ord ------------------------------------------------------------------------------


def builtin_chr(i: int) -> int:
    """The one-character str of code point ``i`` (a surrogate gives U+FFFD)."""
    if is_int(i) == 0:
        error_with_type(text("chr: got "), i, text(", want int"), text("chr"))
    if int_fits_int32(i) == 0:
        b = buf_new(64)
        buf_str(b, text("chr: "))
        write_str(b, i)
        buf_str(b, text(" out of range"))
        error(buf_to_string(b, L.TAG_STRING), text("chr"))
    code = sar(i, 1)
    if slt(code, 0):
        b = buf_new(64)
        buf_str(b, text("chr: Unicode code point "))
        write_str(b, i)
        buf_str(b, text(" out of range (<0)"))
        error(buf_to_string(b, L.TAG_STRING), text("chr"))
    if code > 0x10FFFF:
        b = buf_new(64)
        buf_str(b, text("chr: Unicode code point U+"))
        write_hex_upper(b, code)
        buf_str(b, text(" out of range (>0x10FFFF)"))
        error(buf_to_string(b, L.TAG_STRING), text("chr"))
    s = string_new(L.TAG_STRING, 4)
    store(s + L.STR_LEN, utf8_encode(s + L.STR_DATA, code))
    return s


def write_hex_upper(b: int, n: int) -> None:
    """Append the word ``n`` in upper-case hexadecimal, without leading zeros."""
    shift = 60
    while shift > 0 and (n >> shift) == 0:
        shift -= 4
    while True:
        buf_byte(b, loadb(_HEX_UPPER + L.STR_DATA + ((n >> shift) & 15)))
        if shift == 0:
            break
        shift -= 4


def builtin_ord(s: int) -> int:
    """The code point of a one-character str (a lone invalid byte is U+FFFD), or the
    value of a one-byte bytes."""
    tag = tag_of(s)
    if tag == L.TAG_STRING:
        n = load(s + L.STR_LEN)
        if n != 0:
            decoded = utf8_decode(s + L.STR_DATA, n)
            width = decoded >> 32
            if width == 0:
                width = 1
                decoded = 0xFFFD
            if width == n:
                return small(decoded & 0xFFFFFFFF)
        b = buf_new(64)
        buf_str(b, text("ord: string encodes "))
        buf_decimal(b, codepoint_count(s))
        buf_str(b, text(" Unicode code points, want 1"))
        error(buf_to_string(b, L.TAG_STRING), text("ord"))
    if tag == L.TAG_BYTES:
        n = load(s + L.STR_LEN)
        if n != 1:
            b = buf_new(64)
            buf_str(b, text("ord: bytes has length "))
            buf_decimal(b, n)
            buf_str(b, text(", want 1"))
            error(buf_to_string(b, L.TAG_STRING), text("ord"))
        return small(loadb(s + L.STR_DATA))
    error_with_type(text("ord: got "), s, text(", want string or bytes"), text("ord"))
    return 0


def codepoint_count(s: int) -> int:
    """The number of code points in the str ``s``, each invalid byte counting as one."""
    p = s + L.STR_DATA
    end = p + load(s + L.STR_LEN)
    count = 0
    while p < end:
        if loadb(p) < 128:
            p += 1
        else:
            width = utf8_decode(p, end - p) >> 32
            if width == 0:
                width = 1
            p += width
        count += 1
    return count
