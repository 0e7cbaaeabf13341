"""The incremental state hash against a plain reading of docs/proofs.md §2, on every memory kind."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from kforge.asm import assemble
from kforge.core import MemoryQuotaExceeded
from kforge.fast import FastTier, is_bound
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from kforge.proofs import StateHasher, generate_proof, state_hash, verify_proof
from kforge.proofs.keys import NodeKey
from kforge.proofs.replay import RunRecord
from kforge.tiers import TierRunner
from test_fast_support import load_options, programs

SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_STATES = {"READY": 0, "RUNNING": 1, "BLOCKED": 2, "HALTED": 3, "FAULTED": 4}


def _u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def spec_state_hash(machine: Machine) -> bytes:
    """docs/proofs.md §2, written out with nothing incremental."""
    memory = bytes(machine.memory)
    pages = b"".join(
        hashlib.sha256(b"KFORGE-PAGE-V1\0" + memory[start : start + 4096]).digest()
        for start in range(0, len(memory), 4096)
    )
    memory_hash = hashlib.sha256(b"KFORGE-MEMORY-V1\0" + _u64(len(memory)) + pages).digest()
    queues = b"KFORGE-QUEUES-V1\0"
    for channel in range(16):
        queue = machine.inbound.get(channel, [])
        queues += _u64(len(queue)) + b"".join(_u64(len(m)) + m for m in queue)
    queues += _u64(len(machine.outbound))
    queues += b"".join(_u64(ch) + _u64(len(m)) + m for ch, m in machine.outbound)
    flags = machine.zero | machine.carry << 1 | machine.overflow << 2 | machine.halt << 3
    header = (
        bytes([_STATES[machine.state.value]])
        + _u64(machine.pc)
        + _u64(machine.sp)
        + bytes([flags])
        + _u64(machine.ticks_used)
        + _u64(machine.held_bytes)
        + bytes([machine.fault is not None])
        + _u64(0 if machine.fault is None else int(machine.fault))
        + bytes([machine.fault_detail is not None])
        + _u64(machine.fault_detail or 0)
        + _u64((1 << 64) - 1 if machine.blocked_channel is None else machine.blocked_channel)
    )
    return hashlib.sha256(
        b"KFORGE-STATE-V1\0"
        + header
        + b"".join(_u64(r) for r in machine.registers)
        + memory_hash
        + hashlib.sha256(queues).digest()
        + hashlib.sha256(b"KFORGE-STDOUT-V1\0" + bytes(machine.stdout)).digest()
        + hashlib.sha256(b"KFORGE-STDERR-V1\0" + bytes(machine.stderr)).digest()
    ).digest()


GOLDEN_SOURCE = """
    LI r1, 8
    LI r7, 4096
    LI r9, 9000
    RECV 2, r3, r7, r1
    LOADW r4, r7, 0
    STOREW r4, r9, 0
    STORE r4, r9, 11000
    SEND 0, r7, r1
    SEND 1, r7, r3
    SEND 3, r7, r1
    PUSH r4
    RECV 3, r3, r7, r1
    HALT
"""


@pytest.fixture(scope="module")
def fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False) as tier:
        yield tier


def _golden_machine() -> Machine:
    program = assemble(GOLDEN_SOURCE, "g.fasm")
    return Machine.load(
        program,
        memory_quota=5 * 4096 + 13,
        input=b"abcdefgh-long",
        grants=[3],
        environment={b"k": b"v"},
    )


def test_state_hashes_are_the_format_version_1_values() -> None:
    """Pinned values (computed before any optimisation): the format has not moved."""
    machine = _golden_machine()
    hasher = StateHasher()
    seen = [hasher.hash(machine)]
    machine.run(9)
    seen.append(hasher.hash(machine))
    machine.run()
    assert machine.state is MachineState.BLOCKED
    seen.append(hasher.hash(machine))
    machine.deliver(3, b"zz")
    seen.append(hasher.hash(machine))
    assert [digest.hex()[:16] for digest in seen] == [
        "144dd9d07f176c42",
        "6c38a954000ae052",
        "d58591618da2f00c",
        "e300539e568352bd",
    ]


@SETTINGS
@given(programs(max_items=14), load_options())
def test_incremental_hash_matches_the_spec_on_both_tiers(
    program: ForgeProgram, options: dict[str, Any]
) -> None:
    try:
        reference = Machine.load(program, tick_budget=300, **options)
        fast = Machine.load(program, tick_budget=300, **options)
    except MemoryQuotaExceeded:
        return
    with FastTier(disk_cache=False) as tier:
        ours, theirs = StateHasher(), StateHasher()
        for _ in range(30):
            expected = spec_state_hash(reference)
            assert ours.hash(reference) == expected
            assert theirs.hash(fast) == expected  # the fast machine's memory may be wasm's
            reference.run(7)
            tier.run(fast, tier="fast", max_ticks=7)
            if reference.state.is_final:
                break
        assert ours.hash(reference) == theirs.hash(fast) == spec_state_hash(fast)


@pytest.mark.parametrize("quota", [4096, 4096 + 1, 3 * 4096 + 5, (2 << 20) + 13])
def test_every_page_is_seen_on_bound_and_unbound_memory(fast_tier: FastTier, quota: int) -> None:
    program = assemble("loop:\nTICK\nJMP loop\n", "spin.fasm")
    fast_tier.compile(program)
    plain, bound = (
        Machine.load(program, memory_quota=quota),
        Machine.load(program, memory_quota=quota),
    )
    fast_tier.run(bound, tier="fast", yield_on_tick=True)
    plain.run(yield_on_tick=True)
    assert is_bound(bound) and plain.ticks_used == bound.ticks_used == 1
    for machine in (plain, bound):
        hasher = StateHasher()
        assert hasher.hash(machine) == spec_state_hash(machine)
        for address in sorted({0, 8, quota // 2, quota - 4097, quota - 4096, quota - 1}):
            if not 0 <= address < quota:
                continue
            machine.memory[address] = 0x5A
            assert hasher.hash(machine) == spec_state_hash(machine), address
            machine.memory[address] = 0
            assert hasher.hash(machine) == spec_state_hash(machine), address
    assert state_hash(plain) == state_hash(bound)


def test_proofs_over_bound_machines_verify_on_the_reference(fast_tier: FastTier) -> None:
    program = assemble(GOLDEN_SOURCE, "g.fasm")
    record = RunRecord.create(
        program, memory_quota=5 * 4096 + 13, input=b"abcdefgh", grants=[3]
    ).with_deliveries([])
    key = NodeKey.generate()
    proof = generate_proof(
        program, record, key, sample_interval=4, tier=TierRunner("fast", fast_tier=fast_tier)
    )
    report = verify_proof(proof, program, record, key.public_raw, tier="reference")
    assert report.ok, report.summary()
    assert proof.sample_count > 3
