"""Pieces of WebAssembly text the compiler's writers share: constants, state words, exits.

Generated code leaves a region's function through an *exit stub*
(:class:`ExitStubs`), one per reason: an exit sets ``$pc`` and branches to it.
"""

from __future__ import annotations

from typing import Final

from kforge.fast.abi import FAULT_EXIT_BASE, REFUNDS_OFFSET, FlagKind, Word

__all__ = [
    "RETURN",
    "ROUTE",
    "ExitStubs",
    "i64_const",
    "recipe_stores",
    "register_local",
    "state_load",
    "state_store",
]

_SIGN_BIT: Final = 1 << 63
_I64_WRAP: Final = 1 << 64
#: ``$reason`` of an exit returning ``$pc`` to the wasm caller (a RET to its call), and of
#: one going on at ``$pc`` through ``$route`` (a tail call); host exits are positive.
RETURN: Final = 0
ROUTE: Final = -1


def i64_const(value: int) -> str:
    """An ``i64.const`` of a u64 value (written signed)."""
    return f"i64.const {value - _I64_WRAP if value & _SIGN_BIT else value}"


def register_local(number: int) -> str:
    return f"$r{number}"


def state_load(word: int) -> list[str]:
    """Push state word ``word``."""
    return ["i32.const 0", f"i64.load $state offset={8 * word}"]


def state_store(word: int, local: str) -> list[str]:
    """Store ``local`` into state word ``word``."""
    return ["i32.const 0", f"local.get {local}", f"i64.store $state offset={8 * word}"]


class ExitStubs:
    """The exit stubs of one function, one per exit reason, all ending in ``$leave``.

    An exit sets ``$pc`` and branches to the stub of its reason, which sets
    ``$reason`` (and, for a fault, gives back the ticks of the block's later
    instructions, read from the refund table in the state memory).  Performance
    note: an exit is three instructions, whatever it stores.
    """

    def __init__(self) -> None:
        self._labels: dict[int, str] = {}

    def label(self, reason: int) -> str:
        """The label an exit for ``reason`` branches to, ``$pc`` set."""
        label = self._labels.get(reason)
        if label is None:
            label = self._labels[reason] = f"$e{len(self._labels)}"
        return label

    def openers(self) -> list[str]:
        """``block`` openers, outermost first."""
        return [f"block {label}" for label in reversed(self._labels.values())]

    def stubs(self) -> list[str]:
        """Each stub's code after its ``end``, innermost first."""
        out: list[str] = []
        for reason in self._labels:
            out += ["end", f"i32.const {reason}", "local.set $reason"]
            if reason >= FAULT_EXIT_BASE:
                out += ["local.get $pc", f"i64.load8_u $state offset={REFUNDS_OFFSET}"]
                out += ["local.get $fuel", "i64.add", "local.set $fuel"]
            out.append("br $leave")
        return out


def recipe_stores(kind: FlagKind, v: str, b: str, a: str) -> list[str]:
    """Store the flag recipe of a ``kind`` setter whose result and operands ``v``, ``b`` and
    ``a`` hold (the locals the kind needs)."""
    out = ["i32.const 0", i64_const(kind), f"i64.store $state offset={Word.FLAG_KIND.offset}"]
    out += state_store(Word.FLAG_V, v)
    if kind in (FlagKind.ADD, FlagKind.SUB, FlagKind.MUL):
        out += state_store(Word.FLAG_B, b)
    if kind == FlagKind.MUL:
        out += state_store(Word.FLAG_A, a)
    return out
