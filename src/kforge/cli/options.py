"""What every ``kforge`` subcommand shares: the one-line error, argument types,
the machine options of ``run``/``prove``/``sandbox create``, and reading programs
and input.

A leaf module: every other ``kforge.cli`` module imports it, never the reverse.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kforge.asm import assemble
from kforge.core import InvalidProgram
from kforge.isa import GRANTABLE_CHANNELS, WORD_MASK
from kforge.program import ForgeProgram, decode_program, is_program_bytes
from kforge.tiers import TIERS

__all__ = [
    "TIERS",
    "CliError",
    "add_machine_options",
    "channel_grant",
    "environment_entry",
    "load_program",
    "read_bytes",
    "read_input",
    "u64",
]


class CliError(Exception):
    """A problem with the command line or its files: reported as one line, exit 2."""


def u64(text: str) -> int:
    """An argument that must be an integer in 0..2^64-1 (``0x`` and ``0b`` prefixes allowed)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= WORD_MASK:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..2^64-1")
    return value


def channel_grant(text: str) -> int:
    """A channel that may be granted at creation: 3..7."""
    value = u64(text)
    if value not in GRANTABLE_CHANNELS:
        raise argparse.ArgumentTypeError(f"channel {value} cannot be granted (only 3..7)")
    return value


def environment_entry(text: str) -> tuple[bytes, bytes]:
    """``KEY=VALUE`` as bytes; like ``--input``, non-UTF-8 command-line bytes stay themselves."""
    key, separator, value = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.encode("utf-8", "surrogateescape"), value.encode("utf-8", "surrogateescape")


def add_machine_options(parser: argparse.ArgumentParser) -> None:
    """``--ticks --memory --input|--input-file --grant --env --tier``, as ``kforge run`` takes them."""
    parser.add_argument("--ticks", type=u64, default=1_000_000, help="tick budget")
    parser.add_argument("--memory", type=u64, default=65_536, help="memory quota in bytes")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", default="", help="stdin text (UTF-8)")
    source.add_argument("--input-file", help="file whose bytes are stdin")
    parser.add_argument("--grant", type=channel_grant, action="append", default=[])
    parser.add_argument(
        "--env",
        type=environment_entry,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment entry (repeatable)",
    )
    parser.add_argument("--tier", choices=TIERS, default="auto", help="execution tier")


def read_bytes(path: str) -> bytes:
    """The bytes of ``path``, or a ``CliError`` naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise CliError(f"{path}: cannot read: {error.strerror or error}") from None


def read_input(args: argparse.Namespace) -> bytes:
    """The stdin message of ``--input TEXT`` (UTF-8) or ``--input-file PATH``."""
    if args.input_file is not None:
        return read_bytes(args.input_file)
    data: bytes = args.input.encode("utf-8", "surrogateescape")
    return data


#: The memory quota a ``.star`` file is compiled for when the command has no ``--memory``.
STARLARK_MEMORY = 65_536


def load_program(path: str, memory_quota: int = STARLARK_MEMORY) -> ForgeProgram:
    """Read FRGP bytes, assembly text or Starlark source (a ``.star`` file, compiled for
    a machine of ``memory_quota`` bytes) from ``path``; FRGP is told by its magic."""
    blob = read_bytes(path)
    if path.endswith(".star") and not is_program_bytes(blob):
        return compile_starlark_file(path, blob, memory_quota)
    if is_program_bytes(blob):
        try:
            return decode_program(blob)
        except InvalidProgram as error:
            raise InvalidProgram(f"{path}: {error.reason}") from None
    try:
        text = blob.decode("utf-8-sig")  # a leading byte-order mark is not part of the text
    except UnicodeDecodeError as error:
        raise CliError(
            f"{path}: neither FRGP bytes nor UTF-8 assembly text "
            f"(invalid UTF-8 at byte {error.start})"
        ) from None
    return assemble(text, path)


def compile_starlark_file(path: str, blob: bytes, memory_quota: int) -> ForgeProgram:
    """Compile the Starlark source ``blob`` read from ``path``."""
    from kforge.starlark import StarlarkCompileError, compile_starlark

    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise StarlarkCompileError(path, 1, 1, f"invalid UTF-8 at byte {error.start}") from None
    return compile_starlark(text, path, memory_quota=memory_quota)
