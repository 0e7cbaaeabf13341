"""Errors of the program registry: host-side ``ForgeError``s carrying their facts."""

from __future__ import annotations

from typing import Any

from kforge.core import ErrorCategory, ForgeError, Hash256

__all__ = [
    "InvalidName",
    "InvalidTransition",
    "LedgerTampered",
    "PolicyError",
    "ProgramNotTrusted",
    "ProgramRevoked",
    "PromotionRefused",
    "RegistryError",
    "UnknownProgram",
    "VectorFormatError",
]


class RegistryError(ForgeError):
    """Any refusal of the program registry."""

    category = ErrorCategory.INVALID_REQUEST
    code = 0x0503
    http_status = 400


class UnknownProgram(RegistryError):
    """No ledger entry for a name and version, or for a program id."""

    category = ErrorCategory.NOT_FOUND
    code = 0x0500
    http_status = 404

    def __init__(self, what: str) -> None:
        super().__init__(f"no such program in the registry: {what}")
        self.what = what


class InvalidName(RegistryError):
    """A program name, version or test vector name that may not be used (it becomes a file name)."""

    def __init__(self, what: str, name: str, rule: str) -> None:
        super().__init__(f"{what} {name[:80]!r} is not allowed: {rule}")
        self.what = what
        self.name = name
        self.rule = rule


class InvalidTransition(RegistryError):
    """A status change the lifecycle does not allow (e.g. PROPOSED → TRUSTED)."""

    category = ErrorCategory.CONFLICT
    code = 0x0501
    http_status = 409

    def __init__(self, program: str, current: str, wanted: str, reason: str) -> None:
        super().__init__(f"{program}: cannot go from {current} to {wanted}: {reason}")
        self.program = program
        self.current = current
        self.wanted = wanted
        self.reason = reason


class PromotionRefused(RegistryError):
    """A promotion or revocation request that is not acceptable (agent, signature, gates)."""

    category = ErrorCategory.UNAUTHORIZED
    code = 0x0502
    http_status = 403

    def __init__(self, program: str, reason: str, facts: dict[str, Any] | None = None) -> None:
        super().__init__(f"{program}: promotion refused: {reason}")
        self.program = program
        self.reason = reason
        self.facts = dict(facts or {})


class ProgramNotTrusted(RegistryError):
    """A program id the ledger does not hold as TRUSTED, refused at sandbox creation."""

    category = ErrorCategory.UNAUTHORIZED
    code = 0x0502
    http_status = 403

    def __init__(self, program_id: Hash256, status: str) -> None:
        super().__init__(f"program {program_id} is not trusted (status: {status})")
        self.program_id = program_id
        self.status = status


class ProgramRevoked(ProgramNotTrusted):
    """A program id whose ledger entry was revoked; names who revoked it, when and why."""

    def __init__(
        self, program_id: Hash256, entry: str, agent: str, at_ms: int, reason: str
    ) -> None:
        RegistryError.__init__(
            self,
            f"program {program_id} ({entry}) was revoked by agent {agent} at {at_ms} ms: {reason}",
        )
        self.program_id = program_id
        self.status = "REVOKED"
        self.entry = entry
        self.agent = agent
        self.at_ms = at_ms
        self.reason = reason


class LedgerTampered(RegistryError):
    """A ledger row or artifact whose stored hash no longer matches its content."""

    category = ErrorCategory.INTERNAL
    code = 0x05FF
    http_status = 500

    def __init__(self, problems: list[str]) -> None:
        super().__init__("ledger integrity check failed: " + "; ".join(problems))
        self.problems = tuple(problems)


class PolicyError(RegistryError):
    """A policy file that cannot be read or holds a bad value."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: bad registry policy: {reason}")
        self.source = source
        self.reason = reason


class VectorFormatError(RegistryError):
    """A test vector file that cannot be read or holds a bad value."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: bad test vectors: {reason}")
        self.source = source
        self.reason = reason
