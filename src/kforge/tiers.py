"""Choosing the execution tier: the one place that decides who runs a machine.

``reference`` is the interpreter of :mod:`kforge.machine`; ``fast`` compiles
to WebAssembly (:mod:`kforge.fast`); ``auto`` starts in the interpreter and
moves to compiled code once it is ready.  The fast tier is imported only when
asked for, so a host that never uses it never loads wasmtime; if it cannot be
imported, ``auto`` runs on the interpreter and ``fast`` is refused.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

from kforge.core import ForgeError
from kforge.machine import Machine, MachineState

__all__ = ["TIERS", "TierUnavailable", "check_tier", "run_on_tier"]

TIERS: Final = ("auto", "reference", "fast")


class TierUnavailable(ForgeError):
    """``fast`` was asked for but the fast tier cannot be loaded here."""

    http_status = 503

    def __init__(self, reason: str) -> None:
        super().__init__(f"the fast tier is not available: {reason}")
        self.reason = reason


def _fast_run() -> Any:
    """``kforge.fast.run``, or the reason it cannot be had."""
    try:
        return importlib.import_module("kforge.fast").run
    except Exception as error:  # absent or broken installation
        return error


def check_tier(tier: str) -> None:
    """Raise ``ValueError`` for an unknown tier and ``TierUnavailable`` for an unusable one."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    if tier == "fast":
        fast_run = _fast_run()
        if isinstance(fast_run, Exception):
            raise TierUnavailable(str(fast_run))


def run_on_tier(
    machine: Machine,
    tier: str = "auto",
    *,
    max_ticks: int | None = None,
    yield_on_tick: bool = False,
    fast_tier: Any = None,
) -> MachineState:
    """Run ``machine`` on ``tier`` as :meth:`Machine.run` would (same stops, same state)."""
    check_tier(tier)
    fast_run = None if tier == "reference" else _fast_run()
    if fast_run is None or isinstance(fast_run, Exception):
        return machine.run(max_ticks, yield_on_tick=yield_on_tick)
    state: MachineState = fast_run(
        machine, tier=tier, max_ticks=max_ticks, yield_on_tick=yield_on_tick, fast_tier=fast_tier
    )
    return state
