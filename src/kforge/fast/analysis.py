"""Basic blocks of a Forge program, as the compiler and the host both need them.

A block is a run of instructions entered only at its first one (its leader) and
charged for in one piece.  Leaders are the entry, every static jump or call
target, every instruction after a block-ending one, and every SEND, RECV and
POLL, which the host runs alone (a *host block*).  Blocks are also cut at
:data:`MAX_BLOCK_LENGTH` instructions so that the host's exact path (stepping
the reference interpreter through one block when the budget is short) stays
short.

Blocks are grouped into *regions*, one wasm function each: a region is a
procedure (the code from one call target, or the entry, to the next), so that
a CALL from one procedure to another is a wasm call and its RET a wasm return
(see :mod:`kforge.fast.compiler`); a procedure of more than
``max_region_blocks`` blocks is cut where fewest jumps cross.

The plan also decides which flag-setting instructions must compute their flags:
flags are observable only when control leaves compiled code, so within a block
only the last setter before each possible exit needs them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from kforge.isa import (
    OPCODES,
    FlagEffect,
    Instruction,
    Opcode,
    Operand,
    OpKind,
    opcodes_where,
    tick_cost,
)

__all__ = [
    "ARITHMETIC_FLAG_SETTERS",
    "HOST_OPCODES",
    "JUMPS",
    "LOGIC_FLAG_SETTERS",
    "MAX_BLOCK_LENGTH",
    "MAX_REGION_BLOCKS",
    "NO_FALLTHROUGH",
    "REGISTER_FIELDS",
    "STATIC_TARGETS",
    "WRITES_RD",
    "Block",
    "ProgramPlan",
    "Region",
    "RunFacts",
    "plan_program",
    "used_registers",
]

#: Longest block, in instructions; bounds the host's exact path.
MAX_BLOCK_LENGTH: Final = 64
# Performance note: Cranelift's time grows faster than linearly with a function's
# size, so a long procedure is cut into regions of at most this many blocks, one
# wasm function each, compiled apart (and in parallel).
MAX_REGION_BLOCKS: Final = 128

# The opcode facts below come from the one opcode table (``kforge.isa.OPCODES``).
#: Instructions whose semantics live only in the reference interpreter (channels).
HOST_OPCODES: Final = opcodes_where(lambda info: info.is_host)
#: Set zero, carry and overflow from the operation.
ARITHMETIC_FLAG_SETTERS: Final = opcodes_where(lambda info: info.flags is FlagEffect.ARITHMETIC)
#: Set zero, clear carry and overflow.
LOGIC_FLAG_SETTERS: Final = opcodes_where(lambda info: info.flags is FlagEffect.LOGIC)
_FLAG_SETTERS: Final = ARITHMETIC_FLAG_SETTERS | LOGIC_FLAG_SETTERS
#: Instructions with a static control target in ``imm`` (jumps and CALL).
STATIC_TARGETS: Final = opcodes_where(lambda info: info.has_static_target)
#: Conditional and unconditional jumps: a block ending in one to its own start is a loop.
JUMPS: Final = opcodes_where(lambda info: info.kind is OpKind.JUMP)
_ENDS_BLOCK: Final = opcodes_where(lambda info: info.ends_block)
#: Instructions after which control never reaches the next one: an unconditional jump,
#: RET, HALT, FAULT.
NO_FALLTHROUGH: Final = opcodes_where(
    lambda info: (
        info.kind in (OpKind.RETURN, OpKind.STOP)
        or (info.kind is OpKind.JUMP and not any(operand.is_register for operand in info.operands))
    )
)
#: Instructions writing their rd register.
WRITES_RD: Final = opcodes_where(lambda info: Operand.RD in info.operands)
#: Instructions that may leave a block in its middle (a fault) without ending it.
_MAY_FAULT_INSIDE: Final = opcodes_where(lambda info: info.may_fault_inside)
_KNOWN: Final = frozenset(int(op) for op in Opcode)


@dataclass(frozen=True, slots=True)
class Block:
    """Instructions ``start .. end - 1``, charged ``cost`` ticks at once on entry."""

    index: int
    start: int
    end: int
    cost: int
    host: bool
    self_loop: bool


@dataclass(frozen=True, slots=True)
class Region:
    """Blocks ``first_block .. end_block - 1`` (instructions ``start .. end - 1``): one wasm function."""

    index: int
    first_block: int
    end_block: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What running compiled code needs to know of its program (the rest of the plan
    serves only the compiler): kept on disk with the module, so that a program whose
    module is loaded from there is not analysed again."""

    code: tuple[Instruction, ...]
    #: ``enterable[pc]`` is 1 when compiled code can start at ``pc`` (a compiled block's leader).
    enterable: bytes
    #: Whether the program holds a TICK instruction.
    has_tick: bool
    #: Registers some instruction names (the only ones compiled code reads or writes).
    used_registers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ProgramPlan:
    """The blocks of a program and what the compiler and host need to know of them."""

    #: What running the compiled code needs (the code among it); kept with the module.
    facts: RunFacts
    blocks: tuple[Block, ...]
    regions: tuple[Region, ...]
    #: Where each region starts (ascending).
    region_starts: tuple[int, ...]
    #: Block index of each leader.
    block_at: dict[int, int]
    #: Instructions that must compute their flags.
    flag_materialized: frozenset[int]

    @property
    def code(self) -> tuple[Instruction, ...]:
        return self.facts.code

    def block_of(self, pc: int) -> Block:
        """The block whose leader is ``pc``."""
        return self.blocks[self.block_at[pc]]

    def region_index(self, pc: int) -> int:
        """The index of the region holding instruction ``pc`` (inside the code)."""
        if not 0 <= pc < len(self.code):
            raise ValueError(f"pc {pc} is outside the code")
        return bisect_right(self.region_starts, pc) - 1


