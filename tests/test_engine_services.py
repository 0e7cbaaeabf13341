"""Services and cycles: endpoints, ordered calls, budgets, funding, channel-7 calls, messages."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from kforge.accounting import InsufficientResources, Ledger
from kforge.asm import assemble
from kforge.core import (
    AgentId,
    EventKind,
    Hash256,
    InvalidState,
    MessageCode,
    PermissionDenied,
    SandboxNotFound,
    ServiceNotFound,
)
from kforge.engine import (
    Endpoint,
    Engine,
    SandboxState,
    Service,
    ServiceCallFailed,
    ServiceResult,
    ServiceState,
)
from kforge.events import ExtensionEventKind
from kforge.host import PeerOp, Status, parse_reply
from kforge.messages import (
    Envelope,
    ExtensionCode,
    InvalidRequest,
    ReplyCode,
    decode_payload,
    kingdom_error_from_payload,
)
from test_engine_support import OTHER, OWNER, SHORT, create, open_engine, run

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
#: Ticks one COUNTER call costs, from the delivery until it waits on RECV again.
CALL_TICKS = 3 + 1 + 1 + 1 + 3 + 1 + 1
START_TICKS = 4

UNKNOWN = Hash256(b"\xee" * 32)


def counted(number: int, data: bytes) -> bytes:
    return struct.pack("<Q", number) + data


async def make_service(
    engine: Engine,
    text: str = COUNTER,
    *,
    tick_budget: int = 10_000,
    auto_fund: bool = True,
    grants: frozenset[int] = frozenset({3}),
    endpoints: tuple[Endpoint, ...] = (Endpoint(b"count", 3, b"bytes -> u64 count | bytes"),),
    **options: Any,
) -> tuple[Hash256, Hash256]:
    sandbox_id = await create(engine, text, persistent=True, grants=grants, **options)
    service_id = await engine.create_service(
        Service(OWNER, sandbox_id, b"counter", tick_budget, auto_fund, endpoints)
    )
    return sandbox_id, service_id


def funded_ledger(spark: int = 1_000, ticks: int = 1_000_000) -> Ledger:
    ledger = Ledger()
    ledger.credit_spark(OWNER, spark)
    ledger.set_allowance(OWNER, ticks)
    return ledger


# ----------------------------------------------------------------------------- calls


def test_a_service_answers_many_calls_in_order_across_cycles() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sub = engine.bus.subscribe([EventKind.SERVICE_CALLED, EventKind.SERVICE_COMPLETED])
            sandbox_id, service_id = await make_service(engine, tick_budget=120)
            created = await engine.service_info(service_id)
            assert created.state is ServiceState.ACTIVE and created.sandbox == sandbox_id
            number = 0
            for cycle in range(4):
                calls = [
                    engine.call_service(service_id, b"count", bytes([cycle, i]), OTHER)
                    for i in range(10)
                ]
                results = await asyncio.gather(*calls)
                for i, result in enumerate(results):
                    number += 1
                    assert result.data == counted(number, bytes([cycle, i]))
                    assert result.ticks_used == CALL_TICKS
                    assert (result.service_id, result.endpoint) == (service_id, b"count")
                await engine.begin_cycle()
            info = await engine.service_info(service_id)
            assert info.calls_completed == 40 and info.calls_queued == 0 and not info.in_call
            status = await engine.sandbox_status(sandbox_id, OWNER)
            assert (
                status.state is SandboxState.BLOCKED and status.ticks_remaining == 120
            )  # refilled by the last cycle
            kinds = [event.kind for event in sub.events()]
            assert kinds == [EventKind.SERVICE_CALLED, EventKind.SERVICE_COMPLETED] * 40

    run(body)


def test_calls_never_interleave_and_keep_their_order() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            _, service_id = await make_service(engine)
            tasks = [
                asyncio.ensure_future(engine.call_service(service_id, b"count", b"x" * i, OTHER))
                for i in range(25)
            ]
            results = [await task for task in tasks]
            assert [r.data for r in results] == [counted(i + 1, b"x" * i) for i in range(25)]

    run(body)


def test_budget_exhaustion_inside_a_call_fails_it_clearly() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id, service_id = await make_service(
                engine, tick_budget=START_TICKS + 2 * CALL_TICKS + 8
            )
            first = await engine.call_service(service_id, b"count", b"a", OTHER)
            second = await engine.call_service(service_id, b"count", b"b", OTHER)
            assert (first.data, second.data) == (counted(1, b"a"), counted(2, b"b"))
            third = asyncio.ensure_future(engine.call_service(service_id, b"count", b"c", OTHER))
            fourth = asyncio.ensure_future(engine.call_service(service_id, b"count", b"d", OTHER))
            with pytest.raises(ServiceCallFailed) as caught:
                await third
            error = caught.value
            assert error.fault == "OUT_OF_TICKS" and error.state == "FAULTED"
            assert "ran out of ticks" in str(error) and "allocation" in str(error)
            assert error.ticks_used == 3 + 1 + 1 + 1  # RECV, ADD, STOREW, ADD: SEND does not fit
            wire = error.to_kingdom_error()
            assert wire.code == 0x0507 and wire.context[b"fault"] == b"OUT_OF_TICKS"
            with pytest.raises(ServiceCallFailed):
                await fourth
            assert (await engine.service_info(service_id)).state is ServiceState.FAILED
            assert (await engine.wait(sandbox_id)).state is SandboxState.FAULTED
            with pytest.raises(InvalidState):
                await engine.call_service(service_id, b"count", b"e", OTHER)

    run(body)


def test_killing_the_sandbox_fails_queued_calls() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id, service_id = await make_service(
                engine, text="top: RECV 3, r1, r2, r3\n JMP top\n"
            )
            pending = asyncio.ensure_future(engine.call_service(service_id, b"count", b"a", OTHER))
            await asyncio.sleep(0.01)
            await engine.kill_sandbox(sandbox_id, OWNER)
            with pytest.raises(ServiceCallFailed, match="KILLED"):
                await pending

    run(body)


# ----------------------------------------------------------------------------- cycles and funding


def test_auto_fund_charges_each_cycle_then_suspends_and_resumes_when_funded() -> None:
    async def body() -> None:
        ledger = funded_ledger(spark=64 + 10 + 10)  # creation (64 KiB) + two cycles
        async with open_engine(ledger=ledger) as engine:
            sub = engine.bus.subscribe(
                [ExtensionEventKind.SERVICE_SUSPENDED, ExtensionEventKind.SERVICE_RESUMED]
            )
            sandbox_id, service_id = await make_service(
                engine, tick_budget=1_000, memory_quota=65536
            )
            assert ledger.account(OWNER).spark == 10  # first cycle paid at creation
            assert ledger.account(OWNER).ticks_reserved == 1_000
            await engine.call_service(service_id, b"count", b"a", OTHER)
            cycle = await engine.begin_cycle()
            account = ledger.account(OWNER)
            assert account.spark == 0 and account.ticks_reserved == 1_000
            assert (await engine.service_info(service_id)).funded_cycle == cycle
            cycle = await engine.begin_cycle()
            info = await engine.service_info(service_id)
            assert info.state is ServiceState.SUSPENDED
            (suspended,) = sub.events()
            assert suspended.kind is ExtensionEventKind.SERVICE_SUSPENDED
            assert suspended.payload["cycle"] == cycle and "Spark" in suspended.payload["reason"]
            waiting = asyncio.ensure_future(engine.call_service(service_id, b"count", b"b", OTHER))
            await asyncio.sleep(0.02)
            assert not waiting.done() and (await engine.service_info(service_id)).calls_queued == 1
            with pytest.raises(InsufficientResources):
                await engine.fund_service(service_id, OWNER)
            ledger.credit_spark(OWNER, 10)
            await engine.fund_service(service_id, OWNER)
            assert (await waiting).data == counted(2, b"b")
            (resumed,) = sub.events()
            assert (
                resumed.kind is ExtensionEventKind.SERVICE_RESUMED
                and resumed.payload["cycle"] == cycle
            )
            assert (await engine.service_info(service_id)).state is ServiceState.ACTIVE
            await engine.fund_service(service_id, OWNER)  # already paid: nothing happens
            assert ledger.account(OWNER).spark == 0
            await engine.kill_sandbox(sandbox_id, OWNER)
            assert ledger.account(OWNER).ticks_reserved == 0

    run(body)


def test_a_service_that_is_not_auto_funded_waits_for_its_owner_each_cycle() -> None:
    async def body() -> None:
        ledger = funded_ledger()
        async with open_engine(ledger=ledger) as engine:
            _, service_id = await make_service(engine, auto_fund=False)
            await engine.begin_cycle()
            info = await engine.service_info(service_id)
            assert info.state is ServiceState.SUSPENDED
            before = ledger.account(OWNER).spark
            with pytest.raises(PermissionDenied):
                await engine.fund_service(service_id, OTHER)
            await engine.fund_service(service_id, OWNER)
            assert ledger.account(OWNER).spark == before - 10
            assert (await engine.call_service(service_id, b"count", b"", OTHER)).data == counted(
                1, b""
            )

    run(body)


def test_service_ticks_are_spent_from_the_owners_allowance_at_the_cycle_end() -> None:
    async def body() -> None:
        ledger = funded_ledger()
        async with open_engine(ledger=ledger) as engine:
            _, service_id = await make_service(engine, tick_budget=500)
            await engine.call_service(service_id, b"count", b"a", OTHER)
            spent_before = ledger.account(OWNER).ticks_spent
            await engine.begin_cycle()
            # the new cycle starts at 0 spent and the new allocation reserved
            account = ledger.account(OWNER)
            assert account.ticks_spent == 0 and account.ticks_reserved == 500
            assert spent_before == 5  # creation

    run(body)


def test_creation_is_refused_when_the_owner_cannot_pay_the_first_cycle() -> None:
    async def body() -> None:
        ledger = funded_ledger(spark=256 + 5)  # the sandbox, not the service
        async with open_engine(ledger=ledger) as engine:
            sandbox_id = await create(engine, COUNTER, persistent=True, grants=frozenset({3}))
            with pytest.raises(InsufficientResources):
                await engine.create_service(
                    Service(OWNER, sandbox_id, b"c", 100, True, (Endpoint(b"count", 3),))
                )
            assert await engine.list_services() == []

    run(body)


def test_the_cycle_timer_advances_cycles() -> None:
    async def body() -> None:
        async with open_engine(cycle_interval=0.01) as engine:
            sub = engine.bus.subscribe([ExtensionEventKind.CYCLE_STARTED])
            item = await asyncio.wait_for(sub.get(), 5)
            assert item.payload["cycle"] >= 1  # type: ignore[union-attr]
        with pytest.raises(ValueError):
            Engine(cycle_interval=0)

    run(body)


# ----------------------------------------------------------------------------- channel 7


def caller_program(service_id: Hash256, endpoint: bytes, data: bytes) -> str:
    """Sends one CALL on channel 7, then copies the ack and the answer to stdout (u64 length + bytes)."""
    request = (
        bytes([PeerOp.CALL]) + service_id.raw + struct.pack("<H", len(endpoint)) + endpoint + data
    )
    values = ", ".join(str(b) for b in request)
    return f"""
