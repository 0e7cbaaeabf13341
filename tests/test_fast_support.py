"""Shared program generators and comparison helpers for the fast-tier tests (no tests here).

Programs are built from the ISA table: every defined opcode with its operand
fields, unknown opcodes with arbitrary fields, and gadgets that reach the hard
cases (PUSH + RET to a computed target, addresses next to the quota edge).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st

from kforge.fast import FastTier, is_bound
from kforge.isa import OPCODES, WORD_MASK, Instruction, Opcode, Operand
from kforge.machine import Machine, MachineSnapshot, MachineState
from kforge.program import ForgeProgram

REGISTERS = (0, 1, 2, 3, 4, 5, 6, 7, 253, 254, 255)
UNKNOWN_OPCODES = (0x00, 0x07, 0x0F, 0x26, 0x36, 0x53, 0x63, 0x72, 0x99, 0xFF)
INTERESTING = (
    0,
    1,
    2,
    3,
    7,
    8,
    9,
    63,
    64,
    255,
    256,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    WORD_MASK,
    WORD_MASK - 7,
    WORD_MASK - 8,
)
QUOTAS = (24, 64, 100, 257, 1001, 4096, 65536, 65541, 70000)
MAX_TARGET = 48

registers = st.sampled_from(REGISTERS)
channels = st.integers(0, 17)
targets = st.integers(0, MAX_TARGET)


def _immediate(opcode: Opcode) -> st.SearchStrategy[int]:
    if opcode in (Opcode.LOAD, Opcode.STORE, Opcode.LOADW, Opcode.STOREW):
        return st.one_of(
            st.integers(0, 16),
            st.integers(WORD_MASK - 16, WORD_MASK),
            st.sampled_from(QUOTAS),
            st.sampled_from([q - k for q in QUOTAS for k in (1, 7, 8, 9)]),
        )
    return st.one_of(st.sampled_from(INTERESTING), st.integers(0, WORD_MASK), st.integers(0, 70000))


@st.composite
def known_instruction(draw: st.DrawFn, opcode: Opcode | None = None) -> Instruction:
    """One defined instruction with only the fields its opcode uses set."""
    op = opcode if opcode is not None else draw(st.sampled_from(list(Opcode)))
    fields: dict[str, int] = {}
    for operand in OPCODES[op].operands:
        if operand.is_register:
            fields[operand.field] = draw(registers)
        elif operand is Operand.TARGET:
            fields["imm"] = draw(targets)
        elif operand is Operand.CHANNEL:
            fields["imm"] = draw(channels)
        else:
            fields["imm"] = draw(_immediate(op))
    return Instruction(op, **fields)


unknown_instruction = st.builds(
    Instruction,
    st.sampled_from(UNKNOWN_OPCODES),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, WORD_MASK),
)


@st.composite
def computed_return(draw: st.DrawFn) -> list[Instruction]:
    """LI r, target; PUSH r; RET — a return to any instruction (or past the end)."""
    register = draw(registers)
    target = draw(st.one_of(targets, st.sampled_from([WORD_MASK, 1 << 32])))
    return [
        Instruction(Opcode.LI, rd=register, imm=target),
        Instruction(Opcode.PUSH, rs1=register),
        Instruction(Opcode.RET),
    ]


@st.composite
def load_value(draw: st.DrawFn) -> list[Instruction]:
    """LI with an interesting value (addresses near the quota, sign bits, all ones)."""
    value = draw(
        st.one_of(
            st.sampled_from(INTERESTING),
            st.sampled_from([q - k for q in QUOTAS for k in (0, 1, 7, 8, 9, 16)]),
            st.integers(0, WORD_MASK),
        )
    )
    return [Instruction(Opcode.LI, rd=draw(registers), imm=value)]


_SAFE_OPCODES = [
    Opcode.ADD,
    Opcode.SUB,
    Opcode.MUL,
    Opcode.NEG,
    Opcode.AND,
    Opcode.OR,
    Opcode.XOR,
    Opcode.NOT,
    Opcode.SHL,
    Opcode.SHR,
    Opcode.LI,
    Opcode.NOP,
    Opcode.TICK,
    Opcode.BUDGET,
]
_MEMORY_OPCODES = [Opcode.LOAD, Opcode.STORE, Opcode.LOADW, Opcode.STOREW]
ADDRESS_REGISTERS = (6, 7, 253, 254)


@st.composite
def memory_access(draw: st.DrawFn) -> list[Instruction]:
    """A load or store through a register that usually holds a valid address."""
    op = draw(st.sampled_from(_MEMORY_OPCODES))
    base = draw(st.sampled_from(ADDRESS_REGISTERS))
    value = draw(registers)
    imm = draw(st.one_of(st.integers(0, 24), _immediate(op)))
    if op in (Opcode.LOAD, Opcode.LOADW):
        return [Instruction(op, rd=value, rs1=base, imm=imm)]
    return [Instruction(op, rs1=value, rs2=base, imm=imm)]


@st.composite
def counted_loop(draw: st.DrawFn) -> list[Instruction]:
    """LI c, k; LI one, 1; body; SUB c, c, one; JNZ c, body — a backward jump that runs."""
    counter, one = draw(st.sampled_from([(5, 3), (2, 1)]))
    body = draw(st.lists(st.one_of(safe_instruction(), memory_access()), min_size=0, max_size=4))
    body = [insn for group in body for insn in group]
    head = [
        Instruction(Opcode.LI, rd=counter, imm=draw(st.integers(1, 12))),
        Instruction(Opcode.LI, rd=one, imm=1),
    ]
    tail = [
        Instruction(Opcode.SUB, rd=counter, rs1=counter, rs2=one),
        Instruction(Opcode.JNZ, rs1=counter, imm=(1 << 64) - len(body) - 1),
    ]
    return head + body + tail  # the JNZ target is relative here; ``programs`` makes it absolute


@st.composite
def faulting_loop(draw: st.DrawFn) -> list[Instruction]:
    """A self-looping block that faults in a later iteration, after dirtying registers.

    Either an address walking off the quota, or a divisor counting down to zero.
    """
    extra = draw(st.lists(safe_instruction(), max_size=2))
    extra_code = [insn for group in extra for insn in group]
    if draw(st.booleans()):
        op = draw(st.sampled_from(_MEMORY_OPCODES))
        access = (
            Instruction(op, rd=2, rs1=6)
            if op in (Opcode.LOAD, Opcode.LOADW)
            else Instruction(op, rs1=2, rs2=6)
        )
        step = draw(st.sampled_from([1, 7, 8, 512, 4096, 1 << 16, WORD_MASK - 7]))
        head = [
            Instruction(Opcode.LI, rd=6, imm=draw(st.integers(0, 64))),
            Instruction(Opcode.LI, rd=7, imm=step),
        ]
        body = [access, Instruction(Opcode.ADD, rd=6, rs1=6, rs2=7), *extra_code]
    else:
        head = [
            Instruction(Opcode.LI, rd=5, imm=draw(st.integers(1, 6))),
            Instruction(Opcode.LI, rd=3, imm=1),
            Instruction(Opcode.LI, rd=4, imm=100),
        ]
        body = [
            Instruction(Opcode.SUB, rd=5, rs1=5, rs2=3),
            *extra_code,
            Instruction(Opcode.DIV, rd=2, rs1=4, rs2=5),
        ]
    return [*head, *body, Instruction(Opcode.JMP, imm=(1 << 64) - len(body))]


def safe_instruction() -> st.SearchStrategy[list[Instruction]]:
    return st.builds(lambda i: [i], st.sampled_from(_SAFE_OPCODES).flatmap(known_instruction))


_RISKY = [
    Opcode.DIV,
    Opcode.MOD,
    Opcode.JMP,
    Opcode.JZ,
    Opcode.JNZ,
    Opcode.JLT,
    Opcode.PUSH,
    Opcode.POP,
    Opcode.CALL,
    Opcode.RET,
    Opcode.HALT,
    Opcode.FAULT,
    Opcode.SEND,
    Opcode.RECV,
    Opcode.POLL,
]


@st.composite
def channel_operation(draw: st.DrawFn) -> list[Instruction]:
    """SEND or RECV of a few bytes at a valid address on a usually valid channel."""
    channel = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 7]), channels))
    length = draw(st.integers(0, 12))
    if draw(st.booleans()):
        return [
            Instruction(Opcode.LI, rd=5, imm=length),
            Instruction(Opcode.SEND, rs1=6, rs2=5, imm=channel),
        ]
    return [
        Instruction(Opcode.LI, rd=5, imm=length),
        Instruction(Opcode.RECV, rd=draw(registers), rs1=6, rs2=5, imm=channel),
    ]


def _weighted(
    *pairs: tuple[int, st.SearchStrategy[list[Instruction]]],
) -> st.SearchStrategy[list[Instruction]]:
    return st.one_of(*[strategy for weight, strategy in pairs for _ in range(weight)])


item = _weighted(
    (6, safe_instruction()),
    (3, memory_access()),
    (3, st.builds(lambda i: [i], st.sampled_from(_RISKY).flatmap(known_instruction))),
    (1, st.builds(lambda i: [i], known_instruction())),
    (1, st.builds(lambda i: [i], unknown_instruction)),
    (2, load_value()),
    (1, computed_return()),
    (2, counted_loop()),
    (1, faulting_loop()),
    (2, channel_operation()),
)

_TARGETED = (Opcode.JMP, Opcode.JZ, Opcode.JNZ, Opcode.JLT, Opcode.CALL)


def _place_targets(groups: list[list[Instruction]]) -> tuple[Instruction, ...]:
    """Flatten, make loop jumps absolute and fold other targets into 0..len (len invalid)."""
    code: list[Instruction] = []
    for group in groups:
        for insn in group:
            if insn.opcode in _TARGETED and insn.imm > WORD_MASK // 2:  # a relative loop target
                insn = dataclasses.replace(insn, imm=len(code) + insn.imm - WORD_MASK - 1)
            code.append(insn)
    length = len(code)
    return tuple(
        dataclasses.replace(insn, imm=insn.imm % (length + 1))
        if insn.opcode in _TARGETED and insn.imm <= MAX_TARGET
        else insn
        for insn in code
    )


@st.composite
def programs(draw: st.DrawFn, max_items: int = 24) -> ForgeProgram:
    """A valid container holding any instruction stream, set up to run a while."""
    prologue = [
        Instruction(Opcode.LI, rd=6, imm=draw(st.integers(0, 16))),
        Instruction(Opcode.LI, rd=7, imm=draw(st.integers(0, 40))),
    ]
    items = draw(st.lists(item, min_size=1, max_size=max_items))
    ending = [[Instruction(Opcode.HALT)]] if draw(st.booleans()) else []
    code = _place_targets([prologue, *items, *ending])
    data = draw(st.binary(max_size=24))
    entry = draw(st.integers(0, len(code) - 1)) if draw(st.integers(0, 4)) == 0 else 0
    return ForgeProgram(code, data, entry)


@st.composite
def load_options(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of ``Machine.load``: quota, input, environment, grants, limit."""
    options: dict[str, Any] = {
        "memory_quota": draw(st.sampled_from(QUOTAS)),
        "input": draw(st.binary(max_size=20)),
        "grants": draw(st.sets(st.integers(3, 7), max_size=3)),
    }
    if draw(st.booleans()):
        options["environment"] = draw(
            st.dictionaries(st.binary(min_size=1, max_size=5), st.binary(max_size=6), max_size=2)
        )
    if draw(st.booleans()):
        options["message_limit"] = draw(st.sampled_from([0, 4, 16]))
    return options


