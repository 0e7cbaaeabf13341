"""Run the Go implementation's test files (``starlark/testdata/*.star``) as its own test does.

Each file is split into chunks at lines ``---``; each chunk runs on its own, padded with
blank lines so that line numbers stay those of the file.  A line ending in
``### "pattern"`` says the chunk must stop with a run-time error raised on that line
whose message matches the (Go, RE2) pattern; any other error fails the chunk.  Chunks
load ``assert.star`` (ours, beside this file, with ``regexp.star``) and report a
failed assertion through ``error()``, on stderr.

Out of scope: whole files about sets, json, time and proto; chunks that load those
modules or use the Go-only ``option:loadbindsglobally``; and, inside the other
chunks, each top-level statement that uses sets or the Go harness's own
``struct``/``hasfields``/``fibonacci`` (blanked out, line numbers kept, together with
every later statement that uses a name it bound).  Each is listed with its reason.  ``option:while``,
``recursion`` and ``globalreassign`` are always on in kforge's dialect.

Assertions are counted by call site: a chunk's ``assert.*`` calls, less one for each
``error()`` report; a chunk that ends any other way than expected passes none.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from starlark.harness import RUNTIME_ERROR, SUCCESS, Outcome, go_testdata_dir

HERE = Path(__file__).resolve().parent
ASSERT_MODULES = {"assert.star": HERE / "assert.star", "regexp.star": HERE / "regexp.star"}

#: Files run by Go's own test (starlark/eval_test.go), in its order.
GO_TEST_FILES = [
    "assign",
    "bool",
    "builtins",
    "bytes",
    "control",
    "dict",
    "float",
    "function",
    "int",
    "json",
    "list",
    "math",
    "misc",
    "proto",
    "set",
    "string",
    "time",
    "tuple",
    "recursion",
    "module",
    "while",
]

OUT_OF_SCOPE_FILES = {
    "set": "the set type is not part of the dialect",
    "json": "the json module is not provided",
    "time": "the time module is not provided",
    "proto": "the proto module is not provided",
}

_STRINGS_AND_COMMENTS = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'(?:[^\\]|\\.)*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*'
)
#: Reasons a whole chunk is out of scope (the file-level ones aside).
_CHUNK_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("uses the Go-only option:loadbindsglobally", re.compile(r"option:loadbindsglobally")),
    ("loads json, time or proto", re.compile(r"load\(\s*[\"'](json|time|proto)\.star")),
    (
        "uses a loaded name above its load (with global reassignment, as here, top-level "
        "names resolve where they stand: undefined)",
        re.compile(r"^_ = assert\b", re.M),
    ),
    (
        "defines a function of more than 63 parameters (kforge passes arguments in "
        "registers: docs/starlark.md, Calling convention)",
        re.compile(r"we avoid a map allocation for <64 parameters"),
    ),
]

#: Reasons one top-level statement is out of scope; it is blanked out, with every later
#: statement that uses a name it binds.
_STATEMENT_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("uses sets", re.compile(r"\bset\b")),
    (
        "uses the Go harness's struct, hasfields or fibonacci",
        re.compile(r"\b(struct|hasfields|fibonacci)\b"),
    ),
]
_WANT_ERROR = re.compile(r"###\s*(.*)$")
_MATH_LOAD = re.compile(r"""^load\(\s*["']math\.star["']\s*,\s*["']math["']\s*\)""", re.M)
ASSERTIONS = ("eq", "ne", "true", "lt", "contains", "fails")
_ASSERT_CALL = re.compile(r"\bassert\.(eq|ne|true|lt|contains|fails|fail)\(")


@dataclass
class Chunk:
    file: str
    index: int
    first_line: int
    source: str  # padded: line numbers are the file's
    #: line -> the pattern its error message must match
    want_errors: dict[int, str] = field(default_factory=dict)
    bad_patterns: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.file}.star#{self.index}@{self.first_line}"

    @property
    def assertions(self) -> int:
        return len(_ASSERT_CALL.findall(_code_only(self.scoped_source)))

    def out_of_scope(self) -> str | None:
        """Why the whole chunk is out of scope, or None."""
        if self.file in OUT_OF_SCOPE_FILES:
            return OUT_OF_SCOPE_FILES[self.file]
        for reason, rule in _CHUNK_RULES:
            if rule.search(self.source):
                return reason
        return None

    @property
    def scoped_source(self) -> str:
        """The source with its out-of-scope statements blanked (line numbers kept), and
        its load of the Go harness's ``math.star`` too: kforge predeclares ``math``."""
        lines = self.source.split("\n")
        for first, last, _reason in self.removed_statements():
            lines[first - 1 : last] = [""] * (last - first + 1)
        return _MATH_LOAD.sub("", "\n".join(lines))

    @property
    def scoped_want_errors(self) -> dict[int, str]:
        removed = {
            line
            for first, last, _reason in self.removed_statements()
            for line in range(first, last + 1)
        }
        return {line: p for line, p in self.want_errors.items() if line not in removed}

    def removed_statements(self) -> list[tuple[int, int, str]]:
        """(first line, last line, reason) of each top-level statement taken out."""
        removed: list[tuple[int, int, str]] = []
        unbound: set[str] = set()
        lines = self.source.split("\n")
        for first, last in top_level_statements(self.source):
            text = "\n".join(lines[first - 1 : last])
            code = _code_only(text)
            bound = _bound_names(code)
            reason = _statement_reason(text, code)
            if reason is None:
                used = sorted(n for n in unbound if re.search(rf"\b{n}\b", _uses(code)))
                reason = f"uses {used[0]}, taken out above" if used else None
            if reason is None:
                unbound -= bound  # bound afresh: later uses are fine again
            else:
                removed.append((first, last, reason))
                unbound |= bound
        return removed


