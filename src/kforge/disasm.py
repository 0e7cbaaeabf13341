"""Forge assembly from programs: the disassembler, and one-instruction formatting.

Output assembles back to the same bytes for every valid container (see the
extensions in :mod:`kforge.asm`).  One upper-case instruction a line with its
index as a comment, unknown opcodes as ``.insn``, targets of relocations as
labels (an exported name there, else ``L<index>`` / ``D<address>`` with a prefix
no symbol or import uses), imports as names, data as ``.byte`` rows and
``.ascii`` runs, and anything else through ``.symbol``, ``.reloc`` and ``.meta``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kforge.asm import is_label_name
from kforge.isa import WORD_MASK, Instruction, Operand
from kforge.program import ForgeProgram, RelocationKind, Symbol, SymbolKind

__all__ = ["disassemble", "format_instruction"]


def _render(insn: Instruction, imm_text: str | None = None) -> str:
    """One instruction as assembly; ``imm_text`` replaces the immediate's number."""
    info = insn.info
    if info is None:
        imm = imm_text or str(insn.imm)
        return f".insn {insn.opcode:#04x}, {insn.rd}, {insn.rs1}, {insn.rs2}, {imm}"
    operands = [_operand_text(insn, operand, imm_text) for operand in info.operands]
    return " ".join([info.mnemonic, ", ".join(operands)]) if operands else info.mnemonic


def _operand_text(insn: Instruction, operand: Operand, imm_text: str | None) -> str:
    if operand.is_register:
        return f"r{getattr(insn, operand.field)}"
    if imm_text is not None:
        return imm_text
    signed = operand is Operand.IMM and insn.imm > WORD_MASK >> 1
    return str(insn.imm - (1 << 64) if signed else insn.imm)


def format_instruction(insn: Instruction, labels: Mapping[int, str] | None = None) -> str:
    """One instruction as assembly, e.g. ``ADD r1, r2, r3``; targets found in ``labels`` by name."""
    info = insn.info
    is_jump = info is not None and Operand.TARGET in info.operands
    return _render(insn, labels.get(insn.imm) if labels is not None and is_jump else None)


_QUOTED: Final = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\t"): "\\t"}


def _quote(raw: bytes) -> str:
    """``raw`` as a string literal the assembler reads back byte for byte."""
    return '"' + "".join(_quote_byte(byte) for byte in raw) + '"'


def _quote_byte(byte: int) -> str:
    if byte in _QUOTED:
        return _QUOTED[byte]
    return chr(byte) if 0x20 <= byte < 0x7F else f"\\x{byte:02x}"


def _label_text(name: bytes) -> str | None:
    """``name`` if it can be written as a label, else ``None``."""
    text = name.decode("ascii", "replace")
    return text if text.isascii() and is_label_name(text) else None


def _fresh_prefix(base: str, taken: set[bytes]) -> str:
    """A prefix P such that no taken name is P followed by digits.

    A prefix here never ends in a digit, so a name blocks exactly one prefix: itself
    less its trailing digits.  Collecting those once keeps this linear in the names.
    """
    blocked = {name.rstrip(b"0123456789") for name in taken if name[-1:].isdigit()}
    prefix = base
    while prefix.encode() in blocked:
        prefix += "_"
    return prefix


def _imm_is_operand(insn: Instruction) -> bool:
    return insn.info is None or "imm" in insn.info.fields


@dataclass
class _Names:
    """The labels and names a disassembly uses."""

    code: dict[int, list[str]] = field(default_factory=dict)
    data: dict[int, list[str]] = field(default_factory=dict)
    operand: dict[int, str] = field(default_factory=dict)  # instruction index -> imm text
    imports: set[str] = field(default_factory=set)
    exports: dict[str, None] = field(default_factory=dict)  # a set that keeps its order
    symbol_lines: list[str] = field(default_factory=list)


