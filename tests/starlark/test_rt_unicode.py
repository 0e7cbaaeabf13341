"""The Unicode tables of the Starlark runtime, and the program that makes them.

``src/kforge/starlark/runtime/unicode_data.py`` holds, for code points from U+0080 on,
what the Go implementation answers about each one: whether ``repr`` shows it as itself
(``strconv.IsPrint``), whether it is a letter, a decimal digit, upper, lower or title
case (``unicode.IsLetter`` and friends), and its upper, lower and title case mappings
(``unicode.ToUpper`` and friends).  The answers are asked of the Go implementation
itself, so they follow the Unicode version of its Go release (15.0.0 for the one behind
the ``starlark-go`` package), not the version Python happens to ship.

Run this file to write the tables again::

    .venv/bin/python tests/starlark/test_rt_unicode.py

The slow test checks that the committed tables are still what the oracle answers; the
quick tests check the encodings against themselves (decoded back, every code point).

The encodings (read by ``runtime/unicode.py``):

* a *range set* is ``[n][n index entries of 5 bytes][deltas]``: the deltas (unsigned
  LEB128) are the distances between successive transitions (code points where
  membership flips, the first one into the set); index entry ``i`` holds transition
  ``i * RANGE_STRIDE`` (3 bytes) and the offset of the delta after it in the stream
  (2 bytes), so a lookup skips to the right stretch and reads at most
  ``RANGE_STRIDE`` deltas;
* the *case table* is a list of entries ``[gap][length << 1 | alternating][du][dl]``
  (LEB128; ``du``, ``dl`` zigzag, absent for an alternating entry, whose even offsets
  map to lower case by +1 and odd offsets to upper case by -1), ``gap`` counted from
  the end of the previous entry; its index (every ``CASE_STRIDE`` entries) holds that
  end (3 bytes) and the offset of the entry (2 bytes).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = ROOT / "src" / "kforge" / "starlark" / "runtime" / "unicode_data.py"
FIRST = 0x80
LAST = 0x10FFFF
RANGE_STRIDE = 64
CASE_STRIDE = 8

# One record per run of code points with the same answers, asked of the Go
# implementation.  istitle on one, two and two code points tells upper, lower and
# title case apart (see Go's string_istitle).
_ORACLE_PROGRAM = r"""
def answers(c):
    s = chr(c)
    return (
        repr(s) == '"' + s + '"',
        ord(s.upper()) - c,
        ord(s.lower()) - c,
        ord(s.capitalize()) - c,
        s.isalpha(),
        s.isdigit(),
        s.isspace(),
        s.islower() or s.isupper(),
        s.istitle(),
        ("A" + s).istitle(),
        (s + "A").istitle(),
    )

def runs():
    out = []
    previous = None
    c = FIRST
    while c <= LAST:
        if c == 0xD800:
            c = 0xE000
        a = answers(c)
        if a != previous:
            out.append((c, a))
            previous = a
        c += 1
    return out

