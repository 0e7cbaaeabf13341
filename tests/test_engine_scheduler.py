"""The scheduler: many sandboxes at once, fairness, TICK, and determinism run after run."""

from __future__ import annotations

import asyncio
import itertools
import struct
import time

from kforge.asm import assemble
from kforge.core import AgentId, EventKind, Hash256
from kforge.engine import CreateSandbox, EngineLimits, ManualClock, SandboxState, seeded_random
from kforge.host import AgoraOp, MintOp, OracleOp, VaultOp
from kforge.isa import FaultCode
from kforge.machine import Machine, MachineState
from kforge.tiers import TierRunner
from test_engine_support import (
    ECHO_TWICE,
    LOOP,
    OTHER,
    OWNER,
    SHORT,
    SUM_TO_N,
    TICK_LOOP,
    create,
    execute,
    host_client,
    open_engine,
    put,
    run,
    sum_input,
    sum_output,
)


def test_a_thousand_sandboxes_run_concurrently_to_correct_results() -> None:
    count = 1000
    owners = [AgentId(bytes([index % 10 + 1]) * 32) for index in range(count)]
    limits = EngineLimits(max_sandboxes=count, max_sandboxes_per_owner=count, slice_ticks=50)

    async def body() -> None:
        slices: list[Hash256] = []
        async with open_engine(
            limits=limits, on_slice=lambda sid, st, t: slices.append(sid)
        ) as engine:
            code = await put(engine, SUM_TO_N)
            ids = []
            for index in range(count):
                request = CreateSandbox(
                    owners[index], code, 1024, 100_000, input=sum_input(index % 97 + 1)
                )
                ids.append(await engine.create_sandbox(request))
            for index, sandbox_id in enumerate(ids):
                await engine.exec_start(sandbox_id, owners[index])
            assert len(engine.scheduler) == count  # all queued at once
            results = await asyncio.gather(
                *(engine.wait(sandbox_id, timeout=60) for sandbox_id in ids)
            )
            for index, result in enumerate(results):
                assert result.state is SandboxState.HALTED
                assert result.output == sum_output(index % 97 + 1)
            # They really ran interleaved: the first sandbox to finish did not
            # run before all others had their first slice.
            assert len(set(slices[:count])) == count
            assert len(slices) > count

    run(body)


def test_ten_thousand_sandboxes_are_created() -> None:
    count = 10_000
    limits = EngineLimits(max_sandboxes=count, max_sandboxes_per_owner=count)

    async def body() -> None:
        async with open_engine(limits=limits, event_queue_size=16) as engine:
            created = engine.bus.subscribe([EventKind.SANDBOX_CREATED], maxsize=count)
            code = await put(engine, SHORT)
            started = time.perf_counter()
            ids = {
                await engine.create_sandbox(CreateSandbox(OWNER, code, 1024, 100))
                for _ in range(count)
            }
            elapsed = time.perf_counter() - started
            assert len(ids) == count
            assert len(created.events()) == count
            infos = await engine.list_sandboxes(owner=OWNER)
            assert len(infos) == count and all(info.state is SandboxState.READY for info in infos)
            assert elapsed < 20, f"{count} creations took {elapsed:.1f} s"

    run(body)


def test_a_looping_sandbox_delays_a_short_one_by_at_most_one_slice() -> None:
    async def body() -> None:
        slices: list[Hash256] = []
        async with open_engine(
            limits=EngineLimits(slice_ticks=1000), on_slice=lambda sid, st, t: slices.append(sid)
        ) as engine:
            loopers = [await create(engine, LOOP, tick_budget=10**12) for _ in range(2)]
            for looper in loopers:
                await engine.exec_start(looper, OWNER)
            while len(slices) < 6:
                await asyncio.sleep(0)
            short = await create(engine, SHORT, owner=OTHER)
            await engine.exec_start(short, OTHER)
            mark = len(slices)
            result = await engine.wait(short, timeout=10)
            assert result.state is SandboxState.HALTED
            before_short = slices[mark : slices.index(short, mark)]
            assert len(before_short) <= len(loopers)  # one slice of each sandbox already queued
            for looper in loopers:
                await engine.kill_sandbox(looper, OWNER)

    run(body)


