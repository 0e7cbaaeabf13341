"""Indexing, slicing, membership, unpacking and iteration of every sequence.

Iteration is a protocol of three calls: ``iter_start(x)`` checks that ``x`` is
iterable and returns the object to iterate (a list or dict is locked against changes
for as long as the loop runs), ``iter_item(seq, i)`` returns the ``i`` th item or 0
after the last, and ``iter_end(seq)`` unlocks.  The compiler's loops start with
``iter_walk``, which also says where a list's, a tuple's or a dict's items lie, read
them in place, and unlock inline.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    FLOATS,
    Global,
    cold,
    load,
    loadb,
    noreturn,
    sar,
    sge,
    slt,
    store,
    storeb,
    text,
)
from kforge.starlark.runtime.values import LOOKUP_FAILED

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import int_from_word
    from kforge.starlark.runtime.core import (
        alloc_block,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.dicts import dict_compact, dict_set
    from kforge.starlark.runtime.floats import float_to_int, is_float
    from kforge.starlark.runtime.format import error_with_value, write_repr, write_signed, write_str
    from kforge.starlark.runtime.lists import (
        check_list_mutable,
        copy_words,
        list_append_unchecked,
        list_extend_from,
        list_from_items,
        list_reserve,
        list_with,
        tuple_with,
    )
    from kforge.starlark.runtime.ranges import make_range
    from kforge.starlark.runtime.strings import (
        string_find_bytes,
        string_new,
        substring,
        utf8_decode,
    )
    from kforge.starlark.runtime.values import (
        dict_find,
        equal,
        error_binary,
        error_compare_depth,
        error_with_type,
        hash_key,
        hash_soft,
        small,
        tag_of,
        type_name,
    )


# -- indexes --------------------------------------------------------------------------


def index_word(v: int, what: int) -> int:
    """An index argument as a signed machine word (Go's ``AsInt32`` errors, after
    ``what``)."""
    return int32_argument(v, what, 0)


def int32_argument(v: int, what: int, builtin: int) -> int:
    """An int argument that must fit 32 bits, as a signed machine word: Go's
    ``AsInt32``, whose errors (``got string, want int``, ``V out of range``) follow
    ``what``; ``builtin`` names the builtin that failed, or is 0."""
    if v & 1:
        n = sar(v, 1)
        if slt(n, 0 - (1 << 31)) == 0 and slt(n, 1 << 31):
            return n
    b = buf_new(64)
    buf_str(b, what)
    if tag_of(v) == L.TAG_BIGINT or v & 1:
        write_str(b, v)
        buf_str(b, text(" out of range"))
    else:
        buf_str(b, text("got "))
        buf_str(b, type_name(v))
        buf_str(b, text(", want int"))
    error(buf_to_string(b, L.TAG_STRING), builtin)
    return 0


def string_concat_text(a: int, b: int) -> int:
    buffer = buf_new(32)
    buf_str(buffer, a)
    buf_str(buffer, b)
    return buf_to_string(buffer, L.TAG_STRING)


def index_in(v: int, n: int, container: int, named: int) -> int:
    """The position ``container[v]`` names in a sequence of ``n`` items (negative counts
    from the end), or an error.  An index that is no 32-bit int is refused after
    ``list index: `` when ``named`` (reading), bare (assigning), as Go words them."""
    if v & 1:
        i = sar(v, 1)
        if i + (1 << 31) < (1 << 32):
            j = i
            if slt(j, 0):
                j += n
            if j < n:
                return j
            error(out_of_range_message(i, n, container), 0)
    what = text("")
    if named:
        what = index_prefix(container)
    int32_argument(v, what, 0)
    return 0


@cold
def index_prefix(container: int) -> int:
    """``list index: `` and the like, for an index that is not an int."""
    return string_concat_text(type_name(container), text(" index: "))


@cold
def out_of_range_message(i: int, n: int, container: int) -> int:
    """``list index 5 out of range [-2:1]``, or ``index 0 out of range: empty list``."""
    b = buf_new(64)
    if n == 0:
        buf_str(b, text("index "))
        write_signed(b, i)
        buf_str(b, text(" out of range: empty "))
        buf_str(b, type_name(container))
    else:
        buf_str(b, type_name(container))
        buf_str(b, text(" index "))
        write_signed(b, i)
        buf_str(b, text(" out of range ["))
        write_signed(b, 0 - n)
        buf_str(b, text(":"))
        write_signed(b, n - 1)
        buf_str(b, text("]"))
    return buf_to_string(b, L.TAG_STRING)


def get_index(x: int, key: int) -> int:
    """``x[key]``."""
    tag = L.TAG_INT if x & 1 else load(x) & L.TAG_MASK
    if tag == L.TAG_LIST:
        n = load(x + L.LIST_LEN)
        if key & 1 and (key >> 1) < n:  # a small int in range (a negative one is huge)
            return load(load(x + L.LIST_ITEMS) + ((key >> 1) << 3))
        i = index_in(key, n, x, 1)
        return load(load(x + L.LIST_ITEMS) + (i << 3))
    if tag == L.TAG_DICT:
        return dict_get_index(x, key)
    if tag == L.TAG_TUPLE:
        n = load(x + L.TUPLE_LEN)
        if key & 1 and (key >> 1) < n:  # as for a list
            return load(x + L.TUPLE_ITEMS + ((key >> 1) << 3))
        i = index_in(key, n, x, 1)
        return load(x + L.TUPLE_ITEMS + 8 * i)
    if tag == L.TAG_STRING:
        if key & 1 and (key >> 1) < load(x + L.STR_LEN):  # as for a list
            return byte_string(loadb(x + L.STR_DATA + (key >> 1)))
        i = index_in(key, load(x + L.STR_LEN), x, 1)
        return byte_string(loadb(x + L.STR_DATA + i))
    if tag == L.TAG_BYTES:
        i = index_in(key, load(x + L.STR_LEN), x, 1)
        return substring(x, i, 1)
    if tag == L.TAG_RANGE:
        i = index_in(key, load(x + L.RANGE_LEN), x, 1)
        return int_from_word(load(x + L.RANGE_START) + i * load(x + L.RANGE_STEP))
    if tag == L.TAG_STRING_ELEMS:
        return elems_index(x, key)
    error_unhandled_index(x, key)
    return 0


def dict_get_index(x: int, key: int) -> int:
    """``x[key]`` for the dict ``x`` (the compiled code calls it once it has read the tag)."""
    e = dict_find(x, key, hash_key(key, 0))
    if e > LOOKUP_FAILED:
        return load(e + 16)
    if e == LOOKUP_FAILED:
        error_compare_depth(0)
    b = buf_new(32)
    buf_str(b, text("key "))
    write_repr(b, key)
    buf_str(b, text(" not in dict"))
    error(buf_to_string(b, L.TAG_STRING), 0)
    return 0


#: The one-byte strs of the ASCII bytes made so far, by byte (a value block of 128
#: words, made when the first is asked for): ``s[i]`` and ``s.elems()`` give the same
#: object for the same ASCII character, so walking a string makes no garbage.
_ascii_strings = Global(__name__)


def byte_string(c: int) -> int:
    """The one-byte str of a byte value."""
    if c < 128:
        table = _ascii_strings.value
        if table != 0:
            s = load(table + 8 * c)
            if s != 0:
                return s
        return ascii_string(c)
    s = string_new(L.TAG_STRING, 1)
    store(s + L.STR_DATA, c)
    return s


def ascii_string(c: int) -> int:
    """Make the one-byte str of the ASCII byte ``c`` and keep it (see ``_ascii_strings``)."""
    table = _ascii_strings.value
    if table == 0:
        table = alloc_block(L.TAG_VBLOCK, 8 * 128)
        _ascii_strings.value = table
    s = string_new(L.TAG_STRING, 1)
    store(s + L.STR_DATA, c)
    store(table + 8 * c, s)
    return s


def elems_indexable(x: int) -> int:
    """Whether a view has a length and indexes (Go's ``stringElems``: ``elems()`` and
    ``elem_ords()``; the code point views and ``bytes.elems()`` only iterate)."""
    if tag_of(x) != L.TAG_STRING_ELEMS:
        return 0
    kind = load(x + L.ELEMS_KIND)
    return kind == L.ELEMS_ELEMS or kind == L.ELEMS_ELEM_ORDS


def elems_index(x: int, key: int) -> int:
    """``s.elems()[i]`` and ``s.elem_ords()[i]``; Go's other views have no index."""
    if elems_indexable(x) == 0:
        error_unhandled_index(x, key)
    s = load(x + L.ELEMS_STRING)
    i = index_in(key, load(s + L.STR_LEN), x, 1)
    c = loadb(s + L.STR_DATA + i)
    if load(x + L.ELEMS_KIND) == L.ELEMS_ELEMS:
        return byte_string(c)
    return small(c)


