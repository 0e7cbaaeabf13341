"""Floats in compiled Starlark: the soft-float library bit for bit with the host's IEEE
754, and the float type as the Go implementation behaves.

* The soft-float functions are driven directly (``float_driver.py``, a test program in
  the runtime dialect, over records in its data section; ``softfloat_check.py`` makes
  the records and the host's answers): every special value against every other, and
  random operands (close exponents, ties, subnormals), on both tiers.  The slow tests
  check a million random operand pairs per operation.
* Programs of float expressions, and programs that fail, print what the Go
  implementation prints: their outcomes were recorded from it and are kept in
  ``test_rt_floats.json`` (run this file to record them again).
* Random doubles are written (``str``, ``%e``, ``%f``, ``%g``) and read (``float(s)``)
  as a model of Go's ``strconv`` says, and random arithmetic gives the host's doubles;
  the model is checked against the Go implementation when it is installed, and so are
  generated programs of float expressions (a differential test).
* ``math``: the Go test file ``math.star`` runs in ``test_starlark_go_testdata.py``;
  here, the functions that are exact match the host bit for bit, and the others stay
  within Go's error bounds of the host's libm.
"""

from __future__ import annotations

import json
import math
import random
import struct
import sys
from fractions import Fraction
from pathlib import Path

import pytest

if __name__ == "__main__":  # run as a script: the tests directory is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlark.harness import (
    SUCCESS,
    Outcome,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
)
from starlark.softfloat_check import (
    BOUNDARY_OPERATIONS,
    OPERATIONS,
    boundary_cases,
    describe,
    differences_in_batches,
    edge_cases,
    random_cases,
    run_driver,
)

pytestmark = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)

EXPECTED_FILE = Path(__file__).with_suffix(".json")
TICK_BUDGET = 400_000_000
MEMORY_QUOTA = 1 << 24

