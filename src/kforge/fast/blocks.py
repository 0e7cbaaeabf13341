"""WebAssembly text for one basic block: tick check, state words, instructions, exits.

State words (registers, sp, the bounds the host precomputes) live in the state
memory between blocks.  A block loads the words it reads into locals after its
tick check and, at each of its exits, stores the words it has written so far,
so the state memory is exact whenever control leaves the block.  An instruction
checks everything before it writes anything, so a fault leaves no trace.

A block that branches to its own start (a hot inner loop) is emitted twice: a
first iteration as above, then a wasm ``loop`` for the following iterations,
whose locals are all live already (the first iteration loaded or wrote them),
so iterations touch no state memory; its exits store every word the block
writes.

Flags are stored as a recipe (:class:`~kforge.fast.abi.FlagKind`) at exits only.
The recipe of a flag setter is rebuilt at the exit from the registers when they
still hold its operands and result (no cost on the hot path); otherwise the
setter copies them into ``$flag_a``/``$flag_b``/``$flag_v`` as it runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

from kforge.fast.abi import Exit, FlagKind, Word, fault_exit
from kforge.fast.analysis import LOGIC_FLAG_SETTERS, Block, ProgramPlan, Region
from kforge.isa import OPCODES, FaultCode, Instruction, Opcode, tick_cost

__all__ = ["EMITTERS", "FIXED_SLOTS", "BlockWriter", "i64_const", "register_local"]

_SIGN_BIT: Final = 1 << 63
_I64_WRAP: Final = 1 << 64

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


def i64_const(value: int) -> str:
    """An ``i64.const`` of a u64 value (written signed)."""
    return f"i64.const {value - _I64_WRAP if value & _SIGN_BIT else value}"


def register_local(number: int) -> str:
    return f"$r{number}"


@dataclass(frozen=True, slots=True)
class _Slot:
    """A state word a block may cache in a local."""

    local: str
    offset: int


_REGISTER_SLOTS: Final = tuple(_Slot(register_local(number), 8 * number) for number in range(256))


def _register(number: int) -> _Slot:
    return _REGISTER_SLOTS[number]


SP: Final = _Slot("$sp", Word.SP.offset)
LAST_BYTE: Final = _Slot("$last_byte", Word.LAST_BYTE.offset)
LAST_WORD: Final = _Slot("$last_word", Word.LAST_WORD.offset)
PUSH_FLOOR: Final = _Slot("$push_floor", Word.PUSH_FLOOR.offset)
STACK_START: Final = _Slot("$stack_start", Word.STACK_START.offset)
BUDGET_BASE: Final = _Slot("$budget_base", Word.BUDGET_BASE.offset)
YIELD: Final = _Slot("$yield", Word.YIELD.offset)
#: The i64 locals every function declares for the non-register slots.
FIXED_SLOTS: Final = (SP, LAST_BYTE, LAST_WORD, PUSH_FLOOR, STACK_START, BUDGET_BASE, YIELD)


def _effects(insn: Instruction) -> tuple[list[_Slot], list[_Slot]]:
    """The state words ``insn`` reads and writes (flags aside)."""
    op = insn.opcode
    rd, rs1, rs2 = _REGISTER_SLOTS[insn.rd], _REGISTER_SLOTS[insn.rs1], _REGISTER_SLOTS[insn.rs2]
    if op in _BINARY_OPS:
        return [rs1, rs2], [rd]
    if op in (Opcode.NEG, Opcode.NOT):
        return [rs1], [rd]
    if op in _MEMORY_OPS:
        _, size, _, is_load = _MEMORY_OPS[op]
        bound = LAST_BYTE if size == 1 else LAST_WORD
        return ([rs1, bound], [rd]) if is_load else ([rs1, rs2, bound], [])
    if op == Opcode.PUSH:
        return [rs1, SP, PUSH_FLOOR], [SP]
    if op == Opcode.POP:
        return [SP, STACK_START], [rd, SP]
    if op in (Opcode.JZ, Opcode.JNZ):
        return [rs1], []
    if op == Opcode.JLT:
        return [rs1, rs2], []
    if op == Opcode.CALL:
        return [SP, PUSH_FLOOR], [SP]
    if op == Opcode.RET:
        return [SP, STACK_START], [SP]
    if op == Opcode.LI:
        return [], [rd]
    if op == Opcode.BUDGET:
        return [BUDGET_BASE], [rd]
    if op == Opcode.TICK:
        return [YIELD], []
    return [], []


class _FlagRecipes:
    """For each flag setter of a block whose flags can be observed: how its recipe is stored."""

    def __init__(
        self,
        code: tuple[Instruction, ...],
        block: Block,
        materialized: frozenset[int],
        effects: dict[int, tuple[list[_Slot], list[_Slot]]],
    ) -> None:
        self.code = code
        self.setters = [pc for pc in range(block.start, block.end) if pc in materialized]
        writers: Counter[str] = Counter(slot.local for pc in effects for slot in effects[pc][1])
        # (a, b, v) as wasm expressions, or None when the setter must save them as it runs
        self.sources = {pc: self._rebuilt(code[pc], writers) for pc in self.setters}

    @staticmethod
    def _rebuilt(
        insn: Instruction, writers: Counter[str]
    ) -> tuple[list[str], list[str], list[str]] | None:
        """The recipe from registers still holding it, if the block writes them nowhere else."""
        rd, rs1, rs2 = (register_local(n) for n in (insn.rd, insn.rs1, insn.rs2))
        if writers[rd] != 1:
            return None
        v = [f"local.get {rd}"]
        kind = _KINDS[insn.opcode]
        untouched = {name for name in (rs1, rs2) if name != rd and writers[name] == 0}
        if kind in (FlagKind.NEG, FlagKind.LOGIC):
            return [], [], v
        if kind == FlagKind.MUL:
            if {rs1, rs2} <= untouched:
                return [f"local.get {rs1}"], [f"local.get {rs2}"], v
            return None
        # ADD and SUB record b and v (the host derives a); rebuild b from whichever survives
        if rs2 in untouched:
            return [], [f"local.get {rs2}"], v
        if rs1 in untouched:  # ADD: b = v - a; SUB: b = a - v
            if kind == FlagKind.ADD:
                return [], [*v, f"local.get {rs1}", "i64.sub"], v
            return [], [f"local.get {rs1}", *v, "i64.sub"], v
        return None

    def saved(self, pc: int) -> bool:
        return pc in self.sources and self.sources[pc] is None

    def stores(self, pc: int) -> list[str]:
        """Instructions storing the recipe of setter ``pc`` into the state memory."""
        kind = _KINDS[self.code[pc].opcode]
        source = self.sources[pc]
        a, b, v = (
            source
            if source is not None
            else (["local.get $flag_a"], ["local.get $flag_b"], ["local.get $flag_v"])
        )
        words = [(Word.FLAG_KIND, [i64_const(kind)]), (Word.FLAG_V, v)]
        if kind in (FlagKind.ADD, FlagKind.SUB, FlagKind.MUL):
            words.append((Word.FLAG_B, b))
        if kind == FlagKind.MUL:
            words.append((Word.FLAG_A, a))
        out: list[str] = []
        for word, value in words:
            out += ["i32.const 0", *value, f"i64.store $state offset={word.offset}"]
        return out


class BlockWriter:
    """Emits one block of a region's function (labels: $B<i>, $mid, $continue, $dispatch, $exit)."""

    def __init__(self, plan: ProgramPlan, region: Region, block: Block, out: list[str]) -> None:
        self.plan = plan
        self.region = region
        self.block = block
        self.out = out
        self.code = plan.code
        self.refund_after: dict[int, int] = {}
        spent = 0
        for pc in range(block.start, block.end):
            spent += tick_cost(self.code[pc].opcode)
            self.refund_after[pc] = block.cost - spent
        self.effects = {pc: _effects(self.code[pc]) for pc in range(block.start, block.end)}
        self.reads: dict[_Slot, None] = {}
        self.writes: dict[_Slot, None] = {}
        for reads, writes in self.effects.values():
            self.reads.update(dict.fromkeys(reads))
            self.writes.update(dict.fromkeys(writes))
        self.flags = _FlagRecipes(self.code, block, plan.flag_materialized, self.effects)
        self.in_loop = False  # emitting the loop that runs the second and later iterations
        self.dirty: dict[_Slot, None] = {}
        self.visible_setter: int | None = None  # the flag setter an exit here must record
        self.left = False  # the terminator left the block: no fallthrough store

    # ------------------------------------------------------------ state words

    def load(self, slots: dict[_Slot, None]) -> None:
        for slot in slots:
            self.out += [
                "i32.const 0",
                f"i64.load $state offset={slot.offset}",
                f"local.set {slot.local}",
            ]

    def store(self) -> None:
        """Write back what this exit must: what was written so far (in the loop: all the block
        writes) and the recipe of the flags as they stand."""
        for slot in self.writes if self.in_loop else self.dirty:
            self.out += [
                "i32.const 0",
                f"local.get {slot.local}",
                f"i64.store $state offset={slot.offset}",
            ]
        setter = self.visible_setter
        if setter is None and self.in_loop and self.flags.setters:
            setter = self.flags.setters[-1]  # set by the previous iteration
        if setter is not None:
            self.out += self.flags.stores(setter)

    # ------------------------------------------------------------------ exits

    def fault(self, pc: int, code: FaultCode) -> None:
        """Leave with a fault at ``pc``: its charge kept, later instructions' refunded."""
        out = self.out
        self.store()
        out += [f"i32.const {pc}", "local.set $pc"]
        refund = self.refund_after[pc]
        if refund:
            out += ["local.get $fuel", i64_const(refund), "i64.add", "local.set $fuel"]
        out += [f"i32.const {fault_exit(code)}", "local.set $reason", "br $exit"]

    def fault_if(self, pc: int, code: FaultCode) -> None:
        """Fault when the i32 on the stack is non-zero."""
        self.out.append("if")
        self.fault(pc, code)
        self.out.append("end")

    def leave(self, pc: int, reason: Exit) -> None:
        self.out += [f"i32.const {pc}", "local.set $pc", f"i32.const {reason}", "local.set $reason"]
        self.out.append("br $exit")

    def jump(self, target: int) -> None:
        """Transfer control to ``target``, a leader inside the code; state already stored."""
        block_index = self.plan.block_at[target]
        if not self.region.first_block <= block_index < self.region.end_block:
            self.out += [f"i32.const {target}", "local.set $pc", "br $continue"]
        elif block_index > self.block.index:
            # Performance note: forward branches are direct; only backward ones dispatch.
            self.out.append(f"br $B{block_index}")
        else:
            self.out += [f"i32.const {target}", "local.set $pc", "br $dispatch"]

    # ------------------------------------------------------------------ block

    def emit(self) -> None:
        block, out = self.block, self.out
        if block.host:
            self.leave(block.start, Exit.STEP)
            return
        if not block.self_loop:
            self.iteration(in_loop=False)
            if not self.left:
                self.store()
            return
        # Performance note: a self-looping block runs its later iterations in locals alone.
        index = block.index
        out += [f"block $after{index}", f"block $enter{index}"]
        self.iteration(in_loop=False)  # branches to $enter<i> to loop, else stores and leaves
        out += ["end", f"loop $L{index}"]
        self.iteration(in_loop=True)
        out.append("end")
        self.store()
        out.append("end")

    def iteration(self, *, in_loop: bool) -> None:
        """One pass over the block: tick check, loads (first pass), instructions."""
        block, out = self.block, self.out
        self.in_loop, self.dirty, self.visible_setter, self.left = in_loop, {}, None, False
        # Performance note: one tick check and one subtraction per block.
        out += ["local.get $fuel", i64_const(block.cost), "i64.lt_u", "if"]
        if in_loop:
            self.store()
        out += [f"i32.const {block.start}", "local.set $pc", "br $mid", "end"]
        out += ["local.get $fuel", i64_const(block.cost), "i64.sub", "local.set $fuel"]
        if not in_loop:
            self.load(self.reads)
        for pc in range(block.start, block.end):
            insn = self.code[pc]
            self.instruction(pc, insn)
            self.dirty.update(dict.fromkeys(self.effects[pc][1]))
            if pc in self.flags.sources:
                self.visible_setter = pc

    def instruction(self, pc: int, insn: Instruction) -> None:
        emitter = EMITTERS.get(insn.opcode)
        if emitter is None:  # host opcodes never reach here: they are blocks of their own
            self.fault(pc, FaultCode.INVALID_INSTRUCTION)
            self.left = True
        else:
            getattr(self, emitter)(pc, insn)

    # ------------------------------------------------------------ arithmetic

    def binary(self, pc: int, insn: Instruction) -> None:
        out, op = self.out, insn.opcode
        rs1, rs2, rd = (register_local(n) for n in (insn.rs1, insn.rs2, insn.rd))
        if op in (Opcode.DIV, Opcode.MOD):
            out += [f"local.get {rs2}", "i64.eqz"]
            self.fault_if(pc, FaultCode.DIVIDE_BY_ZERO)
        # Performance note: no flag is computed here; at most the operands are kept (a recipe).
        if self.flags.saved(pc) and op == Opcode.MUL:
            out += [
                f"local.get {rs1}",
                "local.tee $flag_a",
                f"local.get {rs2}",
                "local.tee $flag_b",
            ]
            out += [_BINARY_OPS[op], "local.tee $flag_v", f"local.set {rd}"]
        elif self.flags.saved(pc) and op in (Opcode.ADD, Opcode.SUB):
            out += [f"local.get {rs1}", f"local.get {rs2}", "local.tee $flag_b"]
            out += [_BINARY_OPS[op], "local.tee $flag_v", f"local.set {rd}"]
        elif self.flags.saved(pc):
            out += [f"local.get {rs1}", f"local.get {rs2}", _BINARY_OPS[op], "local.tee $flag_v"]
            out.append(f"local.set {rd}")
        else:
            out += [f"local.get {rs1}", f"local.get {rs2}", _BINARY_OPS[op], f"local.set {rd}"]

    def unary(self, pc: int, insn: Instruction) -> None:
        out = self.out
        rs1, rd = register_local(insn.rs1), register_local(insn.rd)
        if insn.opcode == Opcode.NEG:
            out += ["i64.const 0", f"local.get {rs1}", "i64.sub"]
        else:
            out += [f"local.get {rs1}", "i64.const -1", "i64.xor"]
        if self.flags.saved(pc):
            out.append("local.tee $flag_v")
        out.append(f"local.set {rd}")

    # ---------------------------------------------------------------- memory

    def memory(self, pc: int, insn: Instruction) -> None:
        """INVALID_ADDRESS unless ``a + n <= quota`` (u64 ``a``, no wrap), then one access."""
        field, size, access, is_load = _MEMORY_OPS[insn.opcode]
        out = self.out
        out.append(f"local.get {register_local(getattr(insn, field))}")
        if insn.imm:
            out += [i64_const(insn.imm), "i64.add"]
        bound = LAST_BYTE if size == 1 else LAST_WORD
        out += ["local.tee $addr", f"local.get {bound.local}", "i64.gt_u"]
        self.fault_if(pc, FaultCode.INVALID_ADDRESS)
        out += ["local.get $addr", "i32.wrap_i64"]
        if is_load:
            out += [f"{access} align=1", f"local.set {register_local(insn.rd)}"]
        else:
            out += [f"local.get {register_local(insn.rs1)}", f"{access} align=1"]

    def push(self, pc: int, value: str) -> None:
        """Push the i64 ``value`` puts on the stack; STACK_OVERFLOW when sp - 8 < heap_start."""
        out = self.out
        out += ["local.get $sp", "local.get $push_floor", "i64.lt_u"]
        self.fault_if(pc, FaultCode.STACK_OVERFLOW)
        out += ["local.get $sp", "i64.const 8", "i64.sub", "local.tee $sp", "i32.wrap_i64"]
        out += [value, "i64.store align=1"]
        self.dirty[SP] = None

    def check_pop(self, pc: int) -> None:
        """STACK_UNDERFLOW when sp + 8 > stack_start."""
        self.out += [
            "local.get $sp",
            "i64.const 8",
            "i64.add",
            "local.get $stack_start",
            "i64.gt_u",
        ]
        self.fault_if(pc, FaultCode.STACK_UNDERFLOW)

    def op_push(self, pc: int, insn: Instruction) -> None:
        self.push(pc, f"local.get {register_local(insn.rs1)}")

    def op_pop(self, pc: int, insn: Instruction) -> None:
        out = self.out
        self.check_pop(pc)
        out += [
            "local.get $sp",
            "i32.wrap_i64",
            "i64.load align=1",
            f"local.set {register_local(insn.rd)}",
        ]
        out += ["local.get $sp", "i64.const 8", "i64.add", "local.set $sp"]

    # ---------------------------------------------------------- control flow

    def self_jump(self, condition: list[str] | None) -> None:
        """The branch back to the block's start: into the loop, or round it again."""
        out, index = self.out, self.block.index
        label = f"$L{index}" if self.in_loop else f"$enter{index}"
        if condition is None:
            out.append(f"br {label}")
            self.left = True
            return
        out += [*condition, f"br_if {label}"]
        if not self.in_loop:
            self.store()
            out.append(f"br $after{index}")
            self.left = True

    def conditional(self, pc: int, insn: Instruction) -> None:
        """JZ, JNZ, JLT: jump to imm when the condition holds; the target is checked only then."""
        out, target = self.out, insn.imm
        condition = [f"local.get {register_local(insn.rs1)}"]
        if insn.opcode == Opcode.JNZ:
            condition.append("i64.const 0")
        elif insn.opcode == Opcode.JLT:
            condition.append(f"local.get {register_local(insn.rs2)}")
        condition.append(_CONDITIONS[insn.opcode])
        if target >= len(self.code):
            out += [*condition, "if"]
            self.fault(pc, FaultCode.INVALID_ADDRESS)
            out.append("end")
        elif self.block.self_loop and target == self.block.start:
            self.self_jump(condition)
        else:
            self.store()
            self.left = True
            out += [*condition, "if"]
            self.jump(target)
            out.append("end")

    def op_jmp(self, pc: int, insn: Instruction) -> None:
        if insn.imm >= len(self.code):
            self.fault(pc, FaultCode.INVALID_ADDRESS)
        elif self.block.self_loop and insn.imm == self.block.start:
            self.self_jump(None)
        else:
            self.store()
            self.jump(insn.imm)
        self.left = True

    def op_call(self, pc: int, insn: Instruction) -> None:
        self.left = True
        if insn.imm >= len(self.code):
            self.fault(pc, FaultCode.INVALID_ADDRESS)
            return
        self.push(pc, i64_const(pc + 1))
        self.store()
        self.jump(insn.imm)

    def op_ret(self, pc: int, insn: Instruction) -> None:
        out = self.out
        self.left = True
        self.check_pop(pc)
        out += ["local.get $sp", "i32.wrap_i64", "i64.load align=1", "local.tee $a"]
        out += [i64_const(len(self.code)), "i64.ge_u"]
        self.fault_if(pc, FaultCode.INVALID_ADDRESS)
        out += ["local.get $sp", "i64.const 8", "i64.add", "local.set $sp"]
        self.dirty[SP] = None
        self.store()
        out += ["local.get $a", "i32.wrap_i64", "local.set $pc", "br $dispatch"]

    # ------------------------------------------------------ immediates, system

    def op_li(self, pc: int, insn: Instruction) -> None:
        self.out += [i64_const(insn.imm), f"local.set {register_local(insn.rd)}"]

    def op_halt(self, pc: int, insn: Instruction) -> None:
        self.left = True
        self.store()
        self.leave(pc, Exit.HALT)

    def op_fault(self, pc: int, insn: Instruction) -> None:
        self.left = True
        self.out += [i64_const(insn.imm), "local.set $detail"]
        self.fault(pc, FaultCode.USER_FAULT)

    def op_nop(self, pc: int, insn: Instruction) -> None:
        pass

    def op_tick(self, pc: int, insn: Instruction) -> None:
        self.left = True
        self.store()
        self.out += ["local.get $yield", "i64.const 0", "i64.ne", "if"]
        self.leave(pc + 1, Exit.YIELD)
        self.out.append("end")

    def op_budget(self, pc: int, insn: Instruction) -> None:
        """rd = tick_budget - ticks_used after this instruction's charge."""
        self.out += ["local.get $budget_base", "local.get $fuel", "i64.add"]
        self.out += [
            i64_const(self.refund_after[pc]),
            "i64.add",
            f"local.set {register_local(insn.rd)}",
        ]
