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
from typing import Any, ClassVar, Final

__all__ = [
    "DATA_DIR_ENVIRONMENT",
    "AgentId",
    "ErrorCategory",
    "EventKind",
    "ForgeError",
    "Hash256",
    "Internal",
    "InvalidProgram",
    "InvalidState",
    "KingdomError",
    "MemoryQuotaExceeded",
    "MessageCode",
    "PermissionDenied",
    "SandboxNotFound",
    "ServiceNotFound",
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


@dataclass(frozen=True, slots=True, order=True)
class Hash256:
    """A 32-byte content hash or identifier; its text form is 64 lower-case hex digits."""

    raw: bytes

    SIZE: ClassVar[int] = 32

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != self.SIZE:
            raise ValueError(f"{type(self).__name__} needs exactly 32 bytes")

    @classmethod
    def of(cls, data: bytes) -> Hash256:
        """The SHA-256 of ``data``."""
        return cls(hashlib.sha256(data).digest())

    @classmethod
    def from_hex(cls, text: str) -> Hash256:
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


@dataclass(frozen=True, slots=True, order=True, repr=False)
class AgentId(Hash256):
    """The 32-byte identity of an agent (an ed25519 public key in the Kingdom)."""


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

    Each subclass fixes the ``KingdomError`` category and code it maps to.
    Guest faults are not errors: they are machine state (see ``kforge.isa.FaultCode``).
    """

    category: ClassVar[ErrorCategory] = ErrorCategory.INTERNAL
    code: ClassVar[int] = 0x05FF

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        """The ``KingdomError`` this error becomes on the wire."""
        return KingdomError(self.code, self.category, str(self).encode(), dict(context or {}))


class SandboxNotFound(ForgeError):
    category = ErrorCategory.NOT_FOUND
    code = 0x0500

    def __init__(self, sandbox_id: Hash256) -> None:
        super().__init__(f"sandbox not found: {sandbox_id}")
        self.sandbox_id = sandbox_id


class ServiceNotFound(ForgeError):
    category = ErrorCategory.NOT_FOUND
    code = 0x0500

    def __init__(self, service_id: Hash256) -> None:
        super().__init__(f"service not found: {service_id}")
        self.service_id = service_id


class InvalidState(ForgeError):
    category = ErrorCategory.CONFLICT
    code = 0x0501

    def __init__(self, state: Any, operation: str = "operation") -> None:
        name = getattr(state, "name", str(state))
        super().__init__(f"sandbox in invalid state {name} for {operation}")
        self.state = state
        self.operation = operation


class PermissionDenied(ForgeError):
    category = ErrorCategory.UNAUTHORIZED
    code = 0x0502

    def __init__(self, reason: str) -> None:
        super().__init__(f"permission denied: {reason}")
        self.reason = reason


class InvalidProgram(ForgeError):
    """A program that cannot be decoded, validated, assembled or loaded."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503

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

    def __init__(self, symbol: bytes) -> None:
        super().__init__(f"link resolution failed: unresolved symbol {show_name(symbol)}")
        self.symbol = symbol


class MemoryQuotaExceeded(ForgeError):
    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504

    def __init__(self, requested: int, max: int) -> None:
        super().__init__(f"memory quota exceeded: requested {requested}, max {max}")
        self.requested = requested
        self.max = max


class TooManySandboxes(ForgeError):
    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504

    def __init__(self, detail: str = "") -> None:
        message = "max concurrent sandboxes exceeded"
        super().__init__(f"{message}: {detail}" if detail else message)


class VaultFetchFailed(ForgeError):
    category = ErrorCategory.INTERNAL
    code = 0x0505

    def __init__(self, object_id: Hash256, reason: str = "") -> None:
        message = f"vault fetch failed for object {object_id}"
        super().__init__(f"{message}: {reason}" if reason else message)
        self.object_id = object_id
        self.reason = reason


class Internal(ForgeError):
    category = ErrorCategory.INTERNAL
    code = 0x05FF

    def __init__(self, reason: str) -> None:
        super().__init__(f"internal error: {reason}")
        self.reason = reason
