"""Snapshots: checkpoint -> restore -> continue equals the uninterrupted run; fork; bad bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.asm import assemble
from kforge.core import Hash256, MemoryQuotaExceeded
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from kforge.proofs.snapshot import (
    SnapshotError,
    SnapshotProgramMissing,
    checkpoint,
    fork,
    restore,
)
from test_fast_support import load_options, programs

SETTINGS = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ECHO = "LI r2, 16\nx:\nRECV 3, r1, r253, r2\nSEND 0, r253, r1\nSEND 3, r253, r1\nJMP x\n"


def _finish(machine: Machine) -> Machine:
    machine.run()
    return machine


@SETTINGS
@given(programs(max_items=14), load_options(), st.integers(0, 300))
def test_restore_then_continue_equals_uninterrupted_run_at_every_cut(
    program: ForgeProgram, options: dict[str, Any], budget: int
) -> None:
    try:
        whole = _finish(Machine.load(program, tick_budget=budget, **options))
    except MemoryQuotaExceeded:
        return
    for cut in range(0, min(whole.ticks_used, 60) + 1, 3):
        machine = Machine.load(program, tick_budget=budget, **options)
        machine.run(cut) if cut else None
        restored = restore(checkpoint(machine))
        assert restored.snapshot() == machine.snapshot()
        assert _finish(restored).snapshot() == whole.snapshot(), f"cut at {cut}"


def test_every_state_round_trips() -> None:
    program = assemble(ECHO, "echo.fasm")
    machine = Machine.load(program, grants=[3], memory_quota=5000)
    seen = {machine.state}
    assert restore(checkpoint(machine)).snapshot() == machine.snapshot()
    machine.run(1)
    seen.add(machine.state)
    assert restore(checkpoint(machine)).snapshot() == machine.snapshot()
    machine.run()
    seen.add(machine.state)
    restored = restore(checkpoint(machine))
    assert restored.snapshot() == machine.snapshot()
    for twin in (machine, restored):
        twin.deliver(3, b"hello")
        twin.run()
    assert restored.snapshot() == machine.snapshot()
    assert restored.deliveries == machine.deliveries
    assert bytes(restored.stdout) == b"hello" and restored.outbound == [(3, b"hello")]
    halted = _finish(Machine.load(assemble("HALT\n", "h.fasm")))
    faulted = _finish(Machine.load(assemble("FAULT 7\n", "f.fasm")))
    for final in (halted, faulted):
        seen.add(final.state)
        assert restore(checkpoint(final)).snapshot() == final.snapshot()
    assert seen == set(MachineState)


def test_large_sparse_memory_round_trips() -> None:
    program = assemble("LI r1, 7\nLI r2, 0x3FFFF00\nSTOREW r1, r2, 0\nHALT\n", "big.fasm")
    machine = _finish(Machine.load(program, memory_quota=64 << 20))
    blob = checkpoint(machine)
    assert len(blob) < 64 << 10
    assert restore(blob).snapshot() == machine.snapshot()


def test_program_by_lookup() -> None:
    program = assemble("NOP\nHALT\n", "n.fasm")
    machine = Machine.load(program)
    blob = checkpoint(machine, include_program=False)
    programs_by_id = {program.program_id: program}
    assert restore(blob, programs_by_id.get).snapshot() == machine.snapshot()
    with pytest.raises(SnapshotError, match="no program_lookup"):
        restore(blob)
    with pytest.raises(SnapshotProgramMissing, match="not found by the lookup") as missing:
        restore(blob, lambda _: None)
    assert missing.value.program_id == program.program_id
    other = assemble("HALT\n", "o.fasm")
    with pytest.raises(SnapshotError, match="snapshot says"):
        restore(blob, lambda _: other)
    assert isinstance(program.program_id, Hash256)


def test_fork_gives_independent_equal_machines() -> None:
    program = assemble(ECHO, "echo.fasm")
    machine = Machine.load(program, grants=[3])
    machine.run()
    forks = fork(machine, 4)
    assert len(forks) == 4
    assert all(twin.snapshot() == machine.snapshot() for twin in forks)
    forks[0].deliver(3, b"a")
    forks[0].run()
    forks[1].memory[100] = 9
    assert forks[2].snapshot() == machine.snapshot()
    assert forks[0].snapshot() != forks[2].snapshot()
    assert machine.memory[100] == 0 and machine.state is MachineState.BLOCKED
    with pytest.raises(ValueError):
        fork(machine, -1)


def _blob() -> bytes:
    program = assemble(ECHO, "echo.fasm")
    machine = Machine.load(program, grants=[3], input=b"xyz")
    machine.run()
    return checkpoint(machine)


def test_every_truncation_is_rejected_cleanly() -> None:
    blob = _blob()
    for length in range(0, len(blob), 7):
        with pytest.raises(SnapshotError):
            restore(blob[:length])


def test_every_flipped_byte_is_rejected_cleanly() -> None:
    blob = _blob()
    for offset in range(len(blob)):
        corrupt = bytearray(blob)
        corrupt[offset] ^= 0x41
        with pytest.raises(SnapshotError):
            restore(bytes(corrupt))


@pytest.mark.parametrize("blob", [b"", b"KFSNAP", b"garbage" * 10, b"\x00" * 46])
def test_garbage_is_rejected_cleanly(blob: bytes) -> None:
    with pytest.raises(SnapshotError):
        restore(blob)


def test_tampered_body_with_fixed_checksum_fails_the_state_hash() -> None:
    import hashlib

    import msgpack

    blob = _blob()
    body = msgpack.unpackb(blob[44:], raw=False)
    body["pc"] = 0  # machine was blocked at pc 1
    packed = msgpack.packb(body, use_bin_type=True)
    forged = blob[:8] + len(packed).to_bytes(4, "little") + hashlib.sha256(packed).digest() + packed
    with pytest.raises(SnapshotError, match="state hash mismatch"):
        restore(forged)
    body["sp"] = 1 << 40
    packed = msgpack.packb(body, use_bin_type=True)
    forged = blob[:8] + len(packed).to_bytes(4, "little") + hashlib.sha256(packed).digest() + packed
    with pytest.raises(SnapshotError, match="heap_start"):
        restore(forged)


def _reforged(blob: bytes, **changes: Any) -> bytes:
    import hashlib

    import msgpack

    body = msgpack.unpackb(blob[44:], raw=False)
    body.update(changes)
    packed = msgpack.packb(body, use_bin_type=True)
    return blob[:8] + len(packed).to_bytes(4, "little") + hashlib.sha256(packed).digest() + packed


def test_a_small_snapshot_claiming_many_zero_pages_is_refused_without_inflating_them() -> None:
    import tracemalloc
    import zlib

    quota = 64 << 20
    machine = Machine.load(assemble("HALT"), tick_budget=10, memory_quota=quota)
    pages = quota // 4096
    bomb = zlib.compress(bytes(quota), 9)  # about 64 KB standing for 64 MiB of zeros
    memory = {"page_size": 4096, "pages": b"".join(i.to_bytes(4, "little") for i in range(pages))}
    forged = _reforged(checkpoint(machine), memory={**memory, "data": bomb})
    assert len(forged) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(SnapshotError, match="page 0 is listed but all zero"):
            restore(forged)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"restoring held {peak} bytes at its peak"


def test_memory_data_past_its_listed_pages_is_refused() -> None:
    import zlib

    machine = Machine.load(assemble("HALT"), tick_budget=10, memory_quota=8192)
    page = b"\x01" * 4096
    memory = {"page_size": 4096, "pages": (0).to_bytes(4, "little")}
    forged = _reforged(checkpoint(machine), memory={**memory, "data": zlib.compress(page * 2)})
    with pytest.raises(SnapshotError, match="more than its listed pages"):
        restore(forged)
    forged = _reforged(checkpoint(machine), memory={**memory, "data": zlib.compress(page[:100])})
    with pytest.raises(SnapshotError, match="shorter than its listed pages"):
        restore(forged)
