"""Ticks per big-int operation in compiled Starlark, by operand size.

For each operation and size, a program applies the operation ``REPEATS`` times in a
loop, and a second program runs the same loop around a plain variable read; the
difference in ticks, divided by ``REPEATS``, is the operation's cost (dispatch,
allocation and the result's canonical form included).  Ticks are what a program is
metered in and the same on both tiers, so this measures the runtime's code, not the
host (wall time on the fast tier: see ``bench_starlark.py``'s big-integer workload).

Operands are dense values of the stated size (a 1000-bit operand has 16 limbs, none
of them zero: a product skips the zero limbs of its shorter factor); ``b`` is three
bits shorter than ``a`` (at 64 bits it is a small int), and the dividend of the
divisions is twice as long as the divisor.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SIZES = (64, 256, 1000, 4000)
REPEATS = 50
MEMORY_QUOTA = 256 * 1024 * 1024

#: name -> Starlark expression over a, b (two operands of the size), p (twice the size),
#: s (the decimal text of a)
OPERATIONS = {
    "a + b": "a + b",
    "a - b": "b - a",
    "a * b": "a * b",
    "p // b": "p // b",
    "p % b": "p % b",
    "a // 10**9+7": "a // 1000000007",
    "a & b": "a & b",
    "a | -b": "a | -b",
    "a << 77": "a << 77",
    "a >> 77": "a >> 77",
    "-a": "-a",
    "a < b": "a < b",
    "str(a)": "str(a)",
    "int(s)": "int(s)",
}


def program(bits: int, expression: str) -> str:
    a = (1 << bits) - 1234567
    b = random.Random(bits).getrandbits(bits - 3) | 1 << (bits - 4)
    return f"""
a = {a}
b = {b}
p = a * b + a
s = str(a)
def loop():
    for i in range({REPEATS}):
        x = {expression}
loop()
"""


def ticks(source: str) -> int:
    """The ticks ``source`` takes to run (on the reference tier; the fast tier's are
    the same)."""
    from kforge.machine import Machine, MachineState
    from kforge.starlark import compile

    compiled = compile(source, "bench.star", memory_quota=MEMORY_QUOTA)
    machine = Machine.load(compiled, memory_quota=MEMORY_QUOTA, tick_budget=2**62)
    machine.run()
    if machine.state is not MachineState.HALTED:
        raise RuntimeError(f"ended {machine.state.name}: {bytes(machine.stderr)!r}")
    return machine.ticks_used


def main() -> int:
    results: dict[str, Any] = {"repeats": REPEATS, "ticks_per_operation": {}}
    print(f"{'operation':<14}" + "".join(f"{bits:>10} bits" for bits in SIZES))
    baselines = {bits: ticks(program(bits, "a")) for bits in SIZES}
    for name, expression in OPERATIONS.items():
        row: dict[str, float] = {}
        for bits in SIZES:
            row[str(bits)] = (ticks(program(bits, expression)) - baselines[bits]) / REPEATS
        results["ticks_per_operation"][name] = row
        print(f"{name:<14}" + "".join(f"{row[str(bits)]:>15.0f}" for bits in SIZES), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "starlark_bigint.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / "src"))
    raise SystemExit(main())
