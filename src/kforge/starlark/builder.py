"""A small helper that appends IR to a function: the one way code is written into IR."""

from __future__ import annotations

from kforge.starlark.ir import Block, CodeRef, Cond, Function, Insn, Loc, Ref, Term


class Builder:
    """Appends instructions to the current block of ``function``."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self.block: Block = function.blocks[0] if function.blocks else function.new_block()
        self.loc: Loc | None = None

    # -- blocks ---------------------------------------------------------------------

    def new_block(self) -> Block:
        return self.function.new_block()

    def set_block(self, block: Block) -> None:
        self.block = block

    @property
    def terminated(self) -> bool:
        return self.block.term is not None

    def _emit(self, insn: Insn) -> None:
        if self.block.term is not None:  # unreachable code: give it a block of its own
            self.block = self.function.new_block()
        insn.loc = insn.loc or self.loc
        self.block.insns.append(insn)

    def _end(self, term: Term) -> None:
        if self.block.term is not None:
            self.block = self.function.new_block()
        term.loc = term.loc or self.loc
        self.block.term = term

    def reg(self) -> int:
        return self.function.new_register()

    # -- instructions ---------------------------------------------------------------

    def op(self, name: str, a: int, b: int = -1, dst: int = -1) -> int:
        """``dst = a name b`` (or ``dst = name a`` for NEG/NOT); returns ``dst``."""
        if dst < 0:
            dst = self.reg()
        self._emit(Insn(name, dst=dst, a=a, b=b))
        return dst

    def li(self, value: int, dst: int = -1) -> int:
        if dst < 0:
            dst = self.reg()
        self._emit(Insn("LI", dst=dst, imm=value & 0xFFFF_FFFF_FFFF_FFFF))
        return dst

    def li_ref(self, ref: Ref, dst: int = -1) -> int:
        if dst < 0:
            dst = self.reg()
        self._emit(Insn("LI", dst=dst, ref=ref))
        return dst

    def mov(self, src: int, dst: int = -1) -> int:
        if dst < 0:
            dst = self.reg()
        self._emit(Insn("MOV", dst=dst, a=src))
        return dst

    def load(
        self, base: int, offset: int = 0, dst: int = -1, byte: bool = False, ref: Ref | None = None
    ) -> int:
        """``dst = mem[base + offset]`` (plus the address of ``ref``, a data item)."""
        if dst < 0:
            dst = self.reg()
        self._emit(
            Insn(
                "LOAD" if byte else "LOADW",
                dst=dst,
                a=base,
                imm=offset & 0xFFFF_FFFF_FFFF_FFFF,
                ref=ref,
            )
        )
        return dst

    def store(
        self, value: int, base: int, offset: int = 0, byte: bool = False, ref: Ref | None = None
    ) -> None:
        self._emit(
            Insn(
                "STORE" if byte else "STOREW",
                a=value,
                b=base,
                imm=offset & 0xFFFF_FFFF_FFFF_FFFF,
                ref=ref,
            )
        )

    def params(self, count: int) -> list[int]:
        registers = [self.reg() for _ in range(count)]
        self._emit(Insn("PARAMS", args=tuple(registers)))
        return registers

    def call(self, name: str, args: list[int] | tuple[int, ...], result: bool = True) -> int:
        dst = self.reg() if result else -1
        self._emit(Insn("CALL", dst=dst, ref=CodeRef(name), args=tuple(args)))
        return dst

    def call_indirect(self, address: int, args: list[int] | tuple[int, ...]) -> int:
        dst = self.reg()
        self._emit(Insn("CALLI", dst=dst, a=address, args=tuple(args)))
        return dst

    def raw(self, insn: Insn) -> None:
        self._emit(insn)

    # -- terminators ----------------------------------------------------------------

    def jmp(self, target: Block) -> None:
        self._end(Term("JMP", (target.index,)))

    def br(self, cond: Cond, a: int, b: int, if_true: Block, if_false: Block) -> None:
        self._end(Term("BR", (if_true.index, if_false.index), cond=cond, a=a, b=b))

    def ret(self, value: int = -1) -> None:
        self._end(Term("RET", a=value))

    def jump_indirect(self, address: int, args: tuple[int, ...] = ()) -> None:
        self._end(Term("JUMPI", a=address, args=args))

    def tail_call(self, name: str, args: list[int] | tuple[int, ...]) -> None:
        self._end(Term("TAILCALL", ref=CodeRef(name), args=tuple(args)))

    def halt(self) -> None:
        self._end(Term("HALT"))

    def fault(self, code: int) -> None:
        self._end(Term("FAULT", imm=code))