PROGRAMS: dict[str, str] = {
    "literals": r"""
print(0.0, -0.0, 1.0, 0.5, 1.5, 0.1, 1e100, 1e-100, 1e21, 1e20, 1e16, 1e15, 123456.0, 1234567.0, 1e-4, 1e-5)
print(5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 9007199254740993.0, 0.1 + 0.2, 1 / 3, 2 / 3)
print(1.0e+10, 1.e3, .5e-3, 00.5, 09.5, 3.25, 4.9406564584124654e-324, 1.23e45, -1.23e-45)
print(repr(2.5), str(-2.5), [1.5, -0.0], (0.25,), {"k": 1e300}, 100000.0, 999999.0, 1000000.0, 12345678.9)
print(type(1.0), type(1e10), type(float("nan")), 3.0 == 3)
""",
    "arithmetic": r"""
print(1.5 + 2, 1 + 2.5, 3.0 * 2, 2 * 3.5, 7 - 0.5, 0.5 - 7, 1 / 3, 10 / 2, 7 // 2.0, -7 // 2.0, 7.5 // -2, -7.5 // -2)
print(7 % 2.5, -7 % 2.5, 7 % -2.5, -7 % -2.5, 7.5 % 2, -7.5 % 2, 4.0 % 2.0, -4.0 % 2.0, 4.0 % -2.0, 0.0 % 5, -0.0 % 5)
print(1e308 * 10, -1e308 * 10, 1e308 * 10 - 1e308 * 10, 1e-320 / 1e10, -(1e-320 / 1e10), 1 // float("-inf"), -1 // float("inf"))
print(float("inf") + 1, float("inf") * 0, float("inf") / float("inf"), 5 % float("inf"), -5 % float("inf"), float("inf") % 5)
print(-1.5, +1.5, -(-1.5), -0.0 + 0.0, -0.0 - 0.0, 0.0 * -1, (1 << 60) + 0.5, (1 << 70) * 1.0, 1.0 * (1 << 1023) * 2)
x = 1.0
x += 1
x *= 3
x /= 4
x -= 0.25
x //= 0.5
x %= 3
print(x, 1 / 2, 3 / 1, -6 / 4, (1 << 80) / (1 << 79), 1 / (1 << 80), 10 / 3 * 3, 0.1 * 3, 1e16 + 1, 1e16 + 2)
print(100.0 / 7.0, 100 / 7.0, 2.5 / 2, 5 / 4, 98.0 // 8.0, 98.0 // -8.0, 2.5 // 2, 5 // 4.0, 98.0 % -8.0, 2.5 % 2)
""",
    "comparisons": r"""
nan = float("nan")
inf = float("inf")
print(nan == nan, nan != nan, nan < nan, nan <= nan, nan > 1, 1 < nan, inf < nan, -inf < inf, 0.0 == -0.0, -0.0 < 0.0)
print(1 == 1.0, 1.0 == 1, 2 != 2.0, 1 < 1.5, 2 > 1e300, 3 >= 3.0, (1 << 70) == float(1 << 70), (1 << 70) + 1 == float(1 << 70))
print((1 << 70) + 1 > float(1 << 70), (1 << 70) - 1 < float(1 << 70), -(1 << 70) - 1 < -float(1 << 70), (1 << 1100) < inf, -(1 << 1100) > -inf)
print(1229999999999999973814869011019624571608236032 == 1.23e45, 1229999999999999973814869011019624571608236033 != 1.23e45)
print(9007199254740993 == 9007199254740992.0, 9007199254740993 > 9007199254740992.0, 4611686018427387904 == 4611686018427387904.0)
print(-4611686018427387904 == -4611686018427387904.0, -4611686018427387905 < -4611686018427387904.0, 0.5 > 0, -0.5 < 0, -0.5 > -1)
print(sorted([3, 1.5, 2, -0.0, 0, 0.0, nan, -inf, inf, 1 << 70, -(1 << 70), 2.5]), sorted([2.0, 1, 2, 1.0]), sorted([nan, 1, nan, 0]))
print(min(1, 2.0), max(1.0, 1), min(2.0, 2), max(2, 2.0), min([nan, 2, 3]), max([1, nan, 3]), min(-0.0, 0), max(0, -0.0), max(1e300, 1 << 1000))
print([1] == [1.0], (1, 2.0) == (1.0, 2), [1.5] < [2], (1, 2.5) < (1, 3), [nan] == [nan], {"a": 1.0} == {"a": 1}, [0.0] == [-0.0])
""",
    "conversions": r"""
print(float(), float(False), float(True), float(0), float(-5), float(1 << 70), float((1 << 53) + 1), float((1 << 53) + 3), float(2.5))
print(float("1.5"), float("-1.5"), float("+1.5"), float(".5"), float("5."), float("1e5"), float("1E5"), float("-0"), float("00012"))
print(float("inf"), float("+Inf"), float("-INF"), float("infinity"), float("-Infinity"), float("nan"), float("-NaN"), float("+nan"))
print(float("1_000.5"), float("0_1.5"), float("1.5_5"), float("1e1_0"), float("0x1p-2"), float("0X1P3"), float("0x1.8p1"), float("0x.8p1"), float("0x_1p0"))
print(float("1e-400"), float("2.5e-324"), float("2e-324"), float("4.9e-324"), float("1.7976931348623158e308"), float("0x1p-1075"), float("0x1.0000000000001p-1075"))
print(float("123456789012345678901234567890e-10"), float("0.000000000000000000000000000001234"), float("9007199254740993"), float("9007199254740993.0000000001"))
print(int(0.0), int(-0.5), int(2.9), int(-2.9), int(1e20), int(-1e20), int(1e300) % 1000, int(4611686018427387904.0), int(-4611686018427387904.0))
print(abs(-2.5), abs(2.5), abs(-0.0), abs(float("-inf")), abs(float("nan")), bool(0.0), bool(-0.0), bool(0.1), bool(float("nan")))
print(2.5 in [1, 2.5], 1 in [1.0], 1.0 in [1], 1.0 in (2, 1), 2.0 in range(3), 2.5 in range(3), 1e15 in range(4), [1.0, 2].index(2.0), [2, 1.0].index(1))
l = [1.0, 2, 1]
l.remove(1)
print(l, 3 in {3.0: 1}, 1 << 62 in {float(1 << 62): 1}, {1: "a", 1.0: "b"}, {(1, 2.0): 1}[(1.0, 2)], {1 << 80: 1}[float(1 << 80)])
print({0.0: 1, -0.0: 2}, {float("nan"): 1}, len({1.5: 1, 1.5: 2}), {2.5: "x"}.get(2.5), {1e300: 1}.get(1e300), {float(1 << 100): 2}.get(1 << 100))
""",
    "formatting": r"""
print("%s %r %d %i %e %f %g %E %G %F" % (1.5, 1.5, 2.7, -2.7, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5))
print("%d %x %o %X" % (3.99, 255.5, 8.5, -255.9), "%e %f %g" % (5, 5, 5), "%e %f %g" % (1 << 70, 1 << 70, 1 << 70))
print("%e|%f|%g" % (float("inf"), float("-inf"), float("nan")), "%F %F" % (float("inf"), 2), "%e %f" % (-0.0, -0.0), "%g" % -0.0)
print("%e %e %e %e" % (1e300, 1e-300, 5e-324, 1.7976931348623157e308), "%f %f" % (1e22, 123456789.123456789))
print("%f %f %f %f %f" % (0.5e-6, 1.5e-6, 2.5e-6, 0.0000004, 0.9999995), "%e %e" % (9.9999995, 0.000099999995))
print("%g %g %g %g %g" % (1e5, 1e6, 1e-4, 1e-5, 123456789.0), "%e %g" % (1 << 1100, 1 << 1100), "%G" % 1e-10)
print("{} {!r} {} {}".format(1.5, -0.0, 1e100, [0.5, 1e-7]), "{0} {0!s}".format(2.0), "%s" % 1e21, "%r" % (1e21,))
print(str(1e22), str(1e-7), repr(123456789.0), str(1.0e16), str(12345678901234567890.0), str(0.000123), str(-1e-320))
""",
    "operators": r"""
big = 4611686018427387903
small = -4611686018427387904
print(big + 1, small - 1, 0 - small, big + big, small + small, 1 - small, big * 2, big / 3, 7 / 2, -7 / 2, 1 / 3, 8 / 2)
print(big + 0.5, 0.5 + big, small - 0.5, 0.5 - small, big * 0.5, 0.5 * small, big / 0.5, 0.5 / small, big - 1.0, 1.0 - big)
print(2.5 * 2, 2.5 * 4, 2.5 / 2, 2.5 / 4, 3 * 0.5, 3 / 0.5, -2.5 * 8, 2.5 / -8, 1e308 * 2, 1e-308 / 4, 5e-324 * 2, 5e-324 / 2)
print(1.5 * 2.0, 1.5 / 2.0, 1e308 * 2.0, 1e-308 / 2.0, 1.5 * 0.25, -3.0 / 0.125, 2.0 * 1e-320, 1e-320 / 2.0, 0.5 * 1e308 * 4)
print(1.1 + 2.2, 3.3 - 1.1, 0.1 * 3, 1 - 0.9, 2.5 - 2.5, -2.5 + 2.5, 0.1 + 0.7, 1e16 + 1.0, 1e16 + 3.0, 1.0 + 1e-16, 1.0 - 1e-16)
print(1e308 + 1e308, -1e308 - 1e308, 1.7976931348623157e308 + 1e292, 2.2250738585072014e-308 - 2.225073858507201e-308, 3.0 - 2.9999999999999996)
s = "a"
s += "b"
l = [1.5]
l += [2]
print(s, l, l * 2, "x" + "y", [0.5] + [1], 2 * [0.5], (1.5,) + (2,), 3 * "ab")
x = 0.0
for i in range(10):
    x += i
    x -= 0.5 * i
    x = x * 1.5 / 2
    x += 0.1
print(x, x - 1, 1 - x, x * 3, 3 * x, x / 3, 3 / x)
""",
}
ERRORS: tuple[str, ...] = (
    "print(1 / 0)",
    "print(1.0 / 0)",
    "print(1 / 0.0)",
    "print(1.0 // 0)",
    "print(1 // 0.0)",
    "print(1.0 % 0)",
    "print(1 % 0.0)",
    "print(1.0 % 0.0)",
    "x = 2.0\nx /= 0",
    'print(int(float("nan")))',
    'print(int(float("inf")))',
    'print(int(float("-inf")))',
    'print(float("abc"))',
    'print(float("1e400"))',
    'print(float("-1e400"))',
    'print(float(""))',
    'print(float(" 1"))',
    'print(float("1_"))',
    'print(float("0x10"))',
    'print(float("1__0"))',
    'print(float("0b101"))',
    'print(float("12e_3"))',
    "print(float(1 << 1100))",
    "print(float(-(1 << 1100)))",
    "print(float(str(1 << 1100)))",
    "print(float(None))",
    "print(float([]))",
    "print(float(1, 2))",
    "print(float(x=1))",
    "f = float\nprint(f(1, 2))",
    "print((1 << 1100) + 0.5)",
    "print(0.5 * (1 << 1100))",
    "print((1 << 1100) / 2)",
    "print(2 / (1 << 1100))",
    "print((1 << 1100) // 1.0)",
    "print(1.0 % (1 << 1100))",
    "print(1.0 < (1 << 1100), 1 < 2.0, (1 << 1100) < 1.0)",
    'print("%d" % float("nan"))',
    'print("%x" % float("inf"))',
    'print("%e" % "1")',
    'print("%c" % 65.0)',
    "print(range(3)[1.0])",
    'print("abc"[1.0])',
    "print(range(1.0))",
    "print(1 << 2.0)",
    "print(2.0 << 1)",
    "print(2.0 & 1)",
    "print(~1.5)",
    'print("a" * 2.0)',
    "print([1] * 2.0)",
    'print(1.5 + "a")',
    "print(True + 1.5)",
    "print(None < 1.5)",
    'print(1.5 < "a")',
    'print(sorted([1.5, "a"]))',
    "print(len(1.5))",
    "print([x for x in 1.5])",
    "print(hash(1.5))",
    "print(chr(65.0))",
    "print(int(1.5, 10))",
    "print(-float)",
    "print(float.x)",
    "print(1.5.real)",
)


