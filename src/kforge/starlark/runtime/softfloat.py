"""IEEE 754 binary64 arithmetic in software, on the bits of doubles held in words.

The Forge machine has no floating-point instructions (its results must be the same on
every host), so Starlark's floats are computed here, from integer operations: every
``f64_*`` function takes and returns the 64-bit pattern of a double.  Each operation
is correctly rounded (to nearest, ties to even) and gives exactly the bits x86-64's
SSE instructions give, which is what the Go implementation computes with on the
hosts it is checked against:

* subnormals are produced and consumed (no flushing to zero); the sign of a zero
  follows IEEE 754 (``x - x`` is ``+0``, ``-0 + -0`` is ``-0``);
* an operation with a NaN operand returns that NaN quieted (bit 51 set), the left
  one when both are NaNs (SSE returns its first source operand; which operand a
  compiler makes the first of a commutative operation varies, even inside CPython,
  and Starlark shows a NaN's payload nowhere and its sign only through
  ``math.copysign``); an invalid operation (``inf - inf``, ``0 * inf``, ``0 / 0``, ``inf / inf``, the
  square root of a negative number) returns the default NaN ``0xFFF8000000000000``.

How the work is laid out: an operand is unpacked into its biased exponent and its
significand with the hidden bit; the significand is held shifted up so that its
leading one is at bit 62 (``round_pack``'s convention), leaving ten bits below the
53 that are kept, for rounding, with any lower bit "jammed" into bit 0 (a sticky
bit).  ``round_pack`` then rounds, detects overflow and underflow, and packs; it
takes the biased exponent *minus one*, so that adding the significand's hidden bit
to the exponent field completes the exponent, and a rounding carry out of the
significand raises the exponent by itself.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import Global, inline, sar, slt

SIGN: Final = 1 << 63
EXP_MASK: Final = 0x7FF
FRAC_MASK: Final = (1 << 52) - 1
HIDDEN: Final = 1 << 52
#: The bits of +inf; a NaN's magnitude bits are above it.
INF: Final = 0x7FF0000000000000
#: Bit 51: a NaN with it set is quiet.
QUIET: Final = 1 << 51
#: What an invalid operation gives (x86-64's "real indefinite").
DEFAULT_NAN: Final = 0xFFF8000000000000
#: The exponent bias, and the biased exponent of 2**52 (the first with no fraction).
BIAS: Final = 1023
INTEGRAL: Final = 1075
_MASK32: Final = 0xFFFFFFFF
#: The bit lengths of 0 to 15, four bits each, that of 0 lowest: a table in a word.
NIBBLE_LENGTHS: Final = sum(i.bit_length() << (4 * i) for i in range(16))

#: The low word of the last 128-bit product or square (see ``square_hi``).
_float_low = Global(__name__)
#: The exponent of the last subnormal ``subnormal_significand`` normalized.
_float_subnormal_exponent = Global(__name__)

assert L.SIGN_BIT == SIGN


# -- words -------------------------------------------------------------------------------


def clz64(x: int) -> int:
    """Leading zero bits of a non-zero word (a binary search: six tests)."""
    n = 0
    if x < (1 << 32):
        n = 32
        x = x << 32
    if x < (1 << 48):
        n += 16
        x = x << 16
    if x < (1 << 56):
        n += 8
        x = x << 8
    if x < (1 << 60):
        n += 4
        x = x << 4
    if x < (1 << 62):
        n += 2
        x = x << 2
    if x < SIGN:
        n += 1
    return n


def shift_right_jam(x: int, count: int) -> int:
    """``x >> count`` with every bit shifted out ORed into bit 0 (``count >= 1``: a
    shift by 64 - count must be less than 64)."""
    if count >= 64:
        return x != 0
    if (x << (64 - count)) != 0:
        return (x >> count) | 1
    return x >> count


def is_nan(a: int) -> int:
    return (a << 1) > (INF << 1)


def quiet(a: int) -> int:
    return a | QUIET


def nan_pick(a: int, b: int) -> int:
    """The quieted NaN of two operands one of which is a NaN, ``a`` first."""
    if is_nan(a):
        return a | QUIET
    return b | QUIET


# -- rounding and packing ------------------------------------------------------------------


def round_pack(sign: int, exp: int, sig: int) -> int:
    """The double nearest ``sig * 2**(exp + 1 - BIAS - 62)`` with ``sign``: ``sig`` has
    its leading one at bit 62 (or is smaller when ``exp`` is 0, for a subnormal), its
    low ten bits are below the kept 53 (bit 0 sticky), and ``exp`` is the biased
    exponent less one, a signed word (below zero: the result is subnormal or zero)."""
    rest = sig & 0x3FF
    if exp >= 0x7FD:  # unsigned: also every negative exponent
        if slt(exp, 0):
            sig = shift_right_jam(sig, 0 - exp)
            exp = 0
            rest = sig & 0x3FF
        elif exp > 0x7FD or sig + 0x200 >= SIGN:
            return sign | INF
    sig = (sig + 0x200) >> 10
    if rest == 0x200:
        sig = sig & ~1  # exactly halfway: to even
    if sig == 0:
        return sign
    return sign + (exp << 52) + sig


def norm_round_pack(sign: int, exp: int, sig: int) -> int:
    """``round_pack`` for a ``sig`` whose leading one may be anywhere (``sig != 0``)."""
    shift = clz64(sig) - 1
    exp = exp - shift
    if shift >= 10 and exp < 0x7FD:  # exact, and a normal number: no rounding
        return sign + (exp << 52) + (sig << (shift - 10))
    return round_pack(sign, exp, sig << shift)


def subnormal_significand(frac: int) -> int:
    """A subnormal's fraction moved up to put its leading one at bit 52, as a normal
    significand; its exponent (below 1) goes to ``_float_subnormal_exponent``."""
    shift = clz64(frac) - 11
    _float_subnormal_exponent.value = 1 - shift
    return frac << shift


# -- addition and subtraction --------------------------------------------------------------
#
# The fast path (``sum_fast``, by way of ``add_fast`` and ``sub_fast``, ``@inline``:
# copied into ``f64_add``, ``f64_sub`` and the operators) takes two normal operands
# whose exponents are less than 62 apart and whose sum does not overflow: the larger
# magnitude's significand and the other's, aligned (bits shifted out are lost), are
# added or subtracted with their leading ones at bit 62, the result moved into place and
# rounded.  Bits are lost in the alignment only when the exponents are ten or more apart
# (the significands have eleven zero bits below them), and they matter only when the
# bits below the kept 53 are exactly one half (the result is then a hair either side of
# a tie): that case goes to ``add_slow``, the general code, as do zeros, subnormals,
# infinities and NaNs.  A difference that cancels more than one leading bit is exact
# (the exponents are then at most one apart): up to five bits are made up here, more by
# ``cancelled_difference``.


def f64_add(a: int, b: int) -> int:
    return add_fast(a, b)


@inline
def add_fast(a: int, b: int) -> int:
    """``f64_add``, copied into the operators that add (see the section's head)."""
    return sum_fast(a, b, 0)


@inline
def sub_fast(a: int, b: int) -> int:
    """``f64_sub``: ``a`` plus ``b`` negated, but for the sign of a NaN ``b``, which the
    result keeps."""
    return sum_fast(a, b ^ SIGN, 1)


@inline
def sum_fast(a: int, b: int, subtracting: int) -> int:
    """``a + b``, where ``b`` is negated already when ``subtracting`` (which only the
    NaNs' signs need to know)."""
    a2 = a << 1
    b2 = b << 1
    top = 0x7FE << 53
    if a2 >= top:  # an infinity or a NaN (or a sum that might overflow)
        return add_slow(a, b, subtracting)
    if b2 >= top:
        return add_slow(a, b, subtracting)
    # now the sum does not depend on the operands' order: the larger magnitude first
    # (each likely way written as the "then" part: it runs on without a jump)
    if a2 >= b2:
        pass
    else:
        t = a
        a = b
        b = t
        t = a2
        a2 = b2
        b2 = t
    k53 = 53
    ex = a2 >> k53
    ey = b2 >> k53
    if ey == 0:
        return add_slow(a, b, 0)
    d = ex - ey
    if d >= 62:
        return a  # the other is below a quarter of a's last place: a is the nearest
    k11 = 11
    ma = ((a << k11) | SIGN) >> 1
    mb = ((b << k11) | SIGN) >> (d + 1)
    k52 = 52
    e = (a >> k52) - 1  # the sign, and the biased exponent less one (see round_pack)
    if (a ^ b) < SIGN:
        s = ma + mb
        if s >= SIGN:
            s = s >> 1
            e += 1
    else:
        s = ma - mb
        if s >= (1 << 62):
            pass  # (the likely ways first: they run on without a jump)
        elif s >= (1 << 61) and ex >= 2:  # one leading bit cancelled
            s = s << 1
            e -= 1
        elif s >= (1 << 57) and ex >= 6:  # two to five: exact (see cancelled_difference)
            n = 6 - ((NIBBLE_LENGTHS >> ((s >> 57) << 2)) & 15)
            s = s << n
            e -= n
        else:  # more, or a subnormal result
            return cancelled_difference(a, b, s)
    s = s + 0x200
    if (s << 54) == 0:  # exactly one half below the last place, give or take lost bits
        if d >= 10:  # bits were lost in the alignment: the general code decides
            return add_slow(a, b, 0)
        s = s & ~0x400  # a tie: to even
    return (e << k52) + (s >> 10)


def f64_sub(a: int, b: int) -> int:
    return sub_fast(a, b)


def cancelled_difference(a: int, b: int, s: int) -> int:
    """``a + b`` for normal operands of opposite signs, ``a`` the larger in magnitude,
    whose exponents are at most one apart, from the difference ``s`` of their
    significands aligned as ``f64_add`` aligns them, which has lost one leading bit or
    more: no bit was shifted out (the significands have ten zero bits below them), so
    the difference is exact, and only moves up to its place.  (``f64_add`` itself
    moves a difference that lost up to five bits, its top four bits' length read from
    ``NIBBLE_LENGTHS``, when the result stays normal.)"""
    if s == 0:
        return 0  # x - x is +0 when rounding to nearest
    n = clz64(s) - 1  # the places up to bit 62
    if n >= (a << 1) >> 53:  # the exponent would fall below the normal ones
        return add_slow(a, b, 0)
    return (((a >> 52) - 1 - n) << 52) + ((s << n) >> 10)


def add_slow(a: int, b: int, subtracting: int) -> int:
    """``a + b`` for any operands; ``b`` is already negated when ``subtracting`` (a NaN
    keeps its own sign)."""
    ea = (a >> 52) & EXP_MASK
    eb = (b >> 52) & EXP_MASK
    if ea == EXP_MASK or eb == EXP_MASK:
        return add_special(a, b, subtracting)
    if (a ^ b) < SIGN:
        return add_magnitudes(a, b, ea, eb)
    return subtract_magnitudes(a, b, ea, eb)


def add_special(a: int, b: int, subtracting: int) -> int:
    """``a + b`` when one is infinite or a NaN; ``b`` is already negated when
    ``subtracting`` (a NaN keeps its own sign)."""
    if is_nan(a):
        return a | QUIET
    if is_nan(b):
        if subtracting:
            return (b ^ SIGN) | QUIET
        return b | QUIET
    if (a << 1) == (INF << 1):
        if (b << 1) == (INF << 1) and a != b:
            return DEFAULT_NAN
        return a
    return b


def add_magnitudes(a: int, b: int, ea: int, eb: int) -> int:
    """``a + b`` for finite operands of one sign."""
    sign = a & SIGN
    fa = a & FRAC_MASK
    fb = b & FRAC_MASK
    if ea == eb:
        if ea == 0:
            return sign | (fa + fb)  # subnormals add exactly, carrying into normal
        return round_pack(sign, ea, (HIDDEN + HIDDEN + fa + fb) << 9)
    if ea < eb:
        t = ea
        ea = eb
        eb = t
        t = fa
        fa = fb
        fb = t
    # the smaller operand's significand, aligned (a subnormal's exponent counts as 1:
    # its fraction is doubled instead of shifting one place less)
    if eb == 0:
        small = shift_right_jam(fb << 10, ea)
    elif ea - eb < 64:  # shift_right_jam written out
        aligned = (fb | HIDDEN) << 9
        small = aligned >> (ea - eb)
        if (aligned << (64 - ea + eb)) != 0:
            small = small | 1
    else:
        small = 1
    sig = ((fa | HIDDEN) << 9) + small
    exp = ea
    if sig < (1 << 62):
        exp = ea - 1
        sig = sig << 1
    if exp < 0x7FD:  # cannot overflow: round here (see round_pack)
        rest = sig & 0x3FF
        sig = (sig + 0x200) >> 10
        if rest == 0x200:
            sig = sig & ~1
        return sign + (exp << 52) + sig
    return round_pack(sign, exp, sig)


def subtract_magnitudes(a: int, b: int, ea: int, eb: int) -> int:
    """``a + b`` for finite operands of opposite signs."""
    sign = a & SIGN
    fa = a & FRAC_MASK
    fb = b & FRAC_MASK
    if ea == eb:
        if fa == fb:
            return 0  # x - x is +0 when rounding to nearest
        if fa < fb:
            sign = sign ^ SIGN
            t = fa
            fa = fb
            fb = t
        if ea == 0:
            return sign | (fa - fb)
        return norm_round_pack(sign, ea - 1, (fa - fb) << 10)
    if ea < eb:
        sign = sign ^ SIGN
        t = ea
        ea = eb
        eb = t
        t = fa
        fa = fb
        fb = t
    if eb == 0:
        small = shift_right_jam(fb << 11, ea)
    else:
        small = shift_right_jam((fb | HIDDEN) << 10, ea - eb)
    return norm_round_pack(sign, ea - 1, ((fa | HIDDEN) << 10) - small)


# -- multiplication ------------------------------------------------------------------------


def f64_mul(a: int, b: int) -> int:
    return mul_fast(a, b)


@inline
def mul_fast(a: int, b: int) -> int:
    """``a * b`` (``f64_mul``, copied into the operator).  The fast path takes two normal
    operands whose product is normal: the product of the 53-bit significands, split into
    halves of 27 and 26 bits (four products that fit a word), is kept to its top 64 bits
    and rounded there; the bits below (read again from the partial products) matter only
    when the kept ones end in exactly one half, a tie, which short significands (small
    ints, 0.5, 2.5) often make.  Every other case goes to ``mul_slow``."""
    k52 = 52
    mask = EXP_MASK
    ea = (a >> k52) & mask
    eb = (b >> k52) & mask
    top = 0x7FE
    if ea - 1 >= top:  # a zero, subnormal, infinity or NaN
        return mul_slow(a, b)
    if eb - 1 >= top:
        return mul_slow(a, b)
    frac = FRAC_MASK
    fb = b & frac
    if fb == 0:  # b is a power of two: a's exponent moves, if it stays normal
        if ea + eb - (BIAS + 1) < top:
            return (a ^ (b & SIGN)) + ((eb - BIAS) << k52)
        return mul_slow(a, b)
    hidden = HIDDEN
    fa = (a & frac) | hidden
    fb = fb | hidden
    k26 = 26
    low = (1 << 26) - 1
    ah = fa >> k26
    al = fa & low
    bh = fb >> k26
    bl = fb & low
    # fa * fb = hh * 2**52 + (ah * bl + al * bh) * 2**26 + ll; w is it shifted right
    # by 42 places: at least 2**62, below 2**64
    ll = al * bl
    middle = ah * bl + al * bh + (ll >> k26)
    w = ((ah * bh) << 10) + (middle >> 16)
    e = ea + eb - (BIAS + 1)  # the biased exponent less one, for w below 2**63
    sign = (a ^ b) & SIGN
    # the bits below w, fa * fb modulo 2**42, are those of middle below 2**16 and of ll
    # below 2**26
    if w < SIGN:  # the leading one at bit 62: 53 bits, then ten more
        if e >= 0x7FD:  # unsigned: also a negative exponent (a subnormal result)
            return mul_slow(a, b)
        w = w + 0x200
        if (w << 54) != 0 or ((middle << 48) | (ll << 38)) != 0:
            pass  # (the likely way first: it runs on without a jump)
        else:
            w = w & ~0x400  # exactly halfway: to even
        return sign + (e << k52) + (w >> 10)
    e += 1  # the leading one at bit 63: eleven bits below the 53
    if e >= 0x7FD:
        return mul_slow(a, b)
    w = w + 0x400
    if (w << 53) != 0 or ((middle << 48) | (ll << 38)) != 0:
        pass  # (the likely way first: it runs on without a jump)
    else:
        w = w & ~0x800
    return sign + (e << k52) + (w >> 11)


def mul_slow(a: int, b: int) -> int:
    """``a * b`` for any operands."""
    sign = (a ^ b) & SIGN
    ea = (a >> 52) & EXP_MASK
    eb = (b >> 52) & EXP_MASK
    fa = a & FRAC_MASK
    fb = b & FRAC_MASK
    if ea == EXP_MASK or eb == EXP_MASK:
        if is_nan(a) or is_nan(b):
            return nan_pick(a, b)
        if (a << 1) == 0 or (b << 1) == 0:
            return DEFAULT_NAN  # infinity times zero
        return sign | INF
    if ea == 0:
        if fa == 0:
            return sign
        fa = subnormal_significand(fa)
        ea = _float_subnormal_exponent.value
    else:
        fa = fa | HIDDEN
    if eb == 0:
        if fb == 0:
            return sign
        fb = subnormal_significand(fb)
        eb = _float_subnormal_exponent.value
    else:
        fb = fb | HIDDEN
    # the 128-bit product of fa << 10 (leading one at bit 62) and fb << 11 (at 63),
    # from four products of 32-bit halves; only its high word and whether its low
    # word is zero matter
    # (constants in locals: the machine has no immediate operands)
    half = 32
    low_half = _MASK32
    x = fa << 10
    y = fb << 11
    x1 = x >> half
    x0 = x & low_half
    y1 = y >> half
    y0 = y & low_half
    p00 = x0 * y0
    p01 = x0 * y1
    p10 = x1 * y0
    middle = (p00 >> half) + (p01 & low_half) + (p10 & low_half)
    high = x1 * y1 + (p01 >> half) + (p10 >> half) + (middle >> half)
    if ((middle | p00) << half) != 0:
        high = high | 1
    exp = ea + eb - BIAS
    if high < (1 << 62):
        exp = exp - 1
        high = high << 1
    if exp < 0x7FD:  # a normal result that cannot overflow: round here (see round_pack)
        rest = high & 0x3FF
        high = (high + 0x200) >> 10
        if rest == 0x200:
            high = high & ~1
        return sign + (exp << 52) + high
    return round_pack(sign, exp, high)


# -- division ------------------------------------------------------------------------------


def f64_div(a: int, b: int) -> int:
    return div_fast(a, b)


@inline
def div_fast(a: int, b: int) -> int:
    """``a / b`` (``f64_div``, copied into the operator).  The fast path takes two normal
    operands whose quotient is normal: long division of the significands, eleven bits at
    a time (the remainder is below the 53-bit divisor, so eleven more bits still fit a
    word), to 55 bits, rounded.  No quotient of two doubles lies exactly halfway between
    two doubles (that would make ``fa * 2**53`` an odd multiple of ``fb``, which has
    fewer than 53 factors of two), so the bits below the rounding bit never decide it
    and the remainder is not kept."""
    k52 = 52
    mask = EXP_MASK
    ea = (a >> k52) & mask
    eb = (b >> k52) & mask
    top = 0x7FE
    if ea - 1 >= top:  # a zero, subnormal, infinity or NaN
        return div_slow(a, b)
    if eb - 1 >= top:
        return div_slow(a, b)
    frac = FRAC_MASK
    fb = b & frac
    if fb == 0:  # b is a power of two: a's exponent moves, if it stays normal
        if ea - eb + (BIAS - 1) < top:
            return (a ^ (b & SIGN)) - ((eb - BIAS) << k52)
        return div_slow(a, b)
    hidden = HIDDEN
    fa = (a & frac) | hidden
    fb = fb | hidden
    e = ea - eb + (BIAS - 1)  # the biased exponent less one, for fa >= fb
    if fa >= fb:
        pass  # (the likely ways first: they run on without a jump)
    else:  # the quotient's first bit a one
        fa = fa << 1
        e -= 1
    if e >= 0x7FD:  # unsigned: also a negative exponent (a subnormal result)
        return div_slow(a, b)
    step = 11
    n = fa << 10
    q = n // fb  # the leading one at bit 10
    r = (n % fb) << step
    q = (q << step) | (r // fb)
    r = (r % fb) << step
    q = (q << step) | (r // fb)
    r = (r % fb) << step
    q = (q << step) | (r // fb)
    r = (r % fb) << step
    q = (q << step) | (r // fb)  # 55 bits: 53, the rounding bit and one more
    return ((a ^ b) & SIGN) + (e << 52) + ((q + 2) >> 2)


def div_slow(a: int, b: int) -> int:
    """``a / b`` for any operands."""
    sign = (a ^ b) & SIGN
    ea = (a >> 52) & EXP_MASK
    eb = (b >> 52) & EXP_MASK
    fa = a & FRAC_MASK
    fb = b & FRAC_MASK
    if ea == EXP_MASK:
        if is_nan(a) or is_nan(b):
            return nan_pick(a, b)
        if eb == EXP_MASK:
            return DEFAULT_NAN  # infinity over infinity
        return sign | INF
    if eb == EXP_MASK:
        if fb != 0:
            return b | QUIET
        return sign
    if eb == 0:
        if fb == 0:
            if ea == 0 and fa == 0:
                return DEFAULT_NAN  # zero over zero
            return sign | INF
        fb = subnormal_significand(fb)
        eb = _float_subnormal_exponent.value
    else:
        fb = fb | HIDDEN
    if ea == 0:
        if fa == 0:
            return sign
        fa = subnormal_significand(fa)
        ea = _float_subnormal_exponent.value
    else:
        fa = fa | HIDDEN
    exp = ea - eb + 0x3FE
    if fa < fb:  # make the quotient's first bit a one
        fa = fa << 1
        exp = exp - 1
    # long division, eleven quotient bits at a time: the remainder is below the 53-bit
    # divisor, so eleven more bits still fit a word
    step = 11
    r = (fa - fb) << step
    q = (1 << 11) | (r // fb)  # the leading one, then eleven bits
    r = (r % fb) << step
    q = (q << step) | (r // fb)
    r = (r % fb) << step
    q = (q << step) | (r // fb)
    r = (r % fb) << step
    q = (q << step) | (r // fb)
    r = (r % fb) << step
    q = (q << step) | (r // fb)
    r = r % fb
    # q has its leading one at bit 55
    q = q << 7
    if r != 0:
        q = q | 1
    if exp < 0x7FD:  # a normal result that cannot overflow: round here (see round_pack)
        rest = q & 0x3FF
        q = (q + 0x200) >> 10
        if rest == 0x200:
            q = q & ~1
        return sign + (exp << 52) + q
    return round_pack(sign, exp, q)


# -- square root ---------------------------------------------------------------------------


def f64_sqrt(a: int) -> int:
    ea = (a >> 52) & EXP_MASK
    fa = a & FRAC_MASK
    if ea == EXP_MASK:
        if fa != 0:
            return a | QUIET
        if a >= SIGN:
            return DEFAULT_NAN
        return a
    if (a << 1) == 0:
        return a  # sqrt(-0) is -0
    if a >= SIGN:
        return DEFAULT_NAN
    if ea == 0:
        fa = subnormal_significand(fa)
        ea = _float_subnormal_exponent.value
    else:
        fa = fa | HIDDEN
    # sqrt(fa * 2**(ea - 1075)): with an even power of two left over, the square root
    # of N = fa << 56 (or << 57) has its leading one at bit 54: 53 bits, a rounding
    # bit, and the remainder tells whether anything is below
    if ea & 1:
        high = fa << 10
        shift = 56
    else:
        high = fa << 11
        shift = 57
    # N = high << 46 exactly; its square root from that of high, then one Newton step
    x = isqrt_word(high)
    step = ((high - x * x) << 22) // x
    q = (x << 23) + step
    # the Newton step from below overshoots by less than one: correct by the square
    n_high = fa >> (64 - shift)
    n_low = fa << shift
    square_high = square_hi(q)
    if square_high > n_high or (square_high == n_high and _float_low.value > n_low):
        q = q - 1
        square_high = square_hi(q)
    sig = q << 8
    if square_high != n_high or _float_low.value != n_low:
        sig = sig | 1
    return round_pack(0, sar(ea - BIAS, 1) + BIAS - 1, sig)


def isqrt_word(n: int) -> int:
    """The integer square root of ``n`` in ``[2**62, 2**64)``: Newton's iteration from
    above, starting at the arithmetic mean of ``n / c`` and ``c`` for ``c`` near the
    middle of the roots' range (at most 9% high)."""
    c = 3 << 30
    x = (n // c + c) >> 1
    while True:
        y = (x + n // x) >> 1
        if y >= x:
            return x
        x = y


def square_hi(q: int) -> int:
    """The high word of ``q * q`` for ``q < 2**56``; the low word goes to ``_float_low``."""
    h = q >> 32
    low = q & _MASK32
    cross = h * low
    l2 = low * low
    lo = l2 + (cross << 33)
    hi = h * h + (cross >> 31)
    if lo < l2:
        hi += 1
    _float_low.value = lo
    return hi


# -- comparison ----------------------------------------------------------------------------


@inline
def f64_order(a: int, b: int) -> int:
    """-1, 0 or 1: Starlark's total order of floats, where every NaN equals every other
    and comes after +inf, and -0 equals +0.  Without NaNs, the bits of two positive
    doubles are ordered as the doubles are, and those of two negative ones the other
    way round."""
    inf = INF << 1
    a2 = a << 1
    b2 = b << 1
    if a2 <= inf and b2 <= inf:
        if a == b:
            return 0
        if (a | b) < SIGN:  # both positive
            if a < b:
                return 0 - 1
            return 1
        if (a & b) >= SIGN:  # both negative
            if a < b:
                return 1
            return 0 - 1
        if (a2 | b2) == 0:  # -0 and +0
            return 0
        if a < b:  # a positive, b negative
            return 1
        return 0 - 1
    if a2 > inf:
        return b2 <= inf  # a NaN is above everything but another NaN
    return 0 - 1


# -- conversions ---------------------------------------------------------------------------


def f64_from_word(n: int) -> int:
    """The double nearest the signed word ``n``."""
    sign = n & SIGN
    if sign:
        n = 0 - n
    if n == 0:
        return 0
    shift = clz64(n)
    if shift >= 11:  # at most 53 bits: exact
        return sign + ((0x43D - shift) << 52) + (n << (shift - 11))
    return round_pack(sign, 0x43D - shift, shift_right_jam(n << shift, 1))


def f64_from_top(sign: int, top: int, sticky: int, bits: int) -> int:
    """The double nearest ``top * 2**(bits - 64)`` (``top`` with its leading one at bit
    63, ``bits`` a signed word) plus a fraction of its last bit, non-zero if ``sticky``:
    +-inf when it is too large."""
    sig = shift_right_jam(top, 1)
    if sticky:
        sig = sig | 1
    if slt(1024, bits):
        return sign | INF
    return round_pack(sign, bits + 1021, sig)


def f64_trunc(a: int) -> int:
    """``a`` rounded toward zero to an integral double (NaNs and infinities as they are)."""
    e = (a >> 52) & EXP_MASK
    if e >= INTEGRAL:
        return a
    if e < BIAS:
        return a & SIGN
    return a & ~((1 << (INTEGRAL - e)) - 1)


def f64_floor(a: int) -> int:
    """``a`` rounded toward minus infinity (Go's ``math.Floor``)."""
    e = (a >> 52) & EXP_MASK
    if e >= INTEGRAL:
        return a
    if e < BIAS:
        if a >= SIGN and (a << 1) != 0:
            return 0xBFF0000000000000  # -1.0
        return a & SIGN
    mask = (1 << (INTEGRAL - e)) - 1
    if a & mask == 0:
        return a
    if a >= SIGN:
        a = a + mask  # away from zero: the carry may reach the exponent, as it should
    return a & ~mask


def f64_ceil(a: int) -> int:
    """``a`` rounded toward plus infinity (Go's ``math.Ceil``)."""
    return f64_floor(a ^ SIGN) ^ SIGN


def f64_round(a: int) -> int:
    """``a`` rounded to the nearest integral double, halfway cases away from zero (Go's
    ``math.Round``)."""
    e = (a >> 52) & EXP_MASK
    if e >= INTEGRAL:
        return a
    if e < BIAS - 1:
        return a & SIGN
    if e == BIAS - 1:
        return (a & SIGN) | 0x3FF0000000000000
    half = 1 << (INTEGRAL - 1 - e)
    return (a + half) & ~(half + half - 1)


# -- remainder -----------------------------------------------------------------------------


def f64_fmod(a: int, b: int) -> int:
    """The exact remainder of ``a / b`` truncated, with the sign of ``a`` (C's ``fmod``,
    Go's ``math.Mod``; Go answers its own NaN for a NaN or infinite ``a`` and for a NaN or
    zero ``b``)."""
    ea = (a >> 52) & EXP_MASK
    eb = (b >> 52) & EXP_MASK
    fa = a & FRAC_MASK
    fb = b & FRAC_MASK
    if ea == EXP_MASK or (b << 1) == 0 or is_nan(b):
        return 0x7FF8000000000001  # Go's math.NaN()
    if eb == EXP_MASK or (a << 1) < (b << 1):
        return a
    sign = a & SIGN
    if ea == 0:
        fa = subnormal_significand(fa)
        ea = _float_subnormal_exponent.value
    else:
        fa = fa | HIDDEN
    if eb == 0:
        fb = subnormal_significand(fb)
        eb = _float_subnormal_exponent.value
    else:
        fb = fb | HIDDEN
    # |a| >= |b|: reduce the significand modulo fb while bringing in the exponent
    # difference, eleven bits at a time (the remainder stays below 2**53)
    r = fa % fb
    gap = ea - eb
    while gap > 11:
        r = (r << 11) % fb
        gap -= 11
    r = (r << gap) % fb
    if r == 0:
        return sign
    # exact: r has at most 53 bits at b's exponent (a subnormal result packs itself)
    return norm_round_pack(sign, eb - 1, r << 10)
