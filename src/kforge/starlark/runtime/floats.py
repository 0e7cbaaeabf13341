"""Starlark's float type: values, arithmetic with ints and floats, comparison, hashing,
conversions, and the builtins ``float`` and ``abs`` of a float.

A float is a heap object (:data:`~kforge.starlark.layout.TAG_FLOAT`): a header and
the 64 bits of an IEEE 754 double, computed by :mod:`kforge.starlark.runtime.softfloat`.
A float literal is a static object in the data section.

The rules are the Go implementation's: an operation with a float and an int converts
the int to the nearest float first (an error if it is too large for one); ``/`` always
gives a float, ``//`` floors the quotient, ``%`` takes the divisor's sign; floats are
totally ordered with every NaN equal to every other and above +inf, ``-0.0`` equals
``0.0``, and a float compares with an int exactly (a big int included); a float equal
to an int hashes as that int.

Only a program that uses floats reaches this code: the shared runtime reaches it from
``if FLOATS:`` statements only (see :mod:`kforge.starlark.lowlevel`).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    heap_limit,
    heap_pointer,
    inline,
    load,
    sar,
    set_heap_pointer,
    slt,
    store,
    text,
)
from kforge.starlark.runtime.softfloat import NIBBLE_LENGTHS

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import big_lshift, int_from_word
    from kforge.starlark.runtime.core import (
        buf_byte,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        error,
    )
    from kforge.starlark.runtime.float_text import float_parse
    from kforge.starlark.runtime.gc import bump_end
    from kforge.starlark.runtime.generated import gc_alloc
    from kforge.starlark.runtime.ints import add, inplace_add, mul, sub, truediv
    from kforge.starlark.runtime.softfloat import (
        add_fast,
        clz64,
        div_fast,
        f64_add,
        f64_div,
        f64_floor,
        f64_fmod,
        f64_from_top,
        f64_from_word,
        f64_mul,
        f64_order,
        f64_sub,
        f64_trunc,
        is_nan,
        mul_fast,
        sub_fast,
    )
    from kforge.starlark.runtime.values import error_with_type, int_hash, mix, tag_of

SIGN: Final = 1 << 63
INF: Final = 0x7FF0000000000000
#: The exponent bias of doubles.
BIAS: Final = 1023
#: One more than the power of two that 1, 2, 4 and 8 are, four bits for each of 0 to
#: 15 (that of 0 lowest; 0 for the others): a table in a word.
_POWERS_OF_TWO: Final = sum((k + 1) << (4 << k) for k in range(4))
#: The biased exponent of 2**62: a float below it in magnitude truncates to a small int.
_SMALL_EXPONENT: Final = 1023 + 62
#: What every NaN and infinity hashes to (Go's constant).
_NONFINITE_HASH: Final = 1618033

_MASK: Final = L.TAG_MASK
_FLOAT: Final = L.TAG_FLOAT

#: The binary operations of ``float_binary``.
OP_ADD: Final = 0
OP_SUB: Final = 1
OP_MUL: Final = 2
OP_DIV: Final = 3
OP_FLOORDIV: Final = 4
OP_MOD: Final = 5


# -- values ---------------------------------------------------------------------------------


def float_new(bits: int) -> int:
    """A new float object holding ``bits`` (the allocation written out: floats are made
    by every operation)."""
    p = heap_pointer()
    if heap_limit() - p < L.FLOAT_SIZE or p + L.FLOAT_SIZE > bump_end.value:
        p = gc_alloc(L.FLOAT_SIZE)
    else:
        set_heap_pointer(p + L.FLOAT_SIZE)
    store(p, L.TAG_FLOAT)
    store(p + L.FLOAT_BITS, bits)
    return p


@inline
def is_float(v: int) -> int:
    return (v & 1) == 0 and (load(v) & L.TAG_MASK) == L.TAG_FLOAT


def floats_involved(a: int, b: int) -> int:
    """1 if one operand is a float and the other a float or an int (an arithmetic
    operation the float rules decide); 0 for anything else, which has its own rules or
    errors.  (Called first by every arithmetic operator in a program with floats.)"""
    ta = L.TAG_INT if a & 1 else load(a) & L.TAG_MASK
    tb = L.TAG_INT if b & 1 else load(b) & L.TAG_MASK
    if ta == L.TAG_FLOAT:
        return tb == L.TAG_FLOAT or tb == L.TAG_INT
    if tb == L.TAG_FLOAT:
        return ta == L.TAG_INT
    return 0


# -- ints as floats ---------------------------------------------------------------------------


def int_to_bits(v: int) -> int:
    """The double nearest the int ``v`` (+-inf when it is too large for one)."""
    if v & 1:
        return small_int_bits(v)
    return big_to_bits(v, 0, 0)


def big_to_bits(v: int, scale: int, sticky: int) -> int:
    """The double nearest ``v * 2**scale`` for a non-zero int ``v`` of either kind
    (``scale`` a signed word), with ``sticky`` saying whether a non-zero fraction lies
    below ``v`` 's last bit."""
    if v & 1:
        n = sar(v, 1)
        sign = n & SIGN
        if sign:
            n = 0 - n
        shift = clz64(n)
        return f64_from_top(sign, n << shift, sticky, 64 - shift + scale)
    info = load(v + L.BIGINT_INFO)
    count = info & L.BIGINT_COUNT_MASK
    limbs = v + L.BIGINT_LIMBS
    # the top 64 bits of the magnitude, from its top two limbs, and whether any bit
    # below them is set
    top = load(limbs + 8 * count - 8)
    shift = clz64(top)
    bits = 64 * count - shift
    below = count - 1
    if shift != 0:
        top = top << shift
        if below > 0:
            low = load(limbs + 8 * below - 8)
            top = top | (low >> (64 - shift))
            if (low << shift) != 0:
                sticky = 1
            below -= 1
    while below > 0 and sticky == 0:
        below -= 1
        sticky = load(limbs + 8 * below) != 0
    return f64_from_top((info >> 32) << 63, top, sticky, bits + scale)


