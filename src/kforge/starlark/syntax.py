"""Starlark source to a checked syntax tree.

Python's own parser reads the source (Starlark's grammar is a subset of Python's,
with a few differences this module settles), then :class:`_Checker` refuses
everything Starlark refuses (``class``, ``import``, ``try``, ``with``, ``yield``,
``global``, ``is``, chained comparisons, ``**`` exponentiation, f-strings, sets,
decorators, ...) with ``FILE:LINE:COL: message``.  String literals are decoded
again by Starlark's rules from their source text (``"\\x80"`` is refused in a
``str``, accepted in ``bytes``; no implicit concatenation; only ``r``, ``b`` and
``rb`` prefixes), and :class:`Positions` gives each operator, call and index the
column the Go implementation reports.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
import warnings
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kforge.starlark.errors import StarlarkCompileError

_ESCAPES = {
    "a": 7,
    "b": 8,
    "f": 12,
    "n": 10,
    "r": 13,
    "t": 9,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
}


@dataclass
class Source:
    """A parsed Starlark file."""

    filename: str
    text: str
    module: ast.Module
    positions: Positions
    #: Decoded string literals by node id: (bytes, is_bytes_literal).
    strings: dict[int, tuple[bytes, bool]]

    def release(self) -> None:
        """Let go of the tree, the tokens and the strings once the file is lowered: the
        lowering may leave reference cycles that reach this file (closures that call
        themselves), and the compiler pauses the cycle collector, so what they hold
        would wait for a collection that walks all of it."""
        self.module.body.clear()
        self.positions.release()
        self.strings.clear()


class Positions:
    """Token positions, to find the operator of a binary expression and the bracket of
    a call, index or attribute (Python's tree gives only the start of each node)."""

    _KEYWORDS = frozenset({"in", "not", "for", "lambda", "def", "load", "if", "else"})

    def __init__(self, tokens: list[tokenize.TokenInfo]) -> None:
        self._tokens = [
            t
            for t in tokens
            if t.type == tokenize.OP or (t.type == tokenize.NAME and t.string in self._KEYWORDS)
        ]
        self._starts = [t.start for t in self._tokens]

    def release(self) -> None:
        """Let go of the tokens (see :meth:`Source.release`)."""
        self._tokens.clear()
        self._starts.clear()

    def after(self, node: ast.AST, symbols: tuple[str, ...]) -> tuple[int, int]:
        """1-based (line, col) of the first token in ``symbols`` after ``node`` ends,
        skipping closing parentheses; the node's own start if none is found."""
        end = (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)
        index = bisect_left(self._starts, end)
        while index < len(self._tokens):
            token = self._tokens[index]
            if token.string in symbols:
                return token.start[0], token.start[1] + 1
            if token.string != ")":
                break
            index += 1
        return getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1

    def before(self, node: ast.AST, symbol: str) -> tuple[int, int]:
        """1-based (line, col) of the last ``symbol`` token before ``node`` starts (the
        ``for`` of a comprehension clause, say); the node's own start if there is none."""
        start = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        index = bisect_left(self._starts, start) - 1
        while index >= 0:
            token = self._tokens[index]
            if token.string == symbol:
                return token.start[0], token.start[1] + 1
            index -= 1
        return getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1


def parse(text: str, filename: str) -> Source:
    """Parse and check ``text``; raises :class:`StarlarkCompileError` at the first problem."""
    if text.startswith("\ufeff"):
        text = text[1:]
    tokens = _tokens_or_none(text)  # if none, the parser below says what is wrong, and where
    ascii_bytes = _ascii_bytes_literals(text, tokens)
    renamed, aliases = _rename_python_keywords(ascii_bytes, tokens)
    # a non-ASCII bytes literal made wider moves the tokens after it on its line
    renamed = _parenthesize_lambda_conditions(
        renamed, tokens if ascii_bytes is text else _tokens_or_none(renamed)
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = ast.parse(renamed, filename=filename, feature_version=(3, 11))

    except SyntaxError as error:
        line, col, message = error.lineno or 1, error.offset or 1, _syntax_message(error)
        message = _assignment_message(error, renamed) or message
        if message == "positional argument may not follow named":
            col = _positional_after_named(tokens, line, col) or col

        if message == "expected ':'" and _at_line_end(text, line, col):
            line, col, message = line + 1, 1, "got newline, want ':'"  # Go: at the newline token
        if message.endswith("was never closed"):  # Go stops at the end of the file
            line, col = text.count("\n") + 1, 1
            closing = {"(": ")", "[": "]", "{": "}"}.get(message[1:2], ")")
            message = f"got end of file, want '{closing}'"
        raise StarlarkCompileError(filename, line, col, message) from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise StarlarkCompileError(filename, 1, 1, f"cannot parse: {error}") from None
    if not tokens:
        tokens = _tokens(text, filename)
    nodes = _nodes(module)
    if aliases:
        _restore_names(nodes, aliases)
    _check_numbers(tokens, filename)
    _to_character_columns(nodes, text)
    strings = _decode_strings(nodes, tokens, filename)
    if not _plainly_starlark(nodes):  # else there is nothing for the checker to refuse
        _Checker(filename, tokens).visit(module)
    return Source(filename, text, module, Positions(tokens), strings)


def _ascii_bytes_literals(text: str, tokens: list[tokenize.TokenInfo]) -> str:
    """The source with every non-ASCII character inside a bytes literal replaced by as
    many ``x`` as it has UTF-8 bytes: Python's parser refuses them, Starlark takes them
    as their UTF-8 bytes, and keeping byte lengths keeps every column Python reports."""
    spans = []
    for token in tokens:
        if token.type == tokenize.STRING and not token.string.isascii():
            prefix = token.string[: len(token.string) - len(token.string.lstrip("rbRB"))]
            if "b" in prefix.lower():
                spans.append(token)
    if not spans:
        return text
    lines = text.splitlines(keepends=True)
    for token in reversed(spans):
        (start_line, start_col), (end_line, end_col) = token.start, token.end
        replaced = "".join("x" * len(c.encode()) if ord(c) > 127 else c for c in token.string)
        first = lines[start_line - 1]
        last = lines[end_line - 1]
        merged = first[:start_col] + replaced + last[end_col:]
        lines[start_line - 1 : end_line] = merged.splitlines(keepends=True) or [""]
    return "".join(lines)


#: Words Python reserves but Starlark takes as plain identifiers (``assert.eq(...)``).
_PYTHON_ONLY_KEYWORDS = frozenset({"assert", "async", "await"})


def _rename_python_keywords(
    text: str, tokens: list[tokenize.TokenInfo]
) -> tuple[str, dict[str, str]]:
    """The source with each identifier Python would take for a keyword replaced by a
    fresh name of the same length (so every column stays), and the renaming."""
    found = [t for t in tokens if t.type == tokenize.NAME and t.string in _PYTHON_ONLY_KEYWORDS]
    if not found:
        return text, {}
    used = {t.string for t in tokens if t.type == tokenize.NAME}
    aliases: dict[str, str] = {}
    for word in {t.string for t in found}:
        for number in range(10**6):
            suffix = str(number)
            candidate = word[: len(word) - len(suffix)] + suffix
            if candidate not in used and candidate.isidentifier():
                aliases[word] = candidate
                used.add(candidate)
                break
    lines = text.splitlines(keepends=True)
    for token in reversed(found):
        line, col = token.start
        original = lines[line - 1]
        # tokenize counts characters; the line is rebuilt around the same characters
        lines[line - 1] = (
            original[:col] + aliases[token.string] + original[col + len(token.string) :]
        )
    return "".join(lines), {alias: word for word, alias in aliases.items()}


def _nodes(module: ast.Module) -> list[ast.AST]:
    """Every node of the tree in ``ast.walk``'s order (breadth first), but the operator
    and context markers (``Add``, ``Load``: a third of the nodes, and nothing reads
    them from here), at a third of its cost: the front end reads them three times."""
    nodes: list[ast.AST] = [module]
    fields_of = _WALKED_FIELDS
    for node in nodes:  # the list grows as it is read
        kind = type(node)
        fields = fields_of.get(kind)
        if fields is None:
            fields = fields_of[kind] = tuple(
                name for name in node._fields if name not in ("ctx", "op", "ops")
            )
        for name in fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                nodes.append(value)
            elif isinstance(value, list):
                nodes.extend(item for item in value if isinstance(item, ast.AST))
    return nodes


#: For each kind of node, the fields :func:`_nodes` walks.
_WALKED_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def _restore_names(nodes: list[ast.AST], aliases: dict[str, str]) -> None:
    """Give the renamed identifiers their own names back, wherever a name appears."""
    for node in nodes:
        if isinstance(node, ast.Name) and node.id in aliases:
            node.id = aliases[node.id]
        elif isinstance(node, ast.Attribute) and node.attr in aliases:
            node.attr = aliases[node.attr]
        elif isinstance(node, ast.arg | ast.keyword) and node.arg in aliases:
            node.arg = aliases[node.arg or ""]

        elif isinstance(node, ast.FunctionDef) and node.name in aliases:
            node.name = aliases[node.name]


def _to_character_columns(nodes: list[ast.AST], text: str) -> None:
    """Python's tree counts columns in UTF-8 bytes; Starlark (and tokenize) counts
    characters: convert every node's columns on lines that are not ASCII."""
    lines = text.splitlines()
    wide = {number for number, line in enumerate(lines, start=1) if not line.isascii()}
    if not wide:
        return

    def convert(line: int, col: int) -> int:
        if line not in wide or line > len(lines):
            return col
        return len(lines[line - 1].encode()[:col].decode("utf-8", "replace"))

    for node in nodes:
        line = getattr(node, "lineno", None)
        if line is not None and line in wide:
            node.col_offset = convert(line, node.col_offset)  # type: ignore[attr-defined]
        end_line = getattr(node, "end_lineno", None)
        if (
            end_line is not None
            and end_line in wide
            and getattr(node, "end_col_offset", None) is not None
        ):
            node.end_col_offset = convert(end_line, node.end_col_offset)  # type: ignore[attr-defined]


def _tokens_or_none(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _parenthesize_lambda_conditions(text: str, tokens: list[tokenize.TokenInfo]) -> str:
    """Starlark lets a comprehension's ``if`` take any expression (``[x for x in y if
    lambda: z]``), Python only a narrower one: put such a ``lambda`` in parentheses.
    ``tokens`` are ``text``'s, or those of a renaming of it that kept every token's
    place and kind (empty when it does not tokenize: then nothing is changed)."""
    if "lambda" not in text or not tokens:
        return text
    inserts: list[tuple[tuple[int, int], str]] = []
    depth = 0
    opened: list[int] = []  # depth at which a parenthesized lambda waits to be closed
    for index, token in enumerate(tokens):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            while opened and opened[-1] == depth:
                inserts.append((token.start, ")"))
                opened.pop()
            depth -= 1
        elif (
            token.type == tokenize.NAME
            and token.string in ("for", "if")
            and opened
            and opened[-1] == depth
        ):
            previous = tokens[index - 1]
            if not (previous.type == tokenize.NAME and previous.string == "else"):
                inserts.append((token.start, ")"))
                opened.pop()
        if (
            token.type == tokenize.NAME
            and token.string == "lambda"
            and depth > 0
            and index > 0
            and tokens[index - 1].type == tokenize.NAME
            and tokens[index - 1].string == "if"
        ):
            inserts.append((token.start, "("))
            opened.append(depth)
    if not inserts:
        return text
    lines = text.splitlines(keepends=True)
    for (line, col), piece in sorted(inserts, reverse=True):
        lines[line - 1] = lines[line - 1][:col] + piece + lines[line - 1][col:]
    return "".join(lines)


def _at_line_end(text: str, line: int, col: int) -> bool:

    lines = text.splitlines()
    return 0 < line <= len(lines) and not lines[line - 1][col - 1 :].strip()


#: Go's names for the expressions an assignment cannot have on its left.
_GO_EXPRESSION_NAMES: dict[type[ast.AST], str] = {
    ast.Call: "callexpr",
    ast.BinOp: "binaryexpr",
    ast.BoolOp: "binaryexpr",
    ast.Compare: "binaryexpr",
    ast.UnaryOp: "unaryexpr",
    ast.IfExp: "condexpr",
    ast.Lambda: "lambdaexpr",
    ast.Constant: "literal",
    ast.Dict: "dictexpr",
    ast.ListComp: "comprehension",
    ast.DictComp: "comprehension",
}


def _assignment_message(error: SyntaxError, text: str) -> str | None:
    """Go's words for an assignment to something that cannot be assigned (Python's
    parser refuses what Go's resolver does): ``can't assign to callexpr``."""
    augmented = error.msg.endswith("is an illegal expression for augmented assignment")
    if not (error.msg.startswith("cannot assign to ") or augmented):
        return None
    if error.lineno is None or error.offset is None or error.end_lineno != error.lineno:
        return None
    line = text.splitlines()[error.lineno - 1] if text.count("\n") >= error.lineno - 1 else ""
    target = line[error.offset - 1 : (error.end_offset or 0) - 1]
    try:
        node = ast.parse(target.strip(), mode="eval").body
    except SyntaxError:
        return None
    if augmented and isinstance(node, ast.Tuple | ast.List):
        kind = "tuple" if isinstance(node, ast.Tuple) else "list"
        return f"can't use {kind} expression in augmented assignment"
    name = _GO_EXPRESSION_NAMES.get(type(node))
    return None if name is None else f"can't assign to {name}"


def _syntax_message(error: SyntaxError) -> str:
    message = error.msg
    if message.startswith("invalid syntax. "):
        message = message[len("invalid syntax. ") :]
    if message == "arguments cannot follow var-keyword argument":
        kwargs = re.search(r"\*\*\s*(\w+)", error.text or "")
        return f"required parameter may not follow **{kwargs.group(1) if kwargs else ''}"
    return _GO_SYNTAX_MESSAGES.get(message, message)


_GO_SYNTAX_MESSAGES = {
    "named arguments must follow bare *": "bare * must be followed by keyword-only parameters",
    "non-default argument follows default argument": "required parameter may not follow optional",
    "* argument may appear only once": "multiple * parameters not allowed",
    "positional argument follows keyword argument": "positional argument may not follow named",
}


def _positional_after_named(tokens: list[tokenize.TokenInfo], line: int, col: int) -> int | None:
    """The column of the first positional argument after a named one in the call that
    closes at (line, col), where Go reports it; Python reports the closing parenthesis."""
    closing = next(
        (i for i, t in enumerate(tokens) if t.start == (line, col - 1) and t.string == ")"), None
    )
    if closing is None:
        return None
    depth, opening = 0, closing
    while opening > 0:
        opening -= 1
        text = tokens[opening].string
        depth += text in (")", "]", "}")
        if text in ("(", "[", "{"):
            if depth == 0:
                break
            depth -= 1
    named, depth, start = False, 0, opening + 1
    for index in range(opening + 1, closing + 1):
        text = tokens[index].string
        if depth == 0 and text in (",", ")"):
            argument = [t for t in tokens[start:index] if t.type != tokenize.NL]
            if argument:
                is_named = len(argument) > 1 and argument[1].string == "="
                starred = argument[0].string in ("*", "**")
                if named and not is_named and not starred:
                    return argument[0].start[1] + 1 if argument[0].start[0] == line else None
                named = named or is_named
            start = index + 1
        depth += text in ("(", "[", "{")
        depth -= text in (")", "]", "}")
    return None


def _tokens(text: str, filename: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError) as error:
        raise StarlarkCompileError(filename, 1, 1, f"cannot tokenize: {error}") from None


def _check_numbers(tokens: list[tokenize.TokenInfo], filename: str) -> None:
    for token in tokens:
        if token.type != tokenize.NUMBER:
            continue
        text = token.string.lower()
        where = (filename, token.start[0], token.start[1] + 1)
        if "_" in text:
            raise StarlarkCompileError(*where, f"invalid number literal {token.string}")
        if text.endswith("j"):
            raise StarlarkCompileError(*where, "complex numbers are not part of Starlark")
        is_float = not text.startswith(("0x", "0o", "0b")) and ("." in text or "e" in text)
        if is_float and math.isinf(float(text)):  # Go reports it where the literal ends
            raise StarlarkCompileError(
                filename, token.end[0], token.end[1] + 1, "invalid float literal"
            )


def _decode_strings(
    nodes: list[ast.AST], tokens: list[tokenize.TokenInfo], filename: str
) -> dict[int, tuple[bytes, bool]]:
    """Decode every string literal from its source text by Starlark's rules."""
    by_start: dict[tuple[int, int], int] = {}
    for index, token in enumerate(tokens):
        if token.type == tokenize.STRING:
            by_start[token.start] = index
    decoded: dict[int, tuple[bytes, bool]] = {}
    found: int | None
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            raise StarlarkCompileError(
                filename, node.lineno, node.col_offset + 1, "f-strings are not part of Starlark"
            )
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str | bytes):
            continue
        found = by_start.get((node.lineno, node.col_offset))
        if found is None:
            raise StarlarkCompileError(
                filename, node.lineno, node.col_offset + 1, "cannot find this string literal"
            )
        index = found
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if following is not None and following.type == tokenize.STRING:
            raise StarlarkCompileError(
                filename,
                following.start[0],
                following.start[1] + 1,
                "got string literal, want newline (adjacent strings are not concatenated)",
            )
        token = tokens[index]
        try:
            decoded[id(node)] = unquote(token.string)
        except ValueError as error:
            raise StarlarkCompileError(
                filename, token.start[0], token.start[1] + 1, str(error)
            ) from None
    return decoded


def unquote(literal: str) -> tuple[bytes, bool]:
    """The bytes of a Starlark string literal (with its prefix and quotes), and whether
    it is a bytes literal.  Raises ``ValueError`` with the Go implementation's words."""
    raw = is_bytes = False
    body = literal
    if body.startswith("r"):
        raw, body = True, body[1:]
    if body.startswith("b"):
        is_bytes, body = True, body[1:]
    if not body or body[0] not in "'\"":
        raise ValueError(
            f"string prefix {literal[: len(literal) - len(body)]!r} is not part of Starlark"
        )
    quote = body[0]
    triple = len(body) >= 6 and body.startswith(quote * 3)
    body = body[3:-3] if triple else body[1:-1]
    out = bytearray()
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c == "\r":
            out += b"\n"
            i += 2 if body[i + 1 : i + 2] == "\n" else 1
            continue
        if c != "\\" or raw:
            start = i
            while i < n and body[i] != "\r" and (raw or body[i] != "\\"):
                i += 1
            out += body[start:i].encode("utf-8", "surrogatepass")
            continue
        if i + 1 >= n:
            raise ValueError("truncated escape sequence \\")
        e = body[i + 1]
        if e == "\n":
            i += 2
        elif e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif "0" <= e <= "7":
            value = 0
            j = i + 1
            while j < n and j < i + 4 and "0" <= body[j] <= "7":
                value = value * 8 + ord(body[j]) - 48
                j += 1
            if not is_bytes and value > 127:
                raise ValueError(
                    f"non-ASCII octal escape \\{value:o} (use \\u{value:04X} for the UTF-8 "
                    f"encoding of U+{value:04X})"
                )
            if value >= 256:
                raise ValueError(f"invalid escape sequence \\{value:03o}")
            out.append(value)
            i = j
        elif e == "x":
            digits = body[i + 2 : i + 4]
            if len(digits) < 2:
                raise ValueError(f"truncated escape sequence {body[i:]}")
            try:
                value = int(digits, 16)
            except ValueError:
                raise ValueError(f"invalid escape sequence {body[i : i + 4]}") from None
            if not is_bytes and value > 127:
                raise ValueError(
                    f"non-ASCII hex escape {body[i : i + 4]} (use \\u{value:04X} for the UTF-8 "
                    f"encoding of U+{value:04X})"
                )
            out.append(value)
            i += 4
        elif e in "uU":
            size = 6 if e == "u" else 10
            digits = body[i + 2 : i + size]
            if len(digits) < size - 2:
                raise ValueError(f"truncated escape sequence {body[i:]}")
            try:
                value = int(digits, 16)
            except ValueError:
                raise ValueError(f"invalid escape sequence {body[i : i + size]}") from None
            if value > 0x10FFFF:
                raise ValueError(f"code point out of range: {body[i : i + size]} (max \\U0010ffff)")
            if 0xD800 <= value < 0xE000:
                raise ValueError(f"invalid Unicode code point U+{value:04X}")
            out += chr(value).encode()
            i += size
        else:
            raise ValueError(f"invalid escape sequence \\{e}")
    return bytes(out), is_bytes


_REFUSED_STATEMENTS = {
    ast.ClassDef: "class definitions are not part of Starlark",
    ast.AsyncFunctionDef: "async functions are not part of Starlark",
    ast.Delete: "del is not part of Starlark",
    ast.AnnAssign: "type annotations are not part of Starlark",
    ast.AsyncFor: "async is not part of Starlark",
    ast.With: "with statements are not part of Starlark",
    ast.AsyncWith: "with statements are not part of Starlark",
    ast.Match: "match statements are not part of Starlark",
    ast.Raise: "raise is not part of Starlark (use fail)",
    ast.Try: "try statements are not part of Starlark",
    ast.TryStar: "try statements are not part of Starlark",
    ast.Assert: "assert statements are not part of Starlark",
    ast.Import: "import is not part of Starlark (use load)",
    ast.ImportFrom: "import is not part of Starlark (use load)",
    ast.Global: "global declarations are not part of Starlark",
    ast.Nonlocal: "nonlocal declarations are not part of Starlark",
}
_REFUSED_EXPRESSIONS = {
    ast.NamedExpr: "assignment expressions (:=) are not part of Starlark",
    ast.Set: "set literals are not part of Starlark",
    ast.SetComp: "set comprehensions are not part of Starlark",
    ast.GeneratorExp: "generator expressions are not part of Starlark",
    ast.Await: "await is not part of Starlark",
    ast.Yield: "yield is not part of Starlark",
    ast.YieldFrom: "yield is not part of Starlark",
    ast.JoinedStr: "f-strings are not part of Starlark",
    ast.FormattedValue: "f-strings are not part of Starlark",
}


class _Checker(ast.NodeVisitor):
    """Refuses what Starlark's grammar does not have."""

    def __init__(self, filename: str, tokens: list[tokenize.TokenInfo]) -> None:
        self.filename = filename
        self.tokens = tokens
        self.depth = 0  # function nesting

    def fail(self, node: ast.AST, message: str, col: int | None = None) -> StarlarkCompileError:
        line = getattr(node, "lineno", 1)
        column = col if col is not None else getattr(node, "col_offset", 0) + 1
        return StarlarkCompileError(self.filename, line, column, message)

    def generic_visit(self, node: ast.AST) -> None:
        refused = _REFUSED_STATEMENTS.get(type(node)) or _REFUSED_EXPRESSIONS.get(type(node))
        if refused:
            raise self.fail(node, refused)
        super().generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body:
            if _is_load(statement):
                self.check_load(statement)
            else:
                self.visit(statement)

    def check_load(self, statement: ast.stmt) -> None:
        assert isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
        call = statement.value
        if not call.args or any(
            not (isinstance(a, ast.Constant) and isinstance(a.value, str)) for a in call.args
        ):
            raise self.fail(call, "load operand must be a string literal")
        if len(call.args) < 2 and not call.keywords:
            raise self.fail(call, "load statement must import at least 1 symbol")
        for keyword in call.keywords:
            if keyword.arg is None or not (
                isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)
            ):
                raise self.fail(keyword, "load operand must be a string literal")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.decorator_list:
            raise self.fail(node.decorator_list[0], "decorators are not part of Starlark")
        if node.returns is not None:
            raise self.fail(node.returns, "type annotations are not part of Starlark")
        self.check_arguments(node.args)
        self.depth += 1
        for statement in node.body:
            if _is_load(statement):
                raise self.fail(statement, "load statement within a function")
            self.visit(statement)
        self.depth -= 1
        for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d)):
            self.visit(default)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.check_arguments(node.args)
        self.visit(node.body)
        for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d)):
            self.visit(default)

    def check_arguments(self, args: ast.arguments) -> None:
        if args.posonlyargs:
            raise self.fail(
                args.posonlyargs[0], "positional-only parameters are not part of Starlark"
            )
        for arg in (*args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None and arg.annotation is not None:
                raise self.fail(arg.annotation, "type annotations are not part of Starlark")

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) > 1:
            raise self.fail(
                node.targets[1], "got '=', want newline", self.equals_after(node.targets[1])
            )
        self.check_target(node.targets[0])
        self.visit(node.value)
        self.visit(node.targets[0])

    def equals_after(self, target: ast.expr) -> int | None:
        """Where Go reports the `=` after `target`: one column past it (it looked for `==`)."""
        end = (target.end_lineno or target.lineno, target.end_col_offset or 0)
        for token in self.tokens:
            if token.type == tokenize.OP and token.string == "=" and token.start >= end:
                return token.start[1] + 2 if token.start[0] == target.lineno else None
        return None

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.Pow | ast.MatMult):
            raise self.fail(node, "this operator is not part of Starlark")
        if not isinstance(node.target, ast.Name | ast.Subscript | ast.Attribute):
            raise self.fail(node.target, "invalid target for augmented assignment")
        self.generic_visit(node)

    def check_target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.check_target(element)
        elif isinstance(target, ast.Starred):
            raise self.fail(target, "starred assignment is not part of Starlark")
        elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Slice):
            raise self.fail(target, "can't assign to sliceexpr")
        elif not isinstance(target, ast.Name | ast.Subscript | ast.Attribute):
            raise self.fail(target, "can't assign to this expression")
        if isinstance(target, ast.Name) and target.id == "load":
            raise self.fail(target, "got '=', want '(' (load is a keyword)")

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.fail(node.orelse[0], "for ... else is not part of Starlark")
        self.check_target(node.target)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.fail(node.orelse[0], "while ... else is not part of Starlark")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if _is_load(node):
            raise self.fail(node, "load statement not at top level")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "load":
            raise self.fail(node, "load is a keyword and cannot be used as a name")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Pow):
            raise self.fail(node, "the ** operator is not part of Starlark")
        if isinstance(node.op, ast.MatMult):
            raise self.fail(node, "the @ operator is not part of Starlark")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op in node.ops:
            if isinstance(op, ast.Is | ast.IsNot):
                raise self.fail(node, "the is operator is not part of Starlark (use ==)")
        if len(node.ops) > 1:
            raise self.fail(
                node,
                f"{_COMPARISON[type(node.ops[1])]} does not associate with "
                f"{_COMPARISON[type(node.ops[0])]} (use parens)",
            )
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, complex):
            raise self.fail(node, "complex numbers are not part of Starlark")
        if node.value is Ellipsis:
            raise self.fail(node, "... is not part of Starlark")

    def visit_Dict(self, node: ast.Dict) -> None:
        for key in node.keys:
            if key is None:
                raise self.fail(node, "** in a dict literal is not part of Starlark")
        self.generic_visit(node)

    def visit_Starred(self, node: ast.Starred) -> None:
        raise self.fail(node, "* is allowed only in calls and parameter lists")

    def visit_Call(self, node: ast.Call) -> None:
        self.visit(node.func)
        for argument in node.args:
            self.visit(argument.value if isinstance(argument, ast.Starred) else argument)
        for keyword in node.keywords:
            self.visit(keyword.value)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if node.is_async:
            raise self.fail(node.target, "async is not part of Starlark")
        self.check_target(node.target)
        self.generic_visit(node)