@noreturn
def error_unhandled_index(x: int, key: int) -> None:
    b = buf_new(32)
    buf_str(b, text("unhandled index operation "))
    buf_str(b, type_name(x))
    buf_str(b, text("["))
    buf_str(b, type_name(key))
    buf_str(b, text("]"))
    error(buf_to_string(b, L.TAG_STRING), 0)


def set_index(x: int, key: int, value: int) -> None:
    """``x[key] = value``."""
    tag = L.TAG_INT if x & 1 else load(x) & L.TAG_MASK
    if tag == L.TAG_DICT:
        dict_set(x, key, value)
        return
    if tag == L.TAG_LIST:
        i = index_in(key, load(x + L.LIST_LEN), x, 0)
        check_list_mutable(x, text("assign to element of"))
        store(load(x + L.LIST_ITEMS) + (i << 3), value)
        return
    error_with_type(text(""), x, text(" value does not support item assignment"), 0)


# -- slices ---------------------------------------------------------------------------


def slice_bound(v: int, n: int, default: int, what: int) -> int:
    """A slice bound as a signed word: ``default`` when absent (0 or None); a negative
    one counts from the end."""
    if v == 0 or v == L.NONE_ADDRESS:
        return default
    i = index_word(v, what)
    if slt(i, 0):
        i += n
    return i