# -- the soft-float library ------------------------------------------------------------------


def test_soft_float_agrees_with_the_host_on_special_values_and_random_operands() -> None:
    cases = []
    for op in OPERATIONS:
        cases += list(edge_cases(op)) + random_cases(op, 1000, seed=0)
        if op in BOUNDARY_OPERATIONS:
            cases += boundary_cases(op, 2000, seed=0)
    report = run_driver(cases, "fast")
    assert report.differences == 0, describe(cases, report)
    # the reference tier on a sample of them, to the tick with the fast tier
    sample = cases[::16]
    reference = run_driver(sample, "reference", measure=True)
    fast = run_driver(sample, "fast", measure=True)
    assert reference.differences == 0, describe(sample, reference)
    assert reference == fast


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_soft_float_agrees_with_the_host_on_a_million_random_operands(op: str) -> None:
    assert differences_in_batches(random_cases(op, 1_000_000, seed=1), "fast") == ""


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(BOUNDARY_OPERATIONS))
def test_soft_float_agrees_with_the_host_where_fast_paths_end(op: str) -> None:
    assert differences_in_batches(boundary_cases(op, 500_000, seed=1), "fast") == ""


@pytest.mark.slow
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt", "from_word"])
def test_soft_float_agrees_with_the_host_on_a_million_operands_on_the_reference_tier(
    op: str,
) -> None:
    assert differences_in_batches(random_cases(op, 1_000_000, seed=2), "reference") == ""


# -- programs against the Go implementation's recorded answers --------------------------------


def expected() -> dict[str, Outcome]:
    recorded = json.loads(EXPECTED_FILE.read_text())
    return {source: Outcome.from_json(outcome) for source, outcome in recorded.items()}


