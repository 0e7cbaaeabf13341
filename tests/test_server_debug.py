"""The debugger API: load, step, run to a breakpoint, run N ticks, look at the machine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kforge.server import AuthConfig, DebugLimits, ServerConfig
from test_server_support import COUNT_DOWN, Agent, LiveServer, running_server, u64

LOOP = """
        LI   r1, 3
        LI   r2, 1
again:  SUB  r1, r1, r2
        PUSH r1
        JNZ  r1, again
        HALT
"""


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    config = ServerConfig(
        auth=AuthConfig(rate_per_second=1000, rate_burst=1000),
        debug=DebugLimits(max_sessions_per_agent=3),
    )
    with running_server(config) as server:
        yield server


@pytest.fixture
def agent(live: LiveServer) -> Iterator[Agent]:
    client = Agent(live.base_url)
    yield client
    client.close()


def test_a_loaded_program_shows_its_disassembly_and_ready_state(agent: Agent) -> None:
    view = agent.ok("POST", "/v1/debug", {"assembly": LOOP}, 201)
    assert view["state"] == "READY" and view["pc"] == 0 and view["last_stop"] == "loaded"
    assert view["code"][:2] == ["LI r1, 3", "LI r2, 1"]
    assert len(view["registers"]) == 256 and view["registers"][253] == "0x8"
    assert view["stack"] == [] and view["changed"] == []
    assert agent.ok("GET", "/v1/debug")["sessions"][0]["session_id"] == view["session_id"]


def test_step_moves_the_pc_and_names_the_changed_registers(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": LOOP}, 201)["session_id"]
    view = agent.ok("POST", f"/v1/debug/{session}/step", {})
    assert (view["pc"], view["changed"], view["registers"][1]) == (1, [1], "0x3")
    view = agent.ok("POST", f"/v1/debug/{session}/step", {"count": 3})
    assert view["pc"] == 4 and view["ticks_used"] == 4
    assert view["stack"][0]["value"] == "0x2"
    assert view["flags"]["zero"] is False


def test_run_stops_at_a_breakpoint_then_at_halt(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": LOOP, "breakpoints": [3]}, 201)[
        "session_id"
    ]
    view = agent.ok("POST", f"/v1/debug/{session}/run", {})
    assert (view["last_stop"], view["pc"], view["registers"][1]) == ("breakpoint", 3, "0x2")
    view = agent.ok("POST", f"/v1/debug/{session}/run", {})  # leaves the breakpoint it stands on
    assert (view["pc"], view["registers"][1]) == (3, "0x1")
    view = agent.ok("PUT", f"/v1/debug/{session}/breakpoints", {"breakpoints": []})
    assert view["breakpoints"] == []
    view = agent.ok("POST", f"/v1/debug/{session}/run", {})
    assert (view["state"], view["last_stop"], view["flags"]["halt"]) == ("HALTED", "halted", True)
    assert [entry["value"] for entry in view["stack"]] == ["0x0", "0x1", "0x2"]


def test_run_n_ticks_and_overriding_breakpoints(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": LOOP, "breakpoints": [5]}, 201)[
        "session_id"
    ]
    view = agent.ok("POST", f"/v1/debug/{session}/run", {"max_ticks": 4, "breakpoints": []})
    assert (view["last_stop"], view["ticks_used"]) == ("tick_limit", 4)
    view = agent.ok("POST", f"/v1/debug/{session}/run", {"max_ticks": 1000})
    assert (view["last_stop"], view["pc"]) == ("breakpoint", 5)


def test_blocked_machine_resumes_after_delivery_and_shows_io(agent: Agent) -> None:
    created = agent.ok(
        "POST", "/v1/debug", {"assembly": COUNT_DOWN, "input_hex": u64(2).hex()}, 201
    )
    session = created["session_id"]
    assert created["inbound"] == [{"channel": 2, "messages_hex": [u64(2).hex()], "count": 1}]
    view = agent.ok("POST", f"/v1/debug/{session}/run", {})
    assert view["state"] == "HALTED" and bytes.fromhex(view["stdout_hex"]) == b"done"
    assert bytes.fromhex(view["memory"]["data_hex"])[:4] == b"done"
    again = agent.ok(
        "POST",
        "/v1/debug",
        {"assembly": "LI r2, 8\n RECV 2, r3, r253, r2\n HALT", "input": ""},
        201,
    )
    stepped = agent.ok("POST", f"/v1/debug/{again['session_id']}/run", {})
    assert stepped["state"] == "RUNNING" or stepped["state"] == "HALTED"
    blocked = agent.ok(
        "POST",
        "/v1/debug",
        {"assembly": "LI r2, 8\n RECV 2, r3, r253, r2\n RECV 2, r3, r253, r2\n HALT"},
        201,
    )
    view = agent.ok("POST", f"/v1/debug/{blocked['session_id']}/run", {})
    assert (view["state"], view["blocked_channel"]) == ("BLOCKED", 2)
    view = agent.ok("POST", f"/v1/debug/{blocked['session_id']}/deliver", {"data_hex": "01"})
    assert view["state"] == "RUNNING"
    assert agent.ok("POST", f"/v1/debug/{blocked['session_id']}/run", {})["state"] == "HALTED"
    refused = agent.request(
        "POST", f"/v1/debug/{blocked['session_id']}/deliver", {"data_hex": "01"}
    )
    assert refused.status_code == 409
    refused = agent.request(
        "POST", f"/v1/debug/{session}/deliver", {"channel": 0, "data_hex": "01"}
    )
    assert refused.status_code in (403, 409)
    for sid in (session, again["session_id"], blocked["session_id"]):
        agent.ok("DELETE", f"/v1/debug/{sid}")


def test_memory_window_is_chosen_by_query(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": COUNT_DOWN}, 201)["session_id"]
    view = agent.ok("GET", f"/v1/debug/{session}?memory_address=2&memory_length=2")
    assert view["memory"] == {"address": 2, "data_hex": b"ne".hex()}
    assert agent.request("GET", f"/v1/debug/{session}?memory_length=5000").status_code == 400
    assert agent.ok("GET", f"/v1/debug/{session}?memory_address=70000")["memory"]["data_hex"] == ""
    agent.ok("DELETE", f"/v1/debug/{session}")
    assert agent.request("GET", f"/v1/debug/{session}").status_code == 404


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 400),
        ({"assembly": "HALT", "program_id": "ab" * 32}, 400),
        ({"assembly": "NOPE"}, 400),
        ({"program_id": "ab" * 32}, 404),
        ({"program": "0000"}, 400),
        ({"assembly": "HALT", "memory_quota": 2**40}, 422),
        ({"assembly": "HALT", "memory_quota": 4}, 422),
        ({"assembly": "HALT", "grants": [12]}, 403),
    ],
)
def test_bad_debug_sessions_are_refused(agent: Agent, body: dict[str, object], status: int) -> None:
    assert agent.request("POST", "/v1/debug", body).status_code == status


def test_debug_session_from_a_stored_program(agent: Agent) -> None:
    code = agent.put_program(COUNT_DOWN)
    view = agent.ok("POST", "/v1/debug", {"program_id": code}, 201)
    assert view["program_id"] == code
    agent.ok("DELETE", f"/v1/debug/{view['session_id']}")


def test_sessions_per_agent_are_limited(agent: Agent) -> None:
    sessions = [
        agent.ok("POST", "/v1/debug", {"assembly": "HALT"}, 201)["session_id"] for _ in range(3)
    ]
    assert agent.request("POST", "/v1/debug", {"assembly": "HALT"}).status_code == 429
    for session in sessions:
        agent.ok("DELETE", f"/v1/debug/{session}")


CALLS = """
        LI   r1, 0
        CALL twice          ; 1
        CALL twice          ; 2
        HALT                ; 3
