"""The gateway's engine: :class:`ClusterEngine`, shaped like :class:`kforge.engine.Engine`,
whose every method is a request to the worker running the partition concerned.

``kforge serve --nats URL`` serves it with the same server as the embedded engine
(:func:`kforge.server.create_app`): HTTP, WebSocket events, the dashboard.  The
gateway keeps nothing a client depends on: any number of gateways may run, and a
client whose gateway died sends its request again to another (with the same
``X-Kforge-Request-Id``; the worker answers it once).

- A new sandbox goes to the partition with the fewest live sandboxes
  (:mod:`kforge.cluster.placement`), a link to the partition
  :func:`~kforge.cluster.names.partition_of` its request id names; anything about an
  existing sandbox or service to the partition the directory (``kforge_directory``)
  says; lists to every partition.
- A request that finds no worker (a failover is under way), or a worker that
  says the partition moved, is sent again until ``request_timeout``.
- Events and mailboxes come from their streams (:mod:`kforge.cluster.feeds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TextIO

import msgspec
import nats.errors
from nats.aio.client import Client as Nats
from nats.js.errors import KeyNotFoundError

from kforge.cluster import names, protocol
from kforge.cluster.connection import (
    Layout,
    NoCluster,
    connect,
    learn_operators,
    open_layout,
    shared_secret,
)
from kforge.cluster.feeds import ClusterBus, ClusterMailbox
from kforge.cluster.leases import live_workers
from kforge.cluster.placement import PlacementUnavailable, place
from kforge.cluster.programs import fetch_object, store_object
from kforge.cluster.protocol import (
    MOVED,
    OUTPUT_PER_ANSWER,
    RESULTS,
    Answer,
    Call,
    DirectoryEntry,
    relayed_error,
)
from kforge.core import (
    AgentId,
    EngineNotOpen,
    Hash256,
    InvalidRequest,
    MessageCode,
    NotSupported,
    SandboxNotFound,
    ServiceNotFound,
)
from kforge.engine import EngineLimits, EngineStatus
from kforge.engine.artifacts import build_upload
from kforge.engine.jobs import BuiltProgram, ProgramText, program_text
from kforge.engine.models import (
    CreateSandbox,
    ExecResult,
    HostCall,
    Operation,
    SandboxInfo,
    SandboxState,
    Service,
    ServiceInfo,
    ServiceResult,
    SystemClock,
)
from kforge.engine.offload import Offload, WorkLimits
from kforge.engine.policy import Action, Rules
from kforge.link import Import
from kforge.messages import Envelope, ExtensionCode, ReplyCode, decode_payload
from kforge.proofs import ExecutionProof
from kforge.proofs.replay import RunRecord
from kforge.server.endpoint import current_request_id
from kforge.sources import DEFAULT_STARLARK_MEMORY
from kforge.wire import decode_msgpack, encode_msgpack

__all__ = ["ClusterEngine", "ClusterUnavailable"]

#: The longest one try of a request waits for its answer (then it is sent again).
_TRY_SECONDS: Final = 5.0
#: How many sandbox and service locations a gateway remembers (the oldest are forgotten
#: first and read again from the directory bucket when next named): about 15 MB at most.
DIRECTORY_CACHE_ENTRIES: Final = 65_536
_CODES_BY_SANDBOX: Final = frozenset(
    {
        MessageCode.SANDBOX_STATUS,
        MessageCode.SANDBOX_KILL,
        MessageCode.EXEC_START,
        MessageCode.PROOF_REQUEST,
        ExtensionCode.SANDBOX_DELIVER,
    }
)


class ClusterUnavailable(EngineNotOpen):
    """No worker answered for a partition within the time allowed (HTTP 503)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"unavailable ({reason})")


def _request_id() -> Hash256:
    return current_request_id() or Hash256(os.urandom(32))


