"""Core types shared by every part of kforge.

Identifiers (``Hash256``, ``AgentId``), the error categories and ``KingdomError``
that cross the message boundary, the message codes and event kinds of the Forge
protocol, and ``ForgeError``: the host-side errors of the engine with their
mapping to ``KingdomError``.  Guest-side faults live in :mod:`kforge.isa`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any, ClassVar, Final, Self

__all__ = [
    "DATA_DIR_ENVIRONMENT",
    "AgentId",
    "AmbiguousField",
    "EngineNotOpen",
    "ErrorCategory",
    "EventKind",
    "ForgeError",
    "Hash256",
    "Internal",
    "InvalidProgram",
    "InvalidRequest",
    "InvalidState",
    "KingdomError",
    "MemoryQuotaExceeded",
    "MessageCode",
    "NotSupported",
    "PermissionDenied",
    "SandboxNotFound",
    "SandboxSetAside",
    "ServiceNotFound",
    "StateCorrupted",
    "TooManySandboxes",
    "UnresolvedSymbol",
    "VaultFetchFailed",
    "default_data_dir",
    "show_name",
]

#: The environment variable naming kforge's data directory.
DATA_DIR_ENVIRONMENT: Final = "KFORGE_DATA_DIR"


def default_data_dir() -> Path:
    """Where kforge keeps its files: ``$KFORGE_DATA_DIR``, else ``~/.local/share/kforge``."""
    explicit = os.environ.get(DATA_DIR_ENVIRONMENT)
    if explicit:
        return Path(explicit).expanduser()
    return Path.home() / ".local" / "share" / "kforge"


class Hash256:
    """A 32-byte content hash or identifier; its text form is 64 lower-case hex digits.

    Immutable, hashable and ordered by its bytes.  A plain class rather than a
    dataclass, so the wire codecs (:mod:`kforge.wire`) carry it as 32 raw bytes
    (msgpack) or 64 hex digits (JSON) instead of as a record.
    """

    __slots__ = ("raw",)

    SIZE: ClassVar[int] = 32
    raw: bytes

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, bytes) or len(raw) != self.SIZE:
            raise ValueError(f"{type(self).__name__} needs exactly 32 bytes")
        object.__setattr__(self, "raw", raw)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Hash256):
            return self.raw == other.raw
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.raw)

    def __lt__(self, other: Hash256) -> bool:
        return self.raw < other.raw

    def __le__(self, other: Hash256) -> bool:
        return self.raw <= other.raw

    def __gt__(self, other: Hash256) -> bool:
        return self.raw > other.raw

    def __ge__(self, other: Hash256) -> bool:
        return self.raw >= other.raw

    def __reduce__(self) -> tuple[type[Hash256], tuple[bytes]]:
        return (type(self), (self.raw,))

    @classmethod
    def of(cls, data: bytes) -> Hash256:
        """The SHA-256 of ``data``."""
        return cls(hashlib.sha256(data).digest())

    @classmethod
    def from_hex(cls, text: str) -> Self:
        """Parse the 64-hex-digit text form; raises ``ValueError`` naming the problem."""
        if len(text) != 2 * cls.SIZE:
            raise ValueError(f"{cls.__name__} hex must be 64 digits, got {len(text)}")
        try:
            return cls(bytes.fromhex(text))
        except ValueError:
            raise ValueError(f"{cls.__name__} hex has a non-hex digit: {text!r}") from None

    @property
    def hex(self) -> str:
        return self.raw.hex()

    def __str__(self) -> str:
        return self.raw.hex()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.raw.hex()[:16]}…)"


class AgentId(Hash256):
    """The 32-byte identity of an agent (an ed25519 public key in the Kingdom)."""

    __slots__ = ()


class ErrorCategory(Enum):
    """Kingdom-wide classes of error, carried by every ``KingdomError``."""

    NOT_FOUND = "NotFound"
    CONFLICT = "Conflict"
    UNAUTHORIZED = "Unauthorized"
    INVALID_REQUEST = "InvalidRequest"
    QUOTA_EXCEEDED = "QuotaExceeded"
    INTERNAL = "Internal"


@dataclass(frozen=True, slots=True)
class KingdomError:
    """The error form that crosses the message boundary."""

    code: int
    category: ErrorCategory
    message: bytes
    context: dict[bytes, bytes] = field(default_factory=dict)


class MessageCode(IntEnum):
    """Forge message codes (requests and responses), seed §5 and §6.1."""

    SANDBOX_CREATE = 0x0500
    SANDBOX_STATUS = 0x0501
    SANDBOX_KILL = 0x0502
    EXEC_START = 0x0503
    EXEC_RESULT = 0x0504
    PROOF_REQUEST = 0x0505
    PROOF_RESULT = 0x0506
    SERVICE_CREATE = 0x0510
    SERVICE_CALL = 0x0511
    SERVICE_RESULT = 0x0512
    LINK_RESOLVE = 0x0520


class EventKind(IntEnum):
    """Forge event kinds on the bus, seed §6.2."""

    SANDBOX_CREATED = 0x4000
    SANDBOX_STARTED = 0x4001
    SANDBOX_HALTED = 0x4002
    SANDBOX_FAULTED = 0x4003
    SANDBOX_KILLED = 0x4004
    SANDBOX_BLOCKED = 0x4005
    SERVICE_CREATED = 0x4010
    SERVICE_CALLED = 0x4011
    SERVICE_COMPLETED = 0x4012
    PROOF_GENERATED = 0x4020
    LINK_COMPLETED = 0x4030


class ForgeError(Exception):
    """A host-side error of the Forge engine (seed §10).

    Each subclass fixes, as class facts, the ``KingdomError`` category and code
    it maps to and the HTTP status the server answers it with; nothing chooses
    them from the message text.  Guest faults are not errors: they are machine
    state (see ``kforge.isa.FaultCode``).
    """

    category: ClassVar[ErrorCategory] = ErrorCategory.INTERNAL
    code: ClassVar[int] = 0x05FF
    http_status: ClassVar[int] = 500

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        """The ``KingdomError`` this error becomes on the wire."""
        return KingdomError(self.code, self.category, str(self).encode(), dict(context or {}))


class SandboxNotFound(ForgeError):
    category = ErrorCategory.NOT_FOUND
    code = 0x0500
    http_status = 404

    def __init__(self, sandbox_id: Hash256) -> None:
        super().__init__(f"sandbox not found: {sandbox_id}")
        self.sandbox_id = sandbox_id


class ServiceNotFound(ForgeError):
    category = ErrorCategory.NOT_FOUND
    code = 0x0500
    http_status = 404

    def __init__(self, service_id: Hash256) -> None:
        super().__init__(f"service not found: {service_id}")
        self.service_id = service_id


class InvalidState(ForgeError):
    category = ErrorCategory.CONFLICT
    code = 0x0501
    http_status = 409

    def __init__(self, state: Any, operation: str = "operation") -> None:
        name = getattr(state, "name", str(state))
        super().__init__(f"sandbox in invalid state {name} for {operation}")
        self.state = state
        self.operation = operation


class PermissionDenied(ForgeError):
    category = ErrorCategory.UNAUTHORIZED
    code = 0x0502
    http_status = 403

    def __init__(self, reason: str) -> None:
        super().__init__(f"permission denied: {reason}")
        self.reason = reason


class InvalidProgram(ForgeError):
    """A program that cannot be decoded, validated, assembled or loaded."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, reason: str) -> None:
        super().__init__(f"program validation failed: {reason}")
        self.reason = reason


