"""A program from the bytes a user gives: FRGP bytes, assembly text or Starlark source.

The one place that tells them apart, for every command and service that takes a
program: FRGP bytes by their magic; Starlark source by a file name ending in
``.star`` (it is compiled for a machine of ``memory_quota`` bytes and runs in any
larger quota); anything else is assembly text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from kforge.core import InvalidProgram
from kforge.program import ForgeProgram, decode_program, is_program_bytes

__all__ = [
    "DEFAULT_STARLARK_MEMORY",
    "compile_starlark_upload",
    "gather_libraries",
    "is_starlark_name",
    "program_from_source",
]

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


#: A content id as Starlark's ``load()`` names a library stored in a vault.
_CONTENT_ID: Final = re.compile(r"sha256:([0-9a-f]{64})")


def gather_libraries(
    text: str, fetch: Callable[[bytes], bytes | None]
) -> dict[bytes, bytes | None]:
    """The vault objects Starlark ``text`` may load by content id, and those they may
    load in turn, by raw id: every ``sha256:HEX`` the texts spell that ``fetch`` finds
    (``None``: not there; the compile then says so).  An upload's libraries take at
    most ``MAX_STARLARK_SOURCE_BYTES`` together and ``MAX_STARLARK_MODULES`` in number:
    one left out for that maps to ``None`` (and its compile says why)."""
    from kforge.limits import MAX_STARLARK_MODULES, MAX_STARLARK_SOURCE_BYTES

    found: dict[bytes, bytes | None] = {}
    missing: set[bytes] = set()  # asked for once, not found: neither asked for again nor kept
    total = 0
    pending = [text]
    while pending:
        for digest in _CONTENT_ID.findall(pending.pop()):
            object_id = bytes.fromhex(digest)
            if object_id in found or object_id in missing:
                continue
            if len(found) + len(missing) >= MAX_STARLARK_MODULES:
                found[object_id] = None
                continue
            data = fetch(object_id)
            if data is None:
                missing.add(object_id)
                continue
            if total + len(data) > MAX_STARLARK_SOURCE_BYTES:
                found[object_id] = None
                continue
            total += len(data)
            found[object_id] = data
            pending.append(data.decode("utf-8", "replace"))
    return found


def compile_starlark_upload(
    text: str, filename: str, memory_quota: int, libraries: Mapping[bytes, bytes | None]
) -> ForgeProgram:
    """Starlark source sent to a server, compiled for ``memory_quota`` bytes: it reads
    none of the server's files (a ``load()`` of a file name is a compile error); a
    ``load("sha256:…")`` takes its library from ``libraries`` (see
    :func:`gather_libraries`)."""
    from kforge.limits import MAX_STARLARK_MODULES, MAX_STARLARK_SOURCE_BYTES
    from kforge.starlark import CONTENT_PREFIX, compile_starlark

    def no_files(name: str) -> str:
        raise ValueError(f"an upload loads libraries by content id ({CONTENT_PREFIX}…), not files")

    def fetch(object_id: bytes) -> bytes:
        if object_id not in libraries:
            raise LookupError("no such object in the vault")
        data = libraries[object_id]
        if data is None:
            raise LookupError(
                f"an upload's libraries are at most {MAX_STARLARK_MODULES} files"
                f" of {MAX_STARLARK_SOURCE_BYTES} bytes together"
            )
        return data

    return compile_starlark(text, filename, loader=no_files, memory_quota=memory_quota, fetch=fetch)
