"""The plumbing every API operation shares: body, identity, limits, errors, encoding.

An :class:`Operation` is one method and path with its handler and the facts the
OpenAPI document needs.  :func:`asgi_endpoint` wraps its handler: read the body
(at most :attr:`ServerConfig.max_body_bytes`), authenticate the caller, charge
its rate limit, decode the body into the operation's schema, call the
handler, and encode the reply as JSON or msgpack.  Every refusal becomes an
error body (:class:`~kforge.server.schemas.ErrorBody`) with the HTTP status the
error's class carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import Response

from kforge.core import AgentId, ForgeError, Hash256, Internal, InvalidRequest, KingdomError
from kforge.engine.policy import Action, RateLimited
from kforge.server.auth import AuthError, Principal
from kforge.server.codec import BodyError, decode_body, decode_plain, encode_body, wants_msgpack
from kforge.server.schemas import ErrorBody, ErrorDetail
from kforge.wire import Schema

if TYPE_CHECKING:
    from kforge.server.state import ServerState

__all__ = [
    "REQUEST_ID_HEADER",
    "Context",
    "Handler",
    "Operation",
    "Query",
    "asgi_endpoint",
    "current_request_id",
    "error_response",
    "http_status",
    "path_id",
    "query_bool",
    "query_integer",
    "query_number",
]

log = logging.getLogger("kforge.server")

#: The header naming a request, so that sending it again (after a lost connection) does
#: it once: 64 hex digits of the client's choosing.  An engine that keeps replies (a
#: cluster's workers) answers a request id it has seen with the reply it gave.
REQUEST_ID_HEADER = "x-kforge-request-id"
_REQUEST_ID: ContextVar[Hash256 | None] = ContextVar("kforge_request_id", default=None)


def current_request_id() -> Hash256 | None:
    """The id the client gave the request being answered (``None``: it gave none)."""
    return _REQUEST_ID.get()


def _request_id(request: Request) -> Hash256 | None:
    text = request.headers.get(REQUEST_ID_HEADER)
    if text is None:
        return None
    try:
        return Hash256.from_hex(text)
    except ValueError as error:
        raise InvalidRequest(REQUEST_ID_HEADER, str(error)) from None


def http_status(error: ForgeError) -> int:
    """The HTTP status of an engine error: a fact of its class (``docs/server.md`` has the table)."""
    return error.http_status


@dataclass(frozen=True, slots=True)
class Query:
    """A query parameter, for the OpenAPI document."""

    name: str
    schema: dict[str, Any]
    description: str = ""


@dataclass
class Context:
    """One authenticated request as a handler sees it."""

    request: Request
    state: ServerState
    principal: Principal
    #: The body as the operation's schema (``body``), or as plain data (``raw_body``).
    body: Any
    msgpack: bool

    @property
    def agent(self) -> Any:
        return self.principal.agent

    def path(self, name: str) -> str:
        value: str = self.request.path_params[name]
        return value


Handler = Callable[[Context], Awaitable[tuple[int, Any] | Response]]


@dataclass(frozen=True)
class Operation:
    """One API operation: route, handler, the engine's action it takes, and what the
    OpenAPI document says of it.

    ``action`` names the rule of :data:`kforge.engine.policy.RULES` the route is
    decided by; the engine's operation behind the handler enforces it (the
    handler passes the caller along and decides nothing itself).
    """

    method: str
    path: str
    handler: Handler
    summary: str
    action: Action
    body: type[Schema] | None = None  # the request body's schema, if any
    raw_body: bool = False  # the handler reads ``ctx.body`` (plain data) itself
    body_schema: dict[str, Any] | None = None  # for raw bodies
    response: type[Schema] | dict[str, Any] = field(default_factory=dict)  # the 2xx body
    status: int = 200
    errors: tuple[int, ...] = ()
    query: tuple[Query, ...] = ()
    authenticated: bool = True
    signature_only: bool = False
    tag: str = "engine"


def error_body(
    status: int, code: int, category: str, message: str, context: dict[str, str] | None = None
) -> ErrorBody:
    return ErrorBody(ErrorDetail(status, code, category, message, context or {}))


def error_response(
    request: Request, status: int, body: ErrorBody, retry_after: float | None = None
) -> Response:
    content, media = encode_body(
        body, wants_msgpack(request.headers.get("accept"), request.headers.get("content-type"))
    )
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after is not None else None
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="kforge", KforgeSignature'}
    return Response(content, status, headers=headers, media_type=media)


def forge_error_response(request: Request, error: ForgeError) -> Response:
    return kingdom_error_response(request, error.to_kingdom_error(), http_status(error))


def kingdom_error_response(request: Request, kingdom: KingdomError, status: int) -> Response:
    context = {
        key.decode("utf-8", "replace"): value.decode("utf-8", "replace")
        for key, value in kingdom.context.items()
    }
    body = error_body(
        status,
        kingdom.code,
        kingdom.category.value,
        kingdom.message.decode("utf-8", "replace"),
        context,
    )
    return error_response(request, status, body)


def auth_error_response(request: Request, error: AuthError) -> Response:
    category = "QuotaExceeded" if error.status in (429, 503) else "Unauthorized"
    code = 0x0504 if error.status in (429, 503) else 0x0502
    return error_response(
        request,
        error.status,
        error_body(error.status, code, category, error.message),
        error.retry_after,
    )


def declared_length(request: HTTPConnection) -> int | None:
    """The body's length as its ``Content-Length`` says (``None``: not said)."""
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


