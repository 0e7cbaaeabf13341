"""Stopped sandboxes' runs, kept on disk rather than in memory.

While a sandbox runs, what the host holds for it (its delivery log, its I/O log,
the messages queued for it) is in memory and counted against its host-memory
budget (:mod:`kforge.engine.policy`).  When it stops, its run (its output, its
delivery log and its I/O log) is all that is left, and all that replay, proofs
and readers need.  A run larger than :data:`KEEP_IN_MEMORY` bytes is written to
a :class:`RunArchive` and let go of; reading it back (the output in slices, the
logs whole) reads the archive.  Small runs stay with their sandbox.

:class:`SqliteArchive` keeps runs in a SQLite file: the durable engine's
``runs.sqlite3`` beside its journal (written with ``synchronous=FULL`` before the
journal records the stop, so a stop the journal holds always has its run), or a
temporary file for an engine without a journal (deleted when the engine
closes).  :class:`MemoryArchive` keeps them in memory (a state built by hand, tests).

An archived run is found by its sandbox id and checked by its digest (SHA-256
of what was written), which is part of the engine's state: a run that is
missing or altered is :class:`~kforge.core.StateCorrupted` when read, naming the
sandbox, and harms only that sandbox's readers.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Final, Protocol

from kforge.core import Hash256, StateCorrupted
from kforge.engine.models import HostCall
from kforge.machine import Delivery
from kforge.wire import Schema, decode_msgpack, encode_msgpack

__all__ = [
    "KEEP_IN_MEMORY",
    "RUNS_DB",
    "ArchivedLogs",
    "MemoryArchive",
    "RunArchive",
    "SqliteArchive",
    "run_digest",
]

#: Runs (output and logs) up to this many bytes stay in memory with their sandbox.
KEEP_IN_MEMORY: Final = 4096
#: The durable engine's archive, beside its journal in the data directory.
RUNS_DB: Final = "runs.sqlite3"


class ArchivedLogs(Schema, frozen=True):
    """A stopped sandbox's delivery log and I/O log, as archived."""

    deliveries: tuple[Delivery, ...]
    io_log: tuple[HostCall, ...]


def run_digest(output: bytes, logs: bytes) -> Hash256:
    """What identifies an archived run: SHA-256 over its output and its encoded logs."""
    digest = hashlib.sha256(len(output).to_bytes(8, "big"))
    digest.update(output)
    digest.update(logs)
    return Hash256(digest.digest())


def encode_logs(logs: ArchivedLogs) -> bytes:
    return encode_msgpack(logs)


def decode_logs(sandbox_id: Hash256, raw: bytes) -> ArchivedLogs:
    try:
        return decode_msgpack(raw, ArchivedLogs, "archived run")
    except Exception as error:
        raise StateCorrupted(
            "run archive", f"the logs of sandbox {sandbox_id} do not decode ({error})"
        ) from None


class RunArchive(Protocol):
    """Where stopped sandboxes' runs live, by sandbox id."""

    def put(self, sandbox_id: Hash256, output: bytes, logs: bytes) -> None:
        """Keep the run (replacing one kept under the same id), durably for a durable engine."""
        ...

    def output(self, sandbox_id: Hash256, offset: int, limit: int | None) -> bytes | None:
        """At most ``limit`` bytes of the output from ``offset`` on (``None``: no such run)."""
        ...

    def logs(self, sandbox_id: Hash256) -> bytes | None:
        """The encoded logs (``None``: no such run)."""
        ...

    def discard(self, sandbox_id: Hash256) -> None:
        """The sandbox was forgotten: its run may go (at once, or at the next :meth:`collect`)."""
        ...

    def collect(self, keep: Collection[Hash256]) -> None:
        """Drop every run but those of ``keep`` (after a snapshot, and when the engine opens)."""
        ...

    def close(self) -> None: ...


