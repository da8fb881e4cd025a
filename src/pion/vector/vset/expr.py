"""VSIM's FILTER expressions, with the semantics of Redis 8's vector sets (expr.c).

Syntax: numbers, strings in single or double quotes (``\\"``, ``\\'``, ``\\\\``, ``\\n``, ``\\r``,
``\\t`` escapes), ``null``, tuples ``[1, "a"]``, selectors ``.field`` (top-level JSON keys only;
a selector is ``.`` followed by letters, digits, ``_`` or ``-``), parentheses, and the
operators, from the tightest: ``! not`` (unary, right to left), ``**`` (right to left),
``* / %``, ``+ -``, ``> >= < <= == != in``, ``and &&``, ``or ||``. A ``-`` directly before a
digit is a sign at the start or after an operator other than ``)``.

Values: numbers are doubles; JSON ``true``/``false`` are 1/0; a string used as a number is read
with strtod (0 if it is not wholly a number); ``==`` compares strings as strings, numbers as
numbers, ``null`` only equals ``null``, anything else as numbers; ``in`` tests membership in a
tuple, or a substring when both sides are strings; the empty string, 0 and ``null`` are false,
every other non-number is true.

Matching: an element without attributes, with attributes that are not a JSON object, or
lacking (or holding an object under) any field the expression selects, does not match: never
an error. The tokenizer and compiler follow expr.c's shunting-yard closely, so the same
expressions are refused, and ``CompileError.pos`` is where Redis reports the error (0 for an
error found after tokenizing, as Redis's token offsets are all 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from pion.storage.gc_pause import gc_paused


class CompileError(ValueError):
    def __init__(self, pos: int) -> None:
        super().__init__(f"syntax error at {pos}")
        self.pos = pos


class _Null:
    __slots__ = ()

    def __repr__(self) -> str:
        return "null"


NULL = _Null()

# opcode: (precedence, arity)
_OPAREN, _CPAREN, _NOT, _POW, _MUL, _DIV, _MOD, _ADD, _SUB = range(9)
_GT, _GTE, _LT, _LTE, _EQ, _NEQ, _IN, _AND, _OR = range(9, 18)
_OPS: dict[bytes, int] = {
    b"(": _OPAREN, b")": _CPAREN, b"!": _NOT, b"not": _NOT, b"**": _POW, b"*": _MUL, b"/": _DIV,
    b"%": _MOD, b"+": _ADD, b"-": _SUB, b">": _GT, b">=": _GTE, b"<": _LT, b"<=": _LTE,
    b"==": _EQ, b"!=": _NEQ, b"in": _IN, b"and": _AND, b"&&": _AND, b"or": _OR, b"||": _OR,
}
_PREC = {_OPAREN: 7, _CPAREN: 7, _NOT: 6, _POW: 5, _MUL: 4, _DIV: 4, _MOD: 4, _ADD: 3, _SUB: 3,
         _GT: 2, _GTE: 2, _LT: 2, _LTE: 2, _EQ: 2, _NEQ: 2, _IN: 2, _AND: 1, _OR: 0}
_SPECIAL = frozenset(b"+-*%/!()<>=|&")
_SPACE = frozenset(b" \t\n\v\f\r")
_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
_NUMBER_CHARS = frozenset(b"0123456789.eE")
#: what C's strtod consumes wholly from the characters the tokenizer collects
_LITERAL_NUMBER = re.compile(rb"-?\d+(\.\d*)?([eE]\d+)?\Z")
#: a string strtod reads entirely (leading spaces allowed, as strtod skips them)
_STRTOD = re.compile(rb"[ \t\n\v\f\r]*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf(inity)?|nan)\Z", re.I)


class _Selector:
    __slots__ = ("name",)

    def __init__(self, name: bytes) -> None:
        self.name = name


class _Op:
    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


#: one shared, never changed, _Op per operator (tokens and programs refer to these)
_OP = {code: _Op(code) for code in set(_OPS.values())}
#: the common tokens, one regex match each: spaces, then a selector, a number's characters (checked
#: as number() does) or a run of up to five operator characters (as operator() reads it)
_FAST = re.compile(rb"[ \t\n\v\f\r]*+(?:\.(?P<sel>[A-Za-z0-9_-]++)|(?P<num>[0-9][0-9.eE]*+)|(?P<op>[A-Za-z+\-*%/!()<>=|&]{1,5}))")


def _is_selector_char(c: int) -> bool:
    return c < 128 and (chr(c).isalnum() or c in b"_-")


def _is_alpha(c: int) -> bool:
    return c < 128 and chr(c).isalpha()


def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


# -- tokenizer ------------------------------------------------------------------------------


class _Tokenizer:
    def __init__(self, text: bytes) -> None:
        self.s = text
        self.p = 0
        self.tokens: list[Any] = []  # values, _Selector or _Op

    def run(self) -> list[Any]:
        """The tokens: the common ones by one regex match each (``_FAST``), what that does not take
        (strings, tuples, signed numbers, whatever is refused) by ``one``, expr.c's rules."""
        s = self.s
        tokens = self.tokens
        append = tokens.append
        match = _FAST.match
        while True:
            m = match(s, self.p)
            if m is not None:
                kind = m.lastgroup
                if kind == "sel":
                    append(_Selector(m.group(kind)))
                    self.p = m.end()
                    continue
                if kind == "num":
                    chunk = m.group(kind)
                    if len(chunk) < 255 and _LITERAL_NUMBER.match(chunk):
                        append(float(chunk))
                        self.p = m.end()
                        continue
                else:
                    run = m.group(kind)
                    start = m.start(kind)
                    if run == b"null":
                        append(NULL)
                        self.p = m.end()
                        continue
                    signed = run[0] == 45 and start + 1 < len(s) and _is_digit(s[start + 1]) and (
                        not tokens or (tokens[-1].__class__ is _Op and tokens[-1].code != _CPAREN))
                    code = None
                    for width in (3, 2, 1):  # the longest operator the run starts with
                        code = _OPS.get(run[:width]) if len(run) >= width else None
                        if code is not None:
                            break
                    if code is not None and not signed:
                        append(_OP[code])
                        self.p = start + width
                        continue
            if not self.one():
                return tokens

    def one(self) -> bool:
        """One token by expr.c's rules (after spaces); False at the end of the text."""
        s = self.s
        while self.p < len(s) and s[self.p] in _SPACE:
            self.p += 1
        if self.p >= len(s):
            return False
        last = self.tokens[-1] if self.tokens else None
        minus_is_number = last is None or (last.__class__ is _Op and last.code != _CPAREN)
        c = s[self.p]
        nxt = s[self.p + 1] if self.p + 1 < len(s) else -1
        if _is_digit(c) or (minus_is_number and c == 45 and _is_digit(nxt)):
            token = self.number()
        elif c in (34, 39):
            token = self.string()
        elif c == 46 and nxt >= 0 and _is_selector_char(nxt):
            token = self.selector()
        elif c == 91:
            token = self.tuple_()
        elif _is_alpha(c) or c in _SPECIAL:
            token = self.operator()
        else:
            token = None
        if token is None:
            raise CompileError(self.p)
        self.tokens.append(token)
        return True

    def number(self) -> float | None:
        s, start = self.s, self.p
        while self.p < len(s) and (s[self.p] in _NUMBER_CHARS or (self.p == start and s[self.p] == 45)):
            if self.p - start >= 255:
                return None
            self.p += 1
        chunk = s[start : self.p]
        if not _LITERAL_NUMBER.match(chunk):
            return None
        return float(chunk)

    def string(self) -> bytes | None:
        s = self.s
        quote = s[self.p]
        self.p += 1
        out = bytearray()
        while self.p < len(s):
            c = s[self.p]
            if c == 92 and self.p + 1 < len(s):
                esc = s[self.p + 1]
                out += _ESCAPES.get(esc, bytes([esc]))
                self.p += 2
                continue
            if c == quote:
                self.p += 1
                return bytes(out)
            out.append(c)
            self.p += 1
        return None

    def selector(self) -> _Selector:
        s = self.s
        self.p += 1
        start = self.p
        while self.p < len(s) and _is_selector_char(s[self.p]):
            self.p += 1
        return _Selector(s[start : self.p])

    def tuple_(self) -> tuple | None:
        s = self.s
        self.p += 1
        items: list[Any] = []
        while True:
            while self.p < len(s) and s[self.p] in _SPACE:
                self.p += 1
            if self.p < len(s) and s[self.p] == 93:
                self.p += 1
                return tuple(items)
            c = s[self.p] if self.p < len(s) else -1
            if _is_digit(c) or c == 45:
                item = self.number()
            elif c in (34, 39):
                item = self.string()
            else:
                return None
            if item is None:
                return None
            items.append(item)
            while self.p < len(s) and s[self.p] in _SPACE:
                self.p += 1
            c = s[self.p] if self.p < len(s) else -1
            if c == 93:
                self.p += 1
                return tuple(items)
            if c != 44:
                return None
            self.p += 1

    def operator(self) -> Any:
        # expr.c reads the whole run of letters and operator characters, then takes the longest
        # operator it starts with; only its first five bytes can matter (``null`` must be the whole
        # run, no operator is longer than three), so the scan stops there: reading the run to its
        # end for every token made 5,000 ``(`` cost 12.5 million steps
        s, start = self.s, self.p
        end = start
        while end < len(s) and end - start < 5 and (_is_alpha(s[end]) or s[end] in _SPECIAL):
            end += 1
        run = s[start:end]
        self.p = end
        if run == b"null":
            return NULL
        best = max((name for name in _OPS if run.startswith(name)), key=len, default=None)
        if best is None:  # refused: Redis reports the error at the end of the whole run
            while self.p < len(s) and (_is_alpha(s[self.p]) or s[self.p] in _SPECIAL):
                self.p += 1
            return None
        self.p = start + len(best)
        return _OP[_OPS[best]]