def finite_bits(v: int) -> int:
    """The bits of a float, or of the float an int converts to (the arithmetic's
    operand): an error if the int is too large for a finite float."""
    if v & 1:
        return small_int_bits(v)
    if (load(v) & L.TAG_MASK) == L.TAG_FLOAT:
        return load(v + L.FLOAT_BITS)
    bits = int_to_bits(v)
    if (bits << 1) == (INF << 1):
        error(text("int too large to convert to float"), 0)
    return bits


def float_to_int(bits: int) -> int:
    """The int a finite double truncates to, or 0 (no value) for a NaN or an infinity."""
    e = (bits >> 52) & 0x7FF
    if e < 1023:
        return 1  # the word of 0
    if e == 0x7FF:
        return 0
    m = (bits & ((1 << 52) - 1)) | (1 << 52)
    shift = e - 1075
    if slt(shift, 0):
        m = m >> (0 - shift)
    elif shift <= 9:
        m = m << shift
    else:
        if bits >= SIGN:
            return big_lshift(int_from_word(0 - m), shift)
        return big_lshift(int_from_word(m), shift)
    if bits >= SIGN:
        return ((0 - m) << 1) | 1
    return (m << 1) | 1


def nonfinite_name(bits: int) -> int:
    """How Go's errors name a NaN or an infinity that cannot become an int."""
    if is_nan(bits):
        return text("NaN")
    return text("infinity")


def float_int_value(v: int, prefix: int, builtin: int) -> int:
    """The int the float ``v`` truncates to; for a NaN or an infinity, the error
    ``PREFIXcannot convert float NaN to integer`` (``builtin`` names the builtin)."""
    return bits_int_value(load(v + L.FLOAT_BITS), prefix, builtin)


def bits_int_value(bits: int, prefix: int, builtin: int) -> int:
    """``float_int_value`` of a double's bits."""
    result = float_to_int(bits)
    if result == 0:
        b = buf_new(64)
        buf_str(b, prefix)
        buf_str(b, text("cannot convert float "))
        buf_str(b, nonfinite_name(bits))
        buf_str(b, text(" to integer"))
        error(buf_to_string(b, L.TAG_STRING), builtin)
    return result


def float_conversion_int(c: int, v: int) -> int:
    """``%d`` (``%i %o %x %X``, letter ``c``) of a float: the int it truncates to."""
    bits = load(v + L.FLOAT_BITS)
    result = float_to_int(bits)
    if result == 0:
        b = buf_new(64)
        buf_byte(b, 37)
        buf_byte(b, c)
        buf_str(b, text(" format requires integer: cannot convert float "))
        buf_str(b, nonfinite_name(bits))
        buf_str(b, text(" to integer"))
        error(buf_to_string(b, L.TAG_STRING), 0)
    return result


# -- arithmetic ---------------------------------------------------------------------------------


