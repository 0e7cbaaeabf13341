"""The static data section stays small: it counts against the memory quota.

Error messages are made on the heap by code when an error is raised, not laid out as
static strings (``lowlevel``: cold code); the Unicode tables are made on the heap when
first read; a string's cached hash lives in its header.  The messages are still Go's,
word for word (recorded from starlark-go, one expression at a time: its binding cannot
run ``catch``), and a program that raises and catches many errors runs in the default
64 KiB.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlark.harness import SUCCESS, compile_kforge, kforge_missing_reason, run_kforge

pytestmark = pytest.mark.skipif(kforge_missing_reason() is not None, reason="kforge missing")

MEMORY_QUOTA = 64 << 10

#: Expressions that fail, each with Go's message.
ERRORS: list[tuple[str, str]] = [
    ("[1, 2][5]", "list index 5 out of range [-2:1]"),
    ('{}["k"]', 'key "k" not in dict'),
    ("len(1)", "len: value of type int has no len"),
    ('"a" + 1', "unknown binary op: string + int"),
    ('int("x")', "int: invalid literal with base 10: x"),
    ("[].pop()", "pop: index -1 out of range: empty list"),
    ('{}.pop("k")', "pop: missing key"),
    ('sorted([1, "a"])', "string < int not implemented"),
    ("hash([])", "hash: got list, want string or bytes"),
    ("{[]: 1}", "unhashable type: list"),
    ("range(1, 2, 0)", "range: step argument must not be zero"),
    ('"abc".index("z")', "index: substring not found"),
    ("TWO[0](1, 2, 3)", "function two accepts at most 2 positional arguments (3 given)"),
    ("TWO[0](c = 1)", 'function two got an unexpected keyword argument "c"'),
    ("TWO[0](1, a = 2)", 'function two got multiple values for parameter "a"'),
    ("1 // 0", "floored division by zero"),
    ("max([])", "max: argument is an empty sequence"),
    ('getattr(1, "nope")', "getattr: int has no .nope field or method"),
    ('"%d" % "x"', "%d format requires integer: cannot convert string to int"),
    ("chr(-1)", "chr: Unicode code point -1 out of range (<0)"),
    ("[1].index(2)", "index: value not in list"),
    ("{}.popitem()", "popitem: empty dict"),
    ('1 < "a"', "int < string not implemented"),
    ('"abc"[1:2:0]', "zero is not a valid slice step"),
    ('"x".nope', "string has no .nope field or method"),
    ('[1, 2, 3][4:"a"]', "invalid end index: got string, want int"),
    ('float("x")', "invalid float literal: x"),
    ("tuple(1)", "tuple: for parameter 1: got int, want iterable"),
    ('"a".join([1])', "join: in list, want string, got int"),
    ('fail("custom", 1)', "fail: custom 1"),
]

ROUNDS = 200

ERRORS_PROGRAM = (
    textwrap.dedent(
        """\
        def two(a, b = 1):
            return a + b

        TWO = [two]  # called through a value: the runtime binds the arguments
        CASES = [
        """
    )
    + "".join(f"    lambda: {expression},\n" for expression, _ in ERRORS)
    + textwrap.dedent(
        f"""\
        ]
        for case in CASES:
            print(catch(case))
        caught = 0
        for i in range({ROUNDS}):
            if catch(CASES[i % len(CASES)]) != None:
                caught += 1
        print(caught)
        """
    )
)

#: Words of messages that were static strings before they were made by code.  (The
#: prefix ``invalid slice step: `` is passed on the normal path, so it stays static.)
MESSAGE_WORDS = [
    b"out of range",
    b"not in dict",
    b"has no len",
    b"unknown binary op",
    b"invalid literal",
    b"missing key",
    b"not implemented",
    b"want string or bytes",
    b"unhashable",
    b"must not be zero",
    b"substring not found",
    b"positional argument",
    b"unexpected keyword",
    b"multiple values",
    b"division by zero",
    b"empty sequence",
    b"field or method",
    b"format requires",
    b"value not in list",
    b"empty dict",
    b"invalid float",
    b"want iterable",
    b"Traceback",
    b"Error in ",
]


def test_error_messages_are_made_by_code_not_laid_out() -> None:
    program = compile_kforge(ERRORS_PROGRAM, "errors.star", testing=True, memory_quota=MEMORY_QUOTA)
    data = bytes(program.data)
    assert [word for word in MESSAGE_WORDS if word in data] == []
    size = len(data)
    assert size < 14_000  # 27 KB when the messages were static strings
    run = run_kforge(
        program, "fast", tick_budget=100_000_000, memory_quota=MEMORY_QUOTA, testing=True
    )
    expected = "".join(f"{message}\n" for _, message in ERRORS) + f"{ROUNDS}\n"
    assert (run.outcome.kind, run.outcome.stdout) == (SUCCESS, expected)


SMALL_PROGRAM = """\
words = {"alpha": 1, "beta": 2, b"gamma": 3}
for key in ["alpha", "be" + "ta", "delta"]:
    print(key, words.get(key), key in words)
