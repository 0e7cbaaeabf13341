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
from functools import reduce
from itertools import repeat
from operator import or_
from typing import Final

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
    #: The function's reachable blocks in emission order (see :func:`block_order`).
    order: list[int] = field(default_factory=list)

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
    scan = _Scan(function, order, call_clobber)
    code, calls, hints = scan.code, scan.calls, scan.hints
    _liveness(code)
    neighbours, across = _interference(code, scan.call_number)
    used = (1 << SCRATCH_A) | (1 << SCRATCH_B) | (1 << RESULT)
    registers: dict[int, int] = {}
    bits: dict[int, int] = {}  # register -> 1 << its machine register
    bit_of = bits.get
    masks = [mask for mask, _ in calls]
    mask_of = masks.__getitem__
    saves: dict[int, list[int]] = {}
    no_bit = repeat(0)
    hint_of = hints.get
    for key in sorted(scan.first_seen):  # by first appearance, then by number
        register = key & _REGISTER_MASK
        others = neighbours.get(register)
        free = (
            ALLOCATABLE_MASK & ~reduce(or_, map(bit_of, others, no_bit), 0)
            if others
            else ALLOCATABLE_MASK
        )
        if not free:
            raise OutOfRegisters(function.name)
        crossed = across.get(register)
        clobbered = reduce(or_, map(mask_of, crossed), 0) if crossed else 0
        hint = hint_of(register, -1)
        if hint < -1:  # a move's source: its register, if it has one
            hint = registers.get(-hint, -1)
        safe = free & ~clobbered
        if hint >= 0 and safe >> hint & 1:  # _choose's first choices, inline
            phys = hint
        elif hint < 0 and not prefer_high and safe & used:
            phys = (safe & used & -(safe & used)).bit_length() - 1
        else:
            phys = _choose(free, clobbered, used, hint, prefer_high)
        registers[register] = phys
        bit = bits[register] = 1 << phys
        used |= bit
        if crossed and clobbered & bit:
            for k in crossed:
                if masks[k] >> phys & 1:
                    saves.setdefault(id(calls[k][1]), []).append(phys)
    clobber = used
    for mask in masks:
        clobber |= mask
    return Allocation(registers, saves, clobber, used, order)


#: A virtual register's number in a key of :attr:`_Scan.first_seen`, and the step
#: from one instruction's position to the next's there.
_REGISTER_MASK: Final = (1 << 32) - 1
_NEXT_POSITION: Final = 1 << 32


_NO_VALUES: Final[frozenset[int]] = frozenset()


