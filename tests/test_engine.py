"""The engine's API: lifecycle, states, ownership, limits, deadlines, cycles."""

from __future__ import annotations

import asyncio

import pytest

from kforge.accounting import Ledger
from kforge.asm import assemble
from kforge.core import (
    AgentId,
    EventKind,
    Hash256,
    Internal,
    InvalidProgram,
    InvalidState,
    MemoryQuotaExceeded,
    PermissionDenied,
    SandboxNotFound,
    TooManySandboxes,
    VaultFetchFailed,
)
from kforge.engine import (
    CreateSandbox,
    Engine,
    EngineLimits,
    EngineStatus,
    ManualClock,
    Operation,
    SandboxState,
    seeded_random,
)
from kforge.isa import FaultCode
from kforge.messages import InvalidRequest
from kforge.storage import Vault
from test_engine_support import (
    DIVIDE_BY_ZERO,
    ECHO,
    ECHO_TWICE,
    LOOP,
    OTHER,
    OWNER,
    SHORT,
    THIRD,
    USER_FAULT,
    create,
    execute,
    open_engine,
    put,
    run,
)

UNKNOWN = Hash256(b"\xee" * 32)


# ----------------------------------------------------------------------------- happy paths


def test_echo_runs_to_halted_with_its_output() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            result = await execute(engine, ECHO, input=b"hello")
            assert result.state is SandboxState.HALTED
            assert result.output == b"hello"
            assert result.fault is None
            assert result.ticks_used == 1 + 3 + 3 + 1

    run(body)


def test_create_gives_a_ready_sandbox_with_its_info() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(
                engine, ECHO, memory_quota=4096, tick_budget=500, persistent=True
            )
            info = await engine.sandbox_status(sandbox_id, OWNER)
            assert info.id == sandbox_id and info.owner == OWNER
            assert info.state is SandboxState.READY
            assert (info.ticks_used, info.ticks_remaining) == (0, 500)
            assert info.memory_quota == 4096 and info.persistent
            assert info.memory_used == 8  # the empty environment block
            assert info.blocked_channel is None

    run(body)


def test_faults_are_results_not_errors() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            result = await execute(engine, DIVIDE_BY_ZERO)
            assert result.state is SandboxState.FAULTED
            assert result.fault is FaultCode.DIVIDE_BY_ZERO
            user = await execute(engine, USER_FAULT)
            assert (user.fault, user.fault_detail) == (FaultCode.USER_FAULT, 1234)
            short = await execute(engine, LOOP, tick_budget=100)
            assert short.fault is FaultCode.OUT_OF_TICKS and short.ticks_used == 100

    run(body)


def test_list_sandboxes_by_owner_in_creation_order() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            first = await create(engine, SHORT)
            second = await create(engine, SHORT, owner=OTHER)
            third = await create(engine, SHORT)
            assert [info.id for info in await engine.list_sandboxes()] == [first, second, third]
            assert [info.id for info in await engine.list_sandboxes(owner=OWNER)] == [first, third]
            assert [info.id for info in await engine.list_sandboxes(owner=THIRD)] == []

    run(body)


def test_ids_are_unique_and_depend_on_the_random_source_not_the_request() -> None:
    async def ids(seed: int) -> list[Hash256]:
        async with open_engine(random_source=seeded_random(seed)) as engine:
            return [await create(engine, SHORT) for _ in range(3)]

    first, again, other = run(lambda: ids(1)), run(lambda: ids(1)), run(lambda: ids(2))
    assert len(set(first)) == 3
    assert first == again
    assert not set(first) & set(other)


# ----------------------------------------------------------------------------- blocking and input


def test_blocked_sandbox_waits_for_input_then_finishes() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            events = engine.bus.subscribe([EventKind.SANDBOX_BLOCKED])
            sandbox_id = await create(engine, ECHO_TWICE, input=b"one ")
            await engine.exec_start(sandbox_id, OWNER)
            await events.get()
            info = await engine.sandbox_status(sandbox_id, OWNER)
            assert info.state is SandboxState.BLOCKED and info.blocked_channel == 2
            slices = engine.scheduler.slices
            await asyncio.sleep(0.01)
            assert engine.scheduler.slices == slices  # a blocked sandbox costs nothing
            await engine.deliver(sandbox_id, 2, b"two", OWNER)
            result = await engine.wait(sandbox_id, timeout=5)
            assert result.output == b"one two"

    run(body)


