"""What one server holds: its engine, configuration, authenticator, debug sessions and
its notes on sandboxes."""

from __future__ import annotations

from dataclasses import dataclass, field

from kforge.core import AgentId
from kforge.engine import Engine
from kforge.server.auth import AuthConfig, Authenticator
from kforge.server.debug import DebugLimits, DebugManager
from kforge.server.notes import SandboxNotes

__all__ = ["ServerConfig", "ServerState"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Limits and options of one server (the engine's own limits stay in ``EngineLimits``).

    Who may do what, and each agent's share of the engine's pools (its live
    sandboxes among them), are the engine's to decide (``engine.policy``), so
    they hold for every way in; ``max_wait_seconds`` bounds a
    long-poll (``/wait``, ``/mailbox``); the dev token lets the dashboard read
    every sandbox and event for ``dev_token_lifetime_ms``; ``default_preset``
    configures a creation that gives neither a preset nor its quota and budget.
    """

    auth: AuthConfig = field(default_factory=AuthConfig)
    debug: DebugLimits = field(default_factory=DebugLimits)
    max_body_bytes: int = 1024 * 1024
    #: Requests of one agent the server works on at once (long polls included); 429 beyond.
    max_requests_in_flight_per_agent: int = 16
    #: Connections the server serves at once (each may hold a body of ``max_body_bytes``
    #: while it is read); beyond, new connections get 503.
    max_connections: int = 512
    max_wait_seconds: float = 60.0
    max_event_subscriptions_per_agent: int = 16
    #: The preset of a creation that names none and leaves out its quota or budget.
    default_preset: str = "standard"
    event_queue_size: int = 1024
    dev_token_lifetime_ms: int = 7 * 24 * 3600 * 1000


@dataclass
class ServerState:
    """The server's parts, shared by every request (``app.state.kforge``)."""

    engine: Engine
    config: ServerConfig
    authenticator: Authenticator
    debug: DebugManager
    operator_agent: AgentId
    dev_token: str
    subscriptions: dict[AgentId, int] = field(default_factory=dict)
    #: Requests each agent has in flight (agents with none are not kept).
    in_flight: dict[AgentId, int] = field(default_factory=dict)
    notes: SandboxNotes = field(default_factory=SandboxNotes)
