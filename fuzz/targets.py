"""The fuzz targets: each takes raw bytes and raises only when it finds a bug.

A target either refuses its input with the typed error the component documents,
or accepts it and then checks a property that must hold for every accepted input
(a canonical round trip, full validation of a result, two tiers agreeing).  Any
other exception, a hang or a crash is a finding.

To add a target: write ``def name(data: bytes) -> None`` and list it in
``TARGETS`` with its input size; put a few small inputs that reach deep into it
under ``fuzz/corpus/<name>/``.  ``fuzz/run.py`` runs it coverage-guided,
``tests/test_fuzz_corpus.py`` replays its corpus in every test run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kforge.asm import AssemblyError, assemble
from kforge.core import Hash256, InvalidProgram, UnresolvedSymbol, VaultFetchFailed
from kforge.disasm import disassemble
from kforge.isa import OPCODES, Instruction, Opcode, decode_instruction
from kforge.limits import InputTooLarge
from kforge.link import Import, derive_imports, link
from kforge.machine import Machine
from kforge.program import (
    ForgeProgram,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
)

_T = TypeVar("_T")
FUZZ_DIR = Path(__file__).resolve().parent


class Draw:
    """Structured choices read from fuzz bytes; past the end every choice is the first."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def below(self, bound: int) -> int:
        """A number in ``0..bound-1`` (``bound`` at most 256)."""
        return self.byte() % bound if bound > 1 else 0

    def choice(self, options: Sequence[_T]) -> _T:
        return options[self.below(len(options))]

    def raw(self, size: int) -> bytes:
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return chunk + bytes(size - len(chunk))


# ------------------------------------------------------------------ container and assembler


def container(data: bytes) -> None:
    """FRGP bytes: refused with ``InvalidProgram``, or canonical and disassembled back exactly."""
    try:
        program = decode_program(data)
    except InvalidProgram:
        return
    assert program.encoded == data, "decode accepted bytes that are not canonical"
    assert assemble(disassemble(program)).encoded == data, "disassembly does not round-trip"


def assembler(data: bytes) -> None:
    """Assembly text: refused with ``AssemblyError``, or a program whose disassembly round-trips."""
    text = data.decode("utf-8", "replace")
    try:
        program = assemble(text)
    except (AssemblyError, InputTooLarge):
        return
    again = assemble(disassemble(program))
    assert again.encoded == program.encoded, "disassembly does not round-trip"


# ------------------------------------------------------------------ linker

_NAMES = (b"a", b"b", b"c", b"main")
_LINK_OPCODES = (Opcode.LI, Opcode.JMP, Opcode.CALL, Opcode.LOADW, Opcode.ADD, Opcode.HALT)


def _instruction(draw: Draw) -> Instruction:
    info = OPCODES[draw.choice(_LINK_OPCODES)]
    fields = {name: draw.below(4) for name in ("rd", "rs1", "rs2") if name in info.fields}
    imm = draw.choice((0, 1, 2, 8, 1 << 63, (1 << 64) - 1)) if "imm" in info.fields else 0
    return Instruction(info.opcode, imm=imm, **fields)


def _small_program(draw: Draw) -> ForgeProgram:
    code = tuple(_instruction(draw) for _ in range(1 + draw.below(6)))
    symbols = {
        name: Symbol(name, draw.choice(tuple(SymbolKind)), draw.below(10))
        for name in (draw.choice(_NAMES) for _ in range(draw.below(4)))
    }
    relocations = []
    for index in range(len(code)):
        if draw.below(3) == 0:
            kind = draw.choice(tuple(RelocationKind))
            name = draw.choice(_NAMES) if kind is RelocationKind.SYMBOL else b""
            relocations.append(Relocation(index, kind, name))
    data = draw.raw(draw.below(13))
    ordered = tuple(symbols[name] for name in sorted(symbols))
    return ForgeProgram(code, data, 0, ordered, tuple(relocations))


def linker(data: bytes) -> None:
    """Small programs and an import list: a typed refusal, or a valid, reproducible link."""
    draw = Draw(data)
    main = _small_program(draw)
    libraries = [_small_program(draw) for _ in range(draw.below(4))]
    store = {library.program_id: library for library in libraries}
    missing = Hash256.of(b"not stored")
    ids = [library.program_id for library in libraries] + [missing]
    imports = [
        Import(draw.choice(ids), tuple(draw.choice(_NAMES) for _ in range(draw.below(3))))
        for _ in range(draw.below(5))
    ]
    for attempt in (imports, derive_imports(main, libraries)):
        try:
            linked = link(main, attempt, store.__getitem__)
        except (UnresolvedSymbol, InvalidProgram, VaultFetchFailed):
            continue
        fields = (linked.code, linked.data, linked.entry)
        rebuilt = ForgeProgram(*fields, linked.symbols, linked.relocations, linked.metadata)
        assert rebuilt.encoded == linked.encoded
        assert decode_program(linked.encoded) == rebuilt, "a linked program does not decode"
        again = link(main, attempt, store.__getitem__)
        assert again.encoded == linked.encoded, "linking is not deterministic"


# ------------------------------------------------------------------ both tiers

_fast_tier: object | None = None


def _fast() -> object:
    global _fast_tier
    if _fast_tier is None:
        from kforge.fast import FastTier

        _fast_tier = FastTier(disk_cache=False, max_programs=64, max_region_blocks=4)
    return _fast_tier


def tiers(data: bytes) -> None:
    """A raw instruction stream runs to the same state on the reference and the fast tier."""
    draw = Draw(data)
    budget = draw.byte() << 4 | draw.byte() >> 4
    memory = draw.choice((64, 100, 4096))
    data_section = draw.raw(draw.below(17))
    words = [draw.raw(16) for _ in range(1 + (len(data) - draw.at) // 16)]
    code = tuple(decode_instruction(word)[0].with_unused_fields_cleared() for word in words[:64])
    program = ForgeProgram(code, data_section)
    machines = [
        Machine.load(program, tick_budget=budget, memory_quota=memory, grants=[3, 7])
        for _ in range(2)
    ]
    reference, fast = machines
    reference.run()
    _fast().run(fast, tier="fast")  # type: ignore[attr-defined]
    assert reference.snapshot() == fast.snapshot(), "the tiers disagree"
    assert reference.held_bytes == fast.held_bytes, "the tiers hold different message bytes"
    assert reference.deliveries == fast.deliveries


# ------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Target:
    """A fuzz target: its function, the longest input worth trying and an optional dictionary."""

    name: str
    run: Callable[[bytes], None]
    max_len: int
    dictionary: str | None = None

    @property
    def corpus(self) -> Path:
        """The small seed corpus kept in the repository."""
        return FUZZ_DIR / "corpus" / self.name


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target("container", container, 4096),
        Target("assembler", assembler, 4096, "assembly.dict"),
        Target("linker", linker, 256),
        Target("tiers", tiers, 1024),
    )
}