class ClusterEngine:
    """The engine a gateway serves: requests to the workers (see the module's description)."""

    tier = "cluster"

    def __init__(
        self,
        url: str,
        *,
        request_timeout: float = 30.0,
        out: TextIO | None = None,
        connect_timeout: float | None = None,
        work: WorkLimits | None = None,
    ) -> None:
        self.url = url
        self.request_timeout = request_timeout
        self.clock = SystemClock()
        #: What the server checks debugger sessions against (the workers check sandboxes).
        self.limits = EngineLimits()
        self.status = EngineStatus.UNOPENED
        self._out = out
        self._connect_timeout = connect_timeout
        self._nc: Nats | None = None
        self._layout: Layout | None = None
        self._directory: OrderedDict[str, int] = OrderedDict()
        #: The secret every gateway of the cluster signs bearer tokens with.
        self.token_secret: bytes | None = None
        self.bus = ClusterBus()
        self.mailbox = ClusterMailbox()
        #: Who may do what that names no sandbox; the operators it knows when it opens are
        #: the cluster's (written to ``kforge_cluster``, so the workers' policies know
        #: them too).  What names a sandbox, the worker running it decides.
        self.policy = Rules(AgentId(os.urandom(32)))
        #: Uploads are built and programs disassembled here, in worker processes under a
        #: time limit, as the embedded engine does (``work``: its limits).
        self.offload = Offload(work)
        self._operators_named: list[str] = []
        self._operator_watch: Any = None
        self._learning: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> ClusterEngine:
        if self.status is EngineStatus.UNOPENED:
            self._nc = await connect(
                self.url,
                name="kforge-gateway",
                who="kforge serve",
                out=self._out,
                give_up_after=self._connect_timeout,
            )
            self._layout = await self._wait_for_cluster(self._nc)
            self.token_secret = await shared_secret(self._layout, "token-secret")
            self.mailbox.layout = self._layout
            await self._name_operators(self._layout)
            workers = await live_workers(self._layout)
            self.bus.loads.seed(
                (load.partition, load.live)
                for record in workers.values()
                for load in record.partitions
            )
            await self.bus.start(self._layout)
            self.status = EngineStatus.OPEN
        return self

    async def _wait_for_cluster(self, nc: Nats) -> Layout:
        """The cluster's layout, once a worker has made it (saying so while waiting)."""
        said = False
        while True:
            try:
                return await open_layout(nc, partitions=None)
            except NoCluster as missing:
                if not said:
                    stream = self._out if self._out is not None else sys.stderr
                    stream.write(f"kforge serve: {missing}; waiting for one\n")
                    stream.flush()
                    said = True
            await asyncio.sleep(0.2)

    async def _name_operators(self, layout: Layout) -> None:
        """Write this gateway's operators to ``kforge_cluster`` and learn every other
        gateway's (a token from one gateway is good at all of them)."""
        for agent in self.policy.operators - {self.policy.engine_agent}:
            key = names.operator_key(agent)
            await layout.cluster.put(key, b"")
            self._operators_named.append(key)
        self._operator_watch = await layout.cluster.watch(names.OPERATORS_KEYS)
        self._learning = asyncio.get_running_loop().create_task(
            learn_operators(self._operator_watch, self.policy.add_operator)
        )

    async def close(self) -> None:
        self.offload.close()
        if self.status is EngineStatus.OPEN:
            self.status = EngineStatus.CLOSED
            await self.bus.stop()
            if self._learning is not None:
                self._learning.cancel()
                with contextlib.suppress(Exception):
                    await self._operator_watch.stop()
            for key in self._operators_named:
                with contextlib.suppress(Exception):
                    await self.layout.cluster.delete(key)
            if self._nc is not None:
                with contextlib.suppress(Exception):
                    await self._nc.drain()

    async def __aenter__(self) -> ClusterEngine:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            raise EngineNotOpen(self.status.value)
        return self._layout

    @property
    def partitions(self) -> int:
        return self.layout.partitions

    # ------------------------------------------------------------------ sending

    async def _request(self, subject: str, data: bytes, wait: float = 0.0) -> bytes:
        """Send until a worker answers (same bytes, same request id), or give up."""
        nc = self.layout.nc
        deadline = time.monotonic() + self.request_timeout + wait
        delay = 0.02
        reason = "no worker answered"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClusterUnavailable(f"{subject}: {reason}")
            try:
                reply = await nc.request(subject, data, timeout=min(left, _TRY_SECONDS + wait))
            except nats.errors.NoRespondersError:
                reason = "no worker serves it (a failover may be under way)"
            except nats.errors.TimeoutError:
                reason = "the worker did not answer in time"
            except nats.errors.Error as error:
                reason = f"NATS: {error}"
            else:
                moved = (reply.headers or {}).get(MOVED)
                if moved is None:
                    return reply.data
                reason = moved
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 2)

    async def _call(self, partition: int, call: Call, wait: float = 0.0) -> Any:
        raw = await self._request(names.engine_subject(partition), encode_msgpack(call), wait)
        answer = decode_msgpack(raw, Answer, "answer")
        if answer.failure is not None:
            raise relayed_error(answer.failure)
        kind = RESULTS[type(call)]
        if kind is None:
            return None
        return decode_msgpack(answer.value or b"", kind, "answer")

    async def _where(self, kind: str, entity: Hash256) -> int:
        key = f"{kind}.{entity.hex}"
        partition = self._directory.get(key)
        if partition is None:
            try:
                entry = await self.layout.directory.get(key)
            except KeyNotFoundError:
                if kind == "service":
                    raise ServiceNotFound(entity) from None
                raise SandboxNotFound(entity) from None
            partition = decode_msgpack(entry.value or b"", DirectoryEntry, "directory").partition
        self._remember(key, partition)
        return partition

    def _remember(self, key: str, partition: int) -> None:
        """Keep where ``key`` lives, forgetting the least recently named beyond the bound."""
        self._directory[key] = partition
        self._directory.move_to_end(key)
        while len(self._directory) > DIRECTORY_CACHE_ENTRIES:
            self._directory.popitem(last=False)

    async def _sandbox_call(self, sandbox: Hash256, call: Call, wait: float = 0.0) -> Any:
        if not isinstance(sandbox, Hash256):
            raise SandboxNotFound(sandbox)
        return await self._call(await self._where("sandbox", sandbox), call, wait)

    async def _everywhere(self, call: Call) -> list[Any]:
        results = await asyncio.gather(
            *(self._call(partition, call) for partition in range(self.partitions))
        )
        return [item for result in results for item in result]

    # ------------------------------------------------------------------ programs

    async def build_program(
        self,
        kind: str,
        source: bytes | str,
        filename: str,
        requester: AgentId,
        memory_quota: int = DEFAULT_STARLARK_MEMORY,
    ) -> tuple[Hash256, BuiltProgram]:
        """Build an upload (as :meth:`kforge.engine.Engine.build_program` does: in a worker
        process under the time limit) and store it in the object store."""
        self.policy.authorize(Action.PUT_PROGRAM, requester)
        built = await build_upload(
            self.offload, requester, kind, source, filename, memory_quota, {}
        )
        return await store_object(self.layout.programs, built.encoded), built

    async def starlark_libraries(self, source: str) -> dict[bytes, bytes | None]:
        """None: the gateway keeps programs, not a vault of libraries, so Starlark sent
        to a cluster loads none by content id (its compile says it cannot)."""
        return {}

    async def program_text(self, program_id: Hash256, requester: AgentId) -> ProgramText:
        """A stored program's disassembly, made in a worker process."""
        self.policy.authorize(Action.READ_PROGRAM, requester)
        encoded = await self.program_bytes(program_id)
        return await self.offload.run(
            requester, f"disassembling {program_id}", len(encoded), program_text, encoded
        )

    async def program_bytes(self, program_id: Hash256) -> bytes:
        """The stored program's bytes, their content id checked (``VaultFetchFailed``)."""
        return await fetch_object(self.layout.programs, program_id)

    # ------------------------------------------------------------------ sandboxes

    async def create_sandbox(
        self, request: CreateSandbox, requester: AgentId | None = None
    ) -> Hash256:
        if not isinstance(request, CreateSandbox):
            raise InvalidRequest(
                "request", f"expected a CreateSandbox, got {type(request).__name__}"
            )
        request_id = _request_id()
        partition = await self._place(request_id)
        asker = requester if requester is not None else request.owner
        created: Hash256 = await self._call(partition, protocol.Create(request_id, request, asker))
        self._remember(f"sandbox.{created.hex}", partition)
        return created

    async def sandbox_status(self, sandbox_id: Hash256, requester: AgentId) -> SandboxInfo:
        info: SandboxInfo = await self._sandbox_call(
            sandbox_id, protocol.Status(_request_id(), sandbox_id, requester)
        )
        return info

    async def authorize_sandbox(
        self, action: Action, sandbox_id: Hash256, requester: AgentId
    ) -> None:
        await self._sandbox_call(
            sandbox_id, protocol.Authorize(_request_id(), sandbox_id, requester, action.value)
        )

    async def list_sandboxes(self, owner: AgentId | None = None) -> list[SandboxInfo]:
        return await self._everywhere(protocol.ListSandboxes(_request_id(), owner))

    async def visible_sandboxes(
        self, requester: AgentId, *, every: bool = False
    ) -> list[SandboxInfo]:
        if every:  # refused here as everywhere, before every partition is asked
            self.policy.authorize(Action.LIST_ALL_SANDBOXES, requester)
        return await self._everywhere(protocol.Visible(_request_id(), requester, every))

    async def exec_start(self, sandbox_id: Hash256, requester: AgentId) -> None:
        await self._sandbox_call(sandbox_id, protocol.Start(_request_id(), sandbox_id, requester))

    async def step(self, sandbox_id: Hash256, requester: AgentId) -> SandboxState:
        state: SandboxState = await self._sandbox_call(
            sandbox_id, protocol.Step(_request_id(), sandbox_id, requester)
        )
        return state

    async def deliver(
        self, sandbox_id: Hash256, channel: int, data: bytes, requester: AgentId
    ) -> None:
        await self._sandbox_call(
            sandbox_id, protocol.Deliver(_request_id(), sandbox_id, requester, channel, bytes(data))
        )

    async def kill_sandbox(self, sandbox_id: Hash256, requester: AgentId) -> None:
        await self._sandbox_call(sandbox_id, protocol.Kill(_request_id(), sandbox_id, requester))

    async def wait(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None = None,
        *,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """The result once stopped; asked again (of whoever runs the partition then) until
        it comes or ``timeout`` passes (``TimeoutError``).  Its output: the first
        ``output_limit`` bytes, or all of it (read in chunks when one answer cannot hold it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _TRY_SECONDS * 6 if deadline is None else max(0.0, deadline - time.monotonic())
            call = protocol.Wait(_request_id(), sandbox_id, requester, left, output_limit)
            try:
                result: ExecResult = await self._sandbox_call(sandbox_id, call, wait=left)
            except TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            if output_limit is None and len(result.output) >= OUTPUT_PER_ANSWER:
                rest = await self._output(sandbox_id, requester, len(result.output))
                result = msgspec.structs.replace(result, output=result.output + rest)
            return result

    async def forget(self, sandbox_id: Hash256, requester: AgentId) -> None:
        await self._sandbox_call(sandbox_id, protocol.Forget(_request_id(), sandbox_id, requester))
        self._directory.pop(f"sandbox.{sandbox_id.hex}", None)

    async def io_log(self, sandbox_id: Hash256, requester: AgentId) -> tuple[HostCall, ...]:
        calls: tuple[HostCall, ...] = await self._sandbox_call(
            sandbox_id, protocol.IoLog(_request_id(), sandbox_id, requester)
        )
        return calls

    async def output(
        self, sandbox_id: Hash256, requester: AgentId, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """The output from ``offset`` on, at most ``limit`` bytes (all: chunk by chunk)."""
        return await self._output(sandbox_id, requester, offset, limit)

    async def _output(
        self,
        sandbox_id: Hash256,
        requester: AgentId | None,
        offset: int = 0,
        limit: int | None = None,
    ) -> bytes:
        data = b""
        while True:
            want = None if limit is None else limit - len(data)
            chunk, length = await self.output_chunk(
                sandbox_id, requester, offset=offset + len(data), limit=want
            )
            data += chunk
            if not chunk or offset + len(data) >= length or want == len(chunk):
                return data

    async def output_chunk(
        self, sandbox_id: Hash256, requester: AgentId | None, *, offset: int, limit: int | None
    ) -> tuple[bytes, int]:
        for name, value in (("offset", offset), ("limit", limit)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidRequest(name, f"expected an integer of at least 0, got {value!r}")
        chunk, length = await self._sandbox_call(
            sandbox_id, protocol.Output(_request_id(), sandbox_id, requester, offset, limit)
        )
        return bytes(chunk), int(length)

    async def run_record(self, sandbox_id: Hash256, requester: AgentId) -> RunRecord:
        raw = await self._sandbox_call(
            sandbox_id, protocol.RunRecordOf(_request_id(), sandbox_id, requester)
        )
        return RunRecord.from_bytes(raw)

    async def request_proof(self, sandbox_id: Hash256, requester: AgentId) -> ExecutionProof:
        raw = await self._sandbox_call(
            sandbox_id, protocol.Prove(_request_id(), sandbox_id, requester), wait=_TRY_SECONDS
        )
        return ExecutionProof.from_bytes(raw)

    async def grant(
        self,
        sandbox_id: Hash256,
        requester: AgentId,
        agent: AgentId,
        operations: Iterable[Operation],
    ) -> None:
        await self._sandbox_call(
            sandbox_id,
            protocol.Grant(_request_id(), sandbox_id, requester, agent, tuple(operations)),
        )

    async def revoke(self, sandbox_id: Hash256, requester: AgentId, agent: AgentId) -> None:
        await self._sandbox_call(
            sandbox_id, protocol.Revoke(_request_id(), sandbox_id, requester, agent)
        )

    # ------------------------------------------------------------------ links, services, cycles

    async def link_resolve(
        self, program_id: Hash256, imports: Sequence[Import], requester: AgentId
    ) -> Hash256:
        request_id = _request_id()
        partition = names.partition_of(request_id, self.partitions)
        resolved: Hash256 = await self._call(
            partition, protocol.Link(request_id, program_id, tuple(imports), requester)
        )
        return resolved

    async def begin_cycle(
        self, allowances: Mapping[AgentId, int] | None = None, requester: AgentId | None = None
    ) -> int:
        if requester is not None:
            self.policy.authorize(Action.BEGIN_CYCLE, requester)
        raise NotSupported("cycles in a cluster (every partition would have to begin one at once)")

    async def create_service(self, service: Service, requester: AgentId | None = None) -> Hash256:
        partition = await self._where("sandbox", service.sandbox)
        asker = requester if requester is not None else service.owner
        created: Hash256 = await self._call(
            partition, protocol.CreateService(_request_id(), service, asker)
        )
        self._remember(f"service.{created.hex}", partition)
        return created

    async def service_info(self, service_id: Hash256) -> ServiceInfo:
        partition = await self._where("service", service_id)
        info: ServiceInfo = await self._call(
            partition, protocol.ServiceInfoOf(_request_id(), service_id)
        )
        return info

    async def list_services(self, owner: AgentId | None = None) -> list[ServiceInfo]:
        return await self._everywhere(protocol.ListServices(_request_id(), owner))

    async def call_service(
        self, service_id: Hash256, endpoint: bytes, data: bytes, caller: AgentId
    ) -> ServiceResult:
        partition = await self._where("service", service_id)
        wait = self.request_timeout
        result: ServiceResult = await self._call(
            partition,
            protocol.CallService(
                _request_id(), service_id, bytes(endpoint), bytes(data), caller, wait
            ),
            wait=wait,
        )
        return result

    async def fund_service(self, service_id: Hash256, requester: AgentId) -> None:
        partition = await self._where("service", service_id)
        await self._call(partition, protocol.FundService(_request_id(), service_id, requester))

    # ------------------------------------------------------------------ messages

    async def _place(self, request_id: Hash256) -> int:
        """The partition of a new sandbox (:mod:`kforge.cluster.placement`)."""
        try:
            return await place(self.layout, self.bus.loads, request_id)
        except PlacementUnavailable as error:
            raise ClusterUnavailable(str(error)) from None

    async def _partition_for(self, envelope: Envelope) -> int:
        """Where an envelope goes: by the sandbox or service it names, a creation where
        :meth:`_place` puts it, anything else by its id."""
        code = envelope.code
        if code == MessageCode.SANDBOX_CREATE:
            return await self._place(envelope.id)
        try:
            if code in _CODES_BY_SANDBOX:
                return await self._where(
                    "sandbox", decode_payload(code, envelope.payload).sandbox_id
                )
            if code == MessageCode.SERVICE_CREATE:
                return await self._where("sandbox", decode_payload(code, envelope.payload).sandbox)
            if code in (MessageCode.SERVICE_CALL, ExtensionCode.SERVICE_FUND):
                return await self._where(
                    "service", decode_payload(code, envelope.payload).service_id
                )
        except (InvalidRequest, SandboxNotFound, ServiceNotFound):
            pass  # the engine there refuses it as it would anywhere
        return names.partition_of(envelope.id, self.partitions)

    async def dispatch(self, envelope: Envelope) -> Envelope:
        """Send the envelope to the engine it concerns; returns that engine's reply."""
        partition = await self._partition_for(envelope)
        reply = Envelope.decode(
            await self._request(names.forge_subject(partition), envelope.encode())
        )
        if reply.code == ReplyCode.ACK and envelope.code == MessageCode.SANDBOX_CREATE:
            with contextlib.suppress(Exception):
                created = decode_payload(reply.code, reply.payload).sandbox_id
                if created is not None:
                    self._remember(f"sandbox.{created.hex}", partition)
        return reply

    async def dispatch_bytes(self, raw: bytes) -> bytes:
        try:
            envelope = Envelope.decode(raw)
        except InvalidRequest:
            partition = 0
            return await self._request(names.forge_subject(partition), raw)
        return (await self.dispatch(envelope)).encode()
