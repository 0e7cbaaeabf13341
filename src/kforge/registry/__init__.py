"""The program registry: an append-only, hash-chained SQLite ledger of programs.

Programs are proposed by name and version, verified through gates (decode,
static, policy, test, proof), promoted to TRUSTED by a signed request of an
allowed agent, and revoked the same way; an engine that runs only TRUSTED
programs asks :meth:`Registry.check_runnable` at every sandbox creation.  See
``docs/registry.md``.
"""

from kforge.registry.errors import (
    InvalidName,
    InvalidTransition,
    LedgerTampered,
    PolicyError,
    ProgramNotTrusted,
    ProgramRevoked,
    PromotionRefused,
    RegistryError,
    UnknownProgram,
    VectorFormatError,
)
from kforge.registry.ledger import SCHEMA_VERSION, Ledger, LedgerCheck
from kforge.registry.model import (
    GATE_ORDER,
    FailureKind,
    Gate,
    GateFailure,
    GateResult,
    Manifest,
    Status,
    TestVector,
    VerifyOutcome,
    parse_vectors,
)
from kforge.registry.policy import RegistryPolicy, load_policy
from kforge.registry.service import LEDGER_FILE_NAME, Entry, LogRecord, Registry, TrustPolicy
from kforge.registry.signing import (
    StatusRequest,
    agent_id,
    create_agent_key,
    load_agent_key,
    parse_request,
)

__all__ = [
    "GATE_ORDER",
    "LEDGER_FILE_NAME",
    "SCHEMA_VERSION",
    "Entry",
    "FailureKind",
    "Gate",
    "GateFailure",
    "GateResult",
    "InvalidName",
    "InvalidTransition",
    "Ledger",
    "LedgerCheck",
    "LedgerTampered",
    "LogRecord",
    "Manifest",
    "PolicyError",
    "ProgramNotTrusted",
    "ProgramRevoked",
    "PromotionRefused",
    "Registry",
    "RegistryError",
    "RegistryPolicy",
    "Status",
    "StatusRequest",
    "TestVector",
    "TrustPolicy",
    "UnknownProgram",
    "VectorFormatError",
    "VerifyOutcome",
    "agent_id",
    "create_agent_key",
    "load_agent_key",
    "load_policy",
    "parse_request",
    "parse_vectors",
]