_COMPARISON = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}


def _plain_target(target: ast.expr) -> bool:
    """Whether ``target`` is one :meth:`_Checker.check_target` takes without a word."""
    if isinstance(target, ast.Name):
        return target.id != "load"
    if isinstance(target, ast.Tuple | ast.List):
        return all(_plain_target(element) for element in target.elts)
    if isinstance(target, ast.Subscript):
        return not isinstance(target.slice, ast.Slice)
    return isinstance(target, ast.Attribute)


def _plain_arguments(args: ast.arguments) -> bool:
    return not args.posonlyargs and all(
        arg is None or arg.annotation is None
        for arg in (*args.args, *args.kwonlyargs, args.vararg, args.kwarg)
    )


_Suspect = Callable[[Any], bool]
#: For each kind of node :class:`_Checker` may refuse, whether this one might be refused:
#: ``True`` for kinds it always refuses, or is careful with (a ``load``).  A superset of
#: what it refuses, read in one pass over the flat tree (``*`` outside a call's
#: arguments is counted apart, see :func:`_plainly_starlark`).
_SUSPECT: dict[type[ast.AST], _Suspect] = {
    **dict.fromkeys((*_REFUSED_STATEMENTS, *_REFUSED_EXPRESSIONS), lambda _: True),
    ast.Name: lambda node: node.id == "load",
    ast.BinOp: lambda node: isinstance(node.op, ast.Pow | ast.MatMult),
    ast.AugAssign: lambda node: (
        isinstance(node.op, ast.Pow | ast.MatMult)
        or not isinstance(node.target, ast.Name | ast.Subscript | ast.Attribute)
    ),
    ast.Compare: lambda node: len(node.ops) > 1 or isinstance(node.ops[0], ast.Is | ast.IsNot),
    ast.Constant: lambda node: isinstance(node.value, complex) or node.value is Ellipsis,
    ast.Dict: lambda node: None in node.keys,
    ast.Assign: lambda node: len(node.targets) > 1 or not _plain_target(node.targets[0]),
    ast.For: lambda node: bool(node.orelse) or not _plain_target(node.target),
    ast.While: lambda node: bool(node.orelse),
    ast.comprehension: lambda node: bool(node.is_async) or not _plain_target(node.target),
    ast.FunctionDef: lambda node: (
        bool(node.decorator_list) or node.returns is not None or not _plain_arguments(node.args)
    ),
    ast.Lambda: lambda node: not _plain_arguments(node.args),
}


def _plainly_starlark(nodes: list[ast.AST]) -> bool:
    """Whether no node is one :class:`_Checker` might refuse: then it need not walk the
    tree (when one might be, it walks it and says which, and where, in its own order)."""
    suspect = _SUSPECT.get
    starred = 0  # ``*x`` anywhere, less those that are a call's arguments (Starlark's)
    for node in nodes:
        kind = type(node)
        if kind is ast.Starred:
            starred += 1
        elif kind is ast.Call:
            for argument in node.args:  # type: ignore[attr-defined]
                if type(argument) is ast.Starred:
                    starred -= 1
        else:
            check = suspect(kind)
            if check is not None and check(node):
                return False
    return starred == 0


def _is_load(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id == "load"
    )
