"""The Starlark compiler's driver: source files in, one Forge program out.

:func:`compile_starlark` parses and resolves the main file and every file it loads
(each once, in load order), lowers them to IR, adds the runtime functions they
reach, and hands everything to the code generator.  The runtime is compiled from
its dialect once, kept on disk for the next process (:mod:`kforge.starlark.prepared`),
and shared by every program.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kforge.limits import (
    MAX_CODE_LENGTH,
    MAX_METADATA_BYTES,
    MAX_STARLARK_MODULES,
    MAX_STARLARK_SOURCE_BYTES,
)
from kforge.program import ForgeProgram
from kforge.starlark import builtins as starlark_builtins
from kforge.starlark import prepared, tables
from kforge.starlark.emit import Unit, emit_program
from kforge.starlark.errors import StarlarkCompileError
from kforge.starlark.lower import ModuleCompiler, ModuleInfo, ProgramState
from kforge.starlark.lowlevel import RuntimeLibrary, compile_modules
from kforge.starlark.regalloc import OutOfRegisters
from kforge.starlark.scope import Kind, resolve
from kforge.starlark.syntax import parse

#: The runtime's modules, compiled together (their functions see each other by name).
RUNTIME_MODULES: Final = tuple(
    f"kforge.starlark.runtime.{name}"
    for name in (
        "core",
        "gc",
        "values",
        "ints",
        "bigint",
        "int_builtins",
        "format",
        "strings",
        "lists",
        "list_methods",
        "dicts",
        "dict_methods",
        "sequences",
        "sorting",
        "ranges",
        "calls",
        "builtins_core",
        "builtins_seq",
        "testing",
        "host",
        "unicode",
        "string_methods",
        "interpolate",
        "softfloat",
        "floats",
        "float_text",
        "floatmath",
    )
)
#: The memory quota a program is compiled for unless told otherwise (the CLI default).
DEFAULT_MEMORY: Final = 65_536
MAX_SOURCE_BYTES: Final = MAX_STARLARK_SOURCE_BYTES
MAX_MODULES: Final = MAX_STARLARK_MODULES

#: Reads the source of a loaded module, given the name ``load()`` names it by.
Loader = Callable[[str], str]
#: Fetches a vault object by its id (32 bytes): for ``load("sha256:HEX", ...)``.
Fetch = Callable[[bytes], bytes]
#: How ``load()`` names a library stored in the vault: by the SHA-256 of its source.
CONTENT_PREFIX: Final = "sha256:"

_runtime: RuntimeLibrary | None = None
_runtime_lock = threading.Lock()


def runtime_library() -> RuntimeLibrary:
    """The runtime compiled to IR: once per process, read from the data directory when
    an earlier process compiled this very runtime (:mod:`kforge.starlark.prepared`)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = prepared.load_or_build(compile_runtime)
        return _runtime


def compile_runtime() -> RuntimeLibrary:
    """The runtime's modules compiled to IR, its builtins named for tracebacks."""
    library = compile_modules(list(RUNTIME_MODULES))
    for builtin in starlark_builtins.every_builtin():
        function = library.functions.get(builtin.impl)
        if function is not None:
            function.builtin = builtin.name
    return library


def directory_loader(directory: Path) -> Loader:
    """A loader that reads ``load("name", ...)`` as a file relative to ``directory``."""

    def load(name: str) -> str:
        path = directory / name
        try:
            if path.stat().st_size > MAX_SOURCE_BYTES:
                raise LoadFailure(f"cannot load {name}: larger than {MAX_SOURCE_BYTES} bytes")
            data = path.read_bytes()
        except OSError as error:
            raise LoadFailure(f"cannot load {name}: {error.strerror or error}") from None
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise LoadFailure(f"cannot load {name}: invalid UTF-8 at byte {error.start}") from None

    return load


class LoadFailure(Exception):
    """A module named by ``load()`` could not be read."""


@dataclass
class _Pending:
    filename: str
    text: str


