"""The garbage collector: programs that allocate many times the memory quota but keep
little alive run in the default 64 KiB as they run in Go, or (``STOPS_EARLY``) print
the beginning of what Go prints and stop with a resource error, never a wrong answer;
generated programs do the same in a small quota against a huge one; live data that
keeps growing still ends in ``out of memory``.

The expected outcomes were recorded from starlark-go in ``test_rt_gc.json``; run this
file to record them again::

    .venv/bin/python tests/starlark/test_rt_gc.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlark.generate import generate_program
from starlark.harness import (
    RUNTIME_ERROR,
    SUCCESS,
    Outcome,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
    run_oracle,
)

EXPECTED = Path(__file__).with_suffix(".json")
FILENAME = "gc.star"
TICK_BUDGET = 200_000_000
#: The default quota: every program below allocates many times this much.
MEMORY_QUOTA = 64 << 10

#: Loaded by a program for frozen globals (a loaded module's globals are frozen).
MODULES = {
    "frozen.star": """\
table = [3, 1, 4, 1, 5, 9, 2, 6]
names = ["alpha", "beta", "gamma", "delta"]
config = {"depth": 3, "name": "frozen", "items": [[1, 2], [3]]}
""",
}

PROGRAMS: dict[str, str] = {}

PROGRAMS["strings"] = """\
s = ""
for i in range(300):
    s += str(i)
print(len(s), s[:20], s[-20:])
t = ""
for i in range(3000):
    t = t + "ab"[i % 2] + "é"
    if len(t) > 200:
        t = t[100:]
print(len(t), t[:12])
parts = []
for i in range(600):
    parts.append("%d:%s" % (i, "x" * (i % 7)))
    if len(parts) > 20:
        parts = parts[10:]
print(len(parts), parts[-1], ",".join(parts)[:40])
words = []
for i in range(300):
    line = " ".join([str(j * i) for j in range(12)])
    words = line.split(" ")
    u = line.upper().replace("1", "one").strip()
print(words[-3:], u[:30], len(u))
b = b""
for i in range(400):
    b = bytes("%s%d" % (str(b)[-40:], i))
