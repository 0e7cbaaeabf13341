"""The methods of str and bytes, ``bytes()``, and string formatting (``%`` and
``str.format``), as the Go implementation has them.

A str is bytes: positions and lengths count bytes, and the methods that read text
(case, classification, whitespace, ``strip`` with characters, ``codepoints``) decode
UTF-8 as Go does, an invalid byte reading as U+FFFD.  Unicode properties come from
:mod:`kforge.starlark.runtime.unicode`.

Results are sized before they are made where that is cheap (a first pass counts), so
a method leaves no garbage behind; formatting builds into one scratch buffer that is
reused.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    Global,
    heap_pointer,
    load,
    loadb,
    sar,
    set_heap_pointer,
    slt,
    store,
    storeb,
    text,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        buf_byte,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.format import write_int
    from kforge.starlark.runtime.lists import list_append_unchecked, list_with, tuple_with
    from kforge.starlark.runtime.sequences import is_iterable, iter_end, iter_item, iter_start
    from kforge.starlark.runtime.strings import (
        copy_disjoint,
        string_find_bytes,
        string_new,
        substring,
        utf8_decode,
        utf8_encode,
    )
    from kforge.starlark.runtime.unicode import (
        is_cased,
        is_decimal_digit,
        is_letter,
        is_lower,
        is_space,
        is_title,
        is_upper,
        to_lower,
        to_title,
        to_upper,
    )
    from kforge.starlark.runtime.values import (
        bool_value,
        memory_equal,
        new_elems,
        small,
        tag_of,
        type_name,
    )

_scratch = Global(__name__)

#: What a case conversion does to each code point.
UPPER = 0
LOWER = 1
CAPITALIZE = 2
TITLE = 3


# -- arguments ------------------------------------------------------------------------


def error_param_type(name: int, position: int, v: int, want: int) -> None:
    """``NAME: for parameter N: got T, want WANT`` (Go's UnpackPositionalArgs)."""
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text(": for parameter "))
    buf_decimal(b, position)
    buf_str(b, text(": got "))
    buf_str(b, type_name(v))
    buf_str(b, text(", want "))
    buf_str(b, want)
    error(buf_to_string(b, L.TAG_STRING), name)


def error_named(name: int, message: int) -> None:
    """``NAME: message``, raised by builtin ``name``."""
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text(": "))
    buf_str(b, message)
    error(buf_to_string(b, L.TAG_STRING), name)


def string_param(v: int, name: int, position: int) -> int:
    if tag_of(v) != L.TAG_STRING:
        error_param_type(name, position, v, text("string"))
    return v


def int_param(v: int, name: int, position: int, default: int) -> int:
    """An optional int parameter as a signed word (Go's ``*int``): ``default`` when
    absent; an int beyond a small int counts as the nearest small int's end."""
    if v == 0:
        return default
    if v & 1:
        return sar(v, 1)
    if tag_of(v) != L.TAG_INT:
        error_param_type(name, position, v, text("int"))
    info = load(v + L.BIGINT_INFO)
    count = info & L.BIGINT_COUNT_MASK
    low = load(v + L.BIGINT_LIMBS)
    # int64 holds magnitudes below 2**63, and -2**63 itself
    minimum = count == 1 and info >> 32 != 0 and low == (1 << 63)
    if (count > 1 or low >= (1 << 63)) and minimum == 0:
        b = buf_new(64)
        buf_str(b, name)
        buf_str(b, text(": for parameter "))
        buf_decimal(b, position)
        buf_str(b, text(": "))
        write_int(b, v)
        buf_str(b, text(" out of range (want value in signed 64-bit range)"))
        error(buf_to_string(b, L.TAG_STRING), name)
    if info >> 32:
        return 0 - (1 << 62)
    return 1 << 62


