"""String formatting: ``format % args`` and ``str.format``, with the Go
implementation's rules and messages.

Both build into the scratch buffer of :mod:`kforge.starlark.runtime.string_methods`
and copy the result out once.  The float conversions of ``%`` (``%e %f %g`` and
their capitals) format ints as the float they convert to, as Go does: a program with
floats through the float formatter (:mod:`kforge.starlark.runtime.float_text`), any
other with the int-only code below, which needs no float arithmetic.

Runtime dialect (see :mod:`kforge.starlark.lowlevel`): every name is a word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kforge.starlark import layout as L
from kforge.starlark.runtime.intrinsics import (
    FLOATS,
    heap_pointer,
    load,
    loadb,
    sar,
    slt,
    store,
    text,
)

if TYPE_CHECKING:
    from kforge.starlark.runtime.bigint import (
        big_lshift,
        big_mod,
        big_pow10,
        big_prepare,
        big_sub,
        big_write_decimal,
        int_from_magnitude,
    )
    from kforge.starlark.runtime.core import (
        buf_byte,
        buf_decimal,
        buf_new,
        buf_reserve,
        buf_str,
        buf_to_string,
        buf_write,
        error,
        heap_release,
    )
    from kforge.starlark.runtime.float_text import write_number_as_float
    from kforge.starlark.runtime.floats import float_conversion_int
    from kforge.starlark.runtime.format import write_int, write_quoted, write_repr
    from kforge.starlark.runtime.string_methods import rune_at, scratch_buffer
    from kforge.starlark.runtime.strings import string_from, utf8_encode
    from kforge.starlark.runtime.values import big_compare, dict_lookup, tag_of, type_name

_DIGITS: Final = text("0123456789abcdef0123456789ABCDEF")
#: Ints below this magnitude convert to a float exactly.
EXACT: Final = 1 << 53

# -- str.format -----------------------------------------------------------------------


def string_format(s: int, args: int, kwargs: int) -> int:
    """``s.format(*args, **kwargs)``: ``{}``, ``{0}``, ``{name}``, ``!s``/``!r``,
    ``{{`` and ``}}`` (Go's rules and messages)."""
    b = scratch_buffer()
    p = s + L.STR_DATA
    n = load(s + L.STR_LEN)
    nargs = load(args + L.TUPLE_LEN)
    automatic = 0
    manual = 0
    index = 0
    i = 0
    while i < n:
        c = loadb(p + i)
        if c == 125:  # '}'
            if i + 1 < n and loadb(p + i + 1) == 125:
                buf_byte(b, 125)
                i += 2
                continue
            error(text("format: single '}' in format"), text("format"))
        if c != 123:  # not '{'
            buf_byte(b, c)
            i += 1
            continue
        if i + 1 < n and loadb(p + i + 1) == 123:
            buf_byte(b, 123)
            i += 2
            continue
        # a field: from after '{' to the next '}'
        start = i + 1
        close = start
        while close < n and loadb(p + close) != 125:
            close += 1
        if close == n:
            error(text("format: unmatched '{' in format"), text("format"))
        i = close + 1
        # name[!conv][:spec]
        name_end = start
        while name_end < close and loadb(p + name_end) != 33:  # '!'
            name_end += 1
        has_conversion = name_end < close
        conv_start = name_end + 1
        conv_end = conv_start
        if has_conversion:
            while conv_end < close and loadb(p + conv_end) != 58:  # ':'
                conv_end += 1
            spec_start = conv_end
        else:
            name_end = start
            while name_end < close and loadb(p + name_end) != 58:
                name_end += 1
            spec_start = name_end
        if name_end == start:
            if manual:
                error(
                    text(
                        "format: cannot switch from manual field specification to automatic field numbering"
                    ),
                    text("format"),
                )
            automatic = 1
            if index >= nargs:
                error(text("format: tuple index out of range"), text("format"))
            arg = load(args + L.TUPLE_ITEMS + 8 * index)
            index += 1
        else:
            number = decimal_field(p + start, name_end - start)
            if number != 0 - 1:
                if automatic:
                    error(
                        text(
                            "format: cannot switch from automatic field numbering to manual field specification"
                        ),
                        text("format"),
                    )
                manual = 1
                if number >= nargs:
                    error(text("format: tuple index out of range"), text("format"))
                arg = load(args + L.TUPLE_ITEMS + 8 * number)
            else:
                arg = keyword_argument(kwargs, p + start, name_end - start)
        if spec_start + 1 < close:
            e = buf_new(64)
            buf_str(e, text("format spec features not supported in replacement fields: "))
            buf_write(e, p + spec_start + 1, close - spec_start - 1)
            error(buf_to_string(e, L.TAG_STRING), text("format"))
        if has_conversion == 0 or (
            conv_end - conv_start == 1 and loadb(p + conv_start) == 115
        ):  # str
            write_format_str(b, arg)
        elif conv_end - conv_start == 1 and loadb(p + conv_start) == 114:  # 'r'
            write_repr(b, arg)
        else:
            e = buf_new(64)
            buf_str(e, text("format: unknown conversion "))
            write_quoted(e, string_from(L.TAG_STRING, p + conv_start, conv_end - conv_start), 0)
            error(buf_to_string(e, L.TAG_STRING), text("format"))
    return buf_to_string(b, L.TAG_STRING)


def write_format_str(b: int, v: int) -> None:
    """A string as itself, anything else as ``repr`` (bytes too)."""
    if tag_of(v) == L.TAG_STRING:
        buf_str(b, v)
    else:
        write_repr(b, v)


def decimal_field(p: int, n: int) -> int:
    """The field name as a number if it is all decimal digits (Go's ``decimal``, with
    its overflow rule), else -1."""
    x = 0
    i = 0
    while i < n:
        digit = loadb(p + i) - 48
        if digit > 9:
            return 0 - 1
        x = x * 10 + digit
        if slt(x, 0):
            return 0 - 1
        i += 1
    return x


def keyword_argument(kwargs: int, p: int, n: int) -> int:
    name = string_from(L.TAG_STRING, p, n)
    value = 0
    if kwargs != 0:
        value = dict_lookup(kwargs, name)
    if value != 0:
        return value
    b = buf_new(64)
    if find_byte(p, n, 46) != 0 - 1:  # '.'
        buf_str(b, text("format: attribute syntax x.y is not supported in replacement fields: "))
        buf_str(b, name)
    elif find_byte(p, n, 91) != 0 - 1:  # '['
        buf_str(b, text("format: element syntax a[i] is not supported in replacement fields: "))
        buf_str(b, name)
    elif find_byte(p, n, 123) != 0 - 1:  # '{'
        buf_str(b, text("format: nested replacement fields not supported"))
    else:
        buf_str(b, text("format: keyword "))
        buf_str(b, name)
        buf_str(b, text(" not found"))
    error(buf_to_string(b, L.TAG_STRING), text("format"))
    return 0


def find_byte(p: int, n: int, byte: int) -> int:
    i = 0
    while i < n:
        if loadb(p + i) == byte:
            return i
        i += 1
    return 0 - 1


# -- format % args --------------------------------------------------------------------


def string_interpolate(format_string: int, args: int) -> int:
    """``format % args``: ``args`` a tuple of the arguments, a dict for ``%(key)s``, or
    any other value as the one argument."""
    b = scratch_buffer()
    p = format_string + L.STR_DATA
    n = load(format_string + L.STR_LEN)
    is_tuple = tag_of(args) == L.TAG_TUPLE
    nargs = 1
    if is_tuple:
        nargs = load(args + L.TUPLE_LEN)
    index = 0
    i = 0
    while True:
        start = i
        while i < n and loadb(p + i) != 37:  # '%'
            i += 1
        buf_write(b, p + start, i - start)
        if i == n:
            break
        i += 1
        if i < n and loadb(p + i) == 37:
            buf_byte(b, 37)
            i += 1
            continue
        if i < n and loadb(p + i) == 40:  # '(': a key
            i += 1
            close = i
            while close < n and loadb(p + close) != 41:
                close += 1
            if close == n:
                error(text("incomplete format key"), 0)
            if tag_of(args) != L.TAG_DICT:
                error(text("format requires a mapping"), 0)
            key = string_from(L.TAG_STRING, p + i, close - i)
            arg = dict_lookup(args, key)
            if arg == 0:
                e = buf_new(64)
                buf_str(e, text("key not found: "))
                buf_str(e, key)
                error(buf_to_string(e, L.TAG_STRING), 0)
            i = close + 1
        else:
            if index >= nargs:
                error(text("not enough arguments for format string"), 0)
            arg = args
            if is_tuple:
                arg = load(args + L.TUPLE_ITEMS + 8 * index)
        if i == n:
            error(text("incomplete format"), 0)
        write_conversion(b, loadb(p + i), arg)
        i += 1
        index += 1
    if index < nargs and tag_of(args) != L.TAG_DICT:
        error(text("too many arguments for format string"), 0)

    return buf_to_string(b, L.TAG_STRING)


def write_conversion(b: int, c: int, arg: int) -> None:
    """One ``%`` conversion of ``arg``; ``c`` is the conversion's letter."""
    if c == 115:  # s
        if tag_of(arg) == L.TAG_STRING:
            buf_str(b, arg)
        else:
            write_repr(b, arg)
    elif c == 114:  # r
        write_repr(b, arg)
    elif c == 100 or c == 105 or c == 111 or c == 120 or c == 88:  # d i o x X
        if FLOATS and tag_of(arg) == L.TAG_FLOAT:
            arg = float_conversion_int(c, arg)
        if tag_of(arg) != L.TAG_INT:
            error_conversion(
                c, text("format requires integer: cannot convert "), arg, text(" to int")
            )
        if c == 111:
            write_int_base(b, arg, 3, 0)
        elif c == 120:
            write_int_base(b, arg, 4, 0)
        elif c == 88:
            write_int_base(b, arg, 4, 16)
        else:
            write_int(b, arg)
    elif c == 101 or c == 102 or c == 103 or c == 69 or c == 70 or c == 71:  # e f g E F G
        tag = tag_of(arg)
        if FLOATS and (tag == L.TAG_FLOAT or tag == L.TAG_INT):
            write_number_as_float(b, arg, c)
            return
        if tag != L.TAG_INT:
            error_conversion(c, text("format requires float, not "), arg, text(""))
        write_int_as_float(b, arg, c)
    elif c == 99:  # c
        write_character(b, arg)
    elif c == 37:  # %
        buf_byte(b, 37)
    else:
        e = buf_new(32)
        buf_str(e, text("unknown conversion %"))
        write_code_point(e, c)
        error(buf_to_string(e, L.TAG_STRING), 0)


def error_conversion(c: int, middle: int, arg: int, after: int) -> None:
    e = buf_new(64)
    buf_byte(e, 37)
    buf_byte(e, c)
    buf_byte(e, 32)
    buf_str(e, middle)
    buf_str(e, type_name(arg))
    buf_str(e, after)
    error(buf_to_string(e, L.TAG_STRING), 0)


def write_code_point(b: int, code: int) -> None:
    p = buf_reserve(b, 4)
    store(b + L.BUF_LEN, load(b + L.BUF_LEN) + utf8_encode(p, code))


def write_character(b: int, arg: int) -> None:
    """``%c``: an int code point, or a string of exactly one code point."""
    tag = tag_of(arg)
    if tag == L.TAG_INT:
        code = 0 - 1
        if arg & 1:
            code = sar(arg, 1)
        if slt(code, 0) or slt(0x10FFFF, code):
            e = buf_new(64)
            buf_str(e, text("%c format requires a valid Unicode code point, got "))
            write_int(e, arg)
            error(buf_to_string(e, L.TAG_STRING), 0)
        write_code_point(b, code)
        return
    if tag == L.TAG_STRING:
        n = load(arg + L.STR_LEN)
        decoded = 0
        if n > 0:
            decoded = rune_at(arg + L.STR_DATA, n)
        if n == 0 or (decoded >> 32) != n:
            error(text("%c format requires a single-character string"), 0)
        write_code_point(b, decoded & 0xFFFFFFFF)
        return
    e = buf_new(64)
    buf_str(e, text("%c format requires int or single-character string, not "))
    buf_str(e, type_name(arg))
    error(buf_to_string(e, L.TAG_STRING), 0)


def write_int_base(b: int, v: int, bits: int, case_offset: int) -> None:
    """An int in base 8 (``bits`` 3) or 16 (``bits`` 4), with a sign when negative;
    ``case_offset`` 16 for upper case hex digits."""
    if v & 1:
        n = sar(v, 1)
        if slt(n, 0):
            buf_byte(b, 45)
            n = 0 - n
        write_word_base(b, n, bits, case_offset)
        return
    info = load(v + L.BIGINT_INFO)
    if info >> 32:
        buf_byte(b, 45)
    limbs = v + L.BIGINT_LIMBS
    count = info & L.BIGINT_COUNT_MASK
    total = count * 64
    # the position of the top digit: the highest non-zero group of ``bits`` bits
    position = total - total % bits
    while position > 0 and big_bits(limbs, count, position, bits) == 0:
        position -= bits
    while True:
        digit = big_bits(limbs, count, position, bits)
        buf_byte(b, loadb(_DIGITS + L.STR_DATA + case_offset + digit))
        if position == 0:
            break
        position -= bits
    return


def big_bits(limbs: int, count: int, position: int, bits: int) -> int:
    """The ``bits`` bits of a magnitude (``count`` 64-bit limbs) from ``position``;
    bits above the top limb are zeros (the words there are not limbs)."""
    limb = position >> 6
    shift = position & 63
    value = 0
    if limb < count:
        value = load(limbs + 8 * limb) >> shift
    if shift + bits > 64 and limb + 1 < count:
        value = value | (load(limbs + 8 * limb + 8) << (64 - shift))
    return value & ((1 << bits) - 1)


def write_word_base(b: int, n: int, bits: int, case_offset: int) -> None:
    digits = 1
    while (n >> (bits * digits)) != 0 and digits * bits < 64:
        digits += 1
    while digits > 0:
        digits -= 1
        digit = (n >> (bits * digits)) & ((1 << bits) - 1)
        buf_byte(b, loadb(_DIGITS + L.STR_DATA + case_offset + digit))


# -- ints in the float conversions ----------------------------------------------------


def write_int_as_float(b: int, v: int, c: int) -> None:
    """``%e %f %g`` (and ``%E %F %G``) of an int: the float it converts to (rounded to
    53 bits, ties to even), written as Go's ``strconv.FormatFloat`` writes it."""
    if (v & 1) == 0:
        write_big_int_as_float(b, v, c)
        return
    if c == 70:
        buf_str(b, text("%F"))  # Go's strconv.FormatFloat has no 'F' and says so
        return
    n = sar(v, 1)
    if slt(n, 0):
        buf_byte(b, 45)
        n = 0 - n
    shift = 0
    if n > EXACT:
        # round to 53 significant bits, ties to even
        while (n >> shift) >= EXACT:
            shift += 1
        mantissa = n >> shift
        rest = n & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and (mantissa & 1)):
            mantissa += 1
        if mantissa == EXACT:
            mantissa = EXACT >> 1
            shift += 1
        n = mantissa << shift
    upper = 0
    if c < 97:
        upper = 32
        c += 32
    if c == 102:  # f
        buf_decimal(b, n)
        buf_str(b, text(".000000"))
        return
    if c == 101:  # e: seven significant digits, ties to even
        digits = decimal_digits(n)
        exponent = digits - 1
        mantissa = n
        if digits > 7:
            scale = power_of_ten(digits - 7)
            mantissa = n // scale
            rest = n % scale
            if rest > scale // 2 or (rest == scale // 2 and (mantissa & 1)):
                mantissa += 1
                if mantissa == 10_000_000:
                    mantissa = 1_000_000
                    exponent += 1
        else:
            mantissa = n * power_of_ten(7 - digits)
        write_mantissa(b, mantissa, 7)
        write_exponent(b, exponent, upper)
        return
    # g: the shortest digits that convert back to the same float
    digits_value = shortest_digits(n, shift)
    count = decimal_digits(digits_value)
    exponent = decimal_digits(n) - 1
    if exponent >= 6:
        write_mantissa(b, digits_value, count)
        write_exponent(b, exponent, upper)
        return
    buf_decimal(b, n)
    buf_str(b, text(".0"))


