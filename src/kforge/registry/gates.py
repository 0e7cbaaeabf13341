"""The verification gates: each a function returning a :class:`GateResult` with its report.

Gates never raise for a bad program: every problem becomes a classified
:class:`GateFailure` whose facts say where (instruction index, vector name,
expected and actual output, first divergent sample) so an agent can correct
its program and propose again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import msgpack

from kforge.asm import AssemblyError
from kforge.core import ForgeError, Hash256
from kforge.isa import OPCODES, Opcode
from kforge.program import ForgeProgram, decode_program, is_program_bytes
from kforge.proofs import ExecutionProof, Signer, verify_proof
from kforge.proofs.replay import RunRecord
from kforge.registry.model import (
    FailureKind,
    Gate,
    GateFailure,
    GateResult,
    Manifest,
    TestVector,
)
from kforge.registry.policy import RegistryPolicy
from kforge.sources import DEFAULT_STARLARK_MEMORY, is_starlark_name, program_from_source

__all__ = [
    "BUNDLE_VERSION",
    "ProofBundle",
    "Prover",
    "decode_gate",
    "decode_source",
    "policy_gate",
    "proof_gate",
    "static_gate",
    "vectors_gate",
]

#: The proof bundle format of ``kforge prove`` / ``kforge verify`` (kforge.cli.proofs).
BUNDLE_VERSION: Final = 1
_TARGET_OPCODES: Final = frozenset({Opcode.JMP, Opcode.JZ, Opcode.JNZ, Opcode.JLT, Opcode.CALL})
_CHANNEL_OPCODES: Final = frozenset({Opcode.SEND, Opcode.RECV, Opcode.POLL})
_MAX_SHOWN: Final = 256  # bytes of output quoted in a failure's facts


class Prover(Protocol):
    """Makes the signed proof of a run (``kforge.proofs.generate_proof``'s shape)."""

    def __call__(
        self, program: ForgeProgram, record: RunRecord, key: Signer, *, tier: str = ...
    ) -> ExecutionProof: ...


@dataclass(frozen=True, slots=True)
class ProofBundle:
    """One vector's signed proof with its run record, in ``kforge verify``'s bundle format."""

    vector: str
    proof: ExecutionProof
    record: RunRecord

    def to_bytes(self) -> bytes:
        body = [BUNDLE_VERSION, self.proof.to_bytes(), self.record.to_bytes()]
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return packed


def _failure(kind: FailureKind, message: str, **facts: Any) -> GateFailure:
    return GateFailure(kind, message, facts)


def _result(gate: Gate, report: dict[str, Any], failures: Sequence[GateFailure]) -> GateResult:
    return GateResult(gate, not failures, report, tuple(failures))


def decode_source(
    source: bytes, filename: str, memory_quota: int = DEFAULT_STARLARK_MEMORY
) -> ForgeProgram:
    """The program in ``source``: FRGP bytes decoded strictly, Starlark source (a
    ``.star`` name) compiled for ``memory_quota`` bytes, or assembly text assembled."""
    return program_from_source(source, filename, memory_quota)


def decode_gate(
    source: bytes, filename: str, memory_quota: int = DEFAULT_STARLARK_MEMORY
) -> tuple[GateResult, ForgeProgram | None]:
    """The container decodes strictly and canonically (assembling or compiling the source
    first)."""
    form = (
        "container"
        if is_program_bytes(source)
        else ("starlark" if is_starlark_name(filename) else "assembly")
    )
    report: dict[str, Any] = {"form": form, "source_hash": Hash256.of(source).hex}
    try:
        program = decode_source(source, filename, memory_quota)
    except AssemblyError as error:
        facts = {"line": error.line, "column": error.column, "detail": error.message}
        failure = _failure(FailureKind.DECODE, str(error), form=form, **facts)
        return _result(Gate.DECODE, report, [failure]), None
    except UnicodeDecodeError as error:
        failure = _failure(
            FailureKind.DECODE, f"{filename}: not FRGP bytes nor UTF-8", byte=error.start
        )
        return _result(Gate.DECODE, report, [failure]), None
    except ForgeError as error:
        return _result(
            Gate.DECODE, report, [_failure(FailureKind.DECODE, str(error), form=form)]
        ), None
    encoded = program.encoded
    if form == "container" and encoded != source:
        failure = _failure(FailureKind.DECODE, "container is not canonical")
        return _result(Gate.DECODE, report, [failure]), None
    # The round trip is the canonical check: what we store decodes to the same program.
    if decode_program(encoded) != program:
        failure = _failure(FailureKind.DECODE, "container does not round-trip")
        return _result(Gate.DECODE, report, [failure]), None
    report.update(
        program_id=program.program_id.hex,
        code_length=len(program.code),
        data_length=len(program.data),
        exports=sorted(s.name.decode("utf-8", "replace") for s in program.symbols),
    )
    return _result(Gate.DECODE, report, []), program


def _mnemonic(opcode: int) -> str:
    info = OPCODES.get(opcode)
    return info.mnemonic if info else f"0x{opcode:02x}"


def static_gate(
    program: ForgeProgram,
    manifest: Manifest,
    vectors: Sequence[TestVector],
    policy: RegistryPolicy,
) -> GateResult:
    """Jump/call targets in range, known opcodes, channels ⊆ requested, vectors within bounds."""
    failures: list[GateFailure] = []
    code_length = len(program.code)
    channels_used: set[int] = set()
    for index, insn in enumerate(program.code):
        if insn.opcode not in OPCODES:
            if not policy.allow_unknown_opcodes:
                failures.append(
                    _failure(
                        FailureKind.STATIC,
                        f"instruction {index}: unknown opcode 0x{insn.opcode:02x}",
                        index=index,
                        opcode=insn.opcode,
                    )
                )
            continue
        if insn.opcode in _TARGET_OPCODES and insn.imm >= code_length:
            failures.append(
                _failure(
                    FailureKind.STATIC,
                    f"instruction {index}: {_mnemonic(insn.opcode)} target {insn.imm} "
                    f"is outside the code (length {code_length})",
                    index=index,
                    mnemonic=_mnemonic(insn.opcode),
                    target=insn.imm,
                    code_length=code_length,
                )
            )
        if insn.opcode in _CHANNEL_OPCODES:
            channels_used.add(insn.imm)
            if insn.imm not in manifest.channels:
                failures.append(
                    _failure(
                        FailureKind.STATIC,
                        f"instruction {index}: {_mnemonic(insn.opcode)} uses channel "
                        f"{insn.imm}, which the proposal did not request",
                        index=index,
                        mnemonic=_mnemonic(insn.opcode),
                        channel=insn.imm,
                        requested=sorted(manifest.channels),
                    )
                )
    if program.imports:
        names = [name.decode("utf-8", "replace") for name in program.imports]
        failures.append(
            _failure(FailureKind.STATIC, f"unresolved imports: {', '.join(names)}", imports=names)
        )
    for vector in vectors:
        failures += _vector_bound_failures(vector, manifest)
    report = {
        "code_length": code_length,
        "channels_used": sorted(channels_used),
        "channels_requested": sorted(manifest.channels),
        "declared": manifest.to_json(),
        "vectors": len(vectors),
    }
    return _result(Gate.STATIC, report, failures)


def _vector_bound_failures(vector: TestVector, manifest: Manifest) -> list[GateFailure]:
    failures = []
    for what, value, declared in (
        ("ticks", vector.tick_budget, manifest.tick_budget),
        ("memory", vector.memory_quota, manifest.memory_quota),
    ):
        if value is not None and value > declared:
            failures.append(
                _failure(
                    FailureKind.STATIC,
                    f"vector {vector.name!r}: {what} {value} exceeds the declared {declared}",
                    vector=vector.name,
                    bound=what,
                    value=value,
                    declared=declared,
                )
            )
    extra = sorted(set(vector.grants) - set(manifest.grants))
    if extra:
        failures.append(
            _failure(
                FailureKind.STATIC,
                f"vector {vector.name!r}: grants {extra} were not requested",
                vector=vector.name,
                grants=extra,
                requested=list(manifest.grants),
            )
        )
    return failures


def policy_gate(manifest: Manifest, policy: RegistryPolicy) -> GateResult:
    """The requested grants and declared quotas are within the policy."""
    failures: list[GateFailure] = []
    refused = sorted(set(manifest.grants) - policy.grantable_channels)
    if refused:
        failures.append(
            _failure(
                FailureKind.POLICY,
                f"channels {refused} may never be granted under this policy",
                channels=refused,
                grantable=sorted(policy.grantable_channels),
            )
        )
    for what, value, limit in (
        ("tick_budget", manifest.tick_budget, policy.max_tick_budget),
        ("memory_quota", manifest.memory_quota, policy.max_memory_quota),
    ):
        if value > limit:
            failures.append(
                _failure(
                    FailureKind.POLICY,
                    f"declared {what} {value} exceeds the policy maximum {limit}",
                    quota=what,
                    declared=value,
                    maximum=limit,
                )
            )
    report = {"policy": policy.to_json(), "declared": manifest.to_json()}
    return _result(Gate.POLICY, report, failures)


def _shown(data: bytes) -> dict[str, Any]:
    """Output as facts: text when it is UTF-8, always hex; both cut at 256 bytes."""
    head = data[:_MAX_SHOWN]
    try:
        text: str | None = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"text": text, "hex": head.hex(), "length": len(data)}


