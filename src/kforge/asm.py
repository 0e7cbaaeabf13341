r"""Forge assembly text (``.fasm``, spec §7): the assembler and the disassembler.

Both are driven by the opcode table of :mod:`kforge.isa`; nothing here restates a
mnemonic, an operand shape or an encoding.  (One module of this length because the
syntax below, the tokenizer and the directives form one grammar, read together.)

Syntax.  One instruction or directive a line, optionally after labels (``name:``).
``;`` and ``#`` start a comment outside string and character literals.  Mnemonics,
registers (``r0``..``r255``) and directives are case-insensitive; labels
(``[A-Za-z_.][A-Za-z0-9_.]*``) are case-sensitive and may not be a mnemonic, register
or directive name.  A code label is the index of the next instruction, a data label the
current data length; labels may be used before they are defined.  Integers: decimal,
``0x`` hex, ``0b`` binary, negative (two's complement; -2^63..2^64-1), ``'c'`` (exactly
one byte after escapes), labels, ``.equ`` names (defined above their use) and
``.import`` names.  Escapes: ``\n \t \\ \" \' \0 \xHH``; any other character stands for
its UTF-8 bytes.  An immediate operand (value, target or channel) that names a code
label gets a CODE relocation, a data label a DATA relocation, an import a SYMBOL
relocation with imm 0; numbers and ``.equ`` names get none.

Directives.  Anywhere: ``.code``, ``.data``, ``.entry label|index``, ``.export name``,
``.equ NAME[,] value``, ``.import NAME``.  Data only: ``.byte``, ``.u64`` (labels give
their value, unrelocated), ``.ascii``, ``.asciz``, ``.zero N``, ``.align N``.  Code
only: ``.insn OPCODE, RD, RS1, RS2, IMM`` (a known opcode's unused fields must be 0).

Extensions, so that every valid container disassembles to text that assembles back to
the same bytes:

- ``.symbol "name", code|data, VALUE`` adds a symbol whose name is not a label or whose
  value is at no label.
- ``.reloc code|data|symbol[, "name"]`` gives the next instruction a relocation; its
  immediate must be a plain number (or no operand at all, as for ``ADD``).
- ``.meta "bytes"`` appends to the metadata section; it may appear several times.

The disassembler writes one upper-case instruction a line with its index as a comment,
unknown opcodes as ``.insn``, targets of relocations as labels (an exported name there,
else ``L<index>`` / ``D<address>`` with a prefix no symbol or import uses), imports as
names, data as ``.byte`` rows and ``.ascii`` runs, and anything else through the
extensions.

Further decisions: several labels may precede one statement; ``.equ``, ``.zero``,
``.align`` and the first four ``.insn`` operands need values known on their line (no
labels); ``.import`` and ``.export`` take one or more names.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, NoReturn, TypeVar

from kforge.core import InvalidProgram, show_name
from kforge.isa import OPCODE_BY_MNEMONIC, REGISTER_COUNT, WORD_MASK, Instruction, OpInfo
from kforge.limits import MAX_CODE_LENGTH, MAX_DATA_BYTES, MAX_METADATA_BYTES, check_source
from kforge.program import ForgeProgram, Relocation, RelocationKind, Symbol, SymbolKind

__all__ = ["AssemblyError", "assemble", "assemble_with_labels", "is_label_name"]

_T = TypeVar("_T")

_MAX_NAME: Final = 0xFFFF
_U64_RANGE: Final = (-(1 << 63), WORD_MASK)
_BYTE_RANGE: Final = (-128, 0xFF)
_FIELD_RANGE: Final = (0, 0xFF)
_SHOWN_CHARS: Final = 64  # of a token quoted in an error message
_LABEL: Final = re.compile(r"[A-Za-z_.][A-Za-z0-9_.]*")
_REGISTER: Final = re.compile(r"[rR](0|[1-9][0-9]{0,2})")
_WORD: Final = re.compile(r"-?[A-Za-z0-9_.]+")
_INTEGER: Final = re.compile(r"(-?)(?:0[xX]([0-9a-fA-F]+)|0[bB]([01]+)|([0-9]+))")
_ESCAPES: Final = {"n": b"\n", "t": b"\t", "\\": b"\\", '"': b'"', "'": b"'", "0": b"\0"}
_SYMBOL_KINDS: Final = {kind.name.lower(): kind for kind in SymbolKind}
_RELOCATION_KINDS: Final = {kind.name.lower(): kind for kind in RelocationKind}
_RELOCATION_OF_LABEL: Final = {
    SymbolKind.CODE: RelocationKind.CODE,
    SymbolKind.DATA: RelocationKind.DATA,
}
_DATA_ONLY: Final = frozenset({".byte", ".u64", ".ascii", ".asciz", ".zero", ".align"})
_CODE_ONLY: Final = frozenset({".insn", ".reloc"})


class AssemblyError(InvalidProgram):
    """Assembly text that cannot become a program; ``str()`` is ``FILE:LINE:COL: message``."""

    def __init__(self, filename: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{filename}:{line}:{column}: {message}")
        self.filename = filename
        self.line = line
        self.column = column
        self.message = message

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}: {self.message}"

    def __reduce__(self) -> tuple[type[AssemblyError], tuple[str, int, int, str]]:
        return (AssemblyError, (self.filename, self.line, self.column, self.message))


class _Problem(Exception):
    """An error at a place in the text; ``assemble`` adds the file name."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(message)
        self.line, self.column, self.message = line, column, message


