"""Floats as decimal text and back: ``str``/``repr``, ``%e %f %g``, and ``float(str)``.

Output is Go's ``strconv.FormatFloat`` as the Go implementation uses it: ``str``
writes the shortest digits that read back as the same double (``%g`` with the
shortest precision: an exponent when it would be below -4 or 6 and up, as in
``1e-05`` and ``1e+06``), with ``.0`` added when neither a point nor an exponent
shows; ``%e`` and ``%f`` write six digits after the point, correctly rounded (halfway
cases to even, on the exact value); NaN and the infinities are ``nan``, ``+inf``,
``-inf``.

The digits come from exact integer arithmetic (Steele and White's method, with Burger
and Dybvig's free-format termination for the shortest digits): the double's value
``r/s`` and the half-gaps to its neighbours ``m+/s`` and ``m-/s`` are kept as
multi-precision integers of 32-bit limbs in a scratch block, scaled so that ``r/s``
lies in [0.1, 1); each digit is ``10r // s``.  A number is a block of words: its
limb count, then its limbs, least significant first.  When all four numbers are
below 2**60 (a double of ordinary size: 0.1, 1/3, 123456789.123, not 1e22 or
5e-324), the digits come from the same steps on single words instead, none of which
can overflow (``r`` and the half-gaps stay below ``10s``): about 35 ticks a digit
rather than 450.

Input is Go's ``strconv.ParseFloat``: an optional sign, decimal digits with an
optional point and exponent, or ``0x`` hexadecimal digits with a ``p`` exponent;
underscores only between digits; correctly rounded (a short decimal by one exact
double operation, anything else with big ints).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    Global,
    heap_pointer,
    load,
    loadb,
    sar,
    store,
    storeb,
    text,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import (
        big_add,
        big_floordiv,
        big_lshift,
        big_mul,
        big_pow10,
        big_prepare,
    )
    from kforge.starlark.runtime.core import (
        alloc_block,
        buf_byte,
        buf_decimal,
        buf_new,
        buf_str,
        buf_to_string,
        buf_write,
        error,
        heap_release,
    )
    from kforge.starlark.runtime.floats import big_to_bits, int_to_bits, is_float
    from kforge.starlark.runtime.softfloat import (
        clz64,
        f64_div,
        f64_from_top,
        f64_from_word,
        f64_mul,
        is_nan,
    )
    from kforge.starlark.runtime.values import big_compare

SIGN: Final = 1 << 63
INF: Final = 0x7FF0000000000000
_MASK32: Final = 0xFFFFFFFF
#: Limbs a scratch number holds: enough for 10 * 2**1076 shifted up by 31 bits.
_LIMBS: Final = 40
_NUMBER: Final = 8 * (_LIMBS + 1)
#: Digits the scratch holds: ``%f`` of the largest double (309 digits, one more after a
#: carry, and six after the point).
_DIGITS: Final = 320
#: The scratch block: the numbers r, s, m+, m- and a sum, then the digits.
_R: Final = 0
_S: Final = _NUMBER
_MPLUS: Final = 2 * _NUMBER
_MMINUS: Final = 3 * _NUMBER
_SUM: Final = 4 * _NUMBER
_DIGIT_BYTES: Final = 5 * _NUMBER
_SCRATCH: Final = 5 * _NUMBER + _DIGITS

_float_scratch = Global(__name__)
#: The decimal exponent of the digits made last: their value is 0.DDD * 10**exponent.
_float_exponent = Global(__name__)
#: 1 when ``setup_digits`` left its numbers below 2**60, unnormalized: the word path.
_float_words = Global(__name__)
#: Numbers below this take the word path: ten times one still fits a word.
_WORD_PATH_BOUND: Final = 1 << 60
#: Ten to the powers 0..18, each exactly a double: the fast path of parsing.
_POWERS_OF_TEN: Final = 18


# -- multi-precision numbers ---------------------------------------------------------------


def mp_set(x: int, w: int) -> None:
    """``x = w`` for a word ``w``."""
    store(x + 8, w & _MASK32)
    store(x + 16, w >> 32)
    if w >> 32:
        store(x, 2)
    elif w != 0:
        store(x, 1)
    else:
        store(x, 0)


def mp_mul_small(x: int, m: int) -> None:
    """``x *= m`` for ``m < 2**32``."""
    n = load(x)
    p = x + 8
    end = p + 8 * n
    carry = 0
    while p < end:
        t = load(p) * m + carry
        store(p, t & _MASK32)
        carry = t >> 32
        p += 8
    if carry != 0:
        store(p, carry)
        store(x, n + 1)


def mp_mul_pow10(x: int, k: int) -> None:
    """``x *= 10**k``, nine digits at a time."""
    while k >= 9:
        mp_mul_small(x, 1_000_000_000)
        k -= 9
    if k > 0:
        p = 10
        while k > 1:
            p = p * 10
            k -= 1
        mp_mul_small(x, p)


def mp_shl(x: int, bits: int) -> None:
    """``x <<= bits``."""
    n = load(x)
    if n == 0:
        return
    words = bits >> 5
    s = bits & 31
    # from the top down, so the move can overlap
    top = load(x + 8 * n)
    i = n
    if s != 0:
        high = top >> (32 - s)
        if high != 0:
            store(x + 8 + 8 * (n + words), high)
            n_new = n + words + 1
        else:
            n_new = n + words
        while i > 1:
            store(
                x + 8 * (i + words),
                ((load(x + 8 * i) << s) | (load(x + 8 * i - 8) >> (32 - s))) & _MASK32,
            )
            i -= 1
        store(x + 8 + 8 * words, (load(x + 8) << s) & _MASK32)
    else:
        n_new = n + words
        while i > 0:
            store(x + 8 * (i + words), load(x + 8 * i))
            i -= 1
    i = 0
    while i < words:
        store(x + 8 + 8 * i, 0)
        i += 1
    store(x, n_new)


def mp_compare(x: int, y: int) -> int:
    """-1, 0 or 1 (numbers without leading zero limbs)."""
    n = load(x)
    m = load(y)
    if n != m:
        if n < m:
            return 0 - 1
        return 1
    p = x + 8 * n
    q = y + 8 * n
    while p > x:
        a = load(p)
        c = load(q)
        if a != c:
            if a < c:
                return 0 - 1
            return 1
        p -= 8
        q -= 8
    return 0


def mp_add(r: int, x: int, y: int) -> None:
    """``r = x + y``."""
    n = load(x)
    m = load(y)
    if n < m:
        t = x
        x = y
        y = t
        t = n
        n = m
        m = t
    carry = 0
    i = 1
    while i <= n:
        t = load(x + 8 * i) + carry
        if i <= m:
            t += load(y + 8 * i)
        store(r + 8 * i, t & _MASK32)
        carry = t >> 32
        i += 1
    if carry != 0:
        store(r + 8 * i, carry)
        n += 1
    store(r, n)


def mp_sub(x: int, y: int) -> None:
    """``x -= y`` for ``x >= y``."""
    n = load(x)
    m = load(y)
    borrow = 0
    i = 1
    while i <= n:
        t = load(x + 8 * i) - borrow
        if i <= m:
            t -= load(y + 8 * i)
        store(x + 8 * i, t & _MASK32)
        borrow = t >> 63
        i += 1
    while n > 0 and load(x + 8 * n) == 0:
        n -= 1
    store(x, n)


def mp_digit(r: int, s: int) -> int:
    """``r // s`` (below ten) for an ``s`` whose top limb has its top bit set; ``r``
    becomes the remainder."""
    n = load(s)
    rn = load(r)
    if rn < n:
        return 0
    top = load(s + 8 * n)
    rtop = load(r + 8 * rn)
    if rn > n:
        rtop = (rtop << 32) | load(r + 8 * n)
    q = rtop // (top + 1)  # at most one too small
    if q != 0:
        borrow = 0
        i = 1
        while i <= rn:
            t = load(r + 8 * i) - borrow
            if i <= n:
                t -= load(s + 8 * i) * q
            store(r + 8 * i, t & _MASK32)
            borrow = (0 - sar(t, 32)) & _MASK32
            i += 1
        while rn > 0 and load(r + 8 * rn) == 0:
            rn -= 1
        store(r, rn)
    while mp_compare(r, s) != 0 - 1:
        mp_sub(r, s)
        q += 1
    return q


def digits_scratch() -> int:
    p = _float_scratch.value
    if p == 0:
        p = alloc_block(L.TAG_BLOCK, _SCRATCH)
        _float_scratch.value = p
    return p


# -- digits --------------------------------------------------------------------------------


def setup_digits(bits: int, gaps: int) -> int:
    """Lay out ``r/s`` for the positive finite double ``bits`` (and its half-gaps
    ``m+/s``, ``m-/s`` if ``gaps``) scaled to [0.1, 1), with ``s`` normalized for
    ``mp_digit``; ``_float_exponent`` gets the scale.  Returns the scratch block."""
    p = digits_scratch()
    r = p + _R
    s = p + _S
    mplus = p + _MPLUS
    mminus = p + _MMINUS
    e = (bits >> 52) & 0x7FF
    f = bits & ((1 << 52) - 1)
    if e == 0:
        e = 1
    else:
        f = f | (1 << 52)
    e = e - 1075
    # the gap above is twice the gap below at a power of two (but not at the bottom of
    # the normals, where the subnormals continue with the same gap)
    lopsided = f == (1 << 52) and e != 0 - 1074
    mp_set(r, f)
    mp_set(s, 1)
    mp_set(mplus, 1)
    mp_set(mminus, 1)
    if slt_word(e, 0):
        mp_shl(s, 0 - e)
    else:
        mp_shl(r, e)
        mp_shl(mplus, e)
        mp_shl(mminus, e)
    # r/s = x; the half-gaps: 2**e / 2 each side, or 2**e above and 2**e / 2 below
    if lopsided:
        mp_shl(r, 2)
        mp_shl(s, 2)
        mp_shl(mplus, 1)
    else:
        mp_shl(r, 1)
        mp_shl(s, 1)
    # k = ceil(log10 x) or one less: from the bit length, floor(lb * log10 2) + 1
    lb = e + 63 - clz64(f)
    k = sar(lb * 78913, 18)
    if lb != 0:
        k += 1
    if slt_word(k, 0):
        mp_mul_pow10(r, 0 - k)
        if gaps:
            mp_mul_pow10(mplus, 0 - k)
            mp_mul_pow10(mminus, 0 - k)
    else:
        mp_mul_pow10(s, k)
    # one more digit to the left when the value (or, for the shortest digits, its upper
    # half-gap's end, which rounds to it) reaches s
    high = r
    if gaps:
        mp_add(p + _SUM, r, mplus)
        high = p + _SUM
    order = mp_compare(high, s)
    if order == 1 or (order == 0 and (gaps == 0 or (f & 1) == 0)):
        mp_mul_small(s, 10)
        k += 1
    _float_exponent.value = k
    words = mp_below(r, _WORD_PATH_BOUND) and mp_below(s, _WORD_PATH_BOUND)
    if words and gaps:
        words = mp_below(mplus, _WORD_PATH_BOUND) and mp_below(mminus, _WORD_PATH_BOUND)
    _float_words.value = words
    if words:
        return p
    # normalize s so that mp_digit's estimate is close (every number moves alike)
    shift = clz64(load(s + 8 * load(s)) << 32)
    if shift != 0:
        mp_shl(r, shift)
        mp_shl(s, shift)
        if gaps:
            mp_shl(mplus, shift)
            mp_shl(mminus, shift)
    return p


def slt_word(a: int, b: int) -> int:
    return (a ^ SIGN) < (b ^ SIGN)


def mp_word(x: int) -> int:
    """The value of ``x`` as a word (it has at most two limbs)."""
    n = load(x)
    if n == 0:
        return 0
    if n == 1:
        return load(x + 8)
    return load(x + 8) | (load(x + 16) << 32)


def mp_below(x: int, bound: int) -> int:
    """Whether ``x < bound``, a power of two from 2**32 to 2**64."""
    n = load(x)
    if n > 2:
        return 0
    return mp_word(x) < bound


def twice_against(r: int, s: int) -> int:
    """-1, 0 or 1 as ``2r`` is below, at or above ``s`` (words below 2**62)."""
    twice = r + r
    if twice == s:
        return 0
    if twice < s:
        return 0 - 1
    return 1


def shortest_digits_in_words(p: int, bits: int) -> int:
    """:func:`float_shortest_digits` on single words (``setup_digits`` found its numbers
    below 2**60): the same steps, in the same order."""
    r = mp_word(p + _R)
    s = mp_word(p + _S)
    mplus = mp_word(p + _MPLUS)
    mminus = mp_word(p + _MMINUS)
    digits = p + _DIGIT_BYTES
    inclusive = (bits & 1) == 0
    n = 0
    while True:
        r = r * 10
        mplus = mplus * 10
        mminus = mminus * 10
        d = r // s
        r = r - d * s
        low_ok = r < mminus or (inclusive and r == mminus)
        total = r + mplus
        high_ok = s < total or (inclusive and total == s)
        if low_ok or high_ok:
            storeb(digits + n, 48 + last_digit(d, low_ok, high_ok, twice_against(r, s)))
            return n + 1
        storeb(digits + n, 48 + d)
        n += 1


def last_digit(d: int, low_ok: int, high_ok: int, twice: int) -> int:
    """The last of the shortest digits, ``d`` or one more: one more when only the
    upper side reads back as the double, or when both do and the rest (twice it
    compares with ``s`` as ``twice``) is above half, or at half and ``d`` is odd."""
    if high_ok and low_ok == 0:
        return d + 1
    if high_ok and (twice == 1 or (twice == 0 and (d & 1))):
        return d + 1
    return d


def fixed_digits_in_words(p: int, count: int) -> int:
    """The ``count`` digits of :func:`float_fixed_digits` on single words; returns how
    twice the rest compares with ``s`` (as :func:`twice_against`)."""
    r = mp_word(p + _R)
    s = mp_word(p + _S)
    digits = p + _DIGIT_BYTES
    i = 0
    while i < count:
        r = r * 10
        d = r // s
        r = r - d * s
        storeb(digits + i, 48 + d)
        i += 1
    return twice_against(r, s)


def twice_rest_against_s(p: int) -> int:
    """How ``2r`` compares with ``s`` in the scratch (either path)."""
    if _float_words.value:
        return twice_against(mp_word(p + _R), mp_word(p + _S))
    mp_add(p + _SUM, p + _R, p + _R)
    return mp_compare(p + _SUM, p + _S)


def float_shortest_digits(bits: int) -> int:
    """The fewest digits that read back as the positive finite double ``bits`` (the
    nearest such, halfway to the even digit), into the scratch digits; their count."""
    p = setup_digits(bits, 1)
    if _float_words.value:
        return shortest_digits_in_words(p, bits)
    r = p + _R
    s = p + _S
    mplus = p + _MPLUS
    mminus = p + _MMINUS
    total = p + _SUM
    digits = p + _DIGIT_BYTES
    inclusive = (bits & 1) == 0  # an even double is what its halfway points read as
    n = 0
    while True:
        mp_mul_small(r, 10)
        mp_mul_small(mplus, 10)
        mp_mul_small(mminus, 10)
        d = mp_digit(r, s)
        low = mp_compare(r, mminus)
        mp_add(total, r, mplus)
        high = mp_compare(total, s)
        low_ok = low == 0 - 1 or (inclusive and low == 0)
        high_ok = high == 1 or (inclusive and high == 0)
        if low_ok or high_ok:
            storeb(digits + n, 48 + last_digit(d, low_ok, high_ok, twice_rest_against_s(p)))
            return n + 1
        storeb(digits + n, 48 + d)
        n += 1


def float_fixed_digits(bits: int, count: int, after_point: int) -> int:
    """Digits of the positive finite double ``bits``, the last rounded (halfway to
    even), into the scratch digits: ``count`` of them, or with ``after_point`` as many
    as reach ``count`` places after the decimal point.  Returns how many: one more when
    rounding carried into a new first digit (``_float_exponent`` then counts it too); 0 when
    none reach that place: the first scratch digit then says whether the value rounds
    to one unit of it (``1``) or to zero (``0``)."""
    p = setup_digits(bits, 0)
    r = p + _R
    s = p + _S
    digits = p + _DIGIT_BYTES
    if after_point:
        count = count + _float_exponent.value
    if slt_word(count, 1):
        up = 0
        if count == 0:  # the value is 0.d...: it rounds to a unit of its first digit's place
            up = twice_rest_against_s(p) == 1
        storeb(digits, 48 + up)
        return 0
    if _float_words.value:
        twice = fixed_digits_in_words(p, count)
    else:
        i = 0
        while i < count:
            mp_mul_small(r, 10)
            storeb(digits + i, 48 + mp_digit(r, s))
            i += 1
        twice = twice_rest_against_s(p)
    if twice == 1 or (twice == 0 and (loadb(digits + count - 1) & 1)):
        i = count
        while i > 0:
            i -= 1
            d = loadb(digits + i)
            if d != 57:
                storeb(digits + i, d + 1)
                return count
            storeb(digits + i, 48)
        # all nines: a one and zeros, one place further left
        storeb(digits, 49)
        storeb(digits + count, 48)
        _float_exponent.value = _float_exponent.value + 1
        return count + 1
    return count


# -- writing -----------------------------------------------------------------------------------


def write_float(b: int, v: int) -> None:
    """``str`` (and ``repr``) of a float."""
    write_float_bits(b, load(v + L.FLOAT_BITS), 103)


def write_number_as_float(b: int, v: int, c: int) -> None:
    """``%e %f %g`` (``E F G``) of a float, or of the float an int converts to."""
    if is_float(v):
        write_float_bits(b, load(v + L.FLOAT_BITS), c)
    else:
        write_float_bits(b, int_to_bits(v), c)


def write_float_bits(b: int, bits: int, c: int) -> None:
    """A double as Go's Starlark writes it for the conversion ``c``: ``e f g E F G``
    (``g`` is the shortest form, as ``str`` writes)."""
    if ((bits >> 52) & 0x7FF) == 0x7FF:
        if is_nan(bits):
            buf_str(b, text("nan"))
        elif bits >= SIGN:
            buf_str(b, text("-inf"))
        else:
            buf_str(b, text("+inf"))
        return
    if c == 70:
        buf_str(b, text("%F"))  # Go's strconv.FormatFloat has no 'F' and writes this
        return
    if bits >= SIGN:
        buf_byte(b, 45)
        bits = bits ^ SIGN
    upper = 0
    if c < 97:
        upper = 32
        c += 32
    if c == 103:
        write_shortest(b, bits, upper)
    elif c == 101:
        write_exponent_form(b, bits, 7, upper)
    else:
        write_fixed_form(b, bits)


def write_shortest(b: int, bits: int, upper: int) -> None:
    """Go's ``%g`` with the shortest digits: an exponent when it is below -4 or from 6
    up; ``.0`` when the text would read as an int."""
    if bits == 0:
        buf_str(b, text("0.0"))
        return
    n = float_shortest_digits(bits)
    digits = digits_scratch() + _DIGIT_BYTES
    point = _float_exponent.value  # the value is 0.DDD * 10**point
    exponent = point - 1
    if slt_word(exponent, 0 - 4) or slt_word(5, exponent):
        float_write_mantissa(b, digits, n)
        float_write_exponent(b, exponent, upper)
        return
    if slt_word(point, 1):  # 0.000DDD
        buf_str(b, text("0."))
        i = point
        while i != 0:
            buf_byte(b, 48)
            i += 1
        buf_write(b, digits, n)
        return
    if slt_word(point, n):  # DD.DDD
        buf_write(b, digits, point)
        buf_byte(b, 46)
        buf_write(b, digits + point, n - point)
        return
    buf_write(b, digits, n)  # DDD000.0
    i = n
    while i < point:
        buf_byte(b, 48)
        i += 1
    buf_str(b, text(".0"))


def write_exponent_form(b: int, bits: int, count: int, upper: int) -> None:
    """``%e``: ``count`` significant digits, ``d.ddddde+XX``."""
    digits = digits_scratch() + _DIGIT_BYTES
    exponent = 0
    if bits == 0:
        i = 0
        while i < count:
            storeb(digits + i, 48)
            i += 1
    else:
        float_fixed_digits(bits, count, 0)
        exponent = _float_exponent.value - 1
    float_write_mantissa(b, digits, count)
    float_write_exponent(b, exponent, upper)


def write_fixed_form(b: int, bits: int) -> None:
    """``%f``: six digits after the point."""
    digits = digits_scratch() + _DIGIT_BYTES
    n = 0
    if bits != 0:
        n = float_fixed_digits(bits, 6, 1)
    if n == 0:  # below a millionth: zero, or one millionth when it rounds up to it
        buf_str(b, text("0.00000"))
        if bits != 0:
            buf_byte(b, loadb(digits))
        else:
            buf_byte(b, 48)
        return
    point = _float_exponent.value  # the digits' value is 0.DDD * 10**point
    if slt_word(point, 1):
        buf_str(b, text("0."))
        i = point
        while i != 0:
            buf_byte(b, 48)
            i += 1
        buf_write(b, digits, n)
        return
    buf_write(b, digits, point)
    buf_byte(b, 46)
    buf_write(b, digits + point, n - point)


def float_write_mantissa(b: int, digits: int, n: int) -> None:
    buf_byte(b, loadb(digits))
    if n > 1:
        buf_byte(b, 46)
        buf_write(b, digits + 1, n - 1)


def float_write_exponent(b: int, exponent: int, upper: int) -> None:
    buf_byte(b, 101 - upper)
    if slt_word(exponent, 0):
        buf_byte(b, 45)
        exponent = 0 - exponent
    else:
        buf_byte(b, 43)
    if exponent < 10:
        buf_byte(b, 48)
    buf_decimal(b, exponent)


# -- parsing ---------------------------------------------------------------------------------------


def float_parse(s: int) -> int:
    """The bits of the double the str ``s`` names, by ``float``'s rules (an error for a
    string that names none, or one too large)."""
    n = load(s + L.STR_LEN)
    if n == 0:
        error(text("float: empty string"), text("float"))
    special = special_float(s)
    if special != 0:
        return special
    bits = parse_number(s + L.STR_DATA, n)
    if bits == INVALID:
        error_invalid_float(s)
    if (bits << 1) == (INF << 1):
        error(text("floating-point number too large"), text("float"))
    return bits


def error_invalid_float(s: int) -> None:
    b = buf_new(64)
    buf_str(b, text("invalid float literal: "))
    buf_str(b, s)
    error(buf_to_string(b, L.TAG_STRING), text("float"))


def special_float(s: int) -> int:
    """The bits of ``inf``, ``infinity`` and ``nan`` in any case, with a sign (Go's
    NaN), or 0."""
    n = load(s + L.STR_LEN)
    p = s + L.STR_DATA
    sign = 0
    c = loadb(p)
    if c == 43 or c == 45:  # + -
        if c == 45:
            sign = SIGN
        p += 1
        n -= 1
    if folded_equal(p, n, text("nan")):
        return 0x7FF8000000000001
    if folded_equal(p, n, text("inf")) or folded_equal(p, n, text("infinity")):
        return sign | INF
    return 0


def folded_equal(p: int, n: int, lower: int) -> int:
    """Whether the ``n`` bytes at ``p`` are the str ``lower`` in any case."""
    if n != load(lower + L.STR_LEN):
        return 0
    i = 0
    while i < n:
        if (loadb(p + i) | 32) != loadb(lower + L.STR_DATA + i):
            return 0
        i += 1
    return 1


#: What ``parse_number`` answers for text that is not a number (a NaN, which no number
#: parses to).
INVALID: Final = 0x7FF4000000000BAD


def parse_number(p: int, n: int) -> int:
    """The bits of the double ``strconv.ParseFloat`` reads from the ``n`` bytes at ``p``
    (+-inf when too large), or ``INVALID`` when they are not its syntax."""
    if underscores_allowed(p, n) == 0:
        return INVALID
    sign = 0
    i = 0
    c = loadb(p)
    if c == 43 or c == 45:
        if c == 45:
            sign = SIGN
        i = 1
    if i + 1 < n and loadb(p + i) == 48 and (loadb(p + i + 1) | 32) == 120:  # 0x
        return parse_hex(p + i + 2, n - i - 2, sign)
    return parse_decimal(p + i, n - i, sign)


def underscores_allowed(p: int, n: int) -> int:
    """Go's rule: an underscore only between two digits, or between a base prefix and
    a digit."""
    i = 0
    if n > 0 and (loadb(p) == 43 or loadb(p) == 45):
        i = 1
    hex_digits = 0
    saw = 94  # '^' the start, '0' a digit or the prefix, '_' an underscore, '!' other
    if i + 1 < n and loadb(p + i) == 48:
        letter = loadb(p + i + 1) | 32
        if letter == 98 or letter == 111 or letter == 120:  # b o x
            hex_digits = letter == 120
            saw = 48
            i += 2
    while i < n:
        c = loadb(p + i)
        i += 1
        if (c >= 48 and c <= 57) or (hex_digits and (c | 32) >= 97 and (c | 32) <= 102):
            saw = 48
        elif c == 95:
            if saw != 48:
                return 0
            saw = 95
        else:
            if saw == 95:
                return 0
            saw = 33
    return saw != 95


#: An exponent is read up to this magnitude (beyond it, any number is 0 or infinite).
_EXPONENT_LIMIT: Final = 1_000_000


def parse_exponent(p: int, n: int, i: int) -> int:
    """The signed exponent whose sign and digits start at ``p + i`` and end the text
    (underscores skipped); ``INVALID`` without digits or with anything after them."""
    negative = 0
    if i < n and (loadb(p + i) == 43 or loadb(p + i) == 45):
        negative = loadb(p + i) == 45
        i += 1
    value = 0
    digits = 0
    while i < n:
        c = loadb(p + i)
        i += 1
        if c == 95:
            continue
        if c < 48 or c > 57:
            return INVALID
        digits += 1
        if value < _EXPONENT_LIMIT:
            value = value * 10 + c - 48
    if digits == 0:
        return INVALID
    if negative:
        return 0 - value
    return value


def parse_decimal(p: int, n: int, sign: int) -> int:
    """Digits with an optional point, then an optional ``e`` exponent."""
    mantissa = 0
    significant = 0  # digits from the first non-zero one
    after_point = 0  # digits after the point
    any_digit = 0
    point = 0
    i = 0
    while i < n:
        c = loadb(p + i)
        if c == 95:
            i += 1
            continue
        if c == 46:
            if point:
                return INVALID
            point = 1
            i += 1
            continue
        if c < 48 or c > 57:
            break
        any_digit = 1
        after_point += point
        if significant != 0 or c != 48:
            significant += 1
            if significant <= 18:
                mantissa = mantissa * 10 + c - 48
        i += 1
    if any_digit == 0:
        return INVALID
    exponent = 0
    if i < n:
        if (loadb(p + i) | 32) != 101:  # e
            return INVALID
        exponent = parse_exponent(p, n, i + 1)
        if exponent == INVALID:
            return INVALID
    if significant == 0:
        return sign
    scale = exponent - after_point  # the value is DIGITS * 10**scale
    if (
        significant <= 15
        and slt_word(0 - 1 - _POWERS_OF_TEN, scale)
        and slt_word(scale, 1 + _POWERS_OF_TEN)
    ):
        # both operands exact doubles: one correctly rounded operation
        if slt_word(scale, 0):
            return sign | f64_div(
                f64_from_word(mantissa), f64_from_word(float_power_of_ten(0 - scale))
            )
        return sign | f64_mul(f64_from_word(mantissa), f64_from_word(float_power_of_ten(scale)))
    magnitude = significant + scale  # the value is below 10**magnitude
    if slt_word(310, magnitude):
        return sign | INF
    if slt_word(magnitude, 0 - 324):
        return sign
    return sign | parse_decimal_exactly(p, i, scale)


def float_power_of_ten(k: int) -> int:
    value = 1
    while k > 0:
        value = value * 10
        k -= 1
    return value


def parse_decimal_exactly(p: int, n: int, scale: int) -> int:
    """The double nearest DIGITS * 10**scale, DIGITS being every digit of the ``n``
    bytes at ``p`` (with its point and underscores): exact big-int arithmetic, its
    temporaries given back."""
    # room for the scratch of the division or the product below (``divmod_scratch_words``
    # is the larger): their operands have fewer limbs than a tenth of the digits and of
    # the scale (a limb holds nineteen digits; the numerator has 66 bits more than the
    # quotient), and a few more
    digits_of_scale = scale
    if slt_word(scale, 0):
        digits_of_scale = 0 - scale
    big_prepare(6 * ((n + digits_of_scale) // 9 + 8) + 4)
    mark = heap_pointer()
    digits = 1  # the int 0
    chunk = 0
    chunk_digits = 0
    i = 0
    while i < n:
        c = loadb(p + i)
        i += 1
        if c >= 48 and c <= 57:
            chunk = chunk * 10 + c - 48
            chunk_digits += 1
            if chunk_digits == 9:
                digits = big_add(big_mul(digits, (1_000_000_000 << 1) | 1), (chunk << 1) | 1)
                chunk = 0
                chunk_digits = 0
    if chunk_digits != 0:
        digits = big_add(
            big_mul(digits, (float_power_of_ten(chunk_digits) << 1) | 1), (chunk << 1) | 1
        )
    if slt_word(scale, 0):
        power = big_pow10(0 - scale)
        # a quotient of 66 bits or more, and whether the division left a remainder
        shift = int_bit_length(power) - int_bit_length(digits) + 66
        if slt_word(shift, 0):
            shift = 0
        numerator = big_lshift(digits, shift)
        quotient = big_floordiv(numerator, power)
        sticky = big_compare(big_mul(quotient, power), numerator) != 0
        bits = big_to_bits(quotient, 0 - shift, sticky)
    else:
        bits = big_to_bits(big_mul(digits, big_pow10(scale)), 0, 0)
    heap_release(mark)
    return bits


def int_bit_length(v: int) -> int:
    """The bit length of a non-negative int."""
    if v & 1:
        n = v >> 1
        if n == 0:
            return 0
        return 64 - clz64(n)
    count = load(v + L.BIGINT_INFO) & L.BIGINT_COUNT_MASK
    return 64 * count - clz64(load(v + L.BIGINT_LIMBS + 8 * count - 8))


def hex_digit(c: int) -> int:
    """The value of a hexadecimal digit, or 16."""
    if c >= 48 and c <= 57:
        return c - 48
    c = c | 32
    if c >= 97 and c <= 102:
        return c - 87
    return 16


def parse_hex(p: int, n: int, sign: int) -> int:
    """After ``0x``: hexadecimal digits with an optional point, then a ``p`` exponent
    (required): the top 60 bits kept, the rest as a sticky bit."""
    mantissa = 0
    exponent = 0
    sticky = 0
    any_digit = 0
    point = 0
    i = 0
    while i < n:
        c = loadb(p + i)
        if c == 95:
            i += 1
            continue
        if c == 46:
            if point:
                return INVALID
            point = 1
            i += 1
            continue
        d = hex_digit(c)
        if d == 16:
            break
        any_digit = 1
        if (mantissa >> 56) == 0:
            mantissa = (mantissa << 4) | d
            if point:
                exponent -= 4
        else:
            sticky = sticky | d
            if point == 0:
                exponent += 4
        i += 1
    if any_digit == 0 or i >= n or (loadb(p + i) | 32) != 112:  # p
        return INVALID
    e = parse_exponent(p, n, i + 1)
    if e == INVALID:
        return INVALID
    if mantissa == 0:
        return sign
    shift = clz64(mantissa)
    return f64_from_top(sign, mantissa << shift, sticky != 0, 64 - shift + exponent + e)
