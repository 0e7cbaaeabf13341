"""Differential tests: generated Starlark programs, kforge (both tiers) against starlark-go.

``starlark/generate.py`` turns a seed into a varied, terminating, deterministic program.
For each, kforge must print the same bytes as the Go implementation and end the same
way: success, or a run-time error with the same message (Go's messages are
deterministic, so all of them are compared).  The two tiers must agree exactly.

``make test`` runs a quick sample chosen by Hypothesis; the slow test runs thousands.
Reproduce one program with ``python tests/starlark/generate.py SEED``.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starlark.generate import generate_program
from starlark.harness import (
    SUCCESS,
    TIERS,
    Outcome,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
    run_oracle_isolated,
)

pytest.importorskip("starlark_go")

# Generated programs run at most a few thousand Starlark operations; see the corpus
# test for why these limits.
TICK_BUDGET = 20_000_000
MEMORY_QUOTA = 16 * 1024 * 1024
QUICK_EXAMPLES = 25
SLOW_PROGRAMS = 3000
FILENAME = "generated.star"

needs_compiler = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)


def kforge_outcome(source: str) -> Outcome:
    """kforge's outcome for ``source``, after checking that both tiers agree exactly."""
    compiled = compile_kforge(source, FILENAME, memory_quota=MEMORY_QUOTA)
    runs = [
        run_kforge(compiled, tier, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA)
        for tier in TIERS
    ]
    assert runs[0] == runs[1], "the reference and fast tiers disagree"
    return runs[0].outcome


def disagreement(seed: int, expected: Outcome | None) -> str | None:
    """Why kforge and the oracle disagree on program ``seed``, or None when they agree."""
    if expected is None:
        return None  # the oracle itself crashed on this program: nothing to compare with
    actual = kforge_outcome(generate_program(seed))
    if (actual.kind, actual.stdout, actual.message) == (
        expected.kind,
        expected.stdout,
        expected.message,
    ):
        return None
    return (
        f"seed {seed}: kforge {actual.kind} {actual.message!r}, "
        f"Go {expected.kind} {expected.message!r}; "
        f"stdout {'same' if actual.stdout == expected.stdout else 'differs'}"
    )


def test_generated_programs_run_under_the_oracle_and_vary() -> None:
    """The generator makes programs Go accepts, most of which succeed, with varied output."""
    seeds = range(200)
    outcomes = run_oracle_isolated([generate_program(s) for s in seeds], FILENAME)
    assert all(o is not None for o in outcomes), "the oracle crashed on a generated program"
    done = [o for o in outcomes if o is not None]
    kinds = Counter(o.kind for o in done)
    assert kinds["compile_error"] == 0, [o for o in done if o.kind == "compile_error"][:1]
    assert 0.6 <= kinds[SUCCESS] / len(done) <= 0.9, kinds
    error_kinds = {re.sub(r"[\d\"].*", "", o.message or "") for o in done if o.kind != SUCCESS}
    assert len(error_kinds) >= 8, error_kinds
    outputs = [o.stdout for o in done]
    assert len(set(outputs)) == len(outputs)
    assert sum(len(out.splitlines()) for out in outputs) / len(outputs) >= 10
    everything = "".join(outputs)
    assert re.search(r"\d{25}", everything), "no big integers printed"
    assert re.search(r"[^\x00-\x7f]", everything), "no non-ASCII text printed"
    assert 'b"' in everything and "{" in everything and "(" in everything


def test_the_same_seed_gives_the_same_program() -> None:
    assert generate_program(7) == generate_program(7)
    assert generate_program(7) != generate_program(8)


@needs_compiler
@settings(max_examples=QUICK_EXAMPLES, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_kforge_agrees_with_go_on_generated_programs(seed: int) -> None:
    [expected] = run_oracle_isolated([generate_program(seed)], FILENAME)
    assert disagreement(seed, expected) is None


@pytest.mark.slow
@needs_compiler
def test_kforge_agrees_with_go_on_thousands_of_programs() -> None:
    seeds = range(1_000_000, 1_000_000 + SLOW_PROGRAMS)
    expected = run_oracle_isolated([generate_program(s) for s in seeds], FILENAME)
    problems = [p for s, e in zip(seeds, expected, strict=True) if (p := disagreement(s, e))]
    assert not problems, f"{len(problems)} of {len(seeds)} disagree, first: {problems[:5]}"
