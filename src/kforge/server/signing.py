"""How an agent proves who it is to the kforge server: ed25519 request signatures.

An agent is its ed25519 public key (:class:`kforge.core.AgentId`).  Each signed
HTTP request carries four headers::

    X-Kforge-Agent:     the agent's public key, 64 hex digits
    X-Kforge-Timestamp: milliseconds since the Unix epoch, decimal
    X-Kforge-Nonce:     16..64 characters of [0-9A-Za-z_-], never reused
    X-Kforge-Signature: ed25519 signature of the signing string, 128 hex digits

and the signing string is, with one ``\\n`` between the lines::

    kforge-http-v1
    <METHOD>
    <path, with ?query when there is one, exactly as sent>
    <SHA-256 of the body, 64 hex digits>
    <timestamp>
    <nonce>

This module has no third-party dependency beyond ``cryptography``: the client
and the server share it.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kforge.core import AgentId

__all__ = [
    "AGENT_HEADER",
    "NONCE_HEADER",
    "NONCE_PATTERN",
    "SIGNATURE_HEADER",
    "SIGNING_DOMAIN",
    "TIMESTAMP_HEADER",
    "AgentKey",
    "signing_string",
    "verify_signature",
]

SIGNING_DOMAIN: Final = "kforge-http-v1"
AGENT_HEADER: Final = "x-kforge-agent"
TIMESTAMP_HEADER: Final = "x-kforge-timestamp"
NONCE_HEADER: Final = "x-kforge-nonce"
SIGNATURE_HEADER: Final = "x-kforge-signature"
NONCE_PATTERN: Final = re.compile(r"[0-9A-Za-z_-]{16,64}")


def signing_string(method: str, target: str, body: bytes, timestamp_ms: int, nonce: str) -> bytes:
    """The bytes an agent signs for one request (see the module docstring)."""
    body_hash = hashlib.sha256(body).hexdigest()
    lines = (SIGNING_DOMAIN, method.upper(), target, body_hash, str(timestamp_ms), nonce)
    return "\n".join(lines).encode()


def verify_signature(agent: AgentId, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``agent``'s ed25519 signature of ``message``."""
    try:
        Ed25519PublicKey.from_public_bytes(agent.raw).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class AgentKey:
    """An agent's ed25519 key pair; :attr:`agent_id` is its public key."""

    private_key: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> AgentKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> AgentKey:
        """The key with this 32-byte private seed (deterministic: for tests and tools)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @property
    def agent_id(self) -> AgentId:
        raw = self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return AgentId(raw)

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    def request_headers(
        self,
        method: str,
        target: str,
        body: bytes,
        *,
        timestamp_ms: int | None = None,
        nonce: str | None = None,
    ) -> dict[str, str]:
        """The four headers that sign one request (fresh timestamp and nonce by default)."""
        stamp = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        once = os.urandom(16).hex() if nonce is None else nonce
        signature = self.sign(signing_string(method, target, body, stamp, once))
        return {
            AGENT_HEADER: self.agent_id.hex,
            TIMESTAMP_HEADER: str(stamp),
            NONCE_HEADER: once,
            SIGNATURE_HEADER: signature.hex(),
        }
