"""The engine's operations over HTTP against a real server: results and every error path."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import msgpack
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from kforge.asm import assemble
from kforge.core import MessageCode
from kforge.server import AuthConfig, ServerConfig
from test_server_support import (
    COUNT_DOWN,
    ECHO,
    SPIN,
    WAIT_INPUT,
    Agent,
    LiveServer,
    running_server,
    u64,
)

MSGPACK = "application/msgpack"


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    config = ServerConfig(
        auth=AuthConfig(rate_per_second=1000, rate_burst=1000), max_body_bytes=64 * 1024
    )
    with running_server(config) as server:
        yield server


@pytest.fixture
def agent(live: LiveServer) -> Iterator[Agent]:
    client = Agent(live.base_url)
    yield client
    client.close()


def refused(response: httpx.Response, status: int, category: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    if response.headers["content-type"] == MSGPACK:
        error: dict[str, Any] = msgpack.unpackb(response.content)["error"]
    else:
        error = response.json()["error"]
    assert error["status"] == status
    if category is not None:
        assert error["category"] == category
    return error


# ------------------------------------------------------------------ server basics


def test_health_and_openapi_need_no_identity(live: LiveServer) -> None:
    assert httpx.get(live.base_url + "/v1/health").json()["engine"] == "open"
    document = httpx.get(live.base_url + "/openapi.json").json()
    assert document["openapi"].startswith("3.")
    for path in (
        "/v1/sandboxes",
        "/v1/sandboxes/{sandbox_id}/start",
        "/v1/sandboxes/{sandbox_id}/output",
        "/v1/messages",
        "/v1/debug/{session_id}/run",
    ):
        assert path in document["paths"]


def test_root_redirects_to_the_dashboard(live: LiveServer) -> None:
    response = httpx.get(live.base_url + "/")
    assert response.status_code == 307 and response.headers["location"] == "/dashboard/"


def test_unknown_route_is_404(agent: Agent) -> None:
    assert agent.request("GET", "/v1/nothing").status_code == 404


# ------------------------------------------------------------------ programs


def test_programs_are_stored_from_assembly_or_frgp(agent: Agent) -> None:
    from_text = agent.ok("POST", "/v1/programs", {"assembly": COUNT_DOWN}, 201)
    encoded = assemble(COUNT_DOWN).encoded.hex()
    from_bytes = agent.ok("POST", "/v1/programs", {"program_hex": encoded}, 201)
    assert from_text["program_id"] == from_bytes["program_id"]
    shown = agent.ok("GET", f"/v1/programs/{from_text['program_id']}")
    assert shown["code"][0] == "LI r2, 8"
    assert "RECV" in shown["disassembly"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "exactly one"),
        ({"assembly": "HALT", "program": "00"}, "exactly one"),
        ({"assembly": "BOGUS r1"}, "<upload>:1:1"),
        ({"program_hex": "00112233"}, "program validation failed"),
        ({"assembly": 5}, "expected `str | null`"),
    ],
)
def test_bad_programs_are_400(agent: Agent, body: dict[str, Any], message: str) -> None:
    error = refused(agent.request("POST", "/v1/programs", body), 400, "InvalidRequest")
    assert message in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"program_hex": "zz"}, "program_hex"),
        ({"program_b64": "!!"}, "program_b64"),
        ({"program": "00", "program_hex": "00"}, "program"),
        ({"program_hex": "00", "program_b64": "AA=="}, "program"),
        ({"program": 7}, "program"),
    ],
)
def test_a_bytes_field_in_two_encodings_or_unreadable_in_its_own_is_422(
    agent: Agent, body: dict[str, Any], field: str
) -> None:
    error = refused(agent.request("POST", "/v1/programs", body), 422, "InvalidRequest")
    assert error["context"]["field"] == field


def test_unknown_program_is_404(agent: Agent) -> None:
    refused(agent.request("GET", f"/v1/programs/{'ab' * 32}"), 404)
    refused(agent.request("GET", "/v1/programs/xyz"), 400)


# ------------------------------------------------------------------ sandboxes


def test_a_sandbox_runs_to_halted_and_reports_its_output(agent: Agent) -> None:
    sandbox = agent.create(COUNT_DOWN, input=u64(5))
    info = agent.ok("GET", f"/v1/sandboxes/{sandbox}")
    assert (
        info["state"] == "READY"
        and info["owner"] == agent.id_hex
        and info["tick_budget"] == 1_000_000
    )
    result = agent.run_to_end(sandbox)
    assert result["state"] == "HALTED"
    assert bytes.fromhex(result["output_hex"]) == b"done"
    assert agent.ok("GET", f"/v1/sandboxes/{sandbox}")["ticks_used"] == result["ticks_used"]
    assert sandbox in [s["id"] for s in agent.ok("GET", "/v1/sandboxes")["sandboxes"]]


def test_a_sandbox_is_listed_with_its_program_name_creation_time_and_fault(
    agent: Agent,
) -> None:
    started_ms = int(time.time() * 1000)
    named = agent.ok("POST", "/v1/programs", {"assembly": "FAULT 42", "name": "answer.fasm"}, 201)
    code = named["program_id"]
    body = {"code": code, "memory_quota": 4096, "tick_budget": 1000}
    sandbox = agent.ok("POST", "/v1/sandboxes", body, 201)["sandbox_id"]
    unnamed = agent.create("HALT")
    before = agent.ok("GET", f"/v1/sandboxes/{sandbox}")
    assert (before["program_id"], before["program_name"]) == (code, "answer.fasm")
    assert before["fault"] is None
    assert started_ms - 1000 <= before["created_at_ms"] <= int(time.time() * 1000) + 1000
    agent.run_to_end(sandbox)
    listed = {s["id"]: s for s in agent.ok("GET", "/v1/sandboxes")["sandboxes"]}
    assert (listed[sandbox]["fault"], listed[sandbox]["fault_detail"]) == ("USER_FAULT", 42)
    assert listed[sandbox]["program_name"] == "answer.fasm"
    assert listed[unnamed]["program_name"] is None  # named by no upload: the id is shown
    assert len(listed[unnamed]["program_id"]) == 64


def test_msgpack_bodies_and_replies(agent: Agent) -> None:
    code = bytes.fromhex(agent.put_program(ECHO))
    body = msgpack.packb(
        {"code": code, "memory_quota": 65536, "tick_budget": 10_000, "input": b"hi"}
    )
    response = agent.request("POST", "/v1/sandboxes", raw=body, content_type=MSGPACK)
    assert response.status_code == 201 and response.headers["content-type"] == MSGPACK
    sandbox = msgpack.unpackb(response.content)["sandbox_id"]
    assert isinstance(sandbox, bytes) and len(sandbox) == 32
    agent.ok("POST", f"/v1/sandboxes/{sandbox.hex()}/start", {}, 202)
    waited = agent.request(
        "GET", f"/v1/sandboxes/{sandbox.hex()}/wait", headers={"accept": MSGPACK}
    )
    assert msgpack.unpackb(waited.content)["output"] == b"hi"


def test_msgpack_errors_are_msgpack(agent: Agent) -> None:
    body = msgpack.packb({"code": b"short", "memory_quota": 1, "tick_budget": 1})
    response = agent.request("POST", "/v1/sandboxes", raw=body, content_type=MSGPACK)
    assert response.status_code == 400
    error = msgpack.unpackb(response.content)["error"]
    assert error["context"]["field"] == "code"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"memory_quota": 65536, "tick_budget": 10}, "code"),
        ({"code": "ab" * 32, "memory_quota": "big", "tick_budget": 10}, "memory_quota"),
        ({"code": "ab" * 32, "memory_quota": -1, "tick_budget": 10}, "memory_quota"),
        ({"code": "ab" * 32, "memory_quota": 65536, "tick_budget": 2**64}, "tick_budget"),
        ({"code": "ab" * 31, "memory_quota": 65536, "tick_budget": 10}, "code"),
        ({"code": "ab" * 32, "memory_quota": 65536, "tick_budget": 10, "colour": "red"}, "colour"),
        (
            {"code": "ab" * 32, "memory_quota": 65536, "tick_budget": 10, "grants": [300]},
            "grants[0]",
        ),
    ],
)
def test_malformed_create_requests_name_the_field(
    agent: Agent, body: dict[str, Any], field: str
) -> None:
    error = refused(agent.request("POST", "/v1/sandboxes", body), 400, "InvalidRequest")
    assert error["context"]["field"] == field


def test_body_that_is_not_json_or_not_a_map_is_400(agent: Agent) -> None:
    refused(agent.request("POST", "/v1/sandboxes", raw=b"{nope"), 400)
    refused(agent.request("POST", "/v1/sandboxes", [1, 2]), 400)
    refused(agent.request("POST", "/v1/sandboxes", raw=b"\xc1", content_type=MSGPACK), 400)


def test_wrong_media_type_is_415_and_big_body_is_413(agent: Agent) -> None:
    refused(agent.request("POST", "/v1/programs", raw=b"HALT", content_type="text/plain"), 415)
    refused(agent.request("POST", "/v1/programs", {"assembly": "NOP\n" * 40_000}), 413)


def test_engine_refusals_map_to_http_statuses(agent: Agent) -> None:
    code = agent.put_program(WAIT_INPUT)
    base = {"code": code, "tick_budget": 1000}
    refused(
        agent.request("POST", "/v1/sandboxes", {**base, "memory_quota": 2**40}),
        422,
        "QuotaExceeded",
    )
    refused(agent.request("POST", "/v1/sandboxes", {**base, "memory_quota": 4}), 422)
    refused(
        agent.request("POST", "/v1/sandboxes", {**base, "memory_quota": 65536, "grants": [9]}), 403
    )
    missing = {**base, "memory_quota": 65536, "code": "cd" * 32}
    refused(agent.request("POST", "/v1/sandboxes", missing), 404)
    refused(agent.request("GET", f"/v1/sandboxes/{'ef' * 32}"), 404, "NotFound")
    refused(agent.request("GET", "/v1/sandboxes/not-an-id"), 400)


def test_state_conflicts_are_409(agent: Agent) -> None:
    sandbox = agent.create(WAIT_INPUT)
    base = f"/v1/sandboxes/{sandbox}"
    assert agent.ok("POST", base + "/step", {}) == {"state": "RUNNING"}
    agent.ok("POST", base + "/start", {}, 202)
    refused(agent.request("POST", base + "/start", {}), 409, "Conflict")
    refused(agent.request("POST", base + "/step", {}), 409)
    refused(agent.request("DELETE", base), 409)
    agent.ok("POST", base + "/kill", {})
    refused(agent.request("POST", base + "/kill", {}), 409)
    refused(agent.request("POST", base + "/deliver", {"data_hex": "00"}), 409)
    assert agent.ok("GET", base + "/wait?timeout=5")["state"] == "KILLED"
    agent.ok("DELETE", base)
    refused(agent.request("GET", base), 404)


def test_deliver_wakes_a_blocked_sandbox(agent: Agent) -> None:
    sandbox = agent.create(WAIT_INPUT, input=b"first")
    base = f"/v1/sandboxes/{sandbox}"
    agent.ok("POST", base + "/start", {}, 202)
    refused(agent.request("GET", base + "/wait?timeout=0.2"), 408)
    assert agent.ok("GET", base)["state"] == "BLOCKED"
    assert agent.ok("GET", base)["blocked_channel"] == 2
    refused(agent.request("POST", base + "/deliver", {"channel": 3, "data_hex": "00"}), 403)
    agent.ok("POST", base + "/deliver", {"data": "second"})  # text: its UTF-8 bytes
    assert bytes.fromhex(agent.ok("GET", base + "/wait?timeout=5")["output_hex"]) == b"second"


#: Echoes stdin twice: the creation input, then blocks for a second message.
ECHO_TWICE = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""


def test_output_is_read_while_the_sandbox_runs(live: LiveServer, agent: Agent) -> None:
    partial = agent.create(ECHO_TWICE, input=b"one\x00")
    pbase = f"/v1/sandboxes/{partial}"
    assert agent.ok("GET", pbase + "/output") == {
        "sandbox_id": partial,
        "state": "READY",
        "offset": 0,
        "next_offset": 0,
        "length": 0,
        "data_hex": "",
    }
    agent.ok("POST", pbase + "/start", {}, 202)
    refused(agent.request("GET", pbase + "/wait?timeout=0.3"), 408)
    assert agent.ok("GET", pbase)["state"] == "BLOCKED"  # mid-way, waiting for input
    live_reply = agent.ok("GET", pbase + "/output")
    assert live_reply["state"] == "BLOCKED"
    assert bytes.fromhex(live_reply["data_hex"]) == b"one\x00"
    assert (live_reply["next_offset"], live_reply["length"]) == (4, 4)
    tail = agent.ok("GET", pbase + "/output?offset=2&limit=1")
    assert (tail["data_hex"], tail["offset"], tail["next_offset"], tail["length"]) == (
        "65",
        2,
        3,
        4,
    )
    caught_up = agent.ok("GET", pbase + "/output?offset=4")
    assert (caught_up["data_hex"], caught_up["next_offset"]) == ("", 4)
    agent.ok("POST", pbase + "/deliver", {"data_hex": b"two".hex()})
    assert agent.ok("GET", pbase + "/wait?timeout=5")["state"] == "HALTED"
    stopped = agent.ok("GET", pbase + "/output?offset=4")
    assert stopped["state"] == "HALTED" and bytes.fromhex(stopped["data_hex"]) == b"two"
    assert (stopped["next_offset"], stopped["length"]) == (7, 7)
    as_msgpack = agent.request("GET", pbase + "/output", headers={"accept": MSGPACK})
    assert as_msgpack.headers["content-type"] == MSGPACK
    unpacked = msgpack.unpackb(as_msgpack.content)
    assert unpacked["data"] == b"one\x00two" and unpacked["sandbox_id"] == bytes.fromhex(partial)
    operator = Agent(live.base_url, token=live.dev_token)  # the dashboard reads any sandbox
    assert bytes.fromhex(operator.ok("GET", pbase + "/output")["data_hex"]) == b"one\x00two"
    operator.close()


@pytest.mark.parametrize(
    "query",
    [
        "offset=-1",
        "offset=1.5",
        "offset=abc",
        "offset=",
        "offset=8",  # past the end of the output
        "offset=99999999999999999999999",
        "offset=%EF%BC%91",  # a full-width digit
        "limit=0",
        "limit=99999999",
        "limit=x",
    ],
)
def test_output_offset_and_limit_are_checked(agent: Agent, query: str) -> None:
    sandbox = agent.create(ECHO, input=b"abc")
    agent.run_to_end(sandbox)
    error = refused(agent.request("GET", f"/v1/sandboxes/{sandbox}/output?{query}"), 400)
    assert error["context"]["field"] in ("offset", "limit")


def test_output_of_an_unknown_or_malformed_id(agent: Agent) -> None:
    refused(agent.request("GET", f"/v1/sandboxes/{'ef' * 32}/output"), 404, "NotFound")
    refused(agent.request("GET", "/v1/sandboxes/not-an-id/output"), 400)


def test_wait_timeout_is_bounded(agent: Agent) -> None:
    sandbox = agent.create(WAIT_INPUT)
    for query in ("timeout=-1", "timeout=61", "timeout=soon"):
        refused(agent.request("GET", f"/v1/sandboxes/{sandbox}/wait?{query}"), 400)


def test_io_log_record_and_proof(agent: Agent) -> None:
    sandbox = agent.create(ECHO, input=b"abc")
    agent.run_to_end(sandbox)
    assert agent.ok("GET", f"/v1/sandboxes/{sandbox}/io") == {"calls": []}
    record = agent.ok("GET", f"/v1/sandboxes/{sandbox}/record")
    assert record["tick_budget"] == 1_000_000 and record["record_hex"]
    proof = agent.ok("POST", f"/v1/sandboxes/{sandbox}/proof", {})
    assert proof["ticks_used"] > 0 and proof["proof_hex"] and len(proof["forge_sig_hex"]) == 128
    running = agent.create(SPIN)
    refused(agent.request("POST", f"/v1/sandboxes/{running}/proof", {}), 409)


def test_link_resolve(agent: Agent) -> None:
    library = agent.put_program(".export twice\ntwice: ADD r1, r1, r1\n RET")
    main = agent.put_program(".import twice\n LI r1, 4\n CALL twice\n HALT")
    resolved = agent.ok(
        "POST",
        "/v1/link",
        {"program": main, "imports": [{"from": library, "symbols": ["twice"]}]},
    )
    assert len(resolved["resolved"]) == 64
    refused(agent.request("POST", "/v1/link", {"program": main, "imports": []}), 400)
    bad = {"program": main, "imports": [{"from": "ab" * 32, "symbols": []}]}
    assert agent.request("POST", "/v1/link", bad).status_code in (400, 404)


def test_services_are_listed_when_the_engine_has_them(agent: Agent) -> None:
    listed = agent.ok("GET", "/v1/services")
    assert listed["supported"] is hasattr(agent_engine_type(), "list_services")
    refused(agent.request("GET", f"/v1/services/{'ab' * 32}"), 404 if listed["supported"] else 501)
    endpoint = {"name_hex": "6563686f", "channel": 3, "schema": ""}
    body = {
        "sandbox": "ab" * 32,
        "name": "sv",
        "tick_budget": 10,
        "auto_fund": False,
        "endpoints": [endpoint],
    }
    refused(agent.request("POST", "/v1/services", body), 404 if listed["supported"] else 501)


def agent_engine_type() -> type:
    from kforge.engine import Engine

    return Engine


def test_operator_starts_a_cycle(live: LiveServer) -> None:
    operator = Agent(live.base_url, token=live.dev_token)
    first = operator.ok("POST", "/v1/cycles", {})["cycle"]
    assert (
        operator.ok("POST", "/v1/cycles", {"allowances": [{"agent": "01" * 32, "ticks": 5}]})[
            "cycle"
        ]
        == first + 1
    )
    operator.close()


# ------------------------------------------------------------------ messages


def test_json_message_is_dispatched_as_the_caller(agent: Agent) -> None:
    sandbox = agent.create(COUNT_DOWN, input=u64(1))
    reply = agent.ok(
        "POST",
        "/v1/messages",
        {"code": MessageCode.SANDBOX_STATUS, "payload": {"sandbox_id": sandbox}},
    )
    assert reply["code_name"] == "SANDBOX_INFO" and reply["payload"]["state"] == "READY"
    started = agent.ok(
        "POST", "/v1/messages", {"code": MessageCode.EXEC_START, "payload": {"sandbox_id": sandbox}}
    )
    assert started["code_name"] == "ACK"
    mail = agent.ok("GET", "/v1/mailbox?timeout=5")["envelopes"]
    assert mail[0]["code_name"] == "EXEC_RESULT" and mail[0]["reply_to"] == started["reply_to"]
    assert bytes.fromhex(mail[0]["payload"]["output_hex"]) == b"done"


def test_message_errors_come_back_as_error_envelopes(agent: Agent) -> None:
    unknown = agent.ok("POST", "/v1/messages", {"code": 0x9999, "payload": {}})
    assert unknown["code_name"] == "ERROR" and "not a request" in unknown["error_message"]
    service = {
        "owner": agent.id_hex,
        "sandbox": "ab" * 32,
        "name": "",
        "tick_budget": 1,
        "auto_fund": False,
        "endpoints": [],
    }
    reply = agent.ok(
        "POST", "/v1/messages", {"code": MessageCode.SERVICE_CREATE, "payload": service}
    )
    assert reply["code_name"] == "ERROR" and "name" in reply["error_message"]
    refused(agent.request("POST", "/v1/messages", {"code": "x"}), 400)
    # found by the fuzz: a payload msgpack cannot hold (a 2^80 integer, a lone surrogate)
    refused(agent.request("POST", "/v1/messages", {"code": 4632, "payload": {"a": [2**80]}}), 400)
    lone = b'{"code": 4632, "payload": {"\\udb06": 1}}'
    refused(agent.request("POST", "/v1/messages", raw=lone), 400)
    refused(agent.request("POST", "/v1/messages", {"code": 1, "extra": 1}), 400)
    refused(
        agent.request("POST", "/v1/messages", {"code": 0x0501, "payload": {"sandbox_id": "q"}}), 400
    )


def test_msgpack_envelope_must_be_sent_as_the_caller(agent: Agent) -> None:
    from kforge.core import AgentId, Hash256
    from kforge.messages import Envelope

    sandbox = bytes.fromhex(agent.create(ECHO))
    mine = Envelope.build(
        MessageCode.SANDBOX_STATUS,
        agent.key.agent_id,
        {"sandbox_id": Hash256(sandbox)},
        id=Hash256(b"\x01" * 32),
    )
    response = agent.request("POST", "/v1/messages", raw=mine.encode(), content_type=MSGPACK)
    assert Envelope.decode(response.content).code == 0x05F2
    forged = Envelope.build(
        MessageCode.SANDBOX_STATUS,
        AgentId(b"\x09" * 32),
        {"sandbox_id": Hash256(sandbox)},
        id=Hash256(b"\x02" * 32),
    )
    refused(agent.request("POST", "/v1/messages", raw=forged.encode(), content_type=MSGPACK), 403)
    refused(
        agent.request("POST", "/v1/messages", raw=msgpack.packb({"id": 1}), content_type=MSGPACK),
        400,
    )


def test_mailbox_is_empty_without_waiting(agent: Agent) -> None:
    assert agent.ok("GET", "/v1/mailbox") == {"envelopes": []}


# ------------------------------------------------------------------ events


def test_event_socket_streams_a_sandbox_from_start_to_halt(live: LiveServer, agent: Agent) -> None:
    sandbox = agent.create(COUNT_DOWN, input=u64(3))
    token = agent.ok("POST", "/v1/session", None, 201)["token"]
    url = live.base_url.replace("http", "ws") + f"/v1/events?sandbox={sandbox}&token={token}"
    with connect(url) as socket:
        agent.ok("POST", f"/v1/sandboxes/{sandbox}/start", {}, 202)
        import json

        kinds = [json.loads(socket.recv(timeout=5))["kind_name"] for _ in range(2)]
    assert kinds == ["SANDBOX_STARTED", "SANDBOX_HALTED"]


def test_event_socket_filters_by_kind_in_msgpack(live: LiveServer, agent: Agent) -> None:
    headers = agent.key.request_headers(
        "GET", "/v1/events?kinds=SANDBOX_HALTED,0x4004&format=msgpack", b""
    )
    url = (
        live.base_url.replace("http", "ws")
        + "/v1/events?kinds=SANDBOX_HALTED,0x4004&format=msgpack"
    )
    with connect(url, additional_headers=headers) as socket:
        first = agent.create(WAIT_INPUT)
        agent.ok("POST", f"/v1/sandboxes/{first}/kill", {})
        second = agent.create(COUNT_DOWN, input=u64(1))
        agent.run_to_end(second)
        events = [msgpack.unpackb(socket.recv(timeout=5)) for _ in range(2)]
    assert [(e["kind"], e["sandbox_id"].hex()) for e in events] == [
        (0x4004, first),
        (0x4002, second),
    ]


@pytest.mark.parametrize("query", ["kinds=NOPE", "sandbox=12", "owner=zz", "format=xml"])
def test_event_socket_refuses_bad_queries(live: LiveServer, agent: Agent, query: str) -> None:
    token = agent.ok("POST", "/v1/session", None, 201)["token"]
    url = live.base_url.replace("http", "ws") + f"/v1/events?{query}&token={token}"
    with connect(url) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400


def test_event_subscriptions_per_agent_are_limited() -> None:
    with running_server(ServerConfig(max_event_subscriptions_per_agent=1)) as server:
        agent = Agent(server.base_url)
        token = agent.ok("POST", "/v1/session", None, 201)["token"]
        url = server.base_url.replace("http", "ws") + f"/v1/events?token={token}"
        with connect(url) as first, connect(url) as second:
            with pytest.raises(ConnectionClosed) as closed:
                second.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4429
            first.ping()
        agent.close()


def test_a_creation_may_name_a_preset_and_the_server_has_a_default_one(agent: Agent) -> None:
    code = agent.put_program(COUNT_DOWN)
    named = agent.ok("POST", "/v1/sandboxes", {"code": code, "preset": "minimal"}, 201)
    info = agent.ok("GET", f"/v1/sandboxes/{named['sandbox_id']}")
    assert (info["memory_quota"], info["tick_budget"]) == (16 * 1024 * 1024, 10**9)
    default = agent.ok("POST", "/v1/sandboxes", {"code": code}, 201)  # the server's: standard
    info = agent.ok("GET", f"/v1/sandboxes/{default['sandbox_id']}")
    assert (info["memory_quota"], info["tick_budget"]) == (64 * 1024 * 1024, 10**10)
    error = refused(agent.request("POST", "/v1/sandboxes", {"code": code, "preset": "huge"}), 400)
    assert error["context"]["field"] == "preset"


def test_the_root_leads_to_the_dashboard_and_docs_lists_every_operation_from_here(
    live: LiveServer, agent: Agent
) -> None:
    from kforge.server.app import ALL_OPERATIONS

    root = httpx.get(live.base_url + "/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/dashboard/"
    page = httpx.get(live.base_url + "/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert loaded and all(url.startswith("/docs/static/") for url in loaded)  # no CDN
    for url in loaded:
        assert httpx.get(live.base_url + url).status_code == 200
    document = httpx.get(live.base_url + "/openapi.json").json()
    listed = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    assert listed == {(op.method, op.path) for op in ALL_OPERATIONS}