def test_output_is_readable_while_running_and_after_stopping() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            events = engine.bus.subscribe([EventKind.SANDBOX_BLOCKED])
            sandbox_id = await create(engine, ECHO_TWICE, input=b"one ")
            assert await engine.output(sandbox_id, OWNER) == b""  # READY: nothing yet
            await engine.exec_start(sandbox_id, OWNER)
            await events.get()
            assert (await engine.sandbox_status(sandbox_id, OWNER)).state is SandboxState.BLOCKED
            assert await engine.output(sandbox_id, OWNER) == b"one "  # partial, mid-run
            assert await engine.output(sandbox_id, OWNER, offset=2) == b"e "
            assert await engine.output(sandbox_id, OWNER, offset=4) == b""
            with pytest.raises(InvalidRequest, match="offset"):
                await engine.output(sandbox_id, OWNER, offset=5)  # past what was written
            for bad in (-1, 1.5, True, "0"):
                with pytest.raises(InvalidRequest) as raised:
                    await engine.output(sandbox_id, OWNER, offset=bad)  # type: ignore[arg-type]
                assert raised.value.field == "offset"
            with pytest.raises(PermissionDenied):
                await engine.output(sandbox_id, OTHER)
            with pytest.raises(SandboxNotFound, match=UNKNOWN.hex):
                await engine.output(UNKNOWN, OWNER)
            await engine.grant(sandbox_id, OWNER, OTHER, [Operation.STATUS])
            assert await engine.output(sandbox_id, OTHER, offset=1) == b"ne "
            await engine.deliver(sandbox_id, 2, b"two", OWNER)
            result = await engine.wait(sandbox_id, timeout=5)
            assert result.output == b"one two"
            assert await engine.output(sandbox_id, OWNER) == result.output  # stopped: the result
            assert await engine.output(sandbox_id, OTHER, offset=4) == b"two"
            await engine.revoke(sandbox_id, OWNER, OTHER)
            with pytest.raises(PermissionDenied):
                await engine.output(sandbox_id, OTHER)

    run(body)


def test_deliver_checks_channel_size_state_and_owner() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(message_limit=16)) as engine:
            sandbox_id = await create(engine, ECHO_TWICE, grants=frozenset({7}))
            with pytest.raises(PermissionDenied, match="stdin"):
                await engine.deliver(sandbox_id, 7, b"x", OWNER)
            with pytest.raises(InvalidRequest) as too_big:
                await engine.deliver(sandbox_id, 2, b"x" * 17, OWNER)
            assert too_big.value.field == "data"
            with pytest.raises(PermissionDenied):
                await engine.deliver(sandbox_id, 2, b"x", OTHER)
            with pytest.raises(SandboxNotFound):
                await engine.deliver(UNKNOWN, 2, b"x", OWNER)
            await engine.deliver(sandbox_id, 2, b"early", OWNER)  # READY: queued
            await engine.kill_sandbox(sandbox_id, OWNER)
            with pytest.raises(InvalidState):
                await engine.deliver(sandbox_id, 2, b"late", OWNER)

    run(body)


# ----------------------------------------------------------------------------- step


def test_step_executes_one_instruction_then_exec_start_continues() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            events = engine.bus.subscribe()
            sandbox_id = await create(engine, ECHO, input=b"hi")
            assert await engine.step(sandbox_id, OWNER) is SandboxState.RUNNING
            info = await engine.sandbox_status(sandbox_id, OWNER)
            assert info.ticks_used == 1
            await engine.exec_start(sandbox_id, OWNER)
            with pytest.raises(InvalidState, match="scheduler"):
                await engine.step(sandbox_id, OWNER)
            result = await engine.wait(sandbox_id, timeout=5)
            assert result.output == b"hi"
            kinds = [event.kind for event in events.events()]
            assert kinds.count(EventKind.SANDBOX_STARTED) == 1

    run(body)


