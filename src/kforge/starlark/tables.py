"""Runtime functions made for each program: builtins called through values, and the
method tables ``getattr``, ``hasattr`` and ``dir`` read.

A builtin (or a method bound to a value) used as a value has a number in the
program; ``builtin_call`` dispatches on it, binds the call's arguments with the
runtime's ``bind_builtin`` and the builtin's descriptor, and calls its runtime
function.  Only the builtins a program numbers are linked.
"""

from __future__ import annotations

from kforge.starlark import layout as L
from kforge.starlark.builder import Builder
from kforge.starlark.builtins import (
    FUNCTIONS,
    HOST,
    MATH,
    METHOD_LIST,
    METHODS,
    TESTING,
    Builtin,
)
from kforge.starlark.ir import DataRef, Function
from kforge.starlark.lower import ProgramState
from kforge.starlark.lowlevel import make_string
from kforge.starlark.regs import ZERO


def builtin_of(key: tuple[int, str]) -> Builtin:
    tag, name = key
    if tag:
        return METHODS[name][tag]
    testing = {builtin.name: builtin for builtin in TESTING.values()}
    return FUNCTIONS.get(name) or testing.get(name) or MATH.get(name) or HOST[name]


def number_every_method(state: ProgramState) -> None:
    """``getattr`` and friends may bind any method: give every method a number."""
    for method in METHOD_LIST:
        state.builtin_values.setdefault(
            (method.receiver, method.name), len(state.builtin_values) + 1
        )


def builtin_descriptor(state: ProgramState, builtin: Builtin) -> str:
    names = builtin.params + builtin.kwonly
    keywords = 0
    for index, name in enumerate(names):
        if name in builtin.keywords or index >= len(builtin.params):
            keywords |= 1 << index
    flags = (
        (L.BDESC_HAS_VARARGS if builtin.varargs else 0)
        | (L.BDESC_HAS_KWARGS if builtin.kwargs else 0)
        | (L.BDESC_EXACTLY if builtin.exactly else 0)
    )
    fields: list[int | str] = [
        L.TAG_BLOCK | L.FLAG_STATIC,
        state.data.string(builtin.name.encode()),
        len(builtin.params),
        len(builtin.kwonly),
        builtin.required,
        flags,
        keywords,
        *(state.data.string(name.encode()) for name in names),
    ]
    return state.data.record(f"bdesc:{builtin.receiver}:{builtin.name}", tuple(fields))


def builtin_call_function(state: ProgramState) -> Function:
    """``builtin_call(fn, args, kwargs)``: call builtin value ``fn``."""
    function = Function("builtin_call", 3)
    b = Builder(function)
    fn, args, kwargs = b.params(3)
    number = b.load(fn, L.BUILTIN_ID)
    receiver = b.load(fn, L.BUILTIN_RECEIVER)
    for key, value in sorted(state.builtin_values.items(), key=lambda item: item[1]):
        builtin = builtin_of(key)
        this, other = b.new_block(), b.new_block()
        b.br("EQ", number, b.li(value), this, other)
        b.set_block(this)
        descriptor = b.li_ref(DataRef(builtin_descriptor(state, builtin)))
        slots = b.call("bind_builtin", [descriptor, args, kwargs])
        count = (
            len(builtin.params) + len(builtin.kwonly) + int(builtin.varargs) + int(builtin.kwargs)
        )
        values = [b.load(slots, 8 * index) for index in range(count)]
        if builtin.is_method:
            values.insert(0, receiver)
        b.ret(b.call(builtin.impl, values))
        b.set_block(other)
    b.call("error", [b.li_ref(state.string("unknown builtin")), ZERO], result=False)
    b.halt()
    return function


def method_number_function(state: ProgramState) -> Function:
    """``method_number(tag, name)``: the builtin number of a type's method, 0 if the type
    has no such method (for ``getattr`` and ``hasattr``)."""
    number_every_method(state)
    lookup = Function("method_number", 2)
    b = Builder(lookup)
    tag, name = b.params(2)
    for key, value in sorted(state.builtin_values.items(), key=lambda item: item[1]):
        receiver, method_name = key
        if receiver == 0:
            continue
        this, equal, other = b.new_block(), b.new_block(), b.new_block()
        b.br("EQ", tag, b.li(receiver), this, other)
        b.set_block(this)
        same = b.call("bytes_equal", [name, b.li_ref(state.string(method_name))])
        b.br("NZ", same, -1, equal, other)
        b.set_block(equal)
        b.ret(b.li(value))
        b.set_block(other)
    b.ret(ZERO)
    return lookup


def method_names_function(state: ProgramState) -> Function:
    """``method_names(tag)``: a new tuple of a type's sorted method names (for ``dir``
    and the spelling hint of a missing attribute), made by code: rarely read (an
    error's hint, ``dir``), so not laid out as static data (2.5 KB of names)."""
    names = Function("method_names", 1)
    b = Builder(names)
    (tag,) = b.params(1)
    by_tag: dict[int, list[str]] = {}
    for method in METHOD_LIST:
        by_tag.setdefault(method.receiver, []).append(method.name)
    for receiver, method_names in sorted(by_tag.items()):
        this, other = b.new_block(), b.new_block()
        b.br("EQ", tag, b.li(receiver), this, other)
        b.set_block(this)
        made = b.call("tuple_with", [b.li(len(method_names))])
        for index, name in enumerate(sorted(method_names)):
            b.store(make_string(b, name.encode()), made, L.TUPLE_ITEMS + 8 * index)
        b.ret(made)
        b.set_block(other)
    b.ret(b.call("tuple_with", [ZERO]))
    return names
