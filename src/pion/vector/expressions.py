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
nor evaluating recurses once per operand.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

from pion.protocol.errors import ReplyError

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<prop>@[A-Za-z_](?:[\w.$]|\[[^\]]*\])*)"  # @price*2 is a product; @$.a[*] keeps its brackets
    r"|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[-+*/%^()<>!,]))"
)


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
        append(_Tok(kind, match.group(kind), match.start(kind)))
        pos = match.end()
    tail = text[pos:]
    if tail.strip():
        bad = pos + len(tail) - len(tail.lstrip())
        raise ReplyError(f"Syntax error at offset {bad} near {text[bad:bad + 10]}")
    out.append(_Tok("eof", "", len(text)))
    return out


Expr = Callable[[dict[str, Any]], Any]

#: parentheses, unary operators and function calls nested deeper than this are a syntax error
MAX_NESTING = 50


def compile_expression(text: str) -> Expr:
    return compile_with_properties(text)[0]


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
                expr = (lambda inner: lambda row: None if (v := _num(inner(row))) is None else -v)(expr)
            elif sign == "!":
                expr = (lambda inner: lambda row: 0.0 if _truth(inner(row)) else 1.0)(expr)
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
            name = tok.text[1:]
            return lambda row: row.get(name)
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
            return _function(tok.text, args, tok.pos)
        if tok.kind == "op" and tok.text == "(":
            self.enter(tok)
            self.i += 1
            inner = self.parse_or()
            if not self.accept(")"):
                raise self.error()
            self.depth -= 1
            return inner
        raise self.error()


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
        return lambda row: _compare(op, left(row), right(row))
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
            return lambda row: 1.0 if any(_truth(item(row)) for item in items) else 0.0
        return lambda row: 1.0 if all(_truth(item(row)) for item in items) else 0.0
    table = _ADDITIVE if level == _ADD else _MULTIPLICATIVE
    return _fold(first, [(table[name], _build(item)) for name, item in rest])


def _fold(first: Expr, rest: list[tuple[Callable, Expr]]) -> Expr:
    """``a op b op c ...`` of one left-associative level, folded left to right in a loop."""
    if not rest:
        return first
    if len(rest) == 1:
        return _binary(first, rest[0][1], rest[0][0])

    def run(row: dict[str, Any]) -> Any:
        acc = _num(first(row))
        for op, expr in rest:
            b = _num(expr(row))
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
        return _binary(items[0], items[1], _power)

    def run(row: dict[str, Any]) -> Any:
        acc = _num(items[-1](row))
        for expr in reversed(items[:-1]):
            a = _num(expr(row))
            if a is None or acc is None:
                return None
            try:
                acc = float(_power(a, acc))
            except (ZeroDivisionError, OverflowError, ValueError):
                acc = math.nan
        return acc
    return run


def _add(a: float, b: float) -> float:
    return a + b


def _sub(a: float, b: float) -> float:
    return a - b


def _mul(a: float, b: float) -> float:
    return a * b


_ADDITIVE: dict[str, Callable] = {"+": _add, "-": _sub}


