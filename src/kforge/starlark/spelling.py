"""Spelling hints: the candidate a misspelt name most likely meant.

An error about an unknown name (``undefined: lenght``, ``string has no .fin field or
method``, an unexpected keyword argument, a name a module does not export) ends with
``(did you mean X?)`` when some candidate is close enough.  Closeness is the edit distance
between the names with underscores dropped and letters lowered; a candidate qualifies when
fewer than half the (folded) name's bytes need an edit, and among equally close candidates
the first one listed wins.  The runtime's twin of :func:`nearest` is
``runtime.calls.nearest_name`` (it lowers ASCII letters only).
"""

from __future__ import annotations

from collections.abc import Iterable


def nearest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``name``, or ``None`` when none is close enough."""
    folded = _fold(name)
    best: str | None = None
    best_distance = (len(folded) + 1) // 2
    for candidate in candidates:
        distance = _edit_distance(folded, _fold(candidate))
        if distance < best_distance:
            best, best_distance = candidate, distance
    return best


def hint(name: str, candidates: Iterable[str], dot: str = "") -> str:
    """`` (did you mean X?)`` for the nearest candidate, or the empty string."""
    found = nearest(name, candidates)
    return "" if found is None else f" (did you mean {dot}{found}?)"


def _fold(name: str) -> bytes:
    return name.replace("_", "").lower().encode()


def _edit_distance(a: bytes, b: bytes) -> int:
    """Levenshtein distance between two byte strings (one row of the table at a time)."""
    if len(a) > len(b):
        a, b = b, a
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        previous, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            substitution = previous + (a[i - 1] != b[j - 1])
            previous = row[j]
            row[j] = min(substitution, row[j - 1] + 1, row[j] + 1)
    return row[len(b)]
