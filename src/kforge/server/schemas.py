"""The HTTP bodies that are not message payloads, each one schema (:mod:`kforge.wire`).

Requests that are message payloads with one field relaxed (``owner`` defaults
to the caller) subclass the payload; answers that the engine already has a
schema for (``SandboxInfo``, ``ExecResult``, ``ServiceInfo``…) are used as
they are.  The OpenAPI document is generated from these types.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from kforge.core import AgentId, Hash256
from kforge.engine.models import (
    CreateSandbox,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
    Service,
    ServiceInfo,
)
from kforge.messages.payloads import Allowance, ExecResult
from kforge.wire import U8, U32, U64, Schema

__all__ = [
    "Accepted",
    "BreakpointsBody",
    "CallBody",
    "CycleBody",
    "CycleStarted",
    "DebugCreateBody",
    "DebugRunBody",
    "DebugSessions",
    "DebugStepBody",
    "DebugView",
    "DeliverBody",
    "ErrorBody",
    "GrantBody",
    "Health",
    "HostCalls",
    "OutputChunk",
    "ProgramBody",
    "ProgramStored",
    "ProgramView",
    "RunRecordView",
    "SandboxCreated",
    "SandboxList",
    "SandboxRequest",
    "SandboxStatus",
    "ServiceCreatedBody",
    "ServiceList",
    "ServiceRequest",
    "Session",
    "Stats",
    "StepResult",
    "WhoAmI",
]


# ----------------------------------------------------------------- identity and health


class Health(Schema, frozen=True):
    status: str
    engine: str
    tier: str


class Session(Schema, frozen=True):
    """A bearer token for the agent, valid until ``expires_at_ms``."""

    token: str
    agent: AgentId
    expires_at_ms: U64


class WhoAmI(Schema, frozen=True):
    agent: AgentId
    operator: bool
    method: str


class Accepted(Schema, frozen=True):
    """Done (or, for a start, accepted): nothing more to say."""


# ----------------------------------------------------------------- programs


#: A Starlark file name as an upload gives it: ending in ``.star``, without ``/``.
StarlarkFilename = Annotated[
    str, msgspec.Meta(min_length=6, max_length=256, pattern=r"^[^/]*\.star$")
]


class ProgramBody(Schema, frozen=True):
    """A program to store: ``assembly`` text, ``starlark`` source or ``program`` (FRGP
    bytes); exactly one.  Starlark is compiled for a machine of ``memory_quota`` bytes
    (default 65,536; it runs in any larger quota) and named ``filename`` (default
    ``main.star``) in compile errors, tracebacks and its source map; it loads libraries
    by content id (``load("sha256:…", ...)``) from the vault, never files."""

    assembly: str | None = None
    starlark: str | None = None
    program: bytes | None = None
    filename: StarlarkFilename | None = None
    memory_quota: U64 | None = None
    #: What the dashboard calls the program.
    name: str | None = None


class ProgramStored(Schema, frozen=True):
    program_id: Hash256
    code_length: U64
    data_length: U64
    imports: tuple[bytes, ...]


class ProgramView(Schema, frozen=True):
    program_id: Hash256
    entry: U64
    code: tuple[str, ...]
    data_length: U64
    disassembly: str


# ----------------------------------------------------------------- sandboxes


class SandboxRequest(CreateSandbox, frozen=True, kw_only=True):
    """``SANDBOX_CREATE`` over HTTP: ``owner`` may be left out (it must be the caller)."""

    owner: AgentId | None = None  # type: ignore[assignment]


class SandboxCreated(Schema, frozen=True):
    sandbox_id: Hash256


class SandboxStatus(SandboxInfo, frozen=True, kw_only=True):
    """``SANDBOX_INFO``, plus the sandbox's tick budget and the server's notes on it
    (``kforge.server.notes``: each ``None`` when not known)."""

    tick_budget: U64 = 0
    program_id: Hash256 | None = None
    program_name: str | None = None
    created_at_ms: U64 | None = None
    fault: str | None = None
    fault_detail: U64 | None = None


class SandboxList(Schema, frozen=True):
    sandboxes: tuple[SandboxStatus, ...]


class StepResult(Schema, frozen=True):
    state: SandboxState


class DeliverBody(Schema, frozen=True):
    """Input for the sandbox: on stdin (channel 2), the only channel open to agents."""

    data: bytes
    channel: U8 = 2


class HostCalls(Schema, frozen=True):
    calls: tuple[HostCall, ...]


class WaitResult(ExecResult, frozen=True):
    """``GET …/wait``: the ``ExecResult``, with at most the first ``OUTPUT_CHUNK`` bytes of
    the output; ``output_length`` is the whole output's (read the rest with ``…/output``)."""

    output_length: U64 = 0


class OutputChunk(Schema, frozen=True):
    """Stdout from ``offset`` to ``next_offset`` (``length`` written so far)."""

    sandbox_id: Hash256
    state: SandboxState
    offset: U64
    next_offset: U64
    length: U64
    data: bytes


class RunRecordView(Schema, frozen=True):
    program_id: Hash256
    memory_quota: U64
    tick_budget: U64
    deliveries: U64
    record: bytes