def test_a_short_sandbox_behind_one_looper_waits_at_most_one_slice() -> None:
    async def body() -> None:
        slices: list[Hash256] = []
        async with open_engine(
            limits=EngineLimits(slice_ticks=5000), on_slice=lambda sid, st, t: slices.append(sid)
        ) as engine:
            looper = await create(engine, LOOP, tick_budget=10**12)
            await engine.exec_start(looper, OWNER)
            for _ in range(5):
                mark = len(slices)
                short = await create(engine, SHORT)
                await engine.exec_start(short, OWNER)
                await engine.wait(short, timeout=10)
                assert slices[mark:].index(short) <= 1
            assert (await engine.sandbox_status(looper, OWNER)).state is SandboxState.RUNNING

    run(body)


def test_tick_ends_a_slice_when_another_sandbox_waits_and_costs_nothing_more_alone() -> None:
    async def body() -> None:
        slices: list[tuple[Hash256, int]] = []
        async with open_engine(on_slice=lambda sid, st, used: slices.append((sid, used))) as engine:
            first = await create(engine, TICK_LOOP, tick_budget=20)
            second = await create(engine, TICK_LOOP, tick_budget=20)
            await engine.exec_start(first, OWNER)
            await engine.exec_start(second, OWNER)
            for sandbox_id in (first, second):
                result = await engine.wait(sandbox_id, timeout=10)
                assert result.fault is FaultCode.OUT_OF_TICKS
            ticks = [used for sid, used in slices if sid == first]
            assert ticks[:4] == [1, 3, 5, 7]  # each slice ends right after its TICK
            slices.clear()
            alone = await create(engine, TICK_LOOP, tick_budget=20)
            await engine.exec_start(alone, OWNER)
            assert (await engine.wait(alone, timeout=10)).fault is FaultCode.OUT_OF_TICKS
            assert slices == [(alone, 20)]  # nobody waiting: TICKs do not end the slice

    run(body)


def test_slices_never_exceed_the_quantum_while_others_wait() -> None:
    async def body() -> None:
        slices: list[tuple[Hash256, int]] = []
        async with open_engine(
            limits=EngineLimits(slice_ticks=100),
            on_slice=lambda sid, st, used: slices.append((sid, used)),
        ) as engine:
            first = await create(engine, LOOP, tick_budget=1000)
            second = await create(engine, LOOP, tick_budget=1000)
            await engine.exec_start(first, OWNER)
            await engine.exec_start(second, OWNER)
            await engine.wait(first, timeout=10)
            await engine.wait(second, timeout=10)
            ticks = [used for sid, used in slices if sid == first]
            assert ticks == [*range(100, 1001, 100), 1000]  # the last slice faults OUT_OF_TICKS

    run(body)


def test_a_lone_sandbox_gets_longer_slices_with_the_same_result() -> None:
    async def body() -> None:
        ticks: list[int] = []
        async with open_engine(
            limits=EngineLimits(slice_ticks=100), on_slice=lambda sid, st, used: ticks.append(used)
        ) as engine:
            result = await execute(engine, SUM_TO_N, input=sum_input(20_000), tick_budget=10**6)
            assert result.output == sum_output(20_000)
            gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
            assert max(gaps) > 100  # alone, its quantum grew past the fair one

    run(body)


def test_the_event_loop_stays_responsive_while_sandboxes_loop() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(slice_ticks=2000)) as engine:
            for _ in range(4):
                looper = await create(engine, LOOP, tick_budget=10**12)
                await engine.exec_start(looper, OWNER)
            gaps = []
            for _ in range(20):
                started = time.perf_counter()
                await asyncio.sleep(0)
                gaps.append(time.perf_counter() - started)
            assert max(gaps) < 0.5

    run(body)


# ----------------------------------------------------------------------------- determinism


