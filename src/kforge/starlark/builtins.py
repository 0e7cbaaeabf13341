"""The builtins and methods of Starlark: their signatures and their runtime functions.

One table for everything the compiler needs to know about a builtin: how a call's
arguments bind to its parameters (the Go implementation's rules and error
messages, so a call the compiler can bind is bound when compiled, and one it cannot
fails when run, with the same message), and which runtime function implements it.

A runtime function receives the bound parameters in order (``0``, no value, for an
optional parameter that was not given), then its keyword-only parameters, then the
surplus positional arguments as a tuple if the builtin takes ``*args``, then the
keyword arguments as a dict if it takes ``**kwargs``; a method receives its receiver
first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kforge.starlark import layout as L


@dataclass(frozen=True)
class Builtin:
    """A builtin function or method."""

    name: str
    impl: str
    params: tuple[str, ...] = ()
    required: int = 0
    varargs: bool = False
    kwargs: bool = False
    #: Keyword-only parameters (after ``*args``): passed after ``params``.
    kwonly: tuple[str, ...] = ()
    #: Parameters that may also be given by keyword (Go's UnpackArgs); the others are
    #: positional only (UnpackPositionalArgs), the rule of most builtins.
    keywords: frozenset[str] = frozenset()
    #: For a method: the tag of its receiver's type.
    receiver: int = 0
    #: How Go words a wrong number of arguments: "want N" or "want exactly N".
    exactly: bool = False

    @property
    def is_method(self) -> bool:
        return self.receiver != 0


def _f(name: str, params: str = "", required: int = 0, **options: object) -> Builtin:
    names = tuple(params.split()) if params else ()
    return Builtin(name, f"builtin_{name}", names, required, **options)  # type: ignore[arg-type]


#: The universe: builtin functions by name.
FUNCTIONS: Final[dict[str, Builtin]] = {
    b.name: b
    for b in (
        _f("abs", "x", 1),
        _f("any", "x", 1),
        _f("all", "x", 1),
        _f("bool", "x", 0),
        _f("bytes", "x", 1, exactly=True),
        _f("chr", "i", 1),
        _f("dict", "pairs", 0, kwargs=True),
        _f("dir", "x", 1),
        _f("enumerate", "x start", 1),
        _f("fail", "", 0, varargs=True, kwonly=("sep",)),
        _f("getattr", "x name default", 2),
        _f("hasattr", "x name", 2),
        _f("hash", "x", 1),
        _f("int", "x base", 1, keywords=frozenset({"x", "base"})),
        _f("len", "x", 1),
        _f("list", "x", 0),
        _f("max", "", 0, varargs=True, kwonly=("key",)),
        _f("min", "", 0, varargs=True, kwonly=("key",)),
        _f("ord", "s", 1),
        _f("print", "", 0, varargs=True, kwonly=("sep",)),
        _f("range", "start stop step", 1),
        _f("repr", "x", 1),
        _f("reversed", "x", 1),
        _f("sorted", "iterable key reverse", 1, keywords=frozenset({"iterable", "key", "reverse"})),
        _f("str", "x", 1, exactly=True),
        _f("tuple", "x", 0),
        _f("type", "x", 1, exactly=True),
        _f("zip", "", 0, varargs=True),
        # Go's float has its own argument messages: it takes them all and checks
        _f("float", "", 0, varargs=True, kwargs=True),
    )
}


def _m(
    receiver: int, type_name: str, name: str, params: str = "", required: int = 0, **options: object
) -> Builtin:
    names = tuple(params.split()) if params else ()
    return Builtin(name, f"{type_name}_{name}", names, required, receiver=receiver, **options)  # type: ignore[arg-type]


_S, _B, _LI, _D = L.TAG_STRING, L.TAG_BYTES, L.TAG_LIST, L.TAG_DICT

#: Methods by name, then by receiver tag.
METHOD_LIST: Final[tuple[Builtin, ...]] = (
    _m(_D, "dict", "clear"),
    _m(_D, "dict", "get", "key default", 1),
    _m(_D, "dict", "items"),
    _m(_D, "dict", "keys"),
    _m(_D, "dict", "pop", "key default", 1),
    _m(_D, "dict", "popitem"),
    _m(_D, "dict", "setdefault", "key default", 1),
    _m(_D, "dict", "update", "pairs", 0, kwargs=True),
    _m(_D, "dict", "values"),
    _m(_LI, "list", "append", "x", 1),
    _m(_LI, "list", "clear"),
    _m(_LI, "list", "extend", "x", 1),
    _m(_LI, "list", "index", "x start end", 1),
    _m(_LI, "list", "insert", "index x", 2),
    _m(_LI, "list", "pop", "index", 0),
    _m(_LI, "list", "remove", "x", 1),
    _m(_B, "bytes", "elems"),
    _m(_S, "string", "capitalize"),
    _m(_S, "string", "codepoint_ords"),
    _m(_S, "string", "codepoints"),
    _m(_S, "string", "count", "sub start end", 1),
    _m(_S, "string", "elem_ords"),
    _m(_S, "string", "elems"),
    _m(_S, "string", "endswith", "suffix start end", 1),
    _m(_S, "string", "find", "sub start end", 1),
    _m(_S, "string", "format", "", 0, varargs=True, kwargs=True),
    _m(_S, "string", "index", "sub start end", 1),
    _m(_S, "string", "isalnum"),
    _m(_S, "string", "isalpha"),
    _m(_S, "string", "isdigit"),
    _m(_S, "string", "islower"),
    _m(_S, "string", "isspace"),
    _m(_S, "string", "istitle"),
    _m(_S, "string", "isupper"),
    _m(_S, "string", "join", "iterable", 1),
    _m(_S, "string", "lower"),
    _m(_S, "string", "lstrip", "chars", 0),
    _m(_S, "string", "partition", "sep", 1),
    _m(_S, "string", "removeprefix", "prefix", 1),
    _m(_S, "string", "removesuffix", "suffix", 1),
    _m(_S, "string", "replace", "old new count", 2),
    _m(_S, "string", "rfind", "sub start end", 1),
    _m(_S, "string", "rindex", "sub start end", 1),
    _m(_S, "string", "rpartition", "sep", 1),
    _m(_S, "string", "rsplit", "sep maxsplit", 0),
    _m(_S, "string", "rstrip", "chars", 0),
    _m(_S, "string", "split", "sep maxsplit", 0),
    _m(_S, "string", "splitlines", "keepends", 0),
    _m(_S, "string", "startswith", "prefix start end", 1),
    _m(_S, "string", "strip", "chars", 0),
    _m(_S, "string", "title"),
    _m(_S, "string", "upper"),
)

METHODS: Final[dict[str, dict[int, Builtin]]] = {}
for _method in METHOD_LIST:
    METHODS.setdefault(_method.name, {})[_method.receiver] = _method


def _math(name: str, params: str, required: int) -> Builtin:
    return Builtin(name, f"math_{name}", tuple(params.split()), required)


#: The members of the ``math`` module (Go's ``go.starlark.net/lib/math``) that are
#: functions; it also has ``e`` and ``pi``.
MATH: Final[dict[str, Builtin]] = {
    b.name: b
    for b in (
        _math("ceil", "x", 1),
        _math("copysign", "x y", 2),
        _math("fabs", "x", 1),
        _math("floor", "x", 1),
        _math("mod", "x y", 2),
        _math("pow", "x y", 2),
        _math("remainder", "x y", 2),
        _math("round", "x", 1),
        _math("exp", "x", 1),
        _math("sqrt", "x", 1),
        _math("acos", "x", 1),
        _math("asin", "x", 1),
        _math("atan", "x", 1),
        _math("atan2", "y x", 2),
        _math("cos", "x", 1),
        _math("hypot", "x y", 2),
        _math("sin", "x", 1),
        _math("tan", "x", 1),
        _math("degrees", "x", 1),
        _math("radians", "x", 1),
        _math("acosh", "x", 1),
        _math("asinh", "x", 1),
        _math("atanh", "x", 1),
        _math("cosh", "x", 1),
        _math("sinh", "x", 1),
        _math("tanh", "x", 1),
        _math("log", "x base", 1),
        _math("gamma", "x", 1),
    )
}
#: The name of the math module, predeclared in every file (as the Go implementation's
#: command predeclares it).
MATH_MODULE: Final = "math"

#: The names every file can use without defining them.
UNIVERSE: Final = frozenset(FUNCTIONS) | {"None", "True", "False", MATH_MODULE}

#: The builtins the Go implementation's test harness predeclares (``testing=True``):
#: ``catch(f)`` runs ``f()`` and returns its error message (or None), ``module(name,
#: **members)`` makes a value with those attributes, ``error(msg)`` reports a failed
#: assertion on stderr and carries on, ``_freeze(x)`` freezes ``x`` deeply and returns it
#: (a builtin that calls itself ``freeze``).  Keyed by the predeclared name.
TESTING: Final[dict[str, Builtin]] = {
    "catch": _f("catch", "f", 1),
    "module": _f("module", "name", 1, kwargs=True),
    "error": _f("error", "msg", 1),
    "_freeze": Builtin("freeze", "builtin_freeze", ("x",), 1),
}


#: The primitives the ``forge`` module (``forge.star``) is written with; predeclared in
#: that module only.
HOST: Final[dict[str, Builtin]] = {
    b.name: b
    for b in (
        Builtin("_send", "builtin__send", ("channel", "data"), 2),
        Builtin("_recv", "builtin__recv", ("channel", "as_text"), 2),
        Builtin("_poll", "builtin__poll", ("channel",), 1),
        Builtin("_budget", "builtin__budget"),
        Builtin("_tick", "builtin__tick"),
        Builtin("_env", "builtin__env"),
        Builtin("_le", "builtin__le", ("value", "width"), 2),
        Builtin("_read_le", "builtin__read_le", ("data", "offset", "width"), 3),
    )
}
#: The name of the host module, predeclared in every file and loadable by name.
FORGE_MODULE: Final = "@forge"


def every_builtin() -> list[Builtin]:
    """Every builtin function and method (for the names tracebacks show)."""
    return [
        *FUNCTIONS.values(),
        *METHOD_LIST,
        *TESTING.values(),
        *HOST.values(),
        *MATH.values(),
    ]
