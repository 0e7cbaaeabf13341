"""Execution proofs: state hashes, trace bisection, signing, verification, node keys."""

from __future__ import annotations

import dataclasses
import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.asm import assemble
from kforge.core import Hash256, MemoryQuotaExceeded
from kforge.fast import FastTier
from kforge.isa import Instruction, Opcode
from kforge.machine import Delivery, Machine
from kforge.program import ForgeProgram
from kforge.proofs import (
    ExecutionProof,
    ProofFormatError,
    ReplayParty,
    StateHasher,
    first_divergent_sample,
    generate_proof,
    record_trace,
    state_hash,
    trace_hash,
    verify_proof,
)
from kforge.proofs.keys import KeyFileError, NodeKey, load_or_create_key, parse_public_key
from kforge.proofs.replay import RunRecord
from kforge.tiers import TierRunner
from test_fast_support import load_options, programs

SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
K = 16
COUNT = """
    LI r1, 0
    LI r2, 100
    LI r3, 1
loop:
    ADD r1, r1, r3
    STORE r1, r1, 0x100
    JLT r1, r2, loop
    RECV 2, r5, r253, r2
    SEND 0, r253, r5
    HALT
"""
LOOP_ADD_PC = 3  # "ADD r1, r1, r3" in COUNT


@pytest.fixture(scope="module")
def fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False, max_programs=4096) as tier:
        yield tier


@pytest.fixture(scope="module")
def key() -> NodeKey:
    return NodeKey.generate()


@pytest.fixture(scope="module")
def count() -> ForgeProgram:
    return assemble(COUNT, "count.fasm")


def _changed(program: ForgeProgram, pc: int, insn: Instruction) -> ForgeProgram:
    code = list(program.code)
    code[pc] = insn
    return ForgeProgram(tuple(code), program.data, program.entry)


# ------------------------------------------------------------------ verification


@SETTINGS
@given(
    programs(max_items=14),
    load_options(),
    st.integers(0, 300),
    st.lists(st.tuples(st.sampled_from([2, 3]), st.binary(max_size=6)), max_size=3),
)
def test_honest_proof_verifies(
    key: NodeKey,
    program: ForgeProgram,
    options: dict[str, Any],
    budget: int,
    messages: list[tuple[int, bytes]],
) -> None:
    record = RunRecord.create(program, tick_budget=budget, **options)
    try:
        machine = record.load(program)
    except MemoryQuotaExceeded:
        return
    for channel, data in messages:
        machine.run(7)
        if not machine.state.is_final and channel in machine.grants:
            machine.deliver(channel, data)
    record = record.with_deliveries(machine.deliveries)
    proof = generate_proof(program, record, key, sample_interval=5, tier="reference")
    report = verify_proof(proof, program, record, key.public_raw, tier="reference")
    assert report.ok, report.summary()


def test_proof_made_on_the_fast_tier_verifies_on_the_reference(
    fast_tier: FastTier, key: NodeKey, count: ForgeProgram
) -> None:
    record = RunRecord.create(count, input=b"fast")
    proof = generate_proof(
        count, record, key, sample_interval=7, tier=TierRunner("fast", fast_tier=fast_tier)
    )
    assert verify_proof(proof, count, record, key.public_raw, tier="reference").ok
    assert verify_proof(
        proof, count, record, key.public_raw, tier=TierRunner("fast", fast_tier=fast_tier)
    ).ok


def test_proof_fields_describe_the_run(count: ForgeProgram, key: NodeKey) -> None:
    record = RunRecord.create(count, input=b"hi")
    proof = generate_proof(count, record, key, sample_interval=K, tier="reference")
    machine = record.load(count)
    machine.run()
    assert proof.program == count.program_id
    assert proof.input == Hash256.of(b"hi")
    assert proof.output == Hash256.of(b"hi") and bytes(machine.stdout) == b"hi"
    assert proof.ticks_used == machine.ticks_used
    assert proof.final_state == "HALTED" and proof.fault is None
    assert proof.record == record.record_hash
    assert proof.samples[-1] == state_hash(machine)
    assert proof.sample_count == len(proof.samples) == machine.ticks_used // K + 2
    assert proof.trace_hash == trace_hash(K, proof.samples)


def test_changed_instruction_names_the_first_divergent_step(
    count: ForgeProgram, key: NodeKey
) -> None:
    tampered = _changed(count, LOOP_ADD_PC, Instruction(Opcode.SUB, rd=1, rs1=1, rs2=3))
    tampered_record = RunRecord.create(tampered, tick_budget=2000)
    proof = generate_proof(tampered, tampered_record, key, sample_interval=K, tier="reference")
    record = RunRecord.create(count, tick_budget=2000)
    report = verify_proof(
        proof,
        count,
        record,
        key.public_raw,
        tier="reference",
        counterparty=ReplayParty(tampered, tampered_record, K),
    )
    assert not report.ok and report.signature_valid
    assert any(problem.startswith("program:") for problem in report.problems)
    assert report.first_divergent_sample == 1  # the ADD first runs at tick 3 < K
    assert report.step is not None
    assert (report.step.pc, report.step.ticks_before, report.step.step_in_window) == (3, 3, 3)
    assert "ADD at pc 3" in report.summary()


