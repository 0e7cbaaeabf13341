"""The code a construct compiles to grows with the source, not faster."""

from __future__ import annotations

from kforge.starlark import compile as compile_starlark


def nested_replace(depth: int) -> str:
    """``"a".replace("a", "a".replace("a", ...))``, ``depth`` method calls deep."""
    expression = '"z"'
    for _ in range(depth):
        expression = f'"a".replace("a", {expression})'
    return f"print({expression})\n"


def user_code(source: str) -> int:
    return len(compile_starlark(source, "size.star").code) - len(
        compile_starlark('print("z")\n', "size.star").code
    )


def test_method_calls_in_arguments_are_compiled_once() -> None:
    # once per receiver type they would double with each level: 16 times from 4 to 8
    shallow, deep = user_code(nested_replace(4)), user_code(nested_replace(8))
    assert deep < 3 * shallow