def float_binary(op: int, a: int, b: int) -> int:
    """``a op b`` (``OP_*``) for two numbers at least one of which is a float."""
    # the operands' bits, a float's read in place (the common case: no call)
    if (a & 1) == 0 and (load(a) & L.TAG_MASK) == L.TAG_FLOAT:
        x = load(a + L.FLOAT_BITS)
    else:
        x = finite_bits(a)
    if (b & 1) == 0 and (load(b) & L.TAG_MASK) == L.TAG_FLOAT:
        y = load(b + L.FLOAT_BITS)
    else:
        y = finite_bits(b)
    if op == OP_MUL:
        return float_new(f64_mul(x, y))
    if op == OP_ADD:
        return float_new(f64_add(x, y))
    if op == OP_SUB:
        return float_new(f64_sub(x, y))
    zero = (y << 1) == 0
    if op == OP_DIV:
        if zero:
            error(text("floating-point division by zero"), 0)
        return float_new(f64_div(x, y))
    if op == OP_FLOORDIV:
        if zero:
            error(text("floored division by zero"), 0)
        return float_new(f64_floor(f64_div(x, y)))
    if zero:
        error(text("floating-point modulo by zero"), 0)
    return float_new(float_mod_bits(x, y))


def float_floordiv_bits(x: int, y: int) -> int:
    """Starlark's ``x // y`` of two doubles (``y`` not zero): the quotient's floor."""
    return f64_floor(f64_div(x, y))


def float_mod_bits(x: int, y: int) -> int:
    """Starlark's ``x % y``: the remainder takes the divisor's sign (Go's ``Float.Mod``:
    ``math.Mod``, then the divisor added when the signs differ and it is not zero)."""
    z = f64_fmod(x, y)
    x_negative = x >= SIGN and (x << 1) != 0 and is_nan(x) == 0
    y_negative = y >= SIGN and (y << 1) != 0 and is_nan(y) == 0
    if x_negative != y_negative and (z << 1) != 0:
        z = f64_add(z, y)
    return z


def float_negate(a: int) -> int:
    return float_new(load(a + L.FLOAT_BITS) ^ SIGN)


def float_abs(a: int) -> int:
    bits = load(a + L.FLOAT_BITS)
    if bits < SIGN:
        return a
    return float_new(bits ^ SIGN)


# The operators as the compiled code of a program with floats calls them (when its
# inline small-int paths do not apply): a float and a float or a small int first, with
# the soft-float fast path and the new float's allocation copied in (no call on the
# way), anything else as before.  Each operator tests its operands itself: a shared
# test would have to say which of its four answers it found, and the operator to look
# at that answer again, a few ticks on every operation.


@inline
def new_float(bits: int, header: int) -> int:
    """``float_new``, the likely way of its allocation copied in; ``header`` is a
    float's header word, ``TAG_FLOAT``, which the operators hold in a register."""
    p = heap_pointer()
    q = p + L.FLOAT_SIZE
    if q <= bump_end.value and q <= heap_limit():
        set_heap_pointer(q)
        store(p, header)
        store(p + L.FLOAT_BITS, bits)
        return p
    return float_new(bits)


def number_add(a: int, b: int) -> int:
    mask = _MASK
    tag = _FLOAT
    # (each likely way written as the "then" part: it runs on without a jump)
    if (a | b) & 1 == 0:  # two objects: two floats?
        if ((load(a) ^ tag) | (load(b) ^ tag)) & mask == 0:
            x = load(a + L.FLOAT_BITS)
            y = load(b + L.FLOAT_BITS)
        else:
            return add(a, b)
    elif a & 1:  # (two small ints come here when their sum overflows a small int)
        if (b & 1) == 0 and (load(b) & mask) == tag:
            x = small_int_bits(a)
            y = load(b + L.FLOAT_BITS)
        else:
            return add(a, b)
    elif (load(a) & mask) == tag:
        x = load(a + L.FLOAT_BITS)
        y = small_int_bits(b)
    else:
        return add(a, b)
    r = add_fast(x, y)
    return new_float(r, tag)


