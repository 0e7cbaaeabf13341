"""Nothing CPU-heavy on the server's event loop: uploads, links and proofs run in a worker.

The attack: one 789 KB upload of 100,000 labels on a line blocked every request,
``/v1/health`` included, for 37.5 s.  The assembler is linear now, and more to
the point the work runs in a worker process under a time limit, so the server
answers everyone else meanwhile, and one agent's uploads queue behind each other,
not ahead of other agents'.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import httpx
import pytest

from kforge.core import AgentId, Hash256, Internal, UnresolvedSymbol
from kforge.engine.execution import HOST_CALLS_PER_TURN
from kforge.engine.jobs import ASSEMBLY, build_program
from kforge.engine.offload import JobFailed, Offload, WorkLimits, WorkTimedOut
from kforge.engine.policy import OverLimit
from kforge.link import Import
from kforge.proofs import verify_proof
from kforge.server import AuthConfig, ServerConfig
from test_engine_artifacts import LIBRARY
from test_engine_support import OWNER, create, open_engine, put, run
from test_server_support import Agent, running_server

#: About a megabyte of assembly: labels on one line, then instructions (a second or so).
HEAVY = (
    " ".join(f"l{i}:" for i in range(40_000))
    + "\n"
    + "".join(f"x{i}: LI r1, {i}\n" for i in range(34_000))
    + "HALT\n"
)
AGENT = AgentId(b"\x07" * 32)
#: Over the size that runs inline: its upload starts the worker's fork server.
WARM_UP = " ".join(f"w{i}:" for i in range(5000)) + " HALT"


def _upload(agent: Agent, source: str, outcome: dict[str, Any]) -> None:
    response = agent.request("POST", "/v1/programs", {"assembly": source})
    outcome["status"] = response.status_code
    outcome["text"] = response.text
    outcome["done"] = time.monotonic()


def test_health_answers_while_a_huge_upload_is_built() -> None:
    """The attack: the upload blocked every request for as long as it was assembled."""
    assert len(HEAVY) < 1024 * 1024
    config = ServerConfig(auth=AuthConfig(rate_per_second=1000, rate_burst=1000))
    with running_server(config) as live:
        agent = Agent(live.base_url)
        agent.put_program(WARM_UP)  # the worker's fork server is up
        outcome: dict[str, Any] = {}
        uploader = threading.Thread(target=_upload, args=(agent, HEAVY, outcome))
        uploader.start()
        time.sleep(0.3)
        with httpx.Client(base_url=live.base_url, timeout=60) as http:
            health = http.get("/v1/health")
            answered = time.monotonic()
        uploader.join(60)
        assert health.status_code == 200
        assert outcome["status"] == 201, outcome
        assert answered < outcome["done"]  # answered while the upload was being built
        agent.close()


def test_an_upload_over_its_time_limit_is_stopped_and_the_server_goes_on() -> None:
    with running_server() as live:
        live.engine.ctx.offload = Offload(WorkLimits(time_limit=0.2))
        agent = Agent(live.base_url)
        refused = agent.request("POST", "/v1/programs", {"assembly": HEAVY})
        assert refused.status_code == 422
        assert "time limit" in refused.json()["error"]["message"]
        assert agent.request("GET", "/v1/health").status_code == 200
        agent.put_program("HALT")
        agent.close()


def test_one_agent_has_one_heavy_job_at_a_time() -> None:
    config = ServerConfig(auth=AuthConfig(rate_per_second=1000, rate_burst=1000))
    with running_server(config) as live:
        agent, other = Agent(live.base_url), Agent(live.base_url)
        agent.put_program(WARM_UP)
        outcomes: list[dict[str, Any]] = [{}, {}]
        threads = [
            threading.Thread(target=_upload, args=(agent, HEAVY, outcome)) for outcome in outcomes
        ]
        for thread in threads:
            thread.start()
            time.sleep(0.1)
        mine = {"other": {}}
        _upload(other, HEAVY, mine["other"])  # another agent is not refused
        for thread in threads:
            thread.join(60)
        assert sorted(outcome["status"] for outcome in outcomes) == [201, 429]
        assert mine["other"]["status"] == 201
        for client in (agent, other):
            client.close()


def test_a_jobs_error_keeps_its_status_and_message() -> None:
    async def body() -> None:
        offload = Offload(WorkLimits(inline_bytes=0))
        with pytest.raises(JobFailed) as failed:
            await offload.run(AGENT, "building", 100, build_program, ASSEMBLY, "  BOGUS r1", "up")
        error = failed.value
        assert error.http_status == 400 and "BOGUS" in str(error) and "up:1:" in str(error)
        assert error.to_kingdom_error().category.value == "InvalidRequest"
        built = await offload.run(AGENT, "building", 100, build_program, ASSEMBLY, "HALT", "up")
        assert built.code_length == 1

    run(body)


def test_an_agent_over_its_share_of_jobs_is_refused() -> None:
    async def body() -> None:
        offload = Offload(WorkLimits(inline_bytes=0, per_agent=1))
        first = asyncio.ensure_future(
            offload.run(AGENT, "building", 10**6, build_program, ASSEMBLY, HEAVY, "a")
        )
        await asyncio.sleep(0)
        with pytest.raises(OverLimit):
            await offload.run(AGENT, "building", 10**6, build_program, ASSEMBLY, "HALT", "b")
        assert (await first).code_length == 34_001
        with pytest.raises(WorkTimedOut):
            await Offload(WorkLimits(inline_bytes=0, time_limit=0.05)).run(
                AGENT, "building", 10**6, build_program, ASSEMBLY, HEAVY, "c"
            )

    run(body)


MAIN = """
.import double
        LI   r1, 21
        CALL double
        HALT
