"""Properties of the reference interpreter over arbitrary instruction streams.

Programs are drawn from every opcode byte (unknown ones included) with wild operands
(any register, immediates near the code length, the memory quota, channel numbers and
the 64-bit edges) but always valid containers, so they load; then the machine must stop
within its budget without raising, deterministically, whichever way it is driven.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.isa import OPCODES, FaultCode, Instruction, Opcode, tick_cost
from kforge.machine import Machine, MachineSnapshot, MachineState
from kforge.program import ForgeProgram

M64 = (1 << 64) - 1
STOPPED = (MachineState.HALTED, MachineState.FAULTED, MachineState.BLOCKED)
ACTIVE = (MachineState.READY, MachineState.RUNNING)

PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@dataclasses.dataclass(frozen=True)
class Setup:
    program: ForgeProgram
    options: dict[str, Any]

    def load(self) -> Machine:
        return Machine.load(self.program, **self.options)


REGISTERS = st.one_of(st.integers(0, 7), st.sampled_from([253, 254, 255]), st.integers(0, 255))
OPCODE_BYTES = st.one_of(st.sampled_from(list(Opcode)), st.integers(0, 255))


@functools.cache
def immediates(code_length: int, quota: int) -> st.SearchStrategy[int]:
    return st.one_of(
        st.integers(0, code_length + 1),  # jump targets, mostly valid
        st.integers(0, 20),  # channels, small lengths
        st.sampled_from([quota - 8, quota - 1, quota, quota + 1, M64, M64 - 7, 1 << 63]),
        st.integers(0, M64),
    )


def valid_instruction(fields: tuple[int, int, int, int, int]) -> Instruction:
    """The drawn fields as an instruction that loads: a known opcode's unused fields zeroed."""
    opcode, rd, rs1, rs2, imm = fields
    values = {"rd": rd, "rs1": rs1, "rs2": rs2, "imm": imm}
    info = OPCODES.get(opcode)
    if info is not None:
        values = {name: value if name in info.fields else 0 for name, value in values.items()}
    return Instruction(opcode, **values)


SMALL_REGISTERS = st.sampled_from([1, 2, 3, 253])
CHANNEL_INSTRUCTIONS = st.tuples(
    st.sampled_from([Opcode.SEND, Opcode.RECV, Opcode.RECV, Opcode.POLL]),
    SMALL_REGISTERS,
    SMALL_REGISTERS,
    SMALL_REGISTERS,
    st.sampled_from([0, 1, 2, 2, 3, 4, 7, 8]),
).map(valid_instruction)


@functools.cache
def instructions_at(code_length: int, quota: int) -> st.SearchStrategy[list[Instruction]]:
    any_fields = st.tuples(
        OPCODE_BYTES, REGISTERS, REGISTERS, REGISTERS, immediates(code_length, quota)
    ).map(valid_instruction)
    stack = st.tuples(
        st.sampled_from([Opcode.PUSH, Opcode.POP, Opcode.RET, Opcode.CALL, Opcode.TICK]),
        SMALL_REGISTERS,
        SMALL_REGISTERS,
        st.just(0),
        st.integers(0, code_length + 1),
    ).map(valid_instruction)
    one = st.one_of(any_fields, any_fields, CHANNEL_INSTRUCTIONS, stack)
    return st.lists(one, min_size=code_length, max_size=code_length)


@st.composite
def setups(draw: st.DrawFn) -> Setup:
    code_length = draw(st.integers(1, 16))
    quota = draw(st.sampled_from([16, 24, 64, 200, 1024]))
    prologue = draw(
        st.lists(
            st.sampled_from(
                [
                    Instruction(Opcode.LI, rd=r, imm=v)
                    for r in range(1, 4)
                    for v in (0, 1, 8, quota - 8, M64)
                ]
            ),
            max_size=3,
        )
    )
    body = draw(instructions_at(code_length, quota))
    code = tuple(prologue + body)
    options: dict[str, Any] = {
        "memory_quota": quota,
        "tick_budget": draw(st.integers(0, 300)),
        "input": draw(st.binary(max_size=12)),
        "grants": draw(st.sets(st.integers(3, 7), max_size=5)),
        "message_limit": draw(st.sampled_from([4, 64, 65536])),
    }
    return Setup(ForgeProgram(code, entry=draw(st.integers(0, len(code) - 1))), options)


def run_to_stop(m: Machine) -> MachineSnapshot:
    m.run()
    return m.snapshot()


