"""What every ``kforge`` subcommand shares: the one-line error, the parser and its help,
argument types, the machine options of ``run``/``prove``/``sandbox create``, and
reading programs, input and output files (``-`` is stdin or stdout).

A leaf module: every other ``kforge.cli`` module imports it, never the reverse.  It
imports nothing heavy, so that building the parser (``kforge --help``) stays cheap:
whatever a command needs beyond this is imported when that command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, NoReturn, TextIO

from kforge.isa import GRANTABLE_CHANNELS, WORD_MASK
from kforge.sources import DEFAULT_STARLARK_MEMORY
from kforge.tiers import TIERS

if TYPE_CHECKING:
    from kforge.program import ForgeProgram

__all__ = [
    "PROGRAM_HELP",
    "STDIO",
    "TIERS",
    "CliError",
    "Parser",
    "add_data_dir_option",
    "add_machine_options",
    "channel_grant",
    "environment_entry",
    "load_program",
    "read_bytes",
    "read_input",
    "show_help",
    "u64",
    "write_bytes",
    "write_output",
]

#: The path that means stdin (for a file read) or stdout (for ``-o``).
STDIO = "-"


class CliError(Exception):
    """A problem with the command line or its files: reported as one line, exit 2."""


class HelpFormatter(argparse.HelpFormatter):
    """Help that states each option's default: its value, or "none" when it has none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        flag = action.nargs == 0  # --json, --help: present or not, nothing to default
        if not action.option_strings or flag or action.required or "default" in text:
            return action.help
        default = action.default
        stated = "none" if default is None or default == [] or default == "" else "%(default)s"
        return f"{text} (default: {stated})" if text else f"(default: {stated})"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are a ``CliError`` (one line, exit 2), not an exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "kforge sandbox status" -> "sandbox status"
        raise CliError(f"{command}: {message}" if command else message)


def show_help(parser: argparse.ArgumentParser) -> int:
    """A command group given no command (``kforge``, ``kforge sandbox``): as ``--help``, exit 0."""
    parser.print_help(sys.stdout)
    return 0


def u64(text: str) -> int:
    """An argument that must be an integer in 0..2^64-1 (``0x`` and ``0b`` prefixes allowed)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
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
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return key.encode("utf-8", "surrogateescape"), value.encode("utf-8", "surrogateescape")


def add_machine_options(parser: argparse.ArgumentParser) -> None:
    """``--ticks --memory --input|--input-file --grant --env --tier``, as ``kforge run`` takes them."""
    parser.add_argument("--ticks", type=u64, default=1_000_000, metavar="N", help="tick budget")
    parser.add_argument(
        "--memory", type=u64, default=65_536, metavar="BYTES", help="memory quota in bytes"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", default="", metavar="TEXT", help="stdin message, as UTF-8 text")
    source.add_argument(
        "--input-file", metavar="PATH", help="file whose bytes are the stdin message (- for stdin)"
    )
    parser.add_argument(
        "--grant",
        type=channel_grant,
        action="append",
        default=[],
        metavar="CH",
        help="open host channel CH (3..7) to the program (repeatable)",
    )
    parser.add_argument(
        "--env",
        type=environment_entry,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment entry (repeatable)",
    )
    parser.add_argument("--tier", choices=TIERS, default="auto", help="execution tier")


def add_data_dir_option(parser: argparse.ArgumentParser, holds: str) -> None:
    """``--data-dir``: where ``holds`` (the node key, the vault, …) lives."""
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"where {holds} (default: $KFORGE_DATA_DIR, else ~/.local/share/kforge)",
    )


def read_bytes(path: str) -> bytes:
    """The bytes of ``path`` (``-``: all of stdin), or a ``CliError`` naming it."""
    if path == STDIO:
        stdin: Any = sys.stdin
        if stdin is None:
            raise CliError("-: cannot read: there is no stdin")
        stream: BinaryIO | None = getattr(stdin, "buffer", None)
        data: bytes = stream.read() if stream is not None else stdin.read().encode("utf-8")
        return data
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise CliError(f"{path}: cannot read: {error.strerror or error}") from None


def write_bytes(stream: TextIO, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` unchanged to a text stream's bytes (after what it holds already)."""
    stream.flush()
    binary: BinaryIO | None = getattr(stream, "buffer", None)
    if binary is None:  # an in-memory text stream has no bytes underneath
        stream.write(bytes(data).decode("utf-8", "replace"))
        return
    binary.write(data)
    binary.flush()


def write_output(path: str, data: bytes, what: str) -> None:
    """Write ``data`` (``what``: "FRGP bytes", …) to ``path``, or stdout for ``-``.

    Binary data is not written to a terminal, where it would only garble the screen.
    """
    if path == STDIO:
        if sys.stdout.isatty():
            raise CliError(f"-: not writing {what} to a terminal; redirect stdout or give a file")
        write_bytes(sys.stdout, data)
        return
    try:
        Path(path).write_bytes(data)
    except OSError as error:
        raise CliError(f"{path}: cannot write: {error.strerror or error}") from None


def read_input(args: argparse.Namespace) -> bytes:
    """The stdin message of ``--input TEXT`` (UTF-8) or ``--input-file PATH``."""
    if args.input_file is not None:
        return read_bytes(args.input_file)
    data: bytes = args.input.encode("utf-8", "surrogateescape")
    return data


#: What a command that takes a program file accepts (its ``--help`` words).
PROGRAM_HELP: Final = "assembly text, Starlark source (.star) or FRGP bytes"


def load_program(path: str, memory_quota: int = DEFAULT_STARLARK_MEMORY) -> ForgeProgram:
    """Read FRGP bytes, assembly text or Starlark source (a ``.star`` file, compiled for
    a machine of ``memory_quota`` bytes) from ``path`` (``-``: stdin); see
    :func:`kforge.sources.program_from_source`."""
    from kforge.sources import program_from_source

    return program_from_source(read_bytes(path), path, memory_quota, fetch=vault_fetch)


def vault_fetch(object_id: bytes) -> bytes:
    """An object of the data directory's vault (for Starlark's ``load("sha256:…")``)."""
    from kforge.core import Hash256
    from kforge.storage import Vault

    with Vault.open_default() as vault:
        return vault.get(Hash256(object_id))
