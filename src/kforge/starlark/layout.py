"""How Starlark values live in Forge memory: the one statement of the value layout.

The compiler and the runtime (written in the low-level dialect of
:mod:`kforge.starlark.lowlevel`) both read these constants, so a layout fact is
written once.  ``docs/starlark.md`` explains the choices.

**A value is one 64-bit word.**

* ``w & 1 == 1``: a *small int* ``n`` with ``w == (n << 1) | 1``, for
  ``-2**62 <= n < 2**62``.  Larger ints are heap objects (:data:`TAG_BIGINT`);
  every int that fits is small, so the representation is canonical.
* ``w == 0``: *no value* (an unassigned global or local, a missing optional
  argument, an empty slot).  Never seen by a Starlark program.
* otherwise ``w`` is the 8-aligned address of an object: a static object in the
  program's data section or one allocated on the heap.  Its first word is the
  *header*: ``tag | flags << 8``.

``None``, ``False`` and ``True`` are static objects at fixed data addresses, so
comparing with them is comparing words.
"""

from __future__ import annotations

import struct
from typing import Final

WORD: Final = 8

# -- value words ----------------------------------------------------------------------

#: The word that stands for "no value" (also the null address).
NOVALUE: Final = 0
SMALL_INT_BITS: Final = 63
SMALL_INT_MIN: Final = -(1 << 62)
SMALL_INT_MAX: Final = (1 << 62) - 1
#: The sign bit of a word: XOR with it maps signed order onto unsigned order.
SIGN_BIT: Final = 1 << 63

#: Static objects at the start of the data section (address 0 holds nothing).
NONE_ADDRESS: Final = 8
FALSE_ADDRESS: Final = 16
TRUE_ADDRESS: Final = 24
#: The first data address the compiler may use for its own static data.
STATIC_DATA_START: Final = 32

# -- object tags (header bits 0..7) ---------------------------------------------------

TAG_NONE: Final = 1
TAG_BOOL: Final = 2
TAG_BIGINT: Final = 3
#: What ``type_tag`` answers for any int, small or big.
TAG_INT: Final = TAG_BIGINT
TAG_STRING: Final = 4
TAG_BYTES: Final = 5
TAG_LIST: Final = 6
TAG_TUPLE: Final = 7
TAG_DICT: Final = 8
TAG_RANGE: Final = 9
TAG_FUNCTION: Final = 10
TAG_BUILTIN: Final = 11
TAG_CELL: Final = 12
TAG_MODULE: Final = 13
TAG_FLOAT: Final = 14
#: A raw block (list items, dict entries or index): not a Starlark value.
TAG_BLOCK: Final = 15
TAG_STRING_ELEMS: Final = 16  # the iterable view of str.elems() / bytes.elems()
#: A growable byte buffer (output and string building): not a Starlark value.
TAG_BUFFER: Final = 17
#: A run of free heap memory (made by the collector): header, size in bytes, next run.
TAG_FREE: Final = 18
#: A raw block whose words are all values (or 0): list items, scratch arrays of values.
TAG_VBLOCK: Final = 19
#: A raw block of dict entries (hash, key, value triples; only keys and values are values).
TAG_EBLOCK: Final = 20
TAG_COUNT: Final = 21

TAG_MASK: Final = 0xFF

# -- header flags (bits 8..15) --------------------------------------------------------

#: A frozen value may not be mutated.
FLAG_FROZEN: Final = 1 << 8
#: The object lives in the data section (never freed, never moved).
FLAG_STATIC: Final = 1 << 9
#: Set on a heap object the collector marked but could not queue for tracing (its
#: mark stack was full): a later pass over the heap traces it (only while it runs).
FLAG_GREY: Final = 1 << 14
#: Set on a heap object the collector found reachable (only while it runs).
FLAG_MARK: Final = 1 << 15

# -- object fields (byte offsets from the object's address) ---------------------------

