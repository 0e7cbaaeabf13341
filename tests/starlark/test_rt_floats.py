"""Floats in compiled Starlark: the soft-float library bit for bit with the host's IEEE
754, and the float type as the Go implementation behaves.

The soft-float functions are driven directly (``float_driver.py``, a test program in
the runtime dialect, over records in its data section; ``softfloat_check.py`` makes
the records and the host's answers): every special value against every other, and
random operands (close exponents, ties, subnormals), on both tiers.  The slow tests
check a million random operand pairs per operation.
"""

from __future__ import annotations

import pytest

from starlark.harness import kforge_missing_reason
from starlark.softfloat_check import (
    OPERATIONS,
    describe,
    differences_in_batches,
    edge_cases,
    random_cases,
    run_driver,
)

pytestmark = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)


# -- the soft-float library ------------------------------------------------------------------


def test_soft_float_agrees_with_the_host_on_special_values_and_random_operands() -> None:
    cases = []
    for op in OPERATIONS:
        cases += list(edge_cases(op)) + random_cases(op, 1000, seed=0)
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
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "sqrt", "from_word"])
def test_soft_float_agrees_with_the_host_on_a_million_operands_on_the_reference_tier(
    op: str,
) -> None:
    assert differences_in_batches(random_cases(op, 1_000_000, seed=2), "reference") == ""
