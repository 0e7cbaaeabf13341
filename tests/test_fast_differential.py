"""The fast tier agrees with the reference interpreter bit for bit.

Hypothesis builds programs from every opcode (and unknown ones), with faults
inside blocks, jumps into the middle of blocks, computed returns, channels,
stack edges and addresses at the quota edge; both tiers run them and their
snapshots must be equal: after whole runs, at every tick budget that cuts a
small program, slice by slice with ``max_ticks`` and ``yield_on_tick``, and
with slices alternating between tiers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.fast import FastTier
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from test_fast_support import (
    assert_same,
    assert_slices_agree,
    assert_whole_runs_agree,
    drive,
    fast_tiers,
    load,
    load_options,
    programs,
    reference_runner,
    tier_runner,
)

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
deliveries = st.lists(st.tuples(st.sampled_from([2, 3, 7]), st.binary(max_size=12)), max_size=4)


REGION_SIZES = (1, 2, 5, 128)
region_sizes = st.sampled_from(REGION_SIZES)


@pytest.fixture(scope="module")
def tiers() -> Iterator[dict[int, FastTier]]:
    """Fast tiers cutting programs into regions of 1, 2, 5 and 128 blocks (one wasm function each)."""
    with fast_tiers(REGION_SIZES) as made:
        yield made


def _pair(
    program: ForgeProgram, options: dict[str, Any], budget: int
) -> tuple[Machine, Machine] | None:
    reference = load(program, options, budget)
    fast = load(program, options, budget)
    return None if reference is None or fast is None else (reference, fast)


@SETTINGS
@given(programs(), load_options(), st.one_of(st.integers(0, 300), st.just(1_000_000)), region_sizes)
def test_whole_runs_agree(
    tiers: dict[int, FastTier],
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    regions: int,
) -> None:
    assert_whole_runs_agree(tiers[regions], program, options, budget)


@settings(SETTINGS, max_examples=60)
@given(programs(max_items=10), load_options(), region_sizes)
def test_every_tick_budget_cut_agrees(
    tiers: dict[int, FastTier], program: ForgeProgram, options: dict[str, Any], regions: int
) -> None:
    fast_tier = tiers[regions]
    probe = load(program, options, 400)
    if probe is None:
        return
    probe.run()
    for budget in range(probe.ticks_used + 2):
        reference, fast = _pair(program, options, budget)  # type: ignore[misc]
        reference.run()
        fast_tier.run(fast, tier="fast")
        assert_same(reference, fast, f"budget {budget}")


def _assert_slices_agree(
    fast_tier: FastTier,
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    max_ticks: int | None,
    yield_on_tick: bool,
    messages: list[tuple[int, bytes]],
) -> None:
    """Run both tiers slice by slice with the same deliveries; every slice must agree."""
    pair = _pair(program, options, budget)
    if pair is None:
        return
    assert_slices_agree(
        fast_tier,
        *pair,
        max_ticks=max_ticks,
        yield_on_tick=yield_on_tick,
        deliveries=messages,
    )


@SETTINGS
@given(
    programs(),
    load_options(),
    st.integers(0, 2000),
    st.one_of(st.none(), st.integers(0, 9), st.just(40)),
    st.booleans(),
    deliveries,
    region_sizes,
)
def test_slices_agree(
    tiers: dict[int, FastTier],
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    max_ticks: int | None,
    yield_on_tick: bool,
    messages: list[tuple[int, bytes]],
    regions: int,
) -> None:
    _assert_slices_agree(
        tiers[regions], program, options, budget, max_ticks, yield_on_tick, messages
    )


@SETTINGS
@given(
    programs(),
    load_options(),
    st.integers(0, 2000),
    st.integers(1, 9),
    st.booleans(),
    st.lists(st.sampled_from(["reference", "fast", "auto"]), min_size=1, max_size=8),
    region_sizes,
)
def test_slices_alternating_between_tiers_agree(
    tiers: dict[int, FastTier],
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    max_ticks: int,
    yield_on_tick: bool,
    tier_names: list[str],
    regions: int,
) -> None:
    pair = _pair(program, options, budget)
    if pair is None:
        return
    reference, fast = pair
    fast_tier = tiers[regions]
    for index in range(40):
        tier = tier_names[index % len(tier_names)]
        reference.run(max_ticks, yield_on_tick=yield_on_tick)
        fast_tier.run(fast, tier=tier, max_ticks=max_ticks, yield_on_tick=yield_on_tick)  # type: ignore[arg-type]
        assert_same(reference, fast, f"slice {index} on {tier}")
        if reference.state is not MachineState.RUNNING:
            break


@SETTINGS
@given(
    programs(),
    load_options(),
    st.integers(0, 3000),
    st.one_of(st.none(), st.integers(1, 30)),
    st.booleans(),
    st.integers(1, 7),
    deliveries,
)
def test_auto_tier_chunks_agree(
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    max_ticks: int | None,
    yield_on_tick: bool,
    chunk_ticks: int,
    messages: list[tuple[int, bytes]],
) -> None:
    """Tiny reference chunks and a background compile that lands at any point."""
    pair = _pair(program, options, budget)
    if pair is None:
        return
    reference, fast = pair
    arguments: dict[str, Any] = {
        "max_ticks": max_ticks,
        "yield_on_tick": yield_on_tick,
        "deliveries": messages,
    }
    expected = drive(reference, reference_runner, **arguments)
    with FastTier(disk_cache=False, warmup_ticks=chunk_ticks, chunk_ticks=chunk_ticks) as auto:
        actual = drive(fast, tier_runner(auto, "auto"), **arguments)
    assert expected == actual
    assert_same(reference, fast)


@SETTINGS
@given(programs(), load_options(), st.integers(0, 3000), st.integers(1, 5), st.booleans())
def test_auto_tier_that_never_compiles_agrees(
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    chunk_ticks: int,
    yield_on_tick: bool,
) -> None:
    """Pure reference chunks: chunk ends must be invisible, TICK yields included."""
    pair = _pair(program, options, budget)
    if pair is None:
        return
    reference, fast = pair
    arguments: dict[str, Any] = {
        "max_ticks": None,
        "yield_on_tick": yield_on_tick,
        "deliveries": [],
    }
    expected = drive(reference, reference_runner, **arguments)
    with FastTier(disk_cache=False, warmup_ticks=1 << 62, chunk_ticks=chunk_ticks) as auto:
        actual = drive(fast, tier_runner(auto, "auto"), **arguments)
    assert expected == actual


@pytest.mark.slow
@settings(SETTINGS, max_examples=4000)
@given(
    programs(max_items=40),
    load_options(),
    st.integers(0, 5000),
    st.one_of(st.none(), st.integers(1, 50)),
    st.booleans(),
    deliveries,
    region_sizes,
)
def test_deep_slices_agree(
    tiers: dict[int, FastTier],
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    max_ticks: int | None,
    yield_on_tick: bool,
    messages: list[tuple[int, bytes]],
    regions: int,
) -> None:
    """The slices test with longer programs and many more examples (``make test-all``)."""
    _assert_slices_agree(
        tiers[regions], program, options, budget, max_ticks, yield_on_tick, messages
    )
