"""The machine registers compiled Starlark reserves, and the calling convention.

* ``r0`` always holds 0 (it is never written);
* ``r1..r64`` carry arguments into a function, and ``r1`` its result;
* :data:`HP` is the heap pointer (the next free heap address), :data:`LIM` the lowest
  address the heap may reach before it meets the deepest stack frame the current
  calls may need (see :mod:`kforge.starlark.emit`);
* :data:`ONE` holds 1 and :data:`SIGN` holds ``1 << 63`` (tag tests and signed
  comparisons need them on every arithmetic fast path, and a register is cheaper than
  an ``LI``);
* :data:`SCRATCH_A` and :data:`SCRATCH_B` are the code generator's own temporaries
  (parallel moves, comparisons that take two instructions).

Every other register is allocated.  A function may overwrite any allocated register;
its caller keeps a value alive across the call in a register the callee does not
touch, or saves it on the stack around the call (``PUSH``/``POP``).
"""

from __future__ import annotations

from typing import Final

ZERO: Final = 0
SCRATCH_A: Final = 249
SCRATCH_B: Final = 250
SIGN: Final = 251
ONE: Final = 252
LIM: Final = 253
HP: Final = 254

RESULT: Final = 1
MAX_ARGUMENTS: Final = 64
ARGUMENT_REGISTERS: Final = tuple(range(1, MAX_ARGUMENTS + 1))

RESERVED: Final = frozenset({ZERO, SCRATCH_A, SCRATCH_B, SIGN, ONE, LIM, HP})
ALLOCATABLE: Final = tuple(r for r in range(256) if r not in RESERVED)
ALLOCATABLE_MASK: Final = sum(1 << r for r in ALLOCATABLE)
#: Every register a call may change.
ALL_CLOBBERED: Final = ALLOCATABLE_MASK | (1 << SCRATCH_A) | (1 << SCRATCH_B)


def argument_mask(count: int) -> int:
    """The registers that carry ``count`` arguments, and ``r1`` for the result."""
    return (1 << (max(count, 1) + 1)) - 2  # bits 1..count