def _first_difference(expected: bytes, actual: bytes) -> int | None:
    for offset, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            return offset
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def vectors_gate(
    program: ForgeProgram,
    manifest: Manifest,
    vectors: Sequence[TestVector],
    key: Signer,
    prover: Prover,
    store: Callable[[str, bytes], Hash256],
    *,
    tier: str = "reference",
) -> tuple[GateResult, list[ProofBundle]]:
    """Run every vector in a fresh machine, compare, and attach a signed proof of each run."""
    failures: list[GateFailure] = []
    runs: list[dict[str, Any]] = []
    bundles: list[ProofBundle] = []
    for vector in vectors:
        record = RunRecord.create(
            program,
            input=vector.input,
            grants=vector.grants,
            memory_quota=vector.memory_quota or manifest.memory_quota,
            tick_budget=vector.tick_budget or manifest.tick_budget,
        )
        try:
            machine = record.load(program)
        except ForgeError as error:
            failures.append(
                _failure(FailureKind.TEST, f"vector {vector.name!r}: {error}", vector=vector.name)
            )
            runs.append({"vector": vector.name, "passed": False, "error": str(error)})
            continue
        machine.run()
        output = bytes(machine.stdout)
        state = machine.state.value
        fault = None if machine.fault is None else machine.fault.name
        proof = prover(program, record, key, tier=tier)
        bundle = ProofBundle(vector.name, proof, record)
        bundles.append(bundle)
        proof_hash = store("proof", bundle.to_bytes())
        passed = output == vector.expected_output and state == vector.expected_state
        runs.append(
            {
                "vector": vector.name,
                "passed": passed,
                "state": state,
                "fault": fault,
                "ticks_used": machine.ticks_used,
                "tick_budget": record.tick_budget,
                "memory_quota": record.memory_quota,
                "output_hex": output.hex(),
                "proof": proof_hash.hex,
            }
        )
        if not passed:
            failures.append(_test_failure(vector, output, state, fault, machine.ticks_used, record))
    report = {"vectors": runs, "tier": tier, "signer": key.public_raw.hex()}
    return _result(Gate.TEST, report, failures), bundles