RUNS = runs()
"""


class Answers:
    """What the Go implementation answers for each code point from U+0080."""

    def __init__(self, runs: list[tuple[int, tuple[object, ...]]]) -> None:
        self.runs = runs

    def each(self) -> Iterator[tuple[int, tuple[object, ...]]]:
        ends = [start for start, _ in self.runs[1:]] + [LAST + 1]
        for (start, answers), end in zip(self.runs, ends, strict=True):
            for c in range(start, end):
                if not 0xD800 <= c < 0xE000:
                    yield c, answers


def oracle_answers() -> Answers:
    starlark_go = pytest.importorskip("starlark_go")
    starlark_go.configure_starlark(allow_recursion=True, allow_global_reassign=True)
    interpreter = starlark_go.Starlark()
    interpreter.exec(f"FIRST = {FIRST}\nLAST = {LAST}\n" + _ORACLE_PROGRAM, filename="unicode.star")
    return Answers([(start, tuple(answers)) for start, answers in interpreter.get("RUNS")])


# -- sets and mappings from the answers -----------------------------------------------

PRINT, UPPER, LOWER, TITLE, LETTER, DIGIT, SPACE, CASED, ISTITLE1, ISTITLE_A, ISTITLE_RA = range(11)


def properties(answers: Answers) -> dict[str, object]:
    printable: set[int] = set()
    letters: set[int] = set()
    digits: set[int] = set()
    upper_case: set[int] = set()  # unicode.IsUpper
    lower_case: set[int] = set()  # unicode.IsLower
    title_case: set[int] = set()  # unicode.IsTitle
    mapping: dict[int, tuple[int, int, int]] = {}
    spaces: set[int] = set()
    cased_without_mapping: set[int] = set()
    for c, a in answers.each():
        if a[PRINT]:
            printable.add(c)
        if a[LETTER]:
            letters.add(c)
        if a[DIGIT]:
            digits.add(c)
        if a[SPACE]:
            spaces.add(c)
        deltas = (int(a[UPPER]), int(a[LOWER]), int(a[TITLE]))  # type: ignore[call-overload]
        if deltas != (0, 0, 0):
            mapping[c] = deltas
        elif a[CASED]:
            cased_without_mapping.add(c)
        # istitle(c) is true for title case; istitle("A" + c) for lower case and uncased
        # code points; istitle(c + "A") for uncased ones only.
        if a[ISTITLE1]:
            title_case.add(c)
        elif a[ISTITLE_A] and not a[ISTITLE_RA]:
            lower_case.add(c)
        elif not a[ISTITLE_A] and not a[ISTITLE_RA]:
            upper_case.add(c)
    has_lower = {c for c, (_, dl, _) in mapping.items() if dl}
    has_upper = {c for c, (du, _, _) in mapping.items() if du}
    return {
        "printable": printable,
        "letters": letters,
        "digits": digits,
        "spaces": spaces,
        "title_case": title_case,
        "mapping": mapping,
        "cased_without_mapping": cased_without_mapping,
        "upper_extra": upper_case - has_lower,
        "upper_excluded": has_lower - upper_case,
        "lower_extra": lower_case - has_upper,
        "lower_excluded": has_upper - lower_case,
    }


# -- encodings ------------------------------------------------------------------------


def leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def transitions(members: set[int]) -> list[int]:
    points: list[int] = []
    inside = False
    for c in range(FIRST, LAST + 2):
        now = c in members
        if now != inside:
            points.append(c)
            inside = now
    return points


def encode_range_set(members: set[int]) -> bytes:
    points = transitions(members)
    stream = bytearray()
    index = bytearray()
    previous = 0
    for number, point in enumerate(points):
        stream += leb128(point - previous)
        previous = point
        if number % RANGE_STRIDE == 0:
            index += point.to_bytes(3, "little") + len(stream).to_bytes(2, "little")
    count = len(index) // 5
    assert count < 256 and len(stream) < 1 << 16
    # index entry 0 is the first transition: a lookup below it is outside the set
    return bytes([count]) + bytes(index) + bytes(stream)


def case_entries(mapping: dict[int, tuple[int, int, int]]) -> list[tuple[int, int, bool, int, int]]:
    """(first, length, alternating, du, dl) runs of the upper and lower mappings."""

    def deltas(c: int) -> tuple[int, int]:
        du, dl, _ = mapping.get(c, (0, 0, 0))
        return du, dl

    entries = []
    c = FIRST
    while c <= LAST:
        here = deltas(c)
        if here == (0, 0):
            c += 1
            continue
        if here == (0, 1) and deltas(c + 1) == (-1, 0):
            end = c
            while deltas(end) == (0, 1) and deltas(end + 1) == (-1, 0):
                end += 2
            entries.append((c, end - c, True, 0, 0))
            c = end
            continue
        end = c + 1
        while deltas(end) == here:
            end += 1
        entries.append((c, end - c, False, *here))
        c = end
    return entries


def encode_case_table(mapping: dict[int, tuple[int, int, int]]) -> bytes:
    stream = bytearray()
    index = bytearray()
    previous_end = 0
    for number, (first, length, alternating, du, dl) in enumerate(case_entries(mapping)):
        if number % CASE_STRIDE == 0:
            index += previous_end.to_bytes(3, "little") + len(stream).to_bytes(2, "little")
        stream += leb128(first - previous_end) + leb128(length << 1 | alternating)
        if not alternating:
            stream += leb128(zigzag(du)) + leb128(zigzag(dl))
        previous_end = first + length
    count = len(index) // 5
    assert count < 256 and len(stream) < 1 << 16
    return bytes([count]) + bytes(index) + bytes(stream)


def title_exceptions(mapping: dict[int, tuple[int, int, int]]) -> dict[int, int]:
    """Code points whose title case is not their upper case: code point -> title."""
    return {c: c + dt for c, (du, _, dt) in mapping.items() if dt != du}


# -- decoders (the runtime's lookups, in Python, to check the encodings) ---------------


def _read_leb128(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


def decode_range_set(table: bytes) -> set[int]:
    count = table[0]
    position = 1 + 5 * count
    members: set[int] = set()
    point = 0
    inside = False
    start = 0
    while position < len(table):
        delta, position = _read_leb128(table, position)
        point += delta
        if inside:
            members.update(range(start, point))
        start = point
        inside = not inside
    if inside:
        members.update(range(start, LAST + 1))
    return members


def decode_case_table(table: bytes) -> dict[int, tuple[int, int]]:
    count = table[0]
    position = 1 + 5 * count
    result: dict[int, tuple[int, int]] = {}
    end = 0
    while position < len(table):
        gap, position = _read_leb128(table, position)
        word, position = _read_leb128(table, position)
        first = end + gap
        length, alternating = word >> 1, word & 1
        if alternating:
            for c in range(first, first + length):
                result[c] = (0, 1) if (c - first) % 2 == 0 else (-1, 0)
        else:
            du, position = _read_leb128(table, position)
            dl, position = _read_leb128(table, position)
            for c in range(first, first + length):
                result[c] = (du >> 1 ^ -(du & 1), dl >> 1 ^ -(dl & 1))
        end = first + length
    return result


# -- the module -----------------------------------------------------------------------


def render_module(props: dict[str, object]) -> str:
    mapping = props["mapping"]
    assert isinstance(mapping, dict)
    sets: list[tuple[str, str, str]] = [
        ("PRINTABLE", "printable", "shown as themselves by repr (strconv.IsPrint)"),
        ("LETTER", "letters", "letters (unicode.IsLetter)"),
        ("DIGIT", "digits", "decimal digits (unicode.IsDigit)"),
        ("TITLE_CASE", "title_case", "title case letters (unicode.IsTitle)"),
        ("UPPER_EXTRA", "upper_extra", "upper case (unicode.IsUpper) without a lower case mapping"),
        ("UPPER_EXCLUDED", "upper_excluded", "with a lower case mapping, yet not upper case"),
        (
            "LOWER_EXTRA",
            "lower_extra",
            "lower case (unicode.IsLower) without an upper case mapping",
        ),
        ("LOWER_EXCLUDED", "lower_excluded", "with an upper case mapping, yet not lower case"),
    ]
    lines = [
        '"""Unicode tables for the runtime, asked of the Go implementation (Unicode 15.0.0).',
        "",
        "Generated by ``tests/starlark/test_rt_unicode.py`` (which explains the encodings);",
        "read by :mod:`kforge.starlark.runtime.unicode`.  Do not edit.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        f"RANGE_STRIDE: Final = {RANGE_STRIDE}",
        f"CASE_STRIDE: Final = {CASE_STRIDE}",
        "",
    ]
    for name, key, what in sets:
        members = props[key]
        assert isinstance(members, set)
        lines.append(f"#: Code points from U+0080 {what}: a range set.")
        lines.append(f"{name}: Final = {encode_range_set(members)!r}")
    lines.append("#: Upper and lower case mappings (unicode.ToUpper, unicode.ToLower).")
    lines.append(f"CASE: Final = {encode_case_table(mapping)!r}")
    return formatted("\n".join(lines) + "\n")


