"""Machine snapshots: checkpoint a machine to bytes, restore it, fork it.

A snapshot is ``header || body`` (format: docs/proofs.md §6):

* header (44 bytes): magic ``KFSNAP``, u16 version, u32 body length, and the
  SHA-256 of the body, so truncation and bit flips are caught before parsing;
* body: a msgpack map of every machine field; memory stored sparse (the
  indices of non-zero 4 KiB pages and their bytes, zlib-compressed), and the
  machine's state hash (:func:`kforge.proofs.state_hash`), recomputed and
  checked on restore.

Any machine between slices can be checkpointed: READY, RUNNING, BLOCKED,
HALTED or FAULTED.  A restored machine continues exactly as the original would.
Bad bytes raise :class:`SnapshotError` naming the problem, never anything else.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable
from typing import Any, Final

import msgpack

from kforge.core import ErrorCategory, ForgeError, Hash256
from kforge.isa import CHANNEL_COUNT, REGISTER_COUNT, FaultCode
from kforge.machine import Delivery, Machine, MachineState
from kforge.memory import MAX_MEMORY_QUOTA, allocate_memory
from kforge.program import ForgeProgram, decode_program
from kforge.proofs.hashing import PAGE_SIZE, state_hash

__all__ = [
    "SNAPSHOT_VERSION",
    "ProgramLookup",
    "SnapshotError",
    "SnapshotProgramMissing",
    "checkpoint",
    "fork",
    "restore",
]

SNAPSHOT_VERSION: Final = 1
_MAGIC: Final = b"KFSNAP"
_HEADER: Final = struct.Struct("<6sHI32s")
_REGISTERS: Final = struct.Struct(f"<{REGISTER_COUNT}Q")
_ZERO_PAGE_ARRAY: Final = bytearray(PAGE_SIZE)

#: Finds a program by id when the snapshot does not carry its bytes.
ProgramLookup = Callable[[Hash256], "ForgeProgram | None"]


class SnapshotError(ForgeError):
    """Bytes that are not a valid snapshot (truncated, corrupt, tampered or unknown)."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, reason: str) -> None:
        super().__init__(f"bad machine snapshot: {reason}")
        self.reason = reason


class SnapshotProgramMissing(SnapshotError):
    """A snapshot that names its program by id only, which the lookup cannot give.

    The snapshot itself may be sound: only the machine that needs this program (say,
    a damaged vault object) cannot be restored, so a caller restoring many can go on.
    """

    def __init__(self, program_id: Hash256) -> None:
        super().__init__(f"program {program_id} not found by the lookup")
        self.program_id = program_id


# ----------------------------------------------------------------- writing


