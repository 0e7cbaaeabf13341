"""``/v1/events``: the event bus over a WebSocket, filtered by kind, sandbox and owner.

Query parameters: ``kinds`` (comma-separated names such as ``SANDBOX_HALTED``
or numbers such as ``0x4002``), ``sandbox`` and ``owner`` (64 hex digits),
``format`` (``json``, the default: text frames; ``msgpack``: binary frames
of :meth:`kforge.events.Event.encode`), ``since`` (a sequence number: the events
from there on that the bus still holds come first, then live ones; a cluster's
bus holds them all).  Authentication as for any request
(signature or bearer header), or ``token=`` in the query for browsers.

An agent sees the events of its own sandboxes, and of a sandbox it holds a
``status`` grant on when it names it with ``sandbox=``; the operator sees
everything.  A subscriber that falls behind gets ``{"gap": n}`` where ``n``
events were dropped.  Refusals close the socket with code 4401 (identity),
4403 (not allowed), 4400 (bad query) or 4429 (too many subscriptions).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from kforge.core import AgentId, EventKind, ForgeError, Hash256
from kforge.engine.policy import Action, RateLimited
from kforge.events import Event, Gap
from kforge.messages import pack
from kforge.server.auth import AuthError, Principal
from kforge.server.endpoint import request_target
from kforge.server.state import ServerState
from kforge.wire import json_value

__all__ = ["event_json", "events_socket", "parse_kinds"]


class _Refused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def parse_kinds(text: str | None) -> list[EventKind] | None:
    """``"SANDBOX_HALTED,0x4003"`` → kinds; ``None`` or empty → every kind."""
    if not text:
        return None
    kinds = []
    for part in text.split(","):
        name = part.strip()
        try:
            kinds.append(
                EventKind[name.upper()] if not name[:1].isdigit() else EventKind(int(name, 0))
            )
        except (KeyError, ValueError):
            raise _Refused(4400, f"unknown event kind {name!r:.40}") from None
    return kinds


def _id(text: str | None, name: str) -> Hash256 | None:
    if text is None:
        return None
    try:
        return Hash256.from_hex(text)
    except ValueError:
        raise _Refused(4400, f"{name} must be 64 hex digits") from None


def event_json(event: Event) -> dict[str, Any]:
    """An event in the JSON conventions (ids as hex; a bytes field ``name`` as ``name_hex``)."""
    shaped: dict[str, Any] = json_value(
        {
            "seq": event.seq,
            "kind": int(event.kind),
            "kind_name": event.kind.name,
            "sandbox_id": event.sandbox_id,
            "owner": event.owner,
            "timestamp_ms": event.timestamp_ms,
            "payload": dict(event.payload),
        }
    )
    return shaped


async def _authorize(websocket: WebSocket, state: ServerState) -> tuple[Principal, dict[str, Any]]:
    query = websocket.query_params
    try:
        principal = state.authenticator.authenticate(
            "GET", request_target(websocket), b"", websocket.headers, query.get("token")
        )
        state.authenticator.limiter.take(principal.agent)
    except AuthError as error:
        raise _Refused(4429 if error.status == 429 else 4401, error.message) from None
    except RateLimited as error:
        raise _Refused(4429, str(error)) from None
    kinds = parse_kinds(query.get("kinds"))
    sandbox = _id(query.get("sandbox"), "sandbox")
    owner_id = _id(query.get("owner"), "owner")
    owner = AgentId(owner_id.raw) if owner_id is not None else None
    since = _since(query.get("since"))
    fmt = query.get("format", "json")
    if fmt not in ("json", "msgpack"):
        raise _Refused(4400, "format must be json or msgpack")
    policy = state.engine.policy
    if not policy.allows(Action.WATCH_ALL_EVENTS, principal.agent):
        granted = False
        if sandbox is not None:
            try:
                await state.engine.authorize_sandbox(Action.WATCH_EVENTS, sandbox, principal.agent)
                granted = True
            except ForgeError:
                granted = False
        if not granted:
            if owner is not None and owner != principal.agent:
                raise _Refused(4403, "an agent may watch only its own sandboxes' events")
            owner = principal.agent
    return principal, {
        "kinds": kinds,
        "sandbox_id": sandbox,
        "owner": owner,
        "format": fmt,
        "since": since,
    }


def _since(text: str | None) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise _Refused(4400, "since must be an event sequence number")
    return int(text)


async def events_socket(websocket: WebSocket) -> None:
    """Stream matching events until the client goes away."""
    state: ServerState = websocket.app.state.kforge
    await websocket.accept()
    try:
        principal, options = await _authorize(websocket, state)
    except _Refused as refused:
        await websocket.close(refused.code, refused.reason[:120])
        return
    agent = principal.agent
    open_count = state.subscriptions.get(agent, 0)
    if open_count >= state.config.max_event_subscriptions_per_agent:
        await websocket.close(4429, "too many event subscriptions")
        return
    state.subscriptions[agent] = open_count + 1
    subscription = state.engine.bus.subscribe(
        options["kinds"],
        sandbox_id=options["sandbox_id"],
        owner=options["owner"],
        maxsize=state.config.event_queue_size,
        since=options["since"],
    )
    as_msgpack = options["format"] == "msgpack"

    async def forward() -> None:
        async for item in subscription:
            if isinstance(item, Gap):
                if as_msgpack:
                    await websocket.send_bytes(pack({"gap": item.dropped}))
                else:
                    await websocket.send_json({"gap": item.dropped})
            elif as_msgpack:
                await websocket.send_bytes(item.encode())
            else:
                await websocket.send_json(event_json(item))

    async def listen() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass

    tasks = [asyncio.ensure_future(forward()), asyncio.ensure_future(listen())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        subscription.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        remaining = state.subscriptions.get(agent, 1) - 1
        if remaining:
            state.subscriptions[agent] = remaining
        else:
            state.subscriptions.pop(agent, None)
        with contextlib.suppress(Exception):
            await websocket.close()
