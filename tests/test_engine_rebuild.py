"""Applying the journal's records to an empty state reproduces the live state exactly.

Random sessions (create, start, step, deliver, kill, forget, services and their calls,
cycles) run on a live engine with accounting on and a journal in memory; then a new,
empty :class:`EngineState` is given every record of the journal, in order, through
the same ``apply``.  The two states, machines included, must be equal value for value,
on the reference tier and on the fast tier.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.accounting import Ledger, Opening
from kforge.asm import assemble
from kforge.core import AgentId, ForgeError
from kforge.engine import (
    CreateSandbox,
    Endpoint,
    Engine,
    EngineState,
    ManualClock,
    MemoryJournalStore,
    SandboxState,
    Service,
    seeded_random,
)
from kforge.engine.apply import apply, settle
from kforge.engine.projection import events_of
from kforge.fast import FastTier
from kforge.storage import ProgramCache, Vault
from kforge.tiers import TierRunner
from test_engine_services import COUNTER
from test_engine_support import ECHO_TWICE, OWNER, SHORT, TICK_LOOP

OTHER_OWNER = AgentId(b"\x02" * 32)

#: Programs a session picks from: blocking on stdin, halting, running out of ticks,
#: asking a host adapter (the oracle), yielding, faulting.
PROGRAMS = (
    ECHO_TWICE,
    SHORT,
    TICK_LOOP,
    "top: ADD r1, r1, r2\n JMP top\n",
    """
    .data
    query: .byte 1
           .ascii "k"
    .code
        LI r1, query
        LI r2, 2
        LI r5, 64
        SEND 4, r1, r2
        RECV 4, r6, r253, r5
        SEND 0, r253, r6
        HALT
    """,
    "LI r1, 3\n DIV r2, r1, r3\n HALT\n",
)

_create = st.tuples(
    st.just("create"),
    st.integers(0, len(PROGRAMS) - 1),
    st.binary(max_size=6),
    st.booleans(),
    st.sampled_from([OWNER, OTHER_OWNER]),
)
_on_sandbox = st.tuples(st.sampled_from(["start", "step", "kill", "forget"]), st.integers(0, 7))
_deliver = st.tuples(st.just("deliver"), st.integers(0, 7), st.binary(max_size=6))
_service = st.tuples(st.just("service"), st.integers(0, 2))
_call = st.tuples(st.just("call"), st.integers(0, 2), st.binary(max_size=4))
_cycle = st.tuples(st.just("cycle"))
ACTIONS = st.lists(
    st.one_of(_create, _create, _on_sandbox, _on_sandbox, _deliver, _service, _call, _cycle),
    min_size=1,
    max_size=14,
)


@pytest.fixture(scope="module")
def shared_fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False) as tier:
        yield tier


async def _quiet(engine: Engine) -> None:
    """Let the scheduler run until nothing it owns can make progress."""
    for _ in range(10_000):
        busy = any(
            sandbox.scheduled and sandbox.state is SandboxState.RUNNING
            for sandbox in engine.state.sandboxes.values()
        )
        if not busy and not engine.executor.lock.locked():
            return
        await asyncio.sleep(0)
    raise AssertionError("the session did not come to rest")


async def _session(engine: Engine, actions: list[Any]) -> None:
    sandboxes: list[Any] = []
    services: list[Any] = []
    calls: list[asyncio.Future[Any]] = []
    code = [engine.vault.put_program(assemble(text)) for text in PROGRAMS]
    counter = engine.vault.put_program(assemble(COUNTER))
    for action in actions:
        kind = action[0]
        with contextlib.suppress(ForgeError):
            if kind == "create":
                _, program, data, persistent, owner = action
                sandboxes.append(
                    await engine.create_sandbox(
                        CreateSandbox(
                            owner,
                            code[program],
                            65536,
                            3_000,
                            input=data,
                            persistent=persistent,
                            grants=frozenset({4}),
                        )
                    )
                )
            elif kind == "service":
                sandbox = await engine.create_sandbox(
                    CreateSandbox(
                        OWNER, counter, 65536, 10_000, persistent=True, grants=frozenset({3})
                    )
                )
                services.append(
                    await engine.create_service(
                        Service(
                            OWNER,
                            sandbox,
                            b"count",
                            500 + 100 * action[1],
                            True,
                            (Endpoint(b"count", 3),),
                        )
                    )
                )
            elif kind == "call" and services:
                service = services[action[1] % len(services)]
                calls.append(
                    asyncio.ensure_future(engine.call_service(service, b"count", action[2], OWNER))
                )
            elif kind == "cycle":
                await engine.begin_cycle()
            elif sandboxes:
                sandbox = sandboxes[action[1] % len(sandboxes)]
                owner = (
                    engine.state.sandboxes[sandbox].owner
                    if sandbox in engine.state.sandboxes
                    else OWNER
                )
                if kind == "start":
                    await engine.exec_start(sandbox, owner)
                elif kind == "step":
                    await engine.step(sandbox, owner)
                elif kind == "deliver":
                    await engine.deliver(sandbox, 2, action[2], owner)
                elif kind == "kill":
                    await engine.kill_sandbox(sandbox, owner)
                elif kind == "forget":
                    await engine.forget(sandbox, owner)
        await _quiet(engine)
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)


def _replay(engine: Engine, store: MemoryJournalStore, runner: TierRunner) -> EngineState:
    """An empty state given every record of the journal, in order."""
    state = EngineState(ProgramCache(engine.vault), runner, Ledger(), engine.limits.message_limit)
    assert engine.journal is not None
    for record in engine.journal.records():
        apply(state, record)
        state.events += len(events_of(record))
    settle(state)
    return state


def _check(tier: str, fast_tier: FastTier | None, actions: list[Any]) -> None:
    async def body() -> None:
        store = MemoryJournalStore()
        runner = TierRunner(tier, fast_tier=fast_tier)
        ledger = Ledger(opening=Opening(tick_allowance=40_000, spark=400))
        engine = Engine(
            Vault(":memory:"),
            ledger=ledger,
            journal_store=store,
            tier=runner,
            clock=ManualClock(),
            random_source=seeded_random(11),
            oracle={b"k": b"answer"},
        )
        await engine.open()
        try:
            await _session(engine, actions)
            engine.ctx.transitions.commit()  # the ledger's last changes, the lazy slices
            live = engine.state.snapshot()
            rebuilt = _replay(engine, store, TierRunner(tier, fast_tier=fast_tier))
            assert rebuilt.snapshot() == live
            assert rebuilt.events == engine.bus.published
        finally:
            engine.scheduler.stop()
            await engine.close()
            engine.vault.close()

    asyncio.run(body())


_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@_SETTINGS
@given(actions=ACTIONS)
def test_records_rebuild_the_live_state_on_the_reference_tier(actions: list[Any]) -> None:
    _check("reference", None, actions)


@_SETTINGS
@given(actions=ACTIONS)
def test_records_rebuild_the_live_state_on_the_fast_tier(
    shared_fast_tier: FastTier, actions: list[Any]
) -> None:
    _check("fast", shared_fast_tier, actions)
