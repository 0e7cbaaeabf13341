"""The Starlark conformance corpus, run through kforge on both tiers.

Every program in ``tests/starlark/corpus/`` is compiled by ``kforge.starlark.compile``
and run on the reference and the fast tier.  Each run must match the expectation
recorded beside the program (the Go implementation's answer, see ``starlark/regen.py``):

- success: the same stdout bytes, nothing on stderr;
- run-time error: the same stdout, a ``USER_FAULT``, and stderr holding the traceback
  exactly as Go prints it (frames with line and column, then the Go-worded message);
- compile error: ``StarlarkCompileError`` on the same line; for resolver errors
  (undefined names, misplaced ``break``, duplicate parameters ...) also the same
  column and message.  Parser errors are compared by line only: Go's wording
  ("got illegal token, want primary expression") and its column (the end of the
  offending token) belong to its parser, and kforge may well say it better.

The two tiers must also agree with each other exactly, ticks included.

Limits per program: a tick budget of 20,000,000 and a memory quota of 16 MiB.  The
corpus programs are small (the largest run a few thousand loop iterations, factorials
up to 100!, recursion 500 deep), so a correct compilation needs a small fraction of
either; the budget is there to stop a miscompiled program that never ends within
seconds on the reference tier (about 2 million ticks a second), and the quota leaves
room for big integers and lists while keeping a runaway allocation cheap to refuse.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kforge.cli import main
from starlark.corpus import PENDING_GROUPS, CorpusProgram, corpus_programs
from starlark.harness import (
    COMPILE_ERROR,
    RUNTIME_ERROR,
    SUCCESS,
    TIERS,
    KforgeRun,
    Outcome,
    compile_kforge,
    kforge_missing_reason,
    run_kforge,
    run_oracle,
)

TICK_BUDGET = 20_000_000
MEMORY_QUOTA = 16 * 1024 * 1024

PROGRAMS = corpus_programs()
CHECKED = [p for p in PROGRAMS if p.group not in PENDING_GROUPS]
PENDING = [p for p in PROGRAMS if p.group in PENDING_GROUPS]

needs_compiler = pytest.mark.skipif(
    kforge_missing_reason() is not None, reason=str(kforge_missing_reason())
)

# Everything the issue lists, each of which some corpus program must call by name.
BUILTINS = [
    "abs",
    "any",
    "all",
    "bool",
    "bytes",
    "chr",
    "dict",
    "dir",
    "enumerate",
    "fail",
    "getattr",
    "hasattr",
    "hash",
    "int",
    "len",
    "list",
    "max",
    "min",
    "ord",
    "print",
    "range",
    "repr",
    "reversed",
    "sorted",
    "str",
    "tuple",
    "type",
    "zip",
]
STRING_METHODS = [
    "capitalize",
    "codepoint_ords",
    "codepoints",
    "count",
    "elem_ords",
    "elems",
    "endswith",
    "find",
    "format",
    "index",
    "isalnum",
    "isalpha",
    "isdigit",
    "islower",
    "isspace",
    "istitle",
    "isupper",
    "join",
    "lower",
    "lstrip",
    "partition",
    "removeprefix",
    "removesuffix",
    "replace",
    "rfind",
    "rindex",
    "rpartition",
    "rsplit",
    "rstrip",
    "split",
    "splitlines",
    "startswith",
    "strip",
    "title",
    "upper",
]
LIST_METHODS = ["append", "clear", "extend", "index", "insert", "pop", "remove"]
DICT_METHODS = ["clear", "get", "items", "keys", "pop", "popitem", "setdefault", "update", "values"]
BYTES_METHODS = ["elems"]


def _ids(programs: list[CorpusProgram]) -> list[str]:
    return [p.name for p in programs]


# --------------------------------------------------------------- the corpus itself


def test_the_corpus_is_broad() -> None:
    kinds = [p.expected().kind for p in CHECKED]
    assert len(CHECKED) >= 350
    assert kinds.count(SUCCESS) >= 150
    assert kinds.count(RUNTIME_ERROR) >= 120
    assert kinds.count(COMPILE_ERROR) >= 50


def test_every_program_has_its_expectation() -> None:
    missing = [p.name for p in PROGRAMS if not p.expectation_path.exists()]
    assert not missing, f"run tests/starlark/regen.py for: {missing}"
    orphans = [
        path.name
        for path in Path(PROGRAMS[0].path).parents[1].glob("*/*.json")
        if not path.with_suffix(".star").exists()
    ]
    assert not orphans


@pytest.mark.parametrize(
    ("kind", "names", "pattern"),
    [
        ("builtin", BUILTINS, r"\bNAME\("),
        ("string method", STRING_METHODS, r'["\w)\]]\.NAME\('),
        ("list method", LIST_METHODS, r"[\w)\]]\.NAME\("),
        ("dict method", DICT_METHODS, r"[\w)}\]]\.NAME\("),
        ("bytes method", BYTES_METHODS, r'b"\w*"\.NAME\('),
    ],
)
def test_the_corpus_calls_every_builtin_and_method(
    kind: str, names: list[str], pattern: str
) -> None:
    sources = "\n".join(p.source for p in CHECKED)
    absent = [name for name in names if not re.search(pattern.replace("NAME", name), sources)]
    assert not absent, f"no corpus program calls the {kind}s {absent}"


def test_expectations_are_the_oracles_answers() -> None:
    """The recorded expectations are what starlark-go answers today (regen.py is current)."""
    pytest.importorskip("starlark_go")
    stale = [
        p.name
        for p in PROGRAMS
        if run_oracle(p.source, p.filename, modules=p.modules()) != p.expected()
    ]
    assert not stale, f"stale expectations (run tests/starlark/regen.py): {stale}"


# --------------------------------------------------------------- kforge against it


def run_both_tiers(program: CorpusProgram) -> KforgeRun:
    """Compile once, run on each tier, insist the tiers agree, and return one run."""
    compiled = compile_kforge(
        program.source, program.filename, loader=program.load_module, memory_quota=MEMORY_QUOTA
    )
    runs = [
        run_kforge(compiled, tier, tick_budget=TICK_BUDGET, memory_quota=MEMORY_QUOTA)
        for tier in TIERS
    ]
    assert runs[0] == runs[1], f"the tiers disagree on {program.name}"
    return runs[0]


def assert_matches(actual: Outcome, expected: Outcome) -> None:
    assert actual.kind == expected.kind, actual
    assert actual.stdout == expected.stdout
    if expected.kind == COMPILE_ERROR:
        assert actual.line == expected.line, actual
        if expected.phase == "resolve":
            assert (actual.col, actual.message) == (expected.col, expected.message)
    elif expected.kind == RUNTIME_ERROR:
        assert actual.message == expected.message
        assert actual.traceback == expected.traceback
        assert actual.stderr == "", "nothing may precede the traceback on stderr"
    else:
        assert actual.stderr == ""


@needs_compiler
@pytest.mark.parametrize("program", CHECKED, ids=_ids(CHECKED))
def test_program_runs_as_in_go(program: CorpusProgram) -> None:
    run = run_both_tiers(program)
    assert_matches(run.outcome, program.expected())


@needs_compiler
@pytest.mark.parametrize("program", PENDING, ids=_ids(PENDING))
def test_pending_feature_is_refused_clearly(program: CorpusProgram) -> None:
    """Until its group's feature lands, a program is refused, never answered wrongly."""
    word, _why = PENDING_GROUPS[program.group]
    outcome = run_both_tiers(program).outcome
    assert outcome.kind in (COMPILE_ERROR, RUNTIME_ERROR), outcome
    assert word in (outcome.message or ""), outcome