class _Kind(Enum):
    NAME = "name"
    NUMBER = "number"
    CHAR = "character"
    STRING = "string"
    COMMA = "comma"
    COLON = "colon"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str  # exactly as written, quotes included
    line: int
    column: int
    data: bytes = b""  # the decoded bytes of a string or character literal

    @property
    def end(self) -> int:
        return self.column + len(self.text)


def _shown(text: str) -> str:
    """``text`` quoted for an error message, cut short so a message stays one short line."""
    return repr(text) if len(text) <= _SHOWN_CHARS else repr(text[:_SHOWN_CHARS]) + "..."


def _fail(token: _Token, message: str) -> NoReturn:
    raise _Problem(token.line, token.column, message)


# ---------------------------------------------------------------- lexing


def _tokenize(line: str, number: int) -> list[_Token]:
    """The tokens of one line, up to a comment."""
    tokens: list[_Token] = []
    at = 0
    while at < len(line) and line[at] not in ";#":
        char = line[at]
        if char.isspace():
            at += 1
            continue
        if char in ",:":
            kind = _Kind.COMMA if char == "," else _Kind.COLON
            token = _Token(kind, char, number, at + 1)
        elif char in "\"'":
            token = _lex_literal(line, number, at)
        else:
            token = _lex_word(line, number, at)
        tokens.append(token)
        at += len(token.text)
    return tokens


def _lex_word(line: str, number: int, at: int) -> _Token:
    match = _WORD.match(line, at)
    if match is None:
        found = line[at]
        raise _Problem(
            number, at + 1, f"expected a name, number, string or ',', found {_shown(found)}"
        )
    text = match.group()
    kind = _Kind.NUMBER if text[0] == "-" or text[0].isdigit() else _Kind.NAME
    return _Token(kind, text, number, at + 1)


def _lex_literal(line: str, number: int, start: int) -> _Token:
    """A ``"string"`` or ``'c'`` literal starting at ``start``, escapes decoded."""
    quote = line[start]
    value = bytearray()
    at = start + 1
    while at < len(line) and line[at] != quote:
        if line[at] == "\\":
            decoded, at = _lex_escape(line, number, at)
            value += decoded
        else:
            value += _utf8(line[at], number, at)
            at += 1
    if at == len(line):
        what = "string" if quote == '"' else "character literal"
        message = f"expected a closing {quote} to end the {what}, found end of line"
        raise _Problem(number, start + 1, message)
    kind = _Kind.STRING if quote == '"' else _Kind.CHAR
    return _Token(kind, line[start : at + 1], number, start + 1, bytes(value))