def get_slice(x: int, lo: int, hi: int, step_value: int) -> int:
    """``x[lo:hi:step]`` (0 for a missing part)."""
    tag = tag_of(x)
    n = length_for_slice(x, tag)
    step = 1
    if step_value != 0 and step_value != L.NONE_ADDRESS:
        step = index_word(step_value, text("invalid slice step: "))
        if step == 0:
            error(text("zero is not a valid slice step"), 0)
    if sge(step, 0):
        start = clamp(slice_bound(lo, n, 0, text("invalid start index: ")), n)
        end = clamp(slice_bound(hi, n, n, text("invalid end index: ")), n)
        if slt(end, start):
            end = start
    else:
        start = slice_bound(lo, n, n - 1, text("invalid start index: "))
        if sge(start, n):
            start = n - 1
        end = slice_bound(hi, n, 0 - 1, text("invalid end index: "))
        if slt(end, 0 - 1):
            end = 0 - 1
        if slt(start, end):
            start = end
    count = 0
    if slt(0, step):
        count = (end - start + step - 1) // step
    else:
        count = (start - end + (0 - step) - 1) // (0 - step)
    if tag == L.TAG_LIST:
        return slice_items(load(x + L.LIST_ITEMS), start, step, count, 1)
    if tag == L.TAG_TUPLE:
        return slice_items(x + L.TUPLE_ITEMS, start, step, count, 0)
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        if step == 1:
            return substring(x, start, count)
        s = string_new(tag, count)
        i = 0
        while i < count:
            storeb(s + L.STR_DATA + i, loadb(x + L.STR_DATA + start + i * step))
            i += 1
        return s
    # a range: a range again
    first = load(x + L.RANGE_START) + start * load(x + L.RANGE_STEP)
    stop = load(x + L.RANGE_START) + end * load(x + L.RANGE_STEP)
    return make_range(first, stop, load(x + L.RANGE_STEP) * step, count)


def length_for_slice(x: int, tag: int) -> int:
    if tag == L.TAG_LIST:
        return load(x + L.LIST_LEN)
    if tag == L.TAG_TUPLE:
        return load(x + L.TUPLE_LEN)
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return load(x + L.STR_LEN)
    if tag == L.TAG_RANGE:
        return load(x + L.RANGE_LEN)
    error_with_type(text("invalid slice operand "), x, text(""), 0)
    return 0


def clamp(i: int, n: int) -> int:
    if slt(i, 0):
        return 0
    if sge(i, n):
        return n
    return i


