"""Sizes named by an input are checked against documented limits before anything is allocated."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from kforge import limits
from kforge.asm import AssemblyError, assemble
from kforge.core import Hash256, InvalidProgram
from kforge.engine import EngineLimits
from kforge.engine.offload import WorkLimits
from kforge.engine.policy import RULES
from kforge.isa import Instruction, Opcode
from kforge.limits import (
    MAX_DATA_BYTES,
    MAX_LINK_IMPORTS,
    MAX_PROGRAM_BYTES,
    MAX_SOURCE_BYTES,
    InputTooLarge,
)
from kforge.link import Import, link
from kforge.program import ForgeProgram, decode_program
from kforge.server import AuthConfig, ServerConfig
from kforge.server.debug import DebugLimits

SECURITY = Path(__file__).resolve().parents[1] / "docs" / "security.md"


def _peak_bytes(work: Callable[[], object]) -> int:
    tracemalloc.start()
    with contextlib.suppress(Exception):
        work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    "source",
    [
        "HALT\n.data\n.zero 500000000\n",  # 48 bytes that once became a 500 MB vault object
        "HALT\n.data\n.byte 1\n.align 0x100000000\n",
        f"HALT\n.data\n.zero {MAX_DATA_BYTES - 8}\n.u64 1, 2\n",
    ],
    ids=["zero", "align", "zero-then-values"],
)
def test_a_short_source_cannot_make_a_large_data_section(source: str) -> None:
    with pytest.raises(AssemblyError, match=f"at most {MAX_DATA_BYTES} data bytes"):
        assemble(source)
    assert _peak_bytes(lambda: assemble(source)) < 3 * MAX_DATA_BYTES


def test_a_refused_zero_allocates_nothing() -> None:
    assert _peak_bytes(lambda: assemble("HALT\n.data\n.zero 500000000\n")) < 1 << 20


def test_a_long_literal_is_an_assembly_error_with_a_short_message() -> None:
    with pytest.raises(AssemblyError) as error:
        assemble("HALT\n.data\n.u64 0x" + "f" * 5000 + "\n")  # more digits than int -> str takes
    assert (error.value.line, error.value.column) == (3, 6)
    assert len(str(error.value)) < 200


def test_a_source_over_the_limit_is_refused_before_it_is_read() -> None:
    with pytest.raises(InputTooLarge) as error:
        assemble(";" * (MAX_SOURCE_BYTES + 1))
    assert (error.value.size, error.value.limit) == (MAX_SOURCE_BYTES + 1, MAX_SOURCE_BYTES)


def _header(data_count: int) -> bytes:
    return b"FRGP" + struct.pack("<HHQI", 1, 0, 0, data_count)


def test_a_container_count_over_its_limit_is_refused_by_its_count() -> None:
    with pytest.raises(InvalidProgram, match=r"data count \d+ at byte 16 is over the limit"):
        decode_program(_header(MAX_DATA_BYTES + 1) + bytes(64))
    with pytest.raises(InvalidProgram, match="over the limit"):
        decode_program(bytes(MAX_PROGRAM_BYTES + 1))


def test_a_program_over_a_section_limit_cannot_be_built() -> None:
    with pytest.raises(InvalidProgram, match=r"data section holds \d+ items, over the limit"):
        ForgeProgram((Instruction(Opcode.HALT),), bytes(MAX_DATA_BYTES + 1))


def test_an_import_list_over_the_limit_is_refused_before_any_fetch() -> None:
    fetched: list[Hash256] = []

    def fetch(object_id: Hash256) -> ForgeProgram:
        fetched.append(object_id)
        raise AssertionError("nothing may be fetched")

    program = ForgeProgram((Instruction(Opcode.HALT),))
    imports = [Import(Hash256.of(bytes([n % 256, n // 256]))) for n in range(MAX_LINK_IMPORTS + 1)]
    with pytest.raises(InputTooLarge, match="import list"):
        link(program, imports, fetch)
    assert fetched == []


def test_every_limit_is_documented_with_its_value() -> None:
    text = SECURITY.read_text()
    for name in limits.__all__:
        if name.startswith("MAX_"):
            value = getattr(limits, name)
            row = re.search(rf"^\|[^\n]*`{name}`[^\n]*$", text, re.MULTILINE)
            assert row is not None, f"{name} is not in docs/security.md"
            assert f"{value:,}" in row.group(), f"{name} = {value:,} is not its documented value"


def test_an_input_over_its_limit_is_a_413() -> None:
    from kforge.server.endpoint import http_status

    assert http_status(InputTooLarge("link import list (entries)", 5000, MAX_LINK_IMPORTS)) == 413


def _documented_value(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


@pytest.mark.parametrize(
    "limits",
    [EngineLimits(), WorkLimits(), ServerConfig(), AuthConfig(), DebugLimits()],
    ids=lambda limits: type(limits).__name__,
)
def test_every_configured_limit_is_documented_with_its_value(limits: object) -> None:
    text = SECURITY.read_text()
    for field in dataclasses.fields(limits):  # type: ignore[arg-type]
        value = getattr(limits, field.name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue  # a part (auth, debug) or a name (default_preset)
        rows = re.findall(rf"^\| [^|\n]*`{field.name}`[^|\n]*\|[^\n]*$", text, re.MULTILINE)
        assert rows, f"{type(limits).__name__}.{field.name} is not in docs/security.md"
        shown = _documented_value(value)
        assert any(shown in row for row in rows), f"{field.name} = {shown} is not documented"


def test_the_table_of_who_may_do_what_is_the_policys() -> None:
    text = SECURITY.read_text()
    for action, rule in RULES.items():
        row = re.search(rf"^\| `{action.value}` \|[^\n]*$", text, re.MULTILINE)
        assert row is not None, f"{action.value} is not in docs/security.md"
        assert rule.summary in row.group() and rule.who() in row.group(), action.value
