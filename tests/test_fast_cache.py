"""The on-disk module cache: hits skip the compiler, damaged files are rebuilt, never trusted."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgpack
import pytest

from kforge.cli import main
from kforge.fast import FastTier, ModuleCache, default_data_dir
from kforge.fast import tiering as tiering_module
from kforge.fast.cache import (
    DEFAULT_MAX_BYTES,
    MAGIC,
    MAX_BYTES_ENVIRONMENT,
    configured_max_bytes,
)
from kforge.isa import Instruction, Opcode
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram
from kforge.sealed import seal, unseal

PROGRAM = ForgeProgram(
    (
        Instruction(Opcode.LI, rd=1, imm=10),
        Instruction(Opcode.ADD, rd=2, rs1=2, rs2=1),
        Instruction(Opcode.HALT),
    )
)


def _run_fast(tier: FastTier) -> Machine:
    machine = Machine.load(PROGRAM)
    tier.run(machine, tier="fast")
    assert machine.state is MachineState.HALTED and machine.registers[2] == 10
    return machine


def _cache_file(data_dir: Path) -> Path:
    files = list((data_dir / "fast-modules").glob("*.cwasm"))
    assert len(files) == 1
    return files[0]


def _forbid_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> str:
        raise AssertionError("the compiler ran although the module was cached")

    monkeypatch.setattr(tiering_module, "generate_wat", refuse)
    monkeypatch.setattr(tiering_module, "plan_program", refuse)


def test_a_compiled_module_is_reused_by_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FastTier(tmp_path) as tier:
        _run_fast(tier)
    assert _cache_file(tmp_path).stat().st_size > 0
    _forbid_compiling(monkeypatch)
    with FastTier(tmp_path) as tier:
        _run_fast(tier)


def test_a_cache_file_whose_facts_do_not_fit_the_program_is_a_miss(tmp_path: Path) -> None:
    with FastTier(tmp_path) as tier:
        _run_fast(tier)
    path = _cache_file(tmp_path)
    facts = msgpack.unpackb(unseal(MAGIC, path.read_bytes()))
    assert facts[0] == b"\x01\x00\x00" and facts[1] is False and facts[2] == bytes([1, 2])
    for wrong in (
        [b"\x01\x00", *facts[1:]],  # enterable flags for two instructions, not three
        [b"\x01\x00\x07", *facts[1:]],  # a flag that is neither 0 nor 1
        [facts[0], facts[1], bytes([2, 1]), facts[3]],  # registers out of order
        facts[:3],
    ):
        path.write_bytes(seal(MAGIC, msgpack.packb(wrong)))
        with FastTier(tmp_path) as tier:
            _run_fast(tier)
        assert msgpack.unpackb(unseal(MAGIC, path.read_bytes())) == facts  # rebuilt


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: b"",
        lambda blob: blob[: len(blob) // 2],
        lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]),
        lambda blob: b"not a module at all",
        lambda blob: blob[:8] + bytes(32) + blob[40:],
        lambda blob: blob[:40] + bytes(len(blob) - 40),
    ],
    ids=["empty", "truncated", "flipped-bit", "garbage", "wrong-checksum", "zeroed-payload"],
)
def test_a_damaged_cache_file_is_ignored_and_rebuilt(tmp_path: Path, damage: object) -> None:
    with FastTier(tmp_path) as tier:
        _run_fast(tier)
    path = _cache_file(tmp_path)
    good = path.read_bytes()
    path.write_bytes(damage(good))  # type: ignore[operator]
    with FastTier(tmp_path) as tier:
        _run_fast(tier)
    assert path.read_bytes()[:8] == good[:8]
    with FastTier(tmp_path) as tier:  # the rebuilt file is a valid hit again
        _run_fast(tier)


def test_a_module_from_another_engine_configuration_is_a_miss(tmp_path: Path) -> None:
    with FastTier(tmp_path) as tier:
        tier.compile(PROGRAM)
    path = _cache_file(tmp_path)
    cache = ModuleCache(tmp_path, "another variant")
    assert cache.path_for(PROGRAM.program_id) != path
    with FastTier(tmp_path, max_region_blocks=3) as tier:
        _run_fast(tier)
    assert len(list((tmp_path / "fast-modules").glob("*.cwasm"))) == 2


def test_an_unwritable_data_dir_only_costs_a_compile(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with FastTier(blocker / "inside") as tier:
        _run_fast(tier)


def test_the_data_dir_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv("KFORGE_DATA_DIR")
    assert default_data_dir() == Path.home() / ".local" / "share" / "kforge"


def test_no_disk_cache_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFORGE_DATA_DIR", str(tmp_path))
    with FastTier(disk_cache=False) as tier:
        _run_fast(tier)
    assert not (tmp_path / "fast-modules").exists()


def _program(value: int) -> ForgeProgram:
    return ForgeProgram((Instruction(Opcode.LI, rd=1, imm=value), Instruction(Opcode.HALT)))


def _module_files(data_dir: Path) -> dict[str, Path]:
    return {path.name[:64]: path for path in (data_dir / "fast-modules").glob("*.cwasm")}


def test_the_cache_keeps_to_its_cap_and_the_least_recently_used_go_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = (_program(value) for value in (1, 2, 3))
    with FastTier(tmp_path) as tier:
        tier.compile(first)
    size = next(iter(_module_files(tmp_path).values())).stat().st_size
    monkeypatch.setenv(MAX_BYTES_ENVIRONMENT, str(2 * size + size // 2))  # room for two
    with FastTier(tmp_path) as tier:
        time.sleep(0.02)
        tier.compile(second)
    time.sleep(0.02)
    with FastTier(tmp_path) as tier:  # a new process finds the first on disk: a use
        machine = Machine.load(first)
        tier.run(machine, tier="fast")
    time.sleep(0.02)
    with FastTier(tmp_path) as tier:
        tier.compile(third)
    kept = _module_files(tmp_path)
    assert set(kept) == {first.program_id.hex, third.program_id.hex}
    assert ModuleCache(tmp_path).usage().total_bytes <= 2 * size + size // 2


def test_a_cap_below_one_module_keeps_nothing_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAX_BYTES_ENVIRONMENT, "0")
    with FastTier(tmp_path) as tier:
        _run_fast(tier)
    assert _module_files(tmp_path) == {}


def test_a_misconfigured_cap_falls_back_to_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAX_BYTES_ENVIRONMENT, "lots")
    assert ModuleCache(tmp_path).max_bytes == DEFAULT_MAX_BYTES
    with pytest.raises(ValueError, match=MAX_BYTES_ENVIRONMENT):
        configured_max_bytes()


def test_cache_info_and_clear_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_BYTES_ENVIRONMENT, raising=False)
    with FastTier(tmp_path) as tier:
        tier.compile(_program(1))
        tier.compile(_program(2))
    (tmp_path / "fast-modules" / "left-by-a-crash.tmp").write_bytes(b"partial")
    (tmp_path / "starlark-runtime").mkdir()
    (tmp_path / "starlark-runtime" / "runtime-0123.pickle").write_bytes(b"a runtime")
    assert main(["cache", "info", "--json", "--data-dir", str(tmp_path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["modules"] == 2 and info["bytes"] > 0
    assert info["max_bytes"] == DEFAULT_MAX_BYTES
    assert info["directory"] == str(tmp_path / "fast-modules")
    assert main(["cache", "info", "--data-dir", str(tmp_path)]) == 0
    assert "2 modules" in capsys.readouterr().out
    assert main(["cache", "clear", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "removed 3 files" in out and "removed 1 compiled Starlark runtime\n" in out
    assert list((tmp_path / "fast-modules").iterdir()) == []
    assert list((tmp_path / "starlark-runtime").iterdir()) == []
    monkeypatch.setenv(MAX_BYTES_ENVIRONMENT, "lots")
    assert main(["cache", "info", "--data-dir", str(tmp_path)]) == 2
    assert MAX_BYTES_ENVIRONMENT in capsys.readouterr().err
