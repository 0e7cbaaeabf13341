"""The Forge instruction set: the one table every other part reads.

Opcodes, mnemonics, operand shapes and tick costs; channel numbers and
directions; fault codes; the 16-byte instruction encoding.  The assembler,
disassembler, container validation, both execution tiers and the docs are
all driven from here, so nothing else restates these facts.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Final

__all__ = [
    "CHANNEL_COUNT",
    "CHANNEL_DIRECTIONS",
    "DEFAULT_GRANTS",
    "GRANTABLE_CHANNELS",
    "INSTRUCTION_SIZE",
    "OPCODES",
    "OPCODE_BY_MNEMONIC",
    "RECEIVING_CHANNELS",
    "REGISTER_COUNT",
    "SENDING_CHANNELS",
    "TICK_COSTS",
    "UNKNOWN_OPCODE_COST",
    "WORD_MASK",
    "Channel",
    "ChannelDirection",
    "FaultCode",
    "FlagEffect",
    "Instruction",
    "OpInfo",
    "OpKind",
    "Opcode",
    "Operand",
    "decode_instruction",
    "encode_instruction",
    "opcodes_where",
    "tick_cost",
]

REGISTER_COUNT: Final = 256
WORD_MASK: Final = (1 << 64) - 1
INSTRUCTION_SIZE: Final = 16
UNKNOWN_OPCODE_COST: Final = 1

_INSTRUCTION = struct.Struct("<BBBBIQ")


class Opcode(IntEnum):
    """Every defined opcode; any other byte value is an unknown opcode."""

    ADD = 0x01
    SUB = 0x02
    MUL = 0x03
    DIV = 0x04
    MOD = 0x05
    NEG = 0x06
    AND = 0x10
    OR = 0x11
    XOR = 0x12
    NOT = 0x13
    SHL = 0x14
    SHR = 0x15
    LOAD = 0x20
    STORE = 0x21
    LOADW = 0x22
    STOREW = 0x23
    PUSH = 0x24
    POP = 0x25
    JMP = 0x30
    JZ = 0x31
    JNZ = 0x32
    JLT = 0x33
    CALL = 0x34
    RET = 0x35
    LI = 0x40
    HALT = 0x50
    FAULT = 0x51
    NOP = 0x52
    SEND = 0x60
    RECV = 0x61
    POLL = 0x62
    TICK = 0x70
    BUDGET = 0x71


class FaultCode(IntEnum):
    """Why a machine stopped in FAULTED: guest-side, part of the machine's state."""

    OUT_OF_TICKS = 0x01  # the next instruction's cost exceeds the remaining budget
    OUT_OF_MEMORY = 0x02  # a SEND would make the host hold more than the memory quota
    DIVIDE_BY_ZERO = 0x03  # DIV or MOD with a zero divisor
    INVALID_ADDRESS = 0x04  # memory range outside the quota, or pc / target outside the code
    INVALID_INSTRUCTION = 0x05  # an unknown opcode was executed
    STACK_OVERFLOW = 0x06  # PUSH or CALL below heap_start
    STACK_UNDERFLOW = 0x07  # POP or RET above stack_start
    CHANNEL_ERROR = 0x08  # bad channel number, reserved channel, wrong direction, message too big
    PERMISSION_DENIED = 0x09  # a channel the sandbox was not granted
    USER_FAULT = 0xFF  # the FAULT instruction; its immediate is the user's code


class Operand(Enum):
    """One operand in assembly order; ``field`` is the instruction field it fills."""

    RD = "rd"  # a register written
    RS1 = "rs1"  # a register read
    RS2 = "rs2"  # a register read
    IMM = "imm"  # an immediate value or memory offset
    TARGET = "target"  # an instruction index (jump, call), held in imm
    CHANNEL = "channel"  # a channel number, held in imm

    @property
    def field(self) -> str:
        return self.value if self.value in ("rd", "rs1", "rs2") else "imm"

    @property
    def is_register(self) -> bool:
        return self.field != "imm"