def _test_failure(
    vector: TestVector,
    output: bytes,
    state: str,
    fault: str | None,
    ticks_used: int,
    record: RunRecord,
) -> GateFailure:
    if state != vector.expected_state:
        why = f"ended {state}" + (f" ({fault})" if fault else "")
        why += f", expected {vector.expected_state}"
    else:
        why = "output differs"
    return _failure(
        FailureKind.TEST,
        f"vector {vector.name!r}: {why}",
        vector=vector.name,
        input=_shown(vector.input),
        expected_output=_shown(vector.expected_output),
        actual_output=_shown(output),
        first_difference=_first_difference(vector.expected_output, output),
        expected_state=vector.expected_state,
        actual_state=state,
        fault=fault,
        ticks_used=ticks_used,
        tick_budget=record.tick_budget,
        out_of_ticks=fault == "OUT_OF_TICKS",
    )


def proof_gate(
    program: ForgeProgram,
    bundles: Sequence[ProofBundle],
    signer_key: bytes,
    *,
    tier: str = "reference",
) -> GateResult:
    """Every attached proof re-verifies by replay and carries the node's signature."""
    failures: list[GateFailure] = []
    checked = []
    for bundle in bundles:
        report = verify_proof(bundle.proof, program, bundle.record, signer_key, tier=tier)
        checked.append({"vector": bundle.vector, "ok": report.ok})
        if report.ok:
            continue
        failures.append(
            _failure(
                FailureKind.PROOF,
                f"vector {bundle.vector!r}: proof does not verify: {report.summary()}",
                vector=bundle.vector,
                problems=list(report.problems),
                signature_valid=report.signature_valid,
                first_divergent_sample=report.first_divergent_sample,
                divergent_ticks=None
                if report.divergent_ticks is None
                else list(report.divergent_ticks),
                step=None if report.step is None else report.step.describe(),
            )
        )
    return _result(Gate.PROOF, {"proofs": checked, "signer": signer_key.hex()}, failures)
