"""Host adapters for channels 3..7: formats, validation, gating, logging."""

from __future__ import annotations

import asyncio
import struct

import pytest

from kforge.accounting import Ledger
from kforge.core import AgentId, Hash256
from kforge.engine import EngineLimits, ExecResult, SandboxState
from kforge.host import (
    AgoraBoard,
    AgoraOp,
    HostRequest,
    HostRouter,
    MintOp,
    OracleAdapter,
    OracleOp,
    PeerOp,
    Status,
    VaultOp,
    incoming_frame,
    parse_reply,
    reply_frame,
)
from kforge.isa import FaultCode
from test_engine_support import (
    OTHER,
    OWNER,
    THIRD,
    create,
    execute,
    host_client,
    open_engine,
    run,
    split_replies,
)

U64 = struct.Struct("<Q")


def topic(name: bytes) -> bytes:
    return struct.pack("<H", len(name)) + name


async def call(
    channel: int, requests: list[bytes], **options: object
) -> tuple[list[bytes], ExecResult]:
    """Run a host client on a fresh engine; returns the replies and the result."""
    async with open_engine(**options) as engine:
        result = await execute(engine, host_client(channel, requests), grants=frozenset({channel}))
        assert result.state is SandboxState.HALTED, result
        return split_replies(result.output), result


def statuses(replies: list[bytes]) -> list[Status]:
    return [parse_reply(reply)[0] for reply in replies]


# ----------------------------------------------------------------------------- vault (3)


def test_vault_put_then_get_through_the_channel() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            stored = engine.vault.put(b"stored object")
            requests = [
                bytes([VaultOp.PUT]) + b"fresh",
                bytes([VaultOp.GET]) + stored.raw,
                bytes([VaultOp.GET]) + Hash256.of(b"absent").raw,
                bytes([VaultOp.GET]) + b"short",
                bytes([VaultOp.GET]) + stored.raw + b"x",
                bytes([0x09]),
                b"",
            ]
            result = await execute(engine, host_client(3, requests), grants=frozenset({3}))
            replies = split_replies(result.output)
            assert replies[0] == reply_frame(Status.OK, VaultOp.PUT, Hash256.of(b"fresh").raw)
            assert engine.vault.get(Hash256.of(b"fresh")) == b"fresh"
            assert replies[1] == reply_frame(Status.OK, VaultOp.GET, b"stored object")
            assert statuses(replies[2:]) == [
                Status.NOT_FOUND,
                Status.MALFORMED,
                Status.MALFORMED,
                Status.UNKNOWN_OP,
                Status.MALFORMED,
            ]
            assert b"no such object" in parse_reply(replies[2])[2]
            assert b"0x01 GET, 0x02 PUT" in parse_reply(replies[5])[2]

    run(body)


def test_vault_get_of_a_tampered_or_too_large_object_is_an_error_reply() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(message_limit=64)) as engine:
            stored = engine.vault.put(b"original")
            big = engine.vault.put(b"x" * 63)
            engine.vault.connection.execute(
                "UPDATE objects SET data = ? WHERE id = ?", (b"forged", stored.raw)
            )
            requests = [bytes([VaultOp.GET]) + stored.raw, bytes([VaultOp.GET]) + big.raw]
            result = await execute(engine, host_client(3, requests), grants=frozenset({3}))
            tampered, too_large = split_replies(result.output)
            assert parse_reply(tampered)[0] is Status.NOT_FOUND and b"tampered" in tampered
            assert parse_reply(too_large)[0] is Status.TOO_LARGE

    run(body)


# ----------------------------------------------------------------------------- oracle (4)


def test_oracle_answers_from_the_table_given_at_start() -> None:
    requests = [
        bytes([OracleOp.QUERY]) + b"price",
        bytes([OracleOp.QUERY]) + b"nothing",
        bytes([2]),
    ]
    replies, _ = run(lambda: call(4, requests, oracle={b"price": b"17"}))
    assert replies[0] == reply_frame(Status.OK, OracleOp.QUERY, b"17")
    assert statuses(replies[1:]) == [Status.NOT_FOUND, Status.UNKNOWN_OP]


def test_oracle_handlers_are_pluggable_and_may_be_async() -> None:
    async def handler(key: bytes) -> bytes | None:
        await asyncio.sleep(0)
        return key.upper() if key != b"none" else None

    requests = [bytes([OracleOp.QUERY]) + b"shout", bytes([OracleOp.QUERY]) + b"none"]
    replies, _ = run(lambda: call(4, requests, oracle=handler))
    assert replies[0] == reply_frame(Status.OK, OracleOp.QUERY, b"SHOUT")
    assert statuses(replies[1:]) == [Status.NOT_FOUND]


def test_a_failing_oracle_is_an_unavailable_reply_not_a_crash() -> None:
    def broken(key: bytes) -> bytes:
        if key == b"text":
            return "not bytes"  # type: ignore[return-value]
        raise RuntimeError("backend down")

    requests = [bytes([OracleOp.QUERY]) + b"boom", bytes([OracleOp.QUERY]) + b"text"]
    replies, _ = run(lambda: call(4, requests, oracle=broken))
    assert statuses(replies) == [Status.UNAVAILABLE, Status.UNAVAILABLE]
    assert b"backend down" in replies[0]