class OpKind(Enum):
    """What an instruction does, in the terms the fast tier's compiler plans by."""

    ARITHMETIC = "arithmetic"  # ADD SUB MUL DIV MOD NEG
    LOGIC = "logic"  # AND OR XOR NOT SHL SHR
    MEMORY = "memory"  # LOAD STORE LOADW STOREW
    STACK = "stack"  # PUSH POP
    JUMP = "jump"  # JMP and the conditional jumps: a static target in imm
    CALL = "call"  # a static target in imm, and a return address pushed
    RETURN = "return"  # a dynamic target popped from the stack
    IMMEDIATE = "immediate"  # LI
    STOP = "stop"  # HALT FAULT: the machine ends
    NOTHING = "nothing"  # NOP
    CHANNEL = "channel"  # SEND RECV POLL: run by the host (the reference interpreter) only
    YIELD = "yield"  # TICK: a scheduling point
    METER = "meter"  # BUDGET: reads the tick counter


class FlagEffect(Enum):
    """How an instruction changes the flags (the rules are ``kforge.machine``'s flag functions)."""

    NONE = "none"  # leaves zero, carry and overflow as they are
    ARITHMETIC = "arithmetic"  # sets zero, carry and overflow from the operation
    LOGIC = "logic"  # sets zero from the result, clears carry and overflow


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What the table knows of one opcode.

    ``faults`` are the faults executing it can raise besides ``OUT_OF_TICKS``,
    which any instruction can.
    """

    opcode: Opcode
    mnemonic: str
    operands: tuple[Operand, ...]
    ticks: int
    kind: OpKind
    flags: FlagEffect = FlagEffect.NONE
    faults: frozenset[FaultCode] = frozenset()

    @property
    def fields(self) -> frozenset[str]:
        """The instruction fields this opcode uses; the others must be zero."""
        return frozenset(operand.field for operand in self.operands)

    @property
    def is_host(self) -> bool:
        """Whether only the host runs it (channels): compiled code hands it back."""
        return self.kind is OpKind.CHANNEL

    @property
    def has_static_target(self) -> bool:
        """Whether ``imm`` holds an instruction index control may go to."""
        return Operand.TARGET in self.operands

    @property
    def ends_block(self) -> bool:
        """Whether control may leave the straight line after it (or it ends the machine)."""
        return self.kind in _BLOCK_ENDING

    @property
    def may_fault_inside(self) -> bool:
        """Whether it can fault without ending its basic block (so flags before it are seen)."""
        return bool(self.faults) and not self.ends_block and not self.is_host


_BLOCK_ENDING: Final = frozenset(
    {OpKind.JUMP, OpKind.CALL, OpKind.RETURN, OpKind.STOP, OpKind.YIELD}
)


_R, _S1, _S2, _I, _T, _C = (
    Operand.RD,
    Operand.RS1,
    Operand.RS2,
    Operand.IMM,
    Operand.TARGET,
    Operand.CHANNEL,
)

_K, _NO = OpKind, FlagEffect.NONE
_ARITH, _LOGIC = FlagEffect.ARITHMETIC, FlagEffect.LOGIC
_DIVIDE = frozenset({FaultCode.DIVIDE_BY_ZERO})
_ADDRESS = frozenset({FaultCode.INVALID_ADDRESS})
_OVERFLOW = frozenset({FaultCode.STACK_OVERFLOW})
_UNDERFLOW = frozenset({FaultCode.STACK_UNDERFLOW})
_USER = frozenset({FaultCode.USER_FAULT})
_CHANNEL = frozenset(
    {
        FaultCode.CHANNEL_ERROR,
        FaultCode.PERMISSION_DENIED,
        FaultCode.INVALID_ADDRESS,
        FaultCode.OUT_OF_MEMORY,
    }
)

OPCODES: Final[dict[int, OpInfo]] = {
    info.opcode: info
    for info in (
        OpInfo(Opcode.ADD, "ADD", (_R, _S1, _S2), 1, _K.ARITHMETIC, _ARITH),
        OpInfo(Opcode.SUB, "SUB", (_R, _S1, _S2), 1, _K.ARITHMETIC, _ARITH),
        OpInfo(Opcode.MUL, "MUL", (_R, _S1, _S2), 2, _K.ARITHMETIC, _ARITH),
        OpInfo(Opcode.DIV, "DIV", (_R, _S1, _S2), 2, _K.ARITHMETIC, _LOGIC, _DIVIDE),
        OpInfo(Opcode.MOD, "MOD", (_R, _S1, _S2), 2, _K.ARITHMETIC, _LOGIC, _DIVIDE),
        OpInfo(Opcode.NEG, "NEG", (_R, _S1), 1, _K.ARITHMETIC, _ARITH),
        OpInfo(Opcode.AND, "AND", (_R, _S1, _S2), 1, _K.LOGIC, _LOGIC),
        OpInfo(Opcode.OR, "OR", (_R, _S1, _S2), 1, _K.LOGIC, _LOGIC),
        OpInfo(Opcode.XOR, "XOR", (_R, _S1, _S2), 1, _K.LOGIC, _LOGIC),
        OpInfo(Opcode.NOT, "NOT", (_R, _S1), 1, _K.LOGIC, _LOGIC),
        OpInfo(Opcode.SHL, "SHL", (_R, _S1, _S2), 1, _K.LOGIC, _LOGIC),
        OpInfo(Opcode.SHR, "SHR", (_R, _S1, _S2), 1, _K.LOGIC, _LOGIC),
        OpInfo(Opcode.LOAD, "LOAD", (_R, _S1, _I), 1, _K.MEMORY, _NO, _ADDRESS),
        OpInfo(Opcode.STORE, "STORE", (_S1, _S2, _I), 1, _K.MEMORY, _NO, _ADDRESS),
        OpInfo(Opcode.LOADW, "LOADW", (_R, _S1, _I), 1, _K.MEMORY, _NO, _ADDRESS),
        OpInfo(Opcode.STOREW, "STOREW", (_S1, _S2, _I), 1, _K.MEMORY, _NO, _ADDRESS),
        OpInfo(Opcode.PUSH, "PUSH", (_S1,), 1, _K.STACK, _NO, _OVERFLOW),
        OpInfo(Opcode.POP, "POP", (_R,), 1, _K.STACK, _NO, _UNDERFLOW),
        OpInfo(Opcode.JMP, "JMP", (_T,), 1, _K.JUMP, _NO, _ADDRESS),
        OpInfo(Opcode.JZ, "JZ", (_S1, _T), 1, _K.JUMP, _NO, _ADDRESS),
        OpInfo(Opcode.JNZ, "JNZ", (_S1, _T), 1, _K.JUMP, _NO, _ADDRESS),
        OpInfo(Opcode.JLT, "JLT", (_S1, _S2, _T), 1, _K.JUMP, _NO, _ADDRESS),
        OpInfo(Opcode.CALL, "CALL", (_T,), 2, _K.CALL, _NO, _ADDRESS | _OVERFLOW),
        OpInfo(Opcode.RET, "RET", (), 2, _K.RETURN, _NO, _ADDRESS | _UNDERFLOW),
        OpInfo(Opcode.LI, "LI", (_R, _I), 1, _K.IMMEDIATE),
        OpInfo(Opcode.HALT, "HALT", (), 1, _K.STOP),
        OpInfo(Opcode.FAULT, "FAULT", (_I,), 1, _K.STOP, _NO, _USER),
        OpInfo(Opcode.NOP, "NOP", (), 1, _K.NOTHING),
        OpInfo(Opcode.SEND, "SEND", (_C, _S1, _S2), 3, _K.CHANNEL, _NO, _CHANNEL),
        OpInfo(Opcode.RECV, "RECV", (_C, _R, _S1, _S2), 3, _K.CHANNEL, _NO, _CHANNEL),
        OpInfo(Opcode.POLL, "POLL", (_C, _R), 1, _K.CHANNEL, _NO, _CHANNEL),
        OpInfo(Opcode.TICK, "TICK", (), 1, _K.YIELD),
        OpInfo(Opcode.BUDGET, "BUDGET", (_R,), 1, _K.METER),
    )
}


def opcodes_where(test: Callable[[OpInfo], bool]) -> frozenset[Opcode]:
    """The opcodes whose table entry passes ``test`` (for the fast tier's plans)."""
    return frozenset(info.opcode for info in OPCODES.values() if test(info))


OPCODE_BY_MNEMONIC: Final[dict[str, OpInfo]] = {info.mnemonic: info for info in OPCODES.values()}

# Performance note: a flat 256-entry list is what both tiers index per instruction.
TICK_COSTS: Final[tuple[int, ...]] = tuple(
    OPCODES[op].ticks if op in OPCODES else UNKNOWN_OPCODE_COST for op in range(256)
)


def tick_cost(opcode: int) -> int:
    """Ticks charged for executing ``opcode`` (unknown opcodes cost 1)."""
    return TICK_COSTS[opcode]


class ChannelDirection(Enum):
    IN = "IN"
    OUT = "OUT"
    INOUT = "IN/OUT"
    RESERVED = "RESERVED"

    @property
    def can_send(self) -> bool:
        return self in (ChannelDirection.OUT, ChannelDirection.INOUT)

    @property
    def can_receive(self) -> bool:
        return self in (ChannelDirection.IN, ChannelDirection.INOUT)


class Channel(IntEnum):
    """Channels with a well-known purpose; 8..15 are reserved."""

    STDOUT = 0
    STDERR = 1
    STDIN = 2
    VAULT = 3
    ORACLE = 4
    AGORA = 5
    MINT = 6
    INTER_SANDBOX = 7


CHANNEL_COUNT: Final = 16
CHANNEL_DIRECTIONS: Final[tuple[ChannelDirection, ...]] = (
    ChannelDirection.OUT,
    ChannelDirection.OUT,
    ChannelDirection.IN,
    *(ChannelDirection.INOUT,) * 5,
    *(ChannelDirection.RESERVED,) * 8,
)
#: The channels a SEND may name, and those a RECV or a delivery may (by direction alone).
SENDING_CHANNELS: Final = frozenset(
    channel for channel, direction in enumerate(CHANNEL_DIRECTIONS) if direction.can_send
)
RECEIVING_CHANNELS: Final = frozenset(
    channel for channel, direction in enumerate(CHANNEL_DIRECTIONS) if direction.can_receive
)
#: For each known opcode, the fields it does not use (they must be 0).
UNUSED_FIELDS: Final[dict[int, tuple[str, ...]]] = {
    opcode: tuple(name for name in ("rd", "rs1", "rs2", "imm") if name not in info.fields)
    for opcode, info in OPCODES.items()
}
DEFAULT_GRANTS: Final = frozenset({Channel.STDOUT, Channel.STDERR, Channel.STDIN})
GRANTABLE_CHANNELS: Final = frozenset(range(Channel.VAULT, Channel.INTER_SANDBOX + 1))


@dataclass(frozen=True, slots=True)
class Instruction:
    """One decoded instruction; fields are raw (opcode may be unknown)."""

    opcode: int
    rd: int = 0
    rs1: int = 0
    rs2: int = 0
    imm: int = 0

    @property
    def info(self) -> OpInfo | None:
        """The table entry, or ``None`` for an unknown opcode."""
        return OPCODES.get(self.opcode)

    def unused_nonzero_fields(self) -> list[str]:
        """Fields the opcode does not use but that are non-zero (empty when unknown)."""
        return [name for name in UNUSED_FIELDS.get(self.opcode, ()) if getattr(self, name) != 0]

    def with_unused_fields_cleared(self) -> Instruction:
        """This instruction with the fields its opcode does not use set to 0 (an unknown
        opcode keeps them all): the valid instruction nearest to any 16 bytes, which is
        what program generators and fuzzers make of arbitrary words."""
        unused = self.unused_nonzero_fields()
        return dataclasses.replace(self, **dict.fromkeys(unused, 0)) if unused else self


def encode_instruction(insn: Instruction) -> bytes:
    """The 16-byte little-endian form: opcode, rd, rs1, rs2, reserved u32 = 0, imm u64."""
    return _INSTRUCTION.pack(insn.opcode, insn.rd, insn.rs1, insn.rs2, 0, insn.imm)


def decode_instruction(raw: bytes | memoryview, offset: int = 0) -> tuple[Instruction, int]:
    """Decode 16 bytes at ``offset``; returns the instruction and its reserved field."""
    opcode, rd, rs1, rs2, reserved, imm = _INSTRUCTION.unpack_from(raw, offset)
    return Instruction(opcode, rd, rs1, rs2, imm), reserved
