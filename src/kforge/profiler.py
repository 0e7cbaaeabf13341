"""Ticks per source function and line, for programs that carry a source map.

:func:`profile` steps a machine to its end on the reference tier and attributes the
ticks of every instruction to the source position being executed: an instruction of
compiled source to its own line, an instruction of a language's runtime (list
growth, string formatting, ...) to the source line that called into it, so that a
line's count includes the runtime work it caused.  The counts are exact, and the same
on every run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kforge.debuginfo import debug_info
from kforge.machine import Machine, MachineState

__all__ = ["Profile", "format_profile", "profile"]


@dataclass
class Profile:
    """Ticks by function and by (file, line) of the source; ``total`` is every tick."""

    total: int = 0
    functions: Counter[str] = field(default_factory=Counter)
    lines: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Ticks spent before the first source position (a runtime's start-up).
    unattributed: int = 0


def profile(machine: Machine) -> Profile:
    """Run ``machine`` to its end (halt, fault or block), counting ticks by position."""
    result = Profile()
    info = debug_info(machine.program)
    current: tuple[str, str, int] | None = None
    running = (MachineState.READY, MachineState.RUNNING)
    while machine.state in running:
        pc = machine.pc
        before = machine.ticks_used
        if info is not None:
            position = info.position(pc)
            if position is not None and not position.runtime and position.line:
                current = (position.function, position.file, position.line)
        machine.step()
        spent = machine.ticks_used - before
        result.total += spent
        if current is None:
            result.unattributed += spent
        else:
            result.functions[current[0]] += spent
            result.lines[(current[1], current[2])] += spent
    return result


def format_profile(result: Profile, limit: int = 15) -> str:
    """A readable table of the busiest functions and lines."""
    total = max(result.total, 1)
    lines = [f"profile: {result.total} ticks"]
    if not result.functions:
        lines.append("  (the program has no source map: nothing to attribute)")
        return "\n".join(lines)
    lines.append(f"  {'ticks':>12} {'%':>6}  function")
    for name, ticks in result.functions.most_common(limit):
        lines.append(f"  {ticks:>12} {100 * ticks / total:>6.1f}  {name}")
    lines.append(f"  {'ticks':>12} {'%':>6}  line")
    for (file, line), ticks in result.lines.most_common(limit):
        lines.append(f"  {ticks:>12} {100 * ticks / total:>6.1f}  {file}:{line}")
    if result.unattributed:
        lines.append(
            f"  {result.unattributed:>12} {100 * result.unattributed / total:>6.1f}  (start-up)"
        )
    return "\n".join(lines)
