"""The runtime compiled to IR, kept on disk so that a process does not compile it again.

Compiling the runtime's dialect to IR costs about half a second; a program reaches
only part of it, but every process that compiles Starlark needs it.  The compiled
:class:`~kforge.starlark.lowlevel.RuntimeLibrary` is pickled into one sealed file
(:mod:`kforge.sealed`) in ``<data_dir>/starlark-runtime/``, named for a key that
covers everything the IR follows from: the source of every module of
:mod:`kforge.starlark` (the runtime and the compiler that reads it), kforge's version
and Python's.  A file that is missing, damaged, of another key or does not unpickle
to a library is a miss: the runtime is compiled again and the file rewritten, so a
bad file costs time, never a wrong program.  (Like the fast tier's module cache,
the data directory is trusted: whoever can write it can run code.)

Instructions are known to the code generator by identity, which a pickle does not
keep: the catch sites travel as positions (function, block, instruction).
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import kforge
from kforge.core import default_data_dir
from kforge.sealed import read_sealed, write_sealed
from kforge.starlark.lowlevel import RuntimeLibrary

_MAGIC: Final = b"KFSTRT01"
_SUBDIRECTORY: Final = "starlark-runtime"
#: The files of stored runtimes, whatever their source key.
_FILES: Final = "runtime-*.pickle"
#: Files of other runtimes kept beside the current one (other kforge versions, or
#: checkouts, sharing the data directory).
_KEPT_OTHERS: Final = 8
_PACKAGE: Final = Path(__file__).resolve().parent

#: A catch site's place: function name, block index, instruction index.
_Position = tuple[str, int, int]


def source_key(package: Path = _PACKAGE) -> str:
    """What the compiled runtime follows from, as a SHA-256: every source file of the
    Starlark package (runtime and compiler), kforge's version, Python's version."""
    digest = hashlib.sha256(f"{kforge.__version__}|{sys.version}".encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def cache_path(data_dir: Path | None = None) -> Path:
    """The file holding the compiled runtime of this very source."""
    folder = (data_dir or default_data_dir()) / _SUBDIRECTORY
    return folder / f"runtime-{source_key()[:32]}.pickle"


def load_or_build(build: Callable[[], RuntimeLibrary], path: Path | None = None) -> RuntimeLibrary:
    """The runtime from its file, or from ``build()`` (then stored for the next process)."""
    try:
        path = path or cache_path()
    except (OSError, RuntimeError):  # sources unreadable, or no home folder: no cache
        return build()
    library = _load(path)
    if library is None:
        library = build()
        _store(path, library)
    return library


def _load(path: Path) -> RuntimeLibrary | None:
    payload = read_sealed(path, _MAGIC)
    if payload is None:
        return None
    try:
        library, positions = pickle.loads(payload)
        if not isinstance(library, RuntimeLibrary):
            return None
        library.catch_sites = {
            id(library.functions[name].blocks[block].insns[insn]) for name, block, insn in positions
        }
    except Exception:  # whatever a damaged pickle raises: a miss
        return None
    return library


def _store(path: Path, library: RuntimeLibrary) -> None:
    positions: list[_Position] = [
        (name, block_number, number)
        for name, function in library.functions.items()
        for block_number, block in enumerate(function.blocks)
        for number, insn in enumerate(block.insns)
        if id(insn) in library.catch_sites
    ]
    kept = library.catch_sites
    library.catch_sites = set()
    try:
        payload = pickle.dumps((library, positions), protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        library.catch_sites = kept
    if write_sealed(path, _MAGIC, payload):
        _prune(path.parent, keep=path)


def clear(data_dir: Path | None = None) -> int:
    """Remove every stored runtime under ``data_dir``; returns how many files went."""
    folder = (data_dir or default_data_dir()) / _SUBDIRECTORY
    removed = 0
    for path in folder.glob(_FILES):
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def _prune(folder: Path, keep: Path) -> None:
    """Remove the files of all but the newest few other runtimes (an upgrade, or an
    edited runtime, leaves its predecessor's file behind, 1.5 MB each)."""
    try:
        others = sorted(
            (p for p in folder.glob(_FILES) if p != keep),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in others[_KEPT_OTHERS:]:
            old.unlink(missing_ok=True)
    except OSError:  # another process pruned meanwhile, or the folder is read-only
        pass