def test_changed_input_byte_diverges_at_the_initial_state(
    count: ForgeProgram, key: NodeKey
) -> None:
    proof = generate_proof(count, RunRecord.create(count, input=b"abc"), key, sample_interval=K)
    report = verify_proof(proof, count, RunRecord.create(count, input=b"abd"), key.public_raw)
    assert not report.ok
    assert report.first_divergent_sample == 0 and report.step is None
    assert any(problem.startswith("input:") for problem in report.problems)


def test_changed_budget_diverges_at_the_instruction_it_stops(
    count: ForgeProgram, key: NodeKey
) -> None:
    full = RunRecord.create(count)
    machine = full.load(count)
    machine.run()
    short = RunRecord.create(count, tick_budget=machine.ticks_used - 1)
    proof = generate_proof(count, short, key, sample_interval=K, tier="reference")
    report = verify_proof(
        proof, count, full, key.public_raw, counterparty=ReplayParty(count, short, K)
    )
    assert not report.ok
    assert report.first_divergent_sample == len(proof.samples) - 1
    assert report.step is not None and report.step.pc == len(count.code) - 1  # the HALT


def test_tampered_ticks_used_is_rejected(count: ForgeProgram, key: NodeKey) -> None:
    record = RunRecord.create(count)
    proof = generate_proof(count, record, key, sample_interval=K)
    forged = dataclasses.replace(proof, ticks_used=proof.ticks_used - 1)
    report = verify_proof(forged, count, record, key.public_raw)
    assert not report.ok and not report.signature_valid
    assert any(problem.startswith("ticks_used:") for problem in report.problems)


def test_tampered_signature_is_rejected(count: ForgeProgram, key: NodeKey) -> None:
    record = RunRecord.create(count)
    proof = generate_proof(count, record, key, sample_interval=K)
    sig = bytearray(proof.forge_sig)
    sig[5] ^= 1
    report = verify_proof(
        dataclasses.replace(proof, forge_sig=bytes(sig)), count, record, key.public_raw
    )
    assert not report.ok and not report.signature_valid
    assert report.problems == ("forge_sig does not verify",)


def test_signature_from_another_key_is_rejected(count: ForgeProgram, key: NodeKey) -> None:
    record = RunRecord.create(count)
    proof = generate_proof(count, record, NodeKey.generate(), sample_interval=K)
    report = verify_proof(proof, count, record, key.public_raw)
    assert not report.ok and "forge_key is not the expected public key" in report.problems


