"""Starlark source uploaded to a real server: compiled in a worker, stored, run.

``POST /v1/programs`` with ``starlark`` compiles the source in a worker process
(always: a compile's cost does not follow its size) for the body's memory quota;
a compile error is a 400 whose message is ``FILE:LINE:COL: message``; the upload
reads none of the server's files, and loads libraries by content id from the
vault.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Iterator

import pytest

from kforge.client import Client, RemoteError
from kforge.core import InvalidProgram
from kforge.engine import CreateSandbox, SandboxState
from kforge.engine.offload import WorkLimits
from kforge.server import AgentKey
from kforge.starlark import compile_starlark
from test_server_support import RELAXED_RATES, Agent, LiveServer, running_server

HELLO = 'def greet(name):\n    return "hello, " + name\n\nprint(greet("forge"))\n'


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with running_server(RELAXED_RATES) as server:
        yield server


@pytest.fixture
def agent(live: LiveServer) -> Iterator[Agent]:
    with contextlib.closing(Agent(live.base_url)) as client:
        yield client


def _run(agent: Agent, program_id: str, memory_quota: int = 65536) -> dict[str, object]:
    body = {"code": program_id, "memory_quota": memory_quota, "tick_budget": 10_000_000}
    sandbox = str(agent.ok("POST", "/v1/sandboxes", body, 201)["sandbox_id"])
    result: dict[str, object] = agent.run_to_end(sandbox)
    return result


def test_starlark_upload_is_the_compiled_program_and_runs(agent: Agent) -> None:
    stored = agent.ok("POST", "/v1/programs", {"starlark": HELLO, "filename": "hello.star"}, 201)
    expected = compile_starlark(HELLO, "hello.star")
    assert stored["program_id"] == expected.program_id.hex
    assert stored["code_length"] == len(expected.code)
    result = _run(agent, stored["program_id"])
    assert result["state"] == "HALTED"
    assert bytes.fromhex(str(result["output_hex"])) == b"hello, forge\n"


def test_the_memory_quota_is_the_one_compiled_for(agent: Agent) -> None:
    big = 1 << 20
    body = {"starlark": HELLO, "memory_quota": big}
    stored = agent.ok("POST", "/v1/programs", body, 201)
    assert (
        stored["program_id"]
        == compile_starlark(HELLO, "main.star", memory_quota=big).program_id.hex
    )
    assert _run(agent, stored["program_id"], big)["state"] == "HALTED"
    small = _run(agent, stored["program_id"], 65536)  # compiled for more than it gets
    assert small["state"] == "FAULTED"


@pytest.mark.parametrize(
    ("source", "place"),
    [
        ("x = (1 +\n", "bad.star:2:1"),
        ("print(undefined_name)\n", "bad.star:1:7"),
        ("class A:\n    pass\n", "bad.star:1:1"),
        ('load("/etc/hostname", "x")\n', "bad.star:1:1"),
    ],
    ids=["syntax", "undefined", "not-starlark", "file-load"],
)
def test_a_compile_error_is_a_400_with_its_place(agent: Agent, source: str, place: str) -> None:
    response = agent.request("POST", "/v1/programs", {"starlark": source, "filename": "bad.star"})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert place + ": " in message, message


def test_an_upload_reads_no_file_of_the_server(agent: Agent) -> None:
    source = 'load("secret.star", "token")\nprint(token)\n'
    response = agent.request("POST", "/v1/programs", {"starlark": source})
    assert response.status_code == 400
    assert (
        "main.star:1:1: cannot load secret.star: an upload loads libraries by content id"
        in (response.json()["error"]["message"])
    )


def test_a_library_is_loaded_from_the_vault_by_content_id(live: LiveServer, agent: Agent) -> None:
    library = b"def twice(n):\n    return 2 * n\n"
    object_id = live.engine.vault.put(library)
    assert object_id.raw == hashlib.sha256(library).digest()
    source = f'load("sha256:{object_id.hex}", "twice")\nprint(twice(21))\n'
    stored = agent.ok("POST", "/v1/programs", {"starlark": source}, 201)
    assert bytes.fromhex(str(_run(agent, stored["program_id"])["output_hex"])) == b"42\n"
    missing = source.replace(object_id.hex, "ab" * 32)
    response = agent.request("POST", "/v1/programs", {"starlark": missing})
    assert response.status_code == 400
    assert "no such object in the vault" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"starlark": HELLO, "assembly": "HALT"}, 400, "assembly"),
        ({"starlark": HELLO, "filename": "dir/x.star"}, 400, None),
        ({"starlark": HELLO, "filename": "x.py"}, 400, None),
        ({"assembly": "HALT", "filename": "x.star"}, 400, "filename"),
        ({"assembly": "HALT", "memory_quota": 65536}, 400, "memory_quota"),
        ({"starlark": HELLO, "memory_quota": 1 << 40}, 422, None),
    ],
    ids=["two-kinds", "slash", "not-star", "name-for-assembly", "quota-for-assembly", "quota"],
)
def test_bad_starlark_uploads_are_refused(
    agent: Agent, body: dict[str, object], status: int, field: str | None
) -> None:
    response = agent.request("POST", "/v1/programs", body)
    assert response.status_code == status, response.text
    if field is not None:
        assert response.json()["error"]["context"]["field"] == field


def test_the_openapi_document_offers_starlark(live: LiveServer, agent: Agent) -> None:
    document = agent.http.get("/openapi.json").json()
    properties = document["components"]["schemas"]["ProgramBodyInput"]["properties"]
    assert {"starlark", "filename", "memory_quota"} <= set(properties)


def test_the_python_client_uploads_starlark(live: LiveServer) -> None:
    async def body() -> None:
        async with Client(live.base_url, AgentKey.generate()) as engine:
            code = await engine.put_starlark(HELLO, filename="hello.star")
            assert code == compile_starlark(HELLO, "hello.star").program_id
            sandbox = await engine.create_sandbox(
                CreateSandbox(engine.agent_id, code, 65536, 10_000_000)
            )
            await engine.exec_start(sandbox)
            result = await engine.wait(sandbox, timeout=10)
            assert (result.state, result.output) == (SandboxState.HALTED, b"hello, forge\n")
            with pytest.raises(RemoteError) as raised:
                await engine.put_starlark("print(1 +)\n", filename="oops.star")
            assert raised.value.status == 400 and "oops.star:1:" in str(raised.value)

    asyncio.run(body())


def test_compile_error_travels_as_invalid_program() -> None:
    """What the worker raises is the compiler's own error, FILE:LINE:COL first."""
    from kforge.engine.jobs import STARLARK, build_program

    with pytest.raises(InvalidProgram) as raised:
        build_program(STARLARK, "x = (1 +\n", "w.star", 65536, {})
    assert str(raised.value).startswith("w.star:2:1: ")


