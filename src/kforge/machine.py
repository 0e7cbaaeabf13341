"""The Forge machine and its reference interpreter: the specification in code.

Every step runs in the same order: check ``pc`` is inside the code, check the
instruction's tick cost fits the budget, charge it (``_charge_ticks``, the one
place ticks are spent), then execute.  Each instruction is one small function
below whose docstring states its semantics, cost and faults.  An instruction
either completes or faults; a fault leaves no register, memory or flag change
behind, because every check comes before the first write.

The machine knows nothing of engines, buses or storage: the host creates it,
delivers inbound messages between slices, takes outbound messages, and reads
its state.

Why one module of this length: it is the specification in code, read top to
bottom like ``docs/spec.md``: the state, the one execution loop and one short
handler per instruction, whose shared checks (``_memory_range``, ``_channel``,
the flag rules) would only be harder to follow if split across files.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Final

from kforge.core import InvalidProgram, InvalidState, PermissionDenied
from kforge.isa import (
    DEFAULT_GRANTS,
    GRANTABLE_CHANNELS,
    RECEIVING_CHANNELS,
    REGISTER_COUNT,
    SENDING_CHANNELS,
    TICK_COSTS,
    WORD_MASK,
    Channel,
    FaultCode,
    Instruction,
    Opcode,
)
from kforge.memory import Layout, Memory, allocate_memory, encode_environment, plan_layout
from kforge.program import ForgeProgram

__all__ = [
    "DEFAULT_MESSAGE_LIMIT",
    "ENVIRONMENT_ADDRESS_REGISTER",
    "ENVIRONMENT_LENGTH_REGISTER",
    "HEAP_START_REGISTER",
    "Delivery",
    "Flags",
    "Machine",
    "MachineSnapshot",
    "MachineState",
]

DEFAULT_MESSAGE_LIMIT: Final = 64 * 1024
HEAP_START_REGISTER: Final = 253
ENVIRONMENT_ADDRESS_REGISTER: Final = 254
ENVIRONMENT_LENGTH_REGISTER: Final = 255
_SIGN_BIT: Final = 1 << 63
#: Performance note: an enum member's ``value`` is a descriptor call; the loop needs it once.
_TICK_OPCODE: Final = int(Opcode.TICK)
_UNLIMITED: Final = 1 << 80  # beyond any tick count or step count


class MachineState(Enum):
    READY = "READY"
    RUNNING = "RUNNING"
    BLOCKED = "BLOCKED"
    HALTED = "HALTED"
    FAULTED = "FAULTED"

    #: Set on each member below.  Performance note: a flag read, not a lookup by the
    #: enum's hash (the engine asks this several times per host call).
    _final: bool

    @property
    def is_final(self) -> bool:
        return self._final


for _state in MachineState:
    _state._final = _state in (MachineState.HALTED, MachineState.FAULTED)
_BLOCKED: Final = MachineState.BLOCKED


@dataclass(frozen=True, slots=True)
class Flags:
    zero: bool = False
    carry: bool = False
    overflow: bool = False
    halt: bool = False


@dataclass(frozen=True, slots=True)
class Delivery:
    """An inbound message as it became visible to the machine: the replay log's unit."""

    ticks_used: int
    channel: int
    data: bytes


@dataclass(frozen=True, slots=True)
class MachineSnapshot:
    """Everything observable about a machine, as plain immutable values.

    Two machines are in the same state exactly when their snapshots are equal.
    """

    state: MachineState
    pc: int
    sp: int
    registers: tuple[int, ...]
    flags: Flags
    ticks_used: int
    tick_budget: int
    fault: FaultCode | None
    fault_detail: int | None
    blocked_channel: int | None
    memory: bytes
    inbound: tuple[tuple[int, tuple[bytes, ...]], ...]
    outbound: tuple[tuple[int, bytes], ...]
    stdout: bytes
    stderr: bytes


class _Fault(Exception):
    """Raised by an instruction to fault the machine; never escapes ``step``."""

    def __init__(self, code: FaultCode, detail: int | None = None) -> None:
        self.code = code
        self.detail = detail


