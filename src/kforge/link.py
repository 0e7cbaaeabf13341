"""Static linking of Forge programs (seed §3.9 and §9.4; see ``docs/linking.md``).

``link(program, imports, fetch)`` merges the program with every dependency its
import list names and resolves every symbol relocation.  The layout:

- code: the program's code, then each dependency's code, in the order each
  distinct dependency id first appears in the import list;
- data: the program's data, then each dependency's data at the next multiple
  of 8 (``DATA_ALIGNMENT``), zero-padded, so a dependency's 8-aligned words stay
  8-aligned; a dependency without data adds no padding;
- every CODE relocation's ``imm`` is shifted by its piece's code offset, every
  DATA relocation's by its piece's data offset, and both stay relocations of the
  same kind in the output, so a linked program can be linked again;
- every SYMBOL relocation (of the program and of every dependency) has its
  ``imm`` replaced by the value of the symbol the import list provides under
  that name, and becomes a CODE relocation (code symbol) or a DATA relocation
  (data symbol);
- symbols: the program's own symbols plus every imported symbol at its merged
  value; entry and metadata: the program's own.  Dependencies' entries, their
  unimported symbols and their metadata are dropped.

Resolution is flat: the names the import list requests are the only names any
piece may resolve against, and only the objects the list names are fetched.  A
dependency that needs a symbol from another dependency is linked when the list
requests that symbol too; otherwise the link fails with ``UnresolvedSymbol``.
The dependency graph (piece A → piece B when A resolves a symbol B provides)
must be acyclic.  The output is a pure function of the inputs: the same program,
import list and fetched objects give the same bytes and so the same program id.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from kforge.core import (
    ForgeError,
    Hash256,
    InvalidProgram,
    UnresolvedSymbol,
    VaultFetchFailed,
    show_name,
)
from kforge.isa import OPCODES, WORD_MASK, Instruction
from kforge.limits import (
    MAX_CODE_LENGTH,
    MAX_DATA_BYTES,
    MAX_LINK_IMPORTS,
    MAX_SYMBOLS,
    check_size,
)
from kforge.program import ForgeProgram, Relocation, RelocationKind, Symbol, SymbolKind
from kforge.wire import Schema

__all__ = [
    "DATA_ALIGNMENT",
    "LINK_TICKS_PER_IMPORT",
    "MAX_SECTION_LENGTH",
    "Fetch",
    "Import",
    "derive_imports",
    "link",
    "link_cost",
]

DATA_ALIGNMENT: Final = 8
LINK_TICKS_PER_IMPORT: Final = 2  # seed §11: "Import/link: 2 ticks per import"
MAX_SECTION_LENGTH: Final = 0xFFFF_FFFF  # a container section count is a u32

Fetch = Callable[[Hash256], ForgeProgram]

_USES_IMM: Final = {opcode: "imm" in info.fields for opcode, info in OPCODES.items()}
_EXPECTED_FIELDS: Final = ("code", "data", "entry", "symbols", "relocations", "metadata")
_PROGRAM_FIELDS: Final = tuple(field.name for field in dataclasses.fields(ForgeProgram))
_CODE, _DATA, _SYMBOL = RelocationKind.CODE, RelocationKind.DATA, RelocationKind.SYMBOL
_RELOCATION_OF_SYMBOL: Final = {SymbolKind.CODE: _CODE, SymbolKind.DATA: _DATA}


class Import(Schema, frozen=True):
    """Symbols to take from one dependency (seed §3.9): its program id and the names.

    On the wire (``LINK_RESOLVE``, ``CreateSandbox.imports``) ``from_`` is named ``from``.
    """

    from_: Hash256 = msgspec.field(name="from")
    symbols: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.from_, Hash256):
            raise TypeError(f"Import.from_ must be a Hash256, got {type(self.from_).__name__}")
        for name in self.symbols:
            if not isinstance(name, bytes):
                raise TypeError(f"Import symbol names must be bytes, got {type(name).__name__}")


def link_cost(imports: Sequence[Import]) -> int:
    """Ticks the engine charges for a link: 2 per entry of the import list (seed §11)."""
    return LINK_TICKS_PER_IMPORT * len(imports)


@dataclass(frozen=True, slots=True)
class _Piece:
    object_id: Hash256
    program: ForgeProgram
    code_offset: int
    data_offset: int


def _align(value: int) -> int:
    return -(-value // DATA_ALIGNMENT) * DATA_ALIGNMENT


def _label(pieces: Sequence[_Piece], index: int) -> str:
    short = pieces[index].object_id.hex[:16]
    return f"the program {short}" if index == 0 else f"dependency {short}"


def _show(name: bytes) -> str:
    return show_name(name)


def _fetch(fetch: Fetch, object_id: Hash256) -> ForgeProgram:
    """The dependency ``object_id``; anything but a program with that id is a fetch failure."""
    try:
        program = fetch(object_id)
    except ForgeError:
        raise
    except Exception as error:  # the vault's own failure, whatever its type
        raise VaultFetchFailed(object_id, f"{type(error).__name__}: {error}") from error
    if not isinstance(program, ForgeProgram):
        raise VaultFetchFailed(object_id, f"fetched a {type(program).__name__}, not a program")
    if program.program_id != object_id:
        raise VaultFetchFailed(object_id, f"fetched a program whose id is {program.program_id}")
    return program


def _place(
    program: ForgeProgram,
    imports: Sequence[Import],
    fetch: Fetch,
    max_code: int,
    max_data: int,
) -> tuple[list[_Piece], dict[Hash256, int], int]:
    """Fetch every distinct dependency once, in order, and give it its offsets."""
    main_id = program.program_id
    pieces = [_Piece(main_id, program, 0, 0)]
    index_of = {main_id: 0}
    code_length, data_length = len(program.code), len(program.data)
    for entry in imports:
        if not isinstance(entry, Import):
            raise TypeError(f"imports must be Import values, got {type(entry).__name__}")
        if entry.from_ in index_of:
            continue
        dependency = _fetch(fetch, entry.from_)
        data_offset = _align(data_length)
        index_of[entry.from_] = len(pieces)
        pieces.append(_Piece(entry.from_, dependency, code_length, data_offset))
        code_length += len(dependency.code)
        if dependency.data:
            data_length = data_offset + len(dependency.data)
        if code_length > max_code:
            raise InvalidProgram(
                f"linked code would hold {code_length} instructions, more than the limit {max_code}"
            )
        if data_length > max_data:
            raise InvalidProgram(
                f"linked data would hold {data_length} bytes, more than the limit {max_data}"
            )
    return pieces, index_of, data_length


def _shift(value: int, offset: int, what: str) -> int:
    shifted = value + offset
    if shifted > WORD_MASK:
        raise InvalidProgram(f"{what}: {value} + offset {offset} does not fit 64 bits")
    return shifted


def _provided(
    pieces: Sequence[_Piece], index_of: dict[Hash256, int], imports: Sequence[Import]
) -> dict[bytes, tuple[int, Symbol]]:
    """Every requested name → (providing piece, its symbol at the merged value)."""
    main_symbols = {symbol.name for symbol in pieces[0].program.symbols}
    exports: dict[int, dict[bytes, Symbol]] = {}
    provided: dict[bytes, tuple[int, Symbol]] = {}
    for entry in imports:
        index = index_of[entry.from_]
        piece = pieces[index]
        table = exports.get(index)
        if table is None:
            table = exports[index] = {symbol.name: symbol for symbol in piece.program.symbols}
        for name in entry.symbols:
            known = provided.get(name)
            if known is not None:
                if known[0] == index:
                    continue
                raise InvalidProgram(
                    f"ambiguous symbol {_show(name)}: imported from both "
                    f"{_label(pieces, known[0])} and {_label(pieces, index)}"
                )
            symbol = table.get(name)
            if symbol is None:
                error = UnresolvedSymbol(name)
                error.add_note(f"{_label(pieces, index)} does not export it")
                raise error
            if index != 0 and name in main_symbols:
                raise InvalidProgram(
                    f"ambiguous symbol {_show(name)}: the program defines it and imports it "
                    f"from {_label(pieces, index)}"
                )
            offset = piece.code_offset if symbol.kind is SymbolKind.CODE else piece.data_offset
            what = f"symbol {_show(name)} of {_label(pieces, index)}"
            value = _shift(symbol.value, offset, what)
            provided[name] = (index, Symbol(name, symbol.kind, value))
    return provided


def _relocate(
    pieces: Sequence[_Piece], provided: dict[bytes, tuple[int, Symbol]]
) -> tuple[list[Instruction], list[Relocation], list[dict[int, bytes]]]:
    """The merged code and relocations, and the dependency edges (piece → provider → name)."""
    code: list[Instruction] = []
    relocations: list[Relocation] = []
    edges: list[dict[int, bytes]] = [{} for _ in pieces]
    missing: list[bytes] = []
    for index, piece in enumerate(pieces):
        base = piece.code_offset
        chunk = list(piece.program.code)
        for reloc in piece.program.relocations:
            insn = chunk[reloc.index]
            if reloc.kind is _SYMBOL:
                found = provided.get(reloc.name)
                if found is None:
                    missing.append(reloc.name)
                    continue
                provider, symbol = found
                edges[index].setdefault(provider, reloc.name)
                value, kind = symbol.value, _RELOCATION_OF_SYMBOL[symbol.kind]
            else:
                offset = base if reloc.kind is _CODE else piece.data_offset
                what = f"relocation at instruction {reloc.index} of {_label(pieces, index)}"
                value, kind = _shift(insn.imm, offset, what), reloc.kind
            if value != insn.imm:
                if value and not _USES_IMM.get(insn.opcode, True):
                    raise InvalidProgram(
                        f"relocation at instruction {reloc.index} of {_label(pieces, index)}: "
                        f"{OPCODES[insn.opcode].mnemonic} has no immediate to relocate"
                    )
                chunk[reloc.index] = Instruction(insn.opcode, insn.rd, insn.rs1, insn.rs2, value)
            relocations.append(Relocation(base + reloc.index, kind))
        code += chunk
    if missing:
        error = UnresolvedSymbol(missing[0])
        names = ", ".join(_show(name) for name in dict.fromkeys(missing))
        error.add_note(f"no import provides: {names}")
        raise error
    return code, relocations, edges


def _refuse_cycles(pieces: Sequence[_Piece], edges: list[dict[int, bytes]]) -> None:
    """Raise ``InvalidProgram`` naming the first cycle of the dependency graph (if any)."""
    done = [False] * len(pieces)
    for root in range(len(pieces)):
        if done[root]:
            continue
        path: list[int] = [root]
        on_path = {root}
        stack = [iter(sorted(edges[root]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                done[path[-1]] = True
                on_path.discard(path.pop())
                continue
            if target in on_path:
                cycle = [*path[path.index(target) :], target]
                steps = [_label(pieces, cycle[0])]
                for source, sink in itertools.pairwise(cycle):
                    steps.append(f"-[{_show(edges[source][sink])}]-> {_label(pieces, sink)}")
                raise InvalidProgram("dependency cycle: " + " ".join(steps))
            if not done[target]:
                path.append(target)
                on_path.add(target)
                stack.append(iter(sorted(edges[target])))


def link(
    program: ForgeProgram,
    imports: Sequence[Import],
    fetch: Fetch,
    *,
    max_code: int = MAX_CODE_LENGTH,
    max_data: int = MAX_DATA_BYTES,
) -> ForgeProgram:
    """``program`` merged with the dependencies ``imports`` names, every symbol resolved.

    ``fetch`` returns the program stored under an id (the Vault); it may raise
    ``VaultFetchFailed`` (any other exception it raises becomes one, as does a
    program whose id is not the one asked for).  Errors: ``UnresolvedSymbol``
    for a symbol relocation no import provides or a requested name its
    dependency does not export; ``InvalidProgram`` for a name two imports
    provide (or the program defines and imports), a dependency cycle, a merged
    program longer than ``max_code`` instructions or ``max_data`` data bytes
    (by default and at most ``MAX_CODE_LENGTH`` and ``MAX_DATA_BYTES``), more
    than ``MAX_SYMBOLS`` symbols, or a relocated value past 2^64-1; and
    ``InputTooLarge`` for more than ``MAX_LINK_IMPORTS`` entries in ``imports``,
    refused before anything is fetched.  Time is linear in the pieces' sizes.
    """
    check_size("link import list (entries)", len(imports), MAX_LINK_IMPORTS)
    max_code = min(max_code, MAX_CODE_LENGTH)
    max_data = min(max_data, MAX_DATA_BYTES)
    if len(program.code) > max_code:
        raise InvalidProgram(
            f"the program holds {len(program.code)} instructions, more than the limit {max_code}"
        )
    if len(program.data) > max_data:
        raise InvalidProgram(
            f"the program holds {len(program.data)} data bytes, more than the limit {max_data}"
        )
    pieces, index_of, data_length = _place(program, imports, fetch, max_code, max_data)
    provided = _provided(pieces, index_of, imports)
    code, relocations, edges = _relocate(pieces, provided)
    _refuse_cycles(pieces, edges)

    data = bytearray(program.data)
    for piece in pieces[1:]:
        if piece.program.data:
            data += bytes(piece.data_offset - len(data))
            data += piece.program.data
    assert len(data) == data_length

    symbols = {symbol.name: symbol for symbol in program.symbols}
    for name, (_, symbol) in provided.items():
        symbols.setdefault(name, symbol)
    if len(symbols) > MAX_SYMBOLS:
        raise InvalidProgram(
            f"linked program would hold {len(symbols)} symbols, more than the limit {MAX_SYMBOLS}"
        )
    return _merged_program(
        tuple(code),
        bytes(data),
        program.entry,
        tuple(sorted(symbols.values(), key=lambda symbol: symbol.name)),
        tuple(relocations),
        program.metadata,
    )


def _merged_program(
    code: tuple[Instruction, ...],
    data: bytes,
    entry: int,
    symbols: tuple[Symbol, ...],
    relocations: tuple[Relocation, ...],
    metadata: bytes,
) -> ForgeProgram:
    """The merged program, without validating again what is valid by construction.

    Every piece passed ``ForgeProgram`` validation; the linker checks all it
    changes (section lengths against the limits, relocated and symbol values
    within 64 bits, no immediate written into an opcode that has none) and builds
    symbols and relocations sorted and unique.  Re-running the full validation
    would cost most of a link (about 2 µs an instruction), so it is skipped;
    ``tests/test_link.py`` checks the result against full validation.  Should
    ``ForgeProgram`` gain a field, this falls back to the validating constructor.
    """
    if _PROGRAM_FIELDS != _EXPECTED_FIELDS:
        return ForgeProgram(code, data, entry, symbols, relocations, metadata)
    program = object.__new__(ForgeProgram)
    for name, value in zip(
        _EXPECTED_FIELDS, (code, data, entry, symbols, relocations, metadata), strict=True
    ):
        object.__setattr__(program, name, value)
    return program


def derive_imports(program: ForgeProgram, libraries: Sequence[ForgeProgram]) -> list[Import]:
    """An import list taking every needed name from the libraries that export it.

    Every library is listed (in order, once per distinct id), each with the names
    it exports that the program or any library needs (has a symbol relocation
    for).  A name two libraries export is requested from both, so ``link``
    refuses it as ambiguous; a name no library exports is left for ``link`` to
    report as unresolved.
    """
    needed = set(program.imports)
    for library in libraries:
        needed.update(library.imports)
    imports: list[Import] = []
    seen: set[Hash256] = set()
    for library in libraries:
        library_id = library.program_id
        if library_id in seen:
            continue
        seen.add(library_id)
        names = tuple(symbol.name for symbol in library.symbols if symbol.name in needed)
        imports.append(Import(library_id, names))
    return imports
