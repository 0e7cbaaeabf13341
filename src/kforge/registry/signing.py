"""Signed status-change requests and the agent key files that sign them.

A request is canonical: the domain tag ``KFORGE-REGISTRY-REQUEST-V1\\0`` followed
by msgpack ``[1, name, version, program_id (bin32, or empty), from, to, reason,
timestamp_ms, agent (bin32)]``.  The agent signs those bytes with ed25519; the
registry checks the signature against the agent id (the raw public key), the
agent against the policy, ``from`` against the current status (so a request
cannot be replayed once the status moved) and the timestamp against its clock.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from kforge.core import AgentId
from kforge.proofs.keys import KeyFileError, NodeKey

__all__ = [
    "REQUEST_TAG",
    "StatusRequest",
    "agent_id",
    "create_agent_key",
    "load_agent_key",
    "parse_request",
    "signature_valid",
]

REQUEST_TAG: Final = b"KFORGE-REGISTRY-REQUEST-V1\x00"
_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """A request to move one ledger entry from one status to another."""

    name: str
    version: str
    program_id: bytes  # 32 bytes, or empty when the proposal never decoded
    from_status: str
    to_status: str
    reason: str
    timestamp_ms: int
    agent: AgentId

    def canonical_bytes(self) -> bytes:
        """What the agent signs."""
        body = [
            _VERSION,
            self.name,
            self.version,
            self.program_id,
            self.from_status,
            self.to_status,
            self.reason,
            self.timestamp_ms,
            self.agent.raw,
        ]
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return REQUEST_TAG + packed

    def sign(self, key: NodeKey) -> bytes:
        """The signature of :meth:`canonical_bytes` by ``key`` (which must be the agent)."""
        if key.public_raw != self.agent.raw:
            raise ValueError("the key does not belong to the request's agent")
        return key.sign(self.canonical_bytes())


#: The msgpack type of each field of a request body, in order.
_FIELD_TYPES: Final = (int, str, str, bytes, str, str, str, int, bytes)


def parse_request(blob: bytes) -> StatusRequest:
    """The request in its canonical bytes; raises ``ValueError`` when they are not one.

    Every field is type-checked before use: a number where bytes belong is refused,
    never turned into that many zero bytes.
    """
    if not blob.startswith(REQUEST_TAG):
        raise ValueError("not a registry request (bad tag)")
    try:
        body = msgpack.unpackb(blob[len(REQUEST_TAG) :], raw=False)
    except Exception as error:  # msgpack raises several unrelated types for bad bytes
        raise ValueError(f"not a registry request ({type(error).__name__})") from None
    if not isinstance(body, list) or len(body) != 9 or body[0] != _VERSION:
        raise ValueError("not a version 1 registry request")
    for value, kind in zip(body, _FIELD_TYPES, strict=True):
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"a registry request field is a {type(value).__name__}, not {kind}")
    if len(body[8]) != AgentId.SIZE:
        raise ValueError("a registry request's agent is not a 32-byte key")
    request = StatusRequest(
        name=body[1],
        version=body[2],
        program_id=body[3],
        from_status=body[4],
        to_status=body[5],
        reason=body[6],
        timestamp_ms=body[7],
        agent=AgentId(body[8]),
    )
    if request.canonical_bytes() != blob:
        raise ValueError("registry request is not canonical")
    return request


def signature_valid(request: StatusRequest, signature: bytes) -> bool:
    """Whether ``signature`` is the agent's ed25519 signature of the request."""
    try:
        Ed25519PublicKey.from_public_bytes(request.agent.raw).verify(
            signature, request.canonical_bytes()
        )
    except (InvalidSignature, ValueError):
        return False
    return True


def agent_id(key: NodeKey) -> AgentId:
    """The agent id of a key: its raw ed25519 public key."""
    return AgentId(key.public_raw)


def create_agent_key(path: str | Path) -> NodeKey:
    """A new agent key written to ``path`` (PKCS#8 PEM, mode 0600); refuses to overwrite."""
    key = NodeKey.generate()
    target = Path(path)
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(str(target), "already exists (not overwritten)") from None
    except OSError as error:
        raise KeyFileError(str(target), f"cannot create: {error.strerror or error}") from None
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key.private_pem())
    return key


def load_agent_key(path: str | Path) -> NodeKey:
    """The agent key in ``path``; refused when unreadable, not ed25519, or not mode 0600."""
    target = Path(path)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
        blob = target.read_bytes()
    except OSError as error:
        raise KeyFileError(str(target), f"cannot read: {error.strerror or error}") from None
    if mode & 0o077:
        raise KeyFileError(str(target), f"permissions {mode:04o} are too open (want 0600)")
    try:
        private_key = load_pem_private_key(blob, password=None)
    except (ValueError, TypeError) as error:
        raise KeyFileError(str(target), f"not a readable private key ({error})") from None
    if not isinstance(private_key, Ed25519PrivateKey):
        raise KeyFileError(str(target), "not an ed25519 private key")
    return NodeKey(private_key)