print(len(b), b[:10])
"""

PROGRAMS["containers"] = """\
load("frozen.star", "table", "names", "config")
d = {}
for i in range(2000):
    d[str(i % 12)] = [i, (i, str(i))]
    if i % 7 == 0:
        d.pop(str((i // 7) % 12), None)
print(len(d), sorted(d.keys())[:5], d.get("3"))
def adder(n):
    return lambda x: x + n
made = 0
for i in range(600):
    fs = [adder(j) for j in range(i % 9)]
    made += len(fs)
print(made, len(fs))
acc = []
for i in range(300):
    l = sorted([(j * 7919 + i) % 101 for j in range(60)], reverse = (i % 2 == 0))
    acc = [l[0], l[-1], len(l)] + sorted(names)[:2]
print(acc)
s = 0
for i in range(500):
    s += table[i % len(table)] + len(names[i % len(names)])
    m = dict(zip(names, table))
    e = list(enumerate(names, i))
    c = {k: v for k, v in config.items()}
print(s, m, e[-1], c["items"], config["name"])
"""

PROGRAMS["numbers"] = """\
fact = 1
for i in range(1, 200):
    fact *= i
    text = "%x %d" % (fact, fact % 1000003)
print(text[-20:])
acc = 0
for i in range(2000):
    acc = (acc + (1 << 70) * i) % ((1 << 89) + 7)
print(acc, float(acc % 1000))
"""

PROGRAMS["churn"] = """\
load("frozen.star", "table", "names")
total = 0
for i in range(400):
    x = [j * i for j in range(40)]
    total += x[-1] + len(x)
print(total)
d = {}
for i in range(3000):
    d[i % 12] = [i, (i, -i)]
    if i % 7 == 0:
        d.pop((i // 7) % 12, None)
print(len(d), sorted(d.keys())[:5], d.get(3))
x = 1
for i in range(400):
    x = x * 3 + i
    y = x * x // 7
print(x % 1000000007, y % 998244353, len(str(x)))
f = 0.0
for i in range(4000):
    f = f * 0.999 + i / 7.0
print(f, int(f))
fact = 1
for i in range(1, 300):
    fact *= i
print(len(str(fact)), fact % 1000003)
s = 0
for i in range(500):
    s += table[i % len(table)] + len(names[i % len(names)])
    l = sorted([(j * 7919 + i) % 101 for j in range(30)] + table)
print(s, l[:5], l[-3:])
"""

PROGRAMS["deep_calls"] = """\
def depth(n):
    if n == 0:
        return 0
    return 1 + depth(n - 1)
def through_value(f, n):
    if n == 0:
        return 0
    return 1 + through_value(f, n - 1) + f(0)
print(depth(1400), through_value(depth, 700), "%d" % depth(100))
"""

PROGRAMS["error_live_data_grows"] = """\
keep = []
i = 0
while True:
    keep.append("item %d" % i)
    i += 1
"""

#: Programs the oracle does not run (it has no memory limit): the outcome kforge gives.
KFORGE_ONLY = {
    "error_live_data_grows": Outcome(
        RUNTIME_ERROR, message="out of memory: the program's heap reached its memory quota"
    ),
}
#: Programs that may stop early in 64 KiB: a live object the collector cannot move
#: holds the top of the heap where a checked call (recursion, a call through a value,
#: ``str`` of a container) needs stack (docs/starlark.md, *Memory*).  They must print a
#: prefix of what Go prints, then end with a resource error: never a wrong answer.
STOPS_EARLY: set[str] = set()
#: Run on both tiers (ticks compared); the others on the fast tier only.
BOTH_TIERS = {"churn", "error_live_data_grows"}
RESOURCE_ERRORS = (
    "out of memory: the program's heap reached its memory quota",
    "Starlark stack overflow: calls nested too deeply for the memory quota",
)


def compile_program(name: str, memory_quota: int = MEMORY_QUOTA) -> Any:
    return compile_kforge(
        PROGRAMS[name], FILENAME, loader=MODULES.__getitem__, memory_quota=memory_quota
    )


def same_or_stopped_early(got: Outcome, expected: Outcome) -> bool:
    """``got`` is ``expected``, or its beginning cut short by a resource error."""
    if got.kind == expected.kind and got.stdout == expected.stdout:
        return got.kind != RUNTIME_ERROR or got.message == expected.message
    return got.message in RESOURCE_ERRORS and expected.stdout.startswith(got.stdout)


@pytest.mark.skipif(kforge_missing_reason() is not None, reason=str(kforge_missing_reason()))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_as_in_go(name: str) -> None:
    """In 64 KiB, the outcome Go gives (and both tiers agree, ticks included)."""
    expected = KFORGE_ONLY.get(name) or Outcome.from_json(
        json.loads(EXPECTED.read_text(encoding="utf-8"))[name]
    )
    program = compile_program(name)
    tiers = ("reference", "fast") if name in BOTH_TIERS else ("fast",)
    runs = [
        run_kforge(program, tier, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA)
        for tier in tiers
    ]
    for run in runs:
        if name in STOPS_EARLY:
            assert same_or_stopped_early(run.outcome, expected), run.outcome
            continue
        assert run.outcome.kind == expected.kind, run.outcome
        assert run.outcome.stdout == expected.stdout
        if expected.kind == RUNTIME_ERROR:
            assert run.outcome.message == expected.message
    assert len({run.ticks_used for run in runs}) == 1


#: Generated programs run in a quota small enough that most of them need the collector.
SMALL_QUOTA = 40 << 10
HUGE_QUOTA = 8 << 20
SEEDS = range(24)


@pytest.mark.skipif(kforge_missing_reason() is not None, reason=str(kforge_missing_reason()))
def test_generated_programs_print_in_a_small_quota_what_they_print_in_a_huge_one() -> None:
    """Or they stop early with a resource error, having printed the same beginning."""
    same = 0
    for seed in SEEDS:
        source = generate_program(seed)
        small = compile_kforge(source, f"gen{seed}.star", memory_quota=SMALL_QUOTA)
        huge = compile_kforge(source, f"gen{seed}.star", memory_quota=HUGE_QUOTA)
        if isinstance(small, Outcome):
            assert small == huge
            continue
        expected = run_kforge(huge, "reference", tick_budget=TICK_BUDGET, memory_quota=HUGE_QUOTA)
        got = run_kforge(small, "reference", tick_budget=TICK_BUDGET, memory_quota=SMALL_QUOTA)
        assert same_or_stopped_early(got.outcome, expected.outcome), f"seed {seed}"
        same += got.outcome == expected.outcome
    assert same >= 4


#: Caught errors in a loop, each matched by the test harness's regular expressions
#: (deep recursion over short-lived dicts and lists): a catch gives back all it took.
CAUGHT_IN_A_LOOP = """\
load("assert.star", "assert")
def missing():
    return {"a": 1}["b"]
for i in range(8):
    assert.fails(missing, "key .b. not in dict")
    assert.fails(lambda: [1, 2][5], "index 5 out of range")
    assert.eq(str(i), "%d" % i)
print("done")
"""


@pytest.mark.skipif(kforge_missing_reason() is not None, reason=str(kforge_missing_reason()))
def test_errors_caught_in_a_loop_leave_the_stack_its_room() -> None:
    from starlark.go_testdata import load_assert_module

    quota = 128 << 10
    program = compile_kforge(
        CAUGHT_IN_A_LOOP, "caught.star", loader=load_assert_module, testing=True, memory_quota=quota
    )
    run = run_kforge(program, "fast", tick_budget=TICK_BUDGET, memory_quota=quota, testing=True)
    assert (run.outcome.kind, run.outcome.stdout, run.outcome.stderr) == (SUCCESS, "done\n", "")


def test_every_program_has_its_expectation() -> None:
    recorded = json.loads(EXPECTED.read_text(encoding="utf-8"))
    assert set(recorded) | set(KFORGE_ONLY) == set(PROGRAMS)
    assert {Outcome.from_json(recorded[name]).kind for name in recorded} == {SUCCESS}


def record() -> None:
    results = {
        name: run_oracle(source, FILENAME, modules=MODULES).to_json()
        for name, source in sorted(PROGRAMS.items())
        if name not in KFORGE_ONLY
    }
    EXPECTED.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(results)} programs in {EXPECTED}")


if __name__ == "__main__":
    record()