class Machine:
    """One Forge machine: registers, flags, memory, ticks and channels.

    Create with :meth:`Machine.load`.  Drive with :meth:`step` or :meth:`run`;
    hand inbound messages with :meth:`deliver`; take messages for channels
    3..7 with :meth:`take_outbound`.
    """

    __slots__ = (
        "blocked_channel",
        "carry",
        "code",
        "deliveries",
        "fault",
        "fault_detail",
        "grants",
        "halt",
        "heap_start",
        "held_bytes",
        "inbound",
        "memory",
        "memory_quota",
        "message_limit",
        "outbound",
        "overflow",
        "pc",
        "program",
        "registers",
        "sp",
        "stack_start",
        "state",
        "stderr",
        "stdout",
        "tick_budget",
        "ticks_used",
        "tier_state",
        "zero",
    )

    program: ForgeProgram
    code: tuple[Instruction, ...]
    registers: list[int]
    pc: int
    sp: int
    zero: bool
    carry: bool
    overflow: bool
    halt: bool
    memory: Memory
    memory_quota: int
    heap_start: int
    stack_start: int
    tick_budget: int
    ticks_used: int
    grants: frozenset[int]
    message_limit: int
    inbound: dict[int, list[bytes]]
    # Performance note: the output buffers and the logs below start as shared empty
    # immutables and become a list or bytearray on first use: an idle sandbox must
    # stay small (the seed's budget is under 1 KB beyond its memory and registers).
    outbound: list[tuple[int, bytes]] | tuple[()]
    held_bytes: int
    stdout: bytearray | bytes
    stderr: bytearray | bytes
    deliveries: list[Delivery] | tuple[()]
    state: MachineState
    fault: FaultCode | None
    fault_detail: int | None
    blocked_channel: int | None
    #: What an execution tier keeps with the machine between slices (the fast tier:
    #: the wasm instance whose memory ``memory`` is); ``None`` for a new machine and
    #: a copy.  Only the tier that set it reads it.
    tier_state: object | None

    @classmethod
    def load(
        cls,
        program: ForgeProgram,
        *,
        memory_quota: int = 65536,
        tick_budget: int = 1_000_000,
        input: bytes = b"",
        environment: Mapping[bytes, bytes] | None = None,
        grants: Iterable[int] = (),
        message_limit: int = DEFAULT_MESSAGE_LIMIT,
    ) -> Machine:
        """A READY machine for ``program``.

        Raises ``MemoryQuotaExceeded`` when data, environment and one stack slot do
        not fit ``memory_quota``; ``InvalidProgram`` when the program still has
        unresolved imports; ``PermissionDenied`` for a grant outside channels 3..7.
        """
        if tick_budget < 0 or tick_budget > WORD_MASK:
            raise InvalidProgram(f"tick budget {tick_budget} is outside 0..2^64-1")
        granted = granted_channels(frozenset(grants))
        environment_block, layout = plan_memory(program, memory_quota, environment or {})

        machine = cls.__new__(cls)
        machine.program = program
        machine.code = program.code
        machine.memory = allocate_memory(memory_quota)
        machine.memory[: len(program.data)] = program.data
        env_end = layout.environment_address + len(environment_block)
        machine.memory[layout.environment_address : env_end] = environment_block
        machine.memory_quota = memory_quota
        machine.heap_start = layout.heap_start
        machine.stack_start = layout.stack_start
        machine.registers = [0] * REGISTER_COUNT
        machine.registers[HEAP_START_REGISTER] = layout.heap_start
        machine.registers[ENVIRONMENT_ADDRESS_REGISTER] = layout.environment_address
        machine.registers[ENVIRONMENT_LENGTH_REGISTER] = len(environment_block)
        machine.pc = program.entry
        machine.sp = layout.stack_start
        machine.zero = machine.carry = machine.overflow = machine.halt = False
        machine.tick_budget = tick_budget
        machine.ticks_used = 0
        machine.grants = granted
        machine.message_limit = message_limit
        # Performance note: plain lists, not deques: an idle machine must stay small.
        machine.inbound = {Channel.STDIN: [bytes(input)]}
        machine.outbound = ()
        machine.held_bytes = 0
        machine.stdout = b""
        machine.stderr = b""
        machine.deliveries = ()
        machine.state = MachineState.READY
        machine.fault = None
        machine.fault_detail = None
        machine.blocked_channel = None
        machine.tier_state = None
        return machine

    # ----------------------------------------------------------------- running

    def step(self) -> MachineState:
        """Execute one instruction (or fault, or block) and return the new state.

        A READY machine starts RUNNING; a machine in any other state than
        RUNNING is left as it is.
        """
        if self.state is MachineState.READY:
            self.state = MachineState.RUNNING
        self._execute(_UNLIMITED, 1, yield_on_tick=False)
        return self.state

    def run(self, max_ticks: int | None = None, *, yield_on_tick: bool = False) -> MachineState:
        """Step until the machine stops running.

        With ``max_ticks`` the run also ends (still RUNNING) once that many ticks
        were spent in this call; with ``yield_on_tick`` it ends after a TICK
        instruction.  These are the execution slices of the scheduler.
        """
        if self.state is MachineState.READY:
            self.state = MachineState.RUNNING
        tick_limit = _UNLIMITED if max_ticks is None else self.ticks_used + max_ticks
        self._execute(tick_limit, _UNLIMITED, yield_on_tick=yield_on_tick)
        return self.state

    def _execute(self, tick_limit: int, step_limit: int, *, yield_on_tick: bool) -> None:
        """The one execution loop: pc check, tick check, charge, execute.

        Stops when the machine leaves RUNNING, after ``step_limit`` instructions,
        once ``ticks_used`` reaches ``tick_limit``, or after a TICK when asked.
        """
        # Performance note: locals instead of attribute lookups in the hot loop.
        code = self.code
        code_length = len(code)
        running = MachineState.RUNNING
        execute = EXECUTE
        costs = TICK_COSTS
        tick_opcode = _TICK_OPCODE
        steps = 0
        while self.state is running and steps < step_limit and self.ticks_used < tick_limit:
            steps += 1
            pc = self.pc
            if pc >= code_length:
                self._enter_fault(_Fault(FaultCode.INVALID_ADDRESS))
                return
            insn = code[pc]
            opcode = insn.opcode
            cost = costs[opcode]
            if self.ticks_used + cost > self.tick_budget:
                self._enter_fault(_Fault(FaultCode.OUT_OF_TICKS))
                return
            self.ticks_used += cost  # charged here (a RECV that blocks gives it back)
            try:
                execute[opcode](self, insn)
            except _Fault as fault:
                self._enter_fault(fault)
            if yield_on_tick and opcode == tick_opcode:
                return

    def _enter_fault(self, fault: _Fault) -> None:
        self.state = MachineState.FAULTED
        self.fault = fault.code
        self.fault_detail = fault.detail

    # ------------------------------------------------------------------ host side

    def deliver(self, channel: int, data: bytes) -> None:
        """Queue an inbound message on ``channel`` and wake a RECV waiting on it.

        Called by the host between slices only.  The delivery is logged with the
        ticks used at the moment it becomes visible, for replay.  Raises
        ``PermissionDenied`` for a channel that does not receive or is not granted,
        and ``InvalidState`` for a machine that has halted or faulted.
        """
        state = self.state
        if state.is_final:
            raise InvalidState(state, "deliver")
        if channel not in RECEIVING_CHANNELS:
            raise PermissionDenied(f"channel {channel} does not take inbound messages")
        if channel not in self.grants:
            raise PermissionDenied(f"channel {channel} is not granted to this sandbox")
        data = bytes(data)
        queue = self.inbound.get(channel)
        if queue is None:
            self.inbound[channel] = [data]
        else:
            queue.append(data)
        if isinstance(self.deliveries, tuple):
            self.deliveries = []
        self.deliveries.append(Delivery(self.ticks_used, channel, data))
        if state is _BLOCKED and self.blocked_channel == channel:
            self.state = MachineState.RUNNING
            self.blocked_channel = None

    def take_outbound(self) -> list[tuple[int, bytes]]:
        """Remove and return the pending messages the sandbox sent on channels 3..7."""
        taken = self.outbound
        if not taken:
            return []
        self.outbound = ()  # the list taken is the machine's no more: it is handed over whole
        for _, data in taken:
            self.held_bytes -= len(data)
        return list(taken) if isinstance(taken, tuple) else taken

    # ------------------------------------------------------------------ observing

    @property
    def flags(self) -> Flags:
        return Flags(self.zero, self.carry, self.overflow, self.halt)

    @property
    def ticks_remaining(self) -> int:
        return self.tick_budget - self.ticks_used

    def snapshot(self) -> MachineSnapshot:
        """An immutable copy of every observable part of the state."""
        return MachineSnapshot(
            state=self.state,
            pc=self.pc,
            sp=self.sp,
            registers=tuple(self.registers),
            flags=self.flags,
            ticks_used=self.ticks_used,
            tick_budget=self.tick_budget,
            fault=self.fault,
            fault_detail=self.fault_detail,
            blocked_channel=self.blocked_channel,
            memory=bytes(self.memory),
            inbound=tuple(
                (channel, tuple(queue)) for channel, queue in sorted(self.inbound.items()) if queue
            ),
            outbound=tuple(self.outbound),
            stdout=bytes(self.stdout),
            stderr=bytes(self.stderr),
        )

    def copy(self) -> Machine:
        """An independent machine in the same state (memory and queues copied).

        The copy has a buffer of its own and no tier state, whatever ``self`` is bound to.
        """
        twin = copy.copy(self)
        twin.tier_state = None
        twin.registers = list(self.registers)
        twin.memory = allocate_memory(self.memory_quota)
        twin.memory[:] = self.memory
        twin.inbound = {channel: list(queue) for channel, queue in self.inbound.items()}
        twin.outbound = list(self.outbound) if self.outbound else ()
        twin.stdout = bytearray(self.stdout) if self.stdout else b""
        twin.stderr = bytearray(self.stderr) if self.stderr else b""
        twin.deliveries = list(self.deliveries) if self.deliveries else ()
        return twin


