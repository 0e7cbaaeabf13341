"""The FRGP v1 program container: strict, canonical encoding and validation.

Layout (little-endian)::

    magic "FRGP" | version u16 = 1 | flags u16 = 0 | entry u64
    data:        u32 count, bytes
    code:        u32 count, 16-byte instructions
    symbols:     u32 count, sorted by name: u16 len, name, u8 kind (0 code, 1 data), u64 value
    relocations: u32 count, sorted by index: u32 index, u8 kind (0 code, 1 data, 2 symbol),
                 u16 len, name (empty unless kind 2)
    metadata:    u32 count, bytes

Decoding accepts exactly the bytes ``encode`` produces, so
``encode(decode(b)) == b`` for every accepted ``b``; anything else is
``InvalidProgram`` with the offset and the reason.  A program's id is the
SHA-256 of its encoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import Final

from kforge.core import Hash256, InvalidProgram, show_name
from kforge.isa import (
    INSTRUCTION_SIZE,
    UNUSED_FIELDS,
    Instruction,
    decode_instruction,
    encode_instruction,
)
from kforge.limits import (
    MAX_CODE_LENGTH,
    MAX_DATA_BYTES,
    MAX_METADATA_BYTES,
    MAX_PROGRAM_BYTES,
    MAX_SYMBOLS,
)

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CheckedCode",
    "ForgeProgram",
    "InstructionPool",
    "Relocation",
    "RelocationKind",
    "Symbol",
    "SymbolKind",
    "decode_program",
    "encode_program",
    "is_program_bytes",
]

MAGIC: Final = b"FRGP"
FORMAT_VERSION: Final = 1
_HEADER = struct.Struct("<4sHHQ")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MAX_U16: Final = 0xFFFF
#: The most items each counted section may hold: ``(what, limit)`` in container order.
_SECTION_LIMITS: Final = (
    ("data", MAX_DATA_BYTES),
    ("code", MAX_CODE_LENGTH),
    ("symbol", MAX_SYMBOLS),
    ("metadata", MAX_METADATA_BYTES),
)


#: An instruction's fields in ``Instruction``'s order: opcode, rd, rs1, rs2, imm.
InstructionFields = tuple[int, int, int, int, int]


class CheckedCode(tuple[Instruction, ...]):
    """A code section whose every instruction was checked when an
    :class:`InstructionPool` made it: a program built on it does not check them again
    (a compiled program repeats a few thousand distinct instructions a hundred
    thousand times).  Code decoded from bytes is a plain tuple, checked in full."""

    __slots__ = ()


class InstructionPool(dict[InstructionFields, Instruction]):
    """Instructions by their fields, each made and checked the first time it is asked
    for: equal instructions are one object (they are immutable)."""

    def __missing__(self, fields: InstructionFields) -> Instruction:
        instruction = Instruction(*fields)
        if not _well_formed(instruction):
            raise _Malformed(instruction)
        self[fields] = instruction
        return instruction

    def code(self, fields: list[InstructionFields]) -> CheckedCode:
        """The instructions with these fields, in order; ``InvalidProgram`` names the
        first one that is not well formed."""
        try:
            return CheckedCode(map(self.__getitem__, fields))
        except _Malformed as malformed:
            bad = malformed.instruction
            index = fields.index((bad.opcode, bad.rd, bad.rs1, bad.rs2, bad.imm))
            _validate_instruction(index, bad)
            raise AssertionError("a malformed instruction passed its check") from None


class _Malformed(Exception):
    def __init__(self, instruction: Instruction) -> None:
        super().__init__(instruction)
        self.instruction = instruction


class SymbolKind(IntEnum):
    CODE = 0
    DATA = 1


class RelocationKind(IntEnum):
    CODE = 0  # imm is an instruction index: shifted by the code offset when linked
    DATA = 1  # imm is a data address: shifted by the data offset when linked
    SYMBOL = 2  # imm is replaced by the named (imported) symbol's value when linked


@dataclass(frozen=True, slots=True)
class Symbol:
    name: bytes
    kind: SymbolKind
    value: int


@dataclass(frozen=True, slots=True)
class Relocation:
    index: int
    kind: RelocationKind
    name: bytes = b""


@dataclass(frozen=True)
class ForgeProgram:
    """A decoded, validated program.  Construct with ``ForgeProgram.build`` to validate."""

    code: tuple[Instruction, ...]
    data: bytes = b""
    entry: int = 0
    symbols: tuple[Symbol, ...] = ()
    relocations: tuple[Relocation, ...] = ()
    metadata: bytes = b""

    def __post_init__(self) -> None:
        _validate(self)

    @cached_property
    def encoded(self) -> bytes:
        """The canonical FRGP bytes of this program."""
        return encode_program(self)

    @cached_property
    def program_id(self) -> Hash256:
        """SHA-256 of the canonical bytes."""
        return Hash256.of(self.encoded)

    def symbol(self, name: bytes) -> Symbol | None:
        for symbol in self.symbols:
            if symbol.name == name:
                return symbol
        return None

    @property
    def imports(self) -> tuple[bytes, ...]:
        """Names of symbols this program needs from elsewhere (SYMBOL relocations), sorted."""
        return tuple(sorted({r.name for r in self.relocations if r.kind is RelocationKind.SYMBOL}))


def is_program_bytes(blob: bytes) -> bool:
    """Whether ``blob`` claims to be an FRGP container (by its magic, not its name)."""
    return blob[:4] == MAGIC


def encode_program(program: ForgeProgram) -> bytes:
    """The canonical FRGP v1 bytes of ``program``."""
    parts = [_HEADER.pack(MAGIC, FORMAT_VERSION, 0, program.entry)]
    parts += [_U32.pack(len(program.data)), program.data]
    parts.append(_U32.pack(len(program.code)))
    parts += [encode_instruction(insn) for insn in program.code]
    parts.append(_U32.pack(len(program.symbols)))
    for symbol in program.symbols:
        parts += [_U16.pack(len(symbol.name)), symbol.name]
        parts += [_U8.pack(symbol.kind), _U64.pack(symbol.value)]
    parts.append(_U32.pack(len(program.relocations)))
    for reloc in program.relocations:
        parts += [_U32.pack(reloc.index), _U8.pack(reloc.kind)]
        parts += [_U16.pack(len(reloc.name)), reloc.name]
    parts += [_U32.pack(len(program.metadata)), program.metadata]
    return b"".join(parts)


class _Reader:
    """Reads the container front to back; every shortfall names its offset."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob
        self.offset = 0

    def take(self, size: int, what: str) -> bytes:
        end = self.offset + size
        if end > len(self.blob):
            raise InvalidProgram(
                f"truncated at byte {self.offset}: {what} needs {size} bytes, "
                f"{len(self.blob) - self.offset} left"
            )
        chunk = self.blob[self.offset : end]
        self.offset = end
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> int:
        value: int = fmt.unpack(self.take(fmt.size, what))[0]
        return value

    def count(self, what: str, item_size: int, limit: int) -> int:
        """A section's item count, refused when over ``limit`` or past the end."""
        at = self.offset
        count = self.unpack(_U32, f"{what} count")
        if count > limit:
            raise InvalidProgram(f"{what} count {count} at byte {at} is over the limit of {limit}")
        if count * item_size > len(self.blob) - self.offset:
            raise InvalidProgram(
                f"{what} count {count} at byte {at} runs past the end of the container"
            )
        return count


