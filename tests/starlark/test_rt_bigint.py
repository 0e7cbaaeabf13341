"""Arbitrary-precision ints in compiled Starlark, and the builtins int, abs, hash, chr, ord.

Starlark's ints are unbounded (the Go implementation uses math/big), and so are
Python's; the two agree on every operation checked here (``+ - * // % & | ^ << >>``,
unary ``-`` and ``~``, comparisons, ``str`` and ``int(str, base)``), which
``test_python_ints_agree_with_go`` checks on a generated batch when the oracle is
installed.  The arithmetic tests compare kforge with Python's ints; the builtin and
error tests compare it with answers recorded from the oracle, so no other test needs it.

The programs loop over operand lists rather than spelling out each case, so they stay
small and compile quickly for both tiers; each prints one line per case, and some
lines check identities (``a // b * b + a % b == a``) that also fail if a result that
fits a small int was left as a big one (a small int equals only itself).
"""

from __future__ import annotations

import random

import pytest

from starlark.harness import (
    RUNTIME_ERROR,
    SUCCESS,
    KforgeRun,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
)

pytestmark = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)

TICK_BUDGET = 200_000_000
MEMORY_QUOTA = 16 * 1024 * 1024
FILENAME = "t.star"

#: Values at the edges of the representations: small ints (63 bits), machine words and
#: limbs (64 bits), the halves products and quotients work on (32 bits) and a few
#: multi-limb powers.
BOUNDARIES = [
    0, 1, -1, 2, -3,
    2**31 - 1, 2**31, -(2**31),
    2**32 - 1, 2**32, -(2**32), 2**32 + 1,
    2**62 - 1, 2**62, -(2**62), -(2**62) - 1, 2**62 + 1,
    2**63 - 1, 2**63, -(2**63), -(2**63) - 1,
    2**64 - 1, 2**64, -(2**64), 2**64 + 1,
    2**96, -(2**96) + 1, 2**127 + 2**63, 2**128 - 1, 2**128, -(2**128) - 1, 2**192 - 1,
]  # fmt: skip

#: Divisions whose estimated quotient digit is one too large even after Knuth's test,
#: so that algorithm D must add the divisor back (found by simulating it; random
#: operands almost never take that path).
ADD_BACK_DIVISIONS = [
    (0x7FFFFFFF800000008000000180000001FFFFFFFE80000000FFFFFFFF, 0xFFFFFFFF000000018000000000000001),
    (0x80000000FFFFFFFF8000000100000002, 0x80000000FFFFFFFFFFFFFFFE),
    (0xFFFFFFFF0000000000000002800000010000000100000001FFFFFFFF, 0x18000000000000000FFFFFFFF),
    (0xFFFFFFFF0000000100000002FFFFFFFE0000000100000000, 0x7FFFFFFF80000000FFFFFFFFFFFFFFFE),
    (0xFFFFFFFE00000001FFFFFFFF000000027FFFFFFF, 0x800000000000000100000002),
    (0x800000000000000200000002FFFFFFFF00000001FFFFFFFF, 0x8000000000000002FFFFFFFE),
    (0x17FFFFFFF00000001FFFFFFFFEA5B4AC10000000000000000, 0x8000000000000000FFFFFFFF80000001),
    (0x14670A7F0FFFFFFFEFFFFFFFF305F47B559911609, 0x2FFFFFFFFFFFFFFFF),
]  # fmt: skip


def run(source: str, tier: str) -> KforgeRun:
    program = compile_kforge(source, FILENAME, memory_quota=MEMORY_QUOTA)
    return run_kforge(program, tier, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA)


def run_both_tiers(source: str) -> KforgeRun:
    """The reference tier's run, after checking that the fast tier agrees to the tick."""
    reference = run(source, "reference")
    fast = run(source, "fast")
    assert (fast.outcome, fast.ticks_used) == (reference.outcome, reference.ticks_used)
    return reference


def assert_prints(result: KforgeRun, expected: str) -> None:
    """A successful run that printed ``expected``; on a difference, the first line."""
    assert result.outcome.kind == SUCCESS, result.outcome
    got, want = result.outcome.stdout.splitlines(), expected.splitlines()
    for number, (line, wanted) in enumerate(zip(got, want, strict=False), 1):
        assert line == wanted, f"line {number}"
    assert len(got) == len(want)