def number_inplace_add(a: int, b: int) -> int:
    mask = _MASK
    tag = _FLOAT
    # (each likely way written as the "then" part: it runs on without a jump)
    if (a | b) & 1 == 0:  # two objects: two floats?
        if ((load(a) ^ tag) | (load(b) ^ tag)) & mask == 0:
            x = load(a + L.FLOAT_BITS)
            y = load(b + L.FLOAT_BITS)
        else:
            return inplace_add(a, b)
    elif a & 1:  # (two small ints come here when their sum overflows a small int)
        if (b & 1) == 0 and (load(b) & mask) == tag:
            x = small_int_bits(a)
            y = load(b + L.FLOAT_BITS)
        else:
            return inplace_add(a, b)
    elif (load(a) & mask) == tag:
        x = load(a + L.FLOAT_BITS)
        y = small_int_bits(b)
    else:
        return inplace_add(a, b)
    r = add_fast(x, y)
    return new_float(r, tag)


def number_sub(a: int, b: int) -> int:
    mask = _MASK
    tag = _FLOAT
    # (each likely way written as the "then" part: it runs on without a jump)
    if (a | b) & 1 == 0:  # two objects: two floats?
        if ((load(a) ^ tag) | (load(b) ^ tag)) & mask == 0:
            x = load(a + L.FLOAT_BITS)
            y = load(b + L.FLOAT_BITS)
        else:
            return sub(a, b)
    elif a & 1:  # (two small ints come here when their sum overflows a small int)
        if (b & 1) == 0 and (load(b) & mask) == tag:
            x = small_int_bits(a)
            y = load(b + L.FLOAT_BITS)
        else:
            return sub(a, b)
    elif (load(a) & mask) == tag:
        x = load(a + L.FLOAT_BITS)
        y = small_int_bits(b)
    else:
        return sub(a, b)
    r = sub_fast(x, y)
    return new_float(r, tag)


def number_mul(a: int, b: int) -> int:
    mask = _MASK
    tag = _FLOAT
    # (each likely way written as the "then" part: it runs on without a jump)
    if (a | b) & 1 == 0:  # two objects: two floats?
        if ((load(a) ^ tag) | (load(b) ^ tag)) & mask == 0:
            r = mul_fast(load(a + L.FLOAT_BITS), load(b + L.FLOAT_BITS))
        else:
            return mul(a, b)
    elif a & 1:  # (two small ints come here when their sum overflows a small int)
        if (b & 1) == 0 and (load(b) & mask) == tag:
            r = scaled_by_int(load(b + L.FLOAT_BITS), a, 0)
        else:
            return mul(a, b)
    elif (load(a) & mask) == tag:
        r = scaled_by_int(load(a + L.FLOAT_BITS), b, 0)
    else:
        return mul(a, b)
    return new_float(r, tag)


def number_truediv(a: int, b: int) -> int:
    """(Two small ints too: ``/`` always gives a float.)  A zero divisor goes to
    ``truediv``, which words the error."""
    mask = _MASK
    tag = _FLOAT
    if (a | b) & 1 == 0:  # two objects: two floats, the divisor not zero?
        if ((load(a) ^ tag) | (load(b) ^ tag)) & mask == 0 and (load(b + L.FLOAT_BITS) << 1) != 0:
            r = div_fast(load(a + L.FLOAT_BITS), load(b + L.FLOAT_BITS))
        else:
            return truediv(a, b)
    elif b & 1:  # by a small int
        if b == 1:
            return truediv(a, b)
        if a & 1:
            r = f64_div(small_int_bits(a), small_int_bits(b))
        elif (load(a) & mask) == tag:
            r = scaled_by_int(load(a + L.FLOAT_BITS), b, 1)
        else:
            return truediv(a, b)
    elif (load(b) & mask) == tag and (load(b + L.FLOAT_BITS) << 1) != 0:  # a small int
        r = f64_div(small_int_bits(a), load(b + L.FLOAT_BITS))
    else:
        return truediv(a, b)
    return new_float(r, tag)


def scaled_by_int(x: int, w: int, dividing: int) -> int:
    """``x * n``, or ``x / n`` when ``dividing`` (``n`` not 0), for the double ``x`` and
    the small int ``n`` whose word is ``w``: by 1, 2, 4 or 8 (halving, doubling), ``x``'s
    exponent moves, if ``x`` and the result are normal numbers; else the soft-float
    operation on ``n``'s double."""
    m = w >> 1  # (a negative int's is above 2**62)
    if m < 16:
        t = (_POWERS_OF_TWO >> (m << 2)) & 15
        if t != 0:
            k = t - 1
            if dividing:
                k = 0 - k
            e = ((x >> 52) & 0x7FF) - 1
            if e < 0x7FE and e + k < 0x7FE:
                return x + (k << 52)
    if dividing:
        return f64_div(x, small_int_bits(w))
    return f64_mul(x, small_int_bits(w))


