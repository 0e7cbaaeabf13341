"""Choosing the tier: reference, fast, auto; background compiles; the single entry point."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import wasmtime

import kforge.fast
from kforge.engine import CreateSandbox, Engine, SandboxState
from kforge.engine.offload import WorkLimits, WorkTimedOut
from kforge.fast import FastTier
from kforge.fast import tiering as tiering_module
from kforge.fast.compiler import MAX_COMPILED_CODE
from kforge.isa import Instruction, Opcode
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from kforge.tiers import TierRunner
from test_engine_support import OWNER, open_engine, run
from test_fast_support import assert_same


def count_program(iterations: int) -> ForgeProgram:
    """acc += i; i += 1 while i < iterations: 3 ticks an iteration."""
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


def test_reference_tier_is_the_interpreter(tmp_path: Path) -> None:
    with FastTier(tmp_path) as tier:
        machine = Machine.load(count_program(10))
        assert tier.run(machine, tier="reference") is MachineState.HALTED
        assert tier.compiled(machine.program) is None
    assert not (tmp_path / "fast-modules").exists()


def test_fast_tier_compiles_first(tmp_path: Path) -> None:
    with FastTier(tmp_path) as tier:
        machine = Machine.load(count_program(10))
        tier.run(machine, tier="fast")
        assert tier.compiled(machine.program) is not None
        assert machine.registers[1] == 45


def test_a_cold_short_run_never_compiles(tmp_path: Path) -> None:
    with FastTier(tmp_path, warmup_ticks=10_000) as tier:
        machine = Machine.load(count_program(100))
        assert tier.run(machine, tier="auto") is MachineState.HALTED
        assert tier.compiled(machine.program) is None
        assert not tier._pending
    assert not (tmp_path / "fast-modules").exists()


def test_a_hot_program_moves_to_compiled_code_mid_run() -> None:
    iterations = 1_000_000
    reference = Machine.load(count_program(iterations), tick_budget=10**10)
    reference.registers[5] = 1  # unused by the program: must survive the switch untouched
    fast = reference.copy()
    with FastTier(disk_cache=False, warmup_ticks=1000, chunk_ticks=1000) as tier:
        started = time.perf_counter()
        tier.run(fast, tier="auto")
        elapsed = time.perf_counter() - started
        assert tier.compiled(fast.program) is not None
    reference.run()
    assert_same(reference, fast)
    assert elapsed < 0.8, "3 M ticks should mostly run compiled"  # the reference needs ~1.5 s


def test_auto_slices_switch_when_the_compile_lands() -> None:
    program = count_program(200_000)
    reference = Machine.load(program, tick_budget=10**9)
    fast = Machine.load(program, tick_budget=10**9)
    with FastTier(disk_cache=False, warmup_ticks=0, chunk_ticks=100) as tier:
        while reference.state is not MachineState.HALTED:
            reference.run(777)
            tier.run(fast, tier="auto", max_ticks=777)
            assert_same(reference, fast)


def test_a_failing_compile_falls_back_to_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> wasmtime.Module:
        raise wasmtime.WasmtimeError("compiler unavailable")

    monkeypatch.setattr(tiering_module.wasmtime, "Module", broken)
    program = count_program(50_000)
    reference = Machine.load(program)
    fast = Machine.load(program)
    with FastTier(disk_cache=False, warmup_ticks=0, chunk_ticks=500) as tier:
        tier.run(fast, tier="auto")
        with pytest.raises(wasmtime.WasmtimeError):
            tier.run(Machine.load(program), tier="fast")
    reference.run()
    assert_same(reference, fast)


def test_an_unknown_tier_is_refused() -> None:
    with FastTier(disk_cache=False) as tier, pytest.raises(ValueError, match="unknown tier"):
        tier.run(Machine.load(count_program(1)), tier="turbo")  # type: ignore[arg-type]


def test_a_tier_runner_runs_every_tier_on_a_fast_tier_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))
    results = []
    for tier in ("reference", "fast", "auto"):
        machine = Machine.load(count_program(1000))
        with TierRunner(tier) as runner:
            assert runner.run(machine) is MachineState.HALTED
        results.append(machine.snapshot())
    assert results[0] == results[1] == results[2]
    with TierRunner("fast") as one, TierRunner("fast") as other:
        assert one.fast_tier is not None and one.fast_tier is one.fast_tier
        assert one.fast_tier is not other.fast_tier  # nothing process-wide
    assert TierRunner("reference").fast_tier is None


def test_a_small_machine_that_stops_gets_a_buffer_of_its_own_again() -> None:
    machine = Machine.load(count_program(10))
    with FastTier(disk_cache=False) as tier:
        tier.run(machine, tier="fast")
    assert machine.state is MachineState.HALTED
    assert isinstance(machine.memory, bytearray) and machine.tier_state is None


def test_machines_of_one_program_run_in_parallel_threads() -> None:
    program = count_program(200_000)
    machines = [Machine.load(program, tick_budget=10**9) for _ in range(8)]
    with FastTier(disk_cache=False) as tier:
        tier.compile(program)
        threads = [
            threading.Thread(target=tier.run, args=(m,), kwargs={"tier": "fast"}) for m in machines
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    expected = Machine.load(program, tick_budget=10**9)
    expected.run()
    for machine in machines:
        assert_same(expected, machine)


def test_compiled_programs_kept_are_bounded_by_count_and_by_code() -> None:
    """The least recently used go first when there are more programs, or more code
    together, than allowed; the newest is kept whatever its size."""
    programs = [count_program(n) for n in range(10, 16)]  # 6 instructions each
    with FastTier(disk_cache=False, max_programs=4, max_code=15) as tier:
        for program in programs[:3]:
            tier.compile(program)
        # 18 instructions together: the oldest went
        assert [tier.compiled(p) is not None for p in programs[:3]] == [False, True, True]
        tier.compile(programs[1])  # used again: now the newest
        tier.compile(programs[3])
        assert [tier.compiled(p) is not None for p in programs[:4]] == [False, True, False, True]
    with FastTier(disk_cache=False, max_programs=2, max_code=1) as tier:
        tier.compile(programs[4])
        assert tier.compiled(programs[4]) is not None  # over the code bound alone: kept
        tier.compile(programs[5])
        assert tier.compiled(programs[4]) is None
        assert tier.compiled(programs[5]) is not None
    with FastTier(disk_cache=False, max_programs=2) as tier:
        for program in programs[:3]:
            tier.compile(program)
        assert [tier.compiled(p) is not None for p in programs[:3]] == [False, True, True]


def test_close_is_idempotent() -> None:
    tier = FastTier(disk_cache=False, warmup_ticks=0, chunk_ticks=10)
    tier.run(Machine.load(count_program(1000)), tier="auto")
    tier.close()
    tier.close()


def test_same_run_twice_gives_one_result() -> None:
    """Determinism: whatever the timing of the background compile, one outcome."""
    program = count_program(20_000)
    outcomes = set()
    for _ in range(5):
        machine = Machine.load(program, tick_budget=45_000)
        with FastTier(disk_cache=False, warmup_ticks=0, chunk_ticks=64) as tier:
            while machine.state in (MachineState.READY, MachineState.RUNNING):
                tier.run(machine, tier="auto", max_ticks=999, yield_on_tick=True)
        outcomes.add(machine.snapshot())
    assert len(outcomes) == 1


def test_compiled_code_of_another_program_is_refused() -> None:
    with FastTier(disk_cache=False) as tier:
        compiled = tier.compile(count_program(10))
        with pytest.raises(ValueError, match="not the machine's program"):
            kforge.fast.execute(Machine.load(count_program(11)), compiled)
        twin = Machine.load(ForgeProgram(count_program(10).code))  # equal, not identical
        assert kforge.fast.execute(twin, compiled) is MachineState.HALTED


def _longer_than_compiled(extra: int) -> ForgeProgram:
    """``count_program``'s loop after ``MAX_COMPILED_CODE + extra`` instructions of padding."""
    loop = count_program(1000).code
    padding = MAX_COMPILED_CODE + extra - len(loop)
    moved = [
        replace(insn, imm=insn.imm + padding) if insn.opcode == Opcode.JLT else insn
        for insn in loop
    ]
    return ForgeProgram((Instruction(Opcode.NOP),) * padding + tuple(moved))