#: The register fields (rd, rs1, rs2) each defined opcode uses.
REGISTER_FIELDS: Final[dict[int, tuple[str, ...]]] = {
    opcode: tuple(operand.field for operand in info.operands if operand.is_register)
    for opcode, info in OPCODES.items()
}


def used_registers(code: tuple[Instruction, ...]) -> tuple[int, ...]:
    """The registers named by the instructions of ``code``, ascending."""
    used: set[int] = set()
    for insn in code:
        for field in REGISTER_FIELDS.get(insn.opcode, ()):
            used.add(getattr(insn, field))
    return tuple(sorted(used))


def _ends_block(opcode: int) -> bool:
    return opcode not in _KNOWN or opcode in _ENDS_BLOCK


def _leaders(code: tuple[Instruction, ...], entry: int) -> set[int]:
    """Every instruction where a block must start."""
    length = len(code)
    leaders = {0, entry}
    for pc, insn in enumerate(code):
        if insn.opcode in STATIC_TARGETS and insn.imm < length:
            leaders.add(insn.imm)
        if insn.opcode in HOST_OPCODES:
            leaders.add(pc)
            leaders.add(pc + 1)
        elif _ends_block(insn.opcode):
            leaders.add(pc + 1)
    leaders.discard(length)
    return leaders


