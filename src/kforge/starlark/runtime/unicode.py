"""Unicode properties of code points, as the Go implementation's ``unicode`` and
``strconv`` packages answer them (Unicode 15.0.0).

ASCII is answered by code; code points from U+0080 on by the tables of
:mod:`kforge.starlark.runtime.unicode_data`, generated from the Go implementation
itself (``tests/starlark/test_rt_unicode.py`` makes them and explains their encoding).
Each table is made on the heap the first time a program reads it (a program that
meets no code point from U+0080 on has none): about 1.6 KB for
``repr`` (which code points print as themselves), 1.5 KB for the case mappings
(``upper``, ``lower``, ``title``, ``capitalize``, ``isupper``, ``islower``), 1.5 KB for
``isalpha``, 0.2 KB for ``isdigit`` and 0.4 KB more for ``istitle``.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import Final

from kforge.starlark import layout as L
from kforge.starlark.runtime import unicode_data
from kforge.starlark.runtime.intrinsics import load, loadb, table

# the tables as bytes objects, made on the heap when first read
CASE: Final = table(unicode_data.CASE)
DIGIT: Final = table(unicode_data.DIGIT)
LETTER: Final = table(unicode_data.LETTER)
LOWER_EXCLUDED: Final = table(unicode_data.LOWER_EXCLUDED)
LOWER_EXTRA: Final = table(unicode_data.LOWER_EXTRA)
PRINTABLE: Final = table(unicode_data.PRINTABLE)
TITLE_CASE: Final = table(unicode_data.TITLE_CASE)
UPPER_EXCLUDED: Final = table(unicode_data.UPPER_EXCLUDED)
UPPER_EXTRA: Final = table(unicode_data.UPPER_EXTRA)


def range_set_has(table: int, c: int) -> int:
    """1 if code point ``c`` is in the range set ``table`` (a static bytes object)."""
    p = table + L.STR_DATA
    end = p + load(table + L.STR_LEN)
    count = loadb(p)
    i = index_entries_at_most(p + 1, count, c)
    if i == 0:
        return 0
    e = p + 1 + 5 * (i - 1)
    point = loadb(e) | (loadb(e + 1) << 8) | (loadb(e + 2) << 16)
    q = p + 1 + 5 * count + (loadb(e + 3) | (loadb(e + 4) << 8))
    inside = 1
    while q < end:
        byte = loadb(q)
        q += 1
        delta = byte & 0x7F
        shift = 7
        while byte >= 0x80:
            byte = loadb(q)
            q += 1
            delta = delta | ((byte & 0x7F) << shift)
            shift += 7
        point += delta
        if point > c:
            return inside
        inside = inside ^ 1
    return inside


def index_entries_at_most(index: int, count: int, c: int) -> int:
    """How many entries of a table's index (5 bytes each, a 3-byte code point first,
    ascending) start at or below ``c``: a binary search."""
    low = 0
    high = count
    while low < high:
        middle = (low + high) >> 1
        e = index + 5 * middle
        if (loadb(e) | (loadb(e + 1) << 8) | (loadb(e + 2) << 16)) > c:
            high = middle
        else:
            low = middle + 1
    return low


def case_map(c: int, lower: int) -> int:
    """``unicode.ToLower(c)`` if ``lower``, else ``unicode.ToUpper(c)``, for ``c`` from
    U+0080 on (the case table)."""
    cases = CASE
    p = cases + L.STR_DATA
    end = p + load(cases + L.STR_LEN)
    count = loadb(p)
    i = index_entries_at_most(p + 1, count, c)
    if i == 0:
        return c
    e = p + 1 + 5 * (i - 1)
    first = loadb(e) | (loadb(e + 1) << 8) | (loadb(e + 2) << 16)
    q = p + 1 + 5 * count + (loadb(e + 3) | (loadb(e + 4) << 8))
    while q < end:
        # an entry: gap, length << 1 | alternating, then (unless alternating) du, dl:
        # LEB128 numbers of at most three bytes, read a word at a time
        word = load(q)
        q += leb128_width(word)
        first += leb128_value(word)
        if c < first:
            return c
        word = load(q)
        q += leb128_width(word)
        length = leb128_value(word) >> 1
        if word & 1:
            if c < first + length:
                # even offsets are upper case (lower is +1), odd ones lower case
                if ((c - first) & 1) == lower:
                    return c
                if lower:
                    return c + 1
                return c - 1
        else:
            word = load(q)
            width = leb128_width(word)
            if c < first + length:
                if lower:  # dl follows du
                    word = load(q + width)
                delta = leb128_value(word)
                # zigzag: even is +delta/2, odd is -(delta+1)/2
                if delta & 1:
                    return c - ((delta + 1) >> 1)
                return c + (delta >> 1)
            q += width
            q += leb128_width(load(q))
        first += length
    return c


def leb128_value(word: int) -> int:
    """The LEB128 number (at most three bytes) at the start of a little-endian word."""
    value = word & 0x7F
    if word & 0x80:
        value = value | ((word >> 1) & 0x3F80)
        if word & 0x8000:
            value = value | ((word >> 2) & 0x1FC000)
    return value


def leb128_width(word: int) -> int:
    if (word & 0x80) == 0:
        return 1
    if (word & 0x8000) == 0:
        return 2
    return 3


def to_upper(c: int) -> int:
    if c < 0x80:
        if c >= 97 and c <= 122:
            return c - 32
        return c
    return case_map(c, 0)


def to_lower(c: int) -> int:
    if c < 0x80:
        if c >= 65 and c <= 90:
            return c + 32
        return c
    return case_map(c, 1)


def to_title(c: int) -> int:
    """``unicode.ToTitle``: the upper case, but for the digraphs (U+01C4..U+01CC,
    U+01F1..U+01F3), whose title case is their middle form, and Georgian Mkhedruli,
    which has no title case."""
    if c >= 0x1C4 and c <= 0x1CC:
        return c - (c - 0x1C4) % 3 + 1
    if c >= 0x1F1 and c <= 0x1F3:
        return 0x1F2
    if c >= 0x10D0 and c <= 0x10FF:
        return c
    return to_upper(c)


def is_cased(c: int) -> int:
    """Go's ``isCasedRune``: ASCII letters and code points with another case
    (``unicode.SimpleFold(c) != c``: those with a case mapping, and ß)."""
    if c < 0x80:
        return ((c | 32) >= 97) and ((c | 32) <= 122)
    if c == 0xDF:
        return 1
    if case_map(c, 0) != c:
        return 1
    return case_map(c, 1) != c


def is_upper(c: int) -> int:
    """``unicode.IsUpper`` (category Lu)."""
    if c < 0x80:
        return c >= 65 and c <= 90
    if range_set_has(UPPER_EXTRA, c):
        return 1
    if case_map(c, 1) == c:
        return 0
    return range_set_has(UPPER_EXCLUDED, c) == 0


def is_lower(c: int) -> int:
    """``unicode.IsLower`` (category Ll)."""
    if c < 0x80:
        return c >= 97 and c <= 122
    if range_set_has(LOWER_EXTRA, c):
        return 1
    if case_map(c, 0) == c:
        return 0
    return range_set_has(LOWER_EXCLUDED, c) == 0


def is_title(c: int) -> int:
    """``unicode.IsTitle`` (category Lt)."""
    if c < 0x80:
        return 0
    return range_set_has(TITLE_CASE, c)


def is_letter(c: int) -> int:
    """``unicode.IsLetter``."""
    if c < 0x80:
        return ((c | 32) >= 97) and ((c | 32) <= 122)
    if c >= 0x4E00 and c < 0xA000:  # CJK Unified Ideographs
        return 1
    return range_set_has(LETTER, c)


def is_decimal_digit(c: int) -> int:
    """``unicode.IsDigit`` (category Nd)."""
    if c < 0x80:
        return c >= 48 and c <= 57
    return range_set_has(DIGIT, c)


def is_space(c: int) -> int:
    """``unicode.IsSpace``."""
    if c < 0x80:
        return c == 32 or (c >= 9 and c <= 13)
    if c < 0x1680:
        return c == 0x85 or c == 0xA0
    if c < 0x2000:
        return c == 0x1680
    if c <= 0x200A:
        return 1
    return c == 0x2028 or c == 0x2029 or c == 0x202F or c == 0x205F or c == 0x3000


def is_printable(c: int) -> int:
    """``strconv.IsPrint``: whether ``repr`` shows code point ``c`` as itself."""
    if c < 0x80:
        return c >= 32 and c < 127
    if c >= 0x4E00 and c < 0xA000:  # CJK Unified Ideographs, the largest common block
        return 1
    return range_set_has(PRINTABLE, c)