# ----------------------------------------------------------------------------- agora (5)


def test_agora_publish_read_and_count() -> None:
    board = AgoraBoard(max_messages_per_topic=2)
    requests = [
        bytes([AgoraOp.PUBLISH]) + topic(b"news") + b"first",
        bytes([AgoraOp.PUBLISH]) + topic(b"news") + b"second",
        bytes([AgoraOp.PUBLISH]) + topic(b"news") + b"third",
        bytes([AgoraOp.READ]) + topic(b"news") + U64.pack(1),
        bytes([AgoraOp.READ]) + topic(b"news") + U64.pack(5),
        bytes([AgoraOp.COUNT]) + topic(b"news"),
        bytes([AgoraOp.COUNT]) + topic(b"empty"),
        bytes([AgoraOp.COUNT]) + topic(b""),
        bytes([AgoraOp.READ]) + topic(b"news") + U64.pack(0) + b"x",
        bytes([AgoraOp.PUBLISH]) + b"\x05\x00ab",
    ]
    replies, _ = run(lambda: call(5, requests, agora=board))
    assert replies[0] == reply_frame(Status.OK, AgoraOp.PUBLISH, U64.pack(0))
    assert replies[1] == reply_frame(Status.OK, AgoraOp.PUBLISH, U64.pack(1))
    assert parse_reply(replies[2])[0] is Status.DENIED  # the topic is full
    assert replies[3] == reply_frame(Status.OK, AgoraOp.READ, OWNER.raw + b"second")
    assert parse_reply(replies[4])[0] is Status.NOT_FOUND
    assert replies[5] == reply_frame(Status.OK, AgoraOp.COUNT, U64.pack(2))
    assert replies[6] == reply_frame(Status.OK, AgoraOp.COUNT, U64.pack(0))
    assert statuses(replies[7:]) == [Status.MALFORMED] * 3
    assert board.read(b"news", 0) == (OWNER, b"first")


# ----------------------------------------------------------------------------- mint (6)


def test_mint_balance_and_transfer_with_the_owner_paying() -> None:
    ledger = Ledger()
    ledger.credit_spark(OWNER, 10)
    requests = [
        bytes([MintOp.BALANCE]),
        bytes([MintOp.TRANSFER]) + OTHER.raw + U64.pack(4),
        bytes([MintOp.TRANSFER]) + OTHER.raw + U64.pack(7),
        bytes([MintOp.TRANSFER]) + OTHER.raw + U64.pack(0),
        bytes([MintOp.TRANSFER]) + b"short",
        bytes([MintOp.BALANCE]) + b"x",
        bytes([MintOp.BALANCE]),
    ]

    async def body() -> list[bytes]:
        async with open_engine() as engine:
            engine.ledger.credit_spark(OWNER, 10)
            result = await execute(engine, host_client(6, requests), grants=frozenset({6}))
            assert engine.ledger.account(OTHER).spark == 4
            return split_replies(result.output)

    replies = run(body)
    assert replies[0] == reply_frame(Status.OK, MintOp.BALANCE, U64.pack(10))
    assert replies[1] == reply_frame(Status.OK, MintOp.TRANSFER, U64.pack(6))
    assert parse_reply(replies[2])[0] is Status.INSUFFICIENT and b"needs 7, has 6" in replies[2]
    assert statuses(replies[3:6]) == [Status.MALFORMED] * 3
    assert replies[6] == reply_frame(Status.OK, MintOp.BALANCE, U64.pack(6))


# ----------------------------------------------------------------------------- inter-sandbox (7)

RECEIVER = """
        LI   r5, 4096
        RECV 7, r6, r253, r5
        SEND 0, r253, r6
        HALT
"""


