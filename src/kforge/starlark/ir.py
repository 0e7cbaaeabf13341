"""The intermediate form both the Starlark front end and the runtime dialect lower to.

A :class:`Function` is a list of :class:`Block` s; a block is straight-line
:class:`Insn` s ending in one terminator.  Operands are *registers*: numbers
below 256 are the machine's registers (used only for the reserved ones, see
:mod:`kforge.starlark.regs`), numbers from 256 up are virtual registers that
:mod:`kforge.starlark.regalloc` maps onto machine registers.

Instruction kinds (``Insn.op``):

* machine operations with the machine's meaning: ``ADD SUB MUL DIV MOD AND OR XOR
  SHL SHR`` (``dst = a op b``), ``NEG NOT`` (``dst = op a``), ``LI`` (``dst = imm``
  or the address ``ref`` names), ``LOADW LOAD`` (``dst = mem[a + imm]``), ``STOREW
  STORE`` (``mem[b + imm] = a``), ``SEND`` (channel ``imm``, address ``a``, length
  ``b``), ``RECV`` (``dst`` = length, channel ``imm``, address ``a``, room ``b``),
  ``POLL`` (``dst``, channel ``imm``), ``BUDGET`` (``dst``), ``TICK``, ``PUSH a``, ``POP dst``;
* ``MOV`` (``dst = a``), ``PARAMS`` (defines ``args`` from the argument registers,
  first in the entry block), ``CALL`` (direct call of function ``ref`` with
  ``args``, result in ``dst`` or dropped), ``CALLI`` (call of the code address in
  ``a`` with ``args``).

Terminators (``Block.term``): ``JMP``, ``BR`` (condition ``cond`` on ``a`` and ``b``,
``targets`` true then false), ``RET`` (value ``a``, or none), ``JUMPI`` (jump to the
code address in ``a``, keeping the stack: a tail call), ``HALT``, ``FAULT`` (code ``imm``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

FIRST_VIRTUAL: Final = 256

#: Branch conditions: unsigned ``LT GE LE GT``, signed ``SLT SGE SLE SGT``, ``EQ NE``
#: on two registers, ``Z NZ`` on ``a`` alone.
Cond = Literal["Z", "NZ", "EQ", "NE", "LT", "GE", "LE", "GT", "SLT", "SGE", "SLE", "SGT"]

NEGATED: Final[dict[str, Cond]] = {
    "Z": "NZ",
    "NZ": "Z",
    "EQ": "NE",
    "NE": "EQ",
    "LT": "GE",
    "GE": "LT",
    "LE": "GT",
    "GT": "LE",
    "SLT": "SGE",
    "SGE": "SLT",
    "SLE": "SGT",
    "SGT": "SLE",
}

BINARY_OPS: Final = frozenset({"ADD", "SUB", "MUL", "DIV", "MOD", "AND", "OR", "XOR", "SHL", "SHR"})
UNARY_OPS: Final = frozenset({"NEG", "NOT"})


@dataclass(frozen=True, slots=True)
class DataRef:
    """The address of a named static data item."""

    name: str


@dataclass(frozen=True, slots=True)
class CodeRef:
    """The code index of a function's entry (``name``) or of one of its labels."""

    name: str
    label: str = ""


@dataclass(frozen=True, slots=True)
class BlockRef:
    """The code index of a block of the function being compiled."""

    block: int


Ref = DataRef | CodeRef | BlockRef


@dataclass(frozen=True, slots=True)
class Loc:
    """A source position: 1-based line and column."""

    line: int
    col: int