def test_a_compile_is_bounded_in_time_even_for_a_small_source() -> None:
    """Starlark never compiles on the server's event loop: a compile past the time
    limit is killed (422), however few bytes its source has."""
    from starlark.generate import generate_program

    source = "".join(generate_program(seed) for seed in range(6))
    # every body is "small" here: assembly this size would be built inline, untimed
    work = WorkLimits(time_limit=0.05, inline_bytes=1 << 20)
    with (
        running_server(RELAXED_RATES, work=work) as server,
        contextlib.closing(Agent(server.base_url)) as agent,
    ):
        response = agent.request("POST", "/v1/programs", {"starlark": source})
        assert response.status_code == 422, response.text
        assert "compiling main.star" in response.json()["error"]["message"]
        assert agent.request("GET", "/v1/health").status_code == 200


def test_the_debugger_compiles_starlark_as_an_upload(live: LiveServer, agent: Agent) -> None:
    """The debugger's Starlark reads no file of the server either, and loads from the vault."""
    body = {"starlark": 'load("/etc/hostname", "x")\n', "filename": "dbg.star"}
    response = agent.request("POST", "/v1/debug", body)
    assert response.status_code == 400
    assert "dbg.star:1:1: cannot load /etc/hostname: an upload loads" in response.text
    object_id = live.engine.vault.put(b"def three():\n    return 3\n")
    body = {"starlark": f'load("sha256:{object_id.hex}", "three")\nprint(three())\n'}
    assert agent.ok("POST", "/v1/debug", body, 201)["state"] == "READY"


def test_libraries_are_gathered_through_loads_within_the_limits() -> None:
    from kforge.limits import MAX_STARLARK_SOURCE_BYTES
    from kforge.sources import compile_starlark_upload, gather_libraries

    inner = b"def one():\n    return 1\n"
    inner_id = hashlib.sha256(inner).digest()
    outer = f'load("sha256:{inner_id.hex()}", "one")\ndef two():\n    return one() + 1\n'.encode()
    outer_id = hashlib.sha256(outer).digest()
    big = b"#" * MAX_STARLARK_SOURCE_BYTES
    big_id = hashlib.sha256(big).digest()
    vault = {inner_id: inner, outer_id: outer, big_id: big}
    source = f'load("sha256:{outer_id.hex()}", "two")\nprint(two())\n'
    libraries = gather_libraries(source + f"# sha256:{big_id.hex()}\n", vault.get)
    assert libraries == {outer_id: outer, inner_id: inner, big_id: None}
    compile_starlark_upload(source, "main.star", 65536, libraries)  # loads through both
    with pytest.raises(InvalidProgram) as raised:
        compile_starlark_upload(f'load("sha256:{big_id.hex()}", "x")\n', "m.star", 65536, libraries)
    assert "libraries are at most" in str(raised.value)
