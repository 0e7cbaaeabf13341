"""Every byte a sandbox makes the host hold counts against a bound, and is let go when it stops.

The attack: a sandbox with a 200 KB quota issued 5,000 vault GETs of a 64 KiB
object; the replies sat in its I/O log, delivery log and inbound queue, none of
which counted, so the server's memory grew by 320 MB and stayed after the
sandbox halted.  Now the host's bytes for a sandbox are counted
(``Sandbox.host_bytes``) against its budget, its owner's share and the
engine's total; a sandbox whose own host calls would pass them stops
``HOST_MEMORY_EXCEEDED``; a stopped sandbox's run goes to the archive on disk
and the memory is let go, and replay from the archive is exact.
"""

from __future__ import annotations

import asyncio
import gc
import io
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from kforge.asm import assemble
from kforge.cli.main import write_result_json
from kforge.client import Client
from kforge.core import AgentId, EventKind, Hash256, StateCorrupted
from kforge.engine import CreateSandbox, Endpoint, Engine, EngineLimits, SandboxState, Service
from kforge.engine.archive import ArchivedLogs, SqliteArchive, decode_logs, encode_logs
from kforge.engine.models import HostCall
from kforge.engine.policy import OverLimit
from kforge.host import AgoraBoard, Status, parse_reply
from kforge.machine import Delivery, Machine
from kforge.messages import Envelope, Mailbox
from kforge.proofs import verify_proof
from kforge.server import AuthConfig, ServerConfig
from kforge.server.sandbox_api import OUTPUT_CHUNK
from kforge.storage import DECODED_INSTRUCTION_BYTES, ProgramCache, Vault
from test_engine_support import OTHER, OWNER, create, open_engine, put, run
from test_server_support import Agent, running_server

OBJECT = bytes(range(256)) * 250  # 64,000 bytes: a reply within the 64 KiB message limit

#: Reads a vault GET request (op and id) on stdin, then sends it ``count`` times (the
#: first 8 bytes of stdin after the request, little-endian), reading each reply.
GETS = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        LI   r8, 33
        ADD  r10, r253, r8
        LOADW r5, r10, 0
        LI   r6, 1
        LI   r7, 65536
        LI   r8, 4096
        ADD  r9, r253, r8
        LI   r3, 33
again:  JZ   r5, done
        SEND 3, r253, r3
        RECV 3, r4, r9, r7
        SUB  r5, r5, r6
        JMP  again
