"""A machine stays bound to its wasm instance between fast slices: exact, independent, freed."""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Iterator

import pytest

from kforge.asm import assemble
from kforge.fast import FastTier, is_bound, unbind
from kforge.fast import runtime as runtime_module
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from kforge.proofs import state_hash
from kforge.proofs.snapshot import checkpoint, restore

# Receive 8 bytes, fold them into r5, write 100 words of memory, echo the message to
# stdout, touch the stack, yield; forever.
ECHO = """
    LI r1, 8
    LI r7, 4096
    LI r8, 1
    LI r9, 800
loop:
    RECV 2, r3, r7, r1
    LOADW r4, r7, 0
    ADD r5, r5, r4
    LI r10, 0
inner:
    STOREW r5, r10, 8192
    ADD r5, r5, r8
    ADD r10, r10, r1
    JLT r10, r9, inner
    SEND 0, r7, r1
    PUSH r5
    POP r11
    TICK
    JMP loop
"""


@pytest.fixture(scope="module")
def fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False) as tier:
        yield tier


@pytest.fixture(scope="module")
def echo() -> ForgeProgram:
    return assemble(ECHO, "echo.fasm")


def _load(program: ForgeProgram, **options: int) -> Machine:
    return Machine.load(program, tick_budget=10**9, input=b"12345678", **options)


def _bound_mid_run(fast_tier: FastTier, program: ForgeProgram) -> Machine:
    machine = _load(program)
    fast_tier.run(machine, tier="fast", max_ticks=200)
    assert machine.state is MachineState.RUNNING and is_bound(machine)
    return machine


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("quota", [65536, (2 << 20) + 24])
def test_many_small_slices_mixed_with_reference_steps_and_deliveries_stay_exact(
    fast_tier: FastTier, echo: ForgeProgram, seed: int, quota: int
) -> None:
    rng = random.Random(seed)
    reference, mixed = _load(echo, memory_quota=quota), _load(echo, memory_quota=quota)
    for round_ in range(250):
        action = rng.random()
        if action < 0.45:
            ticks = rng.choice([0, 1, 2, 3, 7, 50, 400, None])
            reference.run(ticks, yield_on_tick=ticks is None)
            fast_tier.run(mixed, tier="fast", max_ticks=ticks, yield_on_tick=ticks is None)
        elif action < 0.65:
            for _ in range(rng.randrange(1, 6)):
                reference.step()
                mixed.step()
        elif action < 0.75:
            ticks = rng.randrange(1, 300)
            reference.run(ticks)
            mixed.run(ticks)  # the reference interpreter on the bound memory
        elif action < 0.85:
            if not reference.state.is_final:
                data = rng.randbytes(rng.choice([0, 3, 8, 12]))
                reference.deliver(2, data)
                mixed.deliver(2, data)
        elif action < 0.9:
            mixed = mixed.copy()  # a copy of a bound machine goes on alone
        elif action < 0.95:
            mixed = restore(checkpoint(mixed))
        else:
            unbind(mixed)
        assert mixed.snapshot() == reference.snapshot(), f"round {round_}"
        assert mixed.deliveries == reference.deliveries
        assert len(mixed.memory) == quota
    assert state_hash(mixed) == state_hash(reference)


def test_copy_snapshot_and_checkpoint_of_a_bound_machine_are_independent(
    fast_tier: FastTier, echo: ForgeProgram
) -> None:
    machine = _bound_mid_run(fast_tier, echo)
    twin = machine.copy()
    seen = machine.snapshot()
    blob = checkpoint(machine)
    assert twin.tier_state is None and not is_bound(twin)
    assert isinstance(twin.memory, bytearray) and twin.snapshot() == seen

    for _ in range(5):  # the original moves on: memory, registers, output change
        machine.deliver(2, b"abcdefgh")
        fast_tier.run(machine, tier="fast", yield_on_tick=True)
    assert machine.snapshot() != seen
    assert twin.snapshot() == seen and restore(blob).snapshot() == seen
    assert seen.memory == bytes(twin.memory)

    # The twin runs on an instance of its own; the original is left alone.
    after = machine.snapshot()
    fast_tier.run(twin, tier="fast", yield_on_tick=True)
    assert is_bound(twin) and twin.tier_state is not machine.tier_state
    assert machine.snapshot() == after

    # Both reach what the reference interpreter reaches from the same point.
    reference = restore(blob)
    for candidate in (twin, restore(blob)):
        for runner in (reference, candidate):
            for message in (b"x" * 8, b"yz"):
                runner.deliver(2, message)
            if runner is reference:
                runner.run(10_000)
            else:
                fast_tier.run(runner, tier="fast", max_ticks=10_000)
        assert candidate.snapshot() == reference.snapshot()
        reference = restore(blob)