@PROPERTY_SETTINGS
@given(setups())
def test_any_program_stops_within_its_budget_without_raising(setup: Setup) -> None:
    m = setup.load()
    state = m.run()
    assert state in STOPPED
    assert m.state is state
    assert 0 <= m.ticks_used <= m.tick_budget
    assert m.ticks_remaining == m.tick_budget - m.ticks_used
    assert (m.fault is None) == (state is not MachineState.FAULTED)
    assert (m.blocked_channel is None) == (state is not MachineState.BLOCKED)
    assert (m.fault_detail is not None) == (m.fault is FaultCode.USER_FAULT)
    assert m.flags.halt == (state is MachineState.HALTED)
    assert m.heap_start <= m.sp <= m.stack_start
    assert all(0 <= value <= M64 for value in m.registers)
    assert len(m.memory) == setup.options["memory_quota"]
    if state is MachineState.BLOCKED:
        assert m.code[m.pc].opcode == Opcode.RECV
    if state is MachineState.HALTED:
        assert m.code[m.pc].opcode == Opcode.HALT


@PROPERTY_SETTINGS
@given(setups())
def test_two_runs_of_the_same_program_end_in_equal_snapshots(setup: Setup) -> None:
    assert run_to_stop(setup.load()) == run_to_stop(setup.load())


@PROPERTY_SETTINGS
@given(setups())
def test_stepping_one_instruction_at_a_time_equals_one_run(setup: Setup) -> None:
    whole = run_to_stop(setup.load())
    m = setup.load()
    steps = 0
    while m.state in ACTIVE:
        before_ticks = m.ticks_used
        m.step()
        steps += 1
        assert m.ticks_used >= before_ticks
        assert m.ticks_used - before_ticks <= 3
    assert m.snapshot() == whole
    assert steps <= setup.options["tick_budget"] + 1


def run_slice_by_stepping(m: Machine, max_ticks: int, yield_on_tick: bool) -> None:
    """One slice as the decisions define it: step until the machine stops, until
    ``max_ticks`` were spent in the slice, or right after a TICK when yielding."""
    start = m.ticks_used
    while m.state in ACTIVE and m.ticks_used < start + max_ticks:
        pc = m.pc
        m.step()
        if yield_on_tick and pc < len(m.code) and m.code[pc].opcode == Opcode.TICK:
            break


@PROPERTY_SETTINGS
@given(setups(), st.lists(st.integers(1, 12), min_size=1, max_size=8), st.booleans())
def test_running_in_random_slices_equals_one_run(
    setup: Setup, slices: list[int], yield_on_tick: bool
) -> None:
    whole = run_to_stop(setup.load())
    m, model = setup.load(), setup.load()
    turn = 0
    while m.state in ACTIVE:
        max_ticks = slices[turn % len(slices)]
        m.run(max_ticks=max_ticks, yield_on_tick=yield_on_tick)
        run_slice_by_stepping(model, max_ticks, yield_on_tick)
        assert m.snapshot() == model.snapshot(), f"slice {turn}"
        turn += 1
    assert m.snapshot() == whole


@PROPERTY_SETTINGS
@given(setups())
def test_every_step_charges_its_cost_or_nothing_and_faults_change_nothing_else(
    setup: Setup,
) -> None:
    m = setup.load()
    code = setup.program.code
    while m.state in ACTIVE:
        before = m.snapshot()
        m.step()
        after = m.snapshot()
        charged = after.ticks_used - before.ticks_used
        if after.state is MachineState.FAULTED:
            if after.fault in (FaultCode.OUT_OF_TICKS,) or before.pc >= len(code):
                assert charged == 0
            else:
                assert charged == tick_cost(code[before.pc].opcode)
            assert after == dataclasses.replace(
                before,
                state=MachineState.FAULTED,
                fault=after.fault,
                fault_detail=after.fault_detail,
                ticks_used=after.ticks_used,
            )
        elif after.state is MachineState.BLOCKED:
            assert charged == 0
            assert after == dataclasses.replace(
                before, state=MachineState.BLOCKED, blocked_channel=after.blocked_channel
            )
        else:
            assert charged == tick_cost(code[before.pc].opcode)


@PROPERTY_SETTINGS
@given(setups(), st.lists(st.binary(max_size=6), min_size=1, max_size=4))
def test_a_blocked_program_fed_the_same_messages_runs_the_same_way(
    setup: Setup, messages: list[bytes]
) -> None:
    first, second = setup.load(), setup.load()
    for m in (first, second):
        m.run()
        fed = 0
        while m.state is MachineState.BLOCKED and m.blocked_channel == 2 and fed < len(messages):
            m.deliver(2, messages[fed])
            fed += 1
            m.run()
    assert first.snapshot() == second.snapshot()
    assert first.deliveries == second.deliveries


@PROPERTY_SETTINGS
@given(setups(), st.integers(0, 40))
def test_a_copy_taken_mid_run_finishes_like_the_original(setup: Setup, prefix: int) -> None:
    m = setup.load()
    if prefix:
        m.run(max_ticks=prefix)
    before = m.snapshot()
    twin = m.copy()
    assert twin.snapshot() == before
    twin_end = run_to_stop(twin)
    assert m.snapshot() == before  # running the copy left the original alone
    assert run_to_stop(m) == twin_end