async def read_limited(request: Request, limit: int) -> bytes:
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise BodyError(413, f"body of {declared} bytes is over the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyError(413, f"body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def request_target(request: HTTPConnection) -> str:
    """The path and query exactly as sent: what a signature covers."""
    raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
    query: bytes = request.scope.get("query_string", b"")
    target = raw_path.decode("latin-1")
    return f"{target}?{query.decode('latin-1')}" if query else target


def asgi_endpoint(operation: Operation) -> Callable[[Request], Awaitable[Response]]:
    """The Starlette endpoint running ``operation`` with the shared plumbing."""

    def admit(request: Request, raw: bytes | None) -> Principal:
        """The caller, authenticated, within its rates of requests and of body bytes (the
        body's declared length when it is not read yet)."""
        state: ServerState = request.app.state.kforge
        authenticator = state.authenticator
        principal = authenticator.authenticate(
            request.method, request_target(request), raw or b"", request.headers
        )
        if operation.signature_only and principal.method != "signature":
            raise AuthError(401, "this operation needs a signed request, not a token")
        authenticator.limiter.take(principal.agent)
        size = len(raw) if raw is not None else declared_length(request)
        if size:
            authenticator.body_limiter.take(principal.agent, size)
        return principal

    async def endpoint(request: Request) -> Response:
        state: ServerState = request.app.state.kforge
        counted: AgentId | None = None
        read = False
        try:
            principal = Principal(state.operator_agent, True, "none")
            # Performance note: a caller with a token is admitted (or refused) before its
            # body is read: a refusal costs the server nothing of a large body.
            early = operation.authenticated and not state.authenticator.reads_body(request.headers)
            if early:
                principal = admit(request, None)
                counted = _enter(state, principal.agent)
            raw = await read_limited(request, state.config.max_body_bytes)
            read = True
            if early and declared_length(request) is None and raw:  # sent in chunks
                state.authenticator.body_limiter.take(principal.agent, len(raw))
            if operation.authenticated and not early:
                principal = admit(request, raw)
                counted = _enter(state, principal.agent)
            content_type = request.headers.get("content-type")
            body: Any = None
            is_msgpack = False
            if operation.body is not None:
                body = decode_body(raw, content_type, operation.body)
            elif operation.raw_body:
                body, is_msgpack = decode_plain(raw, content_type)
            context = Context(request, state, principal, body, is_msgpack)
            _REQUEST_ID.set(_request_id(request))
            outcome = await operation.handler(context)
        except ClientDisconnect:  # nobody to answer: no error of ours either
            return Response(status_code=400)
        except AuthError as error:
            return _unread_closes(request, read, auth_error_response(request, error))
        except RateLimited as error:
            refusal = AuthError(429, str(error), error.retry_after)
            return _unread_closes(request, read, auth_error_response(request, refusal))
        except BodyError as error:
            return error_response(
                request,
                error.status,
                error_body(error.status, 0x0506, "InvalidRequest", error.message),
            )
        except ForgeError as error:
            return forge_error_response(request, error)
        except TimeoutError:
            body408 = error_body(408, 0x0501, "Conflict", "still running when the timeout passed")
            return error_response(request, 408, body408)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug: answer it, never drop the connection
            log.exception("%s %s failed", request.method, request.url.path)
            return forge_error_response(request, Internal(f"{type(error).__name__}: {error}"))
        finally:
            if counted is not None:
                _leave(state, counted)
        if isinstance(outcome, Response):
            return outcome
        status, value = outcome
        as_msgpack = wants_msgpack(
            request.headers.get("accept"), request.headers.get("content-type")
        )
        content, media = encode_body(value, as_msgpack)
        return Response(content, status, media_type=media)

    endpoint.__name__ = operation.handler.__name__
    return endpoint


def _unread_closes(request: Request, read: bool, response: Response) -> Response:
    """``response``, closing the connection when it refuses a body not read: the caller
    cannot go on sending bodies the server only reads to throw away."""
    if not read and declared_length(request):
        response.headers["connection"] = "close"
    return response


def _enter(state: ServerState, agent: AgentId) -> AgentId:
    """Count a request of ``agent`` in flight; 429 when it has too many already."""
    held = state.in_flight.get(agent, 0)
    limit = state.config.max_requests_in_flight_per_agent
    if held >= limit:
        raise AuthError(429, f"agent {agent} has {held} requests in flight, at most {limit}", 1.0)
    state.in_flight[agent] = held + 1
    return agent


def _leave(state: ServerState, agent: AgentId) -> None:
    left = state.in_flight.get(agent, 1) - 1
    if left:
        state.in_flight[agent] = left
    else:
        state.in_flight.pop(agent, None)


def path_id(ctx: Context, name: str) -> Hash256:
    """A path parameter holding an id; ``InvalidRequest`` (400) when it is not 64 hex digits."""
    try:
        return Hash256.from_hex(ctx.path(name))
    except ValueError as error:
        raise InvalidRequest(name, str(error)) from None


def query_number(ctx: Context, name: str, default: float, low: float, high: float) -> float:
    text = ctx.request.query_params.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise InvalidRequest(name, f"expected a number, got {text!r:.40}") from None
    if not low <= value <= high:
        raise InvalidRequest(name, f"{value} is outside {low:g}..{high:g}")
    return value


def query_integer(ctx: Context, name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter in ``low..high``; ``InvalidRequest`` (400) otherwise."""
    text = ctx.request.query_params.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise InvalidRequest(name, f"expected a whole number, got {text!r:.40}")
    value = int(text)
    if not low <= value <= high:
        raise InvalidRequest(name, f"{value} is outside {low}..{high}")
    return value


def query_bool(ctx: Context, name: str) -> bool:
    text = ctx.request.query_params.get(name, "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise InvalidRequest(name, f"expected true or false, got {text!r:.40}")
    return text in ("true", "1")