def test_a_program_over_the_compile_limit_runs_on_the_reference_in_every_tier() -> None:
    """A compile's time and memory grow with the program (600 MB at 65,000 instructions):
    past ``MAX_COMPILED_CODE`` a program is never compiled, on any tier."""
    program = _longer_than_compiled(1)
    expected = Machine.load(program)
    expected.run()
    with FastTier(disk_cache=False, warmup_ticks=0, chunk_ticks=100) as tier:
        assert not tier.compiles(program)
        for name in ("fast", "auto"):
            machine = Machine.load(program)
            assert tier.run(machine, tier=name) is MachineState.HALTED  # type: ignore[arg-type]
            assert_same(expected, machine)
        assert tier.compiled(program) is None and not tier._pending
        assert tier.compile_before_running(Machine.load(program)) is None
        with pytest.raises(ValueError, match="more than the fast tier compiles"):
            tier.compile(program)


def _recording_compiles(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads that write a module's text in this process, from now on."""
    compiled_on: list[threading.Thread] = []
    real = tiering_module.generate_wat

    def recording(plan: object) -> str:
        compiled_on.append(threading.current_thread())
        return real(plan)  # type: ignore[arg-type]

    monkeypatch.setattr(tiering_module, "generate_wat", recording)
    return compiled_on


async def _run_on(engine: Engine, program: ForgeProgram) -> Machine:
    """A run of ``program`` in ``engine``, as a machine (what ``assert_same`` compares)."""
    code = engine.vault.put_program(program)
    sandbox = await engine.create_sandbox(CreateSandbox(OWNER, code, 65536, 10**6))
    machine = engine.state.sandbox(sandbox).machine  # let go of by the engine once it stops
    assert machine is not None
    await engine.exec_start(sandbox, OWNER)
    assert (await engine.wait(sandbox, timeout=60)).state is SandboxState.HALTED
    return machine


def test_an_engine_on_the_fast_tier_compiles_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program's compile took the event loop for seconds on its first slice.  An engine's
    own fast tier compiles in a worker process; a fast tier given to it, on its thread."""
    compiled_on = _recording_compiles(monkeypatch)
    program = count_program(1000)
    expected = Machine.load(program, tick_budget=10**6)
    expected.run()

    async def body() -> None:
        async with open_engine(tier="fast") as engine:
            assert_same(expected, await _run_on(engine, program))
            fast = engine.runner.fast_tier
            assert fast is not None and fast.compiled(program) is not None
        assert compiled_on == []  # not in this process at all
        loop_thread = threading.current_thread()
        with FastTier(disk_cache=False) as shared:
            async with open_engine(tier=TierRunner("fast", fast_tier=shared)) as engine:
                assert_same(expected, await _run_on(engine, program))
        assert compiled_on and loop_thread not in compiled_on

    run(body)


def test_a_compile_over_its_time_limit_is_stopped_and_the_interpreter_runs_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled_on = _recording_compiles(monkeypatch)
    program = count_program(4321)  # in no module cache
    expected = Machine.load(program, tick_budget=10**6)
    expected.run()

    async def body() -> None:
        async with open_engine(tier="fast", work=WorkLimits(time_limit=0.001)) as engine:
            for _ in range(2):  # and its compile is not tried again
                assert_same(expected, await _run_on(engine, program))
            fast = engine.runner.fast_tier
            assert fast is not None and fast.compiled(program) is None
            assert isinstance(fast._failed[program.program_id], WorkTimedOut)
        assert compiled_on == []

    run(body)