def bound(v: int, n: int, default: int, what: int, name: int) -> int:
    """A start or end argument (Go's ``indices``): ``default`` when absent or None, from
    the end when negative, then clamped to ``[0, n]``."""
    if v == 0 or v == L.NONE_ADDRESS:
        return default
    if v & 1:
        i = sar(v, 1)
        if slt(i, 0 - (1 << 31)) or slt((1 << 31) - 1, i):
            error_bound(v, what, name)
        if slt(i, 0):
            i += n
            if slt(i, 0):
                return 0
        if i > n:
            return n
        return i
    error_bound(v, what, name)
    return 0


def error_bound(v: int, what: int, name: int) -> None:
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text(": invalid "))
    buf_str(b, what)
    buf_str(b, text(" index: "))
    if tag_of(v) == L.TAG_INT:
        write_int(b, v)
        buf_str(b, text(" out of range"))
    else:
        buf_str(b, text("got "))
        buf_str(b, type_name(v))
        buf_str(b, text(", want int"))
    error(buf_to_string(b, L.TAG_STRING), name)


def scratch_buffer() -> int:
    """The buffer strings are built in before they are copied out (reused, emptied)."""
    b = _scratch.value
    if b == 0:
        b = buf_new(64)
        _scratch.value = b
    store(b + L.BUF_LEN, 0)
    return b


# -- UTF-8 as Go reads it -------------------------------------------------------------


def rune_at(p: int, available: int) -> int:
    """The code point at ``p`` as ``width << 32 | code``; an invalid byte reads as
    U+FFFD of width 1 (Go's ``utf8.DecodeRuneInString``)."""
    c = loadb(p)
    if c < 0x80:
        return (1 << 32) | c
    decoded = utf8_decode(p, available)
    if decoded == 0:
        return (1 << 32) | 0xFFFD
    return decoded


def rune_before(p: int, start: int, end: int) -> int:
    """The code point that ends at offset ``end`` of the bytes at ``p``, not reading
    before ``start`` (Go's ``utf8.DecodeLastRuneInString``)."""
    c = loadb(p + end - 1)
    if c < 0x80:
        return (1 << 32) | c
    limit = start
    if end - start > 4:
        limit = end - 4
    k = end - 2
    while slt(k, limit) == 0 and (loadb(p + k) & 0xC0) == 0x80:
        k -= 1
    if slt(k, limit):
        return (1 << 32) | 0xFFFD
    decoded = utf8_decode(p + k, end - k)
    if decoded == 0 or k + (decoded >> 32) != end:
        return (1 << 32) | 0xFFFD
    return decoded


def count_runes(p: int, n: int) -> int:
    count = 0
    i = 0
    while i < n:
        c = loadb(p + i)
        if c < 0x80:
            i += 1
        else:
            i += rune_at(p + i, n - i) >> 32
        count += 1
    return count


def is_ascii(p: int, n: int) -> int:
    i = 0
    while i + 8 <= n:
        if load(p + i) & 0x8080808080808080:
            return 0
        i += 8
    while i < n:
        if loadb(p + i) >= 0x80:
            return 0
        i += 1
    return 1


# -- views and bytes ------------------------------------------------------------------


def string_elems(s: int) -> int:
    return new_elems(s, L.ELEMS_ELEMS)


def string_elem_ords(s: int) -> int:
    return new_elems(s, L.ELEMS_ELEM_ORDS)


def string_codepoints(s: int) -> int:
    return new_elems(s, L.ELEMS_CODEPOINTS)


def string_codepoint_ords(s: int) -> int:
    return new_elems(s, L.ELEMS_CODEPOINT_ORDS)


def bytes_elems(b: int) -> int:
    return new_elems(b, L.ELEMS_BYTES_ELEMS)