HEADER: Final = 0

# str and bytes: header, length in bytes, then the bytes.  The header's bits from
# STR_HASH_SHIFT up cache the string's hash (0 = not computed yet; a hash is never 0),
# so a string costs no word for it: most strings, static ones above all, are never hashed
STR_LEN: Final = 8
STR_DATA: Final = 16
STR_HASH_SHIFT: Final = 16
#: The bits of a string's hash (what fits in the header above its tag and flags).
STR_HASH_MASK: Final = (1 << 48) - 1

# big int: header, sign (0 or 1) << 32 | limb count, then 64-bit limbs (one a word), least
# significant first; the top limb is non-zero and the value does not fit a small int
BIGINT_INFO: Final = 8
BIGINT_LIMBS: Final = 16
LIMB_BITS: Final = 64
LIMB_MASK: Final = (1 << 64) - 1
#: The limb count's bits in a big int's info word.
BIGINT_COUNT_MASK: Final = (1 << 32) - 1
#: A half limb: multiplication and division work on 32-bit halves (the machine has no
#: high-half multiply, and ``DIV`` divides one word by another).
HALF_BITS: Final = 32
HALF_MASK: Final = (1 << 32) - 1

# list: header, length, capacity, address of the items block's first item,
# count of iterations in progress (a list being iterated may not change size)
LIST_LEN: Final = 8
LIST_CAP: Final = 16
LIST_ITEMS: Final = 24
LIST_ITERS: Final = 32
LIST_SIZE: Final = 40

# tuple: header, length, then the items
TUPLE_LEN: Final = 8
TUPLE_ITEMS: Final = 16

# dict (insertion-ordered, open addressing over an index of entry numbers):
# header, live count, entries used (live and deleted), entry capacity, address of the
# entries (hash, key, value triples; a deleted entry's key is NOVALUE), address of the
# index (capacity * 2 words, each 0 for empty or entry number + 1), index mask,
# count of iterations in progress
DICT_LEN: Final = 8
DICT_USED: Final = 16
DICT_CAP: Final = 24
DICT_ENTRIES: Final = 32
DICT_INDEX: Final = 40
DICT_MASK: Final = 48
DICT_ITERS: Final = 56
DICT_SIZE: Final = 64
DICT_ENTRY_SIZE: Final = 24

# str, bytes, list, tuple and dict (tags in a row) each keep their length (a dict: its
# live count) in the word after the header: compiled code reads it there for any of them
LENGTH: Final = 8
assert tuple(range(TAG_STRING + 1, TAG_DICT + 1)) == (TAG_BYTES, TAG_LIST, TAG_TUPLE, TAG_DICT)
assert STR_LEN == LIST_LEN == TUPLE_LEN == DICT_LEN == LENGTH

# range: header, start, stop, step, length (all small ints as plain signed words)
RANGE_START: Final = 8
RANGE_STOP: Final = 16
RANGE_STEP: Final = 24
RANGE_LEN: Final = 32
RANGE_SIZE: Final = 40

# function: header, code index of the entry that takes the parameters in registers,
# code index of the entry that takes an argument tuple and a keyword dict, its
# descriptor (static), default values (a tuple, or NOVALUE), captured cells (a tuple,
# or NOVALUE)
FUNC_ENTRY: Final = 8
FUNC_GENERIC: Final = 16
FUNC_DESCRIPTOR: Final = 24
FUNC_DEFAULTS: Final = 32
FUNC_CELLS: Final = 40
FUNC_SIZE: Final = 48

# function descriptor (static, a raw block): header, name (str), number of ordinary
# parameters (positional and keyword-only, without *args and **kwargs), how many of
# them are keyword-only, flags, number of defaults, then the ordinary parameters'
# names (str) one per word.  The defaults tuple covers the last parameters; a
# keyword-only parameter without a default has NOVALUE there.
DESC_NAME: Final = 8
DESC_NPARAMS: Final = 16
DESC_NKWONLY: Final = 24
DESC_FLAGS: Final = 32
DESC_NDEFAULTS: Final = 40
DESC_PARAMS: Final = 48
DESC_HAS_VARARGS: Final = 1
DESC_HAS_KWARGS: Final = 2
DESC_HAS_CLOSURE: Final = 4

