"""Replay: re-running a recorded sandbox run bit for bit, on either tier.

A run is determined by its program, the parameters it was created with (input,
environment, grants, memory quota, tick budget, message limit) and the log of
inbound deliveries, each stamped with the ``ticks_used`` at which it became
visible (spec §5).  A :class:`RunRecord` holds all of it except the program,
which it names by id.  :func:`replay` loads a fresh machine and drives it with
slices that end exactly at each logged delivery tick, so the machine sees every
message at the same instruction boundary as the original did.

Why slicing to a tick is exact: every executed instruction costs at least one
tick, so at most one instruction boundary has a given ``ticks_used`` -- except
that a RECV on an empty queue blocks without charging.  Delivering all messages
logged for tick ``t`` at once, before resuming, is therefore equivalent to the
original's interleaving of deliveries and blocked RECVs at ``t``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import msgpack

from kforge.core import ErrorCategory, ForgeError, Hash256
from kforge.machine import DEFAULT_MESSAGE_LIMIT, Delivery, Machine, MachineState
from kforge.program import ForgeProgram
from kforge.tiers import REFERENCE, TierRunner, borrowed

__all__ = [
    "RECORD_FORMAT_VERSION",
    "RecordFormatError",
    "ReplayDivergence",
    "Replayer",
    "RunRecord",
    "SliceRunner",
    "replay",
    "slice_runner",
]

#: Version of the msgpack form of :class:`RunRecord` (see docs/proofs.md).
RECORD_FORMAT_VERSION: Final = 1
_RECORD_HASH_TAG: Final = b"KFORGE-RUN-RECORD-V1\x00"

#: Runs one execution slice: ``(machine, max_ticks) -> state``; ``None`` runs to the end.
SliceRunner = Callable[[Machine, "int | None"], MachineState]


class ReplayDivergence(ForgeError):
    """The record cannot be replayed: the machine never reaches a logged delivery as logged."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, reason: str, *, ticks_used: int, state: MachineState) -> None:
        super().__init__(
            f"replay diverged from the record at {ticks_used} ticks ({state.value}): {reason}"
        )
        self.reason = reason
        self.ticks_used = ticks_used
        self.state = state


