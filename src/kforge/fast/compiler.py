"""Forge program → WebAssembly text, exact to the tick.

Module: memory 0 is the Forge data memory, memory 1 the state words
(:mod:`kforge.fast.abi`) and the refund table; one function per region
(:mod:`kforge.fast.analysis`: a procedure, or a piece of a long one),
``$route``, which tail-calls the region holding a pc, and the exported
``run() -> i32``, which calls ``$route`` at the state's pc and returns the exit
reason.

Every region function has the type ``(pc, fuel, frame) -> (next, fuel)``: it
runs from ``pc`` with ``fuel`` ticks to spend; ``frame`` packs the wasm calls it
is nested in and the return address ``ret`` the wasm call that started it pushed
(:data:`~kforge.fast.blocks.NO_RETURN` for none).  It returns ``next = ret``
when a RET pops ``ret`` (the caller goes on at its return site), or
``next = -reason`` when the machine must leave compiled code (pc and the fault
detail then in the state memory).  Shape of a region's function::

    load sp (if the region has stack instructions)
    block $leave
      block $e(last) … block $e(first)       ;; exit stubs, one per reason
        loop $dispatch
          block $mid                        ;; "the host steps the reference at $pc"
            block $B(last) … block $B(first)
              compare-and-branch to likely targets, then br_table on pc - start
            end  code of the first block
            end  code of the next block …
          end  br to the STEP stub
        end
      end  $reason = …; br $leave …
    end  store sp
    $reason: 0 → return ($pc, fuel); -1 → tail call $route($pc, …); else leave

Control: code of block *i* follows ``end $Bi``, so falling off a block runs the
next one and a forward branch to block *j* is ``br $Bj``; a backward branch sets
``$pc`` and goes through ``$dispatch``; a block branching to its own start is a
wasm ``loop``.  A CALL into another region is a wasm call of that region's
function, one into its own region a branch (a small leaf callee is copied into
the caller instead, :mod:`kforge.fast.calls`); a RET popping the address the
wasm call pushed returns from it, one popping an address in its own region
dispatches there, and any other transfer to another region is a tail call
through ``$route``.  Past ``CALL_DEPTH_LIMIT`` nested wasm calls a CALL into
another region is a tail call too, so deep Forge recursion never exhausts the
wasm stack.  Every instruction index is an entry point: a leader directly, any other
pc by way of the host stepping the reference interpreter up to the next leader.

State: registers and the flag recipe are written through to the state memory
(:mod:`kforge.fast.blocks`), so it is exact wherever control leaves but for sp,
which the exits store.

Ticks: ``$fuel`` is what this entry may spend.  A block costing C checks
``fuel >= C`` once (else it leaves with STEP at its leader and the host steps
the reference interpreter exactly) and subtracts C.  An instruction faulting
inside the block gives back the ticks of the instructions after it (the refund
table holds them, per instruction).
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from kforge.fast.abi import REFUNDS_OFFSET, Exit, Word
from kforge.fast.analysis import (
    STATIC_TARGETS,
    Block,
    ProgramPlan,
    Region,
    used_registers,
)
from kforge.fast.blocks import NO_RETURN, BlockWriter, FunctionContext
from kforge.fast.calls import inline_bodies
from kforge.fast.wat import RETURN, ExitStubs, register_local, state_load, state_store
from kforge.isa import Opcode, OpKind, opcodes_where, tick_cost

__all__ = ["COMPILER_VERSION", "MAX_COMPILED_CODE", "generate_wat"]

#: Bump when the generated code changes: it is part of the on-disk cache key.
COMPILER_VERSION: Final = "forge-wasm-8"
#: The most instructions the fast tier compiles.  A compile's time and memory grow
#: with the code (at 65,000 instructions of short procedures: some 50 MB of module
#: text, 600 MB at its peak, several seconds), so this bounds what one compile may
#: cost the host.  A longer program runs on the reference interpreter, with the same
#: results.
MAX_COMPILED_CODE: Final = 131_072
_MAX_LIKELY_TARGETS: Final = 8
_PAGE: Final = 65536
#: Instructions using sp: a function holding one keeps sp in a local.
_STACK_OPS: Final = opcodes_where(
    lambda info: info.kind in (OpKind.STACK, OpKind.CALL, OpKind.RETURN)
)
#: The most targets wasmtime takes in one ``br_table`` (its limit is 65,520).
_MAX_BR_TABLE: Final = 65_000
_SIGNATURE: Final = (
    "(type $region) (param $pc i32) (param $fuel i64) (param $frame i32) (result i32 i64)"
)


class _RegionWriter:
    """Emits the function running one region (see the module docstring)."""

    def __init__(
        self,
        plan: ProgramPlan,
        region: Region,
        bodies: dict[int, tuple[Block, ...]],
        out: list[str],
    ) -> None:
        self.plan = plan
        self.region = region
        self.out = out
        self.blocks = plan.blocks[region.first_block : region.end_block]
        self.exits = ExitStubs()
        code = plan.code[region.start : region.end]
        self.keeps_sp = any(insn.opcode in _STACK_OPS for insn in code)
        self.context = FunctionContext(plan, region, bodies, self.exits, self.keeps_sp)

    def locals(self) -> list[str]:
        i64 = ["$detail", "$a", "$addr", "$sp", "$fa", "$fb", "$fv"]
        code = list(self.plan.code[self.region.start : self.region.end])
        for insn in self.plan.code[self.region.start : self.region.end]:
            body = self.context.bodies.get(insn.imm) if insn.opcode == Opcode.CALL else None
            for block in body or ():
                code += self.plan.code[block.start : block.end]
        i64 += [register_local(number) for number in used_registers(tuple(code))]
        return ["(local $reason i32)", " ".join(f"(local {name} i64)" for name in i64)]

    def dispatch_table(self) -> str:
        plan, region = self.plan, self.region
        labels = [
            f"$B{plan.block_at[pc]}" if pc in plan.block_at else "$mid"
            for pc in range(region.start, region.end)
        ]
        return "br_table " + " ".join(labels) + " $mid"

    def likely_targets(self) -> list[int]:
        """Where dispatch most likely goes: backward jump and call targets, return sites."""
        plan, region = self.plan, self.region
        counts: Counter[int] = Counter()
        for block in self.blocks:
            last = plan.code[block.end - 1]
            target = last.imm
            backward = (
                last.opcode in STATIC_TARGETS
                and not block.self_loop
                and region.start <= target < region.end
                and plan.block_at[target] <= block.index
            )
            if backward:
                counts[target] += 2
        for block in self.blocks:  # return sites of calls in the region
            last = plan.code[block.end - 1]
            calls_here = last.opcode == Opcode.CALL and region.start <= last.imm < region.end
            if calls_here and block.end < region.end:
                counts[block.end] += 1
        ranked = sorted(counts, key=lambda pc: (-counts[pc], pc))
        return ranked[:_MAX_LIKELY_TARGETS]

    def body(self) -> list[str]:
        """The dispatch loop: the dispatch, then each block after the ``end`` of its label."""
        out = ["loop $dispatch", "block $mid"]
        out += [f"block $B{block.index}" for block in reversed(self.blocks)]
        # Performance note: compare-and-branch for the likely targets (loop heads, return
        # sites) before the br_table; an indirect jump shared by every backward branch
        # mispredicts, direct conditional branches do not.
        for target in self.likely_targets():
            out += ["local.get $pc", f"i32.const {target}", "i32.eq"]
            out.append(f"br_if $B{self.plan.block_at[target]}")
        out += ["local.get $pc", f"i32.const {self.region.start}", "i32.sub", self.dispatch_table()]
        for block in self.blocks:
            out.append("end")
            BlockWriter(self.context, block, out).emit()
        out += ["end", f"br {self.exits.label(Exit.STEP)}", "end"]
        return out

    def leaving(self) -> list[str]:
        """After ``$leave``: store sp; return, tail-call ``$route``, or leave compiled code."""
        out = state_store(Word.SP, "$sp") if self.keeps_sp else []
        out += ["local.get $reason", "i32.eqz", "if", "local.get $pc", "local.get $fuel"]
        out += ["return", "end", "local.get $reason", "i32.const 0", "i32.lt_s", "if"]
        out += ["local.get $pc", "local.get $fuel", "local.get $frame"]
        out += ["return_call $route", "end", "i32.const 0", "local.get $pc", "i64.extend_i32_u"]
        out += [f"i64.store $state offset={Word.PC.offset}", *state_store(Word.DETAIL, "$detail")]
        out += ["i32.const 0", "local.get $reason", "i32.sub", "local.get $fuel"]
        return out

    def function(self) -> None:
        body = self.body()
        out = self.out
        out.append(f"(func $region{self.region.index} {_SIGNATURE}")
        out += self.locals()
        if self.keeps_sp:
            out += [*state_load(Word.SP), "local.set $sp"]
        out += ["block $leave", *self.exits.openers(), *body, *self.exits.stubs(), "end"]
        out += [*self.leaving(), ")"]


class _ModuleWriter:
    """Emits the module: memories, the region functions, ``$route`` and ``run``."""

    def __init__(self, plan: ProgramPlan) -> None:
        self.plan = plan
        self.out: list[str] = []

    def route_function(self, region_table: int | None) -> None:
        """``$route``: tail-call the region holding ``$pc``; past the code, leave with STEP.

        Up to :data:`_MAX_BR_TABLE` instructions a ``br_table`` on the pc picks the
        region; a longer program (wasmtime caps a ``br_table``'s targets) reads the
        region's number from the table at ``region_table`` in the state memory and makes
        an indirect tail call."""
        out, regions = self.out, self.plan.regions
        out.append(f"(func $route {_SIGNATURE}")
        if region_table is not None:
            out += ["block $beyond", "local.get $pc", f"i32.const {len(self.plan.code)}"]
            out += ["i32.ge_u", "br_if $beyond", "local.get $pc", "local.get $fuel"]
            out += ["local.get $frame", "local.get $pc", "i32.const 2", "i32.shl"]
            out += [f"i32.load $state offset={region_table}"]
            out += ["return_call_indirect $regions (type $region)"]
            self.leave_beyond()
            return
        out.append("block $beyond")
        out += ["block"] * len(regions)
        # label k is the region k (innermost first); pcs past the code go $beyond
        depths = [str(region.index) for region in regions for _ in range(region.start, region.end)]
        out += ["local.get $pc", "br_table " + " ".join(depths) + " $beyond"]
        for region in regions:
            out += ["end", "local.get $pc", "local.get $fuel", "local.get $frame"]
            out.append(f"return_call $region{region.index}")
        self.leave_beyond()

    def leave_beyond(self) -> None:
        """The end of ``$route``: a pc past the code leaves with STEP (the host faults)."""
        out = self.out
        out += ["end", "i32.const 0", "local.get $pc", "i64.extend_i32_u"]
        out += [f"i64.store $state offset={Word.PC.offset}", f"i32.const {-Exit.STEP}"]
        out += ["local.get $fuel", ")"]

    def region_numbers(self) -> bytes:
        """For each instruction, the number of its region (little-endian 32-bit words)."""
        numbers = bytearray(4 * len(self.plan.code))
        for region in self.plan.regions:
            for pc in range(region.start, region.end):
                numbers[4 * pc : 4 * pc + 4] = region.index.to_bytes(4, "little")
        return bytes(numbers)

    def run_function(self) -> None:
        """``run``: enter at the state's pc with its fuel; store the fuel left; the exit reason."""
        out = self.out
        out.append('(func (export "run") (result i32) (local $next i32) (local $fuel i64)')
        out += ["i32.const 0", f"i32.load $state offset={Word.PC.offset}"]
        out += ["i32.const 0", f"i64.load $state offset={Word.FUEL.offset}"]
        out += [f"i32.const {NO_RETURN}", "call $route", "local.set $fuel", "local.set $next"]
        out += ["i32.const 0", "local.get $fuel", f"i64.store $state offset={Word.FUEL.offset}"]
        out += ["i32.const 0", "local.get $next", "i32.sub", ")"]

    def refund_table(self) -> bytes:
        """For each instruction, the ticks of its block's later instructions."""
        table = bytearray(len(self.plan.code))
        for block in self.plan.blocks:
            if block.host:
                continue  # the host runs it: never a compiled fault
            left = block.cost
            for pc in range(block.start, block.end):
                left -= tick_cost(self.plan.code[pc].opcode)
                table[pc] = left
        return bytes(table)

    def module(self) -> str:
        if len(self.plan.code) > MAX_COMPILED_CODE:
            raise ValueError(
                f"{len(self.plan.code)} instructions: more than the fast tier compiles "
                f"({MAX_COMPILED_CODE})"
            )
        refunds = self.refund_table()
        state_end = REFUNDS_OFFSET + len(refunds)
        region_table = None
        if len(self.plan.code) > _MAX_BR_TABLE:
            region_table = (state_end + 3) & ~3
            numbers = self.region_numbers()
            state_end = region_table + len(numbers)
        state_pages = -(-state_end // _PAGE)
        self.out += ["(module", "(type $region (func (param i32 i64 i32) (result i32 i64)))"]
        self.out += ["(memory $memory 1)", f"(memory $state {state_pages})"]
        escaped = "".join(f"\\{byte:02x}" for byte in refunds)
        self.out.append(f'(data (memory $state) (i32.const {REFUNDS_OFFSET}) "{escaped}")')
        if region_table is not None:
            escaped = "".join(f"\\{byte:02x}" for byte in numbers)
            self.out.append(f'(data (memory $state) (i32.const {region_table}) "{escaped}")')
            regions = self.plan.regions
            self.out.append(f"(table $regions {len(regions)} funcref)")
            names = " ".join(f"$region{region.index}" for region in regions)
            self.out.append(f"(elem (table $regions) (i32.const 0) func {names})")
        self.out += ['(export "memory" (memory $memory))', '(export "state" (memory $state))']
        bodies = inline_bodies(self.plan)
        for region in self.plan.regions:
            _RegionWriter(self.plan, region, bodies, self.out).function()
        self.route_function(region_table)
        self.run_function()
        self.out.append(")")
        return "\n".join(line for line in self.out if line)


def generate_wat(plan: ProgramPlan) -> str:
    """The WebAssembly text of the module running ``plan``'s program."""
    return _ModuleWriter(plan).module()


assert RETURN == 0  # ``leaving`` tests ``$reason`` for zero
assert MAX_COMPILED_CODE < NO_RETURN  # a return address is never NO_RETURN
