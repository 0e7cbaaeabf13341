"""The durable engine: an append-only log and snapshots in SQLite, and the rebuild from them.

``engine.sqlite3`` under the data directory (WAL, ``synchronous=FULL``) holds:

* ``meta``: the engine's secret and its start count (``epoch``);
* ``log``: one row per record, ``seq`` increasing, ``kind`` text, ``body`` msgpack
  map.  Records are what the rebuild needs (``create``, ``begin``, ``start``,
  ``step``, ``deliver``, ``final``, ``forget``, ``grant``, ``revoke``,
  ``service``, ``budget``, ``settle``, ``suspend``, ``resume``, ``call``,
  ``call_started``, ``call_done``, ``accounts``) plus every published event
  (``event``, the event's own msgpack encoding);
* ``snapshots``: ``seq`` (the last log row the snapshot includes) and the
  msgpack body: every sandbox record (with a :func:`kforge.proofs.snapshot.checkpoint`
  of each live machine), every service and its queued calls, the ledger's
  accounts, the id counters and the event count.

The records of one request (or one scheduler slice) are written in one
transaction before the request is acknowledged, so after a crash either all
of them are there or none.  Rebuilding loads the latest snapshot and applies
the log rows after it.  A machine is brought forward by running it to the
tick of each logged delivery (execution is deterministic), dropping the
outbound messages it makes on the way (their replies are the logged deliveries).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgpack

from kforge.accounting import Account
from kforge.core import AgentId, Hash256
from kforge.engine.models import (
    CreateSandbox,
    Endpoint,
    ExecResult,
    HostCall,
    Operation,
    SandboxState,
    ServiceState,
)
from kforge.engine.sandbox import Sandbox, _Final
from kforge.engine.services import ServiceCall, ServiceRecord
from kforge.isa import FaultCode
from kforge.machine import Delivery, Machine, MachineState
from kforge.proofs.snapshot import checkpoint, restore
from kforge.storage import SqliteStore

if TYPE_CHECKING:
    from kforge.engine.engine import Engine

__all__ = ["ENGINE_DB", "Journal", "RebuildError", "rebuild", "take_snapshot"]

ENGINE_DB: Final = "engine.sqlite3"

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS snapshots (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)",
)


class RebuildError(Exception):
    """The log cannot be applied (it does not fit the snapshot or the execution)."""


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


class Journal(SqliteStore):
    """The log and snapshot store of one data directory (``synchronous=FULL``: fsync'd)."""

    what = "engine journal"

    def __init__(self, data_dir: str | Path) -> None:
        super().__init__(Path(data_dir) / ENGINE_DB, synchronous="FULL")
        for statement in _SCHEMA:
            self.connection.execute(statement)
        self.pending: list[tuple[str, bytes]] = []
        row = self.connection.execute("SELECT MAX(seq) FROM log").fetchone()
        self.last_seq: int = row[0] or 0
        self.since_snapshot = 0

    # ------------------------------------------------------------------ meta

    def meta(self, key: str) -> bytes | None:
        row = self.connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return bytes(row[0]) if row is not None else None

    def set_meta(self, key: str, value: bytes) -> None:
        self.connection.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ log

    def append(self, kind: str, fields: dict[str, Any]) -> None:
        self.pending.append((kind, _pack(fields)))

    def append_raw(self, kind: str, body: bytes) -> None:
        self.pending.append((kind, body))

    def commit(self) -> None:
        """Write every pending record in one transaction (fsync'd: ``synchronous=FULL``)."""
        if not self.pending:
            return
        rows = self.pending
        self.pending = []
        first = self.last_seq + 1
        with self.transaction() as connection:
            connection.executemany(
                "INSERT INTO log VALUES (?, ?, ?)",
                [(first + i, kind, body) for i, (kind, body) in enumerate(rows)],
            )
        self.last_seq += len(rows)
        self.since_snapshot += len(rows)

    def records(self, after: int = 0) -> Iterator[tuple[int, str, bytes]]:
        for seq, kind, body in self.connection.execute(
            "SELECT seq, kind, body FROM log WHERE seq > ? ORDER BY seq", (after,)
        ):
            yield seq, kind, bytes(body)

    def events(self) -> Iterator[bytes]:
        """The encoded events (``Event.encode()``) in publication order."""
        for _, kind, body in self.records():
            if kind == "event":
                yield body

    # ------------------------------------------------------------------ snapshots

    def save_snapshot(self, body: bytes) -> None:
        self.connection.execute(
            "INSERT OR REPLACE INTO snapshots VALUES (?, ?)", (self.last_seq, body)
        )
        self.connection.execute(
            "DELETE FROM snapshots WHERE seq < (SELECT MAX(seq) FROM snapshots)"
        )
        self.since_snapshot = 0

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        row = self.connection.execute(
            "SELECT seq, body FROM snapshots ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return (int(row[0]), bytes(row[1])) if row is not None else None


# =============================================================================
# Snapshot bodies
# =============================================================================


def _request_values(request: CreateSandbox) -> dict[str, Any]:
    return {
        "owner": request.owner.raw,
        "code": request.code.raw,
        "memory_quota": request.memory_quota,
        "tick_budget": request.tick_budget,
        "input": bytes(request.input),
        "environment": [[k, v] for k, v in sorted(request.environment.items())],
        "persistent": request.persistent,
        "grants": sorted(request.grants),
        "accept_from": sorted(a.raw for a in request.accept_from),
        "deadline": request.deadline,
    }


def request_from_values(values: dict[str, Any]) -> CreateSandbox:
    return CreateSandbox(
        owner=AgentId(values["owner"]),
        code=Hash256(values["code"]),
        memory_quota=values["memory_quota"],
        tick_budget=values["tick_budget"],
        input=values["input"],
        environment={k: v for k, v in values["environment"]},
        persistent=values["persistent"],
        grants=frozenset(values["grants"]),
        accept_from=frozenset(AgentId(a) for a in values["accept_from"]),
        deadline=values["deadline"],
    )


def create_record(sandbox: Sandbox, counter: int) -> dict[str, Any]:
    return {"id": sandbox.id.raw, "counter": counter, **_request_values(sandbox.request)}


def _call_values(call: ServiceCall) -> dict[str, Any]:
    return {
        "number": call.number,
        "endpoint": call.endpoint.name,
        "data": call.data,
        "caller": call.caller.raw,
        "caller_sandbox": call.caller_sandbox.raw if call.caller_sandbox is not None else None,
        "notify": [call.notify[0].raw, call.notify[1].raw] if call.notify is not None else None,
        "ticks": call.ticks_at_delivery,
    }


def _call_from_values(service: ServiceRecord, values: dict[str, Any]) -> ServiceCall:
    endpoint = service.endpoint(values["endpoint"])
    if endpoint is None:
        raise RebuildError(f"service {service.id} has no endpoint {values['endpoint']!r}")
    notify = values["notify"]
    return ServiceCall(
        values["number"],
        service.id,
        endpoint,
        values["data"],
        AgentId(values["caller"]),
        Hash256(values["caller_sandbox"]) if values["caller_sandbox"] is not None else None,
        (AgentId(notify[0]), Hash256(notify[1])) if notify is not None else None,
        None,
        values.get("ticks", 0),
    )


def _result_values(result: ExecResult | None) -> Any:
    if result is None:
        return None
    return [
        result.state.value,
        result.ticks_used,
        result.output,
        int(result.fault) if result.fault is not None else None,
        result.fault_detail,
    ]


def take_snapshot(engine: Engine) -> bytes:
    """The msgpack body of a snapshot of ``engine`` (call between slices only)."""
    sandboxes = []
    for sandbox in engine._sandboxes.values():
        final = sandbox.final
        sandboxes.append(
            {
                "id": sandbox.id.raw,
                "request": _request_values(sandbox.request),
                "state": sandbox.state.value,
                "started": sandbox.started,
                "scheduled": sandbox.scheduled,
                "reserved": sandbox.reserved_ticks,
                "access": [
                    [agent.raw, sorted(op.value for op in ops)]
                    for agent, ops in sandbox.access.items()
                ],
                "io_log": [
                    [c.ticks_used, c.channel, c.request, c.reply, c.status, c.delivered]
                    for c in sandbox.io_log
                ],
                "result": _result_values(sandbox.result),
                "final": None
                if final is None
                else [
                    final.ticks_used,
                    final.memory_used,
                    final.pc,
                    [[d.ticks_used, d.channel, d.data] for d in final.deliveries],
                ],
                "machine": checkpoint(sandbox.machine, include_program=False)
                if sandbox.machine is not None
                else None,
            }
        )
    services = []
    for service in engine._services.values():
        services.append(
            {
                "id": service.id.raw,
                "sandbox": service.sandbox.id.raw,
                "name": service.name,
                "tick_budget": service.tick_budget,
                "auto_fund": service.auto_fund,
                "endpoints": [[e.name, e.channel, e.schema] for e in service.endpoints],
                "state": service.state.value,
                "funded_cycle": service.funded_cycle,
                "reserved": service.reserved_ticks,
                "cycle_start": service.cycle_start_ticks,
                "queue": [_call_values(call) for call in service.queue],
                "current": _call_values(service.current) if service.current is not None else None,
                "completed": service.calls_completed,
            }
        )
    cycle, accounts = engine.ledger.dump()
    return _pack(
        {
            "version": 1,
            "counters": [engine._sandbox_counter, engine._service_counter, engine._call_counter],
            "bus_seq": engine.bus.published,
            "ledger": [cycle, [_account_values(a) for a in accounts]],
            "sandboxes": sandboxes,
            "services": services,
        }
    )


def _account_values(account: Account) -> list[Any]:
    return [
        account.agent.raw,
        account.tick_allowance,
        account.ticks_spent,
        account.ticks_reserved,
        account.spark,
    ]


def accounts_record(engine: Engine) -> dict[str, Any]:
    cycle, accounts = engine.ledger.dump()
    return {"cycle": cycle, "rows": [_account_values(a) for a in accounts]}


def _load_accounts(engine: Engine, values: list[Any]) -> None:
    cycle, rows = values
    engine.ledger.load(cycle, [Account(AgentId(r[0]), r[1], r[2], r[3], r[4]) for r in rows])


# =============================================================================
# Rebuild
# =============================================================================


class _Rebuilder:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.events = 0

    def lookup(self, program_id: Hash256) -> Any:
        try:
            return self.engine.programs.load(program_id)
        except Exception:
            return None

    # ------------------------------------------------------------------ snapshot

    def load_snapshot(self, body: dict[str, Any]) -> None:
        engine = self.engine
        engine._sandbox_counter, engine._service_counter, engine._call_counter = body["counters"]
        self.events = body["bus_seq"]
        _load_accounts(engine, body["ledger"])
        for values in body["sandboxes"]:
            sandbox = Sandbox(Hash256(values["id"]), request_from_values(values["request"]))
            sandbox.state = SandboxState(values["state"])
            sandbox.started = values["started"]
            sandbox.scheduled = values["scheduled"]
            sandbox.reserved_ticks = values["reserved"]
            sandbox.access = {
                AgentId(agent): frozenset(Operation(op) for op in ops)
                for agent, ops in values["access"]
            }
            sandbox.io_log = [HostCall(*entry) for entry in values["io_log"]]
            result = values["result"]
            if result is not None:
                state, ticks, output, fault, detail = result
                sandbox.result = ExecResult(
                    sandbox.id,
                    SandboxState(state),
                    ticks,
                    output,
                    FaultCode(fault) if fault is not None else None,
                    detail,
                )
            final = values["final"]
            if final is not None:
                sandbox.final = _Final(
                    final[0], final[1], final[2], tuple(Delivery(*d) for d in final[3])
                )
            if values["machine"] is not None:
                sandbox.machine = restore(values["machine"], self.lookup)
            engine._sandboxes[sandbox.id] = sandbox
            if sandbox.state.is_live:
                engine._count_live(sandbox, +1)
        for values in body["services"]:
            service = self._service(values)
            service.state = ServiceState(values["state"])
            service.funded_cycle = values["funded_cycle"]
            service.reserved_ticks = values["reserved"]
            service.cycle_start_ticks = values["cycle_start"]
            service.calls_completed = values["completed"]
            service.queue.extend(_call_from_values(service, c) for c in values["queue"])
            if values["current"] is not None:
                service.current = _call_from_values(service, values["current"])

    def _service(self, values: dict[str, Any]) -> ServiceRecord:
        engine = self.engine
        sandbox = engine._sandboxes[Hash256(values["sandbox"])]
        service = ServiceRecord(
            Hash256(values["id"]),
            sandbox.owner,
            sandbox,
            values["name"],
            values["tick_budget"],
            values["auto_fund"],
            tuple(Endpoint(name, channel, schema) for name, channel, schema in values["endpoints"]),
        )
        engine._services[service.id] = service
        sandbox.service = service
        return service

    # ------------------------------------------------------------------ records

    def sandbox(self, raw: bytes) -> Sandbox:
        sandbox = self.engine._sandboxes.get(Hash256(raw))
        if sandbox is None:
            raise RebuildError(f"the log names an unknown sandbox {raw.hex()}")
        return sandbox

    def advance(self, sandbox: Sandbox, target: int) -> Machine:
        """Run the sandbox's machine to the instruction boundary at ``target`` ticks."""
        machine = sandbox.machine
        if machine is None:
            raise RebuildError(f"sandbox {sandbox.id} has no machine to advance")
        runner = self.engine.runner
        while machine.ticks_used < target and machine.state in (
            MachineState.READY,
            MachineState.RUNNING,
        ):
            runner.run(machine, target - machine.ticks_used, yield_on_tick=True)
            machine.take_outbound()
        machine.take_outbound()
        if machine.ticks_used != target:
            raise RebuildError(
                f"sandbox {sandbox.id} reached {machine.ticks_used} ticks ({machine.state.value}), "
                f"the log says {target}"
            )
        return machine

    def apply(self, kind: str, body: bytes) -> None:
        engine = self.engine
        if kind == "event":
            self.events += 1
            return
        values: dict[str, Any] = _unpack(body)
        if kind == "create":
            request = request_from_values(values)
            sandbox = Sandbox(Hash256(values["id"]), request)
            engine._sandbox_counter = max(engine._sandbox_counter, values["counter"])
            program = engine.programs.load(request.code)
            sandbox.machine = request.load_machine(program, engine.limits.message_limit)
            sandbox.state = SandboxState.READY
            engine._sandboxes[sandbox.id] = sandbox
            engine._count_live(sandbox, +1)
        elif kind == "begin":
            sandbox = self.sandbox(values["id"])
            sandbox.started = True
            sandbox.reserved_ticks = values["reserved"]
        elif kind == "start":
            sandbox = self.sandbox(values["id"])
            sandbox.scheduled = True
            if sandbox.state is SandboxState.READY:
                sandbox.state = SandboxState.RUNNING
        elif kind == "step":
            sandbox = self.sandbox(values["id"])
            machine = self.advance(sandbox, values["ticks"])
            machine.step()
            machine.take_outbound()
            sandbox.state = SandboxState.RUNNING
        elif kind == "deliver":
            sandbox = self.sandbox(values["id"])
            machine = self.advance(sandbox, values["ticks"])
            machine.deliver(values["channel"], values["data"])
            call = values["call"]
            if call is not None:
                sandbox.io_log.append(
                    HostCall(values["ticks"], values["channel"], call[0], values["data"], call[1])
                )
        elif kind == "final":
            sandbox = self.sandbox(values["id"])
            state = SandboxState(values["state"])
            machine = self.advance(sandbox, values["ticks"])
            fault = machine.fault if state is SandboxState.FAULTED else None
            detail = machine.fault_detail if state is SandboxState.FAULTED else None
            sandbox.state = state
            sandbox.scheduled = False
            sandbox.result = ExecResult(
                sandbox.id, state, machine.ticks_used, bytes(machine.stdout), fault, detail
            )
            sandbox.freeze()
            sandbox.reserved_ticks = 0
            engine._count_live(sandbox, -1)
            if sandbox.service is not None:
                service: ServiceRecord = sandbox.service
                service.state = ServiceState.FAILED
                service.reserved_ticks = 0
                service.current = None
                service.queue.clear()
        elif kind == "forget":
            engine._sandboxes.pop(Hash256(values["id"]), None)
        elif kind == "grant":
            sandbox = self.sandbox(values["id"])
            agent = AgentId(values["agent"])
            sandbox.access[agent] = frozenset(Operation(op) for op in values["operations"])
        elif kind == "revoke":
            self.sandbox(values["id"]).access.pop(AgentId(values["agent"]), None)
        elif kind == "service":
            engine._service_counter = max(engine._service_counter, values["counter"])
            service = self._service(values)
            service.sandbox.reserved_ticks = 0
        elif kind == "budget":
            sandbox = self.sandbox(values["id"])
            machine = self.advance(sandbox, values["ticks"])
            machine.tick_budget = values["budget"]
            service = sandbox.service
            service.funded_cycle = values["cycle"]
            service.cycle_start_ticks = values["ticks"]
            service.reserved_ticks = values["reserved"]
        elif kind in ("settle", "suspend", "resume", "call", "call_started", "call_done"):
            service = engine._services[Hash256(values["service"])]
            if kind == "settle":
                service.reserved_ticks = 0
            elif kind == "suspend":
                service.state = ServiceState.SUSPENDED
                service.sandbox.scheduled = False
            elif kind == "resume":
                service.state = ServiceState.ACTIVE
                service.sandbox.scheduled = True
            elif kind == "call":
                service.queue.append(_call_from_values(service, values))
                engine._call_counter = max(engine._call_counter, values["number"])
            elif kind == "call_started":
                if not service.queue or service.queue[0].number != values["number"]:
                    raise RebuildError(f"call {values['number']} is not next in its queue")
                service.current = service.queue.popleft()
                service.current.ticks_at_delivery = values["ticks"]
            else:
                service.current = None
                service.calls_completed += 1
        elif kind == "accounts":
            _load_accounts(engine, [values["cycle"], values["rows"]])
        else:
            raise RebuildError(f"unknown log record kind {kind!r}")

    def settle_states(self) -> None:
        """Give every live sandbox the state its machine is in, and queue what runs."""
        engine = self.engine
        for sandbox in engine._sandboxes.values():
            machine = sandbox.machine
            if machine is None or sandbox.state.is_final:
                continue
            if machine.state is MachineState.BLOCKED:
                sandbox.state = SandboxState.BLOCKED
            elif machine.state is MachineState.RUNNING or sandbox.scheduled:
                sandbox.state = SandboxState.RUNNING
            if sandbox.scheduled and sandbox.state is SandboxState.RUNNING:
                engine.scheduler.enqueue(sandbox)
            if sandbox.scheduled and sandbox.service is None:
                limit = sandbox.request.deadline
                sandbox.deadline_at = engine.clock.monotonic() + (
                    limit if limit is not None else engine.limits.deadline
                )
                engine.scheduler.watch_deadline(sandbox)
        engine.bus.resume_at(self.events)


def rebuild(engine: Engine, journal: Journal) -> int:
    """Rebuild ``engine`` from the latest snapshot and the log after it; returns records applied."""
    rebuilder = _Rebuilder(engine)
    snapshot = journal.latest_snapshot()
    after = 0
    if snapshot is not None:
        after, body = snapshot
        rebuilder.load_snapshot(_unpack(body))
    applied = 0
    for _, kind, body in journal.records(after):
        rebuilder.apply(kind, body)
        applied += 1
    rebuilder.settle_states()
    return applied
