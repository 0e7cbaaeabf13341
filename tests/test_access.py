"""Who may do what: the policy's one table against every route and every message code.

Each route of the API and each request code of the message protocol is walked
as three callers: the owner of what it names, another agent, and the operator.
What happens must be what :data:`kforge.engine.policy.RULES` says: a refusal
(403, or 404 where the rule hides the thing; an ERROR envelope carrying
``PermissionDenied`` for messages) exactly when the rule does not allow the
caller.  The regressions below are the attacks that passed before the table
was enforced in one place: an ordinary agent starting a cycle through
``POST /v1/messages``, and the per-agent sandbox cap skipped by creating
through messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from kforge.core import AgentId, Hash256, MessageCode
from kforge.engine import EngineLimits
from kforge.engine.dispatch import MESSAGE_ACTIONS
from kforge.engine.policy import RULES, Action, OverLimit
from kforge.messages import (
    Envelope,
    ExtensionCode,
    ReplyCode,
    decode_payload,
    kingdom_error_from_payload,
)
from kforge.server import AuthConfig, ServerConfig
from kforge.server.app import ALL_OPERATIONS
from test_engine_support import OTHER, OWNER, create, open_engine, run
from test_server_support import WAIT_INPUT, Agent, LiveServer, running_server

#: A service: answers each call on channel 3 with the call's bytes.
SERVICE = """
again:  LI   r2, 4096
        RECV 3, r3, r253, r2
        SEND 3, r253, r3
        JMP  again
"""

ROLES = ("owner", "other", "operator")


@dataclass
class World:
    """A server with an owner's things, and the three callers."""

    live: LiveServer
    owner: Agent
    other: Agent
    operator: Agent

    def caller(self, role: str) -> Agent:
        agent: Agent = getattr(self, role)
        return agent

    def agent_id(self, role: str) -> AgentId:
        if role == "operator":
            return self.live.state.operator_agent
        return self.caller(role).key.agent_id

    def sandbox(self, **extra: Any) -> str:
        """A fresh persistent sandbox of the owner's, blocked on stdin once started."""
        return self.owner.create(WAIT_INPUT, persistent=True, grants=[3], **extra)

    def halted_sandbox(self) -> str:
        sandbox = self.owner.create("HALT")
        self.owner.run_to_end(sandbox)
        return sandbox

    def service(self) -> str:
        sandbox = self.owner.create(SERVICE, persistent=True, grants=[3])
        body = {
            "sandbox": sandbox,
            "name": "echo",
            "tick_budget": 100_000,
            "endpoints": [{"name": "echo", "channel": 3, "schema": ""}],
        }
        return str(self.owner.ok("POST", "/v1/services", body, 201)["service_id"])

    def debug_session(self) -> str:
        for role in ROLES:  # the walk would run into the per-agent cap of sessions
            caller = self.caller(role)
            for session in caller.ok("GET", "/v1/debug")["sessions"]:
                caller.ok("DELETE", f"/v1/debug/{session['session_id']}")
        view = self.owner.ok("POST", "/v1/debug", {"assembly": "HALT"}, 201)
        return str(view["session_id"])


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    config = ServerConfig(auth=AuthConfig(rate_per_second=10_000, rate_burst=10_000))
    with running_server(config, EngineLimits(max_sandboxes_per_owner=1024)) as live:
        owner, other = Agent(live.base_url), Agent(live.base_url)
        operator = Agent(live.base_url, token=live.dev_token)
        yield World(live, owner, other, operator)
        for agent in (owner, other, operator):
            agent.close()


def expected(world: World, action: Action, role: str, owner: str = "owner") -> bool:
    """The table's answer: may ``role`` take ``action`` on something ``owner`` owns?"""
    agent = world.agent_id(role)
    return RULES[action].allows(
        agent,
        operator=world.live.engine.policy.is_operator(agent),
        owner=world.agent_id(owner),
    )


# ----------------------------------------------------------------- routes


