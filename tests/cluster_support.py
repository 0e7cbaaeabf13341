"""A real cluster for tests: nats-server on a loopback port in a temporary folder,
``kforge worker`` and ``kforge serve --nats`` processes, and the same workload run on
the embedded engine to compare with.

A workload is a list of :class:`Planned` sandboxes from several agents: programs
that compute for a while and halt, fault, wait for a delivery, or ask the oracle.
:func:`run_embedded` runs it on an in-process :class:`~kforge.engine.Engine`;
:func:`run_on_cluster` through a gateway with the HTTP client.  Both give, per
sandbox, its result and its events with ids replaced by names (the sandbox's
index, the agent's, the program's), so the two can be compared as values.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgpack
import nats
from nats.js import api

from kforge.asm import assemble
from kforge.client import Client
from kforge.cluster import local, names
from kforge.cluster.accounts import StoredAccount
from kforge.core import AgentId, Hash256
from kforge.engine import CreateSandbox, Engine, SandboxState
from kforge.events import Event
from kforge.server import AgentKey
from kforge.server.endpoint import REQUEST_ID_HEADER
from kforge.server.schemas import SandboxCreated
from kforge.storage import Vault
from kforge.wire import decode_msgpack, encode_msgpack

SPIN = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        LOADW r1, r253, 0
        LI   r4, 1
        LI   r5, 7
loop:   ADD  r5, r5, r1
        XOR  r5, r5, r4
        SUB  r1, r1, r4
        JNZ  r1, loop
        STOREW r5, r253, 8
        LI   r6, 8
        ADD  r7, r253, r6
        SEND 0, r7, r6
        HALT
"""
FAULTY = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        LOADW r1, r253, 0
        LI   r4, 1
loop:   SUB  r1, r1, r4
        JNZ  r1, loop
        DIV  r5, r4, r1
        HALT
"""
# The creation's input first, then a delivery it waits for.
WAITER = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        RECV 2, r3, r253, r2
        LOADW r1, r253, 0
        LI   r4, 1
loop:   SUB  r1, r1, r4
        JNZ  r1, loop
        SEND 0, r253, r3
        HALT
"""
# Asks the oracle (channel 4) for "k", writes its reply, then computes.
ORACLE = """
        LI   r2, 64
        RECV 2, r3, r253, r2
        LI   r6, 1
        STORE r6, r253, 16
        LI   r6, 107
        STORE r6, r253, 17
        LI   r7, 16
        ADD  r7, r253, r7
        LI   r8, 2
        SEND 4, r7, r8
        LI   r9, 32
        ADD  r9, r253, r9
        RECV 4, r10, r9, r2
        SEND 0, r9, r10
        LOADW r1, r253, 0
        LI   r4, 1
loop:   SUB  r1, r1, r4
        JNZ  r1, loop
        HALT
"""
PROGRAMS = {"spin": SPIN, "faulty": FAULTY, "waiter": WAITER, "oracle": ORACLE}
PROGRAM_IDS = {name: assemble(text).program_id for name, text in PROGRAMS.items()}
#: Long enough that a worker killed or a server restarted finds work under way.
DEADLINE_MS = 600_000


def agent_keys(count: int) -> list[AgentKey]:
    return [AgentKey.from_seed(bytes([index + 1]) * 32) for index in range(count)]


@dataclass(frozen=True)
class Planned:
    """One sandbox of a workload: whose, which program, its input, what it is given later."""

    index: int
    agent: int
    program: str
    count: int
    delivery: int | None = None

    def request(self, owner: AgentId, code: Hash256) -> CreateSandbox:
        first = b"go" if self.delivery is not None else self.count.to_bytes(8, "little")
        return CreateSandbox(
            owner,
            code,
            memory_quota=65536,
            tick_budget=10**10,
            input=first,
            grants=frozenset({4}) if self.program == "oracle" else frozenset(),
            deadline_ms=DEADLINE_MS,
        )


def workload(sandboxes: int, agents: int, *, scale: int = 1) -> list[Planned]:
    """``sandboxes`` from ``agents``: mostly computing, some faulting, waiting, asking."""
    kinds = ["spin", "spin", "spin", "faulty", "oracle", "waiter"]
    plan = []
    for index in range(sandboxes):
        program = kinds[index % len(kinds)]
        count = (20_000 + (index * 7919) % 400_000) * scale
        delivery = count if program == "waiter" else None
        plan.append(Planned(index, index % agents, program, count, delivery))
    return plan


@dataclass
class Outcome:
    """What one sandbox did: its result and its events, with ids as names."""

    result: tuple[Any, ...]
    events: list[tuple[Any, ...]] = field(default_factory=list)


def _name(value: Any, names_of: dict[bytes, str]) -> Any:
    if isinstance(value, Hash256):
        value = value.raw
    if isinstance(value, bytes) and len(value) == 32 and value in names_of:
        return names_of[value]
    if isinstance(value, dict):
        return {key: _name(item, names_of) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_name(item, names_of) for item in value]
    return value


