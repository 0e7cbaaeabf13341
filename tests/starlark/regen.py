"""Write the expectation of every corpus program by asking the oracle (starlark-go).

    .venv/bin/python tests/starlark/regen.py            # rewrite every NAME.json
    .venv/bin/python tests/starlark/regen.py --check    # exit 1 if any is stale or missing

Each program runs in a child process, so a program that crashed or hung the oracle
is reported by name instead of taking this script down with it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlark.corpus import CorpusProgram, corpus_programs
from starlark.harness import run_oracle

ORACLE_TIMEOUT_SECONDS = 60


def expectation_text(program: CorpusProgram) -> str:
    outcome = run_oracle(program.source, program.filename, modules=program.modules())
    return json.dumps(outcome.to_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def ask_oracle(path: Path) -> str:
    """The expectation text for one program, computed in a child process."""
    result = subprocess.run(
        [sys.executable, __file__, "--one", str(path)],
        capture_output=True,
        text=True,
        timeout=ORACLE_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{path}: the oracle failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale expectations only")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("names", nargs="*", help="GROUP/NAME of the programs to redo (default all)")
    args = parser.parse_args()
    if args.one is not None:
        sys.stdout.write(expectation_text(CorpusProgram(args.one.resolve())))
        return 0
    stale, failed = [], []
    programs = [p for p in corpus_programs() if not args.names or p.name in args.names]
    for program in programs:
        try:
            text = ask_oracle(program.path)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failed.append(program.name)
            print(str(error).splitlines()[0][:300], file=sys.stderr)
            continue
        path = program.expectation_path
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(program.name)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "rewritten"
    print(f"{len(programs)} programs, {len(stale)} {verb}: {' '.join(stale)}")
    if failed:
        print(f"the oracle failed on {len(failed)}: {' '.join(failed)}")
    return 1 if failed or (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
