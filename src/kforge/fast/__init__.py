"""The fast execution tier: Forge programs compiled to WebAssembly, exact to the tick.

Design in brief (details in each module):

* :mod:`~kforge.fast.analysis` splits the code into basic blocks (leaders: jump
  targets, successors of control transfers, SEND/RECV/POLL, a length cap) and
  the blocks into regions (one wasm function each, so compile time is linear).
* :mod:`~kforge.fast.compiler` and :mod:`~kforge.fast.blocks` emit the module:
  a ``br_table`` on pc per region makes every block leader an entry point;
  forward branches are direct, a block looping on itself is a wasm ``loop``;
  one tick check per block and exact refunds on faults inside it; explicit
  bounds, stack, divisor and target checks give the reference faults; flags
  are recorded as a recipe, computed by the host only when seen.
* :mod:`~kforge.fast.abi`: memory 0 is the Forge data memory, memory 1 the
  state words exchanged at entry and exit; exit reasons HALT, YIELD, STEP and
  faults.
* :mod:`~kforge.fast.runtime` runs a slice: compiled code, and
  ``Machine.step()`` for whatever compiled code hands back (I/O, a block the
  budget cannot pay for whole, a mid-block entry), so the reference
  interpreter stays the only definition of channels and of partial blocks.
  A machine stays *bound* to its wasm instance between slices
  (``machine.tier_state``; ``machine.memory`` is a ``memoryview`` of the wasm
  memory), so a slice copies nothing; :func:`unbind` gives it its own buffer back.
* :mod:`~kforge.fast.transfer` moves the data memory in and out of wasm (on
  binding and unbinding only).
* :mod:`~kforge.fast.cache` keeps serialized modules on disk by program id.
* :mod:`~kforge.fast.tiering` picks the tier: ``reference``, ``fast`` or
  ``auto`` (the interpreter until a background compile of a hot program lands).

:func:`run` is the single entry point; the ``Machine`` holds its complete state
whenever it returns.
"""

from __future__ import annotations

import threading

from kforge.fast.analysis import ProgramPlan, plan_program
from kforge.fast.cache import DATA_DIR_ENVIRONMENT, ModuleCache, default_data_dir
from kforge.fast.compiler import COMPILER_VERSION, generate_wat
from kforge.fast.runtime import CompiledProgram, execute, is_bound, make_engine, unbind
from kforge.fast.tiering import TIERS, FastTier, Tier
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram

__all__ = [
    "COMPILER_VERSION",
    "DATA_DIR_ENVIRONMENT",
    "TIERS",
    "CompiledProgram",
    "FastTier",
    "ModuleCache",
    "ProgramPlan",
    "Tier",
    "compile_program",
    "default_data_dir",
    "default_fast_tier",
    "execute",
    "generate_wat",
    "is_bound",
    "make_engine",
    "plan_program",
    "run",
    "unbind",
]

_default: FastTier | None = None
_default_lock = threading.Lock()


def default_fast_tier() -> FastTier:
    """The process-wide :class:`FastTier` used when none is passed (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = FastTier()
        return _default


def compile_program(program: ForgeProgram, *, fast_tier: FastTier | None = None) -> CompiledProgram:
    """Compile ``program`` now (or fetch it from the memory or disk cache)."""
    return (fast_tier or default_fast_tier()).compile(program)


def run(
    machine: Machine,
    *,
    tier: Tier = "auto",
    max_ticks: int | None = None,
    yield_on_tick: bool = False,
    fast_tier: FastTier | None = None,
) -> MachineState:
    """Run one slice of ``machine``: the contract of ``Machine.run``, on the chosen tier.

    ``tier`` is ``"reference"`` (the interpreter), ``"fast"`` (compile first, then
    compiled code) or ``"auto"`` (the interpreter until the program's compile,
    started in the background once it is hot, is ready).  Every tier leaves the
    machine in exactly the state the reference interpreter would.  Raises
    ``ValueError`` for an unknown tier.
    """
    if tier == "reference":
        return machine.run(max_ticks, yield_on_tick=yield_on_tick)
    return (fast_tier or default_fast_tier()).run(
        machine, tier=tier, max_ticks=max_ticks, yield_on_tick=yield_on_tick
    )