def named_event(event: Event, names_of: dict[bytes, str]) -> tuple[Any, ...]:
    return (int(event.kind), _name(dict(event.payload), names_of))


def _id_names(ids: dict[int, Hash256], keys: list[AgentKey]) -> dict[bytes, str]:
    found = {sandbox.raw: f"sandbox-{index}" for index, sandbox in ids.items()}
    found.update({key.agent_id.raw: f"agent-{number}" for number, key in enumerate(keys)})
    found.update({program.raw: f"program-{name}" for name, program in PROGRAM_IDS.items()})
    return found


async def _until_blocked(status: Callable[[], Awaitable[SandboxState]]) -> None:
    for _ in range(2000):
        if await status() is SandboxState.BLOCKED:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the sandbox never blocked waiting for its delivery")


def result_of(result: Any) -> tuple[Any, ...]:
    return (result.state.value, result.output, result.ticks_used, result.fault, result.fault_detail)


async def run_embedded(plan: list[Planned], keys: list[AgentKey]) -> dict[int, Outcome]:
    """The workload on one in-process engine (accounting on, as a cluster's)."""
    outcomes: dict[int, Outcome] = {}
    async with Engine(Vault(":memory:")) as engine:
        codes = {name: engine.vault.put_program(assemble(text)) for name, text in PROGRAMS.items()}
        events = engine.bus.subscribe(maxsize=1_000_000)
        ids: dict[int, Hash256] = {}

        async def one(item: Planned) -> None:
            owner = keys[item.agent].agent_id
            sandbox = await engine.create_sandbox(item.request(owner, codes[item.program]))
            ids[item.index] = sandbox
            await engine.exec_start(sandbox, owner)
            if item.delivery is not None:
                await _until_blocked(lambda: _state(engine.sandbox_status(sandbox, owner)))
                await engine.deliver(sandbox, 2, item.delivery.to_bytes(8, "little"), owner)
            outcomes[item.index] = Outcome(result_of(await engine.wait(sandbox, owner)))

        await asyncio.gather(*(one(item) for item in plan))
        names_of = _id_names(ids, keys)
        by_sandbox = {sandbox: index for index, sandbox in ids.items()}
        for event in events.events():
            if event.sandbox_id in by_sandbox:
                outcomes[by_sandbox[event.sandbox_id]].events.append(named_event(event, names_of))
        accounts = {
            number: _account_values(engine.ledger.account(key.agent_id))
            for number, key in enumerate(keys)
        }
    outcomes[-1] = Outcome(("accounts", accounts))
    return outcomes


async def _state(status: Awaitable[Any]) -> SandboxState:
    state: SandboxState = (await status).state
    return state


def _account_values(account: Any) -> tuple[int, int, int, int]:
    return (account.tick_allowance, account.ticks_spent, account.ticks_reserved, account.spark)


# ----------------------------------------------------------------------------- processes


