"""The registry ledger: append-only SQLite tables under one hash chain.

Every row of every table is also a link of the chain: ``chain(seq, kind,
prev_hash, row_hash)`` with ``row_hash = H("KFORGE-LEDGER-ROW-V1\\0" ||
prev_hash || msgpack([kind, seq, columns...]))``; the first row's ``prev_hash``
is 32 zero bytes.  Artifact rows hash their ``hash`` column, and the artifact's
bytes must hash to it, so changing a row, an artifact, or the order of rows is
found by :meth:`Ledger.verify` and by every read.  Triggers refuse UPDATE and
DELETE: nothing is rewritten in place, and status is derived from the log.

The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` holds
every step, applied in order inside one transaction.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgpack

from kforge.core import Hash256
from kforge.registry.errors import LedgerTampered, RegistryError
from kforge.storage import SqliteStore

__all__ = ["COLUMNS", "MIGRATIONS", "SCHEMA_VERSION", "Ledger", "LedgerCheck", "as_blob"]

_ROW_TAG: Final = b"KFORGE-LEDGER-ROW-V1\x00"
_GENESIS: Final = bytes(32)

#: The hashed columns of each table, in hashing order (``seq`` comes first, always).
COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "programs": (
        "name",
        "version",
        "program_id",
        "source_hash",
        "vectors_hash",
        "manifest",
        "proposer",
        "created_ms",
    ),
    "artifacts": ("hash", "kind", "size"),
    "gate_results": (
        "program_seq",
        "attempt",
        "gate",
        "passed",
        "failure_kind",
        "report_hash",
        "at_ms",
    ),
    "promotions": (
        "program_seq",
        "from_status",
        "to_status",
        "agent",
        "reason",
        "at_ms",
        "request",
        "signature",
    ),
}

_APPEND_ONLY = "".join(
    f"""
CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
BEGIN SELECT RAISE(ABORT, 'the registry ledger is append-only'); END;
CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
BEGIN SELECT RAISE(ABORT, 'the registry ledger is append-only'); END;
"""
    for table in ("chain", *COLUMNS)
)

#: Schema migrations; entry i takes the schema from version i to version i + 1.
MIGRATIONS: Final[tuple[str, ...]] = (
    """