def printed(*values: object) -> str:
    """What Starlark's ``print`` writes for these ints and bools."""
    return " ".join(str(value) for value in values) + "\n"


# -- random operands against Python ------------------------------------------------------


def random_int(rng: random.Random) -> int:
    """An int from 0 to about 400 bits, of either sign, sometimes a boundary value or
    one with long runs of ones (which stress carries and borrows)."""
    if rng.random() < 0.15:
        return rng.choice(BOUNDARIES)
    bits = rng.choice([rng.randint(0, 70), rng.randint(60, 140), rng.randint(0, 400)])
    value = rng.getrandbits(bits) if bits else 0
    if bits > 2 and rng.random() < 0.3:
        holes = rng.getrandbits(bits) & rng.getrandbits(bits) & rng.getrandbits(bits)
        value = ((1 << bits) - 1) ^ holes
    return -value if rng.random() < 0.5 else value


def spelled(value: int, base: int, rng: random.Random) -> tuple[str, int]:
    """``value`` as a string ``int(s, b)`` reads back, with a sign, a prefix or
    upper-case digits now and then."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    magnitude, text = abs(value), ""
    while magnitude:
        magnitude, digit = divmod(magnitude, base)
        text = digits[digit] + text
    text = text or "0"
    if rng.random() < 0.3:
        text = text.upper()
    prefixes = {2: "0b", 8: "0o", 16: "0x"}
    if base in prefixes and rng.random() < 0.5:
        text = prefixes[base] + text
        base = rng.choice([0, base])
    sign = "-" if value < 0 else rng.choice(["", "+"])
    return sign + text, base


def arithmetic_program(seed: int, count: int) -> tuple[str, str]:
    """A program doing every operation on ``count`` random operand pairs, and what it
    must print (Python's answers)."""
    rng = random.Random(seed)
    values = [random_int(rng) for _ in range(count)]
    partners = [rng.randrange(count) for _ in range(count)]
    lefts = [rng.randint(0, 300) for _ in range(count)]
    rights = [rng.choice([rng.randint(0, 70), rng.randint(0, 500)]) for _ in range(count)]
    spellings = [spelled(v, rng.choice([2, 7, 8, 10, 16, 36]), rng) for v in values]
    source = f"""
v = {values}
partners = {partners}
lefts = {lefts}
rights = {rights}
spellings = {spellings}
for i in range(len(v)):
    a = v[i]
    b = v[partners[i]]
    print(a + b, a - b, a * b, a + b - b == a)
    if b != 0:
        print(a // b, a % b, a // b * b + a % b == a)
    print(a & b, a | b, a ^ b, -a, ~a, (a & b) + (a | b) == a + b)
    print(a << lefts[i], a >> rights[i], (a << lefts[i]) >> lefts[i] == a)
    print(a < b, a <= b, a == b, a != b, a > b, a >= b)
    text, base = spellings[i]
    print(int(text, base) == a, int(str(a)) == a, abs(a))
"""
    lines = []
    for i, a in enumerate(values):
        b = values[partners[i]]
        lines.append(printed(a + b, a - b, a * b, True))
        if b != 0:
            lines.append(printed(a // b, a % b, True))
        lines.append(printed(a & b, a | b, a ^ b, -a, ~a, True))
        lines.append(printed(a << lefts[i], a >> rights[i], True))
        lines.append(printed(a < b, a <= b, a == b, a != b, a > b, a >= b))
        lines.append(printed(True, True, abs(a)))
    return source, "".join(lines)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_operands_match_python_ints(seed: int) -> None:
    source, expected = arithmetic_program(seed, 45)
    assert_prints(run(source, "reference"), expected)


def test_random_operands_run_the_same_on_both_tiers() -> None:
    source, expected = arithmetic_program(3, 20)
    assert_prints(run_both_tiers(source), expected)


def test_python_ints_agree_with_go() -> None:
    """The premise of the tests above, checked against the Go implementation."""
    pytest.importorskip("starlark_go")
    from starlark.harness import run_oracle

    source, expected = arithmetic_program(4, 60)
    outcome = run_oracle(source, FILENAME)
    assert outcome.kind == SUCCESS
    assert outcome.stdout == expected


# -- fixed cases --------------------------------------------------------------------------


def pairs_program(values: list[int]) -> tuple[str, str]:
    """Every operation on every ordered pair of ``values``."""
    source = f"""
v = {values}
for a in v:
    print(-a, ~a, a >> 1, a >> 31, a >> 32, a >> 62, a >> 63, a >> 64, a << 1, a << 31, a << 63)
    for b in v:
        if b == 0:
            print(a + b, a - b, a * b, a & b, a | b, a ^ b, a < b, a == b)
        else:
            print(a + b, a - b, a * b, a // b, a % b, a & b, a | b, a ^ b, a < b, a == b)
"""
    lines = []
    for a in values:
        shifts = (a >> 1, a >> 31, a >> 32, a >> 62, a >> 63, a >> 64, a << 1, a << 31, a << 63)
        lines.append(printed(-a, ~a, *shifts))
        for b in values:
            if b == 0:
                lines.append(printed(a + b, a - b, a * b, a & b, a | b, a ^ b, a < b, a == b))
            else:
                sums = (a + b, a - b, a * b, a // b, a % b)
                lines.append(printed(*sums, a & b, a | b, a ^ b, a < b, a == b))
    return source, "".join(lines)


def test_boundary_values_in_every_pair() -> None:
    source, expected = pairs_program(BOUNDARIES)
    assert_prints(run(source, "reference"), expected)


def test_long_division_that_adds_the_divisor_back() -> None:
    cases = [(sa * a, sb * b) for a, b in ADD_BACK_DIVISIONS for sa in (1, -1) for sb in (1, -1)]
    source = f"""
for a, b in {cases}:
    print(a // b, a % b, a // b * b + a % b == a)
"""
    expected = "".join(printed(a // b, a % b, True) for a, b in cases)
    assert_prints(run_both_tiers(source), expected)


def test_large_operands() -> None:
    """Thousands of bits: products, quotients and decimal conversion of factorials."""
    source = """
f = 1
for i in range(1, 400):
    f *= i
g = f // 7 + 1
print(f)
print(f * f - g * g == (f - g) * (f + g), len(str(f * f)))
print(f // g, f % g, (f * f) // (g + 12345), (f * f) % (g + 12345))
m = 1 << 500 << 500 << 500 << 500
print(f >> 1000, -f >> 1000, f & (m - 1) == f % m, -f // 1000000007)
print(int(str(f * g)) == f * g, int(str(-f), 10) == -f)
"""
    f = 1
    for i in range(1, 400):
        f *= i
    g = f // 7 + 1
    expected = (
        printed(f)
        + printed(True, len(str(f * f)))
        + printed(f // g, f % g, (f * f) // (g + 12345), (f * f) % (g + 12345))
        + printed(f >> 1000, -f >> 1000, True, -f // 1000000007)
        + printed(True, True)
    )
    assert_prints(run_both_tiers(source), expected)


def limb_sweep_operands(lengths: range) -> list[int]:
    """For each length in ``lengths`` (in 32-bit halves of a limb): all ones (a carry
    through every limb), the top bit alone, and a fixed pseudo-random magnitude; with
    both signs."""
    rng = random.Random(7)
    values = []
    for limbs in lengths:
        bits = 32 * limbs
        for magnitude in ((1 << bits) - 1, 1 << (bits - 1), rng.getrandbits(bits) | 1):
            values += [magnitude, -magnitude]
    return values


#: One-limb factors and divisors (the single-pass paths), and two-limb ones.
SMALL_OPERANDS = [1, 2, 3, 10, 1000000007, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**64 - 1]


#: A prime below 2**32: results of many limbs are printed as their residues, which a
#: wrong limb changes (printing every digit would take most of the test's time).
RESIDUE = 4294967291


def test_limb_counts_around_every_unrolled_turn() -> None:
    """Sums and differences of pairs of lengths from 1 to 35 halves of a limb (past two
    turns of the widest unrolled loop, six 64-bit limbs a turn, with every remainder);
    products and quotients of pairs, and by small operands, from 1 to 19 halves.  Each
    line also checks identities that fail if a result is not in canonical form."""
    long = limb_sweep_operands(range(1, 36))
    short = limb_sweep_operands(range(1, 20))
    smalls = SMALL_OPERANDS + [-d for d in SMALL_OPERANDS]
    source = f"""
long = {long}
short = {short}
d = {smalls}
def residues(values):
    return [x % {RESIDUE} for x in values]
for i in range(0, len(long), 3):
    a = long[i]
    for j in range(i % 7, i + 1, 11):
        b = long[j]
        print(residues([a + b, a - b, b - a, a + a]), a + b == b + a, a + b - b == a)
for i in range(0, len(short), 3):
    a = short[i]
    for j in range(i % 5, i + 1, 7):
        b = short[j]
        print(residues([a * b, a // b]), a % b % {RESIDUE}, a // b * b + a % b == a)
    for k in d:
        print(residues([a * k, k * a, a // k]), a % k, (a * k) // k == a)
"""
    lines = []

    def residues(values: list[int]) -> str:
        return "[" + ", ".join(str(x % RESIDUE) for x in values) + "]"

    for i in range(0, len(long), 3):
        a = long[i]
        for j in range(i % 7, i + 1, 11):
            b = long[j]
            lines.append(printed(residues([a + b, a - b, b - a, a + a]), True, True))
    for i in range(0, len(short), 3):
        a = short[i]
        for j in range(i % 5, i + 1, 7):
            b = short[j]
            lines.append(printed(residues([a * b, a // b]), a % b % RESIDUE, True))
        for k in smalls:
            lines.append(printed(residues([a * k, k * a, a // k]), a % k, True))
    assert_prints(run_both_tiers(source), "".join(lines))


def test_long_division_by_every_top_limb_width() -> None:
    """Divisors whose top limb has each width from 1 to 32 bits: the shift that
    normalizes a long division (Knuth's algorithm D) takes every value."""
    dividend = (3**200) | 1
    divisors = [(1 << k) + 12345 for k in range(32, 96)]
    source = f"""
p = {dividend}
for q in {divisors}:
    print(p // q, p % q, -p // q, -p % q)
"""
    expected = "".join(
        printed(dividend // q, dividend % q, -dividend // q, -dividend % q) for q in divisors
    )
    assert_prints(run_both_tiers(source), expected)


def test_64_bit_limb_boundaries() -> None:
    """Values around the edges of 64-bit limbs: carries and borrows through every limb,
    operands of one limb against many, divisors of one or two limbs whose top half is
    zero (divided on 32-bit halves), bitwise operations and shifts of negative values
    at limb edges, digits in bases 8, 10 and 16, and conversions to floats."""
    ones = [(1 << (64 * k)) - 1 for k in range(1, 15)]
    values = ones + [1 << (64 * k) for k in range(1, 15)] + [-(1 << 64), -(1 << 128) + 1]
    divisors = [
        2**32 - 1, 2**32 + 7, 2**63 + 1, 2**64 - 1, 2**64 + 1, 2**64 + 2**32 - 1,
        (2**32 - 1) << 64 | 5, 2**95 + 3, 2**128 - 1,
    ]  # fmt: skip
    source = f"""
ones = {ones}
values = {values}
divisors = {divisors}
for x in ones:
    print(x + 1, x + 1 - 1 == x, x + x, -x - 1, (x + 1) - x, 1 - (x + 1), x * x)
for x in values:
    print(x + 3, 3 + x, x - 3, 3 - x, x + (1 << 200), (1 << 200) - x)
    print(x & -1, x | (1 << 63), x ^ -(1 << 64), -x & ((1 << 64) - 1), ~x, -x >> 63, -x >> 64)
    print(x >> 1, x << 1, x >> 63, x << 63, x >> 64, x << 64, x >> 65, x << 65, x >> 128)
    print("%x %o %X" % (x, x, -x), int(str(x)) == x, int("%x" % x, 16) == x)
    for d in divisors:
        print(x // d, x % d, -x // d, -x % d, x // -d, x % -d, x // d * d + x % d == x)
"""
    lines = []
    for x in ones:
        lines.append(printed(x + 1, True, x + x, -x - 1, 1, -x, x * x))
    for x in values:
        lines.append(printed(x + 3, 3 + x, x - 3, 3 - x, x + (1 << 200), (1 << 200) - x))
        lines.append(
            printed(x & -1, x | (1 << 63), x ^ -(1 << 64), -x & ((1 << 64) - 1), ~x)[:-1]
            + " "
            + printed(-x >> 63, -x >> 64)
        )
        lines.append(
            printed(x >> 1, x << 1, x >> 63, x << 63, x >> 64, x << 64, x >> 65, x << 65, x >> 128)
        )
        lines.append(printed(f"{x:x} {x:o} {-x:X}", True, True))
        for d in divisors:
            lines.append(printed(x // d, x % d, -x // d, -x % d, x // -d, x % -d, True))
    assert_prints(run_both_tiers(source), "".join(lines))


def test_ints_and_floats_hash_alike_across_the_small_and_big_forms() -> None:
    """A float key finds the equal int in a dict and the other way round, alone and in
    a tuple: a big int hashes as its 32-bit halves, as the float of the same value
    does, whether the top limb's upper half is zero or not, and a small int as a word."""
    ints = [
        2**62 - 1024, 2**62, -(2**62), -(2**62) - 1024, 2**63, -(2**63), 2**64, -(2**64),
        2**64 + 2**12, 2**95, 2**96, 2**127, 2**128, 2**200, -(2**300), 3 << 70,
    ]  # fmt: skip
    source = f"""
ints = {ints}
by_int = {{}}
by_float = {{}}
for i, x in enumerate(ints):
    by_int[x] = i
    by_int[(x, 1)] = i
    by_float[float(x)] = i
for i, x in enumerate(ints):
    print(by_int[float(x)] == i, by_int[(float(x), 1)] == i, by_float[x] == i, float(x) == x)
"""
    assert_prints(run_both_tiers(source), printed(True, True, True, True) * len(ints))


def test_shift_counts_at_their_limits() -> None:
    source = """
x = (1 << 100) + 12345
print(1 << 511 == 2 * (1 << 510), x << 511 >> 511 == x, 0 << 511)
print(x >> 2147483647, -x >> 2147483647, -1 >> 600, 8 >> 600, x >> 0 == x)
"""
    expected = printed(True, True, 0) + printed(0, -1, -1, 0, True)
    assert_prints(run(source, "reference"), expected)


# -- builtins (answers recorded from the Go implementation) -----------------------------

INT_SPELLINGS = [
    ("0", 10), ("-0", 10), ("+00", 8), ("0123", 10), ("-0123", 8), ("0o123", 8), ("0x12", 16),
    ("0X1f", 0), ("-0b101", 0), ("+0o17", 0), ("0b1", 16), ("00", 0), ("-000", 0), ("z", 36),
    ("-ZZ", 36), ("11", 9), ("1a", 11), ("9" * 40, 10), ("-" + "f" * 33, 16), ("1" * 70, 2),
    ("0x" + "F" * 20, 0), ("-0o" + "7" * 30, 0), ("4611686018427387903", 10),
    ("4611686018427387904", 10), ("-4611686018427387904", 10), ("-4611686018427387905", 10),
    ("18446744073709551616", 10), ("zzzzzzzzzzzzz", 36), ("100000000", 16),
]  # fmt: skip
INT_VALUES = [
    0, 0, 0, 123, -83, 83, 18, 31, -5, 15, 177, 0, 0, 35, -1295, 10, 21, 10**40 - 1,
    -5444517870735015415413993718908291383295, 1180591620717411303423,
    1208925819614629174706175, -1237940039285380274899124223, 4611686018427387903,
    4611686018427387904, -4611686018427387904, -4611686018427387905, 18446744073709551616,
    170581728179578208255, 4294967296,
]  # fmt: skip

BUILTINS_SOURCE = f"""
for s, base in {INT_SPELLINGS}:
    print(int(s, base), int(s, base) == int(str(int(s, base))))
print(int("123"), int("-42"), int(x = "ff", base = 16), int(True), int(False), int(7), int(1 << 80))
print(abs(0), abs(-1), abs(5), abs(-4611686018427387904), abs(4611686018427387903), abs(-(1 << 100)), abs(1 << 100))
print(hash(""), hash("a"), hash("abc"), hash("hello"), hash("Hello, 世界!"), hash("\\0" * 100), hash("a" * 100))
print(hash("é"), hash("😀"), hash("😀😀x"), hash("é"[:1]), hash("é"[:1] + "a"), hash("€uro"))
print(hash(b""), hash(b"a"), hash(b"ab"), hash(b"abc"), hash(b"\\xff\\x00\\x80"), hash(b"hello world"))
print(repr(chr(0)), chr(65), chr(127) == "\\x7f", chr(128) == "\\u0080", chr(0x7ff) == "\\u07ff", chr(0x800) == "\\u0800")
print(chr(0xd800) == "\\ufffd", chr(0xdfff) == "\\ufffd", chr(0xffff) == "\\uffff", chr(0x10000) == "\\U00010000", chr(0x10ffff) == "\\U0010ffff")
print(len(chr(0x7f)), len(chr(0x80)), len(chr(0x800)), len(chr(0x10000)), chr(233), chr(0x1F600))
print(ord("a"), ord("\\0"), ord("é"), ord("€"), ord("😀"), ord("\\U0010ffff"), ord("é"[:1]), ord("é"[1:]))
print(ord(b"\\0"), ord(b"a"), ord(b"\\xff"), ord("😀"[:1]))
"""
BUILTINS_OUTPUT = "".join(printed(value, True) for value in INT_VALUES) + (
    "123 -42 255 1 0 7 1208925819614629174706176\n"
    "0 1 5 4611686018427387904 4611686018427387903"
    " 1267650600228229401496703205376 1267650600228229401496703205376\n"
    "0 97 96354 99162322 417292677 0 -323643840\n"
    "233 128512 127484024 65533 2031620 249288006\n"
    "2166136261 3826002220 1294271946 440920331 2741818494 3582672807\n"
    '"\\x00" A True True True True\n'
    "True True True True True\n"
    "1 2 3 4 é 😀\n"
    "97 0 233 8364 128512 1114111 65533 65533\n"
    "0 97 255 65533\n"
)


def test_int_abs_hash_chr_ord_answer_as_in_go() -> None:
    assert_prints(run_both_tiers(BUILTINS_SOURCE), BUILTINS_OUTPUT)


#: (statement, where Go reports the error, its last line), recorded from the oracle.
ERRORS = [
    ("x = 1 << -1", "1:7", "Error: negative shift count: -1"),
    ("x = (1 << 100) >> -5", "1:16", "Error: negative shift count: -5"),
    ("x = 1 << 512", "1:7", "Error: shift count too large: 512"),
    ("x = -(1 << 100) << 600", "1:17", "Error: shift count too large: 600"),
    ("x = 1 << 2147483648", "1:7", "Error: 2147483648 out of range"),
    ("x = 1 >> -2147483649", "1:7", "Error: -2147483649 out of range"),
    ("x = 1 >> (1 << 100)", "1:7", "Error: 1267650600228229401496703205376 out of range"),
    ("x = (1 << 100) << -(1 << 100)", "1:16", "Error: -1267650600228229401496703205376 out of range"),
    ('x = 1 << "a"', "1:7", "Error: got string, want int"),
    ("x = (1 << 70) >> None", "1:15", "Error: got NoneType, want int"),
    ('x = "a" << 1', "1:9", "Error: unknown binary op: string << int"),
    ("x = True >> 1", "1:10", "Error: unknown binary op: bool >> int"),
    ("x = (1 << 100) // 0", "1:16", "Error: floored division by zero"),
    ("x = -(1 << 100) % 0", "1:17", "Error: integer modulo by zero"),
    ("x = 7 // 0", "1:7", "Error: floored division by zero"),
    ("x = 7 % 0", "1:7", "Error: integer modulo by zero"),
    ('x = (1 << 100) + "a"', "1:16", "Error: unknown binary op: int + string"),
    ("x = [] - (1 << 100)", "1:8", "Error: unknown binary op: list - int"),
    ("x = (1 << 100) & None", "1:16", "Error: unknown binary op: int & NoneType"),
    ("x = ~[]", "1:5", "Error: unknown unary op: ~ list"),
    ("x = 3 * None", "1:7", "Error: unknown binary op: int * NoneType"),
    ('x = (1 << 100) < "a"', "1:16", "Error: int < string not implemented"),
    ('x = int("12a")', "1:8", "Error in int: int: invalid literal with base 10: 12a"),
    ('x = int("0755", 0)', "1:8", "Error in int: int: invalid literal with base 0: 0755"),
    ('x = int("0x", 16)', "1:8", "Error in int: int: invalid literal with base 16: 0x"),
    ('x = int(" 1")', "1:8", "Error in int: int: invalid literal with base 10:  1"),
    ('x = int("")', "1:8", "Error in int: int: invalid literal with base 10: "),
    ('x = int("1_000")', "1:8", "Error in int: int: invalid literal with base 10: 1_000"),
    ('x = int("--1")', "1:8", "Error in int: int: invalid literal with base 10: --1"),
    ('x = int("0x-1", 16)', "1:8", "Error in int: int: invalid literal with base 16: 0x-1"),
    ('x = int("9", 8)', "1:8", "Error in int: int: invalid literal with base 8: 9"),
    ('x = int("1", 1)', "1:8", "Error in int: int: base must be an integer >= 2 && <= 36"),
    ('x = int("1", 37)', "1:8", "Error in int: int: base must be an integer >= 2 && <= 36"),
    ('x = int("1", 1 << 40)', "1:8", "Error in int: int: for base, got int, want int"),
    ('x = int("1", "10")', "1:8", "Error in int: int: for base, got string, want int"),
    ('x = int("1", None)', "1:8", "Error in int: int: for base, got NoneType, want int"),
    ("x = int(5, 10)", "1:8", "Error in int: int: can't convert non-string with explicit base"),
    ("x = int(None)", "1:8", "Error in int: int: cannot convert NoneType to int"),
    ("x = int([1])", "1:8", "Error in int: int: cannot convert list to int"),
    ('x = abs("a")', "1:8", "Error in abs: got string, want int or float"),
    ("x = abs(True)", "1:8", "Error in abs: got bool, want int or float"),
    ("x = hash([])", "1:9", "Error in hash: hash: got list, want string or bytes"),
    ("x = hash(1 << 100)", "1:9", "Error in hash: hash: got int, want string or bytes"),
    ('x = chr("a")', "1:8", "Error in chr: chr: got string, want int"),
    ("x = chr(-1)", "1:8", "Error in chr: chr: Unicode code point -1 out of range (<0)"),
    ("x = chr(0x110000)", "1:8", "Error in chr: chr: Unicode code point U+110000 out of range (>0x10FFFF)"),
    ("x = chr(2147483647)", "1:8", "Error in chr: chr: Unicode code point U+7FFFFFFF out of range (>0x10FFFF)"),
    ("x = chr(2147483648)", "1:8", "Error in chr: chr: 2147483648 out of range"),
    ("x = chr(-2147483649)", "1:8", "Error in chr: chr: -2147483649 out of range"),
    ("x = chr(1 << 100)", "1:8", "Error in chr: chr: 1267650600228229401496703205376 out of range"),
    ('x = ord("")', "1:8", "Error in ord: ord: string encodes 0 Unicode code points, want 1"),
    ('x = ord("ab")', "1:8", "Error in ord: ord: string encodes 2 Unicode code points, want 1"),
    ('x = ord("é"[:1] + "é")', "1:8", "Error in ord: ord: string encodes 2 Unicode code points, want 1"),
    ('x = ord(b"ab")', "1:8", "Error in ord: ord: bytes has length 2, want 1"),
    ("x = ord(97)", "1:8", "Error in ord: ord: got int, want string or bytes"),
]  # fmt: skip


def traceback(where: str, last_line: str) -> str:
    return f"Traceback (most recent call last):\n  {FILENAME}:{where}: in <toplevel>\n{last_line}"


@pytest.mark.parametrize(("statement", "where", "last_line"), ERRORS, ids=[e[0] for e in ERRORS])
def test_error_as_in_go(statement: str, where: str, last_line: str) -> None:
    outcome = run(statement, "reference").outcome
    assert outcome.kind == RUNTIME_ERROR, outcome
    assert outcome.traceback == traceback(where, last_line)


def test_an_error_after_output_ends_the_same_on_both_tiers() -> None:
    outcome = run_both_tiers("print(1 << 100)\nprint(int('0x', 0))").outcome
    assert outcome.kind == RUNTIME_ERROR
    assert outcome.stdout == "1267650600228229401496703205376\n"


# -- allocation ----------------------------------------------------------------------------


def test_results_that_shrink_give_their_room_back() -> None:
    """A sum that cancels to a small int, repeated, allocates nothing that stays: it
    runs in a quota far below what the results would take if they were kept."""
    source = """
a = (1 << 500 << 500 << 500 << 500) + 7
b = 7 - a
t = 0
for i in range(400):
    t += a + b
print(t)
"""
    program = compile_kforge(source, FILENAME, memory_quota=65536)
    result = run_kforge(program, "reference", tick_budget=TICK_BUDGET, memory_quota=65536)
    assert_prints(result, "2800\n")
