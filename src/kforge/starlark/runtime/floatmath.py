"""The ``math`` module of the Go implementation (``go.starlark.net/lib/math``), on the
soft-float library.

Each function is the Go math package's portable algorithm (its Go code, the one Go runs
where it has no assembly for the function), done operation for operation with
correctly rounded soft-float operations, so the results are the bits Go's portable
code computes, on every host and tier.  Go's amd64 build has assembly for ``Exp``
(with or without fused multiply-adds, depending on the processor), so there ``exp``
and what is built on it (``pow`` of a non-integral power, ``sinh``, ``cosh``,
``tanh``, ``gamma``) can differ in the last bit; ``docs/starlark.md`` says which
functions are exactly Go's.

The algorithms come from FreeBSD's msun library (exp, log, log1p, asinh, acosh,
atanh, remainder) and Cephes (sin, cos, tan, atan, sinh, tanh, gamma); their constants
are written here as the doubles' bits.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.layout import float_bits as _b
from kforge.starlark.runtime.intrinsics import Global, load, slt, text

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import buf_decimal, buf_new, buf_str, buf_to_string, error
    from kforge.starlark.runtime.floats import (
        bits_int_value,
        float_new,
        int_to_bits,
        small_int_bits,
    )
    from kforge.starlark.runtime.softfloat import (
        clz64,
        f64_add,
        f64_ceil,
        f64_div,
        f64_floor,
        f64_fmod,
        f64_from_word,
        f64_mul,
        f64_order,
        f64_round,
        f64_sqrt,
        f64_sub,
        f64_trunc,
        is_nan,
    )
    from kforge.starlark.runtime.values import tag_of, type_name

SIGN: Final = 1 << 63
INF: Final = 0x7FF0000000000000
NEG_INF: Final = 0xFFF0000000000000
#: Go's math.NaN().
NAN: Final = 0x7FF8000000000001
ONE: Final = 0x3FF0000000000000
TWO: Final = 0x4000000000000000
HALF: Final = 0x3FE0000000000000

PI: Final = 0x400921FB54442D18
PI_2: Final = 0x3FF921FB54442D18  # pi/2
PI_4: Final = 0x3FE921FB54442D18  # pi/4
PI3_4: Final = 0x4002D97C7F3321D2  # 3*pi/4, rounded once
FOUR_PI: Final = 0x3FF45F306DC9C883  # 4/pi, rounded once
TWO_PI: Final = 0x401921FB54442D18
E: Final = 0x4005BF0A8B145769

# ln 2 in two parts (msun): LN2_HI * n is exact for |n| < 2000
LN2_HI: Final = 0x3FE62E42FEE00000
LN2_LO: Final = 0x3DEA39EF35793C76
LN2: Final = 0x3FE62E42FEFA39EF

# Constants of the algorithms below, as the doubles' bits.
EXP_OVERFLOW: Final = _b(7.09782712893383973096e02)
EXP_UNDERFLOW: Final = _b(-7.45133219101941108420e02)
TWO_M28: Final = _b(1.0 / (1 << 28))
LOG2_E: Final = _b(1.44269504088896338700e00)
EXP_P4: Final = _b(-1.65339022054652515390e-06)
EXP_P5: Final = _b(4.13813679705723846039e-08)
EXP_P3: Final = _b(6.61375632143793436117e-05)
EXP_P2: Final = _b(-2.77777777770155933842e-03)
EXP_P1: Final = _b(1.66666666666666657415e-01)
SQRT2_2: Final = _b(1.4142135623730951 / 2)
SQRT2_M1: Final = _b(4.142135623730950488017e-01)
TWO_M29: Final = _b(1.0 / (1 << 29))
TWO_M54: Final = _b(1.0 / (1 << 54))
SQRT2_2_M1: Final = _b(-2.928932188134524755992e-01)
TWO_53: Final = _b(9007199254740992.0)
TWO_THIRDS: Final = _b(0.66666666666666666)
SIN_0: Final = _b(1.58962301576546568060e-10)
SIN_1: Final = _b(-2.50507477628578072866e-8)
SIN_2: Final = _b(2.75573136213857245213e-6)
SIN_3: Final = _b(-1.98412698295895385996e-4)
SIN_4: Final = _b(8.33333333332211858878e-3)
SIN_5: Final = _b(-1.66666666666666307295e-1)
COS_0: Final = _b(-1.13585365213876817300e-11)
COS_1: Final = _b(2.08757008419747316778e-9)
COS_2: Final = _b(-2.75573141792967388112e-7)
COS_3: Final = _b(2.48015872888517045348e-5)
COS_4: Final = _b(-1.38888888888730564116e-3)
COS_5: Final = _b(4.16666666666665929218e-2)
TAN_SMALL: Final = _b(1e-14)
TAN_P0: Final = _b(-1.30936939181383777646e4)
TAN_P1: Final = _b(1.15351664838587416140e6)
TAN_P2: Final = _b(-1.79565251976484877988e7)
TAN_Q1: Final = _b(1.36812963470692954678e4)
TAN_Q2: Final = _b(-1.32089234440210967447e6)
TAN_Q3: Final = _b(2.50083801823357915839e7)
TAN_Q4: Final = _b(-5.38695755929454629881e7)
ATAN_P0: Final = _b(-8.750608600031904122785e-01)
ATAN_P1: Final = _b(-1.615753718733365076637e01)
ATAN_P2: Final = _b(-7.500855792314704667340e01)
ATAN_P3: Final = _b(-1.228866684490136173410e02)
ATAN_P4: Final = _b(-6.485021904942025371773e01)
ATAN_Q0: Final = _b(2.485846490142306297962e01)
ATAN_Q1: Final = _b(1.650270098316988542046e02)
ATAN_Q2: Final = _b(4.328810604912902668951e02)
ATAN_Q3: Final = _b(4.853903996359136964868e02)
ATAN_Q4: Final = _b(1.945506571482613964425e02)
ATAN_REDUCED: Final = _b(0.66)
TAN_3PI_8: Final = _b(2.41421356237309504880)
ASIN_SPLIT: Final = _b(0.7)
TWENTY_ONE: Final = _b(21.0)
SINH_P3: Final = _b(-0.2630563213397497062819489e2)
SINH_P2: Final = _b(-0.2894211355989563807284660366e4)
SINH_P1: Final = _b(-0.8991272022039509355398013511e5)
SINH_P0: Final = _b(-0.6307673640497716991184787251e6)
SINH_Q2: Final = _b(-0.173678953558233699533450911e3)
SINH_Q1: Final = _b(0.1521517378790019070696485176e5)
SINH_Q0: Final = _b(-0.6307673640497716991212077277e6)
TANH_LIMIT: Final = _b(0.5 * 8.8029691931113054295988e01)
TANH_SPLIT: Final = _b(0.625)
TANH_P0: Final = _b(-9.64399179425052238628e-1)
TANH_P1: Final = _b(-9.92877231001918586564e1)
TANH_P2: Final = _b(-1.61468768441708447952e3)
TANH_Q0: Final = _b(1.12811678491632931402e2)
TANH_Q1: Final = _b(2.23548839060100448583e3)
TANH_Q2: Final = _b(4.84406305325125486048e3)
TWO_28: Final = _b(float(1 << 28))
ONE_TWENTY_EIGHT: Final = _b(128.0)
MINUS_ONE_TWENTY_EIGHT: Final = _b(-128.0)
TWO_63: Final = _b(9223372036854775808.0)
HALF_MAX: Final = _b(1.7976931348623157e308 / 2)
REMAINDER_TINY: Final = _b(4.45014771701440276618e-308)
STIRLING_LIMIT: Final = _b(200.0)
STIRLING_0: Final = _b(7.87311395793093628397e-04)
STIRLING_1: Final = _b(-2.29549961613378126380e-04)
STIRLING_2: Final = _b(-2.68132617805781232825e-03)
STIRLING_3: Final = _b(3.47222221605458667310e-03)
STIRLING_4: Final = _b(8.33333333333482257126e-02)
MAX_STIRLING: Final = _b(143.01608)
QUARTER: Final = _b(0.25)
SQRT_2PI: Final = _b(2.506628274631000502417)
THIRTY_THREE: Final = _b(33.0)
THREE: Final = _b(3.0)
MINUS_1E_9: Final = _b(-1e-09)
ONE_E_9: Final = _b(1e-09)
GAMMA_P0: Final = _b(1.60119522476751861407e-04)
GAMMA_P1: Final = _b(1.19135147006586384913e-03)
GAMMA_P2: Final = _b(1.04213797561761569935e-02)
GAMMA_P3: Final = _b(4.76367800457137231464e-02)
GAMMA_P4: Final = _b(2.07448227648435975150e-01)
GAMMA_P5: Final = _b(4.94214826801497100753e-01)
GAMMA_P6: Final = _b(9.99999999999999996796e-01)
GAMMA_Q0: Final = _b(-2.31581873324120129819e-05)
GAMMA_Q1: Final = _b(5.39605580493303397842e-04)
GAMMA_Q2: Final = _b(-4.45641913851797240494e-03)
GAMMA_Q3: Final = _b(1.18139785222060435552e-02)
GAMMA_Q4: Final = _b(3.58236398605498653373e-02)
GAMMA_Q5: Final = _b(-2.34591795718243348568e-01)
GAMMA_Q6: Final = _b(7.14304917030273074085e-02)
GAMMA_Q7: Final = _b(1.00000000000000000320e00)
EULER: Final = _b(0.57721566490153286060651209008240243104215933593992)
THREE_SIXTY: Final = _b(360.0)

_frexp_exponent = Global(__name__)
_modf_fraction = Global(__name__)
_trig_octant = Global(__name__)
_stirling_second = Global(__name__)
_mul_low = Global(__name__)


# -- comparisons and small operations on doubles (NaNs already excluded) -------------------


def f64_lt(a: int, b: int) -> int:
    """IEEE ``a < b``: false when either is a NaN."""
    if is_nan(a) or is_nan(b):
        return 0
    return f64_order(a, b) == 0 - 1


def f64_ge(a: int, b: int) -> int:
    """IEEE ``a >= b``: false when either is a NaN."""
    if is_nan(a) or is_nan(b):
        return 0
    return f64_order(a, b) != 0 - 1


def f64_le(a: int, b: int) -> int:
    """IEEE ``a <= b``: false when either is a NaN."""
    if is_nan(a) or is_nan(b):
        return 0
    return f64_order(a, b) != 1


def f64_negative(a: int) -> int:
    """IEEE ``a < 0`` (not for -0 or a NaN)."""
    return a >= SIGN and (a << 1) != 0 and is_nan(a) == 0


def f64_is_inf(a: int) -> int:
    return (a << 1) == (INF << 1)


def f64_copysign(magnitude: int, sign: int) -> int:
    return (magnitude & ~SIGN) | (sign & SIGN)


def double_to_word(x: int) -> int:
    """A finite double below 2**63 in magnitude, truncated to a signed word (Go's
    ``int64(x)`` there)."""
    e = (x >> 52) & 0x7FF
    if e < 1023:
        return 0
    m = (x & ((1 << 52) - 1)) | (1 << 52)
    m = m << e - 1075 if e >= 1075 else m >> 1075 - e
    if x >= SIGN:
        return 0 - m
    return m


def f64_frexp(x: int) -> int:
    """Go's ``Frexp``: the fraction in [0.5, 1) (its exponent into ``_frexp_exponent``);
    zeros, infinities and NaNs come back as they are, with exponent 0."""
    e = (x >> 52) & 0x7FF
    if (x << 1) == 0 or e == 0x7FF:
        _frexp_exponent.value = 0
        return x
    fraction = x & ((1 << 52) - 1)
    if e == 0:  # a subnormal: its leading one moves up to the hidden bit's place
        shift = clz64(fraction) - 11
        _frexp_exponent.value = 0 - 1021 - shift
        return (x & SIGN) | ((fraction << shift) & ((1 << 52) - 1)) | (1022 << 52)
    _frexp_exponent.value = e - 1022
    return (x & SIGN) | fraction | (1022 << 52)


def f64_ldexp(frac: int, exp: int) -> int:
    """Go's ``Ldexp``: ``frac * 2**exp`` (``exp`` a signed word), rounded once."""
    if (frac << 1) == 0 or ((frac >> 52) & 0x7FF) == 0x7FF:
        return frac
    f = f64_frexp(frac)
    e = exp + _frexp_exponent.value - 1  # the exponent of 2f, in [1, 2)
    if slt(e, 0 - 1075):
        return f & SIGN
    if slt(1023, e):
        return (f & SIGN) | INF
    if slt(e, 0 - 1022):  # subnormal: one rounding, by a product with 2**-53
        return f64_mul(0x3CA0000000000000, (f & ~(0x7FF << 52)) | ((e + 53 + 1023) << 52))
    return (f & ~(0x7FF << 52)) | ((e + 1023) << 52)


