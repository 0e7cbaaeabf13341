"""The durable engine's journal: its records under a keyed hash chain, and snapshots.

A :class:`Journal` turns records into rows and back; where the rows live is a
:class:`JournalStore`: :class:`SqliteJournalStore` (``engine.sqlite3`` under the
data directory, WAL, ``synchronous=FULL``) or :class:`MemoryJournalStore`.  The
records and the rebuild know nothing of SQLite: another store (a stream of
messages, a key-value bucket) only has to keep rows in order.

A row is ``(seq, time_ms, body, link)``: ``body`` the record's msgpack form
(:mod:`kforge.engine.records`), ``time_ms`` the engine's clock when it was
recorded (the timestamp of the events derived from it), and ``link`` the
chain: ``HMAC-SHA256(key, previous link || seq || time_ms || body)``, the first
row's previous link being 32 zero bytes.  The key is derived from the engine's
secret, so a row rewritten, removed, reordered or inserted anywhere breaks the
chain from there on, and :meth:`Journal.verify` (run whenever the engine opens)
reports it as :class:`~kforge.core.StateCorrupted` naming the row: never a
bare decoding error.  A snapshot is stored with the link of the last row it
includes and a MAC over both.  (Whoever holds the engine's secret can write a
new valid chain: the chain proves the rows are the engine's own, not that the
database file was never replaced.)

The records of one request (or one scheduler slice) are written in one
transaction before the request is acknowledged, so after a crash either all of
them are there or none.  :class:`~kforge.engine.records.SliceRan` records carry
no news (execution is deterministic) and are written lazily: the last one of a
running sandbox replaces the one before when nothing else about it came in
between, and they go out with the next commit.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from kforge.core import Hash256, InvalidRequest, StateCorrupted
from kforge.engine.projection import events_of
from kforge.engine.records import AnyRecord, Record, SliceRan
from kforge.engine.state import StateSnapshot
from kforge.events import Event
from kforge.storage import SqliteStore
from kforge.wire import decode_msgpack, encode_msgpack

__all__ = [
    "ENGINE_DB",
    "Journal",
    "JournalStore",
    "MemoryJournalStore",
    "Row",
    "SqliteJournalStore",
    "chain_key",
]

ENGINE_DB: Final = "engine.sqlite3"
_GENESIS: Final = bytes(32)
_KEY_DOMAIN: Final = b"kforge/journal-chain/v1\0"
_LINK: Final = struct.Struct(">QQ")


def chain_key(secret: bytes) -> bytes:
    """The chain's HMAC key, derived from the engine's secret."""
    return hashlib.sha256(_KEY_DOMAIN + secret).digest()


@dataclass(frozen=True, slots=True)
class Row:
    """One stored record: its place, its time, its bytes and its chain link."""

    seq: int
    time_ms: int
    body: bytes
    link: bytes


class JournalStore(Protocol):
    """Where a journal's rows, snapshots and a few named values live."""

    def meta(self, key: str) -> bytes | None: ...

    def set_meta(self, key: str, value: bytes) -> None: ...

    def append_rows(self, rows: Sequence[Row]) -> None:
        """Store ``rows`` (consecutive, after the last) all at once, durably, or none."""
        ...

    def rows(self, after: int = 0) -> Iterator[Row]:
        """The rows with ``seq > after``, in order."""
        ...

    def last_row(self) -> Row | None: ...

    def row(self, seq: int) -> Row | None: ...

    def save_snapshot(self, seq: int, body: bytes, mac: bytes) -> None:
        """Keep this snapshot (of the state after row ``seq``) as the latest."""
        ...

    def latest_snapshot(self) -> tuple[int, bytes, bytes] | None:
        """``(seq, body, mac)`` of the latest snapshot, if any."""
        ...

    def close(self) -> None: ...


# ----------------------------------------------------------------- stores


class MemoryJournalStore:
    """A journal store in memory (tests, and engines that want a journal without a disk)."""

    def __init__(self) -> None:
        self._meta: dict[str, bytes] = {}
        self._rows: list[Row] = []
        self._snapshot: tuple[int, bytes, bytes] | None = None

    def meta(self, key: str) -> bytes | None:
        return self._meta.get(key)

    def set_meta(self, key: str, value: bytes) -> None:
        self._meta[key] = value

    def append_rows(self, rows: Sequence[Row]) -> None:
        self._rows.extend(rows)

    def rows(self, after: int = 0) -> Iterator[Row]:
        return iter([row for row in self._rows if row.seq > after])

    def last_row(self) -> Row | None:
        return self._rows[-1] if self._rows else None

    def row(self, seq: int) -> Row | None:
        return next((row for row in self._rows if row.seq == seq), None)

    def replace_row(self, row: Row) -> None:
        """Put ``row`` in place of the stored row with its ``seq`` (for tests of tampering)."""
        self._rows = [row if stored.seq == row.seq else stored for stored in self._rows]

    def save_snapshot(self, seq: int, body: bytes, mac: bytes) -> None:
        self._snapshot = (seq, body, mac)

    def latest_snapshot(self) -> tuple[int, bytes, bytes] | None:
        return self._snapshot

    def close(self) -> None:
        """Nothing to release."""


