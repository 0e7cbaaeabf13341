"""Runtime functions the compiler makes for each program (see
:mod:`kforge.starlark.tables` and :mod:`kforge.starlark.emit`).

The runtime calls them by name like any other; these definitions exist only so that
mypy checks those calls.  The runtime dialect's compiler knows them as
:data:`EXTERNAL`.
"""

from __future__ import annotations

from typing import Final

from kforge.starlark.runtime.intrinsics import NotRuntimeCode

#: Names of functions the runtime may call that the compiler makes per program.
EXTERNAL: Final = frozenset({"method_number", "method_names", "gc_alloc"})


def method_number(tag: int, name: int) -> int:
    """The number of method ``name`` (a str) of type ``tag`` in this program, or 0."""
    raise NotRuntimeCode(method_number.__name__)


def method_names(tag: int) -> int:
    """A static tuple of the sorted method names of type ``tag``."""
    raise NotRuntimeCode(method_names.__name__)


def gc_alloc(size: int) -> int:
    """``size`` bytes from the allocation slow path (see ``kforge.starlark.emit.GC_ALLOC``):
    every register but ``r1`` kept; the out-of-memory error when there is no room."""
    raise NotRuntimeCode(gc_alloc.__name__)
