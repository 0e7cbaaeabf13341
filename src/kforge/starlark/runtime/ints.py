"""Integer arithmetic and the dispatch of every binary and unary operator.

Small ints are handled here; anything that leaves the small range goes to the
arbitrary-precision functions of :mod:`kforge.starlark.runtime.bigint`, which take
and return int values of either kind and always return the canonical form (a small
int whenever the value fits).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.floats import OP_ADD, OP_DIV, OP_FLOORDIV, OP_MOD, OP_MUL, OP_SUB
from kforge.starlark.runtime.intrinsics import FLOATS, inline, load, sar, slt, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import (
        big_add,
        big_and,
        big_floordiv,
        big_invert,
        big_lshift,
        big_mod,
        big_mul,
        big_neg,
        big_or,
        big_rshift,
        big_sub,
        big_xor,
        int_fits_int32,
        int_from_word,
    )
    from kforge.starlark.runtime.core import error
    from kforge.starlark.runtime.dicts import check_dict_mutable, dict_union, dict_update_from
    from kforge.starlark.runtime.floats import (
        float_binary,
        float_negate,
        floats_involved,
    )
    from kforge.starlark.runtime.format import error_with_value
    from kforge.starlark.runtime.interpolate import string_interpolate
    from kforge.starlark.runtime.lists import (
        check_list_mutable,
        list_concat,
        list_repeat,
        tuple_concat,
        tuple_repeat,
    )
    from kforge.starlark.runtime.sequences import is_iterable, list_extend_iterable
    from kforge.starlark.runtime.strings import string_concat, string_repeat
    from kforge.starlark.runtime.values import error_binary, error_unary, error_with_type, tag_of

#: Magnitudes below this multiply without leaving a machine word.
_HALF: Final = 1 << 31
#: The magnitude of the most negative small int, one more than the largest.
_SMALL_LIMIT: Final = 1 << 62


@inline
def both_ints(a: int, b: int) -> int:
    """1 if ``a`` and ``b`` are ints of either kind: the test every arithmetic operator
    makes first, in place (compiled code has already taken two small ints, so the
    operands here are mostly big ones, or not ints at all)."""
    if (a & 1) == 0 and (load(a) & L.TAG_MASK) != L.TAG_BIGINT:
        return 0
    if (b & 1) == 0 and (load(b) & L.TAG_MASK) != L.TAG_BIGINT:
        return 0
    return 1


def add(a: int, b: int) -> int:
    """``a + b``: ints, str, bytes, list, tuple (and floats)."""
    if FLOATS and floats_involved(a, b):  # a float and a number: floats first
        return float_binary(OP_ADD, a, b)
    if both_ints(a, b):
        if a & b & 1:  # both small
            return int_from_word(sar(a, 1) + sar(b, 1))
        return big_add(a, b)
    ta = tag_of(a)
    if ta == tag_of(b):
        if ta == L.TAG_STRING or ta == L.TAG_BYTES:
            return string_concat(a, b)
        if ta == L.TAG_LIST:
            return list_concat(a, b)
        if ta == L.TAG_TUPLE:
            return tuple_concat(a, b)
    error_binary(text("+"), a, b)
    return 0


def inplace_add(a: int, b: int) -> int:
    """``a += b``: a list is extended in place by any iterable; else as ``a + b``."""
    if tag_of(a) == L.TAG_LIST and is_iterable(b):
        check_list_mutable(a, text("apply += to"))
        list_extend_iterable(a, b)
        return a
    return add(a, b)


def inplace_bitor(a: int, b: int) -> int:
    """``a |= b``: a dict is updated in place by a dict; else as ``a | b``."""
    if tag_of(a) == L.TAG_DICT and tag_of(b) == L.TAG_DICT:
        check_dict_mutable(a, text("apply |= to"))
        dict_update_from(a, b)
        return a
    return bitor(a, b)


def sub(a: int, b: int) -> int:
    if FLOATS and floats_involved(a, b):  # a float and a number: floats first
        return float_binary(OP_SUB, a, b)
    if both_ints(a, b):
        if a & b & 1:  # both small
            return int_from_word(sar(a, 1) - sar(b, 1))
        return big_sub(a, b)
    error_binary(text("-"), a, b)
    return 0


def mul(a: int, b: int) -> int:
    """``a * b``: ints; a str, bytes, list or tuple repeated by an int (and floats)."""
    if FLOATS and floats_involved(a, b):  # a float and a number: floats first
        return float_binary(OP_MUL, a, b)
    if both_ints(a, b):
        if a & b & 1:  # both small
            return small_mul(a, b)
        return big_mul(a, b)
    ta = tag_of(a)
    tb = tag_of(b)
    if ta == L.TAG_INT:
        return repeat(b, a, a, b)
    if tb == L.TAG_INT:
        return repeat(a, b, a, b)
    error_binary(text("*"), a, b)
    return 0


def small_mul(a: int, b: int) -> int:
    """``a * b`` for two small ints: a small int when the product fits one, told
    exactly from the magnitudes (the machine's overflow flag cannot be read); a big
    int only when it does not."""
    x = sar(a, 1)
    y = sar(b, 1)
    mx = x
    if slt(x, 0):
        mx = 0 - x
    my = y
    if slt(y, 0):
        my = 0 - y
    # below 2**32 each, the magnitudes' product fits a word; else ask a division
    if (mx | my) >= 2 * _HALF and my != 0 and mx > (0 - 1) // my:
        return big_mul(a, b)
    p = mx * my
    if slt(x ^ y, 0):
        if p <= _SMALL_LIMIT:  # -2**62 is a small int
            return small_word(0 - p)
    elif p < _SMALL_LIMIT:
        return small_word(p)
    return big_mul(a, b)


def repeat(sequence: int, count: int, left: int, right: int) -> int:
    tag = tag_of(sequence)
    if tag == L.TAG_STRING or tag == L.TAG_BYTES:
        return string_repeat(sequence, count)
    if tag == L.TAG_LIST:
        return list_repeat(sequence, count)
    if tag == L.TAG_TUPLE:
        return tuple_repeat(sequence, count)
    error_binary(text("*"), left, right)
    return 0


def small_word(n: int) -> int:
    """The word of the small int ``n`` (which fits)."""
    return (n << 1) | 1


def floordiv(a: int, b: int) -> int:
    if FLOATS and floats_involved(a, b):  # a float and a number: floats first
        return float_binary(OP_FLOORDIV, a, b)
    if both_ints(a, b):
        if b == 1:
            error(text("floored division by zero"), 0)
        if a & b & 1:  # both small
            return int_from_word(floor_div_words(sar(a, 1), sar(b, 1)))
        return big_floordiv(a, b)
    error_binary(text("//"), a, b)
    return 0


def mod(a: int, b: int) -> int:
    """``a % b``: the floored remainder of ints, or ``str % args`` formatting."""
    if FLOATS and floats_involved(a, b):  # a float and a number: floats first
        return float_binary(OP_MOD, a, b)
    if both_ints(a, b):
        if b == 1:
            error(text("integer modulo by zero"), 0)
        if a & b & 1:  # both small
            x = sar(a, 1)
            y = sar(b, 1)
            return small_word(x - floor_div_words(x, y) * y)
        return big_mod(a, b)
    if tag_of(a) == L.TAG_STRING:
        return string_interpolate(a, b)
    error_binary(text("%"), a, b)
    return 0


def floor_div_words(x: int, y: int) -> int:
    """Floored division of signed machine words (``y != 0``; no overflow for small ints)."""
    ux = x
    uy = y
    negative = 0
    if slt(x, 0):
        ux = 0 - x
        negative = 1
    if slt(y, 0):
        uy = 0 - y
        negative = negative ^ 1
    q = ux // uy
    if negative:
        if q * uy != ux:
            q += 1
        return 0 - q
    return q


def truediv(a: int, b: int) -> int:
    """``a / b``: always a float (only a program with floats divides so)."""
    if FLOATS and ((tag_of(a) == L.TAG_INT and tag_of(b) == L.TAG_INT) or floats_involved(a, b)):
        return float_binary(OP_DIV, a, b)
    error_binary(text("/"), a, b)
    return 0


def bitand(a: int, b: int) -> int:
    if both_ints(a, b):
        if a & b & 1:  # both small
            return a & b
        return big_and(a, b)
    error_binary(text("&"), a, b)
    return 0


def bitor(a: int, b: int) -> int:
    if both_ints(a, b):
        if a & b & 1:  # both small
            return a | b
        return big_or(a, b)
    if tag_of(a) == L.TAG_DICT and tag_of(b) == L.TAG_DICT:
        return dict_union(a, b)
    error_binary(text("|"), a, b)
    return 0


def bitxor(a: int, b: int) -> int:
    if both_ints(a, b):
        if a & b & 1:  # both small
            return (a ^ b) | 1
        return big_xor(a, b)
    error_binary(text("^"), a, b)
    return 0


def shift_count(b: int, left: int) -> int:
    """The count of ``<<`` (``left``) or ``>>`` as a machine word, by Go's rules: an int
    in the signed 32-bit range, not negative, and below 512 for ``<<``."""
    if b & 1 and b < (512 << 1):  # a small int from 0 to 511 (a negative word is larger)
        return b >> 1
    if tag_of(b) != L.TAG_INT:
        error_with_type(text("got "), b, text(", want int"), 0)
    if int_fits_int32(b) == 0:
        error_with_value(text(""), b, text(" out of range"))
    count = sar(b, 1)
    if slt(count, 0):
        error_with_value(text("negative shift count: "), b, text(""))
    if left and count >= 512:
        error_with_value(text("shift count too large: "), b, text(""))
    return count


def lshift(a: int, b: int) -> int:
    if tag_of(a) == L.TAG_INT:
        count = shift_count(b, 1)
        if a & 1 and count < 62:
            x = sar(a, 1)
            shifted = x << count
            if sar(shifted, count) == x:
                return int_from_word(shifted)
        return big_lshift(a, count)
    error_binary(text("<<"), a, b)
    return 0


def rshift(a: int, b: int) -> int:
    if tag_of(a) == L.TAG_INT:
        count = shift_count(b, 0)
        if a & 1:
            if count > 62:
                count = 62  # a small int shifted that far is 0 or -1 already
            return small_word(sar(sar(a, 1), count))
        return big_rshift(a, count)
    error_binary(text(">>"), a, b)
    return 0


def neg(a: int) -> int:
    if a & 1:
        return int_from_word(0 - sar(a, 1))
    if tag_of(a) == L.TAG_BIGINT:
        return big_neg(a)
    if FLOATS and tag_of(a) == L.TAG_FLOAT:
        return float_negate(a)
    error_unary(text("-"), a)
    return 0


def pos(a: int) -> int:
    if tag_of(a) == L.TAG_INT:
        return a
    if FLOATS and tag_of(a) == L.TAG_FLOAT:
        return a
    error_unary(text("+"), a)
    return 0


def invert(a: int) -> int:
    if a & 1:
        return a ^ 0xFFFFFFFFFFFFFFFE
    if tag_of(a) == L.TAG_BIGINT:
        return big_invert(a)
    error_unary(text("~"), a)
    return 0