done:   HALT
"""

#: GETS, then waiting on stdin before it halts (holding its logs meanwhile).
GETS_THEN_WAIT = GETS.replace("done:   HALT", "done:   RECV 2, r3, r253, r2\n        HALT")

QUOTA = 200 * 1024


def sends(count: int, size: int) -> str:
    """A program writing ``count`` messages of ``size`` bytes to stdout, then halting."""
    return f"""
            LI   r2, {size}
            LI   r5, {count}
            LI   r6, 1
    again:  JZ   r5, done
            SEND 0, r253, r2
            SUB  r5, r5, r6
            JMP  again
    done:   HALT
    """


def gets(object_id: Hash256, count: int) -> bytes:
    return b"\x01" + object_id.raw + struct.pack("<Q", count)


def test_the_attack_stops_at_the_sandboxes_budget_and_lets_go_of_everything() -> None:
    """5,000 GETs of 64 KB: the sandbox stops at its budget (16 MiB), never the 320 MB it
    asked for, and once stopped the engine holds none of it in memory."""

    async def body() -> None:
        async with open_engine() as engine:
            object_id = engine.vault.put(OBJECT)
            faulted = engine.bus.subscribe([EventKind.SANDBOX_FAULTED])
            tracemalloc.start()
            try:
                before, _ = tracemalloc.get_traced_memory()
                sandbox = await create(
                    engine,
                    GETS,
                    memory_quota=QUOTA,
                    grants=frozenset({3}),
                    input=gets(object_id, 5000),
                )
                peak_held = 0
                hold = engine.state.hold

                def observe(sandbox: object, delta: int) -> None:
                    nonlocal peak_held
                    hold(sandbox, delta)  # type: ignore[arg-type]
                    peak_held = max(peak_held, engine.state.host_bytes)

                engine.state.hold = observe  # type: ignore[method-assign]
                await engine.exec_start(sandbox, OWNER)
                result = await engine.wait(sandbox, timeout=60)
                assert isinstance(engine.archive, SqliteArchive)
                engine.archive.flush()  # the run was written on the archive's thread
                gc.collect()
                after, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            budget = engine.limits.max_host_bytes_per_sandbox
            assert result.state is SandboxState.HOST_MEMORY_EXCEEDED
            assert faulted.events()[0].payload["fault_name"] == "HOST_MEMORY_EXCEEDED"
            assert 0 < peak_held <= budget
            assert engine.state.host_bytes == 0
            # never the 320 MB the sandbox asked for: at most the budget, and the copies made
            # for a moment while the run is written to the archive
            assert peak - before < 5 * budget
            assert after - before < 2 * 1024 * 1024  # and nothing of it once stopped
            calls = await engine.io_log(sandbox, OWNER)  # read back from the archive
            assert 200 < len(calls) < 300
            assert parse_reply(calls[0].reply) == (Status.OK, 1, OBJECT)

    run(body)


def test_a_run_within_its_budget_goes_to_the_archive_and_replays_exactly() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            object_id = engine.vault.put(OBJECT)
            sandbox = await create(
                engine, GETS, memory_quota=QUOTA, grants=frozenset({3}), input=gets(object_id, 40)
            )
            await engine.exec_start(sandbox, OWNER)
            assert (await engine.wait(sandbox, timeout=30)).state is SandboxState.HALTED
            kept = engine.state.sandbox(sandbox)
            assert kept.run_digest is not None  # archived: nothing of the run in memory
            assert kept.io_log is None and kept.final is not None and kept.final.deliveries == ()
            record = await engine.run_record(sandbox, OWNER)
            assert len(record.deliveries) == 40
            proof = await engine.request_proof(sandbox, OWNER)
            program = engine.programs.load(kept.program)
            verify_proof(proof, program, record, engine.signer.public_raw)

    run(body)


def test_an_archived_run_holds_each_reply_once_and_reads_back_whole() -> None:
    """A delivered reply is in both logs; written twice, a stop wrote (and hashed) 33 MB
    for a 16 MiB budget on the event loop."""
    calls = [HostCall(10 * n, 3, b"get", bytes([n]) * 1000, 0) for n in range(50)]
    stranger = Delivery(10, 3, bytes([1]) * 1000)  # another agent's message: same tick, data
    deliveries = [Delivery(call.ticks_used, 3, call.reply) for call in calls]
    deliveries.insert(1, stranger)
    dropped = HostCall(600, 3, b"late", b"reply", 0, delivered=False)
    logs = ArchivedLogs(tuple(deliveries), (*calls, dropped))
    encoded = encode_logs(logs)
    assert 51_000 < len(encoded) < 56_000  # 51 deliveries of 1000 bytes, each reply once
    assert decode_logs(Hash256(bytes(32)), encoded) == logs
    with pytest.raises(StateCorrupted, match="do not decode"):
        decode_logs(Hash256(bytes(32)), encoded.replace(b"get", b"got", 1)[:-3])


def test_a_temporary_archive_writes_on_its_own_thread_and_reads_a_run_at_once() -> None:
    archive = SqliteArchive()
    first, second, third = (Hash256(bytes([n]) * 32) for n in (1, 2, 3))
    try:
        archive.put(first, b"output", b"logs")
        assert archive.output(first, 2, 3) == b"tpu" and archive.logs(first) == b"logs"
        archive.put(second, b"x" * 100_000, b"")
        archive.discard(second)
        archive.put(third, b"y", b"z")
        archive.flush()
        assert archive.output(first, 0, None) == b"output" and archive.logs(third) == b"z"
        assert archive.output(second, 0, None) is None and archive.logs(second) is None
        archive.collect([third])
        assert archive.logs(first) is None and archive.logs(third) == b"z"
    finally:
        archive.close()
    assert archive.path is not None and not archive.path.exists()


def test_the_owners_share_and_the_engines_total_bound_many_sandboxes() -> None:
    async def body() -> None:
        limits = EngineLimits(
            max_host_bytes_per_sandbox=1 << 20,
            max_host_bytes_per_owner=3 << 19,  # one and a half sandboxes' worth
            max_host_bytes=4 << 20,
        )
        async with open_engine(limits=limits) as engine:
            object_id = engine.vault.put(OBJECT)
            first, second = [
                await create(
                    engine,
                    GETS_THEN_WAIT,
                    memory_quota=QUOTA,
                    grants=frozenset({3}),
                    input=gets(object_id, 14),
                )
                for _ in range(2)
            ]
            await engine.exec_start(first, OWNER)
            await engine.exec_start(second, OWNER)
            states = [(await engine.sandbox_status(s, OWNER)).state for s in (first, second)]
            while SandboxState.RUNNING in states or SandboxState.READY in states:
                await asyncio.sleep(0.01)
                states = [(await engine.sandbox_status(s, OWNER)).state for s in (first, second)]
            outcomes = set(states)
            assert outcomes == {SandboxState.BLOCKED, SandboxState.HOST_MEMORY_EXCEEDED}
            assert engine.state.host_bytes_of(OWNER) <= 3 << 19

    run(body)


def test_what_others_send_is_refused_not_charged_to_the_recipient() -> None:
    """An agent delivering, or a sandbox sending, past a recipient's budget is refused; the
    recipient is not stopped for what it did not ask for."""

    async def body() -> None:
        limits = EngineLimits(max_host_bytes_per_sandbox=64 * 1024)
        async with open_engine(limits=limits) as engine:
            waiting = """
                LI r2, 8
                RECV 2, r3, r253, r2
                RECV 2, r3, r253, r2
                HALT
            """
            sandbox = await create(engine, waiting)
            await engine.exec_start(sandbox, OWNER)
            await engine.deliver(sandbox, 2, bytes(30_000), OWNER)
            with pytest.raises(OverLimit) as refused:
                for _ in range(3):
                    await engine.deliver(sandbox, 2, bytes(30_000), OWNER)
            assert refused.value.limit == "max_host_bytes_per_sandbox"
            assert (await engine.sandbox_status(sandbox, OWNER)).state.is_live

    run(body)


def test_a_peer_flooding_a_sandbox_is_refused_with_insufficient() -> None:
    async def body() -> None:
        limits = EngineLimits(max_host_bytes_per_sandbox=64 * 1024)
        async with open_engine(limits=limits) as engine:
            listener = await create(
                engine,
                "LI r2, 8\n RECV 2, r3, r253, r2\n RECV 2, r3, r253, r2\n HALT",
                grants=frozenset({7}),
                accept_from=frozenset({OTHER}),
            )
            await engine.exec_start(listener, OWNER)
            statuses = []
            for _ in range(4):
                try:
                    engine.send_to_peer(Hash256(bytes(32)), OTHER, listener, bytes(30_000))
                    statuses.append(Status.OK)
                except Exception as error:
                    statuses.append(getattr(error, "status", None))
            assert statuses[0] == Status.OK and Status.INSUFFICIENT in statuses
            assert (await engine.sandbox_status(listener, OWNER)).state.is_live

    run(body)


def test_a_long_lived_service_keeps_within_its_budget_call_after_call() -> None:
    """A service's logs start afresh with each call, so it answers any number of calls."""

    echo = """
    again:  LI   r2, 65536
            RECV 3, r3, r253, r2
            SEND 3, r253, r3
            JMP  again
    """

    async def body() -> None:
        limits = EngineLimits(max_host_bytes_per_sandbox=512 * 1024)
        async with open_engine(limits=limits) as engine:
            sandbox = await create(
                engine, echo, persistent=True, grants=frozenset({3}), memory_quota=QUOTA
            )
            service = await engine.create_service(
                Service(OWNER, sandbox, b"echo", 10**9, endpoints=(Endpoint(b"e", 3),))
            )
            payload = bytes(60_000)
            for _ in range(40):  # 2.4 MB through a service whose budget is 512 KiB
                result = await engine.call_service(service, b"e", payload, OTHER)
                assert result.data == payload
            assert engine.state.sandbox(sandbox).host_bytes < 512 * 1024

    run(body)