def _route_request(world: World, method: str, path: str) -> tuple[str, Any]:
    """The path (parameters filled in with the owner's things) and a valid body."""
    owner_hex = world.owner.id_hex
    fills = {
        "{sandbox_id}": world.sandbox,
        "{service_id}": world.service,
        "{session_id}": world.debug_session,
        "{program_id}": lambda: world.owner.put_program("HALT"),
        "{agent}": lambda: world.other.id_hex,
    }
    if path.endswith("/proof") or path.endswith("/record") or path == "/v1/sandboxes/{sandbox_id}":
        fills["{sandbox_id}"] = world.halted_sandbox
    for name, make in fills.items():
        if name in path:
            path = path.replace(name, make())
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/v1/programs"): lambda: {"assembly": "HALT"},
        ("POST", "/v1/sandboxes"): lambda: {
            "owner": owner_hex,
            "code": world.owner.put_program(WAIT_INPUT),
            "memory_quota": 65536,
            "tick_budget": 1000,
        },
        ("POST", "/v1/link"): lambda: {"program": world.owner.put_program("HALT"), "imports": []},
        ("POST", "/v1/cycles"): lambda: {},
        ("POST", "/v1/services"): lambda: {
            "owner": owner_hex,
            "sandbox": world.sandbox(),
            "name": "s",
            "tick_budget": 1000,
            "endpoints": [{"name": "e", "channel": 3, "schema": ""}],
        },
        ("POST", "/v1/messages"): lambda: {
            "code": int(MessageCode.SANDBOX_STATUS),
            "payload": {"sandbox_id": world.sandbox()},
        },
        ("POST", "/v1/debug"): lambda: {"assembly": "HALT"},
    }
    suffix_bodies = {
        "/deliver": {"channel": 2, "data": "x"},
        "/grants": {"agent": world.other.id_hex, "operations": ["status"]},
        "/call": {"endpoint": "echo", "data": "x"},
        "/step": {"count": 1},
        "/run": {"max_ticks": 10},
        "/breakpoints": {"breakpoints": []},
        "/start": {},
        "/kill": {},
        "/proof": {},
        "/fund": {},
        "/step_over": {},
        "/step_out": {},
    }
    make = bodies.get((method, path))
    body = make() if make is not None else None
    if body is None and method in ("POST", "PUT"):
        body = next((b for s, b in suffix_bodies.items() if path.endswith(s)), {})
    return path, body


# Routes whose target is the caller's own (a creation without an owner, its own
# mailbox, its own debug sessions): every caller is its owner.
_OWN_TARGET = {("GET", "/v1/mailbox"), ("POST", "/v1/debug"), ("GET", "/v1/debug")}


@pytest.mark.parametrize(
    "operation", ALL_OPERATIONS, ids=[f"{op.method} {op.path}" for op in ALL_OPERATIONS]
)
@pytest.mark.parametrize("role", ROLES)
def test_every_route_does_what_the_table_says(world: World, operation: Any, role: str) -> None:
    path, body = _route_request(world, operation.method, operation.path)
    if operation.method == "GET" and operation.path.endswith("/wait"):
        path += "?timeout=0"
    response = world.caller(role).request(operation.method, path, body)
    owner = role if (operation.method, operation.path) in _OWN_TARGET else "owner"
    allowed = expected(world, operation.action, role, owner)
    refusal = 404 if RULES[operation.action].hidden else 403
    if allowed:
        assert response.status_code != refusal or "channel" in response.text, response.text
        assert response.status_code != 403, response.text
    else:
        assert response.status_code == refusal, (response.status_code, response.text)


@pytest.mark.parametrize("role", ROLES)
def test_listing_every_sandbox_is_the_operators(world: World, role: str) -> None:
    response = world.caller(role).request("GET", "/v1/sandboxes?all=true")
    allowed = expected(world, Action.LIST_ALL_SANDBOXES, role)
    assert (response.status_code == 200) is allowed
    assert (response.status_code == 403) is not allowed


@pytest.mark.parametrize("role", ROLES)
def test_watching_the_owners_events_is_as_the_table_says(world: World, role: str) -> None:
    url = world.live.base_url.replace("http", "ws") + f"/v1/events?owner={world.owner.id_hex}"
    caller = world.caller(role)
    token = caller.token or caller.ok("POST", "/v1/session", {}, 201)["token"]
    allowed = expected(world, Action.WATCH_EVENTS, role)
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as socket:
        if allowed:
            with pytest.raises(TimeoutError):
                socket.recv(timeout=0.2)  # open: no events yet, no refusal
        else:
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


def test_every_route_names_an_action_of_the_table() -> None:
    assert {op.action for op in ALL_OPERATIONS} <= set(RULES)
    assert set(MESSAGE_ACTIONS.values()) <= set(RULES)


# ----------------------------------------------------------------- message codes


def _message_payload(world: World, code: int) -> dict[str, Any]:
    owner_hex = world.owner.id_hex
    if code == MessageCode.SANDBOX_CREATE:
        program = world.owner.put_program(WAIT_INPUT)
        return {"owner": owner_hex, "code": program, "memory_quota": 65536, "tick_budget": 1000}
    if code == MessageCode.PROOF_REQUEST:
        return {"sandbox_id": world.halted_sandbox()}
    if code in (MessageCode.SANDBOX_STATUS, MessageCode.SANDBOX_KILL, MessageCode.EXEC_START):
        return {"sandbox_id": world.sandbox()}
    if code == ExtensionCode.SANDBOX_DELIVER:
        return {"sandbox_id": world.sandbox(), "channel": 2, "data": "x"}
    if code == MessageCode.LINK_RESOLVE:
        return {"program": world.owner.put_program("HALT"), "imports": []}
    if code == MessageCode.SERVICE_CREATE:
        return {
            "owner": owner_hex,
            "sandbox": world.sandbox(),
            "name": "s",
            "tick_budget": 1000,
            "auto_fund": True,
            "endpoints": [{"name": "e", "channel": 3, "schema": ""}],
        }
    if code == MessageCode.SERVICE_CALL:
        return {"service_id": world.service(), "endpoint": "echo", "data": "x"}
    if code == ExtensionCode.SERVICE_FUND:
        return {"service_id": world.service()}
    assert code == ExtensionCode.CYCLE_ADVANCE
    return {}