async def _scenario(seed: int) -> tuple[list[bytes], list[object], list[object]]:
    clock = ManualClock()
    async with open_engine(
        random_source=seeded_random(seed),
        clock=clock,
        oracle={b"answer": b"42"},
        limits=EngineLimits(slice_ticks=7),
    ) as engine:
        engine.ledger.credit_spark(OWNER, 100)
        events = engine.bus.subscribe(maxsize=100_000)
        blob_id = engine.vault.put(b"blob")
        topic = struct.pack("<H", 4) + b"news"
        clients = {
            3: [bytes([VaultOp.GET]) + blob_id.raw, bytes([VaultOp.PUT]) + b"new"],
            4: [bytes([OracleOp.QUERY]) + b"answer", bytes([OracleOp.QUERY]) + b"none"],
            5: [
                bytes([AgoraOp.PUBLISH]) + topic + b"hello",
                bytes([AgoraOp.READ]) + topic + bytes(8),
            ],
            6: [
                bytes([MintOp.TRANSFER]) + OTHER.raw + struct.pack("<Q", 7),
                bytes([MintOp.BALANCE]),
            ],
        }
        ids = []
        for channel, requests in clients.items():
            ids.append(
                await create(engine, host_client(channel, requests), grants=frozenset({channel}))
            )
        ids.append(await create(engine, SUM_TO_N, input=sum_input(30)))
        echo = await create(engine, ECHO_TWICE, input=b"a")
        looper = await create(engine, LOOP, tick_budget=10**9)
        ids += [echo, looper]
        for sandbox_id in ids:
            await engine.exec_start(sandbox_id, OWNER)
        while (await engine.sandbox_status(echo, OWNER)).state is not SandboxState.BLOCKED:
            await asyncio.sleep(0)
        await engine.deliver(echo, 2, b"b", OWNER)
        await engine.kill_sandbox(looper, OWNER)
        results: list[object] = [await engine.wait(sandbox_id, timeout=30) for sandbox_id in ids]
        logs: list[object] = [await engine.io_log(sandbox_id, OWNER) for sandbox_id in ids]
        return [event.encode() for event in events.events()], results, logs


def test_same_requests_give_the_same_events_ids_and_results_run_after_run() -> None:
    first = run(lambda: _scenario(11))
    for _ in range(3):
        assert run(lambda: _scenario(11)) == first
    events, results, _ = first
    assert len(events) > 20
    assert all(getattr(result, "state", None) is not None for result in results)
    other_events, other_results, _ = run(lambda: _scenario(12))
    assert other_events != events  # other ids...
    assert [getattr(r, "output", None) for r in other_results] == [
        getattr(r, "output", None) for r in results
    ]  # ...same outputs


def test_tiers_agree_through_the_engine(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    import pytest

    if importlib.util.find_spec("kforge.fast") is None:
        pytest.skip("the fast tier is not there yet")
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))

    async def outcome(tier: str) -> tuple[list[bytes], list[object]]:
        async with open_engine(
            tier=tier, clock=ManualClock(), limits=EngineLimits(slice_ticks=100)
        ) as engine:
            events = engine.bus.subscribe()
            ids = [await create(engine, SUM_TO_N, input=sum_input(n)) for n in (10, 500, 3000)]
            ids.append(await create(engine, TICK_LOOP, tick_budget=5000))
            ids.append(await create(engine, LOOP, tick_budget=12_345))
            for sandbox_id in ids:
                await engine.exec_start(sandbox_id, OWNER)
            results: list[object] = [
                await engine.wait(sandbox_id, timeout=60) for sandbox_id in ids
            ]
            return [event.encode() for event in events.events()], results

    reference = run(lambda: outcome("reference"))
    assert run(lambda: outcome("fast")) == reference
    assert run(lambda: outcome("auto")) == reference


def test_a_failing_tier_kills_only_its_sandbox_and_a_failing_observer_is_ignored() -> None:
    def observer(sandbox_id: Hash256, state: SandboxState, ticks: int) -> None:
        raise RuntimeError("observer bug")

    broken_program = assemble("LI r1, 43\nHALT")

    class BrokenTier(TierRunner):
        def run(
            self, machine: Machine, max_ticks: int | None = None, *, yield_on_tick: bool = False
        ) -> MachineState:
            if machine.program.program_id == broken_program.program_id:
                raise RuntimeError("tier bug")
            return super().run(machine, max_ticks, yield_on_tick=yield_on_tick)

    async def body() -> None:
        async with open_engine(on_slice=observer, tier=BrokenTier("reference")) as engine:
            healthy = await create(engine, SHORT)
            broken = await engine.create_sandbox(
                CreateSandbox(OWNER, engine.vault.put_program(broken_program), 4096, 100)
            )
            await engine.exec_start(broken, OWNER)
            await engine.exec_start(healthy, OWNER)
            failed = await engine.wait(broken, timeout=10)
            assert failed.state is SandboxState.KILLED
            assert (await engine.wait(healthy, timeout=10)).state is SandboxState.HALTED

    run(body)