def test_a_durable_engine_reads_archived_runs_after_a_restart(tmp_path: Path) -> None:
    async def first() -> Hash256:
        async with Engine(data_dir=tmp_path, durable=True, standalone=True) as engine:
            object_id = engine.vault.put(OBJECT)
            code = await put(engine, GETS)
            sandbox = await engine.create_sandbox(
                CreateSandbox(
                    OWNER, code, QUOTA, 10**6, input=gets(object_id, 5), grants=frozenset({3})
                )
            )
            await engine.exec_start(sandbox, OWNER)
            await engine.wait(sandbox, timeout=30)
            await engine.snapshot()
            return sandbox

    async def second(sandbox: Hash256) -> None:
        async with Engine(data_dir=tmp_path, durable=True, standalone=True) as engine:
            assert engine.state.sandbox(sandbox).run_digest is not None
            assert len((await engine.run_record(sandbox, OWNER)).deliveries) == 5
            assert len(await engine.io_log(sandbox, OWNER)) == 5

    sandbox = run(first)
    run(lambda: second(sandbox))
    archive = SqliteArchive(tmp_path / "runs.sqlite3")
    archive.collect([])  # the run is lost from the disk: only its readers are refused
    archive.close()

    async def third() -> None:
        async with Engine(data_dir=tmp_path, durable=True, standalone=True) as engine:
            with pytest.raises(StateCorrupted, match="missing"):
                await engine.io_log(sandbox, OWNER)
            assert (await engine.sandbox_status(sandbox, OWNER)).state is SandboxState.HALTED

    run(third)


