"""Nothing lives forever, and no agent takes a pool from the others.

The attacks: sandboxes created and never started held the engine-wide memory
pool for good (16 requests and every other agent got 422); ``deadline_ms`` =
2^64-1 was accepted; the rate limiter kept ~470 bytes for every agent it ever
saw; an agent with many sandboxes took that many times the CPU of an agent
with one.
"""

from __future__ import annotations

import asyncio

import pytest

from kforge.core import AgentId, EventKind, Hash256, InvalidRequest
from kforge.engine import EngineLimits, ManualClock, SandboxState
from kforge.engine.policy import RateLimited, RateLimiter
from kforge.server import AuthConfig, Authenticator, ServerConfig
from test_engine_support import (
    ECHO,
    ECHO_TWICE,
    LOOP,
    OTHER,
    OWNER,
    SHORT,
    create,
    open_engine,
    run,
)
from test_server_support import Agent, running_server


def test_a_deadline_over_the_cap_is_refused() -> None:
    """The attack: ``deadline_ms`` = 2^64-1 was accepted."""

    async def body() -> None:
        async with open_engine() as engine:
            with pytest.raises(InvalidRequest) as refused:
                await create(engine, SHORT, deadline_ms=(1 << 64) - 1)
            assert refused.value.field == "deadline_ms"
            limit_ms = round(engine.limits.max_deadline * 1000)
            await create(engine, SHORT, deadline_ms=limit_ms)
            with pytest.raises(InvalidRequest):
                await create(engine, SHORT, deadline_ms=limit_ms + 1)

    run(body)


def test_a_sandbox_never_started_expires_and_gives_its_memory_back() -> None:
    """The attack: unstarted sandboxes held the memory pool for good."""

    async def body() -> None:
        clock = ManualClock()
        limits = EngineLimits(
            max_total_memory=4 << 20, max_memory_per_owner=4 << 20, idle_timeout=60
        )
        async with open_engine(clock=clock, limits=limits) as engine:
            faulted = engine.bus.subscribe([EventKind.SANDBOX_FAULTED])
            held = [await create(engine, SHORT, memory_quota=1 << 20) for _ in range(4)]
            with pytest.raises(Exception, match="memory"):
                await create(engine, SHORT, owner=OTHER, memory_quota=1 << 20)
            clock.advance(59)
            assert engine.expire_deadlines() == []
            clock.advance(2)
            assert sorted(engine.expire_deadlines()) == sorted(held)
            for sandbox in held:
                result = await engine.wait(sandbox, timeout=1)
                assert result.state is SandboxState.DEADLINE_EXCEEDED and result.ticks_used == 0
            assert [event.payload["fault_name"] for event in faulted.events()] == [
                "DEADLINE_EXCEEDED"
            ] * 4
            assert engine.state.live_memory == 0
            await create(engine, SHORT, owner=OTHER, memory_quota=1 << 20)

    run(body)


def test_stepping_keeps_a_sandbox_alive_and_starting_hands_it_to_its_deadline() -> None:
    async def body() -> None:
        clock = ManualClock()
        limits = EngineLimits(idle_timeout=60, deadline=10)
        async with open_engine(clock=clock, limits=limits) as engine:
            stepped = await create(engine, ECHO_TWICE)
            started = await create(engine, ECHO_TWICE)
            clock.advance(50)
            await engine.step(stepped, OWNER)
            await engine.exec_start(started, OWNER)
            clock.advance(20)  # 70 s after creation: the step counts, the start's deadline passed
            assert engine.expire_deadlines() == [started]
            assert (await engine.sandbox_status(stepped, OWNER)).state.is_live
            clock.advance(41)
            assert engine.expire_deadlines() == [stepped]

    run(body)


def test_a_stopped_sandbox_is_forgotten_when_its_retention_is_over() -> None:
    async def body() -> None:
        clock = ManualClock()
        async with open_engine(clock=clock, limits=EngineLimits(stopped_retention=100)) as engine:
            sandbox = await create(engine, ECHO, input=b"x")
            await engine.exec_start(sandbox, OWNER)
            await engine.wait(sandbox, timeout=5)
            clock.advance(99)
            engine.expire_deadlines()
            assert (await engine.output(sandbox, OWNER)) == b"x"
            clock.advance(2)
            assert engine.expire_deadlines() == [sandbox]
            assert engine.state.find(sandbox) is None

    run(body)


