"""What a debugger can know of a program's source: code labels and source locations.

A program compiled from a higher-level language carries, in its metadata section,
the source position of each instruction (file, line, column, function).
:func:`source_location` is the one place that reads it, so that every tool showing
where a program is (the debugger, fault reports) gets the same answer.  No
compiler writes that section yet, so for now every program answers ``None`` and
tools fall back to the instruction itself.

Labels come from the assembly text when the debugger has it
(:func:`kforge.asm.assemble_with_labels`) and otherwise from the program's
exported code symbols (:func:`code_labels`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge.program import ForgeProgram, SymbolKind

__all__ = ["SourceLocation", "code_labels", "source_location", "source_locations"]


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where in the source an instruction comes from (line and column count from 1)."""

    file: str
    line: int
    column: int
    function: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{self.function} ({where})" if self.function else where


def source_location(program: ForgeProgram, pc: int) -> SourceLocation | None:
    """The source position of the instruction at ``pc``, if the program records one."""
    return None


def source_locations(program: ForgeProgram) -> tuple[SourceLocation | None, ...] | None:
    """:func:`source_location` of every instruction, or ``None`` when the program has none."""
    locations = tuple(source_location(program, pc) for pc in range(len(program.code)))
    return locations if any(location is not None for location in locations) else None


def code_labels(program: ForgeProgram) -> dict[int, tuple[str, ...]]:
    """The names the program itself gives its instructions: its code symbols, by index."""
    labels: dict[int, tuple[str, ...]] = {}
    for symbol in program.symbols:
        if symbol.kind is SymbolKind.CODE:
            name = symbol.name.decode("utf-8", "replace")
            labels[symbol.value] = (*labels.get(symbol.value, ()), name)
    return labels
