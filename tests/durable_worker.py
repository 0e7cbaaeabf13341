"""A durable engine under load, for the crash test (tests/test_engine_durable.py).

    python tests/durable_worker.py DATA_DIR SANDBOXES INPUTS SNAPSHOT_EVERY

Follows a fixed plan: create each sandbox (``ACK create i``), start it
(``ACK start i``), deliver its inputs round robin (``ACK deliver i j``), then an
empty end marker (``ACK end i``); waits for every result and prints
``RESULT i STATE TICKS OUTPUT_HEX``.  Each ACK line is printed (and flushed)
only after the engine acknowledged the request.  Started again on the same
directory, it rebuilds the engine and goes on with what the engine shows is
still missing, so it can be killed at any moment and restarted.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import sys

from kforge.asm import assemble
from kforge.core import AgentId
from kforge.engine import CreateSandbox, Engine, SandboxState

OWNER = AgentId(b"\x05" * 32)

#: Sums the first 8 bytes of each stdin message, puts it in the vault (channel 3),
#: XORs in the first 8 bytes of the id it gets back; an empty message ends it.
#: The creation input (the first message) is skipped.
PROGRAM = """
        LI   r2, 4096
        LI   r20, 1
        LI   r21, 2
        ADD  r22, r253, r20
        STORE r21, r253, 0
        RECV 2, r3, r22, r2
top:    RECV 2, r3, r22, r2
        JZ   r3, done
        LOADW r4, r22, 0
        ADD  r10, r10, r4
        ADD  r5, r3, r20
        SEND 3, r253, r5
        LI   r6, 8192
        ADD  r7, r253, r6
        RECV 3, r9, r7, r2
        LOADW r4, r7, 2
        XOR  r10, r10, r4
        ADD  r11, r11, r20
        JMP  top
done:   STOREW r10, r253, 0
        STOREW r11, r253, 8
        LI   r12, 16
        SEND 0, r253, r12
        HALT
"""


def message(i: int, j: int) -> bytes:
    return f"s{i:03d}-m{j:04d}-payload".encode()


def expected_output(i: int, inputs: int) -> bytes:
    """What sandbox ``i`` writes after all its inputs (computed without an engine)."""
    acc = 0
    for j in range(inputs):
        data = message(i, j)
        acc = (acc + struct.unpack_from("<Q", data)[0]) & (2**64 - 1)
        acc ^= struct.unpack_from("<Q", hashlib.sha256(data).digest())[0]
    return struct.pack("<QQ", acc, inputs)


def ack(text: str) -> None:
    sys.stdout.write(f"ACK {text}\n")
    sys.stdout.flush()


async def main(data_dir: str, sandboxes: int, inputs: int, snapshot_every: int) -> None:
    engine = Engine(
        data_dir=data_dir, durable=True, snapshot_every=snapshot_every, tier="reference"
    )
    async with engine:
        code = engine.vault.put_program(assemble(PROGRAM))
        known = [info.id for info in await engine.list_sandboxes(OWNER)]
        delivered: list[int] = []
        started: list[bool] = []
        for sandbox_id in known:
            record = await engine.run_record(sandbox_id, OWNER)
            delivered.append(sum(1 for d in record.deliveries if d.channel == 2))
            started.append(
                (await engine.sandbox_status(sandbox_id, OWNER)).state is not SandboxState.READY
            )
        for i in range(len(known), sandboxes):
            sandbox_id = await engine.create_sandbox(
                CreateSandbox(
                    OWNER,
                    code,
                    65536,
                    10_000_000,
                    input=b"go",
                    grants=frozenset({3}),
                    persistent=True,
                )
            )
            ack(f"create {i}")
            known.append(sandbox_id)
            delivered.append(0)
            started.append(False)
        for i, sandbox_id in enumerate(known):
            if not started[i]:
                await engine.exec_start(sandbox_id, OWNER)
                ack(f"start {i}")
        for j in range(inputs + 1):
            for i, sandbox_id in enumerate(known):
                if delivered[i] > j:
                    continue
                if j < inputs:
                    await engine.deliver(sandbox_id, 2, message(i, j), OWNER)
                    ack(f"deliver {i} {j}")
                else:
                    await engine.deliver(sandbox_id, 2, b"", OWNER)
                    ack(f"end {i}")
                delivered[i] += 1
                await asyncio.sleep(0)
        for i, sandbox_id in enumerate(known):
            result = await engine.wait(sandbox_id, timeout=60)
            print(
                f"RESULT {i} {result.state.value} {result.ticks_used} {result.output.hex()}",
                flush=True,
            )


if __name__ == "__main__":
    directory, count, inputs, every = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    asyncio.run(main(directory, count, inputs, every))