def f64_modf(x: int) -> int:
    """Go's ``Modf``: the integer part (the fraction into ``_modf_fraction``), both with
    the sign of ``x``."""
    if f64_lt(x & ~SIGN, ONE):
        if (x << 1) == 0:
            _modf_fraction.value = x
            return x
        _modf_fraction.value = x
        return x & SIGN
    whole = f64_trunc(x)
    _modf_fraction.value = f64_sub(x, whole)
    return whole


# -- exp and log ------------------------------------------------------------------------------


def go_exp(x: int) -> int:
    if is_nan(x) or x == INF:
        return x
    if x == NEG_INF:
        return 0
    if f64_lt(EXP_OVERFLOW, x):
        return INF
    if f64_lt(x, EXP_UNDERFLOW):
        return 0
    if f64_lt(x & ~SIGN, TWO_M28):
        return f64_add(ONE, x)
    # x = k ln2 + r, r = hi - lo
    k = 0
    if f64_negative(x):
        k = double_to_word(f64_sub(f64_mul(LOG2_E, x), HALF))
    elif (x << 1) != 0:
        k = double_to_word(f64_add(f64_mul(LOG2_E, x), HALF))
    kf = f64_from_word(k)
    hi = f64_sub(x, f64_mul(kf, LN2_HI))
    lo = f64_mul(kf, LN2_LO)
    return exp_multi(hi, lo, k)


