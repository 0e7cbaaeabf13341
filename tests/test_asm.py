"""The assembler and disassembler: syntax, directives, errors with positions, round trips."""

from __future__ import annotations

import dataclasses
import pickle
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.asm import AssemblyError, assemble
from kforge.core import InvalidProgram
from kforge.disasm import disassemble, format_instruction
from kforge.isa import OPCODE_BY_MNEMONIC, OPCODES, Instruction, Opcode
from kforge.program import (
    ForgeProgram,
    Relocation,
    RelocationKind,
    Symbol,
    SymbolKind,
    decode_program,
)

CODE, DATA, SYMBOL = RelocationKind.CODE, RelocationKind.DATA, RelocationKind.SYMBOL
U64_MAX = (1 << 64) - 1


def error_of(text: str, filename: str = "<input>") -> AssemblyError:
    with pytest.raises(AssemblyError) as caught:
        assemble(text, filename)
    return caught.value


# ---------------------------------------------------------------- instructions


def _sample_text(mnemonic: str) -> tuple[str, Instruction]:
    """Text for one instruction of ``mnemonic`` with distinct operands, and what it encodes."""
    info = OPCODE_BY_MNEMONIC[mnemonic]
    fields = {"rd": 0, "rs1": 0, "rs2": 0, "imm": 0}
    texts = []
    for position, operand in enumerate(info.operands):
        value = 10 + position if operand.is_register else 1000 + position
        fields[operand.field] = value
        texts.append(f"r{value}" if operand.is_register else str(value))
    return " ".join([mnemonic, ", ".join(texts)]).strip(), Instruction(info.opcode, **fields)


@pytest.mark.parametrize("mnemonic", sorted(OPCODE_BY_MNEMONIC))
def test_every_mnemonic_assembles_its_operands_into_the_table_fields(mnemonic: str) -> None:
    text, expected = _sample_text(mnemonic)
    assert assemble(text).code == (expected,)
    assert assemble(text.lower()).code == (expected,)
    assert format_instruction(expected) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("add R1, r2, R255", Instruction(Opcode.ADD, 1, 2, 255)),
        ("STORE r4, r5, 8", Instruction(Opcode.STORE, rs1=4, rs2=5, imm=8)),
        ("SEND 0, r1, r2", Instruction(Opcode.SEND, rs1=1, rs2=2, imm=0)),
        ("RECV 2, r3, r4, r5", Instruction(Opcode.RECV, 3, 4, 5, 2)),
        ("POLL 2, r1", Instruction(Opcode.POLL, rd=1, imm=2)),
        ("SEND 99, r1, r2", Instruction(Opcode.SEND, rs1=1, rs2=2, imm=99)),
        ("LI r1, 0x1F", Instruction(Opcode.LI, rd=1, imm=31)),
        ("LI r1, 0XfF", Instruction(Opcode.LI, rd=1, imm=255)),
        ("LI r1, 0b101", Instruction(Opcode.LI, rd=1, imm=5)),
        ("LI r1, 007", Instruction(Opcode.LI, rd=1, imm=7)),
        ("LI r1, -1", Instruction(Opcode.LI, rd=1, imm=U64_MAX)),
        ("LI r1, -0x10", Instruction(Opcode.LI, rd=1, imm=(1 << 64) - 16)),
        ("LI r1, -9223372036854775808", Instruction(Opcode.LI, rd=1, imm=1 << 63)),
        ("LI r1, 18446744073709551615", Instruction(Opcode.LI, rd=1, imm=U64_MAX)),
        ("LI r1, 'A'", Instruction(Opcode.LI, rd=1, imm=65)),
        ("LI r1, '\\n'", Instruction(Opcode.LI, rd=1, imm=10)),
        ("LI r1, '\\''", Instruction(Opcode.LI, rd=1, imm=39)),
        ("LI r1, '\\xff'", Instruction(Opcode.LI, rd=1, imm=255)),
        ("LI r1, ';'  ; a char literal is not a comment", Instruction(Opcode.LI, rd=1, imm=59)),
        ("LI r1, '#'  # neither is this", Instruction(Opcode.LI, rd=1, imm=35)),
        ("\tLI\tr1 ,\t2\r", Instruction(Opcode.LI, rd=1, imm=2)),
    ],
)
def test_operand_forms(text: str, expected: Instruction) -> None:
    program = assemble(text)
    assert program.code == (expected,)
    assert program.relocations == ()


