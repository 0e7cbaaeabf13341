"""Choosing the execution tier: the one object that decides who runs a machine.

A :class:`TierRunner` is made once, from the tier's name, and injected into
whatever runs machines: the engine, replay, proof generation and checking, the
command line.  Nothing is process-wide: each runner owns its fast tier (its
wasmtime engine, compiled programs and compile thread) and releases it on
:meth:`TierRunner.close`.

``reference`` is the interpreter of :mod:`kforge.machine`; ``fast`` compiles
to WebAssembly (:mod:`kforge.fast`); ``auto`` starts in the interpreter and
moves to compiled code once it is ready.  The fast tier is imported only when
asked for, so a host that never uses it never loads wasmtime; if it cannot be
imported, ``auto`` runs on the interpreter and ``fast`` is refused
(:class:`TierUnavailable`).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from kforge.core import ForgeError
from kforge.machine import Machine, MachineState

if TYPE_CHECKING:  # the fast tier is loaded lazily; only its type is named here
    from kforge.fast import FastTier
    from kforge.fast.tiering import ModuleBuilder

__all__ = ["REFERENCE", "TIERS", "TierRunner", "TierUnavailable", "borrowed", "check_tier"]

TIERS: Final = ("auto", "reference", "fast")


class TierUnavailable(ForgeError):
    """``fast`` was asked for but the fast tier cannot be loaded here."""

    http_status = 503

    def __init__(self, reason: str) -> None:
        super().__init__(f"the fast tier is not available: {reason}")
        self.reason = reason


def _fast_module() -> Any:
    """``kforge.fast``, or the reason it cannot be had."""
    try:
        return importlib.import_module("kforge.fast")
    except Exception as error:  # absent or broken installation
        return error


def check_tier(tier: str) -> None:
    """Raise ``ValueError`` for an unknown tier and ``TierUnavailable`` for an unusable one."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    if tier == "fast":
        module = _fast_module()
        if isinstance(module, Exception):
            raise TierUnavailable(str(module))


class TierRunner:
    """Runs machines on one tier, chosen once.

    ``tier`` is ``reference``, ``fast`` or ``auto``; ``fast_tier`` a
    :class:`kforge.fast.FastTier` to share (the runner then does not close
    it); otherwise the runner makes its own on first use, compiling with
    ``builder`` (``FastTier``'s) when given.  Raises
    ``ValueError`` for an unknown tier and :class:`TierUnavailable` when
    ``fast`` cannot be loaded.  Thread-safe (proofs run in worker threads).
    """

    def __init__(
        self,
        tier: str = "auto",
        *,
        fast_tier: FastTier | None = None,
        builder: ModuleBuilder | None = None,
    ) -> None:
        check_tier(tier)
        self.name = tier
        self._builder = builder
        self._fast_tier = fast_tier
        self._owns_fast_tier = fast_tier is None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, tier: str | TierRunner) -> TierRunner:
        """``tier`` itself when it is a runner, else a new runner for that tier name."""
        return tier if isinstance(tier, TierRunner) else cls(tier)

    @property
    def fast_tier(self) -> FastTier | None:
        """The fast tier this runner uses (made on first use); ``None`` for ``reference``
        and when ``auto`` found no fast tier to load."""
        if self.name == "reference":
            return None
        if self._fast_tier is not None:  # made already: no lock to take (asked every slice)
            return self._fast_tier
        with self._lock:
            if self._fast_tier is None:
                module = _fast_module()
                if isinstance(module, Exception):
                    return None
                self._fast_tier = module.FastTier(builder=self._builder)
            return self._fast_tier

    def run(
        self, machine: Machine, max_ticks: int | None = None, *, yield_on_tick: bool = False
    ) -> MachineState:
        """Run ``machine`` as :meth:`Machine.run` would (same stops, same state), on this tier."""
        fast_tier = self.fast_tier
        if fast_tier is None:
            return machine.run(max_ticks, yield_on_tick=yield_on_tick)
        return fast_tier.run(
            machine,
            tier=self.name,  # type: ignore[arg-type]
            max_ticks=max_ticks,
            yield_on_tick=yield_on_tick,
        )

    def compile_before_running(self, machine: Machine) -> Future[Any] | None:
        """For the ``fast`` tier, the compile ``machine``'s next slice would otherwise do
        where it runs, started on the compile thread (``FastTier.compile_before_running``);
        ``None`` for the other tiers, which never wait for a compile."""
        fast_tier = self.fast_tier if self.name == "fast" else None
        return fast_tier.compile_before_running(machine) if fast_tier is not None else None

    def close(self) -> None:
        """Stop the compile thread of the fast tier this runner made.  Idempotent; machines
        bound to its compiled code stay usable (a later compile starts the thread again)."""
        with self._lock:
            fast_tier = self._fast_tier
        if fast_tier is not None and self._owns_fast_tier:
            fast_tier.close()

    def __enter__(self) -> TierRunner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TierRunner({self.name!r})"


#: The interpreter: holds no resources, so one instance serves everyone.
REFERENCE: Final = TierRunner("reference")


@contextmanager
def borrowed(tier: str | TierRunner) -> Iterator[TierRunner]:
    """The runner ``tier`` names: the runner itself, or a new one closed on leaving."""
    if isinstance(tier, TierRunner):
        yield tier
        return
    with TierRunner(tier) as runner:
        yield runner
