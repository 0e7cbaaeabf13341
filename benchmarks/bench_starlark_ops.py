"""Ticks per common Starlark operation in a compiled program: loops over lists, tuples
and dicts, truth tests, comparisons with literals, membership, indexing, calls.

Each statement runs ``REPEATS`` times in a loop inside a function, less the same loop
around ``pass``; the values it works on are made at run time (a str equal to a literal
is not the literal's own object).  Ticks are what a program is metered in, the same on
both tiers: this measures the code the compiler emits and the runtime's, not the host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench_starlark_float import per_operation

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPEATS = 200

SETUP = """
def f0():
    return 1
s = "hel" + "lo".lower()
w = "parenth" + "esis".lower()
by = bytes(s)
l = [1, 2, 3]
l10 = list(range(10))
t = (1, 2, 3)
t10 = tuple(range(10))
d = {"a": 1, "b": 2}
x = []
e = []
big = 1 << 40
"""

#: name -> one statement over the values of SETUP and i (the loop's counter)
OPERATIONS = {
    "for _ in l (3 items)": "for _ in l: pass",
    "for _ in l10 (10 items)": "for _ in l10: pass",
    "for _ in t (3 items)": "for _ in t: pass",
    "for _ in t10 (10 items)": "for _ in t10: pass",
    "for _ in e (no items)": "for _ in e: pass",
    "for _ in d (2 keys)": "for _ in d: pass",
    "[y for y in l] (3 items)": "r = [y for y in l]",
    "if l:": "if l: pass",
    "if s:": "if s: pass",
    "if d:": "if d: pass",
    "r = not l": "r = not l",
    'if s == "hello"': 'if s == "hello": pass',
    'if s == "help" (lengths differ)': 'if s == "help": pass',
    'if w == "parenthesis"': 'if w == "parenthesis": pass',
    'if by == "hello" (bytes, str)': 'if by == "hello": pass',
    'if s in ("a", "b", "hello")': 'if s in ("a", "b", "hello"): pass',
    "if i in (1, 2, 3)": "if i in (1, 2, 3): pass",
    'r = s == "hellp"': 'r = s == "hellp"',
    "r = l[1]": "r = l[1]",
    "r = t[1]": "r = t[1]",
    "r = s[1]": "r = s[1]",
    "r = i + 1": "r = i + 1",
    "r = i * 3": "r = i * 3",
    "r = big * 3": "r = big * 3",
    "r = len(l)": "r = len(l)",
    'r = d["a"]': 'r = d["a"]',
    "f0()": "f0()",
    "x.append(i)": "x.append(i)",
    "r = s.upper()": "r = s.upper()",
}


def program(statement: str) -> str:
    return f"{SETUP}\ndef loop():\n    for i in range({REPEATS}):\n        {statement}\nloop()\n"


def main() -> int:
    costs = per_operation(OPERATIONS, program, "pass", REPEATS)
    results: dict[str, Any] = {"repeats": REPEATS, "ticks_per_operation": costs}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "starlark_ops.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
