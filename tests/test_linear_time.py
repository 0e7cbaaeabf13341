"""Assembling, decoding, disassembling, linking, compiling and proving take time linear
in their input.

Each shape is timed at two sizes ten times apart: linear work grows about tenfold,
quadratic work a hundredfold.  The bound (25x) leaves room for a busy machine and
still catches anything quadratic, such as a line of many labels that was once
re-sliced per label (100,000 labels on one line blocked a server for 37 s).
Compiling for the fast tier is timed up to 65,000 instructions (past its
``br_table`` threshold; its limit, ``MAX_COMPILED_CODE``, is twice that, and a
compile there takes over a gigabyte); compiling Starlark up to 13,000 lines (a
line makes some 25 instructions, so 40,000 lines pass the program limits); a
proof's input is a run, measured in ticks (with a delivery every hundred).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest
import wasmtime

from kforge.asm import assemble
from kforge.disasm import disassemble
from kforge.fast import make_engine, plan_program
from kforge.fast.compiler import MAX_COMPILED_CODE, generate_wat
from kforge.isa import Instruction, Opcode
from kforge.link import Import, link
from kforge.machine import Machine, MachineState
from kforge.program import (
    ForgeProgram,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
)
from kforge.proofs import generate_proof, verify_proof
from kforge.proofs.keys import NodeKey
from kforge.proofs.replay import RunRecord
from kforge.sources import program_from_source

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


def compiling_for_the_fast_tier(size: int) -> Callable[[], object]:
    """Procedures of a loop, a load and a call each, planned, written as wasm and compiled."""
    count = (size - 2) // 7
    lines = ["CALL f0", "HALT"]
    for n in range(count):
        lines += [f"f{n}: LI r1, {n}", f"l{n}: LOADW r3, r253, {n % 64}", "ADD r1, r1, r3"]
        lines += ["SUB r3, r3, r2", f"JNZ r3, l{n}", f"CALL f{(n + 1) % count}", "RET"]
    program = assemble("\n".join(lines))
    engine = make_engine()

    def compile_it() -> object:
        return wasmtime.Module(engine, generate_wat(plan_program(program.code, program.entry)))

    return compile_it


def compiling_starlark(lines: int) -> Callable[[], object]:
    """Functions of a test, an addition and a call each, compiled from Starlark source."""
    text = []
    for n in range(lines // 5):
        call = f"f{n - 1}(y)" if n else "y"
        text += [f"def f{n}(x):", f"    y = x + {n}", "    if y > 3:", "        return y * 2"]
        text.append(f"    return {call}")
    source = "\n".join([*text, "print(f1(2))"]).encode()
    return lambda: program_from_source(source, "long.star")


#: Echoes each message of channel 3 to stdout after a busy loop (about 100 ticks each).
_ECHO = assemble(
    """
            LI   r2, 64
            LI   r6, 1
    again:  RECV 3, r1, r253, r2
            JZ   r1, done
            SEND 0, r253, r1
            LI   r5, 48
    busy:   SUB  r5, r5, r6
            JNZ  r5, busy
            JMP  again
    done:   HALT
    """
)
_KEY = NodeKey.generate()


def proving_and_verifying(ticks: int) -> Callable[[], object]:
    """A proof of a run of ``ticks`` ticks (a delivery every hundred), sampled every
    thousand ticks, and its verification."""
    machine = Machine.load(_ECHO, memory_quota=1 << 20, tick_budget=10**9, grants=[3])
    while machine.run() is MachineState.BLOCKED:
        machine.deliver(3, b"m" * 32 if machine.ticks_used < ticks else b"")
    record = RunRecord.create(
        _ECHO, grants=[3], memory_quota=1 << 20, tick_budget=10**9, deliveries=machine.deliveries
    )

    def prove_and_verify() -> object:
        proof = generate_proof(_ECHO, record, _KEY, sample_interval=1000, tier="reference")
        report = verify_proof(proof, _ECHO, record, _KEY.public_raw, tier="reference")
        assert report.ok
        return report

    return prove_and_verify


SHAPES = [
    labels_sharing_a_line,
    one_statement_a_line,
    decode_and_disassemble,
    linking,
    proving_and_verifying,
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


def test_compiling_grows_linearly_from_five_hundred_to_five_thousand_instructions() -> None:
    assert_linear(compiling_for_the_fast_tier, 500)


@pytest.mark.slow
def test_compiling_grows_linearly_from_six_and_a_half_to_sixty_five_thousand() -> None:
    assert MAX_COMPILED_CODE > 65_000
    assert_linear(compiling_for_the_fast_tier, 6_500)


@pytest.mark.slow  # a compile's fixed cost (the runtime's code) hides the growth below this
def test_compiling_starlark_grows_linearly_from_thirteen_hundred_to_thirteen_thousand() -> None:
    assert_linear(compiling_starlark, 1_300)
