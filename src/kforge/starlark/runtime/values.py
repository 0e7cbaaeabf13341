"""What every value can be asked: its type, truth, equality, order, hash; indexing,
slicing, attributes, unpacking and iteration.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, loadb, store

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import mag_compare
    from kforge.starlark.runtime.core import alloc_object, buf_new, buf_str, buf_to_string, error


def tag_of(v: int) -> int:
    """The type tag of a value; :data:`~kforge.starlark.layout.TAG_INT` for any int."""
    if v & 1:
        return L.TAG_INT
    return load(v) & L.TAG_MASK


def is_int(v: int) -> int:
    if v & 1:
        return 1
    return (load(v) & L.TAG_MASK) == L.TAG_BIGINT


def is_string(v: int) -> int:
    if v & 1:
        return 0
    return (load(v) & L.TAG_MASK) == L.TAG_STRING


def type_name(v: int) -> int:
    """The name ``type(v)`` gives, as a str."""
    tag = tag_of(v)
    if tag == L.TAG_INT:
        return "int"
    if tag == L.TAG_STRING:
        return "string"
    if tag == L.TAG_NONE:
        return "NoneType"
    if tag == L.TAG_BOOL:
        return "bool"
    if tag == L.TAG_LIST:
        return "list"
    if tag == L.TAG_TUPLE:
        return "tuple"
    if tag == L.TAG_DICT:
        return "dict"
    if tag == L.TAG_BYTES:
        return "bytes"
    if tag == L.TAG_RANGE:
        return "range"
    if tag == L.TAG_FUNCTION:
        return "function"
    if tag == L.TAG_BUILTIN:
        return "builtin_function_or_method"
    if tag == L.TAG_MODULE:
        return "module"
    if tag == L.TAG_FLOAT:
        return "float"
    if tag == L.TAG_STRING_ELEMS:
        return elems_type_name(v)
    return "unknown"


def elems_type_name(v: int) -> int:
    """Go names the views by their kind of item, not by the method that made them."""
    kind = load(v + L.ELEMS_KIND)
    if kind == L.ELEMS_CODEPOINTS:
        return "string.codepoints"
    if kind == L.ELEMS_CODEPOINT_ORDS:
        return "string.codepoints"
    if kind == L.ELEMS_BYTES_ELEMS:
        return "bytes.elems"
    return "string.elems"


# -- errors that name types -----------------------------------------------------------


def error_binary(op: int, a: int, b: int) -> None:
    """``unknown binary op: T op U`` (``op`` is a str)."""
    buffer = buf_new(64)
    buf_str(buffer, "unknown binary op: ")
    buf_str(buffer, type_name(a))
    buf_str(buffer, " ")
    buf_str(buffer, op)
    buf_str(buffer, " ")
    buf_str(buffer, type_name(b))
    error(buf_to_string(buffer, L.TAG_STRING), 0)


def error_unary(op: int, a: int) -> None:
    buffer = buf_new(64)
    buf_str(buffer, "unknown unary op: ")
    buf_str(buffer, op)
    buf_str(buffer, " ")
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
    buf_str(buffer, " has no .")
    buf_str(buffer, name)
    buf_str(buffer, " field or method")
    error(buf_to_string(buffer, L.TAG_STRING), 0)


# -- small helpers on words -----------------------------------------------------------


def small(n: int) -> int:
    """The word of the small int ``n`` (a signed machine word that fits)."""
    return (n << 1) | 1


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


def equal(a: int, b: int) -> int:
    """1 if ``a == b``."""
    if a == b:
        return 1
    if (a | b) & 1:
        return 0  # a small int equals only itself: every int that fits is small
    ta = load(a) & L.TAG_MASK
    tb = load(b) & L.TAG_MASK
    if ta != tb:
        return 0
    if ta == L.TAG_STRING or ta == L.TAG_BYTES:
        return bytes_equal(a, b)
    if ta == L.TAG_BIGINT:
        return big_equal(a, b)
    if ta == L.TAG_LIST:
        return items_equal(
            load(a + L.LIST_ITEMS),
            load(a + L.LIST_LEN),
            load(b + L.LIST_ITEMS),
            load(b + L.LIST_LEN),
        )
    if ta == L.TAG_TUPLE:
        return items_equal(
            a + L.TUPLE_ITEMS, load(a + L.TUPLE_LEN), b + L.TUPLE_ITEMS, load(b + L.TUPLE_LEN)
        )
    if ta == L.TAG_DICT:
        return dict_equal(a, b)
    if ta == L.TAG_RANGE:
        return range_equal(a, b)
    if ta == L.TAG_STRING_ELEMS:
        # Go compares these views as plain structs: the same kind over equal strings
        if load(a + L.ELEMS_KIND) != load(b + L.ELEMS_KIND):
            return 0
        return bytes_equal(load(a + L.ELEMS_STRING), load(b + L.ELEMS_STRING))
    return 0


def bytes_equal(a: int, b: int) -> int:
    n = load(a + L.STR_LEN)
    if n != load(b + L.STR_LEN):
        return 0
    return memory_equal(a + L.STR_DATA, b + L.STR_DATA, n)


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


def items_equal(p: int, n: int, q: int, m: int) -> int:
    if n != m:
        return 0
    i = 0
    while i < n:
        x = load(p + 8 * i)
        y = load(q + 8 * i)
        if x != y:
            if equal(x, y) == 0:
                return 0
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
    if a & b & 1:
        if a == b:
            return 0
        if slt_words(a, b):
            return 0 - 1
        return 1
    ta = tag_of(a)
    tb = tag_of(b)
    if ta == L.TAG_INT and tb == L.TAG_INT:
        return big_compare(a, b)
    if ta != tb:
        error_order(a, b, op)
    if ta == L.TAG_STRING or ta == L.TAG_BYTES:
        return bytes_compare(a, b)
    if ta == L.TAG_BOOL:
        if a == b:
            return 0
        if a == L.FALSE_ADDRESS:
            return 0 - 1
        return 1
    if ta == L.TAG_LIST:
        return items_compare(
            load(a + L.LIST_ITEMS),
            load(a + L.LIST_LEN),
            load(b + L.LIST_ITEMS),
            load(b + L.LIST_LEN),
            op,
        )
    if ta == L.TAG_TUPLE:
        return items_compare(
            a + L.TUPLE_ITEMS, load(a + L.TUPLE_LEN), b + L.TUPLE_ITEMS, load(b + L.TUPLE_LEN), op
        )
    error_order(a, b, op)
    return 0


def slt_words(a: int, b: int) -> int:
    return (a ^ L.SIGN_BIT) < (b ^ L.SIGN_BIT)


def error_order(a: int, b: int, op: int) -> None:
    symbol = "<"
    if op == 1:
        symbol = "<="
    if op == 2:
        symbol = ">"
    if op == 3:
        symbol = ">="
    buffer = buf_new(64)
    buf_str(buffer, type_name(a))
    buf_str(buffer, " ")
    buf_str(buffer, symbol)
    buf_str(buffer, " ")
    buf_str(buffer, type_name(b))
    buf_str(buffer, " not implemented")
    error(buf_to_string(buffer, L.TAG_STRING), 0)


def bytes_compare(a: int, b: int) -> int:
    n = load(a + L.STR_LEN)
    m = load(b + L.STR_LEN)
    shorter = n
    if m < n:
        shorter = m
    p = a + L.STR_DATA
    q = b + L.STR_DATA
    i = 0
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


def items_compare(p: int, n: int, q: int, m: int, op: int) -> int:
    i = 0
    while i < n and i < m:
        x = load(p + 8 * i)
        y = load(q + 8 * i)
        if x != y:
            if equal(x, y) == 0:
                return three_way(x, y, op)
        i += 1
    if n == m:
        return 0
    if n < m:
        return 0 - 1
    return 1


# -- hashing --------------------------------------------------------------------------


def hash_value(v: int) -> int:
    """The hash dicts use (any word; equal values hash equally); an error for an
    unhashable value."""
    if v & 1:
        return mix(v)
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return string_hash(v)
    if tag == L.TAG_NONE or tag == L.TAG_BOOL:
        return mix(v)
    if tag == L.TAG_BIGINT:
        return big_hash(v)
    if tag == L.TAG_TUPLE:
        n = load(v + L.TUPLE_LEN)
        h = 0x345678
        i = 0
        while i < n:
            h = mix(h ^ hash_value(load(v + L.TUPLE_ITEMS + 8 * i)))
            i += 1
        return h
    if tag == L.TAG_FUNCTION or tag == L.TAG_BUILTIN or tag == L.TAG_RANGE:
        if tag != L.TAG_RANGE:
            return mix(v)
    if tag == L.TAG_STRING_ELEMS:
        error_with_type("unhashable: ", v, "", 0)
    error_with_type("unhashable type: ", v, "", 0)
    return 0


def mix(x: int) -> int:
    """A cheap 64-bit mixer (two multiply-xorshift rounds)."""
    x = (x ^ (x >> 31)) * 0x7FB5D329728EA185
    x = (x ^ (x >> 27)) * 0x81DADEF4BC2DD44D
    return x ^ (x >> 33)


def string_hash(s: int) -> int:
    """FNV-1a over the bytes, cached in the string (never 0, which means not yet)."""
    h = load(s + L.STR_HASH)
    if h != 0:
        return h
    n = load(s + L.STR_LEN)
    p = s + L.STR_DATA
    h = 0xCBF29CE484222325
    i = 0
    while i < n:
        h = (h ^ loadb(p + i)) * 0x100000001B3
        i += 1
    if h == 0:
        h = 1
    store(s + L.STR_HASH, h)
    return h


def big_hash(v: int) -> int:
    n = load(v + L.BIGINT_INFO)
    h = mix(n)
    count = n & 0xFFFFFFFF
    i = 0
    while i < count:
        h = mix(h ^ load(v + L.BIGINT_LIMBS + 8 * i))
        i += 1
    return h


def big_equal(a: int, b: int) -> int:
    """Two big ints (canonical: equal values have equal limbs)."""
    info = load(a + L.BIGINT_INFO)
    if info != load(b + L.BIGINT_INFO):
        return 0
    return memory_equal(a + L.BIGINT_LIMBS, b + L.BIGINT_LIMBS, 8 * (info & 0xFFFFFFFF))


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
        load(a + L.BIGINT_INFO) & L.LIMB_MASK,
        b + L.BIGINT_LIMBS,
        load(b + L.BIGINT_INFO) & L.LIMB_MASK,
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


def dict_equal(a: int, b: int) -> int:
    if load(a + L.DICT_LEN) != load(b + L.DICT_LEN):
        return 0
    entries = load(a + L.DICT_ENTRIES)
    used = load(a + L.DICT_USED)
    i = 0
    while i < used:
        e = entries + L.DICT_ENTRY_SIZE * i
        key = load(e + 8)
        if key != 0:
            other = dict_lookup(b, key)
            if other == 0:
                return 0
            if equal(load(e + 16), other) == 0:
                return 0
        i += 1
    return 1


def dict_lookup(d: int, key: int) -> int:
    """The value of ``key`` in dict ``d``, or 0."""
    entry = dict_find(d, key, hash_value(key))
    if entry == 0:
        return 0
    return load(entry + 16)


def dict_find(d: int, key: int, h: int) -> int:
    """The address of ``key`` 's entry in dict ``d`` (hash ``h``), or 0."""
    entries = load(d + L.DICT_ENTRIES)
    index = load(d + L.DICT_INDEX)
    if index == 0:  # a small dict: scan its entries
        used = load(d + L.DICT_USED)
        i = 0
        while i < used:
            e = entries + L.DICT_ENTRY_SIZE * i
            if load(e) == h:
                k = load(e + 8)
                if k == key:
                    return e
                if k != 0:
                    if equal(k, key):
                        return e
            i += 1
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
            if k == key:
                return e
            if k != 0:
                if equal(k, key):
                    return e
        perturb = perturb >> 5
        slot = (slot * 5 + 1 + perturb) & mask


def store_word(address: int, value: int) -> None:
    store(address, value)


def new_elems(s: int, kind: int) -> int:
    """The view ``s.elems()`` (and its siblings, by ``kind``, see ``layout.ELEMS_*``)."""
    v = alloc_object(L.TAG_STRING_ELEMS, L.ELEMS_SIZE)
    store(v + L.ELEMS_STRING, s)
    store(v + L.ELEMS_KIND, kind)
    return v