# -- compiler (shunting-yard to postfix) ---------------------------------------------------


def _compile(tokens: list[Any]) -> list[Any]:
    program: list[Any] = []
    ops: list[int] = []
    depth = 0  # values the program would leave on the stack

    def move(op: int) -> None:
        nonlocal depth
        arity = 1 if op == _NOT else 2
        if depth < arity:
            raise CompileError(0)
        program.append(_OP[op])
        depth = depth - arity + 1

    for token in tokens:
        if token.__class__ is not _Op:
            program.append(token)
            depth += 1
            continue
        op = token.code
        if op == _OPAREN:
            ops.append(op)
            continue
        if op == _CPAREN:
            while True:
                if not ops:
                    raise CompileError(0)
                top = ops.pop()
                if top == _OPAREN:
                    break
                move(top)
            continue
        prec = _PREC[op]
        while ops and ops[-1] != _OPAREN:
            top_prec = _PREC[ops[-1]]
            if top_prec < prec or ((op == _POW or op == _NOT) and top_prec <= prec):
                break  # ** and the unary not group right to left
            move(ops.pop())
        ops.append(op)
    while ops:
        top = ops.pop()
        if top == _OPAREN:
            raise CompileError(0)
        move(top)
    if depth != 1:
        raise CompileError(0)
    return program