def show_name(raw: bytes) -> str:
    """A name held as bytes (a symbol, a magic number) as a message shows it: ``'gcd'``.

    Not ``b'gcd'``: people read these messages.  Bytes that are not UTF-8 are
    shown as hex (``0xff00``), other unprintable text with escapes.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()
    return f"'{text}'" if text.isprintable() else repr(text)


class UnresolvedSymbol(ForgeError):
    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400

    def __init__(self, symbol: bytes) -> None:
        super().__init__(f"link resolution failed: unresolved symbol {show_name(symbol)}")
        self.symbol = symbol


class MemoryQuotaExceeded(ForgeError):
    """Asking for less memory fits; asking again for the same does not (422)."""

    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 422

    def __init__(self, requested: int, max: int) -> None:
        super().__init__(f"memory quota exceeded: requested {requested}, max {max}")
        self.requested = requested
        self.max = max


class TooManySandboxes(ForgeError):
    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 429

    def __init__(self, detail: str = "") -> None:
        message = "max concurrent sandboxes exceeded"
        super().__init__(f"{message}: {detail}" if detail else message)


class VaultFetchFailed(ForgeError):
    """An object the vault does not hold (or holds damaged)."""

    category = ErrorCategory.INTERNAL
    code = 0x0505
    http_status = 404

    def __init__(self, object_id: Hash256, reason: str = "") -> None:
        message = f"vault fetch failed for object {object_id}"
        super().__init__(f"{message}: {reason}" if reason else message)
        self.object_id = object_id
        self.reason = reason


class SandboxSetAside(ForgeError):
    """A durable engine reopened without a live sandbox's program: the vault's copy is
    missing or damaged.  The sandbox is kept, untouched, until the program's bytes are put
    again and the engine reopens; until then every operation on it is refused."""

    category = ErrorCategory.INTERNAL
    code = 0x0505
    http_status = 503

    def __init__(self, sandbox_id: Hash256, reason: ForgeError) -> None:
        super().__init__(
            f"sandbox {sandbox_id} is set aside: {reason} "
            "(put the program's bytes again and reopen the engine)"
        )
        self.sandbox_id = sandbox_id
        self.reason = reason


class Internal(ForgeError):
    category = ErrorCategory.INTERNAL
    code = 0x05FF
    http_status = 500

    def __init__(self, reason: str) -> None:
        super().__init__(f"internal error: {reason}")
        self.reason = reason


class NotSupported(Internal):
    """An operation this engine does not offer."""

    http_status = 501

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is not supported")
        self.what = what


class EngineNotOpen(Internal):
    """The engine is not (or no longer) running: use it inside ``async with``."""

    http_status = 503

    def __init__(self, status: str) -> None:
        super().__init__(f"the engine is {status}: use it inside 'async with'")
        self.status = status


class InvalidRequest(ForgeError):
    """A request, envelope or payload that does not meet its schema.

    ``field`` names the offending field (``"memory_quota"``,
    ``"envelope.sender"``, ``"imports[2].from"``); ``reason`` says what is wrong.
    """

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0506
    http_status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid request: field {field!r}: {reason}")
        self.field = field
        self.reason = reason

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        merged = {b"field": self.field.encode()}
        merged.update(context or {})
        return super().to_kingdom_error(merged)


class AmbiguousField(InvalidRequest):
    """A field given in more than one encoding (``input`` and ``input_hex``), or unreadable in
    the one it names: the server guesses nothing (422)."""

    http_status = 422


class StateCorrupted(Internal):
    """Durable state that does not read back as it was written (a damaged or rewritten row).

    ``where`` names the store and the row; ``reason`` what failed.
    """

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where} is damaged: {reason}")
        self.where = where
        self.damage = reason
