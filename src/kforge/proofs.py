"""Execution proofs: state hashes, the sampled trace commitment, signing and verification.

The byte formats are specified in ``docs/proofs.md`` (version 1); this module is
their reference implementation.  In short:

* a **state hash** commits to everything that evolves in a machine; memory is
  hashed per 4 KiB page and :class:`StateHasher` rehashes only changed pages;
* a **trace** samples the state hash at the initial state, at the first
  instruction boundary where ``ticks_used >= n*K`` for each ``n``, and at the
  final state; the **trace hash** is a Merkle root over the samples (padded to a
  power of two by repeating the final sample), bound to ``K`` and the count;
* an :class:`ExecutionProof` carries the seed's fields plus what verification
  needs, signed with the node's ed25519 key.  The signature is an attestation
  of who claims the result; **re-execution is the verification**:
  :func:`verify_proof` replays the run and checks every field, and on a
  mismatch bisects the claimed samples to the first divergent one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kforge.core import ErrorCategory, ForgeError, Hash256
from kforge.machine import Machine, MachineState
from kforge.memory import allocate_memory
from kforge.program import ForgeProgram
from kforge.replay import Replayer, RunRecord, slice_runner

__all__ = [
    "DEFAULT_SAMPLE_INTERVAL",
    "PAGE_SIZE",
    "PROOF_VERSION",
    "ExecutionProof",
    "ProofFormatError",
    "ReplayParty",
    "Signer",
    "StateHasher",
    "StepDivergence",
    "Trace",
    "TraceParty",
    "VerificationReport",
    "first_divergent_sample",
    "generate_proof",
    "locate_step",
    "merkle_root",
    "record_trace",
    "state_hash",
    "trace_hash",
    "verify_proof",
]

PROOF_VERSION: Final = 1
PAGE_SIZE: Final = 4096
DEFAULT_SAMPLE_INTERVAL: Final = 1 << 22

_STATE_TAG: Final = b"KFORGE-STATE-V1\x00"
_PAGE_TAG: Final = b"KFORGE-PAGE-V1\x00"
_MEMORY_TAG: Final = b"KFORGE-MEMORY-V1\x00"
_QUEUES_TAG: Final = b"KFORGE-QUEUES-V1\x00"
_STDOUT_TAG: Final = b"KFORGE-STDOUT-V1\x00"
_STDERR_TAG: Final = b"KFORGE-STDERR-V1\x00"
_LEAF_TAG: Final = b"\x00KFORGE-TRACE-LEAF-V1\x00"
_NODE_TAG: Final = b"\x01KFORGE-TRACE-NODE-V1\x00"
_TRACE_TAG: Final = b"KFORGE-TRACE-V1\x00"
_PROOF_TAG: Final = b"KFORGE-EXECUTION-PROOF-V1\x00"

#: State codes in the state hash input (docs/proofs.md §2).
STATE_CODES: Final = {
    MachineState.READY: 0,
    MachineState.RUNNING: 1,
    MachineState.BLOCKED: 2,
    MachineState.HALTED: 3,
    MachineState.FAULTED: 4,
}
_NONE: Final = (1 << 64) - 1
_HEADER: Final = struct.Struct("<BQQBQQBQBQQ")
_REGISTERS: Final = struct.Struct("<256Q")
_U64: Final = struct.Struct("<Q")
_ZERO_PAGE: Final = bytes(PAGE_SIZE)
_ZERO_PAGE_HASH: Final = hashlib.sha256(_PAGE_TAG + _ZERO_PAGE).digest()
#: Ranges up to this long are compared page by page rather than halved again.
_LEAF_SPAN: Final = 16 * PAGE_SIZE
#: The first hash of a memory looks for non-zero bytes in spans this long.
_ZERO_SPAN: Final = 16 * PAGE_SIZE


class ProofFormatError(ForgeError):
    """Bytes that are not a well-formed execution proof."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503

    def __init__(self, reason: str) -> None:
        super().__init__(f"bad execution proof: {reason}")
        self.reason = reason


# =============================================================================
# State hashing
# =============================================================================