def _statement_reason(text: str, code: str) -> str | None:
    for reason, rule in _STATEMENT_RULES:
        if rule.search(code):
            return reason
    if "called recursively" in text:
        return "expects recursion to be refused (the dialect allows it)"
    return None


def _uses(code: str) -> str:
    """A statement's code less the targets of a top-level assignment on its first line."""
    return re.sub(r"^[\w, ()]+?\s*=(?!=)", "", code, count=1)


def _code_only(text: str) -> str:
    """Text with string literals emptied and comments dropped."""
    return _STRINGS_AND_COMMENTS.sub(lambda m: "" if m.group(0)[0] == "#" else '""', text)


def _bound_names(code: str) -> set[str]:
    """Names a top-level statement binds (a definition, or its assignment's targets)."""
    names = set(re.findall(r"^def (\w+)", code))
    for targets in re.findall(r"^([\w, ()]+?)\s*=(?!=)", code):
        names |= set(re.findall(r"\w+", targets))
    return names


def top_level_statements(source: str) -> list[tuple[int, int]]:
    """(first line, last line) of each statement that starts in column 0."""
    statements: list[list[int]] = []
    depth = 0
    at_line_start = True
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = token.type
        if kind == tokenize.INDENT:
            depth += 1
        elif kind == tokenize.DEDENT:
            depth -= 1
        elif kind == tokenize.NEWLINE:
            if statements:
                statements[-1][1] = token.start[0]
            at_line_start = True
        elif kind in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
            continue
        elif at_line_start:
            at_line_start = False
            if depth == 0:
                statements.append([token.start[0], token.end[0]])
    return [(first, last) for first, last in statements]


def read_chunks(path: Path) -> list[Chunk]:
    """The chunks of one test file, as Go's chunkedfile package splits them."""
    text = path.read_text(encoding="utf-8")
    chunks = []
    line = 1
    for index, body in enumerate(text.split("\n---\n")):
        chunk = Chunk(path.stem, index, line, "\n" * (line - 1) + body)
        for offset, text_line in enumerate(body.split("\n")):
            match = _WANT_ERROR.search(text_line)
            if match is None:
                continue
            pattern = _go_unquote(match.group(1).strip())
            if pattern is None:
                chunk.bad_patterns.append(match.group(1))
            else:
                chunk.want_errors[line + offset] = pattern
        line += body.count("\n") + 2  # the chunk's lines and the "---" line
        chunks.append(chunk)
    return chunks


def _go_unquote(literal: str) -> str | None:
    """A Go string literal's value ("..." with escapes, or `...` raw), or None."""
    if len(literal) >= 2 and literal[0] == literal[-1] == "`":
        return literal[1:-1]
    if len(literal) >= 2 and literal[0] == literal[-1] == '"':
        import ast

        try:
            value = ast.literal_eval(literal)
        except (SyntaxError, ValueError):
            return None
        return value if isinstance(value, str) else None
    return None


def go_test_files() -> list[Path]:
    directory = go_testdata_dir()
    return [
        directory / f"{name}.star"
        for name in GO_TEST_FILES
        if (directory / f"{name}.star").exists()
    ]


def load_assert_module(name: str) -> str:
    """The loader for chunks: ``assert.star`` and ``regexp.star`` are ours."""
    if name not in ASSERT_MODULES:
        raise KeyError(f"no module {name!r} for the Go test files")
    return ASSERT_MODULES[name].read_text(encoding="utf-8")


@dataclass(frozen=True)
class ChunkResult:
    chunk: Chunk
    passed: bool
    assertions_passed: int
    why: str = ""


