"""What gateways ask workers on ``kforge.engine.<p>``: one schema per engine operation.

Forge envelopes travel as they are on ``kforge.forge.<p>`` (the engine's
:class:`~kforge.engine.dispatch.Dispatcher` answers them); the HTTP API also needs
the engine's other methods (status, wait, output, grants, ...), each a
:class:`Call` here, tagged with its name, answered with an :class:`Answer`: the
method's result in msgpack, or the error it raised, or a note that the partition
is not here (any more) and the call should be sent again.

Every call carries ``request``, the id the client gave the HTTP request (or one
the gateway drew): a worker answers a request it has answered before with the
same reply, so a client whose gateway died mid-request sends it again and gets
one result, not two.  ``requester`` is the agent the gateway authenticated:
NATS is the cluster's trust boundary (``docs/cluster.md``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from kforge.core import AgentId, ErrorCategory, ForgeError, Hash256, InvalidRequest, KingdomError
from kforge.engine.models import (
    CreateSandbox,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
    Service,
    ServiceInfo,
    ServiceResult,
)
from kforge.link import Import
from kforge.wire import U8, U16, U32, U63, Schema

__all__ = [
    "MOVED",
    "OUTPUT_PER_ANSWER",
    "RESULTS",
    "Answer",
    "AnyCall",
    "Call",
    "DirectoryEntry",
    "Failure",
    "failure_of",
    "relayed_error",
]


class Call(Schema, frozen=True, tag=True, tag_field="op"):
    """One engine operation (the tag is the class name)."""

    request: Hash256

    #: Whether the call changes the engine (answered once per request id).
    changes: ClassVar[bool] = True


class SandboxCall(Call, frozen=True):
    sandbox: Hash256
    requester: AgentId


class Create(Call, frozen=True):
    create: CreateSandbox
    requester: AgentId


class Authorize(SandboxCall, frozen=True):
    """Whether ``requester`` may take ``action`` (an :class:`~kforge.engine.policy.Action`'s
    value) on the sandbox: answered with nothing, or the refusal."""

    action: str
    changes: ClassVar[bool] = False


class Status(SandboxCall, frozen=True):
    changes: ClassVar[bool] = False


class ListSandboxes(Call, frozen=True):
    owner: AgentId | None = None
    changes: ClassVar[bool] = False


class Visible(Call, frozen=True):
    """The sandboxes ``requester`` may list (with ``every``, all: operators only)."""

    requester: AgentId
    every: bool = False
    changes: ClassVar[bool] = False


class Start(SandboxCall, frozen=True):
    pass


class Step(SandboxCall, frozen=True):
    pass


class Deliver(SandboxCall, frozen=True):
    channel: U8
    data: bytes


class Kill(SandboxCall, frozen=True):
    pass


class Wait(Call, frozen=True):
    sandbox: Hash256
    requester: AgentId | None
    timeout: float
    output_limit: U63 | None = None
    changes: ClassVar[bool] = False


class Forget(SandboxCall, frozen=True):
    pass


class IoLog(SandboxCall, frozen=True):
    changes: ClassVar[bool] = False


class Output(Call, frozen=True):
    """At most ``limit`` bytes of the output from ``offset`` on, and its length so far
    (``requester`` ``None``: the engine's own reading, as a ``Wait`` without one)."""

    sandbox: Hash256
    requester: AgentId | None
    offset: U63 = 0
    limit: U63 | None = None
    changes: ClassVar[bool] = False


class RunRecordOf(SandboxCall, frozen=True):
    changes: ClassVar[bool] = False


class Prove(SandboxCall, frozen=True):
    pass


class Grant(SandboxCall, frozen=True):
    agent: AgentId
    operations: tuple[Operation, ...]


class Revoke(SandboxCall, frozen=True):
    agent: AgentId


class Link(Call, frozen=True):
    program: Hash256
    imports: tuple[Import, ...]
    requester: AgentId


class CreateService(Call, frozen=True):
    service: Service
    requester: AgentId


class ServiceInfoOf(Call, frozen=True):
    service: Hash256
    changes: ClassVar[bool] = False


class ListServices(Call, frozen=True):
    owner: AgentId | None = None
    changes: ClassVar[bool] = False


class CallService(Call, frozen=True):
    service: Hash256
    endpoint: bytes
    data: bytes
    caller: AgentId
    timeout: float


class FundService(Call, frozen=True):
    service: Hash256
    requester: AgentId


AnyCall = (
    Create
    | Authorize
    | Status
    | ListSandboxes
    | Visible
    | Start
    | Step
    | Deliver
    | Kill
    | Wait
    | Forget
    | IoLog
    | Output
    | RunRecordOf
    | Prove
    | Grant
    | Revoke
    | Link
    | CreateService
    | ServiceInfoOf
    | ListServices
    | CallService
    | FundService
)


class Failure(Schema, frozen=True):
    """An error a worker's engine raised, as the gateway raises it again.

    ``kind`` is the error's class name; ``code``, ``category``, ``message`` and
    ``context`` its ``KingdomError``; ``http_status`` the status its class carries.
    ``kind == "TimeoutError"`` is a wait that timed out.
    """

    kind: str
    message: str
    code: U32
    category: str
    context: dict[bytes, bytes]
    http_status: U16


class Answer(Schema, frozen=True):
    """A worker's answer: ``value`` (the result in msgpack) or ``failure``.

    A worker that does not (or no longer) serve the partition answers with no body
    and the header :data:`MOVED` saying why: the call is sent again.
    """

    value: bytes | None = None
    failure: Failure | None = None


#: The output bytes one answer carries at most (a NATS message holds 1 MiB by default):
#: a larger output is read in chunks.
OUTPUT_PER_ANSWER: Final = 256 * 1024

#: The header of an answer that says "not here: send it again".
MOVED: Final = "Kforge-Moved"


class DirectoryEntry(Schema, frozen=True):
    """Where a sandbox or service lives (``kforge_directory``: ``sandbox.<id>``, ``service.<id>``)."""

    partition: U16
    owner: AgentId


#: The result type of each call (what ``Answer.value`` decodes to).
RESULTS: Final[dict[type[Call], Any]] = {
    Create: Hash256,
    Authorize: None,
    Status: SandboxInfo,
    ListSandboxes: tuple[SandboxInfo, ...],
    Visible: tuple[SandboxInfo, ...],
    Start: None,
    Step: SandboxState,
    Deliver: None,
    Kill: None,
    Wait: ExecResult,
    Forget: None,
    IoLog: tuple[HostCall, ...],
    Output: tuple[bytes, int],
    RunRecordOf: bytes,
    Prove: bytes,
    Grant: None,
    Revoke: None,
    Link: Hash256,
    CreateService: Hash256,
    ServiceInfoOf: ServiceInfo,
    ListServices: tuple[ServiceInfo, ...],
    CallService: ServiceResult,
    FundService: None,
}


def failure_of(error: BaseException) -> Failure:
    if isinstance(error, ForgeError):
        kingdom = error.to_kingdom_error()
        return Failure(
            type(error).__name__,
            str(error),
            kingdom.code,
            kingdom.category.value,
            dict(kingdom.context),
            error.http_status,
        )
    if isinstance(error, TimeoutError):
        return Failure("TimeoutError", str(error) or "timed out", 0x05FF, "Internal", {}, 408)
    return Failure(
        "Internal",
        f"internal error: {type(error).__name__}: {error}",
        0x05FF,
        ErrorCategory.INTERNAL.value,
        {},
        500,
    )


def _subclasses(base: type[ForgeError]) -> dict[str, type[ForgeError]]:
    """Every error class by name (not the ones :func:`_relayed_class` made)."""
    found = {base.__name__: base}
    for sub in base.__subclasses__():
        if not sub.__name__.startswith("_") and not getattr(sub, "relays", False):
            found.update(_subclasses(sub))
    return found


#: The relaying class made for each error class (made once, so ``except`` clauses and
#: ``isinstance`` see one class per kind).
_RELAYED: Final[dict[type[ForgeError], type[ForgeError]]] = {}


def _relayed_class(base: type[ForgeError]) -> type[ForgeError]:
    """``base`` with the facts of the original error instead of its own (see :func:`relayed_error`)."""
    made = _RELAYED.get(base)
    if made is not None:
        return made

    def to_kingdom_error(self: Any, context: dict[bytes, bytes] | None = None) -> KingdomError:
        kingdom: KingdomError = self.relayed
        return KingdomError(
            kingdom.code, kingdom.category, kingdom.message, {**kingdom.context, **(context or {})}
        )

    attributes = {"to_kingdom_error": to_kingdom_error, "relays": True, "__module__": __name__}
    made = _RELAYED[base] = type(base.__name__, (base,), attributes)
    return made


def relayed_error(failure: Failure) -> BaseException:
    """The error a worker raised, raised again here: of its class when the gateway knows it
    (so ``except PermissionDenied`` still catches it), with its message, code, category,
    context and HTTP status."""
    if failure.kind == "TimeoutError":
        return TimeoutError(failure.message)
    from kforge.accounting import InsufficientResources  # noqa: F401  (registers the class)
    from kforge.engine.models import ServiceCallFailed  # noqa: F401

    base = _subclasses(ForgeError).get(failure.kind, ForgeError)
    kind = _relayed_class(base)
    error = kind.__new__(kind)
    Exception.__init__(error, failure.message)
    try:
        category = ErrorCategory(failure.category)
    except ValueError:
        category = ErrorCategory.INTERNAL
    message = failure.message.encode()
    error.relayed = KingdomError(failure.code, category, message, dict(failure.context))  # type: ignore[attr-defined]
    error.http_status = failure.http_status  # type: ignore[misc]
    error.reason = failure.message  # type: ignore[attr-defined]
    if isinstance(error, InvalidRequest):
        error.field = failure.context.get(b"field", b"").decode("utf-8", "replace")
    return error
