"""Starlark workloads timed side by side: starlark-go, CPython and kforge (fast tier).

Each ``benchmarks/starlark/*.star`` file is valid Starlark and valid Python 3, so all
three run the same source; their printed output must agree.  kforge's column is the
run time on the fast tier after compiling (compile time is reported apart), and the
compile times of two 1,000-line programs are reported too, in CPU seconds (alone with
``--compile-only``).  The kforge column is skipped while ``kforge.starlark`` does not
exist.

Targets: kforge faster than starlark-go on every workload, within 2x of CPython on
the integer workloads, and a 1,000-line program compiled in at most 200 ms.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKLOADS = sorted((HERE / "starlark").glob("*.star"))
RESULTS = HERE / "results"
REPEATS = 3
TICK_BUDGET = 2**62
MEMORY_QUOTA = 2 * 1024 * 1024 * 1024

sys.path.insert(0, str(HERE.parent / "tests"))


def best_of(run: Callable[[], str]) -> tuple[float, str]:
    """The fastest of REPEATS runs, and the output of the last."""
    times, output = [], ""
    for _ in range(REPEATS):
        started = time.perf_counter()
        output = run()
        times.append(time.perf_counter() - started)
    return min(times), output


def run_starlark_go(source: str, name: str) -> str:
    from starlark.harness import oracle_module

    starlark_go = oracle_module()
    printed: list[str] = []
    starlark_go.Starlark(print=printed.append).exec(source, filename=name)
    return "".join(line + "\n" for line in printed)


def run_cpython(source: str, name: str) -> str:
    printed: list[str] = []

    def capture(*values: Any) -> None:
        printed.append(" ".join(str(value) for value in values))

    exec(compile(source, name, "exec"), {"print": capture, "__name__": "bench"})
    return "".join(line + "\n" for line in printed)


def kforge_compiler() -> Any:
    try:
        import kforge.starlark as compiler
    except ImportError:
        return None
    return compiler


def run_kforge(program: Any) -> str:
    from kforge.machine import Machine, MachineState
    from kforge.tiers import TierRunner

    machine = Machine.load(program, memory_quota=MEMORY_QUOTA, tick_budget=TICK_BUDGET)
    with TierRunner("fast") as runner:
        runner.run(machine)
    if machine.state is not MachineState.HALTED:
        raise RuntimeError(f"kforge ended {machine.state.name}: {bytes(machine.stderr)!r}")
    return bytes(machine.stdout).decode()


def thousand_line_program() -> str:
    """1,000 dense generated lines: nearly every line calls several builtins."""
    from starlark.generate import generate_program

    lines: list[str] = []
    seed = 0
    while len(lines) < 1000:
        lines += generate_program(seed).splitlines()
        seed += 1
    return "\n".join(lines[:1000]) + "\n"


def realistic_program() -> str:
    """1,000 lines of programs people write: these workloads, then the conformance
    corpus's programs that succeed on their own, whole programs until 1,000 lines."""
    from starlark.corpus import corpus_programs

    texts = [path.read_text(encoding="utf-8") for path in WORKLOADS]
    texts += [
        program.source
        for program in corpus_programs()
        if "load(" not in program.source and program.expected().kind == "success"
    ]
    lines: list[str] = []
    for text in texts:
        if len(lines) + len(text.splitlines()) <= 1000:
            lines += text.splitlines()
    return "\n".join(lines) + "\n"