def test_an_owner_keeps_at_most_its_share_of_stopped_sandboxes() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(max_stopped_per_owner=3)) as engine:
            stopped = []
            for _ in range(5):
                sandbox = await create(engine, SHORT)
                await engine.kill_sandbox(sandbox, OWNER)
                stopped.append(sandbox)
            kept = [s for s in stopped if engine.state.find(s) is not None]
            assert kept == stopped[2:]
            other = await create(engine, SHORT, owner=OTHER)
            await engine.kill_sandbox(other, OTHER)
            assert engine.state.find(other) is not None and engine.state.stopped_count(OWNER) == 3

    run(body)


def test_each_owner_gets_an_equal_share_of_the_scheduler() -> None:
    """The attack: eight looping sandboxes of one agent took eight slices for each one of
    another agent's."""

    async def body() -> None:
        slices: list[Hash256] = []
        limits = EngineLimits(slice_ticks=1000)
        async with open_engine(limits=limits, on_slice=lambda s, st, t: slices.append(s)) as e:
            hog = [await create(e, LOOP, tick_budget=10**12) for _ in range(8)]
            mine = await create(e, LOOP, owner=OTHER, tick_budget=10**12)
            for sandbox in hog:
                await e.exec_start(sandbox, OWNER)
            await e.exec_start(mine, OTHER)
            while len(slices) < 200:
                await asyncio.sleep(0)
            window = slices[20:200]
            assert window.count(mine) >= len(window) // 2 - 1
            for sandbox in hog:
                await e.kill_sandbox(sandbox, OWNER)
            await e.kill_sandbox(mine, OTHER)

    run(body)


# ----------------------------------------------------------------- per-agent records


def test_the_rate_limiter_forgets_agents_whose_bucket_filled_up_again() -> None:
    """The attack: ~470 bytes kept for every agent ever seen."""
    now = [0.0]
    limiter = RateLimiter(10.0, 5, lambda: now[0], max_agents=1000)
    for index in range(500):
        limiter.take(AgentId(index.to_bytes(32, "big")))
    assert len(limiter) == 500
    now[0] += 1.0  # every bucket has refilled (5 tokens at 10 a second)
    for index in range(500, 1000):
        limiter.take(AgentId(index.to_bytes(32, "big")))
    assert len(limiter) < 600


def test_the_rate_limiter_keeps_at_most_max_agents_and_still_limits() -> None:
    now = [0.0]
    limiter = RateLimiter(1.0, 2, lambda: now[0], max_agents=100)
    for index in range(1000):
        limiter.take(AgentId(index.to_bytes(32, "big")))
    assert len(limiter) == 100
    busy = AgentId(b"\x09" * 32)
    limiter.take(busy)
    limiter.take(busy)
    with pytest.raises(RateLimited) as refused:
        limiter.take(busy)
    assert 0 < refused.value.retry_after <= 1


def test_one_agent_cannot_fill_the_replay_window() -> None:
    """Signed requests' nonces are remembered per agent up to a share of the window, so one
    agent's flood is refused (429) while another agent's signed requests still pass."""
    config = ServerConfig(
        auth=AuthConfig(
            max_nonces=100, max_nonces_per_agent=10, rate_per_second=10_000, rate_burst=10_000
        )
    )
    with running_server(config) as live:
        flood, honest = Agent(live.base_url), Agent(live.base_url)
        statuses = [flood.request("GET", "/v1/whoami").status_code for _ in range(12)]
        assert statuses == [200] * 10 + [429] * 2
        assert honest.request("GET", "/v1/whoami").status_code == 200
        flood.close()
        honest.close()


def test_the_authenticators_window_forgets_old_nonces_and_their_counts() -> None:
    clock = [1_000_000]
    auth = Authenticator(AuthConfig(max_nonces_per_agent=2), time_ms=lambda: clock[0])
    agent = AgentId(b"\x05" * 32)
    auth._remember_nonce(agent, "a" * 16, clock[0])
    auth._remember_nonce(agent, "b" * 16, clock[0])
    clock[0] += 10 * auth.config.clock_skew_ms
    auth._remember_nonce(agent, "c" * 16, clock[0])
    assert auth._nonces_by_agent == {agent: 1}
