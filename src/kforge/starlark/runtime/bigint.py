"""Arbitrary-precision integers.

A big int is a heap object (:data:`~kforge.starlark.layout.TAG_BIGINT`): a sign and
a magnitude of 32-bit limbs, least significant first, one limb per word, no leading
zero limb.  Every function here takes int values of either kind (small or big) and
returns the canonical form: a small int whenever the value fits one.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import load, sar, slt, store

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc_object, error


def int_from_word(n: int) -> int:
    """The int whose value is the signed machine word ``n``."""
    if slt(n, 0 - (1 << 62)) or sge_word(n, 1 << 62):
        return big_from_word(n)
    return (n << 1) | 1


def sge_word(a: int, b: int) -> int:
    return (a ^ L.SIGN_BIT) >= (b ^ L.SIGN_BIT)


def big_from_word(n: int) -> int:
    """A big int object for the signed word ``n`` (whatever its size)."""
    sign = 0
    magnitude = n
    if slt(n, 0):
        sign = 1
        magnitude = 0 - n
    limbs = 1
    if magnitude >> 32:
        limbs = 2
    v = alloc_object(L.TAG_BIGINT, L.BIGINT_LIMBS + 8 * limbs)
    store(v + L.BIGINT_INFO, (sign << 32) | limbs)
    store(v + L.BIGINT_LIMBS, magnitude & L.LIMB_MASK)
    if limbs == 2:
        store(v + L.BIGINT_LIMBS + 8, magnitude >> 32)
    return v


def unsupported() -> None:
    error("integer too large: arbitrary precision is not available in this build", 0)


def big_add(a: int, b: int) -> int:
    unsupported()
    return 0


def big_sub(a: int, b: int) -> int:
    unsupported()
    return 0


def big_mul(a: int, b: int) -> int:
    unsupported()
    return 0


def big_floordiv(a: int, b: int) -> int:
    unsupported()
    return 0


def big_mod(a: int, b: int) -> int:
    unsupported()
    return 0


def big_neg(a: int) -> int:
    unsupported()
    return 0


def big_invert(a: int) -> int:
    unsupported()
    return 0


def big_and(a: int, b: int) -> int:
    unsupported()
    return 0


def big_or(a: int, b: int) -> int:
    unsupported()
    return 0


def big_xor(a: int, b: int) -> int:
    unsupported()
    return 0


def big_lshift(a: int, count: int) -> int:
    unsupported()
    return 0


def big_rshift(a: int, count: int) -> int:
    unsupported()
    return 0


def big_write_decimal(buffer: int, v: int) -> None:
    """Append the decimal digits of the big int ``v`` (with its sign)."""
    unsupported()


def big_to_word(v: int) -> int:
    """``v`` as a signed machine word; only for values that fit one."""
    info = load(v + L.BIGINT_INFO)
    magnitude = load(v + L.BIGINT_LIMBS)
    if (info & 0xFFFFFFFF) > 1:
        magnitude = magnitude | (load(v + L.BIGINT_LIMBS + 8) << 32)
    if info >> 32:
        return 0 - magnitude
    return magnitude


def unused(v: int) -> int:
    return sar(v, 1)
