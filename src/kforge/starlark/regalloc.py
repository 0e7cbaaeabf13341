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

from collections import defaultdict
from dataclasses import dataclass, field

from kforge.starlark.ir import FIRST_VIRTUAL, Block, Function, Insn
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
    order = _block_order(function)
    code = _linear(function, order)
    hints: dict[int, int] = {}
    calls: list[tuple[int, Insn]] = []  # (clobber mask, insn)
    call_number: dict[int, int] = {}
    seen: set[int] = set()
    first_seen: list[tuple[int, int]] = []  # (position, register), in order
    position = 0
    for block in code:
        for insn, written, read in block.insns:
            position += 1
            for register in (*written, *read):
                if register not in seen:
                    seen.add(register)
                    first_seen.append((position, register))
            op = insn.op
            if op == "MOV":
                if insn.a < FIRST_VIRTUAL <= insn.dst:
                    hints.setdefault(insn.dst, insn.a)
                elif insn.a >= FIRST_VIRTUAL and insn.dst >= FIRST_VIRTUAL:
                    hints.setdefault(insn.dst, -insn.a)  # prefer the source's register
            elif op in ("CALL", "CALLI"):
                mask = call_clobber.get(id(insn), ALL_CLOBBERED) | argument_mask(len(insn.args))
                call_number[id(insn)] = len(calls)
                calls.append((mask, insn))
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
            for register in block.term_uses:
                if register not in seen:
                    seen.add(register)
                    first_seen.append((position, register))
            if term.op == "RET" and term.a >= FIRST_VIRTUAL:
                hints.setdefault(term.a, RESULT)

    live_out = _liveness(code)
    neighbours, across = _interference(code, live_out, call_number)
    used = (1 << SCRATCH_A) | (1 << SCRATCH_B) | (1 << RESULT)
    registers: dict[int, int] = {}
    saves: dict[int, list[int]] = {}
    first_seen.sort()
    for _, register in first_seen:
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
            clobbered |= calls[k][0]
        hint = hints.get(register, -1)
        if hint < -1:  # a move's source: its register, if it has one
            hint = registers.get(-hint, -1)
        phys = _choose(free, clobbered, used, hint, prefer_high)
        registers[register] = phys
        used |= 1 << phys
        if clobbered >> phys & 1:
            for k in crossed:
                if calls[k][0] >> phys & 1:
                    saves.setdefault(id(calls[k][1]), []).append(phys)
    clobber = used
    for mask, _ in calls:
        clobber |= mask
    return Allocation(registers, saves, clobber, used)


class _LinearBlock:
    """One block as the allocator reads it: each instruction with the virtual registers
    it writes and reads, worked out once (a long top level has tens of thousands)."""

    __slots__ = ("define", "index", "insns", "live_in", "successors", "term", "term_uses", "use")

    def __init__(self, index: int, block: Block) -> None:
        self.index = index
        self.term = block.term
        self.insns: list[tuple[Insn, tuple[int, ...], tuple[int, ...]]] = []
        use: set[int] = set()
        define: set[int] = set()
        for insn in block.insns:
            # Insn.uses() and Insn.defs(), keeping virtual registers only
            op = insn.op
            if op == "CALL" or op == "CALLI":
                used = tuple(r for r in insn.args if r >= FIRST_VIRTUAL)
                if op == "CALLI" and insn.a >= FIRST_VIRTUAL:
                    used += (insn.a,)
            else:
                a, b = insn.a, insn.b
                if a >= FIRST_VIRTUAL:
                    used = (a, b) if b >= FIRST_VIRTUAL else (a,)
                else:
                    used = (b,) if b >= FIRST_VIRTUAL else ()
            if op == "PARAMS":
                defined = tuple(r for r in insn.args if r >= FIRST_VIRTUAL)
            else:
                defined = (insn.dst,) if insn.dst >= FIRST_VIRTUAL else ()
            self.insns.append((insn, defined, used))
            for register in used:
                if register not in define:
                    use.add(register)
            define.update(defined)
        term = block.term
        self.term_uses: tuple[int, ...] = ()
        self.successors: tuple[int, ...] = ()
        if term is not None:
            self.term_uses = tuple(r for r in term.uses() if r >= FIRST_VIRTUAL)
            self.successors = term.targets
            use.update(r for r in self.term_uses if r not in define)
        self.use = use
        self.define = define
        self.live_in: set[int] = set(use)


def _linear(function: Function, order: list[int]) -> list[_LinearBlock]:
    return [_LinearBlock(index, function.blocks[index]) for index in order]


def _liveness(code: list[_LinearBlock]) -> dict[int, set[int]]:
    """Live-out sets of virtual registers per block (by block index); each block's
    ``live_in`` is left filled in.  A worklist: a block is looked at again only when
    the live-in of one of its successors grew."""
    by_index = {block.index: block for block in code}
    predecessors: dict[int, list[_LinearBlock]] = {block.index: [] for block in code}
    for block in code:
        for target in block.successors:
            predecessors[target].append(block)
    live_out: dict[int, set[int]] = {block.index: set() for block in code}
    pending = list(code)  # popped from the end: the last block first
    queued = {block.index for block in code}
    while pending:
        block = pending.pop()
        queued.discard(block.index)
        out: set[int] = set()
        for target in block.successors:
            out |= by_index[target].live_in
        if out == live_out[block.index]:
            continue
        live_out[block.index] = out
        live_in = block.use | (out - block.define)
        if live_in == block.live_in:
            continue
        block.live_in = live_in
        for predecessor in predecessors[block.index]:
            if predecessor.index not in queued:
                queued.add(predecessor.index)
                pending.append(predecessor)
    return live_out


def _interference(
    code: list[_LinearBlock], live_out: dict[int, set[int]], call_number: dict[int, int]
) -> tuple[defaultdict[int, set[int]], defaultdict[int, list[int]]]:
    """Which virtual registers may not share a machine register: a value defined by an
    instruction interferes with every value live after it, except the source of a move
    (so the two may share), and values defined together interfere with each other.
    And for each virtual register, the calls (numbers from ``call_number``) it is live
    across: live after the call and not defined by it.  Exact, unlike an interval,
    which also covers blocks laid out between uses.

    Live sets are Python sets rather than bit masks: a big function (a long module's
    top level) has tens of thousands of values but few live at once, and a mask's cost
    grows with the highest value's number."""
    neighbours: defaultdict[int, set[int]] = defaultdict(set)
    across: defaultdict[int, list[int]] = defaultdict(list)
    for block in code:
        live = set(live_out[block.index])
        live.update(block.term_uses)
        for insn, defined, used in reversed(block.insns):
            if defined:
                others = live.union(defined)
                if insn.op == "MOV":
                    others.discard(insn.a)
                for register in defined:
                    others.discard(register)
                    neighbours[register].update(others)
                    for other in others:
                        neighbours[other].add(register)
                    others.add(register)
                live.difference_update(defined)
            if insn.op == "CALL" or insn.op == "CALLI":
                k = call_number[id(insn)]
                for register in live:  # the call's own results are gone from it already
                    across[register].append(k)
            live.update(used)
    return neighbours, across


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
