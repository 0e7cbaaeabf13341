"""The runtime's own language: a small word-level dialect of Python, compiled to IR.

The Starlark runtime (allocation, integers, strings, lists, dicts, formatting,
errors) is written once, in the modules of :mod:`kforge.starlark.runtime`, in this
dialect: Python syntax that mypy checks, never executed by Python, with machine
meaning:

* every variable and parameter is one 64-bit word; ``+ - * // % & | ^ << >> ~``
  wrap modulo 2**64 and ``//``, ``%``, ``>>`` and the comparisons are *unsigned*
  (:func:`~kforge.starlark.runtime.intrinsics.slt` and friends compare signed);
* ``and``, ``or`` and ``not`` give 1 or 0; ``if``, ``while``, ``for i in range(a, b)``
  (and ``range(a, b, constant)``), ``break``, ``continue``, ``return``, ``pass``;
* a call is a call of another runtime function, or of an intrinsic of
  :mod:`~kforge.starlark.runtime.intrinsics` (memory, channels, registers);
* a name is a local, a module-level integer constant (e.g. from
  :mod:`kforge.starlark.layout`), a :class:`~kforge.starlark.runtime.intrinsics.Global`
  (a word in the data section: ``name.value``), or a function;
* a string literal is the address of a static Starlark ``str`` object with those
  bytes (UTF-8), a bytes literal that of a static ``bytes`` object, except in *cold*
  code (below);
* ``@noreturn`` marks a function that never returns (the error path); ``@cold`` one
  that only error paths call (it words a message);
* ``if FLOATS:`` and ``if FLOATS and X:`` guard what only a program that uses floats
  needs: a function with such a test is compiled twice, as ``NAME`` without the
  guarded statements (its ``else`` part only) and as ``NAME@floats`` with them (the
  linker takes the second in place of the first for a program with floats), so a
  program without floats runs the code it always ran and links no float code.

*Cold* code is what runs only on the way to an error: a ``@noreturn`` or ``@cold``
function's body, and the statements of a list that always go on to a call of a
function that never returns (declared ``@noreturn``, or whose own body always gets
to such a call), no ``return``, ``break`` or ``continue`` leaving the list before.  A string literal there is not laid out in the
data section (which counts against the memory quota): its bytes are immediates of a
function compiled for it (:data:`TEXT_PREFIX`), which makes the string on the heap
when the literal is reached; a literal passed straight to a ``@noreturn`` function is
made inside a noreturn wrapper of that call (:data:`RAISE_INFIX`), so the hot part of
the function calls nothing more than before.  A module-level constant (``NAME:
Final = text("...")``) is always static: tables, and the messages that must not need
the heap (``out of memory``).

Every runtime function is visible to every other by its name, whatever module
defines it (names are unique across the runtime): a module imports the functions
of other runtime modules under ``if TYPE_CHECKING:`` only, for the type checker,
since the runtime is one mutually recursive body of code and Python never runs it.

Errors in the dialect are reported as :class:`LowLevelError` with file and line:
they are bugs of the runtime, found when it is compiled.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from kforge.starlark import layout as L
from kforge.starlark.builder import Builder
from kforge.starlark.data import Declarations
from kforge.starlark.inline import inline_calls
from kforge.starlark.ir import Block, CodeRef, Cond, DataRef, Function, Insn
from kforge.starlark.regs import HP, LIM, ONE, SIGN, ZERO
from kforge.starlark.runtime.intrinsics import LazyTable, StaticText

_BINARY = {
    ast.Add: "ADD",
    ast.Sub: "SUB",
    ast.Mult: "MUL",
    ast.FloorDiv: "DIV",
    ast.Mod: "MOD",
    ast.BitAnd: "AND",
    ast.BitOr: "OR",
    ast.BitXor: "XOR",
    ast.LShift: "SHL",
    ast.RShift: "SHR",
}
_COMPARE: dict[type, Cond] = {
    ast.Eq: "EQ",
    ast.NotEq: "NE",
    ast.Lt: "LT",
    ast.LtE: "LE",
    ast.Gt: "GT",
    ast.GtE: "GE",
}
_SIGNED: dict[str, Cond] = {"slt": "SLT", "sle": "SLE", "sgt": "SGT", "sge": "SGE"}
_MASK = (1 << 64) - 1


def global_item(module: str, name: str) -> str:
    """The data item of the Global ``name`` of the runtime module ``module``."""
    return f"g:{module}.{name}"


class LowLevelError(Exception):
    """A construct the runtime dialect does not have (a bug in the runtime's source)."""

    def __init__(self, module: str, node: ast.AST, message: str) -> None:
        line = getattr(node, "lineno", 0)
        super().__init__(f"{module}:{line}: {message}")


@dataclass
class RuntimeLibrary:
    """Every runtime function, compiled to IR, and the static data they declare."""

    functions: dict[str, Function] = field(default_factory=dict)
    data: Declarations = field(default_factory=Declarations)
    #: Calls that catch errors (``catch_call``), by instruction id.
    catch_sites: set[int] = field(default_factory=set)
    #: The functions compiled a second time, as ``NAME@floats``, with their ``if FLOATS:``
    #: statements (see the module's docstring).
    float_variants: set[str] = field(default_factory=set)


#: The suffix of a function's variant for programs that use floats.
FLOAT_VARIANT: Final = "@floats"
#: The name prefix of the function that makes a cold string literal on the heap.
TEXT_PREFIX: Final = "text$"
#: Between a noreturn function's name and a hash: the wrapper that calls it with the
#: cold string literals of one call site made on the heap.
RAISE_INFIX: Final = "$raise#"
#: The name prefix of the function that makes a lazy table (``table(b"...")``).
TABLE_PREFIX: Final = "table$"


class ColdCode:
    """What cold code needs besides its own functions: the functions that make its
    string literals and the wrappers of its noreturn calls, and which functions never
    return (declared or found); also the functions that make lazy tables
    (:func:`~kforge.starlark.runtime.intrinsics.table`)."""

    def __init__(self, data: Declarations, declared_noreturn: set[str], noreturn: set[str]) -> None:
        self.data = data
        self.declared_noreturn = declared_noreturn
        self.noreturn = noreturn
        self.functions: dict[str, Function] = {}

    def text_function(self, payload: bytes, tag: int) -> str:
        """The function returning a new heap object of tag ``tag`` with ``payload``."""
        kind = "s" if tag == L.TAG_STRING else "b"
        name = f"{TEXT_PREFIX}{kind}#{hashlib.sha256(payload).hexdigest()[:24]}"
        if name not in self.functions:
            function = self.functions[name] = Function(name, 0)
            b = Builder(function)
            b.params(0)
            b.ret(make_string(b, payload, tag))
        return name

    def table_function(self, payload: bytes) -> str:
        """The function returning the bytes object with ``payload``, made on the heap
        by its first call (a word of the data section keeps it)."""
        name = f"{TABLE_PREFIX}{hashlib.sha256(payload).hexdigest()[:24]}"
        if name not in self.functions:
            function = self.functions[name] = Function(name, 0)
            b = Builder(function)
            b.params(0)
            kept = DataRef(self.data.word(f"g:{name}"))
            made = b.load(ZERO, ref=kept)
            ready, first = b.new_block(), b.new_block()
            b.br("NZ", made, -1, ready, first)
            b.set_block(ready)
            b.ret(made)
            b.set_block(first)
            made = make_string(b, payload, L.TAG_BYTES)
            b.store(made, ZERO, ref=kept)
            b.ret(made)
        return name

    def raise_wrapper(self, target: str, literals: dict[int, tuple[bytes, int]], arity: int) -> str:
        """A noreturn function calling ``target`` with ``arity`` arguments: those at the
        positions of ``literals`` made on the heap, the others its own parameters."""
        key = repr((target, sorted(literals.items()), arity)).encode()
        name = f"{target}{RAISE_INFIX}{hashlib.sha256(key).hexdigest()[:16]}"
        if name in self.functions:
            return name
        function = Function(name, arity - len(literals))
        function.noreturn = True
        b = Builder(function)
        params = iter(b.params(arity - len(literals)))
        args = [
            b.call(self.text_function(*literals[i]), []) if i in literals else next(params)
            for i in range(arity)
        ]
        b.call(target, args, result=False)
        b.fault(0)
        self.functions[name] = function
        return name


class _Loop:
    __slots__ = ("exit", "head")

    def __init__(self, head: Block, exit: Block) -> None:
        self.head = head
        self.exit = exit


class _FunctionCompiler:
    def __init__(
        self,
        module: ModuleType,
        node: ast.FunctionDef,
        data: Declarations,
        resolve_function: Callable[[str], str | None],
        catch_sites: set[int],
        globals_by_name: dict[str, Any],
        cold: ColdCode,
        floats: bool = False,
    ) -> None:
        self.floats = floats
        self.cold = cold
        #: Whether the statements being compiled run only on the way to an error.
        self.in_cold = _decorated(node, "noreturn") or _decorated(node, "cold")
        self.catch_sites = catch_sites
        self.globals_by_name = globals_by_name
        self.module = module
        self.name = node.name
        self.node = node
        self.data = data
        self.resolve_function = resolve_function
        name = node.name + FLOAT_VARIANT if floats else node.name
        self.function = Function(name, len(node.args.args))
        self.function.noreturn = _decorated(node, "noreturn")
        self.function.checked = _decorated(node, "checked")
        self.b = Builder(self.function)
        self.locals: dict[str, int] = {}
        self.loops: list[_Loop] = []

    def error(self, node: ast.AST, message: str) -> LowLevelError:
        return LowLevelError(self.module.__name__, node, f"in {self.name}: {message}")

    def compile(self) -> Function:
        args = self.node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs:
            raise self.error(self.node, "runtime functions take plain positional parameters")
        registers = self.b.params(len(args.args))
        for arg, register in zip(args.args, registers, strict=True):
            self.locals[arg.arg] = register
        self.statements(self.node.body)
        if not self.b.terminated:
            if self.function.noreturn:
                self.b.fault(0)
            else:
                self.b.ret(ZERO)
        return self.function

    # -- statements -----------------------------------------------------------------

    def statements(self, body: list[ast.stmt]) -> None:
        enclosing = self.in_cold
        cold = cold_start(body, self.cold.noreturn)
        for index, statement in enumerate(body):
            self.in_cold = enclosing or index >= cold
            self.statement(statement)
        self.in_cold = enclosing

    def statement(self, node: ast.stmt) -> None:
        self.b.loc = None
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise self.error(node, "one target per assignment")
            self.assign(node.targets[0], node.value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is None:
                raise self.error(node, "a declaration needs a value")
            self.assign(node.target, node.value)
        elif isinstance(node, ast.AugAssign):
            op = _BINARY.get(type(node.op))
            if op is None:
                raise self.error(node, "unsupported operator")
            target = node.target
            if isinstance(target, ast.Name):
                register = self.local(target, target.id)
                self.binary_into(op, register, node.value, register)
            elif isinstance(target, ast.Attribute):
                name = self.global_address(target)
                current = self.b.load(ZERO, ref=DataRef(name))
                self.binary_into(op, current, node.value, current)
                self.b.store(current, ZERO, ref=DataRef(name))
            else:
                raise self.error(node, "augmented assignment to a local or a Global only")
        elif isinstance(node, ast.If):
            self.if_statement(node)
        elif isinstance(node, ast.While):
            self.while_statement(node)
        elif isinstance(node, ast.For):
            self.for_statement(node)
        elif isinstance(node, ast.Break):
            if not self.loops:
                raise self.error(node, "break outside a loop")
            self.b.jmp(self.loops[-1].exit)
        elif isinstance(node, ast.Continue):
            if not self.loops:
                raise self.error(node, "continue outside a loop")
            self.b.jmp(self.loops[-1].head)
        elif isinstance(node, ast.Return):
            value = self.expr(node.value) if node.value is not None else ZERO
            self.b.ret(value)
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return  # a docstring
            if not isinstance(node.value, ast.Call):
                raise self.error(node, "an expression statement must be a call")
            self.call(node.value, want_result=False)
        elif isinstance(node, ast.Pass):
            pass
        else:
            raise self.error(node, f"{type(node).__name__} is not in the runtime dialect")

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            register = self.local(target, target.id)
            self.expr(value, into=register)
        elif isinstance(target, ast.Attribute):
            name = self.global_address(target)
            self.b.store(self.expr(value), ZERO, ref=DataRef(name))
        else:
            raise self.error(target, "assignment to a local or a Global only")

    def local(self, node: ast.AST, name: str) -> int:
        register = self.locals.get(name)
        if register is None:
            if self.lookup(name) is not None:
                raise self.error(node, f"{name} is a module-level name, not a local")
            register = self.b.reg()
            self.locals[name] = register
        return register

    def if_statement(self, node: ast.If) -> None:
        test = node.test
        if _is_floats_test(test):  # only the variant's statements are compiled
            self.statements(node.body if self.floats else node.orelse)
            return
        if (
            isinstance(test, ast.BoolOp)
            and isinstance(test.op, ast.And)
            and _is_floats_test(test.values[0])
        ):  # ``if FLOATS and X:`` is ``if X:`` in the variant, the else part elsewhere
            if not self.floats:
                self.statements(node.orelse)
                return
            rest = test.values[1:]
            test = rest[0] if len(rest) == 1 else ast.BoolOp(op=ast.And(), values=rest)
        then, otherwise, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.condition(test, then, otherwise)
        self.b.set_block(then)
        self.statements(node.body)
        if not self.b.terminated:
            self.b.jmp(done)
        self.b.set_block(otherwise)
        self.statements(node.orelse)
        if not self.b.terminated:
            self.b.jmp(done)
        self.b.set_block(done)

    def while_statement(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error(node, "while ... else is not in the dialect")
        # tested before the first turn and again after each (the test compiled twice):
        # a turn then ends in one conditional jump back, not a jump to a test and a
        # branch out of it
        test, body, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.condition(node.test, body, done)
        self.b.set_block(body)
        self.loops.append(_Loop(test, done))
        self.statements(node.body)
        self.loops.pop()
        if not self.b.terminated:
            self.b.jmp(test)
        self.b.set_block(test)
        self.condition(node.test, body, done)
        self.b.set_block(done)

    def for_statement(self, node: ast.For) -> None:
        call = node.iter
        if (
            not isinstance(node.target, ast.Name)
            or not isinstance(call, ast.Call)
            or not isinstance(call.func, ast.Name)
            or call.func.id != "range"
            or not 1 <= len(call.args) <= 3
            or node.orelse
        ):
            raise self.error(node, "only `for NAME in range(...)` loops")
        args = call.args
        step = 1
        if len(args) == 3:
            constant = self.constant(args[2])
            if constant is None or constant == 0:
                raise self.error(node, "range step must be a non-zero constant")
            step = constant
        start = self.expr(args[0]) if len(args) > 1 else ZERO
        stop = self.b.mov(self.expr(args[1] if len(args) > 1 else args[0]))
        variable = self.local(node.target, node.target.id)
        counter = self.b.mov(start)
        body, advance, done = (self.b.new_block() for _ in range(3))
        cond: Cond = "LT" if step > 0 else "GT"
        self.b.br(cond, counter, stop, body, done)  # tested first, then after each turn
        self.b.set_block(body)
        self.b.mov(counter, dst=variable)
        self.loops.append(_Loop(advance, done))
        self.statements(node.body)
        self.loops.pop()
        if not self.b.terminated:
            self.b.jmp(advance)
        self.b.set_block(advance)
        step_register = ONE if step == 1 else self.b.li(step)
        self.b.op("ADD", counter, step_register, dst=counter)
        self.b.br(cond, counter, stop, body, done)
        self.b.set_block(done)

    # -- conditions -----------------------------------------------------------------

    def condition(self, node: ast.expr, if_true: Block, if_false: Block) -> None:
        """Branch on ``node`` without making a 0/1 word where it can be avoided."""
        if isinstance(node, ast.BoolOp):
            last = len(node.values) - 1
            for position, value in enumerate(node.values):
                if position == last:
                    self.condition(value, if_true, if_false)
                    break
                following = self.b.new_block()
                if isinstance(node.op, ast.And):
                    self.condition(value, following, if_false)
                else:
                    self.condition(value, if_true, following)
                self.b.set_block(following)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.condition(node.operand, if_false, if_true)
            return
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.error(node, "one comparison at a time")
            cond = _COMPARE.get(type(node.ops[0]))
            if cond is None:
                raise self.error(node, "unsupported comparison")
            right_node = node.comparators[0]
            left = self.expr(node.left)
            right = ZERO if self.constant(right_node) == 0 else self.expr(right_node)
            self.b.br(cond, left, right, if_true, if_false)
            return
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _SIGNED
            and node.func.id not in self.locals
        ):
            if len(node.args) != 2:
                raise self.error(node, f"{node.func.id} takes two words")
            left = self.expr(node.args[0])
            right = self.expr(node.args[1])
            self.b.br(_SIGNED[node.func.id], left, right, if_true, if_false)
            return
        constant = self.constant(node)
        if constant is not None:
            self.b.jmp(if_true if constant else if_false)
            return
        self.b.br("NZ", self.expr(node), -1, if_true, if_false)

    # -- expressions ----------------------------------------------------------------

    def constant(self, node: ast.expr) -> int | None:
        """The value of ``node`` if it is a compile-time integer."""
        if _is_floats_test(node):
            raise self.error(node, "FLOATS is only tested by an if statement, first")
        if isinstance(node, ast.Constant) and isinstance(node.value, bool | int):
            return int(node.value) & _MASK
        if isinstance(node, ast.Name) and node.id not in self.locals:
            value = self.lookup(node.id)
            if isinstance(value, int) and not isinstance(value, StaticText):
                return value & _MASK
            return None
        if isinstance(node, ast.Attribute):
            value = self.attribute_value(node)
            if isinstance(value, int):
                return value & _MASK
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Invert):
            inner = self.constant(node.operand)
            if inner is None:
                return None
            return (-inner if isinstance(node.op, ast.USub) else ~inner) & _MASK
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.constant(node.left), self.constant(node.right)
            if left is None or right is None:
                return None
            return _fold(_BINARY[type(node.op)], left, right)
        return None

    def lookup(self, name: str) -> Any:
        return getattr(self.module, name, None)

    def attribute_value(self, node: ast.Attribute) -> Any:
        if isinstance(node.value, ast.Name) and node.value.id not in self.locals:
            owner = self.lookup(node.value.id)
            if isinstance(owner, ModuleType):
                return getattr(owner, node.attr, None)
        return None

    def global_address(self, node: ast.Attribute) -> str:
        from kforge.starlark.runtime.intrinsics import Global

        if node.attr == "value" and isinstance(node.value, ast.Name):
            owner = self.lookup(node.value.id)
            if owner is None:  # a Global of another runtime module
                owner = self.globals_by_name.get(node.value.id)
            if isinstance(owner, Global):
                return self.data.word(global_item(owner.module, node.value.id), owner.initial)
        raise self.error(node, "only a Global's .value may be read or assigned")

    def expr(self, node: ast.expr | None, into: int = -1) -> int:
        """Compute ``node`` into a register (``into`` if given) and return it."""
        assert node is not None
        constant = self.constant(node)
        if constant is not None:
            if into < 0:
                if constant == 0:
                    return ZERO
                if constant == 1:
                    return ONE
                if constant == L.SIGN_BIT:
                    return SIGN
            return self.b.li(constant, dst=into)
        if isinstance(node, ast.Name):
            register = self.locals.get(node.id)
            if register is None:
                value = self.lookup(node.id)
                if isinstance(value, LazyTable):  # a module-level table(b"...") constant
                    if not isinstance(value.literal, bytes):
                        raise self.error(node, "a table(...) holds a bytes literal")
                    made = self.b.call(self.cold.table_function(value.literal), [])
                    return made if into < 0 else self.b.mov(made, dst=into)
                if isinstance(value, StaticText):  # a module-level text("...") constant
                    return self.static_string(value.literal, into)
                if isinstance(value, str | bytes):  # a module-level string constant
                    return self.static_string(value, into)
                raise self.error(node, f"unknown name {node.id}")
            return register if into < 0 else self.b.mov(register, dst=into)
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            return self.static_string(node.value, into, literal=True)
        if isinstance(node, ast.Attribute):
            return self.b.load(ZERO, dst=into, ref=DataRef(self.global_address(node)))
        if isinstance(node, ast.BinOp):
            op = _BINARY.get(type(node.op))
            if op is None:
                raise self.error(node, "unsupported operator")
            return self.binary_into(op, self.expr(node.left), node.right, into)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return self.b.op("NEG", self.expr(node.operand), dst=into)
            if isinstance(node.op, ast.Invert):
                return self.b.op("NOT", self.expr(node.operand), dst=into)
            if isinstance(node.op, ast.Not):
                return self.boolean(node, into)
            raise self.error(node, "unsupported unary operator")
        if isinstance(node, ast.Compare | ast.BoolOp):
            return self.boolean(node, into)
        if isinstance(node, ast.IfExp):
            result = into if into >= 0 else self.b.reg()
            then, otherwise, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
            self.condition(node.test, then, otherwise)
            self.b.set_block(then)
            self.expr(node.body, into=result)
            self.b.jmp(done)
            self.b.set_block(otherwise)
            self.expr(node.orelse, into=result)
            self.b.jmp(done)
            self.b.set_block(done)
            return result
        if isinstance(node, ast.Call):
            result = self.call(node, want_result=True)
            return result if into < 0 else self.b.mov(result, dst=into)
        raise self.error(node, f"{type(node).__name__} is not in the runtime dialect")

    def static_string(self, value: str | bytes, into: int, literal: bool = False) -> int:
        """The address of a string (or bytes) object with ``value``: static, but for a
        ``literal`` in cold code, made on the heap by code (see the module's docstring)."""
        payload, tag = _payload(value)
        if literal and self.in_cold:
            made = self.b.call(self.cold.text_function(payload, tag), [])
            return made if into < 0 else self.b.mov(made, dst=into)
        return self.b.li_ref(DataRef(self.data.string(payload, tag)), dst=into)

    def literal_text(self, node: ast.expr) -> tuple[bytes, int] | None:
        """The payload and tag of a string literal or ``text("...")``, else None."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id != "text" or node.func.id in self.locals or len(node.args) != 1:
                return None
            node = node.args[0]
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            return _payload(node.value)
        return None

    def binary_into(self, op: str, left: int, right_node: ast.expr, into: int) -> int:
        right = self.expr(right_node)
        return self.b.op(op, left, right, dst=into)

    def boolean(self, node: ast.expr, into: int) -> int:
        result = into if into >= 0 else self.b.reg()
        yes, no, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.condition(node, yes, no)
        self.b.set_block(yes)
        self.b.mov(ONE, dst=result)
        self.b.jmp(done)
        self.b.set_block(no)
        self.b.mov(ZERO, dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    # -- calls ----------------------------------------------------------------------

    def call(self, node: ast.Call, want_result: bool) -> int:
        if node.keywords:
            raise self.error(node, "no keyword arguments in the runtime dialect")
        if not isinstance(node.func, ast.Name):
            raise self.error(node, "call a function by its name")
        name = node.func.id
        intrinsic = getattr(self, "intrinsic_" + name, None)
        if intrinsic is not None and name not in self.locals:
            result: int = intrinsic(node)
            return result
        if name in _SIGNED:
            return self.boolean(node, -1)
        target = self.resolve_function(name)
        if target is None:
            raise self.error(node, f"unknown function {name}")
        if self.in_cold and target in self.cold.declared_noreturn:
            literals = {
                i: text for i, arg in enumerate(node.args) if (text := self.literal_text(arg))
            }
            if literals:  # made in a wrapper: a noreturn call changes no register here
                wrapper = self.cold.raise_wrapper(target, literals, len(node.args))
                args = [self.expr(arg) for i, arg in enumerate(node.args) if i not in literals]
                return self.b.call(wrapper, args, result=want_result)
        args = [self.expr(arg) for arg in node.args]
        return self.b.call(target, args, result=want_result)

    def _args(self, node: ast.Call, count: int) -> list[int]:
        if len(node.args) != count:
            raise self.error(node, f"{node.func.id} takes {count} arguments")  # type: ignore[attr-defined]
        return [self.expr(arg) for arg in node.args]

    def _address(self, node: ast.expr) -> tuple[int, int]:
        """``base + constant`` as (register, offset), so loads and stores fold offsets."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            offset = self.constant(node.right)
            if offset is not None:
                if isinstance(node.op, ast.Sub):
                    offset = -offset & _MASK
                return self.expr(node.left), offset
        return self.expr(node), 0

    def intrinsic_load(self, node: ast.Call) -> int:
        if len(node.args) != 1:
            raise self.error(node, "load(address)")
        base, offset = self._address(node.args[0])
        return self.b.load(base, offset)

    def intrinsic_loadb(self, node: ast.Call) -> int:
        if len(node.args) != 1:
            raise self.error(node, "loadb(address)")
        base, offset = self._address(node.args[0])
        return self.b.load(base, offset, byte=True)

    def intrinsic_store(self, node: ast.Call) -> int:
        if len(node.args) != 2:
            raise self.error(node, "store(address, value)")
        base, offset = self._address(node.args[0])
        self.b.store(self.expr(node.args[1]), base, offset)
        return ZERO

    def intrinsic_storeb(self, node: ast.Call) -> int:
        if len(node.args) != 2:
            raise self.error(node, "storeb(address, value)")
        base, offset = self._address(node.args[0])
        self.b.store(self.expr(node.args[1]), base, offset, byte=True)
        return ZERO

    def _channel(self, node: ast.expr) -> int:
        channel = self.constant(node)
        if channel is None:
            raise self.error(node, "a channel must be a constant")
        return channel

    def intrinsic_send(self, node: ast.Call) -> int:
        if len(node.args) != 3:
            raise self.error(node, "send(channel, address, length)")
        channel = self._channel(node.args[0])
        address, length = self.expr(node.args[1]), self.expr(node.args[2])
        self.b.raw(Insn("SEND", a=address, b=length, imm=channel))
        return ZERO

    def intrinsic_recv(self, node: ast.Call) -> int:
        if len(node.args) != 3:
            raise self.error(node, "recv(channel, address, room)")
        channel = self._channel(node.args[0])
        address, room = self.expr(node.args[1]), self.expr(node.args[2])
        dst = self.b.reg()
        self.b.raw(Insn("RECV", dst=dst, a=address, b=room, imm=channel))
        return dst

    def intrinsic_poll(self, node: ast.Call) -> int:
        if len(node.args) != 1:
            raise self.error(node, "poll(channel)")
        dst = self.b.reg()
        self.b.raw(Insn("POLL", dst=dst, imm=self._channel(node.args[0])))
        return dst

    def intrinsic_budget(self, node: ast.Call) -> int:
        dst = self.b.reg()
        self.b.raw(Insn("BUDGET", dst=dst))
        return dst

    def intrinsic_tick(self, node: ast.Call) -> int:
        self.b.raw(Insn("TICK"))
        return ZERO

    def intrinsic_push(self, node: ast.Call) -> int:
        (value,) = self._args(node, 1)
        self.b.raw(Insn("PUSH", a=value))
        return ZERO

    def intrinsic_pop(self, node: ast.Call) -> int:
        dst = self.b.reg()
        self.b.raw(Insn("POP", dst=dst))
        return dst

    def intrinsic_halt(self, node: ast.Call) -> int:
        self.b.halt()
        return ZERO

    def intrinsic_fault(self, node: ast.Call) -> int:
        if len(node.args) != 1 or self.constant(node.args[0]) is None:
            raise self.error(node, "fault(constant code)")
        self.b.fault(self.constant(node.args[0]) or 0)
        return ZERO

    def intrinsic_heap_pointer(self, node: ast.Call) -> int:
        return self.b.mov(HP)

    def intrinsic_set_heap_pointer(self, node: ast.Call) -> int:
        (value,) = self._args(node, 1)
        self.b.mov(value, dst=HP)
        return ZERO

    def intrinsic_heap_limit(self, node: ast.Call) -> int:
        return self.b.mov(LIM)

    def intrinsic_set_heap_limit(self, node: ast.Call) -> int:
        (value,) = self._args(node, 1)
        self.b.mov(value, dst=LIM)
        return ZERO

    def intrinsic_sar(self, node: ast.Call) -> int:
        value, shift = self._args(node, 2)
        result = self.b.reg()
        negative, positive, done = self.b.new_block(), self.b.new_block(), self.b.new_block()
        self.b.br("LT", value, SIGN, positive, negative)
        self.b.set_block(positive)
        self.b.op("SHR", value, shift, dst=result)
        self.b.jmp(done)
        self.b.set_block(negative)
        inverted = self.b.op("NOT", value)
        self.b.op("NOT", self.b.op("SHR", inverted, shift), dst=result)
        self.b.jmp(done)
        self.b.set_block(done)
        return result

    def intrinsic_code_address(self, node: ast.Call) -> int:
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Name):
            raise self.error(node, "code_address(function)")
        target = self.resolve_function(node.args[0].id)
        if target is None:
            raise self.error(node, f"unknown function {node.args[0].id}")
        return self.b.li_ref(CodeRef(target))

    def intrinsic_data_address(self, node: ast.Call) -> int:
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
            raise self.error(node, "data_address('name')")
        return self.b.li_ref(DataRef(str(node.args[0].value)))

    def intrinsic_call_address(self, node: ast.Call) -> int:
        if not node.args:
            raise self.error(node, "call_address(address, args...)")
        address = self.expr(node.args[0])
        args = [self.expr(arg) for arg in node.args[1:]]
        return self.b.call_indirect(address, args)

    def intrinsic_catch_call(self, node: ast.Call) -> int:
        """Call the runtime function named first with the other arguments, at a site where
        the error path stops unwinding (see ``core.error``)."""
        if not node.args or not isinstance(node.args[0], ast.Name):
            raise self.error(node, "catch_call(function, args...)")
        self.function.checked = True  # the error path restores LIM from the catching frame
        target = self.resolve_function(node.args[0].id)
        if target is None:
            raise self.error(node, f"unknown function {node.args[0].id}")
        dst = self.b.call(target, [self.expr(arg) for arg in node.args[1:]])
        self.catch_sites.add(id(self.b.block.insns[-1]))
        return dst

    def intrinsic_text(self, node: ast.Call) -> int:
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
            raise self.error(node, "text takes one string literal")
        literal = node.args[0].value
        if not isinstance(literal, str | bytes):
            raise self.error(node, "text takes one string literal")
        return self.static_string(literal, -1, literal=True)

    def intrinsic_site_info(self, node: ast.Call) -> int:
        from kforge.starlark.emit import SITE_INFO

        return self.b.call(SITE_INFO, self._args(node, 1))

    def intrinsic_jump_address(self, node: ast.Call) -> int:
        if not node.args:
            raise self.error(node, "jump_address(address, args...)")
        address = self.expr(node.args[0])
        self.b.jump_indirect(address, tuple(self.expr(arg) for arg in node.args[1:]))
        return ZERO


