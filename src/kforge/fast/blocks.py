"""WebAssembly text for one basic block of a region's function: tick check, instructions, exits.

Registers are written through: an instruction writing a register stores it in
the state memory at once, and a block reads a register from the state memory
the first time it needs it, then from a local for the rest of the block.  So no
register lives in a local from one block to another and no exit stores one.

Performance note: Starlark code names some thirty registers per function, more
than a processor holds; kept in locals across blocks they were spilled anyway,
and every one was merged at every join (Cranelift's time doubled).  A store and
an early load per block cost less than that, and the state memory is then exact
whenever control leaves.

The flag recipe (:class:`~kforge.fast.abi.FlagKind`) is written through too, by
the flag setters whose flags can be observed only (see
:mod:`kforge.fast.analysis`).  sp alone stays in a local (``$sp``) for the whole
function: loaded when it starts and after each wasm call, stored before each
wasm call and where it leaves.

Leaving the function is a branch to a shared *exit stub* (:class:`ExitStubs`)
after setting ``$pc``.  An instruction checks everything before it writes
anything, so a fault leaves no trace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

from kforge.fast.abi import Exit, FlagKind, Word, fault_exit
from kforge.fast.analysis import (
    LOGIC_FLAG_SETTERS,
    NO_FALLTHROUGH,
    WRITES_RD,
    Block,
    ProgramPlan,
    Region,
    used_registers,
)
from kforge.fast.wat import (
    RETURN,
    ROUTE,
    ExitStubs,
    i64_const,
    recipe_stores,
    register_local,
    state_load,
    state_store,
)
from kforge.isa import OPCODES, FaultCode, Instruction, Opcode, tick_cost

__all__ = [
    "CALL_DEPTH_LIMIT",
    "EMITTERS",
    "FRAME_DEPTH_SHIFT",
    "NO_RETURN",
    "BlockWriter",
    "FunctionContext",
]

#: Nested wasm calls (CALLs into another region) before a CALL becomes a tail call: keeps
#: the wasm stack far below wasmtime's limit whatever the Forge program does.
CALL_DEPTH_LIMIT: Final = 48
#: A function's ``$frame`` packs the wasm calls it is nested in (the bits from this one
#: up) and the return address the call running it pushed (the bits below), or
#: :data:`NO_RETURN` for none.  Performance note: one value live through the function,
#: not two.
FRAME_DEPTH_SHIFT: Final = 24
NO_RETURN: Final = (1 << FRAME_DEPTH_SHIFT) - 1

_BINARY_OPS: Final[dict[int, str]] = {
    Opcode.ADD: "i64.add",
    Opcode.SUB: "i64.sub",
    Opcode.MUL: "i64.mul",
    Opcode.AND: "i64.and",
    Opcode.OR: "i64.or",
    Opcode.XOR: "i64.xor",
    Opcode.SHL: "i64.shl",
    Opcode.SHR: "i64.shr_u",
    Opcode.DIV: "i64.div_u",
    Opcode.MOD: "i64.rem_u",
}
#: opcode: (address register field, access size, wasm instruction, is a load)
_MEMORY_OPS: Final[dict[int, tuple[str, int, str, bool]]] = {
    Opcode.LOAD: ("rs1", 1, "i64.load8_u", True),
    Opcode.LOADW: ("rs1", 8, "i64.load", True),
    Opcode.STORE: ("rs2", 1, "i64.store8", False),
    Opcode.STOREW: ("rs2", 8, "i64.store", False),
}
#: Instructions after which the block writer never falls into the next region (a CALL
#: goes on by itself, an unknown opcode faults).
_NEVER_FALLS_OFF: Final = NO_FALLTHROUGH | {Opcode.CALL} | (set(range(256)) - set(OPCODES))
_CONDITIONS: Final[dict[int, str]] = {
    Opcode.JZ: "i64.eqz",
    Opcode.JNZ: "i64.ne",
    Opcode.JLT: "i64.lt_u",
}
_KINDS: Final[dict[int, FlagKind]] = {
    Opcode.ADD: FlagKind.ADD,
    Opcode.SUB: FlagKind.SUB,
    Opcode.MUL: FlagKind.MUL,
    Opcode.NEG: FlagKind.NEG,
    **dict.fromkeys(LOGIC_FLAG_SETTERS, FlagKind.LOGIC),
}


def _emitter(opcode: Opcode) -> str:
    """The :class:`BlockWriter` method that emits ``opcode``."""
    if opcode in _BINARY_OPS:
        return "binary"
    if opcode in (Opcode.NEG, Opcode.NOT):
        return "unary"
    if opcode in _MEMORY_OPS:
        return "memory"
    if opcode in _CONDITIONS:
        return "conditional"
    return f"op_{opcode.name.lower()}"


#: The emitter of every opcode compiled code runs (all but the host's channel opcodes).
EMITTERS: Final[dict[int, str]] = {
    info.opcode: _emitter(info.opcode) for info in OPCODES.values() if not info.is_host
}


@dataclass(frozen=True, slots=True)
class _Copy:
    """A procedure's blocks copied into a caller at the CALL at ``site``."""

    site: int
    back: int  # the return address the CALL pushed
    blocks: frozenset[int]