def load(program: ForgeProgram, options: dict[str, Any], budget: int) -> Machine | None:
    """A machine, or ``None`` when the options do not fit the quota."""
    try:
        return Machine.load(program, tick_budget=budget, **options)
    except Exception as error:  # MemoryQuotaExceeded: the generator's quota was too small
        if type(error).__name__ == "MemoryQuotaExceeded":
            return None
        raise


def describe_difference(expected: MachineSnapshot, actual: MachineSnapshot) -> str:
    """The differing fields of two snapshots, short enough to read."""
    parts = []
    for field in dataclasses.fields(expected):
        left, right = getattr(expected, field.name), getattr(actual, field.name)
        if left == right:
            continue
        if field.name == "memory":
            where = [i for i in range(min(len(left), len(right))) if left[i] != right[i]][:8]
            parts.append(f"memory differs at {where} (lengths {len(left)}, {len(right)})")
        elif field.name == "registers":
            parts.append(
                f"registers {[(i, left[i], right[i]) for i in range(256) if left[i] != right[i]]}"
            )
        else:
            parts.append(f"{field.name}: reference {left!r}, fast {right!r}")
    return "; ".join(parts)


def assert_same(reference: Machine, fast: Machine, context: str = "") -> None:
    """The two machines are in the same observable state (and host bookkeeping)."""
    expected, actual = reference.snapshot(), fast.snapshot()
    assert expected == actual, f"{context}: {describe_difference(expected, actual)}"
    assert reference.held_bytes == fast.held_bytes, context
    assert reference.deliveries == fast.deliveries, context
    assert len(fast.memory) == fast.memory_quota, context
    if not is_bound(fast):  # unbound: a buffer of the kind Machine.load makes
        assert type(fast.memory) is type(reference.memory), context


