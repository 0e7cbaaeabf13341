"""The Go implementation's own test files, run through kforge with our assert module.

The files are not part of this repository: they are read from
$KFORGE_STARLARK_GO_TESTDATA (default /work/ref/starlark-go/starlark/testdata), and
these tests skip when it is absent.  ``starlark/go_testdata.py`` says how chunks are
run and judged; ``starlark/go_testdata_table.py`` prints the per-file table.

Every in-scope chunk must pass on the fast tier (and, in the slow run, on the
reference tier too, with the same outcome).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from starlark.go_testdata import (
    Chunk,
    go_test_files,
    judge,
    read_chunks,
    run_chunk_kforge,
)
from starlark.harness import kforge_missing_reason

FILES = go_test_files()
pytestmark = pytest.mark.skipif(not FILES, reason="the Go test files are not here")

CHUNKS = [chunk for path in FILES for chunk in read_chunks(path)]
IN_SCOPE = [chunk for chunk in CHUNKS if chunk.out_of_scope() is None]
# The assert module's regular expressions run in Starlark, and the biggest chunks
# hold hundreds of assertions: generous limits.  A runaway recursion fills 64 MiB with
# frames of a few words each; the collections tried before the overflow scan the whole
# stack, whose return addresses fall in the heap's range: about 1.4 G ticks in all.
TICK_BUDGET = 2_000_000_000
MEMORY_QUOTA = 64 * 1024 * 1024
TABLE = Path(__file__).parent / "starlark" / "go_testdata_table.py"

needs_compiler = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)


def test_chunks_keep_the_files_line_numbers() -> None:
    for path in FILES:
        lines = path.read_text(encoding="utf-8").split("\n")
        for chunk in read_chunks(path):
            first = chunk.source.split("\n")[chunk.first_line - 1 :]
            assert first == lines[chunk.first_line - 1 : chunk.first_line - 1 + len(first)]
            for line in chunk.want_errors:
                assert "###" in lines[line - 1]


def test_out_of_scope_chunks_say_why() -> None:
    reasons = {chunk.out_of_scope() for chunk in CHUNKS} - {None}
    assert reasons and all(reasons)
    assert len(IN_SCOPE) >= len(CHUNKS) // 2


def _testdata_patterns() -> list[str]:
    patterns = [p for chunk in CHUNKS for p in chunk.want_errors.values()]
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for literal in re.findall(r'assert\.fails\(.*,\s*("(?:[^"\\]|\\.)*")\s*\)', text):
            patterns.append(eval(literal))  # a Starlark string literal is a Python one here
    return sorted(set(patterns))


def _probe_texts(pattern: str) -> list[str]:
    """Texts to try a pattern on: its literal reading, near misses, and messages around it."""
    plain = re.sub(r"\\(.)", r"\1", pattern).replace(".*", "xyz").replace("^", "").replace("$", "")
    return [
        plain,
        "error: " + plain,
        plain[:-1],
        plain.upper(),
        pattern,
        "",
        "unhashable type: list",
        "index 3 out of range [-3:2]",
    ]


def test_the_starlark_regexp_matches_like_python_re() -> None:
    """regexp.star, run by the oracle, agrees with Python's re on the Go files' patterns."""
    pytest.importorskip("starlark_go")
    from starlark.go_testdata import load_assert_module
    from starlark.harness import oracle_module

    starlark_go = oracle_module()

    cases = [(p, t) for p in _testdata_patterns() for t in _probe_texts(p)]
    cases += [
        ("a|b", "b"),
        ("x[|]y", "x|y"),
        ("^ab$", "abc"),
        ("a{2,3}b", "aab"),
        ("a{2,3}b", "ab"),
        ("{", "{"),
        (r"\d+x", "12x"),
        ("[^a-c]", "abc"),
        ("(ab)+c", "ababc"),
        ("(a|)*b", "aab"),
        ("é.", "xéy"),
        ("a.c", "a\nc"),
        ("a.*b", "a\nb"),
        ("a.*b", "ba\nab"),
        ("a.*b.*c", "cbaxbc"),
        ("a.*b.*c", "ab\nc"),
        (r"\(a.*b", "(ab"),
        ("a.*", "\na"),
        (".*", ""),
    ]
    assert len(cases) >= 500
    printed: list[str] = []
    interpreter = starlark_go.Starlark(print=printed.append)
    interpreter.exec(load_assert_module("regexp.star"), filename="regexp.star")
    program = "\n".join(f"print(matches({p!r}, {t!r}))" for p, t in cases)
    interpreter.exec(program, filename="probe.star")
    wrong = [
        (p, t)
        for (p, t), got in zip(cases, printed, strict=True)
        if (got == "True") != (re.search(p, t) is not None)
    ]
    assert not wrong


def test_the_harness_and_assert_module_pass_under_the_oracle() -> None:
    """Run under starlark-go (with its limits, see go_testdata.py), nearly all chunks pass."""
    pytest.importorskip("starlark_go")
    import subprocess

    table = subprocess.run(
        [sys.executable, str(TABLE), "--oracle"], capture_output=True, text=True, check=True
    ).stdout
    rows = {
        name: tuple(map(int, numbers))
        for name, *numbers in re.findall(
            r"^\| (\S+) \| (\d+) \| (\d+) \| \d+ \| (\d+) \| (\d+) \|", table, re.M
        )
    }
    chunks_passed, chunks, assertions_passed, assertions = rows["**all**"]
    assert chunks >= 60 and assertions >= 1000, table
    assert chunks_passed >= 0.8 * chunks, table
    # Files whose every chunk the oracle can run as kforge will (no freezing, no load
    # errors, no wording that changed since the oracle's version) pass whole.
    for name in ("bool.star", "builtins.star", "bytes.star", "int.star", "tuple.star"):
        passed, total, assertions_passed, assertions = rows[name]
        assert (passed, assertions_passed) == (total, assertions) and assertions > 0, name


def _ids(chunks: list[Chunk]) -> list[str]:
    return [chunk.name for chunk in chunks]


@needs_compiler
@pytest.mark.parametrize("chunk", IN_SCOPE, ids=_ids(IN_SCOPE))
def test_go_test_chunk_passes_on_kforge(chunk: Chunk) -> None:
    outcome = run_chunk_kforge(
        chunk, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA, tier="fast"
    )
    result = judge(chunk, outcome)
    assert result.passed, result.why


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("chunk", IN_SCOPE, ids=_ids(IN_SCOPE))
def test_go_test_chunk_runs_the_same_on_the_reference_tier(chunk: Chunk) -> None:
    outcomes = [
        run_chunk_kforge(chunk, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA, tier=tier)
        for tier in ("fast", "reference")
    ]
    assert outcomes[0] == outcomes[1]


def test_statements_out_of_scope_are_blanked_in_place() -> None:
    removed = [(chunk, r) for chunk in IN_SCOPE for r in chunk.removed_statements()]
    assert removed, "the Go files use floats and sets here and there"
    for chunk, (first, last, reason) in removed:
        scoped = chunk.scoped_source.split("\n")
        assert len(scoped) == len(chunk.source.split("\n"))
        assert all(line == "" for line in scoped[first - 1 : last]), reason