def test_step_to_the_end_and_into_a_block() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(engine, ECHO_TWICE, input=b"a")
            states = [await engine.step(sandbox_id, OWNER) for _ in range(4)]
            assert states[-1] is SandboxState.BLOCKED
            with pytest.raises(InvalidState):
                await engine.step(sandbox_id, OWNER)
            await engine.deliver(sandbox_id, 2, b"b", OWNER)
            while (state := await engine.step(sandbox_id, OWNER)) is SandboxState.RUNNING:
                pass
            assert state is SandboxState.HALTED
            assert (await engine.wait(sandbox_id)).output == b"ab"
            with pytest.raises(InvalidState):
                await engine.step(sandbox_id, OWNER)

    run(body)


def test_exec_start_after_stepping_into_a_block_waits_for_input() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(engine, ECHO_TWICE, input=b"a")
            for _ in range(4):
                await engine.step(sandbox_id, OWNER)
            await engine.exec_start(sandbox_id, OWNER)
            assert (await engine.sandbox_status(sandbox_id, OWNER)).state is SandboxState.BLOCKED
            await engine.deliver(sandbox_id, 2, b"b", OWNER)
            assert (await engine.wait(sandbox_id, timeout=5)).output == b"ab"

    run(body)


# ----------------------------------------------------------------------------- kill


def test_kill_stops_a_running_sandbox_and_reports_who() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            killed = engine.bus.subscribe([EventKind.SANDBOX_KILLED])
            sandbox_id = await create(engine, LOOP, tick_budget=10**12)
            await engine.exec_start(sandbox_id, OWNER)
            await asyncio.sleep(0)
            await engine.grant(sandbox_id, OWNER, OTHER, [Operation.KILL])
            await engine.kill_sandbox(sandbox_id, OTHER)
            result = await engine.wait(sandbox_id)
            assert result.state is SandboxState.KILLED and result.fault is None
            event = killed.events()[0]
            assert event.payload == {"sandbox_id": sandbox_id, "killed_by": OTHER}
            with pytest.raises(InvalidState):
                await engine.kill_sandbox(sandbox_id, OWNER)

    run(body)


def test_kill_a_ready_and_a_blocked_sandbox() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            ready = await create(engine, SHORT)
            await engine.kill_sandbox(ready, OWNER)
            assert (await engine.wait(ready)).state is SandboxState.KILLED
            with pytest.raises(InvalidState):
                await engine.exec_start(ready, OWNER)
            blocked = await create(engine, ECHO_TWICE)
            await engine.exec_start(blocked, OWNER)
            while (await engine.sandbox_status(blocked, OWNER)).state is not SandboxState.BLOCKED:
                await asyncio.sleep(0)
            await engine.kill_sandbox(blocked, OWNER)
            result = await engine.wait(blocked)
            assert result.state is SandboxState.KILLED and result.output == b""

    run(body)


# ----------------------------------------------------------------------------- wrong state, owner, id


def test_operations_that_do_not_fit_the_state_are_invalid_state() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(engine, SHORT)
            await engine.exec_start(sandbox_id, OWNER)
            with pytest.raises(InvalidState, match="already executing"):
                await engine.exec_start(sandbox_id, OWNER)
            await engine.wait(sandbox_id)
            for operation in (
                engine.exec_start(sandbox_id, OWNER),
                engine.step(sandbox_id, OWNER),
                engine.kill_sandbox(sandbox_id, OWNER),
                engine.deliver(sandbox_id, 2, b"", OWNER),
            ):
                with pytest.raises(InvalidState) as error:
                    await operation
                assert error.value.state is SandboxState.HALTED
            live = await create(engine, SHORT)
            with pytest.raises(InvalidState):
                await engine.forget(live, OWNER)

    run(body)