def cpu_seconds(children: bool = False) -> float:
    """CPU seconds used so far by this process, or by its finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def least_cpu(run: Callable[[], object], children: bool = False) -> float:
    """The fewest CPU seconds of REPEATS runs: on a shared machine, CPU time varies
    less with the load than the clock does."""
    times = []
    for _ in range(REPEATS):
        started = cpu_seconds(children)
        run()
        times.append(cpu_seconds(children) - started)
    return min(times)


def compile_times(compiler: Any, source: str, name: str) -> dict[str, float]:
    """CPU seconds to compile ``source``: ``cold`` is ``kforge compile`` in a fresh
    process (imports, the runtime read from its cache on disk), ``warm`` the compile
    again in this process; each the least of REPEATS."""
    import subprocess
    import tempfile

    compiler.compile(source, name)  # the runtime ready in this process, and on disk
    warm = least_cpu(lambda: compiler.compile(source, name))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(source, encoding="utf-8")
        command = [sys.executable, "-m", "kforge.cli", "compile", str(path), "-o", os.devnull]
        cold = least_cpu(lambda: subprocess.run(command, check=True), children=True)
    return {"cold_s": cold, "warm_s": warm}


def compile_report(compiler: Any) -> dict[str, Any]:
    """Compile times of the two 1,000-line programs, printed and returned."""
    results: dict[str, Any] = {}
    for key, source in (("dense", thousand_line_program()), ("realistic", realistic_program())):
        times = compile_times(compiler, source, f"{key}.star")
        times["instructions"] = len(compiler.compile(source, f"{key}.star").code)
        results[f"compile_1000_lines_{key}"] = times
        print(
            f"compile time of a 1,000-line program ({key}, {times['instructions']:,} "
            f"instructions), CPU: {times['cold_s'] * 1000:.0f} ms in a fresh process, "
            f"{times['warm_s'] * 1000:.0f} ms warm",
            flush=True,
        )
    results["compile_1000_lines_s"] = results["compile_1000_lines_dense"]["warm_s"]
    results["load_average"] = os.getloadavg()[0]
    return results


def main(argv: list[str]) -> int:
    compiler = kforge_compiler()
    if argv == ["--compile-only"]:  # the compile times alone, results file untouched
        if compiler is None:
            print("kforge: skipped (kforge.starlark is not importable yet)")
        else:
            compile_report(compiler)
        return 0
    results: dict[str, Any] = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "kforge": compiler is not None,
        "workloads": {},
    }
    header = f"{'workload':<18} {'starlark-go':>12} {'CPython':>10} {'kforge':>10} {'compile':>9} {'go/kf':>7} {'kf/py':>7}"
    print(header)
    mismatches = []
    for path in WORKLOADS:
        source, name = path.read_text(encoding="utf-8"), path.name
        go_time, go_out = best_of(partial(run_starlark_go, source, name))
        py_time, py_out = best_of(partial(run_cpython, source, name))
        row: dict[str, Any] = {"starlark_go_s": go_time, "cpython_s": py_time}
        if go_out != py_out:
            mismatches.append(f"{name}: starlark-go and CPython print different output")
        text = f"{path.stem:<18} {go_time:>11.3f}s {py_time:>9.3f}s"
        if compiler is not None:
            started = time.perf_counter()
            program = compiler.compile(source, name, memory_quota=MEMORY_QUOTA)
            row["kforge_compile_s"] = time.perf_counter() - started
            kf_time, kf_out = best_of(partial(run_kforge, program))
            row["kforge_s"] = kf_time
            row["starlark_go_over_kforge"] = go_time / kf_time
            row["kforge_over_cpython"] = kf_time / py_time
            if kf_out != go_out:
                mismatches.append(f"{name}: kforge prints different output")
            text += (
                f" {kf_time:>9.3f}s {row['kforge_compile_s'] * 1000:>7.0f}ms"
                f" {row['starlark_go_over_kforge']:>7.2f} {row['kforge_over_cpython']:>7.2f}"
            )
        else:
            text += f" {'-':>10} {'-':>9} {'-':>7} {'-':>7}"
        results["workloads"][path.stem] = row
        print(text, flush=True)
    if compiler is not None:
        results.update(compile_report(compiler))
    else:
        print("kforge: skipped (kforge.starlark is not importable yet)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "starlark.json").write_text(json.dumps(results, indent=2) + "\n")
    for mismatch in mismatches:
        print(f"MISMATCH {mismatch}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
