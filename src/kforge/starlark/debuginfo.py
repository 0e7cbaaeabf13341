"""The source map of a compiled Starlark program, kept in its metadata section.

For every instruction: the function it belongs to (a Starlark function, the module's
top level, or a runtime function) and, for Starlark code, the file, line and column
it was compiled from.  Traces, fault reports, the debugger and the tick profiler all
read this one map.

Encoding: the metadata section starts with :data:`MAGIC`, followed by one msgpack
array ``[functions, runs]``: ``functions`` is a list of ``[name, file, runtime]``,
``runs`` a flat list of ``pc, function, line, column`` quadruples, each giving the
position from ``pc`` up to the next run (line 0 means no position).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from kforge.starlark.ir import Loc

MAGIC: Final = b"KFORGE-STARLARK-DEBUG-1\x00"


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    file: str
    runtime: bool


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where an instruction came from."""

    function: str
    file: str
    line: int  # 0 when the instruction has no Starlark position (runtime code)
    col: int
    runtime: bool

    def __str__(self) -> str:
        if self.runtime or not self.line:
            return f"<runtime>: in {self.function}"
        return f"{self.file}:{self.line}:{self.col}: in {self.function}"


class DebugInfo:
    """Per-instruction source positions, as runs of equal positions."""

    def __init__(self, functions: Sequence[FunctionInfo], runs: Sequence[tuple[int, int, int, int]]) -> None:
        self.functions = tuple(functions)
        self.runs = tuple(runs)
        self._starts = [run[0] for run in self.runs]

    @classmethod
    def from_locations(
        cls, functions: Sequence[FunctionInfo], locations: Sequence[tuple[int, Loc | None]]
    ) -> DebugInfo:
        runs: list[tuple[int, int, int, int]] = []
        previous: tuple[int, int, int] | None = None
        for pc, (function, loc) in enumerate(locations):
            key = (function, loc.line if loc else 0, loc.col if loc else 0)
            if key != previous:
                runs.append((pc, *key))
                previous = key
        return cls(functions, runs)

    def location(self, pc: int) -> SourceLocation | None:
        """The source position of instruction ``pc``, or ``None`` outside the code."""
        at = bisect_right(self._starts, pc) - 1
        if at < 0:
            return None
        _, function, line, col = self.runs[at]
        info = self.functions[function]
        return SourceLocation(info.name, info.file, line, col, info.runtime)

    def encode(self) -> bytes:
        flat = [value for run in self.runs for value in run]
        body = [[[f.name, f.file, f.runtime] for f in self.functions], flat]
        return MAGIC + msgpack.packb(body, use_bin_type=True)

    @classmethod
    def decode(cls, metadata: bytes) -> DebugInfo | None:
        """The map in ``metadata``, or ``None`` when there is none (or it is damaged)."""
        if not metadata.startswith(MAGIC):
            return None
        try:
            body: Any = msgpack.unpackb(metadata[len(MAGIC) :], raw=False, strict_map_key=True)
            raw_functions, flat = body
            functions = [FunctionInfo(str(n), str(f), bool(r)) for n, f, r in raw_functions]
            if len(flat) % 4:
                return None
            runs = [tuple(int(v) for v in flat[i : i + 4]) for i in range(0, len(flat), 4)]
            for run in runs:
                if not 0 <= run[1] < len(functions):
                    return None
        except (ValueError, TypeError, msgpack.UnpackException):
            return None
        return cls(functions, runs)  # type: ignore[arg-type]
