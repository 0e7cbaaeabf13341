"""The size limits on everything kforge reads from outside, checked before anything is allocated.

A number an input names (a ``.zero`` count, a section count in a container, an
import list's length, a snapshot's memory quota) is compared with its limit here
before kforge allocates or loops on it, so a short request can never make the
host hold or compute much more than the request itself.  ``docs/security.md``
lists every limit with its value and why.

The limits also bound the work: assembling, decoding, disassembling and
linking are linear in their input, so a caller that must answer in bounded
time (the server, off its event loop) can check :func:`check_source` or
:func:`check_program_bytes` first and then give the work a time limit.
"""

from __future__ import annotations

from typing import Final

from kforge.core import ErrorCategory, ForgeError

__all__ = [
    "MAX_CODE_LENGTH",
    "MAX_DATA_BYTES",
    "MAX_LINK_IMPORTS",
    "MAX_METADATA_BYTES",
    "MAX_PROGRAM_BYTES",
    "MAX_SOURCE_BYTES",
    "MAX_STARLARK_MODULES",
    "MAX_STARLARK_SOURCE_BYTES",
    "MAX_SYMBOLS",
    "MAX_TRACE_SAMPLES",
    "InputTooLarge",
    "check_program_bytes",
    "check_size",
    "check_source",
]

#: Assembly text, in characters (two to three million typical lines; assembling it is linear).
MAX_SOURCE_BYTES: Final = 32 << 20
#: One FRGP container, in bytes: room for the largest code, data and metadata sections.
MAX_PROGRAM_BYTES: Final = 48 << 20
#: Instructions in one program (16 MiB of code).
MAX_CODE_LENGTH: Final = 1 << 20
#: Bytes in one program's data section.  FRGP v1 stores every data byte, zeros
#: included (it has no sparse form), so ``.zero`` and ``.align`` count against this.
MAX_DATA_BYTES: Final = 16 << 20
#: Bytes in one program's metadata section.
MAX_METADATA_BYTES: Final = 1 << 20
#: Symbols in one program.
MAX_SYMBOLS: Final = 1 << 16
#: Entries in one link's import list (each may fetch a dependency from the vault).
MAX_LINK_IMPORTS: Final = 4096
#: Samples in one trace: a proof's sample interval must keep its run under this many.
MAX_TRACE_SAMPLES: Final = 1 << 20
#: One Starlark file, in bytes (compiling is linear, but costs about 0.2 s per thousand lines).
MAX_STARLARK_SOURCE_BYTES: Final = 4 << 20
#: Files one Starlark program may load, directly or not.
MAX_STARLARK_MODULES: Final = 256


class InputTooLarge(ForgeError):
    """An input over its documented limit, refused before any of it was processed."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 413

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is too large: {size} is over the limit of {limit}")
        self.what = what
        self.size = size
        self.limit = limit


def check_size(what: str, size: int, limit: int) -> None:
    """Raise ``InputTooLarge`` when ``size`` is over ``limit``."""
    if size > limit:
        raise InputTooLarge(what, size, limit)


def check_source(text: str) -> None:
    """Refuse assembly text longer than ``MAX_SOURCE_BYTES`` characters."""
    check_size("assembly source (characters)", len(text), MAX_SOURCE_BYTES)


def check_program_bytes(blob: bytes | bytearray | memoryview) -> None:
    """Refuse an FRGP container longer than ``MAX_PROGRAM_BYTES``."""
    check_size("program container (bytes)", len(blob), MAX_PROGRAM_BYTES)