def test_unknown_opcode_via_insn_and_known_opcode_via_insn() -> None:
    program = assemble(".insn 0xee, 1, 2, 3, -1\n.INSN 1, 4, 5, 6, 0")
    assert program.code == (Instruction(0xEE, 1, 2, 3, U64_MAX), Instruction(Opcode.ADD, 4, 5, 6))


def test_comments_blank_lines_and_crlf_are_ignored() -> None:
    text = "; heading\r\n\r\n   # another\r\nNOP ; trailing\r\nHALT#tight\r\n"
    assert assemble(text).code == (Instruction(Opcode.NOP), Instruction(Opcode.HALT))


# ---------------------------------------------------------------- labels and relocations


def test_code_labels_are_instruction_indices_with_code_relocations() -> None:
    program = assemble(
        "start:\n  JMP end\nloop: JNZ r1, loop\n  CALL start\nend:\nlast: HALT\nafter:\n"
    )
    assert [insn.imm for insn in program.code] == [3, 1, 0, 0]
    assert program.relocations == (Relocation(0, CODE), Relocation(1, CODE), Relocation(2, CODE))


def test_a_label_may_name_the_code_length_and_several_labels_may_share_a_line() -> None:
    program = assemble("a: b: NOP\nJMP end\nJMP b\nend:")
    assert [insn.imm for insn in program.code] == [0, 3, 0]


def test_data_labels_are_addresses_with_data_relocations() -> None:
    text = ".data\nfirst: .byte 1, 2\nsecond: .u64 7\n.code\nLI r1, second\nLOAD r2, r1, first"
    program = assemble(text)
    assert [insn.imm for insn in program.code] == [2, 0]
    assert program.relocations == (Relocation(0, DATA), Relocation(1, DATA))


def test_labels_are_case_sensitive_and_allow_dots_and_underscores() -> None:
    program = assemble("a: NOP\nA: NOP\n._x.1: NOP\nJMP A\nJMP ._x.1\nJMP a")
    assert [insn.imm for insn in program.code[3:]] == [1, 2, 0]


def test_imports_become_symbol_relocations_with_a_zero_immediate() -> None:
    program = assemble("CALL helper\n.import helper, other\nLI r1, other\nHALT")
    assert [insn.imm for insn in program.code] == [0, 0, 0]
    assert program.relocations == (
        Relocation(0, SYMBOL, b"helper"),
        Relocation(1, SYMBOL, b"other"),
    )


def test_equ_names_are_constants_without_relocation() -> None:
    program = assemble(".equ SIZE 16\n.equ TWICE, SIZE\n.equ CH 'A'\nLI r1, TWICE\nSEND CH, r1, r2")
    assert [insn.imm for insn in program.code] == [16, 65]
    assert program.relocations == ()


def test_labels_in_insn_immediates_are_relocated() -> None:
    program = assemble("top: .insn 0xee, 0, 0, 0, top")
    assert program.relocations == (Relocation(0, CODE),)


def test_relocations_are_sorted_by_instruction_index_across_sections() -> None:
    text = "JMP x\n.data\nd: .byte 0\n.code\nx: LI r1, d\nCALL ext\n.import ext"
    assert [r.index for r in assemble(text).relocations] == [0, 1, 2]


# ---------------------------------------------------------------- directives


