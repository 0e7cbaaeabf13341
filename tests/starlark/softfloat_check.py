"""Check the runtime's soft-float functions bit for bit against the host's IEEE 754.

A program made of ``float_driver.py`` (a test module in the runtime dialect) and the
runtime runs each operation over records laid out in its data section and reports
the differences (see the driver).  The expected bits come from the host: Python's
``float`` operations, ``math.sqrt``, ``math.fmod``, ``struct``; on x86-64 these are the
SSE instructions, whose NaN rules the soft-float functions follow.

Operand generators mix special values, random bit patterns, operands of close
exponents (cancellation), halfway cases (rounding ties) and subnormals.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

_D = struct.Struct("<d")
_Q = struct.Struct("<Q")
_Q4 = struct.Struct("<QQQQ")
#: Operation numbers the driver keeps tick counts for (its ``OPERATIONS``).
DRIVER_OPERATIONS = 32
MASK = (1 << 64) - 1
SIGN = 1 << 63
INF = 0x7FF0000000000000
QUIET = 1 << 51
DEFAULT_NAN = 0xFFF8000000000000
GO_NAN = 0x7FF8000000000001


def f(bits: int) -> float:
    return float(_D.unpack(_Q.pack(bits & MASK))[0])


def b(x: float) -> int:
    return int(_Q.unpack(_D.pack(x))[0])


def is_nan(bits: int) -> bool:
    return (bits & ~SIGN) > INF


# -- the host's answers ----------------------------------------------------------------
#
# Which NaN SSE returns when both operands are NaNs depends on the order a compiler
# gave the operands; CPython's own answer changes once it specializes an addition.
# The runtime returns the left one, and these answers say so explicitly.


def host_add(x: int, y: int) -> int:
    if is_nan(x):
        return x | QUIET
    return b(f(x) + f(y))


def host_sub(x: int, y: int) -> int:
    if is_nan(x):
        return x | QUIET
    return b(f(x) - f(y))


def host_mul(x: int, y: int) -> int:
    if is_nan(x):
        return x | QUIET
    return b(f(x) * f(y))


def host_div(x: int, y: int) -> int:
    if is_nan(x):
        return x | QUIET
    if (y & ~SIGN) == 0:  # Python refuses; IEEE 754 (and SSE) answer
        if is_nan(x):
            return x | QUIET
        if (x & ~SIGN) == 0:
            return DEFAULT_NAN
        return ((x ^ y) & SIGN) | INF
    return b(f(x) / f(y))


def host_sqrt(x: int, _: int = 0) -> int:
    if is_nan(x):
        return x | QUIET
    if x & SIGN and (x & ~SIGN) != 0:
        return DEFAULT_NAN
    return b(math.sqrt(f(x)))


def host_order(x: int, y: int) -> int:
    if is_nan(x) or is_nan(y):
        return (is_nan(x) > is_nan(y)) - (is_nan(x) < is_nan(y)) & MASK
    a, c = f(x), f(y)
    return ((a > c) - (a < c)) & MASK


def host_from_word(x: int, _: int = 0) -> int:
    return b(float(x - (1 << 64) if x & SIGN else x))


def _integral(x: int, rounding: Callable[[Fraction], int]) -> int:
    value = f(x)
    if not math.isfinite(value) or value == 0:
        return x
    r = float(rounding(Fraction(value)))
    return b(math.copysign(r, value)) if r == 0 else b(r)


def host_trunc(x: int, _: int = 0) -> int:
    return _integral(x, math.trunc)


def host_floor(x: int, _: int = 0) -> int:
    return _integral(x, math.floor)


def host_ceil(x: int, _: int = 0) -> int:
    return _integral(x, math.ceil)


def _half_away(q: Fraction) -> int:
    n = math.floor(abs(q) + Fraction(1, 2))
    return n if q >= 0 else -n


def host_round(x: int, _: int = 0) -> int:
    return _integral(x, _half_away)


def host_fmod(x: int, y: int) -> int:
    """Go's ``math.Mod``: C's ``fmod``, with Go's own NaN for its special cases."""
    if (x & ~SIGN) >= INF or (y & ~SIGN) == 0 or is_nan(y):
        return GO_NAN
    return b(math.fmod(f(x), f(y)))