def exp_multi(hi: int, lo: int, k: int) -> int:
    """``e**r * 2**k`` for ``r = hi - lo``, ``|r| <= ln(2)/2``."""
    r = f64_sub(hi, lo)
    t = f64_mul(r, r)
    p = f64_add(EXP_P4, f64_mul(t, EXP_P5))
    p = f64_add(EXP_P3, f64_mul(t, p))
    p = f64_add(EXP_P2, f64_mul(t, p))
    p = f64_add(EXP_P1, f64_mul(t, p))
    c = f64_sub(r, f64_mul(t, p))
    y = f64_div(f64_mul(r, c), f64_sub(TWO, c))
    y = f64_sub(ONE, f64_sub(f64_sub(lo, y), hi))
    return f64_ldexp(y, k)


#: msun's log polynomial (also log1p's).
_L1: Final = _b(6.666666666666735130e-01)
_L2: Final = _b(3.999999999940941908e-01)
_L3: Final = _b(2.857142874366239149e-01)
_L4: Final = _b(2.222219843214978396e-01)
_L5: Final = _b(1.818357216161805012e-01)
_L6: Final = _b(1.531383769920937332e-01)
_L7: Final = _b(1.479819860511658591e-01)


def go_log(x: int) -> int:
    if is_nan(x) or x == INF:
        return x
    if f64_negative(x):
        return NAN
    if (x << 1) == 0:
        return NEG_INF
    f1 = f64_frexp(x)
    ki = _frexp_exponent.value
    if f64_lt(f1, SQRT2_2):
        f1 = f64_mul(f1, TWO)
        ki -= 1
    f = f64_sub(f1, ONE)
    k = f64_from_word(ki)
    s = f64_div(f, f64_add(TWO, f))
    s2 = f64_mul(s, s)
    s4 = f64_mul(s2, s2)
    t1 = f64_add(_L5, f64_mul(s4, _L7))
    t1 = f64_add(_L3, f64_mul(s4, t1))
    t1 = f64_mul(s2, f64_add(_L1, f64_mul(s4, t1)))
    t2 = f64_add(_L4, f64_mul(s4, _L6))
    t2 = f64_mul(s4, f64_add(_L2, f64_mul(s4, t2)))
    big_r = f64_add(t1, t2)
    hfsq = f64_mul(f64_mul(HALF, f), f)
    inner = f64_add(f64_mul(s, f64_add(hfsq, big_r)), f64_mul(k, LN2_LO))
    return f64_sub(f64_mul(k, LN2_HI), f64_sub(f64_sub(hfsq, inner), f))


def go_log1p(x: int) -> int:
    if f64_lt(x, 0xBFF0000000000000) or is_nan(x):
        return NAN
    if x == 0xBFF0000000000000:
        return NEG_INF
    if x == INF:
        return INF
    absx = x & ~SIGN
    f = 0
    iu = 0
    k = 1
    if f64_lt(absx, SQRT2_M1):  # sqrt(2) - 1
        if f64_lt(absx, TWO_M29):
            if f64_lt(absx, TWO_M54):
                return x
            return f64_sub(x, f64_mul(f64_mul(x, x), HALF))
        if f64_lt(SQRT2_2_M1, x):  # sqrt(2)/2 - 1
            k = 0
            f = x
            iu = 1
    c = 0
    if k != 0:
        if f64_lt(absx, TWO_53):
            u = f64_add(ONE, x)
            iu = u
            k = (iu >> 52) - 1023
            c = f64_sub(ONE, f64_sub(u, x)) if slt(0, k) else f64_sub(x, f64_sub(u, ONE))
            c = f64_div(c, u)
        else:
            u = x
            iu = u
            k = (iu >> 52) - 1023
            c = 0
        iu = iu & ((1 << 52) - 1)
        if iu < 0x0006A09E667F3BCD:  # the fraction of sqrt(2)
            u = iu | ONE
        else:
            k += 1
            u = iu | HALF
            iu = ((1 << 52) - iu) >> 2
        f = f64_sub(u, ONE)
    hfsq = f64_mul(f64_mul(HALF, f), f)
    kf = f64_from_word(k)
    if iu == 0:
        if (f << 1) == 0:
            if k == 0:
                return 0
            c = f64_add(c, f64_mul(kf, LN2_LO))
            return f64_add(f64_mul(kf, LN2_HI), c)
        big_r = f64_mul(hfsq, f64_sub(ONE, f64_mul(TWO_THIRDS, f)))
        if k == 0:
            return f64_sub(f, big_r)
        inner = f64_sub(big_r, f64_add(f64_mul(kf, LN2_LO), c))
        return f64_sub(f64_mul(kf, LN2_HI), f64_sub(inner, f))
    s = f64_div(f, f64_add(TWO, f))
    z = f64_mul(s, s)
    big_r = f64_add(_L6, f64_mul(z, _L7))
    big_r = f64_add(_L5, f64_mul(z, big_r))
    big_r = f64_add(_L4, f64_mul(z, big_r))
    big_r = f64_add(_L3, f64_mul(z, big_r))
    big_r = f64_add(_L2, f64_mul(z, big_r))
    big_r = f64_mul(z, f64_add(_L1, f64_mul(z, big_r)))
    if k == 0:
        return f64_sub(f, f64_sub(hfsq, f64_mul(s, f64_add(hfsq, big_r))))
    inner = f64_add(f64_mul(s, f64_add(hfsq, big_r)), f64_add(f64_mul(kf, LN2_LO), c))
    return f64_sub(f64_mul(kf, LN2_HI), f64_sub(f64_sub(hfsq, inner), f))


