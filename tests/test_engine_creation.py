"""Creating sandboxes: presets, imports linked from the vault, accounting on by default."""

from __future__ import annotations

import struct

import pytest

from kforge.accounting import CREATE_TICKS, OPEN_ACCOUNTS, Ledger, creation_spark
from kforge.core import EventKind, InvalidProgram, InvalidRequest, UnresolvedSymbol
from kforge.engine import PRESETS, CreateSandbox, Engine, SandboxState
from kforge.link import Import
from kforge.storage import Vault
from test_engine_artifacts import LIBRARY, MAIN
from test_engine_support import OWNER, SHORT, open_engine, put, run


def test_a_preset_fills_what_the_request_leaves_out() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            code = await put(engine, SHORT)
            minimal = PRESETS["minimal"]
            sandbox = await engine.create_sandbox(CreateSandbox(OWNER, code, preset="minimal"))
            request = engine.state.sandbox(sandbox).request
            assert (request.memory_quota, request.tick_budget, request.deadline_ms) == (
                minimal.memory_quota,
                minimal.tick_budget,
                minimal.deadline_ms,
            )
            generous = await engine.create_sandbox(
                CreateSandbox(OWNER, code, memory_quota=4096, preset="generous")
            )
            request = engine.state.sandbox(generous).request
            assert request.memory_quota == 4096  # given: kept
            assert request.grants == PRESETS["generous"].grants == frozenset(range(3, 8))
            assert (await engine.sandbox_status(generous, OWNER)).memory_quota == 4096

    run(body)


def test_a_request_without_a_preset_gives_its_quota_and_budget_and_names_a_known_preset() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            code = await put(engine, SHORT)
            for request, field in (
                (CreateSandbox(OWNER, code, tick_budget=10), "memory_quota"),
                (CreateSandbox(OWNER, code, memory_quota=4096), "tick_budget"),
                (CreateSandbox(OWNER, code, preset="huge"), "preset"),
            ):
                with pytest.raises(InvalidRequest) as error:
                    await engine.create_sandbox(request)
                assert error.value.field == field

    run(body)


def test_imports_are_linked_from_the_vault_at_creation_for_two_ticks_each() -> None:
    async def body() -> None:
        ledger = Ledger()
        ledger.set_allowance(OWNER, 10_000)
        ledger.credit_spark(OWNER, 100)
        async with open_engine(ledger=ledger) as engine:
            linked = engine.bus.subscribe([EventKind.LINK_COMPLETED])
            library = await put(engine, LIBRARY)
            main = await put(engine, MAIN)
            with pytest.raises(InvalidProgram, match="unresolved imports"):
                await engine.create_sandbox(CreateSandbox(OWNER, main, 4096, 100))
            with pytest.raises(UnresolvedSymbol):
                await engine.create_sandbox(
                    CreateSandbox(OWNER, main, 4096, 100, imports=(Import(library, (b"x",)),))
                )
            spent = ledger.account(OWNER).ticks_spent
            sandbox = await engine.create_sandbox(
                CreateSandbox(OWNER, main, 4096, 100, imports=(Import(library, (b"double",)),))
            )
            assert ledger.account(OWNER).ticks_spent == spent + CREATE_TICKS + 2
            assert engine.state.sandbox(sandbox).program != main  # it runs the linked program
            await engine.exec_start(sandbox, OWNER)
            result = await engine.wait(sandbox, timeout=10)
            assert result.state is SandboxState.HALTED
            assert struct.unpack("<Q", result.output) == (42,)
            (event,) = linked.events()
            assert event.payload["original"] == main and event.payload["import_count"] == 1

    run(body)


def test_accounting_is_on_by_default_and_standalone_turns_it_off() -> None:
    async def body() -> None:
        vault = Vault(":memory:")
        async with Engine(vault, tier="reference") as engine:
            assert engine.accounting
            code = await put(engine, SHORT)
            await engine.create_sandbox(CreateSandbox(OWNER, code, 4096, 10))
            account = engine.ledger.account(OWNER)
            assert account.spark == OPEN_ACCOUNTS.spark - creation_spark(4096)
            assert account.ticks_spent == CREATE_TICKS
        async with Engine(vault, tier="reference", standalone=True) as engine:
            assert not engine.accounting
            await engine.create_sandbox(CreateSandbox(OWNER, code, 4096, 10))
            assert engine.ledger.account(OWNER).spark == 0  # no opening, no charge
        with pytest.raises(ValueError, match="standalone"):
            Engine(vault, standalone=True, ledger=Ledger())
        vault.close()

    run(body)