# ----------------------------------------------------------------- what else the host keeps


def test_a_mailbox_is_bounded_per_recipient_and_in_all() -> None:
    def envelope(size: int) -> Envelope:
        return Envelope(Hash256(bytes(32)), OWNER, 0x05F0, bytes(size), 0)

    box = Mailbox(maxsize=100, max_bytes=1000, max_recipients=3)
    for _ in range(5):
        box.post(OWNER, envelope(300))
    assert len(box.drain(OWNER)) == 3 and box.dropped(OWNER) == 2
    box.post(OTHER, envelope(2000))  # larger than a whole box: dropped, counted
    assert box.get_nowait(OTHER) is None and box.dropped(OTHER) == 1
    for index in range(10):
        box.post(AgentId(bytes([index + 10]) * 32), envelope(10))
    assert len(box) == 3
    taken = Mailbox()
    taken.post(OWNER, envelope(10))
    assert taken.get_nowait(OWNER) is not None and len(taken) == 0  # emptied: let go
    shared = Mailbox(max_bytes=1000, max_total_bytes=2500)  # many recipients, one bound
    recipients = [AgentId(bytes([index + 10]) * 32) for index in range(4)]
    for recipient in recipients:
        shared.post(recipient, envelope(900))
    assert shared.size == 1800
    assert [shared.dropped(recipient) for recipient in recipients] == [1, 1, 0, 0]
    assert [shared.get_nowait(recipient) is not None for recipient in recipients] == [
        False,
        False,
        True,
        True,
    ]
    assert shared.size == 0


def test_the_agora_board_is_bounded_per_publisher_and_in_all() -> None:
    board = AgoraBoard(max_topics=2, max_bytes=10_000, max_bytes_per_publisher=4_000)
    board.publish(b"t", OWNER, bytes(3_000))
    with pytest.raises(OverflowError, match="published"):
        board.publish(b"t", OWNER, bytes(1_000))
    board.publish(b"u", OTHER, bytes(3_000))
    with pytest.raises(OverflowError, match="topics"):
        board.publish(b"v", OTHER, b"x")
    assert board.size <= 10_000


