"""Which procedures are small enough to copy into their callers.

A CALL into another region is a wasm call of that region's function, and one
into its own region a branch (see :mod:`kforge.fast.compiler`), unless the
target is a small leaf procedure: then the CALL pushes its return address as
always and the procedure's blocks follow, copied, with their own pcs, tick
checks and faults, so that the copy is exact; its RET goes on after the copy
when it pops that return address, anywhere else when it does not.
"""

from __future__ import annotations

from typing import Final

from kforge.fast.analysis import JUMPS, NO_FALLTHROUGH, Block, ProgramPlan
from kforge.isa import OPCODES, Opcode

__all__ = ["MAX_INLINE_INSTRUCTIONS", "inline_bodies"]


#: Most instructions a procedure may have to be copied into its callers.
MAX_INLINE_INSTRUCTIONS: Final = 12


def inline_bodies(plan: ProgramPlan) -> dict[int, tuple[Block, ...]]:
    """Procedures worth copying into their callers: call target -> its blocks, in order.

    A procedure qualifies when it is small, makes no call, runs no host block or
    TICK, and only branches forwards, so that its copy is a tree of forward
    branches ending in RET (or a fault, or HALT).  Performance note: Starlark code
    calls helpers of a few instructions (a tag test, a range check) all the
    time; a copy costs less than the call.
    """
    code, blocks, at = plan.code, plan.blocks, plan.block_at
    targets = {insn.imm for insn in code if insn.opcode == Opcode.CALL and insn.imm in at}
    bodies: dict[int, tuple[Block, ...]] = {}
    for target in sorted(targets):
        body = _leaf_body(plan, at[target])
        if body is not None:
            bodies[target] = tuple(blocks[index] for index in body)
    return bodies


def _leaf_body(plan: ProgramPlan, entry: int) -> list[int] | None:
    """The blocks of the leaf procedure entered at block ``entry``, or ``None``."""
    code, blocks, at = plan.code, plan.blocks, plan.block_at
    seen, pending, size = {entry}, [entry], 0
    while pending:
        block = blocks[pending.pop()]
        size += block.end - block.start
        if block.host or size > MAX_INLINE_INSTRUCTIONS:
            return None
        if any(
            code[pc].opcode in (Opcode.CALL, Opcode.TICK) for pc in range(block.start, block.end)
        ):
            return None
        last = code[block.end - 1]
        following = []
        if last.opcode in JUMPS and last.imm < len(code):
            following.append(at[last.imm])
        if last.opcode in OPCODES and last.opcode not in NO_FALLTHROUGH:
            if block.end >= len(code):
                return None  # runs off the code
            following.append(at[block.end])
        for index in following:
            if index <= block.index:
                return None  # a backward branch: a loop
            if index not in seen:
                seen.add(index)
                pending.append(index)
    return sorted(seen)
