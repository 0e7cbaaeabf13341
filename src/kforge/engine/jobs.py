"""The CPU-heavy jobs :class:`~kforge.engine.offload.Offload` runs away from the event loop.

Each is a top-level function of bytes and numbers returning bytes and numbers
(they cross to a worker process and back), and does one piece of work whose
cost grows with its input: build a program from an upload, link, replay a run
for its proof, disassemble a program, compile one for the fast tier.  Inputs were checked against
:mod:`kforge.limits` by the code each job calls, before anything is allocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from kforge.core import Hash256, InvalidProgram
from kforge.program import ForgeProgram, decode_program
from kforge.sources import DEFAULT_STARLARK_MEMORY, compile_starlark_upload
from kforge.wire import Schema

__all__ = [
    "ASSEMBLY",
    "FRGP",
    "STARLARK",
    "BuiltProgram",
    "ProgramText",
    "build_debug_program",
    "build_program",
    "build_starlark_program",
    "compile_module",
    "link_programs",
    "program_text",
    "prove_run",
]

#: The kinds of upload :func:`build_program` takes.
ASSEMBLY: Final = "assembly"
FRGP: Final = "frgp"
STARLARK: Final = "starlark"


class BuiltProgram(Schema, frozen=True):
    """A program built from an upload: its canonical FRGP bytes and what a reply tells of it."""

    encoded: bytes
    code_length: int
    data_length: int
    imports: tuple[bytes, ...]


def _built(program: ForgeProgram) -> BuiltProgram:
    return BuiltProgram(
        program.encoded, len(program.code), len(program.data), tuple(program.imports)
    )


def build_program(
    kind: str,
    source: bytes | str,
    filename: str,
    memory_quota: int = DEFAULT_STARLARK_MEMORY,
    libraries: Mapping[bytes, bytes | None] | None = None,
) -> BuiltProgram:
    """Assemble ``source`` (``ASSEMBLY``), decode and check it (``FRGP``), or compile it
    (``STARLARK``, for a machine of ``memory_quota`` bytes, loading only ``libraries``:
    see :func:`kforge.sources.compile_starlark_upload`)."""
    if kind == ASSEMBLY:
        from kforge.asm import assemble

        if not isinstance(source, str):
            raise InvalidProgram(f"{filename}: assembly is text")
        return _built(assemble(source, filename))
    if kind == FRGP:
        return _built(decode_program(source if isinstance(source, bytes) else source.encode()))
    if kind == STARLARK:
        if not isinstance(source, str):
            raise InvalidProgram(f"{filename}: Starlark source is text")
        return _built(compile_starlark_upload(source, filename, memory_quota, libraries or {}))
    raise InvalidProgram(f"{filename}: no such kind of program: {kind!r}")


def build_starlark_program(
    source: str, filename: str, memory_quota: int, libraries: Mapping[bytes, bytes | None]
) -> bytes:
    """Compile Starlark ``source`` (named ``filename``) as an upload for a machine of
    ``memory_quota`` bytes: the program's FRGP bytes."""
    return compile_starlark_upload(source, filename, memory_quota, libraries).encoded


def build_debug_program(text: str, filename: str) -> tuple[bytes, dict[int, tuple[str, ...]]]:
    """Assemble ``text`` for the debugger: the FRGP bytes and every code label by index."""
    from kforge.asm import assemble_with_labels

    program, labels = assemble_with_labels(text, filename)
    return program.encoded, labels


def link_programs(
    main: bytes, dependencies: Mapping[bytes, bytes], imports: Sequence[object]
) -> bytes:
    """Link the program ``main`` with ``imports``; ``dependencies`` are the FRGP bytes of
    every program they name, by raw id.  Returns the linked program's FRGP bytes."""
    from kforge.core import VaultFetchFailed
    from kforge.link import Import, link

    decoded: dict[bytes, ForgeProgram] = {}

    def fetch(program_id: Hash256) -> ForgeProgram:
        found = decoded.get(program_id.raw)
        if found is None:
            blob = dependencies.get(program_id.raw)
            if blob is None:
                raise VaultFetchFailed(program_id, "no such program")
            found = decoded[program_id.raw] = decode_program(blob)
        return found

    wanted = [value for value in imports if isinstance(value, Import)]
    return link(decode_program(main), wanted, fetch).encoded


def prove_run(
    program: bytes, record: bytes, public_key: bytes, tier: str, sample_interval: int
) -> bytes:
    """Replay a run record and commit to its trace: the unsigned proof's bytes (the
    engine signs it, with a key that never leaves its process)."""
    from kforge.proofs.proof import unsigned_proof
    from kforge.proofs.replay import RunRecord
    from kforge.tiers import TierRunner

    runner = TierRunner.of(tier)
    try:
        proof = unsigned_proof(
            decode_program(program),
            RunRecord.from_bytes(record),
            public_key,
            tier=runner,
            sample_interval=sample_interval,
        )
    finally:
        runner.close()
    return proof.to_bytes()


def compile_module(program: bytes, max_region_blocks: int) -> bytes:
    """Compile FRGP bytes for the fast tier (as ``FastTier`` would, with this region size):
    the serialized wasmtime module, for ``wasmtime.Module.deserialize`` in an engine made
    by ``make_engine``."""
    from kforge.fast import make_engine, plan_program
    from kforge.fast.compiler import generate_wat

    decoded = decode_program(program)
    plan = plan_program(decoded.code, decoded.entry, max_region_blocks=max_region_blocks)
    import wasmtime

    return bytes(wasmtime.Module(make_engine(), generate_wat(plan)).serialize())


class ProgramText(Schema, frozen=True):
    """A program as people read it: each instruction, and the whole disassembly."""

    entry: int
    code: tuple[str, ...]
    data_length: int
    disassembly: str


def program_text(encoded: bytes) -> ProgramText:
    """Disassemble FRGP bytes."""
    from kforge.disasm import disassemble, format_instruction

    program = decode_program(encoded)
    return ProgramText(
        program.entry,
        tuple(format_instruction(insn) for insn in program.code),
        len(program.data),
        disassemble(program),
    )