def _lex_escape(line: str, number: int, at: int) -> tuple[bytes, int]:
    """Decode the escape at ``line[at] == '\\'``; returns its bytes and the next position."""
    code = line[at + 1 : at + 2]
    if code in _ESCAPES:
        return _ESCAPES[code], at + 2
    if code == "x":
        digits = line[at + 2 : at + 4]
        if len(digits) == 2 and all(digit in string.hexdigits for digit in digits):
            return bytes([int(digits, 16)]), at + 4
        raise _Problem(number, at + 1, f"expected two hex digits after \\x, found {_shown(digits)}")
    found = line[at : at + 2]
    raise _Problem(
        number,
        at + 1,
        f"expected an escape \\n \\t \\\\ \\\" \\' \\0 or \\xHH, found {_shown(found)}",
    )


def _utf8(char: str, number: int, at: int) -> bytes:
    try:
        return char.encode("utf-8")
    except UnicodeEncodeError:
        raise _Problem(number, at + 1, f"expected UTF-8 text, found {char!r}") from None


# ---------------------------------------------------------------- operands


def _register(text: str) -> int | None:
    """The register number ``text`` names (``r0``..``r255``, any case), else ``None``."""
    match = _REGISTER.fullmatch(text)
    number = int(match.group(1)) if match else REGISTER_COUNT
    return number if number < REGISTER_COUNT else None


def _reserved_word(name: str) -> str | None:
    """What reserved word ``name`` is (mnemonic, directive, register), if any."""
    if name.upper() in OPCODE_BY_MNEMONIC:
        return "mnemonic"
    if name.lower() in _DIRECTIVES:
        return "directive"
    return "register" if _register(name) is not None else None


def is_label_name(name: str) -> bool:
    return _LABEL.fullmatch(name) is not None and _reserved_word(name) is None


def _parse_integer(token: _Token) -> int:
    """The (unbounded) value of a number token."""
    match = _INTEGER.fullmatch(token.text)
    if match is None:
        _fail(
            token, f"expected an integer (decimal, 0x hex or 0b binary), found {_shown(token.text)}"
        )
    sign, hexadecimal, binary, decimal = match.groups()
    if hexadecimal or binary:
        magnitude = int(hexadecimal, 16) if hexadecimal else int(binary, 2)
    else:  # int() refuses very long decimal strings; those are out of range anyway
        digits = decimal.lstrip("0") or "0"
        magnitude = int(digits) if len(digits) <= 40 else 1 << 200
    return -magnitude if sign else magnitude


def _check_range(value: int, bounds: tuple[int, int], token: _Token, what: str) -> int:
    low, high = bounds
    if not low <= value <= high:
        # A value from a long literal has more digits than int -> str converts.
        shown = f" = {value}" if value.bit_length() <= 128 else ""
        _fail(token, f"expected {what} in {low}..{high}, found {_shown(token.text)}{shown}")
    return value


def _register_operand(token: _Token) -> int:
    number = _register(token.text) if token.kind is _Kind.NAME else None
    if number is None:
        _fail(token, f"expected a register r0..r{REGISTER_COUNT - 1}, found {_shown(token.text)}")
    return number


def _string_operand(token: _Token) -> bytes:
    if token.kind is not _Kind.STRING:
        _fail(token, f'expected a string "...", found {_shown(token.text)}')
    return token.data


def _keyword(token: _Token, choices: Mapping[str, _T]) -> _T:
    choice = choices.get(token.text.lower()) if token.kind is _Kind.NAME else None
    if choice is None:
        _fail(token, f"expected one of {', '.join(choices)}, found {_shown(token.text)}")
    return choice


def _split_operands(head: _Token, tokens: list[_Token]) -> list[_Token]:
    """The comma-separated operands after ``head``: exactly one token each."""
    operands: list[_Token] = []
    for position, token in enumerate(tokens):
        wants_operand = position % 2 == 0
        if wants_operand and token.kind in (_Kind.COMMA, _Kind.COLON):
            _fail(token, f"expected an operand, found {_shown(token.text)}")
        if not wants_operand and token.kind is not _Kind.COMMA:
            _fail(token, f"expected ',' or end of line, found {_shown(token.text)}")
        if wants_operand:
            operands.append(token)
    if tokens and tokens[-1].kind is _Kind.COMMA:
        raise _Problem(head.line, tokens[-1].end, "expected an operand, found end of line")
    return operands