def test_debug_sessions_draw_on_a_bounded_pool() -> None:
    """The attack: 10 debug sessions of 64 MiB each added 640 MiB in 1.4 s."""
    with running_server() as live:
        agent = Agent(live.base_url)
        body = {"assembly": "HALT", "memory_quota": 64 << 20}
        assert agent.request("POST", "/v1/debug", body).status_code == 201
        refused = agent.request("POST", "/v1/debug", body)
        assert refused.status_code == 429 and "max_memory_per_agent" in refused.text
        others = [Agent(live.base_url) for _ in range(4)]
        statuses = [other.request("POST", "/v1/debug", body).status_code for other in others]
        assert statuses == [201, 201, 201, 429]  # 256 MiB in all
        session = agent.ok("GET", "/v1/debug")["sessions"][0]["session_id"]
        deliver = {"channel": 2, "data_hex": "00" * 60_000}
        statuses = [
            agent.request("POST", f"/v1/debug/{session}/deliver", deliver).status_code
            for _ in range(80)
        ]
        assert 201 not in statuses and statuses[0] == 200 and statuses[-1] == 429
        for client in (agent, *others):
            client.close()


def test_a_debug_view_shows_the_end_of_a_large_output() -> None:
    program = """
            LI   r2, 60000
    again:  SEND 0, r253, r2
            JMP  again
    """
    with running_server() as live:
        agent = Agent(live.base_url)
        created = agent.ok("POST", "/v1/debug", {"assembly": program, "memory_quota": 4 << 20}, 201)
        view = agent.ok("POST", f"/v1/debug/{created['session_id']}/run", {"max_ticks": 400})
        assert view["stdout_length"] > 1_000_000
        assert len(view["stdout_hex"]) // 2 == live.state.debug.limits.view_stream_bytes
        agent.close()


def test_kforge_run_json_writes_a_large_output_without_copying_it() -> None:
    """The attack: a 512 MiB stdout peaked at 3.6 GB with ``--json``; the report is now
    written 64 KiB at a time."""
    program = assemble(sends(512, 65536))
    machine = Machine.load(program, memory_quota=40 << 20, tick_budget=10**6)
    machine.run()
    assert len(machine.stdout) == 32 << 20

    class Counter(io.TextIOBase):
        written = 0

        def write(self, text: str) -> int:
            self.written += len(text)
            return len(text)

    sink = Counter()
    tracemalloc.start()
    try:
        write_result_json(machine, sink)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.written > 2 * (32 << 20)  # the hex and the text of the whole output
    assert peak < 4 << 20


def test_a_program_counts_once_for_its_owner_and_the_cache_is_bounded_in_bytes() -> None:
    """Decoded programs are host memory too: each distinct program an agent's live sandboxes
    run counts once against its share, and the program cache holds at most its bytes."""
    big = "".join(f"LI r1, {index}\n" for index in range(20_000)) + "HALT\n"

    async def body() -> None:
        limits = EngineLimits(max_host_bytes_per_owner=3 << 20)
        async with open_engine(limits=limits) as engine:
            first = await create(engine, big)
            held = engine.state.host_bytes_of(OWNER)
            assert held > 20_000 * DECODED_INSTRUCTION_BYTES
            await create(engine, big)  # the same program: nothing more
            assert engine.state.host_bytes_of(OWNER) - held < 1024
            with pytest.raises(OverLimit) as refused:
                await create(engine, big.replace("HALT", "NOP\nHALT"))
            assert refused.value.limit == "max_host_bytes_per_owner"
            await engine.kill_sandbox(first, OWNER)
            assert engine.state.holds_program(OWNER, engine.state.sandbox(first).program)

    run(body)
    vault = Vault(":memory:")
    cache = ProgramCache(vault, capacity=100, max_bytes=3 * 20_001 * DECODED_INSTRUCTION_BYTES)
    ids = [vault.put_program(assemble(big.replace("HALT", "NOP\n" * n + "HALT"))) for n in range(5)]
    for program_id in ids:
        cache.load(program_id)
    assert len(cache) <= 3 and cache.size <= cache.max_bytes
    vault.close()


