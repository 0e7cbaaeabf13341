"""The fast tier against its targets: throughput, start-up, sandbox cost and message latency.

Workloads (Forge assembly below, the same algorithm hand-written in benchmarks/wat/):
count (3 ticks/iteration), fib (iterative, 5 ticks/iteration), sieve (1,000,000 byte
flags), calls (naive recursive Fibonacci: CALL/RET/PUSH/POP), memory (u64 copy of
128 KiB, LOADW/STOREW).  For each: ticks/s of the fast tier; of the reference tier (at
a smaller N: the ratio is per tick); wasmtime running the hand-written WAT with fuel on
(same N; ratio of wall times) and pywasm (small N; ratio per iteration).  Then compile
latency, the first result of a cold 1,000-instruction program on the auto tier, sandbox
creation at 64 KiB, memory per idle sandbox, and SEND→RECV pair latency.  Then compiled
Starlark programs (benchmarks/programs/: thousands of instructions in short blocks, calls
everywhere): WebAssembly text per instruction, ``wasmtime.Module(engine, wat)`` time, and
ticks/s of the fast tier (the machine bound to its 256 MiB memory before timing).

Targets: >= 1 G ticks/s on count, fib and sieve; wall time <= wasmtime-with-fuel's;
>= 300x the reference tier; cold 1,000-instruction first result <= 5 ms.

Prints a table; writes benchmarks/results/fast.json and benchmarks/results/fast.png.
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import wasmtime

from kforge.asm import assemble
from kforge.fast import FastTier, plan_program
from kforge.fast.compiler import generate_wat
from kforge.isa import Instruction, Opcode
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram, decode_program

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
WAT = HERE / "wat"
PROGRAMS = HERE / "programs"
PROGRAMS_QUOTA = 268_435_456  # what benchmarks/programs/*.frgp were compiled for
BIG_BUDGET = 10**15

COUNT = """
    LI r3, {n}
    LI r4, 1
loop:
    ADD r1, r1, r5
    ADD r5, r5, r4
    JLT r5, r3, loop
    ADD r2, r1, r0
    HALT
"""
FIB = """
    LI r5, {n}
    LI r6, 1
    LI r2, 1
loop:
    ADD r3, r1, r2
    ADD r1, r2, r0
    ADD r2, r3, r0
    SUB r5, r5, r6
    JNZ r5, loop
    HALT
"""
SIEVE = """
    LI r1, {n}
    LI r2, 2
    LI r4, 1
outer:
    MUL r5, r2, r2
    JLT r5, r1, mark
    JMP tally
mark:
    LOAD r6, r2, 0
    JNZ r6, next
    ADD r3, r5, r0
inner:
    STORE r4, r3, 0
    ADD r3, r3, r2
    JLT r3, r1, inner
next:
    ADD r2, r2, r4
    JMP outer
tally:
    LI r2, 2
count:
    LOAD r6, r2, 0
    ADD r8, r8, r6
    ADD r2, r2, r4
    JLT r2, r1, count
    SUB r2, r1, r8
    SUB r2, r2, r4
    SUB r2, r2, r4
    HALT
"""
CALLS = """
    LI r1, {n}
    LI r4, 1
    LI r5, 2
    CALL fib
    HALT
fib:
    JLT r1, r5, base
    PUSH r1
    SUB r1, r1, r4
    CALL fib
    POP r1
    PUSH r2
    SUB r1, r1, r5
    CALL fib
    POP r3
    ADD r2, r2, r3
    RET
base:
    ADD r2, r1, r0
    RET
"""
MEMORY = """
    LI r1, 131072
    LI r9, {n}
    LI r4, 8
    LI r6, 1
pass:
    LI r2, 0
copy:
    LOADW r3, r2, 0
    ADD r3, r3, r2
    STOREW r3, r2, 131072
    ADD r7, r7, r3
    ADD r2, r2, r4
    JLT r2, r1, copy
    SUB r9, r9, r6
    JNZ r9, pass
    ADD r2, r7, r0
    HALT
