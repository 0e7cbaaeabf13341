"""Calls and returns in compiled code agree with the reference interpreter.

A procedure is a region (a wasm function); a CALL into another region is a wasm
call and the RET popping its address a wasm return; small leaf procedures are
copied into their callers; past ``CALL_DEPTH_LIMIT`` nested wasm calls a CALL
becomes a tail call.  Programs built of procedures (recursion under a depth
counter, saved registers, indirect calls, computed returns, faults in callees)
and compiled Starlark programs run on both tiers: whole runs, every budget cut
of small ones, slices.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.asm import assemble
from kforge.fast import FastTier, plan_program
from kforge.fast.blocks import CALL_DEPTH_LIMIT
from kforge.fast.calls import MAX_INLINE_INSTRUCTIONS, inline_bodies
from kforge.isa import Instruction, Opcode
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram, decode_program
from test_fast_support import (
    assert_same,
    assert_slices_agree,
    assert_whole_runs_agree,
    fast_tiers,
    load_options,
    procedure_programs,
)

STARLARK = Path(__file__).parent / "data" / "starlark"
STARLARK_QUOTA = 262_144
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REGION_SIZES = (1, 3, 128)


@pytest.fixture(scope="module")
def tiers() -> Iterator[dict[int, FastTier]]:
    """Fast tiers cutting procedures into regions of at most 1, 3 and 128 blocks."""
    with fast_tiers(REGION_SIZES) as made:
        yield made


def _run_both(fast_tier: FastTier, program: ForgeProgram, **options: Any) -> None:
    reference, fast = Machine.load(program, **options), Machine.load(program, **options)
    reference.run()
    fast_tier.run(fast, tier="fast")
    assert_same(reference, fast)


# ------------------------------------------------------------------ the plan


def test_each_procedure_is_a_region_and_a_long_one_is_cut() -> None:
    long_body = [
        insn
        for k in range(20)
        for insn in (
            Instruction(Opcode.ADD, rd=1, rs1=1, rs2=2),
            Instruction(Opcode.JZ, rs1=9, imm=10 + 2 * k + 2),
        )
    ]
    code = (
        Instruction(Opcode.CALL, imm=4),
        Instruction(Opcode.CALL, imm=10),
        Instruction(Opcode.HALT),
        Instruction(Opcode.NOP),
        *(Instruction(Opcode.ADD, rd=1, rs1=1, rs2=1) for _ in range(5)),  # 4..8
        Instruction(Opcode.RET),  # 9
        *long_body,  # 10..49
        Instruction(Opcode.RET),  # 50
    )
    plan = plan_program(code, max_region_blocks=8)
    starts = [region.start for region in plan.regions]
    assert 4 in starts and 10 in starts
    for region in plan.regions:
        assert region.end_block - region.first_block <= 8
        assert not region.start < 4 < region.end and not region.start < 10 < region.end
    assert sum(1 for region in plan.regions if region.start >= 10) >= 3


def test_small_leaf_procedures_are_copied_and_loops_calls_and_long_ones_are_not() -> None:
    nops = "NOP\n" * MAX_INLINE_INSTRUCTIONS
    program = assemble(
        f"""
            LI r2, 6
            LI r3, 1
            CALL leaf
            CALL looping
            CALL caller
            CALL long
            HALT
        leaf:
            AND r1, r1, r2
            JZ r1, out
            LI r1, 3
        out:
            RET
        looping:
            SUB r2, r2, r3
            JNZ r2, looping
            RET
        caller:
            CALL leaf
            RET
        long:
            {nops}
            RET
        """
    )
    plan = plan_program(program.code)
    copied = inline_bodies(plan)
    leaf = 7
    assert list(copied) == [leaf]
    assert [block.start for block in copied[leaf]] == [leaf, leaf + 2, leaf + 3]
    with FastTier(disk_cache=False) as fast_tier:
        _run_both(fast_tier, program)


# --------------------------------------------------------------- agreement


@SETTINGS
@given(procedure_programs(), load_options(), st.integers(0, 3000), st.sampled_from(REGION_SIZES))
def test_programs_of_procedures_agree(
    tiers: dict[int, FastTier],
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    regions: int,
) -> None:
    assert_whole_runs_agree(tiers[regions], program, options, budget)


@settings(SETTINGS, max_examples=40)
@given(procedure_programs(), st.sampled_from(REGION_SIZES))
def test_every_tick_budget_cut_of_procedures_agrees(
    tiers: dict[int, FastTier], program: ForgeProgram, regions: int
) -> None:
    probe = Machine.load(program, tick_budget=300, memory_quota=4096)
    probe.run()
    for budget in range(probe.ticks_used + 2):
        _run_both(tiers[regions], program, tick_budget=budget, memory_quota=4096)


@settings(SETTINGS, max_examples=60)
@given(
    procedure_programs(),
    st.one_of(st.none(), st.integers(1, 13)),
    st.booleans(),
    st.sampled_from(REGION_SIZES),
)
def test_slices_of_procedures_agree(
    tiers: dict[int, FastTier],
    program: ForgeProgram,
    max_ticks: int | None,
    yield_on_tick: bool,
    regions: int,
) -> None:
    options: dict[str, Any] = {"tick_budget": 5000, "memory_quota": 4096}
    reference, fast = Machine.load(program, **options), Machine.load(program, **options)
    assert_slices_agree(
        tiers[regions],
        reference,
        fast,
        max_ticks=max_ticks,
        yield_on_tick=yield_on_tick,
        deliveries=[],
    )


RECURSION = """
    ; even and odd call each other ``depth`` times, each level saving a register and
    ; adding to r2; procedures in two regions, so every call is a wasm call until the
    ; nesting limit, then a tail call
        LI r1, {depth}
        LI r3, 1
        CALL even
        HALT
    even:
        JZ r1, done
        PUSH r1
        SUB r1, r1, r3
        CALL odd
        POP r1
        ADD r2, r2, r1
    done:
        RET
    odd:
        JZ r1, finished
        PUSH r1
        SUB r1, r1, r3
        CALL even
        POP r1
        ADD r2, r2, r3
        TICK
    finished:
        RET
