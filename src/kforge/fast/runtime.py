"""Running a compiled program on a :class:`~kforge.machine.Machine`.

One ``execute`` call is one execution slice with the contract of
``Machine.run(max_ticks, yield_on_tick=...)``.  It takes a wasm instance of the
program's module from a pool, copies the machine's data memory into the
instance's memory 0 (:mod:`kforge.fast.transfer`) and, for the length of the
call, points ``machine.memory`` at that wasm memory (a ``memoryview``), so the
reference interpreter and compiled code share one memory while control goes
back and forth.  When the call returns, the memory is copied back into the
machine's own buffer and ``machine.memory`` is that buffer again: the machine
holds its complete state whenever Python code can see it.

Why copy: ``Machine.memory`` is typed ``bytearray | mmap`` and ``Machine`` has
``__slots__`` without ``__weakref__``, so the tier can neither keep the wasm
memory as the machine's memory between calls nor attach an instance to a
machine.  The copies cost ~5 µs a slice at 64 KiB and O(quota) above (about
3 ms at 16 MiB); the change to ``kforge.machine`` that removes them is in the
fast tier's report.

The host loop: at a pc where compiled code can start, hand the state words over
(:mod:`kforge.fast.abi`; only the registers the program names), call ``run``
and take the state back.  Compiled code returns on HALT, a fault, a yielding
TICK, or STEP: then the host executes one instruction with ``Machine.step()``
(SEND, RECV and POLL, so channel semantics exist only in ``kforge.machine``; a
block the remaining ticks cannot pay for whole; a pc in the middle of a block)
and goes on.
"""

from __future__ import annotations

import ctypes
import importlib
import operator
import struct
import threading
from collections.abc import Callable
from typing import Any, Final

import wasmtime

from kforge.core import Hash256
from kforge.fast.abi import FAULT_EXIT_BASE, STATE_WORDS, Exit, FlagKind, flags_from_recipe
from kforge.fast.analysis import ProgramPlan
from kforge.fast.transfer import copy_in, copy_out
from kforge.isa import REGISTER_COUNT, WORD_MASK, FaultCode, Opcode
from kforge.machine import Machine, MachineState
from kforge.program import ForgeProgram

__all__ = ["ENGINE_SETTINGS", "CompiledProgram", "execute", "make_engine"]

_PAGE: Final = 65536
_UNLIMITED: Final = 1 << 80
#: Idle instances kept per memory size, and the largest memory worth keeping.
_POOL_DEPTH: Final = 4
_POOL_MAX_PAGES: Final = 256
_HALT: Final = int(Exit.HALT)
_STEP: Final = int(Exit.STEP)
_EXPLICIT: Final = int(FlagKind.EXPLICIT)
#: Everything about the engine that changes compiled code (part of the cache key).
ENGINE_SETTINGS: Final = "multi-memory,wide-arithmetic,opt=speed"


def make_engine() -> wasmtime.Engine:
    """An engine with the features the generated code uses."""
    config = wasmtime.Config()
    config.wasm_multi_memory = True
    config.wasm_wide_arithmetic = True
    config.cranelift_opt_level = "speed"
    return wasmtime.Engine(config)


def _address(memory: wasmtime.Memory, store: wasmtime.Store) -> int:
    return ctypes.addressof(memory.data_ptr(store).contents)


def _byte_view(address: int, size: int) -> memoryview:
    """A writable ``memoryview`` of ``size`` bytes at ``address`` (format ``B``)."""
    return memoryview((ctypes.c_ubyte * size).from_address(address)).cast("B")


def _raw_caller(store: wasmtime.Store, func: wasmtime.Func) -> Callable[[], int]:
    """A zero-argument caller of ``run() -> i32``.

    Performance note: ``wasmtime_func_call_unchecked`` costs ~1.4 µs where
    ``Func.__call__`` costs ~10 µs (type lookup and value conversion per call).
    """
    try:
        ffi: Any = importlib.import_module("wasmtime._ffi")
        bindings: Any = importlib.import_module("wasmtime._bindings")
        call_unchecked = bindings._wasmtime_func_call_unchecked  # the bare ctypes function
        context = store._context()
        func_ref = ctypes.byref(func._func)
        slot = (ffi.wasmtime_val_raw_t * 1)()
        trap = ctypes.POINTER(ffi.wasm_trap_t)()
        trap_ref = ctypes.byref(trap)
    except (AttributeError, TypeError, ImportError):  # another wasmtime-py layout: the public path
        return lambda: int(func(store))

    def call() -> int:
        error = call_unchecked(context, func_ref, slot, 1, trap_ref)
        if error or trap:
            raise RuntimeError("compiled Forge code trapped (a compiler bug)")
        return int(slot[0].i32)

    return call