def slice_items(items: int, start: int, step: int, count: int, as_list: int) -> int:
    if as_list:
        result = list_with(count)
        target = load(result + L.LIST_ITEMS)
    else:
        result = tuple_with(count)
        target = result + L.TUPLE_ITEMS
    i = 0
    while i < count:
        store(target + 8 * i, load(items + 8 * (start + i * step)))
        i += 1
    return result


# -- membership -----------------------------------------------------------------------


def contains(container: int, item: int) -> int:
    """1 if ``item in container``."""
    tag = L.TAG_INT if container & 1 else load(container) & L.TAG_MASK
    if tag == L.TAG_DICT:
        h = hash_soft(item)  # Go takes a key it cannot hash or compare for a missing one
        if h == 0:
            return 0
        return dict_find(container, item, h) > LOOKUP_FAILED
    if tag == L.TAG_LIST:
        return items_contain(load(container + L.LIST_ITEMS), load(container + L.LIST_LEN), item)
    if tag == L.TAG_TUPLE:
        return items_contain(container + L.TUPLE_ITEMS, load(container + L.TUPLE_LEN), item)
    if tag == L.TAG_STRING:
        if tag_of(item) != L.TAG_STRING:
            error_with_type(
                text("'in <string>' requires string as left operand, not "), item, text(""), 0
            )
        found = string_find_bytes(container, item, 0, load(container + L.STR_LEN))
        return found != 0 - 1
    if tag == L.TAG_BYTES:
        return bytes_contains(container, item)
    if tag == L.TAG_RANGE:
        return range_contains(container, item)
    error_binary(text("in"), item, container)
    return 0


def items_contain(items: int, n: int, item: int) -> int:
    """1 if one of ``n`` items equals ``item`` (Go's ``Equal``, with its errors)."""
    end = items + 8 * n
    if FLOATS:  # a small int may equal a float, and a float a small int
        while items < end:
            x = load(items)
            if x == item or ((x & item & 1) == 0 and equal(x, item)):
                return 1
            items += 8
        return 0
    if item & 1:
        while items < end:
            if load(items) == item:
                return 1
            items += 8
        return 0
    while items < end:
        x = load(items)
        if (x & 1) == 0 and equal(x, item):
            return 1
        items += 8
    return 0


def bytes_contains(container: int, item: int) -> int:
    tag = tag_of(item)
    if tag == L.TAG_BYTES:
        found = string_find_bytes(container, item, 0, load(container + L.STR_LEN))
        return found != 0 - 1
    if item & 1:
        value = sar(item, 1)
        if value >= 256:
            error_with_value(text("int in bytes: "), item, text(" out of range"))
        n = load(container + L.STR_LEN)
        i = 0
        while i < n:
            if loadb(container + L.STR_DATA + i) == value:
                return 1
            i += 1
        return 0
    error_with_type(
        text("'in bytes' requires bytes or int as left operand, not "), item, text(""), 0
    )
    return 0


def range_contains(r: int, item: int) -> int:
    if FLOATS and is_float(item):  # its truncation (Go's NumberToInt); NaN, inf fail
        truncated = float_to_int(load(item + L.FLOAT_BITS))
        if truncated != 0:
            item = truncated
    if (item & 1) == 0:
        if tag_of(item) != L.TAG_INT:
            error_with_type(
                text("'in <range>' requires integer as left operand, not "), item, text(""), 0
            )
        return 0  # a big int: out of any range's (32-bit) bounds
    x = sar(item, 1)
    n = load(r + L.RANGE_LEN)
    if n == 0:
        return 0
    start = load(r + L.RANGE_START)
    step = load(r + L.RANGE_STEP)
    if slt(0, step):
        if slt(x, start) or sge(x, start + n * step):
            return 0
        return (x - start) % step == 0
    if slt(start, x) or sge(start + n * step, x):
        return 0
    return (start - x) % (0 - step) == 0


# -- unpacking ------------------------------------------------------------------------


def unpack(v: int, want: int) -> int:
    """``a, b, ... = v``: the address of ``want`` (a small int) items in a row."""
    tag = tag_of(v)
    if tag == L.TAG_TUPLE:
        check_unpack_count(load(v + L.TUPLE_LEN), want)
        return v + L.TUPLE_ITEMS
    if tag == L.TAG_LIST:
        check_unpack_count(load(v + L.LIST_LEN), want)
        return load(v + L.LIST_ITEMS)
    if is_iterable(v) == 0:
        error_with_type(text("got "), v, text(" in sequence assignment"), 0)
    items = iterable_to_list(v)
    check_unpack_count(load(items + L.LIST_LEN), want)
    return load(items + L.LIST_ITEMS)


