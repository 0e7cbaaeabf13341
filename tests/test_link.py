"""The linker: merging, relocation, symbol resolution, errors, determinism, the CLI command."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kforge.asm import assemble
from kforge.cli.link import COMMANDS, add_commands
from kforge.core import (
    ForgeError,
    Hash256,
    InvalidProgram,
    UnresolvedSymbol,
    VaultFetchFailed,
)
from kforge.isa import WORD_MASK, Instruction, Opcode
from kforge.link import Import, derive_imports, link, link_cost
from kforge.machine import Machine, MachineState
from kforge.program import (
    ForgeProgram,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
)

CODE, DATA, SYMBOL = RelocationKind.CODE, RelocationKind.DATA, RelocationKind.SYMBOL
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "lib"


def example(name: str) -> ForgeProgram:
    path = EXAMPLES / name
    return assemble(path.read_text(), str(path))


def store(*programs: ForgeProgram) -> Callable[[Hash256], ForgeProgram]:
    objects = {program.program_id: program for program in programs}

    def fetch(object_id: Hash256) -> ForgeProgram:
        if object_id not in objects:
            raise VaultFetchFailed(object_id, "no such object")
        return objects[object_id]

    return fetch


def run(program: ForgeProgram) -> bytes:
    machine = Machine.load(program)
    machine.run()
    assert machine.state is MachineState.HALTED, (machine.fault, machine.pc)
    return bytes(machine.stdout)


MATHLIB = example("mathlib.fasm")
FETCH = store(MATHLIB)


# ---------------------------------------------------------------- the examples


def test_square_example_links_and_runs() -> None:
    user = example("use_square.fasm")
    with pytest.raises(InvalidProgram, match="unresolved imports"):
        Machine.load(user)
    linked = link(user, derive_imports(user, [MATHLIB]), FETCH)
    assert linked.imports == ()
    assert run(linked) == b"12^2 = 144\n7^2 = 49\n5^3 = 125\n"


def test_gcd_example_links_and_runs() -> None:
    user = example("use_gcd.fasm")
    imports = [Import(MATHLIB.program_id, (b"gcd", b"print_u64", b"print_str", b"squares"))]
    linked = link(user, imports, FETCH)
    assert run(linked) == b"gcd(1071, 462) = 21\ngcd(48, 180) = 12\nsquares[15] = 225\n"


def test_one_library_serves_two_programs() -> None:
    square = link(
        example("use_square.fasm"), derive_imports(example("use_square.fasm"), [MATHLIB]), FETCH
    )
    gcd = link(example("use_gcd.fasm"), derive_imports(example("use_gcd.fasm"), [MATHLIB]), FETCH)
    assert square.code[-len(MATHLIB.code) :] != MATHLIB.code  # relocated
    assert len(square.code) - len(example("use_square.fasm").code) == len(MATHLIB.code)
    assert len(gcd.code) - len(example("use_gcd.fasm").code) == len(MATHLIB.code)


# ---------------------------------------------------------------- relocation

LIB = assemble(
    """
    .export twice, table, loop_to
            HALT
    twice:  ADD r1, r1, r1
            RET
    loop_to: JZ r1, out          ; a jump inside the library
            LI r2, table         ; a data address inside the library
            LOADW r3, r2, 8
            JMP loop_to
    out:    RET
    .data
    .align 8
    table:  .u64 11, 22
    """
)

USER = assemble(
    """
    .import twice, table
    .data
    odd: .ascii "abc"            ; 3 bytes: the library's data goes to 8
    .code
            LI r1, 21
            CALL twice
            LI r5, table         ; an imported data symbol
            LOADW r6, r5, 8
            LI r7, odd
            JMP end
    end:    HALT
    """
)


def test_code_and_data_relocations_are_shifted_by_the_piece_offsets() -> None:
    linked = link(USER, [Import(LIB.program_id, (b"table", b"twice"))], store(LIB))
    base = len(USER.code)
    assert base == 7
    assert linked.data == b"abc" + bytes(5) + (11).to_bytes(8, "little") + (22).to_bytes(
        8, "little"
    )
    # the library's own relocations
    assert linked.code[base + 3] == Instruction(Opcode.JZ, rs1=1, imm=base + 7)
    assert linked.code[base + 4] == Instruction(Opcode.LI, rd=2, imm=8)
    assert linked.code[base + 6] == Instruction(Opcode.JMP, imm=base + 3)
    # the user's resolved imports and own relocations
    assert linked.code[1] == Instruction(Opcode.CALL, imm=base + 1)
    assert linked.code[2] == Instruction(Opcode.LI, rd=5, imm=8)
    assert linked.code[4] == Instruction(Opcode.LI, rd=7, imm=0)
    assert linked.code[5] == Instruction(Opcode.JMP, imm=6)
    assert linked.relocations == (
        Relocation(1, CODE),
        Relocation(2, DATA),
        Relocation(4, DATA),
        Relocation(5, CODE),
        Relocation(base + 3, CODE),
        Relocation(base + 4, DATA),
        Relocation(base + 6, CODE),
    )
    assert linked.symbols == (
        Symbol(b"table", SymbolKind.DATA, 8),
        Symbol(b"twice", SymbolKind.CODE, base + 1),
    )
    assert linked.entry == USER.entry and linked.metadata == USER.metadata
    machine = Machine.load(linked)
    machine.run()
    assert machine.registers[1] == 42 and machine.registers[6] == 22


def test_data_alignment_and_data_less_dependencies() -> None:
    no_data = assemble(".export f\nf: RET")
    user = assemble(".import f, table\n.data\n.byte 1\n.code\nCALL f\nLI r1, table\nHALT")
    imports = [Import(no_data.program_id, (b"f",)), Import(LIB.program_id, (b"table",))]
    linked = link(user, imports, store(no_data, LIB))
    assert linked.data[:8] == b"\x01" + bytes(7)  # no padding for the data-less piece
    assert linked.symbol(b"table") == Symbol(b"table", SymbolKind.DATA, 8)
    assert linked.symbol(b"f") == Symbol(b"f", SymbolKind.CODE, 3)


def test_linking_without_imports_is_the_identity() -> None:
    assert link(LIB, [], store()) == LIB
    assert link(LIB, [], store()).program_id == LIB.program_id


def test_a_linked_program_links_again() -> None:
    linked = link(USER, [Import(LIB.program_id, (b"table", b"twice"))], store(LIB))
    assert link(linked, [], store()) == linked
    # as a library: its exports (here the imported symbols) shift once more
    outer = assemble(".import twice\nLI r1, 5\nCALL twice\nHALT")
    again = link(outer, [Import(linked.program_id, (b"twice",))], store(linked))
    machine = Machine.load(again)
    machine.run()
    assert machine.state is MachineState.HALTED and machine.registers[1] == 10
    offset = len(outer.code)
    for reloc in linked.relocations:
        shifted = again.code[offset + reloc.index].imm
        original = linked.code[reloc.index].imm
        assert shifted == original + (offset if reloc.kind is CODE else 0)


def test_library_built_on_a_library() -> None:
    wrapper = assemble(
        """
        .import square, print_u64
        .export print_square
                HALT
        print_square: CALL square
                CALL print_u64
                RET
        """
    )
    staged = link(wrapper, derive_imports(wrapper, [MATHLIB]), FETCH)
    user = assemble(".import print_square\nLI r10, 9\nCALL print_square\nHALT")
    linked = link(user, [Import(staged.program_id, (b"print_square",))], store(staged))
    assert run(linked) == b"81\n"
    # or flat: the dependency's own import is requested in the same list
    flat = [
        Import(wrapper.program_id, (b"print_square",)),
        Import(MATHLIB.program_id, (b"square", b"print_u64")),
    ]
    assert run(link(user, flat, store(wrapper, MATHLIB))) == b"81\n"


def test_repeated_imports_of_one_dependency_merge_it_once() -> None:
    imports = [Import(LIB.program_id, (b"twice",)), Import(LIB.program_id, (b"table", b"twice"))]
    linked = link(USER, imports, store(LIB))
    assert len(linked.code) == len(USER.code) + len(LIB.code)
    assert link_cost(imports) == 4


# ---------------------------------------------------------------- errors


def test_unresolved_symbol() -> None:
    with pytest.raises(UnresolvedSymbol) as caught:
        link(USER, [Import(LIB.program_id, (b"twice",))], store(LIB))
    assert caught.value.symbol == b"table"
    with pytest.raises(UnresolvedSymbol):
        link(USER, [], store())


def test_dependency_import_not_listed_is_unresolved() -> None:
    wrapper = assemble(".import square\n.export sq\nsq: CALL square\nRET")
    user = assemble(".import sq\nCALL sq\nHALT")
    with pytest.raises(UnresolvedSymbol) as caught:
        link(user, [Import(wrapper.program_id, (b"sq",))], store(wrapper, MATHLIB))
    assert caught.value.symbol == b"square"


def test_symbol_not_exported_by_its_import() -> None:
    with pytest.raises(UnresolvedSymbol) as caught:
        link(USER, [Import(LIB.program_id, (b"twice", b"table", b"out"))], store(LIB))
    assert caught.value.symbol == b"out"


def test_two_imports_providing_one_name_are_ambiguous() -> None:
    other = assemble(".export twice\ntwice: RET")
    imports = [Import(LIB.program_id, (b"twice", b"table")), Import(other.program_id, (b"twice",))]
    with pytest.raises(InvalidProgram, match="ambiguous symbol 'twice'"):
        link(USER, imports, store(LIB, other))


def test_a_name_both_defined_and_imported_is_ambiguous() -> None:
    user = assemble(".export twice\ntwice: HALT")
    with pytest.raises(InvalidProgram, match="ambiguous symbol 'twice'"):
        link(user, [Import(LIB.program_id, (b"twice",))], store(LIB))


def test_missing_object() -> None:
    missing = Hash256.of(b"nothing")
    with pytest.raises(VaultFetchFailed) as caught:
        link(USER, [Import(missing, (b"twice",))], store(LIB))
    assert caught.value.object_id == missing


def test_fetch_failures_of_any_kind_are_vault_fetch_failures() -> None:
    def broken(object_id: Hash256) -> ForgeProgram:
        raise KeyError(object_id)

    with pytest.raises(VaultFetchFailed, match="KeyError"):
        link(USER, [Import(LIB.program_id, (b"twice",))], broken)
    with pytest.raises(VaultFetchFailed, match="whose id is"):
        link(USER, [Import(LIB.program_id, (b"twice",))], lambda _: MATHLIB)


def test_cycles_are_refused_and_named() -> None:
    a = assemble(".import b\n.export a\na: CALL b\nRET")
    b = assemble(".import a\n.export b\nb: CALL a\nRET")
    user = assemble(".import a\nCALL a\nHALT")
    imports = [Import(a.program_id, (b"a",)), Import(b.program_id, (b"b",))]
    with pytest.raises(InvalidProgram, match="dependency cycle") as caught:
        link(user, imports, store(a, b))
    message = str(caught.value)
    assert a.program_id.hex[:16] in message and b.program_id.hex[:16] in message
    assert "-['b']->" in message and "-['a']->" in message


def test_importing_from_itself_is_a_cycle() -> None:
    # a raw container that exports and imports the same name
    program = ForgeProgram(
        (Instruction(Opcode.CALL, imm=0), Instruction(Opcode.HALT)),
        symbols=(Symbol(b"f", SymbolKind.CODE, 1),),
        relocations=(Relocation(0, SYMBOL, b"f"),),
    )
    with pytest.raises(InvalidProgram, match="dependency cycle: the program"):
        link(program, [Import(program.program_id, (b"f",))], store())


def test_too_large() -> None:
    imports = [Import(LIB.program_id, (b"table", b"twice"))]
    with pytest.raises(InvalidProgram, match="more than the limit 10"):
        link(USER, imports, store(LIB), max_code=10)
    with pytest.raises(InvalidProgram, match="data would hold 24 bytes, more than the limit 16"):
        link(USER, imports, store(LIB), max_data=16)
    with pytest.raises(InvalidProgram, match="more than the limit 2"):
        link(USER, [], store(), max_code=2)


def test_relocated_values_past_64_bits_are_refused() -> None:
    lib = ForgeProgram(
        (Instruction(Opcode.JMP, imm=(1 << 64) - 1),), relocations=(Relocation(0, CODE),)
    )
    with pytest.raises(InvalidProgram, match="does not fit 64 bits"):
        link(USER, [Import(lib.program_id)], store(lib))


def test_a_relocation_into_an_opcode_without_an_immediate_is_refused() -> None:
    lib = ForgeProgram(
        (Instruction(Opcode.HALT), Instruction(Opcode.ADD, 1, 2, 3)),
        relocations=(Relocation(1, CODE),),
    )
    assert link(lib, [], store()) == lib  # offset 0: nothing changes
    with pytest.raises(InvalidProgram, match="ADD has no immediate to relocate"):
        link(USER, [Import(lib.program_id)], store(lib))


# ---------------------------------------------------------------- determinism


def test_the_resolved_id_is_deterministic() -> None:
    imports = [Import(LIB.program_id, (b"twice", b"table"))]
    first = link(USER, imports, store(LIB))
    fresh_lib = decode_program(LIB.encoded)
    second = link(
        decode_program(USER.encoded),
        [Import(LIB.program_id, (b"table", b"twice"))],
        store(fresh_lib),
    )
    assert first.encoded == second.encoded
    assert first.program_id == second.program_id
    assert decode_program(first.encoded) == first


def test_link_cost_is_two_ticks_per_import() -> None:
    assert link_cost([]) == 0
    assert link_cost([Import(LIB.program_id, (b"a",))] * 16) == 32


# ---------------------------------------------------------------- the CLI command


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.handler is COMMANDS[args.command]
    result: int = args.handler(args)
    return result


def test_cli_links_assembly_and_frgp_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    library = tmp_path / "mathlib.frgp"
    library.write_bytes(MATHLIB.encoded)
    out = tmp_path / "out.frgp"
    assert _cli(["link", str(EXAMPLES / "use_gcd.fasm"), str(library), "-o", str(out)]) == 0
    linked = decode_program(out.read_bytes())
    assert str(linked.program_id) in capsys.readouterr().out
    assert run(linked).startswith(b"gcd(1071, 462) = 21\n")


def test_cli_errors(tmp_path: Path) -> None:
    from kforge.cli import CliError

    out = str(tmp_path / "out.frgp")
    user = tmp_path / "user.fasm"
    user.write_text(".import nowhere\nCALL nowhere\nHALT\n")
    with pytest.raises(UnresolvedSymbol):
        _cli(["link", str(user), str(EXAMPLES / "mathlib.fasm"), "-o", out])
    with pytest.raises(CliError, match="cannot read"):
        _cli(["link", str(user), str(tmp_path / "missing.fasm"), "-o", out])
    twin = tmp_path / "twin.fasm"
    twin.write_text(".export square\nsquare: RET\n")
    with pytest.raises(InvalidProgram, match="ambiguous"):
        _cli(
            [
                "link",
                str(EXAMPLES / "use_square.fasm"),
                str(EXAMPLES / "mathlib.fasm"),
                str(twin),
                "-o",
                out,
            ]
        )


# ---------------------------------------------------------------- properties

NAMES = [b"f", b"g", b"h", b"k", b"table"]


@st.composite
def pieces(draw: st.DrawFn, exports: bool) -> ForgeProgram:
    """A random valid container, sometimes with relocations on instructions without an imm."""
    length = draw(st.integers(1, 12))
    data = draw(st.binary(max_size=20))
    code: list[Instruction] = []
    relocations: list[Relocation] = []
    for index in range(length):
        choice = draw(st.sampled_from(["jmp", "li", "call", "call", "add", "halt"]))
        imm_kind = draw(st.sampled_from([None, CODE, DATA, SYMBOL]))
        if choice in ("add", "halt") and draw(st.integers(0, 9)):
            imm_kind = None  # a relocation there is refused; keep it rare
        if choice == "add":
            code.append(Instruction(Opcode.ADD, 1, 2, 3))
        elif choice == "halt":
            code.append(Instruction(Opcode.HALT))
        else:
            opcode = {"jmp": Opcode.JMP, "li": Opcode.LI, "call": Opcode.CALL}[choice]
            imm = 0 if imm_kind is SYMBOL else draw(st.integers(0, 40) | st.just(WORD_MASK))
            code.append(Instruction(opcode, 1 if opcode is Opcode.LI else 0, imm=imm))
        if imm_kind is not None:
            name = draw(st.sampled_from(NAMES)) if imm_kind is SYMBOL else b""
            relocations.append(Relocation(index, imm_kind, name))
    symbols: list[Symbol] = []
    if exports:
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3)):
            kind = draw(st.sampled_from(SymbolKind))
            symbols.append(Symbol(name, kind, draw(st.integers(0, 30))))
    symbols.sort(key=lambda symbol: symbol.name)
    return ForgeProgram(tuple(code), data, 0, tuple(symbols), tuple(relocations))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    user=pieces(exports=False),
    libraries=st.lists(pieces(exports=True), min_size=1, max_size=3),
    requests=st.lists(
        st.tuples(st.integers(0, 9), st.lists(st.sampled_from(NAMES), max_size=3)), max_size=4
    ),
    limit=st.sampled_from([1 << 32] * 3 + [5, 20]),
)
def test_random_links_fail_only_with_forge_errors(
    user: ForgeProgram,
    libraries: list[ForgeProgram],
    requests: list[tuple[int, list[bytes]]],
    limit: int,
) -> None:
    ids = [library.program_id for library in libraries] + [Hash256.of(b"missing")]
    imports = [
        Import(ids[min(i, len(ids) - 1) if i == 9 else i % len(libraries)], tuple(names))
        for i, names in requests
    ]
    imports += derive_imports(user, libraries)
    try:
        linked = link(user, imports, store(*libraries), max_code=limit)
    except ForgeError as error:
        event(f"refused: {type(error).__name__}")
        return
    event("linked")
    assert linked.imports == ()
    assert decode_program(linked.encoded) == linked
    assert dataclasses.replace(linked) == linked  # passes full validation
    assert linked.entry == user.entry and linked.metadata == user.metadata
    distinct = {library.program_id: library for library in libraries}
    distinct.pop(user.program_id, None)  # importing from the program itself merges nothing
    assert len(linked.code) == len(user.code) + sum(len(lib.code) for lib in distinct.values())
    assert link(user, imports, store(*libraries), max_code=limit).program_id == linked.program_id
