"""Debug sessions: a bare :class:`kforge.machine.Machine` an agent drives one step at a time.

A session is not a sandbox: no scheduler, no host adapters, no accounting.
SEND on channels 3..7 only queues the message (visible as ``outbound``), and
the debugging agent may deliver anything on any receiving channel it granted
(that is how a tool plays the host).  Each session belongs to the agent that
created it; any other agent is told it does not exist.

Commands run in a worker thread under the session's lock, bounded by
:attr:`DebugLimits.max_ticks_per_call` and :attr:`DebugLimits.max_steps_per_call`,
so a long ``run`` never stalls the server's event loop.

Besides stepping one instruction at a time, a session steps *over* a CALL (on
until it returns to the next instruction with the stack as before), *out*
of the current function (on until a RET leaves it) and, in a program with a
source map (compiled Starlark), to the next *source line* (calls on the way run
through), stopping early at a breakpoint.  The view names instructions by their labels and, when the program
records them, shows source locations (:mod:`kforge.debuginfo`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kforge.core import AgentId, ErrorCategory, ForgeError
from kforge.debuginfo import SourceLocation, code_labels, source_locations
from kforge.disasm import format_instruction
from kforge.engine.policy import Action, OverLimit, Rules
from kforge.isa import Instruction, Opcode
from kforge.machine import Machine, MachineState
from kforge.messages import InvalidRequest
from kforge.program import ForgeProgram
from kforge.server.schemas import (
    ChannelMessage,
    ChannelQueue,
    DebugView,
    Flags,
    MemoryWindow,
    SourcePosition,
    StackEntry,
)

__all__ = [
    "DebugLimits",
    "DebugManager",
    "DebugSession",
    "DebugSessionNotFound",
    "TooManyDebugSessions",
]

_STACK_WORDS: Final = 32
_MAX_MEMORY_WINDOW: Final = 4096


class DebugSessionNotFound(ForgeError):
    category = ErrorCategory.NOT_FOUND
    code = 0x0500
    http_status = 404

    def __init__(self, session_id: str) -> None:
        super().__init__(f"debug session not found: {session_id[:64]}")
        self.session_id = session_id


class TooManyDebugSessions(ForgeError):
    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 429

    def __init__(self, detail: str) -> None:
        super().__init__(f"too many debug sessions: {detail}")


@dataclass(frozen=True, slots=True)
class DebugLimits:
    """What the debugger allows.

    A session's machine is not a sandbox, so its memory is a pool of its own:
    the sessions' memory quotas add up to at most ``max_memory`` on the server
    and ``max_memory_per_agent`` for one agent's sessions; the messages queued
    for one session (what its agent delivered and it has not received) to at
    most ``max_queued_bytes``.  A view shows at most ``view_stream_bytes`` of the
    end of stdout and stderr, and of each queue the first ``view_messages``
    messages cut to ``view_message_bytes``; a program debugged has at most
    ``max_code_length`` instructions (each view shows them all).
    """

    max_sessions_per_agent: int = 8
    max_sessions: int = 256
    max_ticks_per_call: int = 10_000_000
    max_steps_per_call: int = 1_000_000
    idle_seconds: float = 3600.0
    max_memory: int = 256 * 1024 * 1024
    max_memory_per_agent: int = 64 * 1024 * 1024
    max_queued_bytes: int = 4 * 1024 * 1024
    view_stream_bytes: int = 64 * 1024
    view_messages: int = 16
    view_message_bytes: int = 1024
    max_code_length: int = 65_536


@dataclass
class DebugSession:
    """One machine under a debugger, owned by ``owner``.

    ``labels`` names instructions by index (from the assembly text, else the
    program's code symbols); ``locations`` is each instruction's source
    position when the program records them; ``files`` the source text the
    program was compiled from, by file name, when the debugger compiled it.
    """

    id: str
    owner: AgentId
    program: ForgeProgram
    machine: Machine
    breakpoints: set[int] = field(default_factory=set)
    changed: list[int] = field(default_factory=list)
    last_stop: str = "loaded"
    used_at: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    labels: dict[int, tuple[str, ...]] = field(default_factory=dict)
    code_lines: list[str] = field(default_factory=list)
    locations: tuple[SourceLocation | None, ...] | None = None
    files: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        targets = {index: names[0] for index, names in self.labels.items()}
        self.code_lines = [format_instruction(insn, targets) for insn in self.program.code]
        self.locations = source_locations(self.program)


def _hex_word(value: int) -> str:
    return f"{value:#x}"


#: Told the instruction just executed and the machine after it: whether to stop now.
_Until = Callable[[Instruction | None, Machine], bool]


def _returned_to(pc: int, sp: int) -> _Until:
    """Step over: done once execution is back at ``pc`` with the stack pointer at ``sp``.

    A recursive call that passes ``pc`` deeper down has a lower stack pointer, so it
    does not count; the callee's own pushes are popped again before it returns.
    """
    return lambda insn, machine: machine.pc == pc and machine.sp == sp


def _left_the_function() -> _Until:
    """Step out: done once a RET runs at the call depth where stepping started."""
    depth = 0

    def until(insn: Instruction | None, machine: Machine) -> bool:
        nonlocal depth
        opcode = insn.opcode if insn is not None else None
        if opcode == Opcode.CALL:
            depth += 1
        elif opcode == Opcode.RET:
            if depth == 0:
                return True
            depth -= 1
        return False

    return until


def _next_source_line(locations: Sequence[SourceLocation | None], pc: int) -> _Until:
    """Step line: done at the first instruction of another source line, in this function or
    one it returns to.  Calls made on the way run through (their depth is counted), and
    instructions without a position (a language's runtime) never stop it.  From code
    without a position (the program's start), the first positioned instruction stops it."""
    start = locations[pc] if pc < len(locations) else None
    depth = 0

    def until(insn: Instruction | None, machine: Machine) -> bool:
        nonlocal depth
        opcode = insn.opcode if insn is not None else None
        if opcode == Opcode.CALL:
            depth += 1
        elif opcode == Opcode.RET:
            depth -= 1
        if start is not None and depth > 0:
            return False  # inside a call made from the line
        here = locations[machine.pc] if machine.pc < len(locations) else None
        if here is None:
            return False
        if start is None or depth < 0:
            return True  # the first line reached, or back in a caller
        return (here.file, here.line) != (start.file, start.line)

    return until


def _run(
    session: DebugSession,
    max_ticks: int,
    max_steps: int,
    stop_at: frozenset[int],
    until: tuple[str, _Until] | None = None,
) -> str:
    """Execute until a stop; returns why it stopped.  Runs in a worker thread.

    ``until`` is a reason and a test after each instruction (step over, step out).
    """
    machine = session.machine
    before = list(machine.registers)
    start_ticks = machine.ticks_used
    reason = "tick_limit"
    if not stop_at and until is None and max_steps >= max_ticks:
        machine.run(max_ticks)  # every instruction costs at least one tick
    else:
        steps = 0
        code = machine.code
        while machine.state in (MachineState.READY, MachineState.RUNNING):
            if steps >= max_steps:
                reason = "step_limit"
                break
            if machine.ticks_used - start_ticks >= max_ticks:
                break
            insn = code[machine.pc] if machine.pc < len(code) else None
            machine.step()
            steps += 1
            if until is not None and until[1](insn, machine):
                reason = until[0]
                break
            if machine.state is MachineState.RUNNING and machine.pc in stop_at:
                reason = "breakpoint"
                break
    if machine.state in (MachineState.HALTED, MachineState.FAULTED, MachineState.BLOCKED):
        reason = machine.state.value.lower()
    session.changed = [
        i for i, (old, new) in enumerate(zip(before, machine.registers, strict=True)) if old != new
    ]
    session.last_stop = reason
    return reason


def _location_values(session: DebugSession, pc: int) -> SourcePosition | None:
    """The source position of instruction ``pc``, or ``None``."""
    locations = session.locations
    location = locations[pc] if locations is not None and pc < len(locations) else None
    if location is None:
        return None
    return SourcePosition(location.file, location.line, location.column, location.function)


class DebugManager:
    """Every debug session of one server."""

    def __init__(self, policy: Rules, limits: DebugLimits | None = None) -> None:
        self.policy = policy
        self.limits = limits or DebugLimits()
        self._sessions: dict[str, DebugSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire(self) -> None:
        horizon = time.monotonic() - self.limits.idle_seconds
        for session_id in [key for key, s in self._sessions.items() if s.used_at < horizon]:
            del self._sessions[session_id]

    def create(
        self,
        owner: AgentId,
        program: ForgeProgram,
        *,
        memory_quota: int,
        tick_budget: int,
        input: bytes = b"",
        environment: Mapping[bytes, bytes] | None = None,
        grants: Iterable[int] = (),
        labels: Mapping[int, tuple[str, ...]] | None = None,
        files: Mapping[str, str] | None = None,
    ) -> DebugSession:
        """A new session with a READY machine (``Machine.load``'s errors propagate).

        ``labels`` names instructions (default: the program's code symbols); ``files``
        is the source the program was compiled from, by file name.
        """
        self._expire()
        limits = self.limits
        mine = [s for s in self._sessions.values() if s.owner == owner]
        if len(mine) >= limits.max_sessions_per_agent:
            raise TooManyDebugSessions(
                f"agent {owner} already has {len(mine)} of at most {limits.max_sessions_per_agent}"
            )
        if len(self._sessions) >= limits.max_sessions:
            raise TooManyDebugSessions(f"the server holds {limits.max_sessions}")
        held = sum(s.machine.memory_quota for s in mine) + memory_quota
        if held > limits.max_memory_per_agent:
            raise OverLimit(
                "debug max_memory_per_agent", held, limits.max_memory_per_agent, f"agent {owner}"
            )
        total = sum(s.machine.memory_quota for s in self._sessions.values()) + memory_quota
        if total > limits.max_memory:
            raise OverLimit("debug max_memory", total, limits.max_memory, "the debugger")
        machine = Machine.load(
            program,
            memory_quota=memory_quota,
            tick_budget=tick_budget,
            input=input,
            environment=environment,
            grants=grants,
        )
        session = DebugSession(
            os.urandom(16).hex(),
            owner,
            program,
            machine,
            labels=dict(labels) if labels is not None else code_labels(program),
            files=dict(files or {}),
        )
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str, requester: AgentId) -> DebugSession:
        """The session, if ``requester`` may use it (its creator); anyone else is told it
        does not exist (the engine's policy, :attr:`Action.DEBUG`)."""
        session = self._sessions.get(session_id)
        if session is None or not self.policy.allows(Action.DEBUG, requester, owner=session.owner):
            raise DebugSessionNotFound(session_id)
        session.used_at = time.monotonic()
        return session

    def list(self, requester: AgentId) -> list[DebugSession]:
        return [
            s
            for s in self._sessions.values()
            if self.policy.allows(Action.DEBUG, requester, owner=s.owner)
        ]

    def delete(self, session_id: str, requester: AgentId) -> None:
        self.get(session_id, requester)
        del self._sessions[session_id]

    async def step(self, session: DebugSession, count: int) -> str:
        """Execute ``count`` instructions (fewer if the machine stops)."""
        count = min(count, self.limits.max_steps_per_call)
        async with session.lock:
            return await asyncio.to_thread(_run, session, 1 << 64, count, frozenset())

    async def run(
        self, session: DebugSession, max_ticks: int, breakpoints: Iterable[int] | None
    ) -> str:
        """Run until a breakpoint (not the pc it starts on), a stop, or ``max_ticks``."""
        stop_at = frozenset(session.breakpoints if breakpoints is None else breakpoints)
        ticks = min(max_ticks, self.limits.max_ticks_per_call)
        async with session.lock:
            return await asyncio.to_thread(
                _run, session, ticks, self.limits.max_steps_per_call, stop_at
            )

    async def step_over(self, session: DebugSession) -> str:
        """One instruction, but a CALL runs until it has returned (or a breakpoint, a stop)."""
        async with session.lock:
            machine = session.machine
            at_call = (
                machine.pc < len(machine.code) and machine.code[machine.pc].opcode == Opcode.CALL
            )
            if not at_call:
                return await asyncio.to_thread(_run, session, 1 << 64, 1, frozenset())
            until = ("step_over", _returned_to(machine.pc + 1, machine.sp))
            return await self._run_until(session, until)

    async def step_out(self, session: DebugSession) -> str:
        """Run until the current function returns (or a breakpoint, a stop)."""
        async with session.lock:
            return await self._run_until(session, ("step_out", _left_the_function()))

    async def step_line(self, session: DebugSession) -> str:
        """Run to the next source line (calls on the way run through, a breakpoint or a stop
        ends it sooner); a program without a source map steps one instruction."""
        async with session.lock:
            locations = session.locations
            if locations is None:
                return await asyncio.to_thread(_run, session, 1 << 64, 1, frozenset())
            until = ("step_line", _next_source_line(locations, session.machine.pc))
            return await self._run_until(session, until)

    async def _run_until(self, session: DebugSession, until: tuple[str, _Until]) -> str:
        """Run under the limits until ``until`` says so; the caller holds the session's lock."""
        limits = self.limits
        return await asyncio.to_thread(
            _run,
            session,
            limits.max_ticks_per_call,
            limits.max_steps_per_call,
            frozenset(session.breakpoints),
            until,
        )

    async def deliver(self, session: DebugSession, channel: int, data: bytes) -> None:
        """Queue ``data`` on a receiving channel (wakes a RECV blocked there); ``OverLimit``
        when the session's queues would hold more than ``max_queued_bytes``."""
        async with session.lock:
            machine = session.machine
            queued = sum(len(m) for queue in machine.inbound.values() for m in queue)
            limit = self.limits.max_queued_bytes
            if queued + len(data) > limit:
                raise OverLimit(
                    "debug max_queued_bytes", queued + len(data), limit, f"session {session.id}"
                )
            machine.deliver(channel, data)
            machine.deliveries = ()  # a session is never replayed: keep only the queues
            session.last_stop = "delivered"

    def view(
        self, session: DebugSession, memory_address: int = 0, memory_length: int = 256
    ) -> DebugView:
        """Everything the debugger shows (words as hex strings)."""
        machine = session.machine
        limits = self.limits
        if memory_length > _MAX_MEMORY_WINDOW:
            raise InvalidRequest("memory_length", f"at most {_MAX_MEMORY_WINDOW} bytes at a time")
        start = min(memory_address, machine.memory_quota)
        end = min(start + memory_length, machine.memory_quota)
        stack = []
        for address in range(
            machine.sp, min(machine.stack_start, machine.sp + 8 * _STACK_WORDS), 8
        ):
            word = int.from_bytes(machine.memory[address : address + 8], "little")
            stack.append(StackEntry(address, _hex_word(word)))
        flags = machine.flags
        return DebugView(
            session_id=session.id,
            owner=session.owner,
            program_id=session.program.program_id,
            state=machine.state.value,
            last_stop=session.last_stop,
            pc=machine.pc,
            sp=machine.sp,
            ticks_used=machine.ticks_used,
            tick_budget=machine.tick_budget,
            fault=machine.fault.name if machine.fault is not None else None,
            fault_detail=machine.fault_detail,
            blocked_channel=machine.blocked_channel,
            flags=Flags(flags.zero, flags.carry, flags.overflow, flags.halt),
            registers=tuple(_hex_word(value) for value in machine.registers),
            changed=tuple(session.changed),
            breakpoints=tuple(sorted(session.breakpoints)),
            code=tuple(session.code_lines),
            labels={str(index): tuple(names) for index, names in sorted(session.labels.items())},
            source=_location_values(session, machine.pc),
            sources=(
                tuple(_location_values(session, pc) for pc in range(len(session.code_lines)))
                if session.locations is not None
                else None
            ),
            stack=tuple(stack),
            memory=MemoryWindow(start, bytes(machine.memory[start:end])),
            memory_quota=machine.memory_quota,
            heap_start=machine.heap_start,
            stack_start=machine.stack_start,
            inbound=tuple(
                ChannelQueue(
                    channel,
                    tuple(m[: limits.view_message_bytes] for m in queue[: limits.view_messages]),
                    len(queue),
                )
                for channel, queue in sorted(machine.inbound.items())
                if queue
            ),
            outbound=tuple(
                ChannelMessage(channel, data[: limits.view_message_bytes])
                for channel, data in list(machine.outbound)[: limits.view_messages]
            ),
            stdout=bytes(machine.stdout[-limits.view_stream_bytes :]),
            stderr=bytes(machine.stderr[-limits.view_stream_bytes :]),
            stdout_length=len(machine.stdout),
            stderr_length=len(machine.stderr),
        )