class ProgramCompiler:
    """Compiles one program: the main file and what it loads."""

    def __init__(self, loader: Loader, testing: bool, fetch: Fetch | None = None) -> None:
        self.loader = loader
        self.fetch = fetch
        self.state = ProgramState(testing=testing)
        self.modules: dict[str, ModuleInfo] = {}
        self.loading: list[str] = []

    def compile_file(self, filename: str, text: str) -> ModuleInfo:
        key = filename
        existing = self.modules.get(key)
        if existing is not None:
            return existing
        if key in self.loading:
            cycle = " -> ".join([*self.loading[self.loading.index(key) :], key])
            raise StarlarkCompileError(filename, 1, 1, f"cycle in load graph: {cycle}")
        if len(self.modules) >= MAX_MODULES:
            raise StarlarkCompileError(filename, 1, 1, f"more than {MAX_MODULES} modules loaded")
        if len(text.encode()) > MAX_SOURCE_BYTES:
            raise StarlarkCompileError(
                filename, 1, 1, f"source larger than {MAX_SOURCE_BYTES} bytes"
            )
        self.loading.append(key)
        source = parse(text, filename)
        universe = set(starlark_builtins.UNIVERSE)
        predeclared = set(starlark_builtins.TESTING) if self.state.testing else set()
        if key == starlark_builtins.FORGE_MODULE:
            predeclared |= set(starlark_builtins.HOST)
        else:
            predeclared.add("forge")
        resolution = resolve(source.module, filename, predeclared, universe)
        loaded: dict[str, ModuleInfo] = {}
        if any(
            b.kind is Kind.PREDECLARED and b.name == "forge" for b in resolution.bindings.values()
        ):
            loaded[starlark_builtins.FORGE_MODULE] = self.compile_file(
                starlark_builtins.FORGE_MODULE, forge_source()
            )
        for statement in source.module.body:
            call = _load_call(statement)
            if call is None:
                continue
            name = call.args[0].value  # type: ignore[attr-defined]
            if name in loaded:
                continue
            if name == starlark_builtins.FORGE_MODULE:
                loaded[name] = self.compile_file(name, forge_source())
                continue
            try:
                child_text = (
                    self.content(name) if name.startswith(CONTENT_PREFIX) else self.loader(name)
                )
            except LoadFailure as error:
                raise StarlarkCompileError(
                    filename, call.lineno, call.col_offset + 1, str(error)
                ) from None
            except (OSError, KeyError, ValueError) as error:
                raise StarlarkCompileError(
                    filename, call.lineno, call.col_offset + 1, f"cannot load {name}: {error}"
                ) from None
            loaded[name] = self.compile_file(name, child_text)
        info = ModuleCompiler(self.state, source, resolution, key).compile(
            loaded, is_main=not self.loading[:-1]
        )
        resolution.release()
        source.release()
        self.loading.pop()
        self.modules[key] = info
        return info

    def release(self) -> None:
        """Let go of the program's IR once it is linked: the lowering may leave reference
        cycles that reach it (closures that call themselves), and what they hold would
        wait for the cycle collector, paused while a program compiles, to walk it all
        (100 ms after a 1,000-line program).  Only compiled Starlark's: the program's
        functions include runtime ones (the float variants), shared by every program."""
        for function in self.state.functions.values():
            if function.source is not None:
                function.blocks.clear()

    def content(self, name: str) -> str:
        """The source of a library named by its content id, fetched from the vault."""
        digest = name[len(CONTENT_PREFIX) :]
        try:
            object_id = bytes.fromhex(digest)
        except ValueError:
            object_id = b""
        if len(object_id) != 32:
            raise LoadFailure(f"cannot load {name}: a content id is sha256: and 64 hex digits")
        if self.fetch is None:
            raise LoadFailure(f"cannot load {name}: no vault to fetch it from here")
        try:
            data = self.fetch(object_id)
        except Exception as error:  # whatever the vault says: the load fails, with its words
            raise LoadFailure(f"cannot load {name}: {error}") from None
        if hashlib.sha256(data).digest() != object_id:
            raise LoadFailure(f"cannot load {name}: the vault's object does not match its id")
        if len(data) > MAX_SOURCE_BYTES:
            raise LoadFailure(f"cannot load {name}: larger than {MAX_SOURCE_BYTES} bytes")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise LoadFailure(
                f"cannot load {name}: not UTF-8 Starlark source (byte {error.start})"
            ) from None

    def link(self, main: ModuleInfo, memory_size: int) -> ForgeProgram:
        runtime = runtime_library()
        functions = dict(runtime.functions)
        functions.update(self.state.functions)
        if self.state.method_tables:
            functions["method_number"] = tables.method_number_function(self.state)
        functions["method_names"] = tables.method_names_function(self.state)

        if self.state.builtin_values:
            functions["builtin_call"] = tables.builtin_call_function(self.state)
        declarations = dict(runtime.data.items)
        declarations.update(self.state.data.items)
        unit = Unit(
            functions, declarations, main.init, memory_size, catch_sites=runtime.catch_sites
        )
        try:
            program = emit_program(unit).program
        except OutOfRegisters as error:
            raise StarlarkCompileError(
                main.filename, 1, 1, f"function {error} is too large to compile"
            ) from None
        if len(program.code) > MAX_CODE_LENGTH or len(program.metadata) > MAX_METADATA_BYTES:
            raise StarlarkCompileError(
                main.filename,
                1,
                1,
                f"the program is too large: {len(program.code)} instructions "
                f"(at most {MAX_CODE_LENGTH}), {len(program.metadata)} bytes of source map "
                f"(at most {MAX_METADATA_BYTES})",
            )
        return program


def forge_source() -> str:
    """The Starlark source of the ``forge`` module (shipped beside the compiler)."""
    return (Path(__file__).parent / "forge.star").read_text(encoding="utf-8")


def _load_call(statement: ast.stmt) -> ast.Call | None:
    if (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id == "load"
    ):
        return statement.value
    return None


def compile_starlark(
    source: str,
    filename: str = "<stdin>",
    *,
    loader: Loader | None = None,
    testing: bool = False,
    memory_quota: int = DEFAULT_MEMORY,
    fetch: Fetch | None = None,
) -> ForgeProgram:
    """Compile Starlark ``source`` (from ``filename``) to a Forge program for a machine
    of ``memory_quota`` bytes (it runs in any larger quota too).  ``load("NAME")`` reads
    NAME through ``loader`` (default: a file beside ``filename``); ``load("sha256:HEX")``
    fetches the library with that content id through ``fetch`` (a vault)."""
    if loader is None:
        loader = directory_loader(Path(filename).parent if filename else Path.cwd())
    with _collector_paused():
        compiler = ProgramCompiler(loader, testing, fetch)
        program = compiler.link(compiler.compile_file(filename, source), memory_quota)
        compiler.release()
        del compiler  # freed while the collector still sleeps, so it never walks the IR
    return program


_compiling = 0
_collector_was_enabled = False
_compiling_lock = threading.Lock()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a program compiles: a compile makes
    hundreds of thousands of short-lived objects, freed by reference counting, and
    each collection they trigger would walk the runtime's IR again (a third of the
    compile time).  Compiles in several threads pause it together; the last one to
    end turns it back on, if it was on."""
    global _compiling, _collector_was_enabled
    with _compiling_lock:
        if _compiling == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _compiling += 1
    try:
        yield
    finally:
        with _compiling_lock:
            _compiling -= 1
            if _compiling == 0 and _collector_was_enabled:
                gc.enable()
