"""Cluster figures: CPU-bound throughput on one and two workers, request latency through
a gateway, and how soon a dead worker's sandboxes run again.

Everything runs on this machine, side by side in one run: a nats-server with JetStream
in a temporary folder, ``kforge worker`` and ``kforge serve --nats`` processes
(:class:`kforge.cluster.local.LocalCluster`), clients over loopback HTTP.

- **Throughput**: ``SANDBOXES`` CPU-bound sandboxes (a counting loop of ``COUNT``
  iterations each) from ``AGENTS`` agents, at most ``IN_FLIGHT`` at once, through one
  gateway to one worker, then to two; aggregate ticks per second from the first
  creation to the last result, best of ``ROUNDS`` interleaved runs (the machine is
  shared), with the CPU time each process spent and what everything else on the
  machine spent meanwhile.  The same sandboxes on an embedded engine in this process,
  interleaved with them, give the single-process figure.  Target: two workers ≥ 1.7 ×
  one.
- **Latency**: ``LATENCY_AGENTS`` agents each create, start, wait for and read the
  status of ``LATENCY_SANDBOXES`` short sandboxes one after another, through the
  gateway of a two-worker cluster and through an embedded ``kforge serve``; then
  ``SEQUENTIAL`` status requests one at a time, paced (the cost of the hop alone).  The
  CPU time nats-server, the gateway and the workers spent per sandbox is recorded.
- **Failover**: ``FAILOVER_SANDBOXES`` sandboxes that never stop, spread over two
  workers (lease ``LEASE`` seconds); one worker is killed with SIGKILL; for each of its
  sandboxes, the time until its tick count, read through the gateway, moves again.
  Target: ≤ 2 s + the lease time.

Prints a table and saves ``benchmarks/results/cluster.json``.
``python benchmarks/bench_cluster.py --quick`` runs a smaller load and saves nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx

from kforge.asm import assemble
from kforge.client import Client
from kforge.cluster.connection import connect, open_layout
from kforge.cluster.leases import lease_holders
from kforge.cluster.local import LocalCluster, free_port, kforge_command
from kforge.cluster.protocol import DirectoryEntry
from kforge.core import AgentId, Hash256
from kforge.engine import CreateSandbox, Engine, SandboxState
from kforge.server import AgentKey
from kforge.storage import Vault
from kforge.wire import decode_msgpack

RESULTS = Path(__file__).resolve().parent / "results"

AGENTS = 16
SANDBOXES = 192
COUNT = 400_000_000  # iterations of four instructions: 1.6 × 10^9 ticks a sandbox
IN_FLIGHT = 32
#: Each cluster throughput run is made this many times (interleaved); the best counts.
ROUNDS = 3
LATENCY_AGENTS = 32
LATENCY_SANDBOXES = 5
SEQUENTIAL = 120
#: Between two of the requests sent one at a time (under the server's 50 a second per agent).
PACE_SECONDS = 0.025
FAILOVER_SANDBOXES = 16
LEASE = 3.0
TARGET_SPEEDUP = 1.7
DEADLINE_MS = 3_600_000
TARGET_FAILOVER_OVER_LEASE = 2.0

# Counts down from the number its input holds, then halts.
SPIN = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        LOADW r1, r253, 0
        LI   r4, 1
        LI   r5, 7
loop:   ADD  r5, r5, r1
        XOR  r5, r5, r4
        SUB  r1, r1, r4
        JNZ  r1, loop
        HALT
"""
SHORT = """
        LI   r1, 2000
        LI   r2, 1
again:  SUB  r1, r1, r2
        JNZ  r1, again
        HALT
"""
FOREVER = """
        LI   r1, 0
        LI   r2, 1
again:  ADD  r1, r1, r2
        JMP  again
"""


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def milliseconds(samples: list[float]) -> dict[str, float]:
    return {
        "count": len(samples),
        "p50": round(1000 * statistics.median(samples), 2),
        "p99": round(1000 * percentile(samples, 0.99), 2),
    }


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU time every core of this machine has spent busy so far (``/proc/stat``)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """The CPU time each process of a cluster (and this one) spends from now on, and what
    everything else on the machine (other users' work) spends meanwhile."""

    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.nats.process is not None
        self.pids = {name: process.pid for name, process in cluster.workers.items()}
        self.pids |= {name: process.pid for name, process in cluster.gateways.items()}
        self.pids["nats-server"] = cluster.nats.process.pid
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.before["clients"] = time.process_time()
        self.before["machine"] = machine_cpu_seconds()

    def spent(self) -> dict[str, float]:
        now = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        now["clients"] = time.process_time()
        now["machine"] = machine_cpu_seconds()
        spent = {name: now[name] - self.before[name] for name in now}
        ours = sum(seconds for name, seconds in spent.items() if name != "machine")
        spent["everything else"] = max(0.0, spent.pop("machine") - ours)
        return {name: round(seconds, 2) for name, seconds in spent.items()}


