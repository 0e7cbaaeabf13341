"""The compiled code's inline paths against the Go implementation, on both tiers.

``x[i]``, ``x[i] = v`` and ``x[i] op= v`` read and write a list's item in place, and in
a file that shows floats a tree of ``+ - * / // %`` is computed on the doubles' bits
(``lower.py``: ``list_slot``, ``float_tree``). Each program here sits on an edge of
one of those paths: an operand that leaves it (negative or out-of-range index, a tuple,
str or dict, a bool or big-int index, an int or str leaf, a zero divisor, NaN, the
infinities, -0.0), or an error whose order the path must keep. Every program must
print, and fail, as starlark-go does.
"""

from __future__ import annotations

import pytest

from starlark.harness import compile_kforge, kforge_missing_reason, run_kforge, run_oracle

pytest.importorskip("starlark_go")
pytestmark = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)

#: Makes a file show floats (the float paths are compiled only then), at its end.
FLOATS = "HALF = 0.5\n"

INDEXING = {
    "list items read, written and updated": """
def f(l, i):
    l[i] = l[i] + 1
    l[i] += 10
    l[-1] -= 1
    return l[i], l[-2], l[0]
print(f([1, 2, 3], 1))
""",
    "index out of range reading": "def f(l, i):\n    return l[i]\nprint(f([1, 2], 2))\n",
    "negative index out of range": "def f(l, i):\n    return l[i]\nprint(f([1, 2], -3))\n",
    "index of an empty list": "def f(l):\n    l[0] = 1\nf([])\n",
    "out of range writing": "def f(l, i):\n    l[i] = 0\nf([1, 2], 5)\n",
    "out of range updating": "def f(l, i):\n    l[i] += 1\nf([1, 2], -5)\n",
    "bool index": "def f(l):\n    return l[True]\nprint(f([1, 2]))\n",
    "bool index written": "def f(l):\n    l[False] = 3\nf([1, 2])\n",
    "big int index": "def f(l):\n    return l[1180591620717411303424]\nprint(f([1, 2]))\n",
    "float index": "def f(l):\n    return l[1.0]\nprint(f([1, 2]))\n",
    "str index": 'def f(l):\n    return l["a"]\nprint(f([1, 2]))\n',
    "tuple, str, dict and range indexed": """
def f(t, s, d, r, i):
    return t[i], t[-1], s[i], d[i], d["k"], r[i]
print(f((1, 2), "ab", {1: "one", "k": 2}, range(5, 9), 1))
""",
    "tuple written": "def f(t):\n    t[0] = 1\nf((1, 2))\n",
    "dict written, updated and missed": """
def f(d):
    d[1] = 2
    d[1] += 5
    d["x"] = [1]
    d["x"] += [2]
    print(d)
    return d[3]
f({})
""",
    "list written while iterated": """
def f(l):
    for x in l:
        l[0] = x
f([1, 2])
""",
    "list updated while iterated": """
def f(l):
    for x in l:
        l[1] += x
f([1, 2])
""",
    "frozen list and dict": """
load("m.star", "l", "d")
def f():
    print(l[0], d["a"])
    l[0] = 2
f()
""",
    "frozen dict": """
load("m.star", "d")
def f():
    d["a"] = 2
f()
""",
    "list += list item": "def f(l):\n    l[0] += [3]\n    return l\nprint(f([[1], 2]))\n",
}

#: A module the programs above load: its values are frozen.
MODULES = {"m.star": "l = [1]\nd = {'a': 1}\n", "x.star": "X = 1.25\n"}

