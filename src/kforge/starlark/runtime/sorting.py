"""The stable sort behind ``sorted``.

Where every comparison of the keys succeeds, any stable sort gives the same result;
where some fail, the Go implementation carries on sorting, taking a failed ``a < b``
for false, and reports the *last* failure, so which failure is reported depends on
the exact comparisons made.  So keys that cannot fail to compare (all ints, all
strings, all bytes, all bools, or tuples or lists whose every column holds one of
those kinds) are merge sorted, quickly; any others are sorted with the Go library's
``sort.Stable`` step for step: insertion sort of blocks of 20, then ``symMerge`` of
ever larger runs, in place.

The merge sort borrows a scratch block of half the items from the top of the heap and
gives it back (zeroed, as fresh heap is) when nothing was allocated after it.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import Global, heap_pointer, load, set_heap_pointer, store
from kforge.starlark.runtime.values import COMPARE_DEPTH, FAILED

if TYPE_CHECKING:
    from kforge.starlark.runtime.core import alloc_block
    from kforge.starlark.runtime.lists import copy_words
    from kforge.starlark.runtime.values import big_compare, bytes_compare, order_within

#: The block size of Go's ``sort.Stable``.
BLOCK: Final = 20
#: The runs the merge sort starts from, sorted by insertion.
RUN: Final = 16
#: The most columns of tuple (or list) keys the merge sort takes.
COLUMNS: Final = 8

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
    if n < 2:
        return 0
    _values.value = values
    _keys.value = keys
    _reverse.value = reverse
    if comparable_keys(keys, n):
        merge_sort(n)
        return 0
    _failed.value = 0
    stable(n)
    if _failed.value:
        return FAILED
    return 0


# -- keys that always compare: merge sort ------------------------------------------------


def scalar_kind(v: int) -> int:
    """The kind of a value any other of its kind compares with: ``TAG_INT``,
    ``TAG_STRING``, ``TAG_BYTES``, ``TAG_BOOL``; 0 for others."""
    if v & 1:
        return L.TAG_INT
    tag = load(v) & L.TAG_MASK
    if tag == L.TAG_BIGINT or tag == L.TAG_STRING or tag == L.TAG_BYTES or tag == L.TAG_BOOL:
        return tag
    return 0


def comparable_keys(keys: int, n: int) -> int:
    """Whether every two of the ``n`` keys compare without fail: all of one scalar kind,
    or all tuples (or all lists) whose items in each column are of one scalar kind (the
    kinds of the first COLUMNS columns are kept a byte each in one word)."""
    first = load(keys)
    kind = scalar_kind(first)
    if kind != 0:
        p = keys + 8
        end = keys + 8 * n
        while p < end:
            if scalar_kind(load(p)) != kind:
                return 0
            p += 8
        return 1
    if first & 1:
        return 0
    tag = load(first) & L.TAG_MASK
    if tag != L.TAG_TUPLE and tag != L.TAG_LIST:
        return 0
    columns = 0
    p = keys
    end = keys + 8 * n
    while p < end:
        key = load(p)
        p += 8
        if key & 1 or (load(key) & L.TAG_MASK) != tag:
            return 0
        count = load(key + L.LIST_LEN)
        if count > COLUMNS:
            return 0
        items = key + L.TUPLE_ITEMS
        if tag == L.TAG_LIST:
            items = load(key + L.LIST_ITEMS)
        j = 0
        while j < count:
            kind = scalar_kind(load(items + 8 * j))
            if kind == 0:
                return 0
            known = (columns >> (8 * j)) & 0xFF
            if known == 0:
                columns = columns | (kind << (8 * j))
            elif known != kind:
                return 0
            j += 1
    return 1


def key_order(x: int, y: int) -> int:
    """-1, 0 or 1 for two keys that compare without fail (see ``comparable_keys``)."""
    if x & y & 1:
        if x == y:
            return 0
        if (x ^ L.SIGN_BIT) < (y ^ L.SIGN_BIT):
            return 0 - 1
        return 1
    if x & 1:
        return big_compare(x, y)
    tag = load(x) & L.TAG_MASK
    if tag == L.TAG_STRING:
        return bytes_compare(x, y)
    if tag != L.TAG_TUPLE and tag != L.TAG_LIST:
        return scalar_order(x, y)
    n = load(x + L.LIST_LEN)
    m = load(y + L.LIST_LEN)
    p = x + L.TUPLE_ITEMS
    q = y + L.TUPLE_ITEMS
    if tag == L.TAG_LIST:
        p = load(x + L.LIST_ITEMS)
        q = load(y + L.LIST_ITEMS)
    common = n
    if m < n:
        common = m
    end = p + 8 * common
    while p < end:
        a = load(p)
        b = load(q)
        if a != b:
            if a & b & 1:
                if (a ^ L.SIGN_BIT) < (b ^ L.SIGN_BIT):
                    return 0 - 1
                return 1
            order = scalar_order(a, b)
            if order != 0:
                return order
        p += 8
        q += 8
    if n == m:
        return 0
    if n < m:
        return 0 - 1
    return 1


def scalar_order(a: int, b: int) -> int:
    """-1, 0 or 1 for two values of one scalar kind (see ``scalar_kind``)."""
    if a & b & 1:
        if a == b:
            return 0
        if (a ^ L.SIGN_BIT) < (b ^ L.SIGN_BIT):
            return 0 - 1
        return 1
    if a & 1 == 0:
        tag = load(a) & L.TAG_MASK
        if tag == L.TAG_STRING or tag == L.TAG_BYTES:
            return bytes_compare(a, b)
        if tag == L.TAG_BOOL:  # False (address 16) before True (24)
            if a == b:
                return 0
            if a < b:
                return 0 - 1
            return 1
    return big_compare(a, b)


def before(x: int, y: int, reverse: int) -> int:
    """Whether key ``x`` sorts strictly before key ``y`` (after it, ``reverse``)."""
    if reverse:
        t = x
        x = y
        y = t
    if x & y & 1:
        return (x ^ L.SIGN_BIT) < (y ^ L.SIGN_BIT)
    return key_order(x, y) == 0 - 1


def merge_sort(n: int) -> None:
    """Sort items whose keys compare without fail: runs of RUN sorted by insertion,
    then merged bottom-up through a scratch block (for the values, and for the keys
    when they are not the values)."""
    start = 0
    while start < n:
        end = start + RUN
        if end > n:
            end = n
        run_insertion_sort(start, end)
        start = end
    if n <= RUN:
        return
    half = (n + 1) >> 1
    size = 8 * half
    if _keys.value != _values.value:
        size = 16 * half
    scratch = alloc_block(L.TAG_VBLOCK, size)
    width = RUN
    while width < n:
        low = 0
        while low + width < n:
            high = low + 2 * width
            if high > n:
                high = n
            merge_runs(low, low + width, high, scratch, scratch + 8 * half)
            low = high
        width = width * 2
    if heap_pointer() == scratch + size:  # nothing came after: give it back
        block = scratch - L.BLOCK_DATA
        p = block
        while p < scratch + size:
            store(p, 0)
            p += 8
        set_heap_pointer(block)


def run_insertion_sort(a: int, b: int) -> None:
    values = _values.value
    keys = _keys.value
    reverse = _reverse.value
    paired = keys != values
    i = a + 1
    while i < b:
        value = load(values + 8 * i)
        key = load(keys + 8 * i)
        j = i
        while j > a and before(key, load(keys + 8 * (j - 1)), reverse):
            store(keys + 8 * j, load(keys + 8 * (j - 1)))
            if paired:
                store(values + 8 * j, load(values + 8 * (j - 1)))
            j -= 1
        store(keys + 8 * j, key)
        store(values + 8 * j, value)
        i += 1


def merge_runs(low: int, mid: int, high: int, spare_values: int, spare_keys: int) -> None:
    """Merge the sorted runs ``[low, mid)`` and ``[mid, high)`` stably, through the
    spare blocks (room for the shorter run), from the front or the back."""
    values = _values.value
    keys = _keys.value
    reverse = _reverse.value
    if before(load(keys + 8 * mid), load(keys + 8 * (mid - 1)), reverse) == 0:
        return  # already in order
    paired = keys != values
    if paired == 0:
        spare_keys = spare_values
    if mid - low <= high - mid:
        # the left run goes to the spare blocks; merge forwards
        count = mid - low
        copy_words(spare_keys, keys + 8 * low, count)
        if paired:
            copy_words(spare_values, values + 8 * low, count)
        i = 0
        j = mid
        k = low
        while i < count and j < high:
            right = load(keys + 8 * j)
            left = load(spare_keys + 8 * i)
            if before(right, left, reverse):
                store(keys + 8 * k, right)
                if paired:
                    store(values + 8 * k, load(values + 8 * j))
                j += 1
            else:
                store(keys + 8 * k, left)
                if paired:
                    store(values + 8 * k, load(spare_values + 8 * i))
                i += 1
            k += 1
        copy_words(keys + 8 * k, spare_keys + 8 * i, count - i)
        if paired:
            copy_words(values + 8 * k, spare_values + 8 * i, count - i)
        return
    # the right run goes to the spare blocks; merge backwards
    count = high - mid
    copy_words(spare_keys, keys + 8 * mid, count)
    if paired:
        copy_words(spare_values, values + 8 * mid, count)
    i = count
    j = mid
    k = high
    while i > 0 and j > low:
        left = load(keys + 8 * (j - 1))
        right = load(spare_keys + 8 * (i - 1))
        k -= 1
        if before(right, left, reverse):
            j -= 1
            store(keys + 8 * k, left)
            if paired:
                store(values + 8 * k, load(values + 8 * j))
        else:
            i -= 1
            store(keys + 8 * k, right)
            if paired:
                store(values + 8 * k, load(spare_values + 8 * i))
    copy_words(keys + 8 * low, spare_keys, i)
    if paired:
        copy_words(values + 8 * low, spare_values, i)


# -- any keys: Go's sort.Stable ----------------------------------------------------------


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