def _operands(
    head: _Token, rest: list[_Token], low: int, high: int | None, shape: str
) -> list[_Token]:
    """The operands in ``rest`` if there are ``low``..``high`` of them, else an error."""
    operands = _split_operands(head, rest)
    count = len(operands)
    if count >= low and (high is None or count <= high):
        return operands
    column = operands[high].column if high is not None and count > high else None
    if column is None:
        column = operands[-1].end if operands else head.end
    raise _Problem(head.line, column, f"{head.text} expects {shape}, found {count}")


def _instruction_shape(info: OpInfo) -> str:
    names = ", ".join(operand.value for operand in info.operands)
    count = len(info.operands)
    return "no operands" if not count else f"{count} operand{'s' * (count > 1)} ({names})"


# ---------------------------------------------------------------- assembling


@dataclass(frozen=True, slots=True)
class _Expr:
    """An operand's value: a number known now, or (``number is None``) a name for later."""

    token: _Token
    number: int | None


@dataclass(frozen=True, slots=True)
class _Label:
    kind: SymbolKind
    value: int
    line: int


@dataclass(frozen=True, slots=True)
class _PendingInsn:
    head: _Token
    opcode: int
    rd: int
    rs1: int
    rs2: int
    imm: _Expr
    reloc: tuple[RelocationKind, bytes] | None