def builtin_bytes(x: int) -> int:
    """``bytes(x)``: a str's bytes (each invalid byte as U+FFFD), bytes themselves, or
    an iterable of ints 0..255."""
    tag = tag_of(x)
    if tag == L.TAG_BYTES:
        return x
    if tag == L.TAG_STRING:
        return string_transcoded(x, L.TAG_BYTES)
    if is_iterable(x) == 0:
        b = buf_new(64)
        buf_str(b, text("bytes: got "))
        buf_str(b, type_name(x))
        buf_str(b, text(", want string, bytes, or iterable of ints"))
        error(buf_to_string(b, L.TAG_STRING), text("bytes"))
    b = scratch_buffer()
    seq = iter_start(x)
    i = 0
    while True:
        item = iter_item(seq, i)
        if item == 0:
            break
        if (item & 1) == 0 or item >= (256 << 1):
            error_byte_value(i, item)
        buf_byte(b, item >> 1)
        i += 1
    iter_end(seq)
    return buf_to_string(b, L.TAG_BYTES)


def error_byte_value(i: int, item: int) -> None:
    b = buf_new(64)
    buf_str(b, text("bytes: at index "))
    buf_decimal(b, i)
    if tag_of(item) == L.TAG_INT:
        buf_str(b, text(", "))
        write_int(b, item)
        buf_str(b, text(" out of range (want value in unsigned 8-bit range)"))
    else:
        buf_str(b, text(", got "))
        buf_str(b, type_name(item))
        buf_str(b, text(", want int"))
    error(buf_to_string(b, L.TAG_STRING), text("bytes"))


