"""Start-up of the ``kforge`` command (goal: at most 150 ms for ``--help`` and a short run).

Each command is the installed ``kforge`` script in a fresh process, as a person types
it, timed from spawn to exit; each is run ``REPEATS`` times, interleaved with the
others and with a bare ``python -c pass`` (the interpreter's own start-up, measured
side by side so that a busy machine shows as a slower baseline, not as a regression).
Reported: the median and the fastest wall time, the median CPU time (user + system,
which a busy machine disturbs least), and the median minus the baseline's.

- ``--help``: building the parser;
- ``run hello (reference)``: ``examples/hello.fasm`` on the interpreter;
- ``run hello (auto)``: the same on the default tier, which loads the fast tier only
  for a program that runs long enough;
- ``run sieve (auto)``: a program that does run long enough (130k ticks), for scale.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
EXAMPLES = HERE.parent / "examples"
KFORGE = str(Path(sys.executable).with_name("kforge"))
REPEATS = 15
GOAL_MS = 150.0

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "kforge --help": [KFORGE, "--help"],
    "kforge run hello (reference)": [KFORGE, "run", str(EXAMPLES / "hello.fasm"), "--tier", "reference"],
    "kforge run hello (auto)": [KFORGE, "run", str(EXAMPLES / "hello.fasm")],
    "kforge run sieve (auto)": [KFORGE, "run", str(EXAMPLES / "sieve.fasm")],
}  # fmt: skip
GOAL_COMMANDS = ("kforge --help", "kforge run hello (reference)", "kforge run hello (auto)")


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    if not Path(KFORGE).exists():
        print(f"no kforge command at {KFORGE}: install kforge into this environment first")
        return 1
    environment_colour = os.environ.pop("NO_COLOR", None)
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():
        timed(command)  # warm the file cache and the compiled-module cache
    for _ in range(REPEATS):
        for name, command in COMMANDS.items():
            wall, cpu = timed(command)
            walls[name].append(wall * 1000)
            cpus[name].append(cpu * 1000)
    if environment_colour is not None:
        os.environ["NO_COLOR"] = environment_colour
    baseline = statistics.median(walls["python -c pass"])
    rows = {}
    print(f"{'command':<30} {'median':>8} {'fastest':>8} {'cpu':>8} {'-python':>8}")
    for name in COMMANDS:
        median = statistics.median(walls[name])
        rows[name] = {
            "median_ms": round(median, 1),
            "fastest_ms": round(min(walls[name]), 1),
            "cpu_median_ms": round(statistics.median(cpus[name]), 1),
            "over_python_ms": round(median - baseline, 1),
        }
        print(
            f"{name:<30} {median:>6.0f}ms {min(walls[name]):>6.0f}ms "
            f"{statistics.median(cpus[name]):>6.0f}ms {median - baseline:>6.0f}ms"
        )
    met = all(rows[name]["median_ms"] <= GOAL_MS for name in GOAL_COMMANDS)
    print(
        f"goal: {', '.join(GOAL_COMMANDS)} at most {GOAL_MS:.0f} ms: {'met' if met else 'NOT met'}"
    )
    RESULTS.mkdir(exist_ok=True)
    report = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "repeats": REPEATS,
        "goal_ms": GOAL_MS,
        "goal_met": met,
        "commands": rows,
    }
    (RESULTS / "cli.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
