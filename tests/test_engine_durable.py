"""The durable engine: log and snapshots in SQLite, rebuild after a restart or a crash."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

import durable_worker
from kforge.accounting import Ledger
from kforge.core import EventKind, Internal
from kforge.engine import CreateSandbox, Endpoint, Engine, SandboxState, Service, ServiceState
from kforge.engine.journal import ENGINE_DB, SqliteJournalStore
from kforge.storage import Vault
from test_engine_services import COUNTER, counted
from test_engine_support import ECHO_TWICE, OWNER, put, run

WORKER = Path(__file__).with_name("durable_worker.py")
SRC = Path(__file__).resolve().parents[1] / "src"


def durable(path: Path, **options: object) -> Engine:
    options.setdefault("tier", "reference")
    return Engine(data_dir=path, durable=True, **options)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- in process


def test_a_restarted_engine_has_its_sandboxes_services_and_accounts(tmp_path: Path) -> None:
    async def first() -> tuple[bytes, bytes, bytes]:
        ledger = Ledger()
        ledger.credit_spark(OWNER, 1000)
        ledger.set_allowance(OWNER, 100_000)
        async with durable(tmp_path, ledger=ledger) as engine:
            echo = await engine.create_sandbox(
                CreateSandbox(OWNER, await put(engine, ECHO_TWICE), 65536, 10_000, input=b"one")
            )
            await engine.exec_start(echo, OWNER)
            sandbox = await engine.create_sandbox(
                CreateSandbox(
                    OWNER,
                    await put(engine, COUNTER),
                    65536,
                    10_000,
                    persistent=True,
                    grants=frozenset({3}),
                )
            )
            service_id = await engine.create_service(
                Service(OWNER, sandbox, b"counter", 1000, True, (Endpoint(b"count", 3),))
            )
            for n in range(3):
                await engine.call_service(service_id, b"count", bytes([n]), OWNER)
            for _ in range(500):
                if (await engine.sandbox_status(echo, OWNER)).state is SandboxState.BLOCKED:
                    break
                await asyncio.sleep(0.01)
            spark = ledger.account(OWNER).spark
            assert spark == 1000 - 64 - 64 - 10
        return echo.raw, service_id.raw, sandbox.raw

    echo_raw, service_raw, _sandbox_raw = run(first)

    async def second() -> None:
        async with durable(tmp_path, ledger=Ledger()) as engine:
            from kforge.core import Hash256

            echo, service_id = Hash256(echo_raw), Hash256(service_raw)
            assert engine.ledger.account(OWNER).spark == 1000 - 64 - 64 - 10
            assert engine.ledger.account(OWNER).ticks_reserved == 10_000 + 1000
            info = await engine.service_info(service_id)
            assert info.state is ServiceState.ACTIVE and info.calls_completed == 3
            result = await engine.call_service(service_id, b"count", b"x", OWNER)
            assert result.data == counted(4, b"x")
            await engine.deliver(echo, 2, b"two", OWNER)
            assert (await engine.wait(echo, timeout=5)).output == b"onetwo"
            events = [msgpack.unpackb(raw) for raw in engine.journal.events()]  # type: ignore[union-attr]
            kinds = [event["kind"] for event in events]
            assert kinds.count(EventKind.SERVICE_COMPLETED) == 4
            assert [event["seq"] for event in events] == list(range(1, len(events) + 1))

    run(second)


def test_the_log_alone_rebuilds_a_crashed_engine(tmp_path: Path) -> None:
    """An engine dropped without close (no final snapshot) is rebuilt from its log."""

    async def first() -> bytes:
        engine = durable(tmp_path)
        await engine.open()
        sandbox = await engine.create_sandbox(
            CreateSandbox(OWNER, await put(engine, ECHO_TWICE), 65536, 10_000, input=b"a")
        )
        await engine.exec_start(sandbox, OWNER)
        await asyncio.sleep(0.01)
        await engine.deliver(sandbox, 2, b"b", OWNER)
        engine.scheduler.stop()  # "crash": nothing more is written
        return sandbox.raw

    raw = run(first)
    store = SqliteJournalStore(tmp_path)
    assert store.latest_snapshot() is None
    store.close()

    async def second() -> None:
        async with durable(tmp_path) as engine:
            from kforge.core import Hash256

            assert engine.rebuilt_records > 0
            result = await engine.wait(Hash256(raw), timeout=5)
            assert (result.state, result.output) == (SandboxState.HALTED, b"ab")

    run(second)


def test_periodic_snapshots_and_the_log_after_them(tmp_path: Path) -> None:
    async def first() -> None:
        async with durable(tmp_path, snapshot_every=5) as engine:
            code = await put(engine, ECHO_TWICE)
            for n in range(6):
                sandbox = await engine.create_sandbox(
                    CreateSandbox(OWNER, code, 65536, 10_000, input=bytes([65 + n]))
                )
                await engine.exec_start(sandbox, OWNER)
            for _ in range(500):
                states = {s.state for s in await engine.list_sandboxes()}
                if states == {SandboxState.BLOCKED}:
                    break
                await asyncio.sleep(0.01)
            assert engine.journal is not None and engine.journal.latest_snapshot() is not None
            seq = await engine.snapshot()
            assert seq == engine.journal.last_seq

    run(first)

    async def second() -> None:
        async with durable(tmp_path) as engine:
            sandboxes = await engine.list_sandboxes()
            assert [s.state for s in sandboxes] == [SandboxState.BLOCKED] * 6  # from the snapshot
            for n, info in enumerate(sandboxes):
                await engine.deliver(info.id, 2, b"!", OWNER)
                assert (await engine.wait(info.id, timeout=5)).output == bytes([65 + n]) + b"!"

    run(second)


def test_snapshot_needs_a_durable_engine() -> None:
    async def body() -> None:
        async with Engine(Vault(":memory:"), tier="reference") as engine:
            with pytest.raises(Internal):
                await engine.snapshot()
        with pytest.raises(ValueError):
            Engine(Vault(":memory:"), snapshot_every=0)

    run(body)


def test_the_engine_database_uses_wal_and_full_sync(tmp_path: Path) -> None:
    store = SqliteJournalStore(tmp_path)
    assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()
    assert (tmp_path / ENGINE_DB).exists()


# ----------------------------------------------------------------------------- crash test


def _start(data_dir: Path, sandboxes: int, inputs: int, every: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{WORKER.parent}")
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(data_dir), str(sandboxes), str(inputs), str(every)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _check_reflected(data_dir: Path, acked: list[str]) -> None:
    """Every acknowledged request is there after a rebuild."""

    async def body() -> None:
        async with durable(data_dir) as engine:
            sandboxes = await engine.list_sandboxes(durable_worker.OWNER)
            records = [await engine.run_record(s.id, durable_worker.OWNER) for s in sandboxes]
            stdin = [[d.data for d in r.deliveries if d.channel == 2] for r in records]
            for line in acked:
                words = line.split()
                if words[0] == "create":
                    assert int(words[1]) < len(sandboxes), line
                elif words[0] == "start":
                    assert sandboxes[int(words[1])].state is not SandboxState.READY, line
                elif words[0] == "deliver":
                    i, j = int(words[1]), int(words[2])
                    assert stdin[i][j] == durable_worker.message(i, j), line
                elif words[0] == "end":
                    assert stdin[int(words[1])][-1] == b"", line

    run(body)


def _crash_and_recover(
    tmp_path: Path,
    seed: int,
    kills: int,
    sandboxes: int,
    inputs: int,
    every: int,
    reference_ticks: str | None = None,
) -> None:
    rng = random.Random(seed)
    data_dir = tmp_path / "engine"
    acked: list[str] = []
    deadline = time.monotonic() + 60
    for _ in range(kills):
        worker = _start(data_dir, sandboxes, inputs, every)
        time.sleep(rng.uniform(0.15, 0.6))
        worker.send_signal(signal.SIGKILL)
        out, _ = worker.communicate(timeout=30)
        acked += [line[4:] for line in out.splitlines() if line.startswith("ACK ")]
        _check_reflected(data_dir, acked)
        if (
            any(line.startswith("RESULT") for line in out.splitlines())
            or time.monotonic() > deadline
        ):
            break
    worker = _start(data_dir, sandboxes, inputs, every)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err[-2000:]
    results = [line.split() for line in out.splitlines() if line.startswith("RESULT")]
    assert len(results) == sandboxes
    for _, index, state, ticks, output in results:
        assert state == "HALTED"
        assert bytes.fromhex(output) == durable_worker.expected_output(int(index), inputs)
        reference_ticks = reference_ticks or ticks
        assert ticks == reference_ticks  # every sandbox ran the same program on same-sized inputs


def _uninterrupted_ticks(tmp_path: Path, sandboxes: int, inputs: int) -> str:
    worker = _start(tmp_path / "reference", sandboxes, inputs, 1000)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err[-2000:]
    return next(line.split() for line in out.splitlines() if line.startswith("RESULT"))[3]


def test_a_killed_engine_recovers_every_acknowledged_request(tmp_path: Path) -> None:
    _crash_and_recover(tmp_path, seed=1, kills=2, sandboxes=6, inputs=120, every=40)


@pytest.mark.slow
def test_repeated_random_kills_recover_to_the_uninterrupted_results(tmp_path: Path) -> None:
    ticks = _uninterrupted_ticks(tmp_path, 8, 300)
    for seed in range(3):
        _crash_and_recover(
            tmp_path / str(seed),
            seed=seed,
            kills=6,
            sandboxes=8,
            inputs=300,
            every=25 + seed * 40,
            reference_ticks=ticks,
        )
