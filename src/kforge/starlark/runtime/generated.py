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
EXTERNAL: Final = frozenset({"method_number", "method_names"})


def method_number(tag: int, name: int) -> int:
    """The number of method ``name`` (a str) of type ``tag`` in this program, or 0."""
    raise NotRuntimeCode(method_number.__name__)


def method_names(tag: int) -> int:
    """A static tuple of the sorted method names of type ``tag``."""
    raise NotRuntimeCode(method_names.__name__)
