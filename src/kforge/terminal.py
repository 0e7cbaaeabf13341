"""Colour for people at a terminal, and for no one else.

A stream gets colour only when it is a terminal, ``NO_COLOR`` is not set
(https://no-color.org: any value, even empty, turns colour off) and ``TERM``
is not ``dumb``.  Pipes, files and captured output always get plain text, so
what a script reads never depends on where it ran.
"""

from __future__ import annotations

import os
from typing import Final, TextIO

__all__ = ["STATE_STYLES", "paint", "wants_colour"]

_CODES: Final = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "bold red": "1;31",
}

#: How a machine or sandbox state is shown.
STATE_STYLES: Final = {
    "HALTED": "green",
    "FAULTED": "red",
    "KILLED": "red",
    "DEADLINE_EXCEEDED": "red",
    "HOST_MEMORY_EXCEEDED": "red",
    "BLOCKED": "yellow",
    "RUNNING": "blue",
    "READY": "blue",
}


def wants_colour(stream: TextIO) -> bool:
    """Whether text written to ``stream`` may carry colour codes."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


def paint(text: str, style: str | None, stream: TextIO) -> str:
    """``text`` in ``style`` (a key of the table above) if ``stream`` wants colour, else as is."""
    if style is None or not wants_colour(stream):
        return text
    return f"\033[{_CODES[style]}m{text}\033[0m"