class GrantBody(Schema, frozen=True):
    agent: AgentId
    operations: Annotated[tuple[Operation, ...], msgspec.Meta(max_length=4)]


# ----------------------------------------------------------------- services and cycles


class ServiceRequest(Service, frozen=True, kw_only=True):
    """``SERVICE_CREATE`` over HTTP: ``owner`` may be left out (it must be the caller)."""

    owner: AgentId | None = None  # type: ignore[assignment]


class ServiceCreatedBody(Schema, frozen=True):
    service_id: Hash256


class ServiceList(Schema, frozen=True):
    supported: bool
    services: tuple[ServiceInfo, ...]


class CallBody(Schema, frozen=True):
    endpoint: bytes
    data: bytes = b""


class CycleBody(Schema, frozen=True):
    """Allowances replacing those of the agents named (``None``: keep every allowance)."""

    allowances: tuple[Allowance, ...] | None = None


class CycleStarted(Schema, frozen=True):
    cycle: U64


class Stats(Schema, frozen=True):
    sandboxes: U64
    by_state: dict[str, U64]
    events_published: U64
    debug_sessions: U64


# ----------------------------------------------------------------- the debugger


class DebugCreateBody(Schema, frozen=True):
    """A program (exactly one of ``assembly``, ``starlark``, ``program``, ``program_id``) and
    its machine.  Starlark source is compiled for ``memory_quota``; ``filename`` names it
    in positions and tracebacks."""

    assembly: str | None = None
    starlark: str | None = None
    filename: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] = "main.star"
    program: bytes | None = None
    program_id: Hash256 | None = None
    memory_quota: U64 = 65536
    tick_budget: U64 = 1_000_000
    input: bytes = b""
    environment: dict[bytes, bytes] = msgspec.field(default_factory=dict)
    grants: Annotated[tuple[U8, ...], msgspec.Meta(max_length=16)] = ()
    breakpoints: Annotated[tuple[U64, ...], msgspec.Meta(max_length=1024)] = ()


class DebugStepBody(Schema, frozen=True):
    count: U32 = 1


class DebugRunBody(Schema, frozen=True):
    max_ticks: U64 = 1_000_000
    breakpoints: Annotated[tuple[U64, ...], msgspec.Meta(max_length=1024)] | None = None


class BreakpointsBody(Schema, frozen=True):
    breakpoints: Annotated[tuple[U64, ...], msgspec.Meta(max_length=1024)]


class Flags(Schema, frozen=True):
    zero: bool
    carry: bool
    overflow: bool
    halt: bool


class StackEntry(Schema, frozen=True):
    address: U64
    value: str


class MemoryWindow(Schema, frozen=True):
    address: U64
    data: bytes


class SourcePosition(Schema, frozen=True):
    """Where in its source an instruction comes from (line and column count from 1)."""

    file: str
    line: U64
    column: U64
    function: str | None = None


class ChannelQueue(Schema, frozen=True):
    """A receiving channel's queue: its first messages (cut short in a view) and how many
    there are."""

    channel: U8
    messages: tuple[bytes, ...]
    count: U64 = 0


class ChannelMessage(Schema, frozen=True):
    channel: U8
    data: bytes


class DebugView(Schema, frozen=True):
    """Everything the debugger shows (words as ``0x…`` hex strings: JavaScript numbers
    stop at 2^53)."""

    session_id: str
    owner: AgentId
    program_id: Hash256
    state: str
    last_stop: str
    pc: U64
    sp: U64
    ticks_used: U64
    tick_budget: U64
    fault: str | None
    fault_detail: U64 | None
    blocked_channel: U8 | None
    flags: Flags
    registers: tuple[str, ...]
    changed: tuple[U64, ...]
    breakpoints: tuple[U64, ...]
    code: tuple[str, ...]
    #: The names of labelled instructions, by instruction index (as text: JSON keys).
    labels: dict[str, tuple[str, ...]]
    source: SourcePosition | None
    sources: tuple[SourcePosition | None, ...] | None
    stack: tuple[StackEntry, ...]
    memory: MemoryWindow
    memory_quota: U64
    heap_start: U64
    stack_start: U64
    inbound: tuple[ChannelQueue, ...]
    outbound: tuple[ChannelMessage, ...]
    stdout: bytes
    stderr: bytes
    #: The whole length of stdout and stderr (the view holds their ends).
    stdout_length: U64 = 0
    stderr_length: U64 = 0


class DebugSessionSummary(Schema, frozen=True):
    session_id: str
    program_id: Hash256
    state: str


class DebugSessions(Schema, frozen=True):
    sessions: tuple[DebugSessionSummary, ...]


class DebugFiles(Schema, frozen=True):
    """The source a session's program was compiled from, by file name (empty for assembly
    and containers)."""

    files: dict[str, str]


# ----------------------------------------------------------------- errors


class ErrorDetail(Schema, frozen=True):
    status: U32
    code: U32
    category: str
    message: str
    context: dict[str, str] = msgspec.field(default_factory=dict)


class ErrorBody(Schema, frozen=True):
    """Every refusal: the HTTP status, the ``KingdomError`` fields, and ``context`` (e.g.
    ``field``)."""

    error: ErrorDetail
