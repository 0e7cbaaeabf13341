"""The sampled trace, its Merkle commitment, and bisection of a divergent window to one step."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from kforge.core import Hash256
from kforge.limits import MAX_TRACE_SAMPLES, InputTooLarge
from kforge.machine import Machine
from kforge.program import ForgeProgram
from kforge.proofs.hashing import StateHasher
from kforge.proofs.replay import Replayer, RunRecord, slice_runner
from kforge.tiers import TierRunner, borrowed

DEFAULT_SAMPLE_INTERVAL: Final = 1 << 22
_LEAF_TAG: Final = b"\x00KFORGE-TRACE-LEAF-V1\x00"
_NODE_TAG: Final = b"\x01KFORGE-TRACE-NODE-V1\x00"
_TRACE_TAG: Final = b"KFORGE-TRACE-V1\x00"
_U64: Final = struct.Struct("<Q")


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
    tier: str | TierRunner = "reference",
    max_ticks: int | None = None,
) -> Trace:
    """Replay ``record`` and sample its state hash every ``sample_interval`` ticks.

    Samples: the initial state, the first boundary where ``ticks_used >= n*K``
    for each multiple ``n*K`` above the previous sample, and the final state
    (no boundary twice); each taken after the deliveries logged for its tick.

    With ``max_ticks`` the replay ends at the first boundary past it (a run that
    ends by then is traced exactly as without it), so a verifier spends no more
    than a proof claims.  More than ``MAX_TRACE_SAMPLES`` samples is ``InputTooLarge``.
    """
    if sample_interval < 1:
        raise ValueError(f"sample interval must be at least 1, got {sample_interval}")
    machine = record.load(program)
    with borrowed(tier) as runner:
        replayer = Replayer(machine, record.deliveries, slice_runner(runner))
        hasher = StateHasher()
        replayer.deliver_due()
        samples, ticks = [hasher.hash(machine)], [machine.ticks_used]
        while not replayer.stopped:
            target = (machine.ticks_used // sample_interval + 1) * sample_interval
            if max_ticks is not None:
                if machine.ticks_used > max_ticks:
                    break
                target = min(target, max_ticks + 1)
            replayer.run_until(target)
            samples.append(hasher.hash(machine))
            ticks.append(machine.ticks_used)
            if len(samples) > MAX_TRACE_SAMPLES:
                raise InputTooLarge("trace (samples)", len(samples), MAX_TRACE_SAMPLES)
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
        max_ticks: int | None = None,
    ) -> None:
        self.program = program
        self.record = record
        self.sample_interval = sample_interval
        self.max_ticks = max_ticks
        self._trace: Trace | None = None

    def sample_hashes(self) -> Sequence[bytes]:
        if self._trace is None:
            self._trace = record_trace(
                self.program, self.record, self.sample_interval, max_ticks=self.max_ticks
            )
        return self._trace.samples

    def window_steps(self, sample_index: int) -> list[StepRecord]:
        """Step every instruction from sample ``sample_index - 1`` up to sample ``sample_index``."""
        self.sample_hashes()
        assert self._trace is not None
        ticks = self._trace.sample_ticks
        start = ticks[min(sample_index - 1, len(ticks) - 1)]
        machine = self.record.load(self.program)
        replayer = Replayer(machine, self.record.deliveries, slice_runner())
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