_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, "
    "body BLOB NOT NULL, link BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS journal_snapshots (seq INTEGER PRIMARY KEY, body BLOB NOT NULL, "
    "mac BLOB NOT NULL)",
)


@contextmanager
def _reading(where: str) -> Iterator[None]:
    """Rows that SQLite cannot hand back as written (a BLOB turned to text, a damaged page)
    are the journal's damage, reported as such."""
    try:
        yield
    except (sqlite3.DatabaseError, TypeError, ValueError) as error:
        raise StateCorrupted(
            where, f"it cannot be read ({type(error).__name__}: {error})"
        ) from None


class SqliteJournalStore(SqliteStore):
    """The journal store of one data directory: ``engine.sqlite3`` (fsync'd: ``synchronous=FULL``)."""

    what = "engine journal"

    def __init__(self, data_dir: str | Path) -> None:
        super().__init__(Path(data_dir) / ENGINE_DB, synchronous="FULL")
        old = self.connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'log'"
        ).fetchone()
        if old is not None:
            self.close()
            raise StateCorrupted(
                f"{Path(data_dir) / ENGINE_DB}",
                "it was written by an older kforge (an unchained log): move it away to start afresh",
            )
        for statement in _SCHEMA:
            self.connection.execute(statement)

    def meta(self, key: str) -> bytes | None:
        with _reading(f"engine journal value {key!r}"):
            row = self.connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return bytes(row[0]) if row is not None else None

    def set_meta(self, key: str, value: bytes) -> None:
        self.connection.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def append_rows(self, rows: Sequence[Row]) -> None:
        with self.transaction() as connection:
            connection.executemany(
                "INSERT INTO journal VALUES (?, ?, ?, ?)",
                [(row.seq, row.time_ms, row.body, row.link) for row in rows],
            )

    def rows(self, after: int = 0) -> Iterator[Row]:
        with _reading(f"engine journal rows after {after}"):
            cursor = self.connection.execute(
                "SELECT seq, time_ms, body, link FROM journal WHERE seq > ? ORDER BY seq", (after,)
            )
            for found in cursor:
                yield _row(found)

    def last_row(self) -> Row | None:
        with _reading("engine journal's last row"):
            found = self.connection.execute(
                "SELECT seq, time_ms, body, link FROM journal ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            return _row(found) if found else None

    def row(self, seq: int) -> Row | None:
        with _reading(f"engine journal row {seq}"):
            found = self.connection.execute(
                "SELECT seq, time_ms, body, link FROM journal WHERE seq = ?", (seq,)
            ).fetchone()
            return _row(found) if found else None

    def save_snapshot(self, seq: int, body: bytes, mac: bytes) -> None:
        with self.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO journal_snapshots VALUES (?, ?, ?)", (seq, body, mac)
            )
            connection.execute("DELETE FROM journal_snapshots WHERE seq < ?", (seq,))

    def latest_snapshot(self) -> tuple[int, bytes, bytes] | None:
        with _reading("engine journal snapshot"):
            found = self.connection.execute(
                "SELECT seq, body, mac FROM journal_snapshots ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            return (int(found[0]), _blob(found[1]), _blob(found[2])) if found else None


def _blob(value: object) -> bytes:
    if not isinstance(value, bytes):  # a BLOB column holding another type was written over
        raise TypeError(f"expected a BLOB, found {type(value).__name__}")
    return value


def _row(found: tuple[object, ...]) -> Row:
    seq, time_ms, body, link = found
    if not isinstance(seq, int) or not isinstance(time_ms, int):
        raise TypeError("seq and time_ms must be integers")
    return Row(seq, time_ms, _blob(body), _blob(link))


# ----------------------------------------------------------------- the journal


def _link(key: bytes, previous: bytes, seq: int, time_ms: int, body: bytes) -> bytes:
    return hmac.new(key, previous + _LINK.pack(seq, time_ms) + body, hashlib.sha256).digest()


def _snapshot_mac(key: bytes, seq: int, link: bytes, body: bytes) -> bytes:
    return hmac.new(key, b"snapshot" + _LINK.pack(seq, 0) + link + body, hashlib.sha256).digest()


class Journal:
    """Records in, rows out; rows in, records out, every link checked.

    ``key`` is the chain key (:func:`chain_key` of the engine's secret).
    """

    def __init__(self, store: JournalStore, key: bytes) -> None:
        self.store = store
        self._key = key
        last = store.last_row()
        self.last_seq = last.seq if last is not None else 0
        self._last_link = last.link if last is not None else _GENESIS
        #: Rows recorded but not yet written, and the records they hold.
        self._pending: list[tuple[Record, int]] = []
        #: Index in ``_pending`` of each sandbox's trailing lazy SliceRan.
        self._lazy: dict[Hash256, int] = {}
        self._forced = False
        self.since_snapshot = 0

    # ------------------------------------------------------------------ writing

    def append(self, record: Record, time_ms: int) -> None:
        """Queue ``record`` for the next :meth:`commit`."""
        if isinstance(record, SliceRan):
            index = self._lazy.get(record.sandbox)
            if index is not None:
                self._pending[index] = (record, time_ms)
                return
            self._lazy[record.sandbox] = len(self._pending)
            self._pending.append((record, time_ms))
            return
        concerns = getattr(record, "sandbox", None)
        if concerns is None:
            self._lazy.clear()  # a record of no one sandbox: later slices come after it
        else:
            self._lazy.pop(concerns, None)
        self._pending.append((record, time_ms))
        self._forced = True

    @property
    def has_news(self) -> bool:
        """Whether a record other than a lazy SliceRan waits to be written."""
        return self._forced

    def commit(self) -> None:
        """Write every pending record in one transaction (after which they survive a crash)."""
        if not self._pending:
            return
        rows: list[Row] = []
        link, seq = self._last_link, self.last_seq
        for record, time_ms in self._pending:
            seq += 1
            body = encode_msgpack(record)
            link = _link(self._key, link, seq, time_ms, body)
            rows.append(Row(seq, time_ms, body, link))
        self.store.append_rows(rows)
        self._pending.clear()
        self._lazy.clear()
        self._forced = False
        self.last_seq, self._last_link = seq, link
        self.since_snapshot += len(rows)

    # ------------------------------------------------------------------ reading

    def rows(self, after: int = 0) -> Iterator[tuple[Row, Record]]:
        """The rows after ``after`` with their records, each link checked on the way.

        Raises ``StateCorrupted`` naming the first row that is not what the engine wrote.
        """
        previous = _GENESIS
        if after:
            anchor = self.store.row(after)
            if anchor is None:
                raise StateCorrupted("engine journal", f"row {after} is missing")
            previous = anchor.link
        expected = after + 1
        for row in self.store.rows(after):
            where = f"engine journal row {row.seq}"
            if row.seq != expected:
                raise StateCorrupted("engine journal", f"row {expected} is missing")
            if not hmac.compare_digest(
                row.link, _link(self._key, previous, row.seq, row.time_ms, row.body)
            ):
                raise StateCorrupted(where, "its chain link does not match: it was rewritten")
            try:
                record: Record = decode_msgpack(row.body, AnyRecord, "record")  # type: ignore[arg-type]
            except InvalidRequest as error:
                raise StateCorrupted(where, f"its record does not decode ({error})") from None
            yield row, record
            previous = row.link
            expected += 1

    def records(self, after: int = 0) -> Iterator[Record]:
        for _, record in self.rows(after):
            yield record

    def verify(self) -> int:
        """Check every row's link and record; returns how many rows there are."""
        count = 0
        for _ in self.rows():
            count += 1
        return count

    def events(self) -> Iterator[bytes]:
        """The encoded events (``Event.encode()``) derived from every record, in order."""
        seq = 0
        for row, record in self.rows():
            for spec in events_of(record):
                seq += 1
                event = Event(
                    seq, spec.kind, spec.sandbox_id, spec.owner, row.time_ms, spec.payload
                )
                yield event.encode()

    # ------------------------------------------------------------------ snapshots

    def save_snapshot(self, snapshot: StateSnapshot) -> None:
        """Store ``snapshot`` as the state after the last written row (commit first)."""
        body = encode_msgpack(snapshot)
        mac = _snapshot_mac(self._key, self.last_seq, self._last_link, body)
        self.store.save_snapshot(self.last_seq, body, mac)
        self.since_snapshot = 0

    def latest_snapshot(self) -> tuple[int, StateSnapshot] | None:
        """The latest snapshot and the row it follows, its MAC checked."""
        found = self.store.latest_snapshot()
        if found is None:
            return None
        seq, body, mac = found
        anchor = self.store.row(seq) if seq else None
        link = anchor.link if anchor is not None else _GENESIS
        if seq and anchor is None:
            raise StateCorrupted("engine journal snapshot", f"row {seq} it follows is missing")
        if not hmac.compare_digest(mac, _snapshot_mac(self._key, seq, link, body)):
            raise StateCorrupted(f"engine journal snapshot at row {seq}", "its MAC does not match")
        try:
            snapshot = decode_msgpack(body, StateSnapshot, "snapshot")
        except InvalidRequest as error:
            raise StateCorrupted(
                f"engine journal snapshot at row {seq}", f"it does not decode ({error})"
            ) from None
        return seq, snapshot

    def close(self) -> None:
        self.store.close()