def _load_memcmp() -> Callable[[int, int, int], int]:
    """libc ``memcmp`` on addresses, or a slower stand-in that copies both ranges."""
    try:
        memcmp = ctypes.CDLL(ctypes.util.find_library("c")).memcmp
        memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        memcmp.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):
        return lambda a, b, n: int(ctypes.string_at(a, n) != ctypes.string_at(b, n))
    return memcmp


_memcmp: Final = _load_memcmp()
_ZERO_BUFFER: Final = bytearray(_ZERO_SPAN)
_ZERO_ADDRESS: Final = ctypes.addressof((ctypes.c_char * _ZERO_SPAN).from_buffer(_ZERO_BUFFER))


def _page_hash(page: bytes) -> bytes:
    """``H("KFORGE-PAGE-V1\\0" || page)``."""
    if page == _ZERO_PAGE:
        return _ZERO_PAGE_HASH
    # Performance note: one concatenation beats feeding a copied prefix digest.
    return hashlib.sha256(_PAGE_TAG + page).digest()


def _pinned_address(memory: Any, size: int) -> tuple[int, Any]:
    """The address of a machine's memory, and what keeps it there (drop it when done)."""
    try:
        pinned: Any = (ctypes.c_char * size).from_buffer(memory)
    except TypeError:  # not a writable buffer: hash a copy
        pinned = (ctypes.c_char * size).from_buffer(bytearray(memory))
    return ctypes.addressof(pinned), pinned


_NO_MESSAGES: Final = _U64.pack(0)
_EMPTY_QUEUES_HASH: Final = hashlib.sha256(
    _QUEUES_TAG + _NO_MESSAGES * (16 + 1)  # sixteen empty inbound queues, no outbound
).digest()


def queues_hash(machine: Machine) -> bytes:
    """SHA-256 over the inbound queues (channels 0..15 in order), then the outbound list."""
    inbound = machine.inbound
    if not machine.outbound and not any(inbound.values()):
        return _EMPTY_QUEUES_HASH
    parts = [_QUEUES_TAG]
    for channel in range(16):
        queue = inbound.get(channel)
        if not queue:
            parts.append(_NO_MESSAGES)
            continue
        parts.append(_U64.pack(len(queue)))
        for message in queue:
            parts += (_U64.pack(len(message)), message)
    parts.append(_U64.pack(len(machine.outbound)))
    for channel, message in machine.outbound:
        parts += (_U64.pack(channel), _U64.pack(len(message)), message)
    return hashlib.sha256(b"".join(parts)).digest()


class _OutputHash:
    """SHA-256 of a tag and an append-only buffer, fed only the bytes appended since."""

    def __init__(self, tag: bytes) -> None:
        self._tag = tag
        self._digest = hashlib.sha256(tag)
        self._buffer: bytearray | None = None
        self._length = 0
        self._last = b""

    def digest(self, buffer: bytearray) -> bytes:
        length = len(buffer)
        if buffer is self._buffer and length == self._length and self._last:
            return self._last
        if buffer is not self._buffer or length < self._length:  # another buffer
            self._digest, self._buffer, self._length = hashlib.sha256(self._tag), buffer, 0
        if length > self._length:
            self._digest.update(buffer[self._length :])
            self._length = length
        self._last = self._digest.copy().digest()
        return self._last


