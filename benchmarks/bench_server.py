"""Load on the kforge server over loopback: many agents creating and running sandboxes.

The server runs in its own process (``kforge.server.serve`` on a free port,
a temporary data directory).  ``AGENTS`` clients (``kforge.client.Client``,
each its own ed25519 agent with a session token) run concurrently; each
stores the program, then creates, starts and waits for ``SANDBOXES_PER_AGENT``
sandboxes one after another.  Bounded in count and in time (``TIME_LIMIT``).

Reports throughput (sandboxes/s, requests/s) and p50/p99 latency of each
request kind, asserts zero errors, prints a table and saves
``benchmarks/results/server.json``.  ``python benchmarks/bench_server.py --quick``
runs a smaller load.
"""

from __future__ import annotations

import asyncio
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx

from kforge.asm import assemble
from kforge.client import Client
from kforge.engine import CreateSandbox, SandboxState
from kforge.server import AgentKey

RESULTS = Path(__file__).resolve().parent / "results"
SRC = Path(__file__).resolve().parent.parent / "src"
AGENTS = 48
SANDBOXES_PER_AGENT = 10
TIME_LIMIT = 120.0

COUNT_DOWN = """
        LI   r1, 2000
        LI   r2, 1
again:  SUB  r1, r1, r2
        JNZ  r1, again
        HALT
"""

SERVER = """
import sys
from kforge.server import AuthConfig, ServerConfig, serve
config = ServerConfig(auth=AuthConfig(rate_per_second=200, rate_burst=400))
serve("127.0.0.1", int(sys.argv[1]), sys.argv[2], config=config)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Timings:
    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []

    async def time(self, kind: str, work: object) -> object:
        started = time.perf_counter()
        result = await work  # type: ignore[misc]
        self.samples[kind].append(time.perf_counter() - started)
        return result


async def one_agent(base_url: str, timings: Timings, count: int) -> int:
    program = assemble(COUNT_DOWN)
    done = 0
    async with Client(base_url, AgentKey.generate()) as engine:
        try:
            code = await timings.time("put_program", engine.put_program(program))
            for _ in range(count):
                request = CreateSandbox(engine.agent_id, code, 65536, 100_000)  # type: ignore[arg-type]
                sandbox = await timings.time("create", engine.create_sandbox(request))
                await timings.time("start", engine.exec_start(sandbox))  # type: ignore[arg-type]
                result = await timings.time("wait", engine.wait(sandbox, timeout=30))  # type: ignore[arg-type]
                if result.state is not SandboxState.HALTED:  # type: ignore[attr-defined]
                    timings.errors.append(f"sandbox ended {result.state}")  # type: ignore[attr-defined]
                await timings.time("status", engine.sandbox_status(sandbox))  # type: ignore[arg-type]
                done += 1
        except Exception as error:  # counted, and the run fails
            timings.errors.append(f"{type(error).__name__}: {error}")
    return done


async def load(base_url: str, agents: int, per_agent: int) -> dict[str, object]:
    timings = Timings()
    started = time.perf_counter()
    finished = await asyncio.wait_for(
        asyncio.gather(*(one_agent(base_url, timings, per_agent) for _ in range(agents))),
        TIME_LIMIT,
    )
    elapsed = time.perf_counter() - started
    requests = sum(len(samples) for samples in timings.samples.values()) + agents  # + the sessions
    return {
        "agents": agents,
        "sandboxes": sum(finished),
        "seconds": round(elapsed, 3),
        "sandboxes_per_second": round(sum(finished) / elapsed, 1),
        "requests_per_second": round(requests / elapsed, 1),
        "errors": timings.errors,
        "latency_ms": {
            kind: {
                "count": len(samples),
                "p50": round(1000 * statistics.median(samples), 2),
                "p99": round(1000 * percentile(samples, 0.99), 2),
                "max": round(1000 * max(samples), 2),
            }
            for kind, samples in sorted(timings.samples.items())
        },
    }


def main() -> int:
    quick = "--quick" in sys.argv
    agents, per_agent = (8, 3) if quick else (AGENTS, SANDBOXES_PER_AGENT)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as data_dir:
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port), data_dir],
            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(base_url + "/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.05)
            report = asyncio.run(load(base_url, agents, per_agent))
        finally:
            server.terminate()
            server.wait(10)
    print(
        f"{report['agents']} agents, {report['sandboxes']} sandboxes in {report['seconds']} s: "
        f"{report['sandboxes_per_second']} sandboxes/s, {report['requests_per_second']} requests/s"
    )
    print(f"{'request':<12} {'count':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for kind, row in report["latency_ms"].items():  # type: ignore[attr-defined]
        print(f"{kind:<12} {row['count']:>6} {row['p50']:>9} {row['p99']:>9} {row['max']:>9}")
    errors = report["errors"]
    print(f"errors: {len(errors)}")  # type: ignore[arg-type]
    if not quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "server.json").write_text(
            json.dumps(
                {"machine": platform.machine(), "python": platform.python_version(), **report},
                indent=2,
            )
            + "\n"
        )
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