def small_int_bits(w: int) -> int:
    """The double nearest the small int whose word is ``w``: below 2**53 in magnitude
    exactly, from its bit length (below 16 read from the word ``NIBBLE_LENGTHS``,
    above by a binary search down to such a nibble), above it by ``f64_from_word``."""
    sign = w & SIGN
    m = w >> 1 if sign == 0 else (1 - w) >> 1  # the magnitude of (w - 1) / 2
    k52 = 52
    if m < 16:  # (each likely way written as the "then" part: it runs on without a jump)
        if m == 0:
            return 0
        n = (NIBBLE_LENGTHS >> (m << 2)) & 15  # the bit length of m
        # the leading one at bit 52 adds one to the exponent field
        return sign + ((BIAS - 2 + n) << k52) + (m << (53 - n))
    if m >= (1 << 53):
        return f64_from_word(sar(w, 1))
    t = m
    n = 0
    if t < (1 << 32):
        pass
    else:
        t = t >> 32
        n = 32
    if t < (1 << 16):
        pass
    else:
        t = t >> 16
        n += 16
    if t < (1 << 8):
        pass
    else:
        t = t >> 8
        n += 8
    if t < 16:
        pass
    else:
        t = t >> 4
        n += 4
    n += (NIBBLE_LENGTHS >> (t << 2)) & 15
    return sign + ((BIAS - 2 + n) << k52) + (m << (53 - n))


# -- comparison -----------------------------------------------------------------------------------


def float_order(a: int, b: int) -> int:
    """-1, 0 or 1 for two numbers at least one of which is a float, exactly (an int is
    not rounded to a float to be compared)."""
    if a & 1 or (load(a) & L.TAG_MASK) != L.TAG_FLOAT:
        return int_float_order(a, load(b + L.FLOAT_BITS))
    if b & 1 or (load(b) & L.TAG_MASK) != L.TAG_FLOAT:
        return 0 - int_float_order(b, load(a + L.FLOAT_BITS))
    return f64_order(load(a + L.FLOAT_BITS), load(b + L.FLOAT_BITS))


def float_equal_small(a: int, b: int) -> int:
    """1 if of two different words, one a small int, the other is a float equal to it."""
    other = a
    if a & 1:
        other = b
    if other & 1 or (load(other) & L.TAG_MASK) != L.TAG_FLOAT:
        return 0
    return float_order(a, b) == 0


def float_equal(a: int, b: int) -> int:
    """1 if two values, one of them a float, are equal numbers; 0 otherwise (a float
    equals no value of another type than int)."""
    if is_number(a) == 0 or is_number(b) == 0:
        return 0
    return float_order(a, b) == 0


def is_number(v: int) -> int:
    if v & 1:
        return 1
    tag = load(v) & L.TAG_MASK
    return tag == L.TAG_FLOAT or tag == L.TAG_BIGINT


def int_float_order(v: int, x: int) -> int:
    """-1, 0 or 1 as the int ``v`` is below, equal to or above the double ``x``."""
    if is_nan(x):
        return 0 - 1  # a NaN is above every int
    if (x << 1) == (INF << 1):
        if x < SIGN:
            return 0 - 1
        return 1
    t = f64_trunc(x)
    order = int_integral_order(v, t)
    if order != 0 or t == x:
        return order
    if x < SIGN:  # x = t plus a fraction of x's sign
        return 0 - 1
    return 1


def int_integral_order(v: int, t: int) -> int:
    """-1, 0 or 1 for the int ``v`` and the integral finite double ``t``."""
    e = (t >> 52) & 0x7FF
    if e < _SMALL_EXPONENT:  # |t| < 2**62: a signed word
        if (v & 1) == 0:  # a big int is beyond every word this small
            if (load(v + L.BIGINT_INFO) >> 32) != 0:
                return 0 - 1
            return 1
        w = sar(float_to_int(t), 1)
        n = sar(v, 1)
        if n == w:
            return 0
        if slt(n, w):
            return 0 - 1
        return 1
    # |t| = m << shift, 2**62 or more: beyond every small int but -2**62
    t_negative = t >= SIGN
    if v & 1:
        if t == 0xC3D0000000000000 and v == L.SIGN_BIT | 1:  # both -2**62
            return 0
        if t_negative:
            return 1
        return 0 - 1
    info = load(v + L.BIGINT_INFO)
    v_negative = (info >> 32) != 0
    if v_negative != t_negative:
        if v_negative:
            return 0 - 1
        return 1
    order = magnitude_order(v, (t & ((1 << 52) - 1)) | (1 << 52), e - 1075)
    if v_negative:
        return 0 - order
    return order