# -- sin, cos, tan -------------------------------------------------------------------------------

#: pi/4 in three parts (Cephes): the first two have trailing zeros, so y * PI4A and
#: y * PI4B are exact for y below 2**29.
_PI4A: Final = 0x3FE921FB40000000
_PI4B: Final = 0x3E64442D00000000
_PI4C: Final = 0x3CE8469898CC5170
#: Above this, Payne-Hanek reduction (see ``trig_reduce``).
_REDUCE_THRESHOLD: Final = 0x41C0000000000000  # 2**29


def reduce_octant(x: int) -> int:
    """For ``0 <= x``: the octant ``j`` of ``x`` (into ``_trig_octant``, 0..7 once even)
    and the remainder ``z`` it returns, as Go's sin, cos and tan reduce."""
    if f64_lt(x, _REDUCE_THRESHOLD):
        j = double_to_word(f64_mul(x, FOUR_PI))
        y = f64_from_word(j)
        if j & 1:
            j += 1
            y = f64_add(y, ONE)
        _trig_octant.value = j & 7
        z = f64_sub(x, f64_mul(y, _PI4A))
        z = f64_sub(z, f64_mul(y, _PI4B))
        return f64_sub(z, f64_mul(y, _PI4C))
    return trig_reduce(x)


def sin_poly(z: int, zz: int) -> int:
    """``z + z*zz*P(zz)``: the sine on [0, pi/4]."""
    p = f64_add(f64_mul(SIN_0, zz), SIN_1)
    p = f64_add(f64_mul(p, zz), SIN_2)
    p = f64_add(f64_mul(p, zz), SIN_3)
    p = f64_add(f64_mul(p, zz), SIN_4)
    p = f64_add(f64_mul(p, zz), SIN_5)
    return f64_add(z, f64_mul(f64_mul(z, zz), p))


def cos_poly(zz: int) -> int:
    """``1 - zz/2 + zz*zz*Q(zz)``: the cosine on [0, pi/4]."""
    q = f64_add(f64_mul(COS_0, zz), COS_1)
    q = f64_add(f64_mul(q, zz), COS_2)
    q = f64_add(f64_mul(q, zz), COS_3)
    q = f64_add(f64_mul(q, zz), COS_4)
    q = f64_add(f64_mul(q, zz), COS_5)
    return f64_add(f64_sub(ONE, f64_mul(HALF, zz)), f64_mul(f64_mul(zz, zz), q))


def go_sin(x: int) -> int:
    if (x << 1) == 0 or is_nan(x):
        return x
    if f64_is_inf(x):
        return NAN
    sign = x & SIGN
    z = reduce_octant(x & ~SIGN)
    j = _trig_octant.value
    if j > 3:
        sign = sign ^ SIGN
        j -= 4
    zz = f64_mul(z, z)
    y = cos_poly(zz) if j == 1 or j == 2 else sin_poly(z, zz)
    return y ^ sign


def go_cos(x: int) -> int:
    if is_nan(x) or f64_is_inf(x):
        return NAN
    sign = 0
    z = reduce_octant(x & ~SIGN)
    j = _trig_octant.value
    if j > 3:
        j -= 4
        sign = SIGN
    if j > 1:
        sign = sign ^ SIGN
    zz = f64_mul(z, z)
    y = sin_poly(z, zz) if j == 1 or j == 2 else cos_poly(zz)
    return y ^ sign


def go_tan(x: int) -> int:
    if (x << 1) == 0 or is_nan(x):
        return x
    if f64_is_inf(x):
        return NAN
    sign = x & SIGN
    z = reduce_octant(x & ~SIGN)
    j = _trig_octant.value
    zz = f64_mul(z, z)
    if f64_lt(TAN_SMALL, zz):
        p = f64_add(f64_mul(TAN_P0, zz), TAN_P1)
        p = f64_add(f64_mul(p, zz), TAN_P2)
        q = f64_add(zz, TAN_Q1)
        q = f64_add(f64_mul(q, zz), TAN_Q2)
        q = f64_add(f64_mul(q, zz), TAN_Q3)
        q = f64_add(f64_mul(q, zz), TAN_Q4)
        y = f64_add(z, f64_mul(z, f64_div(f64_mul(zz, p), q)))
    else:
        y = z
    if j & 2:
        y = f64_div(0xBFF0000000000000, y)
    return y ^ sign


def mul_high(a: int, b: int) -> int:
    """The high word of the 128-bit ``a * b``; the low word into ``_mul_low``."""
    a1 = a >> 32
    a0 = a & 0xFFFFFFFF
    b1 = b >> 32
    b0 = b & 0xFFFFFFFF
    p00 = a0 * b0
    p01 = a0 * b1
    p10 = a1 * b0
    middle = (p00 >> 32) + (p01 & 0xFFFFFFFF) + (p10 & 0xFFFFFFFF)
    _mul_low.value = (middle << 32) | (p00 & 0xFFFFFFFF)
    return a1 * b1 + (p01 >> 32) + (p10 >> 32) + (middle >> 32)


