"""``kforge.client``: the kforge server, shaped like the in-process :class:`kforge.engine.Engine`.

    async with Client("http://127.0.0.1:8470", AgentKey.generate()) as engine:
        code = await engine.put_program(assemble(SOURCE))
        sandbox = await engine.create_sandbox(CreateSandbox(engine.agent_id, code, 65536, 10_000))
        await engine.exec_start(sandbox)
        result = await engine.wait(sandbox)

Every request is signed with the agent's ed25519 key; by default the client
trades one signed request for a bearer token (``POST /v1/session``) and
renews it before it expires (``use_token=False`` signs every request).
Every request but a GET carries a request id (``X-Kforge-Request-Id``); with
``retry_seconds`` the client sends a request again, with the same id, while the
connection fails or the server answers 503, trying each of its server URLs in
turn (a cluster's gateways): a cluster answers a request it saw once.
Bodies travel as msgpack.  The ``requester`` arguments of the engine's
methods are accepted for the same shape, but a client acts as one agent only:
any other requester is refused locally with ``PermissionDenied``.

Server refusals raise :class:`RemoteError` subclasses that are also the
engine's own error classes (``SandboxNotFound``, ``InvalidState``,
``PermissionDenied``, ``InvalidRequest``, ``TooManySandboxes``), so code
written against the engine catches them unchanged; a timed-out ``wait``
raises ``TimeoutError`` as the engine does.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlencode

import httpx
import msgspec

from kforge.core import (
    AgentId,
    ErrorCategory,
    EventKind,
    ForgeError,
    Hash256,
    InvalidState,
    PermissionDenied,
    SandboxNotFound,
    TooManySandboxes,
)
from kforge.engine import (
    CreateSandbox,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
)
from kforge.events import Event, Gap
from kforge.link import Import
from kforge.messages import Envelope, InvalidRequest, unpack
from kforge.messages.payloads import Allowance, LinkResolve, LinkResult, ProofResult
from kforge.program import ForgeProgram
from kforge.proofs import ExecutionProof
from kforge.proofs.replay import RunRecord
from kforge.server.endpoint import REQUEST_ID_HEADER
from kforge.server.schemas import (
    Accepted,
    CycleBody,
    CycleStarted,
    DeliverBody,
    GrantBody,
    HostCalls,
    OutputChunk,
    ProgramBody,
    ProgramStored,
    RunRecordView,
    SandboxCreated,
    SandboxList,
    SandboxStatus,
    Session,
    StepResult,
    WaitResult,
)
from kforge.server.signing import AgentKey
from kforge.wire import Schema, decode_msgpack, encode_msgpack

__all__ = ["AuthenticationFailed", "Client", "RemoteError"]

_MSGPACK = "application/msgpack"
_MAX_POLL = 60.0
T = TypeVar("T")


class _Mail(Schema, frozen=True):
    envelopes: tuple[Envelope, ...]


class RemoteError(ForgeError):
    """A refusal from the server: ``status`` (HTTP), ``category``, ``code``, ``context``."""

    category: ClassVar[ErrorCategory] = ErrorCategory.INTERNAL

    def __init__(
        self, status: int, code: int, category: str, message: str, context: Mapping[str, str]
    ) -> None:
        Exception.__init__(self, message)
        self.status = status
        self.remote_code = code
        self.remote_category = category
        self.context = dict(context)
        self.reason = message

    def __str__(self) -> str:
        return f"{self.args[0]} (HTTP {self.status})"


class AuthenticationFailed(RemoteError):
    """401: the server did not accept the signature or token."""


class RateLimited(RemoteError):
    """429 for the rate of requests: wait and retry."""


class _NotFound(RemoteError, SandboxNotFound):
    pass


class _Conflict(RemoteError, InvalidState):
    pass


class _Denied(RemoteError, PermissionDenied):
    pass


class _Invalid(RemoteError, InvalidRequest):
    pass


class _Quota(RemoteError, TooManySandboxes):
    pass


_BY_STATUS: dict[int, type[RemoteError]] = {
    400: _Invalid,
    401: AuthenticationFailed,
    403: _Denied,
    404: _NotFound,
    409: _Conflict,
    422: _Quota,
}


def _raise_for(response: httpx.Response) -> None:
    try:
        body = unpack(response.content, "response") if response.content else {}
        error = body.get("error", {}) if isinstance(body, dict) else {}
    except ForgeError:
        error = {}
    message = str(error.get("message") or response.reason_phrase)
    code = int(error.get("code") or 0x05FF)
    category = str(error.get("category") or "Internal")
    context = error.get("context") or {}
    status = response.status_code
    if status == 408:
        raise TimeoutError(message)
    if status == 429:
        kind: type[RemoteError] = (
            RateLimited if category == "QuotaExceeded" and "requests/s" in message else _Quota
        )
    else:
        kind = _BY_STATUS.get(status, RemoteError)
    raised = kind(status, code, category, message, context)
    if isinstance(raised, InvalidRequest):
        raised.field = str(context.get("field", ""))
    raise raised


def _event(values: Mapping[str, Any]) -> Event | Gap:
    if "gap" in values:
        return Gap(values["gap"])
    sandbox = values["sandbox_id"]
    owner = values["owner"]
    return Event(
        values["seq"],
        EventKind(values["kind"]),
        Hash256(bytes(sandbox)) if sandbox is not None else None,
        AgentId(bytes(owner)) if owner is not None else None,
        values["timestamp_ms"],
        values["payload"],
    )


class Client:
    """An agent's connection to a kforge server (an async context manager)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        key: AgentKey,
        *,
        use_token: bool = True,
        timeout: float = 90.0,
        retry_seconds: float = 0.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("give the client at least one server URL")
        self._urls = [url.rstrip("/") for url in urls]
        self.base_url = self._urls[0]
        self.key = key
        self.agent_id = key.agent_id
        self.use_token = use_token
        self.retry_seconds = retry_seconds
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)
        self._token: str | None = None
        self._token_expires_ms = 0

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool.  Idempotent."""
        await self._http.aclose()

    # ------------------------------------------------------------------ requests

    def _check_requester(self, requester: AgentId | None) -> None:
        if requester is not None and requester != self.agent_id:
            raise PermissionDenied(f"this client acts as {self.agent_id}, not {requester}")

    async def _auth_headers(self, method: str, target: str, body: bytes) -> dict[str, str]:
        if not self.use_token:
            return self.key.request_headers(method, target, body)
        if self._token is None or self._token_expires_ms - time.time() * 1000 < 60_000:
            session = await self._send("POST", "/v1/session", None, Session, signed=True)
            self._token = session.token
            self._token_expires_ms = session.expires_at_ms
        return {"authorization": f"Bearer {self._token}"}

    async def _send(
        self,
        method: str,
        path: str,
        body: Any = None,
        answer: type[T] | None = None,
        query: Mapping[str, Any] | None = None,
        *,
        signed: bool = False,
    ) -> T:
        """One request: ``body`` (a schema value, or plain data) as msgpack; the answer read
        into ``answer`` (plain data when ``None``)."""
        target = f"{path}?{urlencode(query)}" if query else path
        raw = encode_msgpack(body) if body is not None else b""
        extra = {"accept": _MSGPACK}
        if body is not None:
            extra["content-type"] = _MSGPACK
        response = await self._exchange(method, target, raw, extra, signed=signed)
        if response.status_code >= 400:
            _raise_for(response)
        if answer is None:
            plain: T = unpack(response.content, "response") if response.content else {}
            return plain
        return decode_msgpack(response.content, answer, "response")

    async def _exchange(
        self,
        method: str,
        target: str,
        raw: bytes,
        extra: Mapping[str, str],
        *,
        signed: bool = False,
    ) -> httpx.Response:
        """Send one request; with ``retry_seconds``, send it again (to the next server URL,
        with the same request id) while the connection fails or the server says 503.

        Every request that is not a GET names itself (``X-Kforge-Request-Id``): a server
        that answered it before a lost connection answers the same again.
        """
        request_id = os.urandom(32).hex() if method != "GET" else None
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            if signed:
                headers = self.key.request_headers(method, target, raw)
            else:
                headers = await self._auth_headers(method, target, raw)
            headers.update(extra)
            if request_id is not None:
                headers[REQUEST_ID_HEADER] = request_id
            try:
                response = await self._http.request(
                    method, self.base_url + target, content=raw, headers=headers
                )
            except httpx.TransportError:
                if time.monotonic() >= deadline:
                    raise
                self._next_server()
            else:
                if response.status_code != 503 or time.monotonic() >= deadline:
                    return response
                self._next_server()  # this one is draining or not ready: ask another
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)

    def _next_server(self) -> None:
        index = self._urls.index(self.base_url)
        self.base_url = self._urls[(index + 1) % len(self._urls)]

    # ------------------------------------------------------------------ the engine's shape

    async def put_program(self, program: ForgeProgram, *, name: str | None = None) -> Hash256:
        """Store ``program`` in the server's vault; returns its id.  ``name``: what the
        dashboard calls it."""
        body = ProgramBody(program=program.encoded, name=name)
        return (await self._send("POST", "/v1/programs", body, ProgramStored)).program_id

    async def put_starlark(
        self,
        source: str,
        *,
        filename: str = "main.star",
        memory_quota: int | None = None,
        name: str | None = None,
    ) -> Hash256:
        """Have the server compile Starlark ``source`` (named ``filename``, for a machine of
        ``memory_quota`` bytes: the server's default when ``None``) and store the program;
        returns its id.  A compile error is a 400 whose message is
        ``FILE:LINE:COL: message``; ``load("sha256:…")`` finds libraries in the server's
        vault."""
        body = ProgramBody(starlark=source, filename=filename, memory_quota=memory_quota, name=name)
        return (await self._send("POST", "/v1/programs", body, ProgramStored)).program_id

    async def create_sandbox(self, request: CreateSandbox) -> Hash256:
        return (await self._send("POST", "/v1/sandboxes", request, SandboxCreated)).sandbox_id

    async def sandbox_status(
        self, sandbox_id: Hash256, requester: AgentId | None = None
    ) -> SandboxInfo:
        self._check_requester(requester)
        return await self._send("GET", f"/v1/sandboxes/{sandbox_id.hex}", None, SandboxStatus)

    async def list_sandboxes(self, owner: AgentId | None = None) -> list[SandboxInfo]:
        """The sandboxes this agent may see (of ``owner``, when given)."""
        listed = await self._send("GET", "/v1/sandboxes", None, SandboxList)
        return [info for info in listed.sandboxes if owner is None or info.owner == owner]

    async def exec_start(self, sandbox_id: Hash256, requester: AgentId | None = None) -> None:
        self._check_requester(requester)
        await self._send("POST", f"/v1/sandboxes/{sandbox_id.hex}/start", Accepted())

    async def step(self, sandbox_id: Hash256, requester: AgentId | None = None) -> SandboxState:
        self._check_requester(requester)
        path = f"/v1/sandboxes/{sandbox_id.hex}/step"
        return (await self._send("POST", path, Accepted(), StepResult)).state

    async def deliver(
        self, sandbox_id: Hash256, channel: int, data: bytes, requester: AgentId | None = None
    ) -> None:
        self._check_requester(requester)
        path = f"/v1/sandboxes/{sandbox_id.hex}/deliver"
        await self._send("POST", path, DeliverBody(bytes(data), channel))

    async def kill_sandbox(self, sandbox_id: Hash256, requester: AgentId | None = None) -> None:
        self._check_requester(requester)
        await self._send("POST", f"/v1/sandboxes/{sandbox_id.hex}/kill", Accepted())

    async def wait(
        self, sandbox_id: Hash256, requester: AgentId | None = None, *, timeout: float | None = None
    ) -> ExecResult:
        """The result once stopped; ``TimeoutError`` after ``timeout`` seconds (long-polls in turns)."""
        self._check_requester(requester)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (
                _MAX_POLL
                if deadline is None
                else max(0.0, min(_MAX_POLL, deadline - time.monotonic()))
            )
            try:
                waited = await self._send(
                    "GET",
                    f"/v1/sandboxes/{sandbox_id.hex}/wait",
                    None,
                    WaitResult,
                    query={"timeout": f"{left:.3f}"},
                )
            except TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            fields = msgspec.structs.asdict(waited)
            length = fields.pop("output_length")
            output = waited.output
            if length > len(output):  # the reply holds the first chunk: read the rest
                output += await self.output(sandbox_id, offset=len(output))
            fields["output"] = output
            return ExecResult(**fields)

    async def forget(self, sandbox_id: Hash256, requester: AgentId | None = None) -> None:
        self._check_requester(requester)
        await self._send("DELETE", f"/v1/sandboxes/{sandbox_id.hex}")

    async def io_log(
        self, sandbox_id: Hash256, requester: AgentId | None = None
    ) -> tuple[HostCall, ...]:
        self._check_requester(requester)
        path = f"/v1/sandboxes/{sandbox_id.hex}/io"
        return (await self._send("GET", path, None, HostCalls)).calls

    async def output(
        self, sandbox_id: Hash256, requester: AgentId | None = None, *, offset: int = 0
    ) -> bytes:
        """The sandbox's stdout from ``offset`` on, live or stopped (as :meth:`Engine.output`).

        Reads every chunk written up to now (``GET …/output``, in turns of
        at most the server's chunk size); ``InvalidRequest`` for an offset
        past the output's length.
        """
        self._check_requester(requester)
        chunks: list[bytes] = []
        while True:
            chunk = await self._send(
                "GET",
                f"/v1/sandboxes/{sandbox_id.hex}/output",
                None,
                OutputChunk,
                query={"offset": offset},
            )
            chunks.append(chunk.data)
            offset = chunk.next_offset
            if offset >= chunk.length or not chunk.data:
                return b"".join(chunks)

    async def run_record(self, sandbox_id: Hash256, requester: AgentId | None = None) -> RunRecord:
        self._check_requester(requester)
        path = f"/v1/sandboxes/{sandbox_id.hex}/record"
        return RunRecord.from_bytes((await self._send("GET", path, None, RunRecordView)).record)

    async def request_proof(
        self, sandbox_id: Hash256, requester: AgentId | None = None
    ) -> ExecutionProof:
        self._check_requester(requester)
        path = f"/v1/sandboxes/{sandbox_id.hex}/proof"
        result = await self._send("POST", path, Accepted(), ProofResult)
        if isinstance(result.proof, msgspec.UnsetType):
            raise RemoteError(500, 0x05FF, "Internal", "the server sent no proof", {})
        return ExecutionProof.from_bytes(result.proof)

    async def grant(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None,
        agent: AgentId,
        operations: Iterable[Operation],
    ) -> None:
        self._check_requester(requester)
        body = GrantBody(agent, tuple(operations))
        await self._send("POST", f"/v1/sandboxes/{sandbox_id.hex}/grants", body)

    async def revoke(self, sandbox_id: Hash256, requester: AgentId | None, agent: AgentId) -> None:
        self._check_requester(requester)
        await self._send("DELETE", f"/v1/sandboxes/{sandbox_id.hex}/grants/{agent.hex}")

    async def link_resolve(
        self, program_id: Hash256, imports: Sequence[Import], requester: AgentId | None = None
    ) -> Hash256:
        self._check_requester(requester)
        body = LinkResolve(program_id, tuple(imports))
        return (await self._send("POST", "/v1/link", body, LinkResult)).resolved

    async def begin_cycle(self, allowances: Mapping[AgentId, int] | None = None) -> int:
        """Operator only (the server refuses any other agent)."""
        given = (
            None
            if allowances is None
            else tuple(Allowance(agent, ticks) for agent, ticks in allowances.items())
        )
        return (await self._send("POST", "/v1/cycles", CycleBody(given), CycleStarted)).cycle

    # ------------------------------------------------------------------ messages and events

    async def dispatch(self, envelope: Envelope) -> Envelope:
        """Send one envelope (its sender must be this agent); returns the engine's reply."""
        return Envelope.decode(await self.dispatch_bytes(envelope.encode()))

    async def dispatch_bytes(self, raw: bytes) -> bytes:
        extra = {"content-type": _MSGPACK, "accept": _MSGPACK}
        response = await self._exchange("POST", "/v1/messages", raw, extra)
        if response.status_code >= 400:
            _raise_for(response)
        return response.content

    async def mailbox(self, timeout: float = 0.0) -> list[Envelope]:
        """Envelopes the engine sent this agent later (EXEC_RESULT, PROOF_RESULT)."""
        query = {"timeout": f"{timeout:.3f}"}
        return list((await self._send("GET", "/v1/mailbox", None, _Mail, query=query)).envelopes)

    async def subscribe(
        self,
        kinds: Iterable[EventKind] | None = None,
        *,
        sandbox_id: Hash256 | None = None,
        owner: AgentId | None = None,
    ) -> AsyncIterator[Event | Gap]:
        """Events as the engine publishes them (an async iterator over a WebSocket).

        Payload ids arrive as 32-byte binaries (the events' wire form).
        """
        from websockets.asyncio.client import connect

        query: dict[str, str] = {"format": "msgpack"}
        if kinds is not None:
            query["kinds"] = ",".join(str(int(kind)) for kind in kinds)
        if sandbox_id is not None:
            query["sandbox"] = sandbox_id.hex
        if owner is not None:
            query["owner"] = owner.hex
        target = f"/v1/events?{urlencode(query)}"
        headers = await self._auth_headers("GET", target, b"")
        url = "ws" + self.base_url[len("http") :] + target
        async with connect(url, additional_headers=headers, max_size=16 * 1024 * 1024) as socket:
            async for frame in socket:
                yield _event(unpack(frame if isinstance(frame, bytes) else frame.encode(), "event"))

    # ------------------------------------------------------------------ the debugger

    async def debug(
        self, method: str, path: str = "", values: Mapping[str, Any] | None = None
    ) -> Any:
        """A debugger call: ``debug("POST", "", {"assembly": ...})`` creates a session,
        ``debug("POST", f"/{sid}/step", {"count": 1})`` steps it; returns the view."""
        return await self._send(method, f"/v1/debug{path}", values)
