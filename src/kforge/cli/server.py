"""``kforge serve``: run the HTTP/WebSocket server, the dashboard and the debugger.

Wiring (in ``kforge.cli``): call ``add_commands(subparsers)`` and dispatch
``args.handler(args)``.  The server keeps its vault under ``--data-dir``
(default ``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``) and prints the
dashboard URL with a dev token (operator scope, valid for this run only).
A port that cannot be had (busy, privileged, no such address) is one line on
stderr and exit status 2.  With ``--nats URL`` the server is a stateless gateway to
a cluster (``docs/cluster.md``).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from kforge.cli.cluster import nats_url
from kforge.cli.options import TIERS, CliError, add_data_dir_option

__all__ = ["add_commands", "command_serve", "port_number"]


def command_serve(args: argparse.Namespace) -> int:
    """Serve until interrupted; returns 0."""
    from kforge.server.app import CannotListen, serve  # the server's dependencies load only here
    from kforge.server.state import ServerConfig

    config = ServerConfig(default_preset=args.preset)
    gateway, about = None, ""
    if args.nats is not None:
        from kforge.cli.cluster import needs_cluster_extra

        needs_cluster_extra()
        from kforge.cluster.gateway import ClusterEngine

        gateway, about = ClusterEngine(args.nats), f"gateway of the cluster at {args.nats}"
    try:
        with contextlib.suppress(KeyboardInterrupt):
            serve(
                args.host,
                args.port,
                args.data_dir,
                config=config,
                engine_options={"tier": args.tier},
                engine=gateway,
                about=about,
            )
    except CannotListen as error:
        hint = "; choose another with --port" if error.in_use else ""
        raise CliError(f"serve: {error}{hint}") from None
    return 0


def port_number(text: str) -> int:
    """A TCP port: 0..65535 (0: any free port)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got '{text}'") from None
    if not 0 <= value <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"port {value} is outside 0..65535")
    return value


def add_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``serve`` command to ``subparsers``; its handler is ``args.handler``."""
    parser = subparsers.add_parser("serve", help="serve the engine over HTTP, with a dashboard")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=port_number, default=8470, help="port to listen on")
    add_data_dir_option(parser, "the SQLite vault lives")
    parser.add_argument("--tier", choices=TIERS, default="auto", help="execution tier")
    parser.add_argument(
        "--preset",
        choices=("minimal", "standard", "generous"),
        default="standard",
        help="the preset of a creation that names neither a preset nor its quota and budget",
    )
    parser.add_argument(
        "--nats",
        type=nats_url,
        metavar="URL",
        help="be a gateway to the kforge cluster on this NATS server, running no engine here",
    )
    parser.set_defaults(handler=command_serve)
