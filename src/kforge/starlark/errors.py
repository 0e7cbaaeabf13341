"""The errors the Starlark compiler raises."""

from __future__ import annotations

from kforge.core import InvalidProgram


class StarlarkCompileError(InvalidProgram):
    """Starlark source that cannot become a program; ``str()`` is ``FILE:LINE:COL: message``."""

    def __init__(self, filename: str, line: int, col: int, message: str) -> None:
        super().__init__(f"{filename}:{line}:{col}: {message}")
        self.filename = filename
        self.line = line
        self.col = col
        self.message = message

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}: {self.message}"

    def __reduce__(self) -> tuple[type[StarlarkCompileError], tuple[str, int, int, str]]:
        return (StarlarkCompileError, (self.filename, self.line, self.col, self.message))
