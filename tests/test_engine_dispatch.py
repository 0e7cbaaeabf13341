"""Message dispatch: every inbound code, its reply, and every error category on the wire."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from kforge.core import AgentId, ErrorCategory, Hash256, KingdomError, MessageCode
from kforge.engine import Engine, EngineLimits, ExecResult, SandboxState
from kforge.isa import FaultCode
from kforge.messages import (
    Envelope,
    ExtensionCode,
    ReplyCode,
    decode_payload,
    kingdom_error_from_payload,
    pack,
)
from kforge.messages.payloads import Ack
from test_engine_support import ECHO, ECHO_TWICE, OTHER, OWNER, SHORT, open_engine, put, run

_ids = itertools.count(1)
UNKNOWN = Hash256(b"\xee" * 32)


def request(code: int, values: dict[str, Any], sender: AgentId = OWNER) -> Envelope:
    return Envelope.build(code, sender, values, id=Hash256.of(next(_ids).to_bytes(8, "big")))


def raw_request(code: int, wire: Any, sender: AgentId = OWNER) -> Envelope:
    return Envelope(Hash256.of(next(_ids).to_bytes(8, "big")), sender, code, pack(wire))


def error_of(reply: Envelope) -> KingdomError:
    assert reply.code == ReplyCode.ERROR, reply
    return kingdom_error_from_payload(reply.payload)


async def create_by_message(engine: Engine, text: str, **values: Any) -> Hash256:
    code = await put(engine, text)
    payload = {"owner": OWNER, "code": code, "memory_quota": 65536, "tick_budget": 10_000, **values}
    reply = await engine.dispatch(request(MessageCode.SANDBOX_CREATE, payload))
    assert reply.code == ReplyCode.ACK, error_of(reply)
    sandbox_id = decode_payload(ReplyCode.ACK, reply.payload).sandbox_id
    assert isinstance(sandbox_id, Hash256)
    return sandbox_id


def test_create_status_exec_and_the_later_exec_result() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create_by_message(engine, ECHO, input=b"wire", deadline_ms=5000)
            status = await engine.dispatch(
                request(MessageCode.SANDBOX_STATUS, {"sandbox_id": sandbox_id})
            )
            assert status.code == ReplyCode.SANDBOX_INFO and status.sender == engine.agent_id
            info = decode_payload(ReplyCode.SANDBOX_INFO, status.payload)
            assert (
                info.id == sandbox_id and info.state is SandboxState.READY and info.owner == OWNER
            )
            start = request(MessageCode.EXEC_START, {"sandbox_id": sandbox_id})
            ack = await engine.dispatch(start)
            assert (ack.code, ack.reply_to) == (ReplyCode.ACK, start.id)
            assert decode_payload(ReplyCode.ACK, ack.payload) == Ack()
            result_envelope = await asyncio.wait_for(engine.mailbox.get(OWNER), 10)
            assert result_envelope.code == MessageCode.EXEC_RESULT
            assert result_envelope.reply_to == start.id
            result = decode_payload(MessageCode.EXEC_RESULT, result_envelope.payload)
            assert isinstance(result, ExecResult)
            assert result == await engine.wait(sandbox_id)
            assert result.output == b"wire" and result.state is SandboxState.HALTED

    run(body)


def test_a_faulted_exec_result_carries_the_fault() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create_by_message(engine, "FAULT 77\n")
            await engine.dispatch(request(MessageCode.EXEC_START, {"sandbox_id": sandbox_id}))
            envelope = await asyncio.wait_for(engine.mailbox.get(OWNER), 10)
            result = decode_payload(MessageCode.EXEC_RESULT, envelope.payload)
            assert (result.state, result.fault, result.fault_detail) == (
                SandboxState.FAULTED,
                0xFF,
                77,
            )
            assert result.fault is FaultCode.USER_FAULT

    run(body)


def test_kill_and_deliver_are_acknowledged() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create_by_message(engine, ECHO_TWICE, input=b"1")
            await engine.exec_start(sandbox_id, OWNER)
            deliver = request(
                ExtensionCode.SANDBOX_DELIVER,
                {"sandbox_id": sandbox_id, "channel": 2, "data": b"2"},
            )
            assert (await engine.dispatch(deliver)).code == ReplyCode.ACK
            assert (await engine.wait(sandbox_id, timeout=10)).output == b"12"
            other = await create_by_message(engine, SHORT)
            kill = await engine.dispatch(request(MessageCode.SANDBOX_KILL, {"sandbox_id": other}))
            assert (
                kill.code == ReplyCode.ACK and decode_payload(ReplyCode.ACK, kill.payload) == Ack()
            )
            assert (await engine.wait(other)).state is SandboxState.KILLED

    run(body)


@pytest.mark.parametrize(
    ("code", "values", "category"),
    [
        (
            MessageCode.SERVICE_CREATE,
            {
                "owner": OWNER,
                "sandbox": UNKNOWN,
                "name": b"s",
                "tick_budget": 1,
                "auto_fund": False,
                "endpoints": [],
            },
            ErrorCategory.INVALID_REQUEST,
        ),
        (
            MessageCode.SERVICE_CALL,
            {"service_id": UNKNOWN, "endpoint": b"e", "data": b""},
            ErrorCategory.NOT_FOUND,
        ),
    ],
)
def test_service_requests_are_checked_before_anything_happens(
    code: int, values: dict[str, Any], category: ErrorCategory
) -> None:
    async def body() -> None:
        async with open_engine() as engine:
            error = error_of(await engine.dispatch(request(code, values)))
            assert error.category is category

    run(body)


def test_every_error_category_reaches_the_wire() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(max_memory_quota=4096)) as engine:
            sandbox_id = await create_by_message(engine, SHORT, memory_quota=4096)
            await engine.kill_sandbox(sandbox_id, OWNER)
            cases = [
                (
                    request(MessageCode.SANDBOX_STATUS, {"sandbox_id": UNKNOWN}),
                    ErrorCategory.NOT_FOUND,
                    0x0500,
                ),
                (
                    request(MessageCode.SANDBOX_KILL, {"sandbox_id": sandbox_id}),
                    ErrorCategory.CONFLICT,
                    0x0501,
                ),
                (
                    request(MessageCode.SANDBOX_STATUS, {"sandbox_id": sandbox_id}, sender=OTHER),
                    ErrorCategory.UNAUTHORIZED,
                    0x0502,
                ),
                (
                    request(
                        MessageCode.SANDBOX_CREATE,
                        {
                            "owner": OWNER,
                            "code": engine.vault.put(b"FRGP junk"),
                            "memory_quota": 64,
                            "tick_budget": 1,
                        },
                    ),
                    ErrorCategory.INVALID_REQUEST,
                    0x0503,
                ),
                (
                    raw_request(MessageCode.SANDBOX_STATUS, {"sandbox_id": 5}),
                    ErrorCategory.INVALID_REQUEST,
                    0x0506,
                ),
                (
                    request(
                        MessageCode.SANDBOX_CREATE,
                        {
                            "owner": OWNER,
                            "code": UNKNOWN,
                            "memory_quota": 1 << 20,
                            "tick_budget": 1,
                        },
                    ),
                    ErrorCategory.QUOTA_EXCEEDED,
                    0x0504,
                ),
                (
                    request(
                        MessageCode.SANDBOX_CREATE,
                        {"owner": OWNER, "code": UNKNOWN, "memory_quota": 64, "tick_budget": 1},
                    ),
                    ErrorCategory.INTERNAL,
                    0x0505,
                ),
            ]
            for envelope, category, code in cases:
                reply = await engine.dispatch(envelope)
                error = error_of(reply)
                assert (error.category, error.code) == (category, code), error
                assert reply.reply_to == envelope.id

    run(body)


def test_malformed_payloads_are_invalid_request_naming_the_field() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            cases = [
                (raw_request(MessageCode.SANDBOX_CREATE, {"owner": OWNER.raw}), b"code"),
                (raw_request(MessageCode.EXEC_START, {"sandbox_id": b"x"}), b"sandbox_id"),
                (raw_request(MessageCode.SANDBOX_KILL, [1]), b"payload"),
                (Envelope(UNKNOWN, OWNER, MessageCode.SANDBOX_STATUS, b"\xc1"), b"payload"),
                (
                    raw_request(
                        MessageCode.LINK_RESOLVE, {"program": UNKNOWN.raw, "imports": [{"from": 1}]}
                    ),
                    b"imports[0].from",
                ),
                (
                    raw_request(
                        ExtensionCode.SANDBOX_DELIVER, {"sandbox_id": UNKNOWN.raw, "channel": 2}
                    ),
                    b"data",
                ),
                (raw_request(0x0999, {}), b"envelope.code"),
                (raw_request(MessageCode.EXEC_RESULT, {}), b"envelope.code"),
                (raw_request(ReplyCode.ACK, {}), b"envelope.code"),
            ]
            for envelope, field in cases:
                error = error_of(await engine.dispatch(envelope))
                assert error.category is ErrorCategory.INVALID_REQUEST
                assert error.context[b"field"] == field, error

    run(body)


def test_creating_for_another_owner_is_unauthorized() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            code = await put(engine, SHORT)
            payload = {"owner": OWNER, "code": code, "memory_quota": 4096, "tick_budget": 10}
            error = error_of(
                await engine.dispatch(request(MessageCode.SANDBOX_CREATE, payload, sender=OTHER))
            )
            assert error.category is ErrorCategory.UNAUTHORIZED

    run(body)


def test_dispatch_bytes_answers_even_garbage() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            garbage = Envelope.decode(await engine.dispatch_bytes(b"\x00\x01garbage"))
            assert garbage.reply_to is None
            assert error_of(garbage).context[b"field"] == b"envelope"
            sandbox_id = await create_by_message(engine, SHORT)
            envelope = request(MessageCode.SANDBOX_STATUS, {"sandbox_id": sandbox_id})
            reply = Envelope.decode(await engine.dispatch_bytes(envelope.encode()))
            assert reply.code == ReplyCode.SANDBOX_INFO and reply.reply_to == envelope.id
            not_an_envelope = await engine.dispatch("envelope")  # type: ignore[arg-type]
            assert error_of(not_an_envelope).category is ErrorCategory.INVALID_REQUEST

    run(body)


def test_an_unexpected_exception_becomes_an_internal_error_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    async def body() -> None:
        async with open_engine() as engine:
            monkeypatch.setattr(engine.sandboxes, "status", broken)
            reply = await engine.dispatch(
                request(MessageCode.SANDBOX_STATUS, {"sandbox_id": UNKNOWN})
            )
            error = error_of(reply)
            assert (
                error.category is ErrorCategory.INTERNAL and b"RuntimeError: a bug" in error.message
            )

    run(body)


def test_a_closed_engine_answers_with_an_error() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            pass
        code = UNKNOWN
        reply = await engine.dispatch(
            request(
                MessageCode.SANDBOX_CREATE,
                {"owner": OWNER, "code": code, "memory_quota": 64, "tick_budget": 1},
            )
        )
        assert error_of(reply).category is ErrorCategory.INTERNAL

    run(body)