twice:  CALL once           ; 4
        CALL once           ; 5
        RET                 ; 6
once:   LI   r2, 1          ; 7
        ADD  r1, r1, r2     ; 8
        RET                 ; 9
"""


def test_the_view_names_instructions_by_their_labels(agent: Agent) -> None:
    view = agent.ok("POST", "/v1/debug", {"assembly": CALLS}, 201)
    assert view["labels"] == {"4": ["twice"], "7": ["once"]}
    assert view["code"][1] == "CALL twice" and view["code"][4] == "CALL once"
    assert view["source"] is None and view["sources"] is None  # assembly records no source


def test_a_stored_program_is_labelled_by_its_code_symbols(agent: Agent) -> None:
    exported = CALLS + "\n.export once\n"
    stored = agent.ok("POST", "/v1/programs", {"assembly": exported}, 201)["program_id"]
    view = agent.ok("POST", "/v1/debug", {"program_id": stored}, 201)
    assert view["labels"] == {"7": ["once"]}
    assert view["code"][5] == "CALL once"


def test_step_over_runs_a_call_to_its_return(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": CALLS}, 201)["session_id"]
    view = agent.ok("POST", f"/v1/debug/{session}/step_over", {})
    assert (view["pc"], view["last_stop"]) == (1, "step_limit")  # LI: one step, as step
    view = agent.ok("POST", f"/v1/debug/{session}/step_over", {})
    assert (view["pc"], view["last_stop"], view["registers"][1]) == (2, "step_over", "0x2")
    assert view["stack"] == []
    assert 1 in view["changed"] and 2 in view["changed"]


def test_step_out_returns_from_the_current_function(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": CALLS, "breakpoints": [8]}, 201)[
        "session_id"
    ]
    view = agent.ok("POST", f"/v1/debug/{session}/run", {})
    assert (view["pc"], view["last_stop"]) == (8, "breakpoint")  # inside once, from twice
    agent.ok("PUT", f"/v1/debug/{session}/breakpoints", {"breakpoints": []})
    view = agent.ok("POST", f"/v1/debug/{session}/step_out", {})
    assert (view["pc"], view["last_stop"]) == (5, "step_out")  # back in twice
    view = agent.ok("POST", f"/v1/debug/{session}/step_out", {})
    assert (view["pc"], view["last_stop"], view["registers"][1]) == (2, "step_out", "0x2")
    view = agent.ok("POST", f"/v1/debug/{session}/step_out", {})  # from the top: to the end
    assert view["state"] == "HALTED" and view["registers"][1] == "0x4"


def test_step_over_stops_at_a_breakpoint_inside_the_call(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": CALLS, "breakpoints": [7]}, 201)[
        "session_id"
    ]
    agent.ok("POST", f"/v1/debug/{session}/step", {})
    view = agent.ok("POST", f"/v1/debug/{session}/step_over", {})
    assert (view["pc"], view["last_stop"]) == (7, "breakpoint")


def test_step_over_a_recursive_call_waits_for_its_own_return(agent: Agent) -> None:
    countdown = """
            LI   r1, 3
            LI   r2, 1
            CALL down       ; 2
            HALT            ; 3
    down:   JZ   r1, done   ; 4
            SUB  r1, r1, r2
            CALL down       ; 6: returns to 7 three times, deeper each time
            ADD  r3, r3, r2
    done:   RET
    """
    session = agent.ok("POST", "/v1/debug", {"assembly": countdown, "breakpoints": [6]}, 201)[
        "session_id"
    ]
    view = agent.ok("POST", f"/v1/debug/{session}/run", {})
    assert view["pc"] == 6
    agent.ok("PUT", f"/v1/debug/{session}/breakpoints", {"breakpoints": []})
    view = agent.ok("POST", f"/v1/debug/{session}/step_over", {})
    assert (view["pc"], view["last_stop"]) == (7, "step_over")
    assert view["registers"][3] == "0x2"  # the two deeper frames have finished, this one not


STARLARK = """\
def double(n):
    m = n * 2
    return m

