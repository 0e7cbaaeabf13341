"""Fifty agents on loopback, one of them hostile, doing every known attack at once.

Runs against a fresh server each, in its own process with the default limits
(``kforge.server.serve``, a temporary data directory), ``PAIRS`` times each way,
alternating (a machine shared with other work then disturbs both sides alike):

- **baseline**: 49 honest agents;
- **attack**: the same 49 honest agents, and a 50th, hostile, in a process of its
  own (``hostile_agent.py``), running every attack of ``docs/security.md`` §5
  concurrently from three seconds before the honest agents start until they end.

Each honest agent (``kforge.client.Client``, its own key and session token)
stores a program, then for ``ROUNDS`` rounds creates a sandbox, starts it, waits
for its result, and reads its status and output.  Each side's latencies are
pooled.  The test passes when the honest agents' error rate is 0 both ways,
their p99 latency under attack is within 2x of the baseline's, the server
answers ``/v1/health`` after every run, and the server process's peak memory
(VmHWM) under attack stays under the documented ceiling: the baseline's peak
plus what one agent may hold of each pool (``CEILING_SHARES``).  Prints the
figures and saves ``benchmarks/results/hostile.json``.  ``--quick`` runs fewer
agents and rounds, once each way, and saves nothing; ``KFORGE_HOSTILE_ONLY=a,b``
runs only the named attacks (``hostile_agent.py``), to see what each costs.
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
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from bench_server import free_port, percentile

from kforge.asm import assemble
from kforge.client import Client
from kforge.engine import CreateSandbox, EngineLimits, SandboxState
from kforge.messages.mailbox import MAX_MAILBOX_BYTES
from kforge.server import AgentKey
from kforge.server.debug import DebugLimits

RESULTS = Path(__file__).resolve().parent / "results"
SRC = Path(__file__).resolve().parent.parent / "src"
HONEST = 49
ROUNDS = 8
PAIRS = 3
MIB = 1 << 20

#: What one agent may make the server hold, by pool (from the default limits): the ceiling
#: under attack is the baseline's peak plus these, plus slack for the requests in flight.
_LIMITS, _DEBUG = EngineLimits(), DebugLimits()
CEILING_SHARES = {
    "memory quotas (max_memory_per_owner)": _LIMITS.max_memory_per_owner,
    "host bytes (max_host_bytes_per_owner)": _LIMITS.max_host_bytes_per_owner,
    "debug sessions (max_memory_per_agent)": _DEBUG.max_memory_per_agent,
    "mailbox (MAX_MAILBOX_BYTES)": MAX_MAILBOX_BYTES,
    "agora (max_bytes_per_publisher)": 8 * MIB,
    "requests in flight (16 x 4 MiB)": 64 * MIB,
}

COUNT_DOWN = """
        LI   r1, 2000
        LI   r2, 1
again:  SUB  r1, r1, r2
        JNZ  r1, again
        LI   r3, 2
        SEND 0, r253, r3
        HALT
"""

SERVER = """
import sys
from kforge.server import ServerConfig, serve
serve("127.0.0.1", int(sys.argv[1]), sys.argv[2], config=ServerConfig())
"""


# ----------------------------------------------------------------- the honest agents


class Timings:
    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.requests = 0

    async def time(self, kind: str, work: Any) -> Any:
        started = time.perf_counter()
        try:
            return await work
        finally:
            self.samples[kind].append(time.perf_counter() - started)
            self.requests += 1


async def honest_agent(engine: Client, timings: Timings, rounds: int) -> None:
    program = assemble(COUNT_DOWN)
    async with engine:
        try:
            code = await timings.time("put_program", engine.put_program(program))
            for _ in range(rounds):
                request = CreateSandbox(engine.agent_id, code, 65536, 100_000)
                sandbox = await timings.time("create", engine.create_sandbox(request))
                await timings.time("start", engine.exec_start(sandbox))
                result = await timings.time("wait", engine.wait(sandbox, timeout=60))
                if result.state is not SandboxState.HALTED:
                    timings.errors.append(f"sandbox ended {result.state}")
                await timings.time("status", engine.sandbox_status(sandbox))
                await timings.time("output", engine.output(sandbox))
        except Exception as error:  # counted: the run fails
            timings.errors.append(f"{type(error).__name__}: {error}")


async def honest_load(base_url: str, agents: int, rounds: int, timings: Timings) -> float:
    """Every honest agent's work, timed into ``timings``; the seconds it took."""
    # Made before the clock starts: making an HTTP client takes some 20 ms of this
    # process's CPU (its TLS context), which would count as the others' latency.
    clients = [Client(base_url, AgentKey.generate()) for _ in range(agents)]
    started = time.perf_counter()
    await asyncio.gather(*(honest_agent(client, timings, rounds) for client in clients))
    return time.perf_counter() - started