TAMPERS: dict[str, Any] = {
    "program": Hash256.of(b"x"),
    "input": Hash256.of(b"x"),
    "output": Hash256.of(b"x"),
    "ticks_used": 1,
    "trace_hash": Hash256.of(b"x"),
    "sample_interval": K + 1,
    "sample_count": 1,
    "record": Hash256.of(b"x"),
    "final_state": "FAULTED",
    "fault": 3,
    "forge_key": bytes(32),
    "version": 2,
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_each_tampered_field_is_rejected(count: ForgeProgram, key: NodeKey, name: str) -> None:
    record = RunRecord.create(count)
    proof = generate_proof(count, record, key, sample_interval=K)
    forged = dataclasses.replace(proof, **{name: TAMPERS[name]})
    report = verify_proof(forged, count, record, key.public_raw)
    assert not report.ok and not report.signature_valid


def test_tampered_sample_is_found_by_bisection(count: ForgeProgram, key: NodeKey) -> None:
    record = RunRecord.create(count)
    proof = generate_proof(count, record, key, sample_interval=K)
    samples = list(proof.samples)
    samples[4] = bytes(32)
    report = verify_proof(
        dataclasses.replace(proof, samples=tuple(samples)), count, record, key.public_raw
    )
    assert not report.ok and report.signature_valid
    assert report.first_divergent_sample == 4
    assert "samples do not match the proof's trace_hash" in report.problems


def test_proof_bytes_round_trip(count: ForgeProgram, key: NodeKey) -> None:
    proof = generate_proof(count, RunRecord.create(count), key, sample_interval=K)
    assert ExecutionProof.from_bytes(proof.to_bytes()) == proof


@pytest.mark.parametrize("blob", [b"", b"\xc1", b"\x93\x01\x02\x03", b"\x9e" + b"\xc0" * 14])
def test_malformed_proof_bytes_are_a_typed_error(blob: bytes) -> None:
    with pytest.raises(ProofFormatError):
        ExecutionProof.from_bytes(blob)


# ------------------------------------------------------------------ trace internals


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.data())
def test_bisection_finds_the_first_differing_sample(size: int, data: st.DataObject) -> None:
    ours = [bytes([1 + i % 200, 1 + i // 200]) * 16 for i in range(size)]
    first = data.draw(st.integers(0, size - 1))
    theirs = list(ours)
    for index in data.draw(st.sets(st.integers(first, size - 1))) | {first}:
        theirs[index] = bytes(32)
    index, comparisons = first_divergent_sample(ours, theirs)
    assert index == first
    assert comparisons <= (size - 1).bit_length() + 1


def test_equal_samples_have_no_divergence() -> None:
    samples = [bytes([i]) * 32 for i in range(5)]
    assert first_divergent_sample(samples, samples) == (None, 1)


def test_padding_binds_the_sample_count() -> None:
    samples = [bytes([i]) * 32 for i in range(3)]
    assert trace_hash(K, samples) != trace_hash(K, [*samples, samples[-1]])
    assert trace_hash(K, samples) != trace_hash(K + 1, samples)


@SETTINGS
@given(programs(max_items=14), load_options(), st.integers(1, 9))
def test_incremental_state_hash_equals_from_scratch(
    program: ForgeProgram, options: dict[str, Any], slice_ticks: int
) -> None:
    try:
        machine = Machine.load(program, tick_budget=200, **options)
    except MemoryQuotaExceeded:
        return
    hasher = StateHasher()
    for _ in range(40):
        assert hasher.hash(machine) == state_hash(machine)
        if machine.run(slice_ticks).is_final:
            break
    assert hasher.hash(machine) == state_hash(machine)


def test_state_hash_sees_one_memory_byte_and_queued_input() -> None:
    program = assemble("HALT\n", "h.fasm")
    machine = Machine.load(program, memory_quota=3 * 4096 + 5)
    hasher = StateHasher()
    before = hasher.hash(machine)
    machine.memory[3 * 4096 + 4] = 1
    assert hasher.hash(machine) != before
    machine.memory[3 * 4096 + 4] = 0
    assert hasher.hash(machine) == before
    other = Machine.load(program, memory_quota=3 * 4096 + 5, input=b"x")
    assert state_hash(other) != before


def test_samples_land_on_first_boundary_past_each_multiple(count: ForgeProgram) -> None:
    trace = record_trace(count, RunRecord.create(count), 10)
    ticks = trace.sample_ticks
    assert ticks[0] == 0 and ticks[-1] == trace.machine.ticks_used
    for previous, now in itertools.pairwise(ticks[:-1]):
        assert now >= (previous // 10 + 1) * 10 > now - 3  # no instruction costs more than 3


def test_trace_with_deliveries_matches_across_tiers(fast_tier: FastTier) -> None:
    program = assemble("LI r2, 8\nx:\nRECV 3, r1, r253, r2\nSEND 0, r253, r1\nJMP x\n", "e.fasm")
    record = RunRecord.create(
        program, grants=[3], deliveries=[Delivery(1, 3, b"a"), Delivery(8, 3, b"bc")]
    )
    reference = record_trace(program, record, 3)
    fast = record_trace(program, record, 3, tier=TierRunner("fast", fast_tier=fast_tier))
    assert reference.samples == fast.samples
    assert bytes(reference.machine.stdout) == b"abc"


# ------------------------------------------------------------------ node keys


def test_key_is_created_private_and_reused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = load_or_create_key(data_dir)
    key_file = data_dir / "forge_ed25519.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert load_or_create_key(data_dir).public_raw == first.public_raw


def test_key_dir_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))
    key = load_or_create_key()
    assert (tmp_path / "forge_ed25519.pem").exists()
    assert load_or_create_key(tmp_path).public_hex == key.public_hex


def test_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    load_or_create_key(tmp_path)
    os.chmod(tmp_path / "forge_ed25519.pem", 0o644)
    with pytest.raises(KeyFileError, match="too open"):
        load_or_create_key(tmp_path)


def test_garbage_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "forge_ed25519.pem"
    path.write_bytes(b"not a key")
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a readable private key"):
        load_or_create_key(tmp_path)


def test_public_key_parses_from_hex_and_pem(tmp_path: Path) -> None:
    key = NodeKey.generate()
    pem_file = tmp_path / "key.pem"
    pem_file.write_text(key.public_pem())
    hex_file = tmp_path / "key.hex"
    hex_file.write_text(key.public_hex + "\n")
    for source in (key.public_hex, str(pem_file), str(hex_file)):
        assert parse_public_key(source).public_bytes_raw() == key.public_raw
    with pytest.raises(KeyFileError):
        parse_public_key(str(tmp_path / "missing"))


def test_verification_spends_no_more_ticks_than_the_proof_claims(key: NodeKey) -> None:
    spin = assemble("spin: JMP spin")
    short = RunRecord.create(spin, tick_budget=1000)
    proof = generate_proof(spin, short, key, sample_interval=100, tier="reference")
    assert proof.ticks_used == 1000
    # The same proof against a record whose budget would take hours to replay.
    endless = dataclasses.replace(short, tick_budget=10**13)
    report = verify_proof(proof, spin, endless, key.public_raw, tier="reference")
    assert not report.ok and any("record" in problem for problem in report.problems)
    assert any("final_state" in problem for problem in report.problems)
