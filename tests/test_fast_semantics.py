"""Targeted cases for the fast tier, each compared with the reference interpreter.

Hypothesis (test_fast_differential.py) explores; these pin the corners down
one by one: every flag rule on operands chosen to split signed from unsigned,
memory ranges at the quota edge, stack limits, faults in the middle of a block
and the ticks they keep, BUDGET inside a block, channels, and big memories.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kforge.fast import FastTier, execute, is_bound, unbind
from kforge.fast.analysis import HOST_OPCODES
from kforge.fast.blocks import EMITTERS, BlockWriter
from kforge.isa import OPCODES, WORD_MASK, FaultCode, Instruction, Opcode
from kforge.machine import EXECUTE, Machine, MachineState, op_invalid
from kforge.program import ForgeProgram
from test_fast_support import assert_same

I = Instruction  # noqa: E741 - short name for long instruction lists
VALUES = (
    0,
    1,
    2,
    3,
    0x7F,
    1 << 31,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    (1 << 63) + 1,
    WORD_MASK - 1,
    WORD_MASK,
)


@pytest.fixture(scope="module")
def fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False) as tier:
        yield tier


def run_both(
    fast_tier: FastTier,
    code: list[Instruction],
    *,
    setup: Callable[[Machine], None] | None = None,
    **options: Any,
) -> tuple[Machine, Machine]:
    """Load twice, apply ``setup`` to both, run to the end on each tier, compare."""
    program = ForgeProgram(tuple(code))
    compiled = fast_tier.compile(program)
    options.setdefault("tick_budget", 10_000)
    reference, fast = Machine.load(program, **options), Machine.load(program, **options)
    if setup:
        setup(reference)
        setup(fast)
    reference.run()
    execute(fast, compiled)
    assert_same(reference, fast, repr(code))
    return reference, fast


@pytest.mark.parametrize("rd, rs1, rs2", [(3, 1, 2), (1, 1, 2), (2, 1, 2), (1, 1, 1), (3, 1, 1)])
@pytest.mark.parametrize(
    "opcode",
    [
        Opcode.ADD,
        Opcode.SUB,
        Opcode.MUL,
        Opcode.DIV,
        Opcode.MOD,
        Opcode.AND,
        Opcode.OR,
        Opcode.XOR,
        Opcode.SHL,
        Opcode.SHR,
    ],
)
def test_binary_results_and_flags_agree(
    fast_tier: FastTier, opcode: Opcode, rd: int, rs1: int, rs2: int
) -> None:
    """Every operand pair, with the destination aliasing neither, one or both operands."""
    program = ForgeProgram((I(opcode, rd=rd, rs1=rs1, rs2=rs2), I(Opcode.HALT)))
    compiled = fast_tier.compile(program)
    for a in VALUES:
        for b in VALUES:
            reference, fast = Machine.load(program), Machine.load(program)
            for machine in (reference, fast):
                machine.registers[1], machine.registers[2] = a, b
            reference.run()
            execute(fast, compiled)
            assert_same(reference, fast, f"{opcode.name} {a} {b}")


@pytest.mark.parametrize("opcode", [Opcode.NEG, Opcode.NOT])
def test_unary_results_and_flags_agree(fast_tier: FastTier, opcode: Opcode) -> None:
    for a in VALUES:
        run_both(
            fast_tier,
            [I(opcode, rd=3, rs1=1), I(Opcode.HALT)],
            setup=lambda m, a=a: m.registers.__setitem__(1, a),
        )


def test_flags_of_the_last_setter_before_a_fault_survive(fast_tier: FastTier) -> None:
    code = [
        I(Opcode.LI, rd=1, imm=WORD_MASK),
        I(Opcode.LI, rd=2, imm=1),
        I(Opcode.ADD, rd=3, rs1=1, rs2=2),  # zero and carry
        I(Opcode.LOAD, rd=4, rs1=1),  # faults: flags must be those of the ADD
        I(Opcode.SUB, rd=5, rs1=2, rs2=2),
    ]
    reference, _ = run_both(fast_tier, code)
    assert reference.fault is FaultCode.INVALID_ADDRESS and reference.zero and reference.carry


def test_alias_of_destination_and_operand_keeps_flags_exact(fast_tier: FastTier) -> None:
    code = [I(Opcode.LI, rd=1, imm=1 << 63), I(Opcode.ADD, rd=1, rs1=1, rs2=1), I(Opcode.HALT)]
    reference, _ = run_both(fast_tier, code)
    assert reference.overflow and reference.carry and reference.zero


@pytest.mark.parametrize("quota", [24, 100, 4095, 4096, 65537])
@pytest.mark.parametrize("opcode", [Opcode.LOAD, Opcode.LOADW, Opcode.STORE, Opcode.STOREW])
def test_memory_ranges_at_the_quota_edge(fast_tier: FastTier, quota: int, opcode: Opcode) -> None:
    loads = opcode in (Opcode.LOAD, Opcode.LOADW)
    for address in (0, quota - 9, quota - 8, quota - 7, quota - 1, quota, quota + 1, WORD_MASK - 6):
        for imm in (0, 1, 8, WORD_MASK):
            access = I(opcode, rd=2, rs1=1, imm=imm) if loads else I(opcode, rs1=3, rs2=1, imm=imm)
            code = [
                I(Opcode.LI, rd=1, imm=address % (1 << 64)),
                I(Opcode.LI, rd=3, imm=0x1122334455667788),
                access,
                I(Opcode.HALT),
            ]
            run_both(
                fast_tier,
                code,
                memory_quota=quota,
                setup=lambda m: m.memory.__setitem__(slice(0, 8), b"ABCDEFGH"),
            )


def test_push_until_overflow_then_pop_until_underflow(fast_tier: FastTier) -> None:
    pushes = [I(Opcode.LI, rd=1, imm=7), I(Opcode.PUSH, rs1=1), I(Opcode.JMP, imm=1)]
    reference, _ = run_both(fast_tier, pushes, memory_quota=100)
    assert reference.fault is FaultCode.STACK_OVERFLOW
    pops = [I(Opcode.PUSH, rs1=1), I(Opcode.POP, rd=2), I(Opcode.POP, rd=3)]
    reference, _ = run_both(fast_tier, pops, memory_quota=100)
    assert reference.fault is FaultCode.STACK_UNDERFLOW and reference.registers[2] == 0


def test_call_checks_its_target_before_the_stack(fast_tier: FastTier) -> None:
    reference, _ = run_both(fast_tier, [I(Opcode.CALL, imm=0)], memory_quota=64)
    assert reference.fault is FaultCode.STACK_OVERFLOW
    reference, _ = run_both(fast_tier, [I(Opcode.NOP), I(Opcode.CALL, imm=5)], memory_quota=64)
    assert reference.fault is FaultCode.INVALID_ADDRESS and reference.pc == 1


@pytest.mark.parametrize("target", [0, 2, 3, 4, 5, 1 << 32, WORD_MASK])
def test_return_to_a_computed_target(fast_tier: FastTier, target: int) -> None:
    code = [
        I(Opcode.LI, rd=1, imm=target),
        I(Opcode.PUSH, rs1=1),
        I(Opcode.RET),
        I(Opcode.NOP),
        I(Opcode.HALT),
    ]
    run_both(fast_tier, code, tick_budget=50)


def test_return_on_an_empty_stack_underflows(fast_tier: FastTier) -> None:
    reference, _ = run_both(fast_tier, [I(Opcode.RET)])
    assert reference.fault is FaultCode.STACK_UNDERFLOW and reference.ticks_used == 2


def test_fault_inside_a_block_keeps_only_the_ticks_spent(fast_tier: FastTier) -> None:
    code = [
        I(Opcode.LI, rd=1, imm=5),
        I(Opcode.MUL, rd=2, rs1=1, rs2=1),
        I(Opcode.DIV, rd=3, rs1=1, rs2=0),  # faults with its 2 ticks charged
        I(Opcode.MUL, rd=4, rs1=1, rs2=1),
        I(Opcode.HALT),
    ]
    _, fast = run_both(fast_tier, code)
    assert fast.fault is FaultCode.DIVIDE_BY_ZERO and fast.ticks_used == 5 and fast.pc == 2
    assert fast.registers[2] == 25 and fast.registers[4] == 0


@pytest.mark.parametrize("budget", range(0, 12))
def test_budget_reads_the_ticks_left_inside_a_block(fast_tier: FastTier, budget: int) -> None:
    code = [
        I(Opcode.BUDGET, rd=1),
        I(Opcode.MUL, rd=9, rs1=9, rs2=9),
        I(Opcode.BUDGET, rd=2),
        I(Opcode.NOP),
        I(Opcode.BUDGET, rd=3),
        I(Opcode.HALT),
    ]
    run_both(fast_tier, code, tick_budget=budget)


def test_user_fault_carries_its_code(fast_tier: FastTier) -> None:
    reference, _ = run_both(fast_tier, [I(Opcode.NOP), I(Opcode.FAULT, imm=WORD_MASK)])
    assert reference.fault is FaultCode.USER_FAULT and reference.fault_detail == WORD_MASK


def test_unknown_opcode_faults_after_its_charge(fast_tier: FastTier) -> None:
    reference, _ = run_both(fast_tier, [I(Opcode.NOP), I(0xEE, 1, 2, 3, 4)])
    assert reference.fault is FaultCode.INVALID_INSTRUCTION and reference.ticks_used == 2


def test_running_off_the_end_of_the_code(fast_tier: FastTier) -> None:
    reference, _ = run_both(fast_tier, [I(Opcode.NOP), I(Opcode.JNZ, rs1=0, imm=2)])
    assert (
        reference.fault is FaultCode.INVALID_ADDRESS
        and reference.pc == 2
        and reference.ticks_used == 2
    )


def test_channels_echo_input_to_stdout_and_block(fast_tier: FastTier) -> None:
    code = [
        I(Opcode.LI, rd=2, imm=64),
        I(Opcode.POLL, rd=5, imm=2),
        I(Opcode.RECV, rd=3, rs1=1, rs2=2, imm=2),
        I(Opcode.SEND, rs1=1, rs2=3, imm=0),
        I(Opcode.SEND, rs1=1, rs2=3, imm=7),
        I(Opcode.JMP, imm=1),
    ]
    reference, fast = run_both(fast_tier, code, input=b"hello", grants=[7])
    assert fast.state is MachineState.BLOCKED and fast.stdout == b"hello"
    reference.deliver(2, b"again")
    fast.deliver(2, b"again")
    reference.run()
    fast_tier.run(fast, tier="fast")
    assert_same(reference, fast)
    assert fast.take_outbound() == [(7, b"hello"), (7, b"again")]


def test_yield_on_tick_ends_the_slice_after_the_tick(fast_tier: FastTier) -> None:
    program = ForgeProgram(
        (I(Opcode.ADD, rd=1, rs1=1, rs2=2), I(Opcode.TICK), I(Opcode.JMP, imm=0))
    )
    reference, fast = Machine.load(program, tick_budget=100), Machine.load(program, tick_budget=100)
    reference.registers[2] = fast.registers[2] = 1
    while reference.state is not MachineState.FAULTED:
        reference.run(yield_on_tick=True)
        fast_tier.run(fast, tier="fast", yield_on_tick=True)
        assert_same(reference, fast)


def test_large_quota_memory_stays_mapped_and_exact(fast_tier: FastTier) -> None:
    quota = (2 << 20) + 5
    code = [
        I(Opcode.LI, rd=1, imm=quota - 8),
        I(Opcode.LI, rd=2, imm=WORD_MASK),
        I(Opcode.STOREW, rs1=2, rs2=1),
        I(Opcode.STORE, rs1=2, rs2=0, imm=1 << 20),
        I(Opcode.LOADW, rd=3, rs1=1, imm=1),
        I(Opcode.HALT),
    ]
    reference, fast = run_both(fast_tier, code, memory_quota=quota)
    assert fast.fault is FaultCode.INVALID_ADDRESS
    assert is_bound(fast)  # a large final machine keeps its instance: copying out costs more
    unbind(fast)
    assert isinstance(fast.memory, mmap.mmap) and not is_bound(fast)
    assert_same(reference, fast)


def test_a_large_memory_the_host_wrote_here_and_there_is_taken_in_whole(
    fast_tier: FastTier,
) -> None:
    """Binding copies a large machine's memory into a new instance page by touched page:
    every byte written before (the first, a middle, a chunk's last, the last), and one
    written then cleared, must be there; untouched pages read zero."""
    quota = 16 << 20
    places = (0, 4095, 4096, (1 << 16) - 1, 5 << 20, (9 << 20) + 12_345, quota - 1)
    code = [I(Opcode.LI, rd=3, imm=0)]
    for place in places:  # sum the bytes at every place into r3
        code += [I(Opcode.LI, rd=1, imm=place), I(Opcode.LOAD, rd=2, rs1=1)]
        code.append(I(Opcode.ADD, rd=3, rs1=3, rs2=2))
    code += [I(Opcode.LI, rd=1, imm=7 << 20), I(Opcode.LOAD, rd=4, rs1=1), I(Opcode.HALT)]
    program = ForgeProgram(tuple(code))
    reference = Machine.load(program, memory_quota=quota)
    fast = Machine.load(program, memory_quota=quota)
    for machine in (reference, fast):
        for number, place in enumerate(places, start=1):
            machine.memory[place] = number
        machine.memory[(7 << 20) + 3] = 9  # written, then cleared: its page is touched
        machine.memory[(7 << 20) + 3] = 0
        machine.memory[7 << 20] = 200
    reference.run()
    fast_tier.run(fast, tier="fast")
    assert fast.registers[3] == sum(range(1, len(places) + 1)) and fast.registers[4] == 200
    assert_same(reference, fast)


def test_max_ticks_zero_only_starts_the_machine(fast_tier: FastTier) -> None:
    program = ForgeProgram((I(Opcode.NOP), I(Opcode.HALT)))
    machine = Machine.load(program)
    assert fast_tier.run(machine, tier="fast", max_ticks=0) is MachineState.RUNNING
    assert machine.ticks_used == 0


def test_finished_machine_is_left_alone(fast_tier: FastTier) -> None:
    program = ForgeProgram((I(Opcode.HALT),))
    machine = Machine.load(program)
    fast_tier.run(machine, tier="fast")
    before = machine.snapshot()
    assert fast_tier.run(machine, tier="fast") is MachineState.HALTED
    assert machine.snapshot() == before


def test_every_opcode_has_a_reference_handler_and_a_fast_tier_emitter() -> None:
    """The opcode table, the interpreter and the compiler name the same instructions."""
    for opcode, info in OPCODES.items():
        handler = EXECUTE[opcode]
        assert handler is not op_invalid and handler.__name__ == f"op_{info.mnemonic.lower()}"
        assert handler.__doc__, f"{info.mnemonic}: the reference handler states what it does"
        if info.is_host:  # channels: compiled code hands them back to Machine.step
            assert opcode in HOST_OPCODES and opcode not in EMITTERS
        else:
            assert callable(getattr(BlockWriter, EMITTERS[opcode])), info.mnemonic
    assert set(EMITTERS) | HOST_OPCODES == set(OPCODES)
    assert all(EXECUTE[op] is op_invalid for op in range(256) if op not in OPCODES)