class MemoryArchive:
    """Runs in memory (for states built by hand and tests: it frees nothing)."""

    def __init__(self) -> None:
        self._runs: dict[Hash256, tuple[bytes, bytes]] = {}

    def put(self, sandbox_id: Hash256, output: bytes, logs: bytes) -> None:
        self._runs[sandbox_id] = (bytes(output), bytes(logs))

    def output(self, sandbox_id: Hash256, offset: int, limit: int | None) -> bytes | None:
        run = self._runs.get(sandbox_id)
        if run is None:
            return None
        end = None if limit is None else offset + limit
        return run[0][offset:end]

    def logs(self, sandbox_id: Hash256) -> bytes | None:
        run = self._runs.get(sandbox_id)
        return run[1] if run is not None else None

    def discard(self, sandbox_id: Hash256) -> None:
        self._runs.pop(sandbox_id, None)

    def collect(self, keep: Collection[Hash256]) -> None:
        for sandbox_id in [key for key in self._runs if key not in keep]:
            del self._runs[sandbox_id]

    def close(self) -> None:
        self._runs.clear()


_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS runs (sandbox BLOB PRIMARY KEY, output BLOB NOT NULL, "
    "logs BLOB NOT NULL)"
)


class SqliteArchive:
    """Runs in a SQLite file.

    ``path`` ``None``: a temporary file, deleted on :meth:`close` (an engine
    without a journal spills here).  ``durable``: every put is synced before it
    returns (``synchronous=FULL``) and forgotten runs are only dropped by
    :meth:`collect` (after a snapshot no longer names them), so a rebuild never
    misses a run it needs.  Output is read in slices straight from the file
    (incremental BLOB I/O), never whole.
    """

    def __init__(self, path: str | Path | None = None, *, durable: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.durable = durable
        self._temporary: str | None = None
        self._connection: sqlite3.Connection | None = None
        if self.path is not None:
            self._open(self.path)

    def _open(self, path: Path) -> sqlite3.Connection:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'OFF'}")
        connection.execute(_SCHEMA)
        self._connection = connection
        return connection

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection; a temporary archive makes its file on first use (most engines
        never archive a run)."""
        if self._connection is not None:
            return self._connection
        self._temporary = tempfile.mkdtemp(prefix="kforge-runs-")
        self.path = Path(self._temporary) / RUNS_DB
        return self._open(self.path)

    def put(self, sandbox_id: Hash256, output: bytes, logs: bytes) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO runs (sandbox, output, logs) VALUES (?, ?, ?)",
            (sandbox_id.raw, bytes(output), logs),
        )

    def _rowid(self, sandbox_id: Hash256) -> int | None:
        found = self._db.execute(
            "SELECT rowid FROM runs WHERE sandbox = ?", (sandbox_id.raw,)
        ).fetchone()
        return int(found[0]) if found is not None else None

    def output(self, sandbox_id: Hash256, offset: int, limit: int | None) -> bytes | None:
        if self._connection is None:
            return None
        rowid = self._rowid(sandbox_id)
        if rowid is None:
            return None
        with self._db.blobopen("runs", "output", rowid, readonly=True) as blob:
            length = len(blob)
            start = min(offset, length)
            blob.seek(start)
            return blob.read(-1 if limit is None else min(limit, length - start))

    def logs(self, sandbox_id: Hash256) -> bytes | None:
        if self._connection is None:
            return None
        found = self._db.execute(
            "SELECT logs FROM runs WHERE sandbox = ?", (sandbox_id.raw,)
        ).fetchone()
        return bytes(found[0]) if found is not None else None

    def discard(self, sandbox_id: Hash256) -> None:
        if not self.durable and self._connection is not None:
            self._db.execute("DELETE FROM runs WHERE sandbox = ?", (sandbox_id.raw,))

    def collect(self, keep: Collection[Hash256]) -> None:
        if self._connection is None:
            return
        kept = {sandbox_id.raw for sandbox_id in keep}
        stale = [
            (raw,)
            for (raw,) in self._db.execute("SELECT sandbox FROM runs")
            if bytes(raw) not in kept
        ]
        self._db.executemany("DELETE FROM runs WHERE sandbox = ?", stale)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None
