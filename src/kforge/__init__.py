"""kforge: isolated, deterministic, tick-metered execution sandboxes for AI agents.

The public surface: assemble or decode a program, load it into a ``Machine``,
run it, and read the result.  See ``docs/spec.md`` for the machine itself.

Each name is imported on first use (PEP 562), so ``import kforge`` (and with it
every ``kforge`` command) costs nothing until a name is asked for: the engine
behind ``Engine`` is loaded only by a program that uses it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from kforge.asm import AssemblyError, assemble
    from kforge.core import AgentId, ForgeError, Hash256, InvalidProgram, MemoryQuotaExceeded
    from kforge.disasm import disassemble
    from kforge.engine import CreateSandbox, Engine, ExecResult, SandboxState
    from kforge.isa import FaultCode, Instruction, Opcode
    from kforge.machine import Machine, MachineSnapshot, MachineState
    from kforge.program import ForgeProgram, decode_program, encode_program

__version__ = "0.1.0"

#: Where each public name is defined.
_HOMES: Final = {
    "AgentId": "kforge.core",
    "AssemblyError": "kforge.asm",
    "CreateSandbox": "kforge.engine",
    "Engine": "kforge.engine",
    "ExecResult": "kforge.engine",
    "FaultCode": "kforge.isa",
    "ForgeError": "kforge.core",
    "ForgeProgram": "kforge.program",
    "Hash256": "kforge.core",
    "Instruction": "kforge.isa",
    "InvalidProgram": "kforge.core",
    "Machine": "kforge.machine",
    "MachineSnapshot": "kforge.machine",
    "MachineState": "kforge.machine",
    "MemoryQuotaExceeded": "kforge.core",
    "Opcode": "kforge.isa",
    "SandboxState": "kforge.engine",
    "assemble": "kforge.asm",
    "decode_program": "kforge.program",
    "disassemble": "kforge.disasm",
    "encode_program": "kforge.program",
}

__all__ = [
    "AgentId",
    "AssemblyError",
    "CreateSandbox",
    "Engine",
    "ExecResult",
    "FaultCode",
    "ForgeError",
    "ForgeProgram",
    "Hash256",
    "Instruction",
    "InvalidProgram",
    "Machine",
    "MachineSnapshot",
    "MachineState",
    "MemoryQuotaExceeded",
    "Opcode",
    "SandboxState",
    "assemble",
    "decode_program",
    "disassemble",
    "encode_program",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
