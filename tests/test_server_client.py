"""``kforge.client``: the engine's shape over HTTP, signing as the agent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from kforge.asm import assemble
from kforge.client import AuthenticationFailed, Client, RemoteError
from kforge.core import (
    EventKind,
    Hash256,
    InvalidState,
    MessageCode,
    PermissionDenied,
    SandboxNotFound,
)
from kforge.engine import CreateSandbox, Operation, SandboxState
from kforge.events import Event
from kforge.messages import Envelope, InvalidRequest, ReplyCode
from kforge.proofs import verify_proof
from kforge.server import AgentKey, AuthConfig, ServerConfig
from test_server_support import COUNT_DOWN, ECHO, WAIT_INPUT, LiveServer, running_server, u64


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with running_server(
        ServerConfig(auth=AuthConfig(rate_per_second=1000, rate_burst=1000))
    ) as server:
        yield server


@pytest.mark.parametrize("use_token", [True, False])
def test_client_runs_a_sandbox_like_the_engine(live: LiveServer, use_token: bool) -> None:
    async def body() -> None:
        async with Client(live.base_url, AgentKey.generate(), use_token=use_token) as engine:
            program = assemble(COUNT_DOWN)
            code = await engine.put_program(program)
            assert code == program.program_id
            sandbox = await engine.create_sandbox(
                CreateSandbox(engine.agent_id, code, 65536, 10_000, input=u64(4))
            )
            assert (await engine.sandbox_status(sandbox)).state is SandboxState.READY
            await engine.exec_start(sandbox, engine.agent_id)
            result = await engine.wait(sandbox, timeout=10)
            assert (result.state, result.output) == (SandboxState.HALTED, b"done")
            assert [info.id for info in await engine.list_sandboxes(engine.agent_id)] == [sandbox]
            assert await engine.io_log(sandbox) == ()
            record = await engine.run_record(sandbox)
            proof = await engine.request_proof(sandbox)
            assert proof.ticks_used == result.ticks_used
            assert verify_proof(proof, program, record, proof.forge_key).ok

    asyncio.run(body())


def test_client_raises_the_engines_errors(live: LiveServer) -> None:
    async def body() -> None:
        async with (
            Client(live.base_url, AgentKey.generate()) as alice,
            Client(live.base_url, AgentKey.generate()) as bob,
        ):
            code = await alice.put_program(assemble(WAIT_INPUT))
            sandbox = await alice.create_sandbox(CreateSandbox(alice.agent_id, code, 65536, 10_000))
            with pytest.raises(SandboxNotFound):
                await alice.sandbox_status(Hash256(b"\x07" * 32))
            with pytest.raises(PermissionDenied):
                await bob.kill_sandbox(sandbox)
            with pytest.raises(PermissionDenied):
                await alice.kill_sandbox(sandbox, bob.agent_id)  # refused locally
            await alice.grant(
                sandbox, alice.agent_id, bob.agent_id, [Operation.STATUS, Operation.KILL]
            )
            assert (await bob.sandbox_status(sandbox)).owner == alice.agent_id
            assert await alice.step(sandbox) is SandboxState.RUNNING
            await alice.exec_start(sandbox)
            with pytest.raises(TimeoutError):
                await alice.wait(sandbox, timeout=0.2)
            with pytest.raises(InvalidState):
                await alice.exec_start(sandbox)
            with pytest.raises(PermissionDenied):
                await bob.deliver(sandbox, 2, b"x")
            await bob.kill_sandbox(sandbox)
            await alice.revoke(sandbox, alice.agent_id, bob.agent_id)
            with pytest.raises(PermissionDenied):
                await bob.sandbox_status(sandbox)
            assert (await alice.wait(sandbox)).state is SandboxState.KILLED
            await alice.forget(sandbox)
            with pytest.raises(InvalidRequest):
                await alice.create_sandbox(
                    CreateSandbox(alice.agent_id, code, 65536, 2**64 - 1, grants=frozenset({20}))
                )
            with pytest.raises(RemoteError) as raised:
                await alice.begin_cycle()
            assert raised.value.status == 403

    asyncio.run(body())


def test_client_reads_output_while_running_and_after(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    echo_twice = ECHO.replace("HALT", "RECV 2, r3, r253, r2\n SEND 0, r253, r3\n HALT")

    async def body() -> None:
        async with (
            Client(live.base_url, AgentKey.generate()) as alice,
            Client(live.base_url, AgentKey.generate()) as bob,
        ):
            code = await alice.put_program(assemble(echo_twice))
            sandbox = await alice.create_sandbox(
                CreateSandbox(alice.agent_id, code, 65536, 10_000, input=b"one ")
            )
            assert await alice.output(sandbox) == b""
            await alice.exec_start(sandbox)
            with pytest.raises(TimeoutError):
                await alice.wait(sandbox, timeout=0.3)
            assert (await alice.sandbox_status(sandbox)).state is SandboxState.BLOCKED
            assert await alice.output(sandbox) == b"one "  # partial, mid-run
            assert await alice.output(sandbox, alice.agent_id, offset=2) == b"e "
            assert await alice.output(sandbox, offset=4) == b""
            with pytest.raises(InvalidRequest):
                await alice.output(sandbox, offset=5)
            with pytest.raises(InvalidRequest):
                await alice.output(sandbox, offset=-1)
            with pytest.raises(PermissionDenied):
                await bob.output(sandbox)
            with pytest.raises(PermissionDenied):
                await alice.output(sandbox, bob.agent_id)  # refused locally
            with pytest.raises(SandboxNotFound):
                await alice.output(Hash256(b"\x07" * 32))
            await alice.deliver(sandbox, 2, b"two")
            result = await alice.wait(sandbox, timeout=10)
            assert await alice.output(sandbox) == result.output == b"one two"
            monkeypatch.setattr(
                "kforge.server.sandbox_api.OUTPUT_CHUNK", 3
            )  # read in turns of 3 bytes
            assert await alice.output(sandbox) == b"one two"
            assert await alice.output(sandbox, offset=1) == b"ne two"

    asyncio.run(body())


def test_client_dispatches_envelopes_and_reads_its_mailbox(live: LiveServer) -> None:
    async def body() -> None:
        async with Client(live.base_url, AgentKey.generate()) as engine:
            code = await engine.put_program(assemble(ECHO))
            sandbox = await engine.create_sandbox(
                CreateSandbox(engine.agent_id, code, 65536, 10_000, input=b"hey")
            )
            request = Envelope.build(
                MessageCode.EXEC_START,
                engine.agent_id,
                {"sandbox_id": sandbox},
                id=Hash256(b"\x03" * 32),
            )
            reply = await engine.dispatch(request)
            assert (reply.code, reply.reply_to) == (ReplyCode.ACK, request.id)
            mail = await engine.mailbox(timeout=5)
            assert mail[0].code == MessageCode.EXEC_RESULT and mail[0].values().output == b"hey"
            forged = Envelope.build(
                MessageCode.SANDBOX_STATUS,
                live.state.operator_agent,
                {"sandbox_id": sandbox},
                id=Hash256(b"\x04" * 32),
            )
            with pytest.raises(PermissionDenied):
                await engine.dispatch(forged)

    asyncio.run(body())


def test_client_subscribes_to_its_events(live: LiveServer) -> None:
    async def body() -> None:
        async with Client(live.base_url, AgentKey.generate()) as engine:
            code = await engine.put_program(assemble(COUNT_DOWN))
            sandbox = await engine.create_sandbox(
                CreateSandbox(engine.agent_id, code, 65536, 10_000, input=u64(2))
            )
            seen: list[Event] = []

            async def watch() -> None:
                events = engine.subscribe(
                    [EventKind.SANDBOX_STARTED, EventKind.SANDBOX_HALTED], sandbox_id=sandbox
                )
                async with contextlib.aclosing(events):  # the socket closes here, not at exit
                    async for item in events:
                        assert isinstance(item, Event)
                        seen.append(item)
                        if item.kind is EventKind.SANDBOX_HALTED:
                            return

            watcher = asyncio.ensure_future(watch())
            await asyncio.sleep(0.3)  # the socket is open before the sandbox starts
            await engine.exec_start(sandbox)
            await asyncio.wait_for(watcher, 10)
            assert [event.kind for event in seen] == [
                EventKind.SANDBOX_STARTED,
                EventKind.SANDBOX_HALTED,
            ]
            assert all(event.sandbox_id == sandbox for event in seen)

    asyncio.run(body())


def test_client_with_an_unknown_token_fails_authentication(live: LiveServer) -> None:
    async def body() -> None:
        async with Client(live.base_url, AgentKey.generate()) as engine:
            engine._token, engine._token_expires_ms = "kf1.AAAA.AAAA", 2**62
            with pytest.raises(AuthenticationFailed):
                await engine.list_sandboxes()

    asyncio.run(body())


def test_client_drives_the_debugger(live: LiveServer) -> None:
    async def body() -> None:
        async with Client(live.base_url, AgentKey.generate()) as engine:
            view = await engine.debug("POST", "", {"assembly": "LI r1, 7\n HALT"})
            view = await engine.debug("POST", f"/{view['session_id']}/step", {"count": 1})
            assert view["registers"][1] == "0x7" and view["changed"] == [1]

    asyncio.run(body())


def test_a_client_moves_to_its_next_server_url_when_one_answers_503(live: LiveServer) -> None:
    """A draining gateway answers 503: the retrying client asks the next URL, not the same."""
    asked: list[bytes] = []

    async def draining(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        asked.append(request.split(b"\r\n", 1)[0])
        length = 0
        for line in request.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def body() -> None:
        server = await asyncio.start_server(draining, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            urls = [f"http://127.0.0.1:{port}", live.base_url]
            async with Client(urls, AgentKey.generate(), retry_seconds=30.0) as engine:
                program = assemble(COUNT_DOWN)
                assert await engine.put_program(program) == program.program_id
        assert asked, "the draining server was never asked"
        assert len(asked) == 1, f"the client asked the draining server again: {asked}"

    asyncio.run(body())