class _Instance:
    """One instantiation of a module with a data memory of ``pages`` pages."""

    def __init__(self, engine: wasmtime.Engine, module: wasmtime.Module, pages: int) -> None:
        self.store = wasmtime.Store(engine)
        instance = wasmtime.Instance(self.store, module, [])
        exports = instance.exports(self.store)
        memory = exports["memory"]
        state = exports["state"]
        run = exports["run"]
        assert isinstance(memory, wasmtime.Memory) and isinstance(state, wasmtime.Memory)
        assert isinstance(run, wasmtime.Func)
        if pages > 1:
            memory.grow(self.store, pages - 1)
        self.pages = pages
        self.instance = instance
        # Memory 0 never grows again and memory 1 never grows: their addresses are fixed.
        self.memory_address = _address(memory, self.store)
        self.state = _byte_view(_address(state, self.store), _PAGE)
        self.call = _raw_caller(self.store, run)

    def enter(
        self, machine: Machine, sync: _StateSync, tick_limit: int, yield_on_tick: bool
    ) -> int:
        """Run compiled code from ``machine.pc`` and take the state back; returns the exit."""
        used = machine.ticks_used
        budget_left = machine.tick_budget - used
        fuel = min(budget_left, tick_limit - used)
        registers = machine.registers
        quota = machine.memory_quota
        sync.layout.pack_into(
            self.state,
            0,
            *sync.take(registers),
            machine.pc,
            machine.sp,
            fuel,
            budget_left - fuel,
            quota - 1,
            quota - 8,
            machine.heap_start + 8,
            machine.stack_start,
            0,
            yield_on_tick,
            _EXPLICIT,
            machine.zero,
            machine.carry,
            machine.overflow,
        )
        reason = self.call()
        words = sync.layout.unpack_from(self.state)
        for index, value in zip(sync.registers, words, strict=False):
            registers[index] = value
        pc, sp, fuel_left, _, _, _, _, _, detail, _, kind, a, b, v = words[sync.count :]
        machine.pc = pc
        machine.sp = sp
        machine.ticks_used = used + fuel - fuel_left
        machine.zero, machine.carry, machine.overflow = flags_from_recipe(kind, a, b, v)
        if reason >= FAULT_EXIT_BASE:
            code = FaultCode(reason - FAULT_EXIT_BASE)
            machine.state = MachineState.FAULTED
            machine.fault = code
            machine.fault_detail = detail if code is FaultCode.USER_FAULT else None
        elif reason == _HALT:
            machine.state = MachineState.HALTED
            machine.halt = True
        return reason


class _StateSync:
    """How one program's state crosses into the state memory: only the registers it names.

    Compiled code never touches a register its program does not name, so those
    stay in the machine alone; one struct (with padding over the others) packs
    the named registers and the words after the register file in one call.
    """

    def __init__(self, plan: ProgramPlan) -> None:
        self.registers = plan.used_registers
        self.count = len(self.registers)
        layout, position = ["<"], 0
        for index in self.registers:
            layout.append(f"{8 * (index - position)}xQ" if index > position else "Q")
            position = index + 1
        words_after = STATE_WORDS - REGISTER_COUNT
        padding = 8 * (REGISTER_COUNT - position)
        layout.append(f"{padding}x{words_after}Q" if padding else f"{words_after}Q")
        self.layout = struct.Struct("".join(layout))
        assert self.layout.size == 8 * STATE_WORDS
        # Performance note: itemgetter gathers the named registers in C.
        getter = operator.itemgetter(*self.registers) if self.registers else None
        if getter is None:
            self.take: Callable[[list[int]], tuple[int, ...]] = lambda registers: ()
        elif self.count == 1:
            self.take = lambda registers: (getter(registers),)
        else:
            self.take = getter


