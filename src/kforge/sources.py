"""A program from the bytes a user gives: FRGP bytes, assembly text or Starlark source.

The one place that tells them apart, for every command and service that takes a
program: FRGP bytes by their magic; Starlark source by a file name ending in
``.star`` (it is compiled for a machine of ``memory_quota`` bytes and runs in any
larger quota); anything else is assembly text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from kforge.core import InvalidProgram
from kforge.program import ForgeProgram, decode_program, is_program_bytes

__all__ = ["DEFAULT_STARLARK_MEMORY", "is_starlark_name", "program_from_source"]

#: The memory quota Starlark source is compiled for when none is given.
DEFAULT_STARLARK_MEMORY: Final = 65_536


def is_starlark_name(filename: str) -> bool:
    return filename.endswith(".star")


def program_from_source(
    source: bytes,
    filename: str,
    memory_quota: int = DEFAULT_STARLARK_MEMORY,
    fetch: Callable[[bytes], bytes] | None = None,
) -> ForgeProgram:
    """The program ``source`` (read from ``filename``) stands for.  ``fetch`` gives
    Starlark's ``load("sha256:…")`` the vault objects it names.  Errors are
    ``InvalidProgram`` (a ``StarlarkCompileError`` or an assembly error for source
    text, both ``FILE:LINE:COL: message``)."""
    if is_program_bytes(source):
        try:
            return decode_program(source)
        except InvalidProgram as error:
            raise InvalidProgram(f"{filename}: {error.reason}") from None
    try:
        text = source.decode("utf-8-sig")  # a leading byte-order mark is not part of the text
    except UnicodeDecodeError as error:
        kind = "Starlark source" if is_starlark_name(filename) else "assembly text"
        raise InvalidProgram(
            f"{filename}: neither FRGP bytes nor UTF-8 {kind} (invalid UTF-8 at byte {error.start})"
        ) from None
    if is_starlark_name(filename):
        from kforge.starlark import compile_starlark

        return compile_starlark(text, filename, memory_quota=memory_quota, fetch=fetch)
    from kforge.asm import assemble

    return assemble(text, filename)
