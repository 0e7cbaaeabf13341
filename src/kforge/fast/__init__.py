"""The fast execution tier: Forge programs compiled to WebAssembly, exact to the tick.

Design in brief (details in each module):

* :mod:`~kforge.fast.analysis` splits the code into basic blocks (leaders: jump
  targets, successors of control transfers, SEND/RECV/POLL, a length cap) and
  the blocks into regions: one per procedure (from a call target to the next),
  long ones cut where fewest jumps cross; one wasm function each.
* :mod:`~kforge.fast.compiler`, :mod:`~kforge.fast.blocks` and
  :mod:`~kforge.fast.wat` emit the module: a ``br_table`` on pc per region
  makes every block leader an entry point; forward branches are direct, a
  block looping on itself is a wasm ``loop``; a CALL into another region is a
  wasm call (its RET a wasm return), other transfers between regions are tail
  calls; small leaf procedures are copied into their callers
  (:mod:`~kforge.fast.calls`); registers are written through to the state
  memory, so exits store nothing but sp; one tick check per block and exact
  refunds on faults inside it; explicit bounds, stack, divisor and target
  checks give the reference faults; flags are recorded as a recipe, computed
  by the host only when seen.
* :mod:`~kforge.fast.abi`: memory 0 is the Forge data memory, memory 1 the
  state words exchanged at entry and exit (and the refund table); exit reasons
  HALT, YIELD, STEP and faults.
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

:meth:`FastTier.run` is the single entry point; the ``Machine`` holds its complete
state whenever it returns.  There is no process-wide instance: a
:class:`kforge.tiers.TierRunner` owns the fast tier it runs on.
"""

from __future__ import annotations

from kforge.fast.analysis import ProgramPlan, plan_program
from kforge.fast.cache import DATA_DIR_ENVIRONMENT, ModuleCache, default_data_dir
from kforge.fast.compiler import COMPILER_VERSION, generate_wat
from kforge.fast.runtime import CompiledProgram, execute, is_bound, make_engine, unbind
from kforge.fast.tiering import TIERS, FastTier, Tier

__all__ = [
    "COMPILER_VERSION",
    "DATA_DIR_ENVIRONMENT",
    "TIERS",
    "CompiledProgram",
    "FastTier",
    "ModuleCache",
    "ProgramPlan",
    "Tier",
    "default_data_dir",
    "execute",
    "generate_wat",
    "is_bound",
    "make_engine",
    "plan_program",
    "unbind",
]
