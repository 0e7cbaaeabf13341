"""What a debugger can know of a program's source: code labels and source locations.

A program compiled from a higher-level language (Starlark) carries, in its metadata
section, the source position of each instruction (file, line, column, function) as
a :class:`DebugInfo`.  :func:`source_location` is the one place that reads it, so
that every tool showing where a program is (the trace, the debugger, fault reports,
the profiler) gets the same answer; programs without it answer ``None`` and tools
fall back to the instruction itself.

Encoding: the metadata section starts with :data:`MAGIC`, followed by one msgpack
array ``[functions, runs]``: ``functions`` is a list of ``[name, file, runtime]``,
``runs`` a flat list of ``pc, function, line, column`` quadruples, each giving the
position from ``pc`` up to the next run (line 0: runtime code, no source position).

Labels come from the assembly text when the debugger has it
(:func:`kforge.asm.assemble_with_labels`) and otherwise from the program's
exported code symbols (:func:`code_labels`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Final

from kforge.program import ForgeProgram, SymbolKind

__all__ = [
    "DebugInfo",
    "FunctionInfo",
    "Position",
    "SourceLocation",
    "code_labels",
    "debug_info",
    "source_frames",
    "source_location",
    "source_locations",
]


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


def debug_info(program: ForgeProgram) -> DebugInfo | None:
    """The program's source map, if it carries one (decoded once per program)."""
    cached = _decoded.get(program.program_id)
    if cached is None:
        cached = (DebugInfo.decode(program.metadata),)
        if len(_decoded) > 64:
            _decoded.clear()
        _decoded[program.program_id] = cached
    return cached[0]


_decoded: dict[object, tuple[DebugInfo | None]] = {}


def source_frames(machine: Any) -> list[SourceLocation]:
    """The source frames of a stopped machine, innermost first (empty for a program
    without a source map, or a stack that cannot be read as its frames)."""
    info = debug_info(machine.program)
    if info is None or not info.sites:
        return []
    top = machine.memory_quota & ~7
    sp = machine.sp
    if not 0 <= sp <= top or (top - sp) // 8 > 1 << 20:
        return []
    raw = bytes(machine.memory[sp:top])
    words = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]
    return [
        SourceLocation(p.file, p.line, p.col, p.function) for p in info.frames(words, machine.pc)
    ]


def source_location(program: ForgeProgram, pc: int) -> SourceLocation | None:
    """The source position of the instruction at ``pc``, if the program records one
    (runtime code of a language has none)."""
    info = debug_info(program)
    if info is None:
        return None
    position = info.position(pc)
    if position is None or position.runtime or not position.line:
        return None
    return SourceLocation(position.file, position.line, position.col, position.function)


def source_locations(program: ForgeProgram) -> tuple[SourceLocation | None, ...] | None:
    """:func:`source_location` of every instruction, or ``None`` when the program has none."""
    locations = tuple(source_location(program, pc) for pc in range(len(program.code)))
    return locations if any(location is not None for location in locations) else None


MAGIC: Final = b"KFORGE-STARLARK-DEBUG-1\x00"


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    file: str
    runtime: bool


@dataclass(frozen=True, slots=True)
class Position:
    """Where an instruction came from: its function, and (for source code, not a
    language's runtime) its file, line and column."""

    function: str
    file: str
    line: int  # 0 for runtime code
    col: int
    runtime: bool


#: Kinds of the caller at a call site (as the Starlark compiler's unwind table has them).
SITE_RUNTIME = 0
SITE_SOURCE = 1
SITE_BOTTOM = 2
SITE_CATCH = 3


@dataclass(frozen=True, slots=True)
class Site:
    """A call's return address: the words its caller pushed around it, what kind of
    code the caller is, and (for source code) the caller's function and position."""

    pushes: int
    kind: int
    function: int
    line: int
    col: int


#: A call site as a row: return address, then :class:`Site`'s fields in order.
SiteRow = tuple[int, int, int, int, int, int]


