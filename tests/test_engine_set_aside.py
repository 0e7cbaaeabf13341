"""A durable engine whose vault lost or damaged a live sandbox's program still opens.

That sandbox alone is set aside (kept, every operation on it refused with
``SandboxSetAside``); every other sandbox carries on.  Putting the program's
bytes again and reopening brings the sandbox back where it was.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from kforge.core import Hash256, InvalidState, SandboxSetAside
from kforge.engine import CreateSandbox, Engine, SandboxState
from kforge.storage import DamagedObject, Vault
from test_engine_support import ECHO_TWICE, OWNER, put, run

#: A second program (other bytes, same behaviour), so only one of the two is damaged.
ECHO_TWICE_AGAIN = ECHO_TWICE.replace("HALT", "NOP\n        HALT")


def durable(path: Path) -> Engine:
    return Engine(data_dir=path, durable=True, tier="reference", standalone=True)


async def _until_blocked(engine: Engine, sandbox: Hash256) -> None:
    for _ in range(500):
        if (await engine.sandbox_status(sandbox, OWNER)).state is SandboxState.BLOCKED:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"sandbox {sandbox} never blocked")


async def _two_blocked_echoes(engine: Engine) -> dict[str, tuple[Hash256, Hash256]]:
    made = {}
    for name, source in (("damaged", ECHO_TWICE), ("sound", ECHO_TWICE_AGAIN)):
        program = await put(engine, source)
        sandbox = await engine.create_sandbox(
            CreateSandbox(OWNER, program, 65536, 10_000, input=b"one")
        )
        await engine.exec_start(sandbox, OWNER)
        await _until_blocked(engine, sandbox)
        made[name] = (program, sandbox)
    return made


def _damage(path: Path, program: Hash256) -> bytes:
    """Append a byte to the program's vault row; returns its right bytes."""
    with Vault(path / "vault.sqlite3") as vault:
        right = vault.get(program)
    with sqlite3.connect(path / "vault.sqlite3") as db:
        db.execute(
            "UPDATE objects SET data = CAST(data || x'00' AS BLOB) WHERE id = ?", (program.raw,)
        )
    return right


@pytest.mark.parametrize("crashed", [False, True], ids=["from-a-snapshot", "from-records"])
def test_only_the_sandbox_of_a_damaged_program_is_set_aside_until_it_is_put_again(
    tmp_path: Path, crashed: bool
) -> None:
    async def first() -> dict[str, tuple[Hash256, Hash256]]:
        engine = durable(tmp_path)
        await engine.open()
        made = await _two_blocked_echoes(engine)
        if crashed:
            engine.ctx.transitions.commit()
            engine.scheduler.stop()  # "crash": no snapshot, the records alone remain
        else:
            await engine.close()
        return made

    made = run(first)
    damaged_program, damaged = made["damaged"]
    sound = made["sound"][1]
    right_bytes = _damage(tmp_path, damaged_program)

    async def reopened_with_the_damage() -> None:
        async with durable(tmp_path) as engine:
            assert list(engine.set_aside) == [damaged]
            problem = engine.set_aside[damaged]
            assert isinstance(problem, DamagedObject) and problem.object_id == damaged_program
            await engine.deliver(sound, 2, b"two", OWNER)
            assert (await engine.wait(sound, timeout=5)).output == b"onetwo"
            for attempt in (
                engine.deliver(damaged, 2, b"two", OWNER),
                engine.sandbox_status(damaged, OWNER),
                engine.kill_sandbox(damaged, OWNER),
                engine.request_proof(damaged, OWNER),
            ):
                with pytest.raises(SandboxSetAside, match=f"{damaged}.*{damaged_program}"):
                    await attempt
            assert damaged in {info.id for info in await engine.list_sandboxes(OWNER)}
            with pytest.raises(InvalidState, match="set aside"):
                await engine.snapshot()

    run(reopened_with_the_damage)
    with Vault(tmp_path / "vault.sqlite3") as vault:
        vault.put(right_bytes)

    async def reopened_after_the_repair() -> None:
        async with durable(tmp_path) as engine:
            assert not engine.set_aside
            assert (await engine.wait(sound, timeout=5)).output == b"onetwo"
            await engine.deliver(damaged, 2, b"two", OWNER)
            assert (await engine.wait(damaged, timeout=5)).output == b"onetwo"

    run(reopened_after_the_repair)
