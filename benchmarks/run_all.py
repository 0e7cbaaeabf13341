"""`make bench`: run every benchmark script in this folder, one after another.

Each script prints its own table and saves its results under benchmarks/results/.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    failures = []
    for script in scripts:
        print(f"\n=== {script.name}", flush=True)
        started = time.perf_counter()
        status = subprocess.call([sys.executable, str(script)])
        print(
            f"=== {script.name}: exit {status} in {time.perf_counter() - started:.1f} s", flush=True
        )
        if status != 0:
            failures.append(script.name)
    if failures:
        print(f"failed: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