def pi4_digit(i: int) -> int:
    """Word ``i`` of the binary digits of 4/pi (Go's ``mPi4``: 4/pi is the sum of
    ``digit[i] * 2**(-64 i)``)."""
    if i == 0:
        return 1
    if i == 1:
        return 0x45F306DC9C882A53
    if i == 2:
        return 0xF84EAFA3EA69BB81
    if i == 3:
        return 0xB6C52B3278872083
    if i == 4:
        return 0xFCA2C757BD778AC3
    if i == 5:
        return 0x6E48DC74849BA5C0
    if i == 6:
        return 0x0C925DD413A32439
    if i == 7:
        return 0xFC3BD63962534E7D
    if i == 8:
        return 0xD1046BEA5D768909
    if i == 9:
        return 0xD338E04D68BEFC82
    if i == 10:
        return 0x7323AC7306A673E9
    if i == 11:
        return 0x3908BF177BF25076
    if i == 12:
        return 0x3FF12FFFBC0B301F
    if i == 13:
        return 0xDE5E2316B414DA3E
    if i == 14:
        return 0xDA6CFD9E4F96136E
    if i == 15:
        return 0x9E8C7ECD3CBFD45A
    if i == 16:
        return 0xEA4F758FD7CBE2F6
    if i == 17:
        return 0x7A0E73EF14A525D4
    if i == 18:
        return 0xD7F6BF623F1ABA10
    return 0xAC06608DF8F6D757


def pi4_window(digit: int, shift: int) -> int:
    """64 bits of 4/pi from word ``digit`` shifted left by ``shift`` (0..63)."""
    if shift == 0:
        return pi4_digit(digit)
    return (pi4_digit(digit) << shift) | (pi4_digit(digit + 1) >> (64 - shift))


def trig_reduce(x: int) -> int:
    """Payne-Hanek reduction of ``x >= 2**29`` by pi/4 (Go's ``trigReduce``): the octant
    into ``_trig_octant``, the remainder returned."""
    ix = (x & ((1 << 52) - 1)) | (1 << 52)
    exp = ((x >> 52) & 0x7FF) - 1023 - 52
    digit = (exp + 61) >> 6
    shift = (exp + 61) & 63
    z0 = pi4_window(digit, shift)
    z1 = pi4_window(digit + 1, shift)
    z2 = pi4_window(digit + 2, shift)
    z2hi = mul_high(z2, ix)
    z1hi = mul_high(z1, ix)
    z1lo = _mul_low.value
    z0lo = z0 * ix
    lo = z1lo + z2hi
    hi = z0lo + z1hi + (lo < z1lo)
    j = hi >> 61
    hi = (hi << 3) | (lo >> 61)
    lz = clz64(hi)
    e = 1023 - (lz + 1)
    hi = ((hi << (lz + 1)) | (lo >> (64 - (lz + 1)))) >> 12
    z = hi | (e << 52)
    if j & 1:
        j = (j + 1) & 7
        z = f64_sub(z, ONE)
    _trig_octant.value = j
    return f64_mul(z, PI_4)


# -- inverse trigonometric ------------------------------------------------------------------------


def xatan(x: int) -> int:
    """atan on [0, 0.66] (Cephes)."""
    z = f64_mul(x, x)
    p = f64_add(f64_mul(ATAN_P0, z), ATAN_P1)
    p = f64_add(f64_mul(p, z), ATAN_P2)
    p = f64_add(f64_mul(p, z), ATAN_P3)
    p = f64_add(f64_mul(p, z), ATAN_P4)
    q = f64_add(z, ATAN_Q0)
    q = f64_add(f64_mul(q, z), ATAN_Q1)
    q = f64_add(f64_mul(q, z), ATAN_Q2)
    q = f64_add(f64_mul(q, z), ATAN_Q3)
    q = f64_add(f64_mul(q, z), ATAN_Q4)
    z = f64_div(f64_mul(z, p), q)
    return f64_add(f64_mul(x, z), x)


_MOREBITS: Final = _b(6.123233995736765886130e-17)  # pi/2 = PI_2 + MOREBITS


def satan(x: int) -> int:
    """atan of a positive ``x``, reduced to [0, 0.66]."""
    if f64_le(x, ATAN_REDUCED):
        return xatan(x)
    if f64_lt(TAN_3PI_8, x):  # tan(3 pi / 8)
        return f64_add(f64_sub(PI_2, xatan(f64_div(ONE, x))), _MOREBITS)
    t = xatan(f64_div(f64_sub(x, ONE), f64_add(x, ONE)))
    return f64_add(f64_add(PI_4, t), f64_mul(HALF, _MOREBITS))


def go_atan(x: int) -> int:
    if (x << 1) == 0 or is_nan(x):
        return x
    if x < SIGN:
        return satan(x)
    return satan(x ^ SIGN) ^ SIGN


def go_asin(x: int) -> int:
    if (x << 1) == 0 or is_nan(x):
        return x
    sign = x & SIGN
    x = x & ~SIGN
    if f64_lt(ONE, x):
        return NAN
    temp = f64_sqrt(f64_sub(ONE, f64_mul(x, x)))
    if f64_lt(ASIN_SPLIT, x):
        temp = f64_sub(PI_2, satan(f64_div(temp, x)))
    else:
        temp = satan(f64_div(x, temp))
    return temp ^ sign


def go_acos(x: int) -> int:
    return f64_sub(PI_2, go_asin(x))


def go_atan2(y: int, x: int) -> int:
    if is_nan(y) or is_nan(x):
        return NAN
    if (y << 1) == 0:
        if x < SIGN:  # x >= 0 and not -0
            return f64_copysign(0, y)
        return f64_copysign(PI, y)
    if (x << 1) == 0:
        return f64_copysign(PI_2, y)
    if f64_is_inf(x):
        if x == INF:
            if f64_is_inf(y):
                return f64_copysign(PI_4, y)
            return f64_copysign(0, y)
        if f64_is_inf(y):
            return f64_copysign(PI3_4, y)
        return f64_copysign(PI, y)
    if f64_is_inf(y):
        return f64_copysign(PI_2, y)
    q = go_atan(f64_div(y, x))
    if f64_negative(x):
        if f64_le(q, 0):
            return f64_add(q, PI)
        return f64_sub(q, PI)
    return q


# -- hyperbolic ------------------------------------------------------------------------------------