def test_data_directives_lay_out_bytes_in_order() -> None:
    text = r"""
    .data
    .byte 1, -1, 'A', 0xff, -128
    .u64 -1, 0x0102030405060708
    .ascii "a\tb\n\\\"\0\x41\'é"
    .asciz "hi"
    .zero 3
    .align 8
    .align 1
    .code
    HALT
    """
    expected = bytes([1, 0xFF, 65, 0xFF, 0x80]) + struct.pack("<QQ", U64_MAX, 0x0102030405060708)
    expected += b"a\tb\n\\\"\x00A'" + "é".encode() + b"hi\x00" + b"\x00" * 3
    expected += bytes(-len(expected) % 8)
    assert assemble(text).data == expected


def test_u64_and_byte_accept_labels_without_relocation() -> None:
    program = assemble(
        ".data\nhere: .zero 5\nthere: .u64 there, go\n.byte there\n.code\nNOP\ngo: HALT"
    )
    assert program.data[5:] == struct.pack("<QQ", 5, 1) + b"\x05"
    assert program.relocations == ()


def test_sections_switch_freely() -> None:
    program = assemble(".data\n.byte 1\n.code\nNOP\n.DATA\nlabel: .byte 2\n.Code\nLI r1, label")
    assert program.data == b"\x01\x02"
    assert program.code[1].imm == 1


def test_entry_by_label_or_number_and_default_zero() -> None:
    assert assemble("NOP\nHALT").entry == 0
    assert assemble(".entry main\nNOP\nmain: HALT").entry == 1
    assert assemble(".entry 1\nNOP\nHALT").entry == 1


def test_exports_give_symbols_sorted_by_name_bytes_with_section_kinds() -> None:
    text = ".export b, a\n.export B\nb: NOP\na: HALT\n.data\n.byte 0\nB: .byte 1"
    assert assemble(text).symbols == (
        Symbol(b"B", SymbolKind.DATA, 1),
        Symbol(b"a", SymbolKind.CODE, 1),
        Symbol(b"b", SymbolKind.CODE, 0),
    )


def test_symbol_directive_adds_arbitrary_names_and_values() -> None:
    text = (
        '.symbol "we\\x00ird name", data, 99\n.symbol "", code, -1\n.symbol "at", CODE, x\nx: HALT'
    )
    assert assemble(text).symbols == (
        Symbol(b"", SymbolKind.CODE, U64_MAX),
        Symbol(b"at", SymbolKind.CODE, 0),
        Symbol(b"we\x00ird name", SymbolKind.DATA, 99),
    )


def test_reloc_directive_attaches_to_the_next_instruction() -> None:
    text = '.reloc code\nJMP 99\n.reloc data\nADD r1, r2, r3\nlabel:\n.reloc SYMBOL, "odd name"\nLI r1, 5'
    program = assemble(text)
    assert program.relocations == (
        Relocation(0, CODE),
        Relocation(1, DATA),
        Relocation(2, SYMBOL, b"odd name"),
    )
    assert [insn.imm for insn in program.code] == [99, 0, 5]


def test_meta_appends_to_metadata() -> None:
    assert assemble('.meta "ab\\x00"\nHALT\n.meta "c"').metadata == b"ab\x00c"


def test_strings_keep_comment_characters() -> None:
    assert assemble('.data\n.ascii "a;b#c" ; comment\n.code\nHALT').data == b"a;b#c"


# ---------------------------------------------------------------- errors