def check_unpack_count(got: int, want_word: int) -> None:
    want = want_word >> 1
    if got == want:
        return
    b = buf_new(64)
    if got > want:
        buf_str(b, text("too many values to unpack (got "))
    else:
        buf_str(b, text("too few values to unpack (got "))
    buf_decimal(b, got)
    buf_str(b, text(", want "))
    buf_decimal(b, want)
    buf_str(b, text(")"))
    error(buf_to_string(b, L.TAG_STRING), 0)


# -- iteration ------------------------------------------------------------------------


def is_iterable(v: int) -> int:
    tag = tag_of(v)
    return (
        tag == L.TAG_LIST
        or tag == L.TAG_TUPLE
        or tag == L.TAG_DICT
        or tag == L.TAG_RANGE
        or tag == L.TAG_STRING_ELEMS
    )


def iter_start(x: int) -> int:
    tag = tag_of(x)
    if tag == L.TAG_LIST:
        store(x + L.LIST_ITERS, load(x + L.LIST_ITERS) + 1)
        return x
    if tag == L.TAG_DICT:
        if load(x + L.DICT_ITERS) == 0:
            dict_compact(x)
        store(x + L.DICT_ITERS, load(x + L.DICT_ITERS) + 1)
        return x
    if tag == L.TAG_TUPLE or tag == L.TAG_RANGE:
        return x
    if tag == L.TAG_STRING_ELEMS:
        return elems_prepare(x)
    error_with_type(text(""), x, text(" value is not iterable"), 0)
    return 0


#: What ``iter_walk`` leaves for the compiled loop over the sequence it answers: the
#: address of the first item, the address past the last and the step between them (a
#: list's or a tuple's items, a dict's keys), or 0, 0 and 1 for a sequence read by
#: ``iter_item`` (the loop's cursor then counts its items).
walk_cursor = Global(__name__)
walk_end = Global(__name__)
walk_stride = Global(__name__)


def iter_walk(x: int) -> int:
    """``iter_start(x)`` for a compiled loop, which reads a list's, a tuple's or a dict's
    items in place as ``walk_cursor``, ``walk_end`` and ``walk_stride`` say: none of
    them changes while iterated (a list or dict being iterated refuses changes)."""
    stride = 8
    tag = L.TAG_INT if x & 1 else load(x) & L.TAG_MASK
    if tag == L.TAG_LIST:
        store(x + L.LIST_ITERS, load(x + L.LIST_ITERS) + 1)
        cursor = load(x + L.LIST_ITEMS)
    elif tag == L.TAG_TUPLE:
        cursor = x + L.TUPLE_ITEMS
    elif tag == L.TAG_DICT:
        iter_start(x)  # its live entries now in a row
        cursor = load(x + L.DICT_ENTRIES) + 8
        stride = L.DICT_ENTRY_SIZE
    else:
        walk_cursor.value = 0
        walk_end.value = 0
        walk_stride.value = 1
        return iter_start(x)
    walk_cursor.value = cursor
    walk_end.value = cursor + load(x + L.LENGTH) * stride
    walk_stride.value = stride
    return x


def iter_item(seq: int, i: int) -> int:
    """The ``i`` th item of an iterated sequence, or 0 after the last."""
    tag = load(seq) & L.TAG_MASK
    if tag == L.TAG_LIST:
        if i < load(seq + L.LIST_LEN):
            return load(load(seq + L.LIST_ITEMS) + (i << 3))
        return 0
    if tag == L.TAG_DICT:  # iterated dicts have no holes (see iter_start)
        if i < load(seq + L.DICT_USED):
            return load(load(seq + L.DICT_ENTRIES) + L.DICT_ENTRY_SIZE * i + 8)
        return 0
    if tag == L.TAG_TUPLE:
        if i < load(seq + L.TUPLE_LEN):
            return load(seq + L.TUPLE_ITEMS + (i << 3))
        return 0
    if tag == L.TAG_RANGE:
        if i < load(seq + L.RANGE_LEN):
            return int_from_word(load(seq + L.RANGE_START) + i * load(seq + L.RANGE_STEP))
        return 0
    return elems_item(seq, i)