def plan_memory(
    program: ForgeProgram, memory_quota: int, environment: Mapping[bytes, bytes]
) -> tuple[bytes, Layout]:
    """The environment block and memory layout a machine for ``program`` would get.

    Allocates nothing, so a host can check a request before charging for it.
    Raises ``InvalidProgram`` when the program still has unresolved imports and
    ``MemoryQuotaExceeded`` when data, environment and one stack slot do not fit.
    """
    unresolved = program.imports
    if unresolved:
        names = ", ".join(name.decode("utf-8", "replace") for name in unresolved)
        raise InvalidProgram(f"unresolved imports ({names}): link the program first")
    environment_block = encode_environment(environment)
    return environment_block, plan_layout(len(program.data), len(environment_block), memory_quota)


@lru_cache(maxsize=64)
def granted_channels(extra: frozenset[int]) -> frozenset[int]:
    """The channels a machine may use: 0..2 always, plus grants from 3..7.

    Raises ``PermissionDenied`` for any other channel.  Cached: machines share the set.
    """
    refused = sorted(extra - GRANTABLE_CHANNELS - DEFAULT_GRANTS)
    if refused:
        raise PermissionDenied(f"channel {refused[0]} cannot be granted (only 3..7)")
    return DEFAULT_GRANTS | extra