def string_transcoded(s: int, tag: int) -> int:
    """The bytes of ``s`` with each invalid byte replaced by U+FFFD's encoding."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    size = 0
    i = 0
    while i < n:
        if loadb(p + i) < 0x80:
            i += 1
            size += 1
            continue
        width = utf8_decode(p + i, n - i) >> 32
        if width == 0:
            i += 1
            size += 3
        else:
            i += width
            size += width
    result = string_new(tag, size)
    if size == n:
        copy_disjoint(result + L.STR_DATA, p, n)
        return result
    q = result + L.STR_DATA
    i = 0
    while i < n:
        if loadb(p + i) < 0x80:
            storeb(q, loadb(p + i))
            q += 1
            i += 1
            continue
        width = utf8_decode(p + i, n - i) >> 32
        if width == 0:
            q += utf8_encode(q, 0xFFFD)
            i += 1
        else:
            copy_disjoint(q, p + i, width)
            q += width
            i += width
    return result


# -- searching ------------------------------------------------------------------------


def string_find_last(s: int, sub: int, start: int, end: int) -> int:
    """The last index in ``[start, end)`` where ``sub`` occurs, or -1."""
    m = load(sub + L.STR_LEN)
    if slt(end - start, m):
        return 0 - 1
    p = s + L.STR_DATA
    q = sub + L.STR_DATA
    i = end - m
    while True:
        if memory_equal(p + i, q, m):
            return i
        if i == start:
            return 0 - 1
        i -= 1


def count_occurrences(s: int, sub: int, start: int, end: int) -> int:
    """Go's ``strings.Count`` on ``s[start:end]``: non-overlapping occurrences, or the
    number of code points plus one for an empty ``sub``."""
    m = load(sub + L.STR_LEN)
    if m == 0:
        return count_runes(s + L.STR_DATA + start, end - start) + 1
    count = 0
    i = start
    while True:
        i = string_find_bytes(s, sub, i, end)
        if i == 0 - 1:
            return count
        count += 1
        i += m


def string_count(s: int, sub: int, start: int, end: int) -> int:
    string_param(sub, text("count"), 1)
    n = load(s + L.STR_LEN)
    first = bound(start, n, 0, text("start"), text("count"))
    last = bound(end, n, n, text("end"), text("count"))
    if slt(last, first):
        last = first
    return small(count_occurrences(s, sub, first, last))


def find_in(s: int, sub: int, start: int, end: int, name: int, last: int) -> int:
    """The index ``find``, ``rfind``, ``index`` and ``rindex`` report, or -1."""
    string_param(sub, name, 1)
    n = load(s + L.STR_LEN)
    first = bound(start, n, 0, text("start"), name)
    stop = bound(end, n, n, text("end"), name)
    if slt(stop, first):
        stop = first
    if last:
        return string_find_last(s, sub, first, stop)
    return string_find_bytes(s, sub, first, stop)


def string_find(s: int, sub: int, start: int, end: int) -> int:
    return small(find_in(s, sub, start, end, text("find"), 0))


def string_rfind(s: int, sub: int, start: int, end: int) -> int:
    return small(find_in(s, sub, start, end, text("rfind"), 1))


def string_index(s: int, sub: int, start: int, end: int) -> int:
    i = find_in(s, sub, start, end, text("index"), 0)
    if i == 0 - 1:
        error_named(text("index"), text("substring not found"))
    return small(i)


def string_rindex(s: int, sub: int, start: int, end: int) -> int:
    i = find_in(s, sub, start, end, text("rindex"), 1)
    if i == 0 - 1:
        error_named(text("rindex"), text("substring not found"))
    return small(i)


def affix_test(s: int, x: int, start: int, end: int, name: int, suffix: int) -> int:
    """``startswith`` and ``endswith``: ``x`` a str or a tuple of them."""
    n = load(s + L.STR_LEN)
    first = bound(start, n, 0, text("start"), name)
    stop = bound(end, n, n, text("end"), name)
    if slt(stop, first):
        stop = first
    tag = tag_of(x)
    if tag == L.TAG_STRING:
        return bool_value(has_affix(s, x, first, stop, suffix))
    if tag == L.TAG_TUPLE:
        count = load(x + L.TUPLE_LEN)
        i = 0
        while i < count:
            item = load(x + L.TUPLE_ITEMS + 8 * i)
            if tag_of(item) != L.TAG_STRING:
                b = buf_new(64)
                buf_str(b, name)
                buf_str(b, text(": want string, got "))
                buf_str(b, type_name(item))
                buf_str(b, text(", for element "))
                buf_decimal(b, i)
                error(buf_to_string(b, L.TAG_STRING), name)
            if has_affix(s, item, first, stop, suffix):
                return L.TRUE_ADDRESS
            i += 1
        return L.FALSE_ADDRESS
    b = buf_new(64)
    buf_str(b, name)
    buf_str(b, text(": got "))
    buf_str(b, type_name(x))
    buf_str(b, text(", want string or tuple of string"))
    error(buf_to_string(b, L.TAG_STRING), name)
    return 0


def has_affix(s: int, affix: int, first: int, stop: int, suffix: int) -> int:
    m = load(affix + L.STR_LEN)
    if m > stop - first:
        return 0
    at = first
    if suffix:
        at = stop - m
    return memory_equal(s + L.STR_DATA + at, affix + L.STR_DATA, m)


def string_startswith(s: int, prefix: int, start: int, end: int) -> int:
    return affix_test(s, prefix, start, end, text("startswith"), 0)


def string_endswith(s: int, suffix: int, start: int, end: int) -> int:
    return affix_test(s, suffix, start, end, text("endswith"), 1)


def string_removeprefix(s: int, prefix: int) -> int:
    string_param(prefix, text("removeprefix"), 1)
    n = load(s + L.STR_LEN)
    if has_affix(s, prefix, 0, n, 0):
        m = load(prefix + L.STR_LEN)
        return substring(s, m, n - m)
    return s


def string_removesuffix(s: int, suffix: int) -> int:
    string_param(suffix, text("removesuffix"), 1)
    n = load(s + L.STR_LEN)
    if has_affix(s, suffix, 0, n, 1):
        return substring(s, 0, n - load(suffix + L.STR_LEN))
    return s


# -- partition, replace, join ---------------------------------------------------------


def partition_at(s: int, sep: int, name: int, last: int) -> int:
    string_param(sep, name, 1)
    m = load(sep + L.STR_LEN)
    if m == 0:
        error_named(name, text("empty separator"))
    n = load(s + L.STR_LEN)
    i = string_find_last(s, sep, 0, n) if last else string_find_bytes(s, sep, 0, n)
    result = tuple_with(3)
    items = result + L.TUPLE_ITEMS
    empty = string_new(L.TAG_STRING, 0)
    if i == 0 - 1:
        store(items, empty)
        store(items + 8, empty)
        store(items + 16, empty)
        if last:
            store(items + 16, s)
        else:
            store(items, s)
        return result
    store(items, substring(s, 0, i))
    store(items + 8, sep)
    store(items + 16, substring(s, i + m, n - i - m))
    return result


def string_partition(s: int, sep: int) -> int:
    return partition_at(s, sep, text("partition"), 0)


def string_rpartition(s: int, sep: int) -> int:
    return partition_at(s, sep, text("rpartition"), 1)


def string_replace(s: int, old: int, new: int, count: int) -> int:
    """Go's ``strings.Replace``: the first ``count`` (all if negative) non-overlapping
    occurrences of ``old``; an empty ``old`` matches before every code point and at
    the end."""
    string_param(old, text("replace"), 1)
    string_param(new, text("replace"), 2)
    limit = int_param(count, text("replace"), 3, 0 - 1)
    n = load(s + L.STR_LEN)
    m = load(old + L.STR_LEN)
    found = count_occurrences(s, old, 0, n)
    if limit == 0 or found == 0:
        return s
    if slt(limit, 0) or found < limit:
        limit = found
    k = load(new + L.STR_LEN)
    result = string_new(L.TAG_STRING, n + limit * k - limit * m)
    p = s + L.STR_DATA
    q = result + L.STR_DATA
    at = 0
    done = 0
    while done < limit:
        j = at
        if m == 0:
            if done > 0:
                j += rune_at(p + at, n - at) >> 32
        else:
            j = string_find_bytes(s, old, at, n)
        copy_disjoint(q, p + at, j - at)
        q += j - at
        copy_disjoint(q, new + L.STR_DATA, k)
        q += k
        at = j + m
        done += 1
    copy_disjoint(q, p + at, n - at)
    return result


def string_join(s: int, iterable: int) -> int:
    """``sep.join(iterable)``: sized first, then copied."""
    if is_iterable(iterable) == 0:
        error_param_type(text("join"), 1, iterable, text("iterable"))
    seq = iter_start(iterable)
    sep = load(s + L.STR_LEN)
    total = 0
    i = 0
    while True:
        item = iter_item(seq, i)
        if item == 0:
            break
        if tag_of(item) != L.TAG_STRING:
            b = buf_new(64)
            buf_str(b, text("join: in list, want string, got "))
            buf_str(b, type_name(item))
            error(buf_to_string(b, L.TAG_STRING), text("join"))
        if i > 0:
            total += sep
        total += load(item + L.STR_LEN)
        i += 1
    if i == 1:
        result = iter_item(seq, 0)
        iter_end(seq)
        return result
    result = string_new(L.TAG_STRING, total)
    q = result + L.STR_DATA
    i = 0
    while True:
        item = iter_item(seq, i)
        if item == 0:
            break
        if i > 0:
            copy_disjoint(q, s + L.STR_DATA, sep)
            q += sep
        copy_disjoint(q, item + L.STR_DATA, load(item + L.STR_LEN))
        q += load(item + L.STR_LEN)
        i += 1
    iter_end(seq)
    return result


# -- split ----------------------------------------------------------------------------


def string_split(s: int, sep: int, maxsplit: int) -> int:
    return split_string(s, sep, maxsplit, text("split"), 0)


def string_rsplit(s: int, sep: int, maxsplit: int) -> int:
    return split_string(s, sep, maxsplit, text("rsplit"), 1)


def split_string(s: int, sep: int, maxsplit: int, name: int, right: int) -> int:
    limit = int_param(maxsplit, name, 2, 0 - 1)
    if sep == 0 or sep == L.NONE_ADDRESS:
        if right:
            return split_space_right(s, limit)
        return split_space(s, limit)
    if tag_of(sep) != L.TAG_STRING:
        b = buf_new(64)
        buf_str(b, text("split: got "))
        buf_str(b, type_name(sep))
        buf_str(b, text(" for separator, want string"))
        error(buf_to_string(b, L.TAG_STRING), name)
    m = load(sep + L.STR_LEN)
    if m == 0:
        error(text("split: empty separator"), name)
    n = load(s + L.STR_LEN)
    found = count_occurrences(s, sep, 0, n)
    # the separators that split: the first ``limit`` of them, or (rsplit) the last
    skip = 0
    if sge_signed(limit, 0) and found > limit:
        if right:
            skip = found - limit
        found = limit
    result = list_with(found + 1)
    items = load(result + L.LIST_ITEMS)
    at = 0
    piece_start = 0
    i = 0
    while i < skip:
        at = string_find_bytes(s, sep, at, n) + m
        i += 1
    i = 0
    while i < found:
        j = string_find_bytes(s, sep, at, n)
        store(items + 8 * i, substring(s, piece_start, j - piece_start))
        at = j + m
        piece_start = at
        i += 1
    store(items + 8 * found, substring(s, piece_start, n - piece_start))
    return result


def sge_signed(a: int, b: int) -> int:
    return slt(a, b) == 0


def split_space(s: int, limit: int) -> int:
    """Split around runs of white space: all (``limit`` negative) or at most ``limit``
    times from the left, the last field running to the end."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    result = list_with(0)
    count = 0
    start = 0 - 1
    i = 0
    while i < n:
        decoded = rune_at(p + i, n - i)
        width = decoded >> 32
        if is_space(decoded & 0xFFFFFFFF):
            if start != 0 - 1:
                if count == limit:
                    break
                append_piece(result, s, start, i)
                count += 1
                start = 0 - 1
        elif start == 0 - 1:
            start = i
        i += width
    if start != 0 - 1:
        append_piece(result, s, start, n)
    return result


