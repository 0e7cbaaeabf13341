"""Envelopes, payload schemas for every code, malformed input, the mailbox."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack  # type: ignore[import-untyped, unused-ignore]
import pytest

from kforge.core import AgentId, ErrorCategory, Hash256, KingdomError, MessageCode
from kforge.messages import (
    SCHEMAS,
    Envelope,
    ExtensionCode,
    InvalidRequest,
    Mailbox,
    ReplyCode,
    code_name,
    decode_payload,
    encode_payload,
    error_payload,
    kingdom_error_from_payload,
    pack,
    unpack,
)
from kforge.messages.payloads import Ack, SandboxRef
from kforge.wire import convert

SENDER = AgentId(b"\x05" * 32)
ID = Hash256(b"\x06" * 32)
H = Hash256(b"\x07" * 32)

#: One valid payload (as Python values) per code.
VALID: dict[int, dict[str, Any]] = {
    MessageCode.SANDBOX_CREATE: {
        "owner": SENDER,
        "code": H,
        "memory_quota": 65536,
        "tick_budget": 1000,
        "input": b"in",
        "environment": {b"k": b"v"},
        "persistent": False,
        "grants": [3, 7],
        "accept_from": [SENDER],
        "deadline_ms": 1500,
    },
    MessageCode.SANDBOX_STATUS: {"sandbox_id": H},
    MessageCode.SANDBOX_KILL: {"sandbox_id": H},
    MessageCode.EXEC_START: {"sandbox_id": H},
    MessageCode.EXEC_RESULT: {
        "sandbox_id": H,
        "state": "FAULTED",
        "ticks_used": 9,
        "output": b"out",
        "fault": 0xFF,
        "fault_detail": 3,
    },
    MessageCode.PROOF_REQUEST: {"sandbox_id": H},
    MessageCode.PROOF_RESULT: {
        "program": H,
        "input": H,
        "output": H,
        "ticks_used": 1,
        "trace_hash": H,
        "forge_sig": b"sig",
    },
    MessageCode.SERVICE_CREATE: {
        "id": None,
        "owner": SENDER,
        "sandbox": H,
        "name": b"svc",
        "tick_budget": 10,
        "auto_fund": True,
        "endpoints": [{"name": b"get", "channel": 7, "schema": b""}],
    },
    MessageCode.SERVICE_CALL: {"service_id": H, "endpoint": b"get", "data": b"x"},
    MessageCode.SERVICE_RESULT: {
        "service_id": H,
        "endpoint": b"get",
        "data": b"y",
        "ticks_used": 4,
    },
    MessageCode.LINK_RESOLVE: {"program": H, "imports": [{"from": H, "symbols": [b"f"]}]},
    ExtensionCode.SANDBOX_DELIVER: {"sandbox_id": H, "channel": 2, "data": b"x"},
    ExtensionCode.CYCLE_ADVANCE: {"allowances": [{"agent": SENDER, "ticks": 5}]},
    ExtensionCode.SERVICE_FUND: {"service_id": H},
    ReplyCode.ACK: {"sandbox_id": H},
    ReplyCode.ERROR: {"code": 0x0500, "category": "NotFound", "message": b"m", "context": {}},
    ReplyCode.SANDBOX_INFO: {
        "id": H,
        "owner": SENDER,
        "state": "READY",
        "ticks_used": 0,
        "ticks_remaining": 10,
        "memory_used": 8,
        "memory_quota": 64,
        "persistent": False,
        "blocked_channel": None,
    },
    ReplyCode.LINK_RESULT: {"resolved": H},
}


def test_every_code_has_a_schema_and_a_name() -> None:
    codes = {*MessageCode, *ReplyCode, *ExtensionCode}
    assert set(SCHEMAS) == codes
    assert set(VALID) == codes
    assert code_name(0x0503) == "EXEC_START"
    assert code_name(0x05F1) == "ERROR"
    assert code_name(0x0999) == "0x0999"


@pytest.mark.parametrize("code", sorted(VALID), ids=code_name)
def test_valid_payloads_round_trip(code: int) -> None:
    payload = encode_payload(code, VALID[code])
    decoded = decode_payload(code, payload)
    assert isinstance(decoded, SCHEMAS[code]) and decoded == convert(VALID[code], SCHEMAS[code])
    wire = unpack(payload)
    for name, value in VALID[code].items():
        assert wire[name] == unpack(pack(value)), name
    assert encode_payload(code, decoded) == payload


def test_optional_fields_take_their_defaults() -> None:
    minimal = pack({"owner": SENDER.raw, "code": H.raw, "memory_quota": 1, "tick_budget": 2})
    values = decode_payload(MessageCode.SANDBOX_CREATE, minimal)
    assert values.input == b"" and values.environment is None and values.grants == frozenset()
    assert values.persistent is False and values.deadline_ms is None
    assert isinstance(values.owner, AgentId) and isinstance(values.code, Hash256)
    assert decode_payload(ReplyCode.ACK, pack({})) == Ack()


@pytest.mark.parametrize(
    ("code", "wire", "field", "reason"),
    [
        (MessageCode.SANDBOX_STATUS, {}, "sandbox_id", "missing"),
        (MessageCode.SANDBOX_STATUS, {"sandbox_id": b"short"}, "sandbox_id", "32-byte"),
        (MessageCode.SANDBOX_STATUS, {"sandbox_id": "text"}, "sandbox_id", "got str"),
        (MessageCode.SANDBOX_STATUS, {"sandbox_id": H.raw, "extra": 1}, "extra", "unknown field"),
        (
            MessageCode.SANDBOX_CREATE,
            {"owner": SENDER.raw, "code": H.raw, "memory_quota": -1, "tick_budget": 1},
            "memory_quota",
            ">= 0",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {"owner": SENDER.raw, "code": H.raw, "memory_quota": 1.5, "tick_budget": 1},
            "memory_quota",
            "got `float`",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {"owner": SENDER.raw, "code": H.raw, "memory_quota": True, "tick_budget": 1},
            "memory_quota",
            "got `bool`",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {
                "owner": SENDER.raw,
                "code": H.raw,
                "memory_quota": 1,
                "tick_budget": 1,
                "persistent": 1,
            },
            "persistent",
            "expected `bool`",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {
                "owner": SENDER.raw,
                "code": H.raw,
                "memory_quota": 1,
                "tick_budget": 1,
                "environment": {"k": b"v"},
            },
            "environment key",
            "expected `bytes`",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {
                "owner": SENDER.raw,
                "code": H.raw,
                "memory_quota": 1,
                "tick_budget": 1,
                "environment": {b"k": 1},
            },
            "environment[...]",
            "expected `bytes`",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {
                "owner": SENDER.raw,
                "code": H.raw,
                "memory_quota": 1,
                "tick_budget": 1,
                "grants": [300],
            },
            "grants[0]",
            "<= 15",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {"owner": SENDER.raw, "code": H.raw, "memory_quota": 1, "tick_budget": 1, "grants": 3},
            "grants",
            "expected `array`",
        ),
        (
            MessageCode.SANDBOX_CREATE,
            {
                "owner": SENDER.raw,
                "code": H.raw,
                "memory_quota": 1,
                "tick_budget": 1,
                "input": "text",
            },
            "input",
            "expected `bytes`",
        ),
        (
            MessageCode.LINK_RESOLVE,
            {"program": H.raw, "imports": [{"from": b"x", "symbols": []}]},
            "imports[0].from",
            "32-byte",
        ),
        (MessageCode.LINK_RESOLVE, {"program": H.raw, "imports": [7]}, "imports[0]", "`object`"),
        (
            MessageCode.EXEC_RESULT,
            {"sandbox_id": H.raw, "state": "DONE", "ticks_used": 1, "output": b"", "fault": None},
            "state",
            "invalid enum value",
        ),
        (
            ReplyCode.ERROR,
            {"code": 1, "category": "Oops", "message": b""},
            "category",
            "invalid enum value",
        ),
        (0x0999, {}, "envelope.code", "unknown message code"),
    ],
)
def test_malformed_payloads_name_the_field(code: int, wire: Any, field: str, reason: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        decode_payload(code, pack(wire))
    assert error.value.field == field
    assert reason in error.value.reason
    kingdom = error.value.to_kingdom_error()
    assert kingdom.category is ErrorCategory.INVALID_REQUEST
    assert kingdom.context[b"field"] == field.encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xc1", "not valid msgpack"),
        (pack([1, 2]), "expected `object`"),
        (pack({1: 2}), "expected `str`"),
        (pack({"sandbox_id": H.raw}) + b"\x00", "not valid msgpack"),
        (b"", "not valid msgpack"),
    ],
)
def test_payloads_that_are_not_maps_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        decode_payload(MessageCode.SANDBOX_STATUS, raw)
    assert error.value.field.startswith("payload")  # "payload key" for a key that is no name
    assert reason in error.value.reason


def test_unpack_refuses_non_bytes_and_oversized_input() -> None:
    with pytest.raises(InvalidRequest, match="must be bytes"):
        unpack("text")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="limit"):
        unpack(b"\x00" * (16 * 1024 * 1024 + 1))


def test_encode_payload_refuses_what_the_schema_does_not_know() -> None:
    with pytest.raises(InvalidRequest, match="unknown field"):
        encode_payload(MessageCode.SANDBOX_KILL, {"sandbox_id": H, "why": b""})
    with pytest.raises(InvalidRequest, match="missing"):
        encode_payload(MessageCode.SANDBOX_KILL, {})
    with pytest.raises(InvalidRequest, match="unknown message code"):
        encode_payload(0x0999, {})
    with pytest.raises(InvalidRequest, match="32-byte id"):
        encode_payload(MessageCode.SANDBOX_KILL, {"sandbox_id": b"raw"})


def test_envelopes_round_trip_through_msgpack() -> None:
    request = Envelope.build(
        MessageCode.SANDBOX_STATUS, SENDER, {"sandbox_id": H}, id=ID, timestamp=5
    )
    assert Envelope.decode(request.encode()) == request
    assert request.values() == SandboxRef(H)
    reply = Envelope(ID, SENDER, ReplyCode.ACK, pack({}), 6, reply_to=H)
    decoded = Envelope.decode(reply.encode())
    assert decoded == reply and isinstance(decoded.sender, AgentId)


def test_envelope_sender_given_as_a_hash_becomes_an_agent_id() -> None:
    envelope = Envelope(ID, Hash256(SENDER.raw), 1)  # type: ignore[arg-type]
    assert isinstance(envelope.sender, AgentId)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"\xc1", "envelope"),
        (pack([]), "envelope"),
        (
            pack(
                {
                    "id": ID.raw,
                    "sender": SENDER.raw,
                    "code": 1,
                    "payload": b"",
                    "timestamp": 0,
                    "x": 1,
                }
            ),
            "envelope.x",
        ),
        (pack({"sender": SENDER.raw, "code": 1, "payload": b"", "timestamp": 0}), "envelope.id"),
        (
            pack({"id": ID.raw, "sender": b"x", "code": 1, "payload": b"", "timestamp": 0}),
            "envelope.sender",
        ),
        (
            pack(
                {
                    "id": ID.raw,
                    "sender": SENDER.raw,
                    "code": 1 << 16,
                    "payload": b"",
                    "timestamp": 0,
                }
            ),
            "envelope.code",
        ),
        (
            pack({"id": ID.raw, "sender": SENDER.raw, "code": 1, "payload": {}, "timestamp": 0}),
            "envelope.payload",
        ),
        (
            pack({"id": ID.raw, "sender": SENDER.raw, "code": 1, "payload": b"", "timestamp": -1}),
            "envelope.timestamp",
        ),
        (
            pack(
                {
                    "id": ID.raw,
                    "sender": SENDER.raw,
                    "code": 1,
                    "payload": b"",
                    "timestamp": 0,
                    "reply_to": 5,
                }
            ),
            "envelope.reply_to",
        ),
    ],
)
def test_malformed_envelopes_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        Envelope.decode(raw)
    assert error.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": b"x" * 32}, "envelope.id"),
        ({"sender": "me"}, "envelope.sender"),
        ({"code": "0x0500"}, "envelope.code"),
        ({"code": True}, "envelope.code"),
        ({"payload": "text"}, "envelope.payload"),
        ({"timestamp": 1.5}, "envelope.timestamp"),
        ({"reply_to": b"x"}, "envelope.reply_to"),
    ],
)
def test_constructing_a_malformed_envelope_names_the_field(
    kwargs: dict[str, Any], field: str
) -> None:
    values: dict[str, Any] = {"id": ID, "sender": SENDER, "code": 1, "payload": b"", "timestamp": 0}
    values.update(kwargs)
    with pytest.raises(InvalidRequest) as error:
        Envelope(**values)
    assert error.value.field == field


def test_error_payload_carries_a_kingdom_error() -> None:
    error = KingdomError(0x0504, ErrorCategory.QUOTA_EXCEEDED, b"too much", {b"resource": b"ticks"})
    assert kingdom_error_from_payload(error_payload(error)) == error


def test_payloads_are_plain_msgpack_maps() -> None:
    payload = encode_payload(MessageCode.SANDBOX_KILL, {"sandbox_id": H})
    assert msgpack.unpackb(payload) == {"sandbox_id": H.raw}


def test_mailbox_is_bounded_per_recipient_and_counts_drops() -> None:
    async def body() -> None:
        mailbox = Mailbox(maxsize=2)
        other = AgentId(b"\x09" * 32)
        envelopes = [Envelope(Hash256(bytes([n]) * 32), SENDER, 1) for n in range(3)]
        for envelope in envelopes:
            mailbox.post(SENDER, envelope)
        assert mailbox.dropped(SENDER) == 1 and mailbox.dropped(other) == 0
        assert mailbox.get_nowait(SENDER) == envelopes[1]
        assert mailbox.drain(SENDER) == [envelopes[2]]
        assert mailbox.get_nowait(SENDER) is None and mailbox.get_nowait(other) is None
        assert mailbox.drain(other) == []
        waiting = asyncio.ensure_future(mailbox.get(SENDER))
        await asyncio.sleep(0)
        mailbox.post(SENDER, envelopes[0])
        assert await waiting == envelopes[0]
        with pytest.raises(ValueError):
            Mailbox(0)

    asyncio.run(body())