@pytest.mark.parametrize("code", sorted(MESSAGE_ACTIONS), ids=lambda code: f"0x{code:04X}")
@pytest.mark.parametrize("role", ROLES)
def test_every_message_code_does_what_the_table_says(world: World, code: int, role: str) -> None:
    body = {"code": code, "payload": _message_payload(world, code)}
    reply = world.caller(role).ok("POST", "/v1/messages", body)
    denied = reply["code"] == ReplyCode.ERROR and reply["payload"]["code"] == 0x0502
    assert denied is not expected(world, MESSAGE_ACTIONS[code], role), reply


def test_every_other_code_is_refused_as_no_request() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            for code in range(1 << 16):
                envelope = Envelope(Hash256(bytes(32)), OWNER, code, b"\x80", 0)
                reply = await engine.dispatch(envelope)
                if code in MESSAGE_ACTIONS:
                    continue
                error = kingdom_error_from_payload(reply.payload)
                assert reply.code == ReplyCode.ERROR and error.context[b"field"] == b"envelope.code"

    run(body)


# ----------------------------------------------------------------- the attacks


def test_an_agent_cannot_begin_a_cycle_by_message() -> None:
    """The attack: CYCLE_ADVANCE through /v1/messages was ACKed, killing everyone's sandboxes."""
    with running_server() as live:
        victim, attacker = Agent(live.base_url), Agent(live.base_url)
        sandbox = victim.create(WAIT_INPUT)
        reply = attacker.ok(
            "POST", "/v1/messages", {"code": int(ExtensionCode.CYCLE_ADVANCE), "payload": {}}
        )
        assert reply["code"] == ReplyCode.ERROR and reply["payload"]["code"] == 0x0502
        assert victim.ok("GET", f"/v1/sandboxes/{sandbox}")["state"] == "READY"
        assert live.engine.cycle == 0
        operator = Agent(live.base_url, token=live.dev_token)
        reply = operator.ok(
            "POST", "/v1/messages", {"code": int(ExtensionCode.CYCLE_ADVANCE), "payload": {}}
        )
        assert decode_payload(ReplyCode.ACK, _ack_bytes(reply)).cycle == 1
        for agent in (victim, attacker, operator):
            agent.close()


def _ack_bytes(reply: dict[str, Any]) -> bytes:
    from kforge.messages import encode_payload
    from kforge.messages.payloads import Ack

    assert reply["code"] == ReplyCode.ACK, reply
    return encode_payload(ReplyCode.ACK, Ack(cycle=reply["payload"]["cycle"]))


def test_the_per_agent_cap_holds_however_sandboxes_are_created() -> None:
    """The attack: creating through /v1/messages skipped the server's cap of 64 (one agent
    reached 164).  Half by route, half by message: the next one is refused either way."""
    config = ServerConfig(auth=AuthConfig(rate_per_second=10_000, rate_burst=10_000))
    with running_server(config) as live:
        agent = Agent(live.base_url)
        code = agent.put_program(WAIT_INPUT)
        request = {"code": code, "memory_quota": 4096, "tick_budget": 1000}
        cap = live.engine.limits.max_sandboxes_per_owner
        assert cap == 64
        for _ in range(cap // 2):
            agent.ok("POST", "/v1/sandboxes", request, 201)
        payload = {**request, "owner": agent.id_hex}
        message = {"code": int(MessageCode.SANDBOX_CREATE), "payload": payload}
        for _ in range(cap - cap // 2):
            assert agent.ok("POST", "/v1/messages", message)["code"] == ReplyCode.ACK
        assert agent.request("POST", "/v1/sandboxes", request).status_code == 429
        over = agent.ok("POST", "/v1/messages", message)
        assert over["code"] == ReplyCode.ERROR and over["payload"]["category"] == "QuotaExceeded"
        assert live.engine.state.live_owned_by(agent.key.agent_id) == cap
        agent.close()


def test_one_agent_holds_at_most_its_share_of_the_memory_pool() -> None:
    """The attack: 16 creations of 64 MiB filled the engine's 1 GiB and every other agent
    got 422.  One agent now holds at most ``max_memory_per_owner``; the others still fit."""

    async def body() -> None:
        limits = EngineLimits(max_memory_quota=64 << 20)
        async with open_engine(limits=limits) as engine:
            held = 0
            with pytest.raises(OverLimit) as refused:
                for _ in range(16):
                    await create(engine, "HALT", memory_quota=64 << 20)
                    held += 64 << 20
            assert held == limits.max_memory_per_owner
            assert refused.value.limit == "max_memory_per_owner"
            await create(engine, "HALT", owner=OTHER, memory_quota=64 << 20)

    run(body)


def test_refusals_name_who_may() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox = await create(engine, WAIT_INPUT)
            with pytest.raises(Exception) as refused:
                await engine.kill_sandbox(sandbox, OTHER)
            assert "only its owner or an agent holding a 'kill' grant may" in str(refused.value)

    run(body)