# =============================================================================
# Operand access: the checks every instruction relies on.
# =============================================================================


def _memory_range(m: Machine, address: int, size: int) -> int:
    """``address`` if ``[address, address + size)`` lies inside memory, else INVALID_ADDRESS.

    The address is taken mod 2^64 and the end is computed without wrap-around.
    """
    address &= WORD_MASK
    if address + size > m.memory_quota:
        raise _Fault(FaultCode.INVALID_ADDRESS)
    return address


def _read_word(m: Machine, address: int) -> int:
    return int.from_bytes(m.memory[address : address + 8], "little")


def _write_word(m: Machine, address: int, value: int) -> None:
    m.memory[address : address + 8] = value.to_bytes(8, "little")


def _code_target(m: Machine, target: int) -> int:
    """``target`` if it is an instruction index inside the code, else INVALID_ADDRESS."""
    if target >= len(m.code):
        raise _Fault(FaultCode.INVALID_ADDRESS)
    return target


def _push(m: Machine, value: int) -> None:
    if m.sp - 8 < m.heap_start:
        raise _Fault(FaultCode.STACK_OVERFLOW)
    m.sp -= 8
    _write_word(m, m.sp, value)


def _pop(m: Machine) -> int:
    if m.sp + 8 > m.stack_start:
        raise _Fault(FaultCode.STACK_UNDERFLOW)
    value = _read_word(m, m.sp)
    m.sp += 8
    return value


def _channel(m: Machine, channel: int, *, sending: bool) -> int:
    """Check ``channel`` for a send or a receive.

    CHANNEL_ERROR when it is past 15, reserved, or of the wrong direction;
    PERMISSION_DENIED when it is not granted to this sandbox.
    """
    if channel not in (SENDING_CHANNELS if sending else RECEIVING_CHANNELS):
        raise _Fault(FaultCode.CHANNEL_ERROR)
    if channel not in m.grants:
        raise _Fault(FaultCode.PERMISSION_DENIED)
    return channel


def _set_logic_flags(m: Machine, result: int) -> None:
    m.zero = result == 0
    m.carry = False
    m.overflow = False


def _signed(value: int) -> int:
    return value - (1 << 64) if value & _SIGN_BIT else value


# The flag rules, shared with the fast tier (which records operands and derives flags later).


