"""Starlark, compiled to Forge programs that run metered to the tick on both tiers.

:func:`compile` turns Starlark source into a :class:`~kforge.program.ForgeProgram`;
``docs/starlark.md`` describes the language accepted, the value layout, the calling
convention and the runtime.
"""

from kforge.starlark.compiler import CONTENT_PREFIX, DEFAULT_MEMORY, Fetch, Loader, compile_starlark
from kforge.starlark.errors import StarlarkCompileError

compile = compile_starlark

__all__ = [
    "CONTENT_PREFIX",
    "DEFAULT_MEMORY",
    "Fetch",
    "Loader",
    "StarlarkCompileError",
    "compile",
    "compile_starlark",
]
