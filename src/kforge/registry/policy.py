"""The registry policy: what may ever be granted, the largest quotas, who may promote.

A policy file is TOML or JSON (told apart by the ``.json`` suffix) with these keys,
at the top level or under ``[registry]``::

    grantable_channels = [3, 4]      # channels a program may ever be granted
    max_tick_budget = 10000000       # largest declared tick budget
    max_memory_quota = 1048576       # largest declared memory quota (bytes)
    promoters = ["<64 hex digits>"]  # agents (ed25519 public keys) allowed to promote/revoke
    allow_unknown_opcodes = false    # whether the static gate accepts unknown opcodes
    request_max_age_seconds = 600    # how old a signed request may be
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kforge.core import AgentId, Hash256
from kforge.isa import GRANTABLE_CHANNELS
from kforge.registry.errors import PolicyError

__all__ = ["RegistryPolicy", "load_policy"]

_KEYS = frozenset(
    {
        "grantable_channels",
        "max_tick_budget",
        "max_memory_quota",
        "promoters",
        "allow_unknown_opcodes",
        "request_max_age_seconds",
    }
)


@dataclass(frozen=True, slots=True)
class RegistryPolicy:
    """The rules the policy gate and promotion apply.  The default trusts nobody."""

    grantable_channels: frozenset[int] = frozenset()
    max_tick_budget: int = 10_000_000
    max_memory_quota: int = 1 << 20
    promoters: frozenset[AgentId] = field(default_factory=frozenset)
    allow_unknown_opcodes: bool = False
    request_max_age_seconds: int = 600

    def to_json(self) -> dict[str, Any]:
        """The canonical JSON form (stored with every policy gate report)."""
        return {
            "grantable_channels": sorted(self.grantable_channels),
            "max_tick_budget": self.max_tick_budget,
            "max_memory_quota": self.max_memory_quota,
            "promoters": sorted(agent.hex for agent in self.promoters),
            "allow_unknown_opcodes": self.allow_unknown_opcodes,
            "request_max_age_seconds": self.request_max_age_seconds,
        }

    @classmethod
    def from_mapping(cls, body: Mapping[str, Any], source: str = "<policy>") -> RegistryPolicy:
        """A policy from parsed TOML/JSON; raises ``PolicyError`` naming the bad key."""
        if isinstance(body.get("registry"), Mapping):
            body = body["registry"]
        unknown = sorted(set(body) - _KEYS)
        if unknown:
            raise PolicyError(source, f"unknown key {unknown[0]!r}")
        channels = body.get("grantable_channels", [])
        if not isinstance(channels, list) or any(
            not isinstance(c, int) or c not in GRANTABLE_CHANNELS for c in channels
        ):
            raise PolicyError(source, "grantable_channels must list channels 3..7")
        promoters = body.get("promoters", [])
        if not isinstance(promoters, list):
            raise PolicyError(source, "promoters must be a list of 64-hex-digit keys")
        try:
            agents = frozenset(AgentId(Hash256.from_hex(str(p)).raw) for p in promoters)
        except ValueError as error:
            raise PolicyError(source, f"promoters: {error}") from None
        return cls(
            grantable_channels=frozenset(channels),
            max_tick_budget=_positive(body, "max_tick_budget", 10_000_000, source),
            max_memory_quota=_positive(body, "max_memory_quota", 1 << 20, source),
            promoters=agents,
            allow_unknown_opcodes=_boolean(body, "allow_unknown_opcodes", source),
            request_max_age_seconds=_positive(body, "request_max_age_seconds", 600, source),
        )


def _positive(body: Mapping[str, Any], key: str, default: int, source: str) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PolicyError(source, f"{key} must be a positive integer")
    return value


def _boolean(body: Mapping[str, Any], key: str, source: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise PolicyError(source, f"{key} must be true or false")
    return value


def load_policy(path: str | Path) -> RegistryPolicy:
    """The policy in a TOML or JSON file; raises ``PolicyError``."""
    source = str(path)
    try:
        blob = Path(path).read_bytes()
    except OSError as error:
        raise PolicyError(source, f"cannot read: {error.strerror or error}") from None
    try:
        if source.endswith(".json"):
            body = json.loads(blob.decode("utf-8"))
        else:
            body = tomllib.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise PolicyError(source, f"cannot parse: {error}") from None
    if not isinstance(body, dict):
        raise PolicyError(source, "expected a table/object at the top")
    return RegistryPolicy.from_mapping(body, source)
