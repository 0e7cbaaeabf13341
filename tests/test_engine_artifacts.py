"""Linking (LINK_RESOLVE) and execution proofs (PROOF_REQUEST) through the engine."""

from __future__ import annotations

import asyncio
import struct

import pytest

from kforge.accounting import Ledger
from kforge.core import (
    ErrorCategory,
    EventKind,
    Hash256,
    InvalidState,
    MessageCode,
    PermissionDenied,
    UnresolvedSymbol,
    VaultFetchFailed,
)
from kforge.engine import CreateSandbox, SandboxState, seeded_random
from kforge.host import OracleOp
from kforge.link import Import
from kforge.messages import Envelope, ReplyCode, decode_payload, kingdom_error_from_payload
from kforge.proofs import ExecutionProof, verify_proof
from test_engine_support import (
    ECHO_TWICE,
    LOOP,
    OTHER,
    OWNER,
    SHORT,
    create,
    execute,
    host_client,
    open_engine,
    put,
    run,
)

LIBRARY = """
.export double
double: ADD r1, r1, r1
        RET
"""

MAIN = """
.import double
        LI     r1, 21
        CALL   double
        STOREW r1, r253, 0
        LI     r2, 8
        SEND   0, r253, r2
        HALT
"""


def envelope(code: int, values: dict[str, object], sender: object = OWNER, n: int = 1) -> Envelope:
    return Envelope.build(code, sender, values, id=Hash256.of(b"req" + bytes([n])))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- linking


def test_link_resolve_stores_a_runnable_program_and_announces_it() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            linked_events = engine.bus.subscribe([EventKind.LINK_COMPLETED])
            library = await put(engine, LIBRARY)
            main = await put(engine, MAIN)
            with pytest.raises(Exception, match="unresolved"):
                await engine.create_sandbox(CreateSandbox(OWNER, main, 4096, 100))
            resolved = await engine.link_resolve(main, [Import(library, (b"double",))], OWNER)
            assert resolved in engine.vault
            assert (
                await engine.link_resolve(main, [Import(library, (b"double",))], OWNER) == resolved
            )
            sandbox_id = await engine.create_sandbox(CreateSandbox(OWNER, resolved, 4096, 100))
            await engine.exec_start(sandbox_id, OWNER)
            assert (await engine.wait(sandbox_id, timeout=10)).output == struct.pack("<Q", 42)
            event = linked_events.events()[0]
            assert event.payload == {"original": main, "resolved": resolved, "import_count": 1}
            assert event.owner == OWNER and event.sandbox_id is None

    run(body)


def test_link_failures_are_forge_errors() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            library = await put(engine, LIBRARY)
            main = await put(engine, MAIN)
            with pytest.raises(UnresolvedSymbol):
                await engine.link_resolve(main, [], OWNER)
            with pytest.raises(UnresolvedSymbol):
                await engine.link_resolve(main, [Import(library, (b"triple",))], OWNER)
            with pytest.raises(VaultFetchFailed):
                await engine.link_resolve(main, [Import(Hash256.of(b"x"), (b"double",))], OWNER)
            with pytest.raises(VaultFetchFailed):
                await engine.link_resolve(Hash256.of(b"x"), [], OWNER)

    run(body)


def test_linking_costs_two_ticks_per_import() -> None:
    async def body() -> None:
        ledger = Ledger()
        ledger.set_allowance(OWNER, 3)
        async with open_engine(ledger=ledger) as engine:
            library = await put(engine, LIBRARY)
            main = await put(engine, MAIN)
            imports = [Import(library, (b"double",))]
            await engine.link_resolve(main, imports, OWNER)
            assert ledger.account(OWNER).ticks_spent == 2
            with pytest.raises(Exception, match="insufficient ticks"):
                await engine.link_resolve(main, imports, OWNER)

    run(body)


def test_link_resolve_by_message() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            library = await put(engine, LIBRARY)
            main = await put(engine, MAIN)
            imports = [{"from": library, "symbols": [b"double"]}]
            reply = await engine.dispatch(
                envelope(MessageCode.LINK_RESOLVE, {"program": main, "imports": imports})
            )
            assert reply.code == ReplyCode.LINK_RESULT
            resolved = decode_payload(ReplyCode.LINK_RESULT, reply.payload).resolved
            assert resolved == await engine.link_resolve(
                main, [Import(library, (b"double",))], OWNER
            )
            bad = await engine.dispatch(
                envelope(MessageCode.LINK_RESOLVE, {"program": main, "imports": []}, n=2)
            )
            error = kingdom_error_from_payload(bad.payload)
            assert (error.category, error.code) == (ErrorCategory.INVALID_REQUEST, 0x0503)

    run(body)


# ----------------------------------------------------------------------------- proofs


