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
closes).  A temporary archive writes on a thread of its own: writing a large run
(16 MiB is some 40 ms) would otherwise hold the event loop, and until it is
written the run is read from memory (at most :data:`MAX_PENDING_BYTES` wait
so; past that, a put waits for the writer).  :class:`MemoryArchive` keeps them in
memory (a state built by hand, tests).

An archived run is found by its sandbox id and checked by its digest (SHA-256
of what was written), which is part of the engine's state: a run that is
missing or altered is :class:`~kforge.core.StateCorrupted` when read, naming the
sandbox, and harms only that sandbox's readers.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Final, Protocol

from msgspec.structs import replace

from kforge.core import Hash256, StateCorrupted
from kforge.engine.models import HostCall
from kforge.machine import Delivery
from kforge.wire import Schema, decode_msgpack, encode_msgpack

__all__ = [
    "KEEP_IN_MEMORY",
    "MAX_PENDING_BYTES",
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
#: The most bytes of runs a temporary archive holds in memory while its thread writes them.
MAX_PENDING_BYTES: Final = 64 * 1024 * 1024


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


class _StoredLogs(Schema, frozen=True):
    """:class:`ArchivedLogs` as written: a delivered host call's reply is also one of the
    deliveries, so it is written once, there (``replies[i]`` is the index of the
    delivery holding call ``i``'s reply, or -1 for a reply written with its call)."""

    deliveries: tuple[Delivery, ...]
    io_log: tuple[HostCall, ...]
    replies: tuple[int, ...]


def encode_logs(logs: ArchivedLogs) -> bytes:
    """``logs`` for the archive, each reply's bytes once."""
    # Performance note: a run that made n host calls is archived when it stops, in time
    # linear in n and small beside answering them (plain loops, no generator per call).
    deliveries = logs.deliveries
    unclaimed: dict[tuple[int, int], list[int]] = {}
    for index, delivery in enumerate(deliveries):
        key = (delivery.ticks_used, delivery.channel)
        found = unclaimed.get(key)
        if found is None:
            unclaimed[key] = [index]
        else:
            found.append(index)
    calls, replies = [], []
    for call in logs.io_log:
        at = -1
        found = unclaimed.get((call.ticks_used, call.channel)) if call.delivered else None
        if found:
            for position, index in enumerate(found):  # the first unclaimed one with the reply
                if deliveries[index].data == call.reply:
                    at = index
                    del found[position]
                    call = replace(call, reply=b"")
                    break
        calls.append(call)
        replies.append(at)
    return encode_msgpack(_StoredLogs(deliveries, tuple(calls), tuple(replies)))


def decode_logs(sandbox_id: Hash256, raw: bytes) -> ArchivedLogs:
    try:
        stored = decode_msgpack(raw, _StoredLogs, "archived run")
        deliveries = stored.deliveries
        if len(stored.replies) != len(stored.io_log):
            raise ValueError("a reply index for each call")
        io_log = tuple(
            replace(call, reply=deliveries[at].data) if at >= 0 else call
            for call, at in zip(stored.io_log, stored.replies, strict=True)
        )
    except Exception as error:
        raise StateCorrupted(
            "run archive", f"the logs of sandbox {sandbox_id} do not decode ({error})"
        ) from None
    return ArchivedLogs(deliveries, io_log)


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
    without a journal spills here), written by a thread of its own (see the
    module's description).  ``durable``: every put is synced before it returns
    (``synchronous=FULL``) and forgotten runs are only dropped by :meth:`collect`
    (after a snapshot no longer names them), so a rebuild never misses a run it
    needs.  Output is read in slices straight from the file (incremental BLOB
    I/O), never whole.
    """

    def __init__(self, path: str | Path | None = None, *, durable: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.durable = durable
        self._temporary: str | None = None
        self._connection: sqlite3.Connection | None = None
        self._writer: _Writer | None = None
        if self.path is not None:
            self._connection = self._open(self.path)

    def _open(self, path: Path) -> sqlite3.Connection:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'OFF'}")
        connection.execute(_SCHEMA)
        return connection

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection; a temporary archive makes its file on first use (most engines
        never archive a run), and its writer with it."""
        if self._connection is not None:
            return self._connection
        self._temporary = tempfile.mkdtemp(prefix="kforge-runs-")
        self.path = Path(self._temporary) / RUNS_DB
        self._connection = self._open(self.path)
        self._writer = _Writer(self._open(self.path))
        return self._connection

    def put(self, sandbox_id: Hash256, output: bytes, logs: bytes) -> None:
        database = self._db
        if self._writer is not None:
            self._writer.put(sandbox_id, bytes(output), logs)
            return
        database.execute(_INSERT, (sandbox_id.raw, bytes(output), logs))

    def _pending(self, sandbox_id: Hash256) -> tuple[bytes, bytes] | None:
        return self._writer.pending(sandbox_id) if self._writer is not None else None

    def _rowid(self, sandbox_id: Hash256) -> int | None:
        found = self._db.execute(
            "SELECT rowid FROM runs WHERE sandbox = ?", (sandbox_id.raw,)
        ).fetchone()
        return int(found[0]) if found is not None else None

    def output(self, sandbox_id: Hash256, offset: int, limit: int | None) -> bytes | None:
        if self._connection is None:
            return None
        pending = self._pending(sandbox_id)
        if pending is not None:
            return pending[0][offset : None if limit is None else offset + limit]
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
        pending = self._pending(sandbox_id)
        if pending is not None:
            return pending[1]
        found = self._db.execute(
            "SELECT logs FROM runs WHERE sandbox = ?", (sandbox_id.raw,)
        ).fetchone()
        return bytes(found[0]) if found is not None else None

    def discard(self, sandbox_id: Hash256) -> None:
        if self._writer is not None:
            self._writer.discard(sandbox_id)
        elif not self.durable and self._connection is not None:
            self._db.execute(_DELETE, (sandbox_id.raw,))

    def collect(self, keep: Collection[Hash256]) -> None:
        if self._connection is None:
            return
        self.flush()
        kept = {sandbox_id.raw for sandbox_id in keep}
        stale = [
            (raw,)
            for (raw,) in self._db.execute("SELECT sandbox FROM runs")
            if bytes(raw) not in kept
        ]
        self._db.executemany(_DELETE, stale)

    def flush(self) -> None:
        """Wait until every run put so far is on disk (a temporary archive writes on its
        own thread; any other has written it already)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None


_INSERT: Final = "INSERT OR REPLACE INTO runs (sandbox, output, logs) VALUES (?, ?, ?)"
_DELETE: Final = "DELETE FROM runs WHERE sandbox = ?"


class _Writer:
    """A temporary archive's writing thread and the runs waiting for it.

    A run is readable from :meth:`pending` from its put until its row is
    committed; a discarded run is dropped from memory at once and its row deleted
    in order after its write.  At most :data:`MAX_PENDING_BYTES` wait: a put
    beyond that waits for the thread.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._runs: dict[Hash256, tuple[bytes, bytes]] = {}
        self._bytes = 0
        self._room = threading.Condition()
        self._work: queue.SimpleQueue[tuple[str, Hash256] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, name="kforge-runs", daemon=True)
        self._thread.start()

    def put(self, sandbox_id: Hash256, output: bytes, logs: bytes) -> None:
        size = len(output) + len(logs)
        with self._room:
            self._room.wait_for(lambda: self._bytes + size <= MAX_PENDING_BYTES or not self._bytes)
            self._forget(sandbox_id)
            self._runs[sandbox_id] = (output, logs)
            self._bytes += size
        self._work.put(("put", sandbox_id))

    def pending(self, sandbox_id: Hash256) -> tuple[bytes, bytes] | None:
        with self._room:
            return self._runs.get(sandbox_id)

    def discard(self, sandbox_id: Hash256) -> None:
        with self._room:
            self._forget(sandbox_id)
        self._work.put(("delete", sandbox_id))

    def flush(self) -> None:
        """Wait until every run put so far is written (or has failed to be)."""
        with self._room:
            self._room.wait_for(lambda: not self._runs)

    def close(self) -> None:
        self._work.put(None)
        self._thread.join()
        self._connection.close()

    def _forget(self, sandbox_id: Hash256) -> None:
        run = self._runs.pop(sandbox_id, None)
        if run is not None:
            self._bytes -= len(run[0]) + len(run[1])
            self._room.notify_all()

    def _write(self) -> None:
        while (item := self._work.get()) is not None:
            operation, sandbox_id = item
            if operation == "put":
                self._write_run(sandbox_id)
            else:
                self._execute(_DELETE, (sandbox_id.raw,))

    def _write_run(self, sandbox_id: Hash256) -> None:
        """Write the run waiting under ``sandbox_id`` (unless discarded meanwhile), then let
        go of it (a function of its own: nothing of the run outlives it)."""
        with self._room:
            run = self._runs.get(sandbox_id)
        if run is None:
            return
        self._execute(_INSERT, (sandbox_id.raw, *run))
        with self._room:
            if self._runs.get(sandbox_id) is run:
                self._forget(sandbox_id)

    def _execute(self, statement: str, values: tuple[bytes, ...]) -> None:
        # a failed write leaves the run missing: its readers get StateCorrupted, nobody else
        with contextlib.suppress(sqlite3.Error):
            self._connection.execute(statement, values)