def run(source: str, tier: str, memory_quota: int = MEMORY_QUOTA) -> Outcome:
    program = compile_kforge(source, "t.star", memory_quota=memory_quota)
    result = run_kforge(program, tier, tick_budget=TICK_BUDGET, memory_quota=memory_quota)
    return result.outcome


def check(source: str, tier: str) -> Outcome:
    want = expected()[source]
    got = run(source, tier)
    assert (got.kind, got.stdout) == (want.kind, want.stdout), f"{tier}: {source}"
    if want.kind != SUCCESS:
        assert got.traceback == want.traceback, f"{tier}: {source}"
    return got


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_prints_what_go_prints(name: str) -> None:
    source = PROGRAMS[name]
    reference = check(source, "reference")
    assert run(source, "fast") == reference


def test_errors_are_gos() -> None:
    failures = []
    for source in ERRORS:
        try:
            check(source, "reference")
        except AssertionError as failure:
            failures.append(str(failure))
    assert not failures, "\n\n".join(failures)


# -- a model of Go's strconv, and random doubles --------------------------------------------------


def bits_of(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def double(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


def go_str(x: float) -> str:
    """What the Go implementation's ``str`` writes: ``strconv.FormatFloat(x, 'g', -1,
    64)`` (the shortest digits, Python's ``repr`` digits too; an exponent when it is below
    -4 or 6 and up), with ``.0`` when neither a point nor an exponent shows."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    sign = "-" if math.copysign(1, x) < 0 else ""
    if x == 0:
        return sign + "0.0"
    mantissa, _, exponent = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    point = len(whole) - (len(whole + fraction) - len(digits)) + int(exponent or 0)
    digits = digits.rstrip("0")
    if not -4 <= point - 1 < 6:
        shown = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{shown}e{'-' if point < 1 else '+'}{abs(point - 1):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point < len(digits):
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits}{'0' * (point - len(digits))}.0"


def go_fixed(x: float, conversion: str) -> str:
    """``%e`` and ``%f``: six digits after the point, correctly rounded (as Python's)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"%.6{conversion}" % x


def random_double(rng: random.Random) -> float:
    while True:
        kind = rng.random()
        if kind < 0.3:
            value = double(rng.getrandbits(64))
        elif kind < 0.5:
            value = double((rng.randint(0x3C0, 0x440) << 52) | rng.getrandbits(52))
        elif kind < 0.6:
            value = double(rng.getrandbits(52))  # subnormal
        elif kind < 0.75:
            value = rng.randint(1, 10 ** rng.randint(1, 18)) / 10 ** rng.randint(0, 20)
        else:
            value = double((rng.randint(0x300, 0x4FF) << 52) | rng.getrandbits(52))
        if not math.isnan(value):
            return -value if rng.random() < 0.3 else value


def literal(value: float) -> str:
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return repr(value)


def formatting_program(values: list[float]) -> tuple[str, str]:
    source = f"xs = [{', '.join(literal(v) for v in values)}]\n"
    source += "for x in xs:\n    print(str(x), '%e' % x, '%f' % x, '%g' % x, '%E' % x)\n"
    lines = [
        f"{go_str(x)} {go_fixed(x, 'e')} {go_fixed(x, 'f')} {go_str(x)} {go_fixed(x, 'E')}"
        for x in values
    ]
    return source, "".join(line + "\n" for line in lines)


def halfway_string(rng: random.Random) -> str:
    """The exact decimal of a point halfway between two doubles, or just beside it."""
    from decimal import Decimal

    x = double((rng.randint(0x3A0, 0x460) << 52) | rng.getrandbits(52))
    halfway = (Decimal(x) + Decimal(math.nextafter(x, math.inf))) / 2
    return format(halfway, "e") + rng.choice(["", "1", "0000001"])


def random_number_string(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        text = repr(abs(random_double(rng)))
        text = "1.0" if "inf" in text else text
    elif kind < 0.6:
        count = rng.randint(1, 40)
        digits = "".join(rng.choice("0123456789") for _ in range(count))
        at = rng.randint(0, count)
        text = digits[:at] + "." + digits[at:] if rng.random() < 0.7 else digits
        if rng.random() < 0.6:
            text += f"e{rng.randint(-340, 300)}"
    else:
        text = halfway_string(rng)
    return rng.choice(["", "-", "+"]) + text


def parsing_program(texts: list[str]) -> tuple[str, str]:
    source = f"ss = [{', '.join(repr(t) for t in texts)}]\n"
    source += "for s in ss:\n    print(float(s))\n"
    return source, "".join(go_str(float(t)) + "\n" for t in texts)


def go_floordiv(x: float, y: float) -> float:
    """Go's ``x // y``: ``math.Floor(x / y)`` (a zero keeps its sign)."""
    quotient = x / y
    if math.isinf(quotient) or math.isnan(quotient) or quotient == 0:
        return quotient
    floor = float(math.floor(quotient))
    return math.copysign(floor, quotient) if floor == 0 else floor


def go_mod(x: float, y: float) -> float:
    """Go's ``x % y``: ``math.Mod``, then the divisor added when the signs differ."""
    if math.isinf(x) or math.isnan(x) or math.isnan(y):
        return math.nan
    z = math.fmod(x, y) if not math.isinf(y) else x
    if (x < 0) != (y < 0) and z != 0:
        z += y
    return z


def arithmetic_program(pairs: list[tuple[float, float]]) -> tuple[str, str]:
    source = "ps = [" + ", ".join(f"({literal(x)}, {literal(y)})" for x, y in pairs) + "]\n"
    source += (
        "for x, y in ps:\n    print(x + y, x - y, x * y, x / y, x // y, x % y, x < y, x == y)\n"
    )
    lines = []
    for x, y in pairs:
        results = [x + y, x - y, x * y, x / y, go_floordiv(x, y), go_mod(x, y)]
        shown = [go_str(r) for r in results] + [str(x < y), str(x == y)]
        lines.append(" ".join(shown))
    return source, "".join(line + "\n" for line in lines)


def random_pairs(rng: random.Random, count: int) -> list[tuple[float, float]]:
    pairs = []
    while len(pairs) < count:
        x, y = random_double(rng), random_double(rng)
        if rng.random() < 0.3:
            y = x * rng.choice([1, -1, 0.5, 3]) + rng.choice([0, 1, -1e-300])
        if y != 0 and not math.isinf(x):
            pairs.append((x, y))
    return pairs


def printed(source: str, tier: str) -> str:
    outcome = run(source, tier)
    assert outcome.kind == SUCCESS, outcome
    return outcome.stdout


def assert_same_lines(got: str, want: str) -> None:
    for number, (line, wanted) in enumerate(
        zip(got.splitlines(), want.splitlines(), strict=False), 1
    ):
        assert line == wanted, f"line {number}"
    assert len(got.splitlines()) == len(want.splitlines())


def test_random_doubles_are_written_as_go_writes_them() -> None:
    rng = random.Random(10)
    values = [random_double(rng) for _ in range(400)]
    source, want = formatting_program(values)
    assert_same_lines(printed(source, "fast"), want)
    source, want = formatting_program(values[:40])
    assert_same_lines(printed(source, "reference"), want)


def test_random_numbers_are_read_as_go_reads_them() -> None:
    rng = random.Random(11)
    texts = [random_number_string(rng) for _ in range(300)]
    texts = [t for t in texts if not math.isinf(float(t))]
    source, want = parsing_program(texts)
    assert_same_lines(printed(source, "fast"), want)
    source, want = parsing_program(texts[:30])
    assert_same_lines(printed(source, "reference"), want)


def test_random_arithmetic_gives_the_hosts_doubles() -> None:
    rng = random.Random(12)
    pairs = random_pairs(rng, 400)
    source, want = arithmetic_program(pairs)
    assert_same_lines(printed(source, "fast"), want)
    source, want = arithmetic_program(pairs[:30])
    assert_same_lines(printed(source, "reference"), want)


def test_doubles_on_both_sides_of_the_word_path_are_written_as_go_writes_them() -> None:
    """Digits are made on single words while the scaled numbers stay below 2**60 (most
    doubles between about 1e-3 and 1e17), else on multi-limb numbers: values across that
    edge, powers of two and ten, the neighbours of each, and exact ties of ``%e`` and
    ``%f`` (half to even) must read the same either way."""
    values: list[float] = []
    for exponent in range(-80, 80, 3):
        x = 2.0**exponent
        values += [x, math.nextafter(x, 0), math.nextafter(x, math.inf), x * 1.7]
    for power in range(-22, 23):
        x = 10.0**power
        values += [x, math.nextafter(x, 0), math.nextafter(x, math.inf), x / 3]
    values += [12345665.0, 12345675.0, 0.0078125, 0.0234375, 2.5, 0.5, 1.0009765625]
    values += [float(2**53 - 1), float(2**60), 1 / 3, 2 / 3, 0.1, 0.7, 123456789.123]
    source, want = formatting_program(values)
    assert_same_lines(printed(source, "fast"), want)
    source, want = formatting_program(values[::9])
    assert_same_lines(printed(source, "reference"), want)


@pytest.mark.slow
def test_many_random_doubles_are_written_read_and_computed_with() -> None:
    rng = random.Random(13)
    for _ in range(10):
        values = [random_double(rng) for _ in range(2000)]
        source, want = formatting_program(values)
        assert_same_lines(printed(source, "fast"), want)
        texts = [
            t for t in (random_number_string(rng) for _ in range(1000)) if not math.isinf(float(t))
        ]
        source, want = parsing_program(texts)
        assert_same_lines(printed(source, "fast"), want)
        source, want = arithmetic_program(random_pairs(rng, 2000))
        assert_same_lines(printed(source, "fast"), want)


def test_the_model_of_go_agrees_with_go() -> None:
    """What the tests above expect is what the Go implementation prints."""
    pytest.importorskip("starlark_go")
    from starlark.harness import run_oracle

    rng = random.Random(14)
    values = [random_double(rng) for _ in range(300)]
    texts = [t for t in (random_number_string(rng) for _ in range(200)) if not math.isinf(float(t))]
    for source, want in (
        formatting_program(values),
        parsing_program(texts),
        arithmetic_program(random_pairs(rng, 300)),
    ):
        assert run_oracle(source, "t.star").stdout == want


# -- generated programs against starlark-go ---------------------------------------------------------


class FloatProgram:
    """A program of random float expressions: literals of every kind, mixed ints, the
    arithmetic operators (divisors kept from zero), comparisons, conversions, ``str``
    and the ``%`` conversions, sorting and dicts keyed by numbers."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.lines = ["inf = float('inf')", "nan = float('nan')"]
        self.names: list[str] = []

    def number(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.35:
            return (
                literal(random_double(rng)) if rng.random() < 0.5 else repr(rng.uniform(-100, 100))
            )
        if kind < 0.5:
            return str(
                rng.choice(
                    [
                        0,
                        1,
                        -1,
                        2,
                        3,
                        7,
                        10,
                        -5,
                        1 << 53,
                        (1 << 53) + 1,
                        1 << 62,
                        -(1 << 62),
                        (1 << 70) + 1,
                    ]
                )
            )
        if kind < 0.6:
            return rng.choice(["inf", "-inf", "nan", "0.0", "-0.0", "0.5", "1e-320", "1e308"])
        if kind < 0.7 and self.names:
            return rng.choice(self.names)
        return rng.choice(
            ["float('1.5')", "float(3)", "float('-2.5e-3')", "float('0x1p-3')", "abs(-2.5)"]
        )

    def expr(self, depth: int = 0) -> str:
        rng = self.rng
        if depth > 2 or rng.random() < 0.3:
            return self.number()
        left, right = self.expr(depth + 1), self.expr(depth + 1)
        op = rng.choice(["+", "-", "*", "/", "//", "%", "+", "*"])
        if op in ("/", "//", "%"):
            right = f"({right} if {right} != 0 else 1.5)"
        kind = rng.random()
        if kind < 0.1:
            return f"-({left})"
        if kind < 0.15:
            return f"abs({left})"
        if kind < 0.2:
            return f"float({left})"
        return f"({left} {op} {right})"

    def statement(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.2:
            name = f"v{len(self.names)}"
            self.names.append(name)
            return f"{name} = {self.expr()}"
        if kind < 0.35:
            return f"print({self.expr()} {rng.choice(['<', '<=', '==', '!=', '>', '>='])} {self.expr()})"
        if kind < 0.5:
            conversion = rng.choice(["%e", "%f", "%g", "%s", "%r", "%E", "%G"])
            return f"print('{conversion}' % ({self.expr()},))"
        if kind < 0.55:
            return f"print(int(max(-1e18, min(1e18, {self.expr()}))))"
        if kind < 0.65:
            items = ", ".join(self.expr(1) for _ in range(rng.randint(2, 5)))
            return f"print(sorted([{items}]), min([{items}]), max([{items}]))"
        if kind < 0.72:
            items = ", ".join(f"{self.expr(2)}: {i}" for i in range(rng.randint(1, 4)))
            return f"print({{{items}}})"
        if kind < 0.78:
            return f"print(str({self.expr()}), '{{}}'.format({self.expr()}), bool({self.expr()}))"
        return f"print({self.expr()})"

    def source(self) -> str:
        count = self.rng.randint(10, 25)
        return "\n".join(self.lines + [self.statement() for _ in range(count)]) + "\n"


def float_program(seed: int) -> str:
    return FloatProgram(seed).source()


def disagreements(seeds: range) -> list[str]:
    from starlark.harness import run_oracle_isolated

    sources = [float_program(seed) for seed in seeds]
    found = []
    for seed, source, want in zip(
        seeds, sources, run_oracle_isolated(sources, "t.star"), strict=True
    ):
        if want is None:
            continue
        program = compile_kforge(source, "t.star", memory_quota=MEMORY_QUOTA)
        runs = [
            run_kforge(program, tier, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA)
            for tier in ("fast", "reference")
        ]
        assert runs[0] == runs[1], f"seed {seed}: the tiers disagree"
        got = runs[0].outcome
        if (got.kind, got.stdout, got.message) != (want.kind, want.stdout, want.message):
            found.append(
                f"seed {seed}: kforge {got.kind} {got.message!r}, Go {want.kind} {want.message!r}"
            )
    return found


def test_generated_float_programs_run_as_in_go() -> None:
    pytest.importorskip("starlark_go")
    assert disagreements(range(6)) == []


@pytest.mark.slow
def test_many_generated_float_programs_run_as_in_go() -> None:
    pytest.importorskip("starlark_go")
    assert disagreements(range(6, 406)) == []


# -- math ---------------------------------------------------------------------------------------------


MATH_VALUES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, 2.0, 3.0, -2.5, 0.1, 10.0, 100.5, 1e-310,
               5e-324, 1e300, -1e300, 1.7976931348623157e308, 2.0**60 + 0.5, math.pi, math.e,
               math.inf, -math.inf, math.nan]  # fmt: skip


def math_values(rng: random.Random, count: int) -> list[float]:
    values = list(MATH_VALUES)
    while len(values) < count:
        values.append(rng.choice([rng.uniform(-10, 10), random_double(rng), rng.uniform(-1, 1)]))
    return values


def go_round(x: float) -> float:
    if math.isinf(x) or math.isnan(x) or x == 0:
        return x
    rounded = float(math.floor(abs(Fraction(x)) + Fraction(1, 2)))
    return math.copysign(rounded, x)


def go_hypot(p: float, q: float) -> float:
    if math.isinf(p) or math.isinf(q):
        return math.inf
    if math.isnan(p) or math.isnan(q):
        return math.nan
    p, q = max(abs(p), abs(q)), min(abs(p), abs(q))
    if p == 0:
        return 0.0
    q = q / p
    return p * math.sqrt(1 + q * q)


def go_fmod(x: float, y: float) -> float:
    if y == 0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
        return math.nan
    return math.fmod(x, y)


def go_remainder(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or y == 0:
        return math.nan
    return x if math.isinf(y) else math.remainder(x, y)


def go_sqrt(x: float) -> float:
    return math.nan if x < 0 or math.isnan(x) else math.sqrt(x)


#: The functions whose results are exact (or rounded once): the host's bits, as Go's.
EXACT_UNARY = {
    "sqrt": go_sqrt,
    "fabs": abs,
    "round": go_round,
    "degrees": lambda x: 360 * x / (2 * math.pi),
    "radians": lambda x: 2 * math.pi * x / 360,
}
EXACT_BINARY = {
    "copysign": math.copysign,
    "mod": go_fmod,
    "remainder": go_remainder,
    "hypot": go_hypot,
}


def same_double(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or bits_of(a) == bits_of(b)


def math_outputs(source: str, tier: str) -> list[list[float]]:
    lines = printed(source, tier).splitlines()
    return [[float(word) for word in line.split()] for line in lines]


def test_exact_math_functions_give_the_hosts_bits() -> None:
    rng = random.Random(20)
    xs = math_values(rng, 120)
    ys = list(reversed(math_values(rng, 120)))
    source = (
        f"xs = [{', '.join(literal(x) if x == x else 'nan' for x in xs)}]\nnan = float('nan')\n"
    )
    source = "nan = float('nan')\n" + source
    source += f"ys = [{', '.join(literal(y) if y == y else 'nan' for y in ys)}]\n"
    for name in EXACT_UNARY:
        source += f"print(' '.join(['%r' % math.{name}(x) for x in xs]))\n"
    for name in EXACT_BINARY:
        source += f"print(' '.join(['%r' % math.{name}(x, y) for x, y in zip(xs, ys)]))\n"
    rows = math_outputs(source.replace("+inf", "inf"), "fast")
    wanted = [[f(x) for x in xs] for f in EXACT_UNARY.values()]
    wanted += [[f(x, y) for x, y in zip(xs, ys, strict=True)] for f in EXACT_BINARY.values()]
    names = [*EXACT_UNARY, *EXACT_BINARY]
    for name, row, want in zip(names, rows, wanted, strict=True):
        wrong = [i for i, (g, w) in enumerate(zip(row, want, strict=True)) if not same_double(g, w)]
        assert not wrong, f"math.{name}({xs[wrong[0]]}): {row[wrong[0]]!r}, want {want[wrong[0]]!r}"


#: How far Go's algorithms may stray from the correctly rounded result, in units in
#: the last place, on the arguments below (arguments near a zero of the function are
#: avoided: there any absolute error is many ulps).
ULP_BOUNDS = {
    "exp": 1, "log": 1, "sin": 2, "cos": 2, "tan": 2, "asin": 1, "acos": 2, "atan": 1,
    "sinh": 2, "cosh": 2, "tanh": 2, "asinh": 2, "acosh": 2, "atanh": 2, "gamma": 80,
}  # fmt: skip
ARGUMENTS = {
    "exp": (-700, 700), "log": (1e-300, 1e300), "sin": (0.1, 1.4), "cos": (0.1, 1.4),
    "tan": (-1.4, 1.4), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atan": (-50, 50),
    "sinh": (-30, 30), "cosh": (-30, 30), "tanh": (-5, 5), "asinh": (-1e5, 1e5),
    "acosh": (1, 1e5), "atanh": (-0.99, 0.99), "gamma": (0.1, 30),
}  # fmt: skip


def ulp_distance(a: float, b: float) -> int:
    def ordered(x: float) -> int:
        n = bits_of(x)
        return n if n < 1 << 63 else (1 << 63) - n

    return abs(ordered(a) - ordered(b))


def test_other_math_functions_stay_within_gos_error_of_the_hosts() -> None:
    rng = random.Random(21)
    arguments = {
        name: [rng.uniform(*bounds) for _ in range(60)] for name, bounds in ARGUMENTS.items()
    }
    source = ""
    for name, xs in arguments.items():
        source += f"print(' '.join(['%r' % math.{name}(x) for x in {xs!r}]))\n"
    rows = math_outputs(source, "fast")
    for (name, xs), row in zip(arguments.items(), rows, strict=True):
        host = getattr(math, name)
        worst = max(ulp_distance(g, host(x)) for g, x in zip(row, xs, strict=True))
        assert worst <= ULP_BOUNDS[name], f"math.{name}: {worst} ulps"


def test_math_special_values_and_errors() -> None:
    source = """
print(math.sqrt(-1), math.sqrt(-0.0), math.exp(-inf), math.exp(1000), math.log(0), math.log(-1))
print(math.pow(0, -1), math.pow(-0.0, -3), math.pow(-8, 1.0 / 3), math.pow(2, 0.5), math.pow(-2, 3), math.pow(2, -1074))
print(math.pow(10, 308), math.pow(10, 309), math.pow(1.0000001, 1e10), math.pow(-1, inf), math.pow(0.5, -inf))
print(math.atan2(0.0, -0.0), math.atan2(-0.0, -0.0), math.atan2(1, -inf), math.atan2(-inf, -inf), math.hypot(3, 4))
print(math.gamma(5), math.gamma(0.5), math.gamma(-0.5), math.gamma(171), math.gamma(172), math.gamma(-0.0))
print(math.sin(1e22), math.cos(1e22), math.tan(1e22), math.sin(float(1 << 30)), math.cos(1 << 100))
print(math.floor(1 << 70), math.ceil(-(1 << 70)), math.floor(2.5e20), math.ceil(-0.5), math.round(2.5), math.round(-2.5))
print(math.log(8, 2), math.log(100, 10), math.log(1 << 500 << 500 << 500 << 500), math.sqrt(1 << 500 << 500 << 500 << 500), math.degrees(math.pi), math.radians(180))
print(math.copysign(1, -0.0), math.copysign(1, float("-nan")), math.mod(-7, 3), math.remainder(7, 2), math.remainder(-7, 2))
print(math.e, math.pi, type(math), math, math.sqrt, dir(math)[:4], getattr(math, "pi"), hasattr(math, "tau"))
""".replace("inf", "float('inf')").replace("float('inf')', ", "inf', ")
    want = """nan -0.0 0.0 +inf -inf nan
+inf -inf nan 1.4142135623730951 -8.0 5e-324
1.0000000000000006e+308 +inf +inf 1.0 +inf
3.141592653589793 -3.141592653589793 3.141592653589793 -2.356194490192345 5.0
24.0 1.7724538509055159 -3.5449077018110318 7.257415615308e+306 +inf -inf
-0.8522008497671889 0.5232147853951389 -1.6287782256068992 -0.6173264150460422 0.4891786569747214
1180591620717411303424 -1180591620717411303424 250000000000000000000 0 3.0 -3.0
3.0 2.0 +inf +inf 180.0 3.141592653589793
-1.0 1.0 -1.0 -1.0 1.0
2.718281828459045 3.141592653589793 module <module "math"> <built-in function sqrt> ["acos", "acosh", "asin", "asinh"] 3.141592653589793 False
"""
    got = printed(source, "fast")
    assert_same_lines(got, want)


MATH_ERRORS = {
    'math.sqrt("1")': "Error in sqrt: sqrt: for parameter 1: got string, want float or int",
    "math.pow(1.0, None)": "Error in pow: pow: for parameter 2: got NoneType, want float or int",
    'math.floor("0")': "Error in floor: got string, want float or int",
    "math.ceil(float('inf'))": "Error in ceil: cannot convert float infinity to integer",
    "math.floor(float('nan'))": "Error in floor: cannot convert float NaN to integer",
    "math.log(2, 1)": "Error in log: division by zero",
    "math.sqrt()": "Error in sqrt: sqrt: got 0 arguments, want 1",
    "math.hypot(1)": "Error in hypot: hypot: got 1 arguments, want 2",
    "math.log(1, 2, 3)": "Error in log: log: got 3 arguments, want at most 2",
    "math.sqrt(x=1)": "Error in sqrt: sqrt: unexpected keyword arguments",
    "math.tau": "Error: module has no .tau field or method (did you mean .tan?)",
}


def test_math_errors_are_worded_as_go_words_them() -> None:
    failures = []
    for expression, message in MATH_ERRORS.items():
        outcome = run(f"print({expression})", "reference")
        last = (outcome.traceback or "").strip().splitlines()[-1:]
        if last != [message]:
            failures.append(f"{expression}: {last}")
    assert not failures, failures


# -- only programs with floats pay for them ---------------------------------------------------------


FLOAT_CODE = ("f64_", "float_", "number_", "math_", "go_")


def linked_functions(source: str) -> set[str]:
    from kforge.debuginfo import debug_info

    program = compile_kforge(source, "t.star", memory_quota=1 << 20)
    info = debug_info(program)
    assert info is not None
    return {function.name for function in info.functions}


def test_a_program_without_floats_links_no_float_code() -> None:
    plain = linked_functions(
        'x = [3, 1, 2]\nprint(sorted(x), x == [1], 2 in x, "%d %s" % (1, x), {1: 2})\n'
    )
    assert not {name for name in plain if name.startswith(FLOAT_CODE) or "@floats" in name}
    floats = linked_functions("print(1.5 * 2)\n")
    assert {"f64_mul", "float_new", "write_float"} <= floats


def test_floats_take_heap_and_running_out_of_it_is_a_clear_error() -> None:
    """A float is a 16-byte heap object: a loop that makes 100,000 floats allocates
    1.6 MB, which the collector takes back in 64 KiB; floats that stay alive fill the
    heap and stop with Starlark's error."""
    source = "x = 0.0\nfor i in range(100000):\n    x += 0.5\nprint(x)\n"
    assert run(source, "fast", memory_quota=1 << 16).stdout == "50000.0\n"
    kept = "x = []\nfor i in range(100000):\n    x.append(i * 0.5)\nprint(len(x))\n"
    outcome = run(kept, "fast", memory_quota=1 << 16)
    assert outcome.message == "out of memory: the program's heap reached its memory quota"
    assert run(kept, "fast", memory_quota=1 << 23).stdout == "100000\n"


def record() -> None:
    """Ask the Go implementation for every program's outcome and write them down."""
    from starlark.harness import run_oracle

    sources = [*PROGRAMS.values(), *ERRORS]
    outcomes = {source: run_oracle(source, "t.star").to_json() for source in sources}
    EXPECTED_FILE.write_text(json.dumps(outcomes, indent=1, ensure_ascii=False) + "\n")
    print(f"recorded {len(outcomes)} outcomes in {EXPECTED_FILE.name}", file=sys.stderr)


if __name__ == "__main__":
    record()