def keys_for(count: int, salt: int) -> list[AgentKey]:
    return [AgentKey.from_seed(bytes([salt, index]) * 16) for index in range(count)]


def spin_request(owner: AgentId, code: Hash256, count: int) -> CreateSandbox:
    """A counting sandbox; its deadline the longest allowed, so that a busy machine makes it
    slower, never cut short (the default 30 s is near a sandbox's wall time here)."""
    return CreateSandbox(
        owner,
        code,
        65536,
        4 * count + 100,
        input=count.to_bytes(8, "little"),
        deadline_ms=DEADLINE_MS,
    )


# ----------------------------------------------------------------------------- throughput


async def throughput_through(url: str, keys: list[AgentKey], sandboxes: int, count: int) -> int:
    """Run the CPU-bound sandboxes through the gateway at ``url``; the ticks they used."""
    clients = [Client(url, key, timeout=600) for key in keys]
    gate = asyncio.Semaphore(IN_FLIGHT)
    try:
        code = await clients[0].put_program(assemble(SPIN))

        async def one(index: int) -> int:
            client = clients[index % len(clients)]
            async with gate:
                sandbox = await client.create_sandbox(spin_request(client.agent_id, code, count))
                await client.exec_start(sandbox)
                result = await client.wait(sandbox, timeout=600)
            if result.state is not SandboxState.HALTED:
                raise RuntimeError(f"a sandbox ended {result.state.value}")
            return result.ticks_used

        return sum(await asyncio.gather(*(one(index) for index in range(sandboxes))))
    finally:
        for client in clients:
            await client.close()


async def throughput_embedded(keys: list[AgentKey], sandboxes: int, count: int) -> int:
    """The same sandboxes on an engine in this process (its default tier, accounting on)."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    async with Engine(Vault(":memory:")) as engine:
        code = engine.vault.put_program(assemble(SPIN))

        async def one(index: int) -> int:
            owner = keys[index % len(keys)].agent_id
            async with gate:
                sandbox = await engine.create_sandbox(spin_request(owner, code, count))
                await engine.exec_start(sandbox, owner)
                result = await engine.wait(sandbox, owner)
            if result.state is not SandboxState.HALTED:
                raise RuntimeError(f"a sandbox ended {result.state.value}")
            return result.ticks_used

        return sum(await asyncio.gather(*(one(index) for index in range(sandboxes))))


def timed(work: Callable[[], Coroutine[Any, Any, int]]) -> dict[str, Any]:
    load = os.getloadavg()[0]
    machine = machine_cpu_seconds()
    cpu = time.process_time()
    started = time.perf_counter()
    ticks = asyncio.run(work())
    seconds = time.perf_counter() - started
    return {
        "ticks": ticks,
        "seconds": round(seconds, 3),
        "ticks_per_second": round(ticks / seconds),
        "load_average_before": round(load, 2),
        # This process's CPU time and the machine's, for the embedded engine's run (a
        # cluster's runs replace them with each process's).
        "cpu_seconds": {
            "this process": round(time.process_time() - cpu, 2),
            "everything else": round(
                max(0.0, machine_cpu_seconds() - machine - (time.process_time() - cpu)), 2
            ),
        },
    }


def embedded_throughput(sandboxes: int, count: int, salt: int) -> dict[str, Any]:
    return timed(lambda: throughput_embedded(keys_for(AGENTS, salt), sandboxes, count))


def cluster_throughput(workers: int, sandboxes: int, count: int, salt: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as folder,
        LocalCluster(folder, logs=Path(folder)) as cluster,
    ):
        for index in range(workers):
            cluster.start_worker(f"worker-{index + 1}")
        url = cluster.start_gateway("gateway")
        cluster.wait_ready("gateway", url)
        cluster.wait_balanced(workers)
        keys = keys_for(AGENTS, salt)
        meter = CpuMeter(cluster)
        found = timed(lambda: throughput_through(url, keys, sandboxes, count))
        found["cpu_seconds"] = meter.spent()
        return found


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest run (the others share this machine with whatever else ran meanwhile)."""
    best = max(runs, key=lambda run: run["ticks_per_second"])
    return {**best, "runs_ticks_per_second": [run["ticks_per_second"] for run in runs]}


