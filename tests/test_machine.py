"""The reference interpreter against the Forge machine spec (§1–5) and the project's decisions.

Every expected value here is worked out by hand from the spec; the machine is only
used to produce the values under test (and, for the tick cut-point tests, to step a
program whose single-step behaviour is itself pinned down by the other tests).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from kforge.core import InvalidProgram, InvalidState, MemoryQuotaExceeded, PermissionDenied
from kforge.isa import FaultCode, Instruction, Opcode, tick_cost
from kforge.machine import Delivery, Flags, Machine, MachineSnapshot, MachineState
from kforge.program import ForgeProgram, Relocation, RelocationKind

M64 = (1 << 64) - 1  # 2^64 - 1, i.e. -1
S63 = 1 << 63  # 2^63, the sign bit
MAX_POS = S63 - 1  # 2^63 - 1

HALTED = MachineState.HALTED
FAULTED = MachineState.FAULTED
BLOCKED = MachineState.BLOCKED
RUNNING = MachineState.RUNNING
READY = MachineState.READY


# ----------------------------------------------------------------- building programs


def rrr(opcode: Opcode, rd: int, rs1: int, rs2: int = 0) -> Instruction:
    return Instruction(opcode, rd=rd, rs1=rs1, rs2=rs2)


def li(rd: int, imm: int) -> Instruction:
    return Instruction(Opcode.LI, rd=rd, imm=imm & M64)


def load(rd: int, rs1: int, imm: int) -> Instruction:
    return Instruction(Opcode.LOAD, rd=rd, rs1=rs1, imm=imm & M64)


def loadw(rd: int, rs1: int, imm: int) -> Instruction:
    return Instruction(Opcode.LOADW, rd=rd, rs1=rs1, imm=imm & M64)


def store(rs1: int, rs2: int, imm: int) -> Instruction:
    return Instruction(Opcode.STORE, rs1=rs1, rs2=rs2, imm=imm & M64)


def storew(rs1: int, rs2: int, imm: int) -> Instruction:
    return Instruction(Opcode.STOREW, rs1=rs1, rs2=rs2, imm=imm & M64)


def push(rs1: int) -> Instruction:
    return Instruction(Opcode.PUSH, rs1=rs1)


def pop(rd: int) -> Instruction:
    return Instruction(Opcode.POP, rd=rd)


def jmp(target: int) -> Instruction:
    return Instruction(Opcode.JMP, imm=target)


def jz(rs1: int, target: int) -> Instruction:
    return Instruction(Opcode.JZ, rs1=rs1, imm=target)


def jnz(rs1: int, target: int) -> Instruction:
    return Instruction(Opcode.JNZ, rs1=rs1, imm=target)


def jlt(rs1: int, rs2: int, target: int) -> Instruction:
    return Instruction(Opcode.JLT, rs1=rs1, rs2=rs2, imm=target)


def call(target: int) -> Instruction:
    return Instruction(Opcode.CALL, imm=target)


def fault(code: int) -> Instruction:
    return Instruction(Opcode.FAULT, imm=code)


def budget(rd: int) -> Instruction:
    return Instruction(Opcode.BUDGET, rd=rd)


def send(channel: int, rs1: int, rs2: int) -> Instruction:
    return Instruction(Opcode.SEND, rs1=rs1, rs2=rs2, imm=channel)


def recv(channel: int, rd: int, rs1: int, rs2: int) -> Instruction:
    return Instruction(Opcode.RECV, rd=rd, rs1=rs1, rs2=rs2, imm=channel)


def poll(channel: int, rd: int) -> Instruction:
    return Instruction(Opcode.POLL, rd=rd, imm=channel)


HALT = Instruction(Opcode.HALT)
NOP = Instruction(Opcode.NOP)
TICK = Instruction(Opcode.TICK)
RET = Instruction(Opcode.RET)

#: ADD of 2^63 + 2^63 into r251: result 0, so zero, carry and overflow all become true.
SET_ALL_FLAGS = (li(250, S63), rrr(Opcode.ADD, 251, 250, 250))
ALL_FLAGS = Flags(zero=True, carry=True, overflow=True, halt=False)

#: The heap starts here when there is no data and no environment (spec §2).
EMPTY_HEAP_START = 8


def machine(*code: Instruction, data: bytes = b"", entry: int = 0, **options: Any) -> Machine:
    return Machine.load(ForgeProgram(tuple(code), data=data, entry=entry), **options)


def run(*code: Instruction, data: bytes = b"", entry: int = 0, **options: Any) -> Machine:
    m = machine(*code, data=data, entry=entry, **options)
    m.run()
    return m


def step_n(m: Machine, count: int) -> None:
    for _ in range(count):
        m.step()
        assert m.state is RUNNING, f"setup step faulted: {m.fault} at pc {m.pc}"


# ======================================================================= arithmetic

# (opcode, a, b, result, zero, carry, overflow), each line worked out by hand.
BINARY_CASES = [
    # ADD: carry = unsigned overflow, overflow = signed overflow.
    (Opcode.ADD, 0, 0, 0, True, False, False),
    (Opcode.ADD, 1, 2, 3, False, False, False),
    (Opcode.ADD, M64, 1, 0, True, True, False),
    (Opcode.ADD, MAX_POS, 1, S63, False, False, True),
    (Opcode.ADD, S63, S63, 0, True, True, True),
    (Opcode.ADD, M64, M64, M64 - 1, False, True, False),
    (Opcode.ADD, S63, M64, MAX_POS, False, True, True),
    (Opcode.ADD, MAX_POS, MAX_POS, M64 - 1, False, False, True),
    # SUB: carry = borrow (a < b), overflow = signed overflow.
    (Opcode.SUB, 0, 0, 0, True, False, False),
    (Opcode.SUB, 5, 5, 0, True, False, False),
    (Opcode.SUB, 0, 1, M64, False, True, False),
    (Opcode.SUB, 1, 2, M64, False, True, False),
    (Opcode.SUB, S63, 1, MAX_POS, False, False, True),
    (Opcode.SUB, MAX_POS, M64, S63, False, True, True),
    (Opcode.SUB, 0, S63, S63, False, True, True),
    (Opcode.SUB, M64, M64, 0, True, False, False),
    (Opcode.SUB, M64, 1, M64 - 1, False, False, False),
    # MUL: carry = high 64 bits non-zero, overflow = signed product does not fit.
    (Opcode.MUL, 0, M64, 0, True, False, False),
    (Opcode.MUL, 3, 4, 12, False, False, False),
    (Opcode.MUL, 1 << 32, 1 << 32, 0, True, True, True),
    (Opcode.MUL, M64, M64, 1, False, True, False),
    (Opcode.MUL, M64, 2, M64 - 1, False, True, False),
    (Opcode.MUL, S63, M64, S63, False, True, True),
    (Opcode.MUL, MAX_POS, 2, M64 - 1, False, False, True),
    (Opcode.MUL, S63, 1, S63, False, False, False),
    # DIV, MOD: unsigned; zero set, carry and overflow cleared.
    (Opcode.DIV, 7, 2, 3, False, False, False),
    (Opcode.DIV, 0, 5, 0, True, False, False),
    (Opcode.DIV, M64, 1, M64, False, False, False),
    (Opcode.DIV, M64, M64, 1, False, False, False),
    (Opcode.DIV, S63, M64, 0, True, False, False),
    (Opcode.DIV, 1, S63, 0, True, False, False),
    (Opcode.MOD, 7, 2, 1, False, False, False),
    (Opcode.MOD, 10, 5, 0, True, False, False),
    (Opcode.MOD, M64, 10, 5, False, False, False),
    (Opcode.MOD, S63, M64, S63, False, False, False),
    (Opcode.MOD, 5, S63, 5, False, False, False),
    # Bitwise: zero set, carry and overflow cleared.
    (Opcode.AND, 0xF0F0, 0x0FF0, 0x00F0, False, False, False),
    (Opcode.AND, S63, MAX_POS, 0, True, False, False),
    (Opcode.AND, M64, M64, M64, False, False, False),
    (Opcode.OR, 0, 0, 0, True, False, False),
    (Opcode.OR, S63, 1, S63 + 1, False, False, False),
    (Opcode.XOR, 0x1234, 0x1234, 0, True, False, False),
    (Opcode.XOR, M64, S63, MAX_POS, False, False, False),
    # Shifts by R[rs2] & 63; SHR is logical.
    (Opcode.SHL, 1, 63, S63, False, False, False),
    (Opcode.SHL, 1, 64, 1, False, False, False),
    (Opcode.SHL, 1, 65, 2, False, False, False),
    (Opcode.SHL, S63, 1, 0, True, False, False),
    (Opcode.SHL, 3, M64, S63, False, False, False),
    (Opcode.SHL, M64, 0, M64, False, False, False),
    (Opcode.SHR, S63, 63, 1, False, False, False),
    (Opcode.SHR, S63, 1, 1 << 62, False, False, False),
    (Opcode.SHR, M64, 64, M64, False, False, False),
    (Opcode.SHR, 1, 1, 0, True, False, False),
    (Opcode.SHR, M64, 127, 1, False, False, False),
]


@pytest.mark.parametrize("flags_before", [False, True], ids=["flags-clear", "flags-set"])
@pytest.mark.parametrize(
    ("opcode", "a", "b", "result", "zero", "carry", "overflow"),
    BINARY_CASES,
    ids=[f"{c[0].name}-{c[1]:#x}-{c[2]:#x}" for c in BINARY_CASES],
)
def test_binary_operation_result_and_flags(
    opcode: Opcode,
    a: int,
    b: int,
    result: int,
    zero: bool,
    carry: bool,
    overflow: bool,
    flags_before: bool,
) -> None:
    prelude = SET_ALL_FLAGS if flags_before else ()
    m = run(*prelude, li(1, a), li(2, b), rrr(opcode, 3, 1, 2), HALT)
    assert m.state is HALTED
    assert m.registers[3] == result
    assert m.registers[1] == a and m.registers[2] == b
    assert m.flags == Flags(zero=zero, carry=carry, overflow=overflow, halt=True)


# (opcode, a, result, zero, carry, overflow)
UNARY_CASES = [
    (Opcode.NEG, 0, 0, True, False, False),
    (Opcode.NEG, 1, M64, False, True, False),
    (Opcode.NEG, S63, S63, False, True, True),
    (Opcode.NEG, M64, 1, False, True, False),
    (Opcode.NEG, MAX_POS, S63 + 1, False, True, False),
    (Opcode.NOT, 0, M64, False, False, False),
    (Opcode.NOT, M64, 0, True, False, False),
    (Opcode.NOT, S63, MAX_POS, False, False, False),
]


@pytest.mark.parametrize("flags_before", [False, True], ids=["flags-clear", "flags-set"])
@pytest.mark.parametrize(
    ("opcode", "a", "result", "zero", "carry", "overflow"),
    UNARY_CASES,
    ids=[f"{c[0].name}-{c[1]:#x}" for c in UNARY_CASES],
)
def test_unary_operation_result_and_flags(
    opcode: Opcode, a: int, result: int, zero: bool, carry: bool, overflow: bool, flags_before: bool
) -> None:
    prelude = SET_ALL_FLAGS if flags_before else ()
    m = run(*prelude, li(1, a), rrr(opcode, 3, 1), HALT)
    assert m.registers[3] == result
    assert m.flags == Flags(zero=zero, carry=carry, overflow=overflow, halt=True)


def test_operands_may_alias_the_destination() -> None:
    m = run(li(1, 21), rrr(Opcode.ADD, 1, 1, 1), rrr(Opcode.MUL, 1, 1, 1), HALT)
    assert m.registers[1] == 42 * 42


def test_r0_is_an_ordinary_writable_register() -> None:
    m = run(li(0, 5), rrr(Opcode.ADD, 1, 0, 0), HALT)
    assert m.registers[0] == 5
    assert m.registers[1] == 10


def test_li_loads_the_full_64_bit_immediate_without_touching_flags() -> None:
    m = run(*SET_ALL_FLAGS, li(7, M64), li(8, 0), HALT)
    assert m.registers[7] == M64
    assert m.registers[8] == 0
    assert m.flags == dataclasses.replace(ALL_FLAGS, halt=True)


def test_instructions_other_than_arithmetic_and_logic_leave_flags_alone() -> None:
    b = len(SET_ALL_FLAGS)
    m = run(
        *SET_ALL_FLAGS,
        li(1, 0),
        push(1),
        pop(2),
        store(1, 253, 0),
        load(3, 253, 0),
        storew(1, 253, 0),
        loadw(3, 253, 0),
        jmp(b + 9),
        NOP,  # b + 8: skipped
        jz(1, b + 10),
        jnz(1, 99),
        jlt(1, 1, 99),
        call(b + 14),
        jmp(b + 15),
        RET,  # b + 14
        send(0, 0, 1),  # b + 15: zero-length
        poll(2, 4),
        TICK,
        budget(5),
        HALT,
    )
    assert (m.state, m.pc, m.ticks_used) == (HALTED, b + 19, b + 23)
    assert m.flags == dataclasses.replace(ALL_FLAGS, halt=True)


# ======================================================================= tick costs

SPEC_COSTS = {Opcode.MUL: 2, Opcode.DIV: 2, Opcode.MOD: 2, Opcode.CALL: 2, Opcode.RET: 2}
SPEC_COSTS |= {Opcode.SEND: 3, Opcode.RECV: 3}


def spec_cost(opcode: int) -> int:
    return SPEC_COSTS.get(opcode, 1)  # type: ignore[call-overload]


def test_tick_cost_table_matches_the_spec_for_all_256_opcode_bytes() -> None:
    assert [tick_cost(op) for op in range(256)] == [spec_cost(op) for op in range(256)]


# For each opcode: setup instructions, then the instruction whose charge is measured.
COST_PROGRAMS: dict[int, tuple[tuple[Instruction, ...], Instruction]] = {
    **{
        op: ((li(2, 3),), rrr(op, 1, 2, 2))
        for op in (
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
        )
    },
    Opcode.NEG: ((), rrr(Opcode.NEG, 1, 2)),
    Opcode.NOT: ((), rrr(Opcode.NOT, 1, 2)),
    Opcode.LOAD: ((), load(1, 0, 16)),
    Opcode.STORE: ((), store(1, 0, 16)),
    Opcode.LOADW: ((), loadw(1, 0, 16)),
    Opcode.STOREW: ((), storew(1, 0, 16)),
    Opcode.PUSH: ((), push(1)),
    Opcode.POP: ((push(1),), pop(1)),
    Opcode.JMP: ((), jmp(0)),
    Opcode.JZ: ((), jz(0, 0)),
    Opcode.JNZ: ((), jnz(0, 0)),
    Opcode.JLT: ((), jlt(0, 0, 0)),
    Opcode.CALL: ((), call(0)),
    Opcode.RET: ((push(0),), RET),
    Opcode.LI: ((), li(1, 1)),
    Opcode.HALT: ((), HALT),
    Opcode.FAULT: ((), fault(1)),
    Opcode.NOP: ((), NOP),
    Opcode.SEND: ((), send(0, 0, 0)),
    Opcode.RECV: ((), recv(2, 1, 0, 0)),
    Opcode.POLL: ((), poll(2, 1)),
    Opcode.TICK: ((), TICK),
    Opcode.BUDGET: ((), budget(1)),
    0x00: ((), Instruction(0x00)),
    0x07: ((), Instruction(0x07, rd=1, rs1=2, rs2=3, imm=4)),
    0xFF: ((), Instruction(0xFF, imm=M64)),
}


def test_cost_programs_cover_every_defined_opcode() -> None:
    assert set(Opcode) <= set(COST_PROGRAMS)


@pytest.mark.parametrize(
    "opcode",
    list(COST_PROGRAMS),
    ids=[
        Opcode(op).name if op in Opcode._value2member_map_ else f"{op:#04x}" for op in COST_PROGRAMS
    ],
)
def test_executing_an_opcode_charges_its_spec_cost(opcode: int) -> None:
    setup, measured = COST_PROGRAMS[opcode]
    m = machine(*setup, measured, HALT)
    step_n(m, len(setup))
    before = m.ticks_used
    m.step()
    assert m.ticks_used - before == spec_cost(opcode)


# ======================================================================= memory


def test_store_writes_the_low_byte_and_load_zero_extends() -> None:
    m = run(
        li(1, 0x1234),
        store(1, 253, 0),
        load(2, 253, 0),
        li(3, 0xFF),
        store(3, 253, 1),
        load(4, 253, 1),
        HALT,
    )
    assert m.memory[m.heap_start] == 0x34
    assert m.registers[2] == 0x34
    assert m.registers[4] == 0xFF


def test_loadw_reads_little_endian_at_an_unaligned_address() -> None:
    data = bytes(range(1, 17))
    m = run(loadw(1, 0, 1), HALT, data=data)
    assert m.registers[1] == 0x0908070605040302


def test_storew_writes_little_endian_at_an_unaligned_address() -> None:
    m = run(li(1, 0x1122334455667788), storew(1, 253, 3), HALT)
    h = m.heap_start
    assert bytes(m.memory[h : h + 12]) == bytes(3) + bytes.fromhex("8877665544332211") + bytes(1)


def test_data_section_is_placed_at_address_zero() -> None:
    m = run(load(1, 0, 0), load(2, 0, 2), HALT, data=b"\x05\x06\x07")
    assert (m.registers[1], m.registers[2]) == (5, 7)
    assert bytes(m.memory[:3]) == b"\x05\x06\x07"


QUOTA = 64  # a small machine for the edge tests: heap at 8, stack from 64 down


def test_last_byte_of_memory_is_addressable() -> None:
    m = run(li(1, 0xAB), store(1, 0, QUOTA - 1), load(2, 0, QUOTA - 1), HALT, memory_quota=QUOTA)
    assert m.state is HALTED
    assert m.registers[2] == 0xAB


def test_last_word_of_memory_is_addressable() -> None:
    m = run(li(1, M64), storew(1, 0, QUOTA - 8), loadw(2, 0, QUOTA - 8), HALT, memory_quota=QUOTA)
    assert m.state is HALTED
    assert m.registers[2] == M64
    assert bytes(m.memory[QUOTA - 8 :]) == b"\xff" * 8


@pytest.mark.parametrize(
    "insn",
    [
        load(1, 0, QUOTA),
        store(1, 0, QUOTA),
        loadw(1, 0, QUOTA - 7),
        storew(1, 0, QUOTA - 7),
        loadw(1, 0, QUOTA),
        load(1, 0, M64),
        loadw(1, 0, M64 - 3),
    ],
    ids=[
        "load-at-quota",
        "store-at-quota",
        "loadw-straddles-end",
        "storew-straddles-end",
        "loadw-at-quota",
        "load-at-2^64-1",
        "loadw-end-wraps-past-2^64",
    ],
)
def test_access_past_the_quota_faults_invalid_address(insn: Instruction) -> None:
    m = run(insn, HALT, memory_quota=QUOTA)
    assert (m.state, m.fault, m.pc) == (FAULTED, FaultCode.INVALID_ADDRESS, 0)


def test_address_register_plus_immediate_wraps_around_mod_2_64() -> None:
    # R = 2^64 - 1, imm = QUOTA → a = QUOTA - 1; R = 100, imm = -1 → a = 99.
    m = run(
        li(1, M64),
        li(2, 0x5A),
        store(2, 1, QUOTA),
        load(3, 0, QUOTA - 1),
        li(4, 100),
        li(5, 0x66),
        store(5, 4, M64),
        load(6, 0, 99),
        li(7, M64 - 7),
        loadw(8, 7, QUOTA),
        HALT,
        memory_quota=QUOTA * 2,
    )
    assert m.state is HALTED, m.fault
    assert m.registers[3] == 0x5A
    assert m.registers[6] == 0x66
    assert m.registers[8] == int.from_bytes(m.memory[QUOTA - 8 : QUOTA], "little")


def test_range_at_quota_minus_n_is_valid_for_sends_of_n_bytes() -> None:
    # a + n == memory_quota is valid.
    m = run(li(1, QUOTA - 4), li(2, 4), send(0, 1, 2), HALT, memory_quota=QUOTA)
    assert m.state is HALTED
    assert m.stdout == bytes(4)


def test_zero_length_send_at_the_quota_is_valid_and_one_past_is_not() -> None:
    ok = run(li(1, QUOTA), send(0, 1, 0), HALT, memory_quota=QUOTA)
    assert ok.state is HALTED
    assert ok.stdout == b""
    bad = run(li(1, QUOTA + 1), send(0, 1, 0), HALT, memory_quota=QUOTA)
    assert (bad.state, bad.fault, bad.pc) == (FAULTED, FaultCode.INVALID_ADDRESS, 1)


def test_the_largest_quota_of_4_gib_is_usable_at_its_last_byte() -> None:
    quota = 1 << 32
    m = run(
        li(1, 0xCD),
        li(2, quota - 1),
        store(1, 2, 0),
        load(3, 2, 0),
        loadw(4, 2, M64 - 6),
        HALT,
        memory_quota=quota,
    )
    assert m.state is HALTED, m.fault
    assert m.registers[3] == 0xCD
    assert m.registers[4] == 0xCD << 56
    assert m.stack_start == quota


# ======================================================================= stack


def test_push_stores_little_endian_below_sp_and_pop_reads_it_back() -> None:
    m = machine(li(1, 0x0102030405060708), push(1), pop(2), HALT, memory_quota=QUOTA)
    assert m.sp == QUOTA
    step_n(m, 2)
    assert m.sp == QUOTA - 8
    assert bytes(m.memory[QUOTA - 8 :]) == bytes.fromhex("0807060504030201")
    m.run()
    assert m.registers[2] == 0x0102030405060708
    assert m.sp == QUOTA


def test_stack_starts_at_the_quota_rounded_down_to_8() -> None:
    m = machine(HALT, memory_quota=43)
    assert m.stack_start == 40
    assert m.sp == 40
    assert m.snapshot().sp == 40


def test_stack_fills_exactly_down_to_heap_start() -> None:
    # quota 40, no data, empty environment: heap_start 8, stack_start 40 → four slots.
    m = run(*[push(0)] * 4, HALT, memory_quota=40)
    assert m.state is HALTED
    assert m.sp == m.heap_start == 8
    m = run(*[push(0)] * 5, HALT, memory_quota=40)
    assert (m.state, m.fault, m.pc, m.sp) == (FAULTED, FaultCode.STACK_OVERFLOW, 4, 8)


def test_stack_room_starts_after_data_and_environment() -> None:
    # data 9 bytes → environment at 16, heap_start 24; quota 40 → two slots.
    m = run(push(0), push(0), push(0), HALT, data=bytes(9), memory_quota=40)
    assert m.heap_start == 24
    assert (m.fault, m.pc, m.sp) == (FaultCode.STACK_OVERFLOW, 2, 24)


def test_pop_on_an_empty_stack_underflows() -> None:
    m = run(pop(1), HALT)
    assert (m.state, m.fault, m.pc) == (FAULTED, FaultCode.STACK_UNDERFLOW, 0)


def test_pop_after_push_and_pop_underflows() -> None:
    m = run(push(0), pop(1), pop(1), HALT)
    assert (m.fault, m.pc) == (FaultCode.STACK_UNDERFLOW, 2)


# ======================================================================= control flow


def test_jmp_sets_pc_to_the_target() -> None:
    m = run(jmp(2), fault(1), HALT)
    assert (m.state, m.pc, m.ticks_used) == (HALTED, 2, 2)


@pytest.mark.parametrize(
    ("setup", "branch", "taken"),
    [
        ((), jz(1, 3), True),
        ((li(1, 1),), jz(1, 3), False),
        ((li(1, M64),), jnz(1, 3), True),
        ((), jnz(1, 3), False),
        ((li(1, 1), li(2, 2)), jlt(1, 2, 3), True),
        ((li(1, 2), li(2, 2)), jlt(1, 2, 3), False),
        ((li(1, S63), li(2, 1)), jlt(1, 2, 3), False),  # unsigned: 2^63 is not < 1
        ((li(1, 1), li(2, S63)), jlt(2, 1, 3), False),
        ((li(1, 1), li(2, M64)), jlt(1, 2, 3), True),
    ],
    ids=[
        "jz-zero",
        "jz-nonzero",
        "jnz-nonzero",
        "jnz-zero",
        "jlt-less",
        "jlt-equal",
        "jlt-unsigned-high-vs-1",
        "jlt-unsigned-high-first",
        "jlt-1-vs-all-ones",
    ],
)
def test_conditional_jumps(
    setup: tuple[Instruction, ...], branch: Instruction, taken: bool
) -> None:
    # indices: 0, 1 setup or NOP; 2 the branch to 4; 3 LI r9, 1 (skipped when taken); 4 HALT
    pad = (NOP,) * (2 - len(setup))
    code = (*setup, *pad, dataclasses.replace(branch, imm=4), li(9, 1), HALT)
    m = run(*code)
    assert m.state is HALTED
    assert m.pc == 4
    assert m.registers[9] == (0 if taken else 1)


@pytest.mark.parametrize(
    "branch",
    [jz(1, 99), jnz(0, 99), jlt(0, 0, 99), jlt(1, 0, M64)],
    ids=["jz", "jnz", "jlt-equal", "jlt-greater"],
)
def test_a_branch_not_taken_ignores_an_invalid_target(branch: Instruction) -> None:
    m = run(li(1, 1), branch, HALT)
    assert (m.state, m.pc) == (HALTED, 2)


@pytest.mark.parametrize(
    "branch",
    [jmp(3), jmp(M64), jz(0, 3), jnz(1, 3), jlt(0, 1, 3)],
    ids=["jmp-length", "jmp-2^64-1", "jz", "jnz", "jlt"],
)
def test_a_taken_jump_to_a_target_past_the_code_faults_at_the_jump(branch: Instruction) -> None:
    m = run(li(1, 1), branch, HALT)
    assert (m.state, m.fault, m.pc, m.ticks_used) == (FAULTED, FaultCode.INVALID_ADDRESS, 1, 2)


def test_running_off_the_end_of_the_code_faults_without_a_charge() -> None:
    m = run(NOP, NOP)
    assert (m.state, m.fault, m.pc, m.ticks_used) == (FAULTED, FaultCode.INVALID_ADDRESS, 2, 2)


def test_pc_past_the_code_is_checked_before_the_tick_budget() -> None:
    m = run(NOP, tick_budget=1)
    assert (m.state, m.fault, m.pc, m.ticks_used) == (FAULTED, FaultCode.INVALID_ADDRESS, 1, 1)


def test_execution_starts_at_the_entry() -> None:
    m = run(fault(1), fault(2), li(1, 7), HALT, entry=2)
    assert (m.state, m.pc, m.ticks_used, m.registers[1]) == (HALTED, 3, 2, 7)


def test_call_pushes_the_return_index_and_jumps() -> None:
    m = machine(NOP, call(3), HALT, HALT, memory_quota=QUOTA)
    step_n(m, 2)
    assert m.pc == 3
    assert m.sp == QUOTA - 8
    assert int.from_bytes(m.memory[QUOTA - 8 :], "little") == 2


def test_call_and_ret_round_trip() -> None:
    m = run(call(3), li(2, 1), HALT, li(1, 9), RET)
    assert (m.state, m.pc) == (HALTED, 2)
    assert (m.registers[1], m.registers[2]) == (9, 1)
    assert m.sp == m.stack_start
    # CALL 2 + LI 1 + RET 2 + LI 1 + HALT 1
    assert m.ticks_used == 7


def test_ret_to_the_last_instruction_is_valid() -> None:
    m = run(li(1, 3), push(1), RET, HALT)
    assert (m.state, m.pc) == (HALTED, 3)


def test_call_checks_its_target_before_the_stack() -> None:
    # quota 16: one stack slot, filled by the PUSH; the CALL's target is bad too.
    m = run(push(0), call(2), memory_quota=16)
    assert (m.fault, m.pc) == (FaultCode.INVALID_ADDRESS, 1)
    m = run(push(0), call(0), memory_quota=16)
    assert (m.fault, m.pc) == (FaultCode.STACK_OVERFLOW, 1)


def test_ret_checks_the_stack_before_the_target() -> None:
    m = run(RET)
    assert (m.fault, m.pc, m.ticks_used) == (FaultCode.STACK_UNDERFLOW, 0, 2)


def test_ret_to_an_invalid_target_faults_with_sp_unchanged() -> None:
    m = run(li(1, 3), push(1), RET)
    assert (m.fault, m.pc, m.ticks_used) == (FaultCode.INVALID_ADDRESS, 2, 4)
    assert m.sp == m.stack_start - 8


# ======================================================================= system


def test_halt_keeps_pc_and_sets_the_halt_flag() -> None:
    m = run(NOP, HALT)
    assert (m.state, m.pc, m.ticks_used) == (HALTED, 1, 2)
    assert m.flags == Flags(halt=True)
    assert m.fault is None and m.fault_detail is None


@pytest.mark.parametrize("code", [0, 42, 0xBEEF, M64])
def test_fault_instruction_carries_its_immediate_as_the_user_code(code: int) -> None:
    m = run(NOP, fault(code))
    assert (m.state, m.fault, m.fault_detail, m.pc, m.ticks_used) == (
        FAULTED,
        FaultCode.USER_FAULT,
        code,
        1,
        2,
    )
    assert m.flags.halt is False


def test_other_faults_carry_no_detail() -> None:
    m = run(rrr(Opcode.DIV, 1, 1, 1))
    assert m.fault is FaultCode.DIVIDE_BY_ZERO
    assert m.fault_detail is None


def test_nop_and_tick_only_advance_pc() -> None:
    m = run(NOP, TICK, HALT)
    assert (m.state, m.pc, m.ticks_used) == (HALTED, 2, 3)
    assert m.registers == machine(HALT).registers


def test_budget_reads_the_remaining_ticks_after_its_own_charge() -> None:
    m = run(NOP, budget(1), HALT, tick_budget=10)
    assert m.registers[1] == 8
    assert m.ticks_used == 3


def test_budget_can_read_zero_and_the_next_instruction_is_out_of_ticks() -> None:
    m = run(NOP, budget(1), HALT, tick_budget=2)
    assert m.registers[1] == 0
    assert (m.fault, m.pc, m.ticks_used) == (FaultCode.OUT_OF_TICKS, 2, 2)


def test_budget_with_the_largest_budget() -> None:
    m = run(budget(1), HALT, tick_budget=M64)
    assert m.registers[1] == M64 - 1


@pytest.mark.parametrize("opcode", [0x00, 0x07, 0x0F, 0x26, 0x36, 0x41, 0x53, 0x63, 0x72, 0xFF])
def test_unknown_opcodes_load_and_fault_invalid_instruction_when_executed(opcode: int) -> None:
    insn = Instruction(opcode, rd=1, rs1=2, rs2=3, imm=M64)  # fields of unknown opcodes: unchecked
    m = run(NOP, insn, HALT)
    assert (m.state, m.fault, m.pc, m.ticks_used) == (FAULTED, FaultCode.INVALID_INSTRUCTION, 1, 2)
    assert m.registers[1] == 0


def test_unknown_opcode_that_is_never_executed_is_harmless() -> None:
    m = run(jmp(2), Instruction(0xEE), HALT)
    assert m.state is HALTED


# ======================================================================= channels


def test_send_to_stdout_and_stderr_collects_output() -> None:
    m = run(li(1, 3), send(0, 0, 1), send(1, 0, 1), send(0, 0, 1), HALT, data=b"abc")
    assert m.stdout == b"abcabc"
    assert m.stderr == b"abc"
    assert m.outbound == type(m.outbound)()


def test_send_on_a_granted_channel_waits_for_the_host() -> None:
    m = run(li(1, 2), send(3, 0, 1), send(7, 1, 1), HALT, data=b"wxyz", grants=[3, 7])
    assert m.state is HALTED
    assert m.snapshot().outbound == ((3, b"wx"), (7, b"yz"))
    assert m.stdout == b""
    assert m.take_outbound() == [(3, b"wx"), (7, b"yz")]
    assert m.take_outbound() == []
    assert m.snapshot().outbound == ()


def test_send_copies_the_bytes_at_the_moment_of_sending() -> None:
    m = run(
        li(1, 1),
        send(3, 0, 1),
        li(2, 0x7A),
        store(2, 0, 0),
        send(0, 0, 1),
        HALT,
        data=b"a",
        grants=[3],
    )
    assert m.take_outbound() == [(3, b"a")]
    assert m.stdout == b"z"


def test_send_up_to_the_message_limit_is_allowed() -> None:
    m = run(li(1, 16), send(0, 0, 1), HALT, message_limit=16)
    assert m.state is HALTED
    assert len(m.stdout) == 16


def test_default_message_limit_is_64_kib() -> None:
    ok = run(li(1, 65536), send(0, 0, 1), HALT, memory_quota=1 << 17)
    assert ok.state is HALTED
    bad = run(li(1, 65537), send(0, 0, 1), HALT, memory_quota=1 << 17)
    assert (bad.fault, bad.pc) == (FaultCode.CHANNEL_ERROR, 1)


def test_held_bytes_may_reach_the_quota_exactly() -> None:
    m = run(li(1, 16), send(0, 0, 1), send(1, 0, 1), send(0, 0, 0), HALT, memory_quota=32)
    assert m.state is HALTED
    m = run(li(1, 16), li(2, 1), send(0, 0, 1), send(1, 0, 1), send(0, 0, 2), HALT, memory_quota=32)
    assert (m.fault, m.pc) == (FaultCode.OUT_OF_MEMORY, 4)


def test_outbound_messages_count_until_the_host_takes_them() -> None:
    code = (li(1, 20), send(3, 0, 1), TICK, send(3, 0, 1), HALT)
    kept = machine(*code, memory_quota=32, grants=[3])
    kept.run(yield_on_tick=True)
    kept.run()
    assert (kept.fault, kept.pc) == (FaultCode.OUT_OF_MEMORY, 3)

    taken = machine(*code, memory_quota=32, grants=[3])
    taken.run(yield_on_tick=True)
    assert taken.take_outbound() == [(3, bytes(20))]
    taken.run()
    assert taken.state is HALTED
    assert taken.take_outbound() == [(3, bytes(20))]


def test_stdout_bytes_count_against_the_quota_for_good() -> None:
    code = (li(1, 20), send(0, 0, 1), TICK, send(3, 0, 1), HALT)
    m = machine(*code, memory_quota=32, grants=[3])
    m.run(yield_on_tick=True)
    assert m.take_outbound() == []
    m.run()
    assert (m.fault, m.pc) == (FaultCode.OUT_OF_MEMORY, 3)


def test_input_is_queued_on_stdin_as_one_message() -> None:
    m = run(poll(2, 1), li(2, 100), recv(2, 3, 253, 2), poll(2, 4), HALT, input=b"hello")
    assert (m.registers[1], m.registers[3], m.registers[4]) == (1, 5, 0)
    assert bytes(m.memory[m.heap_start : m.heap_start + 6]) == b"hello\0"


def test_empty_input_is_still_one_message_of_length_zero() -> None:
    m = run(poll(2, 1), li(3, 77), li(2, 8), recv(2, 3, 253, 2), poll(2, 4), HALT)
    assert m.state is HALTED
    assert (m.registers[1], m.registers[3], m.registers[4]) == (1, 0, 0)


def test_recv_truncates_to_the_buffer_and_reports_the_full_length() -> None:
    m = run(li(2, 3), recv(2, 3, 253, 2), poll(2, 4), HALT, input=b"stressed")
    h = m.heap_start
    assert m.registers[3] == 8  # rd = len(m) > R[rs2] tells of the truncation
    assert bytes(m.memory[h : h + 4]) == b"str\0"
    assert m.registers[4] == 0  # consumed whole


def test_recv_range_check_uses_the_copied_length_not_the_message_length() -> None:
    m = run(li(1, QUOTA - 2), li(2, 2), recv(2, 3, 1, 2), HALT, input=b"hello", memory_quota=QUOTA)
    assert m.state is HALTED
    assert m.registers[3] == 5
    assert bytes(m.memory[QUOTA - 2 :]) == b"he"


def test_recv_of_zero_bytes_at_the_quota_consumes_the_message() -> None:
    m = run(li(1, QUOTA), recv(2, 3, 1, 0), poll(2, 4), HALT, input=b"abc", memory_quota=QUOTA)
    assert m.state is HALTED
    assert (m.registers[3], m.registers[4]) == (3, 0)


def test_poll_counts_the_waiting_messages() -> None:
    m = machine(poll(3, 1), poll(2, 2), HALT, grants=[3])
    m.deliver(3, b"one")
    m.deliver(3, b"two")
    m.deliver(2, b"more")
    m.run()
    assert (m.registers[1], m.registers[2]) == (2, 2)


def test_messages_are_received_in_delivery_order() -> None:
    m = machine(
        li(2, 8),
        recv(3, 3, 253, 2),
        loadw(4, 253, 0),
        recv(3, 5, 253, 2),
        loadw(6, 253, 0),
        HALT,
        grants=[3],
    )
    m.deliver(3, b"A")
    m.deliver(3, b"BC")
    m.run()
    assert (m.registers[3], m.registers[4], m.registers[5], m.registers[6]) == (1, 0x41, 2, 0x4342)


# ----------------------------------------------------------------- blocking


def test_recv_on_an_empty_queue_blocks_with_pc_kept_and_nothing_charged() -> None:
    m = run(li(2, 8), recv(2, 3, 253, 2), recv(2, 4, 253, 2), HALT, input=b"ab")
    assert (m.state, m.pc, m.ticks_used, m.blocked_channel) == (BLOCKED, 2, 4, 2)
    assert m.fault is None
    assert m.registers[4] == 0


def test_a_blocked_machine_stays_blocked_when_run_or_stepped() -> None:
    m = run(recv(3, 1, 0, 0), HALT, grants=[3])
    before = m.snapshot()
    assert m.run() is BLOCKED
    assert m.step() is BLOCKED
    assert m.snapshot() == before


def test_delivery_wakes_a_blocked_recv_which_then_runs_again() -> None:
    m = run(li(2, 8), recv(2, 3, 253, 2), recv(2, 4, 253, 2), HALT, input=b"ab")
    m.deliver(2, b"xyz")
    assert m.state is RUNNING
    assert m.blocked_channel is None
    assert m.deliveries == [Delivery(ticks_used=4, channel=2, data=b"xyz")]
    m.run()
    assert (m.state, m.registers[4], m.ticks_used) == (HALTED, 3, 8)
    assert bytes(m.memory[m.heap_start : m.heap_start + 3]) == b"xyz"


def test_delivery_on_another_channel_does_not_wake_a_blocked_machine() -> None:
    m = run(recv(3, 1, 0, 0), HALT, grants=[3, 4])
    m.deliver(4, b"x")
    m.deliver(2, b"y")
    assert (m.state, m.blocked_channel) == (BLOCKED, 3)
    m.deliver(3, b"z")
    assert m.state is RUNNING
    m.run()
    assert (m.state, m.registers[1]) == (HALTED, 1)


def test_deliveries_are_logged_with_the_ticks_used_when_they_became_visible() -> None:
    m = machine(NOP, NOP, TICK, NOP, HALT, grants=[5])
    m.deliver(5, b"early")
    m.run(yield_on_tick=True)
    m.deliver(2, b"later")
    assert m.deliveries == [Delivery(0, 5, b"early"), Delivery(3, 2, b"later")]


def test_a_recv_with_too_few_ticks_faults_out_of_ticks_even_when_the_queue_is_empty() -> None:
    m = run(li(2, 8), recv(2, 3, 253, 2), recv(2, 4, 253, 2), HALT, input=b"", tick_budget=6)
    assert (m.state, m.fault, m.pc, m.ticks_used) == (FAULTED, FaultCode.OUT_OF_TICKS, 2, 4)


def test_a_recv_with_exactly_enough_ticks_blocks() -> None:
    m = run(li(2, 8), recv(2, 3, 253, 2), recv(2, 4, 253, 2), HALT, tick_budget=7)
    assert (m.state, m.pc, m.ticks_used) == (BLOCKED, 2, 4)


def test_recv_checks_the_channel_before_blocking() -> None:
    denied = run(recv(4, 1, 0, 0))
    assert (denied.state, denied.fault) == (FAULTED, FaultCode.PERMISSION_DENIED)
    wrong = run(recv(1, 1, 0, 0))
    assert (wrong.state, wrong.fault) == (FAULTED, FaultCode.CHANNEL_ERROR)


@pytest.mark.parametrize("channel", [0, 1, 8, 15, 16, 255])
def test_deliver_refuses_a_channel_that_does_not_receive(channel: int) -> None:
    m = machine(HALT)
    with pytest.raises(PermissionDenied):
        m.deliver(channel, b"x")
    assert m.deliveries == ()  # none: the shared empty log


@pytest.mark.parametrize("channel", [3, 4, 5, 6, 7])
def test_deliver_refuses_an_ungranted_channel(channel: int) -> None:
    m = machine(HALT)
    with pytest.raises(PermissionDenied):
        m.deliver(channel, b"x")
    granted = machine(HALT, grants=[channel])
    granted.deliver(channel, b"x")
    assert granted.deliveries == [Delivery(0, channel, b"x")]


@pytest.mark.parametrize("code", [(HALT,), (fault(3),)], ids=["halted", "faulted"])
def test_deliver_refuses_a_finished_machine(code: tuple[Instruction, ...]) -> None:
    m = run(*code)
    with pytest.raises(InvalidState):
        m.deliver(2, b"x")
    assert m.deliveries == ()  # none: the shared empty log


# ======================================================================= faults are atomic


def fault_case(
    case_id: str,
    code: tuple[Instruction, ...],
    fault_code: FaultCode,
    charge: int,
    *,
    detail: int | None = None,
    steps: int | None = None,
    **options: Any,
) -> Any:
    return pytest.param(code, fault_code, charge, detail, steps, options, id=case_id)


F = FaultCode
FAULT_CASES = [
    fault_case(
        "out-of-ticks", (li(1, 1), rrr(Opcode.MUL, 2, 1, 1)), F.OUT_OF_TICKS, 0, tick_budget=2
    ),
    fault_case("out-of-ticks-zero-budget", (HALT,), F.OUT_OF_TICKS, 0, tick_budget=0),
    fault_case(
        "out-of-ticks-recv-empty",
        (li(2, 8), recv(2, 3, 253, 2), recv(2, 3, 253, 2)),
        F.OUT_OF_TICKS,
        0,
        tick_budget=6,
    ),
    fault_case(
        "out-of-memory-stdout",
        (li(1, 20), send(0, 0, 1), send(0, 0, 1)),
        F.OUT_OF_MEMORY,
        3,
        memory_quota=32,
    ),
    fault_case(
        "out-of-memory-mixed",
        (li(1, 20), send(1, 0, 1), send(3, 0, 1)),
        F.OUT_OF_MEMORY,
        3,
        memory_quota=32,
        grants=[3],
    ),
    fault_case(
        "divide-by-zero",
        (*SET_ALL_FLAGS, li(1, 7), li(2, 9), rrr(Opcode.DIV, 2, 1, 0)),
        F.DIVIDE_BY_ZERO,
        2,
    ),
    fault_case(
        "modulo-by-zero",
        (*SET_ALL_FLAGS, li(1, 7), li(2, 9), rrr(Opcode.MOD, 2, 1, 0)),
        F.DIVIDE_BY_ZERO,
        2,
    ),
    fault_case(
        "load-past-quota", (li(1, 3), load(1, 0, QUOTA)), F.INVALID_ADDRESS, 1, memory_quota=QUOTA
    ),
    fault_case(
        "store-past-quota",
        (li(1, 0xFF), store(1, 0, QUOTA)),
        F.INVALID_ADDRESS,
        1,
        memory_quota=QUOTA,
    ),
    fault_case(
        "loadw-straddles",
        (li(1, 3), loadw(1, 0, QUOTA - 4)),
        F.INVALID_ADDRESS,
        1,
        memory_quota=QUOTA,
    ),
    fault_case(
        "storew-straddles-writes-nothing",
        (li(1, M64), storew(1, 0, QUOTA - 4)),
        F.INVALID_ADDRESS,
        1,
        memory_quota=QUOTA,
    ),
    fault_case("loadw-end-would-wrap", (li(1, M64 - 3), loadw(2, 1, 0)), F.INVALID_ADDRESS, 1),
    fault_case("pc-past-code", (NOP,), F.INVALID_ADDRESS, 0, steps=1),
    fault_case("jmp-past-code", (li(1, 1), jmp(2)), F.INVALID_ADDRESS, 1),
    fault_case("jz-taken-past-code", (li(1, 1), jz(0, 9)), F.INVALID_ADDRESS, 1),
    fault_case("jnz-taken-past-code", (li(1, 1), jnz(1, 9)), F.INVALID_ADDRESS, 1),
    fault_case("jlt-taken-past-code", (li(1, 1), jlt(0, 1, M64)), F.INVALID_ADDRESS, 1),
    fault_case("call-past-code", (li(1, 1), call(2)), F.INVALID_ADDRESS, 2),
    fault_case(
        "call-past-code-full-stack", (push(0), call(2)), F.INVALID_ADDRESS, 2, memory_quota=16
    ),
    fault_case("ret-past-code", (li(1, 3), push(1), RET), F.INVALID_ADDRESS, 2),
    fault_case(
        "unknown-opcode", (li(1, 1), Instruction(0xFF, 1, 1, 1, 1)), F.INVALID_INSTRUCTION, 1
    ),
    fault_case("opcode-zero", (Instruction(0x00),), F.INVALID_INSTRUCTION, 1),
    fault_case("push-overflow", (push(0), li(1, 5), push(1)), F.STACK_OVERFLOW, 1, memory_quota=16),
    fault_case("call-overflow", (push(0), call(0)), F.STACK_OVERFLOW, 2, memory_quota=16),
    fault_case("pop-underflow", (li(1, 7), pop(1)), F.STACK_UNDERFLOW, 1),
    fault_case("ret-underflow", (RET,), F.STACK_UNDERFLOW, 2),
    fault_case("send-channel-16", (send(16, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("send-channel-2^64-1", (send(M64, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("send-reserved-8", (send(8, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("send-reserved-15", (send(15, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("send-to-stdin", (send(2, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("recv-from-stdout", (recv(0, 1, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("recv-from-stderr", (recv(1, 1, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("recv-reserved", (recv(9, 1, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("recv-channel-16", (recv(16, 1, 0, 0),), F.CHANNEL_ERROR, 3),
    fault_case("poll-stdout", (poll(0, 1),), F.CHANNEL_ERROR, 1),
    fault_case("poll-reserved", (poll(12, 1),), F.CHANNEL_ERROR, 1),
    fault_case("poll-channel-16", (poll(16, 1),), F.CHANNEL_ERROR, 1),
    fault_case(
        "send-over-message-limit", (li(1, 9), send(0, 0, 1)), F.CHANNEL_ERROR, 3, message_limit=8
    ),
    fault_case(
        "send-limit-checked-before-memory",
        (li(1, 16), li(2, 17), send(0, 0, 1), send(0, 0, 1), send(0, 0, 2)),
        F.CHANNEL_ERROR,
        3,
        memory_quota=32,
        message_limit=16,
    ),
    fault_case(
        "recv-over-message-limit-keeps-message",
        (li(2, 100), recv(2, 3, 253, 2)),
        F.CHANNEL_ERROR,
        3,
        input=b"hello",
        message_limit=4,
    ),
    fault_case("send-ungranted", (send(3, 0, 0),), F.PERMISSION_DENIED, 3),
    fault_case("send-ungranted-before-range", (li(1, M64), send(4, 1, 1)), F.PERMISSION_DENIED, 3),
    fault_case("recv-ungranted-empty", (recv(5, 1, 0, 0),), F.PERMISSION_DENIED, 3),
    fault_case("poll-ungranted", (poll(7, 1),), F.PERMISSION_DENIED, 1),
    fault_case(
        "send-range",
        (li(1, QUOTA - 5), li(2, 10), send(0, 1, 2)),
        F.INVALID_ADDRESS,
        3,
        memory_quota=QUOTA,
    ),
    fault_case(
        "send-huge-length-is-a-range-fault", (li(2, M64), send(0, 0, 2)), F.INVALID_ADDRESS, 3
    ),
    fault_case(
        "send-range-checked-before-limit",
        (li(1, 100), send(0, 1, 1)),
        F.INVALID_ADDRESS,
        3,
        memory_quota=QUOTA,
        message_limit=8,
    ),
    fault_case(
        "recv-range-keeps-message",
        (li(1, QUOTA - 2), li(2, 10), recv(2, 3, 1, 2)),
        F.INVALID_ADDRESS,
        3,
        input=b"hello",
        memory_quota=QUOTA,
    ),
    fault_case(
        "recv-range-checked-before-limit",
        (li(1, QUOTA - 2), li(2, 10), recv(2, 3, 1, 2)),
        F.INVALID_ADDRESS,
        3,
        input=b"hello",
        memory_quota=QUOTA,
        message_limit=4,
    ),
    fault_case("user-fault", (li(1, 1), fault(42)), F.USER_FAULT, 1, detail=42),
    fault_case("user-fault-zero", (fault(0),), F.USER_FAULT, 1, detail=0),
    fault_case("user-fault-all-ones", (fault(M64),), F.USER_FAULT, 1, detail=M64),
]


def test_fault_cases_reach_every_fault_code() -> None:
    assert {case.values[1] for case in FAULT_CASES} == set(FaultCode)


@pytest.mark.parametrize(
    ("code", "fault_code", "charge", "detail", "steps", "options"), FAULT_CASES
)
def test_a_fault_keeps_pc_and_charge_and_changes_nothing_else(
    code: tuple[Instruction, ...],
    fault_code: FaultCode,
    charge: int,
    detail: int | None,
    steps: int | None,
    options: dict[str, Any],
) -> None:
    m = machine(*code, **options)
    setup_steps = len(code) - 1 if steps is None else steps
    step_n(m, setup_steps)
    before = m.snapshot()
    m.step()
    after = m.snapshot()
    expected = dataclasses.replace(
        before,
        state=FAULTED,
        fault=fault_code,
        fault_detail=detail,
        ticks_used=before.ticks_used + charge,
    )
    assert after == expected
    assert after.pc == setup_steps  # straight-line setup: the faulting instruction's index
    # A faulted machine is final: stepping or running again changes nothing.
    assert m.step() is FAULTED
    assert m.run() is FAULTED
    assert m.snapshot() == after


def test_out_of_memory_leaves_the_held_bytes_unchanged() -> None:
    m = run(li(1, 20), send(0, 0, 1), send(0, 0, 1), memory_quota=32)
    assert m.fault is FaultCode.OUT_OF_MEMORY
    assert m.held_bytes == 20
    assert m.stdout == bytes(20)


# ======================================================================= tick cut points

# 0 LI (1) · 1 MUL (2) · 2 SEND zero-length (3) · 3 CALL 5 (2) · 5 ADD (1) · 6 RET (2) · 4 HALT (1)
CUT_PROGRAM = (
    li(1, 7),
    rrr(Opcode.MUL, 2, 1, 1),
    send(0, 0, 0),
    call(5),
    HALT,
    rrr(Opcode.ADD, 3, 2, 1),
    RET,
)
# budget → (pc, ticks_used, r1, r2, r3, stack depth in words), worked out by hand.
CUT_TABLE = {
    0: (0, 0, 0, 0, 0, 0),
    1: (1, 1, 7, 0, 0, 0),
    2: (1, 1, 7, 0, 0, 0),
    3: (2, 3, 7, 49, 0, 0),
    4: (2, 3, 7, 49, 0, 0),
    5: (2, 3, 7, 49, 0, 0),
    6: (3, 6, 7, 49, 0, 0),
    7: (3, 6, 7, 49, 0, 0),
    8: (5, 8, 7, 49, 0, 1),
    9: (6, 9, 7, 49, 56, 1),
    10: (6, 9, 7, 49, 56, 1),
    11: (4, 11, 7, 49, 56, 0),
}


@pytest.mark.parametrize("tick_budget", range(14))
def test_out_of_ticks_at_every_cut_point_matches_the_hand_table(tick_budget: int) -> None:
    m = run(*CUT_PROGRAM, tick_budget=tick_budget)
    if tick_budget >= 12:
        assert (m.state, m.pc, m.ticks_used) == (HALTED, 4, 12)
        return
    pc, ticks, r1, r2, r3, depth = CUT_TABLE[tick_budget]
    assert (m.state, m.fault, m.fault_detail) == (FAULTED, FaultCode.OUT_OF_TICKS, None)
    assert (m.pc, m.ticks_used, m.ticks_remaining) == (pc, ticks, tick_budget - ticks)
    assert (m.registers[1], m.registers[2], m.registers[3]) == (r1, r2, r3)
    assert m.sp == m.stack_start - 8 * depth
    assert m.flags.halt is False


def predicted_by_stepping(
    code: tuple[Instruction, ...], tick_budget: int, **options: Any
) -> MachineSnapshot:
    """The snapshot a run with ``tick_budget`` must end in, from an unlimited step-by-step run."""
    m = machine(*code, tick_budget=1 << 40, **options)
    while m.state in (READY, RUNNING):
        before = m.snapshot()
        if (
            before.pc < len(code)
            and before.ticks_used + spec_cost(code[before.pc].opcode) > tick_budget
        ):
            return dataclasses.replace(
                before, state=FAULTED, fault=FaultCode.OUT_OF_TICKS, tick_budget=tick_budget
            )
        m.step()
    return dataclasses.replace(m.snapshot(), tick_budget=tick_budget)


CUT_PROGRAMS = {
    "calls-and-sends": (CUT_PROGRAM, {}),
    "loop-with-stack-and-output": (
        (
            li(1, 3),
            li(9, 1),
            li(10, 0x30),
            rrr(Opcode.ADD, 11, 1, 10),
            push(11),
            store(11, 253, 0),  # 3: loop
            li(12, 1),
            send(0, 253, 12),
            pop(13),
            rrr(Opcode.SUB, 1, 1, 9),
            rrr(Opcode.MUL, 14, 13, 13),
            jnz(1, 3),
            rrr(Opcode.DIV, 15, 14, 9),
            rrr(Opcode.MOD, 16, 14, 10),
            HALT,
        ),
        {},
    ),
    "input-poll-recv-fault": (
        (poll(2, 1), li(2, 4), recv(2, 3, 253, 2), TICK, NOP, fault(9)),
        {"input": b"abcdef"},
    ),
    "runs-off-the-end": ((li(1, 1), rrr(Opcode.NEG, 2, 1), NOP), {}),
    "blocks-on-recv": ((li(2, 4), recv(2, 3, 253, 2), recv(2, 3, 253, 2), HALT), {}),
}


@pytest.mark.parametrize("name", list(CUT_PROGRAMS))
def test_out_of_ticks_at_every_budget_matches_what_stepping_predicts(name: str) -> None:
    code, options = CUT_PROGRAMS[name]
    unlimited = run(*code, tick_budget=1 << 40, **options)
    total = unlimited.ticks_used
    assert total > 0
    for tick_budget in range(total + 2):
        m = run(*code, tick_budget=tick_budget, **options)
        assert m.snapshot() == predicted_by_stepping(code, tick_budget, **options), tick_budget
        assert m.ticks_used <= tick_budget


# ======================================================================= run, step, slices


def test_a_new_machine_is_ready_and_starts_running_on_the_first_step() -> None:
    m = machine(NOP, NOP, HALT)
    assert m.state is READY
    assert m.step() is RUNNING
    assert (m.pc, m.ticks_used) == (1, 1)


def test_step_executes_exactly_one_instruction() -> None:
    m = machine(rrr(Opcode.MUL, 1, 0, 0), send(0, 0, 0), HALT)
    m.step()
    assert (m.pc, m.ticks_used) == (1, 2)
    m.step()
    assert (m.pc, m.ticks_used) == (2, 5)
    assert m.step() is HALTED
    assert (m.pc, m.ticks_used) == (2, 6)
    assert m.step() is HALTED
    assert m.ticks_used == 6


def test_run_with_max_ticks_stops_once_that_many_ticks_were_spent_in_the_call() -> None:
    m = machine(*[rrr(Opcode.MUL, 1, 0, 0)] * 5, HALT)
    assert m.run(max_ticks=3) is RUNNING  # 2 < 3, then 4 ≥ 3: instruction granularity
    assert (m.pc, m.ticks_used) == (2, 4)
    assert m.run(max_ticks=1) is RUNNING
    assert (m.pc, m.ticks_used) == (3, 6)
    assert m.run(max_ticks=0) is RUNNING
    assert (m.pc, m.ticks_used) == (3, 6)
    assert m.run(max_ticks=4) is RUNNING
    assert (m.pc, m.ticks_used) == (5, 10)
    assert m.run(max_ticks=100) is HALTED
    assert m.ticks_used == 11


def test_run_with_max_ticks_zero_on_a_new_machine_executes_nothing() -> None:
    m = machine(HALT)
    assert m.run(max_ticks=0) is RUNNING
    assert (m.pc, m.ticks_used) == (0, 0)


def test_run_yielding_on_tick_stops_right_after_each_tick() -> None:
    m = machine(NOP, TICK, NOP, NOP, TICK, HALT)
    assert m.run(yield_on_tick=True) is RUNNING
    assert (m.pc, m.ticks_used) == (2, 2)
    assert m.run(yield_on_tick=True) is RUNNING
    assert (m.pc, m.ticks_used) == (5, 5)
    assert m.run(yield_on_tick=True) is HALTED
    assert m.ticks_used == 6


def test_run_without_yield_runs_through_ticks() -> None:
    m = machine(TICK, TICK, HALT)
    assert m.run() is HALTED


def test_max_ticks_and_yield_on_tick_combine() -> None:
    m = machine(NOP, NOP, NOP, TICK, HALT)
    assert m.run(max_ticks=2, yield_on_tick=True) is RUNNING
    assert m.pc == 2
    assert m.run(max_ticks=10, yield_on_tick=True) is RUNNING
    assert m.pc == 4


def test_slices_reach_the_same_state_as_one_run() -> None:
    code = CUT_PROGRAMS["loop-with-stack-and-output"][0]
    whole = run(*code)
    sliced = machine(*code)
    while sliced.run(max_ticks=3) is RUNNING:
        pass
    assert sliced.snapshot() == whole.snapshot()


# ======================================================================= snapshots and copies


def test_snapshot_is_a_frozen_value() -> None:
    m = run(li(1, 5), HALT)
    snapshot = m.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.pc = 3  # type: ignore[misc]
    assert isinstance(snapshot.registers, tuple)
    assert isinstance(snapshot.memory, bytes)


def test_snapshot_does_not_follow_later_changes() -> None:
    m = machine(li(1, 5), store(1, 253, 0), send(0, 253, 1), HALT, data=b"")
    snapshot = m.snapshot()
    m.run()
    assert snapshot.registers[1] == 0
    assert snapshot.memory[m.heap_start] == 0
    assert snapshot.state is READY
    assert snapshot != m.snapshot()


def test_snapshot_reports_every_observable_part() -> None:
    m = run(
        li(1, 2),
        send(0, 0, 1),
        send(1, 0, 1),
        send(3, 0, 1),
        recv(4, 2, 0, 0),
        HALT,
        data=b"hi",
        grants=[3, 4],
        tick_budget=100,
        input=b"in",
    )
    s = m.snapshot()
    assert (s.state, s.pc, s.blocked_channel, s.fault, s.fault_detail) == (
        BLOCKED,
        4,
        4,
        None,
        None,
    )
    assert (s.ticks_used, s.tick_budget) == (10, 100)
    assert (s.stdout, s.stderr, s.outbound) == (b"hi", b"hi", ((3, b"hi"),))
    assert s.inbound == ((2, (b"in",)),)
    assert s.sp == m.stack_start
    assert len(s.memory) == 65536 and s.memory[:2] == b"hi"


def test_copy_is_independent_of_the_original() -> None:
    m = machine(
        li(1, 5),
        TICK,
        store(1, 253, 0),
        push(1),
        send(0, 253, 1),
        recv(2, 2, 0, 0),
        TICK,
        HALT,
        input=b"x",
    )
    m.run(yield_on_tick=True)
    frozen = m.snapshot()
    twin = m.copy()
    twin.run()
    assert twin.state is HALTED
    assert m.snapshot() == frozen
    twin_after = twin.snapshot()
    m.run()
    assert m.snapshot() == twin_after
    m.copy().run()
    twin.copy().run()
    assert twin.snapshot() == twin_after


def test_a_delivery_to_a_copy_does_not_reach_the_original() -> None:
    m = machine(li(2, 8), recv(2, 3, 253, 2), recv(2, 3, 253, 2), HALT)
    m.run()
    assert m.state is BLOCKED
    twin = m.copy()
    twin.deliver(2, b"late")
    twin.run()
    assert twin.state is HALTED
    assert (m.state, m.deliveries, m.snapshot().inbound) == (BLOCKED, (), ())
    assert twin.deliveries == [Delivery(4, 2, b"late")]


def test_two_machines_for_the_same_program_run_identically() -> None:
    code = CUT_PROGRAMS["loop-with-stack-and-output"][0]
    assert run(*code).snapshot() == run(*code).snapshot()


# ======================================================================= layout and loading


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def env_entry(key: bytes, value: bytes) -> bytes:
    def padded(blob: bytes) -> bytes:
        return blob + bytes(-len(blob) % 8)

    return u64(len(key)) + padded(key) + u64(len(value)) + padded(value)


ENVIRONMENTS = [
    pytest.param({}, bytes(8), id="empty"),
    pytest.param(
        {b"A": b"1"},
        bytes.fromhex(
            "01000000000000000100000000000000410000000000000001000000000000003100000000000000"
        ),
        id="one-entry",
    ),
    pytest.param(
        {b"b": b"", b"a": b"xyz"},
        u64(2)
        + u64(1)
        + b"a"
        + bytes(7)
        + u64(3)
        + b"xyz"
        + bytes(5)
        + u64(1)
        + b"b"
        + bytes(7)
        + u64(0),
        id="sorted-and-empty-value",
    ),
    pytest.param(
        {b"KEY12345": b"v" * 9},
        u64(1) + u64(8) + b"KEY12345" + u64(9) + b"v" * 9 + bytes(7),
        id="exact-and-overlong-padding",
    ),
    pytest.param(
        {b"\xff": b"4", b"aa": b"3", b"a": b"1", b"B": b"2"},
        u64(4)
        + env_entry(b"B", b"2")
        + env_entry(b"a", b"1")
        + env_entry(b"aa", b"3")
        + env_entry(b"\xff", b"4"),
        id="byte-order",
    ),
]


@pytest.mark.parametrize(("environment", "block"), ENVIRONMENTS)
@pytest.mark.parametrize(
    ("data", "block_address"),
    [(b"", 0), (b"\x01\x02\x03", 8), (bytes(range(8)), 8), (bytes(range(9)), 16)],
    ids=["no-data", "3-bytes", "8-bytes", "9-bytes"],
)
def test_layout_start_registers_and_environment_block(
    environment: dict[bytes, bytes], block: bytes, data: bytes, block_address: int
) -> None:
    m = machine(HALT, data=data, environment=environment, memory_quota=1024)
    heap_start = block_address + len(block)
    assert len(block) % 8 == 0
    assert m.registers[253] == m.heap_start == heap_start
    assert m.registers[254] == block_address
    assert m.registers[255] == len(block)
    assert bytes(m.memory[: len(data)]) == data
    assert bytes(m.memory[len(data) : block_address]) == bytes(block_address - len(data))
    assert bytes(m.memory[block_address:heap_start]) == block
    assert bytes(m.memory[heap_start:]) == bytes(1024 - heap_start)
    assert m.sp == m.stack_start == 1024
    assert [r for i, r in enumerate(m.registers) if i < 253] == [0] * 253
    assert (m.pc, m.ticks_used, m.flags, m.state) == (0, 0, Flags(), READY)


def test_empty_environment_without_data_puts_the_heap_at_8() -> None:
    m = machine(HALT)
    assert (m.registers[253], m.registers[254], m.registers[255]) == (EMPTY_HEAP_START, 0, 8)


@pytest.mark.parametrize(
    ("data", "environment", "smallest_quota"),
    [
        (b"", {}, 16),
        (b"", {b"A": b"1"}, 48),
        (bytes(5), {}, 24),
        (bytes(8), {}, 24),
        (bytes(9), {b"A": b"1"}, 64),
    ],
)
def test_memory_fits_exactly_when_heap_start_plus_8_is_within_the_quota(
    data: bytes, environment: dict[bytes, bytes], smallest_quota: int
) -> None:
    m = machine(push(0), HALT, data=data, environment=environment, memory_quota=smallest_quota)
    m.run()
    assert m.state is HALTED  # exactly one stack slot
    with pytest.raises(MemoryQuotaExceeded):
        machine(HALT, data=data, environment=environment, memory_quota=smallest_quota - 1)


@pytest.mark.parametrize("quota", [0, 1, 7, 15])
def test_tiny_quotas_are_refused(quota: int) -> None:
    with pytest.raises(MemoryQuotaExceeded):
        machine(HALT, memory_quota=quota)


def test_quota_above_4_gib_is_refused() -> None:
    with pytest.raises(MemoryQuotaExceeded):
        machine(HALT, memory_quota=(1 << 32) + 1)


def test_a_program_with_unresolved_imports_is_refused_at_load() -> None:
    program = ForgeProgram(
        (call(0), HALT), relocations=(Relocation(0, RelocationKind.SYMBOL, b"ext"),)
    )
    with pytest.raises(InvalidProgram, match="ext"):
        Machine.load(program)


def test_code_and_data_relocations_do_not_stop_a_program_loading() -> None:
    program = ForgeProgram(
        (jmp(1), li(1, 0), HALT),
        data=b"x",
        relocations=(Relocation(0, RelocationKind.CODE), Relocation(1, RelocationKind.DATA)),
    )
    m = Machine.load(program)
    m.run()
    assert m.state is HALTED


@pytest.mark.parametrize("channel", [0, 1, 2, 8, 15, 16])
def test_only_channels_3_to_7_are_grantable(channel: int) -> None:
    if channel in (0, 1, 2):
        Machine.load(ForgeProgram((HALT,)), grants=[channel])  # always granted anyway
        return
    with pytest.raises(PermissionDenied):
        Machine.load(ForgeProgram((HALT,)), grants=[channel])


@pytest.mark.parametrize("granted", range(3, 8))
def test_no_ambient_authority_each_grant_opens_only_its_channel(granted: int) -> None:
    for channel in range(3, 8):
        m = run(poll(channel, 1), send(channel, 0, 0), HALT, grants=[granted])
        if channel == granted:
            assert m.state is HALTED
        else:
            assert (m.fault, m.pc) == (FaultCode.PERMISSION_DENIED, 0), channel


def test_all_grants_together_allow_every_in_out_channel() -> None:
    m = run(
        *(poll(c, c) for c in range(2, 8)),
        *(send(c, 0, 0) for c in range(3, 8)),
        HALT,
        grants=range(3, 8),
    )
    assert m.state is HALTED