@dataclass
class _Assembler:
    """First pass reads lines and places labels; ``finish`` resolves names and builds."""

    section: str = ".code"
    code: list[_PendingInsn] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)
    data_fills: list[tuple[int, int, _Expr]] = field(default_factory=list)
    labels: dict[str, _Label] = field(default_factory=dict)
    equs: dict[str, tuple[int, int]] = field(default_factory=dict)
    imports: dict[str, int] = field(default_factory=dict)
    exports: list[_Token] = field(default_factory=list)
    symbols: list[tuple[_Token, bytes, SymbolKind, _Expr]] = field(default_factory=list)
    pending_reloc: tuple[_Token, RelocationKind, bytes] | None = None
    entry: _Expr | None = None
    metadata: bytearray = field(default_factory=bytearray)

    def feed_line(self, number: int, line: str) -> None:
        tokens = _tokenize(line, number)
        # Performance note: labels are consumed by index, never by slicing the token
        # list, so a line of many labels costs time linear in its length.
        at = 0
        while (
            at + 1 < len(tokens)
            and tokens[at].kind is _Kind.NAME
            and tokens[at + 1].kind is _Kind.COLON
        ):
            self._define_label(tokens[at])
            at += 2
        if at < len(tokens):
            self._statement(tokens[at], tokens[at + 1 :])

    def _statement(self, head: _Token, rest: list[_Token]) -> None:
        if head.kind is not _Kind.NAME:
            _fail(head, f"expected a label, mnemonic or directive, found {_shown(head.text)}")
        if not head.text.startswith("."):
            self._instruction(head, rest)
            return
        handler = _DIRECTIVES.get(head.text.lower())
        if handler is None:
            _fail(
                head, f"expected a directive ({', '.join(_DIRECTIVES)}), found {_shown(head.text)}"
            )
        needed = ".data" if head.text.lower() in _DATA_ONLY else ".code"
        if head.text.lower() in _DATA_ONLY | _CODE_ONLY and self.section != needed:
            _fail(head, f"expected {head.text} in the {needed} section, found it in {self.section}")
        handler(self, head, rest)

    def _instruction(self, head: _Token, rest: list[_Token]) -> None:
        info = OPCODE_BY_MNEMONIC.get(head.text.upper())
        if info is None:
            _fail(head, f"expected an instruction mnemonic, found {_shown(head.text)}")
        if self.section != ".code":
            _fail(head, f"expected {head.text} in the .code section, found it in {self.section}")
        count = len(info.operands)
        operands = _operands(head, rest, count, count, _instruction_shape(info))
        registers = {"rd": 0, "rs1": 0, "rs2": 0}
        imm = _Expr(head, 0)
        for operand, token in zip(info.operands, operands, strict=True):
            if operand.is_register:
                registers[operand.field] = _register_operand(token)
            else:
                imm = self._value(token, _U64_RANGE, "a 64-bit integer")
        self._emit(head, info.opcode, registers["rd"], registers["rs1"], registers["rs2"], imm)

    def _emit(self, head: _Token, opcode: int, rd: int, rs1: int, rs2: int, imm: _Expr) -> None:
        reloc = None
        if self.pending_reloc is not None:
            directive, kind, name = self.pending_reloc
            if imm.number is None:
                _fail(
                    imm.token,
                    f"expected a plain number after the .reloc on line {directive.line}, "
                    f"found name {_shown(imm.token.text)}",
                )
            reloc, self.pending_reloc = (kind, name), None
        if len(self.code) >= MAX_CODE_LENGTH:
            _fail(head, f"expected at most {MAX_CODE_LENGTH} instructions, found more")
        self.code.append(_PendingInsn(head, opcode, rd, rs1, rs2, imm, reloc))

    def _value(self, token: _Token, bounds: tuple[int, int], what: str) -> _Expr:
        """A number, character or ``.equ`` name now (range-checked), or a name for later."""
        if token.kind is _Kind.NUMBER:
            return _Expr(token, _check_range(_parse_integer(token), bounds, token, what))
        if token.kind is _Kind.CHAR:
            if len(token.data) != 1:
                _fail(token, f"expected one byte in a character literal, found {len(token.data)}")
            return _Expr(token, _check_range(token.data[0], bounds, token, what))
        if token.kind is not _Kind.NAME or _register(token.text) is not None:
            _fail(token, f"expected an integer, label or .equ name, found {_shown(token.text)}")
        if token.text in self.equs:
            return _Expr(token, _check_range(self.equs[token.text][0], bounds, token, what))
        return _Expr(token, None)

    def _number_now(self, token: _Token, bounds: tuple[int, int], what: str) -> int:
        expr = self._value(token, bounds, what)
        if expr.number is None:
            _fail(token, f"expected a number or an .equ defined above, found {_shown(token.text)}")
        return expr.number

    def _claim_name(self, token: _Token, what: str) -> None:
        """Check ``token`` can be a new label, ``.equ`` or import name."""
        name = token.text
        reserved = _reserved_word(name) if token.kind is _Kind.NAME else "token"
        if reserved is not None:
            _fail(token, f"expected {what} name, found the {reserved} {_shown(name)}")
        if len(name) > _MAX_NAME:
            _fail(token, f"expected a name of at most {_MAX_NAME} bytes, found {len(name)}")
        earlier = self._definition_line(name)
        if earlier is not None:
            _fail(
                token,
                f"expected a name not yet used, found {_shown(name)} defined on line {earlier}",
            )

    def _definition_line(self, name: str) -> int | None:
        if name in self.labels:
            return self.labels[name].line
        if name in self.equs:
            return self.equs[name][1]
        return self.imports.get(name)

    def _define_label(self, token: _Token) -> None:
        self._claim_name(token, "a label")
        if self.section == ".code":
            self.labels[token.text] = _Label(SymbolKind.CODE, len(self.code), token.line)
        else:
            self.labels[token.text] = _Label(SymbolKind.DATA, len(self.data), token.line)

    def _grow_data(self, token: _Token, count: int) -> None:
        """Append ``count`` zero bytes, refusing first when the section would pass its limit."""
        if len(self.data) + count > MAX_DATA_BYTES:
            _fail(
                token,
                f"expected at most {MAX_DATA_BYTES} data bytes (a container stores every byte, "
                f"zeros too), found {len(self.data) + count}",
            )
        self.data += bytes(count)

    def _put_data(self, offset: int, width: int, value: int) -> None:
        self.data[offset : offset + width] = (value & ((1 << 8 * width) - 1)).to_bytes(
            width, "little"
        )

    # directives, dispatched through _DIRECTIVES

    def directive_section(self, head: _Token, rest: list[_Token]) -> None:
        _operands(head, rest, 0, 0, "no operands")
        self.section = head.text.lower()

    def directive_entry(self, head: _Token, rest: list[_Token]) -> None:
        (token,) = _operands(head, rest, 1, 1, "a label or index")
        if self.entry is not None:
            _fail(
                head, f"expected one .entry, found a second (first on line {self.entry.token.line})"
            )
        self.entry = self._value(token, _U64_RANGE, "an instruction index")

    def directive_export(self, head: _Token, rest: list[_Token]) -> None:
        for token in _operands(head, rest, 1, None, "one or more labels"):
            if token.kind is not _Kind.NAME:
                _fail(token, f"expected a label name, found {_shown(token.text)}")
            self.exports.append(token)

    def directive_import(self, head: _Token, rest: list[_Token]) -> None:
        for token in _operands(head, rest, 1, None, "one or more names"):
            self._claim_name(token, "an import")
            self.imports[token.text] = token.line

    def directive_equ(self, head: _Token, rest: list[_Token]) -> None:
        if len(rest) > 1 and rest[1].kind is not _Kind.COMMA:  # `.equ NAME value`
            rest = [rest[0], _Token(_Kind.COMMA, ",", head.line, rest[1].column), *rest[1:]]
        operands = _operands(head, rest, 2, 2, "a name and a value")
        name, value = operands
        self._claim_name(name, "an .equ")
        self.equs[name.text] = (self._number_now(value, _U64_RANGE, "a 64-bit integer"), head.line)

    def directive_byte(self, head: _Token, rest: list[_Token]) -> None:
        self._data_values(head, rest, 1, _BYTE_RANGE, "a byte")

    def directive_u64(self, head: _Token, rest: list[_Token]) -> None:
        self._data_values(head, rest, 8, _U64_RANGE, "a 64-bit integer")

    def _data_values(
        self, head: _Token, rest: list[_Token], width: int, bounds: tuple[int, int], what: str
    ) -> None:
        for token in _operands(head, rest, 1, None, "one or more values"):
            expr = self._value(token, bounds, what)
            offset = len(self.data)
            self._grow_data(token, width)
            if expr.number is None:
                self.data_fills.append((offset, width, expr))
            else:
                self._put_data(offset, width, expr.number)

    def directive_ascii(self, head: _Token, rest: list[_Token]) -> None:
        (token,) = _operands(head, rest, 1, 1, "one string")
        text = _string_operand(token) + (b"\0" if head.text.lower() == ".asciz" else b"")
        self._grow_data(token, len(text))
        self.data[len(self.data) - len(text) :] = text

    def directive_zero(self, head: _Token, rest: list[_Token]) -> None:
        (token,) = _operands(head, rest, 1, 1, "a byte count")
        self._grow_data(token, self._number_now(token, (0, WORD_MASK), "a byte count"))

    def directive_align(self, head: _Token, rest: list[_Token]) -> None:
        (token,) = _operands(head, rest, 1, 1, "a power of two")
        alignment = self._number_now(token, (1, WORD_MASK), "an alignment")
        if alignment & (alignment - 1):
            _fail(token, f"expected a power of two, found {alignment}")
        self._grow_data(token, -len(self.data) % alignment)

    def directive_insn(self, head: _Token, rest: list[_Token]) -> None:
        shape = "5 operands (opcode, rd, rs1, rs2, imm)"
        operands = _operands(head, rest, 5, 5, shape)
        opcode, rd, rs1, rs2 = (self._number_now(t, _FIELD_RANGE, "a byte") for t in operands[:4])
        self._emit(head, opcode, rd, rs1, rs2, self._value(operands[4], _U64_RANGE, "an imm"))

    def directive_symbol(self, head: _Token, rest: list[_Token]) -> None:
        shape = '3 operands ("name", code|data, value)'
        name, kind, value = _operands(head, rest, 3, 3, shape)
        raw_name = _string_operand(name)
        if len(raw_name) > _MAX_NAME:
            _fail(name, f"expected a name of at most {_MAX_NAME} bytes, found {len(raw_name)}")
        expr = self._value(value, _U64_RANGE, "a 64-bit integer")
        self.symbols.append((head, raw_name, _keyword(kind, _SYMBOL_KINDS), expr))

    def directive_reloc(self, head: _Token, rest: list[_Token]) -> None:
        shape = 'a kind (code, data, symbol) and for symbol a "name"'
        operands = _operands(head, rest, 1, 2, shape)
        kind = _keyword(operands[0], _RELOCATION_KINDS)
        needed = 2 if kind is RelocationKind.SYMBOL else 1
        _operands(head, rest, needed, needed, shape)
        name = _string_operand(operands[1]) if needed == 2 else b""
        if needed == 2 and not 0 < len(name) <= _MAX_NAME:
            _fail(operands[1], f"expected a name of 1..{_MAX_NAME} bytes, found {len(name)}")
        if self.pending_reloc is not None:
            first = self.pending_reloc[0].line
            _fail(head, f"expected an instruction after the .reloc on line {first}, found .reloc")
        self.pending_reloc = (head, kind, name)

    def directive_meta(self, head: _Token, rest: list[_Token]) -> None:
        (token,) = _operands(head, rest, 1, 1, "one string")
        text = _string_operand(token)
        if len(self.metadata) + len(text) > MAX_METADATA_BYTES:
            _fail(token, f"expected at most {MAX_METADATA_BYTES} metadata bytes, found more")
        self.metadata += text

    # second pass

    def finish(self) -> ForgeProgram:
        if self.pending_reloc is not None:
            _fail(self.pending_reloc[0], "expected an instruction after .reloc, found end of file")
        if not self.code:
            raise _Problem(1, 1, "expected at least one instruction, found none")
        self._fill_data()
        code, relocations = self._resolve_code()
        symbols, entry = self._resolve_symbols(), self._resolve_entry(len(code))
        try:
            return ForgeProgram(
                code, bytes(self.data), entry, symbols, relocations, bytes(self.metadata)
            )
        except InvalidProgram as error:
            raise _Problem(1, 1, error.reason) from None

    def _resolve(self, expr: _Expr) -> tuple[int, RelocationKind | None, bytes]:
        """An operand's value and the relocation it asks for."""
        if expr.number is not None:
            return expr.number, None, b""
        name = expr.token.text
        if name in self.labels:
            label = self.labels[name]
            return label.value, _RELOCATION_OF_LABEL[label.kind], b""
        if name in self.imports:
            return 0, RelocationKind.SYMBOL, name.encode()
        if name in self.equs:
            line = self.equs[name][1]
            _fail(
                expr.token,
                f"expected .equ {_shown(name)} defined before use, found it on line {line}",
            )
        _fail(
            expr.token, f"expected a defined label, .equ or import, found undefined {_shown(name)}"
        )

    def _resolve_unrelocated(self, expr: _Expr, bounds: tuple[int, int], what: str) -> int:
        value, kind, _ = self._resolve(expr)
        if kind is RelocationKind.SYMBOL:
            _fail(expr.token, f"expected {what}, found import {_shown(expr.token.text)}")
        return _check_range(value, bounds, expr.token, what)

    def _fill_data(self) -> None:
        for offset, width, expr in self.data_fills:
            bounds = _BYTE_RANGE if width == 1 else _U64_RANGE
            self._put_data(
                offset, width, self._resolve_unrelocated(expr, bounds, "a number or label")
            )

    def _resolve_code(self) -> tuple[tuple[Instruction, ...], tuple[Relocation, ...]]:
        code: list[Instruction] = []
        relocations: list[Relocation] = []
        for index, pending in enumerate(self.code):
            imm, kind, name = self._resolve(pending.imm)
            insn = Instruction(
                pending.opcode, pending.rd, pending.rs1, pending.rs2, imm & WORD_MASK
            )
            _check_unused_fields(insn, pending.head)
            kind, name = pending.reloc or (kind, name)
            if kind is not None:
                relocations.append(Relocation(index, kind, name))
            code.append(insn)
        return tuple(code), tuple(relocations)

    def _resolve_symbols(self) -> tuple[Symbol, ...]:
        found: dict[bytes, Symbol] = {}
        for token in self.exports:
            label = self.labels.get(token.text)
            if label is None:
                what = "import" if token.text in self.imports else "undefined name"
                _fail(
                    token,
                    f"expected a label defined in this file, found {what} {_shown(token.text)}",
                )
            _add_symbol(found, token, Symbol(token.text.encode(), label.kind, label.value))
        for head, name, kind, expr in self.symbols:
            value = self._resolve_unrelocated(expr, _U64_RANGE, "a symbol value") & WORD_MASK
            _add_symbol(found, head, Symbol(name, kind, value))
        return tuple(sorted(found.values(), key=lambda symbol: symbol.name))

    def _resolve_entry(self, code_length: int) -> int:
        if self.entry is None:
            return 0
        value, kind, _ = self._resolve(self.entry)
        if kind not in (None, RelocationKind.CODE):
            _fail(self.entry.token, f"expected a code label, found {_shown(self.entry.token.text)}")
        return _check_range(value, (0, code_length - 1), self.entry.token, "an instruction index")