# ----------------------------------------------------------------------------- latency


async def latency_load(url: str, keys: list[AgentKey], per_agent: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = defaultdict(list)

    async def timing(kind: str, work: Awaitable[Any]) -> Any:
        started = time.perf_counter()
        result = await work
        samples[kind].append(time.perf_counter() - started)
        return result

    async def one_agent(key: AgentKey) -> None:
        async with Client(url, key) as client:
            code = await client.put_program(assemble(SHORT))
            for _ in range(per_agent):
                request = CreateSandbox(client.agent_id, code, 65536, 100_000)
                sandbox = await timing("create", client.create_sandbox(request))
                await timing("start", client.exec_start(sandbox))
                result = await timing("wait", client.wait(sandbox, timeout=60))
                if result.state is not SandboxState.HALTED:
                    raise RuntimeError(f"a sandbox ended {result.state.value}")
                await timing("status", client.sandbox_status(sandbox))

    started = time.perf_counter()
    await asyncio.gather(*(one_agent(key) for key in keys))
    elapsed = time.perf_counter() - started
    async with Client(url, keys[0]) as client:
        listed = await client.list_sandboxes()
        for _ in range(SEQUENTIAL):
            await timing("status alone", client.sandbox_status(listed[0].id))
            await asyncio.sleep(PACE_SECONDS)
    return {
        "requests_per_second": round(
            sum(len(s) for kind, s in samples.items() if kind != "status alone") / elapsed, 1
        ),
        "latency_ms": {kind: milliseconds(found) for kind, found in sorted(samples.items())},
    }


def gateway_latency(per_agent: int, salt: int) -> dict[str, Any]:
    """The latency load through a two-worker cluster, with what each process spent on it
    per sandbox (the basis of the estimate in ``docs/cluster.md``)."""
    with (
        tempfile.TemporaryDirectory() as folder,
        LocalCluster(folder, logs=Path(folder)) as cluster,
    ):
        cluster.start_worker("worker-1")
        cluster.start_worker("worker-2")
        url = cluster.start_gateway("gateway")
        cluster.wait_ready("gateway", url)
        cluster.wait_balanced(2)
        meter = CpuMeter(cluster)
        found = asyncio.run(latency_load(url, keys_for(LATENCY_AGENTS, salt), per_agent))
        spent = meter.spent()
        sandboxes = LATENCY_AGENTS * per_agent
        found["cpu_ms_per_sandbox"] = {
            "nats-server": round(1000 * spent["nats-server"] / sandboxes, 2),
            "gateway": round(1000 * spent["gateway"] / sandboxes, 2),
            "workers": round(1000 * (spent["worker-1"] + spent["worker-2"]) / sandboxes, 2),
        }
        return found


def embedded_latency(per_agent: int, salt: int) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            kforge_command("serve", "--port", str(port), "--data-dir", folder),
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{url}/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("kforge serve did not start")
                time.sleep(0.05)
            return asyncio.run(latency_load(url, keys_for(LATENCY_AGENTS, salt), per_agent))
        finally:
            server.terminate()
            server.wait(30)


# ----------------------------------------------------------------------------- failover


async def partitions_of(url: str, sandboxes: list[Hash256]) -> dict[Hash256, int]:
    """Each sandbox's partition, from the cluster's directory."""
    nc = await connect(url, name="bench", who="bench", give_up_after=10)
    try:
        layout = await open_layout(nc, partitions=None)
        found = {}
        for sandbox in sandboxes:
            entry = await layout.directory.get(f"sandbox.{sandbox.hex}")
            found[sandbox] = decode_msgpack(entry.value or b"", DirectoryEntry, "entry").partition
        return found
    finally:
        await nc.close()


async def holders_of(url: str) -> dict[int, str | None]:
    nc = await connect(url, name="bench", who="bench", give_up_after=10)
    try:
        return await lease_holders(await open_layout(nc, partitions=None))
    finally:
        await nc.close()


async def running_again(client: Client, sandbox: Hash256, killed_at: float) -> float:
    """Seconds from ``killed_at`` until the sandbox's tick count moves on the worker that
    took it over (the first answer comes from that worker; the next that differs, ran)."""
    first = (await client.sandbox_status(sandbox)).ticks_used
    while True:
        await asyncio.sleep(0.02)
        if (await client.sandbox_status(sandbox)).ticks_used != first:
            return time.monotonic() - killed_at


async def failover_run(cluster: LocalCluster, url: str, keys: list[AgentKey]) -> dict[str, Any]:
    clients = [Client(url, key, retry_seconds=60) for key in keys]
    try:
        code = await clients[0].put_program(assemble(FOREVER))
        ids = []
        for client in clients:
            request = CreateSandbox(client.agent_id, code, 65536, 10**11)
            sandbox = await client.create_sandbox(request)
            await client.exec_start(sandbox)
            ids.append(sandbox)
        where = await partitions_of(cluster.url, ids)
        holders = await holders_of(cluster.url)
        victim = "worker-1"
        doomed = [i for i, sandbox in enumerate(ids) if holders[where[sandbox]] == victim]
        await asyncio.sleep(1.0)  # everything running, leases renewed as usual
        killed_at = time.monotonic()
        cluster.kill(victim)
        delays = await asyncio.gather(
            *(running_again(clients[i], ids[i], killed_at) for i in doomed)
        )
        for client, sandbox in zip(clients, ids, strict=True):
            await client.kill_sandbox(sandbox)
        return {
            "lease_seconds": cluster.lease,
            "sandboxes_moved": len(doomed),
            "seconds_to_running_again_max": round(max(delays), 3),
            "seconds_to_running_again_p50": round(statistics.median(delays), 3),
            "target_seconds": TARGET_FAILOVER_OVER_LEASE + cluster.lease,
        }
    finally:
        for client in clients:
            await client.close()


def failover(salt: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as folder,
        LocalCluster(folder, lease=LEASE, logs=Path(folder)) as cluster,
    ):
        cluster.start_worker("worker-1")
        cluster.start_worker("worker-2")
        url = cluster.start_gateway("gateway")
        cluster.wait_ready("gateway", url)
        cluster.wait_balanced(2)
        return asyncio.run(failover_run(cluster, url, keys_for(FAILOVER_SANDBOXES, salt)))


# ----------------------------------------------------------------------------- report


def main() -> int:
    quick = "--quick" in sys.argv
    sandboxes, count = (48, 20_000_000) if quick else (SANDBOXES, COUNT)
    per_agent = 2 if quick else LATENCY_SANDBOXES
    rounds = 1 if quick else ROUNDS
    runs: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}
    for round_ in range(rounds):  # interleaved, so all three see the machine alike
        runs[0].append(embedded_throughput(sandboxes, count, 10 * round_))
        for workers in (1, 2):
            runs[workers].append(
                cluster_throughput(workers, sandboxes, count, 10 * round_ + workers)
            )
    embedded, one, two = best_of(runs[0]), best_of(runs[1]), best_of(runs[2])
    speedup = two["ticks_per_second"] / one["ticks_per_second"]
    through_gateway = gateway_latency(per_agent, 4)
    direct = embedded_latency(per_agent, 5)
    moved = failover(6)
    report = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": _cpus(),
        "throughput": {
            "sandboxes": sandboxes,
            "ticks_per_sandbox": 4 * count + 4,
            "embedded": embedded,
            "one_worker": one,
            "two_workers": two,
            "rounds": rounds,
            "two_over_one": round(speedup, 2),
            "target_two_over_one": TARGET_SPEEDUP,
        },
        "latency": {"gateway": through_gateway, "embedded_server": direct},
        "failover": moved,
    }
    print(f"CPU-bound: {sandboxes} sandboxes of {4 * count:,} ticks")
    for name, row in (("embedded engine", embedded), ("1 worker", one), ("2 workers", two)):
        print(f"  {name:<16} {row['ticks_per_second'] / 1e9:>7.2f} G ticks/s  ({row['seconds']} s)")
    print(f"  2 workers / 1 worker: {speedup:.2f}x (target >= {TARGET_SPEEDUP}x; best of {rounds})")
    print(f"  CPU seconds of the 2-worker run: {two['cpu_seconds']}")
    print(f"{'request':<14} {'gateway p50':>12} {'p99':>9} {'embedded p50':>13} {'p99':>9}  (ms)")
    for kind, row in through_gateway["latency_ms"].items():
        other = direct["latency_ms"].get(kind, {"p50": "-", "p99": "-"})
        print(f"{kind:<14} {row['p50']:>12} {row['p99']:>9} {other['p50']:>13} {other['p99']:>9}")
    print(
        f"CPU per short sandbox through the gateway (ms): {through_gateway['cpu_ms_per_sandbox']}"
    )
    print(
        f"failover: {moved['sandboxes_moved']} sandboxes of the killed worker ran again within "
        f"{moved['seconds_to_running_again_max']} s (median {moved['seconds_to_running_again_p50']} s;"
        f" lease {moved['lease_seconds']} s, target <= {moved['target_seconds']} s)"
    )
    if not quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "cluster.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    raise SystemExit(main())