Runner = Callable[[Machine, int | None, bool], MachineState]


def reference_runner(machine: Machine, max_ticks: int | None, yield_on_tick: bool) -> MachineState:
    return machine.run(max_ticks, yield_on_tick=yield_on_tick)


def tier_runner(fast_tier: FastTier, tier: str) -> Runner:
    def run(machine: Machine, max_ticks: int | None, yield_on_tick: bool) -> MachineState:
        return fast_tier.run(machine, tier=tier, max_ticks=max_ticks, yield_on_tick=yield_on_tick)  # type: ignore[arg-type]

    return run


def drive(
    machine: Machine,
    runner: Runner,
    *,
    max_ticks: int | None,
    yield_on_tick: bool,
    deliveries: list[tuple[int, bytes]],
    max_slices: int = 200,
) -> list[MachineSnapshot]:
    """Run slices until the machine stops; deliver a message whenever it blocks.

    Returns the snapshot after every slice, so two runs can be compared slice by slice.
    """
    pending = list(deliveries)
    history = []
    for _ in range(max_slices):
        state = runner(machine, max_ticks, yield_on_tick)
        history.append(machine.snapshot())
        if state is MachineState.BLOCKED:
            if not pending:
                break
            channel, data = pending.pop(0)
            channel = machine.blocked_channel if machine.blocked_channel is not None else channel
            machine.deliver(channel, data)
        elif state is not MachineState.RUNNING:
            break
    return history


