"""Print, per Go test file, how many chunks and assertions pass (a Markdown table).

    .venv/bin/python tests/starlark/go_testdata_table.py            # kforge, fast tier
    .venv/bin/python tests/starlark/go_testdata_table.py --oracle   # starlark-go itself

The files are read from $KFORGE_STARLARK_GO_TESTDATA (default
/work/ref/starlark-go/starlark/testdata).  Out-of-scope files and chunks are listed
with their reason below the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlark.go_testdata import (
    ChunkResult,
    go_test_files,
    judge,
    read_chunks,
    run_chunk_kforge,
    run_chunk_oracle,
)
from starlark.harness import RUNTIME_ERROR, Outcome

TICK_BUDGET = 2_000_000_000
MEMORY_QUOTA = 64 * 1024 * 1024


def file_results(path: Path, oracle: bool) -> tuple[list[ChunkResult], list[tuple[str, str]]]:
    results, skipped = [], []
    for chunk in read_chunks(path):
        reason = chunk.out_of_scope()
        if reason is not None:
            skipped.append((chunk.name, reason))
            continue
        if oracle:
            outcome = oracle_in_child(path, chunk.index)
        else:
            outcome = run_chunk_kforge(
                chunk, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA, tier="fast"
            )
        results.append(judge(chunk, outcome))
        skipped += [
            (f"{path.name}:{first}", f"statement {reason}")
            for first, _last, reason in chunk.removed_statements()
        ]
    return results, skipped


def oracle_in_child(path: Path, index: int) -> Outcome:
    """The oracle's outcome for one chunk, in a child process (the bindings can crash)."""
    child = subprocess.run(
        [sys.executable, __file__, "--one", str(path), str(index)],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        return Outcome(RUNTIME_ERROR, message="the oracle crashed", traceback="")
    return Outcome.from_json(json.loads(child.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--oracle", action="store_true", help="run under starlark-go instead")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--why", action="store_true", help="say why each failing chunk failed")
    args = parser.parse_args()
    if args.one:
        chunk = read_chunks(Path(args.one[0]))[int(args.one[1])]
        print(json.dumps(run_chunk_oracle(chunk).to_json()))
        return 0
    files = go_test_files()
    if not files:
        print("no Go test files found (set KFORGE_STARLARK_GO_TESTDATA)")
        return 1
    print(
        "| file | chunks passed | chunks in scope | chunks or statements out of scope "
        "| assertions passed | assertions in scope |"
    )
    print("|---|---|---|---|---|---|")
    all_skipped, failures = [], []
    totals = [0, 0, 0, 0, 0]
    for path in files:
        results, skipped = file_results(path, args.oracle)
        row = [
            sum(r.passed for r in results),
            len(results),
            len(skipped),
            sum(r.assertions_passed for r in results),
            sum(r.chunk.assertions for r in results),
        ]
        totals = [t + v for t, v in zip(totals, row, strict=True)]
        print(f"| {path.name} | " + " | ".join(map(str, row)) + " |")
        all_skipped += skipped
        failures += [r for r in results if not r.passed]
    print("| **all** | " + " | ".join(map(str, totals)) + " |")
    print("\nOut of scope:")
    for name, reason in all_skipped:
        print(f"- {name}: {reason}")
    if args.why:
        print("\nFailing chunks:")
        for result in failures:
            print(f"- {result.chunk.name}: {result.why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
