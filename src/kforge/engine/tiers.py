"""Which execution tier runs the engine's slices."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Final

from kforge.machine import Machine

__all__ = ["TIERS", "SliceFunction", "slice_function"]

TIERS: Final = ("auto", "reference", "fast")

SliceFunction = Callable[[Machine, int], object]


def _reference_slice(machine: Machine, max_ticks: int) -> object:
    return machine.run(max_ticks=max_ticks, yield_on_tick=True)


def slice_function(tier: str) -> SliceFunction:
    """How one slice runs: ``kforge.fast.run`` when importable (and not ``reference``)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    if tier == "reference":
        return _reference_slice
    try:
        fast_run: Any = importlib.import_module("kforge.fast").run
    except Exception as error:  # absent or broken: "auto" falls back, "fast" cannot
        if tier == "fast":
            raise ValueError(f"the fast tier is not available: {error}") from None
        return _reference_slice

    def run_fast(machine: Machine, max_ticks: int) -> object:
        return fast_run(machine, tier=tier, max_ticks=max_ticks, yield_on_tick=True)

    return run_fast