def _check_unused_fields(insn: Instruction, head: _Token) -> None:
    unused = insn.unused_nonzero_fields()
    if unused and insn.info is not None:
        mnemonic, name = insn.info.mnemonic, unused[0]
        _fail(
            head, f"expected {name} = 0 ({mnemonic} does not use it), found {getattr(insn, name)}"
        )


def _add_symbol(found: dict[bytes, Symbol], token: _Token, symbol: Symbol) -> None:
    if symbol.name in found:
        _fail(token, f"expected each symbol name once, found {show_name(symbol.name)} again")
    found[symbol.name] = symbol


_Handler = Callable[[_Assembler, _Token, list[_Token]], None]
_DIRECTIVES: Final[dict[str, _Handler]] = {
    ".code": _Assembler.directive_section,
    ".data": _Assembler.directive_section,
    ".entry": _Assembler.directive_entry,
    ".export": _Assembler.directive_export,
    ".equ": _Assembler.directive_equ,
    ".import": _Assembler.directive_import,
    ".byte": _Assembler.directive_byte,
    ".u64": _Assembler.directive_u64,
    ".ascii": _Assembler.directive_ascii,
    ".asciz": _Assembler.directive_ascii,
    ".zero": _Assembler.directive_zero,
    ".align": _Assembler.directive_align,
    ".insn": _Assembler.directive_insn,
    ".symbol": _Assembler.directive_symbol,
    ".reloc": _Assembler.directive_reloc,
    ".meta": _Assembler.directive_meta,
}