def _truth(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        number = _parse_number(value)
        return bool(number) if number is not None else bool(value)
    return bool(value)


def _parse_number(value: Any) -> float | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _num(value: Any) -> float | None:
    return _parse_number(value)


def _binary(left: Expr, right: Expr, op) -> Expr:
    def run(row: dict[str, Any]) -> Any:
        a, b = _num(left(row)), _num(right(row))
        if a is None or b is None:
            return None
        try:
            return float(op(a, b))
        except (ZeroDivisionError, OverflowError, ValueError):
            return math.nan
    return run


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    return a / b


def _mod(a: float, b: float) -> float:
    if int(b) == 0:
        return math.nan
    return float(int(a) % int(b))


def _power(a: float, b: float) -> float:
    return math.pow(a, b)


_MULTIPLICATIVE: dict[str, Callable] = {"*": _mul, "/": _div, "%": _mod}


def _compare(op: str, a: Any, b: Any) -> float:
    if a is None or b is None:
        if op == "!=":
            return 1.0 if (a is None) != (b is None) else 0.0
        return 1.0 if op == "==" and a is None and b is None else 0.0
    na, nb = _num(a), _num(b)
    if na is not None and nb is not None and not (isinstance(a, str) and isinstance(b, str) and (
            _parse_number(a) is None or _parse_number(b) is None)):
        x, y = na, nb
    else:
        x, y = str(a), str(b)
    result = {"==": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]
    return 1.0 if result else 0.0


# -- functions --------------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float):
        return format_value(value)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _math1(fn):
    def make(args, pos):
        _arity(args, 1, 1, pos)
        (a,) = args
        def run(row):
            x = _num(a(row))
            if x is None:
                return None
            try:
                return float(fn(x))
            except (ValueError, OverflowError):
                return math.nan
        return run
    return make


def _arity(args: list, lo: int, hi: int, pos: int) -> None:
    if not lo <= len(args) <= hi:
        raise ReplyError("Invalid arguments for function")


def _f_pow(args, pos):
    _arity(args, 2, 2, pos)
    return _binary(args[0], args[1], _power)


def _f_exists(args, pos):
    _arity(args, 1, 1, pos)
    return lambda row: 1.0 if args[0](row) is not None else 0.0


def _f_case(args, pos):
    _arity(args, 3, 3, pos)
    cond, yes, no = args
    return lambda row: yes(row) if _truth(cond(row)) else no(row)


def _str1(fn):
    def make(args, pos):
        _arity(args, 1, 1, pos)
        return lambda row: None if (s := _text(args[0](row))) is None else fn(s)
    return make


def _f_substr(args, pos):
    _arity(args, 3, 3, pos)
    def run(row):
        s = _text(args[0](row))
        if s is None:
            return None
        offset, count = int(_num(args[1](row)) or 0), int(_num(args[2](row)) or 0)
        if offset < 0:
            offset = max(0, len(s) + offset)
        return s[offset:] if count < 0 else s[offset:offset + count]
    return run


def _f_contains(args, pos):
    _arity(args, 2, 2, pos)
    def run(row):
        s, sub = _text(args[0](row)), _text(args[1](row))
        if s is None or sub is None:
            return 0.0
        return float(s.count(sub)) if sub else float(len(s) + 1)
    return run


def _f_startswith(args, pos):
    _arity(args, 2, 2, pos)
    return lambda row: 1.0 if (s := _text(args[0](row))) is not None and s.startswith(_text(args[1](row)) or "") else 0.0


def _f_endswith(args, pos):
    _arity(args, 2, 2, pos)
    return lambda row: 1.0 if (s := _text(args[0](row))) is not None and s.endswith(_text(args[1](row)) or "") else 0.0


def _f_format(args, pos):
    if not args:
        raise ReplyError("Invalid arguments for function")
    def run(row):
        fmt = _text(args[0](row)) or ""
        values = [a(row) for a in args[1:]]
        out, j, i = [], 0, 0
        while i < len(fmt):
            if fmt[i] == "%" and i + 1 < len(fmt):
                if fmt[i + 1] == "%":
                    out.append("%")
                elif fmt[i + 1] == "s":
                    out.append(_text(values[j]) if j < len(values) and values[j] is not None else "(null)")
                    j += 1
                i += 2
                continue
            out.append(fmt[i])
            i += 1
        return "".join(out)
    return run


def _f_split(args, pos):
    _arity(args, 1, 3, pos)
    def run(row):
        s = _text(args[0](row))
        if s is None:
            return None
        seps = _text(args[1](row)) if len(args) > 1 else ","
        strip = _text(args[2](row)) if len(args) > 2 else " "
        parts = re.split("|".join(re.escape(c) for c in (seps or ",")), s)
        return [p.strip(strip) for p in parts if p.strip(strip)]
    return run


def _f_to_number(args, pos):
    _arity(args, 1, 1, pos)
    return lambda row: _num(args[0](row))


def _f_to_str(args, pos):
    _arity(args, 1, 1, pos)
    return lambda row: _text(args[0](row))


def _time_part(fmt_fn):
    def make(args, pos):
        _arity(args, 1, 1, pos)
        def run(row):
            t = _num(args[0](row))
            return None if t is None else float(fmt_fn(time.gmtime(int(t)), int(t)))
        return run
    return make


def _f_timefmt(args, pos):
    _arity(args, 1, 2, pos)
    def run(row):
        t = _num(args[0](row))
        if t is None:
            return None
        fmt = _text(args[1](row)) if len(args) > 1 else "%FT%TZ"
        fmt = fmt.replace("%F", "%Y-%m-%d").replace("%T", "%H:%M:%S")
        return time.strftime(fmt, time.gmtime(int(t)))
    return run


def _f_parsetime(args, pos):
    _arity(args, 2, 2, pos)
    def run(row):
        s, fmt = _text(args[0](row)), _text(args[1](row))
        if s is None or fmt is None:
            return None
        import calendar

        try:
            return float(calendar.timegm(time.strptime(s, fmt.replace("%F", "%Y-%m-%d").replace("%T", "%H:%M:%S"))))
        except ValueError:
            return None
    return run


def _f_geodistance(args, pos):
    from pion.vector.fields import EARTH_RADIUS_M

    if len(args) not in (2, 3, 4):
        raise ReplyError("Invalid arguments for function")

    def point(values):
        if len(values) == 2:
            return _num(values[0]), _num(values[1])
        text = _text(values[0])
        if text is None:
            return None, None
        parts = text.replace(",", " ").split()
        if len(parts) != 2:
            return None, None
        return _num(parts[0]), _num(parts[1])

    def run(row):
        vals = [a(row) for a in args]
        # two points, each a "lon,lat" text or two numbers: (p, p), (p, lon, lat), (lon, lat, p), (lon, lat, lon, lat)
        first = 1 if len(vals) == 2 or (len(vals) == 3 and _num(vals[0]) is None) else 2
        lon1, lat1 = point(vals[:first])
        lon2, lat2 = point(vals[first:])
        if None in (lon1, lat1, lon2, lat2):
            return None
        la1, la2 = math.radians(lat1), math.radians(lat2)
        u = math.sin((la2 - la1) / 2)
        v = math.sin(math.radians(lon2 - lon1) / 2)
        meters = 2.0 * EARTH_RADIUS_M * math.asin(math.sqrt(u * u + math.cos(la1) * math.cos(la2) * v * v))
        return round(meters * 100) / 100  # RediSearch answers centimetres: 13953.93
    return run


_FUNCTIONS: dict[str, Callable] = {
    "log": _math1(math.log), "log2": _math1(math.log2), "exp": _math1(math.exp), "ceil": _math1(math.ceil),
    "floor": _math1(math.floor), "abs": _math1(abs), "sqrt": _math1(math.sqrt), "pow": _f_pow,
    "exists": _f_exists, "case": _f_case, "upper": _str1(str.upper), "lower": _str1(str.lower),
    "strlen": _str1(lambda s: float(len(s))), "substr": _f_substr, "contains": _f_contains,
    "startswith": _f_startswith, "endswith": _f_endswith, "format": _f_format, "split": _f_split,
    "to_number": _f_to_number, "to_str": _f_to_str, "timefmt": _f_timefmt, "parsetime": _f_parsetime,
    "hour": _time_part(lambda t, s: s - s % 3600), "minute": _time_part(lambda t, s: s - s % 60),
    "day": _time_part(lambda t, s: s - s % 86400), "month": _time_part(
        lambda t, s: __import__("calendar").timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))),
    "year": _time_part(lambda t, s: t.tm_year), "dayofweek": _time_part(lambda t, s: (t.tm_wday + 1) % 7),
    "dayofmonth": _time_part(lambda t, s: t.tm_mday), "dayofyear": _time_part(lambda t, s: t.tm_yday - 1),
    "monthofyear": _time_part(lambda t, s: t.tm_mon - 1), "geodistance": _f_geodistance,
}


def _function(name: str, args: list[Expr], pos: int) -> Expr:
    maker = _FUNCTIONS.get(name.lower())
    if maker is None:
        raise ReplyError(f"Unknown function name '{name}'")
    return maker(args, pos)


def format_value(value: Any) -> str:
    """RediSearch's number spelling (``num_to_str``): integers as such, else ``%.12g``."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == int(value) and -(2**63) <= value < 2**63:
            return str(int(value))
        return "%.12g" % value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


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
        return _truth(expr(row))

    return accept
