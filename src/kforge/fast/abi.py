"""The contract between generated code and the host: state layout and exit reasons.

A compiled module has two linear memories.  Memory 0 (``memory``) is the Forge
data memory, byte for byte: Forge address ``a`` is wasm address ``a``; the host
grows it to ``ceil(memory_quota / 64 KiB)`` pages and the generated code checks
every access against the quota itself.  Memory 1 (``state``) holds the machine
state the host hands over at each entry, as little-endian u64 words, and from
byte :data:`REFUNDS_OFFSET` on a table the module fills: for each instruction,
the ticks of its block's later instructions, which a fault at it gives back.

=========  ======================================================================
word       meaning
=========  ======================================================================
0..255     registers r0..r255 (in and out)
256        pc (in: where to start; out: where execution stopped)
257        sp (in and out)
258        fuel (in: ticks this entry may spend; out: ticks left unspent)
259        budget base: ``tick_budget - ticks_used - fuel`` at entry (in; for BUDGET)
260        last byte: ``memory_quota - 1`` (in; a 1-byte access at ``a`` is valid iff a <= it)
261        last word: ``memory_quota - 8`` (in; likewise for 8 bytes)
262        push floor: ``heap_start + 8`` (in; PUSH overflows iff sp < it)
263        stack start (in; POP underflows iff sp + 8 > it)
264        fault detail (out: the user code of USER_FAULT)
265        yield on TICK (in: 1 or 0)
266..269  flags, as a recipe: kind, a, b, v (in and out; see :class:`FlagKind`)
=========  ======================================================================

Flags are never read by an instruction, only observed from outside, so compiled
code does not compute them: a flag-setting instruction records which operation
it was and its operands and result (the *recipe*), and the host computes zero,
carry and overflow from the recipe when control comes back (:func:`flags_from_recipe`).

Generated code writes registers and the flag recipe through to this memory and
keeps only sp in a local (see :mod:`kforge.fast.blocks`), which it stores
whenever control leaves a function, so the state memory is exact whenever code
returns to the host.

The exported function ``run() -> i32`` returns an :class:`Exit` reason.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from kforge.machine import (
    add_carry_overflow,
    mul_carry_overflow,
    neg_carry_overflow,
    sub_carry_overflow,
)

__all__ = [
    "FAULT_EXIT_BASE",
    "REFUNDS_OFFSET",
    "STATE_WORDS",
    "Exit",
    "FlagKind",
    "Word",
    "fault_exit",
    "flags_from_recipe",
]


class Word(IntEnum):
    """Index of each u64 word of the state memory after the 256 registers."""

    PC = 256
    SP = 257
    FUEL = 258
    BUDGET_BASE = 259
    LAST_BYTE = 260
    LAST_WORD = 261
    PUSH_FLOOR = 262
    STACK_START = 263
    DETAIL = 264
    YIELD = 265
    FLAG_KIND = 266
    FLAG_A = 267
    FLAG_B = 268
    FLAG_V = 269

    @property
    def offset(self) -> int:
        """Byte offset of this word in the state memory."""
        return 8 * self.value


STATE_WORDS: Final = 270
#: Byte offset in the state memory of the refund table: for each instruction, the ticks
#: of its block's later instructions (a u8), which a fault at it gives back.
REFUNDS_OFFSET: Final = 4096


class Exit(IntEnum):
    """Why generated code returned to the host (the low byte of a fault exit is its FaultCode)."""

    HALT = 1  # HALT executed: pc stays at the HALT
    YIELD = 2  # TICK executed with yield on: pc is after the TICK
    STEP = 3  # the host must step the reference interpreter at pc (short budget, I/O, mid-block)


FAULT_EXIT_BASE: Final = 0x100


def fault_exit(code: int) -> int:
    """The exit reason for a fault with ``code`` (a ``FaultCode`` value)."""
    return FAULT_EXIT_BASE | code


class FlagKind(IntEnum):
    """The operation a flag recipe records; its a, b and v are the operands and result."""

    EXPLICIT = 0  # the host's own flags: a = zero, b = carry, v = overflow
    ADD = 1  # b and v recorded; a = v - b
    SUB = 2  # b and v recorded; a = v + b
    MUL = 3  # a, b and v recorded
    NEG = 4  # v = 0 - a; only v is recorded
    LOGIC = 5  # DIV, MOD, AND, OR, XOR, NOT, SHL, SHR: only v counts


_WORD_MASK: Final = (1 << 64) - 1
_EXPLICIT: Final = int(FlagKind.EXPLICIT)
_ADD: Final = int(FlagKind.ADD)
_SUB: Final = int(FlagKind.SUB)
_MUL: Final = int(FlagKind.MUL)
_NEG: Final = int(FlagKind.NEG)


def flags_from_recipe(kind: int, a: int, b: int, v: int) -> tuple[bool, bool, bool]:
    """Zero, carry and overflow as the spec (and ``kforge.machine``) defines them."""
    # Performance note: plain int constants, not enum members, on this per-exit path.
    if kind == _EXPLICIT:
        return a != 0, b != 0, v != 0
    zero = v == 0
    if kind == _ADD:  # v = a + b: a is recorded as v - b
        return (zero, *add_carry_overflow((v - b) & _WORD_MASK, b, v))
    if kind == _SUB:  # v = a - b: a is recorded as v + b
        return (zero, *sub_carry_overflow((v + b) & _WORD_MASK, b, v))
    if kind == _MUL:
        return (zero, *mul_carry_overflow(a, b))
    if kind == _NEG:  # v = 0 - a
        return (zero, *neg_carry_overflow(-v & _WORD_MASK))
    return zero, False, False