def split_space_right(s: int, limit: int) -> int:
    """``rsplit`` around white space: at most ``limit`` times from the right."""
    if slt(limit, 0):
        return split_space(s, limit)
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    pieces = list_with(0)
    end = 0 - 1
    i = n
    while i > 0:
        decoded = rune_before(p, 0, i)
        width = decoded >> 32
        if is_space(decoded & 0xFFFFFFFF):
            if end != 0 - 1:
                if load(pieces + L.LIST_LEN) == limit:
                    break
                append_piece(pieces, s, i, end)
                end = 0 - 1
        elif end == 0 - 1:
            end = i
        i -= width
    if end != 0 - 1:
        append_piece(pieces, s, 0, end)
    # the pieces were found last first
    items = load(pieces + L.LIST_ITEMS)
    count = load(pieces + L.LIST_LEN)
    j = 0
    while j < count // 2:
        x = load(items + 8 * j)
        store(items + 8 * j, load(items + 8 * (count - 1 - j)))
        store(items + 8 * (count - 1 - j), x)
        j += 1
    return pieces


def append_piece(lst: int, s: int, start: int, end: int) -> None:
    list_append_unchecked(lst, substring(s, start, end - start))


def string_splitlines(s: int, keepends: int) -> int:
    """Lines split at ``\\n`` only (Go's rule), without a last empty line."""
    if keepends != 0 and tag_of(keepends) != L.TAG_BOOL:
        error_param_type(text("splitlines"), 1, keepends, text("bool"))
    keep = keepends == L.TRUE_ADDRESS
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    lines = 0
    i = 0
    while i < n:
        if loadb(p + i) == 10:
            lines += 1
        i += 1
    if n > 0 and loadb(p + n - 1) != 10:
        lines += 1
    result = list_with(lines)
    items = load(result + L.LIST_ITEMS)
    start = 0
    line = 0
    i = 0
    while line < lines:
        while i < n and loadb(p + i) != 10:
            i += 1
        if keep and i < n:
            store(items + 8 * line, substring(s, start, i + 1 - start))
        else:
            store(items + 8 * line, substring(s, start, i - start))
        i += 1
        start = i
        line += 1
    return result


