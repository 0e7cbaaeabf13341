"""``kforge link MAIN LIB... -o OUT``: link a program with libraries into one FRGP file.

MAIN and each LIB are assembly text or FRGP bytes (told apart by the magic).
Every library is merged, in command-line order; the import list is derived by
name (``kforge.link.derive_imports``): each symbol the program or a library
imports is taken from the library that exports it.  Prints one line on success
(the output path, its program id and sizes); errors propagate as ``CliError``
or ``ForgeError``, which ``kforge.cli.main`` reports as one line, exit 2.

Wiring (in ``kforge.cli``): call ``add_commands(subparsers)`` and dispatch
``args.handler(args)`` (or merge ``COMMANDS`` into the command table).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kforge.cli.options import PROGRAM_HELP, STDIO, load_program, write_output

if TYPE_CHECKING:
    from kforge.core import Hash256
    from kforge.program import ForgeProgram

__all__ = ["COMMANDS", "add_commands", "command_link"]


def command_link(args: argparse.Namespace) -> int:
    """Link ``args.main`` with ``args.libraries`` and write ``args.output``; returns 0."""
    from kforge.core import VaultFetchFailed
    from kforge.link import derive_imports, link

    program = load_program(args.main)
    libraries = [load_program(path) for path in args.libraries]
    store = {library.program_id: library for library in libraries}

    def fetch(object_id: Hash256) -> ForgeProgram:
        found = store.get(object_id)
        if found is None:
            raise VaultFetchFailed(object_id, "not among the libraries given")
        return found

    imports = derive_imports(program, libraries)
    linked = link(program, imports, fetch)
    write_output(args.output, linked.encoded, "FRGP bytes")
    # With the program itself on stdout, the line about it goes to stderr.
    (sys.stderr if args.output == STDIO else sys.stdout).write(
        f"{args.output}: {linked.program_id} ({len(linked.code)} instructions, "
        f"{len(linked.data)} data bytes, {len(imports)} imports)\n"
    )
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"link": command_link}


def add_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``link`` command to ``subparsers``; its handler is ``args.handler``."""
    parser = subparsers.add_parser("link", help="link a program with libraries into one FRGP file")
    parser.add_argument("main", metavar="MAIN", help=f"the program: {PROGRAM_HELP}")
    parser.add_argument(
        "libraries", metavar="LIB", nargs="+", help="libraries whose exports it imports"
    )
    parser.add_argument(
        "-o", "--output", required=True, help="where to write the FRGP bytes (- for stdout)"
    )
    parser.set_defaults(handler=command_link)
