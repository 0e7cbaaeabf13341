"""Who is asking: signed requests, session tokens, replay protection and rate limits.

Two ways to authenticate a request (see ``docs/server.md``):

- an ed25519 signature over the request (:mod:`kforge.server.signing`): the
  timestamp must be within :attr:`AuthConfig.clock_skew_ms` of the server's
  clock and the nonce unseen within that window (a replay is refused);
- a bearer token, ``Authorization: Bearer kf1.<payload>.<mac>``, which
  ``POST /v1/session`` (signed) hands out.  Tokens are HMAC-SHA256 under a
  secret the server draws at start, so they die with the process.  The
  payload holds the agent, the expiry and the scope: an *operator* token
  (the dashboard's dev token) may also read every sandbox and event.

Every refusal is :class:`AuthError` carrying the HTTP status (401, or 429 and 503
when the replay window is full).  The per-agent request rate is the engine's
:class:`~kforge.engine.policy.RateLimiter` (its records bounded, stale ones dropped).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from kforge.core import AgentId
from kforge.engine.policy import RateLimiter
from kforge.server.signing import (
    AGENT_HEADER,
    NONCE_HEADER,
    NONCE_PATTERN,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signing_string,
    verify_signature,
)

__all__ = [
    "TOKEN_PREFIX",
    "AuthConfig",
    "AuthError",
    "Authenticator",
    "Principal",
    "RateLimiter",
]

TOKEN_PREFIX: Final = "kf1"
_TOKEN_BODY = struct.Struct(">32sQB8s")  # agent, expires_ms, scope flags, random
_OPERATOR_FLAG: Final = 1


class AuthError(Exception):
    """A request that is refused before it reaches the engine."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: an agent, and whether it may read everything (operator)."""

    agent: AgentId
    operator: bool = False
    method: str = "signature"  # or "token"


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Authentication and per-agent limits of one server.

    ``max_nonces`` bounds the replay window's memory; ``max_nonces_per_agent`` is
    one agent's share of it (a signed request beyond it is 429), so no agent can
    fill the window and shut signed requests out for everyone.  ``max_agents``
    bounds the rate limiters' records.  Besides its requests, an agent's request
    bodies are rated in bytes (``body_bytes_per_second``, bursts of
    ``body_bytes_burst``): a megabyte costs the server more than a request.
    """

    clock_skew_ms: int = 30_000
    token_lifetime_ms: int = 15 * 60 * 1000
    max_nonces: int = 1_000_000
    max_nonces_per_agent: int = 10_000
    rate_per_second: float = 50.0
    rate_burst: int = 100
    body_bytes_per_second: float = 2 * 1024 * 1024
    body_bytes_burst: int = 8 * 1024 * 1024
    max_agents: int = 100_000


@dataclass
class Authenticator:
    """Checks signatures and tokens; remembers nonces; issues tokens."""

    config: AuthConfig = field(default_factory=AuthConfig)
    secret: bytes = field(default_factory=lambda: os.urandom(32))
    time_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    monotonic: Callable[[], float] = field(default=time.monotonic)

    def __post_init__(self) -> None:
        self._nonces: OrderedDict[tuple[AgentId, str], int] = OrderedDict()
        self._nonces_by_agent: dict[AgentId, int] = {}
        self.limiter = RateLimiter(
            self.config.rate_per_second,
            self.config.rate_burst,
            self.monotonic,
            self.config.max_agents,
        )
        self.body_limiter = RateLimiter(
            self.config.body_bytes_per_second,
            self.config.body_bytes_burst,
            self.monotonic,
            self.config.max_agents,
            unit="body bytes",
        )

    # ------------------------------------------------------------------ tokens

    def issue_token(
        self, agent: AgentId, *, operator: bool = False, lifetime_ms: int | None = None
    ) -> tuple[str, int]:
        """A bearer token for ``agent`` and its expiry (ms since the epoch)."""
        expires = self.time_ms() + (
            self.config.token_lifetime_ms if lifetime_ms is None else lifetime_ms
        )
        body = _TOKEN_BODY.pack(
            agent.raw, expires, _OPERATOR_FLAG if operator else 0, os.urandom(8)
        )
        mac = hmac.new(self.secret, body, hashlib.sha256).digest()
        return f"{TOKEN_PREFIX}.{_b64(body)}.{_b64(mac)}", expires

    def check_token(self, token: str) -> Principal:
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
            raise AuthError(401, "malformed token")
        try:
            body, mac = _unb64(parts[1]), _unb64(parts[2])
        except ValueError:
            raise AuthError(401, "malformed token") from None
        expected = hmac.new(self.secret, body, hashlib.sha256).digest()
        if len(body) != _TOKEN_BODY.size or not hmac.compare_digest(mac, expected):
            raise AuthError(401, "invalid token (wrong signature, or issued by another server run)")
        agent_raw, expires, flags, _ = _TOKEN_BODY.unpack(body)
        if expires <= self.time_ms():
            raise AuthError(401, "token expired")
        return Principal(AgentId(agent_raw), bool(flags & _OPERATOR_FLAG), "token")

    # ------------------------------------------------------------------ requests

    def authenticate(
        self,
        method: str,
        target: str,
        body: bytes,
        headers: Mapping[str, str],
        query_token: str | None = None,
    ) -> Principal:
        """The caller of one request, or ``AuthError`` (401) saying why not.

        ``headers`` must be looked up case-insensitively (lower-case names).
        ``query_token`` is the ``token`` query parameter (WebSockets from browsers).
        """
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError(401, "Authorization must be 'Bearer <token>'")
            return self.check_token(token.strip())
        if headers.get(SIGNATURE_HEADER) is not None:
            return self._check_signature(method, target, body, headers)
        if query_token is not None:
            return self.check_token(query_token)
        raise AuthError(401, "unsigned request: sign it (X-Kforge-*) or send a bearer token")

    @staticmethod
    def reads_body(headers: Mapping[str, str]) -> bool:
        """Whether :meth:`authenticate` needs the request's body (a signature covers it; a
        token does not, so a request with one is admitted, or refused, before its body
        is read)."""
        return headers.get("authorization") is None

    def _check_signature(
        self, method: str, target: str, body: bytes, headers: Mapping[str, str]
    ) -> Principal:
        agent_text = headers.get(AGENT_HEADER, "")
        stamp_text = headers.get(TIMESTAMP_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        signature_text = headers.get(SIGNATURE_HEADER, "")
        try:
            agent = AgentId(bytes.fromhex(agent_text))
        except ValueError:
            raise AuthError(401, f"{AGENT_HEADER} must be 64 hex digits") from None
        if not stamp_text.isdigit() or len(stamp_text) > 19:
            raise AuthError(401, f"{TIMESTAMP_HEADER} must be milliseconds since the epoch")
        if NONCE_PATTERN.fullmatch(nonce) is None:
            raise AuthError(401, f"{NONCE_HEADER} must be 16..64 characters of [0-9A-Za-z_-]")
        try:
            signature = bytes.fromhex(signature_text)
        except ValueError:
            raise AuthError(401, f"{SIGNATURE_HEADER} must be hex") from None
        stamp = int(stamp_text)
        now = self.time_ms()
        skew = self.config.clock_skew_ms
        if abs(now - stamp) > skew:
            raise AuthError(401, f"stale timestamp: {stamp} is more than {skew} ms from {now}")
        message = signing_string(method, target, body, stamp, nonce)
        if len(signature) != 64 or not verify_signature(agent, signature, message):
            raise AuthError(401, "bad signature")
        self._remember_nonce(agent, nonce, now)
        return Principal(agent, False, "signature")

    def _remember_nonce(self, agent: AgentId, nonce: str, now: int) -> None:
        """Refuse a nonce seen within the skew window; forget older ones."""
        horizon = now - 2 * self.config.clock_skew_ms
        counts = self._nonces_by_agent
        while self._nonces:
            oldest_key, seen_at = next(iter(self._nonces.items()))
            if seen_at >= horizon:
                break
            del self._nonces[oldest_key]
            left = counts[oldest_key[0]] - 1
            if left:
                counts[oldest_key[0]] = left
            else:
                del counts[oldest_key[0]]
        key = (agent, nonce)
        if key in self._nonces:
            raise AuthError(401, "replayed nonce")
        # Forgetting a fresh nonce would open a replay: refuse instead.
        if counts.get(agent, 0) >= self.config.max_nonces_per_agent:
            raise AuthError(
                429, f"agent {agent} has too many signed requests in the replay window", 1.0
            )
        if len(self._nonces) >= self.config.max_nonces:
            raise AuthError(503, "too many signed requests in the replay window", 1.0)
        self._nonces[key] = now
        counts[agent] = counts.get(agent, 0) + 1


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text or any(char not in _B64_ALPHABET for char in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64_ALPHABET: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