def _sparse_memory(memory: Any) -> dict[str, Any]:
    """Indices of the non-zero pages (u32 LE) and their bytes, zlib-compressed."""
    view = memoryview(memory)
    indices: list[int] = []
    compressor = zlib.compressobj(1)
    chunks = []
    for start in range(0, len(view), PAGE_SIZE):
        page = view[start : start + PAGE_SIZE]
        # Performance note: bytearray == buffer is one memcmp; memoryview == bytes goes
        # item by item (~50x slower).
        if _ZERO_PAGE_ARRAY[: len(page)] != page:
            indices.append(start // PAGE_SIZE)
            chunks.append(compressor.compress(page))
    chunks.append(compressor.flush())
    view.release()
    return {
        "page_size": PAGE_SIZE,
        "pages": struct.pack(f"<{len(indices)}I", *indices),
        "data": b"".join(chunks),
    }


def checkpoint(machine: Machine, *, include_program: bool = True) -> bytes:
    """The snapshot bytes of ``machine`` (which must be between slices).

    Without ``include_program`` only the program id is stored and
    :func:`restore` needs a ``program_lookup``.
    """
    body = {
        "program_id": machine.program.program_id.raw,
        "program": machine.program.encoded if include_program else None,
        "state": machine.state.value,
        "pc": machine.pc,
        "sp": machine.sp,
        "registers": _REGISTERS.pack(*machine.registers),
        "flags": [machine.zero, machine.carry, machine.overflow, machine.halt],
        "ticks_used": machine.ticks_used,
        "tick_budget": machine.tick_budget,
        "memory_quota": machine.memory_quota,
        "heap_start": machine.heap_start,
        "stack_start": machine.stack_start,
        "grants": sorted(machine.grants),
        "message_limit": machine.message_limit,
        "held_bytes": machine.held_bytes,
        "inbound": [[ch, list(queue)] for ch, queue in sorted(machine.inbound.items())],
        "outbound": [[ch, data] for ch, data in machine.outbound],
        "stdout": bytes(machine.stdout),
        "stderr": bytes(machine.stderr),
        "deliveries": [[d.ticks_used, d.channel, d.data] for d in machine.deliveries],
        "fault": None if machine.fault is None else int(machine.fault),
        "fault_detail": machine.fault_detail,
        "blocked_channel": machine.blocked_channel,
        "memory": _sparse_memory(machine.memory),
        "state_hash": state_hash(machine),
    }
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    digest = hashlib.sha256(packed).digest()
    return _HEADER.pack(_MAGIC, SNAPSHOT_VERSION, len(packed), digest) + packed


# ----------------------------------------------------------------- reading


def _body(blob: bytes) -> dict[str, Any]:
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise SnapshotError(f"expected bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < _HEADER.size:
        raise SnapshotError(f"{len(blob)} bytes is shorter than the {_HEADER.size}-byte header")
    magic, version, length, digest = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise SnapshotError(f"bad magic {magic!r}")
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(f"unsupported snapshot version {version}")
    packed = blob[_HEADER.size :]
    if len(packed) != length:
        raise SnapshotError(f"body is {len(packed)} bytes, header says {length}")
    if hashlib.sha256(packed).digest() != digest:
        raise SnapshotError("body checksum mismatch (corrupt or tampered)")
    try:
        body = msgpack.unpackb(packed, raw=False)
    except Exception as error:  # msgpack raises several unrelated types
        raise SnapshotError(f"body is not msgpack ({type(error).__name__})") from None
    if not isinstance(body, dict):
        raise SnapshotError("body is not a map")
    return body


def _get(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in body:
        raise SnapshotError(f"missing field {key!r}")
    value = body[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise SnapshotError(f"field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _u64(body: dict[str, Any], key: str) -> int:
    value: int = _get(body, key, int)
    if not 0 <= value < 1 << 64:
        raise SnapshotError(f"field {key!r} = {value} is outside 0..2^64-1")
    return value


def _optional_u64(body: dict[str, Any], key: str) -> int | None:
    return None if body.get(key, 0) is None else _u64(body, key)


def _program(body: dict[str, Any], lookup: ProgramLookup | None) -> ForgeProgram:
    program_id = Hash256(_fixed_bytes(body, "program_id", 32))
    encoded = body.get("program")
    if encoded is not None:
        try:
            program = decode_program(_get(body, "program", bytes))
        except ForgeError as error:
            raise SnapshotError(f"program bytes: {error}") from None
    elif lookup is not None:
        found = lookup(program_id)
        if found is None:
            raise SnapshotProgramMissing(program_id)
        program = found
    else:
        raise SnapshotError("snapshot holds no program bytes and no program_lookup was given")
    if program.program_id != program_id:
        raise SnapshotError(f"program is {program.program_id}, snapshot says {program_id}")
    return program


def _fixed_bytes(body: dict[str, Any], key: str, size: int) -> bytes:
    value: bytes = _get(body, key, bytes)
    if len(value) != size:
        raise SnapshotError(f"field {key!r} has {len(value)} bytes, not {size}")
    return value


def _memory(body: dict[str, Any], quota: int) -> Any:
    spec = _get(body, "memory", dict)
    if spec.get("page_size") != PAGE_SIZE:
        raise SnapshotError(f"memory page size {spec.get('page_size')!r} is not {PAGE_SIZE}")
    pages, data = _get(spec, "pages", bytes), _get(spec, "data", bytes)
    if len(pages) % 4:
        raise SnapshotError("memory page index list is not whole u32s")
    indices = struct.unpack(f"<{len(pages) // 4}I", pages)
    page_count = -(-quota // PAGE_SIZE)
    if list(indices) != sorted(set(indices)) or (indices and indices[-1] >= page_count):
        raise SnapshotError("memory page indices are unsorted, repeated or past the quota")
    memory = allocate_memory(quota)
    # Performance note: pages are inflated one at a time straight into the machine's
    # memory, so a small body claiming gigabytes is found out a page at a time, with
    # no second copy of the whole memory; a page listed must be non-zero, as the writer
    # lists only those, so a snapshot cannot make zero pages take real memory.
    decompressor = zlib.decompressobj()
    pending = data
    for index in indices:
        start = index * PAGE_SIZE
        size = min(PAGE_SIZE, quota - start)
        page = _inflate(decompressor, pending, size)
        pending = decompressor.unconsumed_tail
        if page == _ZERO_PAGE_ARRAY[:size]:
            raise SnapshotError(f"memory page {index} is listed but all zero")
        memory[start : start + size] = page
    try:
        extra = decompressor.decompress(pending, 1)  # reads the stream's end, no more
    except zlib.error as error:
        raise SnapshotError(f"memory data does not decompress ({error})") from None
    if extra or not decompressor.eof or decompressor.unused_data:
        raise SnapshotError("memory data holds more than its listed pages")
    return memory


def _inflate(decompressor: Any, data: bytes, size: int) -> bytes:
    """Exactly ``size`` bytes from ``decompressor`` fed ``data``, else ``SnapshotError``."""
    try:
        page = decompressor.decompress(data, size)
        if len(page) < size and not decompressor.eof:
            page += decompressor.decompress(decompressor.unconsumed_tail, size - len(page))
    except zlib.error as error:
        raise SnapshotError(f"memory data does not decompress ({error})") from None
    if len(page) != size:
        raise SnapshotError("memory data is shorter than its listed pages")
    return bytes(page)


def _queue_messages(value: Any, what: str) -> list[bytes]:
    if not isinstance(value, list) or not all(isinstance(m, bytes) for m in value):
        raise SnapshotError(f"{what} is not a list of byte strings")
    return list(value)


def _inbound(body: dict[str, Any]) -> dict[int, list[bytes]]:
    inbound: dict[int, list[bytes]] = {}
    for entry in _get(body, "inbound", list):
        if not isinstance(entry, list) or len(entry) != 2 or type(entry[0]) is not int:
            raise SnapshotError("an inbound entry is not [channel, messages]")
        channel = entry[0]
        if not 0 <= channel < CHANNEL_COUNT or channel in inbound:
            raise SnapshotError(f"inbound channel {channel} is invalid or repeated")
        inbound[channel] = _queue_messages(entry[1], f"inbound queue {channel}")
    return inbound


def _pairs(body: dict[str, Any], key: str, size: int) -> list[list[Any]]:
    entries: list[list[Any]] = _get(body, key, list)
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != size:
            raise SnapshotError(f"an entry of {key!r} does not have {size} parts")
        if not all(type(x) is int for x in entry[:-1]) or not isinstance(entry[-1], bytes):
            raise SnapshotError(f"an entry of {key!r} has the wrong types")
    return entries


def _enum(body: dict[str, Any], key: str, kind: Any) -> Any:
    value = body.get(key)
    try:
        return None if value is None and key != "state" else kind(value)
    except (ValueError, TypeError):
        raise SnapshotError(f"field {key!r} = {value!r} is not a valid {kind.__name__}") from None


def _check_layout(machine: Machine) -> None:
    """The invariants the interpreter and the fast tier rely on."""
    if not 8 <= machine.memory_quota <= MAX_MEMORY_QUOTA:
        raise SnapshotError(f"memory quota {machine.memory_quota} is out of range")
    if not machine.heap_start <= machine.sp <= machine.stack_start <= machine.memory_quota:
        raise SnapshotError("heap_start <= sp <= stack_start <= memory_quota does not hold")
    if machine.stack_start != machine.memory_quota & ~7:
        raise SnapshotError("stack_start is not the quota rounded down to 8")
    if machine.ticks_used > machine.tick_budget:
        raise SnapshotError("ticks_used exceeds tick_budget")
    if (machine.state is MachineState.BLOCKED) != (machine.blocked_channel is not None):
        raise SnapshotError("blocked_channel is set exactly when the state is BLOCKED")
    if (machine.state is MachineState.FAULTED) != (machine.fault is not None):
        raise SnapshotError("fault is set exactly when the state is FAULTED")
    if not frozenset({0, 1, 2}) <= machine.grants <= frozenset(range(8)):
        raise SnapshotError(f"grants {sorted(machine.grants)} are not 0..2 plus some of 3..7")


def _build(body: dict[str, Any], program: ForgeProgram) -> Machine:
    machine = Machine.__new__(Machine)
    machine.program, machine.code = program, program.code
    machine.tier_state = None
    machine.state = _enum(body, "state", MachineState)
    machine.pc, machine.sp = _u64(body, "pc"), _u64(body, "sp")
    machine.registers = list(_REGISTERS.unpack(_fixed_bytes(body, "registers", _REGISTERS.size)))
    flags = _get(body, "flags", list)
    if len(flags) != 4 or not all(isinstance(flag, bool) for flag in flags):
        raise SnapshotError("flags are not four booleans")
    machine.zero, machine.carry, machine.overflow, machine.halt = flags
    machine.ticks_used, machine.tick_budget = _u64(body, "ticks_used"), _u64(body, "tick_budget")
    machine.memory_quota = _u64(body, "memory_quota")
    machine.heap_start, machine.stack_start = _u64(body, "heap_start"), _u64(body, "stack_start")
    machine.grants = frozenset(_u64({"grant": g}, "grant") for g in _get(body, "grants", list))
    machine.message_limit, machine.held_bytes = (
        _u64(body, "message_limit"),
        _u64(body, "held_bytes"),
    )
    machine.inbound = _inbound(body)
    # empty stays the shared empty value a new machine starts with (see Machine)
    machine.outbound = [(ch, data) for ch, data in _pairs(body, "outbound", 2)] or ()
    machine.stdout = bytearray(_get(body, "stdout", bytes)) or b""
    machine.stderr = bytearray(_get(body, "stderr", bytes)) or b""
    machine.deliveries = [Delivery(t, ch, d) for t, ch, d in _pairs(body, "deliveries", 3)] or ()
    machine.fault = _enum(body, "fault", FaultCode)
    machine.fault_detail = _optional_u64(body, "fault_detail")
    machine.blocked_channel = _optional_u64(body, "blocked_channel")
    _check_layout(machine)
    machine.memory = _memory(body, machine.memory_quota)
    return machine


def restore(blob: bytes, program_lookup: ProgramLookup | None = None) -> Machine:
    """The machine checkpointed in ``blob``, ready to continue.

    ``program_lookup`` finds the program when the snapshot holds only its id.
    Raises ``SnapshotError`` for truncated, corrupt, tampered or unknown bytes.
    """
    body = _body(blob)
    machine = _build(body, _program(body, program_lookup))
    if state_hash(machine) != _fixed_bytes(body, "state_hash", 32):
        raise SnapshotError("state hash mismatch: the restored state is not the one saved")
    return machine


def fork(machine: Machine, count: int) -> list[Machine]:
    """``count`` independent machines in ``machine``'s state (memory and queues copied)."""
    if count < 0:
        raise ValueError(f"cannot fork {count} machines")
    return [machine.copy() for _ in range(count)]
