"""Inlining of the runtime's ``@inline`` functions into their callers, on the IR.

A runtime function marked ``@inline`` (a small one on a hot path, such as the
collector's ``block_size``) is copied into every runtime function that calls it: the
calling block is cut at the call, the callee's blocks are appended to the caller with
their virtual registers renumbered, its parameters become moves from the call's
arguments and each ``RET`` a move into the call's result and a jump to the rest of
the calling block.  The copy behaves as the call did, without the ``CALL`` and
``RET`` (four ticks), the argument and result moves, or the saves of the caller's
values the callee would have changed.  The function itself stays, for callers that
take its address or are compiled Starlark.

An ``@inline`` function may call other functions, ``@inline`` ones included (they are
inlined in turn), but may not recurse, tail-call, jump through a code address, export
labels or catch errors: :class:`InlineError` says which.
"""

from __future__ import annotations

from typing import Final

from kforge.starlark.ir import FIRST_VIRTUAL, BlockRef, CodeRef, Function, Insn, Term

#: How deep ``@inline`` functions may call one another (more is taken for recursion).
MAX_INLINE_DEPTH: Final = 8


class InlineError(Exception):
    """An ``@inline`` function that cannot be copied into its callers."""


def inline_calls(functions: dict[str, Function], inline: set[str], catch_sites: set[int]) -> None:
    """Copy the functions named in ``inline`` into every function of ``functions`` that
    calls them directly (in place; the ``@inline`` functions themselves too, for the
    callers that keep calling them)."""
    for name in sorted(inline):
        _check_inlinable(functions[name], catch_sites)
    for name in sorted(inline):  # first, so their callers copy finished bodies
        _inline_into(functions[name], functions, inline)
    for function in functions.values():
        if function.name not in inline:
            _inline_into(function, functions, inline)


def _check_inlinable(function: Function, catch_sites: set[int]) -> None:
    if function.exported_labels or function.checked or function.noreturn:
        raise InlineError(f"@inline {function.name}: exports labels, recurses or never returns")
    for block in function.blocks:
        for insn in block.insns:
            if id(insn) in catch_sites or insn.op == "CALLI":
                raise InlineError(f"@inline {function.name}: catches errors or calls a value")
        term = block.term
        if term is None or term.op in ("JUMPI", "TAILCALL"):
            raise InlineError(f"@inline {function.name}: ends a block by a jump away")


def _inline_into(function: Function, functions: dict[str, Function], inline: set[str]) -> None:
    """Replace each direct call of an ``@inline`` function in ``function`` by a copy of
    its body; a block that is a copy is looked at again, one level deeper."""
    pending = [(index, 0) for index in range(len(function.blocks))]
    while pending:
        index, depth = pending.pop()
        block = function.blocks[index]
        for position, insn in enumerate(block.insns):
            callee = _inline_callee(insn, inline)
            if callee is None:
                continue
            if callee == function.name or depth >= MAX_INLINE_DEPTH:
                raise InlineError(f"@inline {callee}: calls itself (directly or not)")
            rest = function.new_block()
            rest.insns = block.insns[position + 1 :]
            rest.term = block.term
            del block.insns[position:]
            entry, copied = _copy_body(function, functions[callee], insn, rest.index)
            block.term = Term("JMP", (entry,), loc=insn.loc)
            pending += [(copy, depth + 1) for copy in copied]
            pending.append((rest.index, depth))
            break


def _inline_callee(insn: Insn, inline: set[str]) -> str | None:
    if insn.op != "CALL" or not isinstance(insn.ref, CodeRef) or insn.ref.label:
        return None
    return insn.ref.name if insn.ref.name in inline else None


def _copy_body(
    caller: Function, callee: Function, call: Insn, resume: int
) -> tuple[int, list[int]]:
    """Append a copy of ``callee``'s blocks to ``caller`` for ``call``; the copy goes on
    at block ``resume``.  Returns the copy's entry block and every copied block."""
    shift = caller.next_register - FIRST_VIRTUAL
    caller.next_register += callee.next_register - FIRST_VIRTUAL

    def renamed(register: int) -> int:
        return register + shift if register >= FIRST_VIRTUAL else register

    first = len(caller.blocks)
    copied = [caller.new_block().index for _ in callee.blocks]
    for source, index in zip(callee.blocks, copied, strict=True):
        target = caller.blocks[index]
        for insn in source.insns:
            if insn.op == "PARAMS":
                if len(insn.args) != len(call.args):
                    raise InlineError(
                        f"@inline {callee.name}: called with {len(call.args)} arguments, "
                        f"takes {len(insn.args)}"
                    )
                target.insns += [
                    Insn("MOV", renamed(parameter), argument, loc=insn.loc)
                    for parameter, argument in zip(insn.args, call.args, strict=True)
                    if parameter >= 0
                ]
                continue
            ref = insn.ref
            if isinstance(ref, BlockRef):
                ref = BlockRef(first + ref.block)
            target.insns.append(
                Insn(
                    insn.op,
                    renamed(insn.dst) if insn.dst >= 0 else -1,
                    renamed(insn.a) if insn.a >= 0 else -1,
                    renamed(insn.b) if insn.b >= 0 else -1,
                    insn.imm,
                    ref,
                    tuple(renamed(argument) for argument in insn.args),
                    insn.loc,
                )
            )
        term = source.term
        assert term is not None
        if term.op == "RET":
            if call.dst >= 0 and term.a >= 0:
                target.insns.append(Insn("MOV", call.dst, renamed(term.a), loc=term.loc))
            target.term = Term("JMP", (resume,), loc=term.loc)
        else:
            target.term = Term(
                term.op,
                tuple(first + t for t in term.targets),
                term.cond,
                renamed(term.a) if term.a >= 0 else -1,
                renamed(term.b) if term.b >= 0 else -1,
                term.imm,
                term.loc,
                term.ref,
                tuple(renamed(argument) for argument in term.args),
            )
    return copied[0], copied