print(words, [s for s in sorted(["b", "a"])])
"""

UNICODE_PROGRAM = """\
print(repr("h\\u00e9llo \\u200b"), ["\\u00e9"], "\\u00c0\\u00c9".lower(), "stra\\u00dfe".upper())
print("\\u0663".isdigit(), "\\u0436".isalpha(), "\\u01c4".title(), "\\u00e9".isupper())
"""


@pytest.mark.parametrize("tier", ["reference", "fast"])
def test_small_programs_lay_out_no_tables(tier: str) -> None:
    """A program that meets no code point from U+0080 on lays out no Unicode table (each
    1.5 KB); one that does makes the tables it reads on the heap; strings hash the same
    whether static (never hashed before) or made at run time."""
    small = compile_kforge(SMALL_PROGRAM, "small.star", memory_quota=MEMORY_QUOTA)
    size = len(small.data)
    assert size < 2_500  # 8.3 KB with the table of printable code points and method names
    run = run_kforge(small, tier, tick_budget=10_000_000, memory_quota=MEMORY_QUOTA)
    assert run.outcome.stdout == (
        "alpha 1 True\nbeta 2 True\ndelta None False\n"
        '{"alpha": 1, "beta": 2, b"gamma": 3} ["a", "b"]\n'
    )
    wide = compile_kforge(UNICODE_PROGRAM, "wide.star", memory_quota=MEMORY_QUOTA)
    size = len(wide.data)
    assert size < 2_500
    run = run_kforge(wide, tier, tick_budget=10_000_000, memory_quota=MEMORY_QUOTA)
    assert run.outcome.stdout == (
        '"h\u00e9llo \\u200b" ["\u00e9"] \u00e0\u00e9 STRA\u00dfE\nTrue True \u01c5 False\n'
    )


def test_cold_part_of_a_statement_list() -> None:
    """What always goes on to a call that never returns is cold; what a return may
    leave before is not."""
    from kforge.starlark.lowlevel import cold_start, never_return

    module = ast.parse(
        textwrap.dedent(
            """\
            def f(x):
                if x:
                    return 1
                b = buf_new(1)
                while x:
                    break
                error(b, 0)
                return 0

            def g(x):
                b = buf_new(1)
                f(0)

            def h(x):
                while x:
                    if x:
                        break
                    error(x, 0)
                return x
            """
        )
    )
    f, g, h = (node for node in module.body if isinstance(node, ast.FunctionDef))
    assert cold_start(f.body, {"error"}) == 1
    assert never_return([f, g, h]) == set()
    loop = h.body[0]
    assert isinstance(loop, ast.While)
    assert cold_start(loop.body, {"error"}) == 1  # the break is in the if before it
    assert cold_start(h.body, {"error"}) == len(h.body)
    noreturn = ast.parse("@noreturn\ndef e(m, b):\n    fault(1)\n").body
    assert never_return([*noreturn, f, g]) == {"e"}
    assert never_return([*ast.parse("def k():\n    fault(1)\n").body, g]) == {"k"}
