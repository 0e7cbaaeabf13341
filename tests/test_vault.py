"""The content-addressed vault and the program cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge.asm import assemble
from kforge.core import Hash256, InvalidProgram, VaultFetchFailed
from kforge.engine import CreateSandbox, Engine
from kforge.storage import DamagedObject, ProgramCache, Vault, default_data_dir
from test_engine_support import ECHO, OWNER, SHORT, open_engine, put, run


def test_put_returns_the_sha256_and_get_gives_the_bytes_back() -> None:
    with Vault() as vault:
        object_id = vault.put(b"hello")
        assert object_id == Hash256.of(b"hello")
        assert vault.get(object_id) == b"hello"
        assert vault.put(b"hello") == object_id  # idempotent
        assert len(vault) == 1
        assert object_id in vault and Hash256.of(b"other") not in vault and "x" not in vault
        assert vault.put(b"") == Hash256.of(b"")


def test_a_missing_object_is_vault_fetch_failed() -> None:
    with Vault() as vault:
        missing = Hash256.of(b"never stored")
        with pytest.raises(VaultFetchFailed, match="no such object") as error:
            vault.get(missing)
        assert error.value.object_id == missing


def test_a_tampered_row_is_caught_on_get() -> None:
    with Vault() as vault:
        object_id = vault.put(b"original")
        vault.connection.execute(
            "UPDATE objects SET data = ? WHERE id = ?", (b"forged", object_id.raw)
        )
        with pytest.raises(VaultFetchFailed, match="tampered"):
            vault.get(object_id)


def test_a_file_vault_persists_and_close_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "vault.sqlite3"
    vault = Vault(path)
    object_id = vault.put(b"kept")
    vault.close()
    vault.close()
    with pytest.raises(ValueError, match="closed"):
        vault.get(object_id)
    with Vault(path) as reopened:
        assert reopened.get(object_id) == b"kept"


def test_the_default_vault_lives_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    with Vault.open_default() as vault:
        vault.put(b"x")
    assert (tmp_path / "vault.sqlite3").exists()
    monkeypatch.delenv("KFORGE_DATA_DIR")
    assert default_data_dir() == Path.home() / ".local" / "share" / "kforge"
    with Vault.open_default(tmp_path / "other") as vault:
        assert vault.path == str(tmp_path / "other" / "vault.sqlite3")


def test_programs_are_decoded_once_and_cached() -> None:
    with Vault() as vault:
        program = assemble(SHORT)
        program_id = vault.put_program(program)
        assert program_id == program.program_id
        cache = ProgramCache(vault, capacity=2)
        assert cache.load(program_id) == program
        assert cache.load(program_id) is cache.load(program_id)
        assert (cache.hits, cache.misses) == (2, 1)
        assert program_id in cache and len(cache) == 1


def test_the_cache_is_lru() -> None:
    with Vault() as vault:
        ids = [vault.put_program(assemble(f"LI r1, {n}\nHALT\n")) for n in range(3)]
        cache = ProgramCache(vault, capacity=2)
        cache.load(ids[0])
        cache.load(ids[1])
        cache.load(ids[0])
        cache.load(ids[2])  # evicts ids[1], the least recently used
        assert ids[0] in cache and ids[2] in cache and ids[1] not in cache
        with pytest.raises(ValueError):
            ProgramCache(vault, capacity=0)


def test_the_cache_refuses_missing_tampered_and_invalid_objects() -> None:
    with Vault() as vault:
        cache = ProgramCache(vault)
        with pytest.raises(VaultFetchFailed):
            cache.load(Hash256.of(b"none"))
        program_id = vault.put_program(assemble(SHORT))
        vault.connection.execute(
            "UPDATE objects SET data = ? WHERE id = ?", (b"FRGPxx", program_id.raw)
        )
        with pytest.raises(VaultFetchFailed, match="tampered"):
            cache.load(program_id)
        junk = vault.put(b"FRGP but not a program")
        with pytest.raises(InvalidProgram, match=junk.hex):
            cache.load(junk)
        assert len(cache) == 0


def test_the_engine_refuses_a_tampered_program() -> None:
    async def body() -> None:
        async with open_engine() as engine:
            code = await put(engine, ECHO)
            engine.vault.connection.execute(
                "UPDATE objects SET data = ? WHERE id = ?", (assemble(SHORT).encoded, code.raw)
            )
            with pytest.raises(VaultFetchFailed, match="tampered"):
                await engine.create_sandbox(CreateSandbox(OWNER, code, 4096, 10))

    run(body)


# ----------------------------------------------------------------------------- damage


def _tamper(vault: Vault, object_id: Hash256, value: object) -> None:
    vault.connection.execute("UPDATE objects SET data = ? WHERE id = ?", (value, object_id.raw))


def test_putting_the_right_bytes_repairs_a_tampered_row() -> None:
    with Vault() as vault:
        object_id = vault.put(b"original")
        _tamper(vault, object_id, b"forged")
        with pytest.raises(DamagedObject, match="tampered"):
            vault.get(object_id)
        assert vault.put(b"original") == object_id
        assert vault.get(object_id) == b"original"
        assert vault.check().ok and len(vault) == 1


def test_check_reports_every_damaged_object_and_the_rest_stay_readable() -> None:
    with Vault() as vault:
        ids = [vault.put(bytes([n]) * 10) for n in range(5)]
        _tamper(vault, ids[1], b"x")
        _tamper(vault, ids[3], "text, not a blob")
        vault.connection.execute("INSERT INTO objects VALUES (x'00', x'00', 1)")
        check = vault.check()
        assert not check.ok and check.objects == 6 and check.stray_rows == 1
        assert sorted(damaged.object_id for damaged in check.damaged) == sorted([ids[1], ids[3]])
        assert all(isinstance(damaged, VaultFetchFailed) for damaged in check.damaged)
        for n in (0, 2, 4):
            assert vault.get(ids[n]) == bytes([n]) * 10


def test_a_row_holding_a_number_is_damaged_not_allocated() -> None:
    with Vault() as vault:
        object_id = vault.put(b"small")
        _tamper(vault, object_id, 1 << 40)  # bytes(2**40) would be a terabyte
        with pytest.raises(DamagedObject, match="int, not bytes"):
            vault.get(object_id)


def test_a_durable_engine_reopens_once_a_damaged_program_is_put_again(tmp_path: Path) -> None:
    program = assemble(ECHO)

    async def first() -> Hash256:
        async with Engine(data_dir=tmp_path, durable=True, tier="reference") as engine:
            code = engine.vault.put_program(program)
            await engine.create_sandbox(CreateSandbox(OWNER, code, 4096, 10_000))
            return code

    code = run(first)
    with Vault(tmp_path / "vault.sqlite3") as vault:
        _tamper(vault, code, b"\x00")
        assert [damaged.object_id for damaged in vault.check().damaged] == [code]
        vault.put_program(program)
        assert vault.check().ok

    async def second() -> int:
        async with Engine(data_dir=tmp_path, durable=True, tier="reference") as engine:
            return len(await engine.list_sandboxes())

    assert run(second) == 1