def signed(word: int) -> int:
    return word - (1 << 64) if word & SIGN else word


def int_double(word: int) -> int:
    """The bits of the double nearest the int held as a signed word (Python's
    conversion rounds to nearest, ties to even, as Go's)."""
    return b(float(signed(word)))


@dataclass(frozen=True)
class Operation:
    """An operation the driver runs: a soft-float function on bits, or (``kinds``) a
    Starlark operator on values made from the record's words: ``f`` a float with these
    bits, ``i`` a small int with this value (a signed word)."""

    number: int
    name: str
    host: Callable[[int, int], int]
    unary: bool = False
    kinds: str = ""

    def answer(self, x: int, y: int) -> int:
        """The host's answer for the record's words ``x`` and ``y``."""
        if "i" in self.kinds:  # an int operand is converted to the nearest double first
            x = int_double(x) if self.kinds[0] == "i" else x
            y = int_double(y) if self.kinds[1:] == "i" else y
        return self.host(x, y)


def _operations() -> Iterator[Operation]:
    yield Operation(0, "add", host_add)
    yield Operation(1, "sub", host_sub)
    yield Operation(2, "mul", host_mul)
    yield Operation(3, "div", host_div)
    yield Operation(4, "sqrt", host_sqrt, unary=True)
    yield Operation(5, "order", host_order)
    yield Operation(6, "from_word", host_from_word, unary=True)
    yield Operation(7, "trunc", host_trunc, unary=True)
    yield Operation(8, "floor", host_floor, unary=True)
    yield Operation(9, "ceil", host_ceil, unary=True)
    yield Operation(10, "round", host_round, unary=True)
    yield Operation(11, "fmod", host_fmod)
    # Starlark's operators as compiled programs call them (the driver's numbering)
    hosts = {"add": host_add, "sub": host_sub, "mul": host_mul, "div": host_div}
    for number, name in enumerate(("add", "sub", "mul", "div", "inplace_add"), start=12):
        yield Operation(number, f"number_{name}", hosts.get(name, host_add), kinds="ff")
    for number, name in enumerate(hosts, start=17):
        yield Operation(number, f"number_{name}_float_int", hosts[name], kinds="fi")
        yield Operation(number + 4, f"number_{name}_int_float", hosts[name], kinds="if")
    yield Operation(25, "number_div_ints", host_div, kinds="ii")
    yield Operation(26, "small_int_bits", lambda x, _: x, unary=True, kinds="i")


OPERATIONS = {op.name: op for op in _operations()}


# -- operands ---------------------------------------------------------------------------


def special_values() -> list[int]:
    """Zeros, the edges of the subnormals and normals, infinities, NaNs with payloads,
    and values around one and two (where rounding ties and carries happen)."""
    positive = [
        0,
        1,  # the smallest subnormal
        2,
        3,
        0x000FFFFFFFFFFFFF,  # the largest subnormal
        0x0008000000000000,
        0x0010000000000000,  # the smallest normal
        0x0010000000000001,
        0x001FFFFFFFFFFFFF,
        0x3CA0000000000000,  # 2**-53
        0x3CB0000000000000,  # 2**-52
        0x3FE0000000000000,  # 0.5
        0x3FEFFFFFFFFFFFFF,
        0x3FF0000000000000,  # 1
        0x3FF0000000000001,
        0x3FF8000000000000,  # 1.5
        0x3FFFFFFFFFFFFFFF,
        0x4000000000000000,  # 2
        0x4000000000000001,
        0x4008000000000000,  # 3
        0x4024000000000000,  # 10
        0x4340000000000000,  # 2**53
        0x4340000000000001,
        0x43E0000000000000,  # 2**63
        0x7FDFFFFFFFFFFFFF,
        0x7FE0000000000000,
        0x7FEFFFFFFFFFFFFF,  # the largest finite
        INF,
        0x7FF8000000000000,  # quiet NaNs
        0x7FF8000000000123,
        0x7FF0000000000001,  # signalling NaNs
        0x7FF4000000000456,
        b(0.1),
        b(1 / 3),
        b(math.pi),
    ]
    return positive + [v | SIGN for v in positive]