class Insn:
    """One instruction; unused fields stay at their defaults."""

    __slots__ = ("a", "args", "b", "dst", "imm", "loc", "op", "ref")

    def __init__(
        self,
        op: str,
        dst: int = -1,
        a: int = -1,
        b: int = -1,
        imm: int = 0,
        ref: Ref | None = None,
        args: tuple[int, ...] = (),
        loc: Loc | None = None,
    ) -> None:
        self.op = op
        self.dst = dst
        self.a = a
        self.b = b
        self.imm = imm
        self.ref = ref
        self.args = args
        self.loc = loc

    def uses(self) -> tuple[int, ...]:
        """The registers this instruction reads."""
        op = self.op
        if op in ("CALL", "CALLI"):
            return (*self.args, self.a) if op == "CALLI" else self.args
        if op in ("STOREW", "STORE", "SEND"):
            return (self.a, self.b)
        if op == "RECV":
            return (self.a, self.b)
        if self.b >= 0:
            return (self.a, self.b)
        if self.a >= 0:
            return (self.a,)
        return ()

    def defs(self) -> tuple[int, ...]:
        """The registers this instruction writes."""
        if self.op == "PARAMS":
            return self.args
        return (self.dst,) if self.dst >= 0 else ()

    def __repr__(self) -> str:
        parts = [self.op]
        if self.dst >= 0:
            parts.append(f"d={self.dst}")
        if self.a >= 0:
            parts.append(f"a={self.a}")
        if self.b >= 0:
            parts.append(f"b={self.b}")
        if self.imm:
            parts.append(f"imm={self.imm}")
        if self.ref is not None:
            parts.append(repr(self.ref))
        if self.args:
            parts.append(f"args={list(self.args)}")
        return "<" + " ".join(parts) + ">"


class Term:
    """A block's terminator.  ``TAILCALL`` jumps to function ``ref`` with ``args`` in the
    argument registers; ``JUMPI`` may also pass ``args``."""

    __slots__ = ("a", "args", "b", "cond", "imm", "loc", "op", "ref", "targets")

    def __init__(
        self,
        op: str,
        targets: tuple[int, ...] = (),
        cond: Cond = "Z",
        a: int = -1,
        b: int = -1,
        imm: int = 0,
        loc: Loc | None = None,
        ref: Ref | None = None,
        args: tuple[int, ...] = (),
    ) -> None:
        self.op = op
        self.targets = targets
        self.cond = cond
        self.a = a
        self.b = b
        self.imm = imm
        self.loc = loc
        self.ref = ref
        self.args = args

    def uses(self) -> tuple[int, ...]:
        if self.op == "BR":
            return (self.a, self.b) if self.b >= 0 else (self.a,)
        if self.op in ("RET", "JUMPI") and self.a >= 0:
            return (self.a, *self.args)
        if self.op == "TAILCALL":
            return self.args
        return ()

    def __repr__(self) -> str:
        return f"<{self.op} {self.cond if self.op == 'BR' else ''} a={self.a} b={self.b} {self.targets}>"


@dataclass(slots=True)
class Block:
    index: int
    insns: list[Insn] = field(default_factory=list)
    term: Term | None = None


@dataclass
class Function:
    """One function of the program: runtime code or compiled Starlark.

    ``checked`` functions may take part in recursion (or be called through a
    value): their entry reserves their stack depth against the heap limit, see
    :mod:`kforge.starlark.emit`.  ``source`` names the Starlark file and function
    for tracebacks (``None`` for runtime functions, which tracebacks skip).
    """

    name: str
    nparams: int
    blocks: list[Block] = field(default_factory=list)
    next_register: int = FIRST_VIRTUAL
    checked: bool = False
    source: tuple[str, str] | None = None  # (file, function name as Starlark shows it)
    exported_labels: dict[str, int] = field(default_factory=dict)  # label -> block
    noreturn: bool = False
    #: For a runtime function that implements a builtin: its name, which tracebacks show
    #: as ``<builtin>: in NAME`` when the builtin called back into Starlark code.
    builtin: str = ""

    def new_register(self) -> int:
        register = self.next_register
        self.next_register += 1
        return register

    def new_block(self) -> Block:
        block = Block(len(self.blocks))
        self.blocks.append(block)
        return block