def test_peer_messages_reach_sandboxes_that_accept_the_sender() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            same_owner = await create(engine, RECEIVER, grants=frozenset({7}))
            accepting = await create(
                engine, RECEIVER, owner=OTHER, grants=frozenset({7}), accept_from=frozenset({OWNER})
            )
            refusing = await create(engine, RECEIVER, owner=THIRD, grants=frozenset({7}))
            deaf = await create(engine, RECEIVER)
            for target, owner in ((same_owner, OWNER), (accepting, OTHER), (refusing, THIRD)):
                await engine.exec_start(target, owner)
            requests = [
                bytes([PeerOp.SEND]) + same_owner.raw + b"hello",
                bytes([PeerOp.SEND]) + accepting.raw + b"hi",
                bytes([PeerOp.SEND]) + refusing.raw + b"no",
                bytes([PeerOp.SEND]) + deaf.raw + b"no",
                bytes([PeerOp.SEND]) + Hash256.of(b"nobody").raw + b"no",
                bytes([PeerOp.SEND]) + b"short",
                bytes([0x09]),
            ]
            sender_id = await create(engine, host_client(7, requests), grants=frozenset({7}))
            await engine.exec_start(sender_id, OWNER)
            sender = await engine.wait(sender_id, timeout=10)
            replies = split_replies(sender.output)
            assert replies[:2] == [reply_frame(Status.OK, PeerOp.SEND)] * 2
            assert statuses(replies[2:]) == [
                Status.DENIED,
                Status.DENIED,
                Status.NOT_FOUND,
                Status.MALFORMED,
                Status.UNKNOWN_OP,
            ]
            got = await engine.wait(same_owner, timeout=10)
            assert got.output == incoming_frame(sender_id, OWNER, b"hello")
            assert (await engine.wait(accepting, timeout=10)).output == incoming_frame(
                sender_id, OWNER, b"hi"
            )
            assert (await engine.sandbox_status(refusing, THIRD)).state is SandboxState.BLOCKED
            await engine.kill_sandbox(refusing, THIRD)
            finished = [bytes([PeerOp.SEND]) + same_owner.raw + b"late"]
            late = await execute(engine, host_client(7, finished), grants=frozenset({7}))
            assert statuses(split_replies(late.output)) == [Status.NOT_FOUND]

    run(body)


def test_a_peer_message_larger_than_the_limit_is_too_large() -> None:
    async def body() -> None:
        async with open_engine(limits=EngineLimits(message_limit=100)) as engine:
            target = await create(engine, RECEIVER, grants=frozenset({7}))
            request = bytes([PeerOp.SEND]) + target.raw + b"x" * 40
            result = await execute(engine, host_client(7, [request]), grants=frozenset({7}))
            assert statuses(split_replies(result.output)) == [Status.TOO_LARGE]

    run(body)


# ----------------------------------------------------------------------------- gating and logging


def test_an_ungranted_channel_faults_the_sandbox() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            result = await execute(engine, host_client(3, [bytes([VaultOp.PUT]) + b"x"]))
            assert result.state is SandboxState.FAULTED
            assert result.fault is FaultCode.PERMISSION_DENIED
            assert len(engine.vault) == 1  # only the program itself

    run(body)


def test_every_host_call_is_logged_with_its_ticks() -> None:
    async def body() -> None:
        async with open_engine(oracle={b"k": b"v"}) as engine:
            requests = [bytes([OracleOp.QUERY]) + b"k", bytes([OracleOp.QUERY]) + b"missing"]
            sandbox_id = await create(engine, host_client(4, requests), grants=frozenset({4}))
            await engine.exec_start(sandbox_id, OWNER)
            await engine.wait(sandbox_id, timeout=10)
            log = await engine.io_log(sandbox_id, OWNER)
            assert [(call.channel, call.request, call.status) for call in log] == [
                (4, requests[0], Status.OK),
                (4, requests[1], Status.NOT_FOUND),
            ]
            assert log[0].reply == reply_frame(Status.OK, OracleOp.QUERY, b"v")
            assert all(call.delivered for call in log)
            # 4 setup instructions, LI, LI, SEND = 1 + 1 + 1 + 1 + 1 + 1 + 3 ticks
            assert log[0].ticks_used == 9
            assert log[1].ticks_used > log[0].ticks_used

    run(body)


def test_a_reply_to_a_sandbox_that_already_stopped_is_logged_undelivered() -> None:
    program = """
    .data
    req: .byte 2
    .code
            LI r1, req
            LI r2, 1
            SEND 3, r1, r2
            HALT
    """

    async def body() -> None:
        async with open_engine() as engine:
            sandbox_id = await create(engine, program + "\n", grants=frozenset({3}))
            await engine.exec_start(sandbox_id, OWNER)
            assert (await engine.wait(sandbox_id, timeout=10)).state is SandboxState.HALTED
            (logged,) = await engine.io_log(sandbox_id, OWNER)
            assert logged.status == Status.OK and not logged.delivered

    run(body)


def test_the_router_answers_for_missing_adapters_and_grants() -> None:
    async def body() -> None:
        router = HostRouter([OracleAdapter({b"a": b"b"}.get)])
        owner = AgentId(b"\x01" * 32)
        request = HostRequest(Hash256(b"\x00" * 32), owner, 4, b"\x01a", 0, 1024)
        assert (await router.call(request, frozenset({4}))).frame == reply_frame(Status.OK, 1, b"b")
        assert (await router.call(request, frozenset())).status is Status.DENIED
        missing = HostRequest(Hash256(b"\x00" * 32), owner, 5, b"\x01", 0, 1024)
        assert (await router.call(missing, frozenset({5}))).status is Status.UNAVAILABLE
        tiny = HostRequest(Hash256(b"\x00" * 32), owner, 4, b"\x01a", 0, 2)
        reply = await router.call(tiny, frozenset({4}))
        assert reply.status is Status.TOO_LARGE and len(reply.frame) == 2
        with pytest.raises(ValueError):
            parse_reply(b"\x00")

    asyncio.run(body())