def formatted(text: str) -> str:
    """``text`` as the project's formatter writes it (so the module stays unchanged by
    ``ruff format``)."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TABLES), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return result.stdout


def check_runtime_facts(props: dict[str, object]) -> None:
    """What runtime/unicode.py writes as code rather than tables."""
    assert props["spaces"] == {
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    }
    assert props["cased_without_mapping"] == {0xDF}
    mapping = props["mapping"]
    assert isinstance(mapping, dict)
    assert title_exceptions(mapping) == {
        **{c: c - (c - 0x1C4) % 3 + 1 for c in range(0x1C4, 0x1CD)},
        **{c: 0x1F2 for c in range(0x1F1, 0x1F4)},
        **{c: c for c in range(0x10D0, 0x1100) if c not in (0x10FB, 0x10FC)},
    }


def test_range_sets_decode_to_what_they_encode() -> None:
    members = {0x80, 0x81, 0x100, *range(0x300, 0x5000), *range(0x10000, 0x10FFFF + 1)}
    assert decode_range_set(encode_range_set(members)) == members
    assert decode_range_set(encode_range_set(set())) == set()


def test_case_table_decodes_to_what_it_encodes() -> None:
    mapping = {0x100: (0, 1, 0), 0x101: (-1, 0, -1), 0x102: (0, 1, 0), 0x103: (-1, 0, -1)}
    mapping |= {c: (0, 32, 0) for c in range(0x410, 0x430)}
    mapping |= {0x1C4: (0, 2, 1), 0x10000: (5, 0, 5)}
    decoded = decode_case_table(encode_case_table(mapping))
    assert decoded == {c: (du, dl) for c, (du, dl, _) in mapping.items()}


def test_committed_tables_decode_consistently() -> None:
    from kforge.starlark.runtime import unicode_data as data

    printable = decode_range_set(data.PRINTABLE)
    assert 0xE9 in printable and 0x4E16 in printable and 0x1F600 in printable
    assert not {0x85, 0xA0, 0xAD, 0x200B, 0x2028, 0xFEFF, 0xE000, 0x10FFFF} & printable
    assert decode_range_set(data.DIGIT) >= set(range(0x660, 0x66A))
    case = decode_case_table(data.CASE)
    assert case[0xE9] == (-32, 0) and case[0x410] == (0, 32) and case[0x17F] == (-300, 0)


@pytest.mark.slow
def test_committed_tables_are_what_the_oracle_answers() -> None:
    props = properties(oracle_answers())
    check_runtime_facts(props)
    assert TABLES.read_text() == render_module(props)


def main(write: Callable[[str], object] = TABLES.write_text) -> None:
    props = properties(oracle_answers())
    check_runtime_facts(props)
    text = render_module(props)
    for name, key in (("printable", "printable"), ("letters", "letters")):
        members = props[key]
        assert isinstance(members, set)
        assert decode_range_set(encode_range_set(members)) == members, name
    mapping = props["mapping"]
    assert isinstance(mapping, dict)
    assert decode_case_table(encode_case_table(mapping)) == {
        c: (du, dl) for c, (du, dl, _) in mapping.items() if (du, dl) != (0, 0)
    }
    write(text)
    print(f"wrote {TABLES.relative_to(ROOT)} ({len(text)} characters)", file=sys.stderr)


if __name__ == "__main__":
    main()


# -- the runtime's lookups, at every edge of every table ------------------------------


def _literal(points: list[int]) -> str:
    """A Starlark string literal of these code points, every one escaped."""
    return '"' + "".join(f"\\U{c:08x}" for c in points) + '"'


def _edges(points: list[int]) -> list[int]:
    """Each transition and the code point before it, inside the valid range."""
    edges = sorted({p for t in points for p in (t - 1, t)})
    return [c for c in edges if FIRST <= c <= LAST and not 0xD800 <= c < 0xE000]


def lookup_program(step: int = 1) -> tuple[str, str]:
    """A program asking the runtime about the code points where the tables change
    (every ``step`` th of them), and what it must print (from the committed tables,
    decoded here)."""
    from kforge.starlark.runtime import unicode_data as data

    printable = decode_range_set(data.PRINTABLE)
    letters = decode_range_set(data.LETTER)
    digits = decode_range_set(data.DIGIT)
    title_case = decode_range_set(data.TITLE_CASE)
    upper_extra, upper_excluded = (
        decode_range_set(data.UPPER_EXTRA),
        decode_range_set(data.UPPER_EXCLUDED),
    )
    lower_extra, lower_excluded = (
        decode_range_set(data.LOWER_EXTRA),
        decode_range_set(data.LOWER_EXCLUDED),
    )
    case = decode_case_table(data.CASE)

    def upper(c: int) -> int:
        return c + case.get(c, (0, 0))[0]

    def lower(c: int) -> int:
        return c + case.get(c, (0, 0))[1]

    def title(c: int) -> int:
        if 0x1C4 <= c <= 0x1CC:
            return c - (c - 0x1C4) % 3 + 1
        if 0x1F1 <= c <= 0x1F3:
            return 0x1F2
        if 0x10D0 <= c <= 0x10FF:
            return c
        return upper(c)

    def kind(c: int) -> str:  # what istitle sees: U(pper), L(ower), T(itle) or -
        if c in title_case:
            return "T"
        if c in lower_extra or (upper(c) != c and c not in lower_excluded):
            return "L"
        if c in upper_extra or (lower(c) != c and c not in upper_excluded):
            return "U"
        return "-"

    print_points = _edges(transitions(printable))
    letter_points = _edges(transitions(letters))
    digit_points = _edges(transitions(digits))
    entries = case_entries({c: (du, dl, 0) for c, (du, dl) in case.items()})
    case_points = sorted(
        set(
            _edges(
                [first for first, *_ in entries] + [first + length for first, length, *_ in entries]
            )
        )
        | set(_edges(transitions(title_case) + transitions(upper_extra) + transitions(lower_extra)))
        | set(_edges(transitions(upper_excluded) + transitions(lower_excluded)))
        | {0xDF, 0x130, 0x131, 0x17F, 0x1E9E, 0x2126, 0x212A, 0x212B}
    )
    print_points, letter_points, digit_points = (
        print_points[::step],
        letter_points[::step],
        digit_points[::step],
    )
    case_points = case_points[::step]
    source = f"""
