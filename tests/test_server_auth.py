"""Identity and authorization over HTTP: signatures, tokens, replays, grants, limits."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from kforge.engine import EngineLimits
from kforge.server import AgentKey, AuthConfig, Authenticator, ServerConfig
from kforge.server.signing import signing_string
from test_server_support import COUNT_DOWN, WAIT_INPUT, Agent, LiveServer, running_server, u64


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with running_server(
        ServerConfig(auth=AuthConfig(rate_per_second=1000, rate_burst=1000))
    ) as server:
        yield server


@pytest.fixture
def alice(live: LiveServer) -> Iterator[Agent]:
    agent = Agent(live.base_url)
    yield agent
    agent.close()


@pytest.fixture
def bob(live: LiveServer) -> Iterator[Agent]:
    agent = Agent(live.base_url)
    yield agent
    agent.close()


def error_of(response: object) -> str:
    body = response.json()  # type: ignore[attr-defined]
    return str(body["error"]["message"])


# ------------------------------------------------------------------ signatures


def test_unsigned_request_is_refused_with_401(alice: Agent) -> None:
    response = alice.request("GET", "/v1/whoami", sign=False)
    assert response.status_code == 401
    assert "unsigned" in error_of(response)
    assert "WWW-Authenticate" in response.headers


def test_signed_request_names_the_agent(alice: Agent) -> None:
    assert alice.ok("GET", "/v1/whoami") == {
        "agent": alice.id_hex,
        "operator": False,
        "method": "signature",
    }


def test_signature_by_another_key_is_refused(alice: Agent, bob: Agent) -> None:
    headers = bob.key.request_headers("GET", "/v1/whoami", b"")
    headers["x-kforge-agent"] = alice.id_hex  # claims to be alice, signed by bob
    response = alice.request("GET", "/v1/whoami", headers=headers, sign=False)
    assert response.status_code == 401
    assert error_of(response) == "bad signature"


def test_body_changed_after_signing_is_refused(alice: Agent) -> None:
    body = json.dumps({"assembly": "HALT"}).encode()
    headers = alice.key.request_headers("POST", "/v1/programs", body)
    response = alice.http.post(
        "/v1/programs",
        content=body.replace(b"HALT", b"NOP "),
        headers={**headers, "content-type": "application/json"},
    )
    assert response.status_code == 401


def test_path_or_query_changed_after_signing_is_refused(alice: Agent) -> None:
    headers = alice.key.request_headers("GET", "/v1/sandboxes", b"")
    response = alice.http.get("/v1/sandboxes?all=true", headers=headers)
    assert response.status_code == 401
    headers = alice.key.request_headers("GET", "/v1/whoami", b"")
    assert alice.http.get("/v1/stats", headers=headers).status_code == 401


def test_method_is_covered_by_the_signature(alice: Agent) -> None:
    headers = alice.key.request_headers("GET", "/v1/debug", b"")
    assert alice.http.post("/v1/debug", headers=headers).status_code == 401


@pytest.mark.parametrize("offset_ms", [-31_000, 31_000, -3_600_000])
def test_stale_or_future_timestamp_is_refused(alice: Agent, offset_ms: int) -> None:
    stamp = time.time_ns() // 1_000_000 + offset_ms
    headers = alice.key.request_headers("GET", "/v1/whoami", b"", timestamp_ms=stamp)
    response = alice.http.get("/v1/whoami", headers=headers)
    assert response.status_code == 401
    assert "stale timestamp" in error_of(response)


def test_replayed_nonce_is_refused(alice: Agent) -> None:
    headers = alice.key.request_headers("GET", "/v1/whoami", b"")
    assert alice.http.get("/v1/whoami", headers=headers).status_code == 200
    replay = alice.http.get("/v1/whoami", headers=headers)
    assert replay.status_code == 401
    assert error_of(replay) == "replayed nonce"


def test_same_nonce_from_two_agents_is_not_a_replay(alice: Agent, bob: Agent) -> None:
    nonce = "shared-nonce-0123456789"
    for agent in (alice, bob):
        headers = agent.key.request_headers("GET", "/v1/whoami", b"", nonce=nonce)
        assert agent.http.get("/v1/whoami", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("header", "value", "message"),
    [
        ("x-kforge-agent", "zz", "64 hex digits"),
        ("x-kforge-agent", "ab" * 31, "64 hex digits"),
        ("x-kforge-timestamp", "soon", "milliseconds"),
        ("x-kforge-nonce", "short", "16..64"),
        ("x-kforge-nonce", "not/allowed/chars!!", "16..64"),
        ("x-kforge-signature", "xyz", "hex"),
        ("x-kforge-signature", "00" * 64, "bad signature"),
        ("x-kforge-signature", "00" * 10, "bad signature"),
    ],
)
def test_malformed_signature_headers_are_refused(
    alice: Agent, header: str, value: str, message: str
) -> None:
    headers = alice.key.request_headers("GET", "/v1/whoami", b"")
    headers[header] = value
    response = alice.http.get("/v1/whoami", headers=headers)
    assert response.status_code == 401
    assert message in error_of(response)


def test_signing_string_has_every_part() -> None:
    text = signing_string("post", "/v1/x?a=1", b"", 5, "n" * 16).decode()
    assert text.split("\n") == [
        "kforge-http-v1",
        "POST",
        "/v1/x?a=1",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "5",
        "n" * 16,
    ]


# ------------------------------------------------------------------ tokens


def test_session_token_authenticates_later_requests(live: LiveServer, alice: Agent) -> None:
    session = alice.ok("POST", "/v1/session", None, 201)
    assert session["agent"] == alice.id_hex
    assert session["expires_at_ms"] > time.time() * 1000
    holder = Agent(live.base_url, token=session["token"])
    assert holder.ok("GET", "/v1/whoami") == {
        "agent": alice.id_hex,
        "operator": False,
        "method": "token",
    }
    holder.close()


def test_session_needs_a_signature_not_a_token(live: LiveServer, alice: Agent) -> None:
    token = alice.ok("POST", "/v1/session", None, 201)["token"]
    holder = Agent(live.base_url, token=token)
    response = holder.request("POST", "/v1/session")
    assert response.status_code == 401
    holder.close()


@pytest.mark.parametrize(
    "token",
    ["kf0", "kf1", "kf1.abc", "kf2.AAAA.AAAA", "kf1.!!!.???", "kf1.AAAA.AAAA"],
)
def test_malformed_tokens_are_refused(live: LiveServer, token: str) -> None:
    holder = Agent(live.base_url, token=token)
    assert holder.request("GET", "/v1/whoami").status_code == 401
    holder.close()


def test_token_of_another_server_run_or_expired_is_refused(live: LiveServer, alice: Agent) -> None:
    foreign, _ = Authenticator().issue_token(alice.key.agent_id)
    expired, _ = live.state.authenticator.issue_token(alice.key.agent_id, lifetime_ms=-1)
    for token, message in ((foreign, "invalid token"), (expired, "expired")):
        holder = Agent(live.base_url, token=token)
        response = holder.request("GET", "/v1/whoami")
        assert response.status_code == 401
        assert message in error_of(response)
        holder.close()


def test_non_bearer_authorization_is_refused(alice: Agent) -> None:
    response = alice.request(
        "GET", "/v1/whoami", headers={"authorization": "Basic dXNlcjpwdw=="}, sign=False
    )
    assert response.status_code == 401


def test_dev_token_is_the_operator(live: LiveServer) -> None:
    operator = Agent(live.base_url, token=live.dev_token)
    me = operator.ok("GET", "/v1/whoami")
    assert me["operator"] is True and me["agent"] == live.state.operator_agent.hex
    operator.close()


# ------------------------------------------------------------------ authorization


def test_another_agent_cannot_touch_a_sandbox(alice: Agent, bob: Agent) -> None:
    sandbox = alice.create(WAIT_INPUT)
    base = f"/v1/sandboxes/{sandbox}"
    refused = [
        ("GET", base, None),
        ("POST", base + "/start", {}),
        ("POST", base + "/step", {}),
        ("POST", base + "/kill", {}),
        ("POST", base + "/deliver", {"data": "00"}),
        ("GET", base + "/wait?timeout=0", None),
        ("GET", base + "/io", None),
        ("GET", base + "/output", None),
        ("GET", base + "/output?offset=0", None),
        ("GET", base + "/record", None),
        ("POST", base + "/proof", {}),
        ("POST", base + "/grants", {"agent": bob.id_hex, "operations": ["kill"]}),
        ("DELETE", base + f"/grants/{alice.id_hex}", None),
        ("DELETE", base, None),
    ]
    for method, path, body in refused:
        response = bob.request(method, path, body)
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["error"]["category"] == "Unauthorized"
    assert alice.ok("GET", base)["state"] == "READY"  # nothing happened to it
    assert sandbox not in [s["id"] for s in bob.ok("GET", "/v1/sandboxes")["sandboxes"]]


def test_grant_lets_another_agent_do_exactly_what_was_granted(alice: Agent, bob: Agent) -> None:
    sandbox = alice.create(WAIT_INPUT)
    base = f"/v1/sandboxes/{sandbox}"
    alice.ok("POST", base + "/grants", {"agent": bob.id_hex, "operations": ["status", "deliver"]})
    assert bob.ok("GET", base)["owner"] == alice.id_hex
    assert bob.ok("GET", base + "/output")["length"] == 0  # reading output is "status"
    assert sandbox in [s["id"] for s in bob.ok("GET", "/v1/sandboxes")["sandboxes"]]
    assert bob.request("POST", base + "/kill", {}).status_code == 403
    alice.ok("DELETE", base + f"/grants/{bob.id_hex}")
    assert bob.request("GET", base).status_code == 403
    assert bob.request("GET", base + "/output").status_code == 403


def test_creating_a_sandbox_for_another_owner_is_refused(alice: Agent, bob: Agent) -> None:
    code = alice.put_program(COUNT_DOWN)
    body = {"owner": bob.id_hex, "code": code, "memory_quota": 65536, "tick_budget": 1000}
    response = alice.request("POST", "/v1/sandboxes", body)
    assert response.status_code == 403


def test_only_the_operator_lists_every_sandbox_and_starts_cycles(
    live: LiveServer, alice: Agent
) -> None:
    sandbox = alice.create(COUNT_DOWN, input=u64(1))
    assert alice.request("GET", "/v1/sandboxes?all=true").status_code == 403
    assert alice.request("POST", "/v1/cycles", {}).status_code == 403
    operator = Agent(live.base_url, token=live.dev_token)
    every = operator.ok("GET", "/v1/sandboxes?all=true")["sandboxes"]
    assert sandbox in [s["id"] for s in every]
    assert operator.ok("GET", f"/v1/sandboxes/{sandbox}")["owner"] == alice.id_hex
    assert (
        operator.request("POST", f"/v1/sandboxes/{sandbox}/kill", {}).status_code == 403
    )  # read-only
    operator.close()


def test_debug_sessions_of_another_agent_do_not_exist_for_it(alice: Agent, bob: Agent) -> None:
    session = alice.ok("POST", "/v1/debug", {"assembly": "HALT"}, 201)["session_id"]
    calls: list[tuple[str, str, dict[str, object] | None]] = [
        ("GET", f"/v1/debug/{session}", None),
        ("POST", f"/v1/debug/{session}/step", {}),
        ("POST", f"/v1/debug/{session}/run", {}),
        ("DELETE", f"/v1/debug/{session}", None),
    ]
    for method, path, body in calls:
        assert bob.request(method, path, body).status_code == 404
    assert bob.ok("GET", "/v1/debug") == {"sessions": []}


def test_events_of_another_agent_cannot_be_watched(
    live: LiveServer, alice: Agent, bob: Agent
) -> None:
    token = bob.ok("POST", "/v1/session", None, 201)["token"]
    url = live.base_url.replace("http", "ws") + f"/v1/events?owner={alice.id_hex}&token={token}"
    with connect(url) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


def test_unauthenticated_event_socket_is_closed(live: LiveServer) -> None:
    url = live.base_url.replace("http", "ws") + "/v1/events"
    with connect(url) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


# ------------------------------------------------------------------ limits


def test_request_rate_over_the_limit_is_429() -> None:
    config = ServerConfig(auth=AuthConfig(rate_per_second=0.5, rate_burst=3))
    with running_server(config) as server:
        agent = Agent(server.base_url)
        statuses = [agent.request("GET", "/v1/whoami").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        refused = agent.request("GET", "/v1/whoami")
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["category"] == "QuotaExceeded"
        other = Agent(server.base_url)  # limits are per agent
        assert other.request("GET", "/v1/whoami").status_code == 200
        agent.close()
        other.close()


def test_concurrent_sandboxes_per_agent_are_limited() -> None:
    with running_server(limits=EngineLimits(max_sandboxes_per_owner=2)) as server:
        agent = Agent(server.base_url)
        first = agent.create(WAIT_INPUT)
        agent.create(WAIT_INPUT)
        code = agent.put_program(WAIT_INPUT)
        body = {"code": code, "memory_quota": 65536, "tick_budget": 1000}
        refused = agent.request("POST", "/v1/sandboxes", body)
        assert refused.status_code == 429
        assert "at most 2" in error_of(refused)
        other = Agent(server.base_url)
        assert other.request("POST", "/v1/sandboxes", body).status_code == 201
        agent.ok("POST", f"/v1/sandboxes/{first}/kill", {})
        assert agent.request("POST", "/v1/sandboxes", body).status_code == 201
        agent.close()
        other.close()


def test_agent_key_from_seed_is_stable() -> None:
    assert AgentKey.from_seed(b"\x05" * 32).agent_id == AgentKey.from_seed(b"\x05" * 32).agent_id