def random_double(rng: random.Random) -> int:
    kind = rng.random()
    if kind < 0.2:
        return rng.getrandbits(64)
    if kind < 0.3:  # subnormal
        return rng.getrandbits(52) | (rng.getrandbits(1) << 63)
    if kind < 0.4:  # near the top of the exponents
        return (rng.randint(0x7C0, 0x7FE) << 52) | rng.getrandbits(52) | (rng.getrandbits(1) << 63)
    if kind < 0.5:  # a short mantissa (exact products, ties)
        return (
            (rng.randint(0x3C0, 0x440) << 52)
            | (rng.getrandbits(8) << 44)
            | (rng.getrandbits(1) << 63)
        )
    return (rng.randint(0x300, 0x4FF) << 52) | rng.getrandbits(52) | (rng.getrandbits(1) << 63)


def random_pair(rng: random.Random, op: str) -> tuple[int, int]:
    x = random_double(rng)
    kind = rng.random()
    if op == "from_word":
        bits = rng.choice([8, 32, 53, 54, 55, 62, 63, 64])
        return rng.getrandbits(bits) * rng.choice([1, -1]) & MASK, 0
    if kind < 0.3:  # a close exponent: cancellation, ties, carries
        exponent = (x >> 52) & 0x7FF
        exponent = min(max(exponent + rng.randint(-54, 54), 0), 0x7FE)
        y = (exponent << 52) | rng.getrandbits(52) | (rng.getrandbits(1) << 63)
        if rng.random() < 0.3:  # the same significand but for a low bit or two
            y = (y & ~((1 << 52) - 1)) | ((x ^ rng.getrandbits(2)) & ((1 << 52) - 1))
        return x, y
    if kind < 0.4:  # a tie: half an ulp of x, or a bit below it
        exponent = max(((x >> 52) & 0x7FF) - 53, 0)
        return x, (exponent << 52) | (rng.getrandbits(1) << 63)
    if kind < 0.45:
        return x, rng.choice(special_values())
    return x, random_double(rng)


def boundary_pair(rng: random.Random, op: str) -> tuple[int, int]:
    """Operands on either side of where the fast paths of ``add``, ``sub``, ``mul`` and
    ``div`` hand over to the general code: exponents 9, 10, 61 and 62 apart (exact and
    inexact alignment, a far operand), ties and near-ties below the last place,
    cancellation of one bit or two, results at the edges of the normal exponents, and
    powers of two that only move an exponent."""
    sign = rng.getrandbits(2)
    fraction = rng.getrandbits(52)
    if op in ("add", "sub"):
        ex = rng.choice([1, 2, 3, rng.randint(60, 0x7F0), 0x7FC, 0x7FD, 0x7FE])
        d = rng.choice([0, 1, 2, 8, 9, 10, 11, 53, 54, 55, 60, 61, 62, 63])
        ey = max(ex - d, 0)
        y_fraction = rng.getrandbits(52)
        if d and rng.random() < 0.6:  # the bits below x's last place: one half, or a hair off
            y_fraction = (y_fraction >> d << d) | ((1 << (d - 1)) + rng.choice([-1, 0, 0, 1]))
            y_fraction &= (1 << 52) - 1
        elif rng.random() < 0.3:  # cancellation: the same leading bits
            y_fraction = fraction ^ rng.getrandbits(rng.randint(1, 52))
            ey = ex
        x = (sign & 1) << 63 | ex << 52 | fraction
        y = (sign >> 1) << 63 | ey << 52 | y_fraction
        return (x, y) if rng.random() < 0.5 else (y, x)
    # mul and div: the result's exponent at an edge of the normal range
    target = rng.choice([-54, -2, -1, 0, 1, 2, 3, 0x7FC, 0x7FD, 0x7FE, 0x7FF, 0x800])
    ea = rng.randint(1, 0x7FE)
    eb = ea + 1023 - target if op == "mul" else ea - target + 1023
    eb = min(max(eb, 1), 0x7FE)
    y_fraction = 0 if rng.random() < 0.3 else rng.getrandbits(52)  # a power of two
    if rng.random() < 0.2:
        fraction = 0
    if rng.random() < 0.2:  # short significands: exact products, halves below the last place
        fraction &= 0xFFFFF << 32
        y_fraction &= 0xFFFFF << 32
    return (sign & 1) << 63 | ea << 52 | fraction, (sign >> 1) << 63 | eb << 52 | y_fraction


