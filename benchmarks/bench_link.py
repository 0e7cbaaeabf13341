"""Link resolution: a program importing from 16 libraries (seed §7: < 10 ms; our target 1 ms).

Each library is ``examples/lib/mathlib.fasm`` renamed (its exports prefixed ``lN_``),
so it is a distinct object of 38 instructions, 152 data bytes and 7 exports with
code and data relocations; the program imports 2 symbols from each.  Measured:

- ``link``: ``kforge.link.link`` with a fetch from an in-memory store of
  decoded programs (the Vault's cost is not the linker's);
- ``link + id``: the same, plus the resolved program's id (encoding + SHA-256);
- ``cold fetch``: fetch decodes FRGP bytes every time (so the linker's id check
  hashes each dependency afresh), plus the id.
"""

from __future__ import annotations

import json
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from kforge.asm import assemble
from kforge.core import Hash256
from kforge.link import Import, link
from kforge.program import ForgeProgram, decode_program

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MATHLIB = (HERE.parent / "examples" / "lib" / "mathlib.fasm").read_text()
EXPORTS = ("square", "cube", "gcd", "square_of", "print_u64", "print_str", "squares")
IMPORTS = 16
TARGET_MS = 1.0


def library(n: int) -> ForgeProgram:
    pattern = re.compile(r"\b(" + "|".join(EXPORTS) + r")\b")
    return assemble(pattern.sub(rf"l{n}_\1", MATHLIB), f"lib{n}.fasm")


def workload() -> tuple[ForgeProgram, list[Import], dict[Hash256, ForgeProgram]]:
    libraries = [library(n) for n in range(IMPORTS)]
    names = [f"l{n}_{which}" for n in range(IMPORTS) for which in ("square", "squares")]
    lines = [".import " + ", ".join(names)]
    for n in range(IMPORTS):
        lines += [f"LI r10, {n}", f"CALL l{n}_square", f"LI r1, l{n}_squares", "LOADW r2, r1, 8"]
    lines.append("HALT")
    program = assemble("\n".join(lines), "main.fasm")
    imports = [
        Import(lib.program_id, (f"l{n}_square".encode(), f"l{n}_squares".encode()))
        for n, lib in enumerate(libraries)
    ]
    return program, imports, {lib.program_id: lib for lib in libraries}


def median_ms(action: Callable[[], object], repeats: int = 200) -> float:
    action()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    program, imports, objects = workload()
    blobs = {object_id: lib.encoded for object_id, lib in objects.items()}
    linked = link(program, imports, objects.__getitem__)
    assert not linked.imports

    def link_only() -> object:
        return link(program, imports, objects.__getitem__)

    def link_and_id() -> object:
        return link(program, imports, objects.__getitem__).program_id

    def cold() -> object:
        return link(program, imports, lambda oid: decode_program(blobs[oid])).program_id

    rows = [
        ("link", median_ms(link_only)),
        ("link + id", median_ms(link_and_id)),
        ("cold fetch", median_ms(cold)),
    ]
    print(
        f"{IMPORTS} imports -> {len(linked.code)} instructions, {len(linked.data)} data bytes, "
        f"{len(linked.relocations)} relocations"
    )
    print(f"{'case':<12} {'median ms':>10} {'target ms':>10}")
    for name, ms in rows:
        target = f"{TARGET_MS:.1f}" if name == "link" else "-"
        print(f"{name:<12} {ms:>10.3f} {target:>10}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "link.json").write_text(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "imports": IMPORTS,
                "instructions": len(linked.code),
                "data_bytes": len(linked.data),
                "relocations": len(linked.relocations),
                "target_ms": TARGET_MS,
                "median_ms": {name: round(ms, 4) for name, ms in rows},
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