def go_sinh(x: int) -> int:
    sign = 0
    if f64_negative(x):
        x = x ^ SIGN
        sign = SIGN
    if f64_lt(TWENTY_ONE, x):
        temp = f64_div(go_exp(x), TWO)
    elif f64_lt(HALF, x):
        temp = f64_div(f64_sub(go_exp(x), go_exp(x ^ SIGN)), TWO)
    else:
        sq = f64_mul(x, x)
        p = f64_add(f64_mul(SINH_P3, sq), SINH_P2)
        p = f64_add(f64_mul(p, sq), SINH_P1)
        p = f64_mul(f64_add(f64_mul(p, sq), SINH_P0), x)
        q = f64_add(sq, SINH_Q2)
        q = f64_add(f64_mul(q, sq), SINH_Q1)
        q = f64_add(f64_mul(q, sq), SINH_Q0)
        temp = f64_div(p, q)
    return temp ^ sign


def go_cosh(x: int) -> int:
    x = x & ~SIGN
    if f64_lt(TWENTY_ONE, x):
        return f64_div(go_exp(x), TWO)
    return f64_div(f64_add(go_exp(x), go_exp(x ^ SIGN)), TWO)


def go_tanh(x: int) -> int:
    z = x & ~SIGN
    if f64_lt(TANH_LIMIT, z):
        return f64_copysign(ONE, x)
    if f64_ge(z, TANH_SPLIT):
        s = go_exp(f64_mul(TWO, z))
        z = f64_sub(ONE, f64_div(TWO, f64_add(s, ONE)))
        if f64_negative(x):
            z = z ^ SIGN
        return z
    if (x << 1) == 0:
        return x
    s = f64_mul(x, x)
    p = f64_add(f64_mul(TANH_P0, s), TANH_P1)
    p = f64_add(f64_mul(p, s), TANH_P2)
    q = f64_add(s, TANH_Q0)
    q = f64_add(f64_mul(q, s), TANH_Q1)
    q = f64_add(f64_mul(q, s), TANH_Q2)
    return f64_add(x, f64_div(f64_mul(f64_mul(x, s), p), q))


def go_asinh(x: int) -> int:
    if is_nan(x) or f64_is_inf(x):
        return x
    sign = x & SIGN
    x = x & ~SIGN
    if f64_lt(TWO_28, x):
        temp = f64_add(go_log(x), LN2)
    elif f64_lt(TWO, x):
        root = f64_add(f64_sqrt(f64_add(f64_mul(x, x), ONE)), x)
        temp = go_log(f64_add(f64_mul(TWO, x), f64_div(ONE, root)))
    elif f64_lt(x, TWO_M28):
        temp = x
    else:
        root = f64_add(ONE, f64_sqrt(f64_add(ONE, f64_mul(x, x))))
        temp = go_log1p(f64_add(x, f64_div(f64_mul(x, x), root)))
    return temp ^ sign


def go_acosh(x: int) -> int:
    if f64_lt(x, ONE) or is_nan(x):
        return NAN
    if x == ONE:
        return 0
    if f64_ge(x, TWO_28):
        return f64_add(go_log(x), LN2)
    if f64_lt(TWO, x):
        root = f64_add(x, f64_sqrt(f64_sub(f64_mul(x, x), ONE)))
        return go_log(f64_sub(f64_mul(TWO, x), f64_div(ONE, root)))
    t = f64_sub(x, ONE)
    return go_log1p(f64_add(t, f64_sqrt(f64_add(f64_mul(TWO, t), f64_mul(t, t)))))


def go_atanh(x: int) -> int:
    if f64_lt(x, 0xBFF0000000000000) or f64_lt(ONE, x) or is_nan(x):
        return NAN
    if x == ONE:
        return INF
    if x == 0xBFF0000000000000:
        return NEG_INF
    sign = 0
    if f64_negative(x):
        x = x ^ SIGN
        sign = SIGN
    if f64_lt(x, TWO_M28):
        temp = x
    elif f64_lt(x, HALF):
        temp = f64_add(x, x)
        temp = f64_mul(HALF, go_log1p(f64_add(temp, f64_div(f64_mul(temp, x), f64_sub(ONE, x)))))
    else:
        temp = f64_mul(HALF, go_log1p(f64_div(f64_add(x, x), f64_sub(ONE, x))))
    return temp ^ sign


# -- pow, hypot, remainder, gamma --------------------------------------------------------------------


def is_odd_int(x: int) -> int:
    whole = f64_modf(x)
    if (_modf_fraction.value << 1) != 0:
        return 0
    e = (whole >> 52) & 0x7FF
    if e >= 1023 + 53:  # from 2**53 up every double is even (and int64 saturates)
        return 0
    return double_to_word(whole) & 1


def go_pow(x: int, y: int) -> int:
    if (y << 1) == 0 or x == ONE:
        return ONE
    if is_nan(x) or is_nan(y):
        return NAN
    if (x << 1) == 0:
        if f64_negative(y):
            if is_odd_int(y):
                return f64_copysign(INF, x)
            return INF
        if is_odd_int(y):
            return x
        return 0
    if f64_is_inf(y):
        if x == 0xBFF0000000000000:
            return ONE
        if f64_lt(x & ~SIGN, ONE) == (y == INF):
            return 0
        return INF
    if f64_is_inf(x):
        if x == NEG_INF:
            return go_pow(0x8000000000000000, y ^ SIGN)  # Pow(-0, -y)
        if f64_negative(y):
            return 0
        return INF
    if y == HALF:
        return f64_sqrt(x)
    if y == 0xBFE0000000000000:
        return f64_div(ONE, f64_sqrt(x))
    if (f64_trunc(y) == y and f64_lt(y & ~SIGN, ONE_TWENTY_EIGHT)) or y == MINUS_ONE_TWENTY_EIGHT:
        return pow_small_int(x, y)
    yi = f64_modf(y & ~SIGN)
    yf = _modf_fraction.value
    if (yf << 1) != 0 and f64_negative(x):
        return NAN
    if f64_ge(yi, TWO_63):
        # a large even power: it overflows or underflows for all x but -1
        if x == 0xBFF0000000000000:
            return ONE
        if f64_lt(x & ~SIGN, ONE) == (y < SIGN):
            return 0
        return INF
    a1 = ONE
    ae = 0
    if (yf << 1) != 0:
        if f64_lt(HALF, yf):
            yf = f64_sub(yf, ONE)
            yi = f64_add(yi, ONE)
        a1 = go_exp(f64_mul(yf, go_log(x)))
    x1 = f64_frexp(x)
    xe = _frexp_exponent.value
    i = double_to_word(yi)
    while i != 0:
        if slt(xe, 0 - (1 << 12)) or slt(1 << 12, xe):
            ae = ae + xe
            break
        if i & 1:
            a1 = f64_mul(a1, x1)
            ae = ae + xe
        x1 = f64_mul(x1, x1)
        xe = xe << 1
        if f64_lt(x1, HALF):
            x1 = f64_add(x1, x1)
            xe -= 1
        i = i >> 1
    if f64_negative(y):
        a1 = f64_div(ONE, a1)
        ae = 0 - ae
    return f64_ldexp(a1, ae)