def summary(timings: Timings) -> dict[str, Any]:
    every = [sample for samples in timings.samples.values() for sample in samples]
    return {
        "requests": timings.requests,
        "errors": timings.errors,
        "error_rate": len(timings.errors) / max(1, timings.requests),
        "p50_ms": round(1000 * statistics.median(every), 2),
        "p99_ms": round(1000 * percentile(every, 0.99), 2),
        "by_kind_p99_ms": {
            kind: round(1000 * percentile(samples, 0.99), 2)
            for kind, samples in sorted(timings.samples.items())
        },
    }


# ----------------------------------------------------------------- the server's memory


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with_children = task / "children"
            try:
                children = [int(child) for child in with_children.read_text().split()]
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            found += children
            frontier += children
    return found


class MemoryWatch:
    """Samples the server's process and its worker processes every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.workers_peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            workers = sum(_rss_kib(child) for child in _descendants(self.pid))
            self.workers_peak_kib = max(self.workers_peak_kib, workers)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def server_peak_kib(self) -> int:
        return _rss_kib(self.pid, "VmHWM")


# ----------------------------------------------------------------- one run


def start_server(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with open(Path(data_dir) / "server.log", "wb") as log:  # read when a run goes wrong
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port), data_dir],
            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "KFORGE_DATA_DIR": data_dir},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(base_url + "/v1/health").status_code == 200:
                return server, base_url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit("the server did not start")
        time.sleep(0.05)


def one_run(agents: int, rounds: int, hostile: bool, timings: Timings) -> dict[str, Any]:
    """One server, the honest load (timed into ``timings``) and, if ``hostile``, the
    hostile agent; what the server's memory and health were."""
    with tempfile.TemporaryDirectory() as data_dir:
        server, base_url = start_server(data_dir)
        attacker = None
        report_path = Path(data_dir) / "hostile.json"
        report: dict[str, Any] = {}
        try:
            with MemoryWatch(server.pid) as watch:
                if hostile:
                    attacker = subprocess.Popen(
                        [sys.executable, __file__, "--hostile", base_url, str(report_path)],
                        env={**os.environ, "PYTHONPATH": f"{SRC}:{Path(__file__).parent}"},
                    )
                    time.sleep(3)  # let every attack get going
                report["seconds"] = round(
                    asyncio.run(honest_load(base_url, agents, rounds, timings)), 2
                )
                if attacker is not None:
                    attacker.terminate()
                    attacker.wait(30)
                report["health_after"] = httpx.get(base_url + "/v1/health", timeout=10).status_code
            report["server_peak_mib"] = round(watch.server_peak_kib / 1024, 1)
            report["workers_peak_mib"] = round(watch.workers_peak_kib / 1024, 1)
            if hostile and report_path.exists():
                report["hostile"] = json.loads(report_path.read_text())
        finally:
            if attacker is not None and attacker.poll() is None:
                attacker.kill()
            server.terminate()
            server.wait(30)
            if report.get("health_after") != 200 or timings.errors:
                log = (Path(data_dir) / "server.log").read_text(errors="replace")
                print("server log (its end):\n" + log[-4000:], file=sys.stderr)
    return report