def decode_program(blob: bytes) -> ForgeProgram:
    """Decode and validate FRGP bytes; raises ``InvalidProgram`` saying what and where."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise InvalidProgram("program must be bytes")
    if len(blob) > MAX_PROGRAM_BYTES:
        raise InvalidProgram(f"{len(blob)} bytes is over the limit of {MAX_PROGRAM_BYTES}")
    blob = bytes(blob)
    reader = _Reader(blob)
    magic, version, flags, entry = _HEADER.unpack(reader.take(_HEADER.size, "header"))
    if magic != MAGIC:
        raise InvalidProgram(f"bad magic {show_name(magic)} at byte 0, expected {show_name(MAGIC)}")
    if version != FORMAT_VERSION:
        raise InvalidProgram(f"unsupported version {version} at byte 4, expected 1")
    if flags != 0:
        raise InvalidProgram(f"flags at byte 6 must be 0, got {flags:#x}")
    data = reader.take(reader.count("data", 1, MAX_DATA_BYTES), "data")
    code = _decode_code(reader)
    symbols = _decode_symbols(reader)
    relocations = _decode_relocations(reader)
    metadata = reader.take(reader.count("metadata", 1, MAX_METADATA_BYTES), "metadata")
    if reader.offset != len(blob):
        raise InvalidProgram(
            f"{len(blob) - reader.offset} trailing bytes after the container at byte {reader.offset}"
        )
    return ForgeProgram(code, data, entry, symbols, relocations, metadata)


def _decode_code(reader: _Reader) -> tuple[Instruction, ...]:
    count = reader.count("code", INSTRUCTION_SIZE, MAX_CODE_LENGTH)
    code = []
    for index in range(count):
        at = reader.offset
        insn, reserved = decode_instruction(reader.take(INSTRUCTION_SIZE, "instruction"))
        if reserved != 0:
            raise InvalidProgram(
                f"instruction {index} (byte {at}): reserved field must be 0, got {reserved:#x}"
            )
        code.append(insn)
    return tuple(code)


def _decode_symbols(reader: _Reader) -> tuple[Symbol, ...]:
    count = reader.count("symbol", 11, MAX_SYMBOLS)
    symbols = []
    for _ in range(count):
        at = reader.offset
        name = reader.take(reader.unpack(_U16, "symbol name length"), "symbol name")
        kind = reader.unpack(_U8, "symbol kind")
        value = reader.unpack(_U64, "symbol value")
        if kind not in SymbolKind._value2member_map_:
            raise InvalidProgram(f"symbol {show_name(name)} (byte {at}): unknown kind {kind}")
        symbols.append(Symbol(name, SymbolKind(kind), value))
    return tuple(symbols)


def _decode_relocations(reader: _Reader) -> tuple[Relocation, ...]:
    count = reader.count("relocation", 7, MAX_CODE_LENGTH)
    relocations = []
    for _ in range(count):
        at = reader.offset
        index = reader.unpack(_U32, "relocation index")
        kind = reader.unpack(_U8, "relocation kind")
        name = reader.take(reader.unpack(_U16, "relocation name length"), "relocation name")
        if kind not in RelocationKind._value2member_map_:
            raise InvalidProgram(f"relocation (byte {at}): unknown kind {kind}")
        relocations.append(Relocation(index, RelocationKind(kind), name))
    return tuple(relocations)


def _validate(program: ForgeProgram) -> None:
    """Every rule a program must meet to load; raises ``InvalidProgram`` on the first broken one."""
    code_length = len(program.code)
    if code_length == 0:
        raise InvalidProgram("the code section is empty")
    sizes = (len(program.data), code_length, len(program.symbols), len(program.metadata))
    for (what, limit), size in zip(_SECTION_LIMITS, sizes, strict=True):
        if size > limit:
            raise InvalidProgram(
                f"the {what} section holds {size} items, over the limit of {limit}"
            )
    if not 0 <= program.entry < code_length:
        raise InvalidProgram(f"entry {program.entry} is outside the code (length {code_length})")
    if not isinstance(program.code, CheckedCode):
        _validate_code(program.code)
    _validate_symbols(program.symbols)
    _validate_relocations(program.relocations, code_length)


def _validate_code(code: tuple[Instruction, ...]) -> None:
    # a compiler may use one instruction object many times: each is checked once (the
    # objects gathered by identity in C, a compiled program has a third as many)
    distinct = dict(zip(map(id, code), code, strict=True))
    for insn in distinct.values():
        if not _well_formed(insn):  # the full check says what is wrong
            index = next(i for i, other in enumerate(code) if other is insn)
            _validate_instruction(index, insn)


def _well_formed(insn: Instruction) -> bool:
    """Whether every field fits and the fields ``insn``'s opcode does not use are 0."""
    return not (
        (insn.opcode | insn.rd | insn.rs1 | insn.rs2) >> 8
        or insn.imm >> 64
        or any(getattr(insn, name) for name in UNUSED_FIELDS.get(insn.opcode, ()))
    )


