"""Arbitrary-precision integers.

A big int is a heap object (:data:`~kforge.starlark.layout.TAG_BIGINT`): a sign and
a magnitude of 64-bit limbs, least significant first, no leading zero limb.  Every ``big_*`` function takes int values of either kind (small or big)
and returns the canonical form: a small int whenever the value fits one.

How the work is laid out, and why:

* A small operand is first written into one of two static big-int-shaped *operand
  slots* (:func:`big_view`), so every algorithm sees only limb arrays.
* The magnitude functions (``mag_*``) work on limb addresses and counts.  A result is
  allocated with room for its largest possible size, written in place, then made
  canonical by :func:`big_finish`: leading zero limbs are dropped, and a value that
  fits a small int becomes one.  When the result is the last allocation (not cut
  from a free run), the part of it that is not needed goes back to the heap at once.
* Temporaries (the normalized operands of a long division, the digits of a decimal
  conversion) live in one scratch block that grows as needed and is reused.
* Limbs fill their words, so that a sum, a difference or a bitwise operation takes
  one step per 64 bits and a result's memory is no larger than its value; a carry or
  borrow is read off the top bits of the operands and the result, since no
  instruction reads the carry flag.  Products and quotients are made of 32-bit
  *halves* (the machine has no high-half multiply, and ``DIV`` divides one word by
  another): by a half (a factorial's step, ``n % 10``, a decimal conversion) a limb
  at a time, two halves each; otherwise the operands are split into arrays of halves,
  one per word, in the scratch block, multiplied or divided there, and the result
  joined back into limbs (linear work beside the quadratic).
* Loops step pointers and keep their constants in locals, since every instruction is
  a tick; an unrolled turn names each limb's values apart (a reused name costs a
  move per use).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    Global,
    heap_pointer,
    inline,
    load,
    sar,
    set_heap_pointer,
    slt,
    store,
    storeb,
    text,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import (
        alloc,
        alloc_block,
        buf_byte,
        buf_decimal,
        buf_reserve,
        error,
    )
    from kforge.starlark.runtime.softfloat import clz64

#: The base of the chunks a decimal conversion divides off (the largest power of ten
#: below 2**32).
_BILLION: Final = 1_000_000_000
_HALF_BASE: Final = 1 << 32
#: The magnitude of the smallest small int, the one magnitude that is small only when
#: negative.
_SMALL_EDGE: Final = 1 << 62
#: Bytes per operand slot: header, info, one limb (any small int's magnitude), a spare word.
_SLOT: Final = 32

_bigint_operand_slots = Global(__name__)
_bigint_scratch = Global(__name__)
_bigint_scratch_words = Global(__name__)


# -- small ints and machine words ---------------------------------------------------------


def int_from_word(n: int) -> int:
    """The int whose value is the signed machine word ``n``."""
    if slt(n, 0):
        return int_from_magnitude(0 - n, 1)
    return int_from_magnitude(n, 0)


def int_from_magnitude(m: int, sign: int) -> int:
    """The int with magnitude ``m`` (a word) and ``sign``: a small int if it fits,
    else a big int of one limb (its magnitude is 2**62 or more)."""
    if m < _SMALL_EDGE or (sign != 0 and m == _SMALL_EDGE):
        if sign != 0:
            return ((0 - m) << 1) | 1
        return (m << 1) | 1
    r = big_alloc(1)
    store(r + L.BIGINT_INFO, (sign << 32) | 1)
    store(r + L.BIGINT_LIMBS, m)
    return r


def word_of(limbs: int) -> int:
    """The magnitude of at most one limb as a word (an operand slot always holds its
    limb, zero for the int 0)."""
    return load(limbs)


def big_to_word(v: int) -> int:
    """``v`` (an int of either kind) as a signed machine word; only for values that fit."""
    if v & 1:
        return sar(v, 1)
    magnitude = load(v + L.BIGINT_LIMBS)
    if load(v + L.BIGINT_INFO) >> 32:
        return 0 - magnitude
    return magnitude


def int_fits_int32(v: int) -> int:
    """1 if ``v`` is an int in the signed 32-bit range (Go's ``AsInt32``)."""
    if (v & 1) == 0:
        return 0
    return sar(v, 1) + (1 << 31) < (1 << 32)


# -- views, results, scratch --------------------------------------------------------------


@inline
def big_view(v: int, slot: int) -> int:
    """``v`` as a big int object: itself if big; a small int is written into operand
    slot ``slot`` (0 or 1), valid until that slot is used again."""
    if v & 1:
        return small_view(v, slot)
    return v


def small_view(v: int, slot: int) -> int:
    """The small int ``v`` written into operand slot ``slot`` as a big int object."""
    o = _bigint_operand_slots.value
    if o == 0:
        o = make_operand_slots()
    if slot:
        o += _SLOT
    info = 0
    n = v >> 1
    if v >= L.SIGN_BIT:  # negative: -v is twice the magnitude
        n = (1 - v) >> 1
        info = 1 << 32
    if n != 0:
        info += 1
    store(o + L.BIGINT_INFO, info)
    store(o + L.BIGINT_LIMBS, n)
    return o


def make_operand_slots() -> int:
    """The two operand slots of :func:`big_view`, made on first use and kept."""
    slots = alloc_block(L.TAG_BLOCK, 2 * _SLOT)  # two big ints in one raw block
    store(slots, L.TAG_BIGINT)
    store(slots + _SLOT, L.TAG_BIGINT)
    _bigint_operand_slots.value = slots
    return slots


def limb_count(x: int) -> int:
    return load(x + L.BIGINT_INFO) & L.BIGINT_COUNT_MASK


def sign_of(x: int) -> int:
    """1 if the big int object ``x`` is negative, else 0."""
    return load(x + L.BIGINT_INFO) >> 32


@inline
def big_alloc(count: int) -> int:
    """A zeroed big int object with room for ``count`` limbs, to be passed to
    :func:`big_finish` (or given its info word) before anything else is allocated."""
    r = alloc(L.BIGINT_LIMBS + 8 * count)
    store(r, L.TAG_BIGINT)
    return r


def big_finish_top(r: int, count: int, sign: int) -> int:
    """:func:`big_finish` for a result of ``count`` limbs or one fewer, whose limb
    below the last is not zero (a sum or a product by one limb, whose last limb is
    the carry): no limbs to scan, and the last one's room given back if it is zero."""
    if count <= 2:  # the result may fit a small int
        return big_finish(r, count, sign)
    end = r + L.BIGINT_LIMBS + (count << 3)
    info = (sign << 32) | count
    if load(end - 8) == 0:
        info -= 1
        if heap_pointer() == end:
            set_heap_pointer(end - 8)
    store(r + L.BIGINT_INFO, info)
    return r


def big_finish(r: int, count: int, sign: int) -> int:
    """The canonical int for the magnitude in ``r`` 's first ``count`` limbs with
    ``sign``: a small int if it fits (``r`` is then given back to the heap), else ``r``
    without its leading zero limbs (whose room is given back)."""
    limbs = r + L.BIGINT_LIMBS
    end = limbs + 8 * count
    top = end
    while top > limbs:
        if load(top - 8) != 0:
            break
        top -= 8
    used = (top - limbs) >> 3
    if used <= 1:
        m = 0
        if used != 0:
            m = load(limbs)
        if m < _SMALL_EDGE or (sign != 0 and m == _SMALL_EDGE):
            if heap_pointer() == end:
                # memory above the heap pointer must stay zeroed for the next alloc
                p = r
                while p < top:
                    store(p, 0)
                    p += 8
                set_heap_pointer(r)
            else:  # a block the collector can still walk past (it is garbage)
                store(r + L.BIGINT_INFO, count)
            if sign != 0:
                return ((0 - m) << 1) | 1
            return (m << 1) | 1
    store(r + L.BIGINT_INFO, (sign << 32) | used)
    if heap_pointer() == end:
        set_heap_pointer(top)
    return r


def scratch(words: int) -> int:
    """The scratch block, with room for at least ``words`` words (its contents are
    whatever the last user left).  Call it before allocating a result."""
    if words > _bigint_scratch_words.value:
        wanted = 2 * _bigint_scratch_words.value
        if wanted < words:
            wanted = words
        if wanted < 64:
            wanted = 64
        _bigint_scratch.value = alloc_block(L.TAG_BLOCK, 8 * wanted)
        _bigint_scratch_words.value = wanted
    return _bigint_scratch.value


def big_prepare(words: int) -> None:
    """Make the operand slots and a scratch block of ``words`` words now, so that big-int
    work between a heap mark and its release (``heap_release``) allocates nothing that
    must outlive it."""
    small_view(1, 0)
    scratch(words)


# -- magnitudes -----------------------------------------------------------------------------


def mag_compare(p: int, n: int, q: int, m: int) -> int:
    """-1, 0 or 1 as the magnitude ``p[0:n]`` is below, equal to or above ``q[0:m]``
    (both without leading zero limbs)."""
    if n != m:
        if n < m:
            return 0 - 1
        return 1
    i = 8 * n
    while i > 0:
        i -= 8
        x = load(p + i)
        y = load(q + i)
        if x != y:
            if x < y:
                return 0 - 1
            return 1
    return 0


def mag_add(r: int, p: int, n: int, q: int, m: int) -> None:
    """``r[0:n+1] = p[0:n] + q[0:m]`` for ``n >= m``, six limbs a turn (64
    instructions: the fast tier cuts a longer loop into two blocks, which runs slower).

    No instruction reads a carry flag, so each limb's carry out is read off the top
    bits of its operands and its sum ``s = x + y + carry``: where ``x`` and ``y``
    agree, the carry is their top bit, and where they differ it is the complement of
    the sum's, which ``((x ^ s) | (y ^ s)) ^ s`` gives in one expression."""
    top = 63
    step = 8
    turn = 48
    carry = 0
    end = q + (m << 3)
    lead = q + ((m % 6) << 3)  # the limbs before the first whole turn
    while q < lead:
        x = load(p)
        y = load(q)
        s = x + y + carry
        store(r, s)
        carry = (((x ^ s) | (y ^ s)) ^ s) >> top
        p += step
        q += step
        r += step
    while q < end:
        x0 = load(p)
        y0 = load(q)
        s0 = x0 + y0 + carry
        store(r, s0)
        carry = (((x0 ^ s0) | (y0 ^ s0)) ^ s0) >> top
        x1 = load(p + 8)
        y1 = load(q + 8)
        s1 = x1 + y1 + carry
        store(r + 8, s1)
        carry = (((x1 ^ s1) | (y1 ^ s1)) ^ s1) >> top
        x2 = load(p + 16)
        y2 = load(q + 16)
        s2 = x2 + y2 + carry
        store(r + 16, s2)
        carry = (((x2 ^ s2) | (y2 ^ s2)) ^ s2) >> top
        x3 = load(p + 24)
        y3 = load(q + 24)
        s3 = x3 + y3 + carry
        store(r + 24, s3)
        carry = (((x3 ^ s3) | (y3 ^ s3)) ^ s3) >> top
        x4 = load(p + 32)
        y4 = load(q + 32)
        s4 = x4 + y4 + carry
        store(r + 32, s4)
        carry = (((x4 ^ s4) | (y4 ^ s4)) ^ s4) >> top
        x5 = load(p + 40)
        y5 = load(q + 40)
        s5 = x5 + y5 + carry
        store(r + 40, s5)
        carry = (((x5 ^ s5) | (y5 ^ s5)) ^ s5) >> top
        p += turn
        q += turn
        r += turn
    end = p + ((n - m) << 3)
    while p < end and carry != 0:  # the carry goes on while the limbs are all ones
        s = load(p) + carry
        store(r, s)
        if s != 0:
            carry = 0
        p += step
        r += step
    store(r + (end - p), carry)
    if p < end:
        copy_limbs(r, p, (end - p) >> 3)


def mag_sub(r: int, p: int, n: int, q: int, m: int) -> None:
    """``r[0:n] = p[0:n] - q[0:m]`` for ``p >= q`` (``r`` may be ``p`` or ``q``), four
    limbs a turn.  As in :func:`mag_add`, each borrow out of ``d = x - y - borrow`` is
    read off top bits: ``y`` 's where ``x`` and ``y`` differ, else ``d`` 's, which
    ``((x ^ y) | (d ^ y)) ^ x`` gives."""
    top = 63
    step = 8
    turn = 32
    borrow = 0
    end = q + (m << 3)
    lead = q + ((m & 3) << 3)
    while q < lead:
        x = load(p)
        y = load(q)
        d = x - y - borrow
        store(r, d)
        borrow = (((x ^ y) | (d ^ y)) ^ x) >> top
        p += step
        q += step
        r += step
    while q < end:
        x0 = load(p)
        y0 = load(q)
        d0 = x0 - y0 - borrow
        store(r, d0)
        borrow = (((x0 ^ y0) | (d0 ^ y0)) ^ x0) >> top
        x1 = load(p + 8)
        y1 = load(q + 8)
        d1 = x1 - y1 - borrow
        store(r + 8, d1)
        borrow = (((x1 ^ y1) | (d1 ^ y1)) ^ x1) >> top
        x2 = load(p + 16)
        y2 = load(q + 16)
        d2 = x2 - y2 - borrow
        store(r + 16, d2)
        borrow = (((x2 ^ y2) | (d2 ^ y2)) ^ x2) >> top
        x3 = load(p + 24)
        y3 = load(q + 24)
        d3 = x3 - y3 - borrow
        store(r + 24, d3)
        borrow = (((x3 ^ y3) | (d3 ^ y3)) ^ x3) >> top
        p += turn
        q += turn
        r += turn
    end = p + ((n - m) << 3)
    while p < end and borrow != 0:  # the borrow goes on while the limbs are zero
        x = load(p)
        store(r, x - borrow)
        if x != 0:
            borrow = 0
        p += step
        r += step
    if p < end and p != r:
        copy_limbs(r, p, (end - p) >> 3)


def mag_increment(p: int, n: int) -> None:
    """Add 1 to ``p[0:n]`` in place (the caller leaves room for a carry limb)."""
    end = p + 8 * n
    while p < end:
        s = load(p) + 1
        store(p, s)
        if s != 0:
            return
        p += 8


def mag_decrement(p: int) -> None:
    """Subtract 1 from the non-zero magnitude at ``p`` in place."""
    while load(p) == 0:
        store(p, L.LIMB_MASK)
        p += 8
    store(p, load(p) - 1)


def mag_mul(r: int, p: int, n: int, q: int, m: int, work: int) -> None:
    """``r[0:n+m] = p[0:n] * q[0:m]`` (pass the longer operand as ``q``), computed on
    32-bit halves (a half's product plus two halves fits a word): both operands are
    split into halves in ``work`` (``mul_scratch_words(n + m)`` words), multiplied
    there by :func:`halves_mul`, and the product joined back into limbs."""
    a = work
    b = a + (n << 4)
    t = b + (m << 4)
    split_halves(a, p, n)
    split_halves(b, q, m)
    end = t + ((n + m) << 4)
    z = t
    while z < end:
        store(z, 0)
        z += 8
    halves_mul(t, a, half_count(p, n), b, half_count(q, m))
    join_halves(r, t, n + m)


def mul_scratch_words(limbs: int) -> int:
    """The scratch words :func:`mag_mul` needs for operands of ``limbs`` limbs in all."""
    return limbs << 2


@inline
def half_count(p: int, n: int) -> int:
    """The 32-bit halves of the ``n`` limbs at ``p`` (``n >= 1``, the top one not zero),
    without a leading zero half."""
    if load(p + (n << 3) - 8) >> 32:
        return n << 1
    return (n << 1) - 1


@inline
def split_halves(h: int, p: int, n: int) -> None:
    """``h[0:2n]``: the 32-bit halves of ``p[0:n]``, low first, one per word."""
    mask = L.HALF_MASK
    shift = 32
    end = p + (n << 3)
    while p < end:
        x = load(p)
        store(h, x & mask)
        store(h + 8, x >> shift)
        p += 8
        h += 16


@inline
def join_halves(r: int, h: int, n: int) -> None:
    """``r[0:n]``: the limbs whose halves are ``h[0:2n]``, one per word."""
    shift = 32
    end = r + (n << 3)
    while r < end:
        store(r, load(h) | (load(h + 8) << shift))
        h += 16
        r += 8


def halves_mul(r: int, p: int, n: int, q: int, m: int) -> None:
    """``r[0:n+m] = p[0:n] * q[0:m]`` on 32-bit halves one per word, ``r`` zeroed on
    entry; the inner loop (over ``q``: pass the longer operand there) takes four
    halves a turn, storing pairs of halves unmasked: the first product of a pair is
    stored whole (its carry lands in the upper half of its word), then the second is
    stored shifted up 32 bits at that word's upper half, which clears the carry and
    fills the next word's lower half (the machine allows unaligned words)."""
    mask = L.HALF_MASK
    shift = 32
    step = 8
    turn = 32
    lead = q + ((m & 3) << 3)
    qend = q + (m << 3)
    pend = p + (n << 3)
    while p < pend:
        x = load(p)
        if x != 0:
            a = q
            t = r
            carry = 0
            while a < lead:
                w = x * load(a) + load(t) + carry
                store(t, w & mask)
                carry = w >> shift
                a += step
                t += step
            while a < qend:
                w = x * load(a) + load(t) + carry
                store(t, w)
                w = x * load(a + 8) + load(t + 8) + (w >> shift)
                store(t + 4, w << shift)
                w = x * load(a + 16) + load(t + 16) + (w >> shift)
                store(t + 16, w)
                w = x * load(a + 24) + load(t + 24) + (w >> shift)
                store(t + 20, w << shift)
                carry = w >> shift
                a += turn
                t += turn
            store(t, carry)
        p += step
        r += step


def mag_mul_limb(r: int, p: int, n: int, x: int, carry: int) -> None:
    """``r[0:n+1] = p[0:n] * x + carry`` for ``x`` and ``carry`` below 2**32, ``r``
    apart from ``p`` (its old words do not matter): one pass, four limbs a turn, each
    limb as two products of a half.  A limb's low product is stored whole and its high
    one at the limb's upper half, which fills it and puts the carry in the next limb's
    lower half, which that limb's own store overwrites."""
    mask = L.HALF_MASK
    shift = 32
    step = 8
    turn = 32
    end = p + (n << 3)
    lead = p + ((n & 3) << 3)
    while p < lead:
        w = load(p)
        lo = x * (w & mask) + carry
        hi = x * (w >> shift) + (lo >> shift)
        store(r, (lo & mask) | (hi << shift))
        carry = hi >> shift
        p += step
        r += step
    while p < end:
        w0 = load(p)
        lo0 = x * (w0 & mask) + carry
        store(r, lo0)
        hi0 = x * (w0 >> shift) + (lo0 >> shift)
        w1 = load(p + 8)
        store(r + 4, hi0)
        lo1 = x * (w1 & mask) + (hi0 >> shift)
        store(r + 8, lo1)
        hi1 = x * (w1 >> shift) + (lo1 >> shift)
        w2 = load(p + 16)
        store(r + 12, hi1)
        lo2 = x * (w2 & mask) + (hi1 >> shift)
        store(r + 16, lo2)
        hi2 = x * (w2 >> shift) + (lo2 >> shift)
        w3 = load(p + 24)
        store(r + 20, hi2)
        lo3 = x * (w3 & mask) + (hi2 >> shift)
        store(r + 24, lo3)
        hi3 = x * (w3 >> shift) + (lo3 >> shift)
        store(r + 28, hi3)
        carry = hi3 >> shift
        p += turn
        r += turn
    store(r, carry)


def mag_div_limb(quotient: int, p: int, n: int, d: int) -> int:
    """``quotient[0:n] = p[0:n] // d`` for ``0 < d < 2**32`` (``quotient`` may be
    ``p``), a half at a time (a remainder and a half make one word), two limbs a
    turn; returns the remainder."""
    mask = L.HALF_MASK
    shift = 32
    step = 8
    turn = 16
    rem = 0
    a = p + (n << 3)
    t = quotient + (n << 3)
    if n & 1:
        a -= step
        t -= step
        w = load(a)
        num = w >> shift
        high = num // d
        num = ((num % d) << shift) | (w & mask)
        store(t, (high << shift) | (num // d))
        rem = num % d
    while a > p:
        a -= turn
        t -= turn
        w1 = load(a + 8)
        num1 = (rem << shift) | (w1 >> shift)
        high1 = num1 // d
        num1 = ((num1 % d) << shift) | (w1 & mask)
        store(t + 8, (high1 << shift) | (num1 // d))
        w0 = load(a)
        num0 = ((num1 % d) << shift) | (w0 >> shift)
        high0 = num0 // d
        num0 = ((num0 % d) << shift) | (w0 & mask)
        store(t, (high0 << shift) | (num0 // d))
        rem = num0 % d
    return rem


def halves_div_half(quotient: int, p: int, n: int, d: int) -> int:
    """``quotient[0:n] = p[0:n] // d`` on 32-bit halves one per word, for
    ``0 < d < 2**32`` (``quotient`` may be ``p``), four halves a turn, one ``DIV`` and
    one ``MOD`` each (a decimal conversion's passes); returns the remainder."""
    shift = 32
    step = 8
    turn = 32
    rem = 0
    a = p + (n << 3)
    t = quotient + (n << 3)
    lead = a - ((n & 3) << 3)
    while a > lead:
        a -= step
        t -= step
        num = (rem << shift) | load(a)
        store(t, num // d)
        rem = num % d
    while a > p:
        a -= turn
        t -= turn
        num = (rem << shift) | load(a + 24)
        store(t + 24, num // d)
        rem = num % d
        num = (rem << shift) | load(a + 16)
        store(t + 16, num // d)
        rem = num % d
        num = (rem << shift) | load(a + 8)
        store(t + 8, num // d)
        rem = num % d
        num = (rem << shift) | load(a)
        store(t, num // d)
        rem = num % d
    return rem


def mag_mod_limb(p: int, n: int, d: int) -> int:
    """``p[0:n] % d`` for ``0 < d < 2**32``, a half at a time, two limbs a turn."""
    mask = L.HALF_MASK
    shift = 32
    step = 8
    turn = 16
    rem = 0
    a = p + (n << 3)
    if n & 1:
        a -= step
        w = load(a)
        rem = (w >> shift) % d
        rem = ((rem << shift) | (w & mask)) % d
    while a > p:
        a -= turn
        w = load(a + 8)
        rem = ((rem << shift) | (w >> shift)) % d
        rem = ((rem << shift) | (w & mask)) % d
        w = load(a)
        rem = ((rem << shift) | (w >> shift)) % d
        rem = ((rem << shift) | (w & mask)) % d
    return rem


def mag_divmod(quotient: int, remainder: int, p: int, n: int, q: int, m: int, work: int) -> int:
    """Long division of ``p[0:n]`` by ``q[0:m]`` (``|p| >= |q| >= 2**32``) on 32-bit
    halves: ``quotient[0:n-m+1]`` and ``remainder[0:m]`` (either may be 0 when not
    wanted, else zeroed), using ``divmod_scratch_words(n, m)`` words at ``work``.
    Returns 1 if the remainder is not zero."""
    n2 = half_count(p, n)
    m2 = half_count(q, m)
    a = work
    b = a + (n << 4)
    hq = b + (m << 4)  # the quotient's halves, and a zero half to join an odd count
    hr = hq + ((n2 - m2 + 2) << 3)  # the remainder's, likewise
    rest = hr + ((m2 + 1) << 3)
    split_halves(a, p, n)
    split_halves(b, q, m)
    qh = 0
    if quotient != 0:
        qh = hq
        store(hq + ((n2 - m2 + 1) << 3), 0)
    rh = 0
    if remainder != 0:
        rh = hr
        store(hr + (m2 << 3), 0)
    nonzero = halves_divmod(qh, rh, a, n2, b, m2, rest)
    if quotient != 0:
        join_halves(quotient, hq, (n2 - m2 + 2) >> 1)
    if remainder != 0:
        join_halves(remainder, hr, (m2 + 1) >> 1)
    return nonzero


def divmod_scratch_words(n: int, m: int) -> int:
    """The scratch words :func:`mag_divmod` needs for a dividend of ``n`` limbs and a
    divisor of ``m``."""
    return 6 * (n + m) + 4


def halves_divmod(quotient: int, remainder: int, p: int, n: int, q: int, m: int, work: int) -> int:
    """Long division (Knuth's algorithm D) of ``p[0:n]`` by ``q[0:m]``, arrays of 32-bit
    halves one per word (``q[m-1]`` not zero), ``n >= m >= 2``:
    ``quotient[0:n-m+1]`` and ``remainder[0:m]`` (either may be 0 when not wanted),
    using ``n + m + 1`` words at ``work``.  Returns 1 if the remainder is not zero."""
    mask = L.HALF_MASK
    base = _HALF_BASE
    shift = 32
    step = 8
    span = m << 3  # the divisor's bytes: u's window is uj[0:m+1]
    # normalize: shift both so that the divisor's top limb has its high bit set; each
    # estimated quotient digit is then at most 2 too large, and the test on the next
    # limb below leaves it at most 1 too large
    s = clz64(load(q + span - 8)) - 32  # a half's leading zeros, in 32 bits
    u = work
    v = work + ((n + 1) << 3)
    shift_halves_left(v, q, m, s)
    store(u + (n << 3), shift_halves_left(u, p, n, s))
    vtop = load(v + span - 8)
    vnext = load(v + span - 16)
    uj = u + ((n - m) << 3)
    digit = quotient + ((n - m) << 3)
    while uj >= u:
        high = load(uj + span)
        num = (high << shift) | load(uj + span - 8)
        qhat = num // vtop
        rhat = num - qhat * vtop
        below = load(uj + span - 16)
        while qhat >= base or qhat * vnext > ((rhat << shift) | below):
            qhat -= 1
            rhat += vtop
            if rhat >= base:
                break
        t = high - halves_submul(uj, v, m, qhat)
        if t >> 63:  # qhat was one too large: add the divisor back
            qhat -= 1
            t += halves_addback(uj, v, m)
        store(uj + span, t & mask)
        if quotient != 0:
            store(digit, qhat)
        uj -= step
        digit -= step
    nonzero = 0
    a = u
    end = u + span
    while a < end:
        nonzero = nonzero | load(a)
        a += step
    if remainder != 0:  # the remainder is u[0:m] shifted back
        back = 32 - s
        a = u
        while a < end:
            store(remainder, (load(a) >> s) | ((load(a + 8) << back) & mask))
            a += step
            remainder += step
    return nonzero != 0


def halves_submul(a: int, v: int, m: int, factor: int) -> int:
    """``a[0:m] -= factor * v[0:m]`` on halves (``factor < 2**32``), two a turn,
    storing pairs unmasked as :func:`halves_mul` does; returns what is still to
    subtract from ``a[m]``.  Each step subtracts ``P = factor * v[i] + carry`` from ``a[i]``: the
    difference's low half is the limb, and ``ceil((P - a[i]) / 2**32)``, the next
    carry, is ``(2**32 - 1 - difference) >> 32`` (the carry never exceeds ``factor``,
    so nothing here leaves a word)."""
    mask = L.HALF_MASK
    shift = 32
    step = 8
    pair = 16
    carry = 0
    end = v + (m << 3)
    if m & 1:
        t = load(a) - factor * load(v)
        store(a, t & mask)
        carry = (mask - t) >> shift
        a += step
        v += step
    while v < end:
        t = load(a) - (factor * load(v) + carry)
        store(a, t)
        t = load(a + 8) - (factor * load(v + 8) + ((mask - t) >> shift))
        store(a + 4, t << shift)
        carry = (mask - t) >> shift
        a += pair
        v += pair
    return carry


def halves_addback(a: int, v: int, m: int) -> int:
    """``a[0:m] += v[0:m]`` on halves; returns the carry out."""
    mask = L.HALF_MASK
    shift = 32
    carry = 0
    end = v + 8 * m
    while v < end:
        t = load(a) + load(v) + carry
        store(a, t & mask)
        carry = t >> shift
        a += 8
        v += 8
    return carry


def shift_limbs_left(r: int, p: int, n: int, s: int) -> int:
    """``r[0:n] = p[0:n] << s`` (``0 <= s < 64``) without the top carry, which is
    returned (``r`` may be ``p`` only if ``r <= p``)."""
    if s == 0:  # a shift by 64 is one by 0 on the machine: no bits come over
        copy_limbs(r, p, n)
        return 0
    back = 64 - s
    step = 8
    carry = 0
    end = p + 8 * n
    while p < end:
        x = load(p)
        store(r, (x << s) | carry)
        carry = x >> back
        p += step
        r += step
    return carry


def shift_halves_left(r: int, p: int, n: int, s: int) -> int:
    """``r[0:n] = p[0:n] << s`` (``0 <= s < 32``) without the top carry, which is
    returned (``r`` may be ``p`` only if ``r <= p``)."""
    mask = L.HALF_MASK
    back = 32 - s
    step = 8
    carry = 0
    end = p + 8 * n
    while p < end:
        x = load(p)
        store(r, ((x << s) | carry) & mask)
        carry = x >> back
        p += step
        r += step
    return carry


# -- arithmetic ------------------------------------------------------------------------------


def big_add(a: int, b: int) -> int:
    return add_signed(a, b, 0)


def big_sub(a: int, b: int) -> int:
    return add_signed(a, b, 1)


@inline
def add_signed(a: int, b: int, negate_b: int) -> int:
    """``a + b``, or ``a - b`` when ``negate_b``."""
    x = big_view(a, 0)
    y = big_view(b, 1)
    x_info = load(x + L.BIGINT_INFO)
    y_info = load(y + L.BIGINT_INFO)
    n = x_info & L.BIGINT_COUNT_MASK
    m = y_info & L.BIGINT_COUNT_MASK
    xs = x_info >> 32
    ys = (y_info >> 32) ^ negate_b
    if n <= 1 and m <= 1:  # both magnitudes fit a word
        return add_words(word_of(x + L.BIGINT_LIMBS), xs, word_of(y + L.BIGINT_LIMBS), ys)
    if xs == ys:
        if n < m:
            t = x
            x = y
            y = t
            n = m
            m = x_info & L.BIGINT_COUNT_MASK
        r = big_alloc(n + 1)
        mag_add(r + L.BIGINT_LIMBS, x + L.BIGINT_LIMBS, n, y + L.BIGINT_LIMBS, m)
        return big_finish_top(r, n + 1, xs)
    order = mag_compare(x + L.BIGINT_LIMBS, n, y + L.BIGINT_LIMBS, m)
    if order == 0:
        return 1
    if order == 1:
        r = big_alloc(n)
        mag_sub(r + L.BIGINT_LIMBS, x + L.BIGINT_LIMBS, n, y + L.BIGINT_LIMBS, m)
        return big_finish(r, n, xs)
    r = big_alloc(m)
    mag_sub(r + L.BIGINT_LIMBS, y + L.BIGINT_LIMBS, m, x + L.BIGINT_LIMBS, n)
    return big_finish(r, m, ys)


def add_words(x: int, xs: int, y: int, ys: int) -> int:
    """The sum of the magnitude ``x`` with sign ``xs`` and ``y`` with sign ``ys``,
    both words: a carry out of the word (told by the sum being below ``x``) makes a
    second limb."""
    if xs == ys:
        total = x + y
        if total >= x:
            return int_from_magnitude(total, xs)
        r = big_alloc(2)
        store(r + L.BIGINT_INFO, (xs << 32) | 2)
        store(r + L.BIGINT_LIMBS, total)
        store(r + L.BIGINT_LIMBS + 8, 1)
        return r
    if x >= y:
        return int_from_magnitude(x - y, xs)
    return int_from_magnitude(y - x, ys)


def big_mul(a: int, b: int) -> int:
    if a & 1:  # a small operand second
        t = a
        a = b
        b = t
    if b & 1 and (a & 1) == 0:  # a big int by a small one, say a factorial's step
        k = sar(b, 1)
        info = load(a + L.BIGINT_INFO)
        sign = info >> 32
        if slt(k, 0):
            k = 0 - k
            sign = sign ^ 1
        if (k >> 32) == 0:
            if k == 0:
                return 1
            n = info & L.BIGINT_COUNT_MASK
            r = big_alloc(n + 1)
            mag_mul_limb(r + L.BIGINT_LIMBS, a + L.BIGINT_LIMBS, n, k, 0)
            return big_finish_top(r, n + 1, sign)
    x = big_view(a, 0)
    y = big_view(b, 1)
    x_info = load(x + L.BIGINT_INFO)
    y_info = load(y + L.BIGINT_INFO)
    n = x_info & L.BIGINT_COUNT_MASK
    m = y_info & L.BIGINT_COUNT_MASK
    if n < m:  # x the longer
        t = x
        x = y
        y = t
        n = m
        m = x_info & L.BIGINT_COUNT_MASK
    if m == 0:
        return 1
    sign = (x_info ^ y_info) >> 32
    k = load(y + L.BIGINT_LIMBS)
    if n == 1:  # two words
        return product_of_words(load(x + L.BIGINT_LIMBS), k, sign)
    if m == 1 and (k >> 32) == 0:
        r = big_alloc(n + 1)
        mag_mul_limb(r + L.BIGINT_LIMBS, x + L.BIGINT_LIMBS, n, k, 0)
        return big_finish_top(r, n + 1, sign)
    work = scratch(mul_scratch_words(n + m))
    r = big_alloc(n + m)
    mag_mul(r + L.BIGINT_LIMBS, y + L.BIGINT_LIMBS, m, x + L.BIGINT_LIMBS, n, work)
    return big_finish(r, n + m, sign)


def product_of_words(u: int, w: int, sign: int) -> int:
    """The int ``u * w`` with ``sign``, for two words: four products of halves, the
    middle ones added to the low product's upper half one at a time (each sum stays
    below 2**64)."""
    mask = L.HALF_MASK
    shift = 32
    u0 = u & mask
    u1 = u >> shift
    w0 = w & mask
    w1 = w >> shift
    low = u0 * w0
    middle = u1 * w0 + (low >> shift)
    other = u0 * w1 + (middle & mask)
    high = u1 * w1 + (middle >> shift) + (other >> shift)
    word = (other << shift) | (low & mask)
    if high == 0:
        return int_from_magnitude(word, sign)
    r = big_alloc(2)
    store(r + L.BIGINT_INFO, (sign << 32) | 2)
    store(r + L.BIGINT_LIMBS, word)
    store(r + L.BIGINT_LIMBS + 8, high)
    return r


def big_floordiv(a: int, b: int) -> int:
    """``a // b``, floored."""
    return divide(a, b, 0)


def big_mod(a: int, b: int) -> int:
    """``a % b``, floored: the result has the divisor's sign."""
    return divide(a, b, 1)


def divide(a: int, b: int, want_remainder: int) -> int:
    """The floored quotient or remainder of ``a`` by ``b``."""
    if b & 1 and (a & 1) == 0:  # a big int by a small one, say ``n % 10``
        d = sar(b, 1)
        info = load(a + L.BIGINT_INFO)
        n = info & L.BIGINT_COUNT_MASK
        ys = 0
        if slt(d, 0):
            d = 0 - d
            ys = 1
        if n > 1 and d != 0 and (d >> 32) == 0:
            return divide_by_limb(a + L.BIGINT_LIMBS, n, d, (info >> 32) ^ ys, ys, want_remainder)
    x = big_view(a, 0)
    y = big_view(b, 1)
    x_info = load(x + L.BIGINT_INFO)
    y_info = load(y + L.BIGINT_INFO)
    n = x_info & L.BIGINT_COUNT_MASK
    m = y_info & L.BIGINT_COUNT_MASK
    if m == 0:
        if want_remainder:
            error(text("integer modulo by zero"), 0)
        error(text("floored division by zero"), 0)
    ys = y_info >> 32
    differ = (x_info >> 32) ^ ys
    xl = x + L.BIGINT_LIMBS
    yl = y + L.BIGINT_LIMBS
    if m >= n and (m > n or mag_compare(xl, n, yl, m) == 0 - 1):
        # |a| < |b|: the truncated quotient is 0
        if n == 0 or differ == 0:
            if want_remainder:
                return a
            return 1
        if want_remainder:  # |b| - |a|, with b's sign
            r = big_alloc(m)
            mag_sub(r + L.BIGINT_LIMBS, yl, m, xl, n)
            return big_finish(r, m, ys)
        return 0 - 1  # the small int -1
    if n <= 1:  # both magnitudes fit a word (m <= n): one DIV does it
        dividend = word_of(xl)
        divisor = word_of(yl)
        rem = dividend % divisor
        if want_remainder:
            if differ and rem != 0:
                rem = divisor - rem
            return int_from_magnitude(rem, ys)
        quotient = dividend // divisor
        if differ and rem != 0:
            quotient += 1
        return int_from_magnitude(quotient, differ)
    if m == 1 and (load(yl) >> 32) == 0:
        return divide_by_limb(xl, n, load(yl), differ, ys, want_remainder)
    work = scratch(divmod_scratch_words(n, m))
    # nonzero: whether the truncated division leaves a remainder (the floor then moves)
    if want_remainder:
        r = big_alloc(m)
        rl = r + L.BIGINT_LIMBS
        nonzero = mag_divmod(0, rl, xl, n, yl, m, work)
        if differ and nonzero:
            mag_sub(rl, yl, m, rl, m)
        return big_finish(r, m, ys)
    count = n - m + 2  # room for the floor's carry
    r = big_alloc(count)
    rl = r + L.BIGINT_LIMBS
    if mag_divmod(rl, 0, xl, n, yl, m, work) and differ:
        mag_increment(rl, count)
    return big_finish(r, count, differ)


def divide_by_limb(xl: int, n: int, d: int, differ: int, ys: int, want_remainder: int) -> int:
    """:func:`divide` of the ``n`` limbs at ``xl`` (two or more) by ``d`` below 2**32:
    a remainder is found without writing a quotient, and is a small int."""
    if want_remainder:
        rem = mag_mod_limb(xl, n, d)
        if differ and rem != 0:
            rem = d - rem
        if ys:
            return ((0 - rem) << 1) | 1
        return (rem << 1) | 1
    r = big_alloc(n + 1)  # room for the floor's carry
    rl = r + L.BIGINT_LIMBS
    if mag_div_limb(rl, xl, n, d) and differ:
        mag_increment(rl, n + 1)
    return big_finish(r, n + 1, differ)


def big_pow10(k: int) -> int:
    """``10**k`` as an int, nine digits at a time."""
    value = 3  # the int 1
    while k >= 9:
        value = big_mul(value, (_BILLION << 1) | 1)
        k -= 9
    power = 1
    while k > 0:
        power = power * 10
        k -= 1
    return big_mul(value, (power << 1) | 1)


def big_neg(a: int) -> int:
    if a & 1:
        return int_from_word(0 - sar(a, 1))
    n = limb_count(a)
    r = big_alloc(n)
    copy_limbs(r + L.BIGINT_LIMBS, a + L.BIGINT_LIMBS, n)
    return big_finish(r, n, sign_of(a) ^ 1)


def big_abs(a: int) -> int:
    """``abs(a)`` for an int of either kind."""
    if a & 1:
        if slt(a, 0):
            return big_neg(a)
        return a
    if sign_of(a) == 0:
        return a
    return big_neg(a)


def copy_limbs(r: int, p: int, n: int) -> None:
    end = p + 8 * n
    while p < end:
        store(r, load(p))
        p += 8
        r += 8


def big_invert(a: int) -> int:
    """``~a``, which is ``-a - 1``."""
    if a & 1:
        return a ^ 0xFFFFFFFFFFFFFFFE
    n = limb_count(a)
    r = big_alloc(n + 1)
    rl = r + L.BIGINT_LIMBS
    copy_limbs(rl, a + L.BIGINT_LIMBS, n)
    if sign_of(a):  # ~(-m) = m - 1
        mag_decrement(rl)
        return big_finish(r, n + 1, 0)
    mag_increment(rl, n + 1)  # ~m = -(m + 1)
    return big_finish(r, n + 1, 1)


# -- bitwise operations (two's complement, as if sign-extended forever) ----------------------


def big_and(a: int, b: int) -> int:
    return bitwise(a, b, L.LIMB_MASK, 0)


def big_or(a: int, b: int) -> int:
    return bitwise(a, b, L.LIMB_MASK, L.LIMB_MASK)


def big_xor(a: int, b: int) -> int:
    return bitwise(a, b, 0, L.LIMB_MASK)


def bitwise(a: int, b: int, and_part: int, xor_part: int) -> int:
    """``(a & b & and_part) ^ ((a ^ b) & xor_part)`` limb by limb, which is ``&``,
    ``|`` (both parts) or ``^``, on the two's-complement forms of ``a`` and ``b``.

    A negative operand's limbs are complemented and incremented as they are read
    (its form is ``~(m - 1)``), and a negative result is converted back the same way
    as it is written; the increment's carry goes on only past limbs that come out
    zero."""
    x = big_view(a, 0)
    y = big_view(b, 1)
    x_info = load(x + L.BIGINT_INFO)
    y_info = load(y + L.BIGINT_INFO)
    n = x_info & L.BIGINT_COUNT_MASK
    m = y_info & L.BIGINT_COUNT_MASK
    if n < m:  # the operations are symmetric: make x the longer
        t = x
        x = y
        y = t
        n = m
        m = x_info & L.BIGINT_COUNT_MASK
    xs = sign_of(x)
    ys = sign_of(y)
    if (xs | ys) == 0:
        if n <= 1:  # two magnitudes below 2**64, say a 64-bit mask: one word each
            u = word_of(x + L.BIGINT_LIMBS)
            w = word_of(y + L.BIGINT_LIMBS)
            return int_from_magnitude(((u & w) & and_part) ^ ((u ^ w) & xor_part), 0)
        return bitwise_magnitudes(x, n, y, m, and_part, xor_part)
    # the result's sign is the operation applied to the sign bits
    rs = (((xs & ys) & and_part) ^ ((xs ^ ys) & xor_part)) & 1
    step = 8
    x_flip = 0 - xs
    y_flip = 0 - ys
    r_flip = 0 - rs
    x_carry = xs
    y_carry = ys
    r_carry = rs
    r = big_alloc(n + 1)
    p = x + L.BIGINT_LIMBS
    q = y + L.BIGINT_LIMBS
    t = r + L.BIGINT_LIMBS
    end = q + 8 * m
    while q < end:
        u = load(p) ^ x_flip
        if x_carry != 0:
            u += 1
            if u != 0:
                x_carry = 0
        w = load(q) ^ y_flip
        if y_carry != 0:
            w += 1
            if w != 0:
                y_carry = 0
        z = (((u & w) & and_part) ^ ((u ^ w) & xor_part)) ^ r_flip
        if r_carry != 0:
            z += 1
            if z != 0:
                r_carry = 0
        store(t, z)
        p += step
        q += step
        t += step
    # the same step past y's limbs, where y's form is all zeros or all ones: y_flip
    end = x + L.BIGINT_LIMBS + 8 * n
    while p < end:
        u = load(p) ^ x_flip
        if x_carry != 0:
            u += 1
            if u != 0:
                x_carry = 0
        z = (((u & y_flip) & and_part) ^ ((u ^ y_flip) & xor_part)) ^ r_flip
        if r_carry != 0:
            z += 1
            if z != 0:
                r_carry = 0
        store(t, z)
        p += step
        t += step
    z = (((x_flip & y_flip) & and_part) ^ ((x_flip ^ y_flip) & xor_part)) ^ r_flip
    store(t, z + r_carry)
    return big_finish(r, n + 1, rs)


def bitwise_magnitudes(x: int, n: int, y: int, m: int, and_part: int, xor_part: int) -> int:
    """:func:`bitwise` of two non-negative big ints, ``x`` the longer: past ``y`` 's
    limbs, ``&`` gives zeros and ``|`` and ``^`` copy ``x`` 's."""
    count = n
    if xor_part == 0:
        count = m
    r = big_alloc(count)
    p = x + L.BIGINT_LIMBS
    q = y + L.BIGINT_LIMBS
    t = r + L.BIGINT_LIMBS
    step = 8
    end = q + 8 * m
    while q < end:
        u = load(p)
        w = load(q)
        store(t, ((u & w) & and_part) ^ ((u ^ w) & xor_part))
        p += step
        q += step
        t += step
    if count > m:
        copy_limbs(t, p, n - m)
    return big_finish(r, count, 0)


# -- shifts -----------------------------------------------------------------------------------


def big_lshift(a: int, count: int) -> int:
    """``a << count`` for a machine word ``count`` (the caller bounds it)."""
    x = big_view(a, 0)
    n = limb_count(x)
    if n == 0:
        return 1
    words = count >> 6
    total = n + words + 1
    r = big_alloc(total)
    rl = r + L.BIGINT_LIMBS + 8 * words
    store(rl + 8 * n, shift_limbs_left(rl, x + L.BIGINT_LIMBS, n, count & 63))
    return big_finish(r, total, sign_of(x))


def big_rshift(a: int, count: int) -> int:
    """``a >> count``, floored (a negative ``a`` rounds toward minus infinity)."""
    x = big_view(a, 0)
    n = limb_count(x)
    xs = sign_of(x)
    words = count >> 6
    if words >= n:
        if xs != 0:
            return 0 - 1
        return 1
    s = count & 63
    xl = x + L.BIGINT_LIMBS
    lost = 0
    if xs != 0:  # a negative value that loses set bits rounds down: magnitude + 1
        lost = load(xl + 8 * words) & ((1 << s) - 1)
        p = xl
        end = xl + 8 * words
        while p < end:
            lost = lost | load(p)
            p += 8
    total = n - words
    r = big_alloc(total + 1)
    rl = r + L.BIGINT_LIMBS
    p = xl + 8 * words
    if s == 0:  # a shift by 64 is one by 0 on the machine: whole limbs move
        copy_limbs(rl, p, total)
    else:
        back = 64 - s
        last = xl + 8 * (n - 1)
        t = rl
        while p < last:
            store(t, (load(p) >> s) | (load(p + 8) << back))
            p += 8
            t += 8
        store(t, load(p) >> s)
    if lost != 0:
        mag_increment(rl, total + 1)
    return big_finish(r, total + 1, xs)


# -- decimal ----------------------------------------------------------------------------------


def big_write_decimal(buffer: int, v: int) -> None:
    """Append the decimal digits of the big int ``v`` (with its sign); small ints are
    written by :func:`~kforge.starlark.runtime.format.write_int`.

    The magnitude, split into halves, is divided by 10**9 again and again (each pass
    one ``DIV`` per half); the remainders are the nine-digit chunks, least significant
    first."""
    n = limb_count(v)
    if sign_of(v):
        buf_byte(buffer, 45)
    if n <= 1:
        buf_decimal(buffer, word_of(v + L.BIGINT_LIMBS))
        return
    work = scratch(6 * n + 2)  # the magnitude's halves, then at most 1.08 chunks a half
    split_halves(work, v + L.BIGINT_LIMBS, n)
    h = half_count(v + L.BIGINT_LIMBS, n)
    chunks = work + 16 * n
    count = 0
    while h > 0:
        store(chunks + 8 * count, halves_div_half(work, work, h, _BILLION))
        count += 1
        if load(work + 8 * (h - 1)) == 0:
            h -= 1
    count -= 1
    buf_decimal(buffer, load(chunks + 8 * count))
    digits = 9 * count
    target = buf_reserve(buffer, digits)
    store(buffer + L.BUF_LEN, load(buffer + L.BUF_LEN) + digits)
    ten = 10
    zero = 48
    while count > 0:
        count -= 1
        chunk = load(chunks + 8 * count)
        start = target
        target += 9
        p = target
        while p > start:
            p -= 1
            storeb(p, zero + chunk % ten)
            chunk = chunk // ten
