"""``@inline`` runtime functions (``kforge.starlark.inline``): copied into their
callers, they compute what the calls computed, on both tiers."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from kforge.starlark.inline import InlineError, inline_calls
from kforge.starlark.ir import CodeRef, Function, Insn, Term


def _library() -> Any:
    from kforge.starlark.compiler import RUNTIME_MODULES
    from kforge.starlark.lowlevel import compile_modules

    return compile_modules([*RUNTIME_MODULES, "starlark.inline_sample"])


def _expected(n: int) -> list[int]:
    def clamp(x: int, low: int, high: int) -> int:
        return min(max(x, low), high)

    return [
        clamp(n, 10, 20),
        clamp(n + 15, 10, 20),
        clamp(n + 99, 10, 20),
        sum(clamp(i, 2, 5) for i in range(n)),
        0,
        n * 3 + 1,
        clamp(clamp(n, 0, 4), 3, 9),
        n,
    ]


def _run(library: Any, n: int, tier: str) -> tuple[list[int], int]:
    from kforge.machine import Machine, MachineState
    from kforge.starlark.emit import Unit, emit_program
    from kforge.tiers import TierRunner

    declarations = dict(library.data.items)
    declarations["inline_results"] = struct.pack("<8Q", n, *[0] * 7)
    unit = Unit(dict(library.functions), declarations, "inline_main", 1 << 16)
    program = emit_program(unit).program
    machine = Machine.load(program, memory_quota=1 << 16, tick_budget=1_000_000)
    TierRunner(tier).run(machine)
    assert machine.state is MachineState.HALTED, (machine.state, machine.fault)
    return list(struct.unpack("<8Q", bytes(machine.stdout))), machine.ticks_used


def _calls(function: Function) -> set[str]:
    return {
        insn.ref.name
        for block in function.blocks
        for insn in block.insns
        if insn.op == "CALL" and isinstance(insn.ref, CodeRef)
    }


def test_inline_functions_are_copied_into_their_callers() -> None:
    library = _library()
    calls = _calls(library.functions["inline_main"])
    assert not calls & {"sample_clamp", "sample_sum_below", "sample_note"}
    assert "sample_plain" in calls  # an ordinary function stays a call, inside the copy
    # the functions themselves stay, with their own @inline callees copied in
    assert "sample_clamp" not in _calls(library.functions["sample_sum_below"])
    # the collector's walks read block sizes without a call
    assert "block_size" not in _calls(library.functions["sweep"])


@pytest.mark.parametrize("n", [0, 3, 12, 40])
@pytest.mark.parametrize("tier", ["reference", "fast"])
def test_copies_compute_what_the_calls_did(n: int, tier: str) -> None:
    results, _ = _run(_library(), n, tier)
    assert results == _expected(n)


def test_both_tiers_spend_the_same_ticks() -> None:
    library = _library()
    assert _run(library, 12, "reference") == _run(library, 12, "fast")


def _function(name: str, calls: str | None = None, checked: bool = False) -> Function:
    function = Function(name, 1)
    function.checked = checked
    block = function.new_block()
    parameter = function.new_register()
    block.insns.append(Insn("PARAMS", args=(parameter,)))
    if calls is not None:
        block.insns.append(Insn("CALL", parameter, ref=CodeRef(calls), args=(parameter,)))
    block.term = Term("RET", a=parameter)
    return function


def test_recursion_is_refused() -> None:
    functions = {"f": _function("f", calls="g"), "g": _function("g", calls="f")}
    with pytest.raises(InlineError, match="calls itself"):
        inline_calls(functions, {"f", "g"}, set())


def test_checked_functions_and_catch_sites_are_refused() -> None:
    with pytest.raises(InlineError, match="recurses"):
        inline_calls({"f": _function("f", checked=True)}, {"f"}, set())
    catcher = _function("f", calls="h")
    functions = {"f": catcher, "h": _function("h")}
    with pytest.raises(InlineError, match="catches errors"):
        inline_calls(functions, {"f"}, {id(catcher.blocks[0].insns[1])})


def test_a_wrong_argument_count_is_refused() -> None:
    caller = Function("main", 0)
    block = caller.new_block()
    block.insns.append(Insn("CALL", 300, ref=CodeRef("f"), args=()))
    block.term = Term("RET", a=300)
    with pytest.raises(InlineError, match="called with 0 arguments, takes 1"):
        inline_calls({"main": caller, "f": _function("f")}, {"f"}, set())