class DebugInfo:
    """Per-instruction source positions, as runs of equal positions; and the call sites
    that let a host walk a stopped machine's stack back to its source frames (given as
    :class:`Site` s by address, or as rows: a compiler writing the map of a long program
    need not make an object per call)."""

    def __init__(
        self,
        functions: Sequence[FunctionInfo],
        runs: Sequence[tuple[int, int, int, int]],
        sites: dict[int, Site] | None = None,
        *,
        site_rows: Sequence[SiteRow] = (),
    ) -> None:
        self.functions = tuple(functions)
        self.runs = tuple(runs)
        self._starts = [run[0] for run in self.runs]
        self._sites = sites
        self._site_rows = site_rows

    @property
    def sites(self) -> dict[int, Site]:
        """The call sites by return address."""
        if self._sites is None:
            self._sites = {row[0]: Site(*row[1:]) for row in self._site_rows}
        return self._sites

    def frames(self, words: Sequence[int], pc: int) -> list[Position]:
        """The source frames of a stopped machine, innermost first: ``words`` is its
        stack (from the stack pointer up to the top), ``pc`` where it stopped.  The
        innermost frame is where ``pc`` is if that is source code, else the source
        line that called into the runtime.  Empty when the stack cannot be read as this
        program's frames."""
        here = self.position(pc)
        for start in range(min(len(words), 300)):
            chain = self._chain(words, start)
            if chain is not None:
                frames = [here] if here is not None and not here.runtime and here.line else []
                for site in chain:
                    if site.kind == SITE_SOURCE:
                        info = self.functions[site.function]
                        frames.append(Position(info.name, info.file, site.line, site.col, False))
                return frames
        return []

    def _chain(self, words: Sequence[int], index: int) -> list[Site] | None:
        chain: list[Site] = []
        while index < len(words):
            site = self.sites.get(words[index])
            if site is None:
                return None
            chain.append(site)
            index += 1 + site.pushes
            if site.kind == SITE_BOTTOM:
                return chain if index == len(words) else None
        return None

    @classmethod
    def from_locations(
        cls, functions: Sequence[FunctionInfo], locations: Sequence[tuple[int, Any]]
    ) -> DebugInfo:
        """From each instruction's (function number, position with ``line`` and ``col``,
        or ``None``)."""
        runs: list[tuple[int, int, int, int]] = []
        previous: tuple[int, int, int] | None = None
        for pc, (function, loc) in enumerate(locations):
            key = (function, loc.line if loc else 0, loc.col if loc else 0)
            if key != previous:
                runs.append((pc, *key))
                previous = key
        return cls(functions, runs)

    def position(self, pc: int) -> Position | None:
        """Where instruction ``pc`` came from, or ``None`` outside the code."""
        at = bisect_right(self._starts, pc) - 1
        if at < 0:
            return None
        _, function, line, col = self.runs[at]
        info = self.functions[function]
        return Position(info.name, info.file, line, col, info.runtime)

    def encode(self) -> bytes:
        import msgpack

        flat = list(chain.from_iterable(self.runs))
        if self._sites is None:
            rows: Iterable[SiteRow] = sorted(self._site_rows)
        else:
            rows = (
                (address, site.pushes, site.kind, site.function, site.line, site.col)
                for address, site in sorted(self._sites.items())
            )
        sites = list(chain.from_iterable(rows))
        body = [[[f.name, f.file, f.runtime] for f in self.functions], flat, sites]
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return MAGIC + packed

    @classmethod
    def decode(cls, metadata: bytes) -> DebugInfo | None:
        """The map in ``metadata``, or ``None`` when there is none (or it is damaged)."""
        if not metadata.startswith(MAGIC):
            return None
        import msgpack  # only programs that carry a map pay for the import

        try:
            body: Any = msgpack.unpackb(metadata[len(MAGIC) :], raw=False, strict_map_key=True)
            raw_functions, flat, raw_sites = body
            functions = [FunctionInfo(str(n), str(f), bool(r)) for n, f, r in raw_functions]
            if len(flat) % 4 or len(raw_sites) % 6:
                return None
            runs = [tuple(int(v) for v in flat[i : i + 4]) for i in range(0, len(flat), 4)]
            for run in runs:
                if not 0 <= run[1] < len(functions):
                    return None
            sites: dict[int, Site] = {}
            for i in range(0, len(raw_sites), 6):
                address, pushes, kind, function, line, col = (int(v) for v in raw_sites[i : i + 6])
                if not 0 <= function < len(functions):
                    return None
                sites[address] = Site(pushes, kind, function, line, col)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None
        return cls(functions, runs, sites)  # type: ignore[arg-type]


def code_labels(program: ForgeProgram) -> dict[int, tuple[str, ...]]:
    """The names the program itself gives its instructions: its code symbols, by index."""
    labels: dict[int, tuple[str, ...]] = {}
    for symbol in program.symbols:
        if symbol.kind is SymbolKind.CODE:
            name = symbol.name.decode("utf-8", "replace")
            labels[symbol.value] = (*labels.get(symbol.value, ()), name)
    return labels
