"""What one server holds: its engine, configuration, authenticator, debug sessions and
its notes on sandboxes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kforge.core import AgentId, Hash256
from kforge.engine import (
    CreateSandbox,
    EngineLimits,
    EngineStatus,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
)
from kforge.engine.jobs import BuiltProgram, ProgramText
from kforge.engine.models import Clock, Service, ServiceInfo, ServiceResult
from kforge.engine.offload import Offload
from kforge.engine.policy import Action, Rules
from kforge.events import EventBus
from kforge.link import Import
from kforge.messages import Envelope
from kforge.proofs import ExecutionProof
from kforge.proofs.replay import RunRecord
from kforge.server.auth import AuthConfig, Authenticator
from kforge.server.debug import DebugLimits, DebugManager
from kforge.server.notes import SandboxNotes
from kforge.sources import DEFAULT_STARLARK_MEMORY

__all__ = ["MailboxReader", "ServedEngine", "ServerConfig", "ServerState"]


class MailboxReader(Protocol):
    async def take(self, recipient: AgentId, timeout: float = 0.0) -> list[Envelope]: ...


class ServedEngine(Protocol):
    """What the server needs of an engine: the in-process :class:`~kforge.engine.Engine`,
    or a cluster's gateway (:class:`kforge.cluster.gateway.ClusterEngine`)."""

    @property
    def status(self) -> EngineStatus: ...

    @property
    def tier(self) -> str: ...

    @property
    def limits(self) -> EngineLimits: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def bus(self) -> EventBus: ...

    @property
    def mailbox(self) -> MailboxReader: ...

    @property
    def policy(self) -> Rules: ...

    @property
    def offload(self) -> Offload: ...

    async def open(self) -> object: ...

    async def close(self) -> None: ...

    async def build_program(
        self,
        kind: str,
        source: bytes | str,
        filename: str,
        requester: AgentId,
        memory_quota: int = DEFAULT_STARLARK_MEMORY,
    ) -> tuple[Hash256, BuiltProgram]: ...

    async def starlark_libraries(self, source: str) -> dict[bytes, bytes | None]: ...

    async def program_text(self, program_id: Hash256, requester: AgentId) -> ProgramText: ...

    async def program_bytes(self, program_id: Hash256) -> bytes: ...

    async def create_sandbox(
        self, request: CreateSandbox, requester: AgentId | None = None
    ) -> Hash256: ...

    async def authorize_sandbox(
        self, action: Action, sandbox_id: Hash256, requester: AgentId
    ) -> None: ...

    async def visible_sandboxes(
        self, requester: AgentId, *, every: bool = False
    ) -> list[SandboxInfo]: ...

    async def sandbox_status(self, sandbox_id: Hash256, requester: AgentId) -> SandboxInfo: ...

    async def list_sandboxes(self, owner: AgentId | None = None) -> list[SandboxInfo]: ...

    async def exec_start(self, sandbox_id: Hash256, requester: AgentId) -> None: ...

    async def step(self, sandbox_id: Hash256, requester: AgentId) -> SandboxState: ...

    async def deliver(
        self, sandbox_id: Hash256, channel: int, data: bytes, requester: AgentId
    ) -> None: ...

    async def kill_sandbox(self, sandbox_id: Hash256, requester: AgentId) -> None: ...

    async def wait(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None = None,
        *,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult: ...

    async def forget(self, sandbox_id: Hash256, requester: AgentId) -> None: ...

    async def io_log(self, sandbox_id: Hash256, requester: AgentId) -> tuple[HostCall, ...]: ...

    async def output(
        self, sandbox_id: Hash256, requester: AgentId, *, offset: int = 0, limit: int | None = None
    ) -> bytes: ...

    async def output_chunk(
        self, sandbox_id: Hash256, requester: AgentId, *, offset: int, limit: int
    ) -> tuple[bytes, int]: ...

    async def run_record(self, sandbox_id: Hash256, requester: AgentId) -> RunRecord: ...

    async def request_proof(self, sandbox_id: Hash256, requester: AgentId) -> ExecutionProof: ...

    async def grant(
        self,
        sandbox_id: Hash256,
        requester: AgentId,
        agent: AgentId,
        operations: Iterable[Operation],
    ) -> None: ...

    async def revoke(self, sandbox_id: Hash256, requester: AgentId, agent: AgentId) -> None: ...

    async def link_resolve(
        self, program_id: Hash256, imports: Sequence[Import], requester: AgentId
    ) -> Hash256: ...

    async def begin_cycle(
        self, allowances: Mapping[AgentId, int] | None = None, requester: AgentId | None = None
    ) -> int: ...

    async def create_service(
        self, service: Service, requester: AgentId | None = None
    ) -> Hash256: ...

    async def service_info(self, service_id: Hash256) -> ServiceInfo: ...

    async def list_services(self, owner: AgentId | None = None) -> list[ServiceInfo]: ...

    async def call_service(
        self, service_id: Hash256, endpoint: bytes, data: bytes, caller: AgentId
    ) -> ServiceResult: ...

    async def fund_service(self, service_id: Hash256, requester: AgentId) -> None: ...

    async def dispatch(self, envelope: Envelope) -> Envelope: ...


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

    engine: ServedEngine
    config: ServerConfig
    authenticator: Authenticator
    debug: DebugManager
    operator_agent: AgentId
    dev_token: str
    subscriptions: dict[AgentId, int] = field(default_factory=dict)
    #: Requests each agent has in flight (agents with none are not kept).
    in_flight: dict[AgentId, int] = field(default_factory=dict)
    notes: SandboxNotes = field(default_factory=SandboxNotes)