def judge(chunk: Chunk, outcome: Outcome) -> ChunkResult:
    """Whether a chunk's run is what its ``###`` lines and assertions ask, as Go judges it."""
    failures = [line for line in outcome.stderr.splitlines() if line.strip()]
    problems = list(failures)
    want = dict(chunk.scoped_want_errors)
    if outcome.kind == RUNTIME_ERROR:
        line = _innermost_line(chunk, outcome.traceback or "")
        pattern = want.pop(line, None) if line is not None else None
        if pattern is None:
            problems.append(f"unexpected error at line {line}: {outcome.message}")
        elif not re.search(pattern, outcome.message or ""):
            problems.append(f"error {outcome.message!r} does not match {pattern!r}")
    elif outcome.kind != SUCCESS:
        problems.append(f"{outcome.kind}: {outcome.message} at line {outcome.line}")
    problems += [f"line {line}: expected an error matching {p!r}" for line, p in want.items()]
    problems += [f"not a quoted pattern: {p}" for p in chunk.bad_patterns]
    ended_right = len(problems) == len(failures)
    passed = max(chunk.assertions - len(failures), 0) if ended_right else 0
    return ChunkResult(chunk, not problems, passed, "; ".join(problems)[:500])


def _innermost_line(chunk: Chunk, traceback: str) -> int | None:
    """The line of the innermost traceback frame in the chunk's own file."""
    frames = re.findall(rf"^  {re.escape(chunk.file)}\.star:(\d+):\d+: in ", traceback, re.M)
    return int(frames[-1]) if frames else None


# ------------------------------------------------------------------- kforge


def run_chunk_kforge(chunk: Chunk, *, tick_budget: int, memory_quota: int, tier: str) -> Outcome:
    from starlark.harness import compile_kforge, run_kforge

    compiled = compile_kforge(
        chunk.scoped_source,
        f"{chunk.file}.star",
        loader=load_assert_module,
        testing=True,
        memory_quota=memory_quota,
    )
    if isinstance(compiled, Outcome):
        return compiled
    run = run_kforge(
        compiled, tier, tick_budget=tick_budget, memory_quota=memory_quota, testing=True
    )
    return run.outcome


# ------------------------------------------------------------------- the oracle
#
# starlark-go's Python bindings can run neither ``catch`` nor ``module`` (a Python
# callback cannot call a Starlark function, nor return a value with attributes), so
# the oracle runs a chunk with two test-only adaptations: ``assert.X`` is spelled
# ``assert_X``, and ``catch(f)`` is replayed: a run that fails inside a catch is
# repeated with that catch answering the recorded message without calling f.
# ``_freeze`` cannot freeze there, so assertions about frozen values fail under it.

_ORACLE_ASSERT = """
def catch(f):
    n = _catch_begin()
    known = _catch_known(n)
    if known:
        _catch_end()
        return known[0]
    f()
    _catch_end()
    return None

def _freeze(x):
    return x
"""


def oracle_assert_module() -> str:
    """Our assert.star, adapted for the oracle as described above, with regexp.star inlined."""
    source = load_assert_module("assert.star").replace('load("regexp.star", "matches")', "")
    exports = "\n".join(f"assert_{name} = _{name}" for name in ASSERTIONS) + "\nassert_fail = error"
    source = re.sub(r"^assert = module\(.*?^\)", exports, source, flags=re.M | re.S)
    return _ORACLE_ASSERT + load_assert_module("regexp.star") + source


def run_chunk_oracle(chunk: Chunk, max_replays: int = 500) -> Outcome:
    from starlark.harness import run_oracle

    modules = {"assert.star": oracle_assert_module()}
    body = _ASSERT_CALL.sub(lambda m: f"assert_{m.group(1)}(", chunk.scoped_source)
    known: dict[int, list[str | None]] = {}
    for _ in range(max_replays):
        state = _CatchState(known)
        outcome = run_oracle(
            body, f"{chunk.file}.star", modules=modules, predeclared=state.builtins()
        )
        if outcome.kind == RUNTIME_ERROR and state.active:
            known[state.active[-1]] = [outcome.message]
            continue
        return replace(outcome, stderr="".join(state.errors))
    raise RuntimeError(f"{chunk.name}: more than {max_replays} failing catch() calls")


class _CatchState:
    def __init__(self, known: dict[int, list[str | None]]) -> None:
        self.known = known
        self.count = 0
        self.active: list[int] = []
        self.errors: list[str] = []

    def builtins(self) -> dict[str, Callable[..., Any]]:
        def _catch_begin() -> int:
            self.count += 1
            self.active.append(self.count)
            return self.count

        def _catch_known(n: int) -> list[str | None]:
            return self.known.get(n, [])

        def _catch_end() -> None:
            self.active.pop()

        def error(message: Any) -> None:
            self.errors.append(f"{message}\n")

        self._keep = (
            _catch_begin,
            _catch_known,
            _catch_end,
            error,
        )  # the bindings hold no reference
        return {
            "_catch_begin": _catch_begin,
            "_catch_known": _catch_known,
            "_catch_end": _catch_end,
            "error": error,
        }