def test_only_the_owner_or_a_grant_may_act() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(engine, ECHO_TWICE)
            for operation in (
                engine.sandbox_status(sandbox_id, OTHER),
                engine.exec_start(sandbox_id, OTHER),
                engine.step(sandbox_id, OTHER),
                engine.kill_sandbox(sandbox_id, OTHER),
                engine.deliver(sandbox_id, 2, b"x", OTHER),
                engine.io_log(sandbox_id, OTHER),
                engine.wait(sandbox_id, OTHER),
                engine.grant(sandbox_id, OTHER, OTHER, [Operation.KILL]),
                engine.revoke(sandbox_id, OTHER, OWNER),
            ):
                with pytest.raises(PermissionDenied):
                    await operation
            await engine.grant(sandbox_id, OWNER, OTHER, [Operation.STATUS, Operation.EXEC])
            assert (await engine.sandbox_status(sandbox_id, OTHER)).owner == OWNER
            await engine.exec_start(sandbox_id, OTHER)
            with pytest.raises(PermissionDenied):
                await engine.deliver(sandbox_id, 2, b"x", OTHER)
            await engine.grant(sandbox_id, OWNER, OTHER, [Operation.DELIVER])
            await engine.deliver(sandbox_id, 2, b"x", OTHER)
            await engine.revoke(sandbox_id, OWNER, OTHER)
            with pytest.raises(PermissionDenied):
                await engine.sandbox_status(sandbox_id, OTHER)
            assert (await engine.wait(sandbox_id, timeout=5)).output == b"x"
            with pytest.raises(PermissionDenied):
                await engine.forget(sandbox_id, OTHER)
            await engine.forget(sandbox_id, OWNER)
            with pytest.raises(SandboxNotFound):
                await engine.sandbox_status(sandbox_id, OWNER)

    run(body)


def test_unknown_ids_are_sandbox_not_found() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            for operation in (
                engine.sandbox_status(UNKNOWN, OWNER),
                engine.exec_start(UNKNOWN, OWNER),
                engine.step(UNKNOWN, OWNER),
                engine.kill_sandbox(UNKNOWN, OWNER),
                engine.deliver(UNKNOWN, 2, b"", OWNER),
                engine.wait(UNKNOWN),
                engine.io_log(UNKNOWN, OWNER),
                engine.grant(UNKNOWN, OWNER, OTHER, []),
                engine.revoke(UNKNOWN, OWNER, OTHER),
                engine.forget(UNKNOWN, OWNER),
            ):
                with pytest.raises(SandboxNotFound, match=UNKNOWN.hex):
                    await operation

    run(body)


# ----------------------------------------------------------------------------- creation refusals


def test_creation_refuses_bad_programs_and_codes() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            with pytest.raises(VaultFetchFailed):
                await engine.create_sandbox(CreateSandbox(OWNER, UNKNOWN, 4096, 10))
            junk = engine.vault.put(b"not a program, but long enough")
            with pytest.raises(InvalidProgram, match="bad magic"):
                await engine.create_sandbox(CreateSandbox(OWNER, junk, 4096, 10))
            needs_link = engine.vault.put_program(assemble(".import helper\nCALL helper\nHALT\n"))
            with pytest.raises(InvalidProgram, match="unresolved"):
                await engine.create_sandbox(CreateSandbox(OWNER, needs_link, 4096, 10))
            assert await engine.list_sandboxes() == []

    run(body)


def test_creation_refuses_malformed_requests_naming_the_field() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(max_tick_budget=1000)) as engine:
            code = await put(engine, SHORT)
            cases = {
                "owner": CreateSandbox(Hash256(b"\x01" * 32), code, 4096, 10),  # type: ignore[arg-type]
                "code": CreateSandbox(OWNER, b"x" * 32, 4096, 10),  # type: ignore[arg-type]
                "memory_quota": CreateSandbox(OWNER, code, -1, 10),
                "tick_budget": CreateSandbox(OWNER, code, 4096, 1001),
                "input": CreateSandbox(OWNER, code, 4096, 10, input="text"),  # type: ignore[arg-type]
                "environment": CreateSandbox(OWNER, code, 4096, 10, environment={"k": "v"}),  # type: ignore[dict-item]
                "grants": CreateSandbox(OWNER, code, 4096, 10, grants=frozenset({16})),
                "accept_from": CreateSandbox(OWNER, code, 4096, 10, accept_from=frozenset({b"x"})),  # type: ignore[arg-type]
                "deadline_ms": CreateSandbox(OWNER, code, 4096, 10, deadline_ms=0),
            }
            for field, request in cases.items():
                with pytest.raises(InvalidRequest) as error:
                    await engine.create_sandbox(request)
                assert error.value.field.startswith(field)  # "grants[0]", "environment key"
            with pytest.raises(InvalidRequest):
                await engine.create_sandbox("request")  # type: ignore[arg-type]

    run(body)


