"""A generator of varied, terminating, deterministic Starlark programs for differential tests.

``generate_program(seed)`` returns the source of one program; the same seed always
gives the same program.  Hypothesis drives it by choosing seeds (see
``tests/test_starlark_differential.py``).

What keeps the programs well behaved:

- types are tracked per variable, so most operations are well typed and most programs
  run to the end; a few operations that can fail (index, key, division, ``fail()``,
  wrong calls) are sprinkled in, so some end with a run-time error, always with output
  printed before it;
- loops are ``for`` over short ranges or lists, or ``while`` with a counter bumped
  first, nested at most twice; recursion is bounded by its argument;
- values stay small: integer assignments are reduced modulo a (sometimes big)
  modulus, string and list assignments are sliced to a bounded length;
- printed strings are valid UTF-8 and free of NUL bytes (slices of multi-byte
  strings are printed through ``repr``), which the oracle's print needs.

Run it directly to see programs: ``python tests/starlark/generate.py SEED [COUNT]``.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INT, STR, BYTES, LIST, TUPLE, DICT, BOOL = "int", "str", "bytes", "list", "tuple", "dict", "bool"

_WORDS = ["a", "b", "ab", "xyz", "Hello", "é", "世界", "😀", "a-b", "  pad ", "k1", "", "Q"]
_MODULI = ["1000003", "65536", "(1 << 61) - 1", "(1 << 89) + 7", "10000000000000000000000"]
_SEPARATORS = ['","', '"-"', '" "', '""']
_SPLIT_ARGUMENTS = ["", '"a"', '" "', '"-"']


class ProgramGenerator:
    """Builds one program from a seed; a fresh generator per program."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.lines: list[str] = []
        self.variables: dict[str, str] = {}
        self.functions: list[tuple[str, int]] = []  # (name, number of required int params)
        self.counter = 0

    # ----------------------------------------------------------- helpers

    def chance(self, probability: float) -> bool:
        return self.random.random() < probability

    def pick(self, items: list[T]) -> T:
        return items[self.random.randrange(len(items))]

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def names_of(self, kind: str) -> list[str]:
        return [name for name, k in self.variables.items() if k == kind]

    # ----------------------------------------------------------- expressions

    def int_literal(self) -> str:
        roll = self.random.random()
        if roll < 0.6:
            return str(self.random.randint(-20, 100))
        if roll < 0.8:
            return str(self.random.choice([1 << 31, (1 << 63) - 1, 1 << 64, 10**20, -(10**25)]))
        return f"0x{self.random.randrange(1 << 40):x}"

    def int_expr(self, depth: int = 0) -> str:
        options: list[Callable[[], str]] = [self.int_literal]
        variables = self.names_of(INT)
        if variables:
            options += [lambda: self.pick(variables)] * 3
        if depth < 3:
            sub = lambda: self.int_expr(depth + 1)  # noqa: E731
            options += [
                lambda: f"({sub()} {self.pick(['+', '-', '*', '&', '|', '^'])} {sub()})",
                lambda: f"({sub()} {self.pick(['//', '%'])} {self.nonzero_or_risky(depth)})",
                lambda: f"({sub()} {self.pick(['<<', '>>'])} {self.random.randint(0, 70)})",
                lambda: f"-{sub()}",
                lambda: f"abs({sub()})",
                lambda: f"len({self.str_expr(depth + 1)})",
                lambda: f"len({self.list_expr(depth + 1)})",
                lambda: f"{self.str_expr(depth + 1)}.count({self.word()})",
                lambda: f"{self.str_expr(depth + 1)}.find({self.word()})",
                lambda: f"({sub()} if {self.bool_expr(depth + 1)} else {sub()})",
                lambda: f"max({sub()}, {sub()})",
                lambda: f"min([{sub()}, {sub()}, {sub()}])",
                lambda: f"int(str({sub()}))",
                lambda: f"hash({self.str_expr(depth + 1)})",
                lambda: f"sum_ints({self.list_expr(depth + 1)})",
                lambda: f'ord("{self.pick(["a", "Z", "é", "世", "😀"])}")',
            ]
            if self.functions:
                options.append(lambda: self.call_function(depth + 1))
        return self.pick(options)()

    def nonzero_or_risky(self, depth: int) -> str:
        if self.chance(0.03):
            return self.int_expr(depth + 1)  # may be zero: a division error now and then
        return str(self.pick([1, 2, 3, 7, -3, 10, 1 << 65, -(1 << 40)]))

    def word(self, nonempty: bool = False) -> str:
        return '"' + self.pick([w for w in _WORDS if w or not nonempty]) + '"'

    def distinct_words(self, count: int) -> list[str]:
        return ['"' + w + '"' for w in self.random.sample(_WORDS, count)]

    def str_expr(self, depth: int = 0) -> str:
        options: list[Callable[[], str]] = [self.word]
        variables = self.names_of(STR)
        if variables:
            options += [lambda: self.pick(variables)] * 3
        if depth < 3:
            sub = lambda: self.str_expr(depth + 1)  # noqa: E731
            options += [
                lambda: f"({sub()} + {sub()})",
                lambda: f"({self.word()} * {self.random.randint(0, 3)})",
                lambda: f"{sub()}.upper()",
                lambda: f"{sub()}.lower()",
                lambda: f"{sub()}.strip()",
                lambda: f"{sub()}.replace({self.word()}, {self.word()})",
                lambda: f"{sub()}.title()",
                lambda: f"{sub()}.capitalize()",
                lambda: f"str({self.int_expr(depth + 1)})",
                lambda: f"repr({self.any_expr(depth + 1)})",
                lambda: f"{self.pick(_SEPARATORS)}.join({self.str_list_expr(depth + 1)})",
                lambda: f'("%d-%s" % ({self.int_expr(depth + 1)}, {sub()}))',
                lambda: f'("%r|%x" % ({sub()}, {self.int_expr(depth + 1)}))',
                lambda: f'"{{}}:{{!r}}".format({self.int_expr(depth + 1)}, {sub()})',
                lambda: f'"{{b}}/{{a}}".format(a={sub()}, b={self.int_expr(depth + 1)})',
                lambda: f"({sub()} if {self.bool_expr(depth + 1)} else {sub()})",
                lambda: f"{sub()}.removeprefix({self.word()})",
                lambda: f"chr({self.random.randint(65, 122)})",
                lambda: (
                    f"{sub()}.partition({self.word(nonempty=True)})[{self.random.randint(0, 2)}]"
                ),
            ]
        return self.pick(options)()

    def str_list_expr(self, depth: int) -> str:
        options: list[Callable[[], str]] = [
            lambda: "[" + ", ".join(self.word() for _ in range(self.random.randint(0, 4))) + "]",
            lambda: f"{self.str_expr(depth + 1)}.split({self.pick(_SPLIT_ARGUMENTS)})",
            lambda: f"sorted({self.str_expr(depth + 1)}.elems())",
            lambda: f"[str(v) for v in {self.list_expr(depth + 1)}]",
        ]
        return self.pick(options)()

    def list_expr(self, depth: int = 0) -> str:
        options: list[Callable[[], str]] = [
            lambda: (
                "["
                + ", ".join(self.int_expr(depth + 1) for _ in range(self.random.randint(0, 4)))
                + "]"
            ),
        ]
        variables = self.names_of(LIST)
        if variables:
            options += [lambda: self.pick(variables)] * 3
        if depth < 3:
            sub = lambda: self.list_expr(depth + 1)  # noqa: E731
            options += [
                lambda: f"list(range({self.random.randint(-3, 8)}))",
                lambda: (
                    f"list(range({self.random.randint(-5, 5)}, {self.random.randint(-5, 15)}, "
                    f"{self.pick([1, 2, 3, -1, -2])}))"
                ),
                lambda: f"({sub()} + {sub()})",
                lambda: f"sorted({sub()})",
                lambda: f"sorted({sub()}, reverse=True)",
                lambda: f"{sub()}[{self.slice_spec()}]",
                lambda: f"[x * {self.random.randint(-3, 3)} for x in {sub()} if x % 2 == 0]",
                lambda: f"[x + y for x in {sub()}[:3] for y in {sub()}[:3]]",
                lambda: f"list(reversed({sub()}))",
                lambda: f"[len(w) for w in {self.str_list_expr(depth + 1)}]",
                lambda: f"list({self.dict_expr(depth + 1)}.values())",
                lambda: f"list({self.str_expr(depth + 1)}.codepoint_ords())",
                lambda: f"list(bytes({self.str_expr(depth + 1)}).elems())",
            ]
        return self.pick(options)()

    def slice_spec(self) -> str:
        def bound() -> str:
            return self.pick(["", str(self.random.randint(-6, 6))])

        spec = f"{bound()}:{bound()}"
        if self.chance(0.5):
            spec += f":{self.pick([1, 2, 3, -1, -2, -3])}"
        return spec

    def tuple_expr(self, depth: int = 0) -> str:
        options: list[Callable[[], str]] = [
            lambda: f"({self.int_expr(depth + 1)}, {self.str_expr(depth + 1)})",
            lambda: f"tuple({self.list_expr(depth + 1)})",
            lambda: "()",
            lambda: f"({self.int_expr(depth + 1)},)",
        ]
        variables = self.names_of(TUPLE)
        if variables:
            options.append(lambda: self.pick(variables))
        return self.pick(options)()

    def dict_expr(self, depth: int = 0) -> str:
        options: list[Callable[[], str]] = [
            lambda: (
                "{"
                + ", ".join(
                    f"{key}: {self.int_expr(depth + 1)}"
                    for key in self.distinct_words(self.random.randint(0, 3))
                )
                + "}"
            ),
            lambda: f"{{w: len(w) for w in {self.str_list_expr(depth + 1)}}}",
            lambda: f"dict(zip({self.str_list_expr(depth + 1)}, {self.list_expr(depth + 1)}))",
        ]
        variables = self.names_of(DICT)
        if variables:
            options += [lambda: self.pick(variables)] * 2
        return self.pick(options)()

    def bytes_expr(self, depth: int = 0) -> str:
        return self.pick(
            [
                lambda: f"bytes({self.str_expr(depth + 1)})",
                lambda: 'b"' + self.pick(["", "abc", "\\x00\\xff", "q"]) + '"',
                lambda: f"bytes({self.str_expr(depth + 1)})[{self.slice_spec()}]",
            ]
        )()

    def bool_expr(self, depth: int = 0) -> str:
        return self.pick(
            [
                lambda: (
                    f"({self.int_expr(depth + 1)} {self.pick(['<', '<=', '==', '!=', '>', '>='])} "
                    f"{self.int_expr(depth + 1)})"
                ),
                lambda: f"({self.word()} in {self.str_expr(depth + 1)})",
                lambda: f"({self.int_expr(depth + 1)} in {self.list_expr(depth + 1)})",
                lambda: f"({self.word()} in {self.dict_expr(depth + 1)})",
                lambda: f"(not {self.int_expr(depth + 1)})",
                lambda: f"bool({self.list_expr(depth + 1)})",
                lambda: f"{self.str_expr(depth + 1)}.startswith({self.word()})",
                lambda: f"{self.str_expr(depth + 1)}.isalpha()",
                lambda: f"any([{self.int_expr(depth + 1)}, {self.int_expr(depth + 1)}])",
                lambda: self.pick(["True", "False"]),
            ]
        )()

    def any_expr(self, depth: int = 0) -> str:
        kind = self.pick([INT, INT, STR, LIST, TUPLE, DICT, BOOL, BYTES])
        return self.expr_of(kind, depth)

    def expr_of(self, kind: str, depth: int = 0) -> str:
        return {
            INT: self.int_expr,
            STR: self.str_expr,
            LIST: self.list_expr,
            TUPLE: self.tuple_expr,
            DICT: self.dict_expr,
            BOOL: self.bool_expr,
            BYTES: self.bytes_expr,
        }[kind](depth)

    def call_function(self, depth: int) -> str:
        name, required = self.pick(self.functions)
        args = [self.int_expr(depth + 1) for _ in range(required)]
        if self.chance(0.02):
            args = args[:-1]  # a missing argument now and then
        extra = self.pick(
            ["", f"extra={self.int_expr(depth + 1)}", f"scale={self.random.randint(-2, 3)}"]
        )
        if self.chance(0.2):  # keyword arguments come before *args in Starlark
            return f"{name}({extra + ', ' if extra else ''}*[{', '.join(args)}])"
        return f"{name}({', '.join(args + ([extra] if extra else []))})"

    # ----------------------------------------------------------- statements

    def assign(self, indent: int) -> None:
        kind = self.pick([INT, INT, INT, STR, STR, LIST, LIST, DICT, TUPLE, BYTES])
        existing = self.names_of(kind)
        if indent > 0 and not existing:
            # A name first bound inside a block may be unbound after it: bind none there.
            self.show(indent)
            return
        if existing and (indent > 0 or self.chance(0.5)):
            name = self.pick(existing)
        else:
            name = self.fresh(kind[0])
        value = self.expr_of(kind)
        if kind == INT:
            value = f"({value}) % ({self.pick(_MODULI)})"
        elif kind in (STR, LIST):
            value = f"({value})[:{self.random.randint(4, 40)}]"
        self.emit(indent, f"{name} = {value}")
        self.variables[name] = kind

    def mutate(self, indent: int) -> None:
        options: list[Callable[[], str]] = []
        for kind, forms in self.mutation_forms(indent).items():
            targets = self.names_of(kind)
            if targets:
                target = self.pick(targets)
                options += [lambda form=form, target=target: form(target) for form in forms]
        if options:
            self.emit(indent, self.pick(options)())
        else:
            self.assign(indent)

    def mutation_forms(self, indent: int) -> dict[str, list[Callable[[str], str]]]:
        """For each kind of variable, the in-place changes that can be made to one."""
        inner = "\n" + "    " * (indent + 1)
        return {
            LIST: [
                lambda t: f"{t}.append({self.int_expr(1)})",
                lambda t: f"{t}.extend({self.list_expr(2)}[:3])",
                lambda t: f"{t}.insert({self.random.randint(-3, 3)}, {self.int_expr(1)})",
                lambda t: f"{t} += [{self.int_expr(1)}]",
                lambda t: f"if {t}:{inner}print({t}.pop())",
                lambda t: f"if {t}:{inner}{t}[{self.random.randint(-1, 0)}] = {self.int_expr(1)}",
            ],
            DICT: [
                lambda t: f"{t}[{self.word()}] = {self.int_expr(1)}",
                lambda t: f"print({t}.pop({self.word()}, None))",
                lambda t: f"print({t}.setdefault({self.word()}, {self.int_expr(1)}))",
                lambda t: f"{t}.update({self.dict_expr(1)})",
                lambda t: f"print({t}.get({self.word()}), sorted({t}.items()))",
            ],
            INT: [
                lambda t: f"{t} += {self.int_expr(1)}",
                lambda t: f"{t} = ({t} * {self.int_expr(2)}) % ({self.pick(_MODULI)})",
            ],
            STR: [lambda t: f"{t} = ({t} + {self.word()})[-30:]"],
        }

    def show(self, indent: int) -> None:
        self.emit(indent, self.pick(self.show_forms())())

    def show_forms(self) -> list[Callable[[], str]]:
        forms: list[Callable[[], str]] = [
            lambda: f"print({self.int_expr()})",
            lambda: f"print(repr({self.str_expr()}))",
            lambda: f"print({self.list_expr()})",
            lambda: f"print({self.dict_expr()})",
            lambda: f"print({self.tuple_expr()}, {self.bool_expr()})",
            lambda: f"print(repr({self.bytes_expr()}))",
            lambda: f"print({self.int_expr()}, {self.int_expr()}, sep={self.pick(_SEPARATORS)})",
            lambda: f'print("{{}} {{}}".format({self.int_expr()}, {self.list_expr()}))',
            lambda: f"print(type({self.any_expr()}))",
        ]
        variables = list(self.variables)
        if variables:
            forms.append(lambda: f"print(repr({self.pick(variables)}))")
        return forms

    def block(self, indent: int, size: int, loop_depth: int) -> None:
        for _ in range(size):
            self.statement(indent, loop_depth)

    def statement(self, indent: int, loop_depth: int) -> None:
        roll = self.random.random()
        if roll < 0.25:
            self.assign(indent)
        elif roll < 0.45:
            self.mutate(indent)
        elif roll < 0.7:
            self.show(indent)
        elif roll < 0.8 and loop_depth < 2:
            self.for_loop(indent, loop_depth)
        elif roll < 0.85 and loop_depth < 2:
            self.while_loop(indent, loop_depth)
        elif roll < 0.95:
            self.if_statement(indent, loop_depth)
        elif indent == 0:
            self.unpack(indent)
        else:
            self.show(indent)

    def for_loop(self, indent: int, loop_depth: int) -> None:
        var = self.fresh("i")
        source = self.pick(
            [
                f"range({self.random.randint(0, 5)})",
                f"{self.list_expr(1)}[:4]",
                f"{self.str_expr(1)}.elems()",
            ]
        )
        kind = STR if source.endswith(".elems()") else INT
        if kind == STR:
            source = f"list({source})[:4]"
        self.emit(indent, f"for {var} in {source}:")
        self.variables[var] = kind
        self.block(indent + 1, self.random.randint(1, 3), loop_depth + 1)
        if self.chance(0.3):
            self.emit(indent + 1, f"if {self.bool_expr(1)}:")
            self.emit(indent + 2, self.pick(["break", "continue"]))
        del self.variables[var]

    def while_loop(self, indent: int, loop_depth: int) -> None:
        counter = self.fresh("w")
        self.emit(indent, f"{counter} = 0")
        self.emit(indent, f"while {counter} < {self.random.randint(1, 4)}:")
        self.emit(indent + 1, f"{counter} += 1")
        self.block(indent + 1, self.random.randint(1, 3), loop_depth + 1)

    def if_statement(self, indent: int, loop_depth: int) -> None:
        self.emit(indent, f"if {self.bool_expr()}:")
        self.block(indent + 1, self.random.randint(1, 2), loop_depth)
        if self.chance(0.3):
            self.emit(indent, f"elif {self.bool_expr()}:")
            self.block(indent + 1, 1, loop_depth)
        if self.chance(0.5):
            self.emit(indent, "else:")
            self.block(indent + 1, self.random.randint(1, 2), loop_depth)

    def unpack(self, indent: int) -> None:
        a, b = self.fresh("i"), self.fresh("s")
        self.emit(indent, f"{a}, {b} = {self.int_expr()}, {self.str_expr()}")
        self.variables[a], self.variables[b] = INT, STR

    # ----------------------------------------------------------- the program

    def prelude(self) -> None:
        """Helper functions with every parameter kind, a closure and bounded recursion."""
        self.emit(0, "def sum_ints(values, start=0):")
        self.emit(1, "total = start")
        self.emit(1, "for v in values:")
        self.emit(2, "total += v")
        self.emit(1, "return total")
        for _ in range(self.random.randint(1, 3)):
            name = self.fresh("f")
            required = self.random.randint(1, 3)
            params = [f"p{i}" for i in range(required)]
            signature = ", ".join([*params, "*rest", "scale=1", "extra=0", "**options"])
            self.emit(0, f"def {name}({signature}):")
            body = self.pick(
                [
                    f"return (p0 * scale + extra + len(rest) + len(options)) % {self.pick(_MODULI)}",
                    f"return sum_ints([{', '.join(params)}], extra) * scale",
                    f"return max([{', '.join(params)}]) - min([{', '.join(params)}]) + extra",
                ]
            )
            self.emit(1, body)
            self.functions.append((name, required))
        self.emit(0, "def make_adder(n):")
        self.emit(1, "return lambda x, k=1: x * k + n")
        self.emit(0, "def countdown(n, acc=()):")
        self.emit(1, "if n <= 0:")
        self.emit(2, "return acc")
        self.emit(1, "return countdown(n - 1, acc + (n,))")
        self.emit(0, "def kwonly(a, *, b, c=3):")
        self.emit(1, "return [a, b, c]")
        self.emit(
            0,
            f"print(make_adder({self.random.randint(-5, 5)})({self.random.randint(0, 9)}, "
            f"k={self.random.randint(-2, 2)}), countdown({self.random.randint(0, 6)}), "
            f"kwonly({self.random.randint(0, 5)}, b={self.word()}))",
        )

    def risky_ending(self) -> None:
        """One statement that fails at run time, for about one program in four."""
        lists, dicts = self.names_of(LIST), self.names_of(DICT)
        options = [
            lambda: f"print({self.list_expr()}[{self.random.randint(3, 9)}])",
            lambda: f"print({self.dict_expr()}[{self.word()}])",
            lambda: f"print({self.int_expr()} // 0)",
            lambda: f'fail("stopped at", {self.int_expr()})',
            lambda: f"print({self.str_expr()} + {self.int_expr()})",
            lambda: f"print(int({self.word()}))",
            lambda: f"print({self.str_expr()}.index({self.word()}))",
            lambda: f"print(kwonly({self.int_expr()}))",
            lambda: f"print(sorted([1, {self.word()}]))",
            lambda: f"print({self.tuple_expr()}[{self.random.randint(2, 5)}])",
        ]
        if lists:
            options.append(lambda: f"{self.pick(lists)}.remove({self.int_expr()})")
        if dicts:
            options.append(lambda: f"{self.pick(dicts)}.pop({self.word()})")
        self.emit(0, self.pick(options)())

    def program(self) -> str:
        self.prelude()
        for _ in range(self.random.randint(3, 6)):
            self.assign(0)
        self.block(0, self.random.randint(8, 20), 0)
        for name in sorted(self.variables):
            self.emit(0, f"print({name!r}, repr({name}))".replace("'", '"'))
        if self.chance(0.25):
            self.risky_ending()
        return "\n".join(self.lines) + "\n"


def generate_program(seed: int) -> str:
    """The Starlark source of program number ``seed``."""
    return ProgramGenerator(seed).program()


if __name__ == "__main__":
    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for seed in range(first, first + (int(sys.argv[2]) if len(sys.argv) > 2 else 1)):
        print(f"# --- seed {seed}")
        print(generate_program(seed))