def _choose_names(program: ForgeProgram) -> _Names:
    names = _Names()
    for symbol in program.symbols:
        _place_symbol(program, names, symbol)
    taken = {symbol.name for symbol in program.symbols} | set(program.imports)
    prefixes = {
        RelocationKind.CODE: _fresh_prefix("L", taken),
        RelocationKind.DATA: _fresh_prefix("D", taken),
    }
    sizes = {RelocationKind.CODE: len(program.code), RelocationKind.DATA: len(program.data)}
    for reloc in program.relocations:
        insn = program.code[reloc.index]
        if not _imm_is_operand(insn):
            continue
        if reloc.kind is RelocationKind.SYMBOL:
            name = _label_text(reloc.name)
            if insn.imm == 0 and name is not None and name not in names.exports:
                names.operand[reloc.index] = name
                names.imports.add(name)
        elif insn.imm <= sizes[reloc.kind]:
            labels = names.code if reloc.kind is RelocationKind.CODE else names.data
            at = labels.setdefault(insn.imm, [])
            if not at:
                at.append(f"{prefixes[reloc.kind]}{insn.imm}")
            names.operand[reloc.index] = at[0]
    return names


def _place_symbol(program: ForgeProgram, names: _Names, symbol: Symbol) -> None:
    """An exported label when possible, else a ``.symbol`` line."""
    is_code = symbol.kind is SymbolKind.CODE
    name = _label_text(symbol.name)
    if name is not None and symbol.value <= len(program.code if is_code else program.data):
        (names.code if is_code else names.data).setdefault(symbol.value, []).append(name)
        names.exports[name] = None
    else:
        kind = symbol.kind.name.lower()
        names.symbol_lines.append(f".symbol {_quote(symbol.name)}, {kind}, {symbol.value}")


def _header_lines(program: ForgeProgram, names: _Names) -> list[str]:
    lines = ["; disassembled by kforge"]
    lines += [f".entry {program.entry}"] if program.entry else []
    lines += [f".import {name}" for name in sorted(names.imports)]
    lines += [f".export {name}" for name in names.exports]
    lines += names.symbol_lines
    meta = program.metadata
    lines += [f".meta {_quote(meta[at : at + 48])}" for at in range(0, len(meta), 48)]
    return lines


def _code_lines(program: ForgeProgram, names: _Names) -> list[str]:
    lines = ["", ".code"]
    relocations = {reloc.index: reloc for reloc in program.relocations}
    for index, insn in enumerate(program.code):
        lines += [f"{label}:" for label in names.code.get(index, [])]
        reloc = relocations.get(index)
        if reloc is not None and index not in names.operand:
            quoted = f", {_quote(reloc.name)}" if reloc.kind is RelocationKind.SYMBOL else ""
            lines.append(f"    .reloc {reloc.kind.name.lower()}{quoted}")
        lines.append(f"    {_render(insn, names.operand.get(index)):<31} ; {index}")
    lines += [f"{label}:" for label in names.code.get(len(program.code), [])]
    return lines


def _data_lines(program: ForgeProgram, names: _Names) -> list[str]:
    if not program.data and not names.data:
        return []
    lines = ["", ".data"]
    cuts = sorted({0, len(program.data), *names.data})
    for start, end in zip(cuts, [*cuts[1:], None], strict=True):
        lines += [f"{label}:" for label in names.data.get(start, [])]
        if end is not None:
            lines += _chunk_lines(program.data[start:end])
    return lines


def _chunk_lines(chunk: bytes) -> list[str]:
    """Printable runs of 4+ bytes as ``.ascii``, everything else as ``.byte`` rows of 16."""
    lines: list[str] = []
    for position, part in enumerate(re.split(rb"([\x20-\x7e]{4,})", chunk)):
        width = 64 if position % 2 else 16
        for at in range(0, len(part), width):
            piece = part[at : at + width]
            if position % 2:
                lines.append(f"    .ascii {_quote(piece)}")
            else:
                lines.append("    .byte " + ", ".join(f"{byte:#04x}" for byte in piece))
    return lines


def disassemble(program: ForgeProgram) -> str:
    """Readable assembly that ``assemble`` turns back into exactly ``program.encoded``."""
    names = _choose_names(program)
    lines = _header_lines(program, names) + _code_lines(program, names)
    return "\n".join(lines + _data_lines(program, names)) + "\n"
