"""Arbitrary instruction streams never crash or hang the host through the compiled path.

Raw 16-byte words become instructions (a defined opcode keeps only the fields it
uses, so the container is valid; anything else is an unknown opcode); the fast
tier must finish each run within its budget and agree with the reference.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.fast import FastTier
from kforge.isa import OPCODES, Instruction, decode_instruction
from kforge.machine import Machine
from kforge.program import ForgeProgram
from test_fast_support import assert_same


def _sanitized(word: bytes) -> Instruction:
    """The instruction a raw word encodes, with fields its opcode does not use cleared."""
    return decode_instruction(word)[0].with_unused_fields_cleared()


def _program(words: list[bytes], data: bytes) -> ForgeProgram:
    return ForgeProgram(tuple(_sanitized(word) for word in words), data)


opcode_bytes = st.one_of(st.sampled_from(sorted(OPCODES)), st.integers(0, 255))
#: 16-byte words whose opcode is usually a defined one and whose targets often land in the code
words = st.builds(
    lambda opcode, fields, small, imm: (
        bytes([opcode]) + fields + (imm if not small else bytes([small]) + bytes(7))
    ),
    opcode_bytes,
    st.binary(min_size=7, max_size=7),
    st.integers(0, 48),
    st.binary(min_size=8, max_size=8),
)


@pytest.fixture(scope="module")
def fast_tier() -> Iterator[FastTier]:
    with FastTier(disk_cache=False, max_programs=1 << 16, max_region_blocks=4) as tier:
        yield tier


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(words, min_size=1, max_size=48), st.binary(max_size=16), st.integers(0, 20_000))
def test_raw_instruction_streams_agree(
    fast_tier: FastTier, stream: list[bytes], data: bytes, budget: int
) -> None:
    program = _program(stream, data)
    reference = Machine.load(program, tick_budget=budget, memory_quota=4096, grants=[3, 7])
    fast = Machine.load(program, tick_budget=budget, memory_quota=4096, grants=[3, 7])
    reference.run()
    fast_tier.run(fast, tier="fast")
    assert_same(reference, fast)


@pytest.mark.parametrize("seed", range(3))
def test_large_random_programs_compile_and_agree(seed: int) -> None:
    """Thousands of instructions with opcodes biased towards valid ones (compile time, regions)."""
    rng = random.Random(seed)
    defined = sorted(OPCODES)
    code = []
    for _ in range(4000):
        raw = bytearray(rng.randbytes(16))
        raw[0] = rng.choice(defined) if rng.random() < 0.95 else raw[0]
        raw[1:4] = bytes(rng.randrange(16) for _ in range(3))
        raw[4:8] = bytes(4)
        if rng.random() < 0.8:
            raw[8:16] = rng.randrange(4000).to_bytes(8, "little")
        code.append(_sanitized(bytes(raw)))
    program = ForgeProgram(tuple(code))
    reference = Machine.load(program, tick_budget=200_000)
    fast = Machine.load(program, tick_budget=200_000)
    reference.run()
    with FastTier(disk_cache=False) as tier:
        tier.run(fast, tier="fast")
    assert_same(reference, fast)
