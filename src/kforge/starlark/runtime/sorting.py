"""The stable sort behind ``sorted``.

Where every comparison of the keys succeeds, any stable sort gives the same result;
where some fail, the Go implementation carries on sorting, taking a failed ``a < b``
for false, and reports the *last* failure, so which failure is reported depends on
the exact comparisons made.  This module therefore sorts with the Go library's
``sort.Stable`` step for step: insertion sort of blocks of 20, then ``symMerge`` of
ever larger runs (in place: no memory beyond the items).

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import Global, load, store
from kforge.starlark.runtime.values import COMPARE_DEPTH, FAILED

if TYPE_CHECKING:
    from kforge.starlark.runtime.values import order_within

#: The block size of Go's ``sort.Stable``.
BLOCK: Final = 20

# The sort in progress (no Starlark code runs while it does, so one at a time):
# the values, their keys (the same block when sorting by the values themselves),
# whether to sort in reverse, and whether a comparison failed.
_values = Global(__name__)
_keys = Global(__name__)
_reverse = Global(__name__)
_failed = Global(__name__)


def sort_items(values: int, keys: int, n: int, reverse: int) -> int:
    """Sort the ``n`` words at ``values`` stably by the words at ``keys`` (which may be
    ``values``), moving both alike; in reverse order if ``reverse``.  Returns 0, or
    FAILED if a comparison failed (the last failure is noted for the message)."""
    _values.value = values
    _keys.value = keys
    _reverse.value = reverse
    _failed.value = 0
    stable(n)
    if _failed.value:
        return FAILED
    return 0


def less(i: int, j: int) -> int:
    """Whether item ``i`` sorts before item ``j`` (``j`` before ``i`` in reverse)."""
    keys = _keys.value
    x = load(keys + 8 * i)
    y = load(keys + 8 * j)
    if _reverse.value:
        x = load(keys + 8 * j)
        y = load(keys + 8 * i)
    if x & y & 1:
        return (x ^ L.SIGN_BIT) < (y ^ L.SIGN_BIT)
    order = order_within(x, y, COMPARE_DEPTH)
    if order == FAILED:
        _failed.value = 1
        return 0
    return order == 0 - 1


def swap(i: int, j: int) -> None:
    values = _values.value
    p = values + 8 * i
    q = values + 8 * j
    t = load(p)
    store(p, load(q))
    store(q, t)
    keys = _keys.value
    if keys != values:
        p = keys + 8 * i
        q = keys + 8 * j
        t = load(p)
        store(p, load(q))
        store(q, t)


def stable(n: int) -> None:
    """Go's ``stable``: sorted blocks, then merges of doubling width."""
    block = BLOCK
    a = 0
    b = block
    while b <= n:
        insertion_sort(a, b)
        a = b
        b += block
    insertion_sort(a, n)
    while block < n:
        a = 0
        b = 2 * block
        while b <= n:
            sym_merge(a, a + block, b)
            a = b
            b += 2 * block
        m = a + block
        if m < n:
            sym_merge(a, m, n)
        block = block * 2


def insertion_sort(a: int, b: int) -> None:
    i = a + 1
    while i < b:
        j = i
        while j > a and less(j, j - 1):
            swap(j, j - 1)
            j -= 1
        i += 1


def sym_merge(a: int, m: int, b: int) -> None:
    """Go's ``symMerge``: merge the sorted runs ``[a, m)`` and ``[m, b)`` in place."""
    if m - a == 1:
        # insert item a into [m, b): find the first i with item i >= item a
        i = m
        j = b
        while i < j:
            h = (i + j) >> 1
            if less(h, a):
                i = h + 1
            else:
                j = h
        k = a
        while k + 1 < i:
            swap(k, k + 1)
            k += 1
        return
    if b - m == 1:
        # insert item m into [a, m): find the first i with item i > item m
        i = a
        j = m
        while i < j:
            h = (i + j) >> 1
            if less(m, h) == 0:
                i = h + 1
            else:
                j = h
        k = m
        while k > i:
            swap(k, k - 1)
            k -= 1
        return
    mid = (a + b) >> 1
    n = mid + m
    start = a
    r = m
    if m > mid:
        start = n - b
        r = mid
    p = n - 1
    while start < r:
        c = (start + r) >> 1
        if less(p - c, c) == 0:
            start = c + 1
        else:
            r = c
    end = n - start
    if start < m and m < end:
        rotate(start, m, end)
    if a < start and start < mid:
        sym_merge(a, start, mid)
    if mid < end and end < b:
        sym_merge(mid, end, b)


def rotate(a: int, m: int, b: int) -> None:
    """Go's ``rotate``: exchange the runs ``[a, m)`` and ``[m, b)`` by block swaps."""
    i = m - a
    j = b - m
    while i != j:
        if i > j:
            swap_range(m - i, m, j)
            i -= j
        else:
            swap_range(m - i, m + j - i, i)
            j -= i
    swap_range(m - i, m, i)


def swap_range(a: int, b: int, n: int) -> None:
    i = 0
    while i < n:
        swap(a + i, b + i)
        i += 1