def magnitude_order(v: int, m: int, shift: int) -> int:
    """-1, 0 or 1 as the magnitude of the big int ``v`` is below, equal to or above
    ``m << shift`` (``m`` of 53 bits), limb by limb without making that int."""
    count = load(v + L.BIGINT_INFO) & L.BIGINT_COUNT_MASK
    limbs = v + L.BIGINT_LIMBS
    length = 64 * count - clz64(load(limbs + 8 * count - 8))
    if length != 53 + shift:
        if length < 53 + shift:
            return 0 - 1
        return 1
    i = count
    while i > 0:
        i -= 1
        x = load(limbs + 8 * i)
        y = shifted_word(m, shift, i)
        if x != y:
            if x < y:
                return 0 - 1
            return 1
    return 0


def shifted_word(m: int, shift: int, i: int) -> int:
    """Limb ``i`` (64 bits) of ``m << shift``, for ``m`` of 53 bits."""
    offset = 64 * i - shift
    if slt(offset, 0):
        if slt(offset, 0 - 63):
            return 0
        return m << (0 - offset)
    if offset >= 64:
        return 0
    return m >> offset


def shifted_limb(m: int, shift: int, i: int) -> int:
    """Half ``i`` (32 bits) of ``m << shift``, as ``big_hash`` reads a big int."""
    offset = 32 * i - shift
    if slt(offset, 0):
        if slt(offset, 0 - 31):
            return 0
        return (m << (0 - offset)) & 0xFFFFFFFF
    if offset >= 64:
        return 0
    return (m >> offset) & 0xFFFFFFFF


# -- hashing ----------------------------------------------------------------------------------------


def float_hash(v: int, item: int) -> int:
    """The hash of a float: an integral one hashes as the equal int, which is
    ``int_hash`` of a small int's word for a dict key but the word itself inside a
    tuple's hash (``item``), as ``hash_object`` mixes small ints in."""
    x = load(v + L.FLOAT_BITS)
    if ((x >> 52) & 0x7FF) == 0x7FF:
        return _NONFINITE_HASH
    if f64_trunc(x) != x:
        return mix(x) | 1
    if ((x >> 52) & 0x7FF) < _SMALL_EXPONENT or x == 0xC3D0000000000000:  # -2**62
        w = float_to_int(x)
        if item:
            return w
        return int_hash(w)
    # as big_hash hashes the equal big int: its sign and count of halves, then its halves
    shift = ((x >> 52) & 0x7FF) - 1075
    m = (x & ((1 << 52) - 1)) | (1 << 52)
    count = (53 + shift + 31) >> 5
    h = mix(((x >> 63) << 32) | count)
    i = 0
    while i < count:
        h = mix(h ^ shifted_limb(m, shift, i))
        i += 1
    return h | 1


# -- the builtin float ------------------------------------------------------------------------------


def builtin_float(args: int, kwargs: int) -> int:
    """``float(x)``: 0.0 without ``x``; a bool, an int (the nearest float: an error if
    too large), a float, or a string as Go's ``strconv.ParseFloat`` reads one, with
    Go's ``inf``/``infinity``/``nan`` spellings.  Go's own argument messages."""
    if kwargs != 0 and load(kwargs + L.DICT_LEN) != 0:
        error(text("float does not accept keyword arguments"), text("float"))
    n = load(args + L.TUPLE_LEN)
    if n == 0:
        return float_new(0)
    if n != 1:
        b = buf_new(48)
        buf_str(b, text("float got "))
        buf_decimal(b, n)
        buf_str(b, text(" arguments, wants 1"))
        error(buf_to_string(b, L.TAG_STRING), text("float"))
    x = load(args + L.TUPLE_ITEMS)
    if x == L.TRUE_ADDRESS:
        return float_new(0x3FF0000000000000)
    if x == L.FALSE_ADDRESS:
        return float_new(0)
    tag = tag_of(x)
    if tag == L.TAG_INT:
        bits = int_to_bits(x)
        if (bits << 1) == (INF << 1):
            error(text("int too large to convert to float"), text("float"))
        return float_new(bits)
    if tag == L.TAG_FLOAT:
        return x
    if tag == L.TAG_STRING:
        return float_new(float_parse(x))
    error_with_type(text("float got "), x, text(", want number or string"), text("float"))
    return 0