class _LinearBlock:
    """One block as the allocator reads it: each instruction with the virtual registers
    it writes and reads, worked out once (a long top level has tens of thousands)."""

    __slots__ = (
        "define",
        "index",
        "insns",
        "live_in",
        "live_out",
        "targets",
        "term_uses",
        "use",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.insns: list[tuple[Insn, tuple[int, ...], tuple[int, ...]]] = []
        self.term_uses: tuple[int, ...] = ()
        self.targets: tuple[int, ...] = ()  # the successors' block numbers
        self.use: set[int] = set()
        self.define: set[int] = set()
        # filled in by _liveness (they are replaced, never changed: so they may share)
        self.live_in = self.use
        self.live_out: set[int] | frozenset[int] = _NO_VALUES


class _Scan:
    """One pass over a function in block order: its blocks as the allocator reads them,
    its calls with their clobber masks, the hints, and where each virtual register
    first appears (``position << 32 | register``: sorted, the colouring order)."""

    def __init__(self, function: Function, order: list[int], call_clobber: dict[int, int]) -> None:
        self.code: list[_LinearBlock] = []
        self.calls: list[tuple[int, Insn]] = []  # (clobber mask, insn)
        self.hints: dict[int, int] = {}
        self.call_number: dict[int, int] = {}  # call instruction (by id) -> its number
        first: dict[int, int] = {}
        hint = self.hints.setdefault
        appear = first.setdefault
        calls = self.calls
        virtual = FIRST_VIRTUAL
        here = 0  # the position of the instruction read, << 32
        blocks = function.blocks
        for index in order:
            block = blocks[index]
            linear = _LinearBlock(index)
            self.code.append(linear)
            rows = linear.insns
            use = linear.use
            define = linear.define
            for insn in block.insns:
                here += _NEXT_POSITION
                # Insn.uses() and Insn.defs(), keeping virtual registers only
                op = insn.op
                dst = insn.dst
                if op == "CALL" or op == "CALLI":
                    args = insn.args
                    used = tuple([r for r in args if r >= virtual])
                    if op == "CALLI" and insn.a >= virtual:
                        used += (insn.a,)
                    self.call_number[id(insn)] = len(calls)
                    mask = call_clobber.get(id(insn), ALL_CLOBBERED) | argument_mask(len(args))
                    calls.append((mask, insn))
                    for number, argument in enumerate(args, start=1):
                        if argument >= virtual:
                            hint(argument, number)
                    if dst >= virtual:
                        hint(dst, RESULT)
                else:
                    a, b = insn.a, insn.b
                    if a >= virtual:
                        used = (a, b) if b >= virtual else (a,)
                    else:
                        used = (b,) if b >= virtual else ()
                    if op == "MOV" and dst >= virtual:
                        hint(dst, a if a < virtual else -a)  # -a: the source's register
                if dst >= virtual and op != "PARAMS":
                    defined: tuple[int, ...] = (dst,)
                    appear(dst, here | dst)
                elif op == "PARAMS":
                    defined = tuple([r for r in insn.args if r >= virtual])
                    for number, parameter in enumerate(insn.args, start=1):
                        hint(parameter, number)
                    for register in defined:
                        appear(register, here | register)
                else:
                    defined = ()
                for register in used:  # read before the instruction writes
                    appear(register, here | register)
                    if register not in define:
                        use.add(register)
                rows.append((insn, defined, used))
                define.update(defined)
            term = block.term
            if term is not None:
                here += _NEXT_POSITION
                uses = tuple([r for r in term.uses() if r >= virtual])
                linear.term_uses = uses
                linear.targets = term.targets
                for register in uses:
                    appear(register, here | register)
                    if register not in define:
                        use.add(register)
                if term.op == "RET" and term.a >= virtual:
                    hint(term.a, RESULT)
        self.first_seen = list(first.values())


def _liveness(code: list[_LinearBlock]) -> None:
    """Fill in each block's ``live_in`` and ``live_out`` (virtual registers).  Blocks
    are looked at last to first (most of a function runs forwards, so most are right
    the first time), then again only when the live-in of a successor grew.  The graph
    is kept in lists of block positions, not on the blocks, so that it makes no
    reference cycle (the collector is paused while a program compiles)."""
    number = {block.index: position for position, block in enumerate(code)}
    successors = [[number[target] for target in block.targets] for block in code]
    predecessors: list[list[int]] = [[] for _ in code]
    for position, targets in enumerate(successors):
        for target in targets:
            predecessors[target].append(position)
    live_in = [block.live_in for block in code]
    queued = [True] * len(code)
    pending = list(range(len(code)))  # popped from the end: the last block first
    while pending:
        position = pending.pop()
        queued[position] = False
        targets = successors[position]
        if not targets:
            continue
        if len(targets) == 1:
            out = live_in[targets[0]]
        else:
            out = live_in[targets[0]] | live_in[targets[1]]
            for target in targets[2:]:
                out |= live_in[target]
        block = code[position]
        if out == block.live_out:
            continue
        block.live_out = out
        grown = block.use | (out - block.define) if out else block.use
        if grown == live_in[position]:
            continue
        live_in[position] = grown
        for predecessor in predecessors[position]:
            if not queued[predecessor]:
                queued[predecessor] = True
                pending.append(predecessor)
    for block, final in zip(code, live_in, strict=True):
        block.live_in = final


def _interference(
    code: list[_LinearBlock], call_number: dict[int, int]
) -> tuple[defaultdict[int, set[int]], defaultdict[int, list[int]]]:
    """Which virtual registers may not share a machine register: a value defined by an
    instruction interferes with every value live after it, except the source of a move
    (so the two may share), and values defined together interfere with each other.
    And for each virtual register, the calls (numbers from ``call_number``) it is live
    across: live after the call and not defined by it.  Exact, unlike an interval,
    which also covers blocks laid out between uses.

    Live sets are Python sets rather than bit masks: a big function (a long module's top
    level) has tens of thousands of values but few live at once, and a mask's cost
    grows with the highest value's number."""
    neighbours: defaultdict[int, set[int]] = defaultdict(set)
    across: defaultdict[int, list[int]] = defaultdict(list)
    for block in code:
        live = set(block.live_out)
        live.update(block.term_uses)
        for insn, defined, used in reversed(block.insns):
            op = insn.op
            if len(defined) == 1:  # the common case, without a set of its own
                register = defined[0]
                live.discard(register)
                source = insn.a if op == "MOV" and insn.a in live else -1
                if source >= 0:
                    live.discard(source)
                if live:
                    neighbours[register].update(live)
                    for other in live:
                        neighbours[other].add(register)
                if source >= 0:
                    live.add(source)
            elif defined:
                others = live.union(defined)
                for register in defined:
                    others.discard(register)
                    neighbours[register].update(others)
                    for other in others:
                        neighbours[other].add(register)
                    others.add(register)
                live.difference_update(defined)
            if op == "CALL" or op == "CALLI":
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