def add_carry_overflow(a: int, b: int, result: int) -> tuple[bool, bool]:
    """ADD: carry on unsigned overflow (the wrapped sum is below an operand); signed overflow."""
    return result < a, bool(~(a ^ b) & (a ^ result) & _SIGN_BIT)


def sub_carry_overflow(a: int, b: int, result: int) -> tuple[bool, bool]:
    """SUB: carry on borrow (a < b); signed overflow."""
    return a < b, bool((a ^ b) & (a ^ result) & _SIGN_BIT)


def mul_carry_overflow(a: int, b: int) -> tuple[bool, bool]:
    """MUL: carry when the high 64 bits of a*b are non-zero; overflow when the signed product
    does not fit 64 bits."""
    signed_product = _signed(a) * _signed(b)
    return a * b > WORD_MASK, not -_SIGN_BIT <= signed_product < _SIGN_BIT


def neg_carry_overflow(a: int) -> tuple[bool, bool]:
    """NEG: carry when the operand is non-zero; overflow when it is 2^63."""
    return a != 0, a == _SIGN_BIT


# =============================================================================
# Arithmetic
# =============================================================================


def op_add(m: Machine, insn: Instruction) -> None:
    """ADD rd, rs1, rs2 — rd = R[rs1] + R[rs2] mod 2^64.  1 tick.

    Flags: zero; carry on unsigned overflow; overflow on signed overflow.
    """
    a, b = m.registers[insn.rs1], m.registers[insn.rs2]
    result = (a + b) & WORD_MASK
    m.registers[insn.rd] = result
    m.zero = result == 0
    m.carry, m.overflow = add_carry_overflow(a, b, result)
    m.pc += 1


def op_sub(m: Machine, insn: Instruction) -> None:
    """SUB rd, rs1, rs2 — rd = R[rs1] - R[rs2] mod 2^64.  1 tick.

    Flags: zero; carry on borrow (R[rs1] < R[rs2]); overflow on signed overflow.
    """
    a, b = m.registers[insn.rs1], m.registers[insn.rs2]
    result = (a - b) & WORD_MASK
    m.registers[insn.rd] = result
    m.zero = result == 0
    m.carry, m.overflow = sub_carry_overflow(a, b, result)
    m.pc += 1


def op_mul(m: Machine, insn: Instruction) -> None:
    """MUL rd, rs1, rs2 — rd = low 64 bits of R[rs1] * R[rs2].  2 ticks.

    Flags: zero; carry when the high 64 bits of the unsigned product are non-zero;
    overflow when the signed product does not fit 64 bits.
    """
    a, b = m.registers[insn.rs1], m.registers[insn.rs2]
    result = (a * b) & WORD_MASK
    m.registers[insn.rd] = result
    m.zero = result == 0
    m.carry, m.overflow = mul_carry_overflow(a, b)
    m.pc += 1


def op_div(m: Machine, insn: Instruction) -> None:
    """DIV rd, rs1, rs2 — rd = R[rs1] / R[rs2], unsigned, rounded down.  2 ticks.

    Flags: zero; carry and overflow cleared.  Faults DIVIDE_BY_ZERO when R[rs2] = 0.
    """
    a, b = m.registers[insn.rs1], m.registers[insn.rs2]
    if b == 0:
        raise _Fault(FaultCode.DIVIDE_BY_ZERO)
    result = a // b
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_mod(m: Machine, insn: Instruction) -> None:
    """MOD rd, rs1, rs2 — rd = R[rs1] mod R[rs2], unsigned.  2 ticks.

    Flags: zero; carry and overflow cleared.  Faults DIVIDE_BY_ZERO when R[rs2] = 0.
    """
    a, b = m.registers[insn.rs1], m.registers[insn.rs2]
    if b == 0:
        raise _Fault(FaultCode.DIVIDE_BY_ZERO)
    result = a % b
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_neg(m: Machine, insn: Instruction) -> None:
    """NEG rd, rs1 — rd = 0 - R[rs1] mod 2^64.  1 tick.

    Flags: zero; carry when R[rs1] != 0; overflow when R[rs1] = 2^63.
    """
    a = m.registers[insn.rs1]
    result = -a & WORD_MASK
    m.registers[insn.rd] = result
    m.zero = result == 0
    m.carry, m.overflow = neg_carry_overflow(a)
    m.pc += 1


# =============================================================================
# Bitwise
# =============================================================================


