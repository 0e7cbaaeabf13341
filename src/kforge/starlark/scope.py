"""Name resolution: which variable every identifier of a Starlark file refers to.

The rules are the Go implementation's, with global reassignment and top-level
control flow allowed:

* a name bound anywhere in a function (parameter, assignment, ``for`` target,
  nested ``def``) is *local* to it, even where it is used before the binding
  (reading it then is a run-time error); names bound in a comprehension are local
  to the comprehension;
* a function's other names are looked up, once the whole file is read, in the
  enclosing functions (the variable becomes a *cell* there and *free* here), then
  among the file's globals and ``load`` bindings, then the predeclared names, then
  the universe of builtins;
* a name used at top level must already be bound at that point (or be predeclared
  or universal); otherwise it is a compile error, ``undefined: NAME``.

The result maps each :class:`ast.Name` (by ``id``) to a :class:`Binding`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from enum import Enum

from kforge.starlark import spelling
from kforge.starlark.errors import StarlarkCompileError


class Kind(Enum):
    LOCAL = "local"  # a register of the current function (or a cell it owns)
    FREE = "free"  # a cell captured from an enclosing function
    GLOBAL = "global"  # a global of this file
    LOAD = "load"  # a name bound by load() in this file
    PREDECLARED = "predeclared"  # the host's names (forge; testing helpers)
    UNIVERSAL = "universal"  # a builtin


@dataclass(eq=False)
class Variable:
    """A local variable (or parameter) of one function."""

    name: str
    function: FunctionScope
    is_parameter: bool = False
    is_cell: bool = False


@dataclass(frozen=True)
class Binding:
    kind: Kind
    name: str
    variable: Variable | None = None  # LOCAL and FREE
    free_index: int = -1  # FREE: position in the function's captured cells


@dataclass(eq=False)
class FunctionScope:
    """A ``def``, a ``lambda`` or the file's top level."""

    node: ast.AST
    name: str
    parent: FunctionScope | None
    variables: list[Variable] = field(default_factory=list)
    #: Captured variables of enclosing functions, in the order of the closure tuple.
    free: list[Variable] = field(default_factory=list)
    children: list[FunctionScope] = field(default_factory=list)

    def capture(self, variable: Variable) -> int:
        """The index of ``variable`` in this function's closure, adding it (and to every
        function between here and its owner) if needed."""
        for index, captured in enumerate(self.free):
            if captured is variable:
                return index
        if self.parent is not None and self.parent is not variable.function:
            self.parent.capture(variable)
        self.free.append(variable)
        return len(self.free) - 1


@dataclass
class _Block:
    """A set of bindings: a function's body or a comprehension within it."""

    function: FunctionScope
    parent: _Block | None
    names: dict[str, Variable] = field(default_factory=dict)


@dataclass
class Resolution:
    bindings: dict[int, Binding]
    module: FunctionScope
    #: Scopes of every def and lambda, by node id.
    functions: dict[int, FunctionScope]
    #: Global names in the order first bound.
    globals: list[str]
    #: Names bound by load(), file-local.
    loads: list[str]

    def release(self) -> None:
        """Break the scopes' reference cycles (a scope and its children, a scope and its
        variables) once the file is lowered, so that reference counting frees the scopes
        and the syntax tree they hold at once: the compiler pauses the cycle collector,
        and a tree left to it costs a collection of tens of thousands of objects.  The
        bindings go too: the lowering's own cycles may still reach the resolution."""
        for scope in (self.module, *self.functions.values()):
            scope.parent = None
            scope.children.clear()
            scope.variables.clear()
            scope.free.clear()
        self.bindings.clear()
        self.functions.clear()