def test_the_instance_is_freed_with_the_machine(fast_tier: FastTier, echo: ForgeProgram) -> None:
    machine = _bound_mid_run(fast_tier, echo)
    binding = machine.tier_state
    assert isinstance(binding, runtime_module._Binding)
    instance = weakref.ref(binding.instance)
    compiled = binding.compiled
    del binding, machine
    gc.collect()
    assert instance() is None
    assert all(instance() is not idle for pool in compiled._idle.values() for idle in pool)


def test_a_bound_instance_is_never_pooled_and_a_kept_view_stays_valid(
    fast_tier: FastTier, echo: ForgeProgram
) -> None:
    program = assemble("LI r1, 77\nSTORE r1, r0, 100\nTICK\nHALT\n", "store.fasm")
    compiled = fast_tier.compile(program)
    machine = Machine.load(program)
    fast_tier.run(machine, tier="fast", yield_on_tick=True)
    assert is_bound(machine)
    binding = machine.tier_state
    assert isinstance(binding, runtime_module._Binding)
    pooled = [idle for pool in compiled._idle.values() for idle in pool]
    assert binding.instance not in pooled

    kept = machine.memory[96:104]  # a slice of the wasm memory, kept by the host
    fast_tier.run(machine, tier="fast")
    assert machine.state is MachineState.HALTED and not is_bound(machine)
    assert isinstance(machine.memory, bytearray)
    pooled = [idle for pool in compiled._idle.values() for idle in pool]
    assert binding.instance not in pooled  # someone still sees its memory
    for _ in range(3):  # other machines cannot get that memory and write into it
        other = Machine.load(program)
        other.memory[100] = 5
        fast_tier.run(other, tier="fast")
    assert kept[4] == 77 and machine.memory[100] == 77

    # Without such a view the stopped machine's instance goes back to the pool.
    del kept
    fresh = Machine.load(program)
    fast_tier.run(fresh, tier="fast", yield_on_tick=True)
    used = fresh.tier_state
    assert isinstance(used, runtime_module._Binding)
    instance = used.instance
    del used
    fast_tier.run(fresh, tier="fast")
    assert fresh.state is MachineState.HALTED
    assert any(instance is idle for pool in compiled._idle.values() for idle in pool)


def test_memory_replaced_by_the_host_is_taken_in(fast_tier: FastTier, echo: ForgeProgram) -> None:
    machine, reference = _bound_mid_run(fast_tier, echo), _load(echo)
    reference.run(200)
    for candidate in (machine, reference):
        replaced = bytearray(candidate.memory)
        replaced[4096:4104] = b"\xff" * 8
        candidate.memory = replaced
        candidate.deliver(2, b"")
    fast_tier.run(machine, tier="fast", max_ticks=3000)
    reference.run(3000)
    assert is_bound(machine) and machine.snapshot() == reference.snapshot()


def test_a_machine_moves_between_fast_tiers(echo: ForgeProgram) -> None:
    reference, machine = _load(echo), _load(echo)
    with FastTier(disk_cache=False) as first, FastTier(disk_cache=False) as second:
        for index in range(8):
            tier = (first, second)[index % 2]
            tier.run(machine, tier="fast", max_ticks=700)
            reference.run(700)
            assert machine.snapshot() == reference.snapshot()
            machine.deliver(2, bytes([index]) * 8)
            reference.deliver(2, bytes([index]) * 8)
        binding = machine.tier_state
        assert isinstance(binding, runtime_module._Binding)
        assert binding.compiled.engine is second.engine


def _vm_flags(address: int) -> list[str]:
    """The kernel's VmFlags of the mapping holding ``address`` (Linux's smaps)."""
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                low, high = (int(part, 16) for part in head.split("-"))
                inside = low <= address < high
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return []


def _huge_pages_offered() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as mode:
            return "[never]" not in mode.read()
    except OSError:
        return False


@pytest.mark.skipif(not _huge_pages_offered(), reason="the host offers no huge pages")
def test_a_large_data_memory_asks_for_huge_pages_and_a_small_one_does_not(
    echo: ForgeProgram,
) -> None:
    with FastTier(disk_cache=False) as tier:
        compiled = tier.compile(echo)
        large = compiled.acquire(runtime_module.HUGE_PAGES_FROM)
        small = compiled.acquire(1)
        assert "hg" in _vm_flags(large.memory_address)
        assert "hg" not in _vm_flags(small.memory_address)