def shortest_digits(n: int, shift: int) -> int:
    """The fewest significant decimal digits (as a number, trailing zeros dropped) that
    name a value rounding to the float ``n`` (whose last bit weighs ``2**shift``)."""
    total = decimal_digits(n)
    if shift > 0:
        mantissa = n >> shift
        above = 1 << (shift - 1)
        below = above
        if mantissa == (EXACT >> 1):
            below = above >> 1
        inclusive = (mantissa & 1) == 0
        keep = 1
        while keep < total:
            scale = power_of_ten(total - keep)
            low = (n // scale) * scale
            high = low + scale
            low_ok = n - low < below or (inclusive and n - low == below)
            high_ok = high - n < above or (inclusive and high - n == above)
            if low_ok and (high_ok == 0 or n - low <= high - n):
                return strip_zeros(low // scale)
            if high_ok:
                return strip_zeros(high // scale)
            keep += 1
    return strip_zeros(n)


#: Room the digits of a double's integral value and ``.000000`` need in a buffer.
_BIG_DIGITS: Final = 330


def write_big_int_as_float(b: int, v: int, c: int) -> None:
    """``write_int_as_float`` for a big int: rounded to ``m * 2**shift`` (``m`` of 53 bits,
    ``shift >= 10``), whose exact digits come from big-int arithmetic (temporaries given
    back: the buffer gets its room first, so that it does not grow among them)."""
    info = load(v + L.BIGINT_INFO)
    count = info & L.BIGINT_COUNT_MASK
    limbs = v + L.BIGINT_LIMBS
    # the top 64 bits, and whether any below them is set
    top = load(limbs + 8 * count - 8)
    shift = 0
    while (top << shift) < (1 << 63):
        shift += 1
    length = 64 * count - shift
    next_limb = 0
    if count > 1:
        next_limb = load(limbs + 8 * count - 16)
    if shift != 0:
        top = (top << shift) | (next_limb >> (64 - shift))
        next_limb = next_limb << shift  # what is left of it
    sticky = next_limb != 0
    i = 0
    while i + 2 < count and sticky == 0:
        sticky = load(limbs + 8 * i) != 0
        i += 1
    m = top >> 11
    rest = top & 0x7FF
    if rest > 0x400 or (rest == 0x400 and (sticky or (m & 1))):
        m += 1
    shift = length - 53
    if m == (1 << 53):
        m = 1 << 52
        shift += 1
    if shift + 53 > 1024:  # beyond every double: the conversion gives an infinity
        if info >> 32:
            buf_str(b, text("-inf"))
        else:
            buf_str(b, text("+inf"))
        return
    if c == 70:
        buf_str(b, text("%F"))
        return
    if info >> 32:
        buf_byte(b, 45)
    upper = 0
    if c < 97:
        upper = 32
        c += 32
    buf_reserve(b, _BIG_DIGITS)
    # what the divisions of a double's value (17 limbs) by powers of ten ask for
    big_prepare(6 * (17 + 17) + 4)
    mark = heap_pointer()
    value = big_lshift(int_from_magnitude(m, 0), shift)
    start = load(b + L.BUF_LEN)
    big_write_decimal(b, value)
    digits = load(b + L.BUF_DATA) + start
    count = load(b + L.BUF_LEN) - start
    if c == 102:  # f
        heap_release(mark)
        buf_str(b, text(".000000"))
        return
    exponent = count - 1
    if c == 101:  # e: seven digits, halfway to even on the exact value
        kept = big_digits_value(digits, 7)
        last = loadb(digits + 7)
        if last > 53 or (last == 53 and (big_digits_nonzero(digits + 8, count - 8) or (kept & 1))):
            kept += 1
        if kept == 10_000_000:
            kept = 1_000_000
            exponent += 1
        heap_release(mark)
        store(b + L.BUF_LEN, start)
        write_mantissa(b, kept, 7)
        write_exponent(b, exponent, upper)
        return
    # g: the fewest digits naming a value that rounds to m * 2**shift (at most 17)
    gap = big_lshift(3, shift - 1)  # half the gap to the next double up
    low_gap = gap
    if m == (1 << 52):
        low_gap = big_lshift(3, shift - 2)
    inclusive = (m & 1) == 0
    keep = 1
    kept = 0
    while keep <= 17:
        unit = big_pow10(count - keep)
        under = big_mod(value, unit)  # from the digits kept to the value
        over = big_sub(unit, under)  # from the value to the kept digits plus one
        low_order = big_compare(under, low_gap)
        high_order = big_compare(over, gap)
        low_ok = low_order == 0 - 1 or (inclusive and low_order == 0)
        high_ok = high_order == 0 - 1 or (inclusive and high_order == 0)
        if low_ok or high_ok:
            kept = big_digits_value(digits, keep)
            if high_ok and (low_ok == 0 or big_compare(over, under) == 0 - 1):
                kept += 1
            break
        keep += 1
    if kept == power_of_ten(keep):  # the digits plus one carried into a new digit
        kept = 1
        exponent += 1
    heap_release(mark)
    store(b + L.BUF_LEN, start)
    kept = strip_zeros(kept)
    write_mantissa(b, kept, decimal_digits(kept))
    write_exponent(b, exponent, upper)


def big_digits_value(digits: int, n: int) -> int:
    """The number the first ``n`` decimal digits at ``digits`` spell (``n <= 18``)."""
    value = 0
    i = 0
    while i < n:
        value = value * 10 + loadb(digits + i) - 48
        i += 1
    return value


def big_digits_nonzero(digits: int, n: int) -> int:
    i = 0
    while i < n:
        if loadb(digits + i) != 48:
            return 1
        i += 1
    return 0


def strip_zeros(n: int) -> int:
    while n != 0 and n % 10 == 0:
        n = n // 10
    return n


def decimal_digits(n: int) -> int:
    digits = 1
    while n >= 10:
        n = n // 10
        digits += 1
    return digits


def power_of_ten(k: int) -> int:
    p = 1
    while k > 0:
        p = p * 10
        k -= 1
    return p


def write_mantissa(b: int, mantissa: int, count: int) -> None:
    """``d.ddd`` from the ``count`` digits of ``mantissa`` (just ``d`` for one)."""
    scale = power_of_ten(count - 1)
    buf_byte(b, 48 + mantissa // scale)
    if count > 1:
        buf_byte(b, 46)
        rest = mantissa % scale
        while scale > 1:
            scale = scale // 10
            buf_byte(b, 48 + rest // scale)
            rest = rest % scale


def write_exponent(b: int, exponent: int, upper: int) -> None:
    buf_byte(b, 101 - upper)
    buf_byte(b, 43)
    if exponent < 10:
        buf_byte(b, 48)
    buf_decimal(b, exponent)