def pow_small_int(x: int, y: int) -> int:
    """Go's ``Pow`` for an integral ``y`` from -128 to 127: squarings and products in
    its order."""
    inverse = f64_negative(y)
    n = double_to_word(y & ~SIGN)
    r = ONE
    while n > 1:
        tmp = x
        c = 1
        while c <= (n >> 1):
            tmp = f64_mul(tmp, tmp)
            c = c * 2
        n = n - c
        r = f64_mul(r, tmp)
    while n > 0:
        r = f64_mul(r, x)
        n -= 1
    if inverse:
        return f64_div(ONE, r)
    return r


def go_hypot(p: int, q: int) -> int:
    if f64_is_inf(p) or f64_is_inf(q):
        return INF
    if is_nan(p) or is_nan(q):
        return NAN
    p = p & ~SIGN
    q = q & ~SIGN
    if f64_lt(p, q):
        t = p
        p = q
        q = t
    if (p << 1) == 0:
        return 0
    q = f64_div(q, p)
    return f64_mul(p, f64_sqrt(f64_add(ONE, f64_mul(q, q))))


def go_remainder(x: int, y: int) -> int:
    if is_nan(x) or is_nan(y) or f64_is_inf(x) or (y << 1) == 0:
        return NAN
    if f64_is_inf(y):
        return x
    sign = 0
    if f64_negative(x):
        x = x ^ SIGN
        sign = SIGN
    y = y & ~SIGN
    if x == y:
        return sign
    if f64_le(y, HALF_MAX):
        x = f64_fmod(x, f64_add(y, y))
    if f64_lt(y, REMAINDER_TINY):
        if f64_lt(y, f64_add(x, x)):
            x = f64_sub(x, y)
            if f64_ge(f64_add(x, x), y):
                x = f64_sub(x, y)
    else:
        y_half = f64_mul(HALF, y)
        if f64_lt(y_half, x):
            x = f64_sub(x, y)
            if f64_ge(x, y_half):
                x = f64_sub(x, y)
    return x ^ sign


def stirling(x: int) -> int:
    """Go's Stirling formula for the gamma function: a pair to multiply (the second
    into ``_stirling_second``)."""
    if f64_lt(STIRLING_LIMIT, x):
        _stirling_second.value = ONE
        return INF
    w = f64_div(ONE, x)
    s = f64_add(f64_mul(STIRLING_0, w), STIRLING_1)
    s = f64_add(f64_mul(s, w), STIRLING_2)
    s = f64_add(f64_mul(s, w), STIRLING_3)
    s = f64_add(f64_mul(s, w), STIRLING_4)
    w = f64_add(ONE, f64_mul(w, s))
    y1 = go_exp(x)
    y2 = ONE
    if f64_lt(MAX_STIRLING, x):  # Pow would overflow
        v = go_pow(x, f64_sub(f64_mul(HALF, x), QUARTER))
        y2 = f64_div(v, y1)
        y1 = v
    else:
        y1 = f64_div(go_pow(x, f64_sub(x, HALF)), y1)
    _stirling_second.value = f64_mul(f64_mul(SQRT_2PI, w), y2)
    return y1


def go_gamma(x: int) -> int:
    if is_nan(x) or x == NEG_INF:
        return NAN
    if f64_negative(x):
        f64_modf(x)
        if (_modf_fraction.value << 1) == 0:  # a negative integer
            return NAN
    if x == INF:
        return INF
    if (x << 1) == 0:
        return x | INF  # +-inf with the zero's sign
    q = x & ~SIGN
    p = f64_floor(q)
    if f64_lt(THIRTY_THREE, q):
        if x < SIGN:
            y1 = stirling(x)
            return f64_mul(y1, _stirling_second.value)
        signgam = ONE
        if (double_to_word(p) & 1) == 0:
            signgam = 0xBFF0000000000000
        z = f64_sub(q, p)
        if f64_lt(HALF, z):
            p = f64_add(p, ONE)
            z = f64_sub(q, p)
        z = f64_mul(q, go_sin(f64_mul(PI, z)))
        if (z << 1) == 0:
            return f64_copysign(INF, signgam)
        sq1 = stirling(q)
        sq2 = _stirling_second.value
        absz = z & ~SIGN
        d = f64_mul(f64_mul(absz, sq1), sq2)
        z = f64_div(f64_div(f64_div(PI, absz), sq1), sq2) if f64_is_inf(d) else f64_div(PI, d)
        return f64_mul(signgam, z)
    z = ONE
    while f64_ge(x, THREE):
        x = f64_sub(x, ONE)
        z = f64_mul(z, x)
    while f64_negative(x):
        if f64_lt(MINUS_1E_9, x):
            return gamma_small(x, z)
        z = f64_div(z, x)
        x = f64_add(x, ONE)
    while f64_lt(x, TWO):
        if f64_lt(x, ONE_E_9):
            return gamma_small(x, z)
        z = f64_div(z, x)
        x = f64_add(x, ONE)
    if x == TWO:
        return z
    x = f64_sub(x, TWO)
    p = f64_add(f64_mul(x, GAMMA_P0), GAMMA_P1)
    p = f64_add(f64_mul(p, x), GAMMA_P2)
    p = f64_add(f64_mul(p, x), GAMMA_P3)
    p = f64_add(f64_mul(p, x), GAMMA_P4)
    p = f64_add(f64_mul(p, x), GAMMA_P5)
    p = f64_add(f64_mul(p, x), GAMMA_P6)
    q = f64_add(f64_mul(x, GAMMA_Q0), GAMMA_Q1)
    q = f64_add(f64_mul(q, x), GAMMA_Q2)
    q = f64_add(f64_mul(q, x), GAMMA_Q3)
    q = f64_add(f64_mul(q, x), GAMMA_Q4)
    q = f64_add(f64_mul(q, x), GAMMA_Q5)
    q = f64_add(f64_mul(q, x), GAMMA_Q6)
    q = f64_add(f64_mul(q, x), GAMMA_Q7)
    return f64_div(f64_mul(z, p), q)