def _fold(op: str, left: int, right: int) -> int | None:
    if op == "ADD":
        return (left + right) & _MASK
    if op == "SUB":
        return (left - right) & _MASK
    if op == "MUL":
        return (left * right) & _MASK
    if op == "DIV":
        return left // right if right else None
    if op == "MOD":
        return left % right if right else None
    if op == "AND":
        return left & right
    if op == "OR":
        return left | right
    if op == "XOR":
        return left ^ right
    if op == "SHL":
        return (left << (right & 63)) & _MASK
    if op == "SHR":
        return left >> (right & 63)
    return None


def make_string(b: Builder, payload: bytes, tag: int = L.TAG_STRING) -> int:
    """Code making a new heap object of tag ``tag`` (str or bytes) with ``payload``."""
    string = b.call("alloc", [b.li(L.STR_DATA + len(payload))])
    b.store(b.li(tag), string, L.HEADER)
    b.store(b.li(len(payload)), string, L.STR_LEN)
    padded = payload + bytes(-len(payload) % 8)
    for offset in range(0, len(padded), 8):
        word = int.from_bytes(padded[offset : offset + 8], "little")
        if word:  # alloc zeroed the rest
            b.store(b.li(word), string, L.STR_DATA + offset)
    return string


def _payload(value: str | bytes) -> tuple[bytes, int]:
    if isinstance(value, str):
        return value.encode(), L.TAG_STRING
    return value, L.TAG_BYTES


