"""Run Starlark source under the oracle (starlark-go) and under kforge, with one result type.

Both runners answer an :class:`Outcome`: what was printed, and how the program ended
(success, a run-time error with its Go-worded message and traceback, or a compile
error with its position).  The tests compare the two field by field.

The dialect is the Go implementation's with ``while``, recursion and global
reassignment allowed, and no ``set`` type.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUCCESS = "success"
RUNTIME_ERROR = "runtime_error"
COMPILE_ERROR = "compile_error"
#: kforge only: the machine stopped for a reason of its own (ticks, memory), not Starlark's.
MACHINE_FAULT = "machine_fault"

TIERS = ("reference", "fast")

#: Where the tests find the Go implementation's test files (never copied into the repository).
GO_TESTDATA_ENV = "KFORGE_STARLARK_GO_TESTDATA"
GO_TESTDATA_DEFAULT = "/work/ref/starlark-go/starlark/testdata"

# A Go traceback ends with "Error: MSG", or "Error in BUILTIN: MSG" when a builtin failed.
_ERROR_LINE = re.compile(r"^Error(?: in [^:]+)?: ", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """How one run of a Starlark program ended, as both implementations report it."""

    kind: str
    stdout: str = ""
    #: run-time errors: the error's message (``err.Error()`` in Go, what ``catch`` returns);
    #: compile errors: the message without its position.
    message: str | None = None
    #: run-time errors: the whole traceback, as the Go implementation prints it.
    traceback: str | None = None
    #: compile errors: where, 1-based.
    line: int | None = None
    col: int | None = None
    #: compile errors: "syntax" (the parser) or "resolve" (the resolver).
    phase: str | None = None
    #: what ``error()`` of the test builtins wrote (testing runs only).
    stderr: str = ""

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value not in (None, "")}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(**data)


# ------------------------------------------------------------------------ the oracle


def oracle_module() -> Any:
    starlark_go = importlib.import_module("starlark_go")
    starlark_go.configure_starlark(allow_recursion=True, allow_global_reassign=True)
    return starlark_go


_LOAD = re.compile(r"^load\((?P<args>.*)\)\s*(?:#.*)?$")


@dataclass
class _Load:
    module: str
    names: list[tuple[str, str]] = field(default_factory=list)  # (local, exported)


def _parse_load(line: str) -> _Load | None:
    """A well-formed one-line top-level ``load("m", "a", b="c")``, or None.

    Anything else (including a malformed load) is left for the oracle to judge.
    """
    match = _LOAD.match(line.rstrip())
    if match is None:
        return None
    parts = [part.strip() for part in match.group("args").split(",") if part.strip()]
    try:
        load = _Load(json.loads(parts[0]))
        for part in parts[1:]:
            local, _, exported = part.rpartition("=")
            name = json.loads(exported.strip())
            load.names.append((local.strip() or name, name))
    except (ValueError, IndexError):
        return None
    return load if load.names else None


def _without_loads(source: str, modules: Mapping[str, str]) -> tuple[str, list[str]]:
    """``source`` with its load lines replaced by aliasing assignments, and the modules named.

    The oracle has no loader: loaded modules run first in the same interpreter, whose
    globals (frozen, as a loaded module's are) then stand for the loaded names.
    Line numbers are kept, so positions in tracebacks stay true.
    """
    lines = source.split("\n")
    loaded: list[str] = []
    for index, line in enumerate(lines):
        load = _parse_load(line)
        if load is None or load.module not in modules:
            continue
        loaded.append(load.module)
        renames = [f"{local} = {exported}" for local, exported in load.names if local != exported]
        lines[index] = "; ".join(renames)
    return "\n".join(lines), loaded


def run_oracle(
    source: str,
    filename: str,
    *,
    modules: Mapping[str, str] | None = None,
    predeclared: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run ``source`` under starlark-go; ``modules`` maps load() names to their source."""
    starlark_go = oracle_module()
    printed: list[str] = []
    interpreter = starlark_go.Starlark(print=printed.append)
    if predeclared:
        interpreter.set(**predeclared)
    try:
        _exec_with_loads(interpreter, source, filename, modules or {}, set())
    except starlark_go.SyntaxError as error:
        return Outcome(
            COMPILE_ERROR, _joined(printed), error.msg, None, error.line, error.column, "syntax"
        )
    except starlark_go.ResolveError as error:
        first = error.errors[0]
        return Outcome(
            COMPILE_ERROR, _joined(printed), first.msg, None, first.line, first.column, "resolve"
        )
    except starlark_go.EvalError as error:
        return Outcome(RUNTIME_ERROR, _joined(printed), error.args[0], error.backtrace)
    return Outcome(SUCCESS, _joined(printed))


def run_oracle_isolated(sources: list[str], filename: str) -> list[Outcome | None]:
    """Run each source under the oracle in a child process; None where the oracle crashed.

    The Go bindings can bring the whole process down (printing a string that is not
    valid UTF-8, for one); a child process keeps that from taking the tests with it.
    A batch that crashes is retried program by program to find the culprit.
    """
    import subprocess
    import sys

    def batch(part: list[str]) -> list[dict[str, Any]] | None:
        request = json.dumps({"filename": filename, "sources": part})
        child = subprocess.run(
            [sys.executable, "-m", "starlark.harness"],
            input=request,
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
            check=False,
        )
        if child.returncode != 0:
            return None
        answer: list[dict[str, Any]] = json.loads(child.stdout)
        return answer

    whole = batch(sources)
    if whole is not None:
        return [Outcome.from_json(item) for item in whole]
    results: list[Outcome | None] = []
    for source in sources:
        single = batch([source])
        results.append(None if single is None else Outcome.from_json(single[0]))
    return results


def _exec_with_loads(
    interpreter: Any, source: str, filename: str, modules: Mapping[str, str], done: set[str]
) -> None:
    body, loaded = _without_loads(source, modules)
    for name in loaded:
        if name not in done:
            done.add(name)
            _exec_with_loads(interpreter, modules[name], name, modules, done)
    interpreter.exec(body, filename=filename)


def _joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


# ------------------------------------------------------------------------ kforge


def kforge_starlark() -> Any:
    """The compiler module ``kforge.starlark``; raises ImportError while it does not exist."""
    return importlib.import_module("kforge.starlark")


def kforge_missing_reason() -> str | None:
    """Why the compiler cannot be used here, or None when it can."""
    try:
        kforge_starlark()
    except ImportError as error:
        return f"kforge.starlark is not importable yet ({error})"
    return None


@dataclass(frozen=True)
class KforgeRun:
    """One kforge run: the Starlark-level outcome and the machine's own facts."""

    outcome: Outcome
    state: str
    fault: str | None = None
    ticks_used: int = 0
    stderr: bytes = b""


def compile_kforge(
    source: str,
    filename: str,
    *,
    loader: Callable[[str], str] | None = None,
    testing: bool = False,
    memory_quota: int = 65536,
) -> Any:
    """The compiled ForgeProgram (for a machine of ``memory_quota`` bytes), or the
    compile error's Outcome."""
    starlark = kforge_starlark()
    try:
        return starlark.compile(
            source, filename, loader=loader, testing=testing, memory_quota=memory_quota
        )
    except starlark.StarlarkCompileError as error:
        return Outcome(COMPILE_ERROR, "", error.message, None, error.line, error.col)


def run_kforge(
    program: Any,
    tier: str,
    *,
    tick_budget: int,
    memory_quota: int,
    testing: bool = False,
) -> KforgeRun:
    """Run a compiled program on ``tier`` and read its outcome back from the machine."""
    from kforge.isa import FaultCode
    from kforge.machine import Machine, MachineState
    from kforge.tiers import TierRunner

    if isinstance(program, Outcome):  # a compile error: nothing to run
        return KforgeRun(program, "COMPILE_ERROR")
    machine = Machine.load(program, memory_quota=memory_quota, tick_budget=tick_budget)
    runner = _RUNNERS.get(tier)
    if runner is None:
        runner = _RUNNERS[tier] = TierRunner(tier)
    runner.run(machine)
    stdout = bytes(machine.stdout).decode("utf-8", errors="backslashreplace")
    stderr = bytes(machine.stderr)
    state = machine.state
    fault = None if machine.fault is None else FaultCode(machine.fault).name
    if state is MachineState.HALTED:
        outcome = Outcome(SUCCESS, stdout, stderr=stderr.decode("utf-8", "backslashreplace"))
    elif state is MachineState.FAULTED and machine.fault == FaultCode.USER_FAULT:
        outcome = _runtime_error(stdout, stderr.decode("utf-8", "backslashreplace"), testing)
    else:
        outcome = Outcome(MACHINE_FAULT, stdout, message=f"{state.name} {fault}")
    return KforgeRun(outcome, state.name, fault, machine.ticks_used, stderr)


#: One runner per tier for the whole test process, so compiled modules are reused.
_RUNNERS: dict[str, Any] = {}


def _runtime_error(stdout: str, stderr: str, testing: bool) -> Outcome:
    """Split stderr into what ``error()`` wrote (testing runs) and the closing traceback."""
    start = stderr.rfind("Traceback (most recent call last):")
    if start < 0:
        return Outcome(RUNTIME_ERROR, stdout, message=None, traceback=stderr, stderr=stderr)
    traceback = stderr[start:].rstrip("\n")
    match = _ERROR_LINE.search(traceback)
    message = traceback[match.end() :] if match else None
    return Outcome(RUNTIME_ERROR, stdout, message, traceback, stderr=stderr[:start])


def go_testdata_dir() -> Path:
    """Where the Go implementation's test files are read from (they are not in the repository)."""
    return Path(os.environ.get(GO_TESTDATA_ENV, GO_TESTDATA_DEFAULT))


if __name__ == "__main__":  # the child process of run_oracle_isolated
    import sys

    request = json.loads(sys.stdin.read())
    answers = [run_oracle(source, request["filename"]).to_json() for source in request["sources"]]
    sys.stdout.write(json.dumps(answers))
