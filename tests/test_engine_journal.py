"""The engine's journal: records under a keyed chain; a rewritten or damaged row is reported."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kforge.core import StateCorrupted
from kforge.engine import CreateSandbox, Engine, MemoryJournalStore
from kforge.engine.journal import ENGINE_DB, Journal, Row, _link, chain_key
from kforge.engine.records import AnyRecord, InputDelivered
from kforge.wire import decode_msgpack, encode_msgpack
from test_engine_support import ECHO_TWICE, OWNER, put, run


def durable(path: Path) -> Engine:
    return Engine(data_dir=path, durable=True, tier="reference", standalone=True)


async def _blocked_echo(engine: Engine) -> None:
    sandbox = await engine.create_sandbox(
        CreateSandbox(OWNER, await put(engine, ECHO_TWICE), 65536, 10_000, input=b"one")
    )
    await engine.exec_start(sandbox, OWNER)
    await engine.deliver(sandbox, 2, b"two", OWNER)
    assert (await engine.wait(sandbox, timeout=5)).output == b"onetwo"


def _rows(path: Path) -> list[tuple[int, bytes]]:
    with sqlite3.connect(path / ENGINE_DB) as db:
        return [
            (int(seq), bytes(body)) for seq, body in db.execute("SELECT seq, body FROM journal")
        ]


def _delivery_row(path: Path) -> tuple[int, InputDelivered]:
    for seq, body in _rows(path):
        record = decode_msgpack(body, AnyRecord, "record")  # type: ignore[arg-type]
        if isinstance(record, InputDelivered) and record.data == b"two":
            return seq, record
    raise AssertionError("no delivery of b'two' in the journal")


def test_a_rewritten_delivery_row_is_detected_when_the_engine_reopens(tmp_path: Path) -> None:
    async def first() -> None:
        async with durable(tmp_path) as engine:
            await _blocked_echo(engine)

    run(first)
    seq, record = _delivery_row(tmp_path)
    forged = encode_msgpack(
        InputDelivered(record.sandbox, record.ticks, record.channel, b"TWO", None, None)
    )
    with sqlite3.connect(tmp_path / ENGINE_DB) as db:
        db.execute("UPDATE journal SET body = ? WHERE seq = ?", (forged, seq))

    async def second() -> None:
        with pytest.raises(StateCorrupted, match=rf"row {seq}.*rewritten"):
            await durable(tmp_path).open()

    run(second)


def test_a_damaged_row_is_a_kforge_error_not_a_decoding_error(tmp_path: Path) -> None:
    """Even bytes that carry a valid link (whoever wrote them held the secret) but do not
    decode are reported as the engine's own error, naming the row."""

    async def first() -> None:
        async with durable(tmp_path) as engine:
            await _blocked_echo(engine)

    run(first)
    with sqlite3.connect(tmp_path / ENGINE_DB) as db:
        secret = bytes(db.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()[0])
        rows = db.execute("SELECT seq, time_ms, body, link FROM journal ORDER BY seq").fetchall()
    store = MemoryJournalStore()
    previous = bytes(32)
    for seq, time_ms, body, _ in rows:
        body = b"\xc1 not msgpack" if seq == 2 else bytes(body)
        link = _link(chain_key(secret), previous, seq, time_ms, body)
        store.append_rows([Row(seq, time_ms, body, link)])
        previous = link
    journal = Journal(store, chain_key(secret))
    with pytest.raises(StateCorrupted, match=r"row 2.*does not decode"):
        journal.verify()


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        ("UPDATE journal_snapshots SET body = CAST(body || x'00' AS BLOB)", "MAC does not match"),
        ("DELETE FROM journal WHERE seq = 2", "row 2 is missing"),
        ("UPDATE journal SET body = 'text' WHERE seq = 3", "cannot be read"),
    ],
)
def test_missing_rows_damaged_rows_and_tampered_snapshots_are_reported(
    tmp_path: Path, damage: str, match: str
) -> None:
    async def first() -> None:
        async with durable(tmp_path) as engine:
            await _blocked_echo(engine)

    async def reopen() -> None:
        with pytest.raises(StateCorrupted, match=match):
            await durable(tmp_path).open()

    run(first)
    with sqlite3.connect(tmp_path / ENGINE_DB) as db:
        db.execute(damage)
    run(reopen)