# fmt: off
ERROR_CASES = [
    ("ADD r1, r2, r256", 1, 13, "expected a register r0..r255, found 'r256'"),
    ("ADD r1, r2, 5", 1, 13, "expected a register r0..r255, found '5'"),
    ("NOP\nFOO r1", 2, 1, "expected an instruction mnemonic, found 'FOO'"),
    ("ADD r1, r2", 1, 11, "ADD expects 3 operands (rd, rs1, rs2), found 2"),
    ("JMP", 1, 4, "JMP expects 1 operand (target), found 0"),
    ("RET r1", 1, 5, "RET expects no operands, found 1"),
    ("NOP\nLI r1, 0x1_0", 2, 8, "expected an integer (decimal, 0x hex or 0b binary), found '0x1_0'"),
    ("LI r1, 1.5", 1, 8, "expected an integer (decimal, 0x hex or 0b binary), found '1.5'"),
    ("LI r1, 18446744073709551616", 1, 8, "expected a 64-bit integer in -9223372036854775808..18446744073709551615, found '18446744073709551616'"),
    ("LI r1, -9223372036854775809", 1, 8, "expected a 64-bit integer in"),
    ("LI r1, " + "9" * 5000, 1, 8, "expected a 64-bit integer in"),
    ("LI r1, r2", 1, 8, "expected an integer, label or .equ name, found 'r2'"),
    ('LI r1, "s"', 1, 8, "expected an integer, label or .equ name, found '\"s\"'"),
    ("LI r1, 'ab'", 1, 8, "expected one byte in a character literal, found 2"),
    ("LI r1, 'é'", 1, 8, "expected one byte in a character literal, found 2"),
    ("LI r1, ''", 1, 8, "expected one byte in a character literal, found 0"),
    ("JMP nowhere", 1, 5, "expected a defined label, .equ or import, found undefined 'nowhere'"),
    ("x: NOP\n  x: NOP", 2, 3, "expected a name not yet used, found 'x' defined on line 1"),
    ("add: NOP", 1, 1, "expected a label name, found the mnemonic 'add'"),
    ("R5: NOP", 1, 1, "expected a label name, found the register 'R5'"),
    (".DATA: NOP", 1, 1, "expected a label name, found the directive '.DATA'"),
    (".equ Li 1", 1, 6, "expected an .equ name, found the mnemonic 'Li'"),
    (".import 5", 1, 9, "expected an import name, found the token '5'"),
    (".import " + "x" * 65536, 1, 9, "expected a name of at most 65535 bytes, found 65536"),
    (".import r0", 1, 9, "expected an import name, found the register 'r0'"),
    (".import x\n.import x\nNOP", 2, 9, "expected a name not yet used, found 'x' defined on line 1"),
    ("x: NOP\n.equ x 1", 2, 6, "expected a name not yet used, found 'x' defined on line 1"),
    ("LI r1, K\n.equ K 3", 1, 8, "expected .equ 'K' defined before use, found it on line 2"),
    (".equ K later\nlater: NOP", 1, 8, "expected a number or an .equ defined above, found 'later'"),
    (".equ K", 1, 7, ".equ expects a name and a value, found 1"),
    ('.data\n.ascii "a\\q"', 2, 10, "expected an escape \\n \\t \\\\ \\\" \\' \\0 or \\xHH, found '\\\\q'"),
    ('.data\n.ascii "\\x4g"', 2, 9, "expected two hex digits after \\x, found '4g'"),
    ('.data\n.ascii "abc', 2, 8, 'expected a closing " to end the string, found end of line'),
    ("LI r1, 'a", 1, 8, "expected a closing ' to end the character literal, found end of line"),
    ("LI r1, '\ud800'", 1, 9, "expected UTF-8 text, found '\\ud800'"),
    ("LI r1, @", 1, 8, "expected a name, number, string or ',', found '@'"),
    ("LI r1, -", 1, 8, "expected a name, number, string or ',', found '-'"),
    ("5 NOP", 1, 1, "expected a label, mnemonic or directive, found '5'"),
    ("NOP\n.bogus 1", 2, 1, "expected a directive (.code, .data, .entry"),
    (".byte 1\nHALT", 1, 1, "expected .byte in the .data section, found it in .code"),
    (".data\n.insn 1, 0, 0, 0, 0", 2, 1, "expected .insn in the .code section, found it in .data"),
    (".data\n.reloc code", 2, 1, "expected .reloc in the .code section, found it in .data"),
    (".data\nHALT", 2, 1, "expected HALT in the .code section, found it in .data"),
    (".data\n.align 3", 2, 8, "expected a power of two, found 3"),
    (".data\n.align '\\0'", 2, 8, "expected an alignment in 1..18446744073709551615, found \"'\\\\0'\" = 0"),
    (".data\n.align 0", 2, 8, "expected an alignment in 1..18446744073709551615, found '0'"),
    (".data\n.byte 1\n.align 0x100000000", 3, 8, "expected at most 16777216 data bytes"),
    (".data\n.zero -1", 2, 7, "expected a byte count in 0..18446744073709551615, found '-1'"),
    (".data\n.byte 256", 2, 7, "expected a byte in -128..255, found '256' = 256"),
    (".data\n.byte -129", 2, 7, "expected a byte in -128..255, found '-129'"),
    (".data\n.byte", 2, 6, ".byte expects one or more values, found 0"),
    (".data\n.zero 300\nx: .byte x\n.code\nHALT", 3, 10, "expected a number or label in -128..255, found 'x' = 300"),
    (".import e\n.data\n.u64 e\n.code\nHALT", 3, 6, "expected a number or label, found import 'e'"),
    (".data\n.ascii 5", 2, 8, "expected a string \"...\", found '5'"),
    (".insn 0x01, 1, 2, 3, 4", 1, 1, "expected imm = 0 (ADD does not use it), found 4"),
    (".insn 0x30, 1, 0, 0, 4", 1, 1, "expected rd = 0 (JMP does not use it), found 1"),
    (".insn 256, 0, 0, 0, 0", 1, 7, "expected a byte in 0..255, found '256'"),
    (".insn 1, 2, 3", 1, 14, ".insn expects 5 operands (opcode, rd, rs1, rs2, imm), found 3"),
    (".insn x, 0, 0, 0, 0\nx: HALT", 1, 7, "expected a number or an .equ defined above, found 'x'"),
    ("ADD r1,, r2", 1, 8, "expected an operand, found ','"),
    ("ADD r1, r2,", 1, 12, "expected an operand, found end of line"),
    ("ADD r1 r2, r3", 1, 8, "expected ',' or end of line, found 'r2'"),
    ("x: y NOP", 1, 4, "expected an instruction mnemonic, found 'y'"),
    ("ADD: r1", 1, 1, "expected a label name, found the mnemonic 'ADD'"),
    ("NOP\n.entry d\n.data\nd: .byte 0", 2, 8, "expected a code label, found 'd'"),
    (".entry 5\nHALT", 1, 8, "expected an instruction index in 0..0, found '5' = 5"),
    (".entry 0\n.entry 0\nHALT", 2, 1, "expected one .entry, found a second (first on line 1)"),
    (".export missing\nHALT", 1, 9, "expected a label defined in this file, found undefined name 'missing'"),
    (".import e\n.export e\nHALT", 2, 9, "expected a label defined in this file, found import 'e'"),
    (".export 5\nHALT", 1, 9, "expected a label name, found '5'"),
    ("x: HALT\n.export x\n.export x", 3, 9, "expected each symbol name once, found 'x' again"),
    ('x: HALT\n.export x\n.symbol "x", data, 0', 3, 1, "expected each symbol name once, found 'x' again"),
    ("HALT\n.reloc code", 2, 1, "expected an instruction after .reloc, found end of file"),
    (".reloc code\n.reloc data\nNOP", 2, 1, "expected an instruction after the .reloc on line 1, found .reloc"),
    (".reloc code\nJMP there\nthere:", 2, 5, "expected a plain number after the .reloc on line 1, found name 'there'"),
    (".reloc symbol\nNOP", 1, 14, '.reloc expects a kind (code, data, symbol) and for symbol a "name", found 1'),
    ('.reloc code, "x"\nNOP', 1, 14, '.reloc expects a kind (code, data, symbol) and for symbol a "name", found 2'),
    ('.reloc symbol, ""\nNOP', 1, 16, "expected a name of 1..65535 bytes, found 0"),
    (".reloc bogus\nNOP", 1, 8, "expected one of code, data, symbol, found 'bogus'"),
    ('.symbol "s", text, 0\nNOP', 1, 14, "expected one of code, data, found 'text'"),
    ('.symbol "s", code, imp\n.import imp\nNOP', 1, 20, "expected a symbol value, found import 'imp'"),
    (".code\n.data 1\nNOP", 2, 7, ".data expects no operands, found 1"),
    ("", 1, 1, "expected at least one instruction, found none"),
    ("; only a comment\n.data\n.byte 1", 1, 1, "expected at least one instruction, found none"),
]
# fmt: on


