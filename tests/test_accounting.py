"""Accounting (seed §11): tick allowances, Spark, creation and execution charges."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kforge.accounting import (
    CREATE_TICKS,
    Account,
    InsufficientResources,
    Ledger,
    creation_spark,
)
from kforge.core import ErrorCategory, MemoryQuotaExceeded
from kforge.engine import CreateSandbox, SandboxState
from kforge.machine import Machine
from test_engine_support import (
    ECHO_TWICE,
    LOOP,
    OTHER,
    OWNER,
    SHORT,
    create,
    execute,
    open_engine,
    put,
    run,
)


def funded(ticks: int = 1000, spark: int = 100) -> Ledger:
    ledger = Ledger()
    ledger.set_allowance(OWNER, ticks)
    ledger.credit_spark(OWNER, spark)
    return ledger


def test_creation_costs_5_ticks_and_a_spark_per_kib_rounded_up() -> None:
    assert [creation_spark(q) for q in (0, 1, 1024, 1025, 65536)] == [0, 1, 1, 2, 64]
    ledger = funded()
    charge = ledger.charge_creation(OWNER, 1025)
    assert (charge.ticks, charge.spark) == (CREATE_TICKS, 2)
    assert ledger.account(OWNER) == Account(OWNER, 1000, 5, 0, 98)
    ledger.refund_creation(charge)
    assert ledger.account(OWNER) == Account(OWNER, 1000, 0, 0, 100)


def test_refusals_name_what_was_short_and_change_nothing() -> None:
    ledger = funded(ticks=4, spark=100)
    with pytest.raises(InsufficientResources, match="insufficient ticks") as ticks:
        ledger.charge_creation(OWNER, 1024)
    assert (ticks.value.resource, ticks.value.needed, ticks.value.available) == ("ticks", 5, 4)
    ledger.set_allowance(OWNER, 10)
    with pytest.raises(InsufficientResources, match="insufficient Spark") as spark:
        ledger.charge_creation(OWNER, 200 * 1024)
    assert (spark.value.needed, spark.value.available) == (200, 100)
    assert ledger.account(OWNER) == Account(OWNER, 10, 0, 0, 100)
    error = spark.value.to_kingdom_error()
    assert error.category is ErrorCategory.QUOTA_EXCEEDED
    assert error.context == {b"resource": b"Spark", b"needed": b"200", b"available": b"100"}


def test_an_unknown_agent_has_nothing() -> None:
    ledger = Ledger()
    assert ledger.account(OTHER) == Account(OTHER, 0, 0, 0, 0)
    assert ledger.account(OTHER).ticks_available == 0
    with pytest.raises(InsufficientResources):
        ledger.reserve_ticks(OTHER, 1)


def test_reserve_then_settle_refunds_the_unused_ticks() -> None:
    ledger = funded(ticks=100)
    ledger.reserve_ticks(OWNER, 60)
    assert ledger.account(OWNER).ticks_available == 40
    with pytest.raises(InsufficientResources):
        ledger.reserve_ticks(OWNER, 41)
    ledger.settle_ticks(OWNER, 60, 25)
    account = ledger.account(OWNER)
    assert (account.ticks_spent, account.ticks_reserved, account.ticks_available) == (25, 0, 75)


def test_cycles_reset_spent_ticks_and_may_replace_allowances() -> None:
    ledger = funded(ticks=100)
    ledger.charge_creation(OWNER, 0)
    assert ledger.cycle == 0
    assert ledger.begin_cycle() == 1
    assert ledger.account(OWNER).ticks_spent == 0
    assert ledger.begin_cycle({OWNER: 7, OTHER: 3}) == 2
    assert ledger.account(OWNER).tick_allowance == 7 and ledger.account(OTHER).tick_allowance == 3


def test_spark_moves_and_is_never_overdrawn() -> None:
    ledger = funded(spark=10)
    assert ledger.transfer(OWNER, OTHER, 4) == 6
    assert ledger.account(OTHER).spark == 4
    with pytest.raises(InsufficientResources, match="transfer"):
        ledger.transfer(OWNER, OTHER, 7)
    assert ledger.transfer(OWNER, OWNER, 6) == 6
    assert ledger.charge_spark(OWNER, 6, "a test") == 0
    with pytest.raises(InsufficientResources, match="a test"):
        ledger.charge_spark(OWNER, 1, "a test")
    for bad in (-1, 1 << 63, True):
        with pytest.raises(ValueError):
            ledger.credit_spark(OWNER, bad)


def test_the_ledger_persists_in_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))
    with Ledger.open_default() as ledger:
        ledger.set_allowance(OWNER, 50)
        ledger.credit_spark(OWNER, 9)
        ledger.reserve_ticks(OWNER, 20)
        ledger.begin_cycle()
    with Ledger(tmp_path / "ledger.sqlite3") as reopened:
        assert reopened.account(OWNER) == Account(OWNER, 50, 0, 20, 9)
        assert reopened.cycle == 1
    ledger.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        ledger.account(OWNER)


# ----------------------------------------------------------------------------- through the engine


def test_the_engine_charges_creation_and_execution() -> None:
    async def body() -> None:
        ledger = funded(ticks=1000, spark=100)
        async with open_engine(ledger=ledger) as engine:
            assert engine.accounting
            result = await execute(engine, SHORT, memory_quota=3000, tick_budget=500)
            assert result.ticks_used == 2
            account = ledger.account(OWNER)
            assert account.spark == 100 - 3
            assert account.ticks_spent == CREATE_TICKS + 2  # the unused 498 came back
            assert account.ticks_reserved == 0

    run(body)


def test_the_budget_is_reserved_while_running_and_settled_when_killed() -> None:
    async def body() -> None:
        ledger = funded(ticks=10_000)
        async with open_engine(ledger=ledger) as engine:
            sandbox_id = await create(engine, ECHO_TWICE, memory_quota=1024, tick_budget=5000)
            await engine.exec_start(sandbox_id, OWNER)
            assert ledger.account(OWNER).ticks_reserved == 5000
            while (
                await engine.sandbox_status(sandbox_id, OWNER)
            ).state is not SandboxState.BLOCKED:
                await asyncio.sleep(0)
            await engine.kill_sandbox(sandbox_id, OWNER)
            account = ledger.account(OWNER)
            assert account.ticks_reserved == 0
            assert account.ticks_spent == CREATE_TICKS + 7  # LI, RECV, SEND before blocking

    run(body)


def test_short_of_spark_or_ticks_is_refused_with_a_clear_error() -> None:
    async def body() -> None:
        ledger = funded(ticks=100, spark=1)
        async with open_engine(ledger=ledger) as engine:
            code = await put(engine, LOOP)
            with pytest.raises(InsufficientResources, match="Spark") as spark:
                await engine.create_sandbox(CreateSandbox(OWNER, code, 2048, 10))
            assert spark.value.to_kingdom_error().category is ErrorCategory.QUOTA_EXCEEDED
            assert await engine.list_sandboxes() == []
            sandbox_id = await engine.create_sandbox(CreateSandbox(OWNER, code, 1024, 96))
            with pytest.raises(InsufficientResources, match="ticks") as ticks:
                await engine.exec_start(sandbox_id, OWNER)
            assert (ticks.value.needed, ticks.value.available) == (96, 95)
            info = await engine.sandbox_status(sandbox_id, OWNER)
            assert info.state is SandboxState.READY  # nothing changed
            with pytest.raises(InsufficientResources):
                await engine.step(sandbox_id, OWNER)
            with pytest.raises(InsufficientResources, match="ticks"):
                await create(engine, SHORT, owner=OTHER, memory_quota=1024)

    run(body)


def test_a_creation_that_fails_after_charging_is_refunded(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_load(*args: object, **kwargs: object) -> None:
        raise MemoryQuotaExceeded(1, 0)

    async def body() -> None:
        ledger = funded()
        async with open_engine(ledger=ledger) as engine:
            code = await put(engine, SHORT)
            monkeypatch.setattr(Machine, "load", failing_load)
            with pytest.raises(MemoryQuotaExceeded):
                await engine.create_sandbox(CreateSandbox(OWNER, code, 4096, 10))
            assert ledger.account(OWNER) == Account(OWNER, 1000, 0, 0, 100)
            assert await engine.list_sandboxes() == []

    run(body)


def test_without_a_ledger_nothing_is_charged() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            assert not engine.accounting
            result = await execute(engine, SHORT, owner=OTHER)
            assert result.state is SandboxState.HALTED
            assert engine.ledger.account(OTHER) == Account(OTHER, 0, 0, 0, 0)

    run(body)