# -- strip ----------------------------------------------------------------------------


def strip_chars(chars: int, name: int) -> int:
    """The ``chars`` argument: 0 (white space) when absent or empty, else a str."""
    if chars == 0:
        return 0
    string_param(chars, name, 1)
    if load(chars + L.STR_LEN) == 0:
        return 0
    return chars


def strippable(code: int, chars: int) -> int:
    """Whether ``strip`` removes code point ``code``: white space when ``chars`` is 0,
    else one of the code points of ``chars`` (an invalid byte there is U+FFFD)."""
    if chars == 0:
        return is_space(code)
    p = chars + L.STR_DATA
    n = load(chars + L.STR_LEN)
    i = 0
    while i < n:
        c = loadb(p + i)
        if c < 0x80:
            if c == code:
                return 1
            i += 1
            continue
        decoded = rune_at(p + i, n - i)
        if (decoded & 0xFFFFFFFF) == code:
            return 1
        i += decoded >> 32
    return 0


def strip_start(s: int, chars: int) -> int:
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    i = 0
    while i < n:
        decoded = rune_at(p + i, n - i)
        if strippable(decoded & 0xFFFFFFFF, chars) == 0:
            return i
        i += decoded >> 32
    return n


def strip_end(s: int, start: int, chars: int) -> int:
    p = s + L.STR_DATA
    i = load(s + L.STR_LEN)
    while i > start:
        decoded = rune_before(p, start, i)
        if strippable(decoded & 0xFFFFFFFF, chars) == 0:
            return i
        i -= decoded >> 32
    return start