@pytest.mark.parametrize(("text", "line", "column", "message"), ERROR_CASES)
def test_errors_name_the_line_column_and_what_was_expected(
    text: str, line: int, column: int, message: str
) -> None:
    error = error_of(text)
    assert (error.line, error.column) == (line, column), str(error)
    assert error.message.startswith(message), str(error)


def test_error_text_is_file_line_column_message() -> None:
    error = error_of("NOP\nADD r1, r2, r256\n", "prog.fasm")
    assert str(error) == "prog.fasm:2:13: expected a register r0..r255, found 'r256'"
    assert error.filename == "prog.fasm"
    assert isinstance(error, InvalidProgram)
    assert error.reason == str(error)


def test_assembly_errors_survive_pickling() -> None:
    error = error_of("FOO")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.line == 1 and copy.column == 1


def test_big_symbol_names_are_refused_with_a_position() -> None:
    error = error_of(f'.symbol "{"x" * 65536}", code, 0\nNOP')
    assert (error.line, error.column) == (1, 9)
    assert "expected a name of at most 65535 bytes, found 65536" in error.message


# ---------------------------------------------------------------- disassembly

SAMPLE = r"""
; every directive at least once
.entry main
.export main, message
.import write
.equ NEWLINE '\n'
.symbol "odd\x01name", data, 1234
.meta "built-by=test"
start:  LI r1, NEWLINE
main:   LI r2, message
        LOAD r3, r2, 8
        STOREW r3, r2, -8
        SEND 0, r2, r3
        RECV 2, r4, r5, r6
        POLL 2, r7
        CALL write
        JLT r1, r2, main
        .insn 0xee, 1, 2, 3, 4
        .reloc code
        JMP 1000
        HALT
.data
message: .asciz "hello; world"
        .align 8
table:  .u64 message, -2
        .byte 1, 2, 3
        .zero 4
"""