.data
req: .byte {values}
.code
        LI   r1, req
        LI   r2, {len(request)}
        SEND 7, r1, r2
        ADD  r7, r253, r0
        LI   r8, 8
        ADD  r9, r253, r8
        LI   r5, 60000
        RECV 7, r6, r9, r5
        STOREW r6, r7, 0
        SEND 0, r7, r8
        SEND 0, r9, r6
        RECV 7, r6, r9, r5
        STOREW r6, r7, 0
        SEND 0, r7, r8
        SEND 0, r9, r6
        HALT
"""


def split(output: bytes) -> list[bytes]:
    parts, offset = [], 0
    while offset < len(output):
        (length,) = struct.unpack_from("<Q", output, offset)
        parts.append(output[offset + 8 : offset + 8 + length])
        offset += 8 + length
    return parts


def test_a_sandbox_calls_a_service_over_channel_7() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            _, service_id = await make_service(engine)
            caller = await create(
                engine, caller_program(service_id, b"count", b"hello"), grants=frozenset({7})
            )
            await engine.exec_start(caller, OWNER)
            result = await engine.wait(caller, timeout=10)
            assert result.state is SandboxState.HALTED
            ack, answer = split(result.output)
            status, op, body_ = parse_reply(ack)
            assert (status, op) == (Status.OK, PeerOp.CALL)
            (ticket,) = struct.unpack("<Q", body_)
            assert answer[:2] == bytes([Status.INCOMING, PeerOp.CALL])
            assert answer[2:34] == service_id.raw
            assert struct.unpack_from("<Q", answer, 34)[0] == ticket
            assert answer[42] == Status.OK
            assert struct.unpack_from("<Q", answer, 43)[0] == CALL_TICKS
            assert answer[51:] == counted(1, b"hello")

    run(body)


def test_channel_7_call_errors() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            _, service_id = await make_service(engine)
            unknown = await create(
                engine, caller_program(UNKNOWN, b"count", b""), grants=frozenset({7})
            )
            bad_endpoint = await create(
                engine, caller_program(service_id, b"nope", b""), grants=frozenset({7})
            )
            for sandbox_id in (unknown, bad_endpoint):
                await engine.step(sandbox_id, OWNER)
                await engine.step(sandbox_id, OWNER)
                await engine.step(sandbox_id, OWNER)
                (call,) = await engine.io_log(sandbox_id, OWNER)
                assert call.status == Status.NOT_FOUND

    run(body)


def test_a_failed_service_answers_a_calling_sandbox_unavailable() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            _, service_id = await make_service(engine, text="RECV 3, r1, r2, r3\n FAULT 9\n")
            caller = await create(
                engine, caller_program(service_id, b"count", b"x"), grants=frozenset({7})
            )
            await engine.exec_start(caller, OWNER)
            result = await engine.wait(caller, timeout=10)
            _, answer = split(result.output)
            assert answer[42] == Status.UNAVAILABLE and b"USER_FAULT" in answer[51:]

    run(body)


def test_peer_messages_cannot_forge_requests_on_a_channel_7_endpoint() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id, _ = await make_service(
                engine,
                text="top: RECV 7, r1, r2, r3\n JMP top\n",
                grants=frozenset({7}),
                endpoints=(Endpoint(b"e", 7),),
            )
            from kforge.host import HostError

            with pytest.raises(HostError) as caught:
                engine.send_to_peer(UNKNOWN, OWNER, sandbox_id, b"forged")
            assert caught.value.status is Status.DENIED

    run(body)


def test_messages_on_an_endpoint_channel_outside_a_call_are_dropped() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            text = "LI r2, 1\n SEND 3, r1, r2\n" + COUNTER
            sandbox_id, service_id = await make_service(engine, text=text)
            while (await engine.sandbox_status(sandbox_id, OWNER)).state is not (
                SandboxState.BLOCKED
            ):
                await asyncio.sleep(0)
            dropped = (await engine.io_log(sandbox_id, OWNER))[0]
            assert dropped.status == Status.DENIED and not dropped.delivered
            result = await engine.call_service(service_id, b"count", b"q", OTHER)
            assert result.data == counted(1, b"q")
            # a service's logs hold what came since the call before: a call starts them afresh
            assert await engine.io_log(sandbox_id, OWNER) == ()
            assert [d.data for d in engine.state.sandbox(sandbox_id).deliveries] == [b"q"]

    run(body)


# ----------------------------------------------------------------------------- refusals


def test_create_service_refusals() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            persistent = await create(engine, COUNTER, persistent=True, grants=frozenset({3, 4}))
            transient = await create(engine, COUNTER, grants=frozenset({3}))
            stopped = await create(engine, SHORT, persistent=True, grants=frozenset({3}))
            await engine.kill_sandbox(stopped, OWNER)
            ep = (Endpoint(b"e", 3),)

            def service(sandbox: Hash256 = persistent, **changes: Any) -> Service:
                fields: dict[str, Any] = {
                    "owner": OWNER,
                    "sandbox": sandbox,
                    "name": b"s",
                    "tick_budget": 100,
                    "auto_fund": True,
                    "endpoints": ep,
                }
                fields.update(changes)
                return Service(**fields)

            cases: list[tuple[Service, type[Exception], str]] = [
                (service(UNKNOWN), SandboxNotFound, "not found"),
                (service(owner=OTHER), PermissionDenied, "owner"),
                (service(transient), InvalidRequest, "persistent"),
                (service(stopped), InvalidState, "KILLED"),
                (service(endpoints=()), InvalidRequest, "at least one"),
                (service(endpoints=(Endpoint(b"e", 2),)), InvalidRequest, "3..7"),
                (service(endpoints=(Endpoint(b"e", 9),)), InvalidRequest, "3..7"),
                (service(endpoints=(Endpoint(b"e", 5),)), PermissionDenied, "not granted"),
                (service(endpoints=(Endpoint(b"e", 3), Endpoint(b"f", 3))), InvalidRequest, "two"),
                (
                    service(endpoints=(Endpoint(b"e", 3), Endpoint(b"e", 4))),
                    InvalidRequest,
                    "twice",
                ),
                (service(endpoints=(Endpoint(b"", 3),)), InvalidRequest, "name"),
                (service(tick_budget=0), InvalidRequest, "tick_budget"),
                (service(name=b""), InvalidRequest, "name"),
                (service(auto_fund=1), InvalidRequest, "auto_fund"),
            ]
            for request, error, fragment in cases:
                with pytest.raises(error, match=fragment):
                    await engine.create_service(request)
            with pytest.raises(InvalidRequest):
                await engine.create_service("nope")  # type: ignore[arg-type]
            service_id = await engine.create_service(service())
            with pytest.raises(InvalidState, match="already a service"):
                await engine.create_service(service())
            other = await create(engine, COUNTER, persistent=True, grants=frozenset({3}))
            with pytest.raises(InvalidRequest, match="in use"):
                await engine.create_service(service(other, id=service_id))
            with pytest.raises(InvalidState):
                await engine.exec_start(persistent, OWNER)
            with pytest.raises(InvalidState):
                await engine.step(persistent, OWNER)

    run(body)


def test_call_and_fund_refusals() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            _, service_id = await make_service(engine)
            with pytest.raises(ServiceNotFound):
                await engine.call_service(UNKNOWN, b"count", b"", OTHER)
            with pytest.raises(InvalidRequest, match="no endpoint"):
                await engine.call_service(service_id, b"nope", b"", OTHER)
            with pytest.raises(InvalidRequest, match="message limit"):
                await engine.call_service(service_id, b"count", b"x" * (64 * 1024 + 1), OTHER)
            with pytest.raises(InvalidRequest):
                await engine.call_service(service_id, b"count", "text", OTHER)  # type: ignore[arg-type]
            with pytest.raises(ServiceNotFound):
                await engine.fund_service(UNKNOWN, OWNER)
            with pytest.raises(ServiceNotFound):
                await engine.service_info(UNKNOWN)
            assert [s.id for s in await engine.list_services(OWNER)] == [service_id]
            assert await engine.list_services(OTHER) == []

    run(body)


def test_funding_a_failed_service_is_refused() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id, service_id = await make_service(engine)
            await engine.kill_sandbox(sandbox_id, OWNER)
            with pytest.raises(InvalidState):
                await engine.fund_service(service_id, OWNER)

    run(body)


# ----------------------------------------------------------------------------- messages


def envelope(code: int, values: dict[str, Any], sender: AgentId = OWNER, n: int = 1) -> Envelope:
    return Envelope.build(code, sender, values, id=Hash256(bytes([n]) * 32))


def test_services_and_cycles_by_message() -> None:
    async def body() -> None:
        async with open_engine(operators=[OWNER]) as engine:
            sandbox_id = await create(engine, COUNTER, persistent=True, grants=frozenset({3}))
            values = {
                "owner": OWNER,
                "sandbox": sandbox_id,
                "name": b"c",
                "tick_budget": 1000,
                "auto_fund": True,
                "endpoints": [{"name": b"count", "channel": 3, "schema": b""}],
            }
            refused = await engine.dispatch(
                envelope(MessageCode.SERVICE_CREATE, values, sender=OTHER)
            )
            assert refused.code == ReplyCode.ERROR
            reply = await engine.dispatch(envelope(MessageCode.SERVICE_CREATE, values))
            assert reply.code == ReplyCode.ACK
            service_id = decode_payload(ReplyCode.ACK, reply.payload).service_id
            call = envelope(
                MessageCode.SERVICE_CALL,
                {"service_id": service_id, "endpoint": b"count", "data": b"m"},
                sender=OTHER,
                n=2,
            )
            ack = await engine.dispatch(call)
            assert ack.code == ReplyCode.ACK
            answer = await asyncio.wait_for(engine.mailbox.get(OTHER), 5)
            assert answer.code == MessageCode.SERVICE_RESULT and answer.reply_to == call.id
            assert decode_payload(MessageCode.SERVICE_RESULT, answer.payload) == ServiceResult(
                service_id, b"count", counted(1, b"m"), CALL_TICKS
            )
            advanced = await engine.dispatch(
                envelope(
                    ExtensionCode.CYCLE_ADVANCE, {"allowances": [{"agent": OWNER, "ticks": 5}]}, n=3
                )
            )
            assert decode_payload(ReplyCode.ACK, advanced.payload).cycle == 1
            assert engine.ledger.account(OWNER).tick_allowance == 5
            fund = await engine.dispatch(
                envelope(ExtensionCode.SERVICE_FUND, {"service_id": service_id}, n=4)
            )
            assert fund.code == ReplyCode.ACK
            await engine.kill_sandbox(sandbox_id, OWNER)
            late = envelope(
                MessageCode.SERVICE_CALL,
                {"service_id": service_id, "endpoint": b"count", "data": b""},
                n=5,
            )
            error = await engine.dispatch(late)
            assert kingdom_error_from_payload(error.payload).code == 0x0501

    run(body)


def test_a_failed_call_by_message_is_answered_with_an_error() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            _, service_id = await make_service(engine, text="RECV 3, r1, r2, r3\n FAULT 1\n")
            call = envelope(
                MessageCode.SERVICE_CALL,
                {"service_id": service_id, "endpoint": b"count", "data": b""},
            )
            assert (await engine.dispatch(call)).code == ReplyCode.ACK
            answer = await asyncio.wait_for(engine.mailbox.get(OWNER), 5)
            assert answer.code == ReplyCode.ERROR and answer.reply_to == call.id
            error = kingdom_error_from_payload(answer.payload)
            assert error.code == 0x0507 and error.context[b"fault"] == b"USER_FAULT"

    run(body)


def test_cycle_advance_by_message_is_for_operators_only() -> None:
    async def body() -> None:
        async with open_engine(operators=[OWNER]) as engine:
            refused = await engine.dispatch(envelope(ExtensionCode.CYCLE_ADVANCE, {}, sender=OTHER))
            assert kingdom_error_from_payload(refused.payload).code == 0x0502
            accepted = await engine.dispatch(envelope(ExtensionCode.CYCLE_ADVANCE, {}, n=2))
            assert decode_payload(ReplyCode.ACK, accepted.payload).cycle == 1
            assert engine.cycle == 1

    run(body)


def test_service_programs_assemble() -> None:
    assert assemble(COUNTER).code
