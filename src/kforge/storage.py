"""Storage: the content-addressed vault and the decoded-program cache.

A vault object's id is the SHA-256 of its bytes.  :meth:`Vault.get` hashes what
it read before returning it, so a row changed behind the vault's back is caught
(``DamagedObject``, a ``VaultFetchFailed``), never handed to a sandbox: the trust
chain is "hash stored at put, re-checked at every fetch".  A damaged row harms only
what needs that object: :meth:`Vault.check` lists every damaged object without
stopping at the first, and putting the right bytes again repairs the row.

By default the vault is a SQLite file under the data directory
(``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``); ``Vault(":memory:")`` keeps everything in memory.
"""

from __future__ import annotations

import os
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, Self

from kforge.core import Hash256, InvalidProgram, VaultFetchFailed, default_data_dir
from kforge.program import ForgeProgram, decode_program

__all__ = [
    "MEMORY",
    "DamagedObject",
    "ProgramCache",
    "SqliteStore",
    "Vault",
    "VaultCheck",
    "connect_sqlite",
    "default_data_dir",
]

#: The path that keeps a SQLite database in memory.
MEMORY: Final = ":memory:"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    id   BLOB PRIMARY KEY,
    data BLOB NOT NULL,
    size INTEGER NOT NULL
)
"""


def connect_sqlite(path: str | Path, *, synchronous: str = "NORMAL") -> sqlite3.Connection:
    """A connection to ``path`` (``":memory:"`` or a file, whose folder is created).

    Files use write-ahead logging with ``synchronous=NORMAL`` by default: durable
    across a process crash, and fast enough for one transaction per request;
    ``synchronous="FULL"`` also survives a power cut.
    """
    if str(path) != MEMORY:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    if str(path) != MEMORY:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={synchronous}")
    return connection


class SqliteStore:
    """One SQLite database: its connection, write transactions, and an idempotent close.

    The base of every kforge store (vault, accounting ledger, registry ledger,
    engine journal).  A context manager; using it after :meth:`close` raises
    :meth:`closed_error`.
    """

    #: Named in the error raised after close, e.g. "the vault is closed".
    what: ClassVar[str] = "database"

    def __init__(self, path: str | Path = MEMORY, *, synchronous: str = "NORMAL") -> None:
        self.path = str(path)
        self._connection: sqlite3.Connection | None = connect_sqlite(path, synchronous=synchronous)

    def closed_error(self) -> Exception:
        return ValueError(f"the {self.what} is closed")

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection (for tools and tests)."""
        if self._connection is None:
            raise self.closed_error()
        return self._connection

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``): all of it lands, or none."""
        connection = self.connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class DamagedObject(VaultFetchFailed):
    """A stored object whose bytes no longer hash to its id (tampered or corrupt).

    Only what needs this object is refused; :meth:`Vault.put` of the right bytes
    repairs it.
    """

    def __init__(self, object_id: Hash256, reason: str) -> None:
        super().__init__(object_id, reason)


@dataclass(frozen=True, slots=True)
class VaultCheck:
    """What :meth:`Vault.check` found: how many rows, which objects are damaged and why,
    and how many rows have an id that is not a hash at all (no fetch can reach them)."""

    objects: int
    damaged: tuple[DamagedObject, ...]
    stray_rows: int = 0

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.stray_rows


def _stored_bytes(object_id: Hash256, data: Any) -> bytes:
    """A row's bytes, checked against its id; ``DamagedObject`` when they do not match.

    A hand-edited row may hold text or a number instead of a BLOB; neither is
    converted (``bytes(n)`` would allocate ``n`` bytes on the row's word).
    """
    if not isinstance(data, bytes):
        raise DamagedObject(
            object_id, f"stored value is {type(data).__name__}, not bytes (tampered)"
        )
    if Hash256.of(data) != object_id:
        raise DamagedObject(object_id, "stored bytes do not match their hash (tampered)")
    return data


class Vault(SqliteStore):
    """Content-addressed objects in SQLite.  A context manager; :meth:`close` is idempotent."""

    what = "vault"

    def __init__(self, path: str | Path = MEMORY) -> None:
        super().__init__(path)
        self.connection.execute(_SCHEMA)

    @classmethod
    def open_default(cls, data_dir: str | os.PathLike[str] | None = None) -> Vault:
        """The vault file ``vault.sqlite3`` under ``data_dir`` (default: :func:`default_data_dir`)."""
        folder = Path(data_dir) if data_dir is not None else default_data_dir()
        return cls(folder / "vault.sqlite3")

    def put(self, data: bytes) -> Hash256:
        """Store ``data`` and return its id, the SHA-256 of the bytes.

        Storing twice is harmless, and storing the right bytes of a damaged object
        repairs its row (a row that already holds them is not written again).
        """
        blob = bytes(data)
        object_id = Hash256.of(blob)
        self.connection.execute(
            "INSERT INTO objects (id, data, size) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET data = excluded.data, size = excluded.size "
            "WHERE objects.data IS NOT excluded.data OR objects.size IS NOT excluded.size",
            (object_id.raw, blob, len(blob)),
        )
        return object_id

    def get(self, object_id: Hash256) -> bytes:
        """The bytes stored under ``object_id``.

        Raises ``VaultFetchFailed`` when there is no such object and its subclass
        ``DamagedObject`` when the stored bytes no longer hash to their id (the row
        was tampered with or corrupted).
        """
        row = self.connection.execute(
            "SELECT data FROM objects WHERE id = ?", (object_id.raw,)
        ).fetchone()
        if row is None:
            raise VaultFetchFailed(object_id, "no such object")
        return _stored_bytes(object_id, row[0])

    def check(self) -> VaultCheck:
        """Read every object and report each damaged one; one damaged row stops nothing.

        Rows are read one at a time, so memory stays at the largest object.
        """
        damaged: list[DamagedObject] = []
        count = stray = 0
        for raw_id, data in self.connection.execute("SELECT id, data FROM objects ORDER BY id"):
            count += 1
            if not isinstance(raw_id, bytes) or len(raw_id) != Hash256.SIZE:
                stray += 1
                continue
            try:
                _stored_bytes(Hash256(raw_id), data)
            except DamagedObject as problem:
                damaged.append(problem)
        return VaultCheck(count, tuple(damaged), stray)

    def __contains__(self, object_id: object) -> bool:
        if not isinstance(object_id, Hash256):
            return False
        row = self.connection.execute(
            "SELECT 1 FROM objects WHERE id = ?", (object_id.raw,)
        ).fetchone()
        return row is not None

    def __len__(self) -> int:
        row = self.connection.execute("SELECT COUNT(*) FROM objects").fetchone()
        return int(row[0])

    def put_program(self, program: ForgeProgram) -> Hash256:
        """Store a program's canonical FRGP bytes; its id is the program id."""
        return self.put(program.encoded)


#: What one decoded instruction holds in memory, about (measured: 94 bytes).
DECODED_INSTRUCTION_BYTES: Final = 96


def decoded_size(program: ForgeProgram) -> int:
    """What a decoded program holds in memory, about: its instructions and its data."""
    return len(program.code) * DECODED_INSTRUCTION_BYTES + len(program.data)


class ProgramCache:
    """Programs fetched from a vault by id, decoded once, kept in an LRU of ``capacity``
    programs and ``max_bytes`` of decoded programs (:func:`decoded_size`).

    Because ids are content hashes, a cached program can never go stale.
    """

    def __init__(self, vault: Vault, capacity: int = 256, max_bytes: int = 64 << 20) -> None:
        if capacity < 1 or max_bytes < 1:
            raise ValueError("capacity and max_bytes must be at least 1")
        self.vault = vault
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._programs: OrderedDict[Hash256, ForgeProgram] = OrderedDict()

    def load(self, program_id: Hash256) -> ForgeProgram:
        """The program stored under ``program_id``.

        Raises ``VaultFetchFailed`` (missing or tampered object) or
        ``InvalidProgram`` (the object is not a valid FRGP container).
        """
        program = self._programs.get(program_id)
        if program is not None:
            self._programs.move_to_end(program_id)
            self.hits += 1
            return program
        self.misses += 1
        blob = self.vault.get(program_id)
        try:
            program = decode_program(blob)
        except InvalidProgram as error:
            raise InvalidProgram(f"vault object {program_id}: {error.reason}") from None
        self._add(program_id, program)
        return program

    def keep(self, program: ForgeProgram) -> None:
        """Keep a program decoded elsewhere (it is stored in the vault under its id)."""
        if program.program_id in self._programs:
            self._programs.move_to_end(program.program_id)
        else:
            self._add(program.program_id, program)

    def _add(self, program_id: Hash256, program: ForgeProgram) -> None:
        """Keep ``program``, then drop the least recently used beyond the bounds (a program
        larger than ``max_bytes`` alone is not kept)."""
        self._programs[program_id] = program
        self.size += decoded_size(program)
        while self._programs and (
            len(self._programs) > self.capacity or self.size > self.max_bytes
        ):
            _, dropped = self._programs.popitem(last=False)
            self.size -= decoded_size(dropped)

    def __contains__(self, program_id: object) -> bool:
        return program_id in self._programs

    def __len__(self) -> int:
        return len(self._programs)