"""


def test_linking_and_proving_run_in_a_worker_and_agree() -> None:
    async def body() -> None:
        async with open_engine(work=WorkLimits(inline_bytes=0)) as engine:
            library, main = await put(engine, LIBRARY), await put(engine, MAIN)
            resolved = await engine.link_resolve(main, [Import(library, (b"double",))], OWNER)
            with pytest.raises(JobFailed) as failed:
                await engine.link_resolve(main, [Import(library, (b"triple",))], OWNER)
            assert failed.value.code == UnresolvedSymbol.code
            sandbox = await create(
                engine, "LI r1, 3000\nLI r2, 1\nl: SUB r1, r1, r2\nJNZ r1, l\nHALT"
            )
            await engine.exec_start(sandbox, OWNER)
            await engine.wait(sandbox, timeout=10)
            proof = await engine.request_proof(sandbox, OWNER)
            record = await engine.run_record(sandbox, OWNER)
            program = engine.programs.load(engine.state.sandbox(sandbox).program)
            verify_proof(proof, program, record, engine.signer.public_raw)
            assert isinstance(resolved, Hash256)

    run(body)


def test_closing_stops_every_job_and_starts_no_other() -> None:
    """A job outliving the engine would hold a CPU for up to its time limit after close."""

    async def body() -> None:
        offload = Offload(WorkLimits(inline_bytes=0, workers=1, time_limit=60))
        other = AgentId(b"\x08" * 32)
        long = "".join(f"x{i}: LI r1, {i}\n" for i in range(400_000)) + "HALT\n"  # seconds
        running = asyncio.ensure_future(
            offload.run(AGENT, "building", 10**6, build_program, ASSEMBLY, long, "a")
        )
        waiting = asyncio.ensure_future(
            offload.run(other, "building", 10**6, build_program, ASSEMBLY, HEAVY, "b")
        )
        await asyncio.sleep(0.5)  # the first is in its process, the second waits for a slot
        started = time.monotonic()
        offload.close()
        for job in (running, waiting):
            with pytest.raises(Internal, match="the engine closed"):
                await job
        assert time.monotonic() - started < 5
        with pytest.raises(Internal, match="the engine closed"):
            await offload.run(AGENT, "building", 1, build_program, ASSEMBLY, "HALT", "c")

    run(body)


#: Sends empty messages to the vault as fast as it can, never reading a reply: three ticks
#: each, and tens of microseconds of the host's time to answer.
EMPTY_SENDS = """
        LI   r2, 0
again:  SEND 3, r253, r2
        JMP  again
"""


def test_host_calls_give_the_event_loop_its_turns() -> None:
    """The attack: one slice of empty SENDs on compiled code made 330,000 host calls, all
    answered before the event loop had a turn (1.4 s); on the interpreter, 3,300 (0.1 s)."""

    async def body() -> None:
        async with open_engine(tier="auto") as engine:
            sandbox_id = await create(
                engine, EMPTY_SENDS, grants=frozenset({3}), tick_budget=600_000
            )
            sandbox = engine.state.sandbox(sandbox_id)
            seen: list[int] = []

            async def watch() -> None:
                while sandbox.state.is_live:
                    seen.append(len(sandbox.io_log or ()))
                    await asyncio.sleep(0)

            watcher = asyncio.ensure_future(watch())
            await engine.exec_start(sandbox_id, OWNER)
            result = await engine.wait(sandbox_id, timeout=60)
            await watcher
            assert result.ticks_used > 100_000  # long enough to run on compiled code
            steps = [later - earlier for earlier, later in itertools.pairwise(seen)]
            assert max(steps) <= HOST_CALLS_PER_TURN
            assert len(await engine.io_log(sandbox_id, OWNER)) > 30_000

    run(body)