class Resolver:
    def __init__(self, filename: str, predeclared: set[str], universal: set[str]) -> None:
        self.filename = filename
        self.predeclared = predeclared
        self.universal = universal
        self.bindings: dict[int, Binding] = {}
        self.globals: dict[str, None] = {}
        self.loads: dict[str, None] = {}
        self.functions: dict[int, FunctionScope] = {}
        self.deferred: list[tuple[ast.Name, _Block]] = []
        self.loops = 0

    def fail(self, node: ast.AST, message: str) -> StarlarkCompileError:
        return StarlarkCompileError(
            self.filename, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, message
        )

    # -- entry ------------------------------------------------------------------------

    def resolve(self, module: ast.Module) -> Resolution:
        top = FunctionScope(module, "<toplevel>", None)
        self.module_scope = top
        block = _Block(top, None)
        for statement in module.body:
            self.statement(statement, block)
        for name, at in self.deferred:
            self.bindings[id(name)] = self.lookup(name, at)
        return Resolution(self.bindings, top, self.functions, list(self.globals), list(self.loads))

    # -- statements -------------------------------------------------------------------

    def statement(self, node: ast.stmt, block: _Block) -> None:
        if isinstance(node, ast.Expr):
            call = node.value
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "load"
                and block.parent is None
                and block.function.parent is None
            ):
                self.load(call)
                return
            self.expr(node.value, block)
        elif isinstance(node, ast.Assign):
            self.expr(node.value, block)
            self.assign(node.targets[0], block)
        elif isinstance(node, ast.AugAssign):
            # ``x += y`` binds x before reading it: at top level, an x bound nowhere
            # else is a global read before assignment (a run-time error), not undefined
            self.expr(node.value, block)

            self.assign(node.target, block)
        elif isinstance(node, ast.If):
            self.expr(node.test, block)
            for statement in (*node.body, *node.orelse):
                self.statement(statement, block)
        elif isinstance(node, ast.For):
            self.expr(node.iter, block)
            self.assign(node.target, block)
            self.loops += 1
            for statement in node.body:
                self.statement(statement, block)
            self.loops -= 1
        elif isinstance(node, ast.While):
            self.expr(node.test, block)
            self.loops += 1
            for statement in node.body:
                self.statement(statement, block)
            self.loops -= 1
        elif isinstance(node, ast.FunctionDef):
            for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d)):
                self.expr(default, block)
            self.bind(node, node.name, block)
            if block.parent is None and block.function.parent is None:
                kind = Kind.LOAD if node.name in self.loads else Kind.GLOBAL
                self.bindings[id(node)] = Binding(kind, node.name)
            else:
                self.bindings[id(node)] = Binding(Kind.LOCAL, node.name, block.names[node.name])
            self.function(node, node.name, block)
        elif isinstance(node, ast.Return):
            if block.function.parent is None:
                raise self.fail(node, "return statement not within a function")
            if node.value is not None:
                self.expr(node.value, block)
        elif isinstance(node, ast.Break | ast.Continue):
            if self.loops == 0:
                word = "break" if isinstance(node, ast.Break) else "continue"
                raise self.fail(node, f"{word} not in a loop")
        elif isinstance(node, ast.Pass):
            pass
        else:  # the syntax checker refused everything else
            raise self.fail(node, f"unexpected statement {type(node).__name__}")

    def load(self, call: ast.Call) -> None:
        names: list[tuple[ast.AST, str, str]] = []
        for argument in call.args[1:]:
            assert isinstance(argument, ast.Constant)
            names.append((argument, str(argument.value), str(argument.value)))
        for keyword in call.keywords:
            assert isinstance(keyword.value, ast.Constant) and keyword.arg is not None
            names.append((keyword, keyword.arg, str(keyword.value.value)))
        for node, local, exported in names:
            if not exported:
                raise self.fail(node, "load: empty identifier")
            if exported.startswith("_"):
                raise self.fail(
                    node, f"load: names with leading underscores are not exported: {exported}"
                )
            if not local.isidentifier():
                raise self.fail(node, f"load: {local!r} is not a valid identifier")
            self.loads[local] = None

    def assign(self, target: ast.expr, block: _Block) -> None:
        if isinstance(target, ast.Name):
            self.bind(target, target.id, block)
            self.use(target, block)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.assign(element, block)
        elif isinstance(target, ast.Subscript):
            self.expr(target.value, block)
            self.expr(target.slice, block)
        elif isinstance(target, ast.Attribute):
            self.expr(target.value, block)
        else:
            raise self.fail(target, "can't assign to this expression")

    def bind(self, node: ast.AST, name: str, block: _Block) -> None:
        if block.parent is None and block.function.parent is None:
            if name not in self.loads:
                self.globals.setdefault(name, None)
            return
        if name not in block.names:
            variable = Variable(name, block.function)
            block.names[name] = variable
            block.function.variables.append(variable)

    def function(self, node: ast.FunctionDef | ast.Lambda, name: str, outer: _Block) -> None:
        scope = FunctionScope(node, name, outer.function)
        outer.function.children.append(scope)
        self.functions[id(node)] = scope
        block = _Block(scope, outer)
        args = node.args
        seen: set[str] = set()
        for arg in (*args.args, args.vararg, *args.kwonlyargs, args.kwarg):
            if arg is None:
                continue
            if arg.arg in seen:
                raise self.fail(arg, f"duplicate parameter: {arg.arg}")
            seen.add(arg.arg)
            variable = Variable(arg.arg, scope, is_parameter=True)
            block.names[arg.arg] = variable
            scope.variables.append(variable)
        if isinstance(node, ast.Lambda):
            self.expr(node.body, block)
        else:
            outer_loops, self.loops = self.loops, 0
            for statement in node.body:
                self.statement(statement, block)
            self.loops = outer_loops

    # -- expressions ------------------------------------------------------------------

    def expr(self, node: ast.expr, block: _Block) -> None:
        if isinstance(node, ast.Name):
            self.use(node, block)
        elif isinstance(node, ast.Constant):
            return  # a leaf, and the most common after names
        elif isinstance(node, ast.Lambda):
            for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d)):
                self.expr(default, block)
            self.function(node, "lambda", block)
        elif isinstance(node, ast.ListComp | ast.DictComp):
            self.comprehension(node, block)
        elif isinstance(node, ast.Call):
            self.expr(node.func, block)
            self.check_call(node)
            for argument in node.args:
                self.expr(argument.value if isinstance(argument, ast.Starred) else argument, block)
            for keyword in node.keywords:
                self.expr(keyword.value, block)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, block)
                elif isinstance(child, ast.keyword):
                    self.expr(child.value, block)

    def check_call(self, node: ast.Call) -> None:
        """The Go implementation's rules on the order of arguments (Python's tree keeps
        positional and keyword arguments apart, so the order comes from positions)."""
        if not node.keywords and not any(type(argument) is ast.Starred for argument in node.args):
            return  # positional arguments alone: in any order
        items: list[tuple[tuple[int, int], str, ast.AST]] = []
        for argument in node.args:
            kind = "*" if isinstance(argument, ast.Starred) else "positional"
            items.append(((argument.lineno, argument.col_offset), kind, argument))
        for keyword in node.keywords:
            kind = "**" if keyword.arg is None else "named"
            items.append(((keyword.lineno, keyword.col_offset), kind, keyword))
        items.sort(key=lambda item: item[0])
        seen_varargs = seen_kwargs = False
        names: set[str] = set()
        for _, kind, item in items:
            if kind == "**":
                if seen_kwargs:
                    raise self.fail(item, "multiple **kwargs not allowed")
                seen_kwargs = True
            elif kind == "*":
                if seen_kwargs:
                    raise self.fail(item, "*args may not follow **kwargs")
                if seen_varargs:
                    raise self.fail(item, "multiple *args not allowed")
                seen_varargs = True
            elif kind == "named":
                if seen_kwargs:
                    raise self.fail(item, "keyword argument may not follow **kwargs")
                if seen_varargs:
                    raise self.fail(item, "keyword argument may not follow *args")
                assert isinstance(item, ast.keyword) and item.arg is not None
                if item.arg in names:
                    raise self.fail(item, f'keyword argument "{item.arg}" is repeated')
                names.add(item.arg)
            else:
                if seen_varargs:
                    raise self.fail(item, "positional argument may not follow *args")
                if seen_kwargs:
                    raise self.fail(item, "positional argument may not follow **kwargs")
                if names:
                    raise self.fail(item, "positional argument may not follow named")

    def comprehension(self, node: ast.ListComp | ast.DictComp, block: _Block) -> None:
        generators = node.generators
        self.expr(generators[0].iter, block)
        inner = _Block(block.function, block)
        self.assign_local(generators[0].target, inner)
        for condition in generators[0].ifs:
            self.expr(condition, inner)
        for generator in generators[1:]:
            self.assign_local(generator.target, inner)
            self.expr(generator.iter, inner)
            for condition in generator.ifs:
                self.expr(condition, inner)
        if isinstance(node, ast.DictComp):
            self.expr(node.key, inner)
            self.expr(node.value, inner)
        else:
            self.expr(node.elt, inner)

    def assign_local(self, target: ast.expr, block: _Block) -> None:
        """Bind a comprehension's loop variables in its own block."""
        if isinstance(target, ast.Name):
            if target.id not in block.names:
                variable = Variable(target.id, block.function)
                block.names[target.id] = variable
                block.function.variables.append(variable)
            self.use(target, block)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.assign_local(element, block)
        else:
            self.assign(target, block)

    # -- uses -------------------------------------------------------------------------

    def use(self, node: ast.Name, block: _Block) -> None:
        if block.parent is None and block.function.parent is None:
            self.bindings[id(node)] = self.toplevel(node)
        else:
            self.deferred.append((node, block))

    def toplevel(self, node: ast.Name) -> Binding:
        name = node.id
        if name in self.loads:
            return Binding(Kind.LOAD, name)
        if name in self.globals:
            return Binding(Kind.GLOBAL, name)
        if name in self.predeclared:
            return Binding(Kind.PREDECLARED, name)
        if name in self.universal:
            return Binding(Kind.UNIVERSAL, name)
        raise self.undefined(node, None)

    def lookup(self, node: ast.Name, block: _Block) -> Binding:
        name = node.id
        at: _Block | None = block
        while at is not None:
            variable = at.names.get(name)
            if variable is not None:
                if variable.function is block.function:
                    return Binding(Kind.LOCAL, name, variable)
                variable.is_cell = True
                return Binding(Kind.FREE, name, variable, block.function.capture(variable))
            at = at.parent
        return self.toplevel_late(node, block)

    def toplevel_late(self, node: ast.Name, block: _Block) -> Binding:
        """A function's use of a name that is not local: any global of the file counts."""
        name = node.id
        if name in self.loads:
            return Binding(Kind.LOAD, name)
        if name in self.globals:
            return Binding(Kind.GLOBAL, name)
        if name in self.predeclared:
            return Binding(Kind.PREDECLARED, name)
        if name in self.universal:
            return Binding(Kind.UNIVERSAL, name)
        raise self.undefined(node, block)

    def undefined(self, node: ast.Name, block: _Block | None) -> StarlarkCompileError:
        """``undefined: NAME``, with the nearest local or global name as a hint."""
        names = set(self.globals) | set(self.loads)
        at = block
        while at is not None:
            names.update(at.names)
            at = at.parent
        return self.fail(node, f"undefined: {node.id}{spelling.hint(node.id, sorted(names))}")


def resolve(
    module: ast.Module, filename: str, predeclared: set[str], universal: set[str]
) -> Resolution:
    return Resolver(filename, predeclared, universal).resolve(module)
