"""Ticks per float operation: the soft-float functions themselves, and Starlark's
operators, conversions and ``math`` functions in compiled programs.

The soft-float functions are driven directly (``tests/starlark/float_driver.py``) over
random doubles: typical ones (normal, exponents close together) for the mean, and a
mix with special values, subnormals, far exponents, ties and cancellations for the
least and the most.  A
Starlark operation's cost is measured as ``bench_starlark_bigint.py`` measures: a loop
applying it ``REPEATS`` times, less the same loop around a variable read (dispatch,
the float object made for the result, and its formatting or parsing included).
Ticks are what a program is metered in, the same on both tiers: this measures the
runtime's code, not the host (for time, see ``bench_starlark.py``'s float workload).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPEATS = 200
MEMORY_QUOTA = 64 * 1024 * 1024

sys.path.insert(0, str(HERE.parent / "tests"))

#: name -> Starlark expression over a, b (typical doubles), n (a small int), s (text)
OPERATIONS = {
    "a + b": "a + b",
    "a - b": "a - b",
    "a - h (h = 0.5)": "a - h",
    "a * b": "a * b",
    "a / b": "a / b",
    "a // b": "a // b",
    "a % b": "a % b",
    "a + n (int)": "a + n",
    "n * a (int)": "n * a",
    "a / 2": "a / 2",
    "a < b": "a < b",
    "a == b": "a == b",
    "-a": "-a",
    "float(n)": "float(n)",
    "int(a)": "int(a)",
    "str(a)": "str(a)",
    "str(0.5)": "str(h)",
    '"%e" % a': '"%e" % a',
    '"%f" % a': '"%f" % a',
    "float(s)": "float(s)",
    'float("0.5")': 'float("0.5")',
    "math.sqrt(a)": "math.sqrt(a)",
    "math.floor(a)": "math.floor(a)",
    "math.exp(a)": "math.exp(a)",
    "math.log(a)": "math.log(a)",
    "math.sin(a)": "math.sin(a)",
    "math.atan(a)": "math.atan(a)",
    "math.pow(a, b)": "math.pow(a, b)",
}


def program(expression: str) -> str:
    return f"""
a = 1.2345678901234567
b = 0.7654321098765432
h = 0.5
n = 3
s = "1.2345678901234567"
def loop():
    for i in range({REPEATS}):
        x = {expression}
loop()
"""


def ticks(source: str) -> int:
    from kforge.machine import Machine, MachineState
    from kforge.starlark import compile
    from kforge.tiers import TierRunner

    compiled = compile(source, "bench.star", memory_quota=MEMORY_QUOTA)
    machine = Machine.load(compiled, memory_quota=MEMORY_QUOTA, tick_budget=2**62)
    TierRunner("fast").run(machine)
    if machine.state is not MachineState.HALTED:
        raise RuntimeError(f"ended {machine.state.name}: {bytes(machine.stderr)!r}")
    return machine.ticks_used


def per_operation(
    operations: dict[str, str], program: Callable[[str], str], baseline: str, repeats: int
) -> dict[str, float]:
    """Ticks of each of ``operations`` (name -> code): its program's less the program of
    ``baseline``, per repeat; printed as a table as they come."""
    base = ticks(program(baseline))
    width = max(len(name) for name in operations) + 2
    costs: dict[str, float] = {}
    print(f"{'Starlark operation':<{width}}{'ticks':>8}")
    for name, code in operations.items():
        costs[name] = (ticks(program(code)) - base) / repeats
        print(f"{name:<{width}}{costs[name]:>8.0f}", flush=True)
    return costs


def typical_cases(op: str, count: int, rng: random.Random) -> list[tuple[str, int, int]]:
    """Normal doubles of either sign with exponents within a few binades."""

    def double() -> int:
        exponent = rng.randint(1023 - 8, 1023 + 8)
        return (rng.getrandbits(1) << 63) | (exponent << 52) | rng.getrandbits(52)

    if op == "from_word":
        return [(op, rng.getrandbits(rng.choice([20, 40, 62])), 0) for _ in range(count)]
    sqrt = op == "sqrt"
    return [(op, double() & ~(sqrt << 63), double()) for _ in range(count)]


def soft_float_ticks() -> dict[str, dict[str, float]]:
    from starlark.softfloat_check import OPERATIONS as SOFT
    from starlark.softfloat_check import random_cases, run_driver

    rng = random.Random(0)
    table: dict[str, dict[str, float]] = {}
    for op in SOFT:
        if SOFT[op].kinds:  # an operator on Starlark values: see the operations' table
            continue
        typical = typical_cases(op, 2000, rng)
        mean = run_driver(typical, "fast", measure=True).ticks[op].total / len(typical)
        spread = run_driver(random_cases(op, 2000, seed=3) + typical, "fast", measure=True)
        row = spread.ticks[op]
        table[op] = {"least": row.least, "typical": mean, "most": row.most}
    return table


def main() -> int:
    results: dict[str, Any] = {"repeats": REPEATS}
    soft = soft_float_ticks()
    results["soft_float"] = soft
    print(f"{'soft-float function':<22}{'least':>8}{'typical':>9}{'most':>8}")
    for op, row in soft.items():
        print(f"{op:<22}{row['least']:>8.0f}{row['typical']:>9.0f}{row['most']:>8.0f}")
    print()
    results["starlark_ticks_per_operation"] = per_operation(OPERATIONS, program, "a", REPEATS)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "starlark_float.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
