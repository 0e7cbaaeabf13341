"""Strings and bytes: making them, UTF-8, concatenation, repetition.

A str is a sequence of bytes (UTF-8 by convention, not by force): ``len`` counts
bytes and indexing yields one-byte strings, as the Go implementation does.  bytes
share the layout with another tag.  The methods of both live in
:mod:`kforge.starlark.runtime.string_methods`.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, loadb, store, storeb, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc_object, error
    from kforge.starlark.runtime.lists import repeat_count


def string_new(tag: int, length: int) -> int:
    """A new str (or bytes) of ``length`` bytes, to be filled in."""
    if length > (1 << 40):
        error(text("string too large"), 0)
    s = alloc_object(tag, L.STR_DATA + length)
    store(s + L.STR_LEN, length)
    return s


def copy_disjoint(target: int, source: int, count: int) -> None:
    """Copy ``count`` bytes between ranges that do not overlap, eight words a turn,
    then word by word; the last word is copied whole, ending where the range ends
    (overlapping bytes already copied), so no byte past either range is read or
    written and no byte loop runs.  Below a word, byte by byte."""
    if count < 8:
        end = source + count
        while source < end:
            storeb(target, loadb(source))
            source += 1
            target += 1
        return
    last = source + count - 8
    t = target
    s = source
    block = 64
    step = 8
    end = source + (count & ~63)
    while s < end:
        a = load(s)
        b = load(s + 8)
        c = load(s + 16)
        d = load(s + 24)
        store(t, a)
        store(t + 8, b)
        store(t + 16, c)
        store(t + 24, d)
        a = load(s + 32)
        b = load(s + 40)
        c = load(s + 48)
        d = load(s + 56)
        store(t + 32, a)
        store(t + 40, b)
        store(t + 48, c)
        store(t + 56, d)
        s += block
        t += block
    while s < last:
        store(t, load(s))
        s += step
        t += step
    store(target + count - 8, load(last))


def string_from(tag: int, address: int, length: int) -> int:
    s = string_new(tag, length)
    copy_disjoint(s + L.STR_DATA, address, length)
    return s


def substring(s: int, start: int, length: int) -> int:
    """The ``length`` bytes of ``s`` from ``start`` as a new object of the same type."""
    if start == 0 and length == load(s + L.STR_LEN):
        return s
    return string_from(load(s) & L.TAG_MASK, s + L.STR_DATA + start, length)


def string_concat(a: int, b: int) -> int:
    n = load(a + L.STR_LEN)
    if n == 0:
        return b
    m = load(b + L.STR_LEN)
    if m == 0:
        return a
    s = string_new(load(a) & L.TAG_MASK, n + m)
    copy_disjoint(s + L.STR_DATA, a + L.STR_DATA, n)
    copy_disjoint(s + L.STR_DATA + n, b + L.STR_DATA, m)
    return s


def string_repeat(s: int, count: int) -> int:
    """``s * count`` (``count`` an int; below 1 counts as 0), with Go's limits."""
    tag = load(s) & L.TAG_MASK
    n = load(s + L.STR_LEN)
    times = repeat_count(count, n)
    if times == 0:
        return string_new(tag, 0)
    total = n * times
    result = string_new(tag, total)
    p = result + L.STR_DATA
    copy_disjoint(p, s + L.STR_DATA, n)
    filled = n
    while filled < total:  # double what is written: log2(times) copies, not times
        chunk = filled
        if chunk > total - filled:
            chunk = total - filled
        copy_disjoint(p + filled, p, chunk)
        filled += chunk
    return result


