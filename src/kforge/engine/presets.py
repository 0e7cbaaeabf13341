"""Sandbox configuration presets (seed 004): ``minimal``, ``standard``, ``generous``.

A preset names a memory quota, a tick budget, a deadline and the host channels
granted.  A :class:`~kforge.engine.models.CreateSandbox` that names one takes
these values for every one of them it leaves out; one that names none must
give its memory quota and tick budget.  The engine resolves presets, so the
API, the command line (``--preset``) and messages all share them.

| preset | memory quota | tick budget | deadline | grants |
|---|---|---|---|---|
| minimal | 16 MiB | 10^9 | 5 s | none (stdin, stdout, stderr only) |
| standard | 64 MiB | 10^10 | 30 s | vault (3), oracle (4) |
| generous | 256 MiB | 10^11 | 300 s | channels 3..7 |

A quota above 1 MiB is an anonymous mapping: pages the program never touches
cost nothing.  Creation is still charged for the whole quota (1 Spark a KiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from kforge.core import InvalidRequest
from kforge.engine.models import CreateSandbox
from kforge.isa import Channel

__all__ = ["PRESETS", "Preset", "resolve_request"]

_MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Preset:
    """What a preset gives a sandbox."""

    name: str
    memory_quota: int
    tick_budget: int
    deadline_ms: int
    grants: frozenset[int]


PRESETS: Final[dict[str, Preset]] = {
    preset.name: preset
    for preset in (
        Preset("minimal", 16 * _MIB, 10**9, 5_000, frozenset()),
        Preset("standard", 64 * _MIB, 10**10, 30_000, frozenset({Channel.VAULT, Channel.ORACLE})),
        Preset("generous", 256 * _MIB, 10**11, 300_000, frozenset(range(3, 8))),
    )
}


def resolve_request(request: CreateSandbox) -> CreateSandbox:
    """``request`` with its preset's values in the fields it leaves out.

    Raises ``InvalidRequest`` for an unknown preset, and for a request without
    one that leaves out its memory quota or tick budget.
    """
    if request.preset is None:
        for name in ("memory_quota", "tick_budget"):
            if getattr(request, name) is None:
                raise InvalidRequest(
                    name, "missing: give it, or a preset (minimal, standard, generous)"
                )
        return request
    preset = PRESETS.get(request.preset)
    if preset is None:
        raise InvalidRequest(
            "preset", f"unknown preset {request.preset!r}: one of {', '.join(PRESETS)}"
        )
    return msgspec.structs.replace(
        request,
        memory_quota=request.memory_quota
        if request.memory_quota is not None
        else preset.memory_quota,
        tick_budget=request.tick_budget if request.tick_budget is not None else preset.tick_budget,
        deadline_ms=request.deadline_ms if request.deadline_ms is not None else preset.deadline_ms,
        grants=request.grants or preset.grants,
    )