def string_strip(s: int, chars: int) -> int:
    chars = strip_chars(chars, text("strip"))
    start = strip_start(s, chars)
    return substring(s, start, strip_end(s, start, chars) - start)


def string_lstrip(s: int, chars: int) -> int:
    chars = strip_chars(chars, text("lstrip"))
    start = strip_start(s, chars)
    return substring(s, start, load(s + L.STR_LEN) - start)


def string_rstrip(s: int, chars: int) -> int:
    chars = strip_chars(chars, text("rstrip"))
    return substring(s, 0, strip_end(s, 0, chars))


# -- case -----------------------------------------------------------------------------


def string_upper(s: int) -> int:
    return convert_case(s, UPPER)


def string_lower(s: int) -> int:
    return convert_case(s, LOWER)


def string_capitalize(s: int) -> int:
    return convert_case(s, CAPITALIZE)


def string_title(s: int) -> int:
    return convert_case(s, TITLE)


def convert_case(s: int, mode: int) -> int:
    """Map every code point of ``s`` (an invalid byte becomes U+FFFD) into a string
    made as large as the result can be, then cut to size."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    if mode <= LOWER and is_ascii(p, n):  # upper or lower
        return convert_ascii(s, mode)
    room = case_bound(p, n)
    result = string_new(L.TAG_STRING, room)
    string_shrink(result, room, convert_runes(p, n, mode, result + L.STR_DATA))
    return result


def case_bound(p: int, n: int) -> int:
    """The most bytes a case conversion can make of these: only two-byte code points
    grow (to three bytes), and an invalid byte becomes U+FFFD (three bytes)."""
    room = n
    i = 0
    while i < n:
        if loadb(p + i) < 0x80:
            i += 1
            continue
        width = utf8_decode(p + i, n - i) >> 32
        if width == 0:
            room += 2
            width = 1
        elif width == 2:
            room += 1
        i += width
    return room


def string_shrink(s: int, allocated: int, length: int) -> None:
    """Cut a new string made with room for ``allocated`` bytes to ``length``; if it is
    the last object on the heap, the room it gives back is zeroed and reused."""
    store(s + L.STR_LEN, length)
    end = s + ((L.STR_DATA + allocated + 7) & ~7)
    top = s + ((L.STR_DATA + length + 7) & ~7)
    q = top
    while q < end:  # zeros: fresh heap, or gaps the collector walks past
        store(q, 0)
        q += 8
    if heap_pointer() == end:
        set_heap_pointer(top)


def convert_ascii(s: int, mode: int) -> int:
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    result = string_new(L.TAG_STRING, n)
    q = result + L.STR_DATA
    low = 97
    if mode == LOWER:
        low = 65
    i = 0
    while i < n:
        c = loadb(p + i)
        if c >= low and c < low + 26:
            c = c ^ 32
        storeb(q + i, c)
        i += 1
    return result


def convert_runes(p: int, n: int, mode: int, q: int) -> int:
    """Write the converted code points at ``q``; returns the byte count."""
    size = 0
    previous_cased = 0
    i = 0
    while i < n:
        decoded = rune_at(p + i, n - i)
        code = decoded & 0xFFFFFFFF
        if mode == UPPER:
            code = to_upper(code)
        elif mode == LOWER:
            code = to_lower(code)
        elif mode == CAPITALIZE:
            code = to_title(code) if i == 0 else to_lower(code)
        else:
            code = to_lower(code) if previous_cased else to_title(code)
            previous_cased = is_cased(code)
        size += utf8_encode(q + size, code)
        i += decoded >> 32
    return size


def string_isupper(s: int) -> int:
    return bool_value(is_case_fixed(s, UPPER))


def string_islower(s: int) -> int:
    return bool_value(is_case_fixed(s, LOWER))


def is_case_fixed(s: int, mode: int) -> int:
    """Go's ``isCasedString(s) && s == strings.ToUpper(s)`` (or ToLower)."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    cased = 0
    i = 0
    while i < n:
        c = loadb(p + i)
        if c < 0x80:
            code = c
            i += 1
        else:
            decoded = utf8_decode(p + i, n - i)
            if decoded == 0:
                return 0  # an invalid byte: the conversion would change it
            code = decoded & 0xFFFFFFFF
            i += decoded >> 32
        if mode == UPPER:
            if to_upper(code) != code:
                return 0
        elif to_lower(code) != code:
            return 0
        if cased == 0:
            cased = is_cased(code)
    return cased


