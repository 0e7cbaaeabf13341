"""``kforge worker`` and ``kforge cluster up|status``: a kforge cluster on NATS JetStream.

``kforge worker --nats URL`` runs partitions of the cluster at URL until SIGTERM or
Ctrl-C, then drains (hands its partitions over) and exits 0.  ``kforge serve --nats
URL`` is the gateway (``kforge.cli.server``).  ``kforge cluster up`` starts, on this
machine, a nats-server with JetStream in ``DATA_DIR/nats``, N workers and a gateway;
``kforge cluster status`` shows the workers, their partitions and load.
``docs/cluster.md`` has the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from kforge.cli.options import TIERS, CliError, add_data_dir_option

__all__ = ["add_commands", "nats_url", "needs_cluster_extra"]

#: The URL schemes a NATS client connects with.
_NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def nats_url(text: str) -> str:
    """A NATS server's URL, checked before anything tries it: ``nats://host:port`` (or
    ``tls``, ``ws``, ``wss``); several, for a NATS cluster, separated by commas."""
    for one in text.split(","):
        try:
            parsed = urlsplit(one.strip())
            port = parsed.port
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"'{one}' is no URL: {error}") from None
        if parsed.scheme not in _NATS_SCHEMES:
            raise argparse.ArgumentTypeError(
                f"'{one}' is no NATS URL: expected nats://HOST:PORT "
                f"(schemes {', '.join(_NATS_SCHEMES)})"
            )
        if not parsed.hostname:
            raise argparse.ArgumentTypeError(f"'{one}' names no host: expected nats://HOST:PORT")
        if port == 0:
            raise argparse.ArgumentTypeError(f"'{one}': port 0 is no server's port")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not 0.2 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{value} is outside 0.2..3600 seconds")
    return value


def _count(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


def needs_cluster_extra() -> None:
    try:
        import nats  # noqa: F401
    except ImportError:
        raise CliError(
            "the cluster needs the nats-py client: install kforge with its cluster extra "
            "(pip install 'kforge[cluster]', or make setup)"
        ) from None


def command_worker(args: argparse.Namespace) -> int:
    """Run a worker until SIGTERM or Ctrl-C; returns 0 once drained."""
    needs_cluster_extra()
    import asyncio
    import signal

    from kforge.cluster.worker import Worker, WorkerConfig

    config = WorkerConfig(
        url=args.nats,
        worker_id=args.id or "",
        lease_seconds=args.lease,
        tier=args.tier,
        partitions=args.partitions,
    )
    worker = Worker(config)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        running = asyncio.current_task()

        def on_signal() -> None:
            if worker.layout is None and running is not None:
                running.cancel()  # still waiting for NATS: nothing to hand over
            stop.set()

        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, on_signal)
        await worker.run(stop)

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        worker.say("stopped before NATS was reachable")
    return 0


class _Stopped(Exception):
    """SIGTERM (or Ctrl-C) reached ``kforge cluster up``."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped


def command_up(args: argparse.Namespace) -> int:
    """Start nats-server, workers and a gateway here; stop them all on Ctrl-C or SIGTERM
    (the workers drain first, then the gateway and NATS stop)."""
    needs_cluster_extra()
    import signal
    from pathlib import Path

    from kforge.cluster.local import LocalCluster
    from kforge.storage import default_data_dir

    folder = Path(args.data_dir) if args.data_dir else default_data_dir() / "cluster"
    cluster = LocalCluster(folder, nats_port=args.nats_port, tier=args.tier)
    try:
        cluster.nats.start()
    except (OSError, RuntimeError) as error:
        raise CliError(f"cluster up: {error}") from None
    print(
        f"kforge cluster: nats-server with JetStream on {cluster.url} (store in {folder / 'nats'})"
    )
    print(f"kforge cluster: see it with: kforge cluster status --nats {cluster.url}", flush=True)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, _raise_stopped)
    try:
        for index in range(args.workers):
            cluster.start_worker(f"worker-{index + 1}")
        cluster.start_gateway("gateway", host=args.host, port=args.port)
        print(
            f"kforge cluster: {args.workers} workers and a gateway; Ctrl-C stops them", flush=True
        )
        while not cluster.exited():
            time.sleep(0.5)
        raise CliError(f"cluster up: {', '.join(cluster.exited())} exited; stopping the others")
    except _Stopped:
        print("kforge cluster: stopping (the workers drain first)", file=sys.stderr, flush=True)
        return 0
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, signal.SIG_IGN)  # stopping is not interrupted again
        cluster.stop()


def command_status(args: argparse.Namespace) -> int:
    """Print the workers, their partitions and load; the partitions nobody runs."""
    needs_cluster_extra()
    import asyncio

    from kforge.cluster.status import cluster_status, format_status

    try:
        status = asyncio.run(cluster_status(args.nats))
    except Exception as error:
        raise CliError(f"cluster status: {error}") from None
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        sys.stdout.write(format_status(status))
    return 0


def add_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``worker`` and ``cluster`` to ``subparsers``; handlers are ``args.handler``."""
    worker = subparsers.add_parser("worker", help="run partitions of a kforge cluster on NATS")
    worker.add_argument(
        "--nats", required=True, type=nats_url, metavar="URL", help="the NATS server"
    )
    worker.add_argument("--id", metavar="NAME", help="the worker's name (default: host-pid-random)")
    worker.add_argument(
        "--lease",
        type=_seconds,
        default=3.0,
        metavar="SECONDS",
        help="lease time: how long a dead worker's partitions wait for another",
    )
    worker.add_argument("--tier", choices=TIERS, default="auto", help="execution tier")
    worker.add_argument(
        "--partitions",
        type=_count(1, 1024),
        default=16,
        metavar="N",
        help="partitions of a new cluster (an existing one keeps its own)",
    )
    worker.set_defaults(handler=command_worker)

    cluster = subparsers.add_parser("cluster", help="a kforge cluster on this machine, its status")
    commands = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    up = commands.add_parser("up", help="start nats-server, workers and a gateway here")
    up.add_argument("--workers", type=_count(1, 64), default=2, metavar="N", help="workers")
    up.add_argument("--host", default="127.0.0.1", help="address the gateway listens on")
    up.add_argument("--port", type=_count(0, 65535), default=8470, help="the gateway's port")
    up.add_argument(
        "--nats-port", type=_count(0, 65535), default=4222, help="nats-server's port (0: any)"
    )
    up.add_argument("--tier", choices=TIERS, default="auto", help="execution tier")
    add_data_dir_option(up, "the cluster's NATS store lives (in cluster/nats)")
    up.set_defaults(handler=command_up)
    status = commands.add_parser("status", help="workers, their partitions and load")
    status.add_argument(
        "--nats", required=True, type=nats_url, metavar="URL", help="the NATS server"
    )
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.set_defaults(handler=command_status)