def measure(agents: int, rounds: int, pairs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``pairs`` runs without and with the hostile agent, alternating (a machine shared
    with other work then disturbs both alike); each side's samples pooled."""
    sides: dict[str, tuple[Timings, list[dict[str, Any]]]] = {
        "baseline": (Timings(), []),
        "attack": (Timings(), []),
    }
    for _ in range(pairs):
        for name, (timings, runs) in sides.items():
            runs.append(one_run(agents, rounds, name == "attack", timings))
    reports = {}
    for name, (timings, runs) in sides.items():
        reports[name] = {
            "agents": agents,
            "runs": len(runs),
            **summary(timings),
            "seconds": [run["seconds"] for run in runs],
            "server_peak_mib": max(run["server_peak_mib"] for run in runs),
            "workers_peak_mib": max(run["workers_peak_mib"] for run in runs),
            "health_after": [run["health_after"] for run in runs],
        }
        if name == "attack":
            reports[name]["hostile"] = runs[-1].get("hostile", {})
    return reports["baseline"], reports["attack"]


def main() -> int:
    quick = "--quick" in sys.argv
    agents, rounds, pairs = (9, 3, 1) if quick else (HONEST, ROUNDS, PAIRS)
    baseline, attack = measure(agents, rounds, pairs)
    ceiling = baseline["server_peak_mib"] + sum(CEILING_SHARES.values()) / MIB
    ratio = attack["p99_ms"] / max(baseline["p99_ms"], 1e-9)
    checks = {
        "honest error rate 0 (baseline)": baseline["error_rate"] == 0,
        "honest error rate 0 (attack)": attack["error_rate"] == 0,
        "honest p99 within 2x": ratio <= 2.0,
        "server memory under the ceiling": attack["server_peak_mib"] <= ceiling,
        "server healthy after": set(attack["health_after"]) == {200},
    }
    print(
        f"{agents} honest agents x {rounds} rounds, {pairs} runs each way, alternating; "
        "the attack runs add one hostile agent"
    )
    print(f"{'run':<10} {'requests':>9} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'peak MiB':>9}")
    for name, run in (("baseline", baseline), ("attack", attack)):
        print(
            f"{name:<10} {run['requests']:>9} {len(run['errors']):>7} {run['p50_ms']:>8} "
            f"{run['p99_ms']:>8} {run['server_peak_mib']:>9}"
        )
    print(f"p99 ratio {ratio:.2f} (at most 2); memory ceiling {ceiling:.0f} MiB")
    hostile = attack.get("hostile", {})
    for name, outcomes in sorted(hostile.get("outcomes", {}).items()):
        print(f"  hostile {name:<16} {outcomes}")
    for check, passed in checks.items():
        print(f"{'ok ' if passed else 'FAIL'} {check}")
    for run in (baseline, attack):
        for error in run["errors"][:5]:
            print(f"  error: {error}")
    if not quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "hostile.json").write_text(
            json.dumps(
                {
                    "machine": platform.machine(),
                    "python": platform.python_version(),
                    "load_average": os.getloadavg(),
                    "ceiling_mib": round(ceiling, 1),
                    "p99_ratio": round(ratio, 3),
                    "checks": checks,
                    "baseline": baseline,
                    "attack": attack,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if all(checks.values()) else 1


# ----------------------------------------------------------------- the hostile agent


if __name__ == "__main__" and "--hostile" in sys.argv:
    from hostile_agent import run_hostile

    index = sys.argv.index("--hostile")
    only = set(filter(None, os.environ.get("KFORGE_HOSTILE_ONLY", "").split(",")))
    raise SystemExit(run_hostile(sys.argv[index + 1], Path(sys.argv[index + 2]), only))

if __name__ == "__main__":
    raise SystemExit(main())
