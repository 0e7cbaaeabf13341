"""Benchmark proofs and snapshots: proof generation vs a plain fast-tier run, verification,
snapshot and restore times.

Usage: ``PYTHONPATH=src python benchmarks/bench_proofs.py [--quick]``.  Prints a table
and writes ``benchmarks/results/proofs.json``.  Keys and compiled modules stay in
memory / a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kforge.asm import assemble
from kforge.fast import FastTier
from kforge.machine import Machine
from kforge.proofs import DEFAULT_SAMPLE_INTERVAL, generate_proof, verify_proof
from kforge.proofs.keys import NodeKey
from kforge.proofs.replay import RunRecord
from kforge.proofs.snapshot import checkpoint, restore
from kforge.tiers import TierRunner

COUNT = """
    LI r1, 0
    LI r2, {n}
    LI r3, 1
loop:
    ADD r1, r1, r3
    JLT r1, r2, loop
    HALT
"""
FIB = """
    LI r1, 0
    LI r2, 1
    LI r4, 0
    LI r5, {n}
    LI r6, 1
loop:
    ADD r3, r1, r2
    ADD r1, r2, r0
    ADD r2, r3, r0
    ADD r4, r4, r6
    JLT r4, r5, loop
    HALT
"""
SIEVE = """
    LI r1, 2
    LI r2, {n}
    LI r6, 1
outer:
    LOAD r3, r1, 0x1000
    JNZ r3, next
    ADD r4, r1, r1
inner:
    JLT r4, r2, mark
    JMP next
mark:
    STORE r6, r4, 0x1000
    ADD r4, r4, r1
    JMP inner
next:
    ADD r1, r1, r6
    JLT r1, r2, outer
    HALT
"""
WORKLOADS = {"count": (COUNT, 3_000_000), "fib": (FIB, 1_000_000), "sieve": (SIEVE, 50_000)}


def _best(action: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def bench_workload(name: str, source: str, n: int, tier: FastTier, repeat: int) -> dict[str, Any]:
    program = assemble(source.format(n=n), f"{name}.fasm")
    record = RunRecord.create(program, tick_budget=1 << 40)
    key = NodeKey.generate()
    tier.compile(program)
    probe = record.load(program)
    tier.run(probe, tier="fast")
    run_time = _best(lambda: tier.run(record.load(program), tier="fast"), repeat)
    runner = TierRunner("fast", fast_tier=tier)
    prove = lambda: generate_proof(program, record, key, tier=runner)  # noqa: E731
    proof_time = _best(prove, repeat)
    proof = prove()
    verify_time = _best(
        lambda: verify_proof(proof, program, record, key.public_raw, tier=runner),
        repeat,
    )
    return {
        "workload": name,
        "ticks": probe.ticks_used,
        "samples": proof.sample_count,
        "fast_run_s": run_time,
        "prove_s": proof_time,
        "verify_s": verify_time,
        "prove_over_run": proof_time / run_time,
    }


def bench_snapshot(quota: int, repeat: int) -> dict[str, Any]:
    program = assemble("LI r1, 7\nLI r2, 4096\nSTOREW r1, r2, 0\nHALT\n", "snap.fasm")
    machine = Machine.load(program, memory_quota=quota)
    machine.run()
    blob = checkpoint(machine)
    return {
        "memory": quota,
        "snapshot_bytes": len(blob),
        "checkpoint_s": _best(lambda: checkpoint(machine), repeat),
        "restore_s": _best(lambda: restore(blob), repeat),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one repetition each")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "proofs.json"))
    args = parser.parse_args()
    repeat = 1 if args.quick else 5
    with FastTier(disk_cache=False) as tier:
        rows = [bench_workload(n, s, size, tier, repeat) for n, (s, size) in WORKLOADS.items()]
    snapshots = [bench_snapshot(quota, repeat) for quota in (64 << 10, 64 << 20)]
    print(f"sample interval K = {DEFAULT_SAMPLE_INTERVAL}")
    print(
        f"{'workload':<8} {'ticks':>10} {'samples':>7} {'run ms':>9} {'prove ms':>9} "
        f"{'ratio':>6} {'verify ms':>9}"
    )
    for row in rows:
        print(
            f"{row['workload']:<8} {row['ticks']:>10} {row['samples']:>7} "
            f"{row['fast_run_s'] * 1e3:>9.2f} {row['prove_s'] * 1e3:>9.2f} "
            f"{row['prove_over_run']:>6.2f} {row['verify_s'] * 1e3:>9.2f}"
        )
    print(f"{'memory':>10} {'bytes':>8} {'checkpoint ms':>14} {'restore ms':>11}")
    for row in snapshots:
        print(
            f"{row['memory']:>10} {row['snapshot_bytes']:>8} "
            f"{row['checkpoint_s'] * 1e3:>14.2f} {row['restore_s'] * 1e3:>11.2f}"
        )
    result = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "sample_interval": DEFAULT_SAMPLE_INTERVAL,
        "proofs": rows,
        "snapshots": snapshots,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