# -- evaluation -------------------------------------------------------------------------------


def to_num(value: Any) -> float:
    if value.__class__ is float:
        return value
    if value.__class__ is bytes and len(value) < 256 and _STRTOD.match(value):
        return float(value)
    return 0.0


def to_bool(value: Any) -> bool:
    if value.__class__ is float:
        return value != 0
    if value.__class__ is bytes:
        return len(value) > 0
    return value is not NULL


def equal(a: Any, b: Any) -> bool:
    if a.__class__ is bytes and b.__class__ is bytes:
        return a == b
    if a.__class__ is float and b.__class__ is float:
        return a == b
    if a is NULL or b is NULL:
        return a is b
    return to_num(a) == to_num(b)


def _div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _mod(a: float, b: float) -> float:
    try:
        return math.fmod(a, b)
    except ValueError:
        return math.nan


def _pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf if a > 0 or float(b).is_integer() and b % 2 == 0 else -math.inf
    except ValueError:
        return math.inf if a == 0 else math.nan


def _in(a: Any, b: Any) -> float:
    if b.__class__ is tuple:
        return 1.0 if any(equal(a, item) for item in b) else 0.0
    if a.__class__ is bytes and b.__class__ is bytes:
        return 1.0 if a in b else 0.0
    return 0.0


_BINARY: dict[int, Callable[[Any, Any], float]] = {
    _POW: lambda a, b: _pow(to_num(a), to_num(b)),
    _MUL: lambda a, b: to_num(a) * to_num(b),
    _DIV: lambda a, b: _div(to_num(a), to_num(b)),
    _MOD: lambda a, b: _mod(to_num(a), to_num(b)),
    _ADD: lambda a, b: to_num(a) + to_num(b),
    _SUB: lambda a, b: to_num(a) - to_num(b),
    _GT: lambda a, b: 1.0 if to_num(a) > to_num(b) else 0.0,
    _GTE: lambda a, b: 1.0 if to_num(a) >= to_num(b) else 0.0,
    _LT: lambda a, b: 1.0 if to_num(a) < to_num(b) else 0.0,
    _LTE: lambda a, b: 1.0 if to_num(a) <= to_num(b) else 0.0,
    _EQ: lambda a, b: 1.0 if equal(a, b) else 0.0,
    _NEQ: lambda a, b: 0.0 if equal(a, b) else 1.0,
    _IN: _in,
    _AND: lambda a, b: 1.0 if to_bool(a) and to_bool(b) else 0.0,
    _OR: lambda a, b: 1.0 if to_bool(a) or to_bool(b) else 0.0,
}


class Filter:
    """A compiled FILTER expression; ``matches(fields)`` takes ``parse_attributes``'s result."""

    __slots__ = ("source", "program", "selectors")

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.program = _compile(_Tokenizer(source).run())
        self.selectors = tuple({item.name for item in self.program if isinstance(item, _Selector)})

    def matches(self, fields: dict[bytes, Any] | None) -> bool:
        if fields is None:
            return False
        for name in self.selectors:
            if name not in fields:
                return False
        stack: list[Any] = []
        for item in self.program:
            cls = item.__class__
            if cls is _Selector:
                stack.append(fields[item.name])
            elif cls is _Op:
                op = item.code
                if op == _NOT:
                    stack.append(0.0 if to_bool(stack.pop()) else 1.0)
                else:
                    b = stack.pop()
                    stack.append(_BINARY[op](stack.pop(), b))
            else:
                stack.append(item)
        return to_bool(stack.pop())


@gc_paused
def compile_filter(source: bytes) -> Filter:
    """Compile or raise ``CompileError`` (its ``pos`` is where Redis says the error is)."""
    return Filter(source)
