"""From IR functions to a Forge program: allocation order, machine code, stack depth,
the unwind table and the source map.

**Order.**  Functions are allocated callees first (strongly connected components of
the call graph in post-order), so every call knows which registers its callee may
change (:mod:`kforge.starlark.regalloc`).

**Stack depth.**  The machine's stack grows down from the top of memory towards the
heap, and a program cannot read its stack pointer, so the heap limit :data:`LIM`
is kept as a conservative mirror of it: a function whose depth cannot be known when
it is compiled (it is recursive, or called through a value) is *checked*: on entry
it lowers ``LIM`` by the deepest stack its frame and the unchecked functions below
it can use, and faults as a Starlark stack overflow if ``LIM`` falls below the heap
pointer; on return it raises ``LIM`` again.  Every other function's depth is folded
into the nearest checked caller's, so it pays nothing.  An allocation succeeds only
below ``LIM``, so the heap never meets the stack.

**Unwinding.**  Every call that may be on the stack when an error is raised gets an
entry in a table compiled into a lookup function (:data:`SITE_INFO`): the return
address maps to the number of words the caller pushed around the call, whether the
caller is Starlark code (then its source position), and whether it is the bottom of
the stack or a ``catch``.  The runtime's error path pops the stack frame by frame
with it to write the traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from kforge.debuginfo import DebugInfo, FunctionInfo
from kforge.isa import Opcode
from kforge.program import CheckedCode, ForgeProgram, InstructionFields, InstructionPool
from kforge.starlark import layout as L
from kforge.starlark.data import DataLayout, Record, words
from kforge.starlark.ir import BlockRef, CodeRef, DataRef, Function, Insn, Loc, Term
from kforge.starlark.lowlevel import global_item
from kforge.starlark.regalloc import Allocation, allocate, block_order
from kforge.starlark.regs import (
    ALL_CLOBBERED,
    HP,
    LIM,
    ONE,
    RESULT,
    SCRATCH_A,
    SCRATCH_B,
    SIGN,
    ZERO,
)
from kforge.starlark.runtime.gc import GC_AREA_END, HEADROOM_SHIFT

#: The generated function that maps a return address to its site information.
SITE_INFO: Final = "rt$site_info"
SITE_INFO_CLOBBER: Final = (1 << RESULT) | (1 << SCRATCH_A) | (1 << SCRATCH_B)
#: Functions every program links: the error raised by a failed stack check.
STACK_OVERFLOW: Final = "rt_stack_overflow"
#: The allocation slow path (``alloc`` calls it when the heap pointer meets the limit):
#: generated code that first calls :data:`GC_TAKE` (a free run the last sweep found)
#: with the few registers that changes pushed; failing that, it saves every register
#: just above ``LIM`` (in the emergency reserve), pushes the stack marker
#: (``layout.GC_STACK_MARKER``: the collector's roots are the stack above it), calls
#: :data:`GC_SLOW` (the collector's allocator, ``runtime/gc.py``), restores the
#: registers, zeroes their save area (heap may grow there once the limit rises) and
#: returns the address, or jumps to :data:`OUT_OF_MEMORY` when it got none.  Its
#: callers see it change only ``r1``, so their registers are allocated as they were
#: before the collector existed; its stack depth counts the collector's frames.
GC_ALLOC: Final = "gc_alloc"
#: Emitted with it: a collection alone, for a failed stack check (a checked function's
#: frame did not fit above the heap).  Every register is kept but ``r250``, which is 1
#: if the heap pointer went down (the check is worth making again), else 0.
GC_ROOM: Final = "gc_room"
GC_TAKE: Final = "gc_take_free"
_GC: Final = "kforge.starlark.runtime.gc"
#: The data item through which the collector moves ``LIM`` (see ``runtime/gc.py``).
LIMIT_SHIFT: Final = global_item(_GC, "_limit_shift")
HEADROOM: Final = global_item(_GC, "_headroom")
#: How far ``LIM`` is kept below the stack's limit while the bump region is a free run
#: below the top of the heap, and that region's base as ``LIM`` last counted it.
GAP: Final = global_item(_GC, "_gap")
REGION_BASE: Final = global_item(_GC, "_region_base")
GC_SLOW: Final = "gc_alloc_slow"
OUT_OF_MEMORY: Final = "out_of_memory"
GC_ALLOC_CLOBBER: Final = (1 << RESULT) | (1 << SCRATCH_A) | (1 << SCRATCH_B)
#: The registers the allocation slow path saves, and the word (from ``LIM``) each goes
#: to: r1..r248 at their own number, r255 at 249 (see ``runtime/gc.py``).
GC_SAVED: Final = (*range(1, 249), 255)
GC_SAVE_SLOT: Final = {register: min(register, 249) for register in GC_SAVED}
#: Constants the runtime reads as ``data_address(NAME)``: the end of the data section
#: (where the environment block starts), the top of the memory the program is compiled
#: for, and the return address of the start code's call (the bottom of the stack).
DATA_END: Final = "rt$data_end"
MEMORY_TOP: Final = "rt$memory_top"
BOTTOM_RETURN: Final = "rt$bottom_return"
#: Bytes of slack per frame for the two words an indirect call pushes before RET.
_FRAME_SLACK: Final = 16


class SiteKind(IntEnum):
    """The kind of the caller at a call site (bits 8..9 of the site information)."""

    RUNTIME = 0
    STARLARK = 1
    BOTTOM = 2
    CATCH = 3


#: Bit of a site word marking a call made by a builtin (its number in bits 16..31).
SITE_BUILTIN_FRAME: Final = 1 << 10
#: The data item of builtin names tracebacks show for builtin frames: a 32-bit str
#: address per builtin (data addresses fit 32 bits), so half a word each.
BUILTINS_TABLE: Final = "rt$builtins"


def site_word(pushes: int, kind: SiteKind, function: int = 0, loc: Loc | None = None) -> int:
    """Site information: pushes (bits 0..7), kind (8..9), builtin frame (10), function
    number (16..31), line (32..51), column (52..63)."""
    line = min(loc.line, (1 << 20) - 1) if loc else 0
    col = min(loc.col, (1 << 12) - 1) if loc else 0
    return pushes | kind << 8 | function << 16 | line << 32 | col << 52


class CompileLimit(Exception):
    """The program is beyond what the code generator handles (e.g. too many pushes)."""


#: The data item the error path reads frame names from: per Starlark function, a word
#: holding the address of its file name (bits 0..31) and of its name (32..63), static
#: strings.
FRAMES_TABLE: Final = "rt$frames"


#: Bytes the heap limit keeps back so that an error can still be reported (the
#: runtime's ``core.EMERGENCY``).
EMERGENCY_RESERVE: Final = 4096
#: Fault code of a program whose memory quota cannot hold its stack reserve.
FAULT_NO_MEMORY: Final = 2
#: Data items where the start code saves the environment block's address and length.
ENVIRONMENT_WORDS: Final = (
    global_item("kforge.starlark.runtime.core", "environment_address"),
    global_item("kforge.starlark.runtime.core", "environment_length"),
)


@dataclass
class Unit:
    """Everything that goes into one program.  ``entry`` is the function the start code
    calls (the main module's init); ``memory_size`` the memory quota the program is
    compiled for: the stack starts at its top."""

    functions: dict[str, Function]
    declarations: Mapping[str, bytes | Record]
    entry: str
    memory_size: int
    #: Call instructions (by id) that are catch sites.
    catch_sites: set[int] = field(default_factory=set)
    #: Call instructions (by id) at the bottom of the stack.
    bottom_sites: set[int] = field(default_factory=set)


@dataclass
class Emitted:
    program: ForgeProgram
    debug: DebugInfo
    checked: set[str]
    frame_depth: dict[str, int]


_OPCODE: Final = {
    name: Opcode[name]
    for name in [
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "MOD",
        "AND",
        "OR",
        "XOR",
        "SHL",
        "SHR",
        "NEG",
        "NOT",
        "LOADW",
        "LOAD",
        "STOREW",
        "STORE",
        "SEND",
        "RECV",
        "POLL",
        "BUDGET",
        "TICK",
        "PUSH",
        "POP",
    ]
}


#: IR operations that are one machine instruction ``dst = a op b``.
_BINARY: Final = frozenset(("ADD", "SUB", "MUL", "DIV", "MOD", "AND", "OR", "XOR", "SHL", "SHR"))


def _static_string(data: DataLayout, text: str) -> int:
    """The address of a static str (below 2**32, so that tables can hold it in 32 bits)."""
    from kforge.starlark.data import string_name, string_object

    payload = text.encode()
    name = string_name(payload)
    address = data.placed.get(name)
    if address is None:
        address = data.place(name, string_object(L.TAG_STRING, payload))
    if address >= 1 << 32:
        raise CompileLimit("the static data does not fit 4 GiB")
    return address


def _halfwords(values: list[int]) -> bytes:
    """``values`` (32-bit) as 4-byte little-endian numbers, padded to a whole word."""
    packed = b"".join(value.to_bytes(4, "little") for value in values) or bytes(4)
    return packed + bytes(-len(packed) % 8)


#: An instruction under construction: opcode, rd, rs1, rs2, imm (as ``Instruction``'s fields).
_Key = InstructionFields
_U64: Final = (1 << 64) - 1

#: Instructions made by earlier programs, shared (they are immutable): every program
#: repeats the runtime's instructions, and most of its own are common ones.
_made_instructions = InstructionPool()
_MADE_INSTRUCTIONS_KEPT: Final = 200_000


class _Code:
    """Machine code under construction, with fix-ups for labels not yet placed.

    Instructions are kept as tuples of their fields and made :class:`Instruction`
    objects once, at the end: equal instructions are then one object (they are
    immutable, and a program repeats most of its instructions: a third are distinct)."""

    data: DataLayout

    def __init__(self) -> None:
        #: Every call's return address and site word, for a host reading the stack;
        #: and the callee whose raising decides whether an error can unwind through it
        #: ("": it can), for the runtime's table (see :meth:`unwind_sites`).
        self.all_sites: list[tuple[int, int, str]] = []
        self.builtin_frame = False
        self.code: list[_Key] = []
        #: The source map as runs: (first instruction, function number, line, column).
        self.runs: list[tuple[int, int, int, int]] = []
        self.labels: dict[tuple[str, int] | str, int] = {}
        self.fixups: list[tuple[int, tuple[str, int] | str]] = []
        self.function = 0
        self.loc: Loc | None = None
        self._run_function = -1
        self._run_loc: Loc | None = None
        self._run_key: tuple[int, int, int] | None = None
        #: LI instructions that load the end of the data section (known once it is laid out).
        self.data_end_fixups: list[int] = []
        #: Values of the constants named like data items (see DATA_END).
        self.constants: dict[str, int] = {}
        #: Whether the allocation slow path (and GC_ROOM with it) is in the program.
        self.collector = False

    def emit(self, opcode: int, rd: int = 0, rs1: int = 0, rs2: int = 0, imm: int = 0) -> int:
        if self.loc is not self._run_loc or self.function != self._run_function:
            self._start_run()
        code = self.code
        code.append((opcode, rd, rs1, rs2, imm & _U64))
        return len(code) - 1

    def emit_all(self, instructions: list[_Key]) -> None:
        """Emit several instructions at once (their ``imm`` already unsigned); with none,
        the code that follows is appended straight to :attr:`code`."""
        if self.loc is not self._run_loc or self.function != self._run_function:
            self._start_run()
        self.code.extend(instructions)

    def patch(self, index: int, imm: int) -> None:
        """Set the ``imm`` of instruction ``index`` (a jump's or call's target)."""
        old = self.code[index]
        self.code[index] = (old[0], old[1], old[2], old[3], imm)

    def address(self, name: str) -> int:
        """The value of the constant ``name`` (see :data:`DATA_END`), else the address of
        the data item ``name`` (laid out the first time it is asked for)."""
        constant = self.constants.get(name)
        return self.data.address(name) if constant is None else constant

    def site(self, word: int, unless_callee_cannot_raise: str = "") -> None:
        """Enter the return address of the call just emitted in the site tables."""
        self.all_sites.append((len(self.code), word, unless_callee_cannot_raise))

    def unwind_sites(self, may_raise: dict[str, bool]) -> list[tuple[int, int]]:
        """The calls an error can unwind through: (return address, site word)."""
        return [
            (address, word)
            for address, word, callee in self.all_sites
            if not callee or may_raise.get(callee, True)
        ]

    def _start_run(self) -> None:
        """The position changed object: a new run of the source map if its value did."""
        loc = self.loc
        key = (self.function, loc.line if loc else 0, loc.col if loc else 0)
        if key != self._run_key:
            self.runs.append((len(self.code), *key))
            self._run_key = key
        self._run_function, self._run_loc = self.function, loc

    def instructions(self) -> CheckedCode:
        """The code, fix-ups applied."""
        code, labels = self.code, self.labels
        for index, label in self.fixups:
            target = labels.get(label)
            if target is None:
                raise KeyError(f"undefined label {label!r}")
            old = code[index]
            code[index] = (old[0], old[1], old[2], old[3], target)
        global _made_instructions
        if len(_made_instructions) > _MADE_INSTRUCTIONS_KEPT:
            _made_instructions = InstructionPool()  # a compile in another thread keeps its own
        return _made_instructions.code(code)

    def emit_to(
        self, opcode: int, label: tuple[str, int] | str, rd: int = 0, rs1: int = 0, rs2: int = 0
    ) -> int:
        index = self.emit(opcode, rd, rs1, rs2)
        self.fixups.append((index, label))
        return index

    @property
    def here(self) -> int:
        return len(self.code)


class _CodeAtZero(_Code):
    """Code emitted at address 0 to be placed anywhere later (:class:`_Placeable`):
    every constant and data address reads as 0, noted with the instruction it is in."""

    def __init__(self, collector: bool) -> None:
        super().__init__()
        self.collector = collector
        self.addresses: list[tuple[int, str]] = []  # (instruction, name)

    def address(self, name: str) -> int:
        self.addresses.append((len(self.code), name))
        return 0


_Label = tuple[str, int] | str


@dataclass
class _Placeable:
    """A function's machine code as emitted at address 0, and what placing it at
    another address and in another program changes: its jumps to itself, its calls,
    its labels, the addresses and constants in it, the function numbers in its site
    words and source map."""

    code: list[_Key]
    jumps: list[tuple[int, int, int, int, int, int]]  # (instruction, its fields but imm, target)
    calls: list[tuple[int, _Label]]  # (instruction, label of another function)
    labels: list[tuple[_Label, int]]
    addresses: list[tuple[int, str]]  # (instruction, name): imm += its address
    data_end: list[int]  # instructions that load the end of the data (see DATA_END)
    sites: list[tuple[int, int, str]]  # as _Code.all_sites, with function number 0
    runs: list[tuple[int, int, int]]  # (first instruction, line, column)
    last_loc: Loc | None

    @classmethod
    def of_runtime(
        cls,
        function: Function,
        allocation: Allocation,
        is_checked: bool,
        frame: int,
        unit: Unit,
        collector: bool,
    ) -> _Placeable:
        """The code of runtime ``function``, emitted once per process for each way a
        program may link it."""
        key = (id(function), id(allocation.registers), is_checked, frame, collector)
        known = _runtime_code.get(key)
        if known is None or known[0] is not function or known[1] is not allocation.registers:
            if len(_runtime_code) >= _RUNTIME_ALLOCATIONS_KEPT:
                _runtime_code.clear()
            code = _CodeAtZero(collector)
            _emit_function(code, function, allocation, is_checked, frame, unit, 0)
            known = (function, allocation.registers, cls.from_code(code))
            _runtime_code[key] = known
        return known[2]

    @classmethod
    def from_code(cls, code: _CodeAtZero) -> _Placeable:
        """The placeable form of one function's code, emitted alone."""
        jumps: list[tuple[int, int, int, int, int, int]] = []
        calls: list[tuple[int, _Label]] = []
        for index, label in code.fixups:
            target = code.labels.get(label)
            if target is None:
                calls.append((index, label))
            else:
                opcode, rd, rs1, rs2, _ = code.code[index]
                jumps.append((index, opcode, rd, rs1, rs2, target))
        return cls(
            code.code,
            jumps,
            calls,
            list(code.labels.items()),
            code.addresses,
            code.data_end_fixups,
            code.all_sites,
            [(index, line, col) for index, _, line, col in code.runs],
            code._run_loc,
        )

    def place(self, code: _Code, number: int) -> None:
        """Append the code to ``code`` (whose function number is this function's), with
        ``number`` in its site words, as :func:`_emit_function` would have emitted it."""
        base = len(code.code)
        out = code.code
        out.extend(self.code)
        for index, opcode, rd, rs1, rs2, target in self.jumps:
            out[base + index] = (opcode, rd, rs1, rs2, base + target)
        code.fixups.extend([(base + index, label) for index, label in self.calls])
        code.labels.update([(label, base + index) for label, index in self.labels])
        for index, name in self.addresses:  # in order: data is laid out as it is asked for
            opcode, rd, rs1, rs2, imm = out[base + index]
            out[base + index] = (opcode, rd, rs1, rs2, (imm + code.address(name)) & _U64)
        code.data_end_fixups.extend([base + index for index in self.data_end])
        shifted = number << 16
        code.all_sites.extend(
            [(base + index, word | shifted, callee) for index, word, callee in self.sites]
        )
        function = code.function
        code.runs.extend([(base + index, function, line, col) for index, line, col in self.runs])
        code._run_function, code._run_loc = function, self.last_loc
        code._run_key = code.runs[-1][1:]


#: Runtime functions' code as emitted by earlier programs: every program links the same
#: runtime functions, with the same allocations, at other addresses.
_runtime_code: dict[tuple[int, int, bool, int, bool], tuple[Function, object, _Placeable]] = {}


def emit_program(unit: Unit) -> Emitted:
    """Allocate, lay out and encode ``unit``."""
    functions, summaries = _reachable(unit)
    # A call of a function that never returns (the error path) adds no edge: nothing its
    # caller keeps matters after it, and it must not make every allocating function
    # look recursive.
    noreturn = {name for name, function in functions.items() if function.noreturn}
    graph = {name: summary.callees - noreturn for name, summary in summaries.items()}
    address_taken = set().union(*(summary.address_taken for summary in summaries.values()))
    components = _components(graph)
    checked: set[str] = set()
    component_of: dict[str, int] = {}
    for number, component in enumerate(components):
        for name in component:
            component_of[name] = number
        if len(component) > 1 or any(name in graph[name] for name in component):
            checked.update(component)
    checked |= address_taken
    for name, function in functions.items():
        if function.checked:
            checked.add(name)

    allocations: dict[str, Allocation] = {}
    depth: dict[str, int] = {}
    reach: dict[str, int | None] = {}
    may_raise: dict[str, bool] = {}
    for component in components:  # callees first
        for name in sorted(component):
            function = functions[name]
            clobbers: dict[int, int] = {}
            summary = summaries[name]
            jumps_away = _jump_clobber(summary, allocations, component_of, component_of[name])
            clobber_of: dict[str, int] = {}  # by callee: a top level calls a few thousand times
            for insn in summary.calls:
                if insn.op == "CALL":
                    callee = _callee(insn)
                    mask = clobber_of.get(callee)
                    if mask is None:
                        mask = clobber_of[callee] = _call_clobber(
                            callee, noreturn, allocations, component_of, component_of[name]
                        )
                    clobbers[id(insn)] = mask
            allocations[name] = _allocate(function, clobbers)
            # a jump to another function (a tail call) changes what that function changes
            allocations[name].clobber |= jumps_away
            allocations[name].own |= jumps_away
        if len(component) > 1 or component[0] in graph[component[0]]:
            # Seen from outside, a recursive group changes its members' own registers and
            # what they call outside the group: not everything (inside, each member saves
            # what it keeps across calls within the group).
            outside = 0
            for name in component:
                outside |= allocations[name].own
                for callee in graph[name]:
                    if component_of.get(callee) != component_of[name]:
                        outside |= (
                            allocations[callee].clobber if callee in allocations else ALL_CLOBBERED
                        )
                if summaries[name].indirect:
                    outside = ALL_CLOBBERED
            for name in component:
                allocations[name].clobber = outside
        for name in sorted(component):
            depth[name] = _frame_depth(
                functions[name], summaries[name], allocations[name], depth, checked, component_of
            )
            reach[name] = _checked_reach(
                summaries[name], allocations[name], reach, checked, component_of[name], component_of
            )
            if name == GC_ALLOC:  # see GC_ALLOC: what its own code pushes and calls
                # GC_ROOM runs the collector below a frame that did not fit: its frames
                # must stay clear of the collector's area at the bottom of the reserve
                assert depth[GC_SLOW] + 64 <= EMERGENCY_RESERVE - GC_AREA_END
                quick = 8 * (len(_gc_quick_saved(allocations[GC_TAKE])) + 1)
                depth[name] = max(
                    depth.get(OUT_OF_MEMORY, 0),
                    8 + _FRAME_SLACK + quick + depth[GC_TAKE],
                    8 + _FRAME_SLACK + 8 + depth[GC_SLOW],
                )
        raises = any(_may_raise(functions[name], summaries[name], may_raise) for name in component)
        for name in component:
            may_raise[name] = raises

    frame = {name: reach[name] or 0 for name in checked if name in functions}
    code = _Code()
    data = DataLayout(unit.declarations)
    code.data = data
    function_numbers: dict[str, int] = {}
    starlark_numbers: dict[str, int] = {}
    infos: list[FunctionInfo] = []
    frames: list[int] = []
    for name, function in functions.items():
        function_numbers[name] = len(infos)
        file, shown = function.source if function.source else ("", name)
        infos.append(FunctionInfo(name=shown, file=file, runtime=function.source is None))
        if function.source is not None:
            starlark_numbers[name] = len(frames)
            frames.append(_static_string(data, file) | _static_string(data, shown) << 32)
    data.place(FRAMES_TABLE, words(frames or [0]))
    builtin_numbers: dict[str, int] = {}
    builtin_names: list[int] = []
    for name, function in functions.items():
        if function.builtin:
            builtin_numbers[name] = len(builtin_names)
            builtin_names.append(_static_string(data, function.builtin))
    data.place(BUILTINS_TABLE, _halfwords(builtin_names))
    code.collector = GC_ALLOC in functions
    start = _emit_start(
        code,
        Unit(functions, unit.declarations, unit.entry, unit.memory_size),
        summaries,
        _stack_reserve(unit.entry, depth, reach, frame),
    )
    order = [unit.entry, *sorted(name for name in functions if name != unit.entry)]
    for name in order:
        if name == SITE_INFO:
            continue
        if name == GC_ALLOC:
            code.function = function_numbers[name]
            _emit_gc_alloc(code, _gc_quick_saved(allocations[GC_TAKE]))
            continue
        function = functions[name]
        code.function = function_numbers[name]
        number = starlark_numbers.get(name, builtin_numbers.get(name, 0))
        if function.source is None:  # the same in every program but for its addresses
            placeable = _Placeable.of_runtime(
                function,
                allocations[name],
                name in checked,
                frame.get(name, 0),
                unit,
                code.collector,
            )
            placeable.place(code, number)
        else:
            _emit_function(
                code, function, allocations[name], name in checked, frame.get(name, 0), unit, number
            )
    if SITE_INFO in functions:
        code.function = function_numbers[SITE_INFO]
        code.loc = None
        code.labels[SITE_INFO] = code.here
        _emit_site_table(code, code.unwind_sites(may_raise))

    for index in code.data_end_fixups:  # the data is all placed: only padding is left
        code.patch(index, (len(data.blob) + 7) & ~7)
    instructions = code.instructions()
    program_data = data.finish()
    starlark_to_debug = {
        number: function_numbers[name] for name, number in starlark_numbers.items()
    }
    site_rows = [
        (
            address,
            word & 0xFF,
            (word >> 8) & 3,
            starlark_to_debug.get((word >> 16) & 0xFFFF, 0)
            if (word >> 8) & 3 == SiteKind.STARLARK
            else 0,
            (word >> 32) & 0xFFFFF,
            word >> 52,
        )
        for address, word, _ in code.all_sites
    ]
    debug = DebugInfo(infos, code.runs, site_rows=site_rows)
    program = ForgeProgram(instructions, program_data, start, metadata=debug.encode())
    return Emitted(program, debug, checked, depth)


# -- analysis ---------------------------------------------------------------------

#: Allocations of the runtime's functions, which every program shares: an allocation
#: follows from the function and what its calls clobber, so a process allocates each
#: runtime function once per distinct set of callees' clobbers.
_runtime_allocations: dict[tuple[str, tuple[int, ...]], tuple[Function, Allocation]] = {}
_RUNTIME_ALLOCATIONS_KEPT = 20_000


def _allocate(function: Function, clobbers: dict[int, int]) -> Allocation:
    """``allocate``, remembered for runtime functions (compiled Starlark fills registers
    from the bottom, the runtime from the top).  Returns an allocation of its own: the
    caller adjusts its clobber set."""
    if function.source is not None:
        return allocate(function, clobbers)
    key = (function.name, tuple(clobbers.values()))
    known = _runtime_allocations.get(key)
    if known is None or known[0] is not function:
        if len(_runtime_allocations) >= _RUNTIME_ALLOCATIONS_KEPT:
            _runtime_allocations.clear()
        known = (function, allocate(function, clobbers, prefer_high=True))
        _runtime_allocations[key] = known
    shared = known[1]
    return Allocation(shared.registers, shared.saves, shared.clobber, shared.own, shared.order)


def _call_clobber(
    callee: str,
    noreturn: set[str],
    allocations: dict[str, Allocation],
    component_of: dict[str, int],
    mine: int,
) -> int:
    """What a call of ``callee`` may change, seen from the caller (in component ``mine``)."""
    if callee in noreturn:
        return 0
    if callee == SITE_INFO:
        return SITE_INFO_CLOBBER
    if callee == GC_ALLOC:
        return GC_ALLOC_CLOBBER
    if component_of.get(callee) == mine or callee not in allocations:
        return ALL_CLOBBERED
    return allocations[callee].clobber


def _may_raise(function: Function, summary: _Summary, may_raise: dict[str, bool]) -> bool:
    """Whether ``function`` may raise an error (``may_raise`` knows its callees, or they
    are in its own component: then they may)."""
    if function.noreturn:
        return True
    for insn in summary.calls:
        if insn.op == "CALLI" or may_raise.get(insn.ref.name, True):  # type: ignore[union-attr]
            return True
    return any(
        term.op == "JUMPI" or may_raise.get(term.ref.name, True)  # type: ignore[union-attr]
        for term in summary.jumps
    )


def _callee(insn: Insn) -> str:
    return insn.ref.name  # type: ignore[union-attr]  # a CALL's ref is a CodeRef


class _Summary:
    """What the code generator's analyses read of a function, found in one pass: its
    calls, the functions it names, the data it names, its jumps to other functions."""

    __slots__ = ("address_taken", "callees", "calls", "data_names", "indirect", "jumps", "names")

    def __init__(self, function: Function) -> None:
        self.calls: list[Insn] = []  # CALL and CALLI, in block order
        self.callees: set[str] = set()  # called directly or by a tail call
        self.names: set[str] = set()  # every function named, called or not
        self.address_taken: set[str] = set()  # functions whose address it loads
        self.data_names: set[str] = set()
        self.jumps: list[Term] = []  # TAILCALL and JUMPI terminators
        self.indirect = False  # it has a CALLI
        for block in function.blocks:
            for insn in block.insns:
                ref = insn.ref
                if ref is None:  # most instructions; a CALLI's callee is in a register
                    if insn.op == "CALLI":
                        self.calls.append(insn)
                        self.indirect = True
                    continue
                op = insn.op
                if op == "CALL" or op == "CALLI":
                    self.calls.append(insn)
                    self.indirect = self.indirect or op == "CALLI"
                if isinstance(ref, CodeRef):
                    self.names.add(ref.name)
                    if op == "CALL":
                        self.callees.add(ref.name)
                    elif op == "LI":
                        self.address_taken.add(ref.name)
                elif isinstance(ref, DataRef):
                    self.data_names.add(ref.name)
            term = block.term
            if term is not None:
                if isinstance(term.ref, CodeRef):
                    self.names.add(term.ref.name)
                    if term.op == "TAILCALL":
                        self.callees.add(term.ref.name)
                if term.op == "TAILCALL" or term.op == "JUMPI":
                    self.jumps.append(term)


#: Summaries of the runtime's functions, which every program shares (by identity).
_runtime_summaries: dict[int, tuple[Function, _Summary]] = {}


def _summary(function: Function) -> _Summary:
    if function.source is not None:
        return _Summary(function)
    known = _runtime_summaries.get(id(function))
    if known is None or known[0] is not function:
        if len(_runtime_summaries) >= _RUNTIME_ALLOCATIONS_KEPT:
            _runtime_summaries.clear()
        known = (function, _Summary(function))
        _runtime_summaries[id(function)] = known
    return known[1]


def _site_info_placeholder() -> Function:
    """Stands in for the generated site table while the call graph is analysed."""
    from kforge.starlark.builder import Builder

    function = Function(SITE_INFO, 1)
    builder = Builder(function)
    builder.ret(builder.params(1)[0])
    return function


def _gc_alloc_placeholder() -> Function:
    """Stands in for the generated allocation slow path while the call graph is analysed
    (it calls the collector's allocator and, on failure, the out-of-memory error)."""
    from kforge.starlark.builder import Builder

    function = Function(GC_ALLOC, 1)
    builder = Builder(function)
    size = builder.params(1)
    builder.call(GC_TAKE, size)
    address = builder.call(GC_SLOW, size)
    builder.call(OUT_OF_MEMORY, [], result=False)
    builder.ret(address)
    return function


def _reachable(unit: Unit) -> tuple[dict[str, Function], dict[str, _Summary]]:
    """The functions the program reaches from its entry, and their summaries (by name)."""
    if SITE_INFO not in unit.functions:
        unit.functions[SITE_INFO] = _site_info_placeholder()
    if GC_ALLOC not in unit.functions:
        unit.functions[GC_ALLOC] = _gc_alloc_placeholder()
    seen: dict[str, Function] = {}
    summaries: dict[str, _Summary] = {}
    stack = [unit.entry, STACK_OVERFLOW, SITE_INFO]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        function = unit.functions.get(name)
        if function is None:
            raise KeyError(f"call of undefined function {name!r}")
        seen[name] = function
        summary = summaries[name] = _summary(function)
        stack.extend(summary.names)
    return dict(sorted(seen.items())), {name: summaries[name] for name in sorted(summaries)}


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components, callees before callers (Tarjan, iterative)."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index_of:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index_of[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in graph:
                    continue
                if child not in index_of:
                    index_of[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index_of[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result


def _jump_clobber(
    summary: _Summary, allocations: dict[str, Allocation], component_of: dict[str, int], mine: int
) -> int:
    """What the functions a function jumps to (``TAILCALL``, ``JUMPI``) may change."""
    mask = 0
    for term in summary.jumps:
        if term.op == "JUMPI":
            return ALL_CLOBBERED
        if isinstance(term.ref, CodeRef):
            callee = term.ref.name
            if component_of.get(callee) == mine or callee not in allocations:
                return ALL_CLOBBERED
            mask |= allocations[callee].clobber
    return mask


def _frame_depth(
    function: Function,
    summary: _Summary,
    allocation: Allocation,
    depth: dict[str, int],
    checked: set[str],
    component_of: dict[str, int],
) -> int:
    """Bytes of stack this function and the unchecked functions below it may use."""
    deepest = 0
    mine = component_of[function.name]
    saves = allocation.saves
    below_of: dict[str, int] = {}  # by callee
    for insn in summary.calls:
        saved = saves.get(id(insn))
        pushed = 8 * len(saved) if saved else 0
        below = 0
        if insn.op == "CALL":
            callee = _callee(insn)
            below = below_of.get(callee, -1)
            if below < 0:
                below = below_of[callee] = (
                    depth.get(callee, 0)
                    if callee not in checked and component_of.get(callee) != mine
                    else 0
                )
        if pushed + below > deepest:
            deepest = pushed + below
    for term in summary.jumps:
        if term.op == "TAILCALL" and isinstance(term.ref, CodeRef):
            callee = term.ref.name
            if callee not in checked and component_of.get(callee) != mine:
                deepest = max(deepest, depth.get(callee, 0))
    return 8 + _FRAME_SLACK + deepest


def _checked_reach(
    summary: _Summary,
    allocation: Allocation,
    reach: dict[str, int | None],
    checked: set[str],
    mine: int,
    component_of: dict[str, int],
) -> int | None:
    """Bytes of stack from this function's entry (its return address included) to the
    entry of a checked function it may call, directly or through unchecked ones; None
    if it calls none.  A checked function lowers ``LIM`` by this much for as long as
    it runs (what deeper checked calls start from); the rest of its depth, the
    unchecked work below it that returns before it calls anything checked, is covered
    once by the start code's reserve (:func:`_stack_reserve`), not once per frame of a
    recursion."""
    deepest: int | None = None
    saves = allocation.saves
    below_of: dict[str, int | None] = {}  # by callee
    for insn in summary.calls:
        saved = saves.get(id(insn))
        pushed = 8 * len(saved) if saved else 0
        if insn.op == "CALLI":  # a function called through a value is checked
            below: int | None = 0
        else:
            callee = _callee(insn)
            if callee in below_of:
                below = below_of[callee]
            elif callee in checked or component_of.get(callee) == mine:
                below = below_of[callee] = 0
            else:
                below = below_of[callee] = reach.get(callee)
        if below is not None:
            deepest = max(deepest or 0, pushed + below)
    for term in summary.jumps:
        if term.op == "TAILCALL" and isinstance(term.ref, CodeRef):
            callee = term.ref.name
            if callee in checked or component_of.get(callee) == mine:
                later: int | None = 0
            else:
                later = reach.get(callee)
        else:
            later = 0
        if later is not None:
            deepest = max(deepest or 0, later)
    # no slack: the word an indirect call pushes below its return address is gone (RET
    # took it) by the time the callee starts, and the start code's reserve covers it
    return None if deepest is None else 8 + deepest


def _stack_reserve(
    entry: str,
    depth: dict[str, int],
    reach: dict[str, int | None],
    frame: dict[str, int],
) -> int:
    """Bytes the start code keeps below the top of memory, besides the emergency
    reserve, so that ``LIM`` stays below the stack.  The stack in use is at most the
    entry's way to its first checked call, plus each active checked function's
    ``frame`` (what :func:`_checked_reach` found), plus the whole depth of the
    innermost one: the reserve covers that last part for whichever it is, and the
    entry's own depth while no checked function runs."""
    beyond_frame = max((depth[name] - used for name, used in frame.items()), default=0)
    if entry in frame:
        return max(beyond_frame, 0)
    return max(depth.get(entry, 0), (reach.get(entry) or 0) + beyond_frame)


# -- emission ---------------------------------------------------------------------


def _emit_start(
    code: _Code,
    unit: Unit,
    summaries: dict[str, _Summary],
    stack_reserve: int,
) -> int:
    """The program's first instructions: save the environment block's place, set the
    reserved registers, reserve the stack below the top of memory (``stack_reserve``,
    see :func:`_stack_reserve`), check that memory is there, run the main module, halt."""
    start = code.here
    code.function = 0
    code.loc = None
    referenced = {
        name
        for summary in summaries.values()
        for name in ENVIRONMENT_WORDS
        if name in summary.data_names
    }
    for register, name in zip((254, 255), ENVIRONMENT_WORDS, strict=True):
        if name in referenced:  # only programs that read the environment
            code.emit(Opcode.STOREW, 0, register, ZERO, imm=code.data.address(name))
    code.emit(Opcode.ADD, HP, 253, ZERO)
    code.emit(Opcode.LI, ONE, imm=1)
    code.emit(Opcode.LI, SIGN, imm=1 << 63)
    top = unit.memory_size & ~7
    reserve = EMERGENCY_RESERVE + stack_reserve + 64
    code.emit(Opcode.LI, LIM, imm=max(top - reserve, 0))
    code.emit(Opcode.LOAD, SCRATCH_A, ZERO, imm=max(unit.memory_size - 1, 0))
    code.emit_to(Opcode.JLT, "rt$no_memory", rs1=LIM, rs2=HP)
    if code.collector:  # the stack's headroom (runtime/gc.py, HEADROOM_SHIFT)
        code.emit(Opcode.SUB, SCRATCH_A, LIM, HP)
        code.emit(Opcode.LI, SCRATCH_B, imm=HEADROOM_SHIFT)
        code.emit(Opcode.SHR, SCRATCH_A, SCRATCH_A, SCRATCH_B)
        code.emit(Opcode.LI, SCRATCH_B, imm=-8)
        code.emit(Opcode.AND, SCRATCH_A, SCRATCH_A, SCRATCH_B)
        code.emit(Opcode.SUB, LIM, LIM, SCRATCH_A)
        code.emit(Opcode.STOREW, 0, SCRATCH_A, ZERO, imm=code.data.address(HEADROOM))
    code.emit_to(Opcode.CALL, unit.entry)
    code.constants[BOTTOM_RETURN] = code.here
    code.constants[MEMORY_TOP] = top
    code.site(site_word(0, SiteKind.BOTTOM))
    code.emit(Opcode.HALT)
    code.labels["rt$no_memory"] = code.here
    code.emit(Opcode.FAULT, imm=FAULT_NO_MEMORY)
    return start


def _parallel_move(code: _Code, moves: list[tuple[int, int]]) -> None:
    """Emit register moves ``src -> dst`` as if all happened at once."""
    pending = [(src, dst) for src, dst in moves if src != dst]
    if len(pending) <= 1:  # the common cases: arguments already in place, or one not yet
        if pending:
            code.emit(Opcode.ADD, pending[0][1], pending[0][0], ZERO)
        return
    while pending:
        sources = {src for src, _ in pending}
        for position, (src, dst) in enumerate(pending):
            if dst not in sources:
                code.emit(Opcode.ADD, dst, src, ZERO)
                del pending[position]
                break
        else:  # only cycles remain: break one through the scratch register
            src, dst = pending[0]
            code.emit(Opcode.ADD, SCRATCH_A, src, ZERO)
            pending = [(SCRATCH_A if s == src else s, d) for s, d in pending]


def _emit_function(
    code: _Code,
    function: Function,
    allocation: Allocation,
    is_checked: bool,
    frame: int,
    unit: Unit,
    number: int,
) -> None:
    name = function.name
    reg = allocation.of
    where = allocation.registers.get  # where(r, r): machine registers stand for themselves
    emit = code.emit
    code.loc = None
    code.builtin_frame = bool(function.builtin)
    code.labels[name] = code.here
    overflow_label = (name, -1)
    if is_checked:
        code.emit(Opcode.LI, SCRATCH_A, imm=frame)
        code.emit(Opcode.SUB, LIM, LIM, SCRATCH_A)
        code.emit_to(Opcode.JLT, overflow_label, rs1=LIM, rs2=HP)
    order = allocation.order or block_order(function)
    starlark = function.source is not None
    blocks = function.blocks
    labels = code.labels
    out = code.code  # the common instructions are appended here directly
    append = out.append
    function_number = code.function
    for position, index in enumerate(order):
        block = blocks[index]
        labels[(name, index)] = len(out)
        following = order[position + 1] if position + 1 < len(order) else -1
        for insn in block.insns:
            loc = insn.loc
            op = insn.op
            if op == "MOV":  # the one that may emit nothing, and then starts no run
                destination, source = where(insn.dst, insn.dst), where(insn.a, insn.a)
                if destination == source:
                    continue
                if loc is not code._run_loc or code._run_function != function_number:
                    code.loc = loc
                    code._start_run()
                append((Opcode.ADD, destination, source, ZERO, 0))
                continue
            if op == "PARAMS":  # may emit nothing too (code.emit starts the run)
                code.loc = loc
                _emit_rare(code, insn, allocation)
                continue
            if loc is not code._run_loc or code._run_function != function_number:
                code.loc = loc
                code._start_run()
            if op == "CALL" or op == "CALLI":
                code.loc = loc
                _emit_call(code, insn, allocation, unit, number, starlark)
            elif op == "LI":
                ref = insn.ref
                if ref is None:
                    append((Opcode.LI, where(insn.dst, insn.dst), 0, 0, insn.imm & _U64))
                    continue
                code.loc = loc
                if isinstance(ref, DataRef) and ref.name == DATA_END:
                    code.data_end_fixups.append(emit(Opcode.LI, reg(insn.dst)))
                elif isinstance(ref, DataRef):
                    emit(Opcode.LI, reg(insn.dst), imm=code.address(ref.name))
                elif isinstance(ref, CodeRef):
                    code.emit_to(
                        Opcode.LI,
                        ref.name
                        if not ref.label
                        else (ref.name, function.exported_labels[ref.label]),
                        rd=reg(insn.dst),
                    )
                else:
                    assert isinstance(ref, BlockRef)
                    code.emit_to(Opcode.LI, (name, ref.block), rd=reg(insn.dst))
            elif op in _BINARY:
                append(
                    (
                        _OPCODE[op],
                        where(insn.dst, insn.dst),
                        where(insn.a, insn.a),
                        where(insn.b, insn.b),
                        0,
                    )
                )
            elif op == "LOADW" or op == "LOAD":
                imm = insn.imm if insn.ref is None else _offset(code, insn)
                dst, base = where(insn.dst, insn.dst), where(insn.a, insn.a)
                append((_OPCODE[op], dst, base, 0, imm & _U64))
            elif op == "STOREW" or op == "STORE":
                imm = insn.imm if insn.ref is None else _offset(code, insn)
                value, base = where(insn.a, insn.a), where(insn.b, insn.b)
                append((_OPCODE[op], 0, value, base, imm & _U64))
            else:
                code.loc = loc
                _emit_rare(code, insn, allocation)
        term = block.term
        assert term is not None, f"{name}: block {index} has no terminator"
        code.loc = term.loc
        if term.op == "JMP":  # the common terminator, inline
            target = term.targets[0]
            if target != following:
                code.emit_to(Opcode.JMP, (name, target))
            continue
        _emit_terminator(code, function, term, allocation, is_checked, frame, following)
    if is_checked:  # the stack check's failure: a call the traceback does not show (the
        # function was not entered: the innermost frame is its caller's, at the call)
        code.labels[overflow_label] = code.here
        code.loc = None
        code.emit(Opcode.LI, SCRATCH_A, imm=frame)
        code.emit(Opcode.ADD, LIM, LIM, SCRATCH_A)
        if code.collector:  # the heap may only be full of garbage: collect, check again
            code.emit_to(Opcode.CALL, GC_ROOM)
            code.emit_to(Opcode.JNZ, name, rs1=SCRATCH_B)
        code.emit_to(Opcode.CALL, STACK_OVERFLOW)
        code.site(site_word(0, SiteKind.RUNTIME, number, None))
        code.emit(Opcode.HALT)


def _emit_rare(code: _Code, insn: Insn, allocation: Allocation) -> None:
    """The IR operations :func:`_emit_function` does not write inline."""
    reg = allocation.of
    emit = code.emit
    op = insn.op
    if op == "PARAMS":
        _parallel_move(
            code,
            [(r, reg(v)) for r, v in enumerate(insn.args, start=1) if v in allocation.registers],
        )
    elif op in ("NEG", "NOT"):
        emit(_OPCODE[op], reg(insn.dst), reg(insn.a))
    elif op == "SEND":
        emit(Opcode.SEND, 0, reg(insn.a), reg(insn.b), imm=insn.imm)
    elif op == "RECV":
        emit(Opcode.RECV, reg(insn.dst), reg(insn.a), reg(insn.b), imm=insn.imm)
    elif op == "POLL":
        emit(Opcode.POLL, reg(insn.dst), imm=insn.imm)
    elif op == "BUDGET":
        emit(Opcode.BUDGET, reg(insn.dst))
    elif op == "TICK":
        emit(Opcode.TICK)
    elif op == "PUSH":
        emit(Opcode.PUSH, 0, reg(insn.a))
    elif op == "POP":
        emit(Opcode.POP, reg(insn.dst))
    else:
        raise AssertionError(f"unknown IR instruction {op}")


def _offset(code: _Code, insn: Insn) -> int:
    """A load's or store's offset, plus the address of the data item it names."""
    if isinstance(insn.ref, DataRef):
        return insn.imm + code.address(insn.ref.name)
    return insn.imm


def _emit_call(
    code: _Code,
    insn: Insn,
    allocation: Allocation,
    unit: Unit,
    number: int,
    starlark: bool,
) -> None:
    # called with the source map's run already started for ``insn``: its instructions
    # go straight into the code
    where = allocation.registers.get  # where(r, r): machine registers stand for themselves
    key = id(insn)
    saved = allocation.saves.get(key, ())
    out = code.code
    if saved:
        if len(saved) > 255:
            raise CompileLimit("more than 255 values live across one call")
        out.extend([(Opcode.PUSH, 0, register, 0, 0) for register in saved])
    moves = [
        (source, number_)
        for number_, argument in enumerate(insn.args, start=1)
        if (source := where(argument, argument)) != number_
    ]
    if insn.op == "CALL":
        if len(moves) == 1:
            out.append((Opcode.ADD, moves[0][1], moves[0][0], ZERO, 0))
        elif moves:
            _parallel_move(code, moves)
        callee = _callee(insn)
        code.fixups.append((len(out), callee))
        out.append((Opcode.CALL, 0, 0, 0, 0))
    else:
        moves.append((where(insn.a, insn.a), SCRATCH_B))
        _parallel_move(code, moves)
        after = ("$return", key)  # a label, so that the code may be placed anywhere
        code.emit_to(Opcode.LI, after, rd=SCRATCH_A)
        code.emit(Opcode.PUSH, 0, SCRATCH_A)
        code.emit(Opcode.PUSH, 0, SCRATCH_B)
        code.emit(Opcode.RET)
        code.labels[after] = code.here
        callee = ""  # a value may raise
    if key in unit.bottom_sites:
        kind = SiteKind.BOTTOM
    elif key in unit.catch_sites:
        kind = SiteKind.CATCH
    else:
        kind = SiteKind.STARLARK if starlark else SiteKind.RUNTIME
    word = site_word(len(saved), kind, number, insn.loc if starlark else None)
    if kind == SiteKind.RUNTIME and code.builtin_frame:
        word |= SITE_BUILTIN_FRAME
    # an error unwinds through a catch and to the bottom, and through a call that may raise
    code.site(word, callee if kind == SiteKind.STARLARK or kind == SiteKind.RUNTIME else "")
    if insn.dst >= 0:
        result = where(insn.dst, insn.dst)
        if result != RESULT:
            out.append((Opcode.ADD, result, RESULT, ZERO, 0))
    if saved:
        out.extend([(Opcode.POP, register, 0, 0, 0) for register in reversed(saved)])


def _emit_terminator(
    code: _Code,
    function: Function,
    term: object,
    allocation: Allocation,
    is_checked: bool,
    frame: int,
    following: int,
) -> None:
    assert isinstance(term, Term)
    name = function.name
    reg = allocation.of
    op = term.op
    if op == "JMP":
        if term.targets[0] != following:
            code.emit_to(Opcode.JMP, (name, term.targets[0]))
    elif op == "BR":
        _emit_branch(
            code,
            name,
            term.cond,
            reg(term.a),
            reg(term.b) if term.b >= 0 else ZERO,
            term.targets[0],
            term.targets[1],
            following,
        )
    elif op in ("RET", "JUMPI", "TAILCALL"):
        if op == "RET" and term.a >= 0 and reg(term.a) != RESULT:
            code.emit(Opcode.ADD, RESULT, reg(term.a), ZERO)
        moves = [(reg(argument), number) for number, argument in enumerate(term.args, start=1)]
        if op == "JUMPI":
            moves.append((reg(term.a), SCRATCH_B))
        _parallel_move(code, moves)
        if is_checked:
            code.emit(Opcode.LI, SCRATCH_A, imm=frame)
            code.emit(Opcode.ADD, LIM, LIM, SCRATCH_A)
        if op == "TAILCALL":
            assert isinstance(term.ref, CodeRef)
            code.emit_to(Opcode.JMP, term.ref.name)
            return
        if op == "JUMPI":
            code.emit(Opcode.PUSH, 0, SCRATCH_B)
        code.emit(Opcode.RET)
    elif op == "HALT":
        code.emit(Opcode.HALT)
    elif op == "FAULT":
        code.emit(Opcode.FAULT, imm=term.imm)
    else:
        raise AssertionError(f"unknown terminator {op}")


def _emit_branch(
    code: _Code, name: str, cond: str, a: int, b: int, if_true: int, if_false: int, following: int
) -> None:
    """Branch to ``if_true`` when ``a cond b`` holds, else to ``if_false``."""
    if cond in ("EQ", "NE"):
        if b == ZERO:
            cond = "Z" if cond == "EQ" else "NZ"
        elif a == ZERO:
            a, cond = b, ("Z" if cond == "EQ" else "NZ")
        else:
            code.emit(Opcode.XOR, SCRATCH_A, a, b)
            a, cond = SCRATCH_A, ("Z" if cond == "EQ" else "NZ")
    elif cond in ("SLT", "SGE", "SLE", "SGT"):
        code.emit(Opcode.XOR, SCRATCH_A, a, SIGN)
        code.emit(Opcode.XOR, SCRATCH_B, b, SIGN)
        a, b, cond = SCRATCH_A, SCRATCH_B, cond[1:]
    if cond in ("LE", "GT"):  # a <= b is b >= a; a > b is b < a
        a, b, cond = b, a, ("GE" if cond == "LE" else "LT")
    if cond == "GE":  # a >= b: not a < b
        if_true, if_false, cond = if_false, if_true, "LT"
    true_label, false_label = (name, if_true), (name, if_false)
    if cond in ("Z", "NZ"):
        if if_true == following:
            code.emit_to(Opcode.JNZ if cond == "Z" else Opcode.JZ, false_label, rs1=a)
            return
        code.emit_to(Opcode.JZ if cond == "Z" else Opcode.JNZ, true_label, rs1=a)
    else:  # LT
        code.emit_to(Opcode.JLT, true_label, rs1=a, rs2=b)
    if if_false != following:
        code.emit_to(Opcode.JMP, false_label)


def _gc_quick_saved(take: Allocation) -> list[int]:
    """The registers the slow path pushes around its call of :data:`GC_TAKE`: those it
    may change, but ``r1`` (the result) and the code generator's scratch registers."""
    kept = (1 << ZERO) | GC_ALLOC_CLOBBER
    assert take.clobber & ((1 << LIM) | (1 << HP)) == 0, "gc_take_free moves the heap"
    return [register for register in range(256) if (take.clobber & ~kept) >> register & 1]


def _emit_gc_alloc(code: _Code, quick: list[int]) -> None:
    """The allocation slow path (see :data:`GC_ALLOC`): ``r1`` is the size wanted."""
    code.loc = None
    code.labels[GC_ALLOC] = code.here
    for register in quick:
        code.emit(Opcode.PUSH, 0, register)
    code.emit(Opcode.PUSH, 0, RESULT)
    code.emit_to(Opcode.CALL, GC_TAKE)
    _runtime_site(code, len(quick) + 1)
    code.emit(Opcode.POP, SCRATCH_A)
    for register in reversed(quick):
        code.emit(Opcode.POP, register)
    _emit_limit_shift(code, SCRATCH_B)  # a bump region below the top moves LIM
    collect = (GC_ALLOC, -1)
    code.emit_to(Opcode.JZ, collect, rs1=RESULT)
    code.emit(Opcode.RET)
    code.labels[collect] = code.here
    code.emit(Opcode.ADD, RESULT, SCRATCH_A, ZERO)
    _emit_fold_gap(code)
    _emit_collect(code, keep_result=False)
    _emit_limit_shift(code)
    code.emit_to(Opcode.JZ, OUT_OF_MEMORY, rs1=RESULT)
    code.emit(Opcode.RET)
    # GC_ROOM: in a bump region below the top, first give LIM what the region gave out
    # since it was last counted (runtime/gc.py, rebase) and check again; else the room
    # between heap and limit before (in the unused save slot 0), a collection, and
    # whether the room grew
    code.labels[GC_ROOM] = code.here
    gap, base = code.data.address(GAP), code.data.address(REGION_BASE)
    collect_room = (GC_ROOM, -2)
    code.emit(Opcode.LOADW, SCRATCH_A, ZERO, imm=gap)
    code.emit_to(Opcode.JZ, collect_room, rs1=SCRATCH_A)
    code.emit(Opcode.LOADW, SCRATCH_B, ZERO, imm=base)
    code.emit(Opcode.SUB, SCRATCH_B, HP, SCRATCH_B)
    code.emit_to(Opcode.JZ, collect_room, rs1=SCRATCH_B)
    code.emit(Opcode.ADD, LIM, LIM, SCRATCH_B)
    code.emit(Opcode.SUB, SCRATCH_A, SCRATCH_A, SCRATCH_B)
    code.emit(Opcode.STOREW, 0, SCRATCH_A, ZERO, imm=gap)
    code.emit(Opcode.STOREW, 0, HP, ZERO, imm=base)
    code.emit(Opcode.LI, SCRATCH_B, imm=1)
    code.emit(Opcode.RET)
    code.labels[collect_room] = code.here
    # then the headroom the collector keeps back (runtime/gc.py), without collecting
    headroom, collect_now = code.data.address(HEADROOM), (GC_ROOM, -3)
    code.emit(Opcode.LOADW, SCRATCH_A, ZERO, imm=headroom)
    code.emit_to(Opcode.JZ, collect_now, rs1=SCRATCH_A)
    code.emit(Opcode.STOREW, 0, ZERO, ZERO, imm=headroom)
    code.emit(Opcode.ADD, LIM, LIM, SCRATCH_A)
    code.emit(Opcode.LI, SCRATCH_B, imm=1)
    code.emit(Opcode.RET)
    code.labels[collect_now] = code.here
    code.emit(Opcode.SUB, SCRATCH_B, LIM, HP)
    _emit_fold_gap(code)
    code.emit(Opcode.STOREW, 0, RESULT, LIM, imm=8 * GC_SAVE_SLOT[RESULT])
    code.emit(Opcode.STOREW, 0, SCRATCH_B, LIM, imm=0)
    code.emit(Opcode.LI, RESULT, imm=0)
    _emit_collect(code, keep_result=True)
    code.emit(Opcode.LOADW, SCRATCH_B, LIM, imm=0)
    code.emit(Opcode.STOREW, 0, ZERO, LIM, imm=0)
    _emit_limit_shift(code)
    code.emit(Opcode.SUB, SCRATCH_A, LIM, HP)
    grew = (GC_ROOM, -1)
    code.emit_to(Opcode.JLT, grew, rs1=SCRATCH_B, rs2=SCRATCH_A)
    code.emit(Opcode.LI, SCRATCH_B, imm=0)
    code.emit(Opcode.RET)
    code.labels[grew] = code.here
    code.emit(Opcode.LI, SCRATCH_B, imm=1)
    code.emit(Opcode.RET)


def _emit_fold_gap(code: _Code) -> None:
    """Give ``LIM`` the gap a bump region below the top keeps it down by (runtime/gc.py),
    so that the save area at ``LIM`` lies above the heap's top."""
    gap = code.data.address(GAP)
    code.emit(Opcode.LOADW, SCRATCH_A, ZERO, imm=gap)
    code.emit(Opcode.STOREW, 0, ZERO, ZERO, imm=gap)
    code.emit(Opcode.ADD, LIM, LIM, SCRATCH_A)


def _emit_collect(code: _Code, keep_result: bool) -> None:
    """Save every register in the reserve above ``LIM`` (``r1`` already saved when
    ``keep_result``), push the stack marker, call :data:`GC_SLOW` with ``r1`` (0: a
    collection alone), erase the marker, restore the registers (``r1`` too when
    ``keep_result``, else it is the result) and zero their save area."""
    for register in GC_SAVED:
        if not (keep_result and register == RESULT):
            code.emit(Opcode.STOREW, 0, register, LIM, imm=8 * GC_SAVE_SLOT[register])
    code.emit(Opcode.LI, SCRATCH_A, imm=L.GC_STACK_MARKER)
    code.emit(Opcode.PUSH, 0, SCRATCH_A)
    code.emit_to(Opcode.CALL, GC_SLOW)
    _runtime_site(code, 1)
    code.emit(Opcode.POP, SCRATCH_A)
    code.emit(Opcode.PUSH, 0, ZERO)  # no copy of the marker stays below the stack
    code.emit(Opcode.POP, SCRATCH_A)
    for register in GC_SAVED:
        if keep_result or register != RESULT:
            code.emit(Opcode.LOADW, register, LIM, imm=8 * GC_SAVE_SLOT[register])
        code.emit(Opcode.STOREW, 0, ZERO, LIM, imm=8 * GC_SAVE_SLOT[register])


def _emit_limit_shift(code: _Code, scratch: int = SCRATCH_A) -> None:
    """Move ``LIM`` by what the collector asked (:data:`LIMIT_SHIFT`, zeroed), once
    nothing more is read from the save area at ``LIM``."""
    shift = code.data.address(LIMIT_SHIFT)
    code.emit(Opcode.LOADW, scratch, ZERO, imm=shift)
    code.emit(Opcode.STOREW, 0, ZERO, ZERO, imm=shift)
    code.emit(Opcode.ADD, LIM, LIM, scratch)


def _runtime_site(code: _Code, pushes: int) -> None:
    """Enter the return address of the call just emitted (runtime code, ``pushes``
    words pushed around it) in the site table."""
    code.site(site_word(pushes, SiteKind.RUNTIME))


def _emit_site_table(code: _Code, sites: list[tuple[int, int]]) -> None:
    """``r1 = site word of return address r1``: a binary search compiled to code."""
    entries: list[tuple[int, int]] = []
    for address, word in sorted(sites):  # a run of equal words needs only its first
        if not entries or entries[-1][1] != word:
            entries.append((address, word))
    if not entries:
        code.emit(Opcode.LI, RESULT, imm=site_word(0, SiteKind.BOTTOM))
        code.emit(Opcode.RET)
        return
    code.emit_all([])  # then straight into the code: a node per call that may raise
    out = code.code
    append = out.append
    pending: list[tuple[int, int, int]] = [(0, len(entries), -1)]
    while pending:
        low, high, fixup = pending.pop()
        if fixup >= 0:
            old = out[fixup]
            out[fixup] = (old[0], old[1], old[2], old[3], len(out))
        if high - low == 1:
            append((Opcode.LI, RESULT, 0, 0, entries[low][1]))
            append((Opcode.RET, 0, 0, 0, 0))
            continue
        middle = (low + high) // 2
        append((Opcode.LI, SCRATCH_A, 0, 0, entries[middle][0]))
        pending.append((low, middle, len(out)))
        append((Opcode.JLT, 0, RESULT, SCRATCH_A, 0))  # below the middle: left half
        pending.append((middle, high, -1))