#: The operations ``boundary_cases`` makes records for.
BOUNDARY_OPERATIONS = (
    "add",
    "sub",
    "mul",
    "div",
    "number_add",
    "number_sub",
    "number_mul",
    "number_div",
    "number_inplace_add",
)


def boundary_cases(op: str, count: int, seed: int) -> list[tuple[str, int, int]]:
    """``count`` records from ``boundary_pair`` for ``add``, ``sub``, ``mul``, ``div``
    and the operators on two floats."""
    operation = OPERATIONS[op]
    base = operation.host.__name__.removeprefix("host_")
    rng = random.Random(f"boundary/{op}/{seed}")
    cases = []
    while len(cases) < count:
        if (case := operator_operands(operation, *boundary_pair(rng, base))) is not None:
            cases.append(case)
    return cases


def special_ints() -> list[int]:
    """Small ints (signed words) around the bit lengths ``small_int_bits`` tells apart,
    the doubles' exact range and the small ints' own."""
    values = {0, 1, 2, 3, 4, 7, 15, 16, 17, 255, 256, 2**53 - 1, 2**53, 2**53 + 1}
    for k in range(1, 62):
        values |= {2**k - 1, 2**k, 2**k + 1}
    values |= {2**62 - 1, 2**62 - 513, 2**62 - 512}
    return sorted(v & MASK for value in values for v in (value, -value) if v >= -(2**62))


def random_int(rng: random.Random) -> int:
    """A small int (a signed word): mostly short, as ints met in float code are."""
    if rng.random() < 0.5:
        value = rng.randint(-20, 20)
    else:
        value = rng.getrandbits(rng.randint(1, 62)) * rng.choice([1, -1])
    return max(value, -(2**62)) & MASK


#: Ints paired with special doubles: signs, the nibble lengths, the exact range's edge.
SHORT_INTS = [
    v & MASK for v in (0, 1, -1, 2, -2, 3, 4, -4, 8, -8, 15, 16, 17, 2**53 + 1, 2**62 - 1, -(2**62))
]


def operator_operands(op: Operation, x: int, y: int) -> tuple[str, int, int] | None:
    """A record for operator ``op``, or None for a division by zero (an error, which
    the program tests check)."""
    divisor_zero = y == 0 if op.kinds[1:] == "i" else y & ~SIGN == 0
    if op.host is host_div and divisor_zero:
        return None
    return op.name, x, y


def operator_edge_cases(op: Operation) -> Iterator[tuple[str, int, int]]:
    if op.kinds == "i":
        for value in special_ints():
            yield op.name, value, 0
        return
    doubles = special_values()
    lefts = SHORT_INTS if op.kinds[0] == "i" else doubles
    rights = SHORT_INTS if op.kinds[1] == "i" else doubles
    if op.kinds == "ff":  # every other special value: the soft-float cases have them all
        lefts = rights = doubles[::2]
    for x in lefts:
        for y in rights:
            if (case := operator_operands(op, x, y)) is not None:
                yield case


def edge_cases(op: str) -> Iterator[tuple[str, int, int]]:
    """Every special value (pair) for ``op``."""
    values = special_values()
    if OPERATIONS[op].kinds:
        yield from operator_edge_cases(OPERATIONS[op])
        return
    if op == "from_word":
        for value in [0, 1, 2**53 - 1, 2**53 + 1, 2**54 + 2, 2**62 - 1, 2**63 - 1, 2**63 - 512]:
            yield op, value, 0
            yield op, -value & MASK, 0
        return
    if OPERATIONS[op].unary:
        for value in values:
            yield op, value, 0
        return
    for x in values:
        for y in values:
            yield op, x, y