# --------------------------------------------------------------- the command line

CLI_LIMITS = ["--ticks", str(TICK_BUDGET), "--memory", str(MEMORY_QUOTA)]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@needs_compiler
@pytest.mark.parametrize("name", ["load/transitive", "errors/traceback_through_lambda"])
def test_kforge_run_json_reports_stdout_and_traceback(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    program = next(p for p in PROGRAMS if p.name == name)
    expected = program.expected()
    status, out, _ = _cli(["run", str(program.path), "--json", *CLI_LIMITS], capsys)
    result = json.loads(out)
    assert bytes.fromhex(result["output_hex"]).decode() == expected.stdout
    if expected.kind == SUCCESS:
        assert (status, result["state"]) == (0, "HALTED")
    else:
        assert (status, result["state"], result["fault"]) == (1, "FAULTED", "USER_FAULT")
        stderr = bytes.fromhex(result["stderr_hex"]).decode()
        assert stderr.endswith(f"Error: {expected.message}\n")


@needs_compiler
def test_kforge_run_reports_a_compile_error_with_exit_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    program = next(p for p in PROGRAMS if p.name == "compile_errors/undefined_second_line")
    expected = program.expected()
    status, _, err = _cli(["run", str(program.path), "--json", *CLI_LIMITS], capsys)
    assert status == 2
    assert f":{expected.line}:{expected.col}: " in err
    assert expected.message is not None and expected.message in err


# --------------------------------------------------------------- the runner itself


def _assembled(text: str) -> object:
    from kforge.asm import assemble

    return assemble(text)


def _printing(stdout: str, stderr: str, end: str) -> str:
    """Assembly that writes ``stdout`` and ``stderr`` and then ends with ``end``."""
    return "\n".join(
        [
            ".data",
            f"out: .ascii {json.dumps(stdout)}",
            "out_end:",
            f"err: .ascii {json.dumps(stderr)}",
            "err_end:",
            ".code",
            "LI r1, out",
            "LI r2, out_end",
            "SUB r2, r2, r1",
            "SEND 0, r1, r2",
            "LI r1, err",
            "LI r2, err_end",
            "SUB r2, r2, r1",
            "SEND 1, r1, r2",
            end,
        ]
    )


@pytest.mark.parametrize("tier", TIERS)
def test_the_runner_reads_a_user_fault_as_a_starlark_error(tier: str) -> None:
    expected = next(p for p in PROGRAMS if p.name == "functions/deep_traceback").expected()
    assert expected.traceback is not None
    program = _assembled(_printing(expected.stdout, expected.traceback + "\n", "FAULT 1"))
    run = run_kforge(program, tier, tick_budget=1000, memory_quota=65536)
    assert run.fault == "USER_FAULT"
    assert_matches(run.outcome, expected)


@pytest.mark.parametrize("tier", TIERS)
def test_the_runner_tells_a_wrong_answer(tier: str) -> None:
    expected = next(p for p in PROGRAMS if p.name == "ints/arithmetic").expected()
    program = _assembled(_printing(expected.stdout + "extra\n", "", "HALT"))
    run = run_kforge(program, tier, tick_budget=1000, memory_quota=65536)
    assert run.outcome.kind == SUCCESS
    with pytest.raises(AssertionError):
        assert_matches(run.outcome, expected)
    out_of_ticks = run_kforge(program, tier, tick_budget=3, memory_quota=65536)
    assert out_of_ticks.fault == "OUT_OF_TICKS"
