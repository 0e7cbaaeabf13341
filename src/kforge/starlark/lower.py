"""Checked, resolved Starlark to IR: the compiler proper.

One :class:`ModuleCompiler` per file, one :class:`FunctionCompiler` per function
(the file's top level is a function too, its *init*).  Expressions compute into
virtual registers holding value words (:mod:`kforge.starlark.layout`); what is
cheap and common is inlined (small-int arithmetic and comparisons, truth tests,
``for`` over ``range``, loads of globals and locals), everything else is a call of
a runtime function, positioned where the Go implementation reports it so that
tracebacks name the same line and column.

Calls bind their arguments when compiled wherever the callee is known (builtins,
methods, and functions defined once at top level): a call that cannot bind fails
when run with the Go implementation's message.  Other calls go through the
runtime's ``call_value``.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Final

from kforge.starlark import layout as L
from kforge.starlark import spelling
from kforge.starlark.builder import Builder
from kforge.starlark.builtins import (
    FORGE_MODULE,
    FUNCTIONS,
    HOST,
    MATH,
    MATH_MODULE,
    METHODS,
    TESTING,
    Builtin,
)
from kforge.starlark.data import Declarations
from kforge.starlark.errors import StarlarkCompileError
from kforge.starlark.ir import Block, BlockRef, CodeRef, DataRef, Function, Loc
from kforge.starlark.lowlevel import FLOAT_VARIANT, RuntimeLibrary, global_item
from kforge.starlark.regs import HP, LIM, MAX_ARGUMENTS, ONE, SIGN, ZERO
from kforge.starlark.scope import Binding, FunctionScope, Kind, Resolution, Variable
from kforge.starlark.syntax import Source

NONE: Final = L.NONE_ADDRESS
TRUE: Final = L.TRUE_ADDRESS
FALSE: Final = L.FALSE_ADDRESS

_BINARY_RUNTIME: Final = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "truediv",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.BitAnd: "bitand",
    ast.BitOr: "bitor",
    ast.BitXor: "bitxor",
    ast.LShift: "lshift",
    ast.RShift: "rshift",
}
_BINARY_SYMBOL: Final = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
#: Comparison operators as the runtime's ``compare`` numbers them.
_ORDER: Final = {ast.Lt: 0, ast.LtE: 1, ast.Gt: 2, ast.GtE: 3}
#: The words ``iter_walk`` leaves for a loop: its cursor, end and stride.
_WALK: Final = tuple(
    DataRef(global_item("kforge.starlark.runtime.sequences", name))
    for name in ("walk_cursor", "walk_end", "walk_stride")
)
#: The end of the allocator's bump region (see ``new_float``).
_BUMP_END: Final = DataRef(global_item("kforge.starlark.runtime.gc", "bump_end"))
#: The soft-float function of each operator a float path does on the doubles' bits.
_FLOAT_OPERATORS: Final = {
    ast.Add: "f64_add",
    ast.Sub: "f64_sub",
    ast.Mult: "f64_mul",
    ast.Div: "f64_div",
    ast.FloorDiv: "float_floordiv_bits",
    ast.Mod: "float_mod_bits",
}
#: The longest str or bytes literal an equality test compares in place, a word at a time.
_INLINE_LITERAL_BYTES: Final = 16
_SIGNED_COND: Final = {ast.Lt: "SLT", ast.LtE: "SLE", ast.Gt: "SGT", ast.GtE: "SGE"}
#: The operators whose runtime function has a ``number_`` version that programs with
#: floats call instead: two floats first, anything else as before.
FLOAT_FIRST: Final = frozenset({"add", "inplace_add", "sub", "mul", "truediv"})


def word_of_int(value: int) -> int | None:
    """The word of a small int, or ``None`` if ``value`` needs a big int."""
    if L.SMALL_INT_MIN <= value <= L.SMALL_INT_MAX:
        return ((value << 1) | 1) & 0xFFFF_FFFF_FFFF_FFFF
    return None


def bigint_record(value: int) -> tuple[int, ...]:
    """The words of a static big int object."""
    magnitude = abs(value)
    limbs = []
    while magnitude:
        limbs.append(magnitude & L.LIMB_MASK)
        magnitude >>= L.LIMB_BITS
    sign = 1 if value < 0 else 0
    return (L.TAG_BIGINT | L.FLAG_STATIC | L.FLAG_FROZEN, sign << 32 | len(limbs), *limbs)


@dataclass
class ProgramState:
    """What every module of one program shares while it is compiled."""

    functions: dict[str, Function] = field(default_factory=dict)
    data: Declarations = field(default_factory=Declarations)
    #: Builtins used as values, numbered for the runtime's dispatch.
    builtin_values: dict[tuple[int, str], int] = field(default_factory=dict)
    #: Modules by key: the name of their init function and their globals.
    modules: dict[str, ModuleInfo] = field(default_factory=dict)
    testing: bool = False
    #: Whether ``getattr``, ``hasattr`` or ``dir`` are used (they need every method).
    method_tables: bool = False
    counter: int = 0
    #: Whether the program uses floats (a float literal, ``/``, ``float`` or ``math``):
    #: only then does it link the runtime's float variants and take ``float_patches``.
    uses_floats: bool = False
    #: Changes to lowered code that only a program with floats needs, made when the
    #: whole program is lowered: an int literal is then no longer the only value equal
    #: to itself (``1.0 == 1``).
    float_patches: list[Callable[[], None]] = field(default_factory=list)

    def finish(self) -> None:
        """After the last module is lowered: in a program with floats, patch the lowered
        code and put the float variants of the runtime's functions in place of the
        plain ones (``functions`` wins over the runtime when the program is linked)."""
        if not self.uses_floats:
            return
        for patch in self.float_patches:
            patch()
        from kforge.starlark.compiler import runtime_library

        runtime = runtime_library()
        for name in runtime.float_variants:
            self.functions[name] = _float_variant(runtime, name)

    def unique(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}#{self.counter}"

    def string(self, text: str | bytes, tag: int = L.TAG_STRING) -> DataRef:
        payload = text.encode() if isinstance(text, str) else text
        return DataRef(self.data.string(payload, tag))


#: The runtime's float variants under their plain names, made once per process (the
#: code generator keeps its work on a runtime function for the same function object).
_float_variants: dict[tuple[int, str], Function] = {}


def _float_variant(runtime: RuntimeLibrary, name: str) -> Function:
    key = (id(runtime), name)
    variant = _float_variants.get(key)
    if variant is None:
        plain = runtime.functions[name]
        variant = replace(runtime.functions[name + FLOAT_VARIANT], name=name, builtin=plain.builtin)
        _float_variants[key] = variant
    return variant


@dataclass
class ModuleInfo:
    key: str
    filename: str
    init: str
    globals: dict[str, str]  # name -> data item of its word


@dataclass
class _Loop:
    head: object  # Block
    exit: object  # Block
    #: For a loop over a sequence: the register holding it (released on exit).
    sequence: int = -1


class _Unbound(Exception):
    pass


class ModuleCompiler:
    """Compiles one file into its init function and the functions it defines."""

    def __init__(
        self, state: ProgramState, source: Source, resolution: Resolution, key: str
    ) -> None:
        self.state = state
        self.source = source
        self.resolution = resolution
        self.key = key
        self.filename = source.filename
        self.globals = {name: state.data.word(f"gv:{key}:{name}") for name in resolution.globals}
        self.loads = {name: state.data.word(f"lv:{key}:{name}") for name in resolution.loads}
        self.known_functions = _functions_defined_once(source.module, resolution)
        #: Whether the file itself shows floats (see ``_shows_floats``): only then do its
        #: arithmetic expressions get a path for floats first (``float_tree``).
        self.float_code = _shows_floats(source.module)
        #: Compiled ``def`` and ``lambda`` nodes: id -> (fast entry, generic entry).
        self.entries: dict[int, tuple[str, str]] = {}
        self.loaded: dict[str, ModuleInfo] = {}

    def fail(self, node: ast.AST, message: str) -> StarlarkCompileError:
        return StarlarkCompileError(
            self.filename, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, message
        )

    def compile(self, loaded: dict[str, ModuleInfo], is_main: bool) -> ModuleInfo:
        self.loaded = loaded
        init = f"{self.key}:<init>"
        function = Function(init, 0, source=(self.filename, "<toplevel>"))
        compiler = FunctionCompiler(self, self.resolution.module, function, self.source.module)
        compiler.compile_module(loaded=not is_main)
        self.state.functions[init] = function
        if is_main:
            self.state.finish()
        return ModuleInfo(self.key, self.filename, init, dict(self.globals))

    def function_names(self, node: ast.AST, scope: FunctionScope) -> tuple[str, str]:
        names = self.entries.get(id(node))
        if names is None:
            stem = f"{self.key}:{scope.name}@{getattr(node, 'lineno', 0)}:{getattr(node, 'col_offset', 0) + 1}"
            names = (stem, stem + "$generic")
            self.entries[id(node)] = names
        return names


def _functions_defined_once(
    module: ast.Module, resolution: Resolution
) -> dict[str, ast.FunctionDef]:
    """Top-level ``def`` s whose global is bound by that ``def`` and nothing else."""
    bound: dict[str, int] = {}
    defs: dict[str, ast.FunctionDef] = {}
    _count_bindings(module.body, True, bound, defs)
    return {
        name: node
        for name, node in defs.items()
        if bound.get(name) == 1 and name in resolution.globals
    }


def _count_bindings(
    statements: list[ast.stmt],
    top: bool,
    bound: dict[str, int],
    defs: dict[str, ast.FunctionDef],
) -> None:
    """Count in ``bound`` how often ``statements`` bind each global name, and note the
    top level's ``def`` s in ``defs``.  (Functions of their own rather than closures
    calling themselves, which would be reference cycles left to the collector.)"""
    for statement in statements:
        if isinstance(statement, ast.FunctionDef):
            bound[statement.name] = bound.get(statement.name, 0) + 1
            if top:
                defs[statement.name] = statement
        elif isinstance(statement, ast.Assign):
            _count_target(statement.targets[0], bound)
        elif isinstance(statement, ast.AugAssign):
            _count_target(statement.target, bound)
        elif isinstance(statement, ast.For):
            _count_target(statement.target, bound)
            _count_bindings(statement.body, False, bound, defs)
        elif isinstance(statement, ast.If | ast.While):
            _count_bindings(statement.body, False, bound, defs)
            _count_bindings(statement.orelse, False, bound, defs)


def _count_target(target: ast.AST, bound: dict[str, int]) -> None:
    if isinstance(target, ast.Name):
        bound[target.id] = bound.get(target.id, 0) + 1
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            _count_target(element, bound)


class FunctionCompiler:
    """Compiles the body of one function (or of a file's top level)."""

    def __init__(
        self, module: ModuleCompiler, scope: FunctionScope, function: Function, node: ast.AST
    ) -> None:
        self.module = module
        self.state = module.state
        self.scope = scope
        self.function = function
        self.node = node
        self.b = Builder(function)
        self.registers: dict[int, int] = {}  # id(Variable) -> register (value, or cell)
        self.free_cells: list[int] = []
        self.loops: list[_Loop] = []
        #: Variables surely assigned here: ids of locals, and (kind, name) of the globals
        #: and loaded names the module's top level has surely assigned.
        self.assigned: set[int | tuple[str, str]] = set()
        self.needs_init: set[int] = set()
        self.entry_block = self.b.block
        self.closure = -1
        #: The function whose call is being bound (for the error frame of a bad call).
        self.binding_target: ast.FunctionDef | None = None
        #: Above 0 while code that hardly ever runs is compiled (the body of a ``range``
        #: loop whose bounds are not small ints): operators and indexing are then plain
        #: runtime calls, without their inline fast paths, which only cost code there.
        self.cold = 0
        #: Values of the parts of an expression computed before its float path split
        #: from its general one (by node id), which the general path must not compute again.
        self.computed: dict[int, int] = {}
        #: Above 0 while an expression's general path is compiled (no float path in it).
        self.general = 0
        #: Ids of the variables ``range`` loops count with (see ``int_variable``).
        self.counters: set[int] = set()

    # -- helpers ----------------------------------------------------------------------

    def loc(self, node: ast.AST) -> Loc:
        return Loc(getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1)

    def at(self, line: int, col: int) -> None:
        self.b.loc = Loc(line, col)

    def rt(self, name: str, *args: int, result: bool = True) -> int:
        return self.b.call(name, list(args), result=result)

    def const(self, word: int) -> int:
        if word == 0:
            return ZERO
        if word == 1:
            return ONE
        return self.b.li(word)

    def none(self) -> int:
        return self.b.li(NONE)

    def string(self, text: str | bytes, tag: int = L.TAG_STRING) -> int:
        return self.b.li_ref(self.state.string(text, tag))

    def error(self, message: str, builtin: str = "") -> None:
        """Raise a Starlark error with a fixed message (the block ends)."""
        name = self.string(builtin) if builtin else ZERO
        self.rt("error", self.string(message), name, result=False)
        self.b.halt()

    def variable_register(self, variable: Variable) -> int:
        register = self.registers.get(id(variable))
        if register is None:
            register = self.b.reg()
            self.registers[id(variable)] = register
        return register

    # -- entry points -----------------------------------------------------------------

    def compile_module(self, loaded: bool) -> None:
        """The file's top level.  A loaded module runs once (later loads find it done)
        and freezes its globals when it finishes."""
        self.b.params(0)
        state_item = DataRef(self.state.data.word(f"init:{self.module.key}"))
        if loaded:
            status = self.b.load(ZERO, ref=state_item)
            fresh, done = self.b.new_block(), self.b.new_block()
            self.b.br("Z", status, -1, fresh, done)
            self.b.set_block(done)
            self.b.ret(self.none())
            self.b.set_block(fresh)
            self.b.store(ONE, ZERO, ref=state_item)
        self.prologue_cells()
        self.statements(self.node.body)  # type: ignore[attr-defined]
        if not self.b.terminated:
            if loaded:
                for item in self.module.globals.values():
                    value = self.b.load(ZERO, ref=DataRef(item))
                    self.rt("freeze", value, result=False)
            self.b.ret(self.none())
        self.finish()

    def compile_function(self, node: ast.FunctionDef | ast.Lambda, closure: bool) -> None:
        args = node.args
        ordered = [*args.args, *args.kwonlyargs]
        if args.vararg is not None:
            ordered.append(args.vararg)
        if args.kwarg is not None:
            ordered.append(args.kwarg)
        names = {v.name: v for v in self.scope.variables if v.is_parameter}
        registers = self.b.params(len(ordered) + (1 if closure else 0))
        for arg, register in zip(ordered, registers, strict=False):
            variable = names[arg.arg]
            self.registers[id(variable)] = register
            self.assigned.add(id(variable))
        if closure:
            self.closure = registers[-1]
            cells = self.b.load(self.closure, L.FUNC_CELLS)
            for index in range(len(self.scope.free)):
                self.free_cells.append(self.b.load(cells, L.TUPLE_ITEMS + 8 * index))
        self.prologue_cells()
        if isinstance(node, ast.Lambda):
            self.b.loc = self.loc(node.body)
            self.b.ret(self.expr(node.body))
        else:
            self.statements(node.body)
            if not self.b.terminated:
                self.b.ret(self.none())
        self.finish()

    def prologue_cells(self) -> None:
        """Every variable a nested function captures lives in a cell made on entry."""
        for variable in self.scope.variables:
            if not variable.is_cell:
                continue
            cell = self.rt("alloc_object", self.const(L.TAG_CELL), self.const(L.CELL_SIZE))
            if variable.is_parameter:
                self.b.store(self.registers[id(variable)], cell, L.CELL_VALUE)
            self.registers[id(variable)] = cell

    def finish(self) -> None:
        """Give locals that may be read before assignment a defined empty value."""
        if not self.needs_init:
            return
        entry = self.function.blocks[0]
        from kforge.starlark.ir import Insn

        position = 1 if entry.insns and entry.insns[0].op == "PARAMS" else 0
        for variable in self.scope.variables:
            if id(variable) in self.needs_init and not variable.is_cell:
                register = self.variable_register(variable)
                entry.insns.insert(position, Insn("MOV", dst=register, a=ZERO))

    # -- statements -------------------------------------------------------------------

    def statements(self, body: list[ast.stmt]) -> None:
        for statement in body:
            if self.b.terminated:
                self.b.set_block(self.b.new_block())  # unreachable, compiled anyway
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        self.b.loc = self.loc(node)
        if isinstance(node, ast.Expr):
            if _is_load(node):
                self.load_statement(node.value)  # type: ignore[arg-type]
            else:
                self.expr(node.value)
        elif isinstance(node, ast.Assign):
            if not self.parallel_assignment(node.targets[0], node.value):
                value = self.expr(node.value)
                self.b.loc = self.position(node.targets[0], "=")  # Go reports unpacking at the '='
                self.assign(node.targets[0], value)
        elif isinstance(node, ast.AugAssign):
            self.augmented(node)
        elif isinstance(node, ast.If):
            self.if_statement(node)
        elif isinstance(node, ast.For):
            self.for_statement(node)
        elif isinstance(node, ast.While):
            self.while_statement(node)
        elif isinstance(node, ast.Break | ast.Continue):
            loop = self.loops[-1]
            if isinstance(node, ast.Break):
                self.b.jmp(loop.exit)  # type: ignore[arg-type]
            else:
                self.b.jmp(loop.head)  # type: ignore[arg-type]
        elif isinstance(node, ast.Return):
            value = self.expr(node.value) if node.value is not None else self.none()
            for loop in reversed(self.loops):
                if loop.sequence >= 0:
                    self.iteration_end(loop.sequence)
            self.b.ret(value)
        elif isinstance(node, ast.Pass):
            pass
        elif isinstance(node, ast.FunctionDef):
            self.b.loc = self.loc(node)
            value = self.make_function(node, node.name)
            self.store_name_binding(self.binding_of_def(node), value, node)
        else:
            raise self.module.fail(node, f"unexpected statement {type(node).__name__}")

    def binding_of_def(self, node: ast.FunctionDef) -> Binding:
        return self.module.resolution.bindings[id(node)]

    def load_statement(self, call: ast.Call) -> None:
        assert isinstance(call.args[0], ast.Constant)
        module_name = str(call.args[0].value)
        info = self.module.loaded.get(module_name)
        if info is None:
            raise self.module.fail(call, f"cannot load {module_name}")
        self.b.loc = self.loc(call)
        self.rt(info.init, result=False)
        pairs: list[tuple[str, str]] = [(str(a.value), str(a.value)) for a in call.args[1:]]  # type: ignore[attr-defined]
        pairs += [(k.arg or "", str(k.value.value)) for k in call.keywords]  # type: ignore[attr-defined]
        for local, exported in pairs:
            item = info.globals.get(exported)
            if item is None:  # a run-time error, as in Go: what runs before it runs
                hint = spelling.hint(exported, sorted(info.globals))
                self.error(f"load: name {exported} not found in module {module_name}{hint}")
                self.b.set_block(self.b.new_block())
                continue
            value = self.b.load(ZERO, ref=DataRef(item))
            ok, missing = self.b.new_block(), self.b.new_block()
            self.b.br("NZ", value, -1, ok, missing)
            self.b.set_block(missing)
            self.error(f"load: name {exported} not found in module {module_name}")
            self.b.set_block(ok)
            self.b.store(value, ZERO, ref=DataRef(self.module.loads[local]))
            self.assigned.add((Kind.LOAD.value, local))

    # -- assignment -------------------------------------------------------------------

    def parallel_assignment(self, target: ast.expr, value: ast.expr) -> bool:
        """``a, b = x, y``: the values computed left to right, then assigned left to
        right, as unpacking the tuple would, without making it (about 60 ticks and an
        allocation less).  False, having compiled nothing, unless both sides are
        tuple or list displays of the same length."""
        if not isinstance(target, ast.Tuple | ast.List):
            return False
        if not isinstance(value, ast.Tuple | ast.List):
            return False
        targets, values = target.elts, value.elts
        if len(targets) != len(values) or any(
            isinstance(element, ast.Starred) for element in (*targets, *values)
        ):
            return False
        # each value copied first: a target may be a variable a later value reads
        computed = [self.b.mov(self.expr(element)) for element in values]
        self.b.loc = self.position(target, "=")
        for element, item in zip(targets, computed, strict=True):
            self.assign(element, item)
        return True

    def assign(self, target: ast.expr, value: int) -> None:
        if isinstance(target, ast.Name):
            binding = self.module.resolution.bindings[id(target)]
            self.store_name_binding(binding, value, target)
        elif isinstance(target, ast.Tuple | ast.List):
            count = len(target.elts)
            items = self.rt("unpack", value, self.const(word_of_int(count) or 0))
            for index, element in enumerate(target.elts):
                item = self.b.load(items, 8 * index)
                self.assign(element, item)
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value)
            key = self.expr(target.slice)
            self.b.loc = self.position(target.value, "[")
            self.set_index(container, key, value)
        elif isinstance(target, ast.Attribute):
            obj = self.expr(target.value)
            self.b.loc = self.position(target.value, ".")
            self.rt("setattr_value", obj, self.string(target.attr), value, result=False)
        else:
            raise self.module.fail(target, "can't assign to this expression")

    def store_name_binding(self, binding: Binding, value: int, node: ast.AST) -> None:
        kind = binding.kind
        if kind is Kind.GLOBAL:
            self.b.store(value, ZERO, ref=DataRef(self.module.globals[binding.name]))
            self.assigned.add((kind.value, binding.name))
        elif kind is Kind.LOAD:
            self.b.store(value, ZERO, ref=DataRef(self.module.loads[binding.name]))
            self.assigned.add((kind.value, binding.name))
        elif kind is Kind.LOCAL:
            variable = binding.variable
            assert variable is not None
            register = self.variable_register(variable)
            if variable.is_cell:
                self.b.store(value, register, L.CELL_VALUE)
            else:
                self.b.mov(value, dst=register)
            self.assigned.add(id(variable))
        elif kind is Kind.FREE:
            self.b.store(value, self.free_cells[binding.free_index], L.CELL_VALUE)
        else:
            raise self.module.fail(node, f"cannot assign to {binding.name}")

    def augmented(self, node: ast.AugAssign) -> None:
        op = _BINARY_RUNTIME[type(node.op)]
        target = node.target
        where = self.binary_position(node)
        # the float path (``float_tree``) reads the target as a leaf of ``target op value``
        as_tree = ast.BinOp(left=target, op=node.op, right=node.value)
        if isinstance(target, ast.Name):

            def by_operator() -> int:
                current = self.expr(target)
                operand = self.expr(node.value)
                self.b.loc = where
                return self.binary(
                    op, current, operand, in_place=True, right_constant=_small_literal(node.value)
                )

            result = self.float_tree(as_tree, by_operator, where)
            self.store_name_binding(self.module.resolution.bindings[id(target)], result, target)
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value)
            key = self.expr(target.slice)
            bracket = self.position(target.value, "[")

            def by_operator() -> int:
                self.b.loc = bracket
                current = self.get_index(container, key)
                operand = self.expr(node.value)
                self.b.loc = where
                return self.binary(op, current, operand, in_place=True)

            self.b.loc = bracket
            result = self.float_tree(as_tree, by_operator, where)
            self.b.loc = bracket
            self.set_index(container, key, result)
        elif isinstance(target, ast.Attribute):
            obj = self.expr(target.value)
            self.b.loc = self.position(target.value, ".")
            current = self.rt("getattr_value", obj, self.string(target.attr))
            operand = self.expr(node.value)
            self.b.loc = where
            result = self.binary(op, current, operand, in_place=True)
            self.rt("setattr_value", obj, self.string(target.attr), result, result=False)
        else:
            raise self.module.fail(target, "invalid augmented assignment")

    def binary_position(self, node: ast.AugAssign) -> Loc:
        symbol = _BINARY_SYMBOL[type(node.op)] + "="
        line, col = self.module.source.positions.after(node.target, (symbol,))
        return Loc(line, col)

    # -- control flow -----------------------------------------------------------------

    def if_statement(self, node: ast.If) -> None:
        then, otherwise, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.condition(node.test, then, otherwise)
        before = set(self.assigned)
        self.b.set_block(then)
        self.statements(node.body)
        after_then = self.assigned
        if not self.b.terminated:
            self.b.jmp(done)
        self.assigned = set(before)
        self.b.set_block(otherwise)
        self.statements(node.orelse)
        if not self.b.terminated:
            self.b.jmp(done)
        self.assigned = after_then & self.assigned
        self.b.set_block(done)

    def while_statement(self, node: ast.While) -> None:
        head, body, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.b.jmp(head)
        self.b.set_block(head)
        self.condition(node.test, body, done)
        before = set(self.assigned)
        self.b.set_block(body)
        self.loops.append(_Loop(head, done))
        self.statements(node.body)
        self.loops.pop()
        if not self.b.terminated:
            self.b.jmp(head)
        self.assigned = before
        self.b.set_block(done)

    def for_statement(self, node: ast.For) -> None:
        if self.range_loop(node):
            return
        iterable = self.expr(node.iter)
        self.b.loc = self.loc(node)
        self.sequence_loop(
            iterable,
            lambda item: self.assign(node.target, item),
            lambda: self.statements(node.body),
        )

    def sequence_loop(self, iterable: int, bind: object, body: object) -> None:
        """A loop over ``iterable``'s items.  ``iter_walk`` starts it and says how to
        read a list's, a tuple's or a dict's items in place: a cursor stepping through
        their words (4 ticks an item, against 22 by ``iter_item``).  Other iterables
        are read by ``iter_item``, the cursor counting their items (its end is 0)."""
        b = self.b
        sequence = self.rt("iter_walk", iterable)
        cursor, end, stride = (b.load(ZERO, ref=ref) for ref in _WALK)
        item = b.reg()
        head, walk, other, generic, run, done = (b.new_block() for _ in range(6))
        b.jmp(head)
        b.set_block(head)
        b.br("LT", cursor, end, walk, other)
        b.set_block(walk)
        b.load(cursor, dst=item)
        b.op("ADD", cursor, stride, dst=cursor)
        b.jmp(run)
        b.set_block(other)
        b.br("NZ", end, -1, done, generic)
        b.set_block(generic)
        b.mov(self.rt("iter_item", sequence, cursor), dst=item)
        b.op("ADD", cursor, stride, dst=cursor)
        b.br("NZ", item, -1, run, done)
        b.set_block(run)
        before = set(self.assigned)
        bind(item)  # type: ignore[operator]
        self.loops.append(_Loop(head, done, sequence))
        body()  # type: ignore[operator]
        self.loops.pop()
        if not b.terminated:
            b.jmp(head)
        self.assigned = before
        b.set_block(done)
        self.iteration_end(sequence)

    def iteration_end(self, sequence: int) -> None:
        """The runtime's ``iter_end`` inline: a list's or a dict's count of iterations
        less one (6 or 9 ticks, against 17 or more)."""
        b = self.b
        is_list, not_list, is_dict, done = (b.new_block() for _ in range(4))
        tag = b.op("AND", b.load(sequence, L.HEADER), self.const(L.TAG_MASK))
        b.br("EQ", tag, self.const(L.TAG_LIST), is_list, not_list)
        b.set_block(is_list)
        b.store(b.op("SUB", b.load(sequence, L.LIST_ITERS), ONE), sequence, L.LIST_ITERS)
        b.jmp(done)
        b.set_block(not_list)
        b.br("EQ", tag, self.const(L.TAG_DICT), is_dict, done)
        b.set_block(is_dict)
        b.store(b.op("SUB", b.load(sequence, L.DICT_ITERS), ONE), sequence, L.DICT_ITERS)
        b.jmp(done)
        b.set_block(done)

    def range_loop(self, node: ast.For) -> bool:
        """``for x in range(...)`` with a constant step: a counting loop when the bounds
        are small ints (the usual case), the general loop otherwise."""
        call = node.iter
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "range"
            and not call.keywords
            and 1 <= len(call.args) <= 3
            and not any(isinstance(a, ast.Starred) for a in call.args)
            and self.module.resolution.bindings.get(id(call.func), Binding(Kind.GLOBAL, "")).kind
            is Kind.UNIVERSAL
        ):
            return False
        step = 1
        if len(call.args) == 3:
            constant = _constant_int(call.args[2])
            if constant is None or constant == 0 or word_of_int(constant) is None:
                return False
            step = constant
        if len(call.args) == 1:
            start = self.const(word_of_int(0) or 0)
            stop = self.expr(call.args[0])
        else:
            start = self.expr(call.args[0])
            stop = self.expr(call.args[1])
        if len(call.args) == 3:
            self.expr(call.args[2])
        fast, slow, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        both = self.b.op("AND", start, stop)
        self.b.br("NZ", self.b.op("AND", both, ONE), -1, fast, slow)
        # general path: a range object, iterated like any sequence
        self.b.set_block(slow)
        self.b.loc = self.position(call.func, "(")
        step_word = self.const(word_of_int(step) or 0)
        range_value = self.rt("builtin_range", start, stop, step_word)
        self.b.loc = self.loc(node)
        self.cold += 1
        self.sequence_loop(
            range_value,
            lambda item: self.assign(node.target, item),
            lambda: self.statements(node.body),
        )
        self.cold -= 1
        if not self.b.terminated:
            self.b.jmp(done)
        # counting path
        if isinstance(node.target, ast.Name):
            binding = self.module.resolution.bindings.get(id(node.target))
            if binding is not None and binding.variable is not None:
                self.counters.add(id(binding.variable))
        self.b.set_block(fast)
        counter = self.b.mov(start)
        head, run, advance = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.b.jmp(head)
        self.b.set_block(head)
        self.b.br("SLT" if step > 0 else "SGT", counter, stop, run, done)
        self.b.set_block(run)
        before = set(self.assigned)
        self.assign(node.target, self.b.mov(counter))
        self.loops.append(_Loop(advance, done))
        self.statements(node.body)
        self.loops.pop()
        if not self.b.terminated:
            self.b.jmp(advance)
        self.b.set_block(advance)
        # the counter stays below stop (a small int) plus one step, so the word only
        # overflows when the loop is over anyway
        next_value = self.b.op("ADD", counter, self.const((step << 1) & 0xFFFF_FFFF_FFFF_FFFF))
        again = self.b.new_block()
        self.b.br("SLT" if step > 0 else "SGT", next_value, counter, done, again)
        self.b.set_block(again)
        self.b.mov(next_value, dst=counter)
        self.b.jmp(head)
        self.assigned = before
        self.b.set_block(done)
        return True

    # -- conditions -------------------------------------------------------------------

    def condition(self, node: ast.expr, if_true: object, if_false: object) -> None:
        """Branch on the truth of ``node``."""
        t, f = if_true, if_false
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.condition(node.operand, f, t)
            return
        if isinstance(node, ast.BoolOp):
            last = len(node.values) - 1
            for position, value in enumerate(node.values):
                if position == last:
                    self.condition(value, t, f)
                    return
                following = self.b.new_block()
                if isinstance(node.op, ast.And):
                    self.condition(value, following, f)
                else:
                    self.condition(value, t, following)
                self.b.set_block(following)
            return
        if isinstance(node, ast.Compare):
            self.compare_branch(node, t, f)
            return
        if isinstance(node, ast.Constant) and node.value in (True, False, None):
            self.b.jmp(t if node.value else f)  # type: ignore[arg-type]
            return
        self.truth_branch(self.expr(node), t, f)

    def truth_branch(self, value: int, if_true: object, if_false: object) -> None:
        """Branch on the truth of ``value``: True, False, None and small ints by their
        words, a str, bytes, list, tuple or dict by its length (about 20 ticks, against
        66 through ``truth``), any other value by ``truth``."""
        t, f = if_true, if_false
        b = self.b
        not_true, not_false, not_none, not_int, is_int = (b.new_block() for _ in range(5))
        b.br("EQ", value, self.const(TRUE), t, not_true)  # type: ignore[arg-type]
        b.set_block(not_true)
        b.br("EQ", value, self.const(FALSE), f, not_false)  # type: ignore[arg-type]
        b.set_block(not_false)
        b.br("EQ", value, self.const(NONE), f, not_none)  # type: ignore[arg-type]
        b.set_block(not_none)
        b.br("NZ", b.op("AND", value, ONE), -1, is_int, not_int)
        b.set_block(is_int)
        b.br("EQ", value, ONE, f, t)  # type: ignore[arg-type]  # the word of 0 is 1
        b.set_block(not_int)
        # a str, bytes, list, tuple or dict (tags in a row) is true when its length is
        # not zero
        sized, other = b.new_block(), b.new_block()
        tag = b.op("AND", b.load(value, L.HEADER), self.const(L.TAG_MASK))
        first = b.op("SUB", tag, self.const(L.TAG_STRING))
        b.br("LT", first, self.const(L.TAG_DICT - L.TAG_STRING + 1), sized, other)
        b.set_block(sized)
        b.br("NZ", b.load(value, L.LENGTH), -1, t, f)  # type: ignore[arg-type]
        b.set_block(other)
        b.br("NZ", self.rt("truth", value), -1, t, f)  # type: ignore[arg-type]

    def compare_branch(self, node: ast.Compare, if_true: object, if_false: object) -> None:
        op = node.ops[0]
        if self.literal_compare_branch(node, if_true, if_false):
            return
        left = self.expr(node.left)
        right = self.expr(node.comparators[0])
        symbols = {
            ast.Eq: "==",
            ast.NotEq: "!=",
            ast.Lt: "<",
            ast.LtE: "<=",
            ast.Gt: ">",
            ast.GtE: ">=",
            ast.In: "in",
            ast.NotIn: "not",
        }
        self.b.loc = self.position(node.left, (symbols[type(op)],))
        t, f = if_true, if_false
        b = self.b
        if isinstance(op, ast.Eq | ast.NotEq):
            if isinstance(op, ast.NotEq):
                t, f = f, t
            if _identity_literal(node.left) or _identity_literal(node.comparators[0]):
                # a small int, None, True or False equals only its own word
                b.br("EQ", left, right, t, f)  # type: ignore[arg-type]
                if _small_literal(node.left) is not None:
                    self.float_equality_patch(right, left, right, t, f)
                elif _small_literal(node.comparators[0]) is not None:
                    self.float_equality_patch(left, left, right, t, f)
                return
            same, differ, neither_int = b.new_block(), b.new_block(), b.new_block()
            b.br("EQ", left, right, same, differ)
            b.set_block(same)  # one small int, or one object: a container still goes deep
            b.br("NZ", b.op("AND", left, ONE), -1, t, neither_int)  # type: ignore[arg-type]
            b.set_block(differ)
            either = b.op("OR", left, right)
            # with floats, only two small ints that differ are unequal without a look
            self.state.float_patches.append(partial(setattr, b.block.insns[-1], "op", "AND"))
            b.br("NZ", b.op("AND", either, ONE), -1, f, neither_int)  # type: ignore[arg-type]
            b.set_block(neither_int)

            b.br("NZ", self.rt("equal", left, right), -1, t, f)  # type: ignore[arg-type]
            return
        if isinstance(op, ast.In | ast.NotIn):
            result = self.rt("contains", right, left)
            if isinstance(op, ast.NotIn):
                t, f = f, t
            b.br("NZ", result, -1, t, f)  # type: ignore[arg-type]
            return
        both, slow = b.new_block(), b.new_block()
        left_constant = _small_literal(node.left)
        right_constant = _small_literal(node.comparators[0])
        b.br("NZ", self.small_tags(left, right, left_constant, right_constant), -1, both, slow)
        b.set_block(both)
        if right_constant is not None:  # fold the literal's sign flip into the constant
            biased = b.op("XOR", left, SIGN)
            word = (word_of_int(right_constant) or 0) ^ L.SIGN_BIT
            unsigned = {"SLT": "LT", "SLE": "LE", "SGT": "GT", "SGE": "GE"}[_SIGNED_COND[type(op)]]
            b.br(unsigned, biased, self.const(word), t, f)  # type: ignore[arg-type]
        else:
            b.br(_SIGNED_COND[type(op)], left, right, t, f)  # type: ignore[arg-type]
        b.set_block(slow)
        result = self.rt("compare", left, right, self.const(_ORDER[type(op)]))
        b.br("NZ", result, -1, t, f)  # type: ignore[arg-type]

    def literal_compare_branch(self, node: ast.Compare, if_true: object, if_false: object) -> bool:
        """``x == "literal"`` (either way round, or ``!=``) and ``x in (literals...)``
        (a tuple or list literal of str, bytes, small int, None or bool constants)
        without a call: the literal's bytes are known, so the test reads ``x``'s tag,
        length and bytes in place (about 20 ticks, against 65 through ``equal``); a
        membership test is a chain of such tests (about 12 ticks a literal, against
        about 200 for building the tuple and ``contains``).  False (nothing emitted)
        for any other comparison."""
        op = node.ops[0]
        left_node, right_node = node.left, node.comparators[0]
        t, f = if_true, if_false
        if isinstance(op, ast.NotEq | ast.NotIn):
            t, f = f, t
        if isinstance(op, ast.Eq | ast.NotEq):
            if self.string_literal(right_node) is not None:
                value_node, literal = left_node, right_node
            elif self.string_literal(left_node) is not None:
                value_node, literal = right_node, left_node
            else:
                return False
            value = self.expr(value_node)
            self.b.loc = self.position(left_node, ("==" if isinstance(op, ast.Eq) else "!=",))
            self.literal_equality_branch(value, literal, t, f)
            return True
        if not isinstance(op, ast.In | ast.NotIn) or not isinstance(
            right_node, ast.Tuple | ast.List
        ):
            return False
        elements = right_node.elts
        if not all(_identity_literal(e) or self.string_literal(e) is not None for e in elements):
            return False
        value = self.expr(left_node)
        self.b.loc = self.position(left_node, ("in" if isinstance(op, ast.In) else "not",))
        for element in elements:
            following = self.b.new_block()
            self.literal_equality_branch(value, element, t, following)
            self.b.set_block(following)
        self.b.jmp(f)  # type: ignore[arg-type]
        return True

    def string_literal(self, node: ast.expr) -> tuple[bytes, int] | None:
        """The bytes and tag of a str or bytes literal, else None."""
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str | bytes):
            return None
        payload, is_bytes = self.module.source.strings[id(node)]
        data = payload.encode() if isinstance(payload, str) else payload
        return data, L.TAG_BYTES if is_bytes else L.TAG_STRING

    def literal_equality_branch(
        self, value: int, literal: ast.expr, if_true: object, if_false: object
    ) -> None:
        """Branch on ``value == literal``, ``literal`` a small int, None, bool, str or
        bytes literal."""
        b = self.b
        t, f = if_true, if_false
        text = self.string_literal(literal)
        if text is None:  # a small int, None, True or False equals only its own word
            word = self.expr(literal)
            b.br("EQ", value, word, t, f)  # type: ignore[arg-type]
            if _small_literal(literal) is not None:
                self.float_equality_patch(value, value, word, t, f)
            return
        data, tag = text
        is_object, tag_matches = b.new_block(), b.new_block()
        b.br("NZ", b.op("AND", value, ONE), -1, f, is_object)  # type: ignore[arg-type]
        b.set_block(is_object)
        header = b.op("AND", b.load(value, L.HEADER), self.const(L.TAG_MASK))
        b.br("EQ", header, self.const(tag), tag_matches, f)  # type: ignore[arg-type]
        b.set_block(tag_matches)
        length = b.load(value, L.STR_LEN)
        if len(data) > _INLINE_LITERAL_BYTES:
            same_length = b.new_block()
            b.br("EQ", length, self.const(len(data)), same_length, f)  # type: ignore[arg-type]
            b.set_block(same_length)
            answer = self.rt("bytes_equal", value, self.string(data, tag))
            b.br("NZ", answer, -1, t, f)  # type: ignore[arg-type]
            return
        following = b.new_block()
        b.br("EQ", length, self.const(len(data)), following, f)  # type: ignore[arg-type]
        for offset in range(0, len(data), 8):
            b.set_block(following)
            chunk = data[offset : offset + 8]
            word = b.load(value, L.STR_DATA + offset)
            if len(chunk) < 8:  # the bytes past the end are not the string's
                word = b.op("AND", word, self.const((1 << (8 * len(chunk))) - 1))
            following = b.new_block()
            b.br("EQ", word, self.const(int.from_bytes(chunk, "little")), following, f)  # type: ignore[arg-type]
        b.set_block(following)
        b.jmp(t)  # type: ignore[arg-type]

    def float_equality_patch(
        self, other: int, left: int, right: int, if_true: object, if_false: object
    ) -> None:
        """After ``EQ left, right`` with a small-int literal on one side: in a program
        with floats, the words differing says nothing when ``other`` (the operand that
        is not the literal) is an object, a float perhaps, so ``equal`` decides."""
        block = self.b.block
        function = self.b.function
        loc = self.b.loc

        def patch() -> None:
            b = Builder(function)
            b.loc = loc
            check, ask = b.new_block(), b.new_block()
            assert block.term is not None
            block.term.targets = (block.term.targets[0], check.index)
            b.set_block(check)
            b.br("NZ", b.op("AND", other, ONE), -1, if_false, ask)  # type: ignore[arg-type]
            b.set_block(ask)
            answer = b.call("equal", [left, right])
            b.br("NZ", answer, -1, if_true, if_false)  # type: ignore[arg-type]

        self.state.float_patches.append(patch)

    def bool_value(self, node: ast.expr) -> int:
        """A condition as a bool value."""
        result = self.b.reg()
        yes, no, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.condition(node, yes, no)
        self.b.set_block(yes)
        self.b.li(TRUE, dst=result)
        self.b.jmp(done)
        self.b.set_block(no)
        self.b.li(FALSE, dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    # -- expressions ------------------------------------------------------------------

    def position(self, node: ast.AST, symbols: str | tuple[str, ...]) -> Loc:
        if isinstance(symbols, str):
            symbols = (symbols,)
        line, col = self.module.source.positions.after(node, symbols)
        return Loc(line, col)

    def expr(self, node: ast.expr | None) -> int:
        assert node is not None
        saved = self.b.loc
        try:
            return self._expr(node)
        finally:
            self.b.loc = saved

    def _expr(self, node: ast.expr) -> int:
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.BinOp):
            computed = self.computed.get(id(node))
            if computed is not None:
                return computed
            return self.float_tree(node, partial(self.binary_operation, node))
        if id(node) in self.computed:
            return self.computed[id(node)]
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return self.bool_value(node)
            operand = self.expr(node.operand)
            self.b.loc = self.loc(node)
            if isinstance(node.op, ast.USub):
                return self.negate(operand)
            if isinstance(node.op, ast.UAdd):
                return self.rt("pos", operand)
            return self.rt("invert", operand)
        if isinstance(node, ast.Compare):
            return self.bool_value(node)
        if isinstance(node, ast.BoolOp):
            return self.bool_operation(node)
        if isinstance(node, ast.IfExp):
            result = self.b.reg()
            yes, no, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
            self.condition(node.test, yes, no)
            self.b.set_block(yes)
            self.b.mov(self.expr(node.body), dst=result)
            self.b.jmp(done)
            self.b.set_block(no)
            self.b.mov(self.expr(node.orelse), dst=result)
            self.b.jmp(done)
            self.b.set_block(done)
            return result
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.List):
            return self.sequence_literal(node.elts, "list_with", True)
        if isinstance(node, ast.Tuple):
            return self.sequence_literal(node.elts, "tuple_with", False)
        if isinstance(node, ast.Dict):
            return self.dict_literal(node)
        if isinstance(node, ast.ListComp):
            return self.list_comprehension(node)
        if isinstance(node, ast.DictComp):
            return self.dict_comprehension(node)
        if isinstance(node, ast.Lambda):
            self.b.loc = self.loc(node)
            return self.make_function(node, "lambda")
        raise self.module.fail(node, f"unexpected expression {type(node).__name__}")

    def binary_operation(self, node: ast.BinOp) -> int:
        """``left op right``, each operand computed in turn, then the operator."""
        left = self.expr(node.left)
        right = self.expr(node.right)
        self.b.loc = self.position(node.left, _BINARY_SYMBOL[type(node.op)])
        return self.binary(
            _BINARY_RUNTIME[type(node.op)],
            left,
            right,
            left_constant=_small_literal(node.left),
            right_constant=_small_literal(node.right),
        )

    # -- arithmetic on floats first ---------------------------------------------------

    def float_tree(
        self, node: ast.BinOp, general: Callable[[], int], where: Loc | None = None
    ) -> int:
        """``node``, a tree of ``+ - * / // %`` (see ``_FloatTree``), with a path that
        takes its operands to be floats: each leaf read (a list item in place), every
        leaf tested for a float at once, the operators done on the doubles' bits by the
        soft-float functions, and one float object made for the result, where the
        operators one by one make one for every intermediate value and test their
        operands' types again. Any other leaf (an int, a str, a list index out of
        range), a zero divisor or a leaf that cannot be read goes to ``general``, the
        operators one by one, which computes the leaves again (they have no effects;
        the parts that may have, calls, are computed once, before the split, and only
        where they come before anything that may fail). Only in a file that shows
        floats, and not in code that hardly runs."""
        if self.cold or self.general or not self.module.float_code:
            return general()
        tree = _FloatTree.of(node, self.pure_name, self.int_variable)
        if tree is None:
            return general()
        b = self.b
        saved = self.b.loc
        for part in tree.computed:
            self.computed[id(part)] = self.expr(part)
        result = b.reg()
        bail, done = b.new_block(), b.new_block()
        values: list[int] = []
        bits: dict[int, int] = {}
        literals = [leaf for leaf in tree.leaves if _FloatTree.literal(leaf)]
        for leaf in tree.leaves:
            if id(leaf) in self.computed:
                values.append(self.computed[id(leaf)])
            elif isinstance(leaf, ast.Subscript):
                container = self.expr(leaf.value)
                key = self.expr(leaf.slice)
                values.append(b.load(self.list_slot(container, key, bail, False, bail)))
            elif leaf not in literals:
                values.append(self.expr(leaf))
        self.float_test(values, bail)
        position = 0
        for leaf in tree.leaves:
            if leaf in literals:
                assert isinstance(leaf, ast.Constant) and isinstance(leaf.value, int | float)
                bits[id(leaf)] = self.const(L.float_bits(float(leaf.value)))
            else:
                bits[id(leaf)] = b.load(values[position], L.FLOAT_BITS)
                position += 1

        b.mov(self.new_float(self.float_bits_of(node, node, where, bits, bail)), dst=result)
        b.jmp(done)
        b.set_block(bail)
        b.loc = saved
        self.general += 1
        b.mov(general(), dst=result)
        self.general -= 1
        for part in tree.computed:
            del self.computed[id(part)]
        b.jmp(done)
        b.set_block(done)
        b.loc = saved
        return result

    def float_bits_of(
        self, part: ast.expr, node: ast.BinOp, where: Loc | None, bits: dict[int, int], bail: Block
    ) -> int:
        """The double's bits ``part`` of the float tree ``node`` computes on its float
        path (the leaves' bits are in ``bits``); a zero divisor goes to ``bail``."""
        if not isinstance(part, ast.BinOp) or id(part) in self.computed:
            return bits[id(part)]
        b = self.b
        x = self.float_bits_of(part.left, node, where, bits, bail)
        y = self.float_bits_of(part.right, node, where, bits, bail)
        if part is node and where is not None:
            b.loc = where
        else:
            b.loc = self.position(part.left, _BINARY_SYMBOL[type(part.op)])
        name = _FLOAT_OPERATORS[type(part.op)]
        if name != "f64_add" and name != "f64_sub" and name != "f64_mul":
            divisor = b.new_block()  # a zero divisor: an error, the general path's
            b.br("NZ", b.op("SHL", y, ONE), -1, divisor, bail)
            b.set_block(divisor)
        return self.rt(name, x, y)

    def int_variable(self, node: ast.expr) -> bool:
        """Whether ``node`` is a local variable a ``range`` loop counts with (an int,
        most likely)."""
        if not isinstance(node, ast.Name):
            return False
        binding = self.module.resolution.bindings.get(id(node))
        return binding is not None and id(binding.variable) in self.counters

    def pure_name(self, node: ast.Name) -> bool:
        """Whether reading ``node`` cannot fail and has no effect: a local variable (not
        a cell) or a global surely assigned on every path to here."""
        binding = self.module.resolution.bindings.get(id(node))
        if binding is None:
            return False
        if binding.kind is Kind.LOCAL:
            variable = binding.variable
            return variable is not None and not variable.is_cell and id(variable) in self.assigned
        if binding.kind is Kind.GLOBAL:
            return (binding.kind.value, binding.name) in self.assigned
        return False

    def float_test(self, values: list[int], not_floats: object) -> None:
        """Go on when every one of ``values`` is a float, else to ``not_floats``: one
        branch for the tag bits, one for the headers' tags."""
        b = self.b
        if not values:
            return
        objects, floats = b.new_block(), b.new_block()
        either = values[0]
        for value in values[1:]:
            either = b.op("OR", either, value)
        b.br("Z", b.op("AND", either, ONE), -1, objects, not_floats)  # type: ignore[arg-type]
        b.set_block(objects)
        tag = self.const(L.TAG_FLOAT)
        differ = ZERO
        for value in values:
            header = b.op("XOR", b.load(value, L.HEADER), tag)
            differ = header if differ == ZERO else b.op("OR", differ, header)
        tags = b.op("AND", differ, self.const(L.TAG_MASK))
        b.br("Z", tags, -1, floats, not_floats)  # type: ignore[arg-type]
        b.set_block(floats)

    def new_float(self, bits: int) -> int:
        """A new float object of ``bits``: the heap pointer bumped in place (as the
        runtime's ``alloc`` does), ``float_new`` when the bump region is full."""
        b = self.b
        result = b.reg()
        fits, room, slow, done = (b.new_block() for _ in range(4))
        end = b.op("ADD", HP, self.const(L.FLOAT_SIZE))
        b.br("LE", end, b.load(ZERO, ref=_BUMP_END), fits, slow)
        b.set_block(fits)
        b.br("LE", end, LIM, room, slow)
        b.set_block(room)
        b.mov(HP, dst=result)
        b.mov(end, dst=HP)
        b.store(self.const(L.TAG_FLOAT), result, L.HEADER)
        b.store(bits, result, L.FLOAT_BITS)
        b.jmp(done)
        b.set_block(slow)
        b.mov(self.rt("float_new", bits), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def constant(self, node: ast.Constant) -> int:
        value = node.value
        if value is None:
            return self.none()
        if value is True:
            return self.b.li(TRUE)
        if value is False:
            return self.b.li(FALSE)
        if isinstance(value, int):
            word = word_of_int(value)
            if word is not None:
                return self.const(word)
            name = f"int:{value:x}"
            self.state.data.record(name, bigint_record(value))
            return self.b.li_ref(DataRef(name))
        if isinstance(value, str | bytes):
            payload, is_bytes = self.module.source.strings[id(node)]
            return self.string(payload, L.TAG_BYTES if is_bytes else L.TAG_STRING)
        if isinstance(value, float):
            return self.float_constant(value)
        raise self.module.fail(node, f"unsupported constant {value!r}")

    def name(self, node: ast.Name) -> int:
        binding = self.module.resolution.bindings[id(node)]
        kind = binding.kind
        if kind is Kind.LOCAL:
            variable = binding.variable
            assert variable is not None
            register = self.variable_register(variable)
            if variable.is_cell:
                value = self.b.load(register, L.CELL_VALUE)
                self.check_bound(
                    value, f"local variable {variable.name} referenced before assignment", node
                )
                return value
            if id(variable) not in self.assigned:
                self.needs_init.add(id(variable))
                self.check_bound(
                    register, f"local variable {variable.name} referenced before assignment", node
                )
            return register
        if kind is Kind.FREE:
            value = self.b.load(self.free_cells[binding.free_index], L.CELL_VALUE)
            self.check_bound(
                value, f"local variable {binding.name} referenced before assignment", node
            )
            return value
        if kind in (Kind.GLOBAL, Kind.LOAD):
            table = self.module.globals if kind is Kind.GLOBAL else self.module.loads
            value = self.b.load(ZERO, ref=DataRef(table[binding.name]))
            if (kind.value, binding.name) in self.assigned:
                return value  # the top level has assigned it on every path to here
            scope = "global" if kind is Kind.GLOBAL else "local"
            self.check_bound(
                value, f"{scope} variable {binding.name} referenced before assignment", node
            )
            return value
        if kind is Kind.PREDECLARED:
            return self.predeclared_value(binding.name, node)
        return self.universal_value(binding.name, node)

    def check_bound(self, value: int, message: str, node: ast.AST) -> None:
        ok, missing = self.b.new_block(), self.b.new_block()
        self.b.br("NZ", value, -1, ok, missing)
        self.b.set_block(missing)
        self.b.loc = self.loc(node)
        self.error(message)
        self.b.set_block(ok)

    def universal_value(self, name: str, node: ast.AST) -> int:
        if name == "None":
            return self.none()
        if name == "True":
            return self.b.li(TRUE)
        if name == "False":
            return self.b.li(FALSE)
        if name == MATH_MODULE:
            return self.math_module()
        builtin = FUNCTIONS.get(name)
        if builtin is None:
            raise self.module.fail(node, f"undefined: {name}")
        if name == "float":
            self.state.uses_floats = True
        return self.builtin_value(builtin)

    def predeclared_value(self, name: str, node: ast.AST) -> int:
        if name == "forge":
            return self.forge_module()
        builtin = HOST.get(name) if self.module.key == FORGE_MODULE else None
        if builtin is None and self.state.testing:
            builtin = TESTING.get(name)
        if builtin is None:
            raise self.module.fail(node, f"undefined: {name}")
        return self.builtin_value(builtin)

    def forge_module(self) -> int:
        """The ``forge`` module as a value: made once per program, from the public
        globals of ``forge.star``."""
        info = self.module.loaded[FORGE_MODULE]
        cache = DataRef(self.state.data.word("forge:module"))
        result = self.b.reg()
        cached = self.b.load(ZERO, ref=cache, dst=result)
        make, done = self.b.new_block(), self.b.new_block()
        self.b.br("NZ", cached, -1, done, make)
        self.b.set_block(make)
        self.rt(info.init, result=False)
        public = [name for name in info.globals if not name.startswith("_")]
        members = self.rt("dict_new", self.const(len(public)))
        for name in public:
            value = self.b.load(ZERO, ref=DataRef(info.globals[name]))
            self.rt("dict_set", members, self.string(name), value, result=False)
        self.b.mov(self.rt("builtin_module", self.string("forge"), members), dst=result)
        self.b.store(result, ZERO, ref=cache)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    def math_module(self) -> int:
        """The ``math`` module as a value: made on first use by a function of its own
        (of its builtins and the constants ``e`` and ``pi``), then kept."""
        self.state.uses_floats = True
        make_name = "math:module"
        cache = DataRef(self.state.data.word(make_name))
        if make_name not in self.state.functions:
            self.state.functions[make_name] = self.math_module_function(make_name, cache)
        result = self.b.reg()
        cached = self.b.load(ZERO, ref=cache, dst=result)
        make, done = self.b.new_block(), self.b.new_block()
        self.b.br("NZ", cached, -1, done, make)
        self.b.set_block(make)
        self.b.mov(self.rt(make_name), dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    def math_module_function(self, name: str, cache: DataRef) -> Function:
        function = Function(name, 0)
        outer, self.b = self.b, Builder(function)
        try:
            members = self.rt("dict_new", self.const(len(MATH) + 2))
            for member, value in (("e", math.e), ("pi", math.pi)):
                constant = self.float_constant(value)
                self.rt("dict_set", members, self.string(member), constant, result=False)
            for member, builtin in MATH.items():
                value = self.builtin_value(builtin)
                self.rt("dict_set", members, self.string(member), value, result=False)
            module = self.rt("builtin_module", self.string(MATH_MODULE), members)
            self.b.store(module, ZERO, ref=cache)
            self.b.ret(module)
        finally:
            self.b = outer
        return function

    def float_constant(self, value: float) -> int:
        """A static float object."""
        self.state.uses_floats = True
        bits = L.float_bits(value)
        name = f"float:{bits:016x}"
        self.state.data.record(name, (L.TAG_FLOAT | L.FLAG_STATIC | L.FLAG_FROZEN, bits))
        return self.b.li_ref(DataRef(name))

    def builtin_value(self, builtin: Builtin, receiver: int = ZERO) -> int:
        """A builtin function (or a method bound to ``receiver``) as a value."""
        if builtin.name in ("getattr", "hasattr", "dir") and not builtin.is_method:
            self.state.method_tables = True
        key = (builtin.receiver, builtin.name)
        number = self.state.builtin_values.setdefault(key, len(self.state.builtin_values) + 1)
        return self.rt("make_builtin", self.const(number), receiver, self.string(builtin.name))

    def negate(self, operand: int) -> int:
        b = self.b
        result = b.reg()
        fast, ok, slow, done = (b.new_block() for _ in range(4))
        b.br("NZ", b.op("AND", operand, ONE), -1, fast, slow)
        b.set_block(fast)
        # -(2x+1) + 2 = 2(-x)+1; only the smallest small int has no small negation
        b.br("EQ", operand, self.const(L.SIGN_BIT | 1), slow, ok)
        b.set_block(ok)
        b.op("ADD", b.op("NEG", operand), self.const(2), dst=result)
        b.jmp(done)
        b.set_block(slow)
        b.mov(self.rt("neg", operand), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def binary(
        self,
        op: str,
        left: int,
        right: int,
        in_place: bool = False,
        left_constant: int | None = None,
        right_constant: int | None = None,
    ) -> int:
        """``left op right``; ``*_constant`` is the value of an operand that is a small-int
        literal, which lets the inline paths test fewer tags and fold constants."""
        if op == "truediv":
            self.state.uses_floats = True
        if self.cold:
            if op == "add" and in_place:
                op = "inplace_add"
            elif op == "bitor" and in_place:
                op = "inplace_bitor"
            return self.arithmetic_call(op, left, right)
        if op == "add":
            return self.add_sub(
                left,
                right,
                True,
                "inplace_add" if in_place else "add",
                left_constant,
                right_constant,
            )
        if op == "sub":
            return self.add_sub(left, right, False, "sub", left_constant, right_constant)
        if op == "mul":
            return self.multiply(left, right)
        if op in ("floordiv", "mod") and right_constant is not None and right_constant > 0:
            return self.divide_by_constant(op, left, right, right_constant)
        if op == "bitor" and in_place:
            return self.rt("inplace_bitor", left, right)
        return self.arithmetic_call(op, left, right)

    def arithmetic_call(self, name: str, left: int, right: int) -> int:
        """The runtime's ``name`` for ``left op right``; in a program with floats, its
        ``number_`` version where there is one, which tries two floats first."""
        result = self.rt(name, left, right)
        if name in FLOAT_FIRST:
            call = self.b.block.insns[-1]
            self.state.float_patches.append(
                partial(setattr, call, "ref", CodeRef(f"number_{name}"))
            )
        return result

    def small_tags(
        self, left: int, right: int, left_constant: int | None, right_constant: int | None
    ) -> int:
        """A register that is non-zero when both operands are small ints (a literal is)."""
        if left_constant is not None:
            return self.b.op("AND", right, ONE)
        if right_constant is not None:
            return self.b.op("AND", left, ONE)
        return self.b.op("AND", self.b.op("AND", left, right), ONE)

    def add_sub(
        self,
        left: int,
        right: int,
        adding: bool,
        slow_name: str,
        left_constant: int | None = None,
        right_constant: int | None = None,
    ) -> int:
        """Small-int addition or subtraction inline, with the overflow test; anything
        else (big ints, strings, lists, errors) in the runtime."""
        b = self.b
        result = b.reg()
        fast, slow, done = b.new_block(), b.new_block(), b.new_block()
        b.br("NZ", self.small_tags(left, right, left_constant, right_constant), -1, fast, slow)
        b.set_block(fast)
        if right_constant is not None:
            right_even = self.const((right_constant << 1) & 0xFFFF_FFFF_FFFF_FFFF)  # 2y
        else:
            right_even = b.op("SUB", right, ONE)  # 2y
        value = b.op("ADD" if adding else "SUB", left, right_even)
        if adding:  # overflow iff both operands' signs differ from the result's
            flags = b.op("AND", b.op("XOR", left, value), b.op("XOR", right_even, value))
        else:  # overflow iff the operands' signs differ and the result's differs from left's
            flags = b.op("AND", b.op("XOR", left, right_even), b.op("XOR", left, value))
        no_overflow = b.new_block()
        b.br("LT", flags, SIGN, no_overflow, slow)
        b.set_block(no_overflow)
        b.mov(value, dst=result)
        b.jmp(done)
        b.set_block(slow)
        b.mov(self.arithmetic_call(slow_name, left, right), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def multiply(self, left: int, right: int) -> int:
        """Small ints below 2**31 in magnitude multiply inline (the product fits a small
        int); other small ints in ``small_mul``; anything else in the runtime."""
        b = self.b
        result = b.reg()
        fast, check_right, in_range, small, slow, done = (b.new_block() for _ in range(6))
        b.br("NZ", self.small_tags(left, right, None, None), -1, check_right, slow)
        b.set_block(check_right)
        # a word w = 2x+1 has -2**31 <= x < 2**31 exactly when w + 2**32 < 2**33
        # (unsigned), the range taken for the right operand; the left one's is moved up
        # by one, -2**31 < x <= 2**31, since (-2**31)**2 = 2**62 is not a small int
        # (the products of the two ranges lie in -2**62 .. 2**62 - 2**31)
        shifted_left = b.op("ADD", left, self.const((1 << 32) - 2))
        limit = self.const(1 << 33)
        b.br("LT", shifted_left, limit, in_range, small)
        b.set_block(in_range)
        shifted_right = b.op("ADD", right, self.const(1 << 32))
        b.br("LT", shifted_right, limit, fast, small)
        b.set_block(fast)
        # y = (right + 2**32) >> 1, less 2**31; the product 2x * y, plus the tag
        y = b.op("SUB", b.op("SHR", shifted_right, ONE), self.const(1 << 31))
        product = b.op("MUL", b.op("SUB", left, ONE), y)
        b.op("ADD", product, ONE, dst=result)
        b.jmp(done)
        b.set_block(small)
        b.mov(self.rt("small_mul", left, right), dst=result)
        b.jmp(done)
        b.set_block(slow)
        b.mov(self.arithmetic_call("mul", left, right), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def divide_by_constant(self, op: str, left: int, right: int, divisor: int) -> int:
        """``x // c`` and ``x % c`` for a positive literal ``c`` and a non-negative small
        ``x`` inline (floored and truncated division agree there); else the runtime."""
        b = self.b
        result = b.reg()
        small, fast, slow, done = (b.new_block() for _ in range(4))
        b.br("NZ", b.op("AND", left, ONE), -1, small, slow)
        b.set_block(small)
        b.br("LT", left, SIGN, fast, slow)
        b.set_block(fast)
        x = b.op("SHR", left, ONE)
        if divisor & (divisor - 1) == 0:  # a power of two: a shift or a mask
            shift = divisor.bit_length() - 1
            if op == "floordiv":
                value = b.op("SHR", x, self.const(shift)) if shift else x
            else:
                value = b.op("AND", x, self.const(divisor - 1))
        else:
            value = b.op("DIV" if op == "floordiv" else "MOD", x, self.const(divisor))
        b.op("OR", b.op("SHL", value, ONE), ONE, dst=result)
        b.jmp(done)
        b.set_block(slow)
        b.mov(self.rt(op, left, right), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def bool_operation(self, node: ast.BoolOp) -> int:
        """``a and b`` / ``a or b``: the value of the operand that decides."""
        result = self.b.reg()
        done = self.b.new_block()
        last = len(node.values) - 1
        for position, operand in enumerate(node.values):
            value = self.expr(operand)
            self.b.mov(value, dst=result)
            if position == last:
                self.b.jmp(done)
                break
            following = self.b.new_block()
            if isinstance(node.op, ast.And):
                self.truth_branch(value, following, done)
            else:
                self.truth_branch(value, done, following)
            self.b.set_block(following)
        self.b.set_block(done)
        return result

    def attribute(self, node: ast.Attribute) -> int:
        """``x.name`` as a value: a method bound to ``x``, or a module's member."""
        obj = self.expr(node.value)
        self.b.loc = self.position(node.value, ".")
        name = node.attr
        candidates = METHODS.get(name, {})
        if not candidates:
            return self.rt("getattr_value", obj, self.string(name))
        result = self.b.reg()
        done = self.b.new_block()
        tag = self.tag_of(obj)
        for tag_value, builtin in candidates.items():
            this, other = self.b.new_block(), self.b.new_block()
            self.b.br("EQ", tag, self.const(tag_value), this, other)
            self.b.set_block(this)
            self.b.mov(self.builtin_value(builtin, obj), dst=result)
            self.b.jmp(done)
            self.b.set_block(other)
        self.b.mov(self.rt("getattr_value", obj, self.string(name)), dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    def tag_of(self, value: int) -> int:
        """The runtime's ``tag_of`` inline (5 ticks against 12): TAG_INT for a small int,
        else the header's tag."""
        b = self.b
        result = b.reg()
        small, obj, done = b.new_block(), b.new_block(), b.new_block()
        b.br("NZ", b.op("AND", value, ONE), -1, small, obj)
        b.set_block(small)
        b.li(L.TAG_INT, dst=result)
        b.jmp(done)
        b.set_block(obj)
        b.op("AND", b.load(value, L.HEADER), self.const(L.TAG_MASK), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def subscript(self, node: ast.Subscript) -> int:
        container = self.expr(node.value)
        index = node.slice
        if isinstance(index, ast.Slice):
            parts = [
                self.expr(p) if p is not None else ZERO
                for p in (index.lower, index.upper, index.step)
            ]
            self.b.loc = self.position(node.value, "[")
            return self.rt("get_slice", container, *parts)
        key = self.expr(index)
        self.b.loc = self.position(node.value, "[")
        return self.get_index(container, key)

    def get_index(self, container: int, key: int) -> int:
        """``container[key]``: a list's item by a small int in range inline (about 14
        ticks, against 30 through ``get_index``), a dict's through ``dict_get_index``
        (the tag read once), anything else in the runtime."""
        if self.cold:
            return self.rt("get_index", container, key)
        b = self.b
        result = b.reg()
        dict_path, slow, done = b.new_block(), b.new_block(), b.new_block()
        b.mov(b.load(self.list_slot(container, key, slow, False, dict_path)), dst=result)
        b.jmp(done)
        b.set_block(dict_path)
        b.mov(self.rt("dict_get_index", container, key), dst=result)
        b.jmp(done)
        b.set_block(slow)
        b.mov(self.rt("get_index", container, key), dst=result)
        b.jmp(done)
        b.set_block(done)
        return result

    def set_index(self, container: int, key: int, value: int) -> None:
        """``container[key] = value``: a list's item by a small int in range inline, a
        dict's through ``dict_set``, anything else (and every error of a list) through
        the runtime's ``set_index``."""
        if self.cold:
            self.rt("set_index", container, key, value, result=False)
            return
        b = self.b
        dict_path, slow, done = b.new_block(), b.new_block(), b.new_block()
        b.store(value, self.list_slot(container, key, slow, True, dict_path))
        b.jmp(done)
        b.set_block(dict_path)
        self.rt("dict_set", container, key, value, result=False)
        b.jmp(done)
        b.set_block(slow)
        self.rt("set_index", container, key, value, result=False)
        b.jmp(done)
        b.set_block(done)

    def list_slot(
        self, container: int, key: int, slow: object, writing: bool, dict_path: object
    ) -> int:
        """The address of ``container[key]`` when ``container`` is a list (or, reading, a
        tuple) and ``key`` a small int from 0 to its length less one (and, ``writing``,
        the list is neither frozen nor being iterated); else a jump to ``dict_path`` for
        a dict (a frozen one too when reading), or to ``slow``, whose runtime call
        decides (negative indexes, other containers, errors)."""
        b = self.b
        address = b.reg()
        is_object, is_list, not_list, found = (b.new_block() for _ in range(4))
        b.br("Z", b.op("AND", container, ONE), -1, is_object, slow)  # type: ignore[arg-type]
        b.set_block(is_object)
        # writing: the FROZEN flag is tested with the tag (a frozen dict goes the slow way)
        mask = L.TAG_MASK | L.FLAG_FROZEN if writing else L.TAG_MASK
        tag = b.op("AND", b.load(container, L.HEADER), self.const(mask))
        b.br("EQ", tag, self.const(L.TAG_LIST), is_list, not_list)
        b.set_block(not_list)
        if not writing:
            is_tuple, other = b.new_block(), b.new_block()
            b.br("EQ", tag, self.const(L.TAG_TUPLE), is_tuple, other)
            b.set_block(is_tuple)
            index = self.index_below(key, b.load(container, L.TUPLE_LEN), slow)
            offset = b.op("SHL", index, self.const(3))
            b.op("ADD", b.op("ADD", container, offset), self.const(L.TUPLE_ITEMS), dst=address)
            b.jmp(found)
            b.set_block(other)
        b.br("EQ", tag, self.const(L.TAG_DICT), dict_path, slow)  # type: ignore[arg-type]
        b.set_block(is_list)
        index = self.index_below(key, b.load(container, L.LIST_LEN), slow)
        if writing:
            mutable = b.new_block()
            b.br("Z", b.load(container, L.LIST_ITERS), -1, mutable, slow)  # type: ignore[arg-type]
            b.set_block(mutable)
        offset = b.op("SHL", index, self.const(3))
        b.op("ADD", b.load(container, L.LIST_ITEMS), offset, dst=address)
        b.jmp(found)
        b.set_block(found)
        return address

    def index_below(self, key: int, length: int, slow: object) -> int:
        """The small int ``key`` as a machine word, if from 0 to ``length`` less one;
        else a jump to ``slow``."""
        b = self.b
        is_small, in_range = b.new_block(), b.new_block()
        b.br("NZ", b.op("AND", key, ONE), -1, is_small, slow)  # type: ignore[arg-type]
        b.set_block(is_small)
        index = b.op("SHR", key, ONE)  # a negative index's is above every length
        b.br("LT", index, length, in_range, slow)  # type: ignore[arg-type]
        b.set_block(in_range)
        return index

    def slice_position(self, node: ast.Subscript) -> Loc:
        """Where the Go implementation reports a failed slice: its compiler sets the
        position to the ``[`` and then compiles the operands, which may set it again;
        the slice gets the last one."""
        index = node.slice
        assert isinstance(index, ast.Slice)
        for part in (index.step, index.upper, index.lower, node.value):
            if part is not None:
                last = self.last_position(part)
                if last is not None:
                    return last
        return self.position(node.value, "[")

    def last_position(self, node: ast.expr) -> Loc | None:
        """The last position the Go compiler sets while compiling ``node`` (None if it
        sets none): names, operators, brackets, dots and calls set it."""
        if isinstance(node, ast.Name):
            binding = self.module.resolution.bindings.get(id(node))
            return (
                None if binding is not None and binding.kind is Kind.UNIVERSAL else self.loc(node)
            )
        if isinstance(node, ast.Call):
            return self.position(node.func, "(")
        if isinstance(node, ast.Attribute):
            return self.position(node.value, ".")
        if isinstance(node, ast.Subscript):
            if isinstance(node.slice, ast.Slice):
                return self.slice_position(node)
            return self.position(node.value, "[")
        if isinstance(node, ast.BinOp):
            return self.position(node.left, _BINARY_SYMBOL[type(node.op)])
        if isinstance(node, ast.UnaryOp):
            return self.loc(node)
        if isinstance(node, ast.Compare):
            return self.last_position(node.comparators[0]) or self.last_position(node.left)
        if isinstance(node, ast.BoolOp | ast.List | ast.Tuple):
            parts = node.values if isinstance(node, ast.BoolOp) else node.elts
            for part in reversed(parts):
                found = self.last_position(part)
                if found is not None:
                    return found
            return None
        if isinstance(node, ast.IfExp):
            return (
                self.last_position(node.orelse)
                or self.last_position(node.body)
                or self.last_position(node.test)
            )
        if isinstance(node, ast.Dict) and node.keys:
            key = node.keys[-1]
            return self.position(key, ":") if key is not None else None
        if isinstance(node, ast.Lambda):
            return self.loc(node)
        return None

    def sequence_literal(self, elements: list[ast.expr], maker: str, is_list: bool) -> int:
        """A list or tuple literal: made first, then each element stored as it is
        computed, so a long literal keeps two values alive, not all of them."""
        if not elements and not is_list:
            return self.rt("tuple_with", ZERO)
        result = self.rt(maker, self.const(len(elements)))
        offset = 0 if is_list else L.TUPLE_ITEMS
        for index, element in enumerate(elements):
            value = self.expr(element)
            items = self.b.load(result, L.LIST_ITEMS) if is_list else result
            self.b.store(value, items, offset + 8 * index)
        return result

    def dict_literal(self, node: ast.Dict) -> int:
        result = self.rt("dict_new", self.const(len(node.keys)))
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            assert key_node is not None
            key = self.expr(key_node)
            value = self.expr(value_node)
            self.b.loc = self.position(key_node, ":")
            self.rt("dict_literal_set", result, key, value, result=False)
        return result

    def comprehension_loops(self, generators: list[ast.comprehension], body: object) -> None:
        """Nested loops of a comprehension, calling ``body()`` innermost."""
        if not generators:
            body()  # type: ignore[operator]
            return
        generator, rest = generators[0], generators[1:]
        iterable = self.expr(generator.iter)
        self.b.loc = Loc(*self.module.source.positions.before(generator.target, "for"))

        def inner() -> None:
            skip = self.b.new_block()
            for condition in generator.ifs:
                keep = self.b.new_block()
                self.condition(condition, keep, skip)
                self.b.set_block(keep)
            self.comprehension_loops(rest, body)
            if not self.b.terminated:
                self.b.jmp(skip)
            self.b.set_block(skip)
            self.b.jmp(self.loops[-1].head)  # type: ignore[arg-type]

        self.sequence_loop(iterable, lambda item: self.assign(generator.target, item), inner)

    def list_comprehension(self, node: ast.ListComp) -> int:
        result = self.rt("list_with", ZERO)

        def body() -> None:
            value = self.expr(node.elt)
            self.rt("list_append_unchecked", result, value, result=False)

        self.comprehension_loops(node.generators, body)
        return result

    def dict_comprehension(self, node: ast.DictComp) -> int:
        result = self.rt("dict_new", ZERO)

        def body() -> None:
            key = self.expr(node.key)
            value = self.expr(node.value)
            self.b.loc = self.position(node.key, ":")
            self.rt("dict_set", result, key, value, result=False)

        self.comprehension_loops(node.generators, body)
        return result

    # -- functions --------------------------------------------------------------------

    def make_function(self, node: ast.FunctionDef | ast.Lambda, name: str) -> int:
        """Compile a ``def`` or ``lambda`` (once) and make its function value here."""
        scope = self.module.resolution.functions[id(node)]
        fast, generic = self.module.function_names(node, scope)
        closure = bool(scope.free)
        if fast not in self.state.functions:
            function = Function(fast, 0, source=(self.module.filename, name))
            self.state.functions[fast] = function
            FunctionCompiler(self.module, scope, function, node).compile_function(node, closure)
            self.state.functions[generic] = self.generic_entry(node, fast, generic, closure)
        args = node.args
        defaults = [self.expr(d) for d in args.defaults]
        kw_defaults = [self.expr(d) if d is not None else ZERO for d in args.kw_defaults]
        all_defaults = defaults + kw_defaults
        # a keyword-only parameter without a default is mandatory: keep only from the first default on
        first = 0
        if not args.defaults:
            while first < len(kw_defaults) and args.kw_defaults[first] is None:
                first += 1
            all_defaults = kw_defaults[first:]
        function_value = self.rt(
            "alloc_object", self.const(L.TAG_FUNCTION), self.const(L.FUNC_SIZE)
        )
        self.b.store(self.b.li_ref(CodeRef(fast)), function_value, L.FUNC_ENTRY)
        self.b.store(self.b.li_ref(CodeRef(generic)), function_value, L.FUNC_GENERIC)
        descriptor = self.descriptor(node, name, len(all_defaults), closure)
        self.b.store(self.b.li_ref(DataRef(descriptor)), function_value, L.FUNC_DESCRIPTOR)
        if all_defaults:
            tuple_value = self.rt("tuple_with", self.const(len(all_defaults)))
            for index, value in enumerate(all_defaults):
                self.b.store(value, tuple_value, L.TUPLE_ITEMS + 8 * index)
            self.b.store(tuple_value, function_value, L.FUNC_DEFAULTS)
        if closure:
            cells = self.rt("tuple_with", self.const(len(scope.free)))
            for index, variable in enumerate(scope.free):
                if variable.function is self.scope:
                    cell = self.variable_register(variable)
                else:
                    cell = self.free_cells[self.scope.free.index(variable)]
                self.b.store(cell, cells, L.TUPLE_ITEMS + 8 * index)
            self.b.store(cells, function_value, L.FUNC_CELLS)
        return function_value

    def descriptor(
        self, node: ast.FunctionDef | ast.Lambda, name: str, ndefaults: int, closure: bool
    ) -> str:
        args = node.args
        ordinary = [a.arg for a in (*args.args, *args.kwonlyargs)]
        flags = (
            (L.DESC_HAS_VARARGS if args.vararg else 0)
            | (L.DESC_HAS_KWARGS if args.kwarg else 0)
            | (L.DESC_HAS_CLOSURE if closure else 0)
        )
        fields: list[int | str] = [
            L.TAG_BLOCK | L.FLAG_STATIC,
            self.state.data.string(name.encode()),
            len(ordinary),
            len(args.kwonlyargs),
            flags,
            ndefaults,
        ]
        fields += [self.state.data.string(p.encode()) for p in ordinary]
        return self.state.data.record(self.state.unique(f"desc:{name}"), tuple(fields))

    def generic_entry(
        self, node: ast.FunctionDef | ast.Lambda, fast: str, generic: str, closure: bool
    ) -> Function:
        """The entry a call through a value uses: (function, args tuple, kwargs dict)
        bound by the runtime's ``bind_arguments``, then a jump to the fast entry."""
        args = node.args
        count = (
            len(args.args)
            + len(args.kwonlyargs)
            + (1 if args.vararg else 0)
            + (1 if args.kwarg else 0)
        )
        if count + (1 if closure else 0) > MAX_ARGUMENTS:
            raise self.module.fail(
                node, f"a function may have at most {MAX_ARGUMENTS - 1} parameters"
            )
        name = node.name if isinstance(node, ast.FunctionDef) else "lambda"
        function = Function(generic, 3, source=(self.module.filename, name))
        b = Builder(function)
        fn, positional, keywords = b.params(3)
        b.loc = self.entry_loc(node)  # a call that does not bind fails in the callee
        slots = b.call("bind_arguments", [fn, positional, keywords])
        values = [b.load(slots, 8 * index) for index in range(count)]
        if closure:
            values.append(fn)
        b.tail_call(fast, values)
        return function

    def entry_loc(self, node: ast.FunctionDef | ast.Lambda) -> Loc:
        """Where Go places a callee that has not started: the position of the first
        instruction of its body, which is the def itself unless the body begins by
        reading a variable (a builtin's name is read without a position)."""
        at_def = Loc(node.lineno, node.col_offset + 1)
        scope = self.module.resolution.functions[id(node)]
        if any(variable.is_cell for variable in scope.variables):
            return at_def  # cells are made first
        body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
        for statement in body:
            if isinstance(statement, ast.Pass) or _is_docstring(statement):
                continue
            leaf = _first_evaluated(statement)
            if isinstance(leaf, ast.Name):
                binding = self.module.resolution.bindings.get(id(leaf))
                if binding is not None and binding.kind is not Kind.UNIVERSAL:
                    return Loc(leaf.lineno, leaf.col_offset + 1)
            elif isinstance(leaf, ast.FunctionDef | ast.Lambda):
                return Loc(leaf.lineno, leaf.col_offset + 1)
            break
        return at_def

    # -- calls ------------------------------------------------------------------------

    def call(self, node: ast.Call) -> int:
        func = node.func
        where = self.position(func, "(")
        if isinstance(func, ast.Name):
            binding = self.module.resolution.bindings[id(func)]
            if binding.kind is Kind.UNIVERSAL and binding.name in FUNCTIONS:
                if binding.name == "print" and not _has_star(node):
                    return self.print_call(node, where)
                if binding.name in ("getattr", "hasattr", "dir"):
                    self.state.method_tables = True
                if binding.name == "float":
                    self.state.uses_floats = True
                return self.builtin_call(FUNCTIONS[binding.name], node, where, receiver=-1)
            if binding.kind is Kind.PREDECLARED:
                builtin = HOST.get(binding.name) if self.module.key == FORGE_MODULE else None
                if builtin is None and self.state.testing:
                    builtin = TESTING.get(binding.name)
                if builtin is not None:
                    return self.builtin_call(builtin, node, where, receiver=-1)
            if (
                binding.kind is Kind.GLOBAL
                and binding.name in self.module.known_functions
                and not _has_star(node)
            ):
                target = self.module.known_functions[binding.name]
                return self.known_call(target, binding.name, node, where)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == MATH_MODULE
            and func.attr in MATH
            and self.module.resolution.bindings[id(func.value)].kind is Kind.UNIVERSAL
        ):  # math.NAME(...): the builtin bound when compiled, like any builtin's call
            self.state.uses_floats = True
            return self.builtin_call(MATH[func.attr], node, where, receiver=-1)
        if isinstance(func, ast.Attribute) and func.attr in METHODS and not _has_star(node):
            receiver = self.expr(func.value)
            return self.method_call(receiver, func.attr, node, where)
        callee = self.expr(func)
        if not node.keywords and len(node.args) <= 3 and not _has_star(node):
            # positional arguments in registers: a simple function is entered directly
            values = [self.expr(argument) for argument in node.args]
            self.b.loc = where
            return self.rt(f"call_value{len(values)}", *values, callee)
        positional, keywords = self.arguments_as_values(node)
        self.b.loc = where
        return self.rt("call_value", callee, positional, keywords)

    def ordered_arguments(self, node: ast.Call) -> list[tuple[str | None, ast.expr]]:
        """Arguments in source order: (keyword or None, expression)."""
        items: list[tuple[tuple[int, int], str | None, ast.expr]] = []
        for argument in node.args:
            items.append(((argument.lineno, argument.col_offset), None, argument))
        for keyword in node.keywords:
            items.append(((keyword.lineno, keyword.col_offset), keyword.arg or "**", keyword.value))
        items.sort(key=lambda item: item[0])
        return [(name, value) for _, name, value in items]

    def arguments_as_values(
        self, node: ast.Call, values: list[int] | None = None
    ) -> tuple[int, int]:
        """The call's arguments as a tuple and a dict (or 0), for the runtime: evaluated
        in source order, each stored as soon as it is computed (or taken from
        ``values``, already computed in that order)."""
        ordered = self.ordered_arguments(node)
        given = iter(values) if values is not None else None
        plain = sum(
            1
            for name, expression in ordered
            if name is None and not isinstance(expression, ast.Starred)
        )
        named = sum(1 for name, _ in ordered if name not in (None, "**"))
        positional = self.rt("tuple_with", self.const(plain))
        keywords = ZERO
        if named or any(name == "**" for name, _ in ordered):
            keywords = self.rt("dict_new", self.const(named))
        spread: list[tuple[str, int]] = []  # *args and **kwargs values, applied in order at the end
        index = 0
        for name, expression in ordered:
            if isinstance(expression, ast.Starred):
                spread.append(("*", self.expr(expression.value)))
            elif name == "**":
                spread.append(("**", self.expr(expression)))
            elif name is None:
                value = next(given) if given is not None else self.expr(expression)
                self.b.store(value, positional, L.TUPLE_ITEMS + 8 * index)
                index += 1
            else:
                value = next(given) if given is not None else self.expr(expression)
                self.rt("dict_set", keywords, self.string(name), value, result=False)
        self.b.loc = self.position(node.func, "(")
        for kind, value in spread:
            if kind == "*":
                positional = self.rt("concat_args", positional, value)
            else:
                self.rt("merge_kwargs", keywords, value, result=False)
        return positional, keywords

    def print_call(self, node: ast.Call, where: Loc) -> int:
        ordered = self.ordered_arguments(node)
        count = sum(1 for name, _ in ordered if name is None)
        # many arguments go through a tuple, filled as they are computed
        arguments = self.rt("tuple_with", self.const(count)) if count > 8 else -1
        separator = -1
        values: list[int] = []
        for name, expression in ordered:
            value = self.expr(expression)
            if name is None:
                if arguments >= 0:
                    self.b.store(value, arguments, L.TUPLE_ITEMS + 8 * len(values))
                    values.append(ZERO)
                else:
                    values.append(value)
            elif name == "sep":
                separator = value
            else:
                self.b.loc = where
                self.error(f'print: unexpected keyword argument "{name}"', "print")
                self.b.set_block(self.b.new_block())
        self.b.loc = where
        if arguments >= 0:
            self.rt("builtin_print", separator if separator >= 0 else ZERO, arguments, result=False)
            return self.none()
        if separator >= 0:
            separator = self.rt("print_separator", separator)
        buffer = self.rt("output_buffer")
        for index, value in enumerate(values):
            if index:
                if separator >= 0:
                    self.rt("buf_str", buffer, separator, result=False)
                else:
                    self.rt("buf_byte", buffer, self.const(32), result=False)
            self.rt("write_str", buffer, value, result=False)
        self.rt("print_end", buffer, result=False)
        return self.none()

    def bind_static(
        self,
        name: str,
        params: tuple[str, ...],
        required: int,
        keywords_allowed: frozenset[str] | None,
        varargs: bool,
        kwargs: bool,
        node: ast.Call,
        where: Loc,
        user: bool,
        ndefaults: int,
        nkwonly: int,
        exactly: bool = False,
        values: list[int] | None = None,
    ) -> tuple[list[int], list[int], list[tuple[str, int]]] | None:
        """Evaluate a call's arguments (in source order) and bind them to ``params``
        (positional parameters, then ``nkwonly`` keyword-only ones): returns the slots
        (-1 where nothing was given), the surplus positional values and the surplus
        keyword values; or ``None`` after emitting the run-time error the Go
        implementation reports for a call that cannot bind.  ``keywords_allowed`` is the
        set of parameters a builtin accepts by keyword (``None``: all, as for a
        Starlark function).  ``values``: the arguments already evaluated, in source order."""
        positional: list[int] = []
        named: list[tuple[str, int]] = []
        for number, (keyword, expression) in enumerate(self.ordered_arguments(node)):
            value = values[number] if values is not None else self.expr(expression)
            if keyword is None:
                positional.append(value)
            else:
                named.append((keyword, value))
        self.b.loc = where
        slots: list[int] = [-1] * len(params)
        limit = len(params) - nkwonly
        extra: list[int] = []
        if len(positional) > limit:
            if not varargs:
                message = self.too_many(
                    name, positional, named, limit, required, user, ndefaults, nkwonly, kwargs
                )
                if exactly:
                    message = f"{name}: got {len(positional)} arguments, want exactly {limit}"
                self.fail_call(message, name, user)
                return None
            extra = positional[limit:]
            positional = positional[:limit]
        for index, value in enumerate(positional):
            slots[index] = value
        surplus: list[tuple[str, int]] = []
        for keyword, value in named:
            accepted = keyword in params and (
                keywords_allowed is None
                or keyword in keywords_allowed
                or params.index(keyword) >= limit
            )
            if accepted:
                index = params.index(keyword)
                if slots[index] >= 0:
                    message = (
                        f'function {name} got multiple values for parameter "{keyword}"'
                        if user
                        else f'{name}: got multiple values for keyword argument "{keyword}"'
                    )
                    self.fail_call(message, name, user)
                    return None
                slots[index] = value
            elif kwargs:
                surplus.append((keyword, value))
            else:
                if user:
                    message = f'function {name} got an unexpected keyword argument "{keyword}"'
                elif keywords_allowed or nkwonly:
                    candidates = [
                        p
                        for i, p in enumerate(params)
                        if keywords_allowed is None or p in keywords_allowed or i >= limit
                    ]
                    hint = spelling.hint(keyword, candidates)
                    message = f'{name}: unexpected keyword argument "{keyword}"{hint}'

                else:
                    message = f"{name}: unexpected keyword arguments"
                self.fail_call(message, name, user)
                return None
        if user:
            first_default = len(params) - ndefaults
            missing = [params[i] for i in range(first_default) if slots[i] < 0]
            if missing:
                plural = "s" if len(missing) > 1 else ""
                self.fail_call(
                    f"function {name} missing {len(missing)} argument{plural} ({', '.join(missing)})",
                    name,
                    user,
                )
                return None
        else:
            for index in range(required):
                if slots[index] < 0:
                    if named or keywords_allowed:  # Go's UnpackArgs names the parameter
                        message = f"{name}: missing argument for {params[index]}"
                    else:
                        qualifier = (
                            "at least " if required < limit else ("exactly " if exactly else "")
                        )
                        message = (
                            f"{name}: got {len(positional)} arguments, want {qualifier}{required}"
                        )
                    self.fail_call(message, name, user)
                    return None
        return slots, extra, surplus

    @staticmethod
    def too_many(
        name: str,
        positional: list[int],
        named: list[tuple[str, int]],
        limit: int,
        required: int,
        user: bool,
        ndefaults: int,
        nkwonly: int,
        kwargs: bool,
    ) -> str:
        if user:
            if limit == 0 and not nkwonly and not kwargs:
                return (
                    f"function {name} accepts no arguments ({len(positional) + len(named)} given)"
                )
            qualifier = "at most " if ndefaults > nkwonly else ""
            plural = "" if limit == 1 else "s"
            return f"function {name} accepts {qualifier}{limit} positional argument{plural} ({len(positional)} given)"
        qualifier = "at most " if required < limit else ""
        return f"{name}: got {len(positional)} arguments, want {qualifier}{limit}"

    def fail_call(self, message: str, name: str, user: bool) -> None:
        if user and self.binding_target is not None:
            self.rt(self.arity_stub(self.binding_target), self.string(message), result=False)
            self.b.halt()
        else:
            self.error(message, "" if user else name)
        self.b.set_block(self.b.new_block())

    def arity_stub(self, target: ast.FunctionDef) -> str:
        """A function that raises its argument as an error from a frame of ``target`` that
        has not started: where the Go implementation reports arguments that do not bind."""
        scope = self.module.resolution.functions[id(target)]
        fast, _ = self.module.function_names(target, scope)
        name = fast + "$arguments"
        if name not in self.state.functions:
            stub = Function(name, 1, source=(self.module.filename, target.name))
            b = Builder(stub)
            (message,) = b.params(1)
            b.loc = self.entry_loc(target)
            b.call("error", [message, ZERO], result=False)
            b.halt()
            self.state.functions[name] = stub
        return name

    def builtin_call(
        self,
        builtin: Builtin,
        node: ast.Call,
        where: Loc,
        receiver: int,
        values: list[int] | None = None,
    ) -> int:
        if _has_star(node):
            callee = self.builtin_value(builtin, receiver if receiver >= 0 else ZERO)
            positional, keywords = self.arguments_as_values(node)
            self.b.loc = where
            return self.rt("call_value", callee, positional, keywords)
        bound = self.bind_static(
            builtin.name,
            builtin.params + builtin.kwonly,
            builtin.required,
            builtin.keywords,
            builtin.varargs,
            builtin.kwargs,
            node,
            where,
            user=False,
            ndefaults=0,
            nkwonly=len(builtin.kwonly),
            exactly=builtin.exactly,
            values=values,
        )
        if bound is None:
            return self.none()
        slots, extra, surplus = bound
        args = [slot if slot >= 0 else ZERO for slot in slots]
        if builtin.varargs:
            extra_tuple = self.rt("tuple_with", self.const(len(extra)))
            for index, value in enumerate(extra):
                self.b.store(value, extra_tuple, L.TUPLE_ITEMS + 8 * index)
            args.append(extra_tuple)
        if builtin.kwargs:
            keywords = ZERO
            if surplus:
                keywords = self.rt("dict_new", self.const(len(surplus)))
                for name, value in surplus:
                    self.rt("dict_set", keywords, self.string(name), value, result=False)
            args.append(keywords)
        if receiver >= 0:
            args.insert(0, receiver)
        self.b.loc = where
        return self.rt(builtin.impl, *args)

    def method_call(self, receiver: int, name: str, node: ast.Call, where: Loc) -> int:
        """``receiver.name(...)``: dispatched on the receiver's type here, so a method's
        runtime function always gets a receiver of its own type."""
        if any(_expands(argument) for _, argument in self.ordered_arguments(node)):
            return self.method_call_once(receiver, name, node, where)
        candidates = METHODS[name]
        result = self.b.reg()
        done = self.b.new_block()
        tag = self.tag_of(receiver)
        for tag_value, builtin in candidates.items():
            this, other = self.b.new_block(), self.b.new_block()
            self.b.br("EQ", tag, self.const(tag_value), this, other)
            self.b.set_block(this)
            value = self.builtin_call(builtin, node, where, receiver)
            self.b.mov(value, dst=result)
            self.b.jmp(done)
            self.b.set_block(other)
        # not a value with that method: a module's member (or Go's "has no .name" error)
        self.b.loc = self.position(node.func.value, ".")  # type: ignore[attr-defined]
        callee = self.rt("getattr_value", receiver, self.string(name))
        positional, keywords = self.arguments_as_values(node)
        self.b.loc = where
        self.b.mov(self.rt("call_value", callee, positional, keywords), dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    def method_call_once(self, receiver: int, name: str, node: ast.Call, where: Loc) -> int:
        """``method_call`` for arguments that would multiply: compiled once, not once per
        receiver type (nested calls would multiply the code).  The receiver's type is
        tested before the arguments are evaluated (a value without the method fails
        first, as in Go) and again after them, to pick the call."""
        candidates = METHODS[name]
        result = self.b.reg()
        done, arguments = self.b.new_block(), self.b.new_block()
        tag = self.rt("tag_of", receiver)
        callee = self.b.mov(ZERO)
        for tag_value in candidates:
            other = self.b.new_block()
            self.b.br("EQ", tag, self.const(tag_value), arguments, other)
            self.b.set_block(other)
        self.b.loc = self.position(node.func.value, ".")  # type: ignore[attr-defined]
        self.b.mov(self.rt("getattr_value", receiver, self.string(name)), dst=callee)
        self.b.jmp(arguments)
        self.b.set_block(arguments)
        values = [self.expr(argument) for _, argument in self.ordered_arguments(node)]
        for tag_value, builtin in candidates.items():
            this, other = self.b.new_block(), self.b.new_block()
            self.b.br("EQ", tag, self.const(tag_value), this, other)
            self.b.set_block(this)
            value = self.builtin_call(builtin, node, where, receiver, values)
            self.b.mov(value, dst=result)
            self.b.jmp(done)
            self.b.set_block(other)
        positional, keywords = self.arguments_as_values(node, values)
        self.b.loc = where
        self.b.mov(self.rt("call_value", callee, positional, keywords), dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    def known_call(self, target: ast.FunctionDef, name: str, node: ast.Call, where: Loc) -> int:
        """A call of a function defined once at top level: bound when compiled."""
        function_value = self.name(node.func)  # type: ignore[arg-type]
        scope = self.module.resolution.functions[id(target)]
        fast, _ = self.module.function_names(target, scope)
        args = target.args
        params = tuple(a.arg for a in (*args.args, *args.kwonlyargs))
        ndefaults = len(args.defaults) + len(args.kw_defaults) if args.defaults else 0
        if not args.defaults:
            first = 0
            while first < len(args.kw_defaults) and args.kw_defaults[first] is None:
                first += 1
            ndefaults = len(args.kw_defaults) - first
        self.binding_target = target
        bound = self.bind_static(
            name,
            params,
            len(params) - ndefaults,
            None,
            args.vararg is not None,
            args.kwarg is not None,
            node,
            where,
            user=True,
            ndefaults=ndefaults,
            nkwonly=len(args.kwonlyargs),
        )
        self.binding_target = None
        if bound is None:
            return self.none()
        slots, extra, surplus = bound
        values: list[int] = []
        first_default = len(params) - ndefaults
        defaults = -1
        for index, slot in enumerate(slots):
            if slot >= 0:
                values.append(slot)
                continue
            if defaults < 0:
                defaults = self.b.load(function_value, L.FUNC_DEFAULTS)
            default = self.b.load(defaults, L.TUPLE_ITEMS + 8 * (index - first_default))
            if index >= len(args.args):  # a keyword-only parameter may be mandatory
                ok, missing = self.b.new_block(), self.b.new_block()
                self.b.br("NZ", default, -1, ok, missing)
                self.b.set_block(missing)
                self.b.loc = where
                self.error(f"function {name} missing 1 argument ({params[index]})")
                self.b.set_block(ok)
            values.append(default)
        if args.vararg is not None:
            extra_tuple = self.rt("tuple_with", self.const(len(extra)))
            for index, value in enumerate(extra):
                self.b.store(value, extra_tuple, L.TUPLE_ITEMS + 8 * index)
            values.append(extra_tuple)
        if args.kwarg is not None:
            keywords = self.rt("dict_new", self.const(len(surplus)))
            for key, value in surplus:
                self.rt("dict_set", keywords, self.string(key), value, result=False)
            values.append(keywords)
        if len(values) > MAX_ARGUMENTS:
            raise self.module.fail(node, f"a call may pass at most {MAX_ARGUMENTS} arguments")
        self.b.loc = where
        return self.b.call(fast, values)


@dataclass
class _FloatTree:
    """An expression of ``+ - * / // %`` whose float path (``float_tree``) is sound: its
    leaves, in the order they are computed, are float or int literals (ints below
    2**53, exact as doubles), names whose reading cannot fail, list items ``x[i]`` of
    such names and literals, and ``computed`` parts (anything else, an operation on a
    ``range`` loop's counter too) that come before any leaf or operator that may fail.
    Every operator has an operand that is not made of int literals alone (``2 * 3``
    stays an int)."""

    leaves: list[ast.expr]
    computed: list[ast.expr]

    @classmethod
    def of(
        cls,
        node: ast.BinOp,
        pure_name: Callable[[ast.Name], bool],
        int_variable: Callable[[ast.expr], bool],
    ) -> _FloatTree | None:
        walker = _FloatTreeWalker(cls([], []), pure_name, int_variable)
        if not walker.walk(node) or node in walker.tree.computed:
            return None
        return walker.tree

    @staticmethod
    def literal(node: ast.expr) -> bool:
        """A float literal, or an int literal a double holds exactly."""
        if not isinstance(node, ast.Constant):
            return False
        value = node.value
        if isinstance(value, bool):
            return False
        return isinstance(value, float) or (isinstance(value, int) and abs(value) < 2**53)


class _FloatTreeWalker:
    """Finds a ``_FloatTree``'s leaves, in the order they are computed (a class rather
    than a closure calling itself, which would be a reference cycle)."""

    def __init__(
        self,
        tree: _FloatTree,
        pure_name: Callable[[ast.Name], bool],
        int_variable: Callable[[ast.expr], bool],
    ) -> None:
        self.tree = tree
        self.pure_name = pure_name
        self.int_variable = int_variable
        self.failing = False  # whether something that may fail comes before
        self.ints: dict[int, bool] = {}  # whether a part is made of int literals alone

    def walk(self, part: ast.expr) -> bool:
        """Add ``part``'s leaves; False if the tree is not sound."""
        tree, pure_name, ints = self.tree, self.pure_name, self.ints
        if (
            isinstance(part, ast.BinOp)
            and type(part.op) in _FLOAT_OPERATORS
            and not self.int_variable(part.left)
            and not self.int_variable(part.right)
        ):
            if not self.walk(part.left) or not self.walk(part.right):
                return False
            if ints.get(id(part.left)) and ints.get(id(part.right)):
                return False
            self.failing = True
            return True
        if _FloatTree.literal(part):
            tree.leaves.append(part)
            ints[id(part)] = isinstance(part, ast.Constant) and isinstance(part.value, int)
            return True
        if isinstance(part, ast.Name) and pure_name(part):
            tree.leaves.append(part)
            return True
        if (
            isinstance(part, ast.Subscript)
            and isinstance(part.value, ast.Name)
            and pure_name(part.value)
            and (
                (isinstance(part.slice, ast.Name) and pure_name(part.slice))
                or _constant_int(part.slice) is not None
            )
        ):
            tree.leaves.append(part)
            self.failing = True
            return True
        if self.failing:
            return False
        tree.leaves.append(part)
        tree.computed.append(part)
        return True


def _shows_floats(module: ast.Module) -> bool:
    """Whether a file has a float literal, ``/`` or ``/=``, or names ``float`` or
    ``math``: where its arithmetic is likely to meet floats."""
    for node in ast.walk(module):
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            return True
        if isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.Div):
            return True
        if isinstance(node, ast.Name) and node.id in ("float", "math"):
            return True
    return False


def _small_literal(node: ast.expr) -> int | None:
    """The value of an int literal (or its negation) that is a small int, else None."""
    value = _constant_int(node)
    if value is None or word_of_int(value) is None:
        return None
    return value


def _identity_literal(node: ast.expr) -> bool:
    """A literal whose value equals only values with the same word."""
    if _small_literal(node) is not None:
        return True
    return isinstance(node, ast.Constant) and any(node.value is v for v in (None, True, False))


def _constant_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def _expands(node: ast.expr) -> bool:
    """Whether ``node`` holds code that compiling it twice would multiply: a method call
    (its arguments compiled once per receiver type), a function or a comprehension."""
    return any(
        isinstance(inner, ast.Lambda | ast.ListComp | ast.DictComp)
        or (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute))
        for inner in ast.walk(node)
    )


def _has_star(node: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    )


def _is_load(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id == "load"
    )


__all__ = ["BlockRef", "FunctionCompiler", "ModuleCompiler", "ModuleInfo", "ProgramState"]


def _is_docstring(statement: ast.AST) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _first_evaluated(node: ast.AST) -> ast.AST | None:
    """The leaf whose code comes first when a statement or expression is compiled in
    Go's order (operands left to right, a call's callee first, a dict or comprehension
    after its empty container is made, which carries no position of its own)."""
    match node:
        case ast.Name() | ast.Lambda() | ast.FunctionDef():
            return node
        case ast.Expr(value=value) | ast.Return(value=value) | ast.Assign(value=value):
            return None if value is None else _first_evaluated(value)
        case ast.AugAssign(target=target):
            return _first_evaluated(target)
        case ast.If(test=test) | ast.While(test=test):
            return _first_evaluated(test)
        case ast.For(iter=iterable):
            return _first_evaluated(iterable)
        case ast.BinOp(left=first) | ast.Compare(left=first) | ast.UnaryOp(operand=first):
            return _first_evaluated(first)
        case ast.BoolOp(values=[first, *_]) | ast.IfExp(test=first):
            return _first_evaluated(first)
        case ast.Call(func=first) | ast.Attribute(value=first) | ast.Subscript(value=first):
            return _first_evaluated(first)
        case ast.List(elts=[first, *_]) | ast.Tuple(elts=[first, *_]):
            return _first_evaluated(first)
    return None
