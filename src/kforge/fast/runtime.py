"""Running a compiled program on a :class:`~kforge.machine.Machine`.

One ``execute`` call is one execution slice with the contract of
``Machine.run(max_ticks, yield_on_tick=...)``.

**Binding.**  A machine run on compiled code is *bound* to a wasm instance of its
program's module: ``machine.memory`` becomes a ``memoryview`` of the instance's
memory 0 and ``machine.tier_state`` holds the :class:`_Binding` (the instance and
the compiled program).  The binding outlives the call, so the next slice enters
compiled code with no copy at all; the reference interpreter, deliveries,
``snapshot()``, ``copy()``, checkpoints and state hashes all work on the
``memoryview`` directly (``kforge.memory.Memory`` is any writable fixed-size
buffer of exactly ``memory_quota`` bytes).  The machine holds its complete state
whenever Python code can see it: registers and the rest are taken back at every
exit, and the memory *is* the wasm memory.

* The first entry into compiled code copies the machine's own buffer into the
  instance (:mod:`kforge.fast.transfer`) and lets the buffer go.  A call with another
  compiled program (another :class:`~kforge.fast.tiering.FastTier`, a recompile)
  or after the host replaced ``machine.memory`` copies again; nothing else does.
* A bound instance is never in a pool.  The view keeps the instance alive (the
  ctypes buffer under it references the instance), so any ``memoryview`` taken
  from ``machine.memory`` stays valid, and the store and its memory are freed
  when the machine (and every such view) is dropped.
* When a machine with a small quota (at most ``SPARSE_ABOVE``) halts or faults,
  it is unbound: its memory is copied into a new ``bytearray`` (one ``memmove``)
  and the instance goes back to the pool -- only when nothing else still views
  its memory (checked by reference counts), else it is simply left to be freed.
  A larger final machine stays bound: copying its memory out would cost more
  than the instance it frees.  :func:`unbind` does the same on request.
* ``Machine.copy()`` and ``restore()`` make unbound machines with their own buffer.

The host loop: at a pc where compiled code can start, hand the state words over
(:mod:`kforge.fast.abi`; only the registers the program names), call ``run``
and take the state back.  Compiled code returns on HALT, a fault, a yielding
TICK, or STEP: then the host executes one instruction with ``Machine.step()``
(SEND, RECV and POLL, so channel semantics exist only in ``kforge.machine``; a
block the remaining ticks cannot pay for whole; a pc in the middle of a block)
and goes on.  Entering compiled code costs a few microseconds, so a stretch that
compiled code last ran for only a few ticks before a host instruction (a
``SEND; RECV`` loop between its replies) runs on the interpreter instead (see
``_loop``): a host call's round trip then costs about what it costs there.
"""

from __future__ import annotations

import ctypes
import importlib
import operator
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

import wasmtime

from kforge.core import Hash256
from kforge.fast.abi import FAULT_EXIT_BASE, STATE_WORDS, Exit, FlagKind, flags_from_recipe
from kforge.fast.analysis import HOST_OPCODES, RunFacts
from kforge.fast.transfer import SPARSE_ABOVE, copy_in, copy_out
from kforge.isa import REGISTER_COUNT, WORD_MASK, FaultCode, Opcode
from kforge.machine import Machine, MachineState
from kforge.memory import allocate_memory
from kforge.program import ForgeProgram

__all__ = [
    "ENGINE_SETTINGS",
    "CompiledProgram",
    "bound_program",
    "execute",
    "is_bound",
    "make_engine",
    "unbind",
]

_PAGE: Final = 65536
_UNLIMITED: Final = 1 << 80
#: Idle instances kept per memory size, and the largest memory worth keeping.
_POOL_DEPTH: Final = 4
_POOL_MAX_PAGES: Final = 256
_HALT: Final = int(Exit.HALT)
_STEP: Final = int(Exit.STEP)
_EXPLICIT: Final = int(FlagKind.EXPLICIT)
#: An entry into compiled code that runs fewer ticks than this marks its leader short:
#: entering costs about what the interpreter takes for that many instructions.
SHORT_ENTRY_TICKS: Final = 12
#: The most ticks the interpreter runs from a short leader before compiled code is used.
SHORT_RUN_TICKS: Final = 64
_HOST_OPCODES: Final = frozenset(int(opcode) for opcode in HOST_OPCODES)
#: Everything about the engine that changes compiled code (part of the cache key).
ENGINE_SETTINGS: Final = "multi-memory,wide-arithmetic,tail-call,opt=speed"