# ------------------------------------------------------- procedures and calls

#: A target to resolve once the code is laid out: a procedure's entry, or an offset from
#: the instruction itself.
_Target = tuple[str, int]


def _resolve(
    parts: list[tuple[Instruction, _Target | None]], starts: list[int]
) -> list[Instruction]:
    code = []
    for index, (insn, target) in enumerate(parts):
        if target is not None:
            kind, value = target
            imm = starts[value] if kind == "procedure" else index + value
            insn = dataclasses.replace(insn, imm=imm)
        code.append(insn)
    return code


@st.composite
def _call_gadget(draw: st.DrawFn, procedures: int) -> list[tuple[Instruction, _Target | None]]:
    """A call of a procedure: plain, around PUSH/POP, under the depth counter r7, or
    indirect (return address and target pushed, then RET)."""
    callee = ("procedure", draw(st.integers(0, procedures - 1)))
    shape = draw(st.sampled_from(["plain", "saved", "counted", "indirect"]))
    if shape == "plain":
        return [(Instruction(Opcode.CALL), callee)]
    if shape == "saved":
        register = draw(registers)
        return [
            (Instruction(Opcode.PUSH, rs1=register), None),
            (Instruction(Opcode.CALL), callee),
            (Instruction(Opcode.POP, rd=register), None),
        ]
    if shape == "counted":  # r7 counts the calls still allowed; r6 holds 1
        return [
            (Instruction(Opcode.SUB, rd=7, rs1=7, rs2=6), None),
            (Instruction(Opcode.JLT, rs1=7, rs2=6), ("offset", 3)),
            (Instruction(Opcode.CALL), callee),
            (Instruction(Opcode.ADD, rd=7, rs1=7, rs2=6), None),
        ]
    return [
        (Instruction(Opcode.LI, rd=5), ("offset", 5)),
        (Instruction(Opcode.PUSH, rs1=5), None),
        (Instruction(Opcode.LI, rd=4), callee),
        (Instruction(Opcode.PUSH, rs1=4), None),
        (Instruction(Opcode.RET), None),
    ]


