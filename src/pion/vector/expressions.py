"""RediSearch's expression language (APPLY, FILTER, FT.CREATE ... FILTER, FT.HYBRID FILTER).

Operands: numbers, quoted strings, ``@property`` references and function calls; operators
``+ - * / % ^`` (``^`` is power), comparisons ``== != < <= > >=``, logic ``&& || !``, parentheses.
Values are floats, strings or None (a missing property). Like RediSearch, a string that looks
like a number takes part in arithmetic as that number, a comparison of a number with a string
compares them as numbers when the string parses, and a missing property makes arithmetic yield
None and comparisons false. Functions: math (``log log2 exp ceil floor abs sqrt pow``),
strings (``upper lower substr strlen format contains startswith endswith split to_number
to_str``), ``exists``, ``case``, dates (``timefmt parsetime day hour minute month year
dayofweek dayofmonth dayofyear monthofyear``) and ``geodistance``.
Errors read like RediSearch's: ``Syntax error at offset N near X``, ``Unknown function name 'f'``.

Hostile input: parentheses, unary signs and function calls nest at most ``MAX_NESTING`` levels
(RediSearch's expression parser, a lemon parser with its default 100-entry stack, gives up at
about half that), and a flat chain of one precedence level (``@n+@n+...``, ``a && b && ...``,
``a ^ b ^ ...``) compiles to one closure that folds its operands in a loop, so neither parsing
nor evaluating recurses once per operand. The values, operators and functions the compiled
closures call are ``expression_runtime``'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from pion.protocol.errors import ReplyError
from pion.storage.gc_pause import gc_paused
from pion.vector.expression_runtime import (
    ADDITIVE,
    MULTIPLICATIVE,
    Expr,
    binary,
    compare,
    format_value,
    function,
    num,
    power,
    truth,
)

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<prop>@[A-Za-z_](?:[\w.$]|\[[^\]]*\])*)"  # @price*2 is a product; @$.a[*] keeps its brackets
    r"|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[-+*/%^()<>!,]))"
)

__all__ = ["MAX_NESTING", "Expr", "compile_expression", "compile_with_properties", "document_filter", "format_value",
           "referenced_properties"]


class _Tok:
    __slots__ = ("kind", "text", "pos")

    def __init__(self, kind: str, text: str, pos: int) -> None:
        self.kind, self.text, self.pos = kind, text, pos


def _lex(text: str) -> list[_Tok]:
    """The tokens, in one C-level scan (``finditer``): a 20,000-term expression lexes in
    milliseconds. A gap between two matches holds a character no token starts with."""
    out: list[_Tok] = []
    append = out.append
    pos = 0
    for match in _TOKEN.finditer(text):
        if match.start() != pos:
            break
        kind = match.lastgroup or "op"
        start, end = match.span(kind)
        append(_Tok(kind, text[start:end], start))
        pos = end
    tail = text[pos:]
    if tail.strip():
        bad = pos + len(tail) - len(tail.lstrip())
        raise ReplyError(f"Syntax error at offset {bad} near {text[bad:bad + 10]}")
    out.append(_Tok("eof", "", len(text)))
    return out



#: parentheses, unary operators and function calls nested deeper than this are a syntax error
MAX_NESTING = 50


def compile_expression(text: str) -> Expr:
    return compile_with_properties(text)[0]


@gc_paused
def compile_with_properties(text: str) -> tuple[Expr, list[str]]:
    """The expression and the properties it references, from one lexing of ``text``."""
    parser = _Parser(text)
    expr = parser.parse_or()
    if parser.tok.kind != "eof":
        raise parser.error()
    return expr, list(dict.fromkeys(tok.text[1:] for tok in parser.toks if tok.kind == "prop"))


def referenced_properties(text: str) -> list[str]:
    return [tok.text[1:] for tok in _lex(text) if tok.kind == "prop"]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _lex(text)
        self.i = 0
        self.depth = 0

    def enter(self, tok: _Tok) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ReplyError(f"Syntax error at offset {tok.pos} near {tok.text or '<end>'}: "
                             f"expression nested deeper than {MAX_NESTING} levels")

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self) -> ReplyError:
        tok = self.tok
        return ReplyError(f"Syntax error at offset {tok.pos} near {tok.text or '<end>'}")

    def accept(self, text: str) -> bool:
        tok = self.toks[self.i]
        if tok.text == text and tok.kind == "op":
            self.i += 1
            return True
        return False

    def op(self) -> str:
        """The operator at the cursor, or "" (the hot loops look once, not once per operator)."""
        tok = self.toks[self.i]
        return tok.text if tok.kind == "op" else ""

    def parse_or(self) -> Expr:
        """A whole expression: operator precedence in one loop over the operands (shunting-yard),
        so each operand costs one ``parse_unary`` call whatever the precedence levels above it
        (a recursive-descent chain cost six calls an operand: 20,000 terms took a second)."""
        operands: list[Any] = [self.parse_unary()]
        ops: list[str] = []
        compared = False  # a comparison in the current && / || operand: they do not chain
        while True:
            op = self.op()
            level = _LEVEL.get(op)
            if level is None:
                break
            if level == _CMP:
                if compared:
                    break  # a < b < c: the caller answers the syntax error at the second one
                compared = True
            elif level <= _AND:
                compared = False
            while ops and (_LEVEL[ops[-1]] > level or (_LEVEL[ops[-1]] == level and level != _POW)):
                right = operands.pop()
                operands.append((ops.pop(), operands.pop(), right))
            ops.append(op)
            self.i += 1
            tok = self.toks[self.i]
            if tok.kind == "prop":  # the common operand, without parse_unary's calls
                self.i += 1
                operands.append(_property(tok.text[1:]))
            else:
                operands.append(self.parse_unary())
        while ops:
            right = operands.pop()
            operands.append((ops.pop(), operands.pop(), right))
        return _build(operands[0])

    def parse_unary(self) -> Expr:
        signs: list[str] = []
        while self.op() in _SIGNS:
            self.enter(self.toks[self.i])
            signs.append(self.take().text)
        expr = self.parse_primary()
        self.depth -= len(signs)
        for sign in reversed(signs):
            if sign == "-":
                expr = (lambda inner: lambda row: None if (v := num(inner(row))) is None else -v)(expr)
            elif sign == "!":
                expr = (lambda inner: lambda row: 0.0 if truth(inner(row)) else 1.0)(expr)
        return expr

    def parse_primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "num":
            self.i += 1
            value = float(tok.text)
            return lambda row: value
        if tok.kind == "str":
            self.i += 1
            value = re.sub(r"\\(.)", r"\1", tok.text[1:-1])
            return lambda row: value
        if tok.kind == "prop":
            self.i += 1
            return _property(tok.text[1:])
        if tok.kind == "name":
            self.i += 1
            lowered = tok.text.lower()
            if lowered in ("null",):
                return lambda row: None
            if lowered in ("inf",):
                return lambda row: math.inf
            if not self.accept("("):
                raise ReplyError(f"Syntax error at offset {tok.pos} near {tok.text}")
            self.enter(tok)
            args: list[Expr] = []
            if not self.accept(")"):
                while True:
                    args.append(self.parse_or())
                    if self.accept(")"):
                        break
                    if not self.accept(","):
                        raise self.error()
            self.depth -= 1
            return function(tok.text, args, tok.pos)
        if tok.kind == "op" and tok.text == "(":
            self.enter(tok)
            self.i += 1
            inner = self.parse_or()
            if not self.accept(")"):
                raise self.error()
            self.depth -= 1
            return inner
        raise self.error()


def _property(name: str) -> Expr:
    return lambda row: row.get(name)


_SIGNS = frozenset(("-", "+", "!"))
_OR, _AND, _CMP, _ADD, _MUL, _POW = range(1, 7)
_LEVEL = {"||": _OR, "&&": _AND, "==": _CMP, "!=": _CMP, "<=": _CMP, ">=": _CMP, "<": _CMP, ">": _CMP,
          "+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "%": _MUL, "^": _POW}


def _build(node: Any) -> Expr:
    """Closures from the parse tree (``(op, left, right)`` tuples over compiled operands). A chain
    of one level (``a + b - c ...``, ``a && b && ...``, ``a ^ b ^ ...``) becomes one closure that
    loops over its operands; recursion is bounded by the precedence levels, not the length."""
    if node.__class__ is not tuple:
        return node
    op = node[0]
    level = _LEVEL[op]
    if level == _CMP:
        left, right = _build(node[1]), _build(node[2])
        return lambda row: compare(op, left(row), right(row))
    if level == _POW:  # right-associative: the chain runs down the right
        items = []
        while node.__class__ is tuple and node[0] == "^":
            items.append(_build(node[1]))
            node = node[2]
        items.append(_build(node))
        return _power_chain(items)
    rest: list[tuple[str, Any]] = []
    while node.__class__ is tuple and _LEVEL[node[0]] == level:  # left-associative: down the left
        rest.append((node[0], node[2]))
        node = node[1]
    first = _build(node)
    rest.reverse()
    if level == _OR or level == _AND:
        items = [first] + [_build(item) for _, item in rest]
        if level == _OR:
            return lambda row: 1.0 if any(truth(item(row)) for item in items) else 0.0
        return lambda row: 1.0 if all(truth(item(row)) for item in items) else 0.0
    table = ADDITIVE if level == _ADD else MULTIPLICATIVE
    return _fold(first, [(table[name], _build(item)) for name, item in rest])


def _fold(first: Expr, rest: list[tuple[Callable, Expr]]) -> Expr:
    """``a op b op c ...`` of one left-associative level, folded left to right in a loop."""
    if not rest:
        return first
    if len(rest) == 1:
        return binary(first, rest[0][1], rest[0][0])

    def run(row: dict[str, Any]) -> Any:
        acc = num(first(row))
        for op, expr in rest:
            b = num(expr(row))
            if acc is None or b is None:
                return None
            try:
                acc = float(op(acc, b))
            except (ZeroDivisionError, OverflowError, ValueError):
                acc = math.nan
        return acc
    return run


def _power_chain(items: list[Expr]) -> Expr:
    """``a ^ b ^ c ...``: right-associative, folded from the right in a loop."""
    if len(items) == 2:
        return binary(items[0], items[1], power)

    def run(row: dict[str, Any]) -> Any:
        acc = num(items[-1](row))
        for expr in reversed(items[:-1]):
            a = num(expr(row))
            if a is None or acc is None:
                return None
            try:
                acc = float(power(a, acc))
            except (ZeroDivisionError, OverflowError, ValueError):
                acc = math.nan
        return acc
    return run


def document_filter(text: str, definition: Any):
    """FT.CREATE ... FILTER: a predicate over a stored value (HASH fields or JSON members)."""
    expr, props = compile_with_properties(text)

    def accept(key: bytes, value: Any) -> bool:
        from pion.storage.hash_value import HashValue
        from pion.storage.json_path import JsonPathError, Path

        row: dict[str, Any] = {"__key": key.decode("utf-8", "replace")}
        for prop in props:
            spec = definition.field(prop)
            ident = spec.identifier if spec is not None else prop
            if value.__class__ is HashValue:
                raw = value.fields.get(ident.encode())
                if raw is not None:
                    row[prop] = bytes(raw).decode("utf-8", "replace")
            else:
                try:
                    found = Path(ident).compile().values(value.root)
                except JsonPathError:
                    found = []
                if found and not isinstance(found[0], (dict, list)):
                    row[prop] = found[0]
        return truth(expr(row))

    return accept


def root_description(text: str) -> str:
    """What RediSearch's FT.PROFILE names an APPLY or FILTER after (``Projector - Function upper``,
    ``Filter - Predicate >``): the expression's outermost part: a comparison or ``&&``/``||``
    (Predicate), an arithmetic operator (Operator), a function call, a property or a literal."""
    toks = _lex(text)[:-1]
    depth = 0
    best: tuple[int, int, str] | None = None  # (level, -position, op): the lowest level, rightmost
    for n, tok in enumerate(toks):
        if tok.kind != "op":
            continue
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        elif depth == 0 and tok.text in _LEVEL and n > 0 and not (toks[n - 1].kind == "op" and toks[n - 1].text != ")"):
            level = _LEVEL[tok.text]
            key = (level, -n if level != _POW else n, tok.text)
            if best is None or key < best:
                best = key
    if best is not None:
        kind = "Predicate" if best[0] <= _CMP else "Operator"
        return f"{kind} {best[2]}"
    first = toks[0] if toks else None
    while first is not None and first.kind == "op" and first.text == "(" and len(toks) > 2:
        toks = toks[1:-1]
        first = toks[0]
    if first is None:
        return "Literal"
    if first.kind == "name" and len(toks) > 1 and toks[1].text == "(":
        return f"Function {first.text}"
    if first.kind == "prop":
        return f"Property {first.text[1:]}"
    return f"Literal {first.text.strip(chr(39) + chr(34))}"