def test_wait_answers_with_the_outputs_first_chunk_and_the_client_reads_the_rest() -> None:
    """A result's output may be as large as the memory quota: ``/wait`` carries its first
    256 KiB and its length, never the whole of it at once; the client reads on."""
    program = sends(16, 65000)
    with running_server() as live:
        agent = Agent(live.base_url)
        sandbox = agent.create(program, memory_quota=4 << 20)
        waited = agent.run_to_end(sandbox)
        assert waited["output_length"] == 16 * 65000
        assert len(waited["output_hex"]) // 2 == OUTPUT_CHUNK

        async def read() -> bytes:
            async with Client(live.base_url, agent.key) as client:
                result = await client.wait(Hash256.from_hex(sandbox), timeout=5)
                return result.output

        assert asyncio.run(read()) == bytes(16 * 65000)
        agent.close()


def test_one_agent_has_a_bounded_number_of_requests_in_flight() -> None:
    config = ServerConfig(max_requests_in_flight_per_agent=2)
    with running_server(config) as live:
        agent, other = Agent(live.base_url), Agent(live.base_url)
        sandbox = agent.create("LI r2, 8\n RECV 2, r3, r253, r2\n RECV 2, r3, r253, r2\n HALT")
        agent.ok("POST", f"/v1/sandboxes/{sandbox}/start", {}, 202)
        polls = [
            threading.Thread(
                target=lambda: agent.request("GET", f"/v1/sandboxes/{sandbox}/wait?timeout=3")
            )
            for _ in range(2)
        ]
        for poll in polls:
            poll.start()
        time.sleep(0.5)
        assert agent.request("GET", "/v1/whoami").status_code == 429
        assert other.request("GET", "/v1/whoami").status_code == 200
        for poll in polls:
            poll.join(10)
        assert agent.request("GET", "/v1/whoami").status_code == 200
        agent.close()
        other.close()


def test_a_caller_with_a_token_is_refused_before_its_body_is_read() -> None:
    """A hostile agent's 1 MB uploads, refused for its rate, each cost the server the read
    and the decoding of a megabyte first."""
    config = ServerConfig(auth=AuthConfig(rate_per_second=1, rate_burst=1))
    with running_server(config) as live:
        agent = Agent(live.base_url)
        token = agent.ok("POST", "/v1/session", None, 201)["token"]
        port = int(live.base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(
                b"POST /v1/programs HTTP/1.1\r\nhost: kforge\r\ncontent-type: application/json\r\n"
                + f"authorization: Bearer {token}\r\ncontent-length: 1000000\r\n\r\n".encode()
            )  # and never the body: the answer comes without it
            answer = connection.recv(4096)
        assert answer.startswith(b"HTTP/1.1 429")
        assert b"\r\nconnection: close\r\n" in answer.lower()  # no more bodies to throw away
        agent.close()


def test_an_agents_request_bodies_are_rated_in_bytes() -> None:
    """Fifty megabyte uploads a second were within the request rate, and each cost the
    server a megabyte to read and decode."""
    auth = AuthConfig(body_bytes_per_second=1000, body_bytes_burst=300_000)
    with running_server(ServerConfig(auth=auth)) as live:
        agent, other = Agent(live.base_url), Agent(live.base_url)
        source = "HALT\n" + "; a comment of some length\n" * 4000  # about 100 KB
        statuses = [
            agent.request("POST", "/v1/programs", {"assembly": source}).status_code
            for _ in range(4)
        ]
        assert statuses == [201, 201, 429, 429]
        refused = agent.request("POST", "/v1/programs", {"assembly": source})
        assert "body bytes/s" in refused.json()["error"]["message"]
        assert other.request("POST", "/v1/programs", {"assembly": source}).status_code == 201
        assert agent.request("GET", "/v1/whoami").status_code == 200  # no body: not refused
        for client in (agent, other):
            client.close()
