"""Shared helpers for the engine tests: agents, engines, programs (and tests of the helpers)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from kforge.asm import assemble
from kforge.core import AgentId, Hash256
from kforge.engine import CreateSandbox, Engine, ExecResult, seeded_random
from kforge.storage import Vault

T = TypeVar("T")

OWNER = AgentId(b"\x01" * 32)
OTHER = AgentId(b"\x02" * 32)
THIRD = AgentId(b"\x03" * 32)


def run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run one async test body in a fresh event loop."""

    async def main() -> T:
        return await factory()

    return asyncio.run(main())


@asynccontextmanager
async def open_engine(**options: Any) -> AsyncIterator[Engine]:
    """An open engine with an in-memory vault and a seeded random source."""
    options.setdefault("random_source", seeded_random(7))
    if "ledger" not in options:
        options.setdefault("standalone", True)  # nothing charged unless a test gives a ledger
    options.setdefault("tier", "reference")  # the fast tier has its own tests; see test_tiers_agree
    vault = options.pop("vault", None) or Vault(":memory:")
    async with Engine(vault, **options) as engine:
        yield engine
    vault.close()


ECHO = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""

#: Reads stdin twice: the creation input, then a second message (so it blocks).
ECHO_TWICE = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""

#: Sums 1..n for n given as a u64 on stdin; writes the u64 sum to stdout.
SUM_TO_N = """
        LI    r2, 8
        RECV  2, r3, r253, r2
        LOADW r4, r253, 0
        LI    r6, 1
again:  JZ    r4, finish
        ADD   r5, r5, r4
        SUB   r4, r4, r6
        JMP   again
finish: STOREW r5, r253, 0
        SEND  0, r253, r2
        HALT
"""

LOOP = """
top:    JMP top
"""

TICK_LOOP = """
top:    TICK
        JMP top
"""

SHORT = """
        LI r1, 42
        HALT
"""

DIVIDE_BY_ZERO = """
        LI  r1, 7
        DIV r3, r1, r2
        HALT
"""

USER_FAULT = """
        FAULT 1234
"""


def sum_input(n: int) -> bytes:
    return struct.pack("<Q", n)


def sum_output(n: int) -> bytes:
    return struct.pack("<Q", n * (n + 1) // 2)


def host_client(channel: int, requests: Iterable[bytes]) -> str:
    """A program that sends each request on ``channel`` and copies each reply to stdout.

    Every reply is written as a u64 length followed by the reply bytes
    (see :func:`split_replies`).
    """
    data_lines = []
    code_lines = [
        "ADD r7, r253, r0",
        "LI r8, 8",
        "ADD r9, r253, r8",
        "LI r5, 65000",
    ]
    for index, request in enumerate(requests):
        values = ", ".join(str(byte) for byte in request) or "0"
        data_lines.append(f"req{index}: .byte {values}")
        code_lines += [
            f"LI r1, req{index}",
            f"LI r2, {len(request)}",
            f"SEND {channel}, r1, r2",
            f"RECV {channel}, r6, r9, r5",
            "STOREW r6, r7, 0",
            "SEND 0, r7, r8",
            "SEND 0, r9, r6",
        ]
    code_lines.append("HALT")
    return ".data\n" + "\n".join(data_lines) + "\n.code\n" + "\n".join(code_lines) + "\n"


def split_replies(output: bytes) -> list[bytes]:
    """The replies a :func:`host_client` program wrote."""
    replies = []
    offset = 0
    while offset < len(output):
        (length,) = struct.unpack_from("<Q", output, offset)
        offset += 8
        replies.append(output[offset : offset + length])
        offset += length
    return replies


async def put(engine: Engine, text: str) -> Hash256:
    return engine.vault.put_program(assemble(text))


async def create(
    engine: Engine,
    text: str,
    *,
    owner: AgentId = OWNER,
    memory_quota: int = 256 * 1024,
    tick_budget: int = 1_000_000,
    **options: Any,
) -> Hash256:
    code = await put(engine, text)
    return await engine.create_sandbox(
        CreateSandbox(owner, code, memory_quota, tick_budget, **options)
    )


async def execute(
    engine: Engine, text: str, *, owner: AgentId = OWNER, **options: Any
) -> ExecResult:
    """Create, start and wait for one sandbox."""
    sandbox_id = await create(engine, text, owner=owner, **options)
    await engine.exec_start(sandbox_id, owner)
    return await engine.wait(sandbox_id, timeout=30)


def test_host_client_program_assembles_and_replies_split() -> None:
    program = assemble(host_client(3, [b"\x01abc", b""]))
    assert len(program.data) == 5
    assert split_replies(struct.pack("<Q", 2) + b"hi" + struct.pack("<Q", 0)) == [b"hi", b""]