def op_and(m: Machine, insn: Instruction) -> None:
    """AND rd, rs1, rs2 — bitwise and.  1 tick.  Flags: zero; carry, overflow cleared."""
    result = m.registers[insn.rs1] & m.registers[insn.rs2]
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_or(m: Machine, insn: Instruction) -> None:
    """OR rd, rs1, rs2 — bitwise or.  1 tick.  Flags: zero; carry, overflow cleared."""
    result = m.registers[insn.rs1] | m.registers[insn.rs2]
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_xor(m: Machine, insn: Instruction) -> None:
    """XOR rd, rs1, rs2 — bitwise exclusive or.  1 tick.  Flags: zero; carry, overflow cleared."""
    result = m.registers[insn.rs1] ^ m.registers[insn.rs2]
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_not(m: Machine, insn: Instruction) -> None:
    """NOT rd, rs1 — bitwise complement.  1 tick.  Flags: zero; carry, overflow cleared."""
    result = ~m.registers[insn.rs1] & WORD_MASK
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_shl(m: Machine, insn: Instruction) -> None:
    """SHL rd, rs1, rs2 — rd = R[rs1] << (R[rs2] & 63) mod 2^64.  1 tick.

    Flags: zero; carry, overflow cleared.
    """
    result = (m.registers[insn.rs1] << (m.registers[insn.rs2] & 63)) & WORD_MASK
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


def op_shr(m: Machine, insn: Instruction) -> None:
    """SHR rd, rs1, rs2 — rd = R[rs1] >> (R[rs2] & 63), logical.  1 tick.

    Flags: zero; carry, overflow cleared.
    """
    result = m.registers[insn.rs1] >> (m.registers[insn.rs2] & 63)
    m.registers[insn.rd] = result
    _set_logic_flags(m, result)
    m.pc += 1


# =============================================================================
# Memory and stack
# =============================================================================


def op_load(m: Machine, insn: Instruction) -> None:
    """LOAD rd, rs1, imm — rd = byte at R[rs1] + imm (wrapping), zero-extended.  1 tick.

    Faults INVALID_ADDRESS when the byte is outside memory.
    """
    address = _memory_range(m, m.registers[insn.rs1] + insn.imm, 1)
    m.registers[insn.rd] = m.memory[address]
    m.pc += 1


def op_store(m: Machine, insn: Instruction) -> None:
    """STORE rs1, rs2, imm — byte at R[rs2] + imm (wrapping) = R[rs1] & 0xFF.  1 tick.

    Faults INVALID_ADDRESS when the byte is outside memory.
    """
    address = _memory_range(m, m.registers[insn.rs2] + insn.imm, 1)
    m.memory[address] = m.registers[insn.rs1] & 0xFF
    m.pc += 1


def op_loadw(m: Machine, insn: Instruction) -> None:
    """LOADW rd, rs1, imm — rd = little-endian u64 at R[rs1] + imm; no alignment rule.  1 tick.

    Faults INVALID_ADDRESS when any of the 8 bytes is outside memory.
    """
    address = _memory_range(m, m.registers[insn.rs1] + insn.imm, 8)
    m.registers[insn.rd] = _read_word(m, address)
    m.pc += 1


def op_storew(m: Machine, insn: Instruction) -> None:
    """STOREW rs1, rs2, imm — little-endian u64 R[rs1] to R[rs2] + imm.  1 tick.

    Faults INVALID_ADDRESS when any of the 8 bytes is outside memory.
    """
    address = _memory_range(m, m.registers[insn.rs2] + insn.imm, 8)
    _write_word(m, address, m.registers[insn.rs1])
    m.pc += 1


def op_push(m: Machine, insn: Instruction) -> None:
    """PUSH rs1 — sp -= 8; u64 at sp = R[rs1].  1 tick.

    Faults STACK_OVERFLOW when sp - 8 < heap_start.
    """
    _push(m, m.registers[insn.rs1])
    m.pc += 1


def op_pop(m: Machine, insn: Instruction) -> None:
    """POP rd — rd = u64 at sp; sp += 8.  1 tick.

    Faults STACK_UNDERFLOW when sp + 8 > stack_start.
    """
    m.registers[insn.rd] = _pop(m)
    m.pc += 1


# =============================================================================
# Control flow
# =============================================================================


def op_jmp(m: Machine, insn: Instruction) -> None:
    """JMP target — pc = imm.  1 tick.  Faults INVALID_ADDRESS when imm is outside the code."""
    m.pc = _code_target(m, insn.imm)


