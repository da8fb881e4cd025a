"""Tokens of RediSearch's query language (the v2 lexer's classes: ``lexer.rl``).

A term is a run of characters that are not ASCII punctuation, control or space (``_`` and any
backslash-escaped character included); ``@name`` is a field modifier, ``$name`` a parameter;
``"..."`` and ``'...'`` are exact phrases; ``term*``, ``*term``, ``*term*`` are prefix, suffix and
infix; ``w'...'`` is a wildcard pattern; ``@f==3`` style comparisons come as one token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pion.protocol.errors import ReplyError

_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^`{|}~")
_NUMBER = re.compile(r"[+-]?(inf|(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)(?![\w.])", re.I)
_COMPARE = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*")


@dataclass
class Token:
    kind: str
    text: str
    pos: int
    value: object = None


def syntax_error(pos: int, near: str) -> ReplyError:
    return ReplyError(f"Syntax error at offset {pos} near {near}")


def is_term_char(ch: str) -> bool:
    return not (ch in _PUNCT or ch.isspace() or ord(ch) < 32)


class Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def tokens(self) -> list[Token]:
        out: list[Token] = []
        while True:
            tok = self.next()
            out.append(tok)
            if tok.kind == "EOF":
                return out

    def read_term(self, start: int) -> tuple[str, int]:
        """A term starting at ``start`` (escapes resolved); returns (term, end)."""
        text = self.text
        i = start
        chars: list[str] = []
        while i < len(text):
            ch = text[i]
            if ch == "\\":
                if i + 1 == len(text):  # a backslash that ends the query escapes nothing: dropped
                    i += 1
                    break
                chars.append(text[i + 1])
                i += 2
            elif is_term_char(ch):
                chars.append(ch)
                i += 1
            else:
                break
        return "".join(chars), i

    def next(self) -> Token:
        text = self.text
        n = len(text)
        while self.pos < n and text[self.pos].isspace():
            self.pos += 1
        if self.pos == n - 1 and text[self.pos] == "\\":  # as RediSearch: a trailing lone backslash is nothing
            self.pos = n
        if self.pos >= n:
            return Token("EOF", "", self.pos)
        start = self.pos
        ch = text[start]
        two = text[start:start + 2]
        if two == "=>":
            self.pos += 2
            return Token("ARROW", two, start)
        simple = {"(": "LP", ")": "RP", "{": "LB", "}": "RB", "[": "LSQB", "]": "RSQB", ":": "COLON",
                  ";": "SEMICOLON", "|": "OR", "~": "TILDE", "%": "PERCENT"}
        if ch in simple:
            self.pos += 1
            return Token(simple[ch], ch, start)
        if ch == "w" and start + 1 < n and text[start + 1] == "'":
            end = self._find_quote(start + 2, "'")
            self.pos = end + 1
            return Token("WILDCARD", text[start + 2:end], start)
        if ch in "\"'":
            end = self._find_quote(start + 1, ch)
            self.pos = end + 1
            raw = text[start + 1:end]
            if self.pos < n and text[self.pos] == "*":
                self.pos += 1
                return Token("PREFIX", _unescape(raw), start)
            return Token("EXACT", raw, start)
        if ch == "*":
            rest = start + 1
            if rest < n and text[rest] in "\"'":
                end = self._find_quote(rest + 1, text[rest])
                word = _unescape(text[rest + 1:end])
                self.pos = end + 1
                if self.pos < n and text[self.pos] == "*":
                    self.pos += 1
                    return Token("CONTAINS", word, start)
                return Token("SUFFIX", word, start)
            if rest < n and (is_term_char(text[rest]) or text[rest] in "\\$"):
                dollar = text[rest] == "$"
                word, end = self.read_term(rest + 1 if dollar else rest)
                self.pos = end
                kind = "SUFFIX"
                if end < n and text[end] == "*":
                    self.pos = end + 1
                    kind = "CONTAINS"
                return Token(kind, word, start, "$" if dollar else None)
            self.pos += 1
            return Token("STAR", "*", start)
        if ch == "-" or ch == "+":
            number = _NUMBER.match(text, start)
            if ch == "-" and (number is None or not _prev_allows_number(text, start)):
                self.pos += 1
                return Token("MINUS", "-", start)
            if number is not None:
                self.pos = number.end()
                return Token("NUMBER", number.group(0), start, float(number.group(0)))
            self.pos += 1
            return Token("MINUS" if ch == "-" else "PLUS", ch, start)
        if ch == "@":
            name, end = self.read_term(start + 1)
            if not name:
                raise syntax_error(start, f"'{ch}'")
            compare = _COMPARE.match(text, end)
            if compare is not None and compare.group(1):
                self.pos = compare.end()
                return Token("COMPARE", name, start, compare.group(1))
            self.pos = end
            return Token("MODIFIER", name, start)
        if ch == "$":
            name, end = self.read_term(start + 1)
            if not name:
                raise syntax_error(start, "'$'")
            self.pos = end
            if end < n and text[end] == "*":
                self.pos = end + 1
                return Token("PREFIX", name, start, "$")
            return Token("ATTRIBUTE", name, start)
        number = _NUMBER.match(text, start)
        if number is not None and (number.end() >= n or not is_term_char(text[number.end()])):
            self.pos = number.end()
            if self.pos < n and text[self.pos] == "*":
                self.pos += 1
                return Token("PREFIX", number.group(0), start)
            return Token("NUMBER", number.group(0), start, float(number.group(0)))
        if is_term_char(ch) or ch == "\\":
            word, end = self.read_term(start)
            self.pos = end
            if end < n and text[end] == "*":
                self.pos = end + 1
                return Token("PREFIX", word, start)
            if word.lower() == "ismissing" and end < n and text[end] == "(":
                return Token("ISMISSING", word, start)
            return Token("TERM", word, start)
        raise syntax_error(start, repr_near(text, start))

    def _find_quote(self, i: int, quote: str) -> int:
        text = self.text
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == quote:
                return i
            i += 1
        raise syntax_error(len(text), "<end of query>: unterminated quote")


def _prev_allows_number(text: str, pos: int) -> bool:
    """``-3`` is a number only where a number may stand (after ``[``, ``(``, a space in a range)."""
    j = pos - 1
    while j >= 0 and text[j] == " ":
        j -= 1
    return j >= 0 and text[j] in "[("


def _unescape(raw: str) -> str:
    return re.sub(r"\\(.)", r"\1", raw)


def repr_near(text: str, pos: int) -> str:
    return text[pos:pos + 10] or "<end>"
