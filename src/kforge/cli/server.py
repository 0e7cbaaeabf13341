"""``kforge serve``: run the HTTP/WebSocket server, the dashboard and the debugger.

Wiring (in ``kforge.cli``): call ``add_commands(subparsers)`` and dispatch
``args.handler(args)``.  The server keeps its vault under ``--data-dir``
(default ``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``) and prints the
dashboard URL with a dev token (operator scope, valid for this run only).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

__all__ = ["add_commands", "command_serve"]


def command_serve(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns 0."""
    from kforge.server import serve  # late: the server's dependencies load only for this command

    with contextlib.suppress(KeyboardInterrupt):
        serve(args.host, args.port, args.data_dir, engine_options={"tier": args.tier})
    return 0


def add_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``serve`` command to ``subparsers``; its handler is ``args.handler``."""
    parser = subparsers.add_parser("serve", help="serve the engine over HTTP, with a dashboard")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8470, help="port (default 8470)")
    parser.add_argument("--data-dir", default=None, help="where the SQLite vault lives")
    parser.add_argument(
        "--tier", choices=("auto", "reference", "fast"), default="auto", help="execution tier"
    )
    parser.set_defaults(handler=command_serve)