def op_jz(m: Machine, insn: Instruction) -> None:
    """JZ rs1, target — pc = imm when R[rs1] = 0, else pc + 1.  1 tick.

    Faults INVALID_ADDRESS when the jump is taken and imm is outside the code.
    """
    if m.registers[insn.rs1] == 0:
        m.pc = _code_target(m, insn.imm)
    else:
        m.pc += 1


def op_jnz(m: Machine, insn: Instruction) -> None:
    """JNZ rs1, target — pc = imm when R[rs1] != 0, else pc + 1.  1 tick.

    Faults INVALID_ADDRESS when the jump is taken and imm is outside the code.
    """
    if m.registers[insn.rs1] != 0:
        m.pc = _code_target(m, insn.imm)
    else:
        m.pc += 1


def op_jlt(m: Machine, insn: Instruction) -> None:
    """JLT rs1, rs2, target — pc = imm when R[rs1] < R[rs2] (unsigned), else pc + 1.  1 tick.

    Faults INVALID_ADDRESS when the jump is taken and imm is outside the code.
    """
    if m.registers[insn.rs1] < m.registers[insn.rs2]:
        m.pc = _code_target(m, insn.imm)
    else:
        m.pc += 1


def op_call(m: Machine, insn: Instruction) -> None:
    """CALL target — push pc + 1, pc = imm.  2 ticks.

    Faults INVALID_ADDRESS when imm is outside the code (checked first), then
    STACK_OVERFLOW when the return address does not fit the stack.
    """
    target = _code_target(m, insn.imm)
    _push(m, m.pc + 1)
    m.pc = target


def op_ret(m: Machine, insn: Instruction) -> None:
    """RET — pc = popped u64.  2 ticks.

    Faults STACK_UNDERFLOW on an empty stack, then INVALID_ADDRESS when the popped
    value is outside the code (the pop is then undone: sp is unchanged).
    """
    if m.sp + 8 > m.stack_start:
        raise _Fault(FaultCode.STACK_UNDERFLOW)
    target = _code_target(m, _read_word(m, m.sp))
    m.sp += 8
    m.pc = target


# =============================================================================
# Immediates and system
# =============================================================================


def op_li(m: Machine, insn: Instruction) -> None:
    """LI rd, imm — rd = imm.  1 tick."""
    m.registers[insn.rd] = insn.imm
    m.pc += 1


def op_halt(m: Machine, insn: Instruction) -> None:
    """HALT — state HALTED, halt flag set, pc stays.  1 tick."""
    m.state = MachineState.HALTED
    m.halt = True


def op_fault(m: Machine, insn: Instruction) -> None:
    """FAULT code — fault USER_FAULT carrying imm as the user's code.  1 tick."""
    raise _Fault(FaultCode.USER_FAULT, insn.imm)


def op_nop(m: Machine, insn: Instruction) -> None:
    """NOP — nothing.  1 tick."""
    m.pc += 1


def op_tick(m: Machine, insn: Instruction) -> None:
    """TICK — ends the current execution slice (a cooperative yield); otherwise NOP.  1 tick."""
    m.pc += 1


def op_budget(m: Machine, insn: Instruction) -> None:
    """BUDGET rd — rd = tick_budget - ticks_used, after this instruction's charge.  1 tick."""
    m.registers[insn.rd] = m.tick_budget - m.ticks_used
    m.pc += 1


def op_invalid(m: Machine, insn: Instruction) -> None:
    """Any unknown opcode — faults INVALID_INSTRUCTION.  1 tick."""
    raise _Fault(FaultCode.INVALID_INSTRUCTION)


# =============================================================================
# Channels
# =============================================================================


def op_send(m: Machine, insn: Instruction) -> None:
    """SEND ch, rs1, rs2 — enqueue a copy of mem[R[rs1] .. R[rs1] + R[rs2]] on ch (= imm).  3 ticks.

    Stdout and stderr messages are appended to the sandbox's output; messages on
    channels 3..7 wait until the host takes them.  Faults, in order of checking:
    CHANNEL_ERROR (ch > 15, reserved or not sending), PERMISSION_DENIED (not
    granted), INVALID_ADDRESS (range outside memory), CHANNEL_ERROR (longer than
    the message limit), OUT_OF_MEMORY (the bytes the host holds for the sandbox
    would exceed its memory quota).
    """
    channel = _channel(m, insn.imm, sending=True)
    length = m.registers[insn.rs2]
    address = _memory_range(m, m.registers[insn.rs1], length)
    if length > m.message_limit:
        raise _Fault(FaultCode.CHANNEL_ERROR)
    if m.held_bytes + length > m.memory_quota:
        raise _Fault(FaultCode.OUT_OF_MEMORY)
    message = bytes(m.memory[address : address + length])
    m.held_bytes += length
    if channel == Channel.STDOUT:
        m.stdout = _grown(m.stdout, message)
    elif channel == Channel.STDERR:
        m.stderr = _grown(m.stderr, message)
    else:
        if isinstance(m.outbound, tuple):
            m.outbound = []
        m.outbound.append((channel, message))
    m.pc += 1


