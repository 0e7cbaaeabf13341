"""Coverage-guided fuzzing of kforge with atheris (libFuzzer for Python).

    python fuzz/run.py TARGET [--runs N] [--seconds S] [--minimize]
    python fuzz/run.py --list

Each target (``fuzz/targets.py``) starts from its seed corpus in
``fuzz/corpus/TARGET/`` (kept in the repository, small) and writes what it
learns to ``.fuzz/corpus/TARGET/`` (not kept).  A finding is saved under
``.fuzz/findings/`` and ends the run with a non-zero status.  ``--minimize``
merges the inputs that add coverage back into the seed corpus, keeping it
small.  One worker, so it shares a busy machine politely.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE.parent / ".fuzz"
sys.path.insert(0, str(HERE))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", help="the target to fuzz")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--runs", type=int, default=None, help="inputs to try (default: no end)")
    parser.add_argument("--seconds", type=int, default=None, help="stop after this long")
    parser.add_argument("--minimize", action="store_true", help="merge new coverage into the seeds")
    parser.add_argument("--timeout", type=int, default=20, help="seconds one input may take")
    return parser.parse_args()


def _launcher(name: str) -> Path:
    """``.fuzz/bin/NAME``: a command that runs this script for one target.

    libFuzzer starts its binary again to merge and to fork; for a Python target
    the binary is this script under this interpreter, which a launcher names.
    """
    launcher = WORK / "bin" / name
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" {name} --inner "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


def main() -> int:
    if sys.argv[1:2] == ["--list"]:  # names only: no instrumentation to announce
        from targets import TARGETS as NAMED

        print("\n".join(NAMED))
        return 0
    import atheris

    with atheris.instrument_imports(include=["kforge", "targets"]):
        from targets import TARGETS

    if sys.argv[2:3] == ["--inner"]:  # libFuzzer running its binary again: its arguments as given
        atheris.Setup([str(_launcher(sys.argv[1])), *sys.argv[3:]], TARGETS[sys.argv[1]].run)
        atheris.Fuzz()
        return 0
    args = _arguments()
    if args.list or args.target is None:
        print("\n".join(TARGETS))
        return 0 if args.list else 2
    if args.target not in TARGETS:
        print(f"unknown target {args.target!r}; targets: {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    target = TARGETS[args.target]
    learned = WORK / "corpus" / target.name
    findings = WORK / "findings"
    learned.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    options = [
        f"-max_len={target.max_len}",
        f"-timeout={args.timeout}",
        "-rss_limit_mb=3072",
        "-workers=1",
        f"-artifact_prefix={findings}/{target.name}-",
        "-print_final_stats=1",
    ]
    if target.dictionary:
        options.append(f"-dict={HERE / target.dictionary}")
    if args.runs is not None:
        options.append(f"-runs={args.runs}")
    if args.seconds is not None:
        options.append(f"-max_total_time={args.seconds}")
    folders = [str(learned), str(target.corpus)]
    if args.minimize:
        options.append("-merge=1")
        folders = [str(target.corpus), str(learned)]
    atheris.Setup([str(_launcher(target.name)), *options, *folders], target.run)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
