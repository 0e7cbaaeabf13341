"""kforge: isolated, deterministic, tick-metered execution sandboxes for AI agents.

The public surface: assemble or decode a program, load it into a ``Machine``,
run it, and read the result.  See ``docs/spec.md`` for the machine itself.
"""

from kforge.asm import AssemblyError, assemble
from kforge.core import AgentId, ForgeError, Hash256, InvalidProgram, MemoryQuotaExceeded
from kforge.disasm import disassemble
from kforge.engine import CreateSandbox, Engine, ExecResult, SandboxState
from kforge.isa import FaultCode, Instruction, Opcode
from kforge.machine import Machine, MachineSnapshot, MachineState
from kforge.program import ForgeProgram, decode_program, encode_program

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

__version__ = "0.1.0"