def test_grants_outside_3_to_7_are_refused() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            code = await put(engine, SHORT)
            with pytest.raises(PermissionDenied, match="channel 8"):
                await engine.create_sandbox(
                    CreateSandbox(OWNER, code, 4096, 10, grants=frozenset({3, 8}))
                )
            await engine.create_sandbox(
                CreateSandbox(OWNER, code, 4096, 10, grants=frozenset({0, 2, 7}))
            )

    run(body)


def test_memory_quota_is_checked_before_allocation() -> None:
    limits = EngineLimits(max_memory_quota=1 << 20, max_total_memory=(1 << 20) + 4096)

    async def body() -> None:
        async with open_engine(limits=limits) as engine:
            code = await put(engine, SHORT)
            with pytest.raises(MemoryQuotaExceeded) as over:
                await engine.create_sandbox(CreateSandbox(OWNER, code, (1 << 20) + 1, 10))
            assert (over.value.requested, over.value.max) == ((1 << 20) + 1, 1 << 20)
            await engine.create_sandbox(CreateSandbox(OWNER, code, 1 << 20, 10))
            with pytest.raises(MemoryQuotaExceeded) as total:
                await engine.create_sandbox(CreateSandbox(OWNER, code, 8192, 10))
            assert total.value.max == (1 << 20) + 4096
            with pytest.raises(MemoryQuotaExceeded):  # data + environment + one stack slot
                await engine.create_sandbox(
                    CreateSandbox(OWNER, code, 16, 10, environment={b"key": b"value"})
                )

    run(body)


def test_sandbox_limits_total_and_per_owner() -> None:
    async def body() -> None:
        async with open_engine(
            limits=EngineLimits(max_sandboxes=3, max_sandboxes_per_owner=2)
        ) as engine:
            first = await create(engine, SHORT)
            await create(engine, SHORT)
            with pytest.raises(TooManySandboxes, match="owner"):
                await create(engine, SHORT)
            await create(engine, SHORT, owner=OTHER)
            with pytest.raises(TooManySandboxes, match="engine"):
                await create(engine, SHORT, owner=THIRD)
            await engine.kill_sandbox(first, OWNER)  # a stopped sandbox no longer counts
            await create(engine, SHORT, owner=THIRD)

    run(body)


# ----------------------------------------------------------------------------- deadlines


def test_a_looping_sandbox_runs_into_its_wall_clock_deadline() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            faulted = engine.bus.subscribe([EventKind.SANDBOX_FAULTED])
            result = await execute(engine, LOOP, tick_budget=10**12, deadline_ms=50)
            assert result.state is SandboxState.DEADLINE_EXCEEDED
            assert result.fault is None and result.ticks_used > 0
            payload = faulted.events()[0].payload
            assert payload["fault"] is None and payload["fault_name"] == "DEADLINE_EXCEEDED"

    run(body)


def test_a_blocked_sandbox_meets_its_deadline_on_a_manual_clock() -> None:
    async def body() -> None:
        clock = ManualClock()
        async with open_engine(clock=clock, limits=EngineLimits(deadline=10)) as engine:
            blocked = engine.bus.subscribe([EventKind.SANDBOX_BLOCKED])
            sandbox_id = await create(engine, ECHO_TWICE)
            await engine.exec_start(sandbox_id, OWNER)
            await blocked.get()
            clock.advance(9.9)
            assert engine.expire_deadlines() == []
            clock.advance(0.2)
            engine.scheduler.poke()
            result = await engine.wait(sandbox_id, timeout=5)
            assert result.state is SandboxState.DEADLINE_EXCEEDED

    run(body)