x = double(3)
y = x + 1
print(x, y)
"""


def test_starlark_steps_line_by_line_over_calls(agent: Agent) -> None:
    body = {"starlark": STARLARK, "filename": "lines.star", "memory_quota": 1 << 20}
    session = agent.ok("POST", "/v1/debug", body, 201)["session_id"]
    assert agent.ok("GET", f"/v1/debug/{session}/files") == {"files": {"lines.star": STARLARK}}
    lines = []
    for _ in range(10):
        view = agent.ok("POST", f"/v1/debug/{session}/step_line", {})
        if view["state"] != "READY" and view["state"] != "RUNNING":
            break
        assert view["last_stop"] == "step_line"
        assert view["source"]["file"] == "lines.star"
        lines.append(view["source"]["line"])
    # the def, then line 5, whose call of double runs its lines 2 and 3 through
    assert lines == [1, 5, 6, 7]
    assert view["state"] == "HALTED" and agent_text(view["stdout_hex"]) == "6 7\n"


def test_step_line_without_a_source_map_steps_one_instruction(agent: Agent) -> None:
    session = agent.ok("POST", "/v1/debug", {"assembly": LOOP}, 201)["session_id"]
    assert agent.ok("GET", f"/v1/debug/{session}/files") == {"files": {}}
    view = agent.ok("POST", f"/v1/debug/{session}/step_line", {})
    assert (view["pc"], view["last_stop"]) == (1, "step_limit")


def test_starlark_that_does_not_compile_is_a_400_with_its_place(agent: Agent) -> None:
    body = {"starlark": "x = (1 +\n", "filename": "bad.star"}
    response = agent.request("POST", "/v1/debug", body)
    assert response.status_code == 400 and "bad.star:2:1" in response.text
    body = {"starlark": "print(1)\n", "filename": "../x.star"}
    assert agent.request("POST", "/v1/debug", body).status_code == 400


def agent_text(data_hex: str) -> str:
    return bytes.fromhex(data_hex).decode()