def _decorated(node: ast.FunctionDef, decorator: str) -> bool:
    return any(isinstance(d, ast.Name) and d.id == decorator for d in node.decorator_list)


def cold_start(body: list[ast.stmt], noreturn: set[str]) -> int:
    """Where the cold part of the statement list ``body`` starts (``len(body)`` when it
    has none): the statements that always go on to a call of a function of
    ``noreturn`` (or ``fault``) in the list, nothing leaving it before (a ``return``,
    or a ``break`` or ``continue`` of a loop around it), and what follows that call."""
    for end, statement in enumerate(body):
        if (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name)
            and (statement.value.func.id in noreturn or statement.value.func.id == "fault")
        ):
            start = end
            while start > 0 and not _leaves(body[start - 1], 0):
                start -= 1
            return start
    return len(body)


def _leaves(node: ast.stmt, loops: int) -> bool:
    """Whether ``node`` holds a ``return``, or a ``break`` or ``continue`` of a loop
    outside it (``loops`` is how many loops around it are inside the list)."""
    if isinstance(node, ast.Return):
        return True
    if isinstance(node, ast.Break | ast.Continue):
        return loops == 0
    inner = loops + 1 if isinstance(node, ast.While | ast.For) else loops
    return any(
        _leaves(child, inner) for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)
    )