def _validate_instruction(index: int, insn: Instruction) -> None:
    for name, limit in (("opcode", 0xFF), ("rd", 0xFF), ("rs1", 0xFF), ("rs2", 0xFF)):
        value = getattr(insn, name)
        if not 0 <= value <= limit:
            raise InvalidProgram(f"instruction {index}: {name} {value} does not fit a byte")
    if not 0 <= insn.imm < 1 << 64:
        raise InvalidProgram(f"instruction {index}: imm {insn.imm} does not fit 64 bits")
    unused = insn.unused_nonzero_fields()
    if unused:
        info = insn.info
        assert info is not None
        raise InvalidProgram(
            f"instruction {index} ({info.mnemonic}): field {unused[0]} is not used "
            f"by {info.mnemonic} and must be 0, got {getattr(insn, unused[0])}"
        )


def _validate_symbols(symbols: tuple[Symbol, ...]) -> None:
    previous: bytes | None = None
    for symbol in symbols:
        if len(symbol.name) > _MAX_U16:
            raise InvalidProgram(f"symbol name of {len(symbol.name)} bytes is too long")
        if not 0 <= symbol.value < 1 << 64:
            raise InvalidProgram(f"symbol {show_name(symbol.name)}: value does not fit 64 bits")
        if previous is not None and symbol.name <= previous:
            problem = "duplicate" if symbol.name == previous else "unsorted"
            raise InvalidProgram(f"{problem} symbol name {show_name(symbol.name)}")
        previous = symbol.name


def _validate_relocations(relocations: tuple[Relocation, ...], code_length: int) -> None:
    previous = -1
    for reloc in relocations:
        if not 0 <= reloc.index < code_length:
            raise InvalidProgram(
                f"relocation at instruction {reloc.index} is outside the code (length {code_length})"
            )
        if reloc.index <= previous:
            problem = "duplicate" if reloc.index == previous else "unsorted"
            raise InvalidProgram(f"{problem} relocation at instruction {reloc.index}")
        previous = reloc.index
        if reloc.kind is RelocationKind.SYMBOL:
            if not reloc.name:
                raise InvalidProgram(f"symbol relocation at instruction {reloc.index} has no name")
            if len(reloc.name) > _MAX_U16:
                raise InvalidProgram(f"relocation name of {len(reloc.name)} bytes is too long")
        elif reloc.name:
            raise InvalidProgram(
                f"relocation at instruction {reloc.index}: only symbol relocations carry a name"
            )