def string_istitle(s: int) -> int:
    """Upper and title case only after uncased code points, lower case only after
    cased ones, and at least one cased code point."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    cased = 0
    previous_cased = 0
    i = 0
    while i < n:
        decoded = rune_at(p + i, n - i)
        code = decoded & 0xFFFFFFFF
        i += decoded >> 32
        if (code >= 65 and code <= 90) or is_title(code):
            if previous_cased:
                return L.FALSE_ADDRESS
            previous_cased = 1
            cased = 1
        elif is_lower(code):
            if previous_cased == 0:
                return L.FALSE_ADDRESS
            previous_cased = 1
            cased = 1
        elif is_upper(code):
            return L.FALSE_ADDRESS  # Go's rule: other upper case letters never pass
        else:
            previous_cased = 0
    return bool_value(cased)


# -- classification -------------------------------------------------------------------

ALPHA = 0
ALNUM = 1
DIGIT = 2
SPACE = 3


def string_isalpha(s: int) -> int:
    return bool_value(all_runes(s, ALPHA))


def string_isalnum(s: int) -> int:
    return bool_value(all_runes(s, ALNUM))


def string_isdigit(s: int) -> int:
    return bool_value(all_runes(s, DIGIT))


def string_isspace(s: int) -> int:
    return bool_value(all_runes(s, SPACE))


def all_runes(s: int, kind: int) -> int:
    """Whether ``s`` is not empty and every code point is of ``kind``."""
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    if n == 0:
        return 0
    i = 0
    while i < n:
        decoded = rune_at(p + i, n - i)
        code = decoded & 0xFFFFFFFF
        i += decoded >> 32
        if kind == ALPHA:
            ok = is_letter(code)
        elif kind == DIGIT:
            ok = is_decimal_digit(code)
        elif kind == SPACE:
            ok = is_space(code)
        else:
            ok = is_letter(code) or is_decimal_digit(code)
        if ok == 0:
            return 0
    return 1
