"""Tiers and the compile pipeline: when a machine runs compiled code and when it waits.

:class:`FastTier` owns a wasmtime engine, the compiled programs (in memory, LRU
bounded, and on disk through :class:`~kforge.fast.cache.ModuleCache`) and one
background compile thread.  Three tiers:

* ``reference``: ``Machine.run`` as it is;
* ``fast``: compile (or fetch) the program first, then run compiled code;
* ``auto``: run compiled code if the program is compiled already; otherwise run
  the reference interpreter in chunks, count the ticks a program spent there and,
  once it has spent ``warmup_ticks``, compile it in the background; switch to
  compiled code at the first chunk boundary after the compile finished.  A cold
  short run never waits for, nor pays for, the compiler.

A program longer than :data:`~kforge.fast.compiler.MAX_COMPILED_CODE`
instructions is never compiled: every tier runs it on the reference interpreter
(the results are the same), so no program makes one compile cost the host more
than that size allows.

Chunk boundaries are invisible: a chunk stops between two instructions exactly
where ``Machine.run`` would have gone on.  The one subtlety is ``yield_on_tick``:
a chunk that stops on its own tick limit right after a TICK must yield, so the
tier must know whether the last instruction run was that TICK; when the program's
shape leaves that undecidable from the state (a jump or RET could also land
after a TICK) the whole slice stays in the reference interpreter.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Final, Literal, TypeVar

import wasmtime

from kforge.core import Hash256
from kforge.fast.analysis import MAX_REGION_BLOCKS, STATIC_TARGETS, plan_program
from kforge.fast.cache import ModuleCache, default_data_dir
from kforge.fast.compiler import MAX_COMPILED_CODE, generate_wat
from kforge.fast.runtime import CompiledProgram, bound_program, execute, make_engine
from kforge.isa import Instruction, Opcode
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram

__all__ = ["TIERS", "FastTier", "ModuleBuilder", "Tier"]

Tier = Literal["reference", "fast", "auto"]
#: Compiles a program elsewhere: (program, max_region_blocks) -> the serialized module.
ModuleBuilder = Callable[[ForgeProgram, int], bytes]
_Value = TypeVar("_Value")
TIERS: Final = ("reference", "fast", "auto")
#: Instructions of the compiled programs a fast tier keeps in memory together, unless
#: told otherwise: some 900 MB at about 450 bytes an instruction (a compiled Starlark
#: program of 30,000 instructions takes some 14 MB).
DEFAULT_MAX_CODE: Final = 2_000_000


@dataclass(frozen=True, slots=True)
class _TickShape:
    """What the auto tier must know of a program's TICKs to chunk a yielding slice."""

    has_tick: bool
    #: Whether a TICK's successor can also be reached another way (then a chunk
    #: ending there cannot tell whether the TICK just ran).
    ambiguous: bool

    @classmethod
    def of(cls, code: tuple[Instruction, ...]) -> _TickShape:
        ticks = [pc for pc, insn in enumerate(code) if insn.opcode == Opcode.TICK]
        if not ticks:
            return cls(False, False)
        if any(insn.opcode == Opcode.RET for insn in code):
            return cls(True, True)
        targets = {insn.imm for insn in code if insn.opcode in STATIC_TARGETS}
        return cls(True, any(pc + 1 in targets for pc in ticks))


class _Warming:
    """A program ``auto`` runs on the interpreter: its TICKs' shape and the ticks it spent
    there (its compile starts at ``warmup_ticks``)."""

    __slots__ = ("given_up", "seen", "shape", "ticks")

    def __init__(self, shape: _TickShape) -> None:
        self.shape = shape
        self.ticks = 0
        #: ``FastTier._changes`` when ``auto`` last found the program not compiled, and
        #: whether its compile had failed then.
        self.seen = -1
        self.given_up = False


def _after_tick(code: tuple[Instruction, ...], pc: int) -> bool:
    return 0 < pc <= len(code) and code[pc - 1].opcode == Opcode.TICK