def utf8_decode(p: int, available: int) -> int:
    """The UTF-8 sequence at ``p``: ``width << 32 | code point``, width 0 when the bytes
    are not a valid, shortest-form encoding of a code point (surrogates excluded)."""
    c = loadb(p)
    if c < 0x80:
        return (1 << 32) | c
    if c < 0xC2:
        return 0
    if c < 0xE0:
        if available < 2:
            return 0
        c1 = loadb(p + 1)
        if (c1 & 0xC0) != 0x80:
            return 0
        return (2 << 32) | ((c & 0x1F) << 6) | (c1 & 0x3F)
    if c < 0xF0:
        if available < 3:
            return 0
        c1 = loadb(p + 1)
        c2 = loadb(p + 2)
        if (c1 & 0xC0) != 0x80 or (c2 & 0xC0) != 0x80:
            return 0
        code = ((c & 0x0F) << 12) | ((c1 & 0x3F) << 6) | (c2 & 0x3F)
        if code < 0x800:
            return 0
        if code >= 0xD800 and code < 0xE000:
            return 0
        return (3 << 32) | code
    if c < 0xF5:
        if available < 4:
            return 0
        c1 = loadb(p + 1)
        c2 = loadb(p + 2)
        c3 = loadb(p + 3)
        if (c1 & 0xC0) != 0x80 or (c2 & 0xC0) != 0x80 or (c3 & 0xC0) != 0x80:
            return 0
        code = ((c & 0x07) << 18) | ((c1 & 0x3F) << 12) | ((c2 & 0x3F) << 6) | (c3 & 0x3F)
        if code < 0x10000 or code > 0x10FFFF:
            return 0
        return (4 << 32) | code
    return 0


def utf8_encode(p: int, code: int) -> int:
    """Write code point ``code`` at ``p`` in UTF-8; returns the number of bytes (an
    invalid code point is written as U+FFFD)."""
    if code < 0x80:
        storeb(p, code)
        return 1
    if code < 0x800:
        storeb(p, 0xC0 | (code >> 6))
        storeb(p + 1, 0x80 | (code & 0x3F))
        return 2
    if code >= 0xD800 and code < 0xE000:
        code = 0xFFFD
    if code > 0x10FFFF:
        code = 0xFFFD
    if code < 0x10000:
        storeb(p, 0xE0 | (code >> 12))
        storeb(p + 1, 0x80 | ((code >> 6) & 0x3F))
        storeb(p + 2, 0x80 | (code & 0x3F))
        return 3
    storeb(p, 0xF0 | (code >> 18))
    storeb(p + 1, 0x80 | ((code >> 12) & 0x3F))
    storeb(p + 2, 0x80 | ((code >> 6) & 0x3F))
    storeb(p + 3, 0x80 | (code & 0x3F))
    return 4


def string_find_bytes(s: int, sub: int, start: int, end: int) -> int:
    """The first index in ``[start, end)`` where ``sub`` occurs in ``s``, or -1 (words).

    The scan looks for ``sub`` 's first byte eight bytes at a time: a word of the
    text XOR that byte repeated has a zero byte where the byte occurs, and
    ``(v - 0x01..01) & ~v & 0x80..80`` is non-zero exactly when ``v`` has a zero
    byte (its lowest marked byte is the first zero), so words without the byte
    cost nine ticks.  The last bytes, where a word would reach past ``end``, are
    looked at one by one."""
    m = load(sub + L.STR_LEN)
    if end < start or end - start < m:
        return 0 - 1
    if m == 0:
        return start
    p = s + L.STR_DATA
    q = sub + L.STR_DATA
    first = loadb(q)
    lows = 0x0101010101010101
    highs = 0x8080808080808080
    pattern = first * lows
    step = 8
    a = p + start
    stop = p + end - m + 1  # candidates start below
    words = p + end - 7  # a whole word fits below ``end`` from below here
    while a < stop:
        while a < words:
            v = load(a) ^ pattern
            if ((v - lows) & ~v & highs) != 0:
                break
            a += step
        if a < words:  # the word at ``a`` holds the byte: go to it
            while loadb(a) != first:
                a += 1
        if a >= stop:
            return 0 - 1
        if loadb(a) != first:  # (only past the whole words)
            a += 1
            continue
        j = 1
        while j < m:
            if loadb(a + j) != loadb(q + j):
                break
            j += 1
        if j == m:
            return a - p
        a += 1
    return 0 - 1
