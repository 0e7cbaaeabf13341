"""Assembling, decoding, disassembling and linking take time linear in their input.

Each shape is timed at two sizes ten times apart: linear work grows about tenfold,
quadratic work a hundredfold.  The bound (25x) leaves room for a busy machine and
still catches anything quadratic, such as a line of many labels that was once
re-sliced per label (100,000 labels on one line blocked a server for 37 s).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from kforge.asm import assemble
from kforge.disasm import disassemble
from kforge.isa import Instruction, Opcode
from kforge.link import Import, link
from kforge.program import (
    ForgeProgram,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
)

GROWTH = 10
BOUND = 25.0


def labels_sharing_a_line(size: int) -> Callable[[], object]:
    text = " ".join(f"l{i}:" for i in range(size)) + " HALT\n"
    return lambda: assemble(text)


def one_statement_a_line(size: int) -> Callable[[], object]:
    lines = [f"a{i}: b{i}: ADD r1, r1, r2" if i % 2 == 0 else f"JMP a{i - 1}" for i in range(size)]
    text = "\n".join(lines) + "\n.data\nbuffer: .zero 64\n"
    return lambda: assemble(text)


def _program(size: int) -> ForgeProgram:
    """Relocated jumps and loads, imports, and exported names that crowd the label prefixes."""
    code, relocations = [], []
    for index in range(size):
        if index % 3 == 0:
            code.append(Instruction(Opcode.JMP, imm=(index * 7) % size))
            relocations.append(Relocation(index, RelocationKind.CODE))
        elif index % 3 == 1:
            code.append(Instruction(Opcode.LI, rd=1, imm=index % 64))
            relocations.append(Relocation(index, RelocationKind.DATA))
        else:
            code.append(Instruction(Opcode.LI, rd=2))
            relocations.append(Relocation(index, RelocationKind.SYMBOL, f"x{index % 97}".encode()))
    names = [f"L{'_' * (i % 8)}{i}" for i in range(min(size // 4, 60_000))]
    symbols = sorted(
        (Symbol(name.encode(), SymbolKind.CODE, i) for i, name in enumerate(names)),
        key=lambda symbol: symbol.name,
    )
    return ForgeProgram(tuple(code), bytes(range(64)), 0, tuple(symbols), tuple(relocations))


def decode_and_disassemble(size: int) -> Callable[[], object]:
    encoded = _program(size).encoded
    return lambda: disassemble(decode_program(encoded))


def linking(size: int) -> Callable[[], object]:
    """A thousand libraries of ``size / 1000`` instructions, each calling the next."""
    count, length = 1000, size // 1000
    libraries = []
    for n in reversed(range(count)):
        code = tuple(Instruction(Opcode.LI, rd=1, imm=n) for _ in range(length - 1))
        relocations: tuple[Relocation, ...] = ()
        if n + 1 < count:
            code += (Instruction(Opcode.CALL),)
            relocations = (Relocation(length - 1, RelocationKind.SYMBOL, f"f{n + 1}".encode()),)
        else:
            code += (Instruction(Opcode.RET),)
        symbol = Symbol(f"f{n}".encode(), SymbolKind.CODE, 0)
        libraries.append(ForgeProgram(code, b"x" * 8, 0, (symbol,), relocations))
    store = {library.program_id: library for library in libraries}
    main = ForgeProgram(
        (Instruction(Opcode.CALL), Instruction(Opcode.HALT)),
        relocations=(Relocation(0, RelocationKind.SYMBOL, b"f0"),),
    )
    imports = [Import(library.program_id, (library.symbols[0].name,)) for library in libraries]
    return lambda: link(main, imports, store.__getitem__).encoded  # as it is stored


SHAPES = [
    labels_sharing_a_line,
    one_statement_a_line,
    decode_and_disassemble,
    linking,
]


def _seconds(work: Callable[[], object]) -> float:
    """CPU seconds of the best of up to five runs, fewer when one run is long.

    CPU time, not wall time: other work on a busy machine does not count against it.
    The garbage collector is paused while timing: a full collection costs in
    proportion to everything the test process holds, not to the work measured.
    """
    best, spent = float("inf"), 0.0
    for _ in range(5):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            work()
            took = time.process_time() - start
        finally:
            gc.enable()
        best, spent = min(best, took), spent + took
        if spent > 1.0:
            break
    return best


def assert_linear(shape: Callable[[int], Callable[[], object]], small: int) -> None:
    small_time = _seconds(shape(small))
    large_time = _seconds(shape(small * GROWTH))
    ratio = large_time / small_time
    assert ratio < BOUND, (
        f"{shape.__name__}: {small} took {small_time:.3f} s, {small * GROWTH} took "
        f"{large_time:.3f} s ({ratio:.1f}x for {GROWTH}x the input)"
    )


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.__name__)
def test_time_grows_linearly_from_ten_to_a_hundred_thousand(
    shape: Callable[[int], Callable[[], object]],
) -> None:
    assert_linear(shape, 10_000)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.__name__)
def test_time_grows_linearly_from_a_hundred_thousand_to_a_million(
    shape: Callable[[int], Callable[[], object]],
) -> None:
    assert_linear(shape, 100_000)
