"""Register allocation: virtual registers onto the machine's 256, across calls too.

Greedy colouring of an interference graph built from exact liveness (a value
interferes with the values live where it is defined), in the order values first
appear, so short-lived temporaries reuse registers freely whatever the block layout.
What makes it fit this machine:

* **Calls know what their callee changes.**  Functions are allocated callees first
  (:func:`kforge.starlark.emit` orders them), so each call's *clobber set* is known:
  the registers its callee, and everything the callee calls, may write.  A value
  live across a call takes a register outside that set when one is free, and costs
  nothing at the call; otherwise it is saved with ``PUSH`` before the call and
  restored with ``POP`` after.  Calls inside a recursive cycle, and calls through a
  code address, clobber everything.
* **Hints.**  Arguments prefer the registers they are passed in, results ``r1``,
  moves the register of their other side, so most calls need no moves at all.
* **Small clobber sets.**  A register this function already writes is preferred
  over a fresh one, and the runtime fills registers from the top while compiled
  Starlark fills them from the bottom, so calls from Starlark into the runtime rarely
  save anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kforge.starlark.ir import FIRST_VIRTUAL, Function, Insn
from kforge.starlark.regs import (
    ALL_CLOBBERED,
    ALLOCATABLE_MASK,
    RESULT,
    SCRATCH_A,
    SCRATCH_B,
    argument_mask,
)


class OutOfRegisters(Exception):
    """A function keeps more values alive at once than the machine has registers."""


@dataclass
class Allocation:
    """Where each virtual register lives, and what each call must save."""

    registers: dict[int, int]
    #: For each call instruction (by identity), the registers to save around it.
    saves: dict[int, list[int]] = field(default_factory=dict)
    #: Every register this function, or anything it calls, may change.
    clobber: int = 0
    #: The registers this function's own instructions write.
    own: int = 0

    def of(self, register: int) -> int:
        return register if register < FIRST_VIRTUAL else self.registers[register]


def allocate(
    function: Function,
    call_clobber: dict[int, int],
    prefer_high: bool = False,
) -> Allocation:
    """Allocate ``function``; ``call_clobber`` maps each call instruction (by ``id``)
    to its callee's clobber set."""
    blocks = function.blocks
    order = _block_order(function)
    _, live_out = _liveness(function, order)
    hints: dict[int, int] = {}
    calls: list[tuple[int, int, Insn]] = []  # (position, clobber mask, insn)
    first_seen: dict[int, int] = {}
    position = 0
    for index in order:
        block = blocks[index]
        for insn in block.insns:
            position += 1
            for register in (*insn.defs(), *insn.uses()):
                if register >= FIRST_VIRTUAL and register not in first_seen:
                    first_seen[register] = position
            op = insn.op
            if op == "MOV":
                if insn.a < FIRST_VIRTUAL <= insn.dst:
                    hints.setdefault(insn.dst, insn.a)
                elif insn.a >= FIRST_VIRTUAL and insn.dst >= FIRST_VIRTUAL:
                    hints.setdefault(insn.dst, -insn.a)  # prefer the source's register
            elif op in ("CALL", "CALLI"):
                mask = call_clobber.get(id(insn), ALL_CLOBBERED) | argument_mask(len(insn.args))
                calls.append((position, mask, insn))
                for number, argument in enumerate(insn.args, start=1):
                    if argument >= FIRST_VIRTUAL:
                        hints.setdefault(argument, number)
                if insn.dst >= FIRST_VIRTUAL:
                    hints.setdefault(insn.dst, RESULT)
            elif op == "PARAMS":
                for number, parameter in enumerate(insn.args, start=1):
                    hints.setdefault(parameter, number)
        term = block.term
        if term is not None:
            position += 1
            for register in term.uses():
                if register >= FIRST_VIRTUAL and register not in first_seen:
                    first_seen[register] = position
            if term.op == "RET" and term.a >= FIRST_VIRTUAL:
                hints.setdefault(term.a, RESULT)

    neighbours = _interference(function, order, live_out)
    across = _live_across_calls(function, order, live_out, calls)
    used = (1 << SCRATCH_A) | (1 << SCRATCH_B) | (1 << RESULT)
    registers: dict[int, int] = {}
    saves: dict[int, list[int]] = {}
    for register in sorted(first_seen, key=lambda r: (first_seen[r], r)):
        taken = 0
        for other in neighbours.get(register, ()):
            phys = registers.get(other)
            if phys is not None:
                taken |= 1 << phys
        free = ALLOCATABLE_MASK & ~taken
        if not free:
            raise OutOfRegisters(function.name)
        crossed = across.get(register, ())
        clobbered = 0
        for k in crossed:
            clobbered |= calls[k][1]
        hint = hints.get(register, -1)
        if hint < -1:  # a move's source: its register, if it has one
            hint = registers.get(-hint, -1)
        phys = _choose(free, clobbered, used, hint, prefer_high)
        registers[register] = phys
        used |= 1 << phys
        if clobbered >> phys & 1:
            for k in crossed:
                if calls[k][1] >> phys & 1:
                    saves.setdefault(id(calls[k][2]), []).append(phys)
    clobber = used
    for _, mask, _ in calls:
        clobber |= mask
    return Allocation(registers, saves, clobber, used)