def _grown(buffer: bytearray | bytes, message: bytes) -> bytearray:
    """``buffer`` with ``message`` appended in place (a bytearray from the first write on)."""
    grown = buffer if isinstance(buffer, bytearray) else bytearray(buffer)
    grown += message
    return grown


def op_recv(m: Machine, insn: Instruction) -> None:
    """RECV ch, rd, rs1, rs2 — take the head message m of ch (= imm).  3 ticks.

    With n = min(len(m), R[rs2]), copies m[0..n] to mem[R[rs1]..] and sets
    rd = len(m); the message is consumed whole (rd > R[rs2] tells of truncation).
    On an empty queue the machine BLOCKS on ch with pc unchanged and nothing
    charged.  Faults, in order: CHANNEL_ERROR (ch > 15, reserved or not
    receiving), PERMISSION_DENIED (not granted), INVALID_ADDRESS (the n bytes
    are outside memory), CHANNEL_ERROR (the message is longer than the limit).
    """
    channel = _channel(m, insn.imm, sending=False)
    queue = m.inbound.get(channel)
    if not queue:
        # Performance note: blocking is no exception (one per host call's round trip); the
        # loop sees the state.  The charge it made is given back: a blocked RECV is free.
        m.ticks_used -= TICK_COSTS[insn.opcode]
        m.state = MachineState.BLOCKED
        m.blocked_channel = channel
        return
    message = queue[0]
    count = min(len(message), m.registers[insn.rs2])
    address = _memory_range(m, m.registers[insn.rs1], count)
    if len(message) > m.message_limit:
        raise _Fault(FaultCode.CHANNEL_ERROR)
    del queue[0]
    m.memory[address : address + count] = message[:count]
    m.registers[insn.rd] = len(message)
    m.pc += 1


def op_poll(m: Machine, insn: Instruction) -> None:
    """POLL ch, rd — rd = number of messages waiting on ch (= imm).  1 tick.

    Faults CHANNEL_ERROR (ch > 15, reserved or not receiving), PERMISSION_DENIED.
    """
    channel = _channel(m, insn.imm, sending=False)
    queue = m.inbound.get(channel)
    m.registers[insn.rd] = len(queue) if queue else 0
    m.pc += 1


_HANDLERS: Final[dict[Opcode, Callable[[Machine, Instruction], None]]] = {
    Opcode.ADD: op_add,
    Opcode.SUB: op_sub,
    Opcode.MUL: op_mul,
    Opcode.DIV: op_div,
    Opcode.MOD: op_mod,
    Opcode.NEG: op_neg,
    Opcode.AND: op_and,
    Opcode.OR: op_or,
    Opcode.XOR: op_xor,
    Opcode.NOT: op_not,
    Opcode.SHL: op_shl,
    Opcode.SHR: op_shr,
    Opcode.LOAD: op_load,
    Opcode.STORE: op_store,
    Opcode.LOADW: op_loadw,
    Opcode.STOREW: op_storew,
    Opcode.PUSH: op_push,
    Opcode.POP: op_pop,
    Opcode.JMP: op_jmp,
    Opcode.JZ: op_jz,
    Opcode.JNZ: op_jnz,
    Opcode.JLT: op_jlt,
    Opcode.CALL: op_call,
    Opcode.RET: op_ret,
    Opcode.LI: op_li,
    Opcode.HALT: op_halt,
    Opcode.FAULT: op_fault,
    Opcode.NOP: op_nop,
    Opcode.SEND: op_send,
    Opcode.RECV: op_recv,
    Opcode.POLL: op_poll,
    Opcode.TICK: op_tick,
    Opcode.BUDGET: op_budget,
}

#: Handler per opcode byte, unknown opcodes included.
EXECUTE: Final[tuple[Callable[[Machine, Instruction], None], ...]] = tuple(
    _HANDLERS[Opcode(op)] if op in Opcode._value2member_map_ else op_invalid for op in range(256)
)