@dataclass(frozen=True, slots=True)
class FunctionContext:
    """What every block of one region's function shares."""

    plan: ProgramPlan
    region: Region
    #: Procedures copied into their callers (see :func:`kforge.fast.calls.inline_bodies`).
    bodies: dict[int, tuple[Block, ...]]
    exits: ExitStubs
    #: Whether the function keeps sp in ``$sp`` (it has stack instructions).
    keeps_sp: bool


class BlockWriter:
    """Emits one block of a region's function (labels: $B<i>, $L<i>, $dispatch, exit stubs),
    or of a procedure copied into it (labels $I<site>, $I<site>_<i>)."""

    def __init__(
        self, context: FunctionContext, block: Block, out: list[str], copy: _Copy | None = None
    ) -> None:
        self.context = context
        self.plan = context.plan
        self.region = context.region
        self.exits = context.exits
        self.copy = copy
        self.block = block
        self.out = out
        self.code = self.plan.code
        #: Registers whose local holds their value from here to the end of the block.
        self.cached: set[int] = set()
        #: Emitting a self-looping block's later iterations: registers in locals only.
        self.looping = False
        #: The last flag setter whose recipe the locals hold (in a self-looping block).
        self.last_setter: int | None = None

    # ------------------------------------------------------------- registers

    def get(self, register: int) -> list[str]:
        """Push the value of ``register``."""
        local = register_local(register)
        if register in self.cached:
            return [f"local.get {local}"]
        self.cached.add(register)
        return [*state_load(register), f"local.tee {local}"]

    def assign(self, register: int, value: list[str]) -> list[str]:
        """Set ``register`` to what ``value`` pushes, writing it through (not in a loop)."""
        local = register_local(register)
        self.cached.add(register)
        if self.looping:
            return [*value, f"local.set {local}"]
        return [
            "i32.const 0",
            *value,
            f"local.tee {local}",
            f"i64.store $state offset={8 * register}",
        ]

    def loop_stores(self) -> list[str]:
        """Leaving a self-looping block's later iterations: store the registers it writes and
        the recipe of the last flag setter (the locals hold the newest of both)."""
        if not self.looping:
            return []
        out = [
            line
            for register in self.written()
            for line in state_store(register, register_local(register))
        ]
        if self.last_setter is not None:
            kind = _KINDS[self.code[self.last_setter].opcode]
            out += recipe_stores(kind, *self.loop_recipe(self.last_setter))
        return out

    def written(self) -> list[int]:
        """The registers the block writes."""
        block, code = self.block, self.code
        return sorted(
            {code[pc].rd for pc in range(block.start, block.end) if code[pc].opcode in WRITES_RD}
        )

    # ------------------------------------------------------------------ exits

    def leave(self, pc: int, reason: int, *, conditional: bool = False) -> None:
        """Leave the function at ``pc`` for ``reason`` (when the i32 on the stack is non-zero,
        if ``conditional``)."""
        stores = self.loop_stores()
        label = self.exits.label(reason)
        if stores and conditional:
            self.out += ["if", *stores, f"i32.const {pc}", "local.set $pc", f"br {label}", "end"]
            return
        branch = "br_if" if conditional else "br"
        self.out += [*stores, f"i32.const {pc}", "local.set $pc", f"{branch} {label}"]

    def fault(self, pc: int, code: FaultCode, *, conditional: bool = False) -> None:
        """Fault at ``pc``: its charge kept, later instructions' refunded (by the stub)."""
        self.leave(pc, fault_exit(code), conditional=conditional)

    def fault_if(self, pc: int, code: FaultCode) -> None:
        """Fault when the i32 on the stack is non-zero."""
        self.fault(pc, code, conditional=True)

    def stack_fault_if(self, pc: int, code: FaultCode) -> None:
        """Fault when the i32 on the stack is non-zero, for a stack check.

        Performance note: as an ``if`` around the exit rather than a ``br_if`` to it;
        call-heavy code (PUSH, CALL, POP, RET in a row) runs ~10% faster so.
        """
        if self.looping:
            self.fault_if(pc, code)
            return
        self.out.append("if")
        self.fault(pc, code)
        self.out.append("end")

    def inside(self, pc: int) -> bool:
        return self.region.start <= pc < self.region.end

    def branch(self, target: int, *, conditional: bool = False) -> None:
        """Go on at block leader ``target`` (when the i32 on the stack is non-zero, if
        ``conditional``): a branch inside the region, a tail call to another."""
        index = self.plan.block_at[target]
        if self.copy is not None:  # only forward branches inside the copy (see ``inline_bodies``)
            label = f"$I{self.copy.site}_{index}"
            self.out.append(f"br_if {label}" if conditional else f"br {label}")
            return
        if not self.inside(target):
            self.leave(target, ROUTE, conditional=conditional)
            return
        if index == self.block.index and self.block.self_loop:
            label = f"$L{index}" if self.looping else f"$enter{index}"
        elif index > self.block.index:
            # Performance note: forward branches are direct; only backward ones dispatch.
            label = f"$B{index}"
        else:
            if conditional:
                self.out.append("if")
            self.out += [f"i32.const {target}", "local.set $pc", "br $dispatch"]
            if conditional:
                self.out.append("end")
            return
        self.out.append(f"br_if {label}" if conditional else f"br {label}")

    # ------------------------------------------------------------------ block

    def emit(self) -> None:
        block, out = self.block, self.out
        if block.host:
            self.leave(block.start, Exit.STEP)
            return
        if not block.self_loop:
            self.iteration()
        else:
            # Performance note: a self-looping block (a hot inner loop) runs its first
            # iteration as any block, its later ones with its registers in locals alone.
            index = block.index
            out += [f"block $after{index}", f"block $enter{index}"]
            self.iteration()  # branches to $enter<i> to loop, else falls out of $after<i>
            if self.code[block.end - 1].opcode != Opcode.JMP:
                out.append(f"br $after{index}")
            out += ["end", f"loop $L{index}"]
            self.looping, self.cached = True, set(self.named())
            self.last_setter = max(
                (pc for pc in range(block.start, block.end) if pc in self.plan.flag_materialized),
                default=None,
            )
            self.iteration()
            out += [*self.loop_stores(), "end", "end"]
            self.looping = False
        if self.copy is None:
            self.fall_off()

    def iteration(self) -> None:
        """The tick check and the instructions, once."""
        block, out = self.block, self.out
        # Performance note: one tick check and one subtraction per block.
        out += ["local.get $fuel", i64_const(block.cost), "i64.lt_u"]
        self.leave(block.start, Exit.STEP, conditional=True)
        out += ["local.get $fuel", i64_const(block.cost), "i64.sub", "local.set $fuel"]
        for pc in range(block.start, block.end):
            self.instruction(pc, self.code[pc])

    def named(self) -> set[int]:
        """The registers the block's instructions name."""
        return set(used_registers(self.code[self.block.start : self.block.end]))

    def instruction(self, pc: int, insn: Instruction) -> None:
        emitter = EMITTERS.get(insn.opcode)
        if emitter is None:  # host opcodes never reach here: they are blocks of their own
            self.fault(pc, FaultCode.INVALID_INSTRUCTION)
        else:
            getattr(self, emitter)(pc, insn)

    def fall_off(self) -> None:
        """After the region's last block: go on in the next region (or off the code)."""
        following = self.block.end
        if following != self.region.end:
            return
        if self.code[following - 1].opcode in _NEVER_FALLS_OFF:
            return
        # past the code the host steps and faults
        reason = Exit.STEP if following >= len(self.code) else ROUTE
        self.leave(following, reason)

    # ------------------------------------------------------------ arithmetic

    def flags(self, pc: int, insn: Instruction) -> tuple[str, str, list[str]]:
        """A setter whose flags can be seen keeps its recipe: ``local.tee`` after operand a
        and b while computing, then the stores.

        In a self-looping block the recipe stays where :meth:`loop_recipe` says for the
        loop's exits to store, and is stored by the first iteration only.
        """
        if pc not in self.plan.flag_materialized:
            return "", "", []
        kind = _KINDS[insn.opcode]
        if self.block.self_loop:
            v, b, a = self.loop_recipe(pc)
            tee_a = f"local.tee {a}" if kind == FlagKind.MUL and a == "$fa" else ""
            uses_b = kind in (FlagKind.ADD, FlagKind.SUB, FlagKind.MUL)
            tee_b = f"local.tee {b}" if uses_b and b == "$fb" else ""
            stores = [] if self.looping else recipe_stores(kind, v, b, a)
            return tee_a, tee_b, stores
        # the written register holds v; an operand the instruction overwrites is kept aside
        tee_a, a = (
            ("local.tee $fa", "$fa") if insn.rs1 == insn.rd else ("", register_local(insn.rs1))
        )
        tee_b, b = (
            ("local.tee $fb", "$fb") if insn.rs2 == insn.rd else ("", register_local(insn.rs2))
        )
        if kind != FlagKind.MUL:
            tee_a = ""
        if kind not in (FlagKind.ADD, FlagKind.SUB, FlagKind.MUL):
            tee_b = ""
        return tee_a, tee_b, recipe_stores(kind, register_local(insn.rd), b, a)

    def loop_recipe(self, pc: int) -> tuple[str, str, str]:
        """The locals holding v, b and a of setter ``pc`` of a self-looping block until its
        next run: its registers when the block writes its destination nowhere else and its
        operands not at all, else copies in ``$fv``, ``$fb``, ``$fa``.

        Performance note: a loop's recipe then costs no instruction while it runs.
        """
        block, code = self.block, self.code
        writes = Counter(
            code[k].rd for k in range(block.start, block.end) if code[k].opcode in WRITES_RD
        )
        insn = code[pc]
        v = register_local(insn.rd) if writes[insn.rd] == 1 else "$fv"
        b = register_local(insn.rs2) if not writes[insn.rs2] else "$fb"
        a = register_local(insn.rs1) if not writes[insn.rs1] else "$fa"
        return v, b, a

    def value_flags(self, pc: int, value: list[str]) -> list[str]:
        """``value``, kept in ``$fv`` too when a self-looping block's setter needs it there."""
        materialized = pc in self.plan.flag_materialized
        if materialized and self.block.self_loop and self.loop_recipe(pc)[0] == "$fv":
            return [*value, "local.tee $fv"]
        return value

    def binary(self, pc: int, insn: Instruction) -> None:
        out, op = self.out, insn.opcode
        if op in (Opcode.DIV, Opcode.MOD):
            out += [*self.get(insn.rs2), "i64.eqz"]
            self.fault_if(pc, FaultCode.DIVIDE_BY_ZERO)
        # Performance note: no flag is computed here; at most the operands are kept (a recipe).
        tee_a, tee_b, recipe = self.flags(pc, insn)
        value = [*self.get(insn.rs1), tee_a, *self.get(insn.rs2), tee_b, _BINARY_OPS[op]]
        out += [*self.assign(insn.rd, self.value_flags(pc, value)), *recipe]
        self.set_last_setter(pc)

    def unary(self, pc: int, insn: Instruction) -> None:
        if insn.opcode == Opcode.NEG:
            value = ["i64.const 0", *self.get(insn.rs1), "i64.sub"]
        else:
            value = [*self.get(insn.rs1), "i64.const -1", "i64.xor"]
        self.out += [*self.assign(insn.rd, self.value_flags(pc, value)), *self.flags(pc, insn)[2]]
        self.set_last_setter(pc)

    def set_last_setter(self, pc: int) -> None:
        if pc in self.plan.flag_materialized:
            self.last_setter = pc

    # ---------------------------------------------------------------- memory

    def memory(self, pc: int, insn: Instruction) -> None:
        """INVALID_ADDRESS unless ``a + n <= quota`` (u64 ``a``, no wrap), then one access."""
        field, size, access, is_load = _MEMORY_OPS[insn.opcode]
        out = self.out
        out += self.get(getattr(insn, field))
        if insn.imm:
            out += [i64_const(insn.imm), "i64.add"]
        bound = Word.LAST_BYTE if size == 1 else Word.LAST_WORD
        out += ["local.tee $addr", *state_load(bound), "i64.gt_u"]
        self.fault_if(pc, FaultCode.INVALID_ADDRESS)
        if is_load:
            out += self.assign(insn.rd, ["local.get $addr", "i32.wrap_i64", f"{access} align=1"])
        else:
            out += ["local.get $addr", "i32.wrap_i64"]
            out += [*self.get(insn.rs1), f"{access} align=1"]

    def push(self, pc: int, value: list[str]) -> None:
        """Push the i64 ``value`` puts on the stack; STACK_OVERFLOW when sp - 8 < heap_start."""
        out = self.out
        out += ["local.get $sp", *state_load(Word.PUSH_FLOOR), "i64.lt_u"]
        self.stack_fault_if(pc, FaultCode.STACK_OVERFLOW)
        out += ["local.get $sp", "i64.const 8", "i64.sub", "local.tee $sp", "i32.wrap_i64"]
        out += [*value, "i64.store align=1"]

    def check_pop(self, pc: int) -> None:
        """STACK_UNDERFLOW when sp + 8 > stack_start."""
        self.out += ["local.get $sp", "i64.const 8", "i64.add", *state_load(Word.STACK_START)]
        self.out.append("i64.gt_u")
        self.stack_fault_if(pc, FaultCode.STACK_UNDERFLOW)

    def op_push(self, pc: int, insn: Instruction) -> None:
        self.push(pc, self.get(insn.rs1))

    def op_pop(self, pc: int, insn: Instruction) -> None:
        out = self.out
        self.check_pop(pc)
        out += self.assign(insn.rd, ["local.get $sp", "i32.wrap_i64", "i64.load align=1"])
        out += ["local.get $sp", "i64.const 8", "i64.add", "local.set $sp"]

    # ---------------------------------------------------------- control flow

    def conditional(self, pc: int, insn: Instruction) -> None:
        """JZ, JNZ, JLT: jump to imm when the condition holds; the target is checked only then."""
        out = self.out
        out += self.get(insn.rs1)
        if insn.opcode == Opcode.JNZ:
            out.append("i64.const 0")
        elif insn.opcode == Opcode.JLT:
            out += self.get(insn.rs2)
        out.append(_CONDITIONS[insn.opcode])
        if insn.imm >= len(self.code):
            self.fault_if(pc, FaultCode.INVALID_ADDRESS)
        else:
            self.branch(insn.imm, conditional=True)

    def op_jmp(self, pc: int, insn: Instruction) -> None:
        if insn.imm >= len(self.code):
            self.fault(pc, FaultCode.INVALID_ADDRESS)
        else:
            self.branch(insn.imm)

    def op_call(self, pc: int, insn: Instruction) -> None:
        """Push the return address; then a copy of a small callee, a branch to a callee in
        this region, or a wasm call of another region's function."""
        target = insn.imm
        if target >= len(self.code):
            self.fault(pc, FaultCode.INVALID_ADDRESS)
            return
        back = pc + 1
        self.push(pc, [i64_const(back)])
        body = self.context.bodies.get(target)
        if body is not None:
            self.inline(pc, back, body)
            return
        if self.inside(target):
            self.branch(target)
            return
        # Performance note: a wasm call, so that the RET at its end is a wasm return
        # (predicted by the processor).
        out = self.out
        out += self.save()
        out += ["local.get $frame", f"i32.const {CALL_DEPTH_LIMIT << FRAME_DEPTH_SHIFT}"]
        out.append("i32.ge_u")
        self.leave(target, ROUTE, conditional=True)
        # the callee's frame: one deeper, returning to ``back``
        out += [f"i32.const {target}", "local.get $fuel", "local.get $frame"]
        out += [f"i32.const {-1 << FRAME_DEPTH_SHIFT}", "i32.and"]
        out += [f"i32.const {(1 << FRAME_DEPTH_SHIFT) + back}", "i32.add"]
        out.append(f"call $region{self.plan.region_index(target)}")
        # unless it returned to ``back``, an exit further in: pass it on (all stored already)
        out += ["local.set $fuel", "local.tee $pc", f"i32.const {back}", "i32.ne", "if"]
        out += ["local.get $pc", "local.get $fuel", "return", "end"]
        out += self.restore()
        if not self.inside(back):
            self.leave(back, ROUTE)

    def inline(self, site: int, back: int, body: tuple[Block, ...]) -> None:
        """The callee's blocks, copied here; its RET to ``back`` falls out of the copy."""
        out = self.out
        copy = _Copy(site, back, frozenset(block.index for block in body))
        out += [f"block $I{site}", *(f"block $I{site}_{block.index}" for block in body[:0:-1])]
        for position, block in enumerate(body):
            if position:
                out.append("end")
            BlockWriter(self.context, block, out, copy).emit()
        out.append("end")
        if not self.inside(back):
            self.leave(back, ROUTE)

    def save(self) -> list[str]:
        """Store sp (before a wasm call)."""
        return state_store(Word.SP, "$sp") if self.context.keeps_sp else []

    def restore(self) -> list[str]:
        """Load sp (after a wasm call)."""
        return [*state_load(Word.SP), "local.set $sp"] if self.context.keeps_sp else []

    def op_ret(self, pc: int, insn: Instruction) -> None:
        """Pop the return address: back to the wasm caller if it pushed it, else on there."""
        out = self.out
        self.check_pop(pc)
        out += ["local.get $sp", "i32.wrap_i64", "i64.load align=1", "local.tee $a"]
        out += [i64_const(len(self.code)), "i64.ge_u"]
        self.stack_fault_if(pc, FaultCode.INVALID_ADDRESS)
        out += ["local.get $sp", "i64.const 8", "i64.add", "local.set $sp"]
        if self.copy is not None:  # back to the caller the copy is in, else elsewhere
            out += ["local.get $a", "i32.wrap_i64", "local.tee $pc", f"i32.const {self.copy.back}"]
            out += ["i32.eq", f"br_if $I{self.copy.site}", f"br {self.exits.label(ROUTE)}"]
            return
        out += ["local.get $a", "i32.wrap_i64", "local.tee $pc", "local.get $frame"]
        out += [f"i32.const {NO_RETURN}", "i32.and", "i32.eq"]
        out.append(f"br_if {self.exits.label(RETURN)}")
        # back into this region (a call in it, a computed jump): dispatch here
        start, size = self.region.start, self.region.end - self.region.start
        out += ["local.get $pc", f"i32.const {start}", "i32.sub", f"i32.const {size}", "i32.lt_u"]
        out += ["br_if $dispatch", f"br {self.exits.label(ROUTE)}"]

    # ------------------------------------------------------ immediates, system

    def op_li(self, pc: int, insn: Instruction) -> None:
        self.out += self.assign(insn.rd, [i64_const(insn.imm)])

    def op_halt(self, pc: int, insn: Instruction) -> None:
        self.leave(pc, Exit.HALT)

    def op_fault(self, pc: int, insn: Instruction) -> None:
        self.out += [i64_const(insn.imm), "local.set $detail"]
        self.fault(pc, FaultCode.USER_FAULT)

    def op_nop(self, pc: int, insn: Instruction) -> None:
        pass

    def op_tick(self, pc: int, insn: Instruction) -> None:
        self.out += [*state_load(Word.YIELD), "i32.wrap_i64"]
        self.leave(pc + 1, Exit.YIELD, conditional=True)

    def op_budget(self, pc: int, insn: Instruction) -> None:
        """rd = tick_budget - ticks_used after this instruction's charge."""
        refund = self.block.cost - sum(
            tick_cost(self.code[k].opcode) for k in range(self.block.start, pc + 1)
        )
        value = [*state_load(Word.BUDGET_BASE), "local.get $fuel", "i64.add"]
        self.out += self.assign(insn.rd, [*value, i64_const(refund), "i64.add"])