def _split(code: tuple[Instruction, ...], leaders: set[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each block, cutting at leaders and at the length cap."""
    spans = []
    start = 0
    for pc in range(1, len(code) + 1):
        if pc == len(code) or pc in leaders or pc - start == MAX_BLOCK_LENGTH:
            spans.append((start, pc))
            start = pc
    return spans


def _make_block(code: tuple[Instruction, ...], index: int, start: int, end: int) -> Block:
    host = code[start].opcode in HOST_OPCODES
    cost = 0 if host else sum(tick_cost(code[pc].opcode) for pc in range(start, end))
    last = code[end - 1]
    self_loop = not host and last.opcode in JUMPS and last.imm == start
    return Block(index, start, end, cost, host, self_loop)


def _materialized_in(code: tuple[Instruction, ...], block: Block) -> list[int]:
    """Flag setters of ``block`` whose flags can be observed.

    Performance note: the others record nothing at all.

    A setter's flags are observable when the block may be left after it and
    before (or at, if it faults) the next setter; the block's end always leaves.
    """
    setters = [pc for pc in range(block.start, block.end) if code[pc].opcode in _FLAG_SETTERS]
    needed = []
    for position, pc in enumerate(setters):
        following = setters[position + 1] if position + 1 < len(setters) else None
        if following is None or any(
            code[k].opcode in _MAY_FAULT_INSIDE for k in range(pc + 1, following + 1)
        ):
            needed.append(pc)
    return needed


def _boundary_crossings(code: tuple[Instruction, ...], blocks: tuple[Block, ...]) -> list[int]:
    """For each block index k, how many static jumps cross the boundary before block k."""
    block_index = [0] * len(code)
    for block in blocks:
        for pc in range(block.start, block.end):
            block_index[pc] = block.index
    difference = [0] * (len(blocks) + 2)
    for pc, insn in enumerate(code):
        if insn.opcode in STATIC_TARGETS and insn.imm < len(code):
            low, high = sorted((block_index[pc], block_index[insn.imm]))
            difference[low + 1] += 1
            difference[high + 1] -= 1
    crossings, running = [], 0
    for step in difference[: len(blocks) + 1]:
        running += step
        crossings.append(running)
    return crossings


def _procedure_starts(
    code: tuple[Instruction, ...], blocks: tuple[Block, ...], entry: int
) -> list[int]:
    """Indices of the blocks a procedure starts at: the code's start, its entry, call targets."""
    starts = {0, entry}
    starts.update(insn.imm for insn in code if insn.opcode == Opcode.CALL and insn.imm < len(code))
    return sorted(index for index, block in enumerate(blocks) if block.start in starts)


def _regions(
    code: tuple[Instruction, ...], blocks: tuple[Block, ...], max_blocks: int, entry: int
) -> tuple[Region, ...]:
    """Cut the blocks into regions of at most ``max_blocks``: whole procedures, else where
    fewest jumps cross."""
    crossings = _boundary_crossings(code, blocks)
    cuts: list[tuple[int, int]] = []
    bounds = [*_procedure_starts(code, blocks, entry), len(blocks)]
    for first, end in pairwise(bounds):
        while end - first > max_blocks:
            window = range(first + (max_blocks + 1) // 2, first + max_blocks + 1)
            cut = min(window, key=lambda k: (crossings[k], -k))
            cuts.append((first, cut))
            first = cut
        cuts.append((first, end))
    return tuple(
        Region(index, first, end, blocks[first].start, blocks[end - 1].end)
        for index, (first, end) in enumerate(cuts)
    )


def plan_program(
    code: tuple[Instruction, ...], entry: int = 0, *, max_region_blocks: int = MAX_REGION_BLOCKS
) -> ProgramPlan:
    """Split ``code`` into blocks and regions and decide which flags must be computed."""
    if max_region_blocks < 1:
        raise ValueError(f"max_region_blocks must be at least 1, got {max_region_blocks}")
    leaders = _leaders(code, entry)
    blocks = tuple(
        _make_block(code, index, start, end)
        for index, (start, end) in enumerate(_split(code, leaders))
    )
    regions = _regions(code, blocks, max_region_blocks, entry)
    enterable = bytearray(len(code))
    materialized: list[int] = []
    for block in blocks:
        if not block.host:
            enterable[block.start] = 1
            materialized += _materialized_in(code, block)
    return ProgramPlan(
        facts=RunFacts(
            code=code,
            enterable=bytes(enterable),
            has_tick=any(insn.opcode == Opcode.TICK for insn in code),
            used_registers=used_registers(code),
        ),
        blocks=blocks,
        regions=regions,
        region_starts=tuple(region.start for region in regions),
        block_at={block.start: block.index for block in blocks},
        flag_materialized=frozenset(materialized),
    )