def test_sample_round_trips_through_the_disassembler() -> None:
    program = assemble(SAMPLE)
    text = disassemble(program)
    assert assemble(text).encoded == program.encoded
    assert disassemble(assemble(text)) == text


def test_disassembly_is_readable() -> None:
    program = assemble(
        ".entry main\n.export main\n.import put\nJMP main\nmain: LI r1, msg\nCALL put\n"
        "LI r2, -1\n.insn 0xee, 1, 2, 3, 4\nJMP done\ndone: HALT\n"
        '.data\n.byte 0\nmsg: .ascii "Hello\\n"\n'
    )
    assert disassemble(program) == (
        "; disassembled by kforge\n"
        ".entry 1\n"
        ".import put\n"
        ".export main\n"
        "\n"
        ".code\n"
        "    JMP main                        ; 0\n"
        "main:\n"
        "    LI r1, D1                       ; 1\n"
        "    CALL put                        ; 2\n"
        "    LI r2, -1                       ; 3\n"
        "    .insn 0xee, 1, 2, 3, 4          ; 4\n"
        "    JMP L6                          ; 5\n"
        "L6:\n"
        "    HALT                            ; 6\n"
        "\n"
        ".data\n"
        "    .byte 0x00\n"
        "D1:\n"
        '    .ascii "Hello"\n'
        "    .byte 0x0a\n"
    )


def test_extensions_carry_what_labels_cannot() -> None:
    program = ForgeProgram(
        code=(
            Instruction(Opcode.JMP, imm=50),
            Instruction(Opcode.LI, 1, imm=3),
            Instruction(Opcode.ADD),
        ),
        data=b"",
        symbols=(Symbol(b"far", SymbolKind.CODE, 9), Symbol(b"r1", SymbolKind.DATA, 0)),
        relocations=(
            Relocation(0, CODE),
            Relocation(1, SYMBOL, b"ext"),
            Relocation(2, SYMBOL, b"a b"),
        ),
        metadata=b"\x00\xff",
    )
    text = disassemble(program)
    for line in ('.symbol "far", code, 9', '.symbol "r1", data, 0', '.meta "\\x00\\xff"'):
        assert line in text
    assert "    .reloc code\n    JMP 50" in text
    assert '    .reloc symbol, "ext"\n    LI r1, 3' in text
    assert '    .reloc symbol, "a b"\n    ADD r0, r0, r0' in text
    assert assemble(text).encoded == program.encoded