class RecordFormatError(ForgeError):
    """Bytes that are not a well-formed run record, or a record for another program."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, reason: str) -> None:
        super().__init__(f"bad run record: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RunRecord:
    """Everything besides the program that determines a run.

    ``environment`` holds ``(key, value)`` pairs in ascending key order and
    ``grants`` the extra channels in ascending order, so equal runs have equal
    records (and equal :attr:`record_hash`).
    """

    program_id: Hash256
    input: bytes = b""
    environment: tuple[tuple[bytes, bytes], ...] = ()
    grants: tuple[int, ...] = ()
    memory_quota: int = 65536
    tick_budget: int = 1_000_000
    message_limit: int = DEFAULT_MESSAGE_LIMIT
    deliveries: tuple[Delivery, ...] = field(default=())

    @classmethod
    def create(
        cls,
        program: ForgeProgram,
        *,
        input: bytes = b"",
        environment: Mapping[bytes, bytes] | None = None,
        grants: Iterable[int] = (),
        memory_quota: int = 65536,
        tick_budget: int = 1_000_000,
        message_limit: int = DEFAULT_MESSAGE_LIMIT,
        deliveries: Iterable[Delivery] = (),
    ) -> RunRecord:
        """A record of ``program`` created with these parameters (``Machine.load``'s)."""
        return cls(
            program_id=program.program_id,
            input=bytes(input),
            environment=tuple(sorted((environment or {}).items())),
            grants=tuple(sorted(set(grants))),
            memory_quota=memory_quota,
            tick_budget=tick_budget,
            message_limit=message_limit,
            deliveries=tuple(deliveries),
        )

    def with_deliveries(self, deliveries: Iterable[Delivery]) -> RunRecord:
        """This record with the delivery log replaced (e.g. by ``machine.deliveries``)."""
        return replace(self, deliveries=tuple(deliveries))

    def load(self, program: ForgeProgram) -> Machine:
        """A fresh READY machine for this record.

        Raises ``RecordFormatError`` when ``program`` is not the recorded program,
        and whatever ``Machine.load`` raises for parameters that do not fit.
        """
        if program.program_id != self.program_id:
            raise RecordFormatError(
                f"record is for program {self.program_id}, not {program.program_id}"
            )
        return Machine.load(
            program,
            memory_quota=self.memory_quota,
            tick_budget=self.tick_budget,
            input=self.input,
            environment=dict(self.environment),
            grants=self.grants,
            message_limit=self.message_limit,
        )

    # ------------------------------------------------------------- encoding

    def to_bytes(self) -> bytes:
        """The canonical msgpack form (an array in field order, see docs/proofs.md)."""
        body = [
            RECORD_FORMAT_VERSION,
            self.program_id.raw,
            self.input,
            [[key, value] for key, value in self.environment],
            list(self.grants),
            self.memory_quota,
            self.tick_budget,
            self.message_limit,
            [[d.ticks_used, d.channel, d.data] for d in self.deliveries],
        ]
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return packed

    @classmethod
    def from_bytes(cls, blob: bytes) -> RunRecord:
        """Parse :meth:`to_bytes` output; raises ``RecordFormatError`` naming the problem."""
        try:
            body = msgpack.unpackb(blob, raw=False, strict_map_key=True)
        except Exception as error:  # msgpack raises several unrelated types
            raise RecordFormatError(f"not msgpack ({type(error).__name__}: {error})") from None
        return _record_from_body(body)

    @property
    def record_hash(self) -> Hash256:
        """SHA-256 of a domain tag and :meth:`to_bytes`: what a proof commits to."""
        return Hash256(hashlib.sha256(_RECORD_HASH_TAG + self.to_bytes()).digest())


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RecordFormatError(f"{what} has the wrong type ({type(value).__name__})")
    return value


def _unsigned(value: Any, what: str) -> int:
    number: int = _expect(value, int, what)
    if not 0 <= number < 1 << 64:
        raise RecordFormatError(f"{what} {number} is outside 0..2^64-1")
    return number


def _record_from_body(body: Any) -> RunRecord:
    fields = _expect(body, list, "record")
    if len(fields) != 9:
        raise RecordFormatError(f"expected 9 fields, got {len(fields)}")
    version, program_id, data, environment, grants, quota, budget, limit, deliveries = fields
    if version != RECORD_FORMAT_VERSION:
        raise RecordFormatError(f"unsupported record version {version!r}")
    raw_id: bytes = _expect(program_id, bytes, "program id")
    if len(raw_id) != Hash256.SIZE:
        raise RecordFormatError(f"program id has {len(raw_id)} bytes, not 32")
    pairs = [
        _expect(pair, list, "environment entry")
        for pair in _expect(environment, list, "environment")
    ]
    if any(len(pair) != 2 for pair in pairs):
        raise RecordFormatError("an environment entry is not a key-value pair")
    logged = [_delivery(entry) for entry in _expect(deliveries, list, "deliveries")]
    return RunRecord(
        program_id=Hash256(raw_id),
        input=_expect(data, bytes, "input"),
        environment=tuple(
            (_expect(k, bytes, "environment key"), _expect(v, bytes, "environment value"))
            for k, v in pairs
        ),
        grants=tuple(_unsigned(g, "grant") for g in _expect(grants, list, "grants")),
        memory_quota=_unsigned(quota, "memory quota"),
        tick_budget=_unsigned(budget, "tick budget"),
        message_limit=_unsigned(limit, "message limit"),
        deliveries=tuple(logged),
    )


def _delivery(entry: Any) -> Delivery:
    parts = _expect(entry, list, "delivery")
    if len(parts) != 3:
        raise RecordFormatError("a delivery is not [ticks_used, channel, data]")
    ticks, channel, data = parts
    return Delivery(
        _unsigned(ticks, "delivery tick"),
        _unsigned(channel, "delivery channel"),
        _expect(data, bytes, "delivery data"),
    )


# ----------------------------------------------------------------- driving


def slice_runner(runner: TierRunner = REFERENCE) -> SliceRunner:
    """A :data:`SliceRunner` on ``runner``'s tier."""

    def run(machine: Machine, max_ticks: int | None) -> MachineState:
        return runner.run(machine, max_ticks)

    return run


_ACTIVE: Final = (MachineState.READY, MachineState.RUNNING)


class Replayer:
    """Drives a machine through a delivery log, stopping at chosen tick counts.

    The machine must be freshly loaded from the record (or restored to a point
    of it, with ``deliveries`` the not-yet-delivered rest of the log).
    """

    def __init__(
        self, machine: Machine, deliveries: Sequence[Delivery], runner: SliceRunner
    ) -> None:
        self.machine = machine
        self.pending = list(deliveries)
        self.runner = runner
        self._next = 0

    @property
    def stopped(self) -> bool:
        """Whether the machine can make no more progress: final, or blocked with no message due."""
        self.deliver_due()
        return self.machine.state not in _ACTIVE

    def deliver_due(self) -> None:
        """Deliver every logged message whose tick has come; raise if one was passed by."""
        machine = self.machine
        while self._next < len(self.pending):
            delivery = self.pending[self._next]
            if delivery.ticks_used > machine.ticks_used:
                return
            if delivery.ticks_used < machine.ticks_used:
                self._diverged(f"passed delivery logged at tick {delivery.ticks_used}")
            if machine.state.is_final:
                self._diverged(f"machine stopped before delivery at tick {delivery.ticks_used}")
            machine.deliver(delivery.channel, delivery.data)
            self._next += 1

    def run_until(self, target: int | None) -> None:
        """Run to the first instruction boundary where ``ticks_used >= target``.

        ``None`` runs until the machine stops.  Logged messages are delivered
        as their ticks come up, including those due at the stopping boundary.
        Raises ``ReplayDivergence`` when the log cannot have come from this run.
        """
        machine = self.machine
        while not self.stopped:
            if target is not None and machine.ticks_used >= target:
                return
            stop = target
            if self._next < len(self.pending):
                due = self.pending[self._next].ticks_used
                stop = due if stop is None else min(stop, due)
            self.runner(machine, None if stop is None else stop - machine.ticks_used)
        if self._next < len(self.pending):
            due = self.pending[self._next].ticks_used
            self._diverged(f"machine cannot reach delivery logged at tick {due}")

    def _diverged(self, reason: str) -> None:
        raise ReplayDivergence(reason, ticks_used=self.machine.ticks_used, state=self.machine.state)


def replay(
    program: ForgeProgram,
    record: RunRecord,
    *,
    tier: str | TierRunner = "reference",
    until_ticks: int | None = None,
) -> Machine:
    """Reproduce the recorded run of ``program``; returns the machine where it ended.

    With ``until_ticks`` the replay stops at the first boundary at or past that
    tick count instead.  The machine's own delivery log equals the record's.
    Raises ``RecordFormatError`` for the wrong program and ``ReplayDivergence``
    when the log is inconsistent with the execution.
    """
    machine = record.load(program)
    with borrowed(tier) as runner:
        Replayer(machine, record.deliveries, slice_runner(runner)).run_until(until_ticks)
    return machine
