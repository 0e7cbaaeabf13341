"""The cluster's parts against a real nats-server: placement, the journal's fence, the shared
accounts' revision checks, the object store's content check, events by subject and
sequence, draining, and what a worker says while NATS is away."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster_support import SPIN, LocalCluster, agent_keys
from kforge.accounting import OPEN_ACCOUNTS
from kforge.asm import assemble
from kforge.cli import main
from kforge.cluster import names
from kforge.cluster.accounts import AccountsBucket
from kforge.cluster.connection import Layout, NatsUnreachable, connect, open_layout
from kforge.cluster.gateway import ClusterEngine
from kforge.cluster.journal_store import JetStreamJournalStore, PartitionLost
from kforge.cluster.leases import assignment
from kforge.cluster.local import NatsServer, free_port, kforge_command
from kforge.cluster.placement import PartitionLoads, place
from kforge.cluster.programs import fetch_object
from kforge.cluster.worker import Worker, WorkerConfig
from kforge.core import EventKind, Hash256, PermissionDenied, VaultFetchFailed
from kforge.engine import CreateSandbox
from kforge.engine.jobs import ASSEMBLY, FRGP, STARLARK
from kforge.engine.journal import Row
from kforge.engine.offload import JobFailed
from kforge.engine.policy import Action
from kforge.server.endpoint import _REQUEST_ID
from kforge.starlark import compile_starlark


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


@asynccontextmanager
async def layout_of(server: NatsServer, partitions: int = 4) -> AsyncIterator[Layout]:
    nc = await connect(server.url, name="test", who="test", give_up_after=10)
    try:
        yield await open_layout(nc, partitions)
    finally:
        await nc.close()


# ----------------------------------------------------------------------------- placement


def test_placement_is_balanced_and_moves_few_partitions_when_a_worker_joins() -> None:
    two = assignment(16, ["a", "b"])
    assert sorted(list(two.values()).count(w) for w in "ab") == [8, 8]
    three = assignment(16, ["a", "b", "c"])
    assert sorted(list(three.values()).count(w) for w in "abc") == [5, 5, 6]
    moved = sum(two[p] != three[p] for p in range(16))
    assert moved <= 7, "a third worker takes its share, and little else moves"
    assert assignment(16, ["b", "a"]) == two, "everyone computes the same placement"
    assert set(assignment(16, ["a"]).values()) == {"a"}
    assert assignment(16, []) == {}


def test_a_creation_goes_to_the_lightest_partition_and_stays_where_it_went(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        with NatsServer(tmp_path) as server:
            async with layout_of(server, partitions=4) as layout:
                request_id = Hash256(bytes(range(32)))
                loads = PartitionLoads()
                loads.seed([(0, 5), (1, 2), (2, 3), (3, 2)])
                start = names.partition_of(request_id, 4)
                lightest = next(p for p in ((start + s) % 4 for s in range(4)) if p in (1, 3))
                assert await place(layout, loads, request_id) == lightest, "ties: from its hash"
                assert loads.load(lightest) == 3, "counted at once, before its event comes"
                loads.heard(lightest, EventKind.SANDBOX_CREATED)
                assert loads.load(lightest) == 3, "and not twice once it comes"
                elsewhere = PartitionLoads()  # another gateway, which sees other loads
                elsewhere.seed([(lightest, 9)])
                assert await place(layout, elsewhere, request_id) == lightest
                spread = PartitionLoads()
                for n in range(40):
                    await place(layout, spread, Hash256(bytes([n]) * 32))
                assert sorted(spread.load(p) for p in range(4)) == [10, 10, 10, 10]

    run(body)


# ----------------------------------------------------------------------------- the journal


def _row(seq: int) -> Row:
    return Row(seq, 1_700_000_000_000 + seq, b"body %d" % seq, bytes(32))


def test_a_worker_that_lost_its_partition_cannot_write_its_journal(tmp_path: Path) -> None:
    async def body() -> None:
        with NatsServer(tmp_path) as server:
            async with layout_of(server) as layout:
                old = await JetStreamJournalStore.load(layout, 0, write_timeout=2)
                old.start()
                old.append_rows([_row(1)])
                await old.settled(old.finish(old.begin(), None, b""))
                new = await JetStreamJournalStore.load(layout, 0, write_timeout=2)
                assert [row.seq for row in new.rows()] == [1]
                new.start()
                new.append_rows([_row(2)])
                await new.settled(new.finish(new.begin(), None, b""))
                old.append_rows([_row(2)])
                with pytest.raises(PartitionLost, match="another worker wrote its journal"):
                    await old.settled(old.finish(old.begin(), None, b""))
                assert old.lost is not None
                again = await JetStreamJournalStore.load(layout, 0)
                assert [row.body for row in again.rows()] == [b"body 1", b"body 2"]
                await new.drain()

    run(body)


def test_a_request_answered_once_is_answered_again_from_the_journal(tmp_path: Path) -> None:
    async def body() -> None:
        with NatsServer(tmp_path) as server:
            async with layout_of(server) as layout:
                store = await JetStreamJournalStore.load(layout, 1)
                store.start()
                pending = store.begin()
                store.append_rows([_row(1)])
                request = Hash256(bytes(range(32)))
                await store.settled(store.finish(pending, request, b"the reply"))
                await store.drain()
                assert (await JetStreamJournalStore.load(layout, 1)).replies == {
                    request: b"the reply"
                }

    run(body)


# ----------------------------------------------------------------------------- accounts


def test_two_partitions_charging_one_agent_at_once_lose_no_update(tmp_path: Path) -> None:
    agent = agent_keys(1)[0].agent_id

    async def body() -> None:
        with NatsServer(tmp_path) as server:
            async with layout_of(server) as layout:
                bucket = AccountsBucket(layout.accounts, OPEN_ACCOUNTS)

                async def charge(partition: int) -> None:
                    for row in range(1, 31):
                        await bucket.add(partition, row, agent, (0, 3, 0, -1))

                await asyncio.gather(charge(0), charge(1), charge(2))
                stored, _ = await bucket.read(agent)
                assert stored.spent == 3 * 30 * 3
                assert stored.spark == OPEN_ACCOUNTS.spark - 3 * 30
                await bucket.add(1, 30, agent, (0, 1000, 0, 0))  # a batch added before
                await bucket.catch_up(2, [(29, ()), (30, ())])
                assert (await bucket.read(agent))[0].spent == 3 * 30 * 3

    run(body)


# ----------------------------------------------------------------------------- programs


def test_an_object_that_does_not_hash_to_its_name_is_refused(tmp_path: Path) -> None:
    async def body() -> None:
        with NatsServer(tmp_path) as server:
            async with layout_of(server) as layout:
                program = assemble(SPIN)
                await layout.programs.put(program.program_id.hex, program.encoded + b"x")
                with pytest.raises(VaultFetchFailed, match="tampered"):
                    await fetch_object(layout.programs, program.program_id)
                with pytest.raises(VaultFetchFailed, match="no such object"):
                    await fetch_object(layout.programs, Hash256(bytes(32)))

    run(body)


# ----------------------------------------------------------------------------- in one process


@asynccontextmanager
async def cluster_in_process(folder: Path) -> AsyncIterator[tuple[Worker, ClusterEngine]]:
    with NatsServer(folder) as server:
        stop = asyncio.Event()
        worker = Worker(WorkerConfig(url=server.url, lease_seconds=2.0, partitions=4))
        running = asyncio.create_task(worker.run(stop))
        async with ClusterEngine(server.url) as engine:
            deadline = time.monotonic() + 30
            while len(worker.partitions) < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            yield worker, engine
        stop.set()
        await running


def test_events_are_chosen_by_subject_and_replayed_from_a_sequence(tmp_path: Path) -> None:
    first, second = (key.agent_id for key in agent_keys(2))

    async def body() -> None:
        async with cluster_in_process(tmp_path) as (_, engine):
            code, _ = await engine.build_program(FRGP, assemble(SPIN).encoded, "spin", first)
            halted = engine.bus.subscribe([EventKind.SANDBOX_HALTED], owner=first)
            everything = engine.bus.subscribe()
            await engine.bus.ready()
            ids = []
            for owner in (first, second, first):
                request = CreateSandbox(owner, code, 65536, 10**6, input=(50).to_bytes(8, "little"))
                sandbox = await engine.create_sandbox(request)
                await engine.exec_start(sandbox, owner)
                await engine.wait(sandbox, owner, timeout=10)
                ids.append(sandbox)
            await asyncio.sleep(0.3)
            mine = halted.events()
            assert [event.sandbox_id for event in mine] == [ids[0], ids[2]]
            assert all(event.kind == EventKind.SANDBOX_HALTED for event in mine)
            seen = everything.events()
            assert len(seen) == 9 and [e.seq for e in seen] == sorted(e.seq for e in seen)
            replay = engine.bus.subscribe(sandbox_id=ids[1], since=seen[4].seq)
            await engine.bus.ready()
            await asyncio.sleep(0.3)
            assert [e.kind for e in replay.events()] == [
                EventKind.SANDBOX_STARTED,
                EventKind.SANDBOX_HALTED,
            ]

    run(body)


def test_the_gateway_and_the_workers_decide_who_may_do_what_by_the_engines_table(
    tmp_path: Path,
) -> None:
    owner, other, operator = (key.agent_id for key in agent_keys(3))

    async def body() -> None:
        async with cluster_in_process(tmp_path) as (worker, engine):
            code, built = await engine.build_program(ASSEMBLY, "LI r1, 7\nHALT\n", "up", owner)
            assert built.code_length == 2
            assert (await engine.program_text(code, other)).code[0].startswith("LI")
            sandbox = await engine.create_sandbox(CreateSandbox(owner, code, 65536, 10**6))
            with pytest.raises(PermissionDenied, match="may not create"):
                await engine.create_sandbox(CreateSandbox(owner, code, 65536, 10**6), other)
            with pytest.raises(PermissionDenied):  # decided by the worker's policy
                await engine.sandbox_status(sandbox, other)
            with pytest.raises(PermissionDenied):
                await engine.authorize_sandbox(Action.WATCH_EVENTS, sandbox, other)
            await engine.authorize_sandbox(Action.WATCH_EVENTS, sandbox, owner)
            with pytest.raises(PermissionDenied):  # decided by the gateway's rules
                await engine.visible_sandboxes(other, every=True)
            assert await engine.visible_sandboxes(other) == []
            # A gateway's operator is every worker's and every other gateway's operator.
            assert not engine.policy.is_operator(operator)
            second = ClusterEngine(engine.url)
            second.policy.add_operator(operator)
            async with second:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not (
                    operator in worker.operators and engine.policy.is_operator(operator)
                ):
                    await asyncio.sleep(0.05)
                assert (await engine.sandbox_status(sandbox, operator)).id == sandbox
                listed = await engine.visible_sandboxes(operator, every=True)
                assert [info.id for info in listed] == [sandbox]

    run(body)


def test_a_request_id_another_agent_used_is_not_that_agents_reply(tmp_path: Path) -> None:
    """A request id is the client's choice: naming another agent's is a new request,
    decided by the policy, never the stored reply of the first."""
    owner, other = (key.agent_id for key in agent_keys(2))
    shared = Hash256(bytes(range(32)))

    async def body() -> None:
        async with cluster_in_process(tmp_path) as (_, engine):
            code, _ = await engine.build_program(ASSEMBLY, "LI r1, 7\nHALT\n", "up", owner)
            sandbox = await engine.create_sandbox(CreateSandbox(owner, code, 65536, 10**6))
            token = _REQUEST_ID.set(shared)
            try:
                await engine.exec_start(sandbox, owner)
                await engine.exec_start(sandbox, owner)  # sent again: the same reply
                with pytest.raises(PermissionDenied):
                    await engine.exec_start(sandbox, other)
            finally:
                _REQUEST_ID.reset(token)

    run(body)


# ----------------------------------------------------------------------------- processes


def _lines_until(process: subprocess.Popen[str], text: str, timeout: float = 20) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        seen += line
        if text in line or not line:
            return seen
    return seen


@pytest.mark.parametrize("command", [["worker"], ["serve", "--port", "0"]])
def test_a_role_started_before_nats_says_so_and_stops_on_a_signal(command: list[str]) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with subprocess.Popen(
        kforge_command(*command, "--nats", url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        try:
            said = _lines_until(process, "retrying")
            assert f"NATS at {url} is not reachable" in said
            assert "retrying until it answers" in said
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=20)
        finally:
            process.kill()
    assert process.returncode == 0
    assert "Traceback" not in said + rest


@pytest.mark.parametrize(
    ("command", "url", "says"),
    [
        (["worker"], "http://localhost:4222", "is no NATS URL"),
        (["serve"], "nats://", "names no host"),
        (["cluster", "status"], "nats://localhost:99999", "Port out of range"),
    ],
)
def test_a_bad_nats_url_is_one_line_and_status_2(
    command: list[str], url: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--nats", url]) == 2
    error = capsys.readouterr().err
    assert says in error and "Traceback" not in error and len(error.splitlines()) == 1


def test_nats_that_never_comes_is_a_clear_error() -> None:
    async def body() -> None:
        url = f"nats://127.0.0.1:{free_port()}"
        with pytest.raises(NatsUnreachable, match="is not reachable"):
            await connect(url, name="test", who="test", give_up_after=0.5, out=_Sink())

    run(body)


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_a_worker_drains_on_sigterm_and_another_takes_its_partitions_at_once(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path, partitions=4, lease=60.0) as cluster:
        cluster.start_worker("worker-1")
        cluster.start_worker("worker-2")
        held = cluster.wait_balanced(2)
        assert sorted(p for parts in held.values() for p in parts) == [0, 1, 2, 3]
        started = time.monotonic()
        cluster.workers["worker-1"].send_signal(signal.SIGTERM)
        assert cluster.workers["worker-1"].wait(30) == 0
        cluster.wait_balanced(1, timeout=20)
        assert time.monotonic() - started < 20, "the partitions did not wait for the lease"
        assert "drained" in cluster.log("worker-1")
        shown = _status_once_served(cluster.url, workers=1)
        assert [w["worker"] for w in shown["workers"]] == ["worker-2"]
        assert shown["workers"][0]["partitions"] == [0, 1, 2, 3]
        assert shown["unserved"] == []


def test_cluster_up_starts_nats_workers_and_a_gateway_and_stops_them_on_sigterm(
    tmp_path: Path,
) -> None:
    command = ("cluster", "up", "--data-dir", str(tmp_path), "--nats-port", "0", "--port", "0")
    with subprocess.Popen(
        kforge_command(*command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            said = _lines_until(process, "listening on", timeout=60)
            url = said.split("nats-server with JetStream on ")[1].split()[0]
            base = said.split("listening on ")[1].split()[0]
            assert httpx.get(f"{base}/v1/health", timeout=5).status_code == 200
            assert (tmp_path / "nats" / "jetstream").is_dir(), "the store is in the data folder"
            shown = _status_once_served(url, workers=2)
            assert [w["worker"] for w in shown["workers"]] == ["worker-1", "worker-2"]
            served = sorted(p for w in shown["workers"] for p in w["partitions"])
            assert served == list(range(16))
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:  # failed before: stop it as an operator would
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
    assert process.returncode == 0
    assert rest.count("drained") == 2, rest
    assert "Traceback" not in said + rest


def _status_once_served(url: str, workers: int, timeout: float = 30) -> dict[str, Any]:
    """``kforge cluster status --json`` once ``workers`` serve every partition."""
    deadline = time.monotonic() + timeout
    while True:
        status = subprocess.run(
            kforge_command("cluster", "status", "--nats", url, "--json"),
            capture_output=True,
            text=True,
            check=True,
        )
        shown: dict[str, Any] = json.loads(status.stdout)
        if not shown["unserved"] and len(shown["workers"]) == workers:
            return shown
        if time.monotonic() > deadline:
            return shown
        time.sleep(0.2)


def test_the_gateway_compiles_starlark_uploads(tmp_path: Path) -> None:
    owner = agent_keys(1)[0].agent_id
    source = 'print("from the cluster")\n'

    async def body() -> None:
        async with cluster_in_process(tmp_path) as (_, engine):
            code, _ = await engine.build_program(STARLARK, source, "up.star", owner, 1 << 20)
            assert code == compile_starlark(source, "up.star", memory_quota=1 << 20).program_id
            library = f'load("sha256:{"ab" * 32}", "x")\n'
            with pytest.raises(JobFailed, match=r"up\.star:1:1: cannot load sha256:") as raised:
                await engine.build_program(STARLARK, library, "up.star", owner)
            assert raised.value.http_status == 400

    run(body)


def test_a_gateway_remembers_a_bounded_number_of_locations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sandboxes named through a gateway are remembered up to a bound, least recent first out."""
    import kforge.cluster.gateway as gateway

    monkeypatch.setattr(gateway, "DIRECTORY_CACHE_ENTRIES", 3)
    engine = ClusterEngine("nats://127.0.0.1:1")
    for n in range(3):
        engine._remember(f"sandbox.{n}", n)
    engine._remember("sandbox.0", 0)  # named again: now the most recent
    engine._remember("sandbox.9", 9)
    assert list(engine._directory) == ["sandbox.2", "sandbox.0", "sandbox.9"]


def test_a_partition_remembers_replies_within_a_bound_of_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stored replies are forgotten oldest first once their bytes pass the bound."""
    import kforge.cluster.partition as partition_module
    from kforge.core import Hash256

    monkeypatch.setattr(partition_module, "_REMEMBERED_REPLY_BYTES", 1000)
    partition = object.__new__(partition_module.Partition)
    partition._replies = partition_module.OrderedDict()
    partition._reply_bytes = 0
    ids = [Hash256.of(bytes([n])) for n in range(4)]
    for request in ids:
        partition._remember(request, bytes(400))
    assert list(partition._replies) == ids[2:]
    assert partition._reply_bytes == 800
    partition._remember(ids[3], bytes(10))  # the same request again: counted once
    assert partition._reply_bytes == 410
    partition._remember(ids[0], bytes(5000))  # larger than the bound: kept alone
    assert list(partition._replies) == [ids[0]]
