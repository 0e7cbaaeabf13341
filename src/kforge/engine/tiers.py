"""Which execution tier runs the engine's slices (see :mod:`kforge.tiers`)."""

from __future__ import annotations

from collections.abc import Callable

from kforge.machine import Machine
from kforge.tiers import TIERS, TierUnavailable, check_tier, run_on_tier

__all__ = ["TIERS", "SliceFunction", "slice_function"]

SliceFunction = Callable[[Machine, int], object]


def slice_function(tier: str) -> SliceFunction:
    """How one slice runs: at most ``max_ticks`` ticks, ending after a TICK."""
    try:
        check_tier(tier)
    except TierUnavailable as error:
        raise ValueError(str(error)) from None

    def run_slice(machine: Machine, max_ticks: int) -> object:
        return run_on_tier(machine, tier, max_ticks=max_ticks, yield_on_tick=True)

    return run_slice
