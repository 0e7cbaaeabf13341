"""Reference-tier throughput on a count loop: the baseline the fast tier is measured against.

count: acc += i; i += 1; loop while i < N (3 ticks per iteration).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

from kforge.isa import Instruction, Opcode
from kforge.machine import Machine
from kforge.program import ForgeProgram

RESULTS = Path(__file__).resolve().parent / "results"


def count_program(iterations: int) -> ForgeProgram:
    return ForgeProgram(
        (
            Instruction(Opcode.LI, rd=3, imm=iterations),
            Instruction(Opcode.LI, rd=4, imm=1),
            Instruction(Opcode.ADD, rd=1, rs1=1, rs2=2),
            Instruction(Opcode.ADD, rd=2, rs1=2, rs2=4),
            Instruction(Opcode.JLT, rs1=2, rs2=3, imm=2),
            Instruction(Opcode.HALT),
        )
    )


def measure(iterations: int, repeats: int = 3) -> tuple[float, int]:
    program = count_program(iterations)
    rates = []
    ticks = 0
    for _ in range(repeats):
        machine = Machine.load(program, tick_budget=10 * iterations + 10)
        started = time.perf_counter()
        machine.run()
        elapsed = time.perf_counter() - started
        ticks = machine.ticks_used
        rates.append(ticks / elapsed)
    return statistics.median(rates), ticks


def main() -> None:
    rate, ticks = measure(300_000)
    print(f"{'workload':<10} {'ticks':>10} {'reference tier':>18}")
    print(f"{'count':<10} {ticks:>10} {rate / 1e6:>14.2f} M/s")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reference.json").write_text(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "count": {"ticks": ticks, "ticks_per_second": rate},
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