class StateHasher:
    """Incremental :func:`state_hash` of machines over time.

    Keeps a copy of the memory last hashed and its per-page hashes.  Finding the
    changed pages is a ``memcmp`` of the whole memory against the copy, halving
    the ranges that differ down to single pages, so unchanged memory costs one
    ``memcmp`` and no hashing, and the memory hash is recomputed only when a
    page changed.  The copy starts as zeros (lazily mapped for large memories),
    so the first hash reads the machine's memory once and hashes only its
    non-zero pages.
    """

    def __init__(self) -> None:
        self._size = -1
        self._copy: Any = None
        self._copy_pin: Any = None
        self._copy_address = 0
        self._pages: list[bytes] = []
        self._memory_digest = b""
        self._stdout = _OutputHash(_STDOUT_TAG)
        self._stderr = _OutputHash(_STDERR_TAG)

    def hash(self, machine: Machine) -> bytes:
        """The 32-byte state hash of ``machine`` now (docs/proofs.md §2)."""
        fault = machine.fault
        detail = machine.fault_detail
        blocked = machine.blocked_channel
        header = _HEADER.pack(
            STATE_CODES[machine.state],
            machine.pc,
            machine.sp,
            machine.zero | machine.carry << 1 | machine.overflow << 2 | machine.halt << 3,
            machine.ticks_used,
            machine.held_bytes,
            fault is not None,
            0 if fault is None else int(fault),
            detail is not None,
            detail or 0,
            _NONE if blocked is None else blocked,
        )
        return hashlib.sha256(
            b"".join(
                (
                    _STATE_TAG,
                    header,
                    _REGISTERS.pack(*machine.registers),
                    self.memory_hash(machine),
                    queues_hash(machine),
                    self._stdout.digest(machine.stdout),
                    self._stderr.digest(machine.stderr),
                )
            )
        ).digest()

    def memory_hash(self, machine: Machine) -> bytes:
        """SHA-256 of the memory size and the page hashes; only changed pages are rehashed."""
        memory = machine.memory
        size = len(memory)
        fresh = size != self._size
        if fresh:
            self._start(size)
        address, pinned = _pinned_address(memory, size)
        try:
            if fresh:
                changed = self._refresh_from_zero(address, size)
            else:
                changed = self._refresh(address, 0, size)
        finally:
            del pinned
        if changed or fresh:
            self._memory_digest = hashlib.sha256(
                b"".join((_MEMORY_TAG, _U64.pack(size), *self._pages))
            ).digest()
        return self._memory_digest

    def _start(self, size: int) -> None:
        """An all-zero copy of ``size`` bytes and the page hashes of zero memory."""
        self._size = size
        self._copy = allocate_memory(size)
        self._copy_pin = (ctypes.c_char * size).from_buffer(self._copy)
        self._copy_address = ctypes.addressof(self._copy_pin)
        full, tail = divmod(size, PAGE_SIZE)
        self._pages = [_ZERO_PAGE_HASH] * full
        if tail:
            self._pages.append(_page_hash(bytes(tail)))

    def _refresh_from_zero(self, now: int, size: int) -> bool:
        """First hash: refresh only the spans of memory that are not all zero."""
        changed = False
        for start in range(0, size, _ZERO_SPAN):
            length = min(_ZERO_SPAN, size - start)
            if _memcmp(now + start, _ZERO_ADDRESS, length):
                changed |= self._refresh(now, start, start + length)
        return changed

    def _refresh(self, now: int, start: int, end: int) -> bool:
        """Rehash the changed pages of ``[start, end)`` (``start`` page aligned); update the copy."""
        before = self._copy_address
        if not _memcmp(now + start, before + start, end - start):
            return False
        if end - start > _LEAF_SPAN:
            middle = start + (end - start) // 2 // PAGE_SIZE * PAGE_SIZE
            left = self._refresh(now, start, middle)
            return self._refresh(now, middle, end) or left
        # Performance note: one copy of the span, then page compares of bytes slices
        # (a memcmp each) and one write back: fewer ctypes calls than page by page.
        span = ctypes.string_at(now + start, end - start)
        copy, pages = self._copy, self._pages
        for offset in range(0, end - start, PAGE_SIZE):
            page = span[offset : offset + PAGE_SIZE]
            page_start = start + offset
            if page != copy[page_start : page_start + len(page)]:
                pages[page_start // PAGE_SIZE] = _page_hash(page)
        ctypes.memmove(before + start, span, end - start)
        return True


def state_hash(machine: Machine) -> bytes:
    """The 32-byte state hash of ``machine``, computed from scratch."""
    return StateHasher().hash(machine)


# =============================================================================
# Trace: samples and their Merkle commitment
# =============================================================================


@dataclass(frozen=True, slots=True)
class Trace:
    """The sampled states of one run: hashes, the ticks at each sample, the final machine."""

    sample_interval: int
    samples: tuple[bytes, ...]
    sample_ticks: tuple[int, ...]
    machine: Machine


def record_trace(
    program: ForgeProgram,
    record: RunRecord,
    sample_interval: int = DEFAULT_SAMPLE_INTERVAL,
    *,
    tier: str = "reference",
    fast_tier: Any = None,
) -> Trace:
    """Replay ``record`` and sample its state hash every ``sample_interval`` ticks.

    Samples: the initial state, the first boundary where ``ticks_used >= n*K``
    for each multiple ``n*K`` above the previous sample, and the final state
    (no boundary twice); each taken after the deliveries logged for its tick.
    """
    if sample_interval < 1:
        raise ValueError(f"sample interval must be at least 1, got {sample_interval}")
    machine = record.load(program)
    replayer = Replayer(machine, record.deliveries, slice_runner(tier, fast_tier))
    hasher = StateHasher()
    replayer.deliver_due()
    samples, ticks = [hasher.hash(machine)], [machine.ticks_used]
    while not replayer.stopped:
        replayer.run_until((machine.ticks_used // sample_interval + 1) * sample_interval)
        samples.append(hasher.hash(machine))
        ticks.append(machine.ticks_used)
    return Trace(sample_interval, tuple(samples), tuple(ticks), machine)


def leaf_hash(sample: bytes) -> bytes:
    """A Merkle leaf: SHA-256 of the leaf tag and a state hash."""
    return hashlib.sha256(_LEAF_TAG + sample).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """A Merkle inner node: SHA-256 of the node tag and its children."""
    return hashlib.sha256(_NODE_TAG + left + right).digest()


def _merkle_levels(samples: Sequence[bytes], width: int | None = None) -> list[list[bytes]]:
    """Levels of the tree, leaves first; padded to ``width`` (a power of two) with the last leaf."""
    if not samples:
        raise ValueError("a trace has at least one sample")
    size = 1
    while size < max(len(samples), width or 1):
        size *= 2
    leaves = [leaf_hash(sample) for sample in samples]
    levels = [leaves + [leaves[-1]] * (size - len(leaves))]
    while len(levels[-1]) > 1:
        level = levels[-1]
        levels.append([node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)])
    return levels


def merkle_root(samples: Sequence[bytes]) -> bytes:
    """The Merkle root over ``samples``, padded to a power of two by repeating the last."""
    return _merkle_levels(samples)[-1][0]


def trace_hash(sample_interval: int, samples: Sequence[bytes]) -> Hash256:
    """The trace commitment: SHA-256 of the tag, ``K``, the sample count and the root."""
    header = _U64.pack(sample_interval) + _U64.pack(len(samples))
    return Hash256(hashlib.sha256(_TRACE_TAG + header + merkle_root(samples)).digest())


def first_divergent_sample(
    ours: Sequence[bytes], theirs: Sequence[bytes]
) -> tuple[int | None, int]:
    """Bisect two sample lists by their Merkle trees: (first differing index, comparisons).

    Both trees are padded to the same width; from the root, the walk goes to
    the left child whenever it differs, else the right, so the leaf reached is
    the leftmost differing one after ``log2(width)`` node comparisons.
    """
    width = max(len(ours), len(theirs))
    left_levels, right_levels = _merkle_levels(ours, width), _merkle_levels(theirs, width)
    comparisons = 1
    if left_levels[-1][0] == right_levels[-1][0]:
        return None, comparisons
    index = 0
    for depth in range(len(left_levels) - 2, -1, -1):
        index *= 2
        comparisons += 1
        if left_levels[depth][index] == right_levels[depth][index]:
            index += 1
    return index, comparisons


# =============================================================================
# Narrowing a divergent window to one instruction
# =============================================================================


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One instruction stepped inside a window: where it ran and the state hash after it."""

    ticks_before: int
    pc: int
    opcode: int | None
    state_after: bytes


class TraceParty(Protocol):
    """One side of a dispute: answers sample hashes and, for one window, step hashes."""

    def sample_hashes(self) -> Sequence[bytes]: ...

    def window_steps(self, sample_index: int) -> list[StepRecord]: ...


class ReplayParty:
    """A party that answers by replaying ``record`` on the reference interpreter."""

    def __init__(
        self,
        program: ForgeProgram,
        record: RunRecord,
        sample_interval: int = DEFAULT_SAMPLE_INTERVAL,
    ) -> None:
        self.program = program
        self.record = record
        self.sample_interval = sample_interval
        self._trace: Trace | None = None

    def sample_hashes(self) -> Sequence[bytes]:
        if self._trace is None:
            self._trace = record_trace(self.program, self.record, self.sample_interval)
        return self._trace.samples

    def window_steps(self, sample_index: int) -> list[StepRecord]:
        """Step every instruction from sample ``sample_index - 1`` up to sample ``sample_index``."""
        self.sample_hashes()
        assert self._trace is not None
        ticks = self._trace.sample_ticks
        start = ticks[min(sample_index - 1, len(ticks) - 1)]
        machine = self.record.load(self.program)
        replayer = Replayer(machine, self.record.deliveries, slice_runner("reference"))
        replayer.run_until(start)
        target = (machine.ticks_used // self.sample_interval + 1) * self.sample_interval
        hasher, steps = StateHasher(), []
        while not replayer.stopped and machine.ticks_used < target:
            pc, before = machine.pc, machine.ticks_used
            opcode = machine.code[pc].opcode if pc < len(machine.code) else None
            machine.step()
            replayer.deliver_due()
            steps.append(StepRecord(before, pc, opcode, hasher.hash(machine)))
        return steps


@dataclass(frozen=True, slots=True)
class StepDivergence:
    """The first instruction whose resulting state the two parties disagree on."""

    sample_index: int
    step_in_window: int
    ticks_before: int
    pc: int
    opcode: int | None

    def describe(self) -> str:
        from kforge.isa import OPCODES

        info = OPCODES.get(self.opcode) if self.opcode is not None else None
        name = info.mnemonic if info is not None else f"opcode {self.opcode}"
        return (
            f"step {self.step_in_window} of window {self.sample_index}: "
            f"{name} at pc {self.pc} after {self.ticks_before} ticks"
        )


def locate_step(ours: TraceParty, theirs: TraceParty, sample_index: int) -> StepDivergence | None:
    """The first instruction in window ``sample_index`` after which the parties' states differ.

    ``None`` for window 0 (the initial states differ: program or creation
    parameters) or when every step agrees.  When one party's window is shorter
    (it stopped), the divergence is the step where the other went on.
    """
    if sample_index <= 0:
        return None
    mine, other = ours.window_steps(sample_index), theirs.window_steps(sample_index)
    for index, step in enumerate(mine):
        if index >= len(other) or other[index].state_after != step.state_after:
            return StepDivergence(sample_index, index, step.ticks_before, step.pc, step.opcode)
    if len(other) > len(mine):
        step = other[len(mine)]
        return StepDivergence(sample_index, len(mine), step.ticks_before, step.pc, step.opcode)
    return None


# =============================================================================
# The proof object
# =============================================================================


class Signer(Protocol):
    """What signs proofs: the node's key (see :mod:`kforge.keys`)."""

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
    tier: str = "auto",
    fast_tier: Any = None,
) -> ExecutionProof:
    """Replay ``record`` (on the fast tier when available), commit to its trace and sign.

    Raises ``RecordFormatError`` when the record is for another program and
    ``ReplayDivergence`` when its delivery log does not fit the execution.
    """
    trace = record_trace(program, record, sample_interval, tier=tier, fast_tier=fast_tier)
    fields = _proof_fields(program, record, trace, key.public_raw)
    unsigned = ExecutionProof(forge_sig=b"", **fields)
    # Performance note: the proof is built once more with the signature, not copied field by field.
    return ExecutionProof(forge_sig=key.sign(unsigned.signed_bytes()), **fields)


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
    tier: str = "auto",
    fast_tier: Any = None,
    counterparty: TraceParty | None = None,
) -> VerificationReport:
    """Re-execute ``record`` and check every field of ``proof`` and its signature.

    On a trace mismatch the claimed samples are bisected against ours to the
    first divergent sample; with a ``counterparty`` (the prover answering step
    hashes, as in an interactive dispute) the divergent window is narrowed to
    the first divergent instruction.  Never raises for a bad proof: the
    problems are in the report.
    """
    problems = _check_signature(proof, public_key)
    signature_valid = not problems
    if proof.sample_interval < 1:
        return VerificationReport(False, signature_valid, (*problems, "sample_interval < 1"))
    try:
        trace = record_trace(program, record, proof.sample_interval, tier=tier, fast_tier=fast_tier)
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
        ours = ReplayParty(program, record, proof.sample_interval)
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