class CompiledProgram:
    """A program's compiled module, its block plan and a pool of idle instances."""

    def __init__(
        self,
        engine: wasmtime.Engine,
        module: wasmtime.Module,
        plan: ProgramPlan,
        program_id: Hash256 | None = None,
    ) -> None:
        self.engine = engine
        self.module = module
        self.plan = plan
        self.program_id = program_id
        self.sync = _StateSync(plan)
        self._idle: dict[int, list[_Instance]] = {}
        self._lock = threading.Lock()

    def runs(self, program: ForgeProgram) -> bool:
        """Whether this module was compiled from ``program``'s code."""
        if self.plan.code is program.code:
            return True
        if self.program_id is not None:
            return self.program_id == program.program_id
        return self.plan.code == program.code

    def acquire(self, pages: int) -> _Instance:
        """An instance with ``pages`` pages of data memory, for the caller alone.

        Performance note: instances are pooled; instantiating costs ~60 µs, a slice ~15 µs.
        """
        with self._lock:
            idle = self._idle.get(pages)
            if idle:
                return idle.pop()
        return _Instance(self.engine, self.module, pages)

    def release(self, instance: _Instance) -> None:
        """Give back an instance taken with :meth:`acquire`."""
        if instance.pages > _POOL_MAX_PAGES:
            return
        with self._lock:
            idle = self._idle.setdefault(instance.pages, [])
            if len(idle) < _POOL_DEPTH:
                idle.append(instance)


def _state_fits(machine: Machine) -> bool:
    """Whether the machine's state meets what compiled code assumes (it always should)."""
    return (
        machine.heap_start <= machine.sp <= machine.stack_start <= machine.memory_quota
        and 8 <= machine.memory_quota <= 1 << 32
        and len(machine.memory) == machine.memory_quota
        and 0 <= machine.tick_budget <= WORD_MASK
    )


def execute(
    machine: Machine,
    compiled: CompiledProgram,
    *,
    max_ticks: int | None = None,
    yield_on_tick: bool = False,
) -> MachineState:
    """``machine.run(max_ticks, yield_on_tick=...)``, through compiled code.

    ``compiled`` must come from the machine's program (else ``ValueError``).
    """
    if not compiled.runs(machine.program):
        raise ValueError("the compiled program is not the machine's program")
    if machine.state is MachineState.READY:
        machine.state = MachineState.RUNNING
    if machine.state is not MachineState.RUNNING:
        return machine.state
    if not _state_fits(machine):
        return machine.run(max_ticks, yield_on_tick=yield_on_tick)
    tick_limit = _UNLIMITED if max_ticks is None else machine.ticks_used + max_ticks
    quota = machine.memory_quota
    instance = compiled.acquire(-(-quota // _PAGE))
    own_memory = machine.memory
    copy_in(instance.memory_address, own_memory, quota)
    shared = _byte_view(instance.memory_address, quota)
    # Performance note: the reference steps between compiled stretches use the wasm memory
    # in place (a memoryview), so control crosses between tiers without copying.
    machine.memory = shared  # type: ignore[assignment]  # see the module docstring
    try:
        _loop(machine, compiled, instance, tick_limit, yield_on_tick)
    finally:
        machine.memory = own_memory
        copy_out(instance.memory_address, own_memory, quota)
        shared.release()
        compiled.release(instance)
    return machine.state


def _loop(
    machine: Machine,
    compiled: CompiledProgram,
    instance: _Instance,
    tick_limit: int,
    yield_on_tick: bool,
) -> None:
    """Alternate compiled code and single reference steps until the slice ends."""
    plan = compiled.plan
    code, enterable, sync = plan.code, plan.enterable, compiled.sync
    length = len(code)
    running = MachineState.RUNNING
    tick = Opcode.TICK
    while machine.state is running and machine.ticks_used < tick_limit:
        pc = machine.pc
        if pc < length and enterable[pc]:
            if instance.enter(machine, sync, tick_limit, yield_on_tick) != _STEP:
                return
            if machine.ticks_used >= tick_limit:
                return
            pc = machine.pc
        ticking = pc < length and code[pc].opcode == tick
        machine.step()
        if ticking and yield_on_tick:
            return
