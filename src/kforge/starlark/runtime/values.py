"""What every value can be asked: its type, truth, equality, order, hash; indexing,
slicing, attributes, unpacking and iteration.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    FLOATS,
    Global,
    cold,
    inline,
    load,
    loadb,
    noreturn,
    store,
    text,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import mag_compare
    from kforge.starlark.runtime.core import alloc_object, buf_new, buf_str, buf_to_string, error
    from kforge.starlark.runtime.floats import (
        float_equal,
        float_equal_small,
        float_hash,
        float_order,
        floats_involved,
        is_float,
    )
    from kforge.starlark.runtime.softfloat import f64_order


@inline
def tag_of(v: int) -> int:
    """The type tag of a value; :data:`~kforge.starlark.layout.TAG_INT` for any int."""
    if v & 1:
        return L.TAG_INT
    return load(v) & L.TAG_MASK


@inline
def is_int(v: int) -> int:
    if v & 1:
        return 1
    return (load(v) & L.TAG_MASK) == L.TAG_BIGINT


@inline
def is_string(v: int) -> int:
    if v & 1:
        return 0
    return (load(v) & L.TAG_MASK) == L.TAG_STRING


def type_name(v: int) -> int:
    """The name ``type(v)`` gives, as a str."""
    tag = tag_of(v)
    if tag == L.TAG_INT:
        return text("int")
    if tag == L.TAG_STRING:
        return text("string")
    if tag == L.TAG_NONE:
        return text("NoneType")
    if tag == L.TAG_BOOL:
        return text("bool")
    if tag == L.TAG_LIST:
        return text("list")
    if tag == L.TAG_TUPLE:
        return text("tuple")
    if tag == L.TAG_DICT:
        return text("dict")
    if tag == L.TAG_BYTES:
        return text("bytes")
    if tag == L.TAG_RANGE:
        return text("range")
    if tag == L.TAG_FUNCTION:
        return text("function")
    if tag == L.TAG_BUILTIN:
        return text("builtin_function_or_method")
    if tag == L.TAG_MODULE:
        return text("module")
    if tag == L.TAG_FLOAT:
        return text("float")
    if tag == L.TAG_STRING_ELEMS:
        return elems_type_name(v)
    return text("unknown")


def elems_type_name(v: int) -> int:
    """Go's type names of the views: ``codepoint_ords()`` is a ``string.codepoints`` and
    ``elem_ords()`` a ``string.elems``, the ords being a flag of the same view."""
    kind = load(v + L.ELEMS_KIND)
    if kind == L.ELEMS_CODEPOINTS or kind == L.ELEMS_CODEPOINT_ORDS:
        return text("string.codepoints")
    if kind == L.ELEMS_BYTES_ELEMS:
        return text("bytes.elems")
    return text("string.elems")


# -- errors that name types -----------------------------------------------------------


def error_binary(op: int, a: int, b: int) -> None:
    """``unknown binary op: T op U`` (``op`` is a str)."""
    buffer = buf_new(64)
    buf_str(buffer, text("unknown binary op: "))
    buf_str(buffer, type_name(a))
    buf_str(buffer, text(" "))
    buf_str(buffer, op)
    buf_str(buffer, text(" "))
    buf_str(buffer, type_name(b))
    error(buf_to_string(buffer, L.TAG_STRING), 0)


def error_unary(op: int, a: int) -> None:
    buffer = buf_new(64)
    buf_str(buffer, text("unknown unary op: "))
    buf_str(buffer, op)
    buf_str(buffer, text(" "))
    buf_str(buffer, type_name(a))
    error(buf_to_string(buffer, L.TAG_STRING), 0)


def error_with_type(before: int, v: int, after: int, builtin: int) -> None:
    """An error whose message is ``before`` + the type name of ``v`` + ``after``."""
    buffer = buf_new(64)
    buf_str(buffer, before)
    buf_str(buffer, type_name(v))
    buf_str(buffer, after)
    error(buf_to_string(buffer, L.TAG_STRING), builtin)


def error_two_types(before: int, a: int, middle: int, b: int, after: int, builtin: int) -> None:
    buffer = buf_new(64)
    buf_str(buffer, before)
    buf_str(buffer, type_name(a))
    buf_str(buffer, middle)
    buf_str(buffer, type_name(b))
    buf_str(buffer, after)
    error(buf_to_string(buffer, L.TAG_STRING), builtin)


def no_such_method(v: int, name: int) -> None:
    """``T has no .name field or method``."""
    buffer = buf_new(64)
    buf_str(buffer, type_name(v))
    buf_str(buffer, text(" has no ."))
    buf_str(buffer, name)
    buf_str(buffer, text(" field or method"))
    error(buf_to_string(buffer, L.TAG_STRING), 0)


# -- small helpers on words -----------------------------------------------------------


@inline
def small(n: int) -> int:
    """The word of the small int ``n`` (a signed machine word that fits)."""
    return (n << 1) | 1


@inline
def bool_value(flag: int) -> int:
    if flag != 0:
        return L.TRUE_ADDRESS
    return L.FALSE_ADDRESS


def length_of(v: int) -> int:
    """The length of a str, bytes, list, tuple, dict or range (a machine word), for
    ``len`` and the truth of containers; -1 (all ones) for anything else (the views
    of ``elems()`` and friends are true whatever their length, as in Go)."""
    tag = tag_of(v)
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return load(v + L.STR_LEN)
    if tag == L.TAG_LIST:
        return load(v + L.LIST_LEN)
    if tag == L.TAG_TUPLE:
        return load(v + L.TUPLE_LEN)
    if tag == L.TAG_DICT:
        return load(v + L.DICT_LEN)
    if tag == L.TAG_RANGE:
        return load(v + L.RANGE_LEN)
    return 0 - 1


# -- truth ----------------------------------------------------------------------------


def truth(v: int) -> int:
    """1 if ``v`` is true, else 0."""
    if v & 1:
        return v != 1
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_NONE:
        return 0
    if tag == L.TAG_BOOL:
        return v == L.TRUE_ADDRESS
    if tag == L.TAG_BIGINT:
        return 1
    if tag == L.TAG_FLOAT:
        return float_truth(v)
    n = length_of(v)
    if n == 0 - 1:
        return 1
    return n != 0


def float_truth(v: int) -> int:
    return (load(v + 8) << 1) != 0


# -- equality and order ---------------------------------------------------------------
#
# Go compares containers item by item, however deeply they nest, up to a limit: a
# comparison that reaches items nested COMPARE_DEPTH deep fails (with ``comparison
# exceeded maximum recursion depth``), even when the containers are one and the same.
# The comparisons below answer FAILED rather than raising, so that ``sorted`` can carry
# on as Go's does and report the last failure; the callers raise.

#: How deeply containers may nest in a comparison (Go's ``CompareLimit``).
COMPARE_DEPTH: Final = 10
#: What a comparison answers when it cannot be made (an order or an equality).
FAILED: Final = 2
#: What ``dict_find`` answers when comparing the key with a key of the dict failed.
LOOKUP_FAILED: Final = 1

# list, tuple and dict are the tags of containers: ``tag - TAG_LIST < 3``
assert L.TAG_TUPLE == L.TAG_LIST + 1 and L.TAG_DICT == L.TAG_LIST + 2

#: The two values a failed comparison could not order (both 0: nested too deeply).
_failed_left = Global(__name__)
_failed_right = Global(__name__)


def equal(a: int, b: int) -> int:
    """1 if ``a == b`` (Go's ``Equal``); an error for containers nested too deeply."""
    if FLOATS and is_float(a) and is_float(b):  # two floats come first
        return f64_order(load(a + L.FLOAT_BITS), load(b + L.FLOAT_BITS)) == 0
    if a == b:
        if a & 1:
            return 1
        if (load(a) & L.TAG_MASK) - L.TAG_LIST >= 3:
            return 1  # the same value, not a container
    elif (a | b) & 1:
        if FLOATS:
            return float_equal_small(a, b)
        return 0  # a small int equals only itself: every int that fits is small
    tag = load(a) & L.TAG_MASK
    if tag != (load(b) & L.TAG_MASK):
        if FLOATS:
            return float_equal(a, b)
        return 0
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return bytes_equal(a, b)
    if tag - L.TAG_LIST < 3:
        result = equal_within(a, b, COMPARE_DEPTH)
        if result == FAILED:
            error_compare_depth(0)
        return result
    return scalars_equal(a, b, tag)


def equal_in(a: int, b: int, builtin: int) -> int:
    """``equal`` for a builtin: its error says ``NAME: comparison exceeded ...``."""
    if (a | b) & 1:
        if FLOATS and a != b:
            return float_equal_small(a, b)
        return a == b
    result = equal_within(a, b, COMPARE_DEPTH)
    if result == FAILED:
        error_compare_depth(builtin)
    return result


def equal_within(a: int, b: int, depth: int) -> int:
    """1 or 0 as ``a == b``, comparing containers at most ``depth`` levels down (Go's
    ``EqualDepth``), or FAILED."""
    if depth == 0:
        return comparison_failed(0, 0)
    if a == b:
        if a & 1:
            return 1
        if (load(a) & L.TAG_MASK) - L.TAG_LIST >= 3:
            return 1
    elif (a | b) & 1:
        if FLOATS:
            return float_equal_small(a, b)
        return 0
    tag = load(a) & L.TAG_MASK
    if tag != (load(b) & L.TAG_MASK):
        if FLOATS:
            return float_equal(a, b)
        return 0
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return bytes_equal(a, b)
    if tag == L.TAG_LIST:
        return items_equal(
            load(a + L.LIST_ITEMS),
            load(a + L.LIST_LEN),
            load(b + L.LIST_ITEMS),
            load(b + L.LIST_LEN),
            depth,
        )
    if tag == L.TAG_TUPLE:
        return items_equal(
            a + L.TUPLE_ITEMS,
            load(a + L.TUPLE_LEN),
            b + L.TUPLE_ITEMS,
            load(b + L.TUPLE_LEN),
            depth,
        )
    if tag == L.TAG_DICT:
        return dict_equal(a, b, depth)
    return scalars_equal(a, b, tag)


def scalars_equal(a: int, b: int, tag: int) -> int:
    """Two distinct objects of type ``tag`` that are neither strings nor containers."""
    if tag == L.TAG_BIGINT:
        return big_equal(a, b)
    if tag == L.TAG_RANGE:
        return range_equal(a, b)
    if tag == L.TAG_STRING_ELEMS:
        # Go compares these views as plain structs: the same kind of view of equal strings
        if load(a + L.ELEMS_KIND) != load(b + L.ELEMS_KIND):
            return 0
        return bytes_equal(load(a + L.ELEMS_STRING), load(b + L.ELEMS_STRING))
    if FLOATS and tag == L.TAG_FLOAT:
        return float_equal(a, b)
    return 0


def bytes_equal(a: int, b: int) -> int:
    """Two str (or two bytes) objects with the same bytes, compared a word at a time
    (an object's last word is whole: objects are 8-aligned)."""
    n = load(a + L.STR_LEN)
    if n != load(b + L.STR_LEN):
        return 0
    p = a + L.STR_DATA
    q = b + L.STR_DATA
    end = p + (n & ~7)
    while p < end:
        if load(p) != load(q):
            return 0
        p += 8
        q += 8
    rest = n & 7
    if rest == 0:
        return 1
    return ((load(p) ^ load(q)) & ((1 << (rest << 3)) - 1)) == 0


def memory_equal(p: int, q: int, n: int) -> int:
    i = 0
    while i + 8 <= n:
        if load(p + i) != load(q + i):
            return 0
        i += 8
    while i < n:
        if loadb(p + i) != loadb(q + i):
            return 0
        i += 1
    return 1


def items_equal(p: int, n: int, q: int, m: int, depth: int) -> int:
    """The items of two lists or tuples at ``depth``: 1, 0 or FAILED."""
    if n != m:
        return 0
    if n == 0:
        return 1
    if depth == 1:
        return comparison_failed(0, 0)  # the items would be compared at depth 0
    i = 0
    while i < n:
        x = load(p + 8 * i)
        y = load(q + 8 * i)
        if x != y or (x & 1) == 0:
            if (x | y) & 1:
                if FLOATS and float_equal_small(x, y):
                    i += 1
                    continue
                return 0
            result = equal_within(x, y, depth - 1)
            if result != 1:
                return result
        i += 1
    return 1


def range_equal(a: int, b: int) -> int:
    n = load(a + L.RANGE_LEN)
    if n != load(b + L.RANGE_LEN):
        return 0
    if n == 0:
        return 1
    if load(a + L.RANGE_START) != load(b + L.RANGE_START):
        return 0
    if n == 1:
        return 1
    return load(a + L.RANGE_STEP) == load(b + L.RANGE_STEP)


def compare(a: int, b: int, op: int) -> int:
    """``a < b`` (op 0), ``<=`` (1), ``>`` (2), ``>=`` (3): 1 or 0."""
    if FLOATS and is_float(a) and is_float(b):  # two floats come first
        order = f64_order(load(a + L.FLOAT_BITS), load(b + L.FLOAT_BITS))
    else:
        order = three_way(a, b, op)
    if op == 0:
        return order == 0 - 1
    if op == 1:
        return order != 1
    if op == 2:
        return order == 1
    return order != 0 - 1


def three_way(a: int, b: int, op: int) -> int:
    """-1, 0 or 1 as ``a`` orders before, with or after ``b``; an error for values that
    have no order (``op`` names the comparison for the message)."""
    order = order_within(a, b, COMPARE_DEPTH)
    if order == FAILED:
        error(comparison_failure(op), 0)
    return order


def order_within(a: int, b: int, depth: int) -> int:
    """-1, 0 or 1 as ``a`` orders before, with or after ``b``, comparing containers at
    most ``depth`` levels down (Go's ``CompareDepth``); FAILED for values without an
    order (see ``comparison_failure``)."""
    if depth == 0:
        return comparison_failed(0, 0)
    if a & b & 1:
        if a == b:
            return 0
        if slt_words(a, b):
            return 0 - 1
        return 1
    ta = tag_of(a)
    tb = tag_of(b)
    if ta != tb:
        if FLOATS and floats_involved(a, b):
            return float_order(a, b)
        return comparison_failed(a, b)
    if ta == L.TAG_STRING or ta == L.TAG_BYTES:
        return bytes_compare(a, b)
    if ta == L.TAG_INT:
        return big_compare(a, b)
    if ta == L.TAG_LIST:
        return items_order(
            load(a + L.LIST_ITEMS),
            load(a + L.LIST_LEN),
            load(b + L.LIST_ITEMS),
            load(b + L.LIST_LEN),
            depth,
        )
    if ta == L.TAG_TUPLE:
        return items_order(
            a + L.TUPLE_ITEMS,
            load(a + L.TUPLE_LEN),
            b + L.TUPLE_ITEMS,
            load(b + L.TUPLE_LEN),
            depth,
        )
    if ta == L.TAG_BOOL:
        if a == b:
            return 0
        if a == L.FALSE_ADDRESS:
            return 0 - 1
        return 1
    if FLOATS and ta == L.TAG_FLOAT:
        return float_order(a, b)
    return comparison_failed(a, b)


def items_order(p: int, n: int, q: int, m: int, depth: int) -> int:
    """The order of two lists or tuples by their first differing items, then lengths."""
    common = n
    if m < n:
        common = m
    if common > 0 and depth == 1:
        return comparison_failed(0, 0)
    i = 0
    while i < common:
        x = load(p + 8 * i)
        y = load(q + 8 * i)
        if x != y or (x & 1) == 0:
            same = equal_within(x, y, depth - 1)
            if same == FAILED:
                return FAILED
            if same == 0:
                return order_within(x, y, depth - 1)
        i += 1
    if n == m:
        return 0
    if n < m:
        return 0 - 1
    return 1


def comparison_failed(a: int, b: int) -> int:
    """Note the values a comparison could not order (0, 0: nested too deeply)."""
    _failed_left.value = a
    _failed_right.value = b
    return FAILED


@cold
def comparison_failure(op: int) -> int:
    """The message for the comparison that last failed, made with operator ``op`` (0
    ``<``, 1 ``<=``, 2 ``>``, 3 ``>=``): ``int < string not implemented``."""
    a = _failed_left.value
    if a == 0:
        return text("comparison exceeded maximum recursion depth")
    symbol = text("<")
    if op == 1:
        symbol = text("<=")
    if op == 2:
        symbol = text(">")
    if op == 3:
        symbol = text(">=")
    buffer = buf_new(64)
    buf_str(buffer, type_name(a))
    buf_str(buffer, text(" "))
    buf_str(buffer, symbol)
    buf_str(buffer, text(" "))
    buf_str(buffer, type_name(_failed_right.value))
    buf_str(buffer, text(" not implemented"))
    return buf_to_string(buffer, L.TAG_STRING)


@noreturn
def error_compare_depth(builtin: int) -> None:
    """``comparison exceeded maximum recursion depth`` (after ``NAME: `` for a builtin)."""
    message = text("comparison exceeded maximum recursion depth")
    if builtin != 0:
        message = prefixed(builtin, message)
    error(message, builtin)


@cold
def prefixed(builtin: int, message: int) -> int:
    """``NAME: message`` (Go's ``nameErr``)."""
    buffer = buf_new(64)
    buf_str(buffer, builtin)
    buf_str(buffer, text(": "))
    buf_str(buffer, message)
    return buf_to_string(buffer, L.TAG_STRING)


def slt_words(a: int, b: int) -> int:
    return (a ^ L.SIGN_BIT) < (b ^ L.SIGN_BIT)


def bytes_compare(a: int, b: int) -> int:
    n = load(a + L.STR_LEN)
    m = load(b + L.STR_LEN)
    shorter = n
    if m < n:
        shorter = m
    p = a + L.STR_DATA
    q = b + L.STR_DATA
    i = 0
    while i + 8 <= shorter and load(p + i) == load(q + i):
        i += 8
    while i < shorter:
        x = loadb(p + i)
        y = loadb(q + i)
        if x != y:
            if x < y:
                return 0 - 1
            return 1
        i += 1
    if n == m:
        return 0
    if n < m:
        return 0 - 1
    return 1


# -- hashing --------------------------------------------------------------------------
#
# Hashes are never observed (a dict iterates in insertion order), so they only need to
# be cheap and spread well; equal values hash equally, and no hash is 0.

#: The value whose type made the last hash fail (a list inside a tuple, say).
_unhashable = Global(__name__)


def hash_value(v: int) -> int:
    """The hash dicts use; an error for an unhashable value."""
    return hash_key(v, 0)


def hash_key(v: int, builtin: int) -> int:
    """The hash dicts use; an error for an unhashable value, which says ``NAME:
    unhashable type: list`` when ``builtin`` names the builtin that hashed."""
    if v & 1:
        x = v * 0x9E3779B97F4A7C15
        return x ^ (x >> 32)
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        h = load(v) >> L.STR_HASH_SHIFT
        if h != 0:
            return h
        return string_hash(v)
    if FLOATS and tag == L.TAG_FLOAT:
        return float_hash(v, 0)
    h = hash_object(v)
    if h == 0:
        message = unhashable_message()
        if builtin != 0:
            message = prefixed(builtin, message)
        error(message, builtin)
    return h


def hash_soft(v: int) -> int:
    """The hash of ``v``, or 0 if it has none."""
    if v & 1:
        return int_hash(v)
    if FLOATS and is_float(v):
        return float_hash(v, 0)
    return hash_object(v)


def int_hash(v: int) -> int:
    """The hash of a small int: a multiplication (a bijection, so never 0 for the odd
    word of a small int), its high half folded into the low half that indexes dicts."""
    x = v * 0x9E3779B97F4A7C15
    return x ^ (x >> 32)


def hash_object(v: int) -> int:
    """The hash of any value but a small int or a string, or 0 if it has none."""
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return string_hash(v)
    if tag == L.TAG_NONE or tag == L.TAG_BOOL or tag == L.TAG_FUNCTION or tag == L.TAG_BUILTIN:
        return mix(v)
    if tag == L.TAG_TUPLE:
        h = 0x345678
        n = load(v + L.TUPLE_LEN)
        i = 0
        while i < n:
            x = load(v + L.TUPLE_ITEMS + 8 * i)
            if x & 1:
                h = mix(h ^ x)
            else:
                item = hash_object(x)
                if item == 0:
                    return 0
                h = mix(h ^ item)
            i += 1
        return h | 1
    if tag == L.TAG_BIGINT:
        return big_hash(v) | 1
    if FLOATS and tag == L.TAG_FLOAT:
        return float_hash(v, 1)  # as a tuple's item: a small int's word
    _unhashable.value = v
    return 0


@cold
def unhashable_message() -> int:
    """``unhashable type: list`` (and dict), ``unhashable: range`` (and the others), as
    Go words them, for the value that made the last hash fail."""
    v = _unhashable.value
    tag = load(v) & L.TAG_MASK
    buffer = buf_new(32)
    if tag == L.TAG_LIST or tag == L.TAG_DICT:
        buf_str(buffer, text("unhashable type: "))
    else:
        buf_str(buffer, text("unhashable: "))
    buf_str(buffer, type_name(v))
    return buf_to_string(buffer, L.TAG_STRING)


def mix(x: int) -> int:
    """A cheap 64-bit mixer (two multiply-xorshift rounds); a bijection, so only 0 mixes
    to 0."""
    x = (x ^ (x >> 31)) * 0x7FB5D329728EA185
    x = (x ^ (x >> 27)) * 0x81DADEF4BC2DD44D
    return x ^ (x >> 33)


def string_hash(s: int) -> int:
    """FNV-1a over the bytes a word at a time, then mixed (so that the low bits, which
    index a dict, depend on every byte); cached in the string (never 0, which means not
    yet computed): 48 bits, kept in the header (see ``layout.STR_HASH_SHIFT``)."""
    header = load(s)
    h = header >> L.STR_HASH_SHIFT
    if h != 0:
        return h
    n = load(s + L.STR_LEN)
    p = s + L.STR_DATA
    end = p + (n & ~7)
    h = 0xCBF29CE484222325 ^ n
    while p < end:
        h = (h ^ load(p)) * 0x100000001B3
        p += 8
    rest = n & 7
    if rest != 0:
        h = (h ^ (load(p) & ((1 << (rest << 3)) - 1))) * 0x100000001B3
    h = (mix(h) & L.STR_HASH_MASK) | 1
    store(s, header | (h << L.STR_HASH_SHIFT))
    return h


def big_hash(v: int) -> int:
    """The hash of a big int: its magnitude's 32-bit halves (without a leading zero
    half) mixed in after its sign and their count, low half first.  Floats hash
    integral values the same way (``float_hash``)."""
    info = load(v + L.BIGINT_INFO)
    n = info & L.BIGINT_COUNT_MASK
    p = v + L.BIGINT_LIMBS
    end = p + 8 * n
    halves = n << 1
    if (load(end - 8) >> 32) == 0:
        halves -= 1
    h = mix(info - n + halves)
    mask = L.HALF_MASK
    shift = 32
    while p < end:
        x = load(p)
        h = mix(h ^ (x & mask))
        p += 8
        if p < end or (x >> shift) != 0:
            h = mix(h ^ (x >> shift))
    return h


def big_equal(a: int, b: int) -> int:
    """Two big ints (canonical: equal values have equal limbs)."""
    info = load(a + L.BIGINT_INFO)
    if info != load(b + L.BIGINT_INFO):
        return 0
    return memory_equal(a + L.BIGINT_LIMBS, b + L.BIGINT_LIMBS, 8 * (info & L.BIGINT_COUNT_MASK))


def big_compare(a: int, b: int) -> int:
    """-1, 0, 1 for two ints, small or big."""
    sa = int_sign(a)
    sb = int_sign(b)
    if sa != sb:
        if slt_words(sa, sb):
            return 0 - 1
        return 1
    if a & 1:
        if b & 1:
            if a == b:
                return 0
            if slt_words(a, b):
                return 0 - 1
            return 1
        # a small, b big of the same sign: |b| is larger
        if sa == 1:
            return 0 - 1
        return 1
    if b & 1:
        if sa == 1:
            return 1
        return 0 - 1
    order = mag_compare(
        a + L.BIGINT_LIMBS,
        load(a + L.BIGINT_INFO) & L.BIGINT_COUNT_MASK,
        b + L.BIGINT_LIMBS,
        load(b + L.BIGINT_INFO) & L.BIGINT_COUNT_MASK,
    )
    if sa == 1:
        return order
    return 0 - order


def int_sign(v: int) -> int:
    """1 for a non-negative int, -1 for a negative one (as words)."""
    if v & 1:
        if v < L.SIGN_BIT:
            return 1
        return 0 - 1
    if (load(v + L.BIGINT_INFO) >> 32) != 0:
        return 0 - 1
    return 1


def dict_equal(a: int, b: int, depth: int) -> int:
    """Two dicts with the same keys and equal values at ``depth``: 1, 0 or FAILED."""
    if load(a + L.DICT_LEN) != load(b + L.DICT_LEN):
        return 0
    entries = load(a + L.DICT_ENTRIES)
    used = load(a + L.DICT_USED)
    i = 0
    while i < used:
        e = entries + L.DICT_ENTRY_SIZE * i
        key = load(e + 8)
        if key != 0:
            other = dict_find(b, key, load(e))
            if other == 0 or other == LOOKUP_FAILED:
                return 0  # Go's lookup here takes a failed comparison for a missing key
            if depth == 1:
                return comparison_failed(0, 0)
            x = load(e + 16)
            y = load(other + 16)
            if x != y or (x & 1) == 0:
                if (x | y) & 1:
                    if FLOATS and float_equal_small(x, y):
                        i += 1
                        continue
                    return 0
                result = equal_within(x, y, depth - 1)
                if result != 1:
                    return result
        i += 1
    return 1


def dict_lookup(d: int, key: int) -> int:
    """The value of ``key`` in dict ``d``, or 0 (an error if ``key`` is unhashable)."""
    e = dict_find(d, key, hash_key(key, 0))
    if e > LOOKUP_FAILED:
        return load(e + 16)
    if e == LOOKUP_FAILED:
        error_compare_depth(0)
    return 0


def dict_find(d: int, key: int, h: int) -> int:
    """The address of ``key`` 's entry in dict ``d`` (``h`` its hash), 0 if it has none,
    or LOOKUP_FAILED if comparing ``key`` with a key of ``d`` failed (tuples nested too
    deeply)."""
    entries = load(d + L.DICT_ENTRIES)
    index = load(d + L.DICT_INDEX)
    if index == 0:  # a small dict: scan its entries
        used = load(d + L.DICT_USED)
        e = entries
        end = entries + L.DICT_ENTRY_SIZE * used
        while e < end:
            if load(e) == h:
                k = load(e + 8)
                if k == key and (key & 1 or (load(key) & L.TAG_MASK) != L.TAG_TUPLE):
                    return e
                if k & 1 == 0 and key & 1 == 0 and k != 0:
                    same = keys_equal(k, key)
                    if same == 1:
                        return e
                    if same == FAILED:
                        return LOOKUP_FAILED
                if FLOATS and (k ^ key) & 1 and k != 0 and float_equal_small(k, key):
                    return e
            e += L.DICT_ENTRY_SIZE
        return 0
    mask = load(d + L.DICT_MASK)
    slot = h & mask
    perturb = h
    while True:
        number = load(index + 8 * slot)
        if number == 0:
            return 0
        e = entries + L.DICT_ENTRY_SIZE * (number - 1)
        if load(e) == h:
            k = load(e + 8)
            if k == key and (key & 1 or (load(key) & L.TAG_MASK) != L.TAG_TUPLE):
                return e
            if k & 1 == 0 and key & 1 == 0 and k != 0:
                same = keys_equal(k, key)
                if same == 1:
                    return e
                if same == FAILED:
                    return LOOKUP_FAILED
            if FLOATS and (k ^ key) & 1 and k != 0 and float_equal_small(k, key):
                return e
        perturb = perturb >> 5
        slot = (slot * 5 + 1 + perturb) & mask


def keys_equal(a: int, b: int) -> int:
    """Two hashable objects with the same hash: 1 or 0 as they are equal, or FAILED for
    tuples nested too deeply.  (Hashable values hold no lists or dicts, so this never
    reaches ``dict_equal``, which calls ``dict_find``.)"""
    tag = load(a) & L.TAG_MASK
    if tag != (load(b) & L.TAG_MASK):
        if FLOATS:
            return float_equal(a, b)
        return 0
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return bytes_equal(a, b)
    if tag == L.TAG_TUPLE:
        return tuple_keys_equal(a, b, COMPARE_DEPTH)
    if tag == L.TAG_BIGINT:
        return big_equal(a, b)
    if FLOATS and tag == L.TAG_FLOAT:
        return float_equal(a, b)
    return 0


def tuple_keys_equal(a: int, b: int, depth: int) -> int:
    """``items_equal`` for two tuples of hashable values (see ``keys_equal``)."""
    n = load(a + L.TUPLE_LEN)
    if n != load(b + L.TUPLE_LEN):
        return 0
    if n == 0:
        return 1
    if depth == 1:
        return comparison_failed(0, 0)
    i = 0
    while i < n:
        x = load(a + L.TUPLE_ITEMS + 8 * i)
        y = load(b + L.TUPLE_ITEMS + 8 * i)
        i += 1
        if x & 1:
            if x != y:
                if FLOATS and float_equal_small(x, y):
                    continue
                return 0
            continue
        if y & 1:
            if FLOATS and float_equal_small(x, y):
                continue
            return 0
        tag = load(x) & L.TAG_MASK
        if tag == L.TAG_TUPLE:
            if (load(y) & L.TAG_MASK) != L.TAG_TUPLE:
                return 0
            same = tuple_keys_equal(x, y, depth - 1)
            if same != 1:
                return same
        elif x != y:
            if tag != (load(y) & L.TAG_MASK):
                if FLOATS and float_equal(x, y):
                    continue
                return 0
            if tag == L.TAG_STRING or tag == L.TAG_BYTES:
                if bytes_equal(x, y) == 0:
                    return 0
            elif tag == L.TAG_BIGINT:
                if big_equal(x, y) == 0:
                    return 0
            else:
                if FLOATS and tag == L.TAG_FLOAT and float_equal(x, y):
                    continue
                return 0  # distinct None, bool or functions
    return 1


def store_word(address: int, value: int) -> None:
    store(address, value)


def new_elems(s: int, kind: int) -> int:
    """The view ``s.elems()`` (and its siblings, by ``kind``, see ``layout.ELEMS_*``)."""
    v = alloc_object(L.TAG_STRING_ELEMS, L.ELEMS_SIZE)
    store(v + L.ELEMS_STRING, s)
    store(v + L.ELEMS_KIND, kind)
    return v
