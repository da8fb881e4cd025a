"""serde_json's reading of a JSON text, where Python's json module reads it differently.

Why: RedisJSON parses with serde_json, and clients see its answers: the error texts with their
line and column (``trailing comma at line 1 column 8``, ``EOF while parsing a list``, ``invalid
escape``, ``number out of range``), a first value followed by anything else accepted (``[1]x``
stores ``[1]``), 128 open brackets refused (``recursion limit exceeded``), lone UTF-16 surrogates
refused. Python's parser is the fast path (``json_value.loads``); this scanner runs only when it
fails or when the text holds something the two read differently, and follows serde_json's
``Deserializer`` step for step: the same checks in the same order, ``error`` at the bytes read so
far and ``peek_error`` one byte further, columns counted in bytes since the last newline.
Compared on Redis Stack (RedisJSON 2.8.3) over about 130 texts (``tests/unit/test_json_serde.py``).
"""

from __future__ import annotations

import math

#: serde_json's recursion limit: the 128th open bracket is refused
RECURSION_LIMIT = 128
_WS = frozenset(b" \n\t\r")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = frozenset(b'"\\/bfnrt')
_I32_MAX = 2**31 - 1


class SerdeError(ValueError):
    """serde_json's message, with its position (``str(exc)``)."""


class _Reader:
    __slots__ = ("data", "i", "n", "depth")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.i = 0
        self.n = len(data)
        self.depth = RECURSION_LIMIT

    # positions: serde's position() and peek_position()
    def _at(self, index: int) -> str:
        start = self.data.rfind(b"\n", 0, index) + 1
        line = self.data.count(b"\n", 0, index) + 1
        return f"at line {line} column {index - start}"

    def error(self, message: str) -> SerdeError:
        return SerdeError(f"{message} {self._at(self.i)}")

    def peek_error(self, message: str) -> SerdeError:
        return SerdeError(f"{message} {self._at(min(self.i + 1, self.n))}")

    def peek(self) -> int | None:
        return self.data[self.i] if self.i < self.n else None

    def next_char(self) -> int | None:
        if self.i < self.n:
            self.i += 1
            return self.data[self.i - 1]
        return None

    def whitespace(self) -> int | None:
        data, i, n = self.data, self.i, self.n
        while i < n and data[i] in _WS:
            i += 1
        self.i = i
        return data[i] if i < n else None

    # values
    def value(self) -> None:
        peek = self.whitespace()
        if peek is None:
            raise self.peek_error("EOF while parsing a value")
        if peek == 0x6E:  # n
            self.i += 1
            self.ident(b"ull")
        elif peek == 0x74:  # t
            self.i += 1
            self.ident(b"rue")
        elif peek == 0x66:  # f
            self.i += 1
            self.ident(b"alse")
        elif peek == 0x2D:  # -
            self.i += 1
            self.number()
        elif peek in _DIGITS:
            self.number()
        elif peek == 0x22:  # "
            self.i += 1
            self.string()
        elif peek == 0x5B:  # [
            self.enter()
            self.i += 1
            self.seq()
            self.depth += 1
        elif peek == 0x7B:  # {
            self.enter()
            self.i += 1
            self.map()
            self.depth += 1
        else:
            raise self.peek_error("expected value")

    def enter(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            raise self.peek_error("recursion limit exceeded")

    def ident(self, rest: bytes) -> None:
        for expected in rest:
            got = self.next_char()
            if got is None:
                raise self.error("EOF while parsing a value")
            if got != expected:
                raise self.error("expected ident")

    def number(self) -> None:
        """serde's parse_integer/parse_number; the value is Python's (float() is correctly
        rounded), out of range where it is infinite, as serde's is."""
        start = self.i
        first = self.next_char()
        if first is None:
            raise self.error("EOF while parsing a value")
        if first == 0x30:  # 0
            if self.peek() in _DIGITS:
                raise self.peek_error("invalid number")
        elif first not in _DIGITS:
            raise self.error("invalid number")
        else:
            while self.peek() in _DIGITS:
                self.i += 1
        if self.peek() == 0x2E:  # .
            self.i += 1
            if self.peek() not in _DIGITS:
                raise self.peek_error("invalid number" if self.peek() is not None else "EOF while parsing a value")
            while self.peek() in _DIGITS:
                self.i += 1
        if self.peek() in (0x65, 0x45):  # e E
            self.i += 1
            positive = True
            if self.peek() in (0x2B, 0x2D):
                positive = self.data[self.i] == 0x2B
                self.i += 1
            got = self.next_char()
            if got is None:
                raise self.error("EOF while parsing a value")
            if got not in _DIGITS:
                raise self.error("invalid number")
            exp = got - 0x30
            while self.peek() in _DIGITS:
                digit = self.data[self.i] - 0x30
                self.i += 1
                if exp * 10 + digit > _I32_MAX:  # serde's parse_exponent_overflow
                    mantissa = self.data[start:self.i].split(b"e")[0].split(b"E")[0].lstrip(b"-")
                    if positive and mantissa.strip(b"0.") != b"":
                        raise self.error("number out of range")
                    while self.peek() in _DIGITS:
                        self.i += 1
                    return
                exp = exp * 10 + digit
        text = self.data[start - 1 if start and self.data[start - 1] == 0x2D else start:self.i]
        if math.isinf(float(text)):
            raise self.error("number out of range")

    def string(self) -> None:
        data, n = self.data, self.n
        while True:
            if self.i >= n:
                raise self.error("EOF while parsing a string")
            ch = data[self.i]
            self.i += 1
            if ch == 0x22:
                return
            if ch == 0x5C:  # backslash
                self.escape()
            elif ch < 0x20:
                raise self.error("control character (\\u0000-\\u001F) found while parsing a string")

    def hex4(self) -> int:
        """serde's decode_hex_escape: fewer than 4 bytes left is the end of the string (all of
        it read); otherwise the first bad digit is an invalid escape, counted as read."""
        if self.i + 4 > self.n:
            self.i = self.n
            raise self.error("EOF while parsing a string")
        value = 0
        for _ in range(4):
            got = self.data[self.i]
            self.i += 1
            if got not in _HEX:
                raise self.error("invalid escape")
            value = value * 16 + int(chr(got), 16)
        return value

    def escape(self) -> None:
        got = self.next_char()
        if got is None:
            raise self.error("EOF while parsing a string")
        if got in _SIMPLE_ESCAPES:
            return
        if got != 0x75:  # u
            raise self.error("invalid escape")
        unit = self.hex4()
        if 0xDC00 <= unit <= 0xDFFF:
            raise self.error("lone leading surrogate in hex escape")
        if 0xD800 <= unit <= 0xDBFF:
            for expected in (0x5C, 0x75):  # the low half's backslash and u
                got = self.next_char()
                if got is None:
                    raise self.error("EOF while parsing a string")
                if got != expected:
                    raise self.error("unexpected end of hex escape")
            if not 0xDC00 <= self.hex4() <= 0xDFFF:
                raise self.error("lone leading surrogate in hex escape")

    def seq(self) -> None:
        first = True
        while True:
            peek = self.whitespace()
            if peek == 0x5D:  # ]
                self.i += 1
                return
            if peek == 0x2C and not first:  # ,
                self.i += 1
                peek = self.whitespace()
            elif peek is None:
                raise self.peek_error("EOF while parsing a list")
            elif first:
                first = False
            else:
                raise self.peek_error("expected `,` or `]`")
            if peek == 0x5D:
                raise self.peek_error("trailing comma")
            if peek is None:
                raise self.peek_error("EOF while parsing a value")
            self.value()

    def map(self) -> None:
        first = True
        while True:
            peek = self.whitespace()
            if peek == 0x7D:  # }
                self.i += 1
                return
            if peek == 0x2C and not first:
                self.i += 1
                peek = self.whitespace()
            elif peek is None:
                raise self.peek_error("EOF while parsing an object")
            elif first:
                first = False
            else:
                raise self.peek_error("expected `,` or `}`")
            if peek == 0x22:
                self.i += 1
                self.string()
            elif peek == 0x7D:
                raise self.peek_error("trailing comma")
            elif peek is None:
                raise self.peek_error("EOF while parsing a value")
            else:
                raise self.peek_error("key must be a string")
            peek = self.whitespace()
            if peek == 0x3A:  # :
                self.i += 1
            elif peek is None:
                raise self.peek_error("EOF while parsing an object")
            else:
                raise self.peek_error("expected `:`")
            self.value()


def first_value_end(data: bytes) -> int:
    """The offset after the text's first JSON value as serde_json reads it (what follows is not
    read, as RedisJSON does not); raises SerdeError with serde's message where it refuses."""
    reader = _Reader(data)
    reader.value()
    return reader.i