def never_return(nodes: list[ast.FunctionDef]) -> set[str]:
    """The functions that never return: declared ``@noreturn``, or whose body always
    gets to a call of one that never returns."""
    found = {node.name for node in nodes if _decorated(node, "noreturn")}
    while True:
        more = {
            node.name
            for node in nodes
            if node.name not in found and cold_start(node.body, found) == 0
        }
        if not more:
            return found
        found |= more


def _is_floats_test(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "FLOATS"


def tests_floats(node: ast.FunctionDef) -> bool:
    """Whether a runtime function has ``if FLOATS`` statements (and so a variant)."""
    return any(isinstance(n, ast.Name) and n.id == "FLOATS" for n in ast.walk(node))


def runtime_functions(module: ModuleType) -> Iterator[ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node


def compile_modules(names: list[str]) -> RuntimeLibrary:
    """Compile every function of the runtime modules ``names`` into one library."""
    library = RuntimeLibrary()
    modules = [importlib.import_module(name) for name in names]
    owners: dict[str, str] = {}
    nodes: list[tuple[ModuleType, ast.FunctionDef]] = []
    for module in modules:
        for node in runtime_functions(module):
            if node.name in owners:
                raise LowLevelError(
                    module.__name__, node, f"{node.name} is also defined in {owners[node.name]}"
                )
            owners[node.name] = module.__name__
            nodes.append((module, node))

    from kforge.starlark.runtime.generated import EXTERNAL

    def resolve(name: str) -> str | None:
        return name if name in owners or name in EXTERNAL else None

    from kforge.starlark.runtime.intrinsics import Global

    globals_by_name: dict[str, Any] = {}
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, Global):
                if name in globals_by_name:
                    raise LowLevelError(
                        module.__name__, ast.Pass(), f"Global {name} is defined twice"
                    )
                globals_by_name[name] = value
    cold = ColdCode(
        library.data,
        {node.name for _, node in nodes if _decorated(node, "noreturn")},
        never_return([node for _, node in nodes]),
    )
    for module, node in nodes:
        library.functions[node.name] = _FunctionCompiler(
            module, node, library.data, resolve, library.catch_sites, globals_by_name, cold
        ).compile()
        if tests_floats(node):
            variant = _FunctionCompiler(
                module,
                node,
                library.data,
                resolve,
                library.catch_sites,
                globals_by_name,
                cold,
                floats=True,
            ).compile()
            library.functions[variant.name] = variant
            library.float_variants.add(node.name)
    library.functions.update(cold.functions)
    inline = {node.name for _, node in nodes if _decorated(node, "inline")}
    if inline & library.float_variants:
        raise LowLevelError("", ast.Pass(), "an @inline function may not test FLOATS")
    inline_calls(library.functions, inline, library.catch_sites)
    return library
