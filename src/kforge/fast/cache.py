"""Compiled modules on disk, so that a program compiles once per machine, not once per process.

One file per program id under ``<data_dir>/fast-modules/``, named for the
program id and a key covering everything else that changes the machine code
(compiler version, wasmtime version, engine settings, CPU architecture).  A file
is ``MAGIC | sha256(payload) | payload`` where the payload is
``wasmtime.Module.serialize()``; it is written to a temporary file and renamed
into place, so readers never see half a file.

``Module.deserialize`` trusts its input, so the checksum is verified first: a
truncated or corrupted file is deleted and reported as a miss, never loaded.
(The data directory itself is trusted: whoever can write it can run code.)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import tempfile
from pathlib import Path
from typing import Final

import wasmtime

from kforge.core import DATA_DIR_ENVIRONMENT, Hash256, default_data_dir
from kforge.fast.compiler import COMPILER_VERSION
from kforge.fast.runtime import ENGINE_SETTINGS

__all__ = ["DATA_DIR_ENVIRONMENT", "ModuleCache", "default_data_dir"]

_MAGIC: Final = b"KFWASM01"
_DIGEST_SIZE: Final = 32
_SUBDIRECTORY: Final = "fast-modules"


def _build_key(variant: str) -> str:
    try:
        wasmtime_version = importlib.metadata.version("wasmtime")
    except importlib.metadata.PackageNotFoundError:
        wasmtime_version = "unknown"
    facts = f"{COMPILER_VERSION}|wasmtime {wasmtime_version}|{ENGINE_SETTINGS}|{platform.machine()}|{variant}"
    return hashlib.sha256(facts.encode()).hexdigest()[:16]


class ModuleCache:
    """Serialized modules under ``data_dir``; every failure is a miss, never an error."""

    def __init__(self, data_dir: Path, variant: str = "") -> None:
        """``variant`` names compiler options that change the code (part of the key)."""
        self.directory = Path(data_dir) / _SUBDIRECTORY
        self.key = _build_key(variant)

    def path_for(self, program_id: Hash256) -> Path:
        """The file holding the module of ``program_id``."""
        return self.directory / f"{program_id.hex}-{self.key}.cwasm"

    def load(self, engine: wasmtime.Engine, program_id: Hash256) -> wasmtime.Module | None:
        """The cached module, or ``None`` when absent, corrupt or incompatible (then deleted)."""
        path = self.path_for(program_id)
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        payload = _unwrap(blob)
        if payload is not None:
            try:
                return wasmtime.Module.deserialize(engine, payload)
            except (wasmtime.WasmtimeError, ValueError, TypeError):
                pass
        path.unlink(missing_ok=True)
        return None

    def store(self, program_id: Hash256, module: wasmtime.Module) -> None:
        """Write the module; a read-only or full disk only costs the next process a compile."""
        try:
            payload = bytes(module.serialize())
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        except (OSError, wasmtime.WasmtimeError):
            return
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(temporary, self.path_for(program_id))
        except OSError:
            Path(temporary).unlink(missing_ok=True)


def _unwrap(blob: bytes) -> bytes | None:
    """The payload of a cache file whose magic and checksum are right, else ``None``."""
    header = len(_MAGIC) + _DIGEST_SIZE
    if len(blob) < header or not blob.startswith(_MAGIC):
        return None
    payload = blob[header:]
    if hashlib.sha256(payload).digest() != blob[len(_MAGIC) : header]:
        return None
    return payload