def assemble(text: str, filename: str = "<input>") -> ForgeProgram:
    """Assemble ``.fasm`` text; raises ``AssemblyError`` (``FILE:LINE:COL: message``).

    Time is linear in the text; text over ``MAX_SOURCE_BYTES`` characters is refused
    with ``InputTooLarge`` before any of it is read.
    """
    return assemble_with_labels(text, filename)[0]


def assemble_with_labels(
    text: str, filename: str = "<input>"
) -> tuple[ForgeProgram, dict[int, tuple[str, ...]]]:
    """:func:`assemble`, and the code labels of the text by instruction index (in order).

    The program keeps only exported names; a debugger shows every label.
    """
    check_source(text)
    assembler = _Assembler()
    try:
        for number, line in enumerate(text.split("\n"), start=1):
            assembler.feed_line(number, line)
        program = assembler.finish()
    except _Problem as problem:
        raise AssemblyError(filename, problem.line, problem.column, problem.message) from None
    # Performance note: names gather in lists first, so many labels on one
    # instruction cost linear time, not a tuple copy per label.
    labels: dict[int, list[str]] = {}
    for name, label in assembler.labels.items():
        if label.kind is SymbolKind.CODE:
            labels.setdefault(label.value, []).append(name)
    return program, {index: tuple(names) for index, names in labels.items()}