def random_operator_case(rng: random.Random, op: Operation) -> tuple[str, int, int]:
    while True:
        if op.kinds == "ff":
            x, y = random_pair(rng, op.host.__name__.removeprefix("host_"))
        else:
            x = random_int(rng) if op.kinds[0] == "i" else random_double(rng)
            y = (
                0
                if op.kinds == "i"
                else random_int(rng)
                if op.kinds[1] == "i"
                else random_double(rng)
            )
        if (case := operator_operands(op, x, y)) is not None:
            return case


def random_cases(op: str, count: int, seed: int) -> list[tuple[str, int, int]]:
    rng = random.Random(f"{op}/{seed}")
    if OPERATIONS[op].kinds:
        return [random_operator_case(rng, OPERATIONS[op]) for _ in range(count)]
    return [(op, *random_pair(rng, op)) for _ in range(count)]


# -- running ------------------------------------------------------------------------------


@cache
def _library() -> Any:
    from kforge.starlark.compiler import RUNTIME_MODULES
    from kforge.starlark.lowlevel import compile_modules

    return compile_modules([*RUNTIME_MODULES, "starlark.float_driver"])


def driver_program(cases: list[tuple[str, int, int]], measure: bool) -> tuple[Any, int]:
    """The driver program over ``cases`` (operation name, left, right) and the memory
    it needs."""
    from kforge.starlark.emit import Unit, emit_program

    library = _library()
    blob = bytearray(_Q.pack(int(measure)) + _Q.pack(len(cases)))
    for op, x, y in cases:
        operation = OPERATIONS[op]
        blob += _Q4.pack(operation.number, x, y, operation.answer(x, y))
    blob += bytes(max(0, 24 + 24 * DRIVER_OPERATIONS - len(blob)))  # room for the report
    declarations = dict(library.data.items)
    declarations["float_cases"] = bytes(blob)
    memory = (len(blob) + (1 << 20)) & ~7
    unit = Unit(dict(library.functions), declarations, "float_driver_main", memory)
    return emit_program(unit).program, memory


@dataclass(frozen=True)
class Ticks:
    least: int
    most: int
    total: int


@dataclass(frozen=True)
class DriverReport:
    differences: int
    first: int
    first_got: int
    ticks: dict[str, Ticks]
    machine_ticks: int


def run_driver(cases: list[tuple[str, int, int]], tier: str, measure: bool = False) -> DriverReport:
    from kforge.machine import Machine, MachineState
    from kforge.tiers import TierRunner

    program, memory = driver_program(cases, measure)
    machine = Machine.load(program, memory_quota=memory, tick_budget=1 << 40)
    TierRunner(tier).run(machine)
    assert machine.state is MachineState.HALTED, (machine.state, machine.fault)
    count = 3 + 3 * DRIVER_OPERATIONS
    words = struct.unpack(f"<{count}Q", bytes(machine.stdout)[: 8 * count])
    first = words[1] - (1 << 64) if words[1] >= SIGN else words[1]
    ticks = {
        op.name: Ticks(*words[3 + 3 * op.number : 6 + 3 * op.number]) for op in OPERATIONS.values()
    }
    return DriverReport(words[0], first, words[2], ticks, machine.ticks_used)


#: Records per program: a program's data section holds at most 16 MiB.
BATCH = 250_000


def differences_in_batches(cases: list[tuple[str, int, int]], tier: str) -> str:
    """Run ``cases`` a batch at a time; "" if every result is right, else what was wrong."""
    for start in range(0, len(cases), BATCH):
        batch = cases[start : start + BATCH]
        report = run_driver(batch, tier)
        if report.differences:
            return describe(batch, report)
    return ""


def describe(cases: list[tuple[str, int, int]], report: DriverReport) -> str:
    """What went wrong, for an assertion message."""
    if report.differences == 0:
        return "no differences"
    op, x, y = cases[report.first]
    operation = OPERATIONS[op]
    want = operation.answer(x, y)
    kinds = operation.kinds or "ff"
    left = signed(x) if kinds[0] == "i" else f(x)
    right = signed(y) if kinds[1:] == "i" else f(y)
    return (
        f"{report.differences} differences; first {op}({x:#018x}, {y:#018x}) "
        f"= {report.first_got:#018x}, want {want:#018x} ({left!r}, {right!r} -> {f(want)!r})"
    )