CREATE TABLE chain (
    seq       INTEGER PRIMARY KEY,
    kind      TEXT NOT NULL,
    prev_hash BLOB NOT NULL,
    row_hash  BLOB NOT NULL
);
CREATE TABLE programs (
    seq          INTEGER PRIMARY KEY REFERENCES chain(seq),
    name         TEXT NOT NULL,
    version      TEXT NOT NULL,
    program_id   BLOB,
    source_hash  BLOB NOT NULL,
    vectors_hash BLOB NOT NULL,
    manifest     TEXT NOT NULL,
    proposer     BLOB NOT NULL,
    created_ms   INTEGER NOT NULL,
    UNIQUE (name, version)
);
CREATE INDEX programs_by_id ON programs (program_id);
CREATE TABLE artifacts (
    seq  INTEGER PRIMARY KEY REFERENCES chain(seq),
    hash BLOB NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE gate_results (
    seq          INTEGER PRIMARY KEY REFERENCES chain(seq),
    program_seq  INTEGER NOT NULL REFERENCES programs(seq),
    attempt      INTEGER NOT NULL,
    gate         TEXT NOT NULL,
    passed       INTEGER NOT NULL,
    failure_kind TEXT,
    report_hash  BLOB NOT NULL,
    at_ms        INTEGER NOT NULL,
    UNIQUE (program_seq, attempt, gate)
);
CREATE TABLE promotions (
    seq         INTEGER PRIMARY KEY REFERENCES chain(seq),
    program_seq INTEGER NOT NULL REFERENCES programs(seq),
    from_status TEXT,
    to_status   TEXT NOT NULL,
    agent       BLOB NOT NULL,
    reason      TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    request     BLOB NOT NULL,
    signature   BLOB NOT NULL
);
CREATE INDEX promotions_by_program ON promotions (program_seq, seq);
"""
    + _APPEND_ONLY,
)
SCHEMA_VERSION: Final = len(MIGRATIONS)


def row_hash(kind: str, seq: int, prev_hash: bytes, values: Sequence[Any]) -> bytes:
    """The chain hash of one row."""
    packed: bytes = msgpack.packb([kind, seq, *values], use_bin_type=True)
    return hashlib.sha256(_ROW_TAG + prev_hash + packed).digest()


@dataclass(frozen=True, slots=True)
class LedgerCheck:
    """What :meth:`Ledger.verify` found: ``ok`` when the whole chain checks out."""

    ok: bool
    rows: int
    head: str
    problems: tuple[str, ...]


class Ledger(SqliteStore):
    """The SQLite file of the registry.  A context manager; :meth:`close` is idempotent."""

    what = "registry ledger"

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.connection.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def closed_error(self) -> Exception:
        return RegistryError(f"the {self.what} is closed")

    def _migrate(self) -> None:
        with self.transaction() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise RegistryError(
                    f"{self.path}: ledger schema version {version} is newer than this "
                    f"kforge understands ({SCHEMA_VERSION})"
                )
            for step in range(version, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[step]):
                    db.execute(statement)
            # PRAGMA cannot take a parameter; the value is our own integer.
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @property
    def schema_version(self) -> int:
        return int(self.connection.execute("PRAGMA user_version").fetchone()[0])

    # ------------------------------------------------------------------ writing

    def append(self, db: sqlite3.Connection, kind: str, values: dict[str, Any]) -> int:
        """Append one row of ``kind`` inside a transaction; returns its ``seq``."""
        columns = COLUMNS[kind]
        ordered = [values[name] for name in columns]
        head = db.execute("SELECT seq, row_hash FROM chain ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (1, _GENESIS) if head is None else (int(head[0]) + 1, as_blob(head[1]))
        digest = row_hash(kind, seq, prev, ordered)
        db.execute(
            "INSERT INTO chain (seq, kind, prev_hash, row_hash) VALUES (?, ?, ?, ?)",
            (seq, kind, prev, digest),
        )
        extra = [name for name in values if name not in columns]
        names = ["seq", *columns, *extra]
        marks = ", ".join("?" for _ in names)
        db.execute(
            f"INSERT INTO {kind} ({', '.join(names)}) VALUES ({marks})",
            [seq, *ordered, *(values[name] for name in extra)],
        )
        return seq

    def put_artifact(self, db: sqlite3.Connection, kind: str, data: bytes) -> Hash256:
        """Store ``data`` under its SHA-256 (once); returns the hash."""
        digest = Hash256.of(data)
        known = db.execute("SELECT 1 FROM artifacts WHERE hash = ?", (digest.raw,)).fetchone()
        if known is None:
            self.append(
                db,
                "artifacts",
                {"hash": digest.raw, "kind": kind, "size": len(data), "data": bytes(data)},
            )
        return digest

    # ------------------------------------------------------------------ reading

    def get_artifact(self, digest: Hash256) -> tuple[str, bytes]:
        """An artifact's kind and bytes, after checking its row and its hash."""
        row = self.connection.execute(
            "SELECT seq, kind, data FROM artifacts WHERE hash = ?", (digest.raw,)
        ).fetchone()
        if row is None:
            raise RegistryError(f"no artifact {digest} in the ledger")
        self.check_rows("artifacts", [int(row[0])])
        data = as_blob(row[2])
        if Hash256.of(data) != digest:
            raise LedgerTampered([f"artifact {digest}: stored bytes do not match their hash"])
        return str(row[1]), data

    def rows(self, kind: str, where: str, parameters: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows of ``kind`` matching ``where``, each checked against the chain, by ``seq``."""
        cursor = self.connection.execute(
            f"SELECT seq, {', '.join(COLUMNS[kind])} FROM {kind} WHERE {where} ORDER BY seq",
            tuple(parameters),
        )
        names = ["seq", *COLUMNS[kind]]
        found = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        problems = self._row_problems(kind, found)
        if problems:
            raise LedgerTampered(problems)
        return found

    def check_rows(self, kind: str, seqs: Sequence[int]) -> None:
        """Raise ``LedgerTampered`` unless the rows ``seqs`` of ``kind`` match the chain."""
        marks = ", ".join("?" for _ in seqs)
        self.rows(kind, f"seq IN ({marks})", seqs)

    def _row_problems(self, kind: str, found: list[dict[str, Any]]) -> list[str]:
        problems: list[str] = []
        for row in found:
            seq = int(row["seq"])
            link = self.connection.execute(
                "SELECT kind, prev_hash, row_hash FROM chain WHERE seq = ?", (seq,)
            ).fetchone()
            if link is None or link[0] != kind:
                problems.append(f"{kind} row {seq} has no chain entry")
                continue
            previous = self.connection.execute(
                "SELECT row_hash FROM chain WHERE seq = ?", (seq - 1,)
            ).fetchone()
            expected_prev = _GENESIS if seq == 1 else (None if previous is None else previous[0])
            if expected_prev is None or as_blob(link[1]) != as_blob(expected_prev):
                problems.append(f"chain row {seq} does not follow row {seq - 1}")
            values = [_plain(row[name]) for name in COLUMNS[kind]]
            if row_hash(kind, seq, as_blob(link[1]), values) != as_blob(link[2]):
                problems.append(f"{kind} row {seq} does not match its hash (tampered)")
        return problems

    def head(self) -> tuple[int, str]:
        """The last row's ``seq`` and hash: anchor it elsewhere to detect truncation."""
        row = self.connection.execute(
            "SELECT seq, row_hash FROM chain ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return (0, _GENESIS.hex()) if row is None else (int(row[0]), as_blob(row[1]).hex())

    def verify(self) -> LedgerCheck:
        """Walk the whole chain: every link, every row's hash, every artifact's bytes."""
        problems: list[str] = []
        db = self.connection
        chain = db.execute(
            "SELECT seq, kind, prev_hash, row_hash FROM chain ORDER BY seq"
        ).fetchall()
        previous = _GENESIS
        for position, (seq, kind, prev_hash, digest) in enumerate(chain, start=1):
            if seq != position:
                problems.append(f"chain row {position} is missing (found {seq})")
            if as_blob(prev_hash) != previous:
                problems.append(f"chain row {seq} does not follow row {seq - 1}")
            previous = as_blob(digest)
            if kind not in COLUMNS:
                problems.append(f"chain row {seq} names an unknown table {kind!r}")
                continue
            row = db.execute(
                f"SELECT {', '.join(COLUMNS[kind])} FROM {kind} WHERE seq = ?", (seq,)
            ).fetchone()
            if row is None:
                problems.append(f"{kind} row {seq} is missing")
                continue
            values = [_plain(value) for value in row]
            if row_hash(kind, seq, as_blob(prev_hash), values) != as_blob(digest):
                problems.append(f"{kind} row {seq} does not match its hash (tampered)")
        for kind in COLUMNS:
            orphans = db.execute(
                f"SELECT COUNT(*) FROM {kind} WHERE seq NOT IN "
                "(SELECT seq FROM chain WHERE kind = ?)",
                (kind,),
            ).fetchone()[0]
            if orphans:
                problems.append(f"{orphans} {kind} row(s) outside the chain")
        for seq, digest, data in db.execute("SELECT seq, hash, data FROM artifacts ORDER BY seq"):
            if hashlib.sha256(as_blob(data)).digest() != as_blob(digest):
                problems.append(
                    f"artifact {as_blob(digest).hex()} (row {seq}): bytes do not match their hash"
                )
        head = previous.hex() if chain else _GENESIS.hex()
        return LedgerCheck(not problems, len(chain), head, tuple(problems))


def as_blob(value: Any) -> bytes:
    """A BLOB column as bytes; a tampered row may hold text or a number instead.

    Never ``bytes(value)`` on what a row holds: for a number that allocates as many bytes.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")


def _plain(value: Any) -> Any:
    """SQLite gives BLOBs back as bytes already; memoryview is normalised just in case."""
    return bytes(value) if isinstance(value, memoryview) else value


def _statements(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
