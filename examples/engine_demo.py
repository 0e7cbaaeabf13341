"""The Forge engine in a few lines: run sandboxes, give input, call the host, watch events.

Run it with ``PYTHONPATH=src python examples/engine_demo.py``.  Everything stays in
memory: the vault is ``:memory:`` and accounting is off except where shown.
"""

from __future__ import annotations

import asyncio

from kforge.accounting import Ledger
from kforge.asm import assemble
from kforge.core import AgentId, ForgeError, Hash256, MessageCode
from kforge.engine import CreateSandbox, Engine
from kforge.events import Event
from kforge.host import OracleOp, parse_reply
from kforge.messages import Envelope, ReplyCode, decode_payload
from kforge.proofs import verify_proof
from kforge.storage import Vault

ALICE = AgentId(b"\xa1" * 32)

ECHO_TWICE = """
        LI   r2, 4096
        RECV 2, r3, r253, r2      ; the input given at creation
        SEND 0, r253, r3
        RECV 2, r3, r253, r2      ; blocks until someone delivers more
        SEND 0, r253, r3
        HALT
"""

ORACLE_CLIENT = """
.data
query:  .byte 1                   ; op QUERY
        .ascii "weather"
.code
        LI   r1, query
        LI   r2, 8
        SEND 4, r1, r2            ; ask the oracle (channel 4)
        LI   r5, 1024
        RECV 4, r6, r253, r5      ; its reply: status, op, value
        SEND 0, r253, r6
        HALT
"""

ECHO = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""

LOOP = "top: JMP top\n"


def show(event: Event) -> None:
    def text(value: object) -> str:
        if isinstance(value, Hash256):
            return value.hex[:12] + "…"
        return value.hex()[:12] + "…" if isinstance(value, bytes) else str(value)

    fields = ", ".join(f"{name}={text(value)}" for name, value in event.payload.items())
    print(f"  event #{event.seq:<3} {event.kind.name:<16} {fields}")


async def main() -> None:
    async with Engine(Vault(":memory:"), oracle={b"weather": b"sunny"}) as engine:
        events = engine.bus.subscribe(owner=ALICE)

        print("1. a sandbox that blocks for input, then finishes")
        code = engine.vault.put_program(assemble(ECHO_TWICE))
        echo = await engine.create_sandbox(
            CreateSandbox(ALICE, code, 65536, 10_000, input=b"hello, ")
        )
        await engine.exec_start(echo, ALICE)
        while (await engine.sandbox_status(echo, ALICE)).state.value != "BLOCKED":
            await asyncio.sleep(0)
        await engine.deliver(echo, 2, b"world", ALICE)
        result = await engine.wait(echo)
        print(f"  {result.state.value}: {result.output!r} in {result.ticks_used} ticks")

        print("2. a host call: the oracle on channel 4 (granted at creation)")
        code = engine.vault.put_program(assemble(ORACLE_CLIENT))
        client = await engine.create_sandbox(
            CreateSandbox(ALICE, code, 65536, 10_000, grants=frozenset({4}))
        )
        await engine.exec_start(client, ALICE)
        status, op, value = parse_reply((await engine.wait(client)).output)
        print(f"  reply: status {status.name}, op {OracleOp(op).name}, value {value!r}")
        for call in await engine.io_log(client, ALICE):
            print(f"  logged: channel {call.channel} at tick {call.ticks_used}: {call.request!r}")

        print("3. an endless loop meets its wall-clock deadline")
        code = engine.vault.put_program(assemble(LOOP))
        looper = await engine.create_sandbox(CreateSandbox(ALICE, code, 4096, 10**12, deadline=0.2))
        await engine.exec_start(looper, ALICE)
        result = await engine.wait(looper)
        print(f"  {result.state.value} after {result.ticks_used:,} ticks")

        print("4. the same through messages: SANDBOX_CREATE, EXEC_START, then EXEC_RESULT")
        code = engine.vault.put_program(assemble(ECHO))
        envelope_ids = (engine.new_envelope_id() for _ in range(2))
        create = Envelope.build(
            MessageCode.SANDBOX_CREATE,
            ALICE,
            {
                "owner": ALICE,
                "code": code,
                "memory_quota": 65536,
                "tick_budget": 1000,
                "input": b"by message",
            },
            id=next(envelope_ids),
        )
        ack = await engine.dispatch(create)
        sandbox_id = decode_payload(ReplyCode.ACK, ack.payload)["sandbox_id"]
        start = Envelope.build(
            MessageCode.EXEC_START, ALICE, {"sandbox_id": sandbox_id}, id=next(envelope_ids)
        )
        print(f"  EXEC_START answered {ReplyCode((await engine.dispatch(start)).code).name}")
        reply = await engine.mailbox.get(ALICE)
        values = decode_payload(reply.code, reply.payload)
        print(f"  {MessageCode(reply.code).name}: {values['state']} {values['output']!r}")

        print("5. an execution proof of the first run, checked by re-execution")
        proof = await engine.request_proof(echo, ALICE)
        record = await engine.run_record(echo, ALICE)
        program = engine.programs.load(record.program_id)
        report = verify_proof(proof, program, record, engine.signer.public_raw, tier="reference")
        print(
            f"  trace hash {proof.trace_hash.hex[:16]}…, {len(record.deliveries)} logged deliveries,"
            f" verified: {report.ok}"
        )

        print("6. the events Alice's sandboxes published")
        for event in events.events():
            show(event)

    print("7. accounting on: creation and execution are charged (seed §11)")
    ledger = Ledger()
    ledger.set_allowance(ALICE, 100)
    ledger.credit_spark(ALICE, 64)
    async with Engine(Vault(":memory:"), ledger=ledger) as engine:
        code = engine.vault.put_program(assemble(LOOP))
        sandbox_id = await engine.create_sandbox(CreateSandbox(ALICE, code, 65536, 60))
        await engine.exec_start(sandbox_id, ALICE)
        result = await engine.wait(sandbox_id)
        account = ledger.account(ALICE)
        print(
            f"  ran out of ticks ({result.fault.name if result.fault else None}); "
            f"Alice spent {account.ticks_spent} ticks and has {account.spark} Spark left"
        )
        try:
            await engine.create_sandbox(CreateSandbox(ALICE, code, 65536, 60))
        except ForgeError as error:
            print(f"  refused: {error}")


if __name__ == "__main__":
    asyncio.run(main())