def test_wait_times_out() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(engine, SHORT)
            with pytest.raises(asyncio.TimeoutError):
                await engine.wait(sandbox_id, timeout=0.01)

    run(body)


# ----------------------------------------------------------------------------- engine lifecycle


def test_closing_kills_live_sandboxes_and_refuses_more_work() -> None:
    async def body() -> None:
        engine = Engine(Vault(":memory:"), random_source=seeded_random(1), standalone=True)
        assert engine.status is EngineStatus.UNOPENED
        with pytest.raises(Internal, match="unopened"):
            await engine.create_sandbox(CreateSandbox(OWNER, UNKNOWN, 4096, 10))
        async with engine:
            killed = engine.bus.subscribe([EventKind.SANDBOX_KILLED])
            sandbox_id = await create(engine, LOOP, tick_budget=10**12)
            await engine.exec_start(sandbox_id, OWNER)
            waiter = asyncio.ensure_future(engine.wait(sandbox_id))
            await asyncio.sleep(0)
        assert engine.status.value == EngineStatus.CLOSED.value
        assert (await waiter).state is SandboxState.KILLED
        assert killed.events()[0].payload["killed_by"] == engine.agent_id
        await engine.close()  # idempotent
        with pytest.raises(Internal, match="closed"):
            await engine.exec_start(sandbox_id, OWNER)
        with pytest.raises(Internal, match="reopened"):
            await engine.open()

    run(body)


def test_engine_without_a_vault_uses_the_data_directory(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))

    async def body() -> None:
        async with Engine(random_source=seeded_random(1), standalone=True) as engine:
            result = await execute(engine, ECHO, input=b"disk")
            assert result.output == b"disk"

    run(body)
    assert (tmp_path / "vault.sqlite3").exists()


def test_the_tier_option_is_checked() -> None:
    with pytest.raises(ValueError, match="tier"):
        Engine(Vault(":memory:"), tier="turbo")

    async def body() -> None:
        async with open_engine(tier="reference") as engine:
            assert (await execute(engine, ECHO, input=b"ref")).output == b"ref"

    run(body)


# ----------------------------------------------------------------------------- cycles


def test_begin_cycle_keeps_only_persistent_sandboxes_and_charges_them() -> None:
    async def body() -> None:
        ledger = Ledger()
        ledger.set_allowance(OWNER, 1000)
        ledger.credit_spark(OWNER, 2 + 10)  # two 1 KiB sandboxes, one kept
        ledger.set_allowance(OTHER, 1000)
        ledger.credit_spark(OTHER, 4)
        async with open_engine(ledger=ledger) as engine:
            kept = await create(
                engine, ECHO_TWICE, memory_quota=1024, tick_budget=10, persistent=True
            )
            poor = await create(
                engine, ECHO_TWICE, owner=OTHER, memory_quota=1024, tick_budget=10, persistent=True
            )
            gone = await create(engine, SHORT, memory_quota=1024, tick_budget=10)
            finished = await create(engine, SHORT, owner=OTHER, memory_quota=1024, tick_budget=10)
            await engine.kill_sandbox(finished, OTHER)
            assert await engine.begin_cycle({OWNER: 500}) == 1
            assert (await engine.sandbox_status(kept, OWNER)).state is SandboxState.READY
            assert (await engine.wait(poor)).state is SandboxState.KILLED
            for removed in (gone, finished):
                with pytest.raises(SandboxNotFound):
                    await engine.wait(removed)
            account = ledger.account(OWNER)
            assert (account.spark, account.ticks_spent, account.tick_allowance) == (0, 0, 500)

    run(body)


def test_agent_id_defaults_from_the_secret() -> None:
    first = Engine(Vault(":memory:"), random_source=seeded_random(3))
    second = Engine(Vault(":memory:"), random_source=seeded_random(3))
    assert isinstance(first.agent_id, AgentId) and first.agent_id == second.agent_id