"""


@pytest.mark.parametrize(
    "depth", [CALL_DEPTH_LIMIT - 1, CALL_DEPTH_LIMIT + 1, 20 * CALL_DEPTH_LIMIT]
)
def test_recursion_deeper_than_the_wasm_call_limit_agrees(
    tiers: dict[int, FastTier], depth: int
) -> None:
    program = assemble(RECURSION.format(depth=depth))
    for fast_tier in tiers.values():
        _run_both(fast_tier, program, memory_quota=65_536)
        _run_both(fast_tier, program, memory_quota=65_536, tick_budget=11 * depth)  # runs out
        _run_both(fast_tier, program, memory_quota=1024)  # overflows the stack


def test_deep_recursion_never_exhausts_the_wasm_stack(tiers: dict[int, FastTier]) -> None:
    """Far deeper than any wasm stack could nest (the reference would take seconds here)."""
    depth = 200_000
    program = assemble(RECURSION.format(depth=depth))
    machine = Machine.load(program, memory_quota=8 << 20, tick_budget=10**8)
    tiers[128].run(machine, tier="fast")
    assert machine.state is MachineState.HALTED
    expected = sum(k if (depth - k) % 2 == 0 else 1 for k in range(depth, 0, -1))
    assert machine.registers[2] == expected


def test_slices_of_deep_recursion_agree(tiers: dict[int, FastTier]) -> None:
    program = assemble(RECURSION.format(depth=3 * CALL_DEPTH_LIMIT))
    for max_ticks, yield_on_tick in ((None, True), (97, False), (1009, True)):
        reference = Machine.load(program, memory_quota=65_536)
        fast = Machine.load(program, memory_quota=65_536)
        assert_slices_agree(
            tiers[128],
            reference,
            fast,
            max_ticks=max_ticks,
            yield_on_tick=yield_on_tick,
            deliveries=[],
            max_slices=1000,
        )
        assert fast.state is MachineState.HALTED


def test_a_program_longer_than_a_wasm_branch_table_runs(tiers: dict[int, FastTier]) -> None:
    """Over 65,000 instructions (wasmtime caps a br_table's targets): returns and calls
    that go through the pc are routed by a table in the state memory."""
    far = ["far:", "LI r1, 42", "RET"]
    filler = ["NOP"] * 66_000
    source = "\n".join(["CALL far", "CALL far", "ADD r2, r1, r1", "HALT", *filler, *far])
    program = assemble(source + "\n")
    for fast_tier in (tiers[1], tiers[128]):
        _run_both(fast_tier, program, memory_quota=65_536)
    machine = Machine.load(program, memory_quota=65_536)
    tiers[128].run(machine, tier="fast")
    assert (machine.state, machine.registers[2]) == (MachineState.HALTED, 84)


def test_returns_elsewhere_than_the_call_agree(tiers: dict[int, FastTier]) -> None:
    """Callees returning to their caller's caller (copied into it or called), an indirect
    call (return address and target pushed, then RET), a copied leaf sent elsewhere."""
    program = assemble(
        """
            LI r3, 1
            CALL middle
            CALL middle2
            CALL indirect
            LI r5, elsewhere
            PUSH r5
            CALL leaf
            HALT            ; never reached: leaf returns to ``elsewhere``
        elsewhere:
            ADD r2, r2, r3
            HALT
        middle:             ; calls skip, which returns straight to middle's caller
            CALL skip
            HALT
        skip:               ; a leaf: copied into middle
            POP r4
            RET
        middle2:
            CALL skip2
            HALT
        skip2:              ; loops, so it is called, not copied
            POP r4
            LI r8, 3
        again:
            SUB r8, r8, r3
            JNZ r8, again
            RET
        indirect:
            LI r5, back
            PUSH r5
            LI r4, target
            PUSH r4
            RET
        back:
            RET
        target:
            ADD r2, r2, r3
            RET
        leaf:               ; copied into main: drops its return address
            POP r7
            RET
        """
    )
    copied = inline_bodies(plan_program(program.code))
    first = sorted(program.code[target].opcode for target in copied)
    assert first == sorted([Opcode.POP, Opcode.POP, Opcode.LI])  # skip, leaf, indirect: not skip2
    for fast_tier in tiers.values():
        _run_both(fast_tier, program)
        for budget in range(70):
            _run_both(fast_tier, program, tick_budget=budget)


@pytest.mark.parametrize("name", ["hello", "calls"])
def test_compiled_starlark_programs_agree(tiers: dict[int, FastTier], name: str) -> None:
    program = decode_program((STARLARK / f"{name}.frgp").read_bytes())
    options: dict[str, Any] = {"memory_quota": STARLARK_QUOTA, "tick_budget": 10**9}
    fast_tier = tiers[128]
    _run_both(fast_tier, program, **options)
    probe = Machine.load(program, **options)
    probe.run()
    assert probe.state is MachineState.HALTED
    _run_both(fast_tier, program, **{**options, "tick_budget": probe.ticks_used * 2 // 3})
    reference, fast = Machine.load(program, **options), Machine.load(program, **options)
    assert_slices_agree(
        fast_tier, reference, fast, max_ticks=7919, yield_on_tick=True, deliveries=[]
    )