ARITHMETIC = {
    "float operators and literals": """
def f(x, y, n):
    a = x * y + x / y - 0.25 * x
    b = (x + y) * (x - y) / 2
    c = x // y + x % y + y // 0.3 + n * x
    return a, b, c, 2 * 3, 7 // 2, 7 % 3
print(f(1.5, -2.25, 3))
""",
    "int leaves stay ints": """
def f(a, b, c):
    return a * b + c, a // b - c % b, a - b * 4, (a + 1) * 0.5
print(f(7, 3, 2))
print(f(1180591620717411303424, 3, 1))
""",
    "str and list leaves": """
def f(s, t, l):
    return s + t + s, l + l, s * 2 + t
print(f("a", "b", [1]))
""",
    "NaN, infinities and -0.0": """
def f(x, y):
    return x * y, x + y, x - y, x / 2, -0.0 * x, x - x
inf = float("inf")
nan = float("nan")
for x, y in [(inf, 2.0), (inf, inf), (nan, 1.0), (-0.0, 0.0), (1e308, 10.0), (5e-324, 0.5)]:
    print(f(x, y))
""",
    "float division by zero": "def f(x, y):\n    return 1.0 + x / y\nprint(f(1.0, 0.0))\n",
    "float division by -0.0": "def f(x, y):\n    return x * 2.0 / y\nprint(f(1.0, -0.0))\n",
    "floored division by zero": "def f(x, y):\n    return x // y * 1.5\nprint(f(1.5, 0.0))\n",
    "modulo by zero": "def f(x, y):\n    return x % y + 1.0\nprint(f(1.5, 0.0))\n",
    "int division by zero in a float file": "def f(x, y):\n    return x / y + 1\nprint(f(1, 0))\n",
    "list item floats": """
def f(a, b):
    dx = a[0] - b[0]
    a[1] += dx * b[1]
    b[2] -= dx / a[2]
    return a, b
print(f([1.5, 2.0, 4.0], [0.5, 3.0, 1.0]))
print(f([1, 2, 4], [3, 3, 1]))
""",
    "an error of an operator before an index error": """
def f(x, y, a):
    return x * y + a[10]
print(f("s", "t", [1.0]))
""",
    "an index error before a call": """
def g():
    print("called")
    return 1.0
def f(a):
    return a[5] * g()
print(f([1.0]))
""",
    "a call before the operators": """
def g(v):
    print("g", v)
    return v
def f(x, y):
    return x / (y * g(y))
print(f(1.0, 2.0))
print(f(1.0, 0.0))
""",
    "a range counter in a float expression": """
def f(n, h):
    total = 0.0
    for k in range(n):
        x = (k + 0.5) * h
        total += 4.0 / (1.0 + x * x)
    return total * h
print(f(10, 0.1))
""",
    "a name not yet assigned": """
def f(x, c):
    if c:
        y = 2.0
    return x * 1.5 + y
print(f(1.0, True))
print(f(1.0, False))
""",
    "big int with floats": "def f(x):\n    return x * 2.0 + x / 3\nprint(f(1208925819614629174706176))\nprint(f(13582985290493858492773514283592667786034938469317445497485196697278130927542418487205392083207560592298578262953847383475038725543234929971155548342800628721885763499406390331782864144164680730766837160526223176512798435772129956553355286032203080380775759732320198985094884004069116123084147875437183658467465148948790552744165376))\n",
}


def outcomes(source: str) -> None:
    """``source`` run by starlark-go and on both of kforge's tiers: the same outcome."""
    want = run_oracle(source, "t.star", modules=MODULES)
    program = compile_kforge(source, "t.star", loader=MODULES.__getitem__, memory_quota=1 << 20)
    for tier in ("reference", "fast"):
        got = run_kforge(program, tier, tick_budget=10_000_000, memory_quota=1 << 20).outcome
        assert (got.kind, got.stdout, got.message) == (want.kind, want.stdout, want.message), tier
        assert got.traceback == want.traceback, tier


@pytest.mark.parametrize("name", sorted(INDEXING))
@pytest.mark.parametrize("floats", [False, True])
def test_indexing_in_place_is_gos(name: str, floats: bool) -> None:
    outcomes(INDEXING[name] + (FLOATS if floats else ""))


@pytest.mark.parametrize("name", sorted(ARITHMETIC))
def test_float_paths_are_gos(name: str) -> None:
    outcomes(ARITHMETIC[name] + FLOATS)


def test_the_float_path_is_taken() -> None:
    """A float expression of a file that shows floats makes one float object, not one
    per operator: fewer ticks than the same expression in a file that does not."""
    body = "def f(x, y):\n    return x * y + x * y + x\n"
    run = "for _ in range(100):\n    f(X, X)\n"
    plain = 'load("x.star", "X")\n' + body + run
    shown = plain + FLOATS
    ticks = []
    for source in (plain, shown):
        program = compile_kforge(source, "t.star", loader=MODULES.__getitem__, memory_quota=1 << 20)
        result = run_kforge(program, "reference", tick_budget=10_000_000, memory_quota=1 << 20)
        ticks.append(result.ticks_used)
    assert ticks[1] < ticks[0] - 100 * 20
