"""The execution proof: its fields, signing, generation and verification by re-execution."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kforge.core import ErrorCategory, ForgeError, Hash256, Internal
from kforge.limits import MAX_TRACE_SAMPLES
from kforge.program import ForgeProgram
from kforge.proofs.replay import RunRecord
from kforge.proofs.trace import (
    DEFAULT_SAMPLE_INTERVAL,
    ReplayParty,
    StepDivergence,
    Trace,
    TraceParty,
    first_divergent_sample,
    locate_step,
    record_trace,
    trace_hash,
)
from kforge.tiers import TierRunner

PROOF_VERSION: Final = 1
_PROOF_TAG: Final = b"KFORGE-EXECUTION-PROOF-V1\x00"


class ProofFormatError(ForgeError):
    """Bytes that are not a well-formed execution proof."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, reason: str) -> None:
        super().__init__(f"bad execution proof: {reason}")
        self.reason = reason


# =============================================================================
# The proof object
# =============================================================================


class Signer(Protocol):
    """What signs proofs: the node's key (see :mod:`kforge.proofs.keys`)."""

    @property
    def public_raw(self) -> bytes: ...

    def sign(self, data: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class ExecutionProof:
    """Seed §3.12 plus what verification needs; ``samples`` ride along unsigned.

    ``samples`` are committed by ``trace_hash`` (which is signed), so a verifier
    can check them against it and bisect to the first divergent one.
    """

    program: Hash256
    input: Hash256
    output: Hash256
    ticks_used: int
    trace_hash: Hash256
    forge_sig: bytes
    version: int
    sample_interval: int
    sample_count: int
    record: Hash256
    final_state: str
    fault: int | None
    forge_key: bytes
    samples: tuple[bytes, ...] = field(default=())

    def signed_fields(self) -> list[Any]:
        """The signed fields in their fixed order (docs/proofs.md §4)."""
        return [
            self.version,
            self.program.raw,
            self.input.raw,
            self.output.raw,
            self.ticks_used,
            self.trace_hash.raw,
            self.sample_interval,
            self.sample_count,
            self.record.raw,
            self.final_state,
            self.fault,
            self.forge_key,
        ]

    def signed_bytes(self) -> bytes:
        """Domain tag + msgpack of :meth:`signed_fields`: what ``forge_sig`` signs."""
        packed: bytes = msgpack.packb(self.signed_fields(), use_bin_type=True)
        return _PROOF_TAG + packed

    def to_bytes(self) -> bytes:
        """msgpack ``[signed fields..., forge_sig, samples]``."""
        body = [*self.signed_fields(), self.forge_sig, list(self.samples)]
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return packed

    @classmethod
    def from_bytes(cls, blob: bytes) -> ExecutionProof:
        """Parse :meth:`to_bytes`; raises ``ProofFormatError`` naming the problem."""
        try:
            body = msgpack.unpackb(blob, raw=False)
        except Exception as error:  # msgpack raises several unrelated types
            raise ProofFormatError(f"not msgpack ({type(error).__name__})") from None
        return _proof_from_body(body)


def _typed(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProofFormatError(f"{what} has the wrong type ({type(value).__name__})")
    return value


def _hash_field(value: Any, what: str) -> Hash256:
    raw: bytes = _typed(value, bytes, what)
    if len(raw) != Hash256.SIZE:
        raise ProofFormatError(f"{what} has {len(raw)} bytes, not 32")
    return Hash256(raw)


def _proof_from_body(body: Any) -> ExecutionProof:
    if not isinstance(body, list) or len(body) != 14:
        raise ProofFormatError("expected an array of 14 fields")
    version = _typed(body[0], int, "version")
    if version != PROOF_VERSION:
        raise ProofFormatError(f"unsupported proof version {version}")
    fault = body[10] if body[10] is None else _typed(body[10], int, "fault")
    if len(_typed(body[13], list, "samples")) > MAX_TRACE_SAMPLES:
        raise ProofFormatError(f"more than {MAX_TRACE_SAMPLES} samples")
    samples = tuple(_typed(s, bytes, "sample") for s in _typed(body[13], list, "samples"))
    if any(len(sample) != 32 for sample in samples):
        raise ProofFormatError("a sample is not 32 bytes")
    return ExecutionProof(
        version=version,
        program=_hash_field(body[1], "program"),
        input=_hash_field(body[2], "input"),
        output=_hash_field(body[3], "output"),
        ticks_used=_typed(body[4], int, "ticks_used"),
        trace_hash=_hash_field(body[5], "trace_hash"),
        sample_interval=_typed(body[6], int, "sample_interval"),
        sample_count=_typed(body[7], int, "sample_count"),
        record=_hash_field(body[8], "record"),
        final_state=_typed(body[9], str, "final_state"),
        fault=fault,
        forge_key=_typed(body[11], bytes, "forge_key"),
        forge_sig=_typed(body[12], bytes, "forge_sig"),
        samples=samples,
    )


# =============================================================================
# Generating and verifying
# =============================================================================


def _proof_fields(
    program: ForgeProgram, record: RunRecord, trace: Trace, key: bytes
) -> dict[str, Any]:
    """Every field of the proof of ``trace`` but the signature."""
    machine = trace.machine
    return {
        "program": program.program_id,
        "input": Hash256.of(record.input),
        "output": Hash256.of(bytes(machine.stdout)),
        "ticks_used": machine.ticks_used,
        "trace_hash": trace_hash(trace.sample_interval, trace.samples),
        "version": PROOF_VERSION,
        "sample_interval": trace.sample_interval,
        "sample_count": len(trace.samples),
        "record": record.record_hash,
        "final_state": machine.state.value,
        "fault": None if machine.fault is None else int(machine.fault),
        "forge_key": key,
        "samples": trace.samples,
    }


def _unsigned_proof(
    program: ForgeProgram, record: RunRecord, trace: Trace, key: bytes
) -> ExecutionProof:
    return ExecutionProof(forge_sig=b"", **_proof_fields(program, record, trace, key))


def generate_proof(
    program: ForgeProgram,
    record: RunRecord,
    key: Signer,
    *,
    sample_interval: int = DEFAULT_SAMPLE_INTERVAL,
    tier: str | TierRunner = "auto",
) -> ExecutionProof:
    """Replay ``record`` (on the fast tier when available), commit to its trace and sign.

    Raises ``RecordFormatError`` when the record is for another program and
    ``ReplayDivergence`` when its delivery log does not fit the execution.
    """
    unsigned = unsigned_proof(
        program, record, key.public_raw, sample_interval=sample_interval, tier=tier
    )
    return sign_proof(unsigned, key)


def unsigned_proof(
    program: ForgeProgram,
    record: RunRecord,
    public_key: bytes,
    *,
    sample_interval: int = DEFAULT_SAMPLE_INTERVAL,
    tier: str | TierRunner = "auto",
) -> ExecutionProof:
    """The proof of ``record``'s replay for the key ``public_key``, not signed yet: the
    replay's work, which may be done where the private key is not (a worker process)."""
    trace = record_trace(program, record, sample_interval, tier=tier)
    return _unsigned_proof(program, record, trace, public_key)


def sign_proof(unsigned: ExecutionProof, key: Signer) -> ExecutionProof:
    """``unsigned`` with ``key``'s signature (``Internal`` when it names another key)."""
    if unsigned.forge_key != key.public_raw:
        raise Internal("the proof names another key than the one signing it")
    return replace(unsigned, forge_sig=key.sign(unsigned.signed_bytes()))


@dataclass(frozen=True, slots=True)
class VerificationReport:
    """What re-execution found: ``ok`` only when every field and the signature check out."""

    ok: bool
    signature_valid: bool
    problems: tuple[str, ...]
    first_divergent_sample: int | None = None
    divergent_ticks: tuple[int, int] | None = None
    comparisons: int = 0
    step: StepDivergence | None = None

    def summary(self) -> str:
        """One line: ``OK`` or the problems and the first divergence."""
        if self.ok:
            return "OK"
        parts = list(self.problems)
        if self.first_divergent_sample is not None:
            where = f"first divergent sample {self.first_divergent_sample}"
            if self.divergent_ticks is not None:
                where += f" (ticks {self.divergent_ticks[0]}..{self.divergent_ticks[1]})"
            parts.append(where)
        if self.step is not None:
            parts.append(f"first divergent instruction: {self.step.describe()}")
        return "; ".join(parts)


def _check_signature(proof: ExecutionProof, public_key: Ed25519PublicKey | bytes) -> list[str]:
    if isinstance(public_key, bytes):
        try:
            public_key = Ed25519PublicKey.from_public_bytes(public_key)
        except ValueError:
            return ["public key is not a 32-byte ed25519 key"]
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    problems = []
    if public_key.public_bytes(Encoding.Raw, PublicFormat.Raw) != proof.forge_key:
        problems.append("forge_key is not the expected public key")
    try:
        public_key.verify(proof.forge_sig, proof.signed_bytes())
    except InvalidSignature:
        problems.append("forge_sig does not verify")
    return problems


def _field_problems(proof: ExecutionProof, expected: ExecutionProof) -> list[str]:
    problems = []
    for name in (
        "version",
        "program",
        "input",
        "output",
        "ticks_used",
        "trace_hash",
        "sample_interval",
        "sample_count",
        "record",
        "final_state",
        "fault",
    ):
        claimed, actual = getattr(proof, name), getattr(expected, name)
        if claimed != actual:
            problems.append(f"{name}: proof says {claimed}, re-execution gives {actual}")
    if trace_hash(proof.sample_interval, proof.samples or (b"",)) != proof.trace_hash:
        problems.append("samples do not match the proof's trace_hash")
    return problems


def verify_proof(
    proof: ExecutionProof,
    program: ForgeProgram,
    record: RunRecord,
    public_key: Ed25519PublicKey | bytes,
    *,
    tier: str | TierRunner = "auto",
    counterparty: TraceParty | None = None,
) -> VerificationReport:
    """Re-execute ``record`` and check every field of ``proof`` and its signature.

    On a trace mismatch the claimed samples are bisected against ours to the
    first divergent sample; with a ``counterparty`` (the prover answering step
    hashes, as in an interactive dispute) the divergent window is narrowed to
    the first divergent instruction.  Never raises for a bad proof: the
    problems are in the report.  Re-execution stops once past the proof's own
    ``ticks_used``, so a proof cannot make its verifier work longer than it claims;
    a caller bounds that claim before calling.
    """
    problems = _check_signature(proof, public_key)
    signature_valid = not problems
    if proof.sample_interval < 1:
        return VerificationReport(False, signature_valid, (*problems, "sample_interval < 1"))
    if max(proof.sample_count, len(proof.samples)) > MAX_TRACE_SAMPLES:
        refusal = f"more than {MAX_TRACE_SAMPLES} samples"
        return VerificationReport(False, signature_valid, (*problems, refusal))
    try:
        trace = record_trace(
            program, record, proof.sample_interval, tier=tier, max_ticks=max(0, proof.ticks_used)
        )
    except ForgeError as error:
        return VerificationReport(False, signature_valid, (*problems, f"re-execution: {error}"))
    expected = _unsigned_proof(program, record, trace, proof.forge_key)
    problems += _field_problems(proof, expected)
    if not problems:
        return VerificationReport(True, True, ())
    index, comparisons = first_divergent_sample(trace.samples, proof.samples or (b"",))
    window = _window(trace, index)
    step = None
    if index is not None and counterparty is not None:
        ours = ReplayParty(program, record, proof.sample_interval, max(0, proof.ticks_used))
        step = locate_step(ours, counterparty, index)
    return VerificationReport(
        False, signature_valid, tuple(problems), index, window, comparisons, step
    )


def _window(trace: Trace, index: int | None) -> tuple[int, int] | None:
    """Ticks from the last agreed sample to our sample at ``index``."""
    if index is None:
        return None
    ticks = trace.sample_ticks
    end = ticks[min(index, len(ticks) - 1)]
    return (ticks[min(index - 1, len(ticks) - 1)] if index > 0 else 0, end)