def test_a_proof_of_a_run_with_input_and_host_calls_verifies() -> None:
    async def body() -> None:
        async with open_engine(oracle={b"k": b"v"}) as engine:
            generated = engine.bus.subscribe([EventKind.PROOF_GENERATED])
            echo = await create(engine, ECHO_TWICE, input=b"one ")
            await engine.exec_start(echo, OWNER)
            while (await engine.sandbox_status(echo, OWNER)).state is not SandboxState.BLOCKED:
                await asyncio.sleep(0)
            await engine.deliver(echo, 2, b"two", OWNER)
            client = await execute(
                engine,
                host_client(4, [bytes([OracleOp.QUERY]) + b"k"]),
                grants=frozenset({4}),
            )
            await engine.wait(echo, timeout=10)
            for sandbox_id in (echo, client.sandbox_id):
                proof = await engine.request_proof(sandbox_id, OWNER)
                record = await engine.run_record(sandbox_id, OWNER)
                program = engine.programs.load(record.program_id)
                report = verify_proof(
                    proof, program, record, engine.signer.public_raw, tier="reference"
                )
                assert report.ok, report.summary()
                result = await engine.wait(sandbox_id)
                assert proof.output == Hash256.of(result.output)
                assert proof.ticks_used == result.ticks_used
            events = generated.events()
            assert len(events) == 2
            assert set(events[0].payload) == {
                "program",
                "input",
                "output",
                "ticks_used",
                "trace_hash",
                "forge_sig",
            }

    run(body)


def test_faulted_runs_are_provable_and_others_are_not() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            faulted = await execute(engine, "FAULT 9\n")
            proof = await engine.request_proof(faulted.sandbox_id, OWNER)
            assert proof.final_state == "FAULTED" and proof.fault == 0xFF
            ready = await create(engine, SHORT)
            with pytest.raises(InvalidState):
                await engine.request_proof(ready, OWNER)
            await engine.kill_sandbox(ready, OWNER)
            with pytest.raises(InvalidState):
                await engine.request_proof(ready, OWNER)
            with pytest.raises(PermissionDenied):
                await engine.request_proof(faulted.sandbox_id, OTHER)

    run(body)


def test_proofs_cost_twice_the_ticks_of_the_run() -> None:
    async def body() -> None:
        ledger = Ledger()
        ledger.set_allowance(OWNER, 1000)
        ledger.credit_spark(OWNER, 10)
        async with open_engine(ledger=ledger) as engine:
            result = await execute(engine, LOOP, memory_quota=1024, tick_budget=100)
            spent = ledger.account(OWNER).ticks_spent
            await engine.request_proof(result.sandbox_id, OWNER)
            assert ledger.account(OWNER).ticks_spent == spent + 200
            ledger.set_allowance(OWNER, spent + 200 + 199)
            with pytest.raises(Exception, match="insufficient ticks"):
                await engine.request_proof(result.sandbox_id, OWNER)

    run(body)


def test_proofs_are_deterministic_with_a_seeded_engine() -> None:
    async def proof(seed: int) -> ExecutionProof:
        async with open_engine(random_source=seeded_random(seed)) as engine:
            result = await execute(engine, SHORT)
            return await engine.request_proof(result.sandbox_id, OWNER)

    first, second, other = run(lambda: proof(5)), run(lambda: proof(5)), run(lambda: proof(6))
    assert first == second
    assert first.trace_hash == other.trace_hash and first.forge_sig != other.forge_sig


def test_proof_request_by_message_acks_then_posts_the_proof() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            result = await execute(engine, SHORT)
            request = envelope(MessageCode.PROOF_REQUEST, {"sandbox_id": result.sandbox_id})
            ack = await engine.dispatch(request)
            assert ack.code == ReplyCode.ACK
            posted = await asyncio.wait_for(engine.mailbox.get(OWNER), 30)
            assert (posted.code, posted.reply_to) == (MessageCode.PROOF_RESULT, request.id)
            values = decode_payload(MessageCode.PROOF_RESULT, posted.payload)
            proof = ExecutionProof.from_bytes(values.proof)
            assert values.trace_hash == proof.trace_hash and values.forge_sig == proof.forge_sig
            refused = await engine.dispatch(
                envelope(MessageCode.PROOF_REQUEST, {"sandbox_id": Hash256.of(b"x")}, n=2)
            )
            assert kingdom_error_from_payload(refused.payload).category is ErrorCategory.NOT_FOUND

    run(body)


def test_a_proof_that_fails_later_is_posted_as_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> ExecutionProof:
        raise RuntimeError("replay exploded")

    async def body() -> None:
        ledger = Ledger()
        ledger.set_allowance(OWNER, 1000)
        ledger.credit_spark(OWNER, 10)
        async with open_engine(ledger=ledger) as engine:
            result = await execute(engine, SHORT, memory_quota=1024, tick_budget=10)
            spent = ledger.account(OWNER).ticks_spent
            monkeypatch.setattr("kforge.engine.artifacts.prove_run", broken)
            request = envelope(MessageCode.PROOF_REQUEST, {"sandbox_id": result.sandbox_id})
            assert (await engine.dispatch(request)).code == ReplyCode.ACK
            posted = await asyncio.wait_for(engine.mailbox.get(OWNER), 30)
            assert posted.code == ReplyCode.ERROR and posted.reply_to == request.id
            assert b"replay exploded" in kingdom_error_from_payload(posted.payload).message
            assert ledger.account(OWNER).ticks_spent == spent  # refunded

    run(body)