def _interference(
    function: Function, order: list[int], live_out: dict[int, set[int]]
) -> dict[int, set[int]]:
    """Which virtual registers may not share a machine register: a value defined by an
    instruction interferes with every value live after it, except the source of a move
    (so the two may share), and values defined together interfere with each other.

    Live sets are Python sets rather than bit masks: a big function (a long module's
    top level) has tens of thousands of values but few live at once, and a mask's cost
    grows with the highest value's number."""
    neighbours: dict[int, set[int]] = {}
    for index in order:
        block = function.blocks[index]
        live = set(live_out[index])
        term = block.term
        if term is not None:
            live.update(r for r in term.uses() if r >= FIRST_VIRTUAL)
        for insn in reversed(block.insns):
            defined = [r for r in insn.defs() if r >= FIRST_VIRTUAL]
            if defined:
                others = live.union(defined)
                if insn.op == "MOV":
                    others.discard(insn.a)
                for register in defined:
                    mine = neighbours.setdefault(register, set())
                    for other in others:
                        if other != register:
                            mine.add(other)
                            neighbours.setdefault(other, set()).add(register)
                live.difference_update(defined)
            live.update(r for r in insn.uses() if r >= FIRST_VIRTUAL)
    return neighbours


def _live_across_calls(
    function: Function,
    order: list[int],
    live_out: dict[int, set[int]],
    calls: list[tuple[int, int, Insn]],
) -> dict[int, list[int]]:
    """For each virtual register, the calls (indexes into ``calls``) it is live across:
    live after the call and not defined by it.  Exact, unlike the interval, which also
    covers blocks laid out between uses."""
    number = {id(insn): k for k, (_, _, insn) in enumerate(calls)}
    across: dict[int, list[int]] = {}
    for index in order:
        block = function.blocks[index]
        live = set(live_out[index])
        term = block.term
        if term is not None:
            live.update(r for r in term.uses() if r >= FIRST_VIRTUAL)
        for insn in reversed(block.insns):
            defined = [r for r in insn.defs() if r >= FIRST_VIRTUAL]
            if insn.op in ("CALL", "CALLI"):
                k = number[id(insn)]
                for register in live.difference(defined):
                    across.setdefault(register, []).append(k)
            live.difference_update(defined)
            live.update(r for r in insn.uses() if r >= FIRST_VIRTUAL)
    return across


def _choose(free: int, clobbered: int, used: int, hint: int, prefer_high: bool) -> int:
    """The register for one interval; see the module docstring for the order."""
    safe = free & ~clobbered
    if hint >= 0 and safe >> hint & 1:
        return hint
    for pool in (safe & used, safe, free & used, free):
        if pool:
            if hint >= 0 and pool >> hint & 1:
                return hint
            return pool.bit_length() - 1 if prefer_high else (pool & -pool).bit_length() - 1
    raise AssertionError("no free register")  # free is non-empty


def _block_order(function: Function) -> list[int]:
    """Reachable blocks in emission order: each block is followed, where it can be, by
    the successor it would jump to (a ``JMP`` target, or a branch's true side, which the
    compiler makes the likely one, else its false side), so that the likely path runs
    without jumps."""
    blocks = function.blocks
    reachable = [False] * len(blocks)
    stack = [0]
    while stack:
        index = stack.pop()
        if reachable[index]:
            continue
        reachable[index] = True
        term = blocks[index].term
        if term is not None:
            stack.extend(term.targets)
    placed = [False] * len(blocks)
    order: list[int] = []
    for seed in range(len(blocks)):
        index = seed
        while reachable[index] and not placed[index]:
            placed[index] = True
            order.append(index)
            term = blocks[index].term
            if term is None or not term.targets:
                break
            if term.op == "JMP" or not placed[term.targets[0]]:
                index = term.targets[0]
            else:
                index = term.targets[1]
    return order


def block_order(function: Function) -> list[int]:
    return _block_order(function)


def _liveness(
    function: Function, order: list[int]
) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """Live-in and live-out sets of virtual registers per block."""
    use: dict[int, set[int]] = {}
    define: dict[int, set[int]] = {}
    for index in order:
        block = function.blocks[index]
        u: set[int] = set()
        d: set[int] = set()
        for insn in block.insns:
            for register in insn.uses():
                if register >= FIRST_VIRTUAL and register not in d:
                    u.add(register)
            d.update(r for r in insn.defs() if r >= FIRST_VIRTUAL)
        term = block.term
        if term is not None:
            for register in term.uses():
                if register >= FIRST_VIRTUAL and register not in d:
                    u.add(register)
        use[index] = u
        define[index] = d
    live_in: dict[int, set[int]] = {index: set(use[index]) for index in order}
    live_out: dict[int, set[int]] = {index: set() for index in order}
    changed = True
    reverse = order[::-1]
    while changed:
        changed = False
        for index in reverse:
            term = function.blocks[index].term
            out: set[int] = set()
            if term is not None:
                for target in term.targets:
                    out |= live_in[target]
            if out != live_out[index]:
                live_out[index] = out
                live_in[index] = use[index] | (out - define[index])
                changed = True
    return live_in, live_out