@st.composite
def procedure_programs(draw: st.DrawFn) -> ForgeProgram:
    """A main part calling a few procedures that call each other and themselves (bounded
    by a depth counter in r7), with leaf helpers, saved registers, indirect calls,
    computed returns and faults in callees: the shape of compiled Starlark code."""
    procedures = draw(st.integers(1, 5))
    body_item = _weighted(
        (6, safe_instruction()),
        (2, memory_access()),
        (1, st.builds(lambda i: [i], st.sampled_from(_RISKY).flatmap(known_instruction))),
        (1, computed_return()),
        (1, counted_loop()),
    )
    main: list[tuple[Instruction, _Target | None]] = [
        (Instruction(Opcode.LI, rd=6, imm=1), None),
        (Instruction(Opcode.LI, rd=7, imm=draw(st.integers(0, 70))), None),
    ]
    for _ in range(draw(st.integers(1, 3))):
        main += draw(_call_gadget(procedures))
    main.append((Instruction(Opcode.HALT), None))
    bodies = [main]
    for _ in range(procedures):
        body: list[tuple[Instruction, _Target | None]] = []
        for _ in range(draw(st.integers(0, 4))):
            if draw(st.booleans()):
                body += draw(_call_gadget(procedures))
            else:  # plain instructions, their jumps kept where they pointed in the group
                group = _place_targets([draw(body_item)])
                body += [
                    (insn, ("offset", insn.imm - k) if insn.opcode in _TARGETED else None)
                    for k, insn in enumerate(group)
                ]
        body.append((Instruction(Opcode.RET), None))
        bodies.append(body)
    starts, position = [], 0
    for body in bodies:
        starts.append(position)
        position += len(body)
    parts = [part for body in bodies for part in body]
    # a procedure index names bodies[1 + index]
    code = _resolve(parts, starts[1:])
    return ForgeProgram(tuple(code), draw(st.binary(max_size=16)))


@contextmanager
def fast_tiers(sizes: tuple[int, ...]) -> Iterator[dict[int, FastTier]]:
    """Fast tiers cutting procedures into regions of at most each of ``sizes`` blocks."""
    made = {
        size: FastTier(disk_cache=False, max_programs=4096, max_region_blocks=size)
        for size in sizes
    }
    try:
        yield made
    finally:
        for tier in made.values():
            tier.close()


def assert_slices_agree(
    fast_tier: FastTier,
    reference: Machine,
    fast: Machine,
    **arguments: Any,
) -> None:
    """Run both machines slice by slice (``drive``'s arguments); every slice must agree."""
    expected = drive(reference, reference_runner, **arguments)
    actual = drive(fast, tier_runner(fast_tier, "fast"), **arguments)
    assert len(expected) == len(actual)
    for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
        assert left == right, f"slice {index}"
    assert_same(reference, fast)


def assert_whole_runs_agree(
    fast_tier: FastTier, program: ForgeProgram, options: dict[str, Any], budget: int
) -> None:
    """Both tiers run ``program`` (loaded with ``options`` and ``budget``) to its end and agree;
    nothing to compare when the options do not fit the quota."""
    reference, fast = load(program, options, budget), load(program, options, budget)
    if reference is None or fast is None:
        return
    reference.run()
    fast_tier.run(fast, tier="fast")
    assert_same(reference, fast, f"budget {budget}")