# builtin function or bound method: header, builtin number (see the program's
# builtin dispatch), receiver (NOVALUE for a plain function), name (str)
BUILTIN_ID: Final = 8
BUILTIN_RECEIVER: Final = 16
BUILTIN_NAME: Final = 24
BUILTIN_SIZE: Final = 32

# builtin descriptor (static, a raw block): header, name (str), number of positional
# parameters, number of keyword-only parameters, number of required parameters, flags,
# a bit mask of the parameters that may be given by keyword, then the names (str) of
# the positional and keyword-only parameters
BDESC_NAME: Final = 8
BDESC_NPARAMS: Final = 16
BDESC_NKWONLY: Final = 24
BDESC_REQUIRED: Final = 32
BDESC_FLAGS: Final = 40
BDESC_KEYWORDS: Final = 48
BDESC_PARAMS: Final = 56
BDESC_HAS_VARARGS: Final = 1
BDESC_HAS_KWARGS: Final = 2
BDESC_EXACTLY: Final = 4

# cell (a variable captured by a nested function): header, value
CELL_VALUE: Final = 8
CELL_SIZE: Final = 16

# module (a value whose attributes are named values): header, name, a dict of members
MODULE_NAME: Final = 8
MODULE_MEMBERS: Final = 16
MODULE_SIZE: Final = 24

# float: header, then the 64 bits of an IEEE 754 double
FLOAT_BITS: Final = 8
FLOAT_SIZE: Final = 16

# raw block: header, capacity in bytes, then the bytes (or words)
BLOCK_CAP: Final = 8
BLOCK_DATA: Final = 16

# free run (heap memory the collector found unused): header, size in bytes, next run
FREE_SIZE: Final = 8
FREE_NEXT: Final = 16
FREE_MIN: Final = 24
#: The word the allocation slow path pushes before it calls the collector: the program's
#: stack (the collector's roots) is what lies above the lowest copy of it.
GC_STACK_MARKER: Final = 0x6B66_6F72_6765_6763

# byte buffer: header, length, capacity, address of the bytes (a raw block's data)
BUF_LEN: Final = 8
BUF_CAP: Final = 16
BUF_DATA: Final = 24
BUF_SIZE: Final = 32

# the iterable view of str.elems(), bytes.elems(), str.codepoints() and friends:
# header, the string, kind (see ELEMS_*)
ELEMS_STRING: Final = 8
ELEMS_KIND: Final = 16
ELEMS_SIZE: Final = 24
ELEMS_ELEMS: Final = 0  # str.elems(): one-byte strings
ELEMS_CODEPOINTS: Final = 1  # str.codepoints(): one-character strings
ELEMS_CODEPOINT_ORDS: Final = 2  # str.codepoint_ords(): ints
ELEMS_ELEM_ORDS: Final = 3  # str.elem_ords(): ints
ELEMS_BYTES_ELEMS: Final = 4  # bytes.elems(): ints


def float_bits(x: float) -> int:
    """The 64 bits of the IEEE 754 double ``x`` (what a float object holds)."""
    return int.from_bytes(struct.pack("<d", x), "little")


def small_int(n: int) -> int:
    """The word of the small int ``n`` (which must fit)."""
    if not SMALL_INT_MIN <= n <= SMALL_INT_MAX:
        raise ValueError(f"{n} is not a small int")
    return ((n << 1) | 1) & ((1 << 64) - 1)


def fits_small_int(n: int) -> bool:
    return SMALL_INT_MIN <= n <= SMALL_INT_MAX