def test_generated_labels_avoid_symbol_and_import_names() -> None:
    program = ForgeProgram(
        code=(Instruction(Opcode.JMP, imm=1), Instruction(Opcode.CALL), Instruction(Opcode.HALT)),
        symbols=(Symbol(b"L2", SymbolKind.CODE, 2),),
        relocations=(Relocation(0, CODE), Relocation(1, SYMBOL, b"L1")),
    )
    text = disassemble(program)
    assert "JMP L_1" in text and "CALL L1" in text and "L2:" in text
    assert assemble(text).encoded == program.encoded


def test_labels_at_the_end_of_code_and_data() -> None:
    program = ForgeProgram(
        code=(Instruction(Opcode.JMP, imm=2), Instruction(Opcode.LI, 1, imm=2)),
        data=b"ab",
        relocations=(Relocation(0, CODE), Relocation(1, DATA)),
    )
    text = disassemble(program)
    assert text.endswith(
        "    LI r1, D2                       ; 1\nL2:\n\n.data\n    .byte 0x61, 0x62\nD2:\n"
    )
    assert assemble(text).encoded == program.encoded


def test_exported_labels_name_relocated_targets() -> None:
    program = assemble(".export loop\nloop: JMP loop")
    assert "loop:\n    JMP loop" in disassemble(program)


@pytest.mark.parametrize(
    ("insn", "labels", "text"),
    [
        (Instruction(Opcode.ADD, 1, 2, 3), None, "ADD r1, r2, r3"),
        (Instruction(Opcode.JMP, imm=7), None, "JMP 7"),
        (Instruction(Opcode.JMP, imm=7), {7: "loop"}, "JMP loop"),
        (Instruction(Opcode.JZ, rs1=4, imm=8), {7: "loop"}, "JZ r4, 8"),
        (Instruction(Opcode.LI, 1, imm=7), {7: "loop"}, "LI r1, 7"),
        (Instruction(Opcode.LI, 1, imm=U64_MAX), None, "LI r1, -1"),
        (Instruction(Opcode.SEND, rs1=1, rs2=2), None, "SEND 0, r1, r2"),
        (Instruction(Opcode.RECV, 3, 4, 5, 2), None, "RECV 2, r3, r4, r5"),
        (Instruction(Opcode.FAULT, imm=U64_MAX), None, "FAULT -1"),
        (Instruction(Opcode.RET), None, "RET"),
        (Instruction(0xEE, 1, 2, 3, 4), None, ".insn 0xee, 1, 2, 3, 4"),
        (Instruction(0x00), None, ".insn 0x00, 0, 0, 0, 0"),
    ],
)
def test_format_instruction(insn: Instruction, labels: dict[int, str] | None, text: str) -> None:
    assert format_instruction(insn, labels) == text


# ---------------------------------------------------------------- properties

UNKNOWN_OPCODES = [opcode for opcode in range(256) if opcode not in OPCODES]
BYTES = st.integers(0, 255)
IMMEDIATES = st.one_of(
    st.integers(0, 40), st.integers(0, U64_MAX), st.sampled_from([1 << 63, U64_MAX])
)
LABEL_LIKE = st.from_regex(r"[A-Za-z_.][A-Za-z0-9_.]{0,5}", fullmatch=True).map(str.encode)
TRICKY = st.sampled_from(
    [b"L0", b"L1", b"L2", b"L_1", b"D0", b"D1", b"ADD", b"r1", b".data", b"code", b"x"]
)
NAMES = st.one_of(st.binary(min_size=1, max_size=10), LABEL_LIKE, TRICKY)


