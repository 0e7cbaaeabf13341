"""The ``kforge`` command starts fast because it imports only what a command needs.

Each check runs the command in a fresh interpreter and looks at what it imported:
no third-party package, and no ``kforge`` module beyond the ones named here, for
``--help`` and for a short ``run``.  A module that joins these sets should be one a
new user's first command cannot do without.  (The time itself is measured by
``benchmarks/bench_cli.py``, not asserted here.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Runs main() and reports the modules it imported (beyond those the interpreter had).
PROBE = """
import json, sys
before = set(sys.modules)
from kforge.cli import main
status = main(sys.argv[1:])
sys.stdout.flush()
imported = sorted(set(sys.modules) - before)
sys.stderr.write("\\nIMPORTED " + json.dumps({"status": status, "modules": imported}) + "\\n")
"""

#: What parsing the command line needs: the parser and what its options check.
PARSER_MODULES = {
    "kforge", "kforge.cli", "kforge.cli.main", "kforge.cli.options", "kforge.cli.cache",
    "kforge.cli.cluster",
    "kforge.cli.link", "kforge.cli.proofs", "kforge.cli.registry", "kforge.cli.sandbox",
    "kforge.cli.server", "kforge.cli.starlark", "kforge.core", "kforge.isa", "kforge.limits",
    "kforge.memory", "kforge.machine", "kforge.program", "kforge.sources", "kforge.tiers",
    "kforge.terminal",
}  # fmt: skip
#: And what running a program on the interpreter adds.
RUN_MODULES = PARSER_MODULES | {"kforge.asm", "kforge.disasm", "kforge.debuginfo"}


def imported_by(*argv: str) -> tuple[int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=60,
        check=False,
    )
    report = done.stderr.rpartition("\nIMPORTED ")[2]
    values = json.loads(report)
    return values["status"], set(values["modules"])


def foreign(modules: set[str]) -> set[str]:
    """Modules neither of the standard library nor of kforge."""
    return {
        name
        for name in modules
        if name.partition(".")[0] not in sys.stdlib_module_names
        and name.partition(".")[0] != "kforge"
    }


def kforge_modules(modules: set[str]) -> set[str]:
    return {name for name in modules if name == "kforge" or name.startswith("kforge.")}


@pytest.mark.parametrize("argv", [["--help"], ["--version"], [], ["sandbox", "--help"]])
def test_help_and_version_import_only_the_parser(argv: list[str]) -> None:
    status, modules = imported_by(*argv)
    assert status == 0
    assert foreign(modules) == set()
    assert kforge_modules(modules) <= PARSER_MODULES, kforge_modules(modules) - PARSER_MODULES


@pytest.mark.parametrize("tier", ["reference", "auto"])
def test_a_short_run_imports_no_engine_server_registry_or_fast_tier(tier: str) -> None:
    status, modules = imported_by("run", str(EXAMPLES / "hello.fasm"), "--tier", tier)
    assert status == 0
    assert foreign(modules) == set(), "a short run loads no third-party package (wasmtime …)"
    assert kforge_modules(modules) <= RUN_MODULES, kforge_modules(modules) - RUN_MODULES


def test_a_long_auto_run_does_load_the_fast_tier() -> None:
    # The guard above is not vacuous: past its first ticks, auto moves to compiled code.
    status, modules = imported_by("run", str(EXAMPLES / "sieve.fasm"), "--tier", "auto")
    assert status == 0
    assert "wasmtime" in modules and "kforge.fast" in modules


def test_every_public_name_of_the_package_still_resolves() -> None:
    import kforge

    for name in kforge.__all__:
        assert getattr(kforge, name) is not None, name
    assert set(kforge.__all__) <= set(dir(kforge))