class LocalCluster(local.LocalCluster):
    """The library's local cluster, each process's output in ``<folder>/<name>.log``."""

    def __init__(self, folder: Path, *, partitions: int = 8, lease: float = 2.0) -> None:
        super().__init__(folder, partitions=partitions, lease=lease, logs=folder)
        self.folder = folder

    def start_gateway(self, name: str, *, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start a gateway and wait until it answers; its base URL."""
        base = super().start_gateway(name, host=host, port=port)
        try:
            self.wait_ready(name, base)
        except RuntimeError as error:
            raise AssertionError(f"{error}:\n{self.log(name)}") from None
        return base

    def wait_balanced(self, workers: int, timeout: float = 60.0) -> dict[str, list[int]]:
        try:
            return super().wait_balanced(workers, timeout)
        except RuntimeError as error:
            raise AssertionError(f"{error}\n{self.logs()}") from None

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{self.log(name)}" for name in [*self.workers, *self.gateways]
        )

    async def stream_events(self) -> list[dict[str, Any]]:
        """Every event in the events stream, in order, each with its stream sequence."""
        nc = await nats.connect(self.url)
        try:
            js = nc.jetstream()
            info = await js.stream_info(names.EVENTS_STREAM)
            last = info.state.last_seq
            found: list[dict[str, Any]] = []
            if not last:
                return found
            consumer = await js.pull_subscribe(
                "kforge.events.>",
                stream=names.EVENTS_STREAM,
                config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE),
            )
            seen = 0
            while seen < last:
                for message in await consumer.fetch(1000, timeout=5):
                    seen = message.metadata.sequence.stream
                    values = msgpack.unpackb(message.data)
                    values["seq"] = seen
                    values["subject"] = message.subject
                    found.append(values)
            return found
        finally:
            await nc.close()

    async def accounts(self, keys: list[AgentKey]) -> dict[int, tuple[int, int, int, int]]:
        nc = await nats.connect(self.url)
        try:
            bucket = await nc.jetstream().key_value(names.ACCOUNTS_BUCKET)
            found = {}
            for number, key in enumerate(keys):
                entry = await bucket.get(key.agent_id.hex)
                stored = decode_msgpack(entry.value or b"", StoredAccount, "account")
                found[number] = (stored.allowance, stored.spent, stored.reserved, stored.spark)
            return found
        finally:
            await nc.close()


# ----------------------------------------------------------------------------- the workload


@dataclass
class ClusterRun:
    """The outcomes of a workload on a cluster and the ids its sandboxes got."""

    outcomes: dict[int, Outcome]
    ids: dict[int, Hash256]
    listed: dict[int, set[Hash256]]

    @staticmethod
    def code(program: str) -> Hash256:
        return PROGRAM_IDS[program]


async def run_on_cluster(
    cluster: LocalCluster,
    urls: Iterable[str],
    plan: list[Planned],
    keys: list[AgentKey],
    *,
    meanwhile: Callable[[int], Awaitable[None]] | None = None,
    concurrency: int = 64,
) -> ClusterRun:
    """The workload through the gateways (clients retry); ``meanwhile(finished)`` is called
    as sandboxes finish (to kill or restart something mid-run)."""
    urls = list(urls)
    clients = [Client(urls, key, retry_seconds=120.0) for key in keys]
    outcomes: dict[int, Outcome] = {}
    ids: dict[int, Hash256] = {}
    gate = asyncio.Semaphore(concurrency)
    finished = 0
    try:
        codes = {
            name: await clients[0].put_program(assemble(text)) for name, text in PROGRAMS.items()
        }

        async def one(item: Planned) -> None:
            nonlocal finished
            client = clients[item.agent]
            owner = keys[item.agent].agent_id
            async with gate:
                sandbox = await client.create_sandbox(item.request(owner, codes[item.program]))
                ids[item.index] = sandbox
                await client.exec_start(sandbox)
                if item.delivery is not None:
                    await _until_blocked(lambda: _state(client.sandbox_status(sandbox)))
                    await client.deliver(sandbox, 2, item.delivery.to_bytes(8, "little"))
            result = await client.wait(sandbox, timeout=300)
            outcomes[item.index] = Outcome(result_of(result))
            finished += 1
            if meanwhile is not None:
                await meanwhile(finished)

        await asyncio.gather(*(one(item) for item in plan))
        listed = {
            number: {info.id for info in await client.list_sandboxes()}
            for number, client in enumerate(clients)
        }
    finally:
        for client in clients:
            await client.close()
    names_of = _id_names(ids, keys)
    by_sandbox = {sandbox.raw: index for index, sandbox in ids.items()}
    for values in await cluster.stream_events():
        sandbox = values["sandbox_id"]
        if sandbox in by_sandbox:
            event = Event(
                values["seq"],
                values["kind"],
                Hash256(sandbox),
                AgentId(values["owner"]) if values["owner"] else None,
                values["timestamp_ms"],
                values["payload"],
            )
            outcomes[by_sandbox[sandbox]].events.append(named_event(event, names_of))
    outcomes[-1] = Outcome(("accounts", await cluster.accounts(keys)))
    return ClusterRun(outcomes, ids, listed)


def assert_same(
    expected: dict[int, Outcome], run: ClusterRun, plan: list[Planned], logs: str
) -> None:
    """Every sandbox's result and events, and every account, as the embedded engine's; and
    each agent's sandboxes exactly those it was answered (none lost, none made twice)."""
    got = run.outcomes
    assert set(got) == set(expected), f"sandboxes missing: {set(expected) - set(got)}"
    for index in sorted(expected, key=lambda index: (index < 0, index)):
        want, have = expected[index], got[index]
        assert have.result == want.result, f"sandbox {index}: {have.result} != {want.result}"
        assert have.events == want.events, (
            f"sandbox {index} events:\n{have.events}\n!=\n{want.events}\n{logs[-3000:]}"
        )
    for agent, listed in run.listed.items():
        answered = {run.ids[item.index] for item in plan if item.agent == agent}
        assert listed == answered, f"agent {agent}: an answered sandbox is missing, or one is extra"


def create_twice(gateways: list[str], key: AgentKey, request: CreateSandbox) -> list[Hash256]:
    """POST one creation, with one request id, to each gateway in turn (as a client does
    whose first gateway answered after the client stopped listening): the sandbox ids."""
    body = encode_msgpack(request)
    request_id = os.urandom(32).hex()
    created = []
    for base in gateways:
        headers = key.request_headers("POST", "/v1/sandboxes", body)
        headers.update(
            {
                "content-type": "application/msgpack",
                "accept": "application/msgpack",
                REQUEST_ID_HEADER: request_id,
            }
        )
        response = httpx.post(f"{base}/v1/sandboxes", content=body, headers=headers, timeout=60)
        assert response.status_code == 201, response.text
        created.append(decode_msgpack(response.content, SandboxCreated, "reply").sandbox_id)
    return created
