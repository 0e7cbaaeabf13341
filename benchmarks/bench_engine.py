"""Engine overheads against the seed's targets (§7).

- create: ``create_sandbox`` with a 64 KiB quota (target < 1 ms);
- send/recv: one SEND→RECV round trip through a host adapter (the oracle),
  which costs a slice end, the adapter call and a requeue (target < 100 µs);
- dispatch: one SANDBOX_STATUS envelope through ``dispatch_bytes``, encoded
  request to encoded reply;
- concurrent: 256 sandboxes started together, run to completion;
- service call: one ``call_service`` to a counting service, minus the
  service's own execution of the same request (a bare machine delivering the
  request and running until it waits again), i.e. the engine's overhead per
  call: queueing, delivery, slice, reply recognition, events (target ≤ 50 µs).

Prints a table and saves ``benchmarks/results/engine.json``.
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from kforge.asm import assemble
from kforge.core import AgentId, Hash256, MessageCode
from kforge.engine import (
    CreateSandbox,
    Endpoint,
    Engine,
    EngineLimits,
    SandboxState,
    Service,
    seeded_random,
)
from kforge.machine import Machine
from kforge.messages import Envelope, ReplyCode
from kforge.storage import Vault

RESULTS = Path(__file__).resolve().parent / "results"
OWNER = AgentId(b"\x01" * 32)

ROUND_TRIPS = """
.data
query:  .byte 1
        .ascii "k"
.code
        LI   r1, query
        LI   r2, 2
        LI   r5, 64
        LI   r7, 1
again:  JZ   r10, finish
        SEND 4, r1, r2
        RECV 4, r6, r253, r5
        SUB  r10, r10, r7
        JMP  again
finish: HALT
"""

COUNT_DOWN = """
        LI   r1, 2000
        LI   r2, 1
again:  SUB  r1, r1, r2
        JNZ  r1, again
        HALT
"""

#: Counts its calls: the reply to each request is the u64 call number, then the request.
COUNTER = """
        LI   r2, 4096
        LI   r8, 8
        LI   r11, 1
top:    ADD  r9, r253, r8
        RECV 3, r3, r9, r2
        ADD  r10, r10, r11
        STOREW r10, r253, 0
        ADD  r4, r3, r8
        SEND 3, r253, r4
        JMP  top
"""


def engine(**options: object) -> Engine:
    return Engine(
        Vault(":memory:"),
        random_source=seeded_random(1),
        tier="reference",
        oracle={b"k": b"v"},
        **options,  # type: ignore[arg-type]
    )


async def best_of(repeats: int, measure: Callable[[], Awaitable[float]]) -> float:
    return statistics.median([await measure() for _ in range(repeats)])


async def creation(count: int = 2000) -> float:
    limits = EngineLimits(max_sandboxes=count, max_sandboxes_per_owner=count)
    async with engine(limits=limits) as forge:
        code = forge.vault.put_program(assemble("HALT\n"))
        started = time.perf_counter()
        for _ in range(count):
            await forge.create_sandbox(CreateSandbox(OWNER, code, 64 * 1024, 100))
        return (time.perf_counter() - started) / count


async def send_recv(trips: int = 5000) -> float:
    async with engine() as forge:
        program = assemble(ROUND_TRIPS)
        code = forge.vault.put_program(program)
        sandbox = await forge.create_sandbox(
            CreateSandbox(OWNER, code, 4096, 100 * trips, grants=frozenset({4}))
        )
        machine = forge._sandboxes[sandbox].machine
        assert machine is not None
        machine.registers[10] = trips  # the loop count
        started = time.perf_counter()
        await forge.exec_start(sandbox, OWNER)
        result = await forge.wait(sandbox)
        elapsed = time.perf_counter() - started
        assert result.state is SandboxState.HALTED, result
        return elapsed / trips


async def dispatch(count: int = 5000) -> float:
    async with engine() as forge:
        code = forge.vault.put_program(assemble("HALT\n"))
        sandbox = await forge.create_sandbox(CreateSandbox(OWNER, code, 4096, 100))
        raw = [
            Envelope.build(
                MessageCode.SANDBOX_STATUS,
                OWNER,
                {"sandbox_id": sandbox},
                id=Hash256.of(struct.pack("<Q", index)),
            ).encode()
            for index in range(count)
        ]
        started = time.perf_counter()
        for request in raw:
            reply = Envelope.decode(await forge.dispatch_bytes(request))
        elapsed = time.perf_counter() - started
        assert reply.code == ReplyCode.SANDBOX_INFO
        return elapsed / count


async def concurrent(count: int = 256) -> float:
    limits = EngineLimits(max_sandboxes=count, max_sandboxes_per_owner=count, slice_ticks=1000)
    async with engine(limits=limits) as forge:
        code = forge.vault.put_program(assemble(COUNT_DOWN))
        ids = [
            await forge.create_sandbox(CreateSandbox(OWNER, code, 4096, 10_000))
            for _ in range(count)
        ]
        started = time.perf_counter()
        for sandbox in ids:
            await forge.exec_start(sandbox, OWNER)
        results = await asyncio.gather(*(forge.wait(sandbox) for sandbox in ids))
        elapsed = time.perf_counter() - started
        assert all(result.state is SandboxState.HALTED for result in results)
        return elapsed


async def service_call(calls: int = 5000) -> float:
    """The engine's time per service call beyond the service's own execution."""
    async with engine() as forge:
        code = forge.vault.put_program(assemble(COUNTER))
        sandbox = await forge.create_sandbox(
            CreateSandbox(OWNER, code, 65536, 100, persistent=True, grants=frozenset({3}))
        )
        service = await forge.create_service(
            Service(OWNER, sandbox, b"counter", 100 * calls, True, (Endpoint(b"count", 3),))
        )
        await forge.call_service(service, b"count", b"warm", OWNER)
        started = time.perf_counter()
        for _ in range(calls):
            await forge.call_service(service, b"count", b"request", OWNER)
        per_call = (time.perf_counter() - started) / calls
    machine = Machine.load(
        assemble(COUNTER), memory_quota=65536, tick_budget=100 * calls, grants={3}
    )
    machine.run()
    started = time.perf_counter()
    for _ in range(calls):
        machine.deliver(3, b"request")
        machine.run(yield_on_tick=True)
        machine.take_outbound()
    own = (time.perf_counter() - started) / calls
    return per_call - own


async def main() -> None:
    rows = [
        ("create (64 KiB quota)", await best_of(3, creation), 1e-3, "per sandbox"),
        ("SEND→RECV via oracle", await best_of(3, send_recv), 100e-6, "per round trip"),
        ("dispatch SANDBOX_STATUS", await best_of(3, dispatch), None, "per envelope"),
        ("256 sandboxes × 4,000 ticks", await best_of(3, concurrent), None, "wall clock"),
        ("service call overhead", await best_of(3, service_call), 50e-6, "per call"),
    ]
    print(f"{'measure':<28} {'time':>12}  {'target':>10}  {'':<15}")
    for name, seconds, target, unit in rows:
        target_text = f"< {target * 1e6:,.0f} µs" if target else "-"
        verdict = "" if target is None else ("ok" if seconds < target else "MISSED")
        shown = f"{seconds * 1e6:>9,.1f} µs" if seconds < 0.1 else f"{seconds:>10,.3f} s"
        print(f"{name:<28} {shown:>12}  {target_text:>10}  {unit:<15} {verdict}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "engine.json").write_text(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "tier": "reference",
                "seconds": {name: seconds for name, seconds, _, _ in rows},
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    asyncio.run(main())
