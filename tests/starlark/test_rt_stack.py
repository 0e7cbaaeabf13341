"""The stack of compiled Starlark in the default 64 KiB: how deep a recursion goes, and
that a runaway recursion ends in a Starlark error with its traceback.

A checked (recursive) function keeps only its own frame while it runs; the deepest
unchecked work below any of them is reserved once (see ``emit._checked_reach``), so a
simple recursion goes over a thousand levels deep in 64 KiB.
"""

from __future__ import annotations

import pytest

from starlark.harness import (
    RUNTIME_ERROR,
    SUCCESS,
    TIERS,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
)

pytestmark = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)

#: The command line's defaults (spec §8).
TICKS, MEMORY = 1_000_000, 64 << 10

DEEP = """\
def depth(n):
    if n == 0:
        return 0
    return 1 + depth(n - 1)

def walk(node):
    return 0 if node == None else 1 + walk(node[1])

chain = None
for i in range(600):
    chain = (i, chain)
print(depth(1000), walk(chain))
"""

RUNAWAY = """\
def runaway(n):
    return 1 + runaway(n + 1)

print("before")
runaway(0)
"""


@pytest.mark.parametrize("tier", TIERS)
def test_a_recursion_a_thousand_deep_runs_in_the_default_quota(tier: str) -> None:
    program = compile_kforge(DEEP, "deep.star", memory_quota=MEMORY)
    run = run_kforge(program, tier, tick_budget=TICKS, memory_quota=MEMORY)
    assert (run.outcome.kind, run.outcome.stdout) == (SUCCESS, "1000 600\n"), run.outcome


@pytest.mark.parametrize("tier", TIERS)
def test_a_runaway_recursion_ends_with_its_traceback(tier: str) -> None:
    program = compile_kforge(RUNAWAY, "runaway.star", memory_quota=MEMORY)
    run = run_kforge(program, tier, tick_budget=TICKS, memory_quota=MEMORY)
    outcome = run.outcome
    assert (outcome.kind, outcome.stdout) == (RUNTIME_ERROR, "before\n"), outcome
    assert outcome.message is not None and "Starlark stack overflow" in outcome.message
    traceback = outcome.traceback or ""
    assert traceback.startswith(
        "Traceback (most recent call last):\n  runaway.star:5:8: in <toplevel>\n"
    )
    assert "frames omitted)" in traceback
    # the innermost frame is the call that could not be made, as the Go implementation
    # shows it: the callee was never entered
    assert traceback.splitlines()[-2] == "  runaway.star:2:23: in runaway", traceback