def make_engine() -> wasmtime.Engine:
    """An engine with the features the generated code uses."""
    config = wasmtime.Config()
    config.wasm_multi_memory = True
    config.wasm_wide_arithmetic = True
    config.wasm_tail_call = True
    config.cranelift_opt_level = "speed"
    return wasmtime.Engine(config)


#: A data memory of at least this many pages (16 MiB) asks the host for huge pages
#: (see :func:`_advise_huge_pages`); a smaller one would only hold more memory with them.
HUGE_PAGES_FROM: Final = 256
_MADV_HUGEPAGE: Final = 14


def _find_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` on Linux, else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _find_madvise()


def _advise_huge_pages(address: int, size: int) -> None:
    """Ask the kernel to back a data memory with huge pages where it has them.

    Performance note: a program that builds values touches fresh memory all the way;
    with 4 KiB pages the first touches cost more than the program's own work (a
    Starlark program of big-integer sums in 256 MiB: 44,000 page faults, twice its
    compute time).  Only speed depends on the answer, so a refusal is ignored.
    """
    if _madvise is not None:
        _madvise(address, size, _MADV_HUGEPAGE)


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
        #: Whether memory 0 is still all zero (never bound to a machine).
        self.fresh = True
        self.instance = instance
        # Memory 0 never grows again and memory 1 never grows: their addresses are fixed.
        self.memory_address = _address(memory, self.store)
        if pages >= HUGE_PAGES_FROM:
            _advise_huge_pages(self.memory_address, pages * _PAGE)
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

    def __init__(self, facts: RunFacts) -> None:
        self.registers = facts.used_registers
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
    """A program's compiled module, what running it needs of its plan, and a pool of idle
    instances."""

    def __init__(
        self,
        engine: wasmtime.Engine,
        module: wasmtime.Module,
        facts: RunFacts,
        program_id: Hash256 | None = None,
    ) -> None:
        self.engine = engine
        self.module = module
        self.facts = facts
        self.program_id = program_id
        self.sync = _StateSync(facts)
        #: Leaders where compiled code ran only a few ticks when last entered (see ``_loop``).
        self.short = bytearray(len(facts.code))
        self._idle: dict[int, list[_Instance]] = {}
        self._lock = threading.Lock()

    def runs(self, program: ForgeProgram) -> bool:
        """Whether this module was compiled from ``program``'s code."""
        if self.facts.code is program.code:
            return True
        if self.program_id is not None:
            return self.program_id == program.program_id
        return self.facts.code == program.code

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


class _Binding:
    """A machine's hold on one wasm instance: ``view`` is the machine's memory.

    ``buffer`` is the ctypes array under ``view``; it references the instance, so
    the instance (and its store and memory) lives as long as any view of it.
    """

    __slots__ = ("buffer", "compiled", "instance", "view")

    def __init__(self, compiled: CompiledProgram, instance: _Instance, size: int) -> None:
        buffer = (ctypes.c_ubyte * size).from_address(instance.memory_address)
        buffer.owner = instance  # type: ignore[attr-defined]  # keeps the memory alive
        self.compiled = compiled
        self.instance = instance
        self.buffer = buffer
        self.view = memoryview(buffer).cast("B")


def _bind(machine: Machine, compiled: CompiledProgram) -> _Instance:
    """The instance ``machine`` runs on, binding it first when it is not bound to ``compiled``.

    Performance note: a bound machine whose memory is still the binding's view
    (the usual case from the second slice on) costs two identity checks.
    """
    binding = machine.tier_state
    if type(binding) is _Binding and binding.compiled is compiled:
        if machine.memory is not binding.view:  # the host gave the machine another buffer
            copy_in(binding.instance.memory_address, machine.memory, machine.memory_quota)
            machine.memory = binding.view
        return binding.instance
    quota = machine.memory_quota
    instance = compiled.acquire(-(-quota // _PAGE))
    copy_in(instance.memory_address, machine.memory, quota, destination_zero=instance.fresh)
    instance.fresh = False
    bound = _Binding(compiled, instance, quota)
    machine.memory = bound.view
    machine.tier_state = bound
    if type(binding) is _Binding:  # bound to another compiled program before: let that go
        _retire(binding)
    return instance


def _retire(binding: _Binding) -> None:
    """Let go of a binding no machine uses any more.

    Its instance goes back to the pool only when nothing else can see its memory:
    no reference to the view but the binding's, no export of it, and no other
    view of the buffer (slices hold the buffer until they die).  Otherwise the
    instance is left to be freed with the last view.
    """
    if sys.getrefcount(binding.view) > 2:  # the binding's slot and the argument
        return
    try:
        binding.view.release()
    except BufferError:  # something holds a buffer export of it
        return
    if sys.getrefcount(binding.buffer) > 2:
        return
    binding.compiled.release(binding.instance)


def bound_program(machine: Machine) -> CompiledProgram | None:
    """The compiled program ``machine`` is bound to, if it is bound."""
    binding = machine.tier_state
    if type(binding) is _Binding and machine.memory is binding.view:
        return binding.compiled
    return None


def is_bound(machine: Machine) -> bool:
    """Whether ``machine``'s memory is the memory of a wasm instance right now."""
    binding = machine.tier_state
    return type(binding) is _Binding and machine.memory is binding.view


def unbind(machine: Machine) -> None:
    """Give a bound machine a buffer of its own again (a copy) and let the instance go.

    Nothing to do for a machine that is not bound.  The machine stays exactly in
    its state; a later fast slice binds it again.
    """
    binding = machine.tier_state
    if type(binding) is not _Binding:
        return
    machine.tier_state = None
    if machine.memory is binding.view:
        quota = machine.memory_quota
        if quota <= SPARSE_ABOVE:
            machine.memory = bytearray(binding.view)
        else:
            own = allocate_memory(quota)
            copy_out(binding.instance.memory_address, own, quota)
            machine.memory = own
    _retire(binding)


def execute(
    machine: Machine,
    compiled: CompiledProgram,
    *,
    max_ticks: int | None = None,
    yield_on_tick: bool = False,
) -> MachineState:
    """``machine.run(max_ticks, yield_on_tick=...)``, through compiled code.

    ``compiled`` must come from the machine's program (else ``ValueError``).  The
    machine stays bound to its instance afterwards (see the module docstring),
    unless it stopped with a small quota.
    """
    if not compiled.runs(machine.program):
        raise ValueError("the compiled program is not the machine's program")
    if machine.state is MachineState.READY:
        machine.state = MachineState.RUNNING
    if machine.state is not MachineState.RUNNING:
        return machine.state
    tick_limit = _UNLIMITED if max_ticks is None else machine.ticks_used + max_ticks
    _loop(machine, compiled, tick_limit, yield_on_tick)
    state = machine.state
    if state.is_final and machine.memory_quota <= SPARSE_ABOVE:
        unbind(machine)  # nothing will run it again: its instance can serve another machine
    return state


def _loop(
    machine: Machine, compiled: CompiledProgram, tick_limit: int, yield_on_tick: bool
) -> None:
    """Alternate compiled code and the reference interpreter until the slice ends.

    A leader where compiled code ran only a few ticks before reaching a host
    instruction (a ``SEND; RECV`` loop resumed after its reply) is marked *short*:
    from there, or from a host instruction just before it, the interpreter runs
    instead, for at most :data:`SHORT_RUN_TICKS`, which costs less than entering
    compiled code.  A short run that uses them all drops the mark (the code runs
    long after all).  Marks change only where the tiers take turns, never the
    machine's state.  A slice that yields on TICK in a program with TICKs steps
    instead (a run could not tell a TICK it ended on).  The machine is bound to its
    instance when compiled code is first entered (a slice the interpreter runs whole
    needs none); a machine whose state compiled code could not take (it always can)
    runs the rest of the slice on the interpreter.
    """
    facts = compiled.facts
    code, enterable, sync, short = facts.code, facts.enterable, compiled.sync, compiled.short
    host = _HOST_OPCODES
    length = len(code)
    running = MachineState.RUNNING
    tick = Opcode.TICK
    runs_short = not (yield_on_tick and facts.has_tick)
    instance: _Instance | None = None
    while machine.state is running and machine.ticks_used < tick_limit:
        pc = machine.pc
        if pc >= length:
            machine.step()  # faults: the interpreter says how
            return
        if runs_short:
            marked = pc if short[pc] else pc + 1
            if marked == pc or (marked < length and short[marked] and code[pc].opcode in host):
                before = machine.ticks_used
                budget = min(SHORT_RUN_TICKS, tick_limit - before)
                machine.run(budget)
                if machine.state is running and machine.ticks_used - before >= budget:
                    short[marked] = 0
                continue
        if enterable[pc]:
            if instance is None:
                if not _state_fits(machine):
                    machine.run(tick_limit - machine.ticks_used, yield_on_tick=yield_on_tick)
                    return
                instance = _bind(machine, compiled)
            before = machine.ticks_used
            if instance.enter(machine, sync, tick_limit, yield_on_tick) != _STEP:
                return
            if machine.ticks_used >= tick_limit:
                return
            entered, pc = pc, machine.pc
            short[entered] = (
                machine.ticks_used - before < SHORT_ENTRY_TICKS
                and pc < length
                and code[pc].opcode in host
            )
        ticking = pc < length and code[pc].opcode == tick
        machine.step()
        if ticking and yield_on_tick:
            return
