"""The machine operations the runtime dialect (:mod:`kforge.starlark.lowlevel`) offers.

These definitions exist so that mypy checks the runtime's modules; the dialect's
compiler turns each call into machine instructions, and Python never runs them.
Every value is one unsigned 64-bit word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

_F = TypeVar("_F", bound=Callable[..., object])


class NotRuntimeCode(Exception):
    """Raised if Python ever executes runtime code (it is compiled, never run)."""


def _compiled_only() -> NotRuntimeCode:
    return NotRuntimeCode("runtime functions are compiled to Forge code, not run by Python")


class StaticText(int):
    """What :func:`text` gives Python: an int for the type checker that remembers its
    text for the runtime dialect's compiler."""

    literal: str | bytes

    def __new__(cls, literal: str | bytes) -> StaticText:
        value = super().__new__(cls, 0)
        value.literal = literal
        return value


def text(literal: str | bytes) -> int:
    """The address of a static ``str`` (or ``bytes``) object with this content: how the
    runtime writes a string constant (a plain string literal is one too, but ``text``
    keeps the type checker's view honest: every runtime value is a word)."""
    return StaticText(literal)


class LazyTable(StaticText):
    """What :func:`table` gives Python (see :class:`StaticText`)."""


def table(literal: bytes) -> int:
    """The address of a ``bytes`` object with this content, made on the heap by code the
    first time the program reads it, then kept: for a table most programs never read,
    which then costs them no static data.  (Not to be read first between a heap mark
    and its ``heap_release``, which would give it back.)"""
    return LazyTable(literal)


class Global:
    """One word of mutable runtime state in the data section; read and assign ``.value``."""

    def __init__(self, module: str, initial: int = 0) -> None:
        self.module = module
        self.initial = initial
        self.value = initial


#: Tested alone by ``if FLOATS:``: the guarded statements are compiled only into the
#: variant of the function that programs using floats link (see
#: :mod:`kforge.starlark.lowlevel`).
FLOATS: int = 1


def noreturn(function: _F) -> _F:
    """Marks a function that never returns (it ends the machine or unwinds)."""
    return function


def cold(function: _F) -> _F:
    """Marks a function that only error paths call (it words a message): its string
    literals are made on the heap by code when reached, not laid out as static data."""
    return function


def inline(function: _F) -> _F:
    """Marks a small function copied into the runtime functions that call it (see
    :mod:`kforge.starlark.inline`): no call, no moves, no saves around it."""
    return function


def checked(function: _F) -> _F:
    """Marks a function whose stack depth is checked on entry (it recurses)."""
    return function


def load(address: int) -> int:
    """The word at ``address`` (``LOADW``; ``base + constant`` folds into the offset)."""
    raise _compiled_only()


def loadb(address: int) -> int:
    """The byte at ``address``, zero-extended (``LOAD``)."""
    raise _compiled_only()


def store(address: int, value: int) -> None:
    """Write the word ``value`` at ``address`` (``STOREW``)."""
    raise _compiled_only()


def storeb(address: int, value: int) -> None:
    """Write the low byte of ``value`` at ``address`` (``STORE``)."""
    raise _compiled_only()


def send(channel: int, address: int, length: int) -> None:
    """``SEND`` the bytes at ``address`` on a constant ``channel``."""
    raise _compiled_only()


def recv(channel: int, address: int, room: int) -> int:
    """``RECV`` on a constant ``channel``: copies at most ``room`` bytes, returns the length."""
    raise _compiled_only()


def poll(channel: int) -> int:
    """The number of messages waiting on a constant ``channel``."""
    raise _compiled_only()


def budget() -> int:
    """Ticks left after this instruction."""
    raise _compiled_only()


def tick() -> None:
    """A yield point for the scheduler."""
    raise _compiled_only()


def push(value: int) -> None:
    raise _compiled_only()


def pop() -> int:
    raise _compiled_only()


def halt() -> NoReturn:
    raise _compiled_only()


def fault(code: int) -> NoReturn:
    """``FAULT code``: ends the machine with ``USER_FAULT``."""
    raise _compiled_only()


def heap_pointer() -> int:
    raise _compiled_only()


def set_heap_pointer(value: int) -> None:
    raise _compiled_only()


def heap_limit() -> int:
    raise _compiled_only()


def set_heap_limit(value: int) -> None:
    raise _compiled_only()


def slt(a: int, b: int) -> int:
    """1 if ``a < b`` as signed words."""
    raise _compiled_only()


def sle(a: int, b: int) -> int:
    raise _compiled_only()


def sgt(a: int, b: int) -> int:
    raise _compiled_only()


def sge(a: int, b: int) -> int:
    raise _compiled_only()


def sar(value: int, shift: int) -> int:
    """Arithmetic shift right."""
    raise _compiled_only()


def code_address(function: Callable[..., object]) -> int:
    """The code index of a runtime function's entry."""
    raise _compiled_only()


def data_address(name: str) -> int:
    """The address of a named static data item the compiler laid out."""
    raise _compiled_only()


def call_address(address: int, *args: int) -> int:
    """Call the code at ``address`` with ``args`` in r1.. and return r1."""
    raise _compiled_only()


def jump_address(address: int, *args: int) -> NoReturn:
    """Jump to the code at ``address`` with ``args`` in the argument registers, keeping
    the stack (a tail call)."""

    raise _compiled_only()


def catch_call(function: Callable[..., int], *args: int) -> int:
    """Call a runtime function at a site where an error stops unwinding: if the call
    raises, control comes back here (see ``core.error`` and ``core.caught_error``)."""
    raise _compiled_only()


def site_info(return_address: int) -> int:
    """The site word of a return address (see :func:`kforge.starlark.emit.site_word`)."""
    raise _compiled_only()
