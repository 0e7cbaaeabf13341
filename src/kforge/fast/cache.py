"""Compiled modules on disk, so that a program compiles once per machine, not once per process.

One file per program id under ``<data_dir>/fast-modules/``, named for the
program id and a key covering everything else that changes the machine code
(compiler version, wasmtime version, engine settings, CPU architecture).  A file
is ``MAGIC | sha256(payload) | payload`` where the payload is a msgpack array of
what running the module needs of the program's plan (its enterable leaders, whether
it holds a TICK, the registers it names: see :class:`~kforge.fast.analysis.RunFacts`)
and ``wasmtime.Module.serialize()``, so that a hit skips the program's analysis too.
It is written to a temporary file and renamed into place, so readers never see half
a file.

``Module.deserialize`` trusts its input, so the checksum is verified first: a
truncated or corrupted file, or one whose facts do not fit the program's code, is
deleted and reported as a miss, never loaded.
(The data directory itself is trusted: whoever can write it can run code.)

The folder is bounded: after each store, the least recently used files go until
the total is at most ``max_bytes`` (default 256 MiB, or
``$KFORGE_MODULE_CACHE_MAX_BYTES``).  A file's modification time is its last
use: a hit touches it.  Files of other keys (an older compiler, another wasmtime)
are never hit again, so they are the first to go.  ``kforge cache info`` and
``kforge cache clear`` show and empty the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgpack
import wasmtime

from kforge.core import DATA_DIR_ENVIRONMENT, Hash256, default_data_dir
from kforge.fast.analysis import RunFacts
from kforge.fast.compiler import COMPILER_VERSION
from kforge.fast.runtime import ENGINE_SETTINGS
from kforge.isa import Instruction
from kforge.sealed import PARTIAL_SUFFIX, read_sealed, write_sealed

__all__ = [
    "DATA_DIR_ENVIRONMENT",
    "DEFAULT_MAX_BYTES",
    "MAGIC",
    "MAX_BYTES_ENVIRONMENT",
    "CacheUsage",
    "ModuleCache",
    "configured_max_bytes",
    "default_data_dir",
]

#: The first bytes of a cache file (the version of its layout).
MAGIC: Final = b"KFWASM02"
_SUBDIRECTORY: Final = "fast-modules"
_MODULE_SUFFIX: Final = ".cwasm"
DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024
MAX_BYTES_ENVIRONMENT: Final = "KFORGE_MODULE_CACHE_MAX_BYTES"


def configured_max_bytes() -> int:
    """The size cap: ``$KFORGE_MODULE_CACHE_MAX_BYTES`` if set, else :data:`DEFAULT_MAX_BYTES`.

    Raises ``ValueError`` naming the variable when it is not a whole number of bytes.
    """
    text = os.environ.get(MAX_BYTES_ENVIRONMENT)
    if text is None or not text.strip():
        return DEFAULT_MAX_BYTES
    try:
        value = int(text.strip(), 10)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{MAX_BYTES_ENVIRONMENT} must be a number of bytes, got '{text}'")
    return value


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """What the cache folder holds."""

    directory: Path
    modules: int
    total_bytes: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class _Entry:
    path: Path
    size: int
    used_at: float


def _build_key(variant: str) -> str:
    try:
        wasmtime_version = importlib.metadata.version("wasmtime")
    except importlib.metadata.PackageNotFoundError:
        wasmtime_version = "unknown"
    facts = f"{COMPILER_VERSION}|wasmtime {wasmtime_version}|{ENGINE_SETTINGS}|{platform.machine()}|{variant}"
    return hashlib.sha256(facts.encode()).hexdigest()[:16]


class ModuleCache:
    """Serialized modules under ``data_dir``; every failure is a miss, never an error."""

    def __init__(self, data_dir: Path, variant: str = "", max_bytes: int | None = None) -> None:
        """``variant`` names compiler options that change the code (part of the key);
        ``max_bytes`` bounds the folder (default :func:`configured_max_bytes`, or the
        default when that is misconfigured: a cache never fails its caller)."""
        self.directory = Path(data_dir) / _SUBDIRECTORY
        self.key = _build_key(variant)
        if max_bytes is None:
            try:
                max_bytes = configured_max_bytes()
            except ValueError:
                max_bytes = DEFAULT_MAX_BYTES
        self.max_bytes = max_bytes

    def path_for(self, program_id: Hash256) -> Path:
        """The file holding the module of ``program_id``."""
        return self.directory / f"{program_id.hex}-{self.key}{_MODULE_SUFFIX}"

    def load(
        self, engine: wasmtime.Engine, program_id: Hash256, code: tuple[Instruction, ...]
    ) -> tuple[wasmtime.Module, RunFacts] | None:
        """The cached module of ``program_id`` (whose instructions are ``code``) and its
        run facts, or ``None`` when absent, corrupt or incompatible (then deleted)."""
        path = self.path_for(program_id)
        payload = read_sealed(path, MAGIC)
        if payload is None:
            return None
        found = _unpack(payload, code)
        module = None
        if found is not None:
            facts, serialized = found
            try:
                module = wasmtime.Module.deserialize(engine, serialized)
            except (wasmtime.WasmtimeError, ValueError, TypeError):
                module = None
        if module is None or found is None:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return None
        _touch(path)
        return module, facts

    def store(self, program_id: Hash256, module: wasmtime.Module, facts: RunFacts) -> None:
        """Write the module and its run facts; a read-only or full disk only costs the
        next process a compile."""
        try:
            serialized = bytes(module.serialize())
        except wasmtime.WasmtimeError:
            return
        payload = msgpack.packb(
            [facts.enterable, facts.has_tick, bytes(facts.used_registers), serialized]
        )
        if write_sealed(self.path_for(program_id), MAGIC, payload):
            self.evict()

    def _entries(self) -> list[_Entry]:
        entries = []
        try:
            paths = list(self.directory.glob("*" + _MODULE_SUFFIX))
        except OSError:
            return []
        for path in paths:
            try:
                facts = path.stat()
            except OSError:  # removed meanwhile by another process
                continue
            entries.append(_Entry(path, facts.st_size, facts.st_mtime))
        return entries

    def evict(self) -> int:
        """Remove the least recently used files until the folder fits ``max_bytes``;
        returns how many bytes went."""
        entries = sorted(self._entries(), key=lambda entry: entry.used_at)
        total = sum(entry.size for entry in entries)
        freed = 0
        for entry in entries:
            if total - freed <= self.max_bytes:
                break
            try:
                entry.path.unlink(missing_ok=True)
            except OSError:
                continue
            freed += entry.size
        return freed

    def usage(self) -> CacheUsage:
        """How many modules the folder holds and their size."""
        entries = self._entries()
        return CacheUsage(
            self.directory, len(entries), sum(entry.size for entry in entries), self.max_bytes
        )

    def clear(self) -> int:
        """Remove every module (of any key) and any partly written file; returns how many."""
        removed = 0
        for pattern in ("*" + _MODULE_SUFFIX, "*" + PARTIAL_SUFFIX):
            try:
                paths = list(self.directory.glob(pattern))
            except OSError:
                continue
            for path in paths:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                removed += 1
        return removed


def _unpack(payload: bytes, code: tuple[Instruction, ...]) -> tuple[RunFacts, bytes] | None:
    """The run facts and serialized module of a sealed payload, or ``None`` when its shape
    is wrong or its facts do not fit ``code`` (one flag a leader, registers ascending)."""
    try:
        fields = msgpack.unpackb(payload)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if not isinstance(fields, list) or len(fields) != 4:
        return None
    enterable, has_tick, registers, serialized = fields
    if not (
        isinstance(enterable, bytes)
        and len(enterable) == len(code)
        and enterable.strip(b"\x00\x01") == b""
        and isinstance(has_tick, bool)
        and isinstance(registers, bytes)
        and list(registers) == sorted(set(registers))
        and isinstance(serialized, bytes)
    ):
        return None
    return RunFacts(code, enterable, has_tick, tuple(registers)), serialized


def _touch(path: Path) -> None:
    """Mark ``path`` as used now (its modification time is its last use)."""
    with contextlib.suppress(OSError):
        os.utime(path)
