"""Replay reproduces a recorded run bit for bit, on both tiers.

Original runs are driven in slices of random sizes with messages delivered
between slices (at whatever tick the machine reached, blocked or not); the
record of creation parameters plus the machine's own delivery log must
replay to an equal machine on the reference interpreter and on the fast tier.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.asm import assemble
from kforge.core import ForgeError, MemoryQuotaExceeded
from kforge.fast import FastTier
from kforge.machine import Delivery, Machine, MachineState
from kforge.program import ForgeProgram
from kforge.proofs.replay import RecordFormatError, ReplayDivergence, RunRecord, replay
from kforge.tiers import TierRunner
from test_fast_support import load_options, programs

SETTINGS = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
inbound = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from([2, 3, 7]), st.binary(max_size=12)),
    max_size=6,
)

ECHO = """
    LI r2, 64
again:
    RECV 3, r1, r253, r2
    SEND 0, r253, r1
    JMP again
"""


@pytest.fixture(scope="module")
def fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False, max_programs=4096) as tier:
        yield tier


def record_run(
    program: ForgeProgram, options: dict[str, Any], budget: int, plan: list[tuple[int, int, bytes]]
) -> tuple[Machine, RunRecord] | None:
    """Run ``program`` in slices, delivering ``plan`` messages between them; None if it cannot load."""
    record = RunRecord.create(program, tick_budget=budget, **options)
    try:
        machine = record.load(program)
    except MemoryQuotaExceeded:
        return None
    for slice_ticks, channel, data in plan:
        machine.run(slice_ticks)
        # A final machine or an ungranted channel: the host could not deliver.
        with contextlib.suppress(ForgeError):
            machine.deliver(channel, data)
    machine.run()
    return machine, record.with_deliveries(machine.deliveries)


@SETTINGS
@given(programs(), load_options(), st.integers(0, 400), inbound)
def test_replay_equals_original_on_both_tiers(
    fast_tier: FastTier,
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    plan: list[tuple[int, int, bytes]],
) -> None:
    recorded = record_run(program, options, budget, plan)
    if recorded is None:
        return
    original, record = recorded
    for tier in ("reference", "fast"):
        again = replay(program, record, tier=TierRunner(tier, fast_tier=fast_tier))
        assert again.snapshot() == original.snapshot(), tier
        assert again.deliveries == original.deliveries, tier


@SETTINGS
@given(programs(max_items=10), load_options(), inbound)
def test_record_bytes_round_trip(
    program: ForgeProgram, options: dict[str, Any], plan: list[tuple[int, int, bytes]]
) -> None:
    record = RunRecord.create(
        program, deliveries=[Delivery(t, ch, d) for t, ch, d in plan], **options
    )
    again = RunRecord.from_bytes(record.to_bytes())
    assert again == record
    assert again.record_hash == record.record_hash


def test_delivery_while_blocked_is_replayed_at_its_tick() -> None:
    program = assemble(ECHO, "echo.fasm")
    machine = Machine.load(program, grants=[3])
    assert machine.run() is MachineState.BLOCKED
    machine.deliver(3, b"one")
    machine.run(2)  # stops mid-way: RUNNING, then a delivery before the next RECV
    machine.deliver(3, b"two")
    assert machine.run() is MachineState.BLOCKED
    record = RunRecord.create(program, grants=[3]).with_deliveries(machine.deliveries)
    assert [d.ticks_used for d in record.deliveries] == [1, 4]
    again = replay(program, record)
    assert again.snapshot() == machine.snapshot()
    assert bytes(again.stdout) == b"onetwo"


def test_replay_until_stops_at_first_boundary_past_tick() -> None:
    program = assemble("LI r1, 1\nMUL r1, r1, r1\nMUL r1, r1, r1\nHALT\n", "m.fasm")
    record = RunRecord.create(program)
    machine = replay(program, record, until_ticks=2)
    assert machine.ticks_used == 3 and machine.state is MachineState.RUNNING


def test_replay_of_another_program_is_refused() -> None:
    program = assemble("HALT\n", "a.fasm")
    other = assemble("NOP\nHALT\n", "b.fasm")
    with pytest.raises(RecordFormatError, match="record is for program"):
        replay(other, RunRecord.create(program))


def test_log_the_run_cannot_reach_is_a_divergence() -> None:
    program = assemble(ECHO, "echo.fasm")
    record = RunRecord.create(program, grants=[3], deliveries=[Delivery(50, 3, b"x")])
    with pytest.raises(ReplayDivergence, match="cannot reach delivery logged at tick 50") as info:
        replay(program, record)
    assert info.value.ticks_used == 1 and info.value.state is MachineState.BLOCKED


def test_log_after_halt_is_a_divergence() -> None:
    program = assemble("NOP\nHALT\n", "h.fasm")
    record = RunRecord.create(program, grants=[3], deliveries=[Delivery(2, 3, b"late")])
    with pytest.raises(ReplayDivergence, match="stopped before delivery"):
        replay(program, record)


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\xc1",
        b"\x90",
        b"\x99" + b"\x00" * 9,
        RunRecord.create(assemble("HALT\n", "a.fasm")).to_bytes()[:-1],
    ],
)
def test_malformed_record_bytes_are_a_typed_error(blob: bytes) -> None:
    with pytest.raises(RecordFormatError):
        RunRecord.from_bytes(blob)