def gamma_small(x: int, z: int) -> int:
    if (x << 1) == 0:
        return INF
    euler = EULER
    return f64_div(z, f64_mul(f64_add(ONE, f64_mul(euler, x)), x))


# -- the module's builtins ---------------------------------------------------------------------------


def math_number(v: int, builtin: int, position: int) -> int:
    """The bits of an argument: a float's, or those of the float nearest an int (an
    infinity when it is too large, as Go's ``Int.Float``); any other value is Go's
    ``NAME: for parameter P: got T, want float or int``."""
    if v & 1:
        return small_int_bits(v)
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_FLOAT:
        return load(v + L.FLOAT_BITS)
    if tag == L.TAG_BIGINT:
        return int_to_bits(v)
    b = buf_new(64)
    buf_str(b, builtin)
    buf_str(b, text(": for parameter "))
    buf_decimal(b, position)
    buf_str(b, text(": got "))
    buf_str(b, type_name(v))
    buf_str(b, text(", want float or int"))
    error(buf_to_string(b, L.TAG_STRING), builtin)
    return 0


def math_rounded(x: int, builtin: int, up: int) -> int:
    """``ceil`` (``up``) and ``floor``: an int stays; a float is rounded, then made an
    int (Go's ``NumberToInt``: an error for a NaN or an infinity)."""
    if tag_of(x) == L.TAG_INT:
        return x
    if tag_of(x) != L.TAG_FLOAT:
        b = buf_new(48)
        buf_str(b, text("got "))
        buf_str(b, type_name(x))
        buf_str(b, text(", want float or int"))
        error(buf_to_string(b, L.TAG_STRING), builtin)
    bits = load(x + L.FLOAT_BITS)
    bits = f64_ceil(bits) if up else f64_floor(bits)
    return bits_int_value(bits, text(""), builtin)


def math_ceil(x: int) -> int:
    return math_rounded(x, text("ceil"), 1)


def math_floor(x: int) -> int:
    return math_rounded(x, text("floor"), 0)


def math_fabs(x: int) -> int:
    return float_new(math_number(x, text("fabs"), 1) & ~SIGN)


def math_copysign(x: int, y: int) -> int:
    a = math_number(x, text("copysign"), 1)
    return float_new(f64_copysign(a, math_number(y, text("copysign"), 2)))


def math_mod(x: int, y: int) -> int:
    a = math_number(x, text("mod"), 1)
    return float_new(f64_fmod(a, math_number(y, text("mod"), 2)))


def math_pow(x: int, y: int) -> int:
    a = math_number(x, text("pow"), 1)
    return float_new(go_pow(a, math_number(y, text("pow"), 2)))


def math_remainder(x: int, y: int) -> int:
    a = math_number(x, text("remainder"), 1)
    return float_new(go_remainder(a, math_number(y, text("remainder"), 2)))


def math_round(x: int) -> int:
    return float_new(f64_round(math_number(x, text("round"), 1)))


def math_exp(x: int) -> int:
    return float_new(go_exp(math_number(x, text("exp"), 1)))


def math_sqrt(x: int) -> int:
    return float_new(f64_sqrt(math_number(x, text("sqrt"), 1)))


def math_acos(x: int) -> int:
    return float_new(go_acos(math_number(x, text("acos"), 1)))


def math_asin(x: int) -> int:
    return float_new(go_asin(math_number(x, text("asin"), 1)))


def math_atan(x: int) -> int:
    return float_new(go_atan(math_number(x, text("atan"), 1)))


def math_atan2(y: int, x: int) -> int:
    a = math_number(y, text("atan2"), 1)
    return float_new(go_atan2(a, math_number(x, text("atan2"), 2)))


def math_cos(x: int) -> int:
    return float_new(go_cos(math_number(x, text("cos"), 1)))


def math_hypot(x: int, y: int) -> int:
    a = math_number(x, text("hypot"), 1)
    return float_new(go_hypot(a, math_number(y, text("hypot"), 2)))


def math_sin(x: int) -> int:
    return float_new(go_sin(math_number(x, text("sin"), 1)))


def math_tan(x: int) -> int:
    return float_new(go_tan(math_number(x, text("tan"), 1)))


def math_degrees(x: int) -> int:
    """Go's ``360 * x / (2 * math.Pi)``."""
    product = f64_mul(THREE_SIXTY, math_number(x, text("degrees"), 1))
    return float_new(f64_div(product, TWO_PI))


def math_radians(x: int) -> int:
    """Go's ``2 * math.Pi * x / 360``."""
    product = f64_mul(TWO_PI, math_number(x, text("radians"), 1))
    return float_new(f64_div(product, THREE_SIXTY))


def math_acosh(x: int) -> int:
    return float_new(go_acosh(math_number(x, text("acosh"), 1)))


def math_asinh(x: int) -> int:
    return float_new(go_asinh(math_number(x, text("asinh"), 1)))


def math_atanh(x: int) -> int:
    return float_new(go_atanh(math_number(x, text("atanh"), 1)))


def math_cosh(x: int) -> int:
    return float_new(go_cosh(math_number(x, text("cosh"), 1)))


def math_sinh(x: int) -> int:
    return float_new(go_sinh(math_number(x, text("sinh"), 1)))


def math_tanh(x: int) -> int:
    return float_new(go_tanh(math_number(x, text("tanh"), 1)))


def math_log(x: int, base: int) -> int:
    """``log(x)``, or ``log(x, base)``: Go's ``Log(x) / Log(base)``, and its error for
    base 1."""
    a = math_number(x, text("log"), 1)
    b = E
    if base != 0:
        b = math_number(base, text("log"), 2)
    if b == ONE:
        error(text("division by zero"), text("log"))
    return float_new(f64_div(go_log(a), go_log(b)))


def math_gamma(x: int) -> int:
    return float_new(go_gamma(math_number(x, text("gamma"), 1)))
