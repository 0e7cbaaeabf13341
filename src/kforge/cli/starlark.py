"""``kforge compile``: Starlark source to FRGP bytes.

Wiring (in :mod:`kforge.cli.main`): call ``add_commands(subparsers)``; each parser
carries its ``handler``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kforge.cli.options import CliError, load_program, u64


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    compile_ = commands.add_parser("compile", help="compile a Starlark file (.star) to FRGP bytes")
    compile_.add_argument("file", help="the Starlark source")
    compile_.add_argument(
        "-o", "--output", required=True, help="where to write the FRGP bytes ('-' for stdout)"
    )
    compile_.add_argument(
        "--memory",
        type=u64,
        default=65_536,
        help="the memory quota the program is compiled for; it runs in any quota at least "
        "this large (default: 65536)",
    )
    compile_.set_defaults(handler=command_compile)

    share = commands.add_parser(
        "share",
        help="store a Starlark library in the data directory's vault; print the name "
        'that loads it: load("sha256:…", ...)',
    )
    share.add_argument("file", help="the Starlark source")
    share.set_defaults(handler=command_share)


def command_compile(args: argparse.Namespace) -> int:
    if not args.file.endswith(".star"):
        raise CliError(f"{args.file}: kforge compile takes Starlark source (a .star file)")
    program = load_program(args.file, memory_quota=args.memory)
    blob = program.encoded
    if args.output == "-":
        sys.stdout.buffer.write(blob)
        sys.stdout.flush()
        return 0
    try:
        Path(args.output).write_bytes(blob)
    except OSError as error:
        raise CliError(f"{args.output}: cannot write: {error.strerror or error}") from None
    return 0


def command_share(args: argparse.Namespace) -> int:
    """``kforge share LIB.star``: check that it compiles, store it, print its load name."""
    from kforge.cli.options import read_bytes
    from kforge.starlark import CONTENT_PREFIX
    from kforge.storage import Vault

    source = read_bytes(args.file)
    load_program(args.file)  # refuse what does not compile, with the usual one line
    with Vault.open_default() as vault:
        object_id = vault.put(source)
    sys.stdout.write(f"{CONTENT_PREFIX}{object_id.hex}\n")
    return 0
