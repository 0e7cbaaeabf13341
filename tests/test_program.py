"""The FRGP v1 container (spec §6): exact bytes, strict decoding, canonical round trips."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kforge.core import InvalidProgram
from kforge.isa import Instruction, Opcode
from kforge.program import (
    CheckedCode,
    ForgeProgram,
    InstructionPool,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
    encode_program,
    is_program_bytes,
)

M64 = (1 << 64) - 1
HALT = Instruction(Opcode.HALT)

# The operand fields each opcode uses, transcribed from the spec's table (§4).
SPEC_FIELDS: dict[Opcode, frozenset[str]] = {
    **{
        op: frozenset({"rd", "rs1", "rs2"})
        for op in (
            Opcode.ADD,
            Opcode.SUB,
            Opcode.MUL,
            Opcode.DIV,
            Opcode.MOD,
            Opcode.AND,
            Opcode.OR,
            Opcode.XOR,
            Opcode.SHL,
            Opcode.SHR,
        )
    },
    Opcode.NEG: frozenset({"rd", "rs1"}),
    Opcode.NOT: frozenset({"rd", "rs1"}),
    Opcode.LOAD: frozenset({"rd", "rs1", "imm"}),
    Opcode.LOADW: frozenset({"rd", "rs1", "imm"}),
    Opcode.STORE: frozenset({"rs1", "rs2", "imm"}),
    Opcode.STOREW: frozenset({"rs1", "rs2", "imm"}),
    Opcode.PUSH: frozenset({"rs1"}),
    Opcode.POP: frozenset({"rd"}),
    Opcode.JMP: frozenset({"imm"}),
    Opcode.JZ: frozenset({"rs1", "imm"}),
    Opcode.JNZ: frozenset({"rs1", "imm"}),
    Opcode.JLT: frozenset({"rs1", "rs2", "imm"}),
    Opcode.CALL: frozenset({"imm"}),
    Opcode.RET: frozenset(),
    Opcode.LI: frozenset({"rd", "imm"}),
    Opcode.HALT: frozenset(),
    Opcode.FAULT: frozenset({"imm"}),
    Opcode.NOP: frozenset(),
    Opcode.SEND: frozenset({"rs1", "rs2", "imm"}),
    Opcode.RECV: frozenset({"rd", "rs1", "rs2", "imm"}),
    Opcode.POLL: frozenset({"rd", "imm"}),
    Opcode.TICK: frozenset(),
    Opcode.BUDGET: frozenset({"rd"}),
}
FIELDS = ("rd", "rs1", "rs2", "imm")
SPEC_OPCODE_VALUES = {
    "ADD": 0x01, "SUB": 0x02, "MUL": 0x03, "DIV": 0x04, "MOD": 0x05, "NEG": 0x06,
    "AND": 0x10, "OR": 0x11, "XOR": 0x12, "NOT": 0x13, "SHL": 0x14, "SHR": 0x15,
    "LOAD": 0x20, "STORE": 0x21, "LOADW": 0x22, "STOREW": 0x23, "PUSH": 0x24, "POP": 0x25,
    "JMP": 0x30, "JZ": 0x31, "JNZ": 0x32, "JLT": 0x33, "CALL": 0x34, "RET": 0x35,
    "LI": 0x40, "HALT": 0x50, "FAULT": 0x51, "NOP": 0x52,
    "SEND": 0x60, "RECV": 0x61, "POLL": 0x62, "TICK": 0x70, "BUDGET": 0x71,
}  # fmt: skip


def u16(value: int) -> bytes:
    return struct.pack("<H", value)


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def insn_bytes(
    opcode: int, rd: int = 0, rs1: int = 0, rs2: int = 0, imm: int = 0, reserved: int = 0
) -> bytes:
    return bytes([opcode, rd, rs1, rs2]) + u32(reserved) + u64(imm)


HEADER = b"FRGP" + u16(1) + u16(0)


def container(
    code: bytes = insn_bytes(0x50),
    code_count: int | None = None,
    *,
    entry: int = 0,
    data: bytes = b"",
    symbols: bytes = b"",
    symbol_count: int = 0,
    relocations: bytes = b"",
    relocation_count: int = 0,
    metadata: bytes = b"",
    header: bytes = HEADER,
) -> bytes:
    """FRGP bytes built by hand, field by field, as §6 lays them out."""
    count = len(code) // 16 if code_count is None else code_count
    return (
        header
        + u64(entry)
        + u32(len(data))
        + data
        + u32(count)
        + code
        + u32(symbol_count)
        + symbols
        + u32(relocation_count)
        + relocations
        + u32(len(metadata))
        + metadata
    )


def symbol_bytes(name: bytes, kind: int, value: int) -> bytes:
    return u16(len(name)) + name + bytes([kind]) + u64(value)


def relocation_bytes(index: int, kind: int, name: bytes = b"") -> bytes:
    return u32(index) + bytes([kind]) + u16(len(name)) + name


# A program that uses every section.
FULL_PROGRAM = ForgeProgram(
    code=(
        Instruction(Opcode.JMP, imm=2),
        Instruction(Opcode.LI, rd=1, imm=3),
        Instruction(Opcode.CALL, imm=0),
        Instruction(0xEE, rd=1, rs1=2, rs2=3, imm=M64),
    ),
    data=b"abc",
    entry=1,
    symbols=(Symbol(b"a", SymbolKind.CODE, 0), Symbol(b"b", SymbolKind.DATA, 1)),
    relocations=(
        Relocation(0, RelocationKind.CODE),
        Relocation(1, RelocationKind.DATA),
        Relocation(2, RelocationKind.SYMBOL, b"ext"),
    ),
    metadata=b"meta",
)
FULL_BYTES = container(
    insn_bytes(0x30, imm=2)
    + insn_bytes(0x40, rd=1, imm=3)
    + insn_bytes(0x34)
    + insn_bytes(0xEE, 1, 2, 3, M64),
    entry=1,
    data=b"abc",
    symbols=symbol_bytes(b"a", 0, 0) + symbol_bytes(b"b", 1, 1),
    symbol_count=2,
    relocations=relocation_bytes(0, 0) + relocation_bytes(1, 1) + relocation_bytes(2, 2, b"ext"),
    relocation_count=3,
    metadata=b"meta",
)


# ======================================================================= exact bytes


def test_the_smallest_program_encodes_to_the_bytes_laid_out_in_the_spec() -> None:
    expected = bytes.fromhex(
        "46524750"
        "0100"
        "0000"
        "0000000000000000"  # magic, version 1, flags 0, entry 0
        "00000000"  # data count
        "01000000"
        "50000000"
        "00000000"
        "0000000000000000"  # one HALT
        "00000000"
        "00000000"
        "00000000"  # symbols, relocations, metadata
    )
    program = ForgeProgram((HALT,))
    assert encode_program(program) == expected
    assert program.encoded == expected
    assert decode_program(expected) == program


def test_a_program_using_every_section_encodes_field_by_field() -> None:
    assert encode_program(FULL_PROGRAM) == FULL_BYTES
    assert decode_program(FULL_BYTES) == FULL_PROGRAM


def test_program_id_is_the_sha256_of_the_bytes() -> None:
    assert FULL_PROGRAM.program_id.raw == hashlib.sha256(FULL_BYTES).digest()
    assert str(FULL_PROGRAM.program_id) == hashlib.sha256(FULL_BYTES).hexdigest()


def test_programs_are_told_apart_by_magic() -> None:
    assert is_program_bytes(FULL_BYTES)
    assert is_program_bytes(b"FRGP")
    assert not is_program_bytes(b"FRG")
    assert not is_program_bytes(b"; FRGP\nHALT\n")
    assert not is_program_bytes(b"frgp" + FULL_BYTES[4:])


def test_isa_opcode_values_match_the_spec() -> None:
    assert {op.name: op.value for op in Opcode} == SPEC_OPCODE_VALUES


def test_isa_operand_fields_match_the_spec() -> None:
    for opcode, fields in SPEC_FIELDS.items():
        assert Instruction(opcode).info is not None
        assert Instruction(opcode).info.fields == fields, opcode.name  # type: ignore[union-attr]


# ======================================================================= refusals


def refused(blob: bytes) -> InvalidProgram:
    with pytest.raises(InvalidProgram) as caught:
        decode_program(blob)
    return caught.value


@pytest.mark.parametrize("magic", [b"FRGQ", b"frgp", b"\0\0\0\0", b"PGRF"])
def test_bad_magic_is_refused(magic: bytes) -> None:
    refused(container(header=magic + u16(1) + u16(0)))


@pytest.mark.parametrize("version", [0, 2, 0x100, 0xFFFF])
def test_other_versions_are_refused(version: int) -> None:
    refused(container(header=b"FRGP" + u16(version) + u16(0)))


@pytest.mark.parametrize("flags", [1, 2, 0x8000, 0xFFFF])
def test_non_zero_flags_are_refused(flags: int) -> None:
    refused(container(header=b"FRGP" + u16(1) + u16(flags)))


@pytest.mark.parametrize("blob", [FULL_BYTES, container()], ids=["full", "minimal"])
def test_every_truncation_is_refused(blob: bytes) -> None:
    for length in range(len(blob)):
        refused(blob[:length])


@pytest.mark.parametrize("extra", [b"\0", b"x", bytes(16), FULL_BYTES])
def test_trailing_bytes_are_refused(extra: bytes) -> None:
    refused(FULL_BYTES + extra)


def test_data_count_past_the_end_is_refused() -> None:
    blob = bytearray(container())
    blob[16:20] = u32(0xFFFF_FFFF)
    refused(bytes(blob))


@pytest.mark.parametrize(
    "blob",
    [
        container(insn_bytes(0x50), code_count=2),
        container(insn_bytes(0x50), code_count=0xFFFF_FFFF),
        container(symbol_count=1),
        container(symbols=symbol_bytes(b"a", 0, 0), symbol_count=2),
        container(symbols=u16(0xFFFF) + b"abc", symbol_count=1),
        container(relocation_count=1),
        container(relocations=relocation_bytes(0, 2, b"x")[:-1] + b"", relocation_count=1),
        container(relocations=u32(0) + b"\x02" + u16(9) + b"ab", relocation_count=1),
    ],
    ids=[
        "code-2-of-1",
        "code-max",
        "symbols-1-of-0",
        "symbols-2-of-1",
        "symbol-name-long",
        "relocations-1-of-0",
        "relocation-name-cut",
        "relocation-name-long",
    ],
)
def test_counts_and_lengths_past_the_end_are_refused(blob: bytes) -> None:
    refused(blob)


def test_metadata_count_past_the_end_is_refused() -> None:
    blob = container(metadata=b"abc")
    refused(blob[:-4] + b"ab")  # metadata count 3, only 2 bytes


def test_empty_code_is_refused() -> None:
    refused(container(b""))
    with pytest.raises(InvalidProgram):
        ForgeProgram(())


@pytest.mark.parametrize(("code_length", "entry"), [(1, 1), (1, M64), (3, 3), (3, 1 << 32)])
def test_entry_at_or_past_the_code_length_is_refused(code_length: int, entry: int) -> None:
    refused(container(insn_bytes(0x50) * code_length, entry=entry))
    with pytest.raises(InvalidProgram):
        ForgeProgram((HALT,) * code_length, entry=entry)


def test_the_last_instruction_may_be_the_entry() -> None:
    assert decode_program(container(insn_bytes(0x52) * 2 + insn_bytes(0x50), entry=2)).entry == 2


@pytest.mark.parametrize("reserved", [1, 0x100, 0x8000_0000, 0xFFFF_FFFF])
@pytest.mark.parametrize("opcode", [0x50, 0x01, 0x00, 0xEE], ids=["HALT", "ADD", "op-00", "op-ee"])
def test_a_non_zero_reserved_field_is_refused_for_known_and_unknown_opcodes(
    opcode: int, reserved: int
) -> None:
    refused(container(insn_bytes(0x52) + insn_bytes(opcode, reserved=reserved)))


UNUSED_FIELD_CASES = [
    (opcode, name) for opcode, used in SPEC_FIELDS.items() for name in FIELDS if name not in used
]


@pytest.mark.parametrize("value", [1, 0xFF], ids=["1", "max"])
@pytest.mark.parametrize(
    ("opcode", "field"), UNUSED_FIELD_CASES, ids=[f"{o.name}-{f}" for o, f in UNUSED_FIELD_CASES]
)
def test_a_non_zero_unused_field_of_a_known_opcode_is_refused(
    opcode: Opcode, field: str, value: int
) -> None:
    insn = Instruction(opcode, **{field: value})
    with pytest.raises(InvalidProgram):
        ForgeProgram((insn,))
    refused(container(insn_bytes(opcode, **{field: value})))


USED_FIELD_CASES = [(opcode, name) for opcode, used in SPEC_FIELDS.items() for name in sorted(used)]


@pytest.mark.parametrize(
    ("opcode", "field"), USED_FIELD_CASES, ids=[f"{o.name}-{f}" for o, f in USED_FIELD_CASES]
)
def test_a_used_field_may_hold_any_value(opcode: Opcode, field: str) -> None:
    value = M64 if field == "imm" else 0xFF
    blob = container(insn_bytes(opcode, **{field: value}))
    assert decode_program(blob).code[0] == Instruction(opcode, **{field: value})


@pytest.mark.parametrize("opcode", [0x00, 0x07, 0x3F, 0x53, 0x72, 0xFF])
def test_fields_of_an_unknown_opcode_are_not_checked(opcode: int) -> None:
    blob = container(insn_bytes(opcode, 0xFF, 0xFF, 0xFF, M64))
    assert decode_program(blob).code[0] == Instruction(opcode, 0xFF, 0xFF, 0xFF, M64)


@pytest.mark.parametrize(
    ("names", "kinds"),
    [
        ([b"b", b"a"], [0, 0]),
        ([b"a", b"a"], [0, 1]),
        ([b"ab", b"a"], [1, 1]),
        ([b"a", b"c", b"b"], [0, 0, 0]),
        ([b"B", b"A"], [0, 0]),
    ],
    ids=["unsorted", "duplicate", "prefix-after", "unsorted-third", "uppercase"],
)
def test_unsorted_or_duplicate_symbol_names_are_refused(
    names: list[bytes], kinds: list[int]
) -> None:
    symbols = b"".join(symbol_bytes(n, k, 0) for n, k in zip(names, kinds, strict=True))
    refused(container(symbols=symbols, symbol_count=len(names)))
    with pytest.raises(InvalidProgram):
        ForgeProgram(
            (HALT,),
            symbols=tuple(Symbol(n, SymbolKind(k), 0) for n, k in zip(names, kinds, strict=True)),
        )


def test_symbols_sort_by_bytes_not_by_text() -> None:
    names = [b"B", b"a", b"aa", b"\xff"]
    symbols = b"".join(symbol_bytes(n, 0, 0) for n in names)
    assert [
        s.name for s in decode_program(container(symbols=symbols, symbol_count=4)).symbols
    ] == names


@pytest.mark.parametrize("kind", [2, 3, 0xFF])
def test_an_unknown_symbol_kind_is_refused(kind: int) -> None:
    refused(container(symbols=symbol_bytes(b"a", kind, 0), symbol_count=1))


@pytest.mark.parametrize("kind", [3, 4, 0xFF])
def test_an_unknown_relocation_kind_is_refused(kind: int) -> None:
    refused(container(relocations=relocation_bytes(0, kind), relocation_count=1))


@pytest.mark.parametrize(
    "relocations",
    [
        [(1, 0, b"")],  # index == code length
        [(0xFFFF_FFFF, 0, b"")],
        [(1, 0, b""), (0, 0, b"")],  # unsorted
        [(0, 0, b""), (0, 1, b"")],  # duplicate index
        [(0, 0, b"x")],  # only SYMBOL relocations carry a name
        [(0, 1, b"x")],
        [(0, 2, b"")],  # a SYMBOL relocation needs one
    ],
    ids=[
        "index-at-length",
        "index-max",
        "unsorted",
        "duplicate",
        "code-with-name",
        "data-with-name",
        "symbol-without-name",
    ],
)
def test_relocation_rules(relocations: list[tuple[int, int, bytes]]) -> None:
    raw = b"".join(relocation_bytes(i, k, n) for i, k, n in relocations)
    refused(container(relocations=raw, relocation_count=len(relocations)))
    with pytest.raises(InvalidProgram):
        ForgeProgram(
            (HALT,),
            relocations=tuple(Relocation(i, RelocationKind(k), n) for i, k, n in relocations),
        )


def test_valid_relocations_of_every_kind_are_accepted() -> None:
    raw = relocation_bytes(0, 2, b"f") + relocation_bytes(1, 0) + relocation_bytes(3, 1)
    program = decode_program(container(insn_bytes(0x30) * 4, relocations=raw, relocation_count=3))
    assert program.relocations == (
        Relocation(0, RelocationKind.SYMBOL, b"f"),
        Relocation(1, RelocationKind.CODE),
        Relocation(3, RelocationKind.DATA),
    )
    assert program.imports == (b"f",)


@pytest.mark.parametrize("blob", ["FRGP", None, 42, [1, 2]], ids=["str", "none", "int", "list"])
def test_a_non_bytes_argument_is_refused_as_invalid_program(blob: object) -> None:
    with pytest.raises(InvalidProgram):
        decode_program(blob)  # type: ignore[arg-type]


def test_bytearray_and_memoryview_decode_like_bytes() -> None:
    assert decode_program(bytearray(FULL_BYTES)) == FULL_PROGRAM
    assert decode_program(memoryview(FULL_BYTES)) == FULL_PROGRAM


@pytest.mark.parametrize(
    "insn",
    [
        Instruction(256),
        Instruction(0x01, rd=256),
        Instruction(0x40, imm=1 << 64),
        Instruction(0x40, imm=-1),
        Instruction(0x01, rs2=-1),
    ],
    ids=["opcode", "rd", "imm-2^64", "imm-negative", "rs2-negative"],
)
def test_constructing_a_program_with_out_of_range_fields_is_refused(insn: Instruction) -> None:
    with pytest.raises(InvalidProgram):
        ForgeProgram((insn,))


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ((256, 0, 0, 0, 0), "opcode 256"),
        ((0x01, 0, 0, -1, 0), "rs2 -1"),
        ((0x40, 1, 0, 0, 1 << 64), "imm"),
        ((0x50, 0, 0, 0, 7), "field imm is not used by HALT"),
    ],
)
def test_an_instruction_pool_refuses_a_malformed_instruction_naming_its_index(
    fields: tuple[int, int, int, int, int], words: str
) -> None:
    pool = InstructionPool()
    with pytest.raises(InvalidProgram, match="instruction 2") as refusal:
        pool.code([(0x50, 0, 0, 0, 0), (0x01, 1, 2, 3, 0), fields])
    assert words in str(refusal.value)
    assert fields not in pool


def test_code_from_an_instruction_pool_shares_equal_instructions_and_is_not_checked_again() -> None:
    pool = InstructionPool()
    code = pool.code([(0x40, 1, 0, 0, 5), (0x50, 0, 0, 0, 0), (0x40, 1, 0, 0, 5)])
    assert isinstance(code, CheckedCode)
    assert code[0] is code[2] and code[0] == Instruction(0x40, 1, imm=5)
    program = ForgeProgram(code, entry=1)
    # the bytes decode to plain code, checked in full, and to an equal program
    decoded = decode_program(program.encoded)
    assert not isinstance(decoded.code, CheckedCode)
    assert decoded == program


def test_refusals_name_what_is_wrong() -> None:
    assert "magic" in str(refused(container(header=b"XXXX" + u16(1) + u16(0))))
    assert "version" in str(refused(container(header=b"FRGP" + u16(2) + u16(0))))
    assert "reserved" in str(refused(container(insn_bytes(0x50, reserved=1))))
    assert "trailing" in str(refused(FULL_BYTES + b"\0"))
    assert "truncated" in str(refused(FULL_BYTES[:10]))


# ======================================================================= properties

u8s = st.integers(0, 0xFF)
u64s = st.one_of(st.integers(0, M64), st.sampled_from([0, 1, (1 << 63) - 1, 1 << 63, M64]))
UNKNOWN_OPCODES = [op for op in range(256) if op not in SPEC_OPCODE_VALUES.values()]


@st.composite
def instructions(draw: st.DrawFn) -> Instruction:
    if draw(st.booleans()):
        opcode = draw(st.sampled_from(list(SPEC_FIELDS)))
        used = SPEC_FIELDS[opcode]
        values = {f: (draw(u64s) if f == "imm" else draw(u8s)) for f in FIELDS if f in used}
        return Instruction(opcode, **values)
    return Instruction(
        draw(st.sampled_from(UNKNOWN_OPCODES)), draw(u8s), draw(u8s), draw(u8s), draw(u64s)
    )


@st.composite
def programs(draw: st.DrawFn) -> ForgeProgram:
    code = tuple(draw(st.lists(instructions(), min_size=1, max_size=12)))
    names = draw(
        st.dictionaries(
            st.binary(max_size=6), st.tuples(st.sampled_from(SymbolKind), u64s), max_size=4
        )
    )
    symbols = tuple(Symbol(name, kind, value) for name, (kind, value) in sorted(names.items()))
    indices = sorted(draw(st.sets(st.integers(0, len(code) - 1), max_size=len(code))))
    relocations = []
    for index in indices:
        kind = draw(st.sampled_from(RelocationKind))
        name = draw(st.binary(min_size=1, max_size=6)) if kind is RelocationKind.SYMBOL else b""
        relocations.append(Relocation(index, kind, name))
    return ForgeProgram(
        code=code,
        data=draw(st.binary(max_size=40)),
        entry=draw(st.integers(0, len(code) - 1)),
        symbols=symbols,
        relocations=tuple(relocations),
        metadata=draw(st.binary(max_size=20)),
    )


PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(programs())
def test_decode_of_encode_is_the_program(program: ForgeProgram) -> None:
    blob = encode_program(program)
    assert decode_program(blob) == program
    assert decode_program(blob).encoded == blob


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    blob = bytearray(encode_program(draw(programs())))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(blob) - 1, 0)))
        if action == "flip" and blob:
            blob[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set" and blob:
            blob[at] = draw(u8s)
        elif action == "insert":
            blob[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif action == "delete" and blob:
            del blob[at : at + draw(st.integers(1, 4))]
        elif action == "truncate":
            del blob[at:]
    return bytes(blob)


@PROPERTY_SETTINGS
@given(mutated())
def test_mutated_containers_either_round_trip_exactly_or_raise_invalid_program(blob: bytes) -> None:
    try:
        program = decode_program(blob)
    except InvalidProgram:
        return
    assert encode_program(program) == blob  # canonical: encode(decode(b)) == b


@PROPERTY_SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_invalid_program(blob: bytes) -> None:
    try:
        program = decode_program(blob)
    except InvalidProgram:
        return
    assert encode_program(program) == blob


@PROPERTY_SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_after_a_valid_header_raise_only_invalid_program(tail: bytes) -> None:
    blob = HEADER + tail
    try:
        program = decode_program(blob)
    except InvalidProgram:
        return
    assert encode_program(program) == blob


@PROPERTY_SETTINGS
@given(programs(), st.data())
def test_changing_any_single_byte_never_yields_a_different_valid_encoding_of_the_same_program(
    program: ForgeProgram, data: st.DataObject
) -> None:
    blob = bytearray(program.encoded)
    at = data.draw(st.integers(0, len(blob) - 1))
    new = data.draw(u8s)
    assume(new != blob[at])
    blob[at] = new
    try:
        other = decode_program(bytes(blob))
    except InvalidProgram:
        return
    assert other != program
    assert other.encoded == bytes(blob)
