"""A test program in the runtime dialect for ``@inline`` (see ``test_inline.py``).

``inline_main`` computes a few words through ``@inline`` functions (early returns, a
loop, a call of another ``@inline`` function, a call of an ordinary one, a result
dropped) and sends them on stdout; the test compares them with the same functions run
as Python.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import Final

from kforge.starlark.runtime.intrinsics import data_address, inline, load, send, store

#: How many words ``inline_main`` sends.
RESULTS: Final = 8


@inline
def sample_clamp(x: int, low: int, high: int) -> int:
    if x < low:
        return low
    if high < x:
        return high
    return x


@inline
def sample_sum_below(n: int) -> int:
    total = 0
    i = 0
    while i < n:
        total += sample_clamp(i, 2, 5)
        i += 1
    return total


def sample_plain(x: int) -> int:
    return x * 3 + 1


@inline
def sample_note(address: int, value: int) -> None:
    store(address, sample_plain(value))


def inline_main() -> int:
    out = data_address("inline_results")
    n = load(out)
    store(out, sample_clamp(n, 10, 20))
    store(out + 8, sample_clamp(n + 15, 10, 20))
    store(out + 16, sample_clamp(n + 99, 10, 20))
    store(out + 24, sample_sum_below(n))
    store(out + 32, sample_sum_below(0))
    sample_note(out + 40, n)
    store(out + 48, sample_clamp(sample_clamp(n, 0, 4), 3, 9))
    sample_sum_below(3)  # the result dropped
    store(out + 56, n)
    send(0, out, 8 * RESULTS)
    return 0
