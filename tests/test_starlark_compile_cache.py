"""What makes compiling fast never changes what is compiled.

The runtime's IR is kept on disk (``kforge.starlark.prepared``) and the code generator
remembers its work on the runtime's functions within a process: a program compiled
from a runtime read back from the disk, with that memory warm, must be byte for byte
the program compiled from a runtime compiled afresh, with nothing remembered.  And a
damaged cache file is a miss, never a wrong runtime.
"""

from __future__ import annotations

import gc
import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kforge.program import ForgeProgram
from kforge.sealed import seal
from kforge.starlark import compiler, emit, lower, prepared
from kforge.starlark.ir import Function
from kforge.starlark.lowlevel import RuntimeLibrary
from kforge.starlark.syntax import Source
from starlark.corpus import CorpusProgram, corpus_programs

#: A sample across the corpus: every twelfth program (floats, loads, errors among them).
SAMPLE = corpus_programs()[::12]


def _compile(program: CorpusProgram) -> ForgeProgram | str:
    try:
        return compiler.compile_starlark(
            program.source, program.filename, loader=program.load_module, memory_quota=1 << 24
        )
    except compiler.StarlarkCompileError as error:
        return str(error)


def _encoded(result: ForgeProgram | str) -> bytes | str:
    return result if isinstance(result, str) else result.encoded


@pytest.fixture
def runtime_slot() -> Iterator[None]:
    """Lets a test choose the process's runtime, and puts the original back."""
    kept = compiler._runtime
    yield
    compiler._runtime = kept


def test_cached_runtime_compiles_the_same_bytes(tmp_path: Path, runtime_slot: None) -> None:
    path = tmp_path / "runtime.pickle"
    fresh = compiler.compile_runtime()
    compiler._runtime = fresh
    emit._runtime_allocations.clear()
    expected = {p.name: _encoded(_compile(p)) for p in SAMPLE}
    assert sum(isinstance(v, bytes) for v in expected.values()) >= len(SAMPLE) // 2

    built = prepared.load_or_build(compiler.compile_runtime, path)  # a miss: stored
    assert path.exists()
    loaded = prepared.load_or_build(_never_built, path)
    assert loaded is not built and loaded.catch_sites
    assert len(loaded.catch_sites) == len(fresh.catch_sites)
    compiler._runtime = loaded
    for round_ in ("cold memory", "warm memory"):
        got = {p.name: _encoded(_compile(p)) for p in SAMPLE}
        differ = [name for name in expected if got[name] != expected[name]]
        assert not differ, f"{round_}: compiled differently from a cached runtime: {differ}"


def test_a_compile_leaves_no_ir_or_syntax_tree_to_the_cycle_collector() -> None:
    """The collector is paused while a program compiles, so that it never walks the
    IR; what reference cycles still hold when the compile ends waits for the next
    collection, which walks all of it (100 ms after a 1,000-line program).  The
    allocator makes no cycles, nor do the lowering's self-calling closures (a float
    program has them) once their names go; and should a cycle come back, the
    compiler lets go of the IR and the syntax tree that it would otherwise hold."""
    source = "def f(n):\n    t = 0.5\n    for i in range(n):\n        t += i * 1.5\n"
    source += "        if t == 2.0:\n            t = -t\n    return t\n"
    source += "x = [f(k) for k in range(9) if k % 2]\nprint(x, 1.5 * len(x) < 3.0)\n"
    compiler.compile_starlark(source, "cycles.star")
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection frees is kept in gc.garbage
    try:
        compiler.compile_starlark(source, "cycles.star")
        gc.collect()
        left = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    # the lowering's self-calling closures let go of themselves: no cycle at all
    assert [type(thing).__name__ for thing in left] == []
    kinds = {type(thing).__name__ for thing in left}
    assert not kinds & {"_LinearBlock", "Allocation", "Emitted", "_Code"}
    compiled = [thing for thing in left if isinstance(thing, Function) and thing.source]
    assert all(not function.blocks for function in compiled)
    # and what every program shares keeps its code: the runtime, its float variants
    shared = [*compiler.runtime_library().functions.values(), *lower._float_variants.values()]
    assert all(function.blocks for function in shared)
    assert all(not thing.module.body for thing in left if isinstance(thing, Source))


def _never_built() -> RuntimeLibrary:
    raise AssertionError("the runtime was compiled although its file was whole")


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[: len(blob) // 2],  # a crash while writing
        lambda blob: blob[:100] + bytes([blob[100] ^ 1]) + blob[101:],  # a flipped bit
        lambda blob: seal(b"KFSTRT01", pickle.dumps(["not", "a", "runtime"])),
        lambda blob: seal(b"KFSTRT01", b"not a pickle at all"),
        lambda blob: b"",
    ],
    ids=["truncated", "flipped-bit", "wrong-object", "not-a-pickle", "empty"],
)
def test_damaged_cache_file_is_rebuilt(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "runtime.pickle"
    library = RuntimeLibrary()
    prepared.load_or_build(lambda: library, path)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    rebuilt = RuntimeLibrary()
    assert prepared.load_or_build(lambda: rebuilt, path) is rebuilt
    assert isinstance(prepared.load_or_build(_never_built, path), RuntimeLibrary)


def test_the_key_follows_the_sources(tmp_path: Path) -> None:
    """An edited runtime (or compiler) source is another key: never read stale."""
    package = Path(prepared.__file__).parent
    copy = tmp_path / "starlark"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert prepared.source_key(copy) == prepared.source_key()
    edited = copy / "runtime" / "strings.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert prepared.source_key(copy) != prepared.source_key()
    assert prepared.cache_path(tmp_path).parent == tmp_path / "starlark-runtime"


def test_an_unwritable_data_dir_only_costs_a_compile(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    library = RuntimeLibrary()
    assert prepared.load_or_build(lambda: library, blocker / "inside" / "runtime.pickle") is library


def test_files_of_older_runtimes_are_pruned(tmp_path: Path) -> None:
    folder = tmp_path / "starlark-runtime"
    folder.mkdir()
    for number in range(10):
        old = folder / f"runtime-{number:032x}.pickle"
        old.write_bytes(b"old")
        os.utime(old, (1000 + number, 1000 + number))
    path = folder / "runtime-current.pickle"
    prepared.load_or_build(RuntimeLibrary, path)
    left = sorted(p.name for p in folder.iterdir())
    assert left == [
        *(f"runtime-{number:032x}.pickle" for number in range(2, 10)),
        "runtime-current.pickle",
    ]