class FastTier:
    """Compiled programs and the policy that runs machines on them.

    ``data_dir`` holds the on-disk module cache (default ``$KFORGE_DATA_DIR`` or
    ``~/.local/share/kforge``; ``disk_cache=False`` keeps everything in memory).
    ``warmup_ticks``: reference ticks a program spends under ``auto`` before its
    compile starts; ``chunk_ticks``: how often ``auto`` looks whether it landed;
    ``max_programs``: compiled programs kept in memory (least recently used go);
    ``max_code``: their instructions together, which bounds the memory they take
    (about 450 bytes of compiled code and tables per instruction: the default keeps
    some 900 MB; the newest program is kept whatever its size);
    ``max_region_blocks``: blocks per wasm function; ``engine``: a wasmtime
    engine made by :func:`~kforge.fast.runtime.make_engine` (one is made if not
    given); ``builder``: what compiles a program elsewhere (another process: a
    server keeps the compile's time and memory away from its event loop), given
    the program and ``max_region_blocks`` and returning the serialized module
    (``None``: here, on the compile thread).  Thread-safe; use as a context
    manager or call :meth:`close` to stop the compile thread.
    """

    def __init__(
        self,
        data_dir: str | PathLike[str] | None = None,
        *,
        disk_cache: bool = True,
        warmup_ticks: int = 100_000,
        chunk_ticks: int = 50_000,
        max_programs: int = 256,
        max_code: int = DEFAULT_MAX_CODE,
        max_region_blocks: int = MAX_REGION_BLOCKS,
        engine: wasmtime.Engine | None = None,
        builder: ModuleBuilder | None = None,
    ) -> None:
        self.engine = engine or make_engine()
        self.builder = builder
        self.max_region_blocks = max_region_blocks
        directory = Path(data_dir) if data_dir else default_data_dir()
        variant = f"regions={max_region_blocks}"
        self.disk = ModuleCache(directory, variant) if disk_cache else None
        self.warmup_ticks = warmup_ticks
        self.chunk_ticks = max(1, chunk_ticks)
        self.max_programs = max_programs
        self.max_code = max_code
        self._code_kept = 0  # instructions of the programs in ``_compiled``
        self._compiled: OrderedDict[Hash256, CompiledProgram] = OrderedDict()
        self._pending: dict[Hash256, Future[CompiledProgram]] = {}
        #: Programs whose compile failed, and why (a ``fast`` run raises it again).
        self._failed: dict[Hash256, BaseException] = {}
        self._warmings: dict[Hash256, _Warming] = {}
        #: Changes whenever what ``compiled`` could answer may have changed (a compile
        #: started, finished, failed, was kept or let go): ``auto`` asks again only then.
        self._changes = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._bookkeeping_limit = 16 * max_programs

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Stop the compile thread (waiting for a compile in progress); idempotent."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> FastTier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ compiling

    @staticmethod
    def compiles(program: ForgeProgram) -> bool:
        """Whether the fast tier compiles ``program`` (else it runs on the reference)."""
        return len(program.code) <= MAX_COMPILED_CODE

    def compiled(self, program: ForgeProgram) -> CompiledProgram | None:
        """The compiled program if it is ready now (in memory or just finished), else ``None``."""
        program_id = program.program_id
        # Performance note: asked before every slice of a program not compiled yet, so the
        # usual answer (neither compiled nor done compiling) takes no lock; a lookup alone
        # is atomic.
        if program_id not in self._compiled:
            pending = self._pending.get(program_id)
            if pending is None or not pending.done():
                return None
        with self._lock:
            found = self._compiled.get(program_id)
            if found is not None:
                self._compiled.move_to_end(program_id)
                return found
            pending = self._pending.get(program_id)
        if pending is None or not pending.done():
            return None
        return self._collect(program_id, pending)

    def compile(self, program: ForgeProgram) -> CompiledProgram:
        """The compiled program, compiling (or loading from disk) now if needed; a program
        whose compile failed raises that failure again (it is not compiled twice)."""
        ready = self.compiled(program)
        if ready is not None:
            return ready
        with self._lock:
            pending = self._pending.get(program.program_id)
        if pending is not None:
            result = self._collect(program.program_id, pending)
            if result is not None:
                return result
        with self._lock:
            failure = self._failed.get(program.program_id)
        if failure is not None:
            raise failure
        compiled = self._build(program)
        self._remember(program.program_id, compiled)
        return compiled

    def compile_in_background(self, program: ForgeProgram) -> Future[CompiledProgram]:
        """Start compiling ``program`` on the compile thread (once) and return its future."""
        program_id = program.program_id
        with self._lock:
            pending = self._pending.get(program_id)
            if pending is not None:
                return pending
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="kforge-fast-compile")
            future = self._executor.submit(self._build, program)
            self._pending[program_id] = future
            self._changes += 1
        future.add_done_callback(self._changed)
        return future

    def _changed(self, _: object = None) -> None:
        # Two bumps racing may count once; the value still differs from what either saw.
        self._changes += 1

    def compile_before_running(self, machine: Machine) -> Future[CompiledProgram] | None:
        """The compile the ``fast`` tier would do on ``machine``'s next slice, started on the
        compile thread (or, when it failed before, its failure); ``None`` when there is
        none to do.  A caller on an event loop awaits it before the slice, so that no
        compile runs on the loop."""
        bound = bound_program(machine)
        if bound is not None and bound.engine is self.engine:
            return None
        program = machine.program
        if not self.compiles(program) or self.compiled(program) is not None:
            return None
        with self._lock:
            failure = self._failed.get(program.program_id)
        if failure is not None:
            failed: Future[CompiledProgram] = Future()
            failed.set_exception(failure)
            return failed
        return self.compile_in_background(program)

    def _build(self, program: ForgeProgram) -> CompiledProgram:
        cached = (
            self.disk.load(self.engine, program.program_id, program.code) if self.disk else None
        )
        if cached is not None:
            module, facts = cached  # analysed when it was compiled: not again
            return CompiledProgram(self.engine, module, facts, program.program_id)
        plan = plan_program(program.code, program.entry, max_region_blocks=self.max_region_blocks)
        if self.builder is not None:
            built = self.builder(program, self.max_region_blocks)
            module = wasmtime.Module.deserialize(self.engine, built)
        else:
            module = wasmtime.Module(self.engine, generate_wat(plan))
        facts = plan.facts
        if self.disk:
            self.disk.store(program.program_id, module, facts)
        return CompiledProgram(self.engine, module, facts, program.program_id)

    def _collect(
        self, program_id: Hash256, future: Future[CompiledProgram]
    ) -> CompiledProgram | None:
        """Move a finished background compile into the cache; ``None`` if it failed."""
        with self._lock:
            self._pending.pop(program_id, None)
            self._changes += 1
        error = future.exception()
        if error is not None:
            with self._lock:
                self._failed[program_id] = error
                _forget_oldest(self._failed, self._bookkeeping_limit)
            return None
        compiled = future.result()
        self._remember(program_id, compiled)
        return compiled

    def _remember(self, program_id: Hash256, compiled: CompiledProgram) -> None:
        with self._lock:
            previous = self._compiled.pop(program_id, None)
            if previous is not None:
                self._code_kept -= len(previous.facts.code)
            self._compiled[program_id] = compiled
            self._code_kept += len(compiled.facts.code)
            while len(self._compiled) > 1 and (
                len(self._compiled) > self.max_programs or self._code_kept > self.max_code
            ):
                evicted, gone = self._compiled.popitem(last=False)
                self._code_kept -= len(gone.facts.code)
                self._warmings.pop(evicted, None)  # cold again: it warms up anew
            self._changes += 1

    # -------------------------------------------------------------------- running

    def run(
        self,
        machine: Machine,
        *,
        tier: Tier = "auto",
        max_ticks: int | None = None,
        yield_on_tick: bool = False,
    ) -> MachineState:
        """Run one slice of ``machine`` on ``tier``; same contract as ``Machine.run``."""
        if tier == "reference":
            return machine.run(max_ticks, yield_on_tick=yield_on_tick)
        if tier == "fast" or tier == "auto":
            bound = bound_program(machine)
            if bound is not None and bound.engine is self.engine:
                # Performance note: a machine bound to compiled code of this engine runs
                # on it directly: no lookup by program id (what both tiers would do).
                return execute(machine, bound, max_ticks=max_ticks, yield_on_tick=yield_on_tick)
        if tier == "fast":
            if machine.state.is_final or machine.state is MachineState.BLOCKED:
                return machine.state  # what Machine.run does; no need to compile
            if not self.compiles(machine.program):
                return machine.run(max_ticks, yield_on_tick=yield_on_tick)
            compiled = self.compile(machine.program)
            return execute(machine, compiled, max_ticks=max_ticks, yield_on_tick=yield_on_tick)
        if tier == "auto":
            return self._run_auto(machine, max_ticks, yield_on_tick)
        raise ValueError(f"unknown tier {tier!r}: expected one of {', '.join(TIERS)}")

    def _run_auto(
        self, machine: Machine, max_ticks: int | None, yield_on_tick: bool
    ) -> MachineState:
        program = machine.program
        warming = self._warmings.get(program.program_id)
        if (
            warming is not None
            and warming.seen == self._changes
            and warming.ticks < self.warmup_ticks
            and max_ticks is not None
            and max_ticks <= self.chunk_ticks
        ):
            # Performance note: the usual short slice of a program still warming up, with
            # nothing compiled or landed since it last looked (a host call's round trip):
            # one chunk on the interpreter, counted.
            before = machine.ticks_used
            machine.run(max_ticks, yield_on_tick=yield_on_tick)
            warming.ticks += machine.ticks_used - before
            return machine.state
        if not self.compiles(program):
            return machine.run(max_ticks, yield_on_tick=yield_on_tick)
        if machine.state is MachineState.READY:
            machine.state = MachineState.RUNNING
        limit = None if max_ticks is None else machine.ticks_used + max_ticks
        warming = warming or self._warming(program)
        shape = warming.shape
        chunked = not (yield_on_tick and shape.ambiguous)
        while machine.state is MachineState.RUNNING:
            remaining = None if limit is None else limit - machine.ticks_used
            if remaining is not None and remaining <= 0:
                break
            changes = self._changes
            if warming.seen != changes:  # else nothing landed since it last looked
                compiled = self.compiled(program)
                if compiled is not None:
                    return execute(
                        machine, compiled, max_ticks=remaining, yield_on_tick=yield_on_tick
                    )
                warming.seen = changes
                warming.given_up = self._given_up(program)
            if warming.ticks >= self.warmup_ticks and warming.seen == self._changes:
                self._maybe_compile(program)
            chunk = remaining
            if chunked and not warming.given_up and (chunk is None or chunk > self.chunk_ticks):
                chunk = self.chunk_ticks
            before = machine.ticks_used
            machine.run(chunk, yield_on_tick=yield_on_tick)
            spent = machine.ticks_used - before
            # Without the lock: a count lost to a race between threads only delays a compile.
            warming.ticks += spent
            if chunk is None or (yield_on_tick and self._yielded(machine, shape, spent, chunk)):
                break
        return machine.state

    @staticmethod
    def _yielded(machine: Machine, shape: _TickShape, spent: int, chunk: int) -> bool:
        """Whether a RUNNING reference chunk ended on a yielding TICK (not on its limit)."""
        if spent < chunk:
            return True
        return shape.has_tick and _after_tick(machine.code, machine.pc)

    def _maybe_compile(self, program: ForgeProgram) -> None:
        """Start compiling a hot program, unless it is compiling or failed (lookups without
        the lock, each atomic: compile_in_background starts one compile at most)."""
        program_id = program.program_id
        if program_id not in self._pending and program_id not in self._failed:
            self.compile_in_background(program)

    def _given_up(self, program: ForgeProgram) -> bool:
        return program.program_id in self._failed

    def _warming(self, program: ForgeProgram) -> _Warming:
        """What ``auto`` keeps of a program it runs on the interpreter, made on first use."""
        warming = _Warming(_TickShape.of(program.code))
        with self._lock:
            warming = self._warmings.setdefault(program.program_id, warming)
            _forget_oldest(self._warmings, self._bookkeeping_limit)
        return warming


def _forget_oldest(table: dict[Hash256, _Value], limit: int) -> None:
    """Keep per-program bookkeeping bounded: drop the oldest entries past ``limit``."""
    while len(table) > limit:
        del table[next(iter(table))]