def iter_end(seq: int) -> None:
    tag = load(seq) & L.TAG_MASK
    if tag == L.TAG_LIST:
        store(seq + L.LIST_ITERS, load(seq + L.LIST_ITERS) - 1)
    elif tag == L.TAG_DICT:
        store(seq + L.DICT_ITERS, load(seq + L.DICT_ITERS) - 1)


def elems_prepare(x: int) -> int:
    """Iterating a str's code points needs their positions: a tuple of the items."""
    kind = load(x + L.ELEMS_KIND)
    if kind == L.ELEMS_CODEPOINTS or kind == L.ELEMS_CODEPOINT_ORDS:
        return codepoint_items(x)
    return x


def elems_item(seq: int, i: int) -> int:
    s = load(seq + L.ELEMS_STRING)
    if i >= load(s + L.STR_LEN):
        return 0
    c = loadb(s + L.STR_DATA + i)
    if load(seq + L.ELEMS_KIND) == L.ELEMS_ELEMS:
        return byte_string(c)
    return small(c)


def codepoint_items(x: int) -> int:
    """The items of ``s.codepoints()`` or ``s.codepoint_ords()`` as a tuple (an invalid
    byte is U+FFFD: the string ``"\ufffd"`` or the int 65533, as in Go)."""
    s = load(x + L.ELEMS_STRING)
    ords = load(x + L.ELEMS_KIND) == L.ELEMS_CODEPOINT_ORDS
    n = load(s + L.STR_LEN)
    p = s + L.STR_DATA
    count = 0
    i = 0
    while i < n:
        width = utf8_decode(p + i, n - i) >> 32
        if width == 0:
            width = 1
        i += width
        count += 1
    result = tuple_with(count)
    items = result + L.TUPLE_ITEMS
    i = 0
    while i < n:
        decoded = utf8_decode(p + i, n - i)
        width = decoded >> 32
        code = decoded & 0xFFFFFFFF
        if width == 0:
            width = 1
            code = 0xFFFD
        if ords:
            store(items, small(code))
        elif code == 0xFFFD:
            store(items, text("\ufffd"))
        else:
            store(items, substring(s, i, width))
        items += 8
        i += width
    return result


def iterable_to_list(v: int) -> int:
    """A new list of the items of any iterable (an error for a non-iterable)."""
    tag = L.TAG_INT if v & 1 else load(v) & L.TAG_MASK
    if tag == L.TAG_LIST:
        return list_from_items(load(v + L.LIST_ITEMS), load(v + L.LIST_LEN))
    if tag == L.TAG_TUPLE:
        return list_from_items(v + L.TUPLE_ITEMS, load(v + L.TUPLE_LEN))
    if tag == L.TAG_RANGE:
        n = load(v + L.RANGE_LEN)
        result = list_with(n)
        p = load(result + L.LIST_ITEMS)
        end = p + (n << 3)
        item = load(v + L.RANGE_START)
        step = load(v + L.RANGE_STEP)
        while p < end:
            store(p, int_from_word(item))
            item += step
            p += 8
        return result
    seq = iter_start(v)
    result = iterated_list(seq)
    iter_end(seq)
    return result


def iterated_list(seq: int) -> int:
    """A new list of the items of a sequence being iterated (see ``iter_start``)."""
    result = list_with(0)
    i = 0
    while True:
        item = iter_item(seq, i)
        if item == 0:
            break
        list_append_unchecked(result, item)
        i += 1
    return result


def list_extend_iterable(lst: int, v: int) -> None:
    """Append every item of the iterable ``v`` to ``lst`` (``v`` may be ``lst`` itself)."""
    tag = tag_of(v)
    if tag == L.TAG_LIST:
        list_extend_from(lst, v)
        return
    if tag == L.TAG_TUPLE:
        n = load(v + L.TUPLE_LEN)
        list_reserve(lst, n)
        m = load(lst + L.LIST_LEN)
        copy_words(load(lst + L.LIST_ITEMS) + 8 * m, v + L.TUPLE_ITEMS, n)
        store(lst + L.LIST_LEN, m + n)
        return
    seq = iter_start(v)
    i = 0
    while True:
        item = iter_item(seq, i)
        if item == 0:
            break
        list_append_unchecked(lst, item)
        i += 1
    iter_end(seq)