"""


@dataclass(frozen=True)
class Workload:
    """One algorithm: its Forge text, the N for each contender, its quota and WAT file."""

    name: str
    text: str
    fast_n: int
    reference_n: int
    pywasm_n: int
    memory_quota: int
    targeted: bool  # one of the three with a >= 1 G ticks/s target

    def program(self, n: int) -> ForgeProgram:
        return assemble(self.text.format(n=n), f"<{self.name}>")


WORKLOADS = (
    Workload("count", COUNT, 200_000_000, 300_000, 20_000, 65_536, True),
    Workload("fib", FIB, 200_000_000, 200_000, 20_000, 65_536, True),
    Workload("sieve", SIEVE, 1_000_000, 30_000, 3_000, 1 << 20, True),
    Workload("calls", CALLS, 32, 20, 14, 65_536, False),
    Workload("memory", MEMORY, 2_000, 4, 1, 1 << 20, False),
)


def median_time(action: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``action`` and its last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


# ----------------------------------------------------------------- throughput


Timed = Callable[[], tuple[float, int, int]]  # one run: seconds, ticks, result


def forge_runner(tier: FastTier, workload: Workload, n: int, tier_name: str) -> Timed:
    """One run on a fresh machine (its load not timed); the module is compiled beforehand."""
    program = workload.program(n)
    if tier_name == "fast":
        tier.compile(program)

    def once() -> tuple[float, int, int]:
        machine = Machine.load(program, tick_budget=BIG_BUDGET, memory_quota=workload.memory_quota)
        started = time.perf_counter()
        tier.run(machine, tier=tier_name)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        assert machine.state is MachineState.HALTED, (workload.name, machine.state, machine.fault)
        return seconds, machine.ticks_used, machine.registers[2]

    return once


def wasmtime_runner(workload: Workload, n: int, fuel: bool) -> Timed:
    """One run of the hand-written WAT: new store and instance, then the call (all timed)."""
    config = wasmtime.Config()
    config.consume_fuel = fuel
    engine = wasmtime.Engine(config)
    module = wasmtime.Module.from_file(engine, str(WAT / f"{workload.name}.wat"))

    def once() -> tuple[float, int, int]:
        started = time.perf_counter()
        store = wasmtime.Store(engine)
        if fuel:
            store.set_fuel(BIG_BUDGET)
        instance = wasmtime.Instance(store, module, [])
        run = instance.exports(store)["run"]
        assert isinstance(run, wasmtime.Func)
        result = int(run(store, n)) % (1 << 64)
        return time.perf_counter() - started, 0, result

    return once


def interleaved(runners: dict[str, Timed], repeats: int) -> dict[str, dict[str, Any]]:
    """Run the contenders in turn ``repeats`` times (so they share the machine's load); medians."""
    samples: dict[str, list[tuple[float, int, int]]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, runner in runners.items():
            samples[name].append(runner())
    summary = {}
    for name, runs in samples.items():
        seconds = statistics.median(run[0] for run in runs)
        _, ticks, result = runs[-1]
        summary[name] = {
            "seconds": seconds,
            "best_seconds": min(run[0] for run in runs),
            "ticks": ticks,
        }
        summary[name]["result"] = result
        if ticks:
            summary[name]["ticks_per_second"] = ticks / seconds
    return summary


def run_pywasm(workload: Workload, n: int) -> dict[str, Any] | None:
    try:
        import pywasm
    except ImportError:
        return None
    binary = wasmtime.wat2wasm((WAT / f"{workload.name}.wat").read_text())
    runtime = pywasm.core.Runtime()
    with tempfile.NamedTemporaryFile(suffix=".wasm") as file:
        file.write(binary)
        file.flush()
        module = runtime.instance_from_file(file.name)
    started = time.perf_counter()
    result = runtime.invocate(module, "run", [n])[0]
    return {"n": n, "seconds": time.perf_counter() - started, "result": int(result) % (1 << 64)}


def iterations(workload: Workload, n: int) -> float:
    """Work units in a run with parameter ``n`` (to compare runs of different N)."""
    if workload.name == "sieve":
        return n * 2.5  # ~ n log log n marks plus the tally: a unit per flag
    if workload.name == "calls":
        golden = (1 + 5**0.5) / 2
        return golden**n
    return float(n)


def throughput(tier: FastTier, workload: Workload) -> dict[str, Any]:
    n = workload.fast_n
    races = interleaved(
        {
            "fast": forge_runner(tier, workload, n, "fast"),
            "wasmtime_fuel": wasmtime_runner(workload, n, fuel=True),
            "wasmtime_no_fuel": wasmtime_runner(workload, n, fuel=False),
        },
        repeats=9,
    )
    fast, fuel, no_fuel = races["fast"], races["wasmtime_fuel"], races["wasmtime_no_fuel"]
    reference = interleaved(
        {"reference": forge_runner(tier, workload, workload.reference_n, "reference")}, 3
    )
    reference = reference["reference"]
    small = run_pywasm(workload, workload.pywasm_n)
    assert fuel["result"] == fast["result"], (workload.name, fuel["result"], fast["result"])
    per_unit_fast = fast["seconds"] / iterations(workload, n)
    row: dict[str, Any] = {
        "n": n,
        "reference_n": workload.reference_n,
        "fast": fast,
        "reference": reference,
        "wasmtime_fuel": fuel,
        "wasmtime_no_fuel": no_fuel,
        "pywasm": small,
        "fast_over_reference_per_tick": fast["ticks_per_second"] / reference["ticks_per_second"],
        "wasmtime_fuel_time_over_fast_time": fuel["seconds"] / fast["seconds"],
        "wasmtime_no_fuel_time_over_fast_time": no_fuel["seconds"] / fast["seconds"],
    }
    if small is not None:
        row["pywasm_time_over_fast_time_per_iteration"] = (
            small["seconds"] / iterations(workload, small["n"]) / per_unit_fast
        )
    return row


# ------------------------------------------------------------------ start-up


def thousand_instructions(seed: int) -> ForgeProgram:
    """A straight-through program of 1,000 instructions (ALU, memory, forward branches), then HALT."""
    rng = random.Random(seed)
    code = [
        Instruction(Opcode.LI, rd=1, imm=rng.randrange(1 << 64)),
        Instruction(Opcode.LI, rd=9, imm=256),
    ]
    while len(code) < 999:
        kind = rng.random()
        registers = {
            "rd": rng.randrange(1, 9),
            "rs1": rng.randrange(1, 9),
            "rs2": rng.randrange(1, 9),
        }
        if kind < 0.6:
            op = rng.choice([Opcode.ADD, Opcode.SUB, Opcode.XOR, Opcode.MUL, Opcode.SHL, Opcode.OR])
            code.append(Instruction(op, **registers))
        elif kind < 0.75:
            code.append(
                Instruction(Opcode.STOREW, rs1=registers["rs1"], rs2=9, imm=8 * rng.randrange(64))
            )
        elif kind < 0.9:
            code.append(
                Instruction(Opcode.LOADW, rd=registers["rd"], rs1=9, imm=8 * rng.randrange(64))
            )
        else:
            target = min(len(code) + rng.randrange(2, 6), 999)
            code.append(
                Instruction(Opcode.JLT, rs1=registers["rs1"], rs2=registers["rs2"], imm=target)
            )
    code.append(Instruction(Opcode.HALT))
    return ForgeProgram(tuple(code))


def startup() -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as data_dir:
        first_results, fast_first = [], []
        for seed in range(7):
            program = thousand_instructions(seed)
            with FastTier(data_dir) as tier:  # a new process' view: nothing compiled
                started = time.perf_counter()
                machine = Machine.load(program)
                tier.run(machine, tier="auto")
                first_results.append(time.perf_counter() - started)
                assert machine.state is MachineState.HALTED
            with FastTier(Path(data_dir) / "cold") as tier:
                started = time.perf_counter()
                machine = Machine.load(program)
                tier.run(machine, tier="fast")
                fast_first.append(time.perf_counter() - started)
        results["cold_1000_auto_first_result_seconds"] = statistics.median(first_results)
        results["cold_1000_fast_first_result_seconds"] = statistics.median(fast_first)
        results["cold_1000_ticks"] = machine.ticks_used
        program = thousand_instructions(99)
        plan_time, _ = median_time(lambda: plan_program(program.code), 3)
        wat_time, wat = median_time(lambda: generate_wat(plan_program(program.code)), 3)
        with FastTier(data_dir) as tier:
            compile_time, _ = median_time(lambda: wasmtime.Module(tier.engine, wat), 3)
            tier.compile(program)  # fills the disk cache
        with FastTier(data_dir) as tier:
            cached_time, _ = median_time(lambda: tier.compile(program), 1)
        results["compile_1000"] = {
            "plan_seconds": plan_time,
            "codegen_seconds": wat_time,
            "wasmtime_seconds": compile_time,
            "disk_cache_hit_seconds": cached_time,
        }
    return results


def compile_latency(workload: Workload) -> float:
    with FastTier(disk_cache=False) as tier:
        seconds, _ = median_time(
            lambda: FastTier._build(tier, workload.program(workload.fast_n)), 3
        )
    return seconds


# ------------------------------------------------------- compiled Starlark


def compiled_program_run(tier: FastTier, program: ForgeProgram) -> tuple[float, int]:
    """Seconds and ticks of one fast run, the machine bound to its memory beforehand."""
    machine = Machine.load(program, tick_budget=BIG_BUDGET, memory_quota=PROGRAMS_QUOTA)
    tier.run(machine, tier="fast", max_ticks=1)  # binds the 256 MiB memory: not timed
    started = time.perf_counter()
    tier.run(machine, tier="fast")
    seconds = time.perf_counter() - started
    assert machine.state is MachineState.HALTED, machine.fault
    return seconds, machine.ticks_used


def compiled_programs() -> dict[str, dict[str, Any]]:
    """For each program of benchmarks/programs/: WAT size, wasmtime compile time, ticks/s."""
    results: dict[str, dict[str, Any]] = {}
    with FastTier(disk_cache=False) as tier:
        for path in sorted(PROGRAMS.glob("*.frgp")):
            program = decode_program(path.read_bytes())
            wat = generate_wat(plan_program(program.code, program.entry))
            compile_seconds, _ = median_time(partial(wasmtime.Module, tier.engine, wat), 3)
            tier.compile(program)
            runs = [compiled_program_run(tier, program) for _ in range(5)]
            seconds = statistics.median(run[0] for run in runs)
            ticks = runs[-1][1]
            results[path.stem] = {
                "instructions": len(program.code),
                "wat_bytes_per_instruction": len(wat) / len(program.code),
                "wasmtime_compile_seconds": compile_seconds,
                "run_seconds": seconds,
                "ticks": ticks,
                "ticks_per_second": ticks / seconds,
            }
    return results


# ------------------------------------------------------------ sandbox costs


def sandbox_costs() -> dict[str, Any]:
    tiny = ForgeProgram((Instruction(Opcode.HALT),))
    creation, _ = median_time(lambda: Machine.load(tiny, memory_quota=65_536), 2001)
    count = 10_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    machines = [Machine.load(tiny, memory_quota=65_536) for _ in range(count)]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_sandbox = (after - before) / count
    register_file = sys.getsizeof(machines[0].registers)
    return {
        "create_64k_seconds": creation,
        "bytes_per_idle_sandbox": per_sandbox,
        "overhead_beyond_quota_and_registers": per_sandbox - 65_536 - register_file,
        "register_file_bytes": register_file,
    }


SENDER = """
    LI r1, 8
loop:
    ADD r3, r3, r1
    STOREW r3, r0, 0
    SEND 7, r0, r1
    TICK
    JMP loop
"""
RECEIVER = """
    LI r1, 8
loop:
    RECV 7, r3, r0, r1
    LOADW r4, r0, 0
    ADD r5, r5, r4
    JMP loop
"""


def message_latency(tier: FastTier, tier_name: str, pairs: int = 3000) -> float:
    """Seconds per SEND on one sandbox → engine → RECV on another, both on ``tier_name``."""
    sender_program, receiver_program = assemble(SENDER), assemble(RECEIVER)
    if tier_name != "reference":
        tier.compile(sender_program)
        tier.compile(receiver_program)
    sender = Machine.load(sender_program, grants=[7], tick_budget=BIG_BUDGET)
    receiver = Machine.load(receiver_program, grants=[7], tick_budget=BIG_BUDGET)
    started = time.perf_counter()
    for _ in range(pairs):
        tier.run(sender, tier=tier_name, yield_on_tick=True)  # type: ignore[arg-type]
        for channel, data in sender.take_outbound():
            receiver.deliver(channel, data)
        tier.run(receiver, tier=tier_name)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    assert receiver.state is MachineState.BLOCKED
    assert receiver.registers[5] == 8 * pairs * (pairs + 1) // 2
    return elapsed / pairs


# ------------------------------------------------------------------- slicing


def sliced(tier: FastTier, tier_name: str, slice_ticks: int, total_ticks: int) -> float:
    """Ticks per second of the count loop run in slices of ``slice_ticks`` (engine style)."""
    program = WORKLOADS[0].program(10**15)
    if tier_name == "fast":
        tier.compile(program)
    machine = Machine.load(program, tick_budget=BIG_BUDGET)
    started = time.perf_counter()
    while machine.ticks_used < total_ticks:
        tier.run(machine, tier=tier_name, max_ticks=slice_ticks, yield_on_tick=True)  # type: ignore[arg-type]
    return machine.ticks_used / (time.perf_counter() - started)


def slicing() -> dict[str, Any]:
    """Per-slice cost: throughput at engine-like quanta, and an empty slice at two quotas."""
    results: dict[str, Any] = {}
    with FastTier(disk_cache=False) as tier:
        for slice_ticks in (10_000, 100_000, 1_000_000):
            results[f"fast_ticks_per_second_slices_{slice_ticks}"] = sliced(
                tier, "fast", slice_ticks, 200 * slice_ticks
            )
        results["reference_ticks_per_second_slices_10000"] = sliced(
            tier, "reference", 10_000, 300_000
        )
        halt = ForgeProgram((Instruction(Opcode.NOP), Instruction(Opcode.HALT)))
        tier.compile(halt)
        for quota in (65_536, 16 << 20):
            machines = [Machine.load(halt, memory_quota=quota) for _ in range(200)]
            started = time.perf_counter()
            for machine in machines:
                tier.run(machine, tier="fast")
            results[f"empty_fast_slice_seconds_quota_{quota}"] = (
                time.perf_counter() - started
            ) / len(machines)
        # A machine that stays bound between slices: the per-call cost of re-entry alone.
        spin = ForgeProgram((Instruction(Opcode.TICK), Instruction(Opcode.JMP, imm=0)))
        tier.compile(spin)
        for quota in (65_536, 16 << 20):
            machine = Machine.load(spin, memory_quota=quota, tick_budget=BIG_BUDGET)
            tier.run(machine, tier="fast", yield_on_tick=True)
            slices = 2000
            started = time.perf_counter()
            for _ in range(slices):
                tier.run(machine, tier="fast", yield_on_tick=True)
            results[f"bound_fast_slice_seconds_quota_{quota}"] = (
                time.perf_counter() - started
            ) / slices
    with FastTier(
        disk_cache=False
    ) as tier:  # auto from cold: reference, background compile, switch
        program = WORKLOADS[0].program(100_000_000)
        machine = Machine.load(program, tick_budget=BIG_BUDGET)
        started = time.perf_counter()
        tier.run(machine, tier="auto")
        results["auto_cold_count_ticks_per_second"] = machine.ticks_used / (
            time.perf_counter() - started
        )
    return results


# --------------------------------------------------------------------- report


def plot(rows: dict[str, dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = list(rows)
    series = {
        "fast tier": [rows[n]["fast"]["ticks_per_second"] for n in names],
        "wasmtime + fuel (same work)": [
            rows[n]["fast"]["ticks"] / rows[n]["wasmtime_fuel"]["seconds"] for n in names
        ],
        "reference tier": [rows[n]["reference"]["ticks_per_second"] for n in names],
    }
    figure, axes = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(series)
    for index, (label, values) in enumerate(series.items()):
        axes.bar([i + index * width for i in range(len(names))], values, width, label=label)
    axes.set_yscale("log")
    axes.axhline(1e9, color="grey", linestyle="--", linewidth=1, label="1 G ticks/s target")
    axes.set_xticks([i + width for i in range(len(names))], names)
    axes.set_ylabel("Forge ticks per second (equivalent)")
    axes.set_title("kforge fast tier")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    RESULTS.mkdir(exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    with FastTier(disk_cache=False) as tier:
        for workload in WORKLOADS:
            rows[workload.name] = throughput(tier, workload)
            rows[workload.name]["compile_seconds"] = compile_latency(workload)
        latency = {name: message_latency(tier, name) for name in ("fast", "reference")}
    start = startup()
    costs = sandbox_costs()
    slices = slicing()
    programs = compiled_programs()

    print(
        f"{'workload':<8} {'fast tier':>13} {'reference':>11} {'x ref':>7} {'fuel/fast':>10} "
        f"{'nofuel/fast':>12} {'pywasm/fast':>12} {'compile':>9}"
    )
    for name, row in rows.items():
        pywasm_ratio = row.get("pywasm_time_over_fast_time_per_iteration")
        print(
            f"{name:<8} {row['fast']['ticks_per_second'] / 1e9:>8.2f} Gt/s "
            f"{row['reference']['ticks_per_second'] / 1e6:>6.2f} Mt/s "
            f"{row['fast_over_reference_per_tick']:>7.0f} "
            f"{row['wasmtime_fuel_time_over_fast_time']:>10.2f} "
            f"{row['wasmtime_no_fuel_time_over_fast_time']:>12.2f} "
            f"{pywasm_ratio if pywasm_ratio is None else f'{pywasm_ratio:.0f}':>12} "
            f"{row['compile_seconds'] * 1000:>6.1f} ms"
        )
    compile_1000 = start["compile_1000"]
    print(
        f"cold 1,000-instruction program, first result: auto {start['cold_1000_auto_first_result_seconds'] * 1000:.2f} ms, "
        f"fast (compile first) {start['cold_1000_fast_first_result_seconds'] * 1000:.1f} ms"
    )
    print(
        f"compile 1,000 instructions: plan {compile_1000['plan_seconds'] * 1000:.1f} ms, "
        f"codegen {compile_1000['codegen_seconds'] * 1000:.1f} ms, "
        f"wasmtime {compile_1000['wasmtime_seconds'] * 1000:.1f} ms, "
        f"disk cache hit {compile_1000['disk_cache_hit_seconds'] * 1000:.2f} ms"
    )
    print(
        f"sandbox creation (64 KiB): {costs['create_64k_seconds'] * 1e6:.1f} µs; idle sandbox "
        f"{costs['bytes_per_idle_sandbox']:.0f} B (overhead beyond quota and registers "
        f"{costs['overhead_beyond_quota_and_registers']:.0f} B)"
    )
    print(
        f"SEND→RECV pair: fast {latency['fast'] * 1e6:.1f} µs, reference {latency['reference'] * 1e6:.1f} µs"
    )
    rates = ", ".join(
        f"{ticks:,} → {slices[f'fast_ticks_per_second_slices_{ticks}'] / 1e9:.2f} Gt/s"
        for ticks in (10_000, 100_000, 1_000_000)
    )
    print(
        f"count in slices of max_ticks: {rates} "
        f"(reference {slices['reference_ticks_per_second_slices_10000'] / 1e6:.2f} Mt/s)"
    )
    print(
        f"fast slice of a bound machine (TICK loop): "
        f"{slices['bound_fast_slice_seconds_quota_65536'] * 1e6:.1f} µs at 64 KiB, "
        f"{slices[f'bound_fast_slice_seconds_quota_{16 << 20}'] * 1e6:.1f} µs at 16 MiB"
    )
    print(
        f"empty fast slice (new machine): {slices['empty_fast_slice_seconds_quota_65536'] * 1e6:.1f} µs at 64 KiB, "
        f"{slices[f'empty_fast_slice_seconds_quota_{16 << 20}'] * 1e6:.0f} µs at 16 MiB; "
        f"auto tier from cold on count (300 M ticks): "
        f"{slices['auto_cold_count_ticks_per_second'] / 1e9:.2f} Gt/s"
    )

    for name, row in programs.items():
        print(
            f"compiled Starlark {name} ({row['instructions']:,} instructions): "
            f"{row['wat_bytes_per_instruction']:.0f} B of WAT per instruction, "
            f"wasmtime compile {row['wasmtime_compile_seconds'] * 1000:.0f} ms, "
            f"{row['ticks']:,} ticks in {row['run_seconds'] * 1000:.1f} ms "
            f"({row['ticks_per_second'] / 1e9:.2f} Gt/s)"
        )

    report = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "workloads": rows,
        "startup": start,
        "sandbox": costs,
        "send_recv_pair_seconds": latency,
        "slicing": slices,
        "starlark_programs": programs,
    }
    (RESULTS / "fast.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    plot(rows, RESULTS / "fast.png")


if __name__ == "__main__":
    main()