P = {_literal(print_points)}
print(repr(P))
print("".join(["1" if c.isalpha() else "0" for c in {_literal(letter_points)}.codepoints()]))
print("".join(["1" if c.isdigit() else "0" for c in {_literal(digit_points)}.codepoints()]))
C = {_literal(case_points)}
print(list(C.upper().codepoint_ords()))
print(list(C.lower().codepoint_ords()))
print(list(" ".join(C.codepoints()).title().codepoint_ords())[::2])
for c in C.codepoints():
    k = "-"
    if c.istitle():
        k = "T"
    elif ("A" + c).istitle() and not (c + "A").istitle():
        k = "L"
    elif not ("A" + c).istitle() and not (c + "A").istitle():
        k = "U"
    print(k, c.isupper(), c.islower())
"""
    lines = ['"' + "".join(chr(c) if c in printable else _escape(c) for c in print_points) + '"']
    lines.append("".join("1" if c in letters else "0" for c in letter_points))
    lines.append("".join("1" if c in digits else "0" for c in digit_points))
    lines.append(str([upper(c) for c in case_points]))
    lines.append(str([lower(c) for c in case_points]))
    lines.append(str([title(c) for c in case_points]))
    for c in case_points:
        cased = upper(c) != c or lower(c) != c or c == 0xDF
        lines.append(f"{kind(c)} {cased and upper(c) == c} {cased and lower(c) == c}")
    return source, "\n".join(lines) + "\n"


def _escape(c: int) -> str:
    return f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def test_runtime_lookups_agree_with_the_tables() -> None:
    """Every edge on the fast tier (22 million ticks), every seventh on the reference
    tier (whose agreement with the fast tier the machine's own tests establish)."""
    from starlark.harness import SUCCESS, compile_kforge, run_kforge

    for tier, step in (("fast", 1), ("reference", 7)):
        source, want = lookup_program(step)
        program = compile_kforge(source, "lookups.star", memory_quota=1 << 22)
        run = run_kforge(program, tier, tick_budget=100_000_000, memory_quota=1 << 22)
        assert run.outcome.kind == SUCCESS, run.outcome
        assert run.outcome.stdout == want, tier