@st.composite
def instructions(draw: st.DrawFn) -> Instruction:
    if draw(st.booleans()):
        info = OPCODES[draw(st.sampled_from(sorted(OPCODES)))]
        values = {name: draw(IMMEDIATES if name == "imm" else BYTES) for name in info.fields}
        return Instruction(info.opcode, **values)
    opcode = draw(st.sampled_from(UNKNOWN_OPCODES))
    return Instruction(opcode, draw(BYTES), draw(BYTES), draw(BYTES), draw(IMMEDIATES))


@st.composite
def programs(draw: st.DrawFn) -> ForgeProgram:
    code = draw(st.lists(instructions(), min_size=1, max_size=12))
    data = draw(st.binary(max_size=40))
    symbol_values = st.one_of(st.integers(0, 45), st.integers(0, U64_MAX))
    named = draw(
        st.dictionaries(
            st.one_of(NAMES, st.just(b"")),
            st.tuples(st.sampled_from(SymbolKind), symbol_values),
            max_size=6,
        )
    )
    symbols = tuple(Symbol(name, kind, value) for name, (kind, value) in sorted(named.items()))
    relocations = []
    for index in sorted(draw(st.sets(st.integers(0, len(code) - 1)))):
        kind = draw(st.sampled_from(RelocationKind))
        relocations.append(Relocation(index, kind, draw(NAMES) if kind is SYMBOL else b""))
        if kind is SYMBOL and draw(st.booleans()):  # the common case: an import's imm is 0
            code[index] = dataclasses.replace(code[index], imm=0)
    return ForgeProgram(
        code=tuple(code),
        data=data,
        entry=draw(st.integers(0, len(code) - 1)),
        symbols=symbols,
        relocations=tuple(relocations),
        metadata=draw(st.binary(max_size=60)),
    )


@settings(max_examples=400, deadline=None)
@given(programs())
def test_every_valid_program_survives_disassembly_and_reassembly(program: ForgeProgram) -> None:
    text = disassemble(program)
    assert assemble(text).encoded == program.encoded
    assert decode_program(program.encoded) == program


def _assert_error_points_into_text(error: AssemblyError, text: str) -> None:
    lines = text.split("\n")
    assert 1 <= error.line <= len(lines)
    assert 1 <= error.column <= len(lines[error.line - 1]) + 1
    assert (
        str(error).startswith(f"<input>:{error.line}:{error.column}: expected")
        or " expects " in error.message
    )


def _assemble_or_explain(text: str) -> None:
    try:
        program = assemble(text)
    except AssemblyError as error:
        _assert_error_points_into_text(error, text)
    else:
        assert decode_program(program.encoded) == program


# fmt: off
FRAGMENTS = st.sampled_from([
    *" \n\t\r,:;#'\"\\-é", "\\x4", "0x", "0b", "7", "300", "r1", "r256", "ADD", "li", "JMP",
    "SEND", "x", "y:", "code", "symbol", "HALT", ".data", ".code", ".byte", ".u64", ".ascii",
    ".asciz", ".zero", ".align", ".insn", ".entry", ".export", ".import", ".equ", ".symbol",
    ".reloc", ".meta",
])
# fmt: on


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_random_text_never_raises_anything_but_assembly_error(text: str) -> None:
    _assemble_or_explain(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(FRAGMENTS, max_size=30).map("".join))
def test_token_soup_never_raises_anything_but_assembly_error(text: str) -> None:
    _assemble_or_explain(text)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_valid_programs_never_raise_anything_but_assembly_error(
    data: st.DataObject,
) -> None:
    base = data.draw(st.sampled_from([SAMPLE, disassemble(assemble(SAMPLE))]))
    text = base
    for _ in range(data.draw(st.integers(1, 4))):
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 8)))
        insert = data.draw(st.one_of(FRAGMENTS, st.text(max_size=3)))
        text = text[:start] + insert + text[end:]
    _assemble_or_explain(text)
